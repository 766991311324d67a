/* kernels/cuda/cuda_memory.cu - device memory, copies, streams and thread
 * binding: the memory group of tests/backend/run_memory.c
 * (kernels/cpu/cpu_memory.c on the CPU).
 *
 * Owns the allocation table (every live ops->alloc pointer and its size), the
 * in-use/peak accounting get_info reports, pinned host memory, and the
 * ordering between the compute, copy and communication streams (events).
 * Synchronous copies (upload/download) run on the compute stream so they are
 * ordered after the ops issued before them; upload_async runs on the copy
 * stream after the compute work issued before it (so it never overwrites a
 * buffer a pending kernel reads), and the compute stream waits for it only
 * at upload_wait.
 */
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "kernels/cuda/cuda_internal.h"
#include "kernels/weight_cache.h"

#define TOMBSTONE ((void *)(uintptr_t)1)

static size_t slot_of(const void *p, size_t cap) {
    uint64_t h = (uint64_t)(uintptr_t)p;
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    return (size_t)(h & (cap - 1));
}

static void table_insert(sg_cuda *cu, void *p, size_t bytes);

static void table_grow(sg_cuda *cu) {
    sg_cuda_alloc_entry *old = cu->allocs;
    size_t old_cap = cu->alloc_cap;
    cu->alloc_cap = old_cap ? old_cap * 2 : 256;
    cu->allocs = (sg_cuda_alloc_entry *)calloc(cu->alloc_cap, sizeof *cu->allocs);
    SG_CHECK(cu->allocs, "CUDA backend: out of host memory for the allocation table");
    cu->alloc_used = 0;
    for (size_t i = 0; i < old_cap; i++)
        if (old[i].ptr && old[i].ptr != TOMBSTONE) table_insert(cu, old[i].ptr, old[i].bytes);
    free(old);
}

static void table_insert(sg_cuda *cu, void *p, size_t bytes) {
    if ((cu->alloc_used + 1) * 2 > cu->alloc_cap) table_grow(cu);
    size_t i = slot_of(p, cu->alloc_cap);
    while (cu->allocs[i].ptr && cu->allocs[i].ptr != TOMBSTONE) i = (i + 1) & (cu->alloc_cap - 1);
    if (!cu->allocs[i].ptr) cu->alloc_used++;
    cu->allocs[i].ptr = p;
    cu->allocs[i].bytes = bytes;
}

/* Removes p; returns its size, or (size_t)-1 if p is not a live allocation. */
static size_t table_remove(sg_cuda *cu, void *p) {
    if (!cu->alloc_cap) return (size_t)-1;
    size_t i = slot_of(p, cu->alloc_cap);
    while (cu->allocs[i].ptr) {
        if (cu->allocs[i].ptr == p) {
            size_t b = cu->allocs[i].bytes;
            cu->allocs[i].ptr = TOMBSTONE;
            return b;
        }
        i = (i + 1) & (cu->alloc_cap - 1);
    }
    return (size_t)-1;
}

void *sg_cuda_raw_alloc(sg_cuda *cu, size_t bytes, const char *what) {
    void *p = NULL;
    sg_cu_no_capture(cu, what);
    cu->mem_gen++;
    if (bytes == 0) bytes = 1;
    CU_CHECK(cudaSetDevice(cu->device));
    cudaError_t e = cudaMalloc(&p, bytes);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        size_t free_b = 0, total_b = 0;
        (void)cudaMemGetInfo(&free_b, &total_b);
        SG_FATAL("CUDA backend: cudaMalloc of %zu bytes (%.1f MiB) for %s failed on %s: %s; "
                 "this backend already holds %.1f MiB (peak %.1f MiB), the device has %.1f of "
                 "%.1f MiB free; lower batch_size or the crop size, or free the GPU "
                 "(nvidia-smi)",
                 bytes, bytes / 1048576.0, what, cu->name, cudaGetErrorString(e),
                 cu->mem_in_use / 1048576.0, cu->mem_peak / 1048576.0, free_b / 1048576.0,
                 total_b / 1048576.0);
    }
    cu->mem_in_use += bytes;
    if (cu->mem_in_use > cu->mem_peak) cu->mem_peak = cu->mem_in_use;
    return p;
}

void sg_cuda_raw_free(sg_cuda *cu, void *p, size_t bytes) {
    if (!p) return;
    sg_cu_no_capture(cu, "freeing device memory");
    cu->mem_gen++;
    CU_CHECK(cudaFree(p));
    cu->mem_in_use -= bytes ? bytes : 1;
}

/* Grows a buffer of the backend's own (workspace, bf16 copies) to `need`
 * bytes, after the work in flight that may still use the old one. */
void sg_cuda_raw_grow(sg_cuda *cu, void **buf, size_t *bytes, size_t need, const char *what) {
    if (need <= *bytes) return;
    sg_cu_no_capture(cu, what);
    CU_CHECK(cudaStreamSynchronize(cu->streams[SG_STREAM_COMPUTE]));
    sg_cuda_raw_free(cu, *buf, *bytes);
    *buf = NULL;
    *bytes = 0;
    *buf = sg_cuda_raw_alloc(cu, need, what);
    *bytes = need;
}

static void *sg_cuda_alloc(sg_backend *be, size_t bytes) {
    sg_cuda *cu = sg_cu(be);
    void *p = sg_cuda_raw_alloc(cu, bytes, "a tensor (ops->alloc)");
    /* zeroed, and ordered before any op on the compute stream */
    CU_CHECK(cudaMemsetAsync(p, 0, bytes ? bytes : 1, cu->streams[SG_STREAM_COMPUTE]));
    CU_CHECK(cudaStreamSynchronize(cu->streams[SG_STREAM_COMPUTE]));
    table_insert(cu, p, bytes ? bytes : 1);
    return p;
}

static void sg_cuda_free(sg_backend *be, void *p) {
    sg_cuda *cu = sg_cu(be);
    SG_CU_ENTER(cu);
    if (!p) return;
    size_t bytes = table_remove(cu, p);
    SG_CHECK(bytes != (size_t)-1,
             "CUDA backend: free of %p, which is not a live allocation of this backend "
             "(double free, or memory from another backend)",
             p);
    /* a later allocation at p is a new tensor: drop p's weight copies */
    sg_wcache_freed(cu->wcache, p, bytes);
    /* cudaFree waits for the device; no pending op can still use p */
    sg_cuda_raw_free(cu, p, bytes);
}

void sg_cuda_memory_destroy(sg_cuda *cu) {
    for (size_t i = 0; i < cu->alloc_cap; i++)
        if (cu->allocs[i].ptr && cu->allocs[i].ptr != TOMBSTONE)
            sg_cuda_raw_free(cu, cu->allocs[i].ptr, cu->allocs[i].bytes);
    free(cu->allocs);
    cu->allocs = NULL;
    cu->alloc_cap = cu->alloc_used = 0;
    sg_cuda_raw_free(cu, cu->red_partial, 2 * SG_CUDA_RED_BLOCKS * sizeof(double));
    sg_cuda_raw_free(cu, cu->red_result, 4 * sizeof(double));
    sg_cuda_raw_free(cu, cu->chan_partial, (size_t)SG_CUDA_CHAN_SLOTS * 3 * sizeof(double));
    sg_cuda_raw_free(cu, cu->counts_dev, (size_t)cu->counts_cap * sizeof(int64_t));
    sg_cuda_raw_free(cu, cu->step_key_dev, sizeof(uint64_t));
    if (cu->red_host) CU_CHECK(cudaFreeHost(cu->red_host));
}

static void sg_cuda_upload(sg_backend *be, void *dst, const void *src, size_t bytes) {
    SG_CU_ENTER(sg_cu(be));
    sg_cu_no_capture(sg_cu(be), "upload (synchronous)");
    cudaStream_t s = sg_cu_stream(be);
    if (!bytes) return;
    CU_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, s));
    CU_CHECK(cudaStreamSynchronize(s)); /* the host buffer may be reused on return */
    sg_cuda_written(be, dst, bytes);
}

static void sg_cuda_download(sg_backend *be, void *dst, const void *src, size_t bytes) {
    SG_CU_ENTER(sg_cu(be));
    sg_cu_no_capture(sg_cu(be), "download");
    cudaStream_t s = sg_cu_stream(be);
    if (!bytes) return;
    CU_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, s));
    CU_CHECK(cudaStreamSynchronize(s));
}

static void sg_cuda_copy(sg_backend *be, void *dst, const void *src, size_t bytes) {
    SG_CU_ENTER(sg_cu(be));
    if (!bytes || dst == src) return;
    CU_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, sg_cu_stream(be)));
    sg_cuda_written(be, dst, bytes);
}

static void sg_cuda_zero(sg_backend *be, void *p, size_t bytes) {
    SG_CU_ENTER(sg_cu(be));
    if (!bytes) return;
    CU_CHECK(cudaMemsetAsync(p, 0, bytes, sg_cu_stream(be)));
    sg_cuda_written(be, p, bytes);
}

static void sg_cuda_sync(sg_backend *be) {
    sg_cuda *cu = sg_cu(be);
    SG_CU_ENTER(cu);
    sg_cu_no_capture(cu, "sync");
    for (int i = 0; i < SG_CUDA_NSTREAMS; i++) CU_CHECK(cudaStreamSynchronize(cu->streams[i]));
}

static void *sg_cuda_host_alloc(sg_backend *be, size_t bytes) {
    SG_CU_ENTER(sg_cu(be));
    void *p = NULL;
    cudaError_t e = cudaMallocHost(&p, bytes ? bytes : 1);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        SG_FATAL("CUDA backend: cudaMallocHost of %zu bytes (pinned host memory) failed on "
                 "%s: %s; lower batch_size / loader prefetch, or raise the locked-memory "
                 "limit (ulimit -l)",
                 bytes, sg_cu(be)->name, cudaGetErrorString(e));
    }
    memset(p, 0, bytes);
    return p;
}

/* On the backend's device, like every memory op (a loader thread may free
 * its pinned buffers while another device is current on it). */
static void sg_cuda_host_free(sg_backend *be, void *p) {
    if (!p) return;
    SG_CU_ENTER(sg_cu(be));
    CU_CHECK(cudaFreeHost(p));
}

static void sg_cuda_stream_wait(sg_backend *be, int waiter, int waitee) {
    sg_cuda *cu = sg_cu(be);
    SG_CU_ENTER(cu);
    SG_CHECK(waiter >= 0 && waiter < SG_CUDA_NSTREAMS && waitee >= 0 && waitee < SG_CUDA_NSTREAMS,
             "CUDA backend: stream_wait(%d, %d): streams are SG_STREAM_COMPUTE, _COPY, _COMM",
             waiter, waitee);
    if (waiter == waitee) return;
    sg_cu_no_capture(cu, "stream_wait");
    /* cudaStreamWaitEvent captures the event's state now, so one event per
     * waitee stream can be re-recorded freely. */
    CU_CHECK(cudaEventRecord(cu->events[waitee], cu->streams[waitee]));
    CU_CHECK(cudaStreamWaitEvent(cu->streams[waiter], cu->events[waitee], 0));
}

/* Ordered after every compute-stream op issued before this call (write
 * after read: a kernel still reading dst, e.g. the previous batch in a
 * double buffer, must not see it overwritten), and before nothing issued
 * after it until upload_wait: it overlaps the compute work issued after it.
 * The host buffer must stay untouched until the copy has run (upload_wait
 * followed by a sync, or a later synchronising call). */
static void sg_cuda_upload_async(sg_backend *be, void *dst, const void *src, size_t bytes) {
    sg_cuda *cu = sg_cu(be);
    SG_CU_ENTER(cu);
    if (!bytes) return;
    sg_cu_no_capture(cu, "upload_async");
    CU_CHECK(cudaEventRecord(cu->upload_event, cu->streams[SG_STREAM_COMPUTE]));
    CU_CHECK(cudaStreamWaitEvent(cu->streams[SG_STREAM_COPY], cu->upload_event, 0));
    CU_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, cu->streams[SG_STREAM_COPY]));
    sg_cuda_written(be, dst, bytes);
}

/* Host-side bookkeeping only: a conversion of a stale copy is issued on the
 * compute stream after this call, so stream order puts it after the write
 * (for writes on other streams, after the stream_wait that every reader of
 * the weights needs anyway). */
void sg_cuda_written(sg_backend *be, const void *p, size_t bytes) {
    sg_wcache_written(sg_cu(be)->wcache, p, bytes);
}

static void sg_cuda_upload_wait(sg_backend *be) {
    sg_cuda_stream_wait(be, SG_STREAM_COMPUTE, SG_STREAM_COPY);
}

static void *sg_cuda_stream(sg_backend *be, int which) {
    SG_CHECK(which >= 0 && which < SG_CUDA_NSTREAMS,
             "CUDA backend: stream %d requested; use SG_STREAM_COMPUTE, _COPY or _COMM", which);
    return (void *)sg_cu(be)->streams[which];
}

/* Makes the backend's device current on the calling thread. */
static void sg_cuda_bind_thread(sg_backend *be) { SG_CU_ENTER(sg_cu(be)); }

void sg_cuda_read_result(sg_backend *be, double *out, int n) {
    sg_cuda *cu = sg_cu(be);
    SG_CU_ENTER(cu);
    sg_cu_no_capture(cu, "an op returning a value to the host (loss, sumsq, kth_smallest)");
    cudaStream_t s = cu->streams[SG_STREAM_COMPUTE];
    CU_CHECK(cudaMemcpyAsync(cu->red_host, cu->red_result, (size_t)n * sizeof(double),
                             cudaMemcpyDeviceToHost, s));
    CU_CHECK(cudaStreamSynchronize(s));
    memcpy(out, cu->red_host, (size_t)n * sizeof(double));
}

void sg_cuda_fill_memory_ops(sg_ops *o) {
    o->alloc = sg_cuda_alloc;
    o->free = sg_cuda_free;
    o->upload = sg_cuda_upload;
    o->download = sg_cuda_download;
    o->copy = sg_cuda_copy;
    o->zero = sg_cuda_zero;
    o->sync = sg_cuda_sync;
    o->host_alloc = sg_cuda_host_alloc;
    o->host_free = sg_cuda_host_free;
    o->upload_async = sg_cuda_upload_async;
    o->upload_wait = sg_cuda_upload_wait;
    o->stream = sg_cuda_stream;
    o->stream_wait = sg_cuda_stream_wait;
    o->bind_thread = sg_cuda_bind_thread;
    o->mem_written = sg_cuda_written;
}
