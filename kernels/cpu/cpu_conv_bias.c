/* kernels/cpu/cpu_conv_bias.c - the convolution bias on the CPU (part of
 * the conv group, tests/backend/run_conv.c; kernels/cuda/cuda_conv_bias.cu
 * on the GPU): y[n,c,:] += b[c] and its gradient db[c] (+)= sum of dy over
 * n and the plane. The convolutions themselves (cpu_conv.c) have no bias:
 * the model adds it as a separate op.
 * OpenMP over planes (forward) or channels (backward: each thread owns its
 * channels' sums, summed in double in a fixed order, so no race and the same
 * bits whatever the thread count).
 * Channels last (be->layout == SG_LAYOUT_NHWC): n*hw pixel rows of c
 * channels, the channels as vector lanes. Forward over tiles of rows;
 * backward: per-channel double sums of up to BIAS_PARTS contiguous pixel
 * ranges (a split fixed by the shape, never the thread count), each summed
 * row by row, then added in part order: the same bits on every run.
 */
#include "kernels/cpu/cpu_internal.h"

#define PAR_IF(count) if ((count) >= SG_CPU_PAR_MIN)

/* Channels-last rows per forward tile (about 16 KiB) and the most pixel
 * ranges of the backward sums. */
#define BIAS_TILE 4096
#define BIAS_PARTS 64

SG_CPU_CLONES static void rows_add_bias(float *y, const float *b, long np, int c) {
    for (long p = 0; p < np; p++) {
        float *r = y + (size_t)p * c;
#pragma omp simd
        for (int ch = 0; ch < c; ch++) r[ch] += b[ch];
    }
}

static void bias_fwd_nhwc(float *y, const float *b, int n, int c, int hw) {
    long npix = (long)n * hw, tile = c < BIAS_TILE ? BIAS_TILE / c : 1;
    long tiles = (npix + tile - 1) / tile;
#pragma omp parallel for schedule(static) PAR_IF((size_t)npix *c)
    for (long t = 0; t < tiles; t++) {
        long p0 = t * tile, np = npix - p0 < tile ? npix - p0 : tile;
        rows_add_bias(y + (size_t)p0 * c, b, np, c);
    }
}

/* s[ch] += the sum of np rows of dy, in double, row by row. */
SG_CPU_CLONES static void rows_sum_bias(const float *dy, long np, int c, double *s) {
    for (long p = 0; p < np; p++) {
        const float *r = dy + (size_t)p * c;
#pragma omp simd
        for (int ch = 0; ch < c; ch++) s[ch] += r[ch];
    }
}

static void bias_bwd_nhwc(sg_backend *be, const float *dy, float *db, int n, int c, int hw,
                          int accumulate) {
    long npix = (long)n * hw, tile = c < BIAS_TILE ? BIAS_TILE / c : 1;
    long tiles = (npix + tile - 1) / tile, parts = tiles < BIAS_PARTS ? tiles : BIAS_PARTS;
    if (parts < 1) parts = 1;
    size_t cp = ((size_t)c + 7) & ~(size_t)7; /* each part's sums on their own lines */
    double *part = (double *)sg_cpu_act_buf(be, 1, 2 * (size_t)parts * cp);
#pragma omp parallel for schedule(static) PAR_IF((size_t)npix *c)
    for (long k = 0; k < parts; k++) {
        double *s = part + (size_t)k * cp;
        for (int ch = 0; ch < c; ch++) s[ch] = 0;
        long p0 = (long)((int64_t)k * npix / parts), p1 = (long)((int64_t)(k + 1) * npix / parts);
        rows_sum_bias(dy + (size_t)p0 * c, p1 - p0, c, s);
    }
    for (long k = 1; k < parts; k++) {
        const double *s = part + (size_t)k * cp;
#pragma omp simd
        for (int ch = 0; ch < c; ch++) part[ch] += s[ch];
    }
    for (int ch = 0; ch < c; ch++)
        db[ch] = accumulate ? (float)(db[ch] + part[ch]) : (float)part[ch];
}

static void bias_fwd(sg_backend *be, float *y, const float *b, int n, int c, int hw) {
    if (be->layout == SG_LAYOUT_NHWC) {
        bias_fwd_nhwc(y, b, n, c, hw);
        return;
    }
    long planes = (long)n * c;
#pragma omp parallel for schedule(static) PAR_IF((size_t)planes *hw)
    for (long pl = 0; pl < planes; pl++) {
        float v = b[pl % c];
        float *p = y + (size_t)pl * hw;
#pragma omp simd
        for (int q = 0; q < hw; q++) p[q] += v;
    }
}

static void bias_bwd(sg_backend *be, const float *dy, float *db, int n, int c, int hw,
                     int accumulate) {
    if (be->layout == SG_LAYOUT_NHWC) {
        bias_bwd_nhwc(be, dy, db, n, c, hw, accumulate);
        return;
    }
#pragma omp parallel for schedule(static) PAR_IF((size_t)n *c *hw)
    for (int ch = 0; ch < c; ch++) {
        double s = 0;
        for (int i = 0; i < n; i++) {
            const float *p = dy + ((size_t)i * c + ch) * hw;
#pragma omp simd reduction(+ : s)
            for (int q = 0; q < hw; q++) s += p[q];
        }
        db[ch] = accumulate ? (float)(db[ch] + s) : (float)s;
    }
}

void sg_cpu_fill_conv_bias_ops(sg_ops *ops) {
    ops->bias_fwd = bias_fwd;
    ops->bias_bwd = bias_bwd;
}
