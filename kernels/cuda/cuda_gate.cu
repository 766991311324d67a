/* kernels/cuda/cuda_gate.cu - the gate group on the GPU (the ops of
 * tests/backend/run_gate.c; kernels/cpu/cpu_gate.c on the CPU): hardswish,
 * hardsigmoid and sigmoid with their gradients (grid-stride kernels on the
 * per-element formulas shared with the CPU, kernels/formulas/gate.h: the
 * hard ones give the CPU's bits), and channel scaling y = x * s[n,c] with
 * its gradients: one block per (n, c) plane, whose ds is a double block sum
 * in a fixed order (deterministic, no atomics) before the plane's dx is
 * written.
 */
#include "core/log.h"
#include "kernels/cuda/cuda_internal.h"
#include "kernels/cuda/cuda_reduce.cuh"
#include "kernels/formulas/gate.h"

/* A forward y = F(x) and a backward dx (+)= G(dy, v), v = x or y. */
#define GATE_OPS(name, F, G)                                                                     \
    __global__ void k_##name##_fwd(const float *x, float *y, size_t n) {                         \
        GRID_STRIDE(i, n) y[i] = F(x[i]);                                                        \
    }                                                                                            \
    static void sg_cuda_##name##_fwd(sg_backend *be, const float *x, float *y, size_t count) {   \
        LAUNCH(k_##name##_fwd, count, x, y, count);                                              \
    }                                                                                            \
    __global__ void k_##name##_bwd(const float *dy, const float *v, float *dx, size_t n,         \
                                   int acc) {                                                    \
        GRID_STRIDE(i, n) {                                                                      \
            float g = G(dy[i], v[i]);                                                            \
            dx[i] = acc ? sg_fadd(dx[i], g) : g;                                                 \
        }                                                                                        \
    }                                                                                            \
    static void sg_cuda_##name##_bwd(sg_backend *be, const float *dy, const float *v, float *dx, \
                                     size_t count, int accumulate) {                             \
        LAUNCH(k_##name##_bwd, count, dy, v, dx, count, accumulate);                             \
    }

GATE_OPS(hardswish, sg_hardswish, sg_hardswish_grad)
GATE_OPS(hardsigmoid, sg_hardsigmoid, sg_hardsigmoid_grad)
GATE_OPS(sigmoid, sg_sigmoid, sg_sigmoid_grad)

__global__ void k_chan_scale_fwd(const float *x, const float *s, float *y, int hw, size_t planes) {
    SG_PLANE_LOOP(pl, planes) {
        float v = s[pl];
        const float *xp = x + pl * (size_t)hw;
        float *yp = y + pl * (size_t)hw;
        SG_INPLANE_LOOP(j, hw) yp[j] = sg_fmul(xp[j], v);
    }
}

static void sg_cuda_chan_scale_fwd(sg_backend *be, const float *x, const float *s, float *y, int n,
                                   int c, int hw) {
    size_t planes = (size_t)n * c;
    if (!planes || hw <= 0) return;
    int t = sg_cu_plane_threads(hw);
    k_chan_scale_fwd<<<sg_cu_plane_grid(hw, planes, t), t, 0, sg_cu_stream(be)>>>(x, s, y, hw,
                                                                                  planes);
    CU_LAUNCH_CHECK("k_chan_scale_fwd");
}

/* One block per plane: ds first (a block sum in double), then dx. */
__global__ void k_chan_scale_bwd(const float *dy, const float *x, const float *s, float *dx,
                                 float *ds, int hw, int acc_dx, int acc_ds) {
    __shared__ double sh[32];
    size_t pl = blockIdx.x;
    const float *g = dy + pl * (size_t)hw;
    if (ds) {
        const float *xp = x + pl * (size_t)hw;
        double acc = 0;
        for (int j = threadIdx.x; j < hw; j += blockDim.x) acc += (double)g[j] * (double)xp[j];
        acc = sg_block_sum(acc, sh);
        if (threadIdx.x == 0) ds[pl] = acc_ds ? (float)((double)ds[pl] + acc) : (float)acc;
    }
    if (dx) {
        float v = s[pl];
        float *d = dx + pl * (size_t)hw;
        for (int j = threadIdx.x; j < hw; j += blockDim.x) {
            float p = sg_fmul(g[j], v);
            d[j] = acc_dx ? sg_fadd(d[j], p) : p;
        }
    }
}

static void sg_cuda_chan_scale_bwd(sg_backend *be, const float *dy, const float *x, const float *s,
                                   float *dx, float *ds, int n, int c, int hw, int acc_dx,
                                   int acc_ds) {
    size_t planes = (size_t)n * c;
    if (!planes || hw <= 0 || (!dx && !ds)) return;
    SG_CHECK(planes <= 0x7fffffffu, "CUDA backend: chan_scale_bwd of %zu planes (n %d, c %d)",
             planes, n, c);
    k_chan_scale_bwd<<<(unsigned)planes, SG_CUDA_RED_THREADS, 0, sg_cu_stream(be)>>>(
        dy, x, s, dx, ds, hw, acc_dx, acc_ds);
    CU_LAUNCH_CHECK("k_chan_scale_bwd");
}

void sg_cuda_fill_gate_ops(sg_ops *o) {
    o->hardswish_fwd = sg_cuda_hardswish_fwd;
    o->hardswish_bwd = sg_cuda_hardswish_bwd;
    o->hardsigmoid_fwd = sg_cuda_hardsigmoid_fwd;
    o->hardsigmoid_bwd = sg_cuda_hardsigmoid_bwd;
    o->sigmoid_fwd = sg_cuda_sigmoid_fwd;
    o->sigmoid_bwd = sg_cuda_sigmoid_bwd;
    o->chan_scale_fwd = sg_cuda_chan_scale_fwd;
    o->chan_scale_bwd = sg_cuda_chan_scale_bwd;
}
