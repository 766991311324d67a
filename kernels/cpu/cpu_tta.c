/* kernels/cpu/cpu_tta.c - the test-time augmentation ops on the CPU (the
 * tta group of tests/backend/run_tta.c; kernels/cuda/cuda_tta.cu on the GPU):
 * horizontal flip of [n,c,h,w] and the per-pixel softmax over classes
 * (overwriting or adding into the output, which is how train/tta.c sums the
 * probabilities of every scale and flip). Inference only: neither op has a
 * backward. The softmax uses ce_fwd_bwd's per-pixel arithmetic
 * (kernels/formulas/cross_entropy.h), so it equals CE's gradient with
 * grad_scale 1 before the label term, on both backends.
 */
#include "kernels/cpu/cpu_internal.h"
#include "kernels/formulas/cross_entropy.h"

#define SM_BLOCK 256 /* pixels per task: the class loop outside, pixels inside */

static void flip_w(sg_backend *be, const float *x, float *y, int n, int c, int h, int w) {
    (void)be;
    long rows = (long)n * c * h;
#pragma omp parallel for schedule(static) if ((size_t)rows * w >= SG_CPU_PAR_MIN)
    for (long r = 0; r < rows; r++) {
        const float *xr = x + (size_t)r * w;
        float *yr = y + (size_t)r * w;
        for (int i = 0; i < w; i++) yr[w - 1 - i] = xr[i];
    }
}

static void softmax_fwd(sg_backend *be, const float *x, float *y, int n, int c, int hw,
                        int accumulate) {
    (void)be;
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
