/* train/train_step.c - one optimizer step on uploaded or staged micro-batches
 * (sg_train_step, see train/train_core.h), with optional per-phase hooks for
 * the benchmark. */
#include <stddef.h>

#include "core/log.h"
#include "kernels/rng.h"
#include "train/loss_opts.h"
#include "train/train_core.h"

static void phase_end(const sg_step_opts *so, int phase) {
    if (so->phase) so->phase(so->ctx, phase);
}

/* The labels of micro-batch mb counted per class into count[C] (class
 * weights or OHEM on): downloaded once, B x crop bytes. */
static void count_classes(sg_train_core *c, const sg_micro_batch *mb, int64_t *count) {
    size_t px = (size_t)mb->n * mb->h * mb->w;
    if (mb->staged) { /* still on the host */
        sg_class_count(mb->lab_host, px, c->C, count);
        return;
    }
    c->be->ops->download(c->be, c->lab_host, mb->lab, px);
    sg_class_count(c->lab_host, px, c->C, count);
}

/* A staged micro-batch onto the device, on the copy stream: it overlaps
 * the compute issued after it, and waits for the compute issued before it
 * (which may still read the slot). */
static void upload_staged(sg_backend *be, const sg_micro_batch *mb) {
    size_t px = (size_t)mb->n * mb->h * mb->w;
    be->ops->upload_async(be, mb->img, mb->img_host, px * 3);
    be->ops->upload_async(be, mb->lab, mb->lab_host, px);
}

/* D, the loss's denominator, from a count of valid pixels and the per-class
 * counts (NULL without class weights or OHEM). */
static double denominator(const sg_train_core *c, int64_t valid, const int64_t *count) {
    if (c->class_w) return sg_class_weight_sum(c->class_w_host, count, c->C);
    if (count) { /* OHEM alone: the pixels of the classes, ignore and >= C left out */
        int64_t v = 0;
        for (int i = 0; i < c->C; i++) v += count[i];
        return (double)v;
    }
    return (double)valid;
}

sg_status sg_check_batch_sizes(const int64_t *sizes, int slots, int world, int rank,
                               const int64_t *own, int n_own, int max_batch) {
    for (int k = 0; k < slots; k++)
        for (int q = 0; q < world; q++) {
            int64_t v = sizes[(size_t)k * world + q];
            int64_t mine = q == rank ? (k < n_own ? own[k] : 0) : -1;
            if (v < 0 || v > max_batch || (mine >= 0 && v != mine)) {
                SG_ERROR("rank %d: the all-reduced micro-batch size of rank %d (micro-batch %d) is "
                         "%lld, %s: a peer sent a corrupt count (mismatched builds or a broken "
                         "link); the step stops",
                         rank, q, k, (long long)v,
                         mine >= 0 ? "not what this rank sent" : "outside 0..train.batch_size");
                return SG_ERR_RUNTIME;
            }
        }
    return SG_OK;
}

sg_status sg_train_step(sg_train_core *c, const sg_micro_batch *mb, int K, const sg_step_opts *so,
                        sg_step_out *o) {
    sg_backend *be = c->be;
    const sg_ops *ops = be->ops;
    const sg_config *cfg = c->cfg;
    int C = c->C, ignore = cfg->data.ignore_index;
    int by_class = c->class_w || c->ohem_prob;
    /* the counts of the whole step, needed before the first forward (global
     * loss normalisation): valid pixels, images and, with class weights or
     * OHEM, the pixels of each class (integers: the sum is the same however
     * the step is split among ranks and micro-batches) */
    int64_t *cnt = c->counts, *mb_count = c->counts + 2 + C;
    int ncnt = 2 + (by_class ? C : 0);
    for (int i = 0; i < ncnt; i++) cnt[i] = 0;
    for (int k = 0; k < K; k++) {
        cnt[0] += mb[k].valid;
        cnt[1] += mb[k].n;
        if (by_class) {
            int64_t *mc = mb_count + (size_t)k * C;
            for (int i = 0; i < C; i++) mc[i] = 0;
            count_classes(c, &mb[k], mc);
            for (int i = 0; i < C; i++) cnt[2 + i] += mc[i];
        }
    }
    /* with SyncBN on several ranks the same all-reduce also tells every rank
     * each rank's micro-batch sizes (slot k * world + rank), so that SyncBN
     * on NCCL knows the value counts without reading the device
     * (sg_comm_set_batch_sizes) */
    int64_t *sizes = NULL;
    if (c->world > 1 && cfg->model.sync_bn) {
        int64_t *red = c->counts + 2 + (size_t)C * (1 + (size_t)c->K);
        for (int i = 0; i < ncnt; i++) red[i] = cnt[i];
        sizes = red + ncnt;
        for (int i = 0; i < c->K * c->world; i++) sizes[i] = 0;
        for (int k = 0; k < K && k < c->K; k++) sizes[(size_t)k * c->world + c->rank] = mb[k].n;
        if (sg_comm_allreduce_i64(c->comm, red, (size_t)ncnt + (size_t)c->K * c->world) != 0)
            return SG_ERR_RUNTIME;
        int64_t own[1024]; /* train.accum_steps is at most 1024 (core/config_schema.c) */
        SG_CHECK(c->K <= 1024, "train.accum_steps %d above 1024 (internal error)", c->K);
        for (int k = 0; k < K && k < c->K; k++) own[k] = mb[k].n;
        if (sg_check_batch_sizes(sizes, c->K, c->world, c->rank, own, K < c->K ? K : c->K, c->B) !=
            SG_OK)
            return SG_ERR_RUNTIME;
        for (int i = 0; i < ncnt; i++) cnt[i] = red[i];
    } else if (sg_comm_allreduce_i64(c->comm, cnt, (size_t)ncnt) != 0) {
        return SG_ERR_RUNTIME;
    }
    double global_den = denominator(c, cnt[0], by_class ? cnt + 2 : NULL);
    phase_end(so, SG_PH_COMM);
    ops->zero(be, c->loss_acc, 2 * sizeof(double));
    if (K > 0 && mb[0].staged) upload_staged(be, &mb[0]);
    float aux_w = (float)cfg->train.aux_weight;
    int has_aux = sg_model_aux(c->m) != NULL;
    for (int k = 0; k < K; k++) {
        int n = mb[k].n, h = mb[k].h, w = mb[k].w, hw = h * w;
        const int64_t *mc = by_class ? mb_count + (size_t)k * C : NULL;
        double den = denominator(c, mb[k].valid, mc);
        /* the shape sg_train_core_attach planned, unless the caller sends a
         * smaller micro-batch: the model logs what it refuses */
        if (sg_model_plan(c->m, n, h, w) != SG_OK) return SG_ERR_RUNTIME;
        if (mb[k].staged) {
            ops->upload_wait(be); /* micro-batch k is on the device... */
            /* ...and k + 1 travels while k computes (its slot was last read
             * by the previous step, issued before this upload) */
            if (k + 1 < K && mb[k + 1].staged) upload_staged(be, &mb[k + 1]);
        }
        ops->normalize_u8(be, mb[k].img, sg_model_input(c->m), n, h, w, c->mean, c->std);
        phase_end(so, SG_PH_DATA);
        uint64_t key = sg_rng_key((uint64_t)cfg->seed, (uint64_t)so->iter, (uint64_t)k,
                                  (uint64_t)c->rank, SG_RNG_DROPOUT);
        if (sizes) sg_comm_set_batch_sizes(c->comm, k < c->K ? sizes + (size_t)k * c->world : NULL);
        sg_model_forward(c->m, 1, key);
        phase_end(so, SG_PH_FWD);
        /* DDP averages gradients over ranks: with the global norm every rank's
         * gradient is scaled by world / D (global) so the average is the
         * gradient of the global mean. */
        double scale;
        if (c->global_norm) scale = global_den > 0 ? (double)c->world / global_den : 0.0;
        else scale = den > 0 ? 1.0 / (den * K) : 0.0;
        /* the loss sums stay on the device, added to the step's two
         * accumulators (main, aux) as the host added them: the sum itself
         * (global) or sum / D / K (local; nothing without valid pixels) */
        double *acc_main = c->loss_acc, *acc_aux = c->loss_acc + 1;
        double div1 = 1.0, div2 = 1.0;
        if (!c->global_norm) {
            div1 = den;
            div2 = K;
            if (!(den > 0)) acc_main = acc_aux = NULL;
        }
        const float *sel = NULL;
        float below = 0;
        if (c->ohem_prob) { /* mmseg's OHEMPixelSampler on this forward */
            int64_t nvalid = 0;
            for (int i = 0; i < C; i++) nvalid += mc[i];
            ops->ce_label_prob(be, sg_model_out(c->m), mb[k].lab, n, C, hw, ignore, c->ohem_prob);
            below = sg_ohem_threshold(be, c->ohem_prob, (size_t)n * hw, nvalid, c->ohem_thresh,
                                      (int64_t)cfg->train.ohem_min_kept * n);
            sel = c->ohem_prob;
        }
        /* without class weights and selection: ce_fwd_bwd bit for bit */
        ops->ce_weighted_acc(be, sg_model_out(c->m), mb[k].lab, n, C, hw, ignore, c->class_w, sel,
                             below, (float)scale, sg_model_dout(c->m), acc_main, div1, div2);
        if (has_aux)
            ops->ce_weighted_acc(be, sg_model_aux(c->m), mb[k].lab, n, C, hw, ignore, c->class_w,
                                 NULL, 0.0f, (float)(scale * aux_w), sg_model_daux(c->m), acc_aux,
                                 div1, div2);
        phase_end(so, SG_PH_LOSS);
        sg_ddp_set_sync(c->ddp, k == K - 1);
        sg_model_backward(c->m, k > 0);
        phase_end(so, SG_PH_BWD);
    }
    if (sizes) sg_comm_set_batch_sizes(c->comm, NULL);
    if (sg_ddp_wait(c->ddp) != 0) return SG_ERR_RUNTIME;
    phase_end(so, SG_PH_COMM);
    sg_sgd_step(&c->opt, so->lr); /* clips first (train.clip_grad_norm) */
    o->grad_norm = c->opt.grad_norm;
    /* the step's one read of the device: its two loss sums */
    double *sums = c->loss_host;
    ops->download(be, sums, c->loss_acc, 2 * sizeof(double));
    phase_end(so, SG_PH_OPT);
    /* global loss and the stop flag, the same on every rank */
    double red[3] = {sums[0], sums[1], so->stop ? (double)*so->stop : 0.0};
    if (sg_comm_allreduce_f64(c->comm, red, 3) != 0) return SG_ERR_RUNTIME;
    double denom = c->global_norm ? (global_den > 0 ? global_den : 1.0) : c->world;
    o->loss_main = red[0] / denom;
    o->loss_aux = red[1] / denom;
    o->loss = o->loss_main + (has_aux ? aux_w * o->loss_aux : 0.0);
    o->images = cnt[1];
    o->stop = red[2] > 0;
    phase_end(so, SG_PH_COMM);
    return SG_OK;
}
