/* core/util.h - small helpers every layer uses: a monotonic clock, FNV-1a
 * hashing, strict integer parsing, the edit distance of suggestions. One copy each, so they cannot drift.
 */
#ifndef SG_CORE_UTIL_H
#define SG_CORE_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include <time.h>

/* Seconds on the monotonic clock (for durations and deadlines, never dates). */
static inline double sg_now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* FNV-1a, 64 bit. Start from SG_FNV_OFFSET and chain calls to hash several
 * pieces. */
#define SG_FNV_OFFSET 0xcbf29ce484222325ull
#define SG_FNV_PRIME 0x100000001b3ull
uint64_t sg_fnv1a(uint64_t h, const void *data, size_t n);
/* The same over a NUL-terminated string (the NUL not included). */
uint64_t sg_fnv1a_str(uint64_t h, const char *s);
/* FNV-1a over 64-bit little-endian words, then the tail bytes one by one:
 * several times faster than sg_fnv1a on hundreds of MB (checkpoint
 * checksums). Not the same value as sg_fnv1a. */
uint64_t sg_fnv1a_words(uint64_t h, const void *data, size_t n);

/* Parses all of s as a base-10 integer in lo..hi. Returns 0, or -1 when s is
 * empty, has trailing characters, overflows or is out of range (the caller
 * reports it with its own context: option name, file, key). */
int sg_parse_long(const char *s, long lo, long hi, long *out);
int sg_parse_int(const char *s, int lo, int hi, int *out);

/* Edit distance of a and b counting an insertion, a deletion, a substitution
 * or a swap of two neighbours as 1 ("trian" -> "train" is 1), for "did you
 * mean" suggestions. Strings longer than 127 bytes are 1000 apart. */
int sg_edit_distance(const char *a, const char *b);

#endif
