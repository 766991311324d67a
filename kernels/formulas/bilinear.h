/* kernels/formulas/bilinear.h - the taps and weights of bilinear resize with
 * align_corners=False, shared by kernels/cpu/cpu_pool.c and
 * kernels/cuda/cuda_pool.cu; compiles as C and CUDA.
 *
 * PyTorch's rule (upsample_bilinear2d with an output size and no scale
 * factor; area_pixel_compute_scale / _source_index and
 * compute_source_index_and_lambda in ATen/native/UpSample.h):
 *   scale = in/out (float), src = scale*(dst + 0.5) - 0.5 clamped at 0,
 *   i0 = (int)src (= floor, src >= 0) at most in-1, i1 = i0 + (i0 < in-1),
 *   l1 = src - i0 clamped to [0, 1], l0 = 1 - l1,
 * all in float. The two clamps (i0 <= in-1, l1 in [0,1]) are the guards
 * PyTorch's CPU kernel has; for any real size they change nothing (src stays
 * below in - 0.5), they only rule out an out-of-bounds tap. When in == out
 * the taps are the identity (src == dst exactly), as PyTorch's copy case.
 * Every operation is rounded the same way on both backends (hostdev.h), so
 * the taps, and the forward value from the same four inputs, are
 * bit-identical.
 */
#ifndef SG_KERNELS_FORMULAS_BILINEAR_H
#define SG_KERNELS_FORMULAS_BILINEAR_H

#include "kernels/formulas/hostdev.h"

typedef struct sg_bilinear_tap {
    int i0, i1;   /* the two input indices (equal at the last input) */
    float l0, l1; /* their weights, l0 + l1 == 1 */
} sg_bilinear_tap;

/* scale = in/out, in float as PyTorch computes it. */
static inline SG_HD float sg_bilinear_scale(int in, int out) { return (float)in / (float)out; }

/* The taps of output index dst along an axis of `in` inputs. */
static inline SG_HD sg_bilinear_tap sg_bilinear_tap_of(int dst, float scale, int in) {
    float src = sg_fsub(sg_fmul(scale, sg_fadd((float)dst, 0.5f)), 0.5f);
    if (src < 0.0f) src = 0.0f;
    sg_bilinear_tap t;
    t.i0 = (int)src;
    if (t.i0 > in - 1) t.i0 = in - 1;
    t.i1 = t.i0 + (t.i0 < in - 1 ? 1 : 0);
    float l1 = sg_fsub(src, (float)t.i0);
    t.l1 = l1 < 0.0f ? 0.0f : (l1 > 1.0f ? 1.0f : l1);
    t.l0 = sg_fsub(1.0f, t.l1);
    return t;
}

/* Forward value from the four inputs v<row><col> (row taps ty, column taps
 * tx): ly0*(lx0*v00 + lx1*v01) + ly1*(lx0*v10 + lx1*v11). */
static inline SG_HD float sg_bilinear_value(sg_bilinear_tap ty, sg_bilinear_tap tx, float v00,
                                            float v01, float v10, float v11) {
    float r0 = sg_fadd(sg_fmul(tx.l0, v00), sg_fmul(tx.l1, v01));
    float r1 = sg_fadd(sg_fmul(tx.l0, v10), sg_fmul(tx.l1, v11));
    return sg_fadd(sg_fmul(ty.l0, r0), sg_fmul(ty.l1, r1));
}

/* Backward: the share of output gradient g that reaches the input at row
 * weight ly and column weight lx, (g*ly)*lx. Both backends add the shares
 * of an input in the same order (output rows, then columns; per output the
 * taps (y0,x0), (y0,x1), (y1,x0), (y1,x1)), so dx is bit-identical too. */
static inline SG_HD float sg_bilinear_share(float g, float ly, float lx) {
    return sg_fmul(sg_fmul(g, ly), lx);
}

#endif
