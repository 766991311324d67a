/* data/dataset_internal.h - what the dataset's files share: the index entry,
 * the dataset struct, and the index builders (dataset_index.c). Not a public
 * header. */
#ifndef SG_DATA_DATASET_INTERNAL_H
#define SG_DATA_DATASET_INTERNAL_H

#include <stdint.h>

#include "core/config.h"
#include "data/dataset.h"

#define MAX_EXAMPLES 3

typedef struct ds_entry {
    char *rel;  /* image path relative to root: the sort key */
    char *img;  /* full paths */
    char *mask;
    int line;   /* list format: line in the list file */
    int part;   /* voc: which split file of a "train+aug" union (1-based) */
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
char *sg_ds_join(const char *a, const char *b); /* a/b; b when a is "" or b absolute */
ds_entry *sg_ds_vec_push(ds_vec *v);            /* a zeroed entry at the end */
int sg_ds_cmp_rel(const void *a, const void *b); /* qsort by rel (byte order) */
void sg_ds_free_entries(ds_entry *e, int64_t n);

/* Fill ds->e / ds->n (sorted) and ds->map (raw file value -> label, before
 * data.reduce_zero_label); 0, or -1 after logging. */
int sg_ds_open_cityscapes(sg_dataset *ds, const sg_data_cfg *cfg, const char *split, int use_map);
int sg_ds_open_list(sg_dataset *ds, const sg_data_cfg *cfg, const char *split, int use_map);
int sg_ds_open_voc(sg_dataset *ds, const sg_data_cfg *cfg, const char *split);
int sg_ds_open_ade20k(sg_dataset *ds, const sg_data_cfg *cfg, const char *split);

#endif
