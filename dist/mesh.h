/* dist/mesh.h - internal: direct TCP connections between every pair of
 * ranks for every collective of the training thread (SyncBN statistics,
 * loss sums, barriers, the start's weight broadcast), next to Gloo, which
 * then carries only the DDP gradient channel.
 *
 * Why: Gloo's TCP transport hands every message through its event-loop
 * thread, which on a loaded CPU machine costs far more than the message
 * (measured: a 2-rank SyncBN step spent ~90% of its time in epoll). A small
 * all-gather here is one write and one read per peer from the calling
 * thread. Every message carries a sequence number and its size, so ranks
 * that call different collectives get an error naming the rank, never
 * silently mixed data; a peer that sends nothing within the timeout, or
 * closes its connection, is named in the error.
 *
 * Every rank listens on the MASTER_ADDR interface (dist/net_addr.h) and
 * publishes that address in the store. A connecting rank sends a handshake
 * with its rank and the job token (dist/mesh_wire.h) and waits for the
 * answer; the accepting rank reads handshakes without blocking, so a
 * connection without the token, with garbage, or claiming a rank that is
 * already connected is refused and logged (naming its address) while the
 * real ranks connect.
 *
 * Test seam (core/test_seams.h, builds with -Dtest_seams=true only):
 * SG_TEST_MESH_KILL=RANK:BYTES:NTH makes rank RANK kill itself
 * (SIGKILL) as it starts its NTH collective of BYTES bytes per rank (BYTES
 * 0: of any size), so a test ends a rank at an exact point of a step (a
 * SyncBN all-gather, tests/dist/test_kill_syncbn.c); a malformed value
 * fails sg_mesh_create.
 */
#ifndef SG_DIST_MESH_H
#define SG_DIST_MESH_H

#include <signal.h>
#include <stddef.h>

#include "core/status.h"
#include "dist/store.h"

typedef struct sg_mesh sg_mesh;

/* Up to this many bytes a broadcast is one write from the root to every
 * peer, and an all-reduce (dist/comm.c) an all-gather plus a local sum in
 * rank order; above it both go by chunks (a scatter or reduce-scatter, then
 * an all-gather of the chunks), which moves ~2x the buffer per rank instead
 * of (world-1)x it. */
#define SG_MESH_DIRECT_BYTES (64u * 1024u)

/* Connects every pair of ranks (addresses through the store), presenting
 * and checking token (the job token, dist/job_token.h). stop: NULL, or a
 * flag that ends the waiting early once set. NULL after logging, naming the
 * rank that did not connect (nothing logged when stopped). */
sg_mesh *sg_mesh_create(sg_store *store, int rank, int world, double timeout_s, const char *token,
                        const volatile sig_atomic_t *stop);
void sg_mesh_destroy(sg_mesh *m);

/* out[r * bytes ...] = rank r's in (out holds world * bytes). SG_OK, or
 * SG_ERR_RUNTIME with a reason naming the peer in err (not logged: the
 * communicator logs it with its context). */
sg_status sg_mesh_allgather(sg_mesh *m, const void *in, void *out, size_t bytes, char *err,
                            size_t errlen);
/* buf (bytes) from root to every rank. Same contract. */
sg_status sg_mesh_broadcast(sg_mesh *m, void *buf, size_t bytes, int root, char *err,
                            size_t errlen);

/* The chunks of a buffer of count elements: rank q's is [*first, *first +
 * *n), count * q / world up to count * (q + 1) / world (every rank computes
 * the same partition). */
void sg_mesh_chunk(size_t count, int world, int q, size_t *first, size_t *n);
/* Reduce-scatter's exchange: sends chunk q of send (count elements of elem
 * bytes) to every rank q, and receives every rank q's copy of this rank's
 * chunk into recv[q] (recv[rank] is not touched). Same contract. */
sg_status sg_mesh_alltoall_chunks(sg_mesh *m, const void *send, void *const *recv, size_t count,
                                  size_t elem, char *err, size_t errlen);
/* In place: this rank's chunk of buf to every rank, every other chunk from
 * its rank. Same contract. */
sg_status sg_mesh_allgather_chunks(sg_mesh *m, void *buf, size_t count, size_t elem, char *err,
                                   size_t errlen);

#endif
