/* kernels/cpu/conv/phases.c - dilated 3x3 convolutions as undilated
 * ones on phase sub-images (part of the conv group: the row phases of the
 * path table, own_f32.c, runs the undilated convolution on oneDNN; this
 * file fills no op).
 *
 * A stride-1 3x3 convolution with dilation D and padding D reads, for the
 * output pixel (D*i + a, D*j + b), only inputs of the same phase (a, b):
 *   y[D*i+a, D*j+b] = sum_uv W[u,v] x[D*(i+u-1) + a, D*(j+v-1) + b].
 * With x_ab[i, j] = x[D*i + a, D*j + b] that is an undilated 3x3
 * convolution with padding 1 of x_ab (out-of-range taps are padding in both
 * forms). When D divides the height and width every phase image has the
 * same size, so the D*D phases become D*D times the batch: one undilated
 * convolution over [n*D*D, c, h/D, w/D], which runs as Winograd F(4x4, 3x3)
 * (onednn_rules.c) where the dilated one can only run direct. The
 * backward passes are the undilated ones' on the same phase images, and the
 * weight gradient sums over the enlarged batch, which is the sum over the
 * phases. ResNet-50 at output stride 8 has 14 such convolutions (layer3's
 * rate-2, layer4's rate-2 and rate-4 3x3s): at 256x256, rate 2 on 32x32 maps
 * becomes 4 phases of 16x16, rate 4 16 phases of 8x8.
 *
 * Only NHWC activations: a phase image is a gather of whole channel rows
 * (C contiguous floats), which these loops copy.
 */
#include <string.h>

#include "kernels/cpu/conv/conv_internal.h"

int sg_conv_phases_applicable(const sg_conv_desc *d) {
    int D = d->dil_h;
    if (D < 2 || d->dil_w != D || d->r != 3 || d->s != 3 || sg_conv_groups(d) != 1) return 0;
    if (d->stride_h != 1 || d->stride_w != 1 || d->pad_h != D || d->pad_w != D) return 0;
    if (d->h % D || d->w % D || d->h / D < 2 || d->w / D < 2) return 0;
    return d->c % 16 == 0 && d->k % 16 == 0; /* the Winograd kernel's channel blocks */
}

sg_conv_desc sg_conv_phases_desc(const sg_conv_desc *d) {
    int D = d->dil_h;
    sg_conv_desc p = *d;
    p.n = d->n * D * D;
    p.h = d->h / D;
    p.w = d->w / D;
    p.dil_h = p.dil_w = 1;
    p.pad_h = p.pad_w = 1;
    (void)sg_conv_desc_init(&p);
    return p;
}

/* dst [n][D][D][h/D][w/D][c] <- src [n][h][w][c] (to = 1), or back (to = 0,
 * dst += when accumulate). */
static void phases_copy(float *nhwc, float *ph, int n, int h, int w, int c, int D, int to,
                        int accumulate) {
    int hp = h / D, wp = w / D;
    long rows = (long)n * D * D * hp;
#pragma omp parallel for schedule(static)
    for (long r = 0; r < rows; r++) {
        long t = r;
        int i = (int)(t % hp);
        t /= hp;
        int b = (int)(t % D);
        t /= D;
        int a = (int)(t % D);
        long img = t / D;
        float *prow = ph + (size_t)r * wp * c;
        float *srow = nhwc + ((size_t)(img * h + (long)D * i + a) * w + b) * c;
        for (int j = 0; j < wp; j++) {
            float *p = prow + (size_t)j * c, *s = srow + (size_t)D * j * c;
            if (to) memcpy(p, s, (size_t)c * sizeof(float));
            else if (!accumulate) memcpy(s, p, (size_t)c * sizeof(float));
            else
                for (int ch = 0; ch < c; ch++) s[ch] += p[ch];
        }
    }
}

void sg_conv_to_phases(float *dst, const float *src, int n, int h, int w, int c, int D) {
    phases_copy((float *)src, dst, n, h, w, c, D, 1, 0);
}

void sg_conv_from_phases(float *dst, const float *src, int n, int h, int w, int c, int D,
                         int accumulate) {
    phases_copy(dst, (float *)src, n, h, w, c, D, 0, accumulate);
}
