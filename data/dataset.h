/* data/dataset.h - the index of a dataset split, its classes, and decoding of
 * one sample (image + label mask, label map applied, labels validated).
 *
 * Formats (data.format):
 *  - cityscapes: <root>/leftImg8bit/<split>/<city>/<name>_leftImg8bit.png paired
 *    with <root>/gtFine/<split>/<city>/<name>_gtFine_labelTrainIds.png when every
 *    image has one, else with <name>_gtFine_labelIds.png, mapped labelId ->
 *    trainId by the Cityscapes table when data.label_map is "cityscapes" (raw
 *    labelIds when "none"). In labelTrainIds files 255 is "ignore".
 *  - list: the split names a text file (absolute, or relative to data.root) of
 *    "image_path mask_path" lines, relative to data.root; blank lines and lines
 *    starting with '#' are skipped. Paths cannot contain spaces.
 *  - voc (data.root = VOCdevkit/VOC2012): the split names
 *    ImageSets/Segmentation/<split>.txt (one image name per line), or several
 *    joined by '+' ("train+aug": their union, a name in two files once);
 *    images JPEGImages/<name>.jpg, masks SegmentationClass/<name>.png (palette
 *    PNGs: the index is the class), else SegmentationClassAug/<name>.png.
 *    Classes 0..20, 255 (object borders) is ignore.
 *  - ade20k (data.root = ADEChallengeData2016): images/<split>/<name>.jpg (.jpeg,
 *    .png too) paired with annotations/<split>/<name>.png; splits training and
 *    validation. Annotations hold 0 = "other" and classes 1..150, so
 *    data.reduce_zero_label defaults to true for it.
 * Images are PNG or JPEG, told apart by their first bytes (io/image.h);
 * masks are PNG. Every decoded image and mask is limited to
 * data.max_image_pixels pixels (checked before allocation).
 *
 * data.reduce_zero_label (auto = true for ade20k only): file value 0 becomes
 * ignore_index, 1..254 become 0..253, 255 stays ignore (mmsegmentation's
 * rule); applied before the layout's own map.
 * The index is sorted by the image's relative path (byte order), so it is the
 * same on every rank and every run. Opening checks up front that every mask
 * exists and reports how many are missing, with examples.
 *
 * Labels: after mapping, a value is valid if < num_classes or == ignore_index.
 * Others are an error naming the file, value and pixel (data.invalid_labels:
 * error) or become ignore_index (data.invalid_labels: ignore).
 *
 * Classes: names and an RGB palette per class: data.class_names /
 * data.palette when given (exactly num_classes entries); else the layout's
 * own when num_classes is the layout's (Cityscapes 19, VOC 21 with VOC's
 * palette, ADE20K 150 with mmsegmentation's palette); else "class_<i>" and a
 * generated palette (the PASCAL VOC bit pattern).
 *
 * Thread-safety: after open, every function is safe to call from many threads.
 */
#ifndef SG_DATA_DATASET_H
#define SG_DATA_DATASET_H

#include <stddef.h>
#include <stdint.h>

#include "core/config.h"
#include "core/status.h"
#include "io/png.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct sg_dataset sg_dataset;

/* Opens split `split` (a directory name for cityscapes and ade20k, a list
 * file for list, split file name(s) for voc) of the dataset described by cfg
 * (format, root, label_map, reduce_zero_label, ignore_index, invalid_labels,
 * class_names, palette, max_image_pixels; max_image_pixels 0 = the default).
 * Returns NULL after logging an error
 * that names the root / file / line and what to do (missing root, no images,
 * missing masks with count and examples, malformed list line, duplicates). */
sg_dataset *sg_dataset_open(const sg_data_cfg *cfg, const char *split, int num_classes);
void sg_dataset_close(sg_dataset *ds); /* NULL-safe */

int64_t sg_dataset_size(const sg_dataset *ds);
int sg_dataset_num_classes(const sg_dataset *ds);
int sg_dataset_ignore_index(const sg_dataset *ds);
const char *sg_dataset_split(const sg_dataset *ds);

/* Full paths of sample i's image and mask, and the image path relative to the
 * root (the sort key; predictions use it to name outputs). */
const char *sg_dataset_image_path(const sg_dataset *ds, int64_t i);
const char *sg_dataset_mask_path(const sg_dataset *ds, int64_t i);
const char *sg_dataset_rel_path(const sg_dataset *ds, int64_t i);

/* Class c's name, and the palette: num_classes r,g,b triples. */
const char *sg_dataset_class_name(const sg_dataset *ds, int c);
const uint8_t *sg_dataset_palette(const sg_dataset *ds);

/* The 256-entry table applied to raw mask values (identity when no mapping). */
const uint8_t *sg_dataset_label_map(const sg_dataset *ds);

/* Decodes sample i: image (c = 3) and mask (c = 1, mapped and validated, same
 * size as the image). Returns SG_OK, or SG_ERR_RUNTIME with a message naming
 * the file in err (logged when err == NULL); on failure image and mask are
 * left empty. */
sg_status sg_dataset_load(const sg_dataset *ds, int64_t i, sg_img *image, sg_img *mask, char *err,
                          size_t errlen);

/* Cityscapes tables (cityscapes.md). map[labelId] = trainId, or `ignore` for
 * the labelIds that are not among the 19 classes. */
void sg_cityscapes_label_map(uint8_t map[256], uint8_t ignore);
int sg_cityscapes_label_id(int train_id); /* trainId 0..18 -> labelId; -1 else */
const char *sg_cityscapes_class_name(int train_id);
const uint8_t *sg_cityscapes_palette(void); /* 19 r,g,b triples */

/* Pascal VOC's 21 class names (0 = background), ADE20K's 150 (after
 * reduce_zero_label: 0 = wall) and its palette (150 r,g,b triples). NULL
 * outside the range. */
const char *sg_voc_class_name(int c);
const char *sg_ade20k_class_name(int c);
const uint8_t *sg_ade20k_palette(void);

/* A format's own name and colour of class c, when num_classes is the
 * format's (its row in data/formats.h: "cityscapes" 19, "voc" 21, "ade20k"
 * 150): the name (NULL otherwise), and 1 with rgb filled (0 otherwise). For
 * reports and coloured predictions made from a configuration. */
const char *sg_layout_class_name(const char *format, int num_classes, int c);
int sg_layout_color(const char *format, int num_classes, int c, uint8_t rgb[3]);

/* The generated palette for class c (VOC bit pattern), into rgb[3]. */
void sg_generated_color(int c, uint8_t rgb[3]);

#ifdef __cplusplus
}
#endif

#endif
