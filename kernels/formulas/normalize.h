/* kernels/formulas/normalize.h - the input conversion uint8 -> normalised
 * float (backend.h, normalize_u8), shared by kernels/cpu/cpu_elem.c and
 * kernels/cuda/cuda_elem.cu; compiles as C and CUDA.
 *
 * (v/255 - mean)/std is evaluated as v*a + b with a = 1/(255*std) and
 * b = -mean/std computed in double and rounded to float once per channel;
 * the product and the sum are rounded separately on both backends
 * (hostdev.h), so both feed the network the same bits.
 */
#ifndef SG_KERNELS_FORMULAS_NORMALIZE_H
#define SG_KERNELS_FORMULAS_NORMALIZE_H

#include <stdint.h>

#include "kernels/formulas/hostdev.h"

static inline SG_HD float sg_normalize_a(float std) { return (float)(1.0 / (255.0 * std)); }
static inline SG_HD float sg_normalize_b(float mean, float std) {
    return (float)(-(double)mean / std);
}
static inline SG_HD float sg_normalize_px(uint8_t v, float a, float b) {
    return sg_fadd(sg_fmul((float)v, a), b);
}

#endif
