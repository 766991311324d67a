/* kernels/cpu/cpu_loss.c - the loss group on the CPU (the ops of
 * tests/backend/run_loss.c; kernels/cuda/cuda_loss.cu on the GPU): fused
 * softmax cross-entropy (forward + gradient, ignore_index; weighted / OHEM,
 * label probabilities), the k-th smallest value, argmax and
 * confusion-matrix accumulation.
 * CE works on blocks of pixels with the class loop outside, so the inner
 * loops run over contiguous pixels and vectorize; log-sum-exp is shifted by
 * the per-pixel max, and the loss is summed in double. The per-pixel
 * arithmetic is kernels/formulas/cross_entropy.h, shared with the CUDA
 * backend. The loss options (class weights, OHEM's selection key, the true
 * class's probability and the exact k-th smallest) are here too.
 * NHWC (be->layout): a pixel's classes are contiguous, so CE copies a
 * block of pixels to class-major order, runs the NCHW block on it and
 * copies the gradients back, inside the same tasks and chunks: the same
 * per-pixel arithmetic and class order, so the gradients and the summed
 * loss (pixels in the same order) are the same bits as NCHW. Labels,
 * predictions, probabilities and selection keys are per pixel: the same in
 * both layouts.
 * exp is the formula header's own (sg_ce_expf, Cephes' polynomial), not
 * glibc's expf: the class loops vectorise with it, which halved the loss's
 * share of the bf16 step (measured: docs/lab/cpu-step-2026.md).
 */
#include <omp.h>

#include "kernels/cpu/cpu_internal.h"
#include "kernels/formulas/cross_entropy.h"
#include "kernels/formulas/radix_select.h"

#define CE_BLOCK 256
#define CE_CHUNKS 256 /* fixed partial sums of the loss (see ce_fwd_bwd) */

/* Whether activations are stored NHWC and that differs from NCHW. */
static int is_nhwc(const sg_backend *be, int c, int hw) {
    return be->layout == SG_LAYOUT_NHWC && c > 1 && hw > 1;
}

/* Floats of a thread's class-major copy of an NHWC block (ce_core). */
#define CE_NHWC_FLOATS 16384

/* One block of len pixels of ce_core, classes apart by stride ks in l and
 * in dl (may alias l; NULL: no gradient): the loss of each pixel with
 * weight pw[q] != 0 added to *loss (in pixel order) and pw[q] to *wsum. */
SG_CPU_CLONES static void ce_block(const float *l, size_t ks, const uint8_t *lab, const float *pw,
                                   int len, int c, float grad_scale, float *dl, double *loss,
                                   double *wsum) {
    float mx[CE_BLOCK], se[CE_BLOCK], ly[CE_BLOCK];
    for (int q = 0; q < len; q++) mx[q] = l[q], se[q] = 0.0f;
    for (int k = 1; k < c; k++) {
        const float *lk = l + (size_t)k * ks;
#pragma omp simd
        for (int q = 0; q < len; q++) mx[q] = sg_ce_max(mx[q], lk[q]);
    }
    /* The label's logit, read before dl is written (it may alias l: every
     * element is read before it is overwritten). */
    for (int q = 0; q < len; q++) ly[q] = pw[q] != 0.0f ? l[(size_t)lab[q] * ks + q] : 0.0f;
    /* exp(l - max) once per logit; kept in dl for the gradient. */
    for (int k = 0; k < c; k++) {
        const float *lk = l + (size_t)k * ks;
        if (dl) {
            float *dk = dl + (size_t)k * ks;
#pragma omp simd
            for (int q = 0; q < len; q++) {
                dk[q] = sg_ce_exp(lk[q], mx[q]);
                se[q] = sg_ce_sum(se[q], dk[q]);
            }
        } else {
#pragma omp simd
            for (int q = 0; q < len; q++) se[q] = sg_ce_sum(se[q], sg_ce_exp(lk[q], mx[q]));
        }
    }
    for (int q = 0; q < len; q++) {
        if (pw[q] == 0.0f) continue;
        *loss += sg_ce_wloss(pw[q], sg_ce_loss(mx[q], se[q], ly[q]));
        *wsum += (double)pw[q];
    }
    if (!dl) return;
    float gsp[CE_BLOCK], inv[CE_BLOCK]; /* grad_scale * w_p, / sum; 0 where w_p = 0 */
    for (int q = 0; q < len; q++) {
        gsp[q] = sg_ce_pixel_scale(grad_scale, pw[q]);
        inv[q] = pw[q] != 0.0f ? sg_ce_inv(gsp[q], se[q]) : 0.0f;
    }
    for (int k = 0; k < c; k++) {
        float *dk = dl + (size_t)k * ks;
#pragma omp simd
        for (int q = 0; q < len; q++) dk[q] = sg_ce_grad(dk[q], inv[q]);
    }
    for (int q = 0; q < len; q++) {
        int y = lab[q];
        if (pw[q] != 0.0f) {
            dl[(size_t)y * ks + q] = sg_ce_grad_label(dl[(size_t)y * ks + q], gsp[q]);
        } else { /* exactly 0, even where the logits are not finite */
            for (int k = 0; k < c; k++) dl[(size_t)k * ks + q] = 0.0f;
        }
    }
}

/* The fused loss of ce_fwd_bwd and ce_weighted: pixel p counts with weight
 * w_p (backend.h, ce_weighted); w_p == 1 for every valid pixel reproduces the
 * plain loss bit for bit (grad_scale * 1 and 1.0 * loss are exact). */
static void ce_core(sg_backend *be, const float *logits, const uint8_t *labels, int n, int c,
                    int hw, int ignore, const float *class_w, const float *sel_key, float sel_below,
                    float grad_scale, float *dlogits, double *loss_sum, double *weight_sum) {
    /* NHWC blocks are copied class-major into a per-thread buffer of
     * CE_NHWC_FLOATS: fewer pixels a block with many classes (the same
     * results: the loss is summed pixel by pixel in order either way) */
    int nhwc = is_nhwc(be, c, hw);
    int bl = CE_BLOCK;
    if (nhwc && (long)bl * c > CE_NHWC_FLOATS) bl = c < CE_NHWC_FLOATS ? CE_NHWC_FLOATS / c : 1;
    int blocks = (hw + bl - 1) / bl;
    long tasks = (long)n * blocks;
    /* The loss is summed per fixed chunk of tasks, then the chunks in order:
     * the result does not depend on the thread count or on which thread
     * finishes first (an OpenMP reduction combines in arrival order). */
    double part_loss[CE_CHUNKS];
    double part_w[CE_CHUNKS];
    long per_chunk = (tasks + CE_CHUNKS - 1) / CE_CHUNKS;
    float *bufs = nhwc ? sg_cpu_act_buf(be, 0, (size_t)bl * c * omp_get_max_threads()) : NULL;
#pragma omp parallel for schedule(static) if ((size_t)n * c * hw >= SG_CPU_PAR_MIN)
    for (int ch = 0; ch < CE_CHUNKS; ch++) {
        double loss = 0, wsum = 0;
        float pw[CE_BLOCK];
        long t_end = (ch + 1) * per_chunk < tasks ? (ch + 1) * per_chunk : tasks;
        for (long t = ch * per_chunk; t < t_end; t++) {
            int i = (int)(t / blocks), p0 = (int)(t % blocks) * bl;
            int len = hw - p0 < bl ? hw - p0 : bl;
            size_t px = (size_t)i * hw + p0; /* the block's first pixel */
            const uint8_t *lab = labels + px;
            for (int q = 0; q < len; q++) {
                int y = lab[q];
                pw[q] = sg_ce_pixel_weight(sg_ce_valid(y, c, ignore),
                                           class_w && y < c ? class_w[y] : 1.0f,
                                           sel_key ? sel_key[px + q] < sel_below : 1);
            }
            if (!nhwc) {
                const float *l = logits + (size_t)i * c * hw + p0;
                float *dl = dlogits ? dlogits + (size_t)i * c * hw + p0 : NULL;
                ce_block(l, (size_t)hw, lab, pw, len, c, grad_scale, dl, &loss, &wsum);
                continue;
            }
            /* NHWC: the block class-major into buf, the NCHW block on it,
             * the gradients back */
            float *buf = bufs + (size_t)bl * c * omp_get_thread_num();
            const float *l = logits + px * c;
            for (int q = 0; q < len; q++)
                for (int k = 0; k < c; k++) buf[(size_t)k * len + q] = l[(size_t)q * c + k];
            ce_block(buf, (size_t)len, lab, pw, len, c, grad_scale, dlogits ? buf : NULL, &loss,
                     &wsum);
            if (!dlogits) continue;
            float *dl = dlogits + px * c;
            for (int q = 0; q < len; q++)
                for (int k = 0; k < c; k++) dl[(size_t)q * c + k] = buf[(size_t)k * len + q];
        }
        part_loss[ch] = loss;
        part_w[ch] = wsum;
    }
    double loss = 0, wsum = 0;
    for (int ch = 0; ch < CE_CHUNKS; ch++) {
        loss += part_loss[ch];
        wsum += part_w[ch];
    }
    *loss_sum = loss;
    *weight_sum = wsum;
}

static void ce_fwd_bwd(sg_backend *be, const float *logits, const uint8_t *labels, int n, int c,
                       int hw, int ignore, float grad_scale, float *dlogits, double *loss_sum,
                       int64_t *valid) {
    double w = 0;
    ce_core(be, logits, labels, n, c, hw, ignore, NULL, NULL, 0.0f, grad_scale, dlogits, loss_sum,
            &w);
    *valid = (int64_t)w; /* a count below 2^53: exact in double */
}

static void ce_weighted(sg_backend *be, const float *logits, const uint8_t *labels, int n, int c,
                        int hw, int ignore, const float *class_w, const float *sel_key,
                        float sel_below, float grad_scale, float *dlogits, double *loss_sum,
                        double *weight_sum) {
    ce_core(be, logits, labels, n, c, hw, ignore, class_w, sel_key, sel_below, grad_scale, dlogits,
            loss_sum, weight_sum);
}

/* ce_core with the sum added to *acc (host memory on this backend) */
static void ce_weighted_acc(sg_backend *be, const float *logits, const uint8_t *labels, int n,
                            int c, int hw, int ignore, const float *class_w, const float *sel_key,
                            float sel_below, float grad_scale, float *dlogits, double *acc,
                            double div1, double div2) {
    double loss = 0, wsum = 0;
    ce_core(be, logits, labels, n, c, hw, ignore, class_w, sel_key, sel_below, grad_scale, dlogits,
            &loss, &wsum);
    if (!acc) return;
    if ((size_t)n * hw == 0) return; /* as the CUDA backend: nothing added */
    *acc = *acc + loss / div1 / div2;
}

static void ce_label_prob(sg_backend *be, const float *logits, const uint8_t *labels, int n, int c,
                          int hw, int ignore, float *prob) {
    size_t pixels = (size_t)n * hw;
    /* where class k of pixel p lies: l[k * ks] from that pixel's first */
    int nhwc = is_nhwc(be, c, hw);
    size_t ks = nhwc ? 1 : (size_t)hw;
#pragma omp parallel for schedule(static) if (pixels * c >= SG_CPU_PAR_MIN)
    for (size_t p = 0; p < pixels; p++) {
        size_t i = p / hw, q = p % hw;
        const float *l = nhwc ? logits + p * c : logits + i * c * hw + q;
        int y = labels[p];
        if (!sg_ce_valid(y, c, ignore)) {
            prob[p] = INFINITY;
            continue;
        }
        float mx = l[0], se = 0;
        for (int k = 1; k < c; k++) mx = sg_ce_max(mx, l[k * ks]);
        for (int k = 0; k < c; k++) se = sg_ce_sum(se, sg_ce_exp(l[k * ks], mx));
        prob[p] = sg_ce_prob(sg_ce_exp(l[y * ks], mx), se);
    }
}

/* Radix select (kernels/formulas/radix_select.h): four passes of 8 bits,
 * each a 256-bin histogram of the values whose higher bits match the prefix
 * chosen so far. Integer counts: the same on any thread count. */
static float kth_smallest(sg_backend *be, const float *x, size_t count, size_t k) {
    (void)be;
    uint32_t prefix = 0, mask = 0;
    uint64_t rank = k;
    for (int shift = 24; shift >= 0; shift -= 8) {
        uint64_t hist[256] = {0};
#pragma omp parallel for schedule(static) reduction(+ : hist[:256]) if (count >= SG_CPU_PAR_MIN)
        for (size_t i = 0; i < count; i++) {
            uint32_t u = sg_rs_key(x[i]);
            if ((u & mask) == prefix) hist[(u >> shift) & 255u]++;
        }
        int digit = sg_rs_pick(hist, &rank);
        prefix |= (uint32_t)digit << shift;
        mask |= 255u << shift;
    }
    return sg_rs_value(prefix);
}

/* NHWC: per pixel over its contiguous classes (first maximum wins). */
static void argmax_nhwc(const float *logits, uint8_t *pred, int n, int c, int hw) {
    long pixels = (long)n * hw;
#pragma omp parallel for schedule(static) if ((size_t)pixels * c >= SG_CPU_PAR_MIN)
    for (long p = 0; p < pixels; p++) {
        const float *l = logits + (size_t)p * c;
        float best = l[0];
        int bk = 0;
        for (int k = 1; k < c; k++)
            if (l[k] > best) {
                best = l[k];
                bk = k;
            }
        pred[p] = (uint8_t)bk;
    }
}

static void argmax(sg_backend *be, const float *logits, uint8_t *pred, int n, int c, int hw) {
    if (is_nhwc(be, c, hw)) {
        argmax_nhwc(logits, pred, n, c, hw);
        return;
    }
    long planes = n;
#pragma omp parallel for schedule(static) if ((size_t)n * c * hw >= SG_CPU_PAR_MIN)
    for (long i = 0; i < planes; i++) {
        const float *l = logits + (size_t)i * c * hw;
        uint8_t *pp = pred + (size_t)i * hw;
        for (int q = 0; q < hw; q++) {
            float best = l[q];
            int bk = 0;
            for (int k = 1; k < c; k++) {
                float v = l[(size_t)k * hw + q];
                if (v > best) {
                    best = v;
                    bk = k;
                }
            }
            pp[q] = (uint8_t)bk;
        }
    }
}

static void confusion(sg_backend *be, const uint8_t *pred, const uint8_t *labels, size_t count,
                      int c, int64_t *conf) {
    (void)be;
    for (size_t i = 0; i < count; i++)
        if (labels[i] < c && pred[i] < c) conf[(size_t)labels[i] * c + pred[i]] += 1;
}

void sg_cpu_fill_loss_ops(sg_ops *ops) {
    ops->ce_fwd_bwd = ce_fwd_bwd;
    ops->argmax = argmax;
    ops->confusion = confusion;
    ops->ce_weighted = ce_weighted;
    ops->ce_weighted_acc = ce_weighted_acc;
    ops->ce_label_prob = ce_label_prob;
    ops->kth_smallest = kth_smallest;
}
