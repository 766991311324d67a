/* train/ema.h - exponential moving average of a model's weights (timm's
 * ModelEmaV2 semantics).
 *
 * The EMA starts as a copy of the model (sg_ema_copy_from_model: timm copies
 * the model when the EMA is created, i.e. before the first step; a resumed
 * run loads it from the checkpoint instead). After every optimizer step
 * whose count (steps completed, 1-based) is a multiple of `every`, every
 * float tensor of the state dict - parameters (frozen ones too, as timm) and
 * BN running_mean / running_var - becomes
 *     ema = decay * ema + (1 - decay) * model
 * in float32: fl(fl(decay * ema) + fl((1 - decay) * model)), with decay and
 * 1 - decay rounded to float, which is what PyTorch computes for
 * `decay * ema + (1. - decay) * model` on float32 tensors (two backend ops,
 * scale and axpy; neither backend fuses them). num_batches_tracked (int64)
 * is copied, as timm's ModelEmaV3 does for non-float entries.
 *
 * Owns device copies of the model's parameter and float buffer allocations
 * (sg_model_weights / sg_model_buffers, same offsets) and a host copy of its
 * num_batches_tracked values. Distributed: no communication. Parameters
 * are identical on every rank after each step, so their EMA is too; BN
 * buffers are identical under SyncBN; without SyncBN each rank keeps its own
 * running statistics (segtrain broadcasts them only at the start) and so its
 * own EMA of them - rank 0's is the one checkpoints store, as for the model.
 */
#ifndef SG_TRAIN_EMA_H
#define SG_TRAIN_EMA_H

#include <stddef.h>
#include <stdint.h>

#include "core/status.h"
#include "model/model.h"

typedef struct sg_ema_state {
    sg_model *m;
    sg_backend *be;
    double decay;
    int every;
    float *w, *b; /* device: [sg_model_param_count(m, 0)], [sg_model_buffer_count(m)] */
    size_t nw, nb;
    int64_t *i64; /* host: one per num_batches_tracked entry, registry order */
    int n_i64;
} sg_ema_state;

/* Allocates the EMA of m (contents undefined until sg_ema_copy_from_model or
 * a checkpoint load). decay in (0, 1), every >= 1 (the config validates
 * them). SG_OK, or SG_ERR_CONFIG after logging a value out of range. */
sg_status sg_ema_init(sg_ema_state *e, sg_model *m, double decay, int every);
void sg_ema_free(sg_ema_state *e);

/* EMA := the model's current weights, buffers and counters. */
void sg_ema_copy_from_model(sg_ema_state *e);

/* Called after optimizer step number `steps_done` (1-based) has completed:
 * updates the EMA when steps_done is a multiple of `every`. Returns 1 when
 * it updated, 0 otherwise. */
int sg_ema_after_step(sg_ema_state *e, int64_t steps_done);

/* The one update, unconditionally. */
void sg_ema_update(sg_ema_state *e);

/* Exchanges the model's weights, float buffers and num_batches_tracked with
 * the EMA's (exact copies through a temporary device buffer): evaluate with
 * the EMA in the model, then swap again to get the training weights back
 * bit for bit. */
void sg_ema_swap(sg_ema_state *e);

/* Device pointer of registry entry p's EMA (p a float entry of e->m), or
 * the host int64 for a num_batches_tracked entry (via *i64). */
float *sg_ema_tensor(sg_ema_state *e, const sg_param *p, int64_t **i64);

#endif
