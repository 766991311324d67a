/* dist/gloo_none.c - stands in for dist/gloo_shim.cc in GPU-only bundles,
 * which leave Gloo out. */
#include "core/log.h"
#include "dist/transport.h"

int sg_transport_gloo_compiled(void) { return 0; }

sg_transport *sg_transport_gloo_create(sg_store *store, int rank, int world, double timeout_s,
                                       int channels) {
    (void)store;
    (void)channels;
    (void)world;
    (void)timeout_s;
    SG_ERROR("rank %d: dist.backend=gloo, but this is a GPU-only build without Gloo: "
             "use dist.backend=nccl (or auto) with device=cuda",
             rank);
    return NULL;
}
