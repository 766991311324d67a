/* kernels/formulas/hostdev.h - what lets one formula header compile as C
 * (the CPU backend) and as CUDA (the CUDA backend, host and device code).
 *
 * The headers of kernels/formulas/ hold the per-element arithmetic both
 * backends compute (BN statistics, bilinear taps, SGD, cross-entropy, input
 * normalisation), as `static inline SG_HD` functions, so the two backends
 * cannot drift apart; the loops, threads and reductions around them stay in
 * each backend. Like kernels/rng.h, they use no CUDA type and no C-only
 * construct.
 *
 * Rounding: a formula gives the same bits on both backends only if both
 * round every operation the same way. nvcc fuses a*b+c into one FMA (one
 * rounding) by default, while the CPU build is ISO C11 (meson c_std=c11),
 * where GCC does not contract (-ffp-contract=off). So formulas that must
 * agree bit for bit are written with the sg_f* / sg_d* operations below:
 * on the device they are the round-to-nearest intrinsics, which nvcc never
 * fuses; in C (and in host code) they are the plain operators, one
 * operation per expression, so even a compiler that contracts within an
 * expression (clang's default) has nothing to fuse. They inline away: the
 * CPU's vectorised loops stay vectorised.
 */
#ifndef SG_KERNELS_FORMULAS_HOSTDEV_H
#define SG_KERNELS_FORMULAS_HOSTDEV_H

#ifdef __CUDACC__
#define SG_HD __host__ __device__
#else
#define SG_HD
#endif

#if defined(__CUDACC__) && defined(__CUDA_ARCH__)
static inline SG_HD float sg_fadd(float a, float b) { return __fadd_rn(a, b); }
static inline SG_HD float sg_fsub(float a, float b) { return __fsub_rn(a, b); }
static inline SG_HD float sg_fmul(float a, float b) { return __fmul_rn(a, b); }
static inline SG_HD double sg_dadd(double a, double b) { return __dadd_rn(a, b); }
static inline SG_HD double sg_dsub(double a, double b) { return __dsub_rn(a, b); }
static inline SG_HD double sg_dmul(double a, double b) { return __dmul_rn(a, b); }
#else
static inline SG_HD float sg_fadd(float a, float b) { return a + b; }
static inline SG_HD float sg_fsub(float a, float b) { return a - b; }
static inline SG_HD float sg_fmul(float a, float b) { return a * b; }
static inline SG_HD double sg_dadd(double a, double b) { return a + b; }
static inline SG_HD double sg_dsub(double a, double b) { return a - b; }
static inline SG_HD double sg_dmul(double a, double b) { return a * b; }
#endif
/* Division and sqrt are correctly rounded on both sides (CUDA's double
 * division and sqrt are IEEE; float division is IEEE unless
 * -prec-div=false / --use_fast_math, which this build does not use) and
 * never fused, so the plain operators agree. */

#endif
