/* train/checkpoint.h - training checkpoints: contents, crash-safe writing,
 * validation, retention and auto-resume.
 *
 * A checkpoint is a safetensors file (io/safetensors.h):
 *  - model tensors under their plain registry names (no "module." prefix),
 *    BN buffers included, num_batches_tracked as I64, in state-dict order;
 *  - the optimizer state: with SGD optimizer.momentum.<param name> for every
 *    parameter with a momentum buffer, with AdamW optimizer.exp_avg.<name>
 *    and optimizer.exp_avg_sq.<name> for every trained parameter (finite,
 *    exp_avg_sq not negative: checked when read), metadata "optimizer"
 *    (sgd|adamw; files without it are SGD's) and, for AdamW,
 *    "optimizer_steps" (torch's state step, 0..2^53);
 *  - ema.<name> for every registry entry when the run keeps an EMA of the
 *    weights (train/ema.h), with metadata "ema" ({"decay", "every"});
 *  - __metadata__: format, format_version, iter, epoch, sample_pos,
 *    total_steps, world_size, seed, momentum_initialized, best_miou, best_iter,
 *    lr_schedule and rng (JSON), config (the resolved YAML), tensor_count and
 *    checksum ("fnv1a64:<16 hex>" over every tensor's name, dtype and bytes,
 *    in data order) and meta_checksum ("sum64:<16 hex>", the sum of the
 *    FNV-1a of every other metadata key and value: a flipped digit in iter
 *    or sample_pos would otherwise resume at the wrong place unnoticed;
 *    files without it are still read), and run_id (16 hex digits, random,
 *    drawn when a run starts fresh and kept across its resumes; files from
 *    before run ids have none and count as the resuming run's own).
 * Checkpoints are untrusted input: every metadata value is parsed strictly
 * and range-checked (counts 0..2^53, world_size 1..65536, seed 0..2^31-1,
 * momentum_initialized 0/1, best_miou NaN or 0..1, best_iter -1..iter),
 * num_batches_tracked 0..2^62, the stored config goes through the YAML
 * limits and validation of a user's file, and a model is built from a
 * stored config only after the file's tensors are checked against the size
 * that config implies (train/from_checkpoint.h). Errors name their cause.
 * Writing: <path>.tmp, fflush + fsync, rename over <path>, fsync of the
 * directory - a crash at any moment leaves the previous file intact.
 * Files live in <run_dir>/checkpoints/ as iter_<8 digits>.safetensors plus
 * best.safetensors; only rank 0 calls the writing functions.
 * Errors (core/status.h): every I/O failure is logged and returned as
 * SG_ERR_RUNTIME, never fatal; only running out of host memory is.
 */
#ifndef SG_TRAIN_CHECKPOINT_H
#define SG_TRAIN_CHECKPOINT_H

#include <stddef.h>
#include <stdint.h>

#include "core/config.h"
#include "core/status.h"
#include "io/safetensors.h"
#include "model/model.h"
#include "train/ema.h"
#include "train/lr_schedule.h"
#include "train/optimizer.h"

#define SG_CKPT_FORMAT "segtrain-checkpoint"
#define SG_CKPT_FORMAT_VERSION 1
#define SG_RUN_ID_LEN 16                     /* hex digits */
#define SG_CKPT_MAX_COUNT (INT64_C(1) << 53) /* iter, epoch, sample_pos, total_steps */
#define SG_CKPT_MAX_WORLD 65536

/* Everything besides tensors that resuming needs. */
typedef struct sg_train_state {
    int64_t iter;        /* optimizer steps completed */
    int64_t epoch;       /* epoch in progress, from 0 */
    int64_t sample_pos;  /* samples of this epoch's global order consumed (all ranks) */
    int64_t total_steps; /* optimizer steps of the whole run */
    int world;           /* world size that wrote it */
    uint64_t seed;
    int momentum_initialized;
    double best_miou;               /* NaN until a first evaluation */
    int64_t best_iter;              /* -1 until then */
    char run_id[SG_RUN_ID_LEN + 1]; /* "" = a file written before run ids */
} sg_train_state;

/* A new random run id (16 hex digits, from getrandom(2)): which run a
 * checkpoint or metrics line belongs to. Not training randomness (that is
 * kernels/rng.h, from the seed): two runs with one seed still differ. */
void sg_ckpt_new_run_id(char out[SG_RUN_ID_LEN + 1]);

/* 1 if s is a run id: SG_RUN_ID_LEN lowercase hex digits. */
int sg_ckpt_is_run_id(const char *s);

/* ---- a checkpoint being assembled (generic: any tensors) ---- */
typedef struct sg_ckpt_builder {
    sg_st_writer *w;
    uint64_t hash;
    uint64_t meta_hash; /* sum over metadata entries (order-free), see meta_checksum */
    int n_tensors;
} sg_ckpt_builder;

void sg_ckpt_builder_init(sg_ckpt_builder *b);
void sg_ckpt_builder_free(sg_ckpt_builder *b);
/* Adds a tensor (data copied) and folds it into the checksum. SG_OK or
 * SG_ERR_RUNTIME (logged). */
sg_status sg_ckpt_add(sg_ckpt_builder *b, const char *name, sg_st_dtype dtype, int ndim,
                      const int64_t *shape, const void *data, size_t nbytes);
/* Sets a metadata entry; each key once (meta_checksum sums the entries set;
 * tensor_count, checksum and meta_checksum are commit's). SG_OK or
 * SG_ERR_RUNTIME (logged). */
sg_status sg_ckpt_meta(sg_ckpt_builder *b, const char *key, const char *value);
/* Adds tensor_count and checksum, writes atomically (see above). SG_OK or
 * SG_ERR_RUNTIME (logged, naming the file and the failing call). */
sg_status sg_ckpt_commit(sg_ckpt_builder *b, const char *path);

/* Checksum of an open file's tensors, in data order (as sg_ckpt_add computes it). */
uint64_t sg_ckpt_file_checksum(const sg_st_file *f);

/* Opens path and checks it is a complete segtrain checkpoint: readable,
 * format and version known, tensor_count, checksum and (when present)
 * meta_checksum matching. Returns the open file, or NULL with the reason in
 * why[cap] (nothing logged): the cause itself (the header's error and its
 * byte, a checksum mismatch, ...), not a generic "truncated or corrupt". */
sg_st_file *sg_ckpt_open_valid(const char *path, char *why, size_t cap);

/* The checks of sg_ckpt_open_valid on a file already open (e.g. from
 * memory): SG_OK, or SG_ERR_RUNTIME with the reason in why[cap]. */
sg_status sg_ckpt_check(const sg_st_file *f, char *why, size_t cap);

/* The run id in an open file's metadata into out ("" when it has none).
 * SG_OK, or SG_ERR_RUNTIME when it is not 16 hex digits (reason in why). */
sg_status sg_ckpt_run_id(const sg_st_file *f, char out[SG_RUN_ID_LEN + 1], char *why, size_t cap);

/* ---- the trainer's checkpoints ---- */
/* Writes model + optimizer + state + schedule + config to path. SG_OK, or
 * SG_ERR_RUNTIME after logging (the previous file at path stays intact). */
sg_status sg_ckpt_save(const char *path, sg_model *m, const sg_sgd *opt, const sg_train_state *st,
                       const sg_lr_schedule *sched, const sg_config *cfg);
/* sg_ckpt_save plus the EMA's ema.* tensors (ema NULL: none). */
sg_status sg_ckpt_save_ema(const char *path, sg_model *m, const sg_sgd *opt,
                           const sg_train_state *st, const sg_lr_schedule *sched,
                           const sg_config *cfg, sg_ema_state *ema);
/* Reads the state from the metadata, every value range-checked (see the top
 * comment). SG_OK, or SG_ERR_RUNTIME after logging the key, its value and
 * the allowed range. */
sg_status sg_ckpt_read_state(const sg_st_file *f, sg_train_state *st);
/* Loads the stored config YAML into cfg (over its current values) with the
 * limits of any YAML input (core/config.h). SG_OK, or SG_ERR_CONFIG
 * (logged, naming <file>:__metadata__.config:line:column). */
sg_status sg_ckpt_read_config(const sg_st_file *f, sg_config *cfg);
/* Loads every registry entry (shapes must match exactly; num_batches_tracked
 * 0..2^62). SG_OK, or SG_ERR_RUNTIME after logging the tensor. */
sg_status sg_ckpt_load_model(const sg_st_file *f, sg_model *m);
/* 1 if the file holds ema.* tensors. */
int sg_ckpt_has_ema(const sg_st_file *f);
/* Loads ema.<name> for every registry entry into the EMA's buffers (same
 * checks as sg_ckpt_load_model). *found = 0 and SG_OK when the file has no
 * ema.* tensors at all (the caller re-initialises the EMA); SG_ERR_RUNTIME
 * (logged) when some are missing or of another shape. */
sg_status sg_ckpt_load_ema(const sg_st_file *f, sg_ema_state *ema, int *found);
/* Loads ema.<name> into the model itself (evaluating the EMA). SG_OK or
 * SG_ERR_RUNTIME (logged). */
sg_status sg_ckpt_load_ema_as_model(const sg_st_file *f, sg_model *m);
/* Loads every momentum buffer the optimizer has (must all be present when
 * the file says momentum_initialized). SG_OK or SG_ERR_RUNTIME (logged). */
sg_status sg_ckpt_load_optimizer(const sg_st_file *f, sg_sgd *opt);

/* ---- files in a run directory ---- */
/* <run_dir>/checkpoints into out; creates it when create != 0. SG_OK or
 * SG_ERR_RUNTIME (logged). */
sg_status sg_ckpt_dir(const char *run_dir, int create, char *out, size_t cap);
void sg_ckpt_iter_path(const char *run_dir, int64_t iter, char *out, size_t cap);
void sg_ckpt_best_path(const char *run_dir, char *out, size_t cap);
/* Deletes all but the newest `keep` iter_*.safetensors of run `run_id` up
 * to iteration `newest` (the one just written, which is therefore never
 * deleted; keep <= 0: keep all) and partial files (sg_ckpt_sweep_tmp). Files of later
 * iterations, of another run, or whose header cannot be read are neither
 * counted nor deleted; files without a run id count as this run's. Returns
 * the number deleted. */
int sg_ckpt_prune(const char *run_dir, int keep, int64_t newest, const char *run_id);
/* The suffix sg_ckpt_commit writes under before the rename (path + it). */
#define SG_CKPT_TMP_SUFFIX ".tmp"
/* 1 when a file name is one of sg_ckpt_commit's partial files
 * (iter_<digits>.safetensors.tmp, best.safetensors.tmp), else 0. */
int sg_ckpt_is_tmp_name(const char *name);
/* Deletes the partial files (sg_ckpt_is_tmp_name; nothing else) in
 * <run_dir>/checkpoints, left by a process killed while writing one; each
 * removal is logged (a warning) when log_each. Rank 0 calls it when a
 * training starts. Returns the number deleted. */
int sg_ckpt_sweep_tmp(const char *run_dir, int log_each);
/* The newest valid iter_*.safetensors of the run being resumed: that run is
 * the one named by the newest file whose header can be read; files of
 * other runs are skipped (a warning names them), as are corrupt or truncated
 * ones (a warning names the file and the cause). 1 and its path in out, 0
 * when there is none. */
int sg_ckpt_find_latest(const char *run_dir, char *out, size_t cap);
/* Checkpoint files (iter_*, best) in run_dir that are not run `run_id`'s:
 * run_id NULL counts every file (a fresh run owns none); "" (a file from
 * before run ids being resumed) counts the files that have a run id; else
 * the files with another run id. Returns the count; the newest of them and
 * its run id ("" or "?" when unreadable) in path / their_id. */
int sg_ckpt_foreign(const char *run_dir, const char *run_id, char *path, size_t cap,
                    char their_id[SG_RUN_ID_LEN + 2]);

#endif
