/* tests/testutil.h - tiny test harness shared by every test executable.
 *
 * A test is a main() that calls TEST_RUN(fn) for each case; a failed CHECK
 * prints file:line and the values, marks the case failed and returns from it.
 * TEST_EXIT() returns 1 if anything failed, so meson counts the executable
 * as failed. A test that cannot run here (no GPU, or a test seam that this
 * build does not have: tu_have_seams) returns TEST_SKIP (77).
 */
#ifndef SG_TESTS_TESTUTIL_H
#define SG_TESTS_TESTUTIL_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/test_seams.h"

#define TEST_SKIP 77

/* Whether this build has the test seams (core/test_seams.h). A test that
 * sets one returns TEST_SKIP when not, after this has said why: `what`
 * names the test or part that needs them. */
static inline int tu_have_seams(const char *what) {
#if SG_TEST_SEAMS
    (void)what;
    return 1;
#else
    printf("SKIP: %s sets a test seam, and this build has none: configure a build with "
           "-Dtest_seams=true to run it (scripts/test-asan's build-asan/ has them)\n",
           what);
    return 0;
#endif
}

static int tu_failed_cases = 0, tu_cases = 0, tu_case_failed = 0;

#define CHECK(cond)                                                           \
    do {                                                                      \
        if (!(cond)) {                                                        \
            fprintf(stderr, "  FAIL %s:%d: %s\n", __FILE__, __LINE__, #cond); \
            tu_case_failed = 1;                                               \
            return;                                                           \
        }                                                                     \
    } while (0)

#define CHECK_MSG(cond, ...)                                                  \
    do {                                                                      \
        if (!(cond)) {                                                        \
            fprintf(stderr, "  FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__);                                     \
            fprintf(stderr, "\n");                                            \
            tu_case_failed = 1;                                               \
            return;                                                           \
        }                                                                     \
    } while (0)

#define CHECK_EQ_INT(a, b)                                    \
    do {                                                      \
        long long va_ = (long long)(a), vb_ = (long long)(b); \
        CHECK_MSG(va_ == vb_, "%lld != %lld", va_, vb_);      \
    } while (0)

#define CHECK_NEAR(a, b, tol)                                                                  \
    do {                                                                                       \
        double va_ = (double)(a), vb_ = (double)(b);                                           \
        CHECK_MSG(fabs(va_ - vb_) <= (tol), "%.9g vs %.9g (tol %g)", va_, vb_, (double)(tol)); \
    } while (0)

#define CHECK_STR_CONTAINS(hay, needle) \
    CHECK_MSG(strstr((hay), (needle)) != NULL, "\"%s\" not found in:\n%s", (needle), (hay))

#define TEST_RUN(fn)                           \
    do {                                       \
        tu_case_failed = 0;                    \
        tu_cases++;                            \
        fprintf(stderr, "case %s\n", #fn);     \
        fn();                                  \
        if (tu_case_failed) tu_failed_cases++; \
    } while (0)

/* main's exit status: `return TEST_EXIT();`. A function, not an expression
 * macro, so that calling it without returning its value is a warning
 * (warn_unused_result) instead of a test that always exits 0. */
__attribute__((warn_unused_result, unused)) static int tu_exit_status(void) {
    fprintf(stderr, "%d/%d cases passed\n", tu_cases - tu_failed_cases, tu_cases);
    return tu_failed_cases ? 1 : 0;
}
#define TEST_EXIT() tu_exit_status()

/* Max relative error of b against a: max|a-b| / max(max|a|, floor). */
static inline double tu_max_rel_err(const float *a, const float *b, size_t n, double floor_) {
    double maxdiff = 0, maxabs = floor_;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        if (d > maxdiff) maxdiff = d;
        if (fabs((double)a[i]) > maxabs) maxabs = fabs((double)a[i]);
    }
    return maxdiff / maxabs;
}

/* Deterministic uniform fill in [lo, hi). */
static inline void tu_fill(float *x, size_t n, uint64_t seed, float lo, float hi) {
    uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
    for (size_t i = 0; i < n; i++) {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        x[i] = lo + (hi - lo) * (float)((s >> 40) * (1.0 / 16777216.0));
    }
}

#endif
