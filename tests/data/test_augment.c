/* tests/data/test_augment.c - mmsegmentation's RandomCrop(cat_max_ratio) and
 * PhotoMetricDistortion: equal to mmseg 1.2.2's own transforms for forced
 * draws (tests/fixtures/data_aug_golden.h, written by make_aug_golden.py),
 * the draws pure and in mmseg's ranges, padding untouched, and the loader's
 * refusals of out-of-range settings. */
#include "core/config.h"
#include "data/loader.h"
#include "data/transforms.h"
#include "fixtures/data_aug_golden.h"
#include "testutil.h"

/* The fixture's hex digit pairs -> bytes. */
static void aug_hex(const char *hex, uint8_t *out, size_t n) {
    CHECK_MSG(strlen(hex) >= 2 * n, "fixture string holds %zu bytes, want %zu", strlen(hex) / 2, n);
    for (size_t i = 0; i < n; i++) {
        unsigned v;
        sscanf(hex + 2 * i, "%2x", &v);
        out[i] = (uint8_t)v;
    }
}

static sg_photo_draw photo_draw(int k) {
    const double *v = aug_photo_draws[k];
    sg_photo_draw p = {(int)v[0], (float)v[1], (int)v[2], (int)v[3], (float)v[4],
                       (int)v[5], (float)v[6], (int)v[7], (int)v[8]};
    return p;
}

/* How many of a's n bytes differ from b's; *far = the first that differs by
 * more than one grey level, or -1. */
static int near_count(const uint8_t *a, const uint8_t *b, size_t n, long *far) {
    int diff = 0;
    *far = -1;
    for (size_t i = 0; i < n; i++) {
        int d = abs((int)a[i] - (int)b[i]);
        if (d > 1 && *far < 0) *far = (long)i;
        diff += d != 0;
    }
    return diff;
}

static void test_photometric_equals_mmseg(void) {
    enum { N = AUG_PHOTO_H * AUG_PHOTO_W * 3 };
    uint8_t in[N], want[AUG_PHOTO_N * N], img[N];
    aug_hex(aug_photo_in, in, N);
    aug_hex(aug_photo_out, want, sizeof want);
    int differ = 0;
    for (int k = 0; k < AUG_PHOTO_N; k++) {
        sg_photo_draw p = photo_draw(k);
        memcpy(img, in, N);
        sg_photo_apply(&p, img, N / 3);
        CHECK_MSG(memcmp(img, in, N) != 0, "case %d changed nothing", k);
        const uint8_t *w = want + (size_t)k * N;
        long far;
        differ += near_count(img, w, N, &far);
        CHECK_MSG(far < 0, "case %d byte %ld: segtrain %d, mmseg %d", k, far, img[far], w[far]);
    }
    /* OpenCV's rounding differs only in its row tails: nearly all equal */
    CHECK_MSG(differ * 50 <= AUG_PHOTO_N * N, "%d of %d bytes differ by one", differ,
              AUG_PHOTO_N * N);
    printf("photometric: %d of %d bytes differ from mmseg's by one\n", differ, AUG_PHOTO_N * N);
}

static sg_aug_opts crop_opts(double ratio) {
    sg_aug_opts o = {.scale_lo = 1,
                     .scale_hi = 1,
                     .crop_h = AUG_CROP_H,
                     .crop_w = AUG_CROP_W,
                     .ignore_index = 255,
                     .cat_max_ratio = ratio};
    return o;
}

static void test_cat_max_ratio_equals_mmseg(void) {
    uint8_t mask[AUG_CROP_IMG_H * AUG_CROP_IMG_W];
    aug_hex(aug_crop_mask, mask, sizeof mask);
    int cols[AUG_CROP_W];
    for (int k = 0; k < AUG_CROP_N; k++) {
        sg_aug_opts o = crop_opts(aug_crop_cases[k].ratio);
        int i = sg_aug_pick_crop(&o, mask, AUG_CROP_IMG_H, AUG_CROP_IMG_W, AUG_CROP_IMG_H,
                                 AUG_CROP_IMG_W, aug_crop_cases[k].cand, cols);
        CHECK_MSG(i + 1 == aug_crop_cases[k].draws, "case %d: %d positions drawn, mmseg %d", k,
                  i + 1, aug_crop_cases[k].draws);
        CHECK_MSG(aug_crop_cases[k].cand[i][0] == aug_crop_cases[k].y &&
                      aug_crop_cases[k].cand[i][1] == aug_crop_cases[k].x,
                  "case %d: crop at %d,%d, mmseg's at %d,%d", k, aug_crop_cases[k].cand[i][0],
                  aug_crop_cases[k].cand[i][1], aug_crop_cases[k].y, aug_crop_cases[k].x);
    }
    /* no mask: the first position, whatever the ratio */
    sg_aug_opts o = crop_opts(0.5);
    CHECK_EQ_INT(sg_aug_pick_crop(&o, NULL, AUG_CROP_IMG_H, AUG_CROP_IMG_W, AUG_CROP_IMG_H,
                                  AUG_CROP_IMG_W, aug_crop_cases[1].cand, cols),
                 0);
}

/* RandomCrop -> RandomFlip -> PhotoMetricDistortion, through sg_aug_apply. */
static void test_pipeline_equals_mmseg(void) {
    enum { HW = AUG_PIPE_IMG_H * AUG_PIPE_IMG_W, C = AUG_PIPE_H * AUG_PIPE_W };
    uint8_t img[HW * 3], mask[HW], want_img[AUG_PIPE_N * C * 3], want_mask[AUG_PIPE_N * C];
    for (int i = 0; i < HW * 3; i++) img[i] = (uint8_t)(i * 37 % 251);
    aug_hex(aug_pipe_in_mask, mask, sizeof mask);
    aug_hex(aug_pipe_img, want_img, sizeof want_img);
    aug_hex(aug_pipe_mask, want_mask, sizeof want_mask);
    int cols[AUG_PIPE_W];
    for (int k = 0; k < AUG_PIPE_N; k++) {
        sg_aug_opts o = {.scale_lo = 1,
                         .scale_hi = 1,
                         .crop_h = AUG_PIPE_H,
                         .crop_w = AUG_PIPE_W,
                         .hflip = 1,
                         .ignore_index = 255,
                         .cat_max_ratio = aug_pipe_cases[k].ratio};
        o.photo = (sg_photo_opts){1, 32, 0.5, 1.5, 0.5, 1.5, 18};
        int i = sg_aug_pick_crop(&o, mask, AUG_PIPE_IMG_H, AUG_PIPE_IMG_W, AUG_PIPE_IMG_H,
                                 AUG_PIPE_IMG_W, aug_pipe_cases[k].cand, cols);
        CHECK_MSG(i > 0, "case %d: the first position passed (the case means to redraw)", k);
        sg_aug_draw d;
        memset(&d, 0, sizeof d);
        d.scale = 1;
        d.scaled_h = AUG_PIPE_IMG_H;
        d.scaled_w = AUG_PIPE_IMG_W;
        d.y0 = aug_pipe_cases[k].cand[i][0];
        d.x0 = aug_pipe_cases[k].cand[i][1];
        d.flip = aug_pipe_cases[k].flip;
        d.photo = photo_draw(aug_pipe_cases[k].photo);
        uint8_t oi[C * 3], om[C];
        CHECK(sg_aug_apply(&o, &d, img, mask, AUG_PIPE_IMG_H, AUG_PIPE_IMG_W, oi, om) == 0);
        CHECK_MSG(memcmp(om, want_mask + (size_t)k * C, C) == 0, "case %d: mask differs", k);
        const uint8_t *w = want_img + (size_t)k * C * 3;
        long far;
        int differ = near_count(oi, w, C * 3, &far);
        CHECK_MSG(far < 0, "case %d byte %ld: segtrain %d, mmseg %d", k, far, oi[far], w[far]);
        CHECK_MSG(differ * 50 <= C * 3, "case %d: %d bytes differ by one", k, differ);
        printf("pipeline case %d: %d of %d bytes differ from mmseg's by one\n", k, differ, C * 3);
    }
}

/* The draws: pure in (seed, epoch, sample), in mmseg's ranges, each step
 * taken about half the time, and cat_max_ratio's crops pass its test. */
static void test_draws(void) {
    enum { H = 40, W = 50, S = 2000 };
    static uint8_t mask[H * W];
    for (int y = 0; y < H; y++) /* class 0 everywhere but a 10x10 block of 1 */
        for (int x = 0; x < W; x++) mask[y * W + x] = (uint8_t)(y >= 25 && y < 35 && x < 10);
    sg_aug_opts o = {.scale_lo = 0.5,
                     .scale_hi = 2.0,
                     .crop_h = 16,
                     .crop_w = 20,
                     .hflip = 1,
                     .ignore_index = 255,
                     .cat_max_ratio = 0.75};
    o.photo = (sg_photo_opts){1, 32, 0.5, 1.5, 0.5, 1.5, 18};
    int on[5] = {0}, lo_hue = 99, hi_hue = -99, redrawn = 0, passed = 0, passed_off = 0;
    int cols[20];
    for (int s = 0; s < S; s++) {
        sg_aug_draw a, b;
        CHECK(sg_aug_make_draw(&o, 7, 2, s, mask, H, W, &a) == 0);
        CHECK(sg_aug_make_draw(&o, 7, 2, s, mask, H, W, &b) == 0);
        CHECK(memcmp(&a, &b, sizeof a) == 0);
        const sg_photo_draw *p = &a.photo;
        on[0] += p->brightness;
        on[1] += p->contrast;
        on[2] += p->saturation;
        on[3] += p->hue;
        on[4] += p->contrast_first;
        CHECK(p->beta >= -32 && p->beta <= 32);
        CHECK(p->contrast_alpha >= 0.5f && p->contrast_alpha <= 1.5f);
        CHECK(p->saturation_alpha >= 0.5f && p->saturation_alpha <= 1.5f);
        if (p->hue_shift < lo_hue) lo_hue = p->hue_shift;
        if (p->hue_shift > hi_hue) hi_hue = p->hue_shift;
        redrawn += a.crop_draws > 1;
        int cand[SG_AUG_CROP_DRAWS][2] = {{a.y0, a.x0}};
        passed += sg_aug_pick_crop(&o, mask, H, W, a.scaled_h, a.scaled_w, cand, cols) == 0;
        /* the same sample without cat_max_ratio: its first position */
        sg_aug_opts off = o;
        off.cat_max_ratio = 1.0;
        CHECK(sg_aug_make_draw(&off, 7, 2, s, mask, H, W, &b) == 0);
        CHECK_EQ_INT(b.crop_draws, 1);
        CHECK(a.scale == b.scale && a.flip == b.flip);
        CHECK(memcmp(&a.photo, &b.photo, sizeof a.photo) == 0);
        if (a.crop_draws == 1) CHECK(a.y0 == b.y0 && a.x0 == b.x0);
        cand[0][0] = b.y0;
        cand[0][1] = b.x0;
        passed_off += sg_aug_pick_crop(&o, mask, H, W, b.scaled_h, b.scaled_w, cand, cols) == 0;
    }
    for (int i = 0; i < 5; i++)
        CHECK_MSG(on[i] > S * 0.45 && on[i] < S * 0.55, "step %d: %d", i, on[i]);
    CHECK_EQ_INT(lo_hue, -18); /* numpy's randint(-18, 18): 17 at most */
    CHECK_EQ_INT(hi_hue, 17);
    /* the 1-block is rare in a crop: cat_max_ratio redraws often and keeps
     * far more crops that hold both classes */
    CHECK_MSG(redrawn > S / 4, "%d of %d redrawn", redrawn, S);
    CHECK_MSG(passed > 2 * passed_off, "crops passing: %d with cat_max_ratio, %d without", passed,
              passed_off);
    printf("cat_max_ratio 0.75: %d of %d samples redrawn; crops passing %d (%d without)\n", redrawn,
           S, passed, passed_off);
    /* photometric off: no photometric draws */
    o.photo.enabled = 0;
    sg_aug_draw a;
    CHECK(sg_aug_make_draw(&o, 7, 2, 3, mask, H, W, &a) == 0);
    sg_photo_draw zero;
    memset(&zero, 0, sizeof zero);
    CHECK(memcmp(&a.photo, &zero, sizeof zero) == 0);
}

/* Photometric changes the image's pixels only: the padding (0) stays, on
 * the right, or on the left when flipped; the mask is untouched. */
static void test_padding_untouched(void) {
    enum { H = 6, W = 7, CH = 10, CW = 12 };
    uint8_t img[H * W * 3], mask[H * W], oi[CH * CW * 3], om[CH * CW], ref[CH * CW * 3],
        refm[CH * CW];
    for (int i = 0; i < H * W * 3; i++) img[i] = (uint8_t)(40 + i % 150);
    for (int i = 0; i < H * W; i++) mask[i] = (uint8_t)(i % 3);
    for (int flip = 0; flip <= 1; flip++) {
        sg_aug_opts o = {.scale_lo = 1,
                         .scale_hi = 1,
                         .crop_h = CH,
                         .crop_w = CW,
                         .hflip = 1,
                         .ignore_index = 255,
                         .cat_max_ratio = 1};
        sg_aug_draw d = {.scale = 1, .scaled_h = H, .scaled_w = W, .flip = flip};
        CHECK(sg_aug_apply(&o, &d, img, mask, H, W, ref, refm) == 0);
        o.photo = (sg_photo_opts){1, 32, 0.5, 1.5, 0.5, 1.5, 18};
        d.photo = (sg_photo_draw){1, 20.5f, 0, 1, 1.3f, 1, 0.7f, 1, 5};
        CHECK(sg_aug_apply(&o, &d, img, mask, H, W, oi, om) == 0);
        CHECK(memcmp(om, refm, sizeof om) == 0);
        for (int y = 0; y < CH; y++)
            for (int x = 0; x < CW; x++) {
                int pad = y >= H || (flip ? x < CW - W : x >= W);
                const uint8_t *p = oi + (y * CW + x) * 3, *r = ref + (y * CW + x) * 3;
                if (pad)
                    CHECK_MSG(!p[0] && !p[1] && !p[2], "flip %d (%d,%d) padding changed", flip, y,
                              x);
                else {
                    uint8_t q[3] = {r[0], r[1], r[2]};
                    sg_photo_apply(&d.photo, q, 1);
                    CHECK_MSG(!memcmp(p, q, 3), "flip %d (%d,%d)", flip, y, x);
                }
            }
    }
}

/* OpenCV's HSV: known values (cv2.cvtColor on these BGR pixels). */
static void test_hsv_known(void) {
    static const uint8_t rgb[][3] = {
        {255, 0, 0}, {0, 255, 0}, {0, 0, 255}, {128, 128, 128}, {250, 5, 130}};
    static const uint8_t hsv[][3] = {
        {0, 255, 255}, {60, 255, 255}, {120, 255, 255}, {0, 0, 128}, {165, 250, 250}};
    for (int i = 0; i < 5; i++) {
        uint8_t h[3], back[3];
        sg_rgb2hsv_u8(rgb[i], h);
        CHECK_MSG(!memcmp(h, hsv[i], 3), "%d: %d,%d,%d", i, h[0], h[1], h[2]);
        sg_hsv2rgb_u8(h, back);
        for (int k = 0; k < 3; k++) /* 8-bit HSV loses precision */
            CHECK_MSG(abs(back[k] - rgb[i][k]) <= 3, "%d: %d vs %d", i, back[k], rgb[i][k]);
    }
}

static void test_loader_refuses(void) {
    sg_loader_opts lo;
    memset(&lo, 0, sizeof lo);
    lo.train = 1;
    lo.batch_size = 1;
    lo.crop_h = lo.crop_w = 8;
    lo.scale_range[0] = lo.scale_range[1] = 1;
    lo.prefetch = 1;
    lo.ignore_index = 255;
    lo.cat_max_ratio = 0; /* an uninitialised ratio would redraw every crop 10 times */
    CHECK(sg_loader_create(NULL, &lo) == NULL);
    lo.cat_max_ratio = 1.5;
    CHECK(sg_loader_create(NULL, &lo) == NULL);
    lo.cat_max_ratio = 1;
    static const sg_photo_opts bad[] = {
        {1, -1, 0.5, 1.5, 0.5, 1.5, 18},  {1, 256, 0.5, 1.5, 0.5, 1.5, 18},
        {1, 32, 1.5, 0.5, 0.5, 1.5, 18},  {1, 32, -0.5, 1.5, 0.5, 1.5, 18},
        {1, 32, 0.5, 1.5, 0.5, 101, 18},  {1, 32, 0.5, 1.5, 2, 1, 18},
        {1, 32, 0.5, 1.5, 0.5, 1.5, 181}, {1, 32, 0.5, 1.5, 0.5, 1.5, -1},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        lo.photo = bad[i];
        CHECK_MSG(sg_loader_create(NULL, &lo) == NULL, "case %zu", i);
    }
}

/* The shipped mmseg recipes use both as mmseg's _base_/datasets do, and the
 * loader's options carry them (with PhotoMetricDistortion's defaults). */
static void test_shipped_configs(void) {
    static sg_config c; /* big: static */
    static const char *const files[] = {"cityscapes.yaml",
                                        "cityscapes-r101.yaml",
                                        "cityscapes-deeplabv3-r50v1c.yaml",
                                        "cityscapes-deeplabv3plus-r50v1c.yaml",
                                        "ade20k.yaml",
                                        "voc.yaml"};
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        char path[1024];
        snprintf(path, sizeof path, "%s/configs/%s", SG_SOURCE_ROOT, files[i]);
        sg_config_defaults(&c);
        CHECK_MSG(sg_config_load_file(&c, path) == SG_OK, "%s", path);
        CHECK_MSG(c.data.cat_max_ratio == 0.75 && c.data.photometric == 1, "%s", files[i]);
        sg_loader_opts o;
        sg_loader_opts_from_config(&o, &c.data, 1, 2, 0);
        CHECK(o.cat_max_ratio == 0.75 && o.photo.enabled == 1);
        CHECK(o.photo.brightness_delta == 32 && o.photo.hue_delta == 18);
        CHECK(o.photo.contrast_lo == 0.5 && o.photo.contrast_hi == 1.5);
        CHECK(o.photo.saturation_lo == 0.5 && o.photo.saturation_hi == 1.5);
    }
    /* defaults: both off, as mmseg's defaults */
    sg_config_defaults(&c);
    CHECK(c.data.cat_max_ratio == 1.0 && c.data.photometric == 0);
    CHECK(sg_config_validate(&c) == SG_OK);
    /* out of range: refused where the key is read, or by the validation */
    CHECK(sg_config_set(&c, "data.cat_max_ratio=0") != SG_OK);
    CHECK(sg_config_set(&c, "data.cat_max_ratio=1.5") != SG_OK);
    CHECK(sg_config_set(&c, "data.hue_delta=181") != SG_OK);
    CHECK(sg_config_set(&c, "data.contrast_range=[1.5, 0.5]") == SG_OK);
    CHECK(sg_config_validate(&c) != SG_OK);
    sg_config_defaults(&c);
    CHECK(sg_config_set(&c, "data.saturation_range=[2, 1]") == SG_OK);
    CHECK(sg_config_validate(&c) != SG_OK);
}

/* test_data_augment --dump-hsv FILE: writes sg_rgb2hsv_u8 of every RGB
 * colour (r, g, b in that nesting order) then sg_hsv2rgb_u8 of every HSV
 * value with H < 180, 3 bytes each, for test_aug_golden.sh to compare with
 * OpenCV's cvtColor. Returns 0, or 1 naming what failed. */
static int dump_hsv(const char *path) {
    FILE *f = fopen(path, "wb");
    if (!f) {
        perror(path);
        return 1;
    }
    uint8_t px[3], out[3];
    int ok = 1;
    for (int i = 0; i < 1 << 24 && ok; i++) {
        px[0] = (uint8_t)(i >> 16), px[1] = (uint8_t)(i >> 8), px[2] = (uint8_t)i;
        sg_rgb2hsv_u8(px, out);
        ok = fwrite(out, 3, 1, f) == 1;
    }
    for (int i = 0; i < 180 << 16 && ok; i++) {
        px[0] = (uint8_t)(i >> 16), px[1] = (uint8_t)(i >> 8), px[2] = (uint8_t)i;
        sg_hsv2rgb_u8(px, out);
        ok = fwrite(out, 3, 1, f) == 1;
    }
    if (fclose(f) != 0 || !ok) {
        fprintf(stderr, "test_data_augment: writing %s failed\n", path);
        return 1;
    }
    return 0;
}

int main(int argc, char **argv) {
    if (argc == 3 && !strcmp(argv[1], "--dump-hsv")) return dump_hsv(argv[2]);
    TEST_RUN(test_photometric_equals_mmseg);
    TEST_RUN(test_cat_max_ratio_equals_mmseg);
    TEST_RUN(test_pipeline_equals_mmseg);
    TEST_RUN(test_draws);
    TEST_RUN(test_padding_untouched);
    TEST_RUN(test_hsv_known);
    TEST_RUN(test_loader_refuses);
    TEST_RUN(test_shipped_configs);
    return TEST_EXIT();
}
