/* io/jpeg.h - JPEG reading and writing through libjpeg-turbo's libjpeg API
 * (setjmp error handling, no leaks on any error path).
 *
 * Reading gives 8-bit RGB, HWC (out->c = 3): YCbCr and RGB JPEGs as libjpeg
 * converts them, grayscale expanded to RGB, CMYK / YCCK converted with the
 * Adobe convention (inverted CMYK, as Photoshop writes it). JPEGs are images
 * only: label masks stay PNG (lossy compression changes label values).
 *
 * Untrusted input: the declared size is checked against max_pixels (h * w)
 * before any pixel or coefficient buffer is allocated (the error names the
 * file, its size and data.max_image_pixels); a file may have at most
 * SG_JPEG_MAX_SCANS scans, counted over the whole file before any is
 * decoded (a hostile file with thousands of tiny scans would otherwise take
 * minutes); a Huffman-coded file whose header claims more 8x8 blocks than
 * its data can code (at least one bit per block of the first scan: a flat
 * 8192x8192 image still takes about 400 KB) is refused before decoding; a
 * file that ends early (at its end or at a marker inside the image data) or
 * refines AC coefficients before its DC scan is an error (libjpeg would pad
 * it with gray and only warn). Other libjpeg warnings (extraneous bytes
 * before a marker) are tolerated, as PIL does.
 *
 * Every function returns SG_OK or SG_ERR_RUNTIME (core/status.h); the
 * message (naming the file, with a hint) goes into err[errlen] when err !=
 * NULL, else it is logged with SG_ERROR. Thread-safe.
 */
#ifndef SG_IO_JPEG_H
#define SG_IO_JPEG_H

#include <stddef.h>
#include <stdint.h>

#include "core/status.h"
#include "io/png.h"

#ifdef __cplusplus
extern "C" {
#endif

#define SG_JPEG_MAX_SCANS 500

/* Reads a JPEG file as 8-bit RGB; max_pixels <= 0: no pixel limit (libjpeg's
 * own limit is 65500 per side). */
sg_status sg_jpeg_read_rgb(const char *path, int64_t max_pixels, sg_img *out, char *err,
                           size_t errlen);

/* Decodes a JPEG held in memory (buf[0..len)); `name` stands for the file in
 * messages. Same contract as sg_jpeg_read_rgb. */
sg_status sg_jpeg_decode_rgb(const void *buf, size_t len, const char *name, int64_t max_pixels,
                             sg_img *out, char *err, size_t errlen);

/* Reads only the header: the image size. */
sg_status sg_jpeg_read_size(const char *path, int *h, int *w, char *err, size_t errlen);

/* Writes 8-bit RGB (HWC) as a baseline JPEG of the given quality (1..100,
 * 4:2:0 chroma subsampling, as most cameras and datasets). */
sg_status sg_jpeg_write_rgb(const char *path, const uint8_t *rgb, int h, int w, int quality,
                            char *err, size_t errlen);

#ifdef __cplusplus
}
#endif

#endif
