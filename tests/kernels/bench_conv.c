/* tests/kernels/bench_conv.c - times the CPU backend's convolutions on the
 * layer shapes of DeepLabV3-ResNet50 (batch 2, 256x256 crops, output stride
 * 8) in each conv layout: plain nchw/oihw vs oneDNN's chosen (blocked)
 * layout with reorders (SG_CPU_CONV=force:onednn-plain / force:onednn-blocked;
 * auto: the measured rules of kernels/cpu/conv/paths.c). A measuring tool,
 * not a test (built, never run by meson test).
 *
 *   bench_conv [iters] [layout ...]     default: 3 iterations, plain blocked auto
 *
 * A layout may also be bf16 (train.precision bf16: oneDNN's native bf16
 * primitives where the processor has them) or bf16-emu (the exact emulation,
 * SG_CPU_BF16=emulated); both with the auto layout for the float32 parts.
 * nhwc, nhwc-bf16, nhwc-bf16-emu: the same (auto, bf16, bf16-emu) with the
 * activations stored NHWC (sg_backend_opts.layout; oneDNN's channels-last
 * kernels on the tensors as stored).
 *
 * SG_BENCH_SHAPE="n,c,h,w,k,r,stride,pad,dil[,groups]" times that one shape
 * instead (groups: a grouped / depthwise convolution).
 *
 * Prints, per shape and layout, the median ms of fwd, bwd_data, bwd_weight
 * (after one warm-up call that builds the primitives) and GFLOP/s overall.
 * `SG_BENCH_FILTER=substr` limits the shapes by name; SG_BENCH_CPUTIME=1
 * measures process CPU time instead of wall time (for busy machines, with
 * OMP_NUM_THREADS=1).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/backend.h"

static struct {
    const char *name;
    int n, c, h, w, k, r, stride, pad, dil;
} shapes[] = {
    {"stem 7x7 3->64 s2 @256", 2, 3, 256, 256, 64, 7, 2, 3, 1},
    {"l1 1x1 64->64 @64", 2, 64, 64, 64, 64, 1, 1, 0, 1},
    {"l1 3x3 64->64 @64", 2, 64, 64, 64, 64, 3, 1, 1, 1},
    {"l1 1x1 64->256 @64", 2, 64, 64, 64, 256, 1, 1, 0, 1},
    {"l1 1x1 256->64 @64", 2, 256, 64, 64, 64, 1, 1, 0, 1},
    {"l2 3x3 128->128 s2 @64", 2, 128, 64, 64, 128, 3, 2, 1, 1},
    {"l2 1x1 256->512 s2 @64", 2, 256, 64, 64, 512, 1, 2, 0, 1},
    {"l2 1x1 512->128 @32", 2, 512, 32, 32, 128, 1, 1, 0, 1},
    {"l2 3x3 128->128 @32", 2, 128, 32, 32, 128, 3, 1, 1, 1},
    {"3x3 64->64 d2 @32", 2, 64, 32, 32, 64, 3, 1, 2, 2},
    {"l3 3x3 256->256 d2 @32", 2, 256, 32, 32, 256, 3, 1, 2, 2},
    {"l3 1x1 1024->256 @32", 2, 1024, 32, 32, 256, 1, 1, 0, 1},
    {"l3 1x1 256->1024 @32", 2, 256, 32, 32, 1024, 1, 1, 0, 1},
    {"l4 3x3 512->512 d4 @32", 2, 512, 32, 32, 512, 3, 1, 4, 4},
    {"l4 1x1 2048->512 @32", 2, 2048, 32, 32, 512, 1, 1, 0, 1},
    {"aspp 3x3 2048->256 d12 @32", 2, 2048, 32, 32, 256, 3, 1, 12, 12},
    {"aspp 3x3 2048->256 d24 @32", 2, 2048, 32, 32, 256, 3, 1, 24, 24},
    {"aspp 3x3 2048->256 d36 @32", 2, 2048, 32, 32, 256, 3, 1, 36, 36},
    {"aspp proj 1x1 1280->256 @32", 2, 1280, 32, 32, 256, 1, 1, 0, 1},
    {"aux 3x3 1024->256 @32", 2, 1024, 32, 32, 256, 3, 1, 1, 1},
    {"cls 1x1 256->19 @32", 2, 256, 32, 32, 19, 1, 1, 0, 1},
    {"head 3x3 256->256 @32", 2, 256, 32, 32, 256, 3, 1, 1, 1},
};

static void fill(float *x, size_t n, uint64_t seed, float lo, float hi) {
    uint64_t st = seed * 0x9E3779B97F4A7C15ull + 1;
    for (size_t i = 0; i < n; i++) {
        st ^= st << 13, st ^= st >> 7, st ^= st << 17;
        x[i] = lo + (hi - lo) * (float)((st >> 40) * (1.0 / 16777216.0));
    }
}

/* Wall time, or with SG_BENCH_CPUTIME=1 the process CPU time: on a busy
 * shared machine a 1-thread run measured in CPU time still compares
 * algorithms fairly. */
static clockid_t bench_clock = CLOCK_MONOTONIC;

static double now_ms(void) {
    struct timespec t;
    clock_gettime(bench_clock, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Median of `iters` timed calls of op (0 fwd, 1 bwd_data, 2 bwd_weight). */
static double time_op(sg_backend *be, const sg_conv_desc *d, int op, int iters, float *x, float *w,
                      float *y) {
    double t[64];
    for (int i = 0; i <= iters; i++) {
        double t0 = now_ms();
        if (op == 0) be->ops->conv_fwd(be, d, x, w, y);
        else if (op == 1) be->ops->conv_bwd_data(be, d, y, w, x, 0);
        else be->ops->conv_bwd_weight(be, d, x, y, w, 0);
        if (i > 0) t[i - 1] = now_ms() - t0; /* call 0 builds the primitive */
    }
    qsort(t, iters, sizeof t[0], cmp_d);
    return t[iters / 2];
}

int main(int argc, char **argv) {
    int iters = argc > 1 ? atoi(argv[1]) : 3;
    if (iters < 1 || iters > 64) {
        fprintf(stderr, "bench_conv: iters must be 1..64 (got '%s')\n", argv[1]);
        return 2;
    }
    const char *deflt[] = {"plain", "blocked", "auto"};
    const char **layouts = argc > 2 ? (const char **)argv + 2 : deflt;
    int nl = argc > 2 ? argc - 2 : 3;
    const char *filter = getenv("SG_BENCH_FILTER");
    const char *cpu = getenv("SG_BENCH_CPUTIME");
    if (cpu && atoi(cpu)) bench_clock = CLOCK_PROCESS_CPUTIME_ID;
    printf("%-28s %-8s %9s %9s %9s %9s %8s\n", "shape", "layout", "fwd ms", "bwd_d ms", "bwd_w ms",
           "total ms", "GFLOP/s");
    double sum[8] = {0};
    size_t nshapes = sizeof shapes / sizeof shapes[0];
    const char *one = getenv("SG_BENCH_SHAPE");
    int groups = 0;
    if (one && *one) {
        int got = sscanf(one, "%d,%d,%d,%d,%d,%d,%d,%d,%d,%d", &shapes[0].n, &shapes[0].c,
                         &shapes[0].h, &shapes[0].w, &shapes[0].k, &shapes[0].r, &shapes[0].stride,
                         &shapes[0].pad, &shapes[0].dil, &groups);
        if (got != 9 && got != 10) {
            fprintf(
                stderr,
                "bench_conv: SG_BENCH_SHAPE='%s': expected n,c,h,w,k,r,stride,pad,dil[,groups]\n",
                one);
            return 2;
        }
        shapes[0].name = one;
        nshapes = 1;
    }
    for (size_t s = 0; s < nshapes; s++) {
        if (filter && !strstr(shapes[s].name, filter)) continue;
        sg_conv_desc d = {shapes[s].n,
                          shapes[s].c,
                          shapes[s].h,
                          shapes[s].w,
                          shapes[s].k,
                          shapes[s].r,
                          shapes[s].r,
                          shapes[s].stride,
                          shapes[s].stride,
                          shapes[s].pad,
                          shapes[s].pad,
                          shapes[s].dil,
                          shapes[s].dil,
                          0,
                          0,
                          groups};
        if (sg_conv_desc_init(&d) != 0 || sg_conv_desc_check(&d) != 0) return 1;
        double flop =
            2.0 * d.n * d.k * d.oh * d.ow * (double)(d.c / sg_conv_groups(&d)) * d.r * d.s;
        for (int l = 0; l < nl && l < 8; l++) {
            int nhwc = strncmp(layouts[l], "nhwc", 4) == 0;
            const char *lay = nhwc ? (layouts[l][4] == '-' ? layouts[l] + 5 : "auto") : layouts[l];
            int bf16 = strncmp(lay, "bf16", 4) == 0;
            const char *force = strcmp(lay, "plain") == 0     ? "force:onednn-plain"
                                : strcmp(lay, "blocked") == 0 ? "force:onednn-blocked"
                                                              : "";
            setenv("SG_CPU_CONV", force, 1);
            if (bf16)
                setenv("SG_CPU_BF16", strcmp(lay, "bf16-emu") == 0 ? "emulated" : "native", 1);
            sg_backend_opts bo = {.precision = bf16 ? SG_PRECISION_BF16 : SG_PRECISION_FP32,
                                  .layout = nhwc ? SG_LAYOUT_NHWC : SG_LAYOUT_NCHW};
            sg_backend *be = sg_backend_create("cpu", &bo);
            if (!be) return 1;
            size_t nx = (size_t)d.n * d.c * d.h * d.w, nw = sg_conv_weight_count(&d);
            size_t ny = (size_t)d.n * d.k * d.oh * d.ow;
            float *x = be->ops->alloc(be, nx * 4), *w = be->ops->alloc(be, nw * 4);
            float *y = be->ops->alloc(be, ny * 4);
            fill(x, nx, 1, -1, 1);
            fill(w, nw, 2, -0.1f, 0.1f);
            fill(y, ny, 3, -1, 1);
            double t[3];
            for (int op = 0; op < 3; op++) t[op] = time_op(be, &d, op, iters, x, w, y);
            double tot = t[0] + t[1] + t[2];
            sum[l] += tot;
            printf("%-28s %-8s %9.2f %9.2f %9.2f %9.2f %8.1f\n", shapes[s].name, layouts[l], t[0],
                   t[1], t[2], tot, 3 * flop / tot / 1e6);
            fflush(stdout);
            be->ops->free(be, x), be->ops->free(be, w), be->ops->free(be, y);
            sg_backend_destroy(be);
        }
    }
    for (int l = 0; l < nl && l < 8; l++)
        printf("sum over shapes, %-8s: %.1f ms\n", layouts[l], sum[l]);
    return 0;
}
