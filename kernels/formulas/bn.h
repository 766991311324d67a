/* kernels/formulas/bn.h - batch-norm arithmetic shared by both backends
 * (kernels/cpu/cpu_bn.c, kernels/cuda/cuda_bn.cu); compiles as C and CUDA.
 *
 * Holds: Chan's parallel merge of partial statistics (count, mean, M2) in
 * double; the finalize of one channel (mean, invstd = 1/sqrt(var_biased +
 * eps), running stats with momentum and the unbiased variance M2/(N-1),
 * M2/N when N == 1); the eval-mode invstd; and the per-element forward and
 * backward formulas with their per-channel coefficients (backend.h states
 * the contract). The reductions that produce the partial statistics, and
 * the loops, stay in each backend.
 *
 * Every operation is rounded the same way on both sides (hostdev.h), so a
 * channel's mean/invstd/running stats from the same partial statistics, and
 * the per-element results from the same inputs, are bit-identical.
 */
#ifndef SG_KERNELS_FORMULAS_BN_H
#define SG_KERNELS_FORMULAS_BN_H

#include <math.h>

#include "kernels/formulas/hostdev.h"

/* Statistics of a set of values: count, mean, sum of squared deviations. */
typedef struct sg_bn_moments {
    double n, mean, m2;
} sg_bn_moments;

/* Chan's merge: folds a part (nb values, mean mb, M2 m2b) into *a. A part
 * with no values is skipped (its mean is meaningless). Parts merged in the
 * same order give the same bits. */
static inline SG_HD void sg_bn_merge(sg_bn_moments *a, double nb, double mb, double m2b) {
    if (!(nb > 0)) return;
    double nab = sg_dadd(a->n, nb), delta = sg_dsub(mb, a->mean);
    a->mean = sg_dadd(a->mean, sg_dmul(delta, nb / nab));
    a->m2 = sg_dadd(a->m2, sg_dadd(m2b, sg_dmul(sg_dmul(delta, delta), sg_dmul(a->n, nb) / nab)));
    a->n = nab;
}

/* 1/sqrt(var + eps), in double, rounded once to float. */
static inline SG_HD float sg_bn_invstd(double var, float eps) {
    return (float)(1.0 / sqrt(sg_dadd(var, (double)eps)));
}

/* (1 - momentum)*old + momentum*v, in double (PyTorch's running update). */
static inline SG_HD float sg_bn_running(float old, double v, float momentum) {
    double mo = (double)momentum;
    return (float)sg_dadd(sg_dmul(sg_dsub(1.0, mo), (double)old), sg_dmul(mo, v));
}

/* One channel's finalize from its merged statistics: *mean, *invstd
 * (biased variance M2/N; 0 when N is 0) and, when running_mean is not NULL,
 * the running stats (unbiased variance M2/(N-1), or M2/N when N is 1
 * instead of dividing by zero). */
static inline SG_HD void sg_bn_finalize_channel(const sg_bn_moments *s, float eps, float momentum,
                                                float *mean, float *invstd, float *running_mean,
                                                float *running_var) {
    double var = s->n > 0 ? s->m2 / s->n : 0.0;
    *mean = (float)s->mean;
    *invstd = sg_bn_invstd(var, eps);
    if (running_mean) {
        double unbiased = s->n > 1 ? s->m2 / sg_dsub(s->n, 1.0) : var;
        *running_mean = sg_bn_running(*running_mean, s->mean, momentum);
        *running_var = sg_bn_running(*running_var, unbiased, momentum);
    }
}

/* Eval mode: invstd from the running variance. */
static inline SG_HD float sg_bn_eval_invstd(float running_var, float eps) {
    return sg_bn_invstd((double)running_var, eps);
}

/* ---- per element ---- */

/* max(0, v); NaN -> 0 (v > 0 is false). */
static inline SG_HD float sg_relu(float v) { return v > 0.0f ? v : 0.0f; }
/* g where the ReLU's output y passed it, else 0 (y > 0; NaN blocks). */
static inline SG_HD float sg_relu_mask(float g, float y) { return y > 0.0f ? g : 0.0f; }

/* Forward: y = (x - mean)*a + beta with a = invstd*gamma rounded from
 * double; subtracting the mean first keeps precision when |mean| >> std. */
static inline SG_HD float sg_bn_fwd_scale(float invstd, float gamma) {
    return (float)sg_dmul((double)invstd, (double)gamma);
}
static inline SG_HD float sg_bn_fwd_elem(float x, float mean, float a, float beta) {
    return sg_fadd(sg_fmul(sg_fsub(x, mean), a), beta);
}

/* Backward: dx = g*A + (x - mean)*B + C, the contract's
 * (g - red_g/count - (x-mean)*invstd^2*red_gx/count) * invstd * gamma with
 * the per-channel coefficients computed in double. */
typedef struct sg_bn_bwd_coefs {
    float A, B, C;
} sg_bn_bwd_coefs;

static inline SG_HD sg_bn_bwd_coefs sg_bn_bwd_coefs_of(float invstd, float gamma, float red_g,
                                                       float red_gx, double count) {
    double is = (double)invstd, gi = sg_dmul(is, (double)gamma);
    sg_bn_bwd_coefs k;
    k.A = (float)gi;
    k.B = (float)sg_dmul(sg_dmul(sg_dmul(-(double)red_gx / count, is), is), gi);
    k.C = (float)sg_dmul(-(double)red_g / count, gi);
    return k;
}
static inline SG_HD float sg_bn_bwd_elem(float g, float x, float mean, float A, float B, float C) {
    return sg_fadd(sg_fadd(sg_fmul(g, A), sg_fmul(sg_fsub(x, mean), B)), C);
}

/* dgamma contribution: red_gx * invstd, one rounding. */
static inline SG_HD float sg_bn_dgamma(float red_gx, float invstd) {
    return (float)sg_dmul((double)red_gx, (double)invstd);
}

#endif
