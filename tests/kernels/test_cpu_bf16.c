/* tests/kernels/test_cpu_bf16.c - the CPU backend's bf16 convolutions
 * (train.precision bf16) beyond what the conformance suite checks per op
 * (tests/backend: every conv case in bf16 against the float32 and the
 * bf16-exact references, native and emulated):
 *  - rounding: kernels/formulas/bf16.h (the formula both backends convert
 *    with) against the independent reference ref_bf16_round, on every bf16
 *    value's neighbourhood (each high half with low halves 0, 1, 0x7fff,
 *    0x8000, 0x8001, 0xffff and a random one: ties, both sides of them,
 *    subnormals, the overflow to infinity, NaN payloads) and on hand cases;
 *  - path choice: SG_CPU_BF16=emulated gives the emulation, an unknown value
 *    is refused (NULL, naming it), native is refused where oneDNN's ISA has
 *    no bf16 instructions (and taken where it has them); get_info reports
 *    the precision and the path;
 *  - native against emulated, where this processor has bf16 instructions:
 *    forward, backward-data and backward-weights on ResNet/ASPP-like shapes
 *    (blocked and plain layouts, trimmed dead taps, the per-tap GEMM shape,
 *    accumulate) agree within two bf16 rounding steps element by element;
 *    skipped with a message (not failed) on processors without them;
 *  - steady state: after conv_prepare the bf16 ops (either path) build no
 *    primitive and grow no buffer.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/backend.h"
#include "kernels/cpu/cpu_internal.h"
#include "kernels/formulas/bf16.h"
#include "tests/kernels/ref_ops.h"
#include "tests/testutil.h"

static sg_backend *make(const char *bf16_env, int precision) {
    if (bf16_env) setenv("SG_CPU_BF16", bf16_env, 1);
    else unsetenv("SG_CPU_BF16");
    sg_backend_opts o = {.threads = 2, .precision = precision};
    sg_backend *be = sg_backend_create("cpu", &o);
    unsetenv("SG_CPU_BF16");
    return be;
}

static int has_native(void) {
    sg_backend *be = make("auto", SG_PRECISION_BF16);
    if (!be) return 0;
    sg_backend_info bi;
    sg_backend_get_info(be, &bi);
    int native = strstr(bi.conv_math, "native") != NULL;
    sg_backend_destroy(be);
    return native;
}

/* ---------------- rounding ---------------- */

static int same_bits_or_nan(float a, float b) {
    if (isnan(a) || isnan(b)) return isnan(a) && isnan(b);
    return memcmp(&a, &b, sizeof a) == 0;
}

static void test_rounding_hand(void) {
    struct {
        float x, want;
    } c[] = {
        {1.0f, 1.0f},
        {1.0f + 0x1p-8f, 1.0f},                      /* half an ulp: tie to even (down) */
        {1.0f + 3 * 0x1p-8f, 1.0f + 0x1p-6f},        /* tie from an odd neighbour: up */
        {1.0f + 0x1p-8f + 0x1p-23f, 1.0f + 0x1p-7f}, /* just above the tie: up */
        {-(1.0f + 0x1p-8f), -1.0f},
        {3.14159265f, 3.140625f},
        {0.0f, 0.0f},
        {-0.0f, -0.0f},
        {INFINITY, INFINITY},
        {-INFINITY, -INFINITY},
        {0x1.fffffep127f, INFINITY}, /* FLT_MAX rounds past bf16's max */
        {0x1.fep127f, 0x1.fep127f},  /* bf16's max is kept */
        {0x1p-130f, 0x1p-130f},      /* a subnormal on the 2^-133 grid */
        {0x1p-140f, 0.0f},           /* below half its step: zero */
        {0x1.01p-130f, 0x1p-130f},
    };
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
        float got = sg_bf16_round(c[i].x), ref = ref_bf16_round(c[i].x);
        CHECK_MSG(same_bits_or_nan(got, c[i].want), "sg_bf16_round(%a) = %a, want %a", c[i].x, got,
                  c[i].want);
        CHECK_MSG(same_bits_or_nan(ref, c[i].want), "ref_bf16_round(%a) = %a, want %a", c[i].x, ref,
                  c[i].want);
    }
    float nan = sg_f32_from_bits(0x7f800001u); /* a NaN the add would carry into inf */
    CHECK(isnan(sg_bf16_round(nan)));
    CHECK(isnan(sg_bf16_round(-nan)));
    CHECK(sg_bf16_to_f32(sg_bf16_bits(1.5f)) == 1.5f);
}

static void test_rounding_sweep(void) {
    const uint32_t lows[] = {0, 1, 0x7fff, 0x8000, 0x8001, 0xffff, 0};
    uint64_t s = 12345;
    size_t checked = 0;
    for (uint32_t hi = 0; hi < 65536; hi++)
        for (size_t k = 0; k < sizeof lows / sizeof lows[0]; k++) {
            uint32_t lo = lows[k];
            if (k == sizeof lows / sizeof lows[0] - 1) {
                s ^= s << 13, s ^= s >> 7, s ^= s << 17;
                lo = (uint32_t)(s & 0xffff);
            }
            float x = sg_f32_from_bits(hi << 16 | lo);
            float got = sg_bf16_round(x), ref = ref_bf16_round(x);
            CHECK_MSG(same_bits_or_nan(got, ref), "bits %08x: formula %a, reference %a",
                      hi << 16 | lo, got, ref);
            /* the result is a bf16 value: its low half is zero */
            if (!isnan(got)) CHECK((sg_f32_bits(got) & 0xffffu) == 0);
            checked++;
        }
    fprintf(stderr, "  %zu float bit patterns rounded identically\n", checked);
}

/* ---------------- path choice ---------------- */

static void test_path_choice(void) {
    sg_backend *be = make("emulated", SG_PRECISION_BF16);
    CHECK(be != NULL);
    sg_backend_info bi;
    sg_backend_get_info(be, &bi);
    CHECK_STR_CONTAINS(bi.precision, "bf16");
    CHECK_STR_CONTAINS(bi.conv_math, "emulated");
    sg_backend_destroy(be);

    CHECK(make("fast", SG_PRECISION_BF16) == NULL); /* logged: expected auto, native or emulated */

    be = make(NULL, SG_PRECISION_FP32);
    CHECK(be != NULL);
    sg_backend_get_info(be, &bi);
    CHECK_STR_CONTAINS(bi.precision, "fp32");
    CHECK_STR_CONTAINS(bi.conv_math, "fp32");
    sg_backend_destroy(be);

    be = make("native", SG_PRECISION_BF16);
    if (has_native()) {
        CHECK(be != NULL);
        sg_backend_get_info(be, &bi);
        CHECK_STR_CONTAINS(bi.conv_math, "native");
        sg_backend_destroy(be);
    } else {
        CHECK(be == NULL); /* refused, naming the ISA (logged) */
    }
    sg_backend_opts bad = {.threads = 1, .precision = 7};
    CHECK(sg_backend_create("cpu", &bad) == NULL);
}

/* ---------------- native against emulated ---------------- */

typedef struct shape {
    sg_conv_desc d;
    const char *what;
} shape;

static const shape shapes[] = {
    {{2, 64, 16, 16, 64, 3, 3, 1, 1, 1, 1, 1, 1, 0, 0, 0}, "3x3 (blocked)"},
    {{2, 64, 16, 16, 128, 3, 3, 2, 2, 1, 1, 1, 1, 0, 0, 0}, "3x3 stride 2"},
    {{2, 256, 8, 8, 64, 1, 1, 1, 1, 0, 0, 1, 1, 0, 0, 0}, "1x1 (plain)"},
    {{2, 3, 32, 32, 16, 7, 7, 2, 2, 3, 3, 1, 1, 0, 0, 0}, "the stem"},
    {{2, 32, 12, 12, 32, 3, 3, 1, 1, 2, 2, 2, 2, 0, 0, 0}, "dilation 2"},
    {{2, 128, 8, 8, 32, 3, 3, 1, 1, 6, 6, 6, 6, 0, 0, 0}, "sparse dilation 6 (per-tap GEMMs)"},
    {{2, 32, 8, 8, 16, 3, 3, 1, 1, 12, 12, 12, 12, 0, 0, 0}, "dilation 12 > size: trimmed"},
    {{2, 16, 9, 7, 8, 3, 3, 1, 1, 1, 1, 1, 1, 0, 0, 0}, "few channels"},
};

/* out of backend memory into a fresh host copy */
static float *dup(const float *p, size_t n) {
    float *q = malloc(n * sizeof *q);
    memcpy(q, p, n * sizeof *q);
    return q;
}

/* Runs op (0 fwd, 1 bwd_data, 2 bwd_weight) on be; returns the output. */
static float *run_op(sg_backend *be, const sg_conv_desc *d, int op, const float *a, const float *b,
                     const float *out0, size_t na, size_t nb, size_t nout, int acc) {
    const sg_ops *o = be->ops;
    float *da = o->alloc(be, na * 4), *db = o->alloc(be, nb * 4), *dout = o->alloc(be, nout * 4);
    memcpy(da, a, na * 4), memcpy(db, b, nb * 4), memcpy(dout, out0, nout * 4);
    if (op == 0) o->conv_fwd(be, d, da, db, dout);
    else if (op == 1) o->conv_bwd_data(be, d, da, db, dout, acc);
    else o->conv_bwd_weight(be, d, da, db, dout, acc);
    float *r = dup(dout, nout);
    o->free(be, da), o->free(be, db), o->free(be, dout);
    return r;
}

/* max over i of |a - b| / (2 bf16 steps of the larger result + 1e-5 max|b|) */
static double steps_apart(const float *a, const float *b, const float *base, size_t n) {
    double amax = 0, worst = 0;
    for (size_t i = 0; i < n; i++) amax = fmax(amax, fabs(b[i]));
    for (size_t i = 0; i < n; i++) {
        double z = base ? base[i] : 0;
        double m = fmax(fabs(a[i] - z), fabs(b[i] - z));
        double q = fabs((double)a[i] - b[i]) / (2 * ref_bf16_ulp(m) + 1e-5 * amax);
        if (!(q <= worst)) worst = isnan(q) ? INFINITY : q;
    }
    return worst;
}

static void test_native_vs_emulated(void) {
    if (!has_native()) {
        fprintf(stderr, "  skipped: oneDNN's ISA on this processor has no bf16 instructions "
                        "(the conformance suite tests the emulation)\n");
        return;
    }
    sg_backend *nat = make("native", SG_PRECISION_BF16), *emu = make("emulated", SG_PRECISION_BF16);
    CHECK(nat && emu);
    static const char *names[] = {"fwd", "bwd_data", "bwd_weight"};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        sg_conv_desc d = shapes[s].d;
        CHECK(sg_conv_desc_init(&d) == 0);
        size_t nx = (size_t)d.n * d.c * d.h * d.w, nw = (size_t)d.k * d.c * d.r * d.s;
        size_t ny = (size_t)d.n * d.k * d.oh * d.ow;
        float *x = malloc(nx * 4), *w = malloc(nw * 4), *y = malloc(ny * 4);
        float *gx = malloc(nx * 4), *gw = malloc(nw * 4);
        tu_fill(x, nx, 10 + s, -1, 1), tu_fill(w, nw, 20 + s, -0.2f, 0.2f);
        tu_fill(y, ny, 30 + s, -1, 1), tu_fill(gx, nx, 40 + s, -1, 1);
        tu_fill(gw, nw, 50 + s, -1, 1);
        for (int op = 0; op < 3; op++)
            for (int acc = 0; acc < (op ? 2 : 1); acc++) {
                const float *a = op == 1 ? y : x, *b = op == 2 ? y : w;
                const float *out0 = op == 0 ? y : op == 1 ? gx : gw;
                size_t na = op == 1 ? ny : nx, nb = op == 2 ? ny : nw;
                size_t nout = op == 0 ? ny : op == 1 ? nx : nw;
                float *rn = run_op(nat, &d, op, a, b, out0, na, nb, nout, acc);
                float *re = run_op(emu, &d, op, a, b, out0, na, nb, nout, acc);
                double q = steps_apart(rn, re, acc ? out0 : NULL, nout);
                free(rn), free(re);
                CHECK_MSG(q <= 1.0,
                          "%s%s on %s: native and emulated differ by %.2f x (2 bf16 "
                          "steps + 1e-5 max)",
                          names[op], acc ? " accumulate" : "", shapes[s].what, q);
            }
        free(x), free(w), free(y), free(gx), free(gw);
    }
    sg_backend_destroy(nat);
    sg_backend_destroy(emu);
}

/* ---------------- steady state ---------------- */

static void steady(const char *env) {
    sg_backend *be = make(env, SG_PRECISION_BF16);
    CHECK(be != NULL);
    int e0, e1;
    size_t w0, w1;
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        sg_conv_desc d = shapes[s].d;
        CHECK(sg_conv_desc_init(&d) == 0);
        be->ops->conv_prepare(be, &d);
    }
    sg_cpu_conv_stats(be, &e0, &w0);
    /* the first round may grow the conversion buffers its calls need (prepare
     * does not know whether x will come as bf16 bits); the second grows
     * nothing */
    for (int round = 0; round < 2; round++) {
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
            sg_conv_desc d = shapes[s].d;
            CHECK(sg_conv_desc_init(&d) == 0);
            size_t nx = (size_t)d.n * d.c * d.h * d.w, nw = (size_t)d.k * d.c * d.r * d.s;
            size_t ny = (size_t)d.n * d.k * d.oh * d.ow;
            float *x = be->ops->alloc(be, nx * 4), *w = be->ops->alloc(be, nw * 4);
            float *y = be->ops->alloc(be, ny * 4);
            be->ops->conv_fwd(be, &d, x, w, y);
            be->ops->conv_bwd_data(be, &d, y, w, x, 1);
            be->ops->conv_bwd_weight(be, &d, x, y, w, 1);
            be->ops->free(be, x), be->ops->free(be, w), be->ops->free(be, y);
        }
        sg_cpu_conv_stats(be, &e1, &w1);
        CHECK_MSG(e1 == e0 && (round == 0 || w1 == w0),
                  "%s: %d -> %d entries, %zu -> %zu workspace bytes in round %d after "
                  "conv_prepare",
                  env, e0, e1, w0, w1, round);
        w0 = w1;
    }
    sg_backend_destroy(be);
}

static void test_steady_state_emulated(void) { steady("emulated"); }

static void test_steady_state_native(void) {
    if (!has_native()) {
        fprintf(stderr, "  skipped: no bf16 instructions here\n");
        return;
    }
    steady("native");
}

int main(void) {
    TEST_RUN(test_rounding_hand);
    TEST_RUN(test_rounding_sweep);
    TEST_RUN(test_path_choice);
    TEST_RUN(test_native_vs_emulated);
    TEST_RUN(test_steady_state_emulated);
    TEST_RUN(test_steady_state_native);
    return TEST_EXIT();
}
