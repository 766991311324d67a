/* tests/dist/test_store_safety.c - the rendezvous store under a careless or
 * hostile client (issue 13), all on loopback:
 *  - the slow-reader probe: one connection SETs a 16 MiB value and sends 64
 *    GETs without reading; the store drops it (logged), keeps serving the
 *    others, and both the bare server and rank 0's store handle shut down
 *    (before: the server thread blocked in send() and rank 0 waited in
 *    pthread_join forever);
 *  - half-sent SETs: eight 64 MiB SETs are refused on their header (memory
 *    does not grow), eight 15 MiB ones are read only within the in-flight
 *    budget, and other clients are served meanwhile;
 *  - strangers: a GET without HELLO, a HELLO with another token, garbage
 *    and a silent connection are dropped and logged, read nothing, and do
 *    not disturb the job;
 *  - another job's store: a rank with another token fails at once with
 *    "another job holds port P"; a second claim to a rank is refused naming
 *    the holder's address;
 *  - the store listens on the MASTER_ADDR interface (127.0.0.2 here: not
 *    reachable on 127.0.0.1);
 *  - a raised stop flag ends a connect that would otherwise retry for the
 *    whole timeout.
 * Every case runs in a forked child under a bound (a hang fails the case
 * instead of the suite). */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/log.h"
#include "dist/store.h"
#include "dist/store_proto.h"
#include "tests/helpers.h"
#include "testutil.h"

#define TOKEN "test-job-token-0123456789abcdef"
#define BOUND_S 90

static sg_store *mk_tok(const char *addr, int port, int rank, int world, double timeout_s,
                        const char *token) {
    sg_store_opts o = {.token = token};
    return sg_store_create(addr, port, rank, world, timeout_s, &o);
}
static sg_store *mk(int port, int rank, int world, double timeout_s) {
    return mk_tok("127.0.0.1", port, rank, world, timeout_s, TOKEN);
}
static sg_store_server *server(int world) {
    sg_store_server_opts o = {.token = TOKEN, .world = world};
    return sg_store_server_start("127.0.0.1", 0, &o);
}

/* ---- a raw client speaking the wire format ---- */

static int send_all(int fd, const void *p, size_t n) {
    const char *c = p;
    while (n) {
        ssize_t w = send(fd, c, n, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return -1;
        c += w;
        n -= (size_t)w;
    }
    return 0;
}

static int send_hdr(int fd, uint8_t op, uint32_t klen, uint32_t vlen) {
    uint8_t h[SG_STORE_HDR];
    h[0] = op;
    memcpy(h + 1, &klen, 4);
    memcpy(h + 5, &vlen, 4);
    return send_all(fd, h, sizeof h);
}

static int send_req(int fd, uint8_t op, const char *key, const void *val, uint32_t vlen) {
    uint32_t klen = (uint32_t)strlen(key);
    if (send_hdr(fd, op, klen, vlen) || send_all(fd, key, klen)) return -1;
    return vlen ? send_all(fd, val, vlen) : 0;
}

/* Reads one response; returns its status (value skipped), or -1 when the
 * connection ended first. */
static int read_resp(int fd) {
    uint8_t h[SG_STORE_RESP_HDR];
    size_t got = 0;
    while (got < sizeof h) {
        ssize_t r = recv(fd, h + got, sizeof h - got, 0);
        if (r <= 0) return -1;
        got += (size_t)r;
    }
    uint32_t len;
    memcpy(&len, h + 1, 4);
    char buf[4096];
    while (len) {
        ssize_t r = recv(fd, buf, len < sizeof buf ? len : sizeof buf, 0);
        if (r <= 0) return -1;
        len -= (uint32_t)r;
    }
    return h[0];
}

static int raw_hello(int fd, int rank, uint32_t kind, const char *token) {
    uint8_t v[SG_STORE_HELLO_MAX];
    size_t n = sg_store_build_hello(v, rank, kind, token, strlen(token));
    if (send_req(fd, SG_OP_HELLO, "", v, (uint32_t)n)) return -1;
    return read_resp(fd);
}

/* Bytes readable before the peer closes (at most cap, waiting up to ~5 s). */
static size_t drain(int fd, size_t cap) {
    size_t total = 0;
    char buf[4096];
    while (total < cap) {
        ssize_t r = recv(fd, buf, sizeof buf, 0);
        if (r <= 0) break;
        total += (size_t)r;
    }
    return total;
}

static size_t rss_bytes(void) {
    FILE *f = fopen("/proc/self/statm", "r");
    long pages = 0, rss = 0;
    if (f && fscanf(f, "%ld %ld", &pages, &rss) != 2) rss = 0;
    if (f) fclose(f);
    return (size_t)rss * (size_t)sysconf(_SC_PAGESIZE);
}

/* Waits (bounded) until a store statistic passes a value. */
static size_t wait_stat(sg_store_server *srv, size_t offset, size_t at_least) {
    sg_store_server_stats st;
    for (int i = 0; i < 500; i++) {
        sg_store_server_get_stats(srv, &st);
        size_t v = *(size_t *)((char *)&st + offset);
        if (v >= at_least) return v;
        usleep(20 * 1000);
    }
    sg_store_server_get_stats(srv, &st);
    return *(size_t *)((char *)&st + offset);
}
#define STAT(f) offsetof(sg_store_server_stats, f)

/* A normal rank's requests succeed. */
static int served(sg_store *s, const char *key) {
    int ex = 0;
    void *v = NULL;
    size_t n = 0;
    int rc = sg_store_set(s, key, "v", 2) || sg_store_get(s, key, &v, &n) ||
             sg_store_check(s, key, &ex) || !ex;
    free(v);
    return rc == 0;
}

/* ---- cases ---- */

/* The exact probe of issue 13 against a bare server (world 3). */
static void case_slow_reader(void) {
    sg_store_server *srv = server(3);
    CHECK(srv);
    int port = sg_store_server_port(srv);
    int fd = th_raw_connect("127.0.0.1", port);
    CHECK(fd >= 0);
    CHECK_EQ_INT(raw_hello(fd, 2, SG_HELLO_CLAIM, TOKEN), SG_ST_OK);
    size_t big = 16u << 20;
    char *val = calloc(big, 1);
    CHECK(val);
    CHECK(send_req(fd, SG_OP_SET, "big", val, (uint32_t)big) == 0);
    CHECK_EQ_INT(read_resp(fd), SG_ST_OK);
    free(val);
    for (int i = 0; i < 64; i++) /* and never read the answers */
        if (send_req(fd, SG_OP_GET, "big", NULL, 0)) break;
    /* once the store has answered the GETs as far as it will, another rank
     * is served while the probe still does not read */
    size_t slow = wait_stat(srv, STAT(dropped_slow), 1);
    sg_store *s1 = mk(port, 1, 3, 10);
    CHECK(s1);
    CHECK(served(s1, "other-rank"));
    sg_store_server_stats st;
    sg_store_server_get_stats(srv, &st);
    fprintf(stderr, "  probe: dropped_slow %zu, peak buffered %zu bytes (cap per connection %u)\n",
            slow, st.peak_buffered, SG_STORE_MAX_OUT);
    CHECK_EQ_INT(slow, 1);
    CHECK(st.peak_buffered <= (size_t)SG_STORE_MAX_OUT + SG_STORE_MAX_VAL + (1u << 20));
    CHECK(served(s1, "after-drop"));
    sg_store_leave(s1);
    sg_store_destroy(s1);
    sg_store_server_stop(srv); /* returns although the probe is still open */
    close(fd);
}

/* The same through rank 0's store handle: training is over, rank 0 leaves
 * and destroys its store while the probe sits unread. */
static void case_rank0_shutdown_with_slow_reader(void) {
    sg_store *s0 = mk(0, 0, 2, 5);
    CHECK(s0);
    int port = sg_store_port(s0);
    sg_store *s1 = mk(port, 1, 2, 5);
    CHECK(s1);
    int fd = th_raw_connect("127.0.0.1", port);
    CHECK(fd >= 0);
    CHECK_EQ_INT(raw_hello(fd, 1, SG_HELLO_EXTRA, TOKEN), SG_ST_OK);
    size_t big = 16u << 20;
    char *val = calloc(big, 1);
    CHECK(val);
    CHECK(send_req(fd, SG_OP_SET, "big", val, (uint32_t)big) == 0);
    CHECK_EQ_INT(read_resp(fd), SG_ST_OK);
    free(val);
    for (int i = 0; i < 64; i++)
        if (send_req(fd, SG_OP_GET, "big", NULL, 0)) break;
    CHECK_EQ_INT(wait_stat(sg_store_hosted_server(s0), STAT(dropped_slow), 1), 1);
    CHECK(served(s1, "k"));
    sg_store_leave(s1);
    sg_store_destroy(s1);
    sg_store_leave(s0);
    double t0 = th_now();
    sg_store_destroy(s0);
    fprintf(stderr, "  rank 0's store shut down in %.2f s with the probe still connected\n",
            th_now() - t0);
    close(fd);
}

/* Eight half-sent 64 MiB SETs (refused on the header), then eight half-sent
 * 15 MiB SETs (read within the in-flight budget). */
static void case_half_sent_sets(void) {
    sg_store_server *srv = server(2);
    CHECK(srv);
    int port = sg_store_server_port(srv);
    sg_store *s1 = mk(port, 1, 2, 10);
    CHECK(s1);
    size_t half = 32u << 20;
    char *body = calloc(half, 1);
    CHECK(body);
    memset(body, 1, half); /* touched before the baseline */
    size_t rss0 = rss_bytes();
    int fds[16];
    for (int i = 0; i < 8; i++) {
        fds[i] = th_raw_connect("127.0.0.1", port);
        CHECK(fds[i] >= 0);
        CHECK_EQ_INT(raw_hello(fds[i], 1, SG_HELLO_EXTRA, TOKEN), SG_ST_OK);
        send_hdr(fds[i], SG_OP_SET, 1, 64u << 20);
        if (send_all(fds[i], "k", 1) == 0) send_all(fds[i], body, half); /* fails once dropped */
    }
    size_t bad = wait_stat(srv, STAT(dropped_bad), 8);
    sg_store_server_stats st;
    sg_store_server_get_stats(srv, &st);
    size_t rss1 = rss_bytes();
    fprintf(stderr, "  8 half-sent 64 MiB SETs: dropped %zu, buffered %zu bytes, rss %+.1f MiB\n",
            bad, st.buffered_bytes, ((double)rss1 - (double)rss0) / (1 << 20));
    CHECK_EQ_INT(bad, 8);
    CHECK(st.buffered_bytes < (1u << 20));
    CHECK(rss1 < rss0 + (64u << 20));
    CHECK(served(s1, "k1"));
    for (int i = 0; i < 8; i++) close(fds[i]);

    /* 15 MiB SETs (allowed), each sent but for its last byte */
    uint32_t vlen = 15u << 20;
    for (int i = 0; i < 8; i++) {
        fds[i] = th_raw_connect("127.0.0.1", port);
        CHECK(fds[i] >= 0);
        CHECK_EQ_INT(raw_hello(fds[i], 1, SG_HELLO_EXTRA, TOKEN), SG_ST_OK);
        fcntl(fds[i], F_SETFL, O_NONBLOCK); /* the store may not read them all: never block here */
        send_hdr(fds[i], SG_OP_SET, 1, vlen);
        send(fds[i], "k", 1, MSG_NOSIGNAL);
    }
    /* push bodies round-robin until nothing moves for a while */
    size_t sent[8] = {0};
    for (int idle = 0; idle < 20;) {
        int moved = 0;
        for (int i = 0; i < 8; i++) {
            size_t left = vlen - 1 - sent[i];
            if (!left) continue;
            ssize_t w = send(fds[i], body, left < half ? left : half, MSG_NOSIGNAL);
            if (w > 0) sent[i] += (size_t)w, moved = 1;
        }
        if (moved) idle = 0;
        else idle++, usleep(20 * 1000);
    }
    wait_stat(srv, STAT(inflight_bytes), vlen);
    sg_store_server_get_stats(srv, &st);
    fprintf(stderr,
            "  8 half-sent 15 MiB SETs: in flight %zu bytes (budget %u), buffered %zu, peak %zu\n",
            st.inflight_bytes, SG_STORE_INFLIGHT_MAX, st.buffered_bytes, st.peak_buffered);
    CHECK(st.inflight_bytes <= SG_STORE_INFLIGHT_MAX);
    CHECK(st.inflight_bytes >= vlen); /* some were read */
    CHECK(st.buffered_bytes <= (size_t)SG_STORE_INFLIGHT_MAX + (1u << 20));
    CHECK(served(s1, "k2")); /* small requests never wait for the budget */
    for (int i = 0; i < 8; i++) close(fds[i]);
    sg_store_server_stats st2;
    for (int i = 0; i < 500; i++) {
        sg_store_server_get_stats(srv, &st2);
        if (st2.inflight_bytes == 0) break;
        usleep(20 * 1000);
    }
    CHECK_EQ_INT(st2.inflight_bytes, 0);
    free(body);
    sg_store_leave(s1);
    sg_store_destroy(s1);
    sg_store_server_stop(srv);
}

static void case_strangers_dropped(void) {
    sg_store *s0 = mk(0, 0, 2, 10);
    CHECK(s0);
    int port = sg_store_port(s0);
    sg_store *s1 = mk(port, 1, 2, 10);
    CHECK(s1);
    CHECK(sg_store_set(s0, "mesh/0", "127.0.0.1 4242", 15) == 0);
    th_cap_begin();
    /* a GET without HELLO */
    int a = th_raw_connect("127.0.0.1", port);
    int b = th_raw_connect("127.0.0.1", port);
    int c = th_raw_connect("127.0.0.1", port);
    int d = th_raw_connect("127.0.0.1", port); /* silent */
    size_t leaked = 0;
    int st_b = -9;
    if (a >= 0 && send_req(a, SG_OP_GET, "mesh/0", NULL, 0) == 0) leaked = drain(a, 1 << 16);
    if (b >= 0) st_b = raw_hello(b, 1, SG_HELLO_CLAIM, "another-job-token");
    size_t after_b = b >= 0 && send_req(b, SG_OP_GET, "mesh/0", NULL, 0) == 0 ? drain(b, 1 << 16)
                                                                              : 0;
    char junk[1024];
    for (size_t i = 0; i < sizeof junk; i++) junk[i] = (char)(i * 131 + 7);
    if (c >= 0) send_all(c, junk, sizeof junk);
    size_t after_c = c >= 0 ? drain(c, 1 << 16) : 0;
    int ok = served(s1, "job-goes-on");
    const char *log = th_cap_end();
    CHECK(a >= 0 && b >= 0 && c >= 0 && d >= 0);
    CHECK_MSG(leaked == 0, "a connection without the token read %zu bytes", leaked);
    CHECK_EQ_INT(st_b, SG_ST_WRONG_TOKEN);
    CHECK_EQ_INT(after_b, 0);
    CHECK_EQ_INT(after_c, 0);
    CHECK(ok);
    CHECK_STR_CONTAINS(log, "rendezvous store: dropped the connection from 127.0.0.1:");
    CHECK_STR_CONTAINS(log, "a request before HELLO with the job token; the job goes on");
    CHECK_STR_CONTAINS(log, "it presented another job's token");
    close(a), close(b), close(c), close(d);
    sg_store_leave(s1);
    sg_store_destroy(s1);
    sg_store_leave(s0);
    sg_store_destroy(s0);
}

static void case_another_jobs_store(void) {
    sg_store *s0 = mk(0, 0, 2, 600);
    CHECK(s0);
    int port = sg_store_port(s0);
    sg_store *s1 = mk(port, 1, 2, 600);
    CHECK(s1);
    th_cap_begin();
    /* rank 1 of another job (its own token) on the same port: no retrying
     * for the 600 s timeout, a message naming the port */
    sg_store *other = mk_tok("127.0.0.1", port, 1, 2, 600, "the-other-jobs-token");
    /* a second process claiming rank 1 of this job */
    sg_store *dup = mk(port, 1, 2, 600);
    /* the store logs the refused claim after answering it: wait for that */
    th_cap_wait("it claims rank 1, which the connection from 127.0.0.1:", 30);
    const char *log = th_cap_end();
    CHECK(other == NULL);
    CHECK(dup == NULL);
    char want[160];
    snprintf(want, sizeof want, "rank 1: another job holds port %d (127.0.0.1:%d)", port, port);
    CHECK_STR_CONTAINS(log, want);
    CHECK_STR_CONTAINS(log, "choose another --master-port");
    CHECK_STR_CONTAINS(log, "already has a connection for rank 1 (from 127.0.0.1:");
    CHECK_STR_CONTAINS(log, "it claims rank 1, which the connection from 127.0.0.1:");
    CHECK(served(s1, "still-fine"));
    sg_store_leave(s1);
    sg_store_destroy(s1);
    sg_store_leave(s0);
    sg_store_destroy(s0);
}

static void case_binds_master_addr(void) {
    sg_store *s0 = mk_tok("127.0.0.2", 0, 0, 1, 5, TOKEN);
    CHECK(s0);
    int port = sg_store_port(s0);
    int other = th_raw_connect("127.0.0.1", port);
    int errno_other = errno;
    int right = th_raw_connect("127.0.0.2", port);
    fprintf(stderr, "  store on 127.0.0.2:%d; via 127.0.0.1: %s\n", port,
            other < 0 ? strerror(errno_other) : "connected");
    CHECK_MSG(other < 0,
              "the store bound to MASTER_ADDR=127.0.0.2 accepted a connection on 127.0.0.1");
    CHECK(right >= 0);
    CHECK_EQ_INT(raw_hello(right, 0, SG_HELLO_EXTRA, TOKEN), SG_ST_OK);
    close(right);
    sg_store_leave(s0);
    sg_store_destroy(s0);
}

static volatile sig_atomic_t g_stop;
static void *raise_stop(void *arg) {
    (void)arg;
    usleep(300 * 1000);
    g_stop = SIGTERM;
    return NULL;
}

static void case_stop_flag_ends_connect(void) {
    int port = th_free_port(); /* nobody listens: the connect would retry for 600 s */
    g_stop = 0;
    pthread_t th;
    pthread_create(&th, NULL, raise_stop, NULL);
    sg_store_opts o = {.token = TOKEN, .stop = &g_stop};
    double t0 = th_now();
    sg_store *s = sg_store_create("127.0.0.1", port, 1, 2, 600, &o);
    pthread_join(th, NULL);
    fprintf(stderr, "  stopped after %.2f s\n", th_now() - t0);
    CHECK(s == NULL);
}

static void case_client_limits(void) {
    sg_store *s0 = mk(0, 0, 1, 5);
    CHECK(s0);
    char *key = malloc(SG_STORE_MAX_KEY + 2);
    memset(key, 'k', SG_STORE_MAX_KEY + 1);
    key[SG_STORE_MAX_KEY + 1] = 0;
    CHECK(sg_store_set(s0, key, "x", 1) == -1);
    free(key);
    CHECK(sg_store_set(s0, "big", "", (size_t)SG_STORE_MAX_VAL + 1) == -1);
    CHECK(served(s0, "ok"));
    sg_store_leave(s0);
    sg_store_destroy(s0);
}

/* Runs a case in a child process; a case still running after BOUND_S
 * seconds is a hang: killed and failed. */
static void bounded(void (*fn)(void), const char *name) {
    CHECK_MSG(th_bounded(fn, &tu_case_failed, BOUND_S, name) == 0, "case %s (see above)", name);
}
#define BOUNDED(fn) \
    static void test_##fn(void) { bounded(fn, #fn); }
BOUNDED(case_slow_reader)
BOUNDED(case_rank0_shutdown_with_slow_reader)
BOUNDED(case_half_sent_sets)
BOUNDED(case_strangers_dropped)
BOUNDED(case_another_jobs_store)
BOUNDED(case_binds_master_addr)
BOUNDED(case_stop_flag_ends_connect)
BOUNDED(case_client_limits)

int main(void) {
    sg_log_set_level(SG_LOG_WARN);
    signal(SIGPIPE, SIG_IGN);
    TEST_RUN(test_case_slow_reader);
    TEST_RUN(test_case_rank0_shutdown_with_slow_reader);
    TEST_RUN(test_case_half_sent_sets);
    TEST_RUN(test_case_strangers_dropped);
    TEST_RUN(test_case_another_jobs_store);
    TEST_RUN(test_case_binds_master_addr);
    TEST_RUN(test_case_stop_flag_ends_connect);
    TEST_RUN(test_case_client_limits);
    return TEST_EXIT();
}
