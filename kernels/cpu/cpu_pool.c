/* kernels/cpu/cpu_pool.c - the pooling group on the CPU (the ops of
 * tests/backend/run_pool.c; kernels/cuda/cuda_pool.cu on the GPU): max-pool
 * 3x3/2 pad 1, global average pool, bilinear resize (align_corners=False,
 * PyTorch's arithmetic: the taps and weights are kernels/formulas/bilinear.h,
 * shared with the CUDA backend) and channel concat, forward and backward.
 * NCHW: threads split (n, c) planes, so backward scatters never race.
 * NHWC (be->layout): channels innermost, the channel loops vectorize; threads
 * split output rows (forward) or input rows (backward: each task gathers the
 * contributions to its own rows, in the order the NCHW scatter adds them, so
 * both layouts give the same bits). With c == 1 or one pixel the two layouts
 * are the same bytes and the NCHW code runs.
 */
#include <math.h>
#include <string.h>

#include "core/log.h"
#include "kernels/cpu/cpu_internal.h"
#include "kernels/formulas/bf16.h"
#include "kernels/formulas/bilinear.h"

#define PAR_IF(count) if ((count) >= SG_CPU_PAR_MIN)
#define CB 64 /* NHWC: channels per block of the per-channel accumulators */

/* Whether activations are stored NHWC and that differs from NCHW. */
static int is_nhwc(const sg_backend *be, int c, long hw) {
    return be->layout == SG_LAYOUT_NHWC && c > 1 && hw > 1;
}

/* NHWC max-pool: a task per output row; per output pixel the window is
 * scanned in the NCHW order (row-major taps), each channel with the NCHW
 * rule (first max wins, a NaN replaces), on a block of CB channels at once
 * (the running max lives in y, the argmax's plane position in idx, which
 * is stored in the activation layout as y is). */
static void maxpool_fwd_nhwc(const float *x, float *y, int32_t *idx, int n, int c, int h, int w,
                             int oh, int ow) {
    enum { OXB = 16 };
    long rows = (long)n * oh;
    size_t ohw = (size_t)oh * ow;
#pragma omp parallel for schedule(static) PAR_IF((size_t)rows *ow *c * 4)
    for (long r = 0; r < rows; r++) {
        int i = (int)(r / oh), oy = (int)(r % oh);
        int y0 = oy * 2 - 1, ya = y0 < 0 ? 0 : y0, yb = y0 + 3 > h ? h : y0 + 3;
        const float *xi = x + (size_t)i * h * w * c;
        for (int ox0 = 0; ox0 < ow; ox0 += OXB) {
            int nt = ow - ox0 < OXB ? ow - ox0 : OXB;
            size_t q0 = (size_t)oy * ow + ox0;
            for (int c0 = 0; c0 < c; c0 += CB) {
                int nc = c - c0 < CB ? c - c0 : CB;
                for (int j = 0; j < nt; j++) {
                    int x0 = (ox0 + j) * 2 - 1, xa = x0 < 0 ? 0 : x0, xb = x0 + 3 > w ? w : x0 + 3;
                    float *best = y + ((size_t)i * ohw + q0 + j) * c + c0;
                    int32_t *b = idx + ((size_t)i * ohw + q0 + j) * c + c0;
                    const float *v0 = xi + ((size_t)ya * w + xa) * c + c0;
#pragma omp simd
                    for (int k = 0; k < nc; k++) {
                        best[k] = v0[k];
                        b[k] = ya * w + xa;
                    }
                    for (int iy = ya; iy < yb; iy++)
                        for (int ix = iy == ya ? xa + 1 : xa; ix < xb; ix++) {
                            const float *v = xi + ((size_t)iy * w + ix) * c + c0;
                            int32_t pos = iy * w + ix;
#pragma omp simd
                            for (int k = 0; k < nc; k++) {
                                int take = v[k] > best[k] || v[k] != v[k]; /* != : isnan */
                                best[k] = take ? v[k] : best[k];
                                b[k] = take ? pos : b[k];
                            }
                        }
                }
            }
        }
    }
}

/* NHWC max-pool backward: dx zeroed, then a task per (image, MB channels)
 * scatters the outputs in order, as NCHW does per plane: per
 * element the same sequence of additions, so the same bits. */
static void maxpool_bwd_nhwc(const float *dy, const int32_t *idx, float *dx, int n, int c, int h,
                             int w, int oh, int ow) {
    enum { MB = 16 }; /* channels per task: one cache line of dx per pixel */
    int blocks = (c + MB - 1) / MB;
    long tasks = (long)n * blocks;
    size_t hw = (size_t)h * w, ohw = (size_t)oh * ow;
    size_t total = (size_t)n * hw * c, chunk = 1u << 16;
    long chunks = (long)((total + chunk - 1) / chunk);
#pragma omp parallel for schedule(static) PAR_IF(total)
    for (long k = 0; k < chunks; k++) {
        size_t a = (size_t)k * chunk, b = a + chunk < total ? a + chunk : total;
        memset(dx + a, 0, (b - a) * sizeof(float));
    }
#pragma omp parallel for schedule(static) PAR_IF(total)
    for (long t = 0; t < tasks; t++) {
        int i = (int)(t / blocks), c0 = (int)(t % blocks) * MB;
        int nc = c - c0 < MB ? c - c0 : MB;
        float *dxi = dx + (size_t)i * hw * c + c0;
        const float *gi = dy + (size_t)i * ohw * c + c0;
        const int32_t *ii = idx + (size_t)i * ohw * c + c0;
        for (size_t q = 0; q < ohw; q++) {
            const float *g = gi + q * c;
            const int32_t *iq = ii + q * c;
            for (int k = 0; k < nc; k++) dxi[(size_t)iq[k] * c + k] += g[k];
        }
    }
}

/* One output of the NCHW max-pool: the window scan in row-major order; a
 * strictly greater value (or a NaN) replaces the current max, so the first
 * maximum wins, as in PyTorch. Padding is -inf: never selected. */
static void maxpool_one(const float *xp, float *yo, int32_t *io, int w, int ya, int yb, int ox) {
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
    *yo = best;
    *io = bi;
}

/* One output row. Outputs whose window lies inside the plane horizontally
 * (1 <= ox, 2*ox + 1 < w) take the same scan written branch-free, so the
 * loop over them vectorizes (same taps, same order, same rule: the same
 * values and indices); the edge outputs take maxpool_one. */
static void maxpool_row(const float *xp, float *yr, int32_t *ir, int h, int w, int oy, int ow) {
    int y0 = oy * 2 - 1, ya = y0 < 0 ? 0 : y0, yb = y0 + 3 > h ? h : y0 + 3;
    int lo = 1, hi = (w - 2) / 2 + 1; /* interior outputs [lo, hi) */
    if (hi > ow) hi = ow;
    if (hi < lo) hi = lo;
    maxpool_one(xp, yr, ir, w, ya, yb, 0);
    int nr = yb - ya; /* window rows inside the plane: 1 to 3 */
    const float *r0 = xp + (size_t)ya * w, *r1 = r0 + w, *r2 = r1 + w;
    int p0 = ya * w, p1 = p0 + w, p2 = p1 + w; /* their plane positions */
/* Tap d of row r (positions p): replaces the max if greater or a NaN. */
#define MP_TAP(r, p, d)                                    \
    do {                                                   \
        float v = (r)[x0 + (d)];                           \
        int take = v > best || v != v; /* v != v: isnan */ \
        best = take ? v : best;                            \
        bi = take ? (p) + x0 + (d) : bi;                   \
    } while (0)
/* The loop over the interior outputs, with the taps TAPS after the first. */
#define MP_LOOP(TAPS)                                      \
    _Pragma("omp simd") for (int ox = lo; ox < hi; ox++) { \
        int x0 = ox * 2 - 1;                               \
        float best = r0[x0];                               \
        int bi = p0 + x0;                                  \
        TAPS;                                              \
        yr[ox] = best;                                     \
        ir[ox] = bi;                                       \
    }
    if (nr == 3) {
        MP_LOOP(MP_TAP(r0, p0, 1); MP_TAP(r0, p0, 2); MP_TAP(r1, p1, 0); MP_TAP(r1, p1, 1);
                MP_TAP(r1, p1, 2); MP_TAP(r2, p2, 0); MP_TAP(r2, p2, 1); MP_TAP(r2, p2, 2))
    } else if (nr == 2) {
        MP_LOOP(MP_TAP(r0, p0, 1); MP_TAP(r0, p0, 2); MP_TAP(r1, p1, 0); MP_TAP(r1, p1, 1);
                MP_TAP(r1, p1, 2))
    } else {
        MP_LOOP(MP_TAP(r0, p0, 1); MP_TAP(r0, p0, 2))
    }
#undef MP_LOOP
#undef MP_TAP
    for (int ox = hi; ox < ow; ox++) maxpool_one(xp, yr + ox, ir + ox, w, ya, yb, ox);
}

static void maxpool_fwd(sg_backend *be, const float *x, float *y, int32_t *idx, int n, int c, int h,
                        int w, int oh, int ow) {
    if (is_nhwc(be, c, (long)h * w)) {
        maxpool_fwd_nhwc(x, y, idx, n, c, h, w, oh, ow);
        return;
    }
    long planes = (long)n * c;
#pragma omp parallel for schedule(static) PAR_IF((size_t)planes *h *w)
    for (long pl = 0; pl < planes; pl++) {
        const float *xp = x + (size_t)pl * h * w;
        float *yp = y + (size_t)pl * oh * ow;
        int32_t *ip = idx + (size_t)pl * oh * ow;
        for (int oy = 0; oy < oh; oy++)
            maxpool_row(xp, yp + (size_t)oy * ow, ip + (size_t)oy * ow, h, w, oy, ow);
    }
}

/* Overwrites dx: zero, then each output's gradient goes to its argmax. */
static void maxpool_bwd(sg_backend *be, const float *dy, const int32_t *idx, float *dx, int n,
                        int c, int h, int w, int oh, int ow) {
    if (is_nhwc(be, c, (long)h * w)) {
        maxpool_bwd_nhwc(dy, idx, dx, n, c, h, w, oh, ow);
        return;
    }
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

/* NHWC global average pool: per image a double sum per channel over the
 * pixels in order (AB channels at a time, vectorized over them). Another
 * order than NCHW's simd reduction (the op promises a tolerance), the same
 * bits on every run and thread count. y is [n, c]: the same in both. */
static void avgpool_fwd_nhwc(const void *x, int x_dt, float *y, int n, int c, int hw) {
    enum { AB = 256 }; /* channels per task: 1 KiB read per pixel */
    int blocks = (c + AB - 1) / AB;
    long tasks = (long)n * blocks;
#pragma omp parallel for schedule(static) PAR_IF((size_t)n *c *hw)
    for (long t = 0; t < tasks; t++) {
        int i = (int)(t / blocks), c0 = (int)(t % blocks) * AB;
        int nc = c - c0 < AB ? c - c0 : AB;
        double s[AB] = {0};
        size_t o = (size_t)i * hw * c + c0;
        for (int q = 0; q < hw; q++) {
            size_t r = o + (size_t)q * c;
            if (x_dt == SG_ACT_BF16) {
                const uint16_t *v = (const uint16_t *)x + r;
#pragma omp simd
                for (int k = 0; k < nc; k++) s[k] += sg_bf16_to_f32(v[k]);
            } else {
                const float *v = (const float *)x + r;
#pragma omp simd
                for (int k = 0; k < nc; k++) s[k] += v[k];
            }
        }
        for (int k = 0; k < nc; k++) y[(size_t)i * c + c0 + k] = (float)(s[k] / hw);
    }
}

/* NHWC: each pixel's c gradients dy[i, :] / hw, computed per task for a
 * block of pixels (the same float per element as NCHW). */
static void avgpool_bwd_nhwc(const float *dy, float *dx, int n, int c, int hw, int accumulate) {
    enum { PB = 64, GB = 2048 }; /* pixels per task, channels of g at a time (8 KiB) */
    int blocks = (hw + PB - 1) / PB;
    long tasks = (long)n * blocks;
#pragma omp parallel for schedule(static) PAR_IF((size_t)n *c *hw)
    for (long t = 0; t < tasks; t++) {
        int i = (int)(t / blocks), q0 = (int)(t % blocks) * PB;
        int q1 = q0 + PB < hw ? q0 + PB : hw;
        for (int c0 = 0; c0 < c; c0 += GB) {
            int nc = c - c0 < GB ? c - c0 : GB;
            float g[GB];
            for (int k = 0; k < nc; k++) g[k] = (float)((double)dy[(size_t)i * c + c0 + k] / hw);
            for (int q = q0; q < q1; q++) {
                float *p = dx + ((size_t)i * hw + q) * c + c0;
                if (accumulate) {
#pragma omp simd
                    for (int k = 0; k < nc; k++) p[k] += g[k];
                } else {
#pragma omp simd
                    for (int k = 0; k < nc; k++) p[k] = g[k];
                }
            }
        }
    }
}

/* The column taps of every output of an axis, computed once per call (they
 * are the same for every row and plane), in t[RT] on the caller's stack;
 * NULL for longer axes, whose taps tap_at computes at each use. Either way
 * the same pure function of the index: the same taps. */
enum { RT = 2048 };
static const sg_bilinear_tap *taps_table(sg_bilinear_tap *t, int out, int in) {
    if (out > RT) return NULL;
    float scale = sg_bilinear_scale(in, out);
    for (int o = 0; o < out; o++) t[o] = sg_bilinear_tap_of(o, scale, in);
    return t;
}

static inline sg_bilinear_tap tap_at(const sg_bilinear_tap *t, int o, float scale, int in) {
    return t ? t[o] : sg_bilinear_tap_of(o, scale, in);
}

/* NHWC bilinear resize: a task per output row; per output pixel the four
 * input pixels' channel vectors, with NCHW's per-element arithmetic. */
static void resize_fwd_nhwc(const float *x, float *y, int n, int c, int h, int w, int oh, int ow) {
    long rows = (long)n * oh;
    float sh = sg_bilinear_scale(h, oh), sw = sg_bilinear_scale(w, ow);
    sg_bilinear_tap tbuf[RT];
    const sg_bilinear_tap *txs = taps_table(tbuf, ow, w);
#pragma omp parallel for schedule(static) PAR_IF((size_t)rows *ow *c)
    for (long r = 0; r < rows; r++) {
        int i = (int)(r / oh), oy = (int)(r % oh);
        sg_bilinear_tap ty = sg_bilinear_tap_of(oy, sh, h);
        const float *xi = x + (size_t)i * h * w * c;
        const float *r0 = xi + (size_t)ty.i0 * w * c, *r1 = xi + (size_t)ty.i1 * w * c;
        float *yr = y + ((size_t)i * oh + oy) * ow * c;
        for (int ox = 0; ox < ow; ox++) {
            sg_bilinear_tap tx = tap_at(txs, ox, sw, w);
            const float *a = r0 + (size_t)tx.i0 * c, *b = r0 + (size_t)tx.i1 * c;
            const float *d = r1 + (size_t)tx.i0 * c, *e = r1 + (size_t)tx.i1 * c;
            float *yp = yr + (size_t)ox * c;
#pragma omp simd
            for (int k = 0; k < c; k++) yp[k] = sg_bilinear_value(ty, tx, a[k], b[k], d[k], e[k]);
        }
    }
}

/* NHWC resize backward: a task per input row, which takes, from every
 * output row whose taps reach it (in output order), the shares of the taps
 * on this row, in formulas/bilinear.h's order: per element the NCHW
 * scatter's sequence of additions, so the same bits. */
static void resize_bwd_nhwc(const float *dy, float *dx, int n, int c, int h, int w, int oh, int ow,
                            int accumulate) {
    long rows = (long)n * h;
    float sh = sg_bilinear_scale(h, oh), sw = sg_bilinear_scale(w, ow);
    sg_bilinear_tap tbuf[RT], tbuf_y[RT];
    const sg_bilinear_tap *txs = taps_table(tbuf, ow, w), *tys = taps_table(tbuf_y, oh, h);
#pragma omp parallel for schedule(static) PAR_IF((size_t)n *oh *ow *c)
    for (long r = 0; r < rows; r++) {
        int i = (int)(r / h), iy = (int)(r % h);
        float *dr = dx + ((size_t)i * h + iy) * w * c;
        if (!accumulate) memset(dr, 0, (size_t)w * c * sizeof(float));
        for (int oy = 0; oy < oh; oy++) {
            sg_bilinear_tap ty = tap_at(tys, oy, sh, h);
            int on0 = ty.i0 == iy, on1 = ty.i1 == iy;
            if (!on0 && !on1) continue;
            const float *gr = dy + ((size_t)i * oh + oy) * ow * c;
            for (int ox = 0; ox < ow; ox++) {
                sg_bilinear_tap tx = tap_at(txs, ox, sw, w);
                const float *g = gr + (size_t)ox * c;
                float *a = dr + (size_t)tx.i0 * c, *b = dr + (size_t)tx.i1 * c;
                if (on0) {
                    for (int k = 0; k < c; k++) a[k] += sg_bilinear_share(g[k], ty.l0, tx.l0);
                    for (int k = 0; k < c; k++) b[k] += sg_bilinear_share(g[k], ty.l0, tx.l1);
                }
                if (on1) {
                    for (int k = 0; k < c; k++) a[k] += sg_bilinear_share(g[k], ty.l1, tx.l0);
                    for (int k = 0; k < c; k++) b[k] += sg_bilinear_share(g[k], ty.l1, tx.l1);
                }
            }
        }
    }
}

/* len elements from src (element so, stored as sdt) to dst (element do,
 * stored as ddt): a copy, a rounding (float32 -> bf16, RNE) or a widening. */
static void copy_dt(const void *src, int sdt, size_t so, void *dst, int ddt, size_t dof,
                    size_t len) {
    if (sdt == ddt) {
        size_t es = sdt == SG_ACT_BF16 ? sizeof(uint16_t) : sizeof(float);
        memcpy((char *)dst + dof * es, (const char *)src + so * es, len * es);
    } else if (ddt == SG_ACT_BF16) {
        const float *s = (const float *)src + so;
        uint16_t *d = (uint16_t *)dst + dof;
#pragma omp simd
        for (size_t i = 0; i < len; i++) d[i] = sg_bf16_bits(s[i]);
    } else {
        const uint16_t *s = (const uint16_t *)src + so;
        float *d = (float *)dst + dof;
#pragma omp simd
        for (size_t i = 0; i < len; i++) d[i] = sg_bf16_to_f32(s[i]);
    }
}

/* NHWC concat: per pixel a copy of c_src channels into the c_dst at c_off. */
static void concat_fwd_nhwc(const void *src, int sdt, void *dst, int ddt, int n, int c_src,
                            int c_dst, int c_off, int hw) {
    long pixels = (long)n * hw;
#pragma omp parallel for schedule(static) PAR_IF((size_t)pixels *c_src)
    for (long p = 0; p < pixels; p++)
        copy_dt(src, sdt, (size_t)p * c_src, dst, ddt, (size_t)p * c_dst + c_off, (size_t)c_src);
}

static void concat_bwd_nhwc(const float *dy, float *dsrc, int n, int c_src, int c_dst, int c_off,
                            int hw, int accumulate) {
    long pixels = (long)n * hw;
#pragma omp parallel for schedule(static) PAR_IF((size_t)pixels *c_src)
    for (long p = 0; p < pixels; p++) {
        const float *g = dy + (size_t)p * c_dst + c_off;
        float *d = dsrc + (size_t)p * c_src;
        if (accumulate) {
#pragma omp simd
            for (int k = 0; k < c_src; k++) d[k] += g[k];
        } else {
            memcpy(d, g, (size_t)c_src * sizeof(float));
        }
    }
}

static void avgpool_fwd(sg_backend *be, const void *x, int x_dt, float *y, int n, int c, int hw) {
    if (x_dt != SG_ACT_F32 && x_dt != SG_ACT_BF16)
        SG_FATAL("CPU backend: avgpool_fwd: x_dt = %d is not SG_ACT_F32 (0) or SG_ACT_BF16 (1) "
                 "(a bug in the caller)",
                 x_dt);
    if (is_nhwc(be, c, hw)) {
        avgpool_fwd_nhwc(x, x_dt, y, n, c, hw);
        return;
    }
    long planes = (long)n * c;
#pragma omp parallel for schedule(static) PAR_IF((size_t)planes *hw)
    for (long pl = 0; pl < planes; pl++) {
        double s = 0;
        if (x_dt == SG_ACT_BF16) {
            const uint16_t *p = (const uint16_t *)x + (size_t)pl * hw;
#pragma omp simd reduction(+ : s)
            for (int q = 0; q < hw; q++) s += sg_bf16_to_f32(p[q]);
        } else {
            const float *p = (const float *)x + (size_t)pl * hw;
#pragma omp simd reduction(+ : s)
            for (int q = 0; q < hw; q++) s += p[q];
        }
        y[pl] = (float)(s / hw);
    }
}

static void avgpool_bwd(sg_backend *be, const float *dy, float *dx, int n, int c, int hw,
                        int accumulate) {
    if (is_nhwc(be, c, hw)) {
        avgpool_bwd_nhwc(dy, dx, n, c, hw, accumulate);
        return;
    }
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
    if (be->layout == SG_LAYOUT_NHWC && c > 1) { /* one 1-pixel side: NHWC is right too */
        resize_fwd_nhwc(x, y, n, c, h, w, oh, ow);
        return;
    }
    long planes = (long)n * c;
    float sh = sg_bilinear_scale(h, oh), sw = sg_bilinear_scale(w, ow);
    sg_bilinear_tap tbuf[RT];
    const sg_bilinear_tap *txs = taps_table(tbuf, ow, w);
#pragma omp parallel for schedule(static) PAR_IF((size_t)planes *oh *ow)
    for (long pl = 0; pl < planes; pl++) {
        const float *xp = x + (size_t)pl * h * w;
        float *yp = y + (size_t)pl * oh * ow;
        for (int oy = 0; oy < oh; oy++) {
            sg_bilinear_tap ty = sg_bilinear_tap_of(oy, sh, h);
            const float *r0 = xp + (size_t)ty.i0 * w, *r1 = xp + (size_t)ty.i1 * w;
            for (int ox = 0; ox < ow; ox++) {
                sg_bilinear_tap tx = tap_at(txs, ox, sw, w);
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
    if (be->layout == SG_LAYOUT_NHWC && c > 1) {
        resize_bwd_nhwc(dy, dx, n, c, h, w, oh, ow, accumulate);
        return;
    }
    long planes = (long)n * c;
    float sh = sg_bilinear_scale(h, oh), sw = sg_bilinear_scale(w, ow);
    sg_bilinear_tap tbuf[RT];
    const sg_bilinear_tap *txs = taps_table(tbuf, ow, w);
#pragma omp parallel for schedule(static) PAR_IF((size_t)planes *oh *ow)
    for (long pl = 0; pl < planes; pl++) {
        float *dp = dx + (size_t)pl * h * w;
        const float *gp = dy + (size_t)pl * oh * ow;
        if (!accumulate) memset(dp, 0, (size_t)h * w * sizeof(float));
        for (int oy = 0; oy < oh; oy++) {
            sg_bilinear_tap ty = sg_bilinear_tap_of(oy, sh, h);
            float *r0 = dp + (size_t)ty.i0 * w, *r1 = dp + (size_t)ty.i1 * w;
            for (int ox = 0; ox < ow; ox++) {
                sg_bilinear_tap tx = tap_at(txs, ox, sw, w);
                float g = gp[(size_t)oy * ow + ox];
                r0[tx.i0] += sg_bilinear_share(g, ty.l0, tx.l0);
                r0[tx.i1] += sg_bilinear_share(g, ty.l0, tx.l1);
                r1[tx.i0] += sg_bilinear_share(g, ty.l1, tx.l0);
                r1[tx.i1] += sg_bilinear_share(g, ty.l1, tx.l1);
            }
        }
    }
}

static void concat_fwd(sg_backend *be, const void *src, int src_dt, void *dst, int dst_dt, int n,
                       int c_src, int c_dst, int c_off, int hw) {
    if ((src_dt != SG_ACT_F32 && src_dt != SG_ACT_BF16) ||
        (dst_dt != SG_ACT_F32 && dst_dt != SG_ACT_BF16))
        SG_FATAL("CPU backend: concat_fwd: src_dt %d / dst_dt %d: each must be SG_ACT_F32 (0) or "
                 "SG_ACT_BF16 (1) (a bug in the caller)",
                 src_dt, dst_dt);
    if (be->layout == SG_LAYOUT_NHWC && hw > 1) {
        concat_fwd_nhwc(src, src_dt, dst, dst_dt, n, c_src, c_dst, c_off, hw);
        return;
    }
    long planes = (long)n * c_src;
#pragma omp parallel for schedule(static) PAR_IF((size_t)planes *hw)
    for (long pl = 0; pl < planes; pl++) {
        long i = pl / c_src, ch = pl % c_src;
        copy_dt(src, src_dt, (size_t)pl * hw, dst, dst_dt, ((size_t)i * c_dst + c_off + ch) * hw,
                (size_t)hw);
    }
}

static void concat_bwd(sg_backend *be, const float *dy, float *dsrc, int n, int c_src, int c_dst,
                       int c_off, int hw, int accumulate) {
    if (be->layout == SG_LAYOUT_NHWC && hw > 1) {
        concat_bwd_nhwc(dy, dsrc, n, c_src, c_dst, c_off, hw, accumulate);
        return;
    }
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
