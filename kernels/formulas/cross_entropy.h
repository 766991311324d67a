/* kernels/formulas/cross_entropy.h - the per-pixel arithmetic of the fused
 * softmax cross-entropy (backend.h, ce_fwd_bwd), shared by
 * kernels/cpu/cpu_loss.c and kernels/cuda/cuda_loss.cu; compiles as C and
 * CUDA.
 *
 * For one pixel with logits l[0..c) and label y:
 *   valid   = y != ignore && y < c (an ignored pixel adds no loss, counts
 *             as no pixel and gets a gradient of exactly 0)
 *   mx      = max_k l[k], scanning k upwards (v > mx replaces; a NaN logit
 *             never becomes the max)
 *   e[k]    = exp(l[k] - mx) (sg_ce_expf), sum = e[0] + e[1] + ... in
 *             float, in k order
 *   loss    = mx + log(sum) - l[y], in double (summed over pixels in double)
 *   dl[k]   = e[k] * (grad_scale / sum), minus grad_scale at k == y
 * With class weights and a selection (ce_weighted) a pixel counts with
 * w = class_w[y] if valid and selected, else 0: loss w * loss_p (double),
 * gradient as above with grad_scale * w (float), exactly 0 where w == 0.
 * The order of the pixels (the reduction of the loss) is each backend's.
 * The basic operations are rounded alike on both backends (hostdev.h), so
 * exp, built from them, is the same bits on both; log comes from each
 * side's math library (glibc on the CPU, CUDA's on the device), which agree
 * to within their documented couple of ulp, not bit for bit.
 */
#ifndef SG_KERNELS_FORMULAS_CROSS_ENTROPY_H
#define SG_KERNELS_FORMULAS_CROSS_ENTROPY_H

#include <math.h>

#include "kernels/formulas/bf16.h"
#include "kernels/formulas/hostdev.h"

/* 1 when label y contributes (not ignored, a class below c). */
static inline SG_HD int sg_ce_valid(int y, int c, int ignore) { return y != ignore && y < c; }

/* The running max over the classes. */
static inline SG_HD float sg_ce_max(float mx, float v) { return v > mx ? v : mx; }

/* exp(x) for x <= 0 (a logit minus the max): Cephes' expf, the same
 * operations on both backends (sg_f*, no library call), so the CPU's
 * class loops vectorise. x = n ln2 + r with n = round(x / ln2) (adding
 * 1.5 * 2^23 rounds to an integer), ln2 in two parts so n * C1 is exact,
 * then exp(r) on |r| <= ln2 / 2 as Cephes' degree-7 polynomial, times 2^n
 * from its exponent bits. Within 2 ulp of exp; exactly 1 at x == 0; 0
 * below -87 (exp there is under 1.7e-38, nothing next to a sum of at
 * least 1); NaN stays NaN. */
static inline SG_HD float sg_ce_expf(float x) {
    const float magic = 12582912.0f, log2e = 1.44269504088896341f;
    const float c1 = 0.693359375f, c2 = -2.12194440e-4f;
    float nf = sg_fsub(sg_fadd(sg_fmul(x, log2e), magic), magic);
    if (!(nf >= -126.0f)) nf = -126.0f; /* x < -87 (0 below) or NaN (r NaN) */
    if (nf > 0.0f) nf = 0.0f;           /* x <= 0: never, but keeps 2^n a float */
    float r = sg_fsub(sg_fsub(x, sg_fmul(nf, c1)), sg_fmul(nf, c2));
    float z = sg_fmul(r, r);
    float y = sg_fadd(sg_fmul(1.9875691500e-4f, r), 1.3981999507e-3f);
    y = sg_fadd(sg_fmul(y, r), 8.3334519073e-3f);
    y = sg_fadd(sg_fmul(y, r), 4.1665795894e-2f);
    y = sg_fadd(sg_fmul(y, r), 1.6666665459e-1f);
    y = sg_fadd(sg_fmul(y, r), 5.0000001201e-1f);
    y = sg_fadd(sg_fadd(sg_fmul(y, z), r), 1.0f);
    float scale = sg_f32_from_bits((uint32_t)((int)nf + 127) << 23);
    return x < -87.0f ? 0.0f : sg_fmul(y, scale);
}

/* exp(l - mx): the shifted exponential, at most 1. */
static inline SG_HD float sg_ce_exp(float l, float mx) { return sg_ce_expf(sg_fsub(l, mx)); }

/* sum + e, one class at a time (never fused with the exponential). */
static inline SG_HD float sg_ce_sum(float sum, float e) { return sg_fadd(sum, e); }

/* One pixel's loss: mx + log(sum) - l[y], in double. */
static inline SG_HD double sg_ce_loss(float mx, float sum, float ly) {
    return sg_dsub(sg_dadd((double)mx, log((double)sum)), (double)ly);
}

/* The weight a pixel counts with in ce_weighted (backend.h): 0 unless it is
 * valid and selected, else its class weight. */
static inline SG_HD float sg_ce_pixel_weight(int valid, float class_w, int selected) {
    return valid && selected ? class_w : 0.0f;
}

/* A pixel's weighted loss w * loss, in double. */
static inline SG_HD double sg_ce_wloss(float w, double loss) { return sg_dmul((double)w, loss); }

/* A pixel's gradient scale grad_scale * w (exact for w == 1). */
static inline SG_HD float sg_ce_pixel_scale(float grad_scale, float w) {
    return sg_fmul(grad_scale, w);
}

/* The softmax probability of the label: e[y] / sum (ce_label_prob). */
static inline SG_HD float sg_ce_prob(float ey, float sum) { return ey / sum; }

/* The gradient factor grad_scale / sum. */
static inline SG_HD float sg_ce_inv(float grad_scale, float sum) { return grad_scale / sum; }

/* dl[k] = e[k] * inv; at the label, minus grad_scale (sg_ce_grad_label). */
static inline SG_HD float sg_ce_grad(float e, float inv) { return sg_fmul(e, inv); }
static inline SG_HD float sg_ce_grad_label(float dk, float grad_scale) {
    return sg_fsub(dk, grad_scale);
}

#endif
