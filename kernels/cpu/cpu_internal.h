/* kernels/cpu/cpu_internal.h - private state and helpers shared by the CPU
 * backend's files (not a public header).
 *
 * The CPU backend keeps host memory (64-byte aligned, counted for
 * get_info), the OpenMP thread count, and the oneDNN engine/stream with the
 * convolution paths and their caches (conv/).
 *
 * The ops are split into the same groups as the conformance suite's runners
 * (tests/backend/run_<group>.c) and as the CUDA backend (cuda_internal.h):
 * each file implements one group, or one part of it, and fills its entries
 * of the op table through its sg_cpu_fill_<file>_ops(); cpu_backend.c calls
 * every fill function and sg_backend_create checks that none left an op
 * NULL.
 *
 *   group     ops                                        CPU file(s)
 *   (backend) destroy get_info                           cpu_backend.c
 *   memory    alloc free upload download copy zero sync  cpu_memory.c
 *             host_alloc host_free upload_async
 *             upload_wait stream stream_wait bind_thread
 *             mem_written (run_memory.c, run_weights.c)
 *             graph_begin graph_end graph_launch
 *             graph_free (fatal: no SG_CAP_GRAPHS)
 *   conv      conv_prepare conv_fwd conv_bwd_data        conv/ops.c (+ the rest of
 *             conv_bwd_weight                              conv/: the path table and
 *                                                          its paths, which fill
 *                                                          nothing; conv_internal.h)
 *             bias_fwd bias_bwd                          cpu_conv_bias.c
 *   bn        bn_stats bn_finalize bn_eval_params bn_fwd cpu_bn.c
 *             bn_bwd_reduce bn_bwd_elem bn_param_grads
 *   elem      relu_fwd relu_bwd add scale axpy           cpu_elem.c
 *             set_step_key dropout_fwd dropout_bwd
 *             sgd_step normalize_u8 sumsq
 *   optim     sgd_multi_plan sgd_multi_step              cpu_optim.c
 *             sgd_multi_free adamw_multi_plan
 *             adamw_multi_step adamw_multi_free
 *   gate      hardswish_* hardsigmoid_* sigmoid_*        cpu_gate.c
 *             chan_scale_fwd chan_scale_bwd
 *   pool      maxpool_* avgpool_* resize_* concat_*      cpu_pool.c
 *   loss      ce_fwd_bwd ce_weighted ce_label_prob       cpu_loss.c
 *             kth_smallest argmax confusion
 *   tta       flip_w softmax_fwd                         cpu_tta.c
 *   act_bf16  conv_fwd_dt conv_bwd_weight_dt conv_bwd_dt cpu_act_bf16.c
 *             bn_stats_dt bn_fwd_dt bn_bwd_reduce_dt     cpu_bn.c (the float32 BN's
 *             bn_bwd_elem_dt                               kernels on widened planes)
 *   (helpers) bf16 rounding / widening, no ops           cpu_bf16.c
 *
 * Calls between the files go one way only (no loops): cpu_backend.c calls
 * the others and none calls it; cpu_optim.c -> cpu_elem.c
 * (sg_cpu_sgd_span); cpu_act_bf16.c -> conv/ops.c
 * (sg_cpu_conv_native_dt); inside conv/ calls go down the list of
 * conv/conv_internal.h, and conv/ -> cpu_elem.c (sg_cpu_add_into); every op
 * file may call cpu_memory.c and cpu_bf16.c, which call no other file of
 * the backend. kernels/backend.c calls sg_cpu_backend_create and
 * sg_cpu_preferred_layout only, and nothing here calls kernels/backend.c
 * (sg_conv_desc_init is inline in backend.h).
 */
#ifndef SG_KERNELS_CPU_INTERNAL_H
#define SG_KERNELS_CPU_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/backend.h"

/* sg_cpu.act_buf's slots */
#define SG_CPU_ACT_BUFS 4

typedef struct sg_cpu_conv_cache sg_cpu_conv_cache; /* conv/conv_internal.h */

typedef struct sg_cpu {
    int threads;
    size_t mem_in_use, mem_peak; /* updated atomically */
    sg_cpu_conv_cache *conv;
    /* bf16 only (NULL under fp32): the convolutions' bf16 weight copies
     * (kernels/weight_cache.h). Every op that writes memory tells it
     * (sg_cpu_written) so no copy is ever stale. */
    struct sg_wcache *wcache;
    /* Scratch of the ops, through sg_cpu_act_buf: under bf16 activation
     * storage (the *_dt ops of cpu_act_bf16.c and cpu_bn.c) float32 copies
     * of a bf16 input and a float32 result before it is stored as bf16;
     * in NHWC also cpu_bn.c's per-channel coefficients and partial sums
     * (slot 1) and cpu_loss.c's class-major blocks (slot 0); slots 2 and 3:
     * a bf16-stored gradient's float32 copy (dy widened, slot 2) and a
     * float32 result before it is stored as a bf16 gradient (dx, slot 3).
     * Grow to the largest size asked (the first time a shape is seen),
     * never shrink. */
    void *act_buf[SG_CPU_ACT_BUFS];
    size_t act_bytes[SG_CPU_ACT_BUFS];
    /* set_step_key's key, read by dropout_fwd (cpu_elem.c) */
    uint64_t step_key;
} sg_cpu;

static inline sg_cpu *sg_cpu_of(sg_backend *be) { return (sg_cpu *)be->impl; }

/* cpu_memory.c: 64-byte aligned host memory, zeroed; fatal (with the size)
 * on failure. */
void *sg_cpu_aligned_alloc(size_t bytes);
void sg_cpu_aligned_free(void *p);
/* cpu_memory.c: the backend's float32 buffer `slot` (0..3) of at least
 * count floats (grows, never shrinks; shared by the *_dt ops, which never
 * run at the same time), and freeing both (destroy). */
float *sg_cpu_act_buf(sg_backend *be, int slot, size_t count);
void sg_cpu_act_buf_free(sg_cpu *c);
/* cpu_memory.c: memory [p, p + bytes) of be was written by an op (p NULL:
 * any): marks the bf16 weight copies made from it stale
 * (kernels/weight_cache.h). Every op that may write weights calls it:
 * upload, copy, zero, scale, axpy, sgd_step, sgd_multi_step, adamw_multi_step,
 * mem_written. */
void sg_cpu_written(sg_backend *be, const void *p, size_t bytes);

/* Conv cache lifetime (conv/ops.c). precision: SG_PRECISION_* (backend.h);
 * for bf16 it picks oneDNN's native bf16 primitives or the exact emulation
 * (SG_CPU_BF16=auto|native|emulated, default auto: native when oneDNN's
 * effective ISA has bf16 instructions) and logs the choice once. Returns NULL
 * after logging when SG_CPU_BF16 is malformed or asks for native bf16 on a
 * processor without it; other failures are fatal. */
sg_cpu_conv_cache *sg_cpu_conv_create(int threads, int precision);
void sg_cpu_conv_destroy(sg_cpu_conv_cache *cc);
/* The precision ("fp32" | "bf16") and how convolutions run, in words (for
 * get_info: path and oneDNN ISA). */
void sg_cpu_conv_describe(const sg_cpu_conv_cache *cc, char *precision, size_t precision_cap,
                          char *math, size_t math_cap);

/* Native bf16 convolutions over bf16-stored activations (conv/ops.c):
 * forward (fwd = 1: x, w -> y) or backward-weights (fwd = 0: x, dy -> dw,
 * accumulate) with x stored as xdt and (forward) y as ydt (SG_ACT_*),
 * on the row of the path table that takes it, which reads and writes those
 * types itself. Returns 1 when it ran; 0 (nothing done) where that row is
 * the emulation (emulated bf16, fp32, or a geometry oneDNN lacks a bf16
 * kernel for): the caller converts instead. */
int sg_cpu_conv_native_dt(sg_backend *be, const sg_conv_desc *d, int fwd, const void *x, int xdt,
                          const float *in1, void *out, int ydt, int accumulate);

/* conv_bwd_dt's shared path (conv/ops.c): where native bf16 runs both
 * backward passes of d on bf16 GEMM rows (conv/native.c), dy is rounded to bf16
 * once and both run on it - the values each pass would round it to, so the
 * results of the two ops. Returns 0 (nothing done) otherwise. */
int sg_cpu_conv_native_bwd(sg_backend *be, const sg_conv_desc *d, const void *x, int xdt,
                           const float *dy, const float *w, float *dw, int acc_w, float *dx,
                           int acc_x);

/* The float32 forward (fwd 1: in1 = w, out = y) or backward-weights pass
 * (fwd 0: in1 = dy, out = dw) of conv/ops.c, for the *_dt ops' converting
 * path: called directly, not through be->ops, which a caller may have
 * wrapped (a counting or profiling table would see one conv twice). */
void sg_cpu_conv_f32(sg_backend *be, const sg_conv_desc *d, int fwd, const float *x,
                     const float *in1, float *out, int accumulate);
/* The float32 backward-data pass of conv/ops.c (dy, w -> dx), called
 * directly for the same reason. */
void sg_cpu_conv_bwd_data_f32(sg_backend *be, const sg_conv_desc *d, const float *dy,
                              const float *w, float *dx, int accumulate);

/* Whether oneDNN runs AVX-512 code here (conv/ops.c; the path table's
 * isa column, cpu.layout auto). */
int sg_cpu_avx512(void);
/* The layout cpu.layout auto picks (cpu_backend.c; kernels/backend.c's
 * sg_backend_cpu_preferred_layout), with the reason in words. */
int sg_cpu_preferred_layout(int precision, const char **why);

/* Introspection for tests: primitives cached and bytes of the shared conv
 * workspaces (neither changes once every shape has been seen). */
void sg_cpu_conv_stats(sg_backend *be, int *entries, size_t *workspace_bytes);

/* Each file of an op group fills its entries of the table (see the table
 * above). */
void sg_cpu_fill_memory_ops(sg_ops *ops);    /* cpu_memory.c */
void sg_cpu_fill_conv_ops(sg_ops *ops);      /* conv/ops.c */
void sg_cpu_fill_conv_bias_ops(sg_ops *ops); /* cpu_conv_bias.c */
void sg_cpu_fill_bn_ops(sg_ops *ops);        /* cpu_bn.c */
void sg_cpu_fill_elem_ops(sg_ops *ops);      /* cpu_elem.c */
void sg_cpu_fill_gate_ops(sg_ops *ops);      /* cpu_gate.c */
void sg_cpu_fill_pool_ops(sg_ops *ops);      /* cpu_pool.c */
void sg_cpu_fill_loss_ops(sg_ops *ops);      /* cpu_loss.c */
void sg_cpu_fill_tta_ops(sg_ops *ops);       /* cpu_tta.c */
void sg_cpu_fill_act_bf16_ops(sg_ops *ops);  /* cpu_act_bf16.c */
void sg_cpu_fill_optim_ops(sg_ops *ops);     /* cpu_optim.c */

/* cpu_elem.c: sgd_step's update of n values on the calling thread (buf
 * NULL: no momentum; damp1 = sg_sgd_damp1(dampening)), for sgd_multi_step
 * (cpu_optim.c), which splits every tensor into SG_CPU_SGD_CHUNK pieces as
 * sgd_step does. */
void sg_cpu_sgd_span(float *param, const float *grad, float *buf, size_t n, float lr,
                     float momentum, float damp1, float wd, int nesterov, int first);
#define SG_CPU_SGD_CHUNK 16384
/* cpu_elem.c: dst (+)= src, count floats, threaded. */
void sg_cpu_add_into(float *dst, const float *src, size_t count);
/* cpu_bf16.c: dst = bf16(src) (dst may be src), dst += bf16(src); threaded,
 * round-to-nearest-even (kernels/formulas/bf16.h). */
void sg_cpu_bf16_round(float *dst, const float *src, size_t count);
void sg_cpu_bf16_round_add(float *dst, const float *src, size_t count);
/* cpu_bf16.c: dst = the floats the bf16 bits src stand for (exact);
 * dst = src rounded to bf16 bits (round-to-nearest-even). Threaded. */
void sg_cpu_bf16_widen(float *dst, const uint16_t *src, size_t count);
void sg_cpu_bf16_narrow(uint16_t *dst, const float *src, size_t count);

/* Function multiversioning for hot per-plane loops: one copy per ISA level,
 * chosen at load time, so a portable build still runs 512-bit vectors on
 * AVX-512 machines. GCC on x86-64 only; elsewhere a no-op. Not under TSan:
 * its instrumented ifunc resolvers run before its runtime and crash. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__CUDACC__) && \
    !defined(__SANITIZE_THREAD__)
#define SG_CPU_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define SG_CPU_CLONES
#endif

/* OpenMP parallel-for only when the work is worth waking the threads: one
 * core streams 64K floats in ~10-20 us, while a fork/join costs a few us on
 * an idle machine and up to a scheduler time slice on a busy one. */
#define SG_CPU_PAR_MIN 65536

#endif
