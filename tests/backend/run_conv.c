/* tests/backend/run_conv.c - runners for the convolution ops (fwd, backward
 * data, backward weight) and bias, against ref_ops. On configurations that
 * promise determinism (t->det) a second call must give the same bits. On
 * bf16 configurations (t->bf16_steps > 0) each result is compared twice:
 * with the float32 reference at the row's bf16 tolerance, and element by
 * element with the bf16-exact reference (ref_conv_*_bf16). x, y, dy and dx
 * are activations (stored in the backend's layout: tb_act_*), the weights
 * and their gradient are not.
 */
#include "tests/backend/cases.h"
#include "tests/kernels/ref_ops.h"

/* The case's geometry with oh/ow filled; 0 (a failed case) if it is empty. */
static int geometry(tb_ctx *t, const tb_case *c, sg_conv_desc *d, size_t *nx, size_t *nw,
                    size_t *ny) {
    *d = c->conv;
    if (!tb_expect(t, sg_conv_desc_init(d) == 0, "the geometry has an empty output (table error)"))
        return 0;
    *nx = (size_t)d->n * d->c * d->h * d->w;
    *nw = tb_conv_nw(d);
    *ny = (size_t)d->n * d->k * d->oh * d->ow;
    if (c->prepare && TB_HAS(t, conv_prepare)) t->be->ops->conv_prepare(t->be, d);
    return 1;
}

static float *weights(tb_ctx *t, const tb_case *c, size_t nw) {
    return c->in2 ? tb_hcopy(t, c->in2, nw) : tb_rand(t, nw, -1, 1);
}

void run_conv_fwd(tb_ctx *t, const tb_case *c) {
    sg_conv_desc d;
    size_t nx, nw, ny;
    if (!TB_HAS(t, conv_fwd) || !geometry(t, c, &d, &nx, &nw, &ny)) return;
    const sg_ops *o = t->be->ops;
    int xhw = d.h * d.w, yhw = d.oh * d.ow;
    float *x = tb_input(t, nx), *w = weights(t, c, nw), *y = tb_hzeros(t, ny);
    ref_conv_fwd(&d, x, w, y);
    float *x_d = tb_actf(t, x, d.n, d.c, xhw), *w_d = tb_devf(t, w, nw);
    float *y_d = tb_actf(t, tb_rand(t, ny, 5, 6), d.n, d.k, yhw); /* garbage: overwritten */
    o->conv_fwd(t->be, &d, x_d, w_d, y_d);
    float *got = tb_act_getf(t, y_d, d.n, d.k, yhw);
    tb_close(t, "y", y, got, ny, t->tol);
    tb_want(t, "y", got, ny);
    if (t->bf16_steps) {
        float *yb = tb_hzeros(t, ny);
        ref_conv_fwd_bf16(&d, x, w, yb);
        tb_close_bf16(t, "y (bf16-exact)", yb, got, NULL, ny, t->bf16_steps, t->bf16_slack);
    }
    /* A second call on the same geometry reuses what the first one cached. */
    o->zero(t->be, y_d, ny * sizeof(float));
    o->conv_fwd(t->be, &d, x_d, w_d, y_d);
    if (t->det) tb_close_act(t, "y of a second call vs the first", got, y_d, d.n, d.k, yhw, 0);
    else tb_close_act(t, "y of a second call", y, y_d, d.n, d.k, yhw, t->tol);
}

void run_conv_bwd_data(tb_ctx *t, const tb_case *c) {
    sg_conv_desc d;
    size_t nx, nw, ny;
    if (!TB_HAS(t, conv_bwd_data) || !geometry(t, c, &d, &nx, &nw, &ny)) return;
    const sg_ops *o = t->be->ops;
    int xhw = d.h * d.w, yhw = d.oh * d.ow;
    float *dy = tb_input(t, ny), *w = weights(t, c, nw), *dx0 = tb_rand(t, nx, -1, 1);
    float *dx = tb_hcopy(t, dx0, nx);
    ref_conv_bwd_data(&d, dy, w, dx, c->acc);
    float *dy_d = tb_actf(t, dy, d.n, d.k, yhw), *w_d = tb_devf(t, w, nw);
    float *dx_d = tb_actf(t, dx0, d.n, d.c, xhw); /* the accumulate base (or garbage) */
    o->conv_bwd_data(t->be, &d, dy_d, w_d, dx_d, c->acc);
    float *got = tb_act_getf(t, dx_d, d.n, d.c, xhw);
    tb_close(t, "dx", dx, got, nx, t->tol);
    if (t->bf16_steps) {
        float *dxb = tb_hcopy(t, dx0, nx);
        ref_conv_bwd_data_bf16(&d, dy, w, dxb, c->acc);
        tb_close_bf16(t, "dx (bf16-exact)", dxb, got, c->acc ? dx0 : NULL, nx, t->bf16_steps,
                      t->bf16_slack);
    }
    if (t->det) {
        tb_act_put(t, dx_d, dx0, d.n, d.c, xhw, sizeof(float));
        o->conv_bwd_data(t->be, &d, dy_d, w_d, dx_d, c->acc);
        tb_close_act(t, "dx of a second call vs the first", got, dx_d, d.n, d.c, xhw, 0);
    }
}

void run_conv_bwd_weight(tb_ctx *t, const tb_case *c) {
    sg_conv_desc d;
    size_t nx, nw, ny;
    if (!TB_HAS(t, conv_bwd_weight) || !geometry(t, c, &d, &nx, &nw, &ny)) return;
    const sg_ops *o = t->be->ops;
    float *x = tb_input(t, nx), *dy = tb_rand(t, ny, -1, 1), *dw0 = tb_rand(t, nw, -1, 1);
    float *dw = tb_hcopy(t, dw0, nw);
    ref_conv_bwd_weight(&d, x, dy, dw, c->acc);
    float *x_d = tb_actf(t, x, d.n, d.c, d.h * d.w), *dy_d = tb_actf(t, dy, d.n, d.k, d.oh * d.ow);
    float *dw_d = tb_devf(t, dw0, nw);
    o->conv_bwd_weight(t->be, &d, x_d, dy_d, dw_d, c->acc);
    float *got = tb_getf(t, dw_d, nw);
    tb_close(t, "dw", dw, got, nw, t->tol);
    if (t->bf16_steps) {
        float *dwb = tb_hcopy(t, dw0, nw);
        ref_conv_bwd_weight_bf16(&d, x, dy, dwb, c->acc);
        tb_close_bf16(t, "dw (bf16-exact)", dwb, got, c->acc ? dw0 : NULL, nw, t->bf16_steps,
                      t->bf16_slack);
    }
    if (t->det) {
        tb_put(t, dw_d, dw0, nw * sizeof(float));
        o->conv_bwd_weight(t->be, &d, x_d, dy_d, dw_d, c->acc);
        tb_close_dev(t, "dw of a second call vs the first", got, dw_d, nw, 0);
    }
}

void run_bias_fwd(tb_ctx *t, const tb_case *c) {
    if (!TB_HAS(t, bias_fwd)) return;
    int hw = c->h * c->w;
    size_t cnt = (size_t)c->n * c->c * hw;
    float *y0 = tb_input(t, cnt), *b = tb_rand(t, c->c, -1, 1), *y = tb_hcopy(t, y0, cnt);
    ref_bias_fwd(y, b, c->n, c->c, hw);
    float *y_d = tb_actf(t, y0, c->n, c->c, hw), *b_d = tb_devf(t, b, c->c);
    t->be->ops->bias_fwd(t->be, y_d, b_d, c->n, c->c, hw);
    tb_close_act(t, "y", y, y_d, c->n, c->c, hw, t->tol);
}

void run_bias_bwd(tb_ctx *t, const tb_case *c) {
    if (!TB_HAS(t, bias_bwd)) return;
    int hw = c->h * c->w;
    size_t cnt = (size_t)c->n * c->c * hw;
    float *dy = tb_input(t, cnt), *db0 = tb_rand(t, c->c, -1, 1), *db = tb_hcopy(t, db0, c->c);
    ref_bias_bwd(dy, db, c->n, c->c, hw, c->acc);
    float *dy_d = tb_actf(t, dy, c->n, c->c, hw), *db_d = tb_devf(t, db0, c->c);
    t->be->ops->bias_bwd(t->be, dy_d, db_d, c->n, c->c, hw, c->acc);
    tb_close_dev(t, "db", db, db_d, c->c, t->tol);
}
