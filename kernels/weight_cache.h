/* kernels/weight_cache.h - converted copies of weight tensors, kept across
 * convolution calls and refreshed only when the weights change (private to
 * the backends: the CPU's bf16 convolutions in kernels/cpu/cpu_conv.c, the
 * CUDA ones in kernels/cuda/cuda_conv.cu).
 *
 * Under train.precision bf16 a convolution needs its weights as bf16 (in
 * the layout its kernel wants). Converting them on every call costs a pass
 * over all weights per conv op; this cache keeps one copy per (source
 * pointer, tag) - the tag names the layout, so the forward and the
 * backward-data convolutions share a copy when they want the same one - and
 * hands it back as long as nothing wrote the source since it was filled.
 *
 * Staleness is impossible by construction, not by callers remembering:
 *  - every backend op that may write memory a weight lives in (upload,
 *    upload_async, copy, zero, scale, axpy, sgd_step) calls
 *    sg_wcache_written for its output range;
 *  - ops->free calls sg_wcache_freed (a later allocation at the same address
 *    is a new tensor, never served the old copy);
 *  - writes that bypass the ops (a collective library writing in place,
 *    direct CPU writes to SG_CAP_HOST_MEMORY memory) are announced with
 *    ops->mem_written (kernels/backend.h), which calls sg_wcache_written.
 * A write marks every copy whose source it overlaps as stale; the next
 * sg_wcache_get of it says "refill". A write outside the box spanning all
 * sources (activations, images, gradients in their own allocations) costs
 * two relaxed atomic loads and no lock.
 *
 * Thread safety: sg_wcache_written may be called from any thread (the DDP
 * comm thread copies gradients); get/freed run on the thread that issues
 * the ops. One mutex guards the entries.
 *
 * Memory for the copies comes from the backend's allocator callbacks (CPU:
 * aligned host memory; CUDA: device memory counted in mem_in_use). The
 * copies live until the source is freed or the cache is destroyed.
 *
 * Test seam (core/test_seams.h, builds with -Dtest_seams=true only):
 * SG_WEIGHT_CACHE=0 in the environment turns the cache off (sg_wcache_get
 * then always says "refill" into one scratch copy per key), so a test can
 * show the cached run is bit-identical to the uncached one.
 */
#ifndef SG_KERNELS_WEIGHT_CACHE_H
#define SG_KERNELS_WEIGHT_CACHE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct sg_wcache sg_wcache;

typedef void *(*sg_wcache_alloc_fn)(void *ctx, size_t bytes);
typedef void (*sg_wcache_free_fn)(void *ctx, void *p, size_t bytes);

/* Returns the cache, or NULL after logging (the seam SG_WEIGHT_CACHE
 * malformed). */
sg_wcache *sg_wcache_create(sg_wcache_alloc_fn alloc, sg_wcache_free_fn release, void *ctx);
void sg_wcache_destroy(sg_wcache *wc);

/* The copy of `src` (src_bytes long) for layout `tag`, copy_bytes large.
 * *refill = 1 when the caller must (re)fill it now: first use, or src was
 * written, or the cache is off. The pointer stays valid until src is freed
 * or the cache is destroyed. */
void *sg_wcache_get(sg_wcache *wc, const void *src, size_t src_bytes, uint64_t tag,
                    size_t copy_bytes, int *refill);

/* [p, p + bytes) was written (p == NULL: any memory may have changed). */
void sg_wcache_written(sg_wcache *wc, const void *p, size_t bytes);

/* The allocation [p, p + bytes) is freed (bytes 0: just the one starting
 * at p): its copies are released. */
void sg_wcache_freed(sg_wcache *wc, const void *p, size_t bytes);

/* Introspection for tests: number of copies, bytes they hold, and how many
 * refills sg_wcache_get asked for since creation. */
void sg_wcache_stats(const sg_wcache *wc, int *copies, size_t *bytes, uint64_t *refills);

#ifdef __cplusplus
}
#endif

#endif
