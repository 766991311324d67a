/* io/png.h - PNG reading and writing through libpng (setjmp error handling,
 * no leaks on any error path).
 *
 * Reading converts every PNG kind to what the trainer needs:
 *  - images -> 8-bit RGB, HWC: RGB kept, RGBA / gray+alpha drop alpha, gray
 *    expands to RGB, palette expands to its colours, 16-bit is scaled to 8-bit
 *    (libpng's rounding), interlaced is de-interlaced.
 *  - masks -> 8-bit single channel: gray kept (gray+alpha drops alpha), palette
 *    gives the palette *index*
 *    (the label, not the colour), 16-bit gray kept only if every value fits in
 *    0..255 (else an error naming the file and the value). RGB/alpha masks are
 *    rejected (a colour mask is not a label mask).
 * Transparency (alpha channel or a tRNS chunk, palette ones included) is
 * dropped, not blended.
 * Writing: 8-bit RGB, 8/16-bit gray and 8-bit palette PNGs (predictions, synth).
 *
 * Untrusted input: a decoded image's pixel count (h * w) is checked against a
 * limit before any pixel buffer is allocated (the error names the file, its
 * size and data.max_image_pixels); libpng's own limits cap each side at
 * 65536. sg_png_decode reads from memory (the fuzz harness, tests).
 *
 * Every function returns SG_OK or SG_ERR_RUNTIME (core/status.h). On failure
 * the message (naming the file and the problem, with a hint) goes into
 * err[errlen] when err != NULL, else it is logged with SG_ERROR. Thread-safe:
 * workers call these concurrently.
 */
#ifndef SG_IO_PNG_H
#define SG_IO_PNG_H

#include <stddef.h>
#include <stdint.h>

#include "core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define SG_DATA_ERR_LEN 1024 /* a good size for err buffers */

/* The default pixel budget of one decoded image (data.max_image_pixels):
 * 2^26 = 64 Mpixel, 32 times a 2048x1024 Cityscapes frame (192 MiB as RGB). */
#define SG_IMAGE_MAX_PIXELS_DEFAULT (INT64_C(1) << 26)
/* The largest ancillary chunk (text, ICC profile) a PNG read buffers, in
 * bytes; a larger one is skipped with a warning. */
#define SG_PNG_CHUNK_MAX (8u << 20)

/* An 8-bit image: c = 3 (RGB, HWC contiguous) or c = 1 (mask). data is malloc'd. */
typedef struct sg_img {
    int h, w, c;
    uint8_t *data;
} sg_img;

void sg_img_free(sg_img *img); /* frees data, zeroes the struct; NULL-safe */

/* Reads any PNG as 8-bit RGB into *out (out->c = 3); default pixel limit. */
sg_status sg_png_read_rgb(const char *path, sg_img *out, char *err, size_t errlen);

/* Reads a label mask (gray or palette index, 8 or 16 bit) into *out (out->c = 1);
 * default pixel limit. */
sg_status sg_png_read_mask(const char *path, sg_img *out, char *err, size_t errlen);

/* As above with an explicit limit: mask != 0 reads a mask, else RGB; an image
 * of more than max_pixels pixels (h * w) is refused (max_pixels <= 0: no
 * limit but libpng's 65536 per side). */
sg_status sg_png_read(const char *path, int mask, int64_t max_pixels, sg_img *out, char *err,
                      size_t errlen);

/* Decodes a PNG held in memory (buf[0..len)); `name` stands for the file in
 * messages. Same conversions, limit and contract as sg_png_read. */
sg_status sg_png_decode(const void *buf, size_t len, const char *name, int mask, int64_t max_pixels,
                        sg_img *out, char *err, size_t errlen);

/* Reads only the header: size of the image. */
sg_status sg_png_read_size(const char *path, int *h, int *w, char *err, size_t errlen);

/* Writes 8-bit RGB (rgb is HWC). */
sg_status sg_png_write_rgb(const char *path, const uint8_t *rgb, int h, int w, char *err,
                           size_t errlen);

/* Writes 8-bit grayscale. */
sg_status sg_png_write_gray(const char *path, const uint8_t *v, int h, int w, char *err,
                            size_t errlen);

/* Writes 16-bit grayscale (v in host order), e.g. Cityscapes instanceIds. */
sg_status sg_png_write_gray16(const char *path, const uint16_t *v, int h, int w, char *err,
                              size_t errlen);

/* Writes an 8-bit palette PNG: pixels are indices, palette_rgb holds n_colors
 * r,g,b triples (1..256). Indices >= n_colors are written as they are (libpng
 * shows them black); readers of masks get the index back. The PLTE chunk
 * always has 256 entries (black beyond n_colors). */
sg_status sg_png_write_palette(const char *path, const uint8_t *idx, int h, int w,
                               const uint8_t *palette_rgb, int n_colors, char *err, size_t errlen);

#ifdef __cplusplus
}
#endif

#endif
