/* data/synth_render.c - the synthetic scenes' pixels and what every synth
 * writer shares. Rendering is a pure function of (seed, split, image index):
 * draws are sg_rng_u64(key, counter) with key = sg_rng_key(seed, split,
 * index, 0, SG_RNG_SYNTH) and fixed counters, so every layout shows the same
 * scenes. Also the writers' helpers: trainId masks, refusing an existing
 * dataset, mkdir -p. Calls no writer and nothing of synth.c. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/fsutil.h"
#include "core/log.h"
#include "data/dataset.h"
#include "data/synth_internal.h"
#include "kernels/rng.h"

/* A class's look: HSV colour spread by the golden ratio, and a texture. */
static void class_color(int c, uint8_t rgb[3]) {
    double hue = fmod(c * 0.6180339887 + 0.1, 1.0) * 6.0;
    double s = c % 2 ? 0.75 : 0.5, v = c % 3 == 0 ? 0.85 : (c % 3 == 1 ? 0.65 : 0.5);
    int i = (int)hue;
    double f = hue - i, p = v * (1 - s), q = v * (1 - s * f), t = v * (1 - s * (1 - f));
    double r, g, b;
    switch (i % 6) {
    case 0: r = v, g = t, b = p; break;
    case 1: r = q, g = v, b = p; break;
    case 2: r = p, g = v, b = t; break;
    case 3: r = p, g = q, b = v; break;
    case 4: r = t, g = p, b = v; break;
    default: r = v, g = p, b = q; break;
    }
    rgb[0] = (uint8_t)lround(r * 255);
    rgb[1] = (uint8_t)lround(g * 255);
    rgb[2] = (uint8_t)lround(b * 255);
}

/* Texture: brightness offset of class c at pixel (y, x): stripes of a
 * class-dependent direction and period, or a checkerboard. */
static int texture(int c, int y, int x) {
    int period = 4 + (c * 3) % 7;
    int phase;
    switch (c % 4) {
    case 0: phase = y; break;                                   /* horizontal stripes */
    case 1: phase = x; break;                                   /* vertical stripes */
    case 2: phase = x + y; break;                               /* diagonal */
    default: phase = (x / period + y / period) * period; break; /* checker */
    }
    return (phase / (period / 2 > 0 ? period / 2 : 1)) % 2 ? 22 : -22;
}

typedef struct canvas {
    int h, w;
    uint8_t *rgb, *lid;
    uint16_t *inst;  /* instanceIds, or NULL */
    uint16_t cur;    /* the instanceId put() writes */
    uint8_t tint[3]; /* per-image colour cast: brightness / white balance */
} canvas;

static void put(canvas *cv, int y, int x, int train_id, int label_id) {
    if (cv->inst) cv->inst[(size_t)y * cv->w + x] = cv->cur;
    uint8_t col[3];
    class_color(train_id, col);
    int t = texture(train_id, y, x);
    uint8_t *p = cv->rgb + ((size_t)y * cv->w + x) * 3;
    for (int k = 0; k < 3; k++) {
        int v = col[k] + t + cv->tint[k] - 16;
        p[k] = (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
    }
    cv->lid[(size_t)y * cv->w + x] = (uint8_t)label_id;
}

/* Shapes: 0 rectangle, 1 ellipse, 2 triangle (apex up), 3 pole (thin, tall). */
static int inside(int shape, int y, int x, int cy, int cx, int ry, int rx) {
    int dy = y - cy, dx = x - cx;
    switch (shape) {
    case 0: return abs(dy) <= ry && abs(dx) <= rx;
    case 1: return (double)dy * dy / ((double)ry * ry) + (double)dx * dx / ((double)rx * rx) <= 1.0;
    case 2: return dy >= -ry && dy <= ry && abs(dx) * 2 * ry <= rx * (dy + ry);
    default: return abs(dy) <= ry && abs(dx) <= (rx / 4 > 0 ? rx / 4 : 1);
    }
}

void sg_synth_render(const sg_synth_opts *o, int split, int index, uint8_t *rgb,
                     uint8_t *label_ids) {
    sg_synth_render_instances(o, split, index, rgb, label_ids, NULL);
}

/* Cityscapes' classes with instances: person, rider, car, truck, bus, train,
 * motorcycle, bicycle (trainIds 11..18). */
#define FIRST_INSTANCE_TRAIN_ID 11

void sg_synth_render_instances(const sg_synth_opts *o, int split, int index, uint8_t *rgb,
                               uint8_t *label_ids, uint16_t *instance_ids) {
    uint64_t key = sg_rng_key(o->seed, (uint64_t)split, (uint64_t)index, 0, SG_RNG_SYNTH);
    uint64_t ctr = 0;
#define U() sg_rng_uniform_d(key, ctr++)
#define RANGE(lo, hi) ((lo) + (int)(U() * ((hi) - (lo) + 1))) /* int in [lo, hi] */
    canvas cv = {o->h, o->w, rgb, label_ids, instance_ids, 0, {0, 0, 0}};
    int n_instances[19] = {0};
    int h = o->h, w = o->w, K = o->classes;
    for (int k = 0; k < 3; k++) cv.tint[k] = (uint8_t)RANGE(4, 28);

    /* Background: sky (if used) / building on top, sidewalk strip, road below. */
    int sky = K > 10 ? 10 : -1;
    int horizon = (int)(h * (0.35 + 0.2 * U()));
    int walk = horizon + (int)(h * (0.05 + 0.1 * U()));
    int skyline = sky >= 0 ? (int)(horizon * (0.2 + 0.5 * U())) : -1;
    for (int y = 0; y < h; y++) {
        for (int x = 0; x < w; x++) {
            int c = y >= walk ? 0 : y >= horizon ? 1 : (y < skyline ? sky : 2);
            cv.cur = (uint16_t)sg_cityscapes_label_id(c);
            put(&cv, y, x, c, sg_cityscapes_label_id(c));
        }
    }
    /* Objects of the other classes, drawn in order: later ones occlude. */
    int n_obj_classes = 0, obj_classes[19];
    for (int c = 3; c < K; c++)
        if (c != sky) obj_classes[n_obj_classes++] = c;
    int n_obj = n_obj_classes ? RANGE(3, 8) : 0;
    for (int i = 0; i < n_obj; i++) {
        int c = obj_classes[RANGE(0, n_obj_classes - 1)];
        int shape = c % 4;
        int ry = RANGE(h / 14 + 2, h / 4 + 2), rx = RANGE(w / 14 + 2, w / 4 + 2);
        if (shape == 3) ry = ry * 2; /* poles are tall */
        int cy = RANGE(0, h - 1), cx = RANGE(0, w - 1);
        int lid = sg_cityscapes_label_id(c);
        cv.cur = (uint16_t)(c >= FIRST_INSTANCE_TRAIN_ID ? lid * 1000 + n_instances[c]++ : lid);
        for (int y = cy - ry < 0 ? 0 : cy - ry; y <= cy + ry && y < h; y++)
            for (int x = cx - rx < 0 ? 0 : cx - rx; x <= cx + rx && x < w; x++)
                if (inside(shape, y, x, cy, cx, ry, rx)) put(&cv, y, x, c, lid);
    }
    /* Ignore regions: an ego-vehicle band (half the images) and unlabeled
     * blobs of random colour (nothing there to learn, so it is ignored). */
    if (U() < 0.5) {
        int top = h - RANGE(h / 20 + 1, h / 10 + 1);
        for (int y = top; y < h; y++)
            for (int x = 0; x < w; x++) {
                uint8_t *p = rgb + ((size_t)y * w + x) * 3;
                p[0] = p[1] = p[2] = (uint8_t)(30 + (x * 7 / w));
                label_ids[(size_t)y * w + x] = SG_SYNTH_LID_EGO;
                if (instance_ids) instance_ids[(size_t)y * w + x] = SG_SYNTH_LID_EGO;
            }
    }
    int n_blobs = RANGE(0, 2);
    for (int i = 0; i < n_blobs; i++) {
        int ry = RANGE(2, h / 10 + 2), rx = RANGE(2, w / 10 + 2);
        int cy = RANGE(0, h - 1), cx = RANGE(0, w - 1);
        uint8_t col[3] = {(uint8_t)RANGE(0, 255), (uint8_t)RANGE(0, 255), (uint8_t)RANGE(0, 255)};
        for (int y = cy - ry < 0 ? 0 : cy - ry; y <= cy + ry && y < h; y++)
            for (int x = cx - rx < 0 ? 0 : cx - rx; x <= cx + rx && x < w; x++)
                if (inside(1, y, x, cy, cx, ry, rx)) {
                    memcpy(rgb + ((size_t)y * w + x) * 3, col, 3);
                    label_ids[(size_t)y * w + x] = SG_SYNTH_LID_UNLABELED;
                    if (instance_ids) instance_ids[(size_t)y * w + x] = SG_SYNTH_LID_UNLABELED;
                }
    }
    /* Pixel noise, +-12 per channel. */
    uint64_t nkey = sg_rng_key(o->seed, (uint64_t)split, (uint64_t)index, 1, SG_RNG_SYNTH);
    for (size_t p = 0; p < (size_t)h * w * 3; p++) {
        int v = rgb[p] + (int)(sg_rng_u64(nkey, p) % 25) - 12;
        rgb[p] = (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
    }
#undef U
#undef RANGE
}

void sg_synth_render_train_ids(const sg_synth_opts *o, int split, int i, uint8_t *rgb,
                               uint8_t *lab) {
    uint8_t map[256];
    sg_cityscapes_label_map(map, 255);
    sg_synth_render(o, split, i, rgb, lab);
    for (size_t p = 0; p < (size_t)o->h * o->w; p++) lab[p] = map[lab[p]];
}

sg_status sg_synth_check_new(const char *out, const char *const *dirs, int n) {
    char path[4096];
    for (int i = 0; i < n; i++) {
        snprintf(path, sizeof path, "%s/%s", out, dirs[i]);
        struct stat st;
        if (stat(path, &st) == 0) {
            SG_ERROR("synth: %s already exists: choose a new --out directory or delete the old "
                     "dataset first (mixing two synthetic datasets would corrupt the splits)",
                     path);
            return SG_ERR_RUNTIME;
        }
    }
    return SG_OK;
}

sg_status sg_synth_mkdir(const char *path) {
    if (sg_mkdirs(path) == 0) return SG_OK;
    SG_ERROR("synth: cannot create directory %s: %s", path, strerror(errno));
    return SG_ERR_RUNTIME;
}
