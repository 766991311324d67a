/* kernels/cpu/conv/ops.c - the CPU backend's convolution ops (the conv
 * group of tests/backend/run_conv.c but for the bias, cpu_conv_bias.c;
 * kernels/cuda/cuda_conv.cu on the GPU): conv_prepare, conv_fwd,
 * conv_bwd_data, conv_bwd_weight, and the entry points of the *_dt ops
 * (cpu_act_bf16.c). Each builds the call and hands it to the one chooser
 * of paths.c, which picks the row of the path table that runs it.
 *
 * Owns the conv cache's lifetime (the oneDNN engine and stream, every
 * path's buffers) and the choice of precision: float32, or bf16 - native
 * (oneDNN's AVX512-BF16 / AMX kernels and the bf16 GEMM paths) or emulated
 * (SG_CPU_BF16=auto|native|emulated; see paths.c), chosen once per backend
 * and logged. backend.h says what bf16 computes.
 */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/conv/conv_internal.h"
#include "kernels/cpu/conv/conv_paths.h"
#if SG_TEST_SEAMS
#include "core/test_seams.h"
#endif

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
    if (want != 2 && probe) {
        cc->bf16 = BF16_NATIVE;
        snprintf(cc->math, sizeof cc->math, "bf16: oneDNN native (ISA %s, e.g. %s)%s", isa_s, probe,
                 cc->amx || (cc->off & (1u << sg_cpu_conv_path_find("wino-cl")))
                     ? ""
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

sg_cpu_conv_cache *sg_cpu_conv_create(int threads, int precision) {
    (void)threads; /* oneDNN (OpenMP runtime) follows omp_set_num_threads */
    sg_cpu_conv_cache *cc = calloc(1, sizeof *cc);
    if (!cc) SG_FATAL("CPU backend: out of memory creating the conv cache");
    DNNL_CHECK(dnnl_engine_create(&cc->eng, dnnl_cpu, 0));
    DNNL_CHECK(dnnl_stream_create(&cc->stream, cc->eng, dnnl_stream_default_flags));
    cc->mm = sg_conv_mm_create(cc->eng, cc->stream);
    cc->wcl.u = &cc->taps.a, cc->wcl.v = &cc->taps.b, cc->wcl.m = &cc->taps.wt;
    cc->wino_isa = sg_cpu_avx512();
    cc->amx = ((unsigned)dnnl_get_effective_cpu_isa() & (unsigned)dnnl_cpu_isa_avx512_core_amx) ==
              (unsigned)dnnl_cpu_isa_avx512_core_amx;
#if SG_TEST_SEAMS
    /* the bf16 weights through oneDNN's reorder only (the bytes are the same) */
    const char *pack = sg_test_seam("SG_CPU_WEIGHT_PACK");
    cc->pack_off = pack && strcmp(pack, "0") == 0;
#endif
    sg_conv_paths_init(cc);
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

void sg_cpu_conv_destroy(sg_cpu_conv_cache *cc) {
    if (!cc) return;
    sg_conv_onednn_free(cc);
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
    DNNL_CHECK(dnnl_stream_destroy(cc->stream));
    /* oneDNN's primitive cache is global and outlives this engine: flush it
     * (capacity 0 evicts every entry) so that no cached primitive of the
     * engine destroyed below is evicted, and destroyed, later inside another
     * backend's primitive creation (seen as an intermittent crash inside
     * dnnl_primitive_create under ASan once a process had created and
     * destroyed several backends). */
    int cap = 0;
    DNNL_CHECK(dnnl_get_primitive_cache_capacity(&cap));
    DNNL_CHECK(dnnl_set_primitive_cache_capacity(0));
    DNNL_CHECK(dnnl_set_primitive_cache_capacity(cap));
    DNNL_CHECK(dnnl_engine_destroy(cc->eng));
    free(cc);
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

/* One pass of d on be (float32 tensors; every precision). */
static conv_call call_of(sg_backend *be, const sg_conv_desc *d, int op, const void *in0,
                         const float *in1, void *out, int accumulate) {
    sg_conv_validate(d);
    return (conv_call){.d = d,
                       .op = op,
                       .prec = sg_conv_precision_of(sg_cpu_of(be)->conv),
                       .act = be->layout,
                       .in0 = in0,
                       .xdt = SG_ACT_F32,
                       .in1 = in1,
                       .out = out,
                       .ydt = SG_ACT_F32,
                       .accumulate = accumulate,
                       .wc = sg_cpu_of(be)->wcache};
}

static void conv_prepare(sg_backend *be, const sg_conv_desc *d) {
    sg_cpu_conv_cache *cc = conv_cache(be);
    for (int op = 0; op < 3; op++) {
        conv_call c = call_of(be, d, op, NULL, NULL, NULL, 0);
        sg_conv_prepare(cc, &c);
    }
}

static void conv_fwd(sg_backend *be, const sg_conv_desc *d, const float *x, const float *w,
                     float *y) {
    conv_call c = call_of(be, d, OP_FWD, x, w, y, 0);
    sg_conv_run(conv_cache(be), &c);
}

static void conv_bwd_data(sg_backend *be, const sg_conv_desc *d, const float *dy, const float *w,
                          float *dx, int accumulate) {
    conv_call c = call_of(be, d, OP_BWD_DATA, dy, w, dx, accumulate);
    sg_conv_run(conv_cache(be), &c);
}

static void conv_bwd_weight(sg_backend *be, const sg_conv_desc *d, const float *x, const float *dy,
                            float *dw, int accumulate) {
    conv_call c = call_of(be, d, OP_BWD_WEIGHT, x, dy, dw, accumulate);
    sg_conv_run(conv_cache(be), &c);
}

/* Native bf16 on bf16-stored activations: the row the chooser picks reads
 * and writes the storage types itself, unless it is the emulation (then
 * the caller converts). */
int sg_cpu_conv_native_dt(sg_backend *be, const sg_conv_desc *d, int fwd, const void *x, int xdt,
                          const float *in1, void *out, int ydt, int accumulate) {
    sg_cpu_conv_cache *cc = conv_cache(be);
    if (cc->bf16 != BF16_NATIVE) return 0;
    conv_call c = call_of(be, d, fwd ? OP_FWD : OP_BWD_WEIGHT, x, in1, out, accumulate);
    c.xdt = xdt;
    c.ydt = fwd ? ydt : SG_ACT_F32;
    const conv_path *p = sg_conv_choose(cc, &c);
    if (sg_conv_is_emulation(p)) return 0;
    sg_conv_run_path(cc, p, &c);
    return 1;
}

/* Both backward passes on the native bf16 GEMM rows (under native bf16,
 * the rows that are not fallbacks) share dy rounded to bf16 once. With the
 * weight cache the backward-data weights never use g16[1]. */
int sg_cpu_conv_native_bwd(sg_backend *be, const sg_conv_desc *d, const void *x, int xdt,
                           const float *dy, const float *w, float *dw, int acc_w, float *dx,
                           int acc_x) {
    sg_cpu_conv_cache *cc = conv_cache(be);
    if (cc->bf16 != BF16_NATIVE || !sg_cpu_of(be)->wcache) return 0;
    conv_call cw = call_of(be, d, OP_BWD_WEIGHT, x, dy, dw, acc_w);
    cw.xdt = xdt;
    conv_call cd = call_of(be, d, OP_BWD_DATA, dy, w, dx, acc_x);
    const conv_path *pw = sg_conv_choose(cc, &cw), *pd = sg_conv_choose(cc, &cd);
    if (pw->fallback || pd->fallback) return 0;
    size_t n0, n1, nout;
    sg_conv_op_counts(d, OP_BWD_WEIGHT, &n0, &n1, &nout);
    cc->dy16 = sg_conv_bf16_input(&cc->g16[1], dy, SG_ACT_F32, n1);
    sg_conv_run_path(cc, pw, &cw);
    sg_conv_run_path(cc, pd, &cd);
    cc->dy16 = NULL;
    return 1;
}

void sg_cpu_conv_f32(sg_backend *be, const sg_conv_desc *d, int fwd, const float *x,
                     const float *in1, float *out, int accumulate) {
    if (fwd) conv_fwd(be, d, x, in1, out);
    else conv_bwd_weight(be, d, x, in1, out, accumulate);
}

void sg_cpu_conv_bwd_data_f32(sg_backend *be, const sg_conv_desc *d, const float *dy,
                              const float *w, float *dx, int accumulate) {
    conv_bwd_data(be, d, dy, w, dx, accumulate);
}

void sg_cpu_conv_stats(sg_backend *be, int *entries, size_t *workspace_bytes) {
    sg_cpu_conv_cache *cc = sg_cpu_of(be)->conv;
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
    *entries = sg_conv_onednn_count(cc) + mm_entries;
    b += mm_scratch;
    *workspace_bytes = b;
}

void sg_cpu_fill_conv_ops(sg_ops *ops) {
    ops->conv_prepare = conv_prepare;
    ops->conv_fwd = conv_fwd;
    ops->conv_bwd_data = conv_bwd_data;
    ops->conv_bwd_weight = conv_bwd_weight;
}
