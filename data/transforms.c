/* data/transforms.c - see transforms.h. Scale, crop and flip are fused: each
 * output pixel is mapped back to the source once, so only the crop is ever
 * computed (a 2x-scaled 2048x1024 image is never materialised). Bilinear
 * weights are 11-bit fixed point (OpenCV's INTER_LINEAR uses the same), so
 * results are exact integers, identical on every compiler and machine. */
#include "data/transforms.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/rng.h"

#define WBITS 11
#define WONE (1 << WBITS)

/* Source taps for one destination coordinate along one axis. */
typedef struct tap {
    int i0, i1; /* source indices; i0 = -1 means padding */
    int w1;     /* weight of i1 in 1/WONE (bilinear); nearest uses i0 only */
} tap;

/* dst coordinate d (in the scaled image of size dn, from a source of size sn)
 * -> bilinear taps with pixel-centre alignment, clamped at the borders. */
static tap bilinear_tap(int d, int sn, int dn) {
    /* s = (d + 0.5) * sn / dn - 0.5 = num / den, in integers (exact everywhere). */
    long long num = (2LL * d + 1) * sn - dn, den = 2LL * dn;
    tap t;
    if (num < 0) num = 0; /* before the first centre: clamp */
    long long i = num / den, rem = num % den;
    if (i >= sn - 1) {
        i = sn - 1;
        rem = 0;
    }
    t.i0 = (int)i;
    t.i1 = i + 1 < sn ? (int)i + 1 : (int)i;
    t.w1 = (int)((rem * WONE * 2 + den) / (2 * den)); /* round(rem / den * WONE) */
    return t;
}

/* Nearest with the same centre mapping: the source pixel containing the
 * destination pixel's centre. */
static int nearest_src(int d, int sn, int dn) {
    long long i = ((long long)d * 2 + 1) * sn / (2LL * dn); /* floor((d + 0.5) * sn / dn) */
    return i < sn ? (int)i : sn - 1;
}

/* Draw indices of the key's stream (transforms.h). */
enum { D_SCALE = 0, D_FLIP = 3, D_REDRAW = 4, D_PHOTO = 32 };

static int crop_ok(const sg_aug_opts *o, const uint8_t *mask, int h, int w, int scaled_h,
                   int scaled_w, int y0, int x0, int *cols) {
    uint32_t cnt[256] = {0};
    int y1 = y0 + o->crop_h < scaled_h ? y0 + o->crop_h : scaled_h;
    int x1 = x0 + o->crop_w < scaled_w ? x0 + o->crop_w : scaled_w;
    for (int x = x0; x < x1; x++) cols[x - x0] = nearest_src(x, w, scaled_w);
    for (int y = y0; y < y1; y++) {
        const uint8_t *mr = mask + (size_t)nearest_src(y, h, scaled_h) * w;
        for (int x = 0; x < x1 - x0; x++) cnt[mr[cols[x]]]++;
    }
    uint64_t sum = 0, max = 0;
    int classes = 0;
    for (int v = 0; v < 256; v++) {
        if (v == o->ignore_index || !cnt[v]) continue;
        classes++;
        sum += cnt[v];
        if (cnt[v] > max) max = cnt[v];
    }
    /* numpy: np.max(cnt) / np.sum(cnt) < cat_max_ratio, in float64 */
    return classes > 1 && (double)max / (double)sum < o->cat_max_ratio;
}

int sg_aug_pick_crop(const sg_aug_opts *o, const uint8_t *mask, int h, int w, int scaled_h,
                     int scaled_w, const int cand[SG_AUG_CROP_DRAWS][2], int *cols) {
    if (!(o->cat_max_ratio < 1) || !mask) return 0;
    for (int k = 0; k < SG_AUG_CROP_DRAWS - 1; k++) /* mmseg: test 10, else the 11th */
        if (crop_ok(o, mask, h, w, scaled_h, scaled_w, cand[k][0], cand[k][1], cols)) return k;
    return SG_AUG_CROP_DRAWS - 1;
}

static void make_photo_draw(const sg_photo_opts *p, uint64_t key, sg_photo_draw *d) {
    /* numpy's uniform(lo, hi) = lo + (hi - lo) * random(); the value is cast
     * to float32 where mmseg multiplies the float32 image by it */
    d->brightness = sg_rng_uniform_d(key, D_PHOTO + 0) < 0.5;
    d->beta = (float)(-p->brightness_delta +
                      2 * p->brightness_delta * sg_rng_uniform_d(key, D_PHOTO + 1));
    d->contrast_first = sg_rng_uniform_d(key, D_PHOTO + 2) < 0.5;
    d->contrast = sg_rng_uniform_d(key, D_PHOTO + 3) < 0.5;
    d->contrast_alpha = (float)(p->contrast_lo + (p->contrast_hi - p->contrast_lo) *
                                                     sg_rng_uniform_d(key, D_PHOTO + 4));
    d->saturation = sg_rng_uniform_d(key, D_PHOTO + 5) < 0.5;
    d->saturation_alpha = (float)(p->saturation_lo + (p->saturation_hi - p->saturation_lo) *
                                                         sg_rng_uniform_d(key, D_PHOTO + 6));
    d->hue = sg_rng_uniform_d(key, D_PHOTO + 7) < 0.5;
    /* numpy's randint(-delta, delta): the upper end excluded */
    d->hue_shift =
        p->hue_delta > 0
            ? -p->hue_delta + (int)(sg_rng_uniform_d(key, D_PHOTO + 8) * (2 * p->hue_delta))
            : 0;
}

sg_status sg_aug_make_draw(const sg_aug_opts *o, uint64_t seed, int64_t epoch, int64_t sample,
                           const uint8_t *mask, int h, int w, sg_aug_draw *d) {
    uint64_t key = sg_rng_key(seed, (uint64_t)epoch, (uint64_t)sample, 0, SG_RNG_AUGMENT);
    memset(d, 0, sizeof *d); /* padding too: draws compare with memcmp */
    double u = sg_rng_uniform_d(key, D_SCALE);
    d->scale = o->scale_lo + (o->scale_hi - o->scale_lo) * u;
    d->scaled_h = (int)lround(h * d->scale);
    d->scaled_w = (int)lround(w * d->scale);
    if (d->scaled_h < 1) d->scaled_h = 1;
    if (d->scaled_w < 1) d->scaled_w = 1;
    int ph = d->scaled_h > o->crop_h ? d->scaled_h : o->crop_h; /* padded size */
    int pw = d->scaled_w > o->crop_w ? d->scaled_w : o->crop_w;
    d->y0 = (int)(sg_rng_uniform_d(key, 1) * (ph - o->crop_h + 1));
    d->x0 = (int)(sg_rng_uniform_d(key, 2) * (pw - o->crop_w + 1));
    d->crop_draws = 1;
    if (o->cat_max_ratio < 1 && mask) {
        int cand[SG_AUG_CROP_DRAWS][2], *cols = malloc(sizeof(int) * (size_t)o->crop_w);
        if (!cols) return SG_ERR_RUNTIME;
        cand[0][0] = d->y0;
        cand[0][1] = d->x0;
        for (int k = 1; k < SG_AUG_CROP_DRAWS; k++) {
            cand[k][0] =
                (int)(sg_rng_uniform_d(key, D_REDRAW + 2 * (k - 1)) * (ph - o->crop_h + 1));
            cand[k][1] =
                (int)(sg_rng_uniform_d(key, D_REDRAW + 2 * (k - 1) + 1) * (pw - o->crop_w + 1));
        }
        int k = sg_aug_pick_crop(o, mask, h, w, d->scaled_h, d->scaled_w, cand, cols);
        free(cols);
        d->y0 = cand[k][0];
        d->x0 = cand[k][1];
        d->crop_draws = k + 1;
    }
    d->flip = o->hflip && sg_rng_uniform_d(key, D_FLIP) < 0.5;
    if (o->photo.enabled) make_photo_draw(&o->photo, key, &d->photo);
    return SG_OK;
}

/* OpenCV's 8-bit RGB <-> HSV (imgproc color_hsv: RGB2HSV_b's 12-bit tables,
 * HSV2RGB_b's float32 route as its vector loop computes it on x86 with FMA
 * (AVX2): 1 - s * x fused, the products truncated to uint8). Checked on all
 * 2^24 inputs against opencv-python 5.1.0's: equal. OpenCV's scalar tail
 * (the last pixels of a row that fill no vector) rounds instead, and a build
 * without FMA does not fuse: both differ from this by at most 1. */
enum { HSV_SHIFT = 12 };
static int g_sdiv[256], g_hdiv[256];

static void hsv_tables_init(void) {
    for (int i = 1; i < 256; i++) { /* saturate_cast<int>(double) rounds to nearest even */
        g_sdiv[i] = (int)lrint((255 << HSV_SHIFT) / (1. * i));
        g_hdiv[i] = (int)lrint((180 << HSV_SHIFT) / (6. * i));
    }
}

static pthread_once_t g_hsv_once = PTHREAD_ONCE_INIT;

static void rgb2hsv(int r, int g, int b, uint8_t hsv[3]) {
    int v = b > g ? b : g, vmin = b < g ? b : g;
    if (r > v) v = r;
    if (r < vmin) vmin = r;
    int diff = v - vmin;
    int vr = v == r ? -1 : 0, vg = v == g ? -1 : 0;
    int s = (diff * g_sdiv[v] + (1 << (HSV_SHIFT - 1))) >> HSV_SHIFT;
    int hh = (vr & (g - b)) + (~vr & ((vg & (b - r + 2 * diff)) + (~vg & (r - g + 4 * diff))));
    hh = (hh * g_hdiv[diff] + (1 << (HSV_SHIFT - 1))) >> HSV_SHIFT;
    hh += hh < 0 ? 180 : 0;
    hsv[0] = (uint8_t)hh;
    hsv[1] = (uint8_t)s;
    hsv[2] = (uint8_t)v;
}

static uint8_t trunc_u8(float x) { return x <= 0 ? 0 : x >= 255 ? 255 : (uint8_t)(int)x; }

static void hsv2rgb(const uint8_t hsv[3], uint8_t rgb[3]) {
    const float hscale = 6.0f / 180;
    float h = (float)hsv[0] * hscale;
    float s = (float)hsv[1] * (1.0f / 255.0f), v = (float)hsv[2] * (1.0f / 255.0f);
    float pre = (float)(int)h;
    h = h - pre;
    float one_s = 1.0f - s, one_h = 1.0f - h;
    float tab[4];
    tab[0] = v;
    tab[1] = v * one_s;
    tab[2] = v * fmaf(-s, h, 1.0f);
    tab[3] = v * fmaf(-s, one_h, 1.0f);
    /* b, g, r per sector, as HSV2RGB_native's sector_data */
    static const int sector_data[6][3] = {{1, 3, 0}, {1, 0, 2}, {3, 0, 1},
                                          {0, 2, 1}, {0, 1, 3}, {2, 1, 0}};
    int sector = (int)pre % 6;
    rgb[0] = trunc_u8(tab[sector_data[sector][2]] * 255.0f);
    rgb[1] = trunc_u8(tab[sector_data[sector][1]] * 255.0f);
    rgb[2] = trunc_u8(tab[sector_data[sector][0]] * 255.0f);
}

void sg_rgb2hsv_u8(const uint8_t rgb[3], uint8_t hsv[3]) {
    pthread_once(&g_hsv_once, hsv_tables_init);
    rgb2hsv(rgb[0], rgb[1], rgb[2], hsv);
}

void sg_hsv2rgb_u8(const uint8_t hsv[3], uint8_t rgb[3]) { hsv2rgb(hsv, rgb); }

/* mmseg's convert: float32 img * alpha + beta, clipped, astype(uint8). */
static uint8_t convert(uint8_t x, float alpha, float beta) {
    float y = (float)x * alpha;
    y = y + beta;
    return trunc_u8(y);
}

static void contrast_px(const sg_photo_draw *p, uint8_t *px) {
    if (!p->contrast) return;
    for (int k = 0; k < 3; k++) px[k] = convert(px[k], p->contrast_alpha, 0.0f);
}

void sg_photo_apply(const sg_photo_draw *p, uint8_t *rgb, size_t n) {
    pthread_once(&g_hsv_once, hsv_tables_init);
    for (size_t i = 0; i < n; i++) {
        uint8_t *px = rgb + 3 * i, hsv[3];
        if (p->brightness)
            for (int k = 0; k < 3; k++) px[k] = convert(px[k], 1.0f, p->beta);
        if (p->contrast_first) contrast_px(p, px);
        if (p->saturation) {
            rgb2hsv(px[0], px[1], px[2], hsv);
            hsv[1] = convert(hsv[1], p->saturation_alpha, 0.0f);
            hsv2rgb(hsv, px);
        }
        if (p->hue) {
            rgb2hsv(px[0], px[1], px[2], hsv);
            int hh = (hsv[0] + p->hue_shift) % 180; /* Python's %: never negative */
            hsv[0] = (uint8_t)(hh < 0 ? hh + 180 : hh);
            hsv2rgb(hsv, px);
        }
        if (!p->contrast_first) contrast_px(p, px);
    }
}

sg_status sg_aug_apply(const sg_aug_opts *o, const sg_aug_draw *d, const uint8_t *img,
                       const uint8_t *mask, int h, int w, uint8_t *out_img, uint8_t *out_mask) {
    int ch = o->crop_h, cw = o->crop_w;
    tap *cols = malloc(sizeof(tap) * (size_t)cw);
    int *mcols = malloc(sizeof(int) * (size_t)cw);
    if (!cols || !mcols) {
        free(cols);
        free(mcols);
        return SG_ERR_RUNTIME;
    }
    /* Column tables: output column ox reads scaled column x (flip mirrors the crop). */
    for (int ox = 0; ox < cw; ox++) {
        int x = d->x0 + (d->flip ? cw - 1 - ox : ox);
        if (x >= d->scaled_w) {
            cols[ox].i0 = -1;
            mcols[ox] = -1;
        } else {
            cols[ox] = bilinear_tap(x, w, d->scaled_w);
            mcols[ox] = nearest_src(x, w, d->scaled_w);
        }
    }
    /* the crop's columns from the image (not padding): photometric's span */
    int vw = d->scaled_w - d->x0 < cw ? d->scaled_w - d->x0 : cw;
    if (vw < 0) vw = 0;
    int v0 = d->flip ? cw - vw : 0;
    for (int oy = 0; oy < ch; oy++) {
        int y = d->y0 + oy;
        uint8_t *orow = out_img + (size_t)oy * cw * 3;
        uint8_t *mrow = out_mask ? out_mask + (size_t)oy * cw : NULL;
        if (y >= d->scaled_h) { /* padding rows */
            memset(orow, 0, (size_t)cw * 3);
            if (mrow) memset(mrow, o->ignore_index, (size_t)cw);
            continue;
        }
        tap ty = bilinear_tap(y, h, d->scaled_h);
        const uint8_t *r0 = img + (size_t)ty.i0 * w * 3, *r1 = img + (size_t)ty.i1 * w * 3;
        uint32_t wy1 = (uint32_t)ty.w1, wy0 = WONE - wy1;
        for (int ox = 0; ox < cw; ox++) {
            const tap *tx = &cols[ox];
            if (tx->i0 < 0) {
                orow[3 * ox] = orow[3 * ox + 1] = orow[3 * ox + 2] = 0;
                continue;
            }
            uint32_t wx1 = (uint32_t)tx->w1, wx0 = WONE - wx1;
            const uint8_t *a = r0 + 3 * tx->i0, *b = r0 + 3 * tx->i1;
            const uint8_t *c = r1 + 3 * tx->i0, *e = r1 + 3 * tx->i1;
            for (int k = 0; k < 3; k++) {
                uint32_t top = a[k] * wx0 + b[k] * wx1, bot = c[k] * wx0 + e[k] * wx1;
                orow[3 * ox + k] =
                    (uint8_t)((top * wy0 + bot * wy1 + (1u << (2 * WBITS - 1))) >> (2 * WBITS));
            }
        }
        if (mrow) {
            const uint8_t *mr = mask + (size_t)nearest_src(y, h, d->scaled_h) * w;
            for (int ox = 0; ox < cw; ox++)
                mrow[ox] = mcols[ox] < 0 ? (uint8_t)o->ignore_index : mr[mcols[ox]];
        }
        if (o->photo.enabled) sg_photo_apply(&d->photo, orow + 3 * v0, (size_t)vw);
    }
    free(cols);
    free(mcols);
    return SG_OK;
}

void sg_resize_bilinear_u8(const uint8_t *src, int sh, int sw, int c, uint8_t *dst, int dh,
                           int dw) {
    for (int y = 0; y < dh; y++) {
        tap ty = bilinear_tap(y, sh, dh);
        uint32_t wy1 = (uint32_t)ty.w1, wy0 = WONE - wy1;
        const uint8_t *r0 = src + (size_t)ty.i0 * sw * c, *r1 = src + (size_t)ty.i1 * sw * c;
        for (int x = 0; x < dw; x++) {
            tap tx = bilinear_tap(x, sw, dw);
            uint32_t wx1 = (uint32_t)tx.w1, wx0 = WONE - wx1;
            for (int k = 0; k < c; k++) {
                uint32_t top = r0[tx.i0 * c + k] * wx0 + r0[tx.i1 * c + k] * wx1;
                uint32_t bot = r1[tx.i0 * c + k] * wx0 + r1[tx.i1 * c + k] * wx1;
                dst[((size_t)y * dw + x) * c + k] =
                    (uint8_t)((top * wy0 + bot * wy1 + (1u << (2 * WBITS - 1))) >> (2 * WBITS));
            }
        }
    }
}

void sg_resize_nearest_u8(const uint8_t *src, int sh, int sw, int c, uint8_t *dst, int dh, int dw) {
    for (int y = 0; y < dh; y++) {
        const uint8_t *row = src + (size_t)nearest_src(y, sh, dh) * sw * c;
        for (int x = 0; x < dw; x++)
            memcpy(dst + ((size_t)y * dw + x) * c, row + (size_t)nearest_src(x, sw, dw) * c,
                   (size_t)c);
    }
}
