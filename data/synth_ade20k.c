/* data/synth_ade20k.c - the synthetic dataset in the ADE20K layout
 * (synth.h): images/ JPEGs and annotations/ PNGs holding trainId + 1 (0 on
 * the ignore regions), splits training and validation. The format table's
 * ade20k row points at sg_synth_write_ade20k. */
#include <stdio.h>
#include <stdlib.h>

#include "core/log.h"
#include "data/synth_internal.h"
#include "io/jpeg.h"

sg_status sg_synth_write_ade20k(const sg_synth_opts *o) {
    static const char *const tops[2] = {"images", "annotations"};
    static const char *const splits[2] = {"training", "validation"};
    static const char *const prefixes[2] = {"ADE_train", "ADE_val"};
    if (sg_synth_check_new(o->out, tops, 2) != SG_OK) return SG_ERR_RUNTIME;
    char path[4200];
    for (int t = 0; t < 2; t++)
        for (int s = 0; s < 2; s++) {
            snprintf(path, sizeof path, "%s/%s/%s", o->out, tops[t], splits[s]);
            if (sg_synth_mkdir(path) != SG_OK) return SG_ERR_RUNTIME;
        }
    size_t px = (size_t)o->h * o->w;
    uint8_t *rgb = malloc(px * 3), *lab = malloc(px);
    SG_CHECK(rgb && lab, "out of memory");
    sg_status rc = SG_OK;
    for (int split = 0; split < 2 && rc == SG_OK; split++) {
        int n = split ? o->n_val : o->n_train;
        for (int i = 0; i < n && rc == SG_OK; i++) {
            sg_synth_render_train_ids(o, split, i, rgb, lab);
            /* ADE20K stores 0 = "other" and classes from 1 */
            for (size_t p = 0; p < px; p++) lab[p] = lab[p] == 255 ? 0 : (uint8_t)(lab[p] + 1);
            snprintf(path, sizeof path, "%s/images/%s/%s_%08d.jpg", o->out, splits[split],
                     prefixes[split], i + 1);
            rc = sg_jpeg_write_rgb(path, rgb, o->h, o->w, SG_SYNTH_JPEG_QUALITY, NULL, 0);
            snprintf(path, sizeof path, "%s/annotations/%s/%s_%08d.png", o->out, splits[split],
                     prefixes[split], i + 1);
            if (rc == SG_OK) rc = sg_png_write_gray(path, lab, o->h, o->w, NULL, 0);
        }
    }
    free(rgb);
    free(lab);
    return rc;
}
