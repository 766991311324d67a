/* data/sampler.c - see sampler.h. */
#include "data/sampler.h"

#include <stdlib.h>

#include "core/log.h"
#include "kernels/rng.h"

void sg_sampler_permutation(const sg_sampler *s, int64_t epoch, int64_t *perm) {
    for (int64_t i = 0; i < s->n; i++) perm[i] = i;
    if (!s->shuffle) return;
    /* Fisher-Yates from the top; draw i picks j uniform in [0, i] (the modulo
     * bias of a 64-bit draw over < 2^40 items is below 2^-24: negligible). */
    uint64_t key = sg_rng_key(s->seed + (uint64_t)epoch, 0, 0, 0, SG_RNG_SHUFFLE);
    for (int64_t i = s->n - 1; i > 0; i--) {
        int64_t j = (int64_t)(sg_rng_u64(key, (uint64_t)i) % (uint64_t)(i + 1));
        int64_t t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
}

static int64_t remaining(const sg_sampler *s, int64_t start) {
    if (start < 0) start = 0;
    return start >= s->n ? 0 : s->n - start;
}

int64_t sg_sampler_per_rank(const sg_sampler *s, int64_t start) {
    int64_t m = remaining(s, start), r = s->world;
    if (m == 0) return 0;
    /* torch: ceil((m - r) / r) when drop_last and m % r, which is floor(m / r)
     * (0 when m < r); else ceil(m / r). */
    if (s->drop_last && m % r) return m / r;
    return (m + r - 1) / r;
}

int64_t sg_sampler_rank_indices(const sg_sampler *s, int64_t epoch, int rank, int64_t start,
                                int64_t *out) {
    if (rank < 0 || rank >= s->world) return -1;
    int64_t m = remaining(s, start), per = sg_sampler_per_rank(s, start);
    if (per == 0) return 0;
    int64_t *perm = malloc(sizeof(int64_t) * (size_t)s->n);
    SG_CHECK(perm != NULL, "out of memory (sampler, %lld samples)", (long long)s->n);
    sg_sampler_permutation(s, epoch, perm);
    const int64_t *rem = perm + (start > 0 ? start : 0);
    for (int64_t k = 0; k < per; k++) {
        int64_t pos = rank + k * s->world; /* < total; >= m only when padding */
        /* Padding cycles from the epoch's start perm[0] (torch pads with the
         * list's start): then a resume with the same world size continues
         * exactly the list an uninterrupted run would have seen. */
        out[k] = pos < m ? rem[pos] : perm[(pos - m) % s->n];
    }
    free(perm);
    return per;
}

int64_t sg_sampler_leftover(const sg_sampler *s, int64_t epoch, int64_t start, int64_t *out) {
    int64_t m = remaining(s, start);
    int64_t total = sg_sampler_per_rank(s, start) * s->world;
    if (!s->drop_last || total >= m) return 0;
    int64_t *perm = malloc(sizeof(int64_t) * (size_t)s->n);
    SG_CHECK(perm != NULL, "out of memory (sampler, %lld samples)", (long long)s->n);
    sg_sampler_permutation(s, epoch, perm);
    const int64_t *rem = perm + (start > 0 ? start : 0);
    for (int64_t k = total; k < m; k++) out[k - total] = rem[k];
    free(perm);
    return m - total;
}

int64_t sg_eval_shard_size(int64_t n, int world, int rank) {
    if (world < 1 || rank < 0 || rank >= world || rank >= n) return 0;
    return (n - rank + world - 1) / world;
}

int64_t sg_eval_shard(int64_t n, int world, int rank, int64_t *out) {
    int64_t c = sg_eval_shard_size(n, world, rank);
    for (int64_t k = 0; k < c; k++) out[k] = rank + k * world;
    return c;
}
