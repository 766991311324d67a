/* kernels/rng.h - counter-based random numbers, the same on every backend.
 *
 * Every random draw in segtrain is a pure function of a 64-bit key and an
 * index: no generator state advances between calls, so results do not depend
 * on thread timing, worker count or which backend draws them. Keys are made
 * from (seed, epoch, sample, rank, purpose) with sg_rng_key.
 * Header-only; compiles as C11 and as CUDA (host + device).
 */
#ifndef SG_KERNELS_RNG_H
#define SG_KERNELS_RNG_H

#include <stdint.h>

#if defined(__CUDACC__)
#define SG_RNG_FN static __host__ __device__ inline
#else
#define SG_RNG_FN static inline
#endif

/* splitmix64 finalizer: a strong 64-bit mixer. */
SG_RNG_FN uint64_t sg_mix64(uint64_t z) {
    z += 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Key from up to four coordinates plus a purpose tag (distinct streams). */
SG_RNG_FN uint64_t sg_rng_key(uint64_t seed, uint64_t a, uint64_t b, uint64_t c, uint64_t purpose) {
    uint64_t k = sg_mix64(seed ^ 0x5EED5EED5EED5EEDull);
    k = sg_mix64(k ^ a);
    k = sg_mix64(k ^ (b + 0x1000193ull));
    k = sg_mix64(k ^ (c + 0x27D4EB2Full));
    return sg_mix64(k ^ (purpose * 0x9E3779B97F4A7C15ull));
}

/* The idx-th 64-bit draw of stream `key`. */
SG_RNG_FN uint64_t sg_rng_u64(uint64_t key, uint64_t idx) {
    return sg_mix64(key ^ sg_mix64(idx + 0xD1B54A32D192ED03ull));
}

/* Uniform float in [0, 1) with 24 random bits. */
SG_RNG_FN float sg_rng_uniform(uint64_t key, uint64_t idx) {
    return (float)(sg_rng_u64(key, idx) >> 40) * (1.0f / 16777216.0f);
}

/* Uniform double in [0, 1) with 53 random bits. */
SG_RNG_FN double sg_rng_uniform_d(uint64_t key, uint64_t idx) {
    return (double)(sg_rng_u64(key, idx) >> 11) * (1.0 / 9007199254740992.0);
}

/* Purposes (stream tags), so no two uses of one key collide. */
enum {
    SG_RNG_SHUFFLE = 1, /* sampler permutation: key(seed, epoch) */
    SG_RNG_AUGMENT = 2, /* per-sample transforms: key(seed, epoch, sample) */
    SG_RNG_DROPOUT = 3, /* dropout masks: key(seed, step, layer, rank) */
    SG_RNG_INIT = 4,    /* weight init: key(seed, param index) */
    SG_RNG_SYNTH = 5    /* synthetic data: key(seed, split, image) */
};

/* The mask key of one dropout layer in one step (backend.h, dropout_fwd):
 * the step's key and the layer's salt (its dropout index). */
SG_RNG_FN uint64_t sg_rng_dropout_key(uint64_t step_key, uint64_t salt) {
    return sg_rng_key(step_key, salt, 0, 0, SG_RNG_DROPOUT);
}

#endif
