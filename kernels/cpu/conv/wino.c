/* kernels/cpu/conv/wino.c - float32 3x3 stride-1 "same" convolutions
 * (padding = dilation, any dilation) as Winograd F(4x4, 3x3), the three
 * passes, for CPUs where oneDNN 2.6 has no Winograd kernel (it has one for
 * AVX-512 only: the row onednn-wino). Each output tile of 4x4 pixels reads a
 * 6x6 input tile; in the transformed domain a tile costs 36 multiplies per
 * channel pair instead of 144, so the GEMMs do a quarter of the direct
 * conv's work, and they run on dnnl_sgemm at the rate oneDNN's direct
 * kernels reach (docs/BENCHMARKS.md "Winograd on AVX2").
 *
 * A dilated conv is the undilated one on each phase sub-image (pixels whose
 * coordinates agree modulo the dilation), so a tile is (image, phase, tile
 * row, tile column) and reads every D-th pixel: no phase copy. Lavin and
 * Gray's matrices for the points 0, 1, -1, 2, -2 and infinity:
 *   forward   y = A^T [(G g G^T) . (B^T d B)] A   summed over input channels
 *   bwd data  the forward conv of dy with the kernel flipped, channels swapped
 *   bwd wts   dg = G^T [sum over tiles (A dy A^T) . (B^T d B)] G
 * Layout of the transformed operands, per chunk of tiles (a multiple of 8,
 * the vector lanes of the transforms): V [36][c][tiles], M [36][k][tiles],
 * U [36][k][c]; pass xi is one GEMM per xi (36 of them, split over the
 * threads, each single-threaded: dnnl_sgemm runs on one thread inside a
 * parallel region). Every value is computed by one thread in a fixed order,
 * so results do not depend on the thread count. The sums differ from a
 * direct conv's by rounding through the transforms (within the conformance
 * suite's conv tolerance, as oneDNN's own Winograd).
 *
 * Activations NCHW or NHWC (strides), weights PyTorch's [k, c, 3, 3].
 */
#include <omp.h>
#include <string.h>

#include "kernels/cpu/conv/conv_internal.h"
#include "kernels/cpu/conv/wino_f43.h"

enum { LANES = 8, CHUNK_TILES = 256 };

int sg_conv_wino_applicable(const sg_conv_desc *d) {
    if (sg_conv_groups(d) != 1 || d->r != 3 || d->s != 3) return 0;
    if (d->stride_h != 1 || d->stride_w != 1 || d->dil_h < 1 || d->dil_w < 1) return 0;
    if (d->pad_h != d->dil_h || d->pad_w != d->dil_w) return 0;
    /* Small channel counts make GEMMs too thin to beat direct kernels; a
     * dilation as large as the map leaves taps reading only padding, which
     * onednn.c trims (a 1x1 conv is cheaper than any Winograd). */
    if (d->dil_h >= d->h || d->dil_w >= d->w) return 0;
    /* Phase sub-images under 8 pixels a side waste most of each 4x4 tile
     * (ASPP's rate 12 on a 32x32 map: 2.7 pixels; measured slower than the
     * dense kernel there). */
    if (d->h / d->dil_h < 8 || d->w / d->dil_w < 8) return 0;
    return d->c >= 16 && d->k >= 16 && d->oh == d->h && d->ow == d->w;
}

/* d[(i * size + j) * LANES + l] = pixel (y0 + D_h (i + shift), x0 + D_w
 * (j + shift)) of tile l of one channel plane, 0 outside the image or for a
 * tile past the end: the 6x6 input tiles (shift -1) and the 4x4 output-
 * gradient ones (shift 0). */
static void gather(const wino_geo *g, const float *src, const tile_pos *pos, int size, int shift,
                   float *d) {
    for (int l = 0; l < LANES; l++) {
        const tile_pos *p = &pos[l];
        long off = p->y0 >= 0 ? tile_base(g, p) : 0;
        for (int i = 0; i < size; i++) {
            int y = p->y0 + g->dh * (i + shift);
            int row_ok = p->y0 >= 0 && y >= 0 && y < g->h;
            for (int j = 0; j < size; j++) {
                int x = p->x0 + g->dw * (j + shift);
                d[(i * size + j) * LANES + l] = row_ok && x >= 0 && x < g->w
                                                    ? src[off + (long)g->dh * (i + shift) * g->sy +
                                                          (long)g->dw * (j + shift) * g->sx]
                                                    : 0.0f;
            }
        }
    }
}

/* V[xi][row][t] for LANES tiles of one channel: B^T d B of each 6x6 input
 * tile (rows D_h apart, columns D_w apart, zero outside the image). vstride:
 * elements between xi planes. */
static void input_tiles(const wino_geo *g, const float *src, const tile_pos *pos, float *v,
                        long vstride) {
    float d[6][6][LANES], t[6][6][LANES];
    gather(g, src, pos, 6, -1, &d[0][0][0]);
    for (int j = 0; j < 6; j++)
        for (int l = 0; l < LANES; l++)
            BT_ROWS(d[0][j][l], d[1][j][l], d[2][j][l], d[3][j][l], d[4][j][l], d[5][j][l],
                    t[0][j][l], t[1][j][l], t[2][j][l], t[3][j][l], t[4][j][l], t[5][j][l]);
    for (int i = 0; i < 6; i++) {
        float o[6][LANES];
        for (int l = 0; l < LANES; l++)
            BT_ROWS(t[i][0][l], t[i][1][l], t[i][2][l], t[i][3][l], t[i][4][l], t[i][5][l], o[0][l],
                    o[1][l], o[2][l], o[3][l], o[4][l], o[5][l]);
        for (int j = 0; j < 6; j++) memcpy(v + (i * 6 + j) * vstride, o[j], sizeof o[j]);
    }
}

/* y tiles of one output channel from M[xi][row][t]: A^T m A, written or
 * added (accumulate) where the pixel exists. */
static void output_tiles(const wino_geo *g, const float *m, long mstride, const tile_pos *pos,
                         float *dst, int accumulate) {
    float a[6][6][LANES], t[4][6][LANES], o[4][4][LANES];
    for (int i = 0; i < 6; i++)
        for (int j = 0; j < 6; j++) memcpy(a[i][j], m + (i * 6 + j) * mstride, sizeof a[i][j]);
    for (int j = 0; j < 6; j++)
        for (int l = 0; l < LANES; l++)
            AT_ROWS(a[0][j][l], a[1][j][l], a[2][j][l], a[3][j][l], a[4][j][l], a[5][j][l],
                    t[0][j][l], t[1][j][l], t[2][j][l], t[3][j][l]);
    for (int i = 0; i < 4; i++)
        for (int l = 0; l < LANES; l++)
            AT_ROWS(t[i][0][l], t[i][1][l], t[i][2][l], t[i][3][l], t[i][4][l], t[i][5][l],
                    o[i][0][l], o[i][1][l], o[i][2][l], o[i][3][l]);
    for (int l = 0; l < LANES; l++) {
        const tile_pos *p = &pos[l];
        if (p->y0 < 0) continue;
        long off = tile_base(g, p);
        for (int i = 0; i < 4; i++) {
            int y = p->y0 + g->dh * i;
            if (y >= g->h) break;
            for (int j = 0; j < 4; j++) {
                int x = p->x0 + g->dw * j;
                if (x >= g->w) break;
                float *q = dst + off + (long)g->dh * i * g->sy + (long)g->dw * j * g->sx;
                *q = accumulate ? *q + o[i][j][l] : o[i][j][l];
            }
        }
    }
}

/* A dy A^T of LANES 4x4 output-gradient tiles (zero where no pixel), into
 * M[xi][row][t]: the adjoint of output_tiles. */
static void grad_tiles(const wino_geo *g, const float *src, const tile_pos *pos, float *m,
                       long mstride) {
    float y[4][4][LANES], t[6][4][LANES];
    gather(g, src, pos, 4, 0, &y[0][0][0]);
    for (int j = 0; j < 4; j++)
        for (int l = 0; l < LANES; l++)
            A_ROWS(y[0][j][l], y[1][j][l], y[2][j][l], y[3][j][l], t[0][j][l], t[1][j][l],
                   t[2][j][l], t[3][j][l], t[4][j][l], t[5][j][l]);
    for (int i = 0; i < 6; i++) {
        float o[6][LANES];
        for (int l = 0; l < LANES; l++)
            A_ROWS(t[i][0][l], t[i][1][l], t[i][2][l], t[i][3][l], o[0][l], o[1][l], o[2][l],
                   o[3][l], o[4][l], o[5][l]);
        for (int j = 0; j < 6; j++) memcpy(m + (i * 6 + j) * mstride, o[j], sizeof o[j]);
    }
}

/* G g G^T of the 3x3 kernels k[l * 9 ...] (l < count <= LANES) into
 * u[xi * ustride + l]: LANES kernels at once, contiguous stores. */
static void weight_tiles(const float *k, int count, float *u, long ustride) {
    float g[9][LANES] = {{0}}, t[6][3][LANES], o[6][LANES];
    for (int l = 0; l < count; l++)
        for (int e = 0; e < 9; e++) g[e][l] = k[l * 9 + e];
    for (int j = 0; j < 3; j++)
        for (int l = 0; l < LANES; l++)
            G_ROWS(g[j][l], g[3 + j][l], g[6 + j][l], t[0][j][l], t[1][j][l], t[2][j][l],
                   t[3][j][l], t[4][j][l], t[5][j][l]);
    for (int i = 0; i < 6; i++) {
        for (int l = 0; l < LANES; l++)
            G_ROWS(t[i][0][l], t[i][1][l], t[i][2][l], o[0][l], o[1][l], o[2][l], o[3][l], o[4][l],
                   o[5][l]);
        for (int j = 0; j < 6; j++) memcpy(u + (i * 6 + j) * ustride, o[j], count * sizeof(float));
    }
}

/* G^T du G of the transformed gradients du[xi * ustride + l] into the 3x3
 * kernel gradients k[l * 9 ...] (l < count), written or added. */
static void weight_grad_tiles(const float *du, long ustride, int count, float *k, int accumulate) {
    float a[6][6][LANES] = {{{0}}}, t[3][6][LANES], r[3][3][LANES];
    for (int i = 0; i < 36; i++) memcpy(a[i / 6][i % 6], du + i * ustride, count * sizeof(float));
    for (int j = 0; j < 6; j++)
        for (int l = 0; l < LANES; l++)
            GT_ROWS(a[0][j][l], a[1][j][l], a[2][j][l], a[3][j][l], a[4][j][l], a[5][j][l],
                    t[0][j][l], t[1][j][l], t[2][j][l]);
    for (int i = 0; i < 3; i++)
        for (int l = 0; l < LANES; l++)
            GT_ROWS(t[i][0][l], t[i][1][l], t[i][2][l], t[i][3][l], t[i][4][l], t[i][5][l],
                    r[i][0][l], r[i][1][l], r[i][2][l]);
    for (int l = 0; l < count; l++)
        for (int e = 0; e < 9; e++) {
            float *q = &k[l * 9 + e];
            *q = accumulate ? *q + r[e / 3][e % 3][l] : r[e / 3][e % 3][l];
        }
}

static long chunk_of(const wino_geo *g) {
    long t = (g->tiles + LANES - 1) / LANES * LANES;
    return t < CHUNK_TILES ? t : CHUNK_TILES;
}

void sg_conv_wino_reserve(sg_conv_wino_ws *ws, const sg_conv_desc *d) {
    wino_geo g = geo_of(d, 0, d->c);
    size_t tc = (size_t)chunk_of(&g), c = (size_t)d->c, k = (size_t)d->k;
    size_t big = c > k ? c : k;
    ws_reserve(&ws->u, 36 * c * k * sizeof(float));
    ws_reserve(&ws->v, 36 * big * tc * sizeof(float));
    ws_reserve(&ws->m, 36 * big * tc * sizeof(float));
    ws_reserve(&ws->wf, 9 * c * k * sizeof(float));
    ws_reserve(&ws->pos, tc * sizeof(tile_pos));
}

/* The tile origins of the chunk of tc tiles from t0 into pos, and V of
 * its channels (cin planes of x) into v ([36][cin][tc]); returns the
 * chunk's LANES groups. */
static long input_chunk(const wino_geo *gi, long t0, long tc, long cin, const float *x,
                        tile_pos *pos, float *v) {
    tile_positions(gi, t0, (int)tc, pos);
    long groups = tc / LANES, vplane = cin * tc;
#pragma omp parallel for collapse(2) schedule(static)
    for (long c = 0; c < cin; c++)
        for (long b = 0; b < groups; b++)
            input_tiles(gi, x + c * gi->sc, pos + b * LANES, v + c * tc + b * LANES, vplane);
    return groups;
}

/* y (channels cout) = conv(x (channels cin), w [cout][cin][3][3]) on the
 * geometry of d (its dilation), written or added. */
static void wino_conv(sg_conv_wino_ws *ws, const sg_conv_desc *d, int nhwc, int cin, int cout,
                      const float *x, const float *w, float *y, int accumulate) {
    wino_geo gi = geo_of(d, nhwc, cin), go = geo_of(d, nhwc, cout);
    long tc = chunk_of(&gi);
    float *u = ws->u.p, *v = ws->v.p, *m = ws->m.p;
    tile_pos *pos = ws->pos.p;
    long uplane = (long)cout * cin, vplane = (long)cin * tc, mplane = (long)cout * tc;
#pragma omp parallel for schedule(static)
    for (long kc = 0; kc < uplane; kc += LANES)
        weight_tiles(w + kc * 9, uplane - kc < LANES ? (int)(uplane - kc) : LANES, u + kc, uplane);
    for (long t0 = 0; t0 < gi.tiles; t0 += tc) {
        long groups = input_chunk(&gi, t0, tc, cin, x, pos, v);
#pragma omp parallel for schedule(static)
        for (int xi = 0; xi < 36; xi++)
            DNNL_CHECK(dnnl_sgemm('N', 'N', cout, tc, cin, 1.0f, u + xi * uplane, cin,
                                  v + xi * vplane, tc, 0.0f, m + xi * mplane, tc));
#pragma omp parallel for collapse(2) schedule(static)
        for (long k = 0; k < cout; k++)
            for (long b = 0; b < groups; b++)
                output_tiles(&go, m + k * tc + b * LANES, mplane, pos + b * LANES, y + k * go.sc,
                             accumulate);
    }
}

void sg_conv_wino_fwd(sg_conv_wino_ws *ws, const sg_conv_desc *d, int nhwc, const float *x,
                      const float *w, float *y) {
    sg_conv_wino_reserve(ws, d);
    wino_conv(ws, d, nhwc, d->c, d->k, x, w, y, 0);
}

void sg_conv_wino_bwd_data(sg_conv_wino_ws *ws, const sg_conv_desc *d, int nhwc, const float *dy,
                           const float *w, float *dx, int accumulate) {
    sg_conv_wino_reserve(ws, d);
    /* dx = conv(dy, w') with w'[c][k][i][j] = w[k][c][2-i][2-j] */
    float *wf = ws->wf.p;
    long K = d->k, C = d->c;
#pragma omp parallel for schedule(static)
    for (long c = 0; c < C; c++)
        for (long k = 0; k < K; k++)
            for (int t = 0; t < 9; t++) wf[(c * K + k) * 9 + t] = w[(k * C + c) * 9 + 8 - t];
    wino_conv(ws, d, nhwc, d->k, d->c, dy, wf, dx, accumulate);
}

void sg_conv_wino_bwd_weight(sg_conv_wino_ws *ws, const sg_conv_desc *d, int nhwc, const float *x,
                             const float *dy, float *dw, int accumulate) {
    sg_conv_wino_reserve(ws, d);
    wino_geo gi = geo_of(d, nhwc, d->c), go = geo_of(d, nhwc, d->k);
    long tc = chunk_of(&gi), C = d->c, K = d->k;
    float *u = ws->u.p, *v = ws->v.p, *m = ws->m.p;
    tile_pos *pos = ws->pos.p;
    long uplane = K * C, vplane = C * tc, mplane = K * tc;
    for (long t0 = 0; t0 < gi.tiles; t0 += tc) {
        long groups = input_chunk(&gi, t0, tc, C, x, pos, v);
#pragma omp parallel for collapse(2) schedule(static)
        for (long k = 0; k < K; k++)
            for (long b = 0; b < groups; b++)
                grad_tiles(&go, dy + k * go.sc, pos + b * LANES, m + k * tc + b * LANES, mplane);
        float beta = t0 == 0 ? 0.0f : 1.0f;
#pragma omp parallel for schedule(static)
        for (int xi = 0; xi < 36; xi++)
            DNNL_CHECK(dnnl_sgemm('N', 'T', K, C, tc, 1.0f, m + xi * mplane, tc, v + xi * vplane,
                                  tc, beta, u + xi * uplane, C));
    }
#pragma omp parallel for schedule(static)
    for (long kc = 0; kc < uplane; kc += LANES)
        weight_grad_tiles(u + kc, uplane, uplane - kc < LANES ? (int)(uplane - kc) : LANES,
                          dw + kc * 9, accumulate);
}

void sg_conv_wino_ws_free(sg_conv_wino_ws *ws) {
    ws_buf *b[] = {&ws->u, &ws->v, &ws->m, &ws->wf, &ws->pos};
    for (size_t i = 0; i < sizeof b / sizeof b[0]; i++) {
        sg_cpu_aligned_free(b[i]->p);
        b[i]->p = NULL;
        b[i]->bytes = 0;
    }
}
