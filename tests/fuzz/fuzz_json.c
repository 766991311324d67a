/* tests/fuzz/fuzz_json.c - fuzz harness: the JSON reader and writer
 * (io/json.h).
 *
 * Each input is read lenient, strict (SG_JSON_STRICT) and strict with
 * limits picked by its first byte (depth, string length, size), each time
 * as a tree (sg_json_parse) and with the cursor (every token's accessors
 * called, integers asked for, containers skipped now and then). The cursor
 * must not accept what the tree refuses (the same scanner), strict must
 * not accept what lenient refuses, nor the limits what strict refuses.
 *
 * Then a write -> read round trip: the input is cut at its 0xff bytes into
 * pieces, each written as a string, an integer and a double (its first 8
 * bytes) with the writer (both escape styles, one nested object, arrays),
 * and read back with the strict cursor, which must accept it and give
 * every value back exactly (doubles bit for bit, NaN/inf as null). Errors
 * are expected and not logged.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "io/json.h"

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    sg_log_set_level(SG_LOG_ERROR - 1);
    return 0;
}

static void die(const char *what) {
    fprintf(stderr, "fuzz_json: %s\n", what);
    abort();
}

/* Walks the whole document with the cursor; 0 when it is JSON. */
static int walk(const char *s, size_t n, const sg_json_opts *o, int skip) {
    sg_json_rd *r = sg_json_rd_open(s, n, o);
    sg_json_tok t;
    volatile size_t sum = 0;
    int k = 0;
    while ((t = sg_json_rd_next(r)) != SG_JSON_T_END && t != SG_JSON_T_ERROR) {
        size_t len;
        const char *str = sg_json_rd_str(r, &len);
        if (t == SG_JSON_T_KEY || t == SG_JSON_T_STRING) {
            if (str[len] != 0) die("a string is not NUL-terminated");
            for (size_t i = 0; i < len; i++) sum += (unsigned char)str[i];
        }
        if (t == SG_JSON_T_NUMBER) {
            int64_t v;
            if (!isfinite(sg_json_rd_num(r))) die("a non-finite number was accepted");
            if (k++ % 2 == 0 && sg_json_rd_int(r, &v) != SG_OK) break; /* an error too */
        }
        if (sg_json_rd_depth(r) > o->max_depth) die("deeper than max_depth");
        if (sg_json_rd_offset(r) > n) die("offset past the end");
        if (skip && (t == SG_JSON_T_ARRAY || t == SG_JSON_T_OBJECT) && (sum & 1))
            if (sg_json_rd_skip(r) != SG_OK) break;
    }
    int ok = sg_json_rd_error(r) == NULL;
    if (!ok && sg_json_rd_error_offset(r) > n) die("error offset past the end");
    sg_json_rd_close(r);
    return ok ? 0 : -1;
}

/* Reads the input as a list of pieces: its bytes cut at every 0xff. */
static void round_trip(const uint8_t *data, size_t size, unsigned flags) {
    enum { MAXP = 64 };
    char *str[MAXP];
    long long iv[MAXP];
    double dv[MAXP];
    int np = 0;
    size_t st = 0;
    for (size_t i = 0; i <= size && np < MAXP; i++) {
        if (i < size && data[i] != 0xff) continue;
        size_t len = i - st;
        char *s = malloc(len + 1);
        if (!s) abort();
        size_t k = 0;
        for (size_t j = st; j < i; j++)
            if (data[j]) s[k++] = (char)data[j]; /* the writer takes C strings */
        s[k] = 0;
        str[np] = s;
        uint64_t bits = 0;
        if (len) memcpy(&bits, data + st, len < 8 ? len : 8);
        iv[np] = (long long)bits;
        memcpy(&dv[np], &bits, sizeof bits);
        np++;
        st = i + 1;
    }
    sg_json j = {0};
    j.flags = flags;
    sg_json_begin(&j);
    for (int p = 0; p < np; p++) {
        char key[16];
        snprintf(key, sizeof key, "k%d", p);
        if (p == np / 2) sg_json_obj_begin(&j, "nested");
        sg_json_str(&j, key, str[p]);
        sg_json_int(&j, "i", iv[p]);
        sg_json_num(&j, "d", dv[p]);
        if (p == np / 2) sg_json_obj_end(&j);
    }
    sg_json_str_array(&j, "strs", (const char *const *)str, np);
    sg_json_num_array(&j, "nums", dv, np);
    sg_json_end(&j);

    /* read back: strict, but keys repeat by design ("i", "d") */
    sg_json_opts o = {.max_depth = 3, .flags = SG_JSON_NO_NUL | SG_JSON_NO_LONE_SURROGATE};
    sg_json_rd *r = sg_json_rd_open(j.buf, j.len, &o);
    if (sg_json_rd_next(r) != SG_JSON_T_OBJECT) die("round trip: not an object");
    int p = 0, in_nested = 0, done = 0;
    while (!done) {
        sg_json_tok t = sg_json_rd_next(r);
        if (t == SG_JSON_T_ERROR) {
            fprintf(stderr, "fuzz_json: round trip refused: %s at byte %zu of:\n%s\n",
                    sg_json_rd_error(r), sg_json_rd_error_offset(r), j.buf);
            abort();
        }
        if (t == SG_JSON_T_OBJECT_END) {
            if (in_nested) {
                in_nested = 0;
                continue;
            }
            done = 1;
            break;
        }
        if (t != SG_JSON_T_KEY) die("round trip: expected a key");
        const char *k = sg_json_rd_str(r, NULL);
        if (strcmp(k, "nested") == 0) {
            if (sg_json_rd_next(r) != SG_JSON_T_OBJECT) die("round trip: nested");
            in_nested = 1;
            continue;
        }
        if (strcmp(k, "strs") == 0 || strcmp(k, "nums") == 0) {
            int nums = k[0] == 'n';
            if (sg_json_rd_next(r) != SG_JSON_T_ARRAY) die("round trip: array");
            for (int q = 0;; q++) {
                t = sg_json_rd_next(r);
                if (t == SG_JSON_T_ARRAY_END) {
                    if (q != np) die("round trip: array length");
                    break;
                }
                if (q >= np) die("round trip: array too long");
                if (nums) {
                    double want = dv[q];
                    if (!isfinite(want) ? t != SG_JSON_T_NULL
                                        : t != SG_JSON_T_NUMBER || sg_json_rd_num(r) != want)
                        die("round trip: a double in the array differs");
                } else {
                    size_t len;
                    const char *s = sg_json_rd_str(r, &len);
                    if (t != SG_JSON_T_STRING || len != strlen(str[q]) || strcmp(s, str[q]))
                        die("round trip: a string in the array differs");
                }
            }
            continue;
        }
        /* k<p>, then i, then d */
        char want_key[16];
        snprintf(want_key, sizeof want_key, "k%d", p);
        if (strcmp(k, want_key) != 0) die("round trip: key order");
        size_t len;
        if (sg_json_rd_next(r) != SG_JSON_T_STRING) die("round trip: string type");
        const char *s = sg_json_rd_str(r, &len);
        if (len != strlen(str[p]) || memcmp(s, str[p], len) != 0) die("round trip: string differs");
        int64_t v;
        if (sg_json_rd_next(r) != SG_JSON_T_KEY || sg_json_rd_next(r) != SG_JSON_T_NUMBER ||
            sg_json_rd_int(r, &v) != SG_OK || v != iv[p])
            die("round trip: integer differs");
        if (sg_json_rd_next(r) != SG_JSON_T_KEY) die("round trip: key d");
        t = sg_json_rd_next(r);
        if (!isfinite(dv[p]) ? t != SG_JSON_T_NULL
                             : t != SG_JSON_T_NUMBER || sg_json_rd_num(r) != dv[p])
            die("round trip: double differs");
        p++;
    }
    if (p != np) die("round trip: members missing");
    if (sg_json_rd_next(r) != SG_JSON_T_END) die("round trip: not at the end");
    sg_json_rd_close(r);
    sg_json_free(&j);
    for (int q = 0; q < np; q++) free(str[q]);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static int init;
    if (!init) {
        LLVMFuzzerInitialize(NULL, NULL);
        init = 1;
    }
    const char *s = (const char *)data;
    sg_json_opts lenient = {.max_depth = SG_JSON_DEFAULT_DEPTH};
    sg_json_opts strict = lenient;
    strict.flags = SG_JSON_STRICT;
    /* limits picked by the first byte, so every limit's error path is
     * reached (and only refuses more) */
    unsigned sel = size ? data[0] : 0;
    sg_json_opts limited = strict;
    limited.max_depth = 1 + (int)(sel % 24);
    limited.max_string = sel & 0x80 ? 16 : 0;
    limited.max_bytes = sel & 0x40 ? size / 2 + 1 : 0;

    char err[320];
    sg_json_val v;
    int tree_lenient = sg_json_parse(s, size, &lenient, &v, err, sizeof err) == SG_OK;
    if (tree_lenient) {
        (void)sg_json_get(&v, "iter");
        sg_json_val_free(&v);
    } else if (!strstr(err, " at byte ")) {
        die("a tree error without its offset");
    }
    /* (the walk can refuse what the tree accepts: it asks for integers) */
    if (walk(s, size, &lenient, 0) == 0 && !tree_lenient)
        die("cursor accepted what the tree refused");
    int tree_strict = sg_json_parse(s, size, &strict, &v, err, sizeof err) == SG_OK;
    if (tree_strict) sg_json_val_free(&v);
    if (tree_strict && !tree_lenient) die("strict accepted what lenient refused");
    (void)walk(s, size, &strict, 1);
    int tree_limited = sg_json_parse(s, size, &limited, &v, err, sizeof err) == SG_OK;
    if (tree_limited) sg_json_val_free(&v);
    if (tree_limited && !tree_strict) die("limits accepted what strict refused");
    (void)walk(s, size, &limited, 1);

    round_trip(data, size, 0);
    round_trip(data, size, SG_JSON_W_U_ESCAPES);
    return 0;
}
