/* data/synth_voc.c - the synthetic dataset in the Pascal VOC 2012 layout
 * (synth.h): JPEGImages, palette SegmentationClass PNGs,
 * SegmentationClassAug for the "aug" half, ImageSets/Segmentation lists. The
 * format table's voc row points at sg_synth_write_voc. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "data/dataset.h"
#include "data/synth_internal.h"
#include "io/jpeg.h"

static FILE *open_list(const char *path) {
    FILE *f = fopen(path, "w");
    if (!f) SG_ERROR("synth: cannot create %s: %s", path, strerror(errno));
    return f;
}

sg_status sg_synth_write_voc(const sg_synth_opts *o) {
    static const char *const tops[4] = {"JPEGImages", "SegmentationClass", "SegmentationClassAug",
                                        "ImageSets"};
    if (sg_synth_check_new(o->out, tops, 4) != SG_OK) return SG_ERR_RUNTIME;
    char path[4200];
    for (int i = 0; i < 4; i++) {
        snprintf(path, sizeof path, "%s/%s%s", o->out, tops[i], i == 3 ? "/Segmentation" : "");
        if (sg_synth_mkdir(path) != SG_OK) return SG_ERR_RUNTIME;
    }
    static const char *const lists[3] = {"train", "aug", "val"};
    FILE *lf[3] = {NULL, NULL, NULL};
    sg_status rc = SG_OK;
    for (int i = 0; i < 3 && rc == SG_OK; i++) {
        snprintf(path, sizeof path, "%s/ImageSets/Segmentation/%s.txt", o->out, lists[i]);
        if (!(lf[i] = open_list(path))) rc = SG_ERR_RUNTIME;
    }
    uint8_t palette[256 * 3];
    for (int c = 0; c < 256; c++) sg_generated_color(c, palette + 3 * c);
    size_t px = (size_t)o->h * o->w;
    uint8_t *rgb = malloc(px * 3), *lab = malloc(px), *out = malloc(px);
    SG_CHECK(rgb && lab && out, "out of memory");
    int h = o->h, w = o->w;
    for (int split = 0; split < 2 && rc == SG_OK; split++) {
        int n = split ? o->n_val : o->n_train;
        for (int i = 0; i < n && rc == SG_OK; i++) {
            sg_synth_render_train_ids(o, split, i, rgb, lab);
            /* VOC outlines objects with 255: a pixel next to another class
             * (right or below) becomes border */
            for (int y = 0; y < h; y++)
                for (int x = 0; x < w; x++) {
                    size_t p = (size_t)y * w + x;
                    uint8_t a = lab[p];
                    int edge = a != 255 && ((x + 1 < w && lab[p + 1] != 255 && lab[p + 1] != a) ||
                                            (y + 1 < h && lab[p + w] != 255 && lab[p + w] != a));
                    out[p] = edge ? 255 : a;
                }
            char stem[32];
            snprintf(stem, sizeof stem, "%d_%06d", split ? 2012 : 2011, i);
            snprintf(path, sizeof path, "%s/JPEGImages/%s.jpg", o->out, stem);
            if (sg_jpeg_write_rgb(path, rgb, h, w, SG_SYNTH_JPEG_QUALITY, NULL, 0) != SG_OK) {
                rc = SG_ERR_RUNTIME;
                break;
            }
            int aug = split == 0 && i % 2 == 1;
            FILE *list = lf[split ? 2 : aug ? 1 : 0];
            if (aug) {
                snprintf(path, sizeof path, "%s/SegmentationClassAug/%s.png", o->out, stem);
                rc = sg_png_write_gray(path, out, h, w, NULL, 0);
            } else {
                snprintf(path, sizeof path, "%s/SegmentationClass/%s.png", o->out, stem);
                rc = sg_png_write_palette(path, out, h, w, palette, 256, NULL, 0);
            }
            if (rc == SG_OK && fprintf(list, "%s\n", stem) < 0) {
                SG_ERROR("synth: writing the VOC split files failed: %s", strerror(errno));
                rc = SG_ERR_RUNTIME;
            }
        }
    }
    for (int i = 0; i < 3; i++) {
        if (lf[i] && fclose(lf[i]) != 0 && rc == SG_OK) {
            SG_ERROR("synth: closing the VOC split file %s.txt failed: %s", lists[i],
                     strerror(errno));
            rc = SG_ERR_RUNTIME;
        }
    }
    free(rgb);
    free(lab);
    free(out);
    return rc;
}
