/* train/optimizer.h - SGD with torch.optim.SGD semantics over named parameters,
 * with parameter groups: parameters under a train.freeze prefix are skipped
 * entirely (no update, no weight decay, no momentum buffer), parameters under
 * a train.head_lr_prefixes prefix run at lr * train.head_lr_mult.
 *
 * A parameter is also frozen when its sg_opt_param says so (the model's
 * registry is the authority; the prefixes only add to it).
 * Owns the momentum buffers (device memory from the backend) and the
 * backend's plan of the fused step (sgd_multi_plan). A prefix
 * matches whole name components: "encoder.layer1" matches
 * "encoder.layer1.0.conv1.weight" but not "encoder.layer10.x".
 */
#ifndef SG_TRAIN_OPTIMIZER_H
#define SG_TRAIN_OPTIMIZER_H

#include <stddef.h>

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
    float *param, *grad, *buf; /* buf NULL when frozen or momentum == 0 */
    size_t count;
    double lr_mult;
    int frozen;
} sg_sgd_entry;

typedef struct sg_sgd {
    sg_backend *be;
    sg_sgd_entry *e;
    int n;
    double momentum, dampening, weight_decay;
    int nesterov;
    int initialized; /* 0 until the first step filled the momentum buffers */
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

/* Builds the groups and allocates momentum buffers. Returns SG_OK, or
 * SG_ERR_CONFIG when a freeze or head prefix matches no parameter (a typo
 * would otherwise silently train everything), logging the key and prefix. */
sg_status sg_sgd_init(sg_sgd *opt, sg_backend *be, const sg_opt_param *params, int n,
                      const sg_train_cfg *t);
void sg_sgd_free(sg_sgd *opt);

/* One optimizer step at base learning rate lr over every non-frozen
 * parameter: one sgd_multi_step (one kernel launch on CUDA), the same bits
 * as sgd_step per parameter at (float)(lr * lr_mult). */
void sg_sgd_step(sg_sgd *opt, double lr);

/* Index of the entry named name, or -1. */
int sg_sgd_find(const sg_sgd *opt, const char *name);

#endif
