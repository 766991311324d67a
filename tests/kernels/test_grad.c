/* tests/kernels/test_grad.c - finite-difference gradient checks of every
 * differentiable CPU op: conv (data, weight; plain and blocked layouts),
 * bias, batch norm in training mode (the full chain through the batch
 * statistics, with and without fused ReLU; dx, dgamma, dbeta), ReLU,
 * add+ReLU, max-pool, average pool, resize (up and down), concat, dropout and
 * cross-entropy (with ignored pixels).
 *
 * Conv shapes cover every CPU conv path: plain and blocked oneDNN layouts,
 * trimmed dead taps (dilation 12 on 5x5) and per-tap GEMMs.
 *
 * For an op f and a fixed random r, L = sum(r * f(inputs)) is evaluated in
 * double from the float forward; the analytic gradient is the op's backward
 * with dy = r; the numeric one is the central difference
 * (L(p+h) - L(p-h)) / (2h). Pass: max |numeric - analytic| <=
 * 1e-2 * max(max |analytic|, 1e-3). Inputs of non-smooth ops are kept at
 * least 10*h away from their kinks, so the difference never straddles one.
 */
#include <math.h>

#include "tests/kernels/test_common.h"

#define O (tc_be->ops)
#define FD_TOL 1e-2

typedef double (*loss_fn)(void);

/* sum(r * y) in double */
static double dot(const float *r, const float *y, size_t n) {
    double s = 0;
    for (size_t i = 0; i < n; i++) s += (double)r[i] * y[i];
    return s;
}

/* Compares analytic[] with central differences of L() over param[]; every
 * element when count <= 200, else 200 spread over the tensor. */
static double fd_err(float *param, size_t count, const float *analytic, loss_fn L, float h) {
    double maxa = 1e-3, maxd = 0;
    for (size_t i = 0; i < count; i++)
        if (fabs(analytic[i]) > maxa) maxa = fabs(analytic[i]);
    size_t step = count <= 200 ? 1 : count / 200;
    for (size_t i = 0; i < count; i += step) {
        float p = param[i], pp = p + h, pm = p - h;
        param[i] = pp;
        double lp = L();
        param[i] = pm;
        double lm = L();
        param[i] = p;
        double num = (lp - lm) / ((double)pp - (double)pm);
        double d = fabs(num - analytic[i]);
        if (d > maxd) maxd = d;
    }
    return maxd / maxa;
}

#define CHECK_FD(param, count, analytic, L, h)                                   \
    do {                                                                         \
        double e_ = fd_err((param), (count), (analytic), (L), (h));              \
        CHECK_MSG(e_ <= FD_TOL, "d/d%s: relative error %.3g > %g", #param, e_,   \
                  FD_TOL);                                                       \
    } while (0)

/* ---------------- conv + bias ---------------- */

static sg_conv_desc g_d;
static float *g_x, *g_w, *g_y, *g_r, *g_b;

static double conv_loss(void) {
    O->conv_fwd(tc_be, &g_d, g_x, g_w, g_y);
    size_t ny = (size_t)g_d.n * g_d.k * g_d.oh * g_d.ow;
    if (g_b) O->bias_fwd(tc_be, g_y, g_b, g_d.n, g_d.k, g_d.oh * g_d.ow);
    return dot(g_r, g_y, ny);
}

static void conv_grad_case(int n, int c, int h, int w, int k, int r, int stride, int pad,
                           int dil) {
    sg_conv_desc d = {n, c, h, w, k, r, r, stride, stride, pad, pad, dil, dil, 0, 0};
    CHECK(sg_conv_desc_init(&d) == 0);
    g_d = d;
    size_t nx = (size_t)n * c * h * w, nw = (size_t)k * c * r * r;
    size_t ny = (size_t)n * k * d.oh * d.ow;
    g_x = tc_rand(nx, 201, -1, 1), g_w = tc_rand(nw, 202, -1, 1);
    g_y = tc_zeros(ny), g_r = tc_rand(ny, 203, -1, 1), g_b = tc_rand(k, 204, -1, 1);
    float *dx = tc_zeros(nx), *dw = tc_zeros(nw), *db = tc_zeros(k);
    O->conv_bwd_data(tc_be, &d, g_r, g_w, dx, 0);
    O->conv_bwd_weight(tc_be, &d, g_x, g_r, dw, 0);
    O->bias_bwd(tc_be, g_r, db, n, k, d.oh * d.ow, 0);
    CHECK_FD(g_x, nx, dx, conv_loss, 1e-2f);
    CHECK_FD(g_w, nw, dw, conv_loss, 1e-2f);
    CHECK_FD(g_b, (size_t)k, db, conv_loss, 1e-2f);
    tc_free(g_x), tc_free(g_w), tc_free(g_y), tc_free(g_r), tc_free(g_b);
    tc_free(dx), tc_free(dw), tc_free(db);
    g_b = NULL;
}

static void test_conv_grad(void) {
    conv_grad_case(2, 3, 7, 6, 4, 3, 2, 1, 1);   /* stride 2, odd sizes */
    conv_grad_case(1, 2, 9, 8, 3, 3, 1, 2, 2);   /* dilation 2 */
    conv_grad_case(1, 2, 5, 5, 2, 3, 1, 12, 12); /* dilation 12 */
    conv_grad_case(1, 16, 5, 4, 16, 3, 1, 1, 1); /* blocked layout under auto */
    conv_grad_case(3, 2, 5, 7, 3, 1, 2, 0, 1);   /* 1x1 stride 2, batch 3 */
    conv_grad_case(1, 64, 5, 6, 16, 3, 1, 3, 3); /* sparse dilated: per-tap GEMMs */
}

/* ---------------- batch norm, training mode ---------------- */

static int bn_n = 2, bn_c = 3, bn_hw = 10, bn_relu;
static float *bn_x, *bn_g, *bn_bt, *bn_y, *bn_r;
static float bn_mean[3], bn_inv[3];

static void bn_forward(float *y, int relu) {
    float st[6];
    int64_t cnt = (int64_t)bn_n * bn_hw;
    O->bn_stats(tc_be, bn_x, bn_n, bn_c, bn_hw, st);
    O->bn_finalize(tc_be, st, &cnt, 1, bn_c, 1e-5f, 0.1f, bn_mean, bn_inv, NULL, NULL);
    O->bn_fwd(tc_be, bn_x, bn_mean, bn_inv, bn_g, bn_bt, y, bn_n, bn_c, bn_hw, relu);
}

static double bn_loss(void) {
    bn_forward(bn_y, bn_relu);
    return dot(bn_r, bn_y, (size_t)bn_n * bn_c * bn_hw);
}

static void bn_grad_case(int relu) {
    size_t cnt = (size_t)bn_n * bn_c * bn_hw;
    bn_relu = relu;
    bn_y = tc_zeros(cnt);
    bn_g = tc_rand(bn_c, 211, 0.5f, 1.5f), bn_bt = tc_rand(bn_c, 212, -0.3f, 0.3f);
    bn_r = tc_rand(cnt, 213, -1, 1);
    /* Pick data whose pre-ReLU outputs all stay >= 0.03 from zero. */
    bn_x = NULL;
    for (uint64_t seed = 214; seed < 300; seed++) {
        if (bn_x) tc_free(bn_x);
        bn_x = tc_rand(cnt, seed, -2, 2);
        bn_forward(bn_y, 0);
        double mn = 1e9;
        for (size_t i = 0; i < cnt; i++) mn = fmin(mn, fabs(bn_y[i]));
        if (!relu || mn >= 0.03) break;
    }
    bn_forward(bn_y, relu);
    float red[6], dg[3], db[3];
    float *dx = tc_zeros(cnt);
    O->bn_bwd_reduce(tc_be, bn_r, bn_x, bn_y, bn_mean, red, bn_n, bn_c, bn_hw, relu);
    O->bn_bwd_elem(tc_be, bn_r, bn_x, bn_y, bn_mean, bn_inv, bn_g, red, (double)bn_n * bn_hw,
                   dx, bn_n, bn_c, bn_hw, relu, 0);
    O->bn_param_grads(tc_be, red, bn_inv, dg, db, bn_c, 0);
    CHECK_FD(bn_x, cnt, dx, bn_loss, 1e-3f);
    CHECK_FD(bn_g, (size_t)bn_c, dg, bn_loss, 1e-3f);
    CHECK_FD(bn_bt, (size_t)bn_c, db, bn_loss, 1e-3f);
    tc_free(bn_x), tc_free(bn_g), tc_free(bn_bt), tc_free(bn_y), tc_free(bn_r), tc_free(dx);
}

static void test_bn_grad(void) { bn_grad_case(0); }
static void test_bn_relu_grad(void) { bn_grad_case(1); }

/* ---------------- elementwise ---------------- */

#define EN 97
static float *e_a, *e_b, *e_y, *e_r;
static uint8_t *e_mask;

/* Moves values within `gap` of zero away from it. */
static void away_from_zero(float *x, size_t n, float gap) {
    for (size_t i = 0; i < n; i++)
        if (fabsf(x[i]) < gap) x[i] = x[i] < 0 ? -gap - 0.01f : gap + 0.01f;
}

static double relu_loss(void) {
    O->relu_fwd(tc_be, e_a, e_y, EN);
    return dot(e_r, e_y, EN);
}
static double addrelu_loss(void) {
    O->add(tc_be, e_a, e_b, e_y, EN, 1);
    return dot(e_r, e_y, EN);
}
static double dropout_loss(void) {
    O->dropout_fwd(tc_be, e_a, e_y, e_mask, EN, 0.4f, 12345);
    return dot(e_r, e_y, EN);
}

static void test_elem_grad(void) {
    e_a = tc_rand(EN, 221, -1, 1), e_b = tc_rand(EN, 222, -1, 1);
    e_y = tc_zeros(EN), e_r = tc_rand(EN, 223, -1, 1);
    e_mask = O->alloc(tc_be, EN);
    float *d = tc_zeros(EN);
    away_from_zero(e_a, EN, 0.05f);
    O->relu_fwd(tc_be, e_a, e_y, EN);
    O->relu_bwd(tc_be, e_r, e_y, d, EN, 0);
    CHECK_FD(e_a, EN, d, relu_loss, 1e-3f);
    /* add+relu: keep a+b away from zero by adjusting b. */
    for (int i = 0; i < EN; i++) {
        float s = e_a[i] + e_b[i];
        if (fabsf(s) < 0.05f) e_b[i] += s < 0 ? -0.06f : 0.06f;
    }
    O->add(tc_be, e_a, e_b, e_y, EN, 1);
    O->relu_bwd(tc_be, e_r, e_y, d, EN, 0); /* same gradient for a and b */
    CHECK_FD(e_a, EN, d, addrelu_loss, 1e-3f);
    CHECK_FD(e_b, EN, d, addrelu_loss, 1e-3f);
    O->dropout_fwd(tc_be, e_a, e_y, e_mask, EN, 0.4f, 12345);
    O->dropout_bwd(tc_be, e_r, e_mask, d, EN, 0.4f, 0);
    CHECK_FD(e_a, EN, d, dropout_loss, 1e-2f);
    tc_free(e_a), tc_free(e_b), tc_free(e_y), tc_free(e_r), tc_free(e_mask), tc_free(d);
}

/* ---------------- pooling, resize, concat ---------------- */

static int p_n = 2, p_c = 2, p_h, p_w, p_oh, p_ow;
static float *p_x, *p_y, *p_r;
static int32_t *p_idx;

static double maxpool_loss(void) {
    O->maxpool_fwd(tc_be, p_x, p_y, p_idx, p_n, p_c, p_h, p_w, p_oh, p_ow);
    return dot(p_r, p_y, (size_t)p_n * p_c * p_oh * p_ow);
}
static double avgpool_loss(void) {
    O->avgpool_fwd(tc_be, p_x, p_y, p_n, p_c, p_h * p_w);
    return dot(p_r, p_y, (size_t)p_n * p_c);
}
static double resize_loss(void) {
    O->resize_fwd(tc_be, p_x, p_y, p_n, p_c, p_h, p_w, p_oh, p_ow);
    return dot(p_r, p_y, (size_t)p_n * p_c * p_oh * p_ow);
}

static void pool_setup(int h, int w, int oh, int ow) {
    p_h = h, p_w = w, p_oh = oh, p_ow = ow;
    size_t nx = (size_t)p_n * p_c * h * w, ny = (size_t)p_n * p_c * oh * ow;
    p_x = tc_zeros(nx), p_y = tc_zeros(ny), p_r = tc_rand(ny, 231, -1, 1);
    p_idx = O->alloc(tc_be, ny * sizeof(int32_t));
    /* Distinct values 0.01 apart in scrambled order: no ties within 10*h. */
    for (size_t i = 0; i < nx; i++) p_x[i] = (float)((i * 7919) % nx) * 0.01f - 1.0f;
}

static void pool_teardown(void) {
    tc_free(p_x), tc_free(p_y), tc_free(p_r), tc_free(p_idx);
}

static void test_pool_grad(void) {
    pool_setup(7, 6, 4, 3);
    size_t nx = (size_t)p_n * p_c * p_h * p_w;
    float *dx = tc_zeros(nx);
    O->maxpool_fwd(tc_be, p_x, p_y, p_idx, p_n, p_c, p_h, p_w, p_oh, p_ow);
    O->maxpool_bwd(tc_be, p_r, p_idx, dx, p_n, p_c, p_h, p_w, p_oh, p_ow);
    CHECK_FD(p_x, nx, dx, maxpool_loss, 1e-3f);
    O->avgpool_bwd(tc_be, p_r, dx, p_n, p_c, p_h * p_w, 0);
    CHECK_FD(p_x, nx, dx, avgpool_loss, 1e-2f);
    tc_free(dx);
    pool_teardown();
}

static void resize_grad_case(int h, int w, int oh, int ow) {
    pool_setup(h, w, oh, ow);
    size_t nx = (size_t)p_n * p_c * h * w;
    float *dx = tc_zeros(nx);
    O->resize_bwd(tc_be, p_r, dx, p_n, p_c, h, w, oh, ow, 0);
    CHECK_FD(p_x, nx, dx, resize_loss, 1e-2f);
    tc_free(dx);
    pool_teardown();
}

static void test_resize_grad(void) {
    resize_grad_case(4, 5, 11, 13); /* up, odd */
    resize_grad_case(9, 8, 4, 3);   /* down */
}

static float *c_src, *c_dst, *c_r;
static double concat_loss(void) {
    O->concat_fwd(tc_be, c_src, c_dst, 2, 3, 7, 2, 5);
    return dot(c_r, c_dst, 2 * 7 * 5);
}

static void test_concat_grad(void) {
    c_src = tc_rand(2 * 3 * 5, 241, -1, 1), c_dst = tc_zeros(2 * 7 * 5);
    c_r = tc_rand(2 * 7 * 5, 242, -1, 1);
    float *d = tc_zeros(2 * 3 * 5);
    O->concat_bwd(tc_be, c_r, d, 2, 3, 7, 2, 5, 0);
    CHECK_FD(c_src, 2 * 3 * 5, d, concat_loss, 1e-2f);
    tc_free(c_src), tc_free(c_dst), tc_free(c_r), tc_free(d);
}

/* ---------------- cross-entropy ---------------- */

static float *ce_l;
static uint8_t ce_lab[2 * 9];

static double ce_loss(void) {
    double loss;
    int64_t valid;
    O->ce_fwd_bwd(tc_be, ce_l, ce_lab, 2, 4, 9, 255, 1.0f, NULL, &loss, &valid);
    return loss;
}

static void test_ce_grad(void) {
    size_t nl = 2 * 4 * 9;
    ce_l = tc_rand(nl, 251, -3, 3);
    for (int i = 0; i < 18; i++) ce_lab[i] = (uint8_t)(i % 5 == 4 ? 255 : i % 4);
    float *d = tc_zeros(nl);
    double loss;
    int64_t valid;
    O->ce_fwd_bwd(tc_be, ce_l, ce_lab, 2, 4, 9, 255, 1.0f, d, &loss, &valid);
    CHECK_EQ_INT(valid, 18 - 3);
    CHECK_FD(ce_l, nl, d, ce_loss, 1e-2f);
    tc_free(ce_l), tc_free(d);
}

int main(void) {
    /* One thread: thousands of tiny forward calls, where thread wake-ups
     * would dominate; test_ops and test_conv cover the threaded paths. */
    tc_be = tc_backend(1);
    TEST_RUN(test_conv_grad);
    TEST_RUN(test_bn_grad);
    TEST_RUN(test_bn_relu_grad);
    TEST_RUN(test_elem_grad);
    TEST_RUN(test_pool_grad);
    TEST_RUN(test_resize_grad);
    TEST_RUN(test_concat_grad);
    TEST_RUN(test_ce_grad);
    sg_backend_destroy(tc_be);
    return TEST_EXIT();
}
