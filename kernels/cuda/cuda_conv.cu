/* kernels/cuda/cuda_conv.cu - convolutions through cuDNN 9 (legacy API),
 * grouped and depthwise ones too (cudnnSetConvolutionGroupCount; filters
 * [k, c/groups, r, s], PyTorch's layout):
 * the conv group of tests/backend/run_conv.c but for the bias
 * (cuda_conv_bias.cu); kernels/cpu/cpu_conv.c on the CPU.
 *
 * Owns the per-shape cache: for each geometry seen (sg_conv_desc), the tensor,
 * filter and convolution descriptors and one algorithm each for forward,
 * backward-data and backward-filter, chosen once:
 *   - cudnn_benchmark: measured (cudnnFind*, fastest first; heuristics, with
 *     a warning, if the timing itself cannot get device memory);
 *   - otherwise: cuDNN's heuristics (cudnnGet*_v7, best first);
 *   - cudnn_deterministic: only algorithms cuDNN reports as deterministic.
 * A choice is kept per geometry and mode (precision, TF32, deterministic,
 * measured) in the plan cache (kernels/conv_plans.h), which the backend
 * loads from and saves to cudnn.plan_cache's file: a geometry found there
 * skips the search once cuDNN accepts its algorithms here again (the
 * workspace query), so a resumed or repeated run does not time anything.
 * The shared workspace grows to the largest chosen algorithm's need when a
 * geometry is first seen (conv_prepare or first use), never in steady state.
 *
 * Precision (sg_backend_opts, backend.h):
 *   - fp32, allow_tf32 off (or a GPU before sm_80): CUDNN_FMA_MATH only, so
 *     results match the CPU backend and the reference to float rounding.
 *     Accumulation (accumulate = 1) is cuDNN's beta = 1.
 *   - fp32, allow_tf32 on (sm_80+): CUDNN_DEFAULT_MATH, so cuDNN may run
 *     TF32 tensor-core algorithms (inputs rounded to 10 mantissa bits, fp32
 *     accumulation): PyTorch's default for cuDNN convolutions.
 *   - bf16 (sm_80+): the two inputs are converted to bf16 (round-to-nearest-
 *     even, kernels/formulas/bf16.h, the CPU emulation's formula) in NHWC -
 *     channels-last, the layout cuDNN's tensor-core kernels run without
 *     transposing - the convolution runs bf16 in / bf16 out with float32
 *     compute (CUDNN_TENSOR_OP_MATH), and its result is widened into the
 *     caller's float32 tensor (exact), or added to it (accumulate). The
 *     weights' bf16 KRSC copy is kept per weight tensor
 *     (kernels/weight_cache.h, weights_krsc below) and converted again
 *     only after the float32 master weights changed (an optimizer step, an
 *     upload, a copy, a broadcast: every op writing memory and
 *     ops->mem_written mark it stale), so it is always that of the current
 *     master weights; fwd and bwd-data share it.
 * Activation layout (be->layout, backend.h):
 *   - NCHW: fp32 runs cuDNN's NCHW descriptors on the caller's tensors;
 *     bf16 converts each activation into an NHWC bf16 copy and back, the
 *     conversions fused with the layout change (tiled transposes, counted
 *     in sg_cuda.act_transposes).
 *   - NHWC: cuDNN's NHWC descriptors (filters KRSC) on the caller's
 *     tensors: fp32 reads and writes them directly (the weights through a
 *     float32 KRSC copy, the weight gradient through KRSC scratch); bf16
 *     only rounds a float32 input to bf16 and widens the result
 *     (elementwise, no transpose).
 * bf16 activation storage (the *_dt ops, backend.h; the bits are in
 * be->layout): under NHWC a bf16-stored input is handed to cuDNN as it is
 * and a bf16-stored result is written by cuDNN directly; under NCHW they
 * are only transposed (they hold bf16 values: no rounding) - the same
 * values the float32 path would hold (sg_cuda_conv_native_dt, called by
 * cuda_act_bf16.cu, which under fp32 convolutions widens a bf16 input into
 * a float32 buffer and rounds a bf16-stored result from one instead).
 * bf16-stored gradients likewise: a bf16 dy goes to cuDNN as it is (NHWC)
 * or transposed (NCHW), rounded nowhere; a bf16 dx is cuDNN's bf16
 * backward-data result stored directly (sg_cuda_conv_bwd_data_dt).
 * Every conversion pass around cuDNN (rounding, widening, transposing an
 * operand or result, the KRSC weight gradient laid out as float32) adds the
 * bytes it reads and writes to sg_cuda.convert_bytes (count_convert;
 * get_info's convert_bytes): what the traffic model's cuda-bf16-* rows
 * count as conversions (train/bench_traffic.c), and tests/train/
 * test_emu_convert.c holds the two equal.
 * Algorithms whose math type would convert float32 to half
 * (CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION) are never used.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "kernels/cuda/cuda_internal.h"
#include "kernels/formulas/bf16.h"
#include "kernels/weight_cache.h"

/* ---------------- precision ---------------- */

int sg_cuda_conv_configure(sg_cuda *cu, const sg_backend_opts *opts, int cc_major, int cc_minor) {
    int prec = opts ? opts->precision : SG_PRECISION_FP32;
    int allow_tf32 = opts ? opts->allow_tf32 : 0;
    cu->precision = prec;
    cu->tf32 = 0;
    if (prec == SG_PRECISION_BF16) {
        if (cc_major < 8) {
            SG_ERROR("device %s (sm_%d%d): train.precision bf16 needs bf16 tensor cores "
                     "(compute capability 8.0 or newer: A100, H100, L4, RTX 30xx and later); "
                     "use train.precision: fp32",
                     cu->name, cc_major, cc_minor);
            return -1;
        }
        snprintf(cu->conv_math, sizeof cu->conv_math,
                 "bf16: cuDNN bf16 tensor cores, NHWC, fp32 accumulation (sm_%d%d)", cc_major,
                 cc_minor);
    } else if (allow_tf32 && cc_major >= 8) {
        cu->tf32 = 1;
        snprintf(cu->conv_math, sizeof cu->conv_math,
                 "fp32, TF32 tensor cores allowed (cudnn.allow_tf32, sm_%d%d)", cc_major, cc_minor);
    } else {
        snprintf(cu->conv_math, sizeof cu->conv_math, "fp32 (FMA math, no TF32%s)",
                 allow_tf32 ? ": this GPU has no TF32" : ": cudnn.allow_tf32 false");
    }
    return 0;
}

/* The math type the descriptor asks for before algorithms are chosen. */
static cudnnMathType_t requested_math(const sg_cuda *cu) {
    if (cu->precision == SG_PRECISION_BF16) return CUDNN_TENSOR_OP_MATH;
    return cu->tf32 ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH;
}

/* The math type a chosen algorithm runs with: the one cuDNN reported for it,
 * except in plain fp32, which always runs FMA math (a reported
 * CUDNN_DEFAULT_MATH would allow TF32 on Ampere and later). */
static cudnnMathType_t run_math(const sg_cuda *cu, cudnnMathType_t reported) {
    if (cu->precision == SG_PRECISION_FP32 && !cu->tf32) return CUDNN_FMA_MATH;
    return reported;
}

/* ---------------- layout changes and bf16 rounding ---------------- */

#define TILE 32
#define TILE_ROWS 8

/* Moving a value into the transpose's tile (T: float, or bf16 bits when
 * both sides are bf16) and out of it into its destination: float32 written
 * or added (acc), bf16 rounded (RNE, formulas/bf16.h) or copied as is. */
__device__ __forceinline__ void tile_in(float &t, float v) { t = v; }
__device__ __forceinline__ void tile_in(float &t, uint16_t v) { t = sg_bf16_to_f32(v); }
__device__ __forceinline__ void tile_in(uint16_t &t, uint16_t v) { t = v; }
__device__ __forceinline__ void tile_out(float *d, size_t o, float v, int acc) {
    d[o] = acc ? sg_fadd(d[o], v) : v;
}
__device__ __forceinline__ void tile_out(uint16_t *d, size_t o, float v, int acc) {
    (void)acc;
    d[o] = sg_bf16_bits(v);
}
__device__ __forceinline__ void tile_out(uint16_t *d, size_t o, uint16_t v, int acc) {
    (void)acc;
    d[o] = v;
}

/* src [N][R][Q] -> dst [N][Q][R], converted by tile_in / tile_out. One
 * 32x32 (r, q) tile per block through shared memory (blockIdx.x enumerates
 * the tiles, blockIdx.z the N slices): reads coalesced along q, writes
 * along r. */
template <typename S, typename D, typename T>
__global__ void k_transpose(const S *__restrict__ src, D *__restrict__ dst, int R, int Q, int acc) {
    __shared__ T tile[TILE][TILE + 1];
    size_t plane = (size_t)R * Q;
    const S *s = src + (size_t)blockIdx.z * plane;
    D *d = dst + (size_t)blockIdx.z * plane;
    unsigned tq = (unsigned)(Q + TILE - 1) / TILE;
    int q0 = (int)(blockIdx.x % tq) * TILE, r0 = (int)(blockIdx.x / tq) * TILE;
    for (int i = threadIdx.y; i < TILE; i += TILE_ROWS) {
        int r = r0 + i, q = q0 + threadIdx.x;
        if (r < R && q < Q) tile_in(tile[i][threadIdx.x], s[(size_t)r * Q + q]);
    }
    __syncthreads();
    for (int i = threadIdx.y; i < TILE; i += TILE_ROWS) {
        int q = q0 + i, r = r0 + threadIdx.x;
        if (r < R && q < Q) tile_out(d, (size_t)q * R + r, tile[threadIdx.x][i], acc);
    }
}

template <typename S, typename D, typename T>
static void transpose(sg_backend *be, const void *src, void *dst, int n, int R, int Q, int acc) {
    size_t tiles = (size_t)((R + TILE - 1) / TILE) * (size_t)((Q + TILE - 1) / TILE);
    SG_CHECK(n >= 1 && n <= 65535 && tiles <= 0x7fffffffu,
             "CUDA backend: a layout change of a [%d][%d][%d] tensor exceeds the grid limits "
             "(a batch above 65535); use a smaller batch",
             n, R, Q);
    if (!tiles) return;
    SG_LAUNCH(dim3((unsigned)tiles, 1, (unsigned)n), dim3(TILE, TILE_ROWS), 0, sg_cu_stream(be),
              k_transpose<S, D, T>)
    ((const S *)src, (D *)dst, R, Q, acc);
    CU_LAUNCH_CHECK("k_transpose");
}

/* One conversion pass of count values, src_b bytes each read and dst_b
 * written (and read too when acc adds to the old value): its bytes into
 * sg_cuda.convert_bytes (get_info's convert_bytes), the traffic model's count
 * of the same pass (train/bench_traffic.c, class convert), checked against
 * it by tests/train/test_emu_convert.c. */
static void count_convert(sg_backend *be, double count, double src_b, double dst_b, int acc) {
    sg_cu(be)->convert_bytes += count * (src_b + dst_b + (acc ? dst_b : 0));
}

/* Activations between the caller's NCHW tensors and cuDNN's NHWC bf16 ones
 * (bf16 convolutions under layout NCHW only): [n][c][p] <-> [n][p][c]. Each
 * counts as one layout transpose (get_info's act_transposes). */
static void to_nhwc_bf16(sg_backend *be, const float *src, void *dst, int n, int c, int p) {
    sg_cu(be)->act_transposes++;
    count_convert(be, (double)n * c * p, 4, 2, 0);
    transpose<float, uint16_t, float>(be, src, dst, n, c, p, 0);
}
static void from_nhwc_bf16(sg_backend *be, const void *src, float *dst, int n, int c, int p,
                           int accumulate) {
    sg_cu(be)->act_transposes++;
    count_convert(be, (double)n * c * p, 2, 4, accumulate);
    transpose<uint16_t, float, float>(be, src, dst, n, p, c, accumulate);
}
/* bf16-stored activations: the transpose only (they hold bf16 values) */
static void bf16_to_nhwc(sg_backend *be, const void *src, void *dst, int n, int c, int p) {
    sg_cu(be)->act_transposes++;
    count_convert(be, (double)n * c * p, 2, 2, 0);
    transpose<uint16_t, uint16_t, uint16_t>(be, src, dst, n, c, p, 0);
}
static void bf16_from_nhwc(sg_backend *be, const void *src, void *dst, int n, int c, int p) {
    sg_cu(be)->act_transposes++;
    count_convert(be, (double)n * c * p, 2, 2, 0);
    transpose<uint16_t, uint16_t, uint16_t>(be, src, dst, n, p, c, 0);
}

/* Under layout NHWC the activations are already in cuDNN's layout: a
 * float32 one is only rounded to bf16 (elementwise, no transpose), a bf16
 * result widened into (or added to) a float32 one. */
__global__ void k_round_bf16(const float *__restrict__ src, uint16_t *__restrict__ dst, size_t n) {
    GRID_STRIDE(i, n) dst[i] = sg_bf16_bits(src[i]);
}
__global__ void k_widen_bf16(const uint16_t *__restrict__ src, float *__restrict__ dst, size_t n,
                             int acc) {
    GRID_STRIDE(i, n) {
        float v = sg_bf16_to_f32(src[i]);
        dst[i] = acc ? sg_fadd(dst[i], v) : v;
    }
}
static void round_bf16(sg_backend *be, const float *src, void *dst, size_t count) {
    count_convert(be, (double)count, 4, 2, 0);
    LAUNCH(k_round_bf16, count, src, (uint16_t *)dst, count);
}
static void widen_bf16(sg_backend *be, const void *src, float *dst, size_t count, int acc) {
    count_convert(be, (double)count, 2, 4, acc);
    LAUNCH(k_widen_bf16, count, (const uint16_t *)src, dst, count, acc);
}

/* A float32 NCHW-or-NHWC activation of [n, c, p] as cuDNN's bf16 NHWC input
 * in dst: rounded in place of a copy under NHWC, transposed under NCHW. */
static void act_to_bf16(sg_backend *be, const float *src, void *dst, int n, int c, int p) {
    if (sg_cu_nhwc(be)) round_bf16(be, src, dst, (size_t)n * c * p);
    else to_nhwc_bf16(be, src, dst, n, c, p);
}
/* cuDNN's bf16 NHWC result into a float32 activation (written or added). */
static void act_from_bf16(sg_backend *be, const void *src, float *dst, int n, int c, int p,
                          int acc) {
    if (sg_cu_nhwc(be)) widen_bf16(be, src, dst, (size_t)n * c * p, acc);
    else from_nhwc_bf16(be, src, dst, n, c, p, acc);
}

/* ---------------- algorithm choice ---------------- */

/* Algorithms needing more workspace than this are skipped: half of the free
 * memory (less a margin), and never above 4 GiB, so that an early geometry's
 * choice cannot starve the activations allocated after it. */
static size_t workspace_limit(void) {
    size_t free_b = 0, total_b = 0;
    CU_CHECK(cudaMemGetInfo(&free_b, &total_b));
    size_t margin = (size_t)256 << 20, cap = (size_t)4 << 30;
    size_t limit = free_b > margin ? (free_b - margin) / 2 : 0;
    return limit < cap ? limit : cap;
}

static int usable(const sg_cuda *cu, cudnnStatus_t status, cudnnDeterminism_t det,
                  cudnnMathType_t math, size_t memory, size_t limit) {
    if (status != CUDNN_STATUS_SUCCESS) return 0;
    if (cu->deterministic && det != CUDNN_DETERMINISTIC) return 0;
    /* never a silent down-conversion to half */
    if (math == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION) return 0;
    /* plain fp32: TF32 tensor-core math would change results vs the CPU backend */
    if (cu->precision == SG_PRECISION_FP32 && !cu->tf32 && math == CUDNN_TENSOR_OP_MATH) return 0;
    return memory <= limit;
}

/* Result of a cudnnFind* call: 1 = measured; 0 = the search itself ran out of
 * device memory (it allocates its own buffers), so fall back to heuristics
 * with a warning; any other failure is fatal. */
#define find_ok(call, what) find_ok_at((call), #call, what, __FILE__, __LINE__)
static int find_ok_at(cudnnStatus_t s, const char *call, const char *what, const char *file,
                      int line) {
    if (s == CUDNN_STATUS_SUCCESS) return 1;
    if (sg_cudnn_alloc_failed(s)) {
        (void)cudaGetLastError();
        SG_WARN("cuDNN could not allocate memory to time %s convolution algorithms; using its "
                "heuristics for this layer shape instead",
                what);
        return 0;
    }
    sg_cuda_fail(call, file, line, "cudnnStatus", cudnnGetErrorString(s), sg_cudnn_hint(s));
}

/* ---- the fallback when cuDNN's list has no usable algorithm ---- */

enum { DIR_FWD = 0, DIR_BWD_DATA = 1, DIR_BWD_FILTER = 2 };
static const char *const dir_name[] = {"forward", "backward-data", "backward-filter"};
static const int dir_count[] = {CUDNN_CONVOLUTION_FWD_ALGO_COUNT,
                                CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT,
                                CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT};

/* cuDNN 9's documented non-deterministic algorithms: backward-data ALGO_0,
 * backward-filter ALGO_0 and ALGO_3; every forward algorithm is
 * deterministic. */
static int algo_deterministic(int dir, int algo) {
    if (dir == DIR_BWD_DATA) return algo != CUDNN_CONVOLUTION_BWD_DATA_ALGO_0;
    if (dir == DIR_BWD_FILTER)
        return algo != CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0 &&
               algo != CUDNN_CONVOLUTION_BWD_FILTER_ALGO_3;
    return 1;
}

/* The workspace query of one algorithm with the math type set on the
 * descriptor: its status is the answer to "does this algorithm support this
 * geometry", so it is returned, not checked. */
static cudnnStatus_t probe_ws(sg_cuda *cu, sg_cuda_conv *e, int dir, int algo, size_t *ws) {
    switch (dir) {
    case DIR_FWD:
        return cudnnGetConvolutionForwardWorkspaceSize(cu->cudnn, e->x_desc, e->w_desc,
                                                       e->conv_desc, e->y_desc,
                                                       (cudnnConvolutionFwdAlgo_t)algo, ws);
    case DIR_BWD_DATA:
        return cudnnGetConvolutionBackwardDataWorkspaceSize(
            cu->cudnn, e->w_desc, e->y_desc, e->conv_desc, e->x_desc,
            (cudnnConvolutionBwdDataAlgo_t)algo, ws);
    default:
        return cudnnGetConvolutionBackwardFilterWorkspaceSize(
            cu->cudnn, e->x_desc, e->y_desc, e->conv_desc, e->w_desc,
            (cudnnConvolutionBwdFilterAlgo_t)algo, ws);
    }
}

/* No algorithm of cuDNN's list was usable: tries every algorithm of the
 * direction (deterministic ones only when cudnn.deterministic), with the
 * math types this precision allows, and keeps the first that cuDNN accepts
 * for this geometry within the workspace limit. Fatal, naming the geometry
 * and what to change, when none does (never an algorithm that was not
 * accepted: its workspace query would fail later anyway). */
static void fallback_algo(sg_cuda *cu, sg_cuda_conv *e, int dir, size_t limit, int *algo,
                          cudnnMathType_t *math, size_t *ws) {
    cudnnMathType_t maths[2] = {requested_math(cu), CUDNN_DEFAULT_MATH};
    int n_maths = requested_math(cu) == CUDNN_DEFAULT_MATH ? 1 : 2;
    if (cu->precision == SG_PRECISION_FP32 && !cu->tf32) n_maths = 1; /* FMA only */
    for (int m = 0; m < n_maths; m++) {
        CUDNN_CHECK(cudnnSetConvolutionMathType(e->conv_desc, maths[m]));
        for (int a = 0; a < dir_count[dir]; a++) {
            if (cu->deterministic && !algo_deterministic(dir, a)) continue;
            size_t need = 0;
            if (probe_ws(cu, e, dir, a, &need) != CUDNN_STATUS_SUCCESS || need > limit) continue;
            *algo = a;
            *math = maths[m];
            *ws = need;
            SG_WARN("cuDNN offered no usable %s algorithm for this convolution (n=%d c=%d h=%d "
                    "w=%d k=%d r=%d s=%d dil=%d,%d); using algorithm %d, which it accepts for "
                    "this geometry (workspace %zu bytes)",
                    dir_name[dir], e->key.n, e->key.c, e->key.h, e->key.w, e->key.k, e->key.r,
                    e->key.s, e->key.dil_h, e->key.dil_w, a, need);
            return;
        }
    }
    const sg_conv_desc *d = &e->key;
    SG_FATAL("CUDA backend: cuDNN has no %s algorithm for the convolution n=%d c=%d h=%d w=%d "
             "k=%d r=%d s=%d stride=%d,%d pad=%d,%d dil=%d,%d (%s%s, workspace limit %zu MiB): "
             "set cudnn.deterministic: false or train.precision: fp32, or report the layer shape",
             dir_name[dir], d->n, d->c, d->h, d->w, d->k, d->r, d->s, d->stride_h, d->stride_w,
             d->pad_h, d->pad_w, d->dil_h, d->dil_w,
             cu->precision == SG_PRECISION_BF16 ? "bf16 NHWC" : "fp32 NCHW",
             cu->deterministic ? ", deterministic" : "", limit >> 20);
}

/* Each choose_* sets the descriptor's math type to the requested one for the
 * search, then to the chosen algorithm's for its workspace size (which
 * depends on it); the call sites set it again before running. Returns 1
 * when the choice was measured (cudnnFind*), 0 when it is the heuristics'. */
static int choose_fwd(sg_cuda *cu, sg_cuda_conv *e, size_t limit) {
    cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
    int got = 0;
    CUDNN_CHECK(cudnnSetConvolutionMathType(e->conv_desc, requested_math(cu)));
    int measured = cu->benchmark &&
                   find_ok(cudnnFindConvolutionForwardAlgorithm(
                               cu->cudnn, e->x_desc, e->w_desc, e->conv_desc, e->y_desc,
                               CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &got, perf),
                           "forward");
    if (!measured)
        CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithm_v7(
            cu->cudnn, e->x_desc, e->w_desc, e->conv_desc, e->y_desc,
            CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &got, perf));
    e->fwd_algo = CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM;
    e->fwd_math = requested_math(cu);
    int found = 0;
    for (int i = 0; i < got && !found; i++) {
        if (!usable(cu, perf[i].status, perf[i].determinism, perf[i].mathType, perf[i].memory,
                    limit))
            continue;
        e->fwd_algo = perf[i].algo;
        e->fwd_math = run_math(cu, perf[i].mathType);
        found = 1;
    }
    if (!found) {
        int a = 0;
        fallback_algo(cu, e, DIR_FWD, limit, &a, &e->fwd_math, &e->fwd_ws);
        e->fwd_algo = (cudnnConvolutionFwdAlgo_t)a;
    }
    CUDNN_CHECK(cudnnSetConvolutionMathType(e->conv_desc, e->fwd_math));
    CUDNN_CHECK(cudnnGetConvolutionForwardWorkspaceSize(
        cu->cudnn, e->x_desc, e->w_desc, e->conv_desc, e->y_desc, e->fwd_algo, &e->fwd_ws));
    return measured;
}

static int choose_bwd_data(sg_cuda *cu, sg_cuda_conv *e, size_t limit) {
    cudnnConvolutionBwdDataAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
    int got = 0;
    CUDNN_CHECK(cudnnSetConvolutionMathType(e->conv_desc, requested_math(cu)));
    int measured = cu->benchmark &&
                   find_ok(cudnnFindConvolutionBackwardDataAlgorithm(
                               cu->cudnn, e->w_desc, e->y_desc, e->conv_desc, e->x_desc,
                               CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &got, perf),
                           "backward-data");
    if (!measured)
        CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithm_v7(
            cu->cudnn, e->w_desc, e->y_desc, e->conv_desc, e->x_desc,
            CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &got, perf));
    e->bwd_data_algo = CUDNN_CONVOLUTION_BWD_DATA_ALGO_1;
    e->bwd_data_math = requested_math(cu);
    int found = 0;
    for (int i = 0; i < got && !found; i++) {
        if (!usable(cu, perf[i].status, perf[i].determinism, perf[i].mathType, perf[i].memory,
                    limit))
            continue;
        e->bwd_data_algo = perf[i].algo;
        e->bwd_data_math = run_math(cu, perf[i].mathType);
        found = 1;
    }
    if (!found) {
        int a = 0;
        fallback_algo(cu, e, DIR_BWD_DATA, limit, &a, &e->bwd_data_math, &e->bwd_data_ws);
        e->bwd_data_algo = (cudnnConvolutionBwdDataAlgo_t)a;
    }
    CUDNN_CHECK(cudnnSetConvolutionMathType(e->conv_desc, e->bwd_data_math));
    CUDNN_CHECK(cudnnGetConvolutionBackwardDataWorkspaceSize(cu->cudnn, e->w_desc, e->y_desc,
                                                             e->conv_desc, e->x_desc,
                                                             e->bwd_data_algo, &e->bwd_data_ws));
    return measured;
}

static int choose_bwd_filter(sg_cuda *cu, sg_cuda_conv *e, size_t limit) {
    cudnnConvolutionBwdFilterAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
    int got = 0;
    CUDNN_CHECK(cudnnSetConvolutionMathType(e->conv_desc, requested_math(cu)));
    int measured = cu->benchmark &&
                   find_ok(cudnnFindConvolutionBackwardFilterAlgorithm(
                               cu->cudnn, e->x_desc, e->y_desc, e->conv_desc, e->w_desc,
                               CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &got, perf),
                           "backward-filter");
    if (!measured)
        CUDNN_CHECK(cudnnGetConvolutionBackwardFilterAlgorithm_v7(
            cu->cudnn, e->x_desc, e->y_desc, e->conv_desc, e->w_desc,
            CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &got, perf));
    e->bwd_filter_algo = CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1;
    e->bwd_filter_math = requested_math(cu);
    int found = 0;
    for (int i = 0; i < got && !found; i++) {
        if (!usable(cu, perf[i].status, perf[i].determinism, perf[i].mathType, perf[i].memory,
                    limit))
            continue;
        e->bwd_filter_algo = perf[i].algo;
        e->bwd_filter_math = run_math(cu, perf[i].mathType);
        found = 1;
    }
    if (!found) {
        int a = 0;
        fallback_algo(cu, e, DIR_BWD_FILTER, limit, &a, &e->bwd_filter_math, &e->bwd_filter_ws);
        e->bwd_filter_algo = (cudnnConvolutionBwdFilterAlgo_t)a;
    }
    CUDNN_CHECK(cudnnSetConvolutionMathType(e->conv_desc, e->bwd_filter_math));
    CUDNN_CHECK(cudnnGetConvolutionBackwardFilterWorkspaceSize(
        cu->cudnn, e->x_desc, e->y_desc, e->conv_desc, e->w_desc, e->bwd_filter_algo,
        &e->bwd_filter_ws));
    return measured;
}

static const char *math_name(cudnnMathType_t m) {
    switch (m) {
    case CUDNN_DEFAULT_MATH: return "default";
    case CUDNN_TENSOR_OP_MATH: return "tensor-op";
    case CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION: return "tensor-op-conversion";
    case CUDNN_FMA_MATH: return "fma";
    default: return "?";
    }
}

/* One debug line per new geometry (segtrain --verbose): the algorithm, math
 * type and workspace chosen in each direction. */
static void log_choice(const sg_cuda *cu, const sg_cuda_conv *e) {
    const sg_conv_desc *d = &e->key;
    SG_DEBUG("cuDNN conv %s n=%d c=%d h=%d w=%d k=%d r=%d s=%d stride=%d,%d pad=%d,%d "
             "dil=%d,%d: fwd algo %d %s ws %zu; bwd-data algo %d %s ws %zu; bwd-filter algo %d "
             "%s ws %zu",
             cu->precision == SG_PRECISION_BF16 ? "bf16" : "fp32", d->n, d->c, d->h, d->w, d->k,
             d->r, d->s, d->stride_h, d->stride_w, d->pad_h, d->pad_w, d->dil_h, d->dil_w,
             (int)e->fwd_algo, math_name(e->fwd_math), e->fwd_ws, (int)e->bwd_data_algo,
             math_name(e->bwd_data_math), e->bwd_data_ws, (int)e->bwd_filter_algo,
             math_name(e->bwd_filter_math), e->bwd_filter_ws);
}

/* The plan cache's record of e's three choices. */
static void plan_of(const sg_cuda_conv *e, sg_conv_plan *pl) {
    pl->algo[SG_CONV_DIR_FWD] = (int32_t)e->fwd_algo;
    pl->algo[SG_CONV_DIR_BWD_DATA] = (int32_t)e->bwd_data_algo;
    pl->algo[SG_CONV_DIR_BWD_FILTER] = (int32_t)e->bwd_filter_algo;
    pl->math[SG_CONV_DIR_FWD] = (int32_t)e->fwd_math;
    pl->math[SG_CONV_DIR_BWD_DATA] = (int32_t)e->bwd_data_math;
    pl->math[SG_CONV_DIR_BWD_FILTER] = (int32_t)e->bwd_filter_math;
    pl->workspace[SG_CONV_DIR_FWD] = e->fwd_ws;
    pl->workspace[SG_CONV_DIR_BWD_DATA] = e->bwd_data_ws;
    pl->workspace[SG_CONV_DIR_BWD_FILTER] = e->bwd_filter_ws;
}

/* Takes a cached plan for e: each direction's algorithm must exist, be
 * accepted by cuDNN with its math type on this geometry (the workspace
 * query's status), fit the workspace limit, and be deterministic when that
 * is asked for; and no math type that converts float32 to half. Returns 1
 * with e's algorithms, math types and workspaces set, else 0 (e's choices
 * are then left to the search). */
static int apply_plan(sg_cuda *cu, sg_cuda_conv *e, const sg_conv_plan *pl, size_t limit) {
    size_t ws[3];
    for (int dir = 0; dir < 3; dir++) {
        int a = pl->algo[dir], m = pl->math[dir];
        if (a < 0 || a >= dir_count[dir]) return 0;
        if (m != CUDNN_DEFAULT_MATH && m != CUDNN_TENSOR_OP_MATH && m != CUDNN_FMA_MATH) return 0;
        if ((cudnnMathType_t)m != run_math(cu, (cudnnMathType_t)m)) return 0;
        if (cu->deterministic && !algo_deterministic(dir, a)) return 0;
        CUDNN_CHECK(cudnnSetConvolutionMathType(e->conv_desc, (cudnnMathType_t)m));
        if (probe_ws(cu, e, dir, a, &ws[dir]) != CUDNN_STATUS_SUCCESS || ws[dir] > limit) return 0;
    }
    e->fwd_algo = (cudnnConvolutionFwdAlgo_t)pl->algo[SG_CONV_DIR_FWD];
    e->bwd_data_algo = (cudnnConvolutionBwdDataAlgo_t)pl->algo[SG_CONV_DIR_BWD_DATA];
    e->bwd_filter_algo = (cudnnConvolutionBwdFilterAlgo_t)pl->algo[SG_CONV_DIR_BWD_FILTER];
    e->fwd_math = (cudnnMathType_t)pl->math[SG_CONV_DIR_FWD];
    e->bwd_data_math = (cudnnMathType_t)pl->math[SG_CONV_DIR_BWD_DATA];
    e->bwd_filter_math = (cudnnMathType_t)pl->math[SG_CONV_DIR_BWD_FILTER];
    e->fwd_ws = ws[SG_CONV_DIR_FWD];
    e->bwd_data_ws = ws[SG_CONV_DIR_BWD_DATA];
    e->bwd_filter_ws = ws[SG_CONV_DIR_BWD_FILTER];
    return 1;
}

/* The plan key's precision field (kernels/conv_plans.h allows 0..15): bf16
 * runs the same NHWC bf16 descriptors in both activation layouts, so one plan
 * serves both; fp32 on NHWC tensors is another problem for cuDNN than fp32
 * NCHW, so it is keyed apart (SG_PRECISION_FP32 + 2), and a plan file
 * written under one layout is never applied to the other. */
static int plan_precision(const sg_cuda *cu, int nhwc) {
    if (cu->precision == SG_PRECISION_FP32 && nhwc) return SG_PRECISION_FP32 + 2;
    return cu->precision;
}

static size_t max3(size_t a, size_t b, size_t c) {
    size_t m = a > b ? a : b;
    return m > c ? m : c;
}

static sg_cuda_conv *get_conv(sg_backend *be, const sg_conv_desc *d0) {
    sg_cuda *cu = sg_cu(be);
    /* groups 0 and 1 are one geometry: one entry */
    sg_conv_desc key = *d0;
    if (key.groups == 0) key.groups = 1; /* anything invalid stays, to be refused */
    const sg_conv_desc *d = &key;
    for (int i = 0; i < cu->n_convs; i++)
        if (memcmp(&cu->convs[i].key, d, sizeof *d) == 0) return &cu->convs[i];

    SG_CHECK(d->n > 0 && d->c > 0 && d->h > 0 && d->w > 0 && d->k > 0 && d->r > 0 && d->s > 0 &&
                 d->stride_h > 0 && d->stride_w > 0 && d->dil_h > 0 && d->dil_w > 0 &&
                 d->pad_h >= 0 && d->pad_w >= 0,
             "CUDA backend: invalid convolution geometry n=%d c=%d h=%d w=%d k=%d r=%d s=%d "
             "stride=%d,%d pad=%d,%d dil=%d,%d",
             d->n, d->c, d->h, d->w, d->k, d->r, d->s, d->stride_h, d->stride_w, d->pad_h, d->pad_w,
             d->dil_h, d->dil_w);
    SG_CHECK(sg_conv_desc_check(d0) == 0,
             "CUDA backend: convolution groups=%d must be 0, 1 or a positive divisor of both the "
             "input channels c=%d and the output channels k=%d; fix the layer's groups",
             d0->groups, d->c, d->k);
    int g = d->groups, cg = d->c / g;
    if (cu->n_convs == cu->cap_convs) {
        int cap = cu->cap_convs ? cu->cap_convs * 2 : 32;
        sg_cuda_conv *nc = (sg_cuda_conv *)realloc(cu->convs, (size_t)cap * sizeof *nc);
        SG_CHECK(nc, "CUDA backend: out of host memory for the convolution cache");
        cu->convs = nc;
        cu->cap_convs = cap;
    }
    int bf16 = cu->precision == SG_PRECISION_BF16;
    cudnnDataType_t dt = bf16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_FLOAT;
    /* NHWC (filters KRSC) for bf16 (on copies under layout NCHW) and for
     * NHWC activations; fp32 under NCHW runs on the caller's NCHW tensors */
    int nhwc = sg_cu_nhwc(be);
    cudnnTensorFormat_t fmt = bf16 || nhwc ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW;
    sg_cuda_conv *e = &cu->convs[cu->n_convs];
    memset(e, 0, sizeof *e);
    e->key = *d;
    CUDNN_CHECK(cudnnCreateTensorDescriptor(&e->x_desc));
    CUDNN_CHECK(cudnnCreateTensorDescriptor(&e->y_desc));
    CUDNN_CHECK(cudnnCreateFilterDescriptor(&e->w_desc));
    CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&e->conv_desc));
    /* dimensions are always given as n, c, h, w (k, c/groups, r, s); the
     * format says how they are laid out in memory */
    CUDNN_CHECK(cudnnSetTensor4dDescriptor(e->x_desc, fmt, dt, d->n, d->c, d->h, d->w));
    CUDNN_CHECK(cudnnSetFilter4dDescriptor(e->w_desc, dt, fmt, d->k, cg, d->r, d->s));
    /* compute (accumulation) type float for both: bf16 data with float
     * compute is cuDNN's bf16 configuration */
    CUDNN_CHECK(cudnnSetConvolution2dDescriptor(e->conv_desc, d->pad_h, d->pad_w, d->stride_h,
                                                d->stride_w, d->dil_h, d->dil_w,
                                                CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
    if (g > 1) CUDNN_CHECK(cudnnSetConvolutionGroupCount(e->conv_desc, g));
    CUDNN_CHECK(cudnnSetConvolutionMathType(e->conv_desc, requested_math(cu)));
    int on, oc, ooh, oow;
    CUDNN_CHECK(cudnnGetConvolution2dForwardOutputDim(e->conv_desc, e->x_desc, e->w_desc, &on, &oc,
                                                      &ooh, &oow));
    SG_CHECK(on == d->n && oc == d->k && ooh == d->oh && oow == d->ow,
             "CUDA backend: convolution output %dx%d in the descriptor, cuDNN computes "
             "%dx%d: fill oh/ow with sg_conv_desc_init",
             d->oh, d->ow, ooh, oow);
    CUDNN_CHECK(cudnnSetTensor4dDescriptor(e->y_desc, fmt, dt, d->n, d->k, d->oh, d->ow));
    size_t limit = workspace_limit();
    /* chosen once per geometry and mode: from the plan cache (memory or its
     * file) when cuDNN still accepts that choice here, else searched and
     * added (kernels/conv_plans.h) */
    sg_conv_plan_key pk = sg_conv_plan_key_make(d, plan_precision(cu, nhwc), cu->tf32,
                                                cu->deterministic, cu->benchmark);
    sg_conv_plan pl;
    int cached = sg_conv_plans_lookup(cu->plans, &pk, &pl);
    if (cached && !apply_plan(cu, e, &pl, limit)) {
        SG_WARN("cuDNN convolution plan cache: the cached algorithms for n=%d c=%d h=%d w=%d "
                "k=%d r=%d s=%d are not usable here (workspace over %zu MiB or refused); "
                "choosing again",
                d->n, d->c, d->h, d->w, d->k, d->r, d->s, limit >> 20);
        sg_conv_plans_remove(cu->plans, &pk);
        cached = 0;
    }
    if (!cached) {
        int measured = choose_fwd(cu, e, limit);
        measured &= choose_bwd_data(cu, e, limit);
        measured &= choose_bwd_filter(cu, e, limit);
        plan_of(e, &pl);
        /* a benchmark whose timing ran out of memory fell back to the
         * heuristics: not kept as a measured plan, so a later run measures */
        if ((measured || !cu->benchmark) && sg_conv_plans_insert(cu->plans, &pk, &pl) == SG_OK &&
            cu->plan_file[0])
            (void)sg_conv_plans_save(cu->plans, cu->plan_file); /* warns on failure */
    }
    log_choice(cu, e);
    sg_cuda_raw_grow(cu, &cu->workspace, &cu->workspace_bytes,
                     max3(e->fwd_ws, e->bwd_data_ws, e->bwd_filter_ws),
                     "the cuDNN convolution workspace");
    if (bf16) {
        /* slot 0: x or dy, slot 1: w or dy, slot 2: the result (y, dx or dw) */
        size_t nx = (size_t)d->n * d->c * d->h * d->w, nw = sg_conv_weight_count(d);
        size_t ny = (size_t)d->n * d->k * d->oh * d->ow;
        size_t need[3] = {(nx > ny ? nx : ny) * 2, (nw > ny ? nw : ny) * 2, max3(nx, nw, ny) * 2};
        for (int i = 0; i < 3; i++)
            sg_cuda_raw_grow(cu, &cu->bf16_buf[i], &cu->bf16_bytes[i], need[i],
                             "the bf16 convolution buffers (train.precision bf16)");
    } else if (nhwc) {
        /* slot 2: the float32 KRSC weight gradient (sg_cuda_conv_bwd_weight) */
        sg_cuda_raw_grow(cu, &cu->bf16_buf[2], &cu->bf16_bytes[2],
                         sg_conv_weight_count(d) * sizeof(float),
                         "the convolution weight-gradient buffer (NHWC activations)");
    }
    cu->n_convs++;
    SG_DEBUG("cuDNN conv%s n%d c%d %dx%d k%d %dx%d s%d p%d d%d g%d: algos fwd %d bwd-data %d "
             "bwd-filter %d, math %d/%d/%d, workspace %zu/%zu/%zu bytes",
             bf16   ? " (bf16 NHWC)"
             : nhwc ? " (NHWC)"
                    : "",
             d->n, d->c, d->h, d->w, d->k, d->r, d->s, d->stride_h, d->pad_h, d->dil_h, g,
             (int)e->fwd_algo, (int)e->bwd_data_algo, (int)e->bwd_filter_algo, (int)e->fwd_math,
             (int)e->bwd_data_math, (int)e->bwd_filter_math, e->fwd_ws, e->bwd_data_ws,
             e->bwd_filter_ws);
    return e;
}

/* ---------------- the ops ---------------- */

/* The KRSC copy of weights w (C = c/groups; what both the forward and the
 * backward-data convolution take): bf16 under bf16 convolutions, float32
 * under fp32 ones with NHWC activations (cuDNN's NHWC filter layout).
 * Converted only when w changed since the last conversion
 * (kernels/weight_cache.h: every op writing memory, and ops->mem_written,
 * mark it stale), on the compute stream before the convolution that reads
 * it. A weight copy, not an activation: not counted in act_transposes. */
static const void *weights_krsc(sg_backend *be, const sg_conv_desc *d, const float *w) {
    sg_cuda *cu = sg_cu(be);
    size_t nw = sg_conv_weight_count(d);
    int bf16 = cu->precision == SG_PRECISION_BF16, refill = 1;
    size_t esize = bf16 ? sizeof(uint16_t) : sizeof(float);
    void *copy =
        sg_wcache_get(cu->wcache, w, nw * sizeof(float), bf16 ? 1 : 2, nw * esize, &refill);
    int cg = d->c / sg_conv_groups(d), rs = d->r * d->s;
    if (refill && bf16) transpose<float, uint16_t, float>(be, w, copy, d->k, cg, rs, 0);
    else if (refill) transpose<float, float, float>(be, w, copy, d->k, cg, rs, 0);
    return copy;
}

/* dw (+)= cuDNN's KRSC weight gradient in src ([k][r*s][c/g] -> [k][c/g][r*s]);
 * a conversion pass (convert_bytes), not a weight copy. */
static void dw_from_krsc(sg_backend *be, const sg_conv_desc *d, const void *src, float *dw,
                         int accumulate) {
    int cg = d->c / sg_conv_groups(d), rs = d->r * d->s;
    int bf16 = sg_cu(be)->precision == SG_PRECISION_BF16;
    count_convert(be, (double)sg_conv_weight_count(d), bf16 ? 2 : 4, 4, accumulate);
    if (bf16) transpose<uint16_t, float, float>(be, src, dw, d->k, rs, cg, accumulate);
    else transpose<float, float, float>(be, src, dw, d->k, rs, cg, accumulate);
}

static void sg_cuda_conv_prepare(sg_backend *be, const sg_conv_desc *d) { (void)get_conv(be, d); }

/* The forward on cuDNN-ready operands: x as the descriptor says (bf16 NHWC
 * or the caller's float32 tensor), into y. */
static void run_fwd(sg_backend *be, sg_cuda_conv *e, const void *x, const void *w, void *y) {
    sg_cuda *cu = sg_cu(be);
    const float alpha = 1.0f, beta = 0.0f;
    CUDNN_CHECK(cudnnSetConvolutionMathType(e->conv_desc, e->fwd_math));
    CUDNN_CHECK(cudnnConvolutionForward(cu->cudnn, &alpha, e->x_desc, x, e->w_desc, w, e->conv_desc,
                                        e->fwd_algo, cu->workspace, e->fwd_ws, &beta, e->y_desc,
                                        y));
}

/* The backward-filter into KRSC scratch (dw_from_krsc then lays it out). */
static void run_bwd_filter(sg_backend *be, sg_cuda_conv *e, const void *x, const void *dy,
                           void *dw) {
    sg_cuda *cu = sg_cu(be);
    const float alpha = 1.0f, zero = 0.0f;
    CUDNN_CHECK(cudnnSetConvolutionMathType(e->conv_desc, e->bwd_filter_math));
    CUDNN_CHECK(cudnnConvolutionBackwardFilter(cu->cudnn, &alpha, e->x_desc, x, e->y_desc, dy,
                                               e->conv_desc, e->bwd_filter_algo, cu->workspace,
                                               e->bwd_filter_ws, &zero, e->w_desc, dw));
}

static void sg_cuda_conv_fwd(sg_backend *be, const sg_conv_desc *d, const float *x, const float *w,
                             float *y) {
    sg_cuda *cu = sg_cu(be);
    sg_cuda_conv *e = get_conv(be, d);
    if (cu->precision != SG_PRECISION_BF16) {
        run_fwd(be, e, x, sg_cu_nhwc(be) ? weights_krsc(be, d, w) : w, y);
        return;
    }
    void **b = cu->bf16_buf;
    act_to_bf16(be, x, b[0], d->n, d->c, d->h * d->w);
    run_fwd(be, e, b[0], weights_krsc(be, d, w), b[2]);
    act_from_bf16(be, b[2], y, d->n, d->k, d->oh * d->ow, 0);
}

static void sg_cuda_conv_bwd_data(sg_backend *be, const sg_conv_desc *d, const float *dy,
                                  const float *w, float *dx, int accumulate) {
    /* bf16: float32 dy rounded, cuDNN's bf16 dx widened (or added) */
    if (sg_cuda_conv_bwd_data_dt(be, d, dy, 0, w, dx, 0, accumulate)) return;
    sg_cuda *cu = sg_cu(be);
    sg_cuda_conv *e = get_conv(be, d);
    const float alpha = 1.0f, beta = accumulate ? 1.0f : 0.0f;
    CUDNN_CHECK(cudnnSetConvolutionMathType(e->conv_desc, e->bwd_data_math));
    const void *wk = sg_cu_nhwc(be) ? weights_krsc(be, d, w) : w;
    CUDNN_CHECK(cudnnConvolutionBackwardData(cu->cudnn, &alpha, e->w_desc, wk, e->y_desc, dy,
                                             e->conv_desc, e->bwd_data_algo, cu->workspace,
                                             e->bwd_data_ws, &beta, e->x_desc, dx));
}

static void sg_cuda_conv_bwd_weight(sg_backend *be, const sg_conv_desc *d, const float *x,
                                    const float *dy, float *dw, int accumulate) {
    sg_cuda *cu = sg_cu(be);
    sg_cuda_conv *e = get_conv(be, d);
    void **b = cu->bf16_buf;
    if (cu->precision != SG_PRECISION_BF16) {
        if (!sg_cu_nhwc(be)) {
            const float alpha = 1.0f, beta = accumulate ? 1.0f : 0.0f;
            CUDNN_CHECK(cudnnSetConvolutionMathType(e->conv_desc, e->bwd_filter_math));
            CUDNN_CHECK(cudnnConvolutionBackwardFilter(
                cu->cudnn, &alpha, e->x_desc, x, e->y_desc, dy, e->conv_desc, e->bwd_filter_algo,
                cu->workspace, e->bwd_filter_ws, &beta, e->w_desc, dw));
            return;
        }
        /* NHWC: cuDNN's NHWC filter is KRSC float32 scratch, laid out as
         * PyTorch's KCRS (and added, with accumulate) after */
        run_bwd_filter(be, e, x, dy, b[2]);
        dw_from_krsc(be, d, b[2], dw, accumulate);
        return;
    }
    act_to_bf16(be, x, b[0], d->n, d->c, d->h * d->w);
    act_to_bf16(be, dy, b[1], d->n, d->k, d->oh * d->ow);
    run_bwd_filter(be, e, b[0], b[1], b[2]);
    dw_from_krsc(be, d, b[2], dw, accumulate);
}

/* ---------------- bf16 activation storage ---------------- */

/* Under bf16 convolutions a bf16-stored activation is what the bf16 NHWC
 * operand of the float32 path would hold: under layout NHWC it is handed to
 * cuDNN as it is, and a bf16-stored result is written by cuDNN directly;
 * under NCHW they are only transposed (no rounding). Either way every
 * result equals the float32 op's. */
int sg_cuda_conv_native_dt(sg_backend *be, const sg_conv_desc *d, int fwd, const void *x, int xb,
                           const void *in1, int in1b, void *out, int yb, int accumulate) {
    sg_cuda *cu = sg_cu(be);
    if (cu->precision != SG_PRECISION_BF16) return 0;
    if (!fwd && !xb && !in1b) return 0; /* conv_bwd_weight itself converts float32 x, dy */
    sg_cuda_conv *e = get_conv(be, d);  /* grows bf16_buf for d first */
    int nhwc = sg_cu_nhwc(be);
    void **b = cu->bf16_buf;
    const void *xin = x;
    if (xb && !nhwc) bf16_to_nhwc(be, x, b[0], d->n, d->c, d->h * d->w), xin = b[0];
    if (!xb) act_to_bf16(be, (const float *)x, b[0], d->n, d->c, d->h * d->w), xin = b[0];
    if (fwd) {
        void *yout = yb && nhwc ? out : b[2];
        run_fwd(be, e, xin, weights_krsc(be, d, (const float *)in1), yout);
        if (yb && !nhwc) bf16_from_nhwc(be, b[2], out, d->n, d->k, d->oh * d->ow);
        else if (!yb) act_from_bf16(be, b[2], (float *)out, d->n, d->k, d->oh * d->ow, 0);
        return 1;
    }
    /* dy: a bf16-stored one as it is (NHWC) or transposed, else rounded */
    const void *dyin = b[1];
    if (in1b && nhwc) dyin = in1;
    else if (in1b) bf16_to_nhwc(be, in1, b[1], d->n, d->k, d->oh * d->ow);
    else act_to_bf16(be, (const float *)in1, b[1], d->n, d->k, d->oh * d->ow);
    run_bwd_filter(be, e, xin, dyin, b[2]);
    dw_from_krsc(be, d, b[2], (float *)out, accumulate);
    return 1;
}

int sg_cuda_conv_bwd_data_dt(sg_backend *be, const sg_conv_desc *d, const void *dy, int dyb,
                             const float *w, void *dx, int dxb, int accumulate) {
    sg_cuda *cu = sg_cu(be);
    if (cu->precision != SG_PRECISION_BF16) return 0;
    SG_CHECK(!dxb || !accumulate,
             "CUDA backend: conv_bwd_data with accumulate into a bf16 dx (a bug in the caller: "
             "a bf16 gradient is written once)");
    sg_cuda_conv *e = get_conv(be, d);
    int nhwc = sg_cu_nhwc(be);
    void **b = cu->bf16_buf;
    const void *dyin = b[0];
    if (dyb && nhwc) dyin = dy;
    else if (dyb) bf16_to_nhwc(be, dy, b[0], d->n, d->k, d->oh * d->ow);
    else act_to_bf16(be, (const float *)dy, b[0], d->n, d->k, d->oh * d->ow);
    void *dxout = dxb && nhwc ? dx : b[2];
    const float alpha = 1.0f, zero = 0.0f;
    CUDNN_CHECK(cudnnSetConvolutionMathType(e->conv_desc, e->bwd_data_math));
    CUDNN_CHECK(cudnnConvolutionBackwardData(
        cu->cudnn, &alpha, e->w_desc, weights_krsc(be, d, w), e->y_desc, dyin, e->conv_desc,
        e->bwd_data_algo, cu->workspace, e->bwd_data_ws, &zero, e->x_desc, dxout));
    if (dxb && !nhwc) bf16_from_nhwc(be, b[2], dx, d->n, d->c, d->h * d->w);
    else if (!dxb) act_from_bf16(be, b[2], (float *)dx, d->n, d->c, d->h * d->w, accumulate);
    return 1;
}

void sg_cuda_conv_destroy(sg_cuda *cu) {
    for (int i = 0; i < cu->n_convs; i++) {
        sg_cuda_conv *e = &cu->convs[i];
        CUDNN_CHECK(cudnnDestroyTensorDescriptor(e->x_desc));
        CUDNN_CHECK(cudnnDestroyTensorDescriptor(e->y_desc));
        CUDNN_CHECK(cudnnDestroyFilterDescriptor(e->w_desc));
        CUDNN_CHECK(cudnnDestroyConvolutionDescriptor(e->conv_desc));
    }
    free(cu->convs);
    cu->convs = NULL;
    cu->n_convs = cu->cap_convs = 0;
    sg_cuda_raw_free(cu, cu->workspace, cu->workspace_bytes);
    cu->workspace = NULL;
    cu->workspace_bytes = 0;
    for (int i = 0; i < 3; i++) {
        sg_cuda_raw_free(cu, cu->bf16_buf[i], cu->bf16_bytes[i]);
        cu->bf16_buf[i] = NULL;
        cu->bf16_bytes[i] = 0;
    }
}

void sg_cuda_conv_f32(sg_backend *be, const sg_conv_desc *d, int fwd, const float *x,
                      const float *in1, float *out, int accumulate) {
    if (fwd) sg_cuda_conv_fwd(be, d, x, in1, out);
    else sg_cuda_conv_bwd_weight(be, d, x, in1, out, accumulate);
}

void sg_cuda_fill_conv_ops(sg_ops *o) {
    o->conv_prepare = sg_cuda_conv_prepare;
    o->conv_fwd = sg_cuda_conv_fwd;
    o->conv_bwd_data = sg_cuda_conv_bwd_data;
    o->conv_bwd_weight = sg_cuda_conv_bwd_weight;
}
