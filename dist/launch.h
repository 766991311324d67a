/* dist/launch.h - the multi-process launcher behind `segtrain
 * --nproc-per-node N ...` (its command entry point is cmd/launch.c).
 *
 * Starts N workers (fork + exec, before any thread or CUDA context exists in
 * the launcher) with torchrun's environment contract: RANK, LOCAL_RANK,
 * WORLD_SIZE, LOCAL_WORLD_SIZE, GROUP_RANK, MASTER_ADDR, MASTER_PORT,
 * TORCHELASTIC_RESTART_COUNT/MAX_RESTARTS/RUN_ID, and OMP_NUM_THREADS
 * (cores / N) when unset. Each worker's stdout and stderr lines come out
 * prefixed "[rank N] " (lines the worker's logger already prefixed are
 * passed as they are). SIGINT/SIGTERM/SIGHUP to the launcher are forwarded
 * to every worker. When a worker fails (non-zero exit or a signal), the
 * others get SIGTERM, then SIGKILL after the grace period; the launcher
 * exits with the failed worker's status (128 + signal for a signal), naming
 * it - or, when that worker exited because it found another rank hung or
 * dead (it says so through the report pipe, dist/launch_report.h), naming
 * that rank. Workers die with the launcher (PR_SET_PDEATHSIG) and every one
 * is reaped: no orphans, no zombies.
 *
 * The job token (dist/job_token.h): the workers get SEGTRAIN_JOB_TOKEN, the
 * user's when exported, else (one node) 32 random bytes from getrandom as
 * 64 hex digits, new for every job; several nodes without an exported token
 * get none (a warning), and the workers derive one.
 *
 * Options (anywhere in argv, "--opt V" or "--opt=V"): --nproc-per-node N,
 * --nnodes M (1), --node-rank R (0), --master-addr A (MASTER_ADDR or
 * 127.0.0.1), --master-port P (MASTER_PORT; single node: a free port;
 * several nodes: 29500), --kill-grace-s S (30, as torchrun),
 * --max-restarts K (0), --restart-backoff-s S (1),
 * --max-restarts-without-progress N (3), --agent-port P
 * (several nodes: --master-port + 1; 0: none), --node-timeout-s S (300).
 * The other arguments are passed to each worker unchanged.
 *
 * The run id (SG_RUN_ID_ENV): the workers get SEGTRAIN_RUN_ID, the user's
 * when exported, else 16 random hex digits drawn once per launcher, the same
 * for every attempt: a restarted attempt that finds no checkpoint to resume
 * starts fresh, and keeps the job's one run id (train/checkpoint.h).
 *
 * Restarts (--max-restarts K): after a failed attempt (a worker's non-zero
 * exit or signal, a hang the workers found through dist.timeout_s) the
 * group is started again, at most K times, with `--resume auto` in the
 * workers' arguments (replacing a --resume given; added after `train`),
 * TORCHELASTIC_RESTART_COUNT = the attempt and TORCHELASTIC_MAX_RESTARTS =
 * K; each restart is logged with its cause and host. Progress: global rank
 * 0 reports each checkpoint it committed (dist/launch_report.h); after N + 1
 * failed attempts in a row without a newer checkpoint the job ends
 * (--max-restarts-without-progress N: a failure that repeats is not
 * restarted K times), and the pause before a restart is S after progress,
 * then doubles with each attempt without progress, up to
 * SG_LAUNCH_BACKOFF_CAP_S (or S when larger). The node of global rank 0
 * decides; the other nodes follow through the rendezvous. Never restarted: a
 * signal to the launcher, a worker's exit status 2 (configuration or usage
 * error), workers that do not run `train`. The exit status is the last
 * failure's. Several nodes meet in the launchers' rendezvous
 * (dist/launch_agent.h): they start each attempt together, stop their
 * workers as soon as the attempt failed on another node, and restart or end
 * together.
 */
#ifndef SG_DIST_LAUNCH_H
#define SG_DIST_LAUNCH_H

#ifdef __cplusplus
extern "C" {
#endif

/* What a fresh training run takes as its run id when set (16 hex digits). */
#define SG_RUN_ID_ENV "SEGTRAIN_RUN_ID"

/* The default of --max-restarts-without-progress, and the longest pause
 * between attempts that made no progress (seconds; S when that is longer). */
#define SG_LAUNCH_MAX_STALLED 3
#define SG_LAUNCH_BACKOFF_CAP_S 30

/* The pause before a restart: base_s (--restart-backoff-s) when the failed
 * attempt wrote a new checkpoint (stalled 0) or is the first in a row
 * without one (1), doubled for each further one, capped as above. A pure
 * function. */
double sg_launch_restart_delay(double base_s, int stalled);

/* 1 when arg is one of the launcher's options (`--nproc-per-node`, or
 * `--nproc-per-node=N`, ...): the one list main() uses to tell a launch from
 * a plain command. */
int sg_launch_is_option(const char *arg);

/* argv as main's (argv[0] = program, ignored); exe = the worker program
 * (argv[0] of each worker). Returns the exit status for the launcher process
 * - not an sg_status (core/status.h): it forwards the failed worker's own
 * status (128 + signal for a signal), which no status could carry; its own
 * errors are 2 (launcher options) and 1 (fork, pipes). */
int sg_launch(int argc, char **argv, const char *exe);

#ifdef __cplusplus
}
#endif

#endif
