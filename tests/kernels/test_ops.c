/* tests/kernels/test_ops.c - every non-conv CPU op against the naive
 * reference (tests/kernels/ref_ops.c) and against hand/PyTorch values:
 * batch norm (stats, Chan merge, running stats, fwd, bwd), elementwise,
 * pooling, resize, concat, dropout, cross-entropy, argmax, confusion, SGD,
 * input normalization, sumsq, memory and info. Odd sizes, batch 1 and 3,
 * accumulate 0/1. Tolerances are relative (see CHECK_CLOSE), stated per check.
 */
#include <math.h>
#include <omp.h>

#include "kernels/rng.h"
#include "tests/kernels/ref_ops.h"
#include "tests/kernels/test_common.h"

#define O (tc_be->ops)

/* ---------------- batch norm ---------------- */

static void test_bn_stats_stable(void) {
    /* Mean 1000, std ~0.3: a one-pass float sum-of-squares would lose the
     * variance entirely; two-pass double must match the reference. */
    int n = 3, c = 5, hw = 37;
    size_t cnt = (size_t)n * c * hw;
    float *x = tc_rand(cnt, 21, 999.5f, 1000.5f);
    float st[10], str[10];
    O->bn_stats(tc_be, x, n, c, hw, st);
    ref_bn_stats(x, n, c, hw, str);
    for (int i = 0; i < c; i++) {
        CHECK_NEAR(st[i], str[i], 1e-4);
        CHECK_NEAR(st[c + i], str[c + i], 1e-5 * str[c + i]);
        /* Uniform width 1: var ~ 1/12. */
        CHECK_NEAR(st[c + i] / (n * hw), 1.0 / 12, 0.03);
    }
    tc_free(x);
}

static void test_bn_finalize_chan(void) {
    /* Stats of a batch split in 3 parts (one empty) merged with Chan's
     * formula equal the stats of the whole batch. */
    int c = 4, hw = 13, ns[3] = {2, 0, 3}, ntot = 5;
    float *x = tc_rand((size_t)ntot * c * hw, 31, -2, 3);
    float parts[3 * 8] = {0}, whole[8];
    int64_t counts[3];
    int off = 0;
    for (int p = 0; p < 3; p++) {
        counts[p] = (int64_t)ns[p] * hw;
        if (ns[p]) O->bn_stats(tc_be, x + (size_t)off * c * hw, ns[p], c, hw, parts + p * 8);
        else for (int i = 0; i < 8; i++) parts[p * 8 + i] = 1e30f; /* must be skipped */
        off += ns[p];
    }
    ref_bn_stats(x, ntot, c, hw, whole);
    float mean[4], invstd[4], rm[4], rv[4], meanr[4], invr[4], rmr[4], rvr[4];
    for (int i = 0; i < c; i++) rm[i] = rmr[i] = 0.5f * i, rv[i] = rvr[i] = 1.0f + i;
    O->bn_finalize(tc_be, parts, counts, 3, c, 1e-5f, 0.1f, mean, invstd, rm, rv);
    ref_bn_finalize(parts, counts, 3, c, 1e-5f, 0.1f, meanr, invr, rmr, rvr);
    double N = (double)ntot * hw;
    for (int i = 0; i < c; i++) {
        CHECK_NEAR(mean[i], whole[i], 1e-6);
        CHECK_NEAR(invstd[i], 1.0 / sqrt(whole[c + i] / N + 1e-5), 1e-5);
        CHECK_NEAR(rm[i], 0.9 * 0.5 * i + 0.1 * whole[i], 1e-6);
        CHECK_NEAR(rv[i], 0.9 * (1.0 + i) + 0.1 * whole[c + i] / (N - 1), 1e-5);
        CHECK_NEAR(mean[i], meanr[i], 1e-6);
        CHECK_NEAR(invstd[i], invr[i], 1e-6);
        CHECK_NEAR(rv[i], rvr[i], 1e-6);
    }
    /* running_mean == NULL: no update, mean/invstd still written. */
    O->bn_finalize(tc_be, parts, counts, 3, c, 1e-5f, 0.1f, mean, invstd, NULL, NULL);
    CHECK_NEAR(mean[1], whole[1], 1e-6);
    float ev_m[4], ev_i[4];
    O->bn_eval_params(tc_be, rm, rv, c, 1e-5f, ev_m, ev_i);
    for (int i = 0; i < c; i++) {
        CHECK_NEAR(ev_m[i], rm[i], 0);
        CHECK_NEAR(ev_i[i], 1.0 / sqrt(rv[i] + 1e-5), 1e-6);
    }
    tc_free(x);
}

/* Small (serial) and large (threaded: n*c*hw >= 65536) shapes. */
static void bn_fwd_bwd_case(int n, int hw) {
    int c = 6;
    size_t cnt = (size_t)n * c * hw;
    float *x = tc_rand(cnt, 41, -2, 2), *dy = tc_rand(cnt, 42, -1, 1);
    float mean[6], invstd[6], gamma[6], beta[6];
    tu_fill(mean, c, 43, -0.5f, 0.5f);
    tu_fill(invstd, c, 44, 0.5f, 2.0f);
    tu_fill(gamma, c, 45, 0.5f, 1.5f);
    tu_fill(beta, c, 46, -0.5f, 0.5f);
    for (int relu = 0; relu <= 1; relu++) {
        float *y = tc_zeros(cnt), *yr = tc_zeros(cnt);
        O->bn_fwd(tc_be, x, mean, invstd, gamma, beta, y, n, c, hw, relu);
        ref_bn_fwd(x, mean, invstd, gamma, beta, yr, n, c, hw, relu);
        CHECK_CLOSE(yr, y, cnt, 1e-6);
        if (relu) CHECK(y[0] >= 0 && y[cnt - 1] >= 0);
        float red[12], redr[12];
        O->bn_bwd_reduce(tc_be, dy, x, y, mean, red, n, c, hw, relu);
        ref_bn_bwd_reduce(dy, x, yr, mean, redr, n, c, hw, relu);
        CHECK_CLOSE(redr, red, 12, 1e-5);
        for (int acc = 0; acc <= 1; acc++) {
            float *dx = tc_rand(cnt, 47, -1, 1), *dxr = tc_clone(dx, cnt);
            O->bn_bwd_elem(tc_be, dy, x, y, mean, invstd, gamma, red, (double)n * hw, dx, n,
                           c, hw, relu, acc);
            ref_bn_bwd_elem(dy, x, yr, mean, invstd, gamma, red, (double)n * hw, dxr, n, c,
                            hw, relu, acc);
            CHECK_CLOSE(dxr, dx, cnt, 1e-5);
            float dg[6] = {1, 2, 3, 4, 5, 6}, db[6] = {6, 5, 4, 3, 2, 1};
            float dgr[6] = {1, 2, 3, 4, 5, 6}, dbr[6] = {6, 5, 4, 3, 2, 1};
            O->bn_param_grads(tc_be, red, invstd, dg, db, c, acc);
            ref_bn_param_grads(red, invstd, dgr, dbr, c, acc);
            CHECK_CLOSE(dgr, dg, 6, 1e-6);
            CHECK_CLOSE(dbr, db, 6, 1e-6);
            tc_free(dx), tc_free(dxr);
        }
        /* In place (y == x) is allowed. */
        float *xi = tc_clone(x, cnt);
        O->bn_fwd(tc_be, xi, mean, invstd, gamma, beta, xi, n, c, hw, relu);
        CHECK_CLOSE(yr, xi, cnt, 1e-6);
        tc_free(xi), tc_free(y), tc_free(yr);
    }
    tc_free(x), tc_free(dy);
}

static void test_bn_fwd_bwd(void) {
    bn_fwd_bwd_case(3, 29);
    bn_fwd_bwd_case(2, 5501);
}

/* ---------------- elementwise ---------------- */

static void test_elementwise(void) {
    size_t cnt = 70001; /* odd, above the threading threshold (65536) */
    float *a = tc_rand(cnt, 51, -1, 1), *b = tc_rand(cnt, 52, -1, 1);
    float *y = tc_zeros(cnt), *yr = tc_zeros(cnt);
    O->relu_fwd(tc_be, a, y, cnt);
    ref_relu_fwd(a, yr, cnt);
    CHECK_CLOSE(yr, y, cnt, 0);
    for (int acc = 0; acc <= 1; acc++) {
        float *dx = tc_rand(cnt, 53, -1, 1), *dxr = tc_clone(dx, cnt);
        O->relu_bwd(tc_be, b, y, dx, cnt, acc);
        ref_relu_bwd(b, y, dxr, cnt, acc);
        CHECK_CLOSE(dxr, dx, cnt, 0);
        tc_free(dx), tc_free(dxr);
    }
    for (int relu = 0; relu <= 1; relu++) {
        O->add(tc_be, a, b, y, cnt, relu);
        ref_add(a, b, yr, cnt, relu);
        CHECK_CLOSE(yr, y, cnt, 0);
        float *ai = tc_clone(a, cnt); /* y aliases a */
        O->add(tc_be, ai, b, ai, cnt, relu);
        CHECK_CLOSE(yr, ai, cnt, 0);
        tc_free(ai);
    }
    O->scale(tc_be, a, y, -2.5f, cnt);
    ref_scale(a, yr, -2.5f, cnt);
    CHECK_CLOSE(yr, y, cnt, 0);
    O->axpy(tc_be, 0.75f, a, y, cnt);
    ref_axpy(0.75f, a, yr, cnt);
    CHECK_CLOSE(yr, y, cnt, 1e-7);
    CHECK_NEAR(O->sumsq(tc_be, a, cnt), ref_sumsq(a, cnt), 1e-9 * ref_sumsq(a, cnt));
    float three[3] = {1, -2, 3};
    CHECK_NEAR(O->sumsq(tc_be, three, 3), 14.0, 0);
    tc_free(a), tc_free(b), tc_free(y), tc_free(yr);
}

/* ---------------- pooling, resize, concat ---------------- */

static void test_maxpool(void) {
    const int sz[][3] = {{1, 7, 9}, {3, 8, 8}, {2, 1, 1}, {1, 2, 5}, {3, 97, 101}};
    for (int t = 0; t < 5; t++) {
        int n = sz[t][0], c = 3, h = sz[t][1], w = sz[t][2];
        int oh = ref_pool_out(h), ow = ref_pool_out(w);
        size_t nx = (size_t)n * c * h * w, ny = (size_t)n * c * oh * ow;
        /* All negative: -inf padding must never win (zero padding would). */
        float *x = tc_rand(nx, 61 + t, -3, -1), *y = tc_zeros(ny), *yr = tc_zeros(ny);
        int32_t *idx = O->alloc(tc_be, ny * 4), *idxr = O->alloc(tc_be, ny * 4);
        O->maxpool_fwd(tc_be, x, y, idx, n, c, h, w, oh, ow);
        ref_maxpool_fwd(x, yr, idxr, n, c, h, w, oh, ow);
        CHECK_CLOSE(yr, y, ny, 0);
        for (size_t i = 0; i < ny; i++) CHECK_EQ_INT(idx[i], idxr[i]);
        float *dy = tc_rand(ny, 65, -1, 1), *dx = tc_rand(nx, 66, 5, 6), *dxr = tc_zeros(nx);
        O->maxpool_bwd(tc_be, dy, idx, dx, n, c, h, w, oh, ow);
        ref_maxpool_bwd(dy, idxr, dxr, n, c, h, w, oh, ow);
        CHECK_CLOSE(dxr, dx, nx, 1e-6);
        tc_free(x), tc_free(y), tc_free(yr), tc_free(idx), tc_free(idxr);
        tc_free(dy), tc_free(dx), tc_free(dxr);
    }
    /* Ties: a constant plane -> the first element of each window wins. */
    float x[16], y[4];
    int32_t idx[4];
    for (int i = 0; i < 16; i++) x[i] = 1;
    O->maxpool_fwd(tc_be, x, y, idx, 1, 1, 4, 4, 2, 2);
    CHECK_EQ_INT(idx[0], 0);
    CHECK_EQ_INT(idx[1], 1);  /* window cols 1..3 of row 0 */
    CHECK_EQ_INT(idx[2], 4);  /* rows 1..3, col 0 */
    CHECK_EQ_INT(idx[3], 5);
}

static void test_avgpool(void) {
    int n = 3, c = 4, hw = 31;
    size_t nx = (size_t)n * c * hw;
    float *x = tc_rand(nx, 71, -1, 1), y[12], yr[12];
    O->avgpool_fwd(tc_be, x, y, n, c, hw);
    ref_avgpool_fwd(x, yr, n, c, hw);
    CHECK_CLOSE(yr, y, 12, 1e-6);
    for (int acc = 0; acc <= 1; acc++) {
        float *dx = tc_rand(nx, 72, -1, 1), *dxr = tc_clone(dx, nx);
        O->avgpool_bwd(tc_be, y, dx, n, c, hw, acc);
        ref_avgpool_bwd(y, dxr, n, c, hw, acc);
        CHECK_CLOSE(dxr, dx, nx, 1e-6);
        tc_free(dx), tc_free(dxr);
    }
    tc_free(x);
}

static void test_resize(void) {
    const int sz[][4] = {{5, 7, 17, 23}, {17, 13, 6, 5}, {9, 9, 9, 9}, {1, 1, 4, 4},
                         {4, 4, 32, 32}, {33, 33, 257, 129}};
    for (int t = 0; t < 6; t++) {
        int n = 1 + t % 3, c = 2, h = sz[t][0], w = sz[t][1], oh = sz[t][2], ow = sz[t][3];
        size_t nx = (size_t)n * c * h * w, ny = (size_t)n * c * oh * ow;
        float *x = tc_rand(nx, 81 + t, -1, 1), *y = tc_zeros(ny), *yr = tc_zeros(ny);
        O->resize_fwd(tc_be, x, y, n, c, h, w, oh, ow);
        ref_resize_fwd(x, yr, n, c, h, w, oh, ow);
        CHECK_CLOSE(yr, y, ny, 1e-5);
        for (int acc = 0; acc <= 1; acc++) {
            float *dx = tc_rand(nx, 87, -1, 1), *dxr = tc_clone(dx, nx);
            O->resize_bwd(tc_be, y, dx, n, c, h, w, oh, ow, acc);
            ref_resize_bwd(y, dxr, n, c, h, w, oh, ow, acc);
            CHECK_CLOSE(dxr, dx, nx, 1e-5);
            tc_free(dx), tc_free(dxr);
        }
        tc_free(x), tc_free(y), tc_free(yr);
    }
    /* PyTorch 1.13: F.interpolate(arange(6).reshape(1,1,2,3), size=(3,5),
     * mode='bilinear', align_corners=False). */
    float x[6] = {0, 1, 2, 3, 4, 5}, y[15];
    const float want[15] = {0, 0.4f, 1, 1.6f, 2, 1.5f, 1.9f, 2.5f, 3.1f, 3.5f,
                            3, 3.4f, 4, 4.6f, 5};
    O->resize_fwd(tc_be, x, y, 1, 1, 2, 3, 3, 5);
    for (int i = 0; i < 15; i++) CHECK_NEAR(y[i], want[i], 1e-6);
}

static void test_concat(void) {
    int n = 3, cs = 3, cd = 8, off = 4, hw = 11;
    size_t ns = (size_t)n * cs * hw, nd = (size_t)n * cd * hw;
    float *src = tc_rand(ns, 91, -1, 1), *dst = tc_rand(nd, 92, -1, 1), *dstr = tc_clone(dst, nd);
    O->concat_fwd(tc_be, src, dst, n, cs, cd, off, hw);
    ref_concat_fwd(src, dstr, n, cs, cd, off, hw);
    CHECK_CLOSE(dstr, dst, nd, 0);
    for (int acc = 0; acc <= 1; acc++) {
        float *ds = tc_rand(ns, 93, -1, 1), *dsr = tc_clone(ds, ns);
        O->concat_bwd(tc_be, dst, ds, n, cs, cd, off, hw, acc);
        ref_concat_bwd(dst, dsr, n, cs, cd, off, hw, acc);
        CHECK_CLOSE(dsr, ds, ns, 0);
        if (!acc) CHECK_CLOSE(src, ds, ns, 0); /* slice of the concat = the source */
        tc_free(ds), tc_free(dsr);
    }
    tc_free(src), tc_free(dst), tc_free(dstr);
}

/* ---------------- dropout ---------------- */

static void test_dropout(void) {
    size_t cnt = 100003;
    float p = 0.3f;
    uint64_t key = sg_rng_key(7, 1, 2, 0, SG_RNG_DROPOUT);
    float *x = tc_rand(cnt, 101, -1, 1), *y = tc_zeros(cnt), *yr = tc_zeros(cnt);
    uint8_t *m = O->alloc(tc_be, cnt), *mr = O->alloc(tc_be, cnt);
    O->dropout_fwd(tc_be, x, y, m, cnt, p, key);
    ref_dropout_fwd(x, yr, mr, cnt, p, key);
    size_t kept = 0;
    for (size_t i = 0; i < cnt; i++) {
        CHECK_EQ_INT(m[i], mr[i]); /* bit-exact mask rule */
        CHECK(y[i] == yr[i]);
        kept += m[i];
    }
    CHECK_NEAR((double)kept / cnt, 0.7, 0.01);
    CHECK(y[0] == (m[0] ? x[0] * (1.0f / 0.7f) : 0.0f));
    for (int acc = 0; acc <= 1; acc++) {
        float *dx = tc_rand(cnt, 102, -1, 1), *dxr = tc_clone(dx, cnt);
        O->dropout_bwd(tc_be, x, m, dx, cnt, p, acc);
        ref_dropout_bwd(x, mr, dxr, cnt, p, acc);
        CHECK_CLOSE(dxr, dx, cnt, 0);
        tc_free(dx), tc_free(dxr);
    }
    /* Another key gives another mask; p = 0 keeps all; p = 1 drops all. */
    O->dropout_fwd(tc_be, x, yr, mr, cnt, p, key + 1);
    CHECK(memcmp(m, mr, cnt) != 0);
    O->dropout_fwd(tc_be, x, y, m, cnt, 0.0f, key);
    CHECK_CLOSE(x, y, cnt, 0);
    O->dropout_fwd(tc_be, x, y, m, cnt, 1.0f, key);
    CHECK(O->sumsq(tc_be, y, cnt) == 0);
    tc_free(x), tc_free(y), tc_free(yr), tc_free(m), tc_free(mr);
}

/* ---------------- loss, metrics ---------------- */

static void test_ce(void) {
    int n = 3, c = 7, hw = 3301; /* several pixel blocks, odd, threaded */
    size_t nl = (size_t)n * c * hw;
    float *l = tc_rand(nl, 111, -8, 8);
    uint8_t *lab = O->alloc(tc_be, (size_t)n * hw);
    for (int i = 0; i < n * hw; i++) lab[i] = (uint8_t)(i % 11 == 3 ? 255 : i % 9 == 1 ? 7 : i % c);
    float *d = tc_rand(nl, 112, -1, 1), *dr = tc_zeros(nl);
    double loss, lossr;
    int64_t valid, validr;
    O->ce_fwd_bwd(tc_be, l, lab, n, c, hw, 255, 0.25f, d, &loss, &valid);
    ref_ce_fwd_bwd(l, lab, n, c, hw, 255, 0.25f, dr, &lossr, &validr);
    CHECK_EQ_INT(valid, validr);
    int64_t want_valid = 0;
    for (int i = 0; i < n * hw; i++) want_valid += lab[i] < c;
    CHECK_EQ_INT(valid, want_valid);
    CHECK_NEAR(loss, lossr, 1e-5 * lossr);
    CHECK_CLOSE(dr, d, nl, 1e-5);
    for (int i = 0; i < n; i++) /* ignored pixels get zero gradient */
        for (int q = 0; q < hw; q++)
            if (lab[(size_t)i * hw + q] >= c)
                for (int k = 0; k < c; k++) CHECK(d[((size_t)i * c + k) * hw + q] == 0);
    O->ce_fwd_bwd(tc_be, l, lab, n, c, hw, 255, 1.0f, NULL, &loss, &valid);
    CHECK_NEAR(loss, lossr, 1e-5 * lossr);
    /* In place (dlogits == logits) gives the same loss and gradient. */
    float *li = tc_clone(l, nl);
    O->ce_fwd_bwd(tc_be, li, lab, n, c, hw, 255, 0.25f, li, &loss, &valid);
    CHECK_NEAR(loss, lossr, 1e-5 * lossr);
    CHECK_CLOSE(dr, li, nl, 1e-5);
    tc_free(li);
    /* Hand value: two classes, logits (0, ln 3), label 1 -> -log(3/4). */
    float l2[2] = {0, (float)log(3.0)}, d2[2];
    uint8_t lab2 = 1;
    O->ce_fwd_bwd(tc_be, l2, &lab2, 1, 2, 1, 255, 1.0f, d2, &loss, &valid);
    CHECK_NEAR(loss, -log(0.75), 1e-6);
    CHECK_NEAR(d2[0], 0.25, 1e-6);
    CHECK_NEAR(d2[1], -0.25, 1e-6);
    /* Huge logits: stable log-sum-exp. */
    float l3[2] = {1000, 0};
    lab2 = 1;
    O->ce_fwd_bwd(tc_be, l3, &lab2, 1, 2, 1, 255, 1.0f, d2, &loss, &valid);
    CHECK_NEAR(loss, 1000, 1e-3);
    tc_free(l), tc_free(lab), tc_free(d), tc_free(dr);
}

static void test_argmax_confusion(void) {
    int n = 2, c = 5, hw = 97;
    size_t nl = (size_t)n * c * hw;
    float *l = tc_rand(nl, 121, -1, 1);
    for (int k = 0; k < c; k++) l[(size_t)k * hw] = 0.5f; /* tie at pixel 0: class 0 */
    uint8_t *p = O->alloc(tc_be, (size_t)n * hw), *pr = O->alloc(tc_be, (size_t)n * hw);
    O->argmax(tc_be, l, p, n, c, hw);
    ref_argmax(l, pr, n, c, hw);
    CHECK(memcmp(p, pr, (size_t)n * hw) == 0);
    CHECK_EQ_INT(p[0], 0);
    uint8_t lab[8] = {0, 1, 1, 2, 255, 4, 4, 9}, pred[8] = {0, 1, 2, 2, 3, 4, 0, 1};
    int64_t *conf = O->alloc(tc_be, 25 * 8), confr[25] = {0};
    conf[6] = 5; /* accumulates */
    confr[6] = 5;
    O->confusion(tc_be, pred, lab, 8, 5, conf);
    ref_confusion(pred, lab, 8, 5, confr);
    for (int i = 0; i < 25; i++) CHECK_EQ_INT(conf[i], confr[i]);
    CHECK_EQ_INT(conf[0 * 5 + 0], 1);
    CHECK_EQ_INT(conf[1 * 5 + 1], 6);
    CHECK_EQ_INT(conf[1 * 5 + 2], 1);
    CHECK_EQ_INT(conf[4 * 5 + 0], 1);
    int64_t total = 0;
    for (int i = 0; i < 25; i++) total += conf[i];
    CHECK_EQ_INT(total, 6 + 5); /* label 255 and 9 skipped */
    tc_free(l), tc_free(p), tc_free(pr), tc_free(conf);
}

/* ---------------- optimizer ---------------- */

/* Values printed by torch.optim.SGD (torch 1.13, lr 0.1) for
 * p0 = [1, -2, 0.5] and grads g1..g3 below, after each of three steps. */
static void test_sgd_torch(void) {
    const float g[3][3] = {{0.5f, 0.25f, -1}, {0.25f, -0.5f, 2}, {-0.125f, 1, 0}};
    const struct {
        float momentum, dampening, wd;
        int nesterov;
        double want[9];
    } cfg[4] = {
        {0.9f, 0, 1e-2f, 0, {0.949000001, -2.023, 0.5995, 0.877151012, -1.99167705,
                             0.488450497, 0.824109733, -2.06149459, 0.388017505}},
        {0.9f, 0, 1e-2f, 1, {0.903100014, -2.04369998, 0.689050019, 0.812574148, -1.96344697,
                             0.388335794, 0.776619732, -2.12432814, 0.297575325}},
        {0.9f, 0.1f, 0, 0, {0.949999988, -2.0250001, 0.600000024, 0.882499993, -2.00250006,
                            0.51000005, 0.833000004, -2.07225013, 0.42900005}},
        {0, 0, 1e-4f, 0, {0.949989974, -2.02498007, 0.599995017, 0.924980462, -1.97495985,
                          0.399989009, 0.937471211, -2.0749402, 0.399985015}},
    };
    for (int t = 0; t < 4; t++) {
        float p[3] = {1, -2, 0.5f}, pr[3] = {1, -2, 0.5f}, buf[3] = {0}, bufr[3] = {0};
        for (int s = 0; s < 3; s++) {
            O->sgd_step(tc_be, p, g[s], buf, 3, 0.1f, cfg[t].momentum, cfg[t].dampening,
                        cfg[t].wd, cfg[t].nesterov, s == 0);
            ref_sgd_step(pr, g[s], bufr, 3, 0.1f, cfg[t].momentum, cfg[t].dampening, cfg[t].wd,
                         cfg[t].nesterov, s == 0);
            for (int i = 0; i < 3; i++) {
                CHECK_NEAR(p[i], cfg[t].want[s * 3 + i], 2e-7 * 4);
                CHECK_NEAR(pr[i], cfg[t].want[s * 3 + i], 2e-7 * 4);
            }
        }
    }
    /* Large tensor (threaded path) against the reference. */
    size_t cnt = 70001;
    float *pp = tc_rand(cnt, 131, -1, 1), *ppr = tc_clone(pp, cnt), *gg = tc_rand(cnt, 132, -1, 1);
    float *b = tc_zeros(cnt), *br = tc_zeros(cnt);
    for (int s = 0; s < 2; s++) {
        O->sgd_step(tc_be, pp, gg, b, cnt, 0.01f, 0.9f, 0, 1e-4f, 0, s == 0);
        ref_sgd_step(ppr, gg, br, cnt, 0.01f, 0.9f, 0, 1e-4f, 0, s == 0);
    }
    CHECK_CLOSE(ppr, pp, cnt, 1e-6);
    CHECK_CLOSE(br, b, cnt, 1e-6);
    tc_free(pp), tc_free(ppr), tc_free(gg), tc_free(b), tc_free(br);
}

/* ---------------- input, memory, info ---------------- */

static void test_normalize(void) {
    int n = 2, h = 5, w = 7;
    size_t cnt = (size_t)n * h * w * 3;
    uint8_t *src = O->alloc(tc_be, cnt);
    for (size_t i = 0; i < cnt; i++) src[i] = (uint8_t)(i * 37 % 256);
    float *d = tc_zeros(cnt), *dr = tc_zeros(cnt);
    const float mean[3] = {0.485f, 0.456f, 0.406f}, std[3] = {0.229f, 0.224f, 0.225f};
    O->normalize_u8(tc_be, src, d, n, h, w, mean, std);
    ref_normalize_u8(src, dr, n, h, w, mean, std);
    CHECK_CLOSE(dr, d, cnt, 1e-6);
    /* Pixel (0,0,1) channel 2 of image 1 lands at dst[1][2][0][1]. */
    uint8_t v = src[((size_t)1 * h * w + 1) * 3 + 2];
    CHECK_NEAR(d[((size_t)1 * 3 + 2) * h * w + 1], (v / 255.0 - 0.406) / 0.225, 1e-5);
    tc_free(src), tc_free(d), tc_free(dr);
}

static void test_memory_info(void) {
    sg_backend_info info;
    sg_backend_get_info(tc_be, &info);
    size_t base = info.mem_in_use;
    CHECK(strcmp(info.name, "cpu") == 0);
    CHECK(info.device[0] != 0);
    CHECK_EQ_INT(info.threads, 2);
    float *p = O->alloc(tc_be, 1000 * sizeof(float));
    CHECK_EQ_INT((uintptr_t)p % 64, 0);
    for (int i = 0; i < 1000; i++) CHECK(p[i] == 0); /* zeroed */
    sg_backend_get_info(tc_be, &info);
    CHECK_EQ_INT(info.mem_in_use, base + 4000);
    CHECK(info.mem_peak >= base + 4000);
    O->free(tc_be, p);
    sg_backend_get_info(tc_be, &info);
    CHECK_EQ_INT(info.mem_in_use, base);
    CHECK(info.mem_peak >= base + 4000);
    float h[4] = {1, 2, 3, 4}, back[4];
    float *dv = O->alloc(tc_be, sizeof h);
    O->upload(tc_be, dv, h, sizeof h);
    O->copy(tc_be, dv + 2, dv, 2 * sizeof(float));
    O->download(tc_be, back, dv, sizeof back);
    CHECK(back[2] == 1 && back[3] == 2);
    O->zero(tc_be, dv, sizeof h);
    CHECK(dv[3] == 0);
    CHECK(O->stream(tc_be, SG_STREAM_COMPUTE) == NULL);
    O->free(tc_be, dv);
}

/* threads = 0: OMP_NUM_THREADS when set, else every core; explicit counts
 * win; a negative count is refused. */
static void test_threads(void) {
    const char *saved = getenv("OMP_NUM_THREADS");
    char keep[64] = "";
    if (saved) snprintf(keep, sizeof keep, "%s", saved);
    sg_backend_info info;
    setenv("OMP_NUM_THREADS", "3", 1);
    sg_backend *b = tc_backend(0);
    sg_backend_get_info(b, &info);
    CHECK_EQ_INT(info.threads, 3);
    sg_backend_destroy(b);
    unsetenv("OMP_NUM_THREADS");
    b = tc_backend(0);
    sg_backend_get_info(b, &info);
    CHECK_EQ_INT(info.threads, omp_get_num_procs());
    sg_backend_destroy(b);
    b = tc_backend(1);
    sg_backend_get_info(b, &info);
    CHECK_EQ_INT(info.threads, 1);
    sg_backend_destroy(b);
    sg_backend_opts o = {-1, 0, 0};
    CHECK(sg_backend_create("cpu", &o) == NULL);
    if (keep[0]) setenv("OMP_NUM_THREADS", keep, 1);
}

int main(void) {
    tc_be = tc_backend(2);
    TEST_RUN(test_bn_stats_stable);
    TEST_RUN(test_bn_finalize_chan);
    TEST_RUN(test_bn_fwd_bwd);
    TEST_RUN(test_elementwise);
    TEST_RUN(test_maxpool);
    TEST_RUN(test_avgpool);
    TEST_RUN(test_resize);
    TEST_RUN(test_concat);
    TEST_RUN(test_dropout);
    TEST_RUN(test_ce);
    TEST_RUN(test_argmax_confusion);
    TEST_RUN(test_sgd_torch);
    TEST_RUN(test_normalize);
    TEST_RUN(test_memory_info);
    sg_backend_destroy(tc_be);
    TEST_RUN(test_threads);
    return TEST_EXIT();
}
