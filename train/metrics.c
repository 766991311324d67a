/* train/metrics.c - see metrics.h. */
#include "train/metrics.h"

#include <errno.h>
#include <math.h>
#include <string.h>

#include "core/log.h"
#include "data/dataset.h"

void sg_metrics_from_confusion(const int64_t *conf, int c, sg_metrics *m) {
    SG_CHECK(c >= 1 && c <= SG_METRICS_MAX_CLASSES, "metrics: %d classes (1..%d)", c,
             SG_METRICS_MAX_CLASSES);
    memset(m, 0, sizeof *m);
    m->num_classes = c;
    int64_t trace = 0, total = 0;
    for (int i = 0; i < c; i++) {
        for (int k = 0; k < c; k++) {
            int64_t v = conf[(size_t)i * c + k];
            m->gt_pixels[i] += v;
            m->pred_pixels[k] += v;
            total += v;
        }
        trace += conf[(size_t)i * c + i];
    }
    double sum_iou = 0, sum_acc = 0;
    int n_iou = 0, n_acc = 0;
    for (int i = 0; i < c; i++) {
        int64_t tp = conf[(size_t)i * c + i];
        int64_t uni = m->gt_pixels[i] + m->pred_pixels[i] - tp;
        m->iou[i] = uni > 0 ? (double)tp / (double)uni : NAN;
        m->acc[i] = m->gt_pixels[i] > 0 ? (double)tp / (double)m->gt_pixels[i] : NAN;
        if (uni > 0) {
            sum_iou += m->iou[i];
            n_iou++;
        }
        if (m->gt_pixels[i] > 0) {
            sum_acc += m->acc[i];
            n_acc++;
        }
    }
    m->miou = n_iou ? sum_iou / n_iou : NAN;
    m->macc = n_acc ? sum_acc / n_acc : NAN;
    m->pixel_acc = total ? (double)trace / (double)total : NAN;
    m->total_pixels = total;
}

const char *sg_class_name(const sg_config *cfg, int i, char *buf) {
    if (cfg && i < cfg->data.n_class_names && cfg->data.class_names[i][0])
        return cfg->data.class_names[i];
    /* the layout's own names: Cityscapes 19, VOC 21, ADE20K 150 */
    const char *own = cfg ? sg_layout_class_name(cfg->data.format, cfg->model.num_classes, i)
                          : NULL;
    if (own) return own;
    snprintf(buf, SG_NAME, "class_%d", i);
    return buf;
}

static void pct(char *buf, size_t n, double v) {
    if (isnan(v)) snprintf(buf, n, "nan");
    else snprintf(buf, n, "%.2f", 100.0 * v);
}

void sg_metrics_print_table(const sg_metrics *m, const sg_config *cfg, FILE *out) {
    char nb[SG_NAME], a[32], b[32];
    fprintf(out, "+----------------------+--------+--------+\n");
    fprintf(out, "| %-20s | %6s | %6s |\n", "class", "IoU", "Acc");
    fprintf(out, "+----------------------+--------+--------+\n");
    for (int i = 0; i < m->num_classes; i++) {
        pct(a, sizeof a, m->iou[i]);
        pct(b, sizeof b, m->acc[i]);
        fprintf(out, "| %-20.20s | %6s | %6s |\n", sg_class_name(cfg, i, nb), a, b);
    }
    fprintf(out, "+----------------------+--------+--------+\n");
    pct(a, sizeof a, m->miou);
    pct(b, sizeof b, m->macc);
    char c[32];
    pct(c, sizeof c, m->pixel_acc);
    fprintf(out, "mIoU %s  mAcc %s  aAcc %s  (%lld labelled pixels)\n", a, b, c,
            (long long)m->total_pixels);
    fflush(out);
}

void sg_metrics_to_json(const sg_metrics *m, const sg_config *cfg, sg_json *j) {
    sg_json_num(j, "miou", m->miou);
    sg_json_num(j, "macc", m->macc);
    sg_json_num(j, "pixel_acc", m->pixel_acc);
    sg_json_int(j, "total_pixels", (long long)m->total_pixels);
    const char *names[SG_METRICS_MAX_CLASSES];
    char bufs[SG_METRICS_MAX_CLASSES][SG_NAME];
    for (int i = 0; i < m->num_classes; i++) names[i] = sg_class_name(cfg, i, bufs[i]);
    sg_json_str_array(j, "classes", names, m->num_classes);
    sg_json_num_array(j, "iou", m->iou, m->num_classes);
    sg_json_num_array(j, "acc", m->acc, m->num_classes);
}

sg_status sg_write_text_file(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    if (!f) {
        SG_ERROR("cannot write %s: %s (check that the directory exists and is writable)", path,
                 strerror(errno));
        return SG_ERR_RUNTIME;
    }
    size_t n = strlen(text);
    int bad = fwrite(text, 1, n, f) != n;
    bad |= fclose(f) != 0;
    if (bad) {
        SG_ERROR("writing %s failed: %s (disk full?)", path, strerror(errno));
        return SG_ERR_RUNTIME;
    }
    return SG_OK;
}

sg_status sg_jsonl_append(const char *path, const sg_json *obj) {
    FILE *f = fopen(path, "a");
    if (!f) {
        SG_ERROR("cannot append to %s: %s (check run_dir)", path, strerror(errno));
        return SG_ERR_RUNTIME;
    }
    int bad = fprintf(f, "%s\n", obj->buf) < 0;
    bad |= fclose(f) != 0;
    if (bad) {
        SG_ERROR("appending to %s failed: %s (disk full?)", path, strerror(errno));
        return SG_ERR_RUNTIME;
    }
    return SG_OK;
}
