/* kernels/backend.c - creates a backend from a device string. */
#include "kernels/backend.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"

/* Each backend's constructor; a backend not compiled in has none. */
#if SG_HAVE_CPU
sg_backend *sg_cpu_backend_create(const sg_backend_opts *opts);
#endif
#if SG_HAVE_CUDA
sg_backend *sg_cuda_backend_create(int device, const sg_backend_opts *opts);
int sg_cuda_device_count(void);
#endif

int sg_conv_desc_init(sg_conv_desc *d) {
    d->oh = (d->h + 2 * d->pad_h - d->dil_h * (d->r - 1) - 1) / d->stride_h + 1;
    d->ow = (d->w + 2 * d->pad_w - d->dil_w * (d->s - 1) - 1) / d->stride_w + 1;
    return (d->oh > 0 && d->ow > 0) ? 0 : -1;
}

int sg_backend_cuda_compiled(void) { return SG_HAVE_CUDA; }

int sg_backend_cuda_device_count(void) {
#if SG_HAVE_CUDA
    return sg_cuda_device_count();
#else
    return 0;
#endif
}

sg_backend *sg_backend_create(const char *device, const sg_backend_opts *opts) {
    sg_backend_opts defaults = {0, 1, 0};
    if (!opts) opts = &defaults;
    if (strcmp(device, "cpu") == 0) {
#if SG_HAVE_CPU
        return sg_cpu_backend_create(opts);
#else
        SG_ERROR("device 'cpu': this is a GPU-only build (meson -Dgpu_only=true); "
                 "use device: cuda, or rebuild without -Dgpu_only");
        return NULL;
#endif
    }
    if (strncmp(device, "cuda", 4) == 0) {
        int idx = 0;
        if (device[4] == ':') {
            char *end = NULL;
            long v = strtol(device + 5, &end, 10);
            if (!end || *end || v < 0 || v > 1024) {
                SG_ERROR("device '%s': expected cuda or cuda:N with N a device index", device);
                return NULL;
            }
            idx = (int)v;
        } else if (device[4] != 0) {
            SG_ERROR("device '%s': expected cpu, cuda or cuda:N", device);
            return NULL;
        }
#if SG_HAVE_CUDA
        return sg_cuda_backend_create(idx, opts);
#else
        (void)idx;
        SG_ERROR("device '%s': this binary was built without the CUDA backend "
                 "(meson found no nvcc/cuDNN/NCCL); use device: cpu or rebuild with them",
                 device);
        return NULL;
#endif
    }
    SG_ERROR("device '%s': expected cpu, cuda or cuda:N", device);
    return NULL;
}

void sg_backend_destroy(sg_backend *be) {
    if (be) be->ops->destroy(be);
}

void sg_backend_get_info(sg_backend *be, sg_backend_info *info) {
    memset(info, 0, sizeof *info);
    be->ops->get_info(be, info);
}
