/* data/transforms.h - training augmentation on uint8 images and masks:
 * random scale (bilinear image, nearest mask), random crop with padding
 * (image 0, mask ignore_index) and mmsegmentation's cat_max_ratio,
 * horizontal flip, mmsegmentation's PhotoMetricDistortion.
 *
 * A sample's draws are a pure function of (seed, epoch, sample index): key =
 * sg_rng_key(seed, epoch, sample, 0, SG_RNG_AUGMENT), draw 0 = scale, 1 = crop
 * y, 2 = crop x, 3 = flip, 4 + 2 (k - 1) and 5 + 2 (k - 1) = crop y, x of the
 * k-th redraw (k = 1..10, cat_max_ratio), 32..40 = photometric. So a batch is
 * the same whatever the worker count.
 *
 * cat_max_ratio (mmseg's RandomCrop): while a crop's mask holds one class or
 * its largest class covers cat_max_ratio or more of its pixels (ignore_index
 * and padding not counted), the position is drawn again: up to 10 positions
 * are tested and, when all fail, an 11th is taken untested, as mmseg does.
 *
 * Photometric (mmseg 1.x's PhotoMetricDistortion, on the uint8 crop after
 * the flip, padding untouched): brightness (+beta), then contrast (*alpha)
 * when contrast_first, saturation (OpenCV's 8-bit HSV, S *alpha), hue (H +
 * shift mod 180), contrast when not contrast_first; each step with
 * probability 0.5. Each step computes in float32 then clips to 0..255 and
 * truncates to uint8 (numpy's astype), and each HSV step converts RGB -> HSV
 * -> RGB with OpenCV's 8-bit integer tables and float inverse, so results are
 * mmcv's to within one grey level (tests/data/make_aug_golden.py).
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

#include <stddef.h>
#include <stdint.h>

#include "core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* mmseg's PhotoMetricDistortion(brightness_delta, contrast_range,
 * saturation_range, hue_delta); defaults 32, (0.5, 1.5), (0.5, 1.5), 18. */
typedef struct sg_photo_opts {
    int enabled;                     /* bool */
    double brightness_delta;         /* beta uniform in [-delta, delta) */
    double contrast_lo, contrast_hi; /* alpha uniform in [lo, hi) */
    double saturation_lo, saturation_hi;
    int hue_delta; /* integer shift uniform in [-delta, delta - 1] (numpy's randint) */
} sg_photo_opts;

/* One sample's photometric draws: which steps run and their values. */
typedef struct sg_photo_draw {
    int brightness; /* bool */
    float beta;
    int contrast_first; /* mmseg's mode == 1: contrast before the HSV steps */
    int contrast;       /* bool */
    float contrast_alpha;
    int saturation; /* bool */
    float saturation_alpha;
    int hue; /* bool */
    int hue_shift;
} sg_photo_draw;

typedef struct sg_aug_opts {
    double scale_lo, scale_hi; /* 1,1 = no scaling */
    int crop_h, crop_w;        /* output size */
    int hflip;                 /* bool: flip with probability 0.5 */
    int ignore_index;          /* mask padding value */
    double cat_max_ratio;      /* mmseg RandomCrop's; >= 1 = off (mmseg's default) */
    sg_photo_opts photo;
} sg_aug_opts;

/* One sample's drawn parameters (in terms of the input size h x w). */
typedef struct sg_aug_draw {
    double scale;
    int scaled_h, scaled_w; /* size after scaling */
    int y0, x0;             /* crop origin in the padded, scaled image */
    int flip;
    int crop_draws;      /* crop positions drawn (1 without cat_max_ratio, up to 11) */
    sg_photo_draw photo; /* all zero when o->photo.enabled is 0 */
} sg_aug_draw;

/* The draws of one sample of size h x w. mask[h,w] is read for
 * cat_max_ratio (NULL: the first position is kept). SG_OK, or SG_ERR_RUNTIME
 * on allocation failure (not logged: the loader names the sample). */
sg_status sg_aug_make_draw(const sg_aug_opts *o, uint64_t seed, int64_t epoch, int64_t sample,
                           const uint8_t *mask, int h, int w, sg_aug_draw *d);

/* Applies draw d to img[h,w,3] and mask[h,w] (mask may be NULL), writing
 * out_img[crop_h,crop_w,3] and out_mask[crop_h,crop_w]. Scratch-free except
 * one row-index table; never fails (SG_OK) except on allocation
 * (SG_ERR_RUNTIME, not logged: the loader names the sample). */
sg_status sg_aug_apply(const sg_aug_opts *o, const sg_aug_draw *d, const uint8_t *img,
                       const uint8_t *mask, int h, int w, uint8_t *out_img, uint8_t *out_mask);

/* Building blocks (exposed for tests and prediction). */

/* mmseg RandomCrop's choice among SG_AUG_CROP_DRAWS candidate origins
 * cand[k] = {y0, x0} of the mask scaled to scaled_h x scaled_w (nearest, as
 * sg_aug_apply): the first of the first 10 whose crop holds more than one
 * class besides ignore_index with the largest covering less than
 * o->cat_max_ratio of them, else the 11th. Returns its index; 0 when
 * cat_max_ratio is off or mask is NULL. cols: scratch of o->crop_w ints. */
#define SG_AUG_CROP_DRAWS 11
int sg_aug_pick_crop(const sg_aug_opts *o, const uint8_t *mask, int h, int w, int scaled_h,
                     int scaled_w, const int cand[SG_AUG_CROP_DRAWS][2], int *cols);
/* PhotoMetricDistortion with draws p on n RGB pixels, in place. */
void sg_photo_apply(const sg_photo_draw *p, uint8_t *rgb, size_t n);
/* OpenCV's cvtColor COLOR_RGB2HSV / COLOR_HSV2RGB on one 8-bit pixel
 * (H in 0..179). */
void sg_rgb2hsv_u8(const uint8_t rgb[3], uint8_t hsv[3]);
void sg_hsv2rgb_u8(const uint8_t hsv[3], uint8_t rgb[3]);
void sg_resize_bilinear_u8(const uint8_t *src, int sh, int sw, int c, uint8_t *dst, int dh, int dw);
void sg_resize_nearest_u8(const uint8_t *src, int sh, int sw, int c, uint8_t *dst, int dh, int dw);

#ifdef __cplusplus
}
#endif

#endif
