/* tests/data/test_png.c - every PNG kind read as image and as mask, the
 * writers round-trip, and bad files fail with the file named. */
#include "data_test.h"
#include "io/png.h"
#include "testutil.h"

#define W 5
#define H 3

/* Reference RGB pattern and per-kind writes. */
static uint8_t ref_rgb[H * W * 3];
static void init_ref(void) {
    for (int i = 0; i < H * W * 3; i++) ref_rgb[i] = (uint8_t)(i * 17 + 3);
}

static void test_rgb8_and_rgba8(void) {
    const char *p = dt_path("rgb8.png");
    CHECK(dt_write_png(p, W, H, PNG_COLOR_TYPE_RGB, 8, 0, ref_rgb, NULL, NULL, 0) == 0);
    sg_img im;
    char err[SG_DATA_ERR_LEN];
    CHECK(sg_png_read_rgb(p, &im, err, sizeof err) == 0);
    CHECK(im.h == H && im.w == W && im.c == 3);
    CHECK(memcmp(im.data, ref_rgb, sizeof ref_rgb) == 0);
    sg_img_free(&im);

    uint8_t rgba[H * W * 4];
    for (int i = 0; i < H * W; i++) {
        memcpy(rgba + 4 * i, ref_rgb + 3 * i, 3);
        rgba[4 * i + 3] = (uint8_t)(i * 40); /* alpha is dropped, not blended */
    }
    p = dt_path("rgba8.png");
    CHECK(dt_write_png(p, W, H, PNG_COLOR_TYPE_RGBA, 8, 0, rgba, NULL, NULL, 0) == 0);
    CHECK(sg_png_read_rgb(p, &im, err, sizeof err) == 0);
    CHECK(im.c == 3 && memcmp(im.data, ref_rgb, sizeof ref_rgb) == 0);
    sg_img_free(&im);
    /* A colour PNG is not a label mask. */
    CHECK(sg_png_read_mask(p, &im, err, sizeof err) == -1);
    CHECK_STR_CONTAINS(err, p);
    CHECK_STR_CONTAINS(err, "colour");
    CHECK(im.data == NULL);
}

static void test_gray_kinds(void) {
    uint8_t g[H * W], ga[H * W * 2];
    for (int i = 0; i < H * W; i++) {
        g[i] = (uint8_t)(i * 13);
        ga[2 * i] = g[i];
        ga[2 * i + 1] = 77;
    }
    const char *p = dt_path("gray8.png");
    CHECK(dt_write_png(p, W, H, PNG_COLOR_TYPE_GRAY, 8, 0, g, NULL, NULL, 0) == 0);
    sg_img im;
    char err[SG_DATA_ERR_LEN];
    CHECK(sg_png_read_rgb(p, &im, err, sizeof err) == 0);
    CHECK(im.c == 3);
    for (int i = 0; i < H * W; i++)
        CHECK(im.data[3 * i] == g[i] && im.data[3 * i + 1] == g[i] && im.data[3 * i + 2] == g[i]);
    sg_img_free(&im);
    CHECK(sg_png_read_mask(p, &im, err, sizeof err) == 0);
    CHECK(im.c == 1 && memcmp(im.data, g, sizeof g) == 0);
    sg_img_free(&im);

    p = dt_path("graya8.png");
    CHECK(dt_write_png(p, W, H, PNG_COLOR_TYPE_GRAY_ALPHA, 8, 0, ga, NULL, NULL, 0) == 0);
    CHECK(sg_png_read_rgb(p, &im, err, sizeof err) == 0);
    for (int i = 0; i < H * W; i++) CHECK(im.data[3 * i + 1] == g[i]);
    sg_img_free(&im);
    CHECK(sg_png_read_mask(p, &im, err, sizeof err) == 0); /* alpha dropped */
    CHECK(im.c == 1 && memcmp(im.data, g, sizeof g) == 0);
    sg_img_free(&im);

    /* 2-bit gray expands to 0, 85, 170, 255 as an image; a mask keeps 0..3. */
    uint8_t g2[H * W];
    for (int i = 0; i < H * W; i++) g2[i] = (uint8_t)(i % 4);
    p = dt_path("gray2.png");
    CHECK(dt_write_png(p, W, H, PNG_COLOR_TYPE_GRAY, 2, 0, g2, NULL, NULL, 0) == 0);
    CHECK(sg_png_read_rgb(p, &im, err, sizeof err) == 0);
    for (int i = 0; i < H * W; i++) CHECK_EQ_INT(im.data[3 * i], g2[i] * 85);
    sg_img_free(&im);
    CHECK(sg_png_read_mask(p, &im, err, sizeof err) == 0);
    CHECK(memcmp(im.data, g2, sizeof g2) == 0);
    sg_img_free(&im);
}

static void test_palette(void) {
    png_color pal[4] = {{10, 20, 30}, {40, 50, 60}, {70, 80, 90}, {200, 210, 220}};
    uint8_t idx[H * W];
    for (int i = 0; i < H * W; i++) idx[i] = (uint8_t)((i * 3) % 4);
    for (int depth = 2; depth <= 8; depth += 6) {
        const char *p = dt_path("pal%d.png", depth);
        CHECK(dt_write_png(p, W, H, PNG_COLOR_TYPE_PALETTE, depth, 0, idx, NULL, pal, 4) == 0);
        sg_img im;
        char err[SG_DATA_ERR_LEN];
        CHECK(sg_png_read_rgb(p, &im, err, sizeof err) == 0);
        for (int i = 0; i < H * W; i++) {
            CHECK(im.data[3 * i] == pal[idx[i]].red);
            CHECK(im.data[3 * i + 1] == pal[idx[i]].green);
            CHECK(im.data[3 * i + 2] == pal[idx[i]].blue);
        }
        sg_img_free(&im);
        /* As a mask, the palette index is the label (not the colour). */
        CHECK(sg_png_read_mask(p, &im, err, sizeof err) == 0);
        CHECK(im.c == 1 && memcmp(im.data, idx, sizeof idx) == 0);
        sg_img_free(&im);
    }
}

static void test_16bit(void) {
    uint16_t rgb16[H * W * 3];
    for (int i = 0; i < H * W * 3; i++) rgb16[i] = (uint16_t)(i * 4000 + 257);
    const char *p = dt_path("rgb16.png");
    CHECK(dt_write_png(p, W, H, PNG_COLOR_TYPE_RGB, 16, 0, NULL, rgb16, NULL, 0) == 0);
    sg_img im;
    char err[SG_DATA_ERR_LEN];
    CHECK(sg_png_read_rgb(p, &im, err, sizeof err) == 0);
    for (int i = 0; i < H * W * 3; i++) {
        /* png_set_scale_16: round(v * 255 / 65535) */
        int want = (int)((rgb16[i] * 255L + 32767) / 65535);
        CHECK_MSG(abs(im.data[i] - want) <= 0, "i=%d got %d want %d", i, im.data[i], want);
    }
    sg_img_free(&im);

    uint16_t m16[H * W];
    for (int i = 0; i < H * W; i++) m16[i] = (uint16_t)(i == 4 ? 255 : i);
    p = dt_path("mask16.png");
    CHECK(dt_write_png(p, W, H, PNG_COLOR_TYPE_GRAY, 16, 0, NULL, m16, NULL, 0) == 0);
    CHECK(sg_png_read_mask(p, &im, err, sizeof err) == 0);
    for (int i = 0; i < H * W; i++) CHECK_EQ_INT(im.data[i], m16[i]);
    sg_img_free(&im);

    m16[7] = 300; /* does not fit 8 bits: an error naming the file and pixel */
    p = dt_path("mask16_big.png");
    CHECK(dt_write_png(p, W, H, PNG_COLOR_TYPE_GRAY, 16, 0, NULL, m16, NULL, 0) == 0);
    CHECK(sg_png_read_mask(p, &im, err, sizeof err) == -1);
    CHECK_STR_CONTAINS(err, p);
    CHECK_STR_CONTAINS(err, "300");
    CHECK_STR_CONTAINS(err, "y=1, x=2");
}

static void test_interlaced(void) {
    enum { IH = 13, IW = 11 }; /* several Adam7 passes */
    uint8_t rgb[IH * IW * 3], g[IH * IW];
    for (int i = 0; i < IH * IW * 3; i++) rgb[i] = (uint8_t)(i * 5 + 1);
    for (int i = 0; i < IH * IW; i++) g[i] = (uint8_t)(i % 19);
    const char *p = dt_path("inter_rgb.png"), *q = dt_path("inter_gray.png");
    CHECK(dt_write_png(p, IW, IH, PNG_COLOR_TYPE_RGB, 8, 1, rgb, NULL, NULL, 0) == 0);
    CHECK(dt_write_png(q, IW, IH, PNG_COLOR_TYPE_GRAY, 8, 1, g, NULL, NULL, 0) == 0);
    sg_img im;
    char err[SG_DATA_ERR_LEN];
    CHECK(sg_png_read_rgb(p, &im, err, sizeof err) == 0);
    CHECK(im.h == IH && im.w == IW && memcmp(im.data, rgb, sizeof rgb) == 0);
    sg_img_free(&im);
    CHECK(sg_png_read_mask(q, &im, err, sizeof err) == 0);
    CHECK(memcmp(im.data, g, sizeof g) == 0);
    sg_img_free(&im);
    int h, w;
    CHECK(sg_png_read_size(p, &h, &w, err, sizeof err) == 0);
    CHECK(h == IH && w == IW);
}

static void test_writers_roundtrip(void) {
    char err[SG_DATA_ERR_LEN];
    sg_img im;
    const char *p = dt_path("w_rgb.png");
    CHECK(sg_png_write_rgb(p, ref_rgb, H, W, err, sizeof err) == 0);
    CHECK(sg_png_read_rgb(p, &im, err, sizeof err) == 0);
    CHECK(memcmp(im.data, ref_rgb, sizeof ref_rgb) == 0);
    sg_img_free(&im);

    uint8_t g[H * W];
    for (int i = 0; i < H * W; i++) g[i] = (uint8_t)(i == 0 ? 255 : i);
    p = dt_path("w_gray.png");
    CHECK(sg_png_write_gray(p, g, H, W, err, sizeof err) == 0);
    CHECK(sg_png_read_mask(p, &im, err, sizeof err) == 0);
    CHECK(memcmp(im.data, g, sizeof g) == 0);
    sg_img_free(&im);

    uint8_t pal[3 * 3] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
    uint8_t idx[H * W];
    for (int i = 0; i < H * W; i++) idx[i] = (uint8_t)(i % 3);
    idx[5] = 255; /* ignore in a prediction: beyond the palette, still valid PNG */
    p = dt_path("w_pal.png");
    CHECK(sg_png_write_palette(p, idx, H, W, pal, 3, err, sizeof err) == 0);
    CHECK(sg_png_read_mask(p, &im, err, sizeof err) == 0);
    CHECK(memcmp(im.data, idx, sizeof idx) == 0);
    sg_img_free(&im);
    CHECK(sg_png_read_rgb(p, &im, err, sizeof err) == 0);
    CHECK(im.data[3 * 1] == 4 && im.data[3 * 1 + 2] == 6); /* index 1 */
    CHECK(im.data[3 * 5] == 0 && im.data[3 * 5 + 1] == 0); /* index 255: black */
    sg_img_free(&im);

    /* Unwritable path: the error names it. */
    p = dt_path("no_such_dir/x.png");
    CHECK(sg_png_write_rgb(p, ref_rgb, H, W, err, sizeof err) == -1);
    CHECK_STR_CONTAINS(err, p);
}

static void test_bad_files(void) {
    char err[SG_DATA_ERR_LEN];
    sg_img im;
    const char *good = dt_path("good.png");
    CHECK(sg_png_write_rgb(good, ref_rgb, H, W, err, sizeof err) == 0);
    FILE *f = fopen(good, "rb");
    uint8_t buf[4096];
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    CHECK(n > 60);

    /* Truncated: header intact, data cut. */
    const char *trunc = dt_path("truncated.png");
    f = fopen(trunc, "wb");
    fwrite(buf, 1, n - 20, f);
    fclose(f);
    CHECK(sg_png_read_rgb(trunc, &im, err, sizeof err) == -1);
    CHECK_STR_CONTAINS(err, trunc);
    CHECK(im.data == NULL);

    /* Corrupt: bytes inside the IDAT flipped (CRC / zlib error). */
    const char *corrupt = dt_path("corrupt.png");
    for (size_t i = 45; i < n - 16; i++) buf[i] ^= 0x5A;
    f = fopen(corrupt, "wb");
    fwrite(buf, 1, n, f);
    fclose(f);
    CHECK(sg_png_read_rgb(corrupt, &im, err, sizeof err) == -1);
    CHECK_STR_CONTAINS(err, corrupt);
    CHECK_STR_CONTAINS(err, "corrupt");

    const char *text = dt_path("text.png");
    dt_write_text(text, "this is not a png at all");
    CHECK(sg_png_read_mask(text, &im, err, sizeof err) == -1);
    CHECK_STR_CONTAINS(err, text);
    CHECK_STR_CONTAINS(err, "not a PNG");

    const char *empty = dt_path("empty.png");
    dt_write_text(empty, "");
    CHECK(sg_png_read_rgb(empty, &im, err, sizeof err) == -1);
    CHECK_STR_CONTAINS(err, empty);

    const char *missing = dt_path("missing.png");
    CHECK(sg_png_read_rgb(missing, &im, err, sizeof err) == -1);
    CHECK_STR_CONTAINS(err, missing);
    CHECK_STR_CONTAINS(err, "No such file");
}

int main(void) {
    init_ref();
    TEST_RUN(test_rgb8_and_rgba8);
    TEST_RUN(test_gray_kinds);
    TEST_RUN(test_palette);
    TEST_RUN(test_16bit);
    TEST_RUN(test_interlaced);
    TEST_RUN(test_writers_roundtrip);
    TEST_RUN(test_bad_files);
    return TEST_EXIT();
}
