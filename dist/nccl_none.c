/* dist/nccl_none.c - stands in for dist/nccl_comm.c in builds without CUDA. */
#include "core/log.h"
#include "dist/transport.h"

int sg_transport_nccl_compiled(void) { return 0; }

sg_transport *sg_transport_nccl_create(sg_store *store, struct sg_backend *be, int rank, int world,
                                       double timeout_s) {
    (void)store;
    (void)be;
    (void)world;
    (void)timeout_s;
    SG_ERROR("rank %d: dist.backend=nccl, but this binary was built without CUDA/NCCL: "
             "rebuild with the CUDA toolkit (docs/DEVELOPING.md) or use dist.backend=gloo",
             rank);
    return NULL;
}
