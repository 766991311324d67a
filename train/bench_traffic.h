/* train/bench_traffic.h - a model of the DRAM traffic and FLOPs of one
 * training step (`segtrain bench`, `segtrain bench --traffic`).
 *
 * A measuring aid of the benchmark, not part of training, so it lives with
 * the bench's code (train/bench_run.c and cmd/bench.c call it), not in
 * model/; it reads the model's private layer list (model/model_internal.h).
 *
 * For a model at batch n (per micro-batch, accum micro-batches per step) and
 * crop h x w, sg_bench_traffic walks the layer list with the shapes the plan
 * would give (no plan, no device memory) and counts, per phase (forward,
 * loss, backward, optimizer), the bytes every kernel pass reads and writes
 * under a named design of the storage and the kernels:
 *   nchw-f32          every activation and gradient float32 (the CPU's and
 *                     CUDA's fp32 training today); segtrain's kernels;
 *   nhwc-f32          the same bytes (the CPU with cpu.layout nhwc: only
 *                     where elements lie changes);
 *   cpu-bf16          the CPU under train.precision bf16: float32 but for
 *                     the tensors the plan stores as bf16 (model/model_plan.c
 *                     act_storage: conv outputs read by BN alone, BN+ReLU
 *                     outputs read by convs alone); oneDNN's own internal
 *                     conversions are not modelled;
 *   cuda-bf16-convert CUDA under bf16 with layout NCHW (kernels/cuda/
 *                     cuda_conv.cu): the storage of cpu-bf16, and every
 *                     convolution copies its operands to bf16 NHWC (a
 *                     transpose, rounding a float32 one) and its result back;
 *   cuda-bf16-nhwc    CUDA under bf16 with layout NHWC, as built: the same
 *                     storage; cuDNN reads and writes a bf16-stored
 *                     activation itself, a float32 operand (every gradient:
 *                     dy once for each backward pass) is rounded to a bf16
 *                     copy and a float32 result (dx, added when
 *                     accumulating) widened from one;
 *                     both cuda rows take every byte from the plan's storage
 *                     decisions (sg_model_shapes, sg_tensor_act_esize,
 *                     sg_tensor_grad_esize), none from a table, and their
 *                     conversions equal the CUDA backend's own count
 *                     (sg_backend_info.convert_bytes;
 *                     tests/train/test_emu_convert.c);
 *   nhwc-bf16         a target, not built: activations and their gradients
 *                     bf16 NHWC end to end, no conversions; BN statistics and
 *                     parameters, the loss math, weight gradients, master
 *                     weights and the optimizer float32;
 *   torch-amp         PyTorch AMP channels_last on CUDA as its kernels run
 *                     (cuDNN bf16 convs, native BN kernels, separate ReLU and
 *                     add kernels, autograd's gradient sums, foreach SGD).
 * Rules: every kernel pass reads each input once and writes each output
 * once (no cache reuse between kernels); a conv reads its weight once per
 * call; per-channel vectors (BN statistics, parameters) are counted too.
 * FLOPs are 2 x the multiply-adds of every convolution pass (forward, the
 * data gradient where the input needs one - not the first conv's - and the
 * weight gradient where the weight trains); elementwise, BN, pooling, the
 * loss and the optimizer count 0 FLOPs. Bytes of the data phase (upload,
 * normalize) and of communication are not modelled.
 */
#ifndef SG_TRAIN_BENCH_TRAFFIC_H
#define SG_TRAIN_BENCH_TRAFFIC_H

#include "model/model.h"

typedef enum {
    SG_TR_NCHW_F32 = 0,
    SG_TR_NHWC_F32,
    SG_TR_CPU_BF16,
    SG_TR_CUDA_BF16_CONVERT,
    SG_TR_CUDA_BF16_NHWC,
    SG_TR_NHWC_BF16,
    SG_TR_TORCH_AMP,
    SG_TR_N_DESIGNS
} sg_traffic_design;

/* The step's phases that are modelled (the bench's forward, loss, backward
 * and optimizer phases). */
enum { SG_TR_FWD = 0, SG_TR_LOSS, SG_TR_BWD, SG_TR_OPT, SG_TR_N_PHASES };

/* Where the bytes go: the convolution kernels themselves (with their bias
 * passes), the float32 -> bf16 copy of the conv weights once per step,
 * layout / precision conversions of activations and gradients (around
 * CUDA's bf16 convs; PyTorch's autocast casts of the weight gradients and
 * the loss), batch norm (with segtrain's fused ReLU and residual join),
 * every other layer (elementwise, pooling, resize, concat, dropout, gates,
 * PyTorch's separate ReLU / add kernels and autograd's gradient sums), the
 * loss, the optimizer. */
enum {
    SG_TRC_CONV = 0,
    SG_TRC_WCAST,
    SG_TRC_CONVERT,
    SG_TRC_BN,
    SG_TRC_ELEM,
    SG_TRC_LOSS,
    SG_TRC_OPT,
    SG_TRC_N
};

typedef struct sg_traffic_cost {
    double read, write; /* bytes */
    double flops;
} sg_traffic_cost;

typedef struct sg_traffic {
    sg_traffic_cost ph[SG_TR_N_PHASES];
    double cat[SG_TRC_N]; /* bytes read + written by class, summed over phases */
} sg_traffic;

/* "nchw-f32", "nhwc-f32", "cpu-bf16", "cuda-bf16-convert", "cuda-bf16-nhwc",
 * "nhwc-bf16", "torch-amp"; NULL out of range. */
const char *sg_traffic_design_name(int design);
/* What a design stores, in a few words; NULL out of range. */
const char *sg_traffic_design_about(int design);
/* The design of that name, or -1. */
int sg_traffic_design_from_name(const char *name);
/* "forward", "loss", "backward", "optimizer". */
const char *sg_traffic_phase_name(int phase);
/* "conv", "weight copy", "convert", "bn", "elementwise", "loss", "optimizer". */
const char *sg_traffic_class_name(int cls);

/* The model of one training step of m (planned or not; not changed) under
 * design at batch n per micro-batch, accum (>= 1) micro-batches, crop h x w:
 * forward, loss and backward run accum times (weight gradients accumulated
 * after the first), the optimizer once. per_layer: NULL, or m's layer count
 * entries, each the forward and backward cost of that layer (what the
 * runner does at that layer: a fused BN's apply and backward at its join);
 * the totals are the layers' sum plus the loss and optimizer phases.
 * Returns SG_OK, or SG_ERR_CONFIG (logged) when the input is too small for
 * the network. An unknown layer kind is a fatal internal error. */
sg_status sg_bench_traffic(const sg_model *m, int design, int n, int accum, int h, int w,
                           sg_traffic *out, sg_traffic *per_layer);

/* The sums of a result: bytes read + written over all phases, and FLOPs. */
double sg_traffic_bytes(const sg_traffic *t);
double sg_traffic_flops(const sg_traffic *t);

#endif
