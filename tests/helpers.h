/* tests/helpers.h - process, file and port helpers shared by the tests that
 * run programs (the segtrain binary, launcher workers) rather than functions.
 *
 * One copy each of what the dist, train and data tests used to write again:
 * a free loopback port, this executable's path, shell commands with their
 * exit status, reading a whole file, the monotonic clock. Header-only and
 * static, like tests/testutil.h, so every test executable stays one file.
 */
#ifndef SG_TESTS_HELPERS_H
#define SG_TESTS_HELPERS_H

#include <arpa/inet.h>
#include <limits.h>
#include <signal.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* Seconds on the monotonic clock. */
static inline double th_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* A TCP port on 127.0.0.1 that was free a moment ago (bound to port 0 and
 * released), or -1. Another process may take it in between; the tests that
 * use it start their server at once. */
static inline int th_free_port(void) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t sl = sizeof sa;
    int port = -1;
    if (bind(fd, (struct sockaddr *)&sa, sizeof sa) == 0 &&
        getsockname(fd, (struct sockaddr *)&sa, &sl) == 0)
        port = ntohs(sa.sin_port);
    close(fd);
    return port;
}

/* This executable's path (to re-run it as a worker); 0, or -1. */
static inline int th_self_exe(char *out, size_t n) {
    ssize_t k = readlink("/proc/self/exe", out, n - 1);
    if (k <= 0) return -1;
    out[k] = 0;
    return 0;
}

/* Exit status of a wait() status: the code, or 128 + the signal. */
static inline int th_exit_status(int st) {
    if (st == -1) return -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* Ends a child that may still run (SIGKILL, then reaps it), for a test's
 * exit path: a launcher's workers die with it (their parent-death signal).
 * No-op for pid <= 0 or a child already reaped. */
static inline void th_kill_child(pid_t pid) {
    if (pid > 0 && waitpid(pid, NULL, WNOHANG) == 0) {
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
    }
}

/* Runs a printf-formatted command line with /bin/sh, echoing it to stderr;
 * returns its exit status (128 + signal when killed). */
static int th_sh(const char *fmt, ...) __attribute__((format(printf, 1, 2), unused));
static int th_sh(const char *fmt, ...) {
    char cmd[8192];
    va_list ap;
    va_start(ap, fmt);
    int len = vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    if (len < 0 || (size_t)len >= sizeof cmd) {
        fprintf(stderr, "  th_sh: command longer than %zu bytes\n", sizeof cmd);
        return -1;
    }
    fprintf(stderr, "  $ %s\n", cmd);
    fflush(stderr);
    return th_exit_status(system(cmd));
}

/* The whole file as a NUL-terminated malloc'd string (free it), or NULL. */
static inline char *th_read_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 1 << 16, len = 0;
    char *s = malloc(cap);
    while (s) {
        len += fread(s + len, 1, cap - len - 1, f);
        if (len < cap - 1) break;
        char *t = realloc(s, cap *= 2);
        if (!t) {
            free(s);
            s = NULL;
            break;
        }
        s = t;
    }
    if (s) s[len] = 0;
    fclose(f);
    return s;
}

#endif
