/* kernels/cpu/cpu_bn.c - batch norm on the CPU, split the way SyncBN needs
 * it (see backend.h): per-channel statistics (two-pass, double
 * accumulation), Chan's merge of partial statistics, normalize + affine
 * (+ fused ReLU), and the backward reduce / elementwise / parameter grads.
 * Threads split channels for reductions and (n, c) planes for elementwise
 * work; the inner loops are `omp simd` so they vectorize.
 */
#include <math.h>

#include "kernels/cpu/cpu_internal.h"

static void bn_stats(sg_backend *be, const float *x, int n, int c, int hw, float *stats) {
    (void)be;
    double cnt = (double)n * hw;
#pragma omp parallel for schedule(static) if ((size_t)n * c * hw >= SG_CPU_PAR_MIN)
    for (int ch = 0; ch < c; ch++) {
        double s = 0;
        for (int i = 0; i < n; i++) {
            const float *p = x + ((size_t)i * c + ch) * hw;
#pragma omp simd reduction(+ : s)
            for (int q = 0; q < hw; q++) s += p[q];
        }
        double mean = s / cnt, m2 = 0;
        for (int i = 0; i < n; i++) {
            const float *p = x + ((size_t)i * c + ch) * hw;
#pragma omp simd reduction(+ : m2)
            for (int q = 0; q < hw; q++) {
                double dlt = (double)p[q] - mean;
                m2 += dlt * dlt;
            }
        }
        stats[ch] = (float)mean;
        stats[c + ch] = (float)m2;
    }
}

static void bn_finalize(sg_backend *be, const float *parts_stats, const int64_t *counts,
                        int parts, int c, float eps, float momentum, float *mean,
                        float *invstd, float *running_mean, float *running_var) {
    (void)be;
    for (int ch = 0; ch < c; ch++) {
        double na = 0, ma = 0, m2a = 0;
        for (int p = 0; p < parts; p++) {
            if (counts[p] <= 0) continue;
            double nb = (double)counts[p];
            double mb = parts_stats[(size_t)p * 2 * c + ch];
            double m2b = parts_stats[(size_t)p * 2 * c + c + ch];
            double nab = na + nb, delta = mb - ma;
            ma += delta * (nb / nab);
            m2a += m2b + delta * delta * (na * nb / nab);
            na = nab;
        }
        double var = na > 0 ? m2a / na : 0.0;
        mean[ch] = (float)ma;
        invstd[ch] = (float)(1.0 / sqrt(var + (double)eps));
        if (running_mean) {
            double unbiased = na > 1 ? m2a / (na - 1) : var;
            running_mean[ch] = (float)((1.0 - momentum) * running_mean[ch] + momentum * ma);
            running_var[ch] =
                (float)((1.0 - momentum) * running_var[ch] + momentum * unbiased);
        }
    }
}

static void bn_eval_params(sg_backend *be, const float *running_mean, const float *running_var,
                           int c, float eps, float *mean, float *invstd) {
    (void)be;
    for (int ch = 0; ch < c; ch++) {
        mean[ch] = running_mean[ch];
        invstd[ch] = (float)(1.0 / sqrt((double)running_var[ch] + (double)eps));
    }
}

static void bn_fwd(sg_backend *be, const float *x, const float *mean, const float *invstd,
                   const float *gamma, const float *beta, float *y, int n, int c, int hw,
                   int relu) {
    (void)be;
    long planes = (long)n * c;
#pragma omp parallel for schedule(static) if ((size_t)planes * hw >= SG_CPU_PAR_MIN)
    for (long pl = 0; pl < planes; pl++) {
        int ch = (int)(pl % c);
        /* y = (x - m)*a + b, a = invstd*gamma: subtracting the mean first
         * keeps precision when |mean| >> std. */
        float m = mean[ch], a = (float)((double)invstd[ch] * gamma[ch]), b = beta[ch];
        const float *xp = x + (size_t)pl * hw;
        float *yp = y + (size_t)pl * hw;
        if (relu) {
#pragma omp simd
            for (int q = 0; q < hw; q++) {
                float v = (xp[q] - m) * a + b;
                yp[q] = v > 0.0f ? v : 0.0f;
            }
        } else {
#pragma omp simd
            for (int q = 0; q < hw; q++) yp[q] = (xp[q] - m) * a + b;
        }
    }
}

static void bn_bwd_reduce(sg_backend *be, const float *dy, const float *x, const float *y,
                          const float *mean, float *red, int n, int c, int hw, int relu) {
    (void)be;
#pragma omp parallel for schedule(static) if ((size_t)n * c * hw >= SG_CPU_PAR_MIN)
    for (int ch = 0; ch < c; ch++) {
        double s = 0, sx = 0, m = mean[ch];
        for (int i = 0; i < n; i++) {
            size_t off = ((size_t)i * c + ch) * hw;
            const float *g = dy + off, *xp = x + off, *yp = y + off;
            if (relu) {
#pragma omp simd reduction(+ : s, sx)
                for (int q = 0; q < hw; q++) {
                    double gv = yp[q] > 0.0f ? (double)g[q] : 0.0;
                    s += gv;
                    sx += gv * ((double)xp[q] - m);
                }
            } else {
#pragma omp simd reduction(+ : s, sx)
                for (int q = 0; q < hw; q++) {
                    s += g[q];
                    sx += (double)g[q] * ((double)xp[q] - m);
                }
            }
        }
        red[ch] = (float)s;
        red[c + ch] = (float)sx;
    }
}

static void bn_bwd_elem(sg_backend *be, const float *dy, const float *x, const float *y,
                        const float *mean, const float *invstd, const float *gamma,
                        const float *red, double count, float *dx, int n, int c, int hw,
                        int relu, int accumulate) {
    (void)be;
    long planes = (long)n * c;
#pragma omp parallel for schedule(static) if ((size_t)planes * hw >= SG_CPU_PAR_MIN)
    for (long pl = 0; pl < planes; pl++) {
        int ch = (int)(pl % c);
        /* dx = g*A + (x-m)*B + C: the contract's formula, coefficients in double. */
        double is = invstd[ch], gi = is * gamma[ch];
        float A = (float)gi, B = (float)(-(double)red[c + ch] / count * is * is * gi);
        float C = (float)(-(double)red[ch] / count * gi), m = mean[ch];
        size_t off = (size_t)pl * hw;
        const float *g = dy + off, *xp = x + off, *yp = y + off;
        float *d = dx + off;
        /* The ReLU mask selects from an unconditionally loaded g, so the
         * loops vectorize. */
        if (relu && accumulate) {
#pragma omp simd
            for (int q = 0; q < hw; q++) {
                float gv = g[q], gm = yp[q] > 0.0f ? gv : 0.0f;
                d[q] += gm * A + (xp[q] - m) * B + C;
            }
        } else if (relu) {
#pragma omp simd
            for (int q = 0; q < hw; q++) {
                float gv = g[q], gm = yp[q] > 0.0f ? gv : 0.0f;
                d[q] = gm * A + (xp[q] - m) * B + C;
            }
        } else if (accumulate) {
#pragma omp simd
            for (int q = 0; q < hw; q++) d[q] += g[q] * A + (xp[q] - m) * B + C;
        } else {
#pragma omp simd
            for (int q = 0; q < hw; q++) d[q] = g[q] * A + (xp[q] - m) * B + C;
        }
    }
}

static void bn_param_grads(sg_backend *be, const float *red, const float *invstd,
                           float *dgamma, float *dbeta, int c, int accumulate) {
    (void)be;
    for (int ch = 0; ch < c; ch++) {
        float dg = (float)((double)red[c + ch] * invstd[ch]);
        dgamma[ch] = accumulate ? dgamma[ch] + dg : dg;
        dbeta[ch] = accumulate ? dbeta[ch] + red[ch] : red[ch];
    }
}

void sg_cpu_fill_bn_ops(sg_ops *ops) {
    ops->bn_stats = bn_stats;
    ops->bn_finalize = bn_finalize;
    ops->bn_eval_params = bn_eval_params;
    ops->bn_fwd = bn_fwd;
    ops->bn_bwd_reduce = bn_bwd_reduce;
    ops->bn_bwd_elem = bn_bwd_elem;
    ops->bn_param_grads = bn_param_grads;
}
