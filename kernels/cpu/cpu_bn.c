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
 * Channels last (be->layout == SG_LAYOUT_NHWC): every op hands its work to
 * row kernels with the channels as vector lanes (the last section): the
 * same per-element bits, the reductions regrouped over pixel ranges fixed
 * by the shape (deterministic whatever the thread count).
 */
#include <omp.h>
#include <string.h>

#include "core/log.h"
#include "kernels/cpu/cpu_internal.h"
#include "kernels/formulas/bf16.h"
#include "kernels/formulas/bn.h"

/* The channels-last versions (be->layout == SG_LAYOUT_NHWC; defined at the
 * end): every op below hands its work to one of these in that layout. */
static void nhwc_stats(sg_backend *be, const void *x, int x_dt, int n, int c, int hw, float *stats);
static void nhwc_fwd(sg_backend *be, const void *x, int x_dt, const float *mean,
                     const float *invstd, const float *gamma, const float *beta, const void *res,
                     int res_dt, void *y, int y_dt, int n, int c, int hw, int relu);
static void nhwc_bwd_reduce(sg_backend *be, const float *dy, const void *x, int x_dt, const void *y,
                            int y_dt, const float *mean, const float *invstd, const float *gamma,
                            const float *beta, float *red, float *dres, int n, int c, int hw,
                            int relu, int accumulate);
static void nhwc_bwd_elem(sg_backend *be, const float *dy, const void *x, int x_dt, const float *y,
                          const float *mean, const float *invstd, const float *gamma,
                          const float *beta, const float *red, double count, float *dx, int n,
                          int c, int hw, int relu, int accumulate);

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
    if (be->layout == SG_LAYOUT_NHWC) {
        nhwc_stats(be, x, SG_ACT_F32, n, c, hw, stats);
        return;
    }
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
    if (be->layout == SG_LAYOUT_NHWC) {
        nhwc_fwd(be, x, SG_ACT_F32, mean, invstd, gamma, beta, NULL, SG_ACT_F32, y, SG_ACT_F32, n,
                 c, hw, relu);
        return;
    }
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
    if (be->layout == SG_LAYOUT_NHWC) {
        nhwc_bwd_reduce(be, dy, x, SG_ACT_F32, y, SG_ACT_F32, mean, NULL, NULL, NULL, red, NULL, n,
                        c, hw, relu, 0);
        return;
    }
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
    if (be->layout == SG_LAYOUT_NHWC) {
        nhwc_bwd_elem(be, dy, x, SG_ACT_F32, y, mean, invstd, gamma, NULL, red, count, dx, n, c, hw,
                      relu, accumulate);
        return;
    }
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
    if (be->layout == SG_LAYOUT_NHWC) {
        nhwc_stats(be, x, x_dt, n, c, hw, stats);
        return;
    }
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
    if (be->layout == SG_LAYOUT_NHWC) {
        nhwc_fwd(be, x, x_dt, mean, invstd, gamma, beta, NULL, SG_ACT_F32, y, y_dt, n, c, hw, relu);
        return;
    }
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

static void reduce_dt_f32g(sg_backend *be, const float *dy, const void *x, int x_dt, const float *y,
                           const float *mean, const float *invstd, const float *gamma,
                           const float *beta, float *red, int n, int c, int hw, int relu) {
    check_dt(x_dt, "bn_bwd_reduce_dt");
    if (be->layout == SG_LAYOUT_NHWC) {
        nhwc_bwd_reduce(be, dy, x, x_dt, y, SG_ACT_F32, mean, invstd, gamma, beta, red, NULL, n, c,
                        hw, relu, 0);
        return;
    }
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

static void elem_dt_f32g(sg_backend *be, const float *dy, const void *x, int x_dt, const float *y,
                         const float *mean, const float *invstd, const float *gamma,
                         const float *beta, const float *red, double count, float *dx, int n, int c,
                         int hw, int relu, int accumulate) {
    check_dt(x_dt, "bn_bwd_elem_dt");
    if (be->layout == SG_LAYOUT_NHWC) {
        nhwc_bwd_elem(be, dy, x, x_dt, y, mean, invstd, gamma, beta, red, count, dx, n, c, hw, relu,
                      accumulate);
        return;
    }
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

/* bf16-stored gradients (dy_dt, dx_dt): dy widened whole into buffer 2
 * (exact), dx computed in float32 into buffer 3 and rounded into its
 * storage once (RNE): the float32 ops' bits on the same values, rounded
 * where the gradient is stored. */
static const float *grad_f32(sg_backend *be, const void *dy, int dy_dt, size_t count,
                             const char *op) {
    check_dt(dy_dt, op);
    if (dy_dt == SG_ACT_F32) return dy;
    float *b = sg_cpu_act_buf(be, 2, count);
    sg_cpu_bf16_widen(b, dy, count);
    return b;
}

static void bn_bwd_reduce_dt(sg_backend *be, const void *dy, int dy_dt, const void *x, int x_dt,
                             const float *y, const float *mean, const float *invstd,
                             const float *gamma, const float *beta, float *red, int n, int c,
                             int hw, int relu) {
    const float *g = grad_f32(be, dy, dy_dt, (size_t)n * c * hw, "bn_bwd_reduce_dt");
    reduce_dt_f32g(be, g, x, x_dt, y, mean, invstd, gamma, beta, red, n, c, hw, relu);
}

static void bn_bwd_elem_dt(sg_backend *be, const void *dy, int dy_dt, const void *x, int x_dt,
                           const float *y, const float *mean, const float *invstd,
                           const float *gamma, const float *beta, const float *red, double count,
                           void *dx, int dx_dt, int n, int c, int hw, int relu, int accumulate) {
    check_dt(dx_dt, "bn_bwd_elem_dt");
    if (dx_dt == SG_ACT_BF16 && accumulate)
        SG_FATAL("CPU backend: bn_bwd_elem_dt: accumulate = 1 with a bf16 dx: a bf16 gradient is "
                 "written once, never added to (a bug in the caller: keep that gradient float32)");
    size_t e = (size_t)n * c * hw;
    const float *g = grad_f32(be, dy, dy_dt, e, "bn_bwd_elem_dt");
    float *d = dx_dt == SG_ACT_BF16 ? sg_cpu_act_buf(be, 3, e) : dx;
    elem_dt_f32g(be, g, x, x_dt, y, mean, invstd, gamma, beta, red, count, d, n, c, hw, relu,
                 accumulate);
    if (d != dx) sg_cpu_bf16_narrow(dx, d, e);
}

/* ---- fused with the residual join (backend.h) ---- */

/* y = max(0, (x - m)*a + b + r) over one plane: bn_fwd's element, then
 * add's (the same float operations, so the unfused chain's bits). */
SG_CPU_CLONES static void plane_fwd_add(const float *xp, const float *rp, float *yp, int hw,
                                        float m, float a, float b) {
#pragma omp simd
    for (int q = 0; q < hw; q++) yp[q] = sg_relu(sg_fadd(sg_bn_fwd_elem(xp[q], m, a, b), rp[q]));
}

/* Elements per chunk of the join with a bf16 identity or output. */
#define JOIN_CHUNK 512

/* dst[0, len) = the len elements at element offset off of v, stored as
 * dt, as floats (a bf16 value widened exactly). */
static void load_f32(float *dst, const void *v, int dt, size_t off, int len) {
    if (dt == SG_ACT_BF16) {
        const uint16_t *b = (const uint16_t *)v + off;
#pragma omp simd
        for (int j = 0; j < len; j++) dst[j] = sg_bf16_to_f32(b[j]);
    } else {
        memcpy(dst, (const float *)v + off, (size_t)len * sizeof(float));
    }
}

/* The len floats of src into v at element offset off, stored as dt
 * (SG_ACT_BF16: bits rounded RNE; SG_ACT_F32R: the rounded value). */
static void store_dt(void *v, int dt, size_t off, const float *src, int len) {
    if (dt == SG_ACT_BF16) {
        uint16_t *b = (uint16_t *)v + off;
#pragma omp simd
        for (int j = 0; j < len; j++) b[j] = sg_bf16_bits(src[j]);
    } else if (dt == SG_ACT_F32R) {
        float *f = (float *)v + off;
#pragma omp simd
        for (int j = 0; j < len; j++) f[j] = sg_bf16_round(src[j]);
    } else {
        memcpy((float *)v + off, src, (size_t)len * sizeof(float));
    }
}

/* y = relu(bn(x) + res) on the len elements at off, all of one channel
 * (NCHW). plane_fwd_add's element, so its bits. */
static void join_chunk(const void *x, int x_dt, const void *res, int res_dt, void *y, int y_dt,
                       size_t off, int len, float m, float a, float b) {
    float xv[JOIN_CHUNK], rv[JOIN_CHUNK];
    load_f32(xv, x, x_dt, off, len);
    load_f32(rv, res, res_dt, off, len);
#pragma omp simd
    for (int j = 0; j < len; j++) xv[j] = sg_relu(sg_fadd(sg_bn_fwd_elem(xv[j], m, a, b), rv[j]));
    store_dt(y, y_dt, off, xv, len);
}

/* bn_add_relu_fwd (NCHW) with a bf16 identity or a bf16 / rounded output,
 * in chunks of a plane. Each chunk is read (widened) before it is written,
 * so y may == res. */
static void join_dt(sg_backend *be, const void *x, int x_dt, const float *mean, const float *invstd,
                    const float *gamma, const float *beta, const void *res, int res_dt, void *y,
                    int y_dt, int n, int c, int hw) {
    size_t count = (size_t)n * c * hw;
    long planes = (long)n * c;
#pragma omp parallel for schedule(static) if (count >= SG_CPU_PAR_MIN)
    for (long pl = 0; pl < planes; pl++) {
        int ch = (int)(pl % c);
        float a = sg_bn_fwd_scale(invstd[ch], gamma[ch]);
        for (int q0 = 0; q0 < hw; q0 += JOIN_CHUNK) {
            int len = hw - q0 < JOIN_CHUNK ? hw - q0 : JOIN_CHUNK;
            join_chunk(x, x_dt, res, res_dt, y, y_dt, (size_t)pl * hw + q0, len, mean[ch], a,
                       beta[ch]);
        }
    }
}

static void bn_add_relu_fwd(sg_backend *be, const void *x, int x_dt, const float *mean,
                            const float *invstd, const float *gamma, const float *beta,
                            const void *res, int res_dt, void *y, int y_dt, int n, int c, int hw) {
    check_dt(x_dt, "bn_add_relu_fwd");
    check_dt(res_dt, "bn_add_relu_fwd (res_dt)");
    if (y_dt != SG_ACT_F32R) check_dt(y_dt, "bn_add_relu_fwd (y_dt)");
    if (be->layout == SG_LAYOUT_NHWC) {
        nhwc_fwd(be, x, x_dt, mean, invstd, gamma, beta, res, res_dt, y, y_dt, n, c, hw, 1);
        return;
    }
    if (res_dt != SG_ACT_F32 || y_dt != SG_ACT_F32) {
        join_dt(be, x, x_dt, mean, invstd, gamma, beta, res, res_dt, y, y_dt, n, c, hw);
        return;
    }
    float *bufs = x_dt == SG_ACT_F32 ? NULL : plane_bufs(be, hw);
    long planes = (long)n * c;
#pragma omp parallel for schedule(static) if ((size_t)planes * hw >= SG_CPU_PAR_MIN)
    for (long pl = 0; pl < planes; pl++) {
        int ch = (int)(pl % c);
        size_t off = (size_t)pl * hw;
        float *buf = bufs ? bufs + (size_t)2 * omp_get_thread_num() * hw : NULL;
        float a = sg_bn_fwd_scale(invstd[ch], gamma[ch]);
        plane_fwd_add(x_plane(x, x_dt, off, hw, buf), (const float *)res + off, (float *)y + off,
                      hw, mean[ch], a, beta[ch]);
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
                              const void *y, int y_dt, const float *mean, float *red, float *dres,
                              int n, int c, int hw, int accumulate) {
    check_dt(x_dt, "bn_bwd_reduce_res");
    check_dt(y_dt, "bn_bwd_reduce_res (y_dt)");
    if (be->layout == SG_LAYOUT_NHWC) {
        nhwc_bwd_reduce(be, dy, x, x_dt, y, y_dt, mean, NULL, NULL, NULL, red, dres, n, c, hw, 1,
                        accumulate);
        return;
    }
    /* per thread: a plane for a widened x, one for a widened y */
    float *bufs = x_dt == SG_ACT_F32 && y_dt == SG_ACT_F32 ? NULL : plane_bufs(be, hw);
#pragma omp parallel for schedule(static) if ((size_t)n * c * hw >= SG_CPU_PAR_MIN)
    for (int ch = 0; ch < c; ch++) {
        float *buf = bufs ? bufs + (size_t)2 * omp_get_thread_num() * hw : NULL;
        double s = 0, sx = 0;
        for (int i = 0; i < n; i++) {
            size_t off = ((size_t)i * c + ch) * hw;
            const float *xp = x_plane(x, x_dt, off, hw, buf);
            const float *yp = x_plane(y, y_dt, off, hw, buf ? buf + hw : NULL);
            plane_reduce_res(dy + off, xp, yp, dres ? dres + off : NULL, hw, mean[ch], accumulate,
                             &s, &sx);
        }
        red[ch] = (float)s;
        red[c + ch] = (float)sx;
    }
}

/* ---- channels last (be->layout == SG_LAYOUT_NHWC, backend.h) ----
 * An activation is then n*hw pixel rows of c channels, and a run of pixels
 * is a run of memory: the loops go over rows with the channels as the
 * vector lanes (an inner `omp simd` loop over c, with per-channel arrays of
 * the mean and the coefficients, computed once per call as the NCHW path
 * computes them once per plane).
 *  - Elementwise ops (fwd, bwd_elem, add_relu_fwd): the NCHW path's
 *    per-element formulas on the same float inputs, so its bits; threads
 *    split tiles of whole rows.
 *  - Reductions (stats, bwd_reduce, bwd_reduce_res): per-channel double
 *    partials of up to NHWC_PARTS contiguous pixel ranges, each summed row
 *    by row in order, then merged in part order. The split depends on the
 *    shape only, never on the thread count, so the result is the same bits
 *    on every run; it groups the sums differently from NCHW (within the
 *    contract's tolerance). Statistics keep the one pass over memory: each
 *    block of NHWC_STATS_TILE floats (mean, then M2 about it, while it is
 *    in L2) is merged with Chan's formula.
 *  - bf16 storage: every kernel widens x as it reads it, rounds a
 *    bf16-stored y as it writes it, and recomputes a ReLU output that is
 *    not stored per element: the floats of the NCHW path's widened and
 *    recomputed planes, so the same bits, with no copies.
 *  - Few channels (c < 64): rows in groups (nhwc_group).
 * Per-call scratch (coefficients, partials) is sg_cpu_act_buf slot 1. */

/* Floats per tile (whole rows, 16 KiB): the unit the elementwise ops'
 * threads share out, and what the reductions' part count is taken from. */
#define NHWC_TILE 4096
/* Floats per statistics block (128 KiB: the second pass reads L2): larger
 * than a tile, as each block costs a division and a merge per channel. */
#define NHWC_STATS_TILE 32768
/* Most pixel ranges a reduction is split into (enough for every thread). */
#define NHWC_PARTS 64

typedef struct nhwc_split {
    long npix;  /* n*hw rows */
    long tile;  /* rows per tile */
    long tiles; /* ceil(npix / tile) */
    long parts; /* pixel ranges of the reductions: 1..NHWC_PARTS */
} nhwc_split;

/* Rows the elementwise ops take as one (a group): with few channels, a
 * row is shorter than a vector or two, so G rows of c channels are run as
 * one row of G*c lanes (at least 64, whole vectors of 16: no remainder
 * loop) with the per-channel arrays repeated G times. The elementwise ops
 * keep their elements' arithmetic (only the loop shape changes); the
 * reductions fold the G copies of a channel at the end. G <= 64. */
static int nhwc_group(int c) {
    if (c >= 64) return 1;
    int g = 16; /* gcd(c, 16) */
    while (c % g) g /= 2;
    int g0 = 16 / g; /* the fewest rows whose lanes are whole vectors of 16 */
    return g0 * ((64 + g0 * c - 1) / (g0 * c));
}

/* The split of n*hw rows into tiles of about tile_floats floats (whole
 * groups). */
static nhwc_split nhwc_split_of(int n, int c, int hw, int tile_floats) {
    nhwc_split s;
    s.npix = (long)n * hw;
    s.tile = c < tile_floats ? tile_floats / c : 1;
    s.tile -= s.tile % nhwc_group(c); /* tile >= 4096/63 > 64 >= G when c < 64 */
    s.tiles = (s.npix + s.tile - 1) / s.tile;
    s.parts = s.tiles < NHWC_PARTS ? s.tiles : NHWC_PARTS;
    if (s.parts < 1) s.parts = 1;
    return s;
}

/* Rows [*p0, *p1) of part k (parts <= npix: none is empty unless npix is 0). */
static void nhwc_part(const nhwc_split *s, long k, long *p0, long *p1) {
    *p0 = (long)((int64_t)k * s->npix / s->parts);
    *p1 = (long)((int64_t)(k + 1) * s->npix / s->parts);
}

/* Channels rounded up to 16 floats: per-part arrays start on their own
 * cache lines (doubles: two lines). */
static size_t nhwc_cpad(int c) { return ((size_t)c + 15) & ~(size_t)15; }

/* dst[0, G*c) = src[0, c) repeated G times (a group's per-channel array;
 * dst may be src: then it holds the first copy already). */
static void nhwc_repeat(float *dst, const float *src, int c, int G) {
    for (int r = dst == src ? 1 : 0; r < G; r++)
        memcpy(dst + (size_t)r * c, src, (size_t)c * sizeof(float));
}

/* a[ch] = invstd*gamma, bn_fwd's per-channel scale. */
static void nhwc_fwd_scales(float *a, const float *invstd, const float *gamma, int c) {
    for (int ch = 0; ch < c; ch++) a[ch] = sg_bn_fwd_scale(invstd[ch], gamma[ch]);
}

/* How the row kernels read x and store y: element i as a float, and v
 * stored at element i (bf16: rounded, kernels/formulas/bf16.h). The bf16
 * versions widen and round as they go: the same floats as the NCHW path's
 * widened planes and narrowed results, so the same bits, without copies. */
#define F32_LOAD(x, i) (x)[i]
#define BF16_LOAD(x, i) sg_bf16_to_f32((x)[i])
#define F32_STORE(y, i, v) (y)[i] = (v)
#define BF16_STORE(y, i, v) (y)[i] = sg_bf16_bits(v)

/* y = (x - m)*a + b (+ReLU) over np rows (plane_fwd's element), or with r
 * y = max(0, (x - m)*a + b + r) (plane_fwd_add's). */
#define ROWS_FWD(name, TX, LOAD, TY, STORE)                                                     \
    SG_CPU_CLONES static void name(const TX *x, const float *r, TY *y, long np, int c,          \
                                   const float *m, const float *a, const float *b, int relu) {  \
        for (long p = 0; p < np; p++) {                                                         \
            size_t o = (size_t)p * c;                                                           \
            if (r) {                                                                            \
                _Pragma("omp simd") for (int ch = 0; ch < c; ch++)                              \
                    STORE(y, o + ch,                                                            \
                          sg_relu(sg_fadd(sg_bn_fwd_elem(LOAD(x, o + ch), m[ch], a[ch], b[ch]), \
                                          r[o + ch])));                                         \
            } else if (relu) {                                                                  \
                _Pragma("omp simd") for (int ch = 0; ch < c; ch++) STORE(                       \
                    y, o + ch, sg_relu(sg_bn_fwd_elem(LOAD(x, o + ch), m[ch], a[ch], b[ch])));  \
            } else {                                                                            \
                _Pragma("omp simd") for (int ch = 0; ch < c; ch++)                              \
                    STORE(y, o + ch, sg_bn_fwd_elem(LOAD(x, o + ch), m[ch], a[ch], b[ch]));     \
            }                                                                                   \
        }                                                                                       \
    }
ROWS_FWD(rows_fwd_ff, float, F32_LOAD, float, F32_STORE)
ROWS_FWD(rows_fwd_bf, uint16_t, BF16_LOAD, float, F32_STORE)
ROWS_FWD(rows_fwd_fb, float, F32_LOAD, uint16_t, BF16_STORE)
ROWS_FWD(rows_fwd_bb, uint16_t, BF16_LOAD, uint16_t, BF16_STORE)

/* np rows of w lanes from element off, x and y as stored. */
static void rows_fwd_dt(const void *x, int x_dt, const float *r, void *y, int y_dt, size_t off,
                        long np, int w, const float *m, const float *a, const float *b, int relu) {
    const float *xf = (const float *)x + off, *rp = r ? r + off : NULL;
    const uint16_t *xb = (const uint16_t *)x + off;
    float *yf = (float *)y + off;
    uint16_t *yb = (uint16_t *)y + off;
    if (x_dt == SG_ACT_F32 && y_dt == SG_ACT_F32) rows_fwd_ff(xf, rp, yf, np, w, m, a, b, relu);
    else if (y_dt == SG_ACT_F32) rows_fwd_bf(xb, rp, yf, np, w, m, a, b, relu);
    else if (x_dt == SG_ACT_F32) rows_fwd_fb(xf, rp, yb, np, w, m, a, b, relu);
    else rows_fwd_bb(xb, rp, yb, np, w, m, a, b, relu);
}

/* The residual join with the identity r and the output y stored in bf16 too
 * (res_dt, y_dt; F32R_STORE: a float32 holding the value rounded to bf16):
 * plane_fwd_add's element on the values as stored, over np rows. */
#define F32R_STORE(y, i, v) (y)[i] = sg_bf16_round(v)
#define ROWS_JOIN(name, TX, LX, TR, LR, TY, SY)                                        \
    SG_CPU_CLONES static void name(const TX *x, const TR *r, TY *y, long np, int c,    \
                                   const float *m, const float *a, const float *b) {   \
        for (long p = 0; p < np; p++) {                                                \
            size_t o = (size_t)p * c;                                                  \
            _Pragma("omp simd") for (int ch = 0; ch < c; ch++)                         \
                SY(y, o + ch,                                                          \
                   sg_relu(sg_fadd(sg_bn_fwd_elem(LX(x, o + ch), m[ch], a[ch], b[ch]), \
                                   LR(r, o + ch))));                                   \
        }                                                                              \
    }
ROWS_JOIN(join_fbb, float, F32_LOAD, uint16_t, BF16_LOAD, uint16_t, BF16_STORE)
ROWS_JOIN(join_bbb, uint16_t, BF16_LOAD, uint16_t, BF16_LOAD, uint16_t, BF16_STORE)
ROWS_JOIN(join_ffb, float, F32_LOAD, float, F32_LOAD, uint16_t, BF16_STORE)
ROWS_JOIN(join_bfb, uint16_t, BF16_LOAD, float, F32_LOAD, uint16_t, BF16_STORE)
ROWS_JOIN(join_fbr, float, F32_LOAD, uint16_t, BF16_LOAD, float, F32R_STORE)
ROWS_JOIN(join_bbr, uint16_t, BF16_LOAD, uint16_t, BF16_LOAD, float, F32R_STORE)
ROWS_JOIN(join_ffr, float, F32_LOAD, float, F32_LOAD, float, F32R_STORE)
ROWS_JOIN(join_bfr, uint16_t, BF16_LOAD, float, F32_LOAD, float, F32R_STORE)
ROWS_JOIN(join_fbf, float, F32_LOAD, uint16_t, BF16_LOAD, float, F32_STORE)
ROWS_JOIN(join_bbf, uint16_t, BF16_LOAD, uint16_t, BF16_LOAD, float, F32_STORE)

/* np rows of w lanes from element off: the join kernel for the storage of x,
 * r and y (y float32 with r float32 is rows_fwd's, not here). */
static void rows_join_dt(const void *x, int x_dt, const void *r, int r_dt, void *y, int y_dt,
                         size_t off, long np, int w, const float *m, const float *a,
                         const float *b) {
    int xb = x_dt == SG_ACT_BF16, rb = r_dt == SG_ACT_BF16;
    const float *xf = (const float *)x + off, *rf = (const float *)r + off;
    const uint16_t *xh = (const uint16_t *)x + off, *rh = (const uint16_t *)r + off;
    float *yf = (float *)y + off;
    uint16_t *yh = (uint16_t *)y + off;
    if (y_dt == SG_ACT_BF16) {
        if (xb && rb) join_bbb(xh, rh, yh, np, w, m, a, b);
        else if (xb) join_bfb(xh, rf, yh, np, w, m, a, b);
        else if (rb) join_fbb(xf, rh, yh, np, w, m, a, b);
        else join_ffb(xf, rf, yh, np, w, m, a, b);
    } else if (y_dt == SG_ACT_F32R) {
        if (xb && rb) join_bbr(xh, rh, yf, np, w, m, a, b);
        else if (xb) join_bfr(xh, rf, yf, np, w, m, a, b);
        else if (rb) join_fbr(xf, rh, yf, np, w, m, a, b);
        else join_ffr(xf, rf, yf, np, w, m, a, b);
    } else { /* a bf16 identity into a float32 output */
        if (xb) join_bbf(xh, rh, yf, np, w, m, a, b);
        else join_fbf(xf, rh, yf, np, w, m, a, b);
    }
}

/* bn_fwd_dt / bn_add_relu_fwd (res not NULL: y = relu(bn(x) + res), res
 * stored as res_dt; a bf16 identity or a rounded output takes the join
 * kernels). Each element is read before it is written, so y may == res
 * (stored alike). */
static void nhwc_fwd(sg_backend *be, const void *x, int x_dt, const float *mean,
                     const float *invstd, const float *gamma, const float *beta, const void *res,
                     int res_dt, void *y, int y_dt, int n, int c, int hw, int relu) {
    int join = res && (res_dt == SG_ACT_BF16 || y_dt == SG_ACT_F32R);
    nhwc_split s = nhwc_split_of(n, c, hw, NHWC_TILE);
    int G = nhwc_group(c);
    size_t gc = (size_t)G * c, gp = nhwc_cpad((int)gc);
    /* mean, scale and beta of a group of rows */
    float *m = sg_cpu_act_buf(be, 1, 3 * gp), *a = m + gp, *b = a + gp;
    nhwc_fwd_scales(a, invstd, gamma, c);
    nhwc_repeat(m, mean, c, G), nhwc_repeat(a, a, c, G), nhwc_repeat(b, beta, c, G);
#pragma omp parallel for schedule(static) if ((size_t)s.npix * c >= SG_CPU_PAR_MIN)
    for (long t = 0; t < s.tiles; t++) {
        long p0 = t * s.tile, np = s.npix - p0 < s.tile ? s.npix - p0 : s.tile;
        size_t off = (size_t)p0 * c;
        long ng = np / G; /* whole groups, then the rows left */
        for (int h = 0; h < 2; h++) {
            size_t o = off + (h ? (size_t)ng * gc : 0);
            long rows = h ? np % G : ng;
            int w = h ? c : (int)gc;
            if (join) rows_join_dt(x, x_dt, res, res_dt, y, y_dt, o, rows, w, m, a, b);
            else rows_fwd_dt(x, x_dt, (const float *)res, y, y_dt, o, rows, w, m, a, b, relu);
        }
    }
}

/* The backward row kernels read x as stored (LOAD(x, i): element i as a
 * float; the bf16 versions widen as they read) and, when the BN output is
 * not stored (y NULL, relu), recompute it per element with the forward
 * formula (rows_fwd's element, a[] = the forward scales): the same floats
 * as the NCHW path's widened and recomputed planes, so the same bits,
 * without the copies. */
/* g at element i of channel ch masked by the ReLU's output: stored (y) or
 * recomputed from xv. */
#define MASK_Y(i, ch, xv) sg_relu_mask(g[i], y[i])
#define MASK_REC(i, ch, xv) sg_relu_mask(g[i], sg_relu(sg_bn_fwd_elem(xv, m[ch], a[ch], b[ch])))
#define NO_MASK(i, ch, xv) g[i]

/* One row of d (+)= G*A + (x-m)*B + C (plane_bwd_elem's element). */
#define BWD_ELEM_ROW(LOAD, OP, G)                                                       \
    _Pragma("omp simd") for (int ch = 0; ch < c; ch++) {                                \
        float xv = LOAD(x, o + ch);                                                     \
        d[o + ch] OP sg_bn_bwd_elem(G(o + ch, ch, xv), xv, m[ch], A[ch], B[ch], C[ch]); \
    }

/* d (+)= g*A + (x-m)*B + C over np rows, g masked by y > 0 if relu. */
#define ROWS_BWD_ELEM(name, T, LOAD)                                                              \
    SG_CPU_CLONES static void name(const float *g, const T *x, const float *y, float *d, long np, \
                                   int c, const float *A, const float *B, const float *C,         \
                                   const float *m, const float *a, const float *b, int relu,      \
                                   int acc) {                                                     \
        for (long p = 0; p < np; p++) {                                                           \
            size_t o = (size_t)p * c;                                                             \
            if (relu && !y && acc) BWD_ELEM_ROW(LOAD, +=, MASK_REC)                               \
            else if (relu && !y) BWD_ELEM_ROW(LOAD, =, MASK_REC)                                  \
            else if (relu && acc) BWD_ELEM_ROW(LOAD, +=, MASK_Y)                                  \
            else if (relu) BWD_ELEM_ROW(LOAD, =, MASK_Y)                                          \
            else if (acc) BWD_ELEM_ROW(LOAD, +=, NO_MASK)                                         \
            else BWD_ELEM_ROW(LOAD, =, NO_MASK)                                                   \
        }                                                                                         \
    }
ROWS_BWD_ELEM(rows_bwd_elem, float, F32_LOAD)
ROWS_BWD_ELEM(rows_bwd_elem_bf16, uint16_t, BF16_LOAD)

static void nhwc_bwd_elem(sg_backend *be, const float *dy, const void *x, int x_dt, const float *y,
                          const float *mean, const float *invstd, const float *gamma,
                          const float *beta, const float *red, double count, float *dx, int n,
                          int c, int hw, int relu, int accumulate) {
    nhwc_split s = nhwc_split_of(n, c, hw, NHWC_TILE);
    int G = nhwc_group(c);
    size_t gc = (size_t)G * c, gp = nhwc_cpad((int)gc);
    /* the coefficients, mean, forward scale and beta of a group of rows */
    float *A = sg_cpu_act_buf(be, 1, 6 * gp), *B = A + gp, *C = B + gp;
    float *m = C + gp, *a = m + gp, *b = a + gp;
    for (int ch = 0; ch < c; ch++) {
        sg_bn_bwd_coefs k = sg_bn_bwd_coefs_of(invstd[ch], gamma[ch], red[ch], red[c + ch], count);
        A[ch] = k.A, B[ch] = k.B, C[ch] = k.C;
    }
    nhwc_repeat(A, A, c, G), nhwc_repeat(B, B, c, G), nhwc_repeat(C, C, c, G);
    nhwc_repeat(m, mean, c, G);
    if (!y && relu) {
        nhwc_fwd_scales(a, invstd, gamma, c);
        nhwc_repeat(a, a, c, G), nhwc_repeat(b, beta, c, G);
    }
#pragma omp parallel for schedule(static) if ((size_t)s.npix * c >= SG_CPU_PAR_MIN)
    for (long t = 0; t < s.tiles; t++) {
        long p0 = t * s.tile, np = s.npix - p0 < s.tile ? s.npix - p0 : s.tile;
        size_t off = (size_t)p0 * c;
        long ng = np / G; /* whole groups, then the rows left */
        for (int k = 0; k < 2; k++) {
            size_t o = off + (k ? (size_t)ng * gc : 0);
            long rows = k ? np % G : ng;
            int w = k ? c : (int)gc;
            const float *yp = y ? y + o : NULL;
            if (x_dt == SG_ACT_F32)
                rows_bwd_elem(dy + o, (const float *)x + o, yp, dx + o, rows, w, A, B, C, m, a, b,
                              relu, accumulate);
            else
                rows_bwd_elem_bf16(dy + o, (const uint16_t *)x + o, yp, dx + o, rows, w, A, B, C, m,
                                   a, b, relu, accumulate);
        }
    }
}

/* g where keep, else +0.0f: sg_relu_mask's result (keep = y > 0) as a bit
 * mask, which GCC vectorizes inside the double sums where it does not
 * if-convert the select (plane_reduce's note). */
static inline float keep_bits(float g, int keep) {
    uint32_t u;
    memcpy(&u, &g, sizeof u);
    u &= 0u - (uint32_t)keep;
    memcpy(&g, &u, sizeof u);
    return g;
}
#define KEEP_Y(i, ch, xv) keep_bits(g[i], y[i] > 0.0f)
#define KEEP_Y16(i, ch, xv) keep_bits(g[i], sg_bf16_to_f32(y16[i]) > 0.0f)
/* relu(v) > 0 exactly when v > 0 (NaN: neither), so the recomputed mask
 * skips the relu's select. */
#define KEEP_REC(i, ch, xv) keep_bits(g[i], sg_bn_fwd_elem(xv, m[ch], a[ch], b[ch]) > 0.0f)
#define DR_NONE(i, gv)
#define DR_ADD(i, gv) dr[i] += gv;
#define DR_SET(i, gv) dr[i] = gv;

/* Element i of channel ch into t, tx (and dr). */
#define REDUCE_ELEM(LOAD, G, DR, i)               \
    {                                             \
        float xv = LOAD(x, i), gv = G(i, ch, xv); \
        DR(i, gv)                                 \
        t += gv;                                  \
        tx += (double)gv * ((double)xv - mm);     \
    }

/* Prefetches n elements of g, x (and y16) from element o, one per 64-byte
 * line, for the loads four groups of four rows on: the hardware's
 * prefetchers left this loop waiting on its loads (the NHWC bf16 step's
 * profile, four groups ahead beating two and none: docs/lab/cpu-step-2026.md). */
#define REDUCE_PREFETCH(o, n)                                                 \
    for (size_t q_ = 0; q_ < (n); q_ += 16) {                                 \
        __builtin_prefetch(g + (o) + q_);                                     \
        if (q_ % 32 == 0) {                                                   \
            __builtin_prefetch((const char *)(x) + ((o) + q_) * sizeof *(x)); \
            if (y16) __builtin_prefetch(y16 + (o) + q_);                      \
        }                                                                     \
    }

/* The np rows, four at a time (in order, s and sx in registers across
 * them), then one at a time. */
#define REDUCE_ROWS(LOAD, G, DR)                                   \
    {                                                              \
        long p = 0;                                                \
        for (; p + 4 <= np; p += 4) {                              \
            size_t o = (size_t)p * c1;                             \
            REDUCE_PREFETCH(o + 16 * c1, 4 * c1)                   \
            _Pragma("omp simd") for (int ch = 0; ch < c; ch++) {   \
                double mm = (double)m[ch], t = s[ch], tx = sx[ch]; \
                REDUCE_ELEM(LOAD, G, DR, o + ch)                   \
                REDUCE_ELEM(LOAD, G, DR, o + c1 + ch)              \
                REDUCE_ELEM(LOAD, G, DR, o + 2 * c1 + ch)          \
                REDUCE_ELEM(LOAD, G, DR, o + 3 * c1 + ch)          \
                s[ch] = t, sx[ch] = tx;                            \
            }                                                      \
        }                                                          \
        for (; p < np; p++) {                                      \
            size_t o = (size_t)p * c1;                             \
            _Pragma("omp simd") for (int ch = 0; ch < c; ch++) {   \
                double mm = (double)m[ch], t = s[ch], tx = sx[ch]; \
                REDUCE_ELEM(LOAD, G, DR, o + ch)                   \
                s[ch] = t, sx[ch] = tx;                            \
            }                                                      \
        }                                                          \
    }

/* s[ch] += sum(g), sx[ch] += sum(g*(x-m)) over np rows, g masked by y > 0
 * if relu (y float32, or y16 bf16 bits read as they are: no widened copy);
 * with dr (relu and y only: bn_bwd_reduce_res) the masked g is also stored
 * into (acc: added to) dr. plane_reduce / plane_reduce_res per element,
 * each channel summed row by row. */
#define ROWS_REDUCE(name, T, LOAD)                                                                 \
    SG_CPU_CLONES static void name(const float *g, const T *x, const float *y,                     \
                                   const uint16_t *y16, float *dr, long np, int c, const float *m, \
                                   const float *a, const float *b, int relu, int acc, double *s,   \
                                   double *sx) {                                                   \
        size_t c1 = (size_t)c;                                                                     \
        if (!relu) REDUCE_ROWS(LOAD, NO_MASK, DR_NONE)                                             \
        else if (y16 && !dr) REDUCE_ROWS(LOAD, KEEP_Y16, DR_NONE)                                  \
        else if (y16 && acc) REDUCE_ROWS(LOAD, KEEP_Y16, DR_ADD)                                   \
        else if (y16) REDUCE_ROWS(LOAD, KEEP_Y16, DR_SET)                                          \
        else if (!y) REDUCE_ROWS(LOAD, KEEP_REC, DR_NONE)                                          \
        else if (!dr) REDUCE_ROWS(LOAD, KEEP_Y, DR_NONE)                                           \
        else if (acc) REDUCE_ROWS(LOAD, KEEP_Y, DR_ADD)                                            \
        else REDUCE_ROWS(LOAD, KEEP_Y, DR_SET)                                                     \
    }
ROWS_REDUCE(rows_reduce, float, F32_LOAD)
ROWS_REDUCE(rows_reduce_bf16, uint16_t, BF16_LOAD)

/* rows_reduce / rows_reduce_bf16 by x_dt on rows rows of w lanes at
 * element offset o (y: float32 rows at yp, bf16 ones at y16p, or neither). */
static void reduce_rows_dt(const float *dy, const void *x, int x_dt, const float *yp,
                           const uint16_t *y16p, float *dres, size_t o, long rows, int w,
                           const float *m, const float *a, const float *b, int relu, int accumulate,
                           double *ps, double *psx) {
    float *dr = dres ? dres + o : NULL;
    if (x_dt == SG_ACT_F32)
        rows_reduce(dy + o, (const float *)x + o, yp, y16p, dr, rows, w, m, a, b, relu, accumulate,
                    ps, psx);
    else
        rows_reduce_bf16(dy + o, (const uint16_t *)x + o, yp, y16p, dr, rows, w, m, a, b, relu,
                         accumulate, ps, psx);
}

/* bn_bwd_reduce_dt, and bn_bwd_reduce_res (relu, dres: the masked g).
 * Rows in groups (nhwc_group): each part sums G*c lanes over its whole
 * groups, its rows left into the first c, then folds the G copies of a
 * channel into the first in order. A bf16-stored y (the join's output) is
 * read as bf16 bits, its mask the float32 comparison of the widened value
 * (a widened copy, as before, cost a whole pass over it). */
static void nhwc_bwd_reduce(sg_backend *be, const float *dy, const void *x, int x_dt, const void *y,
                            int y_dt, const float *mean, const float *invstd, const float *gamma,
                            const float *beta, float *red, float *dres, int n, int c, int hw,
                            int relu, int accumulate) {
    nhwc_split s = nhwc_split_of(n, c, hw, NHWC_TILE);
    int G = nhwc_group(c);
    size_t gc = (size_t)G * c, gp = nhwc_cpad((int)gc);
    /* per part: sum(g), sum(g*(x-m)) [gp each] in double; then the mean,
     * forward scale and beta of a group [gp floats each] */
    double *part = (double *)sg_cpu_act_buf(be, 1, 4 * (size_t)s.parts * gp + 3 * gp);
    float *m = (float *)(part + 2 * (size_t)s.parts * gp), *a = m + gp, *b = a + gp;
    nhwc_repeat(m, mean, c, G);
    if (!y && relu) {
        nhwc_fwd_scales(a, invstd, gamma, c);
        nhwc_repeat(a, a, c, G), nhwc_repeat(b, beta, c, G);
    }
    int ybf = y && y_dt == SG_ACT_BF16;
#pragma omp parallel for schedule(static) if ((size_t)s.npix * c >= SG_CPU_PAR_MIN)
    for (long k = 0; k < s.parts; k++) {
        double *ps = part + 2 * (size_t)k * gp, *psx = ps + gp;
        for (size_t ch = 0; ch < gc; ch++) ps[ch] = 0, psx[ch] = 0;
        long p0, p1;
        nhwc_part(&s, k, &p0, &p1);
        long ng = (p1 - p0) / G; /* whole groups, then the rows left */
        for (int h = 0; h < 2; h++) {
            size_t o = (size_t)p0 * c + (h ? (size_t)ng * gc : 0);
            long rows = h ? (p1 - p0) % G : ng;
            int w = h ? c : (int)gc;
            const float *yp = y && !ybf ? (const float *)y + o : NULL;
            const uint16_t *y16p = ybf ? (const uint16_t *)y + o : NULL;
            reduce_rows_dt(dy, x, x_dt, yp, y16p, dres, o, rows, w, m, a, b, relu, accumulate, ps,
                           psx);
        }
        for (int r = 1; r < G; r++)
            for (int ch = 0; ch < c; ch++)
                ps[ch] += ps[(size_t)r * c + ch], psx[ch] += psx[(size_t)r * c + ch];
    }
    /* parts in order into part 0 (the same order for every channel) */
    for (long k = 1; k < s.parts; k++) {
        const double *ps = part + 2 * (size_t)k * gp;
#pragma omp simd
        for (int ch = 0; ch < c; ch++) part[ch] += ps[ch], part[gp + ch] += ps[gp + ch];
    }
    for (int ch = 0; ch < c; ch++) {
        red[ch] = (float)part[ch];
        red[c + ch] = (float)part[gp + ch];
    }
}

/* Chan's merge (sg_bn_merge's arithmetic, formulas/bn.h) of a set of nb
 * values per channel with means mb[] and M2s m2b[] into (*an, mean[],
 * m2[]): every channel shares the counts, so the factors are hoisted out
 * of the channel loop, which vectorizes; the same bits as sg_bn_merge per
 * channel. */
SG_CPU_CLONES static void merge_rows(double *an, double *mean, double *m2, double nb,
                                     const double *mb, const double *m2b, int c) {
    if (!(nb > 0)) return;
    double nab = sg_dadd(*an, nb), f1 = nb / nab, f2 = sg_dmul(*an, nb) / nab;
#pragma omp simd
    for (int ch = 0; ch < c; ch++) {
        double delta = sg_dsub(mb[ch], mean[ch]);
        mean[ch] = sg_dadd(mean[ch], sg_dmul(delta, f1));
        m2[ch] = sg_dadd(m2[ch], sg_dadd(m2b[ch], sg_dmul(sg_dmul(delta, delta), f2)));
    }
    *an = nab;
}

/* Folds the block of np rows at x into (*an, mean[], m2[]): the block's
 * mean and M2 about it (two passes over the block while it is in L2, in
 * double; bm, bm2: c doubles of scratch), merged with Chan's formula.
 * ELEM(r, ch): element ch of row r as a float (F32_LOAD, BF16_LOAD). */
#define ROWS_MOMENTS(name, T, ELEM)                                                      \
    SG_CPU_CLONES static void name(const T *x, long np, int c, double *an, double *mean, \
                                   double *m2, double *bm, double *bm2) {                \
        for (int ch = 0; ch < c; ch++) bm[ch] = 0, bm2[ch] = 0;                          \
        for (long p = 0; p < np; p++) {                                                  \
            const T *r = x + (size_t)p * c;                                              \
            _Pragma("omp simd") for (int ch = 0; ch < c; ch++) bm[ch] += ELEM(r, ch);    \
        }                                                                                \
        _Pragma("omp simd") for (int ch = 0; ch < c; ch++) bm[ch] /= (double)np;         \
        for (long p = 0; p < np; p++) {                                                  \
            const T *r = x + (size_t)p * c;                                              \
            _Pragma("omp simd") for (int ch = 0; ch < c; ch++) {                         \
                double dlt = (double)ELEM(r, ch) - bm[ch];                               \
                bm2[ch] += dlt * dlt;                                                    \
            }                                                                            \
        }                                                                                \
        merge_rows(an, mean, m2, (double)np, bm, bm2, c);                                \
    }
ROWS_MOMENTS(rows_moments, float, F32_LOAD)
ROWS_MOMENTS(rows_moments_bf16, uint16_t, BF16_LOAD)

/* Rows in groups (nhwc_group): each part takes the moments of G*c lanes
 * over its whole groups (every lane one value per group), folds the G
 * copies of a channel into the first with Chan's formula, in order, then
 * its rows left as one more block. */
static void nhwc_stats(sg_backend *be, const void *x, int x_dt, int n, int c, int hw,
                       float *stats) {
    nhwc_split s = nhwc_split_of(n, c, hw, NHWC_STATS_TILE);
    int G = nhwc_group(c);
    size_t gc = (size_t)G * c, gp = nhwc_cpad((int)gc);
    long gtile = s.tile / G; /* groups per block */
    /* per part: mean, M2, and the block's mean, M2 [gp each]; then the
     * parts' counts */
    double *part = (double *)sg_cpu_act_buf(be, 1, 2 * (4 * (size_t)s.parts * gp + s.parts));
    double *cnt = part + 4 * (size_t)s.parts * gp;
#pragma omp parallel for schedule(static) if ((size_t)s.npix * c >= SG_CPU_PAR_MIN)
    for (long k = 0; k < s.parts; k++) {
        double *mean = part + 4 * (size_t)k * gp, *m2 = mean + gp, *bm = m2 + gp, *bm2 = bm + gp;
        for (size_t ch = 0; ch < gc; ch++) mean[ch] = 0, m2[ch] = 0;
        double an = 0;
        long p0, p1;
        nhwc_part(&s, k, &p0, &p1);
        const float *xf = (const float *)x + (size_t)p0 * c;
        const uint16_t *xb = (const uint16_t *)x + (size_t)p0 * c;
        long ng = (p1 - p0) / G, rest = (p1 - p0) % G;
        for (long q = 0; q < ng; q += gtile) { /* blocks of whole groups */
            long np = ng - q < gtile ? ng - q : gtile;
            if (x_dt == SG_ACT_F32) rows_moments(xf + q * gc, np, (int)gc, &an, mean, m2, bm, bm2);
            else rows_moments_bf16(xb + q * gc, np, (int)gc, &an, mean, m2, bm, bm2);
        }
        double each = an; /* fold the copies of each channel, an values each */
        for (int r = 1; r < G; r++)
            merge_rows(&an, mean, m2, each, mean + (size_t)r * c, m2 + (size_t)r * c, c);
        if (rest && x_dt == SG_ACT_F32) /* the rows left: one more block */
            rows_moments(xf + ng * gc, rest, c, &an, mean, m2, bm, bm2);
        else if (rest) rows_moments_bf16(xb + ng * gc, rest, c, &an, mean, m2, bm, bm2);
        cnt[k] = an;
    }
    /* parts in order into part 0 */
    double an = cnt[0];
    for (long k = 1; k < s.parts; k++) {
        const double *pk = part + 4 * (size_t)k * gp;
        merge_rows(&an, part, part + gp, cnt[k], pk, pk + gp, c);
    }
    for (int ch = 0; ch < c; ch++) {
        stats[ch] = (float)part[ch];
        stats[c + ch] = (float)part[gp + ch];
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
