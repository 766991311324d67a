/* train/lr_schedule.c - poly / constant schedules with linear warmup. */
#include "train/lr_schedule.h"

#include <math.h>
#include <string.h>

#include "core/log.h"

sg_status sg_lr_schedule_init(sg_lr_schedule *s, const sg_train_cfg *t,
                              int64_t total_steps) {
    memset(s, 0, sizeof *s);
    if (strcmp(t->lr_schedule, "poly") == 0) {
        s->kind = SG_LR_POLY;
    } else if (strcmp(t->lr_schedule, "constant") == 0) {
        s->kind = SG_LR_CONSTANT;
    } else {
        SG_ERROR("config key train.lr_schedule: unknown schedule '%s' (use poly or constant)",
                 t->lr_schedule);
        return SG_ERR_CONFIG;
    }
    if (total_steps < 1) {
        SG_ERROR("train: the run has %lld optimizer steps; set train.iters or train.epochs "
                 "so that at least one step runs", (long long)total_steps);
        return SG_ERR_CONFIG;
    }
    if (t->min_lr > t->lr) {
        SG_ERROR("config key train.min_lr (%g) is above train.lr (%g): lower min_lr",
                 t->min_lr, t->lr);
        return SG_ERR_CONFIG;
    }
    s->base_lr = t->lr;
    s->power = t->poly_power;
    s->min_lr = t->min_lr;
    s->warmup_iters = t->warmup_iters;
    s->warmup_ratio = t->warmup_ratio;
    s->total_steps = total_steps;
    return SG_OK;
}

double sg_lr_at(const sg_lr_schedule *s, int64_t step) {
    if (step < 0) step = 0;
    double lr = s->base_lr;
    if (s->kind == SG_LR_POLY) {
        double progress = (double)step / (double)s->total_steps;
        if (progress > 1.0) progress = 1.0;
        lr = (s->base_lr - s->min_lr) * pow(1.0 - progress, s->power) + s->min_lr;
    }
    if (s->warmup_iters > 0 && step < s->warmup_iters) {
        double k = (1.0 - (double)step / s->warmup_iters) * (1.0 - s->warmup_ratio);
        lr *= 1.0 - k;
    }
    return lr;
}
