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
 * row by row, then added in part order: the same bits on every run. Few
 * channels: rows in groups of G*c >= 64 lanes (bias_group).
 */
#include <string.h>

#include "kernels/cpu/cpu_internal.h"

#define PAR_IF(count) if ((count) >= SG_CPU_PAR_MIN)

/* Channels-last rows per forward tile (about 16 KiB) and the most pixel
 * ranges of the backward sums. */
#define BIAS_TILE 4096
#define BIAS_PARTS 64

/* Rows taken as one with few channels (as cpu_bn.c's nhwc_group): G rows
 * of c channels are one row of G*c lanes (>= 64, whole vectors of 16), the
 * bias repeated G times. G <= 64. */
static int bias_group(int c) {
    if (c >= 64) return 1;
    int g = 16; /* gcd(c, 16) */
    while (c % g) g /= 2;
    int g0 = 16 / g; /* the fewest rows whose lanes are whole vectors of 16 */
    return g0 * ((64 + g0 * c - 1) / (g0 * c));
}

static const float *bias_repeated(sg_backend *be, const float *b, int c, int G) {
    if (G == 1) return b;
    float *bp = sg_cpu_act_buf(be, 1, (size_t)G * c);
    for (int r = 0; r < G; r++) memcpy(bp + (size_t)r * c, b, (size_t)c * sizeof(float));
    return bp;
}

SG_CPU_CLONES static void rows_add_bias(float *y, const float *b, long np, int c) {
    for (long p = 0; p < np; p++) {
        float *r = y + (size_t)p * c;
#pragma omp simd
        for (int ch = 0; ch < c; ch++) r[ch] += b[ch];
    }
}

static void bias_fwd_nhwc(sg_backend *be, float *y, const float *b, int n, int c, int hw) {
    int G = bias_group(c);
    long npix = (long)n * hw, tile = c < BIAS_TILE ? BIAS_TILE / c : 1;
    tile -= tile % G; /* whole groups (tile > 64 >= G when c < 64) */
    long tiles = (npix + tile - 1) / tile;
    const float *bp = bias_repeated(be, b, c, G);
#pragma omp parallel for schedule(static) PAR_IF((size_t)npix *c)
    for (long t = 0; t < tiles; t++) {
        long p0 = t * tile, np = npix - p0 < tile ? npix - p0 : tile;
        float *yt = y + (size_t)p0 * c;
        rows_add_bias(yt, bp, np / G, G * c);
        rows_add_bias(yt + (size_t)(np / G) * G * c, bp, np % G, c);
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
    int G = bias_group(c), gc = G * c;
    long npix = (long)n * hw, tile = c < BIAS_TILE ? BIAS_TILE / c : 1;
    long tiles = (npix + tile - 1) / tile, parts = tiles < BIAS_PARTS ? tiles : BIAS_PARTS;
    if (parts < 1) parts = 1;
    size_t cp = ((size_t)gc + 7) & ~(size_t)7; /* each part's sums on their own lines */
    double *part = (double *)sg_cpu_act_buf(be, 1, 2 * (size_t)parts * cp);
#pragma omp parallel for schedule(static) PAR_IF((size_t)npix *c)
    for (long k = 0; k < parts; k++) {
        double *s = part + (size_t)k * cp;
        for (int ch = 0; ch < gc; ch++) s[ch] = 0;
        long p0 = (long)((int64_t)k * npix / parts), p1 = (long)((int64_t)(k + 1) * npix / parts);
        long ng = (p1 - p0) / G; /* G*c lanes over whole groups, the rest into the first c */
        rows_sum_bias(dy + (size_t)p0 * c, ng, gc, s);
        rows_sum_bias(dy + (size_t)p0 * c + (size_t)ng * gc, (p1 - p0) % G, c, s);
        for (int r = 1; r < G; r++)
            for (int ch = 0; ch < c; ch++) s[ch] += s[(size_t)r * c + ch];
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
        bias_fwd_nhwc(be, y, b, n, c, hw);
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
