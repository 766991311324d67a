/* tests/data/data_test.h - helpers shared by the data tests: temporary
 * directories, capturing stderr (to check that error messages name the file),
 * writing raw PNGs of any kind with libpng, and building tiny datasets. */
#ifndef SG_TESTS_DATA_TEST_H
#define SG_TESTS_DATA_TEST_H

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <png.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tests/helpers.h"

/* ---- temporary directory, removed at exit ---- */

static char dt_tmp[256];

static __attribute__((unused)) int dt_rm_cb(const char *p, const struct stat *st, int flag,
                                            struct FTW *ftw) {
    (void)st;
    (void)flag;
    (void)ftw;
    return remove(p);
}
static __attribute__((unused)) void dt_cleanup(void) {
    if (dt_tmp[0] && !getenv("SG_KEEP_TMP")) nftw(dt_tmp, dt_rm_cb, 16, FTW_DEPTH | FTW_PHYS);
}
static __attribute__((unused)) const char *dt_tmpdir(void) {
    if (!dt_tmp[0]) {
        snprintf(dt_tmp, sizeof dt_tmp, "/tmp/sg_data_test_XXXXXX");
        if (!mkdtemp(dt_tmp)) {
            perror("mkdtemp");
            exit(1);
        }
        atexit(dt_cleanup);
    }
    return dt_tmp;
}

static __attribute__((unused)) void dt_mkdirs(const char *path) {
    char buf[1024];
    snprintf(buf, sizeof buf, "%s", path);
    for (char *p = buf + 1; *p; p++) {
        if (*p == '/') {
            *p = 0;
            mkdir(buf, 0777);
            *p = '/';
        }
    }
    mkdir(buf, 0777);
}

/* Path under the temp dir (static ring of buffers). */
static const char *dt_path(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static __attribute__((unused)) const char *dt_path(const char *fmt, ...) {
    static char ring[8][1024];
    static int k = 0;
    char rel[700];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(rel, sizeof rel, fmt, ap);
    va_end(ap);
    char *out = ring[k++ % 8];
    snprintf(out, 1024, "%s/%s", dt_tmpdir(), rel);
    return out;
}

/* ---- raw PNG writer: any colour type / depth / interlace ---- */

/* px: rows of h * w * channels samples; 16-bit samples are given as uint16
 * values in px16 (host order) when depth == 16. */
static int dt_write_png(const char *path, int w, int h, int ctype, int depth, int interlace,
                        const uint8_t *px, const uint16_t *px16, const png_color *pal, int npal) {
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, NULL, NULL, NULL);
    png_infop info = png_create_info_struct(png);
    if (setjmp(png_jmpbuf(png))) {
        png_destroy_write_struct(&png, &info);
        fclose(f);
        return -1;
    }
    png_init_io(png, f);
    png_set_IHDR(png, info, (png_uint_32)w, (png_uint_32)h, depth, ctype,
                 interlace ? PNG_INTERLACE_ADAM7 : PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT,
                 PNG_FILTER_TYPE_DEFAULT);
    if (ctype == PNG_COLOR_TYPE_PALETTE) png_set_PLTE(png, info, pal, npal);
    png_write_info(png, info);
    int ch = ctype == PNG_COLOR_TYPE_RGB          ? 3
             : ctype == PNG_COLOR_TYPE_RGBA       ? 4
             : ctype == PNG_COLOR_TYPE_GRAY_ALPHA ? 2
                                                  : 1;
    /* packed rows for depth < 8 (gray / palette), big-endian bytes for 16 */
    size_t rowbytes = depth == 16 ? (size_t)w * ch * 2 : ((size_t)w * ch * depth + 7) / 8;
    png_bytep *rows = malloc(sizeof(png_bytep) * h);
    uint8_t *buf = calloc((size_t)h, rowbytes);
    for (int y = 0; y < h; y++) {
        uint8_t *r = buf + (size_t)y * rowbytes;
        for (int i = 0; i < w * ch; i++) {
            if (depth == 16) {
                uint16_t v = px16[(size_t)y * w * ch + i];
                r[2 * i] = (uint8_t)(v >> 8);
                r[2 * i + 1] = (uint8_t)v;
            } else if (depth == 8) {
                r[i] = px[(size_t)y * w * ch + i];
            } else {
                int per = 8 / depth;
                r[i / per] |= (uint8_t)(px[(size_t)y * w * ch + i] << (8 - depth * (i % per + 1)));
            }
        }
        rows[y] = r;
    }
    png_write_image(png, rows);
    png_write_end(png, NULL);
    png_destroy_write_struct(&png, &info);
    fclose(f);
    free(rows);
    free(buf);
    return 0;
}

/* 8-bit RGB and gray files for building datasets. */
static __attribute__((unused)) void dt_rgb(const char *path, int h, int w, uint8_t seed) {
    uint8_t *px = malloc((size_t)h * w * 3);
    for (int i = 0; i < h * w * 3; i++) px[i] = (uint8_t)(i * 7 + seed * 31);
    dt_write_png(path, w, h, PNG_COLOR_TYPE_RGB, 8, 0, px, NULL, NULL, 0);
    free(px);
}
static __attribute__((unused)) void dt_gray(const char *path, int h, int w, const uint8_t *v) {
    dt_write_png(path, w, h, PNG_COLOR_TYPE_GRAY, 8, 0, v, NULL, NULL, 0);
}
static __attribute__((unused)) void dt_write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    fputs(text, f);
    fclose(f);
}

#endif
