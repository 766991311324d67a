/* kernels/cpu/cpu_tta.c - the test-time augmentation ops on the CPU (the
 * tta group of tests/backend/run_tta.c; kernels/cuda/cuda_tta.cu on the GPU):
 * horizontal flip of [n,c,h,w] and the per-pixel softmax over classes
 * (overwriting or adding into the output, which is how train/tta.c sums the
 * probabilities of every scale and flip). Inference only: neither op has a
 * backward. The softmax uses ce_fwd_bwd's per-pixel arithmetic
 * (kernels/formulas/cross_entropy.h), so it equals CE's gradient with
 * grad_scale 1 before the label term, on both backends.
 * NHWC (be->layout): flip_w moves whole pixels (c channels), the softmax runs
 * per pixel over its contiguous classes, with the same per-element
 * arithmetic and class order as NCHW (the same bits).
 */
#include "kernels/cpu/cpu_internal.h"
#include "kernels/formulas/cross_entropy.h"

#define SM_BLOCK 256 /* pixels per task: the class loop outside, pixels inside */

/* NHWC: a row of w pixels of c channels, reversed pixel by pixel. */
static void flip_w_nhwc(const float *x, float *y, int n, int c, int h, int w) {
    long rows = (long)n * h;
    size_t row = (size_t)w * c;
#pragma omp parallel for schedule(static) if ((size_t)rows * row >= SG_CPU_PAR_MIN)
    for (long r = 0; r < rows; r++) {
        const float *xr = x + (size_t)r * row;
        float *yr = y + (size_t)r * row;
        for (int i = 0; i < w; i++) { /* a loop, not memcpy: c is small (the classes) */
            const float *a = xr + (size_t)i * c;
            float *b = yr + (size_t)(w - 1 - i) * c;
#pragma omp simd
            for (int k = 0; k < c; k++) b[k] = a[k];
        }
    }
}

static void flip_w(sg_backend *be, const float *x, float *y, int n, int c, int h, int w) {
    if (be->layout == SG_LAYOUT_NHWC && c > 1) {
        flip_w_nhwc(x, y, n, c, h, w);
        return;
    }
    long rows = (long)n * c * h;
#pragma omp parallel for schedule(static) if ((size_t)rows * w >= SG_CPU_PAR_MIN)
    for (long r = 0; r < rows; r++) {
        const float *xr = x + (size_t)r * w;
        float *yr = y + (size_t)r * w;
        for (int i = 0; i < w; i++) yr[w - 1 - i] = xr[i];
    }
}

/* NHWC: one pixel's c classes are contiguous; the max and the sum run in
 * class order as in NCHW, the exponentials and the outputs vectorize. */
static void softmax_fwd_nhwc(const float *x, float *y, int n, int c, int hw, int accumulate) {
    long pixels = (long)n * hw;
#pragma omp parallel for schedule(static) if ((size_t)pixels * c >= SG_CPU_PAR_MIN)
    for (long p = 0; p < pixels; p++) {
        const float *xp = x + (size_t)p * c;
        float *yp = y + (size_t)p * c;
        float mx = xp[0], sum = 0.0f;
        for (int k = 1; k < c; k++) mx = sg_ce_max(mx, xp[k]);
        if (accumulate) {
            for (int k = 0; k < c; k++) sum = sg_ce_sum(sum, sg_ce_exp(xp[k], mx));
            float inv = sg_ce_inv(1.0f, sum);
            for (int k = 0; k < c; k++)
                yp[k] = sg_fadd(yp[k], sg_ce_grad(sg_ce_exp(xp[k], mx), inv));
        } else { /* y keeps the exponentials (y does not alias x) */
            for (int k = 0; k < c; k++) {
                yp[k] = sg_ce_exp(xp[k], mx);
                sum = sg_ce_sum(sum, yp[k]);
            }
            float inv = sg_ce_inv(1.0f, sum);
#pragma omp simd
            for (int k = 0; k < c; k++) yp[k] = sg_ce_grad(yp[k], inv);
        }
    }
}

static void softmax_fwd(sg_backend *be, const float *x, float *y, int n, int c, int hw,
                        int accumulate) {
    if (be->layout == SG_LAYOUT_NHWC && c > 1 && hw > 1) {
        softmax_fwd_nhwc(x, y, n, c, hw, accumulate);
        return;
    }
    int blocks = (hw + SM_BLOCK - 1) / SM_BLOCK;
    long tasks = (long)n * blocks;
#pragma omp parallel for schedule(static) if ((size_t)n * c * hw >= SG_CPU_PAR_MIN)
    for (long t = 0; t < tasks; t++) {
        int i = (int)(t / blocks), q0 = (int)(t % blocks) * SM_BLOCK;
        int len = hw - q0 < SM_BLOCK ? hw - q0 : SM_BLOCK;
        const float *xb = x + (size_t)i * c * hw + q0;
        float *yb = y + (size_t)i * c * hw + q0;
        float mx[SM_BLOCK], sum[SM_BLOCK];
        for (int q = 0; q < len; q++) {
            mx[q] = xb[q];
            sum[q] = 0.0f;
        }
        for (int k = 1; k < c; k++)
            for (int q = 0; q < len; q++) mx[q] = sg_ce_max(mx[q], xb[(size_t)k * hw + q]);
        for (int k = 0; k < c; k++)
            for (int q = 0; q < len; q++)
                sum[q] = sg_ce_sum(sum[q], sg_ce_exp(xb[(size_t)k * hw + q], mx[q]));
        for (int q = 0; q < len; q++) sum[q] = sg_ce_inv(1.0f, sum[q]);
        for (int k = 0; k < c; k++)
            for (int q = 0; q < len; q++) {
                float p = sg_ce_grad(sg_ce_exp(xb[(size_t)k * hw + q], mx[q]), sum[q]);
                float *o = yb + (size_t)k * hw + q;
                *o = accumulate ? sg_fadd(*o, p) : p;
            }
    }
}

void sg_cpu_fill_tta_ops(sg_ops *ops) {
    ops->flip_w = flip_w;
    ops->softmax_fwd = softmax_fwd;
}
