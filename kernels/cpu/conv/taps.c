/* kernels/cpu/conv/taps.c - stride-1 dilated convolutions as one GEMM
 * per kernel tap over the region where that tap reads the image (part of
 * the conv group: the path table (paths.c) picks this path and calls it through
 * conv_internal.h; this file fills no op).
 *
 * ASPP at output stride 8 runs 3x3 convs with dilation 12/24/36 on maps of
 * about 32x32: most taps of most outputs read zero padding, yet a dense conv
 * (oneDNN, PyTorch) computes them all. Here tap (i, j) contributes
 * y[:, oy, ox] += W_ij . x[:, oy + i*dil - pad, ox + j*dil - pad] only over the
 * output rectangle where that input is inside the image, as a GEMM
 * (dnnl_sgemm, threaded by oneDNN): [k x c] x [c x pixels]. Rectangles that
 * span whole rows are used in place (channel stride as the leading
 * dimension); others are gathered into a buffer and scattered back. The
 * backward passes are the transposed GEMMs over the same rectangles.
 * Weights are regrouped per tap ([r*s][k][c]) on every call (small next to
 * the GEMMs). Buffers live in sg_conv_taps_ws, grown on the first call of a
 * shape only.
 *
 * bf16 (native bf16 of native.c, mm set): the same loops on bf16
 * operands (x, dy, their gathered copies, the per-tap weights) through the
 * bf16 matmul primitives of matmul.c (float32 accumulation, C +=
 * by the sum post-op); results and the weight-gradient accumulator stay
 * float32, for the caller to round once.
 *
 * NHWC activations: the same rectangles, each GEMM transposed - pixels as
 * rows, channels as the contiguous columns: y[rect] [pixels x k] +=
 * x[rect + off] [pixels x c] . W_ij^T. Whole-row rectangles are again used
 * in place (the channel count as the leading dimension); others are
 * gathered row by row (each a contiguous run of pixels x channels).
 * Backward-data there goes by rectangles of dx instead, all the live taps
 * of a tap row in one GEMM (taps_bwd_data_nhwc).
 */
#include <string.h>

#include "kernels/cpu/conv/conv_internal.h"
#include "kernels/formulas/bf16.h"

/* The output rectangle of tap (i, j) and its input offset. */
typedef struct rect {
    int oy0, oy1, ox0, ox1; /* output rows [oy0, oy1) x cols [ox0, ox1) */
    int dy, dx;             /* input = output + (dy, dx) */
} rect;

/* The largest kernel side of this path: backward-data's runs of a
 * dimension (dim_runs, at most 2k + 1) live in arrays on the stack. */
enum { RUNS_MAX_K = 15 };

static int clampi(int v, int lo, int hi) { return v < lo ? lo : (v > hi ? hi : v); }

static rect tap_rect(const sg_conv_desc *d, int i, int j) {
    rect r;
    r.dy = i * d->dil_h - d->pad_h;
    r.dx = j * d->dil_w - d->pad_w;
    r.oy0 = clampi(-r.dy, 0, d->oh), r.oy1 = clampi(d->h - r.dy, 0, d->oh);
    r.ox0 = clampi(-r.dx, 0, d->ow), r.ox1 = clampi(d->w - r.dx, 0, d->ow);
    if (r.oy1 < r.oy0) r.oy1 = r.oy0;
    if (r.ox1 < r.ox0) r.ox1 = r.ox0;
    return r;
}

static size_t rect_area(const rect *r) { return (size_t)(r->oy1 - r->oy0) * (r->ox1 - r->ox0); }

/* Whole rows of both the output and the input: usable in place. */
static int full_rows(const sg_conv_desc *d, const rect *r) {
    return r->ox0 == 0 && r->ox1 == d->ow && r->dx == 0 && d->ow == d->w;
}

int sg_conv_taps_applicable(const sg_conv_desc *d) {
    if (d->stride_h != 1 || d->stride_w != 1 || (d->dil_h == 1 && d->dil_w == 1)) return 0;
    if (d->r > RUNS_MAX_K || d->s > RUNS_MAX_K) return 0;
    /* Small GEMMs would lose to oneDNN's direct kernels. */
    if (d->c < 64 || d->k < 16) return 0;
    return sg_conv_taps_density(d) < 0.75; /* less than 75% of the dense work */
}

/* float32 backward passes on NHWC activations: oneDNN 2.6's backward
 * kernels for stride-1 3x3 convs are slower than the per-tap GEMMs even
 * where every tap reads most of the image (ASPP's rates 1, 2 and 4 on 32x32
 * maps, a few percent of the dense work in padding), and much slower on
 * larger maps; not for bf16, where its per-tap bf16 matmuls lose
 * (docs/BENCHMARKS.md, "CPU convolution paths"). */
int sg_conv_taps_bwd_f32_applicable(const sg_conv_desc *d) {
    if (d->stride_h != 1 || d->stride_w != 1 || d->r * d->s == 1) return 0;
    if (d->r > RUNS_MAX_K || d->s > RUNS_MAX_K) return 0;
    if (d->c < 64 || d->k < 16) return 0;
    return sg_conv_taps_density(d) < 0.97;
}

double sg_conv_taps_density(const sg_conv_desc *d) {
    /* Compared with the dense conv over the live taps only: onednn.c
     * trims taps that read nothing but padding (ASPP rate 36 on 32x32 is a
     * 1x1 conv there, which oneDNN runs as fast as one GEMM). */
    size_t useful = 0;
    int live_r = 0, live_s = 0;
    for (int i = 0; i < d->r; i++) {
        rect r = tap_rect(d, i, d->s / 2);
        live_r += r.oy1 > r.oy0;
    }
    for (int j = 0; j < d->s; j++) {
        rect r = tap_rect(d, d->r / 2, j);
        live_s += r.ox1 > r.ox0;
    }
    for (int i = 0; i < d->r; i++)
        for (int j = 0; j < d->s; j++) {
            rect r = tap_rect(d, i, j);
            useful += rect_area(&r);
        }
    size_t dense = (size_t)live_r * live_s * d->oh * d->ow;
    return dense ? (double)useful / (double)dense : 1.0;
}

/* The GEMMs of one call: float32 dnnl_sgemm (mm NULL) or bf16 matmuls on
 * mm; es: the bytes of one input element (x, dy, the gathered copies and,
 * but in the backward-weight pass, the weights). */
typedef struct taps_gemm {
    sg_conv_mm *mm;
    size_t es;
    int dry; /* bf16 with no tensors: only build mm's primitives (prepare) */
} taps_gemm;

static taps_gemm gemm_of(sg_conv_mm *mm, const void *in) {
    taps_gemm g = {mm, mm ? sizeof(uint16_t) : sizeof(float), mm && !in};
    return g;
}

/* Element off of an input array (NULL in a dry run). */
static const void *at(const taps_gemm *g, const void *p, size_t off) {
    return p ? (const char *)p + off * g->es : NULL;
}

/* Element off of an output array (NULL in a dry run). */
static float *out_at(float *p, size_t off) { return p ? p + off : NULL; }

/* Zeroes an output (no-op in a dry run). */
static void zero(float *p, size_t count) {
    if (p) memset(p, 0, count * sizeof(float));
}

/* C = op(A) op(B) + beta C, beta 0 or 1. */
static void gemm(const taps_gemm *g, char ta, char tb, long m, long n, long k, const void *a,
                 long lda, const void *b, long ldb, float beta, float *c, long ldc) {
    if (g->mm)
        sg_conv_mm_gemm(g->mm, 1, ta, tb, m, n, k, a, lda, b, ldb, beta != 0.0f, g->dry ? NULL : c,
                        ldc);
    else DNNL_CHECK(dnnl_sgemm(ta, tb, m, n, k, 1.0f, a, lda, b, ldb, beta, c, ldc));
}

/* Copies rows [y0, y1) x cols [x0, x1) of `ch` planes (plane stride ps,
 * row stride w) of es-byte elements into a dense [ch][area] matrix. */
static void gather(size_t es, const void *src, int ch, size_t ps, int w, int y0, int y1, int x0,
                   int x1, void *dst) {
    if (!src) return; /* dry run */
    int rw = x1 - x0;
    size_t area = (size_t)(y1 - y0) * rw;
    const char *s = src;
    char *o = dst;
#pragma omp parallel for schedule(static) if ((size_t)ch * area >= SG_CPU_PAR_MIN)
    for (int c = 0; c < ch; c++)
        for (int y = y0; y < y1; y++)
            memcpy(o + (c * area + (size_t)(y - y0) * rw) * es,
                   s + (c * ps + (size_t)y * w + x0) * es, (size_t)rw * es);
}

/* Adds a dense float32 [ch][area] matrix back into such a rectangle. */
static void scatter_add(const float *src, int ch, size_t ps, int w, int y0, int y1, int x0, int x1,
                        float *dst) {
    if (!dst) return; /* dry run */
    int rw = x1 - x0;
    size_t area = (size_t)(y1 - y0) * rw;
#pragma omp parallel for schedule(static) if ((size_t)ch * area >= SG_CPU_PAR_MIN)
    for (int c = 0; c < ch; c++)
        for (int y = y0; y < y1; y++) {
            float *o = dst + c * ps + (size_t)y * w + x0;
            const float *s = src + c * area + (size_t)(y - y0) * rw;
            for (int q = 0; q < rw; q++) o[q] += s[q];
        }
}

/* NHWC: copies pixel rows [y0, y1) x cols [x0, x1) of a [rows][w][ch]
 * image of es-byte elements into a dense [area][ch] matrix. */
static void gather_cl(size_t es, const void *src, int ch, int w, int y0, int y1, int x0, int x1,
                      void *dst) {
    if (!src) return;                    /* dry run */
    size_t run = (size_t)(x1 - x0) * ch; /* one row: contiguous */
    const char *s = src;
    char *o = dst;
#pragma omp parallel for schedule(static) if (run * (y1 - y0) >= SG_CPU_PAR_MIN)
    for (int y = y0; y < y1; y++)
        memcpy(o + (size_t)(y - y0) * run * es, s + ((size_t)y * w + x0) * ch * es, run * es);
}

/* NHWC: adds a dense float32 [area][ch] matrix back into such a rectangle. */
static void scatter_add_cl(const float *src, int ch, int w, int y0, int y1, int x0, int x1,
                           float *dst) {
    if (!dst) return; /* dry run */
    size_t run = (size_t)(x1 - x0) * ch;
#pragma omp parallel for schedule(static) if (run * (y1 - y0) >= SG_CPU_PAR_MIN)
    for (int y = y0; y < y1; y++) {
        float *o = dst + ((size_t)y * w + x0) * ch;
        const float *s = src + (size_t)(y - y0) * run;
#pragma omp simd
        for (size_t q = 0; q < run; q++) o[q] += s[q];
    }
}

/* wt[t][k][c] = w[k][c][t] */
static void regroup_weights(const sg_conv_desc *d, const float *w, float *wt) {
    int taps = d->r * d->s;
    size_t kc = (size_t)d->k * d->c;
#pragma omp parallel for schedule(static) if (kc * taps >= SG_CPU_PAR_MIN)
    for (size_t q = 0; q < kc; q++)
        for (int t = 0; t < taps; t++) wt[t * kc + q] = w[q * taps + t];
}

size_t sg_conv_taps_weight_count(const sg_conv_desc *d) {
    return (size_t)d->r * d->s * d->k * d->c;
}

/* The per-tap regrouping [k*c][taps] <-> [taps][k*c] in blocks of TBLK
 * (k, c) pairs: a block's taps x TBLK values stay in L1 while each tap's
 * run is read or written contiguously, and the lanes go over the pairs. */
#define TBLK 256

SG_CPU_CLONES static void to_taps_bf16(const float *w, uint16_t *wt, size_t q0, size_t n, int taps,
                                       size_t kc) {
    for (int t = 0; t < taps; t++) {
        uint16_t *o = wt + t * kc + q0;
        const float *s = w + q0 * taps + t;
#pragma omp simd
        for (size_t q = 0; q < n; q++) o[q] = sg_bf16_bits(s[q * taps]);
    }
}

SG_CPU_CLONES static void from_taps(const float *wt, float *dw, size_t q0, size_t n, int taps,
                                    size_t kc, int accumulate) {
    for (int t = 0; t < taps; t++) {
        const float *s = wt + t * kc + q0;
        float *o = dw + q0 * taps + t;
        if (accumulate) {
#pragma omp simd
            for (size_t q = 0; q < n; q++) o[q * taps] += s[q];
        } else {
#pragma omp simd
            for (size_t q = 0; q < n; q++) o[q * taps] = s[q];
        }
    }
}

void sg_conv_taps_weights_bf16(const sg_conv_desc *d, const float *w, uint16_t *wt) {
    int taps = d->r * d->s;
    size_t kc = (size_t)d->k * d->c, blocks = (kc + TBLK - 1) / TBLK;
#pragma omp parallel for schedule(static) if (kc * taps >= SG_CPU_PAR_MIN)
    for (size_t b = 0; b < blocks; b++) {
        size_t q0 = b * TBLK;
        to_taps_bf16(w, wt, q0, kc - q0 < TBLK ? kc - q0 : TBLK, taps, kc);
    }
}

/* The bytes of ws->a and ws->b that d needs: an image's operand each, and
 * at least one pixel row of backward-data's A and C. */
static void taps_ws_bytes(const sg_conv_desc *d, size_t *a, size_t *b) {
    size_t big = (size_t)(d->c > d->k ? d->c : d->k) * d->oh * d->ow;
    size_t arow = (size_t)d->w * d->s * d->k, crow = (size_t)d->w * d->c;
    *a = (big > arow ? big : arow) * sizeof(float);
    *b = (big > crow ? big : crow) * sizeof(float);
}

void sg_conv_taps_prepare(sg_conv_taps_ws *ws, const sg_conv_desc *d) {
    size_t a, b;
    taps_ws_bytes(d, &a, &b);
    ws_reserve(&ws->wt, sg_conv_taps_weight_count(d) * sizeof(float));
    ws_reserve(&ws->a, a);
    ws_reserve(&ws->b, b);
}

/* The per-tap weights of a forward / backward-data call: w itself (bf16:
 * the caller's per-tap copy) or, float32, regrouped into ws->wt. */
static const void *tap_weights(sg_conv_taps_ws *ws, const taps_gemm *g, const sg_conv_desc *d,
                               const void *w) {
    if (g->mm) return w;
    regroup_weights(d, w, ws->wt.p);
    return ws->wt.p;
}

/* NHWC forward: y[rect] [area x k] += x[rect + off] [area x c] . W_ij^T */
static void taps_fwd_nhwc(sg_conv_taps_ws *ws, const taps_gemm *g, const sg_conv_desc *d,
                          const void *x, const void *wt, float *y) {
    void *ga = ws->a.p;
    float *gb = ws->b.p;
    int c = d->c, k = d->k;
    size_t kc = (size_t)k * c, xs = (size_t)d->h * d->w * c, ys = (size_t)d->oh * d->ow * k;
    zero(y, (size_t)d->n * ys);
    for (int b = 0; b < d->n; b++) {
        const void *xb = at(g, x, (size_t)b * xs);
        float *yb = out_at(y, (size_t)b * ys);
        for (int i = 0; i < d->r; i++)
            for (int j = 0; j < d->s; j++) {
                rect r = tap_rect(d, i, j);
                size_t area = rect_area(&r);
                if (!area) continue;
                const void *wij = at(g, wt, (size_t)(i * d->s + j) * kc);
                if (full_rows(d, &r)) {
                    gemm(g, 'N', 'T', (long)area, k, c,
                         at(g, xb, (size_t)(r.oy0 + r.dy) * d->w * c), c, wij, c, 1.0f,
                         out_at(yb, (size_t)r.oy0 * d->ow * k), k);
                } else {
                    gather_cl(g->es, xb, c, d->w, r.oy0 + r.dy, r.oy1 + r.dy, r.ox0 + r.dx,
                              r.ox1 + r.dx, ga);
                    gemm(g, 'N', 'T', (long)area, k, c, ga, c, wij, c, 0.0f, gb, k);
                    scatter_add_cl(gb, k, d->ow, r.oy0, r.oy1, r.ox0, r.ox1, yb);
                }
            }
    }
}

/* NHWC backward-data by regions of dx: along each dimension the input
 * coordinates fall into runs (at most 2 * taps + 1) read by the same range
 * of taps [t0, t0 + n), and a rectangle of a row run and a column run is
 * read by the same taps throughout. Per rectangle and tap row i, one GEMM
 * over all its live taps of that row at once: dx[rect] [pixels x c] (+)=
 * A [pixels x n*k] . W_(i, t0..t0+n) [n*k x c], A the dy pixels each tap
 * reads, side by side (gathered; dy has only k channels, so it is small),
 * W the per-tap weights of those taps, contiguous in [tap][k][c]. Against a
 * GEMM per tap (9 passes over dx for ASPP's rate 12, each a k-long
 * reduction, most through a scatter-add) dx is written once per tap row
 * from a reduction up to 3k long: faster in both precisions
 * (docs/BENCHMARKS.md, "oneDNN layouts and sparse dilated convs"). */
typedef struct run {
    int p0, p1; /* coordinates [p0, p1) */
    int t0, n;  /* live taps [t0, t0 + n) */
} run;

/* The runs of one dimension: in input coordinates, taps of size k,
 * dilation dil, padding pad, out output coordinates; returns the count. */
static int dim_runs(int in, int k, int dil, int pad, int out, run *rs) {
    int nr = 0;
    for (int p = 0; p < in; p++) {
        int t0 = 0, n = 0;
        for (int t = 0; t < k; t++) {
            int o = p - (t * dil - pad);
            if (o >= 0 && o < out) {
                if (!n) t0 = t;
                n++;
            }
        }
        if (nr && rs[nr - 1].t0 == t0 && rs[nr - 1].n == n) rs[nr - 1].p1 = p + 1;
        else rs[nr++] = (run){p, p + 1, t0, n};
    }
    return nr;
}

/* A [rows x rw pixels][n taps][k] for tap row i of pixel rows q0.. of a
 * rectangle (row q: image q / rh, input row y0 + q % rh). */
static void gather_taps_cl(const taps_gemm *g, const sg_conv_desc *d, const void *dy, const run *ry,
                           const run *rx, int i, long q0, long nq, void *a) {
    if (!dy) return; /* dry run */
    int k = d->k, rw = rx->p1 - rx->p0, rh = ry->p1 - ry->p0;
    size_t ys = (size_t)d->oh * d->ow * k, row = (size_t)rx->n * k * g->es, kb = (size_t)k * g->es;
    int oy_off = i * d->dil_h - d->pad_h;
#pragma omp parallel for schedule(static) if ((size_t)nq * rw * rx->n * k >= SG_CPU_PAR_MIN)
    for (long q = 0; q < nq; q++) {
        long b = (q0 + q) / rh;
        int oy = ry->p0 + (int)((q0 + q) % rh) - oy_off;
        const char *src = (const char *)dy + (b * ys + (size_t)oy * d->ow * k) * g->es;
        char *dst = (char *)a + (size_t)q * rw * row;
        for (int x = 0; x < rw; x++)
            for (int jj = 0; jj < rx->n; jj++) {
                int ox = rx->p0 + x - ((rx->t0 + jj) * d->dil_w - d->pad_w);
                memcpy(dst + (size_t)x * row + jj * kb, src + (size_t)ox * kb, kb);
            }
    }
}

/* Pixel rows q0.. of a rectangle of dx (see gather_taps_cl) from cbuf
 * [rows x rw][c], added with accumulate, else copied; cbuf NULL: zeroed. */
static void put_rows_cl(const sg_conv_desc *d, const float *cbuf, const run *ry, const run *rx,
                        long q0, long nq, int accumulate, float *dx) {
    if (!dx) return; /* dry run */
    int c = d->c, rw = rx->p1 - rx->p0, rh = ry->p1 - ry->p0;
    size_t xs = (size_t)d->h * d->w * c, len = (size_t)rw * c;
#pragma omp parallel for schedule(static) if ((size_t)nq * len >= SG_CPU_PAR_MIN)
    for (long q = 0; q < nq; q++) {
        long b = (q0 + q) / rh;
        int y = ry->p0 + (int)((q0 + q) % rh);
        float *o = dx + b * xs + ((size_t)y * d->w + rx->p0) * c;
        const float *s = cbuf ? cbuf + (size_t)q * len : NULL;
        if (!s) memset(o, 0, len * sizeof(float));
        else if (!accumulate) memcpy(o, s, len * sizeof(float));
        else {
#pragma omp simd
            for (size_t e = 0; e < len; e++) o[e] += s[e];
        }
    }
}

static void taps_bwd_data_nhwc(sg_conv_taps_ws *ws, const taps_gemm *g, const sg_conv_desc *d,
                               const void *dy, const void *wt, float *dx, int accumulate) {
    run ry[2 * RUNS_MAX_K + 1], rx[2 * RUNS_MAX_K + 1];
    int nry = dim_runs(d->h, d->r, d->dil_h, d->pad_h, d->oh, ry);
    int nrx = dim_runs(d->w, d->s, d->dil_w, d->pad_w, d->ow, rx);
    int c = d->c, k = d->k;
    size_t kc = (size_t)k * c, cap_a, cap_c;
    taps_ws_bytes(d, &cap_a, &cap_c);
    for (int a = 0; a < nry; a++)
        for (int b = 0; b < nrx; b++) {
            int rw = rx[b].p1 - rx[b].p0;
            long rows = (long)d->n * (ry[a].p1 - ry[a].p0);
            if (!ry[a].n || !rx[b].n) { /* read by no tap: a zero gradient */
                if (!accumulate) put_rows_cl(d, NULL, &ry[a], &rx[b], 0, rows, 0, dx);
                continue;
            }
            /* pixel rows per GEMM: A and C fit what sg_conv_taps_prepare
             * reserves for d (not the buffers' size, which other shapes may
             * have grown: the GEMMs depend on the geometry alone) */
            size_t arow = (size_t)rw * rx[b].n * k * g->es, crow = (size_t)rw * c * sizeof(float);
            long fit_a = (long)(cap_a / arow), fit_c = (long)(cap_c / crow);
            long per = fit_a < fit_c ? fit_a : fit_c;
            if (per > rows) per = rows;
            if (per < 1) per = 1; /* taps_ws_bytes holds a row: never */
            for (long q0 = 0; q0 < rows; q0 += per) {
                long nq = rows - q0 < per ? rows - q0 : per;
                for (int ii = 0; ii < ry[a].n; ii++) {
                    int i = ry[a].t0 + ii;
                    gather_taps_cl(g, d, dy, &ry[a], &rx[b], i, q0, nq, ws->a.p);
                    gemm(g, 'N', 'N', nq * rw, c, (long)rx[b].n * k, ws->a.p, (long)rx[b].n * k,
                         at(g, wt, (size_t)(i * d->s + rx[b].t0) * kc), c, ii ? 1.0f : 0.0f,
                         ws->b.p, c);
                }
                put_rows_cl(d, ws->b.p, &ry[a], &rx[b], q0, nq, accumulate, dx);
            }
        }
}

/* Whole images: the rectangle is the map and reads the same pixels (the
 * centre tap of a "same" conv), so the n images' rectangles are one
 * contiguous run of pixels. */
static int whole_image(const sg_conv_desc *d, const rect *r) {
    return full_rows(d, r) && r->oy0 == 0 && r->oy1 == d->oh && r->dy == 0 && d->oh == d->h;
}

/* Images whose gathered rectangles of `area` pixels fit the operand
 * buffers together: sg_conv_taps_prepare's max(c, k) * oh * ow floats, so
 * the count depends on the geometry only (prepare's dry run builds the
 * GEMMs that the real calls run). */
static int images_per_gemm(const taps_gemm *g, const sg_conv_desc *d, size_t area, int ch) {
    size_t big = (size_t)(d->c > d->k ? d->c : d->k) * d->oh * d->ow * sizeof(float);
    size_t one = area * (size_t)ch * g->es;
    size_t nb = one ? big / one : 1;
    return nb < 1 ? 1 : nb > (size_t)d->n ? d->n : (int)nb;
}

/* NHWC backward-weight: dW_ij [k x c] += dy[rect]^T [k x area] . x[rect + off] [area x c],
 * summed over the images in as few GEMMs as fit (a longer reduction, and
 * dW_ij read and written fewer times; the first writes it, so nothing is
 * zeroed first but the dead taps): whole images in place at once, rows
 * of whole width in place per image, other rectangles gathered for as
 * many images as images_per_gemm allows. */
static void taps_bwd_weight_nhwc(sg_conv_taps_ws *ws, const taps_gemm *g, const sg_conv_desc *d,
                                 const void *x, const void *dy) {
    float *wt = ws->wt.p;
    char *ga = ws->a.p, *gb = ws->b.p;
    int c = d->c, k = d->k;
    size_t kc = (size_t)k * c, xs = (size_t)d->h * d->w * c, ys = (size_t)d->oh * d->ow * k;
    for (int i = 0; i < d->r; i++)
        for (int j = 0; j < d->s; j++) {
            rect r = tap_rect(d, i, j);
            size_t area = rect_area(&r);
            float *wij = wt + (size_t)(i * d->s + j) * kc;
            if (!area) { /* a dead tap */
                zero(g->dry ? NULL : wij, kc);
                continue;
            }
            float beta = 0.0f; /* the tap's first GEMM writes dW_ij, the others add */
            if (whole_image(d, &r)) {
                gemm(g, 'T', 'N', k, c, (long)(area * d->n), dy, k, x, c, beta, wij, c);
                continue;
            }
            if (full_rows(d, &r)) {
                for (int b = 0; b < d->n; b++) {
                    const void *xb = at(g, x, (size_t)b * xs), *gyb = at(g, dy, (size_t)b * ys);
                    gemm(g, 'T', 'N', k, c, (long)area, at(g, gyb, (size_t)r.oy0 * d->ow * k), k,
                         at(g, xb, (size_t)(r.oy0 + r.dy) * d->w * c), c, beta, wij, c);
                    beta = 1.0f;
                }
                continue;
            }
            int nb = images_per_gemm(g, d, area, c > k ? c : k);
            for (int b0 = 0; b0 < d->n; b0 += nb) {
                int nbb = d->n - b0 < nb ? d->n - b0 : nb;
                for (int b = b0; b < b0 + nbb; b++) {
                    size_t q = (size_t)(b - b0) * area;
                    gather_cl(g->es, at(g, dy, (size_t)b * ys), k, d->ow, r.oy0, r.oy1, r.ox0,
                              r.ox1, ga + q * k * g->es);
                    gather_cl(g->es, at(g, x, (size_t)b * xs), c, d->w, r.oy0 + r.dy, r.oy1 + r.dy,
                              r.ox0 + r.dx, r.ox1 + r.dx, gb + q * c * g->es);
                }
                gemm(g, 'T', 'N', k, c, (long)(area * nbb), ga, k, gb, c, beta, wij, c);
                beta = 1.0f;
            }
        }
}

void sg_conv_taps_fwd(sg_conv_taps_ws *ws, sg_conv_mm *mm, const sg_conv_desc *d, int nhwc,
                      const void *x, const void *w, float *y) {
    sg_conv_taps_prepare(ws, d);
    taps_gemm g = gemm_of(mm, x);
    const void *wt = tap_weights(ws, &g, d, w);
    void *ga = ws->a.p;
    float *gb = ws->b.p;
    if (nhwc) {
        taps_fwd_nhwc(ws, &g, d, x, wt, y);
        return;
    }
    size_t kc = (size_t)d->k * d->c, xs = (size_t)d->h * d->w, ys = (size_t)d->oh * d->ow;
    zero(y, (size_t)d->n * d->k * ys);
    for (int b = 0; b < d->n; b++) {
        const void *xb = at(&g, x, (size_t)b * d->c * xs);
        float *yb = out_at(y, (size_t)b * d->k * ys);
        for (int i = 0; i < d->r; i++)
            for (int j = 0; j < d->s; j++) {
                rect r = tap_rect(d, i, j);
                size_t area = rect_area(&r);
                if (!area) continue;
                const void *wij = at(&g, wt, (size_t)(i * d->s + j) * kc);
                if (full_rows(d, &r)) {
                    gemm(&g, 'N', 'N', d->k, (long)area, d->c, wij, d->c,
                         at(&g, xb, (size_t)(r.oy0 + r.dy) * d->w), (long)xs, 1.0f,
                         out_at(yb, (size_t)r.oy0 * d->ow), (long)ys);
                } else {
                    gather(g.es, xb, d->c, xs, d->w, r.oy0 + r.dy, r.oy1 + r.dy, r.ox0 + r.dx,
                           r.ox1 + r.dx, ga);
                    gemm(&g, 'N', 'N', d->k, (long)area, d->c, wij, d->c, ga, (long)area, 0.0f, gb,
                         (long)area);
                    scatter_add(gb, d->k, ys, d->ow, r.oy0, r.oy1, r.ox0, r.ox1, yb);
                }
            }
    }
}

void sg_conv_taps_bwd_data(sg_conv_taps_ws *ws, sg_conv_mm *mm, const sg_conv_desc *d, int nhwc,
                           const void *dy, const void *w, float *dx, int accumulate) {
    sg_conv_taps_prepare(ws, d);
    taps_gemm g = gemm_of(mm, dy);
    const void *wt = tap_weights(ws, &g, d, w);
    void *ga = ws->a.p;
    float *gb = ws->b.p;
    if (nhwc) {
        taps_bwd_data_nhwc(ws, &g, d, dy, wt, dx, accumulate);
        return;
    }
    size_t kc = (size_t)d->k * d->c, xs = (size_t)d->h * d->w, ys = (size_t)d->oh * d->ow;
    if (!accumulate) zero(dx, (size_t)d->n * d->c * xs);
    for (int b = 0; b < d->n; b++) {
        const void *gyb = at(&g, dy, (size_t)b * d->k * ys);
        float *gxb = out_at(dx, (size_t)b * d->c * xs);
        for (int i = 0; i < d->r; i++)
            for (int j = 0; j < d->s; j++) {
                rect r = tap_rect(d, i, j);
                size_t area = rect_area(&r);
                if (!area) continue;
                const void *wij = at(&g, wt, (size_t)(i * d->s + j) * kc);
                /* dx[c, rect + off] += W_ij^T [c x k] . dy[k, rect] */
                if (full_rows(d, &r)) {
                    gemm(&g, 'T', 'N', d->c, (long)area, d->k, wij, d->c,
                         at(&g, gyb, (size_t)r.oy0 * d->ow), (long)ys, 1.0f,
                         out_at(gxb, (size_t)(r.oy0 + r.dy) * d->w), (long)xs);
                } else {
                    gather(g.es, gyb, d->k, ys, d->ow, r.oy0, r.oy1, r.ox0, r.ox1, ga);
                    gemm(&g, 'T', 'N', d->c, (long)area, d->k, wij, d->c, ga, (long)area, 0.0f, gb,
                         (long)area);
                    scatter_add(gb, d->c, xs, d->w, r.oy0 + r.dy, r.oy1 + r.dy, r.ox0 + r.dx,
                                r.ox1 + r.dx, gxb);
                }
            }
    }
}

void sg_conv_taps_bwd_weight(sg_conv_taps_ws *ws, sg_conv_mm *mm, const sg_conv_desc *d, int nhwc,
                             const void *x, const void *dy, float *dw, int accumulate) {
    sg_conv_taps_prepare(ws, d);
    taps_gemm g = gemm_of(mm, x);
    float *wt = ws->wt.p;
    void *ga = ws->a.p, *gb = ws->b.p;
    int taps = d->r * d->s;
    size_t kc = (size_t)d->k * d->c, xs = (size_t)d->h * d->w, ys = (size_t)d->oh * d->ow;
    if (g.dry) dw = NULL;
    if (nhwc) taps_bwd_weight_nhwc(ws, &g, d, x, dy);
    else memset(wt, 0, (size_t)taps * kc * sizeof(float)); /* dead taps stay 0 */
    for (int b = 0; b < d->n && !nhwc; b++) {
        const void *xb = at(&g, x, (size_t)b * d->c * xs);
        const void *gyb = at(&g, dy, (size_t)b * d->k * ys);
        for (int i = 0; i < d->r; i++)
            for (int j = 0; j < d->s; j++) {
                rect r = tap_rect(d, i, j);
                size_t area = rect_area(&r);
                if (!area) continue;
                float *wij = wt + (size_t)(i * d->s + j) * kc;
                /* dW_ij [k x c] += dy[k, rect] . x[c, rect + off]^T */
                if (full_rows(d, &r)) {
                    gemm(&g, 'N', 'T', d->k, d->c, (long)area, at(&g, gyb, (size_t)r.oy0 * d->ow),
                         (long)ys, at(&g, xb, (size_t)(r.oy0 + r.dy) * d->w), (long)xs, 1.0f, wij,
                         d->c);
                } else {
                    gather(g.es, gyb, d->k, ys, d->ow, r.oy0, r.oy1, r.ox0, r.ox1, ga);
                    gather(g.es, xb, d->c, xs, d->w, r.oy0 + r.dy, r.oy1 + r.dy, r.ox0 + r.dx,
                           r.ox1 + r.dx, gb);
                    gemm(&g, 'N', 'T', d->k, d->c, (long)area, ga, (long)area, gb, (long)area, 1.0f,
                         wij, d->c);
                }
            }
    }
    if (!dw) return; /* dry run */
    /* dw[k][c][t] (+)= wt[t][k][c] */
    size_t blocks = (kc + TBLK - 1) / TBLK;
#pragma omp parallel for schedule(static) if (kc * taps >= SG_CPU_PAR_MIN)
    for (size_t b = 0; b < blocks; b++) {
        size_t q0 = b * TBLK;
        from_taps(wt, dw, q0, kc - q0 < TBLK ? kc - q0 : TBLK, taps, kc, accumulate);
    }
}

void sg_conv_taps_ws_free(sg_conv_taps_ws *ws) {
    sg_cpu_aligned_free(ws->wt.p);
    sg_cpu_aligned_free(ws->a.p);
    sg_cpu_aligned_free(ws->b.p);
    memset(ws, 0, sizeof *ws);
}
