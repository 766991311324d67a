/* tests/train/test_bench.c - `segtrain bench` (train/bench.h) on the tiny
 * network (resnet18 at width 8, 48x48 crops). No timing thresholds: timings
 * are only checked to exist and be consistent with each other.
 *   same_step - bench --with-data runs the trainer's exact step: its first two
 *               losses equal sg_train_run's on the same data, seed and
 *               (constant) LR, bit for bit; the result's fields are
 *               consistent (phases sum to at most the step, FLOPs = 3 x
 *               forward x images, memory figures positive)
 *   synthetic - synthetic batches: the first loss is ~ (1 + aux_weight) ln(C)
 *               as for a freshly initialised network, and a second run with
 *               the same seed gives the same losses
 *   cli       - the binary (argv[2]) writes --json with every documented field
 *               present and positive, including the measured peak; usage and
 *               I/O errors exit 2 / 1
 *   profile   - --profile: the layers' rows take the forward and backward
 *               phases but for the marks' own overhead, the rows add up to
 *               the step's phases, every layer kind of the model has
 *               forward and backward rows, the conv rows add up to the conv
 *               classes and their forward GFLOP to the model's FLOPs, and
 *               the losses are the unprofiled run's bit for bit
 *   dist      - under the launcher with 2 CPU ranks (Gloo): rank 0 writes the
 *               JSON with world 2 and img/s counting both ranks' images
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "tests/helpers.h"
#include "testutil.h"
#include "train/bench.h"
#include "train/trainer.h"
#include "train_fixture.h"

static const char *g_segtrain;

static void check_result_consistent(const sg_bench_result *r, int iters) {
    CHECK_EQ_INT(r->iters, iters);
    CHECK_EQ_INT(r->world, 1);
    CHECK(r->threads >= 1);
    CHECK(strcmp(r->backend, "cpu") == 0);
    for (int i = 0; i < iters; i++) {
        double sum = 0;
        for (int p = 0; p < SG_PH_N; p++) {
            CHECK(r->phase_s[p][i] >= 0);
            sum += r->phase_s[p][i];
        }
        CHECK(r->step_s[i] > 0);
        CHECK(r->cpu_s[i] > 0);
        CHECK(r->minflt[i] >= 0);
        double csum = 0;
        for (int p = 0; p < SG_PH_N; p++) {
            CHECK(r->phase_cpu_s[p][i] >= 0);
            csum += r->phase_cpu_s[p][i];
        }
        /* CPU clocks are coarser than the wall clock: allow a few ticks */
        CHECK_MSG(csum <= r->cpu_s[i] + 1e-3, "phase CPU %.9f s > step CPU %.9f s", csum,
                  r->cpu_s[i]);
        /* the phases partition the inside of the timed step */
        CHECK_MSG(sum <= r->step_s[i] + 1e-9, "phases %.9f s > step %.9f s", sum, r->step_s[i]);
        CHECK(r->phase_s[SG_PH_FWD][i] > 0 && r->phase_s[SG_PH_BWD][i] > 0);
    }
    CHECK(r->flops_fwd_image > 0);
    CHECK_NEAR(r->flops_step, 3.0 * r->flops_fwd_image * r->batch * r->accum, 1e-6);
    CHECK(r->peak_rss_mib > 0);
    CHECK(r->device_peak_mib >= r->activation_mib && r->activation_mib > 0);
    CHECK(r->params > 0);
}

static void test_same_step(void) {
    CHECK(fx_setup("bench_same", 8, 1, 60, 80, 19) == 0);
    const char *sets[] = {"train.iters=2", "train.lr_schedule=constant", "train.lr=0.05",
                          "train.leftover_eval=false"};
    sg_config cfg;
    CHECK(fx_config(&cfg, "train", sets, 4) == 0);
    double trained[2] = {NAN, NAN};
    sg_train_debug dbg = {0};
    dbg.step_loss = trained;
    dbg.step_loss_cap = 2;
    CHECK_EQ_INT(sg_train_run(&cfg, NULL, &dbg, NULL), 0);
    CHECK_EQ_INT(dbg.iters_done, 2);

    sg_bench_opts o = {2, 0, 1, 1, -1.0, 0};
    sg_bench_result r;
    CHECK_EQ_INT(sg_bench_run(&cfg, &o, &r), 0);
    fprintf(stderr, "  train losses %.17g %.17g, bench %.17g %.17g\n", trained[0], trained[1],
            r.loss_first, r.loss_last);
    int ok = r.loss_first == trained[0] && r.loss_last == trained[1];
    check_result_consistent(&r, 2);
    CHECK(r.peak_gflops == 0); /* skipped */
    sg_bench_result_free(&r);
    CHECK_MSG(ok, "bench's step differs from the trainer's");
    /* the second loss differs from the first: the optimizer step ran */
    CHECK(trained[1] != trained[0]);
    fx_cleanup(0);
}

static void test_synthetic(void) {
    CHECK(fx_setup("bench_synth", 1, 0, 8, 8, 19) == 0);
    sg_config cfg;
    CHECK(fx_config(&cfg, "b", NULL, 0) == 0);
    sg_bench_opts o = {2, 1, 0, 1, -1.0, 0};
    sg_bench_result a, b;
    CHECK_EQ_INT(sg_bench_run(&cfg, &o, &a), 0);
    o.split = 0; /* whole-step timing: same work, so the same losses */
    CHECK_EQ_INT(sg_bench_run(&cfg, &o, &b), 0);
    double expect = (1.0 + cfg.train.aux_weight) * log(19.0);
    double l0 = a.loss_first, l1 = a.loss_last, m0 = b.loss_first, m1 = b.loss_last;
    check_result_consistent(&a, 2);
    sg_bench_result_free(&a);
    sg_bench_result_free(&b);
    CHECK_MSG(l0 > 0.95 * expect && l0 < 1.3 * expect, "first loss %g, ~%g expected", l0, expect);
    CHECK(l0 == m0 && l1 == m1);
    CHECK(l1 != l0);
    fx_cleanup(0);
}

static const sg_bench_prof_row *prof_class(const sg_bench_profile *p, const char *cls) {
    for (int i = 0; i < p->n_cls; i++)
        if (strcmp(p->cls[i].cls, cls) == 0) return &p->cls[i];
    return NULL;
}

static void test_profile(void) {
    CHECK(fx_setup("bench_prof", 1, 0, 8, 8, 19) == 0);
    sg_config cfg;
    CHECK(fx_config(&cfg, "p", NULL, 0) == 0);
    sg_bench_opts o = {3, 1, 0, 1, -1.0, 1};
    sg_bench_result a, b;
    CHECK_EQ_INT(sg_bench_run(&cfg, &o, &a), 0);
    o.profile = 0;
    CHECK_EQ_INT(sg_bench_run(&cfg, &o, &b), 0);
    check_result_consistent(&a, 3);
    CHECK(b.prof.n_cls == 0 && b.prof.cls == NULL);
    CHECK_MSG(a.loss_first == b.loss_first && a.loss_last == b.loss_last,
              "profiling changed the losses: %.17g %.17g vs %.17g %.17g", a.loss_first, a.loss_last,
              b.loss_first, b.loss_last);
    const sg_bench_profile *p = &a.prof;
    fprintf(stderr, "  kinds: %s; step %.3f ms, layers %.3f ms, %d classes, %d conv rows\n",
            p->kinds, p->step_ms, p->layers_ms, p->n_cls, p->n_conv);
    /* DeepLabV3 on resnet18 with the aux head has all of these, and only these */
    const char *kinds[] = {"conv",    "bn",     "maxpool", "add_relu",
                           "avgpool", "resize", "concat",  "dropout"};
    int nk = (int)(sizeof kinds / sizeof *kinds), nseen = 1;
    for (const char *c = p->kinds; *c; c++) nseen += *c == ' ';
    CHECK_MSG(nseen == nk, "layer kinds '%s', expected %d", p->kinds, nk);
    for (int i = 0; i < nk; i++) {
        char f[64], bw[64];
        snprintf(f, sizeof f, "%s fwd", kinds[i]);
        snprintf(bw, sizeof bw, "%s %s", kinds[i],
                 strcmp(kinds[i], "conv") == 0 ? "bwd data"
                 : strcmp(kinds[i], "bn") == 0 ? "bwd reduce"
                                               : "bwd");
        const sg_bench_prof_row *rf = prof_class(p, f), *rb = prof_class(p, bw);
        CHECK_MSG(rf && rf->calls >= 1 && rf->ms > 0, "no forward row '%s'", f);
        CHECK_MSG(rb && rb->calls >= 1 && rb->ms >= 0, "no backward row '%s'", bw);
    }
    const char *more[] = {"conv bwd weight", "bn fwd stats", "bn bwd", "loss",
                          "optimizer",       "ddp",          "data",   "other"};
    for (int i = 0; i < (int)(sizeof more / sizeof *more); i++)
        CHECK_MSG(prof_class(p, more[i]) != NULL, "no row '%s'", more[i]);
    /* the rows add up to the step's phases, the phases to at most the step */
    double rows = 0, phases = 0;
    for (int i = 0; i < p->n_cls; i++) rows += p->cls[i].ms;
    for (int ph = 0; ph < SG_PH_N; ph++) phases += 1e3 * sg_bench_mean(a.phase_s[ph], a.iters);
    CHECK_NEAR(rows, phases, 1e-9 * phases);
    CHECK(phases <= p->step_ms * (1 + 1e-9));
    /* the layers take forward + backward but for the marks' overhead */
    double fb = 1e3 * (sg_bench_mean(a.phase_s[SG_PH_FWD], a.iters) +
                       sg_bench_mean(a.phase_s[SG_PH_BWD], a.iters));
    const sg_bench_prof_row *other = prof_class(p, "other");
    CHECK_MSG(p->layers_ms > 0 && other->ms > -1e-6 && other->ms <= 0.25 * fb + 2.0,
              "layers %.3f ms of forward + backward %.3f ms (other %.3f)", p->layers_ms, fb,
              other->ms);
    /* conv rows by shape add up to the conv classes; forward GFLOP = the model's */
    const char *passes[] = {"fwd", "bwd data", "bwd weight"};
    for (int k = 0; k < 3; k++) {
        double ms = 0, calls = 0, gflop = 0;
        for (int i = 0; i < p->n_conv; i++)
            if (strcmp(p->conv[i].cls, passes[k]) == 0) {
                CHECK(p->conv[i].geom[0] != '\0' && p->conv[i].gflop > 0);
                ms += p->conv[i].ms;
                calls += p->conv[i].calls;
                gflop += p->conv[i].gflop;
            }
        char name[32];
        snprintf(name, sizeof name, "conv %s", passes[k]);
        const sg_bench_prof_row *c = prof_class(p, name);
        CHECK(c != NULL);
        CHECK_NEAR(ms, c->ms, 1e-9 * c->ms + 1e-12);
        CHECK_NEAR(calls, c->calls, 1e-9);
        if (k == 0) CHECK_NEAR(gflop, a.flops_fwd_image * a.batch / 1e9, 1e-9 * gflop);
    }
    sg_bench_result_free(&a);
    sg_bench_result_free(&b);
    CHECK(a.prof.cls == NULL);
    fx_cleanup(0);
}

/* ---------------- the binary ---------------- */

static int run(const char *cmd) {
    int st = system(cmd);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void test_cli(void) {
    CHECK(fx_setup("bench_cli", 1, 0, 8, 8, 19) == 0);
    char yaml[700], json[700], cmd[3000];
    snprintf(yaml, sizeof yaml, "%s/tiny.yaml", fx_root);
    snprintf(json, sizeof json, "%s/bench.json", fx_root);
    FILE *f = fopen(yaml, "w");
    CHECK(f != NULL);
    fprintf(
        f,
        "device: cpu\nthreads: 2\nseed: 1\nmodel:\n  backbone: resnet18\n"
        "  base_width: 8\n  aspp_rates: [2, 4, 6]\n  num_classes: 5\n"
        "data:\n  label_map: none\n  crop_size: [32, 48]\ntrain:\n  batch_size: 3\n  accum_steps: 2\n");
    fclose(f);
    snprintf(cmd, sizeof cmd,
             "'%s' bench --config '%s' --iters 3 --warmup 1 --json '%s' "
             "--quiet > '%s/out.txt'",
             g_segtrain, yaml, json, fx_root);
    CHECK_EQ_INT(run(cmd), 0);
    char *js = th_read_file(json);
    CHECK(js != NULL);
    const char *positive[] = {
        "img_per_s",          "step_ms_median",       "step_ms_mean",      "step_ms_min",
        "step_ms_max",        "cpu_ms_median",        "forward_ms_median", "forward_cpu_ms_median",
        "backward_ms_median", "gflops_fwd_per_image", "gflops_per_step",   "achieved_gflops",
        "peak_gflops",        "peak_fraction",        "peak_rss_mib",      "device_mem_peak_mib",
        "loss_first"};
    int bad = -1;
    for (int i = 0; i < (int)(sizeof positive / sizeof *positive); i++)
        if (!(th_json_num(js, positive[i]) > 0)) bad = i;
    double imgs = th_json_num(js, "img_per_s"), med = th_json_num(js, "step_ms_median");
    double flops = th_json_num(js, "gflops_per_step"),
           fwd = th_json_num(js, "gflops_fwd_per_image");
    double ach = th_json_num(js, "achieved_gflops");
    int has_split = strstr(js, "\"data_ms_median\":") && strstr(js, "\"comm_ms_median\":") &&
                    strstr(js, "\"optimizer_ms_median\":") && strstr(js, "\"loss_ms_median\":");
    /* one CPU rank: no SyncBN collective, no plan cache (CUDA only) */
    int no_dist = th_json_num(js, "syncbn_collectives_per_step") == 0 &&
                  th_json_num(js, "poll_sleeps_per_step") == 0 &&
                  th_json_num(js, "conv_plan_hits") == 0 &&
                  th_json_num(js, "conv_plan_misses") == 0;
    int has_shape = strstr(js, "\"crop\":[32,48]") && th_json_num(js, "batch") == 3 &&
                    th_json_num(js, "accum_steps") == 2 && th_json_num(js, "iters") == 3;
    free(js);
    CHECK_MSG(bad < 0, "field %s missing or not positive", positive[bad]);
    CHECK(has_split && has_shape);
    CHECK(no_dist);
    /* img/s counts every image of the step: batch x accum / median step */
    CHECK_NEAR(imgs, 6.0 / (med / 1e3), 1e-6 * imgs);
    CHECK_NEAR(flops, 3.0 * 6.0 * fwd, 1e-9 * flops);
    CHECK_NEAR(ach, flops / (med / 1e3), 1e-6 * ach);

    /* usage errors exit 2, an unwritable --json exits 1 */
    snprintf(cmd, sizeof cmd, "'%s' bench --config '%s' --iters 0 2>/dev/null", g_segtrain, yaml);
    CHECK_EQ_INT(run(cmd), 2);
    snprintf(cmd, sizeof cmd, "'%s' bench --config '%s' --peak-gflops x 2>/dev/null", g_segtrain,
             yaml);
    CHECK_EQ_INT(run(cmd), 2);
    snprintf(cmd, sizeof cmd, "'%s' bench --config '%s' --set model.nonexistent=1 2>/dev/null",
             g_segtrain, yaml);
    CHECK_EQ_INT(run(cmd), 2);
    snprintf(cmd, sizeof cmd,
             "'%s' bench --config '%s' --iters 1 --warmup 0 --peak-gflops 0 "
             "--json '%s/b.json' >/dev/null 2>&1",
             g_segtrain, yaml, yaml); /* a folder that cannot be made: under a file */
    CHECK_EQ_INT(run(cmd), 1);
    /* --profile: the table, and the breakdown in --json; not with --no-split */
    snprintf(cmd, sizeof cmd,
             "'%s' bench --config '%s' --iters 1 --warmup 0 --peak-gflops 0 --profile "
             "--json '%s' --quiet > '%s/prof.txt'",
             g_segtrain, yaml, json, fx_root);
    CHECK_EQ_INT(run(cmd), 0);
    js = th_read_file(json);
    char txt[700];
    snprintf(txt, sizeof txt, "%s/prof.txt", fx_root);
    char *out = th_read_file(txt);
    CHECK(js && out);
    int prof_ok = strstr(js, "\"profile\":{") && strstr(js, "\"classes\":[{\"class\":") &&
                  strstr(js, "\"convs\":[{\"pass\":") && strstr(js, "\"geometry\":") &&
                  th_json_num(js, "layers_ms") > 0;
    int table_ok = strstr(out, "op class") && strstr(out, "conv fwd") &&
                   strstr(out, "convolutions by pass and shape");
    free(js);
    free(out);
    CHECK(prof_ok && table_ok);
    snprintf(cmd, sizeof cmd, "'%s' bench --config '%s' --profile --no-split 2>/dev/null",
             g_segtrain, yaml);
    CHECK_EQ_INT(run(cmd), 2);
    fx_cleanup(0);
}

static void test_dist(void) {
    CHECK(fx_setup("bench_dist", 1, 0, 8, 8, 19) == 0);
    char yaml[700], json[700], cmd[3000];
    snprintf(yaml, sizeof yaml, "%s/tiny.yaml", fx_root);
    snprintf(json, sizeof json, "%s/bench.json", fx_root);
    FILE *f = fopen(yaml, "w");
    CHECK(f != NULL);
    fprintf(f, "device: cpu\nthreads: 1\nmodel:\n  backbone: resnet18\n  base_width: 8\n"
               "  aspp_rates: [2, 4, 6]\n  num_classes: 19\ndata:\n  crop_size: [32, 32]\n"
               "train:\n  batch_size: 2\n");
    fclose(f);
    snprintf(cmd, sizeof cmd,
             "'%s' --nproc-per-node 2 bench --config '%s' --iters 2 "
             "--warmup 1 --peak-gflops 0 --json '%s' --quiet > '%s/out.txt' 2>&1",
             g_segtrain, yaml, json, fx_root);
    CHECK_EQ_INT(run(cmd), 0);
    char *js = th_read_file(json);
    CHECK(js != NULL);
    double world = th_json_num(js, "world"), imgs = th_json_num(js, "img_per_s");
    double med = th_json_num(js, "step_ms_median"), comm = th_json_num(js, "comm_ms_median");
    /* SyncBN (model.sync_bn's default) on 2 CPU ranks: timed and counted,
     * blocking on the mesh (nothing enqueued), never a sleep in a poll loop */
    double sb_ms = th_json_num(js, "syncbn_ms_per_step");
    double sb_n = th_json_num(js, "syncbn_collectives_per_step");
    double sb_q = th_json_num(js, "syncbn_enqueued_per_step");
    double sleeps = th_json_num(js, "poll_sleeps_per_step");
    double share = th_json_num(js, "syncbn_step_share");
    free(js);
    fprintf(stderr,
            "  SyncBN %.2f ms/step (%.1f%%), %.0f collectives, %.0f enqueued, %.1f sleeps\n", sb_ms,
            100 * share, sb_n, sb_q, sleeps);
    CHECK(sb_ms > 0 && sb_n > 0 && share > 0 && share < 1);
    CHECK_EQ_INT((long long)sb_q, 0);
    CHECK(sleeps == 0);
    CHECK_EQ_INT((long long)world, 2);
    /* 2 images per rank per step, 2 ranks */
    CHECK_NEAR(imgs, 4.0 / (med / 1e3), 1e-6 * imgs);
    CHECK(comm >= 0);
    fx_cleanup(0);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr,
                "usage: test_bench same_step|synthetic|profile|cli|dist [SEGTRAIN_BINARY]\n");
        return 2;
    }
    sg_log_set_level(SG_LOG_WARN);
    if (strcmp(argv[1], "same_step") == 0) {
        TEST_RUN(test_same_step);
    } else if (strcmp(argv[1], "synthetic") == 0) {
        TEST_RUN(test_synthetic);
    } else if (strcmp(argv[1], "profile") == 0) {
        TEST_RUN(test_profile);
    } else if (strcmp(argv[1], "cli") == 0 || strcmp(argv[1], "dist") == 0) {
        if (argc < 3) {
            fprintf(stderr, "test_bench %s: pass the segtrain binary\n", argv[1]);
            return 2;
        }
        g_segtrain = argv[2];
        if (strcmp(argv[1], "cli") == 0) TEST_RUN(test_cli);
        else TEST_RUN(test_dist);
    } else {
        fprintf(stderr, "test_bench: unknown case %s\n", argv[1]);
        return 2;
    }
    return TEST_EXIT();
}
