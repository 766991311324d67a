/* cmd/plot_json.c - a small JSON reader for `segtrain plot` (see
 * plot_data.h): recursive descent into a tree, depth-limited, every error
 * with its byte offset. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmd/plot_data.h"
#include "core/log.h"

typedef struct {
    const char *s;
    size_t i, n;
    char *err;
    size_t errcap;
    int failed;
} pj_cur;

static int perr(pj_cur *c, const char *fmt, ...) {
    if (!c->failed) {
        char msg[256];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof msg, fmt, ap);
        va_end(ap);
        snprintf(c->err, c->errcap, "%s at byte %zu", msg, c->i);
        c->failed = 1;
    }
    return -1;
}

static void ws(pj_cur *c) {
    while (c->i < c->n && (c->s[c->i] == ' ' || c->s[c->i] == '\t' || c->s[c->i] == '\n' ||
                           c->s[c->i] == '\r'))
        c->i++;
}

static void *xrealloc(void *p, size_t n) {
    void *q = realloc(p, n ? n : 1);
    SG_CHECK(q != NULL, "out of host memory reading JSON");
    return q;
}

static void put_utf8(char **buf, size_t *len, size_t *cap, unsigned cp) {
    unsigned char t[4];
    int k;
    if (cp < 0x80) {
        t[0] = (unsigned char)cp;
        k = 1;
    } else if (cp < 0x800) {
        t[0] = (unsigned char)(0xc0 | cp >> 6);
        t[1] = (unsigned char)(0x80 | (cp & 0x3f));
        k = 2;
    } else if (cp < 0x10000) {
        t[0] = (unsigned char)(0xe0 | cp >> 12);
        t[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3f));
        t[2] = (unsigned char)(0x80 | (cp & 0x3f));
        k = 3;
    } else {
        t[0] = (unsigned char)(0xf0 | cp >> 18);
        t[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3f));
        t[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3f));
        t[3] = (unsigned char)(0x80 | (cp & 0x3f));
        k = 4;
    }
    if (*len + (size_t)k + 1 > *cap) {
        *cap = (*cap + (size_t)k + 1) * 2;
        *buf = xrealloc(*buf, *cap);
    }
    memcpy(*buf + *len, t, (size_t)k);
    *len += (size_t)k;
}

static int hex4(pj_cur *c, unsigned *out) {
    if (c->i + 4 > c->n) return perr(c, "truncated \\u escape");
    unsigned v = 0;
    for (int k = 0; k < 4; k++) {
        char h = c->s[c->i++];
        v <<= 4;
        if (h >= '0' && h <= '9') v |= (unsigned)(h - '0');
        else if (h >= 'a' && h <= 'f') v |= (unsigned)(h - 'a' + 10);
        else if (h >= 'A' && h <= 'F') v |= (unsigned)(h - 'A' + 10);
        else return perr(c, "bad hex digit in \\u escape");
    }
    *out = v;
    return 0;
}

static int parse_string(pj_cur *c, char **out) {
    c->i++; /* the opening quote */
    size_t len = 0, cap = 32;
    char *buf = xrealloc(NULL, cap);
    for (;;) {
        if (c->i >= c->n) {
            free(buf);
            return perr(c, "unterminated string");
        }
        unsigned char ch = (unsigned char)c->s[c->i++];
        if (ch == '"') break;
        if (ch < 0x20) {
            free(buf);
            return perr(c, "control character in a string");
        }
        unsigned cp = ch;
        if (ch == '\\') {
            if (c->i >= c->n) {
                free(buf);
                return perr(c, "unterminated escape");
            }
            char e = c->s[c->i++];
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
                if (hex4(c, &cp) != 0) {
                    free(buf);
                    return -1;
                }
                /* a surrogate pair, or '?' for a lone half */
                if (cp >= 0xd800 && cp < 0xdc00 && c->i + 6 <= c->n && c->s[c->i] == '\\' &&
                    c->s[c->i + 1] == 'u') {
                    unsigned lo;
                    c->i += 2;
                    if (hex4(c, &lo) != 0) {
                        free(buf);
                        return -1;
                    }
                    cp = lo >= 0xdc00 && lo < 0xe000 ? 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00)
                                                     : '?';
                } else if (cp >= 0xd800 && cp < 0xe000) {
                    cp = '?';
                }
                break;
            default:
                free(buf);
                return perr(c, "unknown escape \\%c", e);
            }
            put_utf8(&buf, &len, &cap, cp);
            continue;
        }
        if (len + 2 > cap) {
            cap *= 2;
            buf = xrealloc(buf, cap);
        }
        buf[len++] = (char)ch; /* UTF-8 bytes pass through */
    }
    buf[len] = 0;
    *out = buf;
    return 0;
}

static int parse_value(pj_cur *c, pj_val *v, int depth);

static int parse_container(pj_cur *c, pj_val *v, int depth, int obj) {
    if (depth >= PL_MAX_DEPTH) return perr(c, "nested deeper than %d levels", PL_MAX_DEPTH);
    c->i++;
    v->t = obj ? PJ_OBJ : PJ_ARR;
    int cap = 0;
    ws(c);
    if (c->i < c->n && c->s[c->i] == (obj ? '}' : ']')) {
        c->i++;
        return 0;
    }
    for (;;) {
        if (v->n == cap) {
            cap = cap ? cap * 2 : 8;
            v->items = xrealloc(v->items, (size_t)cap * sizeof *v->items);
            if (obj) v->keys = xrealloc(v->keys, (size_t)cap * sizeof *v->keys);
        }
        ws(c);
        if (obj) {
            if (c->i >= c->n || c->s[c->i] != '"') return perr(c, "expected a key string");
            if (parse_string(c, &v->keys[v->n]) != 0) return -1;
            ws(c);
            if (c->i >= c->n || c->s[c->i] != ':') {
                free(v->keys[v->n]);
                return perr(c, "expected ':'");
            }
            c->i++;
        }
        memset(&v->items[v->n], 0, sizeof v->items[v->n]);
        int rc = parse_value(c, &v->items[v->n], depth + 1);
        v->n++; /* counted even on failure, so pj_free frees what was built */
        if (rc != 0) return -1;
        ws(c);
        if (c->i >= c->n) return perr(c, "unterminated %s", obj ? "object" : "array");
        char ch = c->s[c->i++];
        if (ch == ',') continue;
        if (ch == (obj ? '}' : ']')) return 0;
        c->i--;
        return perr(c, "expected ',' or '%c'", obj ? '}' : ']');
    }
}

static int parse_value(pj_cur *c, pj_val *v, int depth) {
    ws(c);
    if (c->i >= c->n) return perr(c, "expected a value");
    char ch = c->s[c->i];
    if (ch == '{' || ch == '[') return parse_container(c, v, depth, ch == '{');
    if (ch == '"') {
        v->t = PJ_STR;
        return parse_string(c, &v->str);
    }
    static const struct { const char *w; pj_type t; double num; } words[] = {
        {"null", PJ_NULL, 0}, {"true", PJ_BOOL, 1}, {"false", PJ_BOOL, 0}};
    for (int k = 0; k < 3; k++) {
        size_t l = strlen(words[k].w);
        if (c->i + l <= c->n && !strncmp(c->s + c->i, words[k].w, l)) {
            c->i += l;
            v->t = words[k].t;
            v->num = words[k].num;
            return 0;
        }
    }
    if (ch == '-' || (ch >= '0' && ch <= '9')) {
        char tmp[64];
        size_t k = 0;
        while (c->i + k < c->n && k < sizeof tmp - 1 && strchr("+-0123456789.eE", c->s[c->i + k])) {
            tmp[k] = c->s[c->i + k];
            k++;
        }
        tmp[k] = 0;
        char *end;
        double d = strtod(tmp, &end);
        if (end == tmp || (size_t)(end - tmp) != k || !isfinite(d)) return perr(c, "bad number");
        c->i += k;
        v->t = PJ_NUM;
        v->num = d;
        return 0;
    }
    return perr(c, "unexpected character '%c'", ch);
}

int pj_parse(const char *text, size_t len, pj_val *out, char *err, size_t errcap) {
    memset(out, 0, sizeof *out);
    pj_cur c = {text, 0, len, err, errcap, 0};
    if (parse_value(&c, out, 0) == 0) {
        ws(&c);
        if (c.i == c.n) return 0;
        perr(&c, "trailing characters after the value");
    }
    pj_free(out);
    return -1;
}

void pj_free(pj_val *v) {
    if (!v) return;
    for (int k = 0; k < v->n; k++) {
        pj_free(&v->items[k]);
        if (v->keys) free(v->keys[k]);
    }
    free(v->items);
    free(v->keys);
    free(v->str);
    memset(v, 0, sizeof *v);
}

const pj_val *pj_get(const pj_val *v, const char *key) {
    if (!v || v->t != PJ_OBJ) return NULL;
    for (int k = 0; k < v->n; k++)
        if (!strcmp(v->keys[k], key)) return &v->items[k];
    return NULL;
}
