// placeholder: replaced by the CUDA backend
#include <cuda_runtime.h>
#include "kernels/backend.h"
extern "C" sg_backend *sg_cuda_backend_create(int device, const sg_backend_opts *opts) {
    (void)device; (void)opts;
    return NULL;
}
extern "C" int sg_cuda_device_count(void) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) return 0;
    return n;
}
