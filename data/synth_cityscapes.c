/* data/synth_cityscapes.c - the synthetic dataset in the Cityscapes layout
 * (synth.h): leftImg8bit PNGs and gtFine's labelIds, instanceIds, color and
 * polygons.json. The format table's cityscapes row points at
 * sg_synth_write_cityscapes. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "data/dataset.h"
#include "data/synth_internal.h"

/* ---- gtFine: instanceIds, color, polygons ---- */

/* Cityscapes' name of a labelId the renderer uses (labels.py), and whether
 * the class has instances; NULL for "unlabeled" (0). */
static const char *label_name(const uint8_t to_train[256], int label_id, int *has_instances) {
    *has_instances = 0;
    if (label_id == SG_SYNTH_LID_EGO) return "ego vehicle";
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

/* One JSON object per rectangle; SG_OK, or SG_ERR_RUNTIME when the write
 * fails (write_polygons names the file). */
static sg_status emit_rect(FILE *f, const uint8_t to_train[256], int *first, const rect_run *r,
                           int y1) {
    int inst;
    const char *name = label_name(to_train, r->v, &inst);
    if (!name) return SG_OK; /* unlabeled: json2labelImg's background */
    int n = fprintf(f,
                    "%s\n    {\"label\": \"%s%s\", \"polygon\": [[%d, %d], [%d, %d], [%d, %d], "
                    "[%d, %d]]}",
                    *first ? "" : ",", name, inst ? "group" : "", r->x0, r->y0, r->x1, r->y0, r->x1,
                    y1, r->x0, y1);
    *first = 0;
    return n < 0 ? SG_ERR_RUNTIME : SG_OK;
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
            if (!prev[j].continued) bad |= emit_rect(f, to_train, &first, &prev[j], y - 1) != SG_OK;
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

/* Writes one image's gtFine files: <prefix>labelIds.png, instanceIds.png,
 * color.png and polygons.json (prefix = ".../<name>_gtFine_"). */
static sg_status write_gtfine(const char *prefix, const uint8_t *lid, const uint16_t *inst, int h,
                              int w) {
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

/* ---- the layout ---- */

static const char *const k_split_names[2] = {"train", "val"};

sg_status sg_synth_write_cityscapes(const sg_synth_opts *o) {
    static const char *const tops[2] = {"leftImg8bit", "gtFine"};
    if (sg_synth_check_new(o->out, tops, 2) != SG_OK) return SG_ERR_RUNTIME;
    char path[4096];
    size_t px = (size_t)o->h * o->w;
    uint8_t *rgb = malloc(px * 3), *lid = malloc(px);
    uint16_t *inst = malloc(px * sizeof *inst);
    if (!rgb || !lid || !inst) {
        free(rgb);
        free(lid);
        free(inst);
        SG_ERROR("synth: out of memory for a %dx%d image", o->h, o->w);
        return SG_ERR_RUNTIME;
    }
    sg_status rc = SG_OK;
    for (int split = 0; split < 2 && rc == SG_OK; split++) {
        int n = split ? o->n_val : o->n_train;
        for (int i = 0; i < n && rc == SG_OK; i++) {
            /* Two cities per split, so the index walks several directories. */
            char city[32];
            snprintf(city, sizeof city, "synth%c", 'a' + 2 * split + i % 2);
            for (int kind = 0; kind < 2 && rc == SG_OK; kind++) {
                snprintf(path, sizeof path, "%s/%s/%s/%s", o->out, tops[kind], k_split_names[split],
                         city);
                rc = sg_synth_mkdir(path);
            }
            if (rc) break;
            sg_synth_render_instances(o, split, i, rgb, lid, inst);
            snprintf(path, sizeof path, "%s/leftImg8bit/%s/%s/%s_000000_%06d_leftImg8bit.png",
                     o->out, k_split_names[split], city, city, i);
            if (sg_png_write_rgb(path, rgb, o->h, o->w, NULL, 0) != SG_OK) rc = SG_ERR_RUNTIME;
            /* <out>/gtFine/<split>/<city>/<city>_000000_<i>_gtFine_ */
            snprintf(path, sizeof path, "%s/gtFine/%s/%s/%s_000000_%06d_gtFine_", o->out,
                     k_split_names[split], city, city, i);
            if (rc == SG_OK) rc = write_gtfine(path, lid, inst, o->h, o->w);
        }
    }
    free(rgb);
    free(lid);
    free(inst);
    return rc;
}
