/* tests/cuda/test_cuda_ops.c - every op of the CUDA backend against the naive
 * references (tests/kernels/ref_ops.h), on odd sizes, stride 2, dilations
 * 2/12/36, batch 1 and 4, plus a few seeded random geometries; per-channel
 * reductions on sizes that split a channel over several blocks.
 *
 * Exits 77 (skipped) at once when no CUDA device is visible.
 *
 * Tolerances (max |gpu - ref| / max(max |ref|, 1), unless stated):
 *   convolutions (cuDNN, FP32 without TF32; Winograd/FFT round differently) 5e-4
 *   reductions in float output (BN stats/reduce, bias_bwd, avgpool)          1e-5
 *   elementwise float math (BN fwd/bwd, resize, SGD, normalize, CE grads)    1e-5
 *   CE loss sum (double, relative to the sum)                                1e-6
 *   sumsq (double, relative)                                                 1e-9
 *   exact: maxpool values and argmax indices, dropout mask and outputs,
 *          argmax, confusion counts, CE valid count, copies, concat, relu, add;
 *          and reruns of the deterministic paths (BN statistics, CE loss,
 *          resize backward, convolutions with cudnn_deterministic).
 * Streams: upload_async is ordered after the compute ops issued before it
 * (test_upload_async_order), and upload_wait orders compute after it.
 */
#include <stdlib.h>
#include <string.h>

#include "kernels/backend.h"
#include "kernels/rng.h"
#include "tests/kernels/ref_ops.h"
#include "tests/testutil.h"

static sg_backend *g_be;      /* cudnn_benchmark=1 */
static sg_backend *g_be_det;  /* heuristics, deterministic algorithms only */

#define TOL_CONV 5e-4
#define TOL_RED 1e-5
#define TOL_EW 1e-5

/* ---- helpers: host <-> device ---- */

static void *dev_bytes(sg_backend *be, const void *host, size_t bytes) {
    void *d = be->ops->alloc(be, bytes);
    if (host) be->ops->upload(be, d, host, bytes);
    return d;
}
static float *dev_f(sg_backend *be, const float *host, size_t n) {
    return (float *)dev_bytes(be, host, n * sizeof(float));
}
static float *host_f(sg_backend *be, const float *dev, size_t n) {
    float *h = (float *)malloc(n * sizeof(float) + 1);
    be->ops->download(be, h, dev, n * sizeof(float));
    return h;
}
static float *rnd(size_t n, uint64_t seed, float lo, float hi) {
    float *x = (float *)malloc(n * sizeof(float) + 1);
    tu_fill(x, n, seed, lo, hi);
    return x;
}
static double err(const float *ref, const float *got, size_t n) {
    return tu_max_rel_err(ref, got, n, 1.0);
}
static int bits_equal(const float *a, const float *b, size_t n) {
    return memcmp(a, b, n * sizeof(float)) == 0;
}

/* ---- convolution ---- */

static int conv_case(sg_backend *be, sg_conv_desc d, uint64_t seed) {
    if (sg_conv_desc_init(&d) != 0) return 1;
    size_t nx = (size_t)d.n * d.c * d.h * d.w, nw = (size_t)d.k * d.c * d.r * d.s;
    size_t ny = (size_t)d.n * d.k * d.oh * d.ow;
    float *x = rnd(nx, seed, -1, 1), *w = rnd(nw, seed + 1, -1, 1), *dy = rnd(ny, seed + 2, -1, 1);
    float *y_ref = (float *)malloc(ny * 4), *dx_ref = rnd(nx, seed + 3, -1, 1);
    float *dw_ref = rnd(nw, seed + 4, -1, 1);
    float *dx0 = (float *)malloc(nx * 4), *dw0 = (float *)malloc(nw * 4);
    memcpy(dx0, dx_ref, nx * 4);
    memcpy(dw0, dw_ref, nw * 4);
    float *x_d = dev_f(be, x, nx), *w_d = dev_f(be, w, nw), *dy_d = dev_f(be, dy, ny);
    float *y_d = dev_f(be, NULL, ny), *dx_d = dev_f(be, dx0, nx), *dw_d = dev_f(be, dw0, nw);
    int ok = 1;
    be->ops->conv_prepare(be, &d);
    for (int acc = 0; acc <= 1 && ok; acc++) {
        /* acc=1 adds to the values left by acc=0, on both sides */
        ref_conv_fwd(&d, x, w, y_ref);
        ref_conv_bwd_data(&d, dy, w, dx_ref, acc);
        ref_conv_bwd_weight(&d, x, dy, dw_ref, acc);
        be->ops->conv_fwd(be, &d, x_d, w_d, y_d);
        be->ops->conv_bwd_data(be, &d, dy_d, w_d, dx_d, acc);
        be->ops->conv_bwd_weight(be, &d, x_d, dy_d, dw_d, acc);
        float *y = host_f(be, y_d, ny), *dx = host_f(be, dx_d, nx), *dw = host_f(be, dw_d, nw);
        double ey = err(y_ref, y, ny), edx = err(dx_ref, dx, nx), edw = err(dw_ref, dw, nw);
        if (ey > TOL_CONV || edx > TOL_CONV || edw > TOL_CONV) {
            fprintf(stderr,
                    "  conv n%d c%d %dx%d k%d %dx%d stride %d pad %d dil %d acc %d: rel err "
                    "fwd %.3g bwd-data %.3g bwd-filter %.3g (tol %g)\n",
                    d.n, d.c, d.h, d.w, d.k, d.r, d.s, d.stride_h, d.pad_h, d.dil_h, acc, ey,
                    edx, edw, TOL_CONV);
            ok = 0;
        }
        if (ok && be == g_be_det) {
            /* deterministic algorithms: the same bits again (accumulate=0) */
            be->ops->conv_bwd_weight(be, &d, x_d, dy_d, dw_d, 0);
            be->ops->conv_bwd_data(be, &d, dy_d, w_d, dx_d, 0);
            float *dw1 = host_f(be, dw_d, nw), *dx1 = host_f(be, dx_d, nx);
            be->ops->conv_bwd_weight(be, &d, x_d, dy_d, dw_d, 0);
            be->ops->conv_bwd_data(be, &d, dy_d, w_d, dx_d, 0);
            float *dw2 = host_f(be, dw_d, nw), *dx2 = host_f(be, dx_d, nx);
            if (!bits_equal(dw1, dw2, nw) || !bits_equal(dx1, dx2, nx)) {
                fprintf(stderr, "  conv n%d c%d %dx%d k%d dil %d: deterministic mode gave "
                                "different bits on a rerun\n",
                        d.n, d.c, d.h, d.w, d.k, d.dil_h);
                ok = 0;
            }
            free(dw1), free(dx1), free(dw2), free(dx2);
        }
        free(y);
        free(dx);
        free(dw);
    }
    be->ops->free(be, x_d);
    be->ops->free(be, w_d);
    be->ops->free(be, dy_d);
    be->ops->free(be, y_d);
    be->ops->free(be, dx_d);
    be->ops->free(be, dw_d);
    free(x), free(w), free(dy), free(y_ref), free(dx_ref), free(dw_ref), free(dx0), free(dw0);
    return ok;
}

static sg_conv_desc cd(int n, int c, int h, int w, int k, int r, int stride, int pad, int dil) {
    sg_conv_desc d;
    memset(&d, 0, sizeof d);
    d.n = n, d.c = c, d.h = h, d.w = w, d.k = k, d.r = r, d.s = r;
    d.stride_h = d.stride_w = stride;
    d.pad_h = d.pad_w = pad;
    d.dil_h = d.dil_w = dil;
    return d;
}

static const sg_conv_desc *fixed_convs(int *count) {
    static sg_conv_desc list[9];
    int i = 0;
    list[i++] = cd(1, 3, 17, 13, 5, 3, 1, 1, 1);  /* odd sizes, 3x3 */
    list[i++] = cd(4, 6, 15, 11, 4, 3, 2, 1, 1);  /* batch 4, stride 2 */
    list[i++] = cd(1, 4, 9, 9, 7, 1, 2, 0, 1);    /* 1x1 stride 2 (downsample) */
    list[i++] = cd(4, 3, 33, 31, 8, 7, 2, 3, 1);  /* stem 7x7/2 */
    list[i++] = cd(2, 5, 13, 14, 3, 3, 1, 2, 2);  /* dilation 2 */
    list[i++] = cd(1, 3, 29, 27, 4, 3, 1, 12, 12); /* dilation 12 (ASPP) */
    list[i++] = cd(1, 2, 75, 73, 3, 3, 1, 36, 36); /* dilation 36 (ASPP) */
    list[i++] = cd(4, 2, 7, 9, 3, 3, 1, 36, 36);  /* dilation 36 on a map smaller than it */
    list[i++] = cd(1, 16, 5, 5, 16, 1, 1, 0, 1);  /* 1x1 */
    *count = i;
    return list;
}

static void test_conv_fixed(void) {
    int count;
    const sg_conv_desc *list = fixed_convs(&count);
    for (int i = 0; i < count; i++) {
        CHECK_MSG(conv_case(g_be, list[i], 100 + i), "benchmark backend, shape %d", i);
        CHECK_MSG(conv_case(g_be_det, list[i], 200 + i), "deterministic backend, shape %d", i);
    }
}

static void test_conv_random(void) {
    uint64_t key = sg_rng_key(7, 0, 0, 0, 99);
    for (int t = 0; t < 8; t++) {
        int r = 1 + 2 * (int)(sg_rng_u64(key, 10 * t) % 2);       /* 1 or 3 */
        int stride = 1 + (int)(sg_rng_u64(key, 10 * t + 1) % 2);  /* 1 or 2 */
        int dils[3] = {1, 2, 3};
        int dil = r == 3 ? dils[sg_rng_u64(key, 10 * t + 2) % 3] : 1;
        int h = 5 + (int)(sg_rng_u64(key, 10 * t + 3) % 20);
        int w = 5 + (int)(sg_rng_u64(key, 10 * t + 4) % 20);
        int c = 1 + (int)(sg_rng_u64(key, 10 * t + 5) % 9);
        int k = 1 + (int)(sg_rng_u64(key, 10 * t + 6) % 9);
        int n = (t % 2) ? 4 : 1;
        sg_conv_desc d = cd(n, c, h, w, k, r, stride, dil * (r / 2), dil);
        CHECK_MSG(conv_case(g_be, d, 300 + t), "random shape %d", t);
    }
}

/* ---- bias, batch norm ---- */

static void test_bias(void) {
    /* 15005 values per channel: split over 3 blocks, boundaries inside rows */
    int n = 5, c = 3, hw = 3001;
    size_t cnt = (size_t)n * c * hw;
    float *y0 = rnd(cnt, 1, -1, 1), *b = rnd(c, 2, -1, 1), *db0 = rnd(c, 3, -1, 1);
    float *y_ref = (float *)malloc(cnt * 4), *db_ref = (float *)malloc(c * 4);
    memcpy(y_ref, y0, cnt * 4);
    float *y_d = dev_f(g_be, y0, cnt), *b_d = dev_f(g_be, b, c), *db_d = dev_f(g_be, db0, c);
    ref_bias_fwd(y_ref, b, n, c, hw);
    g_be->ops->bias_fwd(g_be, y_d, b_d, n, c, hw);
    float *y = host_f(g_be, y_d, cnt);
    CHECK(bits_equal(y_ref, y, cnt));
    for (int acc = 0; acc <= 1; acc++) {
        /* y_d holds y_ref (after bias_fwd): use it as the gradient */
        memcpy(db_ref, db0, c * 4);
        g_be->ops->upload(g_be, db_d, db0, c * 4);
        ref_bias_bwd(y_ref, db_ref, n, c, hw, acc);
        g_be->ops->bias_bwd(g_be, y_d, db_d, n, c, hw, acc);
        float *db = host_f(g_be, db_d, c);
        CHECK_NEAR(err(db_ref, db, c), 0, TOL_RED);
        free(db);
    }
    g_be->ops->free(g_be, y_d), g_be->ops->free(g_be, b_d), g_be->ops->free(g_be, db_d);
    free(y0), free(b), free(db0), free(y_ref), free(db_ref), free(y);
}

static void bn_case(int n, int c, int hw, int relu) {
    size_t cnt = (size_t)n * c * hw;
    /* offset 100: the variance is small next to the mean (stability check) */
    float *x = rnd(cnt, 11 + n, 99.0f, 101.0f), *dy = rnd(cnt, 12, -1, 1);
    float *gamma = rnd(c, 13, 0.5f, 1.5f), *beta = rnd(c, 14, -0.5f, 0.5f);
    float stats_ref[64], mean_ref[32], invstd_ref[32], rm_ref[32], rv_ref[32], red_ref[64];
    float *x_d = dev_f(g_be, x, cnt), *dy_d = dev_f(g_be, dy, cnt);
    float *g_d = dev_f(g_be, gamma, c), *b_d = dev_f(g_be, beta, c);
    float *stats_d = dev_f(g_be, NULL, 2 * c), *mean_d = dev_f(g_be, NULL, c);
    float *invstd_d = dev_f(g_be, NULL, c), *red_d = dev_f(g_be, NULL, 2 * c);
    float *y_d = dev_f(g_be, NULL, cnt), *dx_d = dev_f(g_be, NULL, cnt);
    float rm0[32], rv0[32];
    for (int i = 0; i < c; i++) rm0[i] = 0.1f * i, rv0[i] = 1.0f + 0.2f * i;
    float *rm_d = dev_f(g_be, rm0, c), *rv_d = dev_f(g_be, rv0, c);
    memcpy(rm_ref, rm0, sizeof rm0);
    memcpy(rv_ref, rv0, sizeof rv0);

    ref_bn_stats(x, n, c, hw, stats_ref);
    g_be->ops->bn_stats(g_be, x_d, n, c, hw, stats_d);
    float *stats = host_f(g_be, stats_d, 2 * c);
    g_be->ops->bn_stats(g_be, x_d, n, c, hw, stats_d); /* again: same bits (no atomics) */
    float *stats2 = host_f(g_be, stats_d, 2 * c);
    CHECK(bits_equal(stats, stats2, 2 * c));
    free(stats2);
    for (int i = 0; i < c; i++) {
        CHECK_NEAR(stats[i], stats_ref[i], 1e-5 * fabs(stats_ref[i]) + 1e-6);
        CHECK_NEAR(stats[c + i], stats_ref[c + i], 1e-5 * fabs(stats_ref[c + i]) + 1e-6);
    }
    int64_t count = (int64_t)n * hw;
    ref_bn_finalize(stats_ref, &count, 1, c, 1e-5f, 0.1f, mean_ref, invstd_ref, rm_ref, rv_ref);
    g_be->ops->bn_finalize(g_be, stats_d, &count, 1, c, 1e-5f, 0.1f, mean_d, invstd_d, rm_d,
                           rv_d);
    float *mean = host_f(g_be, mean_d, c), *invstd = host_f(g_be, invstd_d, c);
    float *rm = host_f(g_be, rm_d, c), *rv = host_f(g_be, rv_d, c);
    CHECK_NEAR(tu_max_rel_err(mean_ref, mean, c, 1e-3), 0, TOL_RED);
    CHECK_NEAR(tu_max_rel_err(invstd_ref, invstd, c, 1e-3), 0, TOL_RED);
    CHECK_NEAR(tu_max_rel_err(rm_ref, rm, c, 1e-3), 0, TOL_RED);
    CHECK_NEAR(tu_max_rel_err(rv_ref, rv, c, 1e-3), 0, TOL_RED);

    /* from here on both sides use the reference mean/invstd */
    g_be->ops->upload(g_be, mean_d, mean_ref, c * 4);
    g_be->ops->upload(g_be, invstd_d, invstd_ref, c * 4);
    float *y_ref = (float *)malloc(cnt * 4);
    ref_bn_fwd(x, mean_ref, invstd_ref, gamma, beta, y_ref, n, c, hw, relu);
    g_be->ops->bn_fwd(g_be, x_d, mean_d, invstd_d, g_d, b_d, y_d, n, c, hw, relu);
    float *y = host_f(g_be, y_d, cnt);
    CHECK_NEAR(err(y_ref, y, cnt), 0, TOL_EW);
    if (relu) {
        size_t zeros = 0;
        for (size_t i = 0; i < cnt; i++) zeros += y[i] == 0.0f;
        CHECK_MSG(zeros > 0 && zeros < cnt, "relu case should clip some but not all (%zu/%zu)",
                  zeros, cnt);
    }
    g_be->ops->upload(g_be, y_d, y_ref, cnt * 4); /* identical y for the masks below */

    ref_bn_bwd_reduce(dy, x, y_ref, mean_ref, red_ref, n, c, hw, relu);
    g_be->ops->bn_bwd_reduce(g_be, dy_d, x_d, y_d, mean_d, red_d, n, c, hw, relu);
    float *red = host_f(g_be, red_d, 2 * c);
    CHECK_NEAR(err(red_ref, red, 2 * c), 0, TOL_RED);
    g_be->ops->upload(g_be, red_d, red_ref, 2 * c * 4);

    float *dx0 = rnd(cnt, 15, -1, 1), *dx_ref = (float *)malloc(cnt * 4);
    for (int acc = 0; acc <= 1; acc++) {
        memcpy(dx_ref, dx0, cnt * 4);
        g_be->ops->upload(g_be, dx_d, dx0, cnt * 4);
        ref_bn_bwd_elem(dy, x, y_ref, mean_ref, invstd_ref, gamma, red_ref, (double)count,
                        dx_ref, n, c, hw, relu, acc);
        g_be->ops->bn_bwd_elem(g_be, dy_d, x_d, y_d, mean_d, invstd_d, g_d, red_d,
                               (double)count, dx_d, n, c, hw, relu, acc);
        float *dx = host_f(g_be, dx_d, cnt);
        CHECK_NEAR(err(dx_ref, dx, cnt), 0, TOL_EW);
        free(dx);
    }
    float dg_ref[32], db_ref[32];
    for (int acc = 0; acc <= 1; acc++) {
        for (int i = 0; i < c; i++) dg_ref[i] = 0.5f, db_ref[i] = -0.25f;
        float *dg_d = dev_f(g_be, dg_ref, c), *db_d = dev_f(g_be, db_ref, c);
        ref_bn_param_grads(red_ref, invstd_ref, dg_ref, db_ref, c, acc);
        g_be->ops->bn_param_grads(g_be, red_d, invstd_d, dg_d, db_d, c, acc);
        float *dg = host_f(g_be, dg_d, c), *db = host_f(g_be, db_d, c);
        CHECK_NEAR(err(dg_ref, dg, c), 0, TOL_EW);
        CHECK_NEAR(err(db_ref, db, c), 0, TOL_EW);
        g_be->ops->free(g_be, dg_d);
        g_be->ops->free(g_be, db_d);
        free(dg), free(db);
    }
    /* in place: y == x */
    g_be->ops->copy(g_be, y_d, x_d, cnt * 4);
    g_be->ops->bn_fwd(g_be, y_d, mean_d, invstd_d, g_d, b_d, y_d, n, c, hw, relu);
    float *y2 = host_f(g_be, y_d, cnt);
    CHECK(bits_equal(y, y2, cnt));

    float *ptrs[] = {x_d, dy_d, g_d, b_d, stats_d, mean_d, invstd_d, red_d, y_d, dx_d, rm_d, rv_d};
    for (size_t i = 0; i < sizeof ptrs / sizeof *ptrs; i++) g_be->ops->free(g_be, ptrs[i]);
    free(x), free(dy), free(gamma), free(beta), free(stats), free(mean), free(invstd), free(rm),
        free(rv), free(y_ref), free(y), free(red), free(dx0), free(dx_ref), free(y2);
}

static void test_bn_batch1(void) { bn_case(1, 5, 7 * 9, 0); }
static void test_bn_batch4_relu(void) { bn_case(4, 7, 13 * 11, 1); }
static void test_bn_large_plane(void) { bn_case(2, 3, 65 * 67, 1); }
/* 67596 values per channel: 16 blocks per channel, slices cross rows */
static void test_bn_split_channels(void) { bn_case(4, 2, 129 * 131, 0); }

static void test_bn_finalize_parts(void) {
    /* 3 parts, the middle one empty: Chan's merge must skip it */
    int c = 4, parts = 3;
    int64_t counts[3] = {37, 0, 120};
    float ps[3 * 8];
    tu_fill(ps, 3 * 8, 21, 0.5f, 3.0f);
    float mean_ref[4], invstd_ref[4], rm_ref[4] = {0, 1, 2, 3}, rv_ref[4] = {1, 1, 2, 2};
    float *ps_d = dev_f(g_be, ps, 3 * 8), *rm_d = dev_f(g_be, rm_ref, c);
    float *rv_d = dev_f(g_be, rv_ref, c);
    float *mean_d = dev_f(g_be, NULL, c), *invstd_d = dev_f(g_be, NULL, c);
    ref_bn_finalize(ps, counts, parts, c, 1e-3f, 0.3f, mean_ref, invstd_ref, rm_ref, rv_ref);
    g_be->ops->bn_finalize(g_be, ps_d, counts, parts, c, 1e-3f, 0.3f, mean_d, invstd_d, rm_d,
                           rv_d);
    float *mean = host_f(g_be, mean_d, c), *invstd = host_f(g_be, invstd_d, c);
    float *rm = host_f(g_be, rm_d, c), *rv = host_f(g_be, rv_d, c);
    CHECK_NEAR(err(mean_ref, mean, c), 0, 1e-6);
    CHECK_NEAR(err(invstd_ref, invstd, c), 0, 1e-6);
    CHECK_NEAR(err(rm_ref, rm, c), 0, 1e-6);
    CHECK_NEAR(err(rv_ref, rv, c), 0, 1e-6);
    /* without running stats, and N == 1 in total */
    int64_t one[1] = {1};
    ref_bn_finalize(ps, one, 1, c, 1e-5f, 0.1f, mean_ref, invstd_ref, NULL, NULL);
    g_be->ops->bn_finalize(g_be, ps_d, one, 1, c, 1e-5f, 0.1f, mean_d, invstd_d, NULL, NULL);
    float *mean1 = host_f(g_be, mean_d, c), *invstd1 = host_f(g_be, invstd_d, c);
    CHECK_NEAR(err(mean_ref, mean1, c), 0, 1e-6);
    CHECK_NEAR(err(invstd_ref, invstd1, c), 0, 1e-6);
    /* many parts (beyond the kernel-argument limit) */
    int many = 100;
    float *mps = rnd((size_t)many * 2 * c, 22, 0.5f, 3.0f);
    int64_t *mcounts = (int64_t *)malloc(many * sizeof(int64_t));
    for (int p = 0; p < many; p++) mcounts[p] = (p % 7 == 3) ? 0 : 10 + p;
    float *mps_d = dev_f(g_be, mps, (size_t)many * 2 * c);
    ref_bn_finalize(mps, mcounts, many, c, 1e-5f, 0.1f, mean_ref, invstd_ref, NULL, NULL);
    g_be->ops->bn_finalize(g_be, mps_d, mcounts, many, c, 1e-5f, 0.1f, mean_d, invstd_d, NULL,
                           NULL);
    float *mean2 = host_f(g_be, mean_d, c), *invstd2 = host_f(g_be, invstd_d, c);
    CHECK_NEAR(err(mean_ref, mean2, c), 0, 1e-6);
    CHECK_NEAR(err(invstd_ref, invstd2, c), 0, 1e-6);

    float evm[4], evi[4];
    ref_bn_eval_params(rm_ref, rv_ref, c, 1e-5f, evm, evi);
    g_be->ops->upload(g_be, rm_d, rm_ref, c * 4);
    g_be->ops->upload(g_be, rv_d, rv_ref, c * 4);
    g_be->ops->bn_eval_params(g_be, rm_d, rv_d, c, 1e-5f, mean_d, invstd_d);
    float *em = host_f(g_be, mean_d, c), *ei = host_f(g_be, invstd_d, c);
    CHECK(bits_equal(evm, em, c));
    CHECK_NEAR(err(evi, ei, c), 0, 1e-6);
    float *ptrs[] = {ps_d, rm_d, rv_d, mean_d, invstd_d, mps_d};
    for (size_t i = 0; i < sizeof ptrs / sizeof *ptrs; i++) g_be->ops->free(g_be, ptrs[i]);
    free(mean), free(invstd), free(rm), free(rv), free(mean1), free(invstd1), free(mps),
        free(mcounts), free(mean2), free(invstd2), free(em), free(ei);
}

/* ---- elementwise ---- */

static void test_elementwise(void) {
    size_t cnt = 1000003; /* odd, several blocks per grid-stride step */
    float *a = rnd(cnt, 31, -1, 1), *b = rnd(cnt, 32, -1, 1), *ref = (float *)malloc(cnt * 4);
    float *a_d = dev_f(g_be, a, cnt), *b_d = dev_f(g_be, b, cnt), *y_d = dev_f(g_be, NULL, cnt);
    float *got;

    ref_relu_fwd(a, ref, cnt);
    g_be->ops->relu_fwd(g_be, a_d, y_d, cnt);
    got = host_f(g_be, y_d, cnt);
    CHECK(bits_equal(ref, got, cnt));
    free(got);

    for (int acc = 0; acc <= 1; acc++) {
        memcpy(ref, b, cnt * 4);
        g_be->ops->upload(g_be, y_d, b, cnt * 4);
        ref_relu_bwd(b, a, ref, cnt, acc);
        g_be->ops->relu_bwd(g_be, b_d, a_d, y_d, cnt, acc);
        got = host_f(g_be, y_d, cnt);
        CHECK(bits_equal(ref, got, cnt));
        free(got);
    }
    for (int relu = 0; relu <= 1; relu++) {
        ref_add(a, b, ref, cnt, relu);
        g_be->ops->add(g_be, a_d, b_d, y_d, cnt, relu);
        got = host_f(g_be, y_d, cnt);
        CHECK(bits_equal(ref, got, cnt));
        free(got);
    }
    /* y aliases a */
    g_be->ops->copy(g_be, y_d, a_d, cnt * 4);
    g_be->ops->add(g_be, y_d, b_d, y_d, cnt, 1);
    got = host_f(g_be, y_d, cnt);
    CHECK(bits_equal(ref, got, cnt));
    free(got);

    ref_scale(a, ref, -0.37f, cnt);
    g_be->ops->copy(g_be, y_d, a_d, cnt * 4);
    g_be->ops->scale(g_be, y_d, y_d, -0.37f, cnt); /* in place */
    got = host_f(g_be, y_d, cnt);
    CHECK(bits_equal(ref, got, cnt));
    free(got);

    memcpy(ref, b, cnt * 4);
    ref_axpy(1.7f, a, ref, cnt);
    g_be->ops->copy(g_be, y_d, b_d, cnt * 4);
    g_be->ops->axpy(g_be, 1.7f, a_d, y_d, cnt);
    got = host_f(g_be, y_d, cnt);
    CHECK_NEAR(err(ref, got, cnt), 0, 1e-6); /* may fuse to one rounding */
    free(got);

    double s_ref = ref_sumsq(a, cnt), s = g_be->ops->sumsq(g_be, a_d, cnt);
    CHECK_NEAR(s, s_ref, 1e-9 * s_ref);
    CHECK_NEAR(g_be->ops->sumsq(g_be, a_d, 1), (double)a[0] * a[0], 1e-12);
    g_be->ops->free(g_be, a_d);
    g_be->ops->free(g_be, b_d);
    g_be->ops->free(g_be, y_d);
    free(a), free(b), free(ref);
}

static void test_dropout(void) {
    size_t cnt = 100001;
    float *x = rnd(cnt, 41, -1, 1), *dy = rnd(cnt, 42, -1, 1);
    float *y_ref = (float *)malloc(cnt * 4), *dx_ref = (float *)malloc(cnt * 4);
    uint8_t *m_ref = (uint8_t *)malloc(cnt), *m = (uint8_t *)malloc(cnt);
    float *x_d = dev_f(g_be, x, cnt), *dy_d = dev_f(g_be, dy, cnt);
    float *y_d = dev_f(g_be, NULL, cnt), *dx_d = dev_f(g_be, NULL, cnt);
    uint8_t *m_d = (uint8_t *)dev_bytes(g_be, NULL, cnt);
    const float ps[4] = {0.1f, 0.5f, 0.0f, 1.0f};
    uint64_t key = sg_rng_key(1234, 5, 2, 0, SG_RNG_DROPOUT);
    for (int t = 0; t < 4; t++) {
        float p = ps[t];
        ref_dropout_fwd(x, y_ref, m_ref, cnt, p, key);
        g_be->ops->dropout_fwd(g_be, x_d, y_d, m_d, cnt, p, key);
        float *y = host_f(g_be, y_d, cnt);
        g_be->ops->download(g_be, m, m_d, cnt);
        CHECK_MSG(memcmp(m, m_ref, cnt) == 0, "mask differs from the reference at p=%g", p);
        CHECK_MSG(bits_equal(y_ref, y, cnt), "outputs differ at p=%g", p);
        size_t kept = 0;
        for (size_t i = 0; i < cnt; i++) kept += m[i];
        CHECK_NEAR((double)kept / cnt, 1.0 - p, 0.01);
        for (int acc = 0; acc <= 1; acc++) {
            for (size_t i = 0; i < cnt; i++) dx_ref[i] = 0.25f;
            g_be->ops->upload(g_be, dx_d, dx_ref, cnt * 4);
            ref_dropout_bwd(dy, m_ref, dx_ref, cnt, p, acc);
            g_be->ops->dropout_bwd(g_be, dy_d, m_d, dx_d, cnt, p, acc);
            float *dx = host_f(g_be, dx_d, cnt);
            CHECK_MSG(bits_equal(dx_ref, dx, cnt), "dropout_bwd p=%g acc=%d", p, acc);
            free(dx);
        }
        free(y);
    }
    g_be->ops->free(g_be, x_d), g_be->ops->free(g_be, dy_d), g_be->ops->free(g_be, y_d);
    g_be->ops->free(g_be, dx_d), g_be->ops->free(g_be, m_d);
    free(x), free(dy), free(y_ref), free(dx_ref), free(m_ref), free(m);
}

/* ---- pooling, resize, concat ---- */

static void maxpool_case(int n, int c, int h, int w) {
    int oh = ref_pool_out(h), ow = ref_pool_out(w);
    size_t ni = (size_t)n * c * h * w, no = (size_t)n * c * oh * ow;
    float *x = rnd(ni, 51 + h, -1, 1), *dy = rnd(no, 52, -1, 1);
    /* quantise to create ties: the first maximum must win */
    for (size_t i = 0; i < ni; i++) x[i] = floorf(x[i] * 4.0f) / 4.0f;
    float *y_ref = (float *)malloc(no * 4), *dx_ref = (float *)malloc(ni * 4);
    int32_t *idx_ref = (int32_t *)malloc(no * 4), *idx = (int32_t *)malloc(no * 4);
    float *x_d = dev_f(g_be, x, ni), *y_d = dev_f(g_be, NULL, no), *dy_d = dev_f(g_be, dy, no);
    float *dx_d = dev_f(g_be, NULL, ni);
    int32_t *idx_d = (int32_t *)dev_bytes(g_be, NULL, no * 4);
    ref_maxpool_fwd(x, y_ref, idx_ref, n, c, h, w, oh, ow);
    g_be->ops->maxpool_fwd(g_be, x_d, y_d, idx_d, n, c, h, w, oh, ow);
    float *y = host_f(g_be, y_d, no);
    g_be->ops->download(g_be, idx, idx_d, no * 4);
    CHECK(bits_equal(y_ref, y, no));
    CHECK(memcmp(idx, idx_ref, no * 4) == 0);
    ref_maxpool_bwd(dy, idx_ref, dx_ref, n, c, h, w, oh, ow);
    g_be->ops->upload(g_be, dx_d, x, ni * 4); /* garbage: bwd must overwrite */
    g_be->ops->maxpool_bwd(g_be, dy_d, idx_d, dx_d, n, c, h, w, oh, ow);
    float *dx = host_f(g_be, dx_d, ni);
    CHECK_NEAR(err(dx_ref, dx, ni), 0, 1e-6);
    g_be->ops->free(g_be, x_d), g_be->ops->free(g_be, y_d), g_be->ops->free(g_be, dy_d);
    g_be->ops->free(g_be, dx_d), g_be->ops->free(g_be, idx_d);
    free(x), free(dy), free(y_ref), free(dx_ref), free(idx_ref), free(idx), free(y), free(dx);
}

static void test_maxpool(void) {
    maxpool_case(1, 3, 17, 13);
    maxpool_case(4, 2, 16, 10);
    maxpool_case(1, 1, 1, 2);
}

static void test_avgpool(void) {
    int n = 4, c = 6, hw = 33 * 31;
    size_t cnt = (size_t)n * c * hw;
    float *x = rnd(cnt, 61, -1, 3), *dy = rnd((size_t)n * c, 62, -1, 1);
    float *y_ref = (float *)malloc(n * c * 4), *dx_ref = (float *)malloc(cnt * 4);
    float *x_d = dev_f(g_be, x, cnt), *y_d = dev_f(g_be, NULL, n * c);
    float *dy_d = dev_f(g_be, dy, n * c), *dx_d = dev_f(g_be, NULL, cnt);
    ref_avgpool_fwd(x, y_ref, n, c, hw);
    g_be->ops->avgpool_fwd(g_be, x_d, y_d, n, c, hw);
    float *y = host_f(g_be, y_d, n * c);
    CHECK_NEAR(err(y_ref, y, n * c), 0, TOL_RED);
    for (int acc = 0; acc <= 1; acc++) {
        memcpy(dx_ref, x, cnt * 4);
        g_be->ops->upload(g_be, dx_d, x, cnt * 4);
        ref_avgpool_bwd(dy, dx_ref, n, c, hw, acc);
        g_be->ops->avgpool_bwd(g_be, dy_d, dx_d, n, c, hw, acc);
        float *dx = host_f(g_be, dx_d, cnt);
        CHECK_NEAR(err(dx_ref, dx, cnt), 0, TOL_EW);
        free(dx);
    }
    g_be->ops->free(g_be, x_d), g_be->ops->free(g_be, y_d), g_be->ops->free(g_be, dy_d);
    g_be->ops->free(g_be, dx_d);
    free(x), free(dy), free(y_ref), free(dx_ref), free(y);
}

static int resize_case(int n, int c, int h, int w, int oh, int ow) {
    size_t ni = (size_t)n * c * h * w, no = (size_t)n * c * oh * ow;
    float *x = rnd(ni, 71 + h, -1, 1), *dy = rnd(no, 72 + oh, -1, 1);
    float *y_ref = (float *)malloc(no * 4), *dx_ref = (float *)malloc(ni * 4);
    float *x_d = dev_f(g_be, x, ni), *y_d = dev_f(g_be, NULL, no), *dy_d = dev_f(g_be, dy, no);
    float *dx_d = dev_f(g_be, NULL, ni);
    int ok = 1;
    ref_resize_fwd(x, y_ref, n, c, h, w, oh, ow);
    g_be->ops->resize_fwd(g_be, x_d, y_d, n, c, h, w, oh, ow);
    float *y = host_f(g_be, y_d, no);
    double ey = err(y_ref, y, no);
    if (ey > TOL_EW) ok = 0;
    double edx = 0;
    for (int acc = 0; acc <= 1; acc++) {
        memcpy(dx_ref, x, ni * 4);
        g_be->ops->upload(g_be, dx_d, x, ni * 4);
        ref_resize_bwd(dy, dx_ref, n, c, h, w, oh, ow, acc);
        g_be->ops->resize_bwd(g_be, dy_d, dx_d, n, c, h, w, oh, ow, acc);
        float *dx = host_f(g_be, dx_d, ni);
        double e = err(dx_ref, dx, ni);
        if (e > edx) edx = e;
        free(dx);
    }
    if (edx > TOL_EW) ok = 0;
    /* the gather backward is deterministic: a rerun gives the same bits */
    g_be->ops->resize_bwd(g_be, dy_d, dx_d, n, c, h, w, oh, ow, 0);
    float *r1 = host_f(g_be, dx_d, ni);
    g_be->ops->resize_bwd(g_be, dy_d, dx_d, n, c, h, w, oh, ow, 0);
    float *r2 = host_f(g_be, dx_d, ni);
    if (!bits_equal(r1, r2, ni)) {
        fprintf(stderr, "  resize_bwd gave different bits on a rerun\n");
        ok = 0;
    }
    free(r1), free(r2);
    if (!ok)
        fprintf(stderr, "  resize n%d c%d %dx%d -> %dx%d: rel err fwd %.3g bwd %.3g (tol %g)\n",
                n, c, h, w, oh, ow, ey, edx, TOL_EW);
    g_be->ops->free(g_be, x_d), g_be->ops->free(g_be, y_d), g_be->ops->free(g_be, dy_d);
    g_be->ops->free(g_be, dx_d);
    free(x), free(dy), free(y_ref), free(dx_ref), free(y);
    return ok;
}

static void test_resize(void) {
    CHECK(resize_case(1, 3, 9, 7, 33, 29));    /* up, odd */
    CHECK(resize_case(4, 2, 33, 29, 9, 7));    /* down */
    CHECK(resize_case(1, 2, 13, 17, 17, 13));  /* non-integer ratios both ways */
    CHECK(resize_case(4, 3, 11, 11, 11, 11));  /* identity */
    CHECK(resize_case(1, 21, 5, 5, 40, 40));   /* 8x, like the logits upsample */
    CHECK(resize_case(2, 1, 1, 1, 3, 4));      /* from a single pixel (ASPP pooling branch) */
    CHECK(resize_case(1, 1, 64, 48, 1, 3));    /* to tiny */
}

static void test_concat(void) {
    int n = 4, hw = 29, cs = 3, cdst = 11, off = 5;
    size_t ns = (size_t)n * cs * hw, nd = (size_t)n * cdst * hw;
    float *src = rnd(ns, 81, -1, 1), *dst0 = rnd(nd, 82, -1, 1);
    float *ref = (float *)malloc(nd * 4), *sref = (float *)malloc(ns * 4);
    memcpy(ref, dst0, nd * 4);
    float *s_d = dev_f(g_be, src, ns), *d_d = dev_f(g_be, dst0, nd);
    ref_concat_fwd(src, ref, n, cs, cdst, off, hw);
    g_be->ops->concat_fwd(g_be, s_d, d_d, n, cs, cdst, off, hw);
    float *got = host_f(g_be, d_d, nd);
    CHECK(bits_equal(ref, got, nd));
    for (int acc = 0; acc <= 1; acc++) {
        memcpy(sref, src, ns * 4);
        g_be->ops->upload(g_be, s_d, src, ns * 4);
        ref_concat_bwd(dst0, sref, n, cs, cdst, off, hw, acc);
        g_be->ops->upload(g_be, d_d, dst0, nd * 4);
        g_be->ops->concat_bwd(g_be, d_d, s_d, n, cs, cdst, off, hw, acc);
        float *s = host_f(g_be, s_d, ns);
        CHECK(bits_equal(sref, s, ns));
        free(s);
    }
    g_be->ops->free(g_be, s_d), g_be->ops->free(g_be, d_d);
    free(src), free(dst0), free(ref), free(sref), free(got);
}

/* ---- loss, metrics ---- */

static void test_ce(void) {
    int n = 4, c = 7, hw = 23 * 19, ignore = 255;
    size_t np = (size_t)n * hw, nl = np * c;
    float *logits = rnd(nl, 91, -6, 6);
    uint8_t *lab = (uint8_t *)malloc(np);
    uint64_t key = sg_rng_key(3, 0, 0, 0, 98);
    for (size_t i = 0; i < np; i++) {
        uint64_t r = sg_rng_u64(key, i) % 10;
        lab[i] = r == 0 ? 255 : r == 1 ? (uint8_t)(c + 3) : (uint8_t)(r % c);
    }
    float *l_d = dev_f(g_be, logits, nl), *dl_d = dev_f(g_be, NULL, nl);
    uint8_t *lab_d = (uint8_t *)dev_bytes(g_be, lab, np);
    float *dl_ref = (float *)malloc(nl * 4);
    double loss_ref, loss;
    int64_t valid_ref, valid;
    ref_ce_fwd_bwd(logits, lab, n, c, hw, ignore, 0.01f, dl_ref, &loss_ref, &valid_ref);
    g_be->ops->upload(g_be, dl_d, logits, nl * 4); /* garbage: ignored pixels must be zeroed */
    g_be->ops->ce_fwd_bwd(g_be, l_d, lab_d, n, c, hw, ignore, 0.01f, dl_d, &loss, &valid);
    CHECK_EQ_INT(valid, valid_ref);
    CHECK(valid > 0 && valid < (int64_t)np);
    CHECK_NEAR(loss, loss_ref, 1e-6 * fabs(loss_ref));
    float *dl = host_f(g_be, dl_d, nl);
    CHECK_NEAR(tu_max_rel_err(dl_ref, dl, nl, 1e-2), 0, TOL_EW);
    /* forward only */
    double loss2;
    int64_t valid2;
    g_be->ops->ce_fwd_bwd(g_be, l_d, lab_d, n, c, hw, ignore, 1.0f, NULL, &loss2, &valid2);
    CHECK(loss2 == loss && valid2 == valid); /* deterministic reduction */

    uint8_t *pred_ref = (uint8_t *)malloc(np), *pred = (uint8_t *)malloc(np);
    for (size_t i = 0; i < nl; i += 3) logits[i] = 1.0f; /* ties: first max wins */
    g_be->ops->upload(g_be, l_d, logits, nl * 4);
    uint8_t *pred_d = (uint8_t *)dev_bytes(g_be, NULL, np);
    ref_argmax(logits, pred_ref, n, c, hw);
    g_be->ops->argmax(g_be, l_d, pred_d, n, c, hw);
    g_be->ops->download(g_be, pred, pred_d, np);
    CHECK(memcmp(pred, pred_ref, np) == 0);

    int64_t conf_ref[49] = {0}, conf[49];
    for (int i = 0; i < 49; i++) conf_ref[i] = i; /* accumulates */
    int64_t *conf_d = (int64_t *)dev_bytes(g_be, conf_ref, sizeof conf_ref);
    ref_confusion(pred_ref, lab, np, c, conf_ref);
    g_be->ops->confusion(g_be, pred_d, lab_d, np, c, conf_d);
    g_be->ops->download(g_be, conf, conf_d, sizeof conf);
    CHECK(memcmp(conf, conf_ref, sizeof conf) == 0);
    g_be->ops->free(g_be, l_d), g_be->ops->free(g_be, dl_d), g_be->ops->free(g_be, lab_d);
    g_be->ops->free(g_be, pred_d), g_be->ops->free(g_be, conf_d);
    free(logits), free(lab), free(dl_ref), free(dl), free(pred_ref), free(pred);
}

static void test_confusion_many_classes(void) {
    /* c*c above the shared-memory histogram: the global-atomics path */
    int c = 70;
    size_t cnt = 54321;
    uint8_t *p = (uint8_t *)malloc(cnt), *l = (uint8_t *)malloc(cnt);
    uint64_t key = sg_rng_key(4, 0, 0, 0, 97);
    for (size_t i = 0; i < cnt; i++) {
        p[i] = (uint8_t)(sg_rng_u64(key, 2 * i) % c);
        l[i] = (uint8_t)(sg_rng_u64(key, 2 * i + 1) % (c + 5)); /* some >= c */
    }
    size_t cb = (size_t)c * c * sizeof(int64_t);
    int64_t *ref = (int64_t *)calloc(1, cb), *got = (int64_t *)malloc(cb);
    uint8_t *p_d = (uint8_t *)dev_bytes(g_be, p, cnt), *l_d = (uint8_t *)dev_bytes(g_be, l, cnt);
    int64_t *c_d = (int64_t *)dev_bytes(g_be, NULL, cb);
    ref_confusion(p, l, cnt, c, ref);
    g_be->ops->confusion(g_be, p_d, l_d, cnt, c, c_d);
    g_be->ops->download(g_be, got, c_d, cb);
    CHECK(memcmp(ref, got, cb) == 0);
    g_be->ops->free(g_be, p_d), g_be->ops->free(g_be, l_d), g_be->ops->free(g_be, c_d);
    free(p), free(l), free(ref), free(got);
}

/* ---- optimizer, input ---- */

static void test_sgd(void) {
    size_t cnt = 4099;
    float *p0 = rnd(cnt, 101, -1, 1), *g = rnd(cnt, 102, -1, 1), *b0 = rnd(cnt, 103, -1, 1);
    float *p_ref = (float *)malloc(cnt * 4), *b_ref = (float *)malloc(cnt * 4);
    float *p_d = dev_f(g_be, NULL, cnt), *g_d = dev_f(g_be, g, cnt), *b_d = dev_f(g_be, NULL, cnt);
    struct { float mom, damp, wd; int nest, first; } cfg[] = {
        {0.9f, 0.0f, 1e-4f, 0, 1}, {0.9f, 0.0f, 1e-4f, 0, 0}, {0.9f, 0.1f, 0.0f, 0, 0},
        {0.9f, 0.0f, 5e-4f, 1, 0}, {0.0f, 0.0f, 1e-4f, 0, 0},
    };
    for (size_t t = 0; t < sizeof cfg / sizeof *cfg; t++) {
        memcpy(p_ref, p0, cnt * 4);
        memcpy(b_ref, b0, cnt * 4);
        g_be->ops->upload(g_be, p_d, p0, cnt * 4);
        g_be->ops->upload(g_be, b_d, b0, cnt * 4);
        int no_buf = cfg[t].mom == 0.0f;
        ref_sgd_step(p_ref, g, no_buf ? NULL : b_ref, cnt, 0.01f, cfg[t].mom, cfg[t].damp,
                     cfg[t].wd, cfg[t].nest, cfg[t].first);
        g_be->ops->sgd_step(g_be, p_d, g_d, no_buf ? NULL : b_d, cnt, 0.01f, cfg[t].mom,
                            cfg[t].damp, cfg[t].wd, cfg[t].nest, cfg[t].first);
        float *p = host_f(g_be, p_d, cnt), *b = host_f(g_be, b_d, cnt);
        CHECK_MSG(err(p_ref, p, cnt) <= 1e-6, "param, config %zu", t);
        CHECK_MSG(err(b_ref, b, cnt) <= 1e-6, "momentum buffer, config %zu", t);
        free(p), free(b);
    }
    g_be->ops->free(g_be, p_d), g_be->ops->free(g_be, g_d), g_be->ops->free(g_be, b_d);
    free(p0), free(g), free(b0), free(p_ref), free(b_ref);
}

static void test_normalize(void) {
    int n = 4, h = 17, w = 13;
    size_t nin = (size_t)n * h * w * 3;
    uint8_t *src = (uint8_t *)malloc(nin);
    for (size_t i = 0; i < nin; i++) src[i] = (uint8_t)(sg_rng_u64(77, i) & 255);
    const float mean[3] = {0.485f, 0.456f, 0.406f}, stdv[3] = {0.229f, 0.224f, 0.225f};
    float *ref = (float *)malloc(nin * 4);
    uint8_t *s_d = (uint8_t *)dev_bytes(g_be, src, nin);
    float *d_d = dev_f(g_be, NULL, nin);
    ref_normalize_u8(src, ref, n, h, w, mean, stdv);
    g_be->ops->normalize_u8(g_be, s_d, d_d, n, h, w, mean, stdv);
    float *got = host_f(g_be, d_d, nin);
    CHECK_NEAR(err(ref, got, nin), 0, 1e-6);
    g_be->ops->free(g_be, s_d), g_be->ops->free(g_be, d_d);
    free(src), free(ref), free(got);
}

/* ---- memory, copies, streams ---- */

static void test_memory_and_streams(void) {
    sg_backend_info info0, info1, info2;
    sg_backend_get_info(g_be, &info0);
    CHECK_STR_CONTAINS(info0.name, "cuda:");
    CHECK(info0.device[0] != 0);
    size_t bytes = 3 * 1000 * 1000 + 7;
    uint8_t *d = (uint8_t *)g_be->ops->alloc(g_be, bytes);
    sg_backend_get_info(g_be, &info1);
    CHECK_EQ_INT(info1.mem_in_use, info0.mem_in_use + bytes);
    CHECK(info1.mem_peak >= info1.mem_in_use);
    uint8_t *h = (uint8_t *)malloc(bytes);
    memset(h, 0xAB, bytes);
    g_be->ops->download(g_be, h, d, bytes);
    size_t nonzero = 0;
    for (size_t i = 0; i < bytes; i++) nonzero += h[i] != 0;
    CHECK_MSG(nonzero == 0, "alloc must return zeroed memory (%zu non-zero bytes)", nonzero);

    /* pinned upload on the copy stream, then the compute stream waits */
    uint8_t *pin = (uint8_t *)g_be->ops->host_alloc(g_be, bytes);
    for (size_t i = 0; i < bytes; i++) pin[i] = (uint8_t)(i * 31 + 7);
    g_be->ops->upload_async(g_be, d, pin, bytes);
    g_be->ops->upload_wait(g_be);
    uint8_t *d2 = (uint8_t *)g_be->ops->alloc(g_be, bytes);
    g_be->ops->copy(g_be, d2, d, bytes); /* on compute: must see the upload */
    g_be->ops->download(g_be, h, d2, bytes);
    CHECK(memcmp(h, pin, bytes) == 0);
    g_be->ops->zero(g_be, d2 + 10, 100);
    g_be->ops->download(g_be, h, d2, bytes);
    CHECK(h[9] == pin[9] && h[10] == 0 && h[109] == 0 && h[110] == pin[110]);

    CHECK(g_be->ops->stream(g_be, SG_STREAM_COMPUTE) != NULL);
    CHECK(g_be->ops->stream(g_be, SG_STREAM_COPY) != g_be->ops->stream(g_be, SG_STREAM_COMPUTE));
    CHECK(g_be->ops->stream(g_be, SG_STREAM_COMM) != NULL);
    g_be->ops->stream_wait(g_be, SG_STREAM_COMM, SG_STREAM_COMPUTE);
    g_be->ops->stream_wait(g_be, SG_STREAM_COMPUTE, SG_STREAM_COMM);
    g_be->ops->sync(g_be);

    g_be->ops->free(g_be, d);
    g_be->ops->free(g_be, d2);
    sg_backend_get_info(g_be, &info2);
    CHECK_EQ_INT(info2.mem_in_use, info0.mem_in_use);
    CHECK(info2.mem_peak >= info0.mem_in_use + 2 * bytes);
    g_be->ops->host_free(g_be, pin);
    free(h);
}

/* upload_async must not overwrite a buffer that compute-stream ops issued
 * before it still read (write after read across the copy stream): the ops
 * below read a_d for a while, the upload replaces a_d at once after them. */
static void test_upload_async_order(void) {
    size_t cnt = (size_t)64 << 20; /* 256 MiB: the kernels outlast the copy's start */
    float *old = (float *)malloc(cnt * sizeof(float));
    for (size_t i = 0; i < cnt; i++) old[i] = (float)(i % 1000);
    float *pin = (float *)g_be->ops->host_alloc(g_be, cnt * sizeof(float));
    for (size_t i = 0; i < cnt; i++) pin[i] = -1.0f;
    float *a_d = dev_f(g_be, old, cnt), *b_d = dev_f(g_be, NULL, cnt);
    g_be->ops->scale(g_be, a_d, b_d, 2.0f, cnt);
    for (int k = 0; k < 3; k++) g_be->ops->axpy(g_be, 1.0f, a_d, b_d, cnt); /* b = 5a, exact */
    g_be->ops->upload_async(g_be, a_d, pin, cnt * sizeof(float));
    g_be->ops->upload_wait(g_be);
    float *b = host_f(g_be, b_d, cnt), *a = host_f(g_be, a_d, cnt);
    size_t wrong = 0;
    for (size_t i = 0; i < cnt; i++) wrong += b[i] != 5.0f * old[i];
    CHECK_MSG(wrong == 0, "%zu of %zu results read the uploaded data, not the old (upload_async "
              "overlapped the ops issued before it)", wrong, cnt);
    CHECK(memcmp(a, pin, cnt * sizeof(float)) == 0);
    g_be->ops->free(g_be, a_d), g_be->ops->free(g_be, b_d);
    g_be->ops->host_free(g_be, pin);
    free(old), free(a), free(b);
}

static void test_bad_device(void) {
    /* an index past the last device: NULL and an error, not a crash */
    char dev[32];
    snprintf(dev, sizeof dev, "cuda:%d", sg_backend_cuda_device_count());
    CHECK(sg_backend_create(dev, NULL) == NULL);
}

int main(void) {
    if (!sg_backend_cuda_compiled() || sg_backend_cuda_device_count() == 0) {
        fprintf(stderr, "no CUDA device visible (or CUDA not compiled in): skipping\n");
        return TEST_SKIP;
    }
    sg_backend_opts bench = {0, 1, 0}, det = {0, 0, 1};
    g_be = sg_backend_create("cuda:0", &bench);
    g_be_det = sg_backend_create("cuda:0", &det);
    if (!g_be || !g_be_det) {
        fprintf(stderr, "FAIL: cannot create the CUDA backend on cuda:0\n");
        return 1;
    }
    TEST_RUN(test_memory_and_streams);
    TEST_RUN(test_upload_async_order);
    TEST_RUN(test_conv_fixed);
    TEST_RUN(test_conv_random);
    TEST_RUN(test_bias);
    TEST_RUN(test_bn_batch1);
    TEST_RUN(test_bn_batch4_relu);
    TEST_RUN(test_bn_large_plane);
    TEST_RUN(test_bn_split_channels);
    TEST_RUN(test_bn_finalize_parts);
    TEST_RUN(test_elementwise);
    TEST_RUN(test_dropout);
    TEST_RUN(test_maxpool);
    TEST_RUN(test_avgpool);
    TEST_RUN(test_resize);
    TEST_RUN(test_concat);
    TEST_RUN(test_ce);
    TEST_RUN(test_confusion_many_classes);
    TEST_RUN(test_sgd);
    TEST_RUN(test_normalize);
    TEST_RUN(test_bad_device);
    sg_backend_destroy(g_be_det);
    sg_backend_destroy(g_be);
    return TEST_EXIT();
}
