/* kernels/cuda/cuda_loss.cu - softmax cross-entropy with ignore, argmax and
 * the confusion matrix.
 *
 * ce_fwd_bwd: one thread per pixel (log-sum-exp with the max subtracted;
 * the per-pixel arithmetic is kernels/formulas/cross_entropy.h, shared with
 * the CPU backend), loss summed in double through per-block partials and
 * one final block (deterministic), returned to the host with the number of
 * valid pixels.
 * confusion: integer atomics (exact in any order), per-block shared-memory
 * histograms when the matrix is small.
 */
#include "core/log.h"
#include "kernels/cuda/cuda_internal.h"
#include "kernels/cuda/cuda_reduce.cuh"
#include "kernels/formulas/cross_entropy.h"

#define EW_THREADS 256
#define SMEM_BINS 4096

#define GRID_STRIDE(i, total)                                                                \
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < (total);            \
         i += (size_t)gridDim.x * blockDim.x)

__global__ void k_ce(const float *logits, const uint8_t *labels, int c, int hw, size_t pixels,
                     int ignore, float grad_scale, float *dlogits, double *partial,
                     int nblocks) {
    __shared__ double sh[32];
    double loss = 0, valid = 0;
    GRID_STRIDE(p, pixels) {
        size_t img = p / hw, j = p % hw;
        const float *x = logits + img * (size_t)c * hw + j;
        int lab = labels[p];
        if (sg_ce_valid(lab, c, ignore)) {
            float m = x[0];
            for (int k = 1; k < c; k++) m = sg_ce_max(m, x[(size_t)k * hw]);
            float s = 0.0f;
            for (int k = 0; k < c; k++) s = sg_ce_sum(s, sg_ce_exp(x[(size_t)k * hw], m));
            float xl = x[(size_t)lab * hw]; /* read before dlogits (may alias) is written */
            loss += sg_ce_loss(m, s, xl);
            valid += 1.0;
            if (dlogits) {
                float *d = dlogits + img * (size_t)c * hw + j;
                float inv = sg_ce_inv(grad_scale, s);
                for (int k = 0; k < c; k++) {
                    float v = sg_ce_grad(sg_ce_exp(x[(size_t)k * hw], m), inv);
                    d[(size_t)k * hw] = k == lab ? sg_ce_grad_label(v, grad_scale) : v;
                }
            }
        } else if (dlogits) {
            float *d = dlogits + img * (size_t)c * hw + j;
            for (int k = 0; k < c; k++) d[(size_t)k * hw] = 0.0f;
        }
    }
    loss = sg_block_sum(loss, sh);
    valid = sg_block_sum(valid, sh);
    if (threadIdx.x == 0) {
        partial[blockIdx.x] = loss;
        partial[nblocks + blockIdx.x] = valid;
    }
}

__global__ void k_ce_total(const double *partial, int nblocks, double *out) {
    __shared__ double sh[32];
    double l = 0, v = 0;
    for (int i = threadIdx.x; i < nblocks; i += blockDim.x) {
        l += partial[i];
        v += partial[nblocks + i];
    }
    l = sg_block_sum(l, sh);
    v = sg_block_sum(v, sh);
    if (threadIdx.x == 0) {
        out[0] = l;
        out[1] = v;
    }
}

void sg_cuda_ce_fwd_bwd(sg_backend *be, const float *logits, const uint8_t *labels, int n,
                        int c, int hw, int ignore, float grad_scale, float *dlogits,
                        double *loss_sum, int64_t *valid) {
    sg_cuda *cu = sg_cu(be);
    size_t pixels = (size_t)n * hw;
    SG_CHECK(c > 0, "CUDA backend: ce_fwd_bwd with %d classes", c);
    if (!pixels) {
        *loss_sum = 0;
        *valid = 0;
        return;
    }
    cudaStream_t s = sg_cu_stream(be);
    unsigned blocks = sg_cu_blocks(pixels, SG_CUDA_RED_THREADS);
    if (blocks > SG_CUDA_RED_BLOCKS) blocks = SG_CUDA_RED_BLOCKS;
    k_ce<<<blocks, SG_CUDA_RED_THREADS, 0, s>>>(logits, labels, c, hw, pixels, ignore,
                                                grad_scale, dlogits, cu->red_partial,
                                                (int)blocks);
    CU_LAUNCH_CHECK("k_ce");
    k_ce_total<<<1, SG_CUDA_RED_THREADS, 0, s>>>(cu->red_partial, (int)blocks, cu->red_result);
    CU_LAUNCH_CHECK("k_ce_total");
    double r[2];
    sg_cuda_read_result(be, r, 2);
    *loss_sum = r[0];
    *valid = (int64_t)r[1];
}

__global__ void k_argmax(const float *logits, uint8_t *pred, int c, int hw, size_t pixels) {
    GRID_STRIDE(p, pixels) {
        size_t img = p / hw, j = p % hw;
        const float *x = logits + img * (size_t)c * hw + j;
        float best = x[0];
        int bi = 0;
        for (int k = 1; k < c; k++) {
            float v = x[(size_t)k * hw];
            if (v > best) { /* first max wins */
                best = v;
                bi = k;
            }
        }
        pred[p] = (uint8_t)bi;
    }
}

void sg_cuda_argmax(sg_backend *be, const float *logits, uint8_t *pred, int n, int c, int hw) {
    SG_CHECK(c > 0 && c <= 256, "CUDA backend: argmax over %d classes (uint8 output: 1..256)",
             c);
    size_t pixels = (size_t)n * hw;
    if (!pixels) return;
    k_argmax<<<sg_cu_blocks(pixels, EW_THREADS), EW_THREADS, 0, sg_cu_stream(be)>>>(
        logits, pred, c, hw, pixels);
    CU_LAUNCH_CHECK("k_argmax");
}

__global__ void k_confusion_smem(const uint8_t *pred, const uint8_t *labels, size_t count,
                                 int c, int64_t *conf) {
    __shared__ unsigned int bins[SMEM_BINS];
    int nb = c * c;
    for (int i = threadIdx.x; i < nb; i += blockDim.x) bins[i] = 0;
    __syncthreads();
    GRID_STRIDE(i, count) {
        int l = labels[i], p = pred[i];
        if (l < c && p < c) atomicAdd(&bins[l * c + p], 1u);
    }
    __syncthreads();
    for (int i = threadIdx.x; i < nb; i += blockDim.x)
        if (bins[i]) atomicAdd((unsigned long long *)&conf[i], (unsigned long long)bins[i]);
}

__global__ void k_confusion_global(const uint8_t *pred, const uint8_t *labels, size_t count,
                                   int c, int64_t *conf) {
    GRID_STRIDE(i, count) {
        int l = labels[i], p = pred[i];
        if (l < c && p < c) atomicAdd((unsigned long long *)&conf[l * c + p], 1ull);
    }
}

void sg_cuda_confusion(sg_backend *be, const uint8_t *pred, const uint8_t *labels, size_t count,
                       int c, int64_t *conf) {
    SG_CHECK(c > 0 && c <= 256, "CUDA backend: confusion over %d classes (1..256)", c);
    if (!count) return;
    unsigned blocks = sg_cu_blocks(count, EW_THREADS);
    if (c * c <= SMEM_BINS) {
        /* few blocks: each block's histogram covers many pixels */
        unsigned cap = (unsigned)sg_cu(be)->sm_count * 4;
        if (blocks > cap) blocks = cap;
        k_confusion_smem<<<blocks, EW_THREADS, 0, sg_cu_stream(be)>>>(pred, labels, count, c,
                                                                      conf);
        CU_LAUNCH_CHECK("k_confusion_smem");
    } else {
        k_confusion_global<<<blocks, EW_THREADS, 0, sg_cu_stream(be)>>>(pred, labels, count, c,
                                                                        conf);
        CU_LAUNCH_CHECK("k_confusion_global");
    }
}
