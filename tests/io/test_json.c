/* tests/io/test_json.c - the JSON reader and writer (io/json.h): valid
 * documents through the tree and the cursor, each limit (depth, size,
 * string length) with its error, the strict options (NUL, lone surrogate,
 * duplicate key) against the lenient reading, numbers, escapes and UTF-8,
 * errors with their offsets, the writer's escaping and non-finite numbers,
 * and a write -> read round trip.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/json.h"
#include "testutil.h"

/* Parses s (strlen) with opts; the error text in err, SG_OK or not. */
static sg_status parse(const char *s, const sg_json_opts *o, sg_json_val *v, char *err,
                       size_t cap) {
    return sg_json_parse(s, strlen(s), o, v, err, cap);
}

/* 1 when s fails to parse with an error containing `want`. */
static int refuses(const char *s, const sg_json_opts *o, const char *want) {
    sg_json_val v;
    char err[400];
    if (parse(s, o, &v, err, sizeof err) == SG_OK) {
        fprintf(stderr, "  accepted: %s\n", s);
        sg_json_val_free(&v);
        return 0;
    }
    if (!strstr(err, want)) {
        fprintf(stderr, "  %s: error '%s', want '%s'\n", s, err, want);
        return 0;
    }
    if (v.type != SG_JSON_NULL || v.n != 0) return 0; /* left empty */
    return 1;
}

static void test_valid_tree(void) {
    const char *doc = " {\"iter\": 40, \"miou\": 0.5, \"ok\": true, \"no\": false, \"x\": null,\n"
                      "  \"classes\": [\"road\", \"sky\"], \"nested\": {\"a\": [1, [2, {}], []]},"
                      " \"\": \"empty key\"}\t\r\n";
    sg_json_val v;
    char err[256];
    CHECK_MSG(parse(doc, NULL, &v, err, sizeof err) == SG_OK, "%s", err);
    CHECK(v.type == SG_JSON_OBJ && v.n == 8);
    CHECK(strcmp(v.keys[0], "iter") == 0 && v.items[0].type == SG_JSON_NUM && v.items[0].num == 40);
    CHECK(sg_json_get(&v, "miou")->num == 0.5);
    CHECK(sg_json_get(&v, "ok")->type == SG_JSON_BOOL && sg_json_get(&v, "ok")->num == 1);
    CHECK(sg_json_get(&v, "no")->type == SG_JSON_BOOL && sg_json_get(&v, "no")->num == 0);
    CHECK(sg_json_get(&v, "x")->type == SG_JSON_NULL);
    const sg_json_val *cl = sg_json_get(&v, "classes");
    CHECK(cl && cl->type == SG_JSON_ARR && cl->n == 2);
    CHECK(cl->items[1].type == SG_JSON_STR && strcmp(cl->items[1].str, "sky") == 0 &&
          cl->items[1].len == 3);
    const sg_json_val *a = sg_json_get(sg_json_get(&v, "nested"), "a");
    CHECK(a && a->type == SG_JSON_ARR && a->n == 3);
    CHECK(a->items[1].type == SG_JSON_ARR && a->items[1].n == 2);
    CHECK(a->items[1].items[1].type == SG_JSON_OBJ && a->items[1].items[1].n == 0);
    CHECK(a->items[2].type == SG_JSON_ARR && a->items[2].n == 0);
    CHECK(strcmp(sg_json_get(&v, "")->str, "empty key") == 0);
    CHECK(sg_json_get(&v, "absent") == NULL);
    CHECK(sg_json_get(cl, "road") == NULL); /* not an object */
    CHECK(sg_json_get(NULL, "x") == NULL);
    sg_json_val_free(&v);
    CHECK(v.n == 0 && v.items == NULL);

    /* any value is a document */
    CHECK(parse("\"just a string\"", NULL, &v, err, sizeof err) == SG_OK && v.type == SG_JSON_STR);
    sg_json_val_free(&v);
    CHECK(parse(" -1.5e3 ", NULL, &v, err, sizeof err) == SG_OK && v.num == -1500);
    sg_json_val_free(&v);
    CHECK(parse("null", NULL, &v, err, sizeof err) == SG_OK && v.type == SG_JSON_NULL);
    sg_json_val_free(&v);
}

static void test_cursor(void) {
    const char *doc = "{\"a\":[1,\"s\",{\"b\":null}],\"skip\":{\"x\":[[],{}]},\"c\":true}";
    sg_json_rd *r = sg_json_rd_open(doc, strlen(doc), NULL);
    static const sg_json_tok want[] = {SG_JSON_T_OBJECT,    SG_JSON_T_KEY,    SG_JSON_T_ARRAY,
                                       SG_JSON_T_NUMBER,    SG_JSON_T_STRING, SG_JSON_T_OBJECT,
                                       SG_JSON_T_KEY,       SG_JSON_T_NULL,   SG_JSON_T_OBJECT_END,
                                       SG_JSON_T_ARRAY_END, SG_JSON_T_KEY};
    for (size_t i = 0; i < sizeof want / sizeof *want; i++) {
        sg_json_tok t = sg_json_rd_next(r);
        CHECK_MSG(t == want[i], "token %zu: %d, want %d", i, (int)t, (int)want[i]);
        if (i == 0) CHECK(sg_json_rd_depth(r) == 1 && sg_json_rd_offset(r) == 0);
        if (i == 1) CHECK(strcmp(sg_json_rd_str(r, NULL), "a") == 0);
        if (i == 3) CHECK(sg_json_rd_num(r) == 1 && sg_json_rd_offset(r) == 6);
        if (i == 5) CHECK(sg_json_rd_depth(r) == 3);
    }
    CHECK(strcmp(sg_json_rd_str(r, NULL), "skip") == 0);
    CHECK(sg_json_rd_next(r) == SG_JSON_T_OBJECT);
    CHECK(sg_json_rd_skip(r) == SG_OK); /* the whole {"x":[[],{}]} */
    CHECK(sg_json_rd_depth(r) == 1);
    CHECK(sg_json_rd_next(r) == SG_JSON_T_KEY);
    char *c = sg_json_rd_strdup(r);
    CHECK(strcmp(c, "c") == 0);
    free(c);
    CHECK(sg_json_rd_next(r) == SG_JSON_T_TRUE);
    CHECK(sg_json_rd_skip(r) == SG_OK); /* a scalar: nothing */
    CHECK(sg_json_rd_next(r) == SG_JSON_T_OBJECT_END && sg_json_rd_depth(r) == 0);
    CHECK(sg_json_rd_next(r) == SG_JSON_T_END);
    CHECK(sg_json_rd_next(r) == SG_JSON_T_END);
    CHECK(sg_json_rd_error(r) == NULL);
    sg_json_rd_close(r);

    /* the caller's own refusal becomes the reader's error, at the token */
    r = sg_json_rd_open("[1, \"x\"]", 8, NULL);
    CHECK(sg_json_rd_next(r) == SG_JSON_T_ARRAY && sg_json_rd_next(r) == SG_JSON_T_NUMBER);
    CHECK(sg_json_rd_next(r) == SG_JSON_T_STRING);
    CHECK(sg_json_rd_fail(r, "expected a number, not '%s'", "x") == SG_ERR_RUNTIME);
    CHECK(strcmp(sg_json_rd_error(r), "expected a number, not 'x'") == 0);
    CHECK(sg_json_rd_error_offset(r) == 4);
    CHECK(sg_json_rd_next(r) == SG_JSON_T_ERROR); /* sticky */
    sg_json_rd_fail(r, "a second reason");        /* the first one stays */
    CHECK(strcmp(sg_json_rd_error(r), "expected a number, not 'x'") == 0);
    sg_json_rd_close(r);
}

static void test_limits(void) {
    /* depth: max_depth containers open at once, one more is refused */
    sg_json_opts o = {.max_depth = 3};
    sg_json_val v;
    char err[256];
    CHECK(parse("[[[1]]]", &o, &v, err, sizeof err) == SG_OK);
    sg_json_val_free(&v);
    CHECK(refuses("[[[[1]]]]", &o, "nested deeper than 3 levels at byte 3"));
    CHECK(refuses("{\"a\":{\"b\":{\"c\":{}}}}", &o, "nested deeper than 3 levels at byte 15"));
    /* the default depth, and the cap that bounds the tree's recursion */
    char deep[2 * SG_JSON_DEPTH_CAP + 8];
    int n = SG_JSON_DEFAULT_DEPTH;
    memset(deep, '[', (size_t)n);
    memset(deep + n, ']', (size_t)n);
    deep[2 * n] = 0;
    CHECK(parse(deep, NULL, &v, err, sizeof err) == SG_OK);
    sg_json_val_free(&v);
    deep[n] = '[';
    deep[n + 1] = 0;
    CHECK(refuses(deep, NULL, "nested deeper than 64 levels"));
    o.max_depth = 1 << 20;
    n = SG_JSON_DEPTH_CAP + 1;
    memset(deep, '[', (size_t)n);
    deep[n] = 0;
    CHECK(refuses(deep, &o, "nested deeper than 1024 levels"));

    /* size */
    sg_json_opts sz = {.max_bytes = 10};
    CHECK(parse("[1,2,3,45]", &sz, &v, err, sizeof err) == SG_OK);
    sg_json_val_free(&v);
    CHECK(refuses("[1,2,3,456]", &sz, "document of 11 bytes is above the 10-byte limit at byte 0"));

    /* string length: decoded bytes, keys too */
    sg_json_opts sl = {.max_string = 4};
    CHECK(parse("[\"abcd\",\"\\u00e9\\u00e9\"]", &sl, &v, err, sizeof err) == SG_OK);
    sg_json_val_free(&v);
    CHECK(refuses("[\"abcde\"]", &sl, "string longer than the 4-byte limit"));
    CHECK(refuses("{\"abcde\":1}", &sl, "string longer than the 4-byte limit"));
    CHECK(refuses("[\"\\u00e9\\u00e9\\u00e9\"]", &sl, "string longer than the 4-byte limit"));
}

static void test_strict(void) {
    sg_json_opts strict = {.flags = SG_JSON_STRICT};
    sg_json_val v;
    char err[256];
    /* NUL: refused strict, a NUL byte inside the string lenient */
    CHECK(refuses("[\"a\\u0000x\"]", &strict, "\\u0000 (NUL) in a string at byte 3"));
    CHECK(refuses("{\"a\\u0000\":1}", &strict, "(NUL)"));
    CHECK(parse("[\"a\\u0000x\"]", NULL, &v, err, sizeof err) == SG_OK);
    CHECK(v.items[0].len == 3 && memcmp(v.items[0].str, "a\0x", 3) == 0);
    sg_json_val_free(&v);
    /* lone surrogates: a high one alone, before a non-low escape, at the
     * end; a low one alone. Lenient: '?' (and what follows is kept) */
    const char *lone[] = {"[\"\\ud800x\"]", "[\"\\ud800\\u0041\"]", "[\"\\ud800\"]",
                          "[\"\\udc00\"]", "[\"\\ud800\\ud800\"]"};
    for (size_t i = 0; i < sizeof lone / sizeof *lone; i++)
        CHECK(refuses(lone[i], &strict, "unpaired UTF-16 surrogate in a \\u escape at byte 2"));
    CHECK(parse("[\"\\ud800\\u0041\"]", NULL, &v, err, sizeof err) == SG_OK);
    CHECK(strcmp(v.items[0].str, "?A") == 0);
    sg_json_val_free(&v);
    CHECK(parse("[\"\\udc00x\"]", NULL, &v, err, sizeof err) == SG_OK);
    CHECK(strcmp(v.items[0].str, "?x") == 0);
    sg_json_val_free(&v);
    /* a pair is one character, strict or not */
    CHECK(parse("[\"\\ud83d\\ude00\"]", &strict, &v, err, sizeof err) == SG_OK);
    CHECK(strcmp(v.items[0].str, "\xf0\x9f\x98\x80") == 0);
    sg_json_val_free(&v);

    /* duplicate keys: per object (the same key in two objects is fine) */
    CHECK(refuses("{\"a\":1,\"b\":2,\"a\":3}", &strict,
                  "key 'a' appears twice in one object at byte 13"));
    CHECK(refuses("{\"x\":{\"a\":1,\"a\":2}}", &strict, "key 'a' appears twice"));
    /* keys are compared decoded: "\u0061" is "a" */
    CHECK(refuses("{\"a\":1,\"\\u0061\":2}", &strict, "key 'a' appears twice"));
    CHECK(parse("{\"a\":{\"a\":1},\"b\":{\"a\":2},\"c\":[{\"a\":3},{\"a\":4}]}", &strict, &v, err,
                sizeof err) == SG_OK);
    sg_json_val_free(&v);
    CHECK(parse("{\"a\":1,\"a\":2}", NULL, &v, err, sizeof err) == SG_OK); /* lenient: first wins */
    CHECK(sg_json_get(&v, "a")->num == 1);
    sg_json_val_free(&v);

    /* many keys, many objects: each object's set is emptied on close and
     * reused, so siblings never see each other's keys */
    size_t cap = 4u << 20, len = 0;
    char *big = malloc(cap);
    CHECK(big != NULL);
    len += (size_t)snprintf(big + len, cap - len, "{");
    for (int i = 0; i < 2000; i++) {
        len += (size_t)snprintf(big + len, cap - len, "%s\"o%d\":{", i ? "," : "", i);
        for (int k = 0; k < 40; k++)
            len += (size_t)snprintf(big + len, cap - len, "%s\"k%d\":%d", k ? "," : "",
                                    (k * 7 + i) % 40, k); /* a permutation of 0..39 */
        len += (size_t)snprintf(big + len, cap - len, "}");
    }
    len += (size_t)snprintf(big + len, cap - len, "}");
    sg_status st = sg_json_parse(big, len, &strict, &v, err, sizeof err);
    CHECK_MSG(st == SG_OK, "%s", err);
    CHECK(v.n == 2000 && v.items[1999].n == 40);
    sg_json_val_free(&v);
    /* the last object repeats a key (its keys are k0..k39): found */
    len -= 2;
    len += (size_t)snprintf(big + len, cap - len, ",\"k3\":9}}");
    int found = sg_json_parse(big, len, &strict, &v, err, sizeof err) != SG_OK &&
                strstr(err, "appears twice") != NULL;
    free(big);
    CHECK_MSG(found, "%s", err);
}

static void test_numbers(void) {
    sg_json_val v;
    char err[256];
    CHECK(parse("[0, -0, 12, -3.25, 1e3, 2E-2, 1.5e+2, 123456789012, 5e-324]", NULL, &v, err,
                sizeof err) == SG_OK);
    double want[] = {0, -0.0, 12, -3.25, 1000, 0.02, 150, 123456789012.0, 5e-324};
    CHECK(v.n == 9);
    for (int i = 0; i < 9; i++) CHECK_MSG(v.items[i].num == want[i], "item %d", i);
    CHECK(signbit(v.items[1].num));
    sg_json_val_free(&v);
    /* RFC 8259's grammar */
    CHECK(refuses("[01]", NULL, "expected ',' or ']' at byte 2"));
    CHECK(refuses("[1.]", NULL, "bad number (expected a digit after '.') at byte 1"));
    CHECK(refuses("[.5]", NULL, "unexpected character '.'"));
    CHECK(refuses("[+1]", NULL, "unexpected character '+'"));
    CHECK(refuses("[-]", NULL, "bad number (expected a digit) at byte 1"));
    CHECK(refuses("[1e]", NULL, "bad number (expected a digit in the exponent)"));
    CHECK(refuses("[1e+]", NULL, "bad number (expected a digit in the exponent)"));
    CHECK(refuses("[NaN]", NULL, "unexpected character 'N'"));
    CHECK(refuses("[1e400]", NULL, "number out of range (not a finite double) at byte 1"));
    CHECK(refuses("[-1e400]", NULL, "number out of range"));

    /* exact integers through the cursor */
    const char *doc = "[9223372036854775807,-9223372036854775808,0,-7,9223372036854775808,1.0,2e1]";
    sg_json_rd *r = sg_json_rd_open(doc, strlen(doc), NULL);
    int64_t x;
    CHECK(sg_json_rd_next(r) == SG_JSON_T_ARRAY);
    const int64_t exact[] = {INT64_MAX, INT64_MIN, 0, -7};
    for (int i = 0; i < 4; i++) {
        CHECK(sg_json_rd_next(r) == SG_JSON_T_NUMBER);
        CHECK(sg_json_rd_int(r, &x) == SG_OK && x == exact[i]);
    }
    CHECK(sg_json_rd_next(r) == SG_JSON_T_NUMBER && sg_json_rd_int(r, &x) == SG_ERR_RUNTIME);
    CHECK(strcmp(sg_json_rd_error(r), "number too large") == 0 && sg_json_rd_error_offset(r) == 47);
    CHECK(sg_json_rd_next(r) == SG_JSON_T_ERROR);
    sg_json_rd_close(r);
    const char *frac[] = {"1.0", "2e1", "\"3\"", "true"};
    for (int i = 0; i < 4; i++) {
        r = sg_json_rd_open(frac[i], strlen(frac[i]), NULL);
        sg_json_rd_next(r);
        CHECK(sg_json_rd_int(r, &x) == SG_ERR_RUNTIME);
        CHECK(strcmp(sg_json_rd_error(r), "expected an integer") == 0);
        sg_json_rd_close(r);
    }
}

static void test_strings(void) {
    sg_json_val v;
    char err[256];
    /* every escape, \u to UTF-8 of 1-4 bytes, raw UTF-8 passed through */
    CHECK(parse("[\"\\\"\\\\\\/\\b\\f\\n\\r\\t\", \"\\u0041\\u00e9\\u20ac\\ud83d\\ude00\","
                " \"caf\xc3\xa9 \xe2\x82\xac\", \"\"]",
                NULL, &v, err, sizeof err) == SG_OK);
    CHECK(strcmp(v.items[0].str, "\"\\/\b\f\n\r\t") == 0);
    CHECK(strcmp(v.items[1].str, "A\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80") == 0);
    CHECK(v.items[1].len == 1 + 2 + 3 + 4);
    CHECK(strcmp(v.items[2].str, "caf\xc3\xa9 \xe2\x82\xac") == 0);
    CHECK(v.items[3].len == 0 && v.items[3].str[0] == 0);
    sg_json_val_free(&v);
    CHECK(parse("\"\\u00E9\\u00e9\"", NULL, &v, err, sizeof err) == SG_OK); /* hex in either case */
    CHECK(strcmp(v.str, "\xc3\xa9\xc3\xa9") == 0);
    sg_json_val_free(&v);
    CHECK(refuses("[\"a\nb\"]", NULL, "control character in a string at byte 3"));
    CHECK(refuses("[\"a\\x\"]", NULL, "unknown escape '\\x' at byte 3"));
    CHECK(refuses("[\"a\\u12g4\"]", NULL, "bad \\u escape (expected 4 hex digits) at byte 3"));
    CHECK(refuses("[\"a\\u12", NULL, "bad \\u escape"));
    CHECK(refuses("[\"abc", NULL, "unterminated string at byte 5"));
    CHECK(refuses("[\"abc\\", NULL, "unterminated escape at byte 5"));
}

static void test_errors(void) {
    /* the messages `segtrain plot` and the safetensors reader report */
    CHECK(refuses("", NULL, "expected a value at byte 0"));
    CHECK(refuses("   ", NULL, "expected a value at byte 3"));
    CHECK(refuses("{\"iter\":2,\"loss\":}", NULL, "unexpected character '}' at byte 17"));
    CHECK(refuses("{\"a\" 1}", NULL, "expected ':' at byte 5"));
    CHECK(refuses("{\"a\":1 \"b\":2}", NULL, "expected ',' or '}' at byte 7"));
    CHECK(refuses("[1 2]", NULL, "expected ',' or ']' at byte 3"));
    CHECK(refuses("{\"a\":1,}", NULL, "expected a key string at byte 7"));
    CHECK(refuses("{1:2}", NULL, "expected a key string at byte 1"));
    CHECK(refuses("[1,]", NULL, "unexpected character ']' at byte 3"));
    CHECK(refuses("{\"a\":1", NULL, "unterminated object at byte 6"));
    CHECK(refuses("[1,[2]", NULL, "unterminated array at byte 6"));
    CHECK(refuses("{} x", NULL, "trailing characters after the value at byte 3"));
    CHECK(refuses("[] []", NULL, "trailing characters"));
    CHECK(refuses("[tru]", NULL, "unexpected character 't' at byte 1"));
    CHECK(refuses("[\x01]", NULL, "unexpected character 0x01 at byte 1"));
    CHECK(refuses("]", NULL, "unexpected character ']' at byte 0"));
    /* a partial tree is freed, not leaked (ASan in the fuzz build) */
    CHECK(refuses("{\"a\":[1,{\"b\":\"c\"},\"d\"],\"e\":{\"f\":[", NULL, "expected a value"));
    /* a small error buffer is cut, not overrun */
    sg_json_val v;
    char small[8];
    CHECK(sg_json_parse("[", 1, NULL, &v, small, sizeof small) == SG_ERR_RUNTIME);
    CHECK(strlen(small) == 7);
}

static void test_writer(void) {
    sg_json j = {0};
    sg_json_begin(&j);
    sg_json_int(&j, "i", -7);
    sg_json_num(&j, "x", 0.1);
    sg_json_num(&j, "nan", NAN);
    sg_json_num(&j, "inf", -INFINITY);
    sg_json_str(&j, "s\n", "a\"b\\c\n\t\r\x01\x1f\x7f\xc3\xa9/");
    double d[3] = {1e-5, NAN, 3};
    sg_json_num_array(&j, "v", d, 3);
    long long iv[2] = {1, -2};
    sg_json_int_array(&j, "iv", iv, 2);
    sg_json_int_array(&j, "none", iv, 0);
    const char *ss[2] = {"x", "y\"z"};
    sg_json_str_array(&j, "ss", ss, 2);
    sg_json_raw(&j, "raw", "{\"q\":1}");
    sg_json_obj_begin(&j, "obj");
    sg_json_int(&j, "a", 1);
    sg_json_obj_begin(&j, "in");
    sg_json_obj_end(&j);
    sg_json_int(&j, "b", 2);
    sg_json_obj_end(&j);
    sg_json_int(&j, "after", 3);
    sg_json_end(&j);
    const char *want =
        "{\"i\":-7,\"x\":0.10000000000000001,\"nan\":null,\"inf\":null,"
        "\"s\\n\":\"a\\\"b\\\\c\\n\\t\\u000d\\u0001\\u001f\x7f\xc3\xa9/\","
        "\"v\":[1.0000000000000001e-05,null,3],\"iv\":[1,-2],\"none\":[],\"ss\":[\"x\",\"y\\\"z\"],"
        "\"raw\":{\"q\":1},\"obj\":{\"a\":1,\"in\":{},\"b\":2},\"after\":3}";
    CHECK_MSG(strcmp(j.buf, want) == 0, "\n%s\nwant\n%s", j.buf, want);
    CHECK(j.len == strlen(want));
    /* begin resets (the buffer is reused) */
    sg_json_begin(&j);
    sg_json_end(&j);
    CHECK(strcmp(j.buf, "{}") == 0);
    sg_json_free(&j);
    CHECK(j.buf == NULL && j.len == 0);

    /* the safetensors header's style: every control character as \u00XX */
    j.flags = SG_JSON_W_U_ESCAPES;
    sg_json_begin(&j);
    sg_json_str(&j, "k\n", "a\nb\tc\"\\");
    sg_json_end(&j);
    CHECK_MSG(strcmp(j.buf, "{\"k\\u000a\":\"a\\u000ab\\u0009c\\\"\\\\\"}") == 0, "%s", j.buf);
    sg_json_free(&j);
}

static void test_round_trip(void) {
    const char *strs[] = {"",
                          "plain",
                          "quote \" backslash \\ slash /",
                          "ctl \x01\x02\x1f\x7f",
                          "new\nline\ttab\rcr\b\f",
                          "utf8 caf\xc3\xa9 \xf0\x9f\x98\x80",
                          "bad utf8 \xff\xfe"};
    double nums[] = {0,          -0.0, 1,       -1.5, 0.1, 1e-300, 5e-324, 1.7976931348623157e308,
                     123456.789, NAN,  INFINITY};
    long long ints[] = {0, -1, 1, INT64_MAX, INT64_MIN, 1234567890123456789LL};
    for (unsigned style = 0; style < 2; style++) {
        sg_json j = {0};
        j.flags = style ? SG_JSON_W_U_ESCAPES : 0;
        sg_json_begin(&j);
        for (int i = 0; i < 7; i++) {
            char k[8];
            snprintf(k, sizeof k, "s%d", i);
            sg_json_str(&j, k, strs[i]);
        }
        sg_json_str(&j, strs[5], "a key with UTF-8"); /* keys go through the same escaping */
        sg_json_num_array(&j, "nums", nums, 11);
        sg_json_int_array(&j, "ints", ints, 6);
        sg_json_obj_begin(&j, "nested");
        sg_json_str_array(&j, "strs", strs, 7);
        sg_json_obj_end(&j);
        sg_json_end(&j);

        /* the tree, strict: the writer's output is always accepted */
        sg_json_opts strict = {.flags = SG_JSON_STRICT, .max_depth = 3};
        sg_json_val v;
        char err[256];
        CHECK_MSG(sg_json_parse(j.buf, j.len, &strict, &v, err, sizeof err) == SG_OK, "%s in %s",
                  err, j.buf);
        for (int i = 0; i < 7; i++) {
            CHECK(v.items[i].type == SG_JSON_STR && strcmp(v.items[i].str, strs[i]) == 0);
            CHECK(v.items[i].len == strlen(strs[i]));
        }
        CHECK(strcmp(v.keys[7], strs[5]) == 0);
        const sg_json_val *n = sg_json_get(&v, "nums");
        CHECK(n && n->n == 11);
        for (int i = 0; i < 11; i++) {
            if (isfinite(nums[i])) {
                CHECK_MSG(n->items[i].type == SG_JSON_NUM && n->items[i].num == nums[i] &&
                              signbit(n->items[i].num) == signbit(nums[i]),
                          "nums[%d]", i); /* %.17g reads back bit-exact */
            } else {
                CHECK(n->items[i].type == SG_JSON_NULL);
            }
        }
        const sg_json_val *ns = sg_json_get(sg_json_get(&v, "nested"), "strs");
        CHECK(ns && ns->n == 7 && strcmp(ns->items[6].str, strs[6]) == 0);
        sg_json_val_free(&v);

        /* integers exactly, through the cursor */
        sg_json_rd *r = sg_json_rd_open(j.buf, j.len, &strict);
        sg_json_tok t;
        int seen = 0;
        while ((t = sg_json_rd_next(r)) != SG_JSON_T_END && t != SG_JSON_T_ERROR)
            if (t == SG_JSON_T_KEY && strcmp(sg_json_rd_str(r, NULL), "ints") == 0) {
                CHECK(sg_json_rd_next(r) == SG_JSON_T_ARRAY);
                for (int i = 0; i < 6; i++) {
                    int64_t x;
                    CHECK(sg_json_rd_next(r) == SG_JSON_T_NUMBER);
                    CHECK(sg_json_rd_int(r, &x) == SG_OK && x == ints[i]);
                }
                seen = 1;
            }
        CHECK(t == SG_JSON_T_END && seen);
        sg_json_rd_close(r);
        sg_json_free(&j);
    }
}

int main(void) {
    TEST_RUN(test_valid_tree);
    TEST_RUN(test_cursor);
    TEST_RUN(test_limits);
    TEST_RUN(test_strict);
    TEST_RUN(test_numbers);
    TEST_RUN(test_strings);
    TEST_RUN(test_errors);
    TEST_RUN(test_writer);
    TEST_RUN(test_round_trip);
    return TEST_EXIT();
}
