/* tests/dist/test_ddp.c - data parallelism across 2-3 real processes:
 *  - bucketed gradient all-reduce (many tiny buckets, in-place and copied,
 *    a frozen gradient, a gradient backward never reports, one step reported
 *    against the bucket order) equals the mean of every rank's gradients;
 *    accumulation micro-steps communicate nothing;
 *  - SyncBN's merge of per-rank (mean, M2, count), unequal batches and a
 *    rank with 0 values, equals the statistics of the union batch computed
 *    in one place; the backward reductions sum across ranks;
 *  - a tiny DeepLabV3 on W ranks x B with SyncBN gives the gradients and
 *    running stats of 1 rank x W*B (rel 1e-4), and without SyncBN it does not.
 * Workers check their own results and exit non-zero on a mismatch. */
#include "core/log.h"
#include "dist/comm.h"
#include "dist/ddp.h"
#include "dist_harness.h"
#include "model/model.h"
#include "testutil.h"

#define WCHECK(cond, ...)                                                                  \
    do {                                                                                   \
        if (!(cond)) {                                                                     \
            fprintf(stderr, "rank %s: check failed %s:%d: %s: ", getenv("RANK"), __FILE__, \
                    __LINE__, #cond);                                                      \
            fprintf(stderr, __VA_ARGS__);                                                  \
            fprintf(stderr, "\n");                                                         \
            return 1;                                                                      \
        }                                                                                  \
    } while (0)

static sg_backend *cpu(void) {
    sg_backend_opts o = {.threads = 1};
    return sg_backend_create("cpu", &o);
}
static void config(sg_config *cfg) {
    sg_config_defaults(cfg);
    cfg->dist.timeout_s = 30;
    snprintf(cfg->dist.backend, sizeof cfg->dist.backend, "gloo");
}

/* ---- bucketed all-reduce ---- */
#define NG 7
static const size_t g_counts[NG] = {5, 300, 17, 1000, 64, 9, 250};

/* rank r's gradient i at step s, element k */
static float gval(int r, int s, int i, size_t k) {
    return (float)((r + 1) * 0.37 + s * 1.5 - i * 0.11 + (double)(k % 13) * 0.01);
}

static int w_buckets(void) {
    sg_config cfg;
    config(&cfg);
    sg_backend *be = cpu();
    sg_comm *c = sg_comm_create(&cfg, be);
    WCHECK(c, "comm");
    int r = sg_comm_rank(c), w = sg_comm_world(c);
    /* gradients 0-3 in one allocation (contiguous: in-place buckets),
     * 4 and 6 separate (copied), 5 frozen */
    float *block = be->ops->alloc(be, (5 + 300 + 17 + 1000) * sizeof(float));
    float *grads[NG] = {block, block + 5, block + 305, block + 322, NULL, NULL, NULL};
    grads[4] = be->ops->alloc(be, 64 * sizeof(float));
    grads[6] = be->ops->alloc(be, 250 * sizeof(float));
    float frozen[9];
    grads[5] = NULL;
    int order[NG] = {6, 3, 2, 5, 1, 0, 4}; /* backward order; 5 is frozen */
    /* 1000-float cap (first: 100 floats): several buckets of each kind */
    sg_ddp *d =
        sg_ddp_create_raw(c, grads, g_counts, NG, order, NG, 4000.0 / 1048576, 400.0 / 1048576);
    WCHECK(d, "ddp");
    WCHECK(sg_ddp_num_buckets(d) >= 3, "%d buckets", sg_ddp_num_buckets(d));
    for (int i = 0; i < 9; i++) frozen[i] = (float)i;
    for (int s = 0; s < 3; s++) {
        /* micro-step without sync: grads stay local, nothing is reduced */
        sg_ddp_set_sync(d, 0);
        for (int i = 0; i < NG; i++)
            if (grads[i])
                for (size_t k = 0; k < g_counts[i]; k++) grads[i][k] = gval(r, s, i, k);
        for (int k = 0; k < NG; k++) sg_ddp_grad_ready(d, order[k]);
        WCHECK(sg_ddp_wait(d) == 0, "wait (no sync)");
        for (int i = 0; i < NG; i++)
            if (grads[i])
                for (size_t k = 0; k < g_counts[i]; k++)
                    WCHECK(grads[i][k] == gval(r, s, i, k), "no-sync step changed grad %d[%zu]", i,
                           k);
        /* synchronizing step; gradient 2 is never reported (unused branch) */
        sg_ddp_set_sync(d, 1);
        for (int k = 0; k < NG; k++) {
            int i = s == 1 ? order[NG - 1 - k] : order[k]; /* step 1: against the bucket order */
            if (i != 2) sg_ddp_grad_ready(d, i);
        }
        WCHECK(sg_ddp_wait(d) == 0, "wait");
        for (int i = 0; i < NG; i++) {
            if (!grads[i]) continue;
            for (size_t k = 0; k < g_counts[i]; k++) {
                double want = 0;
                for (int q = 0; q < w; q++) want += gval(q, s, i, k);
                want /= w;
                WCHECK(fabs(grads[i][k] - want) <= 1e-6 * (fabs(want) + 1),
                       "step %d grad %d[%zu] = %.9g, want %.9g", s, i, k, grads[i][k], want);
            }
        }
    }
    for (int i = 0; i < 9; i++) WCHECK(frozen[i] == (float)i, "frozen changed");
    sg_ddp_destroy(d);
    be->ops->free(be, block);
    be->ops->free(be, grads[4]);
    be->ops->free(be, grads[6]);
    WCHECK(sg_comm_barrier(c) == 0, "barrier");
    sg_comm_destroy(c);
    sg_backend_destroy(be);
    printf("buckets ok\n");
    return 0;
}

/* ---- SyncBN statistics ---- */
#define BC 3
#define BHW 5
static int batch_of(int r) { return r == 1 ? 0 : r + 2; } /* rank 1 has no samples */

static void rank_data(int r, float *x) {
    tu_fill(x, (size_t)batch_of(r) * BC * BHW, 100 + r, -2.0f, 3.0f);
}

static int w_syncbn(void) {
    sg_config cfg;
    config(&cfg);
    sg_backend *be = cpu();
    sg_comm *c = sg_comm_create(&cfg, be);
    WCHECK(c, "comm");
    int r = sg_comm_rank(c), w = sg_comm_world(c);
    int n = batch_of(r);
    float *x = be->ops->alloc(be, ((size_t)n * BC * BHW + 1) * sizeof(float));
    rank_data(r, x);
    float *stats = be->ops->alloc(be, 2 * BC * sizeof(float));
    if (n) be->ops->bn_stats(be, x, n, BC, BHW, stats);
    float *parts = be->ops->alloc(be, (size_t)w * 2 * BC * sizeof(float));
    int64_t counts[8];
    sg_syncbn_gather(c, stats, (int64_t)n * BHW, parts, counts, BC);
    float mean[BC], invstd[BC], rm[BC] = {0, 0, 0}, rv[BC] = {1, 1, 1};
    be->ops->bn_finalize(be, parts, counts, w, BC, 1e-5f, 0.1f, mean, invstd, rm, rv);
    /* the union batch, in one place, in double */
    for (int ch = 0; ch < BC; ch++) {
        double s = 0, s2 = 0;
        int64_t total = 0;
        for (int q = 0; q < w; q++) {
            int nq = batch_of(q);
            float xq[64 * BC * BHW];
            rank_data(q, xq);
            for (int i = 0; i < nq; i++)
                for (int k = 0; k < BHW; k++) s += xq[(i * BC + ch) * BHW + k];
            total += (int64_t)nq * BHW;
        }
        double mu = s / total;
        for (int q = 0; q < w; q++) {
            int nq = batch_of(q);
            float xq[64 * BC * BHW];
            rank_data(q, xq);
            for (int i = 0; i < nq; i++)
                for (int k = 0; k < BHW; k++) {
                    double dv = xq[(i * BC + ch) * BHW + k] - mu;
                    s2 += dv * dv;
                }
        }
        double var = s2 / total;
        WCHECK(counts[1] == 0, "rank 1 count %lld", (long long)counts[1]);
        WCHECK(fabs(mean[ch] - mu) < 1e-5, "mean[%d] %.8g vs %.8g", ch, mean[ch], mu);
        WCHECK(fabs(invstd[ch] - 1 / sqrt(var + 1e-5)) < 1e-5 * invstd[ch], "invstd[%d]", ch);
        WCHECK(fabs(rm[ch] - 0.1 * mu) < 1e-6, "running_mean[%d]", ch);
        WCHECK(fabs(rv[ch] - (0.9 + 0.1 * s2 / (total - 1))) < 1e-5,
               "running_var[%d] %.8g vs unbiased %.8g", ch, rv[ch], 0.9 + 0.1 * s2 / (total - 1));
    }
    /* backward: the 2C reductions are summed across ranks */
    float red[2 * BC];
    for (int i = 0; i < 2 * BC; i++) red[i] = (float)(r + 1) * (i + 1);
    float *dred = be->ops->alloc(be, sizeof red);
    memcpy(dred, red, sizeof red);
    sg_syncbn_allreduce(c, dred, 2 * BC);
    for (int i = 0; i < 2 * BC; i++)
        WCHECK(dred[i] == (float)(w * (w + 1) / 2 * (i + 1)), "red[%d] = %g", i, dred[i]);
    WCHECK(sg_comm_barrier(c) == 0, "barrier");
    sg_comm_destroy(c);
    printf("syncbn ok\n");
    return 0;
}

/* ---- tiny DeepLabV3: W ranks x B == 1 rank x W*B ---- */
static int MB = 2; /* per-rank batch */
#define MH 32
#define MW 32
#define MCLS 3

static sg_model *tiny_model(sg_backend *be) {
    sg_model_opts o;
    sg_model_opts_default(&o, SG_RESNET18);
    o.base_width = 8;
    o.num_classes = MCLS;
    o.aux_head = 0;
    o.aspp_dropout = 0; /* dropout masks depend on the batch layout */
    o.aux_dropout = 0;
    o.output_stride = 16;
    o.n_aspp_rates = 3;
    o.aspp_rates[0] = 2, o.aspp_rates[1] = 3, o.aspp_rates[2] = 4;
    for (int i = 0; i < 4; i++) o.blocks[i] = 1;
    sg_model *m = sg_model_create(be, &o);
    if (m) sg_model_init(m, 1234);
    return m;
}

/* sample s of the union batch: image and labels (some ignored pixels) */
static void sample(int s, float *img, uint8_t *lab) {
    tu_fill(img, 3 * MH * MW, 500 + s, -1.5f, 1.5f);
    for (int i = 0; i < MH * MW; i++)
        lab[i] = (uint8_t)((i * 7 + s * 3 + i / MW) % (MCLS + 1) == MCLS ? 255 : (i + s) % MCLS);
}

/* forward + loss + backward for samples [s0, s0+n); grad_scale given */
static void step(sg_backend *be, sg_model *m, int s0, int n, float grad_scale) {
    float *in = sg_model_input(m);
    uint8_t *lab = be->ops->alloc(be, (size_t)n * MH * MW);
    for (int i = 0; i < n; i++)
        sample(s0 + i, in + (size_t)i * 3 * MH * MW, lab + (size_t)i * MH * MW);
    sg_model_forward(m, 1, 42);
    double loss = 0;
    int64_t valid = 0;
    be->ops->ce_fwd_bwd(be, sg_model_out(m), lab, n, MCLS, MH * MW, 255, grad_scale,
                        sg_model_dout(m), &loss, &valid);
    sg_model_backward(m, 0);
    be->ops->free(be, lab);
}

static int64_t valid_pixels(int s0, int n) {
    int64_t v = 0;
    float img[3 * MH * MW];
    uint8_t lab[MH * MW];
    for (int i = 0; i < n; i++) {
        sample(s0 + i, img, lab);
        for (int k = 0; k < MH * MW; k++) v += lab[k] < MCLS;
    }
    return v;
}

static int w_model(int sync_bn) {
    sg_config cfg;
    config(&cfg);
    cfg.model.sync_bn = sync_bn;
    cfg.dist.bucket_mb = 0.02;
    cfg.dist.first_bucket_mb = 0.005;
    sg_backend *be = cpu();
    sg_comm *c = sg_comm_create(&cfg, be);
    WCHECK(c, "comm");
    int r = sg_comm_rank(c), w = sg_comm_world(c);
    sg_model *m = tiny_model(be), *ref = tiny_model(be);
    WCHECK(m && ref, "model");
    /* rank 0's weights must win: perturb the others' before the broadcast */
    if (r != 0)
        be->ops->scale(be, sg_model_weights(m), sg_model_weights(m), 0.5f,
                       sg_model_param_count(m, 0));
    sg_ddp *d = sg_ddp_create(c, m, &cfg);
    WCHECK(d, "ddp");
    WCHECK(sg_model_plan(m, MB, MH, MW) == 0, "plan");
    WCHECK(sg_model_plan(ref, MB * w, MH, MW) == 0, "plan ref");
    int64_t total = valid_pixels(0, MB * w);
    /* global loss normalisation: each rank scales by W/N_total, DDP averages */
    step(be, m, r * MB, MB, (float)w / (float)total);
    WCHECK(sg_ddp_wait(d) == 0, "ddp wait");
    step(be, ref, 0, MB * w, 1.0f / (float)total);
    size_t np = sg_model_param_count(m, 0), nb = sg_model_buffer_count(m);
    double gerr = tu_max_rel_err(sg_model_grads(ref), sg_model_grads(m), np, 1e-6);
    double berr = tu_max_rel_err(sg_model_buffers(ref), sg_model_buffers(m), nb, 1e-6);
    printf("model sync_bn=%d rank %d: %d buckets, grad rel err %.3g, running-stat rel err %.3g\n",
           sync_bn, r, sg_ddp_num_buckets(d), gerr, berr);
    sg_comm_stats cs;
    sg_comm_get_stats(c, &cs);
    printf("model sync_bn=%d rank %d: %ld SyncBN collectives in %.3f ms, %ld enqueued, %ld poll "
           "sleeps\n",
           sync_bn, r, cs.syncbn_calls, cs.syncbn_s * 1e3, cs.syncbn_queued, cs.poll_sleeps);
    /* the mesh's waits block in poll(2): SyncBN never sleeps in a poll
     * loop on the CPU; nothing is enqueued (no device transport) */
    WCHECK(cs.poll_sleeps == 0, "%ld sleeps in a poll loop", cs.poll_sleeps);
    WCHECK(cs.syncbn_queued == 0, "%ld collectives enqueued on the CPU", cs.syncbn_queued);
    if (sync_bn) {
        WCHECK(cs.syncbn_calls > 0 && cs.syncbn_s > 0, "SyncBN not counted: %ld calls",
               cs.syncbn_calls);
        WCHECK(gerr < 1e-4, "grads differ from the single-process union batch: %.3g", gerr);
        WCHECK(berr < 1e-4, "running stats differ: %.3g", berr);
    } else {
        WCHECK(cs.syncbn_calls == 0, "%ld SyncBN collectives without SyncBN", cs.syncbn_calls);
        WCHECK(gerr > 1e-3, "without SyncBN grads should differ from the union batch: %.3g", gerr);
    }
    sg_ddp_destroy(d);
    WCHECK(sg_comm_barrier(c) == 0, "barrier");
    sg_model_destroy(m);
    sg_model_destroy(ref);
    sg_comm_destroy(c);
    return 0;
}

/* ---- driver ---- */
static void launch_ok(const char *mode, int w, const char *want) {
    char ws[8];
    snprintf(ws, sizeof ws, "%d", w);
    const char *args[] = {"--nproc-per-node", ws, mode, NULL};
    char *out = NULL;
    CHECK_EQ_INT(dh_launch(args, &out, NULL), 0);
    if (want) CHECK_STR_CONTAINS(out, want);
    free(out);
}
static void test_buckets_w2(void) { launch_ok("buckets", 2, "[rank 1] buckets ok"); }
static void test_buckets_w3(void) { launch_ok("buckets", 3, "[rank 2] buckets ok"); }
static void test_syncbn_w3(void) { launch_ok("syncbn", 3, "[rank 2] syncbn ok"); }
static void test_model_syncbn_w2(void) { launch_ok("model1", 2, "model sync_bn=1 rank 1"); }
static void test_model_no_syncbn_w2(void) { launch_ok("model0", 2, "model sync_bn=0 rank 1"); }
static void test_model_syncbn_batch1_w2(void) {
    launch_ok("model1b1", 2, "model sync_bn=1 rank 1");
}

static void test_world1_noop(void) {
    sg_config cfg;
    config(&cfg);
    sg_backend *be = cpu();
    sg_comm *c = sg_comm_create(&cfg, be);
    CHECK(c);
    float g[4] = {1, 2, 3, 4};
    float *gp[1] = {g};
    size_t cnt[1] = {4};
    int order[1] = {0};
    sg_ddp *d = sg_ddp_create_raw(c, gp, cnt, 1, order, 1, 25, 1);
    CHECK(d);
    sg_ddp_grad_ready(d, 0);
    CHECK(sg_ddp_wait(d) == 0);
    CHECK(g[3] == 4.0f); /* world 1: not scaled, not touched */
    sg_ddp_destroy(d);
    sg_comm_destroy(c);
    sg_backend_destroy(be);
}

int main(int argc, char **argv) {
    if (getenv("RANK")) {
        const char *m = argc > 1 ? argv[1] : "";
        if (!strcmp(m, "buckets")) return w_buckets();
        if (!strcmp(m, "syncbn")) return w_syncbn();
        if (!strcmp(m, "model1")) return w_model(1);
        if (!strcmp(m, "model0")) return w_model(0);
        if (!strcmp(m, "model1b1")) {
            MB = 1;
            return w_model(1);
        } /* ASPP pooling BN: 1 value per rank */
        return 2;
    }
    TEST_RUN(test_world1_noop);
    TEST_RUN(test_buckets_w2);
    TEST_RUN(test_buckets_w3);
    TEST_RUN(test_syncbn_w3);
    TEST_RUN(test_model_syncbn_w2);
    TEST_RUN(test_model_no_syncbn_w2);
    TEST_RUN(test_model_syncbn_batch1_w2);
    return TEST_EXIT();
}
