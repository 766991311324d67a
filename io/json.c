/* io/json.c - the JSON reader of io/json.h: a cursor (sg_json_rd) and the
 * document tree built from it (sg_json_parse).
 *
 * The cursor is a state machine over the text: each call skips white space,
 * reads one token and remembers what may come next (a key, a value, a ','
 * or the closing bracket). It keeps the stack of open containers, the
 * current token (strings decoded into one reused buffer) and, with
 * SG_JSON_UNIQUE_KEYS, the keys of each open object in a hash set, so a
 * document is read in time linear in its length whatever it holds.
 */
#include "io/json.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"

/* The keys of one open object (SG_JSON_UNIQUE_KEYS): open addressing over
 * FNV-1a; slot holds an entry index + 1 (0 = empty). The entries remember
 * their slot, so closing the object empties exactly the slots it used and
 * the table is reused by the next object at that depth: the total work
 * stays linear in the document however many objects it holds. */
typedef struct key_entry {
    size_t off, len; /* the key's bytes in the set's arena */
    size_t slot;
} key_entry;

typedef struct key_set {
    size_t *slot;
    size_t cap; /* power of two, or 0 */
    key_entry *e;
    size_t n, ecap;
    char *arena;
    size_t alen, acap;
} key_set;

/* What the next token may be. */
typedef enum {
    ST_VALUE,          /* a value: the document's, after ':' or after ',' in an array */
    ST_VALUE_OR_CLOSE, /* after '[': a value or ']' */
    ST_KEY,            /* after ',' in an object */
    ST_KEY_OR_CLOSE,   /* after '{': a key or '}' */
    ST_AFTER,          /* after a value inside a container: ',' or its closing bracket */
    ST_DONE,           /* after the top-level value: only white space */
} rd_state;

struct sg_json_rd {
    const char *s;
    size_t n, i;
    sg_json_opts o;
    rd_state state;
    unsigned char *stack; /* '{' or '[' per open container */
    int depth;
    key_set *keys; /* [max_depth] with SG_JSON_UNIQUE_KEYS */
    sg_json_tok tok;
    size_t tok_at;
    char *buf; /* the current string, or the current number's text */
    size_t blen, bcap;
    double num;
    int failed;
    size_t err_at;
    char err[256];
};

static void *xrealloc(void *p, size_t n) {
    void *q = realloc(p, n ? n : 1);
    SG_CHECK(q != NULL, "out of host memory reading JSON (%zu bytes)", n);
    return q;
}

/* ---------------- errors ---------------- */

static void vfail_at(sg_json_rd *r, size_t at, const char *fmt, va_list ap) {
    if (r->failed) return; /* the first error is the cause; later ones follow from it */
    vsnprintf(r->err, sizeof r->err, fmt, ap);
    r->err_at = at;
    r->failed = 1;
    r->tok = SG_JSON_T_ERROR;
}

static sg_json_tok fail_at(sg_json_rd *r, size_t at, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static sg_json_tok fail_at(sg_json_rd *r, size_t at, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vfail_at(r, at, fmt, ap);
    va_end(ap);
    return SG_JSON_T_ERROR;
}

sg_status sg_json_rd_fail(sg_json_rd *r, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vfail_at(r, r->tok_at, fmt, ap);
    va_end(ap);
    return SG_ERR_RUNTIME;
}

const char *sg_json_rd_error(const sg_json_rd *r) { return r->failed ? r->err : NULL; }
size_t sg_json_rd_error_offset(const sg_json_rd *r) { return r->err_at; }

/* A byte for a message: itself when printable ASCII, else its value (the
 * text is untrusted; a control character would garble the log line). */
static const char *show_byte(unsigned char c, char tmp[8]) {
    if (c >= 0x20 && c < 0x7f) snprintf(tmp, 8, "'%c'", c);
    else snprintf(tmp, 8, "0x%02x", c);
    return tmp;
}

/* ---------------- open / close ---------------- */

sg_json_rd *sg_json_rd_open(const char *text, size_t len, const sg_json_opts *opts) {
    sg_json_rd *r = calloc(1, sizeof *r);
    SG_CHECK(r != NULL, "out of host memory");
    r->s = text;
    r->n = len;
    if (opts) r->o = *opts;
    if (r->o.max_depth <= 0) r->o.max_depth = SG_JSON_DEFAULT_DEPTH;
    if (r->o.max_depth > SG_JSON_DEPTH_CAP) r->o.max_depth = SG_JSON_DEPTH_CAP;
    r->stack = xrealloc(NULL, (size_t)r->o.max_depth);
    if (r->o.flags & SG_JSON_UNIQUE_KEYS) {
        r->keys = calloc((size_t)r->o.max_depth, sizeof *r->keys);
        SG_CHECK(r->keys != NULL, "out of host memory");
    }
    r->state = ST_VALUE;
    r->bcap = 64;
    r->buf = xrealloc(NULL, r->bcap);
    r->buf[0] = 0;
    r->tok = SG_JSON_T_END;
    if (r->o.max_bytes && len > r->o.max_bytes)
        fail_at(r, 0, "document of %zu bytes is above the %zu-byte limit", len, r->o.max_bytes);
    return r;
}

void sg_json_rd_close(sg_json_rd *r) {
    if (!r) return;
    if (r->keys)
        for (int d = 0; d < r->o.max_depth; d++) {
            free(r->keys[d].slot);
            free(r->keys[d].e);
            free(r->keys[d].arena);
        }
    free(r->keys);
    free(r->stack);
    free(r->buf);
    free(r);
}

/* ---------------- accessors ---------------- */

const char *sg_json_rd_str(const sg_json_rd *r, size_t *len) {
    if (len) *len = r->blen;
    return r->buf;
}

char *sg_json_rd_strdup(const sg_json_rd *r) {
    char *s = xrealloc(NULL, r->blen + 1);
    memcpy(s, r->buf, r->blen + 1);
    return s;
}

double sg_json_rd_num(const sg_json_rd *r) { return r->num; }
size_t sg_json_rd_offset(const sg_json_rd *r) { return r->tok_at; }
int sg_json_rd_depth(const sg_json_rd *r) { return r->depth; }

sg_status sg_json_rd_int(sg_json_rd *r, int64_t *out) {
    if (r->failed) return SG_ERR_RUNTIME;
    if (r->tok != SG_JSON_T_NUMBER) return sg_json_rd_fail(r, "expected an integer");
    /* the number's text is in buf, already checked against the grammar */
    const char *p = r->buf;
    int neg = *p == '-';
    if (neg) p++;
    uint64_t x = 0, lim = neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX;
    for (; *p; p++) {
        if (*p < '0' || *p > '9') return sg_json_rd_fail(r, "expected an integer");
        unsigned d = (unsigned)(*p - '0');
        if (x > (lim - d) / 10) return sg_json_rd_fail(r, "number too large");
        x = x * 10 + d;
    }
    *out = neg ? (x == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)x) : (int64_t)x;
    return SG_OK;
}

/* ---------------- scanning ---------------- */

static void ws(sg_json_rd *r) {
    while (r->i < r->n) {
        char c = r->s[r->i];
        if (c != ' ' && c != '\t' && c != '\n' && c != '\r') break;
        r->i++;
    }
}

/* Appends k bytes to the current string, within max_string. 0 or -1. */
static int put(sg_json_rd *r, const char *b, size_t k) {
    if (r->o.max_string && r->blen + k > r->o.max_string) {
        fail_at(r, r->i, "string longer than the %zu-byte limit", r->o.max_string);
        return -1;
    }
    if (r->blen + k + 1 > r->bcap) {
        while (r->blen + k + 1 > r->bcap) r->bcap *= 2;
        r->buf = xrealloc(r->buf, r->bcap);
    }
    memcpy(r->buf + r->blen, b, k);
    r->blen += k;
    return 0;
}

static int put_utf8(sg_json_rd *r, unsigned cp) {
    char t[4];
    size_t k;
    if (cp < 0x80) {
        t[0] = (char)cp;
        k = 1;
    } else if (cp < 0x800) {
        t[0] = (char)(0xc0 | cp >> 6);
        t[1] = (char)(0x80 | (cp & 0x3f));
        k = 2;
    } else if (cp < 0x10000) {
        t[0] = (char)(0xe0 | cp >> 12);
        t[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
        t[2] = (char)(0x80 | (cp & 0x3f));
        k = 3;
    } else {
        t[0] = (char)(0xf0 | cp >> 18);
        t[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
        t[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
        t[3] = (char)(0x80 | (cp & 0x3f));
        k = 4;
    }
    return put(r, t, k);
}

/* Four hex digits at s[at..at+4) into *cp; 0, or -1 (not four hex digits). */
static int hex4(const sg_json_rd *r, size_t at, unsigned *cp) {
    if (r->n - at < 4) return -1;
    unsigned v = 0;
    for (int k = 0; k < 4; k++) {
        char h = r->s[at + (size_t)k];
        v <<= 4;
        if (h >= '0' && h <= '9') v |= (unsigned)(h - '0');
        else if (h >= 'a' && h <= 'f') v |= (unsigned)(h - 'a' + 10);
        else if (h >= 'A' && h <= 'F') v |= (unsigned)(h - 'A' + 10);
        else return -1;
    }
    *cp = v;
    return 0;
}

/* The string starting at s[i] == '"' into buf. 0 or -1 (error recorded). */
static int scan_string(sg_json_rd *r) {
    r->i++;
    r->blen = 0;
    for (;;) {
        /* the run of bytes that stand for themselves, in one copy */
        size_t run = r->i;
        while (run < r->n) {
            unsigned char c = (unsigned char)r->s[run];
            if (c == '"' || c == '\\' || c < 0x20) break;
            run++;
        }
        if (run > r->i && put(r, r->s + r->i, run - r->i) != 0) return -1;
        r->i = run;
        if (r->i >= r->n) {
            fail_at(r, r->i, "unterminated string");
            return -1;
        }
        unsigned char c = (unsigned char)r->s[r->i];
        if (c == '"') {
            r->i++;
            break;
        }
        if (c < 0x20) {
            fail_at(r, r->i, "control character in a string");
            return -1;
        }
        /* an escape */
        size_t at = r->i++;
        if (r->i >= r->n) {
            fail_at(r, at, "unterminated escape");
            return -1;
        }
        char e = r->s[r->i++];
        unsigned cp;
        switch (e) {
        case '"': cp = '"'; break;
        case '\\': cp = '\\'; break;
        case '/': cp = '/'; break;
        case 'b': cp = '\b'; break;
        case 'f': cp = '\f'; break;
        case 'n': cp = '\n'; break;
        case 'r': cp = '\r'; break;
        case 't': cp = '\t'; break;
        case 'u':
            if (hex4(r, r->i, &cp) != 0) {
                fail_at(r, at, "bad \\u escape (expected 4 hex digits)");
                return -1;
            }
            r->i += 4;
            if (cp == 0 && (r->o.flags & SG_JSON_NO_NUL)) {
                /* "a\u0000x" would read as "a": two names could meet */
                fail_at(r, at, "\\u0000 (NUL) in a string");
                return -1;
            }
            if (cp >= 0xd800 && cp <= 0xdfff) {
                unsigned lo;
                if (cp < 0xdc00 && r->n - r->i >= 6 && r->s[r->i] == '\\' &&
                    r->s[r->i + 1] == 'u' && hex4(r, r->i + 2, &lo) == 0 && lo >= 0xdc00 &&
                    lo <= 0xdfff) {
                    r->i += 6;
                    cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
                } else if (r->o.flags & SG_JSON_NO_LONE_SURROGATE) {
                    /* no UTF-8 for it: any replacement would merge names */
                    fail_at(r, at, "unpaired UTF-16 surrogate in a \\u escape");
                    return -1;
                } else {
                    cp = '?';
                }
            }
            break;
        default:
            if ((unsigned char)e >= 0x20 && (unsigned char)e < 0x7f)
                fail_at(r, at, "unknown escape '\\%c'", e);
            else fail_at(r, at, "unknown escape (a backslash, then byte 0x%02x)", (unsigned char)e);
            return -1;
        }
        if (put_utf8(r, cp) != 0) return -1;
    }
    r->buf[r->blen] = 0;
    return 0;
}

/* A number at s[i] (a '-' or a digit) by RFC 8259's grammar; its text goes
 * to buf and its value to num. 0 or -1. */
static int scan_number(sg_json_rd *r) {
    size_t st = r->i, i = r->i;
    const char *s = r->s;
    if (i < r->n && s[i] == '-') i++;
    if (i < r->n && s[i] == '0') {
        i++;
    } else if (i < r->n && s[i] >= '1' && s[i] <= '9') {
        while (i < r->n && s[i] >= '0' && s[i] <= '9') i++;
    } else {
        fail_at(r, st, "bad number (expected a digit)");
        return -1;
    }
    if (i < r->n && s[i] == '.') {
        i++;
        if (i >= r->n || s[i] < '0' || s[i] > '9') {
            fail_at(r, st, "bad number (expected a digit after '.')");
            return -1;
        }
        while (i < r->n && s[i] >= '0' && s[i] <= '9') i++;
    }
    if (i < r->n && (s[i] == 'e' || s[i] == 'E')) {
        i++;
        if (i < r->n && (s[i] == '+' || s[i] == '-')) i++;
        if (i >= r->n || s[i] < '0' || s[i] > '9') {
            fail_at(r, st, "bad number (expected a digit in the exponent)");
            return -1;
        }
        while (i < r->n && s[i] >= '0' && s[i] <= '9') i++;
    }
    /* the text, NUL-terminated for strtod (not a string: no max_string) */
    size_t k = i - st;
    if (k + 1 > r->bcap) {
        while (k + 1 > r->bcap) r->bcap *= 2;
        r->buf = xrealloc(r->buf, r->bcap);
    }
    memcpy(r->buf, s + st, k);
    r->buf[k] = 0;
    r->blen = k;
    r->i = i;
    r->num = strtod(r->buf, NULL);
    if (!isfinite(r->num)) {
        fail_at(r, st, "number out of range (not a finite double)");
        return -1;
    }
    return 0;
}

static uint64_t fnv1a(const char *s, size_t n) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t k = 0; k < n; k++) h = (h ^ (unsigned char)s[k]) * 0x100000001b3ull;
    return h;
}

static void set_insert(key_set *ks, size_t e) {
    size_t i = (size_t)fnv1a(ks->arena + ks->e[e].off, ks->e[e].len) & (ks->cap - 1);
    while (ks->slot[i]) i = (i + 1) & (ks->cap - 1);
    ks->slot[i] = e + 1;
    ks->e[e].slot = i;
}

/* The key in buf, for the object at the top of the stack: 0 when new
 * (remembered), -1 when the object has it already. */
static int key_seen(sg_json_rd *r) {
    key_set *ks = &r->keys[r->depth - 1];
    if (ks->cap) {
        for (size_t i = (size_t)fnv1a(r->buf, r->blen) & (ks->cap - 1); ks->slot[i];
             i = (i + 1) & (ks->cap - 1)) {
            const key_entry *e = &ks->e[ks->slot[i] - 1];
            if (e->len == r->blen && memcmp(ks->arena + e->off, r->buf, r->blen) == 0) return -1;
        }
    }
    if (!ks->arena || ks->alen + r->blen > ks->acap) { /* (allocated even for "": memcpy) */
        if (!ks->acap) ks->acap = 256;
        while (ks->alen + r->blen > ks->acap) ks->acap *= 2;
        ks->arena = xrealloc(ks->arena, ks->acap);
    }
    memcpy(ks->arena + ks->alen, r->buf, r->blen);
    if (ks->n == ks->ecap) {
        ks->ecap = ks->ecap ? 2 * ks->ecap : 16;
        ks->e = xrealloc(ks->e, ks->ecap * sizeof *ks->e);
    }
    ks->e[ks->n].off = ks->alen;
    ks->e[ks->n].len = r->blen;
    ks->alen += r->blen;
    ks->n++;
    if (ks->n * 2 > ks->cap) { /* load under one half */
        free(ks->slot);
        ks->cap = ks->cap ? 2 * ks->cap : 32;
        ks->slot = calloc(ks->cap, sizeof *ks->slot);
        SG_CHECK(ks->slot != NULL, "out of host memory");
        for (size_t e = 0; e < ks->n; e++) set_insert(ks, e);
    } else {
        set_insert(ks, ks->n - 1);
    }
    return 0;
}

static void set_clear(key_set *ks) {
    for (size_t e = 0; e < ks->n; e++) ks->slot[ks->e[e].slot] = 0;
    ks->n = 0;
    ks->alen = 0;
}

static sg_json_tok after_value(sg_json_rd *r, sg_json_tok t) {
    r->state = r->depth ? ST_AFTER : ST_DONE;
    return r->tok = t;
}

static sg_json_tok open_container(sg_json_rd *r, char c) {
    if (r->depth >= r->o.max_depth)
        return fail_at(r, r->i, "nested deeper than %d levels", r->o.max_depth);
    r->stack[r->depth++] = (unsigned char)c;
    r->i++;
    if (c == '{') {
        if (r->keys) set_clear(&r->keys[r->depth - 1]);
        r->state = ST_KEY_OR_CLOSE;
        return r->tok = SG_JSON_T_OBJECT;
    }
    r->state = ST_VALUE_OR_CLOSE;
    return r->tok = SG_JSON_T_ARRAY;
}

static sg_json_tok close_container(sg_json_rd *r) {
    char c = (char)r->stack[--r->depth];
    r->i++;
    return after_value(r, c == '{' ? SG_JSON_T_OBJECT_END : SG_JSON_T_ARRAY_END);
}

static sg_json_tok scan_value(sg_json_rd *r) {
    char tmp[8];
    if (r->i >= r->n) return fail_at(r, r->i, "expected a value");
    char c = r->s[r->i];
    if (c == '{' || c == '[') return open_container(r, c);
    if (c == '"') {
        if (scan_string(r) != 0) return SG_JSON_T_ERROR;
        return after_value(r, SG_JSON_T_STRING);
    }
    if (c == '-' || (c >= '0' && c <= '9')) {
        if (scan_number(r) != 0) return SG_JSON_T_ERROR;
        return after_value(r, SG_JSON_T_NUMBER);
    }
    static const struct {
        const char *w;
        size_t l;
        sg_json_tok t;
    } words[] = {
        {"true", 4, SG_JSON_T_TRUE}, {"false", 5, SG_JSON_T_FALSE}, {"null", 4, SG_JSON_T_NULL}};
    for (int k = 0; k < 3; k++)
        if (r->n - r->i >= words[k].l && memcmp(r->s + r->i, words[k].w, words[k].l) == 0) {
            r->i += words[k].l;
            return after_value(r, words[k].t);
        }
    return fail_at(r, r->i, "unexpected character %s", show_byte((unsigned char)c, tmp));
}

sg_json_tok sg_json_rd_next(sg_json_rd *r) {
    if (r->failed) return SG_JSON_T_ERROR;
    for (;;) {
        ws(r);
        r->tok_at = r->i;
        char c = r->i < r->n ? r->s[r->i] : 0;
        int more = r->i < r->n;
        switch (r->state) {
        case ST_DONE:
            if (more) return fail_at(r, r->i, "trailing characters after the value");
            return r->tok = SG_JSON_T_END;
        case ST_AFTER: {
            int obj = r->stack[r->depth - 1] == '{';
            if (!more) return fail_at(r, r->i, "unterminated %s", obj ? "object" : "array");
            if (c == ',') {
                r->i++;
                r->state = obj ? ST_KEY : ST_VALUE;
                continue;
            }
            if (c == (obj ? '}' : ']')) return close_container(r);
            return fail_at(r, r->i, "expected ',' or '%c'", obj ? '}' : ']');
        }
        case ST_KEY_OR_CLOSE:
        case ST_KEY:
            if (!more) return fail_at(r, r->i, "unterminated object");
            if (c == '}' && r->state == ST_KEY_OR_CLOSE) return close_container(r);
            if (c != '"') return fail_at(r, r->i, "expected a key string");
            if (scan_string(r) != 0) return SG_JSON_T_ERROR;
            if (r->keys && key_seen(r) != 0) {
                char shown[80];
                snprintf(shown, sizeof shown, "%s", r->buf);
                for (char *p = shown; *p; p++)
                    if ((unsigned char)*p < 0x20 || *p == 0x7f) *p = '?';
                return fail_at(r, r->tok_at, "key '%s' appears twice in one object", shown);
            }
            ws(r);
            if (r->i >= r->n || r->s[r->i] != ':') return fail_at(r, r->i, "expected ':'");
            r->i++;
            r->state = ST_VALUE;
            return r->tok = SG_JSON_T_KEY;
        case ST_VALUE_OR_CLOSE:
            if (c == ']' && more) return close_container(r);
            return scan_value(r);
        case ST_VALUE: return scan_value(r);
        }
    }
}

sg_status sg_json_rd_skip(sg_json_rd *r) {
    if (r->failed) return SG_ERR_RUNTIME;
    if (r->tok != SG_JSON_T_OBJECT && r->tok != SG_JSON_T_ARRAY) return SG_OK;
    int base = r->depth - 1;
    while (r->depth > base) {
        if (sg_json_rd_next(r) == SG_JSON_T_ERROR) return SG_ERR_RUNTIME;
    }
    return SG_OK;
}

/* ---------------- document tree ---------------- */

/* The value whose first token t was just read, into *v; recursion is
 * bounded by max_depth (at most SG_JSON_DEPTH_CAP). 0 or -1; on failure
 * what was built is still reachable from v, for sg_json_val_free. */
static int build(sg_json_rd *r, sg_json_tok t, sg_json_val *v) {
    switch (t) {
    case SG_JSON_T_NULL: v->type = SG_JSON_NULL; return 0;
    case SG_JSON_T_TRUE:
    case SG_JSON_T_FALSE:
        v->type = SG_JSON_BOOL;
        v->num = t == SG_JSON_T_TRUE;
        return 0;
    case SG_JSON_T_NUMBER:
        v->type = SG_JSON_NUM;
        v->num = r->num;
        return 0;
    case SG_JSON_T_STRING:
        v->type = SG_JSON_STR;
        v->str = sg_json_rd_strdup(r);
        v->len = r->blen;
        return 0;
    case SG_JSON_T_OBJECT:
    case SG_JSON_T_ARRAY: {
        int obj = t == SG_JSON_T_OBJECT, cap = 0;
        v->type = obj ? SG_JSON_OBJ : SG_JSON_ARR;
        for (;;) {
            sg_json_tok u = sg_json_rd_next(r);
            if (u == SG_JSON_T_OBJECT_END || u == SG_JSON_T_ARRAY_END) return 0;
            if (u == SG_JSON_T_ERROR) return -1;
            if (v->n == cap) {
                if (cap > (1 << 29)) return (int)sg_json_rd_fail(r, "more than 2^30 members");
                cap = cap ? 2 * cap : 8;
                v->items = xrealloc(v->items, (size_t)cap * sizeof *v->items);
                if (obj) v->keys = xrealloc(v->keys, (size_t)cap * sizeof *v->keys);
            }
            sg_json_val *it = &v->items[v->n];
            memset(it, 0, sizeof *it);
            if (obj) {
                v->keys[v->n] = sg_json_rd_strdup(r); /* u is the key */
                u = sg_json_rd_next(r);
            }
            v->n++; /* counted before it is complete, so a failure frees it */
            if (u == SG_JSON_T_ERROR || build(r, u, it) != 0) return -1;
        }
    }
    default: /* END, ERROR, or an end token where a value starts: the reader said why */
        if (!r->failed) sg_json_rd_fail(r, "expected a value");
        return -1;
    }
}

sg_status sg_json_parse(const char *text, size_t len, const sg_json_opts *opts, sg_json_val *out,
                        char *err, size_t errcap) {
    memset(out, 0, sizeof *out);
    sg_json_rd *r = sg_json_rd_open(text, len, opts);
    int rc = build(r, sg_json_rd_next(r), out);
    if (rc == 0 && sg_json_rd_next(r) != SG_JSON_T_END) rc = -1;
    if (rc != 0) {
        if (err && errcap)
            snprintf(err, errcap, "%s at byte %zu", sg_json_rd_error(r),
                     sg_json_rd_error_offset(r));
        sg_json_val_free(out);
    }
    sg_json_rd_close(r);
    return rc == 0 ? SG_OK : SG_ERR_RUNTIME;
}

void sg_json_val_free(sg_json_val *v) {
    if (!v) return;
    for (int k = 0; k < v->n; k++) {
        sg_json_val_free(&v->items[k]);
        if (v->keys) free(v->keys[k]);
    }
    free(v->items);
    free(v->keys);
    free(v->str);
    memset(v, 0, sizeof *v);
}

const sg_json_val *sg_json_get(const sg_json_val *v, const char *key) {
    if (!v || v->type != SG_JSON_OBJ) return NULL;
    for (int k = 0; k < v->n; k++)
        if (strcmp(v->keys[k], key) == 0) return &v->items[k];
    return NULL;
}
