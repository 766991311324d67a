/* train/trainer.c - the training loop (see trainer.h): setup and teardown
 * around the step's machinery (train/train_core.h), epoch lists, feeding each
 * step from the loader (train_step), the run (run_loop) and signals.
 * Progress lines, evaluation, the leftover pass and checkpoint writing are in
 * train_events.c. */
#include "train/trainer.h"

#include <inttypes.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/cli.h"
#include "core/log.h"
#include "core/sigmask.h"
#include "data/dataset.h"
#include "data/formats.h"
#include "data/loader.h"
#include "data/sampler.h"
#include "dist/comm.h"
#include "dist/launch.h"
#include "model/model.h"
#include "train/checkpoint.h"
#include "train/evaluator.h"
#include "train/lr_schedule.h"
#include "train/train_core.h"
#include "train/trainer_internal.h"

static volatile sig_atomic_t g_stop_signal = 0;
static volatile sig_atomic_t g_first_from_parent = 0, g_echo_seen = 0;
static pid_t g_parent = 0;

/* First SIGINT/SIGTERM/SIGHUP: finish the step, checkpoint, exit. A second
 * one (impatient user) terminates at once - except the echo of the first:
 * whoever stops a whole job (systemd, Slurm, pkill, a closed terminal)
 * signals every process, and the launcher (our parent) forwards the same
 * request, so a worker gets it once from each. One signal from the parent
 * after one from elsewhere (or the reverse) is that echo and is absorbed;
 * escalating on it would kill every rank before the checkpoint. */
static volatile sig_atomic_t g_training = 0;  /* 0: setup, 1: steps are running */
static volatile sig_atomic_t g_sig_quiet = 0; /* not rank 0: no acknowledgement */

/* write(2) of a literal: async-signal-safe, unlike the logger */
#define SIG_SAY(lit) ((void)!write(STDERR_FILENO, lit, sizeof lit - 1))

/* Says at once what the first signal will do (rank 0; the user must not
 * wonder whether Ctrl-C was seen while a step or a setup stage runs). */
static void acknowledge(int sig) {
    if (g_sig_quiet) return;
    if (sig == SIGINT) SIG_SAY("\nsegtrain: Ctrl-C (SIGINT) received: ");
    else if (sig == SIGHUP) SIG_SAY("\nsegtrain: SIGHUP received: ");
    else SIG_SAY("\nsegtrain: SIGTERM received: ");
    if (g_training) SIG_SAY("will stop after this step and write a checkpoint; ");
    else
        SIG_SAY("will stop before the first training step (setup is still running; nothing to "
                "checkpoint yet); ");
    if (sig == SIGINT) SIG_SAY("press Ctrl-C again to stop now\n");
    else SIG_SAY("send the signal again to stop now\n");
}

static void on_signal(int sig, siginfo_t *si, void *uctx) {
    (void)uctx;
    int from_parent = si && si->si_code == SI_USER && g_parent > 1 && si->si_pid == g_parent;
    if (!g_stop_signal) {
        g_first_from_parent = from_parent;
        g_stop_signal = sig;
        acknowledge(sig);
        return;
    }
    if (!g_echo_seen && from_parent != g_first_from_parent) {
        g_echo_seen = 1;
        return;
    }
    if (!g_sig_quiet) SIG_SAY("\nsegtrain: second signal: stopping now, without a checkpoint\n");
    signal(sig, SIG_DFL);
    raise(sig);
}

static const char *stop_signal_name(int sig) {
    return sig == SIGINT ? "SIGINT, Ctrl-C" : sig == SIGHUP ? "SIGHUP" : "SIGTERM";
}

/* How to go on after an interruption. segtrain's own launcher (it sets
 * TORCHELASTIC_RUN_ID=segtrain) prints the whole command, every launcher
 * option kept (dist/launch_resume.h); under another launcher (torchrun,
 * mpirun, srun) only its command line knows them. */
static void resume_hint(const trainer *T, char *buf, size_t n) {
    const char *run_id = getenv("TORCHELASTIC_RUN_ID");
    if (run_id && !strcmp(run_id, "segtrain"))
        snprintf(buf, n, "The launcher prints the command to resume.");
    else if (T->c.world > 1)
        snprintf(buf, n,
                 "Resume with the same launcher command, its workers running: segtrain train "
                 "--config %s/config.yaml --resume auto",
                 T->cfg->run_dir);
    else
        snprintf(buf, n, "Resume with: segtrain train --config %s/config.yaml --resume auto",
                 T->cfg->run_dir);
}

/* ---------------- setup ---------------- */

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

static int64_t steps_in_list(const trainer *T, int64_t n_rank) {
    int64_t per_step = (int64_t)T->c.B * T->c.K;
    return T->cfg->train.drop_last ? n_rank / per_step : (n_rank + per_step - 1) / per_step;
}

/* Optimizer steps left from (epoch, sample position) to the end of
 * train.epochs with this run's world size and batch: the rest of the
 * current epoch's list plus the whole epochs after it. An epoch-based run
 * resumed with another world size (or batch) counts its length from here,
 * not from the iteration number, whose steps were another size. */
static int64_t epoch_steps_left(const trainer *T, int64_t epoch, int64_t pos) {
    int64_t epochs = T->cfg->train.epochs;
    if (epoch >= epochs) return 0;
    int64_t rest = steps_in_list(T, sg_sampler_per_rank(&T->sampler, pos));
    int64_t full = steps_in_list(T, sg_sampler_per_rank(&T->sampler, 0));
    return rest + (epochs - 1 - epoch) * full;
}

/* Which checkpoint to resume from: *found = 1 and its path, or a fresh
 * start. A fresh run over another run's checkpoints is refused (rank 0
 * looks): it would mix two runs in one directory, and retention would
 * delete the other run's files. SG_OK or SG_ERR_CONFIG (logged). */
static sg_status resolve_resume(trainer *T, const char *resume, char *path, size_t cap,
                                int *found) {
    *found = 0;
    const char *run_dir = T->cfg->run_dir;
    int is_auto = resume && strcmp(resume, "auto") == 0;
    if (is_auto && sg_ckpt_find_latest(run_dir, path, cap)) {
        *found = 1;
        return SG_OK;
    }
    if (!resume || is_auto) {
        char other[SG_STR + 64], id[SG_RUN_ID_LEN + 2];
        int n = T->c.rank == 0 ? sg_ckpt_foreign(run_dir, NULL, other, sizeof other, id) : 0;
        if (n > 0 && !is_auto) {
            SG_ERROR("%s already holds %d checkpoint file(s) of another run (newest %s%s%s): "
                     "a new run there would mix with them. Continue that run with --resume auto, "
                     "or start this one in a new run_dir (--set run_dir=...)",
                     run_dir, n, other,
                     strcmp(id, "?") == 0 ? ", unreadable"
                     : id[0]              ? ", run "
                                          : "",
                     strcmp(id, "?") == 0 ? "" : id);
            return SG_ERR_CONFIG;
        }
        if (n > 0) {
            SG_ERROR("--resume auto: no valid checkpoint to resume in %s/checkpoints, but it "
                     "holds %d checkpoint file(s) (newest %s, see the warnings above): starting "
                     "fresh would mix a new run with them. Move them away, or use a new run_dir "
                     "(--set run_dir=...)",
                     run_dir, n, other);
            return SG_ERR_CONFIG;
        }
        if (is_auto)
            SG_INFO("resume auto: no checkpoint in %s/checkpoints; starting fresh", run_dir);
        return SG_OK;
    }
    snprintf(path, cap, "%s", resume);
    *found = 1;
    return SG_OK;
}

/* The model keys of the checkpoint's stored config that differ from this
 * run's, for the message when its tensors do not fit ("" if unknown). */
static void model_keys_diff(const sg_st_file *f, const sg_config *cfg, char *out, size_t cap) {
    out[0] = 0;
    if (!sg_st_meta(f, "config")) return;
    sg_config *ck = malloc(sizeof *ck);
    SG_CHECK(ck != NULL, "out of host memory");
    sg_config_defaults(ck);
    if (sg_ckpt_read_config(f, ck) == SG_OK)
        sg_config_diff(ck, "checkpoint", cfg, "config", "model.", out, cap);
    free(ck);
}

/* The images of one optimizer step of the run that wrote the checkpoint:
 * its stored train.batch_size x train.accum_steps x its world size (this
 * run's batch and accumulation when the file stores no configuration). */
static int64_t ckpt_global_batch(const sg_st_file *f, const trainer *T, int world, int *per_rank,
                                 int *accum) {
    *per_rank = T->c.B;
    *accum = T->c.K;
    if (sg_st_meta(f, "config")) {
        sg_config *ck = malloc(sizeof *ck);
        SG_CHECK(ck != NULL, "out of host memory");
        sg_config_defaults(ck);
        if (sg_ckpt_read_config(f, ck) == SG_OK) {
            *per_rank = ck->train.batch_size;
            *accum = ck->train.accum_steps;
        }
        free(ck);
    }
    return (int64_t)*per_rank * *accum * world;
}

/* SG_OK, or SG_ERR_RUNTIME / SG_ERR_CONFIG after logging. A file the user
 * named (`named`: --resume PATH) that is unreadable, corrupt or not a
 * checkpoint is their input: SG_ERR_CONFIG; one --resume auto found valid a
 * moment ago and cannot read now: SG_ERR_RUNTIME. */
static sg_status load_resume(trainer *T, const char *path, int named) {
    char why[1024];
    sg_st_file *f = sg_ckpt_open_valid(path, why, sizeof why);
    if (!f) {
        SG_ERROR("--resume %s: %s; use another checkpoint or --resume auto", path, why);
        return named ? SG_ERR_CONFIG : SG_ERR_RUNTIME;
    }
    sg_train_state st;
    sg_status rc = sg_ckpt_read_state(f, &st);
    if (rc == SG_OK) {
        rc = sg_ckpt_load_model(f, T->c.m);
        if (rc != SG_OK) {
            char diff[2048];
            model_keys_diff(f, T->cfg, diff, sizeof diff);
            if (diff[0])
                SG_ERROR("--resume %s: the model config differs from the checkpoint's: %s. Resume "
                         "with the run's own model settings (its config.yaml)",
                         path, diff);
        }
    }
    if (rc == SG_OK) rc = sg_ckpt_load_optimizer(f, &T->c.opt);
    int old_b = 0, old_k = 0;
    int64_t old_global = rc == SG_OK ? ckpt_global_batch(f, T, st.world, &old_b, &old_k) : 0;
    if (rc == SG_OK && T->have_ema) {
        rc = sg_ckpt_load_ema(f, &T->ema, &T->ema_loaded);
        if (rc == SG_OK && !T->ema_loaded)
            SG_WARN("resume: %s holds no EMA weights (ema.*; it was written with "
                    "train.ema_decay 0): the EMA starts again from the current weights",
                    path);
    }
    sg_st_close(f);
    if (rc != SG_OK) {
        SG_ERROR("--resume %s: the checkpoint does not fit this model/config (see above)", path);
        /* the config (train.optimizer among them) or the file: the user's
         * choice, exit 2 */
        return SG_ERR_CONFIG;
    }
    /* one run per run_dir: resuming run A where run B keeps its checkpoints
     * would mix them (rank 0 looks; the outcome is agreed on) */
    char other[SG_STR + 64], id[SG_RUN_ID_LEN + 2];
    if (T->c.rank == 0 &&
        sg_ckpt_foreign(T->cfg->run_dir, st.run_id, other, sizeof other, id) > 0) {
        SG_ERROR("--resume %s: that is run %s, but %s holds checkpoints of another run (%s, run "
                 "%s): resume it into its own run_dir, or into a new one (--set run_dir=...)",
                 path, st.run_id[0] ? st.run_id : "(from before run ids)", T->cfg->run_dir, other,
                 id[0] ? id : "(from before run ids)");
        return SG_ERR_CONFIG;
    }
    if (st.seed != (uint64_t)T->cfg->seed)
        SG_WARN("resume: checkpoint seed %" PRIu64 ", config seed %d: the sample order and "
                "augmentations follow the config's seed from here on",
                st.seed, T->cfg->seed);
    if (st.world != T->c.world)
        SG_INFO("resume: world size %d (checkpoint written with %d): the global sample order "
                "is kept, position %lld of epoch %lld",
                T->c.world, st.world, (long long)st.sample_pos, (long long)st.epoch);
    int64_t new_global = (int64_t)T->c.B * T->c.K * T->c.world;
    if (T->c.rank == 0 && old_global > 0 && new_global != old_global) {
        char eg[96] = "";
        int64_t per = (int64_t)T->c.K * T->c.world;
        if (old_global % per == 0)
            snprintf(eg, sizeof eg, " (here: --set train.batch_size=%lld)",
                     (long long)(old_global / per));
        SG_WARN(
            "resume: the global batch changes from %lld to %lld images a step (train.batch_size "
            "%d x train.accum_steps %d x %d rank(s); the checkpoint's run had %d x %d x %d), "
            "which changes the training (the LR is not rescaled). To keep %lld, set "
            "train.batch_size and train.accum_steps so that batch_size x accum_steps x %d = "
            "%lld%s",
            (long long)old_global, (long long)new_global, T->c.B, T->c.K, T->c.world, old_b, old_k,
            st.world, (long long)old_global, T->c.world, (long long)old_global, eg);
    }
    int64_t total = T->cfg->train.iters > 0
                        ? T->st.total_steps
                        : st.iter + epoch_steps_left(T, st.epoch, st.sample_pos);
    if (st.total_steps != total)
        SG_WARN("resume: the run now has %lld optimizer steps (checkpoint: %lld%s); the LR "
                "schedule follows the new length",
                (long long)total, (long long)st.total_steps,
                T->cfg->train.iters > 0 ? ""
                                        : ": train.epochs counted from the sample position "
                                          "with this world size and batch");
    T->st = st;
    T->st.total_steps = total;
    T->st.world = T->c.world;
    T->st.seed = (uint64_t)T->cfg->seed;
    if (!T->st.run_id[0]) {
        sg_ckpt_new_run_id(T->st.run_id);
        SG_INFO("resume: %s was written before run ids; this run continues it as run %s (the "
                "files without a run id count as its own)",
                path, T->st.run_id);
    }
    T->last_ckpt_iter = st.iter;
    T->resumed = 1;
    SG_INFO("resumed from %s: run %s, iteration %lld, epoch %lld, sample %lld of the epoch", path,
            T->st.run_id, (long long)st.iter, (long long)st.epoch, (long long)st.sample_pos);
    return SG_OK;
}

/* Opens the run's TensorBoard event file on rank 0 (train.tensorboard); the
 * outcome is agreed on so no rank trains alone. SG_OK or SG_ERR_RUNTIME. */
static sg_status tb_start(trainer *T) {
    int64_t tb_failed = 0;
    if (T->c.rank == 0 && T->cfg->train.tensorboard && !T->tb) {
        char dir[SG_STR + 8];
        snprintf(dir, sizeof dir, "%s/tb", T->cfg->run_dir);
        T->tb = sg_tb_open(dir, T->st.iter);
        tb_failed = T->tb == NULL;
        if (T->tb) SG_INFO("TensorBoard: %s (tensorboard --logdir %s)", sg_tb_path(T->tb), dir);
    }
    if (sg_comm_allreduce_i64(T->c.comm, &tb_failed, 1) != 0 || tb_failed) return SG_ERR_RUNTIME;
    return SG_OK;
}

/* Every rank resolves --resume itself (auto: the newest valid file it sees).
 * A run_dir that is not shared between nodes, or a file another rank cannot
 * see, would start ranks at different iterations: DDP broadcasts rank 0's
 * weights but not the momentum, the sample position or the step count, so
 * the ranks would train apart and then meet in mismatched collectives.
 * Agree on (iteration, epoch, sample position) first. SG_OK, or
 * SG_ERR_RUNTIME (logged). */
static sg_status check_same_start(trainer *T) {
    int world = T->c.world;
    if (world <= 1) return SG_OK;
    int64_t mine[3] = {T->st.iter, T->st.epoch, T->st.sample_pos};
    /* a gather as a sum (each rank fills its own slot): the all-reduce is
     * the collective every backend already runs for the step */
    int64_t *all = calloc((size_t)world, sizeof mine);
    SG_CHECK(all != NULL, "out of host memory");
    memcpy(all + 3 * T->c.rank, mine, sizeof mine);
    sg_status rc = SG_OK;
    if (sg_comm_allreduce_i64(T->c.comm, all, 3 * (size_t)world) != 0) rc = SG_ERR_RUNTIME;
    for (int r = 1; rc == SG_OK && r < world; r++)
        if (memcmp(all + 3 * r, all, sizeof mine) != 0) {
            SG_ERROR("resume: rank %d starts at iteration %lld (epoch %lld, sample %lld) but rank "
                     "0 at iteration %lld (epoch %lld, sample %lld): every rank must see the same "
                     "checkpoint. Put run_dir on a filesystem shared by all nodes, or pass "
                     "--resume PATH to a file every rank can read",
                     r, (long long)all[3 * r], (long long)all[3 * r + 1], (long long)all[3 * r + 2],
                     (long long)all[0], (long long)all[1], (long long)all[2]);
            rc = SG_ERR_RUNTIME;
        }
    free(all);
    return rc;
}

static sg_status setup(trainer *T, const char *resume) {
    const sg_config *cfg = T->cfg;
    sg_train_core *c = &T->c;
    sg_stage(T->stages, "joining the job and opening the device");
    sg_status rc = sg_train_core_open(c, cfg);
    if (rc != SG_OK) return rc;
    g_sig_quiet = c->rank != 0;
    /* partial checkpoint files of a process killed while writing one: rank
     * 0, which holds the run directory's lock, removes them (each logged) */
    if (c->rank == 0) sg_ckpt_sweep_tmp(cfg->run_dir, 1);
    snprintf(T->metrics_path, sizeof T->metrics_path, "%s/metrics.jsonl", cfg->run_dir);

    sg_stage(T->stages, "indexing the datasets (data.root)");
    T->train_ds = sg_dataset_open(&cfg->data, sg_format_split(&cfg->data, 0), c->C);
    if (!T->train_ds) return SG_ERR_RUNTIME;
    if (cfg->data.val_split[0]) {
        T->val_ds = sg_dataset_open(&cfg->data, sg_format_split(&cfg->data, 1), c->C);
        if (!T->val_ds) return SG_ERR_RUNTIME;
    }
    sg_stage(T->stages, "checking that every rank sees the same dataset");
    rc = sg_comm_check_dataset(c->comm, dataset_hash(T->train_ds, T->val_ds));
    if (rc != SG_OK) return rc;
    int64_t N = sg_dataset_size(T->train_ds);
    T->sampler =
        (sg_sampler){N, c->world, cfg->data.shuffle, cfg->train.drop_last, (uint64_t)cfg->seed};
    int64_t steps_epoch = steps_in_list(T, sg_sampler_per_rank(&T->sampler, 0));
    if (steps_epoch < 1) {
        SG_ERROR("train: %lld training samples are fewer than one step needs (batch_size %d x "
                 "accum_steps %d x %d ranks); lower train.batch_size or train.accum_steps",
                 (long long)N, c->B, c->K, c->world);
        return SG_ERR_CONFIG;
    }
    T->steps_epoch = steps_epoch;
    T->st.total_steps = cfg->train.iters > 0 ? cfg->train.iters
                                             : (int64_t)cfg->train.epochs * steps_epoch;
    T->st.world = c->world;
    T->st.seed = (uint64_t)cfg->seed;
    T->st.best_miou = NAN;
    T->st.best_iter = -1;
    T->last_ckpt_iter = -1;
    /* a fresh run's: the launcher's (one per job, across its restarts: an
     * attempt that finds no checkpoint keeps the job's id) or a new one; a
     * resume keeps the file's */
    const char *env_id = getenv(SG_RUN_ID_ENV);
    if (env_id && !sg_ckpt_is_run_id(env_id)) {
        SG_ERROR("train: environment variable %s = '%.40s' is not a run id (16 hex digits "
                 "0-9a-f); unset it or give one",
                 SG_RUN_ID_ENV, env_id);
        return SG_ERR_CONFIG;
    }
    if (env_id) snprintf(T->st.run_id, sizeof T->st.run_id, "%s", env_id);
    else sg_ckpt_new_run_id(T->st.run_id);
    rc = sg_lr_schedule_init(&T->sched, &cfg->train, T->st.total_steps);
    if (rc != SG_OK) return rc;
    /* model, pretrained weights, freezing, resume: every rank does them; the
     * outcome is agreed on so no rank waits for one that failed */
    sg_stage(T->stages, "building the model (and loading weights or the checkpoint)");
    rc = sg_train_core_model(c, 1, 1);
    if (rc == SG_OK && cfg->train.ema_decay > 0) {
        rc = sg_ema_init(&T->ema, c->m, cfg->train.ema_decay, cfg->train.ema_every);
        T->have_ema = rc == SG_OK;
    }
    char path[SG_STR + 64];
    int found = 0;
    if (rc == SG_OK) rc = resolve_resume(T, resume, path, sizeof path, &found);
    if (rc == SG_OK && found) rc = load_resume(T, path, strcmp(resume, "auto") != 0);
    int64_t flag[2] = {rc == SG_ERR_RUNTIME, rc == SG_ERR_CONFIG};
    if (sg_comm_allreduce_i64(c->comm, flag, 2) != 0) return SG_ERR_RUNTIME;
    if (rc == SG_OK && (flag[0] || flag[1])) {
        SG_ERROR("another rank failed to set up the model or resume (see its log)");
        rc = flag[1] ? SG_ERR_CONFIG : SG_ERR_RUNTIME;
    }
    if (rc != SG_OK) return rc;
    rc = check_same_start(T);
    if (rc != SG_OK) return rc;
    if (T->sched.total_steps != T->st.total_steps) { /* an epoch-based run resumed */
        rc = sg_lr_schedule_init(&T->sched, &cfg->train, T->st.total_steps);
        if (rc != SG_OK) return rc;
    }
    /* the resume checks passed: only now does the run's config.yaml change
     * (a refused resume leaves the one its resume hint names) */
    if (c->rank == 0 && sg_cli_write_run_config(cfg) != SG_OK) rc = SG_ERR_RUNTIME;
    int64_t wrote = rc != SG_OK;
    if (sg_comm_allreduce_i64(c->comm, &wrote, 1) != 0 || wrote) return SG_ERR_RUNTIME;

    /* DDP (broadcasting the loaded state), the device slots, the plan: a
     * batch or crop the model cannot train on stops here, before any step */
    sg_stage(T->stages, "planning the model (DDP buckets, activation memory)");
    rc = sg_train_core_attach(c);
    if (rc != SG_OK) return rc;
    /* the EMA starts as the weights every rank now holds (timm: a copy of
     * the model when the EMA is made), unless the checkpoint had one */
    if (T->have_ema && !T->ema_loaded) sg_ema_copy_from_model(&T->ema);
    if (T->have_ema && c->rank == 0)
        SG_INFO("EMA of the weights: decay %g every %d step(s)%s; evaluation uses %s",
                cfg->train.ema_decay, cfg->train.ema_every,
                T->ema_loaded ? " (from the checkpoint)" : "",
                cfg->eval.use_ema ? "the EMA (eval.use_ema)" : "the trained weights");
    if (c->rank == 0 && (cfg->train.n_class_weights > 0 || cfg->train.ohem_thresh > 0)) {
        char ohem[128] = "";
        if (cfg->train.ohem_thresh > 0)
            snprintf(ohem, sizeof ohem,
                     "; OHEM on the main head: probability below %g, at least "
                     "%d pixels per image (aux head: plain)",
                     cfg->train.ohem_thresh, cfg->train.ohem_min_kept);
        SG_INFO("loss: cross-entropy%s%s, normalised %s",
                cfg->train.n_class_weights > 0 ? " with train.class_weights" : "", ohem,
                c->global_norm ? "over the whole step on all ranks (loss_norm global)"
                               : "per micro-batch (loss_norm local)");
    }

    /* TensorBoard: a new event file per (re)start, except for a resume with
     * no step left (run_loop opens one if an evaluation is still due) */
    if (!(T->resumed && T->st.iter >= T->st.total_steps) && tb_start(T) != SG_OK)
        return SG_ERR_RUNTIME;

    sg_stage(T->stages, "starting the data loaders");
    T->loader = sg_train_core_loader(c, T->train_ds);
    if (!T->loader) return SG_ERR_RUNTIME;
    if (T->val_ds) {
        rc = sg_evaluator_init(&T->ev_val, c->be, T->val_ds, cfg);
        if (rc != SG_OK) return rc;
        T->have_ev_val = 1;
        snprintf(T->ev_val.label, sizeof T->ev_val.label, "validation");
        /* a validation that cannot fit in memory stops the run now, not
         * after eval_every iterations (every rank checks its shard) */
        int64_t n;
        int64_t *idx = sg_evaluator_shard(sg_dataset_size(T->val_ds), c->world, c->rank, &n);
        int64_t mine = sg_evaluator_preflight(&T->ev_val, c->m, idx, n) != SG_OK, bad = mine;
        free(idx);
        if (sg_comm_allreduce_i64(c->comm, &bad, 1) != 0) return SG_ERR_RUNTIME;
        if (bad && !mine) SG_ERROR("another rank's validation images do not fit (see its log)");
        if (bad) return SG_ERR_CONFIG;
    }
    if (cfg->train.drop_last && cfg->train.leftover_eval) {
        rc = sg_evaluator_init(&T->ev_left, c->be, T->train_ds, cfg);
        if (rc != SG_OK) return rc;
        T->have_ev_left = 1;
        snprintf(T->ev_left.label, sizeof T->ev_left.label, "leftover pass");
    }
    T->idx = malloc((size_t)(N + (int64_t)c->B * c->K) * sizeof(int64_t));
    T->perm = malloc((size_t)N * sizeof(int64_t));
    SG_CHECK(T->idx && T->perm, "out of host memory");
    SG_INFO("training: %lld optimizer steps, %lld per epoch, %d img/step/rank (batch %d x accum "
            "%d), %d rank(s), %lld train samples, loss_norm %s",
            (long long)T->st.total_steps, (long long)steps_epoch, c->B * c->K, c->B, c->K, c->world,
            (long long)N, cfg->train.loss_norm);
    return SG_OK;
}

static void teardown(trainer *T) {
    /* first: a collective stuck behind a failed peer would make the frees
     * below wait on the device (dist/comm.h) */
    sg_comm_quiesce(T->c.comm);
    free(T->idx);
    free(T->perm);
    if (T->have_ev_val) sg_evaluator_free(&T->ev_val);
    if (T->have_ev_left) sg_evaluator_free(&T->ev_left);
    if (T->have_ema) sg_ema_free(&T->ema);
    sg_loader_destroy(T->loader);
    sg_dataset_close(T->train_ds);
    sg_dataset_close(T->val_ds);
    sg_tb_close(T->tb);
    T->tb = NULL;
    sg_train_core_close(&T->c); /* last: the above hold its backend */
}

/* ---------------- epoch lists ---------------- */

/* Starts the loader on this rank's share of the epoch from st.sample_pos.
 * SG_OK or SG_ERR_RUNTIME (logged). */
static sg_status start_epoch_list(trainer *T) {
    int64_t n =
        sg_sampler_rank_indices(&T->sampler, T->st.epoch, T->c.rank, T->st.sample_pos, T->idx);
    if (n < 0) {
        SG_ERROR("train: rank %d has no sample list for epoch %lld (internal error)", T->c.rank,
                 (long long)T->st.epoch);
        return SG_ERR_RUNTIME;
    }
    T->epoch_steps_left = steps_in_list(T, n);
    /* drop_last: whole steps only (the rest is the leftover). Otherwise the
     * last step is completed by repeating the list's first samples, as
     * DistributedSampler pads, so every micro-batch has batch_size images
     * (a batch of 1 cannot train BN) */
    int64_t use = T->epoch_steps_left * T->c.B * T->c.K;
    for (int64_t i = n; i < use; i++) T->idx[i] = T->idx[i - n];
    if (use == 0) return SG_OK;
    return sg_loader_start(T->loader, T->idx, use, T->st.epoch);
}

/* ---------------- one optimizer step ---------------- */

/* The step's micro-batches from the loader, staged in the slots' host
 * memory (all of them first: the step needs the whole step's valid-pixel
 * count before its first forward), then sg_train_step, which uploads them
 * while it computes. SG_OK or SG_ERR_RUNTIME (logged). */
static sg_status train_step(trainer *T, double lr, sg_step_out *o, int *stop_signal) {
    sg_train_core *c = &T->c;
    int K = 0;
    for (int k = 0; k < c->K; k++) {
        sg_batch *b = NULL;
        int r = sg_loader_next(T->loader, &b);
        if (r < 0) return SG_ERR_RUNTIME;
        if (r == 0) break;
        size_t px = (size_t)b->n * b->h * b->w;
        if (b->n > c->B || b->h != c->crop_h || b->w != c->crop_w) {
            SG_ERROR("train: the loader gave a batch of %d x %dx%d, expected at most %d x %dx%d "
                     "(data.crop_size); internal error",
                     b->n, b->h, b->w, c->B, c->crop_h, c->crop_w);
            sg_loader_release(T->loader, b);
            return SG_ERR_RUNTIME;
        }
        /* staged in the slot's host memory (the loader's batch goes back
         * at once); sg_train_step uploads it asynchronously */
        sg_micro_batch *mb = &c->slot[k];
        memcpy(mb->img_host, b->images, px * 3);
        memcpy(mb->lab_host, b->labels, px);
        mb->staged = 1;
        mb->n = b->n;
        mb->h = b->h;
        mb->w = b->w;
        mb->valid = b->valid_pixels;
        if (T->dbg && T->dbg->seen_train)
            for (int i = 0; i < b->n; i++) T->dbg->seen_train[b->indices[i]]++;
        sg_loader_release(T->loader, b);
        K++;
    }
    if (K == 0) {
        SG_ERROR("train: the loader ended the epoch early (internal error: step count)");
        return SG_ERR_RUNTIME;
    }
    /* a test's interruption inside the step: the step reads the flag after
     * the optimizer, as for a real signal arriving during it */
    if (T->dbg && T->dbg->stop_at_iter == T->st.iter + 1) raise(SIGTERM);
    sg_step_opts so = {.iter = T->st.iter, .lr = lr, .stop = &g_stop_signal};
    sg_status st = sg_train_step(c, c->slot, K, &so, o);
    if (st != SG_OK) return st;
    *stop_signal = o->stop ? (g_stop_signal ? g_stop_signal : SIGTERM) : 0;
    return SG_OK;
}

/* ---------------- the run ---------------- */

/* 1 if path is an evaluation report of run `run_id` (or one without a run
 * id, from before run ids). */
static int eval_report_of_run(const char *path, const char *run_id) {
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    char buf[4096];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    char want[64];
    snprintf(want, sizeof want, "\"run_id\":\"%s\"", run_id);
    return strstr(buf, want) != NULL || strstr(buf, "\"run_id\"") == NULL;
}

/* A run resumed at an iteration whose evaluation was due (eval_every, or
 * the last iteration) but never ran - the run was interrupted right after
 * that step - evaluates first, as the uninterrupted run did. Rank 0 looks
 * for <run_dir>/eval/iter_<N>.json of this run and tells the others.
 * SG_OK or SG_ERR_RUNTIME. */
static sg_status pending_evaluation(trainer *T, int *pending) {
    *pending = 0;
    const sg_train_cfg *tc = &T->cfg->train;
    int64_t it = T->st.iter;
    int due = T->resumed && T->have_ev_val && it > 0 &&
              ((tc->eval_every > 0 && it % tc->eval_every == 0) || it == T->st.total_steps);
    if (!due) return SG_OK;
    int64_t missing = 0;
    if (T->c.rank == 0) {
        char path[SG_STR + 64];
        snprintf(path, sizeof path, "%s/eval/iter_%08lld.json", T->cfg->run_dir, (long long)it);
        missing = !eval_report_of_run(path, T->st.run_id);
    }
    if (sg_comm_allreduce_i64(T->c.comm, &missing, 1) != 0) return SG_ERR_RUNTIME;
    *pending = missing != 0;
    return SG_OK;
}

/* The steps until the run is done or a signal stops it (*stop_signal set,
 * after the checkpoint). SG_OK or SG_ERR_RUNTIME (logged). */
static sg_status run_loop_body(trainer *T, int *stop_signal_out) {
    const sg_train_cfg *tc = &T->cfg->train;
    int64_t N = sg_dataset_size(T->train_ds);
    int64_t per_step_global = (int64_t)T->c.B * T->c.K * T->c.world;
    int64_t start_iter = T->st.iter;
    sg_stage(T->stages, NULL); /* setup is done; the first step is named below */
    /* a signal during setup (acknowledged then) stops here, before any
     * step: nothing new to checkpoint. All ranks agree, as for a step. */
    g_training = 1;
    int64_t early = g_stop_signal != 0;
    if (sg_comm_allreduce_i64(T->c.comm, &early, 1) != 0) return SG_ERR_RUNTIME;
    if (early) {
        int sig = g_stop_signal ? g_stop_signal : SIGTERM;
        char hint[SG_STR + 256];
        resume_hint(T, hint, sizeof hint);
        SG_INFO("interrupted by signal %d (%s) during setup, before any training step: nothing "
                "new to checkpoint (%s). %s",
                sig, stop_signal_name(sig),
                T->last_ckpt_iter >= 0 ? "the run stays at its last checkpoint"
                                       : "no step was trained",
                hint);
        *stop_signal_out = sig;
        return SG_OK;
    }
    int pending = 0;
    if (pending_evaluation(T, &pending) != SG_OK) return SG_ERR_RUNTIME;
    if (pending) {
        if (T->c.rank == 0)
            SG_INFO("resume: the evaluation due at iteration %lld did not run before the "
                    "interruption; running it now",
                    (long long)T->st.iter);
        if (tb_start(T) != SG_OK || sg_tr_evaluate_and_keep_best(T) != SG_OK) return SG_ERR_RUNTIME;
        /* a finished run's last checkpoint carries the best mIoU */
        if (T->st.iter == T->st.total_steps && sg_tr_write_checkpoint(T, 0) != SG_OK)
            return SG_ERR_RUNTIME;
    }
    if (T->st.iter < T->st.total_steps && start_epoch_list(T) != SG_OK) return SG_ERR_RUNTIME;
    T->t_log = sg_now_s();
    T->paused_s = 0;
    T->iter_log = T->st.iter;
    while (T->st.iter < T->st.total_steps) {
        if (T->epoch_steps_left == 0) { /* resumed exactly at an epoch's end */
            T->st.epoch++;
            T->st.sample_pos = 0;
            if (start_epoch_list(T) != SG_OK) return SG_ERR_RUNTIME;
            continue;
        }
        sg_step_out o;
        int stop_signal = 0;
        double lr = sg_lr_at(&T->sched, T->st.iter);
        if (T->stages)
            sg_stage(T->stages, "the first training step (creating the kernels' primitives)");
        if (train_step(T, lr, &o, &stop_signal) != SG_OK) return SG_ERR_RUNTIME;
        if (T->stages) { /* setup is over */
            sg_stage_watch_stop(T->stages);
            T->stages = NULL;
        }
        T->st.iter++;
        if (T->have_ema) sg_ema_after_step(&T->ema, T->st.iter);
        T->epoch_steps_left--;
        T->st.sample_pos += per_step_global;
        if (T->dbg && T->dbg->step_loss && T->st.iter - 1 < T->dbg->step_loss_cap)
            T->dbg->step_loss[T->st.iter - 1] = o.loss;
        if (T->dbg) T->dbg->iters_done = T->st.iter;
        if (!isfinite(o.loss)) {
            SG_ERROR(
                "non-finite loss (%g: main %g, aux %g) at iteration %lld, epoch %lld, lr %.3e: "
                "lower train.lr, add train.warmup_iters, or check the labels (values >= "
                "model.num_classes that are not data.ignore_index); the last checkpoint is "
                "from iteration %lld",
                o.loss, o.loss_main, o.loss_aux, (long long)T->st.iter, (long long)T->st.epoch, lr,
                (long long)T->last_ckpt_iter);
            return SG_ERR_RUNTIME;
        }
        int last = T->st.iter == T->st.total_steps;
        if (T->st.iter % tc->log_every == 0 || last || stop_signal) sg_tr_log_progress(T, &o, lr);
        sg_tr_show_progress(T, &o);
        if (T->epoch_steps_left == 0) { /* epoch finished */
            int64_t end = T->st.sample_pos < N ? T->st.sample_pos : N;
            if (T->have_ev_left && sg_tr_leftover_pass(T, end) != SG_OK) return SG_ERR_RUNTIME;
            T->st.epoch++;
            T->st.sample_pos = 0;
            if (!last && !stop_signal && start_epoch_list(T) != SG_OK) return SG_ERR_RUNTIME;
        }
        if (stop_signal) {
            sg_tr_leftover_flush(T);
            if (sg_tr_write_checkpoint(T, 0) != SG_OK) return SG_ERR_RUNTIME;
            /* every rank's log records it; the console shows rank 0's
             * line: an interruption, not an error */
            char hint[SG_STR + 256];
            resume_hint(T, hint, sizeof hint);
            SG_INFO("interrupted by signal %d (%s) at iteration %lld; checkpoint written. %s",
                    stop_signal, stop_signal_name(stop_signal), (long long)T->st.iter, hint);
            *stop_signal_out = stop_signal;
            return SG_OK;
        }
        if (last) break; /* the final evaluation and checkpoint follow */
        if (tc->eval_every > 0 && T->st.iter % tc->eval_every == 0 && T->have_ev_val &&
            sg_tr_evaluate_and_keep_best(T) != SG_OK)
            return SG_ERR_RUNTIME;
        if (tc->checkpoint_every > 0 && T->st.iter % tc->checkpoint_every == 0 &&
            sg_tr_write_checkpoint(T, 0) != SG_OK)
            return SG_ERR_RUNTIME;
    }
    if (T->st.iter == start_iter) {
        if (T->c.rank == 0)
            SG_INFO("already trained: %lld of %lld iterations done (run `segtrain eval` to "
                    "evaluate, or raise train.iters to go on)",
                    (long long)T->st.iter, (long long)T->st.total_steps);
        return SG_OK;
    }
    sg_tr_leftover_flush(T);
    /* evaluation first, so the final checkpoint carries the best mIoU */
    if (T->have_ev_val && sg_tr_evaluate_and_keep_best(T) != SG_OK) return SG_ERR_RUNTIME;
    if (sg_tr_write_checkpoint(T, 0) != SG_OK) return SG_ERR_RUNTIME;
    if (T->c.rank == 0) SG_INFO("training done: %lld iterations", (long long)T->st.iter);
    return SG_OK;
}

/* The loop under the live progress line, which ends with it whatever the
 * outcome. */
static sg_status run_loop(trainer *T, int *stop_signal_out) {
    sg_progress_begin(&T->prog, "train", T->st.total_steps, T->c.rank == 0);
    sg_progress_units(&T->prog, "steps", "it", T->cfg->train.progress_s, T->st.iter);
    sg_status rc = run_loop_body(T, stop_signal_out);
    sg_progress_end(&T->prog);
    return rc;
}

sg_status sg_train_run(const sg_config *cfg, const char *resume, sg_train_debug *dbg,
                       int *stop_signal) {
    int stopped_by = 0;
    trainer T;
    memset(&T, 0, sizeof T);
    T.cfg = cfg;
    T.c.stop = &g_stop_signal; /* SIGTERM while joining the job stops it at once */
    T.dbg = dbg;
    if (dbg) {
        dbg->last_val_miou = NAN;
        dbg->last_leftover_miou = NAN;
        dbg->leftover_samples = 0;
        dbg->iters_done = 0;
        dbg->graph_captures = dbg->graph_launches = 0;
    }
    g_stop_signal = 0;
    g_first_from_parent = 0;
    g_echo_seen = 0;
    g_parent = getppid();
    g_training = 0;
    /* until the communicator knows the rank: the launcher's RANK */
    const char *rank_env = getenv("RANK");
    g_sig_quiet = rank_env && rank_env[0] && strcmp(rank_env, "0") != 0;
    /* SIGHUP too: the launcher forwards it when its terminal closes, and
     * the default action would end every rank without a checkpoint. An
     * ignored SIGHUP (nohup) stays ignored; SIGINT and SIGTERM are always
     * caught (a script's background job starts with SIGINT ignored, and
     * `kill -INT` must still stop it cleanly). */
    /* On an alternate stack (core/sigmask.h): a signal that interrupts a
     * oneDNN GEMM kernel must not write its frame where that kernel points
     * the stack pointer (a heap buffer). Every other thread blocks these. */
    const int sigs[3] = {SIGINT, SIGTERM, SIGHUP};
    struct sigaction old[3];
    sigset_t mask;
    sigemptyset(&mask);
    for (int i = 0; i < 3; i++) sigaddset(&mask, sigs[i]);
    for (int i = 0; i < 3; i++) {
        sigaction(sigs[i], NULL, &old[i]);
        if ((sigs[i] != SIGHUP || old[i].sa_handler != SIG_IGN) &&
            sg_sigaction_onstack(sigs[i], on_signal, &mask, NULL) != SG_OK) {
            for (int k = 0; k < i; k++) sigaction(sigs[k], &old[k], NULL);
            if (stop_signal) *stop_signal = 0;
            return SG_ERR_RUNTIME; /* logged */
        }
    }
    T.stages = sg_stage_watch_start(); /* names slow setup stages */
    sg_status rc = setup(&T, resume);
    if (rc == SG_OK) rc = run_loop(&T, &stopped_by);
    sg_stage_watch_stop(T.stages);
    T.stages = NULL;
    g_training = 0;
    if (T.c.be && cfg->cuda.graphs) { /* what the graphs did, for the log and the tests */
        sg_backend_info bi;
        sg_backend_get_info(T.c.be, &bi);
        SG_INFO("cuda.graphs: %ld passes recorded, %ld launched", bi.graph_captures,
                bi.graph_launches);
        if (dbg) {
            dbg->graph_captures = bi.graph_captures;
            dbg->graph_launches = bi.graph_launches;
        }
    }
    teardown(&T);
    for (int i = 0; i < 3; i++) sigaction(sigs[i], &old[i], NULL);
    /* a run that failed while stopping on a signal (SIGTERM while joining
     * the job, or while a step waited for a peer) stopped because of it */
    if (!stopped_by && rc != SG_OK && g_stop_signal) stopped_by = (int)g_stop_signal;
    if (stop_signal) *stop_signal = stopped_by;
    return rc;
}
