/* kernels/formulas/radix_select.h - the exact k-th smallest float by radix
 * select (backend.h, kth_smallest), shared by kernels/cpu/cpu_loss.c and
 * kernels/cuda/cuda_loss.cu; compiles as C and CUDA.
 *
 * A float's bits are mapped to an unsigned key whose integer order is the
 * IEEE total order (-NaN < -inf < ... < -0 < +0 < ... < +inf < +NaN):
 * negative values have every bit flipped, non-negative ones the sign bit set.
 * Selection runs four passes from the top byte down: each pass counts, in
 * 256 bins, the keys whose higher bytes equal the prefix chosen so far, and
 * sg_rs_pick takes the bin holding the rank-th key (rank = k, less the keys
 * in lower bins). After the last byte the prefix is the k-th key. Counts are
 * integers, so the answer does not depend on the order of counting.
 */
#ifndef SG_KERNELS_FORMULAS_RADIX_SELECT_H
#define SG_KERNELS_FORMULAS_RADIX_SELECT_H

#include <stdint.h>

#include "kernels/formulas/hostdev.h"

/* The order-preserving key of x. */
static inline SG_HD uint32_t sg_rs_key(float x) {
    union {
        float f;
        uint32_t u;
    } v;
    v.f = x;
    return (v.u & 0x80000000u) ? ~v.u : (v.u | 0x80000000u);
}

/* The float whose key is u (the inverse of sg_rs_key). */
static inline SG_HD float sg_rs_value(uint32_t u) {
    union {
        float f;
        uint32_t u;
    } v;
    v.u = (u & 0x80000000u) ? (u & 0x7fffffffu) : ~u;
    return v.f;
}

/* The bin (0..255) holding the *rank-th (0-based) counted key; *rank
 * becomes its rank within that bin. A rank past the counted keys (not
 * expected: the caller checks k < count) gives bin 255. */
static inline SG_HD int sg_rs_pick(const uint64_t *hist, uint64_t *rank) {
    for (int b = 0; b < 255; b++) {
        if (*rank < hist[b]) return b;
        *rank -= hist[b];
    }
    return 255;
}

#endif
