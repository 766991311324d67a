/* train/lr_schedule.h - learning-rate schedules, counted in optimizer steps.
 *
 * Stateless: the LR is a pure function of the optimizer step, so resuming only
 * needs the step count (stored in the checkpoint's metadata).
 *   poly:     lr = (base - min_lr) * (1 - step/total)^power + min_lr   (mmseg PolyLR;
 *             with min_lr = 0 it is torchvision's base * (1 - it/max)^power)
 *   constant: lr = base
 * Linear warmup (mmseg semantics) over the first warmup_iters steps multiplies
 * the scheduled LR by ratio + (1 - ratio) * step / warmup_iters, so step 0 runs
 * at lr * warmup_ratio and step warmup_iters at the plain schedule.
 */
#ifndef SG_TRAIN_LR_SCHEDULE_H
#define SG_TRAIN_LR_SCHEDULE_H

#include <stdint.h>

#include "core/config.h"
#include "core/status.h"

enum { SG_LR_POLY = 0, SG_LR_CONSTANT = 1 };

typedef struct sg_lr_schedule {
    int kind;
    double base_lr, power, min_lr;
    int warmup_iters;
    double warmup_ratio;
    int64_t total_steps;   /* optimizer steps of the whole run */
} sg_lr_schedule;

/* From the train section. Returns SG_OK, or SG_ERR_CONFIG after logging an
 * error naming the key (unknown schedule, total_steps < 1, min_lr > lr). */
sg_status sg_lr_schedule_init(sg_lr_schedule *s, const sg_train_cfg *t,
                              int64_t total_steps);

/* LR of optimizer step `step` (0-based: the first step uses step 0). */
double sg_lr_at(const sg_lr_schedule *s, int64_t step);

#endif
