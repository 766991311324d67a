/* core/config_schema.h - read-only view of the configuration schema table.
 *
 * The table itself lives in config_schema.c (one row per key of sg_config).
 * This header lets the loader (config.c), the origin record
 * (config_origin.c), the writer (config_out.c), the CLI, the tests and the
 * reference generator (docs/CONFIG.md) walk it: names, types, defaults, ranges, docs. Nothing
 * here changes a configuration, and config_schema.c calls nothing of the
 * files that use it.
 */
#ifndef SG_CORE_CONFIG_SCHEMA_H
#define SG_CORE_CONFIG_SCHEMA_H

#include <stddef.h>

#include "core/config.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum sg_key_type {
    SG_KT_INT,
    SG_KT_FLOAT,      /* double */
    SG_KT_BOOL,       /* int 0/1 */
    SG_KT_STR,        /* char[] */
    SG_KT_ENUM,       /* char[], one of `allowed` */
    SG_KT_INT_LIST,   /* int[], fixed length or with a count field */
    SG_KT_FLOAT_LIST, /* double[], same */
    SG_KT_STR_LIST    /* char[][], with a count field */
} sg_key_type;

typedef struct sg_config_key {
    const char *name; /* "train.lr" (top-level keys have no dot) */
    sg_key_type type;
    size_t off;          /* offsetof(sg_config, field) */
    size_t count_off;    /* lists: offsetof the n_ field; 0 for fixed-length lists */
    int fixed_len;       /* fixed-length lists (crop_size[2]): the length, else 0 */
    int cap;             /* lists: max entries */
    int min_len;         /* lists: min entries */
    size_t str_size;     /* strings: capacity incl. NUL (per entry for lists) */
    const char *def;     /* default, as YAML text */
    double lo, hi;       /* numeric range, inclusive (each list element) */
    const char *allowed; /* "a|b|c" for enums and int choices, else NULL */
    const char *doc;     /* one line */
} sg_config_key;

int sg_config_n_keys(void);
/* Row i (0 <= i < sg_config_n_keys()), else NULL. */
const sg_config_key *sg_config_key_at(int i);
/* NULL if no such key. */
const sg_config_key *sg_config_find_key(const char *name);
/* The row index of k (a pointer from the functions above), -1 for any other
 * pointer. sg_config_origin is indexed by it. */
int sg_config_key_index(const sg_config_key *k);
/* 1 when `name` is a section: some key starts with "<name>." ("model"). */
int sg_config_is_section(const char *name);
/* 1 when v is one of `allowed` ("a|b|cuda:N"; N stands for a decimal number
 * of at most 4 digits), else 0. */
int sg_config_allowed_match(const char *allowed, const char *v);
/* "int", "float", "bool", "string", "enum", "int[2]", "float list", ... */
void sg_config_type_name(const sg_config_key *k, char *buf, size_t n);
/* The closest key to `name` by edit distance, or NULL if nothing is close. */
const char *sg_config_suggest(const char *name);
/* What segtrain calls a key that users of mmsegmentation (or torchvision's
 * reference scripts) type under their own name: "data_root" -> "data.root
 * ...". Matched on the last part of `name` (data.split, split); NULL when
 * `name` is not such a key. The text names the segtrain key(s) to use. */
const char *sg_config_foreign_hint(const char *name);
/* An enum's allowed values "a|b|c" as "a, b, c" (for messages and listings). */
void sg_config_allowed_text(const char *allowed, char *buf, size_t n);

#ifdef __cplusplus
}
#endif

#endif
