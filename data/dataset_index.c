/* data/dataset_index.c - builds a split's sorted index: the Cityscapes
 * directory walk (labelTrainIds or labelIds masks) and the list format's
 * "image mask" lines (read by list_file.h), each checking up front that
 * every mask exists; and the small helpers every
 * index builder shares (dataset_internal.h). VOC and ADE20K are in
 * dataset_index_voc.c. */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/log.h"
#include "data/dataset_internal.h"
#include "data/list_file.h"

/* ---- small helpers ---- */

char *sg_ds_strdup(const char *s) {
    char *d = strdup(s);
    SG_CHECK(d != NULL, "out of memory");
    return d;
}

char *sg_ds_join(const char *a, const char *b) {
    size_t n = strlen(a) + strlen(b) + 2;
    char *p = malloc(n);
    SG_CHECK(p != NULL, "out of memory");
    if (a[0] == 0 || b[0] == '/') snprintf(p, n, "%s", b);
    else snprintf(p, n, "%s/%s", a, b);
    return p;
}

int sg_ds_is_file(const char *p) {
    struct stat st;
    return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}
int sg_ds_is_dir(const char *p) {
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

int sg_ds_ends_with(const char *s, const char *suf) {
    size_t n = strlen(s), m = strlen(suf);
    return n >= m && strcmp(s + n - m, suf) == 0;
}

ds_entry *sg_ds_vec_push(ds_vec *v) {
    if (v->n == v->cap) {
        v->cap = v->cap ? v->cap * 2 : 64;
        v->e = realloc(v->e, sizeof(ds_entry) * (size_t)v->cap);
        SG_CHECK(v->e != NULL, "out of memory");
    }
    memset(&v->e[v->n], 0, sizeof(ds_entry));
    return &v->e[v->n++];
}

void sg_ds_free_entries(ds_entry *e, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        free(e[i].rel);
        free(e[i].img);
        free(e[i].mask);
    }
    free(e);
}

int sg_ds_cmp_rel(const void *a, const void *b) {
    return strcmp(((const ds_entry *)a)->rel, ((const ds_entry *)b)->rel);
}

/* ---- cityscapes ---- */

/* Collects every <name>_leftImg8bit.png below dir, as paths relative to root. */
static sg_status walk(const char *root, const char *rel_dir, ds_vec *v) {
    char *dir = sg_ds_join(root, rel_dir);
    DIR *d = opendir(dir);
    if (!d) {
        SG_ERROR("cannot read directory %s: %s", dir, strerror(errno));
        free(dir);
        return SG_ERR_RUNTIME;
    }
    /* readdir order is file-system dependent; the index is sorted later. */
    struct dirent *de;
    sg_status rc = SG_OK;
    while (rc == SG_OK && (de = readdir(d)) != NULL) {
        if (de->d_name[0] == '.') continue;
        char *rel = sg_ds_join(rel_dir, de->d_name);
        char *full = sg_ds_join(root, rel);
        if (sg_ds_is_dir(full)) {
            rc = walk(root, rel, v);
        } else if (sg_ds_ends_with(de->d_name, "_leftImg8bit.png")) {
            ds_entry *e = sg_ds_vec_push(v);
            e->rel = rel;
            rel = NULL;
        }
        free(rel);
        free(full);
    }
    closedir(d);
    free(dir);
    return rc;
}

/* leftImg8bit/<split>/<city>/<name>_leftImg8bit.png ->
 * <root>/gtFine/<split>/<city>/<name>_gtFine_<kind>.png */
static char *cityscapes_mask(const char *root, const char *rel, const char *kind) {
    const char *tail = rel + strlen("leftImg8bit/");
    size_t stem = strlen(tail) - strlen("_leftImg8bit.png");
    size_t n = strlen(root) + strlen(tail) + strlen(kind) + 32;
    char *p = malloc(n);
    SG_CHECK(p != NULL, "out of memory");
    snprintf(p, n, "%s/gtFine/%.*s_gtFine_%s.png", root, (int)stem, tail, kind);
    return p;
}

sg_status sg_ds_open_cityscapes(sg_dataset *ds, const sg_data_cfg *cfg, const char *split,
                                int use_map) {
    char *rel_dir = sg_ds_join("leftImg8bit", split);
    char *dir = sg_ds_join(cfg->root, rel_dir);
    if (!sg_ds_is_dir(dir)) {
        SG_ERROR("split directory %s not found (data.root = %s, split '%s'): a Cityscapes root "
                 "holds leftImg8bit/<split>/<city>/; check data.root and data.train_split / "
                 "data.val_split",
                 dir, cfg->root, split);
        free(rel_dir);
        free(dir);
        return SG_ERR_RUNTIME;
    }
    ds_vec v = {0};
    int rc = walk(cfg->root, rel_dir, &v);
    free(rel_dir);
    if (rc != SG_OK || v.n == 0) {
        if (rc == SG_OK)
            SG_ERROR("split '%s' is empty: no *_leftImg8bit.png under %s (check data.root and "
                     "the split name)",
                     split, dir);
        sg_ds_free_entries(v.e, v.n);
        free(dir);
        return SG_ERR_RUNTIME;
    }
    free(dir);
    qsort(v.e, (size_t)v.n, sizeof(ds_entry), sg_ds_cmp_rel);

    /* labelTrainIds when every image has one, else labelIds (all needed). */
    int64_t no_train = 0;
    for (int64_t i = 0; i < v.n; i++) {
        v.e[i].img = sg_ds_join(cfg->root, v.e[i].rel);
        v.e[i].mask = cityscapes_mask(cfg->root, v.e[i].rel, "labelTrainIds");
        if (!sg_ds_is_file(v.e[i].mask)) no_train++;
    }
    int use_label_ids = no_train > 0;
    if (use_label_ids) {
        int64_t missing = 0;
        char examples[MAX_EXAMPLES * 600] = "";
        for (int64_t i = 0; i < v.n; i++) {
            free(v.e[i].mask);
            v.e[i].mask = cityscapes_mask(cfg->root, v.e[i].rel, "labelIds");
            if (!sg_ds_is_file(v.e[i].mask)) {
                if (missing < MAX_EXAMPLES) {
                    size_t l = strlen(examples);
                    snprintf(examples + l, sizeof examples - l, "\n    %s", v.e[i].mask);
                }
                missing++;
            }
        }
        if (missing) {
            SG_ERROR("split '%s' of %s: %lld of %lld images have no mask (%lld lack "
                     "_gtFine_labelTrainIds.png, so labelIds are used, and %lld lack "
                     "_gtFine_labelIds.png); missing, e.g.:%s\n  Put the gtFine masks next to "
                     "leftImg8bit (same split/city/name) or fix data.root.",
                     split, cfg->root, (long long)missing, (long long)v.n, (long long)no_train,
                     (long long)missing, examples);
            sg_ds_free_entries(v.e, v.n);
            return SG_ERR_RUNTIME;
        }
        if (use_map) {
            sg_cityscapes_label_map(ds->map, (uint8_t)ds->ignore_index);
            SG_INFO("split '%s': %lld images, labelIds masks mapped to trainIds", split,
                    (long long)v.n);
        } else {
            SG_INFO("split '%s': %lld images, raw labelIds masks (data.label_map: none)", split,
                    (long long)v.n);
        }
    } else {
        /* labelTrainIds mark "ignore" with 255. */
        ds->map[255] = (uint8_t)ds->ignore_index;
        SG_INFO("split '%s': %lld images, labelTrainIds masks", split, (long long)v.n);
    }
    ds->e = v.e;
    ds->n = v.n;
    return SG_OK;
}

/* ---- list files ---- */

sg_status sg_ds_open_list(sg_dataset *ds, const sg_data_cfg *cfg, const char *split, int use_map) {
    char *list = sg_ds_join(cfg->root, split);
    sg_list_file lf;
    if (sg_list_open(&lf, list, "list file",
                     "the split names a file of 'image mask' lines, absolute or relative to "
                     "data.root") != SG_OK) {
        free(list);
        return SG_ERR_RUNTIME;
    }
    ds_vec v = {0};
    sg_status rc = SG_OK;
    int got;
    while ((got = sg_list_next(&lf)) > 0) {
        if (lf.field[0][0] == '#') continue; /* a comment */
        if (lf.n_fields != 2) {
            SG_ERROR("%s:%d: expected 'image_path mask_path' (2 fields separated by spaces), got "
                     "%d field%s (paths cannot contain spaces)",
                     list, lf.lineno, lf.n_fields, lf.n_fields == 1 ? "" : "s");
            rc = SG_ERR_RUNTIME;
            break;
        }
        ds_entry *e = sg_ds_vec_push(&v);
        e->rel = sg_ds_strdup(lf.field[0]);
        e->img = sg_ds_join(cfg->root, lf.field[0]);
        e->mask = sg_ds_join(cfg->root, lf.field[1]);
        e->line = lf.lineno;
    }
    if (got < 0) rc = SG_ERR_RUNTIME;
    sg_list_close(&lf);
    if (rc == SG_OK && v.n == 0) {
        SG_ERROR("split '%s' is empty: list file %s has no 'image mask' lines", split, list);
        rc = SG_ERR_RUNTIME;
    }
    if (rc == SG_OK) {
        qsort(v.e, (size_t)v.n, sizeof(ds_entry), sg_ds_cmp_rel);
        for (int64_t i = 1; i < v.n; i++) {
            if (strcmp(v.e[i].rel, v.e[i - 1].rel) == 0) {
                SG_ERROR("%s: image %s is listed twice (lines %d and %d); each sample must "
                         "appear once",
                         list, v.e[i].rel,
                         v.e[i - 1].line < v.e[i].line ? v.e[i - 1].line : v.e[i].line,
                         v.e[i - 1].line < v.e[i].line ? v.e[i].line : v.e[i - 1].line);
                rc = SG_ERR_RUNTIME;
                break;
            }
        }
    }
    if (rc == SG_OK) {
        int64_t miss_img = 0, miss_mask = 0;
        char examples[MAX_EXAMPLES * 2 * 700] = "";
        int n_ex = 0;
        for (int64_t i = 0; i < v.n; i++) {
            int mi = !sg_ds_is_file(v.e[i].img), mm = !sg_ds_is_file(v.e[i].mask);
            miss_img += mi;
            miss_mask += mm;
            if ((mi || mm) && n_ex < MAX_EXAMPLES) {
                size_t l = strlen(examples);
                snprintf(examples + l, sizeof examples - l, "\n    %s:%d: %s%s%s", list,
                         v.e[i].line, mi ? v.e[i].img : "", mi && mm ? " and " : "",
                         mm ? v.e[i].mask : "");
                n_ex++;
            }
        }
        if (miss_img || miss_mask) {
            SG_ERROR("split '%s' (%s): %lld of %lld images and %lld of %lld masks are missing, "
                     "e.g.:%s\n  Paths in the list are relative to data.root (%s).",
                     split, list, (long long)miss_img, (long long)v.n, (long long)miss_mask,
                     (long long)v.n, examples, cfg->root);
            rc = SG_ERR_RUNTIME;
        }
    }
    free(list);
    if (rc != SG_OK) {
        sg_ds_free_entries(v.e, v.n);
        return SG_ERR_RUNTIME;
    }
    if (use_map) sg_cityscapes_label_map(ds->map, (uint8_t)ds->ignore_index);
    SG_INFO("split '%s': %lld images from list file%s", split, (long long)v.n,
            use_map ? ", Cityscapes labelIds mapped to trainIds" : "");
    ds->e = v.e;
    ds->n = v.n;
    return SG_OK;
}
