/* train/ema.c - see ema.h. */
#include "train/ema.h"

#include <stdlib.h>
#include <string.h>

#include "core/log.h"

sg_status sg_ema_init(sg_ema_state *e, sg_model *m, double decay, int every) {
    memset(e, 0, sizeof *e);
    if (!(decay > 0 && decay < 1) || every < 1) {
        SG_ERROR("EMA: train.ema_decay %g must be in (0, 1) and train.ema_every %d >= 1", decay,
                 every);
        return SG_ERR_CONFIG;
    }
    e->m = m;
    e->be = sg_model_backend(m);
    e->decay = decay;
    e->every = every;
    e->nw = sg_model_param_count(m, 0);
    e->nb = sg_model_buffer_count(m);
    e->w = e->be->ops->alloc(e->be, e->nw * sizeof(float));
    if (e->nb) e->b = e->be->ops->alloc(e->be, e->nb * sizeof(float));
    for (int i = 0; i < sg_model_num_params(m); i++)
        if (sg_model_param(m, i)->dtype == SG_DT_I64) e->n_i64++;
    e->i64 = calloc((size_t)(e->n_i64 ? e->n_i64 : 1), sizeof(int64_t));
    SG_CHECK(e->i64 != NULL, "out of host memory");
    return SG_OK;
}

void sg_ema_free(sg_ema_state *e) {
    if (e->be) {
        if (e->w) e->be->ops->free(e->be, e->w);
        if (e->b) e->be->ops->free(e->be, e->b);
    }
    free(e->i64);
    memset(e, 0, sizeof *e);
}

/* Copies num_batches_tracked between the model (to_ema) and the EMA. */
static void copy_i64(sg_ema_state *e, int to_ema) {
    int k = 0;
    for (int i = 0; i < sg_model_num_params(e->m); i++) {
        sg_param *p = sg_model_param(e->m, i);
        if (p->dtype != SG_DT_I64) continue;
        if (to_ema) e->i64[k] = *p->i64;
        else *p->i64 = e->i64[k];
        k++;
    }
}

void sg_ema_copy_from_model(sg_ema_state *e) {
    const sg_ops *ops = e->be->ops;
    ops->copy(e->be, e->w, sg_model_weights(e->m), e->nw * sizeof(float));
    if (e->nb) ops->copy(e->be, e->b, sg_model_buffers(e->m), e->nb * sizeof(float));
    copy_i64(e, 1);
}

void sg_ema_update(sg_ema_state *e) {
    const sg_ops *ops = e->be->ops;
    float d = (float)e->decay, one_minus = (float)(1.0 - e->decay);
    ops->scale(e->be, e->w, e->w, d, e->nw);
    ops->axpy(e->be, one_minus, sg_model_weights(e->m), e->w, e->nw);
    if (e->nb) {
        ops->scale(e->be, e->b, e->b, d, e->nb);
        ops->axpy(e->be, one_minus, sg_model_buffers(e->m), e->b, e->nb);
    }
    copy_i64(e, 1);
}

int sg_ema_after_step(sg_ema_state *e, int64_t steps_done) {
    if (steps_done < 1 || steps_done % e->every != 0) return 0;
    sg_ema_update(e);
    return 1;
}

static void swap_dev(sg_backend *be, float *a, float *b, float *tmp, size_t n) {
    be->ops->copy(be, tmp, a, n * sizeof(float));
    be->ops->copy(be, a, b, n * sizeof(float));
    be->ops->copy(be, b, tmp, n * sizeof(float));
}

void sg_ema_swap(sg_ema_state *e) {
    sg_backend *be = e->be;
    size_t n = e->nw > e->nb ? e->nw : e->nb;
    float *tmp = be->ops->alloc(be, n * sizeof(float));
    swap_dev(be, sg_model_weights(e->m), e->w, tmp, e->nw);
    if (e->nb) swap_dev(be, sg_model_buffers(e->m), e->b, tmp, e->nb);
    be->ops->sync(be); /* tmp is freed below; the copies must have run */
    be->ops->free(be, tmp);
    int k = 0;
    for (int i = 0; i < sg_model_num_params(e->m); i++) {
        sg_param *p = sg_model_param(e->m, i);
        if (p->dtype != SG_DT_I64) continue;
        int64_t t = *p->i64;
        *p->i64 = e->i64[k];
        e->i64[k++] = t;
    }
}

float *sg_ema_tensor(sg_ema_state *e, const sg_param *p, int64_t **i64) {
    if (i64) *i64 = NULL;
    if (p->dtype == SG_DT_I64) {
        int k = 0;
        for (int i = 0; i < sg_model_num_params(e->m); i++) {
            sg_param *q = sg_model_param(e->m, i);
            if (q == p) break;
            if (q->dtype == SG_DT_I64) k++;
        }
        if (i64) *i64 = &e->i64[k];
        return NULL;
    }
    return (p->is_buffer ? e->b : e->w) + p->offset;
}
