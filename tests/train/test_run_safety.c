/* tests/train/test_run_safety.c - run safety (issue 13), end to end through
 * the commands in-process, on the tiny network and synthetic data. One case
 * per argument:
 *   lock        - a second `train` on a running job's run_dir exits 1 at
 *                 once naming the holder's pid; `eval` writing into it is
 *                 refused too (--out suggested); a rank other than 0 never
 *                 looks at the lock; kill -9 of the holder frees it
 *   run_id      - every checkpoint and metrics line carries the run id, kept
 *                 across a resume; a fresh run over another run's
 *                 checkpoints stops with status 2 offering --resume auto or
 *                 a new run_dir; a checkpoint from before run ids resumes
 *                 (and gets a run id); resuming one run's checkpoint into
 *                 another run's run_dir is refused
 *   config_diff - a refused resume leaves <run_dir>/config.yaml as it was,
 *                 and names the differing model key with both values
 *   eval_resume - an evaluation due at the iteration a run was interrupted
 *                 at runs when it resumes (eval/iter_N.json, val_miou at N),
 *                 also at the last iteration
 *   epochs      - an epoch-based run interrupted on 2 ranks and resumed on 1
 *                 trains exactly train.epochs epochs (every sample twice for
 *                 2 epochs), not more
 *   untrusted   - eval/predict of a checkpoint whose stored config declares a
 *                 model its tensors do not hold (base_width 1024) stop before
 *                 building it; eval never writes into the run_dir named
 *                 inside a checkpoint unless --config names it
 *   eval_memory - whole-image evaluation that cannot fit in the memory
 *                 available stops naming the image size, the estimate and
 *                 eval.crop_size; the CPU backend reports its memory
 */
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ckpt_edit.h"
#include "cmd/commands.h"
#include "core/cli.h"
#include "data/dataset.h"
#include "data/sampler.h"
#include "io/safetensors.h"
#include "model/model.h"
#include "tests/helpers.h"
#include "testutil.h"
#include "train/checkpoint.h"
#include "train/evaluator.h"
#include "train/trainer.h"
#include "train_fixture.h"

/* The fixture's configuration for run `run` (plus sets) as a YAML file;
 * its path into out. */
static int config_file(const char *run, const char *const *sets, int n, char *out, size_t cap,
                       sg_config *c) {
    if (fx_config(c, run, sets, n) != 0) return -1;
    snprintf(out, cap, "%s/%s.yaml", fx_root, run);
    FILE *f = fopen(out, "w");
    if (!f) return -1;
    sg_config_write(c, f);
    return fclose(f);
}

static void ckpt_path(const sg_config *c, int64_t it, char *out, size_t cap) {
    sg_ckpt_iter_path(c->run_dir, it, out, cap);
}

static const char *meta(const char *path, const char *key, char *out, size_t cap) {
    out[0] = 0;
    sg_st_file *f = sg_st_open(path);
    if (!f) return out;
    const char *v = sg_st_meta(f, key);
    snprintf(out, cap, "%s", v ? v : "");
    sg_st_close(f);
    return out;
}

/* ---------------- lock ---------------- */
static void test_lock(void) {
    const char *sets[] = {"train.iters=100000", "data.val_split=val"};
    sg_config c;
    char cfg[1200];
    CHECK(config_file("lock", sets, 2, cfg, sizeof cfg, &c) == 0);
    pid_t child = fork();
    CHECK(child >= 0);
    if (child == 0) { /* the first job: trains until killed */
        const char *args[] = {"train", "--config", cfg, "--quiet", NULL};
        _exit(th_run_cmd(sg_cmd_train, args, -1));
    }
    char lockp[1200], want[64];
    snprintf(lockp, sizeof lockp, "%s/segtrain.lock", c.run_dir);
    snprintf(want, sizeof want, "pid %d\n", (int)child);
    int held = 0;
    for (int i = 0; i < 6000 && !held; i++) { /* the child starting up (no timing assert) */
        char *t = th_read_file(lockp);
        held = t && strstr(t, want) != NULL;
        free(t);
        if (!held) usleep(10000);
    }
    CHECK_MSG(held, "the training child never took the lock");
    /* a second train job on the same run_dir */
    const char *again[] = {"train", "--config", cfg, NULL};
    th_cap_begin();
    int rc = th_run_cmd(sg_cmd_train, again, -1);
    const char *msg = th_cap_end();
    CHECK_EQ_INT(rc, 1);
    char pidmsg[64];
    snprintf(pidmsg, sizeof pidmsg, "pid %d on host", (int)child);
    CHECK_STR_CONTAINS(msg, "is in use by another segtrain job");
    CHECK_STR_CONTAINS(msg, pidmsg);
    CHECK_STR_CONTAINS(msg, "segtrain train");
    /* nothing of the second job reached the run_dir: no config.yaml yet from
     * either (the first writes it after its resume checks, possibly later) */
    /* eval writing <run_dir>/eval/ is refused the same way, --out offered */
    char ck[1200];
    snprintf(ck, sizeof ck, "%s/none.safetensors", fx_root);
    const char *ev[] = {"eval", "--checkpoint", ck, "--config", cfg, NULL};
    th_cap_begin();
    rc = th_run_cmd(sg_cmd_eval, ev, -1);
    msg = th_cap_end();
    CHECK_EQ_INT(rc, 1);
    CHECK_STR_CONTAINS(msg, pidmsg);
    CHECK_STR_CONTAINS(msg, "--out");
    /* a rank other than 0 never looks at the lock: it fails at the
     * rendezvous (no rank 0 there), not on the lock */
    int port = th_free_port();
    char ps[16];
    snprintf(ps, sizeof ps, "%d", port);
    pid_t r1 = fork();
    CHECK(r1 >= 0);
    if (r1 == 0) {
        th_rank_env(1, 2, ps, 1);
        char out[1200];
        snprintf(out, sizeof out, "%s/rank1.log", fx_root);
        if (!freopen(out, "w", stderr)) _exit(99);
        const char *r1args[] = {"train", "--config", cfg, "--set", "dist.timeout_s=2", NULL};
        _exit(th_run_cmd(sg_cmd_train, r1args, -1));
    }
    int st;
    waitpid(r1, &st, 0);
    CHECK(th_exit_status(st) != 0);
    char r1log[1200];
    snprintf(r1log, sizeof r1log, "%s/rank1.log", fx_root);
    char *t = th_read_file(r1log);
    CHECK(t != NULL);
    CHECK_MSG(strstr(t, "in use by another") == NULL, "rank 1 looked at the lock:\n%s", t);
    free(t);
    /* kill -9 of the holder: the kernel drops the lock, the file stays */
    kill(child, SIGKILL);
    waitpid(child, &st, 0);
    CHECK(access(lockp, F_OK) == 0);
    sg_run_lock lk;
    CHECK_EQ_INT(sg_run_lock_acquire(&lk, c.run_dir, "test"), SG_OK);
    sg_run_lock_release(&lk);
}

/* ---------------- run ids ---------------- */
static int count_lines_with(const char *text, const char *needle, int *lines) {
    int with = 0;
    *lines = 0;
    for (const char *p = text; *p;) {
        const char *nl = strchr(p, '\n');
        size_t len = nl ? (size_t)(nl - p) : strlen(p);
        if (len) {
            (*lines)++;
            char *line = strndup(p, len);
            with += strstr(line, needle) != NULL;
            free(line);
        }
        p += len + (nl ? 1 : 0);
    }
    return with;
}

static void test_run_id(void) {
    const char *sets[] = {"train.iters=2", "train.checkpoint_every=1", "train.keep_checkpoints=0"};
    sg_config c;
    char cfg[1200], p2[1200], p4[1200], id[64], id4[64], want[96];
    CHECK(config_file("runid", sets, 3, cfg, sizeof cfg, &c) == 0);
    const char *train[] = {"train", "--config", cfg, "--quiet", NULL};
    CHECK_EQ_INT(th_run_cmd(sg_cmd_train, train, -1), 0);
    ckpt_path(&c, 2, p2, sizeof p2);
    meta(p2, "run_id", id, sizeof id);
    CHECK_EQ_INT(strlen(id), SG_RUN_ID_LEN);
    char p1[1200], id1[64];
    ckpt_path(&c, 1, p1, sizeof p1);
    CHECK(strcmp(meta(p1, "run_id", id1, sizeof id1), id) == 0);
    char mpath[1200];
    snprintf(mpath, sizeof mpath, "%s/metrics.jsonl", c.run_dir);
    char *m = th_read_file(mpath);
    CHECK(m != NULL);
    snprintf(want, sizeof want, "\"run_id\":\"%s\"", id);
    int lines, with = count_lines_with(m, want, &lines);
    free(m);
    CHECK(lines >= 3); /* 2 progress lines, the validation */
    CHECK_EQ_INT(with, lines);
    /* a fresh run over it stops: status 2, --resume auto or a new run_dir */
    th_cap_begin();
    int rc = th_run_cmd(sg_cmd_train, train, -1);
    const char *msg = th_cap_end();
    CHECK_EQ_INT(rc, 2);
    CHECK_STR_CONTAINS(msg, "already holds");
    CHECK_STR_CONTAINS(msg, id);
    CHECK_STR_CONTAINS(msg, "--resume auto");
    CHECK_STR_CONTAINS(msg, "new run_dir");
    /* --resume auto continues it: same run id in checkpoints and lines */
    const char *resume[] = {"train",    "--config", cfg,       "--set", "train.iters=4",
                            "--resume", "auto",     "--quiet", NULL};
    CHECK_EQ_INT(th_run_cmd(sg_cmd_train, resume, -1), 0);
    ckpt_path(&c, 4, p4, sizeof p4);
    CHECK(strcmp(meta(p4, "run_id", id4, sizeof id4), id) == 0);
    m = th_read_file(mpath);
    with = count_lines_with(m, want, &lines);
    free(m);
    CHECK(lines >= 6);
    CHECK_EQ_INT(with, lines);
    /* a checkpoint from before run ids resumes, explicitly and with auto,
     * and the run gets an id */
    for (int it = 0; it <= 4; it++) { /* 0: best.safetensors */
        char p[1200];
        if (it) ckpt_path(&c, it, p, sizeof p);
        else sg_ckpt_best_path(c.run_dir, p, sizeof p);
        if (access(p, F_OK) == 0) CHECK_EQ_INT(ckpt_rewrite(p, p, "run_id", NULL, NULL, 0), 0);
    }
    CHECK(meta(p4, "run_id", id4, sizeof id4)[0] == 0);
    const char *legacy[] = {"train",         "--config", cfg, "--set",
                            "train.iters=5", "--resume", p4,  NULL};
    th_cap_begin();
    rc = th_run_cmd(sg_cmd_train, legacy, -1);
    msg = th_cap_end();
    CHECK_EQ_INT(rc, 0);
    CHECK_STR_CONTAINS(msg, "written before run ids");
    char p5[1200], id5[64];
    ckpt_path(&c, 5, p5, sizeof p5);
    meta(p5, "run_id", id5, sizeof id5);
    CHECK_EQ_INT(strlen(id5), SG_RUN_ID_LEN);
    CHECK(strcmp(id5, id) != 0);
    const char *legacy_auto[] = {"train",    "--config", cfg,       "--set", "train.iters=6",
                                 "--resume", "auto",     "--quiet", NULL};
    CHECK_EQ_INT(th_run_cmd(sg_cmd_train, legacy_auto, -1), 0);
    char p6[1200], id6[64];
    ckpt_path(&c, 6, p6, sizeof p6);
    CHECK(strcmp(meta(p6, "run_id", id6, sizeof id6), id5) == 0);
    /* one run per run_dir: run B's checkpoint resumed into this run_dir */
    const char *setsb[] = {"train.iters=1"};
    sg_config cb;
    char cfgb[1200], pb[1200];
    CHECK(config_file("runid_b", setsb, 1, cfgb, sizeof cfgb, &cb) == 0);
    const char *trainb[] = {"train", "--config", cfgb, "--quiet", NULL};
    CHECK_EQ_INT(th_run_cmd(sg_cmd_train, trainb, -1), 0);
    ckpt_path(&cb, 1, pb, sizeof pb);
    const char *mix[] = {"train", "--config", cfg, "--set", "train.iters=7", "--resume", pb, NULL};
    th_cap_begin();
    rc = th_run_cmd(sg_cmd_train, mix, -1);
    msg = th_cap_end();
    CHECK_EQ_INT(rc, 2);
    CHECK_STR_CONTAINS(msg, "holds checkpoints of another run");
}

/* ---------------- a refused resume and config.yaml ---------------- */
static void test_config_diff(void) {
    const char *sets[] = {"train.iters=2"};
    sg_config c;
    char cfg[1200], yaml[1200];
    CHECK(config_file("cdiff", sets, 1, cfg, sizeof cfg, &c) == 0);
    const char *train[] = {"train", "--config", cfg, "--quiet", NULL};
    CHECK_EQ_INT(th_run_cmd(sg_cmd_train, train, -1), 0);
    snprintf(yaml, sizeof yaml, "%s/config.yaml", c.run_dir);
    char *before = th_read_file(yaml);
    CHECK(before != NULL);
    const char *resume[] = {"train", "--config",      yaml,       "--set", "model.base_width=16",
                            "--set", "train.iters=4", "--resume", "auto",  NULL};
    th_cap_begin();
    int rc = th_run_cmd(sg_cmd_train, resume, -1);
    const char *msg = th_cap_end();
    CHECK(rc != 0);
    CHECK_STR_CONTAINS(msg, "model.base_width: checkpoint 8, config 16");
    char *after = th_read_file(yaml);
    CHECK(after != NULL);
    CHECK_MSG(strcmp(before, after) == 0, "config.yaml changed by a refused resume");
    CHECK(strstr(after, "base_width: 8\n") != NULL);
    free(before);
    free(after);
    /* the printed resume command still works */
    const char *ok[] = {"train",    "--config", yaml,      "--set", "train.iters=3",
                        "--resume", "auto",     "--quiet", NULL};
    CHECK_EQ_INT(th_run_cmd(sg_cmd_train, ok, -1), 0);
}

/* ---------------- an evaluation due at the interrupted iteration ---------------- */
static void check_eval_at(const sg_config *c, int it, const char *run_id) {
    char path[1200], want[96];
    snprintf(path, sizeof path, "%s/eval/iter_%08d.json", c->run_dir, it);
    char *t = th_read_file(path);
    CHECK_MSG(t != NULL, "%s missing", path);
    snprintf(want, sizeof want, "\"run_id\":\"%s\"", run_id);
    CHECK_STR_CONTAINS(t, want);
    free(t);
    snprintf(path, sizeof path, "%s/metrics.jsonl", c->run_dir);
    t = th_read_file(path);
    CHECK(t != NULL);
    snprintf(want, sizeof want, "{\"iter\":%d,\"epoch\":", it);
    int found = 0;
    for (char *p = strstr(t, want); p && !found; p = strstr(p + 1, want)) {
        char *nl = strchr(p, '\n');
        if (nl) *nl = 0;
        found = strstr(p, "\"val_miou\":") != NULL;
        if (nl) *nl = '\n';
    }
    free(t);
    CHECK_MSG(found, "no val_miou line at iteration %d", it);
}

static void test_eval_resume(void) {
    const char *sets[] = {"train.iters=4", "train.eval_every=2"};
    sg_config c;
    CHECK(fx_config(&c, "evres", sets, 2) == 0);
    sg_train_debug d = {0};
    d.stop_at_iter = 2; /* interrupted right after step 2, whose evaluation was due */
    int sig = 0;
    CHECK_EQ_INT(sg_train_run(&c, NULL, &d, &sig), SG_OK);
    CHECK_EQ_INT(sig, SIGTERM);
    char path[1200], id[64];
    snprintf(path, sizeof path, "%s/eval/iter_00000002.json", c.run_dir);
    CHECK(access(path, F_OK) != 0); /* not run before the interruption */
    sg_train_debug d2 = {0};
    CHECK_EQ_INT(sg_train_run(&c, "auto", &d2, NULL), SG_OK);
    CHECK_EQ_INT(d2.iters_done, 4);
    ckpt_path(&c, 4, path, sizeof path);
    meta(path, "run_id", id, sizeof id);
    check_eval_at(&c, 2, id);
    check_eval_at(&c, 4, id);
    /* interrupted at the last iteration: the final evaluation runs at resume
     * and the last checkpoint then carries its mIoU */
    const char *sets2[] = {"train.iters=3", "train.eval_every=0"};
    sg_config c2;
    CHECK(fx_config(&c2, "evres_last", sets2, 2) == 0);
    sg_train_debug d3 = {0};
    d3.stop_at_iter = 3;
    CHECK_EQ_INT(sg_train_run(&c2, NULL, &d3, &sig), SG_OK);
    CHECK_EQ_INT(sig, SIGTERM);
    ckpt_path(&c2, 3, path, sizeof path);
    char bm[64];
    CHECK(strcmp(meta(path, "best_miou", bm, sizeof bm), "nan") == 0);
    sg_train_debug d4 = {0};
    CHECK_EQ_INT(sg_train_run(&c2, "auto", &d4, NULL), SG_OK);
    CHECK_EQ_INT(d4.iters_done, 0);
    CHECK(!isnan(d4.last_val_miou));
    meta(path, "run_id", id, sizeof id);
    check_eval_at(&c2, 3, id);
    CHECK(strcmp(meta(path, "best_miou", bm, sizeof bm), "nan") != 0);
    /* resuming once more does not evaluate again */
    sg_train_debug d5 = {0};
    CHECK_EQ_INT(sg_train_run(&c2, "auto", &d5, NULL), SG_OK);
    CHECK(isnan(d5.last_val_miou));
}

/* ---------------- epochs on another world size ---------------- */
static void test_epochs(void) {
    /* 11 samples, 2 epochs, batch 1; 2 ranks for 2 steps (4 samples), then
     * 1 rank: the rest of epoch 0 (7 steps) and epoch 1 (11 steps) */
    const char *sets[] = {"train.iters=0",       "train.epochs=2",
                          "train.batch_size=1",  "train.leftover_eval=false",
                          "model.sync_bn=false", "train.freeze_bn_stats=true",
                          "data.val_split=val"};
    sg_config c;
    CHECK(fx_config(&c, "epochs", sets, 7) == 0);
    int64_t seen[11] = {0};
    CHECK_MSG(fx_train_ranks(&c, 2, 2, seen, 11) == 0, "the 2-rank part of the run failed");
    sg_train_debug d = {0};
    d.seen_train = seen;
    CHECK_EQ_INT(sg_train_run(&c, "auto", &d, NULL), 0);
    CHECK_EQ_INT(d.iters_done, 2 + 7 + 11);
    for (int i = 0; i < 11; i++)
        CHECK_MSG(seen[i] == 2, "sample %d trained %lld times in 2 epochs", i, (long long)seen[i]);
    char path[1200], v[64];
    ckpt_path(&c, 20, path, sizeof path);
    CHECK(strcmp(meta(path, "epoch", v, sizeof v), "2") == 0); /* both epochs done */
    CHECK(strcmp(meta(path, "total_steps", v, sizeof v), "20") == 0);
}

/* ---------------- checkpoints are untrusted ---------------- */
/* The stored config of ck with `from` replaced by `to`, into out. */
static int edit_config(const char *ck, const char *out, const char *from, const char *to) {
    sg_st_file *f = sg_st_open(ck);
    if (!f) return -1;
    const char *y = sg_st_meta(f, "config");
    char *at = y ? strstr(y, from) : NULL;
    if (!at) {
        sg_st_close(f);
        return -1;
    }
    size_t n = strlen(y) + strlen(to) + 1;
    char *yaml = malloc(n);
    snprintf(yaml, n, "%.*s%s%s", (int)(at - y), y, to, at + strlen(from));
    sg_st_close(f);
    int rc = ckpt_rewrite(ck, out, "config", yaml, NULL, 0);
    free(yaml);
    return rc;
}

static void test_untrusted(void) {
    const char *sets[] = {"train.iters=1"};
    sg_config c;
    char cfg[1200], ck[1200], bad[1200], victim[1200], out[1200];
    CHECK(config_file("untrusted", sets, 1, cfg, sizeof cfg, &c) == 0);
    const char *train[] = {"train", "--config", cfg, "--quiet", NULL};
    CHECK_EQ_INT(th_run_cmd(sg_cmd_train, train, -1), 0);
    ckpt_path(&c, 1, ck, sizeof ck);
    /* the probe: base_width 1024 in the stored config of a small file */
    snprintf(bad, sizeof bad, "%s/wide.safetensors", fx_root);
    CHECK_EQ_INT(edit_config(ck, bad, "base_width: 8", "base_width: 1024"), 0);
    const char *ev[] = {"eval", "--checkpoint", bad, NULL};
    th_cap_begin();
    int rc = th_run_cmd(sg_cmd_eval, ev, -1);
    const char *msg = th_cap_end();
    CHECK_EQ_INT(rc, 2); /* a crafted file the user named: an input error */
    CHECK_STR_CONTAINS(msg, "base_width 1024");
    CHECK_STR_CONTAINS(msg, "does not fit that config");
    snprintf(out, sizeof out, "%s/pred.png", fx_root);
    char img[1200];
    snprintf(img, sizeof img, "%s/data/leftImg8bit/val", fx_root);
    const char *pr[] = {"predict", "--checkpoint", bad, "--input", img, "--output", out, NULL};
    th_cap_begin();
    rc = th_run_cmd(sg_cmd_predict, pr, -1);
    msg = th_cap_end();
    CHECK_EQ_INT(rc, 2);
    CHECK_STR_CONTAINS(msg, "does not fit that config");
    /* eval never writes into the run_dir named inside the file */
    snprintf(victim, sizeof victim, "%s/victim", fx_root);
    char to[1300];
    snprintf(to, sizeof to, "run_dir: \"%s\"", victim);
    char from[1300];
    snprintf(from, sizeof from, "run_dir: \"%s\"", c.run_dir);
    snprintf(bad, sizeof bad, "%s/elsewhere.safetensors", fx_root);
    CHECK_EQ_INT(edit_config(ck, bad, from, to), 0);
    const char *ev2[] = {"eval", "--checkpoint", bad, "--quiet", NULL};
    CHECK_EQ_INT(th_run_cmd(sg_cmd_eval, ev2, -1), 0);
    CHECK_MSG(access(victim, F_OK) != 0, "eval created %s", victim);
    snprintf(out, sizeof out, "%s/metrics_out.json", fx_root);
    const char *ev3[] = {"eval", "--checkpoint", bad, "--out", out, "--quiet", NULL};
    CHECK_EQ_INT(th_run_cmd(sg_cmd_eval, ev3, -1), 0);
    CHECK(access(out, F_OK) == 0);
    CHECK(access(victim, F_OK) != 0);
    /* --config names the user's own run_dir: the JSON goes there */
    char evjson[1200];
    snprintf(evjson, sizeof evjson, "%s/eval/iter_00000001.json", c.run_dir);
    unlink(evjson);
    const char *ev4[] = {"eval", "--checkpoint", bad, "--config", cfg, "--quiet", NULL};
    CHECK_EQ_INT(th_run_cmd(sg_cmd_eval, ev4, -1), 0);
    CHECK(access(evjson, F_OK) == 0);
    /* an invalid stored config is refused like a user's file */
    snprintf(bad, sizeof bad, "%s/badcfg.safetensors", fx_root);
    CHECK_EQ_INT(edit_config(ck, bad, "num_classes: 19", "num_classes: 999"), 0);
    const char *ev5[] = {"eval", "--checkpoint", bad, NULL};
    th_cap_begin();
    rc = th_run_cmd(sg_cmd_eval, ev5, -1);
    msg = th_cap_end();
    CHECK_EQ_INT(rc, 2);
    CHECK_STR_CONTAINS(msg, "__metadata__.config");
    CHECK_STR_CONTAINS(msg, "out of range");
}

/* ---------------- whole-image evaluation memory ---------------- */
static void test_eval_memory(void) {
    sg_config c;
    CHECK(fx_config(&c, "evmem", NULL, 0) == 0);
    sg_backend *be = sg_backend_create("cpu", &(sg_backend_opts){.threads = 2});
    CHECK(be != NULL);
    sg_backend_info bi;
    sg_backend_get_info(be, &bi);
    CHECK(bi.mem_total > 0 && bi.mem_available > 0 && bi.mem_available <= bi.mem_total);
    sg_model_opts mo;
    CHECK(sg_model_opts_from_config(&mo, &c) == 0);
    sg_model *m = sg_model_create(be, &mo);
    CHECK(m != NULL);
    sg_dataset *ds = sg_dataset_open(&c.data, c.data.val_split, 19);
    CHECK(ds != NULL);
    sg_evaluator ev;
    CHECK_EQ_INT(sg_evaluator_init(&ev, be, ds, &c), SG_OK);
    /* the fixture's 60x80 images fit the real memory ... */
    int64_t idx[1] = {0};
    CHECK_EQ_INT(sg_evaluator_preflight(&ev, m, idx, 1), SG_OK);
    /* ... not half of their plan: the error names the size, the estimate,
     * the remedy */
    size_t plan = sg_model_plan_bytes(m, 1, 60, 80, 0);
    CHECK(plan > 0);
    th_cap_begin();
    sg_status rc = sg_evaluator_check_fits(&ev, m, 1, 60, 80, plan / 2, "img.png");
    const char *msg = th_cap_end();
    CHECK_EQ_INT(rc, SG_ERR_CONFIG);
    CHECK_STR_CONTAINS(msg, "img.png: a 60x80 image");
    CHECK_STR_CONTAINS(msg, "eval.crop_size");
    CHECK_STR_CONTAINS(msg, "GiB are available");
    CHECK_EQ_INT(sg_evaluator_check_fits(&ev, m, 1, 60, 80, plan + 60 * 80 * 5, NULL), SG_OK);
    /* the probe: one 8000x8000 image asked for 10.7 GB; the estimate
     * for this tiny network is itself several GB, more than 1 GiB */
    size_t big = sg_model_plan_bytes(m, 1, 8000, 8000, 0);
    fprintf(stderr, "inference plan of the test network at 8000x8000: %.2f GiB\n",
            (double)big / (1 << 30));
    CHECK(big > (1u << 30));
    th_cap_begin();
    rc = sg_evaluator_check_fits(&ev, m, 1, 8000, 8000, (size_t)1 << 30, NULL);
    msg = th_cap_end();
    CHECK_EQ_INT(rc, SG_ERR_CONFIG);
    CHECK_STR_CONTAINS(msg, "8000x8000");
    sg_evaluator_free(&ev);
    /* sliding windows: the whole-image check does not apply */
    c.eval.crop_size[0] = c.eval.crop_size[1] = 48;
    CHECK_EQ_INT(sg_evaluator_init(&ev, be, ds, &c), SG_OK);
    CHECK_EQ_INT(sg_evaluator_check_fits(&ev, m, 1, 8000, 8000, 1u << 20, NULL), SG_OK);
    sg_evaluator_free(&ev);
    sg_dataset_close(ds);
    sg_model_destroy(m);
    sg_backend_destroy(be);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr,
                "usage: %s lock|run_id|config_diff|eval_resume|epochs|untrusted|"
                "eval_memory\n",
                argv[0]);
        return 2;
    }
    if (fx_setup(argv[1], 11, 2, 60, 80, 19) != 0) return 1;
    sg_log_set_level(SG_LOG_WARN);
    if (!strcmp(argv[1], "lock")) TEST_RUN(test_lock);
    else if (!strcmp(argv[1], "run_id")) TEST_RUN(test_run_id);
    else if (!strcmp(argv[1], "config_diff")) TEST_RUN(test_config_diff);
    else if (!strcmp(argv[1], "eval_resume")) TEST_RUN(test_eval_resume);
    else if (!strcmp(argv[1], "epochs")) TEST_RUN(test_epochs);
    else if (!strcmp(argv[1], "untrusted")) TEST_RUN(test_untrusted);
    else if (!strcmp(argv[1], "eval_memory")) TEST_RUN(test_eval_memory);
    else return 2;
    fx_cleanup(tu_failed_cases != 0);
    return TEST_EXIT();
}
