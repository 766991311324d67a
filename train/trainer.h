/* train/trainer.h - the training loop as a library function (the train
 * command, tests and the benchmark call it).
 *
 * sg_train_run builds everything from a validated config (backend,
 * communicator, model, DDP, datasets, loader, optimizer, schedule), resumes if
 * asked, and runs optimizer steps until train.iters (or train.epochs) are done:
 *  - a step takes accum_steps micro-batches of batch_size per rank; the loss is
 *    CE(out) + aux_weight * CE(aux), normalised by the valid pixels of the
 *    whole step over all ranks (train.loss_norm: global; the count is known
 *    before the forward passes) or per micro-batch and rank (local);
 *  - DDP reduces gradients only on the last micro-step; the LR schedule counts
 *    optimizer steps;
 *  - the sampler position (samples of the epoch's global order consumed) moves
 *    by batch_size * accum_steps * world per step, so a resumed run continues
 *    at the exact next sample, with any world size;
 *  - at each epoch end the samples drop_last left out are evaluated
 *    (leftover_miou); validation every eval_every and at the end; checkpoints
 *    every checkpoint_every, at the end and on SIGINT/SIGTERM/SIGHUP (then
 *    the call returns after logging how to resume, reporting the signal; the
 *    same request arriving both directly and forwarded by the launcher
 *    counts once, any other second signal ends the process at once).
 * Rank 0 logs progress lines and writes <run_dir>/metrics.jsonl,
 * <run_dir>/eval/iter_<N>.json and the checkpoints.
 */
#ifndef SG_TRAIN_TRAINER_H
#define SG_TRAIN_TRAINER_H

#include <stdint.h>

#include "core/config.h"
#include "core/status.h"

/* Optional instrumentation for tests (all fields may be 0/NULL). */
typedef struct sg_train_debug {
    int64_t *seen_train;    /* [train size]: += 1 per sample trained on (this rank) */
    int64_t *seen_leftover; /* [train size]: += 1 per sample of a leftover pass (this rank) */
    double *step_loss;      /* [step_loss_cap]: total loss of optimizer step i (0-based) */
    int64_t step_loss_cap;
    int64_t stop_at_iter; /* > 0: raise(SIGTERM) during this step (1-based) */
    /* outputs */
    double last_val_miou; /* NaN if no validation ran */
    double last_leftover_miou;
    int64_t leftover_samples; /* total over all leftover passes, all ranks */
    int64_t iters_done;
    long graph_captures, graph_launches; /* cuda.graphs: the backend's counts at the end */
} sg_train_debug;

/* resume: NULL (fresh run), "auto" (newest valid checkpoint of the run in
 * run_dir, or fresh when run_dir holds no checkpoint) or a checkpoint path.
 * A fresh run over another run's checkpoints, or one run's checkpoint
 * resumed into a run_dir holding another run's, is SG_ERR_CONFIG (run ids:
 * train/checkpoint.h). Once the resume checks passed rank 0 writes
 * <run_dir>/config.yaml (a refused resume leaves it unchanged). An
 * evaluation due at the resumed iteration that never ran (the run was
 * interrupted right after that step) runs first; an epoch-based run counts
 * its remaining steps from the sample position with this world size. The
 * run directory must have been opened (sg_cli_open_run_dir or
 * sg_cli_prepare_run_dir); its lock (core/cli.h) is the caller's: the train
 * command takes it. Returns SG_OK, SG_ERR_RUNTIME or
 * SG_ERR_CONFIG (logged; a batch or crop the model cannot train on is found
 * before the first step). *stop_signal (may be NULL) receives the signal
 * number that interrupted the run - SG_OK then, with the checkpoint written
 * and the resume hint logged; or an error status when the signal came
 * before a checkpoint could be written (while joining the job, or ending a
 * failed step); the train command exits 128 + signal either way - or 0. */
sg_status sg_train_run(const sg_config *cfg, const char *resume, sg_train_debug *dbg,
                       int *stop_signal);

#endif
