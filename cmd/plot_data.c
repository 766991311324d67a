/* cmd/plot_data.c - reading a run directory for `segtrain plot` (see
 * plot_data.h). */
#include "cmd/plot_data.h"

#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/log.h"
#include "io/json.h"

static void series_add(pl_series *s, double x, double y) {
    /* a resumed run logs again from its checkpoint: newer points replace
     * the ones from there on */
    while (s->n > 0 && s->x[s->n - 1] >= x) s->n--;
    if (s->n == s->cap) {
        s->cap = s->cap ? s->cap * 2 : 256;
        s->x = realloc(s->x, (size_t)s->cap * sizeof *s->x);
        s->y = realloc(s->y, (size_t)s->cap * sizeof *s->y);
        SG_CHECK(s->x && s->y, "out of host memory");
    }
    s->x[s->n] = x;
    s->y[s->n] = y;
    s->n++;
}

static void series_free(pl_series *s) {
    free(s->x);
    free(s->y);
    memset(s, 0, sizeof *s);
}

/* A number or null (NaN) member; 0 if present, -1 if missing or another
 * type. */
static int num_or_null(const sg_json_val *o, const char *key, double *out) {
    const sg_json_val *v = sg_json_get(o, key);
    if (!v) return -1;
    if (v->type == SG_JSON_NULL) {
        *out = NAN;
        return 0;
    }
    if (v->type != SG_JSON_NUM) return -1;
    *out = v->num;
    return 0;
}

/* One metrics.jsonl line into the series. SG_OK or SG_ERR_RUNTIME (logged). */
static sg_status add_line(pl_run *r, const char *path, long lineno, const sg_json_val *o) {
    double it, v;
    if (o->type != SG_JSON_OBJ || num_or_null(o, "iter", &it) != 0 || !isfinite(it) || it < 0) {
        SG_ERROR("%s:%ld: not a metrics line (a JSON object with a non-negative \"iter\"); "
                 "is this a segtrain run directory?",
                 path, lineno);
        return SG_ERR_RUNTIME;
    }
    if (num_or_null(o, "loss", &v) == 0) series_add(&r->loss, it, v);
    if (num_or_null(o, "lr", &v) == 0) series_add(&r->lr, it, v);
    if (num_or_null(o, "val_miou", &v) == 0) series_add(&r->val_miou, it, v);
    if (num_or_null(o, "leftover_miou", &v) == 0) series_add(&r->leftover_miou, it, v);
    return SG_OK;
}

/* Whole small file into memory, at most limit bytes. NULL after logging. */
static char *read_limited(const char *path, int64_t limit, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        SG_ERROR("cannot open %s: %s%s", path, strerror(errno),
                 errno == ENOENT ? " (is the directory a segtrain run_dir?)" : "");
        return NULL;
    }
    struct stat st;
    if (fstat(fileno(f), &st) != 0 || st.st_size > limit) {
        SG_ERROR("%s: %lld bytes, more than the %lld this command reads", path,
                 (long long)st.st_size, (long long)limit);
        fclose(f);
        return NULL;
    }
    char *buf = malloc((size_t)st.st_size + 1);
    SG_CHECK(buf != NULL, "out of host memory");
    *len = fread(buf, 1, (size_t)st.st_size, f);
    buf[*len] = 0;
    fclose(f);
    return buf;
}

/* The reader's limits: a metrics line, an eval report. Lenient (no strict
 * flags): names here are only shown, never compared. */
static const sg_json_opts line_opts = {.max_bytes = PL_MAX_LINE, .max_depth = PL_MAX_DEPTH};
static const sg_json_opts eval_opts = {.max_bytes = (size_t)PL_MAX_EVAL_BYTES,
                                       .max_depth = PL_MAX_DEPTH};

static sg_status load_metrics(pl_run *r) {
    char path[4200];
    snprintf(path, sizeof path, "%s/metrics.jsonl", r->dir);
    FILE *f = fopen(path, "r");
    if (!f) {
        SG_ERROR("cannot open %s: %s%s", path, strerror(errno),
                 errno == ENOENT ? " (a run directory has it once a first iteration is logged)"
                                 : "");
        return SG_ERR_RUNTIME;
    }
    struct stat st;
    if (fstat(fileno(f), &st) == 0 && st.st_size > PL_MAX_FILE_BYTES) {
        SG_ERROR("%s: %lld bytes, more than the %lld this command reads", path,
                 (long long)st.st_size, (long long)PL_MAX_FILE_BYTES);
        fclose(f);
        return SG_ERR_RUNTIME;
    }
    char *line = malloc(PL_MAX_LINE + 2);
    SG_CHECK(line != NULL, "out of host memory");
    sg_status rc = SG_OK;
    long lineno = 0;
    while (rc == SG_OK && fgets(line, PL_MAX_LINE + 2, f)) {
        lineno++;
        size_t n = strlen(line);
        if (n > PL_MAX_LINE && line[n - 1] != '\n') {
            SG_ERROR("%s:%ld: a line longer than %d bytes (not a metrics line)", path, lineno,
                     PL_MAX_LINE);
            rc = SG_ERR_RUNTIME;
            break;
        }
        int complete = n > 0 && line[n - 1] == '\n';
        while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r')) line[--n] = 0;
        if (n == 0) continue;
        sg_json_val v;
        char err[320];
        if (sg_json_parse(line, n, &line_opts, &v, err, sizeof err) != SG_OK) {
            /* a run killed while appending leaves a partial last line
             * (no newline yet) */
            if (!complete) {
                SG_WARN("%s:%ld: the last line is incomplete (%s); ignored", path, lineno, err);
                break;
            }
            SG_ERROR("%s:%ld: not JSON: %s", path, lineno, err);
            rc = SG_ERR_RUNTIME;
            break;
        }
        rc = add_line(r, path, lineno, &v);
        sg_json_val_free(&v);
    }
    free(line);
    fclose(f);
    return rc;
}

/* The report with the largest N among dir/eval/iter_<N>.json; SG_OK also
 * when there is none (eval_iter stays -1). */
static sg_status load_last_eval(pl_run *r) {
    char dir[4200], path[4400];
    snprintf(dir, sizeof dir, "%s/eval", r->dir);
    DIR *d = opendir(dir);
    if (!d) return SG_OK;
    long long best = -1;
    struct dirent *e;
    while ((e = readdir(d))) {
        long long n;
        char tail[8];
        if (sscanf(e->d_name, "iter_%lld.%7s", &n, tail) == 2 && !strcmp(tail, "json") && n > best)
            best = n;
    }
    closedir(d);
    if (best < 0) return SG_OK;
    snprintf(path, sizeof path, "%s/iter_%08lld.json", dir, best);
    size_t len;
    char *text = read_limited(path, PL_MAX_EVAL_BYTES, &len);
    if (!text) return SG_ERR_RUNTIME;
    sg_json_val v;
    char err[320];
    sg_status bad = sg_json_parse(text, len, &eval_opts, &v, err, sizeof err);
    free(text);
    if (bad != SG_OK) {
        SG_ERROR("%s: not JSON: %s", path, err);
        return SG_ERR_RUNTIME;
    }
    const sg_json_val *cl = sg_json_get(&v, "classes"), *iou = sg_json_get(&v, "iou");
    sg_status rc = SG_OK;
    if (!cl || !iou || cl->type != SG_JSON_ARR || iou->type != SG_JSON_ARR || cl->n != iou->n ||
        cl->n < 1 || cl->n > PL_MAX_CLASSES) {
        SG_ERROR("%s: expected arrays \"classes\" and \"iou\" of the same length (1..%d); not a "
                 "segtrain evaluation report",
                 path, PL_MAX_CLASSES);
        rc = SG_ERR_RUNTIME;
    }
    if (rc == SG_OK) {
        r->n_classes = cl->n;
        r->classes = calloc((size_t)cl->n, sizeof *r->classes);
        r->iou = calloc((size_t)cl->n, sizeof *r->iou);
        SG_CHECK(r->classes && r->iou, "out of host memory");
        for (int k = 0; k < cl->n && rc == SG_OK; k++) {
            const sg_json_val *name = &cl->items[k], *x = &iou->items[k];
            if (name->type != SG_JSON_STR || (x->type != SG_JSON_NUM && x->type != SG_JSON_NULL)) {
                SG_ERROR("%s: class %d: expected a name and a number or null", path, k);
                rc = SG_ERR_RUNTIME;
                break;
            }
            snprintf(r->classes[k], PL_MAX_NAME, "%s", name->str);
            r->iou[k] = x->type == SG_JSON_NULL ? NAN : x->num;
        }
        r->eval_iter = best;
        if (num_or_null(&v, "miou", &r->eval_miou) != 0) r->eval_miou = NAN;
    }
    sg_json_val_free(&v);
    return rc;
}

sg_status pl_run_load(pl_run *r, const char *dir) {
    memset(r, 0, sizeof *r);
    r->eval_iter = -1;
    r->eval_miou = NAN;
    if (snprintf(r->dir, sizeof r->dir, "%s", dir) >= (int)sizeof r->dir) {
        SG_ERROR("run directory path too long: %.80s...", dir);
        return SG_ERR_RUNTIME;
    }
    size_t n = strlen(r->dir);
    while (n > 1 && r->dir[n - 1] == '/') r->dir[--n] = 0;
    const char *base = strrchr(r->dir, '/');
    snprintf(r->name, sizeof r->name, "%s", base && base[1] ? base + 1 : r->dir);
    sg_status rc = load_metrics(r);
    if (rc == SG_OK) rc = load_last_eval(r);
    if (rc == SG_OK && r->loss.n == 0 && r->val_miou.n == 0)
        SG_WARN("%s/metrics.jsonl has no training or validation line yet", r->dir);
    return rc;
}

void pl_run_free(pl_run *r) {
    series_free(&r->loss);
    series_free(&r->lr);
    series_free(&r->val_miou);
    series_free(&r->leftover_miou);
    free(r->classes);
    free(r->iou);
    memset(r, 0, sizeof *r);
}
