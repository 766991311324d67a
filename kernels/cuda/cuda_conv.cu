/* kernels/cuda/cuda_conv.cu - convolutions through cuDNN 9 (legacy API).
 *
 * Owns the per-shape cache: for each geometry seen (sg_conv_desc), the tensor,
 * filter and convolution descriptors and one algorithm each for forward,
 * backward-data and backward-filter, chosen once:
 *   - cudnn_benchmark: measured (cudnnFind*, fastest first; heuristics, with
 *     a warning, if the timing itself cannot get device memory);
 *   - otherwise: cuDNN's heuristics (cudnnGet*_v7, best first);
 *   - cudnn_deterministic: only algorithms cuDNN reports as deterministic.
 * FP32 only, without TF32 tensor-core math (CUDNN_FMA_MATH), so results match
 * the CPU backend and the reference to float rounding.
 * The shared workspace grows to the largest chosen algorithm's need when a
 * geometry is first seen (conv_prepare or first use), never in steady state.
 * Accumulation (accumulate=1) is cuDNN's beta = 1.
 */
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "kernels/cuda/cuda_internal.h"

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

static int usable(cudnnStatus_t status, cudnnDeterminism_t det, cudnnMathType_t math,
                  size_t memory, size_t limit, int deterministic) {
    if (status != CUDNN_STATUS_SUCCESS) return 0;
    if (deterministic && det != CUDNN_DETERMINISTIC) return 0;
    /* TF32 tensor-core math would change results vs the CPU backend */
    if (math == CUDNN_TENSOR_OP_MATH || math == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION) return 0;
    return memory <= limit;
}

/* Result of a cudnnFind* call: 1 = measured; 0 = the search itself ran out of
 * device memory (it allocates its own buffers), so fall back to heuristics
 * with a warning; any other failure is fatal. */
#define find_ok(call, what) find_ok_at((call), #call, what, __FILE__, __LINE__)
static int find_ok_at(cudnnStatus_t s, const char *call, const char *what, const char *file,
                      int line) {
    if (s == CUDNN_STATUS_SUCCESS) return 1;
    if (s == CUDNN_STATUS_ALLOC_FAILED) {
        (void)cudaGetLastError();
        SG_WARN("cuDNN could not allocate memory to time %s convolution algorithms; using its "
                "heuristics for this layer shape instead",
                what);
        return 0;
    }
    sg_cuda_fail(call, file, line, "cudnnStatus", cudnnGetErrorString(s), sg_cudnn_hint(s));
}

static void choose_fwd(sg_cuda *cu, sg_cuda_conv *e, size_t limit) {
    cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
    int got = 0;
    int measured = cu->benchmark &&
        find_ok(cudnnFindConvolutionForwardAlgorithm(cu->cudnn, e->x_desc, e->w_desc,
                                                     e->conv_desc, e->y_desc,
                                                     CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &got,
                                                     perf),
                "forward");
    if (!measured)
        CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithm_v7(cu->cudnn, e->x_desc, e->w_desc,
                                                           e->conv_desc, e->y_desc,
                                                           CUDNN_CONVOLUTION_FWD_ALGO_COUNT,
                                                           &got, perf));
    for (int i = 0; i < got; i++) {
        if (!usable(perf[i].status, perf[i].determinism, perf[i].mathType, perf[i].memory,
                    limit, cu->deterministic))
            continue;
        e->fwd_algo = perf[i].algo;
        CUDNN_CHECK(cudnnGetConvolutionForwardWorkspaceSize(cu->cudnn, e->x_desc, e->w_desc,
                                                            e->conv_desc, e->y_desc,
                                                            e->fwd_algo, &e->fwd_ws));
        return;
    }
    SG_WARN("cuDNN offered no usable forward algorithm for this convolution; using "
            "IMPLICIT_GEMM (deterministic, no workspace)");
    e->fwd_algo = CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM;
    CUDNN_CHECK(cudnnGetConvolutionForwardWorkspaceSize(cu->cudnn, e->x_desc, e->w_desc,
                                                        e->conv_desc, e->y_desc, e->fwd_algo,
                                                        &e->fwd_ws));
}

static void choose_bwd_data(sg_cuda *cu, sg_cuda_conv *e, size_t limit) {
    cudnnConvolutionBwdDataAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
    int got = 0;
    int measured = cu->benchmark &&
        find_ok(cudnnFindConvolutionBackwardDataAlgorithm(
                    cu->cudnn, e->w_desc, e->y_desc, e->conv_desc, e->x_desc,
                    CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &got, perf),
                "backward-data");
    if (!measured)
        CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithm_v7(
            cu->cudnn, e->w_desc, e->y_desc, e->conv_desc, e->x_desc,
            CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &got, perf));
    for (int i = 0; i < got; i++) {
        if (!usable(perf[i].status, perf[i].determinism, perf[i].mathType, perf[i].memory,
                    limit, cu->deterministic))
            continue;
        e->bwd_data_algo = perf[i].algo;
        CUDNN_CHECK(cudnnGetConvolutionBackwardDataWorkspaceSize(
            cu->cudnn, e->w_desc, e->y_desc, e->conv_desc, e->x_desc, e->bwd_data_algo,
            &e->bwd_data_ws));
        return;
    }
    SG_WARN("cuDNN offered no usable backward-data algorithm for this convolution; using "
            "ALGO_1 (deterministic)");
    e->bwd_data_algo = CUDNN_CONVOLUTION_BWD_DATA_ALGO_1;
    CUDNN_CHECK(cudnnGetConvolutionBackwardDataWorkspaceSize(cu->cudnn, e->w_desc, e->y_desc,
                                                             e->conv_desc, e->x_desc,
                                                             e->bwd_data_algo,
                                                             &e->bwd_data_ws));
}

static void choose_bwd_filter(sg_cuda *cu, sg_cuda_conv *e, size_t limit) {
    cudnnConvolutionBwdFilterAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
    int got = 0;
    int measured = cu->benchmark &&
        find_ok(cudnnFindConvolutionBackwardFilterAlgorithm(
                    cu->cudnn, e->x_desc, e->y_desc, e->conv_desc, e->w_desc,
                    CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &got, perf),
                "backward-filter");
    if (!measured)
        CUDNN_CHECK(cudnnGetConvolutionBackwardFilterAlgorithm_v7(
            cu->cudnn, e->x_desc, e->y_desc, e->conv_desc, e->w_desc,
            CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &got, perf));
    for (int i = 0; i < got; i++) {
        if (!usable(perf[i].status, perf[i].determinism, perf[i].mathType, perf[i].memory,
                    limit, cu->deterministic))
            continue;
        e->bwd_filter_algo = perf[i].algo;
        CUDNN_CHECK(cudnnGetConvolutionBackwardFilterWorkspaceSize(
            cu->cudnn, e->x_desc, e->y_desc, e->conv_desc, e->w_desc, e->bwd_filter_algo,
            &e->bwd_filter_ws));
        return;
    }
    SG_WARN("cuDNN offered no usable backward-filter algorithm for this convolution; "
            "using ALGO_1 (deterministic)");
    e->bwd_filter_algo = CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1;
    CUDNN_CHECK(cudnnGetConvolutionBackwardFilterWorkspaceSize(
        cu->cudnn, e->x_desc, e->y_desc, e->conv_desc, e->w_desc, e->bwd_filter_algo,
        &e->bwd_filter_ws));
}

static void grow_workspace(sg_cuda *cu, size_t need) {
    if (need <= cu->workspace_bytes) return;
    /* ops in flight may still use the old workspace */
    CU_CHECK(cudaStreamSynchronize(cu->streams[SG_STREAM_COMPUTE]));
    sg_cuda_raw_free(cu, cu->workspace, cu->workspace_bytes);
    cu->workspace = NULL;
    cu->workspace_bytes = 0;
    cu->workspace = sg_cuda_raw_alloc(cu, need, "the cuDNN convolution workspace");
    cu->workspace_bytes = need;
}

static sg_cuda_conv *get_conv(sg_backend *be, const sg_conv_desc *d) {
    sg_cuda *cu = sg_cu(be);
    for (int i = 0; i < cu->n_convs; i++)
        if (memcmp(&cu->convs[i].key, d, sizeof *d) == 0) return &cu->convs[i];

    SG_CHECK(d->n > 0 && d->c > 0 && d->h > 0 && d->w > 0 && d->k > 0 && d->r > 0 && d->s > 0 &&
                 d->stride_h > 0 && d->stride_w > 0 && d->dil_h > 0 && d->dil_w > 0 &&
                 d->pad_h >= 0 && d->pad_w >= 0,
             "CUDA backend: invalid convolution geometry n=%d c=%d h=%d w=%d k=%d r=%d s=%d "
             "stride=%d,%d pad=%d,%d dil=%d,%d",
             d->n, d->c, d->h, d->w, d->k, d->r, d->s, d->stride_h, d->stride_w, d->pad_h,
             d->pad_w, d->dil_h, d->dil_w);
    if (cu->n_convs == cu->cap_convs) {
        int cap = cu->cap_convs ? cu->cap_convs * 2 : 32;
        sg_cuda_conv *nc = (sg_cuda_conv *)realloc(cu->convs, (size_t)cap * sizeof *nc);
        SG_CHECK(nc, "CUDA backend: out of host memory for the convolution cache");
        cu->convs = nc;
        cu->cap_convs = cap;
    }
    sg_cuda_conv *e = &cu->convs[cu->n_convs];
    memset(e, 0, sizeof *e);
    e->key = *d;
    CUDNN_CHECK(cudnnCreateTensorDescriptor(&e->x_desc));
    CUDNN_CHECK(cudnnCreateTensorDescriptor(&e->y_desc));
    CUDNN_CHECK(cudnnCreateFilterDescriptor(&e->w_desc));
    CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&e->conv_desc));
    CUDNN_CHECK(cudnnSetTensor4dDescriptor(e->x_desc, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, d->n,
                                           d->c, d->h, d->w));
    CUDNN_CHECK(cudnnSetFilter4dDescriptor(e->w_desc, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, d->k,
                                           d->c, d->r, d->s));
    CUDNN_CHECK(cudnnSetConvolution2dDescriptor(e->conv_desc, d->pad_h, d->pad_w, d->stride_h,
                                                d->stride_w, d->dil_h, d->dil_w,
                                                CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
    CUDNN_CHECK(cudnnSetConvolutionMathType(e->conv_desc, CUDNN_FMA_MATH));
    int on, oc, ooh, oow;
    CUDNN_CHECK(cudnnGetConvolution2dForwardOutputDim(e->conv_desc, e->x_desc, e->w_desc, &on,
                                                      &oc, &ooh, &oow));
    SG_CHECK(on == d->n && oc == d->k && ooh == d->oh && oow == d->ow,
             "CUDA backend: convolution output %dx%d in the descriptor, cuDNN computes "
             "%dx%d: fill oh/ow with sg_conv_desc_init",
             d->oh, d->ow, ooh, oow);
    CUDNN_CHECK(cudnnSetTensor4dDescriptor(e->y_desc, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, d->n,
                                           d->k, d->oh, d->ow));
    size_t limit = workspace_limit();
    choose_fwd(cu, e, limit);
    choose_bwd_data(cu, e, limit);
    choose_bwd_filter(cu, e, limit);
    size_t need = e->fwd_ws;
    if (e->bwd_data_ws > need) need = e->bwd_data_ws;
    if (e->bwd_filter_ws > need) need = e->bwd_filter_ws;
    grow_workspace(cu, need);
    cu->n_convs++;
    SG_DEBUG("cuDNN conv n%d c%d %dx%d k%d %dx%d s%d p%d d%d: algos fwd %d bwd-data %d "
             "bwd-filter %d, workspace %zu/%zu/%zu bytes",
             d->n, d->c, d->h, d->w, d->k, d->r, d->s, d->stride_h, d->pad_h, d->dil_h,
             (int)e->fwd_algo, (int)e->bwd_data_algo, (int)e->bwd_filter_algo, e->fwd_ws,
             e->bwd_data_ws, e->bwd_filter_ws);
    return e;
}

void sg_cuda_conv_prepare(sg_backend *be, const sg_conv_desc *d) { (void)get_conv(be, d); }

void sg_cuda_conv_fwd(sg_backend *be, const sg_conv_desc *d, const float *x, const float *w,
                      float *y) {
    sg_cuda *cu = sg_cu(be);
    sg_cuda_conv *e = get_conv(be, d);
    const float alpha = 1.0f, beta = 0.0f;
    CUDNN_CHECK(cudnnConvolutionForward(cu->cudnn, &alpha, e->x_desc, x, e->w_desc, w,
                                        e->conv_desc, e->fwd_algo, cu->workspace, e->fwd_ws,
                                        &beta, e->y_desc, y));
}

void sg_cuda_conv_bwd_data(sg_backend *be, const sg_conv_desc *d, const float *dy,
                           const float *w, float *dx, int accumulate) {
    sg_cuda *cu = sg_cu(be);
    sg_cuda_conv *e = get_conv(be, d);
    const float alpha = 1.0f, beta = accumulate ? 1.0f : 0.0f;
    CUDNN_CHECK(cudnnConvolutionBackwardData(cu->cudnn, &alpha, e->w_desc, w, e->y_desc, dy,
                                             e->conv_desc, e->bwd_data_algo, cu->workspace,
                                             e->bwd_data_ws, &beta, e->x_desc, dx));
}

void sg_cuda_conv_bwd_weight(sg_backend *be, const sg_conv_desc *d, const float *x,
                             const float *dy, float *dw, int accumulate) {
    sg_cuda *cu = sg_cu(be);
    sg_cuda_conv *e = get_conv(be, d);
    const float alpha = 1.0f, beta = accumulate ? 1.0f : 0.0f;
    CUDNN_CHECK(cudnnConvolutionBackwardFilter(cu->cudnn, &alpha, e->x_desc, x, e->y_desc, dy,
                                               e->conv_desc, e->bwd_filter_algo,
                                               cu->workspace, e->bwd_filter_ws, &beta,
                                               e->w_desc, dw));
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
}
