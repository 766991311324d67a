/* tests/dist/test_mesh.c - the small-collective mesh's handshake (issue 13)
 * with 2 ranks as threads of one process and a stranger on loopback:
 *  - garbage, a handshake with another job's token and a silent connection
 *    on rank 0's mesh port are dropped and logged (naming their address);
 *    the real rank 1 then connects and an all-gather works;
 *  - a second claim to rank 1 is refused and logged naming the address of
 *    the connection that holds it, and the refused process is told why;
 *  - the mesh listens on the MASTER_ADDR interface (127.0.0.2 here) and
 *    publishes that address.
 * Every case runs in a forked child under a bound. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/log.h"
#include "dist/mesh.h"
#include "dist/mesh_wire.h"
#include "dist/store.h"
#include "tests/helpers.h"
#include "testutil.h"

#define TOKEN "test-mesh-token-0123456789"
#define BOUND_S 60

typedef struct job {
    sg_store *s0, *s1;
    sg_mesh *m0;
    pthread_t th;
    char host[64];
    int port;
} job;

static void *mesh0_main(void *arg) {
    job *j = arg;
    j->m0 = sg_mesh_create(j->s0, 0, 2, 20, TOKEN, NULL);
    return NULL;
}

/* Stores for ranks 0 and 1, rank 0's mesh setup in a thread; returns once
 * rank 0 has published its mesh address (read into host/port). */
static int start(job *j, const char *master) {
    memset(j, 0, sizeof *j);
    sg_store_opts o = {.token = TOKEN};
    j->s0 = sg_store_create(master, 0, 0, 2, 20, &o);
    if (!j->s0) return -1;
    j->s1 = sg_store_create(master, sg_store_port(j->s0), 1, 2, 20, &o);
    if (!j->s1) return -1;
    pthread_create(&j->th, NULL, mesh0_main, j);
    void *v = NULL;
    size_t n = 0;
    if (sg_store_get(j->s1, "mesh/0", &v, &n)) return -1;
    int ok = sscanf((char *)v, "%63s %d", j->host, &j->port) == 2;
    free(v);
    return ok ? 0 : -1;
}

static void finish(job *j) {
    sg_store_leave(j->s1);
    sg_store_destroy(j->s1);
    sg_store_set_timeout(j->s0, 1);
    sg_store_leave(j->s0);
    sg_store_destroy(j->s0);
}

/* The one-byte answer to a handshake (-1: closed without one). */
static int hello_ack(int fd, int rank, const char *token) {
    uint8_t h[SG_MESH_HELLO_MAX], ack;
    size_t n = sg_mesh_build_hello(h, rank, token, strlen(token));
    if (send(fd, h, n, MSG_NOSIGNAL) != (ssize_t)n) return -1;
    return recv(fd, &ack, 1, 0) == 1 ? ack : -1;
}

typedef struct gather_arg {
    sg_mesh *m;
    int in, out[2];
    sg_status rc;
} gather_arg;
static void *gather_main(void *arg) {
    gather_arg *g = arg;
    char err[256];
    g->rc = sg_mesh_allgather(g->m, &g->in, g->out, sizeof g->in, err, sizeof err);
    return NULL;
}

static void case_strangers_dropped(void) {
    job j;
    CHECK(start(&j, "127.0.0.1") == 0);
    th_cap_begin();
    int a = th_raw_connect(j.host, j.port), b = th_raw_connect(j.host, j.port),
        c = th_raw_connect(j.host, j.port);
    char junk[64];
    memset(junk, 0xab, sizeof junk);
    int ack_a = -2;
    if (a >= 0 && send(a, junk, sizeof junk, MSG_NOSIGNAL) > 0) {
        uint8_t x;
        ack_a = recv(a, &x, 1, 0) == 1 ? x : -1;
    }
    int ack_b = b >= 0 ? hello_ack(b, 1, "another-jobs-token") : -2;
    /* c stays silent; now the real rank 1 */
    sg_mesh *m1 = sg_mesh_create(j.s1, 1, 2, 20, TOKEN, NULL);
    pthread_join(j.th, NULL);
    const char *log = th_cap_end();
    CHECK(a >= 0 && b >= 0 && c >= 0);
    CHECK_EQ_INT(ack_a, SG_MESH_ACK_BAD);
    CHECK_EQ_INT(ack_b, SG_MESH_ACK_WRONG_TOKEN);
    CHECK(m1 != NULL);
    CHECK(j.m0 != NULL);
    CHECK_STR_CONTAINS(log,
                       "rank 0: dropped a connection to the small-collective mesh from 127.0.0.1:");
    CHECK_STR_CONTAINS(log, "no segtrain mesh handshake");
    CHECK_STR_CONTAINS(log, "it presented another job's token; the job goes on");
    gather_arg g0 = {.m = j.m0, .in = 10}, g1 = {.m = m1, .in = 11};
    pthread_t th;
    pthread_create(&th, NULL, gather_main, &g0);
    gather_main(&g1);
    pthread_join(th, NULL);
    CHECK(g0.rc == SG_OK && g1.rc == SG_OK);
    CHECK(g0.out[0] == 10 && g0.out[1] == 11 && g1.out[0] == 10 && g1.out[1] == 11);
    close(a), close(b), close(c);
    sg_mesh_destroy(m1);
    sg_mesh_destroy(j.m0);
    finish(&j);
}

typedef struct rank_arg {
    sg_store *s;
    int rank, world;
    sg_mesh *m;
} rank_arg;
static void *rank_mesh_main(void *arg) {
    rank_arg *r = arg;
    r->m = sg_mesh_create(r->s, r->rank, r->world, 20, TOKEN, NULL);
    return NULL;
}

/* World 3. A process with this job's token claims rank 2 on rank 0 first;
 * the real rank 2 is then refused (rank 0 logs the second claim with both
 * addresses, rank 2 says why it failed), and rank 0's mesh completes when
 * rank 1 connects. */
static void case_second_claim_refused(void) {
    sg_store_opts o = {.token = TOKEN};
    sg_store *s0 = sg_store_create("127.0.0.1", 0, 0, 3, 20, &o);
    CHECK(s0);
    int port = sg_store_port(s0);
    sg_store *s2 = sg_store_create("127.0.0.1", port, 2, 3, 20, &o);
    CHECK(s2);
    rank_arg r0 = {s0, 0, 3, NULL};
    pthread_t th;
    pthread_create(&th, NULL, rank_mesh_main, &r0);
    void *v = NULL;
    size_t n = 0;
    char host[64];
    int mport = 0;
    CHECK(sg_store_get(s2, "mesh/0", &v, &n) == 0);
    CHECK(sscanf((char *)v, "%63s %d", host, &mport) == 2);
    free(v);
    th_cap_begin();
    int first = th_raw_connect(host, mport);
    int ack_first = first >= 0 ? hello_ack(first, 2, TOKEN) : -2;
    sg_mesh *m2 = sg_mesh_create(s2, 2, 3, 20, TOKEN, NULL); /* the real rank 2 */
    int one = th_raw_connect(host, mport);                   /* rank 1's turn */
    int ack_one = one >= 0 ? hello_ack(one, 1, TOKEN) : -2;
    pthread_join(th, NULL);
    const char *log = th_cap_end();
    CHECK_EQ_INT(ack_first, SG_MESH_ACK_OK);
    CHECK(m2 == NULL);
    CHECK_EQ_INT(ack_one, SG_MESH_ACK_OK);
    CHECK(r0.m != NULL);
    CHECK_STR_CONTAINS(log,
                       "rank 0: dropped a connection to the small-collective mesh from 127.0.0.1:");
    CHECK_STR_CONTAINS(
        log, "it claims a rank that is connected (rank 2, already connected from 127.0.0.1:");
    CHECK_STR_CONTAINS(
        log, "refused this rank's mesh connection: another process is already connected as "
             "this rank");
    sg_mesh_destroy(r0.m);
    close(first);
    close(one);
    sg_store_leave(s2);
    sg_store_destroy(s2);
    sg_store_set_timeout(s0, 1);
    sg_store_leave(s0);
    sg_store_destroy(s0);
}

static void case_binds_master_addr(void) {
    setenv("MASTER_ADDR", "127.0.0.2", 1);
    job j;
    CHECK(start(&j, "127.0.0.2") == 0);
    int other = th_raw_connect("127.0.0.1", j.port);
    fprintf(stderr, "  mesh of rank 0 published as %s:%d; via 127.0.0.1: %s\n", j.host, j.port,
            other < 0 ? strerror(errno) : "connected");
    sg_mesh *m1 = sg_mesh_create(j.s1, 1, 2, 20, TOKEN, NULL);
    pthread_join(j.th, NULL);
    unsetenv("MASTER_ADDR");
    CHECK(strcmp(j.host, "127.0.0.2") == 0);
    CHECK_MSG(other < 0, "the mesh for MASTER_ADDR=127.0.0.2 accepted a connection on 127.0.0.1");
    CHECK(m1 && j.m0);
    sg_mesh_destroy(m1);
    sg_mesh_destroy(j.m0);
    finish(&j);
}

static void bounded(void (*fn)(void), const char *name) {
    CHECK_MSG(th_bounded(fn, &tu_case_failed, BOUND_S, name) == 0, "case %s (see above)", name);
}
static void test_strangers_dropped(void) { bounded(case_strangers_dropped, "strangers_dropped"); }
static void test_second_claim_refused(void) {
    bounded(case_second_claim_refused, "second_claim_refused");
}
static void test_binds_master_addr(void) { bounded(case_binds_master_addr, "binds_master_addr"); }

int main(void) {
    sg_log_set_level(SG_LOG_WARN);
    signal(SIGPIPE, SIG_IGN);
    unsetenv("MASTER_ADDR");
    TEST_RUN(test_strangers_dropped);
    TEST_RUN(test_second_claim_refused);
    TEST_RUN(test_binds_master_addr);
    return TEST_EXIT();
}
