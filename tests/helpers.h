/* tests/helpers.h - process, file and port helpers shared by the tests that
 * run programs (the segtrain binary, launcher workers) rather than functions.
 *
 * One copy each of what the config, data, model, dist and train tests used
 * to write again: a free loopback port, a raw TCP connection, this
 * executable's path, shell commands with their exit status, reading and
 * writing a whole file, the monotonic clock, capturing stderr, running an
 * in-process command, a number from JSON, a forked rank's launch
 * environment, a test case bounded in time, `segtrain train` on a base.yaml
 * and its log. Header-only and static, like tests/testutil.h, so every test
 * executable stays one file.
 */
#ifndef SG_TESTS_HELPERS_H
#define SG_TESTS_HELPERS_H

#include <arpa/inet.h>
#include <limits.h>
#include <math.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
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

/* n distinct TCP ports on 127.0.0.1 (n <= 8) that were free a moment ago:
 * all n are bound at once, so none is another's neighbour by chance (a
 * launcher's default --agent-port is --master-port + 1, which nothing checked
 * was free: an outgoing connection of a test running beside it may hold it).
 * Returns 0, or -1 with out[] unset. */
static inline int th_free_ports(int n, int *out) {
    int fds[8];
    int got = 0, rc = 0;
    if (n < 1 || n > 8) return -1;
    for (; got < n; got++) {
        fds[got] = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
        socklen_t sl = sizeof sa;
        if (fds[got] < 0 || bind(fds[got], (struct sockaddr *)&sa, sizeof sa) != 0 ||
            getsockname(fds[got], (struct sockaddr *)&sa, &sl) != 0) {
            if (fds[got] >= 0) close(fds[got]);
            rc = -1;
            break;
        }
        out[got] = ntohs(sa.sin_port);
    }
    for (int i = 0; i < got; i++) close(fds[i]);
    return rc;
}

/* A TCP connection to addr:port (a numeric IPv4 address), or -1. Sends and
 * receives time out after 5 s, so no blocking call of a test that speaks a
 * wire protocol by hand (store, mesh) can hang it. */
static inline int th_raw_connect(const char *addr, int port) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    inet_pton(AF_INET, addr, &sa.sin_addr);
    if (fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
        close(fd);
        return -1;
    }
    struct timeval tv = {5, 0};
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    return fd;
}

/* The environment torchrun gives a worker, for a forked rank of a test job
 * on this machine: RANK, WORLD_SIZE, MASTER_ADDR=127.0.0.1, MASTER_PORT
 * (port, a decimal string); with local != 0 also LOCAL_RANK = rank and
 * LOCAL_WORLD_SIZE = world (every rank on this node). */
static inline void th_rank_env(int rank, int world, const char *port, int local) {
    char rs[16], ws[16];
    snprintf(rs, sizeof rs, "%d", rank);
    snprintf(ws, sizeof ws, "%d", world);
    setenv("RANK", rs, 1);
    setenv("WORLD_SIZE", ws, 1);
    if (local) {
        setenv("LOCAL_RANK", rs, 1);
        setenv("LOCAL_WORLD_SIZE", ws, 1);
    }
    setenv("MASTER_ADDR", "127.0.0.1", 1);
    setenv("MASTER_PORT", port, 1);
}

/* Runs fn (a test case) in a forked child, so that a hang or a crash cannot
 * take the test with it; the child exits 1 when *failed (the harness's
 * tu_case_failed) is set after fn. Returns 0 when the child exited 0 within
 * bound_s seconds; else -1 after saying why under `name` (a child still
 * running then is killed: a hang). */
static inline int th_bounded(void (*fn)(void), const int *failed, int bound_s, const char *name) {
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) {
        fprintf(stderr, "  %s: fork failed\n", name);
        return -1;
    }
    if (pid == 0) {
        fn();
        fflush(stderr);
        _exit(*failed ? 1 : 0);
    }
    int st = 0;
    double t0 = th_now();
    while (waitpid(pid, &st, WNOHANG) == 0) {
        if (th_now() - t0 > bound_s) {
            kill(pid, SIGKILL);
            waitpid(pid, &st, 0);
            fprintf(stderr, "  %s still running after %d s: hung\n", name, bound_s);
            return -1;
        }
        usleep(20 * 1000);
    }
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        fprintf(stderr, "  %s failed (wait status %d)\n", name, st);
        return -1;
    }
    return 0;
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

/* The pids of a process's children (from /proc), at most cap; how many. */
static inline int th_children(pid_t parent, pid_t *out, int cap) {
    char p[128];
    snprintf(p, sizeof p, "/proc/%d/task/%d/children", (int)parent, (int)parent);
    FILE *f = fopen(p, "r");
    int n = 0, pid;
    while (f && n < cap && fscanf(f, "%d", &pid) == 1) out[n++] = pid;
    if (f) fclose(f);
    return n;
}

/* The RANK variable of a running process's environment, or -1. */
static inline int th_env_rank(pid_t pid) {
    char p[128], buf[65536];
    snprintf(p, sizeof p, "/proc/%d/environ", (int)pid);
    FILE *f = fopen(p, "r");
    if (!f) return -1;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    for (size_t i = 0; i < n;) {
        if (!strncmp(buf + i, "RANK=", 5)) return atoi(buf + i + 5);
        i += strlen(buf + i) + 1;
    }
    return -1;
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

/* ---- stderr capture: what the code under test logs is what many tests
 * check. th_cap_begin sends fd 2 to a temporary file; th_cap_end puts it
 * back, echoes what was written (so a failing test's log still shows it)
 * and returns it as a NUL-terminated string owned here, valid until the
 * next th_cap_end. Captures do not nest. Aborts when the temporary file or
 * the buffer cannot be had (the test could check nothing). */
static FILE *th_cap_file __attribute__((unused));
static int th_cap_saved __attribute__((unused)) = -1;

static inline void th_cap_begin(void) {
    fflush(stderr);
    th_cap_file = tmpfile();
    if (!th_cap_file) abort();
    th_cap_saved = dup(2);
    dup2(fileno(th_cap_file), 2);
}

/* While capturing: waits until what was captured so far contains needle
 * (another thread of the code under test may log after the call that
 * caused it has returned), at most timeout_s seconds. 1 when found, else 0
 * (th_cap_end then shows what there is). */
static inline int th_cap_wait(const char *needle, double timeout_s) {
    static char buf[1 << 16];
    double t0 = th_now();
    for (;;) {
        fflush(stderr);
        ssize_t n = pread(fileno(th_cap_file), buf, sizeof buf - 1, 0);
        buf[n > 0 ? n : 0] = 0;
        if (strstr(buf, needle)) return 1;
        if (th_now() - t0 > timeout_s) return 0;
        usleep(10 * 1000);
    }
}

static inline const char *th_cap_end(void) {
    static char *buf;
    static size_t cap;
    fflush(stderr);
    dup2(th_cap_saved, 2);
    close(th_cap_saved);
    th_cap_saved = -1;
    long n = ftell(th_cap_file);
    if (n < 0) n = 0;
    if ((size_t)n + 1 > cap) {
        char *t = realloc(buf, (size_t)n + 1);
        if (!t) abort();
        buf = t;
        cap = (size_t)n + 1;
    }
    rewind(th_cap_file);
    size_t got = fread(buf, 1, (size_t)n, th_cap_file);
    buf[got] = 0;
    fclose(th_cap_file);
    th_cap_file = NULL;
    fprintf(stderr, "    (captured)\n%s", buf);
    return buf;
}

/* Runs an in-process command (cmd/commands.h's sg_cmd_*) on args[0..n-1];
 * n < 0 takes args up to a NULL entry. At most 63 arguments. Returns the
 * command's exit code. */
static inline int th_run_cmd(int (*fn)(int, char **), const char **args, int n) {
    char *argv[64];
    int k = 0;
    while ((n < 0 ? args[k] != NULL : k < n) && k < 63) {
        argv[k] = (char *)args[k];
        k++;
    }
    argv[k] = NULL;
    return fn(k, argv);
}

/* The number after "key": in a flat JSON text (metrics files, the eval
 * JSON); NAN when the key is absent or no number follows it. */
static inline double th_json_num(const char *json, const char *key) {
    char pat[96];
    snprintf(pat, sizeof pat, "\"%s\":", key);
    const char *p = strstr(json, pat);
    if (!p) return NAN;
    char *end;
    double v = strtod(p + strlen(pat), &end);
    return end == p + strlen(pat) ? NAN : v;
}

/* Writes text to path (truncating); 0, or -1 after naming the path. */
static inline int th_write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "  cannot write %s\n", path);
        return -1;
    }
    int ok = fputs(text, f) >= 0;
    ok = (fclose(f) == 0) && ok;
    if (!ok) fprintf(stderr, "  cannot write %s\n", path);
    return ok ? 0 : -1;
}

/* DIR/RUN.log as text (the first MiB) in a buffer owned here, valid until
 * the next call; "" when it cannot be read. For the tests that run the
 * binary with its output in DIR/RUN.log and grep it. */
static inline char *th_read_log(const char *dir, const char *run) {
    static char log[1 << 20];
    char path[1024];
    snprintf(path, sizeof path, "%s/%s.log", dir, run);
    FILE *f = fopen(path, "r");
    size_t n = f ? fread(log, 1, sizeof log - 1, f) : 0;
    if (f) fclose(f);
    log[n] = 0;
    return log;
}

/* `BIN [--nproc-per-node NPROC] train --config DIR/base.yaml --set
 * run_dir=DIR/RUN SETS`, stdout and stderr to DIR/RUN.log (NPROC 0: no
 * launcher); its exit status. For the tests that write DIR/base.yaml. */
static inline int th_train_run(const char *bin, const char *dir, const char *run, int nproc,
                               const char *sets) {
    char launch[64] = "";
    if (nproc > 0) snprintf(launch, sizeof launch, "--nproc-per-node %d ", nproc);
    return th_sh("%s %strain --config %s/base.yaml --set run_dir=%s/%s %s > %s/%s.log 2>&1", bin,
                 launch, dir, dir, run, sets, dir, run);
}

#endif
