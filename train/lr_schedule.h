/* train/lr_schedule.h - learning-rate schedules, counted in optimizer steps
 * (train.iters counts optimizer steps too; a milestone N is the step that
 * begins after N steps were taken).
 *
 * Stateless: the LR is a pure function of the optimizer step t (0-based: the
 * first step runs at t = 0), so resuming only needs the step count (stored in
 * the checkpoint's metadata). T = the run's total optimizer steps.
 *
 * Main schedules (torch.optim.lr_scheduler closed forms):
 *   poly:     lr = (base - min_lr) * (1 - t/T)^power + min_lr   (mmseg PolyLR;
 *             min_lr = 0: torch PolynomialLR(total_iters=T, power) and
 *             torchvision's base * (1 - t/T)^power)
 *   constant: lr = base
 *   cosine:   lr = min_lr + (base - min_lr) * (1 + cos(pi * t/T)) / 2
 *             (torch CosineAnnealingLR(T_max=T, eta_min=min_lr))
 *   step:     lr = base * gamma^(number of milestones <= t)
 *             (torch MultiStepLR(milestones=train.lr_steps, gamma=train.lr_gamma))
 * Past T the LR stays at its value for T.
 *
 * Warmup (train.warmup, over the first warmup_iters steps) multiplies the
 * main schedule's LR at the same step t by a factor:
 *   linear:   ratio + (1 - ratio) * t / warmup_iters   (torch LinearLR(
 *             start_factor=ratio, total_iters=warmup_iters); mmcv's linear warmup)
 *   constant: ratio                                    (torch ConstantLR(
 *             factor=ratio, total_iters=warmup_iters); mmcv's constant warmup)
 *   none:     1
 * and 1 from step warmup_iters on. How the two compose (train.warmup_mode):
 *   chained (default): lr(t) = factor(t) * main(t). This is torch's
 *     ChainedScheduler([warmup, main]) (for min_lr = 0; with min_lr > 0 it is
 *     the product of the two closed forms) and mmseg 0.x / mmcv's warmup: the
 *     main schedule runs over the whole run, so milestones and T count steps
 *     from the start, as users write them.
 *   sequential: lr(t) = base * factor(t) for t < W = warmup_iters, then
 *     main(t - W) over T - W steps (milestones count from the end of the
 *     warmup). This is torch's SequentialLR([warmup, main], milestones=[W]),
 *     as torchvision's reference script chains LinearLR and PolynomialLR
 *     (total_iters = T - W) and mmseg 1.x's param_scheduler lists do.
 */
#ifndef SG_TRAIN_LR_SCHEDULE_H
#define SG_TRAIN_LR_SCHEDULE_H

#include <stdint.h>

#include "core/config.h"
#include "core/status.h"
#include "io/json.h"

enum { SG_LR_POLY = 0, SG_LR_CONSTANT = 1, SG_LR_COSINE = 2, SG_LR_STEP = 3 };
enum { SG_WARMUP_LINEAR = 0, SG_WARMUP_CONSTANT = 1, SG_WARMUP_NONE = 2 };

typedef struct sg_lr_schedule {
    int kind;
    double base_lr, power, min_lr;
    int warmup_kind;
    int sequential;   /* train.warmup_mode sequential */
    int warmup_iters; /* 0 when warmup_kind is none */
    double warmup_ratio;
    int64_t total_steps; /* optimizer steps of the whole run */
    int n_steps;         /* step: milestones, strictly increasing, >= 1 */
    int64_t steps[SG_LIST_MAX];
    double gamma;
} sg_lr_schedule;

/* From the train section. Returns SG_OK, or SG_ERR_CONFIG after logging an
 * error naming the key (unknown schedule or warmup, total_steps < 1, min_lr
 * > lr, step without milestones or with milestones not strictly increasing).
 * A milestone past total_steps is allowed (a warning says it never fires). */
sg_status sg_lr_schedule_init(sg_lr_schedule *s, const sg_train_cfg *t, int64_t total_steps);

/* LR of optimizer step `step` (0-based: the first step uses step 0). */
double sg_lr_at(const sg_lr_schedule *s, int64_t step);

/* The schedule's name ("poly", ...) and the warmup's ("linear", ...). */
const char *sg_lr_kind_name(int kind);
const char *sg_lr_warmup_name(int warmup_kind);

/* Writes the schedule into j, an open object, as the checkpoint's
 * lr_schedule metadata records it: kind, base_lr, power, min_lr, for step
 * gamma and milestones ("a,b,c"), warmup, warmup_iters, warmup_ratio,
 * total_steps, then where the run stands: step (the next optimizer step)
 * and next_lr (its lr). For people and tools reading the file; resuming
 * rebuilds the schedule from the config, not from this. */
void sg_lr_schedule_json(const sg_lr_schedule *s, int64_t step, sg_json *j);

#endif
