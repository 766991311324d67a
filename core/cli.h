/* core/cli.h - what every subcommand shares on its command line.
 *
 * Common options, parsed by sg_cli_begin for every command:
 *   --config FILE        YAML configuration (optional: defaults otherwise)
 *   --set KEY=VALUE      override one key (repeatable; VALUE is a YAML scalar
 *                        or flow list, e.g. --set model.aspp_rates=[6,12,18])
 *   --print-config       print the resolved configuration as YAML and exit 0
 *   --quiet / --verbose  log level warn / debug
 *   --help, -h           print the command's usage and options, exit 0
 * Both "--opt VALUE" and "--opt=VALUE" are accepted.
 *
 * A command declares its own options in a table of sg_cli_opt (ended by an
 * entry with name NULL); sg_cli_begin fills them in the same pass. Anything
 * else that starts with '-' is a usage error (exit 2 with a usage line);
 * other words are positional arguments, kept in cli->args.
 *
 * Typical command:
 *     const char *ckpt = NULL; int flip = 0;
 *     sg_cli_opt opts[] = {
 *         {"--checkpoint", "FILE", "checkpoint to evaluate", &ckpt, NULL},
 *         {"--flip", NULL, "also evaluate flipped images", NULL, &flip},
 *         {NULL, NULL, NULL, NULL, NULL}};
 *     sg_cli cli; sg_config cfg;
 *     sg_status st = sg_cli_begin_with(&cli, &cfg, argc, argv, "segtrain eval --checkpoint CK",
 *                                      opts, sg_format_config_rules); // data/formats.h
 *     if (st != SG_OK || cli.done) return sg_exit_code(st);  // --help/--print-config: done, 0
 *     if (!ckpt) return sg_exit_code(sg_cli_usage_error(&cli, "--checkpoint is required"));
 *     ...
 *     st = sg_cli_prepare_run_dir(&cfg, rank);               // only after validation
 *
 * Errors follow core/status.h: usage and configuration errors are
 * SG_ERR_CONFIG (the command exits 2), failures writing the run directory
 * SG_ERR_RUNTIME (exit 1); sg_exit_code (cmd/commands.h) maps them.
 */
#ifndef SG_CORE_CLI_H
#define SG_CORE_CLI_H

#include "core/config.h"
#include "core/fsutil.h"
#include "core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define SG_CLI_MAX_SETS 256
#define SG_CLI_MAX_ARGS 256

/* One command-specific option. Exactly one of value/flag is set. */
typedef struct sg_cli_opt {
    const char *name;    /* "--checkpoint" */
    const char *metavar; /* "FILE" for an option with a value, NULL for a flag */
    const char *help;    /* one line for --help */
    const char **value;  /* receives the value (points into argv; last wins) */
    int *flag;           /* set to 1 when the flag is given */
} sg_cli_opt;

typedef struct sg_cli {
    const char *command;               /* argv[0], e.g. "train" */
    const char *usage;                 /* the usage line given to sg_cli_begin */
    const char *config_path;           /* --config, NULL if not given */
    const char *sets[SG_CLI_MAX_SETS]; /* --set values, in order */
    int n_sets;
    int print_config;                  /* --print-config given */
    int help;                          /* --help given */
    int done;                          /* sg_cli_begin(_args) served --help or
                                            --print-config: the command is over */
    int log_level;                     /* SG_LOG_* after --quiet/--verbose */
    const char *args[SG_CLI_MAX_ARGS]; /* positional arguments, in order */
    int n_args;
} sg_cli;

/* Parses argv (argv[0] = the subcommand name) without loading anything.
 * Fills cli and the opts' targets. Returns SG_OK, or SG_ERR_CONFIG after
 * printing a usage error. opts may be NULL. */
sg_status sg_cli_parse(sg_cli *cli, int argc, char **argv, const char *usage,
                       const sg_cli_opt *opts);

/* sg_cli_parse + log level + (on --help: usage and options to stdout,
 * done): the start every command shares, for the commands that load no
 * configuration or load it their own way (eval and predict from a
 * checkpoint: train/from_checkpoint.h). Returns SG_OK with cli->done = 0
 * when the command should go on, SG_OK with cli->done = 1 after --help,
 * SG_ERR_CONFIG after a usage error (printed). */
sg_status sg_cli_begin_args(sg_cli *cli, int argc, char **argv, const char *usage,
                            const sg_cli_opt *opts);

/* Loads the configuration cli names: defaults, then --config, then each
 * --set in order, then sg_config_validate. Returns SG_OK, or SG_ERR_CONFIG
 * after logging the error (file:line:column and the key). */
sg_status sg_cli_load_config(const sg_cli *cli, sg_config *cfg);
/* The same, validating with sg_config_validate_with(cfg, rules): core's
 * rules and the given layers' (core/config.h; the commands pass
 * data/formats.h's sg_format_config_rules). */
sg_status sg_cli_load_config_with(const sg_cli *cli, sg_config *cfg, const sg_config_rule *rules);

/* sg_cli_begin_args + sg_cli_load_config + (on --print-config: YAML to
 * stdout, done).
 * Returns SG_OK with cli->done = 0 when the command should go on, SG_OK with
 * cli->done = 1 after --help or --print-config (the command succeeded),
 * SG_ERR_CONFIG after a usage or configuration error, SG_ERR_RUNTIME when
 * --print-config could not write stdout (all logged). */
sg_status sg_cli_begin(sg_cli *cli, sg_config *cfg, int argc, char **argv, const char *usage,
                       const sg_cli_opt *opts);
/* sg_cli_begin with sg_cli_load_config_with(cli, cfg, rules): what the
 * commands call, so that a configuration breaking a layer's rule is refused
 * before --print-config or anything else is written. */
sg_status sg_cli_begin_with(sg_cli *cli, sg_config *cfg, int argc, char **argv, const char *usage,
                            const sg_cli_opt *opts, const sg_config_rule *rules);

/* Prints "segtrain <cmd>: <message>" and the usage line to stderr; returns
 * SG_ERR_CONFIG, so a command can `return sg_exit_code(sg_cli_usage_error(...))`. */
sg_status sg_cli_usage_error(const sg_cli *cli, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Prints the usage line, the command's options and the common options. */
void sg_cli_print_help(FILE *out, const sg_cli *cli, const sg_cli_opt *opts);

/* Call only after the configuration validated. Creates cfg->run_dir and
 * <run_dir>/logs, writes <run_dir>/config.yaml (rank 0 only, atomically via a
 * temporary file) and opens <run_dir>/logs/rank<rank>.log for this process's
 * log. Sets the log's rank (world size unchanged: dist sets it).
 * Returns SG_OK, or SG_ERR_RUNTIME after logging what failed (path, errno).
 * = sg_cli_open_run_dir + (rank 0) sg_cli_write_run_config. */
sg_status sg_cli_prepare_run_dir(const sg_config *cfg, int rank);
/* The same without writing config.yaml: `train` writes it only once the
 * resume checks passed (sg_cli_write_run_config), so a refused resume leaves
 * the run's config.yaml - the one its resume hint names - as it was. */
sg_status sg_cli_open_run_dir(const sg_config *cfg, int rank);
/* Writes <run_dir>/config.yaml atomically. SG_OK or SG_ERR_RUNTIME (logged). */
sg_status sg_cli_write_run_config(const sg_config *cfg);

/* ---- the run directory's lock ----
 * One job per run_dir: whoever writes a run directory (train; eval writing
 * <run_dir>/eval/) holds an advisory flock(2) on <run_dir>/segtrain.lock for
 * as long as it runs; the file holds the holder's pid, host and command. The
 * kernel drops the lock when the process ends, however it ends (kill -9
 * included): a stale file never blocks. On a shared filesystem (NFS) Linux
 * maps flock to the server's locks, so two nodes see each other's. Under the
 * launcher only global rank 0 takes it (the other ranks write only their own
 * logs/rank<N>.log): no rank ever waits on it, a second holder is refused at
 * once. */
typedef struct sg_run_lock {
    int fd; /* -1 = not held */
} sg_run_lock;

/* Takes the lock (creating run_dir if needed) and writes our pid, host and
 * `what` (e.g. "segtrain train") into the file. SG_OK; SG_ERR_RUNTIME after
 * logging "run_dir D is in use by another segtrain job (pid P on host H:
 * what), ..." when another process holds it, or the failing call. */
sg_status sg_run_lock_acquire(sg_run_lock *lk, const char *run_dir, const char *what);
/* Releases it (NULL-safe, idempotent). The file stays: removing it would let
 * a third process lock a new file while a second still waits on the old. */
void sg_run_lock_release(sg_run_lock *lk);
/* The shallowest directory of path `run_dir` that does not exist yet
 * ("runs/a/b" with only "runs" there: "runs/a") into top[n]; "" when
 * run_dir exists. What sg_cli_discard_unused_run_dir may remove again. */
void sg_cli_missing_top(const char *run_dir, char *top, size_t n);
/* After a start that failed before the run wrote anything (no
 * <run_dir>/config.yaml yet), by the process that created run_dir and holds
 * its lock: removes what opening it made - logs/rank<N>.log, logs/, the lock
 * file - and run_dir itself, then its parents up to `top` (from
 * sg_cli_missing_top before the start) while they are empty, so a failed
 * start leaves no empty directories behind. Anything else stays (and so do
 * the directories holding it). Returns 1 when run_dir was removed. */
int sg_cli_discard_unused_run_dir(const char *run_dir, const char *top);

#ifdef __cplusplus
}
#endif

#endif
