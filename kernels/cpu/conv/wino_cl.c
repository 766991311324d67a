/* kernels/cpu/conv/wino_cl.c - the native bf16 3x3 stride-1 "same"
 * convolutions (padding = dilation, any dilation) on NHWC activations as
 * Winograd F(4x4, 3x3) with float32 transforms and float32 GEMMs: bf16
 * inputs (x or dy as bf16 bits; the float32 weights rounded to bf16 as
 * read), the float32 sums out (the caller rounds them once to bf16,
 * native.c).
 *
 * Why: oneDNN 2.6 has no bf16 Winograd, and its bf16 direct kernels already
 * run near the AVX512-BF16 peak, so the step's 3x3 convolutions (about a
 * third of a bf16 ResNet-50 step) can only get faster by doing fewer
 * multiplies. A tile costs 36 multiplies per channel pair instead of 144;
 * in float32 (half the bf16 rate) that is still half the time of the bf16
 * direct kernel on the GEMMs (docs/BENCHMARKS.md "bf16 Winograd"). The
 * numbers stay those of a bf16 convolution with float32 accumulation: the
 * inputs are bf16 values, every transform and product is float32, so the
 * sums differ from the direct kernel's by float32 rounding through the
 * transforms (as wino.c's), far below the final bf16 rounding.
 *
 * wino.c puts tiles on the vector lanes (NCHW: a channel plane's
 * pixels are contiguous). Here the channels are: an NHWC pixel holds its
 * channels contiguously, so a tile's 36 input pixels are 36 contiguous
 * loads per block of 16 channels and nothing is gathered. Per chunk of
 * tiles (chunk_of; the tile geometry of wino_f43.h, dilated convs
 * on their phase tiles):
 *   V [36][tile][cin]   B^T d B of each input tile
 *   U [36][cin][cout]   G g G^T of each kernel (once per call, from the
 *                       float32 weights; streamed past the caches: 38 MB
 *                       at 512 x 512)
 *   M [36][tile][cout]  = V[xi] . U[xi]: 36 sgemms, split over the threads,
 *                       each single-threaded (dnnl_sgemm inside a parallel
 *                       region), then A^T m A into the output pixels.
 * Backward-data is the forward conv of dy with the kernel flipped and the
 * channels swapped (the weight transform reads it so, no copy); backward-
 * weights sums dU[xi] = V[xi]^T . (A dy A^T)[xi] over the chunks, then
 * G^T dU G. Every value is computed by one thread in a fixed order: the
 * results do not depend on the thread count.
 */
#include <omp.h>
#include <stdint.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "kernels/cpu/conv/conv_internal.h"
#include "kernels/cpu/conv/wino_f43.h"
#include "kernels/formulas/bf16.h"

enum { CL = 16, CHUNK_MIN = 32, CHUNK_MAX = 256, CHUNK_FLOATS = 131072 };

/* CL channels of bf16 bits from src as floats; lanes past cnt are 0. */
static inline void load_bf16(float *dst, const uint16_t *src, int cnt) {
    if (cnt == CL) {
#pragma omp simd
        for (int l = 0; l < CL; l++) dst[l] = sg_bf16_to_f32(src[l]);
    } else {
        for (int l = 0; l < CL; l++) dst[l] = l < cnt ? sg_bf16_to_f32(src[l]) : 0.0f;
    }
}

static inline void store(float *dst, const float *src, int cnt) {
    if (cnt == CL) {
#pragma omp simd
        for (int l = 0; l < CL; l++) dst[l] = src[l];
    } else {
        for (int l = 0; l < cnt; l++) dst[l] = src[l];
    }
}

/* Non-temporal: U is written once per call and read once by the GEMMs,
 * and from 512 channels on it is larger than the caches (36 x 512 x
 * 512 floats: 38 MB), so it bypasses them (no read for ownership, which
 * made this transform several times slower); SSE2, so every clone has it. Needs a 16-byte aligned dst. */
static inline void store_nt(float *dst, const float *src, int cnt) {
#if defined(__SSE2__)
    if (cnt == CL && ((uintptr_t)dst & 15) == 0) {
        for (int l = 0; l < CL; l += 4) _mm_stream_ps(dst + l, _mm_loadu_ps(src + l));
        return;
    }
#endif
    store(dst, src, cnt);
}

/* The element offsets of a tile's size x size pixels (rows and columns D
 * apart from (y0 + D shift, x0 + D shift)), -1 outside the image. */
static void tile_offsets(const wino_geo *g, const tile_pos *p, int size, int shift, long *off) {
    for (int i = 0; i < size; i++) {
        int y = p->y0 + g->dh * (i + shift);
        for (int j = 0; j < size; j++) {
            int x = p->x0 + g->dw * (j + shift);
            int in = p->y0 >= 0 && y >= 0 && y < g->h && x >= 0 && x < g->w;
            off[i * size + j] = in ? p->n * g->sn + y * g->sy + x * g->sx : -1;
        }
    }
}

/* d[e] = CL channels of pixel e of a tile (src + off[e]; lanes past cnt
 * and pixels outside the image, off -1, are 0), for the n pixels. */
static inline void load_tile(float (*d)[CL], const uint16_t *src, const long *off, int n, int cnt) {
    for (int e = 0; e < n; e++) {
        if (off[e] >= 0) load_bf16(d[e], src + off[e], cnt);
        else
            for (int l = 0; l < CL; l++) d[e][l] = 0.0f;
    }
}

/* V[xi][row] (cin floats at v + xi * vplane) = B^T d B of one input tile. */
SG_CPU_CLONES static void input_tile(const wino_geo *g, const uint16_t *x, const tile_pos *p,
                                     int cin, float *v, long vplane) {
    long off[36];
    tile_offsets(g, p, 6, -1, off);
    for (int c0 = 0; c0 < cin; c0 += CL) {
        int cnt = cin - c0 < CL ? cin - c0 : CL;
        float d[36][CL], t[36][CL];
        load_tile(d, x + c0, off, 36, cnt);
        for (int j = 0; j < 6; j++)
#pragma omp simd
            for (int l = 0; l < CL; l++)
                BT_ROWS(d[j][l], d[6 + j][l], d[12 + j][l], d[18 + j][l], d[24 + j][l],
                        d[30 + j][l], t[j][l], t[6 + j][l], t[12 + j][l], t[18 + j][l],
                        t[24 + j][l], t[30 + j][l]);
        for (int i = 0; i < 6; i++) {
            float o[6][CL];
#pragma omp simd
            for (int l = 0; l < CL; l++)
                BT_ROWS(t[i * 6][l], t[i * 6 + 1][l], t[i * 6 + 2][l], t[i * 6 + 3][l],
                        t[i * 6 + 4][l], t[i * 6 + 5][l], o[0][l], o[1][l], o[2][l], o[3][l],
                        o[4][l], o[5][l]);
            for (int j = 0; j < 6; j++) store(v + (i * 6 + j) * vplane + c0, o[j], cnt);
        }
    }
}

/* A dy A^T of one 4x4 output-gradient tile (zero where no pixel) into
 * M[xi][row] (cout floats at m + xi * mplane). */
SG_CPU_CLONES static void grad_tile(const wino_geo *g, const uint16_t *dy, const tile_pos *p,
                                    int cout, float *m, long mplane) {
    long off[16];
    tile_offsets(g, p, 4, 0, off);
    for (int k0 = 0; k0 < cout; k0 += CL) {
        int cnt = cout - k0 < CL ? cout - k0 : CL;
        float y[16][CL], t[24][CL];
        load_tile(y, dy + k0, off, 16, cnt);
        for (int j = 0; j < 4; j++)
#pragma omp simd
            for (int l = 0; l < CL; l++)
                A_ROWS(y[j][l], y[4 + j][l], y[8 + j][l], y[12 + j][l], t[j][l], t[4 + j][l],
                       t[8 + j][l], t[12 + j][l], t[16 + j][l], t[20 + j][l]);
        for (int i = 0; i < 6; i++) {
            float o[6][CL];
#pragma omp simd
            for (int l = 0; l < CL; l++)
                A_ROWS(t[i * 4][l], t[i * 4 + 1][l], t[i * 4 + 2][l], t[i * 4 + 3][l], o[0][l],
                       o[1][l], o[2][l], o[3][l], o[4][l], o[5][l]);
            for (int j = 0; j < 6; j++) store(m + (i * 6 + j) * mplane + k0, o[j], cnt);
        }
    }
}

/* A^T m A of one tile's M[xi][row] (cout floats at m + xi * mplane) into
 * its output pixels of y (float32, NHWC), where they exist. */
SG_CPU_CLONES static void output_tile(const wino_geo *g, const float *m, long mplane,
                                      const tile_pos *p, int cout, float *y) {
    long off[16];
    tile_offsets(g, p, 4, 0, off);
    for (int k0 = 0; k0 < cout; k0 += CL) {
        int cnt = cout - k0 < CL ? cout - k0 : CL;
        float a[36][CL], t[24][CL], o[16][CL];
        for (int e = 0; e < 36; e++) {
            const float *s = m + e * mplane + k0;
            __builtin_prefetch(s + 4 * CL); /* 36 streams: see weight_grad_row */
#pragma omp simd
            for (int l = 0; l < CL; l++) a[e][l] = l < cnt ? s[l] : 0.0f;
        }
        for (int j = 0; j < 6; j++)
#pragma omp simd
            for (int l = 0; l < CL; l++)
                AT_ROWS(a[j][l], a[6 + j][l], a[12 + j][l], a[18 + j][l], a[24 + j][l],
                        a[30 + j][l], t[j][l], t[6 + j][l], t[12 + j][l], t[18 + j][l]);
        for (int i = 0; i < 4; i++)
#pragma omp simd
            for (int l = 0; l < CL; l++)
                AT_ROWS(t[i * 6][l], t[i * 6 + 1][l], t[i * 6 + 2][l], t[i * 6 + 3][l],
                        t[i * 6 + 4][l], t[i * 6 + 5][l], o[i * 4][l], o[i * 4 + 1][l],
                        o[i * 4 + 2][l], o[i * 4 + 3][l]);
        for (int e = 0; e < 16; e++)
            if (off[e] >= 0) store(y + off[e] + k0, o[e], cnt);
    }
}

/* G g G^T of the 3x3 kernels g[tap][lane] (lanes l < cnt) into
 * u + xi * uplane + l. */
SG_CPU_CLONES static void weight_block(float g[9][CL], int cnt, float *u, long uplane) {
    float t[18][CL], o[6][CL];
    for (int j = 0; j < 3; j++)
#pragma omp simd
        for (int l = 0; l < CL; l++)
            G_ROWS(g[j][l], g[3 + j][l], g[6 + j][l], t[j][l], t[3 + j][l], t[6 + j][l],
                   t[9 + j][l], t[12 + j][l], t[15 + j][l]);
    for (int i = 0; i < 6; i++) {
#pragma omp simd
        for (int l = 0; l < CL; l++)
            G_ROWS(t[i * 3][l], t[i * 3 + 1][l], t[i * 3 + 2][l], o[0][l], o[1][l], o[2][l],
                   o[3][l], o[4][l], o[5][l]);
        for (int j = 0; j < 6; j++) store_nt(u + (i * 6 + j) * uplane, o[j], cnt);
    }
}

/* U[xi] (K x C, backward-data's B operand), row k, of the float32 weights
 * w [k][c][3][3] turned by 180 degrees (flip) and rounded to bf16 as read
 * (lanes c: 16 kernels, 144 contiguous floats). Neither pass keeps a bf16
 * copy of the weights: it would hold 2 more bytes a weight through the
 * step, and the forward pass read from one was slower (`segtrain bench
 * --profile`, 1 thread, the Winograd convs' forward ms per step, copy /
 * float32, alternated 3 times: 106.9, 100.8, 100.3 / 98.5, 99.7, 95.2). */
SG_CPU_CLONES static void weight_row_bwd(const float *w, long k, int C, float *u, long uplane) {
    for (int c0 = 0; c0 < C; c0 += CL) {
        int cnt = C - c0 < CL ? C - c0 : CL;
        const float *s = w + (k * C + c0) * 9;
        float g[9][CL];
        for (int l = 0; l < CL; l++)
            for (int e = 0; e < 9; e++) g[8 - e][l] = l < cnt ? sg_bf16_round(s[l * 9 + e]) : 0.0f;
        weight_block(g, cnt, u + k * C + c0, uplane);
    }
}

/* U[xi] (C x K, the forward GEMMs' B operand), row c, of the float32
 * weights w [k][c][3][3], rounded to bf16 as read (lanes k: 16 kernels 9 *
 * C floats apart). */
SG_CPU_CLONES static void weight_row_fwd(const float *w, long c, int C, int K, float *u,
                                         long uplane) {
    for (int k0 = 0; k0 < K; k0 += CL) {
        int cnt = K - k0 < CL ? K - k0 : CL;
        const float *s = w + ((long)k0 * C + c) * 9;
        float g[9][CL];
        /* 16 kernels 9C floats apart, each read 9 floats a call: more
         * streams than the hardware follows, so the line 4 calls on by
         * hand (measured in the bf16 step's profile: docs/lab/cpu-step-2026.md) */
        for (int l = 0; l < cnt; l++) __builtin_prefetch(s + (long)l * C * 9 + 4 * 9);
        for (int l = 0; l < CL; l++)
            for (int e = 0; e < 9; e++)
                g[e][l] = l < cnt ? sg_bf16_round(s[(long)l * C * 9 + e]) : 0.0f;
        weight_block(g, cnt, u + c * K + k0, uplane);
    }
}

/* U of a pass into u: the forward one ([36][C][K]) or backward-data's
 * ([36][K][C], flipped). Each thread's streaming stores are done before
 * the GEMMs read U. */
static void weight_transform(const float *w, int C, int K, int bwd_data, float *u) {
    long uplane = (long)C * K;
#pragma omp parallel
    {
        if (!bwd_data) {
#pragma omp for schedule(static)
            for (long c = 0; c < C; c++) weight_row_fwd(w, c, C, K, u, uplane);
        } else {
#pragma omp for schedule(static)
            for (long k = 0; k < K; k++) weight_row_bwd(w, k, C, u, uplane);
        }
#if defined(__SSE2__)
        _mm_sfence();
#endif
    }
}

/* dw[k][c][3][3] for every k of one c = G^T dU G of dU[xi][c][k] (at du +
 * xi * uplane + c * K). */
SG_CPU_CLONES static void weight_grad_row(const float *du, long uplane, long c, int C, int K,
                                          float *dw) {
    for (int k0 = 0; k0 < K; k0 += CL) {
        int cnt = K - k0 < CL ? K - k0 : CL;
        float a[36][CL], t[18][CL], r[9][CL];
        for (int e = 0; e < 36; e++) {
            /* 36 streams at once, more than the hardware prefetchers
             * follow: each one 4 blocks ahead by hand (measured in the
             * bf16 step's profile: docs/lab/cpu-step-2026.md) */
            const float *s = du + e * uplane + c * K + k0;
            __builtin_prefetch(s + 4 * CL);
#pragma omp simd
            for (int l = 0; l < CL; l++) a[e][l] = l < cnt ? s[l] : 0.0f;
        }
        for (int j = 0; j < 6; j++)
#pragma omp simd
            for (int l = 0; l < CL; l++)
                GT_ROWS(a[j][l], a[6 + j][l], a[12 + j][l], a[18 + j][l], a[24 + j][l],
                        a[30 + j][l], t[j][l], t[6 + j][l], t[12 + j][l]);
        for (int i = 0; i < 3; i++)
#pragma omp simd
            for (int l = 0; l < CL; l++)
                GT_ROWS(t[i * 6][l], t[i * 6 + 1][l], t[i * 6 + 2][l], t[i * 6 + 3][l],
                        t[i * 6 + 4][l], t[i * 6 + 5][l], r[i * 3][l], r[i * 3 + 1][l],
                        r[i * 3 + 2][l]);
        for (int l = 0; l < cnt; l++)
            for (int e = 0; e < 9; e++) dw[((long)(k0 + l) * C + c) * 9 + e] = r[e][l];
    }
}

/* Tiles per chunk: V and M hold 36 x chunk x channels floats, kept to
 * about 18 MiB each (CHUNK_FLOATS per transform point: 128 tiles at 1024
 * channels, 256 at 512). They live in the per-tap path's buffers, which
 * ASPP's backward passes grow larger at 512x1024, so the bf16 step's
 * peak memory does not move. The backward-weights GEMMs sum over the
 * chunk's tiles, so fewer, longer chunks help them (128 tiles beat 64);
 * the other sgemms run as fast on 64 rows as on 256. */
static long chunk_of(const wino_geo *g, const sg_conv_desc *d) {
    long ch = d->c > d->k ? d->c : d->k, t = CHUNK_FLOATS / ch;
    t = t < CHUNK_MIN ? CHUNK_MIN : t > CHUNK_MAX ? CHUNK_MAX : t;
    return g->tiles < t ? g->tiles : t;
}

void sg_conv_wcl_reserve(sg_conv_wcl_ws *ws, const sg_conv_desc *d) {
    wino_geo g = geo_of(d, 1, d->c);
    size_t tc = (size_t)chunk_of(&g, d), c = (size_t)d->c, k = (size_t)d->k;
    ws_reserve(ws->u, 36 * c * k * sizeof(float));
    ws_reserve(ws->v, 36 * (c > k ? c : k) * tc * sizeof(float));
    ws_reserve(ws->m, 36 * (c > k ? c : k) * tc * sizeof(float));
    ws_reserve(&ws->pos, tc * sizeof(tile_pos));
}

/* y (cout channels) = the conv of x (cin channels) with U ([36][cin][cout])
 * already in ws->u, on d's geometry. */
static void wcl_conv(sg_conv_wcl_ws *ws, const sg_conv_desc *d, int cin, int cout,
                     const uint16_t *x, float *y) {
    wino_geo gi = geo_of(d, 1, cin), go = geo_of(d, 1, cout);
    long tc = chunk_of(&gi, d), uplane = (long)cin * cout;
    float *u = ws->u->p, *v = ws->v->p, *m = ws->m->p;
    tile_pos *pos = ws->pos.p;
    for (long t0 = 0; t0 < gi.tiles; t0 += tc) {
        long nt = gi.tiles - t0 < tc ? gi.tiles - t0 : tc;
        long vplane = nt * cin, mplane = nt * cout;
        tile_positions(&gi, t0, (int)nt, pos);
#pragma omp parallel for schedule(static)
        for (long t = 0; t < nt; t++) input_tile(&gi, x, &pos[t], cin, v + t * cin, vplane);
#pragma omp parallel for schedule(static)
        for (int xi = 0; xi < 36; xi++)
            DNNL_CHECK(dnnl_sgemm('N', 'N', nt, cout, cin, 1.0f, v + xi * vplane, cin,
                                  u + xi * uplane, cout, 0.0f, m + xi * mplane, cout));
#pragma omp parallel for schedule(static)
        for (long t = 0; t < nt; t++) output_tile(&go, m + t * cout, mplane, &pos[t], cout, y);
    }
}

void sg_conv_wcl_fwd(sg_conv_wcl_ws *ws, const sg_conv_desc *d, const uint16_t *x, const float *w,
                     float *y) {
    sg_conv_wcl_reserve(ws, d);
    weight_transform(w, d->c, d->k, 0, ws->u->p);
    wcl_conv(ws, d, d->c, d->k, x, y);
}

/* dx = the forward conv of dy (k channels in, c out) with the flipped
 * kernels */
void sg_conv_wcl_bwd_data(sg_conv_wcl_ws *ws, const sg_conv_desc *d, const uint16_t *dy,
                          const float *w, float *dx) {
    sg_conv_wcl_reserve(ws, d);
    weight_transform(w, d->c, d->k, 1, ws->u->p);
    wcl_conv(ws, d, d->k, d->c, dy, dx);
}

void sg_conv_wcl_bwd_weight(sg_conv_wcl_ws *ws, const sg_conv_desc *d, const uint16_t *x,
                            const uint16_t *dy, float *dw) {
    sg_conv_wcl_reserve(ws, d);
    wino_geo gi = geo_of(d, 1, d->c), go = geo_of(d, 1, d->k);
    long tc = chunk_of(&gi, d), C = d->c, K = d->k, uplane = C * K;
    float *u = ws->u->p, *v = ws->v->p, *m = ws->m->p;
    tile_pos *pos = ws->pos.p;
    for (long t0 = 0; t0 < gi.tiles; t0 += tc) {
        long nt = gi.tiles - t0 < tc ? gi.tiles - t0 : tc;
        long vplane = nt * C, mplane = nt * K;
        tile_positions(&gi, t0, (int)nt, pos);
#pragma omp parallel for schedule(static)
        for (long t = 0; t < nt; t++) {
            input_tile(&gi, x, &pos[t], (int)C, v + t * C, vplane);
            grad_tile(&go, dy, &pos[t], (int)K, m + t * K, mplane);
        }
        float beta = t0 == 0 ? 0.0f : 1.0f;
#pragma omp parallel for schedule(static)
        for (int xi = 0; xi < 36; xi++)
            DNNL_CHECK(dnnl_sgemm('T', 'N', C, K, nt, 1.0f, v + xi * vplane, C, m + xi * mplane, K,
                                  beta, u + xi * uplane, K));
    }
#pragma omp parallel for schedule(static)
    for (long c = 0; c < C; c++) weight_grad_row(u, uplane, c, (int)C, (int)K, dw);
}

void sg_conv_wcl_ws_free(sg_conv_wcl_ws *ws) {
    sg_cpu_aligned_free(ws->pos.p);
    ws->pos.p = NULL;
    ws->pos.bytes = 0;
}
