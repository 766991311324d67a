/* kernels/cpu/cpu_bn.c - batch norm on the CPU (the bn group of
 * tests/backend/run_bn.c, and the BN *_dt ops of the act_bf16 group;
 * kernels/cuda/cuda_bn.cu on the GPU), split the way SyncBN needs it (see
 * backend.h): per-channel statistics (one pass over memory: the mean and
 * M2 of each cache-sized block, two-pass inside the block in double, merged
 * with Chan's formula), Chan's merge of partial statistics, normalize +
 * affine (+ fused ReLU, + fused residual add and ReLU), and the backward
 * reduce (+ the residual's gradient) / elementwise / parameter grads.
 * Threads split channels for reductions and (n, c) planes for elementwise
 * work; the per-plane loops are `omp simd` kernels, multiversioned for
 * AVX-512 / AVX2 (SG_CPU_CLONES). The arithmetic shared with the CUDA
 * backend (merge, finalize, per-element formulas) is kernels/formulas/bn.h.
 * The *_dt ops (bf16 activation storage) run the same per-plane kernels on
 * widened / recomputed planes (see their section below).
 */
#include <omp.h>

#include "core/log.h"
#include "kernels/cpu/cpu_internal.h"
#include "kernels/formulas/bf16.h"
#include "kernels/formulas/bn.h"

/* Per-plane kernels, compiled for AVX-512, AVX2 and baseline x86-64 and
 * picked at load time (SG_CPU_CLONES): the double accumulations are 8 wide
 * on AVX-512 instead of 2. */
SG_CPU_CLONES static double plane_sum(const float *p, int hw) {
    double s = 0;
#pragma omp simd reduction(+ : s)
    for (int q = 0; q < hw; q++) s += p[q];
    return s;
}

SG_CPU_CLONES static double plane_m2(const float *p, int hw, double mean) {
    double m2 = 0;
#pragma omp simd reduction(+ : m2)
    for (int q = 0; q < hw; q++) {
        double dlt = (double)p[q] - mean;
        m2 += dlt * dlt;
    }
    return m2;
}

/* Values per statistics block: 4 KiB of floats, so the block's second
 * pass (M2 about the block's mean) reads L1, not memory. */
#define STATS_BLOCK 1024

/* Folds one plane into *acc: each block's count, mean and M2 (two-pass in
 * cache, double) merged with Chan's formula (formulas/bn.h), in order. */
static void plane_moments(const float *p, int hw, sg_bn_moments *acc) {
    for (int q0 = 0; q0 < hw; q0 += STATS_BLOCK) {
        int len = hw - q0 < STATS_BLOCK ? hw - q0 : STATS_BLOCK;
        double mb = plane_sum(p + q0, len) / len;
        sg_bn_merge(acc, (double)len, mb, plane_m2(p + q0, len, mb));
    }
}

static void bn_stats(sg_backend *be, const float *x, int n, int c, int hw, float *stats) {
    (void)be;
#pragma omp parallel for schedule(static) if ((size_t)n * c * hw >= SG_CPU_PAR_MIN)
    for (int ch = 0; ch < c; ch++) {
        sg_bn_moments acc = {0, 0, 0};
        for (int i = 0; i < n; i++) plane_moments(x + ((size_t)i * c + ch) * hw, hw, &acc);
        stats[ch] = (float)acc.mean;
        stats[c + ch] = (float)acc.m2;
    }
}

static void bn_finalize(sg_backend *be, const float *parts_stats, const int64_t *counts, int parts,
                        int c, float eps, float momentum, float *mean, float *invstd,
                        float *running_mean, float *running_var) {
    (void)be;
    for (int ch = 0; ch < c; ch++) {
        sg_bn_moments s = {0, 0, 0};
        for (int p = 0; p < parts; p++) {
            if (counts[p] <= 0) continue;
            sg_bn_merge(&s, (double)counts[p], parts_stats[(size_t)p * 2 * c + ch],
                        parts_stats[(size_t)p * 2 * c + c + ch]);
        }
        sg_bn_finalize_channel(&s, eps, momentum, mean + ch, invstd + ch,
                               running_mean ? running_mean + ch : NULL,
                               running_mean ? running_var + ch : NULL);
    }
}

static void bn_eval_params(sg_backend *be, const float *running_mean, const float *running_var,
                           int c, float eps, float *mean, float *invstd) {
    (void)be;
    for (int ch = 0; ch < c; ch++) {
        mean[ch] = running_mean[ch];
        invstd[ch] = sg_bn_eval_invstd(running_var[ch], eps);
    }
}

/* y = (x - m)*a + b (+ReLU), a = invstd*gamma (formulas/bn.h). */
SG_CPU_CLONES static void plane_fwd(const float *xp, float *yp, int hw, float m, float a, float b,
                                    int relu) {
    if (relu) {
#pragma omp simd
        for (int q = 0; q < hw; q++) yp[q] = sg_relu(sg_bn_fwd_elem(xp[q], m, a, b));
    } else {
#pragma omp simd
        for (int q = 0; q < hw; q++) yp[q] = sg_bn_fwd_elem(xp[q], m, a, b);
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
        float a = sg_bn_fwd_scale(invstd[ch], gamma[ch]);
        plane_fwd(x + (size_t)pl * hw, y + (size_t)pl * hw, hw, mean[ch], a, beta[ch], relu);
    }
}

/* s += sum(g), sx += sum(g*(x-m)) over one plane, g masked by y > 0 if relu. */
SG_CPU_CLONES static void plane_reduce(const float *g, const float *xp, const float *yp, int hw,
                                       double m, int relu, double *s_, double *sx_) {
    double s = 0, sx = 0;
    if (relu) {
        /* The mask goes through a float block first: GCC 12 does not
         * if-convert the select inside this double reduction ("not
         * vectorized: control flow in loop"), which left it scalar with a
         * mispredicted branch per element (6% of the resnet50 step). As a
         * separate loop the select vectorizes (as in relu_bwd); the values
         * are the same floats, only the lane order of the sums changes. */
        float gm[256];
        for (int q0 = 0; q0 < hw; q0 += 256) {
            int len = hw - q0 < 256 ? hw - q0 : 256;
#pragma omp simd
            for (int j = 0; j < len; j++) gm[j] = sg_relu_mask(g[q0 + j], yp[q0 + j]);
#pragma omp simd reduction(+ : s, sx)
            for (int j = 0; j < len; j++) {
                s += gm[j];
                sx += (double)gm[j] * ((double)xp[q0 + j] - m);
            }
        }
    } else {
#pragma omp simd reduction(+ : s, sx)
        for (int q = 0; q < hw; q++) {
            s += g[q];
            sx += (double)g[q] * ((double)xp[q] - m);
        }
    }
    *s_ += s;
    *sx_ += sx;
}

static void bn_bwd_reduce(sg_backend *be, const float *dy, const float *x, const float *y,
                          const float *mean, float *red, int n, int c, int hw, int relu) {
    (void)be;
#pragma omp parallel for schedule(static) if ((size_t)n * c * hw >= SG_CPU_PAR_MIN)
    for (int ch = 0; ch < c; ch++) {
        double s = 0, sx = 0;
        for (int i = 0; i < n; i++) {
            size_t off = ((size_t)i * c + ch) * hw;
            plane_reduce(dy + off, x + off, y + off, hw, mean[ch], relu, &s, &sx);
        }
        red[ch] = (float)s;
        red[c + ch] = (float)sx;
    }
}

/* d (+)= g*A + (x-m)*B + C over one plane (formulas/bn.h), g masked by
 * y > 0 if relu. The mask selects from an unconditionally loaded g, so the
 * loops vectorize. */
SG_CPU_CLONES static void plane_bwd_elem(const float *g, const float *xp, const float *yp, float *d,
                                         int hw, float A, float B, float C, float m, int relu,
                                         int accumulate) {
    if (relu && accumulate) {
#pragma omp simd
        for (int q = 0; q < hw; q++)
            d[q] += sg_bn_bwd_elem(sg_relu_mask(g[q], yp[q]), xp[q], m, A, B, C);
    } else if (relu) {
#pragma omp simd
        for (int q = 0; q < hw; q++)
            d[q] = sg_bn_bwd_elem(sg_relu_mask(g[q], yp[q]), xp[q], m, A, B, C);
    } else if (accumulate) {
#pragma omp simd
        for (int q = 0; q < hw; q++) d[q] += sg_bn_bwd_elem(g[q], xp[q], m, A, B, C);
    } else {
#pragma omp simd
        for (int q = 0; q < hw; q++) d[q] = sg_bn_bwd_elem(g[q], xp[q], m, A, B, C);
    }
}

static void bn_bwd_elem(sg_backend *be, const float *dy, const float *x, const float *y,
                        const float *mean, const float *invstd, const float *gamma,
                        const float *red, double count, float *dx, int n, int c, int hw, int relu,
                        int accumulate) {
    (void)be;
    long planes = (long)n * c;
#pragma omp parallel for schedule(static) if ((size_t)planes * hw >= SG_CPU_PAR_MIN)
    for (long pl = 0; pl < planes; pl++) {
        int ch = (int)(pl % c);
        sg_bn_bwd_coefs k = sg_bn_bwd_coefs_of(invstd[ch], gamma[ch], red[ch], red[c + ch], count);
        size_t off = (size_t)pl * hw;
        plane_bwd_elem(dy + off, x + off, y + off, dx + off, hw, k.A, k.B, k.C, mean[ch], relu,
                       accumulate);
    }
}

/* ---- bf16 activation storage (the *_dt ops, backend.h) ----
 * The same per-plane kernels as above on float32 planes: a bf16-stored x
 * plane is widened (exactly) into a per-thread buffer first, a bf16-stored
 * y plane is computed into one and rounded into its storage, and a ReLU
 * mask whose output is stored in bf16 (y NULL) comes from the plane
 * recomputed with plane_fwd. Same functions, same float inputs: the bits of
 * the float32 ops on the same values. Buffers: two planes per thread
 * (sg_cpu_act_buf), so the planes stay in cache. */

static void check_dt(int dt, const char *op) {
    if (dt != SG_ACT_F32 && dt != SG_ACT_BF16)
        SG_FATAL("CPU backend: %s: storage type %d is not SG_ACT_F32 (0) or SG_ACT_BF16 (1) (a "
                 "bug in the caller)",
                 op, dt);
}

SG_CPU_CLONES static void widen_plane(const uint16_t *src, float *dst, int hw) {
#pragma omp simd
    for (int q = 0; q < hw; q++) dst[q] = sg_bf16_to_f32(src[q]);
}

SG_CPU_CLONES static void narrow_plane(const float *src, uint16_t *dst, int hw) {
#pragma omp simd
    for (int q = 0; q < hw; q++) dst[q] = sg_bf16_bits(src[q]);
}

/* The plane at element offset off of x as floats: x itself, or widened into buf. */
static const float *x_plane(const void *x, int x_dt, size_t off, int hw, float *buf) {
    if (x_dt == SG_ACT_F32) return (const float *)x + off;
    widen_plane((const uint16_t *)x + off, buf, hw);
    return buf;
}

/* Two planes of hw floats for each of the threads a parallel loop may use. */
static float *plane_bufs(sg_backend *be, int hw) {
    return sg_cpu_act_buf(be, 0, (size_t)2 * omp_get_max_threads() * hw);
}

static void bn_stats_dt(sg_backend *be, const void *x, int x_dt, int n, int c, int hw,
                        float *stats) {
    check_dt(x_dt, "bn_stats_dt");
    if (x_dt == SG_ACT_F32) {
        bn_stats(be, x, n, c, hw, stats);
        return;
    }
    float *bufs = plane_bufs(be, hw);
#pragma omp parallel for schedule(static) if ((size_t)n * c * hw >= SG_CPU_PAR_MIN)
    for (int ch = 0; ch < c; ch++) {
        float *buf = bufs + (size_t)2 * omp_get_thread_num() * hw;
        sg_bn_moments acc = {0, 0, 0};
        for (int i = 0; i < n; i++)
            plane_moments(x_plane(x, x_dt, ((size_t)i * c + ch) * hw, hw, buf), hw, &acc);
        stats[ch] = (float)acc.mean;
        stats[c + ch] = (float)acc.m2;
    }
}

static void bn_fwd_dt(sg_backend *be, const void *x, int x_dt, const float *mean,
                      const float *invstd, const float *gamma, const float *beta, void *y, int y_dt,
                      int n, int c, int hw, int relu) {
    check_dt(x_dt, "bn_fwd_dt");
    check_dt(y_dt, "bn_fwd_dt");
    if (x_dt == SG_ACT_F32 && y_dt == SG_ACT_F32) {
        bn_fwd(be, x, mean, invstd, gamma, beta, y, n, c, hw, relu);
        return;
    }
    float *bufs = plane_bufs(be, hw);
    long planes = (long)n * c;
#pragma omp parallel for schedule(static) if ((size_t)planes * hw >= SG_CPU_PAR_MIN)
    for (long pl = 0; pl < planes; pl++) {
        int ch = (int)(pl % c);
        float *buf = bufs + (size_t)2 * omp_get_thread_num() * hw;
        size_t off = (size_t)pl * hw;
        float a = sg_bn_fwd_scale(invstd[ch], gamma[ch]);
        const float *xp = x_plane(x, x_dt, off, hw, buf);
        float *yp = y_dt == SG_ACT_F32 ? (float *)y + off : buf + hw;
        plane_fwd(xp, yp, hw, mean[ch], a, beta[ch], relu);
        if (y_dt == SG_ACT_BF16) narrow_plane(yp, (uint16_t *)y + off, hw);
    }
}

/* The BN output plane the mask reads: y's, or (y NULL, relu) the one
 * recomputed from xp into buf with channel ch's statistics; without relu
 * nothing reads it. invstd, gamma and beta are read only to recompute (a
 * caller passing y may pass them NULL). */
static const float *y_plane(const float *y, size_t off, const float *xp, int hw, int ch,
                            const float *mean, const float *invstd, const float *gamma,
                            const float *beta, int relu, float *buf) {
    if (y) return y + off;
    if (!relu) return xp;
    plane_fwd(xp, buf, hw, mean[ch], sg_bn_fwd_scale(invstd[ch], gamma[ch]), beta[ch], 1);
    return buf;
}

static void bn_bwd_reduce_dt(sg_backend *be, const float *dy, const void *x, int x_dt,
                             const float *y, const float *mean, const float *invstd,
                             const float *gamma, const float *beta, float *red, int n, int c,
                             int hw, int relu) {
    check_dt(x_dt, "bn_bwd_reduce_dt");
    if (x_dt == SG_ACT_F32 && (y || !relu)) {
        bn_bwd_reduce(be, dy, x, y ? y : x, mean, red, n, c, hw, relu);
        return;
    }
    float *bufs = plane_bufs(be, hw);
#pragma omp parallel for schedule(static) if ((size_t)n * c * hw >= SG_CPU_PAR_MIN)
    for (int ch = 0; ch < c; ch++) {
        float *buf = bufs + (size_t)2 * omp_get_thread_num() * hw;
        double s = 0, sx = 0;
        for (int i = 0; i < n; i++) {
            size_t off = ((size_t)i * c + ch) * hw;
            const float *xp = x_plane(x, x_dt, off, hw, buf);
            const float *yp =
                y_plane(y, off, xp, hw, ch, mean, invstd, gamma, beta, relu, buf + hw);
            plane_reduce(dy + off, xp, yp, hw, mean[ch], relu, &s, &sx);
        }
        red[ch] = (float)s;
        red[c + ch] = (float)sx;
    }
}

static void bn_bwd_elem_dt(sg_backend *be, const float *dy, const void *x, int x_dt, const float *y,
                           const float *mean, const float *invstd, const float *gamma,
                           const float *beta, const float *red, double count, float *dx, int n,
                           int c, int hw, int relu, int accumulate) {
    check_dt(x_dt, "bn_bwd_elem_dt");
    if (x_dt == SG_ACT_F32 && (y || !relu)) {
        bn_bwd_elem(be, dy, x, y ? y : x, mean, invstd, gamma, red, count, dx, n, c, hw, relu,
                    accumulate);
        return;
    }
    float *bufs = plane_bufs(be, hw);
    long planes = (long)n * c;
#pragma omp parallel for schedule(static) if ((size_t)planes * hw >= SG_CPU_PAR_MIN)
    for (long pl = 0; pl < planes; pl++) {
        int ch = (int)(pl % c);
        float *buf = bufs + (size_t)2 * omp_get_thread_num() * hw;
        sg_bn_bwd_coefs k = sg_bn_bwd_coefs_of(invstd[ch], gamma[ch], red[ch], red[c + ch], count);
        size_t off = (size_t)pl * hw;
        const float *xp = x_plane(x, x_dt, off, hw, buf);
        const float *yp = y_plane(y, off, xp, hw, ch, mean, invstd, gamma, beta, relu, buf + hw);
        plane_bwd_elem(dy + off, xp, yp, dx + off, hw, k.A, k.B, k.C, mean[ch], relu, accumulate);
    }
}

/* ---- fused with the residual join (backend.h) ---- */

/* y = max(0, (x - m)*a + b + r) over one plane: bn_fwd's element, then
 * add's (the same float operations, so the unfused chain's bits). */
SG_CPU_CLONES static void plane_fwd_add(const float *xp, const float *rp, float *yp, int hw,
                                        float m, float a, float b) {
#pragma omp simd
    for (int q = 0; q < hw; q++) yp[q] = sg_relu(sg_fadd(sg_bn_fwd_elem(xp[q], m, a, b), rp[q]));
}

static void bn_add_relu_fwd(sg_backend *be, const void *x, int x_dt, const float *mean,
                            const float *invstd, const float *gamma, const float *beta,
                            const float *res, float *y, int n, int c, int hw) {
    check_dt(x_dt, "bn_add_relu_fwd");
    float *bufs = x_dt == SG_ACT_F32 ? NULL : plane_bufs(be, hw);
    long planes = (long)n * c;
#pragma omp parallel for schedule(static) if ((size_t)planes * hw >= SG_CPU_PAR_MIN)
    for (long pl = 0; pl < planes; pl++) {
        int ch = (int)(pl % c);
        size_t off = (size_t)pl * hw;
        float *buf = bufs ? bufs + (size_t)2 * omp_get_thread_num() * hw : NULL;
        float a = sg_bn_fwd_scale(invstd[ch], gamma[ch]);
        plane_fwd_add(x_plane(x, x_dt, off, hw, buf), res + off, y + off, hw, mean[ch], a,
                      beta[ch]);
    }
}

/* plane_reduce with relu (the same blocks and sums), and the masked g
 * stored into (acc: added to) dr when dr is not NULL. */
SG_CPU_CLONES static void plane_reduce_res(const float *g, const float *xp, const float *yp,
                                           float *dr, int hw, double m, int acc, double *s_,
                                           double *sx_) {
    double s = 0, sx = 0;
    float gm[256];
    for (int q0 = 0; q0 < hw; q0 += 256) {
        int len = hw - q0 < 256 ? hw - q0 : 256;
#pragma omp simd
        for (int j = 0; j < len; j++) gm[j] = sg_relu_mask(g[q0 + j], yp[q0 + j]);
        if (dr && acc) {
#pragma omp simd
            for (int j = 0; j < len; j++) dr[q0 + j] += gm[j];
        } else if (dr) {
#pragma omp simd
            for (int j = 0; j < len; j++) dr[q0 + j] = gm[j];
        }
#pragma omp simd reduction(+ : s, sx)
        for (int j = 0; j < len; j++) {
            s += gm[j];
            sx += (double)gm[j] * ((double)xp[q0 + j] - m);
        }
    }
    *s_ += s;
    *sx_ += sx;
}

static void bn_bwd_reduce_res(sg_backend *be, const float *dy, const void *x, int x_dt,
                              const float *y, const float *mean, float *red, float *dres, int n,
                              int c, int hw, int accumulate) {
    check_dt(x_dt, "bn_bwd_reduce_res");
    float *bufs = x_dt == SG_ACT_F32 ? NULL : plane_bufs(be, hw);
#pragma omp parallel for schedule(static) if ((size_t)n * c * hw >= SG_CPU_PAR_MIN)
    for (int ch = 0; ch < c; ch++) {
        float *buf = bufs ? bufs + (size_t)2 * omp_get_thread_num() * hw : NULL;
        double s = 0, sx = 0;
        for (int i = 0; i < n; i++) {
            size_t off = ((size_t)i * c + ch) * hw;
            plane_reduce_res(dy + off, x_plane(x, x_dt, off, hw, buf), y + off,
                             dres ? dres + off : NULL, hw, mean[ch], accumulate, &s, &sx);
        }
        red[ch] = (float)s;
        red[c + ch] = (float)sx;
    }
}

static void bn_param_grads(sg_backend *be, const float *red, const float *invstd, float *dgamma,
                           float *dbeta, int c, int accumulate) {
    (void)be;
    for (int ch = 0; ch < c; ch++) {
        float dg = sg_bn_dgamma(red[c + ch], invstd[ch]);
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
    ops->bn_stats_dt = bn_stats_dt;
    ops->bn_fwd_dt = bn_fwd_dt;
    ops->bn_bwd_reduce_dt = bn_bwd_reduce_dt;
    ops->bn_bwd_elem_dt = bn_bwd_elem_dt;
    ops->bn_add_relu_fwd = bn_add_relu_fwd;
    ops->bn_bwd_reduce_res = bn_bwd_reduce_res;
}
