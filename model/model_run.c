/* model/model_run.c - forward and backward passes over the planned graph.
 *
 * Walks the layer list (model_internal.h) forward, and in reverse for
 * backward, calling only the op table (kernels/backend.h). BN layers take
 * batch statistics in training (SyncBN through the hooks when set) and
 * running statistics in eval or when their stats are frozen. Layers that
 * read or write a bf16-stored tensor (sg_tensor.dt, model_plan.c) call the
 * *_dt ops; the others call the float32 ops exactly as before. A BN fused
 * with its residual join (sg_layer.join, model_plan.c) takes its
 * statistics at its own place and is applied at the join, in one pass with
 * the add and the ReLU; backward runs its whole backward at the join, the
 * identity's gradient written by the same reduce pass. With profiling on
 * (model_profile.h) each layer's passes are marked (PROF_MARK); a fused
 * BN's apply and backward are timed with its join.
 */
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "kernels/rng.h"
#include "model/model_internal.h"
#include "model/model_profile.h"

/* Profiling (model_profile.h; off: one pointer test per layer): the time
 * since the previous mark goes to layer l's pass. */
#define PROF_MARK(m, l, pass)                                \
    do {                                                     \
        if ((m)->prof) sg_model_prof_mark((m), (l), (pass)); \
    } while (0)

/* y = BN(x) (+ReLU) with l's mean/invstd; the *_dt op when x or y is
 * stored in bf16 (model_plan.c). */
static void bn_apply(sg_model *m, const sg_layer *l) {
    sg_backend *be = m->be;
    const sg_tensor *xt = &m->t[l->in[0]];
    sg_tensor *yt = &m->t[l->out];
    int n = m->n, c = yt->c, hw = yt->h * yt->w;
    const float *gamma = m->params[l->bn_p[0]].data, *beta = m->params[l->bn_p[1]].data;
    if (xt->dt == SG_ACT_F32 && yt->dt == SG_ACT_F32)
        be->ops->bn_fwd(be, xt->val, l->mean, l->invstd, gamma, beta, yt->val, n, c, hw, l->relu);
    else
        be->ops->bn_fwd_dt(be, xt->val, xt->dt, l->mean, l->invstd, gamma, beta, yt->val, yt->dt, n,
                           c, hw, l->relu);
}

/* The host's part of a training BN that took batch statistics over `total`
 * values per channel: num_batches_tracked and what backward needs. A
 * replayed forward graph repeats it (sg_model_forward_host_replay). */
static void bn_took_batch_stats(sg_model *m, sg_layer *l, int64_t total) {
    int64_t *nbt = m->params[l->bn_p[4]].i64;
    if (*nbt < INT64_MAX) (*nbt)++; /* a loaded file may hold anything */
    l->batch_stats_used = 1;
    l->count_global = (double)total;
}

static void bn_forward(sg_model *m, sg_layer *l, int train) {
    sg_backend *be = m->be;
    const sg_ops *ops = be->ops;
    const sg_tensor *xt = &m->t[l->in[0]];
    sg_tensor *yt = &m->t[l->out];
    int n = m->n, c = yt->c, hw = yt->h * yt->w;
    sg_param *gamma = &m->params[l->bn_p[0]];
    sg_param *rm = &m->params[l->bn_p[2]], *rv = &m->params[l->bn_p[3]];
    if (train && !l->frozen_stats) {
        int64_t local = (int64_t)n * hw;
        if (xt->dt == SG_ACT_F32) ops->bn_stats(be, xt->val, n, c, hw, m->stats);
        else ops->bn_stats_dt(be, xt->val, xt->dt, n, c, hw, m->stats);
        int world = 1;
        if (m->has_hooks && m->hooks.bn_gather && m->hooks.world > 1) {
            world = m->hooks.world;
            SG_CHECK(
                world <= m->planned_world,
                "model: hooks set for world %d after planning for %d: call sg_model_plan again",
                world, m->planned_world);
            m->hooks.bn_gather(m->hooks.ctx, m->stats, local, m->parts, m->counts, c);
        } else {
            m->counts[0] = local;
        }
        int64_t total = 0;
        for (int r = 0; r < world; r++) total += m->counts[r];
        /* sg_model_plan refuses a layer that would see one value per channel
         * (model_plan.c), so only a failed SyncBN gather gets here: the
         * communicator is broken and the step's sg_ddp_wait reports it. The
         * running statistics keep this step's output finite until then. */
        SG_CHECK(total > 1 || world > 1,
                 "%s: batch norm in training got %lld value(s) per channel (input [%d, %d, %d, "
                 "%d]); sg_model_plan should have refused this shape (internal error)",
                 gamma->name, (long long)total, n, c, yt->h, yt->w);
        if (total > 1) {
            ops->bn_finalize(be, world > 1 ? m->parts : m->stats, m->counts, world, c, l->bn_eps,
                             l->bn_momentum, l->mean, l->invstd, rm->data, rv->data);
            bn_took_batch_stats(m, l, total);
            PROF_MARK(m, l, SG_PROF_FWD_STATS);
            if (l->join < 0) bn_apply(m, l);
            return;
        }
    }
    ops->bn_eval_params(be, rm->data, rv->data, c, l->bn_eps, l->mean, l->invstd);
    l->batch_stats_used = 0;
    if (l->join < 0) bn_apply(m, l);
}

/* The join a of a fused BN: y = relu(BN(x) + identity) in one pass, with
 * the statistics the BN layer took. */
static void join_forward(sg_model *m, const sg_layer *a) {
    sg_backend *be = m->be;
    const sg_layer *b = &m->l[a->fused_bn];
    const sg_tensor *xt = &m->t[b->in[0]];
    const sg_tensor *rt = &m->t[a->in[a->in[0] == b->out ? 1 : 0]];
    sg_tensor *yt = &m->t[a->out];
    int y_dt = yt->dt == SG_ACT_BF16 ? SG_ACT_BF16 : yt->rnd ? SG_ACT_F32R : SG_ACT_F32;
    be->ops->bn_add_relu_fwd(be, xt->val, xt->dt, b->mean, b->invstd, m->params[b->bn_p[0]].data,
                             m->params[b->bn_p[1]].data, rt->val, rt->dt, yt->val, y_dt, m->n,
                             yt->c, yt->h * yt->w);
}

/* Dropout2d: runs of consecutive planes with the same mask value, applied
 * with the plain memory/elementwise ops (one call per run). dst = alpha *
 * src on kept planes, 0 on dropped ones; accumulate: dst += alpha * src on
 * kept planes only. NHWC activations have no contiguous planes: there the
 * mask is a per-(sample, channel) scale, alpha or 0 (chan_scale; a dropped
 * element is then x * 0, which is -0 for a negative x where NCHW writes +0). */
static void apply_plane_mask(sg_model *m, const sg_layer *l, const float *src, float *dst,
                             size_t planes, size_t hw, int accumulate) {
    sg_backend *be = m->be;
    float alpha = 1.0f / (1.0f - l->p);
    if (be->layout == SG_LAYOUT_NHWC) {
        int c = m->t[l->out].c;
        if (accumulate) /* dst += src * scale; x is not read without ds */
            be->ops->chan_scale_bwd(be, src, m->t[l->in[0]].val, l->chscale, dst, NULL, m->n, c,
                                    (int)hw, 1, 0);
        else be->ops->chan_scale_fwd(be, src, l->chscale, dst, m->n, c, (int)hw);
        return;
    }
    for (size_t a = 0; a < planes;) {
        size_t b = a + 1;
        while (b < planes && l->chmask[b] == l->chmask[a]) b++;
        size_t off = a * hw, cnt = (b - a) * hw;
        if (l->chmask[a]) {
            if (accumulate) be->ops->axpy(be, alpha, src + off, dst + off, cnt);
            else be->ops->scale(be, src + off, dst + off, alpha, cnt);
        } else if (!accumulate) {
            be->ops->zero(be, dst + off, cnt * sizeof(float));
        }
        a = b;
    }
}

/* Where the staged per-plane scales start behind a mask of `planes` bytes
 * (aligned for floats). */
static size_t scale_at(size_t planes) { return (planes + 15) & ~(size_t)15; }

static void dropout2d_forward(sg_model *m, sg_layer *l, int train, uint64_t dropout_key) {
    const sg_tensor *xt = &m->t[l->in[0]];
    sg_tensor *yt = &m->t[l->out];
    if (!train) {
        m->be->ops->copy(m->be, yt->val, xt->val, yt->count * sizeof(float));
        return;
    }
    size_t planes = (size_t)m->n * (size_t)yt->c, hw = (size_t)yt->h * yt->w;
    int nhwc = m->be->layout == SG_LAYOUT_NHWC;
    if (l->chmask_cap < planes) {
        free(l->chmask);
        l->chmask = malloc(scale_at(planes) + (nhwc ? planes * sizeof(float) : 0));
        SG_CHECK(l->chmask, "out of host memory for a dropout2d mask of %zu planes", planes);
        l->chmask_cap = planes;
        if (l->chscale) m->be->ops->free(m->be, l->chscale);
        l->chscale = nhwc ? m->be->ops->alloc(m->be, planes * sizeof(float)) : NULL;
    }
    uint64_t key = sg_rng_dropout_key(dropout_key, (uint64_t)l->drop_id);
    for (size_t i = 0; i < planes; i++) l->chmask[i] = sg_rng_uniform(key, i) >= l->p;
    if (nhwc) { /* the per-plane scale, staged behind the mask in the same host block */
        float alpha = 1.0f / (1.0f - l->p), *s = (float *)(void *)(l->chmask + scale_at(planes));
        for (size_t i = 0; i < planes; i++) s[i] = l->chmask[i] ? alpha : 0.0f;
        m->be->ops->upload(m->be, l->chscale, s, planes * sizeof(float));
    }
    apply_plane_mask(m, l, xt->val, yt->val, planes, hw, 0);
}

void sg_model_forward_host_replay(sg_model *m) {
    for (int li = 0; li < m->n_l; li++) {
        sg_layer *l = &m->l[li];
        if (l->type != L_BN) continue;
        if (l->frozen_stats) {
            l->batch_stats_used = 0;
            continue;
        }
        /* a graph is recorded only without SyncBN across ranks: the layer's
         * own values, more than one (sg_model_plan checked) */
        const sg_tensor *yt = &m->t[l->out];
        int64_t local = (int64_t)m->n * yt->h * yt->w;
        m->counts[0] = local;
        bn_took_batch_stats(m, l, local);
    }
    m->fwd_train = 1;
}

static void forward_ops(sg_model *m, int train, uint64_t dropout_key);
static void backward_ops(sg_model *m, int accumulate);
static const sg_model_passes g_passes = {forward_ops, backward_ops, sg_model_forward_host_replay};

void sg_model_forward(sg_model *m, int train, uint64_t dropout_key) {
    SG_CHECK(m->planned, "sg_model_forward: the model is not planned; call sg_model_plan first "
                         "(again after sg_model_set_hooks)");
    SG_CHECK(!train || m->planned == 1,
             "sg_model_forward(train=1) after sg_model_plan_infer: plan with sg_model_plan");
    /* the dropout layers' masks come from this key when they run (backend.h,
     * dropout_fwd), so a replayed graph draws this step's masks */
    if (train && m->n_dropout) m->be->ops->set_step_key(m->be, dropout_key);
    if (train && sg_model_graph_run(m, SG_MG_FORWARD, dropout_key, &g_passes)) return;
    forward_ops(m, train, dropout_key);
}

static void forward_ops(sg_model *m, int train, uint64_t dropout_key) {
    sg_backend *be = m->be;
    const sg_ops *ops = be->ops;
    int n = m->n;
    if (m->prof) sg_model_prof_start(m);
    for (int li = 0; li < m->n_l; li++) {
        sg_layer *l = &m->l[li];
        const sg_tensor *xt = &m->t[l->in[0]];
        sg_tensor *yt = &m->t[l->out];
        switch (l->type) {
        case L_CONV:
            if (xt->dt == SG_ACT_F32 && yt->dt == SG_ACT_F32)
                ops->conv_fwd(be, &l->desc, xt->val, m->params[l->w_param].data, yt->val);
            else
                ops->conv_fwd_dt(be, &l->desc, xt->val, xt->dt, m->params[l->w_param].data, yt->val,
                                 yt->dt);
            if (l->b_param >= 0)
                ops->bias_fwd(be, yt->val, m->params[l->b_param].data, n, yt->c, yt->h * yt->w);
            break;
        case L_BN: bn_forward(m, l, train); break;
        case L_MAXPOOL:
            ops->maxpool_fwd(be, xt->val, yt->val, l->idx, n, xt->c, xt->h, xt->w, yt->h, yt->w);
            break;
        case L_ADD_RELU:
            if (l->fused_bn >= 0) join_forward(m, l);
            else ops->add(be, xt->val, m->t[l->in[1]].val, yt->val, yt->count, 1);
            break;
        case L_AVGPOOL:
            ops->avgpool_fwd(be, xt->val, xt->dt, yt->val, n, xt->c, xt->h * xt->w);
            break;
        case L_RESIZE:
            ops->resize_fwd(be, xt->val, yt->val, n, xt->c, xt->h, xt->w, yt->h, yt->w);
            break;
        case L_CONCAT: {
            int off = 0;
            for (int i = 0; i < l->n_in; i++) {
                const sg_tensor *s = &m->t[l->in[i]];
                ops->concat_fwd(be, s->val, s->dt, yt->val, yt->dt, n, s->c, yt->c, off,
                                yt->h * yt->w);
                off += s->c;
            }
            break;
        }
        case L_DROPOUT:
            if (train) { /* key: sg_rng_dropout_key(dropout_key, drop_id), set above */
                ops->dropout_fwd(be, xt->val, yt->val, l->mask, yt->count, yt->c, yt->h * yt->w,
                                 l->p, (uint64_t)l->drop_id);
            } else {
                ops->copy(be, yt->val, xt->val, yt->count * sizeof(float));
            }
            break;
        case L_DROPOUT2D: dropout2d_forward(m, l, train, dropout_key); break;
        case L_ADD: ops->add(be, xt->val, m->t[l->in[1]].val, yt->val, yt->count, 0); break;
        case L_RELU: ops->relu_fwd(be, xt->val, yt->val, yt->count); break;
        case L_HARDSWISH: ops->hardswish_fwd(be, xt->val, yt->val, yt->count); break;
        case L_HARDSIGMOID: ops->hardsigmoid_fwd(be, xt->val, yt->val, yt->count); break;
        case L_SIGMOID: ops->sigmoid_fwd(be, xt->val, yt->val, yt->count); break;
        case L_CHAN_SCALE:
            ops->chan_scale_fwd(be, xt->val, m->t[l->in[1]].val, yt->val, n, yt->c, yt->h * yt->w);
            break;
        }
        PROF_MARK(m, l, SG_PROF_FWD);
    }
    m->fwd_train = train;
}

static void ready(sg_model *m, int param) {
    if (m->has_hooks && m->hooks.grad_ready) m->hooks.grad_ready(m->hooks.ctx, param);
}

/* BN's dx from red and count: g (stored as g_dt) masked by y > 0 when
 * relu (y NULL: the mask recomputed from x, a bf16-stored BN+ReLU output);
 * the *_dt op when x, y, g or dx is stored in bf16. */
static void bn_dx(sg_model *m, const sg_layer *l, const void *g, int g_dt, const float *y, int relu,
                  const float *red, double count) {
    sg_backend *be = m->be;
    const sg_tensor *xt = &m->t[l->in[0]];
    const sg_tensor *yt = &m->t[l->out];
    int n = m->n, c = yt->c, hw = yt->h * yt->w;
    const float *gamma = m->params[l->bn_p[0]].data, *beta = m->params[l->bn_p[1]].data;
    if (xt->dt == SG_ACT_F32 && (y || !relu) && g_dt == SG_ACT_F32 && xt->gdt == SG_ACT_F32)
        be->ops->bn_bwd_elem(be, g, xt->val, y ? y : xt->val, l->mean, l->invstd, gamma, red, count,
                             xt->grad, n, c, hw, relu, l->acc_in[0]);
    else
        be->ops->bn_bwd_elem_dt(be, g, g_dt, xt->val, xt->dt, y, l->mean, l->invstd, gamma, beta,
                                red, count, xt->grad, xt->gdt, n, c, hw, relu, l->acc_in[0]);
}

/* BN layer l's backward; a != NULL: l is fused into the join a, whose
 * output's gradient and mask it reads, and whose identity input's gradient
 * (when it needs one) the reduce pass writes too. */
static void bn_backward(sg_model *m, sg_layer *l, const sg_layer *a, int accumulate) {
    sg_backend *be = m->be;
    const sg_ops *ops = be->ops;
    const sg_tensor *xt = &m->t[l->in[0]];
    const sg_tensor *yt = &m->t[l->out];
    int n = m->n, c = yt->c, hw = yt->h * yt->w;
    sg_param *gamma = &m->params[l->bn_p[0]], *beta = &m->params[l->bn_p[1]];
    int train_params = gamma->trainable || beta->trainable;
    int need_dx = xt->req_grad;
    int need_red = train_params || (need_dx && l->batch_stats_used);
    /* where dx's g comes from: the BN output's gradient (its ReLU mask from
     * y, or recomputed from x when y is stored in bf16: y NULL) or, fused,
     * the join's output gradient masked by the join's output, or the
     * identity's gradient when the reduce stored g there (float32 but for
     * the BN output's own gradient, stored as yt->gdt) */
    const float *g = yt->grad, *y = yt->dt == SG_ACT_F32 ? yt->val : NULL;
    int relu = l->relu, g_dt = a ? SG_ACT_F32 : yt->gdt;
    if (a) {
        const sg_tensor *jt = &m->t[a->out];
        int ri = a->in[0] == l->out ? 1 : 0;
        const sg_tensor *rt = &m->t[a->in[ri]];
        float *dres = rt->req_grad ? rt->grad : NULL;
        int acc_r = a->acc_in[ri];
        g = jt->grad;
        y = jt->val;
        relu = 1;
        if (jt->dt == SG_ACT_BF16) {
            /* The join's output is stored in bf16 (the residual stream):
             * relu_bwd and bn_bwd_elem read a float32 mask, so g (dy
             * masked by it) is made once by the reduce pass - into dres
             * when that is simply set, else in place into the join's
             * gradient (read by nothing after this) and then added to
             * dres - and the rest reads g without a mask. The same floats
             * as the float32 join's, so the same bits. */
            int direct = dres && !acc_r;
            float *gbuf = direct ? dres : jt->grad;
            ops->bn_bwd_reduce_res(be, jt->grad, xt->val, xt->dt, jt->val, jt->dt, l->mean, m->red,
                                   gbuf, n, c, hw, 0);
            if (dres && !direct) ops->add(be, dres, gbuf, dres, jt->count, 0);
            if (!yt->req_grad) return; /* nothing upstream of the BN learns */
            g = gbuf;
            y = NULL;
            relu = 0;
            g_dt = SG_ACT_F32;
        } else {
            if (!yt->req_grad) { /* nothing upstream of the BN learns */
                if (dres) ops->relu_bwd(be, jt->grad, jt->val, dres, jt->count, acc_r);
                return;
            }
            if (need_red)
                ops->bn_bwd_reduce_res(be, jt->grad, xt->val, xt->dt, jt->val, SG_ACT_F32, l->mean,
                                       m->red, dres, n, c, hw, acc_r);
            else if (dres) ops->relu_bwd(be, jt->grad, jt->val, dres, jt->count, acc_r);
            if (dres && !acc_r) { /* dres holds g itself */
                g = dres;
                y = NULL;
                relu = 0;
            }
        }
    } else if (need_red) {
        /* red (local) is needed for the parameter gradients and, with
         * batch statistics, for dx; bf16 storage: the *_dt op */
        if (xt->dt == SG_ACT_F32 && yt->dt == SG_ACT_F32 && yt->gdt == SG_ACT_F32)
            ops->bn_bwd_reduce(be, yt->grad, xt->val, yt->val, l->mean, m->red, n, c, hw, l->relu);
        else
            ops->bn_bwd_reduce_dt(be, yt->grad, yt->gdt, xt->val, xt->dt, y, l->mean, l->invstd,
                                  gamma->data, beta->data, m->red, n, c, hw, l->relu);
    }
    if (train_params) {
        /* a frozen half writes into scratch (stats is free in backward) */
        float *dg = gamma->trainable ? gamma->grad : m->stats;
        float *db = beta->trainable ? beta->grad : m->stats + m->max_c;
        ops->bn_param_grads(be, m->red, l->invstd, dg, db, c, accumulate);
        if (gamma->trainable) ready(m, l->bn_p[0]);
        if (beta->trainable) ready(m, l->bn_p[1]);
    }
    if (train_params || (need_dx && l->batch_stats_used)) PROF_MARK(m, l, SG_PROF_BWD_REDUCE);
    if (!need_dx) return;
    if (l->batch_stats_used) {
        const float *red = m->red;
        if (m->has_hooks && m->hooks.bn_allreduce && m->hooks.world > 1) {
            /* the all-reduce is in place: keep the local red for param grads */
            ops->copy(be, m->redg, m->red, (size_t)2 * c * sizeof(float));
            m->hooks.bn_allreduce(m->hooks.ctx, m->redg, 2 * c);
            red = m->redg;
        }
        bn_dx(m, l, g, g_dt, y, relu, red, l->count_global);
    } else {
        /* running statistics are constants: dx = g * invstd * gamma */
        bn_dx(m, l, g, g_dt, y, relu, m->zero_red, 1.0);
    }
}

void sg_model_backward(sg_model *m, int accumulate) {
    SG_CHECK(m->planned == 1, "sg_model_backward: the model is not planned for training "
                              "(sg_model_plan, not sg_model_plan_infer)");
    SG_CHECK(m->fwd_train == 1, "sg_model_backward: needs a sg_model_forward(train=1) first");
    if (sg_model_graph_run(m, accumulate ? SG_MG_BACKWARD_ACC : SG_MG_BACKWARD, 0, &g_passes))
        return;
    backward_ops(m, accumulate);
}

static void backward_ops(sg_model *m, int accumulate) {
    sg_backend *be = m->be;
    const sg_ops *ops = be->ops;
    int n = m->n;
    if (m->prof) sg_model_prof_start(m);
    for (int li = m->n_l - 1; li >= 0; li--) {
        sg_layer *l = &m->l[li];
        const sg_tensor *yt = &m->t[l->out];
        if (!yt->req_grad) continue;
        const sg_tensor *xt = &m->t[l->in[0]];
        switch (l->type) {
        case L_CONV: {
            sg_param *w = &m->params[l->w_param];
            int bias = l->b_param >= 0 && m->params[l->b_param].trainable;
            /* both gradients in one op, which may share its work on dy (the
             * profile keeps the two passes apart instead); dy and dx stored
             * as their tensors' gdt (bf16: a BN writes or reads the other
             * end, model_plan.c) */
            int both = w->trainable && xt->req_grad && !m->prof;
            int gdt = yt->gdt, f32_grads = gdt == SG_ACT_F32 && xt->gdt == SG_ACT_F32;
            SG_CHECK(!bias || gdt == SG_ACT_F32,
                     "model: a conv with bias has a bf16 output gradient (internal error)");
            if (both) {
                ops->conv_bwd_dt(be, &l->desc, xt->val, xt->dt, yt->grad, gdt, w->data, w->grad,
                                 accumulate, xt->grad, xt->gdt, l->acc_in[0]);
                ready(m, l->w_param);
            } else if (w->trainable) {
                if (xt->dt == SG_ACT_F32 && gdt == SG_ACT_F32)
                    ops->conv_bwd_weight(be, &l->desc, xt->val, yt->grad, w->grad, accumulate);
                else
                    ops->conv_bwd_weight_dt(be, &l->desc, xt->val, xt->dt, yt->grad, gdt, w->grad,
                                            accumulate);
                ready(m, l->w_param);
            }
            if (bias) {
                ops->bias_bwd(be, yt->grad, m->params[l->b_param].grad, n, yt->c, yt->h * yt->w,
                              accumulate);
                ready(m, l->b_param);
            }
            if (both) break;
            if (w->trainable || bias) PROF_MARK(m, l, SG_PROF_BWD_WEIGHT);
            if (xt->req_grad) {
                if (f32_grads)
                    ops->conv_bwd_data(be, &l->desc, yt->grad, w->data, xt->grad, l->acc_in[0]);
                else /* the backward-data pass alone (dw NULL) */
                    ops->conv_bwd_dt(be, &l->desc, xt->val, xt->dt, yt->grad, gdt, w->data, NULL, 0,
                                     xt->grad, xt->gdt, l->acc_in[0]);
                PROF_MARK(m, l, SG_PROF_BWD_DATA);
            }
            break;
        }
        case L_BN:
            if (l->join < 0) bn_backward(m, l, NULL, accumulate);
            break; /* else at its join */
        case L_MAXPOOL:
            if (!xt->req_grad) break;
            /* maxpool_bwd overwrites dx (no accumulate); its input has no
             * other consumer, so overwriting is right */
            SG_CHECK(!l->acc_in[0], "model: max-pool input with several consumers (internal)");
            ops->maxpool_bwd(be, yt->grad, l->idx, xt->grad, n, xt->c, xt->h, xt->w, yt->h, yt->w);
            break;
        case L_ADD_RELU:
            if (l->fused_bn >= 0) {
                bn_backward(m, &m->l[l->fused_bn], l, accumulate);
                break;
            }
            for (int i = 0; i < 2; i++) {
                const sg_tensor *it = &m->t[l->in[i]];
                if (it->req_grad)
                    ops->relu_bwd(be, yt->grad, yt->val, it->grad, yt->count, l->acc_in[i]);
            }
            break;
        case L_AVGPOOL:
            if (xt->req_grad)
                ops->avgpool_bwd(be, yt->grad, xt->grad, n, xt->c, xt->h * xt->w, l->acc_in[0]);
            break;
        case L_RESIZE:
            if (xt->req_grad)
                ops->resize_bwd(be, yt->grad, xt->grad, n, xt->c, xt->h, xt->w, yt->h, yt->w,
                                l->acc_in[0]);
            break;
        case L_CONCAT: {
            int off = 0;
            for (int i = 0; i < l->n_in; i++) {
                const sg_tensor *s = &m->t[l->in[i]];
                if (s->req_grad)
                    ops->concat_bwd(be, yt->grad, s->grad, n, s->c, yt->c, off, yt->h * yt->w,
                                    l->acc_in[i]);
                off += s->c;
            }
            break;
        }
        case L_DROPOUT:
            if (xt->req_grad)
                ops->dropout_bwd(be, yt->grad, l->mask, xt->grad, yt->count, l->p, l->acc_in[0]);
            break;
        case L_DROPOUT2D:
            if (xt->req_grad)
                apply_plane_mask(m, l, yt->grad, xt->grad, (size_t)n * yt->c, (size_t)yt->h * yt->w,
                                 l->acc_in[0]);
            break;
        case L_ADD:
            for (int i = 0; i < 2; i++) {
                const sg_tensor *it = &m->t[l->in[i]];
                if (!it->req_grad) continue;
                if (l->acc_in[i]) ops->axpy(be, 1.0f, yt->grad, it->grad, yt->count);
                else ops->copy(be, it->grad, yt->grad, yt->count * sizeof(float));
            }
            break;
        case L_RELU:
            if (xt->req_grad)
                ops->relu_bwd(be, yt->grad, yt->val, xt->grad, yt->count, l->acc_in[0]);
            break;
        case L_HARDSWISH:
            if (xt->req_grad)
                ops->hardswish_bwd(be, yt->grad, xt->val, xt->grad, yt->count, l->acc_in[0]);
            break;
        case L_HARDSIGMOID:
            if (xt->req_grad)
                ops->hardsigmoid_bwd(be, yt->grad, xt->val, xt->grad, yt->count, l->acc_in[0]);
            break;
        case L_SIGMOID:
            if (xt->req_grad)
                ops->sigmoid_bwd(be, yt->grad, yt->val, xt->grad, yt->count, l->acc_in[0]);
            break;
        case L_CHAN_SCALE: {
            const sg_tensor *st = &m->t[l->in[1]];
            ops->chan_scale_bwd(be, yt->grad, xt->val, st->val, xt->req_grad ? xt->grad : NULL,
                                st->req_grad ? st->grad : NULL, n, yt->c, yt->h * yt->w,
                                l->acc_in[0], l->acc_in[1]);
            break;
        }
        }
        if (l->type != L_CONV) PROF_MARK(m, l, SG_PROF_BWD); /* convs marked their passes */
    }
}
