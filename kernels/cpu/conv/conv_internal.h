/* kernels/cpu/conv/conv_internal.h - private to the CPU convolution files
 * of this folder: the oneDNN check macro, the growable shared buffers, the
 * conv cache every file works in, the path table's row type, and each
 * file's entry points. The map (docs/ARCHITECTURE.md, "CPU convolution
 * paths"):
 *   ops.c           the ops (conv_prepare, conv_fwd/bwd_*, the *_dt entry
 *                   points), the cache's lifetime, the precision choice
 *   paths.c         THE path table, the one chooser every entry uses,
 *                   SG_CPU_CONV (force / off), the bf16 emulation wrapper
 *   own_f32.c       the rows of the backend's own float32 paths
 *   native.c        the rows of the native bf16 GEMM paths (mm1x1 in both
 *                   precisions)
 *   onednn.c        oneDNN's primitive cache and its rows
 *   onednn_rules.c  oneDNN's layout rule and its bug workarounds
 *   taps.c matmul.c dw.c wino.c wino_cl.c phases.c pack.c: the paths'
 *                   kernels (below), which call nothing above them
 * Calls go down this list only (scripts/check-call-loops).
 */
#ifndef SG_KERNELS_CPU_CONV_INTERNAL_H
#define SG_KERNELS_CPU_CONV_INTERNAL_H

#include <oneapi/dnnl/dnnl.h>
#include <oneapi/dnnl/dnnl_debug.h>

#include "core/log.h"
#include "kernels/cpu/cpu_internal.h"
#include "kernels/weight_cache.h"

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

/* matmul.c: GEMMs as cached oneDNN matmul primitives. */
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

/* phases.c: dilated 3x3 convs (stride 1, padding = dilation D,
 * D dividing h and w, channels multiples of 16) as one undilated conv over
 * the D*D phase sub-images stacked into the batch (sg_conv_phases_desc),
 * NHWC activations in and out of that order. */
int sg_conv_phases_applicable(const sg_conv_desc *d);
sg_conv_desc sg_conv_phases_desc(const sg_conv_desc *d);
void sg_conv_to_phases(float *dst, const float *src, int n, int h, int w, int c, int D);
void sg_conv_from_phases(float *dst, const float *src, int n, int h, int w, int c, int D,
                         int accumulate);

/* Buffers of the per-tap GEMM path (taps.c). */
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
 * its dense work in padding (why: taps.c). */
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

/* pack.c: float32 weights [k][c][r][s] (1x1, 3x3) into a bf16
 * blocked layout md of oneDNN's brgconv kernels (k in blocks, c in pairs
 * innermost), rounded to nearest even: the bytes oneDNN's reorder writes,
 * padding included. _ok: whether md is such a layout; sg_conv_pack_bf16
 * returns 0 (and writes nothing) where it is not. */
int sg_conv_pack_bf16_ok(const dnnl_memory_desc_t *md);
int sg_conv_pack_bf16(const dnnl_memory_desc_t *md, const float *w, uint16_t *dst);

/* wino.c: float32 Winograd F(4x4, 3x3) for 3x3 stride-1 convs
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

/* wino_cl.c: the same Winograd F(4x4, 3x3) for native bf16 on
 * NHWC activations (channels on the vector lanes), for the geometries of
 * sg_conv_wino_applicable: inputs bf16 bits (x, dy: NHWC; w: the float32
 * [k, c, 3, 3], rounded as read),
 * float32 transforms and GEMMs, the float32 sums written (y, dx, dw; the
 * caller rounds them). Its buffers grow on first use of a shape. */
typedef struct sg_conv_wcl_ws {
    /* transformed weights, inputs, outputs (or gradients): buffers the
     * caller lends for the call (the conv cache: the per-tap path's operands,
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

/* dw.c: 1 if d is a dilated depthwise conv (groups == c, k a
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

/* ---------------- the dispatch ---------------- */

/* The passes (the index of sg_cpu_conv_path_ran, tests and logs). */
enum { OP_FWD = 0, OP_BWD_DATA = 1, OP_BWD_WEIGHT = 2 };
/* A call's precision: float32; bf16 on oneDNN's bf16 instructions (native);
 * bf16 emulated in float32 (no bf16 instructions, or SG_CPU_BF16=emulated). */
enum { PREC_F32 = 0, PREC_BF16 = 1, PREC_BF16_EMU = 2 };
/* oneDNN's primitive layouts (onednn.c): PLAIN = plain layouts (nchw
 * activations with oihw weights; nhwc ones with hwio weights, oneDNN's
 * GEMM-based kernels); BLOCKED = the primitive chooses all three (tensors
 * reordered in and out); CL (channels last, NHWC activations only) =
 * activations as stored, weights as the primitive wants them; WINO = as
 * BLOCKED, with oneDNN's Winograd algorithm. */
enum { LAYOUT_PLAIN = 0, LAYOUT_BLOCKED = 1, LAYOUT_CL = 2, LAYOUT_WINO = 3 };
enum { BF16_OFF = 0, BF16_EMULATED = 1, BF16_NATIVE = 2 };

/* One pass of one convolution, as every row sees it. in0: x (forward,
 * backward-weights; bf16 bits when xdt is SG_ACT_BF16) or dy
 * (backward-data); in1: the weights (forward, backward-data) or dy; out:
 * y, dx or dw (y as bf16 bits when ydt is SG_ACT_BF16), written or added
 * (accumulate). All tensors NULL: conv_prepare (build, grow, run nothing).
 * wc: the backend's bf16 weight cache (NULL: none). */
typedef struct conv_call {
    const sg_conv_desc *d;
    int op, prec, act; /* OP_*, PREC_*, SG_LAYOUT_* of the activations */
    const void *in0;
    int xdt;
    const float *in1;
    void *out;
    int ydt;
    int accumulate;
    sg_wcache *wc;
} conv_call;

typedef struct sg_cpu_conv_cache sg_cpu_conv_cache;

/* A row of the path table (paths.c). The chooser takes the first row, in
 * table order, whose static columns admit the call (passes, precisions,
 * layouts, isa) and whose rule holds: can (the path computes this conv
 * correctly: its geometry limits) and pays (where it was measured faster
 * than the rows after it; NULL: always). A row forced by SG_CPU_CONV is
 * tried first and needs only its precision and can. */
typedef struct conv_path {
    const char *name;
    unsigned passes;     /* 1 << OP_*: where the rule may pick it */
    unsigned precisions; /* 1 << PREC_* */
    unsigned layouts;    /* 1 << SG_LAYOUT_*: where the rule may pick it */
    int isa;             /* ISA_*: what the rule needs of the processor */
    int fallback;        /* 1: a oneDNN layout row or the emulation (see paths.c) */
    int (*can)(sg_cpu_conv_cache *cc, const conv_call *c);
    int (*pays)(const sg_cpu_conv_cache *cc, const conv_call *c);
    void (*prepare)(sg_cpu_conv_cache *cc, const conv_call *c);
    void (*run)(sg_cpu_conv_cache *cc, const conv_call *c);
    const char *file; /* where the path's kernels are */
} conv_path;
/* The isa column: any processor; where oneDNN has Winograd kernels
 * (AVX-512); where it has none; without AMX (its bf16 tile kernels). */
enum { ISA_ANY = 0, ISA_WINO = 1, ISA_NO_WINO = 2, ISA_NO_AMX = 3 };
#define CONV_PATHS_MAX 32

typedef struct conv_entry conv_entry; /* onednn.c */

/* The conv cache: the oneDNN engine, the primitive cache, every path's
 * buffers (grown to the largest shape seen, never per call), the choice of
 * precision and what SG_CPU_CONV forces or turns off. */
struct sg_cpu_conv_cache {
    dnnl_engine_t eng;
    dnnl_stream_t stream;
    conv_entry *head;          /* oneDNN entries (onednn.c) */
    ws_buf ws[3];              /* oneDNN: blocked copies, one per argument slot */
    ws_buf acc;                /* accumulate scratch (plain layout); native bf16
                                  GEMM paths: the float32 sum before rounding */
    ws_buf wtrim;              /* live-tap weights of a trimmed kernel (plain oihw) */
    ws_buf ctr;                /* center's 1x1 weight gradient */
    const uint16_t *dy16;      /* sg_cpu_conv_native_bwd: dy as bf16 (in g16[1]) for
                                  both passes of the call, else NULL */
    ws_buf scratch;            /* oneDNN scratchpad */
    ws_buf dw_wt;              /* NHWC depthwise backward: weights per tap (dw.c) */
    sg_conv_taps_ws taps;      /* per-tap GEMM path (taps.c) */
    sg_conv_wino_ws wino;      /* own Winograd path (wino.c) */
    sg_conv_wcl_ws wcl;        /* native bf16 NHWC Winograd (wino_cl.c); its
                                  transforms live in taps' buffers (one path runs at a
                                  time: at 512x1024 bf16 that saves its 57 MB) */
    int precision;             /* SG_PRECISION_* */
    int bf16;                  /* BF16_OFF | BF16_EMULATED | BF16_NATIVE */
    char math[160];            /* how convolutions run, for get_info and the log */
    ws_buf bf_a, bf_b, bf_out; /* emulated bf16: rounded inputs, result */
    ws_buf ph[3];              /* phases: the inputs and output in phase order */
    ws_buf g16[2];             /* native GEMM paths: bf16 copies of the two inputs */
    sg_conv_mm *mm;            /* matmul primitives (matmul.c) */
    int wino_isa;              /* oneDNN has Winograd kernels on this ISA (AVX-512) */
    int amx;                   /* oneDNN's ISA has AMX (its bf16 kernels use the tiles) */
    int pack_off;              /* test seam SG_CPU_WEIGHT_PACK=0: oneDNN's reorder only */
    uint32_t forced, off;      /* SG_CPU_CONV: rows forced / turned off (bit = row) */
    signed char ran[3];        /* the row that ran each pass last (-1: none yet) */
    signed char ran_inner[3];  /* under the emulation: the float32 row inside it */
    dnnl_memory_desc_t *wmds;  /* distinct native bf16 weight layouts (onednn.c) */
    int n_wmds, cap_wmds;
};

/* paths.c: the table, the chooser, force / off. */
extern const conv_path sg_conv_paths[];
extern const int sg_conv_npaths;
/* Parses SG_CPU_CONV into cc->forced / cc->off (fatal on an unknown name or
 * on turning off a fallback row); logs it once when set. */
void sg_conv_paths_init(sg_cpu_conv_cache *cc);
/* The row that runs c (never NULL: the fallback rows take every conv). */
const conv_path *sg_conv_choose(sg_cpu_conv_cache *cc, const conv_call *c);
/* Chooses, records (cc->ran) and runs / prepares c; runs row p on c. */
void sg_conv_run(sg_cpu_conv_cache *cc, const conv_call *c);
void sg_conv_run_path(sg_cpu_conv_cache *cc, const conv_path *p, const conv_call *c);
void sg_conv_prepare(sg_cpu_conv_cache *cc, const conv_call *c);
/* Whether p is the emulation row; cc's precision (PREC_*). */
int sg_conv_is_emulation(const conv_path *p);
int sg_conv_precision_of(const sg_cpu_conv_cache *cc);
/* Whether row p's isa column holds on this processor. */
int sg_conv_isa_ok(const sg_cpu_conv_cache *cc, const conv_path *p);

/* own_f32.c: the rows of the backend's own float32 paths. */
int sg_conv_dw_can(sg_cpu_conv_cache *cc, const conv_call *c);
void sg_conv_dw_prep(sg_cpu_conv_cache *cc, const conv_call *c);
void sg_conv_dw_run(sg_cpu_conv_cache *cc, const conv_call *c);
int sg_conv_taps_can(sg_cpu_conv_cache *cc, const conv_call *c);
int sg_conv_taps_bwd_can(sg_cpu_conv_cache *cc, const conv_call *c);
void sg_conv_taps_prep(sg_cpu_conv_cache *cc, const conv_call *c);
void sg_conv_taps_run(sg_cpu_conv_cache *cc, const conv_call *c);
int sg_conv_wino_own_can(sg_cpu_conv_cache *cc, const conv_call *c);
void sg_conv_wino_own_prep(sg_cpu_conv_cache *cc, const conv_call *c);
void sg_conv_wino_own_run(sg_cpu_conv_cache *cc, const conv_call *c);
int sg_conv_phases_can(sg_cpu_conv_cache *cc, const conv_call *c);
void sg_conv_phases_prep(sg_cpu_conv_cache *cc, const conv_call *c);
void sg_conv_phases_run(sg_cpu_conv_cache *cc, const conv_call *c);

/* native.c: native bf16 passes as GEMMs on bf16 copies of their inputs
 * (float32 sums rounded once to bf16, as oneDNN's bf16 primitives), and
 * the row mm1x1 in both precisions. */
int sg_conv_mm1x1_can(sg_cpu_conv_cache *cc, const conv_call *c);
int sg_conv_mm1x1_pays(const sg_cpu_conv_cache *cc, const conv_call *c);
void sg_conv_mm1x1_prep(sg_cpu_conv_cache *cc, const conv_call *c);
void sg_conv_mm1x1_run(sg_cpu_conv_cache *cc, const conv_call *c);
enum { GEMM_TAPS = 1, GEMM_MM1X1 = 2, GEMM_WINO = 3, GEMM_CENTER = 4 };
int sg_conv_taps_bf16_can(sg_cpu_conv_cache *cc, const conv_call *c);
int sg_conv_taps_bf16_pays(const sg_cpu_conv_cache *cc, const conv_call *c);
int sg_conv_center_can(sg_cpu_conv_cache *cc, const conv_call *c);
int sg_conv_center_pays(const sg_cpu_conv_cache *cc, const conv_call *c);
int sg_conv_wino_cl_can(sg_cpu_conv_cache *cc, const conv_call *c);
int sg_conv_wino_cl_pays(const sg_cpu_conv_cache *cc, const conv_call *c);
void sg_conv_taps_bf16_prep(sg_cpu_conv_cache *cc, const conv_call *c);
void sg_conv_taps_bf16_run(sg_cpu_conv_cache *cc, const conv_call *c);
void sg_conv_center_prep(sg_cpu_conv_cache *cc, const conv_call *c);
void sg_conv_center_run(sg_cpu_conv_cache *cc, const conv_call *c);
void sg_conv_wino_cl_prep(sg_cpu_conv_cache *cc, const conv_call *c);
void sg_conv_wino_cl_run(sg_cpu_conv_cache *cc, const conv_call *c);
/* A native GEMM pass (GEMM_*) of c: prepare (a dry run that builds and
 * grows) or run. */
void sg_conv_native_prep(sg_cpu_conv_cache *cc, int path, const conv_call *c);
void sg_conv_native_run(sg_cpu_conv_cache *cc, int path, const conv_call *c);
/* The bf16 rounding of a float32 input into b (round-to-nearest-even), or
 * src itself when it is bf16 bits already (dt SG_ACT_BF16). */
const uint16_t *sg_conv_bf16_input(ws_buf *b, const void *src, int dt, size_t count);

/* onednn.c: the primitive cache (an entry per geometry, pass, layout,
 * activation layout, precision and storage types) and its rows. */
conv_entry *sg_conv_onednn_entry(sg_cpu_conv_cache *cc, const sg_conv_desc *d, int op, int layout,
                                 int act, int bf16, int xdt, int ydt);
/* 1 if oneDNN has a kernel for the entry (0: a bf16 geometry it lacks). */
int sg_conv_onednn_has(const conv_entry *e);
void sg_conv_onednn_exec(sg_cpu_conv_cache *cc, conv_entry *e, const void *in0, const float *in1,
                         void *out, int accumulate, sg_wcache *wc);
int sg_conv_onednn_count(const sg_cpu_conv_cache *cc);
void sg_conv_onednn_free(sg_cpu_conv_cache *cc);
/* The rows onednn-wino, -cl, -plain and -blocked: each the entry of its
 * layout. */
int sg_conv_onednn_wino_can(sg_cpu_conv_cache *cc, const conv_call *c);
int sg_conv_onednn_cl_can(sg_cpu_conv_cache *cc, const conv_call *c);
int sg_conv_onednn_plain_can(sg_cpu_conv_cache *cc, const conv_call *c);
int sg_conv_onednn_blocked_can(sg_cpu_conv_cache *cc, const conv_call *c);
int sg_conv_onednn_cl_pays(const sg_cpu_conv_cache *cc, const conv_call *c);
int sg_conv_onednn_plain_pays(const sg_cpu_conv_cache *cc, const conv_call *c);
int sg_conv_onednn_blocked_pays(const sg_cpu_conv_cache *cc, const conv_call *c);
void sg_conv_onednn_wino_prep(sg_cpu_conv_cache *cc, const conv_call *c);
void sg_conv_onednn_wino_run(sg_cpu_conv_cache *cc, const conv_call *c);
void sg_conv_onednn_cl_prep(sg_cpu_conv_cache *cc, const conv_call *c);
void sg_conv_onednn_cl_run(sg_cpu_conv_cache *cc, const conv_call *c);
void sg_conv_onednn_plain_prep(sg_cpu_conv_cache *cc, const conv_call *c);
void sg_conv_onednn_plain_run(sg_cpu_conv_cache *cc, const conv_call *c);
void sg_conv_onednn_blocked_prep(sg_cpu_conv_cache *cc, const conv_call *c);
void sg_conv_onednn_blocked_run(sg_cpu_conv_cache *cc, const conv_call *c);

/* onednn_rules.c: which layout oneDNN runs a conv in, and its bugs. */
/* The layout oneDNN runs c in when no Winograd is asked for: plain,
 * channels-last (NHWC) or blocked (NCHW); the workarounds below included. */
int sg_conv_onednn_layout(const conv_call *c);
/* oneDNN's Winograd takes d (3x3, stride 1, pad 1, undilated, channels in
 * multiples of 16, ungrouped, nothing trimmed). */
int sg_conv_onednn_wino_geometry(const sg_conv_desc *d);
/* A geometry whose channels-last kernel for pass op is wrong in oneDNN 2.6
 * (it runs plain then). */
int sg_conv_onednn_cl_bug(const sg_conv_desc *d, int op, int bf16);
/* Live taps along one dimension (see onednn_rules.c); -1: nothing to trim. */
int sg_conv_live_taps(int in, int out, int k, int stride, int pad, int dil, int *t0, int *len,
                      int *pad_r);
/* Fatal, naming the geometry, unless d is a valid, consistently filled conv. */
void sg_conv_validate(const sg_conv_desc *d);
/* Element counts of an op's inputs and output: fwd x, w -> y; bwd_data
 * dy, w -> dx; bwd_weight x, dy -> dw. */
void sg_conv_op_counts(const sg_conv_desc *d, int op, size_t *n0, size_t *n1, size_t *nout);

#endif
