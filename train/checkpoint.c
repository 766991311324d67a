/* train/checkpoint.c - a model's checkpoint (see checkpoint.h): saving the
 * model, optimizer, state, schedule and config, and loading the model and
 * optimizer tensors back with their shapes and ranges checked. The file
 * format, validation and run-directory files are checkpoint_file.c. */
#include "train/checkpoint.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "core/util.h"
#include "io/json.h"
#include "model/model_io.h"

/* ---------------- the trainer's checkpoint ---------------- */
/* rc: 0 until some step failed (non-zero after, each failure logged). */
static void meta_i64(sg_ckpt_builder *b, const char *k, long long v, int *rc) {
    char buf[32];
    snprintf(buf, sizeof buf, "%lld", v);
    *rc |= sg_ckpt_meta(b, k, buf) != SG_OK;
}

sg_status sg_ckpt_save(const char *path, sg_model *m, const sg_sgd *opt, const sg_train_state *st,
                       const sg_lr_schedule *sched, const sg_config *cfg) {
    return sg_ckpt_save_ema(path, m, opt, st, sched, cfg, NULL);
}

/* Adds the checkpoint's tensors, downloading float32 ones from the device
 * through one host buffer grown to the largest. */
typedef struct {
    sg_ckpt_builder *b;
    sg_backend *be;
    float *host;
    size_t cap; /* floats */
} tensor_writer;

/* Adds `name` with p's shape: the host int64s `i64` when not NULL (a
 * num_batches_tracked), else `count` float32s downloaded from device `dev`.
 * Returns 0, or 1 when sg_ckpt_add failed (logged). */
static int add_tensor(tensor_writer *w, const char *name, const sg_param *p, const int64_t *i64,
                      const float *dev, size_t count) {
    int64_t shape[4];
    for (int d = 0; d < p->ndim; d++) shape[d] = p->shape[d];
    if (i64)
        return sg_ckpt_add(w->b, name, SG_ST_I64, p->ndim, shape, i64, count * sizeof(int64_t)) !=
               SG_OK;
    if (count > w->cap) {
        free(w->host);
        w->cap = count;
        w->host = malloc(w->cap * sizeof(float));
        SG_CHECK(w->host != NULL, "out of memory (%zu floats) saving a checkpoint", w->cap);
    }
    w->be->ops->download(w->be, w->host, dev, count * sizeof(float));
    return sg_ckpt_add(w->b, name, SG_ST_F32, p->ndim, shape, w->host, count * sizeof(float)) !=
           SG_OK;
}

sg_status sg_ckpt_save_ema(const char *path, sg_model *m, const sg_sgd *opt,
                           const sg_train_state *st, const sg_lr_schedule *sched,
                           const sg_config *cfg, sg_ema_state *ema) {
    sg_backend *be = sg_model_backend(m);
    sg_ckpt_builder b;
    sg_ckpt_builder_init(&b);
    int rc = 0;
    tensor_writer w = {.b = &b, .be = be};
    char name[256];
    be->ops->sync(be);
    /* the model: every registry entry, in state-dict order */
    int n = sg_model_num_params(m);
    for (int i = 0; i < n && rc == 0; i++) {
        sg_param *p = sg_model_param(m, i);
        rc = add_tensor(&w, p->name, p, p->dtype == SG_DT_I64 ? p->i64 : NULL, p->data, p->count);
    }
    /* the optimizer state, shaped as their entry: SGD's momentum buffers
     * optimizer.momentum.<name>, AdamW's optimizer.exp_avg.<name> and
     * optimizer.exp_avg_sq.<name> */
    for (int i = 0; opt && opt->initialized && i < opt->n && rc == 0; i++) {
        const sg_sgd_entry *e = &opt->e[i];
        if (!e->buf) continue;
        sg_param *p = sg_model_find(m, e->name);
        if (!p) {
            SG_ERROR("checkpoint: optimizer entry %s is not in the model registry (an optimizer "
                     "of another model: internal error)",
                     e->name);
            rc = 1;
            break;
        }
        snprintf(name, sizeof name, "optimizer.%s.%s", opt->adamw ? "exp_avg" : "momentum",
                 e->name);
        rc = add_tensor(&w, name, p, NULL, e->buf, e->count);
        if (rc == 0 && e->buf2) {
            snprintf(name, sizeof name, "optimizer.exp_avg_sq.%s", e->name);
            rc = add_tensor(&w, name, p, NULL, e->buf2, e->count);
        }
    }
    /* the EMA: ema.<name> for every registry entry, in state-dict order */
    for (int i = 0; ema && i < n && rc == 0; i++) {
        sg_param *p = sg_model_param(m, i);
        int64_t *i64 = NULL;
        float *src = sg_ema_tensor(ema, p, &i64);
        snprintf(name, sizeof name, "ema.%s", p->name);
        rc = add_tensor(&w, name, p, p->dtype == SG_DT_I64 ? i64 : NULL, src, p->count);
    }
    free(w.host);

    rc |= sg_ckpt_meta(&b, "format", SG_CKPT_FORMAT) != SG_OK;
    meta_i64(&b, "format_version", SG_CKPT_FORMAT_VERSION, &rc);
    meta_i64(&b, "iter", st->iter, &rc);
    meta_i64(&b, "epoch", st->epoch, &rc);
    meta_i64(&b, "sample_pos", st->sample_pos, &rc);
    meta_i64(&b, "total_steps", st->total_steps, &rc);
    meta_i64(&b, "world_size", st->world, &rc);
    char buf[64];
    snprintf(buf, sizeof buf, "%" PRIu64, st->seed);
    rc |= sg_ckpt_meta(&b, "seed", buf) != SG_OK;
    meta_i64(&b, "momentum_initialized", opt ? opt->initialized : 0, &rc);
    if (opt) { /* files without these are SGD's */
        rc |= sg_ckpt_meta(&b, "optimizer", opt->adamw ? "adamw" : "sgd") != SG_OK;
        if (opt->adamw) meta_i64(&b, "optimizer_steps", opt->steps, &rc);
    }
    snprintf(buf, sizeof buf, "%.17g", st->best_miou);
    rc |= sg_ckpt_meta(&b, "best_miou", isnan(st->best_miou) ? "nan" : buf) != SG_OK;
    meta_i64(&b, "best_iter", st->best_iter, &rc);
    if (st->run_id[0]) rc |= sg_ckpt_meta(&b, "run_id", st->run_id) != SG_OK;

    sg_json j = {0};
    sg_json_begin(&j);
    if (sched) sg_lr_schedule_json(sched, st->iter, &j);
    sg_json_end(&j);
    rc |= sg_ckpt_meta(&b, "lr_schedule", j.buf) != SG_OK;
    /* All randomness is counter-based (kernels/rng.h): the state is the seed
     * and the counters, which resuming restores from iter/epoch/sample_pos. */
    sg_json_begin(&j);
    sg_json_str(&j, "kind", "counter (kernels/rng.h)");
    sg_json_int(&j, "seed", (long long)st->seed);
    sg_json_int(&j, "epoch", (long long)st->epoch);
    sg_json_int(&j, "step", (long long)st->iter);
    sg_json_int(&j, "sample_pos", (long long)st->sample_pos);
    sg_json_end(&j);
    rc |= sg_ckpt_meta(&b, "rng", j.buf) != SG_OK;
    if (ema) {
        sg_json_begin(&j);
        sg_json_num(&j, "decay", ema->decay);
        sg_json_int(&j, "every", ema->every);
        sg_json_end(&j);
        rc |= sg_ckpt_meta(&b, "ema", j.buf) != SG_OK;
    }
    sg_json_free(&j);

    if (cfg) {
        char *yaml = NULL;
        size_t len = 0;
        FILE *mf = open_memstream(&yaml, &len);
        if (mf) {
            sg_config_write(cfg, mf);
            fclose(mf);
            rc |= sg_ckpt_meta(&b, "config", yaml) != SG_OK;
        } else {
            SG_ERROR("checkpoint: open_memstream for the config failed: %s", strerror(errno));
            rc = 1;
        }
        free(yaml);
        rc |= sg_ckpt_meta(&b, "backbone", cfg->model.backbone) != SG_OK;
        rc |= sg_ckpt_meta(&b, "arch", cfg->model.arch) != SG_OK;
        rc |= sg_ckpt_meta(&b, "names", cfg->model.names) != SG_OK;
        meta_i64(&b, "num_classes", cfg->model.num_classes, &rc);
    }
    if (rc == 0) rc = sg_ckpt_commit(&b, path) != SG_OK;
    sg_ckpt_builder_free(&b);
    if (rc != 0) SG_ERROR("checkpoint %s was not written (see above)", path);
    return rc ? SG_ERR_RUNTIME : SG_OK;
}

static sg_status load_f32(const sg_st_file *f, const char *name, const int *shape, int ndim,
                          size_t count, float *dev, sg_backend *be, float **host, size_t *cap) {
    const sg_st_tensor *t = sg_st_find(f, name);
    if (!t) {
        SG_ERROR("checkpoint %s: tensor '%s' is missing (checkpoint of another model? "
                 "compare its model section with the config)",
                 sg_st_path(f), name);
        return SG_ERR_RUNTIME;
    }
    int same = t->dtype == SG_ST_F32 && t->ndim == ndim && t->count == count;
    for (int d = 0; same && d < ndim; d++) same = t->shape[d] == shape[d];
    if (!same) {
        SG_ERROR("checkpoint %s: tensor '%s' has another dtype or shape than the model "
                 "(%zu elements vs %zu): the model config differs",
                 sg_st_path(f), name, t->count, count);
        return SG_ERR_RUNTIME;
    }
    if (count > *cap) {
        free(*host);
        *cap = count;
        *host = malloc(count * sizeof(float));
        SG_CHECK(*host != NULL, "out of memory loading %s", name);
    }
    if (sg_st_read_f32(f, t, *host, count) != SG_OK) return SG_ERR_RUNTIME;
    be->ops->upload(be, dev, *host, count * sizeof(float));
    return SG_OK;
}

/* Loads every registry entry of m from the tensors named prefix + name:
 * into the model itself (ema NULL) or into the EMA's copies. */
static sg_status load_registry(const sg_st_file *f, sg_model *m, const char *prefix,
                               sg_ema_state *ema) {
    sg_backend *be = sg_model_backend(m);
    float *host = NULL;
    size_t cap = 0;
    sg_status rc = SG_OK;
    for (int i = 0; i < sg_model_num_params(m) && rc == SG_OK; i++) {
        sg_param *p = sg_model_param(m, i);
        char name[256];
        snprintf(name, sizeof name, "%s%s", prefix, p->name);
        int64_t *i64 = p->i64;
        float *dst = ema ? sg_ema_tensor(ema, p, &i64) : p->data;
        if (p->dtype == SG_DT_I64) {
            const sg_st_tensor *t = sg_st_find(f, name);
            if (!t || t->dtype != SG_ST_I64 || t->count != p->count) {
                SG_ERROR("checkpoint %s: int64 tensor '%s' missing or of another shape",
                         sg_st_path(f), name);
                rc = SG_ERR_RUNTIME;
            } else {
                int64_t v = 0;
                rc = sg_st_read_i64(f, t, &v, 1);
                if (rc == SG_OK && (v < 0 || v > SG_MAX_NUM_BATCHES_TRACKED)) {
                    SG_ERROR("checkpoint %s: '%s' = %lld is outside 0..2^62 (corrupt or crafted "
                             "file)",
                             sg_st_path(f), name, (long long)v);
                    rc = SG_ERR_RUNTIME;
                }
                if (rc == SG_OK) *i64 = v;
            }
            continue;
        }
        rc = load_f32(f, name, p->shape, p->ndim, p->count, dst, be, &host, &cap);
    }
    free(host);
    be->ops->sync(be);
    return rc;
}

sg_status sg_ckpt_load_model(const sg_st_file *f, sg_model *m) {
    return load_registry(f, m, "", NULL);
}

int sg_ckpt_has_ema(const sg_st_file *f) {
    for (int i = 0; i < sg_st_count(f); i++)
        if (strncmp(sg_st_get(f, i)->name, "ema.", 4) == 0) return 1;
    return 0;
}

sg_status sg_ckpt_load_ema_as_model(const sg_st_file *f, sg_model *m) {
    return load_registry(f, m, "ema.", NULL);
}

sg_status sg_ckpt_load_ema(const sg_st_file *f, sg_ema_state *ema, int *found) {
    *found = sg_ckpt_has_ema(f);
    if (!*found) return SG_OK;
    return load_registry(f, ema->m, "ema.", ema);
}

/* AdamW's state read back: finite moments, exp_avg_sq not negative (its
 * square root divides); a crafted file would otherwise turn the weights
 * into NaN on the first step. */
static sg_status check_state(const sg_st_file *f, const char *name, const float *v, size_t n,
                             int nonneg) {
    for (size_t i = 0; i < n; i++)
        if (!isfinite(v[i]) || (nonneg && v[i] < 0.0f)) {
            SG_ERROR("checkpoint %s: optimizer state '%s' holds %g at element %zu (%s: corrupt "
                     "or crafted file; use another checkpoint)",
                     sg_st_path(f), name, (double)v[i], i,
                     nonneg ? "must be finite and not negative" : "must be finite");
            return SG_ERR_RUNTIME;
        }
    return SG_OK;
}

/* One state tensor `kind` ("momentum", "exp_avg", "exp_avg_sq") of entry e
 * into dev. */
static sg_status load_state(const sg_st_file *f, const sg_sgd *opt, const sg_sgd_entry *e,
                            const char *kind, float *dev, float **host, size_t *cap) {
    char name[256];
    snprintf(name, sizeof name, "optimizer.%s.%s", kind, e->name);
    const sg_st_tensor *t = sg_st_find(f, name);
    if (!t) {
        SG_ERROR("checkpoint %s: optimizer state '%s' is missing (was '%s' frozen when "
                 "it was written? keep train.freeze the same when resuming)",
                 sg_st_path(f), name, e->name);
        return SG_ERR_RUNTIME;
    }
    int shape[SG_ST_MAX_DIMS] = {0};
    int ndim = t->ndim;
    for (int d = 0; d < ndim && d < SG_ST_MAX_DIMS; d++) shape[d] = (int)t->shape[d];
    sg_status rc = load_f32(f, name, shape, ndim, e->count, dev, opt->be, host, cap);
    if (rc == SG_OK && opt->adamw)
        rc = check_state(f, name, *host, e->count, strcmp(kind, "exp_avg_sq") == 0);
    return rc;
}

sg_status sg_ckpt_load_optimizer(const sg_st_file *f, sg_sgd *opt) {
    const char *mv = sg_st_meta(f, "momentum_initialized");
    long init = 0;
    if (!mv || sg_parse_long(mv, 0, 1, &init) != 0) {
        SG_ERROR("checkpoint %s: metadata 'momentum_initialized' is missing or not 0/1 (corrupt "
                 "file)",
                 sg_st_path(f));
        return SG_ERR_RUNTIME;
    }
    const char *kind = sg_st_meta(f, "optimizer");
    if (!kind) kind = "sgd"; /* written before AdamW */
    if (strcmp(kind, "sgd") != 0 && strcmp(kind, "adamw") != 0) {
        SG_ERROR("checkpoint %s: metadata 'optimizer' is '%.32s', not sgd or adamw (corrupt or "
                 "crafted file)",
                 sg_st_path(f), kind);
        return SG_ERR_RUNTIME;
    }
    const char *mine = opt->adamw ? "adamw" : "sgd";
    if (strcmp(kind, mine) != 0) {
        SG_ERROR("checkpoint %s was written with train.optimizer=%s, this run has %s: keep "
                 "train.optimizer the same when resuming (or start a new run from its weights "
                 "with model.pretrained)",
                 sg_st_path(f), kind, mine);
        return SG_ERR_CONFIG;
    }
    long long steps = 0;
    if (opt->adamw) {
        const char *sv = sg_st_meta(f, "optimizer_steps");
        long v = 0;
        if (!sv || sg_parse_long(sv, 0, SG_CKPT_MAX_COUNT, &v) != 0 || (init == 0) != (v == 0)) {
            SG_ERROR("checkpoint %s: metadata 'optimizer_steps' is missing, outside 0..2^53 or "
                     "disagrees with 'momentum_initialized' (corrupt or crafted file)",
                     sg_st_path(f));
            return SG_ERR_RUNTIME;
        }
        steps = v;
    }
    if (!init) {
        opt->initialized = 0;
        opt->steps = 0;
        return SG_OK;
    }
    float *host = NULL;
    size_t cap = 0;
    sg_status rc = SG_OK;
    for (int i = 0; i < opt->n && rc == SG_OK; i++) {
        sg_sgd_entry *e = &opt->e[i];
        if (!e->buf) continue;
        rc = load_state(f, opt, e, opt->adamw ? "exp_avg" : "momentum", e->buf, &host, &cap);
        if (rc == SG_OK && e->buf2) rc = load_state(f, opt, e, "exp_avg_sq", e->buf2, &host, &cap);
    }
    free(host);
    if (rc == SG_OK) {
        opt->initialized = 1;
        opt->steps = steps;
    }
    return rc;
}
