/* kernels/backend.c - creates a backend from a device string, and checks
 * that the backend filled every op of its table (naming a missing one). */
#include "kernels/backend.h"

#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "core/log.h"

/* Each backend's constructor; a backend not compiled in has none. */
#if SG_HAVE_CPU
sg_backend *sg_cpu_backend_create(const sg_backend_opts *opts);
int sg_cpu_preferred_layout(int precision, const char **why);
#endif
#if SG_HAVE_CUDA
sg_backend *sg_cuda_backend_create(int device, const sg_backend_opts *opts);
int sg_cuda_device_count(void);
void sg_cuda_versions(char *buf, size_t len);
#endif

#define SG_OP_INDEX(f) SG_OPI_##f,
enum { SG_OPS_LIST(SG_OP_INDEX) SG_OPS_COUNT };

typedef void (*sg_any_fn)(void);
_Static_assert(sizeof(sg_any_fn) == sizeof(void *) && offsetof(sg_ops, name) == 0 &&
                   sizeof(const char *) == sizeof(void *),
               "sg_ops: expected a name pointer followed by function pointers");
/* Each listed op sits in the slot its position says: no op listed twice,
 * none out of order... */
#define SG_OP_SLOT(f)                                                                        \
    _Static_assert(offsetof(sg_ops, f) == sizeof(void *) * (1 + SG_OPI_##f),                 \
                   "sg_ops: '" #f "' is not where SG_OPS_LIST in kernels/backend.h puts "    \
                   "it: a member before it is missing from the list, or the list is not in " \
                   "the struct's order");
SG_OPS_LIST(SG_OP_SLOT)
/* ...and no slot is left out. */
_Static_assert(sizeof(sg_ops) == sizeof(void *) * (1 + SG_OPS_COUNT),
               "sg_ops has a member SG_OPS_LIST in kernels/backend.h does not list: add it "
               "there (and to every backend's table)");

#define SG_OP_ENTRY(f) {#f, offsetof(sg_ops, f)},
static const struct {
    const char *name;
    size_t offset;
} sg_op_table[SG_OPS_COUNT] = {SG_OPS_LIST(SG_OP_ENTRY)};

/* The first op the backend left NULL, or NULL when the table is complete. */
static const char *missing_op(const sg_ops *ops) {
    for (int i = 0; i < SG_OPS_COUNT; i++) {
        sg_any_fn fn;
        memcpy(&fn, (const char *)ops + sg_op_table[i].offset, sizeof fn);
        if (!fn) return sg_op_table[i].name;
    }
    return NULL;
}

/* Returns be, or NULL after logging the first unset op (and destroying be
 * when its destroy op exists): a bug in that backend, reported when the
 * backend is created instead of as a NULL call mid-training. */
static sg_backend *check_ops(sg_backend *be, const char *device) {
    if (!be) return NULL;
    const sg_ops *ops = be->ops;
    const char *name = ops && ops->name ? ops->name : "?";
    const char *miss = !ops ? "(the whole table)" : !ops->name ? "name" : missing_op(ops);
    if (!miss) return be;
    /* each op group's file fills its part of the table (the tables in
     * kernels/cpu/cpu_internal.h and kernels/cuda/cuda_internal.h) */
    const char *dir = strcmp(name, "cuda") == 0 ? "cuda" : "cpu";
    SG_ERROR("device '%s': the %s backend does not implement the op '%s' (none of its fill "
             "functions, sg_%s_fill_*_ops in kernels/%s/, sets it): a bug in this build; report "
             "it, or use another device",
             device, name, miss, dir, dir);
    if (ops && ops->destroy) ops->destroy(be);
    return NULL;
}

int sg_backend_cuda_compiled(void) { return SG_HAVE_CUDA; }

void sg_backend_cuda_versions(char *buf, size_t len) {
#if SG_HAVE_CUDA
    sg_cuda_versions(buf, len);
#else
    snprintf(buf, len, "not compiled in");
#endif
}

int sg_backend_cuda_device_count(void) {
#if SG_HAVE_CUDA
    return sg_cuda_device_count();
#else
    return 0;
#endif
}

/* Parses "cuda" (index 0) or "cuda:N" (N decimal digits only); -1 if malformed. */
static int cuda_index(const char *device) {
    if (strncmp(device, "cuda", 4) != 0) return -1;
    if (device[4] == 0) return 0;
    if (device[4] != ':' || device[5] == 0) return -1;
    long v = 0;
    for (const char *p = device + 5; *p; p++) {
        if (*p < '0' || *p > '9') return -1;
        v = v * 10 + (*p - '0');
        if (v > 1024) return -1;
    }
    return (int)v;
}

int sg_backend_cpu_preferred_layout(int precision, const char **why) {
#if SG_HAVE_CPU
    return sg_cpu_preferred_layout(precision, why);
#else
    if (why) *why = "cpu.layout auto: NCHW (no CPU backend in this build)";
    return SG_LAYOUT_NCHW;
#endif
}

sg_backend *sg_backend_create(const char *device, const sg_backend_opts *opts) {
    sg_backend_opts defaults = {.threads = 0, .cudnn_benchmark = 1};
    if (!opts) opts = &defaults;
    if (!device || !device[0]) {
        SG_ERROR("device is empty: set device to cpu, cuda or cuda:N");
        return NULL;
    }
    if (opts->precision != SG_PRECISION_FP32 && opts->precision != SG_PRECISION_BF16) {
        SG_ERROR("device '%s': precision %d is not SG_PRECISION_FP32 (0) or SG_PRECISION_BF16 "
                 "(1) (train.precision: fp32 | bf16)",
                 device, opts->precision);
        return NULL;
    }
    if (strcmp(device, "cpu") == 0) {
#if SG_HAVE_CPU
        return check_ops(sg_cpu_backend_create(opts), device);
#else
        SG_ERROR("device 'cpu': this is a GPU-only build (meson -Dgpu_only=true); "
                 "use device: cuda, or rebuild without -Dgpu_only");
        return NULL;
#endif
    }
    if (strncmp(device, "cuda", 4) == 0) {
        int idx = cuda_index(device);
        if (idx < 0) {
            if (device[4] == ':')
                SG_ERROR("device '%s': expected cuda or cuda:N with N a device index "
                         "(digits only, 0..1024)",
                         device);
            else SG_ERROR("device '%s': expected cpu, cuda or cuda:N", device);
            return NULL;
        }
#if SG_HAVE_CUDA
        return check_ops(sg_cuda_backend_create(idx, opts), device);
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

void sg_act_relayout(void *dst, const void *src, int n, int c, int hw, size_t esize, int from,
                     int to) {
    size_t count = (size_t)n * (size_t)c * (size_t)hw;
    if (from == to || c == 1 || hw == 1) {
        memcpy(dst, src, count * esize);
        return;
    }
    unsigned char *d = dst;
    const unsigned char *s = src;
    for (int i = 0; i < n; i++)
        for (int ch = 0; ch < c; ch++)
            for (int p = 0; p < hw; p++)
                memcpy(d + sg_act_at(to, c, hw, i, ch, p) * esize,
                       s + sg_act_at(from, c, hw, i, ch, p) * esize, esize);
}

void sg_backend_destroy(sg_backend *be) {
    if (be) be->ops->destroy(be);
}

void sg_backend_get_info(sg_backend *be, sg_backend_info *info) {
    memset(info, 0, sizeof *info);
    be->ops->get_info(be, info);
}
