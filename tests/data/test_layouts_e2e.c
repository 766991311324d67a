/* tests/data/test_layouts_e2e.c - the Pascal VOC and ADE20K layouts end to
 * end, through the commands in-process: `segtrain synth --layout voc|ade20k`
 * writes JPEG images and PNG masks, `segtrain train` with the shipped
 * configs/voc.yaml or configs/ade20k.yaml (shrunk to the tiny network) learns
 * (val mIoU well above chance), `segtrain eval` on the final checkpoint gives
 * the same mIoU, and `segtrain predict` on the folder of JPEG images writes a
 * prediction for each (a.jpg -> a.png) that agrees with the val masks; a
 * folder where a.jpg and a.png would both give a.png is refused, and files
 * that are no images are skipped.
 * One case per argument: voc, ade20k. */
#include <math.h>

#include "cmd/commands.h"
#include "data/dataset.h"
#include "data_test.h"
#include "io/image.h"
#include "tests/helpers.h"
#include "testutil.h"

#ifndef SG_SOURCE_ROOT
#error "SG_SOURCE_ROOT must name the source tree (configs/)"
#endif

#define ITERS 150
#define CLASSES 4     /* trainIds 0..3 */
#define MIN_MIOU 0.35 /* chance is about 0.1-0.25 with 4 classes */
#define MIN_PIXEL_ACC 0.5

/* "miou":<number> from an eval JSON file, NAN when absent. */
static double json_miou(const char *path) {
    char *t = th_read_file(path);
    if (!t) return NAN;
    const char *p = strstr(t, "\"miou\":");
    double v = p ? strtod(p + 7, NULL) : NAN;
    free(t);
    return v;
}

static int run(int (*cmd)(int, char **), const char *const *args) {
    double t0 = th_now();
    char *argv[64];
    int argc = 0;
    while (args[argc]) {
        argv[argc] = (char *)args[argc];
        argc++;
    }
    argv[argc] = NULL;
    int rc = cmd(argc, argv);
    fprintf(stderr, "segtrain %s: exit %d in %.1f s\n", args[0], rc, th_now() - t0);
    return rc;
}

static void run_layout(const char *layout) {
    int voc = strcmp(layout, "voc") == 0;
    char data[1024], run_dir[1024];
    snprintf(data, sizeof data, "%s", dt_path("%s-data", layout));
    snprintf(run_dir, sizeof run_dir, "%s", dt_path("%s-run", layout));
    char cfg[1024], set_root[1200], set_run[1200], iters[64], classes[16];
    snprintf(cfg, sizeof cfg, "%s/configs/%s.yaml", SG_SOURCE_ROOT, layout);
    snprintf(set_root, sizeof set_root, "data.root=%s", data);
    snprintf(set_run, sizeof set_run, "run_dir=%s", run_dir);
    snprintf(iters, sizeof iters, "train.iters=%d", ITERS);
    snprintf(classes, sizeof classes, "%d", CLASSES);
    const char *synth[] = {"synth", "--out",  data, "--layout", layout,  "--train",
                           "24",    "--val",  "4",  "--size",   "48x64", "--classes",
                           classes, "--seed", "1",  NULL};
    CHECK_EQ_INT(run(sg_cmd_synth, synth), 0);
    /* the images are JPEGs, found by content */
    char img0[1024]; /* dt_path's buffers are a small ring: keep a copy */
    snprintf(img0, sizeof img0, "%s",
             voc ? dt_path("%s-data/JPEGImages/2012_000000.jpg", layout)
                 : dt_path("%s-data/images/validation/ADE_val_00000001.jpg", layout));
    sg_img_format fmt;
    CHECK(sg_image_sniff(img0, &fmt, NULL, 0) == SG_OK && fmt == SG_IMG_JPEG);

    /* the shipped recipe, shrunk: the tiny network on 32x32 crops */
    const char *train[] = {"train",    "--quiet",
                           "--config", cfg,
                           "--set",    set_root,
                           "--set",    set_run,
                           "--set",    iters,
                           "--set",    "device=cpu",
                           "--set",    "threads=1",
                           "--set",    "model.backbone=resnet18",
                           "--set",    "model.base_width=8",
                           "--set",    "model.aspp_rates=[2,4,6]",
                           "--set",    "model.sync_bn=false",
                           "--set",    "data.crop_size=[32,32]",
                           "--set",    "data.workers=1",
                           "--set",    "train.batch_size=8",
                           "--set",    "train.lr=0.05",
                           "--set",    "train.checkpoint_every=0",
                           "--set",    "train.eval_every=0",
                           NULL};
    CHECK_EQ_INT(run(sg_cmd_train, train), 0);
    char ck[1400], ev[1400];
    snprintf(ck, sizeof ck, "%s/checkpoints/iter_%08d.safetensors", run_dir, ITERS);
    snprintf(ev, sizeof ev, "%s/eval/iter_%08d.json", run_dir, ITERS);
    double miou = json_miou(ev);
    fprintf(stderr, "%s: val mIoU %.4f after %d iterations (threshold %.2f)\n", layout, miou, ITERS,
            MIN_MIOU);
    CHECK(miou >= MIN_MIOU);

    /* eval of the final checkpoint: the same number */
    char ev2[1400];
    snprintf(ev2, sizeof ev2, "%s/eval.json", run_dir);
    const char *eval[] = {"eval", "--quiet", "--checkpoint", ck, "--out", ev2, NULL};
    CHECK_EQ_INT(run(sg_cmd_eval, eval), 0);
    CHECK_NEAR(json_miou(ev2), miou, 1e-9);

    /* predict on the folder of JPEGs: one PNG per image, named after it */
    const char *in_dir = voc ? dt_path("%s-data/JPEGImages", layout)
                             : dt_path("%s-data/images/validation", layout);
    const char *out_dir = dt_path("%s-pred", layout);
    const char *predict[] = {"predict", "--quiet",  "--checkpoint", ck,  "--input",
                             in_dir,    "--output", out_dir,        NULL};
    CHECK_EQ_INT(run(sg_cmd_predict, predict), 0);
    long agree = 0, labelled = 0;
    for (int i = 0; i < 4; i++) {
        const char *pred = voc ? dt_path("%s-pred/2012_%06d.png", layout, i)
                               : dt_path("%s-pred/ADE_val_%08d.png", layout, i + 1);
        const char *mask =
            voc ? dt_path("%s-data/SegmentationClass/2012_%06d.png", layout, i)
                : dt_path("%s-data/annotations/validation/ADE_val_%08d.png", layout, i + 1);
        sg_img p, m;
        char err[SG_DATA_ERR_LEN];
        CHECK_MSG(sg_png_read_mask(pred, &p, err, sizeof err) == SG_OK, "%s", err);
        CHECK_MSG(sg_png_read_mask(mask, &m, err, sizeof err) == SG_OK, "%s", err);
        if (!p.data || !m.data) continue;
        CHECK(p.h == 48 && p.w == 64 && m.h == 48 && m.w == 64);
        for (int k = 0; k < 48 * 64; k++) {
            /* VOC: 255 = border; ADE20K: 0 = other, labels shifted by one */
            int truth = voc ? m.data[k] : (m.data[k] == 0 ? 255 : m.data[k] - 1);
            CHECK(p.data[k] < (voc ? 21 : 150)); /* model.num_classes */
            if (truth == 255) continue;
            labelled++;
            agree += p.data[k] == truth;
        }
        sg_img_free(&p);
        sg_img_free(&m);
    }
    /* the training images are predicted too (voc: JPEGImages holds all) */
    if (voc) {
        sg_img p;
        CHECK(sg_png_read_mask(dt_path("%s-pred/2011_000023.png", layout), &p, NULL, 0) == 0);
        sg_img_free(&p);
    }
    if (voc) {
        /* a folder with a.jpg and a.png: both would be a.png, refused; other
         * files are skipped, not errors */
        char mix[1024];
        snprintf(mix, sizeof mix, "%s", dt_path("mix"));
        dt_mkdirs(mix);
        char cmd[8192];
        snprintf(cmd, sizeof cmd, "cp '%s' '%s/a.jpg' && cp '%s' '%s/b' && echo x > '%s/notes.txt'",
                 img0, mix, img0, mix, mix);
        CHECK(system(cmd) == 0);
        char mix_out[1024];
        snprintf(mix_out, sizeof mix_out, "%s", dt_path("mix-pred"));
        const char *pred_mix[] = {"predict", "--quiet",  "--checkpoint", ck,  "--input",
                                  mix,       "--output", mix_out,        NULL};
        CHECK_EQ_INT(run(sg_cmd_predict, pred_mix), 0);
        sg_img q;
        CHECK(sg_png_read_mask(dt_path("mix-pred/a.png"), &q, NULL, 0) == 0); /* a.jpg */
        sg_img_free(&q);
        CHECK(sg_png_read_mask(dt_path("mix-pred/b.png"), &q, NULL, 0) == 0); /* no extension */
        sg_img_free(&q);
        snprintf(cmd, sizeof cmd, "cp '%s' '%s/a.png'", dt_path("mix-pred/a.png"), mix);
        CHECK(system(cmd) == 0);
        th_cap_begin();
        int rc = run(sg_cmd_predict, pred_mix);
        const char *msg = th_cap_end();
        CHECK_EQ_INT(rc, 2); /* the user's input: exit 2 */
        CHECK_STR_CONTAINS(msg, "would both be written as");
    }
    double acc = labelled ? (double)agree / (double)labelled : 0;
    fprintf(stderr, "%s: predict agrees with the val masks on %.3f of %ld labelled pixels\n",
            layout, acc, labelled);
    CHECK(acc >= MIN_PIXEL_ACC);
}

static const char *g_layout;
static void test_layout(void) { run_layout(g_layout); }

int main(int argc, char **argv) {
    if (argc != 2 || (strcmp(argv[1], "voc") != 0 && strcmp(argv[1], "ade20k") != 0)) {
        fprintf(stderr, "usage: %s voc|ade20k\n", argv[0]);
        return 2;
    }
    g_layout = argv[1];
    TEST_RUN(test_layout);
    return TEST_EXIT();
}
