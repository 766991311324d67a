/* kernels/weight_cache.c - see weight_cache.h. A linear table (a network
 * has a few hundred weight tensors at most, looked up a few hundred times a
 * step) behind one mutex, and a lock-free bounding-box test that lets the
 * frequent writes to other memory (activations, images, gradients) pass.
 */
#include "kernels/weight_cache.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "core/test_seams.h"

typedef struct wc_entry {
    uintptr_t src, end; /* source range [src, end) */
    uint64_t tag;
    void *copy;
    size_t copy_bytes;
    int valid; /* 0: the source was written since the copy was filled */
} wc_entry;

struct sg_wcache {
    pthread_mutex_t mu;
    wc_entry *e;
    int n, cap;
    uintptr_t lo, hi; /* box spanning every source; read with atomics */
    int enabled;
    uint64_t refills;
    sg_wcache_alloc_fn alloc;
    sg_wcache_free_fn release;
    void *ctx;
};

/* Whether the cache keeps its copies: 1, or 0 with the test seam
 * SG_WEIGHT_CACHE=0 (core/test_seams.h; to show the cached run is
 * bit-identical to converting on every call); -1 after logging a malformed
 * value. Always 1 in a build without test seams. */
static int cache_on(void) {
#if SG_TEST_SEAMS
    const char *env = sg_test_seam("SG_WEIGHT_CACHE");
    if (!env || !*env || strcmp(env, "1") == 0) return 1;
    if (strcmp(env, "0") == 0) return 0;
    SG_ERROR("environment SG_WEIGHT_CACHE='%s': expected 0 (convert weights on every "
             "convolution, a test seam) or 1 (cache the converted weights; the default)",
             env);
    return -1;
#else
    return 1;
#endif
}

sg_wcache *sg_wcache_create(sg_wcache_alloc_fn alloc, sg_wcache_free_fn release, void *ctx) {
    int on = cache_on();
    if (on < 0) return NULL;
    sg_wcache *wc = calloc(1, sizeof *wc);
    if (!wc) SG_FATAL("out of host memory creating the weight cache");
    pthread_mutex_init(&wc->mu, NULL);
    wc->lo = UINTPTR_MAX;
    wc->hi = 0;
    wc->enabled = on;
    wc->alloc = alloc;
    wc->release = release;
    wc->ctx = ctx;
    return wc;
}

void sg_wcache_destroy(sg_wcache *wc) {
    if (!wc) return;
    size_t bytes = 0;
    for (int i = 0; i < wc->n; i++) bytes += wc->e[i].copy_bytes;
    SG_DEBUG("weight cache: %d bf16 weight copies (%.1f MiB), %llu conversions%s", wc->n,
             bytes / 1048576.0, (unsigned long long)wc->refills,
             wc->enabled ? "" : " (the cache off: converted on every call)");
    for (int i = 0; i < wc->n; i++) wc->release(wc->ctx, wc->e[i].copy, wc->e[i].copy_bytes);
    free(wc->e);
    pthread_mutex_destroy(&wc->mu);
    free(wc);
}

/* The box over the remaining sources (after removals; under the lock). */
static void recompute_box(sg_wcache *wc) {
    uintptr_t lo = UINTPTR_MAX, hi = 0;
    for (int i = 0; i < wc->n; i++) {
        if (wc->e[i].src < lo) lo = wc->e[i].src;
        if (wc->e[i].end > hi) hi = wc->e[i].end;
    }
    __atomic_store_n(&wc->lo, lo, __ATOMIC_RELEASE);
    __atomic_store_n(&wc->hi, hi, __ATOMIC_RELEASE);
}

void *sg_wcache_get(sg_wcache *wc, const void *src, size_t src_bytes, uint64_t tag,
                    size_t copy_bytes, int *refill) {
    uintptr_t s = (uintptr_t)src, end = s + src_bytes;
    pthread_mutex_lock(&wc->mu);
    wc_entry *hit = NULL;
    for (int i = 0; i < wc->n; i++)
        if (wc->e[i].src == s && wc->e[i].end == end && wc->e[i].tag == tag &&
            wc->e[i].copy_bytes == copy_bytes) {
            hit = &wc->e[i];
            break;
        }
    if (!hit) {
        if (wc->n == wc->cap) {
            int cap = wc->cap ? wc->cap * 2 : 64;
            wc_entry *ne = realloc(wc->e, (size_t)cap * sizeof *ne);
            if (!ne) SG_FATAL("out of host memory growing the weight cache to %d entries", cap);
            wc->e = ne;
            wc->cap = cap;
        }
        hit = &wc->e[wc->n++];
        memset(hit, 0, sizeof *hit);
        hit->src = s;
        hit->end = end;
        hit->tag = tag;
        hit->copy_bytes = copy_bytes;
        hit->copy = wc->alloc(wc->ctx, copy_bytes);
        /* widen the box before the copy is filled, so a write racing with
         * this get is seen as one to a cached source */
        if (s < wc->lo) __atomic_store_n(&wc->lo, s, __ATOMIC_RELEASE);
        if (end > wc->hi) __atomic_store_n(&wc->hi, end, __ATOMIC_RELEASE);
    }
    *refill = !hit->valid || !wc->enabled;
    if (*refill) wc->refills++;
    hit->valid = 1;
    void *copy = hit->copy;
    pthread_mutex_unlock(&wc->mu);
    return copy;
}

void sg_wcache_written(sg_wcache *wc, const void *p, size_t bytes) {
    if (!wc) return;
    uintptr_t s = (uintptr_t)p, end = s + bytes;
    if (p) {
        uintptr_t lo = __atomic_load_n(&wc->lo, __ATOMIC_ACQUIRE);
        uintptr_t hi = __atomic_load_n(&wc->hi, __ATOMIC_ACQUIRE);
        if (end <= lo || s >= hi) return; /* nowhere near a cached source */
    }
    pthread_mutex_lock(&wc->mu);
    for (int i = 0; i < wc->n; i++)
        if (!p || (s < wc->e[i].end && end > wc->e[i].src)) wc->e[i].valid = 0;
    pthread_mutex_unlock(&wc->mu);
}

void sg_wcache_freed(sg_wcache *wc, const void *p, size_t bytes) {
    if (!wc || !p) return;
    uintptr_t s = (uintptr_t)p, end = s + (bytes ? bytes : 1);
    pthread_mutex_lock(&wc->mu);
    int kept = 0, removed = 0;
    for (int i = 0; i < wc->n; i++) {
        if (wc->e[i].src >= s && wc->e[i].src < end) {
            wc->release(wc->ctx, wc->e[i].copy, wc->e[i].copy_bytes);
            removed++;
        } else {
            wc->e[kept++] = wc->e[i];
        }
    }
    wc->n = kept;
    if (removed) recompute_box(wc);
    pthread_mutex_unlock(&wc->mu);
}

void sg_wcache_stats(const sg_wcache *wc, int *copies, size_t *bytes, uint64_t *refills) {
    sg_wcache *w = (sg_wcache *)wc;
    pthread_mutex_lock(&w->mu);
    size_t b = 0;
    for (int i = 0; i < w->n; i++) b += w->e[i].copy_bytes;
    *copies = w->n;
    *bytes = b;
    *refills = w->refills;
    pthread_mutex_unlock(&w->mu);
}
