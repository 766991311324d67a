/* train/metrics.h - segmentation metrics from a confusion matrix, and their
 * reports: the class table on stdout, eval JSON files, metrics.jsonl lines.
 *
 * The confusion matrix is int64 [c*c], rows = ground truth, columns =
 * prediction (pixels with label >= c never enter it). Definitions follow
 * mmsegmentation: IoU_k = TP / (GT_k + PRED_k - TP), Acc_k = TP / GT_k; a class
 * whose denominator is 0 gets NaN (a class absent from the ground truth and
 * the prediction has no IoU; one absent from the ground truth has no Acc) and
 * NaN entries are left out of the means (nanmean). A class predicted but never
 * in the ground truth has IoU 0 and counts. Pixel accuracy = trace / total.
 */
#ifndef SG_TRAIN_METRICS_H
#define SG_TRAIN_METRICS_H

#include <stdint.h>
#include <stdio.h>

#include "core/config.h"
#include "core/status.h"
#include "io/json.h"

#define SG_METRICS_MAX_CLASSES 256

typedef struct sg_metrics {
    int num_classes;
    double iou[SG_METRICS_MAX_CLASSES];
    double acc[SG_METRICS_MAX_CLASSES];
    int64_t gt_pixels[SG_METRICS_MAX_CLASSES];
    int64_t pred_pixels[SG_METRICS_MAX_CLASSES];
    double miou, macc, pixel_acc; /* NaN when nothing was counted */
    int64_t total_pixels;
} sg_metrics;

void sg_metrics_from_confusion(const int64_t *conf, int c, sg_metrics *m);

/* Name of class i: data.class_names[i] when given, the Cityscapes name for
 * 19-class Cityscapes runs, "class_<i>" otherwise. buf: at least SG_NAME. */
const char *sg_class_name(const sg_config *cfg, int i, char *buf);

/* Table "class | IoU | Acc" (percent, "nan" for NaN) and a summary line. */
void sg_metrics_print_table(const sg_metrics *m, const sg_config *cfg, FILE *out);

/* JSON object: miou, macc, pixel_acc, total_pixels, classes, iou, acc
 * (arrays, null for NaN), plus the given extra prefix fields written by the caller. */
void sg_metrics_to_json(const sg_metrics *m, const sg_config *cfg, sg_json *j);

/* Writes text to path (creating it); returns SG_OK, or SG_ERR_RUNTIME after
 * logging the path and errno. */
sg_status sg_write_text_file(const char *path, const char *text);

/* Appends one line to <run_dir>/metrics.jsonl (path given), flushing it, so a
 * killed run keeps every line already logged. Returns SG_OK or
 * SG_ERR_RUNTIME (logged). */
sg_status sg_jsonl_append(const char *path, const sg_json *obj);

#endif
