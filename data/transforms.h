/* data/transforms.h - training augmentation on uint8 images and masks:
 * random scale (bilinear image, nearest mask), random crop with padding
 * (image 0, mask ignore_index), horizontal flip.
 *
 * A sample's draws are a pure function of (seed, epoch, sample index): key =
 * sg_rng_key(seed, epoch, sample, 0, SG_RNG_AUGMENT), draw 0 = scale, 1 = crop
 * y, 2 = crop x, 3 = flip. So a batch is the same whatever the worker count.
 *
 * Geometry: scale s uniform in [lo, hi]; the scaled size is
 * round(h * s) x round(w * s) (at least 1). Bilinear resizing uses pixel
 * centres (align_corners = False, no antialias: OpenCV's INTER_LINEAR, which
 * mmsegmentation uses); the mask uses nearest neighbour with the same centre
 * mapping (src = floor((dst + 0.5) / s)), so mask values are always a subset of
 * the input's. When the scaled image is smaller than the crop it is padded at
 * the bottom/right (torchvision's references do the same), then a crop
 * position is drawn uniformly among the valid ones. Normalization by mean/std
 * is left to the backend (batches stay uint8 to halve upload bytes).
 */
#ifndef SG_DATA_TRANSFORMS_H
#define SG_DATA_TRANSFORMS_H

#include <stdint.h>

#include "core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct sg_aug_opts {
    double scale_lo, scale_hi; /* 1,1 = no scaling */
    int crop_h, crop_w;        /* output size */
    int hflip;                 /* bool: flip with probability 0.5 */
    int ignore_index;          /* mask padding value */
} sg_aug_opts;

/* One sample's drawn parameters (in terms of the input size h x w). */
typedef struct sg_aug_draw {
    double scale;
    int scaled_h, scaled_w; /* size after scaling */
    int y0, x0;             /* crop origin in the padded, scaled image */
    int flip;
} sg_aug_draw;

void sg_aug_make_draw(const sg_aug_opts *o, uint64_t seed, int64_t epoch, int64_t sample, int h,
                      int w, sg_aug_draw *d);

/* Applies draw d to img[h,w,3] and mask[h,w] (mask may be NULL), writing
 * out_img[crop_h,crop_w,3] and out_mask[crop_h,crop_w]. Scratch-free except
 * one row-index table; never fails (SG_OK) except on allocation
 * (SG_ERR_RUNTIME, not logged: the loader names the sample). */
sg_status sg_aug_apply(const sg_aug_opts *o, const sg_aug_draw *d, const uint8_t *img,
                       const uint8_t *mask, int h, int w, uint8_t *out_img, uint8_t *out_mask);

/* Building blocks (exposed for tests and prediction). */
void sg_resize_bilinear_u8(const uint8_t *src, int sh, int sw, int c, uint8_t *dst, int dh, int dw);
void sg_resize_nearest_u8(const uint8_t *src, int sh, int sw, int c, uint8_t *dst, int dh, int dw);

#ifdef __cplusplus
}
#endif

#endif
