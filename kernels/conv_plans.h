/* kernels/conv_plans.h - the convolution plan cache: which algorithm (with
 * its math type and workspace) each convolution geometry and precision runs
 * in each direction, chosen once and kept in memory and in a small file, so
 * that a resumed or repeated run does not search again (cuDNN's
 * cudnnFind* timing costs seconds per geometry). Backend-neutral: the values
 * are plain integers the backend gives meaning to (kernels/cuda/cuda_conv.cu:
 * cuDNN algorithm and math type enums).
 *
 * The file is untrusted input, read whole (at most SG_CONV_PLANS_MAX entries,
 * an exact size), little-endian:
 *   "SGCPLAN\0", u32 version (1), u32 entry count, char device[128] (the GPU
 *   name, NUL-padded), u64 library version (cudnnGetVersion()), then per
 *   entry i32 key[SG_CONV_PLAN_KEY_LEN], i32 algo[3], i32 math[3],
 *   u64 workspace[3], then u64 FNV-1a (core/util.h) of every byte before it.
 * A file that is missing is no error; one that is truncated, corrupt (bad
 * magic, version, size, checksum or a value out of range) or foreign (another
 * device name or library version) is ignored with a warning naming the file
 * and why, and the cache starts empty (the run searches and rewrites it).
 * Saving writes <path>.tmp.<pid> and renames it over <path> (atomic: ranks
 * sharing one file never see half of one).
 *
 * Not thread-safe: one cache per backend, used by the thread running ops. */
#ifndef SG_KERNELS_CONV_PLANS_H
#define SG_KERNELS_CONV_PLANS_H

#include <stddef.h>
#include <stdint.h>

#include "core/status.h"
#include "kernels/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

#define SG_CONV_PLANS_MAX 4096    /* entries per file and per cache */
#define SG_CONV_PLANS_VERSION 1   /* the file format's version */
#define SG_CONV_PLAN_KEY_LEN 20   /* geometry (16) + mode (4) */
#define SG_CONV_PLAN_MAX_ALGO 256 /* algo and math values: 0 .. this - 1 */
#define SG_CONV_PLAN_MAX_WS ((uint64_t)1 << 40)

enum { SG_CONV_DIR_FWD = 0, SG_CONV_DIR_BWD_DATA = 1, SG_CONV_DIR_BWD_FILTER = 2 };

/* What is looked up: the geometry (groups 0 stored as 1) and the mode the
 * choice depends on (precision, TF32 allowed, deterministic only, measured
 * rather than heuristic). */
typedef struct sg_conv_plan_key {
    int32_t v[SG_CONV_PLAN_KEY_LEN];
} sg_conv_plan_key;

/* The choice in each direction (SG_CONV_DIR_*). */
typedef struct sg_conv_plan {
    int32_t algo[3], math[3];
    uint64_t workspace[3];
} sg_conv_plan;

typedef struct sg_conv_plans_stats {
    long hits, misses; /* lookups so far */
    long loaded;       /* entries read from the file */
    long entries;      /* entries now */
    long ignored;      /* files ignored (corrupt or foreign) */
    long saves;        /* files written */
} sg_conv_plans_stats;

typedef struct sg_conv_plans sg_conv_plans;

/* The key of geometry d in a mode (each flag 0 or 1, precision SG_PRECISION_*). */
sg_conv_plan_key sg_conv_plan_key_make(const sg_conv_desc *d, int precision, int tf32,
                                       int deterministic, int measured);

/* An empty cache for one device (its name, cut at 127 bytes) and library
 * version. Never NULL (fatal when out of memory). */
sg_conv_plans *sg_conv_plans_create(const char *device, uint64_t lib_version);
void sg_conv_plans_destroy(sg_conv_plans *p); /* NULL allowed */

/* 1 and *out filled when key is cached (a hit), else 0 (a miss); counted. */
int sg_conv_plans_lookup(sg_conv_plans *p, const sg_conv_plan_key *key, sg_conv_plan *out);
/* Adds or replaces key's plan. SG_OK, or SG_ERR_RUNTIME after a warning
 * when the cache holds SG_CONV_PLANS_MAX entries already (nothing added)
 * or a value is out of range. */
sg_status sg_conv_plans_insert(sg_conv_plans *p, const sg_conv_plan_key *key,
                               const sg_conv_plan *plan);
/* Removes key (a cached plan the library refused). 1 if it was there, else 0. */
int sg_conv_plans_remove(sg_conv_plans *p, const sg_conv_plan_key *key);

/* What loading a file did. */
typedef enum {
    SG_PLANS_LOADED = 0, /* entries added */
    SG_PLANS_ABSENT = 1, /* no such file: nothing to do */
    SG_PLANS_IGNORED = 2 /* unreadable, corrupt or foreign: warned, nothing added */
} sg_conv_plans_load_result;
/* Reads path into the cache (entries already there are replaced). why (may
 * be NULL) receives the reason when IGNORED. */
sg_conv_plans_load_result sg_conv_plans_load(sg_conv_plans *p, const char *path, char *why,
                                             size_t why_len);
/* Writes the whole cache to path atomically. SG_OK, or SG_ERR_RUNTIME after
 * a warning naming the file and errno (a cache that cannot be written only
 * costs the next run a search). */
sg_status sg_conv_plans_save(sg_conv_plans *p, const char *path);

void sg_conv_plans_get_stats(const sg_conv_plans *p, sg_conv_plans_stats *s);

#ifdef __cplusplus
}
#endif

#endif
