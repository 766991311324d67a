/* tests/backend/run_graph.c - the graph ops (backend.h: set_step_key,
 * graph_begin, graph_end, graph_launch, graph_free; SG_CAP_GRAPHS).
 *
 * On a backend with graphs: a recorded sequence (scale, axpy, dropout_fwd)
 * has not run when graph_end returns; each launch computes what the eager
 * ops compute, bit for bit, on the inputs as they are at the launch (a new
 * upload is seen), and dropout draws the masks of the step key set before
 * the launch, not the one the recording saw; graph_launch refuses a graph
 * once the backend's memory has moved (an allocation), and the counters in
 * get_info follow. Without the capability the backend must say so and
 * count nothing: the CPU backend runs every op when it is issued.
 */
#include <string.h>

#include "kernels/rng.h"
#include "tests/backend/cases.h"

/* The sequence recorded: y = 2x; y += 0.5x; z = dropout(y, p, salt 5). */
static void issue(sg_backend *be, const float *x, float *y, float *z, uint8_t *m, size_t n,
                  float p) {
    be->ops->scale(be, x, y, 2.0f, n);
    be->ops->axpy(be, 0.5f, x, y, n);
    be->ops->dropout_fwd(be, y, z, m, n, 1, 1, p, 5);
}

/* The same on the host, with step key `key`. */
static void expect_z(const float *x, float *z, size_t n, float p, uint64_t key) {
    uint64_t k = sg_rng_dropout_key(key, 5);
    float s = 1.0f / (1.0f - p);
    for (size_t i = 0; i < n; i++) {
        float y = 2.0f * x[i];
        y = y + 0.5f * x[i];
        z[i] = sg_rng_uniform(k, i) >= p ? y * s : 0.0f;
    }
}

void run_graph(tb_ctx *t, const tb_case *c) {
    sg_backend *be = t->be;
    const sg_ops *o = be->ops;
    sg_backend_info bi;
    if (!sg_backend_has(be, SG_CAP_GRAPHS)) {
        sg_backend_get_info(be, &bi);
        tb_expect(t, bi.graph_captures == 0 && bi.graph_launches == 0,
                  "a backend without SG_CAP_GRAPHS reports %ld graphs recorded, %ld launched",
                  bi.graph_captures, bi.graph_launches);
        return;
    }
    size_t n = c->count;
    float p = c->p;
    uint64_t k1 = 0x1234abcdull, k2 = 0x9876fedcull;
    float *x = tb_input(t, n), *x2 = tb_rand(t, n, -3, 3);
    float *x_d = tb_devf(t, x, n), *y_d = tb_devf(t, tb_hzeros(t, n), n);
    float *sentinel = tb_rand(t, n, 7, 8), *z_d = tb_devf(t, sentinel, n);
    uint8_t *m_d = tb_dev(t, NULL, n);
    float *want = tb_hzeros(t, n);

    /* eager, as the reference of the launches */
    o->set_step_key(be, k1);
    issue(be, x_d, y_d, z_d, m_d, n, p);
    float *eager = tb_getf(t, z_d, n);
    expect_z(x, want, n, p, k1);
    tb_same(t, "eager z (scale, axpy, dropout with the step key)", want, eager, n * sizeof(float));
    tb_put(t, z_d, sentinel, n * sizeof(float));

    sg_backend_get_info(be, &bi);
    long cap0 = bi.graph_captures, run0 = bi.graph_launches;
    o->set_step_key(be, k2); /* the recording sees k2; the launch below k1 */
    o->graph_begin(be);
    issue(be, x_d, y_d, z_d, m_d, n, p);
    void *g = o->graph_end(be);
    tb_expect(t, g != NULL, "graph_end returned NULL");
    tb_same_dev(t, "z before the first launch (nothing recorded has run)", sentinel, z_d,
                n * sizeof(float));

    o->set_step_key(be, k1);
    tb_expect(t, o->graph_launch(be, g) == 0, "graph_launch refused a fresh graph");
    tb_same_dev(t, "z of a launch = the eager ops' (step key set before the launch)", eager, z_d,
                n * sizeof(float));

    o->set_step_key(be, k2);
    tb_expect(t, o->graph_launch(be, g) == 0, "graph_launch refused a graph it ran before");
    expect_z(x, want, n, p, k2);
    tb_same_dev(t, "z of a launch after set_step_key(k2): k2's masks", want, z_d,
                n * sizeof(float));

    tb_put(t, x_d, x2, n * sizeof(float)); /* a new input, in the same memory */
    tb_expect(t, o->graph_launch(be, g) == 0, "graph_launch refused a graph after an upload");
    expect_z(x2, want, n, p, k2);
    tb_same_dev(t, "z of a launch on a new input", want, z_d, n * sizeof(float));

    sg_backend_get_info(be, &bi);
    tb_expect(t, bi.graph_captures == cap0 + 1 && bi.graph_launches == run0 + 3,
              "get_info counts %ld recorded / %ld launched, want %ld / %ld", bi.graph_captures,
              bi.graph_launches, cap0 + 1, run0 + 3);

    /* the backend's memory moves: the graph may point at freed memory */
    void *more = o->alloc(be, 4096);
    tb_put(t, z_d, sentinel, n * sizeof(float));
    tb_expect(t, o->graph_launch(be, g) == -1,
              "graph_launch ran a graph recorded before an allocation (want -1)");
    tb_same_dev(t, "z after a refused launch (nothing ran)", sentinel, z_d, n * sizeof(float));
    o->free(be, more);
    o->graph_free(be, g);
    o->graph_free(be, NULL);
}
