/* dist/ddp.h - data-parallel training: gradient buckets and SyncBN.
 *
 * sg_ddp_create attaches to a model through its hooks (model/model.h):
 *  - broadcasts parameters and buffers (running stats, num_batches_tracked)
 *    from rank 0, so every rank starts from the same weights;
 *  - groups the trainable parameters' gradients into buckets of
 *    dist.bucket_mb (the first dist.first_bucket_mb) in the order backward
 *    produces them (sg_model_grad_order); frozen parameters are in no bucket;
 *  - grad_ready: when a bucket's last gradient is final, its all-reduce
 *    starts on the comm thread (CUDA: on the comm stream, ordered after the
 *    compute stream) while backward goes on; gradients are averaged (scaled
 *    by 1/world); a bucket whose gradients are one contiguous range of the
 *    model's gradient allocation is reduced in place, others through a flat
 *    copy;
 *  - every bucket is reduced at every synchronizing step: sg_ddp_wait starts
 *    any bucket backward did not complete, so an unused branch cannot hang;
 *  - SyncBN (model.sync_bn and world > 1): bn_gather all-gathers every rank's
 *    (mean, M2) and count; bn_allreduce sums the 2C backward reductions.
 *
 * Per step: sg_ddp_set_sync(d, 0) before the backward of an accumulation
 * micro-step (no communication at all), sg_ddp_set_sync(d, 1) before the
 * last one, then sg_ddp_wait(d) before the optimizer. In a world of 1 every
 * call is a cheap no-op and no hook is set.
 *
 * Errors (core/status.h): calls return SG_OK or SG_ERR_RUNTIME (logged by
 * dist/comm.c, naming the failed rank). A hook cannot return an error; a
 * failure inside one breaks the communicator and the next sg_ddp_wait
 * returns SG_ERR_RUNTIME.
 */
#ifndef SG_DIST_DDP_H
#define SG_DIST_DDP_H

#include <stddef.h>

#include "core/config.h"
#include "core/status.h"
#include "dist/comm.h"
#include "kernels/backend.h"
#include "model/model.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct sg_ddp sg_ddp;

/* Attaches to `model` (sets its hooks) and broadcasts its state from rank 0.
 * Call it after loading/freezing and before sg_model_plan (the model sizes
 * its SyncBN buffers for the hooks' world when it plans). NULL after logging
 * on failure. */
sg_ddp *sg_ddp_create(sg_comm *comm, sg_model *model, const sg_config *cfg);
/* Clears the model's hooks and frees the buckets. NULL allowed. */
void sg_ddp_destroy(sg_ddp *d);

/* Broadcasts parameters and buffers from rank 0 again (e.g. after rank 0
 * alone changed them). Returns SG_OK (at once in a world of 1), or
 * SG_ERR_RUNTIME after the communicator logged the failed rank. */
sg_status sg_ddp_broadcast_state(sg_ddp *d);

/* 0: the following backward is an accumulation micro-step (no
 * communication); 1 (the default): it synchronizes. */
void sg_ddp_set_sync(sg_ddp *d, int sync);
/* After a synchronizing backward: starts any bucket not yet started, waits
 * for every bucket, leaves averaged gradients in the model's gradient
 * buffers (ordered before later compute-stream ops). Returns SG_OK, or
 * SG_ERR_RUNTIME after logging that the gradient all-reduce failed (the
 * failed rank is named above it). After a non-synchronizing backward:
 * returns SG_OK at once. */
sg_status sg_ddp_wait(sg_ddp *d);

/* Seconds the training thread spent blocked in sg_ddp_wait so far
 * (communication not hidden behind backward). */
double sg_ddp_wait_seconds(const sg_ddp *d);
/* Buckets (for logs and tests): count (an int, not a status), and bucket
 * i's size in floats. */
int sg_ddp_num_buckets(const sg_ddp *d);
size_t sg_ddp_bucket_floats(const sg_ddp *d, int i);

/* ---- the same machinery without a model (tests, other trainers) ----
 * grads[i]: gradient i (device, count[i] floats), NULL = frozen (no bucket);
 * order: the order backward reports them (n_order entries, each index once).
 * Reports come through sg_ddp_grad_ready. */
sg_ddp *sg_ddp_create_raw(sg_comm *comm, float *const *grads, const size_t *count, int n,
                          const int *order, int n_order, double bucket_mb, double first_bucket_mb);
void sg_ddp_grad_ready(sg_ddp *d, int index);

/* The SyncBN hooks on their own (ctx = the sg_comm), for tests and for
 * models attached without DDP buckets. */
void sg_syncbn_gather(void *comm, const float *local_stats, int64_t local_count, float *parts,
                      int64_t *counts, int c);
void sg_syncbn_allreduce(void *comm, float *red, int c2);

#ifdef __cplusplus
}
#endif

#endif
