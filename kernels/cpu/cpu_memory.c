/* kernels/cpu/cpu_memory.c - the CPU backend's memory and stream ops (the
 * memory group of tests/backend/run_memory.c; the CPU side of
 * kernels/cuda/cuda_memory.cu).
 *
 * Owns host memory: 64-byte aligned allocations (sg_cpu_aligned_alloc, used
 * by every file of the backend for its own buffers), the in-use / peak
 * accounting of ops->alloc that get_info reports, the backend's float32
 * scratch buffers of the bf16-storage ops (sg_cpu_act_buf), and telling the
 * bf16 weight copies which memory an op wrote (sg_cpu_written). Every op
 * runs synchronously, so upload / download / copy are memcpy, the stream
 * ops do nothing and any thread may call any op (bind_thread is a no-op).
 *
 * This file calls nothing of the backend's other files (only
 * kernels/weight_cache.h): every op file may use it without a loop.
 */
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "kernels/cpu/cpu_internal.h"
#include "kernels/weight_cache.h"

/* Every ops->alloc allocation carries a 64-byte header holding its size, so
 * free can account for it; the user pointer stays 64-byte aligned. */
#define HDR 64

void *sg_cpu_aligned_alloc(size_t bytes) {
    void *p = NULL;
    size_t total = (bytes + 63) / 64 * 64;
    if (total == 0) total = 64;
    if (posix_memalign(&p, 64, total) != 0 || !p)
        SG_FATAL("CPU backend: out of host memory allocating %zu bytes "
                 "(reduce batch size / crop size, or free memory on this machine)",
                 bytes);
    memset(p, 0, total);
    return p;
}

void sg_cpu_aligned_free(void *p) { free(p); }

void sg_cpu_written(sg_backend *be, const void *p, size_t bytes) {
    sg_wcache_written(sg_cpu_of(be)->wcache, p, bytes);
}

/* Buffer `slot` of at least `count` floats. */
float *sg_cpu_act_buf(sg_backend *be, int slot, size_t count) {
    sg_cpu *c = sg_cpu_of(be);
    size_t bytes = count * sizeof(float);
    if (bytes > c->act_bytes[slot]) {
        sg_cpu_aligned_free(c->act_buf[slot]);
        c->act_buf[slot] = sg_cpu_aligned_alloc(bytes);
        c->act_bytes[slot] = bytes;
    }
    return c->act_buf[slot];
}

void sg_cpu_act_buf_free(sg_cpu *c) {
    for (int i = 0; i < SG_CPU_ACT_BUFS; i++) {
        sg_cpu_aligned_free(c->act_buf[i]);
        c->act_buf[i] = NULL;
        c->act_bytes[i] = 0;
    }
}

static void *cpu_alloc(sg_backend *be, size_t bytes) {
    sg_cpu *c = sg_cpu_of(be);
    char *p = sg_cpu_aligned_alloc(bytes + HDR);
    *(size_t *)p = bytes;
    size_t now = __atomic_add_fetch(&c->mem_in_use, bytes, __ATOMIC_RELAXED);
    size_t peak = __atomic_load_n(&c->mem_peak, __ATOMIC_RELAXED);
    while (now > peak && !__atomic_compare_exchange_n(&c->mem_peak, &peak, now, 1, __ATOMIC_RELAXED,
                                                      __ATOMIC_RELAXED)) {}
    return p + HDR;
}

static void cpu_free(sg_backend *be, void *ptr) {
    if (!ptr) return;
    char *p = (char *)ptr - HDR;
    sg_wcache_freed(sg_cpu_of(be)->wcache, ptr, *(size_t *)p);
    __atomic_sub_fetch(&sg_cpu_of(be)->mem_in_use, *(size_t *)p, __ATOMIC_RELAXED);
    free(p);
}

/* upload, download, copy and upload_async: all host memory. */
static void cpu_memcpy(sg_backend *be, void *dst, const void *src, size_t bytes) {
    if (bytes && dst != src) memcpy(dst, src, bytes);
    sg_cpu_written(be, dst, bytes);
}

static void cpu_zero(sg_backend *be, void *p, size_t bytes) {
    memset(p, 0, bytes);
    sg_cpu_written(be, p, bytes);
}

static void cpu_sync(sg_backend *be) { (void)be; }

static void *cpu_host_alloc(sg_backend *be, size_t bytes) {
    (void)be;
    return sg_cpu_aligned_alloc(bytes);
}

static void cpu_host_free(sg_backend *be, void *p) {
    (void)be;
    free(p);
}

static void cpu_upload_wait(sg_backend *be) { (void)be; }
static void *cpu_stream(sg_backend *be, int which) {
    (void)be;
    (void)which;
    return NULL;
}
static void cpu_stream_wait(sg_backend *be, int waiter, int waitee) {
    (void)be;
    (void)waiter;
    (void)waitee;
}
static void cpu_bind_thread(sg_backend *be) { (void)be; }

/* Graphs: the CPU backend has none (no SG_CAP_GRAPHS: every op runs when
 * it is issued, there is no launch overhead to save). Callers ask be->caps
 * first, so reaching these is a bug in the caller. */
static void cpu_no_graphs(const char *op) {
    SG_FATAL("CPU backend: %s called, but the CPU backend has no graphs (SG_CAP_GRAPHS is not "
             "in its caps): a bug in the caller, which must check be->caps first",
             op);
}
static void cpu_graph_begin(sg_backend *be) {
    (void)be;
    cpu_no_graphs("graph_begin");
}
static void *cpu_graph_end(sg_backend *be) {
    (void)be;
    cpu_no_graphs("graph_end");
    return NULL;
}
static int cpu_graph_launch(sg_backend *be, void *g) {
    (void)be, (void)g;
    cpu_no_graphs("graph_launch");
    return -1;
}
static void cpu_graph_free(sg_backend *be, void *g) {
    (void)be;
    if (g) cpu_no_graphs("graph_free");
}

void sg_cpu_fill_memory_ops(sg_ops *o) {
    o->alloc = cpu_alloc;
    o->free = cpu_free;
    o->upload = cpu_memcpy;
    o->download = cpu_memcpy;
    o->copy = cpu_memcpy;
    o->zero = cpu_zero;
    o->sync = cpu_sync;
    o->host_alloc = cpu_host_alloc;
    o->host_free = cpu_host_free;
    o->upload_async = cpu_memcpy;
    o->upload_wait = cpu_upload_wait;
    o->stream = cpu_stream;
    o->stream_wait = cpu_stream_wait;
    o->bind_thread = cpu_bind_thread;
    o->mem_written = sg_cpu_written;
    o->graph_begin = cpu_graph_begin;
    o->graph_end = cpu_graph_end;
    o->graph_launch = cpu_graph_launch;
    o->graph_free = cpu_graph_free;
}
