/* train/train_step.c - one optimizer step on uploaded micro-batches
 * (sg_train_step, see train/train_core.h), with optional per-phase hooks for
 * the benchmark. */
#include <stddef.h>

#include "core/log.h"
#include "train/train_core.h"
#include "kernels/rng.h"

static void phase_end(const sg_step_opts *so, int phase) {
    if (so->phase) so->phase(so->ctx, phase);
}

sg_status sg_train_step(sg_train_core *c, const sg_micro_batch *mb, int K, const sg_step_opts *so,
                        sg_step_out *o) {
    sg_backend *be = c->be;
    const sg_ops *ops = be->ops;
    const sg_config *cfg = c->cfg;
    /* the valid-pixel count of the whole step, needed before the first
     * forward (global loss normalisation) */
    int64_t cnt[2] = {0, 0};
    for (int k = 0; k < K; k++) {
        cnt[0] += mb[k].valid;
        cnt[1] += mb[k].n;
    }
    if (sg_comm_allreduce_i64(c->comm, cnt, 2) != 0) return SG_ERR_RUNTIME;
    int64_t global_valid = cnt[0];
    phase_end(so, SG_PH_COMM);
    double main_sum = 0, aux_sum = 0;
    float aux_w = (float)cfg->train.aux_weight;
    int has_aux = sg_model_aux(c->m) != NULL;
    for (int k = 0; k < K; k++) {
        int n = mb[k].n, h = mb[k].h, w = mb[k].w, hw = h * w;
        /* the shape sg_train_core_attach planned, unless the caller sends a
         * smaller micro-batch: the model logs what it refuses */
        if (sg_model_plan(c->m, n, h, w) != SG_OK) return SG_ERR_RUNTIME;
        ops->normalize_u8(be, mb[k].img, sg_model_input(c->m), n, h, w, c->mean, c->std);
        phase_end(so, SG_PH_DATA);
        uint64_t key = sg_rng_key((uint64_t)cfg->seed, (uint64_t)so->iter, (uint64_t)k,
                                  (uint64_t)c->rank, SG_RNG_DROPOUT);
        sg_model_forward(c->m, 1, key);
        phase_end(so, SG_PH_FWD);
        /* DDP averages gradients over ranks: with the global norm every rank's
         * gradient is scaled by world / (global valid pixels) so the average
         * is the gradient of the global mean. */
        double scale;
        if (c->global_norm)
            scale = global_valid > 0 ? (double)c->world / (double)global_valid : 0.0;
        else
            scale = mb[k].valid > 0 ? 1.0 / ((double)mb[k].valid * K) : 0.0;
        double ls = 0, la = 0;
        int64_t v = 0;
        ops->ce_fwd_bwd(be, sg_model_out(c->m), mb[k].lab, n, c->C, hw, cfg->data.ignore_index,
                        (float)scale, sg_model_dout(c->m), &ls, &v);
        if (has_aux)
            ops->ce_fwd_bwd(be, sg_model_aux(c->m), mb[k].lab, n, c->C, hw,
                            cfg->data.ignore_index, (float)(scale * aux_w), sg_model_daux(c->m),
                            &la, &v);
        if (c->global_norm) {
            main_sum += ls;
            aux_sum += la;
        } else if (v > 0) {
            main_sum += ls / (double)v / K;
            aux_sum += la / (double)v / K;
        }
        phase_end(so, SG_PH_LOSS);
        sg_ddp_set_sync(c->ddp, k == K - 1);
        sg_model_backward(c->m, k > 0);
        phase_end(so, SG_PH_BWD);
    }
    if (sg_ddp_wait(c->ddp) != 0) return SG_ERR_RUNTIME;
    phase_end(so, SG_PH_COMM);
    sg_sgd_step(&c->opt, so->lr);
    phase_end(so, SG_PH_OPT);
    /* global loss and the stop flag, the same on every rank */
    double red[3] = {main_sum, aux_sum, so->stop ? (double)*so->stop : 0.0};
    if (sg_comm_allreduce_f64(c->comm, red, 3) != 0) return SG_ERR_RUNTIME;
    double denom = c->global_norm ? (global_valid > 0 ? (double)global_valid : 1.0) : c->world;
    o->loss_main = red[0] / denom;
    o->loss_aux = red[1] / denom;
    o->loss = o->loss_main + (has_aux ? aux_w * o->loss_aux : 0.0);
    o->images = cnt[1];
    o->stop = red[2] > 0;
    phase_end(so, SG_PH_COMM);
    return SG_OK;
}
