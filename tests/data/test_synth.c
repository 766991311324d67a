/* tests/data/test_synth.c - the synthetic dataset: deterministic by seed,
 * labelIds content (classes, ignore regions), the Cityscapes layout read back
 * through the dataset index and label map, its other gtFine files
 * (instanceIds, color, polygons.json painted back = labelIds), the VOC and
 * ADE20K layouts read back through their dataset formats (JPEG images), and
 * the synth command's options. */
#include "cmd/commands.h"
#include "data/dataset.h"
#include "data/synth.h"
#include "data_test.h"
#include "io/image.h"
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
    char *argv[] = {"synth", "--out",  out,     "--train", "6", "--val",
                    "3",     "--size", "33x45", "--seed",  "9", NULL};
    CHECK_EQ_INT(sg_cmd_synth(11, argv), 0);
    argv[2] = out2;
    CHECK_EQ_INT(sg_cmd_synth(11, argv), 0);
    CHECK(file_equal(dt_path("s1/leftImg8bit/train/synthb/synthb_000000_000003_leftImg8bit.png"),
                     dt_path("s2/leftImg8bit/train/synthb/synthb_000000_000003_leftImg8bit.png")));
    CHECK(file_equal(dt_path("s1/gtFine/val/synthc/synthc_000000_000002_gtFine_labelIds.png"),
                     dt_path("s2/gtFine/val/synthc/synthc_000000_000002_gtFine_labelIds.png")));
    /* Writing over an existing dataset is refused. */
    th_cap_begin();
    int rc = sg_cmd_synth(11, argv);
    const char *msg = th_cap_end();
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

/* Paints polygons.json's rectangles (the only shapes synth writes) over a
 * zero ("unlabeled") image, as cityscapesScripts' json2labelImg does with
 * Pillow (integer corners, edges included), naming labels by labelId. */
static int paint_polygons(const char *path, uint8_t *out, int h, int w) {
    char *t = NULL;
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    static char buf[1 << 22];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    t = buf;
    int jh = 0, jw = 0;
    const char *ph = strstr(t, "\"imgHeight\": "), *pw = strstr(t, "\"imgWidth\": ");
    if (!ph || !pw || sscanf(ph, "\"imgHeight\": %d", &jh) != 1 ||
        sscanf(pw, "\"imgWidth\": %d", &jw) != 1 || jh != h || jw != w)
        return -1;
    memset(out, 0, (size_t)h * w);
    int count = 0;
    for (const char *o = strstr(t, "{\"label\": \""); o; o = strstr(o + 1, "{\"label\": \"")) {
        char label[64];
        int x[4], y[4];
        if (sscanf(o,
                   "{\"label\": \"%63[^\"]\", \"polygon\": [[%d, %d], [%d, %d], [%d, %d], "
                   "[%d, %d]]}",
                   label, &x[0], &y[0], &x[1], &y[1], &x[2], &y[2], &x[3], &y[3]) != 9)
            return -1;
        size_t l = strlen(label);
        if (l > 5 && !strcmp(label + l - 5, "group")) label[l - 5] = 0;
        int id = -1;
        if (!strcmp(label, "ego vehicle")) id = 1;
        for (int c = 0; c < 19 && id < 0; c++)
            if (!strcmp(label, sg_cityscapes_class_name(c))) id = sg_cityscapes_label_id(c);
        if (id < 0 || x[0] != x[3] || x[1] != x[2] || y[0] != y[1] || y[2] != y[3]) return -1;
        for (int yy = y[0]; yy <= y[2]; yy++)
            for (int xx = x[0]; xx <= x[1]; xx++) out[(size_t)yy * w + xx] = (uint8_t)id;
        count++;
    }
    return count;
}

static void test_cityscapes_gtfine_files(void) {
    char out[1024];
    snprintf(out, sizeof out, "%s", dt_path("gt"));
    char *argv[] = {"synth", "--out",  out,     "--train", "4", "--val",
                    "2",     "--size", "40x56", "--seed",  "4", NULL};
    CHECK_EQ_INT(sg_cmd_synth(11, argv), 0);
    uint8_t map[256];
    sg_cityscapes_label_map(map, 255);
    int instances = 0;
    for (int i = 0; i < 4; i++) {
        char pre[1200];
        snprintf(pre, sizeof pre, "%s/gtFine/train/synth%c/synth%c_000000_%06d_gtFine_", out,
                 'a' + i % 2, 'a' + i % 2, i);
        char p[1300];
        sg_img lid, col;
        snprintf(p, sizeof p, "%slabelIds.png", pre);
        CHECK(sg_png_read_mask(p, &lid, NULL, 0) == 0);
        snprintf(p, sizeof p, "%scolor.png", pre);
        CHECK(sg_png_read_rgb(p, &col, NULL, 0) == 0);
        /* instanceIds: 16-bit, read raw with libpng */
        snprintf(p, sizeof p, "%sinstanceIds.png", pre);
        FILE *f = fopen(p, "rb");
        CHECK(f != NULL);
        if (!f || !lid.data || !col.data) return;
        png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, NULL, NULL, NULL);
        png_infop info = png_create_info_struct(png);
        png_init_io(png, f);
        png_read_png(png, info, PNG_TRANSFORM_IDENTITY, NULL);
        CHECK_EQ_INT(png_get_bit_depth(png, info), 16);
        CHECK_EQ_INT(png_get_color_type(png, info), PNG_COLOR_TYPE_GRAY);
        png_bytepp rows = png_get_rows(png, info);
        for (int y = 0; y < 40; y++)
            for (int x = 0; x < 56; x++) {
                int v = rows[y][2 * x] << 8 | rows[y][2 * x + 1];
                int l = lid.data[y * 56 + x];
                /* instance classes: labelId * 1000 + k; the rest: the labelId */
                CHECK_EQ_INT(v >= 1000 ? v / 1000 : v, l);
                if (v >= 1000) {
                    instances++;
                    CHECK(map[l] >= 11 && map[l] <= 18);
                }
                const uint8_t *c = col.data + 3 * (y * 56 + x);
                if (map[l] == 255) {
                    CHECK(c[0] == 0 && c[1] == 0 && c[2] == 0);
                } else {
                    CHECK(!memcmp(c, sg_cityscapes_palette() + 3 * map[l], 3));
                }
            }
        png_destroy_read_struct(&png, &info, NULL);
        fclose(f);
        static uint8_t painted[40 * 56];
        snprintf(p, sizeof p, "%spolygons.json", pre);
        int n_obj = paint_polygons(p, painted, 40, 56);
        CHECK(n_obj > 10);
        CHECK(memcmp(painted, lid.data, sizeof painted) == 0);
        sg_img_free(&lid);
        sg_img_free(&col);
    }
    CHECK(instances > 0);
}

static void test_voc_and_ade20k_layouts(void) {
    for (int l = 0; l < 2; l++) {
        int voc = l == 0;
        char out[1024];
        snprintf(out, sizeof out, "%s", dt_path(voc ? "voc" : "ade"));
        char *argv[] = {"synth",   "--out",  out,     "--layout",  voc ? "voc" : "ade20k",
                        "--train", "5",      "--val", "2",         "--size",
                        "33x45",   "--seed", "9",     "--classes", "6",
                        NULL};
        CHECK_EQ_INT(sg_cmd_synth(15, argv), 0);
        th_cap_begin(); /* a second run into the same root is refused */
        int rc = sg_cmd_synth(15, argv);
        CHECK_STR_CONTAINS(th_cap_end(), "already exists");
        CHECK_EQ_INT(rc, 1);
        sg_data_cfg c;
        memset(&c, 0, sizeof c);
        snprintf(c.format, sizeof c.format, "%s", voc ? "voc" : "ade20k");
        snprintf(c.root, sizeof c.root, "%s", out);
        snprintf(c.label_map, sizeof c.label_map, "none");
        snprintf(c.invalid_labels, sizeof c.invalid_labels, "error");
        c.ignore_index = 255;
        sg_dataset *tr = sg_dataset_open(&c, voc ? "train+aug" : "training", voc ? 21 : 150);
        sg_dataset *va = sg_dataset_open(&c, voc ? "val" : "validation", voc ? 21 : 150);
        CHECK(tr && va);
        if (!tr || !va) return;
        CHECK_EQ_INT(sg_dataset_size(tr), 5);
        CHECK_EQ_INT(sg_dataset_size(va), 2);
        if (voc) { /* odd training images have SegmentationClassAug masks only */
            CHECK_STR_CONTAINS(sg_dataset_mask_path(tr, 1), "SegmentationClassAug/2011_000001.png");
            CHECK_STR_CONTAINS(sg_dataset_mask_path(tr, 2), "SegmentationClass/2011_000002.png");
            sg_dataset *only = sg_dataset_open(&c, "train", 21);
            CHECK(only && sg_dataset_size(only) == 3);
            sg_dataset_close(only);
        }
        sg_synth_opts o;
        sg_synth_defaults(&o);
        o.h = 33;
        o.w = 45;
        o.seed = 9;
        o.classes = 6;
        uint8_t rgb[33 * 45 * 3], lid[33 * 45], map[256];
        sg_cityscapes_label_map(map, 255);
        for (int64_t i = 0; i < 5; i++) {
            sg_img im, m;
            char err[SG_DATA_ERR_LEN];
            CHECK_MSG(sg_dataset_load(tr, i, &im, &m, err, sizeof err) == 0, "%s", err);
            sg_img_format fmt;
            CHECK(sg_image_sniff(sg_dataset_image_path(tr, i), &fmt, NULL, 0) == 0 &&
                  fmt == SG_IMG_JPEG);
            sg_synth_render(&o, 0, (int)i, rgb, lid); /* both layouts: sorted = index order */
            int border = 0, labelled = 0;
            /* JPEG (q95, 4:2:0) of noisy texture: lossy, but the same picture
             * (mean error well below that against another picture) */
            static uint8_t other[33 * 45 * 3], olid[33 * 45];
            sg_synth_render(&o, 0, (int)i + 1, other, olid);
            double same = 0, diff = 0;
            for (int p = 0; p < 33 * 45 * 3; p++) {
                same += abs((int)im.data[p] - rgb[p]);
                diff += abs((int)im.data[p] - other[p]);
            }
            same /= 33 * 45 * 3;
            diff /= 33 * 45 * 3;
            CHECK_MSG(same < 12 && same < diff / 2,
                      "mean |error| %.2f, against another image "
                      "%.2f",
                      same, diff);
            for (int p = 0; p < 33 * 45; p++) {
                uint8_t t = map[lid[p]];
                if (m.data[p] == 255 && t != 255) {
                    CHECK(voc); /* VOC's object borders */
                    border++;
                    continue;
                }
                CHECK_EQ_INT(m.data[p], t);
                labelled += t != 255;
            }
            CHECK(labelled > 33 * 45 / 2);
            if (voc) CHECK(border > 0 && border < 33 * 45 / 3);
            sg_img_free(&im);
            sg_img_free(&m);
        }
        sg_dataset_close(tr);
        sg_dataset_close(va);
    }
}

static void test_cmd_usage_errors(void) {
    char *no_out[] = {"synth", "--train", "3", NULL};
    char *bad_size[] = {"synth", "--out", "x", "--size", "12", NULL};
    char *bad_int[] = {"synth", "--out", "x", "--train", "3a", NULL};
    char *bad_cls[] = {"synth", "--out", "x", "--classes", "40", NULL};
    char *unknown[] = {"synth", "--out", "x", "--bogus", "1", NULL};
    char *dangling[] = {"synth", "--out", NULL};
    char *bad_layout[] = {"synth", "--out", "x", "--layout", "coco", NULL};
    struct {
        char **argv;
        int argc;
        const char *msg;
    } cases[] = {{no_out, 3, "--out DIR is required"},
                 {bad_size, 5, "--size '12'"},
                 {bad_int, 5, "--train '3a'"},
                 {bad_cls, 5, "--classes '40'"},
                 {unknown, 5, "unknown option --bogus"},
                 {dangling, 2, "--out needs a value"},
                 {bad_layout, 5, "--layout 'coco': expected cityscapes, voc or ade20k"}};
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
        th_cap_begin();
        int rc = sg_cmd_synth(cases[k].argc, cases[k].argv);
        const char *out = th_cap_end();
        CHECK_EQ_INT(rc, 2);
        CHECK_STR_CONTAINS(out, cases[k].msg);
    }
}

int main(void) {
    TEST_RUN(test_render_deterministic);
    TEST_RUN(test_label_content);
    TEST_RUN(test_written_dataset_reads_back);
    TEST_RUN(test_cityscapes_gtfine_files);
    TEST_RUN(test_voc_and_ade20k_layouts);
    TEST_RUN(test_cmd_usage_errors);
    return TEST_EXIT();
}
