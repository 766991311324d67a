/* kernels/cpu/cpu_elem.c - elementwise ops on the CPU: ReLU, residual add
 * (+ReLU), scale, axpy, bias, dropout (counter-RNG mask), sum of squares.
 * OpenMP over elements (over planes for bias), `omp simd` inner loops.
 */
#include "kernels/cpu/cpu_internal.h"
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

static void add(sg_backend *be, const float *a, const float *b, float *y, size_t count,
                int relu) {
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

static void bias_fwd(sg_backend *be, float *y, const float *b, int n, int c, int hw) {
    (void)be;
    long planes = (long)n * c;
#pragma omp parallel for schedule(static) PAR_IF((size_t)planes * hw)
    for (long pl = 0; pl < planes; pl++) {
        float v = b[pl % c];
        float *p = y + (size_t)pl * hw;
#pragma omp simd
        for (int q = 0; q < hw; q++) p[q] += v;
    }
}

static void bias_bwd(sg_backend *be, const float *dy, float *db, int n, int c, int hw,
                     int accumulate) {
    (void)be;
#pragma omp parallel for schedule(static) PAR_IF((size_t)n * c * hw)
    for (int ch = 0; ch < c; ch++) {
        double s = 0;
        for (int i = 0; i < n; i++) {
            const float *p = dy + ((size_t)i * c + ch) * hw;
#pragma omp simd reduction(+ : s)
            for (int q = 0; q < hw; q++) s += p[q];
        }
        db[ch] = accumulate ? (float)(db[ch] + s) : (float)s;
    }
}

/* Mask rule shared with every backend (backend.h): keep iff
 * sg_rng_uniform(key, i) >= p; kept values are scaled by 1/(1-p). */
static void dropout_fwd(sg_backend *be, const float *x, float *y, uint8_t *mask, size_t count,
                        float p, uint64_t key) {
    (void)be;
    float s = p < 1.0f ? 1.0f / (1.0f - p) : 0.0f;
    int all_drop = !(p < 1.0f);
#pragma omp parallel for schedule(static) PAR_IF(count)
    for (size_t i = 0; i < count; i++) {
        int keep = !all_drop && sg_rng_uniform(key, i) >= p;
        mask[i] = (uint8_t)keep;
        y[i] = keep ? x[i] * s : 0.0f;
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

void sg_cpu_fill_elem_ops(sg_ops *ops) {
    ops->relu_fwd = relu_fwd;
    ops->relu_bwd = relu_bwd;
    ops->add = add;
    ops->scale = scale;
    ops->axpy = axpy;
    ops->bias_fwd = bias_fwd;
    ops->bias_bwd = bias_bwd;
    ops->dropout_fwd = dropout_fwd;
    ops->dropout_bwd = dropout_bwd;
    ops->sumsq = sumsq;
}
