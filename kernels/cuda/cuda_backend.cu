/* kernels/cuda/cuda_backend.cu - the CUDA backend: creation, device
 * selection, destroy, get_info and the assembly of the op table.
 *
 * Owns sg_cuda_backend_create / sg_cuda_device_count (called from
 * kernels/backend.c) and the lifetime of the impl struct (sg_cuda,
 * cuda_internal.h). The ops live in one .cu file per op group, each filling
 * its part of the table (sg_cuda_fill_*_ops; the table of groups is in
 * cuda_internal.h); this file only calls them, none calls back into it
 * (error reporting is cuda_check.cu).
 */
#include <nccl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "kernels/cuda/cuda_internal.h"
#include "kernels/weight_cache.h"

extern "C" int sg_cuda_device_count(void) {
    int n = 0;
    /* No driver / no device: zero devices (the caller reports what it needs). */
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    return n;
}

/* Library versions in use and built against (sg_backend_cuda_versions):
 * cudnnGetVersion, ncclGetVersion and cudaRuntimeGetVersion run on the host,
 * GPU or not; the driver's version is 0 without one. */
extern "C" void sg_cuda_versions(char *buf, size_t len) {
    int nccl_rt = 0, cudart_rt = 0, driver = 0;
    if (ncclGetVersion(&nccl_rt) != ncclSuccess) nccl_rt = -1;
    if (cudaRuntimeGetVersion(&cudart_rt) != cudaSuccess) cudart_rt = -1;
    if (cudaDriverGetVersion(&driver) != cudaSuccess) driver = 0;
    (void)cudaGetLastError();
    snprintf(buf, len,
             "cudnn %zu (built with %d), nccl %d (built with %d), cudart %d (built with %d), "
             "driver %d",
             (size_t)cudnnGetVersion(), (int)CUDNN_VERSION, nccl_rt, (int)NCCL_VERSION_CODE,
             cudart_rt, (int)CUDART_VERSION, driver);
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
    sg_conv_plans_destroy(cu->plans);
    sg_cuda_act_buf_free(cu);
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
    sg_conv_plans_stats ps;
    sg_conv_plans_get_stats(cu->plans, &ps);
    info->conv_plan_hits = ps.hits;
    info->conv_plan_misses = ps.misses;
    info->conv_plan_loaded = ps.loaded;
    info->act_transposes = cu->act_transposes;
    info->convert_bytes = cu->convert_bytes;
    info->graph_captures = cu->graph_captures;
    info->graph_launches = cu->graph_launches;
    /* free / total of the device (other processes' use included); a failure
     * leaves them 0 = unknown rather than ending the run over a report */
    size_t free_b = 0, total_b = 0;
    info->mem_total = info->mem_available = 0;
    if (cudaSetDevice(cu->device) == cudaSuccess &&
        cudaMemGetInfo(&free_b, &total_b) == cudaSuccess) {
        info->mem_total = total_b;
        info->mem_available = free_b;
    } else {
        (void)cudaGetLastError();
    }
}

/* The op table: each op group's file fills its part (the table in
 * cuda_internal.h); sg_backend_create checks that no op is left NULL. */
static sg_ops cuda_ops;

static void fill_ops(sg_ops *o) {
    o->name = "cuda";
    o->destroy = cuda_destroy;
    o->get_info = cuda_get_info;
    sg_cuda_fill_memory_ops(o);
    sg_cuda_fill_conv_ops(o);
    sg_cuda_fill_conv_bias_ops(o);
    sg_cuda_fill_bn_ops(o);
    sg_cuda_fill_elem_ops(o);
    sg_cuda_fill_gate_ops(o);
    sg_cuda_fill_pool_ops(o);
    sg_cuda_fill_loss_ops(o);
    sg_cuda_fill_tta_ops(o);
    sg_cuda_fill_act_bf16_ops(o);
    sg_cuda_fill_graph_ops(o);
    sg_cuda_fill_optim_ops(o);
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
        else SG_ERROR("device cuda:%d: %s", device, sg_cuda_hint(cudaErrorNoDevice));
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
        SG_ERROR("device cuda:%d: only %d CUDA device(s) visible (cuda:0..cuda:%d); %s", device, n,
                 n - 1, sg_cuda_hint(cudaErrorInvalidDevice));
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
    int layout = opts ? opts->layout : SG_LAYOUT_NCHW;
    if (layout != SG_LAYOUT_NCHW && layout != SG_LAYOUT_NHWC) {
        SG_ERROR("device cuda:%d: activation layout %d is neither SG_LAYOUT_NCHW nor "
                 "SG_LAYOUT_NHWC (a bug in the caller)",
                 device, layout);
        return NULL;
    }
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
    /* weight copies: bf16 KRSC under bf16 convolutions, float32 KRSC under
     * fp32 ones with NHWC activations (cuDNN's NHWC filter layout) */
    if (cu->precision == SG_PRECISION_BF16 || layout == SG_LAYOUT_NHWC) {
        cu->wcache = sg_wcache_create(wcache_alloc, wcache_free, cu);
        if (!cu->wcache) { /* SG_WEIGHT_CACHE malformed (logged) */
            free(cu);
            free(be);
            return NULL;
        }
    }

    /* keyed by the GPU's name and cuDNN's version: a file written on
     * another GPU model or cuDNN is ignored with a warning */
    cu->plans = sg_conv_plans_create(prop.name, (uint64_t)cudnnGetVersion());
    if (opts && opts->conv_plan_file && *opts->conv_plan_file) {
        snprintf(cu->plan_file, sizeof cu->plan_file, "%s", opts->conv_plan_file);
        if (sg_conv_plans_load(cu->plans, cu->plan_file, NULL, 0) == SG_PLANS_LOADED) {
            sg_conv_plans_stats ps;
            sg_conv_plans_get_stats(cu->plans, &ps);
            SG_INFO("cuDNN convolution plans: %ld read from %s", ps.loaded, cu->plan_file);
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
    /* the step key dropout_fwd reads (cuda_graph.cu), 0 until set_step_key;
     * raw_alloc memory is not zeroed. Zeroed on the compute stream, where
     * set_step_key writes it: cudaMemset would queue it on the legacy
     * stream, which the non-blocking streams do not wait for, so the zero
     * could land after the first key */
    cu->step_key_dev = (uint64_t *)sg_cuda_raw_alloc(cu, sizeof(uint64_t), "the step key");
    CU_CHECK(
        cudaMemsetAsync(cu->step_key_dev, 0, sizeof(uint64_t), cu->streams[SG_STREAM_COMPUTE]));

    SG_CHECK(pthread_once(&cuda_ops_once, fill_cuda_ops) == 0,
             "CUDA backend: pthread_once failed filling the op table");
    be->ops = &cuda_ops;
    be->impl = cu;
    be->caps = SG_CAP_ASYNC_STREAMS | SG_CAP_DEVICE_COLLECTIVES | SG_CAP_GRAPHS;
    be->device_index = device;
    be->layout = layout;
    SG_INFO("CUDA backend on cuda:%d: %s; cudnn benchmark=%d deterministic=%d; convolutions %s; "
            "activations %s",
            device, cu->device_name, cu->benchmark, cu->deterministic, cu->conv_math,
            layout == SG_LAYOUT_NHWC ? "NHWC" : "NCHW");
    return be;
}
