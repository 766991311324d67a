/* kernels/cpu/cpu_gate.c - the gate group on the CPU (the ops of
 * tests/backend/run_gate.c; kernels/cuda/cuda_gate.cu on the GPU): the
 * MobileNetV3 / LR-ASPP activations hardswish, hardsigmoid and sigmoid with
 * their gradients (per-element formulas shared with CUDA:
 * kernels/formulas/gate.h), and channel scaling y = x * s[n,c] (squeeze-
 * excitation) with its gradients to x and s.
 * OpenMP over elements (over planes for channel scaling: each plane's ds is
 * one double sum in a fixed order, so the same bits whatever the threads).
 * NHWC (be->layout) channel scaling runs channels innermost: over pixels
 * (forward), over (image, block of channels) for the backward, whose ds sums
 * each channel over the pixels in the same order as NCHW (the same bits).
 */
#include "kernels/cpu/cpu_internal.h"
#include "kernels/formulas/gate.h"

#define PAR_IF(count) if ((count) >= SG_CPU_PAR_MIN)

static void hardswish_fwd(sg_backend *be, const float *x, float *y, size_t count) {
    (void)be;
#pragma omp parallel for simd schedule(static) PAR_IF(count)
    for (size_t i = 0; i < count; i++) y[i] = sg_hardswish(x[i]);
}

static void hardsigmoid_fwd(sg_backend *be, const float *x, float *y, size_t count) {
    (void)be;
#pragma omp parallel for simd schedule(static) PAR_IF(count)
    for (size_t i = 0; i < count; i++) y[i] = sg_hardsigmoid(x[i]);
}

static void sigmoid_fwd(sg_backend *be, const float *x, float *y, size_t count) {
    (void)be;
#pragma omp parallel for simd schedule(static) PAR_IF(count)
    for (size_t i = 0; i < count; i++) y[i] = sg_sigmoid(x[i]);
}

/* The backward ops: dx (+)= grad(dy, v), v = x (hard ones) or y (sigmoid). */
static void hardswish_bwd(sg_backend *be, const float *dy, const float *x, float *dx, size_t count,
                          int accumulate) {
    (void)be;
#pragma omp parallel for simd schedule(static) PAR_IF(count)
    for (size_t i = 0; i < count; i++) {
        float g = sg_hardswish_grad(dy[i], x[i]);
        dx[i] = accumulate ? dx[i] + g : g;
    }
}

static void hardsigmoid_bwd(sg_backend *be, const float *dy, const float *x, float *dx,
                            size_t count, int accumulate) {
    (void)be;
#pragma omp parallel for simd schedule(static) PAR_IF(count)
    for (size_t i = 0; i < count; i++) {
        float g = sg_hardsigmoid_grad(dy[i], x[i]);
        dx[i] = accumulate ? dx[i] + g : g;
    }
}

static void sigmoid_bwd(sg_backend *be, const float *dy, const float *y, float *dx, size_t count,
                        int accumulate) {
    (void)be;
#pragma omp parallel for simd schedule(static) PAR_IF(count)
    for (size_t i = 0; i < count; i++) {
        float g = sg_sigmoid_grad(dy[i], y[i]);
        dx[i] = accumulate ? dx[i] + g : g;
    }
}

#define CSB 128 /* NHWC chan_scale_bwd: channels per task (512 B of each tensor per pixel) */

/* Whether activations are stored NHWC and that differs from NCHW. */
static int is_nhwc(const sg_backend *be, int c, int hw) {
    return be->layout == SG_LAYOUT_NHWC && c > 1 && hw > 1;
}

static void chan_scale_fwd_nhwc(const float *x, const float *s, float *y, int n, int c, int hw) {
#pragma omp parallel for collapse(2) schedule(static) PAR_IF((size_t)n *hw *c)
    for (int i = 0; i < n; i++)
        for (int q = 0; q < hw; q++) {
            const float *v = s + (size_t)i * c;
            size_t at = ((size_t)i * hw + q) * c;
            const float *xp = x + at;
            float *yp = y + at;
#pragma omp simd
            for (int k = 0; k < c; k++) yp[k] = xp[k] * v[k];
        }
}

/* A task per (image, CSB channels): ds accumulates per channel in double
 * over the pixels in order (NCHW's order per channel), dx alongside. */
static void chan_scale_bwd_nhwc(const float *dy, const float *x, const float *s, float *dx,
                                float *ds, int n, int c, int hw, int acc_dx, int acc_ds) {
    int blocks = (c + CSB - 1) / CSB;
    long tasks = (long)n * blocks;
#pragma omp parallel for schedule(static) PAR_IF((size_t)n *c *hw)
    for (long t = 0; t < tasks; t++) {
        int i = (int)(t / blocks), c0 = (int)(t % blocks) * CSB;
        int nc = c - c0 < CSB ? c - c0 : CSB;
        size_t base = (size_t)i * hw * c + c0;
        const float *v = s + (size_t)i * c + c0;
        double acc[CSB] = {0};
        for (int q = 0; q < hw; q++) {
            const float *g = dy + base + (size_t)q * c;
            if (ds) {
                const float *xp = x + base + (size_t)q * c;
#pragma omp simd
                for (int k = 0; k < nc; k++) acc[k] += (double)g[k] * xp[k];
            }
            if (dx) {
                float *d = dx + base + (size_t)q * c;
                if (acc_dx) {
#pragma omp simd
                    for (int k = 0; k < nc; k++) d[k] += g[k] * v[k];
                } else {
#pragma omp simd
                    for (int k = 0; k < nc; k++) d[k] = g[k] * v[k];
                }
            }
        }
        if (ds) {
            float *o = ds + (size_t)i * c + c0;
            for (int k = 0; k < nc; k++) o[k] = acc_ds ? (float)(o[k] + acc[k]) : (float)acc[k];
        }
    }
}

static void chan_scale_fwd(sg_backend *be, const float *x, const float *s, float *y, int n, int c,
                           int hw) {
    if (is_nhwc(be, c, hw)) {
        chan_scale_fwd_nhwc(x, s, y, n, c, hw);
        return;
    }
    long planes = (long)n * c;
#pragma omp parallel for schedule(static) PAR_IF((size_t)planes *hw)
    for (long pl = 0; pl < planes; pl++) {
        float v = s[pl];
        const float *xp = x + (size_t)pl * hw;
        float *yp = y + (size_t)pl * hw;
#pragma omp simd
        for (int q = 0; q < hw; q++) yp[q] = xp[q] * v;
    }
}

static void chan_scale_bwd(sg_backend *be, const float *dy, const float *x, const float *s,
                           float *dx, float *ds, int n, int c, int hw, int acc_dx, int acc_ds) {
    if (is_nhwc(be, c, hw)) {
        chan_scale_bwd_nhwc(dy, x, s, dx, ds, n, c, hw, acc_dx, acc_ds);
        return;
    }
    long planes = (long)n * c;
#pragma omp parallel for schedule(static) PAR_IF((size_t)planes *hw)
    for (long pl = 0; pl < planes; pl++) {
        const float *g = dy + (size_t)pl * hw;
        if (ds) {
            const float *xp = x + (size_t)pl * hw;
            double acc = 0;
            for (int q = 0; q < hw; q++) acc += (double)g[q] * xp[q];
            ds[pl] = acc_ds ? (float)(ds[pl] + acc) : (float)acc;
        }
        if (dx) {
            float v = s[pl];
            float *d = dx + (size_t)pl * hw;
            if (acc_dx) {
#pragma omp simd
                for (int q = 0; q < hw; q++) d[q] += g[q] * v;
            } else {
#pragma omp simd
                for (int q = 0; q < hw; q++) d[q] = g[q] * v;
            }
        }
    }
}

void sg_cpu_fill_gate_ops(sg_ops *ops) {
    ops->hardswish_fwd = hardswish_fwd;
    ops->hardswish_bwd = hardswish_bwd;
    ops->hardsigmoid_fwd = hardsigmoid_fwd;
    ops->hardsigmoid_bwd = hardsigmoid_bwd;
    ops->sigmoid_fwd = sigmoid_fwd;
    ops->sigmoid_bwd = sigmoid_bwd;
    ops->chan_scale_fwd = chan_scale_fwd;
    ops->chan_scale_bwd = chan_scale_bwd;
}
