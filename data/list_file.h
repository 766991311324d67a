/* data/list_file.h - reads a dataset's list file (a split as a text file:
 * data.format list's "image mask" lines, VOC's ImageSets/Segmentation/
 * <split>.txt) line by line, each split into fields at spaces and tabs,
 * blank lines skipped. What the fields mean, comments included, is the
 * caller's: this reader owns the file, the line limit and the read errors,
 * so every list format reports them the same way. Used by the index
 * builders (dataset_index.c, dataset_index_voc.c). */
#ifndef SG_DATA_LIST_FILE_H
#define SG_DATA_LIST_FILE_H

#include <stdio.h>

#include "core/status.h"

/* Fields kept per line; sg_list_next counts the rest in n_fields. */
#define SG_LIST_FIELDS 3

typedef struct sg_list_file {
    FILE *f;
    const char *path;            /* the caller's string, for messages; kept until close */
    int lineno;                  /* 1-based number of the line last returned */
    int n_fields;                /* fields on that line (>= 1; may exceed SG_LIST_FIELDS) */
    char *field[SG_LIST_FIELDS]; /* the first ones, NUL-terminated, in line[];
                                    NULL past n_fields */
    char line[8192];             /* a line of up to 8190 characters and its newline */
} sg_list_file;

/* Opens `path`. SG_OK, or SG_ERR_RUNTIME after logging "cannot open <what>
 * <path>: <reason> (<hint>)": what names the file ("list file"), hint says
 * what the file should be and where it is looked for. */
sg_status sg_list_open(sg_list_file *l, const char *path, const char *what, const char *hint);

/* Reads up to the next line with a field: 1 with l->lineno, l->n_fields
 * and l->field set (valid until the next call); 0 at the end of the file;
 * -1 after logging "<path>:<line>: line longer than 8190 characters" or
 * "<path>:<line>: a NUL byte" or "reading <path> failed: <reason>". */
int sg_list_next(sg_list_file *l);

/* Closes the file (after any sg_list_next result, or none). */
void sg_list_close(sg_list_file *l);

#endif
