/* kernels/cpu/cpu_act_bf16.c - the convolution *_dt ops of
 * kernels/backend.h on the CPU (bf16 activation storage, the act_bf16 group
 * of tests/backend/run_act_bf16.c; kernels/cuda/cuda_act_bf16.cu on the
 * GPU). The batch-norm *_dt ops of the group are in cpu_bn.c: they run the
 * float32 BN's per-plane kernels (static there) on widened planes rather
 * than wrapping the float32 ops, so they live with those kernels.
 *
 * On oneDNN's native bf16 path a convolution reads and writes the bf16
 * storage directly (sg_cpu_conv_native_dt: the bf16 values the float32 path
 * would convert to, so the same results). Otherwise (emulated bf16, fp32,
 * the per-tap path, a geometry without a bf16 kernel) the op widens a bf16
 * x into a float32 buffer (exact), runs its float32 namesake (cpu_conv.c) on
 * it, and rounds a bf16-stored y from a float32 buffer into its storage
 * (RNE, kernels/formulas/bf16.h; under bf16 precision the result is a bf16
 * value already, so exact). Each op thus computes, bit for bit, what the
 * float32 op computes on the same values: a bf16-stored tensor changes the
 * memory a plan needs, never a result (tests/train/test_precision.c
 * "storage" checks whole training runs). The two float32 buffers are the
 * backend's (sg_cpu_act_buf, cpu_memory.c): they grow to the largest tensor
 * seen and are reused by every call. bf16-stored gradients (dy_dt, dx_dt)
 * go the same way on every path: a bf16 dy is widened (buffer 2), a bf16
 * dx computed in float32 (buffer 3) and rounded into its storage.
 *
 * NHWC activations (be->layout) need nothing here: widening and rounding are
 * elementwise, and the convolutions called (the native entries too: their
 * bf16 user tensors are nhwc then) store activations in the backend's layout.
 */
#include "core/log.h"
#include "kernels/cpu/cpu_internal.h"

static void check_dt(int dt, const char *op, const char *arg) {
    if (dt != SG_ACT_F32 && dt != SG_ACT_BF16)
        SG_FATAL("CPU backend: %s: %s = %d is not SG_ACT_F32 (0) or SG_ACT_BF16 (1) (a bug in "
                 "the caller)",
                 op, arg, dt);
}

/* x as float32: x itself, or its widened copy in buffer 0. */
static const float *input_f32(sg_backend *be, const void *x, int x_dt, size_t count,
                              const char *op) {
    check_dt(x_dt, op, "x_dt");
    if (x_dt == SG_ACT_F32) return x;
    float *b = sg_cpu_act_buf(be, 0, count);
    sg_cpu_bf16_widen(b, x, count);
    return b;
}

static void conv_fwd_dt(sg_backend *be, const sg_conv_desc *d, const void *x, int x_dt,
                        const float *w, void *y, int y_dt) {
    check_dt(x_dt, "conv_fwd_dt", "x_dt");
    check_dt(y_dt, "conv_fwd_dt", "y_dt");
    if (sg_cpu_conv_native_dt(be, d, 1, x, x_dt, w, y, y_dt, 0)) return;
    const float *xf = input_f32(be, x, x_dt, (size_t)d->n * d->c * d->h * d->w, "conv_fwd_dt");
    size_t ny = (size_t)d->n * d->k * d->oh * d->ow;
    float *yf = y_dt == SG_ACT_F32 ? y : sg_cpu_act_buf(be, 1, ny);
    sg_cpu_conv_f32(be, d, 1, xf, w, yf, 0);
    if (y_dt == SG_ACT_BF16) sg_cpu_bf16_narrow(y, yf, ny);
}

/* dy as float32: dy itself, or its widened copy (exact) in buffer 2. */
static const float *grad_f32(sg_backend *be, const void *dy, int dy_dt, size_t count,
                             const char *op) {
    check_dt(dy_dt, op, "dy_dt");
    if (dy_dt == SG_ACT_F32) return dy;
    float *b = sg_cpu_act_buf(be, 2, count);
    sg_cpu_bf16_widen(b, dy, count);
    return b;
}

static size_t dy_count(const sg_conv_desc *d) { return (size_t)d->n * d->k * d->oh * d->ow; }

static void conv_bwd_weight_dt(sg_backend *be, const sg_conv_desc *d, const void *x, int x_dt,
                               const void *dy, int dy_dt, float *dw, int accumulate) {
    check_dt(x_dt, "conv_bwd_weight_dt", "x_dt");
    const float *dyf = grad_f32(be, dy, dy_dt, dy_count(d), "conv_bwd_weight_dt");
    if (sg_cpu_conv_native_dt(be, d, 0, x, x_dt, dyf, dw, SG_ACT_F32, accumulate)) return;
    const float *xf =
        input_f32(be, x, x_dt, (size_t)d->n * d->c * d->h * d->w, "conv_bwd_weight_dt");
    sg_cpu_conv_f32(be, d, 0, xf, dyf, dw, accumulate);
}

/* Both backward passes (or one: dw or dx NULL): on the native bf16 GEMM
 * paths with dy rounded to bf16 once (sg_cpu_conv_native_bwd), else the
 * two ops. A bf16 dy is widened first (buffer 2; the convolutions round it
 * back to the same bf16 values), a bf16 dx computed into buffer 3 and
 * rounded into its storage (under bf16 precision a bf16 value already:
 * exact). */
static void conv_bwd_dt(sg_backend *be, const sg_conv_desc *d, const void *x, int x_dt,
                        const void *dy, int dy_dt, const float *w, float *dw, int acc_w, void *dx,
                        int dx_dt, int acc_x) {
    check_dt(x_dt, "conv_bwd_dt", "x_dt");
    check_dt(dx_dt, "conv_bwd_dt", "dx_dt");
    if (dx && dx_dt == SG_ACT_BF16 && acc_x)
        SG_FATAL("CPU backend: conv_bwd_dt: acc_x = 1 with a bf16 dx: a bf16 gradient is "
                 "written once, never added to (a bug in the caller: keep that gradient float32)");
    const float *dyf = grad_f32(be, dy, dy_dt, dy_count(d), "conv_bwd_dt");
    size_t nx = (size_t)d->n * d->c * d->h * d->w;
    float *dxf = dx && dx_dt == SG_ACT_BF16 ? sg_cpu_act_buf(be, 3, nx) : dx;
    if (dw && dx) {
        if (!sg_cpu_conv_native_bwd(be, d, x, x_dt, dyf, w, dw, acc_w, dxf, acc_x)) {
            conv_bwd_weight_dt(be, d, x, x_dt, dyf, SG_ACT_F32, dw, acc_w);
            sg_cpu_conv_bwd_data_f32(be, d, dyf, w, dxf, acc_x);
        }
    } else if (dw) {
        conv_bwd_weight_dt(be, d, x, x_dt, dyf, SG_ACT_F32, dw, acc_w);
    } else if (dx) {
        sg_cpu_conv_bwd_data_f32(be, d, dyf, w, dxf, acc_x);
    }
    if (dxf != dx) sg_cpu_bf16_narrow(dx, dxf, nx);
}

void sg_cpu_fill_act_bf16_ops(sg_ops *ops) {
    ops->conv_fwd_dt = conv_fwd_dt;
    ops->conv_bwd_weight_dt = conv_bwd_weight_dt;
    ops->conv_bwd_dt = conv_bwd_dt;
}
