/* train/from_checkpoint.h - what the commands share: loading a config for an
 * existing checkpoint, a model with the checkpoint's weights, and loaders
 * whose batch memory comes from the backend (pinned on CUDA). */
#ifndef SG_TRAIN_FROM_CHECKPOINT_H
#define SG_TRAIN_FROM_CHECKPOINT_H

#include "core/cli.h"
#include "core/config.h"
#include "core/status.h"
#include "data/loader.h"
#include "kernels/backend.h"
#include "model/model.h"

/* The configuration for a command working on checkpoint ck: --config when
 * given (with --set), else the config stored in the checkpoint's metadata
 * (untrusted: loaded with the YAML limits and validated like a user's file)
 * with the --set overrides applied. A stored config's run_dir is not the
 * user's: callers write nothing there (cli->config_path tells them apart).
 * Returns SG_OK, or SG_ERR_CONFIG (logged, naming the cause; an unreadable
 * checkpoint too: it is the user's --checkpoint). */
sg_status sg_config_for_checkpoint(const sg_cli *cli, const char *ck, sg_config *cfg);
/* What eval and predict do after sg_cli_begin_args: sg_config_for_checkpoint,
 * then on --print-config the configuration annotated with where each value
 * came from (sg_config_write_origins) on stdout and cli->done = 1 (the
 * command is over and succeeded). Returns sg_config_for_checkpoint's
 * status. */
sg_status sg_cli_load_checkpoint_config(sg_cli *cli, const char *ck, sg_config *cfg);

/* Creates the model described by cfg on be and loads ck into it: a segtrain
 * checkpoint (validated, every tensor required; its EMA weights ema.* when
 * it has them and cfg->eval.use_ema is set), or any safetensors weights
 * file (exported, torchvision names) loaded strictly. Before anything is
 * allocated the file's model tensors (count, float and int64 values) must
 * equal what cfg's model holds (model/model_io.h sg_model_expected_size) and
 * the parameters must fit the device's available memory. NULL after
 * logging; *why (when why is not NULL) then says the class: SG_ERR_CONFIG
 * when the file (unreadable, corrupt: structure or checksum) or the config
 * is at fault - the user named both - SG_ERR_RUNTIME when the model could
 * not be created on the device. */
sg_model *sg_model_from_checkpoint(sg_backend *be, const sg_config *cfg, const char *ck,
                                   sg_status *why);

/* Makes the loader allocate its batch buffers with be->ops->host_alloc
 * (pinned host memory on CUDA, so uploads can be asynchronous). */
void sg_loader_opts_use_backend(sg_loader_opts *lo, sg_backend *be);

#endif
