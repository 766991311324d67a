/* data/formats.c - THE table of dataset formats and the format rules (see
 * formats.h). Owns the rows; the index builders, class tables and synth
 * writers they point at live in their own files, none of which calls back
 * here. */
#include "data/formats.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "data/class_tables.h"
#include "data/dataset_internal.h"
#include "data/synth_internal.h"

/* data.format's values, in the order of core/config_schema.c's allowed
 * values (tests/data/test_formats.c compares them). The synth-capable rows,
 * in this order, are sg_synth_layout 0, 1, 2 (data/synth.h). */
static const sg_format k_formats[] = {
    {"cityscapes",
     sg_ds_open_cityscapes,
     SG_CITYSCAPES_CLASSES,
     sg_cityscapes_names,
     sg_cityscapes_colors,
     SG_LABELS_CITYSCAPES_IDS,
     "cityscapes",
     0,
     sg_synth_write_cityscapes,
     {"train", "val"}},
    {"list", sg_ds_open_list, 0, NULL, NULL, SG_LABELS_AS_LISTED, "none", 0, NULL, {NULL, NULL}},
    /* "train+aug": synth puts half its training images in aug.txt (SBD's role) */
    {"voc",
     sg_ds_open_voc,
     SG_VOC_CLASSES,
     sg_voc_names,
     sg_voc_colors,
     SG_LABELS_CLASS_INDICES,
     "none",
     0,
     sg_synth_write_voc,
     {"train+aug", "val"}},
    /* ADE20K stores 0 = "other" and classes from 1: reduce_zero_label by default */
    {"ade20k",
     sg_ds_open_ade20k,
     SG_ADE20K_CLASSES,
     sg_ade20k_names,
     sg_ade20k_colors,
     SG_LABELS_CLASS_INDICES,
     "none",
     1,
     sg_synth_write_ade20k,
     {"training", "validation"}},
};
#define N_FORMATS ((int)(sizeof k_formats / sizeof k_formats[0]))

int sg_format_count(void) { return N_FORMATS; }

const sg_format *sg_format_at(int i) { return i >= 0 && i < N_FORMATS ? &k_formats[i] : NULL; }

const sg_format *sg_format_find(const char *name) {
    for (int i = 0; name && i < N_FORMATS; i++)
        if (!strcmp(k_formats[i].name, name)) return &k_formats[i];
    return NULL;
}

const char *sg_format_names(char *buf, size_t n, int synth_only, const char *sep,
                            const char *last) {
    int total = 0, k = 0;
    for (int i = 0; i < N_FORMATS; i++) total += !synth_only || k_formats[i].synth_write;
    size_t used = 0;
    if (n) buf[0] = 0;
    for (int i = 0; i < N_FORMATS && used < n; i++) {
        if (synth_only && !k_formats[i].synth_write) continue;
        const char *s = k == 0 ? "" : k == total - 1 ? last : sep;
        int w = snprintf(buf + used, n - used, "%s%s", s, k_formats[i].name);
        if (w < 0) break;
        used += (size_t)w;
        k++;
    }
    return buf;
}

/* ---- the classes of a format ---- */

/* The row's own classes apply only when the class count is the row's: a
 * 19-class model on a VOC tree has no VOC names. */
static const sg_format *own_classes(const char *format, int num_classes, int c) {
    const sg_format *f = sg_format_find(format);
    if (!f || !f->n_classes || f->n_classes != num_classes || c < 0 || c >= num_classes)
        return NULL;
    return f;
}

const char *sg_layout_class_name(const char *format, int num_classes, int c) {
    const sg_format *f = own_classes(format, num_classes, c);
    return f ? f->class_names[c] : NULL;
}

int sg_layout_color(const char *format, int num_classes, int c, uint8_t rgb[3]) {
    const sg_format *f = own_classes(format, num_classes, c);
    if (!f) return 0;
    memcpy(rgb, f->palette + 3 * c, 3);
    return 1;
}

/* ---- the format rules ---- */

static sg_status broken(sg_format_problem *p, const char *key, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static sg_status broken(sg_format_problem *p, const char *key, const char *fmt, ...) {
    p->key = key;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(p->why, sizeof p->why, fmt, ap);
    va_end(ap);
    return SG_ERR_CONFIG;
}

sg_status sg_format_resolve_row(const sg_format *f, const sg_data_cfg *d, sg_format_use *use,
                                sg_format_problem *problem) {
    memset(use, 0, sizeof *use);
    use->format = f;
    /* empty = auto: a zeroed sg_data_cfg (tests, tools) gets the row's map */
    const char *lm = d->label_map;
    int lm_auto = !lm[0] || !strcmp(lm, "auto");
    use->use_map = lm_auto ? !strcmp(f->label_map, "cityscapes") : !strcmp(lm, "cityscapes");
    if (!lm_auto && !use->use_map && strcmp(lm, "none") != 0)
        return broken(problem, "data.label_map", "'%s': expected auto, cityscapes or none", lm);
    /* masks of class indices: a Cityscapes labelId map (this key's default)
     * would scramble them */
    if (use->use_map && f->labels == SG_LABELS_CLASS_INDICES)
        return broken(problem, "data.label_map",
                      "cityscapes maps Cityscapes labelIds, but data.format %s stores class "
                      "indices: set data.label_map: %s",
                      f->name, f->label_map);
    /* empty = auto: a zeroed sg_data_cfg (tests, tools) gets the row's default */
    const char *rz = d->reduce_zero_label;
    if (!rz[0] || !strcmp(rz, "auto")) use->reduce_zero = f->reduce_zero_label;
    else if (!strcmp(rz, "true")) use->reduce_zero = 1;
    else if (!strcmp(rz, "false")) use->reduce_zero = 0;
    else return broken(problem, "data.reduce_zero_label", "'%s': expected auto, true or false", rz);
    if (use->reduce_zero && use->use_map) {
        char value[128];
        if (!strcmp(rz, "true")) snprintf(value, sizeof value, "true");
        else snprintf(value, sizeof value, "auto (true for data.format %s)", f->name);
        return broken(problem, "data.reduce_zero_label",
                      "%s does not combine with data.label_map: cityscapes (labelId 0 is "
                      "already 'unlabeled'): set one of them to none/false",
                      value);
    }
    return SG_OK;
}

sg_status sg_format_resolve(const sg_data_cfg *d, sg_format_use *use, sg_format_problem *problem) {
    const sg_format *f = sg_format_find(d->format);
    if (!f) {
        char names[256];
        memset(use, 0, sizeof *use);
        return broken(problem, "data.format", "'%s': expected %s", d->format,
                      sg_format_names(names, sizeof names, 0, ", ", " or "));
    }
    return sg_format_resolve_row(f, d, use, problem);
}

const char *sg_format_split(const sg_data_cfg *d, int val) {
    const char *s = val ? d->val_split : d->train_split;
    if (strcmp(s, "auto") != 0) return s;
    const sg_format *f = sg_format_find(d->format);
    return f ? f->synth_splits[val ? 1 : 0] : NULL;
}

/* A split of a format whose splits are names (not list files) given as a
 * path or a file name ("ImageSets/Segmentation/train.txt"): refused here,
 * at validation, rather than when the index is built. */
static sg_status split_check(const sg_config *cfg, const sg_format *f, const char *key,
                             const char *split) {
    if (!strcmp(split, "auto")) {
        if (f->synth_splits[0] && f->synth_splits[1]) return SG_OK;
        return sg_config_reject(cfg, key,
                                "auto: data.format %s has no split names; set it to a list file "
                                "relative to data.root (e.g. train.txt, val.txt)",
                                f->name);
    }
    if (f->open_index == sg_ds_open_list) return SG_OK; /* list: a file, relative to root */
    size_t n = strlen(split);
    if (!strchr(split, '/') && !(n > 4 && !strcmp(split + n - 4, ".txt"))) return SG_OK;
    return sg_config_reject(cfg, key,
                            "'%s' is a path, but data.format %s takes a split name (e.g. %s, %s): "
                            "the format knows where a split's files are under data.root",
                            split, f->name, f->synth_splits[0] ? f->synth_splits[0] : "train",
                            f->synth_splits[1] ? f->synth_splits[1] : "val");
}

/* The rules as a configuration rule: the same check, reported by core so
 * that the message names the key's file and line (or --set, or default);
 * then what only the row knows about the splits. */
sg_status sg_format_config_check(const sg_config *cfg) {
    sg_format_use use;
    sg_format_problem p;
    if (sg_format_resolve(&cfg->data, &use, &p) != SG_OK)
        return sg_config_reject(cfg, p.key, "%s", p.why);
    sg_status rc = SG_OK;
    if (split_check(cfg, use.format, "data.train_split", cfg->data.train_split) != SG_OK)
        rc = SG_ERR_CONFIG;
    if (split_check(cfg, use.format, "data.val_split", cfg->data.val_split) != SG_OK)
        rc = SG_ERR_CONFIG;
    return rc;
}

const sg_config_rule sg_format_config_rules[] = {
    {"data/formats.c: the dataset format rules", sg_format_config_check},
    {NULL, NULL},
};
