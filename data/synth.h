/* data/synth.h - a synthetic dataset with learnable structure, in the
 * Cityscapes, Pascal VOC or ADE20K layout, for the demo and end-to-end tests
 * (`segtrain synth --layout`).
 *
 * Cityscapes (splits train, val), as the real gtFine release:
 *   <out>/leftImg8bit/<split>/<city>/<city>_000000_<i>_leftImg8bit.png and, in
 *   <out>/gtFine/<split>/<city>/, <city>_000000_<i>_gtFine_ + labelIds.png
 *   (labelIds, so the Cityscapes label map is exercised), instanceIds.png
 *   (16-bit: labelId * 1000 + instance for the classes with instances, person
 *   to bicycle; the labelId elsewhere), color.png (the labels' colours) and
 *   polygons.json (imgHeight, imgWidth, objects of label + polygon: disjoint
 *   rectangles that cityscapesScripts' json2labelImg draws back into exactly
 *   the labelIds image; instance classes are labelled "<name>group" there, so
 *   json2instanceImg makes no fake instances of the rectangles).
 * VOC (data.root = <out>): JPEGImages/<name>.jpg, SegmentationClass/<name>.png
 *   (palette PNGs with VOC's palette; labels = trainIds, 255 on a one-pixel
 *   border between objects and on the ignore regions),
 *   ImageSets/Segmentation/{train,val,aug}.txt: even-numbered training images
 *   in train.txt, odd ones in aug.txt with their masks only in
 *   SegmentationClassAug/ (gray PNGs, as the converted SBD set), so
 *   "train+aug" is the whole training set.
 * ADE20K (data.root = <out>): images/{training,validation}/ADE_*_<i>.jpg and
 *   annotations/.../ADE_*_<i>.png (gray: trainId + 1, 0 on ignore regions, so
 *   reduce_zero_label gives trainIds back).
 * JPEG images are written at quality 95.
 * Each image: a sky / building / road background, then shapes of the other
 * classes (each class its own shape, colour and texture) drawn over one
 * another (occlusion), pixel noise, and some ignore regions (labelIds that map
 * to 255: an "ego vehicle" band and "unlabeled" blobs). Every pixel is a pure
 * function of (seed, split, image index) via kernels/rng.h (SG_RNG_SYNTH).
 */
#ifndef SG_DATA_SYNTH_H
#define SG_DATA_SYNTH_H

#include <stdint.h>

#include "core/status.h"
#include "io/png.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A layout is a row of the dataset format table (data/formats.h) that has a
 * synth writer: layout l is the l-th such row, in table order. */
typedef enum { SG_SYNTH_CITYSCAPES = 0, SG_SYNTH_VOC = 1, SG_SYNTH_ADE20K = 2 } sg_synth_layout;

typedef struct sg_synth_opts {
    const char *out;        /* dataset root to create */
    sg_synth_layout layout; /* default cityscapes */
    int n_train, n_val;     /* default 100, 20 */
    int h, w;               /* image size, default 100 x 140 */
    uint64_t seed;          /* default 0 */
    int classes;            /* trainIds used: 3..19, default 19 */
} sg_synth_opts;

void sg_synth_defaults(sg_synth_opts *o);

/* Renders image `index` of split (0 = train, 1 = val): rgb[h*w*3] and
 * label_ids[h*w] (Cityscapes labelIds). */
void sg_synth_render(const sg_synth_opts *o, int split, int index, uint8_t *rgb,
                     uint8_t *label_ids);

/* The same, also giving Cityscapes instanceIds (instance_ids[h*w], may be
 * NULL): labelId * 1000 + k for the k-th object of a class with instances
 * (trainIds 11..18), else the labelId. */
void sg_synth_render_instances(const sg_synth_opts *o, int split, int index, uint8_t *rgb,
                               uint8_t *label_ids, uint16_t *instance_ids);

/* The layout's name ("cityscapes", "voc", "ade20k"), and back (-1 if none). */
const char *sg_synth_layout_name(sg_synth_layout l);
int sg_synth_layout_parse(const char *name);

/* Writes the whole dataset. Returns SG_OK, SG_ERR_CONFIG for invalid options,
 * or SG_ERR_RUNTIME when writing fails (logged, naming the path). */
sg_status sg_synth_write(const sg_synth_opts *o);

#ifdef __cplusplus
}
#endif

#endif
