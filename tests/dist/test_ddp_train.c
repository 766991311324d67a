/* tests/dist/test_ddp_train.c - data-parallel training end to end through
 * the segtrain binary (argv[1]) and its launcher, on a synthetic dataset and
 * a tiny network (no dropout, no random augmentation, no shuffling):
 *  - 2 ranks x batch 2 with SyncBN end with the parameters and running
 *    stats of 1 rank x batch 4 after 2 steps (relative 1e-4); with SyncBN
 *    off they do not;
 *  - 2 ranks x batch 2 x 2 accumulation micro-steps equal 1 rank x batch 4
 *    x 2 micro-steps (each micro-batch's union across ranks is the single
 *    rank's micro-batch);
 *    both on the FCN head and direct convolutions (EQ_SETS says why);
 *  - kill -9 of one worker mid-training: the launcher exits non-zero naming
 *    it within the timeout, no worker is left, the last checkpoint loads;
 *  - SIGSTOP of one worker mid-training: rank 0 times out naming it, and
 *    so does the launcher's summary;
 *  - SIGTERM to a worker still waiting for the rendezvous store ends it at
 *    once (exit 1, saying so), not after dist.timeout_s or a SIGKILL;
 *  - a 2-rank checkpoint resumes on 3 ranks and on 1 rank;
 *  - evaluation on 1, 2 and 3 ranks gives identical metrics. */
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>

#include "core/log.h"
#include "io/safetensors.h"
#include "tests/ckpt_diff.h"
#include "tests/helpers.h"
#include "tests/tiny_config.h"
#include "testutil.h"

static const char *g_bin;

static char g_dir[256];

static int setup(void) {
    snprintf(g_dir, sizeof g_dir, "/tmp/sg_ddp_train_XXXXXX");
    if (!mkdtemp(g_dir)) return -1;
    if (th_sh("%s synth --out %s/data --train 8 --val 3 --size 40x40 --seed 5 >/dev/null 2>&1",
              g_bin, g_dir))
        return -1;
    char path[512];
    snprintf(path, sizeof path, "%s/base.yaml", g_dir);
    /* the tiny network (tests/tiny_config.h) with what this test changes */
    const char *const sets[] = {"threads=1",
                                "model.aspp_dropout=0.0",
                                "model.aux_dropout=0.0",
                                "data.crop_size=[40, 40]",
                                "data.scale_range=[1.0, 1.0]",
                                "data.hflip=false",
                                "data.shuffle=false",
                                "train.iters=5",
                                "train.lr=0.02",
                                "train.checkpoint_every=5",
                                "train.keep_checkpoints=2",
                                "dist.timeout_s=20"};
    return fx_write_config(path, g_dir, sets, (int)(sizeof sets / sizeof sets[0]));
}

/* The equalities below compare 2 steps of the FCN head (no dropout) on the
 * direct convolution kernels: what they test is the data-parallel
 * arithmetic, and a training run is a chaotic system that amplifies any
 * change of summation order (the all-reduce's, a batch of 2 instead of 4)
 * wherever the network is ill-conditioned. Measured on this network
 * (max rel diff of the checkpoints, AVX2):
 *  - DeepLabV3: ASPP's image-pooling branch normalises 4 pooled vectors
 *    that are nearly equal at random init, and the gradient of the 1x1 conv
 *    before that BN is a sum over the 4 samples that cancels down to their
 *    small differences: 1.5e-5 after 1 step, 5e-5 after 5;
 *  - FCN: ~2e-6 for 4 steps, then 4e-2 at step 3 of a 5-step run (a tie
 *    somewhere, such as the stem's max-pool, resolved the other way);
 *  - oneDNN's Winograd (AVX-512 only; SG_CPU_CONV turns it and the phase
 *    sub-images that run on it off): oneDNN picks its schedule
 *    by batch size, so a sample's forward is not bit-identical between a
 *    batch of 4 and of 2; DeepLabV3 ended 5 steps at 0.13 there.
 * Without SyncBN the FCN runs differ by ~3 after 2 steps. DeepLabV3's
 * one-step gradients on W ranks are compared in test_ddp. */
#define EQ_STEPS "2"
#define EQ_SETS                                                                   \
    "--set model.arch=fcn --set model.head_dropout=0 --set train.iters=" EQ_STEPS \
    " --set train.checkpoint_every=" EQ_STEPS " "
#define EQ_CKPT "iter_0000000" EQ_STEPS ".safetensors"

static int eq_run(const char *run, int nproc, const char *sets) {
    /* inherited by the launcher's workers */
    setenv("SG_CPU_CONV", "off:onednn-wino,off:phases", 1);
    char all[512];
    snprintf(all, sizeof all, EQ_SETS "%s", sets);
    int rc = th_train_run(g_bin, g_dir, run, nproc, all);
    unsetenv("SG_CPU_CONV");
    return rc;
}

static void test_syncbn_matches_big_batch(void) {
    /* DeepLabV3 on 2 ranks: the checkpoint the evaluation cases read */
    CHECK_EQ_INT(th_train_run(g_bin, g_dir, "two_b2", 2,
                              "--set train.batch_size=2 --set model.sync_bn=true"),
                 0);
    CHECK_EQ_INT(eq_run("fcn_one_b4", 0, "--set train.batch_size=4"), 0);
    CHECK_EQ_INT(eq_run("fcn_two_b2", 2, "--set train.batch_size=2 --set model.sync_bn=true"), 0);
    CHECK_EQ_INT(
        eq_run("fcn_two_b2_nosync", 2, "--set train.batch_size=2 --set model.sync_bn=false"), 0);
    double d = th_ckpt_diff(g_dir, "fcn_one_b4", "fcn_two_b2", EQ_CKPT);
    CHECK(d >= 0);
    CHECK_MSG(d < 1e-4, "2 ranks x 2 with SyncBN differ from 1 rank x 4 by %.3g", d);
    double dn = th_ckpt_diff(g_dir, "fcn_one_b4", "fcn_two_b2_nosync", EQ_CKPT);
    CHECK(dn >= 0);
    CHECK_MSG(dn > 1e-3, "without SyncBN the runs should differ, max rel diff %.3g", dn);
}

static void test_accumulation(void) {
    /* batch 2 per rank, not 1: a BN over few values amplifies rounding
     * differences (see EQ_SETS) */
    CHECK_EQ_INT(eq_run("one_b4_k2", 0, "--set train.batch_size=4 --set train.accum_steps=2"), 0);
    CHECK_EQ_INT(eq_run("two_b2_k2", 2, "--set train.batch_size=2 --set train.accum_steps=2"), 0);
    double d = th_ckpt_diff(g_dir, "one_b4_k2", "two_b2_k2", EQ_CKPT);
    CHECK(d >= 0);
    CHECK_MSG(d < 1e-4, "2 ranks x 2 x accum 2 differ from 1 rank x 4 x accum 2 by %.3g", d);
}

static void test_resume_on_other_world_sizes(void) {
    CHECK_EQ_INT(th_train_run(g_bin, g_dir, "two_for_resume", 2,
                              "--set train.iters=3 --set train.checkpoint_every=3"),
                 0);
    char src[512];
    snprintf(src, sizeof src, "%s/two_for_resume/checkpoints/iter_00000003.safetensors", g_dir);
    struct stat st;
    CHECK(stat(src, &st) == 0);
    char sets[1024];
    snprintf(sets, sizeof sets, "--set train.iters=5 --resume %s", src);
    CHECK_EQ_INT(th_train_run(g_bin, g_dir, "resume3", 3, sets), 0);
    CHECK_EQ_INT(th_train_run(g_bin, g_dir, "resume1", 0, sets), 0);
    char p[512];
    snprintf(p, sizeof p, "%s/resume3/checkpoints/iter_00000005.safetensors", g_dir);
    CHECK(stat(p, &st) == 0);
    snprintf(p, sizeof p, "%s/resume1/checkpoints/iter_00000005.safetensors", g_dir);
    CHECK(stat(p, &st) == 0);
}

/* Distributed evaluation sees every val image exactly once: 1, 2 and 3
 * ranks on 3 val images (2 does not divide 3, 3 does) give byte-identical
 * metrics, pixel totals included. */
static void test_distributed_eval_exact(void) {
    char ck[512];
    snprintf(ck, sizeof ck, "%s/two_b2/checkpoints/iter_00000005.safetensors", g_dir);
    char *res[3];
    for (int n = 1; n <= 3; n++) {
        char launch[64] = "", out[512];
        if (n > 1) snprintf(launch, sizeof launch, "--nproc-per-node %d ", n);
        snprintf(out, sizeof out, "%s/eval%d.json", g_dir, n);
        CHECK_EQ_INT(
            th_sh(
                "%s %seval --config %s/base.yaml --set run_dir=%s/ev%d --checkpoint %s --out %s > "
                "%s/ev%d.log 2>&1",
                g_bin, launch, g_dir, g_dir, n, ck, out, g_dir, n),
            0);
        res[n - 1] = th_read_file(out);
        CHECK(res[n - 1] != NULL);
    }
    CHECK_STR_CONTAINS(res[0], "\"images\":3");
    CHECK_MSG(strcmp(res[0], res[1]) == 0, "2-rank eval differs:\n%s\n%s", res[0], res[1]);
    CHECK_MSG(strcmp(res[0], res[2]) == 0, "3-rank eval differs:\n%s\n%s", res[0], res[2]);
    for (int k = 0; k < 3; k++) free(res[k]);
}

/* Worker pids of a launcher: its children (from /proc). */
/* Starts a 2-rank training that runs until stopped; returns the launcher's
 * pid once the first checkpoint exists (-1 on timeout), and the workers. */
/* Launchers started by start_long_run, killed at exit whatever a test did,
 * so a failed CHECK never leaves a training run behind. */
static pid_t g_runs[8];
static int g_nruns;

static void kill_leftover_runs(void) {
    for (int i = 0; i < g_nruns; i++) th_kill_child(g_runs[i]);
}

/* 1 if directory `dir` holds a finished checkpoint (*.safetensors). */
static int has_checkpoint(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return 0;
    struct dirent *e;
    int found = 0;
    while (!found && (e = readdir(d))) {
        size_t n = strlen(e->d_name);
        found = n > 12 && strcmp(e->d_name + n - 12, ".safetensors") == 0;
    }
    closedir(d);
    return found;
}

static pid_t start_long_run(const char *run, pid_t *kids, int *nk, const char *timeout) {
    char cfgp[512], rund[512], logp[512], ck[512];
    snprintf(cfgp, sizeof cfgp, "%s/base.yaml", g_dir);
    snprintf(rund, sizeof rund, "run_dir=%s/%s", g_dir, run);
    snprintf(logp, sizeof logp, "%s/%s.log", g_dir, run);
    snprintf(ck, sizeof ck, "%s/%s/checkpoints", g_dir, run);
    char tset[64];
    snprintf(tset, sizeof tset, "dist.timeout_s=%s", timeout);
    double t0 = th_now();
    pid_t pid = fork();
    if (pid == 0) {
        int fd = open(logp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        dup2(fd, 1);
        dup2(fd, 2);
        execl(g_bin, g_bin, "--nproc-per-node", "2", "--kill-grace-s", "3", "train", "--config",
              cfgp, "--set", rund, "--set", "train.iters=100000", "--set",
              "train.checkpoint_every=2", "--set", tset, (char *)NULL);
        _exit(127);
    }
    if (pid > 0 && g_nruns < 8) g_runs[g_nruns++] = pid;
    /* wait for the first checkpoint; keep_checkpoints prunes old ones while
     * this polls, so any checkpoint file counts, not only iter 2's */
    int have = 0;
    while (!(have = has_checkpoint(ck)) && th_now() - t0 < 60) usleep(20 * 1000);
    *nk = th_children(pid, kids, 8);
    if (!have) { /* never leave the run behind */
        kill(pid, SIGTERM);
        waitpid(pid, NULL, 0);
        return -1;
    }
    return pid;
}

static void test_kill9_mid_training(void) {
    pid_t kids[8];
    int nk = 0;
    pid_t pid = start_long_run("killed", kids, &nk, "10");
    CHECK(pid > 0);
    CHECK_EQ_INT(nk, 2);
    int killed = -1;
    for (int i = 0; i < nk; i++)
        if (th_env_rank(kids[i]) == 1) {
            kill(kids[i], SIGKILL);
            killed = kids[i];
        }
    CHECK(killed > 0);
    double tk = th_now();
    int status = 0;
    waitpid(pid, &status, 0);
    double waited = th_now() - tk;
    char *log = th_read_log(g_dir, "killed");
    fprintf(stderr, "  launcher exit %d, %.1f s after the kill\n", WEXITSTATUS(status), waited);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 137);
    CHECK_STR_CONTAINS(log, "worker rank 1 (pid");
    CHECK_STR_CONTAINS(log, "killed by signal 9");
    CHECK(waited < 10 + 30);
    for (int i = 0; i < nk; i++)
        CHECK_MSG(kill(kids[i], 0) != 0, "worker pid %d still exists", kids[i]);
    /* every checkpoint left behind is complete */
    char cdir[600];
    snprintf(cdir, sizeof cdir, "%s/killed/checkpoints", g_dir);
    DIR *cd = opendir(cdir);
    CHECK(cd != NULL);
    struct dirent *e;
    int good = 0;
    while ((e = readdir(cd))) {
        if (!strstr(e->d_name, ".safetensors")) continue;
        char p[1024];
        snprintf(p, sizeof p, "%s/%s", cdir, e->d_name);
        sg_st_file *sf = sg_st_open(p);
        CHECK_MSG(sf != NULL, "checkpoint %s does not load", p);
        sg_st_close(sf);
        good++;
    }
    closedir(cd);
    CHECK(good >= 1);
}

/* A rank stopped with SIGSTOP mid-training: rank 0 times out in a
 * collective (SyncBN hook or DDP bucket) and names rank 1; the launcher
 * then ends the stopped worker. */
static void test_sigstop_mid_training(void) {
    pid_t kids[8];
    int nk = 0;
    pid_t pid = start_long_run("stopped", kids, &nk, "6");
    CHECK(pid > 0);
    CHECK_EQ_INT(nk, 2);
    int stopped = -1;
    for (int i = 0; i < nk; i++)
        if (th_env_rank(kids[i]) == 1) {
            kill(kids[i], SIGSTOP);
            stopped = kids[i];
        }
    CHECK(stopped > 0);
    double tk = th_now();
    int status = 0;
    waitpid(pid, &status, 0);
    double waited = th_now() - tk;
    char *log = th_read_log(g_dir, "stopped");
    fprintf(stderr, "  launcher exit %d, %.1f s after SIGSTOP\n", WEXITSTATUS(status), waited);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) != 0);
    CHECK_STR_CONTAINS(log, "Rank 1 is stopped or hung");
    /* the summary names the hung rank, not rank 0 which found it and exited */
    CHECK_STR_CONTAINS(
        log, "launcher: failed: worker rank 1 is stopped or hung (found by worker rank 0");
    for (int i = 0; i < nk; i++)
        CHECK_MSG(kill(kids[i], 0) != 0, "worker pid %d still exists", kids[i]);
}

/* A rank started by hand (torchrun's variables) whose rank 0 never comes:
 * it waits for the store; SIGTERM must end that wait at once. */
static void test_sigterm_while_joining(void) {
    char cfgp[512], rund[512], logp[512];
    snprintf(cfgp, sizeof cfgp, "%s/base.yaml", g_dir);
    snprintf(rund, sizeof rund, "run_dir=%s/joining", g_dir);
    snprintf(logp, sizeof logp, "%s/joining.log", g_dir);
    char port[16];
    snprintf(port, sizeof port, "%d", th_free_port()); /* nobody listens there */
    pid_t pid = fork();
    if (pid == 0) {
        int fd = open(logp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        dup2(fd, 1);
        dup2(fd, 2);
        th_rank_env(1, 2, port, 0);
        execl(g_bin, g_bin, "train", "--config", cfgp, "--set", rund, "--set", "dist.timeout_s=120",
              "--verbose", (char *)NULL);
        _exit(127);
    }
    if (pid > 0 && g_nruns < 8) g_runs[g_nruns++] = pid;
    /* until it is waiting for the store (its signal handler is in place) */
    char *log = NULL;
    for (int i = 0; i < 3000; i++) {
        log = th_read_log(g_dir, "joining");
        if (strstr(log, "joining the job")) break;
        usleep(20 * 1000);
    }
    kill(pid, SIGTERM);
    double t0 = th_now();
    int st = 0;
    while (waitpid(pid, &st, WNOHANG) == 0) {
        if (th_now() - t0 > 60) { /* the bug: waits out dist.timeout_s=120 */
            kill(pid, SIGKILL);
            waitpid(pid, &st, 0);
            CHECK_MSG(0, "the rank still waited for the store 60 s after SIGTERM:\n%s",
                      th_read_log(g_dir, "joining"));
        }
        usleep(20 * 1000);
    }
    log = th_read_log(g_dir, "joining");
    fprintf(stderr, "  exited %.1f s after SIGTERM, wait status %d\n", th_now() - t0, st);
    CHECK_STR_CONTAINS(log, "joining the job");
    /* stopped by the signal: 128 + 15, as every process that stops on one */
    CHECK_MSG(WIFEXITED(st) && WEXITSTATUS(st) == 143, "wait status %d:\n%s", st, log);
    CHECK_STR_CONTAINS(log, "rank 1: stopped by signal 15 while joining the job");
}

/* Rank 0's checkpoint write fails (a file size limit stands in for a full
 * disk: EFBIG with SIGXFSZ ignored, as ENOSPC): rank 1 learns it through the
 * shared outcome and exits first; the launcher's summary must still name
 * rank 0, the rank whose own error it was, not rank 1. */
static void test_disk_full_names_rank0(void) {
    char cmd[2048];
    snprintf(cmd, sizeof cmd,
             "bash -c \"trap '' XFSZ; ulimit -f 1500; exec %s --nproc-per-node 2 --kill-grace-s 5 "
             "train --config %s/base.yaml --set run_dir=%s/diskfull --set train.iters=4 "
             "--set train.checkpoint_every=2\" > %s/diskfull.log 2>&1",
             g_bin, g_dir, g_dir, g_dir);
    int rc = th_sh("%s", cmd);
    char *log = th_read_log(g_dir, "diskfull");
    CHECK_MSG(rc == 1, "exit %d:\n%s", rc, log);
    CHECK_STR_CONTAINS(log, "File too large");
    /* whichever exits first: rank 0 itself, or rank 1 naming it */
    CHECK_STR_CONTAINS(log, "launcher: failed: worker rank 0 ");
    CHECK_MSG(strstr(log, "failed: worker rank 1 exited") == NULL,
              "the summary blames rank 1 for rank 0's failed write:\n%s", log);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: test_ddp_train PATH-TO-segtrain\n");
        return 2;
    }
    g_bin = argv[1];
    sg_log_set_level(SG_LOG_WARN);
    if (setup()) {
        fprintf(stderr, "fixture setup failed in %s\n", g_dir);
        return 1;
    }
    TEST_RUN(test_syncbn_matches_big_batch);
    TEST_RUN(test_accumulation);
    TEST_RUN(test_distributed_eval_exact);
    TEST_RUN(test_resume_on_other_world_sizes);
    TEST_RUN(test_kill9_mid_training);
    TEST_RUN(test_sigstop_mid_training);
    TEST_RUN(test_sigterm_while_joining);
    TEST_RUN(test_disk_full_names_rank0);
    kill_leftover_runs();
    int rc = TEST_EXIT();
    if (!rc) th_sh("rm -rf %s", g_dir);
    else fprintf(stderr, "kept %s for inspection\n", g_dir);
    return rc;
}
