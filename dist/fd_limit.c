/* dist/fd_limit.c - the descriptor count a job needs, and RLIMIT_NOFILE
 * raised to it or a clear error (dist/fd_limit.h). */
#include "dist/fd_limit.h"

#include <errno.h>
#include <string.h>
#include <sys/resource.h>

#include "core/log.h"

/* Files, logs, the loader's workers and pipes, shared libraries, epoll and
 * event fds of Gloo's loop: what a rank holds whatever the world size
 * (measured: 12-20 at 8 ranks besides the sockets). */
#define FD_FIXED 64L

long sg_fd_need_rank(int world, int hosts_store) {
    long peers = world > 1 ? world - 1 : 0;
    long need = FD_FIXED + 3 * peers + 2;
    if (hosts_store) need += 2L * world;
    return need;
}

long sg_fd_need_launcher(int local, int world) { return FD_FIXED + 3L * local + 2L * world; }

sg_status sg_fd_limit_ensure(long need, const char *who, const char *what) {
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0) {
        SG_ERROR("%s: cannot read the open-file limit (getrlimit RLIMIT_NOFILE): %s", who,
                 strerror(errno));
        return SG_ERR_RUNTIME;
    }
    if (rl.rlim_cur == RLIM_INFINITY || (long)rl.rlim_cur >= need) return SG_OK;
    if (rl.rlim_max == RLIM_INFINITY || (long)rl.rlim_max >= need) {
        rlim_t was = rl.rlim_cur;
        rl.rlim_cur = (rlim_t)need;
        if (setrlimit(RLIMIT_NOFILE, &rl) != 0) {
            SG_ERROR("%s: cannot raise the open-file limit from %ld to %ld (setrlimit "
                     "RLIMIT_NOFILE): %s; run `ulimit -n %ld` before starting the job",
                     who, (long)was, need, strerror(errno), need);
            return SG_ERR_RUNTIME;
        }
        SG_INFO("%s: raised the open-file limit from %ld to %ld (%s)", who, (long)was, need, what);
        return SG_OK;
    }
    SG_ERROR("%s: needs %ld open files (%s) but the limit is %ld and its hard limit %ld: "
             "raise the hard limit (`ulimit -n %ld` as root, or the container's nofile ulimit), or "
             "start fewer ranks on this host",
             who, need, what, (long)rl.rlim_cur, (long)rl.rlim_max, need);
    return SG_ERR_CONFIG;
}
