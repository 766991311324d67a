/* train/evaluator.h - exact evaluation of a model on a list of dataset samples:
 * eval-mode forward on full images (or sliding windows when eval.crop_size
 * is set), argmax, confusion matrix on the device, summed across ranks.
 * With test-time augmentation (eval.scales other than [1.0], or eval.flip;
 * train/tta.h) the argmax is over the softmax probabilities averaged over
 * the scales and flips; without it, over the logits of the one pass, exactly
 * as before TTA existed.
 *
 * Owns an eval-mode loader over one dataset and the device buffers for
 * images, labels, predictions and the confusion matrix. Used by the trainer
 * (validation every eval_every, the leftover-sample pass) and `segtrain eval`.
 * Every rank must call sg_evaluator_run together (it ends in one all-reduce),
 * each with its own exact shard (sg_eval_shard): every sample is counted
 * exactly once whatever the world size.
 */
#ifndef SG_TRAIN_EVALUATOR_H
#define SG_TRAIN_EVALUATOR_H

#include <stdint.h>

#include "core/config.h"
#include "core/status.h"
#include "data/dataset.h"
#include "data/loader.h"
#include "dist/comm.h"
#include "model/model.h"
#include "train/tta.h"

typedef struct sg_evaluator {
    sg_backend *be;
    const sg_dataset *ds;
    sg_loader *loader;
    int num_classes, ignore_index;
    int crop_h, crop_w, stride_h, stride_w; /* 0 = whole image */
    float mean[3], std[3];
    uint8_t *d_img, *d_lab, *d_pred; /* device, cap_px pixels (x3 for images) */
    size_t cap_px;
    int64_t *d_conf;         /* device [C*C] */
    int64_t images;          /* counted by the last run */
    int batch;               /* images per whole-image pass */
    int fit_n, fit_h, fit_w; /* the last shape found to fit memory */
    int preflight_done;
    char label[32]; /* progress lines: "evaluation" unless the caller renames it */
    int use_tta;    /* sg_tta_enabled(cfg): the tta path instead of one pass */
    int tta_logged; /* the TTA settings were logged (at the first run) */
    sg_tta tta;
} sg_evaluator;

/* SG_OK, or SG_ERR_RUNTIME after logging (loader creation). */
sg_status sg_evaluator_init(sg_evaluator *ev, sg_backend *be, const sg_dataset *ds,
                            const sg_config *cfg);
void sg_evaluator_free(sg_evaluator *ev);

/* Evaluates indices[n] (this rank's share) and writes the confusion matrix
 * summed over all ranks into conf[C*C] (host). Leaves the model planned for
 * inference. Returns SG_OK, or SG_ERR_RUNTIME after logging (data,
 * communication, or an image the model cannot take: every rank returns the
 * same). */
sg_status sg_evaluator_run(sg_evaluator *ev, sg_model *m, sg_comm *comm, const int64_t *indices,
                           int64_t n, int64_t epoch, int64_t *conf);

/* Whole-image evaluation memory: before a batch of n images of h x w is
 * planned, the model's inference plan for that shape (sg_model_plan_bytes)
 * plus the evaluator's image buffers must fit in what the backend has
 * (with test-time augmentation: the largest plan over the scales, whole or
 * the sliding window's, plus the image buffers and sg_tta's buffers: the
 * normalised image, resized input, resized/flipped logits, probabilities)
 * (sg_backend_info.mem_available, plus the plan and buffers a re-plan frees
 * first); `available` != 0 stands in for the backend's figure (tests). An
 * 8000x8000 image asked the CPU for 10.7 GB before this check. SG_OK, or
 * SG_ERR_CONFIG after logging the image size (and `what`, e.g. its path),
 * the estimate, the memory available and the remedy: eval.crop_size
 * (sliding windows) or a smaller eval.batch_size (or fewer/smaller eval.scales).
 * Sliding-window evaluation without TTA is not checked here: its plan is
 * the crop's. */
sg_status sg_evaluator_check_fits(sg_evaluator *ev, sg_model *m, int n, int h, int w,
                                  size_t available, const char *what);
/* The same for the largest image among indices[n] (sizes read from the
 * files' headers; a file whose header cannot be read is left to the check
 * at its batch), once per evaluator: the trainer calls it before its first
 * step so a validation that cannot fit stops the run at once, not after
 * eval_every iterations; sg_evaluator_run calls it on its first run.
 * SG_OK or SG_ERR_CONFIG (logged). */
sg_status sg_evaluator_preflight(sg_evaluator *ev, sg_model *m, const int64_t *indices, int64_t n);

/* The exact shard of a whole dataset for this rank (malloc'd, *n set). */
int64_t *sg_evaluator_shard(int64_t size, int world, int rank, int64_t *n);

#endif
