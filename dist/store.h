/* dist/store.h - the rendezvous key-value store over TCP.
 *
 * Rank 0 hosts the server (a thread of its process, listening on
 * MASTER_ADDR:MASTER_PORT); every rank, rank 0 included, is a client. Keys
 * are strings, values are byte strings. Besides rendezvous data (Gloo's
 * addresses, NCCL's unique id, the start-up agreement hashes) the server
 * tracks liveness: a connection that closes without saying goodbye marks its
 * rank dead, and sg_store_diagnose uses that plus heartbeat counters to name
 * the rank that crashed or hangs when a collective fails.
 *
 * Every blocking call gives up after the store's timeout. Calls on one
 * handle are serialised by a mutex (a handle may be shared by threads).
 * Return values: 0 ok, -1 error (logged, naming the rank and what to do),
 * SG_STORE_TIMEOUT when a wait timed out (not logged: the caller knows what
 * it was waiting for and names the missing rank). A three-way answer, so
 * these return int, not sg_status (core/status.h): SG_STORE_TIMEOUT is not a
 * configuration error; the communicator turns all of them into its own
 * 0 / -1. Nothing here ends the process except running out of memory.
 */
#ifndef SG_DIST_STORE_H
#define SG_DIST_STORE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define SG_STORE_TIMEOUT (-2)

typedef struct sg_store sg_store;

/* Rank 0: starts the server on addr:port (port 0 = any free port, see
 * sg_store_port) and connects to it. Other ranks: connect, retrying until
 * timeout_s (rank 0 may start later). NULL after logging on failure. */
sg_store *sg_store_create(const char *addr, int port, int rank, int world, double timeout_s);
/* A second client handle to the same server (for another thread). The
 * server is owned by the original handle. */
sg_store *sg_store_clone(const sg_store *s);
/* Closes the connection (says goodbye, so the rank is not marked dead).
 * Rank 0's original handle first waits (up to the timeout) until every rank
 * has called sg_store_leave, then stops the server. */
void sg_store_destroy(sg_store *s);
/* Announces that this rank will make no more store requests. */
int sg_store_leave(sg_store *s);

int sg_store_port(const sg_store *s);
int sg_store_rank(const sg_store *s);
int sg_store_world(const sg_store *s);
double sg_store_timeout(const sg_store *s);
void sg_store_set_timeout(sg_store *s, double timeout_s);

int sg_store_set(sg_store *s, const char *key, const void *val, size_t len);
/* Waits until key exists, then returns a malloc'd copy (*val, free it). */
int sg_store_get(sg_store *s, const char *key, void **val, size_t *len);
/* Waits until key exists. */
int sg_store_wait(sg_store *s, const char *key);
/* *exists = 1 if key is set now (does not wait). */
int sg_store_check(sg_store *s, const char *key, int *exists);
/* Atomically adds delta to the int64 counter key (created at 0) -> *out. */
int sg_store_add(sg_store *s, const char *key, int64_t delta, int64_t *out);
/* Every rank calls it with the same name; returns 0 when all arrived, or -1
 * after logging which ranks did not arrive within the timeout. */
int sg_store_barrier(sg_store *s, const char *name);

/* After a failed collective: finds which ranks are dead (connection lost) or
 * hung (no heartbeat progress over ~probe_s seconds) and writes a sentence
 * naming them into out. Returns the number of ranks named (0: none found,
 * out says so). Heartbeats come from sg_store_heartbeat_start. */
int sg_store_diagnose(sg_store *s, double probe_s, char *out, size_t outlen);
/* Starts a thread that bumps this rank's heartbeat counter every 0.5 s
 * through its own connection; stopped by sg_store_destroy of s. */
int sg_store_heartbeat_start(sg_store *s);

#ifdef __cplusplus
}
#endif

#endif
