/* tests/kernels/ref_ops.c - naive reference ops (see ref_ops.h).
 * Direct loops, double accumulation, single-threaded: clarity over speed. */
#include "tests/kernels/ref_ops.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/rng.h"

static inline float put(float old, double v, int accumulate) {
    return accumulate ? (float)((double)old + v) : (float)v;
}

/* ---------------- convolution ---------------- */

/* Input row/col read by output (oy, ox) and tap (i, j); -1 if in the padding. */
static inline int in_coord(int o, int tap, int stride, int pad, int dil, int size) {
    int v = o * stride - pad + tap * dil;
    return (v >= 0 && v < size) ? v : -1;
}

/* Groups (sg_conv_desc.groups): output channel k reads the cg = c/g input
 * channels of its group k / (k_count/g); w is [k, cg, r, s]. */
static inline int ref_groups(const sg_conv_desc *d) { return d->groups > 1 ? d->groups : 1; }

void ref_conv_fwd(const sg_conv_desc *d, const float *x, const float *w, float *y) {
    int g = ref_groups(d), cg = d->c / g, kg = d->k / g;
    for (int b = 0; b < d->n; b++)
        for (int k = 0; k < d->k; k++)
            for (int oy = 0; oy < d->oh; oy++)
                for (int ox = 0; ox < d->ow; ox++) {
                    double acc = 0;
                    int c0 = (k / kg) * cg;
                    for (int cl = 0; cl < cg; cl++)
                        for (int i = 0; i < d->r; i++) {
                            int iy = in_coord(oy, i, d->stride_h, d->pad_h, d->dil_h, d->h);
                            if (iy < 0) continue;
                            for (int j = 0; j < d->s; j++) {
                                int ix = in_coord(ox, j, d->stride_w, d->pad_w, d->dil_w, d->w);
                                if (ix < 0) continue;
                                acc +=
                                    (double)
                                        x[(((size_t)b * d->c + c0 + cl) * d->h + iy) * d->w + ix] *
                                    w[(((size_t)k * cg + cl) * d->r + i) * d->s + j];
                            }
                        }
                    y[(((size_t)b * d->k + k) * d->oh + oy) * d->ow + ox] = (float)acc;
                }
}

/* dx[b,c,iy,ix] = sum over (k of c's group, i, j, oy, ox) that read (iy, ix)
 * of dy * w. Written as a gather over output positions so each dx is one
 * double sum. */
void ref_conv_bwd_data(const sg_conv_desc *d, const float *dy, const float *w, float *dx,
                       int accumulate) {
    int g = ref_groups(d), cg = d->c / g, kg = d->k / g;
    for (int b = 0; b < d->n; b++)
        for (int c = 0; c < d->c; c++)
            for (int iy = 0; iy < d->h; iy++)
                for (int ix = 0; ix < d->w; ix++) {
                    double acc = 0;
                    int k0 = (c / cg) * kg, cl = c % cg;
                    for (int i = 0; i < d->r; i++) {
                        int ty = iy + d->pad_h - i * d->dil_h;
                        if (ty < 0 || ty % d->stride_h) continue;
                        int oy = ty / d->stride_h;
                        if (oy >= d->oh) continue;
                        for (int j = 0; j < d->s; j++) {
                            int tx = ix + d->pad_w - j * d->dil_w;
                            if (tx < 0 || tx % d->stride_w) continue;
                            int ox = tx / d->stride_w;
                            if (ox >= d->ow) continue;
                            for (int k = k0; k < k0 + kg; k++)
                                acc +=
                                    (double)dy[(((size_t)b * d->k + k) * d->oh + oy) * d->ow + ox] *
                                    w[(((size_t)k * cg + cl) * d->r + i) * d->s + j];
                        }
                    }
                    size_t o = (((size_t)b * d->c + c) * d->h + iy) * d->w + ix;
                    dx[o] = put(dx[o], acc, accumulate);
                }
}

void ref_conv_bwd_weight(const sg_conv_desc *d, const float *x, const float *dy, float *dw,
                         int accumulate) {
    int g = ref_groups(d), cg = d->c / g, kg = d->k / g;
    for (int k = 0; k < d->k; k++)
        for (int cl = 0; cl < cg; cl++)
            for (int i = 0; i < d->r; i++)
                for (int j = 0; j < d->s; j++) {
                    double acc = 0;
                    int c = (k / kg) * cg + cl;
                    for (int b = 0; b < d->n; b++)
                        for (int oy = 0; oy < d->oh; oy++) {
                            int iy = in_coord(oy, i, d->stride_h, d->pad_h, d->dil_h, d->h);
                            if (iy < 0) continue;
                            for (int ox = 0; ox < d->ow; ox++) {
                                int ix = in_coord(ox, j, d->stride_w, d->pad_w, d->dil_w, d->w);
                                if (ix < 0) continue;
                                acc += (double)x[(((size_t)b * d->c + c) * d->h + iy) * d->w + ix] *
                                       dy[(((size_t)b * d->k + k) * d->oh + oy) * d->ow + ox];
                            }
                        }
                    size_t o = (((size_t)k * cg + cl) * d->r + i) * d->s + j;
                    dw[o] = put(dw[o], acc, accumulate);
                }
}

void ref_bias_fwd(float *y, const float *b, int n, int c, int hw) {
    for (int i = 0; i < n; i++)
        for (int ch = 0; ch < c; ch++)
            for (int p = 0; p < hw; p++) y[((size_t)i * c + ch) * hw + p] += b[ch];
}

void ref_bias_bwd(const float *dy, float *db, int n, int c, int hw, int accumulate) {
    for (int ch = 0; ch < c; ch++) {
        double acc = 0;
        for (int i = 0; i < n; i++)
            for (int p = 0; p < hw; p++) acc += dy[((size_t)i * c + ch) * hw + p];
        db[ch] = put(db[ch], acc, accumulate);
    }
}

/* ---------------- batch norm ---------------- */

void ref_bn_stats(const float *x, int n, int c, int hw, float *stats) {
    for (int ch = 0; ch < c; ch++) {
        double s = 0, m2 = 0;
        for (int i = 0; i < n; i++)
            for (int p = 0; p < hw; p++) s += x[((size_t)i * c + ch) * hw + p];
        double mean = s / ((double)n * hw);
        for (int i = 0; i < n; i++)
            for (int p = 0; p < hw; p++) {
                double dlt = x[((size_t)i * c + ch) * hw + p] - mean;
                m2 += dlt * dlt;
            }
        stats[ch] = (float)mean;
        stats[c + ch] = (float)m2;
    }
}

void ref_bn_finalize(const float *parts_stats, const int64_t *counts, int parts, int c, float eps,
                     float momentum, float *mean, float *invstd, float *running_mean,
                     float *running_var) {
    for (int ch = 0; ch < c; ch++) {
        double na = 0, ma = 0, m2a = 0;
        for (int p = 0; p < parts; p++) {
            double nb = (double)counts[p];
            if (nb <= 0) continue;
            double mb = parts_stats[(size_t)p * 2 * c + ch];
            double m2b = parts_stats[(size_t)p * 2 * c + c + ch];
            double nab = na + nb, delta = mb - ma;
            ma += delta * nb / nab;
            m2a += m2b + delta * delta * na * nb / nab;
            na = nab;
        }
        double var = na > 0 ? m2a / na : 0;
        mean[ch] = (float)ma;
        invstd[ch] = (float)(1.0 / sqrt(var + (double)eps));
        if (running_mean) {
            double unbiased = na > 1 ? m2a / (na - 1) : var;
            running_mean[ch] = (float)((1.0 - momentum) * running_mean[ch] + momentum * ma);
            running_var[ch] = (float)((1.0 - momentum) * running_var[ch] + momentum * unbiased);
        }
    }
}

void ref_bn_eval_params(const float *running_mean, const float *running_var, int c, float eps,
                        float *mean, float *invstd) {
    for (int ch = 0; ch < c; ch++) {
        mean[ch] = running_mean[ch];
        invstd[ch] = (float)(1.0 / sqrt((double)running_var[ch] + (double)eps));
    }
}

void ref_bn_fwd(const float *x, const float *mean, const float *invstd, const float *gamma,
                const float *beta, float *y, int n, int c, int hw, int relu) {
    for (int i = 0; i < n; i++)
        for (int ch = 0; ch < c; ch++)
            for (int p = 0; p < hw; p++) {
                size_t o = ((size_t)i * c + ch) * hw + p;
                double v = ((double)x[o] - mean[ch]) * invstd[ch] * gamma[ch] + beta[ch];
                if (relu && v < 0) v = 0;
                y[o] = (float)v;
            }
}

static inline double masked(const float *dy, const float *y, size_t o, int relu) {
    return (relu && !(y[o] > 0)) ? 0.0 : (double)dy[o];
}

void ref_bn_bwd_reduce(const float *dy, const float *x, const float *y, const float *mean,
                       float *red, int n, int c, int hw, int relu) {
    for (int ch = 0; ch < c; ch++) {
        double s = 0, sx = 0;
        for (int i = 0; i < n; i++)
            for (int p = 0; p < hw; p++) {
                size_t o = ((size_t)i * c + ch) * hw + p;
                double g = masked(dy, y, o, relu);
                s += g;
                sx += g * ((double)x[o] - mean[ch]);
            }
        red[ch] = (float)s;
        red[c + ch] = (float)sx;
    }
}

void ref_bn_bwd_elem(const float *dy, const float *x, const float *y, const float *mean,
                     const float *invstd, const float *gamma, const float *red, double count,
                     float *dx, int n, int c, int hw, int relu, int accumulate) {
    for (int i = 0; i < n; i++)
        for (int ch = 0; ch < c; ch++) {
            double is = invstd[ch];
            for (int p = 0; p < hw; p++) {
                size_t o = ((size_t)i * c + ch) * hw + p;
                double g = masked(dy, y, o, relu);
                double v = (g - red[ch] / count -
                            ((double)x[o] - mean[ch]) * is * is * red[c + ch] / count) *
                           is * gamma[ch];
                dx[o] = put(dx[o], v, accumulate);
            }
        }
}

void ref_bn_param_grads(const float *red, const float *invstd, float *dgamma, float *dbeta, int c,
                        int accumulate) {
    for (int ch = 0; ch < c; ch++) {
        dgamma[ch] = put(dgamma[ch], (double)red[c + ch] * invstd[ch], accumulate);
        dbeta[ch] = put(dbeta[ch], (double)red[ch], accumulate);
    }
}

/* ---------------- elementwise ---------------- */

void ref_relu_fwd(const float *x, float *y, size_t count) {
    for (size_t i = 0; i < count; i++) y[i] = x[i] > 0 ? x[i] : 0.0f;
}

void ref_relu_bwd(const float *dy, const float *y, float *dx, size_t count, int accumulate) {
    for (size_t i = 0; i < count; i++) dx[i] = put(dx[i], y[i] > 0 ? dy[i] : 0.0, accumulate);
}

void ref_add(const float *a, const float *b, float *y, size_t count, int relu) {
    for (size_t i = 0; i < count; i++) {
        float v = a[i] + b[i];
        y[i] = (relu && v < 0) ? 0.0f : v;
    }
}

void ref_scale(const float *x, float *y, float alpha, size_t count) {
    for (size_t i = 0; i < count; i++) y[i] = alpha * x[i];
}

void ref_axpy(float alpha, const float *x, float *y, size_t count) {
    for (size_t i = 0; i < count; i++) y[i] = (float)((double)y[i] + (double)alpha * x[i]);
}

/* ---------------- pooling, resize, concat ---------------- */

int ref_pool_out(int h) { return (h + 2 - 3) / 2 + 1; }

void ref_maxpool_fwd(const float *x, float *y, int32_t *idx, int n, int c, int h, int w, int oh,
                     int ow) {
    for (size_t pl = 0; pl < (size_t)n * c; pl++) {
        const float *xp = x + pl * h * w;
        for (int oy = 0; oy < oh; oy++)
            for (int ox = 0; ox < ow; ox++) {
                float best = -INFINITY;
                int bi = -1;
                for (int i = 0; i < 3; i++) {
                    int iy = oy * 2 - 1 + i;
                    if (iy < 0 || iy >= h) continue;
                    for (int j = 0; j < 3; j++) {
                        int ix = ox * 2 - 1 + j;
                        if (ix < 0 || ix >= w) continue;
                        float v = xp[iy * w + ix];
                        if (bi < 0 || v > best || isnan(v)) { /* as PyTorch */
                            best = v;
                            bi = iy * w + ix;
                        }
                    }
                }
                y[pl * oh * ow + oy * ow + ox] = best;
                idx[pl * oh * ow + oy * ow + ox] = bi;
            }
    }
}

void ref_maxpool_bwd(const float *dy, const int32_t *idx, float *dx, int n, int c, int h, int w,
                     int oh, int ow) {
    /* Overwrites dx: each input sums the gradients of the windows it won. */
    size_t plane = (size_t)h * w;
    double *acc = calloc(plane, sizeof *acc);
    for (size_t pl = 0; pl < (size_t)n * c; pl++) {
        memset(acc, 0, plane * sizeof *acc);
        for (int q = 0; q < oh * ow; q++) acc[idx[pl * oh * ow + q]] += dy[pl * oh * ow + q];
        for (size_t p = 0; p < plane; p++) dx[pl * plane + p] = (float)acc[p];
    }
    free(acc);
}

void ref_avgpool_fwd(const float *x, float *y, int n, int c, int hw) {
    for (size_t pl = 0; pl < (size_t)n * c; pl++) {
        double s = 0;
        for (int p = 0; p < hw; p++) s += x[pl * hw + p];
        y[pl] = (float)(s / hw);
    }
}

void ref_avgpool_bwd(const float *dy, float *dx, int n, int c, int hw, int accumulate) {
    for (size_t pl = 0; pl < (size_t)n * c; pl++)
        for (int p = 0; p < hw; p++)
            dx[pl * hw + p] = put(dx[pl * hw + p], (double)dy[pl] / hw, accumulate);
}

/* The two source taps and weights for output coordinate o (PyTorch's
 * area_pixel_compute_source_index with align_corners=False). */
static void taps(int o, int in, int out, int *i0, int *i1, double *l0, double *l1) {
    double scale = (double)in / out;
    double src = (o + 0.5) * scale - 0.5;
    if (src < 0) src = 0;
    int a = (int)src;
    if (a > in - 1) a = in - 1;
    *i0 = a;
    *i1 = a < in - 1 ? a + 1 : a;
    *l1 = src - a;
    *l0 = 1.0 - *l1;
}

void ref_resize_fwd(const float *x, float *y, int n, int c, int h, int w, int oh, int ow) {
    for (size_t pl = 0; pl < (size_t)n * c; pl++)
        for (int oy = 0; oy < oh; oy++) {
            int y0, y1;
            double wy0, wy1;
            taps(oy, h, oh, &y0, &y1, &wy0, &wy1);
            for (int ox = 0; ox < ow; ox++) {
                int x0, x1;
                double wx0, wx1;
                taps(ox, w, ow, &x0, &x1, &wx0, &wx1);
                const float *p = x + pl * h * w;
                double v = wy0 * (wx0 * p[y0 * w + x0] + wx1 * p[y0 * w + x1]) +
                           wy1 * (wx0 * p[y1 * w + x0] + wx1 * p[y1 * w + x1]);
                y[pl * oh * ow + oy * ow + ox] = (float)v;
            }
        }
}

void ref_resize_bwd(const float *dy, float *dx, int n, int c, int h, int w, int oh, int ow,
                    int accumulate) {
    size_t plane = (size_t)h * w;
    double *acc = calloc(plane, sizeof *acc);
    for (size_t pl = 0; pl < (size_t)n * c; pl++) {
        memset(acc, 0, plane * sizeof *acc);
        for (int oy = 0; oy < oh; oy++) {
            int y0, y1;
            double wy0, wy1;
            taps(oy, h, oh, &y0, &y1, &wy0, &wy1);
            for (int ox = 0; ox < ow; ox++) {
                int x0, x1;
                double wx0, wx1;
                taps(ox, w, ow, &x0, &x1, &wx0, &wx1);
                double g = dy[pl * oh * ow + oy * ow + ox];
                acc[y0 * w + x0] += g * wy0 * wx0;
                acc[y0 * w + x1] += g * wy0 * wx1;
                acc[y1 * w + x0] += g * wy1 * wx0;
                acc[y1 * w + x1] += g * wy1 * wx1;
            }
        }
        for (size_t p = 0; p < plane; p++)
            dx[pl * plane + p] = put(dx[pl * plane + p], acc[p], accumulate);
    }
    free(acc);
}

void ref_concat_fwd(const float *src, float *dst, int n, int c_src, int c_dst, int c_off, int hw) {
    for (int i = 0; i < n; i++)
        for (int ch = 0; ch < c_src; ch++)
            for (int p = 0; p < hw; p++)
                dst[((size_t)i * c_dst + c_off + ch) * hw + p] =
                    src[((size_t)i * c_src + ch) * hw + p];
}

void ref_concat_bwd(const float *dy, float *dsrc, int n, int c_src, int c_dst, int c_off, int hw,
                    int accumulate) {
    for (int i = 0; i < n; i++)
        for (int ch = 0; ch < c_src; ch++)
            for (int p = 0; p < hw; p++) {
                size_t o = ((size_t)i * c_src + ch) * hw + p;
                dsrc[o] = put(dsrc[o], dy[((size_t)i * c_dst + c_off + ch) * hw + p], accumulate);
            }
}

/* ---------------- dropout ---------------- */

void ref_dropout_fwd(const float *x, float *y, uint8_t *mask, size_t count, float p, uint64_t key) {
    /* NCHW: the element index is the logical one the rule keys on */
    for (size_t i = 0; i < count; i++) {
        int keep = p < 1.0f && sg_rng_uniform(key, i) >= p;
        mask[i] = (uint8_t)keep;
        y[i] = keep ? x[i] * (1.0f / (1.0f - p)) : 0.0f;
    }
}

void ref_dropout_bwd(const float *dy, const uint8_t *mask, float *dx, size_t count, float p,
                     int accumulate) {
    for (size_t i = 0; i < count; i++) {
        float v = mask[i] ? dy[i] * (1.0f / (1.0f - p)) : 0.0f;
        dx[i] = accumulate ? dx[i] + v : v;
    }
}

/* ---------------- loss, metrics ---------------- */

void ref_ce_fwd_bwd(const float *logits, const uint8_t *labels, int n, int c, int hw, int ignore,
                    float grad_scale, float *dlogits, double *loss_sum, int64_t *valid) {
    double loss = 0;
    int64_t nvalid = 0;
    for (int i = 0; i < n; i++)
        for (int p = 0; p < hw; p++) {
            const float *l = logits + (size_t)i * c * hw + p;
            int lab = labels[(size_t)i * hw + p];
            int ok = lab != ignore && lab < c;
            if (!ok) {
                if (dlogits)
                    for (int k = 0; k < c; k++)
                        dlogits[(size_t)i * c * hw + (size_t)k * hw + p] = 0;
                continue;
            }
            double mx = l[0];
            for (int k = 1; k < c; k++) mx = l[(size_t)k * hw] > mx ? l[(size_t)k * hw] : mx;
            double se = 0;
            for (int k = 0; k < c; k++) se += exp(l[(size_t)k * hw] - mx);
            double lse = mx + log(se);
            loss += lse - l[(size_t)lab * hw];
            nvalid++;
            if (dlogits)
                for (int k = 0; k < c; k++) {
                    double sm = exp(l[(size_t)k * hw] - lse);
                    dlogits[(size_t)i * c * hw + (size_t)k * hw + p] =
                        (float)((sm - (k == lab)) * grad_scale);
                }
        }
    *loss_sum = loss;
    *valid = nvalid;
}

void ref_argmax(const float *logits, uint8_t *pred, int n, int c, int hw) {
    for (int i = 0; i < n; i++)
        for (int p = 0; p < hw; p++) {
            int best = 0;
            for (int k = 1; k < c; k++)
                if (logits[((size_t)i * c + k) * hw + p] > logits[((size_t)i * c + best) * hw + p])
                    best = k;
            pred[(size_t)i * hw + p] = (uint8_t)best;
        }
}

void ref_confusion(const uint8_t *pred, const uint8_t *labels, size_t count, int c, int64_t *conf) {
    for (size_t i = 0; i < count; i++)
        if (labels[i] < c && pred[i] < c) conf[labels[i] * c + pred[i]] += 1;
}

/* ---------------- optimizer, input, reductions ---------------- */

void ref_sgd_step(float *param, const float *grad, float *buf, size_t count, float lr,
                  float momentum, float dampening, float wd, int nesterov, int first) {
    for (size_t i = 0; i < count; i++) {
        float d = grad[i];
        if (wd != 0) d = d + wd * param[i];
        if (momentum != 0) {
            float b = first ? d : momentum * buf[i] + (1 - dampening) * d;
            buf[i] = b;
            d = nesterov ? d + momentum * b : b;
        }
        param[i] = param[i] - lr * d;
    }
}

void ref_adamw_step(float *param, const float *grad, float *m, float *v, size_t count, double lr,
                    double beta1, double beta2, double eps, double wd, long t) {
    double bc1 = 1 - pow(beta1, (double)t), bc2 = 1 - pow(beta2, (double)t);
    for (size_t i = 0; i < count; i++) {
        double g = grad[i], p = (double)param[i] * (1 - lr * wd);
        double mi = beta1 * m[i] + (1 - beta1) * g, vi = beta2 * v[i] + (1 - beta2) * g * g;
        m[i] = (float)mi;
        v[i] = (float)vi;
        param[i] = (float)(p - lr / bc1 * mi / (sqrt(vi) / sqrt(bc2) + eps));
    }
}

void ref_normalize_u8(const uint8_t *src, float *dst, int n, int h, int w, const float mean[3],
                      const float std[3]) {
    for (int i = 0; i < n; i++)
        for (int ch = 0; ch < 3; ch++)
            for (int p = 0; p < h * w; p++)
                dst[((size_t)i * 3 + ch) * h * w + p] =
                    (float)(((double)src[((size_t)i * h * w + p) * 3 + ch] / 255.0 - mean[ch]) /
                            std[ch]);
}

double ref_sumsq(const float *x, size_t count) {
    double s = 0;
    for (size_t i = 0; i < count; i++) s += (double)x[i] * x[i];
    return s;
}

/* ---------------- gates ---------------- */

void ref_hardswish_fwd(const float *x, float *y, size_t count) {
    for (size_t i = 0; i < count; i++) {
        double v = x[i];
        y[i] = (float)(v <= -3 ? 0.0 : v >= 3 ? v : v * (v + 3) / 6);
    }
}

/* torch: 0 below -3, x/3 + 1/2 on [-3, 3] (both kinks included), 1 above */
void ref_hardswish_bwd(const float *dy, const float *x, float *dx, size_t count, int accumulate) {
    for (size_t i = 0; i < count; i++) {
        double v = x[i], g = v < -3 ? 0.0 : v <= 3 ? (double)dy[i] * (v / 3 + 0.5) : dy[i];
        dx[i] = put(dx[i], g, accumulate);
    }
}

void ref_hardsigmoid_fwd(const float *x, float *y, size_t count) {
    for (size_t i = 0; i < count; i++) {
        double v = x[i];
        y[i] = (float)(v <= -3 ? 0.0 : v >= 3 ? 1.0 : (v + 3) / 6);
    }
}

/* torch: 1/6 strictly inside (-3, 3), 0 elsewhere (0 at the kinks) */
void ref_hardsigmoid_bwd(const float *dy, const float *x, float *dx, size_t count, int accumulate) {
    for (size_t i = 0; i < count; i++) {
        double v = x[i], g = (v > -3 && v < 3) ? (double)dy[i] / 6 : 0.0;
        dx[i] = put(dx[i], g, accumulate);
    }
}

void ref_sigmoid_fwd(const float *x, float *y, size_t count) {
    for (size_t i = 0; i < count; i++) y[i] = (float)(1.0 / (1.0 + exp(-(double)x[i])));
}

void ref_sigmoid_bwd(const float *dy, const float *y, float *dx, size_t count, int accumulate) {
    for (size_t i = 0; i < count; i++) {
        double v = y[i];
        dx[i] = put(dx[i], (double)dy[i] * v * (1 - v), accumulate);
    }
}

void ref_chan_scale_fwd(const float *x, const float *s, float *y, int n, int c, int hw) {
    for (size_t pl = 0; pl < (size_t)n * c; pl++)
        for (int p = 0; p < hw; p++) y[pl * hw + p] = (float)((double)x[pl * hw + p] * s[pl]);
}

void ref_chan_scale_bwd(const float *dy, const float *x, const float *s, float *dx, float *ds,
                        int n, int c, int hw, int acc_dx, int acc_ds) {
    for (size_t pl = 0; pl < (size_t)n * c; pl++) {
        double acc = 0;
        for (int p = 0; p < hw; p++) {
            size_t o = pl * hw + p;
            acc += (double)dy[o] * x[o];
            if (dx) dx[o] = put(dx[o], (double)dy[o] * s[pl], acc_dx);
        }
        if (ds) ds[pl] = put(ds[pl], acc, acc_ds);
    }
}

/* ---------------- bfloat16 ---------------- */

float ref_bf16_round(float x) {
    if (isnan(x) || isinf(x) || x == 0.0f) return x;
    double v = x;
    if (fabs(v) < 0x1p-126) /* subnormal: a fixed grid of 2^-133 */
        return (float)(nearbyint(ldexp(v, 133)) * 0x1p-133);
    int e;
    double m = frexp(v, &e); /* v = m * 2^e, 0.5 <= |m| < 1 */
    /* 8 significant bits: m * 2^8 in [128, 256), rounded (FE_TONEAREST: ties to even) */
    double r = ldexp(nearbyint(ldexp(m, 8)), e - 8);
    return (float)r; /* exact, or +-inf past float's range */
}

double ref_bf16_ulp(double x) {
    if (x == 0.0 || fabs(x) < 0x1p-126) return 0x1p-133;
    int e;
    frexp(x, &e);
    return ldexp(1.0, e - 8);
}

static float *rounded_copy(const float *v, size_t n) {
    float *r = malloc(n * sizeof *r);
    if (!r) abort();
    for (size_t i = 0; i < n; i++) r[i] = ref_bf16_round(v[i]);
    return r;
}

/* out (+)= bf16(res) */
static void finish_bf16(float *out, const float *res, size_t n, int accumulate) {
    for (size_t i = 0; i < n; i++) {
        float v = ref_bf16_round(res[i]);
        out[i] = accumulate ? out[i] + v : v;
    }
}

void ref_conv_fwd_bf16(const sg_conv_desc *d, const float *x, const float *w, float *y) {
    size_t nx = (size_t)d->n * d->c * d->h * d->w,
           nw = (size_t)d->k * (d->c / ref_groups(d)) * d->r * d->s;
    size_t ny = (size_t)d->n * d->k * d->oh * d->ow;
    float *xr = rounded_copy(x, nx), *wr = rounded_copy(w, nw), *res = calloc(ny, sizeof *res);
    if (!res) abort();
    ref_conv_fwd(d, xr, wr, res);
    finish_bf16(y, res, ny, 0);
    free(xr), free(wr), free(res);
}

void ref_conv_bwd_data_bf16(const sg_conv_desc *d, const float *dy, const float *w, float *dx,
                            int accumulate) {
    size_t nx = (size_t)d->n * d->c * d->h * d->w,
           nw = (size_t)d->k * (d->c / ref_groups(d)) * d->r * d->s;
    size_t ny = (size_t)d->n * d->k * d->oh * d->ow;
    float *dyr = rounded_copy(dy, ny), *wr = rounded_copy(w, nw), *res = calloc(nx, sizeof *res);
    if (!res) abort();
    ref_conv_bwd_data(d, dyr, wr, res, 0);
    finish_bf16(dx, res, nx, accumulate);
    free(dyr), free(wr), free(res);
}

void ref_conv_bwd_weight_bf16(const sg_conv_desc *d, const float *x, const float *dy, float *dw,
                              int accumulate) {
    size_t nx = (size_t)d->n * d->c * d->h * d->w,
           nw = (size_t)d->k * (d->c / ref_groups(d)) * d->r * d->s;
    size_t ny = (size_t)d->n * d->k * d->oh * d->ow;
    float *xr = rounded_copy(x, nx), *dyr = rounded_copy(dy, ny), *res = calloc(nw, sizeof *res);
    if (!res) abort();
    ref_conv_bwd_weight(d, xr, dyr, res, 0);
    finish_bf16(dw, res, nw, accumulate);
    free(xr), free(dyr), free(res);
}

/* ---- test-time augmentation ---- */
void ref_flip_w(const float *x, float *y, int n, int c, int h, int w) {
    for (long r = 0; r < (long)n * c * h; r++)
        for (int i = 0; i < w; i++) y[r * w + (w - 1 - i)] = x[r * w + i];
}

void ref_softmax(const float *x, float *y, int n, int c, int hw, int accumulate) {
    for (int i = 0; i < n; i++)
        for (int q = 0; q < hw; q++) {
            const float *xp = x + (size_t)i * c * hw + q;
            float *yp = y + (size_t)i * c * hw + q;
            double mx = xp[0], sum = 0;
            for (int k = 1; k < c; k++)
                if (xp[(size_t)k * hw] > mx) mx = xp[(size_t)k * hw];
            for (int k = 0; k < c; k++) sum += exp((double)xp[(size_t)k * hw] - mx);
            for (int k = 0; k < c; k++) {
                double p = exp((double)xp[(size_t)k * hw] - mx) / sum;
                yp[(size_t)k * hw] = (float)(accumulate ? yp[(size_t)k * hw] + p : p);
            }
        }
}

/* ---------------- loss options: class weights, OHEM (issue 16) ---------------- */

void ref_ce_weighted(const float *logits, const uint8_t *labels, int n, int c, int hw, int ignore,
                     const float *class_w, const float *sel_key, float sel_below, float grad_scale,
                     float *dlogits, double *loss_sum, double *weight_sum) {
    double loss = 0, wsum = 0;
    for (int i = 0; i < n; i++)
        for (int p = 0; p < hw; p++) {
            const float *l = logits + (size_t)i * c * hw + p;
            size_t px = (size_t)i * hw + p;
            int lab = labels[px];
            double w = 0;
            if (lab != ignore && lab < c && (!sel_key || sel_key[px] < sel_below))
                w = class_w ? class_w[lab] : 1.0;
            if (w == 0) {
                if (dlogits)
                    for (int k = 0; k < c; k++)
                        dlogits[(size_t)i * c * hw + (size_t)k * hw + p] = 0;
                continue;
            }
            double mx = l[0];
            for (int k = 1; k < c; k++) mx = l[(size_t)k * hw] > mx ? l[(size_t)k * hw] : mx;
            double se = 0;
            for (int k = 0; k < c; k++) se += exp(l[(size_t)k * hw] - mx);
            double lse = mx + log(se);
            loss += w * (lse - l[(size_t)lab * hw]);
            wsum += w;
            if (dlogits)
                for (int k = 0; k < c; k++) {
                    double sm = exp(l[(size_t)k * hw] - lse);
                    dlogits[(size_t)i * c * hw + (size_t)k * hw + p] =
                        (float)((sm - (k == lab)) * grad_scale * w);
                }
        }
    *loss_sum = loss;
    *weight_sum = wsum;
}

void ref_ce_label_prob(const float *logits, const uint8_t *labels, int n, int c, int hw, int ignore,
                       float *prob) {
    for (int i = 0; i < n; i++)
        for (int p = 0; p < hw; p++) {
            const float *l = logits + (size_t)i * c * hw + p;
            int lab = labels[(size_t)i * hw + p];
            if (lab == ignore || lab >= c) {
                prob[(size_t)i * hw + p] = INFINITY;
                continue;
            }
            double mx = l[0];
            for (int k = 1; k < c; k++) mx = l[(size_t)k * hw] > mx ? l[(size_t)k * hw] : mx;
            double se = 0;
            for (int k = 0; k < c; k++) se += exp(l[(size_t)k * hw] - mx);
            prob[(size_t)i * hw + p] = (float)(exp(l[(size_t)lab * hw] - mx) / se);
        }
}

/* IEEE total order on floats (NaN aside): -0 before +0. */
static int ref_cmp_total(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    if (x < y) return -1;
    if (x > y) return 1;
    int sx = signbit(x) != 0, sy = signbit(y) != 0;
    return sy - sx; /* equal values: a negative zero first */
}

float ref_kth_smallest(const float *x, size_t count, size_t k) {
    float *s = malloc(count * sizeof *s);
    if (!s) abort();
    memcpy(s, x, count * sizeof *s);
    qsort(s, count, sizeof *s, ref_cmp_total);
    float v = s[k];
    free(s);
    return v;
}

/* mmsegmentation's OHEMPixelSampler.sample, line by line:
 *   valid_mask = label != ignore;  sort_prob = sort(prob[valid_mask])
 *   min_threshold = sort_prob[min(batch_kept, numel - 1)] if numel > 0 else 0.0
 *   threshold = max(min_threshold, thresh)
 *   seg_weight[valid_mask] = prob[valid_mask] < threshold
 * (labels >= c count as ignored, as in the loss). Returns the threshold. */
float ref_ohem_select(const float *prob, const uint8_t *labels, size_t count, int c, int ignore,
                      float thresh, int64_t batch_kept, uint8_t *selected) {
    float *v = malloc((count ? count : 1) * sizeof *v);
    if (!v) abort();
    size_t nv = 0;
    for (size_t i = 0; i < count; i++)
        if (labels[i] != ignore && labels[i] < c) v[nv++] = prob[i];
    /* a plain insertion sort: the reference is meant to be obviously right */
    for (size_t i = 1; i < nv; i++) {
        float t = v[i];
        size_t j = i;
        while (j > 0 && v[j - 1] > t) {
            v[j] = v[j - 1];
            j--;
        }
        v[j] = t;
    }
    float min_thr = 0.0f;
    if (nv > 0) min_thr = v[(size_t)batch_kept < nv - 1 ? (size_t)batch_kept : nv - 1];
    float thr = min_thr > thresh ? min_thr : thresh;
    for (size_t i = 0; i < count; i++)
        selected[i] = labels[i] != ignore && labels[i] < c && prob[i] < thr;
    free(v);
    return thr;
}
