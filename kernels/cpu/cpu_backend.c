/* placeholder: replaced by the CPU backend */
#include "kernels/backend.h"
#include "cmd/log.h"
sg_backend *sg_cpu_backend_create(const sg_backend_opts *opts) {
    (void)opts;
    SG_ERROR("CPU backend not implemented yet");
    return NULL;
}
