/* io/jpeg.c - see jpeg.h. libjpeg (libjpeg-turbo) with setjmp error
 * handling; everything that must survive the longjmp lives in a heap state
 * struct, and every path frees what it allocated. */
#include "io/jpeg.h"

#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* jpeglib.h needs FILE and size_t declared first. */
#include <jerror.h>
#include <jpeglib.h>

#include "core/log.h"
#include "io/image_err.h"

/* The error manager: libjpeg's fields first, then our jump target and the
 * message of the error that made us jump. */
typedef struct jerr_mgr {
    struct jpeg_error_mgr pub;
    jmp_buf jump;
    char msg[JMSG_LENGTH_MAX + 64];
} jerr_mgr;

static void on_jpeg_error(j_common_ptr cinfo) {
    jerr_mgr *e = (jerr_mgr *)cinfo->err;
    (*cinfo->err->format_message)(cinfo, e->msg);
    longjmp(e->jump, 1);
}

/* Warnings (msg_level -1): a file that ends early (at its end, or at a
 * marker inside the image data: "premature end of data segment") is an
 * error, as is an AC scan before its DC scan: libjpeg would fill the rest
 * with gray and only warn, and a forged header would then make a huge image
 * of nothing. Others (e.g. extraneous bytes before a marker) are tolerated.
 * Trace messages (level >= 0) are ignored. */
static void on_jpeg_message(j_common_ptr cinfo, int msg_level) {
    if (msg_level >= 0) return;
    int code = cinfo->err->msg_code;
    if (code == JWRN_JPEG_EOF || code == JWRN_HIT_MARKER || code == JWRN_BOGUS_PROGRESSION) {
        jerr_mgr *e = (jerr_mgr *)cinfo->err;
        (*cinfo->err->format_message)(cinfo, e->msg);
        longjmp(e->jump, 1);
    }
    cinfo->err->num_warnings++;
}

/* A progressive file with thousands of scans costs minutes of CPU for a
 * tiny image; libjpeg-turbo's own tools stop at 500 scans. */
typedef struct progress_mgr {
    struct jpeg_progress_mgr pub;
    int too_many_scans;
} progress_mgr;

static void on_progress(j_common_ptr cinfo) {
    j_decompress_ptr d = (j_decompress_ptr)cinfo;
    if (cinfo->is_decompressor && d->input_scan_number > SG_JPEG_MAX_SCANS) {
        progress_mgr *p = (progress_mgr *)cinfo->progress;
        p->too_many_scans = 1;
        jerr_mgr *e = (jerr_mgr *)cinfo->err;
        snprintf(e->msg, sizeof e->msg, "more than %d progressive scans (a hostile file?)",
                 SG_JPEG_MAX_SCANS);
        longjmp(e->jump, 1);
    }
}

enum { JREAD_RGB, JREAD_HEADER };

/* The number of scans (SOS markers) in buf[0..len), walking the marker
 * segments and skipping each scan's entropy-coded data (where 0xFF is
 * followed by 0x00 stuffing, RSTn or fill 0xFF), so that a marker's payload
 * or the image data never counts. Stops at EOI, at the end, or where the
 * structure breaks (libjpeg reports that when it gets there). Linear. */
static int count_scans(const uint8_t *buf, size_t len) {
    size_t i = 2; /* after SOI */
    int scans = 0;
    while (i + 1 < len) {
        if (buf[i] != 0xFF) return scans; /* libjpeg's error, not ours */
        uint8_t m = buf[i + 1];
        i += 2;
        if (m == 0xFF) {
            i--; /* fill byte: the marker code is next */
            continue;
        }
        if (m == 0xD9) return scans;                         /* EOI */
        if (m == 0x01 || (m >= 0xD0 && m <= 0xD7)) continue; /* no length */
        if (i + 1 >= len) return scans;
        size_t seg = (size_t)buf[i] << 8 | buf[i + 1];
        if (seg < 2) return scans;
        i += seg;
        if (m != 0xDA) continue;
        if (++scans > SG_JPEG_MAX_SCANS) return scans;
        /* the entropy-coded data, up to the next real marker */
        while (i < len) {
            const uint8_t *ff = memchr(buf + i, 0xFF, len - i);
            if (!ff) return scans;
            i = (size_t)(ff - buf);
            if (i + 1 >= len) return scans;
            uint8_t n = buf[i + 1];
            if (n == 0x00 || (n >= 0xD0 && n <= 0xD7)) {
                i += 2;
            } else if (n == 0xFF) {
                i++;
            } else {
                break; /* a marker: the outer loop reads it */
            }
        }
    }
    return scans;
}

/* A Huffman-coded file's first scan (a DC scan: Ss = 0) codes every 8x8
 * block of its components with at least one bit (the DC difference's code;
 * a baseline block also needs its AC end-of-block code: 2 bits). The bits
 * it needs, from the header alone; 0 when no bound applies (arithmetic
 * coding, where a flat image may take less than a bit per block). */
static uint64_t first_scan_min_bits(j_decompress_ptr c) {
    if (c->arith_code) return 0;
    uint64_t bits = 0;
    for (int k = 0; k < c->comps_in_scan; k++) {
        const jpeg_component_info *ci = c->cur_comp_info[k];
        /* the component's size in blocks (libjpeg's initial_setup) */
        uint64_t bw = ((uint64_t)c->image_width * (uint64_t)ci->h_samp_factor +
                       (uint64_t)c->max_h_samp_factor * DCTSIZE - 1) /
                      ((uint64_t)c->max_h_samp_factor * DCTSIZE);
        uint64_t bh = ((uint64_t)c->image_height * (uint64_t)ci->v_samp_factor +
                       (uint64_t)c->max_v_samp_factor * DCTSIZE - 1) /
                      ((uint64_t)c->max_v_samp_factor * DCTSIZE);
        bits += bw * bh;
    }
    return bits;
}

typedef struct jread_state {
    jerr_mgr jerr;
    progress_mgr prog;
    struct jpeg_decompress_struct cinfo;
    int cinfo_ready;
    const uint8_t *map; /* the file, mapped read-only */
    size_t map_len;
    const uint8_t *buf; /* what is decoded: the map or the caller's memory */
    size_t len;
    uint8_t *pixels; /* the RGB result */
    uint8_t *row;    /* one CMYK row */
} jread_state;

static void jread_cleanup(jread_state *s) {
    if (s->cinfo_ready) jpeg_destroy_decompress(&s->cinfo);
    if (s->map) munmap((void *)s->map, s->map_len);
    free(s->pixels);
    free(s->row);
    free(s);
}

/* Decodes from a file (mem == NULL) or memory; see jpeg.h. */
static sg_status read_jpeg(const char *path, const uint8_t *mem, size_t mem_len, int mode,
                           int64_t max_pixels, sg_img *out, char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    jread_state *s = calloc(1, sizeof *s);
    if (!s) {
        sg_report(err, errlen, "out of memory opening %s", path);
        return SG_ERR_RUNTIME;
    }
    if (!mem) {
        /* mapped, not read: the scans are counted over the whole file before
         * decoding, and only the pages libjpeg reads are loaded */
        int fd = open(path, O_RDONLY);
        struct stat st;
        if (fd < 0 || fstat(fd, &st) != 0) {
            sg_report(err, errlen, "cannot open JPEG %s: %s (check the path and data.root)", path,
                      strerror(errno));
            if (fd >= 0) close(fd);
            jread_cleanup(s);
            return SG_ERR_RUNTIME;
        }
        if (!S_ISREG(st.st_mode) || st.st_size == 0) {
            sg_report(err, errlen, "%s is %s: not a JPEG file (re-create or re-download it)", path,
                      S_ISREG(st.st_mode) ? "empty" : "not a regular file");
            close(fd);
            jread_cleanup(s);
            return SG_ERR_RUNTIME;
        }
        void *m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
        int map_errno = errno;
        close(fd);
        if (m == MAP_FAILED) {
            sg_report(err, errlen, "cannot map JPEG %s (%lld bytes): %s", path,
                      (long long)st.st_size, strerror(map_errno));
            jread_cleanup(s);
            return SG_ERR_RUNTIME;
        }
        s->map = m;
        s->map_len = (size_t)st.st_size;
        s->buf = s->map;
        s->len = s->map_len;
    } else if (mem_len == 0) {
        sg_report(err, errlen, "%s is empty: not a JPEG file (re-create or re-download it)", path);
        jread_cleanup(s);
        return SG_ERR_RUNTIME;
    } else {
        s->buf = mem;
        s->len = mem_len;
    }
    s->cinfo.err = jpeg_std_error(&s->jerr.pub);
    s->jerr.pub.error_exit = on_jpeg_error;
    s->jerr.pub.emit_message = on_jpeg_message;
    if (setjmp(s->jerr.jump)) {
        sg_report(err, errlen, "corrupt or truncated JPEG %s: %s (re-create or re-download it)",
                  path, s->jerr.msg[0] ? s->jerr.msg : "libjpeg error");
        jread_cleanup(s);
        memset(out, 0, sizeof *out);
        return SG_ERR_RUNTIME;
    }
    jpeg_create_decompress(&s->cinfo);
    s->cinfo_ready = 1;
    s->prog.pub.progress_monitor = on_progress;
    s->cinfo.progress = &s->prog.pub;
    jpeg_mem_src(&s->cinfo, s->buf, (unsigned long)s->len);
    jpeg_read_header(&s->cinfo, TRUE);
    JDIMENSION w = s->cinfo.image_width, h = s->cinfo.image_height;
    if (mode == JREAD_HEADER) {
        out->h = (int)h;
        out->w = (int)w;
        jread_cleanup(s);
        return SG_OK;
    }
    /* The pixel budget, before libjpeg allocates anything proportional to
     * the image (a progressive file's coefficients, the output). */
    if (sg_img_check_pixels(path, "JPEG", h, w, max_pixels, err, errlen) != SG_OK) {
        jread_cleanup(s);
        return SG_ERR_RUNTIME;
    }
    /* A file with thousands of tiny scans costs minutes of decoding: they
     * are counted before any is decoded. */
    int scans = count_scans(s->buf, s->len);
    if (scans > SG_JPEG_MAX_SCANS) {
        sg_report(err, errlen,
                  "JPEG %s has more than %d scans (a normal progressive JPEG has about 10): a "
                  "hostile or broken file; re-encode it",
                  path, SG_JPEG_MAX_SCANS);
        jread_cleanup(s);
        return SG_ERR_RUNTIME;
    }
    /* A header claiming far more blocks than the data left can code (a
     * 634-byte file saying 8192x8192) is refused before anything of that
     * size is allocated or decoded. */
    if (s->cinfo.progressive_mode && s->cinfo.Ss != 0) {
        sg_report(err, errlen,
                  "corrupt JPEG %s: its first scan refines AC coefficients before any DC scan "
                  "(re-create or re-download it)",
                  path);
        jread_cleanup(s);
        return SG_ERR_RUNTIME;
    }
    uint64_t need_bits = first_scan_min_bits(&s->cinfo);
    uint64_t have = s->cinfo.src->bytes_in_buffer;
    if (need_bits > have * 8) {
        sg_report(err, errlen,
                  "corrupt JPEG %s: its header says %ux%u, whose first scan needs at least %llu "
                  "bytes of image data (a bit per 8x8 block), but only %llu bytes follow: "
                  "truncated, or a forged header (re-create or re-download it)",
                  path, w, h, (unsigned long long)((need_bits + 7) / 8), (unsigned long long)have);
        jread_cleanup(s);
        return SG_ERR_RUNTIME;
    }
    J_COLOR_SPACE in = s->cinfo.jpeg_color_space;
    int cmyk = in == JCS_CMYK || in == JCS_YCCK;
    s->cinfo.out_color_space = cmyk ? JCS_CMYK : JCS_RGB;
    jpeg_start_decompress(&s->cinfo);
    int nc = s->cinfo.output_components;
    if (nc != (cmyk ? 4 : 3) || s->cinfo.output_width != w || s->cinfo.output_height != h) {
        sg_report(err, errlen, "%s: unsupported JPEG layout (colour space %d, %d components)", path,
                  (int)in, nc);
        jread_cleanup(s);
        return SG_ERR_RUNTIME;
    }
    size_t npix = (size_t)h * w;
    s->pixels = malloc(npix * 3);
    if (cmyk) s->row = malloc((size_t)w * 4);
    if (!s->pixels || (cmyk && !s->row)) {
        sg_report(err, errlen, "out of memory reading %s (%ux%u)", path, w, h);
        jread_cleanup(s);
        return SG_ERR_RUNTIME;
    }
    while (s->cinfo.output_scanline < h) {
        JDIMENSION y = s->cinfo.output_scanline;
        uint8_t *dst = s->pixels + (size_t)y * w * 3;
        JSAMPROW r = cmyk ? s->row : dst;
        if (jpeg_read_scanlines(&s->cinfo, &r, 1) != 1) {
            sg_report(err, errlen, "corrupt or truncated JPEG %s: no data for row %u of %u", path,
                      y, h);
            jread_cleanup(s);
            return SG_ERR_RUNTIME;
        }
        if (cmyk) {
            /* Adobe files store CMYK inverted: the value is already 255 - C,
             * so R = (255 - C) * (255 - K) / 255 = c * k / 255. */
            int inverted = s->cinfo.saw_Adobe_marker;
            for (JDIMENSION x = 0; x < w; x++) {
                const uint8_t *p = s->row + 4 * (size_t)x;
                int k = inverted ? p[3] : 255 - p[3];
                for (int c = 0; c < 3; c++) {
                    int v = inverted ? p[c] : 255 - p[c];
                    dst[3 * (size_t)x + c] = (uint8_t)((v * k + 127) / 255);
                }
            }
        }
    }
    jpeg_finish_decompress(&s->cinfo);
    out->h = (int)h;
    out->w = (int)w;
    out->c = 3;
    out->data = s->pixels;
    s->pixels = NULL; /* ownership moves to out */
    jread_cleanup(s);
    return SG_OK;
}

sg_status sg_jpeg_read_rgb(const char *path, int64_t max_pixels, sg_img *out, char *err,
                           size_t errlen) {
    return read_jpeg(path, NULL, 0, JREAD_RGB, max_pixels, out, err, errlen);
}

sg_status sg_jpeg_decode_rgb(const void *buf, size_t len, const char *name, int64_t max_pixels,
                             sg_img *out, char *err, size_t errlen) {
    static const uint8_t empty[1];
    return read_jpeg(name ? name : "(memory)", len ? (const uint8_t *)buf : empty, len, JREAD_RGB,
                     max_pixels, out, err, errlen);
}

sg_status sg_jpeg_read_size(const char *path, int *h, int *w, char *err, size_t errlen) {
    sg_img hdr;
    if (read_jpeg(path, NULL, 0, JREAD_HEADER, 0, &hdr, err, errlen) != SG_OK)
        return SG_ERR_RUNTIME;
    *h = hdr.h;
    *w = hdr.w;
    return SG_OK;
}

/* ---- writing ---- */

typedef struct jwrite_state {
    jerr_mgr jerr;
    struct jpeg_compress_struct cinfo;
    int cinfo_ready;
    FILE *f;
} jwrite_state;

static void jwrite_cleanup(jwrite_state *s) {
    if (s->cinfo_ready) jpeg_destroy_compress(&s->cinfo);
    if (s->f) fclose(s->f);
    free(s);
}

sg_status sg_jpeg_write_rgb(const char *path, const uint8_t *rgb, int h, int w, int quality,
                            char *err, size_t errlen) {
    if (h <= 0 || w <= 0 || h > 65500 || w > 65500 || !rgb) {
        sg_report(err, errlen, "cannot write %s: image size %dx%d outside JPEG's 1..65500", path, h,
                  w);
        return SG_ERR_RUNTIME;
    }
    if (quality < 1 || quality > 100) {
        sg_report(err, errlen, "cannot write %s: JPEG quality %d outside 1..100", path, quality);
        return SG_ERR_RUNTIME;
    }
    jwrite_state *s = calloc(1, sizeof *s);
    if (!s) {
        sg_report(err, errlen, "out of memory writing %s", path);
        return SG_ERR_RUNTIME;
    }
    s->f = fopen(path, "wb");
    if (!s->f) {
        sg_report(err, errlen,
                  "cannot create %s: %s (check that the directory exists and is writable)", path,
                  strerror(errno));
        jwrite_cleanup(s);
        return SG_ERR_RUNTIME;
    }
    s->cinfo.err = jpeg_std_error(&s->jerr.pub);
    s->jerr.pub.error_exit = on_jpeg_error;
    if (setjmp(s->jerr.jump)) {
        sg_report(err, errlen, "writing JPEG %s failed: %s (disk full?)", path,
                  s->jerr.msg[0] ? s->jerr.msg : "libjpeg error");
        jwrite_cleanup(s);
        return SG_ERR_RUNTIME;
    }
    jpeg_create_compress(&s->cinfo);
    s->cinfo_ready = 1;
    jpeg_stdio_dest(&s->cinfo, s->f);
    s->cinfo.image_width = (JDIMENSION)w;
    s->cinfo.image_height = (JDIMENSION)h;
    s->cinfo.input_components = 3;
    s->cinfo.in_color_space = JCS_RGB;
    jpeg_set_defaults(&s->cinfo);
    jpeg_set_quality(&s->cinfo, quality, TRUE);
    jpeg_start_compress(&s->cinfo, TRUE);
    while (s->cinfo.next_scanline < (JDIMENSION)h) {
        JSAMPROW r = (JSAMPROW)(rgb + (size_t)s->cinfo.next_scanline * w * 3);
        jpeg_write_scanlines(&s->cinfo, &r, 1);
    }
    jpeg_finish_compress(&s->cinfo);
    FILE *f = s->f;
    s->f = NULL;
    jwrite_cleanup(s);
    if (fclose(f) != 0) {
        sg_report(err, errlen, "closing %s failed: %s (disk full?)", path, strerror(errno));
        return SG_ERR_RUNTIME;
    }
    return SG_OK;
}
