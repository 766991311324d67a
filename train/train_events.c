/* train/train_events.c - what the training loop does besides steps: progress
 * lines and metrics.jsonl, validation (class table, eval/iter_<N>.json, best
 * checkpoint), the leftover-sample pass, and checkpoint writing by rank 0. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/log.h"
#include "data/formats.h"
#include "data/sampler.h"
#include "dist/launch_report.h"
#include "io/json.h"
#include "train/checkpoint.h"
#include "train/metrics.h"
#include "train/progress.h"
#include "train/trainer_internal.h"

/* Validations still to run after this iteration (every eval_every, and the
 * final one). */
static int64_t validations_left(const trainer *T) {
    if (!T->have_ev_val) return 0;
    int64_t e = T->cfg->train.eval_every, left = 1;
    if (e > 0) left += (T->st.total_steps - 1) / e - T->st.iter / e;
    return left > 0 ? left : 0;
}

/* Folded leftover passes as a suffix of the progress line ("" when none). */
static void leftover_suffix(trainer *T, char *buf, size_t n) {
    buf[0] = 0;
    if (T->left_folded == 0) return;
    if (T->left_folded == 1)
        snprintf(buf, n, "  leftover mIoU %.2f (epoch %lld)", 100.0 * T->left_miou,
                 (long long)T->left_epoch);
    else
        snprintf(buf, n,
                 "  leftover mIoU %.2f (epoch %lld; %lld epochs since the last line, "
                 "every value in metrics.jsonl)",
                 100.0 * T->left_miou, (long long)T->left_epoch, (long long)T->left_folded);
    T->left_folded = 0;
}

void sg_tr_log_progress(trainer *T, const sg_step_out *o, double lr) {
    double t = sg_now_s();
    sg_loader_stats ls;
    sg_loader_get_stats(T->loader, &ls);
    int64_t steps = T->st.iter - T->iter_log;
    /* the steps' own time: evaluations and checkpoints since the last line
     * are not training throughput */
    double dt = t - T->t_log - T->paused_s;
    if (dt <= 0) dt = t - T->t_log;
    double img_s = dt > 0 ? (double)steps * T->c.B * T->c.K * T->c.world / dt : 0;
    double wait = ls.consumer_wait_s - T->wait_log;
    /* ETA: a smoothed step time (one slow interval does not swing it) for the
     * steps left, plus the validations left at the last one's duration */
    if (steps > 0) sg_ema(&T->step_s_ema, dt / (double)steps, 0.3);
    double eta = T->step_s_ema * (double)(T->st.total_steps - T->st.iter) +
                 T->val_s * (double)validations_left(T);
    sg_backend_info bi;
    sg_backend_get_info(T->c.be, &bi);
    char eta_s[32], left[160];
    sg_fmt_duration(eta_s, sizeof eta_s, eta);
    leftover_suffix(T, left, sizeof left);
    if (T->c.rank == 0) {
        sg_progress_logged(&T->prog);
        SG_INFO("iter %lld/%lld  epoch %lld  loss %.4f (main %.4f aux %.4f)  lr %.3e  "
                "%.1f img/s  data wait %.2fs  eta %s  mem %.1f MiB (peak %.1f)%s",
                (long long)T->st.iter, (long long)T->st.total_steps, (long long)T->st.epoch,
                o->loss, o->loss_main, o->loss_aux, lr, img_s, wait, eta_s,
                (double)bi.mem_in_use / 1048576.0, (double)bi.mem_peak / 1048576.0, left);
        int64_t it = T->st.iter;
        sg_tb_scalar(T->tb, it, "train/loss", o->loss);
        sg_tb_scalar(T->tb, it, "train/loss_main", o->loss_main);
        sg_tb_scalar(T->tb, it, "train/loss_aux", o->loss_aux);
        sg_tb_scalar(T->tb, it, "train/lr", lr);
        if (T->c.opt.clip > 0) sg_tb_scalar(T->tb, it, "train/grad_norm", o->grad_norm);
        sg_tb_scalar(T->tb, it, "train/img_per_s", img_s);
        sg_tb_scalar(T->tb, it, "train/data_wait_s", wait);
        sg_tb_scalar(T->tb, it, "train/restart", (double)sg_comm_restart_count(T->c.comm));
        sg_tb_flush(T->tb);
        sg_json j = {0};
        sg_json_begin(&j);
        sg_json_int(&j, "iter", (long long)T->st.iter);
        sg_json_int(&j, "epoch", (long long)T->st.epoch);
        sg_json_num(&j, "loss", o->loss);
        sg_json_num(&j, "loss_main", o->loss_main);
        sg_json_num(&j, "loss_aux", o->loss_aux);
        sg_json_num(&j, "lr", lr);
        /* train.clip_grad_norm: the last step's norm before clipping */
        if (T->c.opt.clip > 0) sg_json_num(&j, "grad_norm", o->grad_norm);
        sg_json_num(&j, "img_per_s", img_s);
        sg_json_num(&j, "data_wait_s", wait);
        sg_json_num(&j, "step_time_s", steps > 0 ? dt / steps : 0);
        sg_json_int(&j, "mem_bytes", (long long)bi.mem_in_use);
        sg_json_int(&j, "mem_peak_bytes", (long long)bi.mem_peak);
        sg_json_str(&j, "run_id", T->st.run_id);
        /* how many times the launcher restarted the job so far (--max-restarts) */
        sg_json_int(&j, "restart", (long long)sg_comm_restart_count(T->c.comm));
        sg_json_end(&j);
        sg_jsonl_append(T->metrics_path, &j);
        sg_json_free(&j);
    }
    T->t_log = t;
    T->paused_s = 0;
    T->wait_log = ls.consumer_wait_s;
    T->iter_log = T->st.iter;
}

void sg_tr_show_progress(trainer *T, const sg_step_out *o) {
    snprintf(T->prog.note, sizeof T->prog.note, "loss %.4f", o->loss);
    T->prog.extra_s = T->val_s * (double)validations_left(T);
    sg_progress_update(&T->prog, T->st.iter);
}

/* The class table through the log, so logs/rank<N>.log has it too. */
static void log_table(const sg_metrics *mt, const sg_config *cfg) {
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    SG_CHECK(f != NULL, "out of host memory");
    sg_metrics_print_table(mt, cfg, f);
    fclose(f);
    for (char *line = text, *nl; line && *line; line = nl ? nl + 1 : NULL) {
        nl = strchr(line, '\n');
        if (nl) *nl = 0;
        SG_INFO("%s", line);
    }
    free(text);
}

/* Validation on the whole val split; rank 0 logs the table and writes
 * eval/iter_<N>.json, a metrics.jsonl line and the TensorBoard scalars.
 * SG_OK or SG_ERR_RUNTIME. */
static sg_status run_validation(trainer *T, double *miou) {
    int64_t n;
    int64_t *idx = sg_evaluator_shard(sg_dataset_size(T->val_ds), T->c.world, T->c.rank, &n);
    int64_t *conf = calloc((size_t)T->c.C * T->c.C, sizeof(int64_t));
    SG_CHECK(conf != NULL, "out of host memory");
    double t0 = sg_now_s();
    sg_status rc = sg_evaluator_run(&T->ev_val, T->c.m, T->c.comm, idx, n, 0, conf);
    free(idx);
    if (rc == SG_OK) {
        sg_metrics mt;
        sg_metrics_from_confusion(conf, T->c.C, &mt);
        *miou = mt.miou;
        if (T->c.rank == 0) {
            SG_INFO("validation at iteration %lld (%lld images, %.1fs):", (long long)T->st.iter,
                    (long long)sg_dataset_size(T->val_ds), sg_now_s() - t0);
            log_table(&mt, T->cfg);
            char dir[SG_STR + 16], path[SG_STR + 64];
            snprintf(dir, sizeof dir, "%s/eval", T->cfg->run_dir);
            if (mkdir(dir, 0777) != 0 && errno != EEXIST)
                SG_WARN("cannot create %s: %s", dir, strerror(errno));
            snprintf(path, sizeof path, "%s/iter_%08lld.json", dir, (long long)T->st.iter);
            sg_json j = {0};
            sg_json_begin(&j);
            sg_json_int(&j, "iter", (long long)T->st.iter);
            sg_json_str(&j, "run_id", T->st.run_id);
            sg_json_str(&j, "split", sg_format_split(&T->cfg->data, 1));
            sg_json_int(&j, "images", (long long)sg_dataset_size(T->val_ds));
            sg_metrics_to_json(&mt, T->cfg, &j);
            sg_json_end(&j);
            sg_write_text_file(path, j.buf);
            sg_json_begin(&j);
            sg_json_int(&j, "iter", (long long)T->st.iter);
            sg_json_int(&j, "epoch", (long long)T->st.epoch);
            sg_json_str(&j, "run_id", T->st.run_id);
            sg_json_num(&j, "val_miou", mt.miou);
            sg_json_num(&j, "val_macc", mt.macc);
            sg_json_num(&j, "val_pixel_acc", mt.pixel_acc);
            sg_json_end(&j);
            sg_jsonl_append(T->metrics_path, &j);
            sg_json_free(&j);
            sg_tb_scalar(T->tb, T->st.iter, "val/mIoU", mt.miou);
            sg_tb_scalar(T->tb, T->st.iter, "val/mAcc", mt.macc);
            sg_tb_scalar(T->tb, T->st.iter, "val/pixel_acc", mt.pixel_acc);
            for (int c = 0; c < mt.num_classes; c++) {
                if (isnan(mt.iou[c])) continue; /* absent class: no IoU, as in the eval JSON */
                char name[SG_NAME], tag[SG_NAME + 16];
                snprintf(tag, sizeof tag, "val/iou/%s", sg_class_name(T->cfg, c, name));
                sg_tb_scalar(T->tb, T->st.iter, tag, mt.iou[c]);
            }
            sg_tb_flush(T->tb);
        }
    }
    free(conf);
    T->val_s = sg_now_s() - t0;
    T->paused_s += T->val_s;
    return rc;
}

/* The samples the finished epoch left out (drop_last): positions
 * [end_pos, N) of its global order, evaluated once, sharded exactly. */
static sg_status leftover_pass(trainer *T, int64_t end_pos) {
    int64_t N = sg_dataset_size(T->train_ds);
    int64_t total = N - end_pos;
    if (total <= 0) return SG_OK;
    sg_sampler_permutation(&T->sampler, T->st.epoch, T->perm);
    int64_t n = sg_eval_shard_size(total, T->c.world, T->c.rank);
    int64_t *shard = malloc((size_t)(n > 0 ? n : 1) * sizeof(int64_t));
    int64_t *pos = malloc((size_t)(n > 0 ? n : 1) * sizeof(int64_t));
    SG_CHECK(shard && pos, "out of host memory");
    sg_eval_shard(total, T->c.world, T->c.rank, pos);
    for (int64_t i = 0; i < n; i++) shard[i] = T->perm[end_pos + pos[i]];
    if (T->dbg && T->dbg->seen_leftover)
        for (int64_t i = 0; i < n; i++) T->dbg->seen_leftover[shard[i]]++;
    int64_t *conf = calloc((size_t)T->c.C * T->c.C, sizeof(int64_t));
    SG_CHECK(conf != NULL, "out of host memory");
    sg_status rc = sg_evaluator_run(&T->ev_left, T->c.m, T->c.comm, shard, n, T->st.epoch, conf);
    if (rc == SG_OK) {
        sg_metrics mt;
        sg_metrics_from_confusion(conf, T->c.C, &mt);
        if (T->dbg) {
            T->dbg->last_leftover_miou = mt.miou;
            T->dbg->leftover_samples += total;
        }
        if (T->c.rank == 0) {
            /* epochs shorter than a log interval would print a line each:
             * the next progress line carries the newest instead */
            if (T->steps_epoch < T->cfg->train.log_every) {
                T->left_folded++;
                T->left_epoch = T->st.epoch;
                T->left_miou = mt.miou;
            } else {
                SG_INFO("epoch %lld: leftover pass over the %lld samples drop_last left out: "
                        "mIoU %.2f",
                        (long long)T->st.epoch, (long long)total, 100.0 * mt.miou);
            }
            sg_tb_scalar(T->tb, T->st.iter, "leftover/mIoU", mt.miou);
            sg_json j = {0};
            sg_json_begin(&j);
            sg_json_int(&j, "iter", (long long)T->st.iter);
            sg_json_int(&j, "epoch", (long long)T->st.epoch);
            sg_json_str(&j, "run_id", T->st.run_id);
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

/* eval.use_ema: evaluations run on the EMA, swapped into the model and
 * back (exact copies: training goes on from its own weights bit for bit). */
static int ema_in(trainer *T) {
    if (!T->have_ema || !T->cfg->eval.use_ema) return 0;
    sg_ema_swap(&T->ema);
    return 1;
}

sg_status sg_tr_leftover_pass(trainer *T, int64_t end_pos) {
    double t0 = sg_now_s();
    int swapped = ema_in(T);
    sg_status rc = leftover_pass(T, end_pos);
    if (swapped) sg_ema_swap(&T->ema);
    T->paused_s += sg_now_s() - t0;
    return rc;
}

void sg_tr_leftover_flush(trainer *T) {
    if (T->left_folded == 0 || T->c.rank != 0) return;
    SG_INFO("epoch %lld: leftover pass mIoU %.2f%s", (long long)T->left_epoch, 100.0 * T->left_miou,
            T->left_folded > 1 ? " (the newest of several; every value "
                                 "is in metrics.jsonl)"
                               : "");
    T->left_folded = 0;
}

/* Every rank enters (barrier first); rank 0 writes; the outcome is shared so
 * all ranks stop together if the write failed. */
static sg_status write_checkpoint(trainer *T, int best) {
    if (sg_comm_barrier(T->c.comm) != 0) return SG_ERR_RUNTIME;
    int64_t rc = 0; /* rank 0's outcome, 0 or non-zero, summed over ranks */
    char path[SG_STR + 64];
    if (best) sg_ckpt_best_path(T->cfg->run_dir, path, sizeof path);
    else sg_ckpt_iter_path(T->cfg->run_dir, T->st.iter, path, sizeof path);
    if (T->c.rank == 0) {
        char dir[SG_STR + 32];
        rc = sg_ckpt_dir(T->cfg->run_dir, 1, dir, sizeof dir);
        if (rc == 0)
            rc = sg_ckpt_save_ema(path, T->c.m, &T->c.opt, &T->st, &T->sched, T->cfg,
                                  T->have_ema ? &T->ema : NULL);
        if (rc == 0 && !best)
            sg_ckpt_prune(T->cfg->run_dir, T->cfg->train.keep_checkpoints, T->st.iter,
                          T->st.run_id);
        if (rc == 0) SG_INFO("checkpoint: %s", path);
        /* under segtrain's launcher: progress, for its restart rule */
        if (rc == 0 && !best) sg_launch_report_checkpoint((long long)T->st.iter);
    }
    if (sg_comm_allreduce_i64(T->c.comm, &rc, 1) != 0) return SG_ERR_RUNTIME;
    if (rc != 0) {
        if (T->c.rank != 0) {
            SG_ERROR("rank 0 failed to write checkpoint %s (see rank 0's log)", path);
            /* under segtrain's launcher: its summary names rank 0, not us */
            sg_launch_report_culprit(T->c.rank, 0, SG_LAUNCH_RANK_FAILED);
        }
        return SG_ERR_RUNTIME;
    }
    if (!best) T->last_ckpt_iter = T->st.iter;
    return SG_OK;
}

sg_status sg_tr_write_checkpoint(trainer *T, int best) {
    double t0 = sg_now_s();
    sg_status rc = write_checkpoint(T, best);
    T->paused_s += sg_now_s() - t0;
    return rc;
}

sg_status sg_tr_evaluate_and_keep_best(trainer *T) {
    double miou = NAN;
    int swapped = ema_in(T);
    sg_status vrc = run_validation(T, &miou);
    if (swapped) sg_ema_swap(&T->ema);
    if (vrc != SG_OK) return SG_ERR_RUNTIME;
    if (T->dbg) T->dbg->last_val_miou = miou;
    if (!isnan(miou) && (isnan(T->st.best_miou) || miou > T->st.best_miou)) {
        T->st.best_miou = miou;
        T->st.best_iter = T->st.iter;
        if (sg_tr_write_checkpoint(T, 1) != SG_OK) return SG_ERR_RUNTIME;
    }
    return SG_OK;
}
