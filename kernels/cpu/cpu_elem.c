/* kernels/cpu/cpu_elem.c - the elementwise group on the CPU (the ops of
 * tests/backend/run_elem.c; kernels/cuda/cuda_elem.cu on the GPU): ReLU,
 * residual add (+ReLU), scale, axpy, dropout (counter-RNG mask), the SGD
 * update (torch.optim.SGD semantics, see backend.h), the input conversion
 * uint8 HWC -> normalized float in the activation layout (NHWC: the source's
 * own order), and the sum of squares; also
 * sg_cpu_add_into for the other files. OpenMP over elements (over rows for
 * normalize_u8), `omp simd` inner loops. The per-element arithmetic of SGD
 * and the normalization is shared with the CUDA backend:
 * kernels/formulas/sgd.h and kernels/formulas/normalize.h.
 */
#include "kernels/cpu/cpu_internal.h"
#include "kernels/formulas/normalize.h"
#include "kernels/formulas/sgd.h"
#include "kernels/rng.h"

#define PAR_IF(count) if ((count) >= SG_CPU_PAR_MIN)

void sg_cpu_add_into(float *dst, const float *src, size_t count) {
#pragma omp parallel for simd schedule(static) PAR_IF(count)
    for (size_t i = 0; i < count; i++) dst[i] += src[i];
}

static void relu_fwd(sg_backend *be, const float *x, float *y, size_t count) {
    (void)be;
#pragma omp parallel for simd schedule(static) PAR_IF(count)
    for (size_t i = 0; i < count; i++) y[i] = x[i] > 0.0f ? x[i] : 0.0f;
}

static void relu_bwd(sg_backend *be, const float *dy, const float *y, float *dx, size_t count,
                     int accumulate) {
    (void)be;
    if (accumulate) {
#pragma omp parallel for simd schedule(static) PAR_IF(count)
        for (size_t i = 0; i < count; i++) {
            float g = dy[i]; /* loaded unconditionally so the select vectorizes */
            dx[i] += y[i] > 0.0f ? g : 0.0f;
        }
    } else {
#pragma omp parallel for simd schedule(static) PAR_IF(count)
        for (size_t i = 0; i < count; i++) {
            float g = dy[i];
            dx[i] = y[i] > 0.0f ? g : 0.0f;
        }
    }
}

static void add(sg_backend *be, const float *a, const float *b, float *y, size_t count, int relu) {
    (void)be;
    if (relu) {
#pragma omp parallel for simd schedule(static) PAR_IF(count)
        for (size_t i = 0; i < count; i++) {
            float v = a[i] + b[i];
            y[i] = v > 0.0f ? v : 0.0f;
        }
    } else {
#pragma omp parallel for simd schedule(static) PAR_IF(count)
        for (size_t i = 0; i < count; i++) y[i] = a[i] + b[i];
    }
}

static void scale(sg_backend *be, const float *x, float *y, float alpha, size_t count) {
#pragma omp parallel for simd schedule(static) PAR_IF(count)
    for (size_t i = 0; i < count; i++) y[i] = alpha * x[i];
    sg_cpu_written(be, y, count * sizeof(float)); /* y may be weights (EMA) */
}

static void axpy(sg_backend *be, float alpha, const float *x, float *y, size_t count) {
#pragma omp parallel for simd schedule(static) PAR_IF(count)
    for (size_t i = 0; i < count; i++) y[i] += alpha * x[i];
    sg_cpu_written(be, y, count * sizeof(float));
}

/* Mask rule shared with every backend (backend.h): keep iff
 * sg_rng_uniform(key, i) >= p for the element's NCHW index i; kept values are
 * scaled by 1/(1-p). In NHWC storage index j = (b*hw + q)*c + ch holds NCHW
 * element (b*c + ch)*hw + q. */
static void set_step_key(sg_backend *be, uint64_t key) { sg_cpu_of(be)->step_key = key; }

/* n elements of dropout_fwd from j0 on, NCHW indices i0, i0 + di, ...:
 * the 64-bit multiplies of the hash vectorize on AVX-512 (vpmullq). */
SG_CPU_CLONES static void dropout_run(const float *x, float *y, uint8_t *mask, size_t j0, size_t n,
                                      uint64_t key, size_t i0, size_t di, float p, float s,
                                      int all_drop) {
#pragma omp simd
    for (size_t t = 0; t < n; t++) {
        int keep = !all_drop && sg_rng_uniform(key, i0 + t * di) >= p;
        mask[j0 + t] = (uint8_t)keep;
        y[j0 + t] = keep ? x[j0 + t] * s : 0.0f;
    }
}

static void dropout_fwd(sg_backend *be, const float *x, float *y, uint8_t *mask, size_t count,
                        int c, int hw, float p, uint64_t salt) {
    uint64_t key = sg_rng_dropout_key(sg_cpu_of(be)->step_key, salt);
    float s = p < 1.0f ? 1.0f / (1.0f - p) : 0.0f;
    int all_drop = !(p < 1.0f);
    int nhwc = be->layout == SG_LAYOUT_NHWC && c > 1 && hw > 1;
    /* NHWC: pixel row r = b*hw + q holds channels ch at j = r*c + ch, NCHW
     * index (b*c + ch)*hw + q: one division per row, none per element (the
     * divisions per element took most of the time). NCHW: runs of 4096
     * elements, whose index is their position. */
    size_t cs = c > 0 ? (size_t)c : 1, hws = hw > 0 ? (size_t)hw : 1, rows = count / cs;
    if (!nhwc) {
        cs = count < 4096 ? (count ? count : 1) : 4096;
        rows = (count + cs - 1) / cs;
    }
#pragma omp parallel for schedule(static) PAR_IF(count)
    for (size_t r = 0; r < rows; r++) {
        if (!nhwc) {
            size_t j0 = r * cs, n = count - j0 < cs ? count - j0 : cs;
            dropout_run(x, y, mask, j0, n, key, j0, 1, p, s, all_drop);
            continue;
        }
        size_t b = r / hws, q = r % hws;
        dropout_run(x, y, mask, r * cs, cs, key, b * cs * hws + q, hws, p, s, all_drop);
    }
}

static void dropout_bwd(sg_backend *be, const float *dy, const uint8_t *mask, float *dx,
                        size_t count, float p, int accumulate) {
    (void)be;
    float s = p < 1.0f ? 1.0f / (1.0f - p) : 0.0f;
    if (accumulate) {
#pragma omp parallel for simd schedule(static) PAR_IF(count)
        for (size_t i = 0; i < count; i++) {
            float g = dy[i] * s; /* unconditional load: the select vectorizes */
            dx[i] += mask[i] ? g : 0.0f;
        }
    } else {
#pragma omp parallel for simd schedule(static) PAR_IF(count)
        for (size_t i = 0; i < count; i++) {
            float g = dy[i] * s;
            dx[i] = mask[i] ? g : 0.0f;
        }
    }
}

static double sumsq(sg_backend *be, const float *x, size_t count) {
    (void)be;
    /* Fixed chunks summed in order: the same bits whatever the thread count
     * or timing (an OpenMP reduction combines in arrival order). */
    enum { CHUNKS = 256 };
    double part[CHUNKS];
    size_t per = (count + CHUNKS - 1) / CHUNKS;
#pragma omp parallel for schedule(static) PAR_IF(count)
    for (int ch = 0; ch < CHUNKS; ch++) {
        size_t i0 = (size_t)ch * per, i1 = i0 + per < count ? i0 + per : count;
        double s = 0;
#pragma omp simd reduction(+ : s)
        for (size_t i = i0; i < i1; i++) s += (double)x[i] * x[i];
        part[ch] = s;
    }
    double s = 0;
    for (int ch = 0; ch < CHUNKS; ch++) s += part[ch];
    return s;
}

/* formulas/sgd.h's steps, with the momentum branch hoisted out of the
 * loops (the per-call selects inside vectorize). */
/* SGD on n values (buf NULL: no momentum), a clone per ISA: the update
 * streams 20 bytes a value, yet on SSE2 (the build's baseline) its
 * instructions were the limit. R50's 42M values (840 MB a step), bf16, one
 * thread, the step's optimizer ms, SSE2 / clones, alternated 3 times:
 * 25.2, 25.0, 25.7 / 15.1, 15.1, 16.1. The same operations in the same
 * order on every clone: the same bits. */
SG_CPU_CLONES static void sgd_chunk(float *param, const float *grad, float *buf, size_t n, float lr,
                                    float momentum, float damp, float wd, int nesterov, int first) {
    if (!buf) {
#pragma omp simd
        for (size_t i = 0; i < n; i++)
            param[i] = sg_sgd_apply(param[i], sg_sgd_decayed(grad[i], param[i], wd), lr);
        return;
    }
#pragma omp simd
    for (size_t i = 0; i < n; i++) {
        float d = sg_sgd_decayed(grad[i], param[i], wd);
        float b = sg_sgd_buf(buf + i, d, momentum, damp, first);
        buf[i] = b;
        param[i] = sg_sgd_apply(param[i], sg_sgd_dir(d, b, momentum, nesterov), lr);
    }
}

void sg_cpu_sgd_span(float *param, const float *grad, float *buf, size_t n, float lr,
                     float momentum, float damp1, float wd, int nesterov, int first) {
    sgd_chunk(param, grad, buf, n, lr, momentum, damp1, wd, nesterov, first);
}

#define SGD_CHUNK SG_CPU_SGD_CHUNK

static void sgd_step(sg_backend *be, float *param, const float *grad, float *buf, size_t count,
                     float lr, float momentum, float dampening, float wd, int nesterov, int first) {
    /* the bf16 weight copies of param are stale from here on */
    sg_cpu_written(be, param, count * sizeof(float));
    float damp = sg_sgd_damp1(dampening);
    float *b = momentum == 0.0f ? NULL : buf;
    size_t chunks = (count + SGD_CHUNK - 1) / SGD_CHUNK;
#pragma omp parallel for schedule(static) PAR_IF(count)
    for (size_t k = 0; k < chunks; k++) {
        size_t i = k * SGD_CHUNK, n = count - i < SGD_CHUNK ? count - i : SGD_CHUNK;
        sgd_chunk(param + i, grad + i, b ? b + i : NULL, n, lr, momentum, damp, wd, nesterov,
                  first);
    }
}

static void normalize_u8(sg_backend *be, const uint8_t *src, float *dst, int n, int h, int w,
                         const float mean[3], const float std[3]) {
    size_t hw = (size_t)h * w;
    /* (v/255 - mean)/std = v*a + b (formulas/normalize.h). */
    float a[3], b[3];
    for (int ch = 0; ch < 3; ch++) {
        a[ch] = sg_normalize_a(std[ch]);
        b[ch] = sg_normalize_b(mean[ch], std[ch]);
    }
    long rows = (long)n * h;
    if (be->layout == SG_LAYOUT_NHWC) { /* dst [n, h, w, 3]: element for element */
#pragma omp parallel for schedule(static) PAR_IF((size_t)rows *w)
        for (long r = 0; r < rows; r++) {
            const uint8_t *s = src + (size_t)r * w * 3;
            float *d = dst + (size_t)r * w * 3;
            for (int q = 0; q < w; q++) {
                d[3 * q] = sg_normalize_px(s[3 * q], a[0], b[0]);
                d[3 * q + 1] = sg_normalize_px(s[3 * q + 1], a[1], b[1]);
                d[3 * q + 2] = sg_normalize_px(s[3 * q + 2], a[2], b[2]);
            }
        }
        return;
    }
#pragma omp parallel for schedule(static) PAR_IF((size_t)rows *w)
    for (long r = 0; r < rows; r++) {
        long i = r / h;
        size_t p0 = (size_t)(r % h) * w;
        const uint8_t *s = src + ((size_t)i * hw + p0) * 3;
        float *d0 = dst + (size_t)i * 3 * hw + p0, *d1 = d0 + hw, *d2 = d1 + hw;
        for (int q = 0; q < w; q++) {
            d0[q] = sg_normalize_px(s[3 * q], a[0], b[0]);
            d1[q] = sg_normalize_px(s[3 * q + 1], a[1], b[1]);
            d2[q] = sg_normalize_px(s[3 * q + 2], a[2], b[2]);
        }
    }
}

void sg_cpu_fill_elem_ops(sg_ops *ops) {
    ops->relu_fwd = relu_fwd;
    ops->relu_bwd = relu_bwd;
    ops->add = add;
    ops->scale = scale;
    ops->axpy = axpy;
    ops->set_step_key = set_step_key;
    ops->dropout_fwd = dropout_fwd;
    ops->dropout_bwd = dropout_bwd;
    ops->sgd_step = sgd_step;
    ops->normalize_u8 = normalize_u8;
    ops->sumsq = sumsq;
}
