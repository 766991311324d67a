/* data/dataset.c - see dataset.h: opening a split (options, classes and
 * palette), accessors, and decoding one sample with the label map and label
 * validation. The format's row (data/formats.c) supplies the rules, the
 * index builder (dataset_index*.c) and the classes. */
#include "data/dataset.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/log.h"
#include "data/dataset_internal.h"
#include "data/formats.h"
#include "io/image.h"

/* ---- classes ---- */

/* Names and palette: data.class_names / data.palette when given, else the
 * format's own when the class count is the format's, else generated. */
static sg_status setup_classes(sg_dataset *ds, const sg_format *f, const sg_data_cfg *cfg) {
    int k = ds->num_classes;
    ds->names = calloc((size_t)k, SG_NAME);
    ds->palette = calloc((size_t)k, 3);
    SG_CHECK(ds->names && ds->palette, "out of memory");
    if (cfg->n_class_names > 0 && cfg->n_class_names != k) {
        SG_ERROR("data.class_names has %d names but model.num_classes is %d: give one name per "
                 "class or none",
                 cfg->n_class_names, k);
        return SG_ERR_CONFIG;
    }
    if (cfg->n_palette > 0 && cfg->n_palette != 3 * k) {
        SG_ERROR("data.palette has %d values but model.num_classes is %d: give r,g,b per class "
                 "(%d values) or none",
                 cfg->n_palette, k, 3 * k);
        return SG_ERR_CONFIG;
    }
    /* a format's own names and colours when the class count is the format's */
    int own = f->n_classes > 0 && f->n_classes == k;
    for (int c = 0; c < k; c++) {
        if (cfg->n_class_names > 0) snprintf(ds->names[c], SG_NAME, "%s", cfg->class_names[c]);
        else if (own) snprintf(ds->names[c], SG_NAME, "%s", f->class_names[c]);
        else snprintf(ds->names[c], SG_NAME, "class_%d", c);
        if (cfg->n_palette > 0) {
            for (int j = 0; j < 3; j++) {
                int val = cfg->palette[3 * c + j];
                if (val < 0 || val > 255) {
                    SG_ERROR("data.palette[%d] = %d: colour values must be in 0..255", 3 * c + j,
                             val);
                    return SG_ERR_CONFIG;
                }
                ds->palette[3 * c + j] = (uint8_t)val;
            }
        } else if (own) {
            memcpy(ds->palette + 3 * c, f->palette + 3 * c, 3);
        } else {
            sg_generated_color(c, ds->palette + 3 * c);
        }
    }
    return SG_OK;
}

/* ---- open / accessors ---- */

/* Labels are 8-bit: the class count and ignore_index must fit. */
static sg_status check_label_range(const sg_data_cfg *cfg, int num_classes) {
    if (num_classes < 1 || num_classes > 255) {
        SG_ERROR("model.num_classes = %d: segtrain keeps labels in 8 bits, so 1..255 classes "
                 "(ignore_index excluded)",
                 num_classes);
        return SG_ERR_CONFIG;
    }
    if (cfg->ignore_index < 0 || cfg->ignore_index > 255 || cfg->ignore_index < num_classes) {
        SG_ERROR("data.ignore_index = %d must be in %d..255 (not a class id; labels are 8-bit)",
                 cfg->ignore_index, num_classes);
        return SG_ERR_CONFIG;
    }
    return SG_OK;
}

sg_dataset *sg_dataset_open(const sg_data_cfg *cfg, const char *split, int num_classes) {
    const sg_format *f = sg_format_find(cfg->format);
    if (!f) {
        if (check_label_range(cfg, num_classes) != SG_OK) return NULL;
        /* sg_format_resolve words the message (with the table's names) */
        sg_format_use use;
        sg_format_problem p;
        sg_format_resolve(cfg, &use, &p);
        SG_ERROR("%s = %s", p.key, p.why);
        return NULL;
    }
    return sg_dataset_open_format(f, cfg, split, num_classes);
}

sg_dataset *sg_dataset_open_format(const sg_format *f, const sg_data_cfg *cfg, const char *split,
                                   int num_classes) {
    if (check_label_range(cfg, num_classes) != SG_OK) return NULL;
    /* the format rules, as the configuration's validation applies them */
    sg_format_use use;
    sg_format_problem problem;
    if (sg_format_resolve_row(f, cfg, &use, &problem) != SG_OK) {
        SG_ERROR("%s = %s", problem.key, problem.why);
        return NULL;
    }
    int to_ignore = strcmp(cfg->invalid_labels, "ignore") == 0;
    if (!to_ignore && strcmp(cfg->invalid_labels, "error") != 0) {
        SG_ERROR("data.invalid_labels = '%s': expected error or ignore", cfg->invalid_labels);
        return NULL;
    }
    if (!split || !split[0]) {
        SG_ERROR("no split given (set data.train_split / data.val_split)");
        return NULL;
    }
    if (!cfg->root[0] || !sg_ds_is_dir(cfg->root)) {
        char where[1100] = "", cwd[1024];
        if (cfg->root[0] && cfg->root[0] != '/' && getcwd(cwd, sizeof cwd))
            snprintf(where, sizeof where, " (relative to the working directory %s)", cwd);
        SG_ERROR("data.root '%s' %s%s: set data.root to the dataset directory (or make a "
                 "synthetic one with `segtrain synth --out DIR`)",
                 cfg->root, cfg->root[0] ? "does not exist or is not a directory" : "is empty",
                 where);
        return NULL;
    }
    sg_dataset *ds = calloc(1, sizeof *ds);
    SG_CHECK(ds != NULL, "out of memory");
    snprintf(ds->split, sizeof ds->split, "%s", split);
    ds->num_classes = num_classes;
    ds->ignore_index = cfg->ignore_index;
    ds->invalid_to_ignore = to_ignore;
    /* 0 (a zeroed struct, e.g. in tests) means the default budget */
    ds->max_pixels = cfg->max_image_pixels > 0 ? cfg->max_image_pixels
                                               : SG_IMAGE_MAX_PIXELS_DEFAULT;
    for (int i = 0; i < 256; i++) ds->map[i] = (uint8_t)i;
    sg_status rc = f->open_index(ds, cfg, split, use.use_map);
    if (rc == SG_OK && use.reduce_zero) {
        /* mmsegmentation: 0 -> 255 (ignore), v -> v - 1, and 255 stays
         * 255; then the layout's map (255 -> ignore_index) */
        uint8_t m[256];
        m[0] = (uint8_t)ds->ignore_index;
        for (int v = 1; v < 255; v++) m[v] = ds->map[v - 1];
        m[255] = ds->map[255];
        memcpy(ds->map, m, sizeof m);
        SG_INFO("split '%s': data.reduce_zero_label: label 0 is ignored, labels 1..254 become "
                "0..253",
                split);
    }
    if (rc == SG_OK) rc = setup_classes(ds, f, cfg);
    if (rc != SG_OK) {
        sg_dataset_close(ds);
        return NULL;
    }
    return ds;
}

void sg_dataset_close(sg_dataset *ds) {
    if (!ds) return;
    sg_ds_free_entries(ds->e, ds->n);
    free(ds->names);
    free(ds->palette);
    free(ds);
}

int64_t sg_dataset_size(const sg_dataset *ds) { return ds->n; }
int sg_dataset_num_classes(const sg_dataset *ds) { return ds->num_classes; }
int sg_dataset_ignore_index(const sg_dataset *ds) { return ds->ignore_index; }
const char *sg_dataset_split(const sg_dataset *ds) { return ds->split; }
const char *sg_dataset_image_path(const sg_dataset *ds, int64_t i) {
    return i >= 0 && i < ds->n ? ds->e[i].img : NULL;
}
const char *sg_dataset_mask_path(const sg_dataset *ds, int64_t i) {
    return i >= 0 && i < ds->n ? ds->e[i].mask : NULL;
}
const char *sg_dataset_rel_path(const sg_dataset *ds, int64_t i) {
    return i >= 0 && i < ds->n ? ds->e[i].rel : NULL;
}
const char *sg_dataset_class_name(const sg_dataset *ds, int c) {
    return c >= 0 && c < ds->num_classes ? ds->names[c] : NULL;
}
const uint8_t *sg_dataset_palette(const sg_dataset *ds) { return ds->palette; }
const uint8_t *sg_dataset_label_map(const sg_dataset *ds) { return ds->map; }

/* ---- one sample ---- */

sg_status sg_dataset_load(const sg_dataset *ds, int64_t i, sg_img *image, sg_img *mask, char *err,
                          size_t errlen) {
    memset(image, 0, sizeof *image);
    memset(mask, 0, sizeof *mask);
    if (i < 0 || i >= ds->n) {
        sg_report(err, errlen, "sample index %lld out of range (split '%s' has %lld)", (long long)i,
                  ds->split, (long long)ds->n);
        return SG_ERR_RUNTIME;
    }
    const ds_entry *e = &ds->e[i];
    /* images: PNG or JPEG by content; masks: PNG */
    if (sg_image_read_rgb(e->img, ds->max_pixels, image, err, errlen) != SG_OK)
        return SG_ERR_RUNTIME;
    if (sg_png_read(e->mask, 1, ds->max_pixels, mask, err, errlen) != SG_OK) {
        sg_img_free(image);
        return SG_ERR_RUNTIME;
    }
    if (image->h != mask->h || image->w != mask->w) {
        sg_report(err, errlen,
                  "mask %s is %dx%d (HxW) but its image %s is %dx%d: a mask must match its image "
                  "pixel for pixel",
                  e->mask, mask->h, mask->w, e->img, image->h, image->w);
        sg_img_free(image);
        sg_img_free(mask);
        return SG_ERR_RUNTIME;
    }
    /* Label map, then validation in one pass over the mask. */
    const uint8_t *map = ds->map;
    int k = ds->num_classes, ign = ds->ignore_index;
    size_t npix = (size_t)mask->h * mask->w, bad = 0, first = 0;
    uint8_t *m = mask->data;
    for (size_t p = 0; p < npix; p++) {
        uint8_t v = map[m[p]];
        if (v >= k && v != ign) {
            if (!bad) first = p;
            bad++;
            if (ds->invalid_to_ignore) v = (uint8_t)ign;
        }
        if (!ds->invalid_to_ignore && bad) continue; /* keep raw for the message */
        m[p] = v;
    }
    if (bad && !ds->invalid_to_ignore) {
        sg_report(
            err, errlen,
            "mask %s: %zu pixels have invalid labels, first at (y=%zu, x=%zu): file value %u "
            "-> label %u, neither < num_classes (%d) nor ignore_index (%d). Fix the mask, check "
            "data.label_map, or set data.invalid_labels: ignore",
            e->mask, bad, first / mask->w, first % mask->w, m[first], map[m[first]], k, ign);
        sg_img_free(image);
        sg_img_free(mask);
        return SG_ERR_RUNTIME;
    }
    return SG_OK;
}
