/* data/dataset_internal.h - what the dataset's files share: the index entry,
 * the dataset struct, and the index builders (dataset_index.c,
 * dataset_index_voc.c) that the format table (data/formats.c) names. Not a
 * public header. */
#ifndef SG_DATA_DATASET_INTERNAL_H
#define SG_DATA_DATASET_INTERNAL_H

#include <stdint.h>

#include "core/config.h"
#include "core/status.h"
#include "data/dataset.h"
#include "data/formats.h"

#define MAX_EXAMPLES 3

typedef struct ds_entry {
    char *rel; /* image path relative to root: the sort key */
    char *img; /* full paths */
    char *mask;
    int line; /* list format: line in the list file */
    int part; /* voc: which split file of a "train+aug" union (1-based) */
} ds_entry;

struct sg_dataset {
    char split[SG_STR];
    int64_t n;
    ds_entry *e;
    int num_classes, ignore_index, invalid_to_ignore;
    int64_t max_pixels; /* data.max_image_pixels */
    uint8_t map[256];
    char (*names)[SG_NAME];
    uint8_t *palette;
};

/* A growing array of index entries. */
typedef struct ds_vec {
    ds_entry *e;
    int64_t n, cap;
} ds_vec;

/* Helpers every index builder shares (dataset_index.c); allocation failures
 * are fatal (SG_CHECK). */
int sg_ds_is_dir(const char *p);
int sg_ds_is_file(const char *p);
int sg_ds_ends_with(const char *s, const char *suf);
char *sg_ds_strdup(const char *s);
char *sg_ds_join(const char *a, const char *b);  /* a/b; b when a is "" or b absolute */
ds_entry *sg_ds_vec_push(ds_vec *v);             /* a zeroed entry at the end */
int sg_ds_cmp_rel(const void *a, const void *b); /* qsort by rel (byte order) */
void sg_ds_free_entries(ds_entry *e, int64_t n);

/* The index builders, one per dataset format (their rows in data/formats.c
 * point here): fill ds->e / ds->n (sorted) and ds->map (raw file value ->
 * label, before data.reduce_zero_label). use_map: data.label_map is
 * cityscapes (the format rules, sg_format_resolve, have allowed it for this
 * format). SG_OK, or SG_ERR_RUNTIME after logging what is missing or
 * malformed and where. */
sg_status sg_ds_open_cityscapes(sg_dataset *ds, const sg_data_cfg *cfg, const char *split,
                                int use_map);
sg_status sg_ds_open_list(sg_dataset *ds, const sg_data_cfg *cfg, const char *split, int use_map);
sg_status sg_ds_open_voc(sg_dataset *ds, const sg_data_cfg *cfg, const char *split, int use_map);
sg_status sg_ds_open_ade20k(sg_dataset *ds, const sg_data_cfg *cfg, const char *split, int use_map);

/* sg_dataset_open with the format's row given instead of looked up by
 * data.format: the same rules, index and classes. For rows that are not in
 * the table (tests/data/test_formats.c shows a format made of one row and
 * an index builder). */
sg_dataset *sg_dataset_open_format(const sg_format *f, const sg_data_cfg *cfg, const char *split,
                                   int num_classes);

#endif
