/* tests/dist/dist_harness.h - runs a test executable as N workers through
 * the real launcher (dist/launch.h) and captures the launcher's output.
 *
 * A test's main() checks getenv("RANK"): set -> it is a worker (run the mode
 * named in argv[1]); unset -> it is the driver, which calls dh_launch. */
#ifndef SG_TESTS_DIST_HARNESS_H
#define SG_TESTS_DIST_HARNESS_H

#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "dist/launch.h"
#include "tests/helpers.h"

/* Runs `launcher_args` (NULL-terminated, e.g. {"--nproc-per-node", "2",
 * "mode", NULL}) in a forked launcher whose worker program is this test
 * executable. Output (stdout+stderr) goes to *out (malloc'd, also echoed to
 * our stderr). Returns the launcher's exit status (or 128+signal), and the
 * wall time in *secs. */
static int dh_launch_sig(const char *const *launcher_args, char **out, double *secs,
                         double sig_after, int sig);
static int dh_launch(const char *const *launcher_args, char **out, double *secs) {
    return dh_launch_sig(launcher_args, out, secs, -1, 0);
}

/* When set: dh_launch_sig sends its signal only once this returns 1 (and
 * sig_after has passed), so a loaded machine cannot signal the launcher
 * before its workers are ready; after 60 s it sends it anyway. */
static int (*dh_ready)(void) = NULL;

/* Same, sending `sig` to the launcher sig_after seconds after its start
 * (sig_after < 0: never). */
static int dh_launch_sig(const char *const *launcher_args, char **out, double *secs,
                         double sig_after, int sig) {
    char exe[PATH_MAX];
    if (th_self_exe(exe, sizeof exe) != 0) return -1;
    int p[2];
    if (pipe(p)) return -1;
    double t0 = th_now();
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
        close(p[0]);
        dup2(p[1], 1);
        dup2(p[1], 2);
        char *argv[64];
        int argc = 0;
        argv[argc++] = exe;
        for (int i = 0; launcher_args[i] && argc < 63; i++) argv[argc++] = (char *)launcher_args[i];
        argv[argc] = NULL;
        _exit(sg_launch(argc, argv, exe));
    }
    close(p[1]);
    size_t cap = 1 << 16, len = 0;
    char *buf = malloc(cap);
    for (;;) {
        if (cap - len < 4096) buf = realloc(buf, cap *= 2);
        if (sig_after >= 0) {
            if (th_now() >= t0 + sig_after && (!dh_ready || dh_ready() || th_now() > t0 + 60)) {
                kill(pid, sig);
                sig_after = -1;
                continue;
            }
            double left = t0 + sig_after - th_now();
            if (left < 0.02) left = 0.02; /* waiting for dh_ready: look again soon */
            struct pollfd pfd = {.fd = p[0], .events = POLLIN};
            if (poll(&pfd, 1, (int)(left * 1000) + 1) == 0) continue;
        }
        ssize_t r = read(p[0], buf + len, cap - len - 1);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        len += (size_t)r;
    }
    buf[len] = 0;
    close(p[0]);
    int st = 0;
    waitpid(pid, &st, 0);
    if (secs) *secs = th_now() - t0;
    fprintf(stderr, "---- launcher output ----\n%s---- end ----\n", buf);
    if (out) *out = buf;
    else free(buf);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

#endif
