/* tests/cuda/test_cuda_plans.c - the CUDA backend's convolution plan cache
 * (kernels/conv_plans.h, cudnn.plan_cache) on a GPU: a first backend
 * searches every geometry and writes the file; a second one, as a resumed
 * or repeated run, reads it and searches none (every geometry a hit), with
 * the same results bit for bit; a corrupt file is ignored (searched again,
 * then rewritten). Exits 77 (skipped) without a CUDA device. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kernels/backend.h"
#include "testutil.h"

static char g_file[512];

static sg_conv_desc geom(int i) {
    sg_conv_desc d;
    memset(&d, 0, sizeof d);
    d.n = 2;
    d.c = 16;
    d.h = d.w = 24;
    d.k = 32;
    d.r = d.s = i == 2 ? 1 : 3;
    d.stride_h = d.stride_w = 1;
    d.pad_h = d.pad_w = i == 1 ? 2 : (i == 2 ? 0 : 1);
    d.dil_h = d.dil_w = i == 1 ? 2 : 1;
    (void)sg_conv_desc_init(&d);
    return d;
}

/* One "run": a backend on the plan file, forward, backward-data and
 * backward-filter of three geometries; the forward outputs into out. */
static int run(int precision, float *out, size_t per, sg_backend_info *info) {
    sg_backend_opts o = {.cudnn_benchmark = 1, .precision = precision, .conv_plan_file = g_file};
    sg_backend *be = sg_backend_create("cuda:0", &o);
    if (!be) return -1;
    const sg_ops *ops = be->ops;
    for (int i = 0; i < 3; i++) {
        sg_conv_desc d = geom(i);
        size_t nx = (size_t)d.n * d.c * d.h * d.w, nw = sg_conv_weight_count(&d);
        size_t ny = (size_t)d.n * d.k * d.oh * d.ow;
        float *hx = malloc(nx * 4), *hw = malloc(nw * 4);
        for (size_t j = 0; j < nx; j++) hx[j] = (float)((j * 7919) % 61) / 61.0f - 0.5f;
        for (size_t j = 0; j < nw; j++) hw[j] = (float)((j * 104729) % 53) / 53.0f - 0.5f;
        float *x = ops->alloc(be, nx * 4), *w = ops->alloc(be, nw * 4), *y = ops->alloc(be, ny * 4);
        float *dx = ops->alloc(be, nx * 4), *dw = ops->alloc(be, nw * 4);
        ops->upload(be, x, hx, nx * 4);
        ops->upload(be, w, hw, nw * 4);
        ops->conv_fwd(be, &d, x, w, y);
        ops->conv_bwd_data(be, &d, y, w, dx, 0);
        ops->conv_bwd_weight(be, &d, x, y, dw, 0);
        ops->download(be, out + (size_t)i * per, y, (ny < per ? ny : per) * 4);
        ops->free(be, x);
        ops->free(be, w);
        ops->free(be, y);
        ops->free(be, dx);
        ops->free(be, dw);
        free(hx);
        free(hw);
    }
    sg_backend_get_info(be, info);
    sg_backend_destroy(be);
    return 0;
}

static void test_second_run_hits(void) {
    for (int prec = SG_PRECISION_FP32; prec <= SG_PRECISION_BF16; prec++) {
        unlink(g_file);
        size_t per = 2 * 32 * 24 * 24;
        float *a = calloc(3 * per, 4), *b = calloc(3 * per, 4);
        sg_backend_info i1, i2, i3;
        CHECK(run(prec, a, per, &i1) == 0);
        CHECK_EQ_INT(i1.conv_plan_hits, 0);
        CHECK_EQ_INT(i1.conv_plan_misses, 3);
        CHECK(access(g_file, R_OK) == 0);
        CHECK(run(prec, b, per, &i2) == 0);
        CHECK_EQ_INT(i2.conv_plan_loaded, 3);
        CHECK_EQ_INT(i2.conv_plan_hits, 3);
        CHECK_EQ_INT(i2.conv_plan_misses, 0);
        CHECK(memcmp(a, b, 3 * per * 4) == 0); /* the same algorithms */
        /* a corrupt file: ignored (warned), searched again, rewritten */
        FILE *f = fopen(g_file, "r+b");
        CHECK(f != NULL);
        fseek(f, 200, SEEK_SET);
        fputc(0x5a, f);
        fclose(f);
        CHECK(run(prec, b, per, &i3) == 0);
        CHECK_EQ_INT(i3.conv_plan_loaded, 0);
        CHECK_EQ_INT(i3.conv_plan_misses, 3);
        CHECK(run(prec, b, per, &i3) == 0);
        CHECK_EQ_INT(i3.conv_plan_hits, 3);
        printf("precision %d: first run %ld searched; second %ld from the file, %ld searched\n",
               prec, i1.conv_plan_misses, i2.conv_plan_hits, i2.conv_plan_misses);
        free(a);
        free(b);
    }
}

int main(void) {
    if (!sg_backend_cuda_compiled() || sg_backend_cuda_device_count() < 1) {
        fprintf(stderr, "no CUDA device: skipped\n");
        return TEST_SKIP;
    }
    const char *tmp = getenv("TMPDIR");
    snprintf(g_file, sizeof g_file, "%s/sg_cuda_plans_%ld.bin", tmp && *tmp ? tmp : "/tmp",
             (long)getpid());
    TEST_RUN(test_second_run_hits);
    unlink(g_file);
    return TEST_EXIT();
}
