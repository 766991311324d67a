/* dist/mesh.h - internal: direct TCP connections between every pair of
 * ranks for the training thread's small collectives (SyncBN statistics,
 * loss sums, barriers), next to Gloo.
 *
 * Why: Gloo's TCP transport hands every message through its event-loop
 * thread, which on a loaded CPU machine costs far more than the message
 * (measured: a 2-rank SyncBN step spent ~90% of its time in epoll). A small
 * all-gather here is one write and one read per peer from the calling
 * thread. Every message carries a sequence number and its size, so ranks
 * that call different collectives get an error naming the rank, never
 * silently mixed data; a peer that sends nothing within the timeout, or
 * closes its connection, is named in the error.
 */
#ifndef SG_DIST_MESH_H
#define SG_DIST_MESH_H

#include <stddef.h>

#include "core/status.h"
#include "dist/store.h"

typedef struct sg_mesh sg_mesh;

/* Largest per-rank message the mesh carries (bigger ones go to Gloo). */
#define SG_MESH_MAX_BYTES (256u * 1024u)

/* Connects every pair of ranks (addresses through the store). NULL after
 * logging, naming the rank that did not connect. */
sg_mesh *sg_mesh_create(sg_store *store, int rank, int world, double timeout_s);
void sg_mesh_destroy(sg_mesh *m);

/* out[r * bytes ...] = rank r's in (out holds world * bytes). SG_OK, or
 * SG_ERR_RUNTIME with a reason naming the peer in err (not logged: the
 * communicator logs it with its context). */
sg_status sg_mesh_allgather(sg_mesh *m, const void *in, void *out, size_t bytes, char *err,
                            size_t errlen);
/* buf (bytes) from root to every rank. Same contract. */
sg_status sg_mesh_broadcast(sg_mesh *m, void *buf, size_t bytes, int root, char *err,
                            size_t errlen);

#endif
