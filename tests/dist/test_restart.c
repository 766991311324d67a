/* tests/dist/test_restart.c - jobs that heal: the launcher's --max-restarts
 * (and torchrun's, with `torchrun` as the first argument).
 *
 *  - heal3: a 2-rank training on the launcher with --max-restarts 3; a
 *    random worker is killed (SIGKILL) a few steps into each attempt, three
 *    times; the job finishes, its final checkpoint is bit-identical to an
 *    uninterrupted run's, one run id in every attempt's metrics.jsonl lines,
 *    metrics.jsonl counts the restarts ("restart": 3 on
 *    the last steps) and the log names each cause;
 *  - give_up: the same with --max-restarts 2: the third failure ends the
 *    job with that worker's exit status (137), named in the summary, and no
 *    worker is left behind;
 *  - user_signal: SIGTERM to the launcher is never retried, whatever
 *    --max-restarts says (exit 143, one attempt);
 *  - not_retried: a configuration error (exit 2) is not retried, nor are
 *    workers that do not run `train` (a restart would redo their work).
 * With `torchrun`: the same kill-three-times run under Debian's torchrun
 * (`python3 -m torch.distributed.run --max_restarts 3 --no_python segtrain
 * train --resume auto ...`), bit-identical too; exits 77 without torch.
 *
 * Each case prints what it measured (time from the kill to the restart and
 * to the first step after it, iterations lost), the figures of
 * docs/FAILURES.md. */
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/log.h"
#include "tests/ckpt_diff.h"
#include "tests/helpers.h"
#include "tests/tiny_config.h"
#include "testutil.h"

#define ITERS 24
#define ITERS_S "24"

static const char *g_bin;
static char g_dir[256];
static pid_t g_live; /* the job running now: killed at exit whatever a CHECK did */

static int setup(void) {
    snprintf(g_dir, sizeof g_dir, "/tmp/sg_restart_XXXXXX");
    if (!mkdtemp(g_dir)) return -1;
    if (th_sh("%s synth --out %s/data --train 8 --val 2 --size 40x40 --seed 5 >/dev/null 2>&1",
              g_bin, g_dir))
        return -1;
    char path[512];
    snprintf(path, sizeof path, "%s/base.yaml", g_dir);
    /* the tiny network (tests/tiny_config.h) with what this test changes */
    const char *const sets[] = {"threads=1",
                                "model.aspp_dropout=0.1",
                                "data.crop_size=[32, 32]",
                                "data.scale_range=[0.75, 1.25]",
                                "train.iters=" ITERS_S,
                                "train.lr=0.02",
                                "train.checkpoint_every=2",
                                "train.keep_checkpoints=3",
                                "dist.timeout_s=10"};
    return fx_write_config(path, g_dir, sets, (int)(sizeof sets / sizeof sets[0]));
}

/* Lines of run's metrics.jsonl that are steps of attempt `restart`, and the
 * first and last such line's iteration (-1 when none). */
static int steps_of_attempt(const char *run, int restart, long *first, long *last) {
    char p[600];
    snprintf(p, sizeof p, "%s/%s/metrics.jsonl", g_dir, run);
    *first = *last = -1;
    FILE *f = fopen(p, "r");
    if (!f) return 0;
    char line[4096], tag[32];
    snprintf(tag, sizeof tag, "\"restart\":%d}", restart);
    int n = 0;
    while (fgets(line, sizeof line, f)) {
        if (!strstr(line, tag)) continue;
        const char *it = strstr(line, "\"iter\":");
        long v = it ? atol(it + 7) : -1;
        if (*first < 0) *first = v;
        *last = v;
        n++;
    }
    fclose(f);
    return n;
}

/* Step lines of run's metrics.jsonl, and how many of them carry a run id
 * other than the first line's (a restart must keep the run's identity). */
static int run_id_changes(const char *run, int *lines) {
    char p[600];
    snprintf(p, sizeof p, "%s/%s/metrics.jsonl", g_dir, run);
    *lines = 0;
    FILE *f = fopen(p, "r");
    if (!f) return -1;
    char line[4096], first[64] = "";
    int changes = 0;
    while (fgets(line, sizeof line, f)) {
        const char *r = strstr(line, "\"run_id\":\"");
        if (!r || !strstr(line, "\"restart\":")) continue;
        char id[64];
        if (sscanf(r + 10, "%63[0-9a-f]", id) != 1) continue;
        if (!first[0]) snprintf(first, sizeof first, "%s", id);
        else if (strcmp(id, first) != 0) changes++;
        (*lines)++;
    }
    fclose(f);
    return changes;
}

/* The pid of the running worker with RANK=rank among the job's processes
 * (children of `parent`), or -1. */
static pid_t worker_of_rank(pid_t parent, int rank) {
    pid_t kids[16];
    int n = th_children(parent, kids, 16);
    for (int i = 0; i < n; i++)
        if (th_env_rank(kids[i]) == rank) return kids[i];
    return -1;
}

typedef struct kill_report {
    int ranks[8];         /* the rank killed each time */
    pid_t pids[8];        /* ... and its pid */
    double to_restart[8]; /* kill -> first step of the next attempt, s */
    long lost[8];         /* iterations done again after the restart */
    int done;             /* kills made */
    int status;           /* the job's wait status */
} kill_report;

/* Starts argv (the launcher or torchrun) with output to DIR/run.log, and
 * kills a random worker `kills` times, each 1-3 steps into an attempt (the
 * attempt's steps read from metrics.jsonl); then waits for the job (240 s
 * at most). SG_OK, or SG_ERR_RUNTIME when the job did not get that far. */
static sg_status run_with_kills(const char *run, char *const *argv, int kills, unsigned seed,
                                kill_report *rep) {
    memset(rep, 0, sizeof *rep);
    char logp[600];
    snprintf(logp, sizeof logp, "%s/%s.log", g_dir, run);
    pid_t pid = fork();
    if (pid == 0) {
        int fd = open(logp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        dup2(fd, 1);
        dup2(fd, 2);
        setpgid(0, 0);
        execv(argv[0], argv);
        _exit(127);
    }
    g_live = pid;
    double t_end = th_now() + 240;
    sg_status rc = SG_OK;
    for (int k = 0; k < kills && rc == SG_OK; k++) {
        int want = 1 + (int)((seed >> (4 * k)) % 3); /* steps of this attempt before the kill */
        long first = -1, last = -1;
        while (rc == SG_OK && steps_of_attempt(run, k, &first, &last) < want) {
            if (th_now() > t_end || waitpid(pid, &rep->status, WNOHANG) == pid) {
                fprintf(stderr, "  attempt %d ended or stalled before %d steps\n", k, want);
                if (th_now() <= t_end) pid = -1; /* reaped: the job ended */
                rc = SG_ERR_RUNTIME;
            } else {
                usleep(10 * 1000);
            }
        }
        if (rc != SG_OK) break;
        if (k > 0) { /* the previous attempt's figures, now that this one stepped */
            rep->to_restart[k - 1] = th_now() - rep->to_restart[k - 1];
            rep->lost[k - 1] = rep->lost[k - 1] - (first - 1);
        }
        int rank = (int)((seed >> (4 * k + 2)) % 2);
        pid_t w = worker_of_rank(pid, rank);
        if (w <= 0) {
            fprintf(stderr, "  no worker of rank %d found\n", rank);
            rc = SG_ERR_RUNTIME;
            break;
        }
        steps_of_attempt(run, k, &first, &last);
        kill(w, SIGKILL);
        fprintf(stderr, "  kill %d: rank %d (pid %d) at iteration %ld of attempt %d\n", k + 1, rank,
                (int)w, last, k);
        rep->ranks[k] = rank;
        rep->pids[k] = w;
        rep->to_restart[k] = th_now();
        rep->lost[k] = last;
        rep->done++;
    }
    /* wait for the end; the last kill's figures if the job went on after it */
    int last_measured = 0;
    long first = -1, last = -1;
    if (pid > 0) {
        while (waitpid(pid, &rep->status, WNOHANG) == 0) {
            if (rep->done && !last_measured &&
                steps_of_attempt(run, rep->done, &first, &last) > 0) {
                rep->to_restart[rep->done - 1] = th_now() - rep->to_restart[rep->done - 1];
                rep->lost[rep->done - 1] -= first - 1;
                last_measured = 1;
            }
            if (th_now() > t_end) {
                fprintf(stderr, "  the job still runs after 240 s: killing it\n");
                kill(-pid, SIGKILL);
                kill(pid, SIGKILL);
                waitpid(pid, &rep->status, 0);
                rc = SG_ERR_RUNTIME;
                break;
            }
            usleep(10 * 1000);
        }
    }
    g_live = 0;
    if (rep->done && !last_measured) rep->to_restart[rep->done - 1] = -1; /* no next attempt */
    for (int k = 0; k < rep->done; k++) {
        if (rep->to_restart[k] > 0)
            fprintf(stderr,
                    "  kill %d: first step of the next attempt %.1f s later, %ld "
                    "iteration(s) done again\n",
                    k + 1, rep->to_restart[k], rep->lost[k]);
        if (kill(rep->pids[k], 0) == 0) {
            fprintf(stderr, "  killed worker pid %d still exists\n", (int)rep->pids[k]);
            rc = SG_ERR_RUNTIME;
        }
    }
    return rc;
}

static int count_of(const char *hay, const char *needle) {
    int n = 0;
    for (const char *p = hay; (p = strstr(p, needle)); p += strlen(needle)) n++;
    return n;
}

static char g_cfg[600], g_rundir_heal[600], g_rundir_give[600];

static void test_reference(void) { CHECK_EQ_INT(th_train_run(g_bin, g_dir, "ref", 2, ""), 0); }

static void test_heal3(void) {
    snprintf(g_cfg, sizeof g_cfg, "%s/base.yaml", g_dir);
    snprintf(g_rundir_heal, sizeof g_rundir_heal, "run_dir=%s/heal3", g_dir);
    char *argv[] = {
        (char *)g_bin, "--nproc-per-node", "2", "--max-restarts", "3",        "--restart-backoff-s",
        "0",           "--kill-grace-s",   "5", "train",          "--config", g_cfg,
        "--set",       g_rundir_heal,      NULL};
    kill_report rep;
    CHECK(run_with_kills("heal3", argv, 3, 0x5a3du, &rep) == SG_OK);
    char *log = th_read_log(g_dir, "heal3");
    CHECK_MSG(WIFEXITED(rep.status) && WEXITSTATUS(rep.status) == 0, "wait status %d:\n%s",
              rep.status, log);
    CHECK_EQ_INT(rep.done, 3);
    CHECK_EQ_INT(count_of(log, "launcher: restarting the workers"), 3);
    for (int k = 0; k < rep.done; k++) {
        char want[160];
        snprintf(want, sizeof want, "restart %d of 3 on host ", k + 1);
        CHECK_STR_CONTAINS(log, want);
    }
    CHECK_STR_CONTAINS(log, "was killed by signal 9");
    long first, last;
    CHECK(steps_of_attempt("heal3", 3, &first, &last) > 0);
    CHECK_EQ_INT((int)last, ITERS);
    int id_lines = 0;
    /* one run id across the 4 attempts, also those that started fresh (killed
     * before their first checkpoint): the launcher's SEGTRAIN_RUN_ID */
    CHECK_EQ_INT(run_id_changes("heal3", &id_lines), 0);
    CHECK(id_lines >= ITERS / 2);
    double d = th_ckpt_diff(g_dir, "ref", "heal3", "iter_000000" ITERS_S ".safetensors");
    CHECK_MSG(d == 0.0,
              "the healed run's final checkpoint differs from the uninterrupted "
              "run's by %.3g (relative)",
              d);
}

static void test_give_up(void) {
    snprintf(g_rundir_give, sizeof g_rundir_give, "run_dir=%s/give_up", g_dir);
    char *argv[] = {
        (char *)g_bin, "--nproc-per-node", "2", "--max-restarts", "2",        "--restart-backoff-s",
        "0",           "--kill-grace-s",   "5", "train",          "--config", g_cfg,
        "--set",       g_rundir_give,      NULL};
    kill_report rep;
    CHECK(run_with_kills("give_up", argv, 3, 0x9c61u, &rep) == SG_OK);
    char *log = th_read_log(g_dir, "give_up");
    CHECK_EQ_INT(rep.done, 3);
    CHECK_MSG(WIFEXITED(rep.status) && WEXITSTATUS(rep.status) == 137, "wait status %d:\n%s",
              rep.status, log);
    CHECK_EQ_INT(count_of(log, "launcher: restarting the workers"), 2);
    CHECK_STR_CONTAINS(log, "giving up after 2 restart(s) (--max-restarts 2)");
    char want[160];
    snprintf(want, sizeof want, "launcher: failed: worker rank %d was killed by signal 9",
             rep.ranks[2]);
    CHECK_STR_CONTAINS(log, want);
}

static void test_user_signal(void) {
    char rund[600], logp[600];
    snprintf(rund, sizeof rund, "run_dir=%s/sigterm", g_dir);
    snprintf(logp, sizeof logp, "%s/sigterm.log", g_dir);
    pid_t pid = fork();
    if (pid == 0) {
        int fd = open(logp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        dup2(fd, 1);
        dup2(fd, 2);
        execl(g_bin, g_bin, "--nproc-per-node", "2", "--max-restarts", "3", "--restart-backoff-s",
              "0", "--kill-grace-s", "5", "train", "--config", g_cfg, "--set", rund, "--set",
              "train.iters=100000", (char *)NULL);
        _exit(127);
    }
    g_live = pid;
    long first, last;
    double t0 = th_now();
    while (steps_of_attempt("sigterm", 0, &first, &last) < 2 && th_now() - t0 < 60)
        usleep(10 * 1000);
    kill(pid, SIGTERM);
    int st = 0;
    double tk = th_now();
    while (waitpid(pid, &st, WNOHANG) == 0) {
        if (th_now() - tk > 60) {
            kill(pid, SIGKILL);
            waitpid(pid, &st, 0);
            CHECK_MSG(0, "the launcher still ran 60 s after SIGTERM");
            break;
        }
        usleep(20 * 1000);
    }
    g_live = 0;
    char *log = th_read_log(g_dir, "sigterm");
    CHECK_MSG(WIFEXITED(st) && WEXITSTATUS(st) == 143, "wait status %d:\n%s", st, log);
    CHECK_EQ_INT(count_of(log, "launcher: restarting the workers"), 0);
    CHECK_STR_CONTAINS(log, "launcher: stopped by signal 15");
}

static void test_not_retried(void) {
    /* a configuration error (exit 2) would fail the same way again */
    int rc = th_sh("%s --nproc-per-node 2 --max-restarts 2 --restart-backoff-s 0 --kill-grace-s 3 "
                   "train --config %s --set run_dir=%s/cfgerr --set train.lr=-1 > %s/cfgerr.log "
                   "2>&1",
                   g_bin, g_cfg, g_dir, g_dir);
    char *log = th_read_log(g_dir, "cfgerr");
    CHECK_MSG(rc == 2, "exit %d:\n%s", rc, log);
    CHECK_EQ_INT(count_of(log, "launcher: restarting the workers"), 0);
    CHECK_STR_CONTAINS(log, "not restarting: exit status 2 is a configuration or usage error");
    /* nor is a checkpoint the user named that does not exist (an input
     * error, exit 2) */
    rc = th_sh("%s --nproc-per-node 2 --max-restarts 2 --restart-backoff-s 0 --kill-grace-s 3 "
               "eval --config %s --checkpoint %s/missing.safetensors > %s/missing.log 2>&1",
               g_bin, g_cfg, g_dir, g_dir);
    log = th_read_log(g_dir, "missing");
    CHECK_MSG(rc == 2, "exit %d:\n%s", rc, log);
    CHECK_EQ_INT(count_of(log, "launcher: restarting the workers"), 0);
    /* workers that do not run `train` (eval of validation images that
     * cannot be decoded, a runtime failure, exit 1): a restart would redo
     * the work from the start, so there is none */
    CHECK(th_sh("cp -r %s/data %s/baddata && for f in %s/baddata/leftImg8bit/val/*/*.png; do "
                "printf 'not an image' > \"$f\"; done",
                g_dir, g_dir, g_dir) == 0);
    rc = th_sh("%s --nproc-per-node 2 --max-restarts 2 --restart-backoff-s 0 --kill-grace-s 3 "
               "eval --config %s --set data.root=%s/baddata --checkpoint "
               "%s/ref/checkpoints/iter_000000" ITERS_S ".safetensors > %s/noteval.log 2>&1",
               g_bin, g_cfg, g_dir, g_dir, g_dir);
    log = th_read_log(g_dir, "noteval");
    CHECK_MSG(rc == 1, "exit %d:\n%s", rc, log);
    CHECK_EQ_INT(count_of(log, "launcher: restarting the workers"), 0);
    CHECK_STR_CONTAINS(log, "these workers do not run `train`, so they are not restarted");
}

static void test_usage(void) {
    int rc = th_sh("%s --nproc-per-node 2 --max-restarts -1 train --config %s > %s/usage.log 2>&1",
                   g_bin, g_cfg, g_dir);
    CHECK_EQ_INT(rc, 2);
    CHECK_STR_CONTAINS(th_read_log(g_dir, "usage"),
                       "--max-restarts '-1' is not an integer in [0, 1000]");
    rc = th_sh("%s --nproc-per-node 2 --restart-backoff-s=x train --config %s > %s/usage.log 2>&1",
               g_bin, g_cfg, g_dir);
    CHECK_EQ_INT(rc, 2);
    CHECK_STR_CONTAINS(th_read_log(g_dir, "usage"),
                       "--restart-backoff-s 'x' is not an integer in [0, 3600]");
    /* a launcher option alone routes to the launcher, which needs N */
    rc = th_sh("%s --max-restarts 2 train --config %s > %s/usage.log 2>&1", g_bin, g_cfg, g_dir);
    CHECK_EQ_INT(rc, 2);
    CHECK_STR_CONTAINS(th_read_log(g_dir, "usage"), "--nproc-per-node N is required");
    rc = th_sh("%s --nproc-per-node 1 --nnodes 2 --master-port 29700 --agent-port 29700 train "
               "--config %s > %s/usage.log 2>&1",
               g_bin, g_cfg, g_dir);
    CHECK_EQ_INT(rc, 2);
    CHECK_STR_CONTAINS(th_read_log(g_dir, "usage"), "--agent-port 29700 is the --master-port");
    /* the run id a fresh run takes from the environment is checked */
    rc = th_sh("SEGTRAIN_RUN_ID=xyz %s train --config %s --set run_dir=%s/badid > %s/usage.log "
               "2>&1",
               g_bin, g_cfg, g_dir, g_dir);
    CHECK_EQ_INT(rc, 2);
    CHECK_STR_CONTAINS(th_read_log(g_dir, "usage"),
                       "SEGTRAIN_RUN_ID = 'xyz' is not a run id (16 hex digits");
}

/* torchrun's --max-restarts with segtrain workers: the same kills, the same
 * final weights. */
static int torch_ok(void) {
    return th_sh("/usr/bin/python3 -c 'import torch.distributed.run' >/dev/null 2>&1") == 0;
}

static void test_torchrun_heal3(void) {
    char rund[600], cfg[600], port[32], logdir[600];
    /* Debian's torch 1.13 on Python 3.11 cannot parse its own default
     * --redirects/--tee of 0 (an enum change); 1 (stdout) works */
    snprintf(logdir, sizeof logdir, "--log_dir=%s/torchrun_logs", g_dir);
    snprintf(rund, sizeof rund, "run_dir=%s/torchrun", g_dir);
    snprintf(cfg, sizeof cfg, "%s/base.yaml", g_dir);
    snprintf(port, sizeof port, "--master_port=%d", th_free_port());
    char *argv[] = {"/usr/bin/python3",
                    "-m",
                    "torch.distributed.run",
                    "--nproc_per_node=2",
                    "--max_restarts=3",
                    "--monitor_interval=0.2",
                    "--redirects=1",
                    "--tee=1",
                    logdir,
                    port,
                    "--no_python",
                    (char *)g_bin,
                    "train",
                    "--resume",
                    "auto",
                    "--config",
                    cfg,
                    "--set",
                    rund,
                    NULL};
    kill_report rep;
    CHECK(run_with_kills("torchrun", argv, 3, 0x2b7eu, &rep) == SG_OK);
    char *log = th_read_log(g_dir, "torchrun");
    CHECK_MSG(WIFEXITED(rep.status) && WEXITSTATUS(rep.status) == 0, "wait status %d:\n%s",
              rep.status, log);
    long first, last;
    CHECK(steps_of_attempt("torchrun", 3, &first, &last) > 0);
    CHECK_EQ_INT((int)last, ITERS);
    double d = th_ckpt_diff(g_dir, "ref", "torchrun", "iter_000000" ITERS_S ".safetensors");
    CHECK_MSG(d == 0.0, "under torchrun the healed run differs from the uninterrupted one by %.3g",
              d);
}

static void cleanup_live(void) {
    if (g_live > 0) {
        kill(-g_live, SIGKILL);
        th_kill_child(g_live);
    }
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: test_restart PATH-TO-segtrain [torchrun]\n");
        return 2;
    }
    g_bin = argv[1];
    int torchrun = argc > 2 && strcmp(argv[2], "torchrun") == 0;
    sg_log_set_level(SG_LOG_WARN);
    if (torchrun && !torch_ok()) {
        fprintf(stderr, "SKIP: /usr/bin/python3 has no torch.distributed.run (Debian's "
                        "python3-torch)\n");
        return 77;
    }
    if (setup()) {
        fprintf(stderr, "fixture setup failed in %s\n", g_dir);
        return 1;
    }
    atexit(cleanup_live);
    TEST_RUN(test_reference);
    snprintf(g_cfg, sizeof g_cfg, "%s/base.yaml", g_dir);
    if (torchrun) {
        TEST_RUN(test_torchrun_heal3);
    } else {
        TEST_RUN(test_heal3);
        TEST_RUN(test_give_up);
        TEST_RUN(test_user_signal);
        TEST_RUN(test_not_retried);
        TEST_RUN(test_usage);
    }
    cleanup_live();
    int rc = TEST_EXIT();
    if (!rc) th_sh("rm -rf %s", g_dir);
    else fprintf(stderr, "kept %s for inspection\n", g_dir);
    return rc;
}
