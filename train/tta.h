/* train/tta.h - test-time augmentation (mmsegmentation's aug_test): the
 * softmax probabilities of a batch averaged over eval.scales x {image,
 * horizontally flipped image when eval.flip}.
 *
 * For each scale s (in eval.scales order) and flip (off, then on): the
 * normalised image [n,3,H,W] is resized with ops->resize_fwd (bilinear,
 * align_corners=False) to sg_tta_scaled(H,s) x sg_tta_scaled(W,s) (scale
 * 1.0 is no resize), flipped horizontally (ops->flip_w) if flip, run through
 * the model whole or in sliding windows (crop_h != 0: windows and averaging
 * as the evaluator's sliding-window path), the logits resized back to H x W,
 * flipped back, and their softmax over the classes (ops->softmax_fwd) added
 * into the probability accumulator; finally divided by the number of passes.
 * One scale is in memory at a time; the model is re-planned for each shape.
 * Inference only.
 *
 * Owns its device buffers (normalised image, resized input, resized and
 * flipped logits, the probability accumulator), grown to the largest batch
 * seen. Used by the evaluator (eval, in-training evaluation) and predict.
 */
#ifndef SG_TRAIN_TTA_H
#define SG_TRAIN_TTA_H

#include <stddef.h>
#include <stdint.h>

#include "core/config.h"
#include "core/status.h"
#include "kernels/backend.h"
#include "model/model.h"

typedef struct sg_tta {
    sg_backend *be;
    int num_classes;
    int n_scales;
    double scales[16];
    int flip;
    int crop_h, crop_w, stride_h, stride_w; /* 0 = whole image */
    float mean[3], std[3];
    float *d_norm, *d_in, *d_up, *d_flip, *d_win, *d_prob;        /* device */
    size_t cap_norm, cap_in, cap_up, cap_flip, cap_win, cap_prob; /* floats */
} sg_tta;

/* 1 when cfg's eval.scales / eval.flip ask for more than today's single
 * pass (anything but scales [1.0] without flip). */
int sg_tta_enabled(const sg_config *cfg);

/* int(v * s + 0.5), as mmcv rescales; at least 1. */
int sg_tta_scaled(int v, double s);

/* Takes eval.scales, eval.flip, data.mean/std and num_classes from cfg;
 * crop_h/crop_w/stride_h/stride_w are the sliding-window geometry (0 =
 * whole images; stride 0 = the crop). Allocates nothing yet. */
void sg_tta_init(sg_tta *t, sg_backend *be, const sg_config *cfg, int crop_h, int crop_w,
                 int stride_h, int stride_w);
void sg_tta_free(sg_tta *t);

/* d_img: uint8 [n,H,W,3] on the device (sliding windows: n = 1). Leaves the
 * averaged probabilities in t->d_prob [n, C, H, W]. SG_OK, or
 * SG_ERR_RUNTIME after logging (a scaled shape the model cannot take: the
 * message names the scale). */
sg_status sg_tta_run(sg_tta *t, sg_model *m, const uint8_t *d_img, int n, int H, int W);

/* Memory for a batch of n images of H x W: *plan = the largest inference
 * plan over the scales (sg_model_plan_bytes; the window's for sliding
 * windows), *bufs = this module's device buffers (bytes); *held = what it
 * holds now (freed when they grow). Returns 0, or -1 when a scaled shape is
 * one the model refuses (planning reports it). */
int sg_tta_bytes(const sg_tta *t, const sg_model *m, int n, int H, int W, size_t *plan,
                 size_t *bufs, size_t *held);

#endif
