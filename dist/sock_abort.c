/* dist/sock_abort.c - abortive close of a failed job's connections (see
 * dist/sock_abort.h). */
#include "dist/sock_abort.h"

#include <dirent.h>
#include <stdlib.h>
#include <sys/socket.h>

#include "core/log.h"

int sg_sock_abort_all(void) {
    DIR *d = opendir("/proc/self/fd");
    if (!d) return -1;
    int dfd = dirfd(d), n = 0, failed = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        char *end;
        long fd = strtol(e->d_name, &end, 10);
        if (*end || end == e->d_name || fd == dfd) continue;
        int type = 0;
        socklen_t tl = sizeof type;
        if (getsockopt((int)fd, SOL_SOCKET, SO_TYPE, &type, &tl) != 0 || type != SOCK_STREAM)
            continue; /* not a socket (ENOTSOCK), or not TCP/stream */
        struct sockaddr_storage a;
        socklen_t al = sizeof a;
        if (getsockname((int)fd, (struct sockaddr *)&a, &al) != 0 ||
            (a.ss_family != AF_INET && a.ss_family != AF_INET6))
            continue; /* a Unix socket (the launcher's report pipe): left as is */
        struct linger l = {.l_onoff = 1, .l_linger = 0};
        if (setsockopt((int)fd, SOL_SOCKET, SO_LINGER, &l, sizeof l) == 0) n++;
        else failed++;
    }
    closedir(d);
    if (failed)
        SG_WARN("%d TCP socket(s) could not be set to reset on close; they close gracefully "
                "(TIME_WAIT)",
                failed);
    return n;
}
