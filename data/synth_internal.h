/* data/synth_internal.h - what the synthetic dataset's files share: the
 * renderer's helpers (synth_render.c) and one writer per layout
 * (synth_cityscapes.c, synth_voc.c, synth_ade20k.c), which the format table
 * (data/formats.c) names. Not a public header. Every function that returns
 * sg_status returns SG_OK or SG_ERR_RUNTIME after logging the path that
 * failed. */
#ifndef SG_DATA_SYNTH_INTERNAL_H
#define SG_DATA_SYNTH_INTERNAL_H

#include <stdint.h>

#include "core/status.h"
#include "data/synth.h"

/* labelIds the renderer paints its ignore regions with (both map to 255). */
#define SG_SYNTH_LID_UNLABELED 0
#define SG_SYNTH_LID_EGO 1

/* The JPEG quality of every synthetic JPEG image. */
#define SG_SYNTH_JPEG_QUALITY 95

/* ---- synth_render.c ---- */

/* Image i of a split as trainIds (255 = ignore) and RGB. */
void sg_synth_render_train_ids(const sg_synth_opts *o, int split, int i, uint8_t *rgb,
                               uint8_t *train_ids);
/* Refuses to write into <out> when one of <out>/<dirs[i]> exists. */
sg_status sg_synth_check_new(const char *out, const char *const *dirs, int n);
/* mkdir -p. */
sg_status sg_synth_mkdir(const char *path);

/* ---- the writers: the whole dataset in one layout (options already
 * checked by sg_synth_write) ---- */
sg_status sg_synth_write_cityscapes(const sg_synth_opts *o);
sg_status sg_synth_write_voc(const sg_synth_opts *o);
sg_status sg_synth_write_ade20k(const sg_synth_opts *o);

#endif
