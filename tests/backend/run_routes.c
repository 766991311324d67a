/* tests/backend/run_routes.c - the per-channel reductions' two routes agree
 * bit for bit. The CUDA backend reduces NHWC activations whose channel count
 * is a multiple of 8 and whose pointers are 16-byte aligned by a vector
 * route (kernels/cuda/cuda_chan_reduce.cuh), others by the scalar one, and
 * promises the same sums in the same order. Each case runs its op twice on
 * the same values: from aligned buffers, and from buffers one element past
 * an aligned address (the scalar route), and compares every output byte
 * (the per-channel results and, for bn_bwd_reduce_res, dres; the
 * normalize, bn_fwd_dt, and the backward element, bn_bwd_elem_dt, have a
 * vector route too: y, dx). In NCHW and
 * on the CPU both runs take the same route: the check then holds trivially.
 * Agreement with the reference is the op's own runner's (run_bn.c,
 * run_conv.c), on the same shapes in the case table.
 */
#include <string.h>

#include "kernels/formulas/bf16.h"
#include "tests/backend/cases.h"
#include "tests/kernels/ref_ops.h"

/* One activation (NCHW host floats, stored as dt) on the device twice: at
 * an aligned address (returned) and one element past one (*shifted). */
static void *dev_two(tb_ctx *t, const float *v, int n, int c, int hw, int dt, void **shifted) {
    size_t cnt = (size_t)n * c * hw, es = dt == SG_ACT_BF16 ? 2 : 4;
    void *h = (void *)v;
    if (dt == SG_ACT_BF16) {
        uint16_t *b = tb_hbytes(t, cnt * es);
        for (size_t i = 0; i < cnt; i++) b[i] = sg_bf16_bits(v[i]);
        h = b;
    }
    void *stored = tb_to_layout(t, h, n, c, hw, es);
    void *a = tb_dev(t, stored, cnt * es);
    unsigned char *s = tb_dev(t, NULL, cnt * es + 16);
    tb_put(t, s + es, stored, cnt * es);
    *shifted = s + es;
    return a;
}

/* bn_fwd_dt (x_dt, y_dt, relu): the normalize's vector route (NHWC, c a
 * multiple of 8, aligned) against its scalar one, every output byte. */
static void run_fwd_routes(tb_ctx *t, const tb_case *c) {
    if (!TB_HAS(t, bn_fwd_dt)) return;
    const sg_ops *o = t->be->ops;
    int n = c->n, ch = c->c, hw = c->h * c->w, xdt = c->x_dt, ydt = c->y_dt;
    size_t cnt = (size_t)n * ch * hw, ys = ydt == SG_ACT_BF16 ? 2 : 4;
    tb_bn_data b = tb_bn_setup(t, c);
    void *x_s, *x_a = dev_two(t, b.x, n, ch, hw, xdt, &x_s);
    float *g0 = tb_rand(t, cnt, 5, 6);
    void *y_s, *y_a = dev_two(t, g0, n, ch, hw, ydt, &y_s);
    float *mean = tb_devf(t, b.mean, ch), *inv = tb_devf(t, b.invstd, ch);
    float *gam = tb_devf(t, b.gamma, ch), *bet = tb_devf(t, b.beta, ch);
    o->bn_fwd_dt(t->be, x_a, xdt, mean, inv, gam, bet, y_a, ydt, n, ch, hw, c->relu);
    o->bn_fwd_dt(t->be, x_s, xdt, mean, inv, gam, bet, y_s, ydt, n, ch, hw, c->relu);
    tb_same(t, "y: aligned vs shifted buffers", tb_get(t, y_a, cnt * ys), tb_get(t, y_s, cnt * ys),
            cnt * ys);
}

/* bn_bwd_elem_dt (x_dt, y_dt: bf16 = y NULL, gy_dt, gx_dt, relu, acc): the backward
 * element's vector route against its scalar one, every byte of dx. */
static void run_bwd_elem_routes(tb_ctx *t, const tb_case *c) {
    if (!TB_HAS(t, bn_bwd_elem_dt)) return;
    const sg_ops *o = t->be->ops;
    int n = c->n, ch = c->c, hw = c->h * c->w, xdt = c->x_dt;
    size_t cnt = (size_t)n * ch * hw;
    tb_bn_data b = tb_bn_setup(t, c);
    float *yv = tb_hzeros(t, cnt);
    ref_bn_fwd(b.x, b.mean, b.invstd, b.gamma, b.beta, yv, n, ch, hw, 1);
    void *x_s, *x_a = dev_two(t, b.x, n, ch, hw, xdt, &x_s);
    void *dy_s, *dy_a = dev_two(t, tb_rand(t, cnt, -1, 1), n, ch, hw, c->gy_dt, &dy_s);
    void *y_s, *y_a = dev_two(t, yv, n, ch, hw, SG_ACT_F32, &y_s);
    void *dx_s, *dx_a = dev_two(t, tb_rand(t, cnt, -1, 1), n, ch, hw, c->gx_dt, &dx_s);
    size_t gs = c->gx_dt == SG_ACT_BF16 ? 2 : 4;
    int use_y = c->y_dt != SG_ACT_BF16;
    float *mean = tb_devf(t, b.mean, ch), *inv = tb_devf(t, b.invstd, ch);
    float *gam = tb_devf(t, b.gamma, ch), *bet = tb_devf(t, b.beta, ch);
    float *red = tb_devf(t, tb_rand(t, 2 * (size_t)ch, -20, 20), 2 * (size_t)ch);
    double count = (double)n * hw;
    o->bn_bwd_elem_dt(t->be, dy_a, c->gy_dt, x_a, xdt, use_y ? y_a : NULL, mean, inv, gam, bet, red,
                      count, dx_a, c->gx_dt, n, ch, hw, c->relu, c->acc);
    o->bn_bwd_elem_dt(t->be, dy_s, c->gy_dt, x_s, xdt, use_y ? y_s : NULL, mean, inv, gam, bet, red,
                      count, dx_s, c->gx_dt, n, ch, hw, c->relu, c->acc);
    tb_same(t, "dx: aligned vs shifted buffers", tb_get(t, dx_a, cnt * gs),
            tb_get(t, dx_s, cnt * gs), cnt * gs);
}

void run_chan_routes(tb_ctx *t, const tb_case *c) {
    const sg_ops *o = t->be->ops;
    int n = c->n, ch = c->c, hw = c->h * c->w, xdt = c->x_dt, ydt = c->y_dt;
    size_t cnt = (size_t)n * ch * hw;
    int is_bias = !strcmp(c->op, "bias_bwd"), is_stats = !strcmp(c->op, "bn_stats_dt");
    int is_red = !strcmp(c->op, "bn_bwd_reduce_dt"), is_res = !strcmp(c->op, "bn_bwd_reduce_res");
    if (!strcmp(c->op, "bn_fwd_dt")) {
        run_fwd_routes(t, c);
        return;
    }
    if (!strcmp(c->op, "bn_bwd_elem_dt")) {
        run_bwd_elem_routes(t, c);
        return;
    }
    if (!tb_expect(t, is_bias || is_stats || is_red || is_res,
                   "run_chan_routes: no route check for %s", c->op))
        return;
    if ((is_bias && !TB_HAS(t, bias_bwd)) || (is_stats && !TB_HAS(t, bn_stats_dt)) ||
        (is_red && !TB_HAS(t, bn_bwd_reduce_dt)) || (is_res && !TB_HAS(t, bn_bwd_reduce_res)))
        return;
    size_t outn = is_bias ? (size_t)ch : 2 * (size_t)ch;
    float *init = tb_rand(t, outn, -1, 1);
    float *out_a = tb_devf(t, init, outn), *out_s = tb_devf(t, init, outn);
    if (is_bias) {
        void *dy_s, *dy_a = dev_two(t, tb_input(t, cnt), n, ch, hw, SG_ACT_F32, &dy_s);
        o->bias_bwd(t->be, dy_a, out_a, n, ch, hw, c->acc);
        o->bias_bwd(t->be, dy_s, out_s, n, ch, hw, c->acc);
    } else {
        tb_bn_data b = tb_bn_setup(t, c);
        void *x_s, *x_a = dev_two(t, b.x, n, ch, hw, xdt, &x_s);
        if (is_stats) {
            o->bn_stats_dt(t->be, x_a, xdt, n, ch, hw, out_a);
            o->bn_stats_dt(t->be, x_s, xdt, n, ch, hw, out_s);
        } else {
            float *mean = tb_devf(t, b.mean, ch), *inv = tb_devf(t, b.invstd, ch);
            float *gam = tb_devf(t, b.gamma, ch), *bet = tb_devf(t, b.beta, ch);
            float *yv = tb_hzeros(t, cnt);
            ref_bn_fwd(b.x, b.mean, b.invstd, b.gamma, b.beta, yv, n, ch, hw, 1);
            for (size_t i = 0; i < cnt; i++) yv[i] = sg_bf16_round(yv[i]);
            void *dy_s, *dy_a = dev_two(t, tb_rand(t, cnt, -1, 1), n, ch, hw, SG_ACT_F32, &dy_s);
            void *y_s, *y_a = dev_two(t, yv, n, ch, hw, ydt, &y_s);
            if (is_red) {
                /* dy stored as gy_dt */
                void *gy_s, *gy_a = dev_two(t, tb_rand(t, cnt, -1, 1), n, ch, hw, c->gy_dt, &gy_s);
                /* y stored as float is the mask's source; a bf16 y_dt here
                 * means y NULL: the mask recomputed from x */
                int use_y = ydt != SG_ACT_BF16;
                o->bn_bwd_reduce_dt(t->be, gy_a, c->gy_dt, x_a, xdt, use_y ? y_a : NULL, mean, inv,
                                    gam, bet, out_a, n, ch, hw, c->relu);
                o->bn_bwd_reduce_dt(t->be, gy_s, c->gy_dt, x_s, xdt, use_y ? y_s : NULL, mean, inv,
                                    gam, bet, out_s, n, ch, hw, c->relu);
            } else {
                void *dr_s,
                    *dr_a = dev_two(t, tb_rand(t, cnt, -1, 1), n, ch, hw, SG_ACT_F32, &dr_s);
                o->bn_bwd_reduce_res(t->be, dy_a, x_a, xdt, y_a, ydt, mean, out_a, dr_a, n, ch, hw,
                                     c->acc);
                o->bn_bwd_reduce_res(t->be, dy_s, x_s, xdt, y_s, ydt, mean, out_s, dr_s, n, ch, hw,
                                     c->acc);
                tb_same(t, "dres: aligned vs shifted buffers", tb_get(t, dr_a, cnt * 4),
                        tb_get(t, dr_s, cnt * 4), cnt * 4);
            }
        }
    }
    tb_same(t, "per-channel results: aligned vs shifted buffers", tb_getf(t, out_a, outn),
            tb_getf(t, out_s, outn), outn * sizeof(float));
}
