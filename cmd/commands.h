/* cmd/commands.h - one entry point per subcommand; main.c routes to them.
 * Each takes the arguments after the subcommand name (argv[0] is the
 * subcommand) and returns the process exit status (0 ok, 1 runtime failure,
 * 2 usage, configuration or input error - a file the user named -, 128 + N
 * stopped by signal N; core/status.h). `segtrain --config F` with no
 * subcommand is train.
 *
 * The commands are the one place where a library's sg_status
 * (core/status.h) becomes an exit status: sg_exit_code. */
#ifndef SG_CMD_COMMANDS_H
#define SG_CMD_COMMANDS_H

#include "core/status.h"

/* SG_OK -> 0, SG_ERR_CONFIG -> 2 (the user's configuration, command line or
 * input), SG_ERR_RUNTIME (and anything else) -> 1. */
static inline int sg_exit_code(sg_status st) {
    return st == SG_OK ? 0 : st == SG_ERR_CONFIG ? 2 : 1;
}

int sg_cmd_train(int argc, char **argv);
int sg_cmd_eval(int argc, char **argv);
int sg_cmd_predict(int argc, char **argv);
int sg_cmd_export(int argc, char **argv);
int sg_cmd_bench(int argc, char **argv);
int sg_cmd_synth(int argc, char **argv);
int sg_cmd_convert(int argc, char **argv); /* IN.pth OUT.safetensors */
int sg_cmd_plot(int argc, char **argv);

/* The distributed launcher (dist/): `segtrain --nproc-per-node N [--nnodes M
 * --node-rank R --master-addr A --master-port P] [SUBCOMMAND] [options]`.
 * main.c routes here when any argument is one of the launcher's options
 * (--nproc-per-node, --nnodes, --node-rank, --master-addr, --master-port,
 * alone or as --opt=value); argv is main's argv unchanged (argv[0] = the
 * program path), so the launcher can re-exec it for each worker. */
int sg_cmd_launch(int argc, char **argv);

#endif
