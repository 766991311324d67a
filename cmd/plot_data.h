/* cmd/plot_data.h - what `segtrain plot` reads from a run directory (the
 * JSON through io/json.h's document tree, with the limits below).
 *
 * A run directory (train/trainer.h) holds metrics.jsonl - one JSON object per
 * line: training lines (iter, loss, lr, ...), validation lines (iter,
 * val_miou, ...) and leftover lines (iter, leftover_miou) - and
 * eval/iter_<N>.json, one report per validation (classes, iou, miou). Both
 * are untrusted input to this command: sizes, line lengths, nesting depth,
 * class counts and name lengths are limited (PL_* below), and every error
 * names the file, the line and what is wrong.
 *
 * A resumed run can log an iteration twice (the interrupted run went past
 * its last checkpoint): a point at or before the previous one's iteration
 * drops the earlier points from there on, as TensorBoard does, so each
 * series is increasing in its iterations.
 */
#ifndef SG_CMD_PLOT_DATA_H
#define SG_CMD_PLOT_DATA_H

#include <stddef.h>
#include <stdint.h>

#include "core/status.h"

#define PL_MAX_FILE_BYTES (INT64_C(1) << 30)  /* metrics.jsonl: 1 GiB */
#define PL_MAX_EVAL_BYTES (INT64_C(16) << 20) /* one eval report: 16 MiB */
#define PL_MAX_LINE 65536                     /* bytes of one metrics.jsonl line */
#define PL_MAX_DEPTH 16                       /* JSON nesting (objects and arrays) */
#define PL_MAX_CLASSES 256
#define PL_MAX_NAME 64 /* class name bytes, NUL included */
#define PL_MAX_RUNS 8

/* ---- a run ---- */
typedef struct pl_series {
    double *x, *y; /* iteration, value; y NaN for JSON null */
    int n, cap;
} pl_series;

typedef struct pl_run {
    char dir[4096];
    char name[128]; /* for legends: the directory's last component */
    pl_series loss, lr, val_miou, leftover_miou;
    /* the last evaluation report (eval/iter_<N>.json with the largest N) */
    int64_t eval_iter; /* -1: none */
    double eval_miou;
    int n_classes;
    char (*classes)[PL_MAX_NAME];
    double *iou; /* [n_classes], NaN for null */
} pl_run;

/* Loads dir/metrics.jsonl and the newest dir/eval/iter_*.json. SG_OK, or
 * SG_ERR_RUNTIME after logging (missing or malformed files, limits). */
sg_status pl_run_load(pl_run *r, const char *dir);
void pl_run_free(pl_run *r);

#endif
