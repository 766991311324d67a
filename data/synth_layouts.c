/* data/synth_layouts.c - the synthetic dataset's files beyond Cityscapes'
 * images and labelIds: the rest of gtFine (instanceIds, color, polygons) and
 * the Pascal VOC and ADE20K layouts (synth.h). The pixels come from
 * sg_synth_render_instances, so every layout shows the same scenes. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "data/dataset.h"
#include "io/jpeg.h"
#include "data/synth_internal.h"

#define JPEG_QUALITY 95
#define LID_EGO 1 /* labelIds the renderer uses for its ignore regions */

/* ---- gtFine: instanceIds, color, polygons ---- */

/* Cityscapes' name of a labelId the renderer uses (labels.py), and whether
 * the class has instances; NULL for "unlabeled" (0). */
static const char *label_name(const uint8_t to_train[256], int label_id, int *has_instances) {
    *has_instances = 0;
    if (label_id == LID_EGO) return "ego vehicle";
    int t = to_train[label_id];
    if (t == 255) return NULL;
    *has_instances = t >= 11; /* person, rider, car, truck, bus, train, motorcycle, bicycle */
    return sg_cityscapes_class_name(t);
}

typedef struct rect_run {
    int x0, x1, y0;
    uint8_t v;
    int continued;
} rect_run;

/* One JSON object per rectangle; returns 0 or -1 on a write error. */
static int emit_rect(FILE *f, const uint8_t to_train[256], int *first, const rect_run *r,
                     int y1) {
    int inst;
    const char *name = label_name(to_train, r->v, &inst);
    if (!name) return 0; /* unlabeled: json2labelImg's background */
    int n = fprintf(f,
                    "%s\n    {\"label\": \"%s%s\", \"polygon\": [[%d, %d], [%d, %d], [%d, %d], "
                    "[%d, %d]]}",
                    *first ? "" : ",", name, inst ? "group" : "", r->x0, r->y0, r->x1, r->y0,
                    r->x1, y1, r->x0, y1);
    *first = 0;
    return n < 0 ? -1 : 0;
}

/* The labelIds image as disjoint rectangles: runs of one value on a row,
 * merged downwards while the next row has the very same run. Pillow fills a
 * polygon with integer corners including its edges, so json2labelImg draws
 * each rectangle back onto exactly its pixels. */
static sg_status write_polygons(const char *path, const uint8_t *lid, int h, int w) {
    FILE *f = fopen(path, "w");
    if (!f) {
        SG_ERROR("synth: cannot create %s: %s", path, strerror(errno));
        return SG_ERR_RUNTIME;
    }
    rect_run *prev = malloc(sizeof *prev * (size_t)w), *cur = malloc(sizeof *cur * (size_t)w);
    SG_CHECK(prev && cur, "out of memory");
    int n_prev = 0, first = 1, bad = 0;
    uint8_t to_train[256];
    sg_cityscapes_label_map(to_train, 255);
    bad |= fprintf(f, "{\n  \"imgHeight\": %d,\n  \"imgWidth\": %d,\n  \"objects\": [", h, w) < 0;
    for (int y = 0; y <= h; y++) {
        int n_cur = 0;
        if (y < h) {
            const uint8_t *row = lid + (size_t)y * w;
            for (int x = 0; x < w;) {
                int x1 = x;
                while (x1 + 1 < w && row[x1 + 1] == row[x]) x1++;
                cur[n_cur++] = (rect_run){x, x1, y, row[x], 0};
                x = x1 + 1;
            }
            /* runs partition each row in x order: match them by walking both */
            for (int i = 0, j = 0; i < n_cur && j < n_prev;) {
                if (prev[j].x0 < cur[i].x0) {
                    j++;
                } else if (prev[j].x0 > cur[i].x0) {
                    i++;
                } else {
                    if (prev[j].x1 == cur[i].x1 && prev[j].v == cur[i].v) {
                        cur[i].y0 = prev[j].y0;
                        prev[j].continued = 1;
                    }
                    i++;
                    j++;
                }
            }
        }
        for (int j = 0; j < n_prev && !bad; j++)
            if (!prev[j].continued) bad |= emit_rect(f, to_train, &first, &prev[j], y - 1);
        rect_run *t = prev;
        prev = cur;
        cur = t;
        n_prev = n_cur;
    }
    bad |= fprintf(f, "\n  ]\n}\n") < 0;
    free(prev);
    free(cur);
    bad |= fclose(f) != 0;
    if (bad) {
        SG_ERROR("synth: writing %s failed: %s (disk full?)", path, strerror(errno));
        return SG_ERR_RUNTIME;
    }
    return SG_OK;
}

sg_status sg_synth_write_gtfine(const char *prefix, const uint8_t *lid, const uint16_t *inst,
                                int h, int w) {
    char path[4200];
    size_t px = (size_t)h * w;
    snprintf(path, sizeof path, "%slabelIds.png", prefix);
    if (sg_png_write_gray(path, lid, h, w, NULL, 0) != SG_OK) return SG_ERR_RUNTIME;
    snprintf(path, sizeof path, "%sinstanceIds.png", prefix);
    if (sg_png_write_gray16(path, inst, h, w, NULL, 0) != SG_OK) return SG_ERR_RUNTIME;
    /* color: each label's colour (labels.py); unlabeled and ego vehicle black */
    uint8_t to_train[256];
    sg_cityscapes_label_map(to_train, 255);
    uint8_t *rgb = malloc(px * 3);
    SG_CHECK(rgb != NULL, "out of memory");
    const uint8_t *pal = sg_cityscapes_palette();
    for (size_t i = 0; i < px; i++) {
        int t = to_train[lid[i]];
        for (int k = 0; k < 3; k++) rgb[3 * i + k] = t == 255 ? 0 : pal[3 * t + k];
    }
    snprintf(path, sizeof path, "%scolor.png", prefix);
    sg_status rc = sg_png_write_rgb(path, rgb, h, w, NULL, 0);
    free(rgb);
    if (rc != SG_OK) return rc;
    snprintf(path, sizeof path, "%spolygons.json", prefix);
    return write_polygons(path, lid, h, w);
}

/* ---- VOC and ADE20K ---- */

/* Renders image i of a split as trainIds (255 = ignore) and RGB. */
static void render_train_ids(const sg_synth_opts *o, int split, int i, uint8_t *rgb,
                             uint8_t *lab) {
    uint8_t map[256];
    sg_cityscapes_label_map(map, 255);
    sg_synth_render(o, split, i, rgb, lab);
    for (size_t p = 0; p < (size_t)o->h * o->w; p++) lab[p] = map[lab[p]];
}

static FILE *open_list(const char *path) {
    FILE *f = fopen(path, "w");
    if (!f) SG_ERROR("synth: cannot create %s: %s", path, strerror(errno));
    return f;
}

sg_status sg_synth_write_voc(const sg_synth_opts *o) {
    static const char *const tops[4] = {"JPEGImages", "SegmentationClass",
                                        "SegmentationClassAug", "ImageSets"};
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
            render_train_ids(o, split, i, rgb, lab);
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
            if (sg_jpeg_write_rgb(path, rgb, h, w, JPEG_QUALITY, NULL, 0) != SG_OK) {
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
            render_train_ids(o, split, i, rgb, lab);
            /* ADE20K stores 0 = "other" and classes from 1 */
            for (size_t p = 0; p < px; p++) lab[p] = lab[p] == 255 ? 0 : (uint8_t)(lab[p] + 1);
            snprintf(path, sizeof path, "%s/images/%s/%s_%08d.jpg", o->out, splits[split],
                     prefixes[split], i + 1);
            rc = sg_jpeg_write_rgb(path, rgb, o->h, o->w, JPEG_QUALITY, NULL, 0);
            snprintf(path, sizeof path, "%s/annotations/%s/%s_%08d.png", o->out, splits[split],
                     prefixes[split], i + 1);
            if (rc == SG_OK) rc = sg_png_write_gray(path, lab, o->h, o->w, NULL, 0);
        }
    }
    free(rgb);
    free(lab);
    return rc;
}
