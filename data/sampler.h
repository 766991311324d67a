/* data/sampler.h - which samples each rank sees per epoch: PyTorch's
 * DistributedSampler semantics, plus the leftover set, mid-epoch resume, and
 * exact evaluation sharding.
 *
 * An epoch's global order is perm = a permutation of 0..N-1 drawn from
 * (seed, epoch) via kernels/rng.h (Fisher-Yates with sg_rng_u64 draws under
 * SG_RNG_SHUFFLE) when shuffle, else 0..N-1. It does not depend on the world
 * size. From a global start position p (0 at the start of an epoch) the
 * remaining list rem = perm[p..N) (M = N - p items) is cut exactly like
 * torch.utils.data.DistributedSampler cuts its whole list:
 *     per_rank = drop_last && M % R ? (M - R) / R (= ceil((M-R)/R)) : ceil(M / R)
 *     total = per_rank * R
 *     drop_last: rem = rem[0..total), rem[total..M) is the epoch's leftover
 *     else:      rem is padded up to total with perm[0], perm[1], ... (cyclic)
 *     rank r gets rem[r], rem[r + R], ... (per_rank items)
 * With p = 0 this is DistributedSampler. Position p counts the samples of the
 * global order consumed by all ranks together (after k steps of per-rank batch
 * B: p = k * B * R). Resuming with the same world size at such a p gives each
 * rank exactly the rest of the list it had (padding and leftover included);
 * resuming with another world size continues at the same place in the same
 * permutation (only the padding / leftover of the rest differ). p >= N means
 * the epoch is over.
 *
 * Evaluation sharding is exact: rank r gets r, r + R, r + 2R, ... < N, every
 * sample exactly once across ranks, no padding (ranks may differ by one).
 */
#ifndef SG_DATA_SAMPLER_H
#define SG_DATA_SAMPLER_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct sg_sampler {
    int64_t n;     /* dataset size */
    int world;     /* number of ranks */
    int shuffle;   /* bool */
    int drop_last; /* bool */
    uint64_t seed;
} sg_sampler;

/* Fills perm[n] with the epoch's global order. */
void sg_sampler_permutation(const sg_sampler *s, int64_t epoch, int64_t *perm);

/* Per-rank count from global position `start` (0 when start >= n). */
int64_t sg_sampler_per_rank(const sg_sampler *s, int64_t start);

/* Writes rank's indices for the epoch from global position `start` into
 * out[sg_sampler_per_rank(s, start)]; returns that count (-1 on a bad rank). */
int64_t sg_sampler_rank_indices(const sg_sampler *s, int64_t epoch, int rank, int64_t start,
                                int64_t *out);

/* The epoch's leftover samples (drop_last only; from position `start`):
 * writes them into out (at most world - 1 of them) and returns the count. */
int64_t sg_sampler_leftover(const sg_sampler *s, int64_t epoch, int64_t start, int64_t *out);

/* Exact evaluation shard: count for rank, and the indices into out[count]. */
int64_t sg_eval_shard_size(int64_t n, int world, int rank);
int64_t sg_eval_shard(int64_t n, int world, int rank, int64_t *out);

#ifdef __cplusplus
}
#endif

#endif
