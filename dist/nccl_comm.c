/* dist/nccl_comm.c - the NCCL transport (dist/transport.h), host API from C.
 *
 * One NCCL communicator per channel, created non-blocking from a unique id
 * that rank 0 publishes through the store. SG_CH_MAIN runs on the backend's
 * compute stream (SyncBN sits in the compute path), SG_CH_GRAD on its comm
 * stream (DDP buckets, ordered by events the DDP code records). Every call
 * enqueues the collective, records an event and polls it together with
 * ncclCommGetAsyncError until it completes or dist.timeout_s passes; then
 * the communicators are aborted (ncclCommAbort), so a dead or hung peer
 * never hangs this rank. Owns the communicators, the events and a scratch
 * word for barriers. */
#include <cuda_runtime.h>
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/log.h"
#include "core/util.h"
#include "dist/transport.h"
#include "kernels/backend.h"

typedef struct nccl_impl {
    ncclComm_t comm[SG_CH_COUNT];
    cudaStream_t stream[SG_CH_COUNT];
    cudaEvent_t done[SG_CH_COUNT];
    float *scratch; /* barrier word */
    int device, rank, world;
    double timeout_s;
    int aborted;
} nccl_impl;

#define CUDA_OK(call, err, len)                                                     \
    do {                                                                            \
        cudaError_t e_ = (call);                                                    \
        if (e_ != cudaSuccess) {                                                    \
            snprintf(err, len, "%s failed at %s:%d: %s", #call, __FILE__, __LINE__, \
                     cudaGetErrorString(e_));                                       \
            return SG_ERR_RUNTIME;                                                  \
        }                                                                           \
    } while (0)

static void abort_all(nccl_impl *n) {
    if (n->aborted) return;
    n->aborted = 1;
    for (int ch = 0; ch < SG_CH_COUNT; ch++)
        if (n->comm[ch]) ncclCommAbort(n->comm[ch]);
}

/* Waits until the communicator leaves ncclInProgress (non-blocking init and
 * enqueue) and the channel's event completes, or the timeout. SG_OK, or
 * SG_ERR_RUNTIME with the reason in err (not logged; the communicators are
 * aborted). The helpers below follow the same contract. */
static sg_status finish(nccl_impl *n, int ch, ncclResult_t issued, const char *what, int wait_event,
                        char *err, size_t len) {
    double deadline = sg_now_s() + n->timeout_s;
    ncclResult_t st = issued;
    for (;;) {
        if (st == ncclInProgress) ncclCommGetAsyncError(n->comm[ch], &st);
        if (st != ncclSuccess && st != ncclInProgress) {
            snprintf(err, len, "NCCL %s failed: %s (%s)", what, ncclGetErrorString(st),
                     ncclGetLastError(n->comm[ch]));
            abort_all(n);
            return SG_ERR_RUNTIME;
        }
        if (st == ncclSuccess) {
            if (!wait_event) return SG_OK;
            cudaError_t q = cudaEventQuery(n->done[ch]);
            if (q == cudaSuccess) return SG_OK;
            if (q != cudaErrorNotReady) {
                snprintf(err, len, "CUDA error while waiting for NCCL %s: %s", what,
                         cudaGetErrorString(q));
                abort_all(n);
                return SG_ERR_RUNTIME;
            }
            ncclResult_t async = ncclSuccess;
            ncclCommGetAsyncError(n->comm[ch], &async);
            if (async != ncclSuccess && async != ncclInProgress) {
                snprintf(err, len, "NCCL %s failed asynchronously: %s", what,
                         ncclGetErrorString(async));
                abort_all(n);
                return SG_ERR_RUNTIME;
            }
        }
        if (sg_now_s() > deadline) {
            snprintf(err, len, "NCCL %s did not complete within %.1f s (communicators aborted)",
                     what, n->timeout_s);
            abort_all(n);
            return SG_ERR_RUNTIME;
        }
        struct timespec ts = {0, 200 * 1000};
        nanosleep(&ts, NULL);
    }
}

static sg_status begin(nccl_impl *n, char *err, size_t len) {
    if (n->aborted) {
        snprintf(err, len, "the NCCL communicators were aborted after an earlier failure");
        return SG_ERR_RUNTIME;
    }
    CUDA_OK(cudaSetDevice(n->device), err, len);
    return SG_OK;
}

static sg_status after(nccl_impl *n, int ch, ncclResult_t r, const char *what, char *err,
                       size_t len) {
    if (r != ncclSuccess && r != ncclInProgress) {
        snprintf(err, len, "NCCL %s: %s", what, ncclGetErrorString(r));
        abort_all(n);
        return SG_ERR_RUNTIME;
    }
    /* with a non-blocking communicator the enqueue itself may be in progress */
    if (finish(n, ch, r, what, 0, err, len) != SG_OK) return SG_ERR_RUNTIME;
    CUDA_OK(cudaEventRecord(n->done[ch], n->stream[ch]), err, len);
    return finish(n, ch, ncclSuccess, what, 1, err, len);
}

static sg_status nc_allreduce(sg_transport *t, int ch, void *buf, size_t count, int dtype,
                              char *err, size_t len) {
    nccl_impl *n = t->impl;
    if (begin(n, err, len) != SG_OK) return SG_ERR_RUNTIME;
    ncclDataType_t ty = dtype == SG_CDT_F32   ? ncclFloat32
                        : dtype == SG_CDT_F64 ? ncclFloat64
                                              : ncclInt64;
    return after(n, ch, ncclAllReduce(buf, buf, count, ty, ncclSum, n->comm[ch], n->stream[ch]),
                 "all-reduce", err, len);
}

static sg_status nc_broadcast(sg_transport *t, int ch, void *buf, size_t bytes, int root, char *err,
                              size_t len) {
    nccl_impl *n = t->impl;
    if (begin(n, err, len) != SG_OK) return SG_ERR_RUNTIME;
    return after(n, ch, ncclBroadcast(buf, buf, bytes, ncclUint8, root, n->comm[ch], n->stream[ch]),
                 "broadcast", err, len);
}

static sg_status nc_allgather(sg_transport *t, int ch, const void *in, void *out, size_t bytes,
                              char *err, size_t len) {
    nccl_impl *n = t->impl;
    if (begin(n, err, len) != SG_OK) return SG_ERR_RUNTIME;
    return after(n, ch, ncclAllGather(in, out, bytes, ncclUint8, n->comm[ch], n->stream[ch]),
                 "all-gather", err, len);
}

static sg_status nc_barrier(sg_transport *t, int ch, char *err, size_t len) {
    nccl_impl *n = t->impl;
    if (begin(n, err, len) != SG_OK) return SG_ERR_RUNTIME;
    return after(
        n, ch,
        ncclAllReduce(n->scratch, n->scratch, 1, ncclFloat32, ncclSum, n->comm[ch], n->stream[ch]),
        "barrier", err, len);
}

static void nc_destroy(sg_transport *t) {
    nccl_impl *n = t->impl;
    cudaSetDevice(n->device);
    for (int ch = 0; ch < SG_CH_COUNT; ch++) {
        if (!n->comm[ch]) continue;
        if (!n->aborted) ncclCommDestroy(n->comm[ch]);
        if (n->done[ch]) cudaEventDestroy(n->done[ch]);
    }
    abort_all(n); /* no-op unless a destroy was skipped above */
    if (n->scratch) cudaFree(n->scratch);
    free(n);
    free(t);
}

int sg_transport_nccl_compiled(void) { return 1; }

sg_transport *sg_transport_nccl_create(sg_store *store, struct sg_backend *be, int rank, int world,
                                       double timeout_s) {
    nccl_impl *n = calloc(1, sizeof *n);
    sg_transport *t = calloc(1, sizeof *t);
    SG_CHECK(n && t, "out of memory");
    n->device = be->device_index;
    n->rank = rank;
    n->world = world;
    n->timeout_s = timeout_s;
    t->name = "nccl";
    t->device_memory = 1;
    t->impl = n;
    t->allreduce = nc_allreduce;
    t->broadcast = nc_broadcast;
    t->allgather = nc_allgather;
    t->barrier = nc_barrier;
    t->destroy = nc_destroy;
    char err[512] = "";
    if (cudaSetDevice(n->device) != cudaSuccess ||
        cudaMalloc((void **)&n->scratch, sizeof(float)) != cudaSuccess) {
        SG_ERROR("rank %d: NCCL setup: cannot use CUDA device %d: %s", rank, n->device,
                 cudaGetErrorString(cudaGetLastError()));
        nc_destroy(t);
        return NULL;
    }
    n->stream[SG_CH_MAIN] = (cudaStream_t)be->ops->stream(be, SG_STREAM_COMPUTE);
    n->stream[SG_CH_GRAD] = (cudaStream_t)be->ops->stream(be, SG_STREAM_COMM);
    for (int ch = 0; ch < SG_CH_COUNT; ch++) {
        char key[64];
        snprintf(key, sizeof key, "nccl/uid/%d", ch);
        ncclUniqueId id;
        if (rank == 0) {
            ncclResult_t r = ncclGetUniqueId(&id);
            if (r != ncclSuccess) {
                SG_ERROR("rank 0: ncclGetUniqueId failed: %s (check NCCL_SOCKET_IFNAME / network)",
                         ncclGetErrorString(r));
                nc_destroy(t);
                return NULL;
            }
            if (sg_store_set(store, key, &id, sizeof id) != SG_STORE_OK) {
                nc_destroy(t);
                return NULL;
            }
        } else {
            void *v = NULL;
            size_t len = 0;
            sg_store_rc rc = sg_store_get(store, key, &v, &len);
            if (rc != SG_STORE_OK || len != sizeof id) {
                if (rc == SG_STORE_TIMEOUT)
                    SG_ERROR("rank %d: rank 0 did not publish the NCCL unique id within %.1f s: "
                             "see rank 0's log",
                             rank, timeout_s);
                free(v);
                nc_destroy(t);
                return NULL;
            }
            memcpy(&id, v, sizeof id);
            free(v);
        }
        ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
        cfg.blocking = 0;
        ncclResult_t r = ncclCommInitRankConfig(&n->comm[ch], world, id, rank, &cfg);
        if (r != ncclSuccess && r != ncclInProgress) {
            SG_ERROR(
                "rank %d: ncclCommInitRankConfig failed: %s. One process per GPU (LOCAL_RANK selects it); "
                "NCCL_DEBUG=INFO shows why.",
                rank, ncclGetErrorString(r));
            nc_destroy(t);
            return NULL;
        }
        if (finish(n, ch, r, "communicator init", 0, err, sizeof err) != SG_OK) {
            SG_ERROR(
                "rank %d: %s. A rank that never joins makes the others time out here: see their logs.",
                rank, err);
            nc_destroy(t);
            return NULL;
        }
        if (cudaEventCreateWithFlags(&n->done[ch], cudaEventDisableTiming) != cudaSuccess) {
            SG_ERROR("rank %d: cudaEventCreate failed", rank);
            nc_destroy(t);
            return NULL;
        }
    }
    return t;
}
