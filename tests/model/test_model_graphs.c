/* tests/model/test_model_graphs.c - the training passes as recorded graphs
 * (sg_model_set_graphs, model/model_graphs.c).
 *
 * On every backend:
 *  - refused: graphs on a backend without SG_CAP_GRAPHS (the CPU) are a
 *    configuration error naming the backend, and the model trains as before;
 *  - host replay: what a launch of a recorded forward repeats on the host
 *    (sg_model_forward_host_replay: num_batches_tracked, the BN fields
 *    backward reads) equals what an eager training forward does, frozen
 *    statistics included.
 * On a backend with graphs ($SG_TEST_DEVICE=cuda; exit 77 without a GPU):
 *  - replay: six training steps (forward with dropout under a new key each
 *    step, both losses, backward, a weight update; one step accumulating a
 *    second micro-batch; an inference plan and back in the middle) with
 *    graphs on give the logits, gradients, weights, running statistics and
 *    num_batches_tracked of the eager run bit for bit, with the passes
 *    recorded once per plan and launched after that.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "model/model_internal.h"
#include "tests/model/model_testutil.h"
#include "tests/testutil.h"

enum { N = 2, H = 40, W = 40, CLASSES = 3, STEPS = 6 };

static sg_model *tiny(sg_backend *be) {
    sg_model_opts o;
    mt_tiny_opts(&o, SG_RESNET18);
    o.base_width = 8;
    o.num_classes = CLASSES;
    o.aspp_dropout = 0.5f; /* the dropout key must follow the step */
    o.aux_dropout = 0.1f;
    sg_model *m = sg_model_create(be, &o);
    if (!m) {
        fprintf(stderr, "sg_model_create failed\n");
        exit(1);
    }
    sg_model_init(m, 5);
    return m;
}

static void test_refused_without_graphs(void) {
    sg_backend *be = mt_backend();
    if (sg_backend_has(be, SG_CAP_GRAPHS)) return; /* the other cases cover it */
    sg_model *m = tiny(be);
    th_cap_begin();
    CHECK_EQ_INT(sg_model_set_graphs(m, 1), SG_ERR_CONFIG);
    const char *out = th_cap_end();
    CHECK_STR_CONTAINS(out, "backend has none");
    CHECK_EQ_INT(sg_model_set_graphs(m, 0), SG_OK);
    sg_model_destroy(m);
}

/* Every BN's num_batches_tracked and backward fields. */
typedef struct bn_state {
    int64_t nbt[256];
    int used[256];
    double count[256];
    int n;
} bn_state;

static void snapshot(sg_model *m, bn_state *s) {
    s->n = 0;
    for (int li = 0; li < m->n_l && s->n < 256; li++) {
        sg_layer *l = &m->l[li];
        if (l->type != L_BN) continue;
        s->nbt[s->n] = *m->params[l->bn_p[4]].i64;
        s->used[s->n] = l->batch_stats_used;
        s->count[s->n] = l->count_global;
        s->n++;
    }
}

static void test_host_replay(void) {
    sg_backend *be = mt_backend();
    sg_model *m = tiny(be);
    CHECK(sg_model_freeze_bn_stats(m, "encoder.layer1.") > 0);
    CHECK_EQ_INT(sg_model_plan(m, N, H, W), 0);
    sg_model_forward(m, 1, 11);
    bn_state a, b, c;
    snapshot(m, &a);
    sg_model_forward(m, 1, 12); /* eager: what a launch must repeat */
    snapshot(m, &b);
    /* back to after the first forward, then the replay's host part */
    int k = 0;
    for (int li = 0; li < m->n_l; li++)
        if (m->l[li].type == L_BN) *m->params[m->l[li].bn_p[4]].i64 = a.nbt[k++];
    m->fwd_train = 0;
    sg_model_forward_host_replay(m);
    snapshot(m, &c);
    CHECK(a.n == b.n && b.n == c.n && c.n > 10);
    int frozen = 0;
    for (int i = 0; i < c.n; i++) {
        CHECK(c.nbt[i] == b.nbt[i]);
        CHECK(c.used[i] == b.used[i]);
        CHECK(c.count[i] == b.count[i]);
        frozen += !b.used[i];
        CHECK(b.nbt[i] == a.nbt[i] + b.used[i]); /* frozen layers do not count */
    }
    CHECK(frozen > 0);
    CHECK_EQ_INT(m->fwd_train, 1);
    sg_model_destroy(m);
}

typedef struct result {
    float *out, *grads, *weights, *bufs;
    int64_t nbt[256];
    long captures, launches;
} result;

/* Uploads input variant v (and labels) for the planned [N, 3, H, W]. */
static void put_input(sg_backend *be, sg_model *m, int v, uint8_t *dlab) {
    size_t nin = (size_t)N * 3 * H * W, hw = (size_t)H * W;
    float *x = malloc(nin * sizeof(float));
    for (size_t i = 0; i < nin; i++) x[i] = (float)sin(0.37 * (double)i + v) * 1.5f;
    be->ops->upload(be, sg_model_input(m), x, nin * sizeof(float));
    uint8_t *lab = malloc((size_t)N * hw);
    for (size_t i = 0; i < (size_t)N * hw; i++) lab[i] = (uint8_t)((i * 7 / 5 + v) % CLASSES);
    be->ops->upload(be, dlab, lab, (size_t)N * hw);
    free(x);
    free(lab);
}

static void losses(sg_backend *be, sg_model *m, uint8_t *dlab) {
    double loss;
    int64_t valid;
    size_t hw = (size_t)H * W;
    be->ops->ce_fwd_bwd(be, sg_model_out(m), dlab, N, CLASSES, (int)hw, 255, 1.0f / (float)(N * hw),
                        sg_model_dout(m), &loss, &valid);
    be->ops->ce_fwd_bwd(be, sg_model_aux(m), dlab, N, CLASSES, (int)hw, 255, 0.5f / (float)(N * hw),
                        sg_model_daux(m), &loss, &valid);
}

static void train(sg_backend *be, int graphs, result *r) {
    memset(r, 0, sizeof *r); /* nbt[] is compared whole: the entries past the BN count too */
    sg_model *m = tiny(be);
    CHECK_EQ_INT(sg_model_set_graphs(m, graphs), SG_OK);
    CHECK_EQ_INT(sg_model_plan(m, N, H, W), 0);
    uint8_t *dlab = be->ops->alloc(be, (size_t)N * H * W);
    size_t np = sg_model_param_count(m, 0);
    sg_backend_info i0, i1;
    sg_backend_get_info(be, &i0);
    for (int s = 0; s < STEPS; s++) {
        int micro = s == 4 ? 2 : 1; /* step 4 accumulates a second micro-batch */
        for (int k = 0; k < micro; k++) {
            put_input(be, m, s * 2 + k, dlab);
            sg_model_forward(m, 1, 1000 + (uint64_t)(s * 2 + k));
            losses(be, m, dlab);
            sg_model_backward(m, k > 0);
        }
        be->ops->axpy(be, -0.05f, sg_model_grads(m), sg_model_weights(m), np);
        if (s == 2) { /* an inference plan in between, as in-training evaluation */
            CHECK_EQ_INT(sg_model_plan_infer(m, N, H, W), 0);
            put_input(be, m, 99, dlab);
            sg_model_forward(m, 0, 0);
            CHECK_EQ_INT(sg_model_plan(m, N, H, W), 0);
        }
    }
    sg_backend_get_info(be, &i1);
    r->captures = i1.graph_captures - i0.graph_captures;
    r->launches = i1.graph_launches - i0.graph_launches;
    r->out = mt_download(be, sg_model_out(m), (size_t)N * CLASSES * H * W);
    r->grads = mt_download(be, sg_model_grads(m), np);
    r->weights = mt_download(be, sg_model_weights(m), np);
    r->bufs = mt_download(be, sg_model_buffers(m), sg_model_buffer_count(m));
    int k = 0;
    for (int li = 0; li < m->n_l && k < 256; li++)
        if (m->l[li].type == L_BN) r->nbt[k++] = *m->params[m->l[li].bn_p[4]].i64;
    be->ops->free(be, dlab);
    sg_model_destroy(m);
}

static void test_replay_bit_exact(void) {
    sg_backend *be = mt_backend();
    if (!sg_backend_has(be, SG_CAP_GRAPHS)) return;
    result e, g;
    train(be, 0, &e);
    train(be, 1, &g);
    sg_model *m = tiny(be);
    size_t np = sg_model_param_count(m, 0), nb = sg_model_buffer_count(m);
    sg_model_destroy(m);
    size_t nout = (size_t)N * CLASSES * H * W;
    CHECK(memcmp(e.out, g.out, nout * sizeof(float)) == 0);
    CHECK(memcmp(e.grads, g.grads, np * sizeof(float)) == 0);
    CHECK(memcmp(e.weights, g.weights, np * sizeof(float)) == 0);
    CHECK(memcmp(e.bufs, g.bufs, nb * sizeof(float)) == 0);
    CHECK(memcmp(e.nbt, g.nbt, sizeof e.nbt) == 0);
    CHECK_EQ_INT((int)e.nbt[0], STEPS + 1); /* step 4 ran two forwards */
    /* eager: nothing recorded. Graphs: under each of the two training plans
     * the forward and the plain backward recorded once (the first run is
     * eager), the accumulating backward ran once (eagerly): 4 recordings,
     * and a launch for every other pass after its recording */
    CHECK(e.captures == 0 && e.launches == 0);
    fprintf(stderr, "graphs: %ld recorded, %ld launched\n", g.captures, g.launches);
    CHECK_EQ_INT((int)g.captures, 4);
    CHECK(g.launches >= 8);
    free(e.out), free(e.grads), free(e.weights), free(e.bufs);
    free(g.out), free(g.grads), free(g.weights), free(g.bufs);
}

int main(void) {
    TEST_RUN(test_refused_without_graphs);
    TEST_RUN(test_host_replay);
    TEST_RUN(test_replay_bit_exact);
    return TEST_EXIT();
}
