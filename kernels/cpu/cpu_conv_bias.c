/* kernels/cpu/cpu_conv_bias.c - the convolution bias on the CPU (part of
 * the conv group, tests/backend/run_conv.c; kernels/cuda/cuda_conv_bias.cu
 * on the GPU): y[n,c,:] += b[c] and its gradient db[c] (+)= sum of dy over
 * n and the plane. The convolutions themselves (cpu_conv.c) have no bias:
 * the model adds it as a separate op.
 * OpenMP over planes (forward) or channels (backward: each thread owns its
 * channels' sums, summed in double in a fixed order, so no race and the same
 * bits whatever the thread count).
 */
#include "kernels/cpu/cpu_internal.h"

#define PAR_IF(count) if ((count) >= SG_CPU_PAR_MIN)

static void bias_fwd(sg_backend *be, float *y, const float *b, int n, int c, int hw) {
    (void)be;
    long planes = (long)n * c;
#pragma omp parallel for schedule(static) PAR_IF((size_t)planes *hw)
    for (long pl = 0; pl < planes; pl++) {
        float v = b[pl % c];
        float *p = y + (size_t)pl * hw;
#pragma omp simd
        for (int q = 0; q < hw; q++) p[q] += v;
    }
}

static void bias_bwd(sg_backend *be, const float *dy, float *db, int n, int c, int hw,
                     int accumulate) {
    (void)be;
#pragma omp parallel for schedule(static) PAR_IF((size_t)n *c *hw)
    for (int ch = 0; ch < c; ch++) {
        double s = 0;
        for (int i = 0; i < n; i++) {
            const float *p = dy + ((size_t)i * c + ch) * hw;
#pragma omp simd reduction(+ : s)
            for (int q = 0; q < hw; q++) s += p[q];
        }
        db[ch] = accumulate ? (float)(db[ch] + s) : (float)s;
    }
}

void sg_cpu_fill_conv_bias_ops(sg_ops *ops) {
    ops->bias_fwd = bias_fwd;
    ops->bias_bwd = bias_bwd;
}
