/* train/loss_opts.c - class counts, the weighted denominator and OHEM's
 * threshold (see train/loss_opts.h). */
#include "train/loss_opts.h"

void sg_class_count(const uint8_t *labels, size_t n, int c, int64_t *count) {
    for (size_t i = 0; i < n; i++)
        if (labels[i] < c) count[labels[i]]++;
}

double sg_class_weight_sum(const float *w, const int64_t *count, int c) {
    double s = 0;
    for (int k = 0; k < c; k++) s += (double)w[k] * (double)count[k];
    return s;
}

float sg_ohem_threshold(sg_backend *be, const float *prob, size_t count, int64_t nvalid,
                        float thresh, int64_t batch_kept) {
    if (nvalid <= 0) return thresh; /* mmseg: min_threshold 0.0, nothing to select */
    int64_t k = batch_kept < nvalid - 1 ? batch_kept : nvalid - 1;
    float kth = be->ops->kth_smallest(be, prob, count, (size_t)k);
    return thresh > kth ? thresh : kth;
}
