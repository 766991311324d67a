/* cmd/train.c - `segtrain train`: parse the command line, lock and prepare
 * the run directory, run the training loop (train/trainer.h). */
#include <stdio.h>
#include <string.h>

#include "cmd/commands.h"
#include "core/cli.h"
#include "core/log.h"
#include "dist/comm.h"
#include "train/config_rules.h"
#include "train/trainer.h"

int sg_cmd_train(int argc, char **argv) {
    const char *resume = NULL;
    sg_cli_opt opts[] = {
        {"--resume", "PATH|auto",
         "continue from a checkpoint, or from the newest valid one in run_dir (auto)", &resume,
         NULL},
        {NULL, NULL, NULL, NULL, NULL}};
    sg_cli cli;
    sg_config cfg;
    sg_status st =
        sg_cli_begin_with(&cli, &cfg, argc, argv,
                          "segtrain train --config FILE [--set KEY=VALUE ...] [--resume PATH|auto]",
                          opts, sg_train_config_rules);
    if (st != SG_OK || cli.done) return sg_exit_code(st);
    if (cli.n_args > 0)
        return sg_exit_code(sg_cli_usage_error(&cli, "unexpected argument '%s'", cli.args[0]));
    /* a malformed launch environment is the user's setup: exit 2 */
    sg_dist_env env;
    if (sg_dist_env_read(&env) != 0) return 2;
    /* one job per run_dir: global rank 0 holds the lock for the whole run
     * (core/cli.h); a second job stops here, before writing anything */
    sg_run_lock lock = {-1};
    char new_top[SG_STR];
    sg_cli_missing_top(cfg.run_dir, new_top, sizeof new_top);
    int new_dir = env.rank == 0 && new_top[0];
    if (env.rank == 0) {
        st = sg_run_lock_acquire(&lock, cfg.run_dir, "segtrain train");
        if (st != SG_OK) return sg_exit_code(st);
    }
    /* config.yaml is written by the trainer once the resume checks passed */
    st = sg_cli_open_run_dir(&cfg, env.rank);
    if (st != SG_OK) {
        sg_run_lock_release(&lock);
        return sg_exit_code(st);
    }
    int stop_signal = 0;
    st = sg_train_run(&cfg, resume, NULL, &stop_signal);
    /* a start that failed before the run wrote anything leaves no empty
     * run_dir (with only a lock file and this log) behind */
    if (st != SG_OK && new_dir && sg_cli_discard_unused_run_dir(cfg.run_dir, new_top))
        fprintf(stderr, "segtrain train: removed %s again: the run did not start\n", cfg.run_dir);
    sg_run_lock_release(&lock);
    /* stopped by a signal (the checkpoint written when st is SG_OK): the
     * shell's convention 128 + signal, as torchrun's workers */
    if (stop_signal) return 128 + stop_signal;
    return sg_exit_code(st);
}
