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
} ds_entry;

struct sg_dataset {
    char split[SG_STR];
    int64_t n;
    ds_entry *e;
    int num_classes, ignore_index, invalid_to_ignore;
    uint8_t map[256];
    char (*names)[SG_NAME];
    uint8_t *palette;
};

int sg_ds_is_dir(const char *p);

/* Fill ds->e / ds->n (sorted) and ds->map; 0, or -1 after logging. */
int sg_ds_open_cityscapes(sg_dataset *ds, const sg_data_cfg *cfg, const char *split, int use_map);
int sg_ds_open_list(sg_dataset *ds, const sg_data_cfg *cfg, const char *split, int use_map);
void sg_ds_free_entries(ds_entry *e, int64_t n);

#endif
