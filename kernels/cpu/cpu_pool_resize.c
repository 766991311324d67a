/* kernels/cpu/cpu_pool_resize.c - max-pool 3x3/2 pad 1, global average
 * pool, bilinear resize (align_corners=False, PyTorch's CPU arithmetic) and
 * channel concat, forward and backward. Threads split (n, c) planes, so
 * backward scatters never race.
 */
#include <math.h>
#include <string.h>

#include "kernels/cpu/cpu_internal.h"

#define PAR_IF(count) if ((count) >= SG_CPU_PAR_MIN)

/* Window scan in row-major order; a strictly greater value (or a NaN)
 * replaces the current max, so the first maximum wins, as in PyTorch.
 * Padding is -inf: never selected. */
static void maxpool_fwd(sg_backend *be, const float *x, float *y, int32_t *idx, int n, int c,
                        int h, int w, int oh, int ow) {
    (void)be;
    long planes = (long)n * c;
#pragma omp parallel for schedule(static) PAR_IF((size_t)planes * h * w)
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
#pragma omp parallel for schedule(static) PAR_IF((size_t)planes * h * w)
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
#pragma omp parallel for schedule(static) PAR_IF((size_t)planes * hw)
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
#pragma omp parallel for schedule(static) PAR_IF((size_t)planes * hw)
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

/* PyTorch's linear taps for align_corners=False, computed in float as its
 * CPU kernel does: scale = in/out, src = scale*(o+0.5)-0.5 clamped at 0. */
typedef struct tap {
    int i0, i1;
    float l0, l1;
} tap;

static tap make_tap(int o, int in, int out) {
    float scale = (float)in / (float)out;
    float src = scale * ((float)o + 0.5f) - 0.5f;
    if (src < 0) src = 0;
    tap t;
    t.i0 = (int)src;
    if (t.i0 > in - 1) t.i0 = in - 1;
    t.i1 = t.i0 + (t.i0 < in - 1 ? 1 : 0);
    float l1 = src - (float)t.i0;
    t.l1 = l1 < 0 ? 0 : (l1 > 1 ? 1 : l1);
    t.l0 = 1.0f - t.l1;
    return t;
}

static void resize_fwd(sg_backend *be, const float *x, float *y, int n, int c, int h, int w,
                       int oh, int ow) {
    (void)be;
    long planes = (long)n * c;
#pragma omp parallel for schedule(static) PAR_IF((size_t)planes * oh * ow)
    for (long pl = 0; pl < planes; pl++) {
        const float *xp = x + (size_t)pl * h * w;
        float *yp = y + (size_t)pl * oh * ow;
        for (int oy = 0; oy < oh; oy++) {
            tap ty = make_tap(oy, h, oh);
            const float *r0 = xp + (size_t)ty.i0 * w, *r1 = xp + (size_t)ty.i1 * w;
            for (int ox = 0; ox < ow; ox++) {
                tap tx = make_tap(ox, w, ow);
                yp[(size_t)oy * ow + ox] = ty.l0 * (tx.l0 * r0[tx.i0] + tx.l1 * r0[tx.i1]) +
                                           ty.l1 * (tx.l0 * r1[tx.i0] + tx.l1 * r1[tx.i1]);
            }
        }
    }
}

/* Adjoint of resize_fwd: scatter each output gradient to its four taps. */
static void resize_bwd(sg_backend *be, const float *dy, float *dx, int n, int c, int h, int w,
                       int oh, int ow, int accumulate) {
    (void)be;
    long planes = (long)n * c;
#pragma omp parallel for schedule(static) PAR_IF((size_t)planes * oh * ow)
    for (long pl = 0; pl < planes; pl++) {
        float *dp = dx + (size_t)pl * h * w;
        const float *gp = dy + (size_t)pl * oh * ow;
        if (!accumulate) memset(dp, 0, (size_t)h * w * sizeof(float));
        for (int oy = 0; oy < oh; oy++) {
            tap ty = make_tap(oy, h, oh);
            float *r0 = dp + (size_t)ty.i0 * w, *r1 = dp + (size_t)ty.i1 * w;
            for (int ox = 0; ox < ow; ox++) {
                tap tx = make_tap(ox, w, ow);
                float g = gp[(size_t)oy * ow + ox];
                float g0 = g * ty.l0, g1 = g * ty.l1;
                r0[tx.i0] += g0 * tx.l0;
                r0[tx.i1] += g0 * tx.l1;
                r1[tx.i0] += g1 * tx.l0;
                r1[tx.i1] += g1 * tx.l1;
            }
        }
    }
}

static void concat_fwd(sg_backend *be, const float *src, float *dst, int n, int c_src,
                       int c_dst, int c_off, int hw) {
    (void)be;
    long planes = (long)n * c_src;
#pragma omp parallel for schedule(static) PAR_IF((size_t)planes * hw)
    for (long pl = 0; pl < planes; pl++) {
        long i = pl / c_src, ch = pl % c_src;
        memcpy(dst + ((size_t)i * c_dst + c_off + ch) * hw, src + (size_t)pl * hw,
               (size_t)hw * sizeof(float));
    }
}

static void concat_bwd(sg_backend *be, const float *dy, float *dsrc, int n, int c_src,
                       int c_dst, int c_off, int hw, int accumulate) {
    (void)be;
    long planes = (long)n * c_src;
#pragma omp parallel for schedule(static) PAR_IF((size_t)planes * hw)
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
