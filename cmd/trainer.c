/* cmd/trainer.c - the training loop (see trainer.h). Setup and teardown are
 * in this file's first half, one optimizer step in train_step, the epoch and
 * run bookkeeping (leftover pass, evaluation, checkpoints, signals) after it. */
#include "cmd/trainer.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "cmd/checkpoint.h"
#include "cmd/evaluator.h"
#include "cmd/jsonw.h"
#include "cmd/log.h"
#include "cmd/lr_schedule.h"
#include "cmd/metrics.h"
#include "cmd/optimizer.h"
#include "data/dataset.h"
#include "data/loader.h"
#include "data/sampler.h"
#include "dist/comm.h"
#include "dist/ddp.h"
#include "kernels/rng.h"
#include "model/model.h"
#include "model/model_io.h"

static volatile sig_atomic_t g_stop_signal = 0;

/* First SIGINT/SIGTERM: finish the step, checkpoint, exit. A second one
 * (impatient user, launcher escalating) terminates at once. */
static void on_signal(int sig) {
    if (g_stop_signal) {
        signal(sig, SIG_DFL);
        raise(sig);
        return;
    }
    g_stop_signal = sig;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

typedef struct trainer {
    const sg_config *cfg;
    sg_train_debug *dbg;
    sg_backend *be;
    sg_comm *comm;
    sg_ddp *ddp;
    sg_model *m;
    sg_dataset *train_ds, *val_ds;
    sg_loader *loader;
    sg_evaluator ev_val, ev_left;
    int have_ev_val, have_ev_left;
    sg_sgd opt;
    sg_lr_schedule sched;
    sg_train_state st;
    sg_sampler sampler;
    int rank, world, B, K, C, crop_h, crop_w, global_norm;
    float mean[3], std[3];
    uint8_t **d_img, **d_lab;   /* K device slots */
    int *slot_n, *slot_h, *slot_w;
    int64_t *slot_valid;
    int64_t *idx, *perm;        /* [N] */
    int64_t epoch_steps_left;   /* optimizer steps left in the current epoch's list */
    int64_t last_ckpt_iter;
    char metrics_path[SG_STR + 32];
    /* progress */
    double t_log, wait_log;
    int64_t iter_log;
} trainer;

/* ---------------- setup ---------------- */

static void *host_alloc_cb(void *ctx, size_t bytes) {
    sg_backend *be = ctx;
    return be->ops->host_alloc(be, bytes);
}
static void host_free_cb(void *ctx, void *p) {
    sg_backend *be = ctx;
    be->ops->host_free(be, p);
}

static uint64_t dataset_hash(const sg_dataset *a, const sg_dataset *b) {
    uint64_t h = 0xcbf29ce484222325ull;
    const sg_dataset *ds[2] = {a, b};
    for (int k = 0; k < 2; k++) {
        if (!ds[k]) continue;
        for (int64_t i = 0; i < sg_dataset_size(ds[k]); i++)
            for (const char *p = sg_dataset_rel_path(ds[k], i); *p; p++)
                h = (h ^ (unsigned char)*p) * 0x100000001b3ull;
        h = (h ^ 0xff) * 0x100000001b3ull;
    }
    return h;
}

static int setup_model(trainer *T) {
    const sg_config *cfg = T->cfg;
    sg_model_opts mo;
    if (sg_model_opts_from_config(&mo, cfg) != 0) return 2;
    T->m = sg_model_create(T->be, &mo);
    if (!T->m) return 2;
    sg_model_init(T->m, (uint64_t)cfg->seed);
    if (cfg->model.pretrained[0]) {
        sg_load_report rep;
        if (sg_model_load(T->m, cfg->model.pretrained, cfg->model.pretrained_strict, &rep) != 0) {
            SG_ERROR("model.pretrained: loading %s failed (see above); set "
                     "model.pretrained_strict: false to skip mismatching keys",
                     cfg->model.pretrained);
            return 2;
        }
    }
    /* freezing is configuration, applied before anything trains */
    for (int i = 0; i < cfg->train.n_freeze; i++)
        sg_model_freeze(T->m, cfg->train.freeze[i], cfg->train.freeze_bn_stats);
    if (cfg->train.freeze_bn_stats) {
        int n = sg_model_freeze_bn_stats(T->m, "");
        SG_INFO("train.freeze_bn_stats: %d BN layers use and keep their running statistics", n);
    }
    int n = sg_model_num_params(T->m), np = 0;
    sg_opt_param *ps = calloc((size_t)n, sizeof *ps);
    SG_CHECK(ps != NULL, "out of host memory");
    for (int i = 0; i < n; i++) {
        sg_param *p = sg_model_param(T->m, i);
        if (p->is_buffer) continue;
        ps[np++] = (sg_opt_param){p->name, p->data, p->grad, p->count, !p->trainable};
    }
    int rc = sg_sgd_init(&T->opt, T->be, ps, np, &cfg->train);
    free(ps);
    if (rc) return rc;
    SG_INFO("model: %s, %zu parameters (%zu trainable, %d tensors frozen, %d at lr x %g)",
            cfg->model.backbone, sg_model_param_count(T->m, 0), sg_model_param_count(T->m, 1),
            T->opt.n_frozen, T->opt.n_head, cfg->train.head_lr_mult);
    return 0;
}

static int64_t steps_in_list(const trainer *T, int64_t n_rank) {
    int64_t per_step = (int64_t)T->B * T->K;
    return T->cfg->train.drop_last ? n_rank / per_step : (n_rank + per_step - 1) / per_step;
}

static int resolve_resume(trainer *T, const char *resume, char *path, size_t cap) {
    if (!resume) return 0;
    if (strcmp(resume, "auto") == 0) {
        if (!sg_ckpt_find_latest(T->cfg->run_dir, path, cap)) {
            SG_INFO("resume auto: no valid checkpoint in %s/checkpoints; starting fresh",
                    T->cfg->run_dir);
            return 0;
        }
        return 1;
    }
    snprintf(path, cap, "%s", resume);
    return 1;
}

static int load_resume(trainer *T, const char *path) {
    char why[512];
    sg_st_file *f = sg_ckpt_open_valid(path, why, sizeof why);
    if (!f) {
        SG_ERROR("--resume %s: %s; use another checkpoint or --resume auto", path, why);
        return 1;
    }
    sg_train_state st;
    int rc = sg_ckpt_read_state(f, &st);
    if (rc == 0) rc = sg_ckpt_load_model(f, T->m);
    if (rc == 0) rc = sg_ckpt_load_optimizer(f, &T->opt);
    sg_st_close(f);
    if (rc != 0) {
        SG_ERROR("--resume %s: the checkpoint does not fit this model/config (see above)", path);
        return 1;
    }
    if (st.seed != (uint64_t)T->cfg->seed)
        SG_WARN("resume: checkpoint seed %" PRIu64 ", config seed %d: the sample order and "
                "augmentations follow the config's seed from here on", st.seed, T->cfg->seed);
    if (st.world != T->world)
        SG_INFO("resume: world size %d (checkpoint written with %d): the global sample order "
                "is kept, position %lld of epoch %lld", T->world, st.world,
                (long long)st.sample_pos, (long long)st.epoch);
    if (st.total_steps != T->st.total_steps)
        SG_WARN("resume: the run now has %lld optimizer steps (checkpoint: %lld); the LR "
                "schedule follows the new length", (long long)T->st.total_steps,
                (long long)st.total_steps);
    int64_t total = T->st.total_steps;
    T->st = st;
    T->st.total_steps = total;
    T->st.world = T->world;
    T->st.seed = (uint64_t)T->cfg->seed;
    T->last_ckpt_iter = st.iter;
    SG_INFO("resumed from %s: iteration %lld, epoch %lld, sample %lld of the epoch", path,
            (long long)st.iter, (long long)st.epoch, (long long)st.sample_pos);
    return 0;
}

static int setup(trainer *T, const char *resume) {
    const sg_config *cfg = T->cfg;
    sg_backend_opts bo = {cfg->threads, cfg->cudnn.benchmark, cfg->cudnn.deterministic};
    sg_dist_env env;
    if (sg_dist_env_read(&env) != 0) return 2;
    char dev[SG_NAME + 16];
    if (strcmp(cfg->device, "cuda") == 0 && env.world > 1)
        snprintf(dev, sizeof dev, "cuda:%d", env.local_rank);
    else
        snprintf(dev, sizeof dev, "%s", cfg->device);
    T->be = sg_backend_create(dev, &bo);
    if (!T->be) return 1;
    T->comm = sg_comm_create(cfg, T->be);
    if (!T->comm) return 1;
    T->rank = sg_comm_rank(T->comm);
    T->world = sg_comm_world(T->comm);
    T->B = cfg->train.batch_size;
    T->K = cfg->train.accum_steps;
    T->C = cfg->model.num_classes;
    T->crop_h = cfg->data.crop_size[0];
    T->crop_w = cfg->data.crop_size[1];
    T->global_norm = strcmp(cfg->train.loss_norm, "global") == 0;
    for (int i = 0; i < 3; i++) {
        T->mean[i] = (float)cfg->data.mean[i];
        T->std[i] = (float)cfg->data.std[i];
    }
    snprintf(T->metrics_path, sizeof T->metrics_path, "%s/metrics.jsonl", cfg->run_dir);

    T->train_ds = sg_dataset_open(&cfg->data, cfg->data.train_split, T->C);
    if (!T->train_ds) return 1;
    if (cfg->data.val_split[0]) {
        T->val_ds = sg_dataset_open(&cfg->data, cfg->data.val_split, T->C);
        if (!T->val_ds) return 1;
    }
    if (sg_comm_check_dataset(T->comm, dataset_hash(T->train_ds, T->val_ds)) != 0) return 1;
    int64_t N = sg_dataset_size(T->train_ds);
    T->sampler = (sg_sampler){N, T->world, cfg->data.shuffle, cfg->train.drop_last,
                              (uint64_t)cfg->seed};
    int64_t steps_epoch = steps_in_list(T, sg_sampler_per_rank(&T->sampler, 0));
    if (steps_epoch < 1) {
        SG_ERROR("train: %lld training samples are fewer than one step needs (batch_size %d x "
                 "accum_steps %d x %d ranks); lower train.batch_size or train.accum_steps",
                 (long long)N, T->B, T->K, T->world);
        return 2;
    }
    T->st.total_steps = cfg->train.iters > 0 ? cfg->train.iters
                                             : (int64_t)cfg->train.epochs * steps_epoch;
    T->st.world = T->world;
    T->st.seed = (uint64_t)cfg->seed;
    T->st.best_miou = NAN;
    T->st.best_iter = -1;
    T->last_ckpt_iter = -1;
    int rc = sg_lr_schedule_init(&T->sched, &cfg->train, T->st.total_steps);
    if (rc) return rc;
    /* model, pretrained weights, freezing, resume: every rank does them; the
     * outcome is agreed on so no rank waits for one that failed */
    rc = setup_model(T);
    char path[SG_STR + 64];
    if (rc == 0 && resolve_resume(T, resume, path, sizeof path) && load_resume(T, path) != 0)
        rc = 1;
    int64_t flag[2] = {rc == 1, rc == 2};
    if (sg_comm_allreduce_i64(T->comm, flag, 2) != 0) return 1;
    if (rc == 0 && (flag[0] || flag[1])) {
        SG_ERROR("another rank failed to set up the model or resume (see its log)");
        rc = flag[1] ? 2 : 1;
    }
    if (rc) return rc;

    T->ddp = sg_ddp_create(T->comm, T->m, cfg);
    if (!T->ddp) return 1;

    sg_loader_opts lo;
    sg_loader_opts_from_config(&lo, &cfg->data, 1, T->B, (uint64_t)cfg->seed);
    lo.host_alloc = host_alloc_cb;
    lo.host_free = host_free_cb;
    lo.host_ctx = T->be;
    T->loader = sg_loader_create(T->train_ds, &lo);
    if (!T->loader) return 1;
    if (T->val_ds) {
        if (sg_evaluator_init(&T->ev_val, T->be, T->val_ds, cfg) != 0) return 1;
        T->have_ev_val = 1;
    }
    if (cfg->train.drop_last && cfg->train.leftover_eval) {
        if (sg_evaluator_init(&T->ev_left, T->be, T->train_ds, cfg) != 0) return 1;
        T->have_ev_left = 1;
    }
    T->d_img = calloc((size_t)T->K, sizeof *T->d_img);
    T->d_lab = calloc((size_t)T->K, sizeof *T->d_lab);
    T->slot_n = calloc((size_t)T->K, sizeof(int));
    T->slot_h = calloc((size_t)T->K, sizeof(int));
    T->slot_w = calloc((size_t)T->K, sizeof(int));
    T->slot_valid = calloc((size_t)T->K, sizeof(int64_t));
    T->idx = malloc((size_t)N * sizeof(int64_t));
    T->perm = malloc((size_t)N * sizeof(int64_t));
    SG_CHECK(T->d_img && T->d_lab && T->slot_n && T->slot_h && T->slot_w && T->slot_valid &&
                 T->idx && T->perm, "out of host memory");
    size_t px = (size_t)T->B * T->crop_h * T->crop_w;
    for (int k = 0; k < T->K; k++) {
        T->d_img[k] = T->be->ops->alloc(T->be, px * 3);
        T->d_lab[k] = T->be->ops->alloc(T->be, px);
    }
    if (sg_model_plan(T->m, T->B, T->crop_h, T->crop_w) != 0) return 2;
    SG_INFO("training: %lld optimizer steps, %lld per epoch, %d img/step/rank (batch %d x accum "
            "%d), %d rank(s), %lld train samples, loss_norm %s", (long long)T->st.total_steps,
            (long long)steps_epoch, T->B * T->K, T->B, T->K, T->world, (long long)N,
            cfg->train.loss_norm);
    return 0;
}

static void teardown(trainer *T) {
    if (T->d_img)
        for (int k = 0; k < T->K; k++) {
            if (T->d_img[k]) T->be->ops->free(T->be, T->d_img[k]);
            if (T->d_lab[k]) T->be->ops->free(T->be, T->d_lab[k]);
        }
    free(T->d_img);
    free(T->d_lab);
    free(T->slot_n);
    free(T->slot_h);
    free(T->slot_w);
    free(T->slot_valid);
    free(T->idx);
    free(T->perm);
    if (T->have_ev_val) sg_evaluator_free(&T->ev_val);
    if (T->have_ev_left) sg_evaluator_free(&T->ev_left);
    sg_loader_destroy(T->loader);
    sg_ddp_destroy(T->ddp);
    sg_sgd_free(&T->opt);
    if (T->m) sg_model_destroy(T->m);
    sg_dataset_close(T->train_ds);
    sg_dataset_close(T->val_ds);
    sg_comm_destroy(T->comm);
    if (T->be) sg_backend_destroy(T->be);
}

/* ---------------- epoch lists ---------------- */

/* Starts the loader on this rank's share of the epoch from st.sample_pos. */
static int start_epoch_list(trainer *T) {
    int64_t n = sg_sampler_rank_indices(&T->sampler, T->st.epoch, T->rank, T->st.sample_pos,
                                        T->idx);
    if (n < 0) return -1;
    T->epoch_steps_left = steps_in_list(T, n);
    int64_t use = T->cfg->train.drop_last ? T->epoch_steps_left * T->B * T->K : n;
    if (use == 0) return 0;
    return sg_loader_start(T->loader, T->idx, use, T->st.epoch);
}

/* ---------------- one optimizer step ---------------- */

typedef struct step_out {
    double loss, loss_main, loss_aux;
    int64_t images;     /* this step, all ranks */
    int stop_signal;    /* max over ranks */
} step_out;

static int train_step(trainer *T, step_out *o) {
    sg_backend *be = T->be;
    const sg_ops *ops = be->ops;
    int K = 0;
    int64_t local_valid = 0, images = 0;
    /* fetch the step's micro-batches first: the valid-pixel count of the whole
     * step is needed before the first forward (global loss normalisation) */
    for (int k = 0; k < T->K; k++) {
        sg_batch *b = NULL;
        int r = sg_loader_next(T->loader, &b);
        if (r < 0) return -1;
        if (r == 0) break;
        size_t px = (size_t)b->n * b->h * b->w;
        ops->upload(be, T->d_img[k], b->images, px * 3);
        ops->upload(be, T->d_lab[k], b->labels, px);
        T->slot_n[k] = b->n;
        T->slot_h[k] = b->h;
        T->slot_w[k] = b->w;
        T->slot_valid[k] = b->valid_pixels;
        local_valid += b->valid_pixels;
        images += b->n;
        if (T->dbg && T->dbg->seen_train)
            for (int i = 0; i < b->n; i++) T->dbg->seen_train[b->indices[i]]++;
        sg_loader_release(T->loader, b);
        K++;
    }
    if (K == 0) {
        SG_ERROR("train: the loader ended the epoch early (internal error: step count)");
        return -1;
    }
    int64_t cnt[2] = {local_valid, images};
    if (sg_comm_allreduce_i64(T->comm, cnt, 2) != 0) return -1;
    int64_t global_valid = cnt[0];
    double main_sum = 0, aux_sum = 0;
    float aux_w = (float)T->cfg->train.aux_weight;
    int has_aux = sg_model_aux(T->m) != NULL;
    for (int k = 0; k < K; k++) {
        int n = T->slot_n[k], h = T->slot_h[k], w = T->slot_w[k], hw = h * w;
        if (sg_model_plan(T->m, n, h, w) != 0) return -1;
        ops->normalize_u8(be, T->d_img[k], sg_model_input(T->m), n, h, w, T->mean, T->std);
        uint64_t key = sg_rng_key(T->st.seed, (uint64_t)T->st.iter, (uint64_t)k,
                                  (uint64_t)T->rank, SG_RNG_DROPOUT);
        sg_model_forward(T->m, 1, key);
        /* DDP averages gradients over ranks: with the global norm every rank's
         * gradient is scaled by world / (global valid pixels) so the average
         * is the gradient of the global mean. */
        double scale;
        if (T->global_norm)
            scale = global_valid > 0 ? (double)T->world / (double)global_valid : 0.0;
        else
            scale = T->slot_valid[k] > 0 ? 1.0 / ((double)T->slot_valid[k] * K) : 0.0;
        double ls = 0, la = 0;
        int64_t v = 0;
        ops->ce_fwd_bwd(be, sg_model_out(T->m), T->d_lab[k], n, T->C, hw,
                        T->cfg->data.ignore_index, (float)scale, sg_model_dout(T->m), &ls, &v);
        if (has_aux)
            ops->ce_fwd_bwd(be, sg_model_aux(T->m), T->d_lab[k], n, T->C, hw,
                            T->cfg->data.ignore_index, (float)(scale * aux_w),
                            sg_model_daux(T->m), &la, &v);
        if (T->global_norm) {
            main_sum += ls;
            aux_sum += la;
        } else if (v > 0) {
            main_sum += ls / (double)v / K;
            aux_sum += la / (double)v / K;
        }
        if (T->dbg && T->dbg->stop_at_iter == T->st.iter + 1 && k == K - 1) raise(SIGTERM);
        sg_ddp_set_sync(T->ddp, k == K - 1);
        sg_model_backward(T->m, k > 0);
    }
    if (sg_ddp_wait(T->ddp) != 0) return -1;
    sg_sgd_step(&T->opt, sg_lr_at(&T->sched, T->st.iter));
    /* global loss and the stop flag, the same on every rank */
    double red[3] = {main_sum, aux_sum, (double)g_stop_signal};
    if (sg_comm_allreduce_f64(T->comm, red, 3) != 0) return -1;
    double denom = T->global_norm ? (global_valid > 0 ? (double)global_valid : 1.0) : T->world;
    o->loss_main = red[0] / denom;
    o->loss_aux = red[1] / denom;
    o->loss = o->loss_main + (has_aux ? aux_w * o->loss_aux : 0.0);
    o->images = cnt[1];
    o->stop_signal = red[2] > 0 ? (g_stop_signal ? g_stop_signal : SIGTERM) : 0;
    return 0;
}

/* ---------------- reports ---------------- */

static void fmt_eta(char *buf, size_t n, double s) {
    if (!isfinite(s) || s < 0) s = 0;
    long t = (long)s;
    snprintf(buf, n, "%ld:%02ld:%02ld", t / 3600, (t / 60) % 60, t % 60);
}

static void log_progress(trainer *T, const step_out *o, double lr) {
    double t = now_s();
    sg_loader_stats ls;
    sg_loader_get_stats(T->loader, &ls);
    int64_t steps = T->st.iter - T->iter_log;
    double dt = t - T->t_log;
    double img_s = dt > 0 ? (double)steps * T->B * T->K * T->world / dt : 0;
    double wait = ls.consumer_wait_s - T->wait_log;
    double eta = steps > 0 ? dt / steps * (double)(T->st.total_steps - T->st.iter) : 0;
    sg_backend_info bi;
    sg_backend_get_info(T->be, &bi);
    char eta_s[32];
    fmt_eta(eta_s, sizeof eta_s, eta);
    if (T->rank == 0) {
        SG_INFO("iter %lld/%lld  epoch %lld  loss %.4f (main %.4f aux %.4f)  lr %.3e  "
                "%.1f img/s  data wait %.2fs  eta %s  mem %.1f MiB (peak %.1f)",
                (long long)T->st.iter, (long long)T->st.total_steps, (long long)T->st.epoch,
                o->loss, o->loss_main, o->loss_aux, lr, img_s, wait, eta_s,
                (double)bi.mem_in_use / 1048576.0, (double)bi.mem_peak / 1048576.0);
        sg_json j = {0};
        sg_json_begin(&j);
        sg_json_int(&j, "iter", (long long)T->st.iter);
        sg_json_int(&j, "epoch", (long long)T->st.epoch);
        sg_json_num(&j, "loss", o->loss);
        sg_json_num(&j, "loss_main", o->loss_main);
        sg_json_num(&j, "loss_aux", o->loss_aux);
        sg_json_num(&j, "lr", lr);
        sg_json_num(&j, "img_per_s", img_s);
        sg_json_num(&j, "data_wait_s", wait);
        sg_json_num(&j, "step_time_s", steps > 0 ? dt / steps : 0);
        sg_json_int(&j, "mem_bytes", (long long)bi.mem_in_use);
        sg_json_int(&j, "mem_peak_bytes", (long long)bi.mem_peak);
        sg_json_end(&j);
        sg_jsonl_append(T->metrics_path, &j);
        sg_json_free(&j);
    }
    T->t_log = t;
    T->wait_log = ls.consumer_wait_s;
    T->iter_log = T->st.iter;
}

/* Validation on the whole val split; rank 0 prints the table and writes
 * eval/iter_<N>.json and a metrics.jsonl line. Returns 0 or -1. */
static int run_validation(trainer *T, double *miou) {
    int64_t n;
    int64_t *idx = sg_evaluator_shard(sg_dataset_size(T->val_ds), T->world, T->rank, &n);
    int64_t *conf = calloc((size_t)T->C * T->C, sizeof(int64_t));
    SG_CHECK(conf != NULL, "out of host memory");
    double t0 = now_s();
    int rc = sg_evaluator_run(&T->ev_val, T->m, T->comm, idx, n, 0, conf);
    free(idx);
    if (rc == 0) {
        sg_metrics mt;
        sg_metrics_from_confusion(conf, T->C, &mt);
        *miou = mt.miou;
        if (T->rank == 0) {
            SG_INFO("validation at iteration %lld (%lld images, %.1fs):", (long long)T->st.iter,
                    (long long)sg_dataset_size(T->val_ds), now_s() - t0);
            sg_metrics_print_table(&mt, T->cfg, stdout);
            char dir[SG_STR + 16], path[SG_STR + 64];
            snprintf(dir, sizeof dir, "%s/eval", T->cfg->run_dir);
            if (mkdir(dir, 0777) != 0 && errno != EEXIST)
                SG_WARN("cannot create %s: %s", dir, strerror(errno));
            snprintf(path, sizeof path, "%s/iter_%08lld.json", dir, (long long)T->st.iter);
            sg_json j = {0};
            sg_json_begin(&j);
            sg_json_int(&j, "iter", (long long)T->st.iter);
            sg_json_str(&j, "split", T->cfg->data.val_split);
            sg_json_int(&j, "images", (long long)sg_dataset_size(T->val_ds));
            sg_metrics_to_json(&mt, T->cfg, &j);
            sg_json_end(&j);
            sg_write_text_file(path, j.buf);
            sg_json_begin(&j);
            sg_json_int(&j, "iter", (long long)T->st.iter);
            sg_json_int(&j, "epoch", (long long)T->st.epoch);
            sg_json_num(&j, "val_miou", mt.miou);
            sg_json_num(&j, "val_macc", mt.macc);
            sg_json_num(&j, "val_pixel_acc", mt.pixel_acc);
            sg_json_end(&j);
            sg_jsonl_append(T->metrics_path, &j);
            sg_json_free(&j);
        }
    }
    free(conf);
    return rc;
}

/* The samples the finished epoch left out (drop_last): positions
 * [end_pos, N) of its global order, evaluated once, sharded exactly. */
static int leftover_pass(trainer *T, int64_t end_pos) {
    int64_t N = sg_dataset_size(T->train_ds);
    int64_t total = N - end_pos;
    if (total <= 0) return 0;
    sg_sampler_permutation(&T->sampler, T->st.epoch, T->perm);
    int64_t n = sg_eval_shard_size(total, T->world, T->rank);
    int64_t *shard = malloc((size_t)(n > 0 ? n : 1) * sizeof(int64_t));
    int64_t *pos = malloc((size_t)(n > 0 ? n : 1) * sizeof(int64_t));
    SG_CHECK(shard && pos, "out of host memory");
    sg_eval_shard(total, T->world, T->rank, pos);
    for (int64_t i = 0; i < n; i++) shard[i] = T->perm[end_pos + pos[i]];
    if (T->dbg && T->dbg->seen_leftover)
        for (int64_t i = 0; i < n; i++) T->dbg->seen_leftover[shard[i]]++;
    int64_t *conf = calloc((size_t)T->C * T->C, sizeof(int64_t));
    SG_CHECK(conf != NULL, "out of host memory");
    int rc = sg_evaluator_run(&T->ev_left, T->m, T->comm, shard, n, T->st.epoch, conf);
    if (rc == 0) {
        sg_metrics mt;
        sg_metrics_from_confusion(conf, T->C, &mt);
        if (T->dbg) {
            T->dbg->last_leftover_miou = mt.miou;
            T->dbg->leftover_samples += total;
        }
        if (T->rank == 0) {
            SG_INFO("epoch %lld: leftover pass over the %lld samples drop_last left out: "
                    "mIoU %.2f", (long long)T->st.epoch, (long long)total, 100.0 * mt.miou);
            sg_json j = {0};
            sg_json_begin(&j);
            sg_json_int(&j, "iter", (long long)T->st.iter);
            sg_json_int(&j, "epoch", (long long)T->st.epoch);
            sg_json_num(&j, "leftover_miou", mt.miou);
            sg_json_int(&j, "leftover_samples", (long long)total);
            sg_json_end(&j);
            sg_jsonl_append(T->metrics_path, &j);
            sg_json_free(&j);
        }
    }
    free(conf);
    free(shard);
    free(pos);
    return rc;
}

/* Every rank enters (barrier first); rank 0 writes; the outcome is shared so
 * all ranks stop together if the write failed. */
static int write_checkpoint(trainer *T, int best) {
    if (sg_comm_barrier(T->comm) != 0) return -1;
    int64_t rc = 0;
    char path[SG_STR + 64];
    if (best)
        sg_ckpt_best_path(T->cfg->run_dir, path, sizeof path);
    else
        sg_ckpt_iter_path(T->cfg->run_dir, T->st.iter, path, sizeof path);
    if (T->rank == 0) {
        char dir[SG_STR + 32];
        rc = sg_ckpt_dir(T->cfg->run_dir, 1, dir, sizeof dir);
        if (rc == 0) rc = sg_ckpt_save(path, T->m, &T->opt, &T->st, &T->sched, T->cfg);
        if (rc == 0 && !best) sg_ckpt_prune(T->cfg->run_dir, T->cfg->train.keep_checkpoints);
        if (rc == 0) SG_INFO("checkpoint: %s", path);
    }
    if (sg_comm_allreduce_i64(T->comm, &rc, 1) != 0) return -1;
    if (rc != 0) {
        if (T->rank != 0) SG_ERROR("rank 0 failed to write checkpoint %s", path);
        return -1;
    }
    if (!best) T->last_ckpt_iter = T->st.iter;
    return 0;
}

static int evaluate_and_keep_best(trainer *T) {
    double miou = NAN;
    if (run_validation(T, &miou) != 0) return -1;
    if (T->dbg) T->dbg->last_val_miou = miou;
    if (!isnan(miou) && (isnan(T->st.best_miou) || miou > T->st.best_miou)) {
        T->st.best_miou = miou;
        T->st.best_iter = T->st.iter;
        if (write_checkpoint(T, 1) != 0) return -1;
    }
    return 0;
}

/* ---------------- the run ---------------- */

static int run_loop(trainer *T) {
    const sg_train_cfg *tc = &T->cfg->train;
    int64_t N = sg_dataset_size(T->train_ds);
    int64_t per_step_global = (int64_t)T->B * T->K * T->world;
    int64_t start_iter = T->st.iter;
    if (T->st.iter < T->st.total_steps && start_epoch_list(T) != 0) return 1;
    T->t_log = now_s();
    T->iter_log = T->st.iter;
    while (T->st.iter < T->st.total_steps) {
        if (T->epoch_steps_left == 0) { /* resumed exactly at an epoch's end */
            T->st.epoch++;
            T->st.sample_pos = 0;
            if (start_epoch_list(T) != 0) return 1;
            continue;
        }
        step_out o;
        double lr = sg_lr_at(&T->sched, T->st.iter);
        if (train_step(T, &o) != 0) return 1;
        T->st.iter++;
        T->epoch_steps_left--;
        T->st.sample_pos += per_step_global;
        if (T->dbg && T->dbg->step_loss && T->st.iter - 1 < T->dbg->step_loss_cap)
            T->dbg->step_loss[T->st.iter - 1] = o.loss;
        if (T->dbg) T->dbg->iters_done = T->st.iter;
        if (!isfinite(o.loss)) {
            SG_ERROR("non-finite loss (%g: main %g, aux %g) at iteration %lld, epoch %lld, lr %.3e: "
                     "lower train.lr, add train.warmup_iters, or check the labels (values >= "
                     "model.num_classes that are not data.ignore_index); the last checkpoint is "
                     "from iteration %lld", o.loss, o.loss_main, o.loss_aux, (long long)T->st.iter,
                     (long long)T->st.epoch, lr, (long long)T->last_ckpt_iter);
            return 1;
        }
        int last = T->st.iter == T->st.total_steps;
        if (T->st.iter % tc->log_every == 0 || last || o.stop_signal) log_progress(T, &o, lr);
        if (T->epoch_steps_left == 0) { /* epoch finished */
            int64_t end = T->st.sample_pos < N ? T->st.sample_pos : N;
            if (T->have_ev_left && leftover_pass(T, end) != 0) return 1;
            T->st.epoch++;
            T->st.sample_pos = 0;
            if (!last && !o.stop_signal && start_epoch_list(T) != 0) return 1;
        }
        if (o.stop_signal) {
            if (write_checkpoint(T, 0) != 0) return 1;
            SG_ERROR("interrupted by signal %d (%s) at iteration %lld; checkpoint written. "
                     "Resume with: segtrain train --config %s/config.yaml --resume auto",
                     o.stop_signal, o.stop_signal == SIGINT ? "SIGINT" : "SIGTERM",
                     (long long)T->st.iter, T->cfg->run_dir);
            return 128 + o.stop_signal;
        }
        if (last) break; /* the final evaluation and checkpoint follow */
        if (tc->eval_every > 0 && T->st.iter % tc->eval_every == 0 && T->have_ev_val &&
            evaluate_and_keep_best(T) != 0)
            return 1;
        if (tc->checkpoint_every > 0 && T->st.iter % tc->checkpoint_every == 0 &&
            write_checkpoint(T, 0) != 0)
            return 1;
    }
    if (T->st.iter == start_iter) {
        if (T->rank == 0)
            SG_INFO("already trained: %lld of %lld iterations done (run `segtrain eval` to "
                    "evaluate, or raise train.iters to go on)", (long long)T->st.iter,
                    (long long)T->st.total_steps);
        return 0;
    }
    /* evaluation first, so the final checkpoint carries the best mIoU */
    if (T->have_ev_val && evaluate_and_keep_best(T) != 0) return 1;
    if (write_checkpoint(T, 0) != 0) return 1;
    if (T->rank == 0) SG_INFO("training done: %lld iterations", (long long)T->st.iter);
    return 0;
}

int sg_train_run(const sg_config *cfg, const char *resume, sg_train_debug *dbg) {
    trainer T;
    memset(&T, 0, sizeof T);
    T.cfg = cfg;
    T.dbg = dbg;
    if (dbg) {
        dbg->last_val_miou = NAN;
        dbg->last_leftover_miou = NAN;
        dbg->leftover_samples = 0;
        dbg->iters_done = 0;
    }
    g_stop_signal = 0;
    struct sigaction sa, old_int, old_term;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &old_int);
    sigaction(SIGTERM, &sa, &old_term);
    int rc = setup(&T, resume);
    if (rc == 0) rc = run_loop(&T);
    teardown(&T);
    sigaction(SIGINT, &old_int, NULL);
    sigaction(SIGTERM, &old_term, NULL);
    return rc;
}
