/* tests/train/test_loss_options.c - the loss options of issue 16
 * (train.class_weights, train.ohem_thresh / ohem_min_kept), beyond the
 * backend conformance rows (tests/backend: ce_weighted, ce_label_prob,
 * kth_smallest against the naive references, finite differences, PyTorch's
 * weighted cross_entropy on fixed logits):
 *   ohem    the trainer's OHEM path (ce_label_prob, sg_ohem_threshold,
 *           ce_weighted with the probabilities as the selection key) selects
 *           exactly the pixels a naive transcription of mmseg's
 *           OHEMPixelSampler selects (tests/kernels/ref_ops.c,
 *           ref_ohem_select): drawn probabilities, ties at the k-th value,
 *           fewer valid pixels than min_kept, one valid pixel, none (all
 *           ignored), a threshold above every probability, min_kept 0
 *   config  errors name the key: wrong length, negative, non-finite, all 0,
 *           ohem_thresh 1 (exit 2)
 *   ddp     (segtrain binary) with class weights and loss_norm global,
 *           2 ranks x batch 2 x 2 micro-batches end with the parameters of
 *           1 rank x 4 micro-batches of 2 and of 1 rank x 2 of 4 (relative
 *           1e-4, BN statistics frozen); under loss_norm local they do not
 *           (the check can fail); the weights change the result
 *   learns  (segtrain binary) a tiny run with class weights and OHEM: the
 *           loss falls; one step keeping 20 pixels: the logged main loss is
 *           theirs over all valid pixels' weights, the aux loss unchanged
 *   dump    prints ce_weighted's loss and gradient on fixed logits for
 *           test_loss_torch.py (PyTorch's F.cross_entropy(weight=...)).
 * Usage: test_loss_options MODE [PATH-TO-segtrain]. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "io/safetensors.h"
#include "kernels/backend.h"
#include "tests/ckpt_diff.h"
#include "tests/helpers.h"
#include "tests/kernels/ref_ops.h"
#include "tests/tiny_config.h"
#include "testutil.h"
#include "train/loss_opts.h"

static const char *g_bin;
static char g_dir[256];

/* ---------------- ohem ---------------- */

/* Runs the trainer's OHEM path on logits [n, c, hw] (host) and compares the
 * pixels it trains on with ref_ohem_select on the same probabilities. */
static void ohem_case(sg_backend *be, const char *what, const float *l, const uint8_t *lab, int n,
                      int c, int hw, float thresh, int64_t min_kept) {
    const sg_ops *o = be->ops;
    size_t np = (size_t)n * hw, nl = np * c;
    float *l_d = o->alloc(be, nl * 4), *p_d = o->alloc(be, np * 4), *d_d = o->alloc(be, nl * 4);
    uint8_t *lab_d = o->alloc(be, np);
    o->upload(be, l_d, l, nl * 4);
    o->upload(be, lab_d, lab, np);
    o->ce_label_prob(be, l_d, lab_d, n, c, hw, 255, p_d);
    int64_t count[256] = {0}, nvalid = 0;
    sg_class_count(lab, np, c, count);
    for (int k = 0; k < c; k++) nvalid += count[k];
    float thr = sg_ohem_threshold(be, p_d, np, nvalid, thresh, min_kept * n);
    double loss, wsum;
    o->ce_weighted(be, l_d, lab_d, n, c, hw, 255, NULL, p_d, thr, 1.0f, d_d, &loss, &wsum);
    float *p = malloc(np * 4), *d = malloc(nl * 4);
    uint8_t *want = malloc(np);
    o->download(be, p, p_d, np * 4);
    o->download(be, d, d_d, nl * 4);
    float want_thr = ref_ohem_select(p, lab, np, c, 255, thresh, min_kept * n, want);
    size_t nsel = 0, wrong = 0;
    for (int i = 0; i < n; i++)
        for (int q = 0; q < hw; q++) {
            size_t px = (size_t)i * hw + q;
            int got = 0;
            for (int k = 0; k < c; k++) got |= d[((size_t)i * c + k) * hw + q] != 0.0f;
            nsel += want[px];
            wrong += got != want[px];
        }
    fprintf(stderr, "  %s: %lld valid, %zu selected, threshold %.9g (mmseg %.9g)\n", what,
            (long long)nvalid, nsel, thr, want_thr);
    CHECK_MSG(thr == want_thr, "%s: threshold %.9g, mmseg's %.9g", what, thr, want_thr);
    CHECK_MSG(wrong == 0, "%s: %zu pixels selected differently from mmseg's sampler", what, wrong);
    CHECK_MSG(wsum == (double)nsel, "%s: weight sum %.17g, want %zu selected", what, wsum, nsel);
    free(p);
    free(d);
    free(want);
    o->free(be, l_d);
    o->free(be, p_d);
    o->free(be, d_d);
    o->free(be, lab_d);
}

static float urand(uint64_t *s) {
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((*s >> 40) & 0xffffff) / 16777216.0f;
}

static void test_ohem(void) {
    sg_backend *be = sg_backend_create("cpu", NULL);
    CHECK(be != NULL);
    if (!be) return;
    enum { N = 2, C = 5, HW = 400 };
    static float l[N * C * HW];
    static uint8_t lab[N * HW];
    uint64_t s = 11;
    /* drawn logits and labels, every 6th pixel ignored */
    for (size_t i = 0; i < sizeof l / sizeof l[0]; i++) l[i] = 6 * urand(&s) - 3;
    for (int i = 0; i < N * HW; i++) lab[i] = (uint8_t)(i % 6 == 5 ? 255 : (i * 7) % C);
    ohem_case(be, "drawn, min_kept binding", l, lab, N, C, HW, 0.2f, 300);
    ohem_case(be, "drawn, thresh binding", l, lab, N, C, HW, 0.7f, 10);
    ohem_case(be, "threshold above every probability", l, lab, N, C, HW, 0.99999f, 10);
    ohem_case(be, "min_kept 0", l, lab, N, C, HW, 0.05f, 0);
    ohem_case(be, "min_kept beyond the valid pixels", l, lab, N, C, HW, 0.3f, 100000);
    /* ties: pixels in groups of 8 with identical logits and labels, so
     * identical probabilities; the k-th value falls inside a group */
    for (int i = 0; i < N; i++)
        for (int k = 0; k < C; k++)
            for (int q = 0; q < HW; q++)
                l[((size_t)i * C + k) * HW + q] = l[((size_t)i * C + k) * HW + (q / 8) * 8];
    for (int i = 0; i < N * HW; i++) lab[i] = lab[(i / 8) * 8 % (N * HW)];
    for (int i = 0; i < N; i++)
        for (int q = 0; q < HW; q++) lab[i * HW + q] = lab[i * HW + (q / 8) * 8];
    for (int i = 0; i < N * HW; i += 40)
        for (int q = 0; q < 8; q++) lab[i + q] = 255; /* some ignored groups */
    ohem_case(be, "ties (groups of 8 equal probabilities)", l, lab, N, C, HW, 0.1f, 100);
    ohem_case(be, "ties, k-th in the second smallest group", l, lab, N, C, HW, 0.0001f, 6);
    ohem_case(be, "ties, min_kept 3 inside a group", l, lab, N, C, HW, 0.0001f, 3);
    /* one valid pixel, then none */
    memset(lab, 255, sizeof lab);
    lab[17] = 2;
    ohem_case(be, "one valid pixel", l, lab, N, C, HW, 0.7f, 100);
    lab[17] = 255;
    ohem_case(be, "all ignored", l, lab, N, C, HW, 0.7f, 100);
    sg_backend_destroy(be);
}

/* ---------------- binary runs ---------------- */

static int setup(void) {
    snprintf(g_dir, sizeof g_dir, "/tmp/sg_loss_opts_XXXXXX");
    if (!mkdtemp(g_dir)) return -1;
    if (th_sh("%s synth --out %s/data --train 8 --val 3 --size 40x40 --seed 5 >/dev/null 2>&1",
              g_bin, g_dir))
        return -1;
    char path[512];
    snprintf(path, sizeof path, "%s/base.yaml", g_dir);
    /* the tiny network (tests/tiny_config.h) with what this test changes */
    const char *const sets[] = {
        "threads=1",
        "model.aspp_dropout=0.0",
        "model.aux_dropout=0.0",
        "data.crop_size=[40, 40]",
        "data.scale_range=[1.0, 1.0]",
        "data.hflip=false",
        "data.shuffle=false",
        "train.iters=5",
        "train.lr=0.02",
        "train.checkpoint_every=5",
        "train.keep_checkpoints=2",
        "train.class_weights=[0.8, 1.2, 0.9, 1.5, 2.0, 0.5, 1.1, 1.3, 0.7, 1.0, 0.6, 1.4, 3.0, 0.4, "
        "1.6, 0.3, 2.5, 1.8, 0.2]",
        "dist.timeout_s=30"};
    return fx_write_config(path, g_dir, sets, (int)(sizeof sets / sizeof sets[0]));
}

/* BN layers keep their running statistics (train.freeze_bn_stats): batch
 * statistics would make the step depend on how images are grouped into
 * forwards, and a 4-value ASPP pooling BN amplifies the rounding differences
 * of the 2-rank sum (relative 1e-5 after one step, 1e-1 after two with
 * these weights); the loss normalisation is what is tested here. */
static void test_ddp(void) {
    const char *f = "--set train.freeze_bn_stats=true";
    char s4[256], s2[256], k4[256];
    snprintf(s4, sizeof s4, "--set train.batch_size=4 --set train.accum_steps=2 %s", f);
    snprintf(s2, sizeof s2, "--set train.batch_size=2 --set train.accum_steps=2 %s", f);
    snprintf(k4, sizeof k4, "--set train.batch_size=2 --set train.accum_steps=4 %s", f);
    const char *ck = "iter_00000005.safetensors";
    CHECK_EQ_INT(th_train_run(g_bin, g_dir, "two_b2_k2", 2, s2), 0);
    CHECK_EQ_INT(th_train_run(g_bin, g_dir, "one_b2_k4", 0, k4), 0);
    CHECK_EQ_INT(th_train_run(g_bin, g_dir, "one_b4_k2", 0, s4), 0);
    double d = th_ckpt_diff(g_dir, "one_b2_k4", "two_b2_k2", ck);
    CHECK(d >= 0);
    CHECK_MSG(d < 1e-4,
              "class weights, loss_norm global: 2 ranks x 2 micro-batches differ from "
              "1 rank x 4 micro-batches by %.3g",
              d);
    d = th_ckpt_diff(g_dir, "one_b4_k2", "two_b2_k2", ck);
    CHECK(d >= 0);
    CHECK_MSG(d < 1e-4,
              "class weights, loss_norm global: 2 ranks x batch 2 x 2 differ from "
              "1 rank x batch 4 x 2 by %.3g",
              d);
    /* local: each rank's micro-batch is its own weighted mean, so the step
     * is not the big batch's (the check above can fail) */
    char l4[300], l2[300];
    snprintf(l4, sizeof l4, "%s --set train.loss_norm=local", s4);
    snprintf(l2, sizeof l2, "%s --set train.loss_norm=local", s2);
    CHECK_EQ_INT(th_train_run(g_bin, g_dir, "one_b4_k2_local", 0, l4), 0);
    CHECK_EQ_INT(th_train_run(g_bin, g_dir, "two_b2_k2_local", 2, l2), 0);
    double dl = th_ckpt_diff(g_dir, "one_b4_k2_local", "two_b2_k2_local", ck);
    CHECK(dl >= 0);
    CHECK_MSG(dl > 1e-3, "loss_norm local with class weights should differ, max rel diff %.3g", dl);
    /* and the weights change the training */
    char pl[300];
    snprintf(pl, sizeof pl, "%s --set 'train.class_weights=[]'", s4);
    CHECK_EQ_INT(th_train_run(g_bin, g_dir, "one_b4_k2_plain", 0, pl), 0);
    double dp = th_ckpt_diff(g_dir, "one_b4_k2", "one_b4_k2_plain", ck);
    CHECK_MSG(dp > 1e-3, "class weights should change the parameters, max rel diff %.3g", dp);
}

/* The losses of metrics.jsonl (loss_main of each line), at most cap. */
static int read_losses(const char *run, const char *field, double *out, int cap) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s/metrics.jsonl", g_dir, run);
    char *text = th_read_file(path);
    if (!text) return 0;
    char key[64];
    snprintf(key, sizeof key, "\"%s\":", field);
    int n = 0;
    for (char *p = strstr(text, key); p && n < cap; p = strstr(p + 1, key))
        out[n++] = strtod(p + strlen(key), NULL);
    free(text);
    return n;
}

static void test_learns(void) {
    const char *sets = "--set train.iters=40 --set train.lr=0.05 --set train.checkpoint_every=0 "
                       "--set train.ohem_thresh=0.7 --set train.ohem_min_kept=200";
    CHECK_EQ_INT(th_train_run(g_bin, g_dir, "learns", 0, sets), 0);
    double loss[64], main_l[64];
    int n = read_losses("learns", "loss", loss, 64);
    int nm = read_losses("learns", "loss_main", main_l, 64);
    CHECK_MSG(n == 40 && nm == 40, "metrics.jsonl: %d losses, %d main losses, want 40", n, nm);
    if (n < 40) return;
    double first = (loss[0] + loss[1] + loss[2]) / 3, last = (loss[37] + loss[38] + loss[39]) / 3;
    fprintf(stderr, "  loss: first 3 %.4f, last 3 %.4f\n", first, last);
    for (int i = 0; i < n; i++) CHECK_MSG(isfinite(loss[i]), "loss %d is %g", i, loss[i]);
    CHECK_MSG(last < 0.6 * first,
              "with class weights and OHEM the loss should fall: first %.4f, "
              "last %.4f",
              first, last);
    /* the OHEM main loss is at most the weighted CE over all valid pixels,
     * whose first value is about log(19) * 1 at initialisation */
    CHECK_MSG(main_l[0] > 0 && main_l[0] < log(19.0) * 1.5, "first main loss %.4f", main_l[0]);
    /* one step from the same initialisation: OHEM keeping only the hardest
     * 2 x 10 pixels (threshold 0.001 is below every probability) trains the
     * main head on them, divided by all valid pixels' weights (mmseg's
     * normalisation), so its logged main loss is a small fraction of the
     * weighted CE's; the aux head has no OHEM: its loss is the same */
    CHECK_EQ_INT(th_train_run(g_bin, g_dir, "one_plain", 0,
                              "--set train.iters=1 --set train.checkpoint_every=0"),
                 0);
    CHECK_EQ_INT(th_train_run(g_bin, g_dir, "one_ohem", 0,
                              "--set train.iters=1 --set train.checkpoint_every=0 "
                              "--set train.ohem_thresh=0.001 --set train.ohem_min_kept=10"),
                 0);
    double pm, om, pa, oa;
    CHECK(read_losses("one_plain", "loss_main", &pm, 1) == 1);
    CHECK(read_losses("one_ohem", "loss_main", &om, 1) == 1);
    CHECK(read_losses("one_plain", "loss_aux", &pa, 1) == 1);
    CHECK(read_losses("one_ohem", "loss_aux", &oa, 1) == 1);
    fprintf(stderr, "  first step: main loss %.6f (OHEM, 20 pixels) vs %.6f; aux %.6f vs %.6f\n",
            om, pm, oa, pa);
    CHECK_MSG(om > 0 && om < 0.05 * pm, "OHEM main loss %.6f, weighted CE %.6f", om, pm);
    CHECK_MSG(oa == pa, "the aux loss must not change with OHEM: %.9g vs %.9g", oa, pa);
}

static void test_config(void) {
    struct {
        const char *set, *want;
    } bad[] = {
        {"--set 'train.class_weights=[1, 2]'", "train.class_weights"},
        {"--set 'train.class_weights=[1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, -1]'",
         "train.class_weights"},
        {"--set 'train.class_weights=[1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, nan]'",
         "train.class_weights"},
        {"--set 'train.class_weights=[0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]'",
         "train.class_weights"},
        {"--set train.ohem_thresh=1", "train.ohem_thresh"},
        {"--set train.ohem_thresh=-0.5", "train.ohem_thresh"},
        {"--set train.ohem_min_kept=-1", "train.ohem_min_kept"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char run[32];
        snprintf(run, sizeof run, "bad%zu", i);
        int rc = th_train_run(g_bin, g_dir, run, 0, bad[i].set);
        char path[512];
        snprintf(path, sizeof path, "%s/%s.log", g_dir, run);
        char *log = th_read_file(path);
        CHECK_MSG(rc == 2, "%s: exit %d, want 2 (config error)", bad[i].set, rc);
        CHECK_MSG(log && strstr(log, bad[i].want), "%s: the error does not name %s:\n%s",
                  bad[i].set, bad[i].want, log ? log : "(no log)");
        free(log);
    }
}

/* ---------------- dump (for test_loss_torch.py) ---------------- */

/* Fixed logits l[i] = sin(0.37 i) * 4, labels (7p) % 6 with every 5th 255,
 * weights 0.25 * (k + 1), n 2, c 6, 5 x 7; grad_scale 1 / weight sum (the
 * gradient of the mean). Prints "loss MEAN", "wsum ...", the logits
 * ("l VALUE", exact float round trip) and one "g VALUE" per dlogits element
 * (NCHW order), on the CPU backend. */
static int dump(void) {
    enum { N = 2, C = 6, HW = 35 };
    float l[N * C * HW], w[C], d[N * C * HW];
    uint8_t lab[N * HW];
    for (int i = 0; i < N * C * HW; i++) l[i] = sinf(0.37f * (float)i) * 4.0f;
    for (int p = 0; p < N * HW; p++) lab[p] = (uint8_t)(p % 5 == 4 ? 255 : (7 * p) % C);
    for (int k = 0; k < C; k++) w[k] = 0.25f * (float)(k + 1);
    int64_t count[C] = {0};
    sg_class_count(lab, N * HW, C, count);
    double den = sg_class_weight_sum(w, count, C);
    sg_backend *be = sg_backend_create("cpu", NULL);
    if (!be) return 1;
    const sg_ops *o = be->ops;
    float *l_d = o->alloc(be, sizeof l), *w_d = o->alloc(be, sizeof w);
    uint8_t *lab_d = o->alloc(be, sizeof lab);
    o->upload(be, l_d, l, sizeof l);
    o->upload(be, w_d, w, sizeof w);
    o->upload(be, lab_d, lab, sizeof lab);
    double loss, wsum;
    o->ce_weighted(be, l_d, lab_d, N, C, HW, 255, w_d, NULL, 0.0f, (float)(1.0 / den), l_d, &loss,
                   &wsum);
    o->download(be, d, l_d, sizeof d);
    printf("loss %.17g\n", loss / den);
    printf("wsum %.17g %.17g\n", wsum, den);
    for (int i = 0; i < N * C * HW; i++) printf("l %.9g\n", l[i]);
    for (int i = 0; i < N * C * HW; i++) printf("g %.9g\n", d[i]);
    o->free(be, l_d), o->free(be, w_d), o->free(be, lab_d);
    sg_backend_destroy(be);
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr,
                "usage: test_loss_options ohem|dump|config|ddp|learns [PATH-TO-segtrain]\n");
        return 2;
    }
    sg_log_set_level(SG_LOG_WARN);
    const char *mode = argv[1];
    if (!strcmp(mode, "dump")) return dump();
    if (!strcmp(mode, "ohem")) {
        TEST_RUN(test_ohem);
        return TEST_EXIT();
    }
    if (argc < 3) {
        fprintf(stderr, "test_loss_options %s: give the segtrain binary\n", mode);
        return 2;
    }
    g_bin = argv[2];
    if (setup()) {
        fprintf(stderr, "fixture setup failed in %s\n", g_dir);
        return 1;
    }
    if (!strcmp(mode, "config")) TEST_RUN(test_config);
    else if (!strcmp(mode, "ddp")) TEST_RUN(test_ddp);
    else if (!strcmp(mode, "learns")) TEST_RUN(test_learns);
    else {
        fprintf(stderr, "test_loss_options: unknown mode %s\n", mode);
        return 2;
    }
    int rc = TEST_EXIT();
    if (!rc) th_sh("rm -rf %s", g_dir);
    else fprintf(stderr, "kept %s for inspection\n", g_dir);
    return rc;
}
