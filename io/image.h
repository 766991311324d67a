/* io/image.h - reading an image whatever its format: the format is taken
 * from the file's first bytes (PNG or JPEG), never from its name.
 *
 * Images (io/png.h, io/jpeg.h) decode to 8-bit RGB, HWC; label masks are
 * always PNG (sg_png_read with mask != 0). A file in another format (GIF,
 * BMP, WebP, TIFF, anything else) is an error naming the file and what its
 * first bytes look like. Every decode checks the pixel count against a limit
 * (data.max_image_pixels) before allocating.
 *
 * Returns SG_OK or SG_ERR_RUNTIME (core/status.h); the message goes into
 * err[errlen] when err != NULL, else it is logged. Thread-safe.
 */
#ifndef SG_IO_IMAGE_H
#define SG_IO_IMAGE_H

#include <stddef.h>
#include <stdint.h>

#include "core/status.h"
#include "io/png.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { SG_IMG_UNKNOWN = 0, SG_IMG_PNG = 1, SG_IMG_JPEG = 2 } sg_img_format;

/* The format of a file starting with head[0..n) (n >= 8 recommended). */
sg_img_format sg_image_format_of(const void *head, size_t n);

/* Reads the first bytes of `path` and returns its format in *fmt
 * (SG_IMG_UNKNOWN for a readable file of another kind: not an error here, and
 * nothing is reported). SG_ERR_RUNTIME only when the file cannot be opened or
 * read. */
sg_status sg_image_sniff(const char *path, sg_img_format *fmt, char *err, size_t errlen);

/* Reads a PNG or JPEG image as 8-bit RGB (out->c = 3); max_pixels > 0 bounds
 * h * w. */
sg_status sg_image_read_rgb(const char *path, int64_t max_pixels, sg_img *out, char *err,
                            size_t errlen);

/* The same from memory; `name` stands for the file in messages. */
sg_status sg_image_decode_rgb(const void *buf, size_t len, const char *name, int64_t max_pixels,
                              sg_img *out, char *err, size_t errlen);

/* Reads only the header of a PNG or JPEG: its size. */
sg_status sg_image_read_size(const char *path, int *h, int *w, char *err, size_t errlen);

#ifdef __cplusplus
}
#endif

#endif
