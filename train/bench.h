/* train/bench.h - the benchmark's measurement core (`segtrain bench`).
 *
 * sg_bench_run builds the training job a config describes (backend,
 * communicator, model, DDP, SGD: sg_train_core_setup) and runs real training
 * steps on it: forward, CE(out) + aux_weight * CE(aux), backward, gradient
 * all-reduce, SGD step, the trainer's own step (sg_train_step, see
 * train/train_core.h) at the constant train.lr. Batches
 * are synthetic and held in host memory (uploaded and normalized every step,
 * as the trainer does) or come from the configured loader (with_data).
 *
 * Per timed step it records the wall time of each phase:
 *   data      loader wait + upload + normalize_u8 (synthetic: upload + normalize)
 *   forward   sg_model_forward
 *   loss      ce_fwd_bwd for the main and aux heads (writes dlogits)
 *   backward  sg_model_backward
 *   comm      count/loss all-reduces + sg_ddp_wait (gradient all-reduce not
 *             hidden behind backward); ~0 in a world of 1
 *   optimizer sg_sgd_step
 * With split = 1 the backend is synchronised at every phase boundary (free
 * on the CPU, whose ops are synchronous; on the GPU it removes some
 * overlap, so split = 0 times whole steps with one sync at the step end).
 *
 * With profile = 1 (needs split) the model times every layer as well
 * (model/model_profile.h: the backend synchronised at each mark) and the
 * result holds the step by op class and the convolutions by pass and shape
 * (sg_bench_profile, bench_profile.c); the losses are unchanged.
 *
 * It also measures the device's peak FLOP/s with the backend's own conv op on
 * a compute-bound 3x3 convolution (see sg_bench_conv_peak), unless a peak is
 * stated; in the configured train.precision (bf16: the bf16 kernels' peak),
 * which the result reports with how the backend runs its convolutions.
 *
 * The result also holds the modelled DRAM bytes and FLOPs of the step
 * (train/bench_traffic.h) under the design that matches the run
 * (sg_bench_traffic_design), so cmd/bench.c prints achieved GB/s and
 * FLOP/s per phase beside the measured times. Owns nothing after it
 * returns; cmd/bench.c prints and writes JSON.
 */
#ifndef SG_TRAIN_BENCH_H
#define SG_TRAIN_BENCH_H

#include <stddef.h>

#include "core/config.h"
#include "core/status.h"
#include "kernels/backend.h"
#include "train/bench_traffic.h"
#include "train/train_core.h" /* the phases SG_PH_* */

extern const char *const sg_bench_phase_names[SG_PH_N];

typedef struct sg_bench_opts {
    int iters;          /* timed steps (>= 1) */
    int warmup;         /* untimed steps first (>= 0) */
    int with_data;      /* 1: the configured loader, 0: synthetic batches */
    int split;          /* 1: per-phase timing (sync at phase boundaries) */
    double peak_gflops; /* > 0: stated peak per device; 0: measure; < 0: skip */
    int profile;        /* 1: per-layer timing, the step by op class (needs split) */
} sg_bench_opts;

/* --profile: one row of the step's breakdown, per step (the mean over the
 * timed steps). */
typedef struct sg_bench_prof_row {
    char cls[40];      /* op class: "<layer kind> <pass>" ("conv fwd", "conv bwd data",
                          "conv bwd weight", "bn fwd stats", "bn fwd", "bn bwd reduce",
                          "bn bwd", "add_relu fwd", "resize bwd", ...; ReLU is fused
                          into bn and add_relu), or a step phase outside the model:
                          "loss", "optimizer", "ddp", "data", and "other" (forward and
                          backward time outside every layer: the syncs and clocks) */
    char geom[64];     /* conv rows: "KHxKW sS dD CIN->COUT HxW" (input size; " gG"
                          when grouped); "" in class rows */
    double ms, cpu_ms; /* wall and process CPU (all threads) ms per step */
    double calls;      /* per step */
    double gflop;      /* conv rows and classes: 2 x multiply-adds per step (each of
                          fwd, bwd data, bwd weight counts as one forward); else 0 */
} sg_bench_prof_row;

/* The step by op class, and the convolutions by pass and shape. With the
 * backend synchronised at every mark the rows add up to the step: classes
 * sum to the step's phases, and the step less its phases is in neither. */
typedef struct sg_bench_profile {
    sg_bench_prof_row *cls; /* op classes, slowest first */
    int n_cls;
    sg_bench_prof_row *conv; /* one row per (pass, geometry), slowest first */
    int n_conv;
    double step_ms;   /* the mean timed step */
    double layers_ms; /* the model's layers (forward + backward) */
    char kinds[160];  /* the model's layer kinds, space-separated */
} sg_bench_profile;

typedef struct sg_bench_result {
    int rank, world, threads;
    char backend[32], device[128];
    char precision[8];   /* train.precision as the backend runs it: fp32 | bf16 */
    char conv_math[160]; /* how its convolutions run (path, ISA / TF32) */
    char layout[8];      /* how activations are stored: nchw | nhwc */
    int batch, accum, crop_h, crop_w;
    double *step_s;               /* [iters] wall seconds per timed step */
    double *cpu_s;                /* [iters] process CPU seconds (all threads) per step:
                                     on a shared machine, cpu_s / threads bounds the
                                     uncontended wall time from below */
    double *minflt;               /* [iters] minor page faults per step (fresh memory
                                     touched: should be ~0 once warm) */
    double *phase_s[SG_PH_N];     /* [iters] seconds per phase (split only) */
    double *phase_cpu_s[SG_PH_N]; /* [iters] process CPU seconds per phase (split only;
                                     includes OpenMP spin-waiting unless
                                     OMP_WAIT_POLICY=passive) */
    int iters;
    double flops_fwd_image; /* model forward FLOPs per image (2 x MACs) */
    double flops_step;      /* 3 x forward x images per rank per step */
    double peak_gflops;     /* per device; 0 if not measured */
    char peak_source[160];
    double loss_first, loss_last; /* total loss of the first and last step */
    double peak_rss_mib;          /* host, whole process (getrusage) */
    double device_peak_mib;       /* backend allocations high-water mark */
    double activation_mib;        /* the model's planned arena */
    size_t params;
    /* The training thread's collectives over the timed steps (dist/comm.h
     * sg_comm_stats), per step: SyncBN's time and collectives, how many of
     * those were only enqueued (NCCL), sleeps in a poll loop, waits for
     * enqueued collectives; and the convolution plan cache
     * (kernels/conv_plans.h; CUDA, else 0) since the backend opened. */
    double syncbn_ms_per_step, syncbn_share; /* share: SyncBN time / step time */
    double syncbn_calls_per_step, syncbn_queued_per_step, poll_sleeps_per_step;
    double flushes_per_step;
    long conv_plan_hits, conv_plan_misses, conv_plan_loaded;
    /* activation layout transposes the backend launched since it opened
     * (sg_backend_info.act_transposes: CUDA bf16 under NCHW; 0 under NHWC) */
    long act_transposes;
    /* graphs recorded and launched since the backend opened
     * (sg_backend_info.graph_*: cuda.graphs on CUDA; 0 elsewhere) */
    long graph_captures, graph_launches;
    sg_bench_profile prof; /* --profile only (else zero) */
    int traffic_design;    /* SG_TR_*: the design of this run (sg_bench_traffic_design) */
    sg_traffic traffic;    /* the modelled step (batch x accum, crop); zero if it failed */
} sg_bench_result;

/* The traffic design (train/bench_traffic.h) a run on this backend follows:
 * CUDA under bf16 -> cuda-bf16-convert with NCHW activations (the
 * transposes around cuDNN), cuda-bf16-nhwc with NHWC ones (the roundings
 * of float32 operands); bf16 on the CPU -> cpu-bf16 (the bf16 activation
 * storage; oneDNN's own conversions are not modelled); float32 with NHWC
 * activations -> nhwc-f32; else nchw-f32. backend: sg_backend_info.name;
 * precision "fp32" | "bf16"; layout SG_LAYOUT_*. */
int sg_bench_traffic_design(const char *backend, const char *precision, int layout);

/* Runs the benchmark. Returns SG_OK, SG_ERR_RUNTIME or SG_ERR_CONFIG
 * (logged). r is filled on SG_OK; free with sg_bench_result_free. */
sg_status sg_bench_run(const sg_config *cfg, const sg_bench_opts *o, sg_bench_result *r);
void sg_bench_result_free(sg_bench_result *r);

/* Measured peak FLOP/s of be's conv_fwd on a compute-bound 3x3 convolution
 * (c = k = 256, 64x64 spatial, batch 1 on the CPU and 16 on a GPU): the best
 * of repetitions filling ~0.3 s. Writes a description of the shape to src. */
double sg_bench_conv_peak(sg_backend *be, char *src, size_t src_cap);

/* bench_profile.c: r->prof from the model's per-layer totals (profiling on,
 * reset after warmup) over r->iters steps and r's phase times. */
void sg_bench_profile_collect(const sg_model *m, sg_bench_result *r);
void sg_bench_profile_free(sg_bench_profile *p);

/* Summary helpers over n values (n >= 1; v is not modified). */
double sg_bench_median(const double *v, int n);
double sg_bench_mean(const double *v, int n);
double sg_bench_stdev(const double *v, int n); /* sample stdev, 0 for n = 1 */
double sg_bench_min(const double *v, int n);
double sg_bench_max(const double *v, int n);

#endif
