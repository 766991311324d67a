/* kernels/formulas/bf16.h - float32 <-> bfloat16 conversion with
 * round-to-nearest-even, shared by the CPU backend (kernels/cpu/cpu_conv.c:
 * the emulated bf16 convolutions) and the CUDA backend
 * (kernels/cuda/cuda_conv.cu: the conversions around cuDNN's bf16
 * convolutions), and by both backends' bf16 activation storage (the *_dt
 * ops: cpu_bf16.c, cpu_bn.c, cuda_act_bf16.cu, cuda_bn.cu); compiles as C
 * and CUDA.
 *
 * bfloat16 is the top 16 bits of a float32: sign, the same 8-bit exponent,
 * 7 stored mantissa bits (8 significant). Rounding keeps the top half and
 * rounds on the bits dropped: above half an ulp up, below down, exactly half
 * to the even neighbour (IEEE round-to-nearest-even, what VCVTNEPS2BF16 and
 * CUDA's __float2bfloat16_rn do for normal numbers). Consequences, each by
 * construction of the integer add below:
 *  - a float that is already a bf16 value is unchanged (the dropped bits are 0);
 *  - values past the largest bf16 (about 3.39e38) round to +-infinity,
 *    infinities stay infinities;
 *  - NaN stays NaN (quieted: the rounding add could otherwise carry a NaN
 *    with a low payload into an infinity);
 *  - subnormal floats round like any other value (no flush to zero here;
 *    hardware paths may flush them: values that small never matter for
 *    training).
 * The relative error of one rounding is at most 2^-8 (half an ulp of an
 * 8-bit significand).
 */
#ifndef SG_KERNELS_FORMULAS_BF16_H
#define SG_KERNELS_FORMULAS_BF16_H

#include <stdint.h>
#include <string.h>

#include "kernels/formulas/hostdev.h"

static inline SG_HD uint32_t sg_f32_bits(float x) {
#if defined(__CUDACC__) && defined(__CUDA_ARCH__)
    return __float_as_uint(x);
#else
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
#endif
}

static inline SG_HD float sg_f32_from_bits(uint32_t u) {
#if defined(__CUDACC__) && defined(__CUDA_ARCH__)
    return __uint_as_float(u);
#else
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
#endif
}

/* The bf16 bit pattern nearest to x (ties to even). */
static inline SG_HD uint16_t sg_bf16_bits(float x) {
    uint32_t u = sg_f32_bits(x);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x0040u); /* NaN */
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

/* The float a bf16 bit pattern stands for (exact). */
static inline SG_HD float sg_bf16_to_f32(uint16_t h) { return sg_f32_from_bits((uint32_t)h << 16); }

/* x rounded to the nearest bf16 value, kept as a float. */
static inline SG_HD float sg_bf16_round(float x) { return sg_bf16_to_f32(sg_bf16_bits(x)); }

#endif
