/* tests/dist/test_store.c - the rendezvous store (dist/store.h) with 3
 * "ranks" as threads of one process: set/get/add/check, get blocking until a
 * later set, barrier, a barrier timeout naming the rank that never came, and
 * the dead-rank diagnosis when a connection drops without goodbye, and that
 * a diagnosis every rank asks for costs O(N) store requests (one rank probes,
 * the others read its verdict, and probe themselves when it stops or
 * publishes a malformed verdict), that a stop cuts a diagnosis short, and
 * that a client whose store host is gone fails at once instead of retrying
 * its connection until the timeout; and that a failed job's connections
 * are reset, not left in TIME_WAIT (dist/sock_abort.h). */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "core/log.h"
#include "dist/sock_abort.h"
#include "dist/store.h"
#include "dist/store_proto.h"
#include "tests/helpers.h"
#include "testutil.h"

#define W 3
static int g_port;

/* This test job's token. */
#define TOKEN "test-job-token-0123456789abcdef"

static sg_store *mk(int port, int rank, int world, double timeout_s) {
    sg_store_opts o = {.token = TOKEN};
    return sg_store_create("127.0.0.1", port, rank, world, timeout_s, &o);
}

typedef struct {
    int rank;
    int rc;
    int64_t sum;
    char got[64];
} targ;

static void *rank_main(void *arg) {
    targ *a = arg;
    sg_store *s = mk(g_port, a->rank, W, 10);
    if (!s) {
        a->rc = -1;
        return NULL;
    }
    char key[32], val[32];
    snprintf(key, sizeof key, "k%d", a->rank);
    snprintf(val, sizeof val, "value-of-%d", a->rank);
    a->rc |= sg_store_set(s, key, val, strlen(val) + 1);
    /* read the next rank's value: blocks until that rank has set it */
    snprintf(key, sizeof key, "k%d", (a->rank + 1) % W);
    void *v = NULL;
    size_t n = 0;
    a->rc |= sg_store_get(s, key, &v, &n);
    if (v) snprintf(a->got, sizeof a->got, "%s", (char *)v);
    free(v);
    int64_t out = 0;
    a->rc |= sg_store_add(s, "counter", a->rank + 1, &out);
    a->rc |= sg_store_barrier(s, "after-add");
    a->rc |= sg_store_add(s, "counter", 0, &a->sum);
    a->rc |= sg_store_barrier(s, "end");
    sg_store_leave(s);
    sg_store_destroy(s);
    return NULL;
}

static void test_basic_ops(void) {
    /* rank 0 first (it picks the port), then the others */
    sg_store *s0 = mk(0, 0, 1, 5);
    CHECK(s0 != NULL);
    int ex = 1;
    CHECK(sg_store_check(s0, "nothing", &ex) == 0);
    CHECK_EQ_INT(ex, 0);
    CHECK(sg_store_set(s0, "a", "xyz", 3) == 0);
    CHECK(sg_store_check(s0, "a", &ex) == 0);
    CHECK_EQ_INT(ex, 1);
    void *v = NULL;
    size_t n = 0;
    CHECK(sg_store_get(s0, "a", &v, &n) == 0);
    CHECK_EQ_INT(n, 3);
    CHECK(memcmp(v, "xyz", 3) == 0);
    free(v);
    int64_t c = 0;
    CHECK(sg_store_add(s0, "c", 5, &c) == 0);
    CHECK(sg_store_add(s0, "c", -2, &c) == 0);
    CHECK_EQ_INT(c, 3);
    /* a get of a key nobody sets times out with SG_STORE_TIMEOUT */
    sg_store_set_timeout(s0, 0.3);
    CHECK_EQ_INT(sg_store_get(s0, "never", &v, &n), SG_STORE_TIMEOUT);
    /* and the connection recovers for the next request */
    sg_store_set_timeout(s0, 5);
    CHECK(sg_store_check(s0, "a", &ex) == 0);
    CHECK_EQ_INT(ex, 1);
    sg_store_leave(s0);
    sg_store_destroy(s0);
}

static void test_three_ranks(void) {
    /* one thread per rank; rank 0's hosts the server. Ranks 1 and 2 may
     * start before it is up: they retry until it is. */
    g_port = th_free_port();
    pthread_t th[W];
    targ a[W];
    for (int r = W - 1; r >= 0; r--) {
        memset(&a[r], 0, sizeof a[r]);
        a[r].rank = r;
        pthread_create(&th[r], NULL, rank_main, &a[r]);
    }
    for (int r = 0; r < W; r++) pthread_join(th[r], NULL);
    for (int r = 0; r < W; r++) {
        char want[32];
        snprintf(want, sizeof want, "value-of-%d", (r + 1) % W);
        CHECK_EQ_INT(a[r].rc, 0);
        CHECK_STR_CONTAINS(a[r].got, want);
        CHECK_EQ_INT(a[r].sum, 1 + 2 + 3);
    }
}

/* A rank in a process of its own (rank of world, store timeout_s): it
 * joins s0's store, beats and waits to be killed or stopped; returns once
 * it is up, or -1 (the child killed) when it did not come up. */
static pid_t live_rank(sg_store *s0, int rank, int world, double timeout_s) {
    int port = sg_store_port(s0);
    pid_t pid = fork();
    if (pid == 0) {
        sg_store *s = mk(port, rank, world, timeout_s);
        if (!s) _exit(3);
        sg_store_heartbeat_start(s);
        int64_t v;
        sg_store_add(s, "child-up", 1, &v);
        sleep(60);
        _exit(0);
    }
    if (sg_store_wait(s0, "child-up") != 0) {
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        return -1;
    }
    return pid;
}

static void test_dead_rank_named(void) {
    sg_store *s0 = mk(0, 0, 3, 5);
    CHECK(s0 != NULL);
    int port = sg_store_port(s0);
    sg_store *s1 = mk(port, 1, 3, 5);
    CHECK(s1 != NULL);
    CHECK(sg_store_heartbeat_start(s0) == 0);
    CHECK(sg_store_heartbeat_start(s1) == 0);
    /* rank 2 is a process that connects, beats, and dies without goodbye */
    pid_t pid = live_rank(s0, 2, 3, 5);
    CHECK(pid > 0);
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    char diag[512];
    int named = sg_store_diagnose(s0, 2.5, diag, sizeof diag, NULL);
    fprintf(stderr, "  diagnosis: %s\n", diag);
    CHECK_EQ_INT(named, 1);
    CHECK_STR_CONTAINS(diag, "Rank 2 exited or was killed");
    sg_store_leave(s1);
    sg_store_destroy(s1);
    sg_store_set_timeout(s0, 1);
    sg_store_leave(s0);
    sg_store_destroy(s0);
}

static void test_hung_rank_named(void) {
    sg_store *s0 = mk(0, 0, 2, 5);
    CHECK(s0 != NULL);
    CHECK(sg_store_heartbeat_start(s0) == 0);
    pid_t pid = live_rank(s0, 1, 2, 5);
    CHECK(pid > 0);
    kill(pid, SIGSTOP); /* alive (connection open) but no heartbeat */
    char diag[512];
    int named = sg_store_diagnose(s0, 2.5, diag, sizeof diag, NULL);
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    fprintf(stderr, "  diagnosis: %s\n", diag);
    CHECK_EQ_INT(named, 1);
    CHECK_STR_CONTAINS(diag, "Rank 1 is stopped or hung");
    sg_store_set_timeout(s0, 0.5);
    sg_store_leave(s0);
    sg_store_destroy(s0);
}

static void test_barrier_timeout_names_rank(void) {
    sg_store *s0 = mk(0, 0, 3, 1.0);
    CHECK(s0 != NULL);
    sg_store *s1 = mk(sg_store_port(s0), 1, 3, 1.0);
    CHECK(s1 != NULL);
    /* rank 1 arrives (as sg_store_barrier records it), rank 2 never does */
    CHECK(sg_store_set(s1, "barrier/start/0/1", "\1", 1) == 0);
    int64_t cnt;
    CHECK(sg_store_add(s1, "barrier/start/0/count", 1, &cnt) == 0);
    th_cap_begin();
    sg_store_rc rc = sg_store_barrier(s0, "start");
    const char *log = th_cap_end();
    CHECK_EQ_INT(rc, SG_STORE_ERROR); /* the timeout, logged naming the missing rank */
    CHECK_STR_CONTAINS(log, "rank(s) 2 did not arrive");
    sg_store_leave(s1);
    sg_store_destroy(s1);
    sg_store_leave(s0);
    sg_store_set_timeout(s0, 0.5);
    sg_store_destroy(s0);
}

/* Rank 0's store outlives its own work until every rank has left; a rank
 * that died without leaving must not keep it waiting for the timeout. */
static void test_host_does_not_wait_for_dead_rank(void) {
    sg_store *s0 = mk(0, 0, 3, 60);
    CHECK(s0 != NULL);
    int port = sg_store_port(s0);
    pid_t pid = fork();
    if (pid == 0) { /* rank 1 leaves properly, rank 2 just dies */
        sg_store *s1 = mk(port, 1, 3, 5);
        sg_store *s2 = mk(port, 2, 3, 5);
        if (!s1 || !s2) _exit(3);
        sg_store_leave(s1);
        sg_store_destroy(s1);
        _exit(0);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    sg_store_leave(s0);
    sg_store_destroy(s0);
    clock_gettime(CLOCK_MONOTONIC, &b);
    double secs = (double)(b.tv_sec - a.tv_sec) + (b.tv_nsec - a.tv_nsec) * 1e-9;
    fprintf(stderr, "  destroy took %.2f s (timeout 60)\n", secs);
    CHECK(secs < 30);
}

/* ---- one rank diagnoses for all ---- */

#define DN 16 /* simulated ranks */
typedef struct {
    sg_store *s;
    int named;
    int state[DN];
    char diag[2048];
} dgarg;

static void *diag_main(void *arg) {
    dgarg *a = arg;
    a->named = sg_store_diagnose(a->s, 1.0, a->diag, sizeof a->diag, a->state);
    return NULL;
}

/* Every one of DN ranks notices the failure and asks for a diagnosis: the
 * store sees O(N) requests in all (the old per-rank probe made 4 N each,
 * 4 N^2 in all), and every rank gets the same verdict. Only rank 0 beats
 * (its heartbeats are requests too): ranks 1..DN-1 are "hung". */
static void test_diagnosis_is_linear(void) {
    static dgarg a[DN];
    memset(a, 0, sizeof a);
    a[0].s = mk(0, 0, DN, 10);
    CHECK(a[0].s != NULL);
    int port = sg_store_port(a[0].s);
    for (int r = 1; r < DN; r++) {
        a[r].s = mk(port, r, DN, 10);
        CHECK(a[r].s != NULL);
    }
    CHECK(sg_store_heartbeat_start(a[0].s) == 0);
    sg_store_server *srv = sg_store_hosted_server(a[0].s);
    sg_store_server_stats before, after;
    sg_store_server_get_stats(srv, &before);
    pthread_t th[DN];
    /* rank 0 claims first (the others then lose the claim, whatever the
     * scheduling); then everyone else asks at once */
    pthread_create(&th[0], NULL, diag_main, &a[0]);
    CHECK(sg_store_wait(a[1].s, SG_STORE_DIAG_PREFIX "0/winner") == 0);
    for (int r = 1; r < DN; r++) pthread_create(&th[r], NULL, diag_main, &a[r]);
    for (int r = 0; r < DN; r++) pthread_join(th[r], NULL);
    sg_store_server_get_stats(srv, &after);
    size_t used = after.requests - before.requests;
    fprintf(stderr, "  %d ranks diagnosing: %zu store requests (bound %d)\n", DN, used, 24 * DN);
    fprintf(stderr, "  rank 3's diagnosis: %.120s...\n", a[3].diag);
    CHECK(used <= 24 * DN); /* 4 N^2 = 64 N before */
    CHECK_EQ_INT(a[0].named, DN - 1);
    CHECK_STR_CONTAINS(a[0].diag, "Rank 1 is stopped or hung");
    for (int r = 1; r < DN; r++) {
        CHECK_EQ_INT(a[r].named, DN - 2); /* all but rank 0 and itself */
        CHECK_EQ_INT(a[r].state[0], SG_RANK_OK);
        CHECK_EQ_INT(a[r].state[r], SG_RANK_OK);
        CHECK_EQ_INT(a[r].state[r == 1 ? 2 : 1], SG_RANK_HUNG);
    }
    for (int r = DN - 1; r >= 1; r--) {
        sg_store_leave(a[r].s);
        sg_store_destroy(a[r].s);
    }
    sg_store_leave(a[0].s);
    sg_store_set_timeout(a[0].s, 1);
    sg_store_destroy(a[0].s);
}

/* The diagnosing rank itself dies (kill) or stops (SIGSTOP) while probing:
 * the rank waiting for its verdict notices (dead flag, stalled heartbeat),
 * says so and diagnoses itself, naming it. */
static void winner_stops(int sig, const char *want) {
    sg_store *s0 = mk(0, 0, 2, 10);
    CHECK(s0 != NULL);
    int port = sg_store_port(s0);
    CHECK(sg_store_heartbeat_start(s0) == 0);
    pid_t pid = fork();
    if (pid == 0) { /* rank 1 notices first and claims the diagnosis */
        sg_store *s1 = mk(port, 1, 2, 10);
        if (!s1 || sg_store_heartbeat_start(s1)) _exit(3);
        char d[256];
        sg_store_diagnose(s1, 30.0, d, sizeof d, NULL); /* killed while probing */
        _exit(0);
    }
    CHECK(sg_store_wait(s0, SG_STORE_DIAG_PREFIX "0/winner") == 0);
    kill(pid, sig);
    if (sig == SIGKILL) waitpid(pid, NULL, 0);
    char diag[512];
    th_cap_begin();
    int named = sg_store_diagnose(s0, 1.0, diag, sizeof diag, NULL);
    const char *log = th_cap_end();
    if (sig != SIGKILL) {
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
    }
    fprintf(stderr, "  diagnosis: %s\n  log: %s", diag, log);
    CHECK_EQ_INT(named, 1);
    CHECK_STR_CONTAINS(diag, want);
    CHECK_STR_CONTAINS(log, "rank 1, which was diagnosing the failure for every rank");
    CHECK_STR_CONTAINS(log, "this rank diagnoses it itself");
    sg_store_set_timeout(s0, 0.5);
    sg_store_leave(s0);
    sg_store_destroy(s0);
}

static void test_diagnosing_rank_killed(void) {
    winner_stops(SIGKILL, "Rank 1 exited or was killed");
}

static void test_diagnosing_rank_stopped(void) {
    winner_stops(SIGSTOP, "Rank 1 is stopped or hung");
}

/* A stop (the launcher's SIGTERM) during a diagnosis ends it within ~50 ms
 * and names nobody: the probe of a hung rank would take probe_s (4 s). */
static volatile sig_atomic_t g_stop;
static void *raise_stop(void *arg) {
    (void)arg;
    usleep(300 * 1000);
    g_stop = SIGTERM;
    return NULL;
}
static void test_diagnosis_stopped(void) {
    sg_store *s0 = mk(0, 0, 2, 10);
    CHECK(s0 != NULL);
    CHECK(sg_store_heartbeat_start(s0) == 0);
    pid_t pid = live_rank(s0, 1, 2, 10);
    CHECK(pid > 0);
    kill(pid, SIGSTOP);
    g_stop = 0;
    pthread_t t;
    CHECK(pthread_create(&t, NULL, raise_stop, NULL) == 0);
    char diag[512];
    int state[2] = {-1, -1};
    double t0 = th_now();
    int named = sg_store_diagnose_stoppable(s0, 4.0, &g_stop, diag, sizeof diag, state);
    double secs = th_now() - t0;
    pthread_join(t, NULL);
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    fprintf(stderr, "  stopped diagnosis after %.2f s: %s\n", secs, diag);
    CHECK_EQ_INT(named, 0);
    CHECK_EQ_INT(state[1], SG_RANK_OK); /* nobody blamed on partial evidence */
    CHECK_STR_CONTAINS(diag, "told to stop (signal 15)");
    CHECK_MSG(secs < 1.5, "a stopped diagnosis took %.2f s (probe 4 s)", secs);
    sg_store_set_timeout(s0, 0.5);
    sg_store_leave(s0);
    sg_store_destroy(s0);
}

/* The store's host (rank 0) dies: a client that had been connected gets
 * "connection refused" and fails at once, not after retrying for its
 * timeout (10 s here): every rank of a failed job exits promptly. */
static void test_host_gone_fails_fast(void) {
    int fds[2];
    CHECK(pipe(fds) == 0);
    pid_t pid = fork();
    if (pid == 0) {
        sg_store *s0 = mk(0, 0, 2, 10);
        int port = s0 ? sg_store_port(s0) : -1;
        if (write(fds[1], &port, sizeof port) != sizeof port) _exit(4);
        sleep(60);
        _exit(0);
    }
    close(fds[1]);
    int port = -1;
    CHECK(read(fds[0], &port, sizeof port) == sizeof port);
    close(fds[0]);
    CHECK(port > 0);
    sg_store *s1 = mk(port, 1, 2, 10);
    CHECK(s1 != NULL);
    int64_t v = 0;
    CHECK(sg_store_add(s1, "up", 1, &v) == SG_STORE_OK);
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    double t0 = th_now();
    sg_store_rc a = sg_store_add(s1, "up", 1, &v); /* the closed connection */
    sg_store_rc b = sg_store_add(s1, "up", 1, &v); /* a reconnect: refused */
    double secs = th_now() - t0;
    fprintf(stderr, "  two requests after the host died: %d, %d in %.2f s\n", a, b, secs);
    CHECK(a != SG_STORE_OK && b != SG_STORE_OK);
    CHECK_MSG(secs < 2.0, "requests to a dead store host took %.2f s (timeout 10 s)", secs);
    sg_store_destroy(s1);
}

/* sg_sock_abort_all sets every TCP socket to reset on close (a peer's read
 * then fails with ECONNRESET, and no TIME_WAIT is left) and leaves Unix
 * sockets (the launcher's report pipe) alone. */
static void test_sock_abort(void) {
    int l = socket(AF_INET, SOCK_STREAM, 0);
    CHECK(l >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof a;
    CHECK(bind(l, (struct sockaddr *)&a, sizeof a) == 0);
    CHECK(listen(l, 1) == 0);
    CHECK(getsockname(l, (struct sockaddr *)&a, &al) == 0);
    int c = socket(AF_INET, SOCK_STREAM, 0);
    CHECK(c >= 0 && connect(c, (struct sockaddr *)&a, sizeof a) == 0);
    int srv = accept(l, NULL, NULL);
    CHECK(srv >= 0);
    int u[2];
    CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, u) == 0);
    int n = sg_sock_abort_all();
    fprintf(stderr, "  sockets set to reset: %d\n", n);
    CHECK(n >= 3); /* the listener, both ends of the connection */
    struct linger lg;
    socklen_t ll = sizeof lg;
    CHECK(getsockopt(c, SOL_SOCKET, SO_LINGER, &lg, &ll) == 0);
    CHECK(lg.l_onoff == 1 && lg.l_linger == 0);
    ll = sizeof lg;
    CHECK(getsockopt(u[0], SOL_SOCKET, SO_LINGER, &lg, &ll) == 0);
    CHECK_EQ_INT(lg.l_onoff, 0);
    close(c); /* resets the connection */
    char b;
    errno = 0;
    ssize_t r = recv(srv, &b, 1, 0);
    CHECK_MSG(r < 0 && errno == ECONNRESET,
              "read after the peer's close: %zd, %s (want ECONNRESET)", r, strerror(errno));
    close(srv);
    close(l);
    close(u[0]);
    close(u[1]);
}

/* A verdict that is not one OK, DEAD or HUNG byte per rank (the store's
 * bytes are input too) is refused: the waiting rank says so and probes. */
static void test_malformed_verdict_refused(void) {
    sg_store *s0 = mk(0, 0, 2, 10);
    CHECK(s0 != NULL);
    sg_store *s1 = mk(sg_store_port(s0), 1, 2, 10);
    CHECK(s1 != NULL);
    CHECK(sg_store_heartbeat_start(s0) == 0);
    /* rank 1 "won" the claim and published rank states 0 and 9 */
    int64_t n = 0, one = 1;
    CHECK(sg_store_add(s1, SG_STORE_DIAG_PREFIX "0/claim", 1, &n) == 0);
    CHECK(sg_store_set(s1, SG_STORE_DIAG_PREFIX "0/winner", &one, 8) == 0);
    CHECK(sg_store_set(s1, SG_STORE_DIAG_PREFIX "0/verdict", "\0\x09", 2) == 0);
    char diag[512];
    int state[2] = {-1, -1};
    th_cap_begin();
    int named = sg_store_diagnose(s0, 1.0, diag, sizeof diag, state);
    const char *log = th_cap_end();
    fprintf(stderr, "  diagnosis: %s\n  log: %s", diag, log);
    CHECK_STR_CONTAINS(log, "rank 1, which was diagnosing the failure for every rank, published "
                            "a malformed verdict");
    CHECK_EQ_INT(named, 1); /* its own probe: rank 1 has no heartbeat */
    CHECK_EQ_INT(state[1], SG_RANK_HUNG);
    sg_store_leave(s1);
    sg_store_destroy(s1);
    sg_store_set_timeout(s0, 0.5);
    sg_store_leave(s0);
    sg_store_destroy(s0);
}

int main(void) {
    sg_log_set_level(SG_LOG_WARN);
    TEST_RUN(test_basic_ops);
    TEST_RUN(test_three_ranks);
    TEST_RUN(test_dead_rank_named);
    TEST_RUN(test_hung_rank_named);
    TEST_RUN(test_barrier_timeout_names_rank);
    TEST_RUN(test_host_does_not_wait_for_dead_rank);
    TEST_RUN(test_diagnosis_is_linear);
    TEST_RUN(test_diagnosing_rank_killed);
    TEST_RUN(test_diagnosing_rank_stopped);
    TEST_RUN(test_malformed_verdict_refused);
    TEST_RUN(test_diagnosis_stopped);
    TEST_RUN(test_host_gone_fails_fast);
    TEST_RUN(test_sock_abort);
    return TEST_EXIT();
}
