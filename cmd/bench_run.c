/* cmd/bench_run.c - the benchmark's timed training steps (see cmd/bench.h).
 *
 * The step mirrors cmd/trainer.c's train_step (same ops, same order, same
 * loss normalisation); it is written out here rather than called because the
 * trainer's step has no per-phase timing hooks and drives epochs, checkpoints
 * and evaluation that a benchmark must not include. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "cmd/bench.h"
#include "cmd/log.h"
#include "cmd/optimizer.h"
#include "data/dataset.h"
#include "data/loader.h"
#include "data/sampler.h"
#include "dist/comm.h"
#include "dist/ddp.h"
#include "kernels/rng.h"
#include "model/model.h"

const char *const sg_bench_phase_names[SG_PH_N] = {"data", "forward", "loss",
                                                   "backward", "comm", "optimizer"};

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static double cpu_now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

typedef struct bench {
    const sg_config *cfg;
    const sg_bench_opts *o;
    sg_backend *be;
    sg_comm *comm;
    sg_ddp *ddp;
    sg_model *m;
    sg_sgd opt;
    int have_opt;
    /* data */
    sg_dataset *ds;
    sg_loader *loader;
    sg_sampler sampler;
    int64_t *idx;
    int64_t epoch;
    uint8_t **h_img, **h_lab;   /* synthetic: K host batches */
    int64_t *h_valid;
    uint8_t **d_img, **d_lab;   /* K device slots */
    int *slot_n;
    int64_t *slot_valid;
    int rank, world, B, K, C, H, W, global_norm;
    float mean[3], std[3];
    /* the phase clock */
    double t_mark, c_mark;
    double ph[SG_PH_N], phc[SG_PH_N];
} bench;

/* Closes the running phase: its time goes to phase p. With split timing the
 * backend is synchronised first so asynchronous work lands in its phase. */
static void mark(bench *b, int p) {
    if (b->o->split) b->be->ops->sync(b->be);
    double t = now_s(), c = cpu_now_s();
    b->ph[p] += t - b->t_mark;
    b->phc[p] += c - b->c_mark;
    b->t_mark = t;
    b->c_mark = c;
}

static void *host_alloc_cb(void *ctx, size_t bytes) {
    sg_backend *be = ctx;
    return be->ops->host_alloc(be, bytes);
}
static void host_free_cb(void *ctx, void *p) {
    sg_backend *be = ctx;
    be->ops->host_free(be, p);
}

/* Synthetic batch k: uniform random pixels, random labels in [0, C) with the
 * top eighth of every image ignored (as in scripts/bench_torch.py: real masks
 * have ignored pixels). Deterministic from the seed and the rank. */
static void make_synthetic(bench *b, int k) {
    size_t px = (size_t)b->B * b->H * b->W;
    uint64_t key = sg_rng_key((uint64_t)b->cfg->seed, 0x42454E43ull /* "BENC" */, (uint64_t)k,
                              (uint64_t)b->rank, SG_RNG_SYNTH);
    uint8_t *img = b->h_img[k], *lab = b->h_lab[k];
    for (size_t i = 0; i < px * 3; i++) img[i] = (uint8_t)(sg_rng_u64(key, i) >> 56);
    int64_t valid = 0;
    int ignore_rows = b->H / 8;
    for (size_t i = 0; i < px; i++) {
        int row = (int)((i / (size_t)b->W) % (size_t)b->H);
        if (row < ignore_rows) {
            lab[i] = (uint8_t)b->cfg->data.ignore_index;
        } else {
            lab[i] = (uint8_t)(sg_rng_u64(key, px * 3 + i) % (uint64_t)b->C);
            valid++;
        }
    }
    b->h_valid[k] = valid;
}

static int setup_model(bench *b) {
    const sg_config *cfg = b->cfg;
    sg_model_opts mo;
    if (sg_model_opts_from_config(&mo, cfg) != 0) return 2;
    b->m = sg_model_create(b->be, &mo);
    if (!b->m) return 2;
    /* weights do not change the speed; pretrained files are not loaded */
    sg_model_init(b->m, (uint64_t)cfg->seed);
    /* freezing changes the work (no weight gradients), so it is honoured */
    for (int i = 0; i < cfg->train.n_freeze; i++)
        sg_model_freeze(b->m, cfg->train.freeze[i], cfg->train.freeze_bn_stats);
    if (cfg->train.freeze_bn_stats) sg_model_freeze_bn_stats(b->m, "");
    int n = sg_model_num_params(b->m), np = 0;
    sg_opt_param *ps = calloc((size_t)n, sizeof *ps);
    SG_CHECK(ps != NULL, "out of host memory");
    for (int i = 0; i < n; i++) {
        sg_param *p = sg_model_param(b->m, i);
        if (p->is_buffer) continue;
        ps[np++] = (sg_opt_param){p->name, p->data, p->grad, p->count, !p->trainable};
    }
    int rc = sg_sgd_init(&b->opt, b->be, ps, np, &cfg->train);
    free(ps);
    if (rc) return rc;
    b->have_opt = 1;
    return 0;
}

static int start_list(bench *b) {
    int64_t n = sg_sampler_rank_indices(&b->sampler, b->epoch, b->rank, 0, b->idx);
    if (n < 0) return -1;
    int64_t use = n / b->B * b->B;  /* whole batches only: every step has the same shape */
    if (use == 0) {
        SG_ERROR("bench --with-data: %s has %lld samples for this rank, fewer than "
                 "train.batch_size %d; lower the batch size or use synthetic data (no "
                 "--with-data)", b->cfg->data.train_split, (long long)n, b->B);
        return -1;
    }
    return sg_loader_start(b->loader, b->idx, use, b->epoch);
}

static int setup_data(bench *b) {
    const sg_config *cfg = b->cfg;
    size_t px = (size_t)b->B * b->H * b->W;
    b->d_img = calloc((size_t)b->K, sizeof *b->d_img);
    b->d_lab = calloc((size_t)b->K, sizeof *b->d_lab);
    b->slot_n = calloc((size_t)b->K, sizeof *b->slot_n);
    b->slot_valid = calloc((size_t)b->K, sizeof *b->slot_valid);
    SG_CHECK(b->d_img && b->d_lab && b->slot_n && b->slot_valid, "out of host memory");
    for (int k = 0; k < b->K; k++) {
        b->d_img[k] = b->be->ops->alloc(b->be, px * 3);
        b->d_lab[k] = b->be->ops->alloc(b->be, px);
    }
    if (!b->o->with_data) {
        b->h_img = calloc((size_t)b->K, sizeof *b->h_img);
        b->h_lab = calloc((size_t)b->K, sizeof *b->h_lab);
        b->h_valid = calloc((size_t)b->K, sizeof *b->h_valid);
        SG_CHECK(b->h_img && b->h_lab && b->h_valid, "out of host memory");
        for (int k = 0; k < b->K; k++) {
            b->h_img[k] = b->be->ops->host_alloc(b->be, px * 3);
            b->h_lab[k] = b->be->ops->host_alloc(b->be, px);
            make_synthetic(b, k);
        }
        return 0;
    }
    if (!cfg->data.train_split[0]) {
        SG_ERROR("bench --with-data: data.train_split is empty; set it (and data.root) or "
                 "drop --with-data to use synthetic batches");
        return 2;
    }
    b->ds = sg_dataset_open(&cfg->data, cfg->data.train_split, b->C);
    if (!b->ds) return 1;
    int64_t N = sg_dataset_size(b->ds);
    b->sampler = (sg_sampler){N, b->world, cfg->data.shuffle, 1, (uint64_t)cfg->seed};
    b->idx = malloc((size_t)(N > 0 ? N : 1) * sizeof(int64_t));
    SG_CHECK(b->idx != NULL, "out of host memory");
    sg_loader_opts lo;
    sg_loader_opts_from_config(&lo, &cfg->data, 1, b->B, (uint64_t)cfg->seed);
    lo.host_alloc = host_alloc_cb;
    lo.host_free = host_free_cb;
    lo.host_ctx = b->be;
    b->loader = sg_loader_create(b->ds, &lo);
    if (!b->loader) return 1;
    return start_list(b) == 0 ? 0 : 1;
}

static int setup(bench *b) {
    const sg_config *cfg = b->cfg;
    sg_backend_opts bo = {cfg->threads, cfg->cudnn.benchmark, cfg->cudnn.deterministic};
    sg_dist_env env;
    if (sg_dist_env_read(&env) != 0) return 2;
    char dev[SG_NAME + 16];
    if (strcmp(cfg->device, "cuda") == 0 && env.world > 1)
        snprintf(dev, sizeof dev, "cuda:%d", env.local_rank);
    else
        snprintf(dev, sizeof dev, "%s", cfg->device);
    b->be = sg_backend_create(dev, &bo);
    if (!b->be) return 1;
    b->comm = sg_comm_create(cfg, b->be);
    if (!b->comm) return 1;
    b->rank = sg_comm_rank(b->comm);
    b->world = sg_comm_world(b->comm);
    b->B = cfg->train.batch_size;
    b->K = cfg->train.accum_steps;
    b->C = cfg->model.num_classes;
    b->H = cfg->data.crop_size[0];
    b->W = cfg->data.crop_size[1];
    b->global_norm = strcmp(cfg->train.loss_norm, "global") == 0;
    for (int i = 0; i < 3; i++) {
        b->mean[i] = (float)cfg->data.mean[i];
        b->std[i] = (float)cfg->data.std[i];
    }
    int rc = setup_model(b);
    if (rc) return rc;
    b->ddp = sg_ddp_create(b->comm, b->m, cfg);
    if (!b->ddp) return 1;
    if (sg_model_plan(b->m, b->B, b->H, b->W) != 0) return 2;
    return setup_data(b);
}

static void teardown(bench *b) {
    if (b->d_img)
        for (int k = 0; k < b->K; k++) {
            if (b->d_img[k]) b->be->ops->free(b->be, b->d_img[k]);
            if (b->d_lab[k]) b->be->ops->free(b->be, b->d_lab[k]);
        }
    if (b->h_img)
        for (int k = 0; k < b->K; k++) {
            if (b->h_img[k]) b->be->ops->host_free(b->be, b->h_img[k]);
            if (b->h_lab[k]) b->be->ops->host_free(b->be, b->h_lab[k]);
        }
    free(b->d_img);
    free(b->d_lab);
    free(b->h_img);
    free(b->h_lab);
    free(b->h_valid);
    free(b->slot_n);
    free(b->slot_valid);
    free(b->idx);
    sg_loader_destroy(b->loader);
    sg_dataset_close(b->ds);
    sg_ddp_destroy(b->ddp);
    if (b->have_opt) sg_sgd_free(&b->opt);
    if (b->m) sg_model_destroy(b->m);
    sg_comm_destroy(b->comm);
    if (b->be) sg_backend_destroy(b->be);
}

/* The step's K micro-batches onto the device (phase: data). */
static int fetch(bench *b) {
    const sg_ops *ops = b->be->ops;
    size_t px = (size_t)b->B * b->H * b->W;
    for (int k = 0; k < b->K; k++) {
        if (!b->o->with_data) {
            ops->upload(b->be, b->d_img[k], b->h_img[k], px * 3);
            ops->upload(b->be, b->d_lab[k], b->h_lab[k], px);
            b->slot_n[k] = b->B;
            b->slot_valid[k] = b->h_valid[k];
            continue;
        }
        sg_batch *bt = NULL;
        int r = sg_loader_next(b->loader, &bt);
        if (r < 0) return -1;
        if (r == 0) { /* end of the list: the next epoch */
            b->epoch++;
            if (start_list(b) != 0) return -1;
            k--;
            continue;
        }
        size_t bpx = (size_t)bt->n * bt->h * bt->w;
        SG_CHECK(bt->n == b->B && bt->h == b->H && bt->w == b->W,
                 "bench: the loader returned a %dx%dx%d batch, expected %dx%dx%d", bt->n, bt->h,
                 bt->w, b->B, b->H, b->W);
        ops->upload(b->be, b->d_img[k], bt->images, bpx * 3);
        ops->upload(b->be, b->d_lab[k], bt->labels, bpx);
        b->slot_n[k] = bt->n;
        b->slot_valid[k] = bt->valid_pixels;
        sg_loader_release(b->loader, bt);
    }
    return 0;
}

/* One optimizer step (trainer.c train_step, phase by phase). Returns 0 or -1. */
static int step(bench *b, int64_t iter, double *loss) {
    sg_backend *be = b->be;
    const sg_ops *ops = be->ops;
    memset(b->ph, 0, sizeof b->ph);
    memset(b->phc, 0, sizeof b->phc);
    b->t_mark = now_s();
    b->c_mark = cpu_now_s();
    if (fetch(b) != 0) return -1;
    mark(b, SG_PH_DATA);
    int64_t cnt[1] = {0};
    for (int k = 0; k < b->K; k++) cnt[0] += b->slot_valid[k];
    if (sg_comm_allreduce_i64(b->comm, cnt, 1) != 0) return -1;
    int64_t global_valid = cnt[0];
    mark(b, SG_PH_COMM);
    double main_sum = 0, aux_sum = 0;
    float aux_w = (float)b->cfg->train.aux_weight;
    int has_aux = sg_model_aux(b->m) != NULL;
    int hw = b->H * b->W;
    for (int k = 0; k < b->K; k++) {
        int n = b->slot_n[k];
        ops->normalize_u8(be, b->d_img[k], sg_model_input(b->m), n, b->H, b->W, b->mean,
                          b->std);
        mark(b, SG_PH_DATA);
        uint64_t key = sg_rng_key((uint64_t)b->cfg->seed, (uint64_t)iter, (uint64_t)k,
                                  (uint64_t)b->rank, SG_RNG_DROPOUT);
        sg_model_forward(b->m, 1, key);
        mark(b, SG_PH_FWD);
        double scale;
        if (b->global_norm)
            scale = global_valid > 0 ? (double)b->world / (double)global_valid : 0.0;
        else
            scale = b->slot_valid[k] > 0 ? 1.0 / ((double)b->slot_valid[k] * b->K) : 0.0;
        double ls = 0, la = 0;
        int64_t v = 0;
        ops->ce_fwd_bwd(be, sg_model_out(b->m), b->d_lab[k], n, b->C, hw,
                        b->cfg->data.ignore_index, (float)scale, sg_model_dout(b->m), &ls, &v);
        if (has_aux)
            ops->ce_fwd_bwd(be, sg_model_aux(b->m), b->d_lab[k], n, b->C, hw,
                            b->cfg->data.ignore_index, (float)(scale * aux_w),
                            sg_model_daux(b->m), &la, &v);
        if (b->global_norm) {
            main_sum += ls;
            aux_sum += la;
        } else if (v > 0) {
            main_sum += ls / (double)v / b->K;
            aux_sum += la / (double)v / b->K;
        }
        mark(b, SG_PH_LOSS);
        sg_ddp_set_sync(b->ddp, k == b->K - 1);
        sg_model_backward(b->m, k > 0);
        mark(b, SG_PH_BWD);
    }
    if (sg_ddp_wait(b->ddp) != 0) return -1;
    mark(b, SG_PH_COMM);
    sg_sgd_step(&b->opt, b->cfg->train.lr);
    mark(b, SG_PH_OPT);
    double red[2] = {main_sum, aux_sum};
    if (sg_comm_allreduce_f64(b->comm, red, 2) != 0) return -1;
    double denom = b->global_norm ? (global_valid > 0 ? (double)global_valid : 1.0) : b->world;
    *loss = red[0] / denom + (has_aux ? aux_w * red[1] / denom : 0.0);
    if (!b->o->split) ops->sync(be);
    mark(b, SG_PH_COMM);
    return 0;
}

static double minflt_now(void) {
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) != 0) return 0;
    return (double)ru.ru_minflt;
}

static double peak_rss_mib(void) {
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) != 0) return 0;
    return (double)ru.ru_maxrss / 1024.0;  /* Linux: KiB */
}

static int measure(bench *b, sg_bench_result *r) {
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
    for (int i = 0; i < o->warmup; i++) {
        double loss;
        if (step(b, iter++, &loss) != 0) return 1;
        if (b->rank == 0) SG_INFO("bench: warmup step %d/%d: %.1f ms, loss %.4f", i + 1,
                                  o->warmup, 1e3 * (b->ph[0] + b->ph[1] + b->ph[2] + b->ph[3] +
                                                    b->ph[4] + b->ph[5]), loss);
    }
    for (int i = 0; i < o->iters; i++) {
        double loss, t0 = now_s(), c0 = cpu_now_s(), f0 = minflt_now();
        if (step(b, iter++, &loss) != 0) return 1;
        r->minflt[i] = minflt_now() - f0;
        r->step_s[i] = now_s() - t0;
        r->cpu_s[i] = cpu_now_s() - c0;
        for (int p = 0; p < SG_PH_N; p++) {
            r->phase_s[p][i] = b->ph[p];
            r->phase_cpu_s[p][i] = b->phc[p];
        }
        if (i == 0) r->loss_first = loss;
        r->loss_last = loss;
        if (b->rank == 0)
            SG_INFO("bench: step %d/%d: %.1f ms (fwd %.1f, loss %.1f, bwd %.1f, opt %.1f), "
                    "loss %.4f", i + 1, o->iters, 1e3 * r->step_s[i], 1e3 * b->ph[SG_PH_FWD],
                    1e3 * b->ph[SG_PH_LOSS], 1e3 * b->ph[SG_PH_BWD], 1e3 * b->ph[SG_PH_OPT],
                    loss);
    }
    if (!isfinite(r->loss_last))
        SG_WARN("bench: the loss became non-finite (%g); the timings stand, but the weights "
                "diverged (train.lr %g)", r->loss_last, b->cfg->train.lr);
    return 0;
}

int sg_bench_run(const sg_config *cfg, const sg_bench_opts *o, sg_bench_result *r) {
    memset(r, 0, sizeof *r);
    bench b;
    memset(&b, 0, sizeof b);
    b.cfg = cfg;
    b.o = o;
    int rc = setup(&b);
    if (rc == 0) rc = measure(&b, r);
    if (rc == 0) {
        sg_backend_info bi;
        sg_backend_get_info(b.be, &bi);
        r->rank = b.rank;
        r->world = b.world;
        r->threads = bi.threads;
        snprintf(r->backend, sizeof r->backend, "%s", bi.name);
        snprintf(r->device, sizeof r->device, "%s", bi.device);
        r->batch = b.B;
        r->accum = b.K;
        r->crop_h = b.H;
        r->crop_w = b.W;
        r->flops_fwd_image = sg_model_flops(b.m, b.H, b.W);
        r->flops_step = 3.0 * r->flops_fwd_image * b.B * b.K;
        r->device_peak_mib = (double)bi.mem_peak / 1048576.0;
        r->activation_mib = (double)sg_model_activation_bytes(b.m) / 1048576.0;
        r->params = sg_model_param_count(b.m, 0);
        r->peak_rss_mib = peak_rss_mib();  /* before the peak measurement's buffers */
        if (o->peak_gflops > 0) {
            r->peak_gflops = o->peak_gflops;
            snprintf(r->peak_source, sizeof r->peak_source, "stated (--peak-gflops)");
        } else if (o->peak_gflops == 0) {
            r->peak_gflops = sg_bench_conv_peak(b.be, r->peak_source, sizeof r->peak_source) / 1e9;
        }
    }
    teardown(&b);
    if (rc != 0) sg_bench_result_free(r);
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
}
