/* tests/backend/tb.c - the conformance suite's harness (see tb.h): buffers
 * owned by a case run, moved only through the backend's memory ops,
 * comparisons against the references, failure messages, finite differences.
 */
#include "tests/backend/tb.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/rng.h"
#include "tests/kernels/ref_ops.h"

/* testutil.h's counters are for TEST_RUN-style tests; here only its
 * tu_max_rel_err and tu_fill are used (the same definitions as every test). */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-variable"
#include "tests/testutil.h"
#pragma GCC diagnostic pop

#define TB_MAX_FAIL_LINES 6

/* ---------------- ownership ---------------- */

static void *xmalloc(size_t bytes) {
    void *p = calloc(1, bytes ? bytes : 1);
    if (!p) {
        fprintf(stderr, "test_backend_ops: out of host memory (%zu bytes)\n", bytes);
        exit(1);
    }
    return p;
}

static void own(void ***list, size_t *n, size_t *cap, void *p) {
    if (*n == *cap) {
        *cap = *cap ? 2 * *cap : 32;
        void **grown = realloc(*list, *cap * sizeof *grown);
        if (!grown) {
            fprintf(stderr, "test_backend_ops: out of host memory\n");
            exit(1);
        }
        *list = grown;
    }
    (*list)[(*n)++] = p;
}

static uint64_t fnv1a(uint64_t h, const char *s) {
    for (; *s; s++) h = (h ^ (uint8_t)*s) * 0x100000001b3ull;
    return h;
}

void tb_begin(tb_ctx *t, sg_backend *be, const char *config, int det, const tb_case *c) {
    memset(t, 0, sizeof *t);
    t->be = be;
    t->config = config;
    t->det = det;
    t->c = c;
    /* the table states CUDA's tolerance where it differs (tb.h) */
    t->tol = (strcmp(be->ops->name, "cuda") == 0 && c->tol_cuda > 0) ? c->tol_cuda : c->tol;
    tb_describe(c, t->desc, sizeof t->desc);
    /* The data depend on the case alone: every backend and configuration
     * sees the same inputs, and adding a case changes no other case's. */
    t->seed = fnv1a(fnv1a(0xcbf29ce484222325ull, c->op), t->desc);
}

int tb_end(tb_ctx *t) {
    for (size_t i = 0; i < t->ndev; i++) t->be->ops->free(t->be, t->dev[i]);
    for (size_t i = 0; i < t->npinned; i++) t->be->ops->host_free(t->be, t->pinned[i]);
    for (size_t i = 0; i < t->nhost; i++) free(t->host[i]);
    free(t->dev);
    free(t->pinned);
    free(t->host);
    t->dev = t->pinned = t->host = NULL;
    t->ndev = t->npinned = t->nhost = 0;
    return t->failures == 0;
}

size_t tb_conv_nw(const sg_conv_desc *d) {
    int g = d->groups > 1 ? d->groups : 1;
    return (size_t)d->k * (size_t)(d->c / g) * (size_t)d->r * (size_t)d->s;
}

/* ---------------- describing a case ---------------- */

static void add(char *buf, size_t size, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void add(char *buf, size_t size, const char *fmt, ...) {
    size_t len = strlen(buf);
    if (len + 1 >= size) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf + len, size - len, fmt, ap);
    va_end(ap);
}

void tb_describe(const tb_case *c, char *buf, size_t size) {
    static const char *fills[] = {"random", "ties", "constant", "distinct"};
    buf[0] = 0;
    const sg_conv_desc *d = &c->conv;
    if (d->n)
        add(buf, size, " n%d c%d %dx%d k%d %dx%d stride %d,%d pad %d,%d dil %d,%d", d->n, d->c,
            d->h, d->w, d->k, d->r, d->s, d->stride_h, d->stride_w, d->pad_h, d->pad_w, d->dil_h,
            d->dil_w);
    if (d->groups) add(buf, size, " groups %d", d->groups);
    if (c->n) add(buf, size, " n%d c%d %dx%d", c->n, c->c, c->h, c->w);
    else if (c->c) add(buf, size, " c%d", c->c);
    if (c->oh) add(buf, size, " -> %dx%d", c->oh, c->ow);
    if (c->c_dst) add(buf, size, " into c%d at %d", c->c_dst, c->c_off);
    if (c->count) add(buf, size, " count %zu", c->count);
    if (c->acc) add(buf, size, " acc");
    if (c->acc2) add(buf, size, " acc2");
    if (c->skip) add(buf, size, " %s NULL", c->skip == 1 ? "dx" : "ds");
    if (c->relu) add(buf, size, " relu");
    if (c->x_dt == SG_ACT_BF16) add(buf, size, " x:bf16");
    if (c->y_dt == SG_ACT_BF16) add(buf, size, " y:bf16");
    if (c->inplace)
        add(buf, size, " in-place(%s)", c->inplace == 1 ? "first input" : "second input");
    if (c->prepare) add(buf, size, " prepared");
    if (c->fill == TB_FILL_CONST) add(buf, size, " constant %g", c->lo);
    else if (c->fill == TB_FILL_DISTINCT) add(buf, size, " distinct values");
    else if (c->fill || c->lo != 0 || c->hi != 0)
        add(buf, size, " %s in [%g, %g)", fills[c->fill], c->lo == 0 && c->hi == 0 ? -1 : c->lo,
            c->lo == 0 && c->hi == 0 ? 1 : c->hi);
    if (c->p != 0 || c->key) add(buf, size, " p %g", c->p);
    if (c->key) add(buf, size, " key %#llx", (unsigned long long)c->key);
    if (c->alpha != 0) add(buf, size, " alpha %g", c->alpha);
    if (c->parts) {
        add(buf, size, " parts %d", c->parts);
        if (c->counts) {
            add(buf, size, " (counts");
            for (int i = 0; i < c->parts && i < 8; i++)
                add(buf, size, " %lld", (long long)c->counts[i]);
            add(buf, size, c->parts > 8 ? " ...)" : ")");
        }
    }
    if (c->eps != 0) add(buf, size, " eps %g", c->eps);
    if (c->momentum != 0) add(buf, size, " momentum %g", c->momentum);
    if (c->running) add(buf, size, " running stats");
    if (c->grad_scale != 0) add(buf, size, " grad_scale %g", c->grad_scale);
    if (c->ignore) add(buf, size, " ignore %d", c->ignore);
    if (c->sgd.steps)
        add(buf, size, " lr %g momentum %g dampening %g wd %g%s%s steps %d", c->sgd.lr,
            c->sgd.momentum, c->sgd.dampening, c->sgd.wd, c->sgd.nesterov ? " nesterov" : "",
            c->sgd.first ? " first" : "", c->sgd.steps);
    if (c->in) add(buf, size, " given input");
    if (c->want) add(buf, size, " known values");
    if (c->fd_h != 0) add(buf, size, " h %g", c->fd_h);
    if (c->note) add(buf, size, " (%s)", c->note);
    if (buf[0] == ' ') memmove(buf, buf + 1, strlen(buf));
}

/* ---------------- failures ---------------- */

static void vfail(tb_ctx *t, const char *fmt, va_list ap) {
    t->failures++;
    if (t->failures > TB_MAX_FAIL_LINES) return;
    printf("  FAIL %s [%s] %s: ", t->c->op, t->config, t->desc);
    vprintf(fmt, ap);
    printf(t->failures == TB_MAX_FAIL_LINES ? " (further failures of this case not shown)\n"
                                            : "\n");
    fflush(stdout);
}

int tb_fail(tb_ctx *t, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vfail(t, fmt, ap);
    va_end(ap);
    return 0;
}

int tb_expect(tb_ctx *t, int cond, const char *fmt, ...) {
    if (cond) return 1;
    va_list ap;
    va_start(ap, fmt);
    vfail(t, fmt, ap);
    va_end(ap);
    return 0;
}

int tb_has(tb_ctx *t, const void *fn, const char *name) {
    return tb_expect(t, fn != NULL, "the %s backend has no %s op (NULL in its sg_ops table)",
                     t->be->ops->name, name);
}

/* ---------------- host buffers ---------------- */

void *tb_hbytes(tb_ctx *t, size_t bytes) {
    void *p = xmalloc(bytes);
    own(&t->host, &t->nhost, &t->caphost, p);
    return p;
}

float *tb_hzeros(tb_ctx *t, size_t n) { return tb_hbytes(t, n * sizeof(float)); }

float *tb_hcopy(tb_ctx *t, const float *src, size_t n) {
    float *p = tb_hzeros(t, n);
    memcpy(p, src, n * sizeof(float));
    return p;
}

float *tb_rand(tb_ctx *t, size_t n, float lo, float hi) {
    float *p = tb_hzeros(t, n);
    tu_fill(p, n, t->seed + 0x9E3779B97F4A7C15ull * ++t->draws, lo, hi);
    return p;
}

float *tb_input(tb_ctx *t, size_t n) {
    const tb_case *c = t->c;
    if (c->in) return tb_hcopy(t, c->in, n);
    float lo = c->lo, hi = c->hi;
    if (lo == 0 && hi == 0) lo = -1, hi = 1;
    float *x;
    switch (c->fill) {
    case TB_FILL_TIES:
        x = tb_rand(t, n, lo, hi);
        for (size_t i = 0; i < n; i++) x[i] = floorf(x[i] * 4.0f) / 4.0f;
        return x;
    case TB_FILL_CONST:
        x = tb_hzeros(t, n);
        for (size_t i = 0; i < n; i++) x[i] = lo;
        return x;
    case TB_FILL_DISTINCT:
        /* no two values within 0.01: finite differences never straddle a tie */
        x = tb_hzeros(t, n);
        for (size_t i = 0; i < n; i++) x[i] = (float)((i * 7919) % n) * 0.01f - 1.0f;
        return x;
    default: return tb_rand(t, n, lo, hi);
    }
}

uint64_t tb_u64(tb_ctx *t, uint64_t i) { return sg_rng_u64(t->seed, i); }

/* ---------------- backend memory ---------------- */

void *tb_dev(tb_ctx *t, const void *host, size_t bytes) {
    void *d = t->be->ops->alloc(t->be, bytes ? bytes : 1);
    own(&t->dev, &t->ndev, &t->capdev, d);
    if (host && bytes) t->be->ops->upload(t->be, d, host, bytes);
    return d;
}

float *tb_devf(tb_ctx *t, const float *host, size_t n) {
    return tb_dev(t, host, n * sizeof(float));
}

void tb_put(tb_ctx *t, void *dev, const void *host, size_t bytes) {
    t->be->ops->upload(t->be, dev, host, bytes);
}

void *tb_get(tb_ctx *t, const void *dev, size_t bytes) {
    void *h = tb_hbytes(t, bytes);
    t->be->ops->download(t->be, h, dev, bytes);
    return h;
}

float *tb_getf(tb_ctx *t, const float *dev, size_t n) { return tb_get(t, dev, n * sizeof(float)); }

/* ---------------- activations in the backend's layout ---------------- */

static void *relayout(tb_ctx *t, const void *src, int n, int c, int hw, size_t esize, int to) {
    unsigned char *dst = tb_hbytes(t, (size_t)n * c * hw * esize);
    if (to) sg_act_relayout(dst, src, n, c, hw, esize, SG_LAYOUT_NCHW, t->be->layout);
    else sg_act_relayout(dst, src, n, c, hw, esize, t->be->layout, SG_LAYOUT_NCHW);
    return dst;
}

void *tb_to_layout(tb_ctx *t, const void *nchw, int n, int c, int hw, size_t esize) {
    return relayout(t, nchw, n, c, hw, esize, 1);
}

void *tb_from_layout(tb_ctx *t, const void *stored, int n, int c, int hw, size_t esize) {
    return relayout(t, stored, n, c, hw, esize, 0);
}

void *tb_act_dev(tb_ctx *t, const void *host, int n, int c, int hw, size_t esize) {
    size_t bytes = (size_t)n * (size_t)c * (size_t)hw * esize;
    return tb_dev(t, host ? tb_to_layout(t, host, n, c, hw, esize) : NULL, bytes);
}

float *tb_actf(tb_ctx *t, const float *host, int n, int c, int hw) {
    return tb_act_dev(t, host, n, c, hw, sizeof(float));
}

void tb_act_put(tb_ctx *t, void *dev, const void *host, int n, int c, int hw, size_t esize) {
    tb_put(t, dev, tb_to_layout(t, host, n, c, hw, esize), (size_t)n * c * hw * esize);
}

void *tb_act_get(tb_ctx *t, const void *dev, int n, int c, int hw, size_t esize) {
    return tb_from_layout(t, tb_get(t, dev, (size_t)n * c * hw * esize), n, c, hw, esize);
}

float *tb_act_getf(tb_ctx *t, const float *dev, int n, int c, int hw) {
    return tb_act_get(t, dev, n, c, hw, sizeof(float));
}

int tb_close_act(tb_ctx *t, const char *what, const float *ref, const float *dev, int n, int c,
                 int hw, double tol) {
    return tb_close(t, what, ref, tb_act_getf(t, dev, n, c, hw), (size_t)n * c * hw, tol);
}

int tb_same_act(tb_ctx *t, const char *what, const void *ref, const void *dev, int n, int c, int hw,
                size_t esize) {
    return tb_same(t, what, ref, tb_act_get(t, dev, n, c, hw, esize), (size_t)n * c * hw * esize);
}

void *tb_pinned(tb_ctx *t, size_t bytes) {
    void *p = t->be->ops->host_alloc(t->be, bytes);
    own(&t->pinned, &t->npinned, &t->cappinned, p);
    return p;
}

/* ---------------- comparisons ---------------- */

int tb_close(tb_ctx *t, const char *what, const float *ref, const float *got, size_t n,
             double tol) {
    if (tol == 0) {
        for (size_t i = 0; i < n; i++)
            if (memcmp(&ref[i], &got[i], sizeof(float)) != 0)
                return tb_fail(t, "%s: not bit-exact: element %zu of %zu is %.9g, want %.9g", what,
                               i, n, got[i], ref[i]);
        return 1;
    }
    double e = tu_max_rel_err(ref, got, n, TB_FLOOR);
    if (e <= tol) return 1;
    size_t worst = 0;
    double wd = -1;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)ref[i] - got[i]);
        if (!(d <= wd)) wd = d, worst = i; /* NaN counts as the worst */
    }
    return tb_fail(t,
                   "%s: relative error %.3g > tolerance %.3g (worst at element %zu of %zu: "
                   "%.9g, want %.9g)",
                   what, e, tol, worst, n, got[worst], ref[worst]);
}

int tb_close_dev(tb_ctx *t, const char *what, const float *ref, const float *dev, size_t n,
                 double tol) {
    return tb_close(t, what, ref, tb_getf(t, dev, n), n, tol);
}

int tb_close_bf16(tb_ctx *t, const char *what, const float *ref, const float *got,
                  const float *base, size_t n, int steps, double slack) {
    double amax = 0;
    for (size_t i = 0; i < n; i++)
        if (fabs(ref[i]) > amax) amax = fabs(ref[i]);
    double worst = 0;
    size_t wi = 0;
    for (size_t i = 0; i < n; i++) {
        double r = ref[i], g = got[i], b = base ? base[i] : 0.0;
        /* the bf16 value is the result before it was added to base */
        double m = fabs(r - b) > fabs(g - b) ? fabs(r - b) : fabs(g - b);
        double allowed = steps * ref_bf16_ulp(m) + slack * amax;
        double q = fabs(g - r) / allowed;
        if (q != q) q = INFINITY; /* NaN */
        if (q > worst) worst = q, wi = i;
    }
    /* without accumulation the op's output is the rounded result itself */
    for (size_t i = 0; !base && i < n; i++)
        if (ref_bf16_round(got[i]) != got[i])
            return tb_fail(t,
                           "%s: element %zu is %.9g, not a bf16 value (the result must be "
                           "rounded to bf16)",
                           what, i, (double)got[i]);
    if (worst <= 1.0) return 1;
    return tb_fail(t,
                   "%s: element %zu is %.9g, the bf16-exact reference %.9g: %.2f times the "
                   "allowed %d bf16 step(s) + %g x max|ref| (max|ref| %.4g)",
                   what, wi, (double)got[wi], (double)ref[wi], worst, steps, slack, amax);
}

int tb_same(tb_ctx *t, const char *what, const void *ref, const void *got, size_t bytes) {
    const uint8_t *a = ref, *b = got;
    for (size_t i = 0; i < bytes; i++)
        if (a[i] != b[i])
            return tb_fail(t, "%s: differs at byte %zu of %zu (0x%02x, want 0x%02x)", what, i,
                           bytes, b[i], a[i]);
    return 1;
}

int tb_same_dev(tb_ctx *t, const char *what, const void *ref, const void *dev, size_t bytes) {
    return tb_same(t, what, ref, tb_get(t, dev, bytes), bytes);
}

int tb_near(tb_ctx *t, const char *what, double got, double want, double abs_tol) {
    return tb_expect(t, fabs(got - want) <= abs_tol, "%s: %.12g, want %.12g (tolerance %g)", what,
                     got, want, abs_tol);
}

int tb_want_d(tb_ctx *t, const char *what, const double *got, size_t n) {
    const tb_case *c = t->c;
    if (!c->want) return 1;
    if (!tb_expect(t, (size_t)c->nwant <= n, "%s: %d known values for %zu outputs", what, c->nwant,
                   n))
        return 0;
    for (int i = 0; i < c->nwant; i++)
        if (!(fabs(got[i] - c->want[i]) <= c->want_tol))
            return tb_fail(t, "%s: element %d is %.9g, known value %.9g (tolerance %g)", what, i,
                           got[i], c->want[i], c->want_tol);
    return 1;
}

int tb_want(tb_ctx *t, const char *what, const float *got, size_t n) {
    if (!t->c->want) return 1;
    double *g = tb_hbytes(t, n * sizeof(double));
    for (size_t i = 0; i < n; i++) g[i] = got[i];
    return tb_want_d(t, what, g, n);
}

/* ---------------- finite differences ---------------- */

double tb_dot_dev(tb_ctx *t, const float *r, const float *y_dev, size_t n) {
    /* one host buffer per run would do; these runs are small and few */
    float *y = xmalloc(n * sizeof(float));
    t->be->ops->download(t->be, y, y_dev, n * sizeof(float));
    double s = 0;
    for (size_t i = 0; i < n; i++) s += (double)r[i] * y[i];
    free(y);
    return s;
}

static void set_param(tb_ctx *t, float *host, float *dev, size_t i, float v) {
    host[i] = v;
    t->be->ops->upload(t->be, dev + i, &host[i], sizeof(float));
}

int tb_check_fd(tb_ctx *t, const char *what, float *param_host, float *param_dev, size_t count,
                const float *analytic, tb_loss_fn loss, void *state, float h) {
    double maxa = 1e-3, maxd = 0;
    size_t worst = 0;
    for (size_t i = 0; i < count; i++)
        if (fabs(analytic[i]) > maxa) maxa = fabs(analytic[i]);
    size_t step = count <= 200 ? 1 : count / 200;
    double worst_num = 0;
    for (size_t i = 0; i < count; i += step) {
        float p = param_host[i], pp = p + h, pm = p - h;
        set_param(t, param_host, param_dev, i, pp);
        double lp = loss(t, state);
        set_param(t, param_host, param_dev, i, pm);
        double lm = loss(t, state);
        set_param(t, param_host, param_dev, i, p);
        double num = (lp - lm) / ((double)pp - (double)pm);
        double d = fabs(num - analytic[i]);
        if (!(d <= maxd)) maxd = d, worst = i, worst_num = num;
    }
    double e = maxd / maxa;
    if (e <= t->tol) return 1;
    return tb_fail(t,
                   "d/d%s: finite-difference relative error %.3g > tolerance %.3g (worst at "
                   "element %zu of %zu: analytic %.6g, numeric %.6g)",
                   what, e, t->tol, worst, count, analytic[worst], worst_num);
}
