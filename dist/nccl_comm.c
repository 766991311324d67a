/* dist/nccl_comm.c - the NCCL transport (dist/transport.h), host API from C.
 *
 * One NCCL communicator per channel, created non-blocking from a unique id
 * that rank 0 publishes through the store. SG_CH_MAIN runs on the backend's
 * compute stream (SyncBN sits in the compute path), SG_CH_GRAD on its comm
 * stream (DDP buckets, ordered by events the DDP code records). Every call
 * enqueues the collective, records an event and polls it together with
 * ncclCommGetAsyncError until it completes or dist.timeout_s passes; then
 * that channel's communicator is aborted (ncclCommAbort) and the other
 * channel's thread aborts its own at its next call, so a dead or hung peer
 * never hangs this rank. SG_CH_MAIN's enqueued SyncBN collectives have no
 * thread waiting on them: the watchdog aborts that communicator as soon as
 * either channel fails (else a SyncBN kernel could stay blocked on the
 * compute stream, and every later cudaFree, which waits for the device,
 * behind it). The lifecycle (waits, failure, release exactly once) is
 * dist/nccl_state.c, tested on stubs; this file maps it to NCCL and CUDA.
 *
 * Two communicators used from two threads: NCCL's user guide ("Using
 * multiple NCCL communicators concurrently",
 * https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/usage/communicators.html)
 * warns that NCCL kernels block waiting for their peers and that any CUDA
 * call may synchronise the device, so operations on different communicators
 * need the same order on every rank or they can deadlock. The rule here:
 * - each channel issues its collectives in one order, the same on every
 *   rank (SG_CH_MAIN: the training loop's program order; SG_CH_GRAD: DDP's
 *   bucket order);
 * - the two streams wait for each other only at points of the step that
 *   are the same on every rank (DDP: the comm stream after the compute
 *   stream when a bucket is handed over, the compute stream after the comm
 *   stream in sg_ddp_wait), so no rank's stream waits for a collective that
 *   a peer orders after one that peer waits for;
 * - both communicators are warmed up at creation by one small collective
 *   each, SG_CH_MAIN then SG_CH_GRAD on every rank, before any training
 *   thread exists, so NCCL's first-use setup (connections, buffers: device
 *   allocations that may synchronise the device) does not happen while a
 *   collective of the other communicator is in flight.
 * Between SG_CH_MAIN's SyncBN collectives and SG_CH_GRAD's buckets during
 * backward the host issue order is not the same across ranks (two threads);
 * the stream waits above keep the device order consistent. Collectives
 * that a larger size makes NCCL connect anew can still set up at first use;
 * NCCL_RUNTIME_CONNECT=0 makes NCCL connect everything at creation.
 * Owns the communicators, the events and a scratch word for barriers. */
#include <cuda_runtime.h>
#include <nccl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/log.h"
#include "core/sigmask.h"
#include "core/util.h"
#include "dist/nccl_state.h"
#include "dist/transport.h"
#include "kernels/backend.h"

typedef struct nccl_impl {
    sg_nccl_state st; /* the communicators (st.comm) and their lifecycle */
    cudaStream_t stream[SG_CH_COUNT];
    cudaEvent_t done[SG_CH_COUNT];
    float *scratch; /* barrier word */
    int device, rank, world;
    /* SG_CH_MAIN's enqueued collectives (SyncBN) and their watchdog: mu is
     * held around every NCCL call on SG_CH_MAIN and by the watchdog, which
     * alone may abort that communicator from another thread */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int pending;     /* a collective enqueued, not yet seen complete */
    double deadline; /* ... by then */
    int stop;
    pthread_t dog;
    int dog_running;
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

/* ---- the calls dist/nccl_state.c makes, on the real libraries ---- */

static sg_ncs_poll poll_of(ncclResult_t r, ncclComm_t comm, char *why, size_t len) {
    if (r == ncclSuccess) return SG_NCS_DONE;
    if (r == ncclInProgress) return SG_NCS_PENDING;
    const char *last = comm ? ncclGetLastError(comm) : NULL;
    snprintf(why, len, "%s%s%s%s", ncclGetErrorString(r), last && *last ? " (" : "",
             last ? last : "", last && *last ? ")" : "");
    return SG_NCS_ERROR;
}

static sg_ncs_poll api_async_error(void *comm, char *why, size_t len) {
    ncclResult_t st = ncclSuccess;
    ncclResult_t r = ncclCommGetAsyncError((ncclComm_t)comm, &st);
    if (r != ncclSuccess) return poll_of(r, (ncclComm_t)comm, why, len);
    return poll_of(st, (ncclComm_t)comm, why, len);
}

static sg_ncs_poll api_event_query(void *event, char *why, size_t len) {
    cudaError_t q = cudaEventQuery((cudaEvent_t)event);
    if (q == cudaSuccess) return SG_NCS_DONE;
    if (q == cudaErrorNotReady) return SG_NCS_PENDING;
    snprintf(why, len, "%s", cudaGetErrorString(q));
    return SG_NCS_ERROR;
}

static sg_ncs_poll api_finalize(void *comm, char *why, size_t len) {
    return poll_of(ncclCommFinalize((ncclComm_t)comm), (ncclComm_t)comm, why, len);
}

static void api_destroy(void *comm) { ncclCommDestroy((ncclComm_t)comm); }
static void api_abort(void *comm) { ncclCommAbort((ncclComm_t)comm); }

static const sg_nccl_api real_api = {api_async_error, api_event_query, api_finalize, api_destroy,
                                     api_abort};

static sg_status begin(nccl_impl *n, int ch, char *err, size_t len) {
    if (sg_ncs_begin(&n->st, ch, err, len) != SG_OK) return SG_ERR_RUNTIME;
    CUDA_OK(cudaSetDevice(n->device), err, len);
    return SG_OK;
}

static sg_status after(nccl_impl *n, int ch, ncclResult_t r, const char *what, char *err,
                       size_t len) {
    char why[256] = "";
    sg_ncs_poll issued = poll_of(r, n->st.comm[ch], why, sizeof why);
    if (issued == SG_NCS_ERROR) {
        snprintf(err, len, "NCCL %s: %s", what, why);
        sg_ncs_fail(&n->st, ch);
        return SG_ERR_RUNTIME;
    }
    /* with a non-blocking communicator the enqueue itself may be in progress */
    if (sg_ncs_wait(&n->st, ch, issued, NULL, what, err, len) != SG_OK) return SG_ERR_RUNTIME;
    cudaError_t e = cudaEventRecord(n->done[ch], n->stream[ch]);
    if (e != cudaSuccess) {
        snprintf(err, len, "cudaEventRecord after NCCL %s failed: %s", what, cudaGetErrorString(e));
        sg_ncs_fail(&n->st, ch);
        return SG_ERR_RUNTIME;
    }
    return sg_ncs_wait(&n->st, ch, SG_NCS_DONE, n->done[ch], what, err, len);
}

static sg_status nc_allreduce_raw(sg_transport *t, int ch, void *buf, size_t count, int dtype,
                                  char *err, size_t len) {
    nccl_impl *n = t->impl;
    if (begin(n, ch, err, len) != SG_OK) return SG_ERR_RUNTIME;
    ncclDataType_t ty = dtype == SG_CDT_F32   ? ncclFloat32
                        : dtype == SG_CDT_F64 ? ncclFloat64
                                              : ncclInt64;
    return after(
        n, ch,
        ncclAllReduce(buf, buf, count, ty, ncclSum, (ncclComm_t)n->st.comm[ch], n->stream[ch]),
        "all-reduce", err, len);
}

static sg_status nc_broadcast_raw(sg_transport *t, int ch, void *buf, size_t bytes, int root,
                                  char *err, size_t len) {
    nccl_impl *n = t->impl;
    if (begin(n, ch, err, len) != SG_OK) return SG_ERR_RUNTIME;
    return after(
        n, ch,
        ncclBroadcast(buf, buf, bytes, ncclUint8, root, (ncclComm_t)n->st.comm[ch], n->stream[ch]),
        "broadcast", err, len);
}

static sg_status nc_allgather_raw(sg_transport *t, int ch, const void *in, void *out, size_t bytes,
                                  char *err, size_t len) {
    nccl_impl *n = t->impl;
    if (begin(n, ch, err, len) != SG_OK) return SG_ERR_RUNTIME;
    return after(
        n, ch, ncclAllGather(in, out, bytes, ncclUint8, (ncclComm_t)n->st.comm[ch], n->stream[ch]),
        "all-gather", err, len);
}

static sg_status nc_barrier_raw(sg_transport *t, int ch, char *err, size_t len) {
    nccl_impl *n = t->impl;
    if (begin(n, ch, err, len) != SG_OK) return SG_ERR_RUNTIME;
    return after(n, ch,
                 ncclAllReduce(n->scratch, n->scratch, 1, ncclFloat32, ncclSum,
                               (ncclComm_t)n->st.comm[ch], n->stream[ch]),
                 "barrier", err, len);
}

/* The blocking collectives: SG_CH_MAIN's under mu (the watchdog's abort). */
static void lock_ch(nccl_impl *n, int ch) {
    if (ch == SG_CH_MAIN) pthread_mutex_lock(&n->mu);
}
static void unlock_ch(nccl_impl *n, int ch) {
    if (ch == SG_CH_MAIN) pthread_mutex_unlock(&n->mu);
}
static sg_status nc_allreduce(sg_transport *t, int ch, void *buf, size_t count, int dtype,
                              char *err, size_t len) {
    nccl_impl *n = t->impl;
    lock_ch(n, ch);
    sg_status rc = nc_allreduce_raw(t, ch, buf, count, dtype, err, len);
    unlock_ch(n, ch);
    return rc;
}
static sg_status nc_broadcast(sg_transport *t, int ch, void *buf, size_t bytes, int root, char *err,
                              size_t len) {
    nccl_impl *n = t->impl;
    lock_ch(n, ch);
    sg_status rc = nc_broadcast_raw(t, ch, buf, bytes, root, err, len);
    unlock_ch(n, ch);
    return rc;
}
static sg_status nc_allgather(sg_transport *t, int ch, const void *in, void *out, size_t bytes,
                              char *err, size_t len) {
    nccl_impl *n = t->impl;
    lock_ch(n, ch);
    sg_status rc = nc_allgather_raw(t, ch, in, out, bytes, err, len);
    unlock_ch(n, ch);
    return rc;
}
static sg_status nc_barrier(sg_transport *t, int ch, char *err, size_t len) {
    nccl_impl *n = t->impl;
    lock_ch(n, ch);
    sg_status rc = nc_barrier_raw(t, ch, err, len);
    unlock_ch(n, ch);
    return rc;
}

/* After a call on SG_CH_GRAD: a failure there (the shared flag raised)
 * wakes the watchdog, which aborts SG_CH_MAIN's communicator. */
static sg_status grad_done(nccl_impl *n, int ch, sg_status rc) {
    if (ch == SG_CH_GRAD && rc != SG_OK) {
        pthread_mutex_lock(&n->mu);
        pthread_cond_signal(&n->cv);
        pthread_mutex_unlock(&n->mu);
    }
    return rc;
}
static sg_status nc_allreduce_ch(sg_transport *t, int ch, void *buf, size_t count, int dtype,
                                 char *err, size_t len) {
    return grad_done(t->impl, ch, nc_allreduce(t, ch, buf, count, dtype, err, len));
}
static sg_status nc_broadcast_ch(sg_transport *t, int ch, void *buf, size_t bytes, int root,
                                 char *err, size_t len) {
    return grad_done(t->impl, ch, nc_broadcast(t, ch, buf, bytes, root, err, len));
}
static sg_status nc_allgather_ch(sg_transport *t, int ch, const void *in, void *out, size_t bytes,
                                 char *err, size_t len) {
    return grad_done(t->impl, ch, nc_allgather(t, ch, in, out, bytes, err, len));
}
static sg_status nc_barrier_ch(sg_transport *t, int ch, char *err, size_t len) {
    return grad_done(t->impl, ch, nc_barrier(t, ch, err, len));
}

/* ---- SyncBN's collectives, enqueued on the compute stream (SG_CH_MAIN) ----
 * Issued, an event recorded after them, and handed to the watchdog; the
 * host does not wait. flush waits for the last one (the communicator calls
 * it before its next blocking collective on the channel). */

static sg_status enqueued(nccl_impl *n, ncclResult_t r, const char *what, char *err, size_t len) {
    char why[256] = "";
    sg_ncs_poll issued = poll_of(r, n->st.comm[SG_CH_MAIN], why, sizeof why);
    if (issued == SG_NCS_ERROR) {
        snprintf(err, len, "NCCL %s: %s", what, why);
        sg_ncs_fail(&n->st, SG_CH_MAIN);
        return SG_ERR_RUNTIME;
    }
    if (sg_ncs_wait_issued(&n->st, SG_CH_MAIN, issued, what, err, len) != SG_OK)
        return SG_ERR_RUNTIME;
    cudaError_t e = cudaEventRecord(n->done[SG_CH_MAIN], n->stream[SG_CH_MAIN]);
    if (e != cudaSuccess) {
        snprintf(err, len, "cudaEventRecord after NCCL %s failed: %s", what, cudaGetErrorString(e));
        sg_ncs_fail(&n->st, SG_CH_MAIN);
        return SG_ERR_RUNTIME;
    }
    n->pending = 1;
    n->deadline = sg_now_s() + n->st.timeout_s;
    pthread_cond_signal(&n->cv);
    return SG_OK;
}

static sg_status nc_allreduce_enqueue(sg_transport *t, void *buf, size_t count, int dtype,
                                      char *err, size_t len) {
    nccl_impl *n = t->impl;
    pthread_mutex_lock(&n->mu);
    sg_status rc = begin(n, SG_CH_MAIN, err, len);
    if (rc == SG_OK) {
        ncclDataType_t ty = dtype == SG_CDT_F32 ? ncclFloat32 : ncclFloat64;
        rc = enqueued(n,
                      ncclAllReduce(buf, buf, count, ty, ncclSum,
                                    (ncclComm_t)n->st.comm[SG_CH_MAIN], n->stream[SG_CH_MAIN]),
                      "all-reduce (enqueued)", err, len);
    }
    pthread_mutex_unlock(&n->mu);
    return rc;
}

static sg_status nc_allgather_enqueue(sg_transport *t, const void *in, void *out, size_t bytes,
                                      char *err, size_t len) {
    nccl_impl *n = t->impl;
    pthread_mutex_lock(&n->mu);
    sg_status rc = begin(n, SG_CH_MAIN, err, len);
    if (rc == SG_OK)
        rc = enqueued(n,
                      ncclAllGather(in, out, bytes, ncclUint8, (ncclComm_t)n->st.comm[SG_CH_MAIN],
                                    n->stream[SG_CH_MAIN]),
                      "all-gather (enqueued)", err, len);
    pthread_mutex_unlock(&n->mu);
    return rc;
}

static sg_status nc_flush(sg_transport *t, char *err, size_t len) {
    nccl_impl *n = t->impl;
    pthread_mutex_lock(&n->mu);
    sg_status rc = begin(n, SG_CH_MAIN, err, len);
    if (rc == SG_OK)
        rc = sg_ncs_wait(&n->st, SG_CH_MAIN, SG_NCS_DONE, n->done[SG_CH_MAIN],
                         "SyncBN collectives (enqueued)", err, len);
    n->pending = 0;
    pthread_mutex_unlock(&n->mu);
    return rc;
}

/* Teardown, before device memory is freed: SG_CH_MAIN's enqueued
 * collectives waited for (dist.timeout_s) while no channel failed, and its
 * communicator aborted once one did, so no kernel stays blocked on the
 * compute stream. */
static void nc_quiesce(sg_transport *t) {
    nccl_impl *n = t->impl;
    pthread_mutex_lock(&n->mu);
    char err[512] = "";
    if (n->pending && n->st.comm[SG_CH_MAIN] && !atomic_load(&n->st.failed) &&
        sg_ncs_wait(&n->st, SG_CH_MAIN, SG_NCS_DONE, n->done[SG_CH_MAIN],
                    "SyncBN collectives (enqueued) at teardown", err, sizeof err) != SG_OK)
        SG_ERROR("rank %d: %s", n->rank, err);
    n->pending = 0;
    if (atomic_load(&n->st.failed) && n->st.comm[SG_CH_MAIN]) sg_ncs_fail(&n->st, SG_CH_MAIN);
    pthread_mutex_unlock(&n->mu);
}

static long nc_poll_sleeps(sg_transport *t, int ch) {
    nccl_impl *n = t->impl;
    return atomic_load(&n->st.sleeps[ch]);
}

/* The watchdog: while a collective enqueued on SG_CH_MAIN has not
 * completed, checks it every millisecond (its own thread's sleep: the
 * training thread goes on issuing work); past dist.timeout_s, or on an
 * asynchronous NCCL or CUDA error, aborts that communicator, which ends the
 * blocked kernels, so the training thread's next wait on the stream fails
 * instead of hanging. Once either channel failed (SG_CH_GRAD's thread
 * signals it), aborts that communicator at once: its enqueued collectives
 * wait for peers that may never come, and nothing else would end them. */
static void *watchdog(void *arg) {
    nccl_impl *n = arg;
    if (cudaSetDevice(n->device) != cudaSuccess) (void)cudaGetLastError();
    pthread_mutex_lock(&n->mu);
    while (!n->stop) {
        if (atomic_load(&n->st.failed)) {
            if (n->st.comm[SG_CH_MAIN]) {
                SG_WARN("rank %d: NCCL: a collective failed; aborting the SyncBN communicator "
                        "too, so that no collective stays blocked on the compute stream",
                        n->rank);
                sg_ncs_fail(&n->st, SG_CH_MAIN);
            }
            n->pending = 0;
        }
        if (!n->pending || !n->st.comm[SG_CH_MAIN]) {
            n->pending = 0;
            pthread_cond_wait(&n->cv, &n->mu);
            continue;
        }
        char why[256] = "";
        sg_ncs_poll q = api_event_query(n->done[SG_CH_MAIN], why, sizeof why);
        if (q == SG_NCS_DONE) {
            n->pending = 0;
            continue;
        }
        if (q == SG_NCS_PENDING)
            q = api_async_error(n->st.comm[SG_CH_MAIN], why, sizeof why) == SG_NCS_ERROR
                    ? SG_NCS_ERROR
                    : SG_NCS_PENDING;
        if (q == SG_NCS_ERROR || sg_now_s() > n->deadline) {
            SG_ERROR("rank %d: NCCL: a SyncBN collective enqueued on the compute stream %s%s; "
                     "aborting the communicator so that the step fails instead of hanging (see "
                     "the other ranks' logs for the rank that died or hung)",
                     n->rank,
                     q == SG_NCS_ERROR ? "failed: " : "did not complete within dist.timeout_s",
                     q == SG_NCS_ERROR ? why : "");
            sg_ncs_fail(&n->st, SG_CH_MAIN);
            n->pending = 0;
            continue;
        }
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 1000 * 1000;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&n->cv, &n->mu, &ts);
    }
    pthread_mutex_unlock(&n->mu);
    return NULL;
}

static void nc_destroy(sg_transport *t) {
    nccl_impl *n = t->impl;
    cudaSetDevice(n->device);
    if (n->dog_running) {
        pthread_mutex_lock(&n->mu);
        n->stop = 1;
        pthread_cond_signal(&n->cv);
        pthread_mutex_unlock(&n->mu);
        pthread_join(n->dog, NULL);
        n->dog_running = 0;
    }
    /* every communicator released once (dist/nccl_state.h), then the events
     * the collectives recorded */
    sg_ncs_shutdown(&n->st);
    for (int ch = 0; ch < SG_CH_COUNT; ch++)
        if (n->done[ch]) cudaEventDestroy(n->done[ch]);
    if (n->scratch) cudaFree(n->scratch);
    pthread_cond_destroy(&n->cv);
    pthread_mutex_destroy(&n->mu);
    free(n);
    free(t);
}

int sg_transport_nccl_compiled(void) { return 1; }

/* A failed setup: whatever was created is aborted, never finalized (a peer
 * that did not join would make a finalize wait). */
static void init_fail(sg_transport *t) {
    nccl_impl *n = t->impl;
    atomic_store(&n->st.failed, 1);
    nc_destroy(t);
}

sg_transport *sg_transport_nccl_create(sg_store *store, struct sg_backend *be, int rank, int world,
                                       double timeout_s) {
    nccl_impl *n = calloc(1, sizeof *n);
    sg_transport *t = calloc(1, sizeof *t);
    SG_CHECK(n && t, "out of memory");
    n->device = be->device_index;
    n->rank = rank;
    n->world = world;
    n->st.api = &real_api;
    n->st.timeout_s = timeout_s;
    atomic_init(&n->st.failed, 0);
    for (int ch = 0; ch < SG_CH_COUNT; ch++) atomic_init(&n->st.sleeps[ch], 0);
    SG_CHECK(pthread_mutex_init(&n->mu, NULL) == 0 && pthread_cond_init(&n->cv, NULL) == 0,
             "NCCL setup: pthread mutex/condition init failed");
    t->name = "nccl";
    t->device_memory = 1;
    t->impl = n;
    t->allreduce = nc_allreduce_ch;
    t->broadcast = nc_broadcast_ch;
    t->allgather = nc_allgather_ch;
    t->barrier = nc_barrier_ch;
    t->destroy = nc_destroy;
    t->quiesce = nc_quiesce;
    t->allreduce_enqueue = nc_allreduce_enqueue;
    t->allgather_enqueue = nc_allgather_enqueue;
    t->flush = nc_flush;
    t->poll_sleeps = nc_poll_sleeps;
    char err[512] = "";
    if (cudaSetDevice(n->device) != cudaSuccess ||
        cudaMalloc((void **)&n->scratch, sizeof(float)) != cudaSuccess) {
        SG_ERROR("rank %d: NCCL setup: cannot use CUDA device %d: %s", rank, n->device,
                 cudaGetErrorString(cudaGetLastError()));
        init_fail(t);
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
                init_fail(t);
                return NULL;
            }
            if (sg_store_set(store, key, &id, sizeof id) != SG_STORE_OK) {
                init_fail(t);
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
                init_fail(t);
                return NULL;
            }
            memcpy(&id, v, sizeof id);
            free(v);
        }
        ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
        cfg.blocking = 0;
        ncclComm_t comm = NULL;
        ncclResult_t r = ncclCommInitRankConfig(&comm, world, id, rank, &cfg);
        n->st.comm[ch] = comm; /* set even on failure: released (aborted) by init_fail */
        if (r != ncclSuccess && r != ncclInProgress) {
            SG_ERROR(
                "rank %d: ncclCommInitRankConfig failed: %s. One process per GPU (LOCAL_RANK selects it); "
                "NCCL_DEBUG=INFO shows why.",
                rank, ncclGetErrorString(r));
            init_fail(t);
            return NULL;
        }
        char why[256] = "";
        if (sg_ncs_wait(&n->st, ch, poll_of(r, comm, why, sizeof why), NULL, "communicator init",
                        err, sizeof err) != SG_OK) {
            SG_ERROR(
                "rank %d: %s. A rank that never joins makes the others time out here: see their logs.",
                rank, err);
            init_fail(t);
            return NULL;
        }
        cudaError_t ce = cudaEventCreateWithFlags(&n->done[ch], cudaEventDisableTiming);
        if (ce != cudaSuccess) {
            n->done[ch] = NULL;
            SG_ERROR("rank %d: NCCL setup: cudaEventCreateWithFlags failed: %s", rank,
                     cudaGetErrorString(ce));
            init_fail(t);
            return NULL;
        }
    }
    /* the warm-up (the order rule at the top): one collective per
     * communicator, SG_CH_MAIN then SG_CH_GRAD, on every rank, before any
     * thread of ours uses either */
    for (int ch = 0; ch < SG_CH_COUNT; ch++)
        if (nc_barrier_raw(t, ch, err, sizeof err) != SG_OK) {
            SG_ERROR("rank %d: NCCL setup: the first collective on the %s communicator failed: "
                     "%s. See the other ranks' logs (a rank that died or never joined).",
                     rank, ch == SG_CH_MAIN ? "SyncBN" : "gradient", err);
            init_fail(t);
            return NULL;
        }
    /* born with the stop signals blocked, as every helper thread */
    sigset_t old;
    sg_sigmask_block_all(&old);
    int prc = pthread_create(&n->dog, NULL, watchdog, n);
    sg_sigmask_restore(&old);
    if (prc != 0) {
        SG_ERROR("rank %d: NCCL setup: cannot start the SyncBN watchdog thread (pthread_create "
                 "returned %d)",
                 rank, prc);
        init_fail(t);
        return NULL;
    }
    n->dog_running = 1;
    return t;
}
