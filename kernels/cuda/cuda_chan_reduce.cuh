/* kernels/cuda/cuda_chan_reduce.cuh - per-channel reductions over
 * activations in either layout, shared by batch norm (cuda_bn.cu) and the
 * conv bias gradient (cuda_conv_bias.cu).
 *
 * Each channel's n*hw values are split over `splits` blocks (enough blocks
 * to fill the GPU, chan_splits); each block reduces its slice (the
 * CHAN_SLICE_BEGIN / _END loop) in double into its slot of
 * sg_cuda.chan_partial, [ch * splits + s][3], and a second small kernel
 * merges the slots in a fixed order (k_chan_sum_merge for sums): no
 * atomics, deterministic results. NHWC reductions have a scalar route (one
 * value a thread) and a vector route (8 channels a thread, 16-byte loads)
 * that sums in the same order: the same bits. A header of static functions (one copy
 * in each .cu file that includes it): without relocatable device code a
 * kernel can only be launched from the file that defines it, and neither
 * user owns the other.
 */
#ifndef SG_KERNELS_CUDA_CHAN_REDUCE_CUH
#define SG_KERNELS_CUDA_CHAN_REDUCE_CUH

#include "core/log.h"
#include "kernels/cuda/cuda_internal.h"
#include "kernels/cuda/cuda_reduce.cuh"
#include "kernels/formulas/bf16.h"

/* acc + a*b in double, as the reductions have always rounded it: one fused
 * multiply-add under nvcc (which contracted the plain expression to just
 * that), two roundings on the emulated device (host C++ compiled with
 * -ffp-contract=off). Written out so that no choice of the compiler can make
 * two routes of one reduction differ: nvcc contracts only within a basic
 * block, and a branch between the multiply and the add (an unrolled loop's
 * ReLU mask) leaves them unfused. */
__device__ __forceinline__ double chan_fma(double a, double b, double acc) {
#ifdef __CUDACC__
    return __fma_rn(a, b, acc);
#else
    return acc + a * b;
#endif
}

/* Threads per block of the per-channel slice kernels. */
#define SG_CHAN_THREADS 512

/* How many blocks share one channel, for a kernel of which blocks_per_sm
 * blocks of SG_CHAN_THREADS fit on one SM at once: as many as fit in one
 * whole wave (c * splits <= sm_count * blocks_per_sm: rounding the split up
 * instead left a second, nearly empty wave on the largest layers, e.g. 768
 * blocks for 528 slots at 256 channels on 132 SMs), at least 4096 values per
 * block, at most 64, and c * splits partial slots. Layers with more channels
 * than one wave holds get one block per channel. */
static inline int chan_splits_for(sg_cuda *cu, int c, long long per_channel, int blocks_per_sm) {
    SG_CHECK(c >= 1 && c <= SG_CUDA_CHAN_SLOTS && c <= 65535,
             "CUDA backend: %d channels in a per-channel reduction (1..65535)", c);
    long long wave = (long long)cu->sm_count * (blocks_per_sm < 1 ? 1 : blocks_per_sm);
    long long want = wave / c;
    long long by_work = per_channel / 4096;
    if (want > by_work) want = by_work;
    if (want > 64) want = 64;
    if (want * c > SG_CUDA_CHAN_SLOTS) want = SG_CUDA_CHAN_SLOTS / c;
    return want < 1 ? 1 : (int)want;
}

/* The same for a kernel whose occupancy is not asked: 4 blocks per SM
 * (2048 threads, the SM's limit on sm_80 and sm_90). */
static inline int chan_splits(sg_cuda *cu, int c, long long per_channel) {
    return chan_splits_for(cu, c, per_channel, 2048 / SG_CHAN_THREADS);
}

/* Resident blocks of SG_CHAN_THREADS per SM for `kernel` on cu's device
 * (cudaOccupancyMaxActiveBlocksPerMultiprocessor: registers and shared
 * memory included), asked once per kernel and device and kept in *cache
 * (one int per device, 0 = not asked yet; a lost race asks twice and
 * stores the same value). */
template <typename K>
static int chan_blocks_per_sm(sg_cuda *cu, K kernel, int *cache, int cache_len) {
    int d = cu->device;
    if (d >= 0 && d < cache_len) {
        int v = __atomic_load_n(&cache[d], __ATOMIC_RELAXED);
        if (v > 0) return v;
    }
    int b = 0;
    CU_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&b, kernel, SG_CHAN_THREADS, 0));
    if (b < 1) b = 1;
    if (d >= 0 && d < cache_len) __atomic_store_n(&cache[d], b, __ATOMIC_RELAXED);
    return b;
}

/* This block's share [k0, k1) of the channel's n*hw values, visited row by
 * row (one row = one image's plane of the channel), no division per element. */
#define CHAN_SLICE_BEGIN(ptr, base, n, c, hw, ch)                                             \
    long long per_ = (long long)(n) * (hw);                                                   \
    long long k0_ = per_ * blockIdx.x / gridDim.x, k1_ = per_ * (blockIdx.x + 1) / gridDim.x; \
    for (long long r_ = k0_ / (hw); r_ < (n) && r_ * (hw) < k1_; r_++) {                      \
        int j0_ = r_ * (hw) < k0_ ? (int)(k0_ - r_ * (hw)) : 0;                               \
        int j1_ = k1_ - r_ * (hw) < (hw) ? (int)(k1_ - r_ * (hw)) : (hw);                     \
        size_t base = ((size_t)r_ * (c) + (ch)) * (size_t)(hw);                               \
        for (int j = j0_ + threadIdx.x; j < j1_; j += blockDim.x) {                           \
            size_t ptr = base + j;
#define CHAN_SLICE_END \
    }                  \
    }

/* NHWC: the channels are the columns of an [n*hw][c] matrix, and a
 * per-channel reduction is a column reduction. A block of SG_CHAN_THREADS
 * threads is SG_COL_W adjacent columns (the lanes of a warp: coalesced
 * reads) by SG_COL_ROWS row lanes; grid.y walks the groups of SG_COL_W
 * channels, grid.x the `splits` shares [k0, k1) of the rows. Thread (lane,
 * row) visits rows k0 + row, k0 + row + SG_COL_ROWS, ... of its column
 * (col_channel); the row lanes are then merged in order (col_sum), so the
 * result is deterministic and lands in the same partial slots,
 * [ch * splits + s][3], as the NCHW one. */
#define SG_COL_W 32
#define SG_COL_ROWS (SG_CHAN_THREADS / SG_COL_W)

__device__ __forceinline__ int col_channel(void) {
    return (int)blockIdx.y * SG_COL_W + (int)(threadIdx.x % SG_COL_W);
}
#define COL_SLICE_BEGIN(ptr, n, c, hw, ch)                                                      \
    long long rows_ = (long long)(n) * (hw);                                                    \
    long long k0_ = rows_ * blockIdx.x / gridDim.x, k1_ = rows_ * (blockIdx.x + 1) / gridDim.x; \
    if ((ch) < (c))                                                                             \
        for (long long r_ = k0_ + threadIdx.x / SG_COL_W; r_ < k1_; r_ += SG_COL_ROWS) {        \
            size_t ptr = (size_t)r_ * (size_t)(c) + (size_t)(ch);
#define COL_SLICE_END }

/* How many blocks share one group of SG_COL_W channels (NHWC): one wave of
 * resident blocks, at least 128 rows (4096 values) per block, at most 256,
 * and c * splits partial slots. */
static inline int col_splits_for(sg_cuda *cu, int c, long long rows, int blocks_per_sm) {
    SG_CHECK(c >= 1 && c <= SG_CUDA_CHAN_SLOTS,
             "CUDA backend: %d channels in a per-channel reduction (1..%d)", c, SG_CUDA_CHAN_SLOTS);
    long long groups = (c + SG_COL_W - 1) / SG_COL_W;
    long long wave = (long long)cu->sm_count * (blocks_per_sm < 1 ? 1 : blocks_per_sm);
    long long want = wave / groups;
    if (want > rows / 128) want = rows / 128;
    if (want > 256) want = 256;
    if (want * c > SG_CUDA_CHAN_SLOTS) want = SG_CUDA_CHAN_SLOTS / c;
    return want < 1 ? 1 : (int)want;
}

/* Splits and grid of a per-channel reduction in either layout. */
static inline int chan_splits_layout(sg_cuda *cu, int nhwc, int c, long long per_channel,
                                     int blocks_per_sm) {
    return nhwc ? col_splits_for(cu, c, per_channel, blocks_per_sm)
                : chan_splits_for(cu, c, per_channel, blocks_per_sm);
}
static inline dim3 chan_grid(int nhwc, int c, int splits) {
    return dim3((unsigned)splits, (unsigned)(nhwc ? (c + SG_COL_W - 1) / SG_COL_W : c), 1);
}

/* The sum over the row lanes of each column, in row order; valid in row
 * lane 0 (threadIdx.x < SG_COL_W). `sh` holds SG_CHAN_THREADS doubles. */
__device__ __forceinline__ double col_sum(double v, double *sh) {
    __syncthreads(); /* sh may still be read by a previous call */
    sh[threadIdx.x] = v;
    __syncthreads();
    if (threadIdx.x < SG_COL_W)
        for (int r = 1; r < SG_COL_ROWS; r++) v += sh[r * SG_COL_W + threadIdx.x];
    return v;
}

/* The block's sum for its channel in either layout (NCHW: the whole block's,
 * in thread 0; NHWC: each column's, in row lane 0): valid where
 * chan_writer(). `sh` holds SG_CHAN_THREADS doubles. */
__device__ __forceinline__ double chan_block_sum(int nhwc, double v, double *sh) {
    return nhwc ? col_sum(v, sh) : sg_block_sum(v, sh);
}
__device__ __forceinline__ int chan_writer(int nhwc) {
    return nhwc ? threadIdx.x < SG_COL_W : threadIdx.x == 0;
}

/* ---- the vector route of the NHWC column reductions ----
 * The same sums by a faster route: a thread reads SG_COLV adjacent channels
 * of a row with 16-byte loads (8 bf16, or 2 x 4 floats) and keeps SG_COLV
 * accumulators, so a block of SG_COLV_THREADS threads covers the SG_COL_W
 * columns of its group with the same SG_COL_ROWS row lanes: thread (row
 * lane r, vector v) visits rows k0 + r, k0 + r + SG_COL_ROWS, ... of
 * channels v*SG_COLV .. v*SG_COLV+7 of the group, SG_COLV_UNROLL rows
 * loaded before the first is added, each channel's values added in the
 * scalar route's order. colv_sum / colv_moments then merge the row lanes in
 * row order through shared memory exactly as col_sum / col_moments do, on
 * the same grid (the splits come from the scalar kernel's occupancy), into
 * the same partial slots: every channel's double sums see the same values
 * in the same order, so the results have the same bits.
 * The route needs c % SG_COLV == 0 and 16-byte aligned activations
 * (colv_ok, at the launch); other shapes keep the scalar route. */
#define SG_COLV 8
#ifdef __CUDACC__
#define SG_UNROLL _Pragma("unroll")
#else
#define SG_UNROLL /* the emulated device's g++ unrolls as it sees fit */
#endif
#define SG_COLV_LANES (SG_COL_W / SG_COLV)
#define SG_COLV_THREADS (SG_COL_ROWS * SG_COLV_LANES)
#define SG_COLV_UNROLL 4

/* Whether an NHWC column reduction over c channels of the activations at
 * a, b, d (NULL: not read) takes the vector route. */
static inline int colv_ok(int nhwc, int c, const void *a, const void *b = NULL,
                          const void *d = NULL) {
    if (!nhwc || c % SG_COLV != 0) return 0;
    return (((uintptr_t)a | (uintptr_t)b | (uintptr_t)d) & 15u) == 0;
}

/* Thread (row lane, vector) of a vector-route block, and its first channel. */
__device__ __forceinline__ int colv_row(void) { return (int)threadIdx.x / SG_COLV_LANES; }
__device__ __forceinline__ int colv_channel(void) {
    return (int)blockIdx.y * SG_COL_W + ((int)threadIdx.x % SG_COLV_LANES) * SG_COLV;
}

/* SG_COLV consecutive activation values from element i (16-byte aligned),
 * widened to float, and stored back. */
__device__ __forceinline__ void colv_ld(const float *p, size_t i, float *v) {
    float4 a = *(const float4 *)(p + i), b = *(const float4 *)(p + i + 4);
    v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w;
    v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
}
__device__ __forceinline__ void colv_ld(const uint16_t *p, size_t i, float *v) {
    uint4 u = *(const uint4 *)(p + i);
    unsigned w[4] = {u.x, u.y, u.z, u.w};
    SG_UNROLL
    for (int e = 0; e < 4; e++) {
        v[2 * e] = sg_bf16_to_f32((uint16_t)(w[e] & 0xffffu));
        v[2 * e + 1] = sg_bf16_to_f32((uint16_t)(w[e] >> 16));
    }
}
__device__ __forceinline__ void colv_st(float *p, size_t i, const float *v) {
    *(float4 *)(p + i) = make_float4(v[0], v[1], v[2], v[3]);
    *(float4 *)(p + i + 4) = make_float4(v[4], v[5], v[6], v[7]);
}
__device__ __forceinline__ void colv_st(uint16_t *p, size_t i, const float *v) {
    unsigned w[4];
    SG_UNROLL
    for (int e = 0; e < 4; e++)
        w[e] = (unsigned)sg_bf16_bits(v[2 * e]) | ((unsigned)sg_bf16_bits(v[2 * e + 1]) << 16);
    *(uint4 *)(p + i) = make_uint4(w[0], w[1], w[2], w[3]);
}

/* The block's rows [k0, k1) of its group, as COL_SLICE_BEGIN splits them:
 * for each row of this thread's lane, in order, a copy of `proto` loads the
 * row's SG_COLV values at element i (R::load(size_t i)) and visit(row)
 * adds them; SG_COLV_UNROLL rows are loaded before the first visit. */
template <typename R, typename V>
__device__ __forceinline__ void colv_rows(int n, int c, int hw, int ch, const R &proto, V visit) {
    long long rows = (long long)n * hw;
    long long k0 = rows * blockIdx.x / gridDim.x, k1 = rows * (blockIdx.x + 1) / gridDim.x;
    if (ch >= c) return;
    const long long step = SG_COL_ROWS;
    long long r = k0 + colv_row();
    for (; r + (SG_COLV_UNROLL - 1) * step < k1; r += SG_COLV_UNROLL * step) {
        R b[SG_COLV_UNROLL];
        SG_UNROLL
        for (int u = 0; u < SG_COLV_UNROLL; u++) {
            b[u] = proto;
            b[u].load((size_t)(r + u * step) * (size_t)c + (size_t)ch);
        }
        SG_UNROLL
        for (int u = 0; u < SG_COLV_UNROLL; u++) visit(b[u]);
    }
    for (; r < k1; r += step) {
        R b = proto;
        b.load((size_t)r * (size_t)c + (size_t)ch);
        visit(b);
    }
}

/* col_sum for the vector route: each thread's SG_COLV column values, summed
 * over the row lanes in row order; valid in threads < SG_COL_W (column
 * threadIdx.x of the group). `sh` holds SG_CHAN_THREADS doubles. */
__device__ __forceinline__ double colv_sum(const double *v, double *sh) {
    int base = colv_row() * SG_COL_W + ((int)threadIdx.x % SG_COLV_LANES) * SG_COLV;
    __syncthreads(); /* sh may still be read by a previous call */
    SG_UNROLL
    for (int e = 0; e < SG_COLV; e++) sh[base + e] = v[e];
    __syncthreads();
    double s = 0;
    if (threadIdx.x < SG_COL_W) {
        s = sh[threadIdx.x];
        for (int r = 1; r < SG_COL_ROWS; r++) s += sh[r * SG_COL_W + threadIdx.x];
    }
    return s;
}

/* The vector route's block end of a one- or two-value sum: column
 * threadIdx.x's sums into its partial slot. */
__device__ __forceinline__ void colv_part_store(double *part, int c, const double *s0,
                                                const double *s1, double *sh) {
    double a = colv_sum(s0, sh);
    double b = s1 ? colv_sum(s1, sh) : 0.0;
    int ch = (int)blockIdx.y * SG_COL_W + (int)threadIdx.x;
    if (threadIdx.x < SG_COL_W && ch < c) {
        double *o = part + ((size_t)ch * gridDim.x + blockIdx.x) * 3;
        o[0] = a;
        o[1] = b;
    }
}

/* Sums of one or two values per channel: part[(ch*splits + s)*3 + {0,1}]. */
static __global__ void k_chan_sum_merge(const double *part, int c, int splits, float *out0,
                                        float *out1, int accumulate) {
    int ch = blockIdx.x * blockDim.x + threadIdx.x;
    if (ch >= c) return;
    double a = 0, b = 0;
    for (int s = 0; s < splits; s++) {
        a += part[((size_t)ch * splits + s) * 3];
        b += part[((size_t)ch * splits + s) * 3 + 1];
    }
    out0[ch] = accumulate ? (float)(out0[ch] + a) : (float)a;
    if (out1) out1[ch] = (float)b;
}

#endif
