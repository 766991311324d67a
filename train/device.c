/* train/device.c - see device.h. */
#include "train/device.h"

#include <stdio.h>
#include <string.h>

#include "core/log.h"

sg_status sg_device_for_rank(const char *device, int local_rank, int local_world, char *out,
                             size_t n) {
    int len;
    if (strcmp(device, "cuda") == 0 && local_world > 1)
        len = snprintf(out, n, "cuda:%d", local_rank);
    else len = snprintf(out, n, "%s", device);
    if (len < 0 || (size_t)len >= n) {
        SG_ERROR("device '%s' for local rank %d: the name does not fit %zu bytes (internal error)",
                 device, local_rank, n);
        return SG_ERR_RUNTIME;
    }
    return SG_OK;
}

int sg_precision_of(const sg_config *cfg) {
    return strcmp(cfg->train.precision, "bf16") == 0 ? SG_PRECISION_BF16 : SG_PRECISION_FP32;
}

/* cpu.layout auto on the CPU, per precision and ISA (avx512: 1 AVX-512, 0
 * narrower, -1 either): what `segtrain bench` measured faster
 * (docs/BENCHMARKS.md, "Activation layout"). On AVX-512 oneDNN's
 * channels-last kernels (brgconv) and segtrain's Winograd and matmul paths
 * read NHWC as stored; on AVX2 oneDNN 2.6 has neither brgconv nor Winograd,
 * so its blocked kernels behind NCHW win in fp32 (measured on Zen 2 in the
 * same section), and the CPU backend's own Winograd
 * (kernels/cpu/cpu_conv_wino.c) runs on NCHW. */
static const struct {
    int precision, avx512, layout;
    const char *why;
} cpu_auto_layout[] = {
    {SG_PRECISION_FP32, 1, SG_LAYOUT_NHWC,
     "cpu.layout auto: channels last, measured faster for fp32 on AVX-512 CPUs"},
    {SG_PRECISION_FP32, 0, SG_LAYOUT_NCHW,
     "cpu.layout auto: NCHW (oneDNN's blocked kernels, segtrain's own Winograd), measured "
     "faster for fp32 on CPUs without AVX-512"},
    {SG_PRECISION_BF16, -1, SG_LAYOUT_NHWC,
     "cpu.layout auto: channels last, measured faster for bf16 on the CPU"},
};

/* cuda.layout auto, per precision: NHWC where cuDNN's bf16 tensor-core
 * convolutions then run on the activations as they are (no transposes);
 * NCHW under fp32, the simple baseline. */
static int cuda_layout_of(const sg_config *cfg, const char **why) {
    if (!strcmp(cfg->cuda.layout, "nhwc")) {
        *why = "cuda.layout";
        return SG_LAYOUT_NHWC;
    }
    if (!strcmp(cfg->cuda.layout, "nchw")) {
        *why = "cuda.layout";
        return SG_LAYOUT_NCHW;
    }
    if (sg_precision_of(cfg) == SG_PRECISION_BF16) {
        *why = "cuda.layout auto: channels last under bf16, cuDNN's convolutions read and write "
               "it without transposes";
        return SG_LAYOUT_NHWC;
    }
    *why = "cuda.layout auto: NCHW under fp32";
    return SG_LAYOUT_NCHW;
}

int sg_layout_of(const sg_config *cfg, const char **why) {
    const char *w = "cpu.layout";
    int layout = SG_LAYOUT_NCHW;
    if (strcmp(cfg->device, "cpu") != 0) layout = cuda_layout_of(cfg, &w);
    else if (!strcmp(cfg->cpu.layout, "nhwc")) layout = SG_LAYOUT_NHWC;
    else if (!strcmp(cfg->cpu.layout, "auto")) {
        int p = sg_precision_of(cfg), avx512 = sg_backend_cpu_avx512();
        for (size_t i = 0; i < sizeof cpu_auto_layout / sizeof cpu_auto_layout[0]; i++)
            if (cpu_auto_layout[i].precision == p &&
                (cpu_auto_layout[i].avx512 < 0 || cpu_auto_layout[i].avx512 == avx512)) {
                layout = cpu_auto_layout[i].layout;
                w = cpu_auto_layout[i].why;
            }
    }
    if (why) *why = w;
    return layout;
}

sg_backend *sg_open_backend(const sg_config *cfg, const sg_dist_env *env) {
    sg_dist_env own;
    if (!env) {
        if (sg_dist_env_read(&own) != 0) return NULL;
        env = &own;
    }
    char dev[SG_NAME + 16];
    if (sg_device_for_rank(cfg->device, env->local_rank, env->local_world, dev, sizeof dev) !=
        SG_OK)
        return NULL;
    /* the plan cache's file (CUDA; kernels/conv_plans.h) */
    char plans[SG_STR + 32] = "";
    if (strcmp(cfg->cudnn.plan_cache, "auto") == 0)
        snprintf(plans, sizeof plans, "%s/cudnn_plans.bin", cfg->run_dir);
    else snprintf(plans, sizeof plans, "%s", cfg->cudnn.plan_cache);
    sg_backend_opts bo = {.threads = cfg->threads,
                          .cudnn_benchmark = cfg->cudnn.benchmark,
                          .cudnn_deterministic = cfg->cudnn.deterministic,
                          .precision = sg_precision_of(cfg),
                          .allow_tf32 = cfg->cudnn.allow_tf32,
                          .conv_plan_file = plans,
                          .layout = sg_layout_of(cfg, NULL)};
    sg_backend *be = sg_backend_create(dev, &bo);
    if (!be) return NULL;
    sg_backend_info bi;
    sg_backend_get_info(be, &bi);
    if (strcmp(dev, cfg->device) != 0)
        SG_INFO("device: %s (%s): device '%s' is cuda:LOCAL_RANK with %d processes on this node",
                bi.name, bi.device, cfg->device, env->local_world);
    else SG_INFO("device: %s (%s)", bi.name, bi.device);
    SG_INFO("precision: train.precision %s; convolutions %s", cfg->train.precision, bi.conv_math);
    const char *why = NULL;
    sg_layout_of(cfg, &why);
    SG_INFO("activations: %s (%s)", be->layout == SG_LAYOUT_NHWC ? "NHWC" : "NCHW", why);
    return be;
}
