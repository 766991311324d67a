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

/* inner: the elements of one pixel (c in NHWC, 1 in NCHW), which the flip
 * moves together. */
__global__ void k_flip_w(const float *x, float *y, int w, size_t inner, size_t total) {
    GRID_STRIDE(i, total) {
        size_t e = i % inner, px = i / inner;
        size_t row = px / (size_t)w;
        int col = (int)(px % (size_t)w);
        y[(row * w + (w - 1 - col)) * inner + e] = x[i];
    }
}

static void sg_cuda_flip_w(sg_backend *be, const float *x, float *y, int n, int c, int h, int w) {
    size_t total = (size_t)n * c * h * w;
    if (!total) return;
    size_t inner = sg_cu_nhwc(be) ? (size_t)c : 1;
    SG_LAUNCH(sg_cu_blocks(total, TTA_THREADS), TTA_THREADS, 0, sg_cu_stream(be), k_flip_w)
    (x, y, w, inner, total);
    CU_LAUNCH_CHECK("k_flip_w");
}

/* Per pixel in either layout: class k at base + k*cs (cs = hw NCHW, 1 NHWC). */
__global__ void k_softmax(const float *x, float *y, int c, int hw, int nhwc, size_t pixels,
                          int accumulate) {
    GRID_STRIDE(p, pixels) {
        size_t base = nhwc ? p * (size_t)c : (p / hw) * (size_t)c * hw + p % hw;
        size_t cs = nhwc ? 1 : (size_t)hw;
        const float *xp = x + base;
        float *yp = y + base;
        float m = xp[0];
        for (int k = 1; k < c; k++) m = sg_ce_max(m, xp[(size_t)k * cs]);
        float s = 0.0f;
        for (int k = 0; k < c; k++) s = sg_ce_sum(s, sg_ce_exp(xp[(size_t)k * cs], m));
        float inv = sg_ce_inv(1.0f, s);
        for (int k = 0; k < c; k++) {
            float v = sg_ce_grad(sg_ce_exp(xp[(size_t)k * cs], m), inv);
            yp[(size_t)k * cs] = accumulate ? sg_fadd(yp[(size_t)k * cs], v) : v;
        }
    }
}

static void sg_cuda_softmax_fwd(sg_backend *be, const float *x, float *y, int n, int c, int hw,
                                int accumulate) {
    size_t pixels = (size_t)n * hw;
    if (!pixels || c <= 0) return;
    SG_LAUNCH(sg_cu_blocks(pixels, TTA_THREADS), TTA_THREADS, 0, sg_cu_stream(be), k_softmax)
    (x, y, c, hw, sg_cu_nhwc(be), pixels, accumulate);
    CU_LAUNCH_CHECK("k_softmax");
}

void sg_cuda_fill_tta_ops(sg_ops *o) {
    o->flip_w = sg_cuda_flip_w;
    o->softmax_fwd = sg_cuda_softmax_fwd;
}
