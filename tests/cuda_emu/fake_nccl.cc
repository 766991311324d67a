/* tests/cuda_emu/fake_nccl.cc - NCCL for one rank on the emulated device.
 *
 * The NCCL calls the project makes, with their real prototypes (nccl.h):
 * communicators of one rank (a world of more is refused with
 * ncclInvalidUsage, naming the limit), and the collectives as device work
 * queued on the given stream like any kernel: with one rank an all-reduce,
 * a broadcast and an all-gather copy their input to their output. Their
 * byte ranges go through the ordering check (emu_device.h), so a collective
 * issued on the communication stream without waiting for the compute work
 * that wrote its buffer is a fault even though one rank's sum is the value
 * itself.
 *
 * A test can make the other ranks die (fake_nccl.h): the collectives are
 * then gated work (emu_device.h) that never starts, as a real NCCL kernel
 * spins for a peer that will never send, until ncclCommAbort of their
 * communicator ends them (their output left as it was).
 */
#include "tests/cuda_emu/fake_nccl.h"

#include <memory>
#include <nccl.h>
#include <stdio.h>
#include <string.h>
#include <string>

#include "tests/cuda_emu/emu_device.h"

struct ncclComm {
    int nranks, rank, device;
    int index; /* creation order in this process */
    /* set by ncclCommAbort; shared with the collectives still queued */
    std::shared_ptr<bool> aborted;
    std::string last;
};

/* under the device lock */
static bool peers_dead;
static unsigned peers_seen_by;
static int comms_made;

static size_t type_size(ncclDataType_t t) {
    switch (t) {
    case ncclInt8:
    case ncclUint8: return 1;
    case ncclFloat16:
    case ncclBfloat16: return 2;
    case ncclInt32:
    case ncclUint32:
    case ncclFloat32: return 4;
    case ncclInt64:
    case ncclUint64:
    case ncclFloat64: return 8;
    default: return 0;
    }
}

static ncclResult_t check_buf(ncclComm_t comm, const char *what, const void *p, size_t bytes) {
    if (sg_emu_classify(p, bytes, nullptr, nullptr) != SG_EMU_MEM_DEVICE) {
        char m[256];
        snprintf(m, sizeof m, "%s: %p (%zu bytes) is not inside one device allocation", what, p,
                 bytes);
        fprintf(stderr, "emulated NCCL: %s\n", m);
        if (comm) comm->last = m;
        return ncclInvalidArgument;
    }
    return ncclSuccess;
}

/* one rank: output = input; queued on the stream like a kernel */
static ncclResult_t copy_collective(const char *what, const void *in, void *out, size_t bytes,
                                    ncclComm_t comm, cudaStream_t stream) {
    sg_emu_guard g;
    if (!comm) return ncclInvalidArgument;
    if (check_buf(comm, what, in, bytes) != ncclSuccess ||
        check_buf(comm, what, out, bytes) != ncclSuccess)
        return ncclInvalidArgument;
    std::vector<sg_emu_use> uses{sg_emu_use{in, bytes, 0}, sg_emu_use{out, bytes, 1}};
    std::shared_ptr<bool> aborted = comm->aborted;
    /* with the peers dead it never starts until aborted, and then ends
     * without a result */
    cudaError_t e = sg_emu_enqueue_gated(
        stream, what, uses, [aborted] { return *aborted || !peers_dead; },
        [in, out, bytes, aborted] {
            if (!*aborted && in != out) memmove(out, in, bytes);
        });
    return e == cudaSuccess ? ncclSuccess : ncclUnhandledCudaError;
}

extern "C" {

ncclResult_t ncclGetVersion(int *version) {
    *version = NCCL_VERSION_CODE;
    return ncclSuccess;
}

const char *ncclGetErrorString(ncclResult_t r) {
    switch (r) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error";
    case ncclSystemError: return "unhandled system error";
    case ncclInternalError: return "internal error";
    case ncclInvalidArgument: return "invalid argument";
    case ncclInvalidUsage: return "invalid usage";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
    default: return "unknown result code";
    }
}

const char *ncclGetLastError(ncclComm_t comm) { return comm ? comm->last.c_str() : ""; }

ncclResult_t ncclGetUniqueId(ncclUniqueId *id) {
    memset(id, 0, sizeof *id);
    snprintf(id->internal, sizeof id->internal, "emulated-nccl");
    return ncclSuccess;
}

ncclResult_t ncclCommInitRankConfig(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank,
                                    ncclConfig_t *config) {
    (void)id;
    (void)config;
    sg_emu_guard g;
    if (nranks != 1 || rank != 0) {
        fprintf(stderr,
                "emulated NCCL: a communicator of %d ranks: the emulated device runs "
                "one rank (world size 1)\n",
                nranks);
        return ncclInvalidUsage;
    }
    ncclComm *c = new ncclComm();
    c->nranks = nranks;
    c->rank = rank;
    c->index = comms_made++;
    c->aborted = std::make_shared<bool>(false);
    cudaGetDevice(&c->device);
    *comm = c;
    return ncclSuccess;
}

ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank) {
    return ncclCommInitRankConfig(comm, nranks, id, rank, nullptr);
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *async) {
    sg_emu_guard g;
    if (!comm) return ncclInvalidArgument;
    *async = sg_emu_sticky() != cudaSuccess ? ncclUnhandledCudaError : ncclSuccess;
    if (*async == ncclSuccess && peers_dead && comm->index < 32 &&
        (peers_seen_by >> comm->index & 1u)) {
        comm->last = "the other ranks died (emulated: sg_emu_nccl_kill_peers)";
        *async = ncclRemoteError;
    }
    return ncclSuccess;
}

ncclResult_t ncclCommFinalize(ncclComm_t comm) { return comm ? ncclSuccess : ncclInvalidArgument; }
ncclResult_t ncclCommDestroy(ncclComm_t comm) {
    delete comm;
    return ncclSuccess;
}
ncclResult_t ncclCommAbort(ncclComm_t comm) {
    sg_emu_guard g;
    if (comm) *comm->aborted = true; /* its queued collectives may run now, emptily */
    delete comm;
    return ncclSuccess;
}

ncclResult_t ncclAllReduce(const void *send, void *recv, size_t count, ncclDataType_t type,
                           ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
    size_t es = type_size(type);
    if (!es || (int)op < 0 || (int)op > (int)ncclAvg) return ncclInvalidArgument;
    return copy_collective("ncclAllReduce", send, recv, count * es, comm, stream);
}

ncclResult_t ncclBroadcast(const void *send, void *recv, size_t count, ncclDataType_t type,
                           int root, ncclComm_t comm, cudaStream_t stream) {
    size_t es = type_size(type);
    if (!es || root != 0) return ncclInvalidArgument;
    return copy_collective("ncclBroadcast", send, recv, count * es, comm, stream);
}

ncclResult_t ncclAllGather(const void *send, void *recv, size_t count, ncclDataType_t type,
                           ncclComm_t comm, cudaStream_t stream) {
    size_t es = type_size(type);
    if (!es) return ncclInvalidArgument;
    return copy_collective("ncclAllGather", send, recv, count * es, comm, stream);
}

void sg_emu_nccl_kill_peers(unsigned seen_by) {
    sg_emu_guard g;
    peers_dead = true;
    peers_seen_by = seen_by;
}

} // extern "C"
