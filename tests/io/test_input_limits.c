/* tests/io/test_input_limits.c - the input checks of io/ in-process, on
 * files built here byte by byte:
 *   jpeg_bound     a header claiming more 8x8 blocks than the data can code
 *                  is refused before decoding; the most compressible valid
 *                  Huffman JPEGs (2 bits a block, flat grey, 4096x4096; and
 *                  libjpeg's own flat RGB at quality 1 and 100) decode;
 *   jpeg_early_end data that stops at a marker is an error, not gray;
 *   jpeg_scans     500 scans decode, 501 are refused before decoding; a
 *                  comment full of SOS markers and scan data holding 0xFF
 *                  bytes do not count;
 *   nonfinite      sg_st_find_nonfinite at every position, unaligned, for
 *                  NaN, +Inf, -Inf; finite extremes pass;
 *   st_refusals    a safetensors file with a NaN names the tensor; a torch
 *                  zip or pickle is named as such with `segtrain convert`;
 *   pickle_depth   containers nested 256 deep load, 257 are refused; a
 *                  million nested lists are refused as they are pushed,
 *                  outside a MARK and inside one; 4096 empty siblings load.
 * The shell test tests/io/test_hostile_inputs.sh runs the commands on such
 * files within time and memory bounds.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "io/image.h"
#include "io/jpeg.h"
#include "io/pth_pickle.h"
#include "io/safetensors.h"
#include "testutil.h"

typedef struct buf {
    uint8_t *p;
    size_t n, cap;
} buf;

static void put(buf *b, const void *d, size_t n) {
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2;
        b->p = realloc(b->p, b->cap);
        if (!b->p) abort();
    }
    memcpy(b->p + b->n, d, n);
    b->n += n;
}

static void put_zeros(buf *b, size_t n) {
    uint8_t z[4096] = {0};
    while (n) {
        size_t k = n < sizeof z ? n : sizeof z;
        put(b, z, k);
        n -= k;
    }
}

static void seg(buf *b, uint8_t marker, const uint8_t *payload, size_t n) {
    uint8_t h[4] = {0xFF, marker, (uint8_t)((n + 2) >> 8), (uint8_t)(n + 2)};
    put(b, h, 4);
    put(b, payload, n);
}

/* SOI, DQT, SOFn of one grey component h x w, a DC table whose only symbol
 * is 0 and an AC table whose only symbol is ac (each coded '0'). */
static void jpeg_head(buf *b, int h, int w, uint8_t sof, uint8_t ac) {
    uint8_t soi[2] = {0xFF, 0xD8};
    put(b, soi, 2);
    uint8_t dqt[65];
    dqt[0] = 0;
    memset(dqt + 1, 1, 64);
    seg(b, 0xDB, dqt, sizeof dqt);
    uint8_t f[9] = {8, (uint8_t)(h >> 8), (uint8_t)h, (uint8_t)(w >> 8), (uint8_t)w, 1, 1, 0x11, 0};
    seg(b, sof, f, sizeof f);
    uint8_t dht[18] = {0x00, 1};
    dht[17] = 0;
    seg(b, 0xC4, dht, sizeof dht);
    dht[0] = 0x10;
    dht[17] = ac;
    seg(b, 0xC4, dht, sizeof dht);
}

static void sos(buf *b, int ss, int se) {
    uint8_t s[6] = {1, 1, 0x00, (uint8_t)ss, (uint8_t)se, 0};
    seg(b, 0xDA, s, sizeof s);
}

static void eoi(buf *b) {
    uint8_t e[2] = {0xFF, 0xD9};
    put(b, e, 2);
}

/* A flat grey baseline JPEG at 2 bits a block (DC difference 0, end of
 * block): the fewest a Huffman JPEG can take; `blocks` of data (all: -1). */
static buf baseline_flat(int h, int w, long blocks) {
    buf b = {0};
    jpeg_head(&b, h, w, 0xC0, 0x00);
    sos(&b, 0, 63);
    long all = (long)((h + 7) / 8) * ((w + 7) / 8);
    put_zeros(&b, (size_t)((2 * (blocks < 0 ? all : blocks) + 7) / 8));
    eoi(&b);
    return b;
}

static sg_status decode(const buf *b, const char *name, sg_img *im, char *err, size_t cap) {
    return sg_jpeg_decode_rgb(b->p, b->n, name, INT64_C(1) << 26, im, err, cap);
}

static void test_jpeg_bound(void) {
    char err[1024];
    sg_img im;
    /* the most compressible valid file decodes: flat grey 128 */
    buf b = baseline_flat(4096, 4096, -1);
    CHECK_MSG(decode(&b, "flat.jpg", &im, err, sizeof err) == SG_OK, "%s", err);
    if (im.data) {
        CHECK(im.h == 4096 && im.w == 4096);
        size_t bad = 0;
        for (size_t i = 0; i < (size_t)im.h * im.w * 3; i++) bad += im.data[i] != 128;
        CHECK_EQ_INT((long long)bad, 0);
    }
    sg_img_free(&im);
    /* the same header over 16x16 of data: refused before decoding */
    buf small = baseline_flat(16, 16, -1);
    size_t sof = 0;
    while (sof + 1 < small.n && !(small.p[sof] == 0xFF && small.p[sof + 1] == 0xC0)) sof++;
    small.p[sof + 5] = 0x20; /* 8192x8192 */
    small.p[sof + 6] = 0x00;
    small.p[sof + 7] = 0x20;
    small.p[sof + 8] = 0x00;
    CHECK(decode(&small, "forged.jpg", &im, err, sizeof err) != SG_OK);
    CHECK(im.data == NULL);
    CHECK_STR_CONTAINS(err, "forged.jpg");
    CHECK_STR_CONTAINS(err, "8192x8192");
    CHECK_STR_CONTAINS(err, "forged header");
    /* half the blocks' bits: just under the bound */
    buf half = baseline_flat(2048, 2048, 65536 / 2 - 64);
    CHECK(decode(&half, "half.jpg", &im, err, sizeof err) != SG_OK);
    CHECK_STR_CONTAINS(err, "forged header");
    /* libjpeg's own flat images, 4:2:0, the lowest and highest quality */
    char path[256];
    snprintf(path, sizeof path, "%s/sg_limits_%d.jpg", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp",
             (int)getpid());
    uint8_t *rgb = malloc((size_t)1024 * 1024 * 3);
    if (!rgb) abort();
    memset(rgb, 77, (size_t)1024 * 1024 * 3);
    for (int q = 1; q <= 100; q += 99) {
        CHECK_MSG(sg_jpeg_write_rgb(path, rgb, 1024, 1024, q, err, sizeof err) == SG_OK, "%s", err);
        CHECK_MSG(sg_jpeg_read_rgb(path, INT64_C(1) << 26, &im, err, sizeof err) == SG_OK,
                  "quality %d: %s", q, err);
        sg_img_free(&im);
    }
    remove(path);
    free(rgb);
    free(b.p);
    free(small.p);
    free(half.p);
}

static void test_jpeg_early_end(void) {
    char err[1024];
    sg_img im;
    buf b = baseline_flat(256, 256, 512); /* 1024 blocks, data for 512 */
    CHECK(decode(&b, "early.jpg", &im, err, sizeof err) != SG_OK);
    CHECK(im.data == NULL);
    CHECK_STR_CONTAINS(err, "early.jpg");
    CHECK_STR_CONTAINS(err, "premature end of data segment");
    free(b.p);
}

/* A progressive grey h x w JPEG: a COM segment of fake SOS markers, one DC
 * scan (1 bit a block), then ac_scans AC scans of end-of-band runs of 16384
 * blocks; the first AC scan's data holds stuffed 0xFF bytes and a restart
 * marker-like pair is avoided. */
static buf progressive(int h, int w, int ac_scans) {
    buf b = {0};
    jpeg_head(&b, h, w, 0xC2, 0xE0);
    uint8_t com[1200];
    for (size_t i = 0; i < sizeof com; i += 2) {
        com[i] = 0xFF;
        com[i + 1] = 0xDA;
    }
    seg(&b, 0xFE, com, sizeof com);
    long blocks = (long)((h + 7) / 8) * ((w + 7) / 8);
    sos(&b, 0, 0);
    put_zeros(&b, (size_t)((blocks + 7) / 8));
    long runs = (blocks + 16383) / 16384;
    for (int s = 0; s < ac_scans; s++) {
        sos(&b, 1, 63);
        put_zeros(&b, (size_t)((runs * 15 + 7) / 8));
    }
    eoi(&b);
    return b;
}

static void test_jpeg_scans(void) {
    char err[1024];
    sg_img im;
    buf ok = progressive(64, 64, SG_JPEG_MAX_SCANS - 1);
    CHECK_MSG(decode(&ok, "500.jpg", &im, err, sizeof err) == SG_OK, "%s", err);
    sg_img_free(&im);
    buf many = progressive(64, 64, SG_JPEG_MAX_SCANS);
    CHECK(decode(&many, "501.jpg", &im, err, sizeof err) != SG_OK);
    CHECK(im.data == NULL);
    CHECK_STR_CONTAINS(err, "501.jpg");
    CHECK_STR_CONTAINS(err, "more than 500 scans");
    /* an AC scan first: refused before decoding */
    buf ac = {0};
    jpeg_head(&ac, 64, 64, 0xC2, 0xE0);
    sos(&ac, 1, 63);
    put_zeros(&ac, 4);
    eoi(&ac);
    CHECK(decode(&ac, "ac_first.jpg", &im, err, sizeof err) != SG_OK);
    CHECK_STR_CONTAINS(err, "before any DC scan");
    free(ok.p);
    free(many.p);
    free(ac.p);
}

static void test_nonfinite(void) {
    enum { N = 10000 };
    uint8_t *raw = malloc(N * 4 + 8);
    if (!raw) abort();
    const float bad[3] = {NAN, INFINITY, -INFINITY};
    const char *names[3] = {"NaN", "+Inf", "-Inf"};
    for (int off = 0; off < 4; off++) { /* unaligned too */
        float *dummy = NULL;
        (void)dummy;
        for (size_t i = 0; i < N; i++) {
            float v = (float)i * 1e30f - 3e33f; /* finite, large */
            memcpy(raw + off + 4 * i, &v, 4);
        }
        float mx = 3.4028235e38f, den = 1e-45f;
        memcpy(raw + off + 4 * 17, &mx, 4);
        memcpy(raw + off + 4 * 18, &den, 4);
        CHECK_EQ_INT((long long)sg_st_find_nonfinite(raw + off, N), N);
        size_t at[4] = {0, 4095, 4096, N - 1};
        for (int k = 0; k < 3; k++)
            for (int j = 0; j < 4; j++) {
                float keep;
                memcpy(&keep, raw + off + 4 * at[j], 4);
                memcpy(raw + off + 4 * at[j], &bad[k], 4);
                CHECK_EQ_INT((long long)sg_st_find_nonfinite(raw + off, N), (long long)at[j]);
                CHECK(strcmp(sg_st_nonfinite_name(raw + off, at[j]), names[k]) == 0);
                memcpy(raw + off + 4 * at[j], &keep, 4);
            }
    }
    CHECK_EQ_INT((long long)sg_st_find_nonfinite(raw, 0), 0);
    free(raw);
}

/* A safetensors file of one F32 tensor "w" [n] holding vals. */
static buf st_file(const float *vals, int n) {
    char hdr[200];
    int hl = snprintf(hdr, sizeof hdr,
                      "{\"w\":{\"dtype\":\"F32\",\"shape\":[%d],\"data_offsets\":[0,%d]}}", n,
                      4 * n);
    while (hl % 8) hdr[hl++] = ' ';
    buf b = {0};
    uint8_t len[8] = {(uint8_t)hl};
    put(&b, len, 8);
    put(&b, hdr, (size_t)hl);
    put(&b, vals, (size_t)n * 4);
    return b;
}

static void test_st_refusals(void) {
    char why[1024];
    float v[5] = {1, 2, 3, 4, 5};
    buf ok = st_file(v, 5);
    sg_st_file *f = sg_st_open_memory(ok.p, ok.n, "ok.safetensors", why, sizeof why);
    CHECK_MSG(f != NULL, "%s", why);
    sg_st_close(f);
    v[3] = NAN;
    buf nan = st_file(v, 5);
    CHECK(sg_st_open_memory(nan.p, nan.n, "nan.safetensors", why, sizeof why) == NULL);
    CHECK_STR_CONTAINS(why, "tensor 'w' holds NaN at element 3 of 5");
    static const uint8_t zip[] = "PK\x03\x04\x14\x00\x00\x00\x00\x00";
    CHECK(sg_st_open_memory(zip, sizeof zip - 1, "x.pth", why, sizeof why) == NULL);
    CHECK_STR_CONTAINS(why, "PyTorch checkpoint (torch.save, a zip archive)");
    CHECK_STR_CONTAINS(why, "segtrain convert x.pth");
    static const uint8_t pkl[] = "\x80\x02\x8a\x0al\xfc\x9c";
    CHECK(sg_st_open_memory(pkl, sizeof pkl - 1, "y.pth", why, sizeof why) == NULL);
    CHECK_STR_CONTAINS(why, "PyTorch checkpoint (torch.save, a pickle)");
    /* a 2-byte file that happens to start 0x80 0x02 is still named */
    CHECK(sg_file_kind_of("\x80\x01", 2) == SG_FILE_OTHER);
    CHECK(sg_file_kind_of("PK\x05\x06", 4) == SG_FILE_OTHER);
    free(ok.p);
    free(nan.p);
}

/* Loads p[0..n) as a pickle: NULL with the error in err. */
static pk_value *load(const buf *p, char *err, size_t cap, pk_ctx **c) {
    *c = pk_new("nest.pkl", err, cap);
    size_t pos = 0;
    return pk_load(*c, p->p, p->n, &pos, 0);
}

static buf nested(int depth) {
    buf b = {0};
    put(&b, "\x80\x02", 2);
    for (int i = 0; i < depth; i++) put(&b, "]", 1);
    for (int i = 0; i < depth - 1; i++) put(&b, "a", 1);
    put(&b, ".", 1);
    return b;
}

static void test_pickle_depth(void) {
    char err[1024];
    pk_ctx *c;
    buf ok = nested(PK_MAX_DEPTH + 1); /* the outermost list holds 256 levels */
    CHECK_MSG(load(&ok, err, sizeof err, &c) != NULL, "%s", err);
    pk_free(c);
    buf deep = nested(PK_MAX_DEPTH + 2);
    CHECK(load(&deep, err, sizeof err, &c) == NULL);
    CHECK_STR_CONTAINS(err, "nested more than 256 deep");
    pk_free(c);
    /* refused while pushing: outside any MARK, and in a MARK's batch */
    buf wide = nested(1000000);
    CHECK(load(&wide, err, sizeof err, &c) == NULL);
    CHECK_STR_CONTAINS(err, "more than 1024 values on the pickle stack outside any MARK");
    pk_free(c);
    buf batch = {0};
    put(&batch, "\x80\x02](", 4);
    for (int i = 0; i < 1000000; i++) put(&batch, "]", 1);
    put(&batch, "e.", 2);
    CHECK(load(&batch, err, sizeof err, &c) == NULL);
    CHECK_STR_CONTAINS(err, "more than 4096 empty containers pushed in a row");
    pk_free(c);
    /* 4096 empty siblings in one batch load */
    buf sib = {0};
    put(&sib, "\x80\x02](", 4);
    for (int i = 0; i < PK_MAX_OPEN; i++) put(&sib, "]", 1);
    put(&sib, "e.", 2);
    pk_value *v = load(&sib, err, sizeof err, &c);
    CHECK_MSG(v != NULL && v->n == PK_MAX_OPEN, "%s", err);
    pk_free(c);
    free(batch.p);
    free(sib.p);
    /* nested MARKs */
    buf marks = {0};
    put(&marks, "\x80\x02", 2);
    for (int i = 0; i < PK_MAX_DEPTH + 1; i++) put(&marks, "(", 1);
    put(&marks, ".", 1);
    CHECK(load(&marks, err, sizeof err, &c) == NULL);
    CHECK_STR_CONTAINS(err, "more than 256 nested MARKs");
    pk_free(c);
    free(ok.p);
    free(deep.p);
    free(wide.p);
    free(marks.p);
}

int main(void) {
    TEST_RUN(test_jpeg_bound);
    TEST_RUN(test_jpeg_early_end);
    TEST_RUN(test_jpeg_scans);
    TEST_RUN(test_nonfinite);
    TEST_RUN(test_st_refusals);
    TEST_RUN(test_pickle_depth);
    return TEST_EXIT();
}
