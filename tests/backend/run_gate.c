/* tests/backend/run_gate.c - runners for the gate ops (hardswish,
 * hardsigmoid, sigmoid and their gradients; channel scaling with its
 * gradients to x and s), against ref_ops, plus their finite-difference
 * checks. Known-value rows carry torch 1.13's values at and around the
 * kinks of the hard functions (in: x, in2: dy, want: the result).
 */
#include <math.h>

#include "tests/backend/cases.h"
#include "tests/kernels/ref_ops.h"

typedef void (*op_fwd_fn)(sg_backend *, const float *, float *, size_t);
typedef void (*op_bwd_fn)(sg_backend *, const float *, const float *, float *, size_t, int);
typedef void (*ref_fwd_fn)(const float *, float *, size_t);
typedef void (*ref_bwd_fn)(const float *, const float *, float *, size_t, int);

/* y = F(x); inplace: y aliases x. */
static void run_fwd(tb_ctx *t, const tb_case *c, op_fwd_fn op, ref_fwd_fn ref) {
    size_t n = c->count;
    float *x = tb_input(t, n), *y = tb_hzeros(t, n);
    ref(x, y, n);
    float *x_d = tb_devf(t, x, n);
    float *y_d = c->inplace ? x_d : tb_devf(t, tb_rand(t, n, 5, 6), n); /* garbage: overwritten */
    op(t->be, x_d, y_d, n);
    float *got = tb_getf(t, y_d, n);
    tb_close(t, "y", y, got, n, t->tol);
    tb_want(t, "y", got, n);
}

/* dx (+)= G(dy, v): v is x (hard functions) or the forward's output y
 * (sigmoid: v_is_y, computed by the reference from the drawn x); dy from
 * in2 when given; inplace: dx aliases dy. */
static void run_bwd(tb_ctx *t, const tb_case *c, op_bwd_fn op, ref_bwd_fn ref, ref_fwd_fn fwd) {
    size_t n = c->count;
    float *x = tb_input(t, n), *v = x;
    if (fwd) {
        v = tb_hzeros(t, n);
        fwd(x, v, n);
    }
    float *dy = c->in2 ? tb_hcopy(t, c->in2, n) : tb_rand(t, n, -1, 1);
    float *dx0 = c->inplace ? tb_hcopy(t, dy, n) : tb_rand(t, n, -1, 1);
    float *dx = tb_hcopy(t, dx0, n);
    ref(dy, v, dx, n, c->acc);
    float *dy_d = tb_devf(t, dy, n), *v_d = tb_devf(t, v, n);
    float *dx_d = c->inplace ? dy_d : tb_devf(t, dx0, n);
    op(t->be, dy_d, v_d, dx_d, n, c->acc);
    float *got = tb_getf(t, dx_d, n);
    tb_close(t, "dx", dx, got, n, t->tol);
    tb_want(t, "dx", got, n);
}

void run_hardswish_fwd(tb_ctx *t, const tb_case *c) {
    if (TB_HAS(t, hardswish_fwd)) run_fwd(t, c, t->be->ops->hardswish_fwd, ref_hardswish_fwd);
}
void run_hardswish_bwd(tb_ctx *t, const tb_case *c) {
    if (TB_HAS(t, hardswish_bwd)) run_bwd(t, c, t->be->ops->hardswish_bwd, ref_hardswish_bwd, NULL);
}
void run_hardsigmoid_fwd(tb_ctx *t, const tb_case *c) {
    if (TB_HAS(t, hardsigmoid_fwd)) run_fwd(t, c, t->be->ops->hardsigmoid_fwd, ref_hardsigmoid_fwd);
}
void run_hardsigmoid_bwd(tb_ctx *t, const tb_case *c) {
    if (TB_HAS(t, hardsigmoid_bwd))
        run_bwd(t, c, t->be->ops->hardsigmoid_bwd, ref_hardsigmoid_bwd, NULL);
}
void run_sigmoid_fwd(tb_ctx *t, const tb_case *c) {
    if (TB_HAS(t, sigmoid_fwd)) run_fwd(t, c, t->be->ops->sigmoid_fwd, ref_sigmoid_fwd);
}
void run_sigmoid_bwd(tb_ctx *t, const tb_case *c) {
    if (TB_HAS(t, sigmoid_bwd))
        run_bwd(t, c, t->be->ops->sigmoid_bwd, ref_sigmoid_bwd, ref_sigmoid_fwd);
}

/* y = x * s[n,c]; inplace: y aliases x. */
void run_chan_scale_fwd(tb_ctx *t, const tb_case *c) {
    if (!TB_HAS(t, chan_scale_fwd)) return;
    int hw = c->h * c->w;
    size_t planes = (size_t)c->n * c->c, cnt = planes * hw;
    float *x = tb_input(t, cnt), *s = tb_rand(t, planes, -2, 2), *y = tb_hzeros(t, cnt);
    ref_chan_scale_fwd(x, s, y, c->n, c->c, hw);
    float *x_d = tb_actf(t, x, c->n, c->c, hw), *s_d = tb_devf(t, s, planes);
    float *y_d = c->inplace ? x_d : tb_devf(t, tb_rand(t, cnt, 5, 6), cnt);
    t->be->ops->chan_scale_fwd(t->be, x_d, s_d, y_d, c->n, c->c, hw);
    tb_close_act(t, "y", y, y_d, c->n, c->c, hw, t->tol);
}

/* dx (acc), ds (acc2); skip 1: dx NULL, 2: ds NULL. */
void run_chan_scale_bwd(tb_ctx *t, const tb_case *c) {
    if (!TB_HAS(t, chan_scale_bwd)) return;
    int hw = c->h * c->w;
    size_t planes = (size_t)c->n * c->c, cnt = planes * hw;
    float *x = tb_input(t, cnt), *s = tb_rand(t, planes, -2, 2), *dy = tb_rand(t, cnt, -1, 1);
    float *dx0 = tb_rand(t, cnt, -1, 1), *ds0 = tb_rand(t, planes, -1, 1);
    float *dx = tb_hcopy(t, dx0, cnt), *ds = tb_hcopy(t, ds0, planes);
    float *dx_r = c->skip == 1 ? NULL : dx, *ds_r = c->skip == 2 ? NULL : ds;
    ref_chan_scale_bwd(dy, x, s, dx_r, ds_r, c->n, c->c, hw, c->acc, c->acc2);
    float *dx_d = tb_actf(t, dx0, c->n, c->c, hw), *ds_d = tb_devf(t, ds0, planes);
    t->be->ops->chan_scale_bwd(t->be, tb_actf(t, dy, c->n, c->c, hw), tb_actf(t, x, c->n, c->c, hw),
                               tb_devf(t, s, planes), c->skip == 1 ? NULL : dx_d,
                               c->skip == 2 ? NULL : ds_d, c->n, c->c, hw, c->acc, c->acc2);
    /* a NULL output is left as it was */
    tb_close_act(t, "dx", dx, dx_d, c->n, c->c, hw, t->tol);
    tb_close_dev(t, "ds", ds, ds_d, planes, t->tol);
}

/* ---------------- finite differences ---------------- */

typedef struct gate_st {
    size_t n;
    op_fwd_fn fwd;
    float *x_d, *y_d, *r;
} gate_st;

static double gate_loss(tb_ctx *t, void *p) {
    gate_st *s = p;
    s->fwd(t->be, s->x_d, s->y_d, s->n);
    return tb_dot_dev(t, s->r, s->y_d, s->n);
}

/* x in [lo, hi) kept 10*h away from the kinks -3 and 3 (a difference never
 * straddles one); sigmoid's backward gets its forward output. */
static void run_grad_gate(tb_ctx *t, const tb_case *c, op_fwd_fn fwd, op_bwd_fn bwd, int kinks,
                          int bwd_takes_y) {
    gate_st s = {c->count, fwd, NULL, NULL, NULL};
    float *x = tb_input(t, s.n);
    float gap = 10 * c->fd_h;
    if (kinks)
        for (size_t i = 0; i < s.n; i++)
            for (int k = -3; k <= 3; k += 6)
                if (fabsf(x[i] - (float)k) < gap) x[i] = (float)k + (x[i] < k ? -gap : gap);
    s.r = tb_rand(t, s.n, -1, 1);
    s.x_d = tb_devf(t, x, s.n), s.y_d = tb_devf(t, NULL, s.n);
    float *dx_d = tb_devf(t, NULL, s.n);
    fwd(t->be, s.x_d, s.y_d, s.n);
    bwd(t->be, tb_devf(t, s.r, s.n), bwd_takes_y ? s.y_d : s.x_d, dx_d, s.n, 0);
    tb_check_fd(t, "x", x, s.x_d, s.n, tb_getf(t, dx_d, s.n), gate_loss, &s, c->fd_h);
}

void run_grad_hardswish(tb_ctx *t, const tb_case *c) {
    if (TB_HAS(t, hardswish_fwd) && TB_HAS(t, hardswish_bwd))
        run_grad_gate(t, c, t->be->ops->hardswish_fwd, t->be->ops->hardswish_bwd, 1, 0);
}
void run_grad_hardsigmoid(tb_ctx *t, const tb_case *c) {
    if (TB_HAS(t, hardsigmoid_fwd) && TB_HAS(t, hardsigmoid_bwd))
        run_grad_gate(t, c, t->be->ops->hardsigmoid_fwd, t->be->ops->hardsigmoid_bwd, 1, 0);
}
void run_grad_sigmoid(tb_ctx *t, const tb_case *c) {
    if (TB_HAS(t, sigmoid_fwd) && TB_HAS(t, sigmoid_bwd))
        run_grad_gate(t, c, t->be->ops->sigmoid_fwd, t->be->ops->sigmoid_bwd, 0, 1);
}

typedef struct cs_st {
    int n, c, hw;
    float *x_d, *s_d, *y_d, *r;
} cs_st;

static double cs_loss(tb_ctx *t, void *p) {
    cs_st *s = p;
    t->be->ops->chan_scale_fwd(t->be, s->x_d, s->s_d, s->y_d, s->n, s->c, s->hw);
    return tb_dot_dev(t, s->r, s->y_d, (size_t)s->n * s->c * s->hw);
}

void run_grad_chan_scale(tb_ctx *t, const tb_case *c) {
    if (!TB_HAS(t, chan_scale_fwd) || !TB_HAS(t, chan_scale_bwd)) return;
    cs_st s = {c->n, c->c, c->h * c->w, NULL, NULL, NULL, NULL};
    size_t planes = (size_t)s.n * s.c, cnt = planes * s.hw;
    /* x and r (the loss weights, = dy) are activations: host copies in the
     * backend's layout, so the differences step the element they name */
    float *x = tb_to_layout(t, tb_rand(t, cnt, -1, 1), s.n, s.c, s.hw, sizeof(float));
    float *sc = tb_rand(t, planes, -2, 2);
    s.r = tb_to_layout(t, tb_rand(t, cnt, -1, 1), s.n, s.c, s.hw, sizeof(float));
    s.x_d = tb_devf(t, x, cnt), s.s_d = tb_devf(t, sc, planes), s.y_d = tb_devf(t, NULL, cnt);
    float *dx_d = tb_devf(t, NULL, cnt), *ds_d = tb_devf(t, NULL, planes);
    t->be->ops->chan_scale_bwd(t->be, tb_devf(t, s.r, cnt), s.x_d, s.s_d, dx_d, ds_d, s.n, s.c,
                               s.hw, 0, 0);
    tb_check_fd(t, "x", x, s.x_d, cnt, tb_getf(t, dx_d, cnt), cs_loss, &s, c->fd_h);
    tb_check_fd(t, "s", sc, s.s_d, planes, tb_getf(t, ds_d, planes), cs_loss, &s, c->fd_h);
}

/* ---------------- a squeeze-excitation block (torchvision's MobileNetV3) ----
 * y = x * hardsigmoid(fc2(relu(fc1(avgpool(x))))), fc = 1x1 conv + bias:
 * the gate ops composed with pooling, convolutions and ReLU as the model
 * will; x reaches y twice (scaled, and through the gate), so dx is
 * chan_scale_bwd's part plus avgpool_bwd's, accumulated. Checked on x and
 * on fc1's weights. */

typedef struct se_st {
    int n, c, cs, hw;
    sg_conv_desc d1, d2;
    float *x_d, *w1_d, *b1_d, *w2_d, *b2_d;
    float *p_d, *z1_d, *a1_d, *z2_d, *s_d, *y_d, *r;
} se_st;

static void se_forward(tb_ctx *t, se_st *s) {
    const sg_ops *o = t->be->ops;
    o->avgpool_fwd(t->be, s->x_d, SG_ACT_F32, s->p_d, s->n, s->c, s->hw);
    o->conv_fwd(t->be, &s->d1, s->p_d, s->w1_d, s->z1_d);
    o->bias_fwd(t->be, s->z1_d, s->b1_d, s->n, s->cs, 1);
    o->relu_fwd(t->be, s->z1_d, s->a1_d, (size_t)s->n * s->cs);
    o->conv_fwd(t->be, &s->d2, s->a1_d, s->w2_d, s->z2_d);
    o->bias_fwd(t->be, s->z2_d, s->b2_d, s->n, s->c, 1);
    o->hardsigmoid_fwd(t->be, s->z2_d, s->s_d, (size_t)s->n * s->c);
    o->chan_scale_fwd(t->be, s->x_d, s->s_d, s->y_d, s->n, s->c, s->hw);
}

static double se_loss(tb_ctx *t, void *p) {
    se_st *s = p;
    se_forward(t, s);
    return tb_dot_dev(t, s->r, s->y_d, (size_t)s->n * s->c * s->hw);
}

void run_grad_se(tb_ctx *t, const tb_case *c) {
    if (!TB_HAS(t, avgpool_fwd) || !TB_HAS(t, avgpool_bwd) || !TB_HAS(t, conv_fwd) ||
        !TB_HAS(t, conv_bwd_data) || !TB_HAS(t, conv_bwd_weight) || !TB_HAS(t, bias_fwd) ||
        !TB_HAS(t, relu_fwd) || !TB_HAS(t, relu_bwd) || !TB_HAS(t, hardsigmoid_fwd) ||
        !TB_HAS(t, hardsigmoid_bwd) || !TB_HAS(t, chan_scale_fwd) || !TB_HAS(t, chan_scale_bwd))
        return;
    const sg_ops *o = t->be->ops;
    se_st s = {.n = c->n, .c = c->c, .cs = c->c_dst, .hw = c->h * c->w};
    s.d1 = (sg_conv_desc){.n = s.n,
                          .c = s.c,
                          .h = 1,
                          .w = 1,
                          .k = s.cs,
                          .r = 1,
                          .s = 1,
                          .stride_h = 1,
                          .stride_w = 1,
                          .dil_h = 1,
                          .dil_w = 1};
    s.d2 = s.d1;
    s.d2.c = s.cs, s.d2.k = s.c;
    if (!tb_expect(t, sg_conv_desc_init(&s.d1) == 0 && sg_conv_desc_init(&s.d2) == 0,
                   "empty output (table error)"))
        return;
    size_t cnt = (size_t)s.n * s.c * s.hw, nc = (size_t)s.n * s.c, ns = (size_t)s.n * s.cs;
    size_t nw = (size_t)s.c * s.cs;
    /* x, r (= dy) in the backend's layout (activations); the rest is [n, c] */
    float *x = tb_to_layout(t, tb_rand(t, cnt, -1, 1), s.n, s.c, s.hw, sizeof(float));
    float *w1 = tb_rand(t, nw, -1, 1), *w2 = tb_rand(t, nw, -1, 1);
    float *b1 = tb_rand(t, s.cs, -0.5f, 0.5f), *b2 = tb_rand(t, s.c, -0.5f, 0.5f);
    s.r = tb_to_layout(t, tb_rand(t, cnt, -1, 1), s.n, s.c, s.hw, sizeof(float));
    s.x_d = tb_devf(t, x, cnt), s.w1_d = tb_devf(t, w1, nw), s.w2_d = tb_devf(t, w2, nw);
    s.b1_d = tb_devf(t, b1, s.cs), s.b2_d = tb_devf(t, b2, s.c);
    s.p_d = tb_devf(t, NULL, nc), s.z1_d = tb_devf(t, NULL, ns), s.a1_d = tb_devf(t, NULL, ns);
    s.z2_d = tb_devf(t, NULL, nc), s.s_d = tb_devf(t, NULL, nc), s.y_d = tb_devf(t, NULL, cnt);
    se_forward(t, &s);
    /* the gate's pre-activations must stay clear of every kink (relu at 0,
     * hardsigmoid at -3 and 3) for the central differences */
    float *z1 = tb_getf(t, s.z1_d, ns), *z2 = tb_getf(t, s.z2_d, nc);
    for (size_t i = 0; i < ns; i++)
        if (!tb_expect(t, fabsf(z1[i]) > 1e-2f, "fc1 output %zu = %g near ReLU's kink", i, z1[i]))
            return;
    for (size_t i = 0; i < nc; i++)
        if (!tb_expect(t, fabsf(fabsf(z2[i]) - 3) > 1e-2f, "fc2 output %zu = %g near a kink", i,
                       z2[i]))
            return;
    float *r_d = tb_devf(t, s.r, cnt), *dx_d = tb_devf(t, NULL, cnt), *ds_d = tb_devf(t, NULL, nc);
    float *dz2_d = tb_devf(t, NULL, nc), *da1_d = tb_devf(t, NULL, ns);
    float *dz1_d = tb_devf(t, NULL, ns), *dp_d = tb_devf(t, NULL, nc);
    float *dw1_d = tb_devf(t, NULL, nw);
    o->chan_scale_bwd(t->be, r_d, s.x_d, s.s_d, dx_d, ds_d, s.n, s.c, s.hw, 0, 0);
    o->hardsigmoid_bwd(t->be, ds_d, s.z2_d, dz2_d, nc, 0);
    o->conv_bwd_data(t->be, &s.d2, dz2_d, s.w2_d, da1_d, 0);
    o->relu_bwd(t->be, da1_d, s.a1_d, dz1_d, ns, 0);
    o->conv_bwd_weight(t->be, &s.d1, s.p_d, dz1_d, dw1_d, 0);
    o->conv_bwd_data(t->be, &s.d1, dz1_d, s.w1_d, dp_d, 0);
    o->avgpool_bwd(t->be, dp_d, dx_d, s.n, s.c, s.hw, 1);
    tb_check_fd(t, "x", x, s.x_d, cnt, tb_getf(t, dx_d, cnt), se_loss, &s, c->fd_h);
    tb_check_fd(t, "fc1 weights", w1, s.w1_d, nw, tb_getf(t, dw1_d, nw), se_loss, &s, c->fd_h);
}
