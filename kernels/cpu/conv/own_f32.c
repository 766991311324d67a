/* kernels/cpu/conv/own_f32.c - the rows of the backend's own float32
 * convolution paths (paths.c): dw, taps, taps-bwd, wino-own and phases.
 * Each row's can is the
 * geometry its kernels compute, its pays the measured rule, its prep and
 * run adapt the call to the kernel file. The measurements behind each
 * rule: docs/BENCHMARKS.md, "CPU convolution paths". Every rule is one of
 * the geometry and the ISA, never of timings: results must not depend on
 * the machine's load.
 */
#include "kernels/cpu/conv/conv_internal.h"

/* ---- dw: the backward passes of dilated depthwise convs (dw.c), which
 * oneDNN runs as a slow GEMM-based convolution. ---- */
int sg_conv_dw_can(sg_cpu_conv_cache *cc, const conv_call *c) {
    (void)cc;
    return c->op != OP_FWD && sg_conv_dw_applicable(c->d);
}

void sg_conv_dw_prep(sg_cpu_conv_cache *cc, const conv_call *c) {
    if (c->act == SG_LAYOUT_NHWC && c->op == OP_BWD_DATA) sg_conv_dw_prepare(&cc->dw_wt, c->d);
}

void sg_conv_dw_run(sg_cpu_conv_cache *cc, const conv_call *c) {
    int nhwc = c->act == SG_LAYOUT_NHWC;
    if (c->op == OP_BWD_DATA)
        sg_conv_dw_bwd_data(&cc->dw_wt, c->d, nhwc, c->in0, c->in1, c->out, c->accumulate);
    else sg_conv_dw_bwd_weight(c->d, nhwc, c->in0, c->in1, c->out, c->accumulate);
}

/* ---- taps, taps-bwd: per-tap GEMMs over the valid regions (taps.c).
 * taps: sparse dilated convs (stride 1, most taps reading padding: ASPP at
 * output stride 8) on NCHW activations, where oneDNN's blocked kernels do
 * the dense work. On NHWC oneDNN's channels-last forward kernel skips the
 * padding taps itself and beats the GEMMs; its backward kernels do not,
 * and lose to the per-tap GEMMs even where only a few percent of the
 * dense work is padding: taps-bwd. Ungrouped only. ---- */
int sg_conv_taps_can(sg_cpu_conv_cache *cc, const conv_call *c) {
    (void)cc;
    return sg_conv_groups(c->d) == 1 && sg_conv_taps_applicable(c->d);
}

int sg_conv_taps_bwd_can(sg_cpu_conv_cache *cc, const conv_call *c) {
    (void)cc;
    return sg_conv_groups(c->d) == 1 && sg_conv_taps_bwd_f32_applicable(c->d);
}

void sg_conv_taps_prep(sg_cpu_conv_cache *cc, const conv_call *c) {
    sg_conv_taps_prepare(&cc->taps, c->d);
}

void sg_conv_taps_run(sg_cpu_conv_cache *cc, const conv_call *c) {
    int nhwc = c->act == SG_LAYOUT_NHWC;
    if (c->op == OP_FWD) sg_conv_taps_fwd(&cc->taps, NULL, c->d, nhwc, c->in0, c->in1, c->out);
    else if (c->op == OP_BWD_DATA)
        sg_conv_taps_bwd_data(&cc->taps, NULL, c->d, nhwc, c->in0, c->in1, c->out, c->accumulate);
    else
        sg_conv_taps_bwd_weight(&cc->taps, NULL, c->d, nhwc, c->in0, c->in1, c->out, c->accumulate);
}

/* ---- wino-own: the backend's own Winograd F(4x4, 3x3) for 3x3 stride-1
 * convs with padding = dilation (wino.c), dilated ones on their phase
 * tiles. Where oneDNN has no Winograd kernel (AVX2: the row's isa column)
 * its direct kernels and its sgemm run at about the same rate, so the
 * quarter of the multiplies is what is won. NCHW only: on NHWC the tile
 * gathers stride over channels, and the per-tap backward passes are not
 * slower there. ---- */
int sg_conv_wino_own_can(sg_cpu_conv_cache *cc, const conv_call *c) {
    (void)cc;
    return sg_conv_wino_applicable(c->d);
}

void sg_conv_wino_own_prep(sg_cpu_conv_cache *cc, const conv_call *c) {
    sg_conv_wino_reserve(&cc->wino, c->d);
}

void sg_conv_wino_own_run(sg_cpu_conv_cache *cc, const conv_call *c) {
    int nhwc = c->act == SG_LAYOUT_NHWC;
    if (c->op == OP_FWD) sg_conv_wino_fwd(&cc->wino, c->d, nhwc, c->in0, c->in1, c->out);
    else if (c->op == OP_BWD_DATA)
        sg_conv_wino_bwd_data(&cc->wino, c->d, nhwc, c->in0, c->in1, c->out, c->accumulate);
    else sg_conv_wino_bwd_weight(&cc->wino, c->d, nhwc, c->in0, c->in1, c->out, c->accumulate);
}

/* ---- phases: dilated 3x3 convs on NHWC activations as the undilated conv
 * of their phase sub-images (phases.c) on oneDNN's Winograd, where the
 * dilated conv runs direct at about twice the time. ---- */
int sg_conv_phases_can(sg_cpu_conv_cache *cc, const conv_call *c) {
    (void)cc;
    if (c->act != SG_LAYOUT_NHWC || !sg_conv_phases_applicable(c->d)) return 0;
    sg_conv_desc p = sg_conv_phases_desc(c->d);
    return sg_conv_onednn_wino_geometry(&p);
}

static conv_entry *phases_entry(sg_cpu_conv_cache *cc, const conv_call *c) {
    sg_conv_desc p = sg_conv_phases_desc(c->d);
    return sg_conv_onednn_entry(cc, &p, c->op, LAYOUT_WINO, SG_LAYOUT_NHWC, 0, SG_ACT_F32,
                                SG_ACT_F32);
}

/* The entry; its buffers grow at first use. */
void sg_conv_phases_prep(sg_cpu_conv_cache *cc, const conv_call *c) { phases_entry(cc, c); }

void sg_conv_phases_run(sg_cpu_conv_cache *cc, const conv_call *c) {
    const sg_conv_desc *d = c->d;
    const float *in0 = c->in0, *in1 = c->in1;
    float *out = c->out;
    int D = d->dil_h;
    size_t nx = (size_t)d->n * d->c * d->h * d->w, ny = (size_t)d->n * d->k * d->oh * d->ow;
    conv_entry *e = phases_entry(cc, c);
    if (c->op == OP_FWD) {
        ws_reserve(&cc->ph[0], nx * sizeof(float));
        ws_reserve(&cc->ph[2], ny * sizeof(float));
        sg_conv_to_phases(cc->ph[0].p, in0, d->n, d->h, d->w, d->c, D);
        sg_conv_onednn_exec(cc, e, cc->ph[0].p, in1, cc->ph[2].p, 0, NULL);
        sg_conv_from_phases(out, cc->ph[2].p, d->n, d->oh, d->ow, d->k, D, 0);
    } else if (c->op == OP_BWD_DATA) {
        ws_reserve(&cc->ph[0], ny * sizeof(float));
        ws_reserve(&cc->ph[2], nx * sizeof(float));
        sg_conv_to_phases(cc->ph[0].p, in0, d->n, d->oh, d->ow, d->k, D);
        sg_conv_onednn_exec(cc, e, cc->ph[0].p, in1, cc->ph[2].p, 0, NULL);
        sg_conv_from_phases(out, cc->ph[2].p, d->n, d->h, d->w, d->c, D, c->accumulate);
    } else {
        ws_reserve(&cc->ph[0], nx * sizeof(float));
        ws_reserve(&cc->ph[1], ny * sizeof(float));
        sg_conv_to_phases(cc->ph[0].p, in0, d->n, d->h, d->w, d->c, D);
        sg_conv_to_phases(cc->ph[1].p, in1, d->n, d->oh, d->ow, d->k, D);
        sg_conv_onednn_exec(cc, e, cc->ph[0].p, cc->ph[1].p, out, c->accumulate, NULL);
    }
}
