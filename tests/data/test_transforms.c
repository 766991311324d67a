/* tests/data/test_transforms.c - scale (bilinear image, nearest mask), crop
 * with padding, flip, and the draws' purity. */
#include "data/transforms.h"
#include "fixtures/data_resize_golden.h"
#include "testutil.h"

/* Independent float reference of half-pixel bilinear (OpenCV INTER_LINEAR). */
static double ref_bilinear(const uint8_t *src, int sh, int sw, int c, int k, int dh, int dw, int y,
                           int x) {
    double sy = (y + 0.5) * sh / dh - 0.5, sx = (x + 0.5) * sw / dw - 0.5;
    if (sy < 0) sy = 0;
    if (sx < 0) sx = 0;
    int y0 = (int)sy, x0 = (int)sx;
    if (y0 > sh - 1) y0 = sh - 1;
    if (x0 > sw - 1) x0 = sw - 1;
    double fy = sy - y0, fx = sx - x0;
    int y1 = y0 + 1 < sh ? y0 + 1 : y0, x1 = x0 + 1 < sw ? x0 + 1 : x0;
    if (y0 == sh - 1) fy = 0;
    if (x0 == sw - 1) fx = 0;
#define P(yy, xx) src[((size_t)(yy)*sw + (xx)) * c + k]
    return (1 - fy) * ((1 - fx) * P(y0, x0) + fx * P(y0, x1)) +
           fy * ((1 - fx) * P(y1, x0) + fx * P(y1, x1));
#undef P
}

static void test_bilinear_matches_reference(void) {
    enum { SH = 7, SW = 9, C = 3 };
    uint8_t src[SH * SW * C];
    for (int i = 0; i < SH * SW * C; i++) src[i] = (uint8_t)((i * 37) % 251);
    int sizes[][2] = {{14, 18}, {3, 4}, {10, 5}, {7, 9}, {1, 1}};
    for (int s = 0; s < 5; s++) {
        int dh = sizes[s][0], dw = sizes[s][1];
        uint8_t dst[14 * 18 * C];
        sg_resize_bilinear_u8(src, SH, SW, C, dst, dh, dw);
        for (int y = 0; y < dh; y++)
            for (int x = 0; x < dw; x++)
                for (int k = 0; k < C; k++) {
                    double r = ref_bilinear(src, SH, SW, C, k, dh, dw, y, x);
                    /* 11-bit fixed-point weights: within one grey level */
                    CHECK_MSG(fabs(dst[(y * dw + x) * C + k] - r) <= 1.0,
                              "size %dx%d (%d,%d,%d): %d vs %.3f", dh, dw, y, x, k,
                              dst[(y * dw + x) * C + k], r);
                }
    }
    /* Same size is the identity. */
    uint8_t same[SH * SW * C];
    sg_resize_bilinear_u8(src, SH, SW, C, same, SH, SW);
    CHECK(memcmp(same, src, sizeof src) == 0);
    /* Exact 2x upsampling of a 1x2 ramp 0,200: centres at 1/4 and 3/4. */
    uint8_t ramp[2] = {0, 200}, up[4];
    sg_resize_bilinear_u8(ramp, 1, 2, 1, up, 1, 4);
    CHECK(up[0] == 0 && up[1] == 50 && up[2] == 150 && up[3] == 200);
}

/* PyTorch's F.interpolate (bilinear, align_corners=False; nearest-exact),
 * golden values from tests/data/make_resize_golden.py. */
static void test_matches_pytorch(void) {
    uint8_t src[GOLD_SH * GOLD_SW * GOLD_C], dst[32 * 32 * GOLD_C];
    for (int i = 0; i < GOLD_SH * GOLD_SW * GOLD_C; i++) src[i] = (uint8_t)((i * 37) % 251);
    for (int k = 0; k < GOLD_NSIZES; k++) {
        int dh = gold_sizes[k][0], dw = gold_sizes[k][1];
        sg_resize_bilinear_u8(src, GOLD_SH, GOLD_SW, GOLD_C, dst, dh, dw);
        for (int i = 0; i < dh * dw * GOLD_C; i++) /* rounded to uint8, 11-bit weights */
            CHECK_MSG(fabs(dst[i] - gold_bilinear[k][i]) <= 0.5 + 1.0 / 256,
                      "size %dx%d i=%d: %d vs torch %.4f", dh, dw, i, dst[i], gold_bilinear[k][i]);
        sg_resize_nearest_u8(src, GOLD_SH, GOLD_SW, GOLD_C, dst, dh, dw);
        for (int i = 0; i < dh * dw * GOLD_C; i++)
            CHECK_MSG(dst[i] == gold_nearest[k][i], "nearest size %dx%d i=%d", dh, dw, i);
    }
}

static void test_nearest_is_subset(void) {
    enum { SH = 9, SW = 11 };
    uint8_t m[SH * SW];
    for (int i = 0; i < SH * SW; i++) m[i] = (uint8_t)(i % 5 == 0 ? 255 : (i * 7) % 4 + 10);
    int present[256] = {0};
    for (int i = 0; i < SH * SW; i++) present[m[i]] = 1;
    int sizes[][2] = {{20, 25}, {4, 5}, {13, 7}};
    for (int s = 0; s < 3; s++) {
        uint8_t d[20 * 25];
        sg_resize_nearest_u8(m, SH, SW, 1, d, sizes[s][0], sizes[s][1]);
        for (int i = 0; i < sizes[s][0] * sizes[s][1]; i++) CHECK(present[d[i]]);
    }
    /* 2x: every source pixel becomes a 2x2 block. */
    uint8_t d2[SH * 2 * SW * 2];
    sg_resize_nearest_u8(m, SH, SW, 1, d2, SH * 2, SW * 2);
    for (int y = 0; y < SH * 2; y++)
        for (int x = 0; x < SW * 2; x++) CHECK(d2[y * SW * 2 + x] == m[(y / 2) * SW + x / 2]);
}

static sg_aug_opts opts(double lo, double hi, int ch, int cw, int flip) {
    sg_aug_opts o = {.scale_lo = lo,
                     .scale_hi = hi,
                     .crop_h = ch,
                     .crop_w = cw,
                     .hflip = flip,
                     .ignore_index = 255,
                     .cat_max_ratio = 1.0};
    return o;
}

static void test_draws_pure_and_in_range(void) {
    sg_aug_opts o = opts(0.5, 2.0, 16, 24, 1);
    int flips = 0, n = 400;
    double smin = 9, smax = 0;
    for (int s = 0; s < n; s++) {
        sg_aug_draw a, b, c;
        CHECK(sg_aug_make_draw(&o, 42, 3, s, NULL, 30, 40, &a) == 0);
        CHECK(sg_aug_make_draw(&o, 42, 3, s, NULL, 30, 40, &b) == 0);
        CHECK(memcmp(&a, &b, sizeof a) == 0); /* pure function */
        CHECK(a.scale >= 0.5 && a.scale <= 2.0);
        CHECK(a.scaled_h == (int)lround(30 * a.scale) && a.scaled_w == (int)lround(40 * a.scale));
        int ph = a.scaled_h > 16 ? a.scaled_h : 16, pw = a.scaled_w > 24 ? a.scaled_w : 24;
        CHECK(a.y0 >= 0 && a.y0 + 16 <= ph && a.x0 >= 0 && a.x0 + 24 <= pw);
        flips += a.flip;
        if (a.scale < smin) smin = a.scale;
        if (a.scale > smax) smax = a.scale;
        /* Another epoch or seed gives other draws (scale differs almost surely). */
        CHECK(sg_aug_make_draw(&o, 42, 4, s, NULL, 30, 40, &c) == 0);
        CHECK(c.scale != a.scale);
        CHECK(sg_aug_make_draw(&o, 43, 3, s, NULL, 30, 40, &c) == 0);
        CHECK(c.scale != a.scale);
    }
    CHECK(flips > n / 4 && flips < 3 * n / 4);
    CHECK(smin < 0.6 && smax > 1.9);
    o.hflip = 0;
    for (int s = 0; s < 50; s++) {
        sg_aug_draw a;
        CHECK(sg_aug_make_draw(&o, 1, 0, s, NULL, 30, 40, &a) == 0);
        CHECK(a.flip == 0);
    }
}

/* Image whose pixel (y, x) encodes its position, so every output pixel tells
 * where it came from. */
static void make_pos_image(uint8_t *img, uint8_t *mask, int h, int w) {
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++) {
            img[(y * w + x) * 3] = (uint8_t)(y * 10);
            img[(y * w + x) * 3 + 1] = (uint8_t)(x * 10);
            img[(y * w + x) * 3 + 2] = 7;
            mask[y * w + x] = (uint8_t)((y * w + x) % 19);
        }
}

static void test_crop_flip_at_scale_one(void) {
    enum { H = 10, W = 12, CH = 6, CW = 5 };
    uint8_t img[H * W * 3], mask[H * W], oi[CH * CW * 3], om[CH * CW];
    make_pos_image(img, mask, H, W);
    sg_aug_opts o = opts(1, 1, CH, CW, 1);
    sg_aug_draw d = {.scale = 1.0, .scaled_h = H, .scaled_w = W, .y0 = 3, .x0 = 4, .flip = 0};
    CHECK(sg_aug_apply(&o, &d, img, mask, H, W, oi, om) == 0);
    for (int y = 0; y < CH; y++)
        for (int x = 0; x < CW; x++) {
            CHECK(memcmp(oi + (y * CW + x) * 3, img + ((y + 3) * W + x + 4) * 3, 3) == 0);
            CHECK(om[y * CW + x] == mask[(y + 3) * W + x + 4]);
        }
    d.flip = 1; /* the crop mirrored left-right */
    CHECK(sg_aug_apply(&o, &d, img, mask, H, W, oi, om) == 0);
    for (int y = 0; y < CH; y++)
        for (int x = 0; x < CW; x++) {
            int sx = 4 + CW - 1 - x;
            CHECK(memcmp(oi + (y * CW + x) * 3, img + ((y + 3) * W + sx) * 3, 3) == 0);
            CHECK(om[y * CW + x] == mask[(y + 3) * W + sx]);
        }
}

static void test_padding(void) {
    enum { H = 4, W = 6, CH = 8, CW = 9 };
    uint8_t img[H * W * 3], mask[H * W], oi[CH * CW * 3], om[CH * CW];
    make_pos_image(img, mask, H, W);
    sg_aug_opts o = opts(1, 1, CH, CW, 0);
    sg_aug_draw d;
    CHECK(sg_aug_make_draw(&o, 5, 0, 0, NULL, H, W, &d) == 0);
    CHECK(d.y0 == 0 && d.x0 == 0); /* the padded image is exactly the crop */
    CHECK(sg_aug_apply(&o, &d, img, mask, H, W, oi, om) == 0);
    for (int y = 0; y < CH; y++)
        for (int x = 0; x < CW; x++) {
            int in = y < H && x < W;
            const uint8_t *p = oi + (y * CW + x) * 3;
            if (in) {
                CHECK(memcmp(p, img + (y * W + x) * 3, 3) == 0);
                CHECK(om[y * CW + x] == mask[y * W + x]);
            } else { /* image 0, mask ignore_index */
                CHECK(p[0] == 0 && p[1] == 0 && p[2] == 0);
                CHECK(om[y * CW + x] == 255);
            }
        }
    /* Flipped: the padding moves to the left. */
    d.flip = 1;
    CHECK(sg_aug_apply(&o, &d, img, mask, H, W, oi, om) == 0);
    CHECK(om[0] == 255 && om[CW - 1] == mask[0]);
}

static void test_scaled_mask_never_interpolated(void) {
    enum { H = 23, W = 31, CH = 20, CW = 20 };
    uint8_t img[H * W * 3], mask[H * W], oi[CH * CW * 3], om[CH * CW];
    for (int i = 0; i < H * W * 3; i++) img[i] = (uint8_t)(i * 11);
    int present[256] = {0};
    for (int i = 0; i < H * W; i++) {
        mask[i] = (uint8_t)(((i / 3) % 4) * 40 + 1); /* 1, 41, 81, 121 only */
        present[mask[i]] = 1;
    }
    present[255] = 1; /* padding */
    sg_aug_opts o = opts(0.37, 2.3, CH, CW, 1);
    for (int s = 0; s < 60; s++) {
        sg_aug_draw d;
        CHECK(sg_aug_make_draw(&o, 9, 1, s, NULL, H, W, &d) == 0);
        CHECK(sg_aug_apply(&o, &d, img, mask, H, W, oi, om) == 0);
        for (int i = 0; i < CH * CW; i++) CHECK_MSG(present[om[i]], "sample %d value %d", s, om[i]);
    }
}

/* The fused scale+crop equals resizing the whole image then cropping. */
static void test_fused_equals_resize_then_crop(void) {
    enum { H = 17, W = 21, CH = 12, CW = 14 };
    uint8_t img[H * W * 3], mask[H * W], oi[CH * CW * 3], om[CH * CW];
    for (int i = 0; i < H * W * 3; i++) img[i] = (uint8_t)((i * 53) % 256);
    for (int i = 0; i < H * W; i++) mask[i] = (uint8_t)(i % 7);
    sg_aug_opts o = opts(0.5, 2.0, CH, CW, 1);
    for (int s = 0; s < 40; s++) {
        sg_aug_draw d;
        CHECK(sg_aug_make_draw(&o, 77, 2, s, NULL, H, W, &d) == 0);
        CHECK(sg_aug_apply(&o, &d, img, mask, H, W, oi, om) == 0);
        uint8_t *big = malloc((size_t)d.scaled_h * d.scaled_w * 3);
        uint8_t *bigm = malloc((size_t)d.scaled_h * d.scaled_w);
        sg_resize_bilinear_u8(img, H, W, 3, big, d.scaled_h, d.scaled_w);
        sg_resize_nearest_u8(mask, H, W, 1, bigm, d.scaled_h, d.scaled_w);
        for (int y = 0; y < CH; y++)
            for (int x = 0; x < CW; x++) {
                int sy = d.y0 + y, sx = d.x0 + (d.flip ? CW - 1 - x : x);
                int in = sy < d.scaled_h && sx < d.scaled_w;
                for (int k = 0; k < 3; k++)
                    CHECK(oi[(y * CW + x) * 3 + k] ==
                          (in ? big[((size_t)sy * d.scaled_w + sx) * 3 + k] : 0));
                CHECK(om[y * CW + x] == (in ? bigm[(size_t)sy * d.scaled_w + sx] : 255));
            }
        free(big);
        free(bigm);
    }
}

int main(void) {
    TEST_RUN(test_bilinear_matches_reference);
    TEST_RUN(test_matches_pytorch);
    TEST_RUN(test_nearest_is_subset);
    TEST_RUN(test_draws_pure_and_in_range);
    TEST_RUN(test_crop_flip_at_scale_one);
    TEST_RUN(test_padding);
    TEST_RUN(test_scaled_mask_never_interpolated);
    TEST_RUN(test_fused_equals_resize_then_crop);
    return TEST_EXIT();
}
