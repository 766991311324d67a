/* data/synth_internal.h - what synth.c and synth_layouts.c share. Not a
 * public header. Every function returns SG_OK or SG_ERR_RUNTIME after logging
 * the path that failed. */
#ifndef SG_DATA_SYNTH_INTERNAL_H
#define SG_DATA_SYNTH_INTERNAL_H

#include <stdint.h>

#include "data/synth.h"

/* Refuses to write into <out> when one of <out>/<dirs[i]> exists. */
sg_status sg_synth_check_new(const char *out, const char *const *dirs, int n);
/* mkdir -p. */
sg_status sg_synth_mkdir(const char *path);

/* Writes one image's gtFine files: <prefix>labelIds.png, instanceIds.png,
 * color.png and polygons.json (prefix = ".../<name>_gtFine_"). */
sg_status sg_synth_write_gtfine(const char *prefix, const uint8_t *label_ids,
                                const uint16_t *instance_ids, int h, int w);

/* The whole dataset in the VOC / ADE20K layout (options already checked). */
sg_status sg_synth_write_voc(const sg_synth_opts *o);
sg_status sg_synth_write_ade20k(const sg_synth_opts *o);

#endif
