/* tests/backend/run_large.c - the `large` case set (test_backend_ops
 * --large; a GPU's memory, never run by the meson suite): elementwise ops on
 * tensors of more than 2^31 elements (the size_t counts of backend.h: an
 * index kept in 32 bits wraps there), which also makes every grid-stride
 * loop take many turns (the grids are capped at 65535 x 8 blocks).
 *
 * An input of 2^31 + 4099 floats (8 GiB) is a pattern of period P = 2^24 - 3
 * elements (i mod P), uploaded one period at a time from one host buffer; a
 * wrap of the index by 2^31 or 2^32 moves to another place of the pattern,
 * since neither is a multiple of P. The result is downloaded in windows (the
 * first and last MiB of elements, 2 MiB around element 2^31, 256 windows of
 * 4096 spread over the rest) and compared element by element with the
 * expected value, exactly (the ops round like the host: formulas/).
 * sumsq is checked against the whole sum, computed per period in double.
 * Host memory: 64 MiB per buffer; device: up to three 8 GiB buffers.
 */
#include <math.h>
#include <stdlib.h>

#include "tests/backend/cases.h"

#define LARGE_P ((size_t)16777213) /* 2^24 - 3 */
#define WIN ((size_t)1 << 20)

static float pat(size_t i, unsigned salt) {
    size_t j = i % LARGE_P;
    return (float)((j * 7919u + salt * 104729u) % 4093u) / 2046.5f - 1.0f;
}

/* One period of pattern `salt` on the host (owned by the run). */
static float *period(tb_ctx *t, unsigned salt) {
    float *h = tb_hbytes(t, LARGE_P * sizeof(float));
    for (size_t j = 0; j < LARGE_P; j++) h[j] = pat(j, salt);
    return h;
}

/* A device buffer of n floats holding pattern `salt` (salt 0: unset). */
static float *large_dev(tb_ctx *t, size_t n, unsigned salt) {
    float *d = tb_dev(t, NULL, n * sizeof(float));
    if (!salt) return d;
    float *h = period(t, salt);
    for (size_t off = 0; off < n; off += LARGE_P) {
        size_t k = n - off < LARGE_P ? n - off : LARGE_P;
        t->be->ops->upload(t->be, d + off, h, k * sizeof(float));
    }
    return d;
}

typedef float (*expect_fn)(size_t i, const tb_case *c);

/* Compares window [at, at + len) of dev with expect(i); 1 if equal. */
static int window(tb_ctx *t, const char *what, const float *dev, size_t at, size_t len,
                  expect_fn expect, const tb_case *c, float *buf) {
    t->be->ops->download(t->be, buf, dev + at, len * sizeof(float));
    for (size_t k = 0; k < len; k++) {
        float want = expect(at + k, c);
        if (buf[k] != want)
            return tb_fail(t, "%s[%zu] = %.9g, expected %.9g (element %s 2^31)", what, at + k,
                           buf[k], want, at + k >= ((size_t)1 << 31) ? "past" : "before");
    }
    return 1;
}

static void check_large(tb_ctx *t, const char *what, const float *dev, size_t n, expect_fn expect,
                        const tb_case *c) {
    float *buf = tb_hbytes(t, 2 * WIN * sizeof(float));
    size_t two31 = (size_t)1 << 31;
    if (!window(t, what, dev, 0, WIN, expect, c, buf)) return;
    if (n > two31 + WIN && !window(t, what, dev, two31 - WIN, 2 * WIN, expect, c, buf)) return;
    if (!window(t, what, dev, n - WIN, WIN, expect, c, buf)) return;
    for (size_t k = 1; k <= 256; k++)
        if (!window(t, what, dev, k * ((n - 4096) / 257), 4096, expect, c, buf)) return;
}

static float relu_want(size_t i, const tb_case *c) {
    (void)c;
    float x = pat(i, 1);
    return x > 0 ? x : 0;
}
static float add_want(size_t i, const tb_case *c) {
    float y = pat(i, 1) + pat(i, 2);
    return c->relu && !(y > 0) ? 0 : y;
}
static float scale_want(size_t i, const tb_case *c) { return c->alpha * pat(i, 1); }
static float axpy_want(size_t i, const tb_case *c) { return pat(i, 2) + c->alpha * pat(i, 1); }

void run_large_relu_fwd(tb_ctx *t, const tb_case *c) {
    if (!TB_HAS(t, relu_fwd)) return;
    float *x = large_dev(t, c->count, 1), *y = large_dev(t, c->count, 0);
    t->be->ops->relu_fwd(t->be, x, y, c->count);
    check_large(t, "y", y, c->count, relu_want, c);
}

void run_large_add(tb_ctx *t, const tb_case *c) {
    if (!TB_HAS(t, add)) return;
    float *a = large_dev(t, c->count, 1), *b = large_dev(t, c->count, 2);
    float *y = large_dev(t, c->count, 0);
    t->be->ops->add(t->be, a, b, y, c->count, c->relu);
    check_large(t, "y", y, c->count, add_want, c);
}

void run_large_scale(tb_ctx *t, const tb_case *c) {
    if (!TB_HAS(t, scale)) return;
    float *x = large_dev(t, c->count, 1); /* in place: one buffer */
    t->be->ops->scale(t->be, x, x, c->alpha, c->count);
    check_large(t, "y", x, c->count, scale_want, c);
}

void run_large_axpy(tb_ctx *t, const tb_case *c) {
    if (!TB_HAS(t, axpy)) return;
    float *x = large_dev(t, c->count, 1), *y = large_dev(t, c->count, 2);
    t->be->ops->axpy(t->be, c->alpha, x, y, c->count);
    check_large(t, "y", y, c->count, axpy_want, c);
}

void run_large_sumsq(tb_ctx *t, const tb_case *c) {
    if (!TB_HAS(t, sumsq)) return;
    size_t n = c->count;
    float *x = large_dev(t, n, 1);
    double got = t->be->ops->sumsq(t->be, x, n);
    /* per period in double: full periods, then the partial one */
    double per = 0, part = 0;
    size_t rest = n % LARGE_P;
    for (size_t j = 0; j < LARGE_P; j++) {
        double v = pat(j, 1);
        per += v * v;
        if (j + 1 == rest) part = per;
    }
    double want = per * (double)(n / LARGE_P) + part;
    double rel = fabs(got - want) / want;
    tb_expect(t, rel <= t->tol, "sumsq = %.17g, expected %.17g (relative %.3g > %.3g)", got, want,
              rel, t->tol);
}
