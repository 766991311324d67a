/* io/image_err.h - the two checks every image decoder (io/png.c,
 * io/jpeg.c, io/image.c) reports the same way, written once. Internal to
 * data/: not part of the image API.
 *
 * sg_img_report formats a message into err[errlen] when err != NULL and
 * errlen > 0 (the caller shows it), else logs it with SG_ERROR: the error
 * contract the decoders' headers document. Messages longer than
 * SG_DATA_ERR_LEN - 1 bytes are cut.
 *
 * sg_img_check_pixels applies the pixel budget (data.max_image_pixels) to a
 * header's h x w (each below 2^31, as PNG and JPEG headers allow) before
 * anything proportional to the image is allocated:
 * SG_OK when max_pixels <= 0 or h * w <= max_pixels; else SG_ERR_RUNTIME
 * after reporting "<path>: the <kind> is HxW (HxW) = N pixels, above the
 * limit of M (data.max_image_pixels): ..." through sg_img_report.
 */
#ifndef SG_DATA_IMAGE_ERR_H
#define SG_DATA_IMAGE_ERR_H

#include <stddef.h>
#include <stdint.h>

#include "core/status.h"

void sg_img_report(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

sg_status sg_img_check_pixels(const char *path, const char *kind, int64_t h, int64_t w,
                              int64_t max_pixels, char *err, size_t errlen);

#endif
