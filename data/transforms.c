/* data/transforms.c - see transforms.h. Scale, crop and flip are fused: each
 * output pixel is mapped back to the source once, so only the crop is ever
 * computed (a 2x-scaled 2048x1024 image is never materialised). Bilinear
 * weights are 11-bit fixed point (OpenCV's INTER_LINEAR uses the same), so
 * results are exact integers, identical on every compiler and machine. */
#include "data/transforms.h"

#include <math.h>
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

void sg_aug_make_draw(const sg_aug_opts *o, uint64_t seed, int64_t epoch, int64_t sample, int h,
                      int w, sg_aug_draw *d) {
    uint64_t key = sg_rng_key(seed, (uint64_t)epoch, (uint64_t)sample, 0, SG_RNG_AUGMENT);
    memset(d, 0, sizeof *d); /* padding too: draws compare with memcmp */
    double u = sg_rng_uniform_d(key, 0);
    d->scale = o->scale_lo + (o->scale_hi - o->scale_lo) * u;
    d->scaled_h = (int)lround(h * d->scale);
    d->scaled_w = (int)lround(w * d->scale);
    if (d->scaled_h < 1) d->scaled_h = 1;
    if (d->scaled_w < 1) d->scaled_w = 1;
    int ph = d->scaled_h > o->crop_h ? d->scaled_h : o->crop_h; /* padded size */
    int pw = d->scaled_w > o->crop_w ? d->scaled_w : o->crop_w;
    d->y0 = (int)(sg_rng_uniform_d(key, 1) * (ph - o->crop_h + 1));
    d->x0 = (int)(sg_rng_uniform_d(key, 2) * (pw - o->crop_w + 1));
    d->flip = o->hflip && sg_rng_uniform_d(key, 3) < 0.5;
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
