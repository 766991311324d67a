/* cmd/commands.h - one entry point per subcommand; main.c routes to them.
 * Each takes the arguments after the subcommand name (argv[0] is the
 * subcommand) and returns the process exit status (0 ok, 1 runtime failure,
 * 2 usage or configuration error). `segtrain --config F` with no subcommand
 * is train. */
#ifndef SG_CMD_COMMANDS_H
#define SG_CMD_COMMANDS_H

int sg_cmd_train(int argc, char **argv);
int sg_cmd_eval(int argc, char **argv);
int sg_cmd_predict(int argc, char **argv);
int sg_cmd_export(int argc, char **argv);
int sg_cmd_bench(int argc, char **argv);
int sg_cmd_synth(int argc, char **argv);

#endif
