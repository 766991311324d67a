/* io/jsonw.h - a small JSON object writer (metrics.jsonl lines, eval JSON,
 * checkpoint metadata). Builds one flat object in a growable buffer; nested
 * values are added as raw JSON text built by another sg_json. Non-finite
 * numbers are written as null (JSON has no NaN). Out of memory is fatal.
 */
#ifndef SG_TRAIN_JSONW_H
#define SG_TRAIN_JSONW_H

#include <stddef.h>

typedef struct sg_json {
    char *buf;
    size_t len, cap;
    int n_items;   /* items written in the current object (for commas) */
} sg_json;

void sg_json_begin(sg_json *j);                 /* resets, writes "{" */
void sg_json_end(sg_json *j);                   /* writes "}" */
void sg_json_free(sg_json *j);
void sg_json_int(sg_json *j, const char *key, long long v);
void sg_json_num(sg_json *j, const char *key, double v);   /* %.17g, null if not finite */
void sg_json_str(sg_json *j, const char *key, const char *v);
void sg_json_raw(sg_json *j, const char *key, const char *json_text);
void sg_json_num_array(sg_json *j, const char *key, const double *v, int n);
void sg_json_str_array(sg_json *j, const char *key, const char *const *v, int n);
void sg_json_int_array(sg_json *j, const char *key, const long long *v, int n);
/* Appends the escaped, quoted form of s to j (no key, no comma). */
void sg_json_put_string(sg_json *j, const char *s);

#endif
