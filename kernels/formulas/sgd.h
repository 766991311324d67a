/* kernels/formulas/sgd.h - one element of the SGD update, shared by
 * kernels/cpu/cpu_elem.c and kernels/cuda/cuda_elem.cu; compiles as C
 * and CUDA.
 *
 * torch.optim.SGD semantics (backend.h, sgd_step), in float, in the order of
 * PyTorch's single-tensor path:
 *   d = g + wd*p                        (wd == 0: d = g, p not read)
 *   buf = d (first step) or momentum*buf + (1 - dampening)*d
 *   d = d + momentum*buf (nesterov) or buf
 *   p = p - lr*d
 * momentum == 0: d unchanged and buf untouched. Every operation is rounded
 * the same way on both backends (hostdev.h): the same parameters, gradients
 * and buffers give the same bits.
 */
#ifndef SG_KERNELS_FORMULAS_SGD_H
#define SG_KERNELS_FORMULAS_SGD_H

#include "kernels/formulas/hostdev.h"

/* The steps, for loops that hoist the per-call branches (the CPU's). */
/* d = g + wd*p, or g when wd == 0 (p is then not used). */
static inline SG_HD float sg_sgd_decayed(float g, float p, float wd) {
    return wd != 0.0f ? sg_fadd(g, sg_fmul(wd, p)) : g;
}
/* The new momentum buffer: d on the first step (*buf not read), else
 * momentum*buf + damp1*d, damp1 = 1 - dampening (sg_sgd_damp1). */
static inline SG_HD float sg_sgd_buf(const float *buf, float d, float momentum, float damp1,
                                     int first) {
    return first ? d : sg_fadd(sg_fmul(momentum, *buf), sg_fmul(damp1, d));
}
/* The direction with momentum: d + momentum*b (nesterov) or b. */
static inline SG_HD float sg_sgd_dir(float d, float b, float momentum, int nesterov) {
    return nesterov ? sg_fadd(d, sg_fmul(momentum, b)) : b;
}
/* p - lr*d. */
static inline SG_HD float sg_sgd_apply(float p, float d, float lr) {
    return sg_fsub(p, sg_fmul(lr, d));
}

/* The whole update of one parameter p with gradient g; `buf` is this
 * element's momentum buffer, read and written only when momentum != 0 (it
 * may be NULL otherwise). */
static inline SG_HD float sg_sgd_update(float p, float g, float *buf, float lr, float momentum,
                                        float damp1, float wd, int nesterov, int first) {
    float d = sg_sgd_decayed(g, p, wd);
    if (momentum != 0.0f) {
        float b = sg_sgd_buf(buf, d, momentum, damp1, first);
        *buf = b;
        d = sg_sgd_dir(d, b, momentum, nesterov);
    }
    return sg_sgd_apply(p, d, lr);
}

/* 1 - dampening, as both backends compute it. */
static inline SG_HD float sg_sgd_damp1(float dampening) { return sg_fsub(1.0f, dampening); }

#endif
