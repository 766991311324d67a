/* cmd/launch.c - `segtrain --nproc-per-node N ...`: the launcher's command
 * entry point. Finds this program's own path (each worker runs it again) and
 * hands the command line to the launcher (dist/launch.h). */
#include "dist/launch.h"

#include <errno.h>
#include <limits.h>
#include <string.h>
#include <unistd.h>

#include "cmd/commands.h"
#include "core/log.h"

int sg_cmd_launch(int argc, char **argv) {
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0) {
        SG_ERROR("launcher: cannot find this program's path (/proc/self/exe): %s", strerror(errno));
        return 1;
    }
    exe[n] = 0;
    return sg_launch(argc, argv, exe);
}
