/* kernels/cuda/cuda_elem.cu - the elementwise group on the GPU (the ops of
 * tests/backend/run_elem.c; kernels/cpu/cpu_elem.c on the CPU): ReLU, add,
 * scale, axpy, dropout, SGD, input normalisation and the sum of squares.
 *
 * Each op is one grid-stride kernel on the compute stream. Dropout draws its
 * mask from kernels/rng.h with the rule backend.h states, so the mask is
 * bit-identical to the CPU backend's (under NHWC keyed on each element's NCHW
 * index, as backend.h says); the input normalisation writes either layout.
 * SGD and the input normalisation use
 * the per-element formulas shared with the CPU backend
 * (kernels/formulas/sgd.h, normalize.h). sumsq reduces in double through
 * per-block partials (deterministic) and returns on the host.
 *
 * nvcc fuses a*b + c into one FMA by default and the CPU build does not, so
 * arithmetic that must match the CPU backend bit for bit is written with
 * the non-fusing sg_f* operations (formulas/hostdev.h) or __fmul_rn.
 */
#include "core/log.h"
#include "kernels/cuda/cuda_internal.h"
#include "kernels/cuda/cuda_reduce.cuh"
#include "kernels/formulas/normalize.h"
#include "kernels/formulas/sgd.h"
#include "kernels/rng.h"

__global__ void k_relu_fwd(const float *x, float *y, size_t n) {
    GRID_STRIDE(i, n) y[i] = x[i] > 0.0f ? x[i] : 0.0f;
}
static void sg_cuda_relu_fwd(sg_backend *be, const float *x, float *y, size_t count) {
    LAUNCH(k_relu_fwd, count, x, y, count);
}

__global__ void k_relu_bwd(const float *dy, const float *y, float *dx, size_t n, int acc) {
    GRID_STRIDE(i, n) {
        float g = y[i] > 0.0f ? dy[i] : 0.0f;
        dx[i] = acc ? dx[i] + g : g;
    }
}
static void sg_cuda_relu_bwd(sg_backend *be, const float *dy, const float *y, float *dx,
                             size_t count, int accumulate) {
    LAUNCH(k_relu_bwd, count, dy, y, dx, count, accumulate);
}

__global__ void k_add(const float *a, const float *b, float *y, size_t n, int relu) {
    GRID_STRIDE(i, n) {
        float v = a[i] + b[i];
        y[i] = (relu && !(v > 0.0f)) ? 0.0f : v; /* the CPU backend's relu (NaN -> 0) */
    }
}
static void sg_cuda_add(sg_backend *be, const float *a, const float *b, float *y, size_t count,
                        int relu) {
    LAUNCH(k_add, count, a, b, y, count, relu);
}

__global__ void k_scale(const float *x, float *y, float alpha, size_t n) {
    GRID_STRIDE(i, n) y[i] = alpha * x[i];
}
static void sg_cuda_scale(sg_backend *be, const float *x, float *y, float alpha, size_t count) {
    LAUNCH(k_scale, count, x, y, alpha, count);
    sg_cuda_written(be, y, count * sizeof(float)); /* y may be weights (EMA) */
}

/* Not fused: y + alpha*x rounded twice, as the CPU computes it (an FMA
 * here made axpy differ from the CPU backend in the last bit). */
__global__ void k_axpy(float alpha, const float *x, float *y, size_t n) {
    GRID_STRIDE(i, n) y[i] = sg_fadd(y[i], sg_fmul(alpha, x[i]));
}
static void sg_cuda_axpy(sg_backend *be, float alpha, const float *x, float *y, size_t count) {
    LAUNCH(k_axpy, count, alpha, x, y, count);
    sg_cuda_written(be, y, count * sizeof(float));
}

/* ---- dropout (rule in backend.h: keep iff sg_rng_uniform(key, i) >= p) ---- */

/* i is the storage index; the mask is keyed on the element's NCHW index
 * (backend.h), which under NHWC is (img*c + ch)*hw + p for the storage
 * index (img*hw + p)*c + ch. */
__global__ void k_dropout_fwd(const float *x, float *y, uint8_t *mask, size_t n, int c, int hw,
                              int nhwc, float p, float scale, const uint64_t *step_key,
                              uint64_t salt) {
    /* the step key as it is when the kernel runs (set_step_key, cuda_graph.cu) */
    uint64_t key = sg_rng_dropout_key(*step_key, salt);
    GRID_STRIDE(i, n) {
        size_t key_i = i;
        if (nhwc) {
            size_t ch = i % (size_t)c, pix = i / (size_t)c, img = pix / (size_t)hw;
            key_i = (img * (size_t)c + ch) * (size_t)hw + pix % (size_t)hw;
        }
        uint8_t keep = sg_rng_uniform(key, (uint64_t)key_i) >= p;
        mask[i] = keep;
        y[i] = keep ? __fmul_rn(x[i], scale) : 0.0f; /* never fused: bit-exact */
    }
}
static void sg_cuda_dropout_fwd(sg_backend *be, const float *x, float *y, uint8_t *mask,
                                size_t count, int c, int hw, float p, uint64_t salt) {
    /* NCHW, or one channel or pixel: the storage index is the NCHW one */
    int nhwc = sg_cu_nhwc(be) && c > 1 && hw > 1;
    SG_CHECK(!nhwc || count % ((size_t)c * hw) == 0,
             "CUDA backend: dropout_fwd of %zu elements is not whole [c=%d, hw=%d] images", count,
             c, hw);
    float scale = p < 1.0f ? 1.0f / (1.0f - p) : 0.0f;
    LAUNCH(k_dropout_fwd, count, x, y, mask, count, c, hw, nhwc, p, scale, sg_cu(be)->step_key_dev,
           salt);
}

__global__ void k_dropout_bwd(const float *dy, const uint8_t *mask, float *dx, size_t n,
                              float scale, int acc) {
    GRID_STRIDE(i, n) {
        float g = mask[i] ? __fmul_rn(dy[i], scale) : 0.0f; /* not fused into the add */
        dx[i] = acc ? dx[i] + g : g;
    }
}
static void sg_cuda_dropout_bwd(sg_backend *be, const float *dy, const uint8_t *mask, float *dx,
                                size_t count, float p, int accumulate) {
    float scale = p < 1.0f ? 1.0f / (1.0f - p) : 0.0f;
    LAUNCH(k_dropout_bwd, count, dy, mask, dx, count, scale, accumulate);
}

/* ---- SGD, torch.optim.SGD semantics (see backend.h, formulas/sgd.h) ----
 * Before formulas/sgd.h, nvcc fused d + wd*p, momentum*buf + damp*d,
 * d + momentum*b and p - lr*d into FMAs, so a step could leave parameters
 * and buffers an ulp away from the CPU backend's. Now the same bits. */

__global__ void k_sgd(float *param, const float *grad, float *buf, size_t n, float lr,
                      float momentum, float damp1, float wd, int nesterov, int first) {
    GRID_STRIDE(i, n) {
        param[i] = sg_sgd_update(param[i], grad[i], momentum != 0.0f ? buf + i : NULL, lr, momentum,
                                 damp1, wd, nesterov, first);
    }
}
static void sg_cuda_sgd_step(sg_backend *be, float *param, const float *grad, float *buf,
                             size_t count, float lr, float momentum, float dampening, float wd,
                             int nesterov, int first) {
    SG_CHECK(momentum == 0.0f || buf, "CUDA backend: sgd_step with momentum %g needs a buffer",
             (double)momentum);
    LAUNCH(k_sgd, count, param, grad, buf, count, lr, momentum, sg_sgd_damp1(dampening), wd,
           nesterov, first);
    sg_cuda_written(be, param, count * sizeof(float)); /* its bf16 copies are stale */
}

/* ---- uint8 HWC -> normalised float NCHW ---- */

/* (v/255 - mean)/std = v*a + b (formulas/normalize.h), as the CPU backend
 * computes it, so both backends feed the same input. (Before, the kernel
 * wrote the same formula, but nvcc fused v*a + b into an FMA: not the CPU's
 * bits.) */
typedef struct norm3 {
    float a[3], b[3];
} norm3;

__global__ void k_normalize_u8(const uint8_t *src, float *dst, int h, int w, size_t total, int nhwc,
                               norm3 nm) {
    /* NHWC: the output's index is the HWC source's */
    if (nhwc) {
        GRID_STRIDE(i, total) {
            int ch = (int)(i % 3);
            dst[i] = sg_normalize_px(src[i], nm.a[ch], nm.b[ch]);
        }
        return;
    }
    /* i indexes the output [n, 3, h, w] */
    size_t plane = (size_t)h * w;
    GRID_STRIDE(i, total) {
        size_t pix = i % plane;
        int ch = (int)((i / plane) % 3);
        size_t img = i / (plane * 3);
        dst[i] = sg_normalize_px(src[(img * plane + pix) * 3 + ch], nm.a[ch], nm.b[ch]);
    }
}
static void sg_cuda_normalize_u8(sg_backend *be, const uint8_t *src, float *dst, int n, int h,
                                 int w, const float mean[3], const float std[3]) {
    norm3 nm;
    for (int k = 0; k < 3; k++) {
        nm.a[k] = sg_normalize_a(std[k]);
        nm.b[k] = sg_normalize_b(mean[k], std[k]);
    }
    size_t total = (size_t)n * 3 * h * w;
    LAUNCH(k_normalize_u8, total, src, dst, h, w, total, sg_cu_nhwc(be), nm);
}

/* ---- sum of squares, deterministic ---- */

__global__ void k_sumsq_partial(const float *x, size_t n, double *partial) {
    __shared__ double sh[32];
    double s = 0;
    GRID_STRIDE(i, n) s += (double)x[i] * (double)x[i];
    s = sg_block_sum(s, sh);
    if (threadIdx.x == 0) partial[blockIdx.x] = s;
}

/* Sums `nparts` partials (one block); writes out[0]. */
__global__ void k_sum_partials(const double *partial, int nparts, double *out) {
    __shared__ double sh[32];
    double s = 0;
    for (int i = threadIdx.x; i < nparts; i += blockDim.x) s += partial[i];
    s = sg_block_sum(s, sh);
    if (threadIdx.x == 0) out[0] = s;
}

static double sg_cuda_sumsq(sg_backend *be, const float *x, size_t count) {
    sg_cuda *cu = sg_cu(be);
    if (!count) return 0.0;
    cudaStream_t s = sg_cu_stream(be);
    unsigned blocks = sg_cu_blocks(count, SG_CUDA_RED_THREADS);
    if (blocks > SG_CUDA_RED_BLOCKS) blocks = SG_CUDA_RED_BLOCKS;
    SG_LAUNCH(blocks, SG_CUDA_RED_THREADS, 0, s, k_sumsq_partial)(x, count, cu->red_partial);
    CU_LAUNCH_CHECK("k_sumsq_partial");
    SG_LAUNCH(1, SG_CUDA_RED_THREADS, 0, s, k_sum_partials)
    (cu->red_partial, (int)blocks, cu->red_result);
    CU_LAUNCH_CHECK("k_sum_partials");
    double r;
    sg_cuda_read_result(be, &r, 1);
    return r;
}

void sg_cuda_fill_elem_ops(sg_ops *o) {
    o->relu_fwd = sg_cuda_relu_fwd;
    o->relu_bwd = sg_cuda_relu_bwd;
    o->add = sg_cuda_add;
    o->scale = sg_cuda_scale;
    o->axpy = sg_cuda_axpy;
    o->dropout_fwd = sg_cuda_dropout_fwd;
    o->dropout_bwd = sg_cuda_dropout_bwd;
    o->sgd_step = sg_cuda_sgd_step;
    o->normalize_u8 = sg_cuda_normalize_u8;
    o->sumsq = sg_cuda_sumsq;
}
