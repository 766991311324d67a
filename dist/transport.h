/* dist/transport.h - internal: the collective backends behind sg_comm.
 *
 * A transport (Gloo over TCP, NCCL) implements the raw collectives on one of
 * two channels: SG_CH_MAIN for the training loop's calls and SG_CH_GRAD for
 * the DDP comm thread, so collectives issued by two threads never interleave
 * on one connection. Each call returns SG_OK, or SG_ERR_RUNTIME with a short
 * reason in err (not logged: dist/comm.c then asks the store which rank is
 * dead or hung and logs both). dist/gloo_shim.cc implements these pointers
 * in C++ with the same signatures (core/status.h is plain C, valid C++).
 * Not a public header: only dist/ includes it.
 */
#ifndef SG_DIST_TRANSPORT_H
#define SG_DIST_TRANSPORT_H

#include <stddef.h>

#include "core/status.h"
#include "dist/store.h"

#ifdef __cplusplus
extern "C" {
#endif

enum { SG_CH_MAIN = 0, SG_CH_GRAD = 1, SG_CH_COUNT = 2 };
enum { SG_CDT_F32 = 0, SG_CDT_F64 = 1, SG_CDT_I64 = 2 };

typedef struct sg_transport sg_transport;
struct sg_transport {
    const char *name;
    int device_memory; /* 1: buffers are device pointers (NCCL); 0: host */
    void *impl;
    sg_status (*allreduce)(sg_transport *t, int ch, void *buf, size_t count, int dtype, char *err,
                           size_t errlen);
    sg_status (*broadcast)(sg_transport *t, int ch, void *buf, size_t bytes, int root, char *err,
                           size_t errlen);
    sg_status (*allgather)(sg_transport *t, int ch, const void *in, void *out, size_t bytes,
                           char *err, size_t errlen);
    sg_status (*barrier)(sg_transport *t, int ch, char *err, size_t errlen);
    void (*destroy)(sg_transport *t);
    /* Optional (NULL: not offered). Enqueue-only all-reduce / all-gather on
     * SG_CH_MAIN, ordered on the backend's compute stream: SG_OK once the
     * collective is issued, without waiting for it (NCCL; the result is
     * read by later compute-stream ops). Its completion and failures are
     * checked by flush, which the communicator calls before its next
     * blocking collective on the channel (and a watchdog meanwhile). */
    sg_status (*allreduce_enqueue)(sg_transport *t, void *buf, size_t count, int dtype, char *err,
                                   size_t errlen);
    sg_status (*allgather_enqueue)(sg_transport *t, const void *in, void *out, size_t bytes,
                                   char *err, size_t errlen);
    sg_status (*flush)(sg_transport *t, char *err, size_t errlen);
    /* Optional: times the calling thread slept in a poll loop waiting on
     * channel ch so far (NULL: the transport's waits never sleep-poll). */
    long (*poll_sleeps)(sg_transport *t, int ch);
    /* Optional (NULL: nothing is ever left in flight): at teardown, from the
     * training thread, before device memory is freed. Ends what is still in
     * flight on SG_CH_MAIN: waits for it (timeout) while no channel failed,
     * aborts it once one did, so that no device work stays blocked on a
     * peer. Logged on failure. */
    void (*quiesce)(sg_transport *t);
};

size_t sg_dtype_size(int dtype);

/* Gloo over TCP, rendezvous through the store (dist/gloo_shim.cc), with a
 * full mesh of connections for each channel whose bit (1 << SG_CH_MAIN,
 * 1 << SG_CH_GRAD) is set in channels; a collective on another channel is
 * SG_ERR_RUNTIME (an internal error). NULL after logging when Gloo is not
 * compiled in or the mesh cannot be built. */
sg_transport *sg_transport_gloo_create(sg_store *store, int rank, int world, double timeout_s,
                                       int channels);
/* NCCL (dist/nccl_comm.c); be is the CUDA backend (its compute and comm
 * streams are used). NULL when NCCL is not compiled in. */
struct sg_backend;
sg_transport *sg_transport_nccl_create(sg_store *store, struct sg_backend *be, int rank, int world,
                                       double timeout_s);
/* 1 if that transport is compiled into this binary, else 0 (flags). */
int sg_transport_gloo_compiled(void);
int sg_transport_nccl_compiled(void);

#ifdef __cplusplus
}
#endif

#endif
