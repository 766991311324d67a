/* tests/model/test_bn_fuse.c - batch norm fused with the residual join, in
 * a training step of tiny DeepLabV3 ResNet-50 and ResNet-18 networks (one
 * block per stage: four joins each).
 *
 * The op table is wrapped: every call of the batch-norm, add and ReLU ops
 * counts its calls and its memory passes (element reads and writes per
 * call, as backend.h states each op's traffic: bn_stats reads x once,
 * bn_fwd reads x and writes y, add reads two and writes one, ...). One
 * step runs fused (the default) and one unfused (the test seam
 * SG_BN_FUSE=0, core/test_seams.h: skipped, 77, in a build without test
 * seams; a fresh model with the same weights and input). Checked:
 *  - fused, no residual add and no relu_bwd runs at all: each join runs
 *    bn_add_relu_fwd once (forward) and bn_bwd_reduce_res once (backward),
 *    where the unfused step ran bn_fwd + add and relu_bwd twice;
 *  - the passes per element of a join's BN: fused, forward 3 reads + 1
 *    write (stats 1, apply + add 2 + 1), backward 5 reads + 2 writes
 *    (reduce 3 + 1 for the identity's gradient, elementwise 2 + 1); the
 *    unfused chain's 4 + 2 and 8 + 3: the step's totals differ by exactly
 *    these, so a pass added back fails;
 *  - the logits, the running statistics and the logits of an eval forward
 *    in an inference plan are the unfused step's bits (the same
 *    per-element arithmetic), the gradients within 1e-5 of each
 *    tensor's max (the backward reduce groups its sums differently on the
 *    CPU).
 */
#include <math.h>

#include "tests/model/model_testutil.h"
#include "tests/testutil.h"

enum { C_STATS, C_FWD, C_ADD, C_RELU_BWD, C_REDUCE, C_ELEM, C_ADD_RELU_FWD, C_REDUCE_RES, C_N };
static const char *cname[C_N] = {"bn_stats",      "bn_fwd",      "add",         "relu_bwd",
                                 "bn_bwd_reduce", "bn_bwd_elem", "bn_add_relu", "bn_reduce_res"};

typedef struct counts {
    long calls[C_N];
    double reads, writes; /* elements */
    double join_elems;    /* elements of the joins' BNs (bn_add_relu_fwd calls) */
} counts;

static counts cnt;
static const sg_ops *real;
static sg_ops wrapped;

static void add_pass(int op, double elems, int reads, int writes) {
    cnt.calls[op]++;
    cnt.reads += elems * reads;
    cnt.writes += elems * writes;
}

static double ne(int n, int c, int hw) { return (double)n * c * hw; }

static void w_bn_stats(sg_backend *be, const float *x, int n, int c, int hw, float *stats) {
    add_pass(C_STATS, ne(n, c, hw), 1, 0);
    real->bn_stats(be, x, n, c, hw, stats);
}
static void w_bn_stats_dt(sg_backend *be, const void *x, int x_dt, int n, int c, int hw,
                          float *stats) {
    add_pass(C_STATS, ne(n, c, hw), 1, 0);
    real->bn_stats_dt(be, x, x_dt, n, c, hw, stats);
}
static void w_bn_fwd(sg_backend *be, const float *x, const float *mean, const float *invstd,
                     const float *gamma, const float *beta, float *y, int n, int c, int hw,
                     int relu) {
    add_pass(C_FWD, ne(n, c, hw), 1, 1);
    real->bn_fwd(be, x, mean, invstd, gamma, beta, y, n, c, hw, relu);
}
static void w_bn_fwd_dt(sg_backend *be, const void *x, int x_dt, const float *mean,
                        const float *invstd, const float *gamma, const float *beta, void *y,
                        int y_dt, int n, int c, int hw, int relu) {
    add_pass(C_FWD, ne(n, c, hw), 1, 1);
    real->bn_fwd_dt(be, x, x_dt, mean, invstd, gamma, beta, y, y_dt, n, c, hw, relu);
}
static void w_add(sg_backend *be, const float *a, const float *b, float *y, size_t count,
                  int relu) {
    add_pass(C_ADD, (double)count, 2, 1);
    real->add(be, a, b, y, count, relu);
}
static void w_relu_bwd(sg_backend *be, const float *dy, const float *y, float *dx, size_t count,
                       int accumulate) {
    add_pass(C_RELU_BWD, (double)count, 2 + accumulate, 1);
    real->relu_bwd(be, dy, y, dx, count, accumulate);
}
static void w_reduce(sg_backend *be, const float *dy, const float *x, const float *y,
                     const float *mean, float *red, int n, int c, int hw, int relu) {
    add_pass(C_REDUCE, ne(n, c, hw), 2 + relu, 0);
    real->bn_bwd_reduce(be, dy, x, y, mean, red, n, c, hw, relu);
}
static void w_reduce_dt(sg_backend *be, const void *dy, int dy_dt, const void *x, int x_dt,
                        const float *y, const float *mean, const float *invstd, const float *gamma,
                        const float *beta, float *red, int n, int c, int hw, int relu) {
    add_pass(C_REDUCE, ne(n, c, hw), 2 + (relu && y), 0);
    real->bn_bwd_reduce_dt(be, dy, dy_dt, x, x_dt, y, mean, invstd, gamma, beta, red, n, c, hw,
                           relu);
}
static void w_elem(sg_backend *be, const float *dy, const float *x, const float *y,
                   const float *mean, const float *invstd, const float *gamma, const float *red,
                   double count, float *dx, int n, int c, int hw, int relu, int accumulate) {
    add_pass(C_ELEM, ne(n, c, hw), 2 + relu + accumulate, 1);
    real->bn_bwd_elem(be, dy, x, y, mean, invstd, gamma, red, count, dx, n, c, hw, relu,
                      accumulate);
}
static void w_elem_dt(sg_backend *be, const void *dy, int dy_dt, const void *x, int x_dt,
                      const float *y, const float *mean, const float *invstd, const float *gamma,
                      const float *beta, const float *red, double count, void *dx, int dx_dt, int n,
                      int c, int hw, int relu, int accumulate) {
    add_pass(C_ELEM, ne(n, c, hw), 2 + (relu && y) + accumulate, 1);
    real->bn_bwd_elem_dt(be, dy, dy_dt, x, x_dt, y, mean, invstd, gamma, beta, red, count, dx,
                         dx_dt, n, c, hw, relu, accumulate);
}
static void w_add_relu_fwd(sg_backend *be, const void *x, int x_dt, const float *mean,
                           const float *invstd, const float *gamma, const float *beta,
                           const void *res, int res_dt, void *y, int y_dt, int n, int c, int hw) {
    add_pass(C_ADD_RELU_FWD, ne(n, c, hw), 2, 1);
    cnt.join_elems += ne(n, c, hw);
    real->bn_add_relu_fwd(be, x, x_dt, mean, invstd, gamma, beta, res, res_dt, y, y_dt, n, c, hw);
}
static void w_reduce_res(sg_backend *be, const float *dy, const void *x, int x_dt, const void *y,
                         int y_dt, const float *mean, float *red, float *dres, int n, int c, int hw,
                         int accumulate) {
    add_pass(C_REDUCE_RES, ne(n, c, hw), 3 + (dres && accumulate), dres != NULL);
    real->bn_bwd_reduce_res(be, dy, x, x_dt, y, y_dt, mean, red, dres, n, c, hw, accumulate);
}

static void wrap(sg_backend *be) {
    real = be->ops;
    wrapped = *real;
    wrapped.bn_stats = w_bn_stats;
    wrapped.bn_stats_dt = w_bn_stats_dt;
    wrapped.bn_fwd = w_bn_fwd;
    wrapped.bn_fwd_dt = w_bn_fwd_dt;
    wrapped.add = w_add;
    wrapped.relu_bwd = w_relu_bwd;
    wrapped.bn_bwd_reduce = w_reduce;
    wrapped.bn_bwd_reduce_dt = w_reduce_dt;
    wrapped.bn_bwd_elem = w_elem;
    wrapped.bn_bwd_elem_dt = w_elem_dt;
    wrapped.bn_add_relu_fwd = w_add_relu_fwd;
    wrapped.bn_bwd_reduce_res = w_reduce_res;
    be->ops = &wrapped;
}

typedef struct step {
    counts fwd, bwd;
    float *out, *grads, *bufs, *eval_out;
    size_t n_out, n_grads, n_bufs;
} step;

enum { N = 2, H = 48, W = 48, CLASSES = 3 };

/* One training step (forward, cross-entropy on both heads, backward) with
 * fusion on or off; the counters of forward and backward, the logits, the
 * gradients and the buffers (running stats) after it. */
static void run_step(sg_backend *be, sg_backbone bb, int fuse, step *out) {
    setenv("SG_BN_FUSE", fuse ? "1" : "0", 1);
    sg_model_opts o;
    mt_tiny_opts(&o, bb);
    o.base_width = 8;
    o.num_classes = CLASSES;
    sg_model *m = sg_model_create(be, &o);
    CHECK(m != NULL);
    sg_model_init(m, 5);
    CHECK_EQ_INT(sg_model_plan(m, N, H, W), 0);
    size_t nin = (size_t)N * 3 * H * W, hw = (size_t)H * W;
    float *x = malloc(nin * sizeof(float));
    for (size_t i = 0; i < nin; i++) x[i] = (float)sin(0.37 * (double)i) * 1.5f;
    be->ops->upload(be, sg_model_input(m), x, nin * sizeof(float));
    uint8_t *lab = malloc((size_t)N * hw);
    for (size_t i = 0; i < (size_t)N * hw; i++) lab[i] = (uint8_t)((i * 7 / 5) % CLASSES);
    uint8_t *dlab = be->ops->alloc(be, (size_t)N * hw);
    be->ops->upload(be, dlab, lab, (size_t)N * hw);
    step s;
    memset(&s, 0, sizeof s);
    *out = s;
    memset(&cnt, 0, sizeof cnt);
    sg_model_forward(m, 1, 1);
    s.fwd = cnt;
    memset(&cnt, 0, sizeof cnt);
    double loss;
    int64_t valid;
    be->ops->ce_fwd_bwd(be, sg_model_out(m), dlab, N, CLASSES, (int)hw, 255, 1.0f / (float)(N * hw),
                        sg_model_dout(m), &loss, &valid);
    be->ops->ce_fwd_bwd(be, sg_model_aux(m), dlab, N, CLASSES, (int)hw, 255, 0.5f / (float)(N * hw),
                        sg_model_daux(m), &loss, &valid);
    sg_model_backward(m, 0);
    be->ops->sync(be);
    s.bwd = cnt;
    s.n_out = (size_t)N * CLASSES * hw;
    s.out = mt_download(be, sg_model_out(m), s.n_out);
    s.n_grads = sg_model_param_count(m, 0);
    s.grads = mt_download(be, sg_model_grads(m), s.n_grads);
    s.n_bufs = sg_model_buffer_count(m);
    s.bufs = mt_download(be, sg_model_buffers(m), s.n_bufs);
    /* eval with the updated running stats, in an inference plan (whose
     * arena reuses memory by liveness: a fused BN's input lives to its join) */
    CHECK_EQ_INT(sg_model_plan_infer(m, N, H, W), 0);
    be->ops->upload(be, sg_model_input(m), x, nin * sizeof(float));
    sg_model_forward(m, 0, 0);
    s.eval_out = mt_download(be, sg_model_out(m), s.n_out);
    be->ops->free(be, dlab);
    free(x);
    free(lab);
    sg_model_destroy(m);
    *out = s;
}

static void print_counts(const char *what, const counts *c) {
    fprintf(stderr, "%s:", what);
    for (int i = 0; i < C_N; i++)
        if (c->calls[i]) fprintf(stderr, " %s %ld", cname[i], c->calls[i]);
    fprintf(stderr, "; %.0f reads, %.0f writes\n", c->reads, c->writes);
}

static double max_abs(const float *v, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++) m = fmax(m, fabs(v[i]));
    return m;
}

/* One step fused and one unfused of backbone bb, with `joins` residual joins. */
static void check_backbone(sg_backbone bb, long joins) {
    sg_backend *be = mt_backend();
    step u, f;
    run_step(be, bb, 0, &u);
    if (tu_case_failed) return;
    run_step(be, bb, 1, &f);
    if (tu_case_failed) return;
    print_counts("unfused forward", &u.fwd);
    print_counts("unfused backward", &u.bwd);
    print_counts("fused forward", &f.fwd);
    print_counts("fused backward", &f.bwd);

    CHECK_EQ_INT(u.fwd.calls[C_ADD], joins);
    CHECK_EQ_INT(u.fwd.calls[C_ADD_RELU_FWD], 0);
    CHECK_EQ_INT(u.bwd.calls[C_REDUCE_RES], 0);
    CHECK_EQ_INT(u.bwd.calls[C_RELU_BWD], 2 * joins);
    /* fused: no add, no relu_bwd; one fused op per join each way */
    CHECK_EQ_INT(f.fwd.calls[C_ADD], 0);
    CHECK_EQ_INT(f.bwd.calls[C_RELU_BWD], 0);
    CHECK_EQ_INT(f.fwd.calls[C_ADD_RELU_FWD], joins);
    CHECK_EQ_INT(f.bwd.calls[C_REDUCE_RES], joins);
    CHECK_EQ_INT(f.fwd.calls[C_FWD], u.fwd.calls[C_FWD] - joins);
    CHECK_EQ_INT(f.fwd.calls[C_STATS], u.fwd.calls[C_STATS]);
    CHECK_EQ_INT(f.bwd.calls[C_ELEM], u.bwd.calls[C_ELEM]);
    CHECK_EQ_INT(f.bwd.calls[C_REDUCE], u.bwd.calls[C_REDUCE] - joins);

    /* passes per element of the joins' BNs: the unfused chain's forward
     * 4 reads + 2 writes (stats 1; bn_fwd 1 + 1; add 2 + 1) against 3 + 1,
     * its backward 8 + 3 (relu_bwd twice 2 + 1; reduce 2; elementwise
     * 2 + 1) against 5 + 2 (the join's identity gradient is its first
     * writer in both); the step totals differ by exactly that */
    double e = f.fwd.join_elems;
    CHECK(e > 0);
    fprintf(stderr,
            "per element of the joins' BNs (%.0f): forward %.2f reads + %.2f writes fewer fused "
            "(want 1 + 1), backward %.2f + %.2f fewer (want 3 + 1)\n",
            e, (u.fwd.reads - f.fwd.reads) / e, (u.fwd.writes - f.fwd.writes) / e,
            (u.bwd.reads - f.bwd.reads) / e, (u.bwd.writes - f.bwd.writes) / e);
    CHECK(fabs((u.fwd.reads - f.fwd.reads) - 1 * e) < 0.5);
    CHECK(fabs((u.fwd.writes - f.fwd.writes) - 1 * e) < 0.5);
    CHECK(fabs((u.bwd.reads - f.bwd.reads) - 3 * e) < 0.5);
    CHECK(fabs((u.bwd.writes - f.bwd.writes) - 1 * e) < 0.5);

    /* results */
    CHECK(u.n_out == f.n_out && u.n_grads == f.n_grads && u.n_bufs == f.n_bufs);
    CHECK(memcmp(u.out, f.out, u.n_out * sizeof(float)) == 0);
    CHECK(memcmp(u.bufs, f.bufs, u.n_bufs * sizeof(float)) == 0);
    CHECK(memcmp(u.eval_out, f.eval_out, u.n_out * sizeof(float)) == 0);
    double gmax = max_abs(u.grads, u.n_grads), worst = 0;
    for (size_t i = 0; i < u.n_grads; i++)
        worst = fmax(worst, fabs((double)u.grads[i] - f.grads[i]) / (gmax > 0 ? gmax : 1));
    fprintf(stderr, "gradients fused vs unfused: worst %.3g of the max |gradient| %.3g\n", worst,
            gmax);
    CHECK(gmax > 0);
    CHECK(worst <= 1e-5);
    free(u.out), free(u.grads), free(u.bufs), free(u.eval_out);
    free(f.out), free(f.grads), free(f.bufs), free(f.eval_out);
}

/* bottlenecks: four joins (one block per stage), each with a downsample */
static void test_resnet50(void) { check_backbone(SG_RESNET50, 4); }
/* basic blocks: the first stage's join has no downsample (identity = the
 * max-pool's output) */
static void test_resnet18(void) { check_backbone(SG_RESNET18, 4); }

int main(void) {
    if (!tu_have_seams("test_bn_fuse (SG_BN_FUSE=0)")) return TEST_SKIP;
    wrap(mt_backend());
    TEST_RUN(test_resnet50);
    TEST_RUN(test_resnet18);
    return TEST_EXIT();
}
