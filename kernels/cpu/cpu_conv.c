/* kernels/cpu/cpu_conv.c - convolutions through oneDNN's C API (2.6):
 * forward, backward-data, backward-weights, any stride/padding/dilation
 * and groups (grouped / depthwise: oneDNN's goihw weights, PyTorch's
 * [k, c/g, r, s] in memory; the per-tap GEMM path is ungrouped only)
 * (the conv group of tests/backend/run_conv.c but for the bias,
 * cpu_conv_bias.c; kernels/cuda/cuda_conv.cu on the GPU).
 *
 * Owns the primitive cache: one entry per (sg_conv_desc, op, layout) holding
 * the primitive, its memory objects, the reorders between the user's plain
 * layout (nchw / oihw) and the layout the primitive chose, and the scratchpad
 * size. Entries are built on first use or by conv_prepare; in the steady
 * state an op only sets data handles and executes. Buffers shared by all
 * entries (blocked copies of the three tensors, the accumulate scratch and
 * the oneDNN scratchpad) grow when a new entry needs more, never per call.
 *
 * Layout: "plain" makes oneDNN work on nchw/oihw directly; "blocked" lets the
 * primitive choose (dnnl_format_tag_any, nChw16c on AVX-512) and reorders the
 * tensors in and out each call. SG_CPU_CONV_LAYOUT=plain|blocked|auto picks
 * one globally; auto (the default) picks per shape and op (choose_layout).
 * accumulate = 1: the result goes to a scratch buffer that is then added.
 *
 * NHWC activations (be->layout, part of every entry's key): oneDNN gets them
 * as stored (the nhwc tag) and runs its channels-last kernels on them with no
 * activation reorder; only the weights go to the layout the primitive picks
 * (and back, for backward-weights): "channels last" entries, what auto picks
 * but for one case (choose_layout). plain there means oneDNN's GEMM-based
 * convolution on nhwc activations and hwio weights; blocked still reorders
 * everything. The per-tap GEMM path and the direct depthwise backward have
 * NHWC loops of their own.
 *
 * Sparse dilated convs (stride 1, most taps reading padding: ASPP at output
 * stride 8) go, in auto mode, to the per-tap GEMM path of cpu_conv_taps.c;
 * the backward passes of dilated depthwise convs to cpu_conv_dw.c; with NHWC
 * activations, the backward passes of large 1x1 stride-1 convs to one
 * matmul each (use_mm_1x1, cpu_conv_matmul.c), in float32 and bf16.
 * Float32 3x3 pad-1 convs with channels in multiples of 16 run as Winograd
 * F(4x4, 3x3) (use_wino: LAYOUT_WINO entries, oneDNN's jit_wino_4x3 on its
 * blocked layout), and with NHWC activations the dilated 3x3 convs of the
 * same kind as Winograd on their phase sub-images (use_phases,
 * cpu_conv_phases.c): about half the time of the direct kernels. Where
 * oneDNN has no Winograd (AVX2), the float32 3x3 "same" convs on NCHW
 * activations, dilated ones included, run as this backend's own F(4x4, 3x3)
 * (use_own_wino, cpu_conv_wino.c); native bf16 3x3 "same" convs on NHWC
 * activations from 128 channels run as Winograd with float32 GEMMs on their
 * bf16 inputs (use_wino_bf16, cpu_conv_wino_cl.c). SG_CPU_CONV_WINO=0,
 * SG_CPU_CONV_TAPS_F32=dense and SG_CPU_CONV_MM_FWD=1 are measuring aids (no
 * Winograd; float32 NHWC backward passes on oneDNN instead of per tap; the
 * 1x1 forward passes as matmuls too); SG_CPU_CONV_WINO=own sends the 3x3
 * "same" convs to the own Winograd on every ISA and layout, and native
 * bf16 NHWC ones of any channel count to cpu_conv_wino_cl.c (a test aid).
 * SG_CPU_CONV_TAPS_BF16=taps|dense forces native bf16's sparse dilated convs
 * (all three passes) to the per-tap GEMMs or the dense primitive (a
 * measuring aid; auto, the default, is the measured rule).
 *
 * bf16 (SG_PRECISION_BF16, see backend.h for what it computes): two paths
 * with the same definition, chosen once per backend and logged.
 *  - native: entries whose primitive takes bf16 src/weights/dst (oneDNN's
 *    AVX512-BF16 / AMX kernels, fp32 accumulation) in the layout the
 *    primitive chooses; the reorders from and to the plain float32 tensors
 *    do the rounding (round-to-nearest-even). A geometry oneDNN has no bf16
 *    kernel for falls back to the emulation. Two passes run as GEMMs on
 *    bf16 copies of the inputs instead (oneDNN 2.6 has no bf16 GEMM in its
 *    C API, but its matmul primitive is one: cpu_conv_matmul.c), float32
 *    sums rounded once to bf16 like the primitives' output: the backward
 *    passes of sparse dilated convs as per-tap GEMMs (taps_beat_native; the
 *    forward stays dense, dead taps trimmed), and the 1x1 backward passes on
 *    NHWC activations (use_mm_1x1).
 *  - emulated (no bf16 instructions, or SG_CPU_BF16=emulated): the two
 *    inputs are rounded to bf16 values into float32 buffers, the float32
 *    convolution above runs on them (products of bf16 values are exact in
 *    float32, so this is a bf16 convolution with float32 accumulation), and
 *    its result is rounded to bf16 (then added, with accumulate). The
 *    tensors stay float32 in memory holding bf16 values: the numerics of bf16
 *    storage without a second tensor format in the op interface.
 *
 * Weight copies (bf16, both paths): the converted weights of the forward
 * and backward-data convolutions - the native primitive's bf16 layout
 * (brgconv's blocked layouts packed by cpu_conv_pack.c, others by oneDNN's
 * reorder), or the emulation's rounded plain copy - are kept per weight
 * tensor in the backend's weight cache (kernels/weight_cache.h) and
 * converted again only after the weights were written (sgd_step, upload,
 * copy, zero, scale, axpy, free, ops->mem_written mark them stale); entries
 * whose weight layouts are equal share one copy (weight_tag).
 * SG_WEIGHT_CACHE=0 converts on every call, SG_CPU_WEIGHT_PACK=0 through
 * oneDNN's reorder only (test aids: the results are bit-identical).
 *
 * bf16 activation storage (sg_cpu_conv_native_dt, for cpu_act_bf16.c): a
 * native entry may take its x (and, forward, its y) as bf16 bits in plain
 * nchw or nhwc; oneDNN's reorders to and from the primitive's layout are then
 * pure layout changes, and a plain or channels-last primitive reads / writes
 * the caller's bf16 tensor directly.
 *
 * Dead taps: with a dilation as large as the feature map (ASPP rate 36 on a
 * 32x32 map) the outer taps of the kernel only ever read padding. Such taps
 * are trimmed: the primitive runs the smaller kernel on a gathered copy of
 * the live weights (bwd_weight scatters back and writes zeros for the dead
 * taps), the same result for a fraction of the work.
 */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/cpu_conv_internal.h"
#include "kernels/weight_cache.h"

enum { OP_FWD = 0, OP_BWD_DATA = 1, OP_BWD_WEIGHT = 2 };
/* How oneDNN is asked to lay out a primitive's tensors: PLAIN = plain
 * layouts (nchw activations with oihw weights; nhwc ones with hwio weights,
 * for oneDNN's GEMM-based kernels); BLOCKED = the primitive chooses all three
 * (tensors reordered in and out); CL (channels last, NHWC activations only) =
 * activations nhwc as stored, the weights as the primitive wants them (only
 * the small weight tensor is reordered). AUTO: choose_layout per shape. */
enum { LAYOUT_PLAIN = 0, LAYOUT_BLOCKED = 1, LAYOUT_AUTO = 2, LAYOUT_CL = 3, LAYOUT_WINO = 4 };
enum { BF16_OFF = 0, BF16_EMULATED = 1, BF16_NATIVE = 2 };
/* Native bf16 sparse dilated convs: the measured rule (taps_beat_native),
 * or forced to the per-tap path / the dense primitive (a measuring aid). */
enum { TAPS_BF16_AUTO = 0, TAPS_BF16_TAPS = 1, TAPS_BF16_DENSE = 2 };
static const char *op_names[] = {"fwd", "bwd_data", "bwd_weight"};
static const char *layout_names[] = {"plain", "blocked", "auto", "channels-last", "winograd"};

/* One tensor argument of a primitive. */
typedef struct conv_arg {
    int arg; /* DNNL_ARG_* of the convolution */
    int is_output;
    dnnl_memory_t user;       /* plain layout, handle set per call */
    dnnl_memory_t prim;       /* primitive's layout (== user when no reorder) */
    dnnl_primitive_t reorder; /* user->prim (input) or prim->user (output), or NULL */
    int pack;                 /* float32 weights into a bf16 layout sg_conv_pack_bf16
                                 writes itself, faster than the reorder (pmd) */
    dnnl_memory_desc_t pmd;   /* the primitive's layout, with pack */
    size_t prim_bytes;        /* size of the primitive-layout copy (reorder only) */
    size_t user_count;        /* floats in the plain tensor */
} conv_arg;

typedef struct conv_entry {
    sg_conv_desc d;
    int op, layout;
    int act;            /* SG_LAYOUT_* of the activations (the backend's be->layout) */
    int bf16;           /* native bf16 primitive (prim == NULL: oneDNN has none
                           for this geometry; the emulation runs it) */
    int trimmed;        /* kernel reduced to the live taps below */
    int i0, j0, r2, s2; /* first live tap row/col, live kernel size */
    uint64_t wtag;      /* native bf16 fwd / bwd_data: the weight cache's tag
                           for the layout its weights take (weight_tag) */
    int xdt, ydt;       /* native bf16 only: the caller's x (fwd, bwd_weight) and
                           y (fwd) are stored as bf16 bits (SG_ACT_BF16): the
                           user memory is bf16, its reorder a pure layout change
                           (bf16 activation storage, sg_cpu_conv_native_dt) */
    dnnl_primitive_desc_t pd;
    dnnl_primitive_t prim;
    conv_arg a[3];
    dnnl_memory_t scratch; /* NULL when the primitive needs none */
    size_t scratch_bytes;
    struct conv_entry *next;
} conv_entry;

struct sg_cpu_conv_cache {
    dnnl_engine_t eng;
    dnnl_stream_t stream;
    int layout_mode;
    conv_entry *head;
    ws_buf ws[3];              /* blocked copies, one per argument slot */
    ws_buf acc;                /* accumulate scratch (plain layout); native bf16
                                  GEMM paths: the float32 sum before rounding */
    ws_buf wtrim;              /* live-tap weights of a trimmed kernel (plain oihw) */
    ws_buf ctr;                /* GEMM_CENTER's 1x1 weight gradient */
    const uint16_t *dy16;      /* sg_cpu_conv_native_bwd: dy as bf16 (in g16[1]) for
                                  both passes of the call, else NULL */
    ws_buf scratch;            /* oneDNN scratchpad */
    ws_buf dw_wt;              /* NHWC depthwise backward: weights per tap (cpu_conv_dw.c) */
    sg_conv_taps_ws taps;      /* per-tap GEMM path (cpu_conv_taps.c) */
    sg_conv_wino_ws wino;      /* own Winograd path (use_own_wino, cpu_conv_wino.c) */
    sg_conv_wcl_ws wcl;        /* native bf16 NHWC Winograd (use_wino_bf16, cpu_conv_wino_cl.c);
                                  its transforms live in taps' buffers (one path runs at a
                                  time: at 512x1024 bf16 that saves its 57 MB) */
    int precision;             /* SG_PRECISION_* */
    int bf16;                  /* BF16_OFF | BF16_EMULATED | BF16_NATIVE */
    char math[160];            /* how convolutions run, for get_info and the log */
    ws_buf bf_a, bf_b, bf_out; /* emulated bf16: rounded inputs, result */
    ws_buf ph[3];              /* phase path (use_phases): the inputs and output in phase order */
    ws_buf g16[2];             /* native GEMM paths: bf16 copies of the two inputs */
    sg_conv_mm *mm;            /* matmul primitives (cpu_conv_matmul.c) */
    int taps_bf16;             /* SG_CPU_CONV_TAPS_BF16: TAPS_BF16_* */
    int taps_f32_dense;        /* SG_CPU_CONV_TAPS_F32=dense: no fp32 per-tap backward */
    int mm_fwd;                /* SG_CPU_CONV_MM_FWD=1: 1x1 forward passes as matmuls too */
    int wino_off;              /* SG_CPU_CONV_WINO=0: no Winograd (use_wino, use_phases) */
    int wino_own;              /* SG_CPU_CONV_WINO=own: cpu_conv_wino.c on every ISA and layout */
    int wino_isa;              /* oneDNN has Winograd kernels on this ISA (AVX-512) */
    int amx;                   /* oneDNN's ISA has AMX (its bf16 kernels use the tiles) */
    dnnl_memory_desc_t *wmds;  /* distinct native bf16 weight layouts (weight_tag) */
    int n_wmds, cap_wmds;
};

/* oneDNN's name for an ISA (dnnl_get_effective_cpu_isa). */
static const char *isa_name(dnnl_cpu_isa_t isa) {
    switch (isa) {
    case dnnl_cpu_isa_sse41: return "sse41";
    case dnnl_cpu_isa_avx: return "avx";
    case dnnl_cpu_isa_avx2: return "avx2";
    case dnnl_cpu_isa_avx2_vnni: return "avx2_vnni";
    case dnnl_cpu_isa_avx512_mic: return "avx512_mic";
    case dnnl_cpu_isa_avx512_mic_4ops: return "avx512_mic_4ops";
    case dnnl_cpu_isa_avx512_core: return "avx512_core";
    case dnnl_cpu_isa_avx512_core_vnni: return "avx512_core_vnni";
    case dnnl_cpu_isa_avx512_core_bf16: return "avx512_core_bf16";
    case dnnl_cpu_isa_avx512_core_amx: return "avx512_core_amx";
    default: return "unknown";
    }
}

/* The implementation oneDNN picks for a small bf16 forward conv (NULL when
 * it has none): what "native" will run, for the log. */
static const char *probe_bf16_impl(dnnl_engine_t eng, char *buf, size_t cap) {
    dnnl_memory_desc_t x, w, y;
    dnnl_dims_t xd = {2, 32, 8, 8}, wd = {32, 32, 3, 3}, yd = {2, 32, 8, 8};
    DNNL_CHECK(dnnl_memory_desc_init_by_tag(&x, 4, xd, dnnl_bf16, dnnl_format_tag_any));
    DNNL_CHECK(dnnl_memory_desc_init_by_tag(&w, 4, wd, dnnl_bf16, dnnl_format_tag_any));
    DNNL_CHECK(dnnl_memory_desc_init_by_tag(&y, 4, yd, dnnl_bf16, dnnl_format_tag_any));
    dnnl_dims_t st = {1, 1}, dl = {0, 0}, pd = {1, 1};
    dnnl_convolution_desc_t cd;
    DNNL_CHECK(dnnl_dilated_convolution_forward_desc_init(
        &cd, dnnl_forward_training, dnnl_convolution_direct, &x, &w, NULL, &y, st, dl, pd, pd));
    dnnl_primitive_desc_t p;
    if (dnnl_primitive_desc_create(&p, &cd, NULL, eng, NULL) != dnnl_success) return NULL;
    const char *impl = NULL;
    DNNL_CHECK(dnnl_primitive_desc_query(p, dnnl_query_impl_info_str, 0, &impl));
    snprintf(buf, cap, "%s", impl ? impl : "?");
    DNNL_CHECK(dnnl_primitive_desc_destroy(p));
    return buf;
}

/* Picks the bf16 path (native / emulated) and describes the conv math in
 * cc->math. Returns 0, or -1 after logging (bad SG_CPU_BF16, or native asked
 * for where the processor has no bf16 instructions). */
static int choose_precision(sg_cpu_conv_cache *cc, int precision) {
    dnnl_cpu_isa_t isa = dnnl_get_effective_cpu_isa();
    const char *isa_s = isa_name(isa);
    cc->precision = precision;
    if (precision != SG_PRECISION_BF16) {
        cc->bf16 = BF16_OFF;
        snprintf(cc->math, sizeof cc->math, "fp32: oneDNN (ISA %s)", isa_s);
        return 0;
    }
    const char *env = getenv("SG_CPU_BF16");
    int want = 0; /* 0 auto, 1 native, 2 emulated */
    if (env && *env) {
        if (strcmp(env, "native") == 0) want = 1;
        else if (strcmp(env, "emulated") == 0) want = 2;
        else if (strcmp(env, "auto") != 0) {
            SG_ERROR("environment SG_CPU_BF16='%s': expected auto, native or emulated (unset it "
                     "for auto)",
                     env);
            return -1;
        }
    }
    /* bf16 instructions: AVX512-BF16 (its bits are part of AMX's value too) */
    int has = ((unsigned)isa & (unsigned)dnnl_cpu_isa_avx512_core_bf16) ==
              (unsigned)dnnl_cpu_isa_avx512_core_bf16;
    char impl[96];
    const char *probe = has ? probe_bf16_impl(cc->eng, impl, sizeof impl) : NULL;
    if (want == 1 && !probe) {
        SG_ERROR("SG_CPU_BF16=native: oneDNN's ISA on this processor is %s, without bf16 "
                 "instructions (AVX512-BF16 or AMX)%s; unset SG_CPU_BF16 (auto) to emulate bf16",
                 isa_s, has ? " usable for convolutions" : "");
        return -1;
    }
    cc->amx = ((unsigned)isa & (unsigned)dnnl_cpu_isa_avx512_core_amx) ==
              (unsigned)dnnl_cpu_isa_avx512_core_amx;
    if (want != 2 && probe) {
        cc->bf16 = BF16_NATIVE;
        snprintf(cc->math, sizeof cc->math, "bf16: oneDNN native (ISA %s, e.g. %s)%s", isa_s, probe,
                 cc->amx || cc->wino_off ? ""
                                         : "; 3x3 from 128 channels on NHWC: segtrain's Winograd");
    } else {
        cc->bf16 = BF16_EMULATED;
        snprintf(cc->math, sizeof cc->math,
                 "bf16: emulated (%s; inputs, weights and results rounded to bf16, fp32 "
                 "arithmetic on oneDNN ISA %s)",
                 want == 2 ? "SG_CPU_BF16=emulated" : "no bf16 instructions", isa_s);
    }
    return 0;
}

int sg_cpu_avx512(void) {
    return ((unsigned)dnnl_get_effective_cpu_isa() & (unsigned)dnnl_cpu_isa_avx512_core) ==
           (unsigned)dnnl_cpu_isa_avx512_core;
}

/* The index in choices[0..n) of environment variable NAME's value; unset
 * or empty: def. Any other value is fatal, naming the choices. */
static int env_choice(const char *name, const char *const choices[], int n, int def) {
    const char *v = getenv(name);
    if (!v || !*v) return def;
    for (int i = 0; i < n; i++)
        if (strcmp(v, choices[i]) == 0) return i;
    char list[128] = "";
    for (int i = 0; i < n; i++)
        snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s",
                 i == 0       ? ""
                 : i == n - 1 ? " or "
                              : ", ",
                 choices[i]);
    SG_FATAL("environment %s='%s': expected %s (unset it for %s)", name, v, list, choices[def]);
}

sg_cpu_conv_cache *sg_cpu_conv_create(int threads, int precision) {
    (void)threads; /* oneDNN (OpenMP runtime) follows omp_set_num_threads */
    sg_cpu_conv_cache *cc = calloc(1, sizeof *cc);
    if (!cc) SG_FATAL("CPU backend: out of memory creating the conv cache");
    DNNL_CHECK(dnnl_engine_create(&cc->eng, dnnl_cpu, 0));
    DNNL_CHECK(dnnl_stream_create(&cc->stream, cc->eng, dnnl_stream_default_flags));
    cc->mm = sg_conv_mm_create(cc->eng, cc->stream);
    cc->wcl.u = &cc->taps.a, cc->wcl.v = &cc->taps.b, cc->wcl.m = &cc->taps.wt;
    /* measuring aids (docs/BENCHMARKS.md): the native bf16 per-tap paths
     * forced or off; the float32 NHWC backward passes on oneDNN's kernels
     * instead of the per-tap GEMMs (sg_conv_taps_bwd_f32_applicable); the
     * convolutions use_wino and use_phases send to Winograd run direct, as
     * before it; the 1x1 stride-1 NHWC forward passes as matmuls, like their
     * backward ones (use_mm_1x1); the oneDNN layout forced */
    static const char *const taps_bf16[] = {"auto", "taps", "dense"}; /* TAPS_BF16_* */
    static const char *const taps_f32[] = {"auto", "dense"};
    static const char *const off_on[] = {"0", "1"};
    static const char *const wino[] = {"0", "1", "own"};
    static const char *const layouts[] = {"plain", "blocked", "auto"}; /* LAYOUT_* */
    cc->taps_bf16 = env_choice("SG_CPU_CONV_TAPS_BF16", taps_bf16, 3, TAPS_BF16_AUTO);
    cc->taps_f32_dense = env_choice("SG_CPU_CONV_TAPS_F32", taps_f32, 2, 0);
    int wino_choice = env_choice("SG_CPU_CONV_WINO", wino, 3, 1);
    cc->wino_off = wino_choice == 0;
    cc->wino_own = wino_choice == 2;
    cc->wino_isa = sg_cpu_avx512();
    cc->mm_fwd = env_choice("SG_CPU_CONV_MM_FWD", off_on, 2, 0);
    cc->layout_mode = env_choice("SG_CPU_CONV_LAYOUT", layouts, 3, LAYOUT_AUTO);
    if (choose_precision(cc, precision) != 0) {
        sg_cpu_conv_destroy(cc);
        return NULL;
    }
    /* Once per process and path: which convolutions run (several backends
     * of one kind, as in the tests, log it once). */
    static int logged[3];
    if (!__atomic_exchange_n(&logged[cc->bf16], 1, __ATOMIC_RELAXED))
        SG_INFO("CPU backend: convolutions %s%s", cc->math,
                cc->bf16 == BF16_OFF ? "" : "; ONEDNN_VERBOSE=1 lists each primitive");
    return cc;
}

void sg_cpu_conv_describe(const sg_cpu_conv_cache *cc, char *precision, size_t precision_cap,
                          char *math, size_t math_cap) {
    snprintf(precision, precision_cap, "%s", cc->precision == SG_PRECISION_BF16 ? "bf16" : "fp32");
    snprintf(math, math_cap, "%s", cc->math);
}

static void free_arg(conv_arg *a) {
    if (a->reorder) DNNL_CHECK(dnnl_primitive_destroy(a->reorder));
    if (a->prim && a->prim != a->user) DNNL_CHECK(dnnl_memory_destroy(a->prim));
    if (a->user) DNNL_CHECK(dnnl_memory_destroy(a->user));
}

void sg_cpu_conv_destroy(sg_cpu_conv_cache *cc) {
    if (!cc) return;
    conv_entry *e = cc->head;
    while (e) {
        conv_entry *next = e->next;
        for (int i = 0; i < 3; i++) free_arg(&e->a[i]);
        if (e->scratch) DNNL_CHECK(dnnl_memory_destroy(e->scratch));
        if (e->prim) DNNL_CHECK(dnnl_primitive_destroy(e->prim));
        if (e->pd) DNNL_CHECK(dnnl_primitive_desc_destroy(e->pd));
        free(e);
        e = next;
    }
    for (int i = 0; i < 3; i++) sg_cpu_aligned_free(cc->ws[i].p);
    sg_cpu_aligned_free(cc->acc.p);
    sg_cpu_aligned_free(cc->wtrim.p);
    sg_cpu_aligned_free(cc->ctr.p);
    sg_conv_wino_ws_free(&cc->wino);
    sg_conv_wcl_ws_free(&cc->wcl);
    sg_cpu_aligned_free(cc->scratch.p);
    sg_cpu_aligned_free(cc->dw_wt.p);
    sg_cpu_aligned_free(cc->bf_a.p);
    sg_cpu_aligned_free(cc->bf_b.p);
    sg_cpu_aligned_free(cc->bf_out.p);
    for (int i = 0; i < 3; i++) sg_cpu_aligned_free(cc->ph[i].p);
    sg_cpu_aligned_free(cc->g16[0].p);
    sg_cpu_aligned_free(cc->g16[1].p);
    sg_conv_taps_ws_free(&cc->taps);
    sg_conv_mm_destroy(cc->mm);
    free(cc->wmds);
    DNNL_CHECK(dnnl_stream_destroy(cc->stream));
    DNNL_CHECK(dnnl_engine_destroy(cc->eng));
    free(cc);
}

/* Live taps along one dimension: tap t reads rows o*stride - pad + t*dil
 * for o in [0, out); it is dead when all of them fall in the padding. Live
 * taps are contiguous [*t0, *t0 + *len). Returns the new left padding, or
 * -1 when nothing can be trimmed (or trimming would need negative padding). */
static int live_taps(int in, int out, int k, int stride, int pad, int dil, int *t0, int *len,
                     int *pad_r) {
    int first = -1, last = -1;
    for (int t = 0; t < k; t++) {
        int lo = -pad + t * dil, hi = (out - 1) * stride - pad + t * dil;
        if (hi >= 0 && lo < in) {
            if (first < 0) first = t;
            last = t;
        }
    }
    if (first < 0 || (first == 0 && last == k - 1)) return -1;
    int pl = pad - first * dil, n = last - first + 1;
    int pr = (out - 1) * stride + (n - 1) * dil + 1 - in - pl;
    if (pl < 0 || pr < 0) return -1;
    *t0 = first, *len = n, *pad_r = pr;
    return pl;
}

/* Per-shape, per-op layout choice for auto mode, from bench_conv on
 * AVX-512 at the DeepLabV3-ResNet50 shapes (docs/BENCHMARKS.md): the
 * blocked layout wins clearly for spatial kernels (1.3-3x) and for 1x1
 * backward-weights; 1x1 forward / backward-data are a little faster on plain
 * nchw (no reorders); backward-data with few input channels (the RGB stem)
 * is faster plain. Tiny channel counts gain nothing from 16-wide blocks. */
/* Float32 3x3 stride-1 undilated convs with pad 1 and channel counts that
 * are multiples of 16 run as Winograd F(4x4, 3x3) convolutions (oneDNN's
 * jit_wino_4x3, on its blocked layout, the activations reordered in and
 * out): about half the time of the direct kernels in every pass on
 * AVX-512 (bench_conv blocked, 2 threads, Zen 4, ms fwd / bwd-data /
 * bwd-weights, direct -> Winograd: 256->256 at 32x32 13.3/12.5/14.7 ->
 * 6.0/5.7/7.2; 1024->256 49.2/47.8/59.3 -> 21.5/22.5/26.9; 128->128
 * 3.2/3.1/3.7 -> 1.5/1.4/2.0; 64->64 at 64x64 3.3/3.2/3.6 -> 1.8/1.8/2.0).
 * It sums in another order through the transforms: results stay within
 * the conv tolerance of the conformance suite. Not for bf16 (oneDNN has no
 * bf16 Winograd on these ISAs), nor where the kernel is trimmed. Where the
 * library has no Winograd kernel (oneDNN 2.6 has one for AVX-512 only) the
 * rule is off (cc->wino_isa): NCHW convs go to the own Winograd
 * (use_own_wino), NHWC ones keep the paths measured best there (per-tap
 * backward passes, no phase sub-images: on AVX2 the phase path around a
 * direct kernel only added its reorders); should the library
 * still lack one for a shape, the entry is built direct (build_entry). A
 * rule from the ISA and the geometry: the results do not depend on the
 * machine's load. */
static int use_wino(const sg_cpu_conv_cache *cc, const sg_conv_desc *d, int bf16) {
    if (bf16 || cc->wino_off || cc->wino_own || !cc->wino_isa || cc->layout_mode != LAYOUT_AUTO ||
        sg_conv_groups(d) != 1)
        return 0;
    if (d->r != 3 || d->s != 3 || d->stride_h != 1 || d->stride_w != 1 || d->dil_h != 1 ||
        d->dil_w != 1 || d->pad_h != 1 || d->pad_w != 1)
        return 0;
    if (d->c % 16 || d->k % 16 || d->h < 2 || d->w < 2) return 0; /* h, w >= 2: nothing trimmed */
    return 1;
}

/* oneDNN 2.6's 1x1 backward-weights kernels (jit_1x1:avx2, seen here; the
 * AVX-512 one shares the code) gather a strided source into a workspace
 * ("rtus") at offsets computed for the blocked layout: with a channels-last
 * source whose channels are not a multiple of the block they write past it
 * and return wrong, call-to-call varying weight gradients (oneDNN issue
 * 6035; conv_bwd_weight rows n4 c4 24x14 k2 1x1 stride 2 and n1 c3 16x14 k4
 * failed on AVX2). Those convs run on the GEMM-based kernel (plain hwio
 * weights), which has no such workspace. */
static int nxc_rtus_bug(const sg_conv_desc *d) {
    return d->r == 1 && d->s == 1 && (d->stride_h > 1 || d->stride_w > 1) && d->c % 16 != 0 &&
           sg_conv_groups(d) == 1;
}

/* oneDNN 2.6's native bf16 backward-weights kernel on a channels-last
 * source (jit_bf16:avx512_core_bf16, acdb) returns wrong weight gradients
 * (relative error ~1.3) for dilated convs whose input channels are not a
 * multiple of 16 on larger maps: conv_bwd_weight rows n2 c24 35x58 k40 3x3
 * dilation 2x2 and 2x3 (c = 20, 24; k = 32, 40; n = 1, 2) failed on Zen 5,
 * while c = 32, dilation 1 and a 12x14 map passed. Those convs run on the
 * GEMM-based kernel (plain hwio weights), as nxc_rtus_bug's. */
static int nxc_bf16_dilated_bug(const sg_conv_desc *d, int bf16) {
    return bf16 && (d->dil_h > 1 || d->dil_w > 1) && d->c % 16 != 0;
}

/* oneDNN 2.6's native bf16 backward-data kernel for strided 1x1 convs on
 * channels-last tensors (jit_bf16_1x1:avx512_core_bf16, acdb) returns wrong
 * input gradients (relative error 0.6-0.8) when the output channels are not
 * a multiple of the block: rows n1 c16/c32/c48 12x10 and 24x20 k17 1x1
 * stride 2 failed on Zen 5, k = 16, 20, 24 and 32 passed. Those convs run
 * on the GEMM-based kernel, as nxc_rtus_bug's. */
static int nxc_bf16_strided_1x1_bug(const sg_conv_desc *d, int bf16) {
    return bf16 && d->r == 1 && d->s == 1 && (d->stride_h > 1 || d->stride_w > 1) &&
           d->k % 16 != 0 && sg_conv_groups(d) == 1;
}

static int choose_layout(const sg_cpu_conv_cache *cc, const sg_conv_desc *d, int op, int bf16,
                         int act) {
    if (use_wino(cc, d, bf16)) return LAYOUT_WINO;
    /* NHWC activations: oneDNN's channels-last kernels (jit, brgconv) read
     * and write them as stored; reordering them to a blocked layout is what
     * the NHWC layout exists to avoid. The exception, as in nchw: backward-
     * data into few input channels (the RGB stem), where oneDNN's GEMM-based
     * convolution on plain (hwio) weights is ~2x faster (bench_conv nhwc vs
     * nhwc-plain, one thread: 18.7 against 35 ms). */
    if (act == SG_LAYOUT_NHWC) {
        if (cc->layout_mode != LAYOUT_AUTO) return cc->layout_mode;
        if (op == OP_BWD_WEIGHT && (nxc_rtus_bug(d) || nxc_bf16_dilated_bug(d, bf16)))
            return LAYOUT_PLAIN;
        if (op == OP_BWD_DATA && nxc_bf16_strided_1x1_bug(d, bf16)) return LAYOUT_PLAIN;
        return op == OP_BWD_DATA && d->c < 16 && sg_conv_groups(d) == 1 ? LAYOUT_PLAIN : LAYOUT_CL;
    }
    if (cc->layout_mode != LAYOUT_AUTO) return cc->layout_mode;
    if (d->k < 16) return LAYOUT_PLAIN;
    /* The kernel size that runs is the one left after trimming dead taps. */
    int t0, r = d->r, s = d->s, pr;
    live_taps(d->h, d->oh, d->r, d->stride_h, d->pad_h, d->dil_h, &t0, &r, &pr);
    live_taps(d->w, d->ow, d->s, d->stride_w, d->pad_w, d->dil_w, &t0, &s, &pr);
    int one_by_one = r == 1 && s == 1;
    /* bf16 (bench_conv bf16 on AMX): oneDNN's GEMM-based 1x1 backward-weights
     * on plain layouts is ~3x faster than its blocked AMX kernel, while for
     * spatial kernels the blocked AMX kernel wins 1.5-4x (single thread) */
    if (op == OP_BWD_WEIGHT)
        return (one_by_one && (d->c < 16 || bf16)) ? LAYOUT_PLAIN : LAYOUT_BLOCKED;
    if (one_by_one) return LAYOUT_PLAIN;
    if (op == OP_BWD_DATA && d->c < 16) return LAYOUT_PLAIN;
    return LAYOUT_BLOCKED;
}

static void plain_md(dnnl_memory_desc_t *md, int a, int b, int c, int d, dnnl_data_type_t dt,
                     int tag) {
    dnnl_dims_t dims = {a, b, c, d};
    DNNL_CHECK(dnnl_memory_desc_init_by_tag(md, 4, dims, dt, tag));
}

/* The weights of d with a kr x ks kernel: oihw [k, c, kr, ks] ungrouped;
 * grouped, oneDNN's goihw [g, k/g, c/g, kr, ks], which is PyTorch's
 * [k, c/g, kr, ks] in memory. fmt W_ANY: the primitive picks the layout;
 * W_HWIO, hwio / hwigo (the plain weights oneDNN's GEMM-based convolution
 * takes with nhwc activations: with oihw it has only a reference kernel). */
enum { W_OIHW = 0, W_ANY = 1, W_HWIO = 2 };
static void weight_md(dnnl_memory_desc_t *md, const sg_conv_desc *d, int kr, int ks,
                      dnnl_data_type_t dt, int fmt) {
    int g = sg_conv_groups(d);
    int any = fmt == W_ANY, hwio = fmt == W_HWIO;
    if (g == 1) {
        plain_md(md, d->k, d->c, kr, ks, dt,
                 any    ? dnnl_format_tag_any
                 : hwio ? dnnl_hwio
                        : dnnl_oihw);
        return;
    }
    dnnl_dims_t dims = {g, d->k / g, d->c / g, kr, ks};
    dnnl_format_tag_t tag = any ? dnnl_format_tag_any : hwio ? dnnl_hwigo : dnnl_goihw;
    DNNL_CHECK(dnnl_memory_desc_init_by_tag(md, 5, dims, dt, tag));
}

/* A float32 [k][c][r][s] tensor, dense: what cpu_conv_pack.c reads. */
static int dense_oihw_f32(const dnnl_memory_desc_t *md) {
    const dnnl_blocking_desc_t *b = &md->format_desc.blocking;
    if (md->ndims != 4 || md->data_type != dnnl_f32 || md->format_kind != dnnl_blocked) return 0;
    if (md->offset0 != 0 || b->inner_nblks != 0) return 0;
    const dnnl_dim_t *d = md->dims;
    return b->strides[3] == 1 && b->strides[2] == d[3] && b->strides[1] == d[2] * d[3] &&
           b->strides[0] == d[1] * d[2] * d[3];
}

/* SG_CPU_WEIGHT_PACK=0: the bf16 weights through oneDNN's reorder always
 * (a measuring and test aid; the bytes are the same). */
static int getenv_pack_off(void) {
    const char *v = getenv("SG_CPU_WEIGHT_PACK");
    return v && strcmp(v, "0") == 0;
}

/* Builds one argument: user memory in plain layout, and if the primitive
 * chose another layout, a memory for it plus the reorder between them
 * (float32 weights into the bf16 layouts of cpu_conv_pack.c: packed there
 * instead). */
static void build_arg(sg_cpu_conv_cache *cc, conv_entry *e, int slot, int arg, int is_output,
                      const dnnl_memory_desc_t *user_md, dnnl_query_t query) {
    conv_arg *a = &e->a[slot];
    a->arg = arg;
    a->is_output = is_output;
    a->user_count = dnnl_memory_desc_get_size(user_md) / sizeof(float);
    const dnnl_memory_desc_t *pmd = dnnl_primitive_desc_query_md(e->pd, query, 0);
    if (!pmd) SG_FATAL("oneDNN: primitive has no memory desc for argument %d (a bug)", arg);
    DNNL_CHECK(dnnl_memory_create(&a->user, user_md, cc->eng, DNNL_MEMORY_NONE));
    if (dnnl_memory_desc_equal(user_md, pmd)) {
        a->prim = a->user;
        return;
    }
    a->prim_bytes = dnnl_memory_desc_get_size(pmd);
    DNNL_CHECK(dnnl_memory_create(&a->prim, pmd, cc->eng, DNNL_MEMORY_NONE));
    dnnl_primitive_desc_t rpd;
    if (is_output)
        DNNL_CHECK(dnnl_reorder_primitive_desc_create(&rpd, pmd, cc->eng, user_md, cc->eng, NULL));
    else DNNL_CHECK(dnnl_reorder_primitive_desc_create(&rpd, user_md, cc->eng, pmd, cc->eng, NULL));
    DNNL_CHECK(dnnl_primitive_create(&a->reorder, rpd));
    DNNL_CHECK(dnnl_primitive_desc_destroy(rpd));
    if (arg == DNNL_ARG_WEIGHTS && !is_output && dense_oihw_f32(user_md) &&
        sg_conv_pack_bf16_ok(pmd) && !getenv_pack_off()) {
        a->pack = 1;
        a->pmd = *pmd;
    }
    /* ws[slot] is grown when the entry first runs (run_entry): conv_prepare
     * builds the float32-input entry of every bf16 conv, which a conv fed
     * bf16 activations never runs, and the weights' slot goes unused where
     * the weight cache holds the copy */
}

/* Fatal, naming the geometry, unless d is a valid, consistently filled conv. */
static void validate_desc(const sg_conv_desc *d) {
    if (d->n <= 0 || d->c <= 0 || d->k <= 0 || d->r <= 0 || d->s <= 0 || d->stride_h <= 0 ||
        d->stride_w <= 0 || d->dil_h <= 0 || d->dil_w <= 0 || d->pad_h < 0 || d->pad_w < 0 ||
        d->oh <= 0 || d->ow <= 0)
        SG_FATAL("conv: invalid geometry n=%d c=%d h=%d w=%d k=%d r=%d s=%d stride=%d,%d "
                 "pad=%d,%d dil=%d,%d oh=%d ow=%d (fill oh/ow with sg_conv_desc_init)",
                 d->n, d->c, d->h, d->w, d->k, d->r, d->s, d->stride_h, d->stride_w, d->pad_h,
                 d->pad_w, d->dil_h, d->dil_w, d->oh, d->ow);
    if (sg_conv_desc_check(d) != 0)
        SG_FATAL("conv: groups=%d must be 0, 1 or a positive divisor of both the input channels "
                 "c=%d and the output channels k=%d (n=%d h=%d w=%d r=%d s=%d); fix the layer's "
                 "groups",
                 d->groups, d->c, d->k, d->n, d->h, d->w, d->r, d->s);
    sg_conv_desc chk = *d;
    if (sg_conv_desc_init(&chk) != 0 || chk.oh != d->oh || chk.ow != d->ow)
        SG_FATAL("conv: output size %dx%d does not match the geometry (expected %dx%d for "
                 "input %dx%d, kernel %dx%d, stride %d,%d, pad %d,%d, dilation %d,%d); fill "
                 "oh/ow with sg_conv_desc_init",
                 d->oh, d->ow, chk.oh, chk.ow, d->h, d->w, d->r, d->s, d->stride_h, d->stride_w,
                 d->pad_h, d->pad_w, d->dil_h, d->dil_w);
}

/* Creates a primitive descriptor; for a bf16 entry oneDNN may have no
 * kernel for the geometry (returns 0 then: the caller falls back to the
 * emulation), anything else that fails is fatal. */
static int create_pd(sg_cpu_conv_cache *cc, const conv_entry *e, dnnl_primitive_desc_t *pd,
                     const void *desc, const_dnnl_primitive_attr_t attr,
                     const_dnnl_primitive_desc_t hint) {
    dnnl_status_t st = dnnl_primitive_desc_create(pd, desc, attr, cc->eng, hint);
    if (st == dnnl_unimplemented && e->bf16) return 0;
    DNNL_CHECK(st);
    return 1;
}

/* The weight cache's tag (kernels/weight_cache.h) for the weights of a
 * native bf16 entry: one per distinct weight layout oneDNN picked (so a
 * forward and a backward-data primitive wanting the same layout share one
 * bf16 copy) and per first live tap (a trimmed kernel's copy holds only the
 * live taps). Tag 0 is the emulation's rounded plain copy. */
static uint64_t weight_tag(sg_cpu_conv_cache *cc, const conv_entry *e) {
    const dnnl_memory_desc_t *md = dnnl_primitive_desc_query_md(e->pd, dnnl_query_weights_md, 0);
    int id = 0;
    while (id < cc->n_wmds && !dnnl_memory_desc_equal(&cc->wmds[id], md)) id++;
    if (id == cc->n_wmds) {
        if (cc->n_wmds == cc->cap_wmds) {
            int cap = cc->cap_wmds ? 2 * cc->cap_wmds : 32;
            dnnl_memory_desc_t *n = realloc(cc->wmds, (size_t)cap * sizeof *n);
            if (!n) SG_FATAL("CPU backend: out of memory in the conv cache");
            cc->wmds = n;
            cc->cap_wmds = cap;
        }
        cc->wmds[cc->n_wmds++] = *md;
    }
    return 1 + ((uint64_t)id << 32) + ((uint64_t)(unsigned)e->i0 << 16) + (unsigned)e->j0;
}

/* e->pd for pass op with algorithm alg: the forward descriptor is the
 * primitive itself for OP_FWD, the hint for the backward ones. Returns 1,
 * 0 when a bf16 entry has no kernel (create_pd), or -1 when `optional` and
 * the library has no kernel of this algorithm (nothing kept); other
 * failures are fatal. */
static int make_pd(sg_cpu_conv_cache *cc, conv_entry *e, int op, dnnl_alg_kind_t alg,
                   const dnnl_memory_desc_t *xa, const dnnl_memory_desc_t *wa,
                   const dnnl_memory_desc_t *ya, const dnnl_dims_t strides, const dnnl_dims_t dil,
                   const dnnl_dims_t pad, const dnnl_dims_t pad_r, const_dnnl_primitive_attr_t attr,
                   int optional) {
    dnnl_convolution_desc_t fd, bd;
    DNNL_CHECK(dnnl_dilated_convolution_forward_desc_init(&fd, dnnl_forward_training, alg, xa, wa,
                                                          NULL, ya, strides, dil, pad, pad_r));
    dnnl_primitive_desc_t fpd = NULL;
    if (optional) {
        if (dnnl_primitive_desc_create(&fpd, &fd, attr, cc->eng, NULL) != dnnl_success) return -1;
    } else if (!create_pd(cc, e, &fpd, &fd, attr, NULL)) {
        return 0;
    }
    if (op == OP_FWD) {
        e->pd = fpd;
        return 1;
    }
    if (op == OP_BWD_DATA)
        DNNL_CHECK(dnnl_dilated_convolution_backward_data_desc_init(&bd, alg, xa, wa, ya, strides,
                                                                    dil, pad, pad_r));
    else
        DNNL_CHECK(dnnl_dilated_convolution_backward_weights_desc_init(&bd, alg, xa, wa, NULL, ya,
                                                                       strides, dil, pad, pad_r));
    int ok;
    if (optional) {
        ok = dnnl_primitive_desc_create(&e->pd, &bd, attr, cc->eng, fpd) == dnnl_success ? 1 : -1;
        if (ok < 0) e->pd = NULL;
    } else {
        ok = create_pd(cc, e, &e->pd, &bd, attr, fpd);
    }
    DNNL_CHECK(dnnl_primitive_desc_destroy(fpd));
    return ok;
}

static conv_entry *build_entry(sg_cpu_conv_cache *cc, const sg_conv_desc *d, int op, int layout,
                               int act, int bf16, int xdt, int ydt) {
    validate_desc(d);
    conv_entry *e = calloc(1, sizeof *e);
    if (!e) SG_FATAL("CPU backend: out of memory in the conv cache");
    e->d = *d;
    e->op = op;
    e->layout = layout;
    e->act = act;
    e->bf16 = bf16;
    e->xdt = xdt;
    e->ydt = ydt;
    dnnl_data_type_t pdt = bf16 ? dnnl_bf16 : dnnl_f32; /* the primitive's tensors */

    /* Kernel rows/cols that only read padding are dropped (see top). */
    int kr = d->r, ks = d->s, pl_h = d->pad_h, pl_w = d->pad_w, pr_h = d->pad_h, pr_w = d->pad_w;
    int ti0 = 0, tr = d->r, tpr_h = 0, tj0 = 0, ts = d->s, tpr_w = 0;
    int nph = live_taps(d->h, d->oh, d->r, d->stride_h, d->pad_h, d->dil_h, &ti0, &tr, &tpr_h);
    int npw = live_taps(d->w, d->ow, d->s, d->stride_w, d->pad_w, d->dil_w, &tj0, &ts, &tpr_w);
    if (nph >= 0) kr = tr, pl_h = nph, pr_h = tpr_h, e->i0 = ti0, e->trimmed = 1;
    if (npw >= 0) ks = ts, pl_w = npw, pr_w = tpr_w, e->j0 = tj0, e->trimmed = 1;
    e->r2 = kr, e->s2 = ks;

    /* the user's tensors: activations as stored (nchw / nhwc), oihw weights */
    int tag = act == SG_LAYOUT_NHWC ? dnnl_nhwc : dnnl_nchw;
    dnnl_memory_desc_t x_md, w_md, y_md, xa, wa, ya;
    plain_md(&x_md, d->n, d->c, d->h, d->w, xdt == SG_ACT_BF16 ? dnnl_bf16 : dnnl_f32, tag);
    weight_md(&w_md, d, kr, ks, dnnl_f32, W_OIHW);
    plain_md(&y_md, d->n, d->k, d->oh, d->ow, ydt == SG_ACT_BF16 ? dnnl_bf16 : dnnl_f32, tag);
    /* the primitive's: see the LAYOUT_* enum */
    int any_act = layout == LAYOUT_BLOCKED || layout == LAYOUT_WINO;
    int wfmt = layout != LAYOUT_PLAIN ? W_ANY : act == SG_LAYOUT_NHWC ? W_HWIO : W_OIHW;
    plain_md(&xa, d->n, d->c, d->h, d->w, pdt, any_act ? dnnl_format_tag_any : tag);
    weight_md(&wa, d, kr, ks, pdt, wfmt);
    plain_md(&ya, d->n, d->k, d->oh, d->ow, pdt, any_act ? dnnl_format_tag_any : tag);

    dnnl_dims_t strides = {d->stride_h, d->stride_w};
    dnnl_dims_t dil = {d->dil_h - 1, d->dil_w - 1}; /* oneDNN counts extra gaps */
    dnnl_dims_t pad = {pl_h, pl_w}, pad_r = {pr_h, pr_w};

    dnnl_primitive_attr_t attr;
    DNNL_CHECK(dnnl_primitive_attr_create(&attr));
    DNNL_CHECK(dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user));

    /* LAYOUT_WINO asks for Winograd first (use_wino); where the library has
     * no such kernel for a pass (no AVX-512) that pass is direct on the
     * same blocked layout. */
    int ok = -1;
    if (layout == LAYOUT_WINO) {
        ok = make_pd(cc, e, op, dnnl_convolution_winograd, &xa, &wa, &ya, strides, dil, pad, pad_r,
                     attr, 1);
        if (ok < 0)
            SG_DEBUG("conv cache: no Winograd kernel for %s n%d c%d %dx%d k%d here: direct",
                     op_names[op], d->n, d->c, d->h, d->w, d->k);
    }
    if (ok < 0)
        ok = make_pd(cc, e, op, dnnl_convolution_direct, &xa, &wa, &ya, strides, dil, pad, pad_r,
                     attr, 0);
    DNNL_CHECK(dnnl_primitive_attr_destroy(attr));
    if (!ok) {
        /* no bf16 kernel here: this entry marks the geometry as emulated */
        SG_DEBUG("conv cache: %s n%d c%d %dx%d k%d %dx%d s%d p%d d%d: oneDNN has no bf16 "
                 "kernel; emulated",
                 op_names[op], d->n, d->c, d->h, d->w, d->k, d->r, d->s, d->stride_h, d->pad_h,
                 d->dil_h);
        e->next = cc->head;
        cc->head = e;
        return e;
    }
    DNNL_CHECK(dnnl_primitive_create(&e->prim, e->pd));

    if (op == OP_FWD) {
        build_arg(cc, e, 0, DNNL_ARG_SRC, 0, &x_md, dnnl_query_src_md);
        build_arg(cc, e, 1, DNNL_ARG_WEIGHTS, 0, &w_md, dnnl_query_weights_md);
        build_arg(cc, e, 2, DNNL_ARG_DST, 1, &y_md, dnnl_query_dst_md);
    } else if (op == OP_BWD_DATA) {
        build_arg(cc, e, 0, DNNL_ARG_DIFF_DST, 0, &y_md, dnnl_query_diff_dst_md);
        build_arg(cc, e, 1, DNNL_ARG_WEIGHTS, 0, &w_md, dnnl_query_weights_md);
        build_arg(cc, e, 2, DNNL_ARG_DIFF_SRC, 1, &x_md, dnnl_query_diff_src_md);
    } else {
        build_arg(cc, e, 0, DNNL_ARG_SRC, 0, &x_md, dnnl_query_src_md);
        build_arg(cc, e, 1, DNNL_ARG_DIFF_DST, 0, &y_md, dnnl_query_diff_dst_md);
        build_arg(cc, e, 2, DNNL_ARG_DIFF_WEIGHTS, 1, &w_md, dnnl_query_diff_weights_md);
    }
    /* Accumulation goes through a plain-layout scratch of the output's size. */
    if (op != OP_FWD) ws_reserve(&cc->acc, e->a[2].user_count * sizeof(float));
    if (e->trimmed)
        ws_reserve(&cc->wtrim, (size_t)d->k * (d->c / sg_conv_groups(d)) * kr * ks * sizeof(float));

    const dnnl_memory_desc_t *smd =
        dnnl_primitive_desc_query_md(e->pd, dnnl_query_scratchpad_md, 0);
    e->scratch_bytes = smd ? dnnl_memory_desc_get_size(smd) : 0;
    if (e->scratch_bytes) {
        DNNL_CHECK(dnnl_memory_create(&e->scratch, smd, cc->eng, DNNL_MEMORY_NONE));
        ws_reserve(&cc->scratch, e->scratch_bytes);
    }
    if (bf16 && op != OP_BWD_WEIGHT) e->wtag = weight_tag(cc, e);
    const char *impl = NULL;
    DNNL_CHECK(dnnl_primitive_desc_query(e->pd, dnnl_query_impl_info_str, 0, &impl));
    SG_DEBUG("conv cache: %s%s n%d c%d %dx%d k%d %dx%d s%d p%d d%d g%d -> %s (%s layout, "
             "kernel %dx%d after trimming, scratchpad %zu B)",
             op_names[op], bf16 ? " bf16" : "", d->n, d->c, d->h, d->w, d->k, d->r, d->s,
             d->stride_h, d->pad_h, d->dil_h, sg_conv_groups(d), impl ? impl : "?",
             layout_names[layout], kr, ks, e->scratch_bytes);
    e->next = cc->head;
    cc->head = e;
    return e;
}

/* bf16 = 1: a native bf16 entry (the plain layout's reorder is then a plain
 * conversion). */
static conv_entry *get_entry_dt(sg_cpu_conv_cache *cc, const sg_conv_desc *d0, int op, int act,
                                int bf16, int xdt, int ydt) {
    /* groups 0 and 1 are one geometry: one entry */
    sg_conv_desc key = *d0;
    if (key.groups == 0) key.groups = 1; /* anything invalid stays, to be refused */
    const sg_conv_desc *d = &key;
    int layout = choose_layout(cc, d, op, bf16, act);
    for (conv_entry *e = cc->head; e; e = e->next)
        if (e->op == op && e->layout == layout && e->act == act && e->bf16 == bf16 &&
            e->xdt == xdt && e->ydt == ydt && memcmp(&e->d, d, sizeof *d) == 0)
            return e;
    return build_entry(cc, d, op, layout, act, bf16, xdt, ydt);
}

static conv_entry *get_entry(sg_cpu_conv_cache *cc, const sg_conv_desc *d, int op, int act,
                             int bf16) {
    return get_entry_dt(cc, d, op, act, bf16, SG_ACT_F32, SG_ACT_F32);
}

static void exec2(sg_cpu_conv_cache *cc, dnnl_primitive_t p, dnnl_memory_t from, dnnl_memory_t to) {
    dnnl_exec_arg_t args[2] = {{DNNL_ARG_FROM, from}, {DNNL_ARG_TO, to}};
    DNNL_CHECK(dnnl_primitive_execute(p, cc->stream, 2, args));
}

/* Copies the live taps of w [k,c/g,r,s] into t [k,c/g,r2,s2]. */
static void gather_taps(const conv_entry *e, const float *w, float *t) {
    const sg_conv_desc *d = &e->d;
    long planes = (long)d->k * (d->c / sg_conv_groups(d));
#pragma omp parallel for schedule(static) if ((size_t)planes * d->r * d->s >= SG_CPU_PAR_MIN)
    for (long pl = 0; pl < planes; pl++)
        for (int i = 0; i < e->r2; i++)
            for (int j = 0; j < e->s2; j++)
                t[((size_t)pl * e->r2 + i) * e->s2 + j] =
                    w[((size_t)pl * d->r + e->i0 + i) * d->s + e->j0 + j];
}

/* dw (+)= the live-tap gradient t, scattered; dead taps get 0 (or keep
 * their value when accumulating). */
static void scatter_taps(const conv_entry *e, const float *t, float *dw, int accumulate) {
    const sg_conv_desc *d = &e->d;
    long planes = (long)d->k * (d->c / sg_conv_groups(d));
#pragma omp parallel for schedule(static) if ((size_t)planes * d->r * d->s >= SG_CPU_PAR_MIN)
    for (long pl = 0; pl < planes; pl++) {
        float *o = dw + (size_t)pl * d->r * d->s;
        if (!accumulate)
            for (int q = 0; q < d->r * d->s; q++) o[q] = 0.0f;
        for (int i = 0; i < e->r2; i++)
            for (int j = 0; j < e->s2; j++)
                o[(e->i0 + i) * d->s + e->j0 + j] += t[((size_t)pl * e->r2 + i) * e->s2 + j];
    }
}

/* Runs entry e on in0, in1 -> out (accumulating into out if asked). wc:
 * the weight cache (NULL: none), used by native bf16 fwd / bwd_data entries
 * for their converted weights (in1). */
static void run_entry(sg_cpu_conv_cache *cc, conv_entry *e, const void *in0, const float *in1,
                      void *out, int accumulate, sg_wcache *wc) {
    const void *ptrs[3] = {in0, in1, accumulate ? cc->acc.p : out};
    /* cached bf16 weights: converted (gathered, reordered) only when stale */
    void *wcopy = NULL;
    int refill = 1;
    if (wc && e->bf16 && e->op != OP_BWD_WEIGHT && e->a[1].reorder) {
        const sg_conv_desc *d = &e->d;
        size_t nw = sg_conv_weight_count(d);
        wcopy = sg_wcache_get(wc, in1, nw * sizeof(float), e->wtag, e->a[1].prim_bytes, &refill);
    }
    int scatter = 0;
    if (e->trimmed) {
        if (e->op == OP_BWD_WEIGHT) {
            ptrs[2] = cc->wtrim.p; /* scattered into out below, accumulate included */
            scatter = 1;
        } else {
            if (refill) gather_taps(e, in1, cc->wtrim.p);
            ptrs[1] = cc->wtrim.p;
        }
    }
    dnnl_exec_arg_t args[4];
    int nargs = 0;
    for (int i = 0; i < 3; i++) {
        conv_arg *a = &e->a[i];
        DNNL_CHECK(dnnl_memory_set_data_handle(a->user, (void *)ptrs[i]));
        if (a->reorder) {
            if (!(i == 1 && wcopy)) ws_reserve(&cc->ws[i], a->prim_bytes); /* first run only */
            void *prim_buf = (i == 1 && wcopy) ? wcopy : cc->ws[i].p;
            DNNL_CHECK(dnnl_memory_set_data_handle(a->prim, prim_buf));
            if (!a->is_output && (i != 1 || refill)) {
                if (!a->pack || !sg_conv_pack_bf16(&a->pmd, ptrs[i], prim_buf))
                    exec2(cc, a->reorder, a->user, a->prim);
            }
        }
        args[nargs++] = (dnnl_exec_arg_t){a->arg, a->prim};
    }
    if (e->scratch) {
        DNNL_CHECK(dnnl_memory_set_data_handle(e->scratch, cc->scratch.p));
        args[nargs++] = (dnnl_exec_arg_t){DNNL_ARG_SCRATCHPAD, e->scratch};
    }
    DNNL_CHECK(dnnl_primitive_execute(e->prim, cc->stream, nargs, args));
    if (e->a[2].reorder) exec2(cc, e->a[2].reorder, e->a[2].prim, e->a[2].user);
    DNNL_CHECK(dnnl_stream_wait(cc->stream));
    if (scatter) scatter_taps(e, cc->wtrim.p, out, accumulate);
    else if (accumulate) sg_cpu_add_into(out, cc->acc.p, e->a[2].user_count);
}

/* Auto mode sends sparse dilated convs (ASPP) to the per-tap GEMM path
 * (ungrouped only: grouped and depthwise convs run on oneDNN). */
static int use_taps(const sg_cpu_conv_cache *cc, const sg_conv_desc *d) {
    if (cc->layout_mode != LAYOUT_AUTO) return 0;
    validate_desc(d); /* the oneDNN path validates when it builds an entry */
    return sg_conv_groups(d) == 1 && sg_conv_taps_applicable(d);
}

/* use_taps for one pass in activation layout act. The forward pass of NHWC
 * activations stays on oneDNN's dense channels-last kernel (brgconv), which
 * skips the taps that read padding itself and beats the per-tap GEMMs
 * (float32, R50's ASPP 3x3 2048->256 on 32x32 maps, 2 threads, ms per step
 * with --profile, per-tap / dense, alternated twice: rate 12 36.7, 38.5 /
 * 27.3, 27.3; rate 24 22.6, 25.6 / 13.1, 13.0; the bf16 rule below found
 * the same); NCHW's blocked kernels do not skip them. The float32 backward
 * passes in NHWC take the per-tap GEMMs more widely
 * (sg_conv_taps_bwd_f32_applicable). */
static int use_taps_op(const sg_cpu_conv_cache *cc, const sg_conv_desc *d, int op, int act) {
    if (op != OP_FWD && act == SG_LAYOUT_NHWC && cc->layout_mode == LAYOUT_AUTO) {
        validate_desc(d);
        if (cc->taps_f32_dense || use_wino(cc, d, 0)) return 0; /* Winograd beats both */
        return sg_conv_groups(d) == 1 && sg_conv_taps_bwd_f32_applicable(d);
    }
    return use_taps(cc, d) && (op != OP_FWD || act != SG_LAYOUT_NHWC);
}

/* The conv cache of be, with OpenMP set to be's thread count: oneDNN sizes
 * a primitive's work split and scratchpad for the thread count at creation
 * and must not run it with more threads (another backend in the process may
 * have changed the count since). */
static sg_cpu_conv_cache *conv_cache(sg_backend *be) {
    sg_cpu *c = sg_cpu_of(be);
    if (omp_get_max_threads() != c->threads) omp_set_num_threads(c->threads);
    return c->conv;
}

/* Auto mode runs the backward passes of dilated depthwise convs directly
 * (cpu_conv_dw.c: oneDNN's are GEMM-based there). */
static int use_dw(const sg_cpu_conv_cache *cc, const sg_conv_desc *d, int op) {
    if (cc->layout_mode != LAYOUT_AUTO || op == OP_FWD) return 0;
    validate_desc(d);
    return sg_conv_dw_applicable(d);
}

/* Element counts of an op's inputs and output: fwd x, w -> y; bwd_data
 * dy, w -> dx; bwd_weight x, dy -> dw. */
static void op_counts(const sg_conv_desc *d, int op, size_t *n0, size_t *n1, size_t *nout) {
    size_t nx = (size_t)d->n * d->c * d->h * d->w, nw = sg_conv_weight_count(d);
    size_t ny = (size_t)d->n * d->k * d->oh * d->ow;
    if (op == OP_FWD) *n0 = nx, *n1 = nw, *nout = ny;
    else if (op == OP_BWD_DATA) *n0 = ny, *n1 = nw, *nout = nx;
    else *n0 = nx, *n1 = ny, *nout = nw;
}

/* Auto mode runs the backward passes of 1x1 stride-1 convs on NHWC
 * activations as one matmul (cpu_conv_matmul.c) where that beats oneDNN's
 * conv primitives; a rule from the geometry alone (never from timings: the
 * results must not depend on the machine's load). Measured on AVX512-BF16
 * (Zen 5, no AMX), batch 2 at 32x32 / 64x64, ResNet-50's 1x1 shapes, best
 * of 4, the conv primitive's time over the matmul's (> 1: matmul faster;
 * docs/BENCHMARKS.md "Convolutions as matmul on the CPU"):
 *  - backward-weights, dW [k x c] = dy^T x: the matmul splits the work over
 *    the k x c output only, not the long pixel reduction, so it needs a
 *    large weight: k >= 512 or k*c >= 1024*256. At 2 threads bf16 / fp32:
 *    512->2048 1.39 / 1.36, 1024->2048 1.32 / 1.48, 128->512 1.19 / 1.01,
 *    2048->256 1.38 / 1.15, 1280->256 1.30 / 1.36; below the rule 512->256
 *    0.92 / 0.96, 512->128 0.84 / 0.94, 256->64 0.48 / 1.39. One thread:
 *    1.09-1.51 on every shape of the rule. 1024->256 (ResNet-50's layer3,
 *    5 calls a step) was 0.96 / 1.11 there, but inside the step (`segtrain
 *    bench --profile`, ms per step for the 5, oneDNN / matmul, alternated
 *    twice) it is 10.5-11.0 / 8.0-8.2 bf16 and 15.7-16.6 / 14.5-15.0 fp32 on
 *    2 threads, 19.9-22.5 / 14.5-14.6 bf16 on 1: in the rule since.
 *  - backward-data, dx = dy W [k x c]: k >= 128. 2 threads bf16 1.04-2.04
 *    (512->2048), fp32 0.93 (256->128) to 1.69 (2048->512); 1 thread
 *    0.98-1.67; k = 64 is even or slower (fp32 256->64: 0.79).
 * The forward pass is even (oneDNN's brgconv is this GEMM already). */
static int use_mm_1x1(const sg_cpu_conv_cache *cc, const sg_conv_desc *d, int op, int act) {
    if (cc->layout_mode != LAYOUT_AUTO || act != SG_LAYOUT_NHWC) return 0;
    if (op == OP_FWD && !cc->mm_fwd) return 0;
    validate_desc(d);
    if (!sg_conv_mm_1x1(d)) return 0;
    if (op == OP_FWD) return 1;
    if (op == OP_BWD_DATA) return d->k >= 128;
    return d->k >= 512 || (long)d->k * d->c >= 1024L * 256;
}

/* Float32 dilated 3x3 convs on NHWC activations as undilated Winograd
 * convs over their phase sub-images (cpu_conv_phases.c): the undilated
 * conv of sg_conv_phases_desc runs as use_wino's Winograd F(4x4, 3x3),
 * where a dilated conv runs direct (or per tap) at about twice the time.
 * Measured with bench_conv nhwc, 2 threads, Zen 4, ms fwd / bwd-data /
 * bwd-weights, before -> after: see docs/BENCHMARKS.md ("Winograd"). */
static int use_phases(const sg_cpu_conv_cache *cc, const sg_conv_desc *d, int act) {
    if (act != SG_LAYOUT_NHWC || cc->layout_mode != LAYOUT_AUTO) return 0;
    validate_desc(d);
    if (!sg_conv_phases_applicable(d)) return 0;
    sg_conv_desc p = sg_conv_phases_desc(d);
    return use_wino(cc, &p, 0);
}

static void conv_phases(sg_cpu_conv_cache *cc, const sg_conv_desc *d, int op, const float *in0,
                        const float *in1, float *out, int accumulate) {
    sg_conv_desc p = sg_conv_phases_desc(d);
    int D = d->dil_h;
    size_t nx = (size_t)d->n * d->c * d->h * d->w, ny = (size_t)d->n * d->k * d->oh * d->ow;
    conv_entry *e = get_entry(cc, &p, op, SG_LAYOUT_NHWC, 0);
    if (op == OP_FWD) {
        ws_reserve(&cc->ph[0], nx * sizeof(float));
        ws_reserve(&cc->ph[2], ny * sizeof(float));
        sg_conv_to_phases(cc->ph[0].p, in0, d->n, d->h, d->w, d->c, D);
        run_entry(cc, e, cc->ph[0].p, in1, cc->ph[2].p, 0, NULL);
        sg_conv_from_phases(out, cc->ph[2].p, d->n, d->oh, d->ow, d->k, D, 0);
    } else if (op == OP_BWD_DATA) {
        ws_reserve(&cc->ph[0], ny * sizeof(float));
        ws_reserve(&cc->ph[2], nx * sizeof(float));
        sg_conv_to_phases(cc->ph[0].p, in0, d->n, d->oh, d->ow, d->k, D);
        run_entry(cc, e, cc->ph[0].p, in1, cc->ph[2].p, 0, NULL);
        sg_conv_from_phases(out, cc->ph[2].p, d->n, d->h, d->w, d->c, D, accumulate);
    } else {
        ws_reserve(&cc->ph[0], nx * sizeof(float));
        ws_reserve(&cc->ph[1], ny * sizeof(float));
        sg_conv_to_phases(cc->ph[0].p, in0, d->n, d->h, d->w, d->c, D);
        sg_conv_to_phases(cc->ph[1].p, in1, d->n, d->oh, d->ow, d->k, D);
        run_entry(cc, e, cc->ph[0].p, cc->ph[1].p, out, accumulate, NULL);
    }
}

/* Where oneDNN has no Winograd kernel (AVX2: cc->wino_isa off), float32
 * 3x3 stride-1 convs with padding = dilation on NCHW activations run as
 * cpu_conv_wino.c's F(4x4, 3x3), dilated ones on their phase tiles, after
 * the per-tap rule (ASPP's sparse rates stay per tap). oneDNN's direct
 * AVX2 kernels and its sgemm both run near the same rate here (~36
 * GFLOP/s a core on Zen 2, against 80 for bare FMAs), so the quarter of the
 * multiplies is what is won; measured in docs/BENCHMARKS.md ("Winograd on
 * AVX2"). NHWC activations keep oneDNN's channels-last kernels and the
 * per-tap backward passes (the tile gathers stride over channels there;
 * not measured faster). A rule from the ISA and the geometry.
 * SG_CPU_CONV_WINO=own sends these convs here on every ISA and in both
 * layouts instead of to oneDNN's Winograd, phases and per-tap paths (a
 * test and measuring aid: the conformance suite's cpu/wino-own configs). */
static int use_own_wino(const sg_cpu_conv_cache *cc, const sg_conv_desc *d, int act) {
    if (cc->wino_off || cc->layout_mode != LAYOUT_AUTO) return 0;
    if (!cc->wino_own && (cc->wino_isa || act != SG_LAYOUT_NCHW)) return 0;
    validate_desc(d);
    return sg_conv_wino_applicable(d) && !use_taps(cc, d);
}

/* A float32 convolution on activations in layout act: the per-tap GEMM
 * path, the direct depthwise backward, a 1x1 backward matmul, the own
 * Winograd path, or a float32 oneDNN entry. */
static void conv_f32(sg_cpu_conv_cache *cc, const sg_conv_desc *d, int op, int act,
                     const float *in0, const float *in1, float *out, int accumulate) {
    int nhwc = act == SG_LAYOUT_NHWC;
    if (use_dw(cc, d, op)) {
        if (op == OP_BWD_DATA) sg_conv_dw_bwd_data(&cc->dw_wt, d, nhwc, in0, in1, out, accumulate);
        else sg_conv_dw_bwd_weight(d, nhwc, in0, in1, out, accumulate);
    } else if (use_own_wino(cc, d, act)) {
        if (op == OP_FWD) sg_conv_wino_fwd(&cc->wino, d, nhwc, in0, in1, out);
        else if (op == OP_BWD_DATA)
            sg_conv_wino_bwd_data(&cc->wino, d, nhwc, in0, in1, out, accumulate);
        else sg_conv_wino_bwd_weight(&cc->wino, d, nhwc, in0, in1, out, accumulate);
    } else if (use_phases(cc, d, act)) {
        conv_phases(cc, d, op, in0, in1, out, accumulate);
    } else if (use_taps_op(cc, d, op, act)) {
        if (op == OP_FWD) sg_conv_taps_fwd(&cc->taps, NULL, d, nhwc, in0, in1, out);
        else if (op == OP_BWD_DATA)
            sg_conv_taps_bwd_data(&cc->taps, NULL, d, nhwc, in0, in1, out, accumulate);
        else sg_conv_taps_bwd_weight(&cc->taps, NULL, d, nhwc, in0, in1, out, accumulate);
    } else if (use_mm_1x1(cc, d, op, act)) {
        size_t n0, n1, nout;
        op_counts(d, op, &n0, &n1, &nout);
        ws_reserve(&cc->acc, nout * sizeof(float));
        float *r = accumulate ? cc->acc.p : out;
        if (op == OP_FWD) sg_conv_mm_1x1_fwd(cc->mm, d, 0, in0, in1, r);
        else if (op == OP_BWD_DATA) sg_conv_mm_1x1_bwd_data(cc->mm, d, 0, in0, in1, r);
        else sg_conv_mm_1x1_bwd_weight(cc->mm, d, 0, in0, in1, r);
        if (accumulate) sg_cpu_add_into(out, r, nout);
    } else {
        run_entry(cc, get_entry(cc, d, op, act, 0), in0, in1, out, accumulate, NULL);
    }
}

static void reserve_emulated(sg_cpu_conv_cache *cc, const sg_conv_desc *d, int op) {
    size_t n0, n1, nout;
    op_counts(d, op, &n0, &n1, &nout);
    ws_reserve(&cc->bf_a, n0 * sizeof(float));
    ws_reserve(&cc->bf_b, n1 * sizeof(float));
    ws_reserve(&cc->bf_out, nout * sizeof(float));
}

/* Emulated bf16 (see the top): bf16(in0) (*) bf16(in1) in float32, the
 * result rounded to bf16, then written or added. The rounded weights (in1
 * of fwd / bwd_data) come from the weight cache wc when there is one. */
static void conv_emulated(sg_cpu_conv_cache *cc, const sg_conv_desc *d, int op, int act,
                          const float *in0, const float *in1, float *out, int accumulate,
                          sg_wcache *wc) {
    size_t n0, n1, nout;
    op_counts(d, op, &n0, &n1, &nout);
    reserve_emulated(cc, d, op);
    float *a = cc->bf_a.p, *b = cc->bf_b.p;
    int refill = 1;
    if (wc && op != OP_BWD_WEIGHT)
        b = sg_wcache_get(wc, in1, n1 * sizeof(float), 0, n1 * sizeof(float), &refill);
    sg_cpu_bf16_round(a, in0, n0);
    if (refill) sg_cpu_bf16_round(b, in1, n1);
    if (accumulate) {
        float *r = cc->bf_out.p;
        conv_f32(cc, d, op, act, a, b, r, 0);
        sg_cpu_bf16_round_add(out, r, nout);
    } else {
        conv_f32(cc, d, op, act, a, b, out, 0);
        sg_cpu_bf16_round(out, out, nout);
    }
}

/* Native bf16, sparse dilated convs (use_taps: the per-tap GEMMs do under
 * 75% of the dense work): the backward passes run the per-tap GEMMs in bf16
 * (bf16 matmuls, cpu_conv_taps.c), the forward pass oneDNN's dense bf16
 * primitive (dead taps trimmed). Measured (bench_conv nhwc-bf16, ASPP 3x3
 * 2048->256 batch 2, SG_CPU_CONV_TAPS_BF16=taps / dense, one thread, CPU
 * ms; docs/BENCHMARKS.md "Convolutions as matmul on the CPU"):
 *   map, rate (density)   fwd          bwd_data     bwd_weight
 *   32x32 d12 (0.56)      29.3 / 29.7  36.0 / 42.3  41.8 / 52.6
 *   32x32 d24 (0.25)      14.0 / 14.0  18.6 / 57.0  25.7 / 96.1
 *   64x128 d24 (0.66)     286 / 251    339 / 440    333 / 469
 *   64x128 d36 (0.51)     211 / 188    261 / 422    244 / 1393
 * oneDNN's forward kernel (brgconv) skips the taps that read padding itself
 * and runs nearer the peak than a matmul; its backward passes do the dense
 * work, and at 64x128 as an im2col GEMM with a 400-640 MiB scratchpad. */
static int taps_beat_native(const sg_cpu_conv_cache *cc, const sg_conv_desc *d, int op) {
    if (!use_taps(cc, d) || cc->taps_bf16 == TAPS_BF16_DENSE) return 0;
    return op != OP_FWD || cc->taps_bf16 == TAPS_BF16_TAPS;
}

/* Native bf16 3x3 "same" convs on NHWC activations (sg_conv_wino_applicable,
 * after the per-tap rule) as cpu_conv_wino_cl.c's Winograd F(4x4, 3x3) with
 * float32 GEMMs: oneDNN 2.6 has no bf16 Winograd and its bf16 direct kernels
 * run near the AVX512-BF16 peak already, so a quarter of the multiplies at
 * half the rate is what can still be won. From 128 channels on each side:
 * measured on Zen 5 (bench_conv nhwc-bf16, ms fwd + bwd-data + bwd-weights,
 * oneDNN / Winograd, two rounds), 2 threads: 1024->256 39.6-41.4 /
 * 35.2-36.2, rate-4 512->512 41.5-42.5 / 28.1-31.2, rate-2 256->256
 * 10.2-11.6 / 8.2-8.4, 128->128 2.5-2.7 / 2.2, but 64->64 2.4 / 2.7 (and 1
 * thread 4.7 / 5.6: too little work per GEMM for the transforms).
 * docs/BENCHMARKS.md ("bf16 Winograd") has the step.
 * Not with AMX: oneDNN's bf16 kernels run on its tile multiplies there,
 * several times the AVX512-BF16 rate, which float32 GEMMs cannot approach
 * (no AMX machine measured). SG_CPU_CONV_WINO=0 keeps them on oneDNN (a
 * measuring aid); =own takes every applicable geometry, 16+ channels, on
 * any ISA (a test aid). */
static int use_wino_bf16(const sg_cpu_conv_cache *cc, const sg_conv_desc *d, int act) {
    if (cc->wino_off || cc->layout_mode != LAYOUT_AUTO || act != SG_LAYOUT_NHWC) return 0;
    if (cc->amx && !cc->wino_own) return 0;
    validate_desc(d);
    if (!sg_conv_wino_applicable(d) || use_taps(cc, d)) return 0;
    return cc->wino_own || (d->c >= 128 && d->k >= 128);
}

/* A stride-1 "same" conv whose only live tap is the centre: every other
 * tap is at least the map size away (ASPP's rate 36 on 32x32 maps). It is
 * the 1x1 conv of the centre tap. */
static int center_only(const sg_conv_desc *d) {
    if (d->r * d->s == 1 || d->r % 2 == 0 || d->s % 2 == 0 || sg_conv_groups(d) != 1) return 0;
    if (d->stride_h != 1 || d->stride_w != 1) return 0;
    if (d->pad_h != d->dil_h * (d->r / 2) || d->pad_w != d->dil_w * (d->s / 2)) return 0;
    if (d->oh != d->h || d->ow != d->w) return 0;
    return (d->r == 1 || d->dil_h >= d->h) && (d->s == 1 || d->dil_w >= d->w);
}

/* center_only's conv as the 1x1 conv it is. */
static sg_conv_desc center_desc(const sg_conv_desc *d) {
    sg_conv_desc c = *d;
    c.r = c.s = 1;
    c.pad_h = c.pad_w = 0;
    c.dil_h = c.dil_w = 1;
    return c;
}

/* The native bf16 passes that run as GEMMs on bf16 copies of the inputs
 * rather than as oneDNN conv primitives. GEMM_CENTER: the weight gradient
 * of a center_only conv as use_mm_1x1's matmul, where oneDNN runs its
 * trimmed 1x1 kernel with the gradient in bf16, reordered and scattered
 * into the taps (ASPP rate 36 2048->256 at 32x32, `segtrain bench
 * --profile`, 1 thread, ms per step, oneDNN / matmul, alternated twice:
 * 13.3, 11.8 / 7.8, 7.7). Its backward-data stays on oneDNN, whose trimmed
 * bf16 weights are cached (bench_conv: 5.3, 5.8 there against 7.5, 6.4
 * with the centre tap gathered and converted on every call). */
enum { GEMM_NONE = 0, GEMM_TAPS = 1, GEMM_MM1X1 = 2, GEMM_WINO = 3, GEMM_CENTER = 4 };
static int native_gemm_path(const sg_cpu_conv_cache *cc, const sg_conv_desc *d, int op, int act) {
    if (taps_beat_native(cc, d, op)) return GEMM_TAPS;
    if (use_mm_1x1(cc, d, op, act)) return GEMM_MM1X1;
    if (center_only(d) && op == OP_BWD_WEIGHT) {
        sg_conv_desc c = center_desc(d);
        if (use_mm_1x1(cc, &c, op, act)) return GEMM_CENTER;
    }
    if (use_wino_bf16(cc, d, act)) return GEMM_WINO;
    return GEMM_NONE;
}

/* Weight cache tags of the native GEMM paths' bf16 weights: above any of
 * weight_tag's (1 + id << 32 + ...), and apart from the emulation's 0. */
#define TAG_TAPS_BF16 (UINT64_C(1) << 63)
#define TAG_PLAIN_BF16 ((UINT64_C(1) << 63) + 1)

/* src as bf16 bits: src itself when stored so (dt SG_ACT_BF16), else its
 * rounded copy (round-to-nearest-even) in b. */
static const uint16_t *bf16_input(ws_buf *b, const void *src, int dt, size_t count) {
    if (dt == SG_ACT_BF16) return src;
    ws_reserve(b, count * sizeof(uint16_t));
    sg_cpu_bf16_narrow(b->p, src, count);
    return b->p;
}

/* The bf16 weights of a native GEMM forward / backward-data: the per-tap
 * copy (taps) or the plain [k][c] one (1x1), kept in the weight cache wc
 * (converted again only after the weights were written). The Winograd
 * passes read the float32 weights and round them themselves. */
static const uint16_t *weights_bf16(sg_cpu_conv_cache *cc, int path, const sg_conv_desc *d,
                                    const float *w, sg_wcache *wc) {
    size_t nw = sg_conv_weight_count(d); /* ungrouped: the per-tap count too */
    uint64_t tag = path == GEMM_TAPS ? TAG_TAPS_BF16 : TAG_PLAIN_BF16;
    int refill = 1;
    uint16_t *copy;
    if (wc) {
        copy = sg_wcache_get(wc, w, nw * sizeof(float), tag, nw * sizeof(uint16_t), &refill);
    } else {
        ws_reserve(&cc->g16[1], nw * sizeof(uint16_t));
        copy = cc->g16[1].p;
    }
    if (refill) {
        if (path == GEMM_TAPS) sg_conv_taps_weights_bf16(d, w, copy);
        else sg_cpu_bf16_narrow(copy, w, nw);
    }
    return copy;
}

/* Grows the buffers of a native GEMM pass and builds its matmul
 * primitives (a dry run), so that the steady state builds and grows
 * nothing. The bf16 copy of x is not reserved: x may come as bf16 bits
 * (the *_dt ops) and never need it (bf16_input grows it on the first call
 * that does); dy, the input of backward-data, is always float32. */
static void prepare_native_gemm(sg_cpu_conv_cache *cc, int path, const sg_conv_desc *d, int op,
                                int act) {
    if (path == GEMM_CENTER) { /* backward-weights only */
        sg_conv_desc c = center_desc(d);
        ws_reserve(&cc->ctr, (size_t)d->k * d->c * sizeof(float));
        prepare_native_gemm(cc, GEMM_MM1X1, &c, op, act);
        return;
    }
    size_t n0, n1, nout;
    op_counts(d, op, &n0, &n1, &nout);
    if (op == OP_BWD_DATA) ws_reserve(&cc->g16[0], n0 * sizeof(uint16_t));
    if (op == OP_BWD_WEIGHT) ws_reserve(&cc->g16[1], n1 * sizeof(uint16_t));
    ws_reserve(&cc->acc, nout * sizeof(float));
    int nhwc = act == SG_LAYOUT_NHWC;
    if (path == GEMM_WINO) {
        sg_conv_wcl_reserve(&cc->wcl, d);
    } else if (path == GEMM_TAPS) {
        sg_conv_taps_prepare(&cc->taps, d);
        if (op == OP_FWD) sg_conv_taps_fwd(&cc->taps, cc->mm, d, nhwc, NULL, NULL, NULL);
        else if (op == OP_BWD_DATA)
            sg_conv_taps_bwd_data(&cc->taps, cc->mm, d, nhwc, NULL, NULL, NULL, 0);
        else sg_conv_taps_bwd_weight(&cc->taps, cc->mm, d, nhwc, NULL, NULL, NULL, 0);
    } else if (op == OP_FWD) {
        sg_conv_mm_1x1_fwd(cc->mm, d, 1, NULL, NULL, NULL);
    } else if (op == OP_BWD_DATA) {
        sg_conv_mm_1x1_bwd_data(cc->mm, d, 1, NULL, NULL, NULL);
    } else {
        sg_conv_mm_1x1_bwd_weight(cc->mm, d, 1, NULL, NULL, NULL);
    }
}

static void run_native_gemm(sg_cpu_conv_cache *cc, int path, const sg_conv_desc *d, int op, int act,
                            const void *in0, int xdt, const float *in1, void *out, int ydt,
                            int accumulate, sg_wcache *wc);

/* GEMM_CENTER (a weight gradient): the 1x1 conv's, into cc->ctr, then
 * written into the centre tap, the other taps 0 (accumulate: left as they
 * are, the centre tap added to). */
static void run_center(sg_cpu_conv_cache *cc, const sg_conv_desc *d, int act, const void *x,
                       int xdt, const float *dy, float *dw, int accumulate) {
    sg_conv_desc c = center_desc(d);
    size_t kc = (size_t)d->k * d->c;
    int taps = d->r * d->s, t0 = (d->r / 2) * d->s + d->s / 2;
    ws_reserve(&cc->ctr, kc * sizeof(float));
    float *g = cc->ctr.p;
    run_native_gemm(cc, GEMM_MM1X1, &c, OP_BWD_WEIGHT, act, x, xdt, dy, g, SG_ACT_F32, 0, NULL);
#pragma omp parallel for schedule(static) if (kc * taps >= SG_CPU_PAR_MIN)
    for (size_t q = 0; q < kc; q++) {
        float *o = dw + q * taps;
        if (accumulate) {
            o[t0] += g[q];
            continue;
        }
        for (int t = 0; t < taps; t++) o[t] = 0.0f;
        o[t0] = g[q];
    }
}

/* A native bf16 pass as GEMMs (path GEMM_TAPS / MM1X1 / WINO / CENTER): bf16 inputs
 * (in0 is x (fwd, bwd_weight; bf16 bits when xdt is SG_ACT_BF16) or dy; in1
 * the weights or dy), float32 accumulation, the sum rounded once to bf16 -
 * what the native primitives compute (backend.h) - then written (as bf16
 * bits when ydt is SG_ACT_BF16) or added. */
static void run_native_gemm(sg_cpu_conv_cache *cc, int path, const sg_conv_desc *d, int op, int act,
                            const void *in0, int xdt, const float *in1, void *out, int ydt,
                            int accumulate, sg_wcache *wc) {
    if (path == GEMM_CENTER) { /* native_gemm_path: backward-weights only */
        run_center(cc, d, act, in0, xdt, in1, out, accumulate);
        return;
    }
    size_t n0, n1, nout;
    op_counts(d, op, &n0, &n1, &nout);
    int nhwc = act == SG_LAYOUT_NHWC;
    /* dy (in0 of backward-data, in1 of backward-weights): cc->dy16 where
     * sg_cpu_conv_native_bwd rounded it for both */
    const uint16_t *a =
        op == OP_BWD_DATA && cc->dy16
            ? cc->dy16
            : bf16_input(&cc->g16[0], in0, op == OP_BWD_DATA ? SG_ACT_F32 : xdt, n0);
    /* the Winograd passes round the float32 weights as they read them */
    int w32 = path == GEMM_WINO;
    const uint16_t *b = op == OP_BWD_WEIGHT
                            ? (cc->dy16 ? cc->dy16 : bf16_input(&cc->g16[1], in1, SG_ACT_F32, n1))
                        : w32 ? NULL
                              : weights_bf16(cc, path, d, in1, wc);
    ws_reserve(&cc->acc, nout * sizeof(float));
    float *r = (accumulate || ydt == SG_ACT_BF16) ? cc->acc.p : out;
    if (path == GEMM_WINO) {
        if (op == OP_FWD) sg_conv_wcl_fwd(&cc->wcl, d, a, in1, r);
        else if (op == OP_BWD_DATA) sg_conv_wcl_bwd_data(&cc->wcl, d, a, in1, r);
        else sg_conv_wcl_bwd_weight(&cc->wcl, d, a, b, r);
    } else if (path == GEMM_TAPS) {
        if (op == OP_FWD) sg_conv_taps_fwd(&cc->taps, cc->mm, d, nhwc, a, b, r);
        else if (op == OP_BWD_DATA) sg_conv_taps_bwd_data(&cc->taps, cc->mm, d, nhwc, a, b, r, 0);
        else sg_conv_taps_bwd_weight(&cc->taps, cc->mm, d, nhwc, a, b, r, 0);
    } else if (op == OP_FWD) {
        sg_conv_mm_1x1_fwd(cc->mm, d, 1, a, b, r);
    } else if (op == OP_BWD_DATA) {
        sg_conv_mm_1x1_bwd_data(cc->mm, d, 1, a, b, r);
    } else {
        sg_conv_mm_1x1_bwd_weight(cc->mm, d, 1, a, b, r);
    }
    if (ydt == SG_ACT_BF16) sg_cpu_bf16_narrow(out, r, nout);
    else if (accumulate) sg_cpu_bf16_round_add(out, r, nout);
    else sg_cpu_bf16_round(out, r, nout);
}

/* Every conv op: float32, native bf16, or emulated bf16. */
static void conv_op(sg_backend *be, const sg_conv_desc *d, int op, const float *in0,
                    const float *in1, float *out, int accumulate) {
    sg_cpu_conv_cache *cc = conv_cache(be);
    int act = be->layout;
    if (cc->bf16 == BF16_OFF) {
        conv_f32(cc, d, op, act, in0, in1, out, accumulate);
        return;
    }
    sg_wcache *wc = sg_cpu_of(be)->wcache;
    if (cc->bf16 == BF16_NATIVE) {
        int path = native_gemm_path(cc, d, op, act);
        if (path != GEMM_NONE) {
            run_native_gemm(cc, path, d, op, act, in0, SG_ACT_F32, in1, out, SG_ACT_F32, accumulate,
                            wc);
            return;
        }
        conv_entry *e = get_entry(cc, d, op, act, 1);
        if (e->prim) {
            run_entry(cc, e, in0, in1, out, accumulate, wc);
            return;
        }
    }
    conv_emulated(cc, d, op, act, in0, in1, out, accumulate, wc);
}

static void conv_prepare(sg_backend *be, const sg_conv_desc *d) {
    sg_cpu_conv_cache *cc = conv_cache(be);
    int act = be->layout;
    for (int op = 0; op < 3; op++) {
        if (cc->bf16 == BF16_NATIVE) {
            int path = native_gemm_path(cc, d, op, act);
            if (path != GEMM_NONE) {
                prepare_native_gemm(cc, path, d, op, act);
                continue;
            }
            if (get_entry(cc, d, op, act, 1)->prim) continue;
        }
        if (cc->bf16 != BF16_OFF) reserve_emulated(cc, d, op);
        if (use_own_wino(cc, d, act)) {
            sg_conv_wino_reserve(&cc->wino, d);
            continue;
        }
        if (use_phases(cc, d, act)) { /* conv_phases' entry; its buffers grow at first use */
            sg_conv_desc p = sg_conv_phases_desc(d);
            get_entry(cc, &p, op, act, 0);
            continue;
        }
        if (use_dw(cc, d, op)) {
            if (act == SG_LAYOUT_NHWC && op == OP_BWD_DATA) sg_conv_dw_prepare(&cc->dw_wt, d);
            continue;
        }
        size_t n0, n1, nout;
        op_counts(d, op, &n0, &n1, &nout);
        if (use_taps_op(cc, d, op, act)) sg_conv_taps_prepare(&cc->taps, d);
        else if (use_mm_1x1(cc, d, op, act)) {
            ws_reserve(&cc->acc, nout * sizeof(float));
            if (op == OP_FWD) sg_conv_mm_1x1_fwd(cc->mm, d, 0, NULL, NULL, NULL);
            else if (op == OP_BWD_DATA) sg_conv_mm_1x1_bwd_data(cc->mm, d, 0, NULL, NULL, NULL);
            else sg_conv_mm_1x1_bwd_weight(cc->mm, d, 0, NULL, NULL, NULL);
        } else get_entry(cc, d, op, act, 0);
    }
}

static void conv_fwd(sg_backend *be, const sg_conv_desc *d, const float *x, const float *w,
                     float *y) {
    conv_op(be, d, OP_FWD, x, w, y, 0);
}

static void conv_bwd_data(sg_backend *be, const sg_conv_desc *d, const float *dy, const float *w,
                          float *dx, int accumulate) {
    conv_op(be, d, OP_BWD_DATA, dy, w, dx, accumulate);
}

static void conv_bwd_weight(sg_backend *be, const sg_conv_desc *d, const float *x, const float *dy,
                            float *dw, int accumulate) {
    conv_op(be, d, OP_BWD_WEIGHT, x, dy, dw, accumulate);
}

int sg_cpu_conv_native_dt(sg_backend *be, const sg_conv_desc *d, int fwd, const void *x, int xdt,
                          const float *in1, void *out, int ydt, int accumulate) {
    sg_cpu_conv_cache *cc = conv_cache(be);
    if (cc->bf16 != BF16_NATIVE) return 0;
    int op = fwd ? OP_FWD : OP_BWD_WEIGHT;
    int path = native_gemm_path(cc, d, op, be->layout);
    if (path != GEMM_NONE) {
        run_native_gemm(cc, path, d, op, be->layout, x, xdt, in1, out, fwd ? ydt : SG_ACT_F32,
                        accumulate, sg_cpu_of(be)->wcache);
        return 1;
    }
    conv_entry *e = get_entry_dt(cc, d, op, be->layout, 1, xdt, fwd ? ydt : SG_ACT_F32);
    if (!e->prim) return 0; /* no bf16 kernel for this geometry: emulated */
    run_entry(cc, e, x, in1, out, accumulate, sg_cpu_of(be)->wcache);
    return 1;
}

int sg_cpu_conv_native_bwd(sg_backend *be, const sg_conv_desc *d, const void *x, int xdt,
                           const float *dy, const float *w, float *dw, int acc_w, float *dx,
                           int acc_x) {
    sg_cpu_conv_cache *cc = conv_cache(be);
    sg_wcache *wc = sg_cpu_of(be)->wcache;
    /* with the weight cache the backward-data weights never use g16[1] */
    if (cc->bf16 != BF16_NATIVE || !wc) return 0;
    int pw = native_gemm_path(cc, d, OP_BWD_WEIGHT, be->layout);
    int pd = native_gemm_path(cc, d, OP_BWD_DATA, be->layout);
    if (pw == GEMM_NONE || pd == GEMM_NONE) return 0;
    size_t n0, n1, nout;
    op_counts(d, OP_BWD_WEIGHT, &n0, &n1, &nout);
    cc->dy16 = bf16_input(&cc->g16[1], dy, SG_ACT_F32, n1);
    run_native_gemm(cc, pw, d, OP_BWD_WEIGHT, be->layout, x, xdt, dy, dw, SG_ACT_F32, acc_w, wc);
    run_native_gemm(cc, pd, d, OP_BWD_DATA, be->layout, dy, SG_ACT_F32, w, dx, SG_ACT_F32, acc_x,
                    wc);
    cc->dy16 = NULL;
    return 1;
}

void sg_cpu_conv_f32(sg_backend *be, const sg_conv_desc *d, int fwd, const float *x,
                     const float *in1, float *out, int accumulate) {
    if (fwd) conv_fwd(be, d, x, in1, out);
    else conv_bwd_weight(be, d, x, in1, out, accumulate);
}

void sg_cpu_conv_stats(sg_backend *be, int *entries, size_t *workspace_bytes) {
    sg_cpu_conv_cache *cc = sg_cpu_of(be)->conv;
    int n = 0;
    for (conv_entry *e = cc->head; e; e = e->next) n++;
    size_t b = cc->acc.bytes + cc->wtrim.bytes + cc->ctr.bytes + cc->scratch.bytes +
               cc->dw_wt.bytes + cc->taps.wt.bytes + cc->taps.a.bytes + cc->taps.b.bytes +
               cc->bf_a.bytes + cc->bf_b.bytes + cc->bf_out.bytes + cc->g16[0].bytes +
               cc->g16[1].bytes + cc->ph[0].bytes + cc->ph[1].bytes + cc->ph[2].bytes +
               cc->wino.u.bytes + cc->wino.v.bytes + cc->wino.m.bytes + cc->wino.wf.bytes +
               cc->wino.pos.bytes + cc->wcl.pos.bytes; /* wcl's u, v, m are taps' */
    for (int i = 0; i < 3; i++) b += cc->ws[i].bytes;
    int mm_entries;
    size_t mm_scratch;
    sg_conv_mm_stats(cc->mm, &mm_entries, &mm_scratch);
    *entries = n + mm_entries;
    b += mm_scratch;
    *workspace_bytes = b;
}

void sg_cpu_fill_conv_ops(sg_ops *ops) {
    ops->conv_prepare = conv_prepare;
    ops->conv_fwd = conv_fwd;
    ops->conv_bwd_data = conv_bwd_data;
    ops->conv_bwd_weight = conv_bwd_weight;
}
