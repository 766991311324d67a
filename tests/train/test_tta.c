/* tests/train/test_tta.c - test-time augmentation (eval.scales, eval.flip;
 * train/tta.h) in eval, predict and in-training evaluation, on a tiny
 * randomly initialised model saved as a checkpoint.
 *
 *   reference - sg_tta_run's averaged probabilities (whole images and sliding
 *               windows, scales 0.65 / 1 / 1.25 x flip) against a naive
 *               implementation of the pipeline written here from
 *               tests/kernels/ref_ops (normalise, bilinear resize to
 *               int(H*s+0.5), flip, the model's forward at that shape,
 *               resize back, flip back, softmax in double, mean): within
 *               1e-5. Then `segtrain eval` with TTA gives the confusion
 *               matrix of those probabilities' argmax (mIoU to 1e-12), and
 *               `predict --save-logits` writes their log and their argmax.
 *   identity  - the default (scales [1.0], no flip) and the same written
 *               out are today's evaluation exactly: the eval JSON equals the
 *               one computed here from the plain forward's logits argmax,
 *               predict's PNG is that argmax and its .npy the raw logits,
 *               bit for bit.
 *   ranks     - eval with TTA on 2 ranks (forked, rendezvous on localhost)
 *               writes the same metrics as on 1 rank; in-training
 *               evaluation with TTA logs the val mIoU `segtrain eval` gives
 *               for the final checkpoint.
 *   memory    - the evaluator's memory check counts the largest scale's plan
 *               and the TTA buffers, byte for byte, and names eval.scales.
 *   config    - eval.scales out of range, too many, empty: errors naming
 *               the key.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cmd/commands.h"
#include "data/dataset.h"
#include "io/png.h"
#include "model/model.h"
#include "tests/helpers.h"
#include "tests/kernels/ref_ops.h"
#include "testutil.h"
#include "train/checkpoint.h"
#include "train/device.h"
#include "train/evaluator.h"
#include "train/metrics.h"
#include "train/tta.h"
#include "train_fixture.h"

#define H_IMG 36
#define W_IMG 52
#define N_VAL 3

/* For helpers that return a value (CHECK returns from a void case). */
#define REQUIRE(cond)                                                         \
    do {                                                                      \
        if (!(cond)) {                                                        \
            fprintf(stderr, "  FAIL %s:%d: %s\n", __FILE__, __LINE__, #cond); \
            abort();                                                          \
        }                                                                     \
    } while (0)

/* The CPU backend these tests run on, in the layout the commands they
 * compare with use: cpu.layout auto, or $SG_TEST_LAYOUT (the tta_*_nchw
 * tests; the fixture's config takes it too, train_fixture.h). */
static sg_backend *test_backend(void) {
    sg_config c;
    sg_config_defaults(&c);
    const char *lay = getenv("SG_TEST_LAYOUT");
    char set[64];
    snprintf(set, sizeof set, "cpu.layout=%s", lay && *lay ? lay : "auto");
    REQUIRE(sg_config_set(&c, set) == 0);
    return sg_backend_create("cpu",
                             &(sg_backend_opts){.threads = 2, .layout = sg_layout_of(&c, NULL)});
}

/* One image's [C, px] activation between host NCHW and the backend. */
static void upload_act(sg_backend *be, float *dev, const float *host, int C, size_t px) {
    float *t = malloc((size_t)C * px * sizeof(float));
    REQUIRE(t != NULL);
    sg_act_relayout(t, host, 1, C, (int)px, sizeof(float), SG_LAYOUT_NCHW, be->layout);
    be->ops->upload(be, dev, t, (size_t)C * px * sizeof(float));
    free(t);
}

static void download_act(sg_backend *be, float *host, const float *dev, int C, size_t px) {
    float *t = malloc((size_t)C * px * sizeof(float));
    REQUIRE(t != NULL);
    be->ops->download(be, t, dev, (size_t)C * px * sizeof(float));
    sg_act_relayout(host, t, 1, C, (int)px, sizeof(float), be->layout, SG_LAYOUT_NCHW);
    free(t);
}

/* A random-init tiny model on the fixture's config, saved as ck. */
/* data.mean / data.std as the backend's normalisation takes them. */
static void mean_std(const sg_config *c, float mean[3], float std[3]) {
    for (int i = 0; i < 3; i++) {
        mean[i] = (float)c->data.mean[i];
        std[i] = (float)c->data.std[i];
    }
}

/* The float32 data of a .npy file read whole (NULL if it has no header end). */
static const float *npy_floats(const char *raw) {
    const char *hdr_end = strchr(raw + 10, '\n');
    return hdr_end ? (const float *)(hdr_end + 1) : NULL;
}

static sg_model *make_model(sg_backend *be, const sg_config *c, const char *ck) {
    sg_model_opts mo;
    REQUIRE(sg_model_opts_from_config(&mo, c) == 0);
    sg_model *m = sg_model_create(be, &mo);
    REQUIRE(m != NULL);
    sg_model_init(m, 11);
    /* a random init predicts nearly uniform probabilities: a 20x classifier
     * spreads them, so a wrong scale, flip or resize would show */
    sg_param *cls = sg_model_find(m, "decoder.4.weight");
    REQUIRE(cls != NULL);
    float *wv = malloc(cls->count * sizeof(float));
    REQUIRE(wv != NULL);
    be->ops->download(be, wv, cls->data, cls->count * sizeof(float));
    for (size_t i = 0; i < cls->count; i++) wv[i] *= 20.0f;
    be->ops->upload(be, cls->data, wv, cls->count * sizeof(float));
    free(wv);
    sg_train_state st = {.iter = 5, .world = 1, .seed = 7, .best_miou = NAN, .best_iter = -1};
    REQUIRE(sg_ckpt_save(ck, m, NULL, &st, NULL, c) == 0);
    return m;
}

/* The model's logits [C,h,w] for one normalised image x [3,h,w] (host). */
static float *forward_host(sg_backend *be, sg_model *m, const float *x, int h, int w, int C) {
    REQUIRE(sg_model_plan_infer(m, 1, h, w) == SG_OK);
    upload_act(be, sg_model_input(m), x, 3, (size_t)h * w);
    sg_model_forward(m, 0, 0);
    float *l = malloc((size_t)C * h * w * sizeof(float));
    REQUIRE(l != NULL);
    download_act(be, l, sg_model_out(m), C, (size_t)h * w);
    return l;
}

/* Naive sliding-window logits of x [3,h,w]: windows crop x stride, the last
 * one aligned to the border, per-pixel mean of the window logits (double). */
static float *slide_host(sg_backend *be, sg_model *m, const float *x, int h, int w, int C, int crh,
                         int crw, int sth, int stw) {
    int ch = crh < h ? crh : h, cw = crw < w ? crw : w;
    double *acc = calloc((size_t)C * h * w, sizeof(double));
    int *cnt = calloc((size_t)h * w, sizeof(int));
    float *win = malloc((size_t)3 * ch * cw * sizeof(float));
    REQUIRE(acc && cnt && win);
    for (int y0 = 0;; y0 += sth) {
        int yy = y0 + ch > h ? h - ch : y0;
        for (int x0 = 0;; x0 += stw) {
            int xx = x0 + cw > w ? w - cw : x0;
            for (int c = 0; c < 3; c++)
                for (int y = 0; y < ch; y++)
                    for (int q = 0; q < cw; q++)
                        win[((size_t)c * ch + y) * cw + q] =
                            x[((size_t)c * h + yy + y) * w + xx + q];
            float *l = forward_host(be, m, win, ch, cw, C);
            for (int c = 0; c < C; c++)
                for (int y = 0; y < ch; y++)
                    for (int q = 0; q < cw; q++)
                        acc[((size_t)c * h + yy + y) * w + xx + q] +=
                            l[((size_t)c * ch + y) * cw + q];
            for (int y = 0; y < ch; y++)
                for (int q = 0; q < cw; q++) cnt[(size_t)(yy + y) * w + xx + q]++;
            free(l);
            if (x0 + cw >= w) break;
        }
        if (y0 + ch >= h) break;
    }
    float *out = malloc((size_t)C * h * w * sizeof(float));
    REQUIRE(out != NULL);
    for (int c = 0; c < C; c++)
        for (size_t p = 0; p < (size_t)h * w; p++)
            out[(size_t)c * h * w + p] = (float)(acc[(size_t)c * h * w + p] / cnt[p]);
    free(acc);
    free(cnt);
    free(win);
    return out;
}

/* The whole TTA pipeline, naively: probabilities [C,H,W] (double). */
static double *tta_reference(sg_backend *be, sg_model *m, const sg_config *c, const uint8_t *rgb,
                             int H, int W, int crop_h, int crop_w, int st_h, int st_w) {
    int C = c->model.num_classes;
    size_t px = (size_t)H * W;
    float mean[3], std[3];
    mean_std(c, mean, std);
    float *norm = malloc(px * 3 * sizeof(float));
    double *prob = calloc((size_t)C * px, sizeof(double));
    float *back = malloc((size_t)C * px * sizeof(float)),
          *flipped = malloc((size_t)C * px * sizeof(float));
    REQUIRE(norm && prob && back && flipped);
    ref_normalize_u8(rgb, norm, 1, H, W, mean, std);
    int passes = 0;
    for (int si = 0; si < c->eval.n_scales; si++) {
        double s = c->eval.scales[si];
        int h = (int)(H * s + 0.5), w = (int)(W * s + 0.5);
        float *in = malloc((size_t)3 * h * w * sizeof(float)),
              *inf = malloc((size_t)3 * h * w * sizeof(float));
        REQUIRE(in && inf);
        if (h == H && w == W) memcpy(in, norm, px * 3 * sizeof(float));
        else ref_resize_fwd(norm, in, 1, 3, H, W, h, w);
        for (int f = 0; f <= c->eval.flip; f++) {
            const float *x = in;
            if (f) {
                ref_flip_w(in, inf, 1, 3, h, w);
                x = inf;
            }
            float *l = crop_h ? slide_host(be, m, x, h, w, C, crop_h, crop_w, st_h, st_w)
                              : forward_host(be, m, x, h, w, C);
            if (h == H && w == W) memcpy(back, l, (size_t)C * px * sizeof(float));
            else ref_resize_fwd(l, back, 1, C, h, w, H, W);
            const float *b = back;
            if (f) {
                ref_flip_w(back, flipped, 1, C, H, W);
                b = flipped;
            }
            for (size_t p = 0; p < px; p++) {
                double mx = b[p], sum = 0;
                for (int k = 1; k < C; k++) mx = b[k * px + p] > mx ? b[k * px + p] : mx;
                for (int k = 0; k < C; k++) sum += exp(b[k * px + p] - mx);
                for (int k = 0; k < C; k++) prob[k * px + p] += exp(b[k * px + p] - mx) / sum;
            }
            free(l);
            passes++;
        }
        free(in);
        free(inf);
    }
    for (size_t i = 0; i < (size_t)C * px; i++) prob[i] /= passes;
    free(norm);
    free(back);
    free(flipped);
    return prob;
}

/* argmax (first max wins) of [C,px] doubles, and the top-two margin. */
static int argmax_at(const double *p, int C, size_t px, size_t q, double *margin) {
    int best = 0;
    for (int k = 1; k < C; k++)
        if (p[k * px + q] > p[best * px + q]) best = k;
    double second = -1;
    for (int k = 0; k < C; k++)
        if (k != best && p[k * px + q] > second) second = p[k * px + q];
    *margin = p[best * px + q] - second;
    return best;
}

/* 52 x 0.65 = 33.8: rounds up (mmcv), where truncation would give 33 */
static const char *tta_sets[] = {"eval.scales=[0.65, 1.0, 1.25]", "eval.flip=true"};

/* ---------------- reference ---------------- */
static void test_reference(void) {
    sg_config c;
    CHECK(fx_config(&c, "ref", tta_sets, 2) == 0);
    CHECK(sg_tta_enabled(&c));
    CHECK_EQ_INT(sg_tta_scaled(H_IMG, 0.65), 23);
    CHECK_EQ_INT(sg_tta_scaled(W_IMG, 0.65), 34);
    CHECK_EQ_INT(sg_tta_scaled(W_IMG, 1.25), 65);
    sg_backend *be = test_backend();
    CHECK(be != NULL);
    char ck[1200];
    snprintf(ck, sizeof ck, "%s/ref.safetensors", fx_root);
    sg_model *m = make_model(be, &c, ck);
    int C = c.model.num_classes;
    sg_dataset *ds = sg_dataset_open(&c.data, "val", C);
    CHECK(ds != NULL && sg_dataset_size(ds) == N_VAL);
    int64_t conf[19 * 19] = {0};
    char first[1200];
    snprintf(first, sizeof first, "%s", sg_dataset_image_path(ds, 0));
    double *first_prob = NULL;
    /* whole images (every val image: the expected confusion matrix) and
     * sliding windows (the first image; 16x24 windows, strides 10x14) */
    for (int64_t i = 0; i < N_VAL; i++) {
        sg_img im = {0}, mk = {0};
        CHECK(sg_dataset_load(ds, i, &im, &mk, NULL, 0) == 0);
        CHECK(im.h == H_IMG && im.w == W_IMG);
        size_t px = (size_t)im.h * im.w;
        for (int slide = 0; slide <= (i == 0); slide++) {
            int crh = slide ? 16 : 0, crw = slide ? 24 : 0, sth = slide ? 10 : 0,
                stw = slide ? 14 : 0;
            double *want = tta_reference(be, m, &c, im.data, im.h, im.w, crh, crw, sth, stw);
            sg_tta t;
            sg_tta_init(&t, be, &c, crh, crw, sth, stw);
            uint8_t *d_img = be->ops->alloc(be, px * 3);
            be->ops->upload(be, d_img, im.data, px * 3);
            CHECK(sg_tta_run(&t, m, d_img, 1, im.h, im.w) == SG_OK);
            float *got = malloc((size_t)C * px * sizeof(float));
            CHECK(got != NULL);
            download_act(be, got, t.d_prob, C, px);
            double worst = 0, spread = 0;
            for (size_t k = 0; k < (size_t)C * px; k++) {
                double d = fabs(got[k] - want[k]);
                if (d > worst) worst = d;
                if (fabs(want[k] - 1.0 / C) > spread) spread = fabs(want[k] - 1.0 / C);
            }
            fprintf(stderr,
                    "image %lld %s: max |sg_tta - reference| = %.3g (probabilities up "
                    "to %.3g from uniform)\n",
                    (long long)i, slide ? "sliding windows" : "whole", worst, spread);
            CHECK_MSG(worst <= 1e-5,
                      "image %lld (%s): averaged probabilities differ from the "
                      "reference by %g",
                      (long long)i, slide ? "slide" : "whole", worst);
            CHECK_MSG(spread > 0.1, "the model predicts nearly uniform probabilities: a weak test");
            if (!slide) {
                for (size_t q = 0; q < px; q++) {
                    double margin;
                    int a = argmax_at(want, C, px, q, &margin);
                    /* the evaluator's argmax is over the same sg_tta floats */
                    int g = 0;
                    for (int k = 1; k < C; k++)
                        if (got[k * px + q] > got[g * px + q]) g = k;
                    if (margin > 1e-5) CHECK_EQ_INT(g, a);
                    if (mk.data[q] < C) conf[mk.data[q] * C + g]++;
                }
            }
            if (i == 0 && !slide) first_prob = want;
            else free(want);
            free(got);
            be->ops->free(be, d_img);
            sg_tta_free(&t);
        }
        sg_img_free(&im);
        sg_img_free(&mk);
    }
    sg_dataset_close(ds);
    sg_metrics mt;
    sg_metrics_from_confusion(conf, C, &mt);

    /* segtrain eval with TTA from the checkpoint */
    char out[1200];
    snprintf(out, sizeof out, "%s/eval_tta.json", fx_root);
    const char *ea[] = {"eval",    "--checkpoint", ck,          "--out", out,
                        "--quiet", "--set",        tta_sets[0], "--set", tta_sets[1]};
    CHECK_EQ_INT(th_run_cmd(sg_cmd_eval, ea, 10), 0);
    char *json = th_read_file(out);
    CHECK(json != NULL);
    CHECK_NEAR(th_json_num(json, "miou"), mt.miou, 1e-12);
    CHECK_NEAR(th_json_num(json, "pixel_acc"), mt.pixel_acc, 1e-12);
    CHECK_STR_CONTAINS(json, "\"eval_scales\":[0.65");
    CHECK_STR_CONTAINS(json, "\"eval_flip\":1");
    free(json);

    /* predict: argmax PNG and log of the averaged probabilities */
    char png[1200], npy[1200];
    snprintf(png, sizeof png, "%s/pred_tta.png", fx_root);
    snprintf(npy, sizeof npy, "%s/pred_tta.npy", fx_root);
    const char *pa[] = {"predict", "--checkpoint",  ck,  "--input", first,   "--output",
                        png,       "--save-logits", npy, "--quiet", "--set", tta_sets[0],
                        "--set",   tta_sets[1]};
    CHECK_EQ_INT(th_run_cmd(sg_cmd_predict, pa, 14), 0);
    size_t px = (size_t)H_IMG * W_IMG;
    sg_img p = {0};
    CHECK(sg_png_read_mask(png, &p, NULL, 0) == 0);
    CHECK(p.h == H_IMG && p.w == W_IMG);
    int checked = 0;
    for (size_t q = 0; q < px; q++) {
        double margin;
        int a = argmax_at(first_prob, C, px, q, &margin);
        if (margin > 1e-5) {
            CHECK_EQ_INT(p.data[q], a);
            checked++;
        }
    }
    CHECK(checked > (int)px / 2);
    sg_img_free(&p);
    char *raw = th_read_file(npy);
    CHECK(raw != NULL);
    const float *lg = npy_floats(raw);
    CHECK(lg != NULL);
    CHECK(strstr(raw + 10, "'shape': (19, 36, 52)") != NULL);
    double worst = 0;
    for (size_t k = 0; k < (size_t)C * px; k++) {
        double d = fabs(exp(lg[k]) - first_prob[k]);
        if (d > worst) worst = d;
    }
    CHECK_MSG(worst <= 1e-5,
              "predict --save-logits: exp(saved) differs from the reference "
              "probabilities by %g",
              worst);
    free(raw);
    free(first_prob);
    sg_model_destroy(m);
    sg_backend_destroy(be);
}

/* ---------------- predict with sliding windows ---------------- */
/* predict honours eval.crop_size / eval.stride as eval does (train/slide.h):
 * its saved logits are the naive per-pixel mean of the window logits, its
 * PNG their argmax, and the mIoU of its PNGs over the val split is exactly
 * what `segtrain eval` reports with the same settings. */
static void test_predict_slide(void) {
    const char *sets[] = {"eval.crop_size=[16, 24]", "eval.stride=[10, 14]"};
    sg_config c;
    CHECK(fx_config(&c, "slide", sets, 2) == 0);
    CHECK(!sg_tta_enabled(&c));
    sg_backend *be = test_backend();
    CHECK(be != NULL);
    char ck[1200];
    snprintf(ck, sizeof ck, "%s/slide.safetensors", fx_root);
    sg_model *m = make_model(be, &c, ck);
    int C = c.model.num_classes;
    float mean[3], std[3];
    mean_std(&c, mean, std);
    sg_dataset *ds = sg_dataset_open(&c.data, "val", C);
    CHECK(ds != NULL);
    size_t px = (size_t)H_IMG * W_IMG;
    int64_t conf[19 * 19] = {0};
    int checked = 0;
    for (int64_t i = 0; i < N_VAL; i++) {
        sg_img im = {0}, mk = {0};
        CHECK(sg_dataset_load(ds, i, &im, &mk, NULL, 0) == 0);
        float *x = malloc(px * 3 * sizeof(float));
        CHECK(x != NULL);
        ref_normalize_u8(im.data, x, 1, H_IMG, W_IMG, mean, std);
        float *want = slide_host(be, m, x, H_IMG, W_IMG, C, 16, 24, 10, 14);
        char png[1200], npy[1200];
        snprintf(png, sizeof png, "%s/slide_%lld.png", fx_root, (long long)i);
        snprintf(npy, sizeof npy, "%s/slide_%lld.npy", fx_root, (long long)i);
        const char *pa[] = {"predict",
                            "--checkpoint",
                            ck,
                            "--input",
                            sg_dataset_image_path(ds, i),
                            "--output",
                            png,
                            "--save-logits",
                            npy,
                            "--quiet",
                            "--set",
                            sets[0],
                            "--set",
                            sets[1]};
        CHECK_EQ_INT(th_run_cmd(sg_cmd_predict, pa, 14), 0);
        char *raw = th_read_file(npy);
        CHECK(raw != NULL);
        const float *lg = npy_floats(raw);
        CHECK(lg != NULL);
        double worst = 0;
        for (size_t k = 0; k < (size_t)C * px; k++) {
            double d = fabs((double)lg[k] - want[k]);
            if (d > worst) worst = d;
        }
        CHECK_MSG(worst <= 1e-5,
                  "image %lld: predict's sliding-window logits differ from the "
                  "naive windows by %g",
                  (long long)i, worst);
        sg_img p = {0};
        CHECK(sg_png_read_mask(png, &p, NULL, 0) == 0);
        CHECK(p.h == H_IMG && p.w == W_IMG);
        for (size_t q = 0; q < px; q++) {
            int a = 0, g = 0;
            for (int k = 1; k < C; k++) {
                if (lg[k * px + q] > lg[a * px + q]) a = k;
                if (want[k * px + q] > want[g * px + q]) g = k;
            }
            CHECK_EQ_INT(p.data[q], a); /* the PNG is the saved logits' argmax */
            double second = -1e30;
            for (int k = 0; k < C; k++)
                if (k != g && want[k * px + q] > second) second = want[k * px + q];
            if (want[g * px + q] - second > 1e-4) {
                CHECK_EQ_INT(p.data[q], g);
                checked++;
            }
            if (mk.data[q] < C) conf[mk.data[q] * C + p.data[q]]++;
        }
        sg_img_free(&p);
        free(raw);
        free(want);
        free(x);
        sg_img_free(&im);
        sg_img_free(&mk);
    }
    CHECK(checked > N_VAL * (int)px / 2);
    sg_dataset_close(ds);
    sg_metrics mt;
    sg_metrics_from_confusion(conf, C, &mt);
    char out[1200];
    snprintf(out, sizeof out, "%s/eval_slide.json", fx_root);
    const char *ea[] = {"eval",    "--checkpoint", ck,      "--out", out,
                        "--quiet", "--set",        sets[0], "--set", sets[1]};
    CHECK_EQ_INT(th_run_cmd(sg_cmd_eval, ea, 10), 0);
    char *json = th_read_file(out);
    CHECK(json != NULL);
    CHECK_NEAR(th_json_num(json, "miou"), mt.miou, 0);
    CHECK_NEAR(th_json_num(json, "pixel_acc"), mt.pixel_acc, 0);
    free(json);
    sg_model_destroy(m);
    sg_backend_destroy(be);
}

/* ---------------- identity ---------------- */
static void test_identity(void) {
    sg_config c;
    CHECK(fx_config(&c, "id", NULL, 0) == 0);
    CHECK(!sg_tta_enabled(&c));
    sg_backend *be = test_backend();
    CHECK(be != NULL);
    char ck[1200];
    snprintf(ck, sizeof ck, "%s/id.safetensors", fx_root);
    sg_model *m = make_model(be, &c, ck);
    int C = c.model.num_classes;
    float mean[3], std[3];
    mean_std(&c, mean, std);
    /* today's evaluation, computed here: argmax of one forward's logits */
    sg_dataset *ds = sg_dataset_open(&c.data, "val", C);
    CHECK(ds != NULL);
    int64_t conf[19 * 19] = {0};
    size_t px = (size_t)H_IMG * W_IMG;
    uint8_t *pred0 = malloc(px);
    float *logits0 = NULL;
    char first[1200];
    snprintf(first, sizeof first, "%s", sg_dataset_image_path(ds, 0));
    for (int64_t i = 0; i < N_VAL; i++) {
        sg_img im = {0}, mk = {0};
        CHECK(sg_dataset_load(ds, i, &im, &mk, NULL, 0) == 0);
        float *x = malloc(px * 3 * sizeof(float));
        ref_normalize_u8(im.data, x, 1, H_IMG, W_IMG, mean, std);
        /* the backend's normalisation, as eval uses it (bit-exact input) */
        uint8_t *d_img = be->ops->alloc(be, px * 3);
        be->ops->upload(be, d_img, im.data, px * 3);
        CHECK(sg_model_plan_infer(m, 1, H_IMG, W_IMG) == SG_OK);
        be->ops->normalize_u8(be, d_img, sg_model_input(m), 1, H_IMG, W_IMG, mean, std);
        sg_model_forward(m, 0, 0);
        float *l = malloc((size_t)C * px * sizeof(float));
        download_act(be, l, sg_model_out(m), C, px);
        be->ops->free(be, d_img);
        uint8_t *pred = malloc(px);
        ref_argmax(l, pred, 1, C, (int)px);
        for (size_t q = 0; q < px; q++)
            if (mk.data[q] < C) conf[mk.data[q] * C + pred[q]]++;
        if (i == 0) {
            memcpy(pred0, pred, px);
            logits0 = l;
        } else {
            free(l);
        }
        free(pred);
        free(x);
        sg_img_free(&im);
        sg_img_free(&mk);
    }
    sg_dataset_close(ds);
    sg_metrics mt;
    sg_metrics_from_confusion(conf, C, &mt);
    const char *variants[2][4] = {{NULL},
                                  {"--set", "eval.scales=[1.0]", "--set", "eval.flip=false"}};
    char *jsons[2];
    for (int v = 0; v < 2; v++) {
        char out[1200], png[1200], npy[1200];
        snprintf(out, sizeof out, "%s/eval_%d.json", fx_root, v);
        snprintf(png, sizeof png, "%s/pred_%d.png", fx_root, v);
        snprintf(npy, sizeof npy, "%s/pred_%d.npy", fx_root, v);
        const char *ea[10] = {"eval", "--checkpoint", ck, "--out", out, "--quiet"};
        const char *pa[14] = {"predict", "--checkpoint",  ck,  "--input", first, "--output",
                              png,       "--save-logits", npy, "--quiet"};
        int ne = 6, np = 10;
        for (int k = 0; v && k < 4; k++) {
            ea[ne++] = variants[v][k];
            pa[np++] = variants[v][k];
        }
        CHECK_EQ_INT(th_run_cmd(sg_cmd_eval, ea, ne), 0);
        jsons[v] = th_read_file(out);
        CHECK(jsons[v] != NULL);
        CHECK_NEAR(th_json_num(jsons[v], "miou"), mt.miou, 0);
        CHECK_NEAR(th_json_num(jsons[v], "pixel_acc"), mt.pixel_acc, 0);
        CHECK_EQ_INT(th_run_cmd(sg_cmd_predict, pa, np), 0);
        sg_img p = {0};
        CHECK(sg_png_read_mask(png, &p, NULL, 0) == 0);
        CHECK(memcmp(p.data, pred0, px) == 0);
        sg_img_free(&p);
        char *raw = th_read_file(npy);
        CHECK(raw != NULL);
        const float *lg = npy_floats(raw);
        CHECK(lg && memcmp(lg, logits0, (size_t)C * px * sizeof(float)) == 0);
        free(raw);
    }
    CHECK_MSG(strcmp(jsons[0], jsons[1]) == 0, "eval JSON differs:\n%s\n%s", jsons[0], jsons[1]);
    free(jsons[0]);
    free(jsons[1]);
    free(pred0);
    free(logits0);
    sg_model_destroy(m);
    sg_backend_destroy(be);
}

/* ---------------- ranks, in-training evaluation ---------------- */
static void test_ranks(void) {
    const char *sets[] = {tta_sets[0],
                          tta_sets[1],
                          "train.iters=2",
                          "train.eval_every=2",
                          "train.tensorboard=false",
                          "eval.batch_size=2"};
    sg_config c;
    CHECK(fx_config(&c, "ranks", sets, 6) == 0);
    char cfgpath[1200];
    snprintf(cfgpath, sizeof cfgpath, "%s/ranks/config.yaml", fx_root);
    /* in-training evaluation at iteration 2 with TTA */
    const char *ta[] = {"train", "--config", cfgpath, "--quiet"};
    CHECK_EQ_INT(th_run_cmd(sg_cmd_train, ta, 4), 0);
    char ck[1200], mpath[1200];
    snprintf(ck, sizeof ck, "%s/ranks/checkpoints/iter_00000002.safetensors", fx_root);
    snprintf(mpath, sizeof mpath, "%s/ranks/metrics.jsonl", fx_root);
    char *metrics = th_read_file(mpath);
    CHECK(metrics != NULL);
    double val = th_json_num(metrics, "val_miou");
    CHECK_MSG(!isnan(val), "no val_miou in %s", mpath);
    free(metrics);
    char one[1200];
    snprintf(one, sizeof one, "%s/one.json", fx_root);
    const char *e1[] = {"eval", "--checkpoint", ck, "--out", one, "--quiet"};
    CHECK_EQ_INT(th_run_cmd(sg_cmd_eval, e1, 6), 0);
    char *j1 = th_read_file(one);
    CHECK(j1 != NULL);
    CHECK_NEAR(th_json_num(j1, "miou"), val, 1e-12);
    /* TTA was on: one plain pass scores differently */
    char plain[1200];
    snprintf(plain, sizeof plain, "%s/plain.json", fx_root);
    const char *e0[] = {"eval",  "--checkpoint",      ck,      "--out",          plain, "--quiet",
                        "--set", "eval.scales=[1.0]", "--set", "eval.flip=false"};
    CHECK_EQ_INT(th_run_cmd(sg_cmd_eval, e0, 10), 0);
    char *j0 = th_read_file(plain);
    CHECK(j0 != NULL);
    CHECK_MSG(th_json_num(j0, "pixel_acc") != th_json_num(j1, "pixel_acc"),
              "eval with and without TTA agree: was TTA used?");
    free(j0);
    /* the same on 2 ranks */
    int port = th_free_port();
    char ps[16], two[1200];
    snprintf(ps, sizeof ps, "%d", port);
    snprintf(two, sizeof two, "%s/two.json", fx_root);
    pid_t pids[2];
    for (int r = 0; r < 2; r++) {
        pids[r] = fork();
        CHECK(pids[r] >= 0);
        if (pids[r] == 0) {
            th_rank_env(r, 2, ps, 1);
            const char *e2[] = {"eval", "--checkpoint", ck,      "--out",
                                two,    "--quiet",      "--set", "threads=1"};
            _exit(th_run_cmd(sg_cmd_eval, e2, 8));
        }
    }
    for (int r = 0; r < 2; r++) {
        int st;
        waitpid(pids[r], &st, 0);
        CHECK_MSG(th_exit_status(st) == 0, "rank %d of the 2-rank eval failed", r);
    }
    char *j2 = th_read_file(two);
    CHECK(j2 != NULL);
    const char *keys[] = {"miou", "pixel_acc", "total_pixels", "images"};
    for (int k = 0; k < 4; k++) {
        double a = th_json_num(j1, keys[k]), b = th_json_num(j2, keys[k]);
        CHECK_MSG(!isnan(a) && a == b, "%s: 1 rank %.17g, 2 ranks %.17g", keys[k], a, b);
    }
    free(j1);
    free(j2);
}

/* ---------------- memory preflight ---------------- */
static void test_memory(void) {
    const char *sets[] = {"eval.scales=[0.5, 2.0]", "eval.flip=true", "eval.batch_size=1"};
    sg_config c;
    CHECK(fx_config(&c, "mem", sets, 3) == 0);
    sg_backend *be = test_backend();
    CHECK(be != NULL);
    char ck[1200];
    snprintf(ck, sizeof ck, "%s/mem.safetensors", fx_root);
    sg_model *m = make_model(be, &c, ck);
    sg_dataset *ds = sg_dataset_open(&c.data, "val", 19);
    CHECK(ds != NULL);
    sg_evaluator ev;
    CHECK(sg_evaluator_init(&ev, be, ds, &c) == SG_OK);
    CHECK(ev.use_tta);
    /* the largest scale's plan (2.0: 72x104) + image buffers (5 bytes a
     * pixel) + floats: normalised image (3), probabilities, resized logits,
     * flipped logits (19 each) */
    size_t px = (size_t)H_IMG * W_IMG;
    size_t plan = sg_model_plan_bytes(m, 1, 2 * H_IMG, 2 * W_IMG, 0);
    CHECK(plan > sg_model_plan_bytes(m, 1, H_IMG, W_IMG, 0));
    size_t need = plan + 5 * px + 4 * px * (3 + 3 * 19);
    th_cap_begin();
    sg_status st = sg_evaluator_check_fits(&ev, m, 1, H_IMG, W_IMG, need - 1, "img.png");
    const char *msg = th_cap_end();
    CHECK_EQ_INT(st, SG_ERR_CONFIG);
    CHECK_STR_CONTAINS(msg, "test-time augmentation over 2 scales x flip");
    CHECK_STR_CONTAINS(msg, "eval.scales");
    CHECK_STR_CONTAINS(msg, "img.png");
    CHECK_EQ_INT(sg_evaluator_check_fits(&ev, m, 1, H_IMG, W_IMG, need, "img.png"), SG_OK);
    sg_evaluator_free(&ev);
    sg_dataset_close(ds);
    sg_model_destroy(m);
    sg_backend_destroy(be);
}

/* ---------------- config ---------------- */
static void test_config(void) {
    sg_config c;
    sg_config_defaults(&c);
    CHECK_EQ_INT(c.eval.n_scales, 1);
    CHECK(c.eval.scales[0] == 1.0 && c.eval.flip == 0 && !sg_tta_enabled(&c));
    CHECK_EQ_INT(sg_config_set(&c, "eval.scales=[0.5, 0.75, 1.0, 1.25, 1.5, 1.75]"), SG_OK);
    CHECK_EQ_INT(c.eval.n_scales, 6);
    CHECK(c.eval.scales[5] == 1.75 && sg_tta_enabled(&c));
    const char *bad[] = {"eval.scales=[1.0, 5.0]", "eval.scales=[0.05]", "eval.scales=[]",
                         "eval.scales=[1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1]"};
    for (int i = 0; i < 4; i++) {
        sg_config d;
        sg_config_defaults(&d);
        th_cap_begin();
        sg_status st = sg_config_set(&d, bad[i]);
        const char *msg = th_cap_end();
        CHECK_MSG(st == SG_ERR_CONFIG, "%s accepted", bad[i]);
        CHECK_STR_CONTAINS(msg, "eval.scales");
    }
    sg_config_defaults(&c);
    CHECK_EQ_INT(sg_config_set(&c, "eval.flip=true"), SG_OK);
    CHECK(sg_tta_enabled(&c));
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s reference|identity|predict_slide|ranks|memory|config\n",
                argv[0]);
        return 2;
    }
    sg_log_set_level(SG_LOG_WARN);
    if (!strcmp(argv[1], "config")) {
        TEST_RUN(test_config);
        return TEST_EXIT();
    }
    if (fx_setup("tta", 4, N_VAL, H_IMG, W_IMG, 19) != 0) return 1;
    if (!strcmp(argv[1], "reference")) TEST_RUN(test_reference);
    else if (!strcmp(argv[1], "identity")) TEST_RUN(test_identity);
    else if (!strcmp(argv[1], "predict_slide")) TEST_RUN(test_predict_slide);
    else if (!strcmp(argv[1], "ranks")) TEST_RUN(test_ranks);
    else if (!strcmp(argv[1], "memory")) TEST_RUN(test_memory);
    else return 2;
    fx_cleanup(tu_failed_cases != 0);
    return TEST_EXIT();
}
