/* tests/train/test_optim_e2e.c - train.optimizer adamw and
 * train.clip_grad_norm end to end on the CPU, the tiny network (resnet18 at
 * width 8) and synthetic data. One case per argument:
 *   adamw - 1 rank, AdamW with clipping active: the loss falls; metrics.jsonl
 *           logs the pre-clip norm (above the limit at the start); a run
 *           interrupted (SIGTERM) at step 5 and resumed gives bit-identical
 *           losses and final checkpoint (weights, exp_avg, exp_avg_sq) to an
 *           uninterrupted one; the checkpoint holds the AdamW state and its
 *           step count; resuming it with train.optimizer sgd is refused
 *           (status 2) naming the key; a crafted negative exp_avg_sq is
 *           refused naming the tensor, crafted optimizer metadata naming
 *           the key
 *   ranks - 2 ranks x batch 2 with SyncBN, AdamW and clipping active end
 *           with the weights and AdamW state of 1 rank x batch 4 (within
 *           5e-4; the pre-clip norms equal: the clipping sees the
 *           all-reduced gradient); both ranks hold the same weights (the
 *           2-rank validation equals 1-rank eval of the checkpoint); SGD
 *           with clipping likewise (within 1e-4)
 */
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "ckpt_edit.h"
#include "cmd/commands.h"
#include "io/safetensors.h"
#include "tests/helpers.h"
#include "testutil.h"
#include "train/checkpoint.h"
#include "train/trainer.h"
#include "train_fixture.h"

enum { ITERS = 16 };

/* every tensor of a and b the same bytes (names, shapes, data); the
 * number compared, or -1 (the first difference printed) */
static int same_files(const char *a, const char *b) {
    sg_st_file *fa = sg_st_open(a), *fb = sg_st_open(b);
    int n = fa && fb ? 0 : -1;
    for (int i = 0; n >= 0 && i < sg_st_count(fa); i++) {
        const sg_st_tensor *ta = sg_st_get(fa, i), *tb = sg_st_find(fb, ta->name);
        if (!tb || tb->nbytes != ta->nbytes || memcmp(ta->data, tb->data, ta->nbytes) != 0) {
            fprintf(stderr, "  %s differs between %s and %s\n", ta->name, a, b);
            n = -1;
        } else {
            n++;
        }
    }
    if (fa && fb && n >= 0 && sg_st_count(fa) != sg_st_count(fb)) n = -1;
    if (fa) sg_st_close(fa);
    if (fb) sg_st_close(fb);
    return n;
}

/* Copies the checkpoint src to dst with float tensor `name`'s element i
 * set to v, checksums recomputed (as tests/train/ckpt_edit.h does for
 * metadata): what catches the change is the range check. 0 or -1. */
static int rewrite_f32(const char *src, const char *dst, const char *name, size_t i, float v) {
    sg_st_file *f = sg_st_open(src);
    if (!f) return -1;
    sg_ckpt_builder b;
    sg_ckpt_builder_init(&b);
    int rc = 0, found = 0;
    for (int k = 0; k < sg_st_count(f) && rc == 0; k++) {
        const sg_st_tensor *t = sg_st_get(f, k);
        char *copy = malloc(t->nbytes ? t->nbytes : 1);
        if (!copy) abort();
        memcpy(copy, t->data, t->nbytes);
        if (t->dtype == SG_ST_F32 && !strcmp(t->name, name) && i < t->count) {
            memcpy(copy + i * sizeof v, &v, sizeof v);
            found = 1;
        }
        rc = sg_ckpt_add(&b, t->name, t->dtype, t->ndim, t->shape, copy, t->nbytes);
        free(copy);
    }
    for (int k = 0; k < sg_st_meta_count(f) && rc == 0; k++) {
        const char *key, *val;
        sg_st_meta_get(f, k, &key, &val);
        if (strcmp(key, "checksum") && strcmp(key, "meta_checksum") && strcmp(key, "tensor_count"))
            rc = sg_ckpt_meta(&b, key, val);
    }
    sg_st_close(f);
    if (rc == 0 && found) rc = sg_ckpt_commit(&b, dst);
    sg_ckpt_builder_free(&b);
    return rc == 0 && found ? 0 : -1;
}

/* the largest relative difference (floor 1e-3) over the F32 tensors */
static double max_rel(const char *a, const char *b, int *n) {
    sg_st_file *fa = sg_st_open(a), *fb = sg_st_open(b);
    double worst = fa && fb ? 0 : INFINITY;
    *n = 0;
    for (int i = 0; fa && fb && i < sg_st_count(fa); i++) {
        const sg_st_tensor *ta = sg_st_get(fa, i), *tb = sg_st_find(fb, ta->name);
        if (ta->dtype != SG_ST_F32) continue;
        if (!tb || tb->count != ta->count) return INFINITY;
        float *x = malloc(ta->nbytes), *y = malloc(tb->nbytes);
        sg_st_read_f32(fa, ta, x, ta->count);
        sg_st_read_f32(fb, tb, y, tb->count);
        double e = tu_max_rel_err(x, y, ta->count, 1e-3);
        if (e > worst) {
            worst = e;
            if (e > 1e-5) fprintf(stderr, "  %s: max rel %.3g\n", ta->name, e);
        }
        free(x);
        free(y);
        (*n)++;
    }
    if (fa) sg_st_close(fa);
    if (fb) sg_st_close(fb);
    return worst;
}

static const char *adamw_sets[] = {"train.optimizer=adamw",    "train.lr=0.01",
                                   "train.weight_decay=0.01",  "train.betas=[0.9, 0.99]",
                                   "train.clip_grad_norm=0.5", "train.lr_schedule=constant",
                                   "train.iters=16",           "train.checkpoint_every=0",
                                   "data.crop_size=[32, 32]"};
enum { N_ADAMW = sizeof adamw_sets / sizeof adamw_sets[0] };

static void test_adamw(void) {
    sg_config a, b;
    CHECK(fx_config(&a, "full", adamw_sets, N_ADAMW) == 0);
    CHECK(fx_config(&b, "interrupted", adamw_sets, N_ADAMW) == 0);
    double la[ITERS] = {0}, lb[ITERS] = {0};
    sg_train_debug da = {.step_loss = la, .step_loss_cap = ITERS};
    CHECK_EQ_INT(sg_train_run(&a, NULL, &da, NULL), SG_OK);
    CHECK_EQ_INT(da.iters_done, ITERS);
    for (int i = 0; i < ITERS; i++) fprintf(stderr, "  step %d: loss %.4f\n", i + 1, la[i]);
    double first = 0, last = 0; /* the means of the first and last 4 steps */
    for (int i = 0; i < 4; i++) {
        first += la[i] / 4;
        last += la[ITERS - 4 + i] / 4;
    }
    CHECK_MSG(last < 0.9 * first, "the loss did not fall by 10%%: %.4f -> %.4f", first, last);
    /* metrics.jsonl: the pre-clip norm of every step, above the limit at first */
    char path[1200];
    snprintf(path, sizeof path, "%s/metrics.jsonl", a.run_dir);
    char *metrics = th_read_file(path);
    CHECK(metrics != NULL);
    const char *g = strstr(metrics, "\"grad_norm\":");
    CHECK_MSG(g != NULL, "no grad_norm in %s", path);
    double norm0 = strtod(g + strlen("\"grad_norm\":"), NULL);
    free(metrics);
    CHECK_MSG(norm0 > 0.5,
              "step 1's gradient norm %.4g is not above the limit 0.5: the test "
              "would not show clipping",
              norm0);
    /* interrupted at step 3, resumed: the same bits */
    sg_train_debug db = {.step_loss = lb, .step_loss_cap = ITERS, .stop_at_iter = 5};
    int sig = 0;
    CHECK_EQ_INT(sg_train_run(&b, NULL, &db, &sig), SG_OK);
    CHECK_EQ_INT(sig, SIGTERM);
    CHECK_EQ_INT(db.iters_done, 5);
    char p3[1200];
    sg_ckpt_iter_path(b.run_dir, 5, p3, sizeof p3);
    memset(lb, 0, sizeof lb);
    sg_train_debug dc = {.step_loss = lb, .step_loss_cap = ITERS};
    CHECK_EQ_INT(sg_train_run(&b, "auto", &dc, NULL), SG_OK);
    CHECK_EQ_INT(dc.iters_done, ITERS);
    for (int i = 5; i < ITERS; i++)
        CHECK_MSG(la[i] == lb[i], "step %d after resume: %.12g vs %.12g", i + 1, la[i], lb[i]);
    char pa[1200], pb[1200];
    sg_ckpt_iter_path(a.run_dir, ITERS, pa, sizeof pa);
    sg_ckpt_iter_path(b.run_dir, ITERS, pb, sizeof pb);
    int n = same_files(pa, pb);
    CHECK_MSG(n > 100, "final checkpoints differ (%d tensors the same)", n);
    /* the AdamW state in the checkpoint */
    sg_st_file *f = sg_st_open(pa);
    CHECK(f != NULL);
    CHECK(sg_st_find(f, "optimizer.exp_avg.encoder.conv1.weight") != NULL);
    CHECK(sg_st_find(f, "optimizer.exp_avg_sq.aux_head.4.weight") != NULL);
    CHECK(sg_st_find(f, "optimizer.momentum.encoder.conv1.weight") == NULL);
    CHECK(sg_st_meta(f, "optimizer") && !strcmp(sg_st_meta(f, "optimizer"), "adamw"));
    CHECK(sg_st_meta(f, "optimizer_steps") && !strcmp(sg_st_meta(f, "optimizer_steps"), "16"));
    sg_st_close(f);
    /* resuming step 5 with SGD: refused, naming the key */
    const char *sgd_sets[] = {"train.optimizer=sgd", "train.iters=16", "train.checkpoint_every=0"};
    sg_config s;
    CHECK(fx_config(&s, "as_sgd", sgd_sets, 3) == 0);
    th_cap_begin();
    sg_status rc = sg_train_run(&s, p3, &(sg_train_debug){0}, NULL);
    const char *msg = th_cap_end();
    CHECK_EQ_INT(rc, SG_ERR_CONFIG);
    CHECK_MSG(strstr(msg, "train.optimizer=adamw") && strstr(msg, "this run has sgd"),
              "message: %s", msg);
}

/* A checkpoint whose exp_avg_sq holds a negative value is refused naming
 * the tensor (its square root would turn the weights into NaN), and so is
 * crafted optimizer metadata. */
static void test_crafted_state(void) {
    const char *sets[] = {"train.optimizer=adamw", "train.iters=2", "train.checkpoint_every=0"};
    sg_config c;
    CHECK(fx_config(&c, "crafted", sets, 3) == 0);
    CHECK_EQ_INT(sg_train_run(&c, NULL, &(sg_train_debug){.stop_at_iter = 1}, &(int){0}), SG_OK);
    char p1[1200], bad[1300];
    sg_ckpt_iter_path(c.run_dir, 1, p1, sizeof p1);
    snprintf(bad, sizeof bad, "%s.bad.safetensors", p1);
    CHECK(rewrite_f32(p1, bad, "optimizer.exp_avg_sq.encoder.conv1.weight", 0, -1.0f) == 0);
    th_cap_begin();
    sg_status rc = sg_train_run(&c, bad, &(sg_train_debug){0}, NULL);
    const char *msg = th_cap_end();
    CHECK(rc != SG_OK);
    CHECK_MSG(strstr(msg, "optimizer.exp_avg_sq.encoder.conv1.weight") &&
                  strstr(msg, "not negative"),
              "message: %s", msg);
    /* crafted metadata: a step count out of range or disagreeing with
     * momentum_initialized, an unknown optimizer; a file without
     * "optimizer" is SGD's (written before AdamW), so not this run's */
    static const struct {
        const char *key, *value, *want;
    } meta[] = {{"optimizer_steps", "-1", "'optimizer_steps'"},
                {"optimizer_steps", "0", "disagrees with 'momentum_initialized'"},
                {"optimizer", "adam", "'adam', not sgd or adamw"},
                {"optimizer", NULL, "written with train.optimizer=sgd, this run has adamw"}};
    for (size_t i = 0; i < sizeof meta / sizeof meta[0]; i++) {
        CHECK(ckpt_rewrite(p1, bad, meta[i].key, meta[i].value, NULL, 0) == 0);
        th_cap_begin();
        rc = sg_train_run(&c, bad, &(sg_train_debug){0}, NULL);
        msg = th_cap_end();
        CHECK_MSG(rc != SG_OK && strstr(msg, meta[i].want), "%s=%s: rc %d, message: %s",
                  meta[i].key, meta[i].value ? meta[i].value : "(removed)", rc, msg);
    }
}

/* ---- 2 ranks ---- */
/* FCN, no dropout, no augmentation, no shuffling, direct convolutions (the
 * reasons: tests/dist/test_ddp_train.c's EQ_SETS), 2 steps; `extra` the
 * optimizer's keys */
static int eq_config(sg_config *c, const char *run, int batch, int sync_bn,
                     const char *const *extra, int n_extra) {
    const char *sets[24] = {"model.arch=fcn",           "model.head_dropout=0",
                            "model.aux_dropout=0",      "data.scale_range=[1.0, 1.0]",
                            "data.hflip=false",         "data.shuffle=false",
                            "data.crop_size=[40, 40]",  "train.iters=2",
                            "train.checkpoint_every=2", "threads=1",
                            "train.eval_every=2"};
    int n = 11;
    char bs[64];
    snprintf(bs, sizeof bs, "train.batch_size=%d", batch);
    sets[n++] = bs;
    sets[n++] = sync_bn ? "model.sync_bn=true" : "model.sync_bn=false";
    for (int i = 0; i < n_extra && n < 24; i++) sets[n++] = extra[i];
    return fx_config(c, run, sets, n);
}

/* The first "grad_norm" of run_dir/metrics.jsonl, or NAN. */
static double first_grad_norm(const char *run_dir) {
    char path[1200];
    snprintf(path, sizeof path, "%s/metrics.jsonl", run_dir);
    char *m = th_read_file(path);
    const char *g = m ? strstr(m, "\"grad_norm\":") : NULL;
    double v = g ? strtod(g + strlen("\"grad_norm\":"), NULL) : NAN;
    free(m);
    return v;
}

static void ranks_case(const char *name, const char *const *opt, int n_opt, double limit,
                       double tol) {
    char r1[64], r2[64];
    snprintf(r1, sizeof r1, "%s_one_b4", name);
    snprintf(r2, sizeof r2, "%s_two_b2", name);
    sg_config one, two;
    CHECK(eq_config(&one, r1, 4, 0, opt, n_opt) == 0);
    CHECK(eq_config(&two, r2, 2, 1, opt, n_opt) == 0);
    setenv("SG_CPU_CONV", "off:onednn-wino,off:phases", 1);
    CHECK_EQ_INT(fx_train_ranks(&one, 1, 0, NULL, 0), 0);
    CHECK_EQ_INT(fx_train_ranks(&two, 2, 0, NULL, 0), 0);
    unsetenv("SG_CPU_CONV");
    char pa[1200], pb[1200];
    sg_ckpt_iter_path(one.run_dir, 2, pa, sizeof pa);
    sg_ckpt_iter_path(two.run_dir, 2, pb, sizeof pb);
    int n = 0;
    double d = max_rel(pa, pb, &n);
    fprintf(stderr, "  %s: 2 ranks x 2 vs 1 rank x 4: max rel diff %.3g over %d tensors\n", name, d,
            n);
    CHECK(n > 100);
    CHECK_MSG(d < tol, "%s: 2 ranks x 2 differ from 1 rank x 4 by %.3g", name, d);
    double g1 = first_grad_norm(one.run_dir), g2 = first_grad_norm(two.run_dir);
    CHECK_MSG(g1 > limit,
              "%s: step 1's gradient norm %.4g is not above the limit %g: clipping "
              "was not exercised",
              name, g1, limit);
    CHECK_MSG(fabs(g1 - g2) <= 1e-5 * g1, "%s: pre-clip norms %.9g (1 rank) and %.9g (2 ranks)",
              name, g1, g2);
    /* both ranks hold the same weights: the 2-rank validation (each rank
     * its own weights on its share of the images) equals `segtrain eval`
     * of rank 0's checkpoint on 1 rank */
    char ev2[1200], ev1[1200];
    snprintf(ev2, sizeof ev2, "%s/eval/iter_00000002.json", two.run_dir);
    snprintf(ev1, sizeof ev1, "%s/%s_eval.json", fx_root, name);
    const char *e1[] = {"eval", "--checkpoint", pb, "--out", ev1, "--quiet"};
    CHECK_EQ_INT(th_run_cmd(sg_cmd_eval, e1, 6), 0);
    char *j2 = th_read_file(ev2), *j1 = th_read_file(ev1);
    int same = j2 && j1 && th_json_num(j2, "miou") == th_json_num(j1, "miou") &&
               !isnan(th_json_num(j1, "miou")) &&
               th_json_num(j2, "pixel_acc") == th_json_num(j1, "pixel_acc");
    fprintf(stderr, "  %s: mIoU 2-rank validation %.9f, 1-rank eval %.9f\n", name,
            j2 ? th_json_num(j2, "miou") : NAN, j1 ? th_json_num(j1, "miou") : NAN);
    free(j2);
    free(j1);
    CHECK_MSG(same, "%s: the 2-rank validation differs from 1-rank eval of the checkpoint (%s, %s)",
              name, ev2, ev1);
}

/* Measured (max rel diff of the checkpoints, AVX-512): SGD 1.7e-6, AdamW
 * 8.2e-5 in a BN bias, whose update m / sqrt(v) is scale-free, so an
 * element whose gradient is near zero turns the other summation order of
 * the all-reduce into a visible difference; hence AdamW's 5e-4. A clip on
 * each rank's own gradient before the all-reduce would scale each rank by
 * its own coefficient, which SGD's comparison would show. */
static void test_ranks(void) {
    /* a limit of 0.05: below the gradient norm (checked), so clipping acts */
    const char *adamw[] = {"train.optimizer=adamw", "train.lr=0.002", "train.eps=1e-6",
                           "train.clip_grad_norm=0.05"};
    ranks_case("adamw", adamw, 4, 0.05, 5e-4);
    const char *sgd[] = {"train.optimizer=sgd", "train.clip_grad_norm=0.05"};
    ranks_case("sgd", sgd, 2, 0.05, 1e-4);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s adamw|ranks\n", argv[0]);
        return 2;
    }
    if (fx_setup(argv[1], 11, 4, 60, 80, 19) != 0) return 1;
    sg_log_set_level(SG_LOG_WARN);
    if (!strcmp(argv[1], "adamw")) {
        TEST_RUN(test_adamw);
        TEST_RUN(test_crafted_state);
    } else if (!strcmp(argv[1], "ranks")) {
        TEST_RUN(test_ranks);
    } else {
        return 2;
    }
    fx_cleanup(tu_failed_cases != 0);
    return TEST_EXIT();
}
