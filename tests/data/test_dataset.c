/* tests/data/test_dataset.c - the split index (Cityscapes tree, list files,
 * Pascal VOC, ADE20K), label maps, reduce_zero_label, classes, and every bad
 * input with the file named. */
#include "data/dataset.h"
#include "data_test.h"
#include "testutil.h"

static sg_data_cfg base_cfg(const char *root, const char *format) {
    sg_data_cfg c;
    memset(&c, 0, sizeof c);
    snprintf(c.format, sizeof c.format, "%s", format);
    snprintf(c.root, sizeof c.root, "%s", root);
    snprintf(c.label_map, sizeof c.label_map, "cityscapes");
    snprintf(c.invalid_labels, sizeof c.invalid_labels, "error");
    c.ignore_index = 255;
    return c;
}

enum { H = 4, W = 6 };

/* A Cityscapes tree: <root>/leftImg8bit/<split>/<city>/<name>_leftImg8bit.png
 * with masks of `kind` (labelIds / labelTrainIds) filled from `labels`. */
static void cs_sample(const char *root, const char *split, const char *city, const char *name,
                      const char *kind, const uint8_t *labels, uint8_t seed) {
    char dir[1024], p[1200];
    snprintf(dir, sizeof dir, "%s/leftImg8bit/%s/%s", root, split, city);
    dt_mkdirs(dir);
    snprintf(p, sizeof p, "%s/%s_leftImg8bit.png", dir, name);
    dt_rgb(p, H, W, seed);
    if (!kind) return;
    snprintf(dir, sizeof dir, "%s/gtFine/%s/%s", root, split, city);
    dt_mkdirs(dir);
    snprintf(p, sizeof p, "%s/%s_gtFine_%s.png", dir, name, kind);
    dt_gray(p, H, W, labels);
}

static uint8_t label_ids[H * W]; /* a mix of class and void labelIds */
static void init_labels(void) {
    const uint8_t ids[8] = {7, 8, 26, 33, 0, 1, 23, 11};
    for (int i = 0; i < H * W; i++) label_ids[i] = ids[i % 8];
}

static void test_cityscapes_label_ids(void) {
    char root[1024];
    snprintf(root, sizeof root, "%s", dt_path("cs1"));
    cs_sample(root, "train", "zurich", "zurich_000000_000002", "labelIds", label_ids, 1);
    cs_sample(root, "train", "aachen", "aachen_000000_000009", "labelIds", label_ids, 2);
    cs_sample(root, "train", "zurich", "zurich_000000_000001", "labelIds", label_ids, 3);
    cs_sample(root, "train", "aachen", "aachen_000000_000010", "labelIds", label_ids, 4);
    sg_data_cfg c = base_cfg(root, "cityscapes");
    sg_dataset *ds = sg_dataset_open(&c, "train", 19);
    CHECK(ds != NULL);
    CHECK_EQ_INT(sg_dataset_size(ds), 4);
    /* sorted by relative path, whatever readdir's order */
    CHECK(!strcmp(sg_dataset_rel_path(ds, 0),
                  "leftImg8bit/train/aachen/aachen_000000_000009_leftImg8bit.png"));
    CHECK(!strcmp(sg_dataset_rel_path(ds, 1),
                  "leftImg8bit/train/aachen/aachen_000000_000010_leftImg8bit.png"));
    CHECK(!strcmp(sg_dataset_rel_path(ds, 3),
                  "leftImg8bit/train/zurich/zurich_000000_000002_leftImg8bit.png"));
    CHECK_STR_CONTAINS(sg_dataset_mask_path(ds, 3),
                       "/gtFine/train/zurich/zurich_000000_000002_gtFine_labelIds.png");
    CHECK_STR_CONTAINS(sg_dataset_image_path(ds, 0), root);
    /* classes and palette: Cityscapes' */
    CHECK(!strcmp(sg_dataset_class_name(ds, 0), "road"));
    CHECK(!strcmp(sg_dataset_class_name(ds, 18), "bicycle"));
    CHECK(sg_dataset_class_name(ds, 19) == NULL);
    const uint8_t *pal = sg_dataset_palette(ds);
    CHECK(pal[0] == 128 && pal[1] == 64 && pal[2] == 128);
    CHECK(pal[13 * 3 + 2] == 142); /* car 0,0,142 */
    /* the label map: labelId -> trainId, voids -> 255 */
    sg_img im, m;
    char err[SG_DATA_ERR_LEN];
    CHECK(sg_dataset_load(ds, 2, &im, &m, err, sizeof err) == 0);
    CHECK(im.h == H && im.w == W && im.c == 3 && m.c == 1);
    const uint8_t want[8] = {0, 1, 13, 18, 255, 255, 10, 2};
    for (int i = 0; i < H * W; i++) CHECK_EQ_INT(m.data[i], want[i % 8]);
    sg_img_free(&im);
    sg_img_free(&m);
    /* the whole table */
    uint8_t map[256];
    sg_cityscapes_label_map(map, 255);
    int n_classes = 0;
    for (int i = 0; i < 256; i++) {
        if (map[i] != 255) {
            CHECK_EQ_INT(sg_cityscapes_label_id(map[i]), i);
            n_classes++;
        }
    }
    CHECK_EQ_INT(n_classes, 19);
    CHECK(map[7] == 0 && map[24] == 11 && map[31] == 16 && map[29] == 255 && map[30] == 255);
    sg_dataset_close(ds);

    /* data.label_map: none keeps labelIds; with 34 classes they are valid. */
    snprintf(c.label_map, sizeof c.label_map, "none");
    ds = sg_dataset_open(&c, "train", 34);
    CHECK(ds != NULL);
    CHECK(sg_dataset_load(ds, 0, &im, &m, err, sizeof err) == 0);
    CHECK(memcmp(m.data, label_ids, sizeof label_ids) == 0);
    CHECK(!strcmp(sg_dataset_class_name(ds, 33), "class_33"));
    uint8_t rgb[3];
    sg_generated_color(1, rgb);
    CHECK(rgb[0] == 128 && rgb[1] == 0 && rgb[2] == 0); /* VOC: class 1 is 128,0,0 */
    sg_generated_color(5, rgb);
    CHECK(rgb[0] == 128 && rgb[1] == 0 && rgb[2] == 128);
    CHECK(memcmp(sg_dataset_palette(ds) + 3 * 5, rgb, 3) == 0);
    sg_img_free(&im);
    sg_img_free(&m);
    sg_dataset_close(ds);
}

static void test_cityscapes_train_ids_preferred(void) {
    char root[1024];
    snprintf(root, sizeof root, "%s", dt_path("cs2"));
    uint8_t tid[H * W];
    for (int i = 0; i < H * W; i++) tid[i] = (uint8_t)(i % 5 == 0 ? 255 : i % 19);
    cs_sample(root, "val", "bonn", "bonn_000000_000000", "labelTrainIds", tid, 1);
    cs_sample(root, "val", "bonn", "bonn_000000_000000", "labelIds", label_ids, 1);
    sg_data_cfg c = base_cfg(root, "cityscapes");
    sg_dataset *ds = sg_dataset_open(&c, "val", 19);
    CHECK(ds != NULL);
    CHECK_STR_CONTAINS(sg_dataset_mask_path(ds, 0), "_gtFine_labelTrainIds.png");
    sg_img im, m;
    char err[SG_DATA_ERR_LEN];
    CHECK(sg_dataset_load(ds, 0, &im, &m, err, sizeof err) == 0);
    CHECK(memcmp(m.data, tid, sizeof tid) == 0); /* not mapped again */
    sg_img_free(&im);
    sg_img_free(&m);
    sg_dataset_close(ds);
}

static void test_list_format(void) {
    char root[1024];
    snprintf(root, sizeof root, "%s", dt_path("list1"));
    dt_mkdirs(dt_path("list1/img"));
    dt_mkdirs(dt_path("list1/ann"));
    uint8_t lab[H * W];
    for (int i = 0; i < H * W; i++) lab[i] = (uint8_t)(i % 3);
    const char *names[3] = {"c", "a", "b"};
    for (int k = 0; k < 3; k++) {
        dt_rgb(dt_path("list1/img/%s.png", names[k]), H, W, (uint8_t)k);
        dt_gray(dt_path("list1/ann/%s.png", names[k]), H, W, lab);
    }
    dt_write_text(
        dt_path("list1/train.txt"),
        "# image mask\n\nimg/c.png ann/c.png\n  img/a.png\tann/a.png  \r\nimg/b.png ann/b.png\n");
    sg_data_cfg c = base_cfg(root, "list");
    snprintf(c.label_map, sizeof c.label_map, "none");
    c.n_class_names = 3;
    snprintf(c.class_names[0], SG_NAME, "bg");
    snprintf(c.class_names[1], SG_NAME, "cat");
    snprintf(c.class_names[2], SG_NAME, "dog");
    c.n_palette = 9;
    for (int i = 0; i < 9; i++) c.palette[i] = i * 10;
    sg_dataset *ds = sg_dataset_open(&c, "train.txt", 3);
    CHECK(ds != NULL);
    CHECK_EQ_INT(sg_dataset_size(ds), 3);
    CHECK(!strcmp(sg_dataset_rel_path(ds, 0), "img/a.png"));
    CHECK(!strcmp(sg_dataset_rel_path(ds, 2), "img/c.png"));
    CHECK_STR_CONTAINS(sg_dataset_mask_path(ds, 1), "list1/ann/b.png");
    CHECK(!strcmp(sg_dataset_class_name(ds, 2), "dog"));
    CHECK(sg_dataset_palette(ds)[8] == 80);
    sg_img im, m;
    char err[SG_DATA_ERR_LEN];
    CHECK(sg_dataset_load(ds, 1, &im, &m, err, sizeof err) == 0);
    CHECK(memcmp(m.data, lab, sizeof lab) == 0);
    sg_img_free(&im);
    sg_img_free(&m);
    sg_dataset_close(ds);

    /* An absolute list path works too; a wrong palette length is an error. */
    char abs_list[1024];
    snprintf(abs_list, sizeof abs_list, "%s", dt_path("list1/train.txt"));
    c.n_palette = 0;
    ds = sg_dataset_open(&c, abs_list, 3);
    CHECK(ds != NULL);
    sg_dataset_close(ds);
    c.n_palette = 6;
    th_cap_begin();
    ds = sg_dataset_open(&c, "train.txt", 3);
    const char *out = th_cap_end();
    CHECK(ds == NULL);
    CHECK_STR_CONTAINS(out, "data.palette");
}

static void test_bad_index(void) {
    sg_data_cfg c = base_cfg(dt_path("does_not_exist"), "cityscapes");
    th_cap_begin();
    sg_dataset *ds = sg_dataset_open(&c, "train", 19);
    const char *out = th_cap_end();
    CHECK(ds == NULL);
    CHECK_STR_CONTAINS(out, "data.root");
    CHECK_STR_CONTAINS(out, "does_not_exist");

    /* root exists, split missing */
    char root[1024];
    snprintf(root, sizeof root, "%s", dt_path("cs3"));
    cs_sample(root, "train", "ulm", "ulm_000000_000000", "labelIds", label_ids, 1);
    c = base_cfg(root, "cityscapes");
    th_cap_begin();
    ds = sg_dataset_open(&c, "val", 19);
    out = th_cap_end();
    CHECK(ds == NULL);
    CHECK_STR_CONTAINS(out, "leftImg8bit/val");

    /* empty split: the directory exists but holds no images */
    dt_mkdirs(dt_path("cs3/leftImg8bit/test/ulm"));
    dt_write_text(dt_path("cs3/leftImg8bit/test/ulm/readme.txt"), "x");
    th_cap_begin();
    ds = sg_dataset_open(&c, "test", 19);
    out = th_cap_end();
    CHECK(ds == NULL);
    CHECK_STR_CONTAINS(out, "empty");
    CHECK_STR_CONTAINS(out, "cs3/leftImg8bit/test");

    /* missing masks: counted, with examples */
    for (int i = 1; i <= 5; i++) {
        char name[64];
        snprintf(name, sizeof name, "ulm_000000_%06d", i);
        cs_sample(root, "train", "ulm", name, i <= 2 ? "labelIds" : NULL, label_ids, 1);
    }
    th_cap_begin();
    ds = sg_dataset_open(&c, "train", 19);
    out = th_cap_end();
    CHECK(ds == NULL);
    CHECK_STR_CONTAINS(out, "3 of 6 images have no mask");
    CHECK_STR_CONTAINS(out, "ulm_000000_000003_gtFine_labelIds.png");

    /* list: malformed line names file:line; missing mask; duplicate */
    char lroot[1024];
    snprintf(lroot, sizeof lroot, "%s", dt_path("list2"));
    dt_mkdirs(lroot);
    dt_rgb(dt_path("list2/a.png"), H, W, 1);
    dt_gray(dt_path("list2/a_m.png"), H, W, label_ids);
    dt_write_text(dt_path("list2/bad.txt"), "a.png a_m.png\na.png\n");
    c = base_cfg(lroot, "list");
    th_cap_begin();
    ds = sg_dataset_open(&c, "bad.txt", 19);
    out = th_cap_end();
    CHECK(ds == NULL);
    CHECK_STR_CONTAINS(out, "bad.txt:2");
    dt_write_text(dt_path("list2/miss.txt"), "a.png a_m.png\nb.png b_m.png\n");
    dt_rgb(dt_path("list2/b.png"), H, W, 1);
    th_cap_begin();
    ds = sg_dataset_open(&c, "miss.txt", 19);
    out = th_cap_end();
    CHECK(ds == NULL);
    CHECK_STR_CONTAINS(out, "0 of 2 images and 1 of 2 masks are missing");
    CHECK_STR_CONTAINS(out, "miss.txt:2");
    CHECK_STR_CONTAINS(out, "b_m.png");
    dt_write_text(dt_path("list2/dup.txt"), "a.png a_m.png\n# c\na.png a_m.png\n");
    th_cap_begin();
    ds = sg_dataset_open(&c, "dup.txt", 19);
    out = th_cap_end();
    CHECK(ds == NULL);
    CHECK_STR_CONTAINS(out, "listed twice (lines 1 and 3)");
    dt_write_text(dt_path("list2/empty.txt"), "# nothing\n\n");
    th_cap_begin();
    ds = sg_dataset_open(&c, "empty.txt", 19);
    out = th_cap_end();
    CHECK(ds == NULL);
    CHECK_STR_CONTAINS(out, "empty");
    th_cap_begin();
    ds = sg_dataset_open(&c, "nolist.txt", 19);
    out = th_cap_end();
    CHECK(ds == NULL);
    CHECK_STR_CONTAINS(out, "cannot open list file");
    CHECK_STR_CONTAINS(out, "nolist.txt");
    /* the line limit (data/list_file.h): 8190 characters and the newline
     * are read as a line (here one field, refused as such); 8191 are
     * refused as too long, naming file:line */
    static char longl[8300];
    for (int extra = 0; extra <= 1; extra++) {
        int n = snprintf(longl, sizeof longl, "a.png a_m.png\n");
        memset(longl + n, 'x', (size_t)(8190 + extra));
        snprintf(longl + n + 8190 + extra, sizeof longl - (size_t)(n + 8190 + extra), "\n");
        dt_write_text(dt_path("list2/long.txt"), longl);
        th_cap_begin();
        ds = sg_dataset_open(&c, "long.txt", 19);
        out = th_cap_end();
        CHECK(ds == NULL);
        CHECK_STR_CONTAINS(out, extra ? "long.txt:2: line longer than 8190 characters"
                                      : "long.txt:2: expected 'image_path mask_path'");
    }
    /* a NUL byte is refused, naming file:line (it hid the rest of a long
     * line from the limit once: two lines were read from one) */
    static const char nul[] = "a.png a_m.png\nb\0c.png b_m.png\n";
    FILE *nf = fopen(dt_path("list2/nul.txt"), "wb");
    CHECK(nf && fwrite(nul, 1, sizeof nul - 1, nf) == sizeof nul - 1 && fclose(nf) == 0);
    th_cap_begin();
    ds = sg_dataset_open(&c, "nul.txt", 19);
    out = th_cap_end();
    CHECK(ds == NULL);
    CHECK_STR_CONTAINS(out, "nul.txt:2: a NUL byte");

    /* options: ignore_index must not be a class; num_classes fits 8 bits */
    c.ignore_index = 5;
    th_cap_begin();
    ds = sg_dataset_open(&c, "dup.txt", 19);
    out = th_cap_end();
    CHECK(ds == NULL);
    CHECK_STR_CONTAINS(out, "data.ignore_index");
}

static void test_bad_samples(void) {
    char root[1024];
    snprintf(root, sizeof root, "%s", dt_path("list3"));
    dt_mkdirs(root);
    uint8_t lab[H * W];
    for (int i = 0; i < H * W; i++) lab[i] = (uint8_t)(i % 4);
    lab[7] = 9; /* invalid for 4 classes */
    lab[11] = 9;
    lab[3] = 255; /* ignore: valid */
    dt_rgb(dt_path("list3/ok.png"), H, W, 1);
    dt_gray(dt_path("list3/ok_m.png"), H, W, lab);
    dt_rgb(dt_path("list3/big.png"), H + 1, W, 1);
    dt_gray(dt_path("list3/big_m.png"), H, W, lab);
    dt_write_text(dt_path("list3/corrupt.png"), "\x89PNG\r\n\x1a\n garbage garbage garbage");
    dt_gray(dt_path("list3/corrupt_m.png"), H, W, lab);
    dt_write_text(dt_path("list3/l.txt"),
                  "ok.png ok_m.png\nbig.png big_m.png\ncorrupt.png corrupt_m.png\n");
    sg_data_cfg c = base_cfg(root, "list");
    snprintf(c.label_map, sizeof c.label_map, "none");
    sg_dataset *ds = sg_dataset_open(&c, "l.txt", 4);
    CHECK(ds != NULL);
    CHECK(!strcmp(sg_dataset_rel_path(ds, 0), "big.png"));
    sg_img im, m;
    char err[SG_DATA_ERR_LEN];
    /* size mismatch: both files named */
    CHECK(sg_dataset_load(ds, 0, &im, &m, err, sizeof err) == -1);
    CHECK_STR_CONTAINS(err, "big_m.png");
    CHECK_STR_CONTAINS(err, "big.png is 5x6");
    CHECK(im.data == NULL && m.data == NULL);
    /* corrupt image */
    CHECK(sg_dataset_load(ds, 1, &im, &m, err, sizeof err) == -1);
    CHECK_STR_CONTAINS(err, "corrupt.png");
    /* invalid labels: an error naming the mask, value and first pixel */
    CHECK(sg_dataset_load(ds, 2, &im, &m, err, sizeof err) == -1);
    CHECK_STR_CONTAINS(err, "ok_m.png");
    CHECK_STR_CONTAINS(err, "2 pixels");
    CHECK_STR_CONTAINS(err, "(y=1, x=1)");
    CHECK_STR_CONTAINS(err, "data.invalid_labels");
    sg_dataset_close(ds);
    /* ... or ignored on request */
    snprintf(c.invalid_labels, sizeof c.invalid_labels, "ignore");
    ds = sg_dataset_open(&c, "l.txt", 4);
    CHECK(ds != NULL);
    CHECK(sg_dataset_load(ds, 2, &im, &m, err, sizeof err) == 0);
    for (int i = 0; i < H * W; i++) CHECK_EQ_INT(m.data[i], (i == 7 || i == 11) ? 255 : lab[i]);
    sg_img_free(&im);
    sg_img_free(&m);
    /* err == NULL: the message goes to the log instead */
    th_cap_begin();
    int rc = sg_dataset_load(ds, 0, &im, &m, NULL, 0);
    const char *out = th_cap_end();
    CHECK(rc == -1);
    CHECK_STR_CONTAINS(out, "big_m.png");
    sg_dataset_close(ds);
}

/* ---- Pascal VOC and ADE20K ---- */

/* VOC: JPEGImages/<n>.jpg (a PNG here: images are read by content),
 * SegmentationClass or SegmentationClassAug masks, split files. */
static void voc_sample(const char *root, const char *name, const char *mask_dir,
                       const uint8_t *labels) {
    char p[1200];
    snprintf(p, sizeof p, "%s/JPEGImages", root);
    dt_mkdirs(p);
    snprintf(p, sizeof p, "%s/JPEGImages/%s.jpg", root, name);
    dt_rgb(p, H, W, 3);
    if (!mask_dir) return;
    snprintf(p, sizeof p, "%s/%s", root, mask_dir);
    dt_mkdirs(p);
    snprintf(p, sizeof p, "%s/%s/%s.png", root, mask_dir, name);
    dt_gray(p, H, W, labels);
}

static void test_voc(void) {
    char root[1024];
    snprintf(root, sizeof root, "%s", dt_path("voc"));
    uint8_t lab[H * W];
    for (int i = 0; i < H * W; i++) lab[i] = (uint8_t)(i % 5 == 4 ? 255 : i % 21);
    voc_sample(root, "2007_000032", "SegmentationClass", lab);
    voc_sample(root, "2007_000039", "SegmentationClass", lab);
    voc_sample(root, "2008_000002", "SegmentationClassAug", lab); /* SBD only */
    voc_sample(root, "2009_000001", "SegmentationClass", lab);
    dt_mkdirs(dt_path("voc/ImageSets/Segmentation"));
    dt_write_text(dt_path("voc/ImageSets/Segmentation/train.txt"), "2007_000039\n2007_000032\n\n");
    dt_write_text(dt_path("voc/ImageSets/Segmentation/aug.txt"), "2008_000002\n2007_000032\n");
    dt_write_text(dt_path("voc/ImageSets/Segmentation/val.txt"), "2009_000001\n");
    sg_data_cfg c = base_cfg(root, "voc");
    snprintf(c.label_map, sizeof c.label_map, "none");
    c.ignore_index = 254; /* 255 (borders) maps to it */
    sg_dataset *ds = sg_dataset_open(&c, "train+aug", 21);
    CHECK(ds != NULL);
    if (!ds) return;
    CHECK_EQ_INT(sg_dataset_size(ds), 3); /* 2007_000032 listed in both: once */
    CHECK(strcmp(sg_dataset_rel_path(ds, 0), "JPEGImages/2007_000032.jpg") == 0);
    CHECK_STR_CONTAINS(sg_dataset_mask_path(ds, 0), "SegmentationClass/2007_000032.png");
    CHECK_STR_CONTAINS(sg_dataset_mask_path(ds, 2), "SegmentationClassAug/2008_000002.png");
    CHECK(strcmp(sg_dataset_class_name(ds, 0), "background") == 0);
    CHECK(strcmp(sg_dataset_class_name(ds, 20), "tvmonitor") == 0);
    const uint8_t *pal = sg_dataset_palette(ds);
    CHECK(pal[3 * 1] == 128 && pal[3 * 1 + 1] == 0 && pal[3 * 1 + 2] == 0);        /* aeroplane */
    CHECK(pal[3 * 15] == 192 && pal[3 * 15 + 1] == 128 && pal[3 * 15 + 2] == 128); /* person */
    sg_img im, m;
    CHECK(sg_dataset_load(ds, 2, &im, &m, NULL, 0) == SG_OK);
    for (int i = 0; i < H * W; i++) CHECK_EQ_INT(m.data[i], lab[i] == 255 ? 254 : lab[i]);
    sg_img_free(&im);
    sg_img_free(&m);
    sg_dataset_close(ds);
    ds = sg_dataset_open(&c, "val", 21);
    CHECK(ds && sg_dataset_size(ds) == 1);
    sg_dataset_close(ds);

    /* errors: a missing split file, a bad line, a line too long, a name
     * twice in one file, missing image and mask, a Cityscapes label map */
    static char longl[8300]; /* a name of 8191 characters: past the line limit */
    memset(longl, 'x', 8191);
    snprintf(longl + 8191, sizeof longl - 8191, "\n");
    struct {
        const char *split, *list, *msg1, *msg2;
    } bad[] = {
        {"trainval", NULL, "ImageSets/Segmentation/trainval.txt", "train+aug"},
        {"bad", "2007_000032 1\n", "bad.txt:1", "one image name per line"},
        {"long", longl, "long.txt:1", "line longer than 8190 characters"},
        {"twice", "2007_000032\n2009_000001\n2007_000032\n", "listed twice", "lines 1 and 3"},
        {"missing", "2007_000032\nnope_1\nnope_2\n", "2 of 3 images and 2 masks",
         "nope_1.png (nor in SegmentationClassAug/)"}};
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        if (bad[k].list)
            dt_write_text(dt_path("voc/ImageSets/Segmentation/%s.txt", bad[k].split), bad[k].list);
        th_cap_begin();
        ds = sg_dataset_open(&c, bad[k].split, 21);
        const char *out = th_cap_end();
        CHECK(ds == NULL);
        CHECK_STR_CONTAINS(out, bad[k].msg1);
        CHECK_STR_CONTAINS(out, bad[k].msg2);
        sg_dataset_close(ds);
    }
    snprintf(c.label_map, sizeof c.label_map, "cityscapes");
    th_cap_begin();
    ds = sg_dataset_open(&c, "val", 21);
    const char *out = th_cap_end();
    CHECK(ds == NULL);
    CHECK_STR_CONTAINS(out, "data.label_map: none");
    sg_data_cfg nr = base_cfg(dt_path("cs1"), "voc");
    snprintf(nr.label_map, sizeof nr.label_map, "none");
    th_cap_begin();
    ds = sg_dataset_open(&nr, "val", 21);
    out = th_cap_end();
    CHECK(ds == NULL);
    CHECK_STR_CONTAINS(out, "no JPEGImages/");
}

static void test_ade20k_reduce_zero_label(void) {
    uint8_t lab[H * W];
    for (int i = 0; i < H * W; i++) lab[i] = (uint8_t)(i < 4 ? i : i == 5 ? 150 : i == 6 ? 255 : 7);
    dt_mkdirs(dt_path("ade/images/training"));
    dt_mkdirs(dt_path("ade/annotations/training"));
    const char *names[3] = {"ADE_train_00000002", "ADE_train_00000001", "ADE_train_00000003"};
    for (int k = 0; k < 3; k++) {
        dt_rgb(dt_path("ade/images/training/%s.jpg", names[k]), H, W, (uint8_t)k);
        dt_gray(dt_path("ade/annotations/training/%s.png", names[k]), H, W, lab);
    }
    dt_write_text(dt_path("ade/images/training/.DS_Store"), "x"); /* not an image name */
    sg_data_cfg c = base_cfg(dt_path("ade"), "ade20k");
    snprintf(c.label_map, sizeof c.label_map, "none");
    sg_dataset *ds = sg_dataset_open(&c, "training", 150); /* reduce_zero_label "" = auto */
    CHECK(ds != NULL);
    if (!ds) return;
    CHECK_EQ_INT(sg_dataset_size(ds), 3);
    CHECK(strcmp(sg_dataset_rel_path(ds, 0), "images/training/ADE_train_00000001.jpg") == 0);
    CHECK_STR_CONTAINS(sg_dataset_mask_path(ds, 0), "annotations/training/ADE_train_00000001.png");
    CHECK(strcmp(sg_dataset_class_name(ds, 0), "wall") == 0);
    CHECK(strcmp(sg_dataset_class_name(ds, 149), "flag") == 0);
    const uint8_t *pal = sg_dataset_palette(ds);
    CHECK(pal[0] == 120 && pal[1] == 120 && pal[2] == 120 && pal[3 * 149] == 92 &&
          pal[3 * 149 + 2] == 255);
    const uint8_t *map = sg_dataset_label_map(ds);
    CHECK(map[0] == 255 && map[1] == 0 && map[150] == 149 && map[255] == 255);
    sg_img im, m;
    CHECK(sg_dataset_load(ds, 0, &im, &m, NULL, 0) == SG_OK);
    for (int i = 0; i < H * W; i++) {
        int want = lab[i] == 0 || lab[i] == 255 ? 255 : lab[i] - 1;
        CHECK_EQ_INT(m.data[i], want);
    }
    sg_img_free(&im);
    sg_img_free(&m);
    sg_dataset_close(ds);

    /* reduce_zero_label: false keeps the raw values; then 150 is invalid */
    snprintf(c.reduce_zero_label, sizeof c.reduce_zero_label, "false");
    ds = sg_dataset_open(&c, "training", 150);
    CHECK(ds != NULL);
    char err[SG_DATA_ERR_LEN];
    CHECK(ds && sg_dataset_load(ds, 0, &im, &m, err, sizeof err) == SG_ERR_RUNTIME);
    CHECK_STR_CONTAINS(err, "file value 150");
    sg_dataset_close(ds);
    /* and true on a list dataset shifts too */
    dt_write_text(dt_path("ade/list.txt"), "images/training/ADE_train_00000001.jpg "
                                           "annotations/training/ADE_train_00000001.png\n");
    sg_data_cfg l = base_cfg(dt_path("ade"), "list");
    snprintf(l.label_map, sizeof l.label_map, "none");
    snprintf(l.reduce_zero_label, sizeof l.reduce_zero_label, "true");
    ds = sg_dataset_open(&l, "list.txt", 150);
    CHECK(ds && sg_dataset_label_map(ds)[0] == 255 && sg_dataset_label_map(ds)[7] == 6);
    sg_dataset_close(ds);
    /* it does not combine with the Cityscapes label map */
    snprintf(l.label_map, sizeof l.label_map, "cityscapes");
    th_cap_begin();
    ds = sg_dataset_open(&l, "list.txt", 19);
    const char *out = th_cap_end();
    CHECK(ds == NULL);
    CHECK_STR_CONTAINS(out, "data.reduce_zero_label");

    /* errors: a wrong split name, a missing annotation */
    th_cap_begin();
    ds = sg_dataset_open(&c, "train", 150);
    out = th_cap_end();
    CHECK(ds == NULL);
    CHECK_STR_CONTAINS(out, "images/train");
    CHECK_STR_CONTAINS(out, "training and validation");
    remove(dt_path("ade/annotations/training/ADE_train_00000003.png"));
    th_cap_begin();
    ds = sg_dataset_open(&c, "training", 150);
    out = th_cap_end();
    CHECK(ds == NULL);
    CHECK_STR_CONTAINS(out, "1 of 3 images have no annotation");
    CHECK_STR_CONTAINS(out, "ADE_train_00000003.png");
}

int main(void) {
    init_labels();
    TEST_RUN(test_cityscapes_label_ids);
    TEST_RUN(test_cityscapes_train_ids_preferred);
    TEST_RUN(test_list_format);
    TEST_RUN(test_bad_index);
    TEST_RUN(test_bad_samples);
    TEST_RUN(test_voc);
    TEST_RUN(test_ade20k_reduce_zero_label);
    return TEST_EXIT();
}
