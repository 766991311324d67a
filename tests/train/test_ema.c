/* tests/train/test_ema.c - EMA of the weights (train/ema.h, issue 16) end to
 * end on the CPU with the tiny network and synthetic data. One case per
 * argument:
 *   recursion - every checkpoint of a run (checkpoint_every 1) holds ema.*
 *               equal, bit for bit, to the recursion
 *               ema_k = fl(fl(d * ema_{k-1}) + fl((1 - d) * w_k)) computed
 *               here on the host from the saved weights w_k (parameters and
 *               BN running stats; num_batches_tracked copied), starting
 *               from the seed's initial weights, with ema_every 1 and 2
 *   resume    - interrupted at step 3 and resumed: EMA (and weights)
 *               bit-identical to the uninterrupted run's; a checkpoint
 *               without ema.* resumes with a fresh EMA from its weights
 *   eval      - in-training validation with eval.use_ema equals `segtrain
 *               eval` of the checkpoint (which uses its ema.*) and `segtrain
 *               eval` of `export --ema`'s file; eval.use_ema false evaluates
 *               the trained weights (other numbers); swapping the EMA in and
 *               out for validation leaves training bit-identical
 *   ranks     - 2 ranks (forked, rendezvous on localhost): every checkpoint's
 *               ema.* is the host recursion of its (all-reduced) weights, as
 *               in `recursion`; the 2-rank validation with the EMA (each
 *               rank its share of the val split, on its own EMA) gives the
 *               mIoU `segtrain eval` of the checkpoint gives on 1 rank, so
 *               rank 1's EMA is rank 0's; resumed on 1 rank, the next step's
 *               EMA continues the checkpoint's (the recursion from its ema.*,
 *               not a fresh copy of its weights)
 */
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "cmd/commands.h"
#include "io/safetensors.h"
#include "model/model.h"
#include "tests/helpers.h"
#include "testutil.h"
#include "train/checkpoint.h"
#include "train/ema.h"
#include "train/trainer.h"
#include "train_fixture.h"

/* A checkpoint at "step 0": the seed's initial weights (as the trainer
 * builds them) with an EMA copied from them. */
static int write_step0(const sg_config *c, const char *path) {
    sg_backend *be = sg_backend_create("cpu", &(sg_backend_opts){.threads = 2});
    if (!be) return -1;
    sg_model_opts mo;
    if (sg_model_opts_from_config(&mo, c) != SG_OK) return -1;
    sg_model *m = sg_model_create(be, &mo);
    if (!m) return -1;
    sg_model_init(m, (uint64_t)c->seed);
    sg_ema_state e;
    if (sg_ema_init(&e, m, c->train.ema_decay, c->train.ema_every) != SG_OK) return -1;
    sg_ema_copy_from_model(&e);
    sg_train_state st = {.iter = 0, .world = 1, .seed = 7, .best_miou = NAN, .best_iter = -1};
    sg_status rc = sg_ckpt_save_ema(path, m, NULL, &st, NULL, c, &e);
    sg_ema_free(&e);
    sg_model_destroy(m);
    sg_backend_destroy(be);
    return rc == SG_OK ? 0 : -1;
}

/* Checks ema.* of `cur` against the recursion from `prev`'s ema.* and
 * `cur`'s weights (updated) or against prev's ema.* (not updated). Returns
 * the number of mismatching values (the first described in what); *tensors
 * counts the ema tensors checked. */
static long check_step(const char *prev, const char *cur, double decay, int updated, int *tensors,
                       char *what, size_t cap) {
    sg_st_file *fp = sg_st_open(prev), *fc = sg_st_open(cur);
    if (!fp || !fc) {
        snprintf(what, cap, "cannot open %s or %s", prev, cur);
        return -1;
    }
    long bad = 0;
    *tensors = 0;
    const float d = (float)decay, om = (float)(1.0 - decay);
    for (int i = 0; i < sg_st_count(fc); i++) {
        const sg_st_tensor *te = sg_st_get(fc, i);
        if (strncmp(te->name, "ema.", 4) != 0) continue;
        const sg_st_tensor *tp = sg_st_find(fp, te->name), *tw = sg_st_find(fc, te->name + 4);
        if (!tp || !tw || tp->count != te->count || tw->count != te->count) {
            snprintf(what, cap, "%s: missing counterpart", te->name);
            bad++;
            continue;
        }
        (*tensors)++;
        if (te->dtype == SG_ST_I64) { /* num_batches_tracked: copied at updates */
            int64_t e, p, w;
            sg_st_read_i64(fc, te, &e, 1);
            sg_st_read_i64(fp, tp, &p, 1);
            sg_st_read_i64(fc, tw, &w, 1);
            int64_t want = updated ? w : p;
            if (e != want) {
                if (!bad)
                    snprintf(what, cap, "%s = %lld, want %lld", te->name, (long long)e,
                             (long long)want);
                bad++;
            }
            continue;
        }
        float *e = malloc(te->nbytes), *p = malloc(te->nbytes), *w = malloc(te->nbytes);
        sg_st_read_f32(fc, te, e, te->count);
        sg_st_read_f32(fp, tp, p, tp->count);
        sg_st_read_f32(fc, tw, w, tw->count);
        for (size_t k = 0; k < te->count; k++) {
            float a = d * p[k];
            float b = om * w[k];
            float want = updated ? a + b : p[k];
            if (memcmp(&want, &e[k], sizeof want) != 0) {
                if (!bad)
                    snprintf(what, cap, "%s[%zu] = %.9g, recursion %.9g", te->name, k, e[k], want);
                bad++;
            }
        }
        free(e);
        free(p);
        free(w);
    }
    sg_st_close(fp);
    sg_st_close(fc);
    return bad;
}

static int count_model_tensors(const char *path) {
    sg_st_file *f = sg_st_open(path);
    if (!f) return -1;
    int n = 0;
    for (int i = 0; i < sg_st_count(f); i++) {
        const char *name = sg_st_get(f, i)->name;
        if (strncmp(name, "ema.", 4) && strncmp(name, "optimizer.", 10)) n++;
    }
    sg_st_close(f);
    return n;
}

static void test_recursion(void) {
    const struct {
        int every, iters;
        double decay;
    } runs[] = {{2, 5, 0.8}, {1, 3, 0.9}};
    for (int r = 0; r < 2; r++) {
        char name[32], s_iters[32], s_decay[48], s_every[32];
        snprintf(name, sizeof name, "rec%d", r);
        snprintf(s_iters, sizeof s_iters, "train.iters=%d", runs[r].iters);
        snprintf(s_decay, sizeof s_decay, "train.ema_decay=%.17g", runs[r].decay);
        snprintf(s_every, sizeof s_every, "train.ema_every=%d", runs[r].every);
        /* lr high enough that the weights move visibly each step */
        const char *sets[] = {s_iters,
                              s_decay,
                              s_every,
                              "train.checkpoint_every=1",
                              "train.keep_checkpoints=0",
                              "train.lr=0.05"};
        sg_config c;
        CHECK(fx_config(&c, name, sets, 6) == 0);
        sg_train_debug dbg = {0};
        CHECK_EQ_INT(sg_train_run(&c, NULL, &dbg, NULL), SG_OK);
        CHECK_EQ_INT(dbg.iters_done, runs[r].iters);
        char prev[1200], cur[1200];
        snprintf(prev, sizeof prev, "%s/step0.safetensors", fx_root);
        CHECK(write_step0(&c, prev) == 0);
        int model_tensors = count_model_tensors(prev);
        CHECK(model_tensors > 100);
        for (int k = 1; k <= runs[r].iters; k++) {
            sg_ckpt_iter_path(c.run_dir, k, cur, sizeof cur);
            int tensors = 0;
            char what[512] = "";
            long bad = check_step(prev, cur, runs[r].decay, k % runs[r].every == 0, &tensors, what,
                                  sizeof what);
            CHECK_MSG(bad == 0,
                      "every %d, step %d: %ld values differ from the recursion; "
                      "first: %s",
                      runs[r].every, k, bad, what);
            CHECK_EQ_INT(tensors, model_tensors); /* every state-dict entry has its ema. */
            snprintf(prev, sizeof prev, "%s", cur);
        }
        /* the weights did move, and the EMA is not the weights */
        sg_st_file *f = sg_st_open(cur);
        CHECK(f != NULL);
        const sg_st_tensor *a = sg_st_find(f, "decoder.4.weight"),
                           *b = sg_st_find(f, "ema.decoder.4.weight");
        CHECK(a && b && a->count == b->count);
        CHECK(memcmp(a->data, b->data, a->nbytes) != 0);
        CHECK(sg_st_meta(f, "ema") != NULL);
        sg_st_close(f);
    }
}

/* 0 when every tensor of a (model, optimizer, ema) is in b with the same
 * bytes; else the number that differ, the first named in what. */
static int same_files(const char *pa, const char *pb, int *n_ema, char *what, size_t cap) {
    sg_st_file *a = sg_st_open(pa), *b = sg_st_open(pb);
    if (!a || !b) return -1;
    int bad = 0;
    *n_ema = 0;
    for (int i = 0; i < sg_st_count(a); i++) {
        const sg_st_tensor *ta = sg_st_get(a, i), *tb = sg_st_find(b, ta->name);
        if (!strncmp(ta->name, "ema.", 4)) (*n_ema)++;
        if (!tb || tb->nbytes != ta->nbytes || memcmp(ta->data, tb->data, ta->nbytes) != 0) {
            if (!bad) snprintf(what, cap, "%s", ta->name);
            bad++;
        }
    }
    if (sg_st_count(a) != sg_st_count(b)) bad++;
    sg_st_close(a);
    sg_st_close(b);
    return bad;
}

static void test_resume(void) {
    const char *sets[] = {"train.iters=6", "train.ema_decay=0.7", "train.lr=0.05"};
    sg_config a, b;
    CHECK(fx_config(&a, "straight", sets, 3) == 0);
    CHECK(fx_config(&b, "resumed", sets, 3) == 0);
    sg_train_debug da = {0};
    CHECK_EQ_INT(sg_train_run(&a, NULL, &da, NULL), SG_OK);
    sg_train_debug db = {0};
    db.stop_at_iter = 3;
    int sig = 0;
    CHECK_EQ_INT(sg_train_run(&b, NULL, &db, &sig), SG_OK);
    CHECK_EQ_INT(sig, SIGTERM);
    CHECK_EQ_INT(db.iters_done, 3);
    sg_train_debug dc = {0};
    CHECK_EQ_INT(sg_train_run(&b, "auto", &dc, NULL), SG_OK);
    CHECK_EQ_INT(dc.iters_done, 6);
    char pa[1200], pb[1200], what[256] = "";
    sg_ckpt_iter_path(a.run_dir, 6, pa, sizeof pa);
    sg_ckpt_iter_path(b.run_dir, 6, pb, sizeof pb);
    int n_ema = 0;
    int bad = same_files(pa, pb, &n_ema, what, sizeof what);
    CHECK_MSG(bad == 0, "%d tensors differ after resume, first %s", bad, what);
    CHECK(n_ema > 100);
    CHECK(da.last_val_miou == dc.last_val_miou); /* the EMA's validation, both runs */

    /* a checkpoint without ema.*: the EMA starts again from its weights */
    const char *s0[] = {"train.iters=2", "train.lr=0.05", "train.checkpoint_every=1",
                        "train.keep_checkpoints=0"};
    sg_config c0;
    CHECK(fx_config(&c0, "late_ema", s0, 4) == 0);
    CHECK_EQ_INT(sg_train_run(&c0, NULL, NULL, NULL), SG_OK);
    char p2[1200], p3[1200];
    sg_ckpt_iter_path(c0.run_dir, 2, p2, sizeof p2);
    sg_st_file *f = sg_st_open(p2);
    CHECK(f != NULL);
    CHECK(!sg_ckpt_has_ema(f));
    sg_st_close(f);
    const char *s1[] = {"train.iters=3", "train.lr=0.05", "train.checkpoint_every=1",
                        "train.keep_checkpoints=0", "train.ema_decay=0.6"};
    sg_config c1;
    CHECK(fx_config(&c1, "late_ema", s1, 5) == 0);
    CHECK_EQ_INT(sg_train_run(&c1, "auto", NULL, NULL), SG_OK);
    sg_ckpt_iter_path(c1.run_dir, 3, p3, sizeof p3);
    /* iter_2 as "the EMA before step 3" = its weights: write them as ema.* */
    char p2e[1200];
    snprintf(p2e, sizeof p2e, "%s/iter2_ema.safetensors", fx_root);
    {
        sg_backend *be = sg_backend_create("cpu", &(sg_backend_opts){.threads = 2});
        CHECK(be != NULL);
        sg_model_opts mo;
        CHECK(sg_model_opts_from_config(&mo, &c1) == SG_OK);
        sg_model *m = sg_model_create(be, &mo);
        CHECK(m != NULL);
        f = sg_st_open(p2);
        CHECK(f != NULL);
        CHECK_EQ_INT(sg_ckpt_load_model(f, m), SG_OK);
        sg_st_close(f);
        sg_ema_state e;
        CHECK_EQ_INT(sg_ema_init(&e, m, 0.6, 1), SG_OK);
        sg_ema_copy_from_model(&e);
        sg_train_state st = {.iter = 2, .world = 1, .seed = 7, .best_miou = NAN, .best_iter = -1};
        CHECK_EQ_INT(sg_ckpt_save_ema(p2e, m, NULL, &st, NULL, &c1, &e), SG_OK);
        sg_ema_free(&e);
        sg_model_destroy(m);
        sg_backend_destroy(be);
    }
    int tensors = 0;
    long nbad = check_step(p2e, p3, 0.6, 1, &tensors, what, sizeof what);
    CHECK_MSG(nbad == 0, "fresh EMA after resume: %ld values differ, first %s", nbad, what);
    CHECK(tensors > 100);
}

static void test_eval(void) {
    const char *sa[] = {"train.iters=4", "train.ema_decay=0.5", "train.lr=0.05",
                        "train.eval_every=1"};
    const char *sb[] = {"train.iters=4", "train.ema_decay=0.5", "train.lr=0.05",
                        "train.eval_every=1", "eval.use_ema=false"};
    sg_config a, b;
    CHECK(fx_config(&a, "use_ema", sa, 4) == 0);
    CHECK(fx_config(&b, "no_ema_eval", sb, 5) == 0);
    sg_train_debug da = {0}, db = {0};
    CHECK_EQ_INT(sg_train_run(&a, NULL, &da, NULL), SG_OK);
    CHECK_EQ_INT(sg_train_run(&b, NULL, &db, NULL), SG_OK);
    char pa[1200], pb[1200], what[256] = "";
    sg_ckpt_iter_path(a.run_dir, 4, pa, sizeof pa);
    sg_ckpt_iter_path(b.run_dir, 4, pb, sizeof pb);
    /* four validations with the EMA swapped in and out: training unchanged */
    int n_ema = 0;
    int bad = same_files(pa, pb, &n_ema, what, sizeof what);
    CHECK_MSG(bad == 0, "evaluating the EMA changed training: %d tensors differ, first %s", bad,
              what);
    CHECK(n_ema > 100);

    /* segtrain eval of the checkpoint: its EMA by default */
    char out_ema[1200], out_plain[1200], out_exp[1200], exported[1200], cfg_path[1200];
    snprintf(out_ema, sizeof out_ema, "%s/eval_ema.json", fx_root);
    snprintf(out_plain, sizeof out_plain, "%s/eval_plain.json", fx_root);
    snprintf(out_exp, sizeof out_exp, "%s/eval_exported.json", fx_root);
    snprintf(exported, sizeof exported, "%s/ema_export.safetensors", fx_root);
    snprintf(cfg_path, sizeof cfg_path, "%s/config.yaml", a.run_dir);
    const char *e1[] = {"eval", "--checkpoint", pa, "--out", out_ema, "--quiet"};
    CHECK_EQ_INT(th_run_cmd(sg_cmd_eval, e1, 6), 0);
    const char *e2[] = {"eval",    "--checkpoint", pa,      "--out",
                        out_plain, "--quiet",      "--set", "eval.use_ema=false"};
    CHECK_EQ_INT(th_run_cmd(sg_cmd_eval, e2, 8), 0);
    const char *x[] = {"export", "--checkpoint", pa, "--out", exported, "--ema", "--quiet"};
    CHECK_EQ_INT(th_run_cmd(sg_cmd_export, x, 7), 0);
    const char *e3[] = {"eval",   "--checkpoint", exported, "--config",
                        cfg_path, "--out",        out_exp,  "--quiet"};
    CHECK_EQ_INT(th_run_cmd(sg_cmd_eval, e3, 8), 0);
    char *j_ema = th_read_file(out_ema), *j_plain = th_read_file(out_plain),
         *j_exp = th_read_file(out_exp);
    CHECK(j_ema && j_plain && j_exp);
    double m_ema = th_json_num(j_ema, "miou"), m_plain = th_json_num(j_plain, "miou"),
           m_exp = th_json_num(j_exp, "miou");
    fprintf(stderr,
            "  mIoU: in-training (EMA) %.9f, eval EMA %.9f, eval exported EMA %.9f, eval "
            "trained weights %.9f; without use_ema in training %.9f\n",
            da.last_val_miou, m_ema, m_exp, m_plain, db.last_val_miou);
    CHECK(m_ema == da.last_val_miou);   /* in-training validation used the EMA */
    CHECK(m_plain == db.last_val_miou); /* ... and without use_ema the weights */
    CHECK(m_exp == m_ema);
    CHECK(th_json_num(j_exp, "pixel_acc") == th_json_num(j_ema, "pixel_acc"));
    CHECK(th_json_num(j_exp, "macc") == th_json_num(j_ema, "macc"));
    /* the two sets of weights give other predictions */
    CHECK(m_plain != m_ema || th_json_num(j_plain, "pixel_acc") != th_json_num(j_ema, "pixel_acc"));
    free(j_ema);
    free(j_plain);
    free(j_exp);
    /* the exported file holds exactly the model's names with the EMA's values */
    sg_st_file *fe = sg_st_open(exported), *fc = sg_st_open(pa);
    CHECK(fe && fc);
    int n = 0;
    for (int i = 0; i < sg_st_count(fe); i++) {
        const sg_st_tensor *t = sg_st_get(fe, i);
        char name[256];
        snprintf(name, sizeof name, "ema.%s", t->name);
        const sg_st_tensor *u = sg_st_find(fc, name);
        CHECK_MSG(u && u->nbytes == t->nbytes && memcmp(u->data, t->data, t->nbytes) == 0,
                  "exported %s is not the checkpoint's %s", t->name, name);
        n++;
    }
    CHECK_EQ_INT(n, count_model_tensors(pa));
    sg_st_close(fe);
    sg_st_close(fc);
    /* export --ema of a checkpoint without an EMA is refused */
    char plain_ck[1200];
    const char *s0[] = {"train.iters=1"};
    sg_config c0;
    CHECK(fx_config(&c0, "plain", s0, 1) == 0);
    CHECK_EQ_INT(sg_train_run(&c0, NULL, NULL, NULL), SG_OK);
    sg_ckpt_iter_path(c0.run_dir, 1, plain_ck, sizeof plain_ck);
    const char *x2[] = {"export", "--checkpoint", plain_ck, "--out", exported, "--ema", "--quiet"};
    CHECK_EQ_INT(th_run_cmd(sg_cmd_export, x2, 7), 2); /* the user's input: exit 2 */
}

static void test_ranks(void) {
    const double decay = 0.8;
    const char *sets[] = {"train.iters=3",
                          "train.ema_decay=0.8",
                          "train.ema_every=1",
                          "train.checkpoint_every=1",
                          "train.keep_checkpoints=0",
                          "train.lr=0.05",
                          "train.eval_every=3"};
    sg_config c;
    CHECK(fx_config(&c, "ema_ranks", sets, 7) == 0);
    CHECK_MSG(fx_train_ranks(&c, 2, 0, NULL, 0) == 0, "the 2-rank run with EMA failed");
    char prev[1200], cur[1200], what[512] = "";
    snprintf(prev, sizeof prev, "%s/step0.safetensors", fx_root);
    CHECK(write_step0(&c, prev) == 0);
    int model_tensors = count_model_tensors(prev);
    CHECK(model_tensors > 100);
    for (int k = 1; k <= 3; k++) {
        sg_ckpt_iter_path(c.run_dir, k, cur, sizeof cur);
        int tensors = 0;
        long bad = check_step(prev, cur, decay, 1, &tensors, what, sizeof what);
        CHECK_MSG(bad == 0, "2 ranks, step %d: %ld values differ from the recursion; first: %s", k,
                  bad, what);
        CHECK_EQ_INT(tensors, model_tensors);
        snprintf(prev, sizeof prev, "%s", cur);
    }
    sg_st_file *f3 = sg_st_open(cur); /* the run did train on 2 ranks */
    CHECK(f3 != NULL);
    const char *ws = f3 ? sg_st_meta(f3, "world_size") : NULL;
    CHECK_MSG(ws && strcmp(ws, "2") == 0, "world_size of %s is %s, want 2", cur,
              ws ? ws : "absent");
    if (f3) sg_st_close(f3);
    /* the 2-rank validation at step 3 (EMA swapped in on both ranks) against
     * `segtrain eval` of the step-3 checkpoint (its ema.*) on 1 rank */
    char ev2[1200], ev1[1200];
    snprintf(ev2, sizeof ev2, "%s/eval/iter_00000003.json", c.run_dir);
    snprintf(ev1, sizeof ev1, "%s/ema_ranks_eval.json", fx_root);
    const char *e1[] = {"eval", "--checkpoint", cur, "--out", ev1, "--quiet"};
    CHECK_EQ_INT(th_run_cmd(sg_cmd_eval, e1, 6), 0);
    char *j2 = th_read_file(ev2), *j1 = th_read_file(ev1);
    CHECK_MSG(j2 && j1, "missing %s or %s", ev2, ev1);
    if (j2 && j1) {
        double m2 = th_json_num(j2, "miou"), m1 = th_json_num(j1, "miou");
        fprintf(stderr, "  mIoU with the EMA: 2-rank validation %.9f, 1-rank eval %.9f\n", m2, m1);
        CHECK(!isnan(m1) && m2 == m1);
        CHECK(th_json_num(j2, "pixel_acc") == th_json_num(j1, "pixel_acc"));
    }
    free(j2);
    free(j1);
    /* resume the 2-rank checkpoint on 1 rank for one more step */
    const char *s1[] = {"train.iters=4",
                        "train.ema_decay=0.8",
                        "train.ema_every=1",
                        "train.checkpoint_every=1",
                        "train.keep_checkpoints=0",
                        "train.lr=0.05",
                        "train.eval_every=3"};
    sg_config c1;
    CHECK(fx_config(&c1, "ema_ranks", s1, 7) == 0);
    sg_train_debug d = {0};
    CHECK_EQ_INT(sg_train_run(&c1, "auto", &d, NULL), SG_OK);
    CHECK_EQ_INT(d.iters_done, 4);
    sg_ckpt_iter_path(c1.run_dir, 4, cur, sizeof cur);
    int tensors = 0;
    long bad = check_step(prev, cur, decay, 1, &tensors, what, sizeof what);
    CHECK_MSG(bad == 0,
              "resumed on 1 rank: %ld EMA values differ from the recursion from the "
              "2-rank checkpoint's ema.*; first: %s",
              bad, what);
    CHECK_EQ_INT(tensors, model_tensors);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: test_ema recursion|resume|eval|ranks\n");
        return 2;
    }
    sg_log_set_level(SG_LOG_WARN);
    if (fx_setup(argv[1], 11, 3, 60, 80, 19) != 0) {
        fprintf(stderr, "fixture setup failed\n");
        return 1;
    }
    if (!strcmp(argv[1], "recursion")) TEST_RUN(test_recursion);
    else if (!strcmp(argv[1], "resume")) TEST_RUN(test_resume);
    else if (!strcmp(argv[1], "eval")) TEST_RUN(test_eval);
    else if (!strcmp(argv[1], "ranks")) TEST_RUN(test_ranks);
    else {
        fprintf(stderr, "unknown case %s\n", argv[1]);
        return 2;
    }
    int rc = TEST_EXIT();
    fx_cleanup(rc != 0);
    return rc;
}
