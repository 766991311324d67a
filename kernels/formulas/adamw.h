/* kernels/formulas/adamw.h - one element of the AdamW update, shared by
 * kernels/cpu/cpu_optim.c and kernels/cuda/cuda_optim.cu; compiles as C
 * and CUDA.
 *
 * torch.optim.AdamW semantics (backend.h, adamw_multi_step), in float, in
 * the order of PyTorch's single-tensor path (_single_tensor_adam with
 * decoupled weight decay, torch's default on the CPU):
 *   p = p * decay                       (decay = 1 - lr*wd; 1: p unchanged)
 *   m = m.lerp(g, w1)                   (w1 = 1 - beta1, torch's lerp: two
 *                                        formulas either side of w1 = 0.5)
 *   v = v*beta2 + (omb2*g)*g            (addcmul, omb2 = 1 - beta2)
 *   p = p + (-step_size*m) / (sqrt(v)/bc2_sqrt + eps)      (addcdiv)
 * Every operation is rounded the same way on both backends (hostdev.h;
 * float division and sqrt are correctly rounded on both): the same
 * parameters, gradients and moments give the same bits.
 */
#ifndef SG_KERNELS_FORMULAS_ADAMW_H
#define SG_KERNELS_FORMULAS_ADAMW_H

#include <math.h>

#include "kernels/formulas/hostdev.h"

/* torch's lerp (ATen/native/Lerp.h): a + w*(b - a) for |w| < 0.5, else
 * b - (b - a)*(1 - w). */
static inline SG_HD float sg_adamw_lerp(float a, float b, float w) {
    return (w < 0.5f && w > -0.5f) ? sg_fadd(a, sg_fmul(w, sg_fsub(b, a)))
                                   : sg_fsub(b, sg_fmul(sg_fsub(b, a), sg_fsub(1.0f, w)));
}

/* The whole update of one parameter p with gradient g and moments *m, *v
 * (both read and written); returns the new p. */
static inline SG_HD float sg_adamw_update(float p, float g, float *m, float *v, float decay,
                                          float step_size, float w1, float beta2, float omb2,
                                          float bc2_sqrt, float eps) {
    p = sg_fmul(p, decay);
    float mn = sg_adamw_lerp(*m, g, w1);
    float vn = sg_fadd(sg_fmul(*v, beta2), sg_fmul(sg_fmul(omb2, g), g));
    *m = mn;
    *v = vn;
    float den = sg_fadd(sqrtf(vn) / bc2_sqrt, eps);
    return sg_fadd(p, sg_fmul(-step_size, mn) / den);
}

#endif
