/* kernels/conv_plans.c - the convolution plan cache and its file
 * (kernels/conv_plans.h). A linear table: a network has a few dozen
 * geometries, looked up once each when first seen. */
#include "kernels/conv_plans.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/fsutil.h"
#include "core/log.h"
#include "core/util.h"

#define MAGIC "SGCPLAN"                           /* 7 bytes and the NUL */
#define DEVICE_LEN 128                            /* bytes of the device name field */
#define HEADER_BYTES (8 + 4 + 4 + DEVICE_LEN + 8) /* magic, version, count, device, lib */
#define ENTRY_BYTES (SG_CONV_PLAN_KEY_LEN * 4 + 6 * 4 + 3 * 8)
#define FILE_MAX (HEADER_BYTES + (size_t)SG_CONV_PLANS_MAX * ENTRY_BYTES + 8)

typedef struct entry {
    sg_conv_plan_key key;
    sg_conv_plan plan;
} entry;

/* Keys are found through a hash index (open addressing, linear probing;
 * slot = entry index + 1, 0 = empty), so loading a full file of
 * SG_CONV_PLANS_MAX entries costs linear time, not quadratic. */
#define INDEX_SLOTS 8192 /* a power of two, twice SG_CONV_PLANS_MAX */
_Static_assert(INDEX_SLOTS >= 2 * SG_CONV_PLANS_MAX && (INDEX_SLOTS & (INDEX_SLOTS - 1)) == 0,
               "the index must stay at most half full");

struct sg_conv_plans {
    char device[DEVICE_LEN];
    uint64_t lib_version;
    entry *e;
    int n, cap;
    sg_conv_plans_stats st;
    int32_t index[INDEX_SLOTS];
};

sg_conv_plan_key sg_conv_plan_key_make(const sg_conv_desc *d, int precision, int tf32,
                                       int deterministic, int measured) {
    sg_conv_plan_key k;
    memset(&k, 0, sizeof k);
    int32_t g[16] = {
        d->n,        d->c,     d->h,     d->w,     d->k,     d->r,  d->s,  d->stride_h,
        d->stride_w, d->pad_h, d->pad_w, d->dil_h, d->dil_w, d->oh, d->ow, sg_conv_groups(d)};
    memcpy(k.v, g, sizeof g);
    k.v[16] = precision;
    k.v[17] = tf32 != 0;
    k.v[18] = deterministic != 0;
    k.v[19] = measured != 0;
    return k;
}

sg_conv_plans *sg_conv_plans_create(const char *device, uint64_t lib_version) {
    sg_conv_plans *p = calloc(1, sizeof *p);
    SG_CHECK(p, "out of host memory for the convolution plan cache");
    snprintf(p->device, sizeof p->device, "%s", device ? device : "");
    p->lib_version = lib_version;
    return p;
}

void sg_conv_plans_destroy(sg_conv_plans *p) {
    if (!p) return;
    free(p->e);
    free(p);
}

static uint32_t slot_of(const sg_conv_plan_key *key) {
    return (uint32_t)sg_fnv1a(SG_FNV_OFFSET, key, sizeof *key) & (INDEX_SLOTS - 1);
}

static int find(const sg_conv_plans *p, const sg_conv_plan_key *key) {
    for (uint32_t s = slot_of(key); p->index[s]; s = (s + 1) & (INDEX_SLOTS - 1)) {
        int i = p->index[s] - 1;
        if (memcmp(&p->e[i].key, key, sizeof *key) == 0) return i;
    }
    return -1;
}

static void index_add(sg_conv_plans *p, int i) {
    uint32_t s = slot_of(&p->e[i].key);
    while (p->index[s]) s = (s + 1) & (INDEX_SLOTS - 1);
    p->index[s] = i + 1;
}

/* After a removal moved an entry: the index anew (removals are rare: a
 * cached plan the library refused). */
static void index_rebuild(sg_conv_plans *p) {
    memset(p->index, 0, sizeof p->index);
    for (int i = 0; i < p->n; i++) index_add(p, i);
}

int sg_conv_plans_lookup(sg_conv_plans *p, const sg_conv_plan_key *key, sg_conv_plan *out) {
    int i = find(p, key);
    if (i < 0) {
        p->st.misses++;
        return 0;
    }
    p->st.hits++;
    *out = p->e[i].plan;
    return 1;
}

/* A value a backend could have chosen: every plan read from a file passes
 * this before it is used. */
static int plan_valid(const sg_conv_plan *pl) {
    for (int d = 0; d < 3; d++)
        if (pl->algo[d] < 0 || pl->algo[d] >= SG_CONV_PLAN_MAX_ALGO || pl->math[d] < 0 ||
            pl->math[d] >= SG_CONV_PLAN_MAX_ALGO || pl->workspace[d] > SG_CONV_PLAN_MAX_WS)
            return 0;
    return 1;
}

static int key_valid(const sg_conv_plan_key *k) {
    for (int i = 0; i < 16; i++) {
        int lo = (i >= 9 && i <= 10) ? 0 : 1; /* padding may be 0 */
        if (k->v[i] < lo) return 0;
    }
    for (int i = 17; i < SG_CONV_PLAN_KEY_LEN; i++)
        if (k->v[i] != 0 && k->v[i] != 1) return 0;
    return k->v[16] >= 0 && k->v[16] < 16;
}

/* Adds without the range checks' warning (load checks first). */
static int put(sg_conv_plans *p, const sg_conv_plan_key *key, const sg_conv_plan *plan) {
    int i = find(p, key);
    if (i >= 0) {
        p->e[i].plan = *plan;
        return 1;
    }
    if (p->n >= SG_CONV_PLANS_MAX) return 0;
    if (p->n == p->cap) {
        int cap = p->cap ? p->cap * 2 : 64;
        entry *ne = realloc(p->e, (size_t)cap * sizeof *ne);
        SG_CHECK(ne, "out of host memory for the convolution plan cache");
        p->e = ne;
        p->cap = cap;
    }
    p->e[p->n].key = *key;
    p->e[p->n].plan = *plan;
    index_add(p, p->n);
    p->n++;
    p->st.entries = p->n;
    return 1;
}

sg_status sg_conv_plans_insert(sg_conv_plans *p, const sg_conv_plan_key *key,
                               const sg_conv_plan *plan) {
    if (!key_valid(key) || !plan_valid(plan)) {
        SG_WARN("convolution plan cache: a plan with an out-of-range value was not cached "
                "(internal error; the convolution still runs)");
        return SG_ERR_RUNTIME;
    }
    if (!put(p, key, plan)) {
        SG_WARN("convolution plan cache: full (%d geometries); later geometries are searched "
                "every run",
                SG_CONV_PLANS_MAX);
        return SG_ERR_RUNTIME;
    }
    return SG_OK;
}

int sg_conv_plans_remove(sg_conv_plans *p, const sg_conv_plan_key *key) {
    int i = find(p, key);
    if (i < 0) return 0;
    p->e[i] = p->e[p->n - 1];
    p->n--;
    p->st.entries = p->n;
    index_rebuild(p);
    return 1;
}

void sg_conv_plans_get_stats(const sg_conv_plans *p, sg_conv_plans_stats *s) { *s = p->st; }

/* ---- the file ---- */

static void put_u32(uint8_t *b, uint32_t v) {
    for (int i = 0; i < 4; i++) b[i] = (uint8_t)(v >> (8 * i));
}
static void put_u64(uint8_t *b, uint64_t v) {
    for (int i = 0; i < 8; i++) b[i] = (uint8_t)(v >> (8 * i));
}
static uint32_t get_u32(const uint8_t *b) {
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) v |= (uint32_t)b[i] << (8 * i);
    return v;
}
static uint64_t get_u64(const uint8_t *b) {
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v |= (uint64_t)b[i] << (8 * i);
    return v;
}

static sg_conv_plans_load_result ignored(sg_conv_plans *p, const char *path, char *why,
                                         size_t why_len, const char *reason) {
    p->st.ignored++;
    SG_WARN("convolution plan cache %s ignored: %s; the convolutions' algorithms are chosen again "
            "and the file is rewritten",
            path, reason);
    if (why && why_len) snprintf(why, why_len, "%s", reason);
    return SG_PLANS_IGNORED;
}

sg_conv_plans_load_result sg_conv_plans_load(sg_conv_plans *p, const char *path, char *why,
                                             size_t why_len) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        if (errno == ENOENT) return SG_PLANS_ABSENT;
        char r[256];
        snprintf(r, sizeof r, "cannot open it: %s", strerror(errno));
        return ignored(p, path, why, why_len, r);
    }
    /* read at most FILE_MAX + 1 bytes: anything longer is refused unread */
    uint8_t *b = malloc(FILE_MAX + 1);
    SG_CHECK(b, "out of host memory reading the convolution plan cache");
    size_t n = fread(b, 1, FILE_MAX + 1, f);
    int rerr = ferror(f);
    fclose(f);
    char r[512];
    sg_conv_plans_load_result res = SG_PLANS_IGNORED;
    if (rerr) {
        res = ignored(p, path, why, why_len, "read error");
    } else if (n > FILE_MAX) {
        snprintf(r, sizeof r, "larger than the %zu bytes of %d entries", (size_t)FILE_MAX,
                 SG_CONV_PLANS_MAX);
        res = ignored(p, path, why, why_len, r);
    } else if (n < HEADER_BYTES + 8 || memcmp(b, MAGIC, 8) != 0) {
        res = ignored(p, path, why, why_len,
                      n < HEADER_BYTES + 8 ? "truncated header" : "not a plan cache (bad magic)");
    } else if (get_u32(b + 8) != SG_CONV_PLANS_VERSION) {
        snprintf(r, sizeof r, "format version %u, this build reads %d", get_u32(b + 8),
                 SG_CONV_PLANS_VERSION);
        res = ignored(p, path, why, why_len, r);
    } else {
        uint32_t count = get_u32(b + 12);
        size_t want = HEADER_BYTES + (size_t)count * ENTRY_BYTES + 8;
        if (count > SG_CONV_PLANS_MAX) {
            snprintf(r, sizeof r, "%u entries, more than the limit of %d", count,
                     SG_CONV_PLANS_MAX);
            res = ignored(p, path, why, why_len, r);
        } else if (n != want) {
            snprintf(r, sizeof r, "%zu bytes where %u entries take %zu (truncated or padded)", n,
                     count, want);
            res = ignored(p, path, why, why_len, r);
        } else if (get_u64(b + n - 8) != sg_fnv1a(SG_FNV_OFFSET, b, n - 8)) {
            res = ignored(p, path, why, why_len, "checksum mismatch (corrupt)");
        } else {
            char dev[DEVICE_LEN + 1];
            memcpy(dev, b + 16, DEVICE_LEN);
            dev[DEVICE_LEN] = 0;
            uint64_t lib = get_u64(b + 16 + DEVICE_LEN);
            if (strcmp(dev, p->device) != 0 || lib != p->lib_version) {
                snprintf(r, sizeof r,
                         "written for '%.100s' with library version %llu, this is "
                         "'%.100s' with %llu",
                         dev, (unsigned long long)lib, p->device,
                         (unsigned long long)p->lib_version);
                res = ignored(p, path, why, why_len, r);
            } else {
                /* every entry checked before any is added: all or nothing */
                entry *tmp = malloc((size_t)(count ? count : 1) * sizeof *tmp);
                SG_CHECK(tmp, "out of host memory reading the convolution plan cache");
                const uint8_t *q = b + HEADER_BYTES;
                int bad = -1;
                for (uint32_t i = 0; i < count && bad < 0; i++, q += ENTRY_BYTES) {
                    for (int j = 0; j < SG_CONV_PLAN_KEY_LEN; j++)
                        tmp[i].key.v[j] = (int32_t)get_u32(q + 4 * j);
                    const uint8_t *v = q + 4 * SG_CONV_PLAN_KEY_LEN;
                    for (int d = 0; d < 3; d++) {
                        tmp[i].plan.algo[d] = (int32_t)get_u32(v + 4 * d);
                        tmp[i].plan.math[d] = (int32_t)get_u32(v + 12 + 4 * d);
                        tmp[i].plan.workspace[d] = get_u64(v + 24 + 8 * d);
                    }
                    if (!key_valid(&tmp[i].key) || !plan_valid(&tmp[i].plan)) bad = (int)i;
                }
                if (bad >= 0) {
                    snprintf(r, sizeof r, "entry %d holds a value out of range", bad);
                    res = ignored(p, path, why, why_len, r);
                } else {
                    for (uint32_t i = 0; i < count; i++)
                        if (put(p, &tmp[i].key, &tmp[i].plan)) p->st.loaded++;
                    res = SG_PLANS_LOADED;
                }
                free(tmp);
            }
        }
    }
    free(b);
    return res;
}

sg_status sg_conv_plans_save(sg_conv_plans *p, const char *path) {
    size_t n = HEADER_BYTES + (size_t)p->n * ENTRY_BYTES + 8;
    uint8_t *b = calloc(1, n);
    SG_CHECK(b, "out of host memory writing the convolution plan cache");
    memcpy(b, MAGIC, 8);
    put_u32(b + 8, SG_CONV_PLANS_VERSION);
    put_u32(b + 12, (uint32_t)p->n);
    memcpy(b + 16, p->device, strnlen(p->device, DEVICE_LEN - 1));
    put_u64(b + 16 + DEVICE_LEN, p->lib_version);
    uint8_t *q = b + HEADER_BYTES;
    for (int i = 0; i < p->n; i++, q += ENTRY_BYTES) {
        for (int j = 0; j < SG_CONV_PLAN_KEY_LEN; j++)
            put_u32(q + 4 * j, (uint32_t)p->e[i].key.v[j]);
        uint8_t *v = q + 4 * SG_CONV_PLAN_KEY_LEN;
        for (int d = 0; d < 3; d++) {
            put_u32(v + 4 * d, (uint32_t)p->e[i].plan.algo[d]);
            put_u32(v + 12 + 4 * d, (uint32_t)p->e[i].plan.math[d]);
            put_u64(v + 24 + 8 * d, p->e[i].plan.workspace[d]);
        }
    }
    put_u64(b + n - 8, sg_fnv1a(SG_FNV_OFFSET, b, n - 8));
    char tmp[4096];
    int tl = snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    sg_status rc = SG_ERR_RUNTIME;
    if (tl < 0 || (size_t)tl >= sizeof tmp) {
        SG_WARN("convolution plan cache: the path %s is too long; not saved", path);
        free(b);
        return rc;
    }
    char pdir[4096];
    if (sg_mkdirs_parent(path, pdir, sizeof pdir) != 0) {
        SG_WARN("convolution plan cache: cannot create the directory %s: %s; not saved (the next "
                "run searches again)",
                pdir, strerror(errno));
        free(b);
        return rc;
    }
    FILE *f = fopen(tmp, "wb");
    if (!f) {
        SG_WARN("convolution plan cache: cannot create %s: %s; not saved (the next run searches "
                "again)",
                tmp, strerror(errno));
    } else {
        int ok = fwrite(b, 1, n, f) == n;
        ok = (fclose(f) == 0) && ok;
        if (!ok || rename(tmp, path) != 0) {
            SG_WARN("convolution plan cache: writing %s failed: %s; not saved (the next run "
                    "searches again)",
                    path, strerror(errno));
            unlink(tmp);
        } else {
            p->st.saves++;
            rc = SG_OK;
        }
    }
    free(b);
    return rc;
}
