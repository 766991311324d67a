/* kernels/cuda/cuda_bn.cu - batch norm (SyncBN-ready split): the bn group
 * of tests/backend/run_bn.c and the BN *_dt ops of the act_bf16 group
 * (kernels/cpu/cpu_bn.c on the CPU; the conv bias is cuda_conv_bias.cu).
 *
 * Per-channel reductions (bn_stats, bn_bwd_reduce) split each channel's
 * n*hw values over `splits` blocks (enough blocks to fill the GPU),
 * accumulate in double, and merge the per-block partials in a second small
 * kernel in a fixed order: no atomics, deterministic results
 * (cuda_chan_reduce.cuh, shared with the bias gradient).
 * bn_stats reads x once: each thread sums its values' deviations from the
 * first of them (shifted data, in double: no cancellation as long as that
 * value lies within a few standard deviations of the mean, as a sample of
 * the channel does), turns them into (count, mean, M2), and the threads,
 * then the blocks, merge with Chan's formula in a fixed order; bn_finalize
 * merges the parts (ranks) with Chan's formula in double, as backend.h
 * specifies. The splits fill one whole wave of resident blocks
 * (chan_splits_for).
 * The residual join's fused ops (bn_add_relu_fwd, bn_bwd_reduce_res) are
 * k_bn_fwd and k_bn_bwd_reduce_part with the add / the residual's gradient
 * folded in: the same per-element operations as the unfused chain.
 * Elementwise ops run per plane (cuda_internal.h: grid.y = the planes, in
 * either layout), their per-channel factors computed once per plane (NCHW)
 * or once per thread (NHWC: bn_chan_elems). In NHWC (be->layout) the
 * reductions are column reductions (cuda_chan_reduce.cuh) into the same
 * partial slots, merged by the same kernels; with c a multiple of 8 and
 * 16-byte aligned activations by the vector route (*_part_v kernels:
 * 16-byte loads, rows unrolled), which sums in the scalar route's order and
 * so gives its bits (tests/backend/run_routes.c).
 * The merge, the finalize and the per-element formulas are
 * kernels/formulas/bn.h, shared with the CPU backend: from the same partial
 * statistics and inputs both give the same bits. (Before that header, this
 * file had its own copies: Chan's merge rounded delta*nb/nt and
 * delta*delta*n*nb/nt left to right instead of the CPU's delta*(nb/nt) and
 * delta*delta*(n*nb/nt), and nvcc fused the running-stat update and the
 * per-element (x-m)*a+b and g*A+(x-m)*B+C into FMAs, so results differed
 * from the CPU's in the last bits.)
 *
 * bf16 activation storage (the *_dt ops, backend.h): the statistics, the
 * normalize and the two backward kernels are templates over how x is
 * stored (float, or bf16 bits widened exactly on load) and, for the
 * normalize, how y is stored (float, or rounded to bf16 bits on store). The
 * arithmetic is the same code for every instantiation, so a bf16-stored x
 * gives the bits the float path gives on the same values. A fused ReLU
 * whose output is stored in bf16 (y NULL in the backward) has its mask
 * recomputed from x with the forward formula (formulas/bn.h, explicitly
 * rounded operations: no FMA contraction can make it differ from k_bn_fwd).
 * The two backward kernels are templates over the gradients' storage too
 * (G: dy, D: dx; float or bf16 bits, a bf16 dx rounded once on store).
 */
#include <string.h>

#include "core/log.h"
#include "kernels/cuda/cuda_chan_reduce.cuh"
#include "kernels/cuda/cuda_internal.h"
#include "kernels/cuda/cuda_reduce.cuh"
#include "kernels/formulas/bf16.h"
#include "kernels/formulas/bn.h"

/* Loads and stores of an activation stored as float or as bf16 bits. */
__device__ __forceinline__ float act_ld(const float *p, size_t i) { return p[i]; }
__device__ __forceinline__ float act_ld(const uint16_t *p, size_t i) {
    return sg_bf16_to_f32(p[i]);
}
__device__ __forceinline__ void act_st(float *p, size_t i, float v) { p[i] = v; }
__device__ __forceinline__ void act_st(uint16_t *p, size_t i, float v) { p[i] = sg_bf16_bits(v); }

/* The ReLU mask's source in the backward: the stored float output y[i], or
 * (y NULL) the output recomputed from x[i] as k_bn_fwd computes it. */
template <typename X>
__device__ __forceinline__ float bn_out(const float *y, const X *x, size_t i, float m, float a,
                                        float bt) {
    return y ? y[i] : sg_relu(sg_bn_fwd_elem(act_ld(x, i), m, a, bt));
}
#define BN_INLINE_PARTS 64

/* ---- statistics ---- */

/* (count, mean, M2) of v over the block, merged with Chan's formula in a
 * fixed order (warp shuffles, then the warps in order); valid in thread 0.
 * `sh` holds 3 * 32 doubles. */
__device__ __forceinline__ sg_bn_moments block_moments(sg_bn_moments v, double *sh) {
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    for (int o = 16; o > 0; o >>= 1) {
        double nb = __shfl_down_sync(0xffffffffu, v.n, o);
        double mb = __shfl_down_sync(0xffffffffu, v.mean, o);
        double m2b = __shfl_down_sync(0xffffffffu, v.m2, o);
        if (lane + o < 32) sg_bn_merge(&v, nb, mb, m2b);
    }
    if (lane == 0) sh[warp] = v.n, sh[32 + warp] = v.mean, sh[64 + warp] = v.m2;
    __syncthreads();
    if (threadIdx.x == 0) {
        int nwarps = (blockDim.x + 31) >> 5;
        for (int w = 1; w < nwarps; w++) sg_bn_merge(&v, sh[w], sh[32 + w], sh[64 + w]);
    }
    return v;
}

/* NHWC (cuda_chan_reduce.cuh): the moments of each column's row lanes,
 * merged in row order; valid in row lane 0. `sh` holds 3 * SG_CHAN_THREADS
 * doubles. */
__device__ __forceinline__ sg_bn_moments col_moments(sg_bn_moments v, double *sh) {
    const int T = SG_CHAN_THREADS;
    int t = threadIdx.x;
    __syncthreads();
    sh[t] = v.n, sh[T + t] = v.mean, sh[2 * T + t] = v.m2;
    __syncthreads();
    if (t < SG_COL_W)
        for (int r = 1; r < SG_COL_ROWS; r++) {
            int u = r * SG_COL_W + t;
            sg_bn_merge(&v, sh[u], sh[T + u], sh[2 * T + u]);
        }
    return v;
}

/* Each block: count, mean and M2 of its slice of channel ch (NCHW: the
 * block's channel; NHWC: each column's, cuda_chan_reduce.cuh), reading x
 * once. Each thread accumulates (v - k) and (v - k)^2 about k, its first
 * value (shifted data), in double; M2 = sum (v-k)^2 - (sum (v-k))^2 / count. */
template <typename X>
__global__ void k_bn_stats_part(const X *x, int n, int c, int hw, int nhwc, double *part) {
    __shared__ double sh[3 * SG_CHAN_THREADS];
    int ch = nhwc ? col_channel() : (int)blockIdx.y;
    double k = 0, s1 = 0, s2 = 0, cnt = 0;
    int first = 1;
    auto visit = [&](size_t i) {
        double v = (double)act_ld(x, i);
        if (first) k = v, first = 0;
        double d = v - k;
        s1 += d;
        s2 = chan_fma(d, d, s2);
        cnt += 1;
    };
    if (nhwc) {
        COL_SLICE_BEGIN(i, n, c, hw, ch)
        visit(i);
        COL_SLICE_END
    } else {
        CHAN_SLICE_BEGIN(i, base, n, c, hw, ch)
        visit(i);
        CHAN_SLICE_END
    }
    sg_bn_moments t = {0, 0, 0};
    if (cnt > 0) {
        t.n = cnt;
        t.mean = k + s1 / cnt;
        double m2 = s2 - s1 * s1 / cnt;
        t.m2 = m2 > 0 ? m2 : 0.0;
    }
    t = nhwc ? col_moments(t, sh) : block_moments(t, sh);
    if (chan_writer(nhwc) && ch < c) {
        double *o = part + ((size_t)ch * gridDim.x + blockIdx.x) * 3;
        o[0] = t.n;
        o[1] = t.n > 0 ? t.mean : 0.0;
        o[2] = t.m2;
    }
}

/* A row of SG_COLV values of x (cuda_chan_reduce.cuh's vector route). */
template <typename X> struct colv_x_row {
    const X *x;
    float v[SG_COLV];
    __device__ __forceinline__ void load(size_t i) { colv_ld(x, i, v); }
};

/* k_bn_stats_part's NHWC vector route: per channel the same shifted sums
 * over the same rows in the same order, and col_moments' merge in row
 * order (cuda_chan_reduce.cuh). */
template <typename X>
__global__ void k_bn_stats_part_v(const X *x, int n, int c, int hw, double *part) {
    __shared__ double sh[3 * SG_CHAN_THREADS];
    double k[SG_COLV], s1[SG_COLV], s2[SG_COLV], cnt = 0;
    int first = 1;
    SG_UNROLL
    for (int e = 0; e < SG_COLV; e++) k[e] = 0, s1[e] = 0, s2[e] = 0;
    colv_x_row<X> proto;
    proto.x = x;
    colv_rows(n, c, hw, colv_channel(), proto, [&](const colv_x_row<X> &r) {
        SG_UNROLL
        for (int e = 0; e < SG_COLV; e++) {
            double v = (double)r.v[e];
            if (first) k[e] = v;
            double d = v - k[e];
            s1[e] += d;
            s2[e] = chan_fma(d, d, s2[e]);
        }
        first = 0;
        cnt += 1;
    });
    const int T = SG_CHAN_THREADS;
    int base = colv_row() * SG_COL_W + ((int)threadIdx.x % SG_COLV_LANES) * SG_COLV;
    __syncthreads();
    SG_UNROLL
    for (int e = 0; e < SG_COLV; e++) {
        sg_bn_moments t = {0, 0, 0};
        if (cnt > 0) {
            t.n = cnt;
            t.mean = k[e] + s1[e] / cnt;
            double m2 = s2[e] - s1[e] * s1[e] / cnt;
            t.m2 = m2 > 0 ? m2 : 0.0;
        }
        sh[base + e] = t.n, sh[T + base + e] = t.mean, sh[2 * T + base + e] = t.m2;
    }
    __syncthreads();
    int t = threadIdx.x, ch = (int)blockIdx.y * SG_COL_W + t;
    if (t < SG_COL_W && ch < c) {
        sg_bn_moments v = {sh[t], sh[T + t], sh[2 * T + t]};
        for (int r = 1; r < SG_COL_ROWS; r++) {
            int u = r * SG_COL_W + t;
            sg_bn_merge(&v, sh[u], sh[T + u], sh[2 * T + u]);
        }
        double *o = part + ((size_t)ch * gridDim.x + blockIdx.x) * 3;
        o[0] = v.n;
        o[1] = v.n > 0 ? v.mean : 0.0;
        o[2] = v.m2;
    }
}

/* Chan's merge of the blocks' (count, mean, M2), in block order. */
__global__ void k_bn_stats_merge(const double *part, int c, int splits, float *stats) {
    int ch = blockIdx.x * blockDim.x + threadIdx.x;
    if (ch >= c) return;
    sg_bn_moments m = {0, 0, 0};
    for (int s = 0; s < splits; s++) {
        const double *p = part + ((size_t)ch * splits + s) * 3;
        sg_bn_merge(&m, p[0], p[1], p[2]); /* skips empty slices */
    }
    stats[ch] = (float)m.mean;
    stats[c + ch] = (float)m.m2;
}

template <typename X>
static void bn_stats(sg_backend *be, const X *x, int n, int c, int hw, float *stats) {
    sg_cuda *cu = sg_cu(be);
    SG_CHECK((size_t)n * hw > 0, "CUDA backend: bn_stats over zero values (n=%d hw=%d)", n, hw);
    if (c <= 0) return;
    static int occupancy[16];
    int nhwc = sg_cu_nhwc(be);
    int splits = chan_splits_layout(cu, nhwc, c, (long long)n * hw,
                                    chan_blocks_per_sm(cu, k_bn_stats_part<X>, occupancy, 16));
    cudaStream_t st = sg_cu_stream(be);
    if (colv_ok(nhwc, c, x)) {
        SG_LAUNCH(chan_grid(nhwc, c, splits), SG_COLV_THREADS, 0, st, k_bn_stats_part_v<X>)
        (x, n, c, hw, cu->chan_partial);
        CU_LAUNCH_CHECK("k_bn_stats_part_v");
    } else {
        SG_LAUNCH(chan_grid(nhwc, c, splits), SG_CHAN_THREADS, 0, st, k_bn_stats_part<X>)
        (x, n, c, hw, nhwc, cu->chan_partial);
        CU_LAUNCH_CHECK("k_bn_stats_part");
    }
    SG_LAUNCH((c + 127) / 128, 128, 0, st, k_bn_stats_merge)(cu->chan_partial, c, splits, stats);
    CU_LAUNCH_CHECK("k_bn_stats_merge");
}

static void sg_cuda_bn_stats(sg_backend *be, const float *x, int n, int c, int hw, float *stats) {
    bn_stats(be, x, n, c, hw, stats);
}

static void sg_cuda_bn_stats_dt(sg_backend *be, const void *x, int x_dt, int n, int c, int hw,
                                float *stats) {
    if (sg_cuda_act_dt(x_dt, "bn_stats_dt") == SG_ACT_BF16)
        bn_stats(be, (const uint16_t *)x, n, c, hw, stats);
    else bn_stats(be, (const float *)x, n, c, hw, stats);
}

typedef struct inline_counts {
    long long v[BN_INLINE_PARTS];
} inline_counts;

__global__ void k_bn_finalize(const float *parts_stats, inline_counts ic, const int64_t *cdev,
                              int parts, int c, float eps, float momentum, float *mean,
                              float *invstd, float *running_mean, float *running_var) {
    int ch = blockIdx.x * blockDim.x + threadIdx.x;
    if (ch >= c) return;
    sg_bn_moments s = {0, 0, 0};
    for (int p = 0; p < parts; p++) {
        long long nb = cdev ? (long long)cdev[p] : ic.v[p];
        if (nb <= 0) continue; /* as the CPU: an empty part's stats are not read */
        sg_bn_merge(&s, (double)nb, parts_stats[(size_t)p * 2 * c + ch],
                    parts_stats[(size_t)p * 2 * c + c + ch]);
    }
    sg_bn_finalize_channel(&s, eps, momentum, mean + ch, invstd + ch,
                           running_mean ? running_mean + ch : NULL,
                           running_mean ? running_var + ch : NULL);
}

static void sg_cuda_bn_finalize(sg_backend *be, const float *parts_stats, const int64_t *counts,
                                int parts, int c, float eps, float momentum, float *mean,
                                float *invstd, float *running_mean, float *running_var) {
    sg_cuda *cu = sg_cu(be);
    SG_CHECK(parts >= 1, "CUDA backend: bn_finalize with %d parts", parts);
    SG_CHECK(!running_mean == !running_var,
             "CUDA backend: bn_finalize needs both running_mean and running_var, or neither");
    if (c <= 0) return; /* an empty grid is a launch error */
    inline_counts ic;
    memset(&ic, 0, sizeof ic);
    const int64_t *cdev = NULL;
    if (parts <= BN_INLINE_PARTS) {
        for (int p = 0; p < parts; p++) ic.v[p] = counts[p];
    } else {
        /* more parts than fit in the kernel's arguments: stage the counts
         * (from pageable memory, which a graph cannot record) */
        sg_cu_no_capture(cu, "bn_finalize with more parts than its inline counts");
        if (parts > cu->counts_cap) {
            sg_cuda_raw_free(cu, cu->counts_dev, (size_t)cu->counts_cap * sizeof(int64_t));
            cu->counts_dev = (int64_t *)sg_cuda_raw_alloc(cu, (size_t)parts * sizeof(int64_t),
                                                          "bn_finalize counts");
            cu->counts_cap = parts;
        }
        /* from pageable memory: returns once the source is staged */
        CU_CHECK(cudaMemcpyAsync(cu->counts_dev, counts, (size_t)parts * sizeof(int64_t),
                                 cudaMemcpyHostToDevice, cu->streams[SG_STREAM_COMPUTE]));
        cdev = cu->counts_dev;
    }
    SG_LAUNCH((c + 127) / 128, 128, 0, sg_cu_stream(be), k_bn_finalize)
    (parts_stats, ic, cdev, parts, c, eps, momentum, mean, invstd, running_mean, running_var);
    CU_LAUNCH_CHECK("k_bn_finalize");
}

__global__ void k_bn_eval_params(const float *rm, const float *rv, int c, float eps, float *mean,
                                 float *invstd) {
    int ch = blockIdx.x * blockDim.x + threadIdx.x;
    if (ch >= c) return;
    mean[ch] = rm[ch];
    invstd[ch] = sg_bn_eval_invstd(rv[ch], eps);
}

static void sg_cuda_bn_eval_params(sg_backend *be, const float *running_mean,
                                   const float *running_var, int c, float eps, float *mean,
                                   float *invstd) {
    if (c <= 0) return;
    SG_LAUNCH((c + 127) / 128, 128, 0, sg_cu_stream(be), k_bn_eval_params)
    (running_mean, running_var, c, eps, mean, invstd);
    CU_LAUNCH_CHECK("k_bn_eval_params");
}

/* ---- normalize ---- */

/* The per-channel elementwise kernels (normalize, backward element, the
 * fused join) in either layout (cuda_internal.h's planes): elem(i, k) for
 * every element i with its channel's factors k = factors(ch). NCHW takes
 * the factors once per plane; NHWC once per thread: its threads keep their
 * channel j and walk the planes (bn_elem_grid bounds grid.y so that each
 * walks many), instead of recomputing them per element (fp64 operations:
 * 1/64 rate on most GPUs). The same factors and the same per-element code
 * either way: the same bits. */
template <typename K, typename F, typename E>
__device__ __forceinline__ void bn_chan_elems(int nhwc, int c, int inner, size_t planes, F factors,
                                              E elem) {
    if (nhwc) {
        SG_INPLANE_LOOP(j, inner) {
            K k = factors(j);
            SG_PLANE_LOOP(pl, planes) elem(pl * inner + j, k);
        }
    } else {
        SG_PLANE_LOOP(pl, planes) {
            K k = factors((int)(pl % c));
            size_t off = pl * inner;
            SG_INPLANE_LOOP(j, inner) elem(off + j, k);
        }
    }
}

/* The grid of those kernels: sg_cu_plane_grid, and under NHWC at most
 * BN_ELEM_WAVES waves of resident blocks (2048 threads per SM), so that a
 * thread's factors serve many planes. */
#define BN_ELEM_WAVES 2
static dim3 bn_elem_grid(sg_backend *be, int nhwc, int inner, size_t planes, dim3 t) {
    dim3 g = sg_cu_plane_grid(inner, planes, t);
    if (nhwc) {
        long long cap = (long long)sg_cu(be)->sm_count * (2048 / (t.x * t.y)) * BN_ELEM_WAVES / g.x;
        if (cap < 1) cap = 1;
        if ((long long)g.y > cap) g.y = (unsigned)cap;
    }
    return g;
}

/* The per-channel factors of the normalize (mean, scale, shift). */
typedef struct bn_fwd_k {
    float m, a, bt;
} bn_fwd_k;
__device__ __forceinline__ bn_fwd_k bn_fwd_k_of(const float *mean, const float *invstd,
                                                const float *gamma, const float *beta, int ch) {
    bn_fwd_k k = {mean[ch], sg_bn_fwd_scale(invstd[ch], gamma[ch]), beta[ch]};
    return k;
}

/* Per plane in either layout (bn_chan_elems). */
template <typename X, typename Y>
__global__ void k_bn_fwd(const X *x, const float *mean, const float *invstd, const float *gamma,
                         const float *beta, Y *y, int c, int inner, size_t planes, int nhwc,
                         int relu) {
    bn_chan_elems<bn_fwd_k>(
        nhwc, c, inner, planes, [&](int ch) { return bn_fwd_k_of(mean, invstd, gamma, beta, ch); },
        [&](size_t i, const bn_fwd_k &k) {
            float v = sg_bn_fwd_elem(act_ld(x, i), k.m, k.a, k.bt);
            act_st(y, i, relu ? sg_relu(v) : v);
        });
}

/* k_bn_fwd's NHWC vector route (c a multiple of SG_COLV, x and y 16-byte
 * aligned: colv_ok): a thread keeps channels 8j .. 8j+7 and their factors
 * and walks the pixels, 16-byte loads and stores; each element's
 * arithmetic is k_bn_fwd's. */
template <typename X, typename Y>
__global__ void k_bn_fwd_v(const X *x, const float *mean, const float *invstd, const float *gamma,
                           const float *beta, Y *y, int c, size_t planes, int relu) {
    SG_INPLANE_LOOP(j, c / SG_COLV) {
        bn_fwd_k k[SG_COLV];
        SG_UNROLL
        for (int e = 0; e < SG_COLV; e++)
            k[e] = bn_fwd_k_of(mean, invstd, gamma, beta, j * SG_COLV + e);
        SG_PLANE_LOOP(pl, planes) {
            size_t i = pl * c + (size_t)j * SG_COLV;
            float v[SG_COLV];
            colv_ld(x, i, v);
            SG_UNROLL
            for (int e = 0; e < SG_COLV; e++) {
                float o = sg_bn_fwd_elem(v[e], k[e].m, k[e].a, k[e].bt);
                v[e] = relu ? sg_relu(o) : o;
            }
            colv_st(y, i, v);
        }
    }
}

template <typename X, typename Y>
static void bn_fwd(sg_backend *be, const X *x, const float *mean, const float *invstd,
                   const float *gamma, const float *beta, Y *y, int n, int c, int hw, int relu) {
    int nhwc = sg_cu_nhwc(be), inner = sg_cu_inner(nhwc, c, hw);
    size_t planes = sg_cu_planes(nhwc, n, c, hw);
    if (!planes || hw <= 0 || c <= 0) return;
    if (colv_ok(nhwc, c, x, y)) {
        dim3 tv = sg_cu_plane_block(c / SG_COLV);
        SG_LAUNCH(bn_elem_grid(be, 1, c / SG_COLV, planes, tv), tv, 0, sg_cu_stream(be),
                  k_bn_fwd_v<X, Y>)
        (x, mean, invstd, gamma, beta, y, c, planes, relu);
        CU_LAUNCH_CHECK("k_bn_fwd_v");
        return;
    }
    dim3 t = sg_cu_plane_block(inner);
    SG_LAUNCH(bn_elem_grid(be, nhwc, inner, planes, t), t, 0, sg_cu_stream(be), k_bn_fwd<X, Y>)
    (x, mean, invstd, gamma, beta, y, c, inner, planes, nhwc, relu);
    CU_LAUNCH_CHECK("k_bn_fwd");
}

static void sg_cuda_bn_fwd(sg_backend *be, const float *x, const float *mean, const float *invstd,
                           const float *gamma, const float *beta, float *y, int n, int c, int hw,
                           int relu) {
    bn_fwd(be, x, mean, invstd, gamma, beta, y, n, c, hw, relu);
}

static void sg_cuda_bn_fwd_dt(sg_backend *be, const void *x, int x_dt, const float *mean,
                              const float *invstd, const float *gamma, const float *beta, void *y,
                              int y_dt, int n, int c, int hw, int relu) {
    int xb = sg_cuda_act_dt(x_dt, "bn_fwd_dt") == SG_ACT_BF16;
    int yb = sg_cuda_act_dt(y_dt, "bn_fwd_dt") == SG_ACT_BF16;
    if (xb && yb)
        bn_fwd(be, (const uint16_t *)x, mean, invstd, gamma, beta, (uint16_t *)y, n, c, hw, relu);
    else if (xb)
        bn_fwd(be, (const uint16_t *)x, mean, invstd, gamma, beta, (float *)y, n, c, hw, relu);
    else if (yb)
        bn_fwd(be, (const float *)x, mean, invstd, gamma, beta, (uint16_t *)y, n, c, hw, relu);
    else bn_fwd(be, (const float *)x, mean, invstd, gamma, beta, (float *)y, n, c, hw, relu);
}

/* ---- backward ---- */

/* y NULL (relu): the mask from the output recomputed from x with invstd,
 * gamma, beta (bn_out); else they are not read. */
/* The end of a backward reduction block: the block's (sum g, sum g*(x-mean))
 * of channel ch into its partial slot, merged by k_chan_sum_merge. */
__device__ static void bwd_part_store(double *part, int nhwc, int ch, int c, double sg, double sgx,
                                      double *sh) {
    sg = chan_block_sum(nhwc, sg, sh);
    sgx = chan_block_sum(nhwc, sgx, sh);
    if (chan_writer(nhwc) && ch < c) {
        double *o = part + ((size_t)ch * gridDim.x + blockIdx.x) * 3;
        o[0] = sg;
        o[1] = sgx;
    }
}

/* The partial sums of `splits` blocks per channel into red[0..c) and
 * red[c..2c) on the compute stream. */
static void bwd_merge(sg_backend *be, int c, int splits, float *red) {
    SG_LAUNCH((c + 127) / 128, 128, 0, sg_cu_stream(be), k_chan_sum_merge)
    (sg_cu(be)->chan_partial, c, splits, red, red + c, 0);
    CU_LAUNCH_CHECK("k_chan_sum_merge (bn backward)");
}

template <typename X, typename G>
__global__ void k_bn_bwd_reduce_part(const G *dy, const X *x, const float *y, const float *mean,
                                     const float *invstd, const float *gamma, const float *beta,
                                     int n, int c, int hw, int nhwc, int relu, double *part) {
    __shared__ double sh[SG_CHAN_THREADS];
    int ch = nhwc ? col_channel() : (int)blockIdx.y;
    int cl = ch < c ? ch : 0; /* NHWC: a column past c reads nothing but loads in range */
    double m = mean[cl];
    float mf = mean[cl], a = 0, bt = 0;
    if (relu && !y) a = sg_bn_fwd_scale(invstd[cl], gamma[cl]), bt = beta[cl];
    double sg = 0, sgx = 0;
    auto visit = [&](size_t i) {
        float g = relu ? sg_relu_mask(act_ld(dy, i), bn_out(y, x, i, mf, a, bt)) : act_ld(dy, i);
        sg += g;
        sgx = chan_fma((double)g, (double)act_ld(x, i) - m, sgx);
    };
    if (nhwc) {
        COL_SLICE_BEGIN(i, n, c, hw, ch)
        visit(i);
        COL_SLICE_END
    } else {
        CHAN_SLICE_BEGIN(i, base, n, c, hw, ch)
        visit(i);
        CHAN_SLICE_END
    }
    bwd_part_store(part, nhwc, ch, c, sg, sgx, sh);
}

/* A row of the backward reduction's vector route: dy, x, and y (when the
 * mask reads it; else NULL). */
template <typename X, typename G> struct colv_bwd_row {
    const G *dy;
    const X *x;
    const float *y;
    float g[SG_COLV], xv[SG_COLV], yv[SG_COLV];
    __device__ __forceinline__ void load(size_t i) {
        colv_ld(dy, i, g);
        colv_ld(x, i, xv);
        if (y) colv_ld(y, i, yv);
    }
};

/* k_bn_bwd_reduce_part's NHWC vector route (cuda_chan_reduce.cuh): the
 * same per-element operations, each channel's sums in the same order. */
template <typename X, typename G>
__global__ void k_bn_bwd_reduce_part_v(const G *dy, const X *x, const float *y, const float *mean,
                                       const float *invstd, const float *gamma, const float *beta,
                                       int n, int c, int hw, int relu, double *part) {
    __shared__ double sh[SG_CHAN_THREADS];
    int ch = colv_channel();
    int cl = ch < c ? ch : 0; /* a vector past c reads nothing but loads in range */
    double m[SG_COLV], sg[SG_COLV], sgx[SG_COLV];
    float mf[SG_COLV], a[SG_COLV], bt[SG_COLV];
    SG_UNROLL
    for (int e = 0; e < SG_COLV; e++) {
        m[e] = mean[cl + e], mf[e] = mean[cl + e], a[e] = 0, bt[e] = 0, sg[e] = 0, sgx[e] = 0;
        if (relu && !y) a[e] = sg_bn_fwd_scale(invstd[cl + e], gamma[cl + e]), bt[e] = beta[cl + e];
    }
    colv_bwd_row<X, G> proto;
    proto.dy = dy, proto.x = x, proto.y = relu ? y : NULL;
    colv_rows(n, c, hw, ch, proto, [&](const colv_bwd_row<X, G> &r) {
        SG_UNROLL
        for (int e = 0; e < SG_COLV; e++) {
            float g = r.g[e];
            if (relu)
                g = sg_relu_mask(g, y ? r.yv[e]
                                      : sg_relu(sg_bn_fwd_elem(r.xv[e], mf[e], a[e], bt[e])));
            sg[e] += g;
            sgx[e] = chan_fma((double)g, (double)r.xv[e] - m[e], sgx[e]);
        }
    });
    colv_part_store(part, c, sg, sgx, sh);
}

template <typename X, typename G = float>
static void bn_bwd_reduce(sg_backend *be, const G *dy, const X *x, const float *y,
                          const float *mean, const float *invstd, const float *gamma,
                          const float *beta, float *red, int n, int c, int hw, int relu) {
    sg_cuda *cu = sg_cu(be);
    if (c <= 0) return;
    static int occupancy[16];
    int nhwc = sg_cu_nhwc(be);
    int splits =
        chan_splits_layout(cu, nhwc, c, (long long)n * hw,
                           chan_blocks_per_sm(cu, k_bn_bwd_reduce_part<X, G>, occupancy, 16));
    cudaStream_t st = sg_cu_stream(be);
    if (colv_ok(nhwc, c, dy, x, relu ? y : NULL)) {
        SG_LAUNCH(chan_grid(nhwc, c, splits), SG_COLV_THREADS, 0, st, k_bn_bwd_reduce_part_v<X, G>)
        (dy, x, y, mean, invstd, gamma, beta, n, c, hw, relu, cu->chan_partial);
        CU_LAUNCH_CHECK("k_bn_bwd_reduce_part_v");
    } else {
        SG_LAUNCH(chan_grid(nhwc, c, splits), SG_CHAN_THREADS, 0, st, k_bn_bwd_reduce_part<X, G>)
        (dy, x, y, mean, invstd, gamma, beta, n, c, hw, nhwc, relu, cu->chan_partial);
        CU_LAUNCH_CHECK("k_bn_bwd_reduce_part");
    }
    bwd_merge(be, c, splits, red);
}

static void sg_cuda_bn_bwd_reduce(sg_backend *be, const float *dy, const float *x, const float *y,
                                  const float *mean, float *red, int n, int c, int hw, int relu) {
    SG_CHECK(y || !relu, "CUDA backend: bn_bwd_reduce with relu needs y");
    bn_bwd_reduce(be, dy, x, y, mean, NULL, NULL, NULL, red, n, c, hw, relu);
}

template <typename G>
static void bn_bwd_reduce_g(sg_backend *be, const G *dy, const void *x, int x_dt, const float *y,
                            const float *mean, const float *invstd, const float *gamma,
                            const float *beta, float *red, int n, int c, int hw, int relu) {
    if (sg_cuda_act_dt(x_dt, "bn_bwd_reduce_dt") == SG_ACT_BF16)
        bn_bwd_reduce(be, dy, (const uint16_t *)x, y, mean, invstd, gamma, beta, red, n, c, hw,
                      relu);
    else bn_bwd_reduce(be, dy, (const float *)x, y, mean, invstd, gamma, beta, red, n, c, hw, relu);
}

static void sg_cuda_bn_bwd_reduce_dt(sg_backend *be, const void *dy, int dy_dt, const void *x,
                                     int x_dt, const float *y, const float *mean,
                                     const float *invstd, const float *gamma, const float *beta,
                                     float *red, int n, int c, int hw, int relu) {
    if (sg_cuda_act_dt(dy_dt, "bn_bwd_reduce_dt (dy_dt)") == SG_ACT_BF16)
        bn_bwd_reduce_g(be, (const uint16_t *)dy, x, x_dt, y, mean, invstd, gamma, beta, red, n, c,
                        hw, relu);
    else
        bn_bwd_reduce_g(be, (const float *)dy, x, x_dt, y, mean, invstd, gamma, beta, red, n, c, hw,
                        relu);
}

/* y NULL (relu): the mask recomputed from x (beta read only then). */
/* The per-channel factors of the backward's element (the mask's forward
 * factors only when y is NULL). */
typedef struct bn_bwd_k {
    sg_bn_bwd_coefs k;
    float m, a, bt;
} bn_bwd_k;
__device__ __forceinline__ bn_bwd_k bn_bwd_k_of(const float *y, const float *mean,
                                                const float *invstd, const float *gamma,
                                                const float *beta, const float *red, double count,
                                                int c, int relu, int ch) {
    bn_bwd_k r;
    r.k = sg_bn_bwd_coefs_of(invstd[ch], gamma[ch], red[ch], red[c + ch], count);
    r.m = mean[ch], r.a = 0, r.bt = 0;
    if (relu && !y) r.a = sg_bn_fwd_scale(invstd[ch], gamma[ch]), r.bt = beta[ch];
    return r;
}

/* Per plane in either layout, as k_bn_fwd. */
template <typename X, typename G, typename D>
__global__ void k_bn_bwd_elem(const G *dy, const X *x, const float *y, const float *mean,
                              const float *invstd, const float *gamma, const float *beta,
                              const float *red, double count, D *dx, int c, int inner,
                              size_t planes, int nhwc, int relu, int accumulate) {
    bn_chan_elems<bn_bwd_k>(
        nhwc, c, inner, planes,
        [&](int ch) { return bn_bwd_k_of(y, mean, invstd, gamma, beta, red, count, c, relu, ch); },
        [&](size_t i, const bn_bwd_k &k) {
            float g = relu ? sg_relu_mask(act_ld(dy, i), bn_out(y, x, i, k.m, k.a, k.bt))
                           : act_ld(dy, i);
            float v = sg_bn_bwd_elem(g, act_ld(x, i), k.m, k.k.A, k.k.B, k.k.C);
            act_st(dx, i, accumulate ? sg_fadd(act_ld(dx, i), v) : v);
        });
}

/* k_bn_bwd_elem's NHWC vector route (c a multiple of SG_COLV, every
 * activation 16-byte aligned), as k_bn_fwd_v: a thread keeps 8 channels and
 * their factors; each element's arithmetic is k_bn_bwd_elem's. */
template <typename X, typename G, typename D>
__global__ void k_bn_bwd_elem_v(const G *dy, const X *x, const float *y, const float *mean,
                                const float *invstd, const float *gamma, const float *beta,
                                const float *red, double count, D *dx, int c, size_t planes,
                                int relu, int accumulate) {
    SG_INPLANE_LOOP(j, c / SG_COLV) {
        bn_bwd_k k[SG_COLV];
        SG_UNROLL
        for (int e = 0; e < SG_COLV; e++)
            k[e] = bn_bwd_k_of(y, mean, invstd, gamma, beta, red, count, c, relu, j * SG_COLV + e);
        SG_PLANE_LOOP(pl, planes) {
            size_t i = pl * c + (size_t)j * SG_COLV;
            float g[SG_COLV], xv[SG_COLV], yv[SG_COLV] = {0}, d[SG_COLV] = {0};
            colv_ld(dy, i, g);
            colv_ld(x, i, xv);
            if (relu && y) colv_ld(y, i, yv);
            if (accumulate) colv_ld((const D *)dx, i, d);
            SG_UNROLL
            for (int e = 0; e < SG_COLV; e++) {
                float ge = g[e];
                if (relu)
                    ge = sg_relu_mask(
                        ge, y ? yv[e] : sg_relu(sg_bn_fwd_elem(xv[e], k[e].m, k[e].a, k[e].bt)));
                float v = sg_bn_bwd_elem(ge, xv[e], k[e].m, k[e].k.A, k[e].k.B, k[e].k.C);
                d[e] = accumulate ? sg_fadd(d[e], v) : v;
            }
            colv_st(dx, i, d);
        }
    }
}

template <typename X, typename G = float, typename D = float>
static void bn_bwd_elem(sg_backend *be, const G *dy, const X *x, const float *y, const float *mean,
                        const float *invstd, const float *gamma, const float *beta,
                        const float *red, double count, D *dx, int n, int c, int hw, int relu,
                        int accumulate) {
    int nhwc = sg_cu_nhwc(be), inner = sg_cu_inner(nhwc, c, hw);
    size_t planes = sg_cu_planes(nhwc, n, c, hw);
    if (!planes || hw <= 0 || c <= 0) return;
    SG_CHECK(count > 0, "CUDA backend: bn_bwd_elem with count %g (must be > 0)", count);
    if (colv_ok(nhwc, c, dy, x, dx) && colv_ok(nhwc, c, relu ? y : NULL)) {
        dim3 tv = sg_cu_plane_block(c / SG_COLV);
        SG_LAUNCH(bn_elem_grid(be, 1, c / SG_COLV, planes, tv), tv, 0, sg_cu_stream(be),
                  k_bn_bwd_elem_v<X, G, D>)
        (dy, x, y, mean, invstd, gamma, beta, red, count, dx, c, planes, relu, accumulate);
        CU_LAUNCH_CHECK("k_bn_bwd_elem_v");
        return;
    }
    dim3 t = sg_cu_plane_block(inner);
    SG_LAUNCH(bn_elem_grid(be, nhwc, inner, planes, t), t, 0, sg_cu_stream(be),
              k_bn_bwd_elem<X, G, D>)
    (dy, x, y, mean, invstd, gamma, beta, red, count, dx, c, inner, planes, nhwc, relu, accumulate);
    CU_LAUNCH_CHECK("k_bn_bwd_elem");
}

static void sg_cuda_bn_bwd_elem(sg_backend *be, const float *dy, const float *x, const float *y,
                                const float *mean, const float *invstd, const float *gamma,
                                const float *red, double count, float *dx, int n, int c, int hw,
                                int relu, int accumulate) {
    SG_CHECK(y || !relu, "CUDA backend: bn_bwd_elem with relu needs y");
    bn_bwd_elem(be, dy, x, y, mean, invstd, gamma, NULL, red, count, dx, n, c, hw, relu,
                accumulate);
}

template <typename G, typename D>
static void bn_bwd_elem_gd(sg_backend *be, const G *dy, const void *x, int x_dt, const float *y,
                           const float *mean, const float *invstd, const float *gamma,
                           const float *beta, const float *red, double count, D *dx, int n, int c,
                           int hw, int relu, int accumulate) {
    if (sg_cuda_act_dt(x_dt, "bn_bwd_elem_dt") == SG_ACT_BF16)
        bn_bwd_elem(be, dy, (const uint16_t *)x, y, mean, invstd, gamma, beta, red, count, dx, n, c,
                    hw, relu, accumulate);
    else
        bn_bwd_elem(be, dy, (const float *)x, y, mean, invstd, gamma, beta, red, count, dx, n, c,
                    hw, relu, accumulate);
}

/* dy_dt, dx_dt: the gradients' storage (G, D); a bf16 dx is rounded once
 * where it is stored (act_st) and never added to. */
static void sg_cuda_bn_bwd_elem_dt(sg_backend *be, const void *dy, int dy_dt, const void *x,
                                   int x_dt, const float *y, const float *mean, const float *invstd,
                                   const float *gamma, const float *beta, const float *red,
                                   double count, void *dx, int dx_dt, int n, int c, int hw,
                                   int relu, int accumulate) {
    int gb = sg_cuda_act_dt(dy_dt, "bn_bwd_elem_dt (dy_dt)") == SG_ACT_BF16;
    int db = sg_cuda_act_dt(dx_dt, "bn_bwd_elem_dt (dx_dt)") == SG_ACT_BF16;
    SG_CHECK(!db || !accumulate,
             "CUDA backend: bn_bwd_elem_dt: accumulate = 1 with a bf16 dx: a bf16 gradient is "
             "written once, never added to (a bug in the caller: keep that gradient float32)");
    const uint16_t *g16 = (const uint16_t *)dy;
    const float *g32 = (const float *)dy;
    uint16_t *d16 = (uint16_t *)dx;
    float *d32 = (float *)dx;
    if (gb && db)
        bn_bwd_elem_gd(be, g16, x, x_dt, y, mean, invstd, gamma, beta, red, count, d16, n, c, hw,
                       relu, accumulate);
    else if (gb)
        bn_bwd_elem_gd(be, g16, x, x_dt, y, mean, invstd, gamma, beta, red, count, d32, n, c, hw,
                       relu, accumulate);
    else if (db)
        bn_bwd_elem_gd(be, g32, x, x_dt, y, mean, invstd, gamma, beta, red, count, d16, n, c, hw,
                       relu, accumulate);
    else
        bn_bwd_elem_gd(be, g32, x, x_dt, y, mean, invstd, gamma, beta, red, count, d32, n, c, hw,
                       relu, accumulate);
}

/* ---- fused with the residual join (backend.h) ---- */

/* y = max(0, bn(x) + res): k_bn_fwd's element, then add's. y may == res.
 * R: the identity's storage; Y: the output's, with RND (float32 storage
 * only) rounding the value to bf16 first (SG_ACT_F32R, backend.h). */
template <typename X, typename R, typename Y, int RND>
__global__ void k_bn_add_relu_fwd(const X *x, const float *mean, const float *invstd,
                                  const float *gamma, const float *beta, const R *res, Y *y, int c,
                                  int inner, size_t planes, int nhwc) {
    bn_chan_elems<bn_fwd_k>(
        nhwc, c, inner, planes, [&](int ch) { return bn_fwd_k_of(mean, invstd, gamma, beta, ch); },
        [&](size_t i, const bn_fwd_k &k) {
            float v =
                sg_relu(sg_fadd(sg_bn_fwd_elem(act_ld(x, i), k.m, k.a, k.bt), act_ld(res, i)));
            act_st(y, i, RND ? sg_bf16_round(v) : v);
        });
}

template <typename X, typename R, typename Y, int RND>
static void bn_add_relu_fwd(sg_backend *be, const void *x, const float *mean, const float *invstd,
                            const float *gamma, const float *beta, const void *res, void *y, int n,
                            int c, int hw) {
    int nhwc = sg_cu_nhwc(be), inner = sg_cu_inner(nhwc, c, hw);
    size_t planes = sg_cu_planes(nhwc, n, c, hw);
    if (!planes || hw <= 0 || c <= 0) return;
    dim3 t = sg_cu_plane_block(inner);
    SG_LAUNCH(bn_elem_grid(be, nhwc, inner, planes, t), t, 0, sg_cu_stream(be),
              k_bn_add_relu_fwd<X, R, Y, RND>)
    ((const X *)x, mean, invstd, gamma, beta, (const R *)res, (Y *)y, c, inner, planes, nhwc);
    CU_LAUNCH_CHECK("k_bn_add_relu_fwd");
}

/* The instance for the identity's and the output's storage. */
template <typename X>
static void bn_add_relu_fwd_dt(sg_backend *be, const void *x, const float *mean,
                               const float *invstd, const float *gamma, const float *beta,
                               const void *res, int res_dt, void *y, int y_dt, int n, int c,
                               int hw) {
    if (res_dt == SG_ACT_BF16) {
        if (y_dt == SG_ACT_BF16)
            bn_add_relu_fwd<X, uint16_t, uint16_t, 0>(be, x, mean, invstd, gamma, beta, res, y, n,
                                                      c, hw);
        else if (y_dt == SG_ACT_F32R)
            bn_add_relu_fwd<X, uint16_t, float, 1>(be, x, mean, invstd, gamma, beta, res, y, n, c,
                                                   hw);
        else
            bn_add_relu_fwd<X, uint16_t, float, 0>(be, x, mean, invstd, gamma, beta, res, y, n, c,
                                                   hw);
    } else {
        if (y_dt == SG_ACT_BF16)
            bn_add_relu_fwd<X, float, uint16_t, 0>(be, x, mean, invstd, gamma, beta, res, y, n, c,
                                                   hw);
        else if (y_dt == SG_ACT_F32R)
            bn_add_relu_fwd<X, float, float, 1>(be, x, mean, invstd, gamma, beta, res, y, n, c, hw);
        else
            bn_add_relu_fwd<X, float, float, 0>(be, x, mean, invstd, gamma, beta, res, y, n, c, hw);
    }
}

static void sg_cuda_bn_add_relu_fwd(sg_backend *be, const void *x, int x_dt, const float *mean,
                                    const float *invstd, const float *gamma, const float *beta,
                                    const void *res, int res_dt, void *y, int y_dt, int n, int c,
                                    int hw) {
    sg_cuda_act_dt(res_dt, "bn_add_relu_fwd (res_dt)");
    if (y_dt != SG_ACT_F32R) sg_cuda_act_dt(y_dt, "bn_add_relu_fwd (y_dt)");
    if (sg_cuda_act_dt(x_dt, "bn_add_relu_fwd") == SG_ACT_BF16)
        bn_add_relu_fwd_dt<uint16_t>(be, x, mean, invstd, gamma, beta, res, res_dt, y, y_dt, n, c,
                                     hw);
    else
        bn_add_relu_fwd_dt<float>(be, x, mean, invstd, gamma, beta, res, res_dt, y, y_dt, n, c, hw);
}

/* k_bn_bwd_reduce_part with the mask from y (the join's output, stored as
 * Y), and g stored into (accumulate: added to) dres when dres is not NULL. */
template <typename X, typename Y>
__global__ void k_bn_bwd_reduce_res_part(const float *dy, const X *x, const Y *y, const float *mean,
                                         float *dres, int n, int c, int hw, int nhwc,
                                         int accumulate, double *part) {
    __shared__ double sh[SG_CHAN_THREADS];
    int ch = nhwc ? col_channel() : (int)blockIdx.y;
    double m = mean[ch < c ? ch : 0];
    double sg = 0, sgx = 0;
    auto visit = [&](size_t i) {
        float g = sg_relu_mask(dy[i], act_ld(y, i));
        if (dres) dres[i] = accumulate ? sg_fadd(dres[i], g) : g;
        sg += g;
        sgx = chan_fma((double)g, (double)act_ld(x, i) - m, sgx);
    };
    if (nhwc) {
        COL_SLICE_BEGIN(i, n, c, hw, ch)
        visit(i);
        COL_SLICE_END
    } else {
        CHAN_SLICE_BEGIN(i, base, n, c, hw, ch)
        visit(i);
        CHAN_SLICE_END
    }
    bwd_part_store(part, nhwc, ch, c, sg, sgx, sh);
}

/* A row of the fused join's backward reduction (vector route): dy, x, y,
 * and dres's old values when they are accumulated into. */
template <typename X, typename Y> struct colv_res_row {
    const float *dy;
    const X *x;
    const Y *y;
    const float *dres_old;
    size_t i;
    float g[SG_COLV], xv[SG_COLV], yv[SG_COLV], dv[SG_COLV];
    __device__ __forceinline__ void load(size_t at) {
        i = at;
        colv_ld(dy, i, g);
        colv_ld(x, i, xv);
        colv_ld(y, i, yv);
        if (dres_old) colv_ld(dres_old, i, dv);
    }
};

/* k_bn_bwd_reduce_res_part's NHWC vector route (cuda_chan_reduce.cuh). */
template <typename X, typename Y>
__global__ void k_bn_bwd_reduce_res_part_v(const float *dy, const X *x, const Y *y,
                                           const float *mean, float *dres, int n, int c, int hw,
                                           int accumulate, double *part) {
    __shared__ double sh[SG_CHAN_THREADS];
    int ch = colv_channel();
    int cl = ch < c ? ch : 0;
    double m[SG_COLV], sg[SG_COLV], sgx[SG_COLV];
    SG_UNROLL
    for (int e = 0; e < SG_COLV; e++) m[e] = mean[cl + e], sg[e] = 0, sgx[e] = 0;
    colv_res_row<X, Y> proto;
    proto.dy = dy, proto.x = x, proto.y = y, proto.dres_old = dres && accumulate ? dres : NULL;
    colv_rows(n, c, hw, ch, proto, [&](const colv_res_row<X, Y> &r) {
        float gv[SG_COLV];
        SG_UNROLL
        for (int e = 0; e < SG_COLV; e++) {
            float g = sg_relu_mask(r.g[e], r.yv[e]);
            gv[e] = r.dres_old ? sg_fadd(r.dv[e], g) : g;
            sg[e] += g;
            sgx[e] = chan_fma((double)g, (double)r.xv[e] - m[e], sgx[e]);
        }
        if (dres) colv_st(dres, r.i, gv);
    });
    colv_part_store(part, c, sg, sgx, sh);
}

template <typename X, typename Y>
static void bn_bwd_reduce_res(sg_backend *be, const float *dy, const void *x, const void *y,
                              const float *mean, float *red, float *dres, int n, int c, int hw,
                              int accumulate) {
    sg_cuda *cu = sg_cu(be);
    if (c <= 0) return;
    static int occupancy[16];
    int nhwc = sg_cu_nhwc(be);
    int splits =
        chan_splits_layout(cu, nhwc, c, (long long)n * hw,
                           chan_blocks_per_sm(cu, k_bn_bwd_reduce_res_part<X, Y>, occupancy, 16));
    cudaStream_t st = sg_cu_stream(be);
    if (colv_ok(nhwc, c, dy, x, y) && colv_ok(nhwc, c, dres)) {
        SG_LAUNCH(chan_grid(nhwc, c, splits), SG_COLV_THREADS, 0, st,
                  k_bn_bwd_reduce_res_part_v<X, Y>)
        (dy, (const X *)x, (const Y *)y, mean, dres, n, c, hw, accumulate, cu->chan_partial);
        CU_LAUNCH_CHECK("k_bn_bwd_reduce_res_part_v");
    } else {
        SG_LAUNCH(chan_grid(nhwc, c, splits), SG_CHAN_THREADS, 0, st,
                  k_bn_bwd_reduce_res_part<X, Y>)
        (dy, (const X *)x, (const Y *)y, mean, dres, n, c, hw, nhwc, accumulate, cu->chan_partial);
        CU_LAUNCH_CHECK("k_bn_bwd_reduce_res_part");
    }
    bwd_merge(be, c, splits, red);
}

static void sg_cuda_bn_bwd_reduce_res(sg_backend *be, const float *dy, const void *x, int x_dt,
                                      const void *y, int y_dt, const float *mean, float *red,
                                      float *dres, int n, int c, int hw, int accumulate) {
    SG_CHECK(y, "CUDA backend: bn_bwd_reduce_res needs y (the join's output)");
    int xb = sg_cuda_act_dt(x_dt, "bn_bwd_reduce_res") == SG_ACT_BF16;
    int yb = sg_cuda_act_dt(y_dt, "bn_bwd_reduce_res (y_dt)") == SG_ACT_BF16;
    if (xb && yb)
        bn_bwd_reduce_res<uint16_t, uint16_t>(be, dy, x, y, mean, red, dres, n, c, hw, accumulate);
    else if (xb)
        bn_bwd_reduce_res<uint16_t, float>(be, dy, x, y, mean, red, dres, n, c, hw, accumulate);
    else if (yb)
        bn_bwd_reduce_res<float, uint16_t>(be, dy, x, y, mean, red, dres, n, c, hw, accumulate);
    else bn_bwd_reduce_res<float, float>(be, dy, x, y, mean, red, dres, n, c, hw, accumulate);
}

__global__ void k_bn_param_grads(const float *red, const float *invstd, float *dgamma, float *dbeta,
                                 int c, int accumulate) {
    int ch = blockIdx.x * blockDim.x + threadIdx.x;
    if (ch >= c) return;
    float dg = sg_bn_dgamma(red[c + ch], invstd[ch]), db = red[ch];
    dgamma[ch] = accumulate ? dgamma[ch] + dg : dg;
    dbeta[ch] = accumulate ? dbeta[ch] + db : db;
}

static void sg_cuda_bn_param_grads(sg_backend *be, const float *red, const float *invstd,
                                   float *dgamma, float *dbeta, int c, int accumulate) {
    if (c <= 0) return;
    SG_LAUNCH((c + 127) / 128, 128, 0, sg_cu_stream(be), k_bn_param_grads)
    (red, invstd, dgamma, dbeta, c, accumulate);
    CU_LAUNCH_CHECK("k_bn_param_grads");
}

void sg_cuda_fill_bn_ops(sg_ops *o) {
    o->bn_stats = sg_cuda_bn_stats;
    o->bn_finalize = sg_cuda_bn_finalize;
    o->bn_eval_params = sg_cuda_bn_eval_params;
    o->bn_fwd = sg_cuda_bn_fwd;
    o->bn_bwd_reduce = sg_cuda_bn_bwd_reduce;
    o->bn_bwd_elem = sg_cuda_bn_bwd_elem;
    o->bn_param_grads = sg_cuda_bn_param_grads;
    o->bn_stats_dt = sg_cuda_bn_stats_dt;
    o->bn_fwd_dt = sg_cuda_bn_fwd_dt;
    o->bn_bwd_reduce_dt = sg_cuda_bn_bwd_reduce_dt;
    o->bn_bwd_elem_dt = sg_cuda_bn_bwd_elem_dt;
    o->bn_add_relu_fwd = sg_cuda_bn_add_relu_fwd;
    o->bn_bwd_reduce_res = sg_cuda_bn_bwd_reduce_res;
}
