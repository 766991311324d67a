/* kernels/cuda/cuda_tta.cu - the test-time augmentation ops on the GPU (the
 * tta group of tests/backend/run_tta.c; kernels/cpu/cpu_tta.c on the CPU):
 * horizontal flip of [n,c,h,w] and the per-pixel softmax over classes
 * (overwrite or add into the output: train/tta.c sums the probabilities of
 * every scale and flip there). Inference only: neither op has a backward.
 *
 * flip_w: one thread per output element. softmax_fwd: one thread per pixel,
 * with ce_fwd_bwd's per-pixel arithmetic (kernels/formulas/cross_entropy.h,
 * shared with the CPU backend); the classes of a pixel are hw apart, so
 * neighbouring threads read neighbouring addresses (coalesced).
 */
#include "kernels/cuda/cuda_internal.h"
#include "kernels/formulas/cross_entropy.h"

#define TTA_THREADS 256

__global__ void k_flip_w(const float *x, float *y, int w, size_t total) {
    GRID_STRIDE(i, total) {
        size_t row = i / (size_t)w;
        int col = (int)(i % (size_t)w);
        y[row * w + (w - 1 - col)] = x[i];
    }
}

static void sg_cuda_flip_w(sg_backend *be, const float *x, float *y, int n, int c, int h, int w) {
    size_t total = (size_t)n * c * h * w;
    if (!total) return;
    k_flip_w<<<sg_cu_blocks(total, TTA_THREADS), TTA_THREADS, 0, sg_cu_stream(be)>>>(x, y, w,
                                                                                     total);
    CU_LAUNCH_CHECK("k_flip_w");
}

__global__ void k_softmax(const float *x, float *y, int c, int hw, size_t pixels, int accumulate) {
    GRID_STRIDE(p, pixels) {
        size_t img = p / hw, j = p % hw;
        const float *xp = x + img * (size_t)c * hw + j;
        float *yp = y + img * (size_t)c * hw + j;
        float m = xp[0];
        for (int k = 1; k < c; k++) m = sg_ce_max(m, xp[(size_t)k * hw]);
        float s = 0.0f;
        for (int k = 0; k < c; k++) s = sg_ce_sum(s, sg_ce_exp(xp[(size_t)k * hw], m));
        float inv = sg_ce_inv(1.0f, s);
        for (int k = 0; k < c; k++) {
            float v = sg_ce_grad(sg_ce_exp(xp[(size_t)k * hw], m), inv);
            yp[(size_t)k * hw] = accumulate ? sg_fadd(yp[(size_t)k * hw], v) : v;
        }
    }
}

static void sg_cuda_softmax_fwd(sg_backend *be, const float *x, float *y, int n, int c, int hw,
                                int accumulate) {
    size_t pixels = (size_t)n * hw;
    if (!pixels || c <= 0) return;
    k_softmax<<<sg_cu_blocks(pixels, TTA_THREADS), TTA_THREADS, 0, sg_cu_stream(be)>>>(
        x, y, c, hw, pixels, accumulate);
    CU_LAUNCH_CHECK("k_softmax");
}

void sg_cuda_fill_tta_ops(sg_ops *o) {
    o->flip_w = sg_cuda_flip_w;
    o->softmax_fwd = sg_cuda_softmax_fwd;
}
