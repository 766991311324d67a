/* core/test_seams.c - the one getenv of the test seams (core/test_seams.h).
 * Compiled only when meson's test_seams option is true. */
#include "core/test_seams.h"

#include <stdlib.h>
#include <string.h>

#include "core/log.h"

#if !SG_TEST_SEAMS
#error "core/test_seams.c is built only with -Dtest_seams=true (core/meson.build)"
#endif

/* The seams of core/test_seams.h, in its order. */
static const char *const seams[] = {"SG_TEST_MESH_KILL", "SG_WEIGHT_CACHE", "SG_BN_FUSE",
                                    "SG_CPU_WEIGHT_PACK"};

const char *sg_test_seam(const char *name) {
    size_t i = 0, n = sizeof seams / sizeof seams[0];
    while (i < n && strcmp(seams[i], name) != 0) i++;
    SG_CHECK(i < n,
             "test seam '%s' is not one of core/test_seams.h's list: add it there and to "
             "core/test_seams.c (internal error)",
             name);
    return getenv(name);
}
