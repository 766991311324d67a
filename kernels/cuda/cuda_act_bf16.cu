/* kernels/cuda/cuda_act_bf16.cu - the convolution *_dt ops of
 * kernels/backend.h on the GPU (bf16 activation storage, the act_bf16 group
 * of tests/backend/run_act_bf16.c; kernels/cpu/cpu_act_bf16.c on the CPU).
 * The batch-norm *_dt ops of the group are in cuda_bn.cu: they are the
 * float32 BN kernels instantiated for bf16 loads and stores, so they live
 * with those templates.
 *
 * Under bf16 convolutions cuda_conv.cu reads and writes the bf16 storage
 * directly (sg_cuda_conv_native_dt: a bf16 activation is what its NHWC bf16
 * copy would hold, so the same results). Under fp32 convolutions the op
 * widens a bf16 x into a float32 buffer (exact), runs its float32 namesake
 * on it, and rounds a bf16-stored y from a float32 buffer into its storage
 * (RNE, kernels/formulas/bf16.h). Each op thus computes, bit for bit, what
 * the float32 op computes on the same values. bf16-stored gradients (dy_dt,
 * dx_dt) go the same way: read and written by cuDNN directly under bf16
 * convolutions, through float32 buffers under fp32. Owns those four float32
 * buffers (sg_cuda.act_buf): they grow when a larger tensor is first seen
 * and are freed with the backend (sg_cuda_act_buf_free).
 */
#include <stdint.h>

#include "core/log.h"
#include "kernels/cuda/cuda_internal.h"
#include "kernels/formulas/bf16.h"

int sg_cuda_act_dt(int dt, const char *op) {
    SG_CHECK(dt == SG_ACT_F32 || dt == SG_ACT_BF16,
             "CUDA backend: %s: storage type %d is not SG_ACT_F32 (0) or SG_ACT_BF16 (1) (a "
             "bug in the caller)",
             op, dt);
    return dt;
}

/* Elementwise bf16 bits <-> float (fp32 convolutions with bf16 storage).
 * With both pointers 16-byte aligned (bf16_vec_ok, at the launch) a thread
 * converts 8 elements at a time (one 16-byte load or store of bf16, two of
 * float) and the last n % 8 one at a time; otherwise all one at a time. The
 * same conversion of each element either way. */
__global__ void k_bf16_widen(const uint16_t *__restrict__ src, float *__restrict__ dst, size_t n,
                             int vec) {
    size_t t = (size_t)blockIdx.x * blockDim.x + threadIdx.x, step = (size_t)gridDim.x * blockDim.x;
    size_t done = 0;
    if (vec) {
        size_t n8 = n / 8;
        for (size_t i = t; i < n8; i += step) {
            uint4 u = ((const uint4 *)src)[i];
            unsigned w[4] = {u.x, u.y, u.z, u.w};
            float v[8];
            for (int e = 0; e < 4; e++) {
                v[2 * e] = sg_bf16_to_f32((uint16_t)(w[e] & 0xffffu));
                v[2 * e + 1] = sg_bf16_to_f32((uint16_t)(w[e] >> 16));
            }
            ((float4 *)dst)[2 * i] = make_float4(v[0], v[1], v[2], v[3]);
            ((float4 *)dst)[2 * i + 1] = make_float4(v[4], v[5], v[6], v[7]);
        }
        done = n8 * 8;
    }
    for (size_t i = done + t; i < n; i += step) dst[i] = sg_bf16_to_f32(src[i]);
}

__global__ void k_bf16_narrow(const float *__restrict__ src, uint16_t *__restrict__ dst, size_t n,
                              int vec) {
    size_t t = (size_t)blockIdx.x * blockDim.x + threadIdx.x, step = (size_t)gridDim.x * blockDim.x;
    size_t done = 0;
    if (vec) {
        size_t n8 = n / 8;
        for (size_t i = t; i < n8; i += step) {
            float4 a = ((const float4 *)src)[2 * i], b = ((const float4 *)src)[2 * i + 1];
            float v[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
            unsigned w[4];
            for (int e = 0; e < 4; e++)
                w[e] = (unsigned)sg_bf16_bits(v[2 * e]) |
                       ((unsigned)sg_bf16_bits(v[2 * e + 1]) << 16);
            ((uint4 *)dst)[i] = make_uint4(w[0], w[1], w[2], w[3]);
        }
        done = n8 * 8;
    }
    for (size_t i = done + t; i < n; i += step) dst[i] = sg_bf16_bits(src[i]);
}

/* Whether the conversion of src to dst takes the 8-element route. */
static int bf16_vec_ok(const void *src, const void *dst) {
    return (((uintptr_t)src | (uintptr_t)dst) & 15u) == 0;
}

/* Blocks for n elements, grid-stride beyond 65535 blocks of 256. */
static unsigned elem_blocks(size_t n) {
    size_t b = (n + 255) / 256;
    return (unsigned)(b < 65535 ? (b ? b : 1) : 65535);
}

/* Float32 buffer `slot` of at least count floats. */
static float *act_buf(sg_backend *be, int slot, size_t count) {
    sg_cuda *cu = sg_cu(be);
    sg_cuda_raw_grow(cu, &cu->act_buf[slot], &cu->act_bytes[slot], count * sizeof(float),
                     "the float32 copies of bf16-stored activations");
    return (float *)cu->act_buf[slot];
}

void sg_cuda_act_buf_free(sg_cuda *cu) {
    for (int i = 0; i < 4; i++) {
        sg_cuda_raw_free(cu, cu->act_buf[i], cu->act_bytes[i]);
        cu->act_buf[i] = NULL;
        cu->act_bytes[i] = 0;
    }
}

static const float *widen(sg_backend *be, int slot, const void *src, size_t n) {
    float *dst = act_buf(be, slot, n);
    int vec = bf16_vec_ok(src, dst);
    SG_LAUNCH(elem_blocks(vec ? (n + 7) / 8 : n), 256, 0, sg_cu_stream(be), k_bf16_widen)
    ((const uint16_t *)src, dst, n, vec);
    CU_LAUNCH_CHECK("k_bf16_widen");
    return dst;
}

static void narrow(sg_backend *be, const float *src, void *dst, size_t n) {
    int vec = bf16_vec_ok(src, dst);
    SG_LAUNCH(elem_blocks(vec ? (n + 7) / 8 : n), 256, 0, sg_cu_stream(be), k_bf16_narrow)
    (src, (uint16_t *)dst, n, vec);
    CU_LAUNCH_CHECK("k_bf16_narrow");
}

static void sg_cuda_conv_fwd_dt(sg_backend *be, const sg_conv_desc *d, const void *x, int x_dt,
                                const float *w, void *y, int y_dt) {
    int xb = sg_cuda_act_dt(x_dt, "conv_fwd_dt") == SG_ACT_BF16;
    int yb = sg_cuda_act_dt(y_dt, "conv_fwd_dt") == SG_ACT_BF16;
    if (sg_cuda_conv_native_dt(be, d, 1, x, xb, w, 0, y, yb, 0)) return;
    size_t nx = (size_t)d->n * d->c * d->h * d->w, ny = (size_t)d->n * d->k * d->oh * d->ow;
    const float *xf = xb ? widen(be, 0, x, nx) : (const float *)x;
    float *yf = yb ? act_buf(be, 1, ny) : (float *)y;
    sg_cuda_conv_f32(be, d, 1, xf, w, yf, 0);
    if (yb) narrow(be, yf, y, ny);
}

static void sg_cuda_conv_bwd_weight_dt(sg_backend *be, const sg_conv_desc *d, const void *x,
                                       int x_dt, const void *dy, int dy_dt, float *dw,
                                       int accumulate) {
    int xb = sg_cuda_act_dt(x_dt, "conv_bwd_weight_dt") == SG_ACT_BF16;
    int gb = sg_cuda_act_dt(dy_dt, "conv_bwd_weight_dt") == SG_ACT_BF16;
    if (sg_cuda_conv_native_dt(be, d, 0, x, xb, dy, gb, dw, 0, accumulate)) return;
    size_t nx = (size_t)d->n * d->c * d->h * d->w, ny = (size_t)d->n * d->k * d->oh * d->ow;
    const float *dyf = gb ? widen(be, 2, dy, ny) : (const float *)dy;
    sg_cuda_conv_f32(be, d, 0, xb ? widen(be, 0, x, nx) : (const float *)x, dyf, dw, accumulate);
}

/* Both backward passes (dw or dx NULL: one): the two ops, in the stated
 * order (nothing is shared here yet). Backward-data under bf16
 * convolutions reads a bf16 dy and writes a bf16 dx directly
 * (sg_cuda_conv_bwd_data_dt); under fp32 they go through float32 buffers
 * (2: dy widened, 3: dx before it is rounded). */
static void sg_cuda_conv_bwd_dt(sg_backend *be, const sg_conv_desc *d, const void *x, int x_dt,
                                const void *dy, int dy_dt, const float *w, float *dw, int acc_w,
                                void *dx, int dx_dt, int acc_x) {
    int gb = sg_cuda_act_dt(dy_dt, "conv_bwd_dt") == SG_ACT_BF16;
    int db = sg_cuda_act_dt(dx_dt, "conv_bwd_dt") == SG_ACT_BF16;
    SG_CHECK(!dx || !db || !acc_x,
             "CUDA backend: conv_bwd_dt: acc_x = 1 with a bf16 dx: a bf16 gradient is written "
             "once, never added to (a bug in the caller: keep that gradient float32)");
    if (dw) sg_cuda_conv_bwd_weight_dt(be, d, x, x_dt, dy, dy_dt, dw, acc_w);
    if (!dx) return;
    if (!gb && !db) {
        be->ops->conv_bwd_data(be, d, (const float *)dy, w, (float *)dx, acc_x);
        return;
    }
    if (sg_cuda_conv_bwd_data_dt(be, d, dy, gb, w, dx, db, acc_x)) return;
    size_t nx = (size_t)d->n * d->c * d->h * d->w, ny = (size_t)d->n * d->k * d->oh * d->ow;
    const float *dyf = gb ? widen(be, 2, dy, ny) : (const float *)dy;
    float *dxf = db ? act_buf(be, 3, nx) : (float *)dx;
    be->ops->conv_bwd_data(be, d, dyf, w, dxf, acc_x);
    if (db) narrow(be, dxf, dx, nx);
}

void sg_cuda_fill_act_bf16_ops(sg_ops *o) {
    o->conv_fwd_dt = sg_cuda_conv_fwd_dt;
    o->conv_bwd_weight_dt = sg_cuda_conv_bwd_weight_dt;
    o->conv_bwd_dt = sg_cuda_conv_bwd_dt;
}
