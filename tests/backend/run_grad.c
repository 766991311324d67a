/* tests/backend/run_grad.c - finite-difference gradient checks of every
 * differentiable op, on the backend: conv (data, weight) with bias, batch
 * norm in training mode (the whole chain through the batch statistics, with
 * and without fused ReLU: dx, dgamma, dbeta; fused with the residual join:
 * also the identity's gradient), ReLU, add+ReLU, dropout,
 * max-pool, average pool, resize, concat and cross-entropy.
 *
 * For an op f and a fixed random r, L = sum(r * f(inputs)) is evaluated in
 * double from the backend's float forward (downloaded); the analytic
 * gradient is the backend's backward with dy = r; the numeric one the
 * central difference (tb_check_fd), with tolerance t->tol. Inputs of
 * non-smooth ops are kept at least 10*h away from their kinks, so a
 * difference never straddles one.
 */
#include <math.h>

#include "tests/backend/cases.h"
#include "tests/kernels/ref_ops.h"

/* ---------------- conv + bias ---------------- */

typedef struct conv_st {
    sg_conv_desc d;
    float *x_d, *w_d, *b_d, *y_d, *r;
    size_t ny;
} conv_st;

static double conv_loss(tb_ctx *t, void *p) {
    conv_st *s = p;
    t->be->ops->conv_fwd(t->be, &s->d, s->x_d, s->w_d, s->y_d);
    t->be->ops->bias_fwd(t->be, s->y_d, s->b_d, s->d.n, s->d.k, s->d.oh * s->d.ow);
    return tb_dot_dev(t, s->r, s->y_d, s->ny);
}

void run_grad_conv(tb_ctx *t, const tb_case *c) {
    if (!TB_HAS(t, conv_fwd) || !TB_HAS(t, conv_bwd_data) || !TB_HAS(t, conv_bwd_weight) ||
        !TB_HAS(t, bias_fwd) || !TB_HAS(t, bias_bwd))
        return;
    const sg_ops *o = t->be->ops;
    conv_st s = {c->conv, NULL, NULL, NULL, NULL, NULL, 0};
    if (!tb_expect(t, sg_conv_desc_init(&s.d) == 0, "empty output (table error)")) return;
    sg_conv_desc *d = &s.d;
    size_t nx = (size_t)d->n * d->c * d->h * d->w, nw = tb_conv_nw(d);
    s.ny = (size_t)d->n * d->k * d->oh * d->ow;
    int xhw = d->h * d->w, yhw = d->oh * d->ow;
    float *x = tb_rand(t, nx, -1, 1), *w = tb_rand(t, nw, -1, 1), *b = tb_rand(t, d->k, -1, 1);
    s.r = tb_rand(t, s.ny, -1, 1);
    /* x, y, r (= dy) and dx are activations: the host mirrors of x and r are
     * kept in the backend's layout, so the loss sum(r * y) and the element
     * by element finite differences over x need no reordering */
    x = tb_to_layout(t, x, d->n, d->c, xhw, sizeof(float));
    s.r = tb_to_layout(t, s.r, d->n, d->k, yhw, sizeof(float));
    s.x_d = tb_devf(t, x, nx), s.w_d = tb_devf(t, w, nw), s.b_d = tb_devf(t, b, d->k);
    s.y_d = tb_devf(t, NULL, s.ny);
    float *r_d = tb_devf(t, s.r, s.ny), *dx_d = tb_devf(t, NULL, nx), *dw_d = tb_devf(t, NULL, nw);
    float *db_d = tb_devf(t, NULL, d->k);
    o->conv_bwd_data(t->be, d, r_d, s.w_d, dx_d, 0);
    o->conv_bwd_weight(t->be, d, s.x_d, r_d, dw_d, 0);
    o->bias_bwd(t->be, r_d, db_d, d->n, d->k, yhw, 0);
    tb_check_fd(t, "x", x, s.x_d, nx, tb_getf(t, dx_d, nx), conv_loss, &s, c->fd_h);
    tb_check_fd(t, "w", w, s.w_d, nw, tb_getf(t, dw_d, nw), conv_loss, &s, c->fd_h);
    tb_check_fd(t, "bias", b, s.b_d, d->k, tb_getf(t, db_d, d->k), conv_loss, &s, c->fd_h);
}

/* ---------------- batch norm, training mode ----------------
 * x (and res) are drawn NCHW, for the references that keep them off the
 * ReLU's kink, then held in the backend's layout on both sides (host mirror
 * and device), so the finite differences and the analytic dx / dres are
 * indexed alike; r (the loss weights, also the incoming gradient) is random,
 * so it is taken as already in the layout. */

typedef struct bn_st {
    int n, c, hw, relu;
    float *x_d, *g_d, *b_d, *y_d, *st_d, *mean_d, *inv_d, *r;
} bn_st;

static void bn_forward(tb_ctx *t, bn_st *s) {
    const sg_ops *o = t->be->ops;
    int64_t count = (int64_t)s->n * s->hw;
    o->bn_stats(t->be, s->x_d, s->n, s->c, s->hw, s->st_d);
    o->bn_finalize(t->be, s->st_d, &count, 1, s->c, 1e-5f, 0.1f, s->mean_d, s->inv_d, NULL, NULL);
    o->bn_fwd(t->be, s->x_d, s->mean_d, s->inv_d, s->g_d, s->b_d, s->y_d, s->n, s->c, s->hw,
              s->relu);
}

static double bn_loss(tb_ctx *t, void *p) {
    bn_st *s = p;
    bn_forward(t, s);
    return tb_dot_dev(t, s->r, s->y_d, (size_t)s->n * s->c * s->hw);
}

/* Data whose pre-ReLU outputs all stay >= 0.03 from zero (reference). */
static float *bn_data_away_from_kink(tb_ctx *t, int n, int c, int hw, const float *g,
                                     const float *b) {
    size_t cnt = (size_t)n * c * hw;
    float *y = tb_hzeros(t, cnt), *st = tb_hzeros(t, 2 * (size_t)c);
    float *mean = tb_hzeros(t, c), *inv = tb_hzeros(t, c);
    int64_t count = (int64_t)n * hw;
    float *x = NULL;
    for (int attempt = 0; attempt < 100; attempt++) {
        x = tb_rand(t, cnt, -2, 2);
        ref_bn_stats(x, n, c, hw, st);
        ref_bn_finalize(st, &count, 1, c, 1e-5f, 0.1f, mean, inv, NULL, NULL);
        ref_bn_fwd(x, mean, inv, g, b, y, n, c, hw, 0);
        double mn = 1e9;
        for (size_t i = 0; i < cnt; i++) mn = fmin(mn, fabs(y[i]));
        if (mn >= 0.03) break;
    }
    return x;
}

void run_grad_bn(tb_ctx *t, const tb_case *c) {
    if (!TB_HAS(t, bn_stats) || !TB_HAS(t, bn_finalize) || !TB_HAS(t, bn_fwd) ||
        !TB_HAS(t, bn_bwd_reduce) || !TB_HAS(t, bn_bwd_elem) || !TB_HAS(t, bn_param_grads))
        return;
    const sg_ops *o = t->be->ops;
    bn_st s = {c->n, c->c, c->h * c->w, c->relu, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL};
    size_t cnt = (size_t)s.n * s.c * s.hw;
    float *g = tb_rand(t, s.c, 0.5f, 1.5f), *b = tb_rand(t, s.c, -0.3f, 0.3f);
    s.r = tb_rand(t, cnt, -1, 1);
    float *x = c->relu ? bn_data_away_from_kink(t, s.n, s.c, s.hw, g, b) : tb_rand(t, cnt, -2, 2);
    x = tb_to_layout(t, x, s.n, s.c, s.hw, sizeof(float));
    s.x_d = tb_devf(t, x, cnt), s.g_d = tb_devf(t, g, s.c), s.b_d = tb_devf(t, b, s.c);
    s.y_d = tb_devf(t, NULL, cnt), s.st_d = tb_devf(t, NULL, 2 * s.c);
    s.mean_d = tb_devf(t, NULL, s.c), s.inv_d = tb_devf(t, NULL, s.c);
    float *r_d = tb_devf(t, s.r, cnt), *red_d = tb_devf(t, NULL, 2 * s.c);
    float *dx_d = tb_devf(t, NULL, cnt), *dg_d = tb_devf(t, NULL, s.c),
          *db_d = tb_devf(t, NULL, s.c);
    bn_forward(t, &s);
    o->bn_bwd_reduce(t->be, r_d, s.x_d, s.y_d, s.mean_d, red_d, s.n, s.c, s.hw, s.relu);
    o->bn_bwd_elem(t->be, r_d, s.x_d, s.y_d, s.mean_d, s.inv_d, s.g_d, red_d, (double)s.n * s.hw,
                   dx_d, s.n, s.c, s.hw, s.relu, 0);
    o->bn_param_grads(t->be, red_d, s.inv_d, dg_d, db_d, s.c, 0);
    tb_check_fd(t, "x", x, s.x_d, cnt, tb_getf(t, dx_d, cnt), bn_loss, &s, c->fd_h);
    tb_check_fd(t, "gamma", g, s.g_d, s.c, tb_getf(t, dg_d, s.c), bn_loss, &s, c->fd_h);
    tb_check_fd(t, "beta", b, s.b_d, s.c, tb_getf(t, db_d, s.c), bn_loss, &s, c->fd_h);
}

/* ---------------- batch norm fused with the residual join ----------------
 * y = relu(bn(x) + res) through bn_stats, bn_finalize, bn_add_relu_fwd;
 * backward as model_run.c runs it: bn_bwd_reduce_res (red, dres = g),
 * bn_bwd_elem on dres without ReLU, bn_param_grads. */

typedef struct bnres_st {
    bn_st bn;
    float *res_d;
} bnres_st;

static double bnres_loss(tb_ctx *t, void *p) {
    bnres_st *s = p;
    bn_st *b = &s->bn;
    const sg_ops *o = t->be->ops;
    int64_t count = (int64_t)b->n * b->hw;
    o->bn_stats(t->be, b->x_d, b->n, b->c, b->hw, b->st_d);
    o->bn_finalize(t->be, b->st_d, &count, 1, b->c, 1e-5f, 0.1f, b->mean_d, b->inv_d, NULL, NULL);
    o->bn_add_relu_fwd(t->be, b->x_d, SG_ACT_F32, b->mean_d, b->inv_d, b->g_d, b->b_d, s->res_d,
                       SG_ACT_F32, b->y_d, SG_ACT_F32, b->n, b->c, b->hw);
    return tb_dot_dev(t, b->r, b->y_d, (size_t)b->n * b->c * b->hw);
}

void run_grad_bn_res(tb_ctx *t, const tb_case *c) {
    if (!TB_HAS(t, bn_stats) || !TB_HAS(t, bn_finalize) || !TB_HAS(t, bn_add_relu_fwd) ||
        !TB_HAS(t, bn_bwd_reduce_res) || !TB_HAS(t, bn_bwd_elem) || !TB_HAS(t, bn_param_grads))
        return;
    const sg_ops *o = t->be->ops;
    bnres_st s = {{c->n, c->c, c->h * c->w, 0, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL},
                  NULL};
    bn_st *b = &s.bn;
    size_t cnt = (size_t)b->n * b->c * b->hw;
    float *g = tb_rand(t, b->c, 0.5f, 1.5f), *bt = tb_rand(t, b->c, -0.3f, 0.3f);
    b->r = tb_rand(t, cnt, -1, 1);
    float *x = tb_rand(t, cnt, -2, 2), *res = tb_hzeros(t, cnt);
    /* res keeps bn(x) + res at least 0.03 from the kink (reference) */
    {
        float *st = tb_hzeros(t, 2 * (size_t)b->c), *mean = tb_hzeros(t, b->c);
        float *inv = tb_hzeros(t, b->c), *v = tb_hzeros(t, cnt);
        int64_t count = (int64_t)b->n * b->hw;
        ref_bn_stats(x, b->n, b->c, b->hw, st);
        ref_bn_finalize(st, &count, 1, b->c, 1e-5f, 0.1f, mean, inv, NULL, NULL);
        ref_bn_fwd(x, mean, inv, g, bt, v, b->n, b->c, b->hw, 0);
        float *u = tb_rand(t, cnt, -1, 1);
        for (size_t i = 0; i < cnt; i++) {
            float want = u[i] < 0 ? u[i] - 0.03f : u[i] + 0.03f; /* bn(x) + res */
            res[i] = want - v[i];
        }
    }
    x = tb_to_layout(t, x, b->n, b->c, b->hw, sizeof(float));
    res = tb_to_layout(t, res, b->n, b->c, b->hw, sizeof(float));
    b->x_d = tb_devf(t, x, cnt), b->g_d = tb_devf(t, g, b->c), b->b_d = tb_devf(t, bt, b->c);
    b->y_d = tb_devf(t, NULL, cnt), b->st_d = tb_devf(t, NULL, 2 * b->c);
    b->mean_d = tb_devf(t, NULL, b->c), b->inv_d = tb_devf(t, NULL, b->c);
    s.res_d = tb_devf(t, res, cnt);
    float *r_d = tb_devf(t, b->r, cnt), *red_d = tb_devf(t, NULL, 2 * b->c);
    float *dx_d = tb_devf(t, NULL, cnt), *dres_d = tb_devf(t, NULL, cnt);
    float *dg_d = tb_devf(t, NULL, b->c), *db_d = tb_devf(t, NULL, b->c);
    bnres_loss(t, &s);
    o->bn_bwd_reduce_res(t->be, r_d, b->x_d, SG_ACT_F32, b->y_d, SG_ACT_F32, b->mean_d, red_d,
                         dres_d, b->n, b->c, b->hw, 0);
    o->bn_bwd_elem(t->be, dres_d, b->x_d, b->x_d, b->mean_d, b->inv_d, b->g_d, red_d,
                   (double)b->n * b->hw, dx_d, b->n, b->c, b->hw, 0, 0);
    o->bn_param_grads(t->be, red_d, b->inv_d, dg_d, db_d, b->c, 0);
    tb_check_fd(t, "x", x, b->x_d, cnt, tb_getf(t, dx_d, cnt), bnres_loss, &s, c->fd_h);
    tb_check_fd(t, "res", res, s.res_d, cnt, tb_getf(t, dres_d, cnt), bnres_loss, &s, c->fd_h);
    tb_check_fd(t, "gamma", g, b->g_d, b->c, tb_getf(t, dg_d, b->c), bnres_loss, &s, c->fd_h);
    tb_check_fd(t, "beta", bt, b->b_d, b->c, tb_getf(t, db_d, b->c), bnres_loss, &s, c->fd_h);
}

/* ---------------- elementwise ---------------- */

typedef struct elem_st {
    size_t n;
    float p;
    float *a_d, *b_d, *y_d, *r;
    uint8_t *m_d;
} elem_st;

static double relu_loss(tb_ctx *t, void *p) {
    elem_st *s = p;
    t->be->ops->relu_fwd(t->be, s->a_d, s->y_d, s->n);
    return tb_dot_dev(t, s->r, s->y_d, s->n);
}

static double add_relu_loss(tb_ctx *t, void *p) {
    elem_st *s = p;
    t->be->ops->add(t->be, s->a_d, s->b_d, s->y_d, s->n, 1);
    return tb_dot_dev(t, s->r, s->y_d, s->n);
}

static double dropout_loss(tb_ctx *t, void *p) {
    elem_st *s = p;
    t->be->ops->dropout_fwd(t->be, s->a_d, s->y_d, s->m_d, s->n, 1, 1, s->p, 12345);
    return tb_dot_dev(t, s->r, s->y_d, s->n);
}

/* Moves values within `gap` of zero away from it. */
static void away_from_zero(float *x, size_t n, float gap) {
    for (size_t i = 0; i < n; i++)
        if (fabsf(x[i]) < gap) x[i] = x[i] < 0 ? -gap - 0.01f : gap + 0.01f;
}

static elem_st elem_setup(tb_ctx *t, const tb_case *c, float **a, float **b) {
    elem_st s = {c->count, c->p, NULL, NULL, NULL, NULL, NULL};
    *a = tb_rand(t, s.n, -1, 1), *b = tb_rand(t, s.n, -1, 1);
    s.r = tb_rand(t, s.n, -1, 1);
    s.y_d = tb_devf(t, NULL, s.n);
    s.m_d = tb_dev(t, NULL, s.n);
    return s;
}

void run_grad_relu(tb_ctx *t, const tb_case *c) {
    if (!TB_HAS(t, relu_fwd) || !TB_HAS(t, relu_bwd)) return;
    float *a, *b;
    elem_st s = elem_setup(t, c, &a, &b);
    away_from_zero(a, s.n, 0.05f);
    s.a_d = tb_devf(t, a, s.n);
    float *d_d = tb_devf(t, NULL, s.n);
    t->be->ops->relu_fwd(t->be, s.a_d, s.y_d, s.n);
    t->be->ops->relu_bwd(t->be, tb_devf(t, s.r, s.n), s.y_d, d_d, s.n, 0);
    tb_check_fd(t, "x", a, s.a_d, s.n, tb_getf(t, d_d, s.n), relu_loss, &s, c->fd_h);
}

/* add with ReLU: a + b kept away from zero; the gradient is the same for
 * a and b (relu_bwd of the output). */
void run_grad_add_relu(tb_ctx *t, const tb_case *c) {
    if (!TB_HAS(t, add) || !TB_HAS(t, relu_bwd)) return;
    float *a, *b;
    elem_st s = elem_setup(t, c, &a, &b);
    for (size_t i = 0; i < s.n; i++) {
        float v = a[i] + b[i];
        if (fabsf(v) < 0.05f) b[i] += v < 0 ? -0.06f : 0.06f;
    }
    s.a_d = tb_devf(t, a, s.n), s.b_d = tb_devf(t, b, s.n);
    float *d_d = tb_devf(t, NULL, s.n);
    t->be->ops->add(t->be, s.a_d, s.b_d, s.y_d, s.n, 1);
    t->be->ops->relu_bwd(t->be, tb_devf(t, s.r, s.n), s.y_d, d_d, s.n, 0);
    float *d = tb_getf(t, d_d, s.n);
    tb_check_fd(t, "a", a, s.a_d, s.n, d, add_relu_loss, &s, c->fd_h);
    tb_check_fd(t, "b", b, s.b_d, s.n, d, add_relu_loss, &s, c->fd_h);
}

void run_grad_dropout(tb_ctx *t, const tb_case *c) {
    if (!TB_HAS(t, dropout_fwd) || !TB_HAS(t, dropout_bwd)) return;
    float *a, *b;
    elem_st s = elem_setup(t, c, &a, &b);
    s.a_d = tb_devf(t, a, s.n);
    float *d_d = tb_devf(t, NULL, s.n);
    t->be->ops->dropout_fwd(t->be, s.a_d, s.y_d, s.m_d, s.n, 1, 1, s.p, 12345);
    t->be->ops->dropout_bwd(t->be, tb_devf(t, s.r, s.n), s.m_d, d_d, s.n, s.p, 0);
    tb_check_fd(t, "x", a, s.a_d, s.n, tb_getf(t, d_d, s.n), dropout_loss, &s, c->fd_h);
}

/* ---------------- pooling, resize, concat ---------------- */

typedef struct pool_st {
    const tb_case *c;
    float *x_d, *y_d, *r;
    int32_t *idx_d;
    size_t ny;
} pool_st;

static double maxpool_loss(tb_ctx *t, void *p) {
    pool_st *s = p;
    const tb_case *c = s->c;
    t->be->ops->maxpool_fwd(t->be, s->x_d, s->y_d, s->idx_d, c->n, c->c, c->h, c->w,
                            ref_pool_out(c->h), ref_pool_out(c->w));
    return tb_dot_dev(t, s->r, s->y_d, s->ny);
}

static double avgpool_loss(tb_ctx *t, void *p) {
    pool_st *s = p;
    const tb_case *c = s->c;
    t->be->ops->avgpool_fwd(t->be, s->x_d, SG_ACT_F32, s->y_d, c->n, c->c, c->h * c->w);
    return tb_dot_dev(t, s->r, s->y_d, s->ny);
}

static double resize_loss(tb_ctx *t, void *p) {
    pool_st *s = p;
    const tb_case *c = s->c;
    t->be->ops->resize_fwd(t->be, s->x_d, s->y_d, c->n, c->c, c->h, c->w, c->oh, c->ow);
    return tb_dot_dev(t, s->r, s->y_d, s->ny);
}

static double concat_loss(tb_ctx *t, void *p) {
    pool_st *s = p;
    const tb_case *c = s->c;
    t->be->ops->concat_fwd(t->be, s->x_d, SG_ACT_F32, s->y_d, SG_ACT_F32, c->n, c->c, c->c_dst,
                           c->c_off, c->h * c->w);
    return tb_dot_dev(t, s->r, s->y_d, s->ny);
}

/* x: distinct values (no ties within 10*h), r over the ny = n * yc * yhw
 * outputs. Both are activations, kept in the backend's layout (the host
 * mirror too, so the differences step the element they name, and the
 * analytic gradient is read back in that order); yhw = 1: an [n, c] output,
 * the same bytes in every layout. */
static pool_st pool_setup(tb_ctx *t, const tb_case *c, int yc, int yhw, float **x, float **r_d) {
    size_t ny = (size_t)c->n * yc * yhw;
    pool_st s = {c, NULL, NULL, NULL, NULL, ny};
    size_t nx = (size_t)c->n * c->c * c->h * c->w;
    *x = tb_to_layout(t, tb_input(t, nx), c->n, c->c, c->h * c->w, sizeof(float));
    s.r = tb_to_layout(t, tb_rand(t, ny, -1, 1), c->n, yc, yhw, sizeof(float));
    s.x_d = tb_devf(t, *x, nx), s.y_d = tb_devf(t, NULL, ny);
    s.idx_d = tb_dev(t, NULL, ny * sizeof(int32_t));
    *r_d = tb_devf(t, s.r, ny);
    return s;
}

void run_grad_maxpool(tb_ctx *t, const tb_case *c) {
    if (!TB_HAS(t, maxpool_fwd) || !TB_HAS(t, maxpool_bwd)) return;
    int oh = ref_pool_out(c->h), ow = ref_pool_out(c->w);
    size_t nx = (size_t)c->n * c->c * c->h * c->w;
    float *x, *r_d;
    pool_st s = pool_setup(t, c, c->c, oh * ow, &x, &r_d);
    float *dx_d = tb_devf(t, NULL, nx);
    t->be->ops->maxpool_fwd(t->be, s.x_d, s.y_d, s.idx_d, c->n, c->c, c->h, c->w, oh, ow);
    t->be->ops->maxpool_bwd(t->be, r_d, s.idx_d, dx_d, c->n, c->c, c->h, c->w, oh, ow);
    tb_check_fd(t, "x", x, s.x_d, nx, tb_getf(t, dx_d, nx), maxpool_loss, &s, c->fd_h);
}

void run_grad_avgpool(tb_ctx *t, const tb_case *c) {
    if (!TB_HAS(t, avgpool_fwd) || !TB_HAS(t, avgpool_bwd)) return;
    size_t nx = (size_t)c->n * c->c * c->h * c->w;
    float *x, *r_d;
    pool_st s = pool_setup(t, c, c->c, 1, &x, &r_d);
    float *dx_d = tb_devf(t, NULL, nx);
    t->be->ops->avgpool_bwd(t->be, r_d, dx_d, c->n, c->c, c->h * c->w, 0);
    tb_check_fd(t, "x", x, s.x_d, nx, tb_getf(t, dx_d, nx), avgpool_loss, &s, c->fd_h);
}

void run_grad_resize(tb_ctx *t, const tb_case *c) {
    if (!TB_HAS(t, resize_fwd) || !TB_HAS(t, resize_bwd)) return;
    size_t nx = (size_t)c->n * c->c * c->h * c->w;
    float *x, *r_d;
    pool_st s = pool_setup(t, c, c->c, c->oh * c->ow, &x, &r_d);
    float *dx_d = tb_devf(t, NULL, nx);
    t->be->ops->resize_bwd(t->be, r_d, dx_d, c->n, c->c, c->h, c->w, c->oh, c->ow, 0);
    tb_check_fd(t, "x", x, s.x_d, nx, tb_getf(t, dx_d, nx), resize_loss, &s, c->fd_h);
}

void run_grad_concat(tb_ctx *t, const tb_case *c) {
    if (!TB_HAS(t, concat_fwd) || !TB_HAS(t, concat_bwd)) return;
    size_t nx = (size_t)c->n * c->c * c->h * c->w;
    float *x, *r_d;
    pool_st s = pool_setup(t, c, c->c_dst, c->h * c->w, &x, &r_d);
    float *dx_d = tb_devf(t, NULL, nx);
    t->be->ops->concat_bwd(t->be, r_d, dx_d, c->n, c->c, c->c_dst, c->c_off, c->h * c->w, 0);
    tb_check_fd(t, "src", x, s.x_d, nx, tb_getf(t, dx_d, nx), concat_loss, &s, c->fd_h);
}

/* ---------------- cross-entropy ---------------- */

typedef struct ce_st {
    const tb_case *c;
    float *l_d;
    uint8_t *lab_d;
} ce_st;

static double ce_loss(tb_ctx *t, void *p) {
    ce_st *s = p;
    double loss;
    int64_t valid;
    t->be->ops->ce_fwd_bwd(t->be, s->l_d, s->lab_d, s->c->n, s->c->c, s->c->h * s->c->w, 255, 1.0f,
                           NULL, &loss, &valid);
    return loss;
}

/* Labels: every 5th pixel ignored (255), the rest i % c. */
void run_grad_ce(tb_ctx *t, const tb_case *c) {
    if (!TB_HAS(t, ce_fwd_bwd)) return;
    size_t np = (size_t)c->n * c->h * c->w, nl = np * c->c;
    uint8_t *lab = tb_hbytes(t, np);
    int64_t ignored = 0;
    for (size_t i = 0; i < np; i++) {
        lab[i] = (uint8_t)(i % 5 == 4 ? 255 : i % c->c);
        ignored += lab[i] == 255;
    }
    /* the logits in the backend's layout (see pool_setup) */
    float *l = tb_to_layout(t, tb_input(t, nl), c->n, c->c, c->h * c->w, sizeof(float));
    ce_st s = {c, tb_devf(t, l, nl), tb_dev(t, lab, np)};
    float *d_d = tb_devf(t, NULL, nl);
    double loss;
    int64_t valid;
    t->be->ops->ce_fwd_bwd(t->be, s.l_d, s.lab_d, c->n, c->c, c->h * c->w, 255, 1.0f, d_d, &loss,
                           &valid);
    tb_expect(t, valid == (int64_t)np - ignored, "valid %lld, want %lld", (long long)valid,
              (long long)np - ignored);
    tb_check_fd(t, "logits", l, s.l_d, nl, tb_getf(t, d_d, nl), ce_loss, &s, c->fd_h);
}
