/* data/loader.c - see loader.h.
 *
 * Jobs are batches: job j covers list[job_start[j] .. job_start[j+1]). Job j
 * is built in slot j % nslots, and a worker may claim it only when that slot
 * is free (its previous job delivered and released), so at most nslots
 * batches exist and they come out in order. A batch's bytes depend only on
 * its job (indices, epoch, seed), never on which worker built it or when.
 * Slot buffers are allocated on the caller's thread (create / start), so a
 * host_alloc callback (cudaHostAlloc) never runs on a worker.
 */
#include "data/loader.h"

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/log.h"
#include "core/sigmask.h"
#include "core/util.h"
#include "data/transforms.h"
#include "io/image.h"

enum { SLOT_FREE, SLOT_WORKING, SLOT_READY, SLOT_FAILED, SLOT_HELD };

typedef struct slot {
    sg_batch b;
    size_t cap_px; /* pixels the buffers hold (images hold 3x bytes) */
    int cap_n;
    int state;
    int64_t job;
    char err[SG_DATA_ERR_LEN];
} slot;

struct sg_loader {
    const sg_dataset *ds;
    sg_loader_opts o;
    sg_aug_opts aug;

    pthread_mutex_t mu;
    pthread_cond_t cv_work;  /* workers wait: a job or a free slot */
    pthread_cond_t cv_ready; /* consumer / start wait: a slot changed */
    pthread_t *threads;
    int nthreads;
    int stop;
    int busy; /* workers building a batch now */

    int64_t *list, n_list, epoch;
    int64_t *job_start, n_jobs;
    int *job_h, *job_w; /* eval: full-image size per job */
    int64_t next_job, next_out;
    int failed;
    char err[SG_DATA_ERR_LEN];

    slot *slots;
    int nslots;

    sg_loader_stats st;
    double t_create;
};

static void *host_alloc(sg_loader *l, size_t bytes) {
    return l->o.host_alloc ? l->o.host_alloc(l->o.host_ctx, bytes) : malloc(bytes);
}
static void host_free(sg_loader *l, void *p) {
    if (!p) return;
    if (l->o.host_free) l->o.host_free(l->o.host_ctx, p);
    else free(p);
}

void sg_loader_opts_from_config(sg_loader_opts *o, const sg_data_cfg *d, int train, int batch_size,
                                uint64_t seed) {
    memset(o, 0, sizeof *o);
    o->train = train;
    o->batch_size = batch_size;
    o->crop_h = d->crop_size[0];
    o->crop_w = d->crop_size[1];
    o->scale_range[0] = d->scale_range[0];
    o->scale_range[1] = d->scale_range[1];
    o->hflip = d->hflip;
    o->cat_max_ratio = d->cat_max_ratio;
    o->photo.enabled = d->photometric;
    o->photo.brightness_delta = d->brightness_delta;
    o->photo.contrast_lo = d->contrast_range[0];
    o->photo.contrast_hi = d->contrast_range[1];
    o->photo.saturation_lo = d->saturation_range[0];
    o->photo.saturation_hi = d->saturation_range[1];
    o->photo.hue_delta = d->hue_delta;
    o->ignore_index = d->ignore_index;
    o->seed = seed;
    o->workers = d->workers;
    o->prefetch = d->prefetch;
}

/* Builds job j into slot s (any thread). Returns SG_OK, or SG_ERR_RUNTIME with
 * s->err naming the file that failed. */
static sg_status build(sg_loader *l, int64_t j, slot *s) {
    int64_t first = l->job_start[j], n = l->job_start[j + 1] - first;
    int h = l->o.train ? l->o.crop_h : l->job_h[j];
    int w = l->o.train ? l->o.crop_w : l->job_w[j];
    size_t px = (size_t)h * w;
    sg_batch *b = &s->b;
    b->n = (int)n;
    b->h = h;
    b->w = w;
    b->epoch = l->epoch;
    b->seq = j;
    b->valid_pixels = 0;
    for (int64_t k = 0; k < n; k++) {
        int64_t idx = l->list[first + k];
        sg_img img, mask;
        b->indices[k] = idx;
        if (sg_dataset_load(l->ds, idx, &img, &mask, s->err, sizeof s->err) != SG_OK)
            return SG_ERR_RUNTIME;
        uint8_t *oi = b->images + (size_t)k * px * 3, *om = b->labels + (size_t)k * px;
        if (l->o.train) {
            sg_aug_draw d;
            if (sg_aug_make_draw(&l->aug, l->o.seed, l->epoch, idx, mask.data, img.h, img.w, &d) !=
                    SG_OK ||
                sg_aug_apply(&l->aug, &d, img.data, mask.data, img.h, img.w, oi, om) != SG_OK) {
                snprintf(s->err, sizeof s->err, "out of memory augmenting %s",
                         sg_dataset_image_path(l->ds, idx));
                sg_img_free(&img);
                sg_img_free(&mask);
                return SG_ERR_RUNTIME;
            }
        } else {
            if (img.h != h || img.w != w) { /* the file changed since start read its header */
                snprintf(s->err, sizeof s->err,
                         "%s is %dx%d now but its header said %dx%d when the epoch started "
                         "(was the file replaced during the run?)",
                         sg_dataset_image_path(l->ds, idx), img.h, img.w, h, w);
                sg_img_free(&img);
                sg_img_free(&mask);
                return SG_ERR_RUNTIME;
            }
            memcpy(oi, img.data, px * 3);
            memcpy(om, mask.data, px);
        }
        sg_img_free(&img);
        sg_img_free(&mask);
        int64_t valid = 0;
        for (size_t p = 0; p < px; p++) valid += om[p] != (uint8_t)l->o.ignore_index;
        b->valid_pixels += valid;
    }
    return SG_OK;
}

static void *worker_main(void *arg) {
    sg_loader *l = arg;
    pthread_mutex_lock(&l->mu);
    while (!l->stop) {
        int64_t j = l->next_job;
        if (j >= l->n_jobs) {
            pthread_cond_wait(&l->cv_work, &l->mu);
            continue;
        }
        slot *s = &l->slots[j % l->nslots];
        if (s->state != SLOT_FREE) { /* queue full: wait for the consumer */
            double t0 = sg_now_s();
            pthread_cond_wait(&l->cv_work, &l->mu);
            l->st.worker_wait_s += sg_now_s() - t0;
            continue;
        }
        l->next_job = j + 1;
        s->state = SLOT_WORKING;
        s->job = j;
        l->busy++;
        pthread_mutex_unlock(&l->mu);

        double t0 = sg_now_s();
        sg_status rc = build(l, j, s);
        double dt = sg_now_s() - t0;

        pthread_mutex_lock(&l->mu);
        l->busy--;
        l->st.decode_s += dt;
        if (rc == SG_OK) {
            l->st.images += s->b.n;
            l->st.batches++;
        }
        s->state = rc == SG_OK ? SLOT_READY : SLOT_FAILED;
        pthread_cond_broadcast(&l->cv_ready);
    }
    pthread_mutex_unlock(&l->mu);
    return NULL;
}

/* PhotoMetricDistortion's arguments (the configuration's ranges, checked
 * again for options built by hand); logs the one out of range. */
static int photo_opts_ok(const sg_photo_opts *p) {
    if (!(p->brightness_delta >= 0 && p->brightness_delta <= 255)) {
        SG_ERROR("data loader: data.brightness_delta %g must be in 0..255 (mmseg's default 32)",
                 p->brightness_delta);
        return 0;
    }
    const double *r[2][2] = {{&p->contrast_lo, &p->contrast_hi},
                             {&p->saturation_lo, &p->saturation_hi}};
    for (int i = 0; i < 2; i++)
        if (!(*r[i][0] >= 0 && *r[i][0] <= *r[i][1] && *r[i][1] <= 100)) {
            SG_ERROR("data loader: data.%s [%g, %g] must satisfy 0 <= min <= max <= 100 "
                     "(mmseg's default [0.5, 1.5])",
                     i ? "saturation_range" : "contrast_range", *r[i][0], *r[i][1]);
            return 0;
        }
    if (p->hue_delta < 0 || p->hue_delta > 180) {
        SG_ERROR("data loader: data.hue_delta %d must be in 0..180 (mmseg's default 18)",
                 p->hue_delta);
        return 0;
    }
    return 1;
}

sg_loader *sg_loader_create(const sg_dataset *ds, const sg_loader_opts *opts) {
    const sg_loader_opts *o = opts;
    if (o->batch_size < 1 || o->workers < 0 || o->workers > 256 || o->prefetch < 1 ||
        o->prefetch > 1024) {
        SG_ERROR("data loader: batch_size %d (>= 1), data.workers %d (0..256), data.prefetch %d "
                 "(1..1024) out of range",
                 o->batch_size, o->workers, o->prefetch);
        return NULL;
    }
    if (o->train && (o->crop_h < 1 || o->crop_w < 1 || !(o->scale_range[0] > 0) ||
                     o->scale_range[1] < o->scale_range[0])) {
        SG_ERROR("data loader: data.crop_size %dx%d must be positive and data.scale_range "
                 "[%g, %g] must satisfy 0 < lo <= hi",
                 o->crop_h, o->crop_w, o->scale_range[0], o->scale_range[1]);
        return NULL;
    }
    if (o->train && !(o->cat_max_ratio > 0 && o->cat_max_ratio <= 1)) {
        SG_ERROR("data loader: data.cat_max_ratio %g must be in (0, 1] (1 = off)",
                 o->cat_max_ratio);
        return NULL;
    }
    if (o->train && o->photo.enabled && !photo_opts_ok(&o->photo)) return NULL;
    if (o->ignore_index < 0 || o->ignore_index > 255) {
        SG_ERROR("data loader: ignore_index %d must be in 0..255", o->ignore_index);
        return NULL;
    }
    if ((o->host_alloc == NULL) != (o->host_free == NULL)) {
        SG_ERROR("data loader: host_alloc and host_free must be given together");
        return NULL;
    }
    sg_loader *l = calloc(1, sizeof *l);
    SG_CHECK(l != NULL, "out of memory");
    l->ds = ds;
    l->o = *o;
    l->aug.scale_lo = o->scale_range[0];
    l->aug.scale_hi = o->scale_range[1];
    l->aug.crop_h = o->crop_h;
    l->aug.crop_w = o->crop_w;
    l->aug.hflip = o->hflip;
    l->aug.cat_max_ratio = o->cat_max_ratio;
    l->aug.photo = o->photo;
    l->aug.ignore_index = o->ignore_index;
    l->t_create = sg_now_s();
    l->nslots = o->prefetch + (o->workers > 0 ? o->workers : 1);
    l->slots = calloc((size_t)l->nslots, sizeof(slot));
    SG_CHECK(l->slots != NULL, "out of memory");
    pthread_mutex_init(&l->mu, NULL);
    pthread_cond_init(&l->cv_work, NULL);
    pthread_cond_init(&l->cv_ready, NULL);

    /* Workers get every asynchronous signal blocked: SIGINT / SIGTERM reach
     * the main thread, which shuts down through sg_loader_destroy. */
    sigset_t old;
    sg_sigmask_block_all(&old); /* core/sigmask.h */
    l->threads = calloc((size_t)(o->workers > 0 ? o->workers : 1), sizeof(pthread_t));
    SG_CHECK(l->threads != NULL, "out of memory");
    for (int i = 0; i < o->workers; i++) {
        int rc = pthread_create(&l->threads[i], NULL, worker_main, l);
        if (rc != 0) {
            sg_sigmask_restore(&old);
            SG_ERROR("data loader: cannot start worker thread %d of %d: %s (lower data.workers)",
                     i + 1, o->workers, strerror(rc));
            sg_loader_destroy(l);
            return NULL;
        }
        l->nthreads++;
        /* "sg-load-N" in top -H, gdb and /proc/<pid>/task/<tid>/comm; a name
         * is a convenience, so a failure (a name too long) is not an error. */
        char name[16];
        snprintf(name, sizeof name, "sg-load-%u", (unsigned)i % 1000u);
        (void)pthread_setname_np(l->threads[i], name);
    }
    sg_sigmask_restore(&old);
    return l;
}

/* Makes every slot hold n_max samples of px_max pixels (caller's thread).
 * SG_OK, or SG_ERR_RUNTIME after logging the allocation that failed. */
static sg_status ensure_buffers(sg_loader *l, int n_max, size_t px_max) {
    for (int i = 0; i < l->nslots; i++) {
        slot *s = &l->slots[i];
        if (s->cap_n >= n_max && s->cap_px >= px_max) continue;
        host_free(l, s->b.images);
        host_free(l, s->b.labels);
        free(s->b.indices);
        size_t n = (size_t)n_max;
        s->b.images = host_alloc(l, n * px_max * 3);
        s->b.labels = host_alloc(l, n * px_max);
        s->b.indices = malloc(sizeof(int64_t) * n);
        if (!s->b.images || !s->b.labels || !s->b.indices) {
            SG_ERROR("data loader: cannot allocate %d batch buffers of %zu bytes (%d x %zu px); "
                     "lower data.prefetch / data.workers / the batch size",
                     l->nslots, n * px_max * 4, n_max, px_max);
            host_free(l, s->b.images);
            host_free(l, s->b.labels);
            free(s->b.indices);
            memset(&s->b, 0, sizeof s->b);
            s->cap_n = 0;
            s->cap_px = 0;
            return SG_ERR_RUNTIME;
        }
        s->cap_n = n_max;
        s->cap_px = px_max;
    }
    return SG_OK;
}

sg_status sg_loader_start(sg_loader *l, const int64_t *indices, int64_t n, int64_t epoch) {
    pthread_mutex_lock(&l->mu);
    for (int i = 0; i < l->nslots; i++) {
        if (l->slots[i].state == SLOT_HELD) {
            pthread_mutex_unlock(&l->mu);
            SG_ERROR("data loader: sg_loader_start while batch %lld is still held: release "
                     "every batch first",
                     (long long)l->slots[i].b.seq);
            return SG_ERR_RUNTIME;
        }
    }
    /* Cancel the previous list: no new claims, wait for the builds running. */
    l->n_jobs = 0;
    while (l->busy > 0) pthread_cond_wait(&l->cv_ready, &l->mu);
    for (int i = 0; i < l->nslots; i++) l->slots[i].state = SLOT_FREE;
    pthread_mutex_unlock(&l->mu);
    /* Workers are idle now (n_jobs = 0): the list can change without the lock. */

    for (int64_t k = 0; k < n; k++) {
        if (indices[k] < 0 || indices[k] >= sg_dataset_size(l->ds)) {
            SG_ERROR("data loader: index %lld at position %lld is outside the dataset (%lld "
                     "samples)",
                     (long long)indices[k], (long long)k, (long long)sg_dataset_size(l->ds));
            return SG_ERR_RUNTIME;
        }
    }
    free(l->list);
    free(l->job_start);
    free(l->job_h);
    free(l->job_w);
    l->list = malloc(sizeof(int64_t) * (size_t)(n > 0 ? n : 1));
    l->job_start = malloc(sizeof(int64_t) * (size_t)(n + 1));
    l->job_h = malloc(sizeof(int) * (size_t)(n > 0 ? n : 1));
    l->job_w = malloc(sizeof(int) * (size_t)(n > 0 ? n : 1));
    SG_CHECK(l->list && l->job_start && l->job_h && l->job_w, "out of memory");
    if (n > 0) memcpy(l->list, indices, sizeof(int64_t) * (size_t)n);
    l->n_list = n;
    l->epoch = epoch;

    int64_t jobs = 0;
    int n_max = l->o.batch_size;
    size_t px_max = (size_t)l->o.crop_h * l->o.crop_w;
    if (l->o.train) {
        for (int64_t k = 0; k < n; k += l->o.batch_size) l->job_start[jobs++] = k;
    } else {
        /* Eval: consecutive samples of one size share a batch. */
        px_max = 0;
        int ph = -1, pw = -1, cnt = 0;
        for (int64_t k = 0; k < n; k++) {
            int h, w;
            char err[SG_DATA_ERR_LEN];
            if (sg_image_read_size(sg_dataset_image_path(l->ds, l->list[k]), &h, &w, err,
                                   sizeof err) != SG_OK) {
                snprintf(l->err, sizeof l->err, "%s", err);
                SG_ERROR("data loader: %s", err);
                return SG_ERR_RUNTIME;
            }
            if (h != ph || w != pw || cnt == l->o.batch_size) {
                l->job_h[jobs] = h;
                l->job_w[jobs] = w;
                l->job_start[jobs++] = k;
                ph = h;
                pw = w;
                cnt = 0;
            }
            cnt++;
            if ((size_t)h * w > px_max) px_max = (size_t)h * w;
        }
    }
    l->job_start[jobs] = n;
    if (n > 0 && ensure_buffers(l, n_max, px_max) != SG_OK) return SG_ERR_RUNTIME;

    pthread_mutex_lock(&l->mu);
    l->failed = 0;
    l->err[0] = 0;
    l->next_job = 0;
    l->next_out = 0;
    l->n_jobs = jobs;
    pthread_cond_broadcast(&l->cv_work);
    pthread_mutex_unlock(&l->mu);
    return SG_OK;
}

int sg_loader_next(sg_loader *l, sg_batch **out) {
    *out = NULL;
    pthread_mutex_lock(&l->mu);
    if (l->failed) {
        pthread_mutex_unlock(&l->mu);
        SG_ERROR("data loader: the list was stopped by an earlier error: %s", l->err);
        return -1;
    }
    int64_t j = l->next_out;
    if (j >= l->n_jobs) {
        pthread_mutex_unlock(&l->mu);
        return 0;
    }
    slot *s = &l->slots[j % l->nslots];
    if (s->state == SLOT_HELD) {
        pthread_mutex_unlock(&l->mu);
        SG_ERROR("data loader: batch %lld is still held while asking for batch %lld: hold at "
                 "most data.prefetch (%d) batches at once",
                 (long long)s->b.seq, (long long)j, l->o.prefetch);
        return -1;
    }
    if (l->nthreads == 0) { /* no workers: build here */
        s->state = SLOT_WORKING;
        s->job = j;
        pthread_mutex_unlock(&l->mu);
        double t0 = sg_now_s();
        sg_status rc = build(l, j, s);
        double dt = sg_now_s() - t0;
        pthread_mutex_lock(&l->mu);
        l->st.decode_s += dt;
        l->st.consumer_wait_s += dt;
        if (rc == SG_OK) {
            l->st.images += s->b.n;
            l->st.batches++;
        }
        s->state = rc == SG_OK ? SLOT_READY : SLOT_FAILED;
    } else {
        double t0 = sg_now_s();
        while (!(s->job == j && (s->state == SLOT_READY || s->state == SLOT_FAILED)))
            pthread_cond_wait(&l->cv_ready, &l->mu);
        l->st.consumer_wait_s += sg_now_s() - t0;
    }
    if (s->state == SLOT_FAILED) {
        snprintf(l->err, sizeof l->err, "%s", s->err);
        l->failed = 1;
        l->n_jobs = l->next_job; /* no new claims; builds in flight finish and are dropped */
        s->state = SLOT_FREE;
        pthread_cond_broadcast(&l->cv_work);
        pthread_mutex_unlock(&l->mu);
        SG_ERROR("data loader: %s", l->err);
        return -1;
    }
    s->state = SLOT_HELD;
    l->next_out = j + 1;
    *out = &s->b;
    pthread_mutex_unlock(&l->mu);
    return 1;
}

void sg_loader_release(sg_loader *l, sg_batch *b) {
    if (!b) return;
    pthread_mutex_lock(&l->mu);
    for (int i = 0; i < l->nslots; i++) {
        if (&l->slots[i].b == b && l->slots[i].state == SLOT_HELD) {
            l->slots[i].state = SLOT_FREE;
            pthread_cond_broadcast(&l->cv_work);
        }
    }
    pthread_mutex_unlock(&l->mu);
}

int64_t sg_loader_num_batches(const sg_loader *l) { return l->n_jobs; }
const char *sg_loader_error(const sg_loader *l) { return l->err; }

void sg_loader_get_stats(const sg_loader *l, sg_loader_stats *st) {
    sg_loader *m = (sg_loader *)l; /* the mutex is not part of the observable state */
    pthread_mutex_lock(&m->mu);
    *st = l->st;
    pthread_mutex_unlock(&m->mu);
    st->wall_s = sg_now_s() - l->t_create;
}

void sg_loader_destroy(sg_loader *l) {
    if (!l) return;
    pthread_mutex_lock(&l->mu);
    l->stop = 1;
    pthread_cond_broadcast(&l->cv_work);
    pthread_mutex_unlock(&l->mu);
    for (int i = 0; i < l->nthreads; i++) pthread_join(l->threads[i], NULL);
    for (int i = 0; i < l->nslots; i++) {
        host_free(l, l->slots[i].b.images);
        host_free(l, l->slots[i].b.labels);
        free(l->slots[i].b.indices);
    }
    pthread_mutex_destroy(&l->mu);
    pthread_cond_destroy(&l->cv_work);
    pthread_cond_destroy(&l->cv_ready);
    free(l->slots);
    free(l->threads);
    free(l->list);
    free(l->job_start);
    free(l->job_h);
    free(l->job_w);
    free(l);
}
