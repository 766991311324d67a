/* kernels/cuda/cuda_gate.cu - the gate group on the GPU (the ops of
 * tests/backend/run_gate.c; kernels/cpu/cpu_gate.c on the CPU): hardswish,
 * hardsigmoid and sigmoid with their gradients (grid-stride kernels on the
 * per-element formulas shared with the CPU, kernels/formulas/gate.h: the
 * hard ones give the CPU's bits), and channel scaling y = x * s[n,c] with
 * its gradients: one block per (n, c) plane, whose ds is a double block sum
 * in a fixed order (deterministic, no atomics) before the plane's dx is
 * written; under NHWC activations (be->layout) one block per image and 32
 * channels, a column sum in a fixed order (cuda_chan_reduce.cuh).
 */
#include "core/log.h"
#include "kernels/cuda/cuda_chan_reduce.cuh"
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

/* Per plane in either layout (cuda_internal.h): s[i*c + ch] is s[pl] for
 * an NCHW plane, s[(pl / hw)*c + j] for an NHWC one. */
__global__ void k_chan_scale_fwd(const float *x, const float *s, float *y, int c, int hw, int inner,
                                 size_t planes, int nhwc) {
    SG_PLANE_LOOP(pl, planes) {
        const float *sp = nhwc ? s + pl / (size_t)hw * (size_t)c : s + pl;
        const float *xp = x + pl * (size_t)inner;
        float *yp = y + pl * (size_t)inner;
        SG_INPLANE_LOOP(j, inner) yp[j] = sg_fmul(xp[j], sp[nhwc ? j : 0]);
    }
}

static void sg_cuda_chan_scale_fwd(sg_backend *be, const float *x, const float *s, float *y, int n,
                                   int c, int hw) {
    int nhwc = sg_cu_nhwc(be), inner = sg_cu_inner(nhwc, c, hw);
    size_t planes = sg_cu_planes(nhwc, n, c, hw);
    if (!planes || hw <= 0 || c <= 0) return;
    dim3 t = sg_cu_plane_block(inner);
    SG_LAUNCH(sg_cu_plane_grid(inner, planes, t), t, 0, sg_cu_stream(be), k_chan_scale_fwd)
    (x, s, y, c, hw, inner, planes, nhwc);
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

/* NHWC: one block per (image, SG_COL_W channels), a column reduction
 * (cuda_chan_reduce.cuh): each thread sums its column's rows p = row lane,
 * row lane + SG_COL_ROWS, ... in double, the row lanes merged in order (a
 * fixed order: the same bits on every run), and writes dx on the way. */
__global__ void k_chan_scale_bwd_nhwc(const float *dy, const float *x, const float *s, float *dx,
                                      float *ds, int c, int hw, int acc_dx, int acc_ds) {
    __shared__ double sh[SG_CHAN_THREADS];
    int ch = (int)blockIdx.y * SG_COL_W + (int)(threadIdx.x % SG_COL_W);
    size_t img = blockIdx.x, si = img * (size_t)c + (size_t)(ch < c ? ch : 0);
    float v = s[si];
    double acc = 0;
    if (ch < c)
        for (int p = threadIdx.x / SG_COL_W; p < hw; p += SG_COL_ROWS) {
            size_t i = (img * (size_t)hw + (size_t)p) * (size_t)c + (size_t)ch;
            if (ds) acc += (double)dy[i] * (double)x[i];
            if (dx) {
                float q = sg_fmul(dy[i], v);
                dx[i] = acc_dx ? sg_fadd(dx[i], q) : q;
            }
        }
    if (!ds) return; /* the whole block returns: no barrier is left waiting */
    acc = col_sum(acc, sh);
    if (threadIdx.x < SG_COL_W && ch < c)
        ds[si] = acc_ds ? (float)((double)ds[si] + acc) : (float)acc;
}

static void sg_cuda_chan_scale_bwd(sg_backend *be, const float *dy, const float *x, const float *s,
                                   float *dx, float *ds, int n, int c, int hw, int acc_dx,
                                   int acc_ds) {
    size_t planes = (size_t)n * c;
    if (!planes || hw <= 0 || (!dx && !ds)) return;
    SG_CHECK(planes <= 0x7fffffffu, "CUDA backend: chan_scale_bwd of %zu planes (n %d, c %d)",
             planes, n, c);
    if (sg_cu_nhwc(be) && c > 1 && hw > 1) {
        SG_LAUNCH(dim3((unsigned)n, (unsigned)((c + SG_COL_W - 1) / SG_COL_W)), SG_CHAN_THREADS, 0,
                  sg_cu_stream(be), k_chan_scale_bwd_nhwc)
        (dy, x, s, dx, ds, c, hw, acc_dx, acc_ds);
        CU_LAUNCH_CHECK("k_chan_scale_bwd_nhwc");
        return;
    }
    SG_LAUNCH((unsigned)planes, SG_CUDA_RED_THREADS, 0, sg_cu_stream(be), k_chan_scale_bwd)
    (dy, x, s, dx, ds, hw, acc_dx, acc_ds);
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
