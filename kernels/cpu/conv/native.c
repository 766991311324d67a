/* kernels/cpu/conv/native.c - the native bf16 passes that run as GEMMs on
 * bf16 copies of their inputs rather than as oneDNN conv primitives, and
 * the rows taps-bf16, center, wino-cl and mm1x1 of the path table
 * (paths.c; mm1x1 runs its float32 passes here too). Each rounds its inputs to bf16
 * (round-to-nearest-even), sums in float32 and rounds the sum once to
 * bf16: what oneDNN's bf16 primitives compute (kernels/backend.h). oneDNN
 * 2.6 has no bf16 GEMM in its C API, but its matmul primitive is one
 * (matmul.c). The measurements behind each rule: docs/BENCHMARKS.md, "CPU
 * convolution paths".
 */
#include <string.h>

#include "kernels/cpu/conv/conv_internal.h"

/* ---- taps-bf16: sparse dilated convs (taps.c's rule), the backward passes
 * as per-tap bf16 GEMMs. The forward pass stays on oneDNN's dense bf16
 * primitive (dead taps trimmed), which skips the taps that read padding
 * itself and runs nearer the peak than a matmul; its backward passes do
 * the dense work (at large maps an im2col GEMM with a scratchpad of
 * hundreds of MiB). The forward pass runs here only when forced. ---- */
int sg_conv_taps_bf16_can(sg_cpu_conv_cache *cc, const conv_call *c) {
    (void)cc;
    return sg_conv_groups(c->d) == 1 && sg_conv_taps_applicable(c->d);
}

int sg_conv_taps_bf16_pays(const sg_cpu_conv_cache *cc, const conv_call *c) {
    (void)cc;
    return c->op != OP_FWD;
}

void sg_conv_taps_bf16_prep(sg_cpu_conv_cache *cc, const conv_call *c) {
    sg_conv_native_prep(cc, GEMM_TAPS, c);
}
void sg_conv_taps_bf16_run(sg_cpu_conv_cache *cc, const conv_call *c) {
    sg_conv_native_run(cc, GEMM_TAPS, c);
}

/* ---- wino-cl: 3x3 "same" convs on NHWC activations as wino_cl.c's
 * Winograd F(4x4, 3x3) with float32 GEMMs: oneDNN 2.6 has no bf16
 * Winograd and its bf16 direct kernels run near the AVX512-BF16 peak
 * already, so a quarter of the multiplies at half the rate is what can
 * still be won, from 128 channels on each side (below, too little work per
 * GEMM for the transforms). Not with AMX (the row's isa column): oneDNN's
 * bf16 kernels run on its tile multiplies there, several times the
 * AVX512-BF16 rate, which float32 GEMMs cannot approach. ---- */
int sg_conv_wino_cl_can(sg_cpu_conv_cache *cc, const conv_call *c) {
    (void)cc;
    return c->act == SG_LAYOUT_NHWC && sg_conv_wino_applicable(c->d);
}

int sg_conv_wino_cl_pays(const sg_cpu_conv_cache *cc, const conv_call *c) {
    (void)cc;
    return c->d->c >= 128 && c->d->k >= 128;
}

void sg_conv_wino_cl_prep(sg_cpu_conv_cache *cc, const conv_call *c) {
    sg_conv_native_prep(cc, GEMM_WINO, c);
}
void sg_conv_wino_cl_run(sg_cpu_conv_cache *cc, const conv_call *c) {
    sg_conv_native_run(cc, GEMM_WINO, c);
}

/* ---- mm1x1: the passes of 1x1 stride-1 convs on NHWC activations as one
 * matmul each (matmul.c), in float32 and native bf16. Backward-weights,
 * dW [k x c] = dy^T x: the matmul splits the work over the k x c output
 * only, not the long pixel reduction, so it needs a large weight (k >= 512
 * or k*c >= 1024*256). Backward-data, dx = dy W: from k = 128. The forward
 * pass is even (oneDNN's brgconv is this GEMM already): only when forced. */
int sg_conv_mm1x1_can(sg_cpu_conv_cache *cc, const conv_call *c) {
    (void)cc;
    return c->act == SG_LAYOUT_NHWC && sg_conv_mm_1x1(c->d);
}

int sg_conv_mm1x1_pays(const sg_cpu_conv_cache *cc, const conv_call *c) {
    (void)cc;
    const sg_conv_desc *d = c->d;
    if (c->op == OP_FWD) return 0;
    if (c->op == OP_BWD_DATA) return d->k >= 128;
    return d->k >= 512 || (long)d->k * d->c >= 1024L * 256;
}

void sg_conv_mm1x1_prep(sg_cpu_conv_cache *cc, const conv_call *c) {
    if (c->prec == PREC_BF16) {
        sg_conv_native_prep(cc, GEMM_MM1X1, c);
        return;
    }
    size_t n0, n1, nout;
    sg_conv_op_counts(c->d, c->op, &n0, &n1, &nout);
    ws_reserve(&cc->acc, nout * sizeof(float));
    if (c->op == OP_FWD) sg_conv_mm_1x1_fwd(cc->mm, c->d, 0, NULL, NULL, NULL);
    else if (c->op == OP_BWD_DATA) sg_conv_mm_1x1_bwd_data(cc->mm, c->d, 0, NULL, NULL, NULL);
    else sg_conv_mm_1x1_bwd_weight(cc->mm, c->d, 0, NULL, NULL, NULL);
}

void sg_conv_mm1x1_run(sg_cpu_conv_cache *cc, const conv_call *c) {
    if (c->prec == PREC_BF16) {
        sg_conv_native_run(cc, GEMM_MM1X1, c);
        return;
    }
    size_t n0, n1, nout;
    sg_conv_op_counts(c->d, c->op, &n0, &n1, &nout);
    ws_reserve(&cc->acc, nout * sizeof(float));
    float *r = c->accumulate ? cc->acc.p : c->out;
    if (c->op == OP_FWD) sg_conv_mm_1x1_fwd(cc->mm, c->d, 0, c->in0, c->in1, r);
    else if (c->op == OP_BWD_DATA) sg_conv_mm_1x1_bwd_data(cc->mm, c->d, 0, c->in0, c->in1, r);
    else sg_conv_mm_1x1_bwd_weight(cc->mm, c->d, 0, c->in0, c->in1, r);
    if (c->accumulate) sg_cpu_add_into(c->out, r, nout);
}

/* ---- center: the weight gradient of a stride-1 "same" conv whose only
 * live tap is the centre (every other tap at least the map size away:
 * ASPP's rate 36 on 32x32 maps) as mm1x1's matmul, where oneDNN runs its
 * trimmed 1x1 kernel with the gradient in bf16, reordered and scattered
 * into the taps. Its backward-data stays on oneDNN, whose trimmed bf16
 * weights are cached. ---- */
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

/* c as its centre tap's 1x1 conv. */
static conv_call center_call(const conv_call *c, const sg_conv_desc *d1) {
    conv_call c1 = *c;
    c1.d = d1;
    return c1;
}

int sg_conv_center_can(sg_cpu_conv_cache *cc, const conv_call *c) {
    if (c->op != OP_BWD_WEIGHT || !center_only(c->d)) return 0;
    sg_conv_desc d1 = center_desc(c->d);
    conv_call c1 = center_call(c, &d1);
    return sg_conv_mm1x1_can(cc, &c1);
}

int sg_conv_center_pays(const sg_cpu_conv_cache *cc, const conv_call *c) {
    sg_conv_desc d1 = center_desc(c->d);
    conv_call c1 = center_call(c, &d1);
    return sg_conv_mm1x1_pays(cc, &c1);
}

void sg_conv_center_prep(sg_cpu_conv_cache *cc, const conv_call *c) {
    sg_conv_native_prep(cc, GEMM_CENTER, c);
}
void sg_conv_center_run(sg_cpu_conv_cache *cc, const conv_call *c) {
    sg_conv_native_run(cc, GEMM_CENTER, c);
}

/* ---- the GEMM passes ---- */

/* Weight cache tags of the native GEMM paths' bf16 weights: above any of
 * weight_tag's (1 + id << 32 + ...), and apart from the emulation's 0. */
#define TAG_TAPS_BF16 (UINT64_C(1) << 63)
#define TAG_PLAIN_BF16 ((UINT64_C(1) << 63) + 1)

/* src as bf16 bits: src itself when stored so (dt SG_ACT_BF16), else its
 * rounded copy (round-to-nearest-even) in b. */
const uint16_t *sg_conv_bf16_input(ws_buf *b, const void *src, int dt, size_t count) {
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
 * (the *_dt ops) and never need it (sg_conv_bf16_input grows it on the
 * first call that does); dy, the input of backward-data, is always
 * float32. */
static void prepare_gemm(sg_cpu_conv_cache *cc, int path, const sg_conv_desc *d, int op, int act) {
    if (path == GEMM_CENTER) { /* backward-weights only */
        sg_conv_desc c = center_desc(d);
        ws_reserve(&cc->ctr, (size_t)d->k * d->c * sizeof(float));
        prepare_gemm(cc, GEMM_MM1X1, &c, op, act);
        return;
    }
    size_t n0, n1, nout;
    sg_conv_op_counts(d, op, &n0, &n1, &nout);
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

static void run_gemm(sg_cpu_conv_cache *cc, int path, const sg_conv_desc *d, int op, int act,
                     const void *in0, int xdt, const float *in1, void *out, int ydt, int accumulate,
                     sg_wcache *wc);

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
    run_gemm(cc, GEMM_MM1X1, &c, OP_BWD_WEIGHT, act, x, xdt, dy, g, SG_ACT_F32, 0, NULL);
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

/* A native bf16 pass as GEMMs (GEMM_*): bf16 inputs (in0 is x (fwd,
 * bwd_weight; bf16 bits when xdt is SG_ACT_BF16) or dy; in1 the weights or
 * dy), float32 accumulation, the sum rounded once to bf16 - what the native
 * primitives compute (backend.h) - then written (as bf16 bits when ydt is
 * SG_ACT_BF16) or added. */
static void run_gemm(sg_cpu_conv_cache *cc, int path, const sg_conv_desc *d, int op, int act,
                     const void *in0, int xdt, const float *in1, void *out, int ydt, int accumulate,
                     sg_wcache *wc) {
    if (path == GEMM_CENTER) { /* the row's can: backward-weights only */
        run_center(cc, d, act, in0, xdt, in1, out, accumulate);
        return;
    }
    size_t n0, n1, nout;
    sg_conv_op_counts(d, op, &n0, &n1, &nout);
    int nhwc = act == SG_LAYOUT_NHWC;
    /* dy (in0 of backward-data, in1 of backward-weights): cc->dy16 where
     * sg_cpu_conv_native_bwd rounded it for both */
    const uint16_t *a =
        op == OP_BWD_DATA && cc->dy16
            ? cc->dy16
            : sg_conv_bf16_input(&cc->g16[0], in0, op == OP_BWD_DATA ? SG_ACT_F32 : xdt, n0);
    /* the Winograd passes round the float32 weights as they read them */
    int w32 = path == GEMM_WINO;
    const uint16_t *b =
        op == OP_BWD_WEIGHT
            ? (cc->dy16 ? cc->dy16 : sg_conv_bf16_input(&cc->g16[1], in1, SG_ACT_F32, n1))
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

void sg_conv_native_prep(sg_cpu_conv_cache *cc, int path, const conv_call *c) {
    prepare_gemm(cc, path, c->d, c->op, c->act);
}

void sg_conv_native_run(sg_cpu_conv_cache *cc, int path, const conv_call *c) {
    run_gemm(cc, path, c->d, c->op, c->act, c->in0, c->xdt, c->in1, c->out, c->ydt, c->accumulate,
             c->wc);
}
