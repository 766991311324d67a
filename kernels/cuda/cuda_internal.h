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
 * Only .cu files of kernels/cuda include this header (it uses CUDA types).
 */
#ifndef SG_KERNELS_CUDA_INTERNAL_H
#define SG_KERNELS_CUDA_INTERNAL_H

#include <cuda_runtime.h>
#include <cudnn.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels/backend.h"

/* ---- error checking ---- */

/* Prints "fatal: <call> failed at file:line: <name> (<string>); <hint>" and exits 1. */
extern "C" void sg_cuda_fail(const char *call, const char *file, int line, const char *err_name,
                             const char *err_str, const char *hint) __attribute__((noreturn));
/* What to do about a CUDA runtime error ("" when there is nothing specific). */
extern "C" const char *sg_cuda_hint(cudaError_t e);
extern "C" const char *sg_cudnn_hint(cudnnStatus_t s);

#define CU_CHECK(call)                                                                   \
    do {                                                                                 \
        cudaError_t e_ = (call);                                                         \
        if (e_ != cudaSuccess)                                                           \
            sg_cuda_fail(#call, __FILE__, __LINE__, cudaGetErrorName(e_),                \
                         cudaGetErrorString(e_), sg_cuda_hint(e_));                      \
    } while (0)

#define CUDNN_CHECK(call)                                                                \
    do {                                                                                 \
        cudnnStatus_t s_ = (call);                                                       \
        if (s_ != CUDNN_STATUS_SUCCESS)                                                  \
            sg_cuda_fail(#call, __FILE__, __LINE__, "cudnnStatus",                       \
                         cudnnGetErrorString(s_), sg_cudnn_hint(s_));                    \
    } while (0)

/* After every kernel launch: catches bad launch configurations at once
 * (asynchronous faults surface at the next synchronising call). */
#define CU_LAUNCH_CHECK(what)                                                            \
    do {                                                                                 \
        cudaError_t e_ = cudaGetLastError();                                             \
        if (e_ != cudaSuccess)                                                           \
            sg_cuda_fail("launch of " what, __FILE__, __LINE__, cudaGetErrorName(e_),     \
                         cudaGetErrorString(e_), sg_cuda_hint(e_));                      \
    } while (0)

/* ---- state ---- */

/* One cached convolution geometry: descriptors and the chosen algorithms.
 * float32: NCHW float descriptors on the caller's tensors; bf16: NHWC bf16
 * descriptors on the backend's bf16 copies (cuda_conv.cu). */
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
    void *ptr;    /* NULL: empty slot; (void *)1: deleted (tombstone) */
    size_t bytes;
} sg_cuda_alloc_entry;

#define SG_CUDA_NSTREAMS 3
/* Number of per-block partial sums the deterministic reductions use. */
#define SG_CUDA_RED_BLOCKS 512
#define SG_CUDA_RED_THREADS 256
/* (channel, block) partial slots of the per-channel reductions (cuda_bn.cu). */
#define SG_CUDA_CHAN_SLOTS 65536

typedef struct sg_cuda {
    int device;
    char name[32];
    char device_name[128];
    int sm_count;
    int benchmark, deterministic;
    int precision;          /* SG_PRECISION_* of the convolutions */
    int tf32;               /* fp32 convolutions may use TF32 (allow_tf32 and sm_80+) */
    char conv_math[160];    /* how convolutions run, in words (get_info, log) */

    cudaStream_t streams[SG_CUDA_NSTREAMS]; /* SG_STREAM_COMPUTE, _COPY, _COMM */
    cudaEvent_t events[SG_CUDA_NSTREAMS];   /* recorded on stream i for stream_wait */
    /* recorded on the compute stream by upload_async only (its own event, so
     * a loader thread's uploads never re-record the one stream_wait uses) */
    cudaEvent_t upload_event;
    cudnnHandle_t cudnn;                    /* bound to the compute stream */

    /* convolution cache (linear: a network has a few dozen geometries) */
    sg_cuda_conv *convs;
    int n_convs, cap_convs;
    void *workspace;
    size_t workspace_bytes;
    /* bf16: NHWC bf16 copies of a conv's two inputs and of its result,
     * grown (like the workspace) when a geometry is first seen */
    void *bf16_buf[3];
    size_t bf16_bytes[3];
    /* bf16 activation storage under fp32 convolutions (conv *_dt ops,
     * cuda_conv.cu): float32 copies of a bf16 input / of a result before it
     * is stored in bf16; grown when a larger tensor is first seen */
    void *act_buf[2];
    size_t act_bytes[2];
    /* bf16 only (NULL under fp32): each weight's bf16 KRSC copy, converted
     * once per change of the weights instead of once per conv call
     * (kernels/weight_cache.h); every op that writes memory reports it
     * (sg_cuda_written) so no copy is stale */
    struct sg_wcache *wcache;

    /* allocation table: open addressing on the pointer value */
    sg_cuda_alloc_entry *allocs;
    size_t alloc_cap, alloc_used; /* slots, occupied slots (incl. tombstones) */
    size_t mem_in_use, mem_peak;  /* bytes through ops->alloc + workspace + scratch */

    /* reductions: per-block partials and the final values, device and pinned host */
    double *red_partial;   /* [2 * SG_CUDA_RED_BLOCKS] */
    double *red_result;    /* [4] on the device */
    double *red_host;      /* [4] pinned */
    int64_t *counts_dev;   /* bn_finalize counts beyond the inline limit */
    double *chan_partial;  /* per-channel reductions: [SG_CUDA_CHAN_SLOTS][3] */
    int counts_cap;
} sg_cuda;

static inline sg_cuda *sg_cu(sg_backend *be) { return (sg_cuda *)be->impl; }
static inline cudaStream_t sg_cu_stream(sg_backend *be) {
    return sg_cu(be)->streams[0];
}

/* Makes the backend's device current on the calling thread (memory and
 * stream ops, which other threads, e.g. a loader or a communication thread,
 * may call; a no-op cost when it is current already). */
#define SG_CU_ENTER(cu) CU_CHECK(cudaSetDevice((cu)->device))

/* Grid for a grid-stride loop over `count` elements with `threads` per block. */
static inline unsigned sg_cu_blocks(size_t count, int threads) {
    size_t b = (count + (size_t)threads - 1) / (size_t)threads;
    if (b < 1) b = 1;
    if (b > 65535u * 8u) b = 65535u * 8u;
    return (unsigned)b;
}

/* Per-plane launches (ops whose value depends on the channel): grid.y walks
 * the n*c planes, grid.x the hw elements of a plane, so kernels need no
 * 64-bit division per element. Threads per block shrink for small planes. */
static inline int sg_cu_plane_threads(int hw) {
    if (hw >= 256) return 256;
    return hw <= 32 ? 32 : (hw + 31) / 32 * 32;
}
static inline dim3 sg_cu_plane_grid(int hw, size_t planes, int threads) {
    size_t bx = ((size_t)(hw > 0 ? hw : 1) + (size_t)threads - 1) / (size_t)threads;
    if (bx > 4096) bx = 4096;
    size_t by = planes < 1 ? 1 : planes;
    if (by > 65535) by = 65535;
    return dim3((unsigned)bx, (unsigned)by, 1);
}
#define SG_PLANE_LOOP(pl, planes) for (size_t pl = blockIdx.y; pl < (planes); pl += gridDim.y)
#define SG_INPLANE_LOOP(j, hw)                                                             \
    for (int j = blockIdx.x * blockDim.x + threadIdx.x; j < (hw); j += gridDim.x * blockDim.x)

/* Device memory owned by the backend itself (workspace, scratch): accounted
 * in mem_in_use/peak like ops->alloc, with the planned size in the OOM hint. */
void *sg_cuda_raw_alloc(sg_cuda *cu, size_t bytes, const char *what);
void sg_cuda_raw_free(sg_cuda *cu, void *p, size_t bytes);

/* Reads the first `n` doubles of red_result back to the host (syncs compute). */
void sg_cuda_read_result(sg_backend *be, double *out, int n);

/* ---- op entry points, one group per .cu file ---- */
/* cuda_memory.cu */
void *sg_cuda_alloc(sg_backend *be, size_t bytes);
void sg_cuda_free(sg_backend *be, void *p);
void sg_cuda_upload(sg_backend *be, void *dst, const void *src, size_t bytes);
void sg_cuda_download(sg_backend *be, void *dst, const void *src, size_t bytes);
void sg_cuda_copy(sg_backend *be, void *dst, const void *src, size_t bytes);
void sg_cuda_zero(sg_backend *be, void *p, size_t bytes);
void sg_cuda_sync(sg_backend *be);
void *sg_cuda_host_alloc(sg_backend *be, size_t bytes);
void sg_cuda_host_free(sg_backend *be, void *p);
void sg_cuda_upload_async(sg_backend *be, void *dst, const void *src, size_t bytes);
void sg_cuda_upload_wait(sg_backend *be);
void *sg_cuda_stream(sg_backend *be, int which);
void sg_cuda_stream_wait(sg_backend *be, int waiter, int waitee);
void sg_cuda_memory_destroy(sg_cuda *cu);

/* cuda_conv.cu */
void sg_cuda_conv_prepare(sg_backend *be, const sg_conv_desc *d);
void sg_cuda_conv_fwd(sg_backend *be, const sg_conv_desc *d, const float *x, const float *w,
                      float *y);
void sg_cuda_conv_bwd_data(sg_backend *be, const sg_conv_desc *d, const float *dy,
                           const float *w, float *dx, int accumulate);
void sg_cuda_conv_bwd_weight(sg_backend *be, const sg_conv_desc *d, const float *x,
                             const float *dy, float *dw, int accumulate);
void sg_cuda_conv_destroy(sg_cuda *cu);
/* bf16 activation storage (backend.h, the *_dt ops) */
void sg_cuda_conv_fwd_dt(sg_backend *be, const sg_conv_desc *d, const void *x, int x_dt,
                         const float *w, void *y, int y_dt);
void sg_cuda_conv_bwd_weight_dt(sg_backend *be, const sg_conv_desc *d, const void *x, int x_dt,
                                const float *dy, float *dw, int accumulate);
/* dt if it is SG_ACT_F32 or SG_ACT_BF16; else fatal, naming op (a caller's bug). */
int sg_cuda_act_dt(int dt, const char *op);
/* Sets cu->precision / tf32 / conv_math from the options and the device's
 * compute capability; returns 0, or -1 after logging (bf16 on a GPU before
 * sm_80, which has no bf16 tensor cores). */
int sg_cuda_conv_configure(sg_cuda *cu, const sg_backend_opts *opts, int cc_major,
                           int cc_minor);

/* cuda_bn.cu */
void sg_cuda_bias_fwd(sg_backend *be, float *y, const float *b, int n, int c, int hw);
void sg_cuda_bias_bwd(sg_backend *be, const float *dy, float *db, int n, int c, int hw,
                      int accumulate);
void sg_cuda_bn_stats(sg_backend *be, const float *x, int n, int c, int hw, float *stats);
void sg_cuda_bn_finalize(sg_backend *be, const float *parts_stats, const int64_t *counts,
                         int parts, int c, float eps, float momentum, float *mean,
                         float *invstd, float *running_mean, float *running_var);
void sg_cuda_bn_eval_params(sg_backend *be, const float *running_mean,
                            const float *running_var, int c, float eps, float *mean,
                            float *invstd);
void sg_cuda_bn_fwd(sg_backend *be, const float *x, const float *mean, const float *invstd,
                    const float *gamma, const float *beta, float *y, int n, int c, int hw,
                    int relu);
void sg_cuda_bn_bwd_reduce(sg_backend *be, const float *dy, const float *x, const float *y,
                           const float *mean, float *red, int n, int c, int hw, int relu);
void sg_cuda_bn_bwd_elem(sg_backend *be, const float *dy, const float *x, const float *y,
                         const float *mean, const float *invstd, const float *gamma,
                         const float *red, double count, float *dx, int n, int c, int hw,
                         int relu, int accumulate);
void sg_cuda_bn_param_grads(sg_backend *be, const float *red, const float *invstd,
                            float *dgamma, float *dbeta, int c, int accumulate);
void sg_cuda_bn_stats_dt(sg_backend *be, const void *x, int x_dt, int n, int c, int hw,
                         float *stats);
void sg_cuda_bn_fwd_dt(sg_backend *be, const void *x, int x_dt, const float *mean,
                       const float *invstd, const float *gamma, const float *beta, void *y,
                       int y_dt, int n, int c, int hw, int relu);
void sg_cuda_bn_bwd_reduce_dt(sg_backend *be, const float *dy, const void *x, int x_dt,
                              const float *y, const float *mean, const float *invstd,
                              const float *gamma, const float *beta, float *red, int n, int c,
                              int hw, int relu);
void sg_cuda_bn_bwd_elem_dt(sg_backend *be, const float *dy, const void *x, int x_dt,
                            const float *y, const float *mean, const float *invstd,
                            const float *gamma, const float *beta, const float *red,
                            double count, float *dx, int n, int c, int hw, int relu,
                            int accumulate);

/* cuda_elementwise.cu */
void sg_cuda_relu_fwd(sg_backend *be, const float *x, float *y, size_t count);
void sg_cuda_relu_bwd(sg_backend *be, const float *dy, const float *y, float *dx,
                      size_t count, int accumulate);
void sg_cuda_add(sg_backend *be, const float *a, const float *b, float *y, size_t count,
                 int relu);
/* Memory [p, p + bytes) was written by an op (p NULL: any): the bf16 weight
 * copies made from it are stale (cuda_conv.cu; also ops->mem_written). */
void sg_cuda_written(sg_backend *be, const void *p, size_t bytes);
void sg_cuda_scale(sg_backend *be, const float *x, float *y, float alpha, size_t count);
void sg_cuda_axpy(sg_backend *be, float alpha, const float *x, float *y, size_t count);
void sg_cuda_dropout_fwd(sg_backend *be, const float *x, float *y, uint8_t *mask,
                         size_t count, float p, uint64_t key);
void sg_cuda_dropout_bwd(sg_backend *be, const float *dy, const uint8_t *mask, float *dx,
                         size_t count, float p, int accumulate);
void sg_cuda_sgd_step(sg_backend *be, float *param, const float *grad, float *buf,
                      size_t count, float lr, float momentum, float dampening, float wd,
                      int nesterov, int first);
void sg_cuda_normalize_u8(sg_backend *be, const uint8_t *src, float *dst, int n, int h,
                          int w, const float mean[3], const float std[3]);
double sg_cuda_sumsq(sg_backend *be, const float *x, size_t count);

/* cuda_pool.cu */
void sg_cuda_maxpool_fwd(sg_backend *be, const float *x, float *y, int32_t *idx, int n,
                         int c, int h, int w, int oh, int ow);
void sg_cuda_maxpool_bwd(sg_backend *be, const float *dy, const int32_t *idx, float *dx,
                         int n, int c, int h, int w, int oh, int ow);
void sg_cuda_avgpool_fwd(sg_backend *be, const float *x, float *y, int n, int c, int hw);
void sg_cuda_avgpool_bwd(sg_backend *be, const float *dy, float *dx, int n, int c, int hw,
                         int accumulate);
void sg_cuda_concat_fwd(sg_backend *be, const float *src, float *dst, int n, int c_src,
                        int c_dst, int c_off, int hw);
void sg_cuda_concat_bwd(sg_backend *be, const float *dy, float *dsrc, int n, int c_src,
                        int c_dst, int c_off, int hw, int accumulate);

/* cuda_resize.cu */
void sg_cuda_resize_fwd(sg_backend *be, const float *x, float *y, int n, int c, int h, int w,
                        int oh, int ow);
void sg_cuda_resize_bwd(sg_backend *be, const float *dy, float *dx, int n, int c, int h,
                        int w, int oh, int ow, int accumulate);

/* cuda_loss.cu */
void sg_cuda_ce_fwd_bwd(sg_backend *be, const float *logits, const uint8_t *labels, int n,
                        int c, int hw, int ignore, float grad_scale, float *dlogits,
                        double *loss_sum, int64_t *valid);
void sg_cuda_ce_weighted(sg_backend *be, const float *logits, const uint8_t *labels, int n,
                         int c, int hw, int ignore, const float *class_w, const float *sel_key,
                         float sel_below, float grad_scale, float *dlogits, double *loss_sum,
                         double *weight_sum);
void sg_cuda_ce_label_prob(sg_backend *be, const float *logits, const uint8_t *labels, int n,
                           int c, int hw, int ignore, float *prob);
float sg_cuda_kth_smallest(sg_backend *be, const float *x, size_t count, size_t k);
void sg_cuda_argmax(sg_backend *be, const float *logits, uint8_t *pred, int n, int c, int hw);
void sg_cuda_confusion(sg_backend *be, const uint8_t *pred, const uint8_t *labels,
                       size_t count, int c, int64_t *conf);

/* cuda_tta.cu */
void sg_cuda_flip_w(sg_backend *be, const float *x, float *y, int n, int c, int h, int w);
void sg_cuda_softmax_fwd(sg_backend *be, const float *x, float *y, int n, int c, int hw,
                         int accumulate);

/* Device-side block reductions: cuda_reduce.cuh. */

#endif
