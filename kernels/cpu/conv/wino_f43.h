/* kernels/cpu/conv/wino_f43.h - private to the two Winograd files
 * (wino.c: tiles on the vector lanes, any layout; wino_cl.c:
 * channels on the lanes, NHWC): the tile geometry of a 3x3 "same" conv with
 * any dilation (a tile is image, phase, tile row, tile column; see
 * wino.c) and Lavin and Gray's F(4x4, 3x3) transforms as row
 * macros on scalars (the callers loop them over their lanes).
 */
#ifndef SG_KERNELS_CPU_CONV_WINO_F43_H
#define SG_KERNELS_CPU_CONV_WINO_F43_H

#include "kernels/backend.h"

/* The tiles of one conv geometry: tile t is image n, phase (ry, rx), tile
 * (ty, tx) of that phase; its output pixels are rows y0 + D_h*i, columns
 * x0 + D_w*j (i, j < 4) and its input ones rows y0 + D_h*(i-1) (i < 6). */
typedef struct wino_geo {
    int n, h, w, dh, dw;
    long tiles; /* all of them */
    /* strides of an activation tensor in elements */
    long sn, sc, sy, sx;
} wino_geo;

static inline wino_geo geo_of(const sg_conv_desc *d, int nhwc, int ch) {
    wino_geo g = {.n = d->n, .h = d->h, .w = d->w, .dh = d->dil_h, .dw = d->dil_w};
    long per_image = 0;
    for (int ry = 0; ry < g.dh && ry < g.h; ry++)
        for (int rx = 0; rx < g.dw && rx < g.w; rx++) {
            int hs = (g.h - ry + g.dh - 1) / g.dh, ws = (g.w - rx + g.dw - 1) / g.dw;
            per_image += (long)((hs + 3) / 4) * ((ws + 3) / 4);
        }
    g.tiles = per_image * g.n;
    long hw = (long)g.h * g.w;
    if (nhwc) g.sn = hw * ch, g.sc = 1, g.sy = (long)g.w * ch, g.sx = ch;
    else g.sn = hw * ch, g.sc = hw, g.sy = g.w, g.sx = 1;
    return g;
}

/* A tile's image n and output pixel (y0, x0); y0 = -1: no tile. */
typedef struct tile_pos {
    int n, y0, x0;
} tile_pos;

/* The element offset of a tile's output pixel (y0, x0), channel 0. */
static inline long tile_base(const wino_geo *g, const tile_pos *p) {
    return p->n * g->sn + p->y0 * g->sy + p->x0 * g->sx;
}

/* Fills the origins of tiles [t0, t0 + count); tiles past the end get
 * y0 = -1 (no pixel: zero input, output dropped). */
static inline void tile_positions(const wino_geo *g, long t0, int count, tile_pos *pos) {
    /* Walk the tile order (n, ry, rx, ty, tx) from t0: cheap next-tile steps. */
    long per_image = g->tiles / (g->n ? g->n : 1);
    long t = t0;
    int i = 0;
    while (i < count && t < g->tiles) {
        int n = (int)(t / per_image);
        long r = t % per_image;
        for (int ry = 0; ry < g->dh && ry < g->h && i < count; ry++)
            for (int rx = 0; rx < g->dw && rx < g->w && i < count; rx++) {
                int hs = (g->h - ry + g->dh - 1) / g->dh, ws = (g->w - rx + g->dw - 1) / g->dw;
                long th = (hs + 3) / 4, tw = (ws + 3) / 4, np = th * tw;
                if (r >= np) {
                    r -= np;
                    continue;
                }
                for (; r < np && i < count; r++, t++, i++) {
                    int y0 = ry + g->dh * 4 * (int)(r / tw), x0 = rx + g->dw * 4 * (int)(r % tw);
                    pos[i].n = n;
                    pos[i].y0 = y0;
                    pos[i].x0 = x0;
                }
                r = 0;
            }
    }
    for (; i < count; i++) pos[i].n = 0, pos[i].y0 = -1, pos[i].x0 = 0;
}

/* A dy A^T (4 rows to 6): the adjoint of A^T, for output-gradient tiles. */
#define A_ROWS(y0, y1, y2, y3, o0, o1, o2, o3, o4, o5) \
    do {                                               \
        o0 = y0;                                       \
        o1 = y0 + y1 + y2 + y3;                        \
        o2 = y0 - y1 + y2 - y3;                        \
        o3 = y0 + 2.0f * y1 + 4.0f * y2 + 8.0f * y3;   \
        o4 = y0 - 2.0f * y1 + 4.0f * y2 - 8.0f * y3;   \
        o5 = y3;                                       \
    } while (0)

/* B^T d (a 6-row column transform). */
#define BT_ROWS(d0, d1, d2, d3, d4, d5, o0, o1, o2, o3, o4, o5) \
    do {                                                        \
        o0 = 4.0f * d0 - 5.0f * d2 + d4;                        \
        o1 = -4.0f * d1 - 4.0f * d2 + d3 + d4;                  \
        o2 = 4.0f * d1 - 4.0f * d2 - d3 + d4;                   \
        o3 = -2.0f * d1 - d2 + 2.0f * d3 + d4;                  \
        o4 = 2.0f * d1 - d2 - 2.0f * d3 + d4;                   \
        o5 = 4.0f * d1 - 5.0f * d3 + d5;                        \
    } while (0)

/* A^T m (6 rows to 4). */
#define AT_ROWS(m0, m1, m2, m3, m4, m5, o0, o1, o2, o3) \
    do {                                                \
        o0 = m0 + m1 + m2 + m3 + m4;                    \
        o1 = m1 - m2 + 2.0f * m3 - 2.0f * m4;           \
        o2 = m1 + m2 + 4.0f * m3 + 4.0f * m4;           \
        o3 = m1 - m2 + 8.0f * m3 - 8.0f * m4 + m5;      \
    } while (0)

/* G's rows on three values (a 3-row column transform): 6 rows out. */
#define G_ROWS(g0, g1, g2, o0, o1, o2, o3, o4, o5)                   \
    do {                                                             \
        o0 = 0.25f * g0;                                             \
        o1 = SIXTH * (-(g0 + g2) - g1);                              \
        o2 = SIXTH * (g1 - (g0 + g2));                               \
        o3 = g0 * (1.0f / 24.0f) + g1 * (1.0f / 12.0f) + g2 * SIXTH; \
        o4 = g0 * (1.0f / 24.0f) - g1 * (1.0f / 12.0f) + g2 * SIXTH; \
        o5 = g2;                                                     \
    } while (0)
/* G^T's rows on six values: 3 rows out. */
#define GT_ROWS(a0, a1, a2, a3, a4, a5, o0, o1, o2)                       \
    do {                                                                  \
        o0 = 0.25f * a0 - SIXTH * (a1 + a2) + (1.0f / 24.0f) * (a3 + a4); \
        o1 = SIXTH * (a2 - a1) + (1.0f / 12.0f) * (a3 - a4);              \
        o2 = SIXTH * ((a3 + a4) - (a1 + a2)) + a5;                        \
    } while (0)
#define SIXTH (1.0f / 6.0f)

#endif
