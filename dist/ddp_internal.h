/* dist/ddp_internal.h - internal: the sg_ddp struct, shared by dist/ddp.c
 * (buckets, comm thread) and dist/ddp_model.c (model attachment). */
#ifndef SG_DIST_DDP_INTERNAL_H
#define SG_DIST_DDP_INTERNAL_H

#include <pthread.h>

#include "dist/ddp.h"

typedef struct ddp_bucket {
    int *idx; /* gradient indices, in backward order */
    int n;
    size_t floats;
    float *flat; /* the gradients themselves (in place) or own allocation */
    int own;
    int pending; /* gradients not yet ready this step */
} ddp_bucket;

struct sg_ddp {
    sg_comm *comm;
    sg_backend *be;
    sg_model *model; /* NULL for the raw interface */
    int world;
    /* no transport (world 1, not forced): every call returns at once. A
     * world of 1 with SG_DIST_FORCE_TRANSPORT runs the whole path, buckets
     * and comm stream included, as PyTorch's DDP does at world size 1 */
    int local_only;
    float inv_world;
    int sync;
    /* gradients */
    int n;
    float **grads;
    size_t *count;
    int *bucket_of;   /* -1: frozen, in no bucket */
    int *ready;       /* reported this step */
    size_t *flat_off; /* offset in its bucket's flat buffer */
    int *order;       /* bucketed gradients in backward order */
    int n_order;
    ddp_bucket *b;
    int nb;
    int next_launch;  /* first bucket not yet handed to the thread */
    int *pos;         /* position of each gradient in `order` (-1: none) */
    int max_pos;      /* highest position reported this step */
    int order_warned; /* backward's order differed from `order` (told once) */
    /* comm thread (shared state under mu) */
    pthread_t thread;
    int thread_running;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int queued, processed, fail, stop;
    double wait_s;
};

#endif
