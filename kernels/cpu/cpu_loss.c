/* kernels/cpu/cpu_loss.c - fused softmax cross-entropy (forward + gradient,
 * ignore_index), argmax and confusion-matrix accumulation on the CPU.
 * CE works on blocks of pixels with the class loop outside, so the inner
 * loops run over contiguous pixels and vectorize; log-sum-exp is shifted by
 * the per-pixel max, and the loss is summed in double. The per-pixel
 * arithmetic is kernels/formulas/cross_entropy.h, shared with the CUDA
 * backend.
 */
#include "kernels/cpu/cpu_internal.h"
#include "kernels/formulas/cross_entropy.h"

#define CE_BLOCK 256
#define CE_CHUNKS 256 /* fixed partial sums of the loss (see ce_fwd_bwd) */

static void ce_fwd_bwd(sg_backend *be, const float *logits, const uint8_t *labels, int n,
                       int c, int hw, int ignore, float grad_scale, float *dlogits,
                       double *loss_sum, int64_t *valid) {
    (void)be;
    int blocks = (hw + CE_BLOCK - 1) / CE_BLOCK;
    long tasks = (long)n * blocks;
    /* The loss is summed per fixed chunk of tasks, then the chunks in order:
     * the result does not depend on the thread count or on which thread
     * finishes first (an OpenMP reduction combines in arrival order). */
    double part_loss[CE_CHUNKS];
    int64_t part_valid[CE_CHUNKS];
    long per_chunk = (tasks + CE_CHUNKS - 1) / CE_CHUNKS;
#pragma omp parallel for schedule(static) if ((size_t)n * c * hw >= SG_CPU_PAR_MIN)
    for (int ch = 0; ch < CE_CHUNKS; ch++) {
        double loss = 0;
        int64_t nvalid = 0;
        long t_end = (ch + 1) * per_chunk < tasks ? (ch + 1) * per_chunk : tasks;
        for (long t = ch * per_chunk; t < t_end; t++) {
            int i = (int)(t / blocks), p0 = (int)(t % blocks) * CE_BLOCK;
            int len = hw - p0 < CE_BLOCK ? hw - p0 : CE_BLOCK;
            const float *l = logits + (size_t)i * c * hw + p0;
            const uint8_t *lab = labels + (size_t)i * hw + p0;
            float *dl = dlogits ? dlogits + (size_t)i * c * hw + p0 : NULL;
            float mx[CE_BLOCK], se[CE_BLOCK];
            for (int q = 0; q < len; q++) {
                mx[q] = l[q];
                se[q] = 0;
            }
            for (int k = 1; k < c; k++) {
                const float *lk = l + (size_t)k * hw;
#pragma omp simd
                for (int q = 0; q < len; q++) mx[q] = sg_ce_max(mx[q], lk[q]);
            }
            /* The label's logit, read before dlogits is written (it may alias
             * logits: every element is read before it is overwritten). */
            float ly[CE_BLOCK];
            for (int q = 0; q < len; q++) {
                int y = lab[q];
                ly[q] = sg_ce_valid(y, c, ignore) ? l[(size_t)y * hw + q] : 0.0f;
            }
            /* exp(l - max) once per logit; kept in dlogits for the gradient. */
            for (int k = 0; k < c; k++) {
                const float *lk = l + (size_t)k * hw;
                if (dl) {
                    float *dk = dl + (size_t)k * hw;
                    for (int q = 0; q < len; q++) {
                        dk[q] = sg_ce_exp(lk[q], mx[q]);
                        se[q] = sg_ce_sum(se[q], dk[q]);
                    }
                } else {
                    for (int q = 0; q < len; q++) se[q] = sg_ce_sum(se[q], sg_ce_exp(lk[q], mx[q]));
                }
            }
            for (int q = 0; q < len; q++) {
                int y = lab[q];
                if (!sg_ce_valid(y, c, ignore)) continue;
                loss += sg_ce_loss(mx[q], se[q], ly[q]);
                nvalid++;
            }
            if (!dl) continue;
            float inv[CE_BLOCK]; /* grad_scale / sum, 0 at ignored pixels */
            for (int q = 0; q < len; q++) {
                int y = lab[q];
                inv[q] = sg_ce_valid(y, c, ignore) ? sg_ce_inv(grad_scale, se[q]) : 0.0f;
            }
            for (int k = 0; k < c; k++) {
                float *dk = dl + (size_t)k * hw;
#pragma omp simd
                for (int q = 0; q < len; q++) dk[q] = sg_ce_grad(dk[q], inv[q]);
            }
            for (int q = 0; q < len; q++) {
                int y = lab[q];
                if (sg_ce_valid(y, c, ignore)) {
                    dl[(size_t)y * hw + q] = sg_ce_grad_label(dl[(size_t)y * hw + q], grad_scale);
                } else { /* exactly 0, even where the logits are not finite */
                    for (int k = 0; k < c; k++) dl[(size_t)k * hw + q] = 0.0f;
                }
            }
        }
        part_loss[ch] = loss;
        part_valid[ch] = nvalid;
    }
    double loss = 0;
    int64_t nvalid = 0;
    for (int ch = 0; ch < CE_CHUNKS; ch++) {
        loss += part_loss[ch];
        nvalid += part_valid[ch];
    }
    *loss_sum = loss;
    *valid = nvalid;
}

static void argmax(sg_backend *be, const float *logits, uint8_t *pred, int n, int c, int hw) {
    (void)be;
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
}
