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
 * seen and are reused by every call.
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

static void conv_bwd_weight_dt(sg_backend *be, const sg_conv_desc *d, const void *x, int x_dt,
                               const float *dy, float *dw, int accumulate) {
    check_dt(x_dt, "conv_bwd_weight_dt", "x_dt");
    if (sg_cpu_conv_native_dt(be, d, 0, x, x_dt, dy, dw, SG_ACT_F32, accumulate)) return;
    const float *xf =
        input_f32(be, x, x_dt, (size_t)d->n * d->c * d->h * d->w, "conv_bwd_weight_dt");
    sg_cpu_conv_f32(be, d, 0, xf, dy, dw, accumulate);
}

/* Both backward passes: on the native bf16 GEMM paths with dy rounded to
 * bf16 once (sg_cpu_conv_native_bwd), else the two ops. */
static void conv_bwd_dt(sg_backend *be, const sg_conv_desc *d, const void *x, int x_dt,
                        const float *dy, const float *w, float *dw, int acc_w, float *dx,
                        int acc_x) {
    check_dt(x_dt, "conv_bwd_dt", "x_dt");
    if (sg_cpu_conv_native_bwd(be, d, x, x_dt, dy, w, dw, acc_w, dx, acc_x)) return;
    conv_bwd_weight_dt(be, d, x, x_dt, dy, dw, acc_w);
    be->ops->conv_bwd_data(be, d, dy, w, dx, acc_x);
}

void sg_cpu_fill_act_bf16_ops(sg_ops *ops) {
    ops->conv_fwd_dt = conv_fwd_dt;
    ops->conv_bwd_weight_dt = conv_bwd_weight_dt;
    ops->conv_bwd_dt = conv_bwd_dt;
}
