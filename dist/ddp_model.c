/* dist/ddp_model.c - attaches sg_ddp to a model (model/model.h): the
 * gradient list and backward order from the registry, the hooks, and the
 * broadcast of parameters and buffers from rank 0. */
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "dist/comm_internal.h"
#include "dist/ddp.h"
#include "dist/ddp_internal.h"

static void hook_grad_ready(void *ctx, int param_index) { sg_ddp_grad_ready(ctx, param_index); }
static void hook_bn_gather(void *ctx, const float *local_stats, int64_t local_count, float *parts,
                           int64_t *counts, int c) {
    sg_syncbn_gather(((sg_ddp *)ctx)->comm, local_stats, local_count, parts, counts, c);
}
static void hook_bn_allreduce(void *ctx, float *red, int c2) {
    sg_syncbn_allreduce(((sg_ddp *)ctx)->comm, red, c2);
}

sg_status sg_ddp_broadcast_state(sg_ddp *d) {
    if (!d || d->local_only || !d->model) return SG_OK;
    sg_model *m = d->model;
    size_t weight_bytes = sg_model_param_count(m, 0) * sizeof(float);
    size_t buffer_bytes = sg_model_buffer_count(m) * sizeof(float);
    if (sg_comm_broadcast(d->comm, sg_model_weights(m), weight_bytes, 0) != SG_OK)
        return SG_ERR_RUNTIME;
    if (buffer_bytes && sg_comm_broadcast(d->comm, sg_model_buffers(m), buffer_bytes, 0) != SG_OK)
        return SG_ERR_RUNTIME;
    /* num_batches_tracked: host int64 scalars, gathered into one message */
    int np = sg_model_num_params(m), nt = 0;
    int64_t *v = malloc(((size_t)np + 1) * sizeof *v);
    SG_CHECK(v, "out of memory");
    for (int i = 0; i < np; i++) {
        sg_param *p = sg_model_param(m, i);
        if (p->kind == SG_PK_NUM_BATCHES && p->i64) v[nt++] = *p->i64;
    }
    sg_status rc = nt ? sg_comm_broadcast_host(d->comm, v, (size_t)nt * sizeof *v, 0) : SG_OK;
    if (rc == SG_OK) {
        nt = 0;
        for (int i = 0; i < np; i++) {
            sg_param *p = sg_model_param(m, i);
            if (p->kind == SG_PK_NUM_BATCHES && p->i64) *p->i64 = v[nt++];
        }
    }
    free(v);
    return rc;
}

sg_ddp *sg_ddp_create(sg_comm *comm, sg_model *model, const sg_config *cfg) {
    int np = sg_model_num_params(model);
    float **grads = calloc((size_t)np + 1, sizeof *grads);
    size_t *count = calloc((size_t)np + 1, sizeof *count);
    int *order = malloc(((size_t)np + 1) * sizeof *order);
    SG_CHECK(grads && count && order, "out of memory");
    for (int i = 0; i < np; i++) {
        sg_param *p = sg_model_param(model, i);
        count[i] = p->count;
        grads[i] = !p->is_buffer && p->trainable && p->grad ? p->grad : NULL;
    }
    int n_order = sg_model_grad_order(model, order, np);
    sg_ddp *d = sg_ddp_create_raw(comm, grads, count, np, order, n_order, cfg->dist.bucket_mb,
                                  cfg->dist.first_bucket_mb);
    free(grads);
    free(count);
    free(order);
    if (!d) return NULL;
    d->model = model;
    if (d->world > 1) {
        sg_model_hooks h;
        memset(&h, 0, sizeof h);
        h.ctx = d;
        h.world = d->world;
        h.grad_ready = hook_grad_ready;
        if (cfg->model.sync_bn) {
            h.bn_gather = hook_bn_gather;
            h.bn_allreduce = hook_bn_allreduce;
        }
        sg_model_set_hooks(model, &h);
        size_t total = 0;
        for (int i = 0; i < d->nb; i++) total += d->b[i].floats;
        SG_INFO("DDP: %d ranks, %zu gradient floats in %d buckets (first %.3g MiB, then %.3g MiB), "
                "SyncBN %s",
                d->world, total, d->nb, cfg->dist.first_bucket_mb, cfg->dist.bucket_mb,
                cfg->model.sync_bn ? "on" : "off");
    }
    if (sg_ddp_broadcast_state(d) != SG_OK) {
        sg_ddp_destroy(d);
        return NULL;
    }
    return d;
}
