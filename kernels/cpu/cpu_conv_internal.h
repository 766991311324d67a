/* kernels/cpu/cpu_conv_internal.h - private to the CPU convolution files
 * (cpu_conv.c: oneDNN primitives and their cache; cpu_conv_taps.c: the
 * per-tap GEMM path for sparse dilated convolutions; cpu_conv_dw.c: the
 * backward passes of dilated depthwise convolutions): the oneDNN check
 * macro and the growable shared buffers.
 */
#ifndef SG_KERNELS_CPU_CONV_INTERNAL_H
#define SG_KERNELS_CPU_CONV_INTERNAL_H

#include <oneapi/dnnl/dnnl.h>
#include <oneapi/dnnl/dnnl_debug.h>

#include "core/log.h"
#include "kernels/cpu/cpu_internal.h"

#define DNNL_CHECK(call)                                                         \
    do {                                                                         \
        dnnl_status_t st_ = (call);                                              \
        if (st_ != dnnl_success)                                                 \
            sg_fatal_at(__FILE__, __LINE__,                                      \
                        "oneDNN call %s failed: %s (status %d). Hint: run with " \
                        "ONEDNN_VERBOSE=1 to see the primitive; check the conv " \
                        "geometry and that libdnnl2 (2.6) matches the headers",  \
                        #call, dnnl_status2str(st_), (int)st_);                  \
    } while (0)

/* A buffer shared by all conv calls; grows when a new shape needs more
 * (only the first time a shape is seen), never shrinks. */
typedef struct ws_buf {
    void *p;
    size_t bytes;
} ws_buf;

static inline void ws_reserve(ws_buf *b, size_t bytes) {
    if (bytes <= b->bytes) return;
    sg_cpu_aligned_free(b->p);
    b->p = sg_cpu_aligned_alloc(bytes);
    b->bytes = bytes;
}

/* Buffers of the per-tap GEMM path (cpu_conv_taps.c). */
typedef struct sg_conv_taps_ws {
    ws_buf wt;   /* weights per tap: [r*s][k][c] (or their gradient) */
    ws_buf a, b; /* gathered operands of one tap */
} sg_conv_taps_ws;

/* 1 if d is a stride-1 dilated conv whose taps mostly read padding (ASPP
 * rates on small maps), where per-tap GEMMs over the valid regions do much
 * less work than a dense conv. */
int sg_conv_taps_applicable(const sg_conv_desc *d);
/* The work of the per-tap GEMMs over that of the dense conv on the live
 * taps (1 when every tap reads the whole image). */
double sg_conv_taps_density(const sg_conv_desc *d);
/* Grows the buffers for d (done by every call too). */
void sg_conv_taps_prepare(sg_conv_taps_ws *ws, const sg_conv_desc *d);
/* The three passes; nhwc: activations (x, y, dx, dy) channels last, else
 * nchw. Weights are PyTorch's [k, c, r, s] in both. */
void sg_conv_taps_fwd(sg_conv_taps_ws *ws, const sg_conv_desc *d, int nhwc, const float *x,
                      const float *w, float *y);
void sg_conv_taps_bwd_data(sg_conv_taps_ws *ws, const sg_conv_desc *d, int nhwc, const float *dy,
                           const float *w, float *dx, int accumulate);
void sg_conv_taps_bwd_weight(sg_conv_taps_ws *ws, const sg_conv_desc *d, int nhwc, const float *x,
                             const float *dy, float *dw, int accumulate);
void sg_conv_taps_ws_free(sg_conv_taps_ws *ws);

/* cpu_conv_dw.c: 1 if d is a dilated depthwise conv (groups == c, k a
 * multiple of c, a dilation above 1), whose backward passes oneDNN runs as
 * a slow GEMM-based convolution; the direct backward passes (activations
 * nchw, or nhwc when nhwc is set; weights [k, 1, r, s]). The NHWC
 * backward-data reads the weights per tap ([r*s][k], built in wt, grown by
 * sg_conv_dw_prepare or the first call of a shape). */
int sg_conv_dw_applicable(const sg_conv_desc *d);
void sg_conv_dw_prepare(ws_buf *wt, const sg_conv_desc *d);
void sg_conv_dw_bwd_data(ws_buf *wt, const sg_conv_desc *d, int nhwc, const float *dy,
                         const float *w, float *dx, int accumulate);
void sg_conv_dw_bwd_weight(const sg_conv_desc *d, int nhwc, const float *x, const float *dy,
                           float *dw, int accumulate);

#endif
