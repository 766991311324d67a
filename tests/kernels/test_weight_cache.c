/* tests/kernels/test_weight_cache.c - the bf16 weight copies
 * (kernels/weight_cache.h) are never stale and are really reused. Two
 * parts, one per argument:
 *  unit  - the cache itself: a copy is refilled on first use and after a
 *    write overlapping its source (inside, at an edge, NULL = anything),
 *    not after writes elsewhere or touching only the byte past its end;
 *    freeing the source's allocation drops the copy; the fp32 CPU backend
 *    keeps no copies; in a build without test seams, SG_WEIGHT_CACHE
 *    (0 or malformed) changes nothing;
 *  paths - needs the test seam SG_WEIGHT_CACHE (core/test_seams.h; skipped,
 *    77, in a build without seams): the cache off always refills, a
 *    malformed SG_WEIGHT_CACHE is refused; and the CPU backend in bf16
 *    (native where the processor has bf16
 *    instructions, and emulated): for convolutions of every kind the cache
 *    serves (blocked 3x3, plain 1x1, a trimmed dilated kernel), the weights
 *    are changed through each path - upload (whole and one element),
 *    upload_async, copy, zero, scale, axpy, sgd_step, free + alloc, a
 *    direct host write announced with ops->mem_written (range and NULL) -
 *    and after each the forward and backward-data results are bit-identical
 *    to those of a backend converting on every call (SG_WEIGHT_CACHE=0) on
 *    the same weights; repeated convolutions with unchanged weights refill
 *    nothing; and a direct write NOT announced is not seen (the cache is
 *    live - this is the contract ops->mem_written exists for).
 */
#include <stdlib.h>
#include <string.h>

#include "kernels/backend.h"
#include "kernels/cpu/cpu_internal.h"
#include "kernels/weight_cache.h"
#include "tests/testutil.h"

/* ---------------- the cache on its own ---------------- */

static int n_alloc, n_free;
static void *t_alloc(void *ctx, size_t bytes) {
    (void)ctx;
    n_alloc++;
    return calloc(1, bytes);
}
static void t_free(void *ctx, void *p, size_t bytes) {
    (void)ctx, (void)bytes;
    n_free++;
    free(p);
}

static void test_cache_unit(void) {
    unsetenv("SG_WEIGHT_CACHE");
    n_alloc = n_free = 0;
    sg_wcache *wc = sg_wcache_create(t_alloc, t_free, NULL);
    CHECK(wc);
    float src[64], other[16];
    int refill;
    void *c1 = sg_wcache_get(wc, src + 8, 16 * sizeof(float), 7, 32, &refill);
    CHECK_EQ_INT(refill, 1); /* first use */
    CHECK(sg_wcache_get(wc, src + 8, 16 * sizeof(float), 7, 32, &refill) == c1);
    CHECK_EQ_INT(refill, 0); /* unchanged */
    void *c2 = sg_wcache_get(wc, src + 8, 16 * sizeof(float), 8, 32, &refill);
    CHECK(c2 != c1); /* another layout: another copy */
    CHECK_EQ_INT(refill, 1);
    /* writes elsewhere, or ending exactly at the source / starting right
     * after it, leave the copies valid */
    sg_wcache_written(wc, other, sizeof other);
    sg_wcache_written(wc, src, 8 * sizeof(float));
    sg_wcache_written(wc, src + 24, 4 * sizeof(float));
    sg_wcache_get(wc, src + 8, 16 * sizeof(float), 7, 32, &refill);
    CHECK_EQ_INT(refill, 0);
    /* one byte inside (the last float) makes both layouts stale */
    sg_wcache_written(wc, src + 23, sizeof(float));
    sg_wcache_get(wc, src + 8, 16 * sizeof(float), 7, 32, &refill);
    CHECK_EQ_INT(refill, 1);
    sg_wcache_get(wc, src + 8, 16 * sizeof(float), 8, 32, &refill);
    CHECK_EQ_INT(refill, 1);
    sg_wcache_get(wc, src + 8, 16 * sizeof(float), 7, 32, &refill);
    CHECK_EQ_INT(refill, 0);
    /* a range covering the source from before it */
    sg_wcache_written(wc, src, 64 * sizeof(float));
    sg_wcache_get(wc, src + 8, 16 * sizeof(float), 7, 32, &refill);
    CHECK_EQ_INT(refill, 1);
    /* NULL: anything */
    sg_wcache_written(wc, NULL, 0);
    sg_wcache_get(wc, src + 8, 16 * sizeof(float), 7, 32, &refill);
    CHECK_EQ_INT(refill, 1);
    int copies;
    size_t bytes;
    uint64_t refills;
    sg_wcache_stats(wc, &copies, &bytes, &refills);
    CHECK_EQ_INT(copies, 2);
    CHECK_EQ_INT(bytes, 64);
    CHECK_EQ_INT(refills, 6);
    /* freeing an allocation that holds the source drops its copies */
    sg_wcache_freed(wc, other, sizeof other);
    sg_wcache_stats(wc, &copies, &bytes, &refills);
    CHECK_EQ_INT(copies, 2);
    sg_wcache_freed(wc, src, sizeof src);
    sg_wcache_stats(wc, &copies, &bytes, &refills);
    CHECK_EQ_INT(copies, 0);
    CHECK_EQ_INT(n_free, 2);
    sg_wcache_get(wc, src + 8, 16 * sizeof(float), 7, 32, &refill);
    CHECK_EQ_INT(refill, 1); /* a new tensor at the same address */
    sg_wcache_destroy(wc);
    CHECK_EQ_INT(n_alloc, n_free);
}

/* A build without test seams reads no SG_WEIGHT_CACHE: "0" and a malformed
 * value change nothing, the copies are still reused. */
static void test_no_seam(void) {
    float src[64];
    int refill;
    const char *vals[] = {"0", "yes"};
    for (int i = 0; i < 2; i++) {
        setenv("SG_WEIGHT_CACHE", vals[i], 1);
        sg_wcache *wc = sg_wcache_create(t_alloc, t_free, NULL);
        unsetenv("SG_WEIGHT_CACHE");
        CHECK_MSG(wc, "SG_WEIGHT_CACHE=%s refused in a build without test seams", vals[i]);
        sg_wcache_get(wc, src, sizeof src, 0, 4, &refill);
        sg_wcache_get(wc, src, sizeof src, 0, 4, &refill);
        sg_wcache_destroy(wc);
        CHECK_MSG(refill == 0,
                  "SG_WEIGHT_CACHE=%s turned the cache off in a build without test seams", vals[i]);
    }
}

/* The test seam: off = always refill; a bad value is refused. */
static void test_cache_off(void) {
    float src[64];
    int refill;
    setenv("SG_WEIGHT_CACHE", "0", 1);
    sg_wcache *wc = sg_wcache_create(t_alloc, t_free, NULL);
    CHECK(wc);
    sg_wcache_get(wc, src, sizeof src, 0, 4, &refill);
    sg_wcache_get(wc, src, sizeof src, 0, 4, &refill);
    CHECK_EQ_INT(refill, 1);
    sg_wcache_destroy(wc);
    setenv("SG_WEIGHT_CACHE", "yes", 1);
    CHECK(sg_wcache_create(t_alloc, t_free, NULL) == NULL);
    unsetenv("SG_WEIGHT_CACHE");
}

/* ---------------- the CPU backend ---------------- */

static sg_backend *make(const char *bf16_env, int cache) {
    setenv("SG_CPU_BF16", bf16_env, 1);
    if (cache) unsetenv("SG_WEIGHT_CACHE");
    else setenv("SG_WEIGHT_CACHE", "0", 1);
    sg_backend_opts o = {.threads = 2, .precision = SG_PRECISION_BF16};
    sg_backend *be = sg_backend_create("cpu", &o);
    unsetenv("SG_CPU_BF16");
    unsetenv("SG_WEIGHT_CACHE");
    return be;
}

static uint64_t refills_of(sg_backend *be) {
    int copies;
    size_t bytes;
    uint64_t refills;
    sg_wcache_stats(sg_cpu_of(be)->wcache, &copies, &bytes, &refills);
    return refills;
}

static float frand(uint32_t *s) {
    *s = *s * 1664525u + 1013904223u;
    return (float)((*s >> 8) & 0xffff) / 32768.0f - 1.0f;
}

/* One geometry on the cached backend (be) and the converting one (ref). */
typedef struct rig {
    sg_backend *be, *ref;
    sg_conv_desc d;
    size_t nx, nw, ny;
    float *x, *w, *dy, *y, *dx;      /* be's buffers */
    float *rx, *rw, *rdy, *ry, *rdx; /* ref's */
    float *h_w, *h_a, *h_b;          /* host scratch */
} rig;

static void rig_init(rig *g, sg_backend *be, sg_backend *ref, sg_conv_desc d) {
    memset(g, 0, sizeof *g);
    g->be = be, g->ref = ref;
    sg_conv_desc_init(&d);
    g->d = d;
    g->nx = (size_t)d.n * d.c * d.h * d.w;
    g->nw = (size_t)d.k * d.c * d.r * d.s;
    g->ny = (size_t)d.n * d.k * d.oh * d.ow;
    size_t big = g->nx > g->ny ? g->nx : g->ny;
    big = big > g->nw ? big : g->nw;
    g->h_w = malloc(big * 4), g->h_a = malloc(big * 4), g->h_b = malloc(big * 4);
    sg_backend *bs[2] = {be, ref};
    float **bufs[2][5] = {{&g->x, &g->w, &g->dy, &g->y, &g->dx},
                          {&g->rx, &g->rw, &g->rdy, &g->ry, &g->rdx}};
    size_t sizes[5] = {g->nx, g->nw, g->ny, g->ny, g->nx};
    for (int b = 0; b < 2; b++)
        for (int i = 0; i < 5; i++) *bufs[b][i] = bs[b]->ops->alloc(bs[b], sizes[i] * 4);
    uint32_t s = 12345;
    for (size_t i = 0; i < g->nx; i++) g->h_a[i] = frand(&s);
    be->ops->upload(be, g->x, g->h_a, g->nx * 4);
    ref->ops->upload(ref, g->rx, g->h_a, g->nx * 4);
    for (size_t i = 0; i < g->ny; i++) g->h_a[i] = frand(&s);
    be->ops->upload(be, g->dy, g->h_a, g->ny * 4);
    ref->ops->upload(ref, g->rdy, g->h_a, g->ny * 4);
    for (size_t i = 0; i < g->nw; i++) g->h_w[i] = frand(&s);
    be->ops->upload(be, g->w, g->h_w, g->nw * 4);
}

static void rig_free(rig *g) {
    float *bufs[2][5] = {{g->x, g->w, g->dy, g->y, g->dx}, {g->rx, g->rw, g->rdy, g->ry, g->rdx}};
    sg_backend *bs[2] = {g->be, g->ref};
    for (int b = 0; b < 2; b++)
        for (int i = 0; i < 5; i++) bs[b]->ops->free(bs[b], bufs[b][i]);
    free(g->h_w), free(g->h_a), free(g->h_b);
}

/* Forward and backward-data on be with its current weights, and on ref with
 * the same weights: 1 if bit-identical. *why names the first difference. */
static int rig_same(rig *g, char *why, size_t cap) {
    sg_backend *be = g->be, *ref = g->ref;
    be->ops->download(be, g->h_w, g->w, g->nw * 4);
    ref->ops->upload(ref, g->rw, g->h_w, g->nw * 4);
    be->ops->conv_fwd(be, &g->d, g->x, g->w, g->y);
    ref->ops->conv_fwd(ref, &g->d, g->rx, g->rw, g->ry);
    be->ops->download(be, g->h_a, g->y, g->ny * 4);
    ref->ops->download(ref, g->h_b, g->ry, g->ny * 4);
    for (size_t i = 0; i < g->ny; i++)
        if (memcmp(&g->h_a[i], &g->h_b[i], 4) != 0) {
            snprintf(why, cap, "fwd y[%zu] = %.9g, converting backend %.9g", i, g->h_a[i],
                     g->h_b[i]);
            return 0;
        }
    be->ops->conv_bwd_data(be, &g->d, g->dy, g->w, g->dx, 0);
    ref->ops->conv_bwd_data(ref, &g->d, g->rdy, g->rw, g->rdx, 0);
    be->ops->download(be, g->h_a, g->dx, g->nx * 4);
    ref->ops->download(ref, g->h_b, g->rdx, g->nx * 4);
    for (size_t i = 0; i < g->nx; i++)
        if (memcmp(&g->h_a[i], &g->h_b[i], 4) != 0) {
            snprintf(why, cap, "bwd_data dx[%zu] = %.9g, converting backend %.9g", i, g->h_a[i],
                     g->h_b[i]);
            return 0;
        }
    return 1;
}

#define SAME(g, path)                                                                         \
    do {                                                                                      \
        char why_[256];                                                                       \
        CHECK_MSG(rig_same(g, why_, sizeof why_), "%s, geometry %s, after %s: %s", env, name, \
                  path, why_);                                                                \
    } while (0)

static void paths(const char *env, const char *name, sg_conv_desc d) {
    sg_backend *be = make(env, 1), *ref = make(env, 0);
    CHECK(be && ref);
    rig g;
    rig_init(&g, be, ref, d);
    const sg_ops *o = be->ops;
    size_t wb = g.nw * 4;

    SAME(&g, "the first upload");
    /* unchanged weights: served from the cache, nothing converted */
    uint64_t r0 = refills_of(be);
    SAME(&g, "nothing");
    CHECK_MSG(refills_of(be) == r0, "%s %s: %llu refills with unchanged weights", env, name,
              (unsigned long long)(refills_of(be) - r0));

    uint32_t s = 99;
    for (size_t i = 0; i < g.nw; i++) g.h_w[i] = frand(&s);
    o->upload(be, g.w, g.h_w, wb);
    SAME(&g, "upload");
    float v = 3.5f;
    o->upload(be, g.w + g.nw / 2, &v, 4); /* one element in the middle */
    SAME(&g, "upload of one element");
    for (size_t i = 0; i < g.nw; i++) g.h_w[i] = frand(&s);
    o->upload_async(be, g.w, g.h_w, wb);
    o->upload_wait(be);
    o->sync(be);
    SAME(&g, "upload_async");
    float *src = o->alloc(be, wb);
    for (size_t i = 0; i < g.nw; i++) g.h_w[i] = frand(&s);
    o->upload(be, src, g.h_w, wb);
    o->copy(be, g.w, src, wb);
    SAME(&g, "copy");
    o->scale(be, g.w, g.w, -0.75f, g.nw);
    SAME(&g, "scale");
    o->axpy(be, 0.5f, src, g.w, g.nw);
    SAME(&g, "axpy");
    float *buf = o->alloc(be, wb);
    o->sgd_step(be, g.w, src, buf, g.nw, 0.1f, 0.9f, 0.0f, 1e-4f, 0, 1);
    SAME(&g, "sgd_step");
    o->sgd_step(be, g.w, src, NULL, g.nw, 0.01f, 0.0f, 0.0f, 0.0f, 0, 0);
    SAME(&g, "sgd_step without momentum");
    o->zero(be, g.w, wb);
    SAME(&g, "zero");
    /* direct host writes (SG_CAP_HOST_MEMORY), announced */
    for (size_t i = 0; i < g.nw; i++) g.w[i] = frand(&s);
    o->mem_written(be, g.w, wb);
    SAME(&g, "a direct write + mem_written(range)");
    g.w[g.nw - 1] = 7.0f;
    o->mem_written(be, g.w + g.nw - 1, 4);
    SAME(&g, "a direct write of the last element + mem_written");
    g.w[0] = -7.0f;
    o->mem_written(be, NULL, 0);
    SAME(&g, "a direct write + mem_written(NULL)");
    /* free and allocate again (often the same address): the new, zeroed
     * tensor must not get the old one's copy */
    o->free(be, g.w);
    g.w = o->alloc(be, wb);
    SAME(&g, "free + alloc");

    /* an unannounced direct write is not seen: the copy is really reused */
    o->upload(be, g.w, g.h_w, wb);
    SAME(&g, "upload");
    float *y1 = malloc(g.ny * 4), *y2 = malloc(g.ny * 4);
    o->conv_fwd(be, &g.d, g.x, g.w, g.y);
    o->download(be, y1, g.y, g.ny * 4);
    for (size_t i = 0; i < g.nw; i++) g.w[i] = -g.w[i];
    o->conv_fwd(be, &g.d, g.x, g.w, g.y);
    o->download(be, y2, g.y, g.ny * 4);
    int same = memcmp(y1, y2, g.ny * 4) == 0;
    free(y1), free(y2);
    CHECK_MSG(same,
              "%s %s: an unannounced direct write changed the result: the conv did not "
              "use the cached copy",
              env, name);
    o->mem_written(be, g.w, wb);
    SAME(&g, "mem_written after the unannounced write");

    o->free(be, src);
    o->free(be, buf);
    rig_free(&g);
    sg_backend_destroy(be);
    sg_backend_destroy(ref);
}

static void all_paths(const char *env) {
    /* blocked 3x3 (native: reordered to oneDNN's bf16 layout), plain 1x1,
     * and a dilated kernel whose outer taps are trimmed (only the live taps
     * are in the copy) */
    paths(env, "3x3",
          (sg_conv_desc){.n = 2,
                         .c = 16,
                         .h = 9,
                         .w = 9,
                         .k = 32,
                         .r = 3,
                         .s = 3,
                         .stride_h = 1,
                         .stride_w = 1,
                         .pad_h = 1,
                         .pad_w = 1,
                         .dil_h = 1,
                         .dil_w = 1});
    if (tu_case_failed) return;
    paths(env, "1x1 stride 2",
          (sg_conv_desc){.n = 2,
                         .c = 32,
                         .h = 8,
                         .w = 8,
                         .k = 16,
                         .r = 1,
                         .s = 1,
                         .stride_h = 2,
                         .stride_w = 2,
                         .pad_h = 0,
                         .pad_w = 0,
                         .dil_h = 1,
                         .dil_w = 1});
    if (tu_case_failed) return;
    paths(env, "3x3 dilation 6 on 5x5 (trimmed)",
          (sg_conv_desc){.n = 2,
                         .c = 16,
                         .h = 5,
                         .w = 5,
                         .k = 16,
                         .r = 3,
                         .s = 3,
                         .stride_h = 1,
                         .stride_w = 1,
                         .pad_h = 6,
                         .pad_w = 6,
                         .dil_h = 6,
                         .dil_w = 6});
}

static int has_native(void) {
    sg_backend *be = make("auto", 1);
    if (!be) return 0;
    sg_backend_info bi;
    sg_backend_get_info(be, &bi);
    int native = strstr(bi.conv_math, "native") != NULL;
    sg_backend_destroy(be);
    return native;
}

static void test_paths_emulated(void) { all_paths("emulated"); }

static void test_paths_native(void) {
    if (!has_native()) {
        printf("  (no bf16 instructions here: the native path is not tested)\n");
        return;
    }
    all_paths("native");
}

/* fp32 keeps no copies (the fp32 path is unchanged) */
static void test_fp32_has_none(void) {
    sg_backend_opts o = {.threads = 2};
    sg_backend *be = sg_backend_create("cpu", &o);
    CHECK(be);
    CHECK(sg_cpu_of(be)->wcache == NULL);
    be->ops->mem_written(be, NULL, 0); /* a no-op, not a crash */
    sg_backend_destroy(be);
}

int main(int argc, char **argv) {
    const char *part = argc > 1 ? argv[1] : "";
    if (strcmp(part, "unit") == 0) {
        TEST_RUN(test_cache_unit);
        TEST_RUN(test_fp32_has_none);
        if (!SG_TEST_SEAMS) TEST_RUN(test_no_seam);
    } else if (strcmp(part, "paths") == 0) {
        if (!tu_have_seams("test_weight_cache paths (SG_WEIGHT_CACHE=0)")) return TEST_SKIP;
        TEST_RUN(test_cache_off);
        TEST_RUN(test_paths_emulated);
        TEST_RUN(test_paths_native);
    } else {
        fprintf(stderr, "usage: test_weight_cache unit|paths\n");
        return 2;
    }
    return TEST_EXIT();
}
