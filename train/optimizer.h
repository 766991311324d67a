/* train/optimizer.h - the optimizer (train.optimizer): SGD with
 * torch.optim.SGD semantics or AdamW with torch.optim.AdamW semantics, over
 * named parameters, with parameter groups: parameters under a train.freeze
 * prefix are skipped entirely (no update, no weight decay, no optimizer
 * state), parameters under a train.head_lr_prefixes prefix run at
 * lr * train.head_lr_mult (weight decay applies to every trained tensor, as
 * in torch with one parameter group). With train.clip_grad_norm the
 * gradients are first clipped to that total L2 norm
 * (torch.nn.utils.clip_grad_norm_).
 *
 * A parameter is also frozen when its sg_opt_param says so (the model's
 * registry is the authority; the prefixes only add to it).
 * Owns the optimizer state (SGD's momentum buffers, AdamW's exp_avg and
 * exp_avg_sq: device memory from the backend) and the backend's plan of the
 * fused step (sgd_multi_plan or adamw_multi_plan). sg_sgd is the optimizer
 * of either kind (the name is older than AdamW). A prefix
 * matches whole name components: "encoder.layer1" matches
 * "encoder.layer1.0.conv1.weight" but not "encoder.layer10.x".
 */
#ifndef SG_TRAIN_OPTIMIZER_H
#define SG_TRAIN_OPTIMIZER_H

#include <stddef.h>
#include <stdint.h>

#include "core/config.h"
#include "core/status.h"
#include "kernels/backend.h"

/* One trainable tensor as the model exposes it (device pointers). */
typedef struct sg_opt_param {
    const char *name;
    float *param;
    float *grad;
    size_t count;
    int frozen; /* 1: not trained (the model's registry says !trainable) */
} sg_opt_param;

typedef struct sg_sgd_entry {
    const char *name;
    /* SGD: buf the momentum buffer (NULL when frozen or momentum == 0);
     * AdamW: buf exp_avg and buf2 exp_avg_sq (NULL when frozen) */
    float *param, *grad, *buf, *buf2;
    size_t count;
    double lr_mult;
    int frozen;
} sg_sgd_entry;

typedef struct sg_sgd {
    sg_backend *be;
    sg_sgd_entry *e;
    int n;
    int adamw; /* 0: SGD, 1: AdamW */
    double momentum, dampening, weight_decay;
    int nesterov;
    double beta1, beta2, eps; /* AdamW */
    int64_t steps;            /* AdamW: steps taken (torch's state['step']) */
    double clip;              /* train.clip_grad_norm; 0 = off */
    double grad_norm;         /* the last step's total gradient norm before
                                 clipping (NaN when clip is off) */
    int initialized;          /* 0 until the first step filled the optimizer state */
    int n_frozen, n_head;
    /* the backend's fused step over the trained tensors (sgd_multi_plan),
     * and the lr multiplier of each of its groups */
    void *plan;
    double group_mult[SG_SGD_GROUPS];
    int n_groups;
} sg_sgd;

/* 1 if name equals prefix or starts with prefix followed by '.'. */
int sg_name_matches_prefix(const char *name, const char *prefix);
/* 1 if name matches any of the n prefixes. */
int sg_name_matches_any(const char *name, const char (*prefixes)[SG_NAME], int n);

/* Builds the groups and allocates the optimizer state (AdamW's zeroed).
 * Returns SG_OK, or
 * SG_ERR_CONFIG when a freeze or head prefix matches no parameter (a typo
 * would otherwise silently train everything), logging the key and prefix. */
sg_status sg_sgd_init(sg_sgd *opt, sg_backend *be, const sg_opt_param *params, int n,
                      const sg_train_cfg *t);
void sg_sgd_free(sg_sgd *opt);

/* One optimizer step at base learning rate lr over every non-frozen
 * parameter. With clipping on, first the total norm of the trained
 * gradients (the backend's optim_grad_sumsq over the plan, in double in a
 * fixed order: the same on every rank given the same gradients; one wait
 * for the device) and, when it is above the limit,
 * every gradient scaled by max_norm / (norm + 1e-6) in float as torch does.
 * SGD: one sgd_multi_step (one kernel launch on CUDA), the same bits as
 * sgd_step per parameter at (float)(lr * lr_mult). AdamW: one
 * adamw_multi_step with the step's scalars computed in double as torch
 * does (sg_adamw_args_for). */
void sg_sgd_step(sg_sgd *opt, double lr);

/* The scalars of AdamW step number t (from 1) at base rate lr. */
sg_adamw_args sg_adamw_args_for(const sg_sgd *opt, double lr, int64_t t);

/* Index of the entry named name, or -1. */
int sg_sgd_find(const sg_sgd *opt, const char *name);

#endif
