/* tests/train/test_precision.c - train.precision bf16 end to end on the CPU
 * with the tiny network (resnet18 at width 8, 48x48 crops, synthetic
 * data), one case per argument:
 *   curves - the same run (seed, data, initial weights) trained in fp32 and
 *            in bf16 for CURVE_ITERS steps: both learn (the mean loss of the
 *            last LAST_N steps is below LEARN_FRAC of the first FIRST_N's),
 *            the first step's loss (identical weights and batch: conv
 *            rounding only) agrees within FIRST_TOL, and every window of
 *            WINDOW steps of the bf16 curve stays within CURVE_MARGIN of the
 *            fp32 curve's mean over that window (relative). Where this
 *            processor runs oneDNN's native bf16 kernels the run is repeated
 *            with the emulation (SG_CPU_BF16=emulated) and the two bf16
 *            curves must agree within the same margins (both are bf16 with
 *            float32 accumulation; only the summation order differs).
 *   resume - a bf16 checkpoint resumes in fp32 and an fp32 one in bf16: the
 *            checkpoints of both precisions hold the same tensors (names,
 *            dtypes F32/I64, shapes), the resumed runs finish, and their
 *            steps after the resume stay within RESUME_TOL of the
 *            uninterrupted run in the precision they resumed in.
 *   eval   - `segtrain eval` of one checkpoint in fp32 and in bf16: pixel
 *            accuracy and mIoU within EVAL_TOL (absolute).
 *   cache  - the bf16 weight copies (kernels/weight_cache.h) change nothing:
 *            CACHE_ITERS bf16 steps (with 2 micro-batches per step, so the
 *            copies are reused within a step) give bit-identical losses with
 *            the cache on and off (SG_WEIGHT_CACHE=0: converted on every
 *            call), natively where this processor can and emulated.
 * Threads: 1, so oneDNN's bf16 kernels never wait at a spinning barrier for
 * a thread the (loaded, shared) test machine has descheduled.
 */
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "cmd/commands.h"
#include "model/safetensors.h"
#include "testutil.h"
#include "tests/helpers.h"
#include "train/checkpoint.h"
#include "train/trainer.h"
#include "train_fixture.h"

#define CURVE_ITERS 160
#define FIRST_N 5
#define LAST_N 20
#define WINDOW 40
#define LEARN_FRAC 0.8   /* the last 20 steps' mean loss < 0.8 x the first 5's */
#define FIRST_TOL 1e-2   /* step 1: bf16 vs fp32 loss, relative */
#define CURVE_MARGIN 0.05 /* each 40-step window: |bf16 - fp32| / fp32 mean */
#define RESUME_TOL 0.02  /* steps after a resume vs the uninterrupted run, relative */
#define EVAL_TOL 0.01    /* pixel accuracy and mIoU, absolute */

static const char *base_sets[] = {"threads=1", "train.lr=0.01", "train.lr_schedule=constant",
                                  "data.workers=0", "train.batch_size=4"};
#define N_BASE 5

/* Trains `run` for iters steps in `precision`; losses[iters]. */
static int train_curve(const char *run, const char *precision, int iters, double *losses) {
    char it[64], pr[64];
    snprintf(it, sizeof it, "train.iters=%d", iters);
    snprintf(pr, sizeof pr, "train.precision=%s", precision);
    const char *sets[N_BASE + 2];
    for (int i = 0; i < N_BASE; i++) sets[i] = base_sets[i];
    sets[N_BASE] = it;
    sets[N_BASE + 1] = pr;
    sg_config c;
    if (fx_config(&c, run, sets, N_BASE + 2) != 0) return -1;
    sg_train_debug d = {0};
    d.step_loss = losses;
    d.step_loss_cap = iters;
    int rc = sg_train_run(&c, NULL, &d, NULL);
    return rc == SG_OK && d.iters_done == iters ? 0 : -1;
}

static double mean(const double *v, int from, int n) {
    double s = 0;
    for (int i = from; i < from + n; i++) s += v[i];
    return s / n;
}

/* Checks that b follows a within the stated margins; what names the pair. */
static int close_curves(const double *a, const double *b, int n, const char *what) {
    double r1 = fabs(b[0] - a[0]) / fabs(a[0]);
    fprintf(stderr, "  %s: step 1 %.6f vs %.6f (rel %.2e, tol %g)\n", what, a[0], b[0], r1,
            FIRST_TOL);
    if (!(r1 <= FIRST_TOL)) return 0;
    for (int w = 0; w + WINDOW <= n; w += WINDOW) {
        double ma = mean(a, w, WINDOW), mb = mean(b, w, WINDOW);
        double r = fabs(mb - ma) / ma;
        fprintf(stderr, "  %s: steps %3d-%3d mean %.4f vs %.4f (rel %.3f, margin %g)\n", what,
                w + 1, w + WINDOW, ma, mb, r, CURVE_MARGIN);
        if (!(r <= CURVE_MARGIN)) return 0;
    }
    return 1;
}

static int learns(const double *v, int n, const char *what) {
    double f = mean(v, 0, FIRST_N), l = mean(v, n - LAST_N, LAST_N);
    fprintf(stderr, "  %s: first %d steps %.4f -> last %d steps %.4f (must be < %.2f x)\n", what,
            FIRST_N, f, LAST_N, l, LEARN_FRAC);
    return l < LEARN_FRAC * f;
}

static int native_here(void) {
    sg_backend_opts o = {.threads = 1, .precision = SG_PRECISION_BF16};
    sg_backend *be = sg_backend_create("cpu", &o);
    if (!be) return 0;
    sg_backend_info bi;
    sg_backend_get_info(be, &bi);
    int native = strstr(bi.conv_math, "native") != NULL;
    sg_backend_destroy(be);
    return native;
}

static void test_curves(void) {
    double f[CURVE_ITERS], b[CURVE_ITERS], e[CURVE_ITERS];
    CHECK(train_curve("fp32", "fp32", CURVE_ITERS, f) == 0);
    CHECK(train_curve("bf16", "bf16", CURVE_ITERS, b) == 0);
    CHECK(learns(f, CURVE_ITERS, "fp32"));
    CHECK(learns(b, CURVE_ITERS, "bf16"));
    CHECK(close_curves(f, b, CURVE_ITERS, "fp32 vs bf16"));
    /* the bf16 run did round: its losses are not the fp32 ones */
    int differ = 0;
    for (int i = 0; i < CURVE_ITERS; i++) differ |= f[i] != b[i];
    CHECK_MSG(differ, "the bf16 run gave the fp32 losses bit for bit: precision not applied");
    if (!native_here()) {
        fprintf(stderr, "  (this processor has no bf16 instructions: the bf16 run above was the "
                        "emulation; no native run to compare)\n");
        return;
    }
    setenv("SG_CPU_BF16", "emulated", 1);
    int rc = train_curve("bf16-emu", "bf16", CURVE_ITERS, e);
    unsetenv("SG_CPU_BF16");
    CHECK(rc == 0);
    CHECK(learns(e, CURVE_ITERS, "bf16 emulated"));
    CHECK(close_curves(b, e, CURVE_ITERS, "bf16 native vs emulated"));
}

/* ---------------- the bf16 weight cache ---------------- */

#define CACHE_ITERS 12

/* bf16 losses of CACHE_ITERS steps with the weight cache as `cache` says. */
static int cache_curve(const char *run, const char *cache, double *losses) {
    setenv("SG_WEIGHT_CACHE", cache, 1);
    const char *sets[N_BASE + 3];
    for (int i = 0; i < N_BASE; i++) sets[i] = base_sets[i];
    char it[64];
    snprintf(it, sizeof it, "train.iters=%d", CACHE_ITERS);
    sets[N_BASE] = it;
    sets[N_BASE + 1] = "train.precision=bf16";
    sets[N_BASE + 2] = "train.accum_steps=2";
    sg_config c;
    int rc = fx_config(&c, run, sets, N_BASE + 3);
    sg_train_debug d = {0};
    d.step_loss = losses;
    d.step_loss_cap = CACHE_ITERS;
    if (rc == 0) rc = sg_train_run(&c, NULL, &d, NULL) == SG_OK && d.iters_done == CACHE_ITERS ? 0 : -1;
    unsetenv("SG_WEIGHT_CACHE");
    return rc;
}

static void cache_pair(const char *what) {
    double on[CACHE_ITERS], off[CACHE_ITERS];
    char r1[64], r2[64];
    snprintf(r1, sizeof r1, "cache-on-%s", what);
    snprintf(r2, sizeof r2, "cache-off-%s", what);
    CHECK(cache_curve(r1, "1", on) == 0);
    CHECK(cache_curve(r2, "0", off) == 0);
    for (int i = 0; i < CACHE_ITERS; i++)
        CHECK_MSG(memcmp(&on[i], &off[i], sizeof on[i]) == 0,
                  "bf16 %s: step %d loss %.17g with the weight cache, %.17g converting on every "
                  "call: a stale or wrong bf16 weight copy",
                  what, i + 1, on[i], off[i]);
    fprintf(stderr, "  bf16 %s: %d steps bit-identical with and without the weight cache "
                    "(last loss %.6f)\n",
            what, CACHE_ITERS, on[CACHE_ITERS - 1]);
}

static void test_cache(void) {
    if (native_here()) cache_pair("native");
    else fprintf(stderr, "  (no bf16 instructions here: the native path is not run)\n");
    if (tu_case_failed) return;
    setenv("SG_CPU_BF16", "emulated", 1);
    cache_pair("emulated");
    unsetenv("SG_CPU_BF16");
}

/* ---------------- resume across precisions ---------------- */

/* Same tensor set (names, dtypes, shapes) in two checkpoint files, all
 * float tensors F32. */
static int same_layout(const char *pa, const char *pb) {
    sg_st_file *a = sg_st_open(pa), *b = sg_st_open(pb);
    int ok = a && b && sg_st_count(a) == sg_st_count(b);
    for (int i = 0; ok && i < sg_st_count(a); i++) {
        const sg_st_tensor *ta = sg_st_get(a, i), *tb = sg_st_find(b, ta->name);
        ok = tb && ta->dtype == tb->dtype && ta->count == tb->count && ta->ndim == tb->ndim &&
             (ta->dtype == SG_ST_F32 || ta->dtype == SG_ST_I64);
        for (int k = 0; ok && k < ta->ndim; k++) ok = ta->shape[k] == tb->shape[k];
        if (!ok) fprintf(stderr, "  tensor %s differs between %s and %s\n", ta->name, pa, pb);
    }
    if (a) sg_st_close(a);
    if (b) sg_st_close(b);
    return ok;
}

/* A run started in `from`, stopped after step 3, resumed in `to` to step 6;
 * losses[6] (steps 4-6 from the resumed part). */
static int resume_run(const char *run, const char *from, const char *to, double *losses,
                      char *ckpt3, size_t cap) {
    char pr[64];
    snprintf(pr, sizeof pr, "train.precision=%s", from);
    const char *sets[N_BASE + 3];
    for (int i = 0; i < N_BASE; i++) sets[i] = base_sets[i];
    sets[N_BASE] = "train.iters=6";
    sets[N_BASE + 1] = "train.checkpoint_every=0";
    sets[N_BASE + 2] = pr;
    sg_config c;
    if (fx_config(&c, run, sets, N_BASE + 3) != 0) return -1;
    sg_train_debug d = {0};
    d.step_loss = losses;
    d.step_loss_cap = 6;
    d.stop_at_iter = 3;
    int sig = 0;
    if (sg_train_run(&c, NULL, &d, &sig) != SG_OK || sig != SIGTERM || d.iters_done != 3)
        return -1;
    sg_ckpt_iter_path(c.run_dir, 3, ckpt3, cap);
    snprintf(pr, sizeof pr, "train.precision=%s", to);
    if (sg_config_set(&c, pr) != 0) return -1;
    sg_train_debug r = {0};
    double after[6] = {0};
    r.step_loss = after;
    r.step_loss_cap = 6;
    if (sg_train_run(&c, "auto", &r, NULL) != SG_OK || r.iters_done != 6) return -1;
    for (int i = 3; i < 6; i++) losses[i] = after[i];
    return after[0] == 0.0 ? 0 : -1; /* steps 1-3 were not re-run */
}

static void test_resume(void) {
    double f[6], b[6], fb[6], bf[6];
    CHECK(train_curve("plain-fp32", "fp32", 6, f) == 0);
    CHECK(train_curve("plain-bf16", "bf16", 6, b) == 0);
    char ck_f[1200], ck_b[1200];
    CHECK(resume_run("fp32-to-bf16", "fp32", "bf16", fb, ck_f, sizeof ck_f) == 0);
    CHECK(resume_run("bf16-to-fp32", "bf16", "fp32", bf, ck_b, sizeof ck_b) == 0);
    /* a checkpoint is a checkpoint: the precision leaves no trace in it */
    CHECK(same_layout(ck_f, ck_b));
    for (int i = 0; i < 3; i++) {
        /* before the stop each run is its own precision's run, bit for bit */
        CHECK_MSG(fb[i] == f[i] && bf[i] == b[i], "step %d before the stop differs", i + 1);
    }
    for (int i = 3; i < 6; i++) {
        double r1 = fabs(fb[i] - b[i]) / b[i], r2 = fabs(bf[i] - f[i]) / f[i];
        fprintf(stderr, "  step %d: fp32->bf16 %.5f (bf16 run %.5f, rel %.2e); bf16->fp32 "
                "%.5f (fp32 run %.5f, rel %.2e); tol %g\n", i + 1, fb[i], b[i], r1, bf[i], f[i],
                r2, RESUME_TOL);
        CHECK(r1 <= RESUME_TOL && r2 <= RESUME_TOL);
    }
}

/* ---------------- eval in bf16 ---------------- */

static double json_num(const char *json, const char *key) {
    char k[64];
    snprintf(k, sizeof k, "\"%s\":", key);
    const char *p = strstr(json, k);
    return p ? strtod(p + strlen(k), NULL) : NAN;
}

static int eval_json(const char *ckpt, const char *precision, const char *out, double *acc,
                     double *miou) {
    char set[64];
    snprintf(set, sizeof set, "train.precision=%s", precision);
    const char *args[] = {"eval", "--checkpoint", ckpt, "--out", out, "--quiet", "--set", set,
                          "--set", "threads=1", NULL};
    if (sg_cmd_eval(10, (char **)args) != 0) return -1;
    char *json = th_read_file(out);
    if (!json) return -1;
    *acc = json_num(json, "pixel_acc");
    *miou = json_num(json, "miou");
    free(json);
    return isfinite(*acc) && isfinite(*miou) ? 0 : -1;
}

static void test_eval(void) {
    double l[60];
    CHECK(train_curve("for-eval", "fp32", 60, l) == 0);
    char ck[1200], o1[1200], o2[1200];
    snprintf(ck, sizeof ck, "%s/for-eval/checkpoints/iter_00000060.safetensors", fx_root);
    snprintf(o1, sizeof o1, "%s/eval-fp32.json", fx_root);
    snprintf(o2, sizeof o2, "%s/eval-bf16.json", fx_root);
    double a1, m1, a2, m2;
    CHECK(eval_json(ck, "fp32", o1, &a1, &m1) == 0);
    CHECK(eval_json(ck, "bf16", o2, &a2, &m2) == 0);
    fprintf(stderr, "  eval fp32: pixel acc %.4f mIoU %.4f; bf16: %.4f %.4f (tol %g)\n", a1, m1,
            a2, m2, EVAL_TOL);
    CHECK(fabs(a1 - a2) <= EVAL_TOL && fabs(m1 - m2) <= EVAL_TOL);
    CHECK(a1 > 0.1); /* it learnt something worth comparing */
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: test_precision curves|resume|eval|cache\n");
        return 2;
    }
    sg_log_set_level(SG_LOG_WARN);
    if (fx_setup(argv[1], 16, 4, 60, 80, 19) != 0) {
        fprintf(stderr, "fixture setup failed\n");
        return 1;
    }
    if (strcmp(argv[1], "curves") == 0) TEST_RUN(test_curves);
    else if (strcmp(argv[1], "resume") == 0) TEST_RUN(test_resume);
    else if (strcmp(argv[1], "eval") == 0) TEST_RUN(test_eval);
    else if (strcmp(argv[1], "cache") == 0) TEST_RUN(test_cache);
    else {
        fprintf(stderr, "unknown case %s\n", argv[1]);
        return 2;
    }
    int rc = TEST_EXIT();
    fx_cleanup(rc != 0);
    return rc;
}
