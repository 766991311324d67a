/* model/model.h - DeepLabV3 (ResNet backbone) on the op interface.
 *
 * Builds torchvision's deeplabv3_resnet{18,34,50,101} / fcn_resnet{50,101}
 * module trees exactly (torchvision 0.14 models/segmentation/deeplabv3.py,
 * fcn.py, resnet.py), deeplabv3_mobilenet_v3_large / lraspp_mobilenet_v3_large
 * (mobilenetv3.py, lraspp.py), or mmsegmentation's DeepLabV3 / FCN /
 * DeepLabV3+ (ASPPHead, FCNHead, DepthwiseSeparableASPPHead, ResNetV1c;
 * model.names mmseg), and
 * runs its forward and backward through kernels/backend.h only, so the same
 * code runs on every backend.
 *
 * Owns:
 *  - the parameter registry: every state-dict entry with torchvision's name
 *    under the prefixes encoder. / decoder. / aux_head. (torchvision:
 *    backbone. / classifier. / aux_classifier.), in torchvision's state_dict
 *    order. Trainable parameters live in ONE device allocation (state-dict
 *    order, so every encoder parameter comes before every head parameter),
 *    their gradients in ONE allocation with the same offsets, float buffers
 *    (BN running_mean/var) in one more; num_batches_tracked are int64 on the
 *    host.
 *  - the activation arena: planned once per input shape by sg_model_plan and
 *    reused every step (no allocation inside forward/backward).
 *
 * Errors (core/status.h): functions that can fail return sg_status (or NULL
 * for sg_model_create) after logging; a shape or option the user chose that
 * the model cannot take is SG_ERR_CONFIG. Forward and backward cannot fail:
 * what could go wrong there is refused when planning.
 *
 * Conventions: logits are [n, C, h, w] at the input resolution (bilinear,
 * align_corners=False). FLOPs = 2 x multiply-adds of every conv (incl. the
 * classifier and aux head, bias adds not counted), per image; torchvision's
 * "178.72 GFLOPS" for deeplabv3_resnet50 at 520x520 are multiply-adds, i.e.
 * sg_model_macs.
 */
#ifndef SG_MODEL_MODEL_H
#define SG_MODEL_MODEL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "core/status.h"
#include "kernels/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

struct sg_config;

#define SG_MODEL_MAX_RATES 8

/* resnet*: torchvision's ResNet (7x7 stem; mmseg's ResNetV1b is the same
 * tree); resnet*v1c: mmsegmentation's ResNetV1c (deep stem of three 3x3
 * convs, stem width 64 -> 32, 32, 64; otherwise the same blocks). */
typedef enum {
    SG_RESNET18 = 0,
    SG_RESNET34 = 1,
    SG_RESNET50 = 2,
    SG_RESNET101 = 3,
    SG_RESNET50V1C = 4,
    SG_RESNET101V1C = 5,
    /* torchvision's MobileNetV3-Large as its segmentation models build it
     * (mobilenet_v3_large(dilated=True): the last stage dilated, output
     * stride 16; width scaled by width_mult) */
    SG_MOBILENET_V3_LARGE = 6
} sg_backbone;
#define SG_N_BACKBONES 7

/* model.arch: the decode head. deeplabv3plus: mmseg's
 * DepthwiseSeparableASPPHead (model/head_sepaspp.c; names mmseg, a
 * bottleneck ResNet only); lraspp: torchvision's LR-ASPP head
 * (model/head_lraspp.c), on mobilenet_v3_large only. */
typedef enum {
    SG_ARCH_DEEPLABV3 = 0,
    SG_ARCH_FCN = 1,
    SG_ARCH_DEEPLABV3PLUS = 2,
    SG_ARCH_LRASPP = 3
} sg_arch;
#define SG_N_ARCHS 4

/* model.names: whose module tree (and so state-dict names) the heads follow.
 * torchvision: DeepLabHead / FCNHead (classifier.N, aux_classifier.N);
 * mmseg: mmsegmentation's ASPPHead / FCNHead with mmcv ConvModules
 * (decode_head.aspp_modules.1.conv.weight, ....bn.*, conv_seg; Dropout2d
 * before conv_seg). The backbone's names are the same in both. */
typedef enum { SG_NAMES_TORCHVISION = 0, SG_NAMES_MMSEG = 1 } sg_names;

typedef struct sg_model_opts {
    sg_backbone backbone;
    int output_stride;                  /* 8 | 16 */
    int aspp_rates[SG_MODEL_MAX_RATES]; /* torchvision: 12, 24, 36 */
    int n_aspp_rates;                   /* >= 1 */
    int num_classes;                    /* 1..255 */
    int aux_head;                       /* 1: FCNHead on layer3 */
    float aspp_dropout;                 /* ASPP project dropout, default 0.5 */
    float aux_dropout;                  /* FCNHead dropout, default 0.1 */
    int base_width;                     /* 64 = torchvision; every width scales */
    float bn_eps;                       /* 1e-5 */
    float bn_momentum;                  /* 0.1 */
    /* Blocks per layer; all 0 = the backbone's own ([2,2,2,2], [3,4,6,3],
     * [3,4,23,3]). Tests and golden fixtures use fewer to stay tiny. */
    int blocks[4];
    sg_arch arch;       /* default deeplabv3 */
    sg_names names;     /* default torchvision */
    float head_dropout; /* before the classifier of fcn and the mmseg heads (0.1) */
    /* mobilenet_v3_large: torchvision's width_mult (1.0; channels rounded by
     * its _make_divisible(c * width_mult, 8)); double, as Python computes
     * it. The heads' widths follow base_width (DeepLabHead 4 * base_width,
     * LR-ASPP inter 2 * base_width: 256 and 128 at 64). */
    double width_mult;
} sg_model_opts;

/* torchvision defaults for `backbone` (deeplabv3, rates 12,24,36, OS 8,
 * width 64, 21 classes, aux head on, dropout 0.5/0.1/0.1, eps 1e-5, momentum
 * 0.1); names mmseg for the v1c backbones, torchvision otherwise. */
void sg_model_opts_default(sg_model_opts *o, sg_backbone backbone);
/* Parses "resnet18|resnet34|resnet50|resnet101|resnet50v1c|resnet101v1c|
 * mobilenet_v3_large".
 * Returns SG_OK, or SG_ERR_CONFIG without logging (the caller names the key). */
sg_status sg_backbone_parse(const char *s, sg_backbone *out);
const char *sg_backbone_name(sg_backbone b);
/* "deeplabv3|fcn|deeplabv3plus|lraspp" and "torchvision|mmseg"; same contract. */
sg_status sg_arch_parse(const char *s, sg_arch *out);
const char *sg_arch_name(sg_arch a);
sg_status sg_names_parse(const char *s, sg_names *out);
const char *sg_names_name(sg_names n);
/* Fills opts from the config's model section. Returns SG_OK, or
 * SG_ERR_CONFIG after logging which model.* key is invalid and why. */
sg_status sg_model_opts_from_config(sg_model_opts *o, const struct sg_config *cfg);
/* The model's configuration rule (core/config.h's sg_config_rule): refuses
 * an unknown model.backbone/arch/names and an (arch, backbone, names)
 * combination that is not built, with the message model creation logs,
 * through sg_config_reject (it names the key and where it was set). */
sg_status sg_model_config_check(const struct sg_config *cfg);

typedef enum {
    SG_PK_CONV_WEIGHT = 0,
    SG_PK_CONV_BIAS = 1, /* classifier biases (decoder.4, aux_head.4) */
    SG_PK_BN_WEIGHT = 2,
    SG_PK_BN_BIAS = 3,
    SG_PK_RUNNING_MEAN = 4,
    SG_PK_RUNNING_VAR = 5,
    SG_PK_NUM_BATCHES = 6 /* int64, host */
} sg_param_kind;

typedef enum { SG_DT_F32 = 0, SG_DT_I64 = 1 } sg_param_dtype;

/* One state-dict entry. */
typedef struct sg_param {
    char name[96]; /* e.g. "encoder.layer1.0.conv1.weight" */
    int ndim;      /* 1 or 4 (0 for num_batches_tracked: a scalar) */
    int shape[4];
    size_t count; /* elements */
    sg_param_kind kind;
    sg_param_dtype dtype;
    float *data;   /* device; NULL for num_batches_tracked */
    float *grad;   /* device; NULL for buffers */
    int64_t *i64;  /* host; num_batches_tracked only */
    size_t offset; /* element offset of data (and grad) inside its
                            allocation: sg_model_weights() for parameters,
                            sg_model_buffers() for running stats */
    int is_buffer; /* running_mean / running_var / num_batches_tracked */
    int trainable; /* parameters only; 0 after sg_model_freeze */
    int is_head;   /* under decoder. or aux_head. */
} sg_param;

typedef struct sg_model sg_model;

/* Builds the network and its registry (parameters allocated, zeroed:
 * call sg_model_init or load weights). Returns NULL after logging what is
 * wrong with the options. */
sg_model *sg_model_create(sg_backend *be, const sg_model_opts *o);
void sg_model_destroy(sg_model *m);
const sg_model_opts *sg_model_get_opts(const sg_model *m);
sg_backend *sg_model_backend(const sg_model *m);

/* ---- registry ---- */
int sg_model_num_params(const sg_model *m);                   /* state-dict keys */
sg_param *sg_model_param(sg_model *m, int i);                 /* state-dict order */
sg_param *sg_model_find(sg_model *m, const char *name);       /* NULL if absent */
int sg_model_find_index(const sg_model *m, const char *name); /* -1 if absent */
/* Scalar parameter count (weights and biases; no buffers). trainable_only:
 * only those not frozen. */
size_t sg_model_param_count(const sg_model *m, int trainable_only);
/* The parameter allocation (device) and the gradient allocation (same
 * offsets, same length = sg_model_param_count(m, 0)). */
float *sg_model_weights(sg_model *m);
float *sg_model_grads(sg_model *m);
/* Float buffers (running_mean/var, device) and their element count. */
float *sg_model_buffers(sg_model *m);
size_t sg_model_buffer_count(const sg_model *m);
/* Element offset inside sg_model_weights where the first head (decoder./
 * aux_head.) parameter starts: parameters [0, off) are the encoder's. */
size_t sg_model_head_offset(const sg_model *m);

/* torchvision's initialisation, deterministic from `seed` (kernels/rng.h,
 * key (seed, param index, SG_RNG_INIT), Box-Muller): encoder convs kaiming
 * normal (fan_out, relu): N(0, 2/fan_out); decoder/aux_head convs PyTorch's
 * Conv2d default: U(-1/sqrt(fan_in), 1/sqrt(fan_in)) for weights and the
 * classifier biases; BN weight 1, bias 0, running_mean 0, running_var 1,
 * num_batches_tracked 0. */
void sg_model_init(sg_model *m, uint64_t seed);

/* ---- freezing ----
 * Parameters whose name starts with `prefix` ("encoder.", "encoder.layer1.",
 * "" = all) get trainable = 0: no gradient is computed for them (their grad
 * entries are zeroed once and stay 0); data gradients still flow through
 * them where an earlier trainable parameter needs them. freeze_bn_stats:
 * BN layers under the prefix also use running stats in training and do not
 * update them (nor num_batches_tracked). Returns the number of parameters
 * frozen (0 logs a warning naming the prefix). */
int sg_model_freeze(sg_model *m, const char *prefix, int freeze_bn_stats);
/* Only the statistics: BN layers whose parameter names start with `prefix`
 * ("" = every BN) use running stats in training and do not update them;
 * their weight/bias stay trainable (gradients as through a fixed affine
 * map). Returns the number of BN layers affected (0 logs a warning). */
int sg_model_freeze_bn_stats(sg_model *m, const char *prefix);

/* ---- planning ----
 * Plans the activation arena for input [n, 3, h, w] and builds every conv's
 * primitives (ops->conv_prepare). Re-planning with the same shape and mode is
 * free; a different shape frees and re-plans (do it only when the shape
 * changes: eval on full images). sg_model_plan plans for training (forward +
 * backward); sg_model_plan_infer plans forward only (less memory; backward is
 * then an error). Returns SG_OK, or SG_ERR_CONFIG after logging why: the
 * input is too small for the output stride, or (training plan) a batch-norm
 * layer that takes batch statistics would see only one value per channel -
 * e.g. the ASPP pooling branch (1x1 after its global average pool) with
 * n = 1 and no SyncBN across ranks (hooks world 1); freeze that layer's
 * statistics (sg_model_freeze_bn_stats) or plan a batch >= 2. Set the hooks
 * and freeze before planning: the check uses both. */
sg_status sg_model_plan(sg_model *m, int n, int h, int w);
sg_status sg_model_plan_infer(sg_model *m, int n, int h, int w);
/* Writes the current plan to f: one row per activation (producer, shape,
 * storage: fp32, bf16, fp32 holding bf16 values, or none for a BN fused
 * into its join) and the totals per storage (`segtrain bench --plan`). */
void sg_model_plan_dump(const sg_model *m, FILE *f);
/* Bytes of the planned arena (activations, gradients, masks, BN scratch). */
size_t sg_model_activation_bytes(const sg_model *m);
/* Bytes of device memory the activation arena holds: at least the current
 * plan's (sg_model_activation_bytes). A new plan that fits reuses the arena
 * (zeroed, as a fresh one); a larger one frees it and allocates anew. */
size_t sg_model_arena_held(const sg_model *m);
/* The arena bytes a plan for [n,3,h,w] would take (train: sg_model_plan,
 * else sg_model_plan_infer), computed without allocating; 0 if invalid. */
size_t sg_model_plan_bytes(const sg_model *m, int n, int h, int w, int train);
/* What bf16 activation storage (train.precision bf16, model_plan.c) saves at
 * most in such a plan: the float32 bytes of the tensors it stores in bf16
 * minus their bf16 bytes (each rounded up to the arena's alignment), or 0
 * when the plan stores none (fp32, SG_BF16_STORAGE=0) or is invalid. The
 * arena shrinks by at most this (placement decides the rest). */
size_t sg_model_plan_bf16_saving(const sg_model *m, int n, int h, int w, int train);
/* Forward multiply-adds per image at h x w (no plan needed), and
 * sg_model_flops = 2 * sg_model_macs. */
double sg_model_macs(const sg_model *m, int h, int w);
double sg_model_flops(const sg_model *m, int h, int w);

/* Device buffer [n, 3, h, w] (planned shape) the caller fills, e.g. with
 * ops->normalize_u8. It keeps its content across forwards; a re-plan (new
 * shape or mode) moves it, so fetch it after every sg_model_plan*. */
float *sg_model_input(sg_model *m);

/* Forward pass. train = 1: BN with batch statistics (updates running stats
 * and num_batches_tracked, except frozen-stat layers), dropout with masks
 * keyed by dropout_key (one sub-stream per dropout layer); train = 0: running
 * stats, no dropout. */
void sg_model_forward(sg_model *m, int train, uint64_t dropout_key);
/* Logits [n, C, h, w]; sg_model_aux is NULL without an aux head. */
float *sg_model_out(sg_model *m);
float *sg_model_aux(sg_model *m);
/* Gradient buffers of the same shapes the caller fills (ops->ce_fwd_bwd)
 * before sg_model_backward. daux is NULL without an aux head. Their memory
 * is reused by other gradients during backward: fill them anew before every
 * backward. The logits stay valid until the next forward or plan. */
float *sg_model_dout(sg_model *m);
float *sg_model_daux(sg_model *m);
/* Backward pass after a train = 1 forward. accumulate = 0: parameter
 * gradients are overwritten; 1: added to (gradient accumulation). Frozen
 * parameters' gradients are not touched. */
void sg_model_backward(sg_model *m, int accumulate);

/* ---- graphs (backends with SG_CAP_GRAPHS: CUDA graphs; model_graphs.c) ----
 * on = 1: a training forward and backward of a plan are recorded as graphs
 * the second time they run (the first, eager, run builds the per-shape
 * caches) and launched as one unit after that, with results bit for bit
 * those of the eager passes. Passes whose host decisions change between
 * steps always run eagerly: with profiling, with Dropout2d layers, the
 * forward under SyncBN across ranks, the backward with DDP hooks. A
 * re-plan, a freeze or new hooks drop the recordings. Returns SG_OK, or
 * SG_ERR_CONFIG after logging when on = 1 and the backend has no graphs. */
sg_status sg_model_set_graphs(sg_model *m, int on);

/* ---- distributed hooks (world 1: none set) ---- */
typedef struct sg_model_hooks {
    void *ctx;
    /* SyncBN, training forward: gather every rank's local BN stats ([2c]
     * mean,M2 on the device) and counts; fills parts [world][2c] (device) and
     * counts[world] (host). NULL = local BN. */
    void (*bn_gather)(void *ctx, const float *local_stats, int64_t local_count, float *parts,
                      int64_t *counts, int c);
    int world; /* rows of `parts` */
    /* SyncBN backward: sum-all-reduce red [2c] (device) in place across ranks. */
    void (*bn_allreduce)(void *ctx, float *red, int c2);
    /* DDP: param i's gradient (registry index) is final for this backward;
     * called in the order backward produces them, for every trainable param,
     * every backward. */
    void (*grad_ready)(void *ctx, int param_index);
} sg_model_hooks;

/* Copies *h (NULL = clear). Takes effect at the next plan/forward. */
void sg_model_set_hooks(sg_model *m, const sg_model_hooks *h);

/* The order in which backward reports gradients (registry indices of the
 * trainable parameters), for DDP bucket assignment before the first backward.
 * Returns the count written (<= cap). */
int sg_model_grad_order(const sg_model *m, int *out, int cap);

#ifdef __cplusplus
}
#endif

#endif
