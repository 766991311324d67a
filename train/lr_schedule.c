/* train/lr_schedule.c - poly / constant / cosine / step schedules with
 * linear or constant warmup (formulas in lr_schedule.h). */
#include "train/lr_schedule.h"

#include <math.h>
#include <string.h>

#include "core/log.h"

static const char *const kind_names[] = {"poly", "constant", "cosine", "step"};
static const char *const warmup_names[] = {"linear", "constant", "none"};

const char *sg_lr_kind_name(int kind) { return kind >= 0 && kind < 4 ? kind_names[kind] : "?"; }

const char *sg_lr_warmup_name(int warmup_kind) {
    return warmup_kind >= 0 && warmup_kind < 3 ? warmup_names[warmup_kind] : "?";
}

static int find_name(const char *const *names, int n, const char *s) {
    for (int i = 0; i < n; i++)
        if (strcmp(names[i], s) == 0) return i;
    return -1;
}

sg_status sg_lr_schedule_init(sg_lr_schedule *s, const sg_train_cfg *t, int64_t total_steps) {
    memset(s, 0, sizeof *s);
    s->kind = find_name(kind_names, 4, t->lr_schedule);
    if (s->kind < 0) {
        SG_ERROR("config key train.lr_schedule: unknown schedule '%s' (use poly, constant, "
                 "cosine or step)",
                 t->lr_schedule);
        return SG_ERR_CONFIG;
    }
    s->warmup_kind = find_name(warmup_names, 3, t->warmup);
    if (s->warmup_kind < 0) {
        SG_ERROR("config key train.warmup: unknown warmup '%s' (use linear, constant or none)",
                 t->warmup);
        return SG_ERR_CONFIG;
    }
    if (total_steps < 1) {
        SG_ERROR("train: the run has %lld optimizer steps; set train.iters or train.epochs "
                 "so that at least one step runs",
                 (long long)total_steps);
        return SG_ERR_CONFIG;
    }
    if (t->min_lr > t->lr) {
        SG_ERROR("config key train.min_lr (%g) is above train.lr (%g): lower min_lr", t->min_lr,
                 t->lr);
        return SG_ERR_CONFIG;
    }
    if (s->kind == SG_LR_STEP) {
        if (t->n_lr_steps < 1) {
            SG_ERROR("config key train.lr_steps: train.lr_schedule step needs at least one "
                     "milestone (optimizer steps, e.g. train.lr_steps: [30000, 60000])");
            return SG_ERR_CONFIG;
        }
        for (int i = 0; i < t->n_lr_steps; i++) {
            if (t->lr_steps[i] < 1 || (i > 0 && t->lr_steps[i] <= t->lr_steps[i - 1])) {
                SG_ERROR("config key train.lr_steps: milestone %d (%d) %s: give positive "
                         "optimizer steps in increasing order",
                         i, t->lr_steps[i],
                         t->lr_steps[i] < 1 ? "is below 1" : "is not above the one before it");
                return SG_ERR_CONFIG;
            }
            s->steps[i] = t->lr_steps[i];
        }
        s->n_steps = t->n_lr_steps;
        if (s->steps[s->n_steps - 1] >= total_steps)
            SG_WARN("train.lr_steps: milestone %lld is not before the run's last step (%lld "
                    "optimizer steps): it never lowers the learning rate",
                    (long long)s->steps[s->n_steps - 1], (long long)total_steps);
    }
    s->base_lr = t->lr;
    s->power = t->poly_power;
    s->min_lr = t->min_lr;
    s->gamma = t->lr_gamma;
    s->warmup_iters = s->warmup_kind == SG_WARMUP_NONE ? 0 : t->warmup_iters;
    if (strcmp(t->warmup_mode, "chained") != 0 && strcmp(t->warmup_mode, "sequential") != 0) {
        SG_ERROR("config key train.warmup_mode: unknown mode '%s' (use chained or sequential)",
                 t->warmup_mode);
        return SG_ERR_CONFIG;
    }
    s->sequential = strcmp(t->warmup_mode, "sequential") == 0 && s->warmup_iters > 0;
    if (s->sequential && s->warmup_iters >= total_steps) {
        SG_ERROR("config key train.warmup_iters: %d warmup steps leave no step of the %lld in the "
                 "run for the schedule under train.warmup_mode sequential; use fewer warmup "
                 "steps or more train.iters",
                 s->warmup_iters, (long long)total_steps);
        return SG_ERR_CONFIG;
    }
    s->warmup_ratio = t->warmup_ratio;
    s->total_steps = total_steps;
    return SG_OK;
}

/* The main schedule at `step` of a schedule `total` steps long. */
static double main_lr(const sg_lr_schedule *s, int64_t step, int64_t total) {
    if (step > total) step = total;
    double progress = (double)step / (double)total;
    switch (s->kind) {
    case SG_LR_POLY: return (s->base_lr - s->min_lr) * pow(1.0 - progress, s->power) + s->min_lr;
    case SG_LR_COSINE:
        return s->min_lr + (s->base_lr - s->min_lr) * (1.0 + cos(M_PI * progress)) / 2.0;
    case SG_LR_STEP: {
        int passed = 0;
        while (passed < s->n_steps && s->steps[passed] <= step) passed++;
        return s->base_lr * pow(s->gamma, passed);
    }
    default: return s->base_lr;
    }
}

/* The warmup factor at step < warmup_iters. */
static double warmup_factor(const sg_lr_schedule *s, int64_t step) {
    if (s->warmup_kind == SG_WARMUP_CONSTANT) return s->warmup_ratio;
    double k = (1.0 - (double)step / s->warmup_iters) * (1.0 - s->warmup_ratio);
    return 1.0 - k;
}

double sg_lr_at(const sg_lr_schedule *s, int64_t step) {
    if (step < 0) step = 0;
    int in_warmup = s->warmup_iters > 0 && step < s->warmup_iters;
    if (s->sequential) {
        if (in_warmup) return s->base_lr * warmup_factor(s, step);
        return main_lr(s, step - s->warmup_iters, s->total_steps - s->warmup_iters);
    }
    double lr = main_lr(s, step, s->total_steps);
    if (in_warmup) lr *= warmup_factor(s, step);
    return lr;
}

void sg_lr_schedule_json(const sg_lr_schedule *s, int64_t step, sg_json *j) {
    sg_json_str(j, "kind", sg_lr_kind_name(s->kind));
    sg_json_num(j, "base_lr", s->base_lr);
    sg_json_num(j, "power", s->power);
    sg_json_num(j, "min_lr", s->min_lr);
    if (s->kind == SG_LR_STEP) {
        sg_json_num(j, "gamma", s->gamma);
        /* the milestones as one "a,b,c" string, as train.lr_steps lists them */
        char ms[SG_LIST_MAX * 22 + 4] = "";
        size_t len = 0;
        for (int k = 0; k < s->n_steps && len < sizeof ms; k++)
            len += (size_t)snprintf(ms + len, sizeof ms - len, "%s%lld", k ? "," : "",
                                    (long long)s->steps[k]);
        sg_json_str(j, "milestones", ms);
    }
    sg_json_str(j, "warmup", sg_lr_warmup_name(s->warmup_kind));
    sg_json_int(j, "warmup_iters", s->warmup_iters);
    sg_json_num(j, "warmup_ratio", s->warmup_ratio);
    sg_json_int(j, "total_steps", (long long)s->total_steps);
    sg_json_int(j, "step", (long long)step);
    sg_json_num(j, "next_lr", sg_lr_at(s, step));
}
