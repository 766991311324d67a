/* kernels/cpu/cpu_bf16.c - the rounding loops of the emulated bf16
 * convolutions (cpu_conv.c), and the conversions between bf16-stored
 * activations and float32 (cpu_act_bf16.c): float32 buffers rounded to bfloat16 values
 * with round-to-nearest-even, the per-element formula of
 * kernels/formulas/bf16.h (the one the CUDA backend converts with). The
 * formula is integer adds and masks on the bits, so the chunk loops
 * vectorise; chunks are spread over the OpenMP threads.
 */
#include "kernels/cpu/cpu_internal.h"
#include "kernels/formulas/bf16.h"

#define CHUNK 16384

/* chunk(dst + i, src + i, n) over [0, count) in CHUNK-element pieces, the
 * pieces spread over the OpenMP threads (from SG_CPU_PAR_MIN elements). */
#define PAR_CHUNKS(chunk, dst, src, count)                                                         \
    do {                                                                                           \
        size_t count_ = (count), chunks_ = (count_ + CHUNK - 1) / CHUNK;                           \
        _Pragma(                                                                                   \
            "omp parallel for schedule(static) if (count_ >= SG_CPU_PAR_MIN)") for (size_t k_ = 0; \
                                                                                    k_ < chunks_;  \
                                                                                    k_++) {        \
            size_t i_ = k_ * CHUNK, n_ = count_ - i_ < CHUNK ? count_ - i_ : CHUNK;                \
            chunk((dst) + i_, (src) + i_, n_);                                                     \
        }                                                                                          \
    } while (0)

SG_CPU_CLONES static void round_chunk(float *dst, const float *src, size_t n) {
#pragma omp simd
    for (size_t i = 0; i < n; i++) dst[i] = sg_bf16_round(src[i]);
}

SG_CPU_CLONES static void round_add_chunk(float *dst, const float *src, size_t n) {
#pragma omp simd
    for (size_t i = 0; i < n; i++) dst[i] += sg_bf16_round(src[i]);
}

void sg_cpu_bf16_round(float *dst, const float *src, size_t count) {
    PAR_CHUNKS(round_chunk, dst, src, count);
}

void sg_cpu_bf16_round_add(float *dst, const float *src, size_t count) {
    PAR_CHUNKS(round_add_chunk, dst, src, count);
}

SG_CPU_CLONES static void widen_chunk(float *dst, const uint16_t *src, size_t n) {
#pragma omp simd
    for (size_t i = 0; i < n; i++) dst[i] = sg_bf16_to_f32(src[i]);
}

SG_CPU_CLONES static void narrow_chunk(uint16_t *dst, const float *src, size_t n) {
#pragma omp simd
    for (size_t i = 0; i < n; i++) dst[i] = sg_bf16_bits(src[i]);
}

void sg_cpu_bf16_widen(float *dst, const uint16_t *src, size_t count) {
    PAR_CHUNKS(widen_chunk, dst, src, count);
}

void sg_cpu_bf16_narrow(uint16_t *dst, const float *src, size_t count) {
    PAR_CHUNKS(narrow_chunk, dst, src, count);
}
