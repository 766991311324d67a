/* tests/dist/test_nccl_peer_death.c - a rank whose peers die while a SyncBN
 * collective is enqueued on the compute stream and DDP's gradient channel
 * sees the death first (emulated device only: tests/cuda_emu/fake_nccl.h
 * kills the peers; the collectives then never complete until their
 * communicator is aborted, and cudaFree, as on a GPU, waits for them).
 *
 * Each scenario runs in a child process, bounded by the parent: a child
 * that does not end within BOUND_S seconds hung, and is killed and reported
 * as a failure (before the fix that aborts the SyncBN communicator once
 * the gradient channel failed, both hung: the watchdog stopped watching,
 * and the teardown's first cudaFree waited forever).
 *   watchdog  the compute stream drains (a download of the SyncBN buffer
 *             returns) without any teardown: the watchdog aborted the
 *             SyncBN communicator after the gradient channel failed
 *   close     sg_train_core_close right after the failure returns (it
 *             frees device memory, which waits for the device)
 */
#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "core/log.h"
#include "core/util.h"
#include "dist/comm.h"
#include "dist/ddp.h"
#include "tests/cuda_emu/fake_nccl.h"
#include "tests/helpers.h"
#include "testutil.h"
#include "train/train_core.h"

/* dist.timeout_s 8: a collective's own deadline is 6 s (the rest probes
 * the store for the culprit: 2 s, which the gradient channel's report
 * spends); each scenario must end within 2 s of that report, well before
 * the stuck collective's deadline, so only the abort can have ended it */
enum { BOUND_S = 12, TIMEOUT_S = 8, NG = 1000, NC = 16 };

/* One rank's state: a communicator (NCCL forced at world 1), DDP over one
 * gradient, one micro-batch slot, as sg_train_core_attach leaves them. */
typedef struct rank_state {
    sg_config cfg;
    sg_train_core core;
    float *grad, *src, *stats;
} rank_state;

static void rank_open(rank_state *r) {
    char port[16];
    snprintf(port, sizeof port, "%d", th_free_port());
    setenv("MASTER_PORT", port, 1);
    setenv("SG_DIST_FORCE_TRANSPORT", "1", 1);
    sg_config_defaults(&r->cfg);
    r->cfg.dist.timeout_s = TIMEOUT_S;
    snprintf(r->cfg.dist.backend, sizeof r->cfg.dist.backend, "nccl");
    sg_backend_opts bo = {0};
    sg_train_core *c = &r->core;
    memset(c, 0, sizeof *c);
    c->cfg = &r->cfg;
    c->be = sg_backend_create("cuda:0", &bo);
    SG_CHECK(c->be, "cuda:0 on the emulated device");
    c->comm = sg_comm_create(&r->cfg, c->be);
    SG_CHECK(c->comm && strcmp(sg_comm_backend_name(c->comm), "nccl") == 0, "NCCL forced");
    const sg_ops *o = c->be->ops;
    r->grad = o->alloc(c->be, NG * sizeof(float));
    r->src = o->alloc(c->be, NG * sizeof(float));
    r->stats = o->alloc(c->be, 2 * NC * sizeof(float));
    float h[NG];
    for (int i = 0; i < NG; i++) h[i] = (float)(i % 7) - 3.0f;
    o->upload(c->be, r->src, h, sizeof h);
    o->upload(c->be, r->stats, h, 2 * NC * sizeof(float));
    size_t count = NG;
    int order = 0;
    c->ddp = sg_ddp_create_raw(c->comm, &r->grad, &count, 1, &order, 1, 25.0, 1.0);
    SG_CHECK(c->ddp, "DDP");
    c->K = 1;
    c->slot = calloc(1, sizeof *c->slot);
    SG_CHECK(c->slot, "out of memory");
    c->slot[0].img = o->alloc(c->be, 4096);
    c->slot[0].lab = o->alloc(c->be, 1024);
}

/* One backward's collectives: SyncBN's sum enqueued on the compute stream,
 * then the gradient bucket on the comm stream (which waits for the compute
 * stream, so for that sum too). Returns sg_ddp_wait's status. */
static sg_status rank_backward(rank_state *r) {
    sg_train_core *c = &r->core;
    int64_t n[1] = {2};
    sg_comm_set_batch_sizes(c->comm, n);
    sg_syncbn_allreduce(c->comm, r->stats, 2 * NC);
    c->be->ops->scale(c->be, r->src, r->grad, 1.0f, NG);
    sg_ddp_grad_ready(c->ddp, 0);
    return sg_ddp_wait(c->ddp);
}

/* The peers die during a backward; returns when the gradient channel has
 * reported it, with the SyncBN sum still stuck on the compute stream. */
static void peers_die_in_backward(rank_state *r) {
    CHECK(rank_backward(r) == SG_OK); /* alive: a normal step */
    CHECK(sg_comm_barrier(r->core.comm) == SG_OK);
    /* communicator 1 is the gradient channel's (dist/nccl_comm.c creates
     * SG_CH_MAIN's first): it sees the death, SyncBN's just hangs */
    sg_emu_nccl_kill_peers(1u << 1);
    CHECK(rank_backward(r) == SG_ERR_RUNTIME);
}

static void scenario_watchdog(void) {
    rank_state r;
    rank_open(&r);
    peers_die_in_backward(&r);
    double t0 = sg_now_s();
    float back[2 * NC];
    r.core.be->ops->download(r.core.be, back, r.stats, sizeof back); /* waits for the stream */
    double dt = sg_now_s() - t0;
    CHECK_MSG(dt < 2.0, "the compute stream drained %.2f s after the failure", dt);
    const sg_ops *o = r.core.be->ops;
    o->free(r.core.be, r.grad);
    o->free(r.core.be, r.src);
    o->free(r.core.be, r.stats);
    sg_train_core_close(&r.core);
}

static void scenario_close(void) {
    rank_state r;
    rank_open(&r);
    peers_die_in_backward(&r);
    double t0 = sg_now_s();
    /* the trainer's teardown: the first free waits for the device. The
     * test's own three buffers are left to the child's exit: freeing them
     * first would wait for the device before the teardown under test */
    sg_train_core_close(&r.core);
    double dt = sg_now_s() - t0;
    CHECK_MSG(dt < 2.0, "the teardown took %.2f s after the failure", dt);
}

/* Runs fn in a child bounded by BOUND_S; 0 when it passed. */
#define RUN_BOUNDED(fn) run_bounded(#fn, fn)
static int run_bounded(const char *name, void (*fn)(void)) {
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        perror("fork");
        return 1;
    }
    if (pid == 0) {
        fprintf(stderr, "case %s\n", name);
        fn();
        fflush(NULL);
        _exit(tu_case_failed ? 1 : 0);
    }
    double end = sg_now_s() + BOUND_S;
    int status = 0;
    for (;;) {
        pid_t w = waitpid(pid, &status, WNOHANG);
        if (w == pid) break;
        if (sg_now_s() > end) {
            kill(pid, SIGKILL);
            waitpid(pid, &status, 0);
            fprintf(stderr,
                    "FAIL %s: hung (still running after %d s; dist.timeout_s=%d): a collective "
                    "stayed blocked on the device\n",
                    name, (int)BOUND_S, (int)TIMEOUT_S);
            return 1;
        }
        struct timespec ts = {0, 20 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        fprintf(stderr, "FAIL %s: the child ended with status %d\n", name, status);
        return 1;
    }
    fprintf(stderr, "ok %s\n", name);
    return 0;
}

int main(void) {
    int failed = 0;
    failed += RUN_BOUNDED(scenario_watchdog);
    failed += RUN_BOUNDED(scenario_close);
    return failed ? 1 : 0;
}
