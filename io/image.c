/* io/image.c - see image.h: format by magic bytes, then the PNG or JPEG
 * decoder. */
#include "io/image.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "core/log.h"
#include "io/image_err.h"
#include "io/jpeg.h"

sg_img_format sg_image_format_of(const void *head, size_t n) {
    static const uint8_t png_sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    const uint8_t *b = head;
    if (n >= 8 && memcmp(b, png_sig, 8) == 0) return SG_IMG_PNG;
    /* SOI marker followed by the first marker's 0xFF */
    if (n >= 3 && b[0] == 0xFF && b[1] == 0xD8 && b[2] == 0xFF) return SG_IMG_JPEG;
    return SG_IMG_UNKNOWN;
}

/* What an unsupported file probably is, for the message. */
static const char *guess_kind(const uint8_t *b, size_t n) {
    if (n == 0) return "an empty file";
    if (n >= 4 && !memcmp(b, "GIF8", 4)) return "a GIF image";
    if (n >= 2 && b[0] == 'B' && b[1] == 'M') return "a BMP image";
    if (n >= 12 && !memcmp(b, "RIFF", 4) && !memcmp(b + 8, "WEBP", 4)) return "a WebP image";
    if (n >= 4 && (!memcmp(b, "II*\0", 4) || !memcmp(b, "MM\0*", 4))) return "a TIFF image";
    if (n >= 4 && b[0] == 0x89 && b[1] == 'P') return "a damaged PNG (bad signature)";
    if (n >= 2 && b[0] == 0xFF && b[1] == 0xD8) return "a damaged JPEG";
    return "not an image segtrain reads";
}

static void unknown_err(const char *path, const uint8_t *b, size_t n, char *err, size_t errlen) {
    char hex[40] = "";
    for (size_t i = 0; i < n && i < 8; i++)
        snprintf(hex + 3 * i, sizeof hex - 3 * i, "%02x ", b[i]);
    sg_report(err, errlen,
              "%s is neither a PNG nor a JPEG file (first bytes %s: %s); segtrain reads PNG and "
              "JPEG images (the format is taken from the content, not the name): convert it",
              path, n ? hex : "none", guess_kind(b, n));
}

/* Reads up to 16 first bytes into head (*n of them). */
static sg_status read_head(const char *path, uint8_t head[16], size_t *n_out, char *err,
                           size_t errlen) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        sg_report(err, errlen, "cannot open image %s: %s (check the path and data.root)", path,
                  strerror(errno));
        return SG_ERR_RUNTIME;
    }
    size_t n = fread(head, 1, 16, f);
    int bad = ferror(f);
    int e = errno;
    fclose(f);
    if (bad) {
        sg_report(err, errlen, "cannot read image %s: %s", path, strerror(e));
        return SG_ERR_RUNTIME;
    }
    *n_out = n;
    return SG_OK;
}

sg_status sg_image_sniff(const char *path, sg_img_format *fmt, char *err, size_t errlen) {
    uint8_t head[16];
    size_t n;
    *fmt = SG_IMG_UNKNOWN;
    if (read_head(path, head, &n, err, errlen) != SG_OK) return SG_ERR_RUNTIME;
    *fmt = sg_image_format_of(head, n);
    return SG_OK;
}

/* The format of an image file; SG_ERR_RUNTIME (message set) when it cannot
 * be read or is neither PNG nor JPEG. */
static sg_status image_format(const char *path, sg_img_format *fmt, char *err, size_t errlen) {
    uint8_t head[16];
    size_t n;
    if (read_head(path, head, &n, err, errlen) != SG_OK) return SG_ERR_RUNTIME;
    *fmt = sg_image_format_of(head, n);
    if (*fmt != SG_IMG_UNKNOWN) return SG_OK;
    unknown_err(path, head, n, err, errlen);
    return SG_ERR_RUNTIME;
}

sg_status sg_image_read_rgb(const char *path, int64_t max_pixels, sg_img *out, char *err,
                            size_t errlen) {
    memset(out, 0, sizeof *out);
    sg_img_format fmt;
    if (image_format(path, &fmt, err, errlen) != SG_OK) return SG_ERR_RUNTIME;
    switch (fmt) {
    case SG_IMG_PNG: return sg_png_read(path, 0, max_pixels, out, err, errlen);
    case SG_IMG_JPEG: return sg_jpeg_read_rgb(path, max_pixels, out, err, errlen);
    default: return SG_ERR_RUNTIME;
    }
}

sg_status sg_image_decode_rgb(const void *buf, size_t len, const char *name, int64_t max_pixels,
                              sg_img *out, char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    if (!name) name = "(memory)";
    switch (sg_image_format_of(buf, len)) {
    case SG_IMG_PNG: return sg_png_decode(buf, len, name, 0, max_pixels, out, err, errlen);
    case SG_IMG_JPEG: return sg_jpeg_decode_rgb(buf, len, name, max_pixels, out, err, errlen);
    default: unknown_err(name, buf, len, err, errlen); return SG_ERR_RUNTIME;
    }
}

sg_status sg_image_read_size(const char *path, int *h, int *w, char *err, size_t errlen) {
    sg_img_format fmt;
    if (image_format(path, &fmt, err, errlen) != SG_OK) return SG_ERR_RUNTIME;
    switch (fmt) {
    case SG_IMG_PNG: return sg_png_read_size(path, h, w, err, errlen);
    case SG_IMG_JPEG: return sg_jpeg_read_size(path, h, w, err, errlen);
    default: return SG_ERR_RUNTIME;
    }
}
