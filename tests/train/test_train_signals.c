/* tests/train/test_train_signals.c - stopping a 2-rank training run through
 * the segtrain binary (argv[1]) and its launcher, the way schedulers do:
 *  - job: SIGTERM to the launcher and to every worker at once (systemd,
 *    Slurm's scancel, pkill signal every process of a job). Each worker gets
 *    the request twice, directly and forwarded by the launcher; the run must
 *    still finish its step, write a checkpoint and exit 143. It used to take
 *    the forwarded copy for an impatient second signal and die at once,
 *    losing everything since the last periodic checkpoint;
 *  - hup: SIGHUP to the launcher (its terminal closed). It forwards it; the
 *    workers used to die of it without a checkpoint; now they checkpoint and
 *    the launcher exits 129;
 * in both, the checkpoint is valid, holds the iteration the log names, and
 * --resume auto continues from it. No process is left behind; the runs wait
 * for progress by polling, with no timing threshold.
 *  - split: two hand-started ranks whose run_dir (relative) resolves to two
 *    directories, as on nodes without a shared filesystem: rank 0 finds a
 *    checkpoint, rank 1 none. Both must stop at start-up naming the
 *    iterations; they used to train apart (rank 1 from scratch, momentum and
 *    sample position differing) until mismatched collectives failed. */
#include <arpa/inet.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdarg.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "core/log.h"
#include "tests/helpers.h"
#include "tests/tiny_config.h"
#include "testutil.h"
#include "train/checkpoint.h"

static const char *g_bin;
static char g_dir[256];
static pid_t g_run = -1; /* the launcher being tested, killed at exit whatever happened */

static void kill_leftover_run(void) {
    if (g_run > 0 && waitpid(g_run, NULL, WNOHANG) == 0) {
        kill(g_run, SIGKILL); /* its workers die with it (parent-death signal) */
        waitpid(g_run, NULL, 0);
    }
    g_run = -1;
}

static int setup(void) {
    snprintf(g_dir, sizeof g_dir, "%s/sg_train_signals_XXXXXX",
             getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (!mkdtemp(g_dir)) return -1;
    if (th_sh("%s synth --out %s/data --train 12 --val 4 --size 40x40 --seed 3 >/dev/null 2>&1",
              g_bin, g_dir))
        return -1;
    char path[512];
    snprintf(path, sizeof path, "%s/base.yaml", g_dir);
    /* the tiny network (tests/tiny_config.h) with what this test changes */
    const char *const sets[] = {"seed=1",
                                "threads=1",
                                "data.crop_size=[32, 32]",
                                "train.iters=100000",
                                "train.keep_checkpoints=2",
                                "eval.batch_size=1",
                                "dist.timeout_s=10"};
    return fx_write_config(path, g_dir, sets, (int)(sizeof sets / sizeof sets[0]));
}

/* Lines in run's metrics.jsonl (rank 0 writes one per step). */
static int metrics_lines(const char *run) {
    char p[512];
    snprintf(p, sizeof p, "%s/%s/metrics.jsonl", g_dir, run);
    FILE *f = fopen(p, "r");
    if (!f) return 0;
    int n = 0, c;
    while ((c = fgetc(f)) != EOF) n += c == '\n';
    fclose(f);
    return n;
}

/* Worker pids of the launcher (its children, from /proc). */
static int children(pid_t launcher, pid_t *out, int cap) {
    char p[128];
    snprintf(p, sizeof p, "/proc/%d/task/%d/children", (int)launcher, (int)launcher);
    FILE *f = fopen(p, "r");
    int n = 0, pid;
    while (f && n < cap && fscanf(f, "%d", &pid) == 1) out[n++] = pid;
    if (f) fclose(f);
    return n;
}

/* Starts an endless 2-rank run and returns once it has done 3 steps (so both
 * workers are in the training loop), or -1 after 60 s without. */
static pid_t start_run(const char *run, pid_t *kids, int *nk) {
    char cfgp[512], rund[512], logp[512];
    snprintf(cfgp, sizeof cfgp, "%s/base.yaml", g_dir);
    snprintf(rund, sizeof rund, "run_dir=%s/%s", g_dir, run);
    snprintf(logp, sizeof logp, "%s/%s.log", g_dir, run);
    pid_t pid = fork();
    if (pid == 0) {
        int fd = open(logp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        dup2(fd, 1);
        dup2(fd, 2);
        execl(g_bin, g_bin, "--nproc-per-node", "2", "--kill-grace-s", "10", "train", "--config",
              cfgp, "--set", rund, (char *)NULL);
        _exit(127);
    }
    g_run = pid;
    double t0 = th_now();
    while (metrics_lines(run) < 3 && th_now() - t0 < 60 && waitpid(pid, NULL, WNOHANG) == 0)
        usleep(20 * 1000);
    *nk = children(pid, kids, 8);
    if (metrics_lines(run) < 3) {
        kill_leftover_run();
        return -1;
    }
    return pid;
}

/* Stops run `run` by sending `sig` to the launcher (and to each worker when
 * job_wide), then checks exit 128 + sig, the checkpoint and a resume. */
static void stop_and_check(const char *run, int sig, int job_wide) {
    pid_t kids[8];
    int nk = 0;
    pid_t pid = start_run(run, kids, &nk);
    CHECK_MSG(pid > 0, "the run did not start training; log:\n%s", th_read_log(g_dir, run));
    CHECK_EQ_INT(nk, 2);
    kill(pid, sig);
    if (job_wide)
        for (int i = 0; i < nk; i++) kill(kids[i], sig);
    int status = 0;
    waitpid(pid, &status, 0);
    g_run = -1;
    char *log = th_read_log(g_dir, run);
    CHECK_MSG(WIFEXITED(status) && WEXITSTATUS(status) == 128 + sig, "launcher status %d; log:\n%s",
              status, log);
    for (int i = 0; i < nk; i++)
        CHECK_MSG(kill(kids[i], 0) != 0, "worker pid %d still exists", kids[i]);
    char want[64];
    snprintf(want, sizeof want, "interrupted by signal %d", sig);
    CHECK_STR_CONTAINS(log, want);
    const char *at = strstr(strstr(log, want), "at iteration ");
    long long logged = -1;
    CHECK(at != NULL && sscanf(at + 13, "%lld", &logged) == 1);
    /* an interruption, not an error; the launcher prints the resume
     * command with every launcher option given (resuming needs the same
     * ranks; --kill-grace-s too) */
    CHECK(strstr(log, "error: interrupted") == NULL);
    CHECK_STR_CONTAINS(log, "The launcher prints the command to resume.");
    char resume[1024];
    snprintf(resume, sizeof resume,
             "launcher: resume from the last checkpoint with: %s --nproc-per-node 2 "
             "--kill-grace-s 10 train --resume auto --config %s/base.yaml --set run_dir=%s/%s",
             g_bin, g_dir, g_dir, run);
    CHECK_STR_CONTAINS(log, resume);

    char rdir[512], path[600], why[256];
    snprintf(rdir, sizeof rdir, "%s/%s", g_dir, run);
    CHECK_MSG(sg_ckpt_find_latest(rdir, path, sizeof path) == 1, "no checkpoint; log:\n%s", log);
    sg_st_file *f = sg_ckpt_open_valid(path, why, sizeof why);
    CHECK_MSG(f != NULL, "%s: %s", path, why);
    sg_train_state st;
    int rc = sg_ckpt_read_state(f, &st);
    sg_st_close(f);
    CHECK_EQ_INT(rc, 0);
    CHECK_EQ_INT(st.iter, logged);
    CHECK(st.iter >= 3);

    /* --resume auto continues from it */
    CHECK_EQ_INT(th_sh("%s --nproc-per-node 2 train --config %s/base.yaml --set run_dir=%s "
                       "--set train.iters=%lld --resume auto > %s/%s_resume.log 2>&1",
                       g_bin, g_dir, rdir, (long long)st.iter + 2, g_dir, run),
                 0);
    char rrun[64];
    snprintf(rrun, sizeof rrun, "%s_resume", run);
    CHECK_STR_CONTAINS(th_read_log(g_dir, rrun), path);
    sg_ckpt_iter_path(rdir, st.iter + 2, path, sizeof path);
    f = sg_ckpt_open_valid(path, why, sizeof why);
    CHECK_MSG(f != NULL, "%s: %s", path, why);
    sg_st_close(f);
}

static void test_resume_ranks_disagree(void) {
    /* node A holds a checkpoint of iteration 2, node B nothing */
    CHECK_EQ_INT(
        th_sh("mkdir -p %s/nodeA %s/nodeB && cd %s/nodeA && %s train --config %s/base.yaml "
              "--set run_dir=run --set train.iters=2 > %s/nodeA.log 2>&1",
              g_dir, g_dir, g_dir, g_bin, g_dir, g_dir),
        0);
    int port = th_free_port();
    pid_t pid[2];
    for (int r = 0; r < 2; r++) {
        pid[r] = fork();
        if (pid[r] == 0) {
            char d[512], logp[512], v[16];
            snprintf(d, sizeof d, "%s/node%c", g_dir, r ? 'B' : 'A');
            snprintf(logp, sizeof logp, "%s/split%d.log", g_dir, r);
            if (chdir(d) != 0) _exit(126);
            int fd = open(logp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
            dup2(fd, 1);
            dup2(fd, 2);
            snprintf(v, sizeof v, "%d", port);
            th_rank_env(r, 2, v, 1);
            char cfgp[512];
            snprintf(cfgp, sizeof cfgp, "%s/base.yaml", g_dir);
            execl(g_bin, g_bin, "train", "--config", cfgp, "--set", "run_dir=run", "--set",
                  "train.iters=6", "--resume", "auto", (char *)NULL);
            _exit(127);
        }
    }
    int st[2];
    for (int r = 0; r < 2; r++) waitpid(pid[r], &st[r], 0);
    char name[32];
    for (int r = 0; r < 2; r++) {
        snprintf(name, sizeof name, "split%d", r);
        char *log = th_read_log(g_dir, name);
        CHECK_MSG(WIFEXITED(st[r]) && WEXITSTATUS(st[r]) == 1, "rank %d status %d; log:\n%s", r,
                  st[r], log);
        CHECK_STR_CONTAINS(log, "rank 1 starts at iteration 0 (epoch 0, sample 0) but rank 0 at "
                                "iteration 2");
    }
    char p[600];
    snprintf(p, sizeof p, "%s/nodeB/run/checkpoints/iter_00000001.safetensors", g_dir);
    CHECK(access(p, F_OK) != 0); /* rank 1 never trained */
}

static void test_job_wide_sigterm(void) { stop_and_check("job", SIGTERM, 1); }
static void test_sighup_to_launcher(void) { stop_and_check("hup", SIGHUP, 0); }

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: test_train_signals PATH-TO-segtrain\n");
        return 2;
    }
    static char bin[4096];
    g_bin = realpath(argv[1], bin) ? bin : argv[1]; /* the split case changes directory */
    sg_log_set_level(SG_LOG_ERROR);
    if (setup()) {
        fprintf(stderr, "fixture setup failed in %s\n", g_dir);
        return 1;
    }
    TEST_RUN(test_job_wide_sigterm);
    kill_leftover_run();
    TEST_RUN(test_sighup_to_launcher);
    kill_leftover_run();
    TEST_RUN(test_resume_ranks_disagree);
    int rc = TEST_EXIT();
    if (!rc) th_sh("rm -rf '%s'", g_dir);
    else fprintf(stderr, "kept %s for inspection\n", g_dir);
    return rc;
}
