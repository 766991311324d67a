/* train/bench_peak.c - the benchmark's reference figures: the device's measured
 * peak FLOP/s (the backend's own convolution on a compute-bound shape, so the
 * same code measures oneDNN on the CPU and cuDNN on a GPU), and the summary
 * statistics of the timed steps. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/log.h"
#include "core/util.h"
#include "train/bench.h"

/* A 3x3, 256 -> 256 channel convolution at 64x64 is the kind of layer that
 * runs closest to the machine's FMA peak (high arithmetic intensity, a
 * shape every conv library tunes for): its best rate is the practical peak
 * the model's convolutions could reach. One image (4.8 GFLOP) keeps every
 * core of a host busy; a device with its own memory (a GPU) needs a batch
 * of 16 to fill its multiprocessors. */
double sg_bench_conv_peak(sg_backend *be, char *src, size_t src_cap) {
    const sg_ops *ops = be->ops;
    sg_conv_desc d = {0};
    d.n = sg_backend_has(be, SG_CAP_HOST_MEMORY) ? 1 : 16;
    d.c = 256;
    d.h = d.w = 64;
    d.k = 256;
    d.r = d.s = 3;
    d.stride_h = d.stride_w = 1;
    d.pad_h = d.pad_w = 1;
    d.dil_h = d.dil_w = 1;
    SG_CHECK(sg_conv_desc_init(&d) == 0, "bench: invalid peak conv geometry");
    size_t nx = (size_t)d.n * d.c * d.h * d.w, nw = (size_t)d.k * d.c * d.r * d.s,
           ny = (size_t)d.n * d.k * d.oh * d.ow;
    float *x = ops->alloc(be, nx * sizeof(float));
    float *w = ops->alloc(be, nw * sizeof(float));
    float *y = ops->alloc(be, ny * sizeof(float));
    /* non-zero, non-denormal inputs (zeros could take a faster path) */
    float *h = malloc((nx > nw ? nx : nw) * sizeof(float));
    SG_CHECK(h != NULL, "out of host memory");
    for (size_t i = 0; i < nx; i++) h[i] = (float)((i * 7919u) % 1000u) * 1e-3f - 0.5f;
    ops->upload(be, x, h, nx * sizeof(float));
    for (size_t i = 0; i < nw; i++) h[i] = (float)((i * 104729u) % 1000u) * 1e-5f - 0.005f;
    ops->upload(be, w, h, nw * sizeof(float));
    free(h);
    if (ops->conv_prepare) ops->conv_prepare(be, &d);
    ops->conv_fwd(be, &d, x, w, y); /* first call: primitive creation */
    ops->sync(be);
    double flops = 2.0 * d.n * d.k * d.c * d.r * d.s * (double)d.oh * d.ow;
    double best = 1e30, start = sg_now_s();
    int reps = 0;
    while (reps < 3 || (sg_now_s() - start < 0.3 && reps < 200)) {
        double t0 = sg_now_s();
        ops->conv_fwd(be, &d, x, w, y);
        ops->sync(be);
        double t = sg_now_s() - t0;
        if (t < best) best = t;
        reps++;
    }
    ops->free(be, x);
    ops->free(be, w);
    ops->free(be, y);
    snprintf(src, src_cap, "measured: best of %d conv_fwd %dx%dx%dx%d, 3x3, %d out (%.2f GFLOP)",
             reps, d.n, d.c, d.h, d.w, d.k, flops / 1e9);
    return flops / best;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double sg_bench_median(const double *v, int n) {
    double *s = malloc((size_t)n * sizeof *s);
    SG_CHECK(s != NULL, "out of host memory");
    memcpy(s, v, (size_t)n * sizeof *s);
    qsort(s, (size_t)n, sizeof *s, cmp_double);
    double m = n % 2 ? s[n / 2] : 0.5 * (s[n / 2 - 1] + s[n / 2]);
    free(s);
    return m;
}

double sg_bench_mean(const double *v, int n) {
    double s = 0;
    for (int i = 0; i < n; i++) s += v[i];
    return s / n;
}

double sg_bench_stdev(const double *v, int n) {
    if (n < 2) return 0;
    double m = sg_bench_mean(v, n), s = 0;
    for (int i = 0; i < n; i++) s += (v[i] - m) * (v[i] - m);
    return sqrt(s / (n - 1));
}

double sg_bench_min(const double *v, int n) {
    double m = v[0];
    for (int i = 1; i < n; i++) m = v[i] < m ? v[i] : m;
    return m;
}

double sg_bench_max(const double *v, int n) {
    double m = v[0];
    for (int i = 1; i < n; i++) m = v[i] > m ? v[i] : m;
    return m;
}
