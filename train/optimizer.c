/* train/optimizer.c - see optimizer.h. */
#include "train/optimizer.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"

int sg_name_matches_prefix(const char *name, const char *prefix) {
    size_t n = strlen(prefix);
    if (n == 0) return 0;
    if (prefix[n - 1] == '.') return strncmp(name, prefix, n) == 0;
    return strncmp(name, prefix, n) == 0 && (name[n] == '\0' || name[n] == '.');
}

int sg_name_matches_any(const char *name, const char (*prefixes)[SG_NAME], int n) {
    for (int i = 0; i < n; i++)
        if (sg_name_matches_prefix(name, prefixes[i])) return 1;
    return 0;
}

static sg_status check_prefixes_used(const sg_opt_param *params, int n,
                                     const char (*prefixes)[SG_NAME], int np, const char *key) {
    for (int i = 0; i < np; i++) {
        int used = 0;
        for (int k = 0; k < n && !used; k++)
            used = sg_name_matches_prefix(params[k].name, prefixes[i]);
        if (!used) {
            SG_ERROR("config key %s: prefix '%s' matches no parameter (names look like "
                     "'%s'; check the spelling)",
                     key, prefixes[i], n ? params[0].name : "?");
            return SG_ERR_CONFIG;
        }
    }
    return SG_OK;
}

/* The fused step's plan over the trained tensors (frozen ones left out),
 * one learning-rate group per distinct lr_mult, in order of appearance. */
static sg_status build_plan(sg_sgd *opt) {
    sg_sgd_tensor *rows = calloc((size_t)(opt->n ? opt->n : 1), sizeof *rows);
    SG_CHECK(rows != NULL, "out of memory for %d optimizer rows", opt->n);
    int nr = 0;
    for (int i = 0; i < opt->n; i++) {
        const sg_sgd_entry *e = &opt->e[i];
        if (e->frozen) continue;
        int g = 0;
        while (g < opt->n_groups && opt->group_mult[g] != e->lr_mult) g++;
        if (g == opt->n_groups) {
            /* 1.0 and train.head_lr_mult: two at most today */
            SG_CHECK(g < SG_SGD_GROUPS,
                     "more than %d learning-rate multipliers among the parameters (internal "
                     "error: train.head_lr_mult gives two)",
                     SG_SGD_GROUPS);
            opt->group_mult[opt->n_groups++] = e->lr_mult;
        }
        rows[nr++] = (sg_sgd_tensor){e->param, e->grad, e->buf, e->count, g};
    }
    if (opt->adamw) {
        sg_adamw_tensor *a = calloc((size_t)(nr ? nr : 1), sizeof *a);
        SG_CHECK(a != NULL, "out of memory for %d optimizer rows", nr);
        for (int i = 0, k = 0; i < opt->n; i++) {
            const sg_sgd_entry *e = &opt->e[i];
            if (e->frozen) continue;
            a[k] = (sg_adamw_tensor){e->param, e->grad, e->buf, e->buf2, e->count, rows[k].group};
            k++;
        }
        opt->plan = opt->be->ops->adamw_multi_plan(opt->be, a, nr);
        free(a);
    } else {
        opt->plan = opt->be->ops->sgd_multi_plan(opt->be, rows, nr);
    }
    free(rows);
    return SG_OK;
}

/* A zeroed state buffer of count floats. */
static float *state_buf(sg_backend *be, size_t count) {
    float *b = be->ops->alloc(be, count * sizeof(float));
    be->ops->zero(be, b, count * sizeof(float));
    return b;
}

sg_status sg_sgd_init(sg_sgd *opt, sg_backend *be, const sg_opt_param *params, int n,
                      const sg_train_cfg *t) {
    memset(opt, 0, sizeof *opt);
    /* A head prefix matters only with a multiplier: the default
     * ["aux_head."] with head_lr_mult 1 on a model without an aux head
     * (LR-ASPP, model.aux_head false) is no mistake. With a multiplier a
     * prefix that matches nothing is one (a typo, or a recipe for a head
     * this model lacks). */
    if (check_prefixes_used(params, n, t->freeze, t->n_freeze, "train.freeze") ||
        (t->head_lr_mult != 1.0 &&
         check_prefixes_used(params, n, t->head_lr_prefixes, t->n_head_lr_prefixes,
                             "train.head_lr_prefixes")))
        return SG_ERR_CONFIG;
    opt->be = be;
    opt->n = n;
    opt->momentum = t->momentum;
    opt->dampening = t->dampening;
    opt->weight_decay = t->weight_decay;
    opt->nesterov = t->nesterov;
    opt->adamw = strcmp(t->optimizer, "adamw") == 0;
    if (!opt->adamw && strcmp(t->optimizer, "sgd") != 0) {
        SG_ERROR("config key train.optimizer: '%s' is not an optimizer (allowed: sgd, adamw)",
                 t->optimizer);
        return SG_ERR_CONFIG;
    }
    opt->beta1 = t->betas[0];
    opt->beta2 = t->betas[1];
    opt->eps = t->eps;
    opt->clip = t->clip_grad_norm;
    opt->grad_norm = NAN;
    opt->e = calloc((size_t)n, sizeof *opt->e);
    SG_CHECK(opt->e != NULL, "out of memory for %d optimizer entries", n);
    for (int i = 0; i < n; i++) {
        sg_sgd_entry *e = &opt->e[i];
        e->name = params[i].name;
        e->param = params[i].param;
        e->grad = params[i].grad;
        e->count = params[i].count;
        e->frozen = params[i].frozen || sg_name_matches_any(e->name, t->freeze, t->n_freeze);
        e->lr_mult = sg_name_matches_any(e->name, t->head_lr_prefixes, t->n_head_lr_prefixes)
                         ? t->head_lr_mult
                         : 1.0;
        if (e->frozen) {
            opt->n_frozen++;
            continue;
        }
        if (e->lr_mult != 1.0) opt->n_head++;
        if (opt->adamw) {
            e->buf = state_buf(be, e->count);
            e->buf2 = state_buf(be, e->count);
        } else if (opt->momentum != 0.0) {
            e->buf = be->ops->alloc(be, e->count * sizeof(float));
        }
    }
    return build_plan(opt);
}

void sg_sgd_free(sg_sgd *opt) {
    if (!opt->e) return;
    if (opt->plan) {
        if (opt->adamw) opt->be->ops->adamw_multi_free(opt->be, opt->plan);
        else opt->be->ops->sgd_multi_free(opt->be, opt->plan);
    }
    for (int i = 0; i < opt->n; i++) {
        if (opt->e[i].buf) opt->be->ops->free(opt->be, opt->e[i].buf);
        if (opt->e[i].buf2) opt->be->ops->free(opt->be, opt->e[i].buf2);
    }
    free(opt->e);
    memset(opt, 0, sizeof *opt);
}

/* torch.nn.utils.clip_grad_norm_ over the trained gradients: returns the
 * total norm before clipping. */
static double clip_grads(sg_sgd *opt) {
    const sg_ops *o = opt->be->ops;
    double ss = o->optim_grad_sumsq(opt->be, opt->plan); /* the trained tensors' */
    /* torch: total (float32) + 1e-6, max_norm / it as reciprocal * max_norm
     * (Tensor.__rtruediv__), clamped to 1, grads *= coef */
    float total = (float)sqrt(ss);
    float coef = (1.0f / (total + 1e-6f)) * (float)opt->clip;
    if (coef < 1.0f || coef != coef)
        for (int i = 0; i < opt->n; i++) {
            sg_sgd_entry *e = &opt->e[i];
            if (!e->frozen && e->count) o->scale(opt->be, e->grad, e->grad, coef, e->count);
        }
    return total;
}

sg_adamw_args sg_adamw_args_for(const sg_sgd *opt, double lr, int64_t t) {
    sg_adamw_args a = {0};
    double bc1 = 1.0 - pow(opt->beta1, (double)t), bc2 = 1.0 - pow(opt->beta2, (double)t);
    for (int g = 0; g < SG_SGD_GROUPS; g++) {
        double lr_g = g < opt->n_groups ? lr * opt->group_mult[g] : 0.0;
        a.decay[g] = (float)(1.0 - lr_g * opt->weight_decay);
        a.step_size[g] = (float)(lr_g / bc1);
    }
    a.w1 = (float)(1.0 - opt->beta1);
    a.beta2 = (float)opt->beta2;
    a.omb2 = (float)(1.0 - opt->beta2);
    a.bc2_sqrt = (float)sqrt(bc2);
    a.eps = (float)opt->eps;
    return a;
}

void sg_sgd_step(sg_sgd *opt, double lr) {
    if (opt->clip > 0.0) opt->grad_norm = clip_grads(opt);
    if (opt->adamw) {
        opt->steps++;
        sg_adamw_args a = sg_adamw_args_for(opt, lr, opt->steps);
        opt->be->ops->adamw_multi_step(opt->be, opt->plan, &a);
        opt->initialized = 1;
        return;
    }
    /* each group's rate rounded as sgd_step per tensor had it: (float)(lr * mult) */
    float lr_g[SG_SGD_GROUPS] = {0};
    for (int g = 0; g < opt->n_groups; g++) lr_g[g] = (float)(lr * opt->group_mult[g]);
    opt->be->ops->sgd_multi_step(opt->be, opt->plan, lr_g, (float)opt->momentum,
                                 (float)opt->dampening, (float)opt->weight_decay, opt->nesterov,
                                 !opt->initialized);
    opt->initialized = 1;
}

int sg_sgd_find(const sg_sgd *opt, const char *name) {
    for (int i = 0; i < opt->n; i++)
        if (strcmp(opt->e[i].name, name) == 0) return i;
    return -1;
}
