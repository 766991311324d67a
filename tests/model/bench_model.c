/* tests/model/bench_model.c - timing tool (not a test): one DeepLabV3
 * training step (forward, CE(out) + 0.5 CE(aux), backward) on a backend.
 *
 *   bench_model [device=cpu] [backbone=resnet50] [n=2] [h=256] [w=256]
 *               [iters=3] [warmup=1] [output_stride=8]
 *
 * Prints the median forward, backward and step times, the planned arena,
 * GFLOPs per step (3 x forward, the usual estimate) and the rate. The input is
 * a fixed pattern; weights are sg_model_init(1). No SGD update (the optimizer
 * is the trainer's).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "model/model.h"

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    const char *dev = argc > 1 ? argv[1] : "cpu";
    const char *bbs = argc > 2 ? argv[2] : "resnet50";
    int n = argc > 3 ? atoi(argv[3]) : 2, h = argc > 4 ? atoi(argv[4]) : 256;
    int w = argc > 5 ? atoi(argv[5]) : 256, iters = argc > 6 ? atoi(argv[6]) : 3;
    int warmup = argc > 7 ? atoi(argv[7]) : 1, os = argc > 8 ? atoi(argv[8]) : 8;
    if (iters < 1 || iters > 1000) iters = 3;
    sg_backbone bb;
    if (sg_backbone_parse(bbs, &bb) != 0) {
        fprintf(stderr, "bench_model: unknown backbone %s\n", bbs);
        return 2;
    }
    sg_backend *be = sg_backend_create(dev, NULL);
    if (!be) return 1;
    sg_model_opts o;
    sg_model_opts_default(&o, bb);
    o.num_classes = 19;
    o.output_stride = os;
    sg_model *m = sg_model_create(be, &o);
    if (!m) return 1;
    sg_model_init(m, 1);
    if (sg_model_plan(m, n, h, w) != 0) return 1;
    const sg_ops *ops = be->ops;
    size_t cnt = (size_t)n * 3 * h * w, hw = (size_t)h * w;
    float *x = malloc(cnt * sizeof(float));
    uint8_t *lab = malloc((size_t)n * hw);
    for (size_t i = 0; i < cnt; i++) x[i] = (float)((i * 2654435761u) % 1000) / 500.0f - 1.0f;
    for (size_t i = 0; i < (size_t)n * hw; i++) lab[i] = (uint8_t)((i / 97) % 19);
    uint8_t *dlab = ops->alloc(be, (size_t)n * hw);
    ops->upload(be, dlab, lab, (size_t)n * hw);
    double *tf = calloc((size_t)iters, sizeof(double)), *tb = calloc((size_t)iters, sizeof(double));
    for (int it = -warmup; it < iters; it++) {
        ops->upload(be, sg_model_input(m), x, cnt * sizeof(float));
        ops->sync(be);
        double t0 = now();
        sg_model_forward(m, 1, (uint64_t)it);
        double s = 0;
        int64_t v = 0;
        ops->ce_fwd_bwd(be, sg_model_out(m), dlab, n, 19, (int)hw, 255, 1.0f / (n * hw),
                        sg_model_dout(m), &s, &v);
        ops->ce_fwd_bwd(be, sg_model_aux(m), dlab, n, 19, (int)hw, 255, 0.5f / (n * hw),
                        sg_model_daux(m), &s, &v);
        ops->sync(be);
        double t1 = now();
        sg_model_backward(m, 0);
        ops->sync(be);
        double t2 = now();
        if (it >= 0) {
            tf[it] = t1 - t0;
            tb[it] = t2 - t1;
        }
    }
    double ts[1000];
    for (int i = 0; i < iters; i++) ts[i] = tf[i] + tb[i];
    qsort(tf, (size_t)iters, sizeof(double), cmp_d);
    qsort(tb, (size_t)iters, sizeof(double), cmp_d);
    qsort(ts, (size_t)iters, sizeof(double), cmp_d);
    double gflop = 3.0 * n * sg_model_flops(m, h, w) / 1e9;
    sg_backend_info info;
    sg_backend_get_info(be, &info);
    printf("bench_model %s %s OS%d %dx3x%dx%d: step %.3f s (forward+loss %.3f s, backward %.3f s), "
           "median of %d; %.1f GFLOP/step, %.1f GFLOP/s; arena %.1f MiB; backend peak %.1f MiB\n",
           info.name, bbs, os, n, h, w, ts[iters / 2], tf[iters / 2], tb[iters / 2], iters, gflop,
           gflop / ts[iters / 2], sg_model_activation_bytes(m) / 1048576.0,
           info.mem_peak / 1048576.0);
    ops->free(be, dlab);
    free(x);
    free(lab);
    free(tf);
    free(tb);
    sg_model_destroy(m);
    sg_backend_destroy(be);
    return 0;
}
