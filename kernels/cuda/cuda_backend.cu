/* kernels/cuda/cuda_backend.cu - the CUDA backend: creation, device
 * selection, info, the op table, and the error reporting all its files share.
 *
 * Owns sg_cuda_backend_create / sg_cuda_device_count (called from
 * kernels/backend.c) and the lifetime of the impl struct (sg_cuda,
 * cuda_internal.h). The ops themselves live in one .cu file per group.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "kernels/cuda/cuda_internal.h"
#include "kernels/weight_cache.h"

extern "C" void sg_cuda_fail(const char *call, const char *file, int line, const char *err_name,
                             const char *err_str, const char *hint) {
    sg_fatal_at(file, line, "CUDA backend: %s failed: %s (%s)%s%s", call, err_name, err_str,
                (hint && *hint) ? "; " : "", hint ? hint : "");
}

extern "C" const char *sg_cuda_hint(cudaError_t e) {
    switch (e) {
    case cudaErrorMemoryAllocation:
        return "out of device memory: lower batch_size or the crop size, or check with "
               "nvidia-smi for other processes on this GPU";
    case cudaErrorNoDevice:
        return "no CUDA device visible: check nvidia-smi / CUDA_VISIBLE_DEVICES, or use "
               "device: cpu";
    case cudaErrorInsufficientDriver:
        return "the NVIDIA driver is too old for this CUDA 13 build: update the driver "
               "(nvidia-smi shows its version), or use device: cpu";
    case cudaErrorInvalidDevice:
        return "no such device index: check CUDA_VISIBLE_DEVICES, LOCAL_RANK and the "
               "device: cuda:N setting against nvidia-smi";
    case cudaErrorNoKernelImageForDevice:
    case cudaErrorUnsupportedPtxVersion:
        return "this binary has no code for this GPU: rebuild with -Dgpu_arch=<your SM, "
               "e.g. 90> (nvidia-smi --query-gpu=compute_cap --format=csv)";
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchFailure:
        return "a kernel faulted (this or an earlier asynchronous op): rerun with "
               "CUDA_LAUNCH_BLOCKING=1 to find the op, and report it";
    default:
        return "";
    }
}

extern "C" const char *sg_cudnn_hint(cudnnStatus_t s) {
    switch (s) {
    case CUDNN_STATUS_NOT_INITIALIZED:
        return "cuDNN could not start: check that libcudnn 9 matches the driver and that "
               "a GPU is visible (nvidia-smi)";
    case CUDNN_STATUS_ALLOC_FAILED:
        return "cuDNN ran out of memory: lower batch_size or the crop size";
    case CUDNN_STATUS_BAD_PARAM:
    case CUDNN_STATUS_NOT_SUPPORTED:
        return "cuDNN rejected this convolution geometry: report the layer shape";
    default:
        return "";
    }
}

extern "C" int sg_cuda_device_count(void) {
    int n = 0;
    /* No driver / no device: zero devices (the caller reports what it needs). */
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    return n;
}

/* The bf16 weight copies' memory (counted in mem_in_use like the workspace). */
static void *wcache_alloc(void *ctx, size_t bytes) {
    return sg_cuda_raw_alloc((sg_cuda *)ctx, bytes, "a bf16 weight copy (train.precision bf16)");
}
static void wcache_free(void *ctx, void *p, size_t bytes) {
    sg_cuda_raw_free((sg_cuda *)ctx, p, bytes);
}

static void cuda_destroy(sg_backend *be) {
    sg_cuda *cu = sg_cu(be);
    CU_CHECK(cudaSetDevice(cu->device));
    for (int i = 0; i < SG_CUDA_NSTREAMS; i++) CU_CHECK(cudaStreamSynchronize(cu->streams[i]));
    sg_cuda_conv_destroy(cu);
    sg_wcache_destroy(cu->wcache);
    CUDNN_CHECK(cudnnDestroy(cu->cudnn));
    sg_cuda_memory_destroy(cu);
    CU_CHECK(cudaEventDestroy(cu->upload_event));
    for (int i = 0; i < SG_CUDA_NSTREAMS; i++) {
        CU_CHECK(cudaEventDestroy(cu->events[i]));
        CU_CHECK(cudaStreamDestroy(cu->streams[i]));
    }
    free(cu);
    free(be);
}

static void cuda_get_info(sg_backend *be, sg_backend_info *info) {
    sg_cuda *cu = sg_cu(be);
    snprintf(info->name, sizeof info->name, "%s", cu->name);
    snprintf(info->device, sizeof info->device, "%s", cu->device_name);
    info->threads = 0;
    info->mem_in_use = cu->mem_in_use;
    info->mem_peak = cu->mem_peak;
    snprintf(info->precision, sizeof info->precision, "%s",
             cu->precision == SG_PRECISION_BF16 ? "bf16" : "fp32");
    snprintf(info->conv_math, sizeof info->conv_math, "%s", cu->conv_math);
    /* free / total of the device (other processes' use included); a failure
     * leaves them 0 = unknown rather than ending the run over a report */
    size_t free_b = 0, total_b = 0;
    info->mem_total = info->mem_available = 0;
    if (cudaSetDevice(cu->device) == cudaSuccess && cudaMemGetInfo(&free_b, &total_b) == cudaSuccess) {
        info->mem_total = total_b;
        info->mem_available = free_b;
    } else {
        (void)cudaGetLastError();
    }
}

/* Makes the backend's device current on the calling thread. */
static void cuda_bind_thread(sg_backend *be) { SG_CU_ENTER(sg_cu(be)); }

/* The op table, filled by field name (C++17 has no designated initializers;
 * sg_backend_create checks that no op is left NULL). */
static sg_ops cuda_ops;

static void fill_ops(sg_ops *o) {
    o->name = "cuda";
    o->destroy = cuda_destroy;
    o->get_info = cuda_get_info;
    /* memory (cuda_memory.cu) */
    o->alloc = sg_cuda_alloc;
    o->free = sg_cuda_free;
    o->upload = sg_cuda_upload;
    o->download = sg_cuda_download;
    o->copy = sg_cuda_copy;
    o->zero = sg_cuda_zero;
    o->sync = sg_cuda_sync;
    o->host_alloc = sg_cuda_host_alloc;
    o->host_free = sg_cuda_host_free;
    /* convolution (cuda_conv.cu), bias and batch norm (cuda_bn.cu) */
    o->conv_prepare = sg_cuda_conv_prepare;
    o->conv_fwd = sg_cuda_conv_fwd;
    o->conv_bwd_data = sg_cuda_conv_bwd_data;
    o->conv_bwd_weight = sg_cuda_conv_bwd_weight;
    o->bias_fwd = sg_cuda_bias_fwd;
    o->bias_bwd = sg_cuda_bias_bwd;
    o->bn_stats = sg_cuda_bn_stats;
    o->bn_finalize = sg_cuda_bn_finalize;
    o->bn_eval_params = sg_cuda_bn_eval_params;
    o->bn_fwd = sg_cuda_bn_fwd;
    o->bn_bwd_reduce = sg_cuda_bn_bwd_reduce;
    o->bn_bwd_elem = sg_cuda_bn_bwd_elem;
    o->bn_param_grads = sg_cuda_bn_param_grads;
    /* elementwise (cuda_elementwise.cu) */
    o->relu_fwd = sg_cuda_relu_fwd;
    o->relu_bwd = sg_cuda_relu_bwd;
    o->add = sg_cuda_add;
    o->scale = sg_cuda_scale;
    o->axpy = sg_cuda_axpy;
    /* pooling, concat (cuda_pool.cu), resize (cuda_resize.cu) */
    o->maxpool_fwd = sg_cuda_maxpool_fwd;
    o->maxpool_bwd = sg_cuda_maxpool_bwd;
    o->avgpool_fwd = sg_cuda_avgpool_fwd;
    o->avgpool_bwd = sg_cuda_avgpool_bwd;
    o->resize_fwd = sg_cuda_resize_fwd;
    o->resize_bwd = sg_cuda_resize_bwd;
    o->concat_fwd = sg_cuda_concat_fwd;
    o->concat_bwd = sg_cuda_concat_bwd;
    /* dropout, SGD, input, sumsq (cuda_elementwise.cu) */
    o->dropout_fwd = sg_cuda_dropout_fwd;
    o->dropout_bwd = sg_cuda_dropout_bwd;
    o->sgd_step = sg_cuda_sgd_step;
    o->normalize_u8 = sg_cuda_normalize_u8;
    o->sumsq = sg_cuda_sumsq;
    /* loss and metrics (cuda_loss.cu) */
    o->ce_fwd_bwd = sg_cuda_ce_fwd_bwd;
    o->argmax = sg_cuda_argmax;
    o->confusion = sg_cuda_confusion;
    o->ce_weighted = sg_cuda_ce_weighted;
    o->ce_label_prob = sg_cuda_ce_label_prob;
    o->kth_smallest = sg_cuda_kth_smallest;
    /* test-time augmentation (cuda_tta.cu) */
    o->flip_w = sg_cuda_flip_w;
    o->softmax_fwd = sg_cuda_softmax_fwd;
    /* streams (cuda_memory.cu), threads */
    o->upload_async = sg_cuda_upload_async;
    o->upload_wait = sg_cuda_upload_wait;
    o->stream = sg_cuda_stream;
    o->stream_wait = sg_cuda_stream_wait;
    o->bind_thread = cuda_bind_thread;
    o->mem_written = sg_cuda_written;
    o->conv_fwd_dt = sg_cuda_conv_fwd_dt;
    o->conv_bwd_weight_dt = sg_cuda_conv_bwd_weight_dt;
    o->bn_stats_dt = sg_cuda_bn_stats_dt;
    o->bn_fwd_dt = sg_cuda_bn_fwd_dt;
    o->bn_bwd_reduce_dt = sg_cuda_bn_bwd_reduce_dt;
    o->bn_bwd_elem_dt = sg_cuda_bn_bwd_elem_dt;
}

static pthread_once_t cuda_ops_once = PTHREAD_ONCE_INIT;
static void fill_cuda_ops(void) { fill_ops(&cuda_ops); }

/* Picks the device, reporting the reason (no driver, too old, no device,
 * index out of range) in words; returns 0 or -1. */
static int select_device(int device) {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e == cudaErrorInsufficientDriver || e == cudaErrorNoDevice) {
        /* tell "no driver at all" from "driver older than this runtime" */
        int drv = 0, rt = 0;
        (void)cudaDriverGetVersion(&drv);
        (void)cudaRuntimeGetVersion(&rt);
        (void)cudaGetLastError();
        if (drv == 0)
            SG_ERROR("device cuda:%d: no NVIDIA driver found (libcuda.so.1 cannot be loaded): %s",
                     device, sg_cuda_hint(cudaErrorNoDevice));
        else if (e == cudaErrorInsufficientDriver)
            SG_ERROR("device cuda:%d: the NVIDIA driver supports CUDA %d.%d, this build needs "
                     "%d.%d: update the driver, or use device: cpu",
                     device, drv / 1000, (drv % 1000) / 10, rt / 1000, (rt % 1000) / 10);
        else
            SG_ERROR("device cuda:%d: %s", device, sg_cuda_hint(cudaErrorNoDevice));
        return -1;
    }
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        SG_ERROR("device cuda:%d: cudaGetDeviceCount failed: %s (%s); %s", device,
                 cudaGetErrorName(e), cudaGetErrorString(e),
                 *sg_cuda_hint(e) ? sg_cuda_hint(e)
                                  : "check the NVIDIA driver with nvidia-smi, or use device: cpu");
        return -1;
    }
    if (n == 0) {
        SG_ERROR("device cuda:%d: %s", device, sg_cuda_hint(cudaErrorNoDevice));
        return -1;
    }
    if (device < 0 || device >= n) {
        SG_ERROR("device cuda:%d: only %d CUDA device(s) visible (cuda:0..cuda:%d); %s", device,
                 n, n - 1, sg_cuda_hint(cudaErrorInvalidDevice));
        return -1;
    }
    e = cudaSetDevice(device);
    if (e == cudaSuccess) e = cudaFree(0); /* creates the context: driver problems show here */
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        SG_ERROR("device cuda:%d: cannot start a CUDA context: %s (%s)%s%s", device,
                 cudaGetErrorName(e), cudaGetErrorString(e), *sg_cuda_hint(e) ? "; " : "",
                 sg_cuda_hint(e));
        return -1;
    }
    return 0;
}

extern "C" sg_backend *sg_cuda_backend_create(int device, const sg_backend_opts *opts) {
    if (select_device(device) != 0) return NULL;
    cudaDeviceProp prop;
    CU_CHECK(cudaGetDeviceProperties(&prop, device));
    if (prop.major < 7) {
        SG_ERROR("device cuda:%d (%s): compute capability %d.%d is too old for this build "
                 "(needs 7.0+, built for the gpu_arch meson option); use device: cpu",
                 device, prop.name, prop.major, prop.minor);
        return NULL;
    }
    sg_cuda *cu = (sg_cuda *)calloc(1, sizeof *cu);
    sg_backend *be = (sg_backend *)calloc(1, sizeof *be);
    SG_CHECK(cu && be, "CUDA backend: out of host memory creating the backend");
    cu->device = device;
    snprintf(cu->name, sizeof cu->name, "cuda:%d", device);
    snprintf(cu->device_name, sizeof cu->device_name, "%.80s (sm_%d%d, %.1f GiB, cuDNN %zu)",
             prop.name, prop.major, prop.minor, (double)prop.totalGlobalMem / (1 << 30),
             (size_t)cudnnGetVersion());
    cu->sm_count = prop.multiProcessorCount;
    cu->benchmark = opts ? opts->cudnn_benchmark : 1;
    cu->deterministic = opts ? opts->cudnn_deterministic : 0;
    if (sg_cuda_conv_configure(cu, opts, prop.major, prop.minor) != 0) {
        free(cu);
        free(be);
        return NULL;
    }
    if (cu->precision == SG_PRECISION_BF16) {
        cu->wcache = sg_wcache_create(wcache_alloc, wcache_free, cu);
        if (!cu->wcache) { /* SG_WEIGHT_CACHE malformed (logged) */
            free(cu);
            free(be);
            return NULL;
        }
    }

    for (int i = 0; i < SG_CUDA_NSTREAMS; i++) {
        CU_CHECK(cudaStreamCreateWithFlags(&cu->streams[i], cudaStreamNonBlocking));
        CU_CHECK(cudaEventCreateWithFlags(&cu->events[i], cudaEventDisableTiming));
    }
    CU_CHECK(cudaEventCreateWithFlags(&cu->upload_event, cudaEventDisableTiming));
    CUDNN_CHECK(cudnnCreate(&cu->cudnn));
    CUDNN_CHECK(cudnnSetStream(cu->cudnn, cu->streams[SG_STREAM_COMPUTE]));

    cu->red_partial = (double *)sg_cuda_raw_alloc(cu, 2 * SG_CUDA_RED_BLOCKS * sizeof(double),
                                                  "reduction scratch");
    cu->red_result = (double *)sg_cuda_raw_alloc(cu, 4 * sizeof(double), "reduction result");
    cu->chan_partial = (double *)sg_cuda_raw_alloc(
        cu, (size_t)SG_CUDA_CHAN_SLOTS * 3 * sizeof(double), "per-channel reduction scratch");
    CU_CHECK(cudaMallocHost((void **)&cu->red_host, 4 * sizeof(double)));

    SG_CHECK(pthread_once(&cuda_ops_once, fill_cuda_ops) == 0,
             "CUDA backend: pthread_once failed filling the op table");
    be->ops = &cuda_ops;
    be->impl = cu;
    be->caps = SG_CAP_ASYNC_STREAMS | SG_CAP_DEVICE_COLLECTIVES;
    be->device_index = device;
    SG_INFO("CUDA backend on cuda:%d: %s; cudnn benchmark=%d deterministic=%d; convolutions %s",
            device, cu->device_name, cu->benchmark, cu->deterministic, cu->conv_math);
    return be;
}
