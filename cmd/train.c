/* cmd/train.c - `segtrain train`: parse the command line, prepare the run
 * directory, run the training loop (train/trainer.h). */
#include <stdio.h>
#include <string.h>

#include "core/cli.h"
#include "cmd/commands.h"
#include "core/log.h"
#include "train/trainer.h"
#include "dist/comm.h"

int sg_cmd_train(int argc, char **argv) {
    const char *resume = NULL;
    sg_cli_opt opts[] = {
        {"--resume", "PATH|auto",
         "continue from a checkpoint, or from the newest valid one in run_dir (auto)", &resume,
         NULL},
        {NULL, NULL, NULL, NULL, NULL}};
    sg_cli cli;
    sg_config cfg;
    int rc = sg_cli_begin(&cli, &cfg, argc, argv,
                          "segtrain train --config FILE [--set KEY=VALUE ...] [--resume PATH|auto]",
                          opts);
    if (rc != SG_CLI_RUN) return rc;
    if (cli.n_args > 0)
        return sg_cli_usage_error(&cli, "unexpected argument '%s'", cli.args[0]);
    sg_dist_env env;
    if (sg_dist_env_read(&env) != 0) return 2;
    if (sg_cli_prepare_run_dir(&cfg, env.rank) != 0) return 1;
    return sg_train_run(&cfg, resume, NULL);
}
