/* kernels/cpu/cpu_sgd.c - the two ends of a training step on the CPU: the
 * SGD update (torch.optim.SGD semantics, see backend.h) and the input
 * conversion uint8 HWC -> normalized float NCHW. The per-element arithmetic
 * of both is shared with the CUDA backend: kernels/formulas/sgd.h and
 * kernels/formulas/normalize.h.
 */
#include "kernels/cpu/cpu_internal.h"
#include "kernels/formulas/normalize.h"
#include "kernels/formulas/sgd.h"

#define PAR_IF(count) if ((count) >= SG_CPU_PAR_MIN)

/* formulas/sgd.h's steps, with the momentum branch hoisted out of the
 * loops (the per-call selects inside vectorize). */
static void sgd_step(sg_backend *be, float *param, const float *grad, float *buf, size_t count,
                     float lr, float momentum, float dampening, float wd, int nesterov,
                     int first) {
    /* the bf16 weight copies of param are stale from here on */
    sg_cpu_written(be, param, count * sizeof(float));
    float damp = sg_sgd_damp1(dampening);
    if (momentum == 0.0f) {
#pragma omp parallel for simd schedule(static) PAR_IF(count)
        for (size_t i = 0; i < count; i++)
            param[i] = sg_sgd_apply(param[i], sg_sgd_decayed(grad[i], param[i], wd), lr);
        return;
    }
#pragma omp parallel for simd schedule(static) PAR_IF(count)
    for (size_t i = 0; i < count; i++) {
        float d = sg_sgd_decayed(grad[i], param[i], wd);
        float b = sg_sgd_buf(buf + i, d, momentum, damp, first);
        buf[i] = b;
        param[i] = sg_sgd_apply(param[i], sg_sgd_dir(d, b, momentum, nesterov), lr);
    }
}

static void normalize_u8(sg_backend *be, const uint8_t *src, float *dst, int n, int h, int w,
                         const float mean[3], const float std[3]) {
    (void)be;
    size_t hw = (size_t)h * w;
    /* (v/255 - mean)/std = v*a + b (formulas/normalize.h). */
    float a[3], b[3];
    for (int ch = 0; ch < 3; ch++) {
        a[ch] = sg_normalize_a(std[ch]);
        b[ch] = sg_normalize_b(mean[ch], std[ch]);
    }
    long rows = (long)n * h;
#pragma omp parallel for schedule(static) PAR_IF((size_t)rows * w)
    for (long r = 0; r < rows; r++) {
        long i = r / h;
        size_t p0 = (size_t)(r % h) * w;
        const uint8_t *s = src + ((size_t)i * hw + p0) * 3;
        float *d0 = dst + (size_t)i * 3 * hw + p0, *d1 = d0 + hw, *d2 = d1 + hw;
        for (int q = 0; q < w; q++) {
            d0[q] = sg_normalize_px(s[3 * q], a[0], b[0]);
            d1[q] = sg_normalize_px(s[3 * q + 1], a[1], b[1]);
            d2[q] = sg_normalize_px(s[3 * q + 2], a[2], b[2]);
        }
    }
}

void sg_cpu_fill_sgd_ops(sg_ops *ops) {
    ops->sgd_step = sgd_step;
    ops->normalize_u8 = normalize_u8;
}
