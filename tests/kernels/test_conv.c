/* tests/kernels/test_conv.c - CPU convolutions (oneDNN) against the naive
 * reference: forward, backward-data and backward-weights with accumulate
 * 0/1, on odd sizes, stride 2, dilation 2/12/36, 1x1 and 7x7, batch 1/2/3,
 * dead-tap trimming (dilation >= map size), in each conv layout (plain
 * nchw, blocked, auto), plus bias. Tolerance:
 * relative error (max abs diff / max abs value) <= 1e-4 (float sums of up
 * to a few hundred products vs double).
 */
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kernels/cpu/cpu_internal.h"
#include "tests/kernels/ref_ops.h"
#include "tests/kernels/test_common.h"

static const struct {
    int n, c, h, w, k, r, s, stride, pad, dil;
} shapes[] = {
    {1, 3, 7, 9, 5, 3, 3, 1, 1, 1},      /* odd sizes */
    {3, 4, 9, 8, 6, 3, 3, 2, 1, 1},      /* stride 2, batch 3 */
    {2, 5, 11, 10, 4, 1, 1, 2, 0, 1},    /* 1x1 stride 2 (downsample) */
    {1, 3, 13, 12, 4, 3, 3, 1, 2, 2},    /* dilation 2 */
    {1, 2, 30, 27, 3, 3, 3, 1, 12, 12},  /* dilation 12 (ASPP) */
    {1, 2, 40, 38, 2, 3, 3, 1, 36, 36},  /* dilation 36: taps mostly in padding */
    {2, 3, 20, 17, 4, 3, 3, 1, 24, 24},  /* dilation > size: outer taps dead, trimmed */
    {1, 3, 30, 10, 5, 3, 3, 1, 12, 12},  /* trimmed along the width only */
    {2, 16, 8, 8, 16, 3, 3, 1, 36, 36},  /* trimmed, blocked layout (ASPP at OS 8) */
    {2, 64, 13, 11, 24, 3, 3, 1, 6, 6},  /* sparse: per-tap GEMMs under auto */
    {1, 80, 9, 9, 16, 3, 3, 1, 7, 7},    /* sparse, square, accumulate paths */
    {2, 64, 7, 12, 16, 3, 3, 1, 5, 5},   /* sparse, h != w: partial rows and columns */
    {2, 3, 15, 15, 8, 7, 7, 2, 3, 1},    /* the stem: 7x7 stride 2 */
    {2, 32, 9, 7, 16, 3, 3, 1, 2, 2},    /* wide enough for the blocked layout */
    {1, 32, 8, 8, 48, 1, 1, 1, 0, 1},    /* 1x1 blocked */
    {3, 16, 10, 11, 32, 3, 3, 2, 1, 1},  /* 3x3 stride 2 blocked, odd */
};

static void conv_case(int i) {
    sg_conv_desc d = {0};
    d.n = shapes[i].n, d.c = shapes[i].c, d.h = shapes[i].h, d.w = shapes[i].w;
    d.k = shapes[i].k, d.r = shapes[i].r, d.s = shapes[i].s;
    d.stride_h = d.stride_w = shapes[i].stride;
    d.pad_h = d.pad_w = shapes[i].pad;
    d.dil_h = d.dil_w = shapes[i].dil;
    CHECK(sg_conv_desc_init(&d) == 0);
    size_t nx = (size_t)d.n * d.c * d.h * d.w, nw = (size_t)d.k * d.c * d.r * d.s;
    size_t ny = (size_t)d.n * d.k * d.oh * d.ow;
    float *x = tc_rand(nx, 1 + i, -1, 1), *w = tc_rand(nw, 2 + i, -1, 1);
    float *dy = tc_rand(ny, 3 + i, -1, 1);
    float *y = tc_zeros(ny), *yr = tc_zeros(ny);
    float *dx = tc_rand(nx, 4 + i, -1, 1), *dxr = tc_clone(dx, nx);
    float *dw = tc_rand(nw, 5 + i, -1, 1), *dwr = tc_clone(dw, nw);
    const sg_ops *o = tc_be->ops;
    if (i % 2) o->conv_prepare(tc_be, &d); /* both paths: prepared and first use */

    o->conv_fwd(tc_be, &d, x, w, y);
    ref_conv_fwd(&d, x, w, yr);
    CHECK_CLOSE(yr, y, ny, 1e-4);
    for (int acc = 0; acc <= 1; acc++) {
        /* accumulate: dx starts random, so acc=1 must keep it. */
        o->conv_bwd_data(tc_be, &d, dy, w, dx, acc);
        ref_conv_bwd_data(&d, dy, w, dxr, acc);
        CHECK_CLOSE(dxr, dx, nx, 1e-4);
        o->conv_bwd_weight(tc_be, &d, x, dy, dw, acc);
        ref_conv_bwd_weight(&d, x, dy, dwr, acc);
        CHECK_CLOSE(dwr, dw, nw, 1e-4);
    }
    /* Second call with the same shape reuses the cached primitive. */
    memset(y, 0, ny * sizeof(float));
    o->conv_fwd(tc_be, &d, x, w, y);
    CHECK_CLOSE(yr, y, ny, 1e-4);
    tc_free(x), tc_free(w), tc_free(dy), tc_free(y), tc_free(yr);
    tc_free(dx), tc_free(dxr), tc_free(dw), tc_free(dwr);
}

static void test_conv_all_shapes(void) {
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        int before = tu_case_failed;
        conv_case((int)i);
        if (tu_case_failed && !before) {
            fprintf(stderr, "  (shape %zu)\n", i);
            return;
        }
    }
}

/* Random geometries (fixed seed): non-square kernels, different strides,
 * paddings and dilations per axis, channel counts on both sides of the
 * blocked-layout threshold. */
static void test_conv_random(void) {
    uint64_t st = 12345;
    int done = 0;
    while (done < 16) {
        int v[14];
        for (int i = 0; i < 14; i++) {
            st = st * 6364136223846793005ull + 1442695040888963407ull;
            v[i] = (int)(st >> 33);
        }
        sg_conv_desc d = {0};
        d.n = 1 + v[0] % 3, d.c = 1 + v[1] % 40, d.h = 1 + v[2] % 19, d.w = 1 + v[3] % 19;
        d.k = 1 + v[4] % 40, d.r = 1 + 2 * (v[5] % 3), d.s = 1 + 2 * (v[6] % 3);
        d.stride_h = 1 + v[7] % 2, d.stride_w = 1 + v[8] % 2;
        d.pad_h = v[9] % 4, d.pad_w = v[10] % 4;
        d.dil_h = 1 + v[11] % 3, d.dil_w = 1 + v[12] % 3;
        if (sg_conv_desc_init(&d) != 0) continue;
        size_t nx = (size_t)d.n * d.c * d.h * d.w, nw = (size_t)d.k * d.c * d.r * d.s;
        size_t ny = (size_t)d.n * d.k * d.oh * d.ow;
        float *x = tc_rand(nx, 300 + done, -1, 1), *w = tc_rand(nw, 400 + done, -1, 1);
        float *dy = tc_rand(ny, 500 + done, -1, 1), *y = tc_zeros(ny), *yr = tc_zeros(ny);
        float *dx = tc_rand(nx, 600, -1, 1), *dxr = tc_clone(dx, nx);
        float *dw = tc_rand(nw, 700, -1, 1), *dwr = tc_clone(dw, nw);
        int acc = v[13] % 2;
        tc_be->ops->conv_fwd(tc_be, &d, x, w, y);
        ref_conv_fwd(&d, x, w, yr);
        tc_be->ops->conv_bwd_data(tc_be, &d, dy, w, dx, acc);
        ref_conv_bwd_data(&d, dy, w, dxr, acc);
        tc_be->ops->conv_bwd_weight(tc_be, &d, x, dy, dw, acc);
        ref_conv_bwd_weight(&d, x, dy, dwr, acc);
        double ey = tu_max_rel_err(yr, y, ny, 1e-3), ex = tu_max_rel_err(dxr, dx, nx, 1e-3);
        double ew = tu_max_rel_err(dwr, dw, nw, 1e-3);
        CHECK_MSG(ey <= 1e-4 && ex <= 1e-4 && ew <= 1e-4,
                  "n%d c%d %dx%d k%d %dx%d stride %d,%d pad %d,%d dil %d,%d acc %d: "
                  "rel err y %.3g dx %.3g dw %.3g",
                  d.n, d.c, d.h, d.w, d.k, d.r, d.s, d.stride_h, d.stride_w, d.pad_h, d.pad_w,
                  d.dil_h, d.dil_w, acc, ey, ex, ew);
        tc_free(x), tc_free(w), tc_free(dy), tc_free(y), tc_free(yr);
        tc_free(dx), tc_free(dxr), tc_free(dw), tc_free(dwr);
        done++;
    }
}

/* conv_prepare builds the three primitives of a shape; afterwards the ops
 * create nothing and grow no workspace (the steady state of training). */
static void test_conv_steady_state(void) {
    sg_conv_desc a = {2, 32, 9, 7, 16, 3, 3, 1, 1, 1, 1, 1, 1, 0, 0};
    sg_conv_desc b = {2, 32, 9, 7, 48, 1, 1, 2, 2, 0, 0, 1, 1, 0, 0};
    CHECK(sg_conv_desc_init(&a) == 0 && sg_conv_desc_init(&b) == 0);
    int e0, e1, e2;
    size_t w0, w1, w2;
    sg_cpu_conv_stats(tc_be, &e0, &w0);
    tc_be->ops->conv_prepare(tc_be, &a);
    tc_be->ops->conv_prepare(tc_be, &b);
    sg_cpu_conv_stats(tc_be, &e1, &w1);
    CHECK_EQ_INT(e1, e0 + 6);
    /* A sparse dilated conv (per-tap GEMMs under auto) too. */
    sg_conv_desc t = {1, 64, 9, 9, 16, 3, 3, 1, 1, 7, 7, 7, 7, 0, 0};
    CHECK(sg_conv_desc_init(&t) == 0);
    tc_be->ops->conv_prepare(tc_be, &t);
    sg_cpu_conv_stats(tc_be, &e1, &w1);
    float *x = tc_rand(2 * 64 * 9 * 9, 1, -1, 1), *w = tc_rand(48 * 64 * 9, 2, -1, 1);
    float *y = tc_zeros(2 * 48 * 9 * 9), *dx = tc_zeros(2 * 64 * 9 * 9);
    for (int step = 0; step < 3; step++) {
        const sg_conv_desc *ds[3] = {&a, &b, &t};
        for (int i = 0; i < 3; i++) {
            tc_be->ops->conv_fwd(tc_be, ds[i], x, w, y);
            tc_be->ops->conv_bwd_data(tc_be, ds[i], y, w, dx, step > 0);
            tc_be->ops->conv_bwd_weight(tc_be, ds[i], x, y, w, 1);
        }
    }
    sg_cpu_conv_stats(tc_be, &e2, &w2);
    CHECK_EQ_INT(e2, e1);
    CHECK_EQ_INT(w2, w1);
    tc_free(x), tc_free(w), tc_free(y), tc_free(dx);
}

/* A hand-checkable case: 1x1 image 3x3, kernel of ones, pad 1 -> each
 * output is the sum of its in-image 3x3 neighbourhood. */
static void test_conv_hand(void) {
    sg_conv_desc d = {1, 1, 3, 3, 1, 3, 3, 1, 1, 1, 1, 1, 1, 0, 0};
    CHECK(sg_conv_desc_init(&d) == 0);
    CHECK_EQ_INT(d.oh, 3);
    float *x = tc_zeros(9), *w = tc_zeros(9), *y = tc_zeros(9);
    for (int i = 0; i < 9; i++) x[i] = (float)(i + 1), w[i] = 1;
    tc_be->ops->conv_fwd(tc_be, &d, x, w, y);
    const float want[9] = {12, 21, 16, 27, 45, 33, 24, 39, 28};
    for (int i = 0; i < 9; i++) CHECK_NEAR(y[i], want[i], 1e-5);
    tc_free(x), tc_free(w), tc_free(y);
}

static void test_bias(void) {
    int n = 3, c = 5, hw = 7;
    size_t cnt = (size_t)n * c * hw;
    float *y = tc_rand(cnt, 11, -1, 1), *yr = tc_clone(y, cnt), *b = tc_rand(c, 12, -1, 1);
    tc_be->ops->bias_fwd(tc_be, y, b, n, c, hw);
    ref_bias_fwd(yr, b, n, c, hw);
    CHECK_CLOSE(yr, y, cnt, 1e-6);
    float *db = tc_rand(c, 13, -1, 1), *dbr = tc_clone(db, c);
    for (int acc = 0; acc <= 1; acc++) {
        tc_be->ops->bias_bwd(tc_be, y, db, n, c, hw, acc);
        ref_bias_bwd(y, dbr, n, c, hw, acc);
        CHECK_CLOSE(dbr, db, c, 1e-5);
    }
    tc_free(y), tc_free(yr), tc_free(b), tc_free(db), tc_free(dbr);
}

/* A wrong output size is a fatal error naming the geometry, exit status 1
 * (run in a child process, stderr captured). */
static void test_conv_bad_desc(void) {
    int fds[2];
    CHECK(pipe(fds) == 0);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        dup2(fds[1], 2);
        close(fds[0]);
        sg_conv_desc d = {1, 2, 8, 8, 3, 3, 3, 1, 1, 1, 1, 1, 1, 0, 0};
        sg_conv_desc_init(&d);
        d.oh += 1;
        float *x = tc_zeros(128), *w = tc_zeros(54), *y = tc_zeros(256);
        tc_be->ops->conv_fwd(tc_be, &d, x, w, y);
        _exit(0); /* not reached */
    }
    close(fds[1]);
    char buf[4096] = {0};
    size_t len = 0;
    ssize_t r;
    while (len < sizeof buf - 1 && (r = read(fds[0], buf + len, sizeof buf - 1 - len)) > 0)
        len += (size_t)r;
    close(fds[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    CHECK(WIFEXITED(status));
    CHECK_EQ_INT(WEXITSTATUS(status), 1);
    CHECK_STR_CONTAINS(buf, "does not match the geometry");
    CHECK_STR_CONTAINS(buf, "expected 8x8");
}

static void run_layout(const char *layout) {
    setenv("SG_CPU_CONV_LAYOUT", layout, 1);
    tc_be = tc_backend(2);
    fprintf(stderr, "-- conv layout %s\n", layout);
    TEST_RUN(test_conv_all_shapes);
    TEST_RUN(test_conv_random);
    TEST_RUN(test_conv_steady_state);
    TEST_RUN(test_conv_hand);
    sg_backend_destroy(tc_be);
}

int main(void) {
    run_layout("plain");
    run_layout("blocked");
    run_layout("auto");
    tc_be = tc_backend(0);
    TEST_RUN(test_bias);
    TEST_RUN(test_conv_bad_desc);
    sg_backend_destroy(tc_be);
    return TEST_EXIT();
}
