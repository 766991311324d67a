/* core/util.c - see util.h. */
#include "core/util.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

uint64_t sg_fnv1a(uint64_t h, const void *data, size_t n) {
    const unsigned char *p = data;
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * SG_FNV_PRIME;
    return h;
}

uint64_t sg_fnv1a_str(uint64_t h, const char *s) { return sg_fnv1a(h, s, strlen(s)); }

uint64_t sg_fnv1a_words(uint64_t h, const void *data, size_t n) {
    const unsigned char *p = data;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t v;
        memcpy(&v, p + i, 8);
        h = (h ^ v) * SG_FNV_PRIME;
    }
    for (; i < n; i++) h = (h ^ p[i]) * SG_FNV_PRIME;
    return h;
}

int sg_parse_long(const char *s, long lo, long hi, long *out) {
    if (!s || !*s) return -1;
    char *end = NULL;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) return -1;
    *out = v;
    return 0;
}

int sg_parse_int(const char *s, int lo, int hi, int *out) {
    long v;
    if (sg_parse_long(s, lo, hi, &v) != 0) return -1;
    *out = (int)v;
    return 0;
}

int sg_edit_distance(const char *a, const char *b) {
    size_t la = strlen(a), lb = strlen(b);
    if (la > 127 || lb > 127) return 1000;
    int d[128][128];
    for (size_t i = 0; i <= la; i++) d[i][0] = (int)i;
    for (size_t j = 0; j <= lb; j++) d[0][j] = (int)j;
    for (size_t i = 1; i <= la; i++)
        for (size_t j = 1; j <= lb; j++) {
            int sub = d[i - 1][j - 1] + (a[i - 1] != b[j - 1]);
            int del = d[i - 1][j] + 1, ins = d[i][j - 1] + 1;
            int v = sub < del ? (sub < ins ? sub : ins) : (del < ins ? del : ins);
            if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] &&
                d[i - 2][j - 2] + 1 < v)
                v = d[i - 2][j - 2] + 1;
            d[i][j] = v;
        }
    return d[la][lb];
}
