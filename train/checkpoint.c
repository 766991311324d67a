/* train/checkpoint.c - see checkpoint.h. */
#include "train/checkpoint.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <libgen.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "train/jsonw.h"
#include "core/util.h"
#include "core/log.h"

/* ---------------- checksum ---------------- */
/* The checksum is sg_fnv1a_words (core/util.h): word-wise FNV-1a, fast on
 * hundreds of MB, and any changed byte changes it. */

static uint64_t hash_tensor(uint64_t h, const char *name, int dtype, const void *data,
                            size_t nbytes) {
    h = sg_fnv1a_words(h, name, strlen(name) + 1);
    uint64_t d = (uint64_t)dtype, nb = (uint64_t)nbytes;
    h = sg_fnv1a_words(h, &d, 8);
    h = sg_fnv1a_words(h, &nb, 8);
    return sg_fnv1a_words(h, data, nbytes);
}

/* One metadata entry's contribution to meta_checksum: entries are summed,
 * so the order the file stores them in does not matter. */
static uint64_t hash_meta_entry(const char *key, const char *value) {
    uint64_t h = sg_fnv1a_words(SG_FNV_OFFSET, key, strlen(key) + 1);
    return sg_fnv1a_words(h, value, strlen(value) + 1);
}

static int is_checksum_key(const char *key) {
    return strcmp(key, "checksum") == 0 || strcmp(key, "meta_checksum") == 0;
}

/* ---------------- builder ---------------- */
void sg_ckpt_builder_init(sg_ckpt_builder *b) {
    b->w = sg_st_writer_create();
    SG_CHECK(b->w != NULL, "out of memory creating a safetensors writer");
    b->hash = SG_FNV_OFFSET;
    b->meta_hash = 0;
    b->n_tensors = 0;
}

void sg_ckpt_builder_free(sg_ckpt_builder *b) {
    if (b->w) sg_st_writer_destroy(b->w);
    b->w = NULL;
}

sg_status sg_ckpt_add(sg_ckpt_builder *b, const char *name, sg_st_dtype dtype, int ndim,
                      const int64_t *shape, const void *data, size_t nbytes) {
    if (sg_st_writer_add(b->w, name, dtype, ndim, shape, data) != SG_OK) {
        SG_ERROR("checkpoint: cannot add tensor '%s' (duplicate or invalid name)", name);
        return SG_ERR_RUNTIME;
    }
    b->hash = hash_tensor(b->hash, name, (int)dtype, data, nbytes);
    b->n_tensors++;
    return SG_OK;
}

sg_status sg_ckpt_meta(sg_ckpt_builder *b, const char *key, const char *value) {
    if (sg_st_writer_meta(b->w, key, value) != SG_OK) {
        SG_ERROR("checkpoint: cannot set metadata '%s'", key);
        return SG_ERR_RUNTIME;
    }
    if (!is_checksum_key(key)) b->meta_hash += hash_meta_entry(key, value);
    return SG_OK;
}

static sg_status fsync_dir_of(const char *path) {
    char tmp[SG_STR + 64];
    snprintf(tmp, sizeof tmp, "%s", path);
    const char *dir = dirname(tmp);
    int fd = open(dir, O_RDONLY | O_DIRECTORY);
    if (fd < 0) {
        SG_ERROR("checkpoint: cannot open directory %s to fsync it: %s", dir, strerror(errno));
        return SG_ERR_RUNTIME;
    }
    int rc = fsync(fd);
    int e = errno;
    close(fd);
    if (rc != 0 && e != EINVAL) { /* some filesystems cannot fsync a directory */
        SG_ERROR("checkpoint: fsync of directory %s failed: %s", dir, strerror(e));
        return SG_ERR_RUNTIME;
    }
    return SG_OK;
}

sg_status sg_ckpt_commit(sg_ckpt_builder *b, const char *path) {
    char buf[64];
    snprintf(buf, sizeof buf, "%d", b->n_tensors);
    if (sg_ckpt_meta(b, "tensor_count", buf)) return SG_ERR_RUNTIME;
    snprintf(buf, sizeof buf, "fnv1a64:%016" PRIx64, b->hash);
    if (sg_ckpt_meta(b, "checksum", buf)) return SG_ERR_RUNTIME;
    snprintf(buf, sizeof buf, "sum64:%016" PRIx64, b->meta_hash);
    if (sg_ckpt_meta(b, "meta_checksum", buf)) return SG_ERR_RUNTIME;

    char tmp[SG_STR + 16];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "wb");
    if (!f) {
        SG_ERROR("checkpoint: cannot create %s: %s (is the run_dir writable? disk full?)", tmp,
                 strerror(errno));
        return SG_ERR_RUNTIME;
    }
    sg_status rc = sg_st_writer_write_stream(b->w, f, tmp);
    if (rc == SG_OK && fflush(f) != 0) {
        SG_ERROR("checkpoint: writing %s failed: %s (disk full?)", tmp, strerror(errno));
        rc = SG_ERR_RUNTIME;
    }
    if (rc == SG_OK && fsync(fileno(f)) != 0) {
        SG_ERROR("checkpoint: fsync of %s failed: %s", tmp, strerror(errno));
        rc = SG_ERR_RUNTIME;
    }
    if (fclose(f) != 0 && rc == SG_OK) {
        SG_ERROR("checkpoint: closing %s failed: %s (disk full?)", tmp, strerror(errno));
        rc = SG_ERR_RUNTIME;
    }
    if (rc != SG_OK) {
        unlink(tmp);
        return SG_ERR_RUNTIME;
    }
    if (rename(tmp, path) != 0) {
        SG_ERROR("checkpoint: rename %s -> %s failed: %s", tmp, path, strerror(errno));
        unlink(tmp);
        return SG_ERR_RUNTIME;
    }
    return fsync_dir_of(path);
}

/* ---------------- validation ---------------- */
typedef struct { const sg_st_tensor *t; } tref;

static int by_offset(const void *a, const void *b) {
    size_t x = ((const tref *)a)->t->offset, y = ((const tref *)b)->t->offset;
    return x < y ? -1 : x > y;
}

uint64_t sg_ckpt_file_checksum(const sg_st_file *f) {
    int n = sg_st_count(f);
    tref *r = malloc((size_t)(n > 0 ? n : 1) * sizeof *r);
    SG_CHECK(r != NULL, "out of memory");
    for (int i = 0; i < n; i++) r[i].t = sg_st_get(f, i);
    qsort(r, (size_t)n, sizeof *r, by_offset);
    uint64_t h = SG_FNV_OFFSET;
    for (int i = 0; i < n; i++)
        h = hash_tensor(h, r[i].t->name, (int)r[i].t->dtype, r[i].t->data, r[i].t->nbytes);
    free(r);
    return h;
}

sg_st_file *sg_ckpt_open_valid(const char *path, char *why, size_t cap) {
    struct stat sb;
    if (stat(path, &sb) != 0) {
        snprintf(why, cap, "cannot stat: %s", strerror(errno));
        return NULL;
    }
    /* The safetensors reader logs its own reason at error level; keep this
     * quiet so a skipped file reads as one warning. */
    int lvl = sg_log_get_level();
    sg_log_set_level(SG_LOG_ERROR - 1);
    sg_st_file *f = sg_st_open(path);
    sg_log_set_level(lvl);
    if (!f) {
        snprintf(why, cap, "not a readable safetensors file (truncated or corrupt, %lld bytes)",
                 (long long)sb.st_size);
        return NULL;
    }
    const char *fmt = sg_st_meta(f, "format");
    const char *ver = sg_st_meta(f, "format_version");
    const char *cnt = sg_st_meta(f, "tensor_count");
    const char *sum = sg_st_meta(f, "checksum");
    if (!fmt || strcmp(fmt, SG_CKPT_FORMAT) != 0) {
        snprintf(why, cap, "not a segtrain checkpoint (metadata format is '%s'; "
                 "for weights alone use model.pretrained)", fmt ? fmt : "(none)");
    } else if (!ver || atoi(ver) != SG_CKPT_FORMAT_VERSION) {
        snprintf(why, cap, "checkpoint format version %s, this build reads %d",
                 ver ? ver : "(none)", SG_CKPT_FORMAT_VERSION);
    } else if (!cnt || atoi(cnt) != sg_st_count(f)) {
        snprintf(why, cap, "holds %d tensors, its metadata says %s", sg_st_count(f),
                 cnt ? cnt : "(none)");
    } else if (!sum) {
        snprintf(why, cap, "no checksum in its metadata");
    } else {
        char want[64];
        snprintf(want, sizeof want, "fnv1a64:%016" PRIx64, sg_ckpt_file_checksum(f));
        const char *msum = sg_st_meta(f, "meta_checksum");
        char mwant[64] = "";
        if (msum) {
            uint64_t mh = 0;
            for (int i = 0; i < sg_st_meta_count(f); i++) {
                const char *k, *v;
                sg_st_meta_get(f, i, &k, &v);
                if (!is_checksum_key(k)) mh += hash_meta_entry(k, v);
            }
            snprintf(mwant, sizeof mwant, "sum64:%016" PRIx64, mh);
        }
        if (strcmp(want, sum) != 0)
            snprintf(why, cap, "checksum mismatch (file says %s, data gives %s): corrupt", sum,
                     want);
        else if (msum && strcmp(mwant, msum) != 0)
            snprintf(why, cap, "metadata checksum mismatch (file says %s, metadata gives %s): "
                     "corrupt", msum, mwant);
        else
            return f;
    }
    sg_st_close(f);
    return NULL;
}

/* ---------------- the trainer's checkpoint ---------------- */
/* rc: 0 until some step failed (non-zero after, each failure logged). */
static void meta_i64(sg_ckpt_builder *b, const char *k, long long v, int *rc) {
    char buf[32];
    snprintf(buf, sizeof buf, "%lld", v);
    *rc |= sg_ckpt_meta(b, k, buf) != SG_OK;
}

sg_status sg_ckpt_save(const char *path, sg_model *m, const sg_sgd *opt,
                       const sg_train_state *st, const sg_lr_schedule *sched,
                       const sg_config *cfg) {
    sg_backend *be = sg_model_backend(m);
    sg_ckpt_builder b;
    sg_ckpt_builder_init(&b);
    int rc = 0;
    size_t host_cap = 0;
    float *host = NULL;
    be->ops->sync(be);
    int n = sg_model_num_params(m);
    for (int i = 0; i < n && rc == 0; i++) {
        sg_param *p = sg_model_param(m, i);
        int64_t shape[4];
        for (int d = 0; d < p->ndim; d++) shape[d] = p->shape[d];
        if (p->dtype == SG_DT_I64) {
            rc = sg_ckpt_add(&b, p->name, SG_ST_I64, p->ndim, shape, p->i64,
                             p->count * sizeof(int64_t)) != SG_OK;
            continue;
        }
        if (p->count > host_cap) {
            free(host);
            host_cap = p->count;
            host = malloc(host_cap * sizeof(float));
            SG_CHECK(host != NULL, "out of memory (%zu floats) saving a checkpoint", host_cap);
        }
        be->ops->download(be, host, p->data, p->count * sizeof(float));
        rc = sg_ckpt_add(&b, p->name, SG_ST_F32, p->ndim, shape, host,
                         p->count * sizeof(float)) != SG_OK;
    }
    for (int i = 0; opt && opt->initialized && i < opt->n && rc == 0; i++) {
        const sg_sgd_entry *e = &opt->e[i];
        if (!e->buf) continue;
        sg_param *p = sg_model_find(m, e->name);
        if (!p) {
            SG_ERROR("checkpoint: optimizer entry %s is not in the model registry (an optimizer "
                     "of another model: internal error)", e->name);
            rc = 1;
            break;
        }
        int64_t shape[4];
        for (int d = 0; d < p->ndim; d++) shape[d] = p->shape[d];
        if (e->count > host_cap) {
            free(host);
            host_cap = e->count;
            host = malloc(host_cap * sizeof(float));
            SG_CHECK(host != NULL, "out of memory saving a checkpoint");
        }
        be->ops->download(be, host, e->buf, e->count * sizeof(float));
        char name[256];
        snprintf(name, sizeof name, "optimizer.momentum.%s", e->name);
        rc = sg_ckpt_add(&b, name, SG_ST_F32, p->ndim, shape, host,
                         e->count * sizeof(float)) != SG_OK;
    }
    free(host);

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
    snprintf(buf, sizeof buf, "%.17g", st->best_miou);
    rc |= sg_ckpt_meta(&b, "best_miou", isnan(st->best_miou) ? "nan" : buf) != SG_OK;
    meta_i64(&b, "best_iter", st->best_iter, &rc);

    sg_json j = {0};
    sg_json_begin(&j);
    if (sched) {
        sg_json_str(&j, "kind", sched->kind == SG_LR_POLY ? "poly" : "constant");
        sg_json_num(&j, "base_lr", sched->base_lr);
        sg_json_num(&j, "power", sched->power);
        sg_json_num(&j, "min_lr", sched->min_lr);
        sg_json_int(&j, "warmup_iters", sched->warmup_iters);
        sg_json_num(&j, "warmup_ratio", sched->warmup_ratio);
        sg_json_int(&j, "total_steps", (long long)sched->total_steps);
        sg_json_int(&j, "step", (long long)st->iter);
        sg_json_num(&j, "next_lr", sg_lr_at(sched, st->iter));
    }
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
        meta_i64(&b, "num_classes", cfg->model.num_classes, &rc);
    }
    if (rc == 0) rc = sg_ckpt_commit(&b, path) != SG_OK;
    sg_ckpt_builder_free(&b);
    if (rc != 0) SG_ERROR("checkpoint %s was not written (see above)", path);
    return rc ? SG_ERR_RUNTIME : SG_OK;
}

static sg_status meta_ll(const sg_st_file *f, const char *key, long long *out) {
    const char *v = sg_st_meta(f, key);
    char *end = NULL;
    if (v) *out = strtoll(v, &end, 10);
    if (!v || end == v || *end) {
        SG_ERROR("checkpoint %s: metadata key '%s' is missing or not an integer (%s)",
                 sg_st_path(f), key, v ? v : "absent");
        return SG_ERR_RUNTIME;
    }
    return SG_OK;
}

sg_status sg_ckpt_read_state(const sg_st_file *f, sg_train_state *st) {
    memset(st, 0, sizeof *st);
    long long v[8];
    const char *keys[8] = {"iter", "epoch", "sample_pos", "total_steps", "world_size",
                           "momentum_initialized", "best_iter", "seed"};
    for (int i = 0; i < 8; i++)
        if (meta_ll(f, keys[i], &v[i])) return SG_ERR_RUNTIME;
    st->iter = v[0];
    st->epoch = v[1];
    st->sample_pos = v[2];
    st->total_steps = v[3];
    st->world = (int)v[4];
    st->momentum_initialized = (int)v[5];
    st->best_iter = v[6];
    const char *s = sg_st_meta(f, "seed");
    st->seed = strtoull(s, NULL, 10);
    const char *bm = sg_st_meta(f, "best_miou");
    st->best_miou = (bm && strcmp(bm, "nan") != 0) ? strtod(bm, NULL) : NAN;
    return SG_OK;
}

sg_status sg_ckpt_read_config(const sg_st_file *f, sg_config *cfg) {
    const char *yaml = sg_st_meta(f, "config");
    if (!yaml) {
        SG_ERROR("checkpoint %s has no 'config' in its metadata; pass --config", sg_st_path(f));
        return SG_ERR_CONFIG;
    }
    char name[SG_STR + 32];
    snprintf(name, sizeof name, "%s:__metadata__.config", sg_st_path(f));
    return sg_config_load_string(cfg, yaml, name);
}

static sg_status load_f32(const sg_st_file *f, const char *name, const int *shape, int ndim,
                          size_t count, float *dev, sg_backend *be, float **host, size_t *cap) {
    const sg_st_tensor *t = sg_st_find(f, name);
    if (!t) {
        SG_ERROR("checkpoint %s: tensor '%s' is missing (checkpoint of another model? "
                 "compare its model section with the config)", sg_st_path(f), name);
        return SG_ERR_RUNTIME;
    }
    int same = t->dtype == SG_ST_F32 && t->ndim == ndim && t->count == count;
    for (int d = 0; same && d < ndim; d++) same = t->shape[d] == shape[d];
    if (!same) {
        SG_ERROR("checkpoint %s: tensor '%s' has another dtype or shape than the model "
                 "(%zu elements vs %zu): the model config differs", sg_st_path(f), name,
                 t->count, count);
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

sg_status sg_ckpt_load_model(const sg_st_file *f, sg_model *m) {
    sg_backend *be = sg_model_backend(m);
    float *host = NULL;
    size_t cap = 0;
    sg_status rc = SG_OK;
    for (int i = 0; i < sg_model_num_params(m) && rc == SG_OK; i++) {
        sg_param *p = sg_model_param(m, i);
        if (p->dtype == SG_DT_I64) {
            const sg_st_tensor *t = sg_st_find(f, p->name);
            if (!t || t->dtype != SG_ST_I64 || t->count != p->count) {
                SG_ERROR("checkpoint %s: int64 tensor '%s' missing or of another shape",
                         sg_st_path(f), p->name);
                rc = SG_ERR_RUNTIME;
            } else {
                rc = sg_st_read_i64(f, t, p->i64, p->count);
            }
            continue;
        }
        rc = load_f32(f, p->name, p->shape, p->ndim, p->count, p->data, be, &host, &cap);
    }
    free(host);
    be->ops->sync(be);
    return rc;
}

sg_status sg_ckpt_load_optimizer(const sg_st_file *f, sg_sgd *opt) {
    long long init = 0;
    if (meta_ll(f, "momentum_initialized", &init)) return SG_ERR_RUNTIME;
    if (!init) {
        opt->initialized = 0;
        return SG_OK;
    }
    float *host = NULL;
    size_t cap = 0;
    sg_status rc = SG_OK;
    for (int i = 0; i < opt->n && rc == SG_OK; i++) {
        sg_sgd_entry *e = &opt->e[i];
        if (!e->buf) continue;
        char name[256];
        snprintf(name, sizeof name, "optimizer.momentum.%s", e->name);
        const sg_st_tensor *t = sg_st_find(f, name);
        int shape[SG_ST_MAX_DIMS] = {0};
        int ndim = t ? t->ndim : 0;
        for (int d = 0; t && d < ndim && d < SG_ST_MAX_DIMS; d++) shape[d] = (int)t->shape[d];
        if (!t) {
            SG_ERROR("checkpoint %s: momentum buffer '%s' is missing (was '%s' frozen when "
                     "it was written? keep train.freeze the same when resuming)",
                     sg_st_path(f), name, e->name);
            rc = SG_ERR_RUNTIME;
            break;
        }
        rc = load_f32(f, name, shape, ndim, e->count, e->buf, opt->be, &host, &cap);
    }
    free(host);
    if (rc == SG_OK) opt->initialized = 1;
    return rc;
}

/* ---------------- files in a run directory ---------------- */
sg_status sg_ckpt_dir(const char *run_dir, int create, char *out, size_t cap) {
    snprintf(out, cap, "%s/checkpoints", run_dir);
    if (create && mkdir(out, 0777) != 0 && errno != EEXIST) {
        SG_ERROR("cannot create %s: %s (check run_dir)", out, strerror(errno));
        return SG_ERR_RUNTIME;
    }
    return SG_OK;
}

void sg_ckpt_iter_path(const char *run_dir, int64_t iter, char *out, size_t cap) {
    snprintf(out, cap, "%s/checkpoints/iter_%08lld.safetensors", run_dir, (long long)iter);
}

void sg_ckpt_best_path(const char *run_dir, char *out, size_t cap) {
    snprintf(out, cap, "%s/checkpoints/best.safetensors", run_dir);
}

/* Iterations of the iter_*.safetensors files in dir, newest first. */
static int list_iters(const char *dir, long long **out) {
    *out = NULL;
    DIR *d = opendir(dir);
    if (!d) return 0;
    int n = 0, cap = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        long long it;
        char tail[32];
        if (sscanf(e->d_name, "iter_%lld.%31s", &it, tail) == 2 &&
            strcmp(tail, "safetensors") == 0) {
            if (n == cap) {
                cap = cap ? 2 * cap : 16;
                *out = realloc(*out, (size_t)cap * sizeof **out);
                SG_CHECK(*out != NULL, "out of memory listing %s", dir);
            }
            (*out)[n++] = it;
        }
    }
    closedir(d);
    for (int i = 1; i < n; i++) /* insertion sort, descending */
        for (int k = i; k > 0 && (*out)[k] > (*out)[k - 1]; k--) {
            long long t = (*out)[k];
            (*out)[k] = (*out)[k - 1];
            (*out)[k - 1] = t;
        }
    return n;
}

int sg_ckpt_prune(const char *run_dir, int keep, int64_t newest) {
    char dir[SG_STR + 32], path[SG_STR + 64];
    sg_ckpt_dir(run_dir, 0, dir, sizeof dir);
    int deleted = 0;
    long long *its;
    int n = list_iters(dir, &its);
    /* Files past `newest` (the checkpoint just written) are not this run's
     * history: a run started over an older run's directory, or a resume that
     * skipped a corrupt newest file. Counting them would delete the file just
     * written and leave nothing valid to resume from; they are left alone
     * (a resumed run rewrites them as it gets there). */
    int first = 0;
    while (first < n && its[first] > (long long)newest) first++;
    for (int i = keep > 0 ? first + keep : n; i < n; i++) {
        sg_ckpt_iter_path(run_dir, its[i], path, sizeof path);
        if (unlink(path) == 0)
            deleted++;
        else
            SG_WARN("cannot delete old checkpoint %s: %s", path, strerror(errno));
    }
    free(its);
    DIR *d = opendir(dir);
    struct dirent *e;
    while (d && (e = readdir(d)) != NULL) {
        size_t L = strlen(e->d_name);
        if (L > 4 && strcmp(e->d_name + L - 4, ".tmp") == 0) {
            snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
            if (unlink(path) == 0) deleted++;
        }
    }
    if (d) closedir(d);
    return deleted;
}

int sg_ckpt_find_latest(const char *run_dir, char *out, size_t cap) {
    char dir[SG_STR + 32], path[SG_STR + 64], why[512];
    sg_ckpt_dir(run_dir, 0, dir, sizeof dir);
    long long *its;
    int n = list_iters(dir, &its), found = 0;
    for (int i = 0; i < n && !found; i++) {
        sg_ckpt_iter_path(run_dir, its[i], path, sizeof path);
        sg_st_file *f = sg_ckpt_open_valid(path, why, sizeof why);
        if (f) {
            sg_st_close(f);
            snprintf(out, cap, "%s", path);
            found = 1;
        } else {
            SG_WARN("resume: skipping %s: %s", path, why);
        }
    }
    free(its);
    return found;
}
