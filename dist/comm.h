/* dist/comm.h - the communicator: who am I, and collectives across ranks.
 *
 * One sg_comm per process. sg_comm_create reads the launch environment
 * (torchrun / `segtrain --nproc-per-node`: RANK, WORLD_SIZE, LOCAL_RANK,
 * LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT; mpirun: OMPI_COMM_WORLD_*;
 * srun: SLURM_PROCID/NTASKS/LOCALID), joins the TCP rendezvous store hosted
 * by rank 0 (dist/store.h), checks that every rank runs the same binary
 * version with the same resolved config, and opens the collective backend
 * chosen by dist.backend (auto: NCCL with the CUDA backend, Gloo with the
 * CPU one). With none of those variables set it is a world of 1: every
 * collective is a no-op (or a local copy) and no socket is opened.
 *
 * Memory: "device" buffers come from be->ops->alloc (host memory on the CPU
 * backend); "host" buffers are plain host memory. Every collective is
 * blocking for the caller: when it returns SG_OK, the result may be read
 * (device results: by later ops on the backend's compute stream).
 *
 * Errors (core/status.h): every collective and check returns SG_OK, or
 * SG_ERR_RUNTIME after logging an error that names the rank that failed or
 * did not arrive within dist.timeout_s (and what to do). After a failure the
 * communicator is broken: every later call returns SG_ERR_RUNTIME at once,
 * so a training loop just propagates the status and exits non-zero. The
 * getters (rank, world, ..., timeout) return plain ints, not statuses.
 *
 * Thread use: the calls here are for one thread (the training loop). The
 * DDP gradient buckets (dist/ddp.h) use a second, private channel from their
 * comm thread, so the two never interleave.
 */
#ifndef SG_DIST_COMM_H
#define SG_DIST_COMM_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>

#include "core/config.h"
#include "core/status.h"
#include "kernels/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct sg_comm sg_comm;

/* The launch environment, as read by sg_dist_env_read. */
typedef struct sg_dist_env {
    int rank, world;             /* global rank, world size */
    int local_rank, local_world; /* within this node */
    int node_rank;               /* GROUP_RANK / node index (0 if unknown) */
    char master_addr[256];       /* MASTER_ADDR, default 127.0.0.1 */
    int master_port;             /* the store's port: MASTER_PORT (default
                                      29500); MASTER_PORT+1 under torchrun's
                                      static rendezvous, whose agent holds
                                      MASTER_PORT (TORCHELASTIC_USE_AGENT_STORE) */
    char source[32];             /* "torchrun", "mpi", "slurm", "none" */
    int restart_count;           /* TORCHELASTIC_RESTART_COUNT: how many times
                                      the launcher (segtrain's --max-restarts or
                                      torchrun's) restarted the group; 0 unset */
} sg_dist_env;

/* Reads the environment. Returns SG_OK (world 1 with source "none" when no
 * variable is set), or SG_ERR_CONFIG after logging which variable is
 * malformed or inconsistent (e.g. RANK >= WORLD_SIZE, MASTER_PORT not a
 * port): the launch environment is the user's setup, so the commands exit 2.
 * Call it before creating the backend: local_rank and local_world select the
 * CUDA device (train/device.h: "cuda" -> "cuda:<local_rank>"). */
sg_status sg_dist_env_read(sg_dist_env *env);

/* Creates the communicator (see above). Returns NULL after logging an error
 * naming the variable, the rank that did not arrive, or the mismatching field.
 * Every connection presents the job token (dist/job_token.h: SEGTRAIN_JOB_TOKEN,
 * else derived from the config hash and the launcher's variables); a store
 * that belongs to another job ends this at once with "another job holds
 * port P". */
sg_comm *sg_comm_create(const sg_config *cfg, sg_backend *be);
/* The same, but joining (connecting to the store, waiting for the other
 * ranks, building the mesh) ends within ~0.1 s, returning NULL after an
 * error, once *stop != 0 (a signal handler's flag). Once joined, the flag
 * only cuts short the search for the culprit after a failed collective
 * (sg_store_diagnose_stoppable): the one that stopped this rank names it. On NULL, *why (when why is not NULL) says
 * the class: SG_ERR_CONFIG for a malformed launch environment or ranks that
 * disagree on the binary or the config (the user's setup), else
 * SG_ERR_RUNTIME. */
sg_comm *sg_comm_create_stoppable(const sg_config *cfg, sg_backend *be,
                                  const volatile sig_atomic_t *stop, sg_status *why);
/* Leaves the job: a final barrier is NOT done here (call sg_comm_barrier
 * first when ranks must leave together). NULL is allowed. */
void sg_comm_destroy(sg_comm *c);
/* Teardown, before freeing device memory that collectives may have used:
 * waits (dist.timeout_s at most) for the collectives still in flight on the
 * device (NCCL: SyncBN's, enqueued on the compute stream), and once any
 * collective failed aborts them instead, so that no kernel stays blocked on
 * a dead peer and no later free, which waits for the device, can hang.
 * Failures are logged (the communicator is broken afterwards). The
 * communicator stays usable for sg_comm_destroy. NULL is allowed. */
void sg_comm_quiesce(sg_comm *c);

/* Getters: plain values, not statuses. */
int sg_comm_rank(const sg_comm *c);
int sg_comm_world(const sg_comm *c);
int sg_comm_local_rank(const sg_comm *c);
int sg_comm_local_world(const sg_comm *c);
/* TORCHELASTIC_RESTART_COUNT of the launch environment (0 when unset). */
int sg_comm_restart_count(const sg_comm *c);
/* "single", "gloo" or "nccl". */
const char *sg_comm_backend_name(const sg_comm *c);
sg_backend *sg_comm_device_backend(const sg_comm *c);
int sg_comm_timeout_s(const sg_comm *c);

/* The collectives below return SG_OK, or SG_ERR_RUNTIME after logging the
 * failed (or missing) rank, as described at the top. */

/* All-reduce (sum), in place. */
sg_status sg_comm_allreduce_f32(sg_comm *c, float *dev, size_t count);    /* device */
sg_status sg_comm_allreduce_f64(sg_comm *c, double *host, size_t count);  /* host */
sg_status sg_comm_allreduce_i64(sg_comm *c, int64_t *host, size_t count); /* host */

/* Broadcast `bytes` from `root` to every rank, in place. A root outside the
 * world is SG_ERR_RUNTIME too (logged as an internal error). */
sg_status sg_comm_broadcast(sg_comm *c, void *dev, size_t bytes, int root);       /* device */
sg_status sg_comm_broadcast_host(sg_comm *c, void *host, size_t bytes, int root); /* host */

/* All-gather: out[r * n + i] = rank r's in[i]; out holds world * n. */
sg_status sg_comm_allgather_f32(sg_comm *c, const float *dev_in, float *dev_out, size_t n);
sg_status sg_comm_allgather_host(sg_comm *c, const void *in, void *out, size_t bytes_per_rank);

sg_status sg_comm_barrier(sg_comm *c);

/* Start-up agreement: every rank passes its value of `field`; returns SG_OK
 * when all agree, SG_ERR_CONFIG after logging the field and which ranks
 * differ from rank 0 (every rank logs it: the ranks' setup is the user's,
 * exit 2, never restarted), or SG_ERR_RUNTIME after logging which rank did
 * not publish its value in time. sg_comm_create already checks the binary
 * version and sg_config_hash; the trainer calls sg_comm_check_dataset with
 * its dataset index hash once the index is built. */
sg_status sg_comm_check_agree(sg_comm *c, const char *field, uint64_t value);
sg_status sg_comm_check_dataset(sg_comm *c, uint64_t dataset_hash);

/* Seconds this process spent blocked in collectives so far (training loop
 * channel; the DDP channel's wait time is sg_ddp_wait_seconds). */
double sg_comm_wait_seconds(const sg_comm *c);

/* Counters of the training thread's collectives (bench JSON, tests). */
typedef struct sg_comm_stats {
    double wait_s;      /* as sg_comm_wait_seconds */
    double syncbn_s;    /* seconds inside the SyncBN hooks (dist/ddp.h) */
    long syncbn_calls;  /* SyncBN collectives (forward gathers + backward sums) */
    long syncbn_queued; /* of those, enqueued on the compute stream without a
                            host wait (NCCL); the rest blocked (mesh, Gloo) */
    long poll_sleeps;   /* sleeps in a poll loop while waiting for a
                            collective, training thread (0 on mesh and Gloo:
                            their waits block in poll(2) or a condition) */
    long flushes;       /* waits for enqueued collectives (once per step) */
} sg_comm_stats;
void sg_comm_get_stats(const sg_comm *c, sg_comm_stats *s);

/* Every rank's micro-batch size (images) for the coming training forward,
 * n[world], or NULL to forget it. With it, SyncBN on a device transport
 * (NCCL) knows every rank's value count without reading it back from the
 * device, so its collectives are only enqueued (sg_train_step sets it from
 * the step's counts all-reduce, which carries each rank's sizes). Copied. */
void sg_comm_set_batch_sizes(sg_comm *c, const int64_t *n);

#ifdef __cplusplus
}
#endif

#endif
