/* tests/kernels/test_cpu_backend.c - what only the CPU backend has, and so
 * cannot be part of the backend conformance suite (tests/backend, which
 * tests every op of every backend against the references):
 *  - the conv primitive cache (sg_cpu_conv_stats, CPU-internal): after
 *    conv_prepare the ops build no primitive, and after their first call
 *    (which grows the conversion buffers the call needs) they grow no
 *    workspace, with the measured rules and with oneDNN's plain or blocked
 *    layout forced (SG_CPU_CONV=force:onednn-plain|force:onednn-blocked);
 *  - SG_CPU_CONV: a forced row runs, a row turned off does not, and an
 *    unknown name, a fallback turned off, or a row both forced and off is a
 *    fatal error naming the choices;
 *  - its wording of the fatal error for a wrong conv output size (exit 1,
 *    naming the geometry; run in a child process);
 *  - host memory read directly: 64-byte aligned, zeroed allocations, the
 *    info it reports (name "cpu", its thread count), its capabilities;
 *  - the thread count: threads = 0 follows OMP_NUM_THREADS, else every
 *    core; an explicit count wins; a negative one is refused;
 *  - the backend's own Winograd (SG_CPU_CONV=force:wino-own, conv/wino.c)
 *    gives the same bits on 1, 2 and 3 threads, in both layouts;
 *  - its packing of float32 weights into oneDNN's blocked bf16 layouts
 *    (conv/pack.c) writes the bytes oneDNN's reorder writes, padding
 *    and rounding ties included, and declines the layouts it does not know.
 * The timing tool bench_conv lives beside it (not a test).
 */
#include <omp.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kernels/backend.h"
#include "kernels/cpu/conv/conv_internal.h"
#include "kernels/cpu/conv/conv_paths.h"
#include "kernels/cpu/cpu_internal.h"
#include "tests/testutil.h"

static sg_backend *g_be;

static sg_backend *cpu_backend(int threads) {
    sg_backend_opts o = {.threads = threads};
    sg_backend *be = sg_backend_create("cpu", &o);
    if (!be) {
        fprintf(stderr, "cannot create the CPU backend\n");
        exit(1);
    }
    return be;
}

/* count floats of backend (= host) memory, uniform in [lo, hi) */
static float *rand_mem(size_t count, uint64_t seed) {
    float *p = g_be->ops->alloc(g_be, count * sizeof(float));
    tu_fill(p, count, seed, -1, 1);
    return p;
}

/* conv_prepare builds the three primitives of a shape; afterwards the ops
 * create nothing, and from their second call on grow no workspace (the
 * steady state of training: the first call grows the conversion buffers it
 * needs, which prepare cannot know: whether x arrives as bf16 bits). */
static void test_conv_steady_state(void) {
    sg_conv_desc a = {2, 32, 9, 7, 16, 3, 3, 1, 1, 1, 1, 1, 1, 0, 0, 0};
    sg_conv_desc b = {2, 32, 9, 7, 48, 1, 1, 2, 2, 0, 0, 1, 1, 0, 0, 0};
    CHECK(sg_conv_desc_init(&a) == 0 && sg_conv_desc_init(&b) == 0);
    int e0, e1, e2;
    size_t w0, w1, w2;
    sg_cpu_conv_stats(g_be, &e0, &w0);
    g_be->ops->conv_prepare(g_be, &a);
    g_be->ops->conv_prepare(g_be, &b);
    sg_cpu_conv_stats(g_be, &e1, &w1);
    CHECK_EQ_INT(e1, e0 + 6);
    /* A sparse dilated conv (per-tap GEMMs under auto) too. */
    sg_conv_desc t = {1, 64, 9, 9, 16, 3, 3, 1, 1, 7, 7, 7, 7, 0, 0, 0};
    CHECK(sg_conv_desc_init(&t) == 0);
    g_be->ops->conv_prepare(g_be, &t);
    sg_cpu_conv_stats(g_be, &e1, &w1);
    float *x = rand_mem(2 * 64 * 9 * 9, 1), *w = rand_mem(48 * 64 * 9, 2);
    float *y = g_be->ops->alloc(g_be, 2 * 48 * 9 * 9 * sizeof(float));
    float *dx = g_be->ops->alloc(g_be, 2 * 64 * 9 * 9 * sizeof(float));
    for (int step = 0; step < 3; step++) {
        const sg_conv_desc *ds[3] = {&a, &b, &t};
        for (int i = 0; i < 3; i++) {
            g_be->ops->conv_fwd(g_be, ds[i], x, w, y);
            g_be->ops->conv_bwd_data(g_be, ds[i], y, w, dx, step > 0);
            g_be->ops->conv_bwd_weight(g_be, ds[i], x, y, w, 1);
        }
        sg_cpu_conv_stats(g_be, &e2, &w2);
        CHECK_EQ_INT(e2, e1);
        if (step == 0) w1 = w2; /* the first calls' buffers */
        CHECK_EQ_INT(w2, w1);
    }
    g_be->ops->free(g_be, x), g_be->ops->free(g_be, w);
    g_be->ops->free(g_be, y), g_be->ops->free(g_be, dx);
}

/* A wrong output size is a fatal error naming the geometry, exit status 1
 * (run in a child process, stderr captured). */
/* Runs conv_fwd on d in a child process (on a new backend with SG_CPU_CONV
 * `layout`, or NULL: the test's backend); returns its stderr (fatal error
 * expected: exit status 1). */
static void conv_fatal(sg_conv_desc d, const char *layout, char *buf, size_t cap) {
    int fds[2];
    CHECK(pipe(fds) == 0);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        dup2(fds[1], 2);
        close(fds[0]);
        sg_backend *be = g_be;
        if (layout) {
            setenv("SG_CPU_CONV", layout, 1);
            sg_backend_opts o = {.threads = 1};
            be = sg_backend_create("cpu", &o);
            if (!be) _exit(3);
        }
        float *x = be->ops->alloc(be, 4096 * 4), *w = be->ops->alloc(be, 4096 * 4);
        float *y = be->ops->alloc(be, 4096 * 4);
        be->ops->conv_fwd(be, &d, x, w, y);
        _exit(0); /* not reached */
    }
    close(fds[1]);
    memset(buf, 0, cap);
    size_t len = 0;
    ssize_t r;
    while (len < cap - 1 && (r = read(fds[0], buf + len, cap - 1 - len)) > 0) len += (size_t)r;
    close(fds[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    CHECK(WIFEXITED(status));
    CHECK_EQ_INT(WEXITSTATUS(status), 1);
}

static void test_conv_bad_desc(void) {
    char buf[4096];
    sg_conv_desc d = {1, 2, 8, 8, 3, 3, 3, 1, 1, 1, 1, 1, 1, 0, 0, 0};
    sg_conv_desc_init(&d);
    d.oh += 1;
    conv_fatal(d, NULL, buf, sizeof buf);
    CHECK_STR_CONTAINS(buf, "does not match the geometry");
    CHECK_STR_CONTAINS(buf, "expected 8x8");
    /* groups must divide both channel counts */
    sg_conv_desc g = {1, 6, 8, 8, 4, 3, 3, 1, 1, 1, 1, 1, 1, 0, 0, 3};
    CHECK(sg_conv_desc_init(&g) == 0);
    CHECK(sg_conv_desc_check(&g) != 0);
    const char *layouts[] = {NULL, "force:onednn-plain", "force:onednn-blocked"};
    for (int l = 0; l < 3; l++) {
        g.groups = 3;
        conv_fatal(g, layouts[l], buf, sizeof buf);
        CHECK_STR_CONTAINS(buf, "groups=3 must be 0, 1 or a positive divisor");
        CHECK_STR_CONTAINS(buf, "c=6 and the output channels k=4");
        g.groups = -2;
        CHECK(sg_conv_desc_check(&g) != 0);
        conv_fatal(g, layouts[l], buf, sizeof buf);
        CHECK_STR_CONTAINS(buf, "groups=-2");
    }
    g.groups = 2;
    CHECK(sg_conv_desc_check(&g) == 0);
    CHECK_EQ_INT(sg_conv_weight_count(&g), 4 * 3 * 3 * 3);
    g.groups = 0;
    CHECK(sg_conv_desc_check(&g) == 0);
    CHECK_EQ_INT(sg_conv_weight_count(&g), 4 * 6 * 3 * 3);
}

/* Host memory, read and written directly; the info and capabilities. */
static void test_memory_info(void) {
    sg_backend_info info;
    sg_backend_get_info(g_be, &info);
    size_t base = info.mem_in_use;
    CHECK(strcmp(info.name, "cpu") == 0);
    CHECK(info.device[0] != 0);
    CHECK_EQ_INT(info.threads, 2);
    CHECK(sg_backend_has(g_be, SG_CAP_HOST_MEMORY));
    CHECK(!sg_backend_has(g_be, SG_CAP_ASYNC_STREAMS));
    float *p = g_be->ops->alloc(g_be, 1000 * sizeof(float));
    CHECK_EQ_INT((uintptr_t)p % 64, 0);
    for (int i = 0; i < 1000; i++) CHECK(p[i] == 0); /* zeroed */
    sg_backend_get_info(g_be, &info);
    CHECK_EQ_INT(info.mem_in_use, base + 4000);
    g_be->ops->free(g_be, p);
    float h[4] = {1, 2, 3, 4};
    float *dv = g_be->ops->alloc(g_be, sizeof h);
    g_be->ops->upload(g_be, dv, h, sizeof h);
    g_be->ops->copy(g_be, dv + 2, dv, 2 * sizeof(float));
    CHECK(dv[0] == 1 && dv[2] == 1 && dv[3] == 2); /* read directly */
    g_be->ops->zero(g_be, dv, sizeof h);
    CHECK(dv[3] == 0);
    g_be->ops->free(g_be, dv);
}

/* threads = 0: OMP_NUM_THREADS when set, else every core; explicit counts
 * win; a negative count is refused. */
static void test_threads(void) {
    const char *saved = getenv("OMP_NUM_THREADS");
    char keep[64] = "";
    if (saved) snprintf(keep, sizeof keep, "%s", saved);
    sg_backend_info info;
    setenv("OMP_NUM_THREADS", "3", 1);
    sg_backend *b = cpu_backend(0);
    sg_backend_get_info(b, &info);
    CHECK_EQ_INT(info.threads, 3);
    sg_backend_destroy(b);
    unsetenv("OMP_NUM_THREADS");
    b = cpu_backend(0);
    sg_backend_get_info(b, &info);
    CHECK_EQ_INT(info.threads, omp_get_num_procs());
    sg_backend_destroy(b);
    b = cpu_backend(1);
    sg_backend_get_info(b, &info);
    CHECK_EQ_INT(info.threads, 1);
    sg_backend_destroy(b);
    sg_backend_opts o = {.threads = -1};
    CHECK(sg_backend_create("cpu", &o) == NULL);
    if (keep[0]) setenv("OMP_NUM_THREADS", keep, 1);
}

/* The three passes of a dilated 3x3 conv on conv/wino.c (bf16 NHWC with
 * bf16 instructions: conv/wino_cl.c), on a new backend with
 * `threads` threads, into out (y, dx, dw in a row). */
static void wino_run(int threads, int layout, int precision, const sg_conv_desc *d, float *out) {
    setenv("SG_CPU_CONV", "force:wino-cl,force:wino-own", 1);
    sg_backend_opts o = {.threads = threads, .layout = layout, .precision = precision};
    sg_backend *be = sg_backend_create("cpu", &o);
    unsetenv("SG_CPU_CONV");
    CHECK(be != NULL);
    size_t nx = (size_t)d->n * d->c * d->h * d->w, ny = (size_t)d->n * d->k * d->oh * d->ow;
    size_t nw = sg_conv_weight_count(d);
    float *x = be->ops->alloc(be, nx * 4), *w = be->ops->alloc(be, nw * 4);
    float *y = be->ops->alloc(be, ny * 4), *dx = be->ops->alloc(be, nx * 4);
    float *dw = be->ops->alloc(be, nw * 4);
    tu_fill(x, nx, 11, -1, 1);
    tu_fill(w, nw, 12, -1, 1);
    be->ops->conv_fwd(be, d, x, w, y);
    be->ops->conv_bwd_data(be, d, y, w, dx, 0);
    be->ops->conv_bwd_weight(be, d, x, y, dw, 0);
    memcpy(out, y, ny * 4);
    memcpy(out + ny, dx, nx * 4);
    memcpy(out + ny + nx, dw, nw * 4);
    be->ops->free(be, x), be->ops->free(be, w), be->ops->free(be, y);
    be->ops->free(be, dx), be->ops->free(be, dw);
    sg_backend_destroy(be);
}

static void test_wino_threads(void) {
    /* 2 x 3 phases of unequal sizes, 300 tiles: two chunks of 256 */
    sg_conv_desc d = {2, 24, 35, 58, 40, 3, 3, 1, 1, 2, 3, 2, 3, 0, 0, 0};
    CHECK(sg_conv_desc_init(&d) == 0);
    size_t total = (size_t)d.n * (d.k * d.oh * d.ow + d.c * d.h * d.w) + sg_conv_weight_count(&d);
    float *a = malloc(total * 4), *b = malloc(total * 4);
    CHECK(a && b);
    /* NCHW fp32, NHWC fp32, NHWC bf16 */
    for (int run = 0; run < 3; run++) {
        int layout = run ? SG_LAYOUT_NHWC : SG_LAYOUT_NCHW;
        int precision = run == 2 ? SG_PRECISION_BF16 : SG_PRECISION_FP32;
        wino_run(1, layout, precision, &d, a);
        for (int t = 2; t <= 3; t++) {
            wino_run(t, layout, precision, &d, b);
            CHECK(memcmp(a, b, total * 4) == 0);
        }
    }
    free(a), free(b);
}

/* cpu_conv_pack.c against oneDNN's reorder, byte for byte: both outputs
 * start as the same garbage, so the padding must be written too. */
static void pack_case(long k, long c, long r, long s, dnnl_format_tag_t tag) {
    dnnl_engine_t eng;
    dnnl_stream_t st;
    CHECK(dnnl_engine_create(&eng, dnnl_cpu, 0) == dnnl_success);
    CHECK(dnnl_stream_create(&st, eng, dnnl_stream_default_flags) == dnnl_success);
    dnnl_dims_t dims = {k, c, r, s};
    dnnl_memory_desc_t src_md, dst_md;
    CHECK(dnnl_memory_desc_init_by_tag(&src_md, 4, dims, dnnl_f32, dnnl_oihw) == dnnl_success);
    CHECK(dnnl_memory_desc_init_by_tag(&dst_md, 4, dims, dnnl_bf16, tag) == dnnl_success);
    size_t n = (size_t)k * c * r * s, bytes = dnnl_memory_desc_get_size(&dst_md);
    float *w = malloc(n * sizeof(float));
    uint8_t *ref = malloc(bytes), *got = malloc(bytes);
    tu_fill(w, n, (uint64_t)(k * 131 + c), -2.0f, 2.0f);
    /* ties of the rounding (bit 15 set, bits 0-14 clear), both parities */
    for (size_t i = 0; i < n; i += 7) {
        uint32_t u;
        memcpy(&u, &w[i], sizeof u);
        u = (u & 0xffff0000u) | 0x8000u;
        memcpy(&w[i], &u, sizeof u);
    }
    memset(ref, 0xa5, bytes);
    memset(got, 0xa5, bytes);
    dnnl_memory_t ms, md;
    CHECK(dnnl_memory_create(&ms, &src_md, eng, w) == dnnl_success);
    CHECK(dnnl_memory_create(&md, &dst_md, eng, ref) == dnnl_success);
    dnnl_primitive_desc_t pd;
    dnnl_primitive_t pr;
    CHECK(dnnl_reorder_primitive_desc_create(&pd, &src_md, eng, &dst_md, eng, NULL) ==
          dnnl_success);
    CHECK(dnnl_primitive_create(&pr, pd) == dnnl_success);
    dnnl_exec_arg_t args[2] = {{DNNL_ARG_FROM, ms}, {DNNL_ARG_TO, md}};
    CHECK(dnnl_primitive_execute(pr, st, 2, args) == dnnl_success);
    CHECK(dnnl_stream_wait(st) == dnnl_success);
    CHECK_MSG(sg_conv_pack_bf16(&dst_md, w, (uint16_t *)got) == 1, "%ldx%ldx%ldx%ld declined", k, c,
              r, s);
    CHECK_MSG(memcmp(ref, got, bytes) == 0, "%ldx%ldx%ldx%ld: bytes differ from the reorder's", k,
              c, r, s);
    dnnl_primitive_destroy(pr);
    dnnl_primitive_desc_destroy(pd);
    dnnl_memory_destroy(ms);
    dnnl_memory_destroy(md);
    dnnl_stream_destroy(st);
    dnnl_engine_destroy(eng);
    free(w);
    free(ref);
    free(got);
}

static void test_weight_pack(void) {
    omp_set_num_threads(2);
    pack_case(256, 2048, 3, 3, dnnl_AcdB64a2b); /* ASPP's rates 12 and 24 */
    pack_case(2048, 512, 1, 1, dnnl_AcdB64a2b);
    pack_case(19, 256, 1, 1, dnnl_AcdB64a2b); /* k padded to 64 */
    pack_case(33, 17, 3, 3, dnnl_AcdB32a2b);  /* k to 64, c to 18 */
    pack_case(24, 40, 3, 3, dnnl_AcdB16a2b);
    pack_case(20, 7, 1, 1, dnnl_AcdB48a2b);
    /* not these: 7x7 taps, inner blocks in another order */
    dnnl_dims_t d7 = {64, 3, 7, 7}, d3 = {32, 32, 3, 3};
    dnnl_memory_desc_t m7, mo;
    CHECK(dnnl_memory_desc_init_by_tag(&m7, 4, d7, dnnl_bf16, dnnl_AcdB64a2b) == dnnl_success);
    CHECK(dnnl_memory_desc_init_by_tag(&mo, 4, d3, dnnl_bf16, dnnl_ABcd16b16a2b) == dnnl_success);
    CHECK(!sg_conv_pack_bf16_ok(&m7));
    CHECK(!sg_conv_pack_bf16_ok(&mo));
    CHECK(sg_conv_pack_bf16(&mo, NULL, NULL) == 0);
}

/* SG_CPU_CONV: a 3x3 "same" conv 64 -> 32 on NCHW activations runs on
 * oneDNN's Winograd where it has one, else on the own Winograd; forced to
 * the per-tap GEMMs (their NHWC backward row, whose geometry it fits) it
 * runs there, with the Winograd rows turned off on oneDNN's blocked
 * layout, and forced to the plain layout there. */
static void fwd_path(const char *env, int *ran) {
    *ran = -2;
    if (env) setenv("SG_CPU_CONV", env, 1);
    sg_backend_opts o = {.threads = 1};
    sg_backend *be = sg_backend_create("cpu", &o);
    unsetenv("SG_CPU_CONV");
    CHECK(be != NULL);
    sg_conv_desc d = {2, 64, 12, 12, 32, 3, 3, 1, 1, 1, 1, 1, 1, 0, 0, 0};
    CHECK(sg_conv_desc_init(&d) == 0);
    float *x = be->ops->alloc(be, (size_t)2 * 64 * 144 * 4);
    float *w = be->ops->alloc(be, (size_t)32 * 64 * 9 * 4);
    float *y = be->ops->alloc(be, (size_t)2 * 32 * 144 * 4);
    be->ops->conv_fwd(be, &d, x, w, y);
    *ran = sg_cpu_conv_path_ran(be, SG_CPU_CONV_FWD, NULL);
    be->ops->free(be, x);
    be->ops->free(be, w);
    be->ops->free(be, y);
    sg_backend_destroy(be);
}

static void test_conv_force_off(void) {
    int wino = sg_cpu_avx512() ? sg_cpu_conv_path_find("onednn-wino")
                               : sg_cpu_conv_path_find("wino-own");
    static const char *const env[][2] = {
        {"force:taps-bwd", "taps-bwd"},
        {"off:onednn-wino,off:wino-own", "onednn-blocked"},
        {"force:onednn-plain", "onednn-plain"},
    };
    int ran;
    fwd_path(NULL, &ran);
    CHECK_EQ_INT(ran, wino);
    for (int i = 0; i < 3; i++) {
        fwd_path(env[i][0], &ran);
        CHECK_EQ_INT(ran, sg_cpu_conv_path_find(env[i][1]));
    }
}

/* A malformed SG_CPU_CONV is a fatal error naming what is wrong: the
 * backend refuses it while it is created (conv_fatal's child never reaches
 * its conv). */
static void env_refused(const char *env, const char *want) {
    char buf[2048];
    sg_conv_desc d = {1, 1, 3, 3, 1, 1, 1, 1, 1, 0, 0, 1, 1, 0, 0, 0};
    CHECK(sg_conv_desc_init(&d) == 0);
    conv_fatal(d, env, buf, sizeof buf);
    CHECK_STR_CONTAINS(buf, want);
}

static void test_conv_env_refused(void) {
    env_refused("force:nosuchpath", "is not force:NAME or off:NAME with NAME one of: onednn-wino");
    env_refused("taps", "'taps' is not force:NAME or off:NAME");
    env_refused("off:onednn-blocked", "onednn-blocked cannot be turned off");
    env_refused("force:taps,off:taps", "taps is both forced and turned off");
}

int main(void) {
    const char *layouts[3] = {"force:onednn-plain", "force:onednn-blocked", ""};
    for (int i = 0; i < 3; i++) {
        setenv("SG_CPU_CONV", layouts[i], 1);
        g_be = cpu_backend(2);
        fprintf(stderr, "-- SG_CPU_CONV='%s'\n", layouts[i]);
        TEST_RUN(test_conv_steady_state);
        sg_backend_destroy(g_be);
    }
    unsetenv("SG_CPU_CONV");
    TEST_RUN(test_conv_force_off);
    TEST_RUN(test_conv_env_refused);
    g_be = cpu_backend(2);
    TEST_RUN(test_conv_bad_desc);
    TEST_RUN(test_memory_info);
    sg_backend_destroy(g_be);
    TEST_RUN(test_threads);
    TEST_RUN(test_wino_threads);
    TEST_RUN(test_weight_pack);
    return TEST_EXIT();
}
