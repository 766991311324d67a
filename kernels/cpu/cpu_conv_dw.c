/* kernels/cpu/cpu_conv_dw.c - the backward passes of dilated depthwise
 * convolutions, direct (part of the conv group: cpu_conv.c picks this path
 * in auto layout mode and calls it through cpu_conv_internal.h; this file
 * fills no op).
 *
 * oneDNN 2.6 has jit depthwise kernels for the forward pass and for the
 * undilated backward passes, but runs a dilated depthwise backward (the
 * dilated stages of MobileNetV3, the separable ASPP branches of DeepLabV3+)
 * as a GEMM-based convolution, 15-25x slower than its forward (bench_conv
 * with SG_BENCH_SHAPE=2,240,32,32,240,5,1,4,2,240, one thread: backward
 * 22 + 19 ms against 0.8 ms forward; 4.3 + 3.7 ms here).
 *
 * Each plane is independent: backward-data scatters dy * w into its input
 * plane over the valid output range of each tap; backward-weight sums
 * x * dy per output channel and tap (each row in float, the rows in
 * double), in a fixed order. Threads own whole planes / channels: no race,
 * the same bits whatever the thread count. Plain nchw and PyTorch's
 * [k, 1, r, s] weights, no buffers.
 */
#include "kernels/cpu/cpu_conv_internal.h"

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

void sg_conv_dw_bwd_data(const sg_conv_desc *d, const float *dy, const float *w, float *dx,
                         int accumulate) {
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

void sg_conv_dw_bwd_weight(const sg_conv_desc *d, const float *x, const float *dy, float *dw,
                           int accumulate) {
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
