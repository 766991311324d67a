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
 *            the cache on and off (the test seam SG_WEIGHT_CACHE=0:
 *            converted on every call; skipped, 77, in a build without test
 *            seams), natively where this processor can and emulated.
 *   storage - bf16 activation storage (model/model_plan.c) changes nothing
 *            but memory: the training plan is float32 as before under fp32
 *            and with the test aid SG_BF16_STORAGE=0, smaller under bf16
 *            (for resnet50 at [2,3,512,1024] by exactly the halved bytes of
 *            the bf16-stored tensors, sg_model_plan_bf16_saving), and any
 *            other SG_BF16_STORAGE value is refused; bf16 gradients
 *            (SG_BF16_STORAGE=act keeps them float32) shrink it further and
 *            the plan dump shows which (conv outputs read by BN, BN+ReLU
 *            outputs read by one conv; never the residual stream's);
 *            STORAGE_ITERS
 *            bf16 steps (2 micro-batches each) give bit-identical losses and
 *            final checkpoints with storage on and off, natively where this
 *            processor can and emulated.
 * Threads: 1, so oneDNN's bf16 kernels never wait at a spinning barrier for
 * a thread the (loaded, shared) test machine has descheduled.
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
#include "train/trainer.h"
#include "train_fixture.h"

#define CURVE_ITERS 160
#define FIRST_N 5
#define LAST_N 20
#define WINDOW 40
#define LEARN_FRAC 0.8    /* the last 20 steps' mean loss < 0.8 x the first 5's */
#define FIRST_TOL 1e-2    /* step 1: bf16 vs fp32 loss, relative */
#define CURVE_MARGIN 0.05 /* each 40-step window: |bf16 - fp32| / fp32 mean */
#define RESUME_TOL 0.02   /* steps after a resume vs the uninterrupted run, relative */
#define EVAL_TOL 0.01     /* pixel accuracy and mIoU, absolute */

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
    if (rc == 0)
        rc = sg_train_run(&c, NULL, &d, NULL) == SG_OK && d.iters_done == CACHE_ITERS ? 0 : -1;
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
    fprintf(stderr,
            "  bf16 %s: %d steps bit-identical with and without the weight cache "
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

/* ---------------- bf16 activation storage ---------------- */

#define STORAGE_ITERS 12

/* bf16 losses of STORAGE_ITERS steps with SG_BF16_STORAGE=storage; the
 * final checkpoint's path in ckpt. */
static int storage_curve(const char *run, const char *storage, double *losses, char *ckpt,
                         size_t cap) {
    setenv("SG_BF16_STORAGE", storage, 1);
    const char *sets[N_BASE + 3];
    for (int i = 0; i < N_BASE; i++) sets[i] = base_sets[i];
    char it[64];
    snprintf(it, sizeof it, "train.iters=%d", STORAGE_ITERS);
    sets[N_BASE] = it;
    sets[N_BASE + 1] = "train.precision=bf16";
    sets[N_BASE + 2] = "train.accum_steps=2";
    sg_config c;
    int rc = fx_config(&c, run, sets, N_BASE + 3);
    sg_train_debug d = {0};
    d.step_loss = losses;
    d.step_loss_cap = STORAGE_ITERS;
    if (rc == 0)
        rc = sg_train_run(&c, NULL, &d, NULL) == SG_OK && d.iters_done == STORAGE_ITERS ? 0 : -1;
    if (rc == 0) sg_ckpt_iter_path(c.run_dir, STORAGE_ITERS, ckpt, cap);
    unsetenv("SG_BF16_STORAGE");
    return rc;
}

/* 1 if the checkpoints pa and pb hold the same tensors with the same bits. */
static int same_bits(const char *pa, const char *pb) {
    sg_st_file *a = sg_st_open(pa), *b = sg_st_open(pb);
    int ok = a && b && sg_st_count(a) == sg_st_count(b);
    if (!a || !b) fprintf(stderr, "  cannot open %s or %s\n", pa, pb);
    for (int i = 0; ok && i < sg_st_count(a); i++) {
        const sg_st_tensor *ta = sg_st_get(a, i), *tb = sg_st_find(b, ta->name);
        ok = tb && ta->dtype == tb->dtype && ta->count == tb->count;
        size_t bytes = ok ? ta->count * 8 : 0; /* room for either dtype */
        char *da = malloc(bytes ? bytes : 1), *db = malloc(bytes ? bytes : 1);
        if (ok && ta->dtype == SG_ST_F32)
            ok = sg_st_read_f32(a, ta, (float *)da, ta->count) == SG_OK &&
                 sg_st_read_f32(b, tb, (float *)db, tb->count) == SG_OK &&
                 memcmp(da, db, ta->count * sizeof(float)) == 0;
        else if (ok)
            ok = sg_st_read_i64(a, ta, (int64_t *)da, ta->count) == SG_OK &&
                 sg_st_read_i64(b, tb, (int64_t *)db, tb->count) == SG_OK &&
                 memcmp(da, db, ta->count * sizeof(int64_t)) == 0;
        if (!ok) fprintf(stderr, "  tensor %s differs between %s and %s\n", ta->name, pa, pb);
        free(da);
        free(db);
    }
    if (a) sg_st_close(a);
    if (b) sg_st_close(b);
    return ok;
}

static void storage_pair(const char *what) {
    double on[STORAGE_ITERS], off[STORAGE_ITERS];
    char r1[64], r2[64], c1[1200], c2[1200];
    snprintf(r1, sizeof r1, "storage-on-%s", what);
    snprintf(r2, sizeof r2, "storage-off-%s", what);
    CHECK(storage_curve(r1, "1", on, c1, sizeof c1) == 0);
    CHECK(storage_curve(r2, "0", off, c2, sizeof c2) == 0);
    if (tu_case_failed) return;
    for (int i = 0; i < STORAGE_ITERS; i++)
        CHECK_MSG(memcmp(&on[i], &off[i], sizeof on[i]) == 0,
                  "bf16 %s: step %d loss %.17g with bf16 activation storage, %.17g with float32 "
                  "activations (SG_BF16_STORAGE=0): the *_dt ops or the plan's choice of bf16 "
                  "tensors (model/model_plan.c) change results",
                  what, i + 1, on[i], off[i]);
    CHECK_MSG(same_bits(c1, c2),
              "bf16 %s: the checkpoints after %d steps with and without bf16 "
              "activation storage differ (%s, %s)",
              what, STORAGE_ITERS, c1, c2);
    fprintf(stderr,
            "  bf16 %s: %d steps (2 micro-batches each) bit-identical losses and "
            "checkpoints with and without bf16 activation storage (last loss %.6f)\n",
            what, STORAGE_ITERS, on[STORAGE_ITERS - 1]);
}

/* Training-plan bytes of the fixture's network at [2,3,48,48] on a CPU
 * backend of `precision` with SG_BF16_STORAGE=storage (NULL: unset), 0 if
 * refused; checks that sg_model_plan does what sg_model_plan_bytes says. */
static void plan_bytes_into(int precision, const char *storage, size_t *out) {
    *out = 0;
    sg_backend_opts o = {.threads = 1, .precision = precision};
    sg_backend *be = sg_backend_create("cpu", &o);
    if (!be) return;
    sg_config c;
    sg_model_opts mo;
    size_t bytes = 0;
    if (fx_config(&c, "plan", NULL, 0) == 0 && sg_model_opts_from_config(&mo, &c) == SG_OK) {
        sg_model *m = sg_model_create(be, &mo);
        if (storage) setenv("SG_BF16_STORAGE", storage, 1);
        if (m) bytes = *out = sg_model_plan_bytes(m, 2, 48, 48, 1);
        /* the real plan allocates what plan_bytes says, or refuses the same */
        if (m && bytes) {
            CHECK_MSG(sg_model_plan(m, 2, 48, 48) == SG_OK && sg_model_activation_bytes(m) == bytes,
                      "sg_model_plan allocates other than sg_model_plan_bytes's %zu B", bytes);
        } else if (m) {
            CHECK_MSG(sg_model_plan(m, 2, 48, 48) == SG_ERR_CONFIG,
                      "sg_model_plan accepts what sg_model_plan_bytes refused");
        }
        unsetenv("SG_BF16_STORAGE");
        sg_model_destroy(m);
    }
    sg_backend_destroy(be);
}

static size_t plan_bytes(int precision, const char *storage) {
    size_t b;
    plan_bytes_into(precision, storage, &b);
    return b;
}

/* The job: torchvision's deeplabv3_resnet50 (19 classes, aux head),
 * batch 2 at 512x1024, training plan without allocating it: bf16 storage
 * saves exactly the halved float32 bytes of the tensors it stores in bf16
 * (every one of them finds room in the smaller arena). */
static void r50_plan(void) {
    sg_backend_opts o = {.threads = 1, .precision = SG_PRECISION_BF16};
    sg_backend *be = sg_backend_create("cpu", &o);
    CHECK(be);
    sg_model_opts mo;
    sg_model_opts_default(&mo, SG_RESNET50);
    mo.num_classes = 19;
    sg_model *m = sg_model_create(be, &mo);
    if (!m) sg_backend_destroy(be);
    CHECK(m);
    setenv("SG_BF16_STORAGE", "0", 1);
    size_t off = sg_model_plan_bytes(m, 2, 512, 1024, 1);
    size_t none = sg_model_plan_bf16_saving(m, 2, 512, 1024, 1);
    setenv("SG_BF16_STORAGE", "act", 1); /* bf16 activations, float32 gradients */
    size_t on = sg_model_plan_bytes(m, 2, 512, 1024, 1);
    size_t saving = sg_model_plan_bf16_saving(m, 2, 512, 1024, 1);
    unsetenv("SG_BF16_STORAGE");
    size_t grad16 = sg_model_plan_bytes(m, 2, 512, 1024, 1); /* and bf16 gradients */
    /* the plan dump (segtrain bench --plan) of a small plan: the residual
     * stream (every add_relu, the last one read by ASPP's convs and pooling)
     * in bf16, the fused BNs without storage, a row per tensor */
    CHECK(sg_model_plan(m, 2, 64, 64) == SG_OK);
    char *dump = NULL;
    size_t dump_len = 0;
    FILE *f = open_memstream(&dump, &dump_len);
    CHECK(f);
    sg_model_plan_dump(m, f);
    fclose(f);
    int rows = 0, joins_bf16 = 0, joins_f32 = 0, fused = 0, g_conv = 0, g_bnrelu = 0, g_other = 0;
    int g_join = 0;
    for (char *line = strtok(dump, "\n"); line; line = strtok(NULL, "\n")) {
        rows++;
        if (strstr(line, " add_relu ") && strstr(line, " bf16 ")) joins_bf16++;
        if (strstr(line, " add_relu ") && strstr(line, " fp32 ")) joins_f32++;
        if (strstr(line, "none (fused)") && !strstr(line, "values")) fused++;
        /* bf16 gradients (grad_storage): conv outputs read by BN alone and
         * BN+ReLU outputs read by one conv alone; the residual stream's
         * gradient (several readers) stays float32 */
        if (strstr(line, " add_relu ") && strstr(line, "g:fp32")) g_join++;
        if (!strstr(line, "g:bf16") || strstr(line, "gradients (")) continue;
        if (strstr(line, " conv ")) g_conv++;
        else if (strstr(line, " bn+relu ")) g_bnrelu++;
        else g_other++;
    }
    free(dump);
    fprintf(stderr,
            "  plan dump: %d lines, %d bf16 joins, %d fp32, %d fused BNs; bf16 gradients: %d "
            "conv outputs, %d BN+ReLU outputs, %d others; %d fp32 join gradients\n",
            rows, joins_bf16, joins_f32, fused, g_conv, g_bnrelu, g_other, g_join);
    CHECK(rows == 4 + 149 && joins_bf16 == 16 && joins_f32 == 0 && fused == 16);
    /* every backbone conv (53, none with a bias) feeds a BN alone, as do
     * ASPP's six (four branches, the pooling branch's, the projection) and
     * the two heads' 3x3 convs: 61; each bottleneck's first two BN+ReLUs
     * feed one conv (32), and the main head's feeds its classifier */
    CHECK_MSG(g_conv == 61 && g_bnrelu == 33 && g_other == 0 && g_join == 16,
              "bf16 gradients: %d conv outputs, %d BN+ReLU outputs, %d others, %d fp32 joins",
              g_conv, g_bnrelu, g_other, g_join);
    sg_model_destroy(m);
    sg_backend_destroy(be);
    fprintf(stderr,
            "  resnet50 [2,3,512,1024] training arena: float32 activations %.1f MiB, "
            "bf16 storage %.1f MiB (saved %.1f MiB; bf16-stored tensors' halves %.1f MiB), "
            "with bf16 gradients %.1f MiB (%.1f MiB less)\n",
            off / 1048576.0, on / 1048576.0, (off - on) / 1048576.0, saving / 1048576.0,
            grad16 / 1048576.0, ((double)on - (double)grad16) / 1048576.0);
    CHECK(none == 0 && saving > 0);
    CHECK_MSG(on + saving == off, "the bf16 plan is %zu B, expected %zu - %zu B", on, off, saving);
    CHECK_MSG(grad16 < on, "bf16 gradients do not shrink the plan (%zu vs %zu B)", grad16, on);
}

static void test_storage(void) {
    /* the plan: float32 as before under fp32 and with storage off; smaller on */
    size_t f32 = plan_bytes(SG_PRECISION_FP32, NULL);
    size_t f32_on = plan_bytes(SG_PRECISION_FP32, "1");
    size_t off = plan_bytes(SG_PRECISION_BF16, "0");
    size_t on = plan_bytes(SG_PRECISION_BF16, NULL);
    fprintf(stderr,
            "  training arena at [2,3,48,48]: fp32 %zu B, bf16 with float32 activations "
            "%zu B, bf16 storage %zu B\n",
            f32, off, on);
    size_t act = plan_bytes(SG_PRECISION_BF16, "act");
    CHECK(f32 > 0 && f32_on == f32 && off == f32 && plan_bytes(SG_PRECISION_FP32, "act") == f32);
    CHECK_MSG(on > 0 && on < off, "bf16 storage does not shrink the plan (%zu vs %zu B)", on, off);
    /* the gradients' peak here lies in the head (float32 gradients) */
    CHECK_MSG(on <= act && act < off,
              "bf16 gradients grow the plan (%zu B, activations only %zu B)", on, act);
    r50_plan();
    if (tu_case_failed) return;
    /* the test aid takes 0, act or 1 only */
    CHECK(plan_bytes(SG_PRECISION_BF16, "yes") == 0);
    if (tu_case_failed) return;
    if (native_here()) storage_pair("native");
    else fprintf(stderr, "  (no bf16 instructions here: the native path is not run)\n");
    if (tu_case_failed) return;
    setenv("SG_CPU_BF16", "emulated", 1);
    storage_pair("emulated");
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
    if (sg_train_run(&c, NULL, &d, &sig) != SG_OK || sig != SIGTERM || d.iters_done != 3) return -1;
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
        fprintf(stderr,
                "  step %d: fp32->bf16 %.5f (bf16 run %.5f, rel %.2e); bf16->fp32 "
                "%.5f (fp32 run %.5f, rel %.2e); tol %g\n",
                i + 1, fb[i], b[i], r1, bf[i], f[i], r2, RESUME_TOL);
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
    const char *args[] = {"eval", "--checkpoint", ckpt,        "--out", out, "--quiet", "--set",
                          set,    "--set",        "threads=1", NULL};
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
    fprintf(stderr, "  eval fp32: pixel acc %.4f mIoU %.4f; bf16: %.4f %.4f (tol %g)\n", a1, m1, a2,
            m2, EVAL_TOL);
    CHECK(fabs(a1 - a2) <= EVAL_TOL && fabs(m1 - m2) <= EVAL_TOL);
    CHECK(a1 > 0.1); /* it learnt something worth comparing */
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: test_precision curves|resume|eval|cache|storage\n");
        return 2;
    }
    if (strcmp(argv[1], "cache") == 0 && !tu_have_seams("precision_cache (SG_WEIGHT_CACHE=0)"))
        return TEST_SKIP;
    sg_log_set_level(SG_LOG_WARN);
    if (fx_setup(argv[1], 16, 4, 60, 80, 19) != 0) {
        fprintf(stderr, "fixture setup failed\n");
        return 1;
    }
    if (strcmp(argv[1], "curves") == 0) TEST_RUN(test_curves);
    else if (strcmp(argv[1], "resume") == 0) TEST_RUN(test_resume);
    else if (strcmp(argv[1], "eval") == 0) TEST_RUN(test_eval);
    else if (strcmp(argv[1], "cache") == 0) TEST_RUN(test_cache);
    else if (strcmp(argv[1], "storage") == 0) TEST_RUN(test_storage);
    else {
        fprintf(stderr, "unknown case %s\n", argv[1]);
        return 2;
    }
    int rc = TEST_EXIT();
    fx_cleanup(rc != 0);
    return rc;
}
