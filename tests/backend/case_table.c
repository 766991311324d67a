/* tests/backend/case_table.c - THE table of the backend conformance suite:
 * every case of every op of kernels/backend.h, with its shapes, flags and
 * tolerance. test_backend_ops runs each row on every backend compiled in
 * (rows with all_configs on every configuration of the backend: the CPU's
 * three conv layouts, CUDA's deterministic and benchmark algorithm choice;
 * and the bf16 / TF32 configurations, for rows that state tol_bf16 /
 * tol_tf32: every conv case, against the same float32 reference).
 *
 * Adding an op: its reference in tests/kernels/ref_ops.c, a runner in
 * run_<group>.c (cases.h says which fields runners read), and its rows here
 * (test_backend_ops fails, naming the op, while an op of SG_OPS_LIST has no
 * rows, unless its covered_elsewhere list names the rows that exercise it).
 *
 * Tolerances are relative: max|ref - got| / max(max|ref|, 1e-3); 0 means
 * bit-exact. `tol_cuda` states where CUDA legitimately differs from the CPU
 * (cuDNN's algorithms, reductions merged in another order); known values
 * (`want`) are checked to `want_tol`, absolute. Finite-difference rows
 * (grad_*) use tol as their relative tolerance (tb_check_fd).
 */
#include <stddef.h>

#include "tests/backend/cases.h"

#define EXACT 0.0
/* float sums of up to a few hundred products against double */
#define TOL_CONV 1e-4
/* cuDNN FP32 (no TF32): Winograd / FFT / implicit GEMM round differently */
#define TOL_CONV_CUDA 5e-4
/* bf16 convolutions against the float32 reference: inputs rounded to 8
 * significant bits (relative error <= 2^-9 each), float32 sums, the result
 * rounded to bf16 (<= 2^-8 = 3.9e-3 of the value): relative 1e-2 of max|ref|.
 * Each bf16 configuration also checks every result against the bf16-exact
 * reference to one or two bf16 steps (test_backend_ops.c). */
#define TOL_CONV_BF16 1e-2
/* TF32 (10 stored mantissa bits; cuDNN may truncate instead of rounding):
 * inputs within 2^-10, float32 sums */
#define TOL_CONV_TF32 3e-3
#define TOL_FD 1e-2
/* the per-tap GEMMs: NCHW float32, NHWC float32 backward, bf16 backward */
#define TAPS "taps taps-bwd taps-bf16"

/* One conv geometry -> its five cases: forward, backward-data and
 * backward-weight with accumulate 0 and 1, on every configuration.
 * prep = 1: conv_prepare first (the model's path), 0: first use builds.
 * The _AT forms name the CPU convolution paths the row is for (PATH:
 * "NAME" or "PASS:NAME", space-separated; tests/backend/cpu_paths.h): the
 * suite fails where another path runs a pass those paths run. A row that
 * names none is for oneDNN's rows (onednn-wino, -cl, -plain, -blocked). */
#define CONV_CASE(OP, RUN, ACC, PATH, N, C, H, W, K, R, S, SH, SW, PH, PW, DH, DW, PREP, NOTE) \
    {                                                                                          \
        OP, RUN, .conv = {N, C, H, W, K, R, S, SH, SW, PH, PW, DH, DW, 0, 0}, .acc = ACC,      \
                 .prepare = PREP, .tol = TOL_CONV, .tol_cuda = TOL_CONV_CUDA,                  \
                 .tol_bf16 = TOL_CONV_BF16, .tol_tf32 = TOL_CONV_TF32, .all_configs = 1,       \
                 .note = NOTE, .path = PATH                                                    \
    }
#define CONV_AT(PATH, ...)                                                       \
    CONV_CASE("conv_fwd", run_conv_fwd, 0, PATH, __VA_ARGS__),                   \
        CONV_CASE("conv_bwd_data", run_conv_bwd_data, 0, PATH, __VA_ARGS__),     \
        CONV_CASE("conv_bwd_data", run_conv_bwd_data, 1, PATH, __VA_ARGS__),     \
        CONV_CASE("conv_bwd_weight", run_conv_bwd_weight, 0, PATH, __VA_ARGS__), \
        CONV_CASE("conv_bwd_weight", run_conv_bwd_weight, 1, PATH, __VA_ARGS__)
#define CONV(...) CONV_AT(NULL, __VA_ARGS__)
/* The same five cases for a grouped convolution (groups G; depthwise: G = C = K). */
#define CONV_G_CASE(OP, RUN, ACC, PATH, G, N, C, H, W, K, R, S, SH, SW, PH, PW, DH, DW, PREP, \
                    NOTE)                                                                     \
    {                                                                                         \
        OP, RUN, .conv = {N, C, H, W, K, R, S, SH, SW, PH, PW, DH, DW, 0, 0, G}, .acc = ACC,  \
                 .prepare = PREP, .tol = TOL_CONV, .tol_cuda = TOL_CONV_CUDA,                 \
                 .tol_bf16 = TOL_CONV_BF16, .tol_tf32 = TOL_CONV_TF32, .all_configs = 1,      \
                 .note = NOTE, .path = PATH                                                   \
    }
#define CONV_G_AT(PATH, ...)                                                       \
    CONV_G_CASE("conv_fwd", run_conv_fwd, 0, PATH, __VA_ARGS__),                   \
        CONV_G_CASE("conv_bwd_data", run_conv_bwd_data, 0, PATH, __VA_ARGS__),     \
        CONV_G_CASE("conv_bwd_data", run_conv_bwd_data, 1, PATH, __VA_ARGS__),     \
        CONV_G_CASE("conv_bwd_weight", run_conv_bwd_weight, 0, PATH, __VA_ARGS__), \
        CONV_G_CASE("conv_bwd_weight", run_conv_bwd_weight, 1, PATH, __VA_ARGS__)
#define CONV_G(...) CONV_G_AT(NULL, __VA_ARGS__)
/* square kernel, same stride/pad/dilation on both axes */
#define CONV_SQ(N, C, H, W, K, R, ST, PAD, DIL, PREP, NOTE) \
    CONV(N, C, H, W, K, R, R, ST, ST, PAD, PAD, DIL, DIL, PREP, NOTE)
#define CONV_SQ_AT(PATH, N, C, H, W, K, R, ST, PAD, DIL, PREP, NOTE) \
    CONV_AT(PATH, N, C, H, W, K, R, R, ST, ST, PAD, PAD, DIL, DIL, PREP, NOTE)
/* The loss is linear in x, w and the bias, so a central difference is exact
 * for any step: a large one keeps the forward's float rounding (cuDNN's
 * Winograd / FFT algorithms) out of the quotient. */
#define GRAD_CONV_G_AT(PATH, G, N, C, H, W, K, R, ST, PAD, DIL, NOTE)                          \
    {                                                                                          \
        "grad_conv", run_grad_conv,                                                            \
            .conv = {N, C, H, W, K, R, R, ST, ST, PAD, PAD, DIL, DIL, 0, 0, G}, .fd_h = 0.25f, \
            .tol = TOL_FD, .all_configs = 1, .note = NOTE, .path = PATH                        \
    }
#define GRAD_CONV_G(...) GRAD_CONV_G_AT(NULL, __VA_ARGS__)
#define GRAD_CONV(N, C, H, W, K, R, ST, PAD, DIL, NOTE) \
    GRAD_CONV_G(0, N, C, H, W, K, R, ST, PAD, DIL, NOTE)
#define GRAD_CONV_AT(PATH, N, C, H, W, K, R, ST, PAD, DIL, NOTE) \
    GRAD_CONV_G_AT(PATH, 0, N, C, H, W, K, R, ST, PAD, DIL, NOTE)

/* Batch-norm shapes: n, c, h, w and the input range. The offset ones have
 * a variance small next to the mean (numerical stability). */
#define BN_A .n = 3, .c = 6, .h = 29, .w = 1, .lo = -2, .hi = 2
#define BN_B .n = 2, .c = 6, .h = 5501, .w = 1, .lo = -2, .hi = 2 /* threaded on the CPU */
#define BN_C .n = 1, .c = 5, .h = 7, .w = 9, .lo = 99, .hi = 101  /* batch 1 */
#define BN_D .n = 4, .c = 7, .h = 13, .w = 11, .lo = 99, .hi = 101
#define BN_E .n = 2, .c = 3, .h = 65, .w = 67, .lo = 99, .hi = 101 /* a large plane */
#define BN_F \
    .n = 4, .c = 2, .h = 129, .w = 131, .lo = 99, .hi = 101 /* a channel over many blocks */
/* Shapes for the channels-last kernels (rows of c channels as vector
 * lanes, tiles of 4096 floats, reductions over up to 64 pixel ranges). */
#define BN_C1 .n = 3, .c = 1, .h = 50, .w = 1, .lo = 99, .hi = 101  /* c = 1 */
#define BN_HW1 .n = 37, .c = 19, .h = 1, .w = 1, .lo = -2, .hi = 2  /* hw = 1, c odd */
#define BN_ODD .n = 2, .c = 35, .h = 37, .w = 41, .lo = -2, .hi = 2 /* threaded, c odd */
#define BN_PARTS \
    .n = 2, .c = 16, .h = 101, .w = 103, .lo = 99, .hi = 101 /* 82 tiles in 64 ranges */
#define BN_STATS_PARTS \
    .n = 2, .c = 130, .h = 91, .w = 89, .lo = 99, .hi = 101 /* 65 stats blocks, 64 ranges */
#define BN_WIDE .n = 2, .c = 4100, .h = 3, .w = 1, .lo = -2, .hi = 2 /* a row past a tile */
/* Channel counts of the NHWC reductions' vector route (8 channels a thread,
 * 32 a group, kernels/cuda/cuda_chan_reduce.cuh): three groups, the last
 * partial; one partial group; two whole groups. */
#define BN_VEC .n = 2, .c = 72, .h = 19, .w = 23, .lo = -2, .hi = 2
#define BN_VEC24 .n = 3, .c = 24, .h = 17, .w = 13, .lo = 99, .hi = 101
#define BN_VEC64 .n = 2, .c = 64, .h = 19, .w = 23, .lo = -2, .hi = 2
#define TOL_BN_FWD .tol = 1e-6, .tol_cuda = 1e-5
#define TOL_BN_BWD .tol = 1e-5

/* bf16 activation storage: one conv geometry (square kernel, groups G) with
 * x / y storage -> forward and backward-weight (accumulate 0 and 1) cases. */
#define CONV_DT_CASE_G(OP, RUN, ACC, PATH, G, N, C, H, W, K, R, ST, PAD, DIL, XDT, YDT, NOTE)    \
    {                                                                                            \
        OP, RUN, .conv = {N, C, H, W, K, R, R, ST, ST, PAD, PAD, DIL, DIL, 0, 0, G}, .acc = ACC, \
                 .prepare = 1, .x_dt = XDT, .y_dt = YDT, .tol = TOL_CONV_BF16,                   \
                 .tol_bf16 = TOL_CONV_BF16, .all_configs = 1, .note = NOTE, .path = PATH         \
    }
#define CONV_DT_G_AT(PATH, G, N, C, H, W, K, R, ST, PAD, DIL, XDT, YDT, NOTE)                      \
    CONV_DT_CASE_G("conv_fwd_dt", run_conv_fwd_dt, 0, PATH, G, N, C, H, W, K, R, ST, PAD, DIL,     \
                   XDT, YDT, NOTE),                                                                \
        CONV_DT_CASE_G("conv_bwd_weight_dt", run_conv_bwd_weight_dt, 0, PATH, G, N, C, H, W, K, R, \
                       ST, PAD, DIL, XDT, SG_ACT_F32, NOTE),                                       \
        CONV_DT_CASE_G("conv_bwd_weight_dt", run_conv_bwd_weight_dt, 1, PATH, G, N, C, H, W, K, R, \
                       ST, PAD, DIL, XDT, SG_ACT_F32, NOTE),                                       \
        CONV_DT_CASE_G("conv_bwd_dt", run_conv_bwd_dt, 0, PATH, G, N, C, H, W, K, R, ST, PAD, DIL, \
                       XDT, SG_ACT_F32, NOTE),                                                     \
        CONV_DT_CASE_G("conv_bwd_dt", run_conv_bwd_dt, 1, PATH, G, N, C, H, W, K, R, ST, PAD, DIL, \
                       XDT, SG_ACT_F32, NOTE)
#define CONV_DT_G(...) CONV_DT_G_AT(NULL, __VA_ARGS__)
#define CONV_DT(N, C, H, W, K, R, ST, PAD, DIL, XDT, YDT, NOTE) \
    CONV_DT_G(0, N, C, H, W, K, R, ST, PAD, DIL, XDT, YDT, NOTE)
#define CONV_DT_AT(PATH, N, C, H, W, K, R, ST, PAD, DIL, XDT, YDT, NOTE) \
    CONV_DT_G_AT(PATH, 0, N, C, H, W, K, R, ST, PAD, DIL, XDT, YDT, NOTE)
/* a bf16-stored BN output: rounded once (<= 2^-9 relative), plus float32 */
#define TOL_BF16_STORE 4e-3

/* bf16-stored gradients: one conv geometry with x stored as XDT and its
 * gradients dy / dx as the rows say -> backward-weight (dy bf16,
 * accumulate 0 and 1) and both-pass rows (dy bf16; dx bf16, which is
 * written once: accumulate 0; both bf16, the plan's case of a conv between
 * two batch norms). */
#define CONV_GDT_CASE(OP, RUN, ACC, PATH, G, N, C, H, W, K, R, ST, PAD, DIL, XDT, GY, GX, NOTE)  \
    {                                                                                            \
        OP, RUN, .conv = {N, C, H, W, K, R, R, ST, ST, PAD, PAD, DIL, DIL, 0, 0, G}, .acc = ACC, \
                 .prepare = 1, .x_dt = XDT, .gy_dt = GY, .gx_dt = GX, .tol = TOL_CONV_BF16,      \
                 .tol_bf16 = TOL_CONV_BF16, .all_configs = 1, .note = NOTE, .path = PATH         \
    }
#define CONV_GDT_AT(PATH, G, N, C, H, W, K, R, ST, PAD, DIL, XDT, NOTE)                           \
    CONV_GDT_CASE("conv_bwd_weight_dt", run_conv_bwd_weight_dt, 0, PATH, G, N, C, H, W, K, R, ST, \
                  PAD, DIL, XDT, SG_ACT_BF16, SG_ACT_F32, NOTE),                                  \
        CONV_GDT_CASE("conv_bwd_weight_dt", run_conv_bwd_weight_dt, 1, PATH, G, N, C, H, W, K, R, \
                      ST, PAD, DIL, XDT, SG_ACT_BF16, SG_ACT_F32, NOTE),                          \
        CONV_GDT_CASE("conv_bwd_dt", run_conv_bwd_dt, 0, PATH, G, N, C, H, W, K, R, ST, PAD, DIL, \
                      XDT, SG_ACT_BF16, SG_ACT_F32, NOTE),                                        \
        CONV_GDT_CASE("conv_bwd_dt", run_conv_bwd_dt, 1, PATH, G, N, C, H, W, K, R, ST, PAD, DIL, \
                      XDT, SG_ACT_BF16, SG_ACT_F32, NOTE),                                        \
        CONV_GDT_CASE("conv_bwd_dt", run_conv_bwd_dt, 0, PATH, G, N, C, H, W, K, R, ST, PAD, DIL, \
                      XDT, SG_ACT_F32, SG_ACT_BF16, NOTE),                                        \
        CONV_GDT_CASE("conv_bwd_dt", run_conv_bwd_dt, 0, PATH, G, N, C, H, W, K, R, ST, PAD, DIL, \
                      XDT, SG_ACT_BF16, SG_ACT_BF16, NOTE)
#define CONV_GDT(...) CONV_GDT_AT(NULL, __VA_ARGS__)

/* Resize geometries: n, c, h, w -> oh, ow */
#define RS(N, C, H, W, OH, OW) .n = N, .c = C, .h = H, .w = W, .oh = OH, .ow = OW
#define RESIZE(N, C, H, W, OH, OW, NOTE)                                                          \
    {"resize_fwd", run_resize_fwd, RS(N, C, H, W, OH, OW), .tol = 1e-5, .note = NOTE},            \
        {"resize_bwd", run_resize_bwd, RS(N, C, H, W, OH, OW), .tol = 1e-5, .note = NOTE}, {      \
        "resize_bwd", run_resize_bwd, RS(N, C, H, W, OH, OW), .acc = 1, .tol = 1e-5, .note = NOTE \
    }

#define MAXPOOL(N, C, H, W, FILL, LO, HI, NOTE)                                                 \
    {"maxpool_fwd", run_maxpool_fwd, .n = N,   .c = C,       .h = H,      .w = W,               \
     .fill = FILL,  .lo = LO,        .hi = HI, .tol = EXACT, .note = NOTE},                     \
    {                                                                                           \
        "maxpool_bwd", run_maxpool_bwd, .n = N, .c = C, .h = H, .w = W, .fill = FILL, .lo = LO, \
                                        .hi = HI, .tol = 1e-6, .note = NOTE                     \
    }

/* Gate ops: random x in [-5, 5) (both kinks of the hard ones inside), a
 * large threaded case, in place, quarters (x exactly at -3 and 3: the
 * kink conventions against the reference) and torch's values. */
#define TOL_GATE 1e-6
#define GATE_FWD(OP, RUN, TORCH, WTOL)                                                    \
    {OP, RUN, .count = 70001, .lo = -5, .hi = 5, .tol = TOL_GATE},                        \
        {OP,      RUN,          .count = 1000003, .lo = -5,                               \
         .hi = 5, .inplace = 1, .tol = TOL_GATE,  .note = "threaded, y == x"},            \
        {OP,       RUN,     .count = 4099,   .fill = TB_FILL_TIES,                        \
         .lo = -5, .hi = 5, .tol = TOL_GATE, .note = "quarters: x exactly at the kinks"}, \
    {                                                                                     \
        OP, RUN, .count = 7, .in = gate_x, .want = TORCH, .nwant = 7, .want_tol = WTOL,   \
                 .tol = TOL_GATE, .note = "torch's values at and around the kinks"        \
    }
#define GATE_BWD(OP, RUN, TORCH, WTOL)                                                       \
    {OP, RUN, .count = 70001, .lo = -5, .hi = 5, .tol = TOL_GATE},                           \
        {OP, RUN, .count = 70001, .lo = -5, .hi = 5, .acc = 1, .tol = TOL_GATE},             \
        {OP,      RUN,      .count = 1000003, .lo = -5,                                      \
         .hi = 5, .acc = 1, .tol = TOL_GATE,  .note = "threaded"},                           \
        {OP,      RUN,          .count = 70001,  .lo = -5,                                   \
         .hi = 5, .inplace = 1, .tol = TOL_GATE, .note = "dx == dy"},                        \
        {OP,                                                                                 \
         RUN,                                                                                \
         .count = 4099,                                                                      \
         .fill = TB_FILL_TIES,                                                               \
         .lo = -5,                                                                           \
         .hi = 5,                                                                            \
         .acc = 1,                                                                           \
         .tol = TOL_GATE,                                                                    \
         .note = "quarters: x exactly at the kinks"},                                        \
    {                                                                                        \
        OP, RUN, .count = 7, .in = gate_x, .in2 = gate_ones, .want = TORCH, .nwant = 7,      \
                 .want_tol = WTOL, .tol = TOL_GATE, .note = "torch's gradients at the kinks" \
    }

#define SGD(LR, MOM, DAMP, WD, NEST, FIRST, STEPS) .sgd = {LR, MOM, DAMP, WD, NEST, FIRST, STEPS}

/* ---- known values ---- */
static const float conv_hand_x[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
static const float ones9[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
static const double conv_hand_y[9] = {12, 21, 16, 27, 45, 33, 24, 39, 28};
/* depthwise, 2 channels: x = (1..9, 1..9), weights (ones, 2 * ones): each
 * channel its own kernel, so channel 1 is twice channel 0 (the weight
 * layout [k, c/g, r, s] = [2, 1, 3, 3]) */
static const float dw_hand_x[18] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 1, 2, 3, 4, 5, 6, 7, 8, 9};
static const float dw_hand_w[18] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 2};
static const double dw_hand_y[18] = {12, 21, 16, 27, 45, 33, 24, 39, 28,
                                     24, 42, 32, 54, 90, 66, 48, 78, 56};
/* gates: x at and around the kinks, dy = 1; torch 1.13's values
 * (F.hardswish / F.hardsigmoid / torch.sigmoid and their autograd) */
static const float gate_x[7] = {-4, -3, -2.5f, 0, 2.5f, 3, 4};
static const float gate_ones[7] = {1, 1, 1, 1, 1, 1, 1};
static const double hswish_torch[7] = {-0.0, -0.0, -0.2083333283662796, 0, 2.2916667461395264,
                                       3,    4};
static const double hswish_grad_torch[7] = {0,   -0.5, -0.3333333134651184, 0.5, 1.3333332538604736,
                                            1.5, 1};
static const double hsig_torch[7] = {0, 0, 0.0833333358168602, 0.5, 0.9166666865348816, 1, 1};
static const double hsig_grad_torch[7] = {
    0, 0, 0.1666666716337204, 0.1666666716337204, 0.1666666716337204, 0, 0};
static const double sig_torch[7] = {
    0.01798621006309986, 0.04742587357759476, 0.07585817575454712, 0.5,
    0.9241418242454529,  0.9525741338729858,  0.9820137619972229};
static const double sig_grad_torch[7] = {
    0.01766270585358143, 0.045176658779382706, 0.0701037123799324,  0.25,
    0.0701037123799324,  0.04517665505409241,  0.017662733793258667};
/* PyTorch 1.13: F.interpolate(arange(6).reshape(1,1,2,3), size=(3,5),
 * mode='bilinear', align_corners=False) */
static const float arange6[6] = {0, 1, 2, 3, 4, 5};
static const double resize_torch[15] = {0,   0.4, 1, 1.6, 2, 1.5, 1.9, 2.5,
                                        3.1, 3.5, 3, 3.4, 4, 4.6, 5};
/* torch.optim.SGD (torch 1.13, lr 0.1), p0 = [1, -2, 0.5], gradients of 3
 * steps; the parameters after each step, per configuration */
static const float sgd_p0[3] = {1, -2, 0.5f};
static const float sgd_g[9] = {0.5f, 0.25f, -1, 0.25f, -0.5f, 2, -0.125f, 1, 0};
static const double sgd_torch_wd[9] = {0.949000001, -2.023,      0.5995,
                                       0.877151012, -1.99167705, 0.488450497,
                                       0.824109733, -2.06149459, 0.388017505};
static const double sgd_torch_nesterov[9] = {0.903100014, -2.04369998, 0.689050019,
                                             0.812574148, -1.96344697, 0.388335794,
                                             0.776619732, -2.12432814, 0.297575325};
static const double sgd_torch_dampening[9] = {0.949999988, -2.0250001,  0.600000024,
                                              0.882499993, -2.00250006, 0.51000005,
                                              0.833000004, -2.07225013, 0.42900005};
static const double sgd_torch_plain[9] = {0.949989974, -2.02498007, 0.599995017,
                                          0.924980462, -1.97495985, 0.399989009,
                                          0.937471211, -2.0749402,  0.399985015};
/* cross-entropy: logits (0, ln 3), label 1 -> loss -log(3/4), grads (1/4, -1/4);
 * logits (1000, 0), label 1 -> loss 1000 (stable log-sum-exp) */
static const float ce_hand_l[2] = {0, 1.09861229f};
static const float ce_huge_l[2] = {1000, 0};
static const uint8_t label1[1] = {1};
/* weighted CE (issue 16): PyTorch 1.13's F.cross_entropy(l, y, weight=w,
 * ignore_index=255): reduction='sum' (in double) = the loss sum; the weight
 * sum by hand; the gradient of reduction='mean' (grad_scale 1/3.75) */
static const float cew_l[12] = {0.5f,  -1.25f, 2.0f,  0.75f, 1.5f,   0.25f,
                                -0.5f, 3.0f,   -2.0f, 1.0f,  0.125f, -0.75f};
static const uint8_t cew_lab[4] = {0, 2, 255, 1};
static const float cew_w[3] = {0.5f, 2.0f, 1.25f};
static const double cew_want[14] = {1.480078504141964,
                                    3.75,
                                    -0.09824900329113007,
                                    0.02226760983467102,
                                    0.0,
                                    0.04979367554187775,
                                    0.0953691154718399,
                                    0.09979651868343353,
                                    0.0,
                                    -0.06090415641665459,
                                    0.0028798975981771946,
                                    -0.12206411361694336,
                                    0.0,
                                    0.01111047063022852};
static const double ce_hand_want[3] = {0.287682072451781, 0.25, -0.25};
static const double ce_huge_want[1] = {1000};
/* confusion: (label, pred) pairs; 255 and 9 (>= c) are skipped */
static const uint8_t conf_lab[8] = {0, 1, 1, 2, 255, 4, 4, 9};
static const uint8_t conf_pred[8] = {0, 1, 2, 2, 3, 4, 0, 1};
static const double conf_inc[25] = {1, 0, 0, 0, 0, 0, 1, 1, 0, 0, 0, 0, 1,
                                    0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 1};
/* flip_w of arange6 as [1,1,2,3]: each row reversed */
static const double flip_hand_want[6] = {2, 1, 0, 5, 4, 3};
/* softmax_fwd, 3 pixels x 2 classes (class-major): logits (0, ln 3) ->
 * (1/4, 3/4); (1000, 0) -> (1, 0) without overflow; (-7, -7) -> halves */
static const float softmax_hand[6] = {0.0f, 1000.0f, -7.0f, 1.0986122886681098f, 0.0f, -7.0f};
static const double softmax_hand_want[6] = {0.25, 1, 0.5, 0.75, 0, 0.5};
/* argmax of 3 pixels x 5 classes (class-major): all equal -> 0; classes 3
 * and 4 tie -> 3; a unique maximum at 4 -> 4 */
static const float argmax_hand[15] = {0.5f, 0.1f, 0,    0.5f, 0.2f, 0.1f, 0.5f, 0.3f,
                                      0.2f, 0.5f, 0.9f, 0.3f, 0.5f, 0.9f, 0.4f};
static const double argmax_hand_want[3] = {0, 3, 4};
static const float sumsq_hand[3] = {1, -2, 3};
static const double sumsq_hand_want[1] = {14};
/* bn_finalize part counts */
static const int64_t parts_37_0_120[3] = {37, 0, 120};
static const int64_t parts_1[1] = {1};
static const int64_t images_2_0_3[3] = {2, 0, 3};
static const int64_t images_1_1_1[3] = {1, 1, 1};
static const int64_t images_1_0[2] = {1, 0};

const tb_case tb_cases[] = {
    /* ---------------- memory and streams ---------------- */
    {"memory", run_memory, .count = 4000},
    {"memory", run_memory, .count = 3000007, .note = "odd size"},
    {"upload_async", run_upload_async_order, .count = (size_t)64 << 20,
     .note = "256 MiB: the compute ops outlast the copy's start"},
    {"bind_thread", run_bind_thread, .count = 10007, .note = "ops from a second thread"},
    /* graphs (SG_CAP_GRAPHS): recorded ops replayed bit for bit, the step
     * key read at each launch; without the capability: none reported */
    {"graph_begin", run_graph, .count = 100003, .p = 0.3f, .tol = EXACT,
     .note = "scale, axpy, dropout recorded, launched 3 times"},
    /* mem_written, and the weight copies of bf16 convolutions: every path
     * that changes weights is seen by the next conv (all configurations) */
    {"mem_written", run_weights_written, .conv = {2, 16, 9, 9, 32, 3, 3, 1, 1, 1, 1, 1, 1, 0, 0},
     .prepare = 1, .tol = TOL_CONV, .tol_cuda = TOL_CONV_CUDA, .tol_bf16 = TOL_CONV_BF16,
     .tol_tf32 = TOL_CONV_TF32, .all_configs = 1,
     .note = "3x3 (blocked layouts): weights changed by every op and mem_written",
     .path = "onednn-wino wino-own onednn-cl onednn-blocked"},
    {"mem_written", run_weights_written, .conv = {2, 32, 8, 8, 16, 1, 1, 2, 2, 0, 0, 1, 1, 0, 0},
     .tol = TOL_CONV, .tol_cuda = TOL_CONV_CUDA, .tol_bf16 = TOL_CONV_BF16,
     .tol_tf32 = TOL_CONV_TF32, .all_configs = 1, .note = "1x1 stride 2 (plain layouts)"},
    {"mem_written", run_weights_written, .conv = {1, 8, 5, 5, 8, 3, 3, 1, 1, 6, 6, 6, 6, 0, 0},
     .tol = TOL_CONV, .tol_cuda = TOL_CONV_CUDA, .tol_bf16 = TOL_CONV_BF16,
     .tol_tf32 = TOL_CONV_TF32, .all_configs = 1,
     .note = "dilation 6 on 5x5: dead taps trimmed (the copy holds the live ones)"},
    {"mem_written", run_weights_written,
     .conv = {2, 16, 9, 9, 16, 3, 3, 1, 1, 1, 1, 1, 1, 0, 0, 16}, .prepare = 1, .tol = TOL_CONV,
     .tol_cuda = TOL_CONV_CUDA, .tol_bf16 = TOL_CONV_BF16, .tol_tf32 = TOL_CONV_TF32,
     .all_configs = 1, .note = "depthwise 3x3: the grouped weights' copies"},

    /* ---------------- convolution ---------------- */
    CONV_SQ(1, 3, 7, 9, 5, 3, 1, 1, 1, 0, "odd sizes"),
    CONV_SQ(3, 4, 9, 8, 6, 3, 2, 1, 1, 1, "stride 2, batch 3"),
    CONV_SQ(2, 5, 11, 10, 4, 1, 2, 0, 1, 0, "1x1 stride 2 (downsample)"),
    CONV_SQ(1, 3, 13, 12, 4, 3, 1, 2, 2, 1, "dilation 2"),
    CONV_SQ(1, 2, 30, 27, 3, 3, 1, 12, 12, 0, "dilation 12 (ASPP)"),
    CONV_SQ(1, 2, 40, 38, 2, 3, 1, 36, 36, 1, "dilation 36: taps mostly in the padding"),
    CONV_SQ(2, 3, 20, 17, 4, 3, 1, 24, 24, 0, "dilation > size: outer taps dead (CPU trims)"),
    CONV_SQ(1, 3, 30, 10, 5, 3, 1, 12, 12, 1, "dead taps along the width only"),
    CONV_SQ(2, 16, 8, 8, 16, 3, 1, 36, 36, 0, "trimmed, blocked layout (ASPP at OS 8)"),
    CONV_SQ_AT(TAPS, 2, 64, 13, 11, 24, 3, 1, 6, 6, 1, "sparse: per-tap GEMMs on the CPU"),
    CONV_SQ_AT(TAPS, 1, 80, 9, 9, 16, 3, 1, 7, 7, 0, "sparse, square"),
    CONV_SQ_AT(TAPS, 2, 64, 7, 12, 16, 3, 1, 5, 5, 1, "sparse, h != w: partial rows and columns"),
    CONV_SQ_AT("bd:onednn-plain", 2, 3, 15, 15, 8, 7, 2, 3, 1, 0, "the stem: 7x7 stride 2"),
    CONV_SQ(2, 32, 9, 7, 16, 3, 1, 2, 2, 1, "wide enough for the blocked layout"),
    CONV_SQ(1, 32, 8, 8, 48, 1, 1, 0, 1, 0, "1x1 blocked"),
    CONV_SQ(3, 16, 10, 11, 32, 3, 2, 1, 1, 1, "3x3 stride 2 blocked, odd"),
    CONV_SQ(1, 3, 17, 13, 5, 3, 1, 1, 1, 1, "odd sizes"),
    CONV_SQ(4, 6, 15, 11, 4, 3, 2, 1, 1, 1, "batch 4, stride 2"),
    CONV_SQ(1, 4, 9, 9, 7, 1, 2, 0, 1, 1, "1x1 stride 2"),
    CONV_SQ(1, 32, 12, 10, 17, 1, 2, 0, 1, 0, "1x1 stride 2, k = 17: bf16 backward-data (NHWC)"),
    CONV_SQ_AT("bd:onednn-plain", 4, 3, 33, 31, 8, 7, 2, 3, 1, 1, "the stem, batch 4"),
    CONV_SQ(2, 5, 13, 14, 3, 3, 1, 2, 2, 1, "dilation 2"),
    CONV_SQ(1, 3, 29, 27, 4, 3, 1, 12, 12, 1, "dilation 12"),
    CONV_SQ(1, 2, 75, 73, 3, 3, 1, 36, 36, 1, "dilation 36 (ASPP)"),
    CONV_SQ(4, 2, 7, 9, 3, 3, 1, 36, 36, 1, "dilation 36 on a map smaller than it"),
    CONV_SQ(1, 16, 5, 5, 16, 1, 1, 0, 1, 1, "1x1"),
    /* shapes that matter for channels-last (NHWC) storage: the channel runs
     * oneDNN's and the per-tap path's kernels vectorise over, and maps of
     * one pixel (where the two layouts hold the same bytes) */
    CONV_SQ(3, 20, 1, 1, 24, 1, 1, 0, 1, 0, "hw = 1: 1x1 conv on a 1x1 map (ASPP image pooling)"),
    CONV_SQ(2, 20, 1, 1, 12, 3, 1, 1, 1, 1, "hw = 1, 3x3 pad 1: only the centre tap is live"),
    CONV_SQ(2, 1, 9, 7, 17, 3, 1, 1, 1, 0, "c = 1: one input value a pixel"),
    CONV_SQ(2, 17, 8, 9, 1, 3, 1, 1, 1, 1, "k = 1: one output value a pixel"),
    CONV_SQ(2, 17, 11, 9, 33, 1, 1, 0, 1, 0, "1x1, c and k not multiples of 8 or 16"),
    CONV_SQ(3, 24, 13, 11, 40, 3, 2, 1, 1, 1, "3x3 stride 2, c = 24, k = 40: vector tails"),
    CONV_SQ_AT(TAPS, 2, 65, 9, 13, 17, 3, 1, 5, 5, 0,
               "per-tap GEMMs, c = 65, k = 17: odd channel runs"),
    CONV_AT("taps-bwd", 2, 64, 5, 20, 24, 3, 3, 1, 1, 2, 2, 4, 4, 1,
            "per tap, padding 2 at rate 4: input rows no tap reads (a zero gradient)"),
    /* the matmul paths of the CPU (cpu_conv.c use_mm_1x1, cpu_conv_matmul.c):
     * 1x1 stride-1 backward passes on NHWC activations as one GEMM (k >= 128
     * backward-data; k >= 512 or k*c >= 1024*256 backward-weights), convs
     * with only the centre tap live as those 1x1 convs in native bf16, and
     * the per-tap GEMMs in native bf16 (bf16 matmuls) */
    CONV_SQ_AT("mm1x1", 2, 24, 5, 7, 512, 1, 1, 0, 1, 1,
               "1x1 k = 512: backward passes as matmuls (NHWC)"),
    CONV_SQ_AT("mm1x1", 1, 1283, 3, 2, 256, 1, 1, 0, 1, 0, "1x1 1283->256: backward-weight by k*c"),
    CONV_SQ_AT("bd:mm1x1 bw:onednn-cl", 2, 33, 6, 5, 129, 1, 1, 0, 1, 0,
               "1x1 k = 129: backward-data as matmul only"),
    CONV_SQ_AT(TAPS, 2, 96, 10, 14, 40, 3, 1, 7, 7, 1,
               "sparse, bf16 taps: partial rows, full rows"),
    CONV_AT(TAPS, 2, 64, 7, 20, 24, 3, 3, 1, 1, 8, 8, 8, 8, 0, "per tap with 6 dead taps (rows)"),
    CONV_SQ_AT("bw:center", 2, 24, 5, 6, 512, 3, 1, 8, 8, 0,
               "only the centre tap live, k = 512: bf16 1x1 matmuls"),
    CONV(2, 40, 7, 4, 160, 1, 3, 1, 1, 0, 4, 1, 4, 1, "1x3, only the centre tap live, k = 160"),
    /* float32 NHWC backward passes as per-tap GEMMs (sg_conv_taps_bwd_f32_applicable):
     * a dense 3x3 (rate 1) and a rate-2 one where every tap reads most of the map */
    CONV_SQ_AT("taps-bwd", 2, 64, 9, 11, 24, 3, 1, 1, 1, 1,
               "dense 3x3: float32 NHWC backward per tap"),
    CONV_SQ_AT("taps-bwd", 2, 72, 12, 10, 24, 3, 1, 2, 2, 1,
               "rate 2: float32 NHWC backward per tap"),
    /* float32 Winograd F(4x4, 3x3) on the CPU (cpu_conv.c use_wino: 3x3 pad 1,
     * channels multiples of 16), and dilated 3x3 convs as Winograd on their
     * phase sub-images (use_phases, NHWC: D divides h and w) */
    CONV_SQ_AT("onednn-wino wino-own", 2, 32, 8, 12, 48, 3, 1, 1, 1, 1,
               "3x3, c and k multiples of 16: Winograd"),
    CONV_SQ_AT("onednn-wino", 2, 16, 5, 7, 16, 3, 1, 1, 1, 0,
               "3x3 Winograd on a map smaller than its 6x6 tile"),
    CONV_SQ_AT("phases", 2, 32, 12, 8, 16, 3, 1, 2, 2, 1,
               "rate 2, h and w even: Winograd on 4 phases"),
    CONV_SQ_AT("phases", 1, 16, 16, 12, 32, 3, 1, 4, 4, 1, "rate 4: Winograd on 16 phases of 4x3"),
    CONV(2, 16, 8, 6, 16, 3, 3, 1, 1, 2, 3, 2, 3, 1, "rate 2 x 3: not phase-split"),
    CONV_SQ(2, 32, 13, 8, 16, 3, 1, 2, 2, 0, "rate 2, odd h: not phase-split"),
    /* the CPU's own float32 Winograd (cpu_conv_wino.c: 3x3 stride 1, pad =
     * rate, phase sub-images of 8+ pixels a side; AVX2's default, the
     * cpu/wino-own configs elsewhere): phases of unequal size with part
     * tiles, unequal rates, weight counts not a multiple of 8, and more
     * tiles than one chunk (256) */
    CONV_AT("wino-own", 2, 32, 17, 19, 16, 3, 3, 1, 1, 2, 2, 2, 2, 1,
            "own Winograd: rate 2, odd sizes"),
    CONV_AT("wino-own", 2, 16, 16, 25, 24, 3, 3, 1, 1, 2, 3, 2, 3, 0, "own Winograd: rates 2 x 3"),
    CONV_AT("wino-own", 1, 20, 26, 25, 17, 3, 3, 1, 1, 3, 3, 3, 3, 1,
            "own Winograd: rate 3, 340 kernels"),
    CONV_AT("wino-own", 2, 16, 64, 70, 16, 3, 3, 1, 1, 1, 1, 1, 1, 0,
            "own Winograd: 576 tiles, 3 chunks"),
    CONV_AT("wino-own", 2, 24, 35, 58, 40, 3, 3, 1, 1, 2, 3, 2, 3, 0,
            "own Winograd: a chunk ends inside a phase"),
    /* native bf16 on NHWC activations from 128 channels on each side: the
     * Winograd with float32 GEMMs (cpu_conv_wino_cl.c; the rows above run
     * it in cpu/nhwc-bf16-wino-own): a channel tail (136 = 8 * 17), and
     * rate-2 phases with k = 144 */
    CONV_SQ_AT("wino-cl", 1, 136, 9, 10, 128, 3, 1, 1, 1, 1,
               "bf16 Winograd, c = 136: a channel tail"),
    CONV_AT("wino-cl", 1, 128, 12, 16, 144, 3, 3, 1, 1, 2, 2, 2, 2, 0,
            "bf16 Winograd: rate 2, k = 144"),
    /* drawn once with a seeded generator: non-square kernels, per-axis
     * stride, padding and dilation, channels around the blocked threshold */
    CONV(2, 24, 17, 3, 21, 1, 1, 1, 1, 1, 3, 3, 3, 0, "random"),
    CONV(2, 29, 18, 6, 37, 3, 5, 1, 2, 3, 2, 1, 2, 0, "random"),
    CONV(2, 14, 9, 15, 18, 5, 1, 2, 1, 3, 2, 1, 3, 0, "random"),
    CONV(3, 29, 8, 15, 4, 1, 5, 2, 1, 2, 0, 1, 2, 0, "random"),
    CONV(1, 5, 10, 17, 20, 3, 5, 1, 1, 0, 2, 1, 1, 0, "random"),
    CONV(3, 3, 8, 19, 13, 1, 5, 1, 2, 0, 1, 2, 3, 0, "random"),
    CONV(3, 34, 13, 16, 33, 3, 5, 2, 1, 0, 0, 1, 2, 0, "random"),
    CONV(2, 17, 17, 17, 35, 5, 5, 1, 2, 3, 2, 2, 3, 0, "random"),
    CONV(3, 40, 7, 3, 22, 5, 1, 1, 2, 3, 1, 2, 1, 0, "random"),
    CONV(1, 28, 1, 17, 28, 5, 5, 1, 2, 3, 2, 1, 2, 0, "random"),
    CONV(3, 21, 18, 9, 21, 5, 5, 1, 2, 3, 2, 1, 1, 0, "random"),
    CONV(1, 23, 14, 8, 37, 5, 5, 1, 2, 1, 2, 3, 2, 0, "random"),
    CONV(2, 8, 12, 9, 28, 3, 3, 2, 1, 2, 2, 2, 1, 0, "random"),
    CONV(2, 9, 14, 17, 35, 3, 5, 2, 2, 0, 1, 2, 1, 0, "random"),
    CONV(3, 40, 17, 1, 12, 3, 1, 2, 1, 2, 2, 3, 3, 0, "random"),
    CONV(1, 26, 16, 8, 6, 1, 5, 2, 1, 3, 3, 3, 2, 0, "random"),
    CONV(1, 1, 17, 20, 2, 1, 1, 1, 1, 0, 0, 1, 1, 1, "random"),
    CONV(4, 4, 13, 11, 1, 3, 3, 2, 2, 2, 2, 2, 2, 1, "random"),
    CONV(1, 3, 16, 14, 4, 1, 1, 2, 2, 0, 0, 1, 1, 1, "random"),
    CONV(4, 1, 9, 17, 2, 1, 1, 2, 2, 0, 0, 1, 1, 1, "random"),
    CONV(1, 7, 8, 5, 1, 3, 3, 1, 1, 3, 3, 3, 3, 1, "random"),
    CONV(4, 8, 10, 11, 3, 1, 1, 2, 2, 0, 0, 1, 1, 1, "random"),
    CONV(1, 7, 23, 6, 4, 1, 1, 2, 2, 0, 0, 1, 1, 1, "random"),
    CONV(4, 4, 24, 14, 2, 1, 1, 2, 2, 0, 0, 1, 1, 1, "random"),
    {"conv_fwd", run_conv_fwd, .conv = {1, 1, 3, 3, 1, 3, 3, 1, 1, 1, 1, 1, 1, 0, 0},
     .in = conv_hand_x, .in2 = ones9, .want = conv_hand_y, .nwant = 9, .want_tol = 1e-5,
     .tol = TOL_CONV, .tol_cuda = TOL_CONV_CUDA, .tol_bf16 = TOL_CONV_BF16,
     .tol_tf32 = TOL_CONV_TF32, .all_configs = 1,
     .note = "hand: kernel of ones sums the in-image 3x3 neighbourhood (exact in bf16 too)"},
    /* grouped and depthwise (MobileNetV3, DeepLabV3+'s separable convs):
     * CONV_G(groups, n, c, h, w, k, r, s, stride, pad, dil per axis, prep) */
    CONV_G(1, 1, 3, 7, 9, 5, 3, 3, 1, 1, 1, 1, 1, 1, 0, "groups 1: the ungrouped conv"),
    CONV_G(8, 2, 8, 10, 9, 8, 3, 3, 1, 1, 1, 1, 1, 1, 1, "depthwise 3x3 (plain layout)"),
    CONV_G(16, 2, 16, 11, 12, 16, 3, 3, 2, 2, 1, 1, 1, 1, 0, "depthwise 3x3 stride 2"),
    CONV_G(32, 2, 32, 8, 8, 32, 3, 3, 1, 1, 1, 1, 1, 1, 1, "depthwise, 32 channels (blocked)"),
    CONV_G_AT("dw", 16, 1, 16, 13, 11, 16, 5, 5, 1, 1, 4, 4, 2, 2, 0, "depthwise 5x5 dilation 2"),
    CONV_G_AT("dw", 16, 1, 16, 9, 9, 16, 3, 3, 1, 1, 12, 12, 12, 12, 1,
              "depthwise ASPP rate 12 on 9x9: dead taps trimmed"),
    CONV_G_AT("dw", 16, 2, 16, 13, 11, 16, 3, 3, 1, 1, 6, 6, 6, 6, 0,
              "depthwise rate 6: sparse, yet not the per-tap path"),
    CONV_G(4, 2, 4, 7, 8, 8, 3, 3, 1, 1, 1, 1, 1, 1, 0, "depthwise, channel multiplier 2"),
    CONV_G_AT("dw", 4, 2, 4, 9, 10, 8, 3, 3, 2, 1, 2, 2, 2, 3, 1,
              "depthwise x2, dilated, per-axis stride (the CPU's direct backward)"),
    CONV_G_AT("dw", 24, 3, 24, 11, 9, 24, 5, 5, 1, 1, 4, 4, 2, 2, 0,
              "depthwise 5x5 dilation 2, 24 channels (MobileNetV3's dilated stage)"),
    CONV_G(2, 3, 6, 9, 7, 4, 3, 3, 2, 2, 1, 1, 1, 1, 1, "2 groups, stride 2"),
    CONV_G(4, 2, 32, 6, 6, 32, 1, 1, 1, 1, 0, 0, 1, 1, 0, "4 groups, 1x1"),
    CONV_G(3, 2, 9, 8, 13, 6, 3, 5, 1, 2, 1, 2, 2, 1, 1,
           "3 groups, non-square kernel, per-axis stride / pad / dilation"),
    CONV_G_AT("dw", 20, 2, 20, 9, 11, 20, 3, 3, 1, 1, 2, 2, 2, 2, 0,
              "depthwise dilated, c = 20: the direct NHWC backward's vector tail"),
    CONV_G_AT("dw", 70, 1, 70, 8, 7, 70, 3, 3, 1, 1, 3, 3, 3, 3, 1,
              "depthwise dilated, c = 70: 16-channel chunks and a tail (NHWC backward-weight)"),
    CONV_G_AT("dw", 5, 2, 5, 9, 8, 15, 3, 3, 2, 1, 2, 2, 2, 1, 0,
              "depthwise x3 dilated, c = 5, per-axis stride (NHWC: strided channel reads)"),
    {"conv_fwd", run_conv_fwd, .conv = {1, 2, 3, 3, 2, 3, 3, 1, 1, 1, 1, 1, 1, 0, 0, 2},
     .in = dw_hand_x, .in2 = dw_hand_w, .want = dw_hand_y, .nwant = 18, .want_tol = 1e-5,
     .tol = TOL_CONV, .tol_cuda = TOL_CONV_CUDA, .tol_bf16 = TOL_CONV_BF16,
     .tol_tf32 = TOL_CONV_TF32, .all_configs = 1,
     .note = "hand: depthwise, channel 1's kernel is twice channel 0's"},
    {"bias_fwd", run_bias_fwd, .n = 3, .c = 5, .h = 7, .w = 1, .tol = EXACT},
    {"bias_fwd", run_bias_fwd, .n = 5, .c = 3, .h = 3001, .w = 1, .tol = EXACT,
     .note = "a channel split over several blocks"},
    {"bias_bwd", run_bias_bwd, .n = 3, .c = 5, .h = 7, .w = 1, .tol = 1e-5},
    {"bias_bwd", run_bias_bwd, .n = 3, .c = 5, .h = 7, .w = 1, .acc = 1, .tol = 1e-5},
    {"bias_bwd", run_bias_bwd, .n = 5, .c = 3, .h = 3001, .w = 1, .tol = 1e-5},
    {"bias_bwd", run_bias_bwd, .n = 5, .c = 3, .h = 3001, .w = 1, .acc = 1, .tol = 1e-5},
    {"bias_fwd", run_bias_fwd, .n = 3, .c = 1, .h = 50, .w = 1, .tol = EXACT, .note = "c = 1"},
    {"bias_fwd", run_bias_fwd, .n = 2, .c = 35, .h = 37, .w = 41, .tol = EXACT,
     .note = "c odd, threaded"},
    {"bias_fwd", run_bias_fwd, .n = 2, .c = 4100, .h = 3, .w = 1, .tol = EXACT,
     .note = "NHWC: a row longer than a tile"},
    {"bias_bwd", run_bias_bwd, .n = 37, .c = 19, .h = 1, .w = 1, .acc = 1, .tol = 1e-5,
     .note = "hw = 1, c odd"},
    {"bias_bwd", run_bias_bwd, .n = 2, .c = 35, .h = 37, .w = 41, .tol = 1e-5,
     .note = "c odd, threaded"},
    {"bias_bwd", run_bias_bwd, .n = 2, .c = 16, .h = 101, .w = 103, .acc = 1, .tol = 1e-5,
     .note = "NHWC: 82 tiles summed in 64 pixel ranges"},
    {"bias_bwd", run_bias_bwd, .n = 2, .c = 4100, .h = 3, .w = 1, .tol = 1e-5,
     .note = "NHWC: a row longer than a tile"},
    {"bias_bwd", run_bias_bwd, BN_VEC, .acc = 1, .tol = 1e-5, .note = "NHWC: the vector route"},
    {"bias_bwd", run_chan_routes, BN_VEC64, .acc = 1, .tol = EXACT,
     .note = "NHWC: vector route = scalar route, bit for bit"},
    {"bias_bwd", run_chan_routes, BN_VEC, .tol = EXACT,
     .note = "NHWC: vector route = scalar route, bit for bit"},
    {"bias_bwd", run_chan_routes, BN_VEC24, .tol = EXACT,
     .note = "NHWC: vector route = scalar route, bit for bit"},

    /* ---------------- batch norm ---------------- */
    /* float outputs of double sums: within an ulp or so (CUDA merges its
     * blocks in another order: two ulps) */
    {"bn_stats", run_bn_stats, .n = 3, .c = 5, .h = 37, .w = 1, .lo = 999.5f, .hi = 1000.5f,
     .tol = 1e-7, .tol_cuda = 2e-7, .note = "mean 1000, std 0.3: a one-pass float sum fails"},
    {"bn_stats", run_bn_stats, BN_A, .tol = 1e-7, .tol_cuda = 2e-7},
    {"bn_stats", run_bn_stats, BN_B, .tol = 1e-7, .tol_cuda = 2e-7},
    {"bn_stats", run_bn_stats, BN_C, .tol = 1e-7, .tol_cuda = 2e-7},
    {"bn_stats", run_bn_stats, BN_D, .tol = 1e-7, .tol_cuda = 2e-7},
    {"bn_stats", run_bn_stats, BN_E, .tol = 1e-7, .tol_cuda = 2e-7},
    {"bn_stats", run_bn_stats, BN_F, .tol = 1e-7, .tol_cuda = 2e-7},
    {"bn_stats", run_bn_stats, BN_C1, .tol = 1e-7, .tol_cuda = 2e-7, .note = "c = 1"},
    {"bn_stats", run_bn_stats, BN_HW1, .tol = 1e-7, .tol_cuda = 2e-7, .note = "hw = 1, c odd"},
    {"bn_stats", run_bn_stats, BN_ODD, .tol = 1e-7, .tol_cuda = 2e-7, .note = "c odd, threaded"},
    {"bn_stats", run_bn_stats, BN_STATS_PARTS, .tol = 1e-7, .tol_cuda = 2e-7,
     .note = "NHWC: 65 blocks of 252 pixels merged in 64 pixel ranges"},
    {"bn_stats", run_bn_stats, BN_WIDE, .tol = 1e-7, .tol_cuda = 2e-7,
     .note = "NHWC: a row longer than a tile"},
    {"bn_stats", run_bn_stats, BN_VEC, .tol = 1e-7, .tol_cuda = 2e-7,
     .note = "NHWC: the vector route"},
    {"bn_stats", run_bn_stats, BN_VEC24, .tol = 1e-7, .tol_cuda = 2e-7,
     .note = "NHWC: the vector route, one partial group"},
    {"bn_finalize", run_bn_chan_merge, .c = 4, .h = 13, .w = 1, .lo = -2, .hi = 3, .parts = 3,
     .counts = images_2_0_3, .eps = 1e-5f, .momentum = 0.1f, .tol = 1e-6,
     .note = "SyncBN: parts of 2, 0 and 3 images merged = the whole batch"},
    {"bn_finalize", run_bn_chan_merge, .c = 5, .h = 7, .w = 9, .lo = -2, .hi = 3, .parts = 3,
     .counts = images_1_1_1, .eps = 1e-5f, .momentum = 0.1f, .tol = 1e-6,
     .note = "three ranks of batch 1"},
    {"bn_finalize", run_bn_chan_merge, .c = 3, .h = 5, .w = 4, .lo = -2, .hi = 3, .parts = 2,
     .counts = images_1_0, .eps = 1e-5f, .momentum = 0.1f, .tol = 1e-6,
     .note = "batch 1 and an empty rank"},
    {"bn_finalize", run_bn_finalize, .c = 4, .parts = 3, .counts = parts_37_0_120, .eps = 1e-3f,
     .momentum = 0.3f, .running = 1, .tol = 1e-6},
    {"bn_finalize", run_bn_finalize, .c = 4, .parts = 1, .counts = parts_1, .eps = 1e-5f,
     .momentum = 0.1f, .running = 1, .tol = 1e-6,
     .note = "N = 1: running_var gets M2/N, no division by zero"},
    {"bn_finalize", run_bn_finalize, .c = 4, .parts = 1, .counts = parts_1, .eps = 1e-5f,
     .momentum = 0.1f, .tol = 1e-6, .note = "N = 1, no running stats"},
    {"bn_finalize", run_bn_finalize, .c = 4, .parts = 100, .eps = 1e-5f, .momentum = 0.1f,
     .tol = 1e-6, .note = "many parts (past a kernel-argument limit), some empty"},
    {"bn_finalize", run_bn_finalize, .c = 33, .parts = 100, .eps = 1e-5f, .momentum = 0.1f,
     .running = 1, .tol = 1e-6, .note = "many parts, some empty"},
    {"bn_eval_params", run_bn_eval_params, .c = 4, .eps = 1e-5f, .tol = 1e-6},
    {"bn_eval_params", run_bn_eval_params, .c = 33, .eps = 1e-3f, .tol = 1e-6},
    {"bn_fwd", run_bn_fwd, BN_A, TOL_BN_FWD},
    {"bn_fwd", run_bn_fwd, BN_A, .relu = 1, TOL_BN_FWD},
    {"bn_fwd", run_bn_fwd, BN_A, .inplace = 1, TOL_BN_FWD},
    {"bn_fwd", run_bn_fwd, BN_A, .relu = 1, .inplace = 1, TOL_BN_FWD},
    {"bn_fwd", run_bn_fwd, BN_B, TOL_BN_FWD},
    {"bn_fwd", run_bn_fwd, BN_B, .relu = 1, .inplace = 1, TOL_BN_FWD},
    {"bn_fwd", run_bn_fwd, BN_C, TOL_BN_FWD},
    {"bn_fwd", run_bn_fwd, BN_C, .relu = 1, .inplace = 1, TOL_BN_FWD},
    {"bn_fwd", run_bn_fwd, BN_D, .relu = 1, TOL_BN_FWD},
    {"bn_fwd", run_bn_fwd, BN_D, .inplace = 1, TOL_BN_FWD},
    {"bn_fwd", run_bn_fwd, BN_E, .relu = 1, TOL_BN_FWD},
    {"bn_fwd", run_bn_fwd, BN_F, TOL_BN_FWD},
    {"bn_fwd", run_bn_fwd, BN_F, .relu = 1, .inplace = 1, TOL_BN_FWD},
    {"bn_fwd", run_bn_fwd, BN_C1, .relu = 1, TOL_BN_FWD, .note = "c = 1"},
    {"bn_fwd", run_bn_fwd, BN_HW1, .relu = 1, .inplace = 1, TOL_BN_FWD, .note = "hw = 1, c odd"},
    {"bn_fwd", run_bn_fwd, BN_ODD, .relu = 1, TOL_BN_FWD, .note = "c odd, threaded"},
    {"bn_fwd", run_bn_fwd, BN_WIDE, .inplace = 1, TOL_BN_FWD,
     .note = "NHWC: a row longer than a tile"},
    {"bn_bwd_reduce", run_bn_bwd_reduce, BN_A, TOL_BN_BWD},
    {"bn_bwd_reduce", run_bn_bwd_reduce, BN_A, .relu = 1, TOL_BN_BWD},
    {"bn_bwd_reduce", run_bn_bwd_reduce, BN_B, TOL_BN_BWD},
    {"bn_bwd_reduce", run_bn_bwd_reduce, BN_B, .relu = 1, TOL_BN_BWD},
    {"bn_bwd_reduce", run_bn_bwd_reduce, BN_C, TOL_BN_BWD},
    {"bn_bwd_reduce", run_bn_bwd_reduce, BN_D, .relu = 1, TOL_BN_BWD},
    {"bn_bwd_reduce", run_bn_bwd_reduce, BN_E, .relu = 1, TOL_BN_BWD},
    {"bn_bwd_reduce", run_bn_bwd_reduce, BN_F, TOL_BN_BWD},
    {"bn_bwd_reduce", run_bn_bwd_reduce, BN_C1, .relu = 1, TOL_BN_BWD, .note = "c = 1"},
    {"bn_bwd_reduce", run_bn_bwd_reduce, BN_HW1, .relu = 1, TOL_BN_BWD, .note = "hw = 1, c odd"},
    {"bn_bwd_reduce", run_bn_bwd_reduce, BN_ODD, .relu = 1, TOL_BN_BWD, .note = "c odd, threaded"},
    {"bn_bwd_reduce", run_bn_bwd_reduce, BN_PARTS, TOL_BN_BWD,
     .note = "NHWC: 82 tiles summed in 64 pixel ranges"},
    {"bn_bwd_reduce", run_bn_bwd_reduce, BN_WIDE, .relu = 1, TOL_BN_BWD,
     .note = "NHWC: a row longer than a tile"},
    {"bn_bwd_reduce", run_bn_bwd_reduce, BN_VEC, .relu = 1, TOL_BN_BWD,
     .note = "NHWC: the vector route"},
    {"bn_bwd_reduce", run_bn_bwd_reduce, BN_VEC24, TOL_BN_BWD,
     .note = "NHWC: the vector route, one partial group"},
    {"bn_bwd_elem", run_bn_bwd_elem, BN_A, TOL_BN_BWD},
    {"bn_bwd_elem", run_bn_bwd_elem, BN_A, .acc = 1, TOL_BN_BWD},
    {"bn_bwd_elem", run_bn_bwd_elem, BN_A, .relu = 1, TOL_BN_BWD},
    {"bn_bwd_elem", run_bn_bwd_elem, BN_A, .relu = 1, .acc = 1, TOL_BN_BWD},
    {"bn_bwd_elem", run_bn_bwd_elem, BN_B, .relu = 1, TOL_BN_BWD},
    {"bn_bwd_elem", run_bn_bwd_elem, BN_B, .acc = 1, TOL_BN_BWD},
    {"bn_bwd_elem", run_bn_bwd_elem, BN_C, .acc = 1, TOL_BN_BWD},
    {"bn_bwd_elem", run_bn_bwd_elem, BN_D, .relu = 1, .acc = 1, TOL_BN_BWD},
    {"bn_bwd_elem", run_bn_bwd_elem, BN_E, .relu = 1, TOL_BN_BWD},
    {"bn_bwd_elem", run_bn_bwd_elem, BN_F, TOL_BN_BWD},
    {"bn_bwd_elem", run_bn_bwd_elem, BN_C1, .relu = 1, TOL_BN_BWD, .note = "c = 1"},
    {"bn_bwd_elem", run_bn_bwd_elem, BN_HW1, .relu = 1, .acc = 1, TOL_BN_BWD,
     .note = "hw = 1, c odd"},
    {"bn_bwd_elem", run_bn_bwd_elem, BN_ODD, .acc = 1, TOL_BN_BWD, .note = "c odd, threaded"},
    {"bn_bwd_elem", run_bn_bwd_elem, BN_WIDE, .relu = 1, TOL_BN_BWD,
     .note = "NHWC: a row longer than a tile"},
    /* fused with the residual join: the unfused chain's bits (fwd), its
     * sums regrouped (red) */
    {"bn_add_relu_fwd", run_bn_add_relu_fwd, BN_A, TOL_BN_FWD},
    {"bn_add_relu_fwd", run_bn_add_relu_fwd, BN_A, .inplace = 1, TOL_BN_FWD},
    {"bn_add_relu_fwd", run_bn_add_relu_fwd, BN_B, .inplace = 1, TOL_BN_FWD},
    {"bn_add_relu_fwd", run_bn_add_relu_fwd, BN_C, TOL_BN_FWD},
    {"bn_add_relu_fwd", run_bn_add_relu_fwd, BN_E, .x_dt = SG_ACT_BF16, TOL_BN_FWD},
    {"bn_add_relu_fwd", run_bn_add_relu_fwd, BN_F, .x_dt = SG_ACT_BF16, .inplace = 1, TOL_BN_FWD},
    {"bn_add_relu_fwd", run_bn_add_relu_fwd, BN_HW1, .x_dt = SG_ACT_BF16, TOL_BN_FWD,
     .note = "hw = 1, c odd"},
    {"bn_add_relu_fwd", run_bn_add_relu_fwd, BN_ODD, .inplace = 1, TOL_BN_FWD,
     .note = "c odd, threaded"},
    {"bn_add_relu_fwd", run_bn_add_relu_fwd, BN_WIDE, .x_dt = SG_ACT_BF16, TOL_BN_FWD,
     .note = "NHWC: a row longer than a tile"},
    /* the residual stream in bf16 (a bf16 identity, y rounded to bf16) */
    {"bn_add_relu_fwd", run_bn_add_relu_fwd, BN_A, .r_dt = SG_ACT_BF16, .y_dt = SG_ACT_BF16,
     .inplace = 1, TOL_BN_FWD, .note = "identity and output in bf16"},
    {"bn_add_relu_fwd", run_bn_add_relu_fwd, BN_B, .y_dt = SG_ACT_F32R, .inplace = 1, TOL_BN_FWD,
     .note = "output rounded to bf16, stored float32"},
    {"bn_add_relu_fwd", run_bn_add_relu_fwd, BN_E, .x_dt = SG_ACT_BF16, .r_dt = SG_ACT_BF16,
     .y_dt = SG_ACT_BF16, .inplace = 1, TOL_BN_FWD},
    {"bn_add_relu_fwd", run_bn_add_relu_fwd, BN_C, .x_dt = SG_ACT_BF16, .r_dt = SG_ACT_BF16,
     .y_dt = SG_ACT_F32R, TOL_BN_FWD, .note = "bf16 identity, rounded float32 output"},
    {"bn_add_relu_fwd", run_bn_add_relu_fwd, BN_ODD, .r_dt = SG_ACT_BF16, .y_dt = SG_ACT_BF16,
     TOL_BN_FWD, .note = "c odd, threaded"},
    {"bn_add_relu_fwd", run_bn_add_relu_fwd, BN_WIDE, .x_dt = SG_ACT_BF16, .r_dt = SG_ACT_BF16,
     .y_dt = SG_ACT_BF16, TOL_BN_FWD, .note = "NHWC: a row longer than a chunk"},
    {"bn_bwd_reduce_res", run_bn_bwd_reduce_res, BN_A, TOL_BN_BWD},
    {"bn_bwd_reduce_res", run_bn_bwd_reduce_res, BN_A, .acc = 1, TOL_BN_BWD},
    {"bn_bwd_reduce_res", run_bn_bwd_reduce_res, BN_B, TOL_BN_BWD},
    {"bn_bwd_reduce_res", run_bn_bwd_reduce_res, BN_C, .inplace = 1, TOL_BN_BWD,
     .note = "dres NULL"},
    {"bn_bwd_reduce_res", run_bn_bwd_reduce_res, BN_D, .acc = 1, TOL_BN_BWD},
    {"bn_bwd_reduce_res", run_bn_bwd_reduce_res, BN_E, .x_dt = SG_ACT_BF16, TOL_BN_BWD},
    {"bn_bwd_reduce_res", run_bn_bwd_reduce_res, BN_VEC, .x_dt = SG_ACT_BF16, .acc = 1, TOL_BN_BWD,
     .note = "NHWC: the vector route"},
    {"bn_bwd_reduce_res", run_bn_bwd_reduce_res, BN_VEC24, .y_dt = SG_ACT_BF16, TOL_BN_BWD,
     .note = "NHWC: the vector route"},
    {"bn_bwd_reduce_res", run_chan_routes, BN_VEC64, .x_dt = SG_ACT_BF16, .y_dt = SG_ACT_BF16,
     .acc = 1, .tol = EXACT, .note = "NHWC: vector route = scalar route, bit for bit"},
    {"bn_bwd_reduce_res", run_chan_routes, BN_VEC, .tol = EXACT,
     .note = "NHWC: vector route = scalar route, bit for bit"},
    {"bn_bwd_reduce_res", run_chan_routes, BN_VEC24, .y_dt = SG_ACT_BF16, .acc = 1, .tol = EXACT,
     .note = "NHWC: vector route = scalar route, bit for bit"},
    {"bn_bwd_reduce_res", run_bn_bwd_reduce_res, BN_F, .x_dt = SG_ACT_BF16, TOL_BN_BWD},
    {"bn_bwd_reduce_res", run_bn_bwd_reduce_res, BN_C1, .acc = 1, TOL_BN_BWD, .note = "c = 1"},
    {"bn_bwd_reduce_res", run_bn_bwd_reduce_res, BN_HW1, .x_dt = SG_ACT_BF16, TOL_BN_BWD,
     .note = "hw = 1, c odd"},
    {"bn_bwd_reduce_res", run_bn_bwd_reduce_res, BN_ODD, TOL_BN_BWD, .note = "c odd, threaded"},
    {"bn_bwd_reduce_res", run_bn_bwd_reduce_res, BN_PARTS, .x_dt = SG_ACT_BF16, .acc = 1,
     TOL_BN_BWD, .note = "NHWC: 82 tiles summed in 64 pixel ranges"},
    {"bn_bwd_reduce_res", run_bn_bwd_reduce_res, BN_WIDE, TOL_BN_BWD,
     .note = "NHWC: a row longer than a tile"},
    /* the join's output stored in bf16 (the mask read from bf16 bits) */
    {"bn_bwd_reduce_res", run_bn_bwd_reduce_res, BN_A, .y_dt = SG_ACT_BF16, TOL_BN_BWD},
    {"bn_bwd_reduce_res", run_bn_bwd_reduce_res, BN_B, .y_dt = SG_ACT_BF16, .acc = 1, TOL_BN_BWD},
    {"bn_bwd_reduce_res", run_bn_bwd_reduce_res, BN_C, .x_dt = SG_ACT_BF16, .y_dt = SG_ACT_BF16,
     .inplace = 1, TOL_BN_BWD, .note = "dres NULL; NHWC: rows in groups"},
    {"bn_bwd_reduce_res", run_bn_bwd_reduce_res, BN_E, .x_dt = SG_ACT_BF16, .y_dt = SG_ACT_BF16,
     TOL_BN_BWD},
    {"bn_bwd_reduce_res", run_bn_bwd_reduce_res, BN_ODD, .y_dt = SG_ACT_BF16, TOL_BN_BWD,
     .note = "c odd, threaded"},
    {"bn_bwd_reduce_res", run_bn_bwd_reduce_res, BN_PARTS, .x_dt = SG_ACT_BF16, .y_dt = SG_ACT_BF16,
     .acc = 1, TOL_BN_BWD, .note = "NHWC: bf16 y, accumulate, per range"},
    {"bn_bwd_reduce_res", run_bn_bwd_reduce_res, BN_WIDE, .y_dt = SG_ACT_BF16, TOL_BN_BWD,
     .note = "NHWC: a row longer than a tile"},
    {"bn_bwd_reduce_res", run_bn_bwd_reduce_res, .n = 2, .c = 256, .h = 64, .w = 64, .lo = -2,
     .hi = 2, .y_dt = SG_ACT_BF16, TOL_BN_BWD, .note = "NHWC: 128 rows per pixel range, bf16 y"},
    {"bn_param_grads", run_bn_param_grads, .c = 6, .tol = 1e-6, .tol_cuda = 1e-5},
    {"bn_param_grads", run_bn_param_grads, .c = 6, .acc = 1, .tol = 1e-6, .tol_cuda = 1e-5},
    {"bn_param_grads", run_bn_param_grads, .c = 33, .tol = 1e-6, .tol_cuda = 1e-5},
    {"bn_param_grads", run_bn_param_grads, .c = 33, .acc = 1, .tol = 1e-6, .tol_cuda = 1e-5},

    /* ---------------- bf16 activation storage (the *_dt ops) ----------------
     * Every row also checks bit-identity with the float32 op on the same
     * values where the configuration is deterministic (run_act_bf16.c).
     * Conv: on every configuration; the float32 reference at the bf16 conv
     * tolerance (a bf16-stored y is rounded: <= 2^-9 of the value), plus the
     * bf16-exact reference on bf16 configurations. BN: float32 math on bf16
     * values, so the float32 BN tolerances; a bf16-stored y is rounded
     * (TOL_BF16_STORE: 2^-9 of max|y| plus the float32 tolerance). */
    CONV_DT(2, 6, 9, 11, 8, 3, 1, 1, 1, SG_ACT_BF16, SG_ACT_BF16, "bn+relu -> conv -> bn"),
    CONV_DT(2, 6, 9, 11, 8, 3, 1, 1, 1, SG_ACT_F32, SG_ACT_BF16, "maxpool/add -> conv -> bn"),
    CONV_DT(2, 6, 9, 11, 8, 3, 1, 1, 1, SG_ACT_BF16, SG_ACT_F32, "bn+relu -> conv (bias)"),
    CONV_DT(1, 16, 12, 10, 17, 1, 2, 0, 1, SG_ACT_BF16, SG_ACT_BF16, "1x1 stride 2 (blocked)"),
    CONV_DT(2, 5, 13, 13, 4, 3, 1, 6, 6, SG_ACT_BF16, SG_ACT_BF16, "dilated (ASPP rate 6)"),
    CONV_DT_AT("bw:center", 2, 24, 5, 6, 512, 3, 1, 8, 8, SG_ACT_BF16, SG_ACT_BF16,
               "only the centre tap live"),
    CONV_DT(1, 3, 17, 15, 16, 7, 2, 3, 1, SG_ACT_F32, SG_ACT_BF16, "the stem"),
    CONV_DT_G(16, 2, 16, 9, 11, 16, 3, 1, 1, 1, SG_ACT_BF16, SG_ACT_BF16,
              "depthwise: bn+relu -> dwconv -> bn"),
    CONV_DT_G(2, 1, 8, 10, 9, 6, 3, 2, 1, 1, SG_ACT_BF16, SG_ACT_F32, "2 groups, stride 2"),
    CONV_DT(2, 20, 7, 9, 24, 3, 1, 2, 2, SG_ACT_BF16, SG_ACT_BF16,
            "c = 20, k = 24, dilated: channel runs off the vector width"),
    CONV_DT(3, 17, 1, 1, 9, 1, 1, 0, 1, SG_ACT_BF16, SG_ACT_BF16, "hw = 1 (1x1 map)"),
    CONV_DT_AT(TAPS, 2, 64, 13, 11, 24, 3, 1, 6, 6, SG_ACT_BF16, SG_ACT_BF16,
               "sparse dilated: the per-tap GEMMs on bf16 x"),
    CONV_DT_AT(TAPS, 2, 64, 13, 11, 24, 3, 1, 6, 6, SG_ACT_F32, SG_ACT_BF16,
               "sparse dilated, float32 x, bf16 y"),
    CONV_DT_AT("bw:mm1x1", 2, 40, 4, 5, 512, 1, 1, 0, 1, SG_ACT_BF16, SG_ACT_F32,
               "1x1 k = 512: backward-weight as a matmul on bf16 x"),
    CONV_DT_AT("wino-cl", 1, 128, 9, 10, 128, 3, 1, 1, 1, SG_ACT_BF16, SG_ACT_BF16,
               "3x3, 128 channels: the bf16 Winograd (conv_bwd_dt: dy rounded once)"),
    CONV_DT_G_AT("dw", 20, 2, 20, 9, 8, 20, 3, 1, 2, 2, SG_ACT_BF16, SG_ACT_F32,
                 "depthwise dilated, c = 20 (the direct backward-weight)"),
    CONV_GDT(0, 2, 16, 6, 7, 24, 1, 1, 0, 1, SG_ACT_BF16,
             "1x1: bn+relu -> conv -> bn, gradients bf16"),
    CONV_GDT(0, 2, 12, 9, 8, 16, 3, 2, 1, 1, SG_ACT_BF16, "3x3 stride 2, bf16 gradients"),
    CONV_GDT(0, 1, 20, 7, 9, 24, 3, 1, 2, 2, SG_ACT_F32, "dilated, float32 x, bf16 gradients"),
    CONV_GDT(16, 2, 16, 9, 11, 16, 3, 1, 1, 1, SG_ACT_BF16, "depthwise, bf16 gradients"),
    CONV_GDT_AT("wino-cl", 0, 1, 128, 9, 10, 128, 3, 1, 1, 1, SG_ACT_BF16,
                "3x3, 128 channels: the bf16 Winograd, bf16 gradients"),
    {"bn_stats_dt", run_bn_stats_dt, BN_A, .x_dt = SG_ACT_BF16, .tol = 1e-7, .tol_cuda = 2e-7},
    {"bn_stats_dt", run_bn_stats_dt, BN_B, .x_dt = SG_ACT_BF16, .tol = 1e-7, .tol_cuda = 2e-7},
    {"bn_stats_dt", run_bn_stats_dt, BN_F, .x_dt = SG_ACT_BF16, .tol = 1e-7, .tol_cuda = 2e-7},
    {"bn_stats_dt", run_bn_stats_dt, BN_HW1, .x_dt = SG_ACT_BF16, .tol = 1e-7, .tol_cuda = 2e-7,
     .note = "hw = 1, c odd"},
    {"bn_stats_dt", run_bn_stats_dt, BN_ODD, .x_dt = SG_ACT_BF16, .tol = 1e-7, .tol_cuda = 2e-7,
     .note = "c odd, threaded"},
    {"bn_stats_dt", run_bn_stats_dt, BN_STATS_PARTS, .x_dt = SG_ACT_BF16, .tol = 1e-7,
     .tol_cuda = 2e-7, .note = "NHWC: 65 blocks of 252 pixels merged in 64 pixel ranges"},
    {"bn_stats_dt", run_bn_stats_dt, BN_WIDE, .x_dt = SG_ACT_BF16, .tol = 1e-7, .tol_cuda = 2e-7,
     .note = "NHWC: a row longer than a tile"},
    {"bn_stats_dt", run_bn_stats_dt, BN_VEC, .x_dt = SG_ACT_BF16, .tol = 1e-7, .tol_cuda = 2e-7,
     .note = "NHWC: the vector route"},
    {"bn_stats_dt", run_chan_routes, BN_VEC64, .tol = EXACT,
     .note = "NHWC: vector route = scalar route, bit for bit"},
    {"bn_stats_dt", run_chan_routes, BN_VEC64, .x_dt = SG_ACT_BF16, .tol = EXACT,
     .note = "NHWC: vector route = scalar route, bit for bit"},
    {"bn_stats_dt", run_chan_routes, BN_VEC, .x_dt = SG_ACT_BF16, .tol = EXACT,
     .note = "NHWC: vector route = scalar route, bit for bit"},
    {"bn_stats_dt", run_chan_routes, BN_VEC24, .tol = EXACT,
     .note = "NHWC: vector route = scalar route, bit for bit"},
    {"bn_fwd_dt", run_chan_routes, BN_VEC64, .relu = 1, .tol = EXACT,
     .note = "NHWC: the normalize's vector route = scalar route, bit for bit"},
    {"bn_fwd_dt", run_chan_routes, BN_VEC, .x_dt = SG_ACT_BF16, .y_dt = SG_ACT_BF16, .relu = 1,
     .tol = EXACT, .note = "NHWC: the normalize's vector route = scalar route, bit for bit"},
    {"bn_fwd_dt", run_chan_routes, BN_VEC24, .x_dt = SG_ACT_BF16, .tol = EXACT,
     .note = "NHWC: the normalize's vector route = scalar route, bit for bit"},
    {"bn_fwd_dt", run_chan_routes, BN_VEC24, .y_dt = SG_ACT_BF16, .tol = EXACT,
     .note = "NHWC: the normalize's vector route = scalar route, bit for bit"},
    {"bn_fwd", run_bn_fwd, BN_VEC, .relu = 1, TOL_BN_FWD, .note = "NHWC: the vector route"},
    {"bn_fwd", run_bn_fwd, BN_VEC64, .inplace = 1, TOL_BN_FWD, .note = "NHWC: the vector route"},
    {"bn_bwd_elem_dt", run_chan_routes, BN_VEC64, .relu = 1, .acc = 1, .tol = EXACT,
     .note = "NHWC: the backward element's vector route = scalar route, bit for bit"},
    {"bn_bwd_elem_dt", run_chan_routes, BN_VEC, .x_dt = SG_ACT_BF16, .y_dt = SG_ACT_BF16, .relu = 1,
     .tol = EXACT,
     .note = "NHWC: the backward element's vector route = scalar route, bit for bit (mask from x)"},
    {"bn_bwd_elem_dt", run_chan_routes, BN_VEC64, .x_dt = SG_ACT_BF16, .gy_dt = SG_ACT_BF16,
     .gx_dt = SG_ACT_BF16, .relu = 1, .tol = EXACT,
     .note = "NHWC: the backward element's vector route = scalar route, bit for bit (bf16 dy, dx)"},
    {"bn_bwd_elem_dt", run_chan_routes, BN_VEC24, .x_dt = SG_ACT_BF16, .tol = EXACT,
     .note = "NHWC: the backward element's vector route = scalar route, bit for bit"},
    {"bn_bwd_elem", run_bn_bwd_elem, BN_VEC, .relu = 1, .acc = 1, TOL_BN_BWD,
     .note = "NHWC: the vector route"},
    {"bn_bwd_elem", run_bn_bwd_elem, BN_VEC24, TOL_BN_BWD, .note = "NHWC: the vector route"},
    {"bn_bwd_reduce_dt", run_chan_routes, BN_VEC64, .relu = 1, .tol = EXACT,
     .note = "NHWC: vector route = scalar route, bit for bit (ReLU mask from y)"},
    {"bn_bwd_reduce_dt", run_chan_routes, BN_VEC64, .x_dt = SG_ACT_BF16, .y_dt = SG_ACT_BF16,
     .relu = 1, .tol = EXACT,
     .note = "NHWC: vector route = scalar route, bit for bit (ReLU mask recomputed from x)"},
    {"bn_bwd_reduce_dt", run_chan_routes, BN_VEC64, .x_dt = SG_ACT_BF16, .gy_dt = SG_ACT_BF16,
     .relu = 1, .tol = EXACT, .note = "NHWC: vector route = scalar route, bit for bit (bf16 dy)"},
    {"bn_bwd_reduce_dt", run_chan_routes, BN_VEC, .x_dt = SG_ACT_BF16, .tol = EXACT,
     .note = "NHWC: vector route = scalar route, bit for bit"},
    {"bn_fwd_dt", run_bn_fwd_dt, BN_A, .x_dt = SG_ACT_BF16, TOL_BN_FWD},
    {"bn_fwd_dt", run_bn_fwd_dt, BN_A, .x_dt = SG_ACT_BF16, .y_dt = SG_ACT_BF16, .relu = 1,
     .tol = TOL_BF16_STORE},
    {"bn_fwd_dt", run_bn_fwd_dt, BN_B, .y_dt = SG_ACT_BF16, .relu = 1, .tol = TOL_BF16_STORE},
    {"bn_fwd_dt", run_bn_fwd_dt, BN_E, .x_dt = SG_ACT_BF16, .relu = 1, TOL_BN_FWD},
    {"bn_fwd_dt", run_bn_fwd_dt, BN_F, .x_dt = SG_ACT_BF16, .y_dt = SG_ACT_BF16, .relu = 1,
     .tol = TOL_BF16_STORE},
    {"bn_fwd_dt", run_bn_fwd_dt, BN_C1, .x_dt = SG_ACT_BF16, .y_dt = SG_ACT_BF16, .relu = 1,
     .tol = TOL_BF16_STORE, .note = "c = 1"},
    {"bn_fwd_dt", run_bn_fwd_dt, BN_ODD, .y_dt = SG_ACT_BF16, .relu = 1, .tol = TOL_BF16_STORE,
     .note = "c odd, threaded"},
    {"bn_fwd_dt", run_bn_fwd_dt, BN_WIDE, .x_dt = SG_ACT_BF16, .y_dt = SG_ACT_BF16, .relu = 1,
     .tol = TOL_BF16_STORE, .note = "NHWC: a row longer than a tile"},
    {"bn_bwd_reduce_dt", run_bn_bwd_reduce_dt, BN_A, .x_dt = SG_ACT_BF16, TOL_BN_BWD},
    {"bn_bwd_reduce_dt", run_bn_bwd_reduce_dt, BN_A, .x_dt = SG_ACT_BF16, .relu = 1, TOL_BN_BWD},
    {"bn_bwd_reduce_dt", run_bn_bwd_reduce_dt, BN_A, .x_dt = SG_ACT_BF16, .y_dt = SG_ACT_BF16,
     .relu = 1, TOL_BN_BWD, .note = "mask recomputed from x"},
    {"bn_bwd_reduce_dt", run_bn_bwd_reduce_dt, BN_B, .y_dt = SG_ACT_BF16, .relu = 1, TOL_BN_BWD,
     .note = "mask recomputed from a float32 x"},
    {"bn_bwd_reduce_dt", run_bn_bwd_reduce_dt, BN_F, .x_dt = SG_ACT_BF16, .y_dt = SG_ACT_BF16,
     .relu = 1, TOL_BN_BWD},
    {"bn_bwd_reduce_dt", run_bn_bwd_reduce_dt, BN_HW1, .x_dt = SG_ACT_BF16, .y_dt = SG_ACT_BF16,
     .relu = 1, TOL_BN_BWD, .note = "hw = 1, c odd, mask recomputed"},
    {"bn_bwd_reduce_dt", run_bn_bwd_reduce_dt, BN_ODD, .x_dt = SG_ACT_BF16, .relu = 1, TOL_BN_BWD,
     .note = "c odd, threaded"},
    {"bn_bwd_reduce_dt", run_bn_bwd_reduce_dt, BN_WIDE, .y_dt = SG_ACT_BF16, .relu = 1, TOL_BN_BWD,
     .note = "NHWC: a row longer than a tile, mask recomputed from a float32 x"},
    {"bn_bwd_elem_dt", run_bn_bwd_elem_dt, BN_A, .x_dt = SG_ACT_BF16, TOL_BN_BWD},
    {"bn_bwd_elem_dt", run_bn_bwd_elem_dt, BN_A, .x_dt = SG_ACT_BF16, .acc = 1, .relu = 1,
     TOL_BN_BWD},
    {"bn_bwd_elem_dt", run_bn_bwd_elem_dt, BN_A, .x_dt = SG_ACT_BF16, .y_dt = SG_ACT_BF16,
     .relu = 1, TOL_BN_BWD, .note = "mask recomputed from x"},
    {"bn_bwd_elem_dt", run_bn_bwd_elem_dt, BN_B, .y_dt = SG_ACT_BF16, .relu = 1, .acc = 1,
     TOL_BN_BWD, .note = "mask recomputed from a float32 x"},
    {"bn_bwd_elem_dt", run_bn_bwd_elem_dt, BN_F, .x_dt = SG_ACT_BF16, .y_dt = SG_ACT_BF16,
     .relu = 1, .acc = 1, TOL_BN_BWD},
    {"bn_bwd_elem_dt", run_bn_bwd_elem_dt, BN_C1, .x_dt = SG_ACT_BF16, .y_dt = SG_ACT_BF16,
     .relu = 1, TOL_BN_BWD, .note = "c = 1, mask recomputed"},
    {"bn_bwd_elem_dt", run_bn_bwd_elem_dt, BN_ODD, .x_dt = SG_ACT_BF16, .y_dt = SG_ACT_BF16,
     .relu = 1, .acc = 1, TOL_BN_BWD, .note = "c odd, threaded, mask recomputed"},
    {"bn_bwd_elem_dt", run_bn_bwd_elem_dt, BN_WIDE, .x_dt = SG_ACT_BF16, .relu = 1, TOL_BN_BWD,
     .note = "NHWC: a row longer than a tile"},
    /* bf16 gradients (the plan's grad_storage): dy read widened (the float32
     * tolerance: the same values), dx rounded once (the stored-bf16 one) */
    {"bn_bwd_reduce_dt", run_bn_bwd_reduce_dt, BN_A, .x_dt = SG_ACT_BF16, .y_dt = SG_ACT_BF16,
     .gy_dt = SG_ACT_BF16, .relu = 1, TOL_BN_BWD, .note = "dy bf16 (a conv wrote it)"},
    {"bn_bwd_reduce_dt", run_bn_bwd_reduce_dt, BN_ODD, .x_dt = SG_ACT_BF16, .y_dt = SG_ACT_BF16,
     .gy_dt = SG_ACT_BF16, .relu = 1, TOL_BN_BWD, .note = "dy bf16, c odd, threaded"},
    {"bn_bwd_reduce_dt", run_bn_bwd_reduce_dt, BN_WIDE, .gy_dt = SG_ACT_BF16, .relu = 1, TOL_BN_BWD,
     .note = "dy bf16, float32 x and y, NHWC: a row longer than a tile"},
    {"bn_bwd_reduce_dt", run_bn_bwd_reduce_dt, BN_B, .gy_dt = SG_ACT_BF16, TOL_BN_BWD,
     .note = "dy bf16, no relu"},
    {"bn_bwd_elem_dt", run_bn_bwd_elem_dt, BN_A, .x_dt = SG_ACT_BF16, .gx_dt = SG_ACT_BF16,
     .tol = TOL_BF16_STORE, .note = "dx bf16 (a conv reads it)"},
    {"bn_bwd_elem_dt", run_bn_bwd_elem_dt, BN_A, .x_dt = SG_ACT_BF16, .y_dt = SG_ACT_BF16,
     .gy_dt = SG_ACT_BF16, .gx_dt = SG_ACT_BF16, .relu = 1, .tol = TOL_BF16_STORE,
     .note = "dy and dx bf16, mask recomputed: bn+relu between two convs"},
    {"bn_bwd_elem_dt", run_bn_bwd_elem_dt, BN_A, .x_dt = SG_ACT_BF16, .y_dt = SG_ACT_BF16,
     .gy_dt = SG_ACT_BF16, .relu = 1, .acc = 1, TOL_BN_BWD, .note = "dy bf16, float32 dx added to"},
    {"bn_bwd_elem_dt", run_bn_bwd_elem_dt, BN_ODD, .x_dt = SG_ACT_BF16, .y_dt = SG_ACT_BF16,
     .gy_dt = SG_ACT_BF16, .gx_dt = SG_ACT_BF16, .relu = 1, .tol = TOL_BF16_STORE,
     .note = "dy and dx bf16, c odd, threaded"},
    {"bn_bwd_elem_dt", run_bn_bwd_elem_dt, BN_WIDE, .gx_dt = SG_ACT_BF16, .relu = 1,
     .tol = TOL_BF16_STORE, .note = "dx bf16, float32 x and y, NHWC: a row longer than a tile"},
    {"bn_bwd_elem_dt", run_bn_bwd_elem_dt, BN_C1, .x_dt = SG_ACT_BF16, .gx_dt = SG_ACT_BF16,
     .tol = TOL_BF16_STORE, .note = "dx bf16, c = 1"},

    /* ---------------- elementwise ---------------- */
    /* 70001: odd, above the CPU's threading threshold; 1000003: several
     * CUDA blocks per grid-stride step */
    {"relu_fwd", run_relu_fwd, .count = 70001, .tol = EXACT},
    {"relu_fwd", run_relu_fwd, .count = 1000003, .tol = EXACT},
    {"relu_bwd", run_relu_bwd, .count = 70001, .tol = EXACT},
    {"relu_bwd", run_relu_bwd, .count = 70001, .acc = 1, .tol = EXACT},
    {"relu_bwd", run_relu_bwd, .count = 1000003, .tol = EXACT},
    {"relu_bwd", run_relu_bwd, .count = 1000003, .acc = 1, .tol = EXACT},
    {"add", run_add, .count = 70001, .tol = EXACT},
    {"add", run_add, .count = 70001, .relu = 1, .tol = EXACT},
    {"add", run_add, .count = 70001, .inplace = 1, .tol = EXACT},
    {"add", run_add, .count = 70001, .relu = 1, .inplace = 1, .tol = EXACT},
    {"add", run_add, .count = 70001, .inplace = 2, .tol = EXACT},
    {"add", run_add, .count = 70001, .relu = 1, .inplace = 2, .tol = EXACT},
    {"add", run_add, .count = 1000003, .tol = EXACT},
    {"add", run_add, .count = 1000003, .relu = 1, .tol = EXACT},
    {"add", run_add, .count = 1000003, .relu = 1, .inplace = 1, .tol = EXACT},
    {"add", run_add, .count = 1000003, .relu = 1, .inplace = 2, .tol = EXACT},
    {"scale", run_scale, .count = 70001, .alpha = -2.5f, .tol = EXACT},
    {"scale", run_scale, .count = 70001, .alpha = -2.5f, .inplace = 1, .tol = EXACT},
    {"scale", run_scale, .count = 1000003, .alpha = -0.37f, .tol = EXACT},
    {"scale", run_scale, .count = 1000003, .alpha = -0.37f, .inplace = 1, .tol = EXACT},
    /* CUDA may fuse y + alpha*x into one rounding (FMA) */
    {"axpy", run_axpy, .count = 70001, .alpha = 0.75f, .tol = 1e-7, .tol_cuda = 1e-6},
    {"axpy", run_axpy, .count = 1000003, .alpha = 1.7f, .tol = 1e-7, .tol_cuda = 1e-6},
    {"sumsq", run_sumsq, .count = 70001, .tol = 1e-9},
    {"sumsq", run_sumsq, .count = 1000003, .tol = 1e-9},
    {"sumsq", run_sumsq, .count = 1, .tol = EXACT},
    {"sumsq", run_sumsq, .count = 3, .in = sumsq_hand, .want = sumsq_hand_want, .nwant = 1,
     .tol = EXACT, .note = "1 + 4 + 9"},

    /* ---------------- dropout (bit-exact by contract) ---------------- */
    {"dropout_fwd", run_dropout_fwd, .count = 100003, .p = 0.3f, .tol = EXACT},
    {"dropout_fwd", run_dropout_fwd, .n = 3, .c = 37, .h = 29, .w = 31, .p = 0.3f,
     .key = 0x5eed0005, .tol = EXACT, .note = "an activation: the mask keys on the NCHW index"},
    {"dropout_fwd", run_dropout_fwd, .count = 100001, .p = 0.1f, .key = 0x5eed0001, .tol = EXACT},
    {"dropout_fwd", run_dropout_fwd, .count = 100001, .p = 0.5f, .key = 0x5eed0002, .tol = EXACT},
    {"dropout_fwd", run_dropout_fwd, .count = 100001, .p = 0.0f, .key = 0x5eed0003, .tol = EXACT,
     .note = "keeps everything"},
    {"dropout_fwd", run_dropout_fwd, .count = 100001, .p = 1.0f, .key = 0x5eed0004, .tol = EXACT,
     .note = "drops everything"},
    {"dropout_bwd", run_dropout_bwd, .count = 100003, .p = 0.3f, .tol = EXACT},
    {"dropout_bwd", run_dropout_bwd, .count = 100003, .p = 0.3f, .acc = 1, .tol = EXACT},
    {"dropout_bwd", run_dropout_bwd, .count = 100001, .p = 0.5f, .key = 0x5eed0002, .acc = 1,
     .tol = EXACT},
    {"dropout_bwd", run_dropout_bwd, .count = 100001, .p = 0.0f, .key = 0x5eed0003, .tol = EXACT},
    {"dropout_bwd", run_dropout_bwd, .count = 100001, .p = 1.0f, .key = 0x5eed0004, .acc = 1,
     .tol = EXACT},

    /* ---------------- gates (MobileNetV3, LR-ASPP) ---------------- */
    /* float formulas against the double reference: an ulp or two; sigmoid:
     * expf (libm or CUDA's, within 2 ulp) */
    GATE_FWD("hardswish_fwd", run_hardswish_fwd, hswish_torch, 0),
    GATE_BWD("hardswish_bwd", run_hardswish_bwd, hswish_grad_torch, 0),
    GATE_FWD("hardsigmoid_fwd", run_hardsigmoid_fwd, hsig_torch, 0),
    GATE_BWD("hardsigmoid_bwd", run_hardsigmoid_bwd, hsig_grad_torch, 0),
    GATE_FWD("sigmoid_fwd", run_sigmoid_fwd, sig_torch, 1e-7),
    GATE_BWD("sigmoid_bwd", run_sigmoid_bwd, sig_grad_torch, 1e-7),
    {"chan_scale_fwd", run_chan_scale_fwd, .n = 2, .c = 3, .h = 7, .w = 5, .tol = EXACT},
    {"chan_scale_fwd", run_chan_scale_fwd, .n = 2, .c = 3, .h = 7, .w = 5, .inplace = 1,
     .tol = EXACT},
    {"chan_scale_fwd", run_chan_scale_fwd, .n = 4, .c = 16, .h = 34, .w = 31, .tol = EXACT,
     .note = "threaded"},
    {"chan_scale_fwd", run_chan_scale_fwd, .n = 3, .c = 5, .h = 1, .w = 1, .tol = EXACT,
     .note = "1x1 planes"},
    {"chan_scale_bwd", run_chan_scale_bwd, .n = 2, .c = 3, .h = 7, .w = 5, .tol = 1e-6},
    {"chan_scale_bwd", run_chan_scale_bwd, .n = 2, .c = 3, .h = 7, .w = 5, .acc = 1, .tol = 1e-6},
    {"chan_scale_bwd", run_chan_scale_bwd, .n = 2, .c = 3, .h = 7, .w = 5, .acc2 = 1, .tol = 1e-6},
    {"chan_scale_bwd", run_chan_scale_bwd, .n = 2, .c = 3, .h = 7, .w = 5, .acc = 1, .acc2 = 1,
     .tol = 1e-6},
    {"chan_scale_bwd", run_chan_scale_bwd, .n = 2, .c = 3, .h = 7, .w = 5, .skip = 1, .acc2 = 1,
     .tol = 1e-6, .note = "ds only"},
    {"chan_scale_bwd", run_chan_scale_bwd, .n = 2, .c = 3, .h = 7, .w = 5, .skip = 2, .acc = 1,
     .tol = 1e-6, .note = "dx only"},
    {"chan_scale_bwd", run_chan_scale_bwd, .n = 4, .c = 16, .h = 34, .w = 31, .acc = 1, .tol = 1e-6,
     .note = "threaded, long planes"},
    {"chan_scale_bwd", run_chan_scale_bwd, .n = 3, .c = 5, .h = 1, .w = 1, .tol = 1e-6,
     .note = "1x1 planes"},
    /* channels-last shapes: c past a channel block and odd, c = 1, threaded */
    {"chan_scale_fwd", run_chan_scale_fwd, .n = 2, .c = 67, .h = 23, .w = 29, .tol = EXACT,
     .note = "NHWC: odd c past a block, threaded"},
    {"chan_scale_fwd", run_chan_scale_fwd, .n = 2, .c = 1, .h = 7, .w = 5, .inplace = 1,
     .tol = EXACT, .note = "one channel (both layouts the same bytes)"},
    {"chan_scale_bwd", run_chan_scale_bwd, .n = 2, .c = 131, .h = 17, .w = 19, .acc = 1, .acc2 = 1,
     .tol = 1e-6, .note = "NHWC: odd c past a channel block (128 + 3), threaded"},
    {"chan_scale_bwd", run_chan_scale_bwd, .n = 2, .c = 129, .h = 5, .w = 3, .skip = 1, .tol = 1e-6,
     .note = "NHWC: ds only, one channel past a block"},
    {"chan_scale_bwd", run_chan_scale_bwd, .n = 3, .c = 67, .h = 9, .w = 7, .skip = 2, .tol = 1e-6,
     .note = "NHWC: dx only, odd c"},
    {"chan_scale_bwd", run_chan_scale_bwd, .n = 2, .c = 1, .h = 7, .w = 5, .acc2 = 1, .tol = 1e-6,
     .note = "one channel"},

    /* ---------------- pooling, resize, concat ---------------- */
    /* all negative: the -inf padding must never win (zero padding would) */
    MAXPOOL(1, 3, 7, 9, TB_FILL_RAND, -3, -1, "odd"),
    MAXPOOL(3, 3, 8, 8, TB_FILL_RAND, -3, -1, "batch 3"),
    MAXPOOL(2, 3, 1, 1, TB_FILL_RAND, -3, -1, "1x1 plane"),
    MAXPOOL(1, 3, 2, 5, TB_FILL_RAND, -3, -1, "2 rows"),
    MAXPOOL(3, 3, 97, 101, TB_FILL_RAND, -3, -1, "large, threaded"),
    MAXPOOL(1, 3, 17, 13, TB_FILL_TIES, -1, 1, "ties: the first maximum wins"),
    MAXPOOL(4, 2, 16, 10, TB_FILL_TIES, -1, 1, "ties, batch 4"),
    MAXPOOL(1, 1, 1, 2, TB_FILL_TIES, -1, 1, "1x2 plane"),
    MAXPOOL(2, 67, 33, 31, TB_FILL_RAND, -3, -1, "NHWC: odd c past a channel block, threaded"),
    MAXPOOL(2, 16, 9, 11, TB_FILL_TIES, -1, 1, "NHWC: ties on 16 channels, odd plane"),
    MAXPOOL(1, 5, 9, 1, TB_FILL_TIES, -1, 1, "NHWC: width 1, 5 channels"),
    MAXPOOL(3, 130, 3, 4, TB_FILL_RAND, -1, 1, "NHWC: three channel blocks, tiny plane"),
    {"maxpool_fwd", run_maxpool_fwd, .n = 1, .c = 1, .h = 4, .w = 4, .fill = TB_FILL_CONST, .lo = 1,
     .want = (const double[]){0, 1, 4, 5}, .nwant = 4, .tol = EXACT,
     .note = "a constant plane: the first element of each window"},
    {"avgpool_fwd", run_avgpool_fwd, .n = 3, .c = 4, .h = 31, .w = 1, .tol = 1e-6,
     .tol_cuda = 1e-5},
    {"avgpool_fwd", run_avgpool_fwd, .n = 4, .c = 6, .h = 33, .w = 31, .lo = -1, .hi = 3,
     .tol = 1e-6, .tol_cuda = 1e-5},
    {"avgpool_bwd", run_avgpool_bwd, .n = 3, .c = 4, .h = 31, .w = 1, .tol = 1e-6,
     .tol_cuda = 1e-5},
    {"avgpool_bwd", run_avgpool_bwd, .n = 3, .c = 4, .h = 31, .w = 1, .acc = 1, .tol = 1e-6,
     .tol_cuda = 1e-5},
    {"avgpool_bwd", run_avgpool_bwd, .n = 4, .c = 6, .h = 33, .w = 31, .acc = 1, .tol = 1e-6,
     .tol_cuda = 1e-5},
    {"avgpool_fwd", run_avgpool_fwd, .n = 2, .c = 67, .h = 23, .w = 29, .tol = 1e-6,
     .tol_cuda = 1e-5, .note = "NHWC: odd c, threaded"},
    {"avgpool_fwd", run_avgpool_fwd, .n = 2, .c = 259, .h = 11, .w = 13, .tol = 1e-6,
     .tol_cuda = 1e-5, .note = "NHWC: odd c past a channel block (256 + 3), threaded"},
    {"avgpool_fwd", run_avgpool_fwd, .n = 3, .c = 1, .h = 5, .w = 7, .tol = 1e-6, .tol_cuda = 1e-5,
     .note = "one channel"},
    {"avgpool_fwd", run_avgpool_fwd, .n = 2, .c = 300, .h = 1, .w = 1, .tol = 1e-6,
     .tol_cuda = 1e-5, .note = "1x1 planes: the mean is the value"},
    {"avgpool_fwd", run_avgpool_fwd, .n = 2, .c = 259, .h = 11, .w = 13, .x_dt = SG_ACT_BF16,
     .tol = 1e-6, .tol_cuda = 1e-5, .note = "x in bf16 (the residual stream), threaded"},
    {"avgpool_fwd", run_avgpool_fwd, .n = 3, .c = 4, .h = 31, .w = 1, .x_dt = SG_ACT_BF16,
     .tol = 1e-6, .tol_cuda = 1e-5, .note = "x in bf16, one row planes"},
    {"avgpool_bwd", run_avgpool_bwd, .n = 2, .c = 300, .h = 11, .w = 23, .tol = 1e-6,
     .tol_cuda = 1e-5, .note = "NHWC: even c, threaded"},
    {"avgpool_bwd", run_avgpool_bwd, .n = 2, .c = 2051, .h = 4, .w = 5, .acc = 1, .tol = 1e-6,
     .tol_cuda = 1e-5, .note = "NHWC: c past a block of gradients (2048 + 3), threaded"},
    {"avgpool_bwd", run_avgpool_bwd, .n = 3, .c = 5, .h = 9, .w = 15, .acc = 1, .tol = 1e-6,
     .tol_cuda = 1e-5, .note = "NHWC: odd c, pixels past a block"},
    RESIZE(1, 2, 5, 7, 17, 23, "up, odd"),
    RESIZE(2, 2, 17, 13, 6, 5, "down"),
    RESIZE(3, 2, 9, 9, 9, 9, "identity"),
    RESIZE(1, 2, 1, 1, 4, 4, "from one pixel"),
    RESIZE(2, 2, 4, 4, 32, 32, "8x up"),
    RESIZE(3, 2, 33, 33, 257, 129, "large, threaded"),
    RESIZE(1, 3, 9, 7, 33, 29, "up, odd"),
    RESIZE(4, 2, 33, 29, 9, 7, "down, batch 4"),
    RESIZE(1, 2, 13, 17, 17, 13, "non-integer ratios both ways"),
    RESIZE(4, 3, 11, 11, 11, 11, "identity, batch 4"),
    RESIZE(1, 21, 5, 5, 40, 40, "8x, like the logits"),
    RESIZE(2, 1, 1, 1, 3, 4, "from one pixel (ASPP pooling branch)"),
    RESIZE(1, 1, 64, 48, 1, 3, "to tiny"),
    RESIZE(2, 67, 9, 7, 33, 29, "NHWC: odd c, threaded"),
    RESIZE(2, 19, 8, 8, 64, 64, "NHWC: 8x, like the logits (19 classes), threaded"),
    RESIZE(1, 5, 1, 1, 4, 3, "NHWC: from one pixel, 5 channels"),
    RESIZE(2, 3, 7, 5, 1, 1, "NHWC: to one pixel, 3 channels"),
    {"resize_fwd", run_resize_fwd, RS(1, 1, 2, 3, 3, 5), .in = arange6, .want = resize_torch,
     .nwant = 15, .want_tol = 1e-6, .tol = 1e-5, .note = "PyTorch values"},
    {"concat_fwd", run_concat_fwd, .n = 3, .c = 3, .h = 11, .w = 1, .c_dst = 8, .c_off = 4,
     .tol = EXACT},
    {"concat_fwd", run_concat_fwd, .n = 4, .c = 3, .h = 29, .w = 1, .c_dst = 11, .c_off = 5,
     .tol = EXACT},
    {"concat_fwd", run_concat_fwd, .n = 1, .c = 2, .h = 7, .w = 3, .c_dst = 5, .c_off = 0,
     .tol = EXACT, .note = "at the start"},
    {"concat_fwd", run_concat_fwd, .n = 2, .c = 4, .h = 1, .w = 1, .c_dst = 6, .c_off = 2,
     .tol = EXACT, .note = "at the end, 1x1 planes"},
    {"concat_bwd", run_concat_bwd, .n = 3, .c = 3, .h = 11, .w = 1, .c_dst = 8, .c_off = 4,
     .tol = EXACT},
    {"concat_bwd", run_concat_bwd, .n = 3, .c = 3, .h = 11, .w = 1, .c_dst = 8, .c_off = 4,
     .acc = 1, .tol = EXACT},
    {"concat_bwd", run_concat_bwd, .n = 4, .c = 3, .h = 29, .w = 1, .c_dst = 11, .c_off = 5,
     .acc = 1, .tol = EXACT},
    {"concat_bwd", run_concat_bwd, .n = 2, .c = 4, .h = 1, .w = 1, .c_dst = 6, .c_off = 2,
     .tol = EXACT},
    {"concat_fwd", run_concat_fwd, .n = 2, .c = 1, .h = 7, .w = 3, .c_dst = 5, .c_off = 4,
     .tol = EXACT, .note = "NHWC: one channel, at the end"},
    {"concat_fwd", run_concat_fwd, .n = 2, .c = 67, .h = 23, .w = 29, .c_dst = 100, .c_off = 33,
     .tol = EXACT, .note = "NHWC: odd c at an odd offset, threaded"},
    {"concat_fwd", run_concat_fwd, .n = 2, .c = 67, .h = 23, .w = 29, .c_dst = 100, .c_off = 33,
     .y_dt = SG_ACT_BF16, .tol = EXACT, .note = "float32 into a bf16 concat: rounded, threaded"},
    {"concat_fwd", run_concat_fwd, .n = 3, .c = 3, .h = 11, .w = 1, .c_dst = 8, .c_off = 4,
     .x_dt = SG_ACT_BF16, .y_dt = SG_ACT_BF16, .tol = EXACT, .note = "bf16 into bf16: the bits"},
    {"concat_fwd", run_concat_fwd, .n = 2, .c = 1, .h = 7, .w = 3, .c_dst = 5, .c_off = 4,
     .x_dt = SG_ACT_BF16, .tol = EXACT, .note = "bf16 into float32: widened"},
    {"concat_bwd", run_concat_bwd, .n = 2, .c = 1, .h = 7, .w = 3, .c_dst = 5, .c_off = 0, .acc = 1,
     .tol = EXACT, .note = "NHWC: one channel, at the start"},
    {"concat_bwd", run_concat_bwd, .n = 2, .c = 67, .h = 23, .w = 29, .c_dst = 100, .c_off = 33,
     .acc = 1, .tol = EXACT, .note = "NHWC: odd c at an odd offset, threaded"},

    /* ---------------- loss, metrics ---------------- */
    /* loss summed in double (relative error of the sum), gradients in float */
    {"ce_fwd_bwd", run_ce_fwd_bwd, .n = 3, .c = 7, .h = 3301, .w = 1, .lo = -8, .hi = 8,
     .grad_scale = 0.25f, .tol = 1e-6, .note = "several pixel blocks, odd, threaded"},
    {"ce_fwd_bwd", run_ce_fwd_bwd, .n = 3, .c = 7, .h = 3301, .w = 1, .lo = -8, .hi = 8,
     .grad_scale = 0.25f, .inplace = 1, .tol = 1e-6, .note = "dlogits == logits"},
    {"ce_fwd_bwd", run_ce_fwd_bwd, .n = 4, .c = 7, .h = 23, .w = 19, .lo = -6, .hi = 6,
     .grad_scale = 0.01f, .tol = 1e-6},
    {"ce_fwd_bwd", run_ce_fwd_bwd, .n = 1, .c = 19, .h = 16, .w = 12, .lo = -6, .hi = 6,
     .ignore = 3, .tol = 1e-6, .note = "a class index as the ignore label"},
    {"ce_fwd_bwd", run_ce_fwd_bwd, .n = 1, .c = 2, .h = 1, .w = 1, .in = ce_hand_l,
     .labels = label1, .want = ce_hand_want, .nwant = 3, .want_tol = 1e-6, .tol = 1e-6,
     .note = "hand: -log(3/4)"},
    {"ce_fwd_bwd", run_ce_fwd_bwd, .n = 1, .c = 2, .h = 1, .w = 1, .in = ce_huge_l,
     .labels = label1, .want = ce_huge_want, .nwant = 1, .want_tol = 1e-3, .tol = 1e-6,
     .note = "huge logits: stable log-sum-exp"},
    {"ce_fwd_bwd", run_ce_fwd_bwd, .n = 2, .c = 3, .h = 17, .w = 31, .lo = -6, .hi = 6,
     .grad_scale = 0.5f, .tol = 1e-6, .note = "NHWC: 3 classes, odd plane, several blocks"},
    {"ce_fwd_bwd", run_ce_fwd_bwd, .n = 2, .c = 21, .h = 41, .w = 43, .lo = -8, .hi = 8,
     .grad_scale = 0.25f, .inplace = 1, .tol = 1e-6,
     .note = "NHWC: 21 classes, in place, threaded"},
    {"ce_fwd_bwd", run_ce_fwd_bwd, .n = 2, .c = 150, .h = 29, .w = 7, .lo = -8, .hi = 8,
     .grad_scale = 0.25f, .tol = 1e-6, .note = "150 classes: NHWC blocks of 109 pixels"},
    /* loss options (issue 16): class weights, OHEM's selection, k-th smallest */
    {"ce_weighted", run_ce_weighted, .n = 3, .c = 7, .h = 3301, .w = 1, .lo = -8, .hi = 8,
     .grad_scale = 0.25f, .tol = 1e-6, .note = "drawn weights, several blocks, threaded"},
    {"ce_weighted", run_ce_weighted, .n = 3, .c = 7, .h = 3301, .w = 1, .lo = -8, .hi = 8,
     .grad_scale = 0.25f, .p = 0.4f, .inplace = 1, .tol = 1e-6,
     .note = "weights and a selection, dlogits == logits"},
    {"ce_weighted", run_ce_weighted, .n = 2, .c = 19, .h = 16, .w = 12, .lo = -6, .hi = 6,
     .ignore = 3, .p = 0.7f, .grad_scale = 0.01f, .tol = 1e-6,
     .note = "a class index as the ignore label"},
    {"ce_weighted", run_ce_weighted, .n = 1, .c = 3, .h = 2, .w = 2, .in = cew_l, .in2 = cew_w,
     .labels = cew_lab, .grad_scale = 1.0f / 3.75f, .want = cew_want, .nwant = 14, .want_tol = 1e-6,
     .tol = 1e-6, .note = "PyTorch's weighted cross_entropy"},
    {"ce_weighted", run_ce_weighted, .n = 2, .c = 21, .h = 41, .w = 43, .lo = -8, .hi = 8,
     .p = 0.5f, .grad_scale = 0.25f, .tol = 1e-6,
     .note = "NHWC: 21 classes, a selection, threaded"},
    {"ce_weighted_acc", run_ce_weighted_acc, .n = 3, .c = 7, .h = 3301, .w = 1, .lo = -8, .hi = 8,
     .grad_scale = 0.25f, .count = 2, .tol = 1e-6,
     .note = "plain loss (the training step's), several blocks, threaded"},
    {"ce_weighted_acc", run_ce_weighted_acc, .n = 2, .c = 19, .h = 16, .w = 12, .lo = -6, .hi = 6,
     .acc = 1, .p = 0.7f, .grad_scale = 0.01f, .count = 3, .tol = 1e-6,
     .note = "class weights and a selection"},
    {"ce_weighted_acc", run_ce_weighted_acc, .n = 1, .c = 5, .h = 1, .w = 1, .lo = -8, .hi = 8,
     .grad_scale = 1.0f, .tol = 1e-6, .note = "one pixel"},
    {"ce_label_prob", run_ce_label_prob, .n = 2, .c = 3, .h = 17, .w = 31, .lo = -6, .hi = 6,
     .tol = 1e-6, .note = "NHWC: 3 classes"},
    {"ce_label_prob", run_ce_label_prob, .n = 3, .c = 7, .h = 1301, .w = 1, .lo = -8, .hi = 8,
     .tol = 1e-6},
    {"ce_label_prob", run_ce_label_prob, .n = 1, .c = 19, .h = 16, .w = 12, .lo = -6, .hi = 6,
     .ignore = 3, .tol = 1e-6},
    {"kth_smallest", run_kth_smallest, .count = 10007, .lo = -2, .hi = 2, .tol = EXACT},
    {"kth_smallest", run_kth_smallest, .count = 5003, .fill = TB_FILL_TIES, .tol = EXACT,
     .note = "many ties"},
    {"kth_smallest", run_kth_smallest, .count = 300000, .lo = 0, .hi = 1, .tol = EXACT,
     .note = "probabilities, threaded"},
    {"kth_smallest", run_kth_smallest, .count = 1, .tol = EXACT, .note = "one value"},
    {"argmax", run_argmax, .n = 2, .c = 5, .h = 97, .w = 1, .fill = TB_FILL_TIES, .tol = EXACT,
     .note = "ties: the first maximum wins"},
    {"argmax", run_argmax, .n = 4, .c = 7, .h = 23, .w = 19, .fill = TB_FILL_TIES, .tol = EXACT},
    {"argmax", run_argmax, .n = 1, .c = 21, .h = 40, .w = 40, .tol = EXACT},
    {"argmax", run_argmax, .n = 1, .c = 5, .h = 3, .w = 1, .in = argmax_hand,
     .want = argmax_hand_want, .nwant = 3, .tol = EXACT, .note = "hand: the first maximum wins"},
    {"argmax", run_argmax, .n = 3, .c = 3, .h = 17, .w = 13, .fill = TB_FILL_TIES, .tol = EXACT,
     .note = "NHWC: ties on 3 classes"},
    {"argmax", run_argmax, .n = 2, .c = 1, .h = 5, .w = 7, .tol = EXACT,
     .note = "one class: all 0"},
    {"confusion", run_confusion, .count = 8, .c = 5, .labels = conf_lab, .pred = conf_pred,
     .want = conf_inc, .nwant = 25, .tol = EXACT, .note = "hand"},
    {"confusion", run_confusion, .count = 1748, .c = 7, .tol = EXACT},
    {"confusion", run_confusion, .count = 10007, .c = 19, .tol = EXACT},
    {"confusion", run_confusion, .count = 54321, .c = 70, .tol = EXACT,
     .note = "c*c past CUDA's shared-memory histogram"},

    /* ---------------- test-time augmentation (inference only) ---------------- */
    {"flip_w", run_flip_w, .n = 1, .c = 1, .h = 2, .w = 3, .in = arange6, .want = flip_hand_want,
     .nwant = 6, .tol = EXACT, .note = "hand"},
    {"flip_w", run_flip_w, .n = 2, .c = 3, .h = 5, .w = 7, .tol = EXACT},
    {"flip_w", run_flip_w, .n = 1, .c = 19, .h = 64, .w = 97, .tol = EXACT, .note = "threaded"},
    {"flip_w", run_flip_w, .n = 3, .c = 2, .h = 4, .w = 1, .tol = EXACT, .note = "width 1"},
    {"flip_w", run_flip_w, .n = 2, .c = 67, .h = 9, .w = 13, .tol = EXACT,
     .note = "NHWC: odd c, threaded"},
    {"flip_w", run_flip_w, .n = 2, .c = 3, .h = 1, .w = 8, .tol = EXACT, .note = "NHWC: one row"},
    {"softmax_fwd", run_softmax_fwd, .n = 1, .c = 2, .h = 3, .w = 1, .in = softmax_hand,
     .want = softmax_hand_want, .nwant = 6, .want_tol = 1e-6, .tol = 1e-6,
     .note = "hand: ln 3, huge and equal logits"},
    {"softmax_fwd", run_softmax_fwd, .n = 2, .c = 5, .h = 9, .w = 7, .lo = -8, .hi = 8,
     .tol = 1e-6},
    {"softmax_fwd", run_softmax_fwd, .n = 2, .c = 5, .h = 9, .w = 7, .lo = -8, .hi = 8, .acc = 1,
     .tol = 1e-6},
    {"softmax_fwd", run_softmax_fwd, .n = 2, .c = 19, .h = 61, .w = 67, .lo = -20, .hi = 20,
     .acc = 1, .tol = 1e-6, .note = "threaded, partial last block"},
    {"softmax_fwd", run_softmax_fwd, .n = 1, .c = 1, .h = 5, .w = 3, .tol = 1e-6,
     .note = "one class: all ones"},
    {"softmax_fwd", run_softmax_fwd, .n = 2, .c = 3, .h = 7, .w = 5, .lo = -8, .hi = 8, .tol = 1e-6,
     .note = "NHWC: 3 classes"},
    {"softmax_fwd", run_softmax_fwd, .n = 2, .c = 67, .h = 23, .w = 29, .lo = -8, .hi = 8, .acc = 1,
     .tol = 1e-6, .note = "NHWC: odd c, threaded"},
    {"softmax_fwd", run_softmax_fwd, .n = 3, .c = 5, .h = 1, .w = 1, .lo = -8, .hi = 8, .tol = 1e-6,
     .note = "one pixel (both layouts the same bytes)"},

    /* ---------------- optimizer, input ---------------- */
    {"sgd_step", run_sgd_step, .count = 3, SGD(0.1f, 0.9f, 0, 1e-2f, 0, 1, 3), .in = sgd_p0,
     .in2 = sgd_g, .want = sgd_torch_wd, .nwant = 9, .want_tol = 8e-7, .tol = 1e-6,
     .note = "PyTorch values"},
    {"sgd_step", run_sgd_step, .count = 3, SGD(0.1f, 0.9f, 0, 1e-2f, 1, 1, 3), .in = sgd_p0,
     .in2 = sgd_g, .want = sgd_torch_nesterov, .nwant = 9, .want_tol = 8e-7, .tol = 1e-6,
     .note = "PyTorch values"},
    {"sgd_step", run_sgd_step, .count = 3, SGD(0.1f, 0.9f, 0.1f, 0, 0, 1, 3), .in = sgd_p0,
     .in2 = sgd_g, .want = sgd_torch_dampening, .nwant = 9, .want_tol = 8e-7, .tol = 1e-6,
     .note = "PyTorch values"},
    {"sgd_step", run_sgd_step, .count = 3, SGD(0.1f, 0, 0, 1e-4f, 0, 1, 3), .in = sgd_p0,
     .in2 = sgd_g, .want = sgd_torch_plain, .nwant = 9, .want_tol = 8e-7, .tol = 1e-6,
     .note = "PyTorch values"},
    {"sgd_step", run_sgd_step, .count = 70001, SGD(0.01f, 0.9f, 0, 1e-4f, 0, 1, 2), .tol = 1e-6,
     .note = "threaded"},
    {"sgd_step", run_sgd_step, .count = 4099, SGD(0.01f, 0.9f, 0, 1e-4f, 0, 0, 1), .tol = 1e-6},
    {"sgd_step", run_sgd_step, .count = 4099, SGD(0.01f, 0.9f, 0.1f, 0, 0, 0, 1), .tol = 1e-6},
    {"sgd_step", run_sgd_step, .count = 4099, SGD(0.01f, 0.9f, 0, 5e-4f, 1, 0, 1), .tol = 1e-6},
    {"sgd_step", run_sgd_step, .count = 4099, SGD(0.01f, 0, 0, 1e-4f, 0, 0, 1), .tol = 1e-6,
     .note = "momentum 0: no buffer (NULL)"},
    {"sgd_multi_step", run_sgd_multi_step, .count = 70001, SGD(0.01f, 0.9f, 0, 1e-4f, 0, 1, 3),
     .tol = 1e-6, .note = "first step, then two more; threaded"},
    {"sgd_multi_step", run_sgd_multi_step, .count = 5, SGD(0.1f, 0.9f, 0, 1e-2f, 1, 1, 2),
     .tol = 1e-6, .note = "nesterov"},
    {"sgd_multi_step", run_sgd_multi_step, .count = 5, SGD(0.1f, 0.9f, 0.1f, 0, 0, 0, 2),
     .tol = 1e-6, .note = "dampening, buffers already filled"},
    {"sgd_multi_step", run_sgd_multi_step, .count = 8193, SGD(0.01f, 0, 0, 1e-4f, 0, 0, 2),
     .tol = 1e-6, .note = "momentum 0: no buffers (NULL)"},
    {"adamw_multi_step", run_adamw_multi_step, .count = 70001,
     .adamw = {1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f, 3}, .tol = 1e-5,
     .note = "torch's defaults, three steps from zero moments; threaded"},
    {"adamw_multi_step", run_adamw_multi_step, .count = 5,
     .adamw = {1e-2f, 0.5f, 0.95f, 1e-6f, 0.05f, 4}, .tol = 1e-5,
     .note = "beta1 0.5: lerp's other formula (weight >= 0.5)"},
    {"adamw_multi_step", run_adamw_multi_step, .count = 8193,
     .adamw = {1e-3f, 0.9f, 0.999f, 1e-8f, 0, 2}, .tol = 1e-5, .note = "no weight decay"},
    {"normalize_u8", run_normalize_u8, .n = 2, .c = 3, .h = 5, .w = 7, .tol = 1e-6},
    {"normalize_u8", run_normalize_u8, .n = 4, .c = 3, .h = 17, .w = 13, .tol = 1e-6},
    {"normalize_u8", run_normalize_u8, .n = 1, .c = 3, .h = 1, .w = 1, .tol = 1e-6,
     .note = "one pixel"},
    {"normalize_u8", run_normalize_u8, .n = 1, .c = 3, .h = 256, .w = 257, .tol = 1e-6,
     .note = "threaded"},

    /* ---------------- gradients by finite differences ---------------- */
    GRAD_CONV(2, 3, 7, 6, 4, 3, 2, 1, 1, "stride 2, odd sizes"),
    GRAD_CONV(1, 2, 9, 8, 3, 3, 1, 2, 2, "dilation 2"),
    GRAD_CONV(1, 2, 5, 5, 2, 3, 1, 12, 12, "dilation 12 on 5x5: dead taps"),
    GRAD_CONV(1, 16, 5, 4, 16, 3, 1, 1, 1, "blocked layout under auto"),
    GRAD_CONV(3, 2, 5, 7, 3, 1, 2, 0, 1, "1x1 stride 2, batch 3"),
    GRAD_CONV_AT(TAPS, 1, 64, 5, 6, 16, 3, 1, 3, 3, "sparse dilated: per-tap GEMMs"),
    GRAD_CONV_G_AT("dw", 16, 1, 16, 7, 6, 16, 3, 2, 2, 2, "depthwise, stride 2, dilation 2"),
    GRAD_CONV_G(2, 2, 6, 5, 7, 4, 3, 1, 1, 1, "2 groups"),
    GRAD_CONV(2, 17, 5, 4, 9, 3, 2, 1, 1, "c = 17, k = 9: odd channel runs"),
    GRAD_CONV_G_AT("dw", 20, 1, 20, 6, 5, 20, 3, 1, 2, 2,
                   "depthwise dilated, c = 20: the direct backward"),
    GRAD_CONV_AT(TAPS, 1, 65, 5, 6, 17, 3, 1, 3, 3, "per-tap GEMMs, c = 65, k = 17"),
    {"grad_hardswish", run_grad_hardswish, .count = 97, .lo = -5, .hi = 5, .fd_h = 1e-3f,
     .tol = TOL_FD},
    {"grad_hardsigmoid", run_grad_hardsigmoid, .count = 97, .lo = -5, .hi = 5, .fd_h = 1e-3f,
     .tol = TOL_FD},
    {"grad_sigmoid", run_grad_sigmoid, .count = 97, .lo = -6, .hi = 6, .fd_h = 1e-3f,
     .tol = TOL_FD},
    {"grad_chan_scale", run_grad_chan_scale, .n = 2, .c = 3, .h = 4, .w = 5, .fd_h = 1e-2f,
     .tol = TOL_FD},
    {"grad_se", run_grad_se, .n = 2, .c = 8, .h = 5, .w = 4, .c_dst = 4, .fd_h = 1e-3f,
     .tol = TOL_FD, .note = "squeeze-excitation: avgpool, fc1, relu, fc2, hardsigmoid, scale"},
    {"grad_bn", run_grad_bn, .n = 2, .c = 3, .h = 10, .w = 1, .fd_h = 1e-3f, .tol = TOL_FD},
    {"grad_bn", run_grad_bn, .n = 2, .c = 3, .h = 10, .w = 1, .relu = 1, .fd_h = 1e-3f,
     .tol = TOL_FD},
    {"grad_bn", run_grad_bn, .n = 1, .c = 3, .h = 5, .w = 4, .relu = 1, .fd_h = 1e-3f,
     .tol = TOL_FD, .note = "batch 1"},
    {"grad_bn", run_grad_bn, .n = 2, .c = 5, .h = 3, .w = 3, .relu = 1, .fd_h = 1e-3f,
     .tol = TOL_FD, .note = "c odd (NHWC rows of 5 channels)"},
    {"grad_bn_res", run_grad_bn_res, .n = 2, .c = 3, .h = 10, .w = 1, .fd_h = 1e-3f, .tol = TOL_FD,
     .note = "bn + residual add + relu, fused"},
    {"grad_bn_res", run_grad_bn_res, .n = 1, .c = 2, .h = 5, .w = 4, .fd_h = 1e-3f, .tol = TOL_FD,
     .note = "fused, batch 1"},
    {"grad_bn_res", run_grad_bn_res, .n = 2, .c = 5, .h = 3, .w = 3, .fd_h = 1e-3f, .tol = TOL_FD,
     .note = "fused, c odd (NHWC rows of 5 channels)"},
    {"grad_relu", run_grad_relu, .count = 97, .fd_h = 1e-3f, .tol = TOL_FD},
    {"grad_add_relu", run_grad_add_relu, .count = 97, .fd_h = 1e-3f, .tol = TOL_FD},
    {"grad_dropout", run_grad_dropout, .count = 97, .p = 0.4f, .fd_h = 1e-2f, .tol = TOL_FD},
    {"grad_maxpool", run_grad_maxpool, .n = 2, .c = 2, .h = 7, .w = 6, .fill = TB_FILL_DISTINCT,
     .fd_h = 1e-3f, .tol = TOL_FD},
    {"grad_avgpool", run_grad_avgpool, .n = 2, .c = 2, .h = 7, .w = 6, .fill = TB_FILL_DISTINCT,
     .fd_h = 1e-2f, .tol = TOL_FD},
    {"grad_resize", run_grad_resize, RS(2, 2, 4, 5, 11, 13), .fill = TB_FILL_DISTINCT,
     .fd_h = 1e-2f, .tol = TOL_FD, .note = "up, odd"},
    {"grad_resize", run_grad_resize, RS(2, 2, 9, 8, 4, 3), .fill = TB_FILL_DISTINCT, .fd_h = 1e-2f,
     .tol = TOL_FD, .note = "down"},
    {"grad_concat", run_grad_concat, .n = 2, .c = 3, .h = 5, .w = 1, .c_dst = 7, .c_off = 2,
     .fd_h = 1e-2f, .tol = TOL_FD},
    {"grad_maxpool", run_grad_maxpool, .n = 2, .c = 5, .h = 5, .w = 7, .fill = TB_FILL_DISTINCT,
     .fd_h = 1e-3f, .tol = TOL_FD, .note = "NHWC: odd c"},
    {"grad_avgpool", run_grad_avgpool, .n = 2, .c = 5, .h = 3, .w = 5, .fill = TB_FILL_DISTINCT,
     .fd_h = 1e-2f, .tol = TOL_FD, .note = "NHWC: odd c"},
    {"grad_resize", run_grad_resize, RS(1, 3, 3, 4, 7, 5), .fill = TB_FILL_DISTINCT, .fd_h = 1e-2f,
     .tol = TOL_FD, .note = "NHWC: 3 channels"},
    {"grad_concat", run_grad_concat, .n = 2, .c = 1, .h = 3, .w = 4, .c_dst = 4, .c_off = 1,
     .fd_h = 1e-2f, .tol = TOL_FD, .note = "NHWC: one channel into 4"},
    {"grad_chan_scale", run_grad_chan_scale, .n = 2, .c = 5, .h = 3, .w = 3, .fd_h = 1e-2f,
     .tol = TOL_FD, .note = "NHWC: odd c"},
    {"grad_ce", run_grad_ce, .n = 2, .c = 4, .h = 9, .w = 1, .lo = -3, .hi = 3, .fd_h = 1e-2f,
     .tol = TOL_FD, .note = "every 5th pixel ignored"},
    {"grad_ce", run_grad_ce, .n = 2, .c = 5, .h = 3, .w = 3, .lo = -3, .hi = 3, .fd_h = 1e-2f,
     .tol = TOL_FD, .note = "NHWC: 5 classes on 3x3 planes"},
    {"grad_ce_weighted", run_grad_ce_weighted, .n = 2, .c = 4, .h = 9, .w = 1, .lo = -3, .hi = 3,
     .fd_h = 1e-2f, .tol = TOL_FD, .note = "class weights (one 0), every 5th ignored"},
    {"grad_ce_weighted", run_grad_ce_weighted, .n = 2, .c = 4, .h = 9, .w = 1, .lo = -3, .hi = 3,
     .p = 0.6f, .fd_h = 1e-2f, .tol = TOL_FD, .note = "weights and a selection"},
};

const int tb_ncases = (int)(sizeof tb_cases / sizeof tb_cases[0]);
