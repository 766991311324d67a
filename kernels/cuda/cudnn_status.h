/* kernels/cuda/cudnn_status.h - what the CUDA backend makes of a cuDNN 9
 * status code: a hint on what to do, and whether it is an allocation
 * failure (cudnnFind* then falls back to the heuristics).
 *
 * cuDNN 9 reports sub-codes (CUDNN_STATUS_SUBLIBRARY_LOADING_FAILED 1008,
 * ..._NOT_SUPPORTED_SUBLIBRARY_UNAVAILABLE 3009, ..._DEVICE_ALLOCATION_FAILED
 * 4004) whose category is the thousand (CUDNN_STATUS_CATEGORY): the specific
 * codes that need their own advice have it, every other code gets its
 * category's. Plain C on int codes so a host test can check the table
 * (tests/cuda/test_cudnn_status.c); implemented in cuda_check.cu.
 */
#ifndef SG_KERNELS_CUDA_CUDNN_STATUS_H
#define SG_KERNELS_CUDA_CUDNN_STATUS_H

#ifdef __cplusplus
extern "C" {
#endif

/* What to do about cuDNN status `status` ("" for success or an unknown category). */
const char *sg_cudnn_hint(int status);
/* 1 when `status` says cuDNN could not allocate memory (host or device), else 0 (a flag). */
int sg_cudnn_alloc_failed(int status);

#ifdef __cplusplus
}
#endif

#endif
