/* train/bench_run.c - the benchmark's timed training steps (see train/bench.h).
 *
 * The job and the step are the trainer's own (train/train_core.h:
 * sg_train_core_setup, sg_train_step); this file adds only what is the
 * benchmark's: synthetic batches or --with-data fetching, the phase clock
 * (sg_train_step's phase hook), per-step statistics and the result; with
 * --profile the model's per-layer timing over the timed steps
 * (bench_profile.c turns it into the breakdown). */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "core/log.h"
#include "core/util.h"
#include "data/dataset.h"
#include "data/formats.h"
#include "data/loader.h"
#include "data/sampler.h"
#include "dist/comm.h"
#include "kernels/rng.h"
#include "model/model.h"
#include "model/model_profile.h"
#include "train/bench.h"
#include "train/train_core.h"

const char *const sg_bench_phase_names[SG_PH_N] = {"data",     "forward", "loss",
                                                   "backward", "comm",    "optimizer"};

static double cpu_now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

typedef struct bench {
    const sg_config *cfg;
    const sg_bench_opts *o;
    sg_train_core c; /* the trainer's job: backend, model, DDP, slots */
    /* data */
    sg_dataset *ds;
    sg_loader *loader;
    sg_sampler sampler;
    int64_t *idx;
    int64_t epoch;
    uint8_t **h_img, **h_lab; /* synthetic: K host batches */
    int64_t *h_valid;
    /* the phase clock */
    double t_mark, c_mark;
    double ph[SG_PH_N], phc[SG_PH_N];
} bench;

/* Closes the running phase: its time goes to phase p. With split timing the
 * backend is synchronised first so asynchronous work lands in its phase. */
static void mark(void *ctx, int p) {
    bench *b = ctx;
    if (b->o->split) b->c.be->ops->sync(b->c.be);
    double t = sg_now_s(), c = cpu_now_s();
    b->ph[p] += t - b->t_mark;
    b->phc[p] += c - b->c_mark;
    b->t_mark = t;
    b->c_mark = c;
}

/* Synthetic batch k: uniform random pixels, random labels in [0, C) with the
 * top eighth of every image ignored (as in scripts/bench_torch.py: real masks
 * have ignored pixels). Deterministic from the seed and the rank. */
static void make_synthetic(bench *b, int k) {
    int H = b->c.crop_h, W = b->c.crop_w;
    size_t px = (size_t)b->c.B * H * W;
    uint64_t key = sg_rng_key((uint64_t)b->cfg->seed, 0x42454E43ull /* "BENC" */, (uint64_t)k,
                              (uint64_t)b->c.rank, SG_RNG_SYNTH);
    uint8_t *img = b->h_img[k], *lab = b->h_lab[k];
    for (size_t i = 0; i < px * 3; i++) img[i] = (uint8_t)(sg_rng_u64(key, i) >> 56);
    int64_t valid = 0;
    int ignore_rows = H / 8;
    for (size_t i = 0; i < px; i++) {
        int row = (int)((i / (size_t)W) % (size_t)H);
        if (row < ignore_rows) {
            lab[i] = (uint8_t)b->cfg->data.ignore_index;
        } else {
            lab[i] = (uint8_t)(sg_rng_u64(key, px * 3 + i) % (uint64_t)b->c.C);
            valid++;
        }
    }
    b->h_valid[k] = valid;
}

/* SG_OK or SG_ERR_RUNTIME (logged). */
static sg_status start_list(bench *b) {
    int B = b->c.B;
    int64_t n = sg_sampler_rank_indices(&b->sampler, b->epoch, b->c.rank, 0, b->idx);
    if (n < 0) {
        SG_ERROR("bench --with-data: rank %d has no sample list (internal error)", b->c.rank);
        return SG_ERR_RUNTIME;
    }
    int64_t use = n / B * B; /* whole batches only: every step has the same shape */
    if (use == 0) {
        SG_ERROR("bench --with-data: %s has %lld samples for this rank, fewer than "
                 "train.batch_size %d; lower the batch size or use synthetic data (no "
                 "--with-data)",
                 sg_format_split(&b->cfg->data, 0), (long long)n, B);
        return SG_ERR_RUNTIME;
    }
    return sg_loader_start(b->loader, b->idx, use, b->epoch);
}

/* Synthetic: K host batches made once. --with-data: the trainer's loader
 * over data.train_split. */
static sg_status setup_data(bench *b) {
    const sg_config *cfg = b->cfg;
    sg_backend *be = b->c.be;
    int K = b->c.K;
    size_t px = (size_t)b->c.B * b->c.crop_h * b->c.crop_w;
    if (!b->o->with_data) {
        b->h_img = calloc((size_t)K, sizeof *b->h_img);
        b->h_lab = calloc((size_t)K, sizeof *b->h_lab);
        b->h_valid = calloc((size_t)K, sizeof *b->h_valid);
        SG_CHECK(b->h_img && b->h_lab && b->h_valid, "out of host memory");
        for (int k = 0; k < K; k++) {
            b->h_img[k] = be->ops->host_alloc(be, px * 3);
            b->h_lab[k] = be->ops->host_alloc(be, px);
            make_synthetic(b, k);
        }
        return SG_OK;
    }
    if (!cfg->data.train_split[0]) {
        SG_ERROR("bench --with-data: data.train_split is empty; set it (and data.root) or "
                 "drop --with-data to use synthetic batches");
        return SG_ERR_CONFIG;
    }
    b->ds = sg_dataset_open(&cfg->data, sg_format_split(&cfg->data, 0), b->c.C);
    if (!b->ds) return SG_ERR_RUNTIME;
    int64_t N = sg_dataset_size(b->ds);
    b->sampler = (sg_sampler){N, b->c.world, cfg->data.shuffle, 1, (uint64_t)cfg->seed};
    b->idx = malloc((size_t)(N > 0 ? N : 1) * sizeof(int64_t));
    SG_CHECK(b->idx != NULL, "out of host memory");
    b->loader = sg_train_core_loader(&b->c, b->ds);
    if (!b->loader) return SG_ERR_RUNTIME;
    return start_list(b);
}

static void teardown(bench *b) {
    sg_backend *be = b->c.be;
    if (b->h_img)
        for (int k = 0; k < b->c.K; k++) {
            if (b->h_img[k]) be->ops->host_free(be, b->h_img[k]);
            if (b->h_lab[k]) be->ops->host_free(be, b->h_lab[k]);
        }
    free(b->h_img);
    free(b->h_lab);
    free(b->h_valid);
    free(b->idx);
    sg_loader_destroy(b->loader);
    sg_dataset_close(b->ds);
    sg_train_core_close(&b->c);
}

/* The step's K micro-batches onto the device (phase: data). SG_OK or
 * SG_ERR_RUNTIME (logged). */
static sg_status fetch(bench *b) {
    sg_train_core *c = &b->c;
    const sg_ops *ops = c->be->ops;
    size_t px = (size_t)c->B * c->crop_h * c->crop_w;
    for (int k = 0; k < c->K; k++) {
        sg_micro_batch *mb = &c->slot[k];
        mb->h = c->crop_h;
        mb->w = c->crop_w;
        if (!b->o->with_data) {
            ops->upload(c->be, mb->img, b->h_img[k], px * 3);
            ops->upload(c->be, mb->lab, b->h_lab[k], px);
            mb->n = c->B;
            mb->valid = b->h_valid[k];
            continue;
        }
        sg_batch *bt = NULL;
        int r = sg_loader_next(b->loader, &bt);
        if (r < 0) return SG_ERR_RUNTIME;
        if (r == 0) { /* end of the list: the next epoch */
            b->epoch++;
            if (start_list(b) != SG_OK) return SG_ERR_RUNTIME;
            k--;
            continue;
        }
        size_t bpx = (size_t)bt->n * bt->h * bt->w;
        if (bt->n != c->B || bt->h != c->crop_h || bt->w != c->crop_w) {
            SG_ERROR("bench: the loader returned a %dx%dx%d batch, expected %dx%dx%d "
                     "(data.crop_size; internal error)",
                     bt->n, bt->h, bt->w, c->B, c->crop_h, c->crop_w);
            sg_loader_release(b->loader, bt);
            return SG_ERR_RUNTIME;
        }
        ops->upload(c->be, mb->img, bt->images, bpx * 3);
        ops->upload(c->be, mb->lab, bt->labels, bpx);
        mb->n = bt->n;
        mb->valid = bt->valid_pixels;
        sg_loader_release(b->loader, bt);
    }
    return SG_OK;
}

/* One optimizer step: the trainer's (sg_train_step) at the constant
 * train.lr, its phases timed through the phase hook. SG_OK or
 * SG_ERR_RUNTIME (logged). */
static sg_status step(bench *b, int64_t iter, double *loss) {
    memset(b->ph, 0, sizeof b->ph);
    memset(b->phc, 0, sizeof b->phc);
    b->t_mark = sg_now_s();
    b->c_mark = cpu_now_s();
    if (fetch(b) != SG_OK) return SG_ERR_RUNTIME;
    mark(b, SG_PH_DATA);
    sg_step_opts so = {.iter = iter, .lr = b->cfg->train.lr, .phase = mark, .ctx = b};
    sg_step_out out;
    if (sg_train_step(&b->c, b->c.slot, b->c.K, &so, &out) != SG_OK) return SG_ERR_RUNTIME;
    if (!b->o->split) { /* whole-step timing: one sync, at the step's end */
        b->c.be->ops->sync(b->c.be);
        mark(b, SG_PH_COMM);
    }
    *loss = out.loss;
    return SG_OK;
}

static double minflt_now(void) {
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) != 0) return 0;
    return (double)ru.ru_minflt;
}

static double peak_rss_mib(void) {
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) != 0) return 0;
    return (double)ru.ru_maxrss / 1024.0; /* Linux: KiB */
}

/* SG_OK or SG_ERR_RUNTIME (logged). */
static sg_status measure(bench *b, sg_bench_result *r) {
    const sg_bench_opts *o = b->o;
    r->iters = o->iters;
    r->step_s = calloc((size_t)o->iters, sizeof(double));
    r->cpu_s = calloc((size_t)o->iters, sizeof(double));
    r->minflt = calloc((size_t)o->iters, sizeof(double));
    SG_CHECK(r->step_s && r->cpu_s && r->minflt, "out of host memory");
    for (int p = 0; p < SG_PH_N; p++) {
        r->phase_s[p] = calloc((size_t)o->iters, sizeof(double));
        r->phase_cpu_s[p] = calloc((size_t)o->iters, sizeof(double));
        SG_CHECK(r->phase_s[p] && r->phase_cpu_s[p], "out of host memory");
    }
    int64_t iter = 0;
    if (o->profile) sg_model_profile(b->c.m, 1); /* per-layer timing (model_profile.h) */
    for (int i = 0; i < o->warmup; i++) {
        double loss;
        if (step(b, iter++, &loss) != SG_OK) return SG_ERR_RUNTIME;
        if (b->c.rank == 0)
            SG_INFO("bench: warmup step %d/%d: %.1f ms, loss %.4f", i + 1, o->warmup,
                    1e3 * (b->ph[0] + b->ph[1] + b->ph[2] + b->ph[3] + b->ph[4] + b->ph[5]), loss);
    }
    sg_comm_stats cs0, cs1;
    sg_comm_get_stats(b->c.comm, &cs0);
    if (o->profile) sg_model_profile_reset(b->c.m); /* the timed steps only */
    for (int i = 0; i < o->iters; i++) {
        double loss, t0 = sg_now_s(), c0 = cpu_now_s(), f0 = minflt_now();
        if (step(b, iter++, &loss) != SG_OK) return SG_ERR_RUNTIME;
        r->minflt[i] = minflt_now() - f0;
        r->step_s[i] = sg_now_s() - t0;
        r->cpu_s[i] = cpu_now_s() - c0;
        for (int p = 0; p < SG_PH_N; p++) {
            r->phase_s[p][i] = b->ph[p];
            r->phase_cpu_s[p][i] = b->phc[p];
        }
        if (i == 0) r->loss_first = loss;
        r->loss_last = loss;
        if (b->c.rank == 0)
            SG_INFO("bench: step %d/%d: %.1f ms (fwd %.1f, loss %.1f, bwd %.1f, opt %.1f), "
                    "loss %.4f",
                    i + 1, o->iters, 1e3 * r->step_s[i], 1e3 * b->ph[SG_PH_FWD],
                    1e3 * b->ph[SG_PH_LOSS], 1e3 * b->ph[SG_PH_BWD], 1e3 * b->ph[SG_PH_OPT], loss);
    }
    sg_comm_get_stats(b->c.comm, &cs1);
    double steps = o->iters, total = 0;
    for (int i = 0; i < o->iters; i++) total += r->step_s[i];
    r->syncbn_ms_per_step = 1e3 * (cs1.syncbn_s - cs0.syncbn_s) / steps;
    r->syncbn_share = total > 0 ? (cs1.syncbn_s - cs0.syncbn_s) / total : 0;
    r->syncbn_calls_per_step = (double)(cs1.syncbn_calls - cs0.syncbn_calls) / steps;
    r->syncbn_queued_per_step = (double)(cs1.syncbn_queued - cs0.syncbn_queued) / steps;
    r->poll_sleeps_per_step = (double)(cs1.poll_sleeps - cs0.poll_sleeps) / steps;
    r->flushes_per_step = (double)(cs1.flushes - cs0.flushes) / steps;
    if (o->profile) {
        sg_bench_profile_collect(b->c.m, r);
        sg_model_profile(b->c.m, 0);
    }
    if (!isfinite(r->loss_last))
        SG_WARN("bench: the loss became non-finite (%g); the timings stand, but the weights "
                "diverged (train.lr %g)",
                r->loss_last, b->cfg->train.lr);
    return SG_OK;
}

int sg_bench_traffic_design(const char *backend, const char *precision, int layout) {
    int bf16 = strcmp(precision, "bf16") == 0;
    if (bf16 && strncmp(backend, "cuda", 4) == 0)
        return layout == SG_LAYOUT_NHWC ? SG_TR_CUDA_BF16_NHWC : SG_TR_CUDA_BF16_CONVERT;
    if (bf16) return SG_TR_CPU_BF16;
    return layout == SG_LAYOUT_NHWC ? SG_TR_NHWC_F32 : SG_TR_NCHW_F32;
}

sg_status sg_bench_run(const sg_config *cfg, const sg_bench_opts *o, sg_bench_result *r) {
    memset(r, 0, sizeof *r);
    if (o->profile && !o->split) {
        SG_ERROR("bench: --profile times every layer with the backend synchronised; it cannot "
                 "run with --no-split (drop one of them)");
        return SG_ERR_CONFIG;
    }
    bench b;
    memset(&b, 0, sizeof b);
    b.cfg = cfg;
    b.o = o;
    sg_status rc = sg_train_core_setup(&b.c, cfg);
    if (rc == SG_OK) rc = setup_data(&b);
    if (rc == SG_OK) rc = measure(&b, r);
    if (rc == SG_OK) {
        sg_backend_info bi;
        sg_backend_get_info(b.c.be, &bi);
        r->rank = b.c.rank;
        r->world = b.c.world;
        r->threads = bi.threads;
        snprintf(r->backend, sizeof r->backend, "%s", bi.name);
        snprintf(r->device, sizeof r->device, "%s", bi.device);
        snprintf(r->precision, sizeof r->precision, "%s", bi.precision);
        snprintf(r->conv_math, sizeof r->conv_math, "%s", bi.conv_math);
        snprintf(r->layout, sizeof r->layout, "%s",
                 b.c.be->layout == SG_LAYOUT_NHWC ? "nhwc" : "nchw");
        r->batch = b.c.B;
        r->accum = b.c.K;
        r->crop_h = b.c.crop_h;
        r->crop_w = b.c.crop_w;
        r->flops_fwd_image = sg_model_flops(b.c.m, b.c.crop_h, b.c.crop_w);
        r->flops_step = 3.0 * r->flops_fwd_image * b.c.B * b.c.K;
        r->device_peak_mib = (double)bi.mem_peak / 1048576.0;
        r->activation_mib = (double)sg_model_activation_bytes(b.c.m) / 1048576.0;
        r->params = sg_model_param_count(b.c.m, 0);
        r->traffic_design = sg_bench_traffic_design(bi.name, bi.precision, b.c.be->layout);
        if (sg_bench_traffic(b.c.m, r->traffic_design, b.c.B, b.c.K, b.c.crop_h, b.c.crop_w,
                             &r->traffic, NULL) != SG_OK)
            memset(&r->traffic, 0, sizeof r->traffic); /* the plan took this shape: not reached */
        r->conv_plan_hits = bi.conv_plan_hits;
        r->conv_plan_misses = bi.conv_plan_misses;
        r->conv_plan_loaded = bi.conv_plan_loaded;
        r->act_transposes = bi.act_transposes;
        r->graph_captures = bi.graph_captures;
        r->graph_launches = bi.graph_launches;
        r->peak_rss_mib = peak_rss_mib(); /* before the peak measurement's buffers */
        if (o->peak_gflops > 0) {
            r->peak_gflops = o->peak_gflops;
            snprintf(r->peak_source, sizeof r->peak_source, "stated (--peak-gflops)");
        } else if (o->peak_gflops == 0) {
            r->peak_gflops =
                sg_bench_conv_peak(b.c.be, r->peak_source, sizeof r->peak_source) / 1e9;
        }
    }
    teardown(&b);
    if (rc != SG_OK) sg_bench_result_free(r);
    return rc;
}

void sg_bench_result_free(sg_bench_result *r) {
    free(r->step_s);
    free(r->cpu_s);
    free(r->minflt);
    r->step_s = r->cpu_s = r->minflt = NULL;
    for (int p = 0; p < SG_PH_N; p++) {
        free(r->phase_s[p]);
        free(r->phase_cpu_s[p]);
        r->phase_s[p] = r->phase_cpu_s[p] = NULL;
    }
    sg_bench_profile_free(&r->prof);
}
