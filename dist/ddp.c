/* dist/ddp.c - gradient buckets and the comm thread (dist/ddp.h). Owns the
 * buckets (their flat buffers when not in place), the comm thread and the
 * per-step readiness state. The model side (hooks, state broadcast) is in
 * dist/ddp_model.c, SyncBN in dist/syncbn.c. */
#include "dist/ddp.h"

#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/log.h"
#include "core/sigmask.h"
#include "core/util.h"
#include "dist/comm_internal.h"
#include "dist/ddp_internal.h"

/* The comm thread: reduces queued buckets strictly in bucket order, so every
 * rank issues the same sequence of all-reduces on the gradient channel. */
static void *comm_main(void *arg) {
    sg_ddp *d = arg;
    d->be->ops->bind_thread(d->be); /* its staging ops run on this thread */
    pthread_mutex_lock(&d->mu);
    for (;;) {
        while (!d->stop && d->processed == d->queued) pthread_cond_wait(&d->cv, &d->mu);
        if (d->stop) break;
        int i = d->processed;
        int skip = d->fail;
        pthread_mutex_unlock(&d->mu);
        sg_status rc =
            skip ? SG_ERR_RUNTIME
                 : sg_comm_ch_allreduce_f32(d->comm, SG_CH_GRAD, d->b[i].flat, d->b[i].floats);
        pthread_mutex_lock(&d->mu);
        if (rc != SG_OK) d->fail = 1;
        d->processed++;
        pthread_cond_broadcast(&d->cv);
    }
    pthread_mutex_unlock(&d->mu);
    return NULL;
}

/* Hands every complete bucket, in order, to the comm thread. */
static void launch_ready(sg_ddp *d) {
    int q = d->next_launch;
    while (q < d->nb && d->b[q].pending == 0) {
        if (sg_backend_has(d->be, SG_CAP_ASYNC_STREAMS)) /* comm stream after the scaled grads */
            d->be->ops->stream_wait(d->be, SG_STREAM_COMM, SG_STREAM_COMPUTE);
        q++;
    }
    if (q == d->next_launch) return;
    d->next_launch = q;
    pthread_mutex_lock(&d->mu);
    d->queued = q;
    pthread_cond_broadcast(&d->cv);
    pthread_mutex_unlock(&d->mu);
}

void sg_ddp_grad_ready(sg_ddp *d, int index) {
    if (!d || d->local_only || !d->sync) return;
    if (index < 0 || index >= d->n || d->bucket_of[index] < 0) return; /* frozen / not ours */
    if (d->ready[index]) {
        SG_WARN("DDP: gradient %d reported ready twice in one backward (ignored)", index);
        return;
    }
    d->ready[index] = 1;
    /* out of order = reported after one that comes later in `order` (an
     * unused gradient, never reported, is not out of order) */
    if (d->pos[index] < d->max_pos && !d->order_warned) {
        d->order_warned = 1;
        SG_WARN(
            "DDP: backward reported gradient %d after gradient %d, against the bucket order "
            "(sg_model_grad_order): buckets start later than they could; results are unaffected",
            index, d->order[d->max_pos]);
    }
    if (d->pos[index] > d->max_pos) d->max_pos = d->pos[index];
    ddp_bucket *b = &d->b[d->bucket_of[index]];
    float *dst = b->flat + d->flat_off[index];
    /* average as it is copied in (PyTorch divides before the sum too) */
    d->be->ops->scale(d->be, d->grads[index], dst, d->inv_world, d->count[index]);
    if (--b->pending == 0) launch_ready(d);
}

void sg_ddp_set_sync(sg_ddp *d, int sync) {
    if (d) d->sync = sync != 0;
}

sg_status sg_ddp_wait(sg_ddp *d) {
    if (!d || d->local_only) return SG_OK;
    if (!d->sync) return SG_OK;
    double t0 = sg_now_s();
    /* every bucket, every step: gradients backward never reported (unused
     * branch) go in as they are (not an order problem: no warning) */
    int warned = d->order_warned;
    d->order_warned = 1;
    for (int k = 0; k < d->n_order; k++)
        if (!d->ready[d->order[k]]) sg_ddp_grad_ready(d, d->order[k]);
    d->order_warned = warned;
    pthread_mutex_lock(&d->mu);
    while (d->processed < d->nb) pthread_cond_wait(&d->cv, &d->mu);
    int fail = d->fail;
    d->processed = d->queued = 0;
    pthread_mutex_unlock(&d->mu);
    if (sg_backend_has(d->be, SG_CAP_ASYNC_STREAMS)) /* compute after the reduced grads */
        d->be->ops->stream_wait(d->be, SG_STREAM_COMPUTE, SG_STREAM_COMM);
    for (int i = 0; i < d->nb; i++) {
        ddp_bucket *b = &d->b[i];
        if (b->own && !fail)
            for (int k = 0; k < b->n; k++)
                d->be->ops->copy(d->be, d->grads[b->idx[k]], b->flat + d->flat_off[b->idx[k]],
                                 d->count[b->idx[k]] * sizeof(float));
        b->pending = b->n;
    }
    memset(d->ready, 0, (size_t)d->n * sizeof *d->ready);
    d->next_launch = 0;
    d->max_pos = -1;
    d->wait_s += sg_now_s() - t0;
    if (fail || sg_comm_broken(d->comm)) {
        SG_ERROR("rank %d: DDP gradient all-reduce failed (see the error above); stopping",
                 sg_comm_rank(d->comm));
        return SG_ERR_RUNTIME;
    }
    return SG_OK;
}

double sg_ddp_wait_seconds(const sg_ddp *d) { return d ? d->wait_s : 0.0; }
int sg_ddp_num_buckets(const sg_ddp *d) { return d ? d->nb : 0; }
size_t sg_ddp_bucket_floats(const sg_ddp *d, int i) {
    return d && i >= 0 && i < d->nb ? d->b[i].floats : 0;
}

/* Flat buffer of a bucket: the gradients themselves when they form one
 * contiguous range (no copy), else an allocation. */
static void bucket_place(sg_ddp *d, ddp_bucket *b) {
    float *lo = NULL, *hi = NULL;
    for (int k = 0; k < b->n; k++) {
        float *g = d->grads[b->idx[k]];
        float *e = g + d->count[b->idx[k]];
        if (!lo || g < lo) lo = g;
        if (!hi || e > hi) hi = e;
    }
    if ((size_t)(hi - lo) == b->floats) {
        b->flat = lo;
        b->own = 0;
        for (int k = 0; k < b->n; k++) d->flat_off[b->idx[k]] = (size_t)(d->grads[b->idx[k]] - lo);
    } else {
        b->flat = d->be->ops->alloc(d->be, b->floats * sizeof(float));
        b->own = 1;
        size_t off = 0;
        for (int k = 0; k < b->n; k++) {
            d->flat_off[b->idx[k]] = off;
            off += d->count[b->idx[k]];
        }
    }
}

sg_ddp *sg_ddp_create_raw(sg_comm *comm, float *const *grads, const size_t *count, int n,
                          const int *order, int n_order, double bucket_mb, double first_bucket_mb) {
    sg_ddp *d = calloc(1, sizeof *d);
    SG_CHECK(d, "out of memory");
    d->comm = comm;
    d->be = sg_comm_device_backend(comm);
    d->world = sg_comm_world(comm);
    d->local_only = strcmp(sg_comm_backend_name(comm), "single") == 0;
    d->inv_world = 1.0f / (float)d->world;
    d->sync = 1;
    d->n = n;
    d->grads = calloc((size_t)n + 1, sizeof *d->grads);
    d->count = calloc((size_t)n + 1, sizeof *d->count);
    d->bucket_of = malloc(((size_t)n + 1) * sizeof *d->bucket_of);
    d->ready = calloc((size_t)n + 1, sizeof *d->ready);
    d->flat_off = calloc((size_t)n + 1, sizeof *d->flat_off);
    d->order = malloc(((size_t)n_order + 1) * sizeof *d->order);
    d->pos = malloc(((size_t)n + 1) * sizeof *d->pos);
    SG_CHECK(d->grads && d->count && d->bucket_of && d->ready && d->flat_off && d->order && d->pos,
             "out of memory");
    d->max_pos = -1;
    for (int i = 0; i < n; i++) {
        d->grads[i] = grads[i];
        d->count[i] = count[i];
        d->bucket_of[i] = -1;
        d->pos[i] = -1;
    }
    /* buckets in backward order, closed once they reach their cap */
    d->b = calloc((size_t)n_order + 1, sizeof *d->b);
    SG_CHECK(d->b, "out of memory");
    double cap = first_bucket_mb * 1048576.0;
    ddp_bucket *cur = NULL;
    for (int k = 0; k < n_order; k++) {
        int i = order[k];
        if (i < 0 || i >= n || !grads[i] || count[i] == 0 || d->bucket_of[i] >= 0) {
            if (i >= 0 && i < n && grads[i] && d->bucket_of[i] >= 0)
                SG_WARN("DDP: gradient %d appears twice in the backward order (ignored)", i);
            continue;
        }
        if (!cur) {
            cur = &d->b[d->nb++];
            cur->idx = malloc((size_t)n_order * sizeof *cur->idx);
            SG_CHECK(cur->idx, "out of memory");
        }
        cur->idx[cur->n++] = i;
        cur->floats += count[i];
        d->bucket_of[i] = (int)(cur - d->b);
        d->pos[i] = d->n_order;
        d->order[d->n_order++] = i;
        if ((double)cur->floats * sizeof(float) >= cap) {
            cur = NULL;
            cap = bucket_mb * 1048576.0;
        }
    }
    for (int i = 0; i < d->nb; i++) {
        d->b[i].pending = d->b[i].n;
        bucket_place(d, &d->b[i]);
    }
    pthread_mutex_init(&d->mu, NULL);
    pthread_cond_init(&d->cv, NULL);
    if (!d->local_only) {
        /* born with every signal blocked (core/sigmask.h): signals go to
         * the training thread (its stop flag), not here */
        sigset_t old;
        sg_sigmask_block_all(&old);
        int e = pthread_create(&d->thread, NULL, comm_main, d);
        sg_sigmask_restore(&old);
        if (e) {
            SG_ERROR("DDP: cannot start the comm thread (pthread_create failed)");
            sg_ddp_destroy(d);
            return NULL;
        }
        d->thread_running = 1;
    }
    return d;
}

void sg_ddp_destroy(sg_ddp *d) {
    if (!d) return;
    if (d->model) sg_model_set_hooks(d->model, NULL);
    if (d->thread_running) {
        pthread_mutex_lock(&d->mu);
        while (d->processed < d->queued) pthread_cond_wait(&d->cv, &d->mu);
        d->stop = 1;
        pthread_cond_broadcast(&d->cv);
        pthread_mutex_unlock(&d->mu);
        pthread_join(d->thread, NULL);
    }
    for (int i = 0; i < d->nb; i++) {
        if (d->b[i].own) d->be->ops->free(d->be, d->b[i].flat);
        free(d->b[i].idx);
    }
    free(d->b);
    free(d->grads);
    free(d->count);
    free(d->bucket_of);
    free(d->ready);
    free(d->flat_off);
    free(d->order);
    free(d->pos);
    free(d);
}
