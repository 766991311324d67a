/* kernels/cpu/cpu_conv_internal.h - private to the CPU convolution files
 * (cpu_conv.c: oneDNN primitives and their cache; cpu_conv_taps.c: the
 * per-tap GEMM path for sparse dilated convolutions; cpu_conv_dw.c: the
 * backward passes of dilated depthwise convolutions; cpu_conv_matmul.c:
 * GEMMs as oneDNN matmul primitives; cpu_conv_phases.c: dilated convs on
 * phase sub-images; cpu_conv_wino.c: the own float32 Winograd;
 * cpu_conv_wino_cl.c: the same on NHWC bf16 inputs): the oneDNN check macro
 * and the growable shared buffers.
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

/* cpu_conv_matmul.c: GEMMs as cached oneDNN matmul primitives. */
typedef struct sg_conv_mm sg_conv_mm;
sg_conv_mm *sg_conv_mm_create(dnnl_engine_t eng, dnnl_stream_t stream);
void sg_conv_mm_destroy(sg_conv_mm *mm);
/* Primitives cached and the scratchpad bytes they share. */
void sg_conv_mm_stats(const sg_conv_mm *mm, int *entries, size_t *scratch_bytes);
/* C [m x n] = op(A) [m x k] . op(B) [k x n], or C += that (add = 1), in
 * dnnl_sgemm's row-major terms (ta / tb 'N' or 'T', leading dimensions).
 * bf16 = 1: A and B hold bf16 bits (uint16_t), C float32 (float32
 * accumulation); else all float32. Waits for the result. c NULL: only
 * builds the primitive (conv_prepare: none is built in the steady state). */
void sg_conv_mm_gemm(sg_conv_mm *mm, int bf16, char ta, char tb, long m, long n, long k,
                     const void *a, long lda, const void *b, long ldb, int add, float *c, long ldc);
/* 1 if d is a 1x1, stride-1, unpadded, ungrouped conv: on NHWC activations
 * each pass is one GEMM over the pixels. */
int sg_conv_mm_1x1(const sg_conv_desc *d);
/* Its backward passes on NHWC activations (weights [k, c, 1, 1]), written
 * (never accumulated); bf16 = 1: the inputs are bf16 bits, the result the
 * float32 sum (the caller rounds it). All tensors NULL: builds the
 * primitive only. */
void sg_conv_mm_1x1_fwd(sg_conv_mm *mm, const sg_conv_desc *d, int bf16, const void *x,
                        const void *w, float *y);
void sg_conv_mm_1x1_bwd_data(sg_conv_mm *mm, const sg_conv_desc *d, int bf16, const void *dy,
                             const void *w, float *dx);
void sg_conv_mm_1x1_bwd_weight(sg_conv_mm *mm, const sg_conv_desc *d, int bf16, const void *x,
                               const void *dy, float *dw);

/* cpu_conv_phases.c: dilated 3x3 convs (stride 1, padding = dilation D,
 * D dividing h and w, channels multiples of 16) as one undilated conv over
 * the D*D phase sub-images stacked into the batch (sg_conv_phases_desc),
 * NHWC activations in and out of that order. */
int sg_conv_phases_applicable(const sg_conv_desc *d);
sg_conv_desc sg_conv_phases_desc(const sg_conv_desc *d);
void sg_conv_to_phases(float *dst, const float *src, int n, int h, int w, int c, int D);
void sg_conv_from_phases(float *dst, const float *src, int n, int h, int w, int c, int D,
                         int accumulate);

/* Buffers of the per-tap GEMM path (cpu_conv_taps.c). */
typedef struct sg_conv_taps_ws {
    ws_buf wt;   /* weights per tap: [r*s][k][c] (or their gradient) */
    ws_buf a, b; /* gathered operands of one tap */
} sg_conv_taps_ws;

/* 1 if d is a stride-1 dilated conv whose taps mostly read padding (ASPP
 * rates on small maps), where per-tap GEMMs over the valid regions do much
 * less work than a dense conv. */
int sg_conv_taps_applicable(const sg_conv_desc *d);
/* 1 if d's float32 backward passes on NHWC activations run faster as
 * per-tap GEMMs: any stride-1 kernel larger than 1x1 with at least 3% of
 * its dense work in padding (the measurements are in cpu_conv_taps.c). */
int sg_conv_taps_bwd_f32_applicable(const sg_conv_desc *d);
/* The work of the per-tap GEMMs over that of the dense conv on the live
 * taps (1 when every tap reads the whole image). */
double sg_conv_taps_density(const sg_conv_desc *d);
/* Grows the buffers for d (done by every call too). */
void sg_conv_taps_prepare(sg_conv_taps_ws *ws, const sg_conv_desc *d);
/* The bf16 weights of the forward and backward-data passes below:
 * wt [r*s][k][c] = bf16(w [k][c][r][s]) (round-to-nearest-even);
 * sg_conv_taps_weight_count(d) uint16_t. */
size_t sg_conv_taps_weight_count(const sg_conv_desc *d);
void sg_conv_taps_weights_bf16(const sg_conv_desc *d, const float *w, uint16_t *wt);
/* The three passes; nhwc: activations (x, y, dx, dy) channels last, else
 * nchw. mm NULL: float32 throughout (dnnl_sgemm), w PyTorch's [k, c, r, s]
 * floats. mm set: bf16 GEMMs on mm (float32 accumulation): x and dy are
 * bf16 bits, w the bf16 per-tap copy of sg_conv_taps_weights_bf16; the
 * results (y, dx, dw) are the float32 sums (the caller rounds them). A
 * bf16 call without tensors (all NULL) builds the matmul primitives of the
 * pass only (conv_prepare). */
void sg_conv_taps_fwd(sg_conv_taps_ws *ws, sg_conv_mm *mm, const sg_conv_desc *d, int nhwc,
                      const void *x, const void *w, float *y);
void sg_conv_taps_bwd_data(sg_conv_taps_ws *ws, sg_conv_mm *mm, const sg_conv_desc *d, int nhwc,
                           const void *dy, const void *w, float *dx, int accumulate);
void sg_conv_taps_bwd_weight(sg_conv_taps_ws *ws, sg_conv_mm *mm, const sg_conv_desc *d, int nhwc,
                             const void *x, const void *dy, float *dw, int accumulate);
void sg_conv_taps_ws_free(sg_conv_taps_ws *ws);

/* cpu_conv_pack.c: float32 weights [k][c][r][s] (1x1, 3x3) into a bf16
 * blocked layout md of oneDNN's brgconv kernels (k in blocks, c in pairs
 * innermost), rounded to nearest even: the bytes oneDNN's reorder writes,
 * padding included. _ok: whether md is such a layout; sg_conv_pack_bf16
 * returns 0 (and writes nothing) where it is not. */
int sg_conv_pack_bf16_ok(const dnnl_memory_desc_t *md);
int sg_conv_pack_bf16(const dnnl_memory_desc_t *md, const float *w, uint16_t *dst);

/* cpu_conv_wino.c: float32 Winograd F(4x4, 3x3) for 3x3 stride-1 convs
 * with padding = dilation (any dilation; ungrouped, 16+ channels each
 * side): the three passes on activations nchw (or nhwc), weights
 * [k, c, 3, 3]. Its buffers grow on first use of a shape. */
typedef struct sg_conv_wino_ws {
    ws_buf u, v, m; /* transformed weights, inputs, outputs (or gradients) */
    ws_buf wf;      /* backward data: the flipped, transposed kernel */
    ws_buf pos;     /* tile origins of one chunk */
} sg_conv_wino_ws;
int sg_conv_wino_applicable(const sg_conv_desc *d);
void sg_conv_wino_reserve(sg_conv_wino_ws *ws, const sg_conv_desc *d);
void sg_conv_wino_fwd(sg_conv_wino_ws *ws, const sg_conv_desc *d, int nhwc, const float *x,
                      const float *w, float *y);
void sg_conv_wino_bwd_data(sg_conv_wino_ws *ws, const sg_conv_desc *d, int nhwc, const float *dy,
                           const float *w, float *dx, int accumulate);
void sg_conv_wino_bwd_weight(sg_conv_wino_ws *ws, const sg_conv_desc *d, int nhwc, const float *x,
                             const float *dy, float *dw, int accumulate);
void sg_conv_wino_ws_free(sg_conv_wino_ws *ws);

/* cpu_conv_wino_cl.c: the same Winograd F(4x4, 3x3) for native bf16 on
 * NHWC activations (channels on the vector lanes), for the geometries of
 * sg_conv_wino_applicable: inputs bf16 bits (x, dy: NHWC; w: the float32
 * [k, c, 3, 3], rounded as read),
 * float32 transforms and GEMMs, the float32 sums written (y, dx, dw; the
 * caller rounds them). Its buffers grow on first use of a shape. */
typedef struct sg_conv_wcl_ws {
    /* transformed weights, inputs, outputs (or gradients): buffers the
     * caller lends for the call (cpu_conv.c: the per-tap path's operands,
     * which never run at the same time), grown here as a shape needs */
    ws_buf *u, *v, *m;
    ws_buf pos; /* tile origins of one chunk (owned) */
} sg_conv_wcl_ws;
void sg_conv_wcl_reserve(sg_conv_wcl_ws *ws, const sg_conv_desc *d);
void sg_conv_wcl_fwd(sg_conv_wcl_ws *ws, const sg_conv_desc *d, const uint16_t *x, const float *w,
                     float *y);
void sg_conv_wcl_bwd_data(sg_conv_wcl_ws *ws, const sg_conv_desc *d, const uint16_t *dy,
                          const float *w, float *dx);
void sg_conv_wcl_bwd_weight(sg_conv_wcl_ws *ws, const sg_conv_desc *d, const uint16_t *x,
                            const uint16_t *dy, float *dw);
void sg_conv_wcl_ws_free(sg_conv_wcl_ws *ws); /* pos only */

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
