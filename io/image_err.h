/* io/image_err.h - the pixel-budget check every image decoder (io/png.c,
 * io/jpeg.c, io/image.c) applies the same way, written once. Internal to
 * io/: not part of the image API. Errors go through sg_report (core/log.h):
 * into the caller's err buffer, or logged.
 *
 * sg_img_check_pixels applies the pixel budget (data.max_image_pixels) to a
 * header's h x w (each below 2^31, as PNG and JPEG headers allow) before
 * anything proportional to the image is allocated:
 * SG_OK when max_pixels <= 0 or h * w <= max_pixels; else SG_ERR_RUNTIME
 * after reporting "<path>: the <kind> is HxW (HxW) = N pixels, above the
 * limit of M (data.max_image_pixels): ..." through sg_report.
 */
#ifndef SG_IO_IMAGE_ERR_H
#define SG_IO_IMAGE_ERR_H

#include <stddef.h>
#include <stdint.h>

#include "core/status.h"

sg_status sg_img_check_pixels(const char *path, const char *kind, int64_t h, int64_t w,
                              int64_t max_pixels, char *err, size_t errlen);

#endif
