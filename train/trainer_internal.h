/* train/trainer_internal.h - the training loop's state, shared by trainer.c
 * (setup, steps, the run) and train_events.c (progress, evaluation, leftover
 * pass, checkpoints). The step's machinery (backend, comm, model, SGD, DDP,
 * device slots) is the embedded sg_train_core (train/train_core.h). Not a
 * public header: use train/trainer.h. */
#ifndef SG_TRAIN_TRAINER_INTERNAL_H
#define SG_TRAIN_TRAINER_INTERNAL_H

#include <stdint.h>

#include "core/config.h"
#include "core/util.h"
#include "data/dataset.h"
#include "data/loader.h"
#include "data/sampler.h"
#include "io/tfevents.h"
#include "train/checkpoint.h"
#include "train/ema.h"
#include "train/evaluator.h"
#include "train/lr_schedule.h"
#include "train/progress.h"
#include "train/train_core.h"
#include "train/trainer.h"

typedef struct trainer {
    const sg_config *cfg;
    sg_train_debug *dbg;
    sg_train_core c; /* be, comm, model, opt, ddp, slots, B, K, ... */
    sg_dataset *train_ds, *val_ds;
    sg_loader *loader;
    sg_evaluator ev_val, ev_left;
    int have_ev_val, have_ev_left;
    sg_lr_schedule sched;
    sg_ema_state ema;         /* train.ema_decay > 0: the EMA of the weights */
    int have_ema, ema_loaded; /* ema_loaded: restored from the resumed checkpoint */
    sg_train_state st;
    sg_sampler sampler;
    int64_t *idx, *perm;      /* [N] */
    int64_t epoch_steps_left; /* optimizer steps left in the current epoch's list */
    int64_t last_ckpt_iter;
    int resumed; /* this run continues from a checkpoint */
    char metrics_path[SG_STR + 32];
    /* progress */
    double t_log, wait_log;
    int64_t iter_log;
    double step_s_ema;   /* smoothed seconds per step (the ETA), 0 = not known */
    double paused_s;     /* seconds in evaluation/checkpoints since the last line */
    double val_s;        /* the last validation's seconds (the ETA counts the ones left) */
    int64_t steps_epoch; /* optimizer steps per epoch */
    /* leftover passes of short epochs, folded into the next progress line */
    int64_t left_folded, left_epoch;
    double left_miou;
    sg_tb_writer *tb;       /* rank 0, train.tensorboard; NULL otherwise */
    sg_stage_watch *stages; /* names slow setup stages until the first step ends */
    sg_progress prog;       /* the live progress line (rank 0) */
} trainer;

/* Progress line (rank 0) and a metrics.jsonl line. */
void sg_tr_log_progress(trainer *T, const sg_step_out *o, double lr);
/* After every step: the live progress line (train/progress.h), its ETA
 * counting the validations left. */
void sg_tr_show_progress(trainer *T, const sg_step_out *o);
/* Leftover pass over positions [end_pos, N) of the finished epoch's order.
 * Its mIoU gets its own line, or is folded into the next progress line when
 * epochs are shorter than train.log_every. SG_OK or SG_ERR_RUNTIME (logged). */
sg_status sg_tr_leftover_pass(trainer *T, int64_t end_pos);
/* Logs the folded leftover results not yet shown (the run ends). */
void sg_tr_leftover_flush(trainer *T);
/* Rank 0 writes iter_<N> (best = 0) or best.safetensors; all ranks agree on
 * the outcome. SG_OK or SG_ERR_RUNTIME (logged). */
sg_status sg_tr_write_checkpoint(trainer *T, int best);
/* Validation, reports, best checkpoint. SG_OK or SG_ERR_RUNTIME (logged). */
sg_status sg_tr_evaluate_and_keep_best(trainer *T);

#endif
