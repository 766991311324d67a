/* model/model_graphs.c - the training forward and backward as recorded
 * graphs (backends with SG_CAP_GRAPHS: CUDA graphs), see sg_model_set_graphs
 * in model.h.
 *
 * A pass of a fixed plan issues the same ops on the same tensors every
 * step; only a few things differ between steps, and they reach the ops
 * through device memory: the weights (written by the optimizer in place),
 * the input and the loss gradients (written before the pass), the dropout
 * key (set_step_key, read when dropout_fwd runs). So the pass is recorded
 * once and launched as one unit after that, instead of ~1500 launches from
 * the host.
 *
 * What is recorded: the ops of model_run.c's forward (train = 1) or
 * backward (accumulate) pass (sg_model_passes), the second time it runs under a
 * plan (the first, eager, run builds the backend's per-shape state: conv
 * algorithms, workspace, weight copies; recording allocates nothing). A
 * recording belongs to one plan (m->plan_gen: a re-plan, a freeze, new
 * hooks drop it) and to the backend's memory as it was (graph_launch
 * refuses a graph whose memory has moved, and it is then recorded anew).
 *
 * What is not: the host's own work between the ops. For the forward that
 * is num_batches_tracked and the BN fields backward reads, which a launch
 * repeats (sg_model_forward_host_replay). Passes with host decisions that
 * change between steps are never recorded, and run eagerly:
 *  - profiling (the marks synchronise after each layer);
 *  - Dropout2d (its plane mask is drawn on the host and uploaded);
 *  - the forward under SyncBN across ranks (the statistics all-reduce and
 *    its counts) and the backward with DDP hooks (the bucket all-reduces
 *    launched from the host as gradients become ready, overlapping the rest
 *    of the backward: recording them would need the comm stream inside the
 *    graph). Under DDP the forward is still recorded.
 * The bf16 weight copies (kernels/weight_cache.h) are made stale before a
 * recording, so their conversions are part of the graph and every launch
 * converts the weights the optimizer just wrote.
 */
#include "core/log.h"
#include "model/model_internal.h"

sg_status sg_model_set_graphs(sg_model *m, int on) {
    if (on && !sg_backend_has(m->be, SG_CAP_GRAPHS)) {
        SG_ERROR("model: graphs asked for, but the %s backend has none (cuda.graphs is for "
                 "device: cuda); turn them off",
                 m->be->ops->name);
        return SG_ERR_CONFIG;
    }
    if (!on) sg_model_graphs_drop(m);
    m->graphs_on = on != 0;
    return SG_OK;
}

void sg_model_graphs_drop(sg_model *m) {
    for (int i = 0; i < 3; i++) {
        if (m->graph[i].g) m->be->ops->graph_free(m->be, m->graph[i].g);
        m->graph[i].g = NULL;
        m->graph[i].runs = 0;
    }
    m->plan_gen++;
}

/* 1 if pass `which` may be recorded now (the list at the top). */
static int qualifies(const sg_model *m, int which) {
    if (!m->graphs_on || m->prof || m->planned != 1) return 0;
    for (int li = 0; li < m->n_l; li++)
        if (m->l[li].type == L_DROPOUT2D) return 0;
    if (!m->has_hooks) return 1;
    if (which == SG_MG_FORWARD) return !(m->hooks.bn_gather && m->hooks.world > 1);
    return !m->hooks.grad_ready && !(m->hooks.bn_allreduce && m->hooks.world > 1);
}

int sg_model_graph_run(sg_model *m, int which, uint64_t dropout_key, const sg_model_passes *p) {
    if (!qualifies(m, which)) return 0;
    sg_backend *be = m->be;
    struct sg_model_graph *g = &m->graph[which];
    if (g->plan_gen != m->plan_gen) { /* a new plan: start over */
        if (g->g) be->ops->graph_free(be, g->g);
        g->g = NULL;
        g->runs = 0;
        g->plan_gen = m->plan_gen;
    }
    if (g->g) {
        if (be->ops->graph_launch(be, g->g) == 0) {
            if (which == SG_MG_FORWARD) p->forward_host_replay(m);
            return 1;
        }
        /* the backend's memory moved since the recording: record anew */
        SG_DEBUG("model: the %s graph's memory moved; recording it again",
                 which == SG_MG_FORWARD ? "forward" : "backward");
        be->ops->graph_free(be, g->g);
        g->g = NULL;
    } else if (g->runs++ == 0) {
        return 0; /* the first run is eager: it builds the per-shape caches */
    }
    /* every weight copy is refilled inside the recording, so each launch
     * converts the weights as the optimizer left them */
    be->ops->mem_written(be, NULL, 0);
    be->ops->graph_begin(be);
    if (which == SG_MG_FORWARD) p->forward(m, 1, dropout_key);
    else p->backward(m, which == SG_MG_BACKWARD_ACC);
    g->g = be->ops->graph_end(be);
    /* nothing recorded has run yet */
    SG_CHECK(be->ops->graph_launch(be, g->g) == 0,
             "model: a graph recorded just now was refused at its first launch (internal "
             "error); set cuda.graphs: false");
    return 1;
}
