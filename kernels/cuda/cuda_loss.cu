/* kernels/cuda/cuda_loss.cu - the loss group on the GPU (the ops of
 * tests/backend/run_loss.c; kernels/cpu/cpu_loss.c on the CPU): softmax
 * cross-entropy with ignore (plain, weighted / OHEM, label probabilities),
 * the k-th smallest value, argmax and the confusion matrix.
 *
 * Either activation layout: a pixel's class k is at its base + k*hw (NCHW)
 * or + k (NHWC) (pixel_base); labels, predictions and the per-pixel outputs
 * are [n, hw] in both.
 * ce_fwd_bwd: one thread per pixel (log-sum-exp with the max subtracted;
 * the per-pixel arithmetic is kernels/formulas/cross_entropy.h, shared with
 * the CPU backend), loss summed in double through per-block partials and
 * one final block (deterministic), returned to the host with the number of
 * valid pixels.
 * ce_weighted is the same kernel with class weights and a selection key;
 * ce_label_prob one thread per pixel; kth_smallest a radix select on the
 * float bits (four histogram passes, integer atomics: exact in any order).
 * confusion: integer atomics (exact in any order), per-block shared-memory
 * histograms when the matrix is small.
 */
#include "core/log.h"
#include "kernels/cuda/cuda_internal.h"
#include "kernels/cuda/cuda_reduce.cuh"
#include "kernels/formulas/cross_entropy.h"
#include "kernels/formulas/radix_select.h"

#define SMEM_BINS 4096

/* ce_fwd_bwd and ce_weighted: pixel p counts with weight w_p (backend.h);
 * w_p == 1 for every valid pixel is the plain loss bit for bit. */
/* Per pixel p in either layout (be->layout): its class k's logit is at
 * base + k*cs, cs = hw (NCHW) or 1 (NHWC) (pixel_base). */
__device__ __forceinline__ size_t pixel_base(int nhwc, size_t p, int c, int hw) {
    return nhwc ? p * (size_t)c : (p / hw) * (size_t)c * hw + p % hw;
}

__global__ void k_ce(const float *logits, const uint8_t *labels, int c, int hw, int nhwc,
                     size_t pixels, int ignore, const float *class_w, const float *sel_key,
                     float sel_below, float grad_scale, float *dlogits, double *partial,
                     int nblocks) {
    __shared__ double sh[32];
    double loss = 0, wsum = 0;
    GRID_STRIDE(p, pixels) {
        size_t base = pixel_base(nhwc, p, c, hw), cs = nhwc ? 1 : (size_t)hw;
        const float *x = logits + base;
        int lab = labels[p];
        float w = sg_ce_pixel_weight(sg_ce_valid(lab, c, ignore),
                                     class_w && lab < c ? class_w[lab] : 1.0f,
                                     sel_key ? sel_key[p] < sel_below : 1);
        if (w != 0.0f) {
            float m = x[0];
            for (int k = 1; k < c; k++) m = sg_ce_max(m, x[(size_t)k * cs]);
            float s = 0.0f;
            for (int k = 0; k < c; k++) s = sg_ce_sum(s, sg_ce_exp(x[(size_t)k * cs], m));
            float xl = x[(size_t)lab * cs]; /* read before dlogits (may alias) is written */
            loss += sg_ce_wloss(w, sg_ce_loss(m, s, xl));
            wsum += (double)w;
            if (dlogits) {
                float *d = dlogits + base;
                float gsp = sg_ce_pixel_scale(grad_scale, w);
                float inv = sg_ce_inv(gsp, s);
                for (int k = 0; k < c; k++) {
                    float v = sg_ce_grad(sg_ce_exp(x[(size_t)k * cs], m), inv);
                    d[(size_t)k * cs] = k == lab ? sg_ce_grad_label(v, gsp) : v;
                }
            }
        } else if (dlogits) {
            float *d = dlogits + base;
            for (int k = 0; k < c; k++) d[(size_t)k * cs] = 0.0f;
        }
    }
    loss = sg_block_sum(loss, sh);
    wsum = sg_block_sum(wsum, sh);
    if (threadIdx.x == 0) {
        partial[blockIdx.x] = loss;
        partial[nblocks + blockIdx.x] = wsum;
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

/* k_ce_total's sum, added to *acc as (sum / div1) / div2 instead */
__global__ void k_ce_acc(const double *partial, int nblocks, double *acc, double div1,
                         double div2) {
    __shared__ double sh[32];
    double l = 0;
    for (int i = threadIdx.x; i < nblocks; i += blockDim.x) l += partial[i];
    l = sg_block_sum(l, sh);
    if (threadIdx.x == 0) acc[0] = acc[0] + l / div1 / div2;
}

static void ce_run(sg_backend *be, const float *logits, const uint8_t *labels, int n, int c, int hw,
                   int ignore, const float *class_w, const float *sel_key, float sel_below,
                   float grad_scale, float *dlogits, double *loss_sum, double *weight_sum) {
    sg_cuda *cu = sg_cu(be);
    size_t pixels = (size_t)n * hw;
    SG_CHECK(c > 0, "CUDA backend: ce_fwd_bwd with %d classes", c);
    if (!pixels) {
        *loss_sum = 0;
        *weight_sum = 0;
        return;
    }
    cudaStream_t s = sg_cu_stream(be);
    unsigned blocks = sg_cu_blocks(pixels, SG_CUDA_RED_THREADS);
    if (blocks > SG_CUDA_RED_BLOCKS) blocks = SG_CUDA_RED_BLOCKS;
    SG_LAUNCH(blocks, SG_CUDA_RED_THREADS, 0, s, k_ce)
    (logits, labels, c, hw, sg_cu_nhwc(be), pixels, ignore, class_w, sel_key, sel_below, grad_scale,
     dlogits, cu->red_partial, (int)blocks);
    CU_LAUNCH_CHECK("k_ce");
    SG_LAUNCH(1, SG_CUDA_RED_THREADS, 0, s, k_ce_total)
    (cu->red_partial, (int)blocks, cu->red_result);
    CU_LAUNCH_CHECK("k_ce_total");
    double r[2];
    sg_cuda_read_result(be, r, 2);
    *loss_sum = r[0];
    *weight_sum = r[1];
}

/* ce_run's kernels, the sum added on the device (ce_weighted_acc): no read-back */
static void sg_cuda_ce_weighted_acc(sg_backend *be, const float *logits, const uint8_t *labels,
                                    int n, int c, int hw, int ignore, const float *class_w,
                                    const float *sel_key, float sel_below, float grad_scale,
                                    float *dlogits, double *acc, double div1, double div2) {
    sg_cuda *cu = sg_cu(be);
    size_t pixels = (size_t)n * hw;
    SG_CHECK(c > 0, "CUDA backend: ce_weighted_acc with %d classes", c);
    if (!pixels) return; /* a sum of 0: *acc + 0 / div1 / div2 is *acc for div1, div2 != 0 */
    cudaStream_t s = sg_cu_stream(be);
    unsigned blocks = sg_cu_blocks(pixels, SG_CUDA_RED_THREADS);
    if (blocks > SG_CUDA_RED_BLOCKS) blocks = SG_CUDA_RED_BLOCKS;
    SG_LAUNCH(blocks, SG_CUDA_RED_THREADS, 0, s, k_ce)
    (logits, labels, c, hw, sg_cu_nhwc(be), pixels, ignore, class_w, sel_key, sel_below, grad_scale,
     dlogits, cu->red_partial, (int)blocks);
    CU_LAUNCH_CHECK("k_ce");
    if (!acc) return;
    SG_LAUNCH(1, SG_CUDA_RED_THREADS, 0, s, k_ce_acc)
    (cu->red_partial, (int)blocks, acc, div1, div2);
    CU_LAUNCH_CHECK("k_ce_acc");
    sg_cuda_written(be, acc, sizeof(double));
}

static void sg_cuda_ce_fwd_bwd(sg_backend *be, const float *logits, const uint8_t *labels, int n,
                               int c, int hw, int ignore, float grad_scale, float *dlogits,
                               double *loss_sum, int64_t *valid) {
    double w = 0;
    ce_run(be, logits, labels, n, c, hw, ignore, NULL, NULL, 0.0f, grad_scale, dlogits, loss_sum,
           &w);
    *valid = (int64_t)w;
}

static void sg_cuda_ce_weighted(sg_backend *be, const float *logits, const uint8_t *labels, int n,
                                int c, int hw, int ignore, const float *class_w,
                                const float *sel_key, float sel_below, float grad_scale,
                                float *dlogits, double *loss_sum, double *weight_sum) {
    ce_run(be, logits, labels, n, c, hw, ignore, class_w, sel_key, sel_below, grad_scale, dlogits,
           loss_sum, weight_sum);
}

__global__ void k_label_prob(const float *logits, const uint8_t *labels, int c, int hw, int nhwc,
                             size_t pixels, int ignore, float *prob) {
    GRID_STRIDE(p, pixels) {
        size_t cs = nhwc ? 1 : (size_t)hw;
        const float *x = logits + pixel_base(nhwc, p, c, hw);
        int lab = labels[p];
        if (!sg_ce_valid(lab, c, ignore)) {
            prob[p] = __int_as_float(0x7f800000); /* +inf */
            continue;
        }
        float m = x[0];
        for (int k = 1; k < c; k++) m = sg_ce_max(m, x[(size_t)k * cs]);
        float s = 0.0f;
        for (int k = 0; k < c; k++) s = sg_ce_sum(s, sg_ce_exp(x[(size_t)k * cs], m));
        prob[p] = sg_ce_prob(sg_ce_exp(x[(size_t)lab * cs], m), s);
    }
}

static void sg_cuda_ce_label_prob(sg_backend *be, const float *logits, const uint8_t *labels, int n,
                                  int c, int hw, int ignore, float *prob) {
    SG_CHECK(c > 0, "CUDA backend: ce_label_prob with %d classes", c);
    size_t pixels = (size_t)n * hw;
    if (!pixels) return;
    SG_LAUNCH(sg_cu_blocks(pixels, EW_THREADS), EW_THREADS, 0, sg_cu_stream(be), k_label_prob)
    (logits, labels, c, hw, sg_cu_nhwc(be), pixels, ignore, prob);
    CU_LAUNCH_CHECK("k_label_prob");
}

/* Radix select (kernels/formulas/radix_select.h) with its state on the
 * device, so the four passes run back to back on the stream and the host
 * waits once. Scratch: the backend's reduction partials (8 KiB), as
 * RS_BINS uint64 counts followed by the state {prefix, mask, rank}. */
#define RS_BINS 256

__global__ void k_rs_init(uint64_t *hist, size_t k) {
    for (int b = threadIdx.x; b < RS_BINS; b += blockDim.x) hist[b] = 0;
    if (threadIdx.x == 0) {
        uint64_t *st = hist + RS_BINS;
        st[0] = 0; /* prefix */
        st[1] = 0; /* mask */
        st[2] = k; /* rank */
    }
}

__global__ void k_rs_hist(const float *x, size_t count, uint64_t *hist, int shift) {
    __shared__ unsigned int bins[RS_BINS];
    for (int b = threadIdx.x; b < RS_BINS; b += blockDim.x) bins[b] = 0;
    __syncthreads();
    const uint64_t *st = hist + RS_BINS;
    uint32_t prefix = (uint32_t)st[0], mask = (uint32_t)st[1];
    GRID_STRIDE(i, count) {
        uint32_t u = sg_rs_key(x[i]);
        if ((u & mask) == prefix) atomicAdd(&bins[(u >> shift) & 255u], 1u);
    }
    __syncthreads();
    for (int b = threadIdx.x; b < RS_BINS; b += blockDim.x)
        if (bins[b]) atomicAdd((unsigned long long *)&hist[b], (unsigned long long)bins[b]);
}

/* One thread picks the digit and clears the counts for the next pass; after
 * the last pass the value goes to out[0]. */
__global__ void k_rs_pick(uint64_t *hist, int shift, double *out) {
    uint64_t *st = hist + RS_BINS;
    if (threadIdx.x == 0) {
        uint64_t rank = st[2];
        int digit = sg_rs_pick(hist, &rank);
        st[2] = rank;
        st[0] |= (uint64_t)digit << shift;
        st[1] |= (uint64_t)255u << shift;
        if (shift == 0) out[0] = (double)sg_rs_value((uint32_t)st[0]);
    }
    __syncthreads();
    for (int b = threadIdx.x; b < RS_BINS; b += blockDim.x) hist[b] = 0;
}

static float sg_cuda_kth_smallest(sg_backend *be, const float *x, size_t count, size_t k) {
    SG_CHECK(k < count, "CUDA backend: kth_smallest: k %zu of %zu values", k, count);
    sg_cuda *cu = sg_cu(be);
    static_assert((RS_BINS + 3) * sizeof(uint64_t) <= 2 * SG_CUDA_RED_BLOCKS * sizeof(double),
                  "radix select scratch must fit the reduction partials");
    uint64_t *hist = (uint64_t *)cu->red_partial;
    cudaStream_t s = sg_cu_stream(be);
    unsigned blocks = sg_cu_blocks(count, EW_THREADS);
    unsigned cap = (unsigned)cu->sm_count * 4;
    if (blocks > cap) blocks = cap;
    SG_LAUNCH(1, RS_BINS, 0, s, k_rs_init)(hist, k);
    CU_LAUNCH_CHECK("k_rs_init");
    for (int shift = 24; shift >= 0; shift -= 8) {
        SG_LAUNCH(blocks, EW_THREADS, 0, s, k_rs_hist)(x, count, hist, shift);
        CU_LAUNCH_CHECK("k_rs_hist");
        SG_LAUNCH(1, RS_BINS, 0, s, k_rs_pick)(hist, shift, cu->red_result);
        CU_LAUNCH_CHECK("k_rs_pick");
    }
    double r;
    sg_cuda_read_result(be, &r, 1);
    return (float)r;
}

__global__ void k_argmax(const float *logits, uint8_t *pred, int c, int hw, int nhwc,
                         size_t pixels) {
    GRID_STRIDE(p, pixels) {
        size_t cs = nhwc ? 1 : (size_t)hw;
        const float *x = logits + pixel_base(nhwc, p, c, hw);
        float best = x[0];
        int bi = 0;
        for (int k = 1; k < c; k++) {
            float v = x[(size_t)k * cs];
            if (v > best) { /* first max wins */
                best = v;
                bi = k;
            }
        }
        pred[p] = (uint8_t)bi;
    }
}

static void sg_cuda_argmax(sg_backend *be, const float *logits, uint8_t *pred, int n, int c,
                           int hw) {
    SG_CHECK(c > 0 && c <= 256, "CUDA backend: argmax over %d classes (uint8 output: 1..256)", c);
    size_t pixels = (size_t)n * hw;
    if (!pixels) return;
    SG_LAUNCH(sg_cu_blocks(pixels, EW_THREADS), EW_THREADS, 0, sg_cu_stream(be), k_argmax)
    (logits, pred, c, hw, sg_cu_nhwc(be), pixels);
    CU_LAUNCH_CHECK("k_argmax");
}

__global__ void k_confusion_smem(const uint8_t *pred, const uint8_t *labels, size_t count, int c,
                                 int64_t *conf) {
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

__global__ void k_confusion_global(const uint8_t *pred, const uint8_t *labels, size_t count, int c,
                                   int64_t *conf) {
    GRID_STRIDE(i, count) {
        int l = labels[i], p = pred[i];
        if (l < c && p < c) atomicAdd((unsigned long long *)&conf[l * c + p], 1ull);
    }
}

static void sg_cuda_confusion(sg_backend *be, const uint8_t *pred, const uint8_t *labels,
                              size_t count, int c, int64_t *conf) {
    SG_CHECK(c > 0 && c <= 256, "CUDA backend: confusion over %d classes (1..256)", c);
    if (!count) return;
    unsigned blocks = sg_cu_blocks(count, EW_THREADS);
    if (c * c <= SMEM_BINS) {
        /* few blocks: each block's histogram covers many pixels */
        unsigned cap = (unsigned)sg_cu(be)->sm_count * 4;
        if (blocks > cap) blocks = cap;
        SG_LAUNCH(blocks, EW_THREADS, 0, sg_cu_stream(be), k_confusion_smem)
        (pred, labels, count, c, conf);
        CU_LAUNCH_CHECK("k_confusion_smem");
    } else {
        SG_LAUNCH(blocks, EW_THREADS, 0, sg_cu_stream(be), k_confusion_global)
        (pred, labels, count, c, conf);
        CU_LAUNCH_CHECK("k_confusion_global");
    }
}

void sg_cuda_fill_loss_ops(sg_ops *o) {
    o->ce_fwd_bwd = sg_cuda_ce_fwd_bwd;
    o->ce_weighted = sg_cuda_ce_weighted;
    o->ce_weighted_acc = sg_cuda_ce_weighted_acc;
    o->ce_label_prob = sg_cuda_ce_label_prob;
    o->kth_smallest = sg_cuda_kth_smallest;
    o->argmax = sg_cuda_argmax;
    o->confusion = sg_cuda_confusion;
}
