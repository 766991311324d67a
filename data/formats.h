/* data/formats.h - THE table of dataset formats (data.format), one row per
 * format, and the format rules of a configuration's data section.
 *
 * A row holds everything the rest of segtrain asks about a format: its name,
 * the index builder that lists a split's samples (dataset_internal.h), its
 * own classes (count, names, palette), how its masks store labels, the
 * data.label_map that fits it, what data.reduce_zero_label: auto means for
 * it, and the synthetic-dataset writer (`segtrain synth --layout NAME`, with
 * the splits it makes; NULL when synth cannot write the format).
 * sg_dataset_open (dataset.c), the class lookups
 * sg_layout_class_name / sg_layout_color (formats.c), synth.c and
 * cmd/synth.c walk the table; nothing else compares format names.
 *
 * Adding a format: an index builder (dataset_internal.h), one row in
 * formats.c, and its name in core/config_schema.c's allowed values of
 * data.format (core cannot include data/; tests/data/test_formats.c checks
 * that the two lists agree, in order, and that every row is complete).
 *
 * The format rules (sg_format_resolve) are written once, here: sg_dataset_open
 * applies them, and the commands validate a configuration with them before
 * anything is written (sg_format_config_rules, through core/config.h's
 * sg_config_validate_with), so the error names the key and where it was set.
 */
#ifndef SG_DATA_FORMATS_H
#define SG_DATA_FORMATS_H

#include <stddef.h>
#include <stdint.h>

#include "core/config.h"
#include "core/status.h"
#include "data/dataset.h"
#include "data/synth.h"

#ifdef __cplusplus
extern "C" {
#endif

/* How a format's masks store labels: what decides whether data.label_map
 * cityscapes (labelId -> trainId) may apply. */
typedef enum sg_label_convention {
    SG_LABELS_CITYSCAPES_IDS, /* Cityscapes labelIds (or labelTrainIds): the map applies */
    SG_LABELS_AS_LISTED,      /* whatever the listed masks hold: data.label_map says */
    SG_LABELS_CLASS_INDICES   /* class indices: the Cityscapes map would scramble them */
} sg_label_convention;

/* Fills ds's index for `split` (see dataset_internal.h). */
typedef sg_status (*sg_format_index_fn)(sg_dataset *ds, const sg_data_cfg *cfg, const char *split,
                                        int use_map);
/* Writes a whole synthetic dataset in the format (options already checked). */
typedef sg_status (*sg_format_synth_fn)(const sg_synth_opts *o);

typedef struct sg_format {
    const char *name;               /* the data.format value */
    sg_format_index_fn open_index;  /* never NULL */
    int n_classes;                  /* the format's own classes, 0 = none (list) */
    const char *const *class_names; /* n_classes names, NULL when n_classes is 0 */
    const uint8_t *palette;         /* n_classes r,g,b triples, NULL when n_classes is 0 */
    sg_label_convention labels;
    const char *label_map;          /* the data.label_map that fits it (cityscapes|none) */
    int reduce_zero_label;          /* what data.reduce_zero_label: auto means (0/1) */
    sg_format_synth_fn synth_write; /* NULL: `segtrain synth` cannot write it */
    const char *synth_splits[2];    /* the train and val splits synth_write makes, and
                                       what data.train_split / data.val_split: auto
                                       mean (NULL: the format has no split names) */
} sg_format;

/* The table: rows 0 .. sg_format_count() - 1 in data.format's order. */
int sg_format_count(void);
const sg_format *sg_format_at(int i);              /* NULL outside the table */
const sg_format *sg_format_find(const char *name); /* NULL if no row has it */

/* The names of the rows (only those synth can write when synth_only) joined
 * as "a, b or c" (sep ", ", last " or ") or "a|b|c" (sep = last = "|") into
 * buf[n]; returns buf. For messages and usage lines. */
const char *sg_format_names(char *buf, size_t n, int synth_only, const char *sep, const char *last);

/* A data section's choices, resolved against its format's row. */
typedef struct sg_format_use {
    const sg_format *format;
    int use_map;     /* data.label_map: cityscapes */
    int reduce_zero; /* data.reduce_zero_label, auto resolved by the row */
} sg_format_use;

/* A broken format rule: the key to blame and why. `why` starts with the
 * key's value ("cityscapes maps ..."), so "KEY = WHY" reads as a sentence. */
typedef struct sg_format_problem {
    const char *key;
    char why[512];
} sg_format_problem;

/* THE format rules: data.format names a row; data.label_map is cityscapes
 * or none, and not cityscapes for a format whose masks hold class indices;
 * data.reduce_zero_label is auto (or empty), true or false, and once
 * resolved does not combine with the Cityscapes map. SG_OK with *use
 * filled, or SG_ERR_CONFIG with *problem filled; nothing is logged, so each
 * caller reports in its own words. sg_format_resolve_row applies them for a
 * given row (one that need not be in the table: tests). */
sg_status sg_format_resolve(const sg_data_cfg *d, sg_format_use *use, sg_format_problem *problem);
sg_status sg_format_resolve_row(const sg_format *f, const sg_data_cfg *d, sg_format_use *use,
                                sg_format_problem *problem);

/* The split a data section names: d->train_split (val 0) or d->val_split
 * (val 1), or, when that is auto, the format's own split name (the row's
 * synth_splits: cityscapes train/val, voc train+aug/val, ade20k
 * training/validation), as data.label_map: auto follows the format. NULL
 * when it is auto and the format has no split names (list) or is unknown;
 * the configuration rules below refuse that with the key named. */
const char *sg_format_split(const sg_data_cfg *d, int val);

/* The format rules as configuration rules (core/config.h): pass this to
 * sg_config_validate_with / sg_cli_begin_with, and a broken rule is logged
 * as core's own validation errors are ("config error: FILE:LINE: key
 * 'data.label_map': ..."). Ended by a row with check NULL. */
extern const sg_config_rule sg_format_config_rules[];
/* The one check of that table, for tables that combine it with the rules
 * of higher layers (train/config_rules.h). */
sg_status sg_format_config_check(const sg_config *cfg);

#ifdef __cplusplus
}
#endif

#endif
