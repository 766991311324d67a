/* tests/backend/run_elem.c - runners for the elementwise ops (ReLU, add with
 * optional ReLU and aliasing, scale, axpy, sumsq), dropout (the mask is
 * bit-exact by contract: backend.h), SGD (torch.optim.SGD semantics, with
 * PyTorch-printed values as known-value cases) and input normalization,
 * against ref_ops.
 */
#include <math.h>
#include <string.h>

#include "kernels/rng.h"
#include "tests/backend/cases.h"
#include "tests/kernels/ref_ops.h"

void run_relu_fwd(tb_ctx *t, const tb_case *c) {
    if (!TB_HAS(t, relu_fwd)) return;
    size_t n = c->count;
    float *x = tb_input(t, n), *y = tb_hzeros(t, n);
    ref_relu_fwd(x, y, n);
    float *y_d = tb_devf(t, tb_rand(t, n, 5, 6), n);
    t->be->ops->relu_fwd(t->be, tb_devf(t, x, n), y_d, n);
    tb_close_dev(t, "y", y, y_d, n, t->tol);
}

void run_relu_bwd(tb_ctx *t, const tb_case *c) {
    if (!TB_HAS(t, relu_bwd)) return;
    size_t n = c->count;
    float *dy = tb_rand(t, n, -1, 1), *y = tb_hzeros(t, n), *dx0 = tb_rand(t, n, -1, 1);
    ref_relu_fwd(tb_input(t, n), y, n); /* a real ReLU output: exact zeros */
    float *dx = tb_hcopy(t, dx0, n), *dx_d = tb_devf(t, dx0, n);
    ref_relu_bwd(dy, y, dx, n, c->acc);
    t->be->ops->relu_bwd(t->be, tb_devf(t, dy, n), tb_devf(t, y, n), dx_d, n, c->acc);
    tb_close_dev(t, "dx", dx, dx_d, n, t->tol);
}

/* inplace 1: y aliases a, 2: y aliases b (backend.h allows both). */
void run_add(tb_ctx *t, const tb_case *c) {
    if (!TB_HAS(t, add)) return;
    size_t n = c->count;
    float *a = tb_input(t, n), *b = tb_rand(t, n, -1, 1), *y = tb_hzeros(t, n);
    ref_add(a, b, y, n, c->relu);
    float *a_d = tb_devf(t, a, n), *b_d = tb_devf(t, b, n);
    float *y_d = c->inplace == 1 ? a_d : c->inplace == 2 ? b_d : tb_devf(t, tb_rand(t, n, 5, 6), n);
    t->be->ops->add(t->be, a_d, b_d, y_d, n, c->relu);
    tb_close_dev(t, "y", y, y_d, n, t->tol);
}

void run_scale(tb_ctx *t, const tb_case *c) {
    if (!TB_HAS(t, scale)) return;
    size_t n = c->count;
    float *x = tb_input(t, n), *y = tb_hzeros(t, n);
    ref_scale(x, y, c->alpha, n);
    float *x_d = tb_devf(t, x, n), *y_d = c->inplace ? x_d : tb_devf(t, NULL, n);
    t->be->ops->scale(t->be, x_d, y_d, c->alpha, n);
    tb_close_dev(t, "y", y, y_d, n, t->tol);
}

void run_axpy(tb_ctx *t, const tb_case *c) {
    if (!TB_HAS(t, axpy)) return;
    size_t n = c->count;
    float *x = tb_input(t, n), *y0 = tb_rand(t, n, -1, 1), *y = tb_hcopy(t, y0, n);
    ref_axpy(c->alpha, x, y, n);
    float *y_d = tb_devf(t, y0, n);
    t->be->ops->axpy(t->be, c->alpha, tb_devf(t, x, n), y_d, n);
    tb_close_dev(t, "y", y, y_d, n, t->tol);
}

/* sumsq returns a double on the host: relative error of the sum. */
void run_sumsq(tb_ctx *t, const tb_case *c) {
    if (!TB_HAS(t, sumsq)) return;
    size_t n = c->count;
    float *x = tb_input(t, n);
    double want = ref_sumsq(x, n), got = t->be->ops->sumsq(t->be, tb_devf(t, x, n), n);
    tb_near(t, "sum of squares", got, want, t->tol * want);
    tb_want_d(t, "sum of squares", &got, 1);
}

static uint64_t dropout_key(const tb_case *c) {
    return c->key ? c->key : sg_rng_key(7, 1, 2, 0, SG_RNG_DROPOUT);
}

/* With c->c set the tensor is an [n, c, h*w] activation (the mask keys on
 * the NCHW index in every layout), else a flat vector of c->count. */
void run_dropout_fwd(tb_ctx *t, const tb_case *c) {
    if (!TB_HAS(t, dropout_fwd)) return;
    int an = c->c ? c->n : 1, ac = c->c ? c->c : 1, ahw = c->c ? c->h * c->w : (int)c->count;
    size_t n = (size_t)an * ac * ahw;
    float p = c->p;
    /* the mask key: the step key set before the op, mixed with its salt */
    uint64_t step = dropout_key(c), salt = 11, key = sg_rng_dropout_key(step, salt);
    float *x = tb_input(t, n), *y = tb_hzeros(t, n);
    uint8_t *m = tb_hbytes(t, n);
    ref_dropout_fwd(x, y, m, n, p, key);
    float *x_d = tb_actf(t, x, an, ac, ahw), *y_d = tb_devf(t, tb_rand(t, n, 5, 6), n);
    uint8_t *m_d = tb_dev(t, NULL, n);
    t->be->ops->set_step_key(t->be, step);
    t->be->ops->dropout_fwd(t->be, x_d, y_d, m_d, n, ac, ahw, p, salt);
    uint8_t *gm = tb_act_get(t, m_d, an, ac, ahw, 1);
    float *gy = tb_act_getf(t, y_d, an, ac, ahw);
    tb_same(t, "mask (bit-exact rule of backend.h)", m, gm, n);
    tb_close(t, "y", y, gy, n, t->tol);
    /* The rule itself, independently of the reference. */
    size_t kept = 0, bad = 0;
    float s = 1.0f / (1.0f - p);
    for (size_t i = 0; i < n; i++) {
        int keep = p < 1.0f && sg_rng_uniform(key, i) >= p;
        float v = keep ? x[i] * s : 0.0f;
        bad += gm[i] != keep || memcmp(&gy[i], &v, sizeof v) != 0;
        kept += gm[i];
    }
    tb_expect(t, bad == 0, "%zu elements break mask = uniform(key, i) >= p, y = x*(1/(1-p))", bad);
    tb_near(t, "kept fraction", (double)kept / n, p >= 1 ? 0.0 : 1.0 - p, 0.01);
    if (p > 0 && p < 1) { /* another step key or salt, another mask */
        t->be->ops->dropout_fwd(t->be, x_d, y_d, m_d, n, ac, ahw, p, salt + 1);
        tb_expect(t, memcmp(tb_act_get(t, m_d, an, ac, ahw, 1), gm, n) != 0,
                  "salt + 1 gave the same mask");
        t->be->ops->set_step_key(t->be, step + 1);
        t->be->ops->dropout_fwd(t->be, x_d, y_d, m_d, n, ac, ahw, p, salt);
        tb_expect(t, memcmp(tb_act_get(t, m_d, an, ac, ahw, 1), gm, n) != 0,
                  "step key + 1 gave the same mask");
    }
}

void run_dropout_bwd(tb_ctx *t, const tb_case *c) {
    if (!TB_HAS(t, dropout_bwd)) return;
    size_t n = c->count;
    float *x = tb_input(t, n), *y = tb_hzeros(t, n), *dy = tb_rand(t, n, -1, 1);
    float *dx0 = tb_rand(t, n, -1, 1), *dx = tb_hcopy(t, dx0, n);
    uint8_t *m = tb_hbytes(t, n);
    ref_dropout_fwd(x, y, m, n, c->p, dropout_key(c));
    ref_dropout_bwd(dy, m, dx, n, c->p, c->acc);
    float *dx_d = tb_devf(t, dx0, n);
    t->be->ops->dropout_bwd(t->be, tb_devf(t, dy, n), tb_dev(t, m, n), dx_d, n, c->p, c->acc);
    tb_close_dev(t, "dx", dx, dx_d, n, t->tol);
}

/* sgd.steps steps on param (in: given, else random) with gradients (in2:
 * steps x count given, else random); the momentum buffer starts at zero when
 * sgd.first, else random, and is NULL when momentum is 0 (unused). Known
 * values: the parameters after each step (steps x count). */
void run_sgd_step(tb_ctx *t, const tb_case *c) {
    if (!TB_HAS(t, sgd_step)) return;
    size_t n = c->count;
    tb_sgd s = c->sgd;
    float *p = tb_input(t, n);
    float *g = c->in2 ? tb_hcopy(t, c->in2, n * s.steps) : tb_rand(t, n * s.steps, -1, 1);
    float *buf = s.first ? tb_hzeros(t, n) : tb_rand(t, n, -1, 1);
    int use_buf = s.momentum != 0;
    float *p_d = tb_devf(t, p, n), *buf_d = use_buf ? tb_devf(t, buf, n) : NULL;
    float *after = tb_hzeros(t, n * s.steps);
    for (int k = 0; k < s.steps; k++) {
        int first = s.first && k == 0;
        ref_sgd_step(p, g + k * n, use_buf ? buf : NULL, n, s.lr, s.momentum, s.dampening, s.wd,
                     s.nesterov, first);
        t->be->ops->sgd_step(t->be, p_d, tb_devf(t, g + k * n, n), buf_d, n, s.lr, s.momentum,
                             s.dampening, s.wd, s.nesterov, first);
        float *got = tb_getf(t, p_d, n);
        memcpy(after + k * n, got, n * sizeof(float));
        if (!tb_close(t, "param", p, got, n, t->tol)) return;
        if (use_buf && !tb_close_dev(t, "momentum buffer", buf, buf_d, n, t->tol)) return;
    }
    tb_want(t, "param after each step", after, n * s.steps);
}

void run_normalize_u8(tb_ctx *t, const tb_case *c) {
    if (!TB_HAS(t, normalize_u8)) return;
    static const float mean[3] = {0.485f, 0.456f, 0.406f}, std[3] = {0.229f, 0.224f, 0.225f};
    int n = c->n, h = c->h, w = c->w;
    size_t cnt = (size_t)n * h * w * 3;
    uint8_t *src = tb_hbytes(t, cnt);
    for (size_t i = 0; i < cnt; i++) src[i] = (uint8_t)(tb_u64(t, i) & 255);
    float *dst = tb_hzeros(t, cnt), *dst_d = tb_devf(t, tb_rand(t, cnt, 5, 6), cnt);
    ref_normalize_u8(src, dst, n, h, w, mean, std);
    t->be->ops->normalize_u8(t->be, tb_dev(t, src, cnt), dst_d, n, h, w, mean, std);
    float *got = tb_act_getf(t, dst_d, n, 3, h * w);
    tb_close(t, "dst", dst, got, cnt, t->tol);
    /* Layout, independently of the reference: HWC pixel q (the second, or
     * the only one) channel 2 of the last image lands at dst[n-1][2][q]
     * (got is NCHW whatever the backend's layout). */
    size_t q = h * w > 1 ? 1 : 0;
    uint8_t v = src[((size_t)(n - 1) * h * w + q) * 3 + 2];
    tb_near(t, "dst[n-1][2][q]", got[((size_t)(n - 1) * 3 + 2) * h * w + q],
            (v / 255.0 - 0.406) / 0.225, 1e-5);
}
