/* data/loader.h - the threaded batch loader: a pthread worker pool decoding
 * and augmenting samples into a bounded ring of ready batches, delivered in
 * order.
 *
 * The trainer composes it with the sampler: each epoch it passes this rank's
 * list of dataset indices (sg_loader_start), then takes batches with
 * sg_loader_next until it returns 0. Batch k holds indices[k*B .. k*B+B) (the
 * last one may be smaller). A batch's content is a pure function of (seed,
 * epoch, its indices): bit-identical whatever `workers` is or how threads run.
 *
 * Train mode: every sample is scaled / cropped to crop_h x crop_w (the
 * position redrawn by cat_max_ratio) / flipped / photometrically distorted
 * (data/transforms.h). Eval mode: no transforms, full images; consecutive
 * samples of equal size share a batch (up to batch_size), a size change starts
 * a new batch (sizes come from the PNG headers at sg_loader_start).
 *
 * Batches are uint8 and contiguous: images [n,h,w,3] (HWC, RGB), labels
 * [n,h,w]; the backend normalizes with data.mean/std. Their memory comes from
 * opts.host_alloc (pinned memory on CUDA), default malloc, always called on
 * the caller's thread (in sg_loader_start), never on a worker. The caller may
 * hold up to `prefetch` batches at once (release them in any order); asking
 * for more while holding all slots is an error, not a deadlock. workers = 0
 * decodes on the caller's thread inside sg_loader_next (debugging).
 *
 * Errors (corrupt PNG, size mismatch, invalid label) in a worker reach the
 * caller: sg_loader_next logs the message (naming the file) and returns -1;
 * the rest of the epoch is cancelled. Workers block SIGINT/SIGTERM so signals
 * reach the main thread; sg_loader_destroy stops and joins them at any time,
 * mid-epoch included. No fork.
 */
#ifndef SG_DATA_LOADER_H
#define SG_DATA_LOADER_H

#include <stddef.h>
#include <stdint.h>

#include "core/status.h"
#include "data/dataset.h"
#include "data/transforms.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef void *(*sg_host_alloc_fn)(void *ctx, size_t bytes);
typedef void (*sg_host_free_fn)(void *ctx, void *p);

typedef struct sg_loader_opts {
    int train;                   /* 1 = augment to crops, 0 = eval (full images) */
    int batch_size;              /* per rank */
    int crop_h, crop_w;          /* train */
    double scale_range[2];       /* train: random scale lo, hi */
    int hflip;                   /* train: bool */
    double cat_max_ratio;        /* train: mmseg RandomCrop's, in (0, 1]; 1 = off */
    sg_photo_opts photo;         /* train: mmseg's PhotoMetricDistortion */
    int ignore_index;            /* padding value for masks; not counted as valid */
    uint64_t seed;               /* augmentation seed (config seed) */
    int workers;                 /* threads; 0 = decode in sg_loader_next */
    int prefetch;                /* ready batches queued ahead (>= 1) */
    sg_host_alloc_fn host_alloc; /* NULL = malloc */
    sg_host_free_fn host_free;   /* NULL = free */
    void *host_ctx;
} sg_loader_opts;

typedef struct sg_batch {
    int n, h, w;
    uint8_t *images;      /* [n,h,w,3] */
    uint8_t *labels;      /* [n,h,w] */
    int64_t *indices;     /* [n] dataset indices */
    int64_t valid_pixels; /* labels != ignore_index (global loss normalization) */
    int64_t epoch;
    int64_t seq; /* batch number within the list, from 0 */
} sg_batch;

typedef struct sg_loader_stats {
    int64_t images, batches; /* produced since create */
    double decode_s;         /* worker seconds spent decoding + augmenting */
    double worker_wait_s;    /* worker seconds blocked on a full queue */
    double consumer_wait_s;  /* caller seconds blocked in sg_loader_next */
    double wall_s;           /* seconds since create */
} sg_loader_stats;

typedef struct sg_loader sg_loader;

/* Fills opts from the config's data section and the train batch size. */
void sg_loader_opts_from_config(sg_loader_opts *o, const sg_data_cfg *d, int train, int batch_size,
                                uint64_t seed);

/* Creates the loader and starts its workers (idle until sg_loader_start).
 * Returns NULL after logging an error (bad options, thread creation). */
sg_loader *sg_loader_create(const sg_dataset *ds, const sg_loader_opts *opts);

/* Begins a list: indices[n] (copied) for epoch `epoch`. Cancels whatever the
 * previous list had left. Every batch must have been released. Returns SG_OK
 * or SG_ERR_RUNTIME (logged). */
sg_status sg_loader_start(sg_loader *l, const int64_t *indices, int64_t n, int64_t epoch);

/* Next batch in order: 1 = *out is a batch (release it), 0 = end of list,
 * -1 = error, already logged (the message is also in sg_loader_error). A
 * three-way answer, so an int rather than sg_status. */
int sg_loader_next(sg_loader *l, sg_batch **out);
void sg_loader_release(sg_loader *l, sg_batch *b);

/* Number of batches the current list makes. */
int64_t sg_loader_num_batches(const sg_loader *l);
const char *sg_loader_error(const sg_loader *l);
void sg_loader_get_stats(const sg_loader *l, sg_loader_stats *st);

/* Stops and joins the workers (mid-epoch too) and frees everything. NULL-safe. */
void sg_loader_destroy(sg_loader *l);

#ifdef __cplusplus
}
#endif

#endif
