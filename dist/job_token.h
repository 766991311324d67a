/* dist/job_token.h - the job token: what every connection to the rendezvous
 * store and to the small-collective mesh presents, so that a stranger on
 * the network, or another job whose MASTER_PORT collides with ours, is
 * refused instead of joining.
 *
 * Where it comes from (sg_job_token_resolve):
 *  - SEGTRAIN_JOB_TOKEN when set: `segtrain --nproc-per-node` sets it to 32
 *    random bytes (getrandom, as 64 hex digits) per job on one node, and
 *    passes on the one the user exported (several nodes need the same one:
 *    export it on every node). Under torchrun / mpirun / srun, export it to
 *    get a secret token.
 *  - otherwise derived, "derived-" + 16 hex digits of FNV-1a 64 over:
 *    the resolved config's hash (sg_config_hash), the launcher's job id
 *    (torchrun: TORCHELASTIC_RUN_ID; srun: SLURM_JOB_ID "." SLURM_STEP_ID;
 *    mpirun: PMIX_NAMESPACE, else OMPI_MCA_ess_base_jobid; else "none"),
 *    MASTER_ADDR, the store's port and WORLD_SIZE. Every rank of a job
 *    computes the same value; two jobs differ unless they run the same
 *    config under the same job id, master address and port. A derived token
 *    separates jobs; it is not a secret (anyone who knows the config and the
 *    variables can compute it).
 * The token travels in the clear (same trust as torchrun's TCPStore on a
 * private network, plus job separation); it is compared in constant time.
 */
#ifndef SG_DIST_JOB_TOKEN_H
#define SG_DIST_JOB_TOKEN_H

#include <stddef.h>
#include <stdint.h>

#include "core/status.h"

#define SG_TOKEN_MAX 256
#define SG_TOKEN_ENV "SEGTRAIN_JOB_TOKEN"

/* This process's token into out (SG_TOKEN_MAX + 1 bytes, NUL-terminated)
 * and where it came from into src ("SEGTRAIN_JOB_TOKEN" or "derived from
 * ..."). launcher_source: "torchrun", "mpi", "slurm" or "none" (which job id
 * variable to use); store_port: the port the store uses. Returns SG_OK, or
 * SG_ERR_CONFIG after logging that SEGTRAIN_JOB_TOKEN is longer than
 * SG_TOKEN_MAX (the user's environment). */
sg_status sg_job_token_resolve(uint64_t config_hash, const char *launcher_source,
                               const char *master_addr, int store_port, int world, char *out,
                               char *src, size_t srclen);

/* 32 random bytes as 64 hex digits into out (65 bytes). Returns SG_OK, or
 * SG_ERR_RUNTIME after logging that no randomness is available (and that
 * exporting SEGTRAIN_JOB_TOKEN avoids the need). */
sg_status sg_job_token_generate(char *out);

/* 1 if a (an bytes) equals b (bn bytes), else 0 (a bool, not a status);
 * the time taken depends only on bn (the expected token's length), not on
 * where they differ. */
int sg_token_equal(const void *a, size_t an, const void *b, size_t bn);

#endif
