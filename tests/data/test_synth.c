/* tests/data/test_synth.c - the synthetic dataset: deterministic by seed,
 * labelIds content (classes, ignore regions), the Cityscapes layout read back
 * through the dataset index and label map, and the synth command's options. */
#include "cmd/commands.h"
#include "data/dataset.h"
#include "data/synth.h"
#include "data_test.h"
#include "testutil.h"

static int file_equal(const char *a, const char *b) {
    FILE *fa = fopen(a, "rb"), *fb = fopen(b, "rb");
    int eq = fa && fb;
    while (eq) {
        int ca = fgetc(fa), cb = fgetc(fb);
        if (ca != cb) eq = 0;
        if (ca == EOF || cb == EOF) break;
    }
    if (fa) fclose(fa);
    if (fb) fclose(fb);
    return eq;
}

static void test_render_deterministic(void) {
    sg_synth_opts o;
    sg_synth_defaults(&o);
    o.h = 40;
    o.w = 56;
    uint8_t a[40 * 56 * 3], b[40 * 56 * 3], la[40 * 56], lb[40 * 56];
    sg_synth_render(&o, 0, 3, a, la);
    sg_synth_render(&o, 0, 3, b, lb);
    CHECK(memcmp(a, b, sizeof a) == 0 && memcmp(la, lb, sizeof la) == 0);
    sg_synth_render(&o, 0, 4, b, lb); /* another image */
    CHECK(memcmp(la, lb, sizeof la) != 0);
    sg_synth_render(&o, 1, 3, b, lb); /* another split */
    CHECK(memcmp(la, lb, sizeof la) != 0);
    o.seed = 1; /* another seed */
    sg_synth_render(&o, 0, 3, b, lb);
    CHECK(memcmp(a, b, sizeof a) != 0);
}

static void test_label_content(void) {
    enum { N = 40, HH = 48, WW = 64 };
    uint8_t map[256];
    sg_cityscapes_label_map(map, 255);
    for (int classes = 5; classes <= 19; classes += 14) {
        sg_synth_opts o;
        sg_synth_defaults(&o);
        o.h = HH;
        o.w = WW;
        o.classes = classes;
        static uint8_t rgb[HH * WW * 3], lid[HH * WW];
        long count[256] = {0};
        double sum[19][3] = {{0}};
        int imgs_with_ignore = 0;
        for (int i = 0; i < N; i++) {
            sg_synth_render(&o, 0, i, rgb, lid);
            int present[256] = {0}, n_present = 0, ign = 0;
            for (int p = 0; p < HH * WW; p++) {
                uint8_t t = map[lid[p]];
                CHECK_MSG(t < classes || (t == 255 && lid[p] <= 1), "labelId %d", lid[p]);
                count[t]++;
                if (t == 255) ign = 1;
                else {
                    for (int k = 0; k < 3; k++) sum[t][k] += rgb[3 * p + k];
                    if (!present[t]++) n_present++;
                }
            }
            CHECK(n_present >= 3); /* background classes at least */
            imgs_with_ignore += ign;
        }
        int used = 0;
        for (int t = 0; t < classes; t++) used += count[t] > 0;
        CHECK_MSG(used >= classes - 1, "only %d of %d classes appear", used, classes);
        CHECK(count[255] > 0 && count[255] < (long)N * HH * WW / 5); /* some, not most */
        CHECK(imgs_with_ignore > N / 4);
        /* Classes look different: mean colours pairwise apart. */
        for (int s = 0; s < classes; s++)
            for (int t = s + 1; t < classes; t++) {
                if (!count[s] || !count[t]) continue;
                double d = 0;
                for (int k = 0; k < 3; k++) {
                    double x = sum[s][k] / count[s] - sum[t][k] / count[t];
                    d += x * x;
                }
                CHECK_MSG(sqrt(d) > 12, "classes %d and %d mean colours %.1f apart", s, t, sqrt(d));
            }
    }
}

static void test_written_dataset_reads_back(void) {
    char out[1024], out2[1024];
    snprintf(out, sizeof out, "%s", dt_path("s1"));
    snprintf(out2, sizeof out2, "%s", dt_path("s2"));
    char *argv[] = {"synth", "--out", out, "--train", "6", "--val", "3", "--size", "33x45",
                    "--seed", "9", NULL};
    CHECK_EQ_INT(sg_cmd_synth(11, argv), 0);
    argv[2] = out2;
    CHECK_EQ_INT(sg_cmd_synth(11, argv), 0);
    CHECK(file_equal(dt_path("s1/leftImg8bit/train/synthb/synthb_000000_000003_leftImg8bit.png"),
                     dt_path("s2/leftImg8bit/train/synthb/synthb_000000_000003_leftImg8bit.png")));
    CHECK(file_equal(dt_path("s1/gtFine/val/synthc/synthc_000000_000002_gtFine_labelIds.png"),
                     dt_path("s2/gtFine/val/synthc/synthc_000000_000002_gtFine_labelIds.png")));
    /* Writing over an existing dataset is refused. */
    dt_capture_begin();
    int rc = sg_cmd_synth(11, argv);
    const char *msg = dt_capture_end();
    CHECK_EQ_INT(rc, 1);
    CHECK_STR_CONTAINS(msg, "already exists");

    sg_data_cfg c;
    memset(&c, 0, sizeof c);
    snprintf(c.format, sizeof c.format, "cityscapes");
    snprintf(c.root, sizeof c.root, "%s", out);
    snprintf(c.label_map, sizeof c.label_map, "cityscapes");
    snprintf(c.invalid_labels, sizeof c.invalid_labels, "error");
    c.ignore_index = 255;
    sg_dataset *tr = sg_dataset_open(&c, "train", 19), *va = sg_dataset_open(&c, "val", 19);
    CHECK(tr && va);
    CHECK_EQ_INT(sg_dataset_size(tr), 6);
    CHECK_EQ_INT(sg_dataset_size(va), 3);
    CHECK_STR_CONTAINS(sg_dataset_mask_path(tr, 0), "_gtFine_labelIds.png");
    sg_synth_opts o;
    sg_synth_defaults(&o);
    o.h = 33;
    o.w = 45;
    o.seed = 9;
    uint8_t rgb[33 * 45 * 3], lid[33 * 45], map[256];
    sg_cityscapes_label_map(map, 255);
    for (int64_t i = 0; i < 3; i++) {
        sg_img im, m;
        CHECK(sg_dataset_load(va, i, &im, &m, NULL, 0) == 0);
        CHECK(im.h == 33 && im.w == 45);
        /* val image i sits in city synthc/synthd by parity; find its index */
        const char *rel = sg_dataset_rel_path(va, i);
        int idx = atoi(strrchr(rel, '_') - 6);
        sg_synth_render(&o, 1, idx, rgb, lid);
        CHECK(memcmp(im.data, rgb, sizeof rgb) == 0);
        for (int p = 0; p < 33 * 45; p++) CHECK(m.data[p] == map[lid[p]]);
        sg_img_free(&im);
        sg_img_free(&m);
    }
    sg_dataset_close(tr);
    sg_dataset_close(va);
}

static void test_cmd_usage_errors(void) {
    char *no_out[] = {"synth", "--train", "3", NULL};
    char *bad_size[] = {"synth", "--out", "x", "--size", "12", NULL};
    char *bad_int[] = {"synth", "--out", "x", "--train", "3a", NULL};
    char *bad_cls[] = {"synth", "--out", "x", "--classes", "40", NULL};
    char *unknown[] = {"synth", "--out", "x", "--bogus", "1", NULL};
    char *dangling[] = {"synth", "--out", NULL};
    struct {
        char **argv;
        int argc;
        const char *msg;
    } cases[] = {{no_out, 3, "--out DIR is required"},
                 {bad_size, 5, "--size '12'"},
                 {bad_int, 5, "--train '3a'"},
                 {bad_cls, 5, "--classes '40'"},
                 {unknown, 5, "unknown option --bogus"},
                 {dangling, 2, "--out needs a value"}};
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
        dt_capture_begin();
        int rc = sg_cmd_synth(cases[k].argc, cases[k].argv);
        const char *out = dt_capture_end();
        CHECK_EQ_INT(rc, 2);
        CHECK_STR_CONTAINS(out, cases[k].msg);
    }
}

int main(void) {
    TEST_RUN(test_render_deterministic);
    TEST_RUN(test_label_content);
    TEST_RUN(test_written_dataset_reads_back);
    TEST_RUN(test_cmd_usage_errors);
    return TEST_EXIT();
}
