/* dist/nccl_state.h - internal: the NCCL transport's communicator lifecycle
 * (dist/nccl_comm.c), written against a table of calls so a test can run it
 * on stubs without NCCL or a GPU (tests/dist/test_nccl_state.c).
 *
 * Rules it enforces:
 * - each channel's communicator is touched only by the thread calling on
 *   that channel (SG_CH_MAIN: the training thread, SG_CH_GRAD: the DDP comm
 *   thread) and, once both are done, by sg_ncs_shutdown;
 * - a failure on one channel aborts that channel's communicator only and
 *   raises the shared `failed` flag; the other channel's thread sees the flag
 *   at its next call or while it polls, and aborts its own communicator
 *   (SG_CH_MAIN's collectives that were only enqueued have no thread
 *   polling: dist/nccl_comm.c's watchdog aborts that communicator once the
 *   flag is up, and its teardown does before any device memory is freed);
 * - a communicator is released exactly once (finalize + destroy when no
 *   channel failed, else abort) and its handle is cleared, so nothing is
 *   called on it afterwards.
 * Not a public header: only dist/ includes it.
 */
#ifndef SG_DIST_NCCL_STATE_H
#define SG_DIST_NCCL_STATE_H

#include <stdatomic.h>
#include <stddef.h>

#include "core/status.h"
#include "dist/transport.h"

/* What a poll says about a communicator or an event. */
typedef enum { SG_NCS_DONE = 0, SG_NCS_PENDING = 1, SG_NCS_ERROR = 2 } sg_ncs_poll;

typedef struct sg_nccl_api {
    /* ncclCommGetAsyncError: DONE (ncclSuccess), PENDING (ncclInProgress) or
     * ERROR with the reason in why */
    sg_ncs_poll (*async_error)(void *comm, char *why, size_t len);
    /* cudaEventQuery: DONE, PENDING (not ready) or ERROR with the reason */
    sg_ncs_poll (*event_query)(void *event, char *why, size_t len);
    /* ncclCommFinalize: DONE, PENDING (non-blocking) or ERROR */
    sg_ncs_poll (*finalize)(void *comm, char *why, size_t len);
    void (*destroy)(void *comm); /* ncclCommDestroy (after a finalize that completed) */
    void (*abort)(void *comm);   /* ncclCommAbort */
} sg_nccl_api;

typedef struct sg_nccl_state {
    const sg_nccl_api *api;
    void *comm[SG_CH_COUNT]; /* NULL: never created, or released */
    double timeout_s;        /* per wait */
    atomic_int failed;       /* 1 once any channel failed */
    /* times each channel's waits slept between polls (sg_comm_stats) */
    atomic_long sleeps[SG_CH_COUNT];
} sg_nccl_state;

/* Before a call on channel ch: SG_OK, or SG_ERR_RUNTIME with the reason in
 * err when a channel failed earlier (this channel's communicator is then
 * aborted, by this thread). */
sg_status sg_ncs_begin(sg_nccl_state *s, int ch, char *err, size_t len);

/* Waits on channel ch: first until the communicator leaves PENDING (when
 * `issued` is PENDING: a non-blocking init or enqueue), then, with an event,
 * until the event completes; polls the communicator's asynchronous error
 * meanwhile and gives up after timeout_s. SG_OK, or SG_ERR_RUNTIME with the
 * reason in err (prefixed by `what`) after sg_ncs_fail. */
sg_status sg_ncs_wait(sg_nccl_state *s, int ch, sg_ncs_poll issued, void *event, const char *what,
                      char *err, size_t len);

/* After issuing a collective on a non-blocking communicator: while the
 * enqueue is still in progress (issued PENDING), polls without sleeping
 * (yielding the CPU) for up to ~2 ms, the usual case; longer, as
 * sg_ncs_wait without an event. SG_OK once issued, or SG_ERR_RUNTIME with
 * the reason in err after sg_ncs_fail. */
sg_status sg_ncs_wait_issued(sg_nccl_state *s, int ch, sg_ncs_poll issued, const char *what,
                             char *err, size_t len);

/* Marks the transport failed and aborts channel ch's communicator (only
 * that one: the other channel's thread aborts its own). */
void sg_ncs_fail(sg_nccl_state *s, int ch);

/* Releases every communicator still held, once no thread calls any more:
 * finalize, wait (timeout_s) and destroy when no channel failed, else (or
 * when the finalize fails or does not complete) abort. */
void sg_ncs_shutdown(sg_nccl_state *s);

#endif
