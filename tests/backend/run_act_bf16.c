/* tests/backend/run_act_bf16.c - runners for the bf16 activation storage
 * ops (the *_dt ops of kernels/backend.h): conv_fwd_dt, conv_bwd_weight_dt,
 * bn_stats_dt, bn_fwd_dt, bn_bwd_reduce_dt, bn_bwd_elem_dt, with x / y
 * stored as the row says (x_dt, y_dt: SG_ACT_F32 | SG_ACT_BF16; for the BN
 * backward ops y_dt bf16 means y NULL: the ReLU mask is recomputed), and
 * the backward ops' gradients dy / dx stored as gy_dt / gx_dt (bf16
 * gradients: a bf16 dx is the float32 result rounded once).
 *
 * Inputs that are stored in bf16 are drawn, then rounded to bf16 values, so
 * every check sees the same numbers. Each result is checked three ways:
 *  - against the float32 naive reference (ref_ops) at the row's tolerance
 *    (a bf16-stored result is a rounded one: the rows say by how much);
 *  - on configurations that promise determinism (t->det), bit for bit
 *    against the backend's own float32 op on the same values (its result
 *    rounded to bf16 on the host where the *_dt op stores bf16): the
 *    contract that bf16 storage changes memory, not results;
 *  - on bf16 configurations, conv results against the bf16-exact reference
 *    (ref_conv_*_bf16) as in run_conv.c.
 */
#include <string.h>

#include "kernels/formulas/bf16.h"
#include "tests/backend/cases.h"
#include "tests/kernels/ref_ops.h"

/* v rounded to bf16 values in place (when dt is bf16). */
static void round_if(float *v, size_t n, int dt) {
    if (dt == SG_ACT_BF16)
        for (size_t i = 0; i < n; i++) v[i] = ref_bf16_round(v[i]);
}

/* The conv runners' activations: the NCHW host floats v of an [n, ch, hw]
 * tensor in the backend's layout, stored in dt. */
static void *conv_act(tb_ctx *t, const float *v, int n, int ch, int hw, int dt) {
    size_t cnt = (size_t)n * ch * hw;
    if (dt == SG_ACT_F32) return tb_actf(t, v, n, ch, hw);
    uint16_t *b = tb_hbytes(t, cnt * sizeof(uint16_t));
    for (size_t i = 0; i < cnt; i++) b[i] = sg_bf16_bits(v[i]);
    return tb_act_dev(t, b, n, ch, hw, sizeof(uint16_t));
}

/* The floats of an [n, ch, hw] activation stored at dev in dt, downloaded
 * into NCHW. */
static float *conv_get_act(tb_ctx *t, const void *dev, int n, int ch, int hw, int dt) {
    if (dt == SG_ACT_F32) return tb_act_getf(t, dev, n, ch, hw);
    size_t cnt = (size_t)n * ch * hw;
    const uint16_t *b = tb_act_get(t, dev, n, ch, hw, sizeof(uint16_t));
    float *v = tb_hzeros(t, cnt);
    for (size_t i = 0; i < cnt; i++) v[i] = sg_bf16_to_f32(b[i]);
    return v;
}

/* got must equal the float32 op's result f (rounded to bf16 if dt is). */
static void same_as_f32(tb_ctx *t, const char *what, const float *got, float *f, size_t n, int dt) {
    round_if(f, n, dt);
    if (t->det) tb_same(t, what, f, got, n * sizeof(float));
    else tb_close(t, what, f, got, n, t->tol);
}

static int conv_geometry(tb_ctx *t, const tb_case *c, sg_conv_desc *d, size_t *nx, size_t *nw,
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

void run_conv_fwd_dt(tb_ctx *t, const tb_case *c) {
    sg_conv_desc d;
    size_t nx, nw, ny;
    if (!TB_HAS(t, conv_fwd_dt) || !conv_geometry(t, c, &d, &nx, &nw, &ny)) return;
    const sg_ops *o = t->be->ops;
    int xhw = d.h * d.w, yhw = d.oh * d.ow;
    float *x = tb_input(t, nx), *w = tb_rand(t, nw, -1, 1), *y = tb_hzeros(t, ny);
    round_if(x, nx, c->x_dt);
    ref_conv_fwd(&d, x, w, y);
    float *w_d = tb_devf(t, w, nw);
    float *garbage = tb_rand(t, ny, 5, 6); /* results must overwrite it */
    round_if(garbage, ny, c->y_dt);
    void *x_d = conv_act(t, x, d.n, d.c, xhw, c->x_dt);
    void *y_d = conv_act(t, garbage, d.n, d.k, yhw, c->y_dt);
    o->conv_fwd_dt(t->be, &d, x_d, c->x_dt, w_d, y_d, c->y_dt);
    float *got = conv_get_act(t, y_d, d.n, d.k, yhw, c->y_dt);
    tb_close(t, "y", y, got, ny, t->tol);
    float *yf_d = tb_actf(t, NULL, d.n, d.k, yhw);
    o->conv_fwd(t->be, &d, tb_actf(t, x, d.n, d.c, xhw), w_d, yf_d);
    same_as_f32(t, "y vs conv_fwd on the same values", got, tb_act_getf(t, yf_d, d.n, d.k, yhw), ny,
                c->y_dt);
    if (t->bf16_steps) {
        float *yb = tb_hzeros(t, ny);
        ref_conv_fwd_bf16(&d, x, w, yb);
        tb_close_bf16(t, "y (bf16-exact)", yb, got, NULL, ny, t->bf16_steps, t->bf16_slack);
    }
}

void run_conv_bwd_weight_dt(tb_ctx *t, const tb_case *c) {
    sg_conv_desc d;
    size_t nx, nw, ny;
    if (!TB_HAS(t, conv_bwd_weight_dt) || !conv_geometry(t, c, &d, &nx, &nw, &ny)) return;
    const sg_ops *o = t->be->ops;
    float *x = tb_input(t, nx), *dy = tb_rand(t, ny, -1, 1), *dw0 = tb_rand(t, nw, -1, 1);
    round_if(x, nx, c->x_dt);
    round_if(dy, ny, c->gy_dt);
    float *dw = tb_hcopy(t, dw0, nw);
    ref_conv_bwd_weight(&d, x, dy, dw, c->acc);
    int xhw = d.h * d.w, yhw = d.oh * d.ow;
    float *dy_d = tb_actf(t, dy, d.n, d.k, yhw), *dw_d = tb_devf(t, dw0, nw);
    o->conv_bwd_weight_dt(t->be, &d, conv_act(t, x, d.n, d.c, xhw, c->x_dt), c->x_dt,
                          conv_act(t, dy, d.n, d.k, yhw, c->gy_dt), c->gy_dt, dw_d, c->acc);
    float *got = tb_getf(t, dw_d, nw);
    tb_close(t, "dw", dw, got, nw, t->tol);
    float *dwf_d = tb_devf(t, dw0, nw);
    o->conv_bwd_weight(t->be, &d, tb_actf(t, x, d.n, d.c, xhw), dy_d, dwf_d, c->acc);
    same_as_f32(t, "dw vs conv_bwd_weight on the same values", got, tb_getf(t, dwf_d, nw), nw,
                SG_ACT_F32);
    if (t->bf16_steps) {
        float *dwb = tb_hcopy(t, dw0, nw);
        ref_conv_bwd_weight_bf16(&d, x, dy, dwb, c->acc);
        tb_close_bf16(t, "dw (bf16-exact)", dwb, got, c->acc ? dw0 : NULL, nw, t->bf16_steps,
                      t->bf16_slack);
    }
}

/* conv_bwd_dt: both gradients against the references, and the same as
 * conv_bwd_weight_dt then conv_bwd_data on float32 copies (bit for bit on a
 * deterministic backend; a bf16 dx: rounded), and as conv_bwd_dt's single
 * passes (dw NULL, dx NULL). acc is both passes' accumulate. */
void run_conv_bwd_dt(tb_ctx *t, const tb_case *c) {
    sg_conv_desc d;
    size_t nx, nw, ny;
    if (!TB_HAS(t, conv_bwd_dt) || !conv_geometry(t, c, &d, &nx, &nw, &ny)) return;
    const sg_ops *o = t->be->ops;
    int xhw = d.h * d.w;
    float *x = tb_input(t, nx), *dy = tb_rand(t, ny, -1, 1), *w = tb_rand(t, nw, -1, 1);
    float *dw0 = tb_rand(t, nw, -1, 1), *dx0 = tb_rand(t, nx, -1, 1);
    round_if(x, nx, c->x_dt);
    round_if(dy, ny, c->gy_dt);
    round_if(dx0, nx, c->gx_dt);
    float *dw = tb_hcopy(t, dw0, nw), *dx = tb_hcopy(t, dx0, nx);
    ref_conv_bwd_weight(&d, x, dy, dw, c->acc);
    ref_conv_bwd_data(&d, dy, w, dx, c->acc);
    int yhw = d.oh * d.ow;
    void *x_d = conv_act(t, x, d.n, d.c, xhw, c->x_dt);
    void *dyg_d = conv_act(t, dy, d.n, d.k, yhw, c->gy_dt);
    float *dy_d = tb_actf(t, dy, d.n, d.k, yhw), *w_d = tb_devf(t, w, nw);
    float *dw_d = tb_devf(t, dw0, nw);
    void *dx_d = conv_act(t, dx0, d.n, d.c, xhw, c->gx_dt);
    o->conv_bwd_dt(t->be, &d, x_d, c->x_dt, dyg_d, c->gy_dt, w_d, dw_d, c->acc, dx_d, c->gx_dt,
                   c->acc);
    float *gw = tb_getf(t, dw_d, nw), *gx = conv_get_act(t, dx_d, d.n, d.c, xhw, c->gx_dt);
    tb_close(t, "dw", dw, gw, nw, t->tol);
    tb_close(t, "dx", dx, gx, nx, t->tol);
    float *dw2_d = tb_devf(t, dw0, nw), *dx2_d = tb_actf(t, dx0, d.n, d.c, xhw);
    o->conv_bwd_weight_dt(t->be, &d, x_d, c->x_dt, dy_d, SG_ACT_F32, dw2_d, c->acc);
    o->conv_bwd_data(t->be, &d, dy_d, w_d, dx2_d, c->acc);
    same_as_f32(t, "dw vs conv_bwd_weight_dt", gw, tb_getf(t, dw2_d, nw), nw, SG_ACT_F32);
    same_as_f32(t, "dx vs conv_bwd_data", gx, tb_act_getf(t, dx2_d, d.n, d.c, xhw), nx, c->gx_dt);
    /* one pass at a time: dw NULL (backward-data only), dx NULL */
    float *dw3_d = tb_devf(t, dw0, nw);
    void *dx3_d = conv_act(t, dx0, d.n, d.c, xhw, c->gx_dt);
    o->conv_bwd_dt(t->be, &d, x_d, c->x_dt, dyg_d, c->gy_dt, w_d, NULL, 0, dx3_d, c->gx_dt, c->acc);
    o->conv_bwd_dt(t->be, &d, x_d, c->x_dt, dyg_d, c->gy_dt, w_d, dw3_d, c->acc, NULL, c->gx_dt, 0);
    same_as_f32(t, "dw vs conv_bwd_dt with dx NULL", gw, tb_getf(t, dw3_d, nw), nw, SG_ACT_F32);
    same_as_f32(t, "dx vs conv_bwd_dt with dw NULL", gx,
                conv_get_act(t, dx3_d, d.n, d.c, xhw, c->gx_dt), nx, SG_ACT_F32);
}

/* ---- BN: x, y, dy and dx are activations, in the backend's layout ---- */

/* dev_act in the backend's layout: host floats v (NCHW [n, c, hw]; bf16
 * values when dt is bf16) as stored in dt. */
static void *bn_dev_act(tb_ctx *t, const float *v, const tb_bn_data *b, int dt) {
    if (dt == SG_ACT_F32) return tb_actf(t, v, b->n, b->c, b->hw);
    uint16_t *h = tb_hbytes(t, b->cnt * sizeof(uint16_t));
    for (size_t i = 0; i < b->cnt; i++) h[i] = sg_bf16_bits(v[i]);
    return tb_act_dev(t, h, b->n, b->c, b->hw, sizeof(uint16_t));
}

/* Garbage of the right storage (results must overwrite it). */
static void *bn_dev_garbage(tb_ctx *t, const tb_bn_data *b, int dt) {
    float *g = tb_rand(t, b->cnt, 5, 6);
    round_if(g, b->cnt, dt);
    return bn_dev_act(t, g, b, dt);
}

/* get_act in the backend's layout: the floats stored at dev in dt, NCHW. */
static float *bn_get_act(tb_ctx *t, const void *dev, const tb_bn_data *b, int dt) {
    if (dt == SG_ACT_F32) return tb_act_getf(t, dev, b->n, b->c, b->hw);
    const uint16_t *h = tb_act_get(t, dev, b->n, b->c, b->hw, sizeof(uint16_t));
    float *v = tb_hzeros(t, b->cnt);
    for (size_t i = 0; i < b->cnt; i++) v[i] = sg_bf16_to_f32(h[i]);
    return v;
}

void run_bn_stats_dt(tb_ctx *t, const tb_case *c) {
    if (!TB_HAS(t, bn_stats_dt)) return;
    tb_bn_data b = tb_bn_setup(t, c);
    const sg_ops *o = t->be->ops;
    float *want = tb_hzeros(t, 2 * (size_t)b.c);
    ref_bn_stats(b.x, b.n, b.c, b.hw, want);
    float *st_d = tb_devf(t, tb_rand(t, 2 * b.c, 5, 6), 2 * b.c);
    o->bn_stats_dt(t->be, bn_dev_act(t, b.x, &b, c->x_dt), c->x_dt, b.n, b.c, b.hw, st_d);
    float *got = tb_getf(t, st_d, 2 * (size_t)b.c);
    tb_close(t, "mean", want, got, b.c, t->tol);
    tb_close(t, "M2", want + b.c, got + b.c, b.c, t->tol);
    float *sf_d = tb_devf(t, NULL, 2 * b.c);
    o->bn_stats(t->be, tb_actf(t, b.x, b.n, b.c, b.hw), b.n, b.c, b.hw, sf_d);
    same_as_f32(t, "stats vs bn_stats on the same values", got, tb_getf(t, sf_d, 2 * b.c),
                2 * (size_t)b.c, SG_ACT_F32);
}

void run_bn_fwd_dt(tb_ctx *t, const tb_case *c) {
    if (!TB_HAS(t, bn_fwd_dt)) return;
    tb_bn_data b = tb_bn_setup(t, c);
    const sg_ops *o = t->be->ops;
    float *y = tb_hzeros(t, b.cnt);
    ref_bn_fwd(b.x, b.mean, b.invstd, b.gamma, b.beta, y, b.n, b.c, b.hw, c->relu);
    float *mean_d = tb_devf(t, b.mean, b.c), *inv_d = tb_devf(t, b.invstd, b.c);
    float *g_d = tb_devf(t, b.gamma, b.c), *be_d = tb_devf(t, b.beta, b.c);
    void *y_d = bn_dev_garbage(t, &b, c->y_dt);
    o->bn_fwd_dt(t->be, bn_dev_act(t, b.x, &b, c->x_dt), c->x_dt, mean_d, inv_d, g_d, be_d, y_d,
                 c->y_dt, b.n, b.c, b.hw, c->relu);
    float *got = bn_get_act(t, y_d, &b, c->y_dt);
    tb_close(t, "y", y, got, b.cnt, t->tol);
    float *yf_d = tb_devf(t, NULL, b.cnt);
    o->bn_fwd(t->be, tb_actf(t, b.x, b.n, b.c, b.hw), mean_d, inv_d, g_d, be_d, yf_d, b.n, b.c,
              b.hw, c->relu);
    same_as_f32(t, "y vs bn_fwd on the same values", got, tb_act_getf(t, yf_d, b.n, b.c, b.hw),
                b.cnt, c->y_dt);
}

/* The backward inputs of one case: dy, the reference's y (its float32
 * output), red of the reference. */
typedef struct bn_bwd_data {
    tb_bn_data b;
    float *y, *dy, *red;
    void *x_d;
    float *y_d, *mean_d, *inv_d, *g_d, *beta_d, *dy_d; /* y_d NULL: y stored in bf16 */
    void *dyg_d;                                       /* dy stored as c->gy_dt */
} bn_bwd_data;

static bn_bwd_data bn_bwd_setup(tb_ctx *t, const tb_case *c) {
    bn_bwd_data s;
    s.b = tb_bn_setup(t, c);
    tb_bn_data *b = &s.b;
    s.y = tb_hzeros(t, b->cnt);
    s.dy = tb_rand(t, b->cnt, -1, 1);
    round_if(s.dy, b->cnt, c->gy_dt);
    s.red = tb_hzeros(t, 2 * (size_t)b->c);
    ref_bn_fwd(b->x, b->mean, b->invstd, b->gamma, b->beta, s.y, b->n, b->c, b->hw, c->relu);
    ref_bn_bwd_reduce(s.dy, b->x, s.y, b->mean, s.red, b->n, b->c, b->hw, c->relu);
    s.x_d = bn_dev_act(t, b->x, b, c->x_dt);
    s.mean_d = tb_devf(t, b->mean, b->c);
    s.inv_d = tb_devf(t, b->invstd, b->c);
    s.g_d = tb_devf(t, b->gamma, b->c);
    s.beta_d = tb_devf(t, b->beta, b->c);
    s.dy_d = tb_actf(t, s.dy, b->n, b->c, b->hw);
    s.dyg_d = c->gy_dt == SG_ACT_F32 ? s.dy_d : bn_dev_act(t, s.dy, b, c->gy_dt);
    s.y_d = c->y_dt == SG_ACT_F32 ? tb_actf(t, s.y, b->n, b->c, b->hw) : NULL;
    return s;
}

/* The backend's own float32 forward output (what the float32 model path
 * keeps for the mask). */
static float *f32_forward(tb_ctx *t, const tb_case *c, bn_bwd_data *s, float *x_f) {
    float *yf_d = tb_devf(t, NULL, s->b.cnt);
    t->be->ops->bn_fwd(t->be, x_f, s->mean_d, s->inv_d, s->g_d, s->beta_d, yf_d, s->b.n, s->b.c,
                       s->b.hw, c->relu);
    return yf_d;
}

void run_bn_bwd_reduce_dt(tb_ctx *t, const tb_case *c) {
    if (!TB_HAS(t, bn_bwd_reduce_dt)) return;
    bn_bwd_data s = bn_bwd_setup(t, c);
    tb_bn_data *b = &s.b;
    const sg_ops *o = t->be->ops;
    float *red_d = tb_devf(t, tb_rand(t, 2 * b->c, 5, 6), 2 * b->c);
    o->bn_bwd_reduce_dt(t->be, s.dyg_d, c->gy_dt, s.x_d, c->x_dt, s.y_d, s.mean_d, s.inv_d, s.g_d,
                        s.beta_d, red_d, b->n, b->c, b->hw, c->relu);
    float *got = tb_getf(t, red_d, 2 * (size_t)b->c);
    tb_close(t, "red", s.red, got, 2 * (size_t)b->c, t->tol);
    float *x_f = tb_actf(t, b->x, b->n, b->c, b->hw);
    float *yf_d = s.y_d ? s.y_d : f32_forward(t, c, &s, x_f);
    float *rf_d = tb_devf(t, NULL, 2 * b->c);
    o->bn_bwd_reduce(t->be, s.dy_d, x_f, yf_d, s.mean_d, rf_d, b->n, b->c, b->hw, c->relu);
    same_as_f32(t, "red vs bn_bwd_reduce on the same values", got, tb_getf(t, rf_d, 2 * b->c),
                2 * (size_t)b->c, SG_ACT_F32);
}

void run_bn_bwd_elem_dt(tb_ctx *t, const tb_case *c) {
    if (!TB_HAS(t, bn_bwd_elem_dt)) return;
    bn_bwd_data s = bn_bwd_setup(t, c);
    tb_bn_data *b = &s.b;
    const sg_ops *o = t->be->ops;
    double count = (double)b->n * b->hw;
    float *dx0 = tb_rand(t, b->cnt, -1, 1);
    round_if(dx0, b->cnt, c->gx_dt);
    float *dx = tb_hcopy(t, dx0, b->cnt);
    ref_bn_bwd_elem(s.dy, b->x, s.y, b->mean, b->invstd, b->gamma, s.red, count, dx, b->n, b->c,
                    b->hw, c->relu, c->acc);
    float *red_d = tb_devf(t, s.red, 2 * b->c);
    void *dx_d = bn_dev_act(t, dx0, b, c->gx_dt);
    o->bn_bwd_elem_dt(t->be, s.dyg_d, c->gy_dt, s.x_d, c->x_dt, s.y_d, s.mean_d, s.inv_d, s.g_d,
                      s.beta_d, red_d, count, dx_d, c->gx_dt, b->n, b->c, b->hw, c->relu, c->acc);
    float *got = bn_get_act(t, dx_d, b, c->gx_dt);
    tb_close(t, "dx", dx, got, b->cnt, t->tol);
    float *x_f = tb_actf(t, b->x, b->n, b->c, b->hw);
    float *yf_d = s.y_d ? s.y_d : f32_forward(t, c, &s, x_f);
    float *dxf_d = tb_actf(t, dx0, b->n, b->c, b->hw);
    o->bn_bwd_elem(t->be, s.dy_d, x_f, yf_d, s.mean_d, s.inv_d, s.g_d, red_d, count, dxf_d, b->n,
                   b->c, b->hw, c->relu, c->acc);
    same_as_f32(t, "dx vs bn_bwd_elem on the same values", got,
                tb_act_getf(t, dxf_d, b->n, b->c, b->hw), b->cnt, c->gx_dt);
}
