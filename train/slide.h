/* train/slide.h - sliding-window inference of one image (mmsegmentation's
 * "slide" test mode), shared by the evaluator and predict so both give the
 * same logits and the same argmax.
 *
 * Windows of crop_h x crop_w (clipped to the image) start every stride_h /
 * stride_w pixels; the last window in each direction is aligned to the
 * border. Each window's logits (eval-mode forward on the normalised window)
 * are summed on the host in window order (rows, then columns) and divided
 * by the number of windows covering each pixel. Owns nothing after it
 * returns.
 */
#ifndef SG_TRAIN_SLIDE_H
#define SG_TRAIN_SLIDE_H

#include <stddef.h>
#include <stdint.h>

#include "core/status.h"
#include "kernels/backend.h"
#include "model/model.h"

/* d_img: uint8 [H,W,3] on the device. out: host floats [C,H,W], the
 * per-pixel mean of the window logits. The model is planned for one
 * window (sg_model_plan_infer). SG_OK, or SG_ERR_RUNTIME after logging
 * (a window the model cannot take). */
sg_status sg_slide_logits(sg_backend *be, sg_model *m, const uint8_t *d_img, int H, int W, int C,
                          int crop_h, int crop_w, int stride_h, int stride_w, const float mean[3],
                          const float std[3], float *out);

/* pred[p] = argmax over c of logits[c*px + p] (host; first max wins, as
 * ops->argmax). */
void sg_slide_argmax(const float *logits, int C, size_t px, uint8_t *pred);

#endif
