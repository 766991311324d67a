/* kernels/cpu/conv/paths.c - THE table of the CPU backend's convolution
 * paths, the one chooser every entry point uses (the ops, conv_prepare,
 * the *_dt ops: ops.c), SG_CPU_CONV, and the bf16 emulation wrapper.
 *
 * The chooser takes the first row, in table order, whose columns admit
 * the call - the pass (passes), the precision (precisions), the
 * activation layout (layouts), the processor (isa) - and whose rule holds:
 * pays (measured faster than what follows; NULL: always), then can (the
 * path computes this conv: its geometry limits; for native bf16 oneDNN
 * rows, that oneDNN has a bf16 kernel for it, which building the entry
 * tells). The rules are in the files named in the last column.
 *
 * What the order means:
 *  - The rows above the fallbacks are disjoint: no conv satisfies two of
 *    them, except the pairs in sg_cpu_conv_path_overlaps, where the earlier
 *    row wins. tests/backend checks this over every conformance geometry.
 *  - The fallbacks partition what is left: for float32 exactly one of
 *    onednn-cl, onednn-plain and onednn-blocked pays (oneDNN's layout rule,
 *    onednn_rules.c); for bf16 the oneDNN row of that layout runs where
 *    oneDNN has a bf16 kernel, else the emulation.
 *
 * Adding a path: one row here, its rule and adapters in its family's file
 * (own_f32.c, native.c) and its kernels in a file of their own.
 *
 * SG_CPU_CONV=force:NAME,off:NAME,... (a measuring and test aid, logged
 * when set): a forced row is tried before every other, wherever its
 * precision and can allow (its passes, layouts, isa and pays are waived);
 * a row turned off is never chosen. The fallbacks cannot be turned off.
 *
 * bf16 emulated (no bf16 instructions, SG_CPU_BF16=emulated, or a geometry
 * oneDNN has no bf16 kernel for): the two inputs are rounded to bf16
 * values into float32 buffers, the float32 row the chooser picks for them
 * runs (products of bf16 values are exact in float32, so this is a bf16
 * convolution with float32 accumulation), and its result is rounded to
 * bf16 (then added, with accumulate): the numerics of bf16 storage in
 * float32 tensors. The rounded weights come from the weight cache (tag 0).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/conv/conv_internal.h"
#include "kernels/cpu/conv/conv_paths.h"

static void emulated_prep(sg_cpu_conv_cache *cc, const conv_call *c);
static void emulated_run(sg_cpu_conv_cache *cc, const conv_call *c);

#define ALL ((1u << OP_FWD) | (1u << OP_BWD_DATA) | (1u << OP_BWD_WEIGHT))
#define BWD ((1u << OP_BWD_DATA) | (1u << OP_BWD_WEIGHT))
#define BW (1u << OP_BWD_WEIGHT)
#define F32 (1u << PREC_F32)
#define BF16 (1u << PREC_BF16)
#define EMU (1u << PREC_BF16_EMU)
#define NCHW (1u << SG_LAYOUT_NCHW)
#define NHWC (1u << SG_LAYOUT_NHWC)
#define BOTH (NCHW | NHWC)
#define ROW(NAME, PASSES, PREC, LAYOUTS, ISA, FB, CAN, PAYS, PFX, FILE) \
    { NAME, PASSES, PREC, LAYOUTS, ISA, FB, CAN, PAYS, PFX##_prep, PFX##_run, FILE }

/* clang-format off */
const conv_path sg_conv_paths[] = {
/*      name              passes precisions  layouts isa          fallback can                         pays                         prep / run            kernels */
    ROW("onednn-wino",    ALL,   F32,        BOTH,   ISA_WINO,    0, sg_conv_onednn_wino_can,    NULL,                        sg_conv_onednn_wino,  "onednn.c"),
    ROW("dw",             BWD,   F32,        BOTH,   ISA_ANY,     0, sg_conv_dw_can,             NULL,                        sg_conv_dw,           "dw.c"),
    ROW("wino-own",       ALL,   F32,        NCHW,   ISA_NO_WINO, 0, sg_conv_wino_own_can,       NULL,                        sg_conv_wino_own,     "wino.c"),
    ROW("phases",         ALL,   F32,        NHWC,   ISA_WINO,    0, sg_conv_phases_can,         NULL,                        sg_conv_phases,       "phases.c"),
    ROW("taps",           ALL,   F32,        NCHW,   ISA_ANY,     0, sg_conv_taps_can,           NULL,                        sg_conv_taps,         "taps.c"),
    ROW("taps-bwd",       BWD,   F32,        NHWC,   ISA_ANY,     0, sg_conv_taps_bwd_can,       NULL,                        sg_conv_taps,         "taps.c"),
    ROW("mm1x1",          BWD,   F32 | BF16, NHWC,   ISA_ANY,     0, sg_conv_mm1x1_can,          sg_conv_mm1x1_pays,          sg_conv_mm1x1,        "matmul.c"),
    ROW("taps-bf16",      BWD,   BF16,       BOTH,   ISA_ANY,     0, sg_conv_taps_bf16_can,      NULL,                        sg_conv_taps_bf16,    "taps.c"),
    ROW("center",         BW,    BF16,       NHWC,   ISA_ANY,     0, sg_conv_center_can,         sg_conv_center_pays,         sg_conv_center,       "matmul.c"),
    ROW("wino-cl",        ALL,   BF16,       NHWC,   ISA_NO_AMX,  0, sg_conv_wino_cl_can,        sg_conv_wino_cl_pays,        sg_conv_wino_cl,      "wino_cl.c"),
    ROW("onednn-cl",      ALL,   F32 | BF16, NHWC,   ISA_ANY,     1, sg_conv_onednn_cl_can,      sg_conv_onednn_cl_pays,      sg_conv_onednn_cl,    "onednn.c"),
    ROW("onednn-plain",   ALL,   F32 | BF16, BOTH,   ISA_ANY,     1, sg_conv_onednn_plain_can,   sg_conv_onednn_plain_pays,   sg_conv_onednn_plain, "onednn.c"),
    ROW("onednn-blocked", ALL,   F32 | BF16, BOTH,   ISA_ANY,     1, sg_conv_onednn_blocked_can, sg_conv_onednn_blocked_pays, sg_conv_onednn_blocked, "onednn.c"),
    ROW("emulated",       ALL,   BF16 | EMU, BOTH,   ISA_ANY,     1, NULL,                       NULL,                        emulated,             "paths.c"),
};
/* clang-format on */
const int sg_conv_npaths = (int)(sizeof sg_conv_paths / sizeof sg_conv_paths[0]);

const char *const sg_cpu_conv_path_overlaps[][2] = {
    /* Winograd beats the per-tap GEMMs where oneDNN has it */
    {"onednn-wino", "taps-bwd"},
    /* a dilated 3x3 conv on phase sub-images runs as Winograd */
    {"phases", "taps-bwd"},
    {NULL, NULL},
};

static const char *const isa_words[] = {"any", "oneDNN Winograd (AVX-512)",
                                        "no oneDNN Winograd (below AVX-512)", "no AMX"};

int sg_conv_isa_ok(const sg_cpu_conv_cache *cc, const conv_path *p) {
    switch (p->isa) {
    case ISA_WINO: return cc->wino_isa;
    case ISA_NO_WINO: return !cc->wino_isa;
    case ISA_NO_AMX: return !cc->amx;
    default: return 1;
    }
}

static int find(const char *name, size_t len) {
    for (int i = 0; i < sg_conv_npaths; i++)
        if (strlen(sg_conv_paths[i].name) == len && strncmp(sg_conv_paths[i].name, name, len) == 0)
            return i;
    return -1;
}

static void names(char *buf, size_t cap) {
    buf[0] = 0;
    for (int i = 0; i < sg_conv_npaths; i++)
        snprintf(buf + strlen(buf), cap - strlen(buf), "%s%s", i ? " " : "", sg_conv_paths[i].name);
}

void sg_conv_paths_init(sg_cpu_conv_cache *cc) {
    for (int i = 0; i < 3; i++) cc->ran[i] = cc->ran_inner[i] = -1;
    const char *v = getenv("SG_CPU_CONV");
    if (!v || !*v) return;
    char all[512];
    names(all, sizeof all);
    for (const char *p = v; *p;) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        int force = strncmp(p, "force:", 6) == 0, off = strncmp(p, "off:", 4) == 0;
        size_t skip = force ? 6 : off ? 4 : 0;
        int i = skip ? find(p + skip, len - skip) : -1;
        if (i < 0)
            SG_FATAL("environment SG_CPU_CONV='%s': '%.*s' is not force:NAME or off:NAME with "
                     "NAME one of: %s (unset it for the measured rules)",
                     v, (int)len, p, all);
        if (off && sg_conv_paths[i].fallback)
            SG_FATAL("environment SG_CPU_CONV='%s': %s cannot be turned off: it takes the convs "
                     "no other row takes (force another row instead)",
                     v, sg_conv_paths[i].name);
        uint32_t bit = 1u << i;
        if ((force ? cc->off : cc->forced) & bit)
            SG_FATAL("environment SG_CPU_CONV='%s': %s is both forced and turned off", v,
                     sg_conv_paths[i].name);
        if (force) cc->forced |= bit;
        else cc->off |= bit;
        p += len;
        if (*p == ',') p++;
    }
    static int logged;
    if (!__atomic_exchange_n(&logged, 1, __ATOMIC_RELAXED))
        SG_INFO("CPU backend: SG_CPU_CONV=%s: convolution paths forced or turned off (a "
                "measuring aid; unset it for the measured rules)",
                v);
}

/* The columns: the precision always; forced rows need nothing more. */
static int admits(const sg_cpu_conv_cache *cc, const conv_path *p, const conv_call *c, int forced) {
    if (!(p->precisions & (1u << c->prec))) return 0;
    if (forced) return 1;
    return (p->passes & (1u << c->op)) && (p->layouts & (1u << c->act)) && sg_conv_isa_ok(cc, p);
}

static int rule_holds(sg_cpu_conv_cache *cc, const conv_path *p, const conv_call *c, int forced) {
    if (!forced && p->pays && !p->pays(cc, c)) return 0;
    return !p->can || p->can(cc, c);
}

const conv_path *sg_conv_choose(sg_cpu_conv_cache *cc, const conv_call *c) {
    for (int i = 0; cc->forced && i < sg_conv_npaths; i++) {
        const conv_path *p = &sg_conv_paths[i];
        if ((cc->forced & (1u << i)) && admits(cc, p, c, 1) && rule_holds(cc, p, c, 1)) return p;
    }
    for (int i = 0; i < sg_conv_npaths; i++) {
        const conv_path *p = &sg_conv_paths[i];
        if (!(cc->off & (1u << i)) && admits(cc, p, c, 0) && rule_holds(cc, p, c, 0)) return p;
    }
    const sg_conv_desc *d = c->d;
    SG_FATAL("CPU conv: no path takes %s n%d c%d %dx%d k%d %dx%d (precision %d, layout %d): the "
             "fallback rows of kernels/cpu/conv/paths.c must take every conv (a bug)",
             c->op == OP_FWD        ? "fwd"
             : c->op == OP_BWD_DATA ? "bwd_data"
                                    : "bwd_weight",
             d->n, d->c, d->h, d->w, d->k, d->r, d->s, c->prec, c->act);
}

void sg_conv_run_path(sg_cpu_conv_cache *cc, const conv_path *p, const conv_call *c) {
    cc->ran[c->op] = (signed char)(p - sg_conv_paths);
    cc->ran_inner[c->op] = -1;
    p->run(cc, c);
}

void sg_conv_run(sg_cpu_conv_cache *cc, const conv_call *c) {
    sg_conv_run_path(cc, sg_conv_choose(cc, c), c);
}

int sg_conv_is_emulation(const conv_path *p) { return p->run == emulated_run; }

void sg_conv_prepare(sg_cpu_conv_cache *cc, const conv_call *c) {
    sg_conv_choose(cc, c)->prepare(cc, c);
}

/* ---------------- the emulation ---------------- */

static void reserve_emulated(sg_cpu_conv_cache *cc, const sg_conv_desc *d, int op) {
    size_t n0, n1, nout;
    sg_conv_op_counts(d, op, &n0, &n1, &nout);
    ws_reserve(&cc->bf_a, n0 * sizeof(float));
    ws_reserve(&cc->bf_b, n1 * sizeof(float));
    ws_reserve(&cc->bf_out, nout * sizeof(float));
}

static void emulated_prep(sg_cpu_conv_cache *cc, const conv_call *c) {
    reserve_emulated(cc, c->d, c->op);
    conv_call f = *c;
    f.prec = PREC_F32;
    f.wc = NULL;
    sg_conv_prepare(cc, &f);
}

/* bf16(in0) (*) bf16(in1) in float32, the result rounded to bf16, then
 * written or added. */
static void emulated_run(sg_cpu_conv_cache *cc, const conv_call *c) {
    if (c->xdt != SG_ACT_F32 || c->ydt != SG_ACT_F32)
        SG_FATAL(
            "CPU conv: the bf16 emulation takes float32 tensors only (cpu_act_bf16.c widens bf16 "
            "storage first; a bug)");
    size_t n0, n1, nout;
    sg_conv_op_counts(c->d, c->op, &n0, &n1, &nout);
    reserve_emulated(cc, c->d, c->op);
    float *a = cc->bf_a.p, *b = cc->bf_b.p;
    int refill = 1;
    if (c->wc && c->op != OP_BWD_WEIGHT)
        b = sg_wcache_get(c->wc, c->in1, n1 * sizeof(float), 0, n1 * sizeof(float), &refill);
    sg_cpu_bf16_round(a, c->in0, n0);
    if (refill) sg_cpu_bf16_round(b, c->in1, n1);
    conv_call f = *c;
    f.prec = PREC_F32;
    f.in0 = a, f.in1 = b, f.accumulate = 0, f.wc = NULL;
    f.out = c->accumulate ? cc->bf_out.p : c->out;
    const conv_path *p = sg_conv_choose(cc, &f);
    cc->ran_inner[c->op] = (signed char)(p - sg_conv_paths);
    p->run(cc, &f);
    if (c->accumulate) sg_cpu_bf16_round_add(c->out, f.out, nout);
    else sg_cpu_bf16_round(c->out, c->out, nout);
}

/* ---------------- for tests (conv_paths.h) ---------------- */

int sg_cpu_conv_path_count(void) { return sg_conv_npaths; }

void sg_cpu_conv_path_get(int i, sg_cpu_conv_path_info *info) {
    const conv_path *p = &sg_conv_paths[i];
    *info = (sg_cpu_conv_path_info){p->name,       p->file,    isa_words[p->isa], p->passes,
                                    p->precisions, p->layouts, p->fallback};
}

int sg_cpu_conv_path_find(const char *name) { return find(name, strlen(name)); }

static sg_cpu_conv_cache *cache_of(sg_backend *be) { return sg_cpu_of(be)->conv; }

int sg_conv_precision_of(const sg_cpu_conv_cache *cc) {
    return cc->bf16 == BF16_NATIVE     ? PREC_BF16
           : cc->bf16 == BF16_EMULATED ? PREC_BF16_EMU
                                       : PREC_F32;
}

int sg_cpu_conv_precision(sg_backend *be) { return sg_conv_precision_of(cache_of(be)); }

unsigned sg_cpu_conv_path_flags(sg_backend *be, int i) {
    const sg_cpu_conv_cache *cc = cache_of(be);
    return (sg_conv_isa_ok(cc, &sg_conv_paths[i]) ? SG_CPU_CONV_ISA_OK : 0) |
           (cc->forced & (1u << i) ? SG_CPU_CONV_FORCED : 0) |
           (cc->off & (1u << i) ? SG_CPU_CONV_OFF : 0);
}

int sg_cpu_conv_path_ran(sg_backend *be, int pass, int *inner) {
    const sg_cpu_conv_cache *cc = cache_of(be);
    if (inner) *inner = cc->ran_inner[pass];
    return cc->ran[pass];
}

void sg_cpu_conv_path_forget(sg_backend *be) {
    sg_cpu_conv_cache *cc = cache_of(be);
    for (int i = 0; i < 3; i++) cc->ran[i] = cc->ran_inner[i] = -1;
}

uint32_t sg_cpu_conv_paths_for(sg_backend *be, const sg_conv_desc *d, int pass) {
    sg_cpu_conv_cache *cc = cache_of(be);
    conv_call c = {.d = d, .op = pass, .prec = sg_conv_precision_of(cc), .act = be->layout};
    uint32_t m = 0;
    for (int i = 0; i < sg_conv_npaths; i++)
        if (admits(cc, &sg_conv_paths[i], &c, 0) && rule_holds(cc, &sg_conv_paths[i], &c, 0))
            m |= 1u << i;
    return m;
}
