/* cmd/trainer.c - the training loop (see trainer.h): setup and teardown,
 * epoch lists, one optimizer step (train_step), the run (run_loop) and
 * signals. Progress lines, evaluation, the leftover pass and checkpoint
 * writing are in train_events.c. */
#include "cmd/trainer.h"

#include <inttypes.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cmd/checkpoint.h"
#include "cmd/evaluator.h"
#include "cmd/log.h"
#include "cmd/lr_schedule.h"
#include "cmd/optimizer.h"
#include "cmd/trainer_internal.h"
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

double sg_tr_now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

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

/* model.pretrained: plain weights (segtrain or torchvision names) through
 * model_io; a segtrain checkpoint's optimizer state is not model weights, so
 * for one of those only the model tensors count (strict: all of them). */
static int load_pretrained(sg_model *m, const sg_config *cfg) {
    const char *path = cfg->model.pretrained;
    sg_st_file *f = sg_st_open(path);
    if (!f) return -1;
    const char *fmt = sg_st_meta(f, "format");
    int is_ckpt = fmt && strcmp(fmt, SG_CKPT_FORMAT) == 0;
    sg_load_report rep;
    int rc;
    if (is_ckpt && cfg->model.pretrained_strict)
        rc = sg_ckpt_load_model(f, m);
    else
        rc = sg_model_load_file(m, f, NULL, cfg->model.pretrained_strict, &rep);
    sg_st_close(f);
    if (rc == 0) SG_INFO("model.pretrained: initialised from %s", path);
    return rc;
}

static int setup_model(trainer *T) {
    const sg_config *cfg = T->cfg;
    sg_model_opts mo;
    if (sg_model_opts_from_config(&mo, cfg) != 0) return 2;
    T->m = sg_model_create(T->be, &mo);
    if (!T->m) return 2;
    sg_model_init(T->m, (uint64_t)cfg->seed);
    if (cfg->model.pretrained[0] && load_pretrained(T->m, cfg) != 0) {
        SG_ERROR("model.pretrained: loading %s failed (see above); set "
                 "model.pretrained_strict: false to skip mismatching keys",
                 cfg->model.pretrained);
        return 2;
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
    if (!resume) {
        if (T->rank == 0 && sg_ckpt_find_latest(T->cfg->run_dir, path, cap))
            SG_WARN("%s already holds checkpoints (newest %s): starting a new run over them "
                    "(pass --resume auto to continue that run instead)", T->cfg->run_dir, path);
        return 0;
    }
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
    T->idx = malloc((size_t)(N + (int64_t)T->B * T->K) * sizeof(int64_t));
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
    /* drop_last: whole steps only (the rest is the leftover). Otherwise the
     * last step is completed by repeating the list's first samples, as
     * DistributedSampler pads, so every micro-batch has batch_size images
     * (a batch of 1 cannot train BN) */
    int64_t use = T->epoch_steps_left * T->B * T->K;
    for (int64_t i = n; i < use; i++) T->idx[i] = T->idx[i - n];
    if (use == 0) return 0;
    return sg_loader_start(T->loader, T->idx, use, T->st.epoch);
}

/* ---------------- one optimizer step ---------------- */

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
        if (b->n > T->B || b->h != T->crop_h || b->w != T->crop_w) {
            SG_ERROR("train: the loader gave a batch of %d x %dx%d, expected at most %d x %dx%d "
                     "(data.crop_size); internal error", b->n, b->h, b->w, T->B, T->crop_h,
                     T->crop_w);
            sg_loader_release(T->loader, b);
            return -1;
        }
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

/* ---------------- the run ---------------- */

static int run_loop(trainer *T) {
    const sg_train_cfg *tc = &T->cfg->train;
    int64_t N = sg_dataset_size(T->train_ds);
    int64_t per_step_global = (int64_t)T->B * T->K * T->world;
    int64_t start_iter = T->st.iter;
    if (T->st.iter < T->st.total_steps && start_epoch_list(T) != 0) return 1;
    T->t_log = sg_tr_now_s();
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
        if (T->st.iter % tc->log_every == 0 || last || o.stop_signal) sg_tr_log_progress(T, &o, lr);
        if (T->epoch_steps_left == 0) { /* epoch finished */
            int64_t end = T->st.sample_pos < N ? T->st.sample_pos : N;
            if (T->have_ev_left && sg_tr_leftover_pass(T, end) != 0) return 1;
            T->st.epoch++;
            T->st.sample_pos = 0;
            if (!last && !o.stop_signal && start_epoch_list(T) != 0) return 1;
        }
        if (o.stop_signal) {
            if (sg_tr_write_checkpoint(T, 0) != 0) return 1;
            /* every rank's log records it; the console shows rank 0's line */
            sg_log(T->rank == 0 ? SG_LOG_ERROR : SG_LOG_INFO,
                   "interrupted by signal %d (%s) at iteration %lld; checkpoint written. "
                   "Resume with: segtrain train --config %s/config.yaml --resume auto",
                   o.stop_signal, o.stop_signal == SIGINT ? "SIGINT" : "SIGTERM",
                   (long long)T->st.iter, T->cfg->run_dir);
            return 128 + o.stop_signal;
        }
        if (last) break; /* the final evaluation and checkpoint follow */
        if (tc->eval_every > 0 && T->st.iter % tc->eval_every == 0 && T->have_ev_val &&
            sg_tr_evaluate_and_keep_best(T) != 0)
            return 1;
        if (tc->checkpoint_every > 0 && T->st.iter % tc->checkpoint_every == 0 &&
            sg_tr_write_checkpoint(T, 0) != 0)
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
    if (T->have_ev_val && sg_tr_evaluate_and_keep_best(T) != 0) return 1;
    if (sg_tr_write_checkpoint(T, 0) != 0) return 1;
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
