/* data/synth.h - a synthetic Cityscapes-layout dataset with learnable
 * structure, for the demo and end-to-end tests (`segtrain synth`).
 *
 * Writes <out>/leftImg8bit/<split>/<city>/<city>_000000_<i>_leftImg8bit.png and
 * <out>/gtFine/<split>/<city>/<city>_000000_<i>_gtFine_labelIds.png (labelIds,
 * so the Cityscapes label map is exercised), splits "train" and "val".
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
#include "data/png.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct sg_synth_opts {
    const char *out;       /* dataset root to create */
    int n_train, n_val;    /* default 100, 20 */
    int h, w;              /* image size, default 100 x 140 */
    uint64_t seed;         /* default 0 */
    int classes;           /* trainIds used: 3..19, default 19 */
} sg_synth_opts;

void sg_synth_defaults(sg_synth_opts *o);

/* Renders image `index` of split (0 = train, 1 = val): rgb[h*w*3] and
 * label_ids[h*w] (Cityscapes labelIds). */
void sg_synth_render(const sg_synth_opts *o, int split, int index, uint8_t *rgb,
                     uint8_t *label_ids);

/* Writes the whole dataset. Returns SG_OK, SG_ERR_CONFIG for invalid options,
 * or SG_ERR_RUNTIME when writing fails (logged, naming the path). */
sg_status sg_synth_write(const sg_synth_opts *o);

#ifdef __cplusplus
}
#endif

#endif
