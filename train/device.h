/* train/device.h - the device a process runs on, and opening its backend:
 * one rule for every command (train, eval, predict, bench).
 *
 * The rule: device "cuda" in a job with several processes on this node
 * (local world > 1: torchrun's LOCAL_WORLD_SIZE, which `segtrain
 * --nproc-per-node` sets, or mpirun's / srun's equivalent; dist/comm.h)
 * means cuda:LOCAL_RANK - one GPU per local rank, torchrun's convention. An
 * explicit "cuda:N" stays N (the user pinned the device), "cpu" stays cpu,
 * and a single process keeps "cuda" (the backend's default device, 0).
 */
#ifndef SG_TRAIN_DEVICE_H
#define SG_TRAIN_DEVICE_H

#include <stddef.h>

#include "core/config.h"
#include "core/status.h"
#include "dist/comm.h"
#include "kernels/backend.h"

/* The rule alone, a pure function: writes the device string for the process
 * with local_rank of local_world into out (n bytes). Returns SG_OK, or
 * SG_ERR_RUNTIME after logging when out is too small. */
sg_status sg_device_for_rank(const char *device, int local_rank, int local_world, char *out,
                             size_t n);

/* SG_PRECISION_* for train.precision (validated by the schema: fp32|bf16). */
int sg_precision_of(const sg_config *cfg);

/* SG_LAYOUT_* the backend stores activations in: on CUDA cuda.layout
 * nchw|nhwc as given, auto = NHWC under train.precision bf16, NCHW under
 * fp32; on the CPU cpu.layout nchw|nhwc as given, auto = the layout the
 * CPU backend measured faster for the precision on this processor
 * (sg_backend_cpu_preferred_layout, kernels/backend.h). `why` (may be
 * NULL) gets a few words for the log. */
int sg_layout_of(const sg_config *cfg, const char **why);

/* Opens the backend cfg->device names for this process: the device mapped by
 * the rule above with env's local rank (env = the launch environment already
 * read, or NULL to read it here), the options from the config (threads,
 * cudnn.benchmark, cudnn.deterministic, train.precision, cudnn.allow_tf32,
 * cpu.layout: so train, eval, predict and bench all run the configured
 * precision and layout). Logs the device, how its convolutions run and the
 * activation layout. Returns NULL
 * after logging when the device cannot be opened - or, with env NULL, when
 * the launch environment is malformed (callers that must report that as a
 * configuration error read it first with sg_dist_env_read). */
sg_backend *sg_open_backend(const sg_config *cfg, const sg_dist_env *env);

#endif
