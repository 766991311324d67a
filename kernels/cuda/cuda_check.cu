/* kernels/cuda/cuda_check.cu - the error reporting every file of the CUDA
 * backend shares: sg_cuda_fail (behind CU_CHECK, CUDNN_CHECK and
 * CU_LAUNCH_CHECK, cuda_internal.h) and the hints that say what to do about
 * a CUDA or cuDNN error.
 *
 * Its own file, not part of cuda_backend.cu, so the op files calling it do
 * not call back into the file that assembles their op table: calls between
 * the backend's files go one way only.
 */
#include "core/log.h"
#include "kernels/cuda/cuda_internal.h"

extern "C" void sg_cuda_fail(const char *call, const char *file, int line, const char *err_name,
                             const char *err_str, const char *hint) {
    sg_fatal_at(file, line, "CUDA backend: %s failed: %s (%s)%s%s", call, err_name, err_str,
                (hint && *hint) ? "; " : "", hint ? hint : "");
}

extern "C" const char *sg_cuda_hint(cudaError_t e) {
    switch (e) {
    case cudaErrorMemoryAllocation:
        return "out of device memory: lower batch_size or the crop size, or check with "
               "nvidia-smi for other processes on this GPU";
    case cudaErrorNoDevice:
        return "no CUDA device visible: check nvidia-smi / CUDA_VISIBLE_DEVICES, or use "
               "device: cpu";
    case cudaErrorInsufficientDriver:
        return "the NVIDIA driver is too old for this CUDA 13 build: update the driver "
               "(nvidia-smi shows its version), or use device: cpu";
    case cudaErrorInvalidDevice:
        return "no such device index: check CUDA_VISIBLE_DEVICES, LOCAL_RANK and the "
               "device: cuda:N setting against nvidia-smi";
    case cudaErrorNoKernelImageForDevice:
    case cudaErrorUnsupportedPtxVersion:
        return "this binary has no code for this GPU: rebuild with -Dgpu_arch=<your SM, "
               "e.g. 90> (nvidia-smi --query-gpu=compute_cap --format=csv)";
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchFailure:
        return "a kernel faulted (this or an earlier asynchronous op): rerun with "
               "CUDA_LAUNCH_BLOCKING=1 to find the op, and report it";
    default: return "";
    }
}

static const char *const cudnn_library_hint =
    "a cuDNN 9 sub-library (libcudnn_engines_*, libcudnn_graph ...) could not be loaded: put "
    "the folder holding all of cuDNN 9's libraries (the pip wheel nvidia-cudnn-cu13's "
    "nvidia/cudnn/lib, or the toolkit's lib64) on LD_LIBRARY_PATH, one cuDNN version only";

extern "C" const char *sg_cudnn_hint(int status) {
    switch (status) {
    case CUDNN_STATUS_SUCCESS: return "";
    case CUDNN_STATUS_SUBLIBRARY_LOADING_FAILED:
    case CUDNN_STATUS_NOT_SUPPORTED_SUBLIBRARY_UNAVAILABLE: return cudnn_library_hint;
    case CUDNN_STATUS_SUBLIBRARY_VERSION_MISMATCH:
        return "cuDNN libraries of different versions were loaded: keep one cuDNN 9 on "
               "LD_LIBRARY_PATH (cudnnGetVersion names the one in use)";
    case CUDNN_STATUS_NOT_SUPPORTED_INCOMPATIBLE_CUDA_DRIVER:
        return "the NVIDIA driver is too old for this cuDNN: update the driver (nvidia-smi "
               "shows its version)";
    case CUDNN_STATUS_NOT_SUPPORTED_INCOMPATIBLE_CUDART:
        return "this cuDNN was built for another CUDA major version than the runtime: use the "
               "CUDA 13 build of cuDNN 9 (nvidia-cudnn-cu13)";
    case CUDNN_STATUS_NOT_SUPPORTED_ARCH_MISMATCH:
        return "this cuDNN does not support this GPU's architecture: use a cuDNN 9 release "
               "that lists it";
    case CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED: return "cuDNN ran out of host memory";
    case CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED:
        return "cuDNN ran out of device memory: lower batch_size or the crop size, or check "
               "with nvidia-smi for other processes on this GPU";
    default: break;
    }
    switch (CUDNN_STATUS_CATEGORY(status)) {
    case 1000: /* the category of CUDNN_STATUS_NOT_INITIALIZED (1001) and its kin */
        return "cuDNN could not start: check that libcudnn 9 matches the driver and that "
               "a GPU is visible (nvidia-smi)";
    case CUDNN_STATUS_BAD_PARAM:
    case CUDNN_STATUS_NOT_SUPPORTED:
        return "cuDNN rejected this convolution geometry: report the layer shape";
    case CUDNN_STATUS_INTERNAL_ERROR:
        return "cuDNN failed internally: rerun with CUDNN_LOGERR_DBG=1 CUDNN_LOGDEST_DBG=stderr "
               "to see why, and report it";
    case CUDNN_STATUS_EXECUTION_FAILED:
        return "a cuDNN kernel failed to run (this or an earlier asynchronous op): rerun with "
               "CUDA_LAUNCH_BLOCKING=1 to find the op, and report it";
    default: return "";
    }
}

extern "C" int sg_cudnn_alloc_failed(int status) {
    return status == CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED ||
           status == CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED;
}

void sg_cu_no_capture(sg_cuda *cu, const char *what) {
    if (cu->capturing)
        SG_FATAL("CUDA backend on %s: %s while a graph is being recorded (graph_begin): it "
                 "allocates, waits for the device or returns a value to the host, which a CUDA "
                 "graph cannot record; set cuda.graphs: false and report this line (a bug: the "
                 "recorded sequence must not contain it)",
                 cu->name, what);
}
