/* tests/data/test_jpeg.c - JPEG images (io/jpeg.h), the format taken from
 * the content (io/image.h), and the pixel limits on untrusted images
 * (data.max_image_pixels) for JPEG and PNG, with the tRNS regression:
 *  - RGB JPEGs round-trip within JPEG's loss, from a file and from memory;
 *    grayscale, Adobe CMYK and progressive JPEGs decode to the right RGB;
 *  - a JPEG named .png and a PNG named .jpg are read by content; GIF, BMP,
 *    empty and unknown files are refused naming the file and the kind;
 *    a JPEG used as a label mask is refused (masks are PNG);
 *  - truncated / corrupt JPEGs fail naming the file; a progressive JPEG with
 *    more than SG_JPEG_MAX_SCANS scans is refused;
 *  - a PNG declaring 65535 x 65535 (the probe of issue 13) and a JPEG
 *    declaring 60000 x 60000 are refused before allocation, the message
 *    naming the file, its size and data.max_image_pixels; so is any image over
 *    a given limit, through the dataset too; the header-only size read still
 *    works;
 *  - a palette PNG with a tRNS chunk reads as an image (its colours) and as a
 *    mask (its indices); gray and RGB PNGs with tRNS read too. */
#include <stddef.h>
#include <stdio.h>
/* jpeglib.h needs FILE and size_t declared first */
#include <jpeglib.h>

#include "core/config.h"
#include "data/dataset.h"
#include "data_test.h"
#include "io/image.h"
#include "io/jpeg.h"
#include "io/png.h"
#include "testutil.h"

#define W 24
#define H 16

/* A smooth colour pattern: JPEG keeps it within a few levels. */
static uint8_t ref_rgb[H * W * 3];
static void init_ref(void) {
    for (int y = 0; y < H; y++)
        for (int x = 0; x < W; x++) {
            uint8_t *p = ref_rgb + 3 * (y * W + x);
            p[0] = (uint8_t)(40 + 6 * x);
            p[1] = (uint8_t)(200 - 8 * y);
            p[2] = (uint8_t)(90 + 3 * x + 2 * y);
        }
}

static int max_abs_diff(const uint8_t *a, const uint8_t *b, size_t n) {
    int m = 0;
    for (size_t i = 0; i < n; i++) {
        int d = abs((int)a[i] - (int)b[i]);
        if (d > m) m = d;
    }
    return m;
}

static size_t read_all(const char *path, uint8_t *buf, size_t cap) {
    FILE *f = fopen(path, "rb");
    if (!f) return 0;
    size_t n = fread(buf, 1, cap, f);
    fclose(f);
    return n;
}

static void write_all(const char *path, const void *buf, size_t n) {
    FILE *f = fopen(path, "wb");
    fwrite(buf, 1, n, f);
    fclose(f);
}

/* Any JPEG with libjpeg directly: `comps` samples per pixel in `space`,
 * optional Adobe marker, optional scan script. */
static void write_jpeg(const char *path, int w, int h, int comps, J_COLOR_SPACE space,
                       const uint8_t *px, int progressive, const jpeg_scan_info *scans,
                       int n_scans) {
    struct jpeg_compress_struct c;
    struct jpeg_error_mgr e;
    c.err = jpeg_std_error(&e);
    jpeg_create_compress(&c);
    FILE *f = fopen(path, "wb");
    jpeg_stdio_dest(&c, f);
    c.image_width = (JDIMENSION)w;
    c.image_height = (JDIMENSION)h;
    c.input_components = comps;
    c.in_color_space = space;
    jpeg_set_defaults(&c);
    jpeg_set_quality(&c, 98, TRUE);
    if (space == JCS_CMYK) {
        jpeg_set_colorspace(&c, JCS_CMYK);
        c.write_Adobe_marker = TRUE;
    }
    if (progressive) jpeg_simple_progression(&c);
    if (scans) {
        c.scan_info = scans;
        c.num_scans = n_scans;
    }
    jpeg_start_compress(&c, TRUE);
    while (c.next_scanline < c.image_height) {
        JSAMPROW r = (JSAMPROW)(px + (size_t)c.next_scanline * w * comps);
        jpeg_write_scanlines(&c, &r, 1);
    }
    jpeg_finish_compress(&c);
    jpeg_destroy_compress(&c);
    fclose(f);
}

static void test_rgb_roundtrip_file_and_memory(void) {
    const char *p = dt_path("rgb.jpg");
    char err[SG_DATA_ERR_LEN];
    CHECK_MSG(sg_jpeg_write_rgb(p, ref_rgb, H, W, 95, err, sizeof err) == SG_OK, "%s", err);
    sg_img a, b, c;
    CHECK(sg_jpeg_read_rgb(p, 0, &a, err, sizeof err) == SG_OK);
    CHECK(a.h == H && a.w == W && a.c == 3);
    int d = max_abs_diff(a.data, ref_rgb, sizeof ref_rgb);
    fprintf(stderr, "  q95 JPEG: max |error| %d levels\n", d);
    CHECK(d <= 12);
    CHECK(sg_image_read_rgb(p, SG_IMAGE_MAX_PIXELS_DEFAULT, &b, err, sizeof err) == SG_OK);
    CHECK(memcmp(a.data, b.data, sizeof ref_rgb) == 0);
    static uint8_t buf[1 << 16];
    size_t n = read_all(p, buf, sizeof buf);
    CHECK(n > 100);
    CHECK(sg_image_decode_rgb(buf, n, "mem.jpg", 0, &c, err, sizeof err) == SG_OK);
    CHECK(c.data && memcmp(a.data, c.data, sizeof ref_rgb) == 0);
    int h = 0, w = 0;
    CHECK(sg_image_read_size(p, &h, &w, err, sizeof err) == SG_OK && h == H && w == W);
    sg_img_free(&a);
    sg_img_free(&b);
    sg_img_free(&c);
}

static void test_gray_cmyk_progressive(void) {
    char err[SG_DATA_ERR_LEN];
    uint8_t gray[H * W], cmyk[H * W * 4];
    for (int i = 0; i < H * W; i++) {
        gray[i] = ref_rgb[3 * i + 1];
        /* inverted (Adobe) CMYK of the reference: stored value = 255 - ink */
        cmyk[4 * i + 0] = ref_rgb[3 * i + 0];
        cmyk[4 * i + 1] = ref_rgb[3 * i + 1];
        cmyk[4 * i + 2] = ref_rgb[3 * i + 2];
        cmyk[4 * i + 3] = 255; /* no black ink */
    }
    const char *p = dt_path("gray.jpg");
    write_jpeg(p, W, H, 1, JCS_GRAYSCALE, gray, 0, NULL, 0);
    sg_img im;
    CHECK(sg_image_read_rgb(p, 0, &im, err, sizeof err) == SG_OK);
    CHECK(im.c == 3);
    int worst = 0;
    for (int i = 0; i < H * W; i++) {
        CHECK(im.data[3 * i] == im.data[3 * i + 1] && im.data[3 * i + 1] == im.data[3 * i + 2]);
        int d = abs((int)im.data[3 * i] - gray[i]);
        if (d > worst) worst = d;
    }
    CHECK(worst <= 6);
    sg_img_free(&im);

    p = dt_path("cmyk.jpg");
    write_jpeg(p, W, H, 4, JCS_CMYK, cmyk, 0, NULL, 0);
    CHECK_MSG(sg_image_read_rgb(p, 0, &im, err, sizeof err) == SG_OK, "%s", err);
    int d = im.data ? max_abs_diff(im.data, ref_rgb, sizeof ref_rgb) : 999;
    fprintf(stderr, "  Adobe CMYK JPEG: max |error| %d levels\n", d);
    CHECK(d <= 8);
    sg_img_free(&im);

    p = dt_path("progressive.jpg");
    write_jpeg(p, W, H, 3, JCS_RGB, ref_rgb, 1, NULL, 0);
    CHECK(sg_image_read_rgb(p, 0, &im, err, sizeof err) == SG_OK);
    d = im.data ? max_abs_diff(im.data, ref_rgb, sizeof ref_rgb) : 999;
    CHECK(d <= 12);
    sg_img_free(&im);
}

static void test_too_many_scans(void) {
    /* A valid progressive 8x8 gray JPEG with 1 + 63 x 11 = 694 scans: DC,
     * then every AC coefficient alone, refined bit by bit from Al 10. */
    static jpeg_scan_info scans[1 + 63 * 11];
    int n = 0;
    scans[n++] = (jpeg_scan_info){1, {0}, 0, 0, 0, 0};
    for (int k = 1; k < 64; k++) {
        scans[n++] = (jpeg_scan_info){1, {0}, k, k, 0, 10};
        for (int al = 9; al >= 0; al--) scans[n++] = (jpeg_scan_info){1, {0}, k, k, al + 1, al};
    }
    uint8_t g[64];
    for (int i = 0; i < 64; i++) g[i] = (uint8_t)(i * 3);
    const char *p = dt_path("scans.jpg");
    write_jpeg(p, 8, 8, 1, JCS_GRAYSCALE, g, 0, scans, n);
    sg_img im;
    char err[SG_DATA_ERR_LEN] = "";
    CHECK(n > SG_JPEG_MAX_SCANS);
    CHECK(sg_image_read_rgb(p, 0, &im, err, sizeof err) == SG_ERR_RUNTIME);
    CHECK_STR_CONTAINS(err, p);
    CHECK_STR_CONTAINS(err, "scans");
    CHECK(im.data == NULL);
}

static void test_format_by_content(void) {
    char err[SG_DATA_ERR_LEN];
    const char *jpg_named_png = dt_path("really_a_jpeg.png");
    CHECK(sg_jpeg_write_rgb(jpg_named_png, ref_rgb, H, W, 90, err, sizeof err) == SG_OK);
    sg_img im;
    CHECK(sg_image_read_rgb(jpg_named_png, 0, &im, err, sizeof err) == SG_OK && im.w == W);
    sg_img_free(&im);
    /* ...but it is not a label mask */
    CHECK(sg_png_read_mask(jpg_named_png, &im, err, sizeof err) == SG_ERR_RUNTIME);
    CHECK_STR_CONTAINS(err, jpg_named_png);
    CHECK_STR_CONTAINS(err, "masks must be PNG");

    const char *png_named_jpg = dt_path("really_a_png.jpg");
    CHECK(sg_png_write_rgb(png_named_jpg, ref_rgb, H, W, err, sizeof err) == SG_OK);
    CHECK(sg_image_read_rgb(png_named_jpg, 0, &im, err, sizeof err) == SG_OK);
    CHECK(im.data && memcmp(im.data, ref_rgb, sizeof ref_rgb) == 0); /* PNG: lossless */
    sg_img_free(&im);
    sg_img_format fmt;
    CHECK(sg_image_sniff(png_named_jpg, &fmt, err, sizeof err) == SG_OK && fmt == SG_IMG_PNG);

    struct {
        const char *name, *bytes, *kind;
        size_t n;
    } bad[] = {{"anim.gif", "GIF89a\x01\x00\x01\x00", "GIF", 10},
               {"pic.bmp", "BM\x36\x00\x00\x00\x00\x00", "BMP", 8},
               {"pic.webp", "RIFF\x10\x00\x00\x00WEBPVP8 ", "WebP", 16},
               {"empty.jpg", "", "empty", 0},
               {"notes.jpg", "hello, world\n", "not an image", 13}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        const char *p = dt_path("%s", bad[i].name);
        write_all(p, bad[i].bytes, bad[i].n);
        CHECK(sg_image_sniff(p, &fmt, err, sizeof err) == SG_OK && fmt == SG_IMG_UNKNOWN);
        CHECK(sg_image_read_rgb(p, 0, &im, err, sizeof err) == SG_ERR_RUNTIME);
        CHECK_STR_CONTAINS(err, p);
        CHECK_STR_CONTAINS(err, "neither a PNG nor a JPEG");
        CHECK_STR_CONTAINS(err, bad[i].kind);
        CHECK(im.data == NULL);
    }
    const char *missing = dt_path("missing.jpg");
    CHECK(sg_image_read_rgb(missing, 0, &im, err, sizeof err) == SG_ERR_RUNTIME);
    CHECK_STR_CONTAINS(err, missing);
    CHECK_STR_CONTAINS(err, "No such file");
}

static void test_corrupt_jpegs(void) {
    char err[SG_DATA_ERR_LEN];
    const char *good = dt_path("good.jpg");
    CHECK(sg_jpeg_write_rgb(good, ref_rgb, H, W, 90, err, sizeof err) == SG_OK);
    static uint8_t buf[1 << 16];
    size_t n = read_all(good, buf, sizeof buf);
    sg_img im;
    /* cut in the entropy-coded data: libjpeg would pad with gray and warn */
    const char *trunc = dt_path("truncated.jpg");
    write_all(trunc, buf, n * 2 / 3);
    CHECK(sg_image_read_rgb(trunc, 0, &im, err, sizeof err) == SG_ERR_RUNTIME);
    CHECK_STR_CONTAINS(err, trunc);
    CHECK_STR_CONTAINS(err, "truncated");
    CHECK(im.data == NULL);
    /* cut inside the headers */
    write_all(trunc, buf, 40);
    CHECK(sg_image_read_rgb(trunc, 0, &im, err, sizeof err) == SG_ERR_RUNTIME);
    CHECK_STR_CONTAINS(err, trunc);
    /* the SOI marker and then garbage */
    uint8_t junk[64] = {0xFF, 0xD8, 0xFF};
    for (int i = 3; i < 64; i++) junk[i] = (uint8_t)(i * 37);
    const char *garbage = dt_path("garbage.jpg");
    write_all(garbage, junk, sizeof junk);
    CHECK(sg_image_read_rgb(garbage, 0, &im, err, sizeof err) == SG_ERR_RUNTIME);
    CHECK_STR_CONTAINS(err, garbage);
    CHECK(sg_jpeg_decode_rgb(junk, 3, "three-bytes", 0, &im, err, sizeof err) == SG_ERR_RUNTIME);
    CHECK_STR_CONTAINS(err, "three-bytes");
    CHECK(sg_jpeg_decode_rgb(junk, 0, "nothing", 0, &im, err, sizeof err) == SG_ERR_RUNTIME);
    CHECK_STR_CONTAINS(err, "nothing");
}

/* ---- pixel limits ---- */

static uint32_t crc32_of(const uint8_t *p, size_t n) {
    uint32_t c = 0xFFFFFFFFu;
    for (size_t i = 0; i < n; i++) {
        c ^= p[i];
        for (int k = 0; k < 8; k++) c = (c >> 1) ^ (0xEDB88320u & (0u - (c & 1)));
    }
    return ~c;
}

static size_t put_chunk(uint8_t *out, const char *type, const uint8_t *data, uint32_t n) {
    out[0] = (uint8_t)(n >> 24), out[1] = (uint8_t)(n >> 16), out[2] = (uint8_t)(n >> 8),
    out[3] = (uint8_t)n;
    memcpy(out + 4, type, 4);
    if (n) memcpy(out + 8, data, n);
    uint32_t c = crc32_of(out + 4, 4 + n);
    out[8 + n] = (uint8_t)(c >> 24), out[9 + n] = (uint8_t)(c >> 16),
            out[10 + n] = (uint8_t)(c >> 8), out[11 + n] = (uint8_t)c;
    return 12 + n;
}

/* A small PNG whose header declares w x h (the issue-13 probe: 65535 x
 * 65535); its IDAT is junk, never decoded. */
static size_t huge_png_wh(uint8_t *out, uint32_t w, uint32_t h) {
    static const uint8_t sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    memcpy(out, sig, 8);
    size_t n = 8;
    uint8_t ihdr[13] = {(uint8_t)(w >> 24),
                        (uint8_t)(w >> 16),
                        (uint8_t)(w >> 8),
                        (uint8_t)w,
                        (uint8_t)(h >> 24),
                        (uint8_t)(h >> 16),
                        (uint8_t)(h >> 8),
                        (uint8_t)h,
                        8,
                        0 /* gray */,
                        0,
                        0,
                        0};
    n += put_chunk(out + n, "IHDR", ihdr, 13);
    uint8_t idat[16] = {0x78, 0x9c, 0x63, 0, 0, 0, 1, 0, 1}; /* junk: never decoded */
    n += put_chunk(out + n, "IDAT", idat, sizeof idat);
    n += put_chunk(out + n, "IEND", NULL, 0);
    return n;
}
static size_t huge_png(uint8_t *out) { return huge_png_wh(out, 65535, 65535); }

/* Over 65536 pixels a side (libpng's old user limit here): the pixel budget's
 * message, not libpng's "Invalid IHDR data". */
static void test_png_wide_sides(void) {
    char err[SG_DATA_ERR_LEN];
    sg_img im;
    uint8_t probe[256];
    static const uint32_t dims[][2] = {{70000, 70000}, {65537, 1}, {1, 200000}, {2000000, 40}};
    for (size_t k = 0; k < sizeof dims / sizeof dims[0]; k++) {
        uint32_t w = dims[k][0], h = dims[k][1];
        size_t n = huge_png_wh(probe, w, h);
        const char *p = dt_path("wide.png");
        write_all(p, probe, n);
        int hh = 0, ww = 0;
        CHECK(sg_image_read_size(p, &hh, &ww, err, sizeof err) == SG_OK);
        CHECK(hh == (int)h && ww == (int)w);
        char dimtxt[64];
        snprintf(dimtxt, sizeof dimtxt, "%ux%u", h, w);
        int64_t limit = (int64_t)w * h - 1; /* one pixel over */
        for (int mask = 0; mask <= 1; mask++) {
            CHECK(sg_png_read(p, mask, limit, &im, err, sizeof err) == SG_ERR_RUNTIME);
            CHECK_STR_CONTAINS(err, dimtxt);
            CHECK_STR_CONTAINS(err, "data.max_image_pixels");
            CHECK(strstr(err, "IHDR") == NULL);
            CHECK(im.data == NULL);
        }
        CHECK(sg_image_read_rgb(
                  p, SG_IMAGE_MAX_PIXELS_DEFAULT < limit ? SG_IMAGE_MAX_PIXELS_DEFAULT : limit, &im,
                  err, sizeof err) == SG_ERR_RUNTIME);
        CHECK_STR_CONTAINS(err, "data.max_image_pixels");
        CHECK(sg_png_decode(probe, n, "wide", 0, limit, &im, err, sizeof err) == SG_ERR_RUNTIME);
        CHECK_STR_CONTAINS(err, "data.max_image_pixels");
        /* no budget at all (a direct caller): still refused, by side */
        CHECK(sg_png_decode(probe, n, "wide", 0, 0, &im, err, sizeof err) == SG_ERR_RUNTIME);
        CHECK_STR_CONTAINS(err, "a side");
    }
}

static void test_pixel_limits(void) {
    char err[SG_DATA_ERR_LEN];
    sg_img im;
    uint8_t probe[256];
    size_t n = huge_png(probe);
    const char *p = dt_path("huge.png");
    write_all(p, probe, n);
    int h = 0, w = 0;
    CHECK(sg_image_read_size(p, &h, &w, err, sizeof err) == SG_OK && h == 65535 && w == 65535);
    for (int mask = 0; mask <= 1; mask++) {
        CHECK(sg_png_read(p, mask, SG_IMAGE_MAX_PIXELS_DEFAULT, &im, err, sizeof err) ==
              SG_ERR_RUNTIME);
        CHECK_STR_CONTAINS(err, p);
        CHECK_STR_CONTAINS(err, "65535x65535");
        CHECK_STR_CONTAINS(err, "data.max_image_pixels");
        CHECK_STR_CONTAINS(err, "67108864");
        CHECK(im.data == NULL);
    }
    /* the defaults go through the same limit */
    CHECK(sg_png_read_rgb(p, &im, err, sizeof err) == SG_ERR_RUNTIME);
    CHECK_STR_CONTAINS(err, "data.max_image_pixels");
    CHECK(sg_png_decode(probe, n, "probe", 0, 1 << 20, &im, err, sizeof err) == SG_ERR_RUNTIME);
    CHECK_STR_CONTAINS(err, "probe");

    /* a JPEG whose frame header is patched to 60000 x 60000 */
    const char *good = dt_path("small.jpg");
    CHECK(sg_jpeg_write_rgb(good, ref_rgb, H, W, 90, err, sizeof err) == SG_OK);
    static uint8_t buf[1 << 16];
    n = read_all(good, buf, sizeof buf);
    size_t sof = 0;
    for (size_t i = 2; i + 9 < n && !sof; i++)
        if (buf[i] == 0xFF && buf[i + 1] == 0xC0) sof = i;
    CHECK(sof > 0);
    buf[sof + 5] = 0xEA, buf[sof + 6] = 0x60; /* height 60000 */
    buf[sof + 7] = 0xEA, buf[sof + 8] = 0x60; /* width 60000 */
    const char *hj = dt_path("huge.jpg");
    write_all(hj, buf, n);
    CHECK(sg_image_read_size(hj, &h, &w, err, sizeof err) == SG_OK && h == 60000 && w == 60000);
    CHECK(sg_image_read_rgb(hj, SG_IMAGE_MAX_PIXELS_DEFAULT, &im, err, sizeof err) ==
          SG_ERR_RUNTIME);
    CHECK_STR_CONTAINS(err, hj);
    CHECK_STR_CONTAINS(err, "60000x60000");
    CHECK_STR_CONTAINS(err, "data.max_image_pixels");
    CHECK(im.data == NULL);

    /* any image over a given limit, and exactly at it */
    CHECK(sg_image_read_rgb(good, H * W - 1, &im, err, sizeof err) == SG_ERR_RUNTIME);
    CHECK_STR_CONTAINS(err, "16x24");
    CHECK(sg_image_read_rgb(good, H * W, &im, err, sizeof err) == SG_OK);
    sg_img_free(&im);
    const char *png = dt_path("small.png");
    CHECK(sg_png_write_rgb(png, ref_rgb, H, W, err, sizeof err) == SG_OK);
    CHECK(sg_image_read_rgb(png, H * W - 1, &im, err, sizeof err) == SG_ERR_RUNTIME);
    CHECK_STR_CONTAINS(err, "16x24");
    CHECK(sg_image_read_rgb(png, H * W, &im, err, sizeof err) == SG_OK);
    sg_img_free(&im);

    /* through a dataset: data.max_image_pixels from the configuration */
    sg_config cfg;
    sg_config_defaults(&cfg);
    CHECK_EQ_INT(cfg.data.max_image_pixels, 1 << 26);
    dt_mkdirs(dt_path("lim/img"));
    uint8_t mask[H * W] = {0};
    dt_gray(dt_path("lim/img/m.png"), H, W, mask);
    CHECK(sg_png_write_rgb(dt_path("lim/img/a.png"), ref_rgb, H, W, err, sizeof err) == 0);
    dt_write_text(dt_path("lim/list.txt"), "img/a.png img/m.png\n");
    snprintf(cfg.data.format, sizeof cfg.data.format, "list");
    snprintf(cfg.data.label_map, sizeof cfg.data.label_map, "none");
    snprintf(cfg.data.root, sizeof cfg.data.root, "%s", dt_path("lim"));
    CHECK(sg_config_set(&cfg, "data.max_image_pixels=100") == SG_OK);
    sg_dataset *ds = sg_dataset_open(&cfg.data, "list.txt", 19);
    CHECK(ds != NULL);
    if (ds) {
        sg_img a, m;
        CHECK(sg_dataset_load(ds, 0, &a, &m, err, sizeof err) == SG_ERR_RUNTIME);
        CHECK_STR_CONTAINS(err, "a.png");
        CHECK_STR_CONTAINS(err, "data.max_image_pixels");
        sg_dataset_close(ds);
    }
    CHECK(sg_config_set(&cfg, "data.max_image_pixels=0") == SG_ERR_CONFIG);
}

/* ---- tRNS (issue 13, 6) ---- */

static void write_trns_png(const char *path, int ctype, const uint8_t *px, const png_color *pal,
                           int npal, const png_byte *trans, int ntrans, png_color_16 *trans_color) {
    FILE *f = fopen(path, "wb");
    png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, NULL, NULL, NULL);
    png_infop info = png_create_info_struct(png);
    png_init_io(png, f);
    png_set_IHDR(png, info, W, H, 8, ctype, PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT,
                 PNG_FILTER_TYPE_DEFAULT);
    if (pal) png_set_PLTE(png, info, pal, npal);
    png_set_tRNS(png, info, trans, ntrans, trans_color);
    png_write_info(png, info);
    int ch = ctype == PNG_COLOR_TYPE_RGB ? 3 : 1;
    for (int y = 0; y < H; y++) png_write_row(png, px + (size_t)y * W * ch);
    png_write_end(png, NULL);
    png_destroy_write_struct(&png, &info);
    fclose(f);
}

static void test_trns(void) {
    char err[SG_DATA_ERR_LEN];
    png_color pal[4] = {{10, 20, 30}, {40, 50, 60}, {70, 80, 90}, {200, 210, 220}};
    png_byte alpha[4] = {0, 128, 255, 7}; /* index 0 fully transparent */
    uint8_t idx[H * W];
    for (int i = 0; i < H * W; i++) idx[i] = (uint8_t)((i * 7) % 4);
    const char *p = dt_path("pal_trns.png");
    write_trns_png(p, PNG_COLOR_TYPE_PALETTE, idx, pal, 4, alpha, 4, NULL);
    sg_img im;
    CHECK_MSG(sg_png_read_rgb(p, &im, err, sizeof err) == SG_OK, "%s", err);
    CHECK(im.c == 3);
    for (int i = 0; im.data && i < H * W; i++) {
        CHECK(im.data[3 * i] == pal[idx[i]].red && im.data[3 * i + 1] == pal[idx[i]].green &&
              im.data[3 * i + 2] == pal[idx[i]].blue);
    }
    sg_img_free(&im);
    CHECK(sg_image_read_rgb(p, 0, &im, err, sizeof err) == SG_OK && im.c == 3);
    sg_img_free(&im);
    CHECK(sg_png_read_mask(p, &im, err, sizeof err) == SG_OK);
    CHECK(im.c == 1 && memcmp(im.data, idx, sizeof idx) == 0);
    sg_img_free(&im);

    /* gray and RGB with a transparent colour */
    png_color_16 tc = {0, 0, 0, 0, 13};
    p = dt_path("gray_trns.png");
    write_trns_png(p, PNG_COLOR_TYPE_GRAY, idx, NULL, 0, NULL, 0, &tc);
    CHECK(sg_png_read_rgb(p, &im, err, sizeof err) == SG_OK && im.c == 3);
    CHECK(im.data && im.data[3 * 5] == idx[5]);
    sg_img_free(&im);
    CHECK(sg_png_read_mask(p, &im, err, sizeof err) == SG_OK && im.data[5] == idx[5]);
    sg_img_free(&im);
    png_color_16 tc_rgb = {0, 1, 2, 3, 0};
    p = dt_path("rgb_trns.png");
    write_trns_png(p, PNG_COLOR_TYPE_RGB, ref_rgb, NULL, 0, NULL, 0, &tc_rgb);
    CHECK(sg_png_read_rgb(p, &im, err, sizeof err) == SG_OK && im.c == 3);
    CHECK(im.data && memcmp(im.data, ref_rgb, sizeof ref_rgb) == 0);
    sg_img_free(&im);
}

int main(void) {
    init_ref();
    TEST_RUN(test_rgb_roundtrip_file_and_memory);
    TEST_RUN(test_gray_cmyk_progressive);
    TEST_RUN(test_too_many_scans);
    TEST_RUN(test_format_by_content);
    TEST_RUN(test_corrupt_jpegs);
    TEST_RUN(test_pixel_limits);
    TEST_RUN(test_png_wide_sides);
    TEST_RUN(test_trns);
    return TEST_EXIT();
}
