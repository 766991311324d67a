/* dist/comm_internal.h - internal: per-channel collectives for dist/ddp.c
 * and dist/syncbn.c (not a public header). */
#ifndef SG_DIST_COMM_INTERNAL_H
#define SG_DIST_COMM_INTERNAL_H

#include "dist/comm.h"
#include "dist/store.h"
#include "dist/transport.h"

/* Sum all-reduce of a device float buffer on channel ch (SG_CH_*). SG_OK,
 * or SG_ERR_RUNTIME after logging (as the collectives of dist/comm.h). */
sg_status sg_comm_ch_allreduce_f32(sg_comm *c, int ch, float *dev, size_t count);
/* The store (NULL in a world of 1). */
sg_store *sg_comm_store(sg_comm *c);
/* Device scratch buffer `slot` (0 or 1) of at least `bytes`, owned by the
 * communicator (grown on demand, freed by sg_comm_destroy). */
void *sg_comm_scratch(sg_comm *c, int slot, size_t bytes);
/* 1 once a collective failed (every later call fails at once), else 0: a
 * flag, not a status. */
int sg_comm_broken(const sg_comm *c);

/* SyncBN's collectives on the training channel (dist/syncbn.c), timed and
 * counted in sg_comm_stats. With a transport that enqueues (NCCL) they are
 * issued on the compute stream and return without waiting; otherwise they
 * are the blocking sg_comm_allreduce_f32 / sg_comm_allgather_f32. SG_OK or
 * SG_ERR_RUNTIME after logging, as those. */
sg_status sg_comm_syncbn_allreduce(sg_comm *c, float *dev, size_t count);
sg_status sg_comm_syncbn_allgather(sg_comm *c, const float *dev_in, float *dev_out, size_t n,
                                   int enqueue);
/* 1 when sg_comm_syncbn_allgather(..., 1) would only enqueue (a flag). */
int sg_comm_can_enqueue(const sg_comm *c);
/* The batch sizes set by sg_comm_set_batch_sizes (world entries), or NULL. */
const int64_t *sg_comm_batch_sizes(const sg_comm *c);

#endif
