/* tests/backend/run_bn.c - runners for batch norm split the way SyncBN needs
 * it (stats, Chan merge of partial stats with running-stat update, eval
 * params, forward with fused ReLU, the two backward passes and the parameter
 * gradients; the residual join's fused forward and backward reduce),
 * against ref_ops. Inputs that come from an earlier op of the
 * chain (mean/invstd, the forward output, the reduction) are the
 * reference's, uploaded, so each case tests one op. Activations (x, y, dy,
 * dx, res, dres) travel in the backend's layout (tb_act*, tb.h); the
 * per-channel vectors as they are.
 */
#include <math.h>

#include "kernels/formulas/bf16.h"
#include "tests/backend/cases.h"
#include "tests/kernels/ref_ops.h"

#define EMPTY_PART_VALUE 1e30f /* stats of a part with count 0: must be skipped */

tb_bn_data tb_bn_setup(tb_ctx *t, const tb_case *c) {
    tb_bn_data b = {c->n, c->c, c->h * c->w, 0, NULL, NULL, NULL, NULL, NULL};
    b.cnt = (size_t)b.n * b.c * b.hw;
    b.x = tb_input(t, b.cnt);
    if (c->x_dt == SG_ACT_BF16) /* a bf16-stored input holds bf16 values */
        for (size_t i = 0; i < b.cnt; i++) b.x[i] = ref_bf16_round(b.x[i]);
    b.gamma = tb_rand(t, b.c, 0.5f, 1.5f);
    b.beta = tb_rand(t, b.c, -0.5f, 0.5f);
    float *stats = tb_hzeros(t, 2 * (size_t)b.c);
    int64_t count = (int64_t)b.n * b.hw;
    b.mean = tb_hzeros(t, b.c);
    b.invstd = tb_hzeros(t, b.c);
    ref_bn_stats(b.x, b.n, b.c, b.hw, stats);
    ref_bn_finalize(stats, &count, 1, b.c, 1e-5f, 0.1f, b.mean, b.invstd, NULL, NULL);
    return b;
}

void run_bn_stats(tb_ctx *t, const tb_case *c) {
    if (!TB_HAS(t, bn_stats)) return;
    int hw = c->h * c->w;
    size_t cnt = (size_t)c->n * c->c * hw;
    float *x = tb_input(t, cnt), *want = tb_hzeros(t, 2 * (size_t)c->c);
    ref_bn_stats(x, c->n, c->c, hw, want);
    float *x_d = tb_actf(t, x, c->n, c->c, hw);
    float *st_d = tb_devf(t, tb_rand(t, 2 * c->c, 5, 6), 2 * c->c);
    t->be->ops->bn_stats(t->be, x_d, c->n, c->c, hw, st_d);
    float *got = tb_getf(t, st_d, 2 * (size_t)c->c);
    tb_close(t, "mean", want, got, c->c, t->tol);
    tb_close(t, "M2", want + c->c, got + c->c, c->c, t->tol);
    /* Independent of the reference: uniform data of width hi-lo has variance
     * (hi-lo)^2/12 (loosely: a few hundred samples per channel). */
    double width = c->hi - c->lo, N = (double)c->n * hw;
    if (c->fill == TB_FILL_RAND && width > 0 && N >= 100)
        for (int i = 0; i < c->c; i++)
            tb_near(t, "variance of uniform data", got[c->c + i] / N, width * width / 12,
                    0.36 * width * width / 12);
    if (t->det) {
        t->be->ops->bn_stats(t->be, x_d, c->n, c->c, hw, st_d);
        tb_close_dev(t, "stats of a second call vs the first", got, st_d, 2 * (size_t)c->c, 0);
    }
}

/* Random partial statistics (mean, M2 in [0.5, 3)) merged by bn_finalize;
 * counts from the table, or (counts NULL) part p has 0 if p % 7 == 3, else
 * 10 + p values. Parts with count 0 hold EMPTY_PART_VALUE. */
void run_bn_finalize(tb_ctx *t, const tb_case *c) {
    if (!TB_HAS(t, bn_finalize)) return;
    int ch = c->c, parts = c->parts;
    int64_t *counts = tb_hbytes(t, (size_t)parts * sizeof(int64_t));
    float *ps = tb_rand(t, (size_t)parts * 2 * ch, 0.5f, 3.0f);
    for (int p = 0; p < parts; p++) {
        counts[p] = c->counts ? c->counts[p] : (p % 7 == 3 ? 0 : 10 + p);
        if (counts[p] == 0)
            for (int i = 0; i < 2 * ch; i++) ps[(size_t)p * 2 * ch + i] = EMPTY_PART_VALUE;
    }
    float *mean = tb_hzeros(t, ch), *invstd = tb_hzeros(t, ch);
    float *rm = tb_hzeros(t, ch), *rv = tb_hzeros(t, ch);
    for (int i = 0; i < ch; i++) rm[i] = 0.1f * i, rv[i] = 1.0f + 0.2f * i;
    float *ps_d = tb_devf(t, ps, (size_t)parts * 2 * ch);
    float *mean_d = tb_devf(t, NULL, ch), *invstd_d = tb_devf(t, NULL, ch);
    float *rm_d = tb_devf(t, rm, ch), *rv_d = tb_devf(t, rv, ch);
    ref_bn_finalize(ps, counts, parts, ch, c->eps, c->momentum, mean, invstd,
                    c->running ? rm : NULL, c->running ? rv : NULL);
    t->be->ops->bn_finalize(t->be, ps_d, counts, parts, ch, c->eps, c->momentum, mean_d, invstd_d,
                            c->running ? rm_d : NULL, c->running ? rv_d : NULL);
    tb_close_dev(t, "mean", mean, mean_d, ch, t->tol);
    tb_close_dev(t, "invstd", invstd, invstd_d, ch, t->tol);
    /* without running stats they must be left alone */
    tb_close_dev(t, "running_mean", rm, rm_d, ch, c->running ? t->tol : 0);
    tb_close_dev(t, "running_var", rv, rv_d, ch, c->running ? t->tol : 0);
}

/* SyncBN's path: a batch of n images split into parts of counts[p] images
 * (one may be empty), each part's stats from the backend's bn_stats, merged
 * by bn_finalize: equals the statistics of the whole batch. */
void run_bn_chan_merge(tb_ctx *t, const tb_case *c) {
    if (!TB_HAS(t, bn_stats) || !TB_HAS(t, bn_finalize)) return;
    const sg_ops *o = t->be->ops;
    int ch = c->c, hw = c->h * c->w, parts = c->parts, n = 0;
    for (int p = 0; p < parts; p++) n += (int)c->counts[p];
    size_t plane = (size_t)ch * hw;
    float *x = tb_input(t, (size_t)n * plane), *whole = tb_hzeros(t, 2 * (size_t)ch);
    ref_bn_stats(x, n, ch, hw, whole);
    /* image i starts at i*c*hw in both layouts: a part is a run of images */
    float *x_d = tb_actf(t, x, n, ch, hw);
    float *ps_d = tb_devf(t, NULL, (size_t)parts * 2 * ch);
    int64_t *counts = tb_hbytes(t, (size_t)parts * sizeof(int64_t));
    float *empty = tb_hzeros(t, 2 * (size_t)ch);
    for (int i = 0; i < 2 * ch; i++) empty[i] = EMPTY_PART_VALUE;
    for (int p = 0, off = 0; p < parts; off += (int)c->counts[p], p++) {
        counts[p] = c->counts[p] * hw;
        if (counts[p])
            o->bn_stats(t->be, x_d + (size_t)off * plane, (int)c->counts[p], ch, hw,
                        ps_d + (size_t)p * 2 * ch);
        else tb_put(t, ps_d + (size_t)p * 2 * ch, empty, 2 * ch * sizeof(float));
    }
    float *rm0 = tb_hzeros(t, ch), *rv0 = tb_hzeros(t, ch);
    for (int i = 0; i < ch; i++) rm0[i] = 0.5f * i, rv0[i] = 1.0f + i;
    float *mean_d = tb_devf(t, NULL, ch), *invstd_d = tb_devf(t, NULL, ch);
    float *rm_d = tb_devf(t, rm0, ch), *rv_d = tb_devf(t, rv0, ch);
    o->bn_finalize(t->be, ps_d, counts, parts, ch, c->eps, c->momentum, mean_d, invstd_d, rm_d,
                   rv_d);
    float *mean = tb_getf(t, mean_d, ch), *invstd = tb_getf(t, invstd_d, ch);
    float *rm = tb_getf(t, rm_d, ch), *rv = tb_getf(t, rv_d, ch);
    double N = (double)n * hw, m = c->momentum;
    for (int i = 0; i < ch; i++) {
        tb_near(t, "mean vs the whole batch", mean[i], whole[i], 1e-6);
        tb_near(t, "invstd vs the whole batch", invstd[i], 1.0 / sqrt(whole[ch + i] / N + c->eps),
                1e-5);
        tb_near(t, "running_mean", rm[i], (1 - m) * rm0[i] + m * whole[i], 1e-6);
        tb_near(t, "running_var (unbiased)", rv[i], (1 - m) * rv0[i] + m * whole[ch + i] / (N - 1),
                1e-5);
    }
    /* the reference on the same partial stats */
    float *ps = tb_getf(t, ps_d, (size_t)parts * 2 * ch);
    float *mr = tb_hzeros(t, ch), *ir = tb_hzeros(t, ch);
    ref_bn_finalize(ps, counts, parts, ch, c->eps, c->momentum, mr, ir, rm0, rv0);
    tb_close(t, "mean", mr, mean, ch, t->tol);
    tb_close(t, "invstd", ir, invstd, ch, t->tol);
    tb_close(t, "running_mean", rm0, rm, ch, t->tol);
    tb_close(t, "running_var", rv0, rv, ch, t->tol);
    /* running stats NULL: mean and invstd are still written */
    o->zero(t->be, mean_d, ch * sizeof(float));
    o->bn_finalize(t->be, ps_d, counts, parts, ch, c->eps, c->momentum, mean_d, invstd_d, NULL,
                   NULL);
    tb_close_dev(t, "mean without running stats", mr, mean_d, ch, t->tol);
}

void run_bn_eval_params(tb_ctx *t, const tb_case *c) {
    if (!TB_HAS(t, bn_eval_params)) return;
    int ch = c->c;
    float *rm = tb_rand(t, ch, -1, 1), *rv = tb_rand(t, ch, 0.5f, 2.0f);
    float *mean = tb_hzeros(t, ch), *invstd = tb_hzeros(t, ch);
    ref_bn_eval_params(rm, rv, ch, c->eps, mean, invstd);
    float *mean_d = tb_devf(t, NULL, ch), *invstd_d = tb_devf(t, NULL, ch);
    t->be->ops->bn_eval_params(t->be, tb_devf(t, rm, ch), tb_devf(t, rv, ch), ch, c->eps, mean_d,
                               invstd_d);
    tb_close_dev(t, "mean (= running_mean)", mean, mean_d, ch, 0);
    tb_close_dev(t, "invstd", invstd, invstd_d, ch, t->tol);
}

void run_bn_fwd(tb_ctx *t, const tb_case *c) {
    if (!TB_HAS(t, bn_fwd)) return;
    tb_bn_data b = tb_bn_setup(t, c);
    float *y = tb_hzeros(t, b.cnt);
    ref_bn_fwd(b.x, b.mean, b.invstd, b.gamma, b.beta, y, b.n, b.c, b.hw, c->relu);
    float *x_d = tb_actf(t, b.x, b.n, b.c, b.hw), *mean_d = tb_devf(t, b.mean, b.c);
    float *inv_d = tb_devf(t, b.invstd, b.c), *g_d = tb_devf(t, b.gamma, b.c);
    float *be_d = tb_devf(t, b.beta, b.c);
    float *y_d = tb_devf(t, tb_rand(t, b.cnt, 5, 6), b.cnt);
    t->be->ops->bn_fwd(t->be, x_d, mean_d, inv_d, g_d, be_d, y_d, b.n, b.c, b.hw, c->relu);
    float *got = tb_act_getf(t, y_d, b.n, b.c, b.hw);
    tb_close(t, "y", y, got, b.cnt, t->tol);
    if (c->relu) {
        size_t zeros = 0, negative = 0;
        for (size_t i = 0; i < b.cnt; i++) zeros += got[i] == 0.0f, negative += got[i] < 0;
        tb_expect(t, negative == 0, "relu: %zu negative outputs", negative);
        tb_expect(t, zeros > 0 && zeros < b.cnt,
                  "relu should clip some but not all outputs here (%zu of %zu)", zeros, b.cnt);
    }
    if (c->inplace) { /* y == x: the same bits as out of place */
        t->be->ops->bn_fwd(t->be, x_d, mean_d, inv_d, g_d, be_d, x_d, b.n, b.c, b.hw, c->relu);
        tb_close_act(t, "y in place vs out of place", got, x_d, b.n, b.c, b.hw, 0);
    }
}

void run_bn_bwd_reduce(tb_ctx *t, const tb_case *c) {
    if (!TB_HAS(t, bn_bwd_reduce)) return;
    tb_bn_data b = tb_bn_setup(t, c);
    float *y = tb_hzeros(t, b.cnt), *dy = tb_rand(t, b.cnt, -1, 1);
    float *red = tb_hzeros(t, 2 * (size_t)b.c);
    ref_bn_fwd(b.x, b.mean, b.invstd, b.gamma, b.beta, y, b.n, b.c, b.hw, c->relu);
    ref_bn_bwd_reduce(dy, b.x, y, b.mean, red, b.n, b.c, b.hw, c->relu);
    float *red_d = tb_devf(t, tb_rand(t, 2 * b.c, 5, 6), 2 * b.c);
    t->be->ops->bn_bwd_reduce(t->be, tb_actf(t, dy, b.n, b.c, b.hw),
                              tb_actf(t, b.x, b.n, b.c, b.hw), tb_actf(t, y, b.n, b.c, b.hw),
                              tb_devf(t, b.mean, b.c), red_d, b.n, b.c, b.hw, c->relu);
    tb_close_dev(t, "red", red, red_d, 2 * (size_t)b.c, t->tol);
}

void run_bn_bwd_elem(tb_ctx *t, const tb_case *c) {
    if (!TB_HAS(t, bn_bwd_elem)) return;
    tb_bn_data b = tb_bn_setup(t, c);
    float *y = tb_hzeros(t, b.cnt), *dy = tb_rand(t, b.cnt, -1, 1);
    float *red = tb_hzeros(t, 2 * (size_t)b.c), *dx0 = tb_rand(t, b.cnt, -1, 1);
    float *dx = tb_hcopy(t, dx0, b.cnt);
    double count = (double)b.n * b.hw;
    ref_bn_fwd(b.x, b.mean, b.invstd, b.gamma, b.beta, y, b.n, b.c, b.hw, c->relu);
    ref_bn_bwd_reduce(dy, b.x, y, b.mean, red, b.n, b.c, b.hw, c->relu);
    ref_bn_bwd_elem(dy, b.x, y, b.mean, b.invstd, b.gamma, red, count, dx, b.n, b.c, b.hw, c->relu,
                    c->acc);
    float *dx_d = tb_actf(t, dx0, b.n, b.c, b.hw);
    t->be->ops->bn_bwd_elem(t->be, tb_actf(t, dy, b.n, b.c, b.hw), tb_actf(t, b.x, b.n, b.c, b.hw),
                            tb_actf(t, y, b.n, b.c, b.hw), tb_devf(t, b.mean, b.c),
                            tb_devf(t, b.invstd, b.c), tb_devf(t, b.gamma, b.c),
                            tb_devf(t, red, 2 * b.c), count, dx_d, b.n, b.c, b.hw, c->relu, c->acc);
    tb_close_act(t, "dx", dx, dx_d, b.n, b.c, b.hw, t->tol);
}

void run_bn_param_grads(tb_ctx *t, const tb_case *c) {
    if (!TB_HAS(t, bn_param_grads)) return;
    int ch = c->c;
    float *red = tb_rand(t, 2 * ch, -20, 20), *invstd = tb_rand(t, ch, 0.5f, 2.0f);
    float *dg0 = tb_rand(t, ch, -1, 1), *db0 = tb_rand(t, ch, -1, 1);
    float *dg = tb_hcopy(t, dg0, ch), *db = tb_hcopy(t, db0, ch);
    ref_bn_param_grads(red, invstd, dg, db, ch, c->acc);
    float *dg_d = tb_devf(t, dg0, ch), *db_d = tb_devf(t, db0, ch);
    t->be->ops->bn_param_grads(t->be, tb_devf(t, red, 2 * ch), tb_devf(t, invstd, ch), dg_d, db_d,
                               ch, c->acc);
    tb_close_dev(t, "dgamma", dg, dg_d, ch, t->tol);
    tb_close_dev(t, "dbeta", db, db_d, ch, t->tol);
}

/* ---- fused with the residual join ---- */

/* Backend memory holding x as stored in dt (bf16 bits when dt is bf16:
 * tb_bn_setup drew bf16 values then), in the backend's layout. */
static void *bn_dev_x(tb_ctx *t, const tb_bn_data *b, int dt) {
    if (dt == SG_ACT_F32) return tb_actf(t, b->x, b->n, b->c, b->hw);
    uint16_t *h = tb_hbytes(t, b->cnt * sizeof(uint16_t));
    for (size_t i = 0; i < b->cnt; i++) h[i] = sg_bf16_bits(b->x[i]);
    return tb_act_dev(t, h, b->n, b->c, b->hw, sizeof(uint16_t));
}

/* The reference of y = relu(bn(x) + res): ref_bn_fwd, then ref_add. */
static float *ref_join(tb_ctx *t, const tb_bn_data *b, const float *res) {
    float *v = tb_hzeros(t, b->cnt), *y = tb_hzeros(t, b->cnt);
    ref_bn_fwd(b->x, b->mean, b->invstd, b->gamma, b->beta, v, b->n, b->c, b->hw, 0);
    ref_add(v, res, y, b->cnt, 1);
    return y;
}

/* Backend memory holding v (count values, bf16 values when dt is bf16) as
 * stored in dt, in the backend's layout. */
static void *dev_dt(tb_ctx *t, const float *v, int n, int c, int hw, int dt) {
    size_t cnt = (size_t)n * c * hw;
    if (dt != SG_ACT_BF16) return tb_actf(t, v, n, c, hw);
    uint16_t *h = tb_hbytes(t, cnt * sizeof(uint16_t));
    for (size_t i = 0; i < cnt; i++) h[i] = sg_bf16_bits(v[i]);
    return tb_act_dev(t, h, n, c, hw, sizeof(uint16_t));
}

/* An activation stored in dt, back as NCHW floats. */
static float *get_dt(tb_ctx *t, const void *dev, int n, int c, int hw, int dt) {
    if (dt != SG_ACT_BF16) return tb_act_getf(t, dev, n, c, hw);
    size_t cnt = (size_t)n * c * hw;
    const uint16_t *h = tb_act_get(t, dev, n, c, hw, sizeof(uint16_t));
    float *f = tb_hzeros(t, cnt);
    for (size_t i = 0; i < cnt; i++) f[i] = sg_bf16_to_f32(h[i]);
    return f;
}

/* Against the reference; bit for bit against the backend's unfused chain
 * (bn_fwd_dt without ReLU, then add with ReLU, rounded to bf16 when y_dt
 * says so); y == res in place gives the same bits. c->r_dt bf16: res holds
 * bf16 values, stored as bf16; c->y_dt SG_ACT_BF16 / SG_ACT_F32R: y is the
 * float32 result rounded to bf16 (RNE), stored as bf16 / float32. */
void run_bn_add_relu_fwd(tb_ctx *t, const tb_case *c) {
    if (!TB_HAS(t, bn_add_relu_fwd)) return;
    const sg_ops *o = t->be->ops;
    tb_bn_data b = tb_bn_setup(t, c);
    float *res = tb_rand(t, b.cnt, -1, 1);
    if (c->r_dt == SG_ACT_BF16)
        for (size_t i = 0; i < b.cnt; i++) res[i] = sg_bf16_round(res[i]);
    float *want = ref_join(t, &b, res);
    int rounded = c->y_dt == SG_ACT_BF16 || c->y_dt == SG_ACT_F32R;
    void *x_d = bn_dev_x(t, &b, c->x_dt);
    float *mean_d = tb_devf(t, b.mean, b.c), *inv_d = tb_devf(t, b.invstd, b.c);
    float *g_d = tb_devf(t, b.gamma, b.c), *be_d = tb_devf(t, b.beta, b.c);
    void *res_d = dev_dt(t, res, b.n, b.c, b.hw, c->r_dt);
    void *y_d = dev_dt(t, tb_rand(t, b.cnt, 5, 6), b.n, b.c, b.hw, c->y_dt);
    o->bn_add_relu_fwd(t->be, x_d, c->x_dt, mean_d, inv_d, g_d, be_d, res_d, c->r_dt, y_d, c->y_dt,
                       b.n, b.c, b.hw);
    float *got = get_dt(t, y_d, b.n, b.c, b.hw, c->y_dt);
    if (rounded) tb_close_bf16(t, "y (rounded to bf16)", want, got, NULL, b.cnt, 1, t->tol);
    else tb_close(t, "y", want, got, b.cnt, t->tol);
    size_t zeros = 0, negative = 0;
    for (size_t i = 0; i < b.cnt; i++) zeros += got[i] == 0.0f, negative += got[i] < 0;
    tb_expect(t, negative == 0, "relu: %zu negative outputs", negative);
    tb_expect(t, zeros > 0 && zeros < b.cnt,
              "relu should clip some but not all outputs here (%zu of %zu)", zeros, b.cnt);
    if (TB_HAS(t, bn_fwd_dt) && TB_HAS(t, add)) {
        float *v_d = tb_devf(t, NULL, b.cnt), *u_d = tb_devf(t, NULL, b.cnt);
        float *r32_d = tb_actf(t, res, b.n, b.c, b.hw);
        o->bn_fwd_dt(t->be, x_d, c->x_dt, mean_d, inv_d, g_d, be_d, v_d, SG_ACT_F32, b.n, b.c, b.hw,
                     0);
        o->add(t->be, v_d, r32_d, u_d, b.cnt, 1);
        float *u = tb_act_getf(t, u_d, b.n, b.c, b.hw);
        if (rounded)
            for (size_t i = 0; i < b.cnt; i++) u[i] = sg_bf16_round(u[i]);
        tb_same(t, "y vs the unfused bn_fwd + add", u, got, b.cnt * sizeof(float));
    }
    if (c->inplace && c->r_dt == (c->y_dt == SG_ACT_BF16 ? SG_ACT_BF16 : SG_ACT_F32)) {
        /* y == res */
        o->bn_add_relu_fwd(t->be, x_d, c->x_dt, mean_d, inv_d, g_d, be_d, res_d, c->r_dt, res_d,
                           c->y_dt, b.n, b.c, b.hw);
        tb_same(t, "y in place (== res) vs out of place", got,
                get_dt(t, res_d, b.n, b.c, b.hw, c->r_dt), b.cnt * sizeof(float));
    }
}

/* red and dres (g = dy masked by the join's output y; dres NULL when
 * c->inplace) against the reference; dres bit for bit the unfused
 * relu_bwd's, red within tol of the unfused bn_bwd_reduce on it; and dx
 * from bn_bwd_elem on dres without ReLU the bits of bn_bwd_elem on dy with
 * the mask from y (the shortcut model_run.c takes). */
void run_bn_bwd_reduce_res(tb_ctx *t, const tb_case *c) {
    if (!TB_HAS(t, bn_bwd_reduce_res)) return;
    const sg_ops *o = t->be->ops;
    tb_bn_data b = tb_bn_setup(t, c);
    float *res = tb_rand(t, b.cnt, -1, 1), *y = ref_join(t, &b, res);
    float *dy = tb_rand(t, b.cnt, -1, 1), *red = tb_hzeros(t, 2 * (size_t)b.c);
    float *g = tb_hzeros(t, b.cnt), *dres0 = tb_rand(t, b.cnt, -1, 1);
    float *dres = tb_hcopy(t, dres0, b.cnt);
    ref_relu_bwd(dy, y, g, b.cnt, 0);
    ref_bn_bwd_reduce(g, b.x, y, b.mean, red, b.n, b.c, b.hw, 0);
    ref_relu_bwd(dy, y, dres, b.cnt, c->acc);
    void *x_d = bn_dev_x(t, &b, c->x_dt);
    if (c->y_dt == SG_ACT_BF16) /* the join's output stored in bf16: bf16 values */
        for (size_t i = 0; i < b.cnt; i++) y[i] = sg_bf16_round(y[i]);
    float *dy_d = tb_actf(t, dy, b.n, b.c, b.hw), *y_d = tb_actf(t, y, b.n, b.c, b.hw);
    void *yst_d = dev_dt(t, y, b.n, b.c, b.hw, c->y_dt);
    float *mean_d = tb_devf(t, b.mean, b.c);
    float *red_d = tb_devf(t, tb_rand(t, 2 * b.c, 5, 6), 2 * b.c);
    float *dres_d = c->inplace ? NULL : tb_actf(t, dres0, b.n, b.c, b.hw);
    o->bn_bwd_reduce_res(t->be, dy_d, x_d, c->x_dt, yst_d, c->y_dt, mean_d, red_d, dres_d, b.n, b.c,
                         b.hw, c->acc);
    float *got_red = tb_getf(t, red_d, 2 * (size_t)b.c);
    tb_close(t, "red", red, got_red, 2 * (size_t)b.c, t->tol);
    if (dres_d) tb_close_act(t, "dres", dres, dres_d, b.n, b.c, b.hw, t->tol);
    if (!TB_HAS(t, relu_bwd) || !TB_HAS(t, bn_bwd_reduce_dt) || !TB_HAS(t, bn_bwd_elem_dt)) return;
    /* the unfused chain on the backend */
    float *gu_d = tb_devf(t, NULL, b.cnt), *redu_d = tb_devf(t, NULL, 2 * b.c);
    o->relu_bwd(t->be, dy_d, y_d, gu_d, b.cnt, 0);
    o->bn_bwd_reduce_dt(t->be, gu_d, SG_ACT_F32, x_d, c->x_dt, y_d, mean_d, NULL, NULL, NULL,
                        redu_d, b.n, b.c, b.hw, 0);
    tb_close_dev(t, "red vs the unfused relu_bwd + bn_bwd_reduce", got_red, redu_d, 2 * (size_t)b.c,
                 t->tol);
    if (!dres_d || c->acc) return;
    tb_same_act(t, "dres vs the unfused relu_bwd", tb_act_getf(t, gu_d, b.n, b.c, b.hw), dres_d,
                b.n, b.c, b.hw, sizeof(float));
    float *inv_d = tb_devf(t, b.invstd, b.c), *gam_d = tb_devf(t, b.gamma, b.c);
    float *beta_d = tb_devf(t, b.beta, b.c);
    float *dx1_d = tb_devf(t, NULL, b.cnt), *dx2_d = tb_devf(t, NULL, b.cnt);
    double count = (double)b.n * b.hw;
    o->bn_bwd_elem_dt(t->be, dres_d, SG_ACT_F32, x_d, c->x_dt, NULL, mean_d, inv_d, gam_d, beta_d,
                      red_d, count, dx1_d, SG_ACT_F32, b.n, b.c, b.hw, 0, 0);
    o->bn_bwd_elem_dt(t->be, dy_d, SG_ACT_F32, x_d, c->x_dt, y_d, mean_d, inv_d, gam_d, beta_d,
                      red_d, count, dx2_d, SG_ACT_F32, b.n, b.c, b.hw, 1, 0);
    tb_same_act(t, "dx from dres (no relu) vs from dy masked by y",
                tb_act_getf(t, dx2_d, b.n, b.c, b.hw), dx1_d, b.n, b.c, b.hw, sizeof(float));
}
