/* tests/train/ckpt_edit.h - rewriting a checkpoint with one metadata value
 * or one int64 tensor changed, as a crafted or damaged file would have them,
 * but with valid checksums (train/checkpoint.h's builder recomputes them),
 * so that what catches the change is the range check under test, not the
 * checksum. Header-only, like tests/testutil.h. */
#ifndef SG_TESTS_TRAIN_CKPT_EDIT_H
#define SG_TESTS_TRAIN_CKPT_EDIT_H

#include <string.h>

#include "train/checkpoint.h"

/* Copies src to dst (both paths may be equal) with metadata `key` set to
 * `value` (value NULL: the key removed; key NULL: no change) and, when
 * i64_name is not NULL, that int64 tensor's first value set to i64_value.
 * Returns 0, or -1 when src cannot be read or dst written. */
static int __attribute__((unused))
ckpt_rewrite(const char *src, const char *dst, const char *key, const char *value,
             const char *i64_name, int64_t i64_value) {
    sg_st_file *f = sg_st_open(src);
    if (!f) return -1;
    sg_ckpt_builder b;
    sg_ckpt_builder_init(&b);
    int rc = 0;
    for (int i = 0; i < sg_st_count(f) && rc == 0; i++) {
        const sg_st_tensor *t = sg_st_get(f, i);
        void *copy = malloc(t->nbytes ? t->nbytes : 1);
        if (!copy) abort();
        memcpy(copy, t->data, t->nbytes);
        if (i64_name && t->dtype == SG_ST_I64 && strcmp(t->name, i64_name) == 0 && t->count)
            memcpy(copy, &i64_value, sizeof i64_value);
        rc = sg_ckpt_add(&b, t->name, t->dtype, t->ndim, t->shape, copy, t->nbytes);
        free(copy);
    }
    int key_set = 0;
    for (int i = 0; i < sg_st_meta_count(f) && rc == 0; i++) {
        const char *k, *v;
        sg_st_meta_get(f, i, &k, &v);
        if (!strcmp(k, "checksum") || !strcmp(k, "meta_checksum") || !strcmp(k, "tensor_count"))
            continue; /* the builder's commit writes them */
        if (key && !strcmp(k, key)) {
            key_set = 1;
            if (value) rc = sg_ckpt_meta(&b, k, value);
            continue;
        }
        rc = sg_ckpt_meta(&b, k, v);
    }
    if (rc == 0 && key && value && !key_set) rc = sg_ckpt_meta(&b, key, value);
    sg_st_close(f); /* before writing: dst may be src */
    if (rc == 0) rc = sg_ckpt_commit(&b, dst);
    sg_ckpt_builder_free(&b);
    return rc == 0 ? 0 : -1;
}

#endif
