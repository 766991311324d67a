/* dist/store.h - the rendezvous key-value store over TCP.
 *
 * Rank 0 hosts the server (a thread of its process, listening on the
 * MASTER_ADDR interface at MASTER_PORT: dist/net_addr.h); every rank, rank 0
 * included, is a client. Keys are strings, values are byte strings. Besides
 * rendezvous data (Gloo's addresses, NCCL's unique id, the start-up
 * agreement hashes) the server tracks liveness: a connection that closes
 * without saying goodbye marks its rank dead, and sg_store_diagnose uses
 * that plus heartbeat counters to name the rank that crashed or hangs when a
 * collective fails.
 *
 * Every connection presents the job token (dist/job_token.h) and claims its
 * rank; the server drops connections without the token and refuses a second
 * claim to a rank. A client that meets another job's store (a different
 * token) says "another job holds port P" and gives up at once instead of
 * retrying. Server limits (sizes, slow readers) are in dist/store_proto.h.
 *
 * Every blocking call gives up after the store's timeout. Calls on one
 * handle are serialised by a mutex (a handle may be shared by threads).
 * The requests (set, get, wait, check, add, barrier, leave) return an
 * sg_store_rc (below): SG_STORE_OK, SG_STORE_ERROR (logged, naming the rank
 * and what to do), SG_STORE_TIMEOUT when a wait timed out (not logged: the
 * caller knows what it was waiting for and names the missing rank),
 * SG_STORE_INTERRUPTED when the stop flag given in sg_store_opts was raised
 * (not logged: the caller was told to stop). Four outcomes, so not an
 * sg_status (core/status.h); the callers in dist/ return SG_ERR_RUNTIME for
 * any of the three failures, after logging what the store did not (a
 * timeout names the rank that did not publish its key).
 * sg_store_heartbeat_start returns an sg_status; the getters and
 * sg_store_diagnose return plain ints.
 * Nothing here ends the process except running out of memory.
 */
#ifndef SG_DIST_STORE_H
#define SG_DIST_STORE_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>

#include "core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A store request's outcome. SG_STORE_OK and SG_STORE_ERROR have the values
 * of SG_OK and SG_ERR_RUNTIME, but SG_STORE_TIMEOUT is not SG_ERR_CONFIG:
 * never pass an sg_store_rc up as an sg_status, convert it. */
typedef enum sg_store_rc {
    SG_STORE_OK = 0,
    SG_STORE_ERROR = -1,       /* logged */
    SG_STORE_TIMEOUT = -2,     /* a wait timed out (not logged) */
    SG_STORE_INTERRUPTED = -3, /* the stop flag was raised (not logged) */
} sg_store_rc;

typedef struct sg_store sg_store;

typedef struct sg_store_opts {
    const char *token;                 /* the job token (required, 1..SG_TOKEN_MAX bytes) */
    int multi_node;                    /* rank 0: the job spans nodes, so a loopback
                            MASTER_ADDR gets a warning (ranks on other
                            hosts could not reach it) */
    const volatile sig_atomic_t *stop; /* NULL, or: once *stop != 0, waiting
                            calls return SG_STORE_INTERRUPTED (a signal
                            handler's flag: stop promptly while joining) */
} sg_store_opts;

/* Rank 0: starts the server on the MASTER_ADDR interface at port (port 0 =
 * any free port, see sg_store_port) and connects to it. Other ranks:
 * connect, retrying until timeout_s (rank 0 may start later), but not after
 * another job's store answered or the stop flag was raised. NULL after
 * logging on failure (only INFO when interrupted). */
sg_store *sg_store_create(const char *addr, int port, int rank, int world, double timeout_s,
                          const sg_store_opts *opts);
/* Replaces the stop flag (NULL: waits are no longer interruptible). */
void sg_store_set_stop(sg_store *s, const volatile sig_atomic_t *stop);
/* A second client handle to the same server (for another thread). The
 * server is owned by the original handle. */
sg_store *sg_store_clone(const sg_store *s);
/* Closes the connection (says goodbye, so the rank is not marked dead).
 * Rank 0's original handle first waits (up to the timeout) until every rank
 * has called sg_store_leave, then stops the server. */
void sg_store_destroy(sg_store *s);
/* Announces that this rank will make no more store requests. */
sg_store_rc sg_store_leave(sg_store *s);

/* Getters: plain values, not statuses. */
int sg_store_port(const sg_store *s);
int sg_store_rank(const sg_store *s);
int sg_store_world(const sg_store *s);
double sg_store_timeout(const sg_store *s);
void sg_store_set_timeout(sg_store *s, double timeout_s);
/* quiet != 0: failed requests are not logged (the caller reports them in
 * its own words, e.g. the launchers' rendezvous, dist/launch_agent.h). */
void sg_store_set_quiet(sg_store *s, int quiet);

/* The requests: each returns an sg_store_rc (see the top). */
sg_store_rc sg_store_set(sg_store *s, const char *key, const void *val, size_t len);
/* Waits until key exists, then returns a malloc'd copy (*val, free it). */
sg_store_rc sg_store_get(sg_store *s, const char *key, void **val, size_t *len);
/* Waits until key exists. */
sg_store_rc sg_store_wait(sg_store *s, const char *key);
/* *exists = 1 if key is set now (does not wait). */
sg_store_rc sg_store_check(sg_store *s, const char *key, int *exists);
/* Atomically adds delta to the int64 counter key (created at 0) -> *out. */
sg_store_rc sg_store_add(sg_store *s, const char *key, int64_t delta, int64_t *out);
/* Every rank calls it with the same name; returns SG_STORE_OK when all
 * arrived, SG_STORE_ERROR after logging which ranks did not arrive within
 * the timeout (a barrier's timeout is logged here, never SG_STORE_TIMEOUT)
 * or what failed, or SG_STORE_INTERRUPTED (not logged). */
sg_store_rc sg_store_barrier(sg_store *s, const char *name);

/* After a failed collective: finds which ranks are dead (connection lost) or
 * hung (no heartbeat progress over ~probe_s seconds) and writes a sentence
 * naming them into out. Returns the number of ranks named, a count (0: none
 * found, out says so). state (NULL, or world entries) gets each rank's finding:
 * SG_RANK_OK, SG_RANK_DEAD, SG_RANK_HUNG, or SG_RANK_UNREACHABLE for rank 0
 * when its store cannot be reached. Heartbeats come from
 * sg_store_heartbeat_start. When many ranks ask, one probes (the first to
 * claim the diagnosis: 4 N store requests) and the others read its verdict
 * (a few requests each), so a failure every rank notices costs O(N)
 * requests; if that rank dies or stops meanwhile, the others say so and
 * probe themselves. Takes about probe_s (the prober) to 2 probe_s (the
 * others) seconds. */
enum { SG_RANK_OK = 0, SG_RANK_DEAD = 1, SG_RANK_HUNG = 2, SG_RANK_UNREACHABLE = 3 };
int sg_store_diagnose(sg_store *s, double probe_s, char *out, size_t outlen, int *state);
/* The same, ended within ~50 ms once *stop != 0 (a signal handler's flag:
 * whoever stopped this rank, usually the launcher after a worker died,
 * names the failure itself). A diagnosis cut short names no rank (returns
 * 0, every state SG_RANK_OK) and out says that it was stopped. */
int sg_store_diagnose_stoppable(sg_store *s, double probe_s, const volatile sig_atomic_t *stop,
                                char *out, size_t outlen, int *state);
/* Starts a thread that bumps this rank's heartbeat counter every 0.5 s
 * through its own connection; stopped by sg_store_destroy of s. Returns
 * SG_OK, or SG_ERR_RUNTIME after logging that the second connection or the
 * thread could not be made. */
sg_status sg_store_heartbeat_start(sg_store *s);

#ifdef __cplusplus
}
#endif

#endif
