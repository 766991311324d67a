/* kernels/formulas/gate.h - the per-element arithmetic of the gate ops
 * (hardswish, hardsigmoid, sigmoid and their gradients; kernels/backend.h
 * states the definitions), shared by the CPU backend (cpu_gate.c) and the
 * CUDA backend (cuda_gate.cu).
 *
 * PyTorch's CPU kernels (torch 1.13, aten/src/ATen/native/cpu/Activation.cpp
 * and BinaryOpsKernel.cpp) in the same operation order:
 *   hardsigmoid  min(max(x + 3, 0), 6) / 6
 *   hardswish    x * min(max(x + 3, 0), 6) / 6
 *   hardsigmoid' (-3 < x < 3) ? dy / 6 : 0
 *   hardswish'   x < -3 ? 0 : x <= 3 ? dy * (x / 3 + 0.5) : dy
 *   sigmoid'     dy * (1 - y) * y
 * (the kinks: torch gives hardswish' -0.5 dy at x = -3 and 1.5 dy at x = 3,
 * hardsigmoid' 0 at both; checked against torch 1.13's autograd.) The clamps
 * keep a NaN input NaN, as std::max / std::min do. Every multiply and add is
 * a sg_f* operation so nvcc cannot fuse them: the hard ones give the CPU's
 * bits on the GPU. sigmoid's exp is each side's expf (libm / CUDA, within 2
 * ulp of each other), so sigmoid agrees to rounding, not bit for bit.
 */
#ifndef SG_KERNELS_FORMULAS_GATE_H
#define SG_KERNELS_FORMULAS_GATE_H

#include <math.h>

#include "kernels/formulas/hostdev.h"

/* min(max(x + 3, 0), 6) */
static inline SG_HD float sg_relu6_shift3(float x) {
    float t = sg_fadd(x, 3.0f);
    t = t < 0.0f ? 0.0f : t;
    return 6.0f < t ? 6.0f : t;
}

static inline SG_HD float sg_hardsigmoid(float x) { return sg_relu6_shift3(x) / 6.0f; }

static inline SG_HD float sg_hardswish(float x) { return sg_fmul(x, sg_relu6_shift3(x)) / 6.0f; }

static inline SG_HD float sg_hardsigmoid_grad(float dy, float x) {
    return (x > -3.0f && x < 3.0f) ? dy / 6.0f : 0.0f;
}

static inline SG_HD float sg_hardswish_grad(float dy, float x) {
    if (x < -3.0f) return 0.0f;
    if (x <= 3.0f) return sg_fmul(dy, sg_fadd(x / 3.0f, 0.5f));
    return dy;
}

static inline SG_HD float sg_sigmoid(float x) { return 1.0f / sg_fadd(1.0f, expf(-x)); }

static inline SG_HD float sg_sigmoid_grad(float dy, float y) {
    return sg_fmul(sg_fmul(dy, sg_fsub(1.0f, y)), y);
}

#endif
