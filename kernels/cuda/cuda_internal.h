/* kernels/cuda/cuda_internal.h - private state and helpers of the CUDA backend.
 *
 * Owns the layout of the backend's impl struct (sg_cuda): the device index,
 * the three streams and their events, the cuDNN handle, the per-shape
 * convolution cache and its workspace, the allocation table behind the
 * in-use/peak accounting, and the small scratch buffers reductions use to
 * return values to the host. Nothing here is global: every op reaches its
 * state through be->impl, so several backends (one per device) can coexist.
 *
 * Also the check macros used by every .cu file of the backend: a failed CUDA
 * or cuDNN call is fatal and prints the call text, file, line, the library's
 * error name and string, and a hint on what to do.
 *
 * The ops are split into the same groups as the conformance suite's runners
 * (tests/backend/run_<group>.c) and as the CPU backend (cpu_internal.h):
 * each .cu file implements one group, or one part of it, and fills its
 * entries of the op table through its sg_cuda_fill_<file>_ops();
 * cuda_backend.cu calls every fill function and sg_backend_create checks
 * that none left an op NULL.
 *
 *   group     ops                                        CUDA file(s)
 *   (backend) destroy get_info                           cuda_backend.cu
 *   memory    alloc free upload download copy zero sync  cuda_memory.cu
 *             host_alloc host_free upload_async
 *             upload_wait stream stream_wait bind_thread
 *             mem_written (run_memory.c, run_weights.c)
 *   conv      conv_prepare conv_fwd conv_bwd_data        cuda_conv.cu
 *             conv_bwd_weight
 *             bias_fwd bias_bwd                          cuda_conv_bias.cu
 *   bn        bn_stats bn_finalize bn_eval_params bn_fwd cuda_bn.cu
 *             bn_bwd_reduce bn_bwd_elem bn_param_grads
 *   elem      relu_fwd relu_bwd add scale axpy           cuda_elem.cu
 *             dropout_fwd dropout_bwd sgd_step
 *             normalize_u8 sumsq
 *   optim     sgd_multi_plan sgd_multi_step              cuda_optim.cu
 *             sgd_multi_free adamw_multi_plan
 *             adamw_multi_step adamw_multi_free
 *   graph     set_step_key graph_begin graph_end         cuda_graph.cu
 *             graph_launch graph_free
 *   gate      hardswish_* hardsigmoid_* sigmoid_*        cuda_gate.cu
 *             chan_scale_fwd chan_scale_bwd
 *   pool      maxpool_* avgpool_* resize_* concat_*      cuda_pool.cu
 *   loss      ce_fwd_bwd ce_weighted ce_label_prob       cuda_loss.cu
 *             kth_smallest argmax confusion
 *   tta       flip_w softmax_fwd                         cuda_tta.cu
 *   act_bf16  conv_fwd_dt conv_bwd_weight_dt conv_bwd_dt cuda_act_bf16.cu
 *             bn_stats_dt bn_fwd_dt bn_bwd_reduce_dt     cuda_bn.cu (the float32 BN
 *             bn_bwd_elem_dt                               kernels' bf16 instances)
 *   (helpers) error reporting, no ops                    cuda_check.cu
 *             block / per-channel reductions             cuda_reduce.cuh,
 *                                                        cuda_chan_reduce.cuh
 *             kernel launches (SG_LAUNCH, no raw <<<)    cuda_launch.h
 *
 * Calls between the files go one way only (no loops): cuda_backend.cu calls
 * the others and none calls it; cuda_act_bf16.cu -> cuda_conv.cu
 * (sg_cuda_conv_native_dt); cuda_bn.cu -> cuda_act_bf16.cu (sg_cuda_act_dt);
 * every file may call cuda_memory.cu and cuda_check.cu, which call no op
 * file.
 *
 * Only .cu files of kernels/cuda include this header (it uses CUDA types).
 */
#ifndef SG_KERNELS_CUDA_INTERNAL_H
#define SG_KERNELS_CUDA_INTERNAL_H

#include <cuda_runtime.h>
#include <cudnn.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels/backend.h"
#include "kernels/conv_plans.h"
#include "kernels/cuda/cuda_launch.h"
#include "kernels/cuda/cudnn_status.h"

/* ---- error checking ---- */

/* Prints "fatal: <call> failed at file:line: <name> (<string>); <hint>" and exits 1. */
extern "C" void sg_cuda_fail(const char *call, const char *file, int line, const char *err_name,
                             const char *err_str, const char *hint) __attribute__((noreturn));
/* What to do about a CUDA runtime error ("" when there is nothing specific). */
extern "C" const char *sg_cuda_hint(cudaError_t e);

#define CU_CHECK(call)                                                                            \
    do {                                                                                          \
        cudaError_t e_ = (call);                                                                  \
        if (e_ != cudaSuccess)                                                                    \
            sg_cuda_fail(#call, __FILE__, __LINE__, cudaGetErrorName(e_), cudaGetErrorString(e_), \
                         sg_cuda_hint(e_));                                                       \
    } while (0)

#define CUDNN_CHECK(call)                                                                   \
    do {                                                                                    \
        cudnnStatus_t s_ = (call);                                                          \
        if (s_ != CUDNN_STATUS_SUCCESS)                                                     \
            sg_cuda_fail(#call, __FILE__, __LINE__, "cudnnStatus", cudnnGetErrorString(s_), \
                         sg_cudnn_hint(s_));                                                \
    } while (0)

/* After every kernel launch: catches bad launch configurations at once
 * (asynchronous faults surface at the next synchronising call). */
#define CU_LAUNCH_CHECK(what)                                                         \
    do {                                                                              \
        cudaError_t e_ = cudaGetLastError();                                          \
        if (e_ != cudaSuccess)                                                        \
            sg_cuda_fail("launch of " what, __FILE__, __LINE__, cudaGetErrorName(e_), \
                         cudaGetErrorString(e_), sg_cuda_hint(e_));                   \
    } while (0)

/* ---- state ---- */

/* One cached convolution geometry: descriptors and the chosen algorithms.
 * float32: float descriptors on the caller's tensors in be->layout (NHWC:
 * KRSC filters); bf16: NHWC bf16 descriptors, on the backend's bf16 copies
 * under NCHW and on the caller's (rounded) tensors under NHWC (cuda_conv.cu). */
typedef struct sg_cuda_conv {
    sg_conv_desc key;
    cudnnTensorDescriptor_t x_desc, y_desc;
    cudnnFilterDescriptor_t w_desc;
    cudnnConvolutionDescriptor_t conv_desc;
    cudnnConvolutionFwdAlgo_t fwd_algo;
    cudnnConvolutionBwdDataAlgo_t bwd_data_algo;
    cudnnConvolutionBwdFilterAlgo_t bwd_filter_algo;
    /* the math type each chosen algorithm runs with (set on conv_desc
     * before each call: one descriptor serves the three directions) */
    cudnnMathType_t fwd_math, bwd_data_math, bwd_filter_math;
    size_t fwd_ws, bwd_data_ws, bwd_filter_ws; /* workspace bytes of each choice */
} sg_cuda_conv;

/* A live device allocation (for in-use accounting and double-free checks). */
typedef struct sg_cuda_alloc_entry {
    void *ptr; /* NULL: empty slot; (void *)1: deleted (tombstone) */
    size_t bytes;
} sg_cuda_alloc_entry;

#define SG_CUDA_NSTREAMS 3
/* Number of per-block partial sums the deterministic reductions use. */
#define SG_CUDA_RED_BLOCKS 512
#define SG_CUDA_RED_THREADS 256
/* (channel, block) partial slots of the per-channel reductions
 * (cuda_chan_reduce.cuh: batch norm and the bias gradient). */
#define SG_CUDA_CHAN_SLOTS 65536

typedef struct sg_cuda {
    int device;
    char name[32];
    char device_name[128];
    int sm_count;
    int benchmark, deterministic;
    int precision;       /* SG_PRECISION_* of the convolutions */
    int tf32;            /* fp32 convolutions may use TF32 (allow_tf32 and sm_80+) */
    char conv_math[160]; /* how convolutions run, in words (get_info, log) */

    cudaStream_t streams[SG_CUDA_NSTREAMS]; /* SG_STREAM_COMPUTE, _COPY, _COMM */
    cudaEvent_t events[SG_CUDA_NSTREAMS];   /* recorded on stream i for stream_wait */
    /* recorded on the compute stream by upload_async only (its own event, so
     * a loader thread's uploads never re-record the one stream_wait uses) */
    cudaEvent_t upload_event;
    cudnnHandle_t cudnn; /* bound to the compute stream */

    /* chosen algorithms by geometry and mode, in memory and in plan_file
     * (kernels/conv_plans.h); plan_file "" = memory only */
    sg_conv_plans *plans;
    char plan_file[4096];
    /* convolution cache (linear: a network has a few dozen geometries) */
    sg_cuda_conv *convs;
    int n_convs, cap_convs;
    void *workspace;
    size_t workspace_bytes;
    /* bf16: NHWC bf16 copies of a conv's two inputs and of its result,
     * grown (like the workspace) when a geometry is first seen; fp32 with
     * NHWC activations: slot 2 only, the KRSC weight gradient */
    void *bf16_buf[3];
    size_t bf16_bytes[3];
    /* bf16 activation storage under fp32 convolutions (conv *_dt ops,
     * cuda_act_bf16.cu): float32 copies of a bf16 input / of a result before it
     * is stored in bf16; grown when a larger tensor is first seen */
    void *act_buf[4]; /* 2, 3: a bf16 gradient's float32 copy (dy) / result (dx) */
    size_t act_bytes[4];
    /* bf16, or NHWC activations (else NULL): each weight's KRSC copy (bf16,
     * or float32 under fp32 convolutions), converted once per change of the
     * weights instead of once per conv call (kernels/weight_cache.h); every
     * op that writes memory reports it (sg_cuda_written) so no copy is stale */
    struct sg_wcache *wcache;

    /* allocation table: open addressing on the pointer value */
    sg_cuda_alloc_entry *allocs;
    size_t alloc_cap, alloc_used; /* slots, occupied slots (incl. tombstones) */
    size_t mem_in_use, mem_peak;  /* bytes through ops->alloc + workspace + scratch */

    /* reductions: per-block partials and the final values, device and pinned host */
    double *red_partial;  /* [2 * SG_CUDA_RED_BLOCKS] */
    double *red_result;   /* [4] on the device */
    double *red_host;     /* [4] pinned */
    int64_t *counts_dev;  /* bn_finalize counts beyond the inline limit */
    double *chan_partial; /* per-channel reductions: [SG_CUDA_CHAN_SLOTS][3] */
    int counts_cap;

    /* activation layout transposes launched so far (cuda_conv.cu: the bf16
     * convolutions' NHWC copies under layout NCHW; get_info's
     * act_transposes), so that a run can show that an NHWC step has none */
    long act_transposes;
    /* bytes read + written by the conversion passes around cuDNN so far
     * (cuda_conv.cu: rounding / widening / transposing an operand or result
     * into or out of its bf16 NHWC copy, the KRSC weight gradient back into
     * float32 KCRS; get_info's convert_bytes), added on the host per launch */
    double convert_bytes;

    /* The step's parameters read by ops when they run (cuda_graph.cu):
     * set_step_key's key in device memory, so that a replayed graph reads
     * the key of its launch rather than the one it was recorded with */
    uint64_t *step_key_dev;
    /* Graphs (cuda_graph.cu). capturing: between graph_begin and graph_end;
     * the ops that would wait for the device or allocate check it and stop
     * with a fatal error naming themselves (sg_cu_no_capture). mem_gen
     * counts the backend's own allocations and frees (workspace, scratch,
     * tensors): a graph recorded at another generation may read freed
     * memory, so graph_launch refuses it. */
    int capturing;
    uint64_t mem_gen, capture_gen; /* capture_gen: mem_gen at graph_begin */
    long graph_captures, graph_launches;
} sg_cuda;

static inline sg_cuda *sg_cu(sg_backend *be) { return (sg_cuda *)be->impl; }
static inline cudaStream_t sg_cu_stream(sg_backend *be) { return sg_cu(be)->streams[0]; }

/* Makes the backend's device current on the calling thread (memory and
 * stream ops, which other threads, e.g. a loader or a communication thread,
 * may call; a no-op cost when it is current already). */
#define SG_CU_ENTER(cu) CU_CHECK(cudaSetDevice((cu)->device))

/* Stops with a fatal error when a graph is being recorded: `what` waits for
 * the device, returns a value to the host or allocates, none of which a
 * graph can record (backend.h, graph_begin). Called by those ops. */
void sg_cu_no_capture(sg_cuda *cu, const char *what);

/* Grid for a grid-stride loop over `count` elements with `threads` per block. */
static inline unsigned sg_cu_blocks(size_t count, int threads) {
    size_t b = (count + (size_t)threads - 1) / (size_t)threads;
    if (b < 1) b = 1;
    if (b > 65535u * 8u) b = 65535u * 8u;
    return (unsigned)b;
}

/* Elementwise kernels: EW_THREADS per block, a grid-stride loop over
 * `total` elements, and LAUNCH on the backend's stream (a no-op for 0). */
#define EW_THREADS 256
#define GRID_STRIDE(i, total)                                                   \
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < (total); \
         i += (size_t)gridDim.x * blockDim.x)
#define LAUNCH(kernel, count, ...)                                                            \
    do {                                                                                      \
        if ((count) == 0) return;                                                             \
        SG_LAUNCH(sg_cu_blocks((count), EW_THREADS), EW_THREADS, 0, sg_cu_stream(be), kernel) \
        (__VA_ARGS__);                                                                        \
        CU_LAUNCH_CHECK(#kernel);                                                             \
    } while (0)

/* Per-plane launches (ops whose value depends on the channel): grid.y walks
 * the planes (n*c channel planes, or the n*hw pixels of NHWC activations),
 * grid.x the elements of a plane, so kernels need no 64-bit division per
 * element. Threads per plane shrink for small planes (an NHWC pixel's c
 * channels, a 1x1 plane), and a block then holds several planes
 * (threadIdx.y) so that it keeps 256 threads. */
static inline int sg_cu_plane_threads(int hw) {
    if (hw >= 256) return 256;
    return hw <= 32 ? 32 : (hw + 31) / 32 * 32;
}
static inline dim3 sg_cu_plane_block(int hw) {
    int tx = sg_cu_plane_threads(hw);
    return dim3((unsigned)tx, (unsigned)(256 / tx), 1);
}
static inline dim3 sg_cu_plane_grid(int hw, size_t planes, dim3 block) {
    size_t bx = ((size_t)(hw > 0 ? hw : 1) + block.x - 1) / block.x;
    if (bx > 4096) bx = 4096;
    size_t by = planes < 1 ? 1 : (planes + block.y - 1) / block.y;
    if (by > 65535) by = 65535;
    return dim3((unsigned)bx, (unsigned)by, 1);
}
#define SG_PLANE_LOOP(pl, planes)                                                  \
    for (size_t pl = (size_t)blockIdx.y * blockDim.y + threadIdx.y; pl < (planes); \
         pl += (size_t)gridDim.y * blockDim.y)
#define SG_INPLANE_LOOP(j, hw) \
    for (int j = blockIdx.x * blockDim.x + threadIdx.x; j < (hw); j += gridDim.x * blockDim.x)

/* ---- the activation layout (be->layout, backend.h) ----
 * Per-plane kernels run in either layout over "planes" of contiguous
 * elements: NCHW planes are the n*c channel planes of hw pixels, NHWC planes
 * the n*hw pixels of c channels. Element j of plane pl is at pl*inner + j in
 * both, so consecutive threads touch consecutive addresses in both layouts;
 * the channel is pl % c (NCHW) or j (NHWC). */
static inline int sg_cu_nhwc(const sg_backend *be) { return be->layout == SG_LAYOUT_NHWC; }
static inline size_t sg_cu_planes(int nhwc, int n, int c, int hw) {
    return nhwc ? (size_t)n * hw : (size_t)n * c;
}
static inline int sg_cu_inner(int nhwc, int c, int hw) { return nhwc ? c : hw; }
__device__ __forceinline__ int sg_cu_plane_ch(int nhwc, size_t pl, int j, int c) {
    return nhwc ? j : (int)(pl % (size_t)c);
}
/* The logical (image, channel, pixel) of element j of plane pl of an
 * [n, c, hw] activation. */
__device__ __forceinline__ void sg_cu_plane_elem(int nhwc, size_t pl, int j, int c, int hw,
                                                 size_t *img, int *ch, int *p) {
    if (nhwc) *img = pl / (size_t)hw, *p = (int)(pl % (size_t)hw), *ch = j;
    else *img = pl / (size_t)c, *ch = (int)(pl % (size_t)c), *p = j;
}
/* sg_act_at's device twin: where element (i, ch, p) of an [n, c, hw]
 * activation lies. */
__device__ __forceinline__ size_t sg_cu_act_at(int nhwc, int c, int hw, size_t i, int ch, int p) {
    return nhwc ? (i * (size_t)hw + (size_t)p) * (size_t)c + (size_t)ch
                : (i * (size_t)c + (size_t)ch) * (size_t)hw + (size_t)p;
}

/* ---- helpers shared by the files (one way: no file calls back into the
 * file that assembles the table, cuda_backend.cu) ---- */

/* cuda_check.cu: sg_cuda_fail and the hints above. */

/* cuda_memory.cu: device memory owned by the backend itself (workspace,
 * scratch): accounted in mem_in_use/peak like ops->alloc, with the planned
 * size in the OOM hint. */
void *sg_cuda_raw_alloc(sg_cuda *cu, size_t bytes, const char *what);
void sg_cuda_raw_free(sg_cuda *cu, void *p, size_t bytes);
/* cuda_memory.cu: grows such a buffer (*buf of *bytes) to `need` bytes,
 * after the work in flight that may still use the old one; never shrinks. */
void sg_cuda_raw_grow(sg_cuda *cu, void **buf, size_t *bytes, size_t need, const char *what);
/* cuda_memory.cu: reads the first `n` doubles of red_result back to the
 * host (syncs compute). */
void sg_cuda_read_result(sg_backend *be, double *out, int n);
/* cuda_memory.cu: memory [p, p + bytes) was written by an op (p NULL: any):
 * the bf16 weight copies made from it are stale (also ops->mem_written). */
void sg_cuda_written(sg_backend *be, const void *p, size_t bytes);
/* cuda_memory.cu: frees the allocation table, what is left in it and the
 * reduction scratch (destroy). */
void sg_cuda_memory_destroy(sg_cuda *cu);

/* cuda_conv.cu: sets cu->precision / tf32 / conv_math from the options and
 * the device's compute capability; returns 0, or -1 after logging (bf16 on
 * a GPU before sm_80, which has no bf16 tensor cores). */
int sg_cuda_conv_configure(sg_cuda *cu, const sg_backend_opts *opts, int cc_major, int cc_minor);
void sg_cuda_conv_destroy(sg_cuda *cu);
/* cuda_conv.cu: a bf16 convolution over bf16-stored activations: forward
 * (fwd = 1: x, in1 = w -> out = y) or backward-weights (fwd = 0: x, in1 = dy
 * -> out = dw, accumulate), x stored in bf16 when xb, y when yb, dy when
 * in1b (backward only). Returns 1 when it ran; 0 (nothing done) under fp32
 * convolutions, or for a backward-weights with a float32 x and dy
 * (conv_bwd_weight converts them itself): the caller converts and runs the
 * float32 op instead (cuda_act_bf16.cu). */
int sg_cuda_conv_native_dt(sg_backend *be, const sg_conv_desc *d, int fwd, const void *x, int xb,
                           const void *in1, int in1b, void *out, int yb, int accumulate);
/* cuda_conv.cu: under bf16 convolutions, conv_bwd_data with dy stored as
 * bf16 (dyb) or float32 and dx likewise (dxb; accumulate 0 then): a bf16
 * dy is cuDNN's input as it is (NHWC) or transposed (NCHW), a bf16 dx
 * cuDNN's bf16 result stored directly (NHWC) or transposed (NCHW). Returns
 * 1 when it ran, 0 (nothing done) under fp32 convolutions. */
int sg_cuda_conv_bwd_data_dt(sg_backend *be, const sg_conv_desc *d, const void *dy, int dyb,
                             const float *w, void *dx, int dxb, int accumulate);
/* cuda_conv.cu: the float32 forward (fwd 1: in1 = w, out = y) or
 * backward-weights pass (fwd 0: in1 = dy, out = dw), for the *_dt ops'
 * converting path: called directly, not through be->ops, which a caller may
 * have wrapped (a counting or profiling table would see one conv twice). */
void sg_cuda_conv_f32(sg_backend *be, const sg_conv_desc *d, int fwd, const float *x,
                      const float *in1, float *out, int accumulate);

/* cuda_act_bf16.cu: dt if it is SG_ACT_F32 or SG_ACT_BF16; else fatal,
 * naming op (a caller's bug). */
int sg_cuda_act_dt(int dt, const char *op);
/* cuda_act_bf16.cu: frees the float32 buffers of the *_dt ops (destroy). */
void sg_cuda_act_buf_free(sg_cuda *cu);

/* ---- op groups: each file fills its entries of the table (the table at
 * the top of this header). The ops themselves are static in their file,
 * still named sg_cuda_<op> so that profiles, sanitizer reports and stack
 * traces say which backend's op ran. ---- */
void sg_cuda_fill_memory_ops(sg_ops *ops);    /* cuda_memory.cu */
void sg_cuda_fill_conv_ops(sg_ops *ops);      /* cuda_conv.cu */
void sg_cuda_fill_conv_bias_ops(sg_ops *ops); /* cuda_conv_bias.cu */
void sg_cuda_fill_bn_ops(sg_ops *ops);        /* cuda_bn.cu */
void sg_cuda_fill_elem_ops(sg_ops *ops);      /* cuda_elem.cu */
void sg_cuda_fill_gate_ops(sg_ops *ops);      /* cuda_gate.cu */
void sg_cuda_fill_pool_ops(sg_ops *ops);      /* cuda_pool.cu */
void sg_cuda_fill_loss_ops(sg_ops *ops);      /* cuda_loss.cu */
void sg_cuda_fill_tta_ops(sg_ops *ops);       /* cuda_tta.cu */
void sg_cuda_fill_act_bf16_ops(sg_ops *ops);  /* cuda_act_bf16.cu */
void sg_cuda_fill_graph_ops(sg_ops *ops);     /* cuda_graph.cu */
void sg_cuda_fill_optim_ops(sg_ops *ops);     /* cuda_optim.cu */

/* Device-side block reductions: cuda_reduce.cuh; per-channel reductions:
 * cuda_chan_reduce.cuh. */

#endif
