/* tests/dist/test_nccl.c - the NCCL transport on one GPU (world 1 with the
 * transport forced on by SG_DIST_FORCE_TRANSPORT=1, since NCCL refuses two
 * ranks on one device): all-reduce of device floats and of host doubles and
 * int64 (staged through device memory), broadcast, all-gather, barrier,
 * SyncBN's enqueued collectives, and DDP's buckets on the comm stream. Exits 77 (skipped) without a CUDA device. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/log.h"
#include "dist/comm.h"
#include "dist/ddp.h"
#include "tests/helpers.h"
#include "testutil.h"

static sg_backend *g_be;
static sg_comm *g_c;

static void test_collectives(void) {
    const sg_ops *o = g_be->ops;
    CHECK(strcmp(sg_comm_backend_name(g_c), "nccl") == 0);
    size_t n = 1 << 20;
    float *h = malloc(n * sizeof *h), *back = malloc(n * sizeof *back);
    for (size_t i = 0; i < n; i++) h[i] = (float)(i % 977) * 0.5f;
    float *d = o->alloc(g_be, n * sizeof *d);
    o->upload(g_be, d, h, n * sizeof *h);
    CHECK(sg_comm_allreduce_f32(g_c, d, n) == 0);
    o->download(g_be, back, d, n * sizeof *back);
    CHECK(memcmp(h, back, n * sizeof *h) == 0); /* world 1: the sum is the value */
    double x[3] = {1.5, -2.25, 1e300};
    CHECK(sg_comm_allreduce_f64(g_c, x, 3) == 0);
    CHECK(x[0] == 1.5 && x[1] == -2.25 && x[2] == 1e300);
    int64_t q[2] = {(int64_t)1 << 60, -7};
    CHECK(sg_comm_allreduce_i64(g_c, q, 2) == 0);
    CHECK(q[0] == (int64_t)1 << 60 && q[1] == -7);
    CHECK(sg_comm_broadcast(g_c, d, 4096, 0) == 0);
    char msg[16] = "hello";
    CHECK(sg_comm_broadcast_host(g_c, msg, sizeof msg, 0) == 0);
    CHECK(strcmp(msg, "hello") == 0);
    float *g = o->alloc(g_be, 100 * sizeof *g);
    CHECK(sg_comm_allgather_f32(g_c, d, g, 100) == 0);
    o->download(g_be, back, g, 100 * sizeof *back);
    CHECK(memcmp(h, back, 100 * sizeof *h) == 0);
    CHECK(sg_comm_barrier(g_c) == 0);
    o->free(g_be, d);
    o->free(g_be, g);
    free(h);
    free(back);
}

/* SyncBN on NCCL with the batch sizes known: the forward gather and the
 * backward sum are enqueued on the compute stream (counted as such, no
 * sleep of the training thread), give the world-1 results (parts = the
 * local stats, counts = n * plane), and the next blocking collective flushes
 * them. Without the batch sizes the gather blocks as before. */
static void test_syncbn_enqueued(void) {
    const sg_ops *o = g_be->ops;
    int c = 64;
    float h[128], back[128];
    for (int i = 0; i < 2 * c; i++) h[i] = 0.25f * (float)i - 3.0f;
    float *stats = o->alloc(g_be, sizeof h), *parts = o->alloc(g_be, sizeof h);
    o->upload(g_be, stats, h, sizeof h);
    sg_comm_stats before, after;
    sg_comm_get_stats(g_c, &before);
    int64_t n[1] = {4}, counts[1] = {0};
    sg_comm_set_batch_sizes(g_c, n);
    sg_syncbn_gather(g_c, stats, 4 * 96, parts, counts, c);
    CHECK_EQ_INT(counts[0], 4 * 96);
    sg_syncbn_allreduce(g_c, stats, 2 * c);
    sg_comm_set_batch_sizes(g_c, NULL);
    sg_comm_get_stats(g_c, &after);
    CHECK_EQ_INT(after.syncbn_queued - before.syncbn_queued, 2);
    CHECK_EQ_INT(after.syncbn_calls - before.syncbn_calls, 2);
    CHECK_EQ_INT(after.poll_sleeps, before.poll_sleeps); /* issuing never sleeps */
    CHECK(sg_comm_barrier(g_c) == 0);                    /* flushes */
    sg_comm_get_stats(g_c, &after);
    CHECK_EQ_INT(after.flushes - before.flushes, 1);
    o->download(g_be, back, parts, sizeof back);
    CHECK(memcmp(h, back, sizeof h) == 0);
    o->download(g_be, back, stats, sizeof back);
    CHECK(memcmp(h, back, sizeof h) == 0);
    /* no batch sizes: the blocking gather with the counts in the message */
    counts[0] = 0;
    sg_syncbn_gather(g_c, stats, 1000, parts, counts, c);
    CHECK_EQ_INT(counts[0], 1000);
    sg_comm_stats last;
    sg_comm_get_stats(g_c, &last);
    CHECK_EQ_INT(last.syncbn_queued, after.syncbn_queued);
    o->free(g_be, stats);
    o->free(g_be, parts);
}

/* DDP on the comm stream (world 1 with the transport forced runs the whole
 * path): gradients written by kernels on the compute stream, bucketed (one
 * bucket in place over a contiguous range, one copied into a flat buffer),
 * all-reduced on the comm stream after it waits for the compute stream, and
 * copied back after the compute stream waits for the comm stream. On the
 * emulated device a missing wait between the two streams is a fault even
 * though one rank's sum is the value itself. */
static void test_ddp_comm_stream(void) {
    const sg_ops *o = g_be->ops;
    enum { NG = 4 };
    size_t count[NG] = {1000, 37, 4096, 300};
    /* 0 and 1 adjacent in one allocation (an in-place bucket), 2 and 3 apart */
    float *arena = o->alloc(g_be, (count[0] + count[1]) * sizeof(float));
    float *grads[NG] = {arena, arena + count[0], o->alloc(g_be, count[2] * sizeof(float)),
                        o->alloc(g_be, count[3] * sizeof(float))};
    float *src[NG], *h[NG];
    for (int k = 0; k < NG; k++) {
        h[k] = malloc(count[k] * sizeof(float));
        for (size_t i = 0; i < count[k]; i++) h[k][i] = (float)((i * 13 + (size_t)k) % 101) - 50;
        src[k] = o->alloc(g_be, count[k] * sizeof(float));
        o->upload(g_be, src[k], h[k], count[k] * sizeof(float));
    }
    int order[NG] = {3, 2, 1, 0};
    /* buckets of ~4 KiB: {3, 2}, {1, 0} */
    sg_ddp *d = sg_ddp_create_raw(g_c, grads, count, NG, order, NG, 0.004, 0.004);
    CHECK(d != NULL);
    CHECK(sg_ddp_num_buckets(d) >= 2);
    float *back = malloc(4096 * sizeof(float));
    for (int step = 1; step <= 2; step++) {
        for (int j = 0; j < NG; j++) {
            int k = order[j];
            o->scale(g_be, src[k], grads[k], (float)step, count[k]); /* a compute-stream kernel */
            sg_ddp_grad_ready(d, k);
        }
        CHECK(sg_ddp_wait(d) == SG_OK);
        for (int k = 0; k < NG; k++) {
            o->download(g_be, back, grads[k], count[k] * sizeof(float));
            int same = 1;
            for (size_t i = 0; i < count[k]; i++) same &= back[i] == (float)step * h[k][i];
            CHECK(same);
        }
    }
    sg_ddp_destroy(d);
    for (int k = 0; k < NG; k++) {
        o->free(g_be, src[k]);
        free(h[k]);
    }
    o->free(g_be, arena);
    o->free(g_be, grads[2]);
    o->free(g_be, grads[3]);
    free(back);
}

int main(void) {
    if (!sg_backend_cuda_compiled() || sg_backend_cuda_device_count() < 1) {
        fprintf(stderr, "no CUDA device: skipped\n");
        return TEST_SKIP;
    }
    char port[16];
    snprintf(port, sizeof port, "%d", th_free_port());
    setenv("MASTER_PORT", port, 1);
    setenv("SG_DIST_FORCE_TRANSPORT", "1", 1);
    sg_config cfg;
    sg_config_defaults(&cfg);
    cfg.dist.timeout_s = 30;
    snprintf(cfg.dist.backend, sizeof cfg.dist.backend, "nccl");
    sg_backend_opts bo = {0};
    g_be = sg_backend_create("cuda:0", &bo);
    if (!g_be) return 1;
    g_c = sg_comm_create(&cfg, g_be);
    if (!g_c) return 1;
    TEST_RUN(test_collectives);
    TEST_RUN(test_syncbn_enqueued);
    TEST_RUN(test_ddp_comm_stream);
    sg_comm_destroy(g_c);
    sg_backend_destroy(g_be);
    return TEST_EXIT();
}
