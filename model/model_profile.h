/* model/model_profile.h - per-layer timing of the forward and backward passes
 * (`segtrain bench --profile`).
 *
 * When profiling is on, the runner (model_run.c) marks the end of every timed
 * piece of a layer's work: the backend is synchronised (ops->sync) and the
 * wall and process CPU time since the previous mark go to (layer, pass).
 * A pass is the part of a layer's work that one backend op (or a short run of
 * them) does, so a conv's forward, data gradient and weight gradient, or a
 * batch norm's statistics and apply, are timed apart. The first mark of a
 * pass starts at sg_model_forward / sg_model_backward's entry, so the layers'
 * times add up to the two calls' wall time (less the sync and clock reads).
 * Off (the default), the runner only tests one pointer per layer.
 *
 * sg_model_layer_info describes a layer for the breakdown's table: its kind,
 * geometry and (convs) multiply-adds, from the current plan.
 */
#ifndef SG_MODEL_MODEL_PROFILE_H
#define SG_MODEL_MODEL_PROFILE_H

#include <stdint.h>

#include "model/model.h"

typedef enum {
    SG_PROF_FWD = 0,    /* forward (BN: the apply, with its fused ReLU) */
    SG_PROF_FWD_STATS,  /* BN forward: batch statistics (+ SyncBN gather + finalize) */
    SG_PROF_BWD,        /* backward (BN: dx; conv: not used) */
    SG_PROF_BWD_REDUCE, /* BN backward: the reduction + gamma/beta gradients */
    SG_PROF_BWD_WEIGHT, /* conv backward: weight (+ bias) gradient */
    SG_PROF_BWD_DATA,   /* conv backward: data gradient */
    SG_PROF_N
} sg_prof_pass;

/* "fwd", "fwd stats", "bwd", "bwd reduce", "bwd weight", "bwd data". */
const char *sg_prof_pass_name(int pass);

/* Turns per-layer timing on (the totals start at zero) or off (frees them).
 * Works on a planned or unplanned model; the layer list is fixed at creation. */
void sg_model_profile(sg_model *m, int on);
int sg_model_profiling(const sg_model *m);
/* Zeroes the totals (after warmup steps). */
void sg_model_profile_reset(sg_model *m);

typedef struct sg_prof_entry {
    double wall_s, cpu_s; /* summed since the last reset; cpu: the process, all threads */
    int64_t calls;        /* marks of this (layer, pass) */
} sg_prof_entry;

/* Totals of (layer li, pass); all zero when profiling is off or li / pass is
 * out of range. */
sg_prof_entry sg_model_profile_get(const sg_model *m, int li, int pass);

int sg_model_num_layers(const sg_model *m);

typedef struct sg_layer_info {
    const char *kind;     /* "conv", "bn", "maxpool", "add_relu", "avgpool", "resize",
                             "concat", "dropout", "dropout2d"; "layer" for a kind this
                             table does not know */
    char name[96];        /* the layer's parameter prefix (conv, bn), else its kind */
    int n_in;             /* input tensors */
    int c_in, h_in, w_in; /* first input, as planned (batch m->n) */
    int c_out, h_out, w_out;
    int batch;
    /* conv only */
    int kh, kw, stride_h, stride_w, pad_h, pad_w, dil_h, dil_w, groups;
    int has_bias;
    double macs; /* one forward pass over the planned batch */
    int relu;    /* bn: ReLU fused in */
} sg_layer_info;

/* Fills *out for layer li (0 <= li < sg_model_num_layers) of the current plan
 * (shapes are zero before sg_model_plan). */
void sg_model_layer_info(const sg_model *m, int li, sg_layer_info *out);

#endif
