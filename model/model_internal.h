/* model/model_internal.h - the model's private graph representation.
 *
 * The network is a flat list of layers over numbered tensors, built once by
 * model_build.c in forward order. Tensor 0 is the input. Shapes depend on
 * the input size and are filled by sg_model_plan (model_plan.c); the runner
 * (model_run.c) walks the list forward, and in reverse for backward.
 * Shared by model_build.c, model_plan.c, model_run.c, model_onnx.c (which
 * walks the list to write the ONNX graph), model_io.c (for
 * sg_model_registry_size), model_profile.c (per-layer timing),
 * model_graphs.c (graph replay) and, outside model/, the benchmark's
 * traffic model train/bench_traffic.c only;
 * tests/model/test_onnx_export.c plants an unknown layer type through it.
 */
#ifndef SG_MODEL_MODEL_INTERNAL_H
#define SG_MODEL_MODEL_INTERNAL_H

#include "model/model.h"

enum {
    L_CONV = 0, /* conv (+ bias) */
    L_BN,       /* batch norm (+ relu) */
    L_MAXPOOL,  /* 3x3 / 2 pad 1 */
    L_ADD_RELU, /* relu(a + b): residual join */
    L_AVGPOOL,  /* global average pool -> 1x1 */
    L_RESIZE,   /* bilinear to the size of tensor `ref` */
    L_CONCAT,   /* channel concat of in[0..n_in) */
    L_DROPOUT,
    /* channel dropout (PyTorch's Dropout2d, mmseg's heads): whole [h, w]
     * planes kept (scaled by 1/(1-p)) or zeroed; the plane mask is drawn on
     * the host (sg_rng_uniform(key, n*c + c) >= p keeps) and applied with
     * the scale/zero/axpy ops, so every backend gets the same mask */
    L_DROPOUT2D,
    /* MobileNetV3 / LR-ASPP (model/backbone_mobilenetv3.c, head_lraspp.c):
     * activations on in[0] (backward reads the input x for the hard ones,
     * the output y for relu and sigmoid), a plain add, and channel scaling
     * y = in[0] * in[1][n, c] (in[1] is [n, c, 1, 1]: squeeze-excitation's
     * and LR-ASPP's gates). All read and write float32 (act_storage). */
    L_ADD,
    L_RELU,
    L_HARDSWISH,
    L_HARDSIGMOID,
    L_SIGMOID,
    L_CHAN_SCALE
};

#define SG_MAX_IN 12 /* concat of 2 + SG_MODEL_MAX_RATES branches */

typedef struct sg_tensor {
    int c, h, w;              /* planned shape (batch = m->n) */
    size_t count;             /* n*c*h*w */
    int producer;             /* layer index, -1 for the input */
    int last_consumer;        /* forward layer index of the last reader (-1 none) */
    int req_grad;             /* some trainable parameter lies upstream */
    size_t val_off, grad_off; /* byte offsets in the arena; SIZE_MAX = none */
    /* Storage of val (model_plan.c, act_storage): SG_ACT_F32, or SG_ACT_BF16
     * (2 bytes per value; only conv outputs read by batch norm alone and
     * BN+ReLU outputs read by convs alone, under train.precision bf16; val
     * then points at bf16 bits and only the *_dt ops may touch it). rnd:
     * written rounded to bf16 under train.precision bf16 (a fused join's
     * output), stored so or not. gdt: storage of grad (model_plan.c,
     * grad_storage): SG_ACT_F32, or SG_ACT_BF16 where a bf16 conv and the
     * BN kernels alone write it once and read it (grad then points at bf16
     * bits; only the *_dt ops' dy / dx may touch it). */
    int dt, rnd, gdt;
    float *val, *grad;
} sg_tensor;

typedef struct sg_layer {
    int type;
    int in[SG_MAX_IN];
    int n_in;
    int out;
    int acc_in[SG_MAX_IN]; /* backward: 1 = add into grad(in[i]) */
    /* conv */
    int w_param, b_param; /* registry indices, b_param -1 if no bias */
    int k, r, stride, pad, dil;
    int groups; /* 0 or 1 ungrouped; c = k = groups: depthwise (sg_conv_desc.groups) */
    sg_conv_desc desc;
    /* bn: registry indices of weight, bias, running_mean, running_var, nbt */
    int bn_p[5];
    int relu;
    /* eps and momentum of this BN (the model's bn_eps/bn_momentum, or
     * MobileNetV3's own 0.001 / 0.01 in its backbone) */
    float bn_eps, bn_momentum;
    int frozen_stats;
    size_t mean_off, invstd_off; /* arena bytes, [c] each, live fwd->bwd */
    float *mean, *invstd;
    int batch_stats_used; /* the last forward used batch statistics */
    double count_global;  /* values per channel in the last batch-stat forward */
    /* BN fused with the residual join (sg_model_update_grad_flags): on a BN
     * without ReLU whose output only a L_ADD_RELU reads, join = that
     * layer's index, and on the L_ADD_RELU, fused_bn = the BN's; -1 when
     * not fused. The join's forward runs the BN's normalize with the add
     * (bn_add_relu_fwd), its backward the whole BN backward (model_run.c). */
    int join, fused_bn;
    /* maxpool */
    size_t idx_off;
    int32_t *idx;
    /* resize */
    int ref; /* tensor whose h, w is the target size */
    /* dropout */
    float p;
    int drop_id;
    size_t mask_off;
    uint8_t *mask;
    /* dropout2d: host plane mask [n*c] of the last training forward; with
     * NHWC activations also its scale per plane (alpha or 0) on the device */
    uint8_t *chmask;
    size_t chmask_cap;
    float *chscale;
} sg_layer;

struct sg_model {
    sg_backend *be;
    sg_model_opts o;
    sg_model_hooks hooks;
    int has_hooks;

    /* registry */
    sg_param *params;
    int n_params, cap_params;
    float *weights, *grads, *buffers; /* device */
    size_t n_weights, n_buffers, head_offset;
    int64_t *nbt; /* host, one per BN */
    int n_bn;

    /* graph */
    sg_tensor *t;
    int n_t, cap_t;
    sg_layer *l;
    int n_l, cap_l;
    int t_out, t_aux; /* final logits tensors, t_aux -1 */
    int n_dropout;

    /* plan */
    int planned;  /* 0 none, 1 train, 2 infer */
    int act_bf16; /* the plan stores activations in bf16 where exact */
    int n, h, w;
    void *arena;
    size_t arena_bytes; /* the current plan's bytes */
    size_t arena_cap;   /* bytes allocated (>= arena_bytes: kept across smaller plans) */
    /* scratch (arena): BN stats [2c], parts [world][2c], red/redg [2c],
     * zero red [2c] (eval-mode backward) */
    float *stats, *parts, *red, *redg, *zero_red;
    int64_t *counts;   /* host [world] */
    int planned_world; /* rows of parts */
    int max_c;
    int fwd_train;   /* mode of the last forward, -1 none */
    int *grad_order; /* trainable params in backward order */
    int n_grad_order;
    struct sg_model_prof *prof; /* per-layer timing (model_profile.c); NULL = off */

    /* graphs (model_graphs.c): on (sg_model_set_graphs), the plan's
     * generation (bumped by every re-plan, model_plan.c), and per pass the
     * recorded graph of the current plan with its eager runs before it */
    int graphs_on;
    uint64_t plan_gen;
    struct sg_model_graph {
        uint64_t plan_gen; /* the plan it belongs to */
        int runs;          /* eager runs under that plan */
        void *g;           /* the backend's graph, NULL until recorded */
    } graph[3];            /* SG_MG_* */
};

/* model_graphs.c: the passes a graph may replace */
enum { SG_MG_FORWARD = 0, SG_MG_BACKWARD = 1, SG_MG_BACKWARD_ACC = 2 };
/* model_run.c's passes, handed to model_graphs.c (so calls go one way): the
 * ops as issued (the eager passes, and what a graph records), and what a
 * training forward does on the host besides issuing ops
 * (num_batches_tracked, what backward reads), which a launch of a recorded
 * forward repeats. */
typedef struct sg_model_passes {
    void (*forward)(sg_model *m, int train, uint64_t dropout_key);
    void (*backward)(sg_model *m, int accumulate);
    void (*forward_host_replay)(sg_model *m);
} sg_model_passes;
/* model_graphs.c: runs pass `which` (SG_MG_*) of the current plan through a
 * graph when graphs are on and the pass qualifies: records it the second
 * time it runs under a plan (the first eager run builds the backend's
 * per-shape caches) and launches the recording after that. Returns 1 when
 * the pass ran that way, 0 when the caller runs it eagerly. dropout_key:
 * the forward's, for the eager ops recorded. */
int sg_model_graph_run(sg_model *m, int which, uint64_t dropout_key, const sg_model_passes *p);
/* model_graphs.c: frees the recorded graphs (a re-plan, destroy). */
void sg_model_graphs_drop(sg_model *m);

/* model_run.c: sg_model_passes.forward_host_replay (tests call it too). */
void sg_model_forward_host_replay(sg_model *m);

/* model_build.c: what a model of (valid) options o holds, from the graph
 * built on the host only (no device memory); model_io.c's
 * sg_model_expected_size. */
void sg_model_registry_size(const sg_model_opts *o, int *tensors, size_t *f32, size_t *i64);

/* model_profile.c: with m->prof set, the runner's marks (the backend
 * synchronised, the time since the previous mark to layer l's pass) */
void sg_model_prof_start(sg_model *m);
void sg_model_prof_mark(sg_model *m, const sg_layer *l, int pass);

/* model_plan.c */
/* Shapes of every tensor (t[].c/h/w/count) and conv descs (l[].desc) for the
 * input [n, 3, h, w], and each tensor's storage (t[].dt, t[].rnd, t[].gdt:
 * as a plan under train.precision bf16 would store it when act_bf16 is 1;
 * gdt reads the BN fusion of sg_model_update_grad_flags), into t[]
 * and l[]:
 * copies of m's arrays (train/bench_traffic.c), m itself untouched. SG_OK, or
 * SG_ERR_CONFIG (logged) if a layer's output would be empty. */
sg_status sg_model_shapes(const sg_model *m, sg_tensor *t, sg_layer *l, int n, int h, int w,
                          int act_bf16);
/* Bytes per element of tensor t's activation (val: 2 when t->dt is
 * SG_ACT_BF16, else 4) and of its gradient (grad: 4 for every tensor
 * today). The storage decisions' one reading: the plan sizes its arena
 * with them and the traffic model (train/bench_traffic.c) counts bytes with
 * them, so a plan that stores a gradient in bf16 changes both here. */
int sg_tensor_act_esize(const sg_tensor *t);
int sg_tensor_grad_esize(const sg_tensor *t);
void sg_model_update_grad_flags(sg_model *m);
void sg_model_release_plan(sg_model *m);

#endif
