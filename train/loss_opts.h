/* train/loss_opts.h - the host side of the loss options (train.class_weights,
 * train.ohem_thresh / ohem_min_kept): what sg_train_step needs besides the
 * backend ops ce_weighted, ce_label_prob and kth_smallest.
 *
 *  - sg_class_count: the pixels of each class in a label map (labels >= c,
 *    the ignore label among them, are not counted).
 *  - sg_class_weight_sum: sum_k w[k] * count[k] in double, in class order:
 *    the denominator of the weighted loss (PyTorch's
 *    cross_entropy(weight=w, reduction='mean') divides by the weights of the
 *    valid pixels). Counts are integers, so the sum over a whole step is the
 *    same however its pixels were split among ranks and micro-batches when
 *    the counts are summed first (an int64 all-reduce) and weighted once.
 *  - sg_ohem_threshold: mmsegmentation's OHEMPixelSampler threshold for one
 *    forward: with the valid pixels' true-class probabilities p (prob on the
 *    device, +inf at ignored pixels; nvalid of them finite),
 *      threshold = max(p_sorted[min(batch_kept, nvalid - 1)], thresh)
 *    (nvalid == 0: thresh), and the pixels with p < threshold are trained
 *    on. Ties at the k-th value stay out (strict <), exactly as mmseg's.
 *    The k-th value is the backend's exact kth_smallest (the ignored pixels'
 *    +inf sort after every valid one, so it is the k-th valid value).
 *    Compared in float, as PyTorch compares a float32 tensor with a Python
 *    float.
 * None of them fails.
 */
#ifndef SG_TRAIN_LOSS_OPTS_H
#define SG_TRAIN_LOSS_OPTS_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/backend.h"

/* count[k] += pixels of class k in labels[0..n), k < c. */
void sg_class_count(const uint8_t *labels, size_t n, int c, int64_t *count);
double sg_class_weight_sum(const float *w, const int64_t *count, int c);
float sg_ohem_threshold(sg_backend *be, const float *prob, size_t count, int64_t nvalid,
                        float thresh, int64_t batch_kept);

#endif
