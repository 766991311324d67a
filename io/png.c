/* io/png.c - see png.h. libpng with setjmp error handling; every path frees
 * what it allocated. */
#include "io/png.h"

#include <errno.h>
#include <png.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "io/image_err.h"

/* Without a pixel budget (max_pixels <= 0, direct callers only) a side over
 * this is refused: no real dataset image is that wide. */
#define PNG_SIDE_MAX 65536

void sg_img_free(sg_img *img) {
    if (!img) return;
    free(img->data);
    memset(img, 0, sizeof *img);
}

/* libpng reports errors through this; the message lands in ctx and we jump. */
typedef struct png_ctx {
    char msg[256];
} png_ctx;

static void on_png_error(png_structp png, png_const_charp msg) {
    png_ctx *c = (png_ctx *)png_get_error_ptr(png);
    snprintf(c->msg, sizeof c->msg, "%s", msg);
    png_longjmp(png, 1);
}
static void on_png_warning(png_structp png, png_const_charp msg) {
    (void)png;
    (void)msg; /* warnings (e.g. known-incorrect sRGB profile) are not errors */
}

enum { READ_RGB, READ_MASK, READ_HEADER };

/* State that must survive longjmp lives in this struct (not in locals). */
typedef struct read_state {
    png_ctx ctx; /* first: libpng's error pointer is the state itself */
    FILE *f;
    const uint8_t *mem; /* memory source (sg_png_decode): mem[0..mem_len), read at mem_pos */
    size_t mem_len, mem_pos;
    png_structp png;
    png_infop info;
    uint8_t *pixels;
    png_bytep *rows;
    uint8_t *wide; /* 16-bit mask rows, big-endian as stored */
} read_state;

static void read_cleanup(read_state *s) {
    if (s->png) png_destroy_read_struct(&s->png, s->info ? &s->info : NULL, NULL);
    if (s->f) fclose(s->f);
    free(s->pixels);
    free(s->rows);
    free(s->wide);
    free(s);
}

/* libpng's read callback for a memory source. */
static void mem_read(png_structp png, png_bytep dst, size_t n) {
    read_state *s = (read_state *)png_get_io_ptr(png);
    if (n > s->mem_len - s->mem_pos) png_error(png, "unexpected end of data (truncated file)");
    memcpy(dst, s->mem + s->mem_pos, n);
    s->mem_pos += n;
}

/* Decodes from a file (path, mem == NULL) or from memory (mem[0..mem_len),
 * named `path` in messages). max_pixels > 0 bounds h * w before any pixel
 * buffer is allocated. */
static sg_status read_png(const char *path, const uint8_t *mem, size_t mem_len, int mode,
                          int64_t max_pixels, sg_img *out, char *err, size_t errlen) {
    /* Heap state: what setjmp's longjmp must see is never a modified local. */
    read_state *s = calloc(1, sizeof *s);
    if (out) memset(out, 0, sizeof *out);
    if (!s) {
        sg_report(err, errlen, "out of memory opening %s", path);
        return SG_ERR_RUNTIME;
    }

    uint8_t sig[8];
    size_t got;
    if (mem) {
        s->mem = mem;
        s->mem_len = mem_len;
        got = mem_len < 8 ? mem_len : 8;
        memcpy(sig, mem, got);
        s->mem_pos = got;
    } else {
        s->f = fopen(path, "rb");
        if (!s->f) {
            sg_report(err, errlen, "cannot open PNG %s: %s (check the path and data.root)", path,
                      strerror(errno));
            read_cleanup(s);
            return SG_ERR_RUNTIME;
        }
        got = fread(sig, 1, 8, s->f);
    }
    if (got >= 3 && sig[0] == 0xFF && sig[1] == 0xD8 && sig[2] == 0xFF) {
        /* images go through io/image.h; only masks (and direct callers) get here */
        sg_report(err, errlen,
                  "%s is a JPEG file, not a PNG: label masks must be PNG (JPEG's lossy "
                  "compression changes label values); use the dataset's PNG masks",
                  path);
        read_cleanup(s);
        return SG_ERR_RUNTIME;
    }
    if (got != 8 || png_sig_cmp(sig, 0, 8) != 0) {
        sg_report(err, errlen, "%s is not a PNG file (%s; re-create or re-download it)", path,
                  got != 8 ? "shorter than the 8-byte signature" : "bad signature");
        read_cleanup(s);
        return SG_ERR_RUNTIME;
    }
    s->png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &s->ctx, on_png_error, on_png_warning);
    if (!s->png) {
        sg_report(err, errlen, "png_create_read_struct failed for %s (out of memory?)", path);
        read_cleanup(s);
        return SG_ERR_RUNTIME;
    }
    s->info = png_create_info_struct(s->png);
    if (!s->info) {
        sg_report(err, errlen, "png_create_info_struct failed for %s (out of memory?)", path);
        read_cleanup(s);
        return SG_ERR_RUNTIME;
    }
    if (setjmp(png_jmpbuf(s->png))) {
        sg_report(err, errlen, "corrupt or truncated PNG %s: %s (re-create or re-download it)",
                  path, s->ctx.msg[0] ? s->ctx.msg : "libpng error");
        read_cleanup(s);
        if (out) memset(out, 0, sizeof *out);
        return SG_ERR_RUNTIME;
    }
    if (mem) png_set_read_fn(s->png, s, mem_read);
    else png_init_io(s->png, s->f);
    png_set_sig_bytes(s->png, 8);
    /* Dimensions are bounded below, by the pixel budget (data.max_image_pixels)
     * with its own message; libpng's user limits (1e6 a side by default,
     * 65536 here before) would refuse a wide header as "Invalid IHDR data"
     * first. PNG's own maximum stays: 2^31 - 1 a side. */
    png_set_user_limits(s->png, 0x7fffffff, 0x7fffffff);
    /* libpng buffers a text, ICC, sPLT, eXIf, pCAL or sCAL chunk whole, at
     * the length its header claims, before reading it: a 98-byte file with
     * an iTXt header of 1.9 GB allocated 1.9 GB (libpng 1.6.39 checks no
     * limit there). segtrain uses none of them, so they are skipped unread
     * (libpng discards a skipped chunk in small pieces). */
    static const png_byte skipped[] = "tEXt\0zTXt\0iTXt\0iCCP\0sPLT\0eXIf\0pCAL\0sCAL";
    png_set_keep_unknown_chunks(s->png, PNG_HANDLE_CHUNK_NEVER, skipped, 8);
    png_set_chunk_malloc_max(s->png, SG_PNG_CHUNK_MAX);
    png_read_info(s->png, s->info);

    png_uint_32 w = png_get_image_width(s->png, s->info);
    png_uint_32 h = png_get_image_height(s->png, s->info);
    int depth = png_get_bit_depth(s->png, s->info);
    int ctype = png_get_color_type(s->png, s->info);
    if (mode == READ_HEADER) {
        out->h = (int)h;
        out->w = (int)w;
        read_cleanup(s);
        return SG_OK;
    }
    /* The pixel budget, before anything proportional to the image is
     * allocated: a 200 KB file can declare 65535 x 65535 pixels. */
    if (sg_img_check_pixels(path, "PNG", h, w, max_pixels, err, errlen) != SG_OK) {
        read_cleanup(s);
        return SG_ERR_RUNTIME;
    }
    if (max_pixels <= 0 && (h > PNG_SIDE_MAX || w > PNG_SIDE_MAX)) { /* no budget given */
        sg_report(err, errlen,
                  "%s: the PNG is %ux%u (HxW), over %d pixels a side, and no pixel limit was "
                  "given: a corrupt or hostile header (pass a limit, data.max_image_pixels)",
                  path, (unsigned)h, (unsigned)w, PNG_SIDE_MAX);
        read_cleanup(s);
        return SG_ERR_RUNTIME;
    }

    if (mode == READ_RGB) {
        if (ctype == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(s->png);
        if (ctype == PNG_COLOR_TYPE_GRAY && depth < 8) png_set_expand_gray_1_2_4_to_8(s->png);
        if (ctype == PNG_COLOR_TYPE_GRAY || ctype == PNG_COLOR_TYPE_GRAY_ALPHA)
            png_set_gray_to_rgb(s->png);
        if (depth == 16) png_set_scale_16(s->png);
        /* Transparency is dropped, not blended. png_set_palette_to_rgb also
         * turns a palette's tRNS chunk into an alpha channel, so that alpha
         * is stripped too (without it a palette PNG with transparency came
         * out as 4 channels and was refused). */
        if ((ctype & PNG_COLOR_MASK_ALPHA) || png_get_valid(s->png, s->info, PNG_INFO_tRNS))
            png_set_strip_alpha(s->png);
    } else {
        if (ctype == PNG_COLOR_TYPE_GRAY_ALPHA) {
            png_set_strip_alpha(s->png); /* the gray value is the label */
        } else if (ctype != PNG_COLOR_TYPE_GRAY && ctype != PNG_COLOR_TYPE_PALETTE) {
            sg_report(
                err, errlen,
                "mask %s is a colour PNG (colour type %d); a label mask must be 8/16-bit "
                "grayscale (alpha ignored) or palette (use the labelIds/labelTrainIds files, not _color)",
                path, ctype);
            read_cleanup(s);
            return SG_ERR_RUNTIME;
        }
        /* Palette: keep the index. Packed (1/2/4-bit) gray or index -> one byte each. */
        if (depth < 8) png_set_packing(s->png);
    }
    int passes = png_set_interlace_handling(s->png);
    (void)passes;
    png_read_update_info(s->png, s->info);

    size_t rowbytes = png_get_rowbytes(s->png, s->info);
    int channels = png_get_channels(s->png, s->info);
    int want_c = mode == READ_RGB ? 3 : 1;
    int out_depth = png_get_bit_depth(s->png, s->info);
    if (channels != want_c || (mode == READ_RGB && out_depth != 8)) {
        sg_report(err, errlen,
                  "%s: unsupported PNG layout (colour type %d, depth %d -> %d channels)", path,
                  ctype, depth, channels);
        read_cleanup(s);
        return SG_ERR_RUNTIME;
    }
    size_t npix = (size_t)h * w;
    s->rows = malloc(sizeof(png_bytep) * h);
    if (out_depth == 16) {
        s->wide = malloc(npix * 2);
        if (!s->rows || !s->wide) {
            sg_report(err, errlen, "out of memory reading %s (%ux%u)", path, w, h);
            read_cleanup(s);
            return SG_ERR_RUNTIME;
        }
        for (png_uint_32 y = 0; y < h; y++) s->rows[y] = s->wide + (size_t)y * w * 2;
    } else {
        s->pixels = malloc(npix * want_c);
        if (!s->rows || !s->pixels || rowbytes != (size_t)w * want_c) {
            sg_report(err, errlen, "out of memory reading %s (%ux%u)", path, w, h);
            read_cleanup(s);
            return SG_ERR_RUNTIME;
        }
        for (png_uint_32 y = 0; y < h; y++) s->rows[y] = s->pixels + (size_t)y * w * want_c;
    }
    png_read_image(s->png, s->rows);
    png_read_end(s->png, NULL);

    if (out_depth == 16) { /* 16-bit mask: keep only if every value fits 0..255 */
        s->pixels = malloc(npix);
        if (!s->pixels) {
            sg_report(err, errlen, "out of memory reading %s", path);
            read_cleanup(s);
            return SG_ERR_RUNTIME;
        }
        for (size_t i = 0; i < npix; i++) {
            const uint8_t *b = s->wide + 2 * i; /* PNG stores 16-bit big-endian */
            unsigned v = (unsigned)b[0] << 8 | b[1];
            if (v > 255) {
                sg_report(err, errlen,
                          "16-bit mask %s has label %u at pixel (y=%zu, x=%zu), above 255: "
                          "segtrain keeps labels in 8 bits; remap the mask to 0..255",
                          path, v, i / w, i % w);
                read_cleanup(s);
                return SG_ERR_RUNTIME;
            }
            s->pixels[i] = (uint8_t)v;
        }
    }
    out->h = (int)h;
    out->w = (int)w;
    out->c = want_c;
    out->data = s->pixels;
    s->pixels = NULL; /* ownership moves to out */
    read_cleanup(s);
    return SG_OK;
}

sg_status sg_png_read_rgb(const char *path, sg_img *out, char *err, size_t errlen) {
    return read_png(path, NULL, 0, READ_RGB, SG_IMAGE_MAX_PIXELS_DEFAULT, out, err, errlen);
}
sg_status sg_png_read_mask(const char *path, sg_img *out, char *err, size_t errlen) {
    return read_png(path, NULL, 0, READ_MASK, SG_IMAGE_MAX_PIXELS_DEFAULT, out, err, errlen);
}
sg_status sg_png_read(const char *path, int mask, int64_t max_pixels, sg_img *out, char *err,
                      size_t errlen) {
    return read_png(path, NULL, 0, mask ? READ_MASK : READ_RGB, max_pixels, out, err, errlen);
}
sg_status sg_png_decode(const void *buf, size_t len, const char *name, int mask, int64_t max_pixels,
                        sg_img *out, char *err, size_t errlen) {
    static const uint8_t empty[1];
    return read_png(name ? name : "(memory)", len ? (const uint8_t *)buf : empty, len,
                    mask ? READ_MASK : READ_RGB, max_pixels, out, err, errlen);
}
sg_status sg_png_read_size(const char *path, int *h, int *w, char *err, size_t errlen) {
    sg_img hdr;
    if (read_png(path, NULL, 0, READ_HEADER, 0, &hdr, err, errlen) != 0) return SG_ERR_RUNTIME;
    *h = hdr.h;
    *w = hdr.w;
    return SG_OK;
}

/* ---- writing ---- */

typedef struct write_state {
    png_ctx ctx;
    FILE *f;
    png_structp png;
    png_infop info;
    png_colorp pal;
} write_state;

static void write_cleanup(write_state *s) {
    if (s->png) png_destroy_write_struct(&s->png, s->info ? &s->info : NULL);
    if (s->f) fclose(s->f);
    free(s->pal);
    free(s);
}

/* depth 8, or 16 for gray (px then holds host-order uint16 values). */
static sg_status write_png(const char *path, const uint8_t *px, int h, int w, int ctype, int depth,
                           const uint8_t *palette_rgb, int n_colors, char *err, size_t errlen) {
    int c = (ctype == PNG_COLOR_TYPE_RGB ? 3 : 1) * (depth == 16 ? 2 : 1); /* bytes/pixel */
    if (h <= 0 || w <= 0 || !px) {
        sg_report(err, errlen, "cannot write %s: empty image (%dx%d)", path, h, w);
        return SG_ERR_RUNTIME;
    }
    if (ctype == PNG_COLOR_TYPE_PALETTE && (n_colors < 1 || n_colors > 256 || !palette_rgb)) {
        sg_report(err, errlen, "cannot write %s: palette needs 1..256 colours (got %d)", path,
                  n_colors);
        return SG_ERR_RUNTIME;
    }
    write_state *s = calloc(1, sizeof *s); /* heap: survives longjmp intact */
    if (!s) {
        sg_report(err, errlen, "out of memory writing %s", path);
        return SG_ERR_RUNTIME;
    }
    s->f = fopen(path, "wb");
    if (!s->f) {
        sg_report(err, errlen,
                  "cannot create %s: %s (check that the directory exists and is writable)", path,
                  strerror(errno));
        write_cleanup(s);
        return SG_ERR_RUNTIME;
    }
    s->png = png_create_write_struct(PNG_LIBPNG_VER_STRING, &s->ctx, on_png_error, on_png_warning);
    if (s->png) s->info = png_create_info_struct(s->png);
    if (!s->png || !s->info) {
        sg_report(err, errlen, "libpng initialisation failed writing %s (out of memory?)", path);
        write_cleanup(s);
        return SG_ERR_RUNTIME;
    }
    if (setjmp(png_jmpbuf(s->png))) {
        sg_report(err, errlen, "writing PNG %s failed: %s (disk full?)", path,
                  s->ctx.msg[0] ? s->ctx.msg : "libpng error");
        write_cleanup(s);
        return SG_ERR_RUNTIME;
    }
    png_init_io(s->png, s->f);
    /* Level 1: masks and synthetic images compress well; speed matters more. */
    png_set_compression_level(s->png, 1);
    png_set_IHDR(s->png, s->info, (png_uint_32)w, (png_uint_32)h, depth, ctype, PNG_INTERLACE_NONE,
                 PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
    if (ctype == PNG_COLOR_TYPE_PALETTE) {
        /* Always 256 entries (extra ones black): any index is then valid PNG,
         * e.g. 255 = ignore in a prediction or label mask. */
        s->pal = calloc(256, sizeof(png_color));
        if (!s->pal) png_error(s->png, "out of memory");
        for (int i = 0; i < n_colors; i++) {
            s->pal[i].red = palette_rgb[3 * i];
            s->pal[i].green = palette_rgb[3 * i + 1];
            s->pal[i].blue = palette_rgb[3 * i + 2];
        }
        png_set_PLTE(s->png, s->info, s->pal, 256);
    }
    png_write_info(s->png, s->info);
    if (depth == 16) {
        const uint16_t probe = 1; /* PNG is big-endian; swap on little-endian hosts */
        if (*(const uint8_t *)&probe == 1) png_set_swap(s->png);
    }
    for (int y = 0; y < h; y++) png_write_row(s->png, (png_const_bytep)(px + (size_t)y * w * c));
    png_write_end(s->png, NULL);
    png_destroy_write_struct(&s->png, &s->info);
    FILE *f = s->f;
    s->f = NULL;
    write_cleanup(s);
    if (fclose(f) != 0) {
        sg_report(err, errlen, "closing %s failed: %s (disk full?)", path, strerror(errno));
        return SG_ERR_RUNTIME;
    }
    return SG_OK;
}

sg_status sg_png_write_rgb(const char *path, const uint8_t *rgb, int h, int w, char *err,
                           size_t errlen) {
    return write_png(path, rgb, h, w, PNG_COLOR_TYPE_RGB, 8, NULL, 0, err, errlen);
}
sg_status sg_png_write_gray(const char *path, const uint8_t *v, int h, int w, char *err,
                            size_t errlen) {
    return write_png(path, v, h, w, PNG_COLOR_TYPE_GRAY, 8, NULL, 0, err, errlen);
}
sg_status sg_png_write_gray16(const char *path, const uint16_t *v, int h, int w, char *err,
                              size_t errlen) {
    return write_png(path, (const uint8_t *)v, h, w, PNG_COLOR_TYPE_GRAY, 16, NULL, 0, err, errlen);
}
sg_status sg_png_write_palette(const char *path, const uint8_t *idx, int h, int w,
                               const uint8_t *palette_rgb, int n_colors, char *err, size_t errlen) {
    return write_png(path, idx, h, w, PNG_COLOR_TYPE_PALETTE, 8, palette_rgb, n_colors, err,
                     errlen);
}
