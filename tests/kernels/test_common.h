/* tests/kernels/test_common.h - helpers shared by the CPU op tests: a
 * backend, tensors in backend memory (host memory on the CPU backend, so the
 * tests read and write them directly), random fills.
 */
#ifndef SG_TESTS_KERNELS_TEST_COMMON_H
#define SG_TESTS_KERNELS_TEST_COMMON_H

#include "kernels/backend.h"
#include "tests/testutil.h"

static sg_backend *tc_be;

/* Creates the CPU backend with `threads` threads (0 = default). */
static inline sg_backend *tc_backend(int threads) {
    sg_backend_opts o = {threads, 0, 0};
    sg_backend *be = sg_backend_create("cpu", &o);
    if (!be) {
        fprintf(stderr, "cannot create the CPU backend\n");
        exit(1);
    }
    return be;
}

/* count floats of backend memory, filled uniformly in [lo, hi). */
static inline float *tc_rand(size_t count, uint64_t seed, float lo, float hi) {
    float *p = tc_be->ops->alloc(tc_be, count * sizeof(float));
    tu_fill(p, count, seed, lo, hi);
    return p;
}

static inline float *tc_zeros(size_t count) {
    return tc_be->ops->alloc(tc_be, count * sizeof(float));
}

static inline float *tc_clone(const float *src, size_t count) {
    float *p = tc_zeros(count);
    memcpy(p, src, count * sizeof(float));
    return p;
}

static inline void tc_free(void *p) { tc_be->ops->free(tc_be, p); }

/* max |a-b| / max(max|a|, floor), printed on failure by the callers. */
#define CHECK_CLOSE(ref, got, n, tol)                                               \
    do {                                                                            \
        double e_ = tu_max_rel_err((ref), (got), (n), 1e-3);                        \
        CHECK_MSG(e_ <= (tol), "%s vs %s: relative error %.3g > %.3g", #ref, #got, \
                  e_, (double)(tol));                                               \
    } while (0)

#endif
