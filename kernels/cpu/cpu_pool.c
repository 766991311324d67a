/* kernels/cpu/cpu_pool.c - the pooling group on the CPU (the ops of
 * tests/backend/run_pool.c; kernels/cuda/cuda_pool.cu on the GPU): max-pool
 * 3x3/2 pad 1, global average pool, bilinear resize (align_corners=False,
 * PyTorch's arithmetic: the taps and weights are kernels/formulas/bilinear.h,
 * shared with the CUDA backend) and channel concat, forward and backward.
 * Threads split (n, c) planes, so backward scatters never race.
 */
#include <math.h>
#include <string.h>

#include "kernels/cpu/cpu_internal.h"
#include "kernels/formulas/bilinear.h"

#define PAR_IF(count) if ((count) >= SG_CPU_PAR_MIN)

/* Window scan in row-major order; a strictly greater value (or a NaN)
 * replaces the current max, so the first maximum wins, as in PyTorch.
 * Padding is -inf: never selected. */
static void maxpool_fwd(sg_backend *be, const float *x, float *y, int32_t *idx, int n, int c, int h,
                        int w, int oh, int ow) {
    (void)be;
    long planes = (long)n * c;
#pragma omp parallel for schedule(static) PAR_IF((size_t)planes *h *w)
    for (long pl = 0; pl < planes; pl++) {
        const float *xp = x + (size_t)pl * h * w;
        float *yp = y + (size_t)pl * oh * ow;
        int32_t *ip = idx + (size_t)pl * oh * ow;
        for (int oy = 0; oy < oh; oy++) {
            int y0 = oy * 2 - 1, ya = y0 < 0 ? 0 : y0, yb = y0 + 3 > h ? h : y0 + 3;
            for (int ox = 0; ox < ow; ox++) {
                int x0 = ox * 2 - 1, xa = x0 < 0 ? 0 : x0, xb = x0 + 3 > w ? w : x0 + 3;
                float best = -INFINITY;
                int bi = -1;
                for (int iy = ya; iy < yb; iy++)
                    for (int ix = xa; ix < xb; ix++) {
                        float v = xp[iy * w + ix];
                        if (bi < 0 || v > best || isnan(v)) {
                            best = v;
                            bi = iy * w + ix;
                        }
                    }
                yp[oy * ow + ox] = best;
                ip[oy * ow + ox] = bi;
            }
        }
    }
}

/* Overwrites dx: zero, then each output's gradient goes to its argmax. */
static void maxpool_bwd(sg_backend *be, const float *dy, const int32_t *idx, float *dx, int n,
                        int c, int h, int w, int oh, int ow) {
    (void)be;
    long planes = (long)n * c;
#pragma omp parallel for schedule(static) PAR_IF((size_t)planes *h *w)
    for (long pl = 0; pl < planes; pl++) {
        float *dp = dx + (size_t)pl * h * w;
        const float *gp = dy + (size_t)pl * oh * ow;
        const int32_t *ip = idx + (size_t)pl * oh * ow;
        memset(dp, 0, (size_t)h * w * sizeof(float));
        for (int q = 0; q < oh * ow; q++) dp[ip[q]] += gp[q];
    }
}

static void avgpool_fwd(sg_backend *be, const float *x, float *y, int n, int c, int hw) {
    (void)be;
    long planes = (long)n * c;
#pragma omp parallel for schedule(static) PAR_IF((size_t)planes *hw)
    for (long pl = 0; pl < planes; pl++) {
        const float *p = x + (size_t)pl * hw;
        double s = 0;
#pragma omp simd reduction(+ : s)
        for (int q = 0; q < hw; q++) s += p[q];
        y[pl] = (float)(s / hw);
    }
}

static void avgpool_bwd(sg_backend *be, const float *dy, float *dx, int n, int c, int hw,
                        int accumulate) {
    (void)be;
    long planes = (long)n * c;
#pragma omp parallel for schedule(static) PAR_IF((size_t)planes *hw)
    for (long pl = 0; pl < planes; pl++) {
        float g = (float)((double)dy[pl] / hw);
        float *p = dx + (size_t)pl * hw;
        if (accumulate) {
#pragma omp simd
            for (int q = 0; q < hw; q++) p[q] += g;
        } else {
#pragma omp simd
            for (int q = 0; q < hw; q++) p[q] = g;
        }
    }
}

static void resize_fwd(sg_backend *be, const float *x, float *y, int n, int c, int h, int w, int oh,
                       int ow) {
    (void)be;
    long planes = (long)n * c;
    float sh = sg_bilinear_scale(h, oh), sw = sg_bilinear_scale(w, ow);
#pragma omp parallel for schedule(static) PAR_IF((size_t)planes *oh *ow)
    for (long pl = 0; pl < planes; pl++) {
        const float *xp = x + (size_t)pl * h * w;
        float *yp = y + (size_t)pl * oh * ow;
        for (int oy = 0; oy < oh; oy++) {
            sg_bilinear_tap ty = sg_bilinear_tap_of(oy, sh, h);
            const float *r0 = xp + (size_t)ty.i0 * w, *r1 = xp + (size_t)ty.i1 * w;
            for (int ox = 0; ox < ow; ox++) {
                sg_bilinear_tap tx = sg_bilinear_tap_of(ox, sw, w);
                yp[(size_t)oy * ow + ox] =
                    sg_bilinear_value(ty, tx, r0[tx.i0], r0[tx.i1], r1[tx.i0], r1[tx.i1]);
            }
        }
    }
}

/* Adjoint of resize_fwd: scatter each output gradient to its four taps, in
 * the order formulas/bilinear.h states (the CUDA backend's gather adds the
 * same shares in the same order). */
static void resize_bwd(sg_backend *be, const float *dy, float *dx, int n, int c, int h, int w,
                       int oh, int ow, int accumulate) {
    (void)be;
    long planes = (long)n * c;
    float sh = sg_bilinear_scale(h, oh), sw = sg_bilinear_scale(w, ow);
#pragma omp parallel for schedule(static) PAR_IF((size_t)planes *oh *ow)
    for (long pl = 0; pl < planes; pl++) {
        float *dp = dx + (size_t)pl * h * w;
        const float *gp = dy + (size_t)pl * oh * ow;
        if (!accumulate) memset(dp, 0, (size_t)h * w * sizeof(float));
        for (int oy = 0; oy < oh; oy++) {
            sg_bilinear_tap ty = sg_bilinear_tap_of(oy, sh, h);
            float *r0 = dp + (size_t)ty.i0 * w, *r1 = dp + (size_t)ty.i1 * w;
            for (int ox = 0; ox < ow; ox++) {
                sg_bilinear_tap tx = sg_bilinear_tap_of(ox, sw, w);
                float g = gp[(size_t)oy * ow + ox];
                r0[tx.i0] += sg_bilinear_share(g, ty.l0, tx.l0);
                r0[tx.i1] += sg_bilinear_share(g, ty.l0, tx.l1);
                r1[tx.i0] += sg_bilinear_share(g, ty.l1, tx.l0);
                r1[tx.i1] += sg_bilinear_share(g, ty.l1, tx.l1);
            }
        }
    }
}

static void concat_fwd(sg_backend *be, const float *src, float *dst, int n, int c_src, int c_dst,
                       int c_off, int hw) {
    (void)be;
    long planes = (long)n * c_src;
#pragma omp parallel for schedule(static) PAR_IF((size_t)planes *hw)
    for (long pl = 0; pl < planes; pl++) {
        long i = pl / c_src, ch = pl % c_src;
        memcpy(dst + ((size_t)i * c_dst + c_off + ch) * hw, src + (size_t)pl * hw,
               (size_t)hw * sizeof(float));
    }
}

static void concat_bwd(sg_backend *be, const float *dy, float *dsrc, int n, int c_src, int c_dst,
                       int c_off, int hw, int accumulate) {
    (void)be;
    long planes = (long)n * c_src;
#pragma omp parallel for schedule(static) PAR_IF((size_t)planes *hw)
    for (long pl = 0; pl < planes; pl++) {
        long i = pl / c_src, ch = pl % c_src;
        const float *g = dy + ((size_t)i * c_dst + c_off + ch) * hw;
        float *d = dsrc + (size_t)pl * hw;
        if (accumulate) {
#pragma omp simd
            for (int q = 0; q < hw; q++) d[q] += g[q];
        } else {
            memcpy(d, g, (size_t)hw * sizeof(float));
        }
    }
}

void sg_cpu_fill_pool_ops(sg_ops *ops) {
    ops->maxpool_fwd = maxpool_fwd;
    ops->maxpool_bwd = maxpool_bwd;
    ops->avgpool_fwd = avgpool_fwd;
    ops->avgpool_bwd = avgpool_bwd;
    ops->resize_fwd = resize_fwd;
    ops->resize_bwd = resize_bwd;
    ops->concat_fwd = concat_fwd;
    ops->concat_bwd = concat_bwd;
}
