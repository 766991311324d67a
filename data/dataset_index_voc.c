/* data/dataset_index_voc.c - the sorted index of a Pascal VOC 2012 split
 * (ImageSets/Segmentation/<split>.txt, JPEGImages/, SegmentationClass/ with
 * SegmentationClassAug/ as fallback) and of an ADE20K split
 * (images/<split>/, annotations/<split>/), each checking up front that every
 * image and mask exists. Both store class indices, 255 = ignore ("border" in
 * VOC); ADE20K's 0 = "other" is handled by data.reduce_zero_label
 * (dataset.c). */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/log.h"
#include "data/dataset_internal.h"
#include "data/list_file.h"

#define VOC_LIST_DIR "ImageSets/Segmentation"
#define MAX_SPLIT_PARTS 16

/* Appends "\n    text" to an examples buffer while there is room for more. */
static void add_example(char *buf, size_t cap, int *n_ex, const char *text) {
    if (*n_ex >= MAX_EXAMPLES) return;
    size_t l = strlen(buf);
    snprintf(buf + l, cap - l, "\n    %s", text);
    (*n_ex)++;
}

/* Reads one ImageSets/Segmentation/<part>.txt into v (entries tagged with the
 * part's number). 0, or -1 after logging. */
static sg_status read_voc_list(const sg_data_cfg *cfg, const char *part, int part_no, ds_vec *v) {
    char rel[SG_STR + 64];
    snprintf(rel, sizeof rel, "%s/%s.txt", VOC_LIST_DIR, part);
    char *list = sg_ds_join(cfg->root, rel);
    char hint[3 * SG_STR + 256];
    snprintf(hint, sizeof hint,
             "data.format voc: split '%s' names <root>/%s/%s.txt; VOC2012 has train and val, and "
             "train+aug with SegmentationClassAug; data.root is the VOC2012 directory",
             part, VOC_LIST_DIR, part);
    sg_list_file lf;
    if (sg_list_open(&lf, list, "the VOC split file", hint) != SG_OK) {
        free(list);
        return SG_ERR_RUNTIME;
    }
    sg_status rc = SG_OK;
    int64_t before = v->n;
    int got;
    while ((got = sg_list_next(&lf)) > 0) {
        if (lf.n_fields != 1 || strchr(lf.field[0], '/')) {
            SG_ERROR("%s:%d: expected one image name per line (e.g. 2007_000032), got '%s%s%s' "
                     "(is this a Segmentation split file?)",
                     list, lf.lineno, lf.field[0], lf.n_fields > 1 ? " " : "",
                     lf.n_fields > 1 ? lf.field[1] : "");
            rc = SG_ERR_RUNTIME;
            break;
        }
        ds_entry *e = sg_ds_vec_push(v);
        size_t n = strlen(lf.field[0]) + 32;
        e->rel = malloc(n);
        SG_CHECK(e->rel != NULL, "out of memory");
        snprintf(e->rel, n, "JPEGImages/%s.jpg", lf.field[0]);
        e->line = lf.lineno;
        e->part = part_no;
    }
    if (got < 0) rc = SG_ERR_RUNTIME;
    sg_list_close(&lf);
    if (rc == SG_OK && v->n == before) {
        SG_ERROR("VOC split file %s lists no images", list);
        rc = SG_ERR_RUNTIME;
    }
    free(list);
    return rc;
}

/* "JPEGImages/<stem>.jpg" -> <root>/<dir>/<stem>.png */
static char *voc_mask(const char *root, const char *rel, const char *dir) {
    const char *stem = rel + strlen("JPEGImages/");
    int stem_len = (int)(strlen(stem) - strlen(".jpg"));
    size_t n = strlen(root) + strlen(dir) + strlen(stem) + 16;
    char *p = malloc(n);
    SG_CHECK(p != NULL, "out of memory");
    snprintf(p, n, "%s/%s/%.*s.png", root, dir, stem_len, stem);
    return p;
}

sg_status sg_ds_open_voc(sg_dataset *ds, const sg_data_cfg *cfg, const char *split, int use_map) {
    (void)use_map; /* VOC masks hold class indices: the format rules refuse a map */
    char *jpeg_dir = sg_ds_join(cfg->root, "JPEGImages");
    int ok = sg_ds_is_dir(jpeg_dir);
    free(jpeg_dir);
    if (!ok) {
        SG_ERROR("data.root %s has no JPEGImages/: data.format voc expects the VOC2012 "
                 "directory (VOCdevkit/VOC2012, holding JPEGImages/, SegmentationClass/ and "
                 "ImageSets/Segmentation/)",
                 cfg->root);
        return SG_ERR_RUNTIME;
    }
    /* "train+aug": the union of several split files (the 10,582-image
     * VOC12aug recipe is train + aug). */
    char parts[SG_STR];
    snprintf(parts, sizeof parts, "%s", split);
    ds_vec v = {0};
    int n_parts = 0;
    sg_status rc = SG_OK;
    for (char *save = NULL, *p = strtok_r(parts, "+", &save); p && rc == SG_OK;
         p = strtok_r(NULL, "+", &save)) {
        if (++n_parts > MAX_SPLIT_PARTS) {
            SG_ERROR("VOC split '%s' joins more than %d split files", split, MAX_SPLIT_PARTS);
            rc = SG_ERR_RUNTIME;
            break;
        }
        rc = read_voc_list(cfg, p, n_parts, &v);
    }
    if (rc == SG_OK && n_parts == 0) {
        SG_ERROR("VOC split '%s' names no split file (e.g. train, val, train+aug)", split);
        rc = SG_ERR_RUNTIME;
    }
    if (rc != SG_OK) {
        sg_ds_free_entries(v.e, v.n);
        return SG_ERR_RUNTIME;
    }
    qsort(v.e, (size_t)v.n, sizeof(ds_entry), sg_ds_cmp_rel);
    /* A name twice in one file is a mistake; in two files of a union (train
     * and aug overlap in some distributions) it is counted once. */
    int64_t w = 0, dropped = 0;
    for (int64_t i = 0; i < v.n; i++) {
        if (w > 0 && strcmp(v.e[i].rel, v.e[w - 1].rel) == 0) {
            if (v.e[i].part == v.e[w - 1].part) {
                SG_ERROR("VOC split '%s': image %s is listed twice in the same split file "
                         "(lines %d and %d); each image must appear once",
                         split, v.e[i].rel, v.e[w - 1].line, v.e[i].line);
                /* kept entries are [0, w); untouched ones [i, n); the slots
                 * between were moved or freed */
                for (int64_t j = i; j < v.n; j++) free(v.e[j].rel);
                sg_ds_free_entries(v.e, w);
                return SG_ERR_RUNTIME;
            }
            free(v.e[i].rel);
            dropped++;
            continue;
        }
        v.e[w++] = v.e[i];
    }
    v.n = w;
    int64_t miss_img = 0, miss_mask = 0, from_aug = 0;
    char examples[MAX_EXAMPLES * 2 * 700] = "";
    int n_ex = 0;
    for (int64_t i = 0; i < v.n; i++) {
        ds_entry *e = &v.e[i];
        e->img = sg_ds_join(cfg->root, e->rel);
        e->mask = voc_mask(cfg->root, e->rel, "SegmentationClass");
        if (!sg_ds_is_file(e->mask)) {
            char *aug = voc_mask(cfg->root, e->rel, "SegmentationClassAug");
            if (sg_ds_is_file(aug)) {
                free(e->mask);
                e->mask = aug;
                from_aug++;
            } else {
                char ex[1400];
                snprintf(ex, sizeof ex, "%s (nor in SegmentationClassAug/)", e->mask);
                add_example(examples, sizeof examples, &n_ex, ex);
                free(aug);
                miss_mask++;
            }
        }
        if (!sg_ds_is_file(e->img)) {
            add_example(examples, sizeof examples, &n_ex, e->img);
            miss_img++;
        }
    }
    if (miss_img || miss_mask) {
        SG_ERROR("VOC split '%s' of %s: %lld of %lld images and %lld masks are missing, e.g.:%s\n"
                 "  Images are JPEGImages/<name>.jpg, masks SegmentationClass/<name>.png or "
                 "SegmentationClassAug/<name>.png under data.root.",
                 split, cfg->root, (long long)miss_img, (long long)v.n, (long long)miss_mask,
                 examples);
        sg_ds_free_entries(v.e, v.n);
        return SG_ERR_RUNTIME;
    }
    /* 255 marks object borders and difficult regions: ignored */
    ds->map[255] = (uint8_t)ds->ignore_index;
    SG_INFO("split '%s': %lld VOC images (%lld masks from SegmentationClassAug%s)", split,
            (long long)v.n, (long long)from_aug,
            dropped ? ", duplicates across split files "
                      "counted once"
                    : "");
    ds->e = v.e;
    ds->n = v.n;
    return SG_OK;
}

/* ---- ADE20K ---- */

static int image_name(const char *name) {
    const char *dot = strrchr(name, '.');
    return name[0] != '.' && dot &&
           (!strcasecmp(dot, ".jpg") || !strcasecmp(dot, ".jpeg") || !strcasecmp(dot, ".png"));
}

sg_status sg_ds_open_ade20k(sg_dataset *ds, const sg_data_cfg *cfg, const char *split,
                            int use_map) {
    (void)use_map; /* ADE20K masks hold class indices: the format rules refuse a map */
    char rel_dir[SG_STR + 16];
    snprintf(rel_dir, sizeof rel_dir, "images/%s", split);
    char *dir = sg_ds_join(cfg->root, rel_dir);
    DIR *d = opendir(dir);
    if (!d) {
        SG_ERROR("ADE20K split directory %s: %s (data.root = %s, split '%s'): an ADE20K root "
                 "(ADEChallengeData2016) holds images/<split>/ and annotations/<split>/, with "
                 "splits named training and validation",
                 dir, strerror(errno), cfg->root, split);
        free(dir);
        return SG_ERR_RUNTIME;
    }
    ds_vec v = {0};
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        if (!image_name(de->d_name)) continue;
        ds_entry *e = sg_ds_vec_push(&v);
        e->rel = sg_ds_join(rel_dir, de->d_name);
    }
    closedir(d);
    if (v.n == 0) {
        SG_ERROR("ADE20K split '%s' is empty: no *.jpg under %s (check data.root and the split "
                 "name: training or validation)",
                 split, dir);
        free(dir);
        sg_ds_free_entries(v.e, v.n);
        return SG_ERR_RUNTIME;
    }
    free(dir);
    qsort(v.e, (size_t)v.n, sizeof(ds_entry), sg_ds_cmp_rel);
    int64_t missing = 0;
    char examples[MAX_EXAMPLES * 700] = "";
    int n_ex = 0;
    for (int64_t i = 0; i < v.n; i++) {
        ds_entry *e = &v.e[i];
        e->img = sg_ds_join(cfg->root, e->rel);
        const char *name = e->rel + strlen(rel_dir) + 1;
        int stem_len = (int)(strrchr(name, '.') - name);
        size_t n = strlen(cfg->root) + strlen(split) + strlen(name) + 32;
        e->mask = malloc(n);
        SG_CHECK(e->mask != NULL, "out of memory");
        snprintf(e->mask, n, "%s/annotations/%s/%.*s.png", cfg->root, split, stem_len, name);
        if (!sg_ds_is_file(e->mask)) {
            add_example(examples, sizeof examples, &n_ex, e->mask);
            missing++;
        }
    }
    if (missing) {
        SG_ERROR("ADE20K split '%s' of %s: %lld of %lld images have no annotation, e.g.:%s\n"
                 "  Each images/<split>/<name>.jpg needs annotations/<split>/<name>.png.",
                 split, cfg->root, (long long)missing, (long long)v.n, examples);
        sg_ds_free_entries(v.e, v.n);
        return SG_ERR_RUNTIME;
    }
    ds->map[255] = (uint8_t)ds->ignore_index;
    SG_INFO("split '%s': %lld ADE20K images", split, (long long)v.n);
    ds->e = v.e;
    ds->n = v.n;
    return SG_OK;
}
