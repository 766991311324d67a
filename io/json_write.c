/* io/json_write.c - the JSON writer of io/json.h (sg_json): one object in a
 * growable buffer. Its output bytes are part of segtrain's formats
 * (metrics.jsonl, eval reports, safetensors headers): see io/json.h. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "io/json.h"

static void put(sg_json *j, const char *s, size_t n) {
    if (j->len + n + 1 > j->cap) {
        size_t cap = j->cap ? j->cap : 256;
        while (j->len + n + 1 > cap) cap *= 2;
        char *b = realloc(j->buf, cap);
        SG_CHECK(b != NULL, "out of memory growing a JSON buffer to %zu bytes", cap);
        j->buf = b;
        j->cap = cap;
    }
    memcpy(j->buf + j->len, s, n);
    j->len += n;
    j->buf[j->len] = '\0';
}

static void putf(sg_json *j, const char *fmt, ...) {
    char tmp[64];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    put(j, tmp, (size_t)n);
}

void sg_json_put_string(sg_json *j, const char *s) {
    put(j, "\"", 1);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\') {
            char e[2] = {'\\', (char)*p};
            put(j, e, 2);
        } else if (*p == '\n' && !(j->flags & SG_JSON_W_U_ESCAPES)) {
            put(j, "\\n", 2);
        } else if (*p == '\t' && !(j->flags & SG_JSON_W_U_ESCAPES)) {
            put(j, "\\t", 2);
        } else if (*p < 0x20) {
            putf(j, "\\u%04x", *p);
        } else {
            put(j, (const char *)p, 1);
        }
    }
    put(j, "\"", 1);
}

static void key(sg_json *j, const char *k) {
    if (j->n_items++ > 0) put(j, ",", 1);
    sg_json_put_string(j, k);
    put(j, ":", 1);
}

static void num(sg_json *j, double v) {
    if (!isfinite(v)) put(j, "null", 4);
    else putf(j, "%.17g", v);
}

void sg_json_begin(sg_json *j) {
    j->len = 0;
    j->n_items = 0;
    j->depth = 0;
    put(j, "{", 1);
}
void sg_json_end(sg_json *j) { put(j, "}", 1); }

void sg_json_obj_begin(sg_json *j, const char *k) {
    SG_CHECK(j->depth < SG_JSON_W_MAX_DEPTH, "JSON writer: more than %d nested objects",
             SG_JSON_W_MAX_DEPTH);
    key(j, k);
    put(j, "{", 1);
    j->outer_items[j->depth++] = j->n_items;
    j->n_items = 0;
}

void sg_json_obj_end(sg_json *j) {
    SG_CHECK(j->depth > 0, "JSON writer: sg_json_obj_end without sg_json_obj_begin");
    put(j, "}", 1);
    j->n_items = j->outer_items[--j->depth];
}
void sg_json_free(sg_json *j) {
    free(j->buf);
    memset(j, 0, sizeof *j);
}
void sg_json_int(sg_json *j, const char *k, long long v) {
    key(j, k);
    putf(j, "%lld", v);
}
void sg_json_num(sg_json *j, const char *k, double v) {
    key(j, k);
    num(j, v);
}
void sg_json_str(sg_json *j, const char *k, const char *v) {
    key(j, k);
    sg_json_put_string(j, v);
}
void sg_json_raw(sg_json *j, const char *k, const char *text) {
    key(j, k);
    put(j, text, strlen(text));
}
void sg_json_num_array(sg_json *j, const char *k, const double *v, int n) {
    key(j, k);
    put(j, "[", 1);
    for (int i = 0; i < n; i++) {
        if (i) put(j, ",", 1);
        num(j, v[i]);
    }
    put(j, "]", 1);
}
void sg_json_int_array(sg_json *j, const char *k, const long long *v, int n) {
    key(j, k);
    put(j, "[", 1);
    for (int i = 0; i < n; i++) {
        if (i) put(j, ",", 1);
        putf(j, "%lld", v[i]);
    }
    put(j, "]", 1);
}
void sg_json_str_array(sg_json *j, const char *k, const char *const *v, int n) {
    key(j, k);
    put(j, "[", 1);
    for (int i = 0; i < n; i++) {
        if (i) put(j, ",", 1);
        sg_json_put_string(j, v[i]);
    }
    put(j, "]", 1);
}
