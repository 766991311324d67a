/* tests/cuda/test_cudnn_status.c - the table from cuDNN 9 status codes to
 * hints and to "allocation failed" (kernels/cuda/cudnn_status.h), checked
 * against the codes of the cuDNN header this build uses: the sub-codes
 * cuDNN 9 returns get advice (a wrong library path, 1008 / 3009, says to fix
 * LD_LIBRARY_PATH; before, only base codes had hints), and a device
 * allocation failure inside cudnnFind (4004) counts as one, so the search
 * falls back to the heuristics (before, only 4003 did). Host only: runs
 * without a GPU. What only a GPU shows: which code a real failure returns. */
#include <cudnn.h>
#include <string.h>

#include "kernels/cuda/cudnn_status.h"
#include "tests/testutil.h"

static void test_specific_codes(void) {
    CHECK_STR_CONTAINS(sg_cudnn_hint(CUDNN_STATUS_SUBLIBRARY_LOADING_FAILED), "LD_LIBRARY_PATH");
    CHECK_EQ_INT(CUDNN_STATUS_SUBLIBRARY_LOADING_FAILED, 1008);
    CHECK_STR_CONTAINS(sg_cudnn_hint(CUDNN_STATUS_NOT_SUPPORTED_SUBLIBRARY_UNAVAILABLE),
                       "LD_LIBRARY_PATH");
    CHECK_EQ_INT(CUDNN_STATUS_NOT_SUPPORTED_SUBLIBRARY_UNAVAILABLE, 3009);
    CHECK_STR_CONTAINS(sg_cudnn_hint(CUDNN_STATUS_SUBLIBRARY_VERSION_MISMATCH), "one cuDNN 9");
    CHECK_STR_CONTAINS(sg_cudnn_hint(CUDNN_STATUS_NOT_SUPPORTED_INCOMPATIBLE_CUDA_DRIVER),
                       "driver");
    CHECK_STR_CONTAINS(sg_cudnn_hint(CUDNN_STATUS_NOT_SUPPORTED_INCOMPATIBLE_CUDART), "CUDA 13");
    CHECK_STR_CONTAINS(sg_cudnn_hint(CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED),
                       "device memory");
    CHECK_STR_CONTAINS(sg_cudnn_hint(CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED),
                       "host memory");
    CHECK_STR_CONTAINS(sg_cudnn_hint(CUDNN_STATUS_NOT_INITIALIZED), "could not start");
    CHECK_STR_CONTAINS(sg_cudnn_hint(CUDNN_STATUS_BAD_PARAM_OUT_OF_BOUND), "geometry");
    CHECK_STR_CONTAINS(sg_cudnn_hint(CUDNN_STATUS_NOT_SUPPORTED_SHAPE), "geometry");
    CHECK_STR_CONTAINS(sg_cudnn_hint(CUDNN_STATUS_EXECUTION_FAILED_CUDART), "CUDA_LAUNCH_BLOCKING");
    CHECK_STR_CONTAINS(sg_cudnn_hint(CUDNN_STATUS_INTERNAL_ERROR_COMPILATION_FAILED),
                       "CUDNN_LOGERR_DBG");
    CHECK(strcmp(sg_cudnn_hint(CUDNN_STATUS_SUCCESS), "") == 0);
}

/* Every code of the five error categories, named in the header or not, has
 * advice; codes outside them have none. */
static void test_every_category(void) {
    for (int code = 1; code < 7000; code++) {
        const char *h = sg_cudnn_hint(code);
        CHECK(h != NULL);
        int in_category = code >= 1000 && code < 6000;
        if (in_category && !*h) CHECK_MSG(0, "cuDNN status %d has no hint", code);
        if (!in_category && *h) CHECK_MSG(0, "status %d outside cuDNN's categories: '%s'", code, h);
    }
}

static void test_alloc_failed(void) {
    CHECK_EQ_INT(sg_cudnn_alloc_failed(CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED), 1);
    CHECK_EQ_INT(CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED, 4004);
    CHECK_EQ_INT(sg_cudnn_alloc_failed(CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED), 1);
    int others[] = {
        CUDNN_STATUS_SUCCESS,          CUDNN_STATUS_BAD_PARAM,
        CUDNN_STATUS_NOT_SUPPORTED,    CUDNN_STATUS_INTERNAL_ERROR,
        CUDNN_STATUS_EXECUTION_FAILED, CUDNN_STATUS_NOT_SUPPORTED_SHARED_MEMORY_INSUFFICIENT};
    for (size_t i = 0; i < sizeof others / sizeof others[0]; i++)
        CHECK_EQ_INT(sg_cudnn_alloc_failed(others[i]), 0);
}

int main(void) {
    TEST_RUN(test_specific_codes);
    TEST_RUN(test_every_category);
    TEST_RUN(test_alloc_failed);
    return TEST_EXIT();
}
