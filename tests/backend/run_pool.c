/* tests/backend/run_pool.c - runners for max-pool (values and argmax indices
 * bit-exact, PyTorch's first-max rule and -inf padding), global average
 * pool, bilinear resize (PyTorch's align_corners=False mapping) and concat,
 * against ref_ops.
 */
#include "kernels/formulas/bf16.h"
#include "tests/backend/cases.h"
#include "tests/kernels/ref_ops.h"

/* Known values of maxpool_fwd are its argmax indices. */
void run_maxpool_fwd(tb_ctx *t, const tb_case *c) {
    if (!TB_HAS(t, maxpool_fwd)) return;
    int oh = ref_pool_out(c->h), ow = ref_pool_out(c->w);
    size_t nx = (size_t)c->n * c->c * c->h * c->w, ny = (size_t)c->n * c->c * oh * ow;
    float *x = tb_input(t, nx), *y = tb_hzeros(t, ny);
    int32_t *idx = tb_hbytes(t, ny * sizeof(int32_t));
    ref_maxpool_fwd(x, y, idx, c->n, c->c, c->h, c->w, oh, ow);
    float *y_d = tb_devf(t, tb_rand(t, ny, 5, 6), ny);
    int32_t *idx_d = tb_dev(t, tb_rand(t, ny, 5, 6), ny * sizeof(int32_t));
    t->be->ops->maxpool_fwd(t->be, tb_actf(t, x, c->n, c->c, c->h * c->w), y_d, idx_d, c->n, c->c,
                            c->h, c->w, oh, ow);
    tb_close_act(t, "y", y, y_d, c->n, c->c, oh * ow, t->tol);
    /* idx: plane positions, stored in the activation layout (backend.h) */
    int32_t *got = tb_act_get(t, idx_d, c->n, c->c, oh * ow, sizeof(int32_t));
    tb_same(t, "argmax indices", idx, got, ny * sizeof(int32_t));
    if (c->want) {
        double *gi = tb_hbytes(t, ny * sizeof(double));
        for (size_t i = 0; i < ny; i++) gi[i] = got[i];
        tb_want_d(t, "argmax indices", gi, ny);
    }
}

/* maxpool_bwd overwrites dx (no accumulate): it starts as garbage. */
void run_maxpool_bwd(tb_ctx *t, const tb_case *c) {
    if (!TB_HAS(t, maxpool_bwd)) return;
    int oh = ref_pool_out(c->h), ow = ref_pool_out(c->w);
    size_t nx = (size_t)c->n * c->c * c->h * c->w, ny = (size_t)c->n * c->c * oh * ow;
    float *x = tb_input(t, nx), *y = tb_hzeros(t, ny), *dy = tb_rand(t, ny, -1, 1);
    float *dx = tb_hzeros(t, nx);
    int32_t *idx = tb_hbytes(t, ny * sizeof(int32_t));
    ref_maxpool_fwd(x, y, idx, c->n, c->c, c->h, c->w, oh, ow);
    ref_maxpool_bwd(dy, idx, dx, c->n, c->c, c->h, c->w, oh, ow);
    float *dx_d = tb_devf(t, tb_rand(t, nx, 5, 6), nx);
    t->be->ops->maxpool_bwd(t->be, tb_actf(t, dy, c->n, c->c, oh * ow),
                            tb_act_dev(t, idx, c->n, c->c, oh * ow, sizeof(int32_t)), dx_d, c->n,
                            c->c, c->h, c->w, oh, ow);
    tb_close_act(t, "dx", dx, dx_d, c->n, c->c, c->h * c->w, t->tol);
}

void run_avgpool_fwd(tb_ctx *t, const tb_case *c) {
    if (!TB_HAS(t, avgpool_fwd)) return;
    int hw = c->h * c->w;
    size_t nx = (size_t)c->n * c->c * hw, ny = (size_t)c->n * c->c;
    float *x = tb_input(t, nx), *y = tb_hzeros(t, ny);
    void *x_d;
    if (c->x_dt == SG_ACT_BF16) { /* x holds bf16 values, stored as bf16 bits */
        uint16_t *h = tb_hbytes(t, nx * sizeof(uint16_t));
        for (size_t i = 0; i < nx; i++) x[i] = sg_bf16_round(x[i]), h[i] = sg_bf16_bits(x[i]);
        x_d = tb_act_dev(t, h, c->n, c->c, hw, sizeof(uint16_t));
    } else {
        x_d = tb_actf(t, x, c->n, c->c, hw);
    }
    ref_avgpool_fwd(x, y, c->n, c->c, hw);
    float *y_d = tb_devf(t, tb_rand(t, ny, 5, 6), ny);
    t->be->ops->avgpool_fwd(t->be, x_d, c->x_dt, y_d, c->n, c->c, hw);
    tb_close_dev(t, "y", y, y_d, ny, t->tol);
}

void run_avgpool_bwd(tb_ctx *t, const tb_case *c) {
    if (!TB_HAS(t, avgpool_bwd)) return;
    int hw = c->h * c->w;
    size_t nx = (size_t)c->n * c->c * hw, ny = (size_t)c->n * c->c;
    float *dy = tb_input(t, ny), *dx0 = tb_rand(t, nx, -1, 1), *dx = tb_hcopy(t, dx0, nx);
    ref_avgpool_bwd(dy, dx, c->n, c->c, hw, c->acc);
    float *dx_d = tb_actf(t, dx0, c->n, c->c, hw);
    t->be->ops->avgpool_bwd(t->be, tb_devf(t, dy, ny), dx_d, c->n, c->c, hw, c->acc);
    tb_close_act(t, "dx", dx, dx_d, c->n, c->c, hw, t->tol);
}

void run_resize_fwd(tb_ctx *t, const tb_case *c) {
    if (!TB_HAS(t, resize_fwd)) return;
    size_t nx = (size_t)c->n * c->c * c->h * c->w, ny = (size_t)c->n * c->c * c->oh * c->ow;
    float *x = tb_input(t, nx), *y = tb_hzeros(t, ny);
    ref_resize_fwd(x, y, c->n, c->c, c->h, c->w, c->oh, c->ow);
    float *y_d = tb_devf(t, tb_rand(t, ny, 5, 6), ny);
    t->be->ops->resize_fwd(t->be, tb_actf(t, x, c->n, c->c, c->h * c->w), y_d, c->n, c->c, c->h,
                           c->w, c->oh, c->ow);
    float *got = tb_act_getf(t, y_d, c->n, c->c, c->oh * c->ow);
    tb_close(t, "y", y, got, ny, t->tol);
    tb_want(t, "y", got, ny);
}

void run_resize_bwd(tb_ctx *t, const tb_case *c) {
    if (!TB_HAS(t, resize_bwd)) return;
    size_t nx = (size_t)c->n * c->c * c->h * c->w, ny = (size_t)c->n * c->c * c->oh * c->ow;
    float *dy = tb_input(t, ny), *dx0 = tb_rand(t, nx, -1, 1), *dx = tb_hcopy(t, dx0, nx);
    ref_resize_bwd(dy, dx, c->n, c->c, c->h, c->w, c->oh, c->ow, c->acc);
    int hw = c->h * c->w;
    float *dy_d = tb_actf(t, dy, c->n, c->c, c->oh * c->ow),
          *dx_d = tb_actf(t, dx0, c->n, c->c, hw);
    t->be->ops->resize_bwd(t->be, dy_d, dx_d, c->n, c->c, c->h, c->w, c->oh, c->ow, c->acc);
    float *got = tb_act_getf(t, dx_d, c->n, c->c, hw);
    tb_close(t, "dx", dx, got, nx, t->tol);
    if (t->det) {
        tb_act_put(t, dx_d, dx0, c->n, c->c, hw, sizeof(float));
        t->be->ops->resize_bwd(t->be, dy_d, dx_d, c->n, c->c, c->h, c->w, c->oh, c->ow, c->acc);
        tb_close_act(t, "dx of a second call vs the first", got, dx_d, c->n, c->c, hw, 0);
    }
}

/* v (count values) as stored in dt in the backend's layout: float32, or
 * bf16 bits (v rounded to bf16 values in place first). */
static void *dev_as(tb_ctx *t, float *v, int n, int c, int hw, int dt) {
    if (dt != SG_ACT_BF16) return tb_actf(t, v, n, c, hw);
    size_t cnt = (size_t)n * c * hw;
    uint16_t *h = tb_hbytes(t, cnt * sizeof(uint16_t));
    for (size_t i = 0; i < cnt; i++) v[i] = sg_bf16_round(v[i]), h[i] = sg_bf16_bits(v[i]);
    return tb_act_dev(t, h, n, c, hw, sizeof(uint16_t));
}

/* The other channels of dst are kept; the slice back (concat_bwd) is src.
 * c->x_dt, c->y_dt: the storage of src and dst (a float32 src into a bf16
 * dst is rounded: the reference then concatenates the rounded src). */
void run_concat_fwd(tb_ctx *t, const tb_case *c) {
    if (!TB_HAS(t, concat_fwd)) return;
    int hw = c->h * c->w;
    size_t ns = (size_t)c->n * c->c * hw, nd = (size_t)c->n * c->c_dst * hw;
    float *src = tb_input(t, ns), *dst0 = tb_rand(t, nd, -1, 1);
    void *src_d = dev_as(t, src, c->n, c->c, hw, c->x_dt);
    void *dst_d = dev_as(t, dst0, c->n, c->c_dst, hw, c->y_dt);
    float *dst = tb_hcopy(t, dst0, nd), *srcr = tb_hcopy(t, src, ns);
    if (c->y_dt == SG_ACT_BF16)
        for (size_t i = 0; i < ns; i++) srcr[i] = sg_bf16_round(srcr[i]);
    ref_concat_fwd(srcr, dst, c->n, c->c, c->c_dst, c->c_off, hw);
    t->be->ops->concat_fwd(t->be, src_d, c->x_dt, dst_d, c->y_dt, c->n, c->c, c->c_dst, c->c_off,
                           hw);
    if (c->x_dt == SG_ACT_BF16 || c->y_dt == SG_ACT_BF16) {
        float *got = tb_hzeros(t, nd);
        if (c->y_dt == SG_ACT_BF16) {
            const uint16_t *h = tb_act_get(t, dst_d, c->n, c->c_dst, hw, sizeof(uint16_t));
            for (size_t i = 0; i < nd; i++) got[i] = sg_bf16_to_f32(h[i]);
        } else {
            got = tb_act_getf(t, dst_d, c->n, c->c_dst, hw);
        }
        tb_same(t, "dst (stored as its dtype)", dst, got, nd * sizeof(float));
        return;
    }
    tb_close_act(t, "dst", dst, dst_d, c->n, c->c_dst, hw, t->tol);
    if (TB_HAS(t, concat_bwd)) {
        float *back_d = tb_devf(t, tb_rand(t, ns, 5, 6), ns);
        t->be->ops->concat_bwd(t->be, dst_d, back_d, c->n, c->c, c->c_dst, c->c_off, hw, 0);
        tb_close_act(t, "concat_bwd of the concat (= src)", src, back_d, c->n, c->c, hw, 0);
    }
}

void run_concat_bwd(tb_ctx *t, const tb_case *c) {
    if (!TB_HAS(t, concat_bwd)) return;
    int hw = c->h * c->w;
    size_t ns = (size_t)c->n * c->c * hw, nd = (size_t)c->n * c->c_dst * hw;
    float *dy = tb_input(t, nd), *ds0 = tb_rand(t, ns, -1, 1), *ds = tb_hcopy(t, ds0, ns);
    ref_concat_bwd(dy, ds, c->n, c->c, c->c_dst, c->c_off, hw, c->acc);
    float *ds_d = tb_actf(t, ds0, c->n, c->c, hw);
    t->be->ops->concat_bwd(t->be, tb_actf(t, dy, c->n, c->c_dst, hw), ds_d, c->n, c->c, c->c_dst,
                           c->c_off, hw, c->acc);
    tb_close_act(t, "dsrc", ds, ds_d, c->n, c->c, hw, t->tol);
}
