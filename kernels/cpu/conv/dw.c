/* kernels/cpu/conv/dw.c - the backward passes of dilated depthwise
 * convolutions, direct (part of the conv group: the row dw of the path
 * table, paths.c, calls it through conv_internal.h; this file fills no
 * op).
 *
 * oneDNN 2.6 has jit depthwise kernels for the forward pass and for the
 * undilated backward passes, but runs a dilated depthwise backward (the
 * dilated stages of MobileNetV3, the separable ASPP branches of DeepLabV3+)
 * as a GEMM-based convolution, many times slower than its forward
 * (docs/BENCHMARKS.md, "Depthwise convolutions (CPU)").
 *
 * Each plane is independent: backward-data scatters dy * w into its input
 * plane over the valid output range of each tap; backward-weight sums
 * x * dy per output channel and tap (each row in float, the rows in
 * double), in a fixed order. Threads own whole planes / channels: no race,
 * the same bits whatever the thread count. PyTorch's [k, 1, r, s] weights.
 *
 * NHWC activations (channels last) get their own loops, vectorised over the
 * channels, which are contiguous there: backward-data gathers, for each
 * input pixel, dy * w over the taps that read it (threads own input rows;
 * the weights are first regrouped per tap, [r*s][k], so a tap's weights are
 * contiguous too: the only buffer, grown per shape); backward-weight
 * accumulates x * dy per tap over chunks of 16 channels (each output row in
 * float, the rows in double; threads own (channel chunk, tap) pairs). Each
 * element is summed in a fixed order: the same bits whatever the thread
 * count (backward-data: even the same bits as the nchw loops, which add the
 * same terms in the same order).
 */
#include "kernels/cpu/conv/conv_internal.h"

/* Output positions o in [*lo, *hi) whose input o*stride - pad + t*dil is
 * inside [0, in). */
static void valid_range(int out, int in, int stride, int pad, int t, int dil, int *lo, int *hi) {
    int off = t * dil - pad; /* input = o*stride + off */
    int a = off >= 0 ? 0 : (-off + stride - 1) / stride;
    int b = in - 1 - off < 0 ? 0 : (in - 1 - off) / stride + 1;
    *lo = a < out ? a : out;
    *hi = b < out ? b : out;
    if (*hi < *lo) *hi = *lo;
}

int sg_conv_dw_applicable(const sg_conv_desc *d) {
    return d->groups > 1 && d->groups == d->c && d->k % d->c == 0 && (d->dil_h > 1 || d->dil_w > 1);
}

void sg_conv_dw_prepare(ws_buf *wt, const sg_conv_desc *d) {
    ws_reserve(wt, (size_t)d->k * d->r * d->s * sizeof(float));
}

/* The output index o with o*stride - pad + t*dil == in, or -1 if none. */
static int tap_output(int in, int pad, int t, int dil, int stride, int out) {
    int v = in + pad - t * dil;
    if (v < 0 || v % stride) return -1;
    v /= stride;
    return v < out ? v : -1;
}

/* NHWC backward-data: dx[b, iy, ix, :] (+)= sum over q, i, j of
 * dy[b, oy, ox, ch*m + q] * w[ch*m + q, i, j] for the taps (i, j) whose
 * output (oy, ox) reads the pixel. */
static void dw_bwd_data_nhwc(ws_buf *wtb, const sg_conv_desc *d, const float *dy, const float *w,
                             float *dx, int accumulate) {
    sg_conv_dw_prepare(wtb, d);
    float *wt = wtb->p;
    int m = d->k / d->c, c = d->c, k = d->k, taps = d->r * d->s;
    for (int q = 0; q < k; q++)
        for (int t = 0; t < taps; t++) wt[(size_t)t * k + q] = w[(size_t)q * taps + t];
    long rows = (long)d->n * d->h;
#pragma omp parallel for schedule(static) if ((size_t)rows * d->w * k * taps >= SG_CPU_PAR_MIN)
    for (long row = 0; row < rows; row++) {
        long b = row / d->h;
        int iy = (int)(row % d->h);
        for (int ix = 0; ix < d->w; ix++) {
            float *o = dx + ((size_t)row * d->w + ix) * c;
            if (!accumulate)
                for (int ch = 0; ch < c; ch++) o[ch] = 0.0f;
            for (int q = 0; q < m; q++)
                for (int i = 0; i < d->r; i++) {
                    int oy = tap_output(iy, d->pad_h, i, d->dil_h, d->stride_h, d->oh);
                    if (oy < 0) continue;
                    for (int j = 0; j < d->s; j++) {
                        int ox = tap_output(ix, d->pad_w, j, d->dil_w, d->stride_w, d->ow);
                        if (ox < 0) continue;
                        const float *g = dy + (((size_t)b * d->oh + oy) * d->ow + ox) * k + q;
                        const float *wv = wt + (size_t)(i * d->s + j) * k + q;
                        if (m == 1) {
#pragma omp simd
                            for (int ch = 0; ch < c; ch++) o[ch] += g[ch] * wv[ch];
                        } else {
                            for (int ch = 0; ch < c; ch++) o[ch] += g[ch * m] * wv[ch * m];
                        }
                    }
                }
        }
    }
}

/* Output channels of one NHWC backward-weight work item: one AVX-512
 * vector, summed along a row in a register. */
enum { DW_LANES = 16 };

/* The input column that output column ox reads through tap column j. */
static inline int ix_of(const sg_conv_desc *d, int ox, int j) {
    return ox * d->stride_w - d->pad_w + j * d->dil_w;
}

/* NHWC backward-weight: dw[k, i, j] (+)= sum over b, oy, ox of
 * x[b, iy, ix, k / m] * dy[b, oy, ox, k]. Work items are (16-channel chunk,
 * tap), chunk-major: a thread's consecutive items read the same channels of
 * x and dy (in cache across the taps). */
static void dw_bwd_weight_nhwc(const sg_conv_desc *d, const float *x, const float *dy, float *dw,
                               int accumulate) {
    int m = d->k / d->c, c = d->c, k = d->k, taps = d->r * d->s;
    int chunks = (k + DW_LANES - 1) / DW_LANES;
    long items = (long)chunks * taps;
#pragma omp parallel for schedule(static) if ((size_t)d->n * k * d->oh * d->ow * taps >= \
                                              SG_CPU_PAR_MIN)
    for (long it = 0; it < items; it++) {
        int k0 = (int)(it / taps) * DW_LANES, t = (int)(it % taps);
        int ln = k - k0 < DW_LANES ? k - k0 : DW_LANES;
        int i = t / d->s, j = t % d->s, y0, y1, x0, x1;
        valid_range(d->oh, d->h, d->stride_h, d->pad_h, i, d->dil_h, &y0, &y1);
        valid_range(d->ow, d->w, d->stride_w, d->pad_w, j, d->dil_w, &x0, &x1);
        double acc[DW_LANES] = {0};
        for (int b = 0; b < d->n; b++)
            for (int oy = y0; oy < y1; oy++) {
                int iy = oy * d->stride_h - d->pad_h + i * d->dil_h;
                const float *xrow = x + ((size_t)b * d->h + iy) * d->w * c;
                const float *grow = dy + ((size_t)b * d->oh + oy) * d->ow * k + k0;
                float row[DW_LANES] = {0}; /* one row in float, the rows in double */
                for (int ox = x0; ox < x1; ox++) {
                    size_t ix = (size_t)ix_of(d, ox, j);
                    const float *gp = grow + (size_t)ox * k;
                    if (m == 1 && ln == DW_LANES) {
                        const float *xp = xrow + ix * c + k0;
#pragma omp simd
                        for (int l = 0; l < DW_LANES; l++) row[l] += xp[l] * gp[l];
                    } else {
                        const float *xp = xrow + ix * c;
                        for (int l = 0; l < ln; l++) row[l] += xp[(k0 + l) / m] * gp[l];
                    }
                }
                for (int l = 0; l < ln; l++) acc[l] += row[l];
            }
        for (int l = 0; l < ln; l++) {
            float *o = dw + (size_t)(k0 + l) * taps + t;
            *o = accumulate ? (float)(*o + acc[l]) : (float)acc[l];
        }
    }
}

void sg_conv_dw_bwd_data(ws_buf *wt, const sg_conv_desc *d, int nhwc, const float *dy,
                         const float *w, float *dx, int accumulate) {
    if (nhwc) {
        dw_bwd_data_nhwc(wt, d, dy, w, dx, accumulate);
        return;
    }
    int m = d->k / d->c, ip = d->h * d->w, op = d->oh * d->ow;
    long planes = (long)d->n * d->c;
#pragma omp parallel for schedule(static) if ((size_t)planes * ip * d->r * d->s * m >= \
                                              SG_CPU_PAR_MIN)
    for (long pl = 0; pl < planes; pl++) {
        long b = pl / d->c;
        int ch = (int)(pl % d->c);
        float *o = dx + (size_t)pl * ip;
        if (!accumulate)
            for (int q = 0; q < ip; q++) o[q] = 0.0f;
        for (int q = 0; q < m; q++) {
            int k = ch * m + q;
            const float *g = dy + ((size_t)b * d->k + k) * op;
            const float *wk = w + (size_t)k * d->r * d->s;
            for (int i = 0; i < d->r; i++) {
                int y0, y1;
                valid_range(d->oh, d->h, d->stride_h, d->pad_h, i, d->dil_h, &y0, &y1);
                for (int j = 0; j < d->s; j++) {
                    int x0, x1;
                    valid_range(d->ow, d->w, d->stride_w, d->pad_w, j, d->dil_w, &x0, &x1);
                    float wv = wk[i * d->s + j];
                    for (int oy = y0; oy < y1; oy++) {
                        float *orow = o +
                                      (size_t)(oy * d->stride_h - d->pad_h + i * d->dil_h) * d->w +
                                      (j * d->dil_w - d->pad_w);
                        const float *grow = g + (size_t)oy * d->ow;
                        if (d->stride_w == 1) {
#pragma omp simd
                            for (int ox = x0; ox < x1; ox++) orow[ox] += grow[ox] * wv;
                        } else {
                            for (int ox = x0; ox < x1; ox++)
                                orow[ox * d->stride_w] += grow[ox] * wv;
                        }
                    }
                }
            }
        }
    }
}

void sg_conv_dw_bwd_weight(const sg_conv_desc *d, int nhwc, const float *x, const float *dy,
                           float *dw, int accumulate) {
    if (nhwc) {
        dw_bwd_weight_nhwc(d, x, dy, dw, accumulate);
        return;
    }
    int m = d->k / d->c, ip = d->h * d->w, op = d->oh * d->ow;
#pragma omp parallel for schedule(static) if ((size_t)d->n * d->k * op * d->r * d->s >= \
                                              SG_CPU_PAR_MIN)
    for (int k = 0; k < d->k; k++) {
        int ch = k / m;
        for (int i = 0; i < d->r; i++) {
            int y0, y1;
            valid_range(d->oh, d->h, d->stride_h, d->pad_h, i, d->dil_h, &y0, &y1);
            for (int j = 0; j < d->s; j++) {
                int x0, x1;
                valid_range(d->ow, d->w, d->stride_w, d->pad_w, j, d->dil_w, &x0, &x1);
                double acc = 0;
                for (int b = 0; b < d->n; b++) {
                    const float *xp = x + ((size_t)b * d->c + ch) * ip;
                    const float *g = dy + ((size_t)b * d->k + k) * op;
                    for (int oy = y0; oy < y1; oy++) {
                        const float *xrow =
                            xp + (size_t)(oy * d->stride_h - d->pad_h + i * d->dil_h) * d->w +
                            (j * d->dil_w - d->pad_w);
                        const float *grow = g + (size_t)oy * d->ow;
                        float row = 0.0f; /* one row in float (vectorised), rows in double */
                        if (d->stride_w == 1) {
#pragma omp simd reduction(+ : row)
                            for (int ox = x0; ox < x1; ox++) row += xrow[ox] * grow[ox];
                        } else {
#pragma omp simd reduction(+ : row)
                            for (int ox = x0; ox < x1; ox++)
                                row += xrow[ox * d->stride_w] * grow[ox];
                        }
                        acc += row;
                    }
                }
                float *o = dw + ((size_t)k * d->r + i) * d->s + j;
                *o = accumulate ? (float)(*o + acc) : (float)acc;
            }
        }
    }
}
