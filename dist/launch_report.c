/* dist/launch_report.c - the worker-to-launcher report pipe
 * (dist/launch_report.h). */
#include "dist/launch_report.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/util.h"
#include "dist/store.h"

static int g_fd = -2; /* -2: not looked at yet */

int sg_launch_report_open(void) {
    if (g_fd != -2) return g_fd;
    g_fd = -1;
    const char *v = getenv(SG_LAUNCH_REPORT_ENV);
    if (!v || !*v) return -1;
    const char *colon = strchr(v, ':');
    char fds[16];
    long fd = -1, pid = -1;
    if (!colon || (size_t)(colon - v) >= sizeof fds) return -1;
    memcpy(fds, v, (size_t)(colon - v));
    fds[colon - v] = 0;
    if (sg_parse_long(fds, 3, 1 << 20, &fd) || sg_parse_long(colon + 1, 2, 1L << 30, &pid))
        return -1;
    /* only the launcher's own children: a grandchild inherits the variable
     * but not (close-on-exec) the descriptor, which may then be anything */
    if ((long)getppid() != pid) return -1;
    struct stat st;
    if (fstat((int)fd, &st) || !S_ISFIFO(st.st_mode)) return -1;
    fcntl((int)fd, F_SETFD, FD_CLOEXEC);
    int fl = fcntl((int)fd, F_GETFL);
    if (fl >= 0) fcntl((int)fd, F_SETFL, fl | O_NONBLOCK);
    g_fd = (int)fd;
    return g_fd;
}

void sg_launch_report_culprit(int self, int culprit, int state) {
    int fd = sg_launch_report_open();
    if (fd < 0) return;
    char line[64];
    int n = snprintf(line, sizeof line, "culprit %d %d %d\n", self, culprit, state);
    if (n > 0 &&
        write(fd, line, (size_t)n) != n) { /* full or closed: the summary is less precise */
    }
}

void sg_launch_report_checkpoint(long long iter) {
    int fd = sg_launch_report_open();
    if (fd < 0) return;
    char line[64];
    int n = snprintf(line, sizeof line, "checkpoint %lld\n", iter);
    if (n > 0 && write(fd, line, (size_t)n) != n) { /* full or closed: counted as no progress */
    }
}

sg_status sg_launch_report_parse_checkpoint(const char *line, size_t len, long long *iter) {
    char buf[64];
    if (len >= sizeof buf) return SG_ERR_RUNTIME;
    memcpy(buf, line, len);
    buf[len] = 0;
    if (strncmp(buf, "checkpoint ", 11) != 0) return SG_ERR_RUNTIME;
    long v;
    if (sg_parse_long(buf + 11, 0, LONG_MAX, &v) != 0) return SG_ERR_RUNTIME;
    *iter = v;
    return SG_OK;
}

sg_status sg_launch_report_parse(const char *line, size_t len, int *self, int *culprit,
                                 int *state) {
    char buf[64];
    if (len >= sizeof buf) return SG_ERR_RUNTIME;
    memcpy(buf, line, len);
    buf[len] = 0;
    char tail;
    if (sscanf(buf, "culprit %d %d %d%c", self, culprit, state, &tail) != 3) return SG_ERR_RUNTIME;
    if (*self < 0 || *culprit < 0 || *state < SG_RANK_DEAD || *state > SG_LAUNCH_RANK_FAILED)
        return SG_ERR_RUNTIME;
    return SG_OK;
}

const char *sg_launch_report_phrase(int state) {
    switch (state) {
    case SG_RANK_DEAD: return "exited or was killed";
    case SG_RANK_HUNG: return "is stopped or hung";
    case SG_LAUNCH_RANK_FAILED: return "failed on its own error";
    default: return "(hosting the rendezvous store) was not reachable";
    }
}
