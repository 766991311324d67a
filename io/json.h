/* io/json.h - the project's one JSON implementation: a bounded reader and a
 * writer.
 *
 * Owns the JSON segtrain reads and writes: the safetensors header and
 * checkpoint metadata (io/safetensors.c), metrics.jsonl lines and eval
 * reports (train/, cmd/evaluate.c; read back by `segtrain plot`), bench
 * summaries (cmd/bench.c). No other file scans or escapes JSON (synth's
 * polygons.json, data/synth_cityscapes.c, is printed from fixed label names
 * and numbers: nothing in it needs escaping).
 *
 * Reader. JSON read here is untrusted input (a downloaded checkpoint, a run
 * directory someone sent): it is read in time linear in its length, with
 * limits given as options (bytes, nesting depth, string length), and every
 * error is a message plus the byte offset where the text went wrong. Two
 * interfaces on one scanner:
 *   - a cursor (sg_json_rd): one token at a time, nothing kept but the
 *     current token, for large documents that map straight into the
 *     caller's own structures (a safetensors header of 200,000 tensors);
 *   - a document tree (sg_json_val, sg_json_parse), built from the cursor,
 *     for small documents read by key (a metrics line, an eval report).
 * The grammar is RFC 8259 (numbers included: no leading zeros, no "+1",
 * no NaN); strings are decoded to UTF-8 (\uXXXX escapes encoded, other
 * bytes passed through as they are). Strict options refuse what would make
 * two different texts mean the same name: \u0000, unpaired UTF-16
 * surrogates, a key twice in one object. Without them a lone surrogate
 * decodes to '?' and \u0000 to a NUL byte inside the string (its length
 * still counts it).
 *
 * Writer (sg_json). Builds one object in a growable buffer: members in the
 * order they are added, no white space, numbers as %.17g (they read back
 * bit-exact) and non-finite numbers as null (JSON has no NaN), integers as
 * %lld. Nested objects through sg_json_obj_begin/end or as raw JSON text
 * built by another sg_json. The output bytes are part of the formats
 * (checksums, tests compare them): change them only with a format version.
 *
 * Out of host memory is fatal (core/log.h); everything else is returned.
 */
#ifndef SG_IO_JSON_H
#define SG_IO_JSON_H

#include <stddef.h>
#include <stdint.h>

#include "core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ======================= reader ======================= */

/* Strict options (sg_json_opts.flags). */
enum {
    SG_JSON_NO_NUL = 1u << 0,            /* refuse \u0000 in strings and keys */
    SG_JSON_NO_LONE_SURROGATE = 1u << 1, /* refuse a \uD800-\uDFFF escape that is not a pair */
    SG_JSON_UNIQUE_KEYS = 1u << 2,       /* refuse a key twice in one object */
    SG_JSON_STRICT = SG_JSON_NO_NUL | SG_JSON_NO_LONE_SURROGATE | SG_JSON_UNIQUE_KEYS,
};

#define SG_JSON_DEFAULT_DEPTH 64
/* The deepest nesting any reader allows (the tree builder recurses once per
 * level): larger max_depth values are lowered to this. */
#define SG_JSON_DEPTH_CAP 1024

typedef struct sg_json_opts {
    size_t max_bytes;  /* the document's length limit; 0 = none */
    int max_depth;     /* open objects/arrays at once; 0 = SG_JSON_DEFAULT_DEPTH */
    size_t max_string; /* decoded bytes of one string or key; 0 = none */
    unsigned flags;    /* SG_JSON_NO_NUL, ... */
} sg_json_opts;

/* What sg_json_rd_next found. */
typedef enum sg_json_tok {
    SG_JSON_T_ERROR = -1, /* the text is not valid JSON or broke a limit: see sg_json_rd_error */
    SG_JSON_T_END = 0,    /* the document is complete (only white space follows) */
    SG_JSON_T_OBJECT,     /* '{' */
    SG_JSON_T_OBJECT_END, /* '}' */
    SG_JSON_T_ARRAY,      /* '[' */
    SG_JSON_T_ARRAY_END,  /* ']' */
    SG_JSON_T_KEY,        /* a member's key (the ':' after it is consumed) */
    SG_JSON_T_STRING,
    SG_JSON_T_NUMBER,
    SG_JSON_T_TRUE,
    SG_JSON_T_FALSE,
    SG_JSON_T_NULL,
} sg_json_tok;

typedef struct sg_json_rd sg_json_rd;

/* A cursor over text[0..len) (need not be NUL-terminated; must outlive the
 * reader). opts NULL = no limits but the default depth, lenient. Never
 * fails: a document over max_bytes is the first token's error. */
sg_json_rd *sg_json_rd_open(const char *text, size_t len, const sg_json_opts *opts);
void sg_json_rd_close(sg_json_rd *r);

/* The next token: one complete top-level value, then SG_JSON_T_END. After
 * SG_JSON_T_ERROR every later call returns it again. */
sg_json_tok sg_json_rd_next(sg_json_rd *r);
/* After SG_JSON_T_OBJECT or SG_JSON_T_ARRAY: reads up to and including the
 * matching end token. After any other token: nothing to skip. SG_OK, or
 * SG_ERR_RUNTIME with the reason in sg_json_rd_error. */
sg_status sg_json_rd_skip(sg_json_rd *r);

/* The current KEY or STRING, decoded and NUL-terminated (len: its bytes,
 * which in lenient mode can include a NUL); valid until the next call. */
const char *sg_json_rd_str(const sg_json_rd *r, size_t *len);
/* The same, as a malloc'ed copy the caller frees. */
char *sg_json_rd_strdup(const sg_json_rd *r);
/* The current NUMBER as a double (finite: larger ones are an error). */
double sg_json_rd_num(const sg_json_rd *r);
/* The current token as an exact integer: SG_OK, or SG_ERR_RUNTIME when it
 * is not a NUMBER, has a fraction or an exponent, or is outside int64; the
 * reason then becomes the reader's error (later calls return
 * SG_JSON_T_ERROR). */
sg_status sg_json_rd_int(sg_json_rd *r, int64_t *out);

/* Byte offset of the current token's first character. */
size_t sg_json_rd_offset(const sg_json_rd *r);
/* Objects and arrays open after the current token (1 after the top-level
 * '{', 0 after its '}'). */
int sg_json_rd_depth(const sg_json_rd *r);

/* Records the caller's own reason for refusing the current token (a value
 * of the wrong type, say) as the reader's error, at the current token's
 * offset, unless an error is already recorded. Returns SG_ERR_RUNTIME. */
sg_status sg_json_rd_fail(sg_json_rd *r, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* The first error ("expected ':'", without the offset), or NULL. */
const char *sg_json_rd_error(const sg_json_rd *r);
/* Where it happened: a byte offset into the text. */
size_t sg_json_rd_error_offset(const sg_json_rd *r);

/* ---- document tree ---- */
typedef enum sg_json_type {
    SG_JSON_NULL,
    SG_JSON_BOOL,
    SG_JSON_NUM,
    SG_JSON_STR,
    SG_JSON_ARR,
    SG_JSON_OBJ
} sg_json_type;

typedef struct sg_json_val {
    sg_json_type type;
    double num;                /* SG_JSON_NUM; SG_JSON_BOOL: 0 or 1 */
    char *str;                 /* SG_JSON_STR: decoded, NUL-terminated */
    size_t len;                /* SG_JSON_STR: bytes */
    struct sg_json_val *items; /* SG_JSON_ARR, SG_JSON_OBJ: the values, in order */
    char **keys;               /* SG_JSON_OBJ: keys[i] names items[i] */
    int n;
} sg_json_val;

/* Parses text[0..len) as one JSON value (white space around it allowed)
 * into *out. SG_OK, or SG_ERR_RUNTIME with "<reason> at byte <N>" in
 * err[errcap] (nothing logged) and *out empty. opts as sg_json_rd_open. */
sg_status sg_json_parse(const char *text, size_t len, const sg_json_opts *opts, sg_json_val *out,
                        char *err, size_t errcap);
void sg_json_val_free(sg_json_val *v);
/* The first member `key` of an object, or NULL (also when v is NULL or not
 * an object). Linear in the object's size. */
const sg_json_val *sg_json_get(const sg_json_val *v, const char *key);

/* ======================= writer ======================= */

/* sg_json.flags */
enum {
    /* Every control character as \u00XX, none as \n or \t: the form of the
     * safetensors header since its first version (its bytes are checked). */
    SG_JSON_W_U_ESCAPES = 1u << 0,
};

#define SG_JSON_W_MAX_DEPTH 16

typedef struct sg_json {
    char *buf; /* the text so far, NUL-terminated */
    size_t len, cap;
    int n_items;    /* members written in the innermost open object (for commas) */
    unsigned flags; /* SG_JSON_W_*: set before sg_json_begin (which keeps it; free clears it) */
    int depth;      /* objects opened by sg_json_obj_begin */
    int outer_items[SG_JSON_W_MAX_DEPTH]; /* their parents' n_items */
} sg_json;

void sg_json_begin(sg_json *j); /* resets, writes "{" */
void sg_json_end(sg_json *j);   /* writes "}" */
void sg_json_free(sg_json *j);
void sg_json_int(sg_json *j, const char *key, long long v);
void sg_json_num(sg_json *j, const char *key, double v); /* %.17g, null if not finite */
void sg_json_str(sg_json *j, const char *key, const char *v);
void sg_json_raw(sg_json *j, const char *key, const char *json_text);
void sg_json_num_array(sg_json *j, const char *key, const double *v, int n);
void sg_json_str_array(sg_json *j, const char *key, const char *const *v, int n);
void sg_json_int_array(sg_json *j, const char *key, const long long *v, int n);
/* "key":{ ... } : members added in between go into the nested object (at
 * most SG_JSON_W_MAX_DEPTH levels; deeper is a programmer error). */
void sg_json_obj_begin(sg_json *j, const char *key);
void sg_json_obj_end(sg_json *j);
/* Appends the escaped, quoted form of s to j (no key, no comma): '"' and
 * '\\' escaped, \n and \t as such (or \u00XX with SG_JSON_W_U_ESCAPES),
 * other control characters as \u00XX, every other byte as it is. */
void sg_json_put_string(sg_json *j, const char *s);

#ifdef __cplusplus
}
#endif

#endif
