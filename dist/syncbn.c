/* dist/syncbn.c - SyncBN's two collectives (model/model.h hooks): the
 * forward all-gather of every rank's (mean, M2) and count, merged by the
 * backend's bn_finalize (Chan's formula, a rank with 0 values skipped), and
 * the backward sum of the 2C reductions. ctx is the sg_comm.
 *
 * The forward sends one message per layer: [mean(c), M2(c), count] with the
 * int64 count's bits in two float slots (exact at any count), so a BN layer
 * costs one collective's latency, not two. On NCCL, when every rank's batch
 * size is known (sg_comm_set_batch_sizes), the counts are computed on the
 * host and both collectives are only enqueued on the compute stream: the
 * host never waits for a BN collective (dist/comm_internal.h). */
#include <stdint.h>
#include <string.h>

#include "core/log.h"
#include "dist/comm_internal.h"
#include "dist/ddp.h"

/* Every rank's value count when it is known on the host without reading
 * the device: each rank's batch size is set (sg_comm_set_batch_sizes) and
 * this layer's local count is this rank's images times one plane, the same
 * plane on every rank. 1 with counts[] filled, else 0. */
static int known_counts(sg_comm *comm, int64_t local_count, int64_t *counts) {
    const int64_t *nb = sg_comm_batch_sizes(comm);
    int w = sg_comm_world(comm), r = sg_comm_rank(comm);
    if (!nb || nb[r] <= 0 || local_count % nb[r] != 0) return 0;
    int64_t plane = local_count / nb[r];
    for (int q = 0; q < w; q++) {
        if (nb[q] < 0 || (plane && nb[q] > INT64_MAX / plane)) return 0;
        counts[q] = nb[q] * plane;
    }
    return 1;
}

void sg_syncbn_gather(void *ctx, const float *local_stats, int64_t local_count, float *parts,
                      int64_t *counts, int c) {
    sg_comm *comm = ctx;
    sg_backend *be = sg_comm_device_backend(comm);
    const sg_ops *o = be->ops;
    int w = sg_comm_world(comm), r = sg_comm_rank(comm);
    /* NCCL with the counts known: [mean, M2] straight into parts, enqueued
     * on the compute stream; nothing is read back, so the host goes on
     * issuing the forward */
    if (sg_comm_can_enqueue(comm) && known_counts(comm, local_count, counts)) {
        if (sg_comm_syncbn_allgather(comm, local_stats, parts, (size_t)2 * c, 1) == SG_OK) return;
        for (int q = 0; q < w; q++) counts[q] = q == r ? local_count : 0;
        o->copy(be, parts + (size_t)r * 2 * c, local_stats, (size_t)2 * c * sizeof(float));
        return;
    }
    size_t row = (size_t)2 * c + 2; /* floats per rank */
    float *send = sg_comm_scratch(comm, 0, row * sizeof(float));
    float *recv = sg_comm_scratch(comm, 1, row * (size_t)w * sizeof(float));
    o->copy(be, send, local_stats, (size_t)2 * c * sizeof(float));
    o->upload(be, send + 2 * c, &local_count, sizeof local_count);
    if (sg_comm_syncbn_allgather(comm, send, recv, row, 0) == SG_OK) {
        for (int q = 0; q < w; q++) {
            o->copy(be, parts + (size_t)q * 2 * c, recv + (size_t)q * row,
                    (size_t)2 * c * sizeof(float));
            o->download(be, &counts[q], recv + (size_t)q * row + 2 * c, sizeof(int64_t));
        }
        return;
    }
    /* failed (logged, comm broken): leave finite local statistics so the
     * step finishes and sg_ddp_wait reports the failure */
    for (int q = 0; q < w; q++) counts[q] = q == r ? local_count : 0;
    o->copy(be, parts + (size_t)r * 2 * c, local_stats, (size_t)2 * c * sizeof(float));
}

void sg_syncbn_allreduce(void *ctx, float *red, int c2) {
    sg_comm *comm = ctx;
    /* on failure red keeps the local sums; the comm is broken and reported */
    (void)sg_comm_syncbn_allreduce(comm, red, (size_t)c2);
}
