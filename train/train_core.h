/* train/train_core.h - the training step's machinery, shared by the training
 * loop (train/trainer.c) and the benchmark (train/bench_run.c) so both run the
 * same step by construction.
 *
 * An sg_train_core owns the backend, the communicator, the model with its
 * SGD state, DDP, and K = train.accum_steps device slots for micro-batches.
 * It is built in three stages, because the trainer interleaves its own setup
 * (datasets, schedule, resume) between them:
 *   sg_train_core_open    backend (train/device.h: cuda:LOCAL_RANK with
 *                         several local ranks), communicator, and the
 *                         step's fixed fields
 *   sg_train_core_model   model, init from the seed, optionally
 *                         model.pretrained, freezing, SGD parameter groups
 *   sg_train_core_attach  DDP (after any loading: it broadcasts rank 0's
 *                         state), the device slots, the training plan (a
 *                         batch/crop the model cannot train on, e.g. batch
 *                         norm with one value per channel, is refused here:
 *                         SG_ERR_CONFIG before any step)
 * sg_train_core_setup runs all three without data or weights (the benchmark);
 * sg_train_core_loader makes the training loader both use.
 *
 * sg_train_step is one optimizer step on micro-batches already uploaded to
 * the slots, or staged in their host memory (it uploads those itself, each
 * while the one before computes): one all-reduce of (valid pixels, images[, pixels per class]),
 * then per micro-batch normalize_u8, forward(train, key(seed, iter, micro,
 * rank, DROPOUT)), the loss on out and aux (loss_norm global: grad scale
 * world/D with D the step's global valid pixels, or with class weights the
 * sum of their weights; local: 1/(K * D of the micro-batch)). The loss is
 * ce_fwd_bwd, or with train.class_weights / OHEM ce_weighted: OHEM
 * (train/loss_opts.h) selects, per rank and per forward as mmseg's sampler
 * does per GPU, the main head's pixels to train on; the aux head always
 * takes every valid pixel. The denominator D does not depend on the
 * selection (mmseg's, with avg_non_ignore: the unselected pixels add 0 to
 * the sum but still count), so it is known before the first forward and
 * the step stays exact across ranks and micro-batches. The loss ops
 * (ce_weighted_acc) add their sums on the device; the step reads them once,
 * after the optimizer (one wait for the device a step, where there were two
 * a micro-batch). With class weights
 * or OHEM each micro-batch's labels are downloaded once to count them per
 * class (B x crop bytes), and OHEM reads its threshold back (kth_smallest).
 * DDP sync on the last micro-batch,
 * backward (accumulating after the first); sg_ddp_wait, sg_sgd_step(lr), and
 * one f64 all-reduce of (main loss, aux loss, stop flag), so every rank gets
 * the same global loss and stop decision.
 */
#ifndef SG_TRAIN_TRAIN_CORE_H
#define SG_TRAIN_TRAIN_CORE_H

#include <signal.h>
#include <stdint.h>

#include "core/config.h"
#include "core/status.h"
#include "data/dataset.h"
#include "data/loader.h"
#include "dist/comm.h"
#include "dist/ddp.h"
#include "kernels/backend.h"
#include "model/model.h"
#include "train/optimizer.h"

/* The phases of a step, in the order a step's time is reported. */
enum { SG_PH_DATA, SG_PH_FWD, SG_PH_LOSS, SG_PH_BWD, SG_PH_COMM, SG_PH_OPT, SG_PH_N };

/* One micro-batch on the device: n images of h x w (RGB u8, HWC) and their
 * labels; valid = label pixels that are not data.ignore_index.
 * img_host / lab_host: host_alloc memory of the same size (pinned on CUDA).
 * staged = 1: the micro-batch is there, not yet on the device, and
 * sg_train_step uploads it (upload_async on the copy stream: micro-batch
 * k + 1 travels while k computes); the host copies stay untouched until
 * the step returns. staged = 0: img / lab hold it already. */
typedef struct sg_micro_batch {
    uint8_t *img, *lab;
    uint8_t *img_host, *lab_host;
    int staged;
    int n, h, w;
    int64_t valid;
} sg_micro_batch;

typedef struct sg_train_core {
    const sg_config *cfg;
    sg_backend *be;
    sg_comm *comm;
    sg_ddp *ddp;
    sg_model *m;
    sg_sgd opt;
    int rank, world;
    int B, K, C, crop_h, crop_w; /* batch_size, accum_steps, classes, crop */
    int global_norm;             /* train.loss_norm == global */
    float mean[3], std[3];
    sg_micro_batch *slot;              /* [K]: img/lab (and their host twins) sized
                                     for B x crop; the caller uploads into them,
                                     or stages (staged = 1), and sets n, h, w, valid */
    const volatile sig_atomic_t *stop; /* set before open (or NULL): a stop
                                     signal's flag, which ends joining the
                                     other ranks at once (dist/comm.h) */
    /* loss options (attach; train/loss_opts.h): */
    float *class_w;          /* device [C]: train.class_weights, NULL = off */
    float class_w_host[256]; /* the same, on the host (the denominators) */
    float ohem_thresh;       /* > 0: OHEM on the main head */
    float *ohem_prob;        /* device [B x crop]: true-class probabilities */
    uint8_t *lab_host;       /* host [B x crop]: a micro-batch's labels, counted
                                     per class (class weights or OHEM on) */
    double *loss_acc;        /* device [2]: the step's main and aux loss sums,
                                added by the loss ops, read once at the end */
    double *loss_host;       /* host_alloc [2]: where they are read to (pinned
                                on CUDA: one wait, no staging) */
    int64_t *counts;         /* host [2 + C + K*C]: the step's counts, then
                                [2 + C + K*world]: their all-reduce with every
                                rank's micro-batch sizes (SyncBN) */
} sg_train_core;

/* Each returns SG_OK, SG_ERR_RUNTIME or SG_ERR_CONFIG (logged; see
 * core/status.h); after any outcome sg_train_core_close frees what was
 * built. */
sg_status sg_train_core_open(sg_train_core *c, const sg_config *cfg);
/* load_pretrained: apply model.pretrained (the trainer; the benchmark skips
 * it: weights do not change the speed). verbose: log the model summary. */
sg_status sg_train_core_model(sg_train_core *c, int load_pretrained, int verbose);
sg_status sg_train_core_attach(sg_train_core *c);
/* A training loader over ds (augmentation on, batch_size images per batch)
 * whose batches live in the backend's host memory (pinned on a GPU). NULL
 * after logging on failure; the caller destroys it before closing c. */
sg_loader *sg_train_core_loader(sg_train_core *c, const sg_dataset *ds);
/* open + model (no pretrained weights, quiet) + attach. */
sg_status sg_train_core_setup(sg_train_core *c, const sg_config *cfg);
void sg_train_core_close(sg_train_core *c);

typedef struct sg_step_opts {
    int64_t iter; /* optimizer step (0-based): the dropout key */
    double lr;
    const volatile sig_atomic_t *stop; /* NULL, or this rank's stop flag: read after
                                           the optimizer, reduced with the losses */
    /* NULL, or called as each phase ends (it may sync the backend so
     * asynchronous work lands in its phase); the first call closes the
     * count all-reduce (SG_PH_COMM): data loading is the caller's. */
    void (*phase)(void *ctx, int phase);
    void *ctx;
} sg_step_opts;

/* What one step reports, identical on every rank. */
typedef struct sg_step_out {
    double loss, loss_main, loss_aux; /* loss = main + aux_weight * aux */
    int64_t images;                   /* this step, all ranks */
    int stop;                         /* some rank's stop flag was set */
    double grad_norm; /* total gradient norm before clipping (train.clip_grad_norm; the
                         same on every rank), NaN with clipping off */
} sg_step_out;

/* The micro-batch sizes of the counts all-reduce (sizes[k * world + q]:
 * rank q's k-th micro-batch, slots x world entries) are network input:
 * SyncBN derives its value counts from them. Each must lie in
 * [0, max_batch], and this rank's slots must equal own[0..n_own) (0
 * beyond), as every other rank adds 0 there. SG_OK, or SG_ERR_RUNTIME
 * after logging the slot. */
sg_status sg_check_batch_sizes(const int64_t *sizes, int slots, int world, int rank,
                               const int64_t *own, int n_own, int max_batch);

/* One optimizer step on mb[0..k) (1 <= k <= K, each planned shape at most
 * B x crop). Returns SG_OK, or SG_ERR_RUNTIME after logging (communication;
 * a re-plan the model refuses). */
sg_status sg_train_step(sg_train_core *c, const sg_micro_batch *mb, int k, const sg_step_opts *so,
                        sg_step_out *o);

#endif
