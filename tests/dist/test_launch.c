/* tests/dist/test_launch.c - the launcher (dist/launch.h) and failure
 * handling with real processes: torchrun's environment contract and
 * argument pass-through; a worker exiting non-zero, one killed with -9, one
 * stopped with SIGSTOP inside a collective (the others time out naming it,
 * and so does the launcher's summary), workers ignoring SIGTERM (SIGKILL
 * after the grace period), and SIGTERM to the launcher forwarded; the job
 * token (random per job, or the user's); a second job on a running job's
 * port fails at once saying so. Every case checks the exit status, the
 * worker named in the output, and that no worker process is left.
 *
 * Workers that fail on purpose first wait until every worker has recorded
 * its pid (and set up its signal handling): on a loaded machine a worker
 * that is slow to start would otherwise be stopped before it records it. */
#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include "core/log.h"
#include "dist/comm.h"
#include "dist/launch.h"
#include "dist/launch_report.h"
#include "dist/launch_resume.h"
#include "dist_harness.h"
#include "tests/helpers.h"
#include "testutil.h"

static char g_piddir[128];

/* Number of pid files in the pid directory. */
static int count_pids(void) {
    const char *dir = getenv("SG_TEST_PIDDIR");
    DIR *d = dir ? opendir(dir) : NULL;
    struct dirent *e;
    int n = 0;
    while (d && (e = readdir(d))) {
        size_t nl = strlen(e->d_name);
        n += nl > 4 && strcmp(e->d_name + nl - 4, ".pid") == 0;
    }
    if (d) closedir(d);
    return n;
}

/* Waits (at most 60 s) until every worker of the job has written its pid. */
static void wait_all_pids(void) {
    int world = atoi(getenv("WORLD_SIZE"));
    for (int i = 0; i < 3000 && count_pids() < world; i++) usleep(20 * 1000);
}

static void write_pid(void) {
    char path[256];
    char tmp[300];
    snprintf(path, sizeof path, "%s/%s.pid", getenv("SG_TEST_PIDDIR"), getenv("RANK"));
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w"); /* complete when it appears under its name */
    if (f) {
        fprintf(f, "%d\n", (int)getpid());
        fclose(f);
        rename(tmp, path);
    }
}

/* ---- workers ---- */
static int w_env(int argc, char **argv) {
    printf(
        "env RANK=%s LOCAL_RANK=%s WORLD_SIZE=%s LOCAL_WORLD_SIZE=%s GROUP_RANK=%s MASTER_ADDR=%s "
        "OMP_NUM_THREADS=%s port_set=%d arg=%s\n",
        getenv("RANK"), getenv("LOCAL_RANK"), getenv("WORLD_SIZE"), getenv("LOCAL_WORLD_SIZE"),
        getenv("GROUP_RANK"), getenv("MASTER_ADDR"), getenv("OMP_NUM_THREADS"),
        getenv("MASTER_PORT") && atoi(getenv("MASTER_PORT")) > 0, argc > 2 ? argv[2] : "");
    fprintf(stderr, "partial line without newline");
    return 0;
}

static int w_fail(int code_rank1, int sig_rank1) {
    write_pid();
    if (atoi(getenv("RANK")) == 1) {
        wait_all_pids();
        usleep(300 * 1000);
        if (sig_rank1) raise(sig_rank1);
        return code_rank1;
    }
    sleep(60);
    return 0;
}

static int w_stubborn(void) {
    signal(SIGTERM, SIG_IGN);
    write_pid(); /* after ignoring SIGTERM: rank 0 fails only once all did */
    if (atoi(getenv("RANK")) == 0) {
        wait_all_pids();
        usleep(300 * 1000);
        return 5;
    }
    sleep(60);
    return 0;
}

/* All ranks join a communicator; rank 1 stops itself (SIGSTOP) and the
 * others' all-reduce must time out naming it. */
static int w_sigstop(void) {
    write_pid();
    sg_config cfg;
    sg_config_defaults(&cfg);
    cfg.dist.timeout_s = 5; /* margin for start-up on a loaded machine */
    snprintf(cfg.dist.backend, sizeof cfg.dist.backend, "gloo");
    sg_backend_opts o = {.threads = 1};
    sg_backend *be = sg_backend_create("cpu", &o);
    sg_comm *c = sg_comm_create(&cfg, be);
    if (!c) return 9;
    if (sg_comm_barrier(c)) return 9;
    if (sg_comm_rank(c) == 1) raise(SIGSTOP);
    float *x = be->ops->alloc(be, 16 * sizeof *x);
    sg_status rc = sg_comm_allreduce_f32(c, x, 16);
    sg_comm_destroy(c);
    return rc ? 1 : 0;
}

/* kill -9 mid-run: ranks all-reduce in a loop, rank 1 is killed. */
static int w_kill_midrun(void) {
    write_pid();
    sg_config cfg;
    sg_config_defaults(&cfg);
    cfg.dist.timeout_s = 5;
    snprintf(cfg.dist.backend, sizeof cfg.dist.backend, "gloo");
    sg_backend_opts o = {.threads = 1};
    sg_backend *be = sg_backend_create("cpu", &o);
    sg_comm *c = sg_comm_create(&cfg, be);
    if (!c) return 9;
    float *x = be->ops->alloc(be, 1024 * sizeof *x);
    for (int it = 0; it < 100000; it++) {
        if (it == 20 && sg_comm_rank(c) == 1) raise(SIGKILL);
        if (sg_comm_allreduce_f32(c, x, 1024)) {
            sg_comm_destroy(c);
            return 1;
        }
    }
    return 0;
}

/* A training that fails in every attempt: attempts 0 and 1 first report a
 * new checkpoint (iterations 10, 20), the later ones report iteration 20
 * again (no progress). */
static int w_ckfail(void) {
    int r = atoi(getenv("TORCHELASTIC_RESTART_COUNT"));
    sg_launch_report_checkpoint(r < 2 ? 10 * (r + 1) : 20);
    return 1;
}

/* Prints the job token the launcher gave this worker. */
static int w_token(void) {
    const char *t = getenv("SEGTRAIN_JOB_TOKEN");
    printf("token=%s report=%d\n", t ? t : "(unset)", getenv("SEGTRAIN_LAUNCH_REPORT") != NULL);
    return 0;
}

/* Joins a 2-rank job, says so (rank 0 writes <piddir>/ready), holds the
 * port until <piddir>/release appears (at most 60 s), then leaves. */
static int w_hold(void) {
    write_pid();
    sg_config cfg;
    sg_config_defaults(&cfg);
    cfg.dist.timeout_s = 20;
    snprintf(cfg.dist.backend, sizeof cfg.dist.backend, "gloo");
    sg_backend_opts o = {.threads = 1};
    sg_backend *be = sg_backend_create("cpu", &o);
    sg_comm *c = sg_comm_create(&cfg, be);
    if (!c) return 1;
    char p[300];
    snprintf(p, sizeof p, "%s/%s", getenv("SG_TEST_PIDDIR"), "ready");
    FILE *f = sg_comm_rank(c) == 0 ? fopen(p, "w") : NULL;
    if (f) fclose(f);
    snprintf(p, sizeof p, "%s/%s", getenv("SG_TEST_PIDDIR"), "release");
    for (int i = 0; i < 3000 && access(p, F_OK) != 0; i++) usleep(20 * 1000);
    sg_status rc = sg_comm_barrier(c);
    sg_comm_destroy(c);
    return rc ? 1 : 0;
}

/* ---- driver ---- */
static void fresh_piddir(void) {
    snprintf(g_piddir, sizeof g_piddir, "/tmp/sg_test_launch_%d", (int)getpid());
    mkdir(g_piddir, 0700);
    DIR *d = opendir(g_piddir);
    struct dirent *e;
    while (d && (e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        char p[512];
        snprintf(p, sizeof p, "%s/%s", g_piddir, e->d_name);
        unlink(p);
    }
    if (d) closedir(d);
    setenv("SG_TEST_PIDDIR", g_piddir, 1);
}

/* Number of recorded worker pids still existing (must be 0), and how many
 * were recorded. */
static int leftover_in(const char *dir, int *recorded) {
    int left = 0;
    *recorded = 0;
    DIR *d = opendir(dir);
    struct dirent *e;
    while (d && (e = readdir(d))) {
        size_t nl = strlen(e->d_name);
        if (e->d_name[0] == '.' || nl < 5 || strcmp(e->d_name + nl - 4, ".pid") != 0) continue;
        char p[512];
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        FILE *f = fopen(p, "r");
        int pid = 0;
        /* only counted, never signalled: a pid could have been reused */
        if (f && fscanf(f, "%d", &pid) == 1 && pid > 0) {
            (*recorded)++;
            if (kill(pid, 0) == 0) left++;
        }
        if (f) fclose(f);
        unlink(p);
    }
    if (d) closedir(d);
    return left;
}
static int leftover(int *recorded) { return leftover_in(g_piddir, recorded); }

static void test_env_contract(void) {
    unsetenv("OMP_NUM_THREADS");
    const char *args[] = {"--nproc-per-node=2", "env", "--config=x.yaml", NULL};
    char *out = NULL;
    int rc = dh_launch(args, &out, NULL);
    setenv("OMP_NUM_THREADS", "1", 1);
    CHECK_EQ_INT(rc, 0);
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    char want[256];
    for (int r = 0; r < 2; r++) {
        snprintf(want, sizeof want,
                 "[rank %d] env RANK=%d LOCAL_RANK=%d WORLD_SIZE=2 LOCAL_WORLD_SIZE=2 GROUP_RANK=0 "
                 "MASTER_ADDR=127.0.0.1 OMP_NUM_THREADS=%ld port_set=1 arg=--config=x.yaml",
                 r, r, r, cores / 2 < 1 ? 1 : cores / 2);
        CHECK_STR_CONTAINS(out, want);
        snprintf(want, sizeof want, "[rank %d] partial line without newline\n", r);
        CHECK_STR_CONTAINS(out, want);
    }
    free(out);
}

static void test_multinode_ranks(void) {
    /* node 1 of 2 with 2 procs each: ranks 2 and 3, GROUP_RANK 1 (alone:
     * without the launchers' rendezvous, which would wait for node 0) */
    const char *args[] = {
        "--nproc-per-node", "2", "--nnodes", "2", "--node-rank", "1", "--master-port", "29999",
        "--agent-port",     "0", "env",      "x", NULL};
    char *out = NULL;
    CHECK_EQ_INT(dh_launch(args, &out, NULL), 0);
    CHECK_STR_CONTAINS(
        out, "[rank 3] env RANK=3 LOCAL_RANK=1 WORLD_SIZE=4 LOCAL_WORLD_SIZE=2 GROUP_RANK=1");
    CHECK_STR_CONTAINS(out, "[rank 2] env RANK=2 LOCAL_RANK=0 WORLD_SIZE=4");
    free(out);
}

static void test_usage_errors(void) {
    const char *a1[] = {"--nproc-per-node", "0", "env", NULL};
    char *out = NULL;
    CHECK_EQ_INT(dh_launch(a1, &out, NULL), 2);
    CHECK_STR_CONTAINS(out, "--nproc-per-node '0' is not an integer in [1, 4096]");
    free(out);
    const char *a2[] = {"--nproc-per-node", "2", "--nnodes", "2", "--node-rank", "2", "env", NULL};
    CHECK_EQ_INT(dh_launch(a2, &out, NULL), 2);
    CHECK_STR_CONTAINS(out, "--node-rank 2 must be below --nnodes 2");
    free(out);
}

static void expect_failure(const char *mode, int nproc, const char *grace, int want_rc,
                           const char *want1, const char *want2) {
    fresh_piddir();
    char np[8];
    snprintf(np, sizeof np, "%d", nproc);
    const char *args[] = {"--nproc-per-node", np, "--kill-grace-s", grace, mode, NULL};
    char *out = NULL;
    double secs = 0;
    int rc = dh_launch(args, &out, &secs);
    int recorded = 0, left = leftover(&recorded);
    fprintf(stderr, "  %s: exit %d after %.1f s, %d pids recorded, %d left\n", mode, rc, secs,
            recorded, left);
    CHECK_EQ_INT(rc, want_rc);
    CHECK_STR_CONTAINS(out, want1);
    if (want2) CHECK_STR_CONTAINS(out, want2);
    CHECK_EQ_INT(recorded, nproc);
    CHECK_EQ_INT(left, 0);
    free(out);
}

static void test_worker_exit_code(void) {
    expect_failure("fail", 3, "30", 3, "launcher: worker rank 1 (pid",
                   "failed: worker rank 1 exited with status 3");
}
static void test_worker_kill9(void) {
    expect_failure("kill9", 2, "30", 137, "worker rank 1 (pid", "killed by signal 9");
}
static void test_stubborn_worker_sigkilled(void) {
    expect_failure("stubborn", 3, "1", 5, "worker rank 0 (pid",
                   "still running 1 s after SIGTERM: sending SIGKILL");
}
static void test_sigstop_rank_named_by_others(void) {
    /* rank 0 times out (dist.timeout_s=5) naming rank 1; the launcher then
     * stops rank 1 (stopped: SIGKILL after the 2 s grace); its summary names
     * the hung rank, not the one that found it and exited first */
    expect_failure("sigstop", 3, "2", 1, "Rank 1 is stopped or hung",
                   "launcher: failed: worker rank");
    fresh_piddir();
    const char *args[] = {"--nproc-per-node", "3", "--kill-grace-s", "2", "sigstop", NULL};
    char *out = NULL;
    CHECK_EQ_INT(dh_launch(args, &out, NULL), 1);
    int recorded = 0;
    CHECK_EQ_INT(leftover(&recorded), 0);
    CHECK_STR_CONTAINS(out,
                       "launcher: failed: worker rank 1 is stopped or hung (found by worker rank ");
    CHECK_STR_CONTAINS(out, "see rank 1's log");
    CHECK_STR_CONTAINS(out,
                       "after finding that rank 1 is stopped or hung; stopping the other workers");
    free(out);
}
static void test_kill9_midrun(void) {
    expect_failure("killmid", 2, "5", 137, "worker rank 1 (pid", "killed by signal 9");
}

static int two_pids(void) { return count_pids() >= 2; }

/* A random 64-hex-digit token per job, the same on every rank; the user's
 * SEGTRAIN_JOB_TOKEN passes through; the report pipe is announced. */
/* How often needle occurs in hay. */
static int count_of(const char *hay, const char *needle) {
    int n = 0;
    for (const char *p = hay; (p = strstr(p, needle)) != NULL; p += strlen(needle)) n++;
    return n;
}

/* The pause before a restart: the base after progress, doubling with each
 * attempt in a row without progress, capped at SG_LAUNCH_BACKOFF_CAP_S (or
 * the base when larger). */
static void test_restart_delay(void) {
    CHECK_EQ_INT(SG_LAUNCH_BACKOFF_CAP_S, 30);
    const double base1[] = {1, 1, 2, 4, 8, 16, 30, 30};
    for (int k = 0; k < 8; k++) CHECK(sg_launch_restart_delay(1, k) == base1[k]);
    CHECK(sg_launch_restart_delay(1, 1000) == 30);
    CHECK(sg_launch_restart_delay(0, 9) == 0);
    CHECK(sg_launch_restart_delay(20, 2) == 30);
    CHECK(sg_launch_restart_delay(60, 5) == 60);
    long long it = -1;
    CHECK(sg_launch_report_parse_checkpoint("checkpoint 42", 13, &it) == SG_OK && it == 42);
    CHECK(sg_launch_report_parse_checkpoint("checkpoint -1", 13, &it) != SG_OK);
    CHECK(sg_launch_report_parse_checkpoint("checkpoint 4x", 13, &it) != SG_OK);
    CHECK(sg_launch_report_parse_checkpoint("checkpoint ", 11, &it) != SG_OK);
    int a, b, c;
    CHECK(sg_launch_report_parse("checkpoint 42", 13, &a, &b, &c) != SG_OK);
}

/* --max-restarts 1000: two attempts that wrote a new checkpoint, then
 * attempts that wrote none newer: given up after 2 restarts without
 * progress (--max-restarts-without-progress 2), i.e. at the third such
 * failure, 5 attempts in all. */
static void test_no_progress_gives_up(void) {
    fresh_piddir();
    const char *args[] = {"--nproc-per-node",
                          "1",
                          "--max-restarts",
                          "1000",
                          "--restart-backoff-s",
                          "0",
                          "--max-restarts-without-progress",
                          "2",
                          "ckfail",
                          "train",
                          NULL};
    char *out = NULL;
    double secs = 0;
    int rc = dh_launch(args, &out, &secs);
    fprintf(stderr, "  exit %d after %.1f s\n", rc, secs);
    CHECK_EQ_INT(rc, 1);
    CHECK_EQ_INT(count_of(out, "launcher: restarting the workers"), 4);
    CHECK_STR_CONTAINS(out, "giving up: 3 attempts in a row failed without writing a new "
                            "checkpoint (the newest: iteration 20)");
    CHECK_STR_CONTAINS(out, "(--max-restarts-without-progress 2, of --max-restarts 1000)");
    CHECK_STR_CONTAINS(out, "launcher: failed: worker rank 0 exited with status 1");
    free(out);
}

static void test_job_token(void) {
    unsetenv("SEGTRAIN_JOB_TOKEN");
    const char *args[] = {"--nproc-per-node", "2", "token", NULL};
    char *out[2] = {NULL, NULL}, tok[2][2][80];
    for (int run = 0; run < 2; run++) {
        CHECK_EQ_INT(dh_launch(args, &out[run], NULL), 0);
        for (int r = 0; r < 2; r++) {
            char want[32];
            snprintf(want, sizeof want, "[rank %d] token=", r);
            const char *p = strstr(out[run], want);
            CHECK(p);
            CHECK(sscanf(p + strlen(want), "%79s", tok[run][r]) == 1);
            CHECK_EQ_INT(strlen(tok[run][r]), 64);
            CHECK(strspn(tok[run][r], "0123456789abcdef") == 64);
        }
        CHECK_STR_CONTAINS(out[run], "report=1");
        CHECK(strcmp(tok[run][0], tok[run][1]) == 0); /* one token per job */
    }
    CHECK_MSG(strcmp(tok[0][0], tok[1][0]) != 0, "two jobs got the same token %s", tok[0][0]);
    free(out[0]);
    free(out[1]);
    setenv("SEGTRAIN_JOB_TOKEN", "users-own-token", 1);
    char *o = NULL;
    CHECK_EQ_INT(dh_launch(args, &o, NULL), 0);
    unsetenv("SEGTRAIN_JOB_TOKEN");
    CHECK_STR_CONTAINS(o, "[rank 0] token=users-own-token");
    CHECK_STR_CONTAINS(o, "[rank 1] token=users-own-token");
    free(o);
}

/* Job A holds a port; job B started with the same --master-port fails at
 * once (exit 1) saying another job holds the port - not "ranks disagree on
 * config" after joining A's store - and A finishes normally. */
static void test_second_job_on_same_port(void) {
    fresh_piddir();
    char port[16];
    snprintf(port, sizeof port, "%d", th_free_port());
    const char *args[] = {"--nproc-per-node", "2", "--master-port", port, "hold", NULL};
    int pa[2];
    CHECK(pipe(pa) == 0);
    fflush(stderr);
    pid_t a = fork();
    if (a == 0) { /* job A, its status through the pipe */
        char *out = NULL;
        int rc = dh_launch(args, &out, NULL);
        unsigned char b = (unsigned char)rc;
        if (write(pa[1], &b, 1) != 1) _exit(3);
        _exit(0);
    }
    close(pa[1]);
    char ready[300], release[300];
    snprintf(ready, sizeof ready, "%s/ready", g_piddir);
    snprintf(release, sizeof release, "%s/release", g_piddir);
    for (int i = 0; i < 3000 && access(ready, F_OK) != 0; i++) usleep(20 * 1000);
    int a_up = access(ready, F_OK) == 0;
    /* job B records its pids in a directory of its own */
    char bdir[200];
    snprintf(bdir, sizeof bdir, "%s/b", g_piddir);
    mkdir(bdir, 0700);
    setenv("SG_TEST_PIDDIR", bdir, 1);
    char *out = NULL;
    int rc_b = a_up ? dh_launch(args, &out, NULL) : -1;
    setenv("SG_TEST_PIDDIR", g_piddir, 1);
    FILE *rf = fopen(release, "w");
    if (rf) fclose(rf);
    unsigned char rc_a = 255;
    if (read(pa[0], &rc_a, 1) != 1) rc_a = 254;
    close(pa[0]);
    waitpid(a, NULL, 0);
    int recorded = 0, recorded_b = 0;
    int left_a = leftover(&recorded);
    int left_b = leftover_in(bdir, &recorded_b);
    rmdir(bdir);
    unlink(ready);
    unlink(release);
    CHECK_EQ_INT(left_a, 0);
    CHECK_EQ_INT(left_b, 0);
    CHECK_EQ_INT(recorded, 2);
    CHECK_MSG(a_up, "job A did not come up");
    CHECK_EQ_INT(rc_b, 1);
    char want[96];
    snprintf(want, sizeof want, "holds port %s (127.0.0.1:%s", port, port);
    CHECK_STR_CONTAINS(out, want);
    CHECK_STR_CONTAINS(out, "choose another --master-port");
    CHECK_MSG(!strstr(out, "disagree"), "job B joined job A's store:\n%s", out);
    CHECK_EQ_INT(rc_a, 0);
    free(out);
}

static void test_sigterm_forwarded(void) {
    fresh_piddir();
    const char *args[] = {"--nproc-per-node", "2", "sleep", NULL};
    char *out = NULL;
    dh_ready = two_pids; /* under load the workers may start late */
    int rc = dh_launch_sig(args, &out, NULL, 1.0, SIGTERM);
    dh_ready = NULL;
    int recorded = 0, left = leftover(&recorded);
    CHECK_EQ_INT(rc, 128 + SIGTERM);
    CHECK_STR_CONTAINS(out, "forwarding it to the workers");
    CHECK_EQ_INT(recorded, 2);
    CHECK_EQ_INT(left, 0);
    free(out);
}

/* Rank 0 (the store host) is killed; rank 1, started by hand with torchrun's
 * variables (no launcher to stop it), must exit non-zero naming rank 0. */
static int w_loop_reduce(void) {
    write_pid();
    sg_config cfg;
    sg_config_defaults(&cfg);
    cfg.dist.timeout_s = 8;
    snprintf(cfg.dist.backend, sizeof cfg.dist.backend, "gloo");
    sg_backend_opts o = {.threads = 1};
    sg_backend *be = sg_backend_create("cpu", &o);
    sg_comm *c = sg_comm_create(&cfg, be);
    if (!c) return 9;
    float *x = be->ops->alloc(be, 256 * sizeof *x);
    for (int it = 0; it < 1000000; it++) {
        if (it == 50 && sg_comm_rank(c) == 0) raise(SIGKILL);
        if (sg_comm_allreduce_f32(c, x, 256)) return 1;
    }
    return 0;
}

static void test_store_host_killed_named(void) {
    fresh_piddir();
    char exe[PATH_MAX];
    CHECK(th_self_exe(exe, sizeof exe) == 0);
    char logp[256], port[16];
    snprintf(logp, sizeof logp, "%s/rank1.log", g_piddir);
    snprintf(port, sizeof port, "%d", th_free_port());
    pid_t pids[2];
    for (int r = 0; r < 2; r++) {
        pids[r] = fork();
        if (pids[r] == 0) {
            th_rank_env(r, 2, port, 0);
            if (r == 1) {
                int fd = open(logp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
                dup2(fd, 2);
            }
            execl(exe, exe, "loopreduce", (char *)NULL);
            _exit(127);
        }
    }
    int st0 = 0, st1 = 0;
    waitpid(pids[0], &st0, 0);
    double t0 = th_now();
    while (waitpid(pids[1], &st1, WNOHANG) == 0) {
        if (th_now() - t0 > 30) { /* a hang: the bug this test is for */
            kill(pids[1], SIGKILL);
            waitpid(pids[1], &st1, 0);
            CHECK_MSG(0, "rank 1 still running 30 s after rank 0 was killed");
        }
        usleep(20 * 1000);
    }
    double secs = th_now() - t0;
    FILE *f = fopen(logp, "r");
    static char log[65536];
    size_t len = f ? fread(log, 1, sizeof log - 1, f) : 0;
    if (f) fclose(f);
    log[len] = 0;
    fprintf(stderr, "  rank 1 exited %.1f s after rank 0 died, status %d:\n%s", secs, st1, log);
    int recorded = 0;
    CHECK_EQ_INT(leftover(&recorded), 0);
    CHECK_EQ_INT(recorded, 2);
    unlink(logp);
    CHECK(WIFSIGNALED(st0) && WTERMSIG(st0) == SIGKILL);
    CHECK(WIFEXITED(st1) && WEXITSTATUS(st1) == 1);
    CHECK_STR_CONTAINS(log, "Rank 0 (hosts the rendezvous store) is not reachable");
}

/* The resume command printed after Ctrl-C or a failure: the user's command
 * line, every launcher option kept, --resume auto in place of any --resume. */
#define CHECK_BUF(buf, want) \
    CHECK_MSG(strcmp((buf), (want)) == 0, "got  [%s]\nwant [%s]", (buf), (want))

static void test_resume_command(void) {
    char buf[512];
    char *a1[] = {"./segtrain", "--nproc-per-node", "2",          "--master-port", "29511",
                  "train",      "--config",         "my run.yaml"};
    char *w1[] = {"/x/segtrain", "train", "--config", "my run.yaml", NULL};
    CHECK_EQ_INT(sg_launch_resume_command(8, a1, w1, buf, sizeof buf), 1);
    CHECK_BUF(buf, "./segtrain --nproc-per-node 2 --master-port 29511 train --resume auto "
                   "--config 'my run.yaml'");
    char *a2[] = {"segtrain", "--nproc-per-node=2", "train", "--resume", "runs/x/iter_1.st",
                  "--set",    "run_dir=it's"};
    char *w2[] = {"/x/segtrain", "train",        "--resume", "runs/x/iter_1.st",
                  "--set",       "run_dir=it's", NULL};
    CHECK_EQ_INT(sg_launch_resume_command(7, a2, w2, buf, sizeof buf), 1);
    CHECK_BUF(buf, "segtrain --nproc-per-node=2 train --resume auto --set 'run_dir=it'\\''s'");
    char *a3[] = {"segtrain", "--nproc-per-node", "2", "--resume=best", "--config", "c.yaml"};
    char *w3[] = {"/x/segtrain", "--resume=best", "--config", "c.yaml", NULL};
    CHECK_EQ_INT(sg_launch_resume_command(6, a3, w3, buf, sizeof buf), 1);
    CHECK_BUF(buf, "segtrain --nproc-per-node 2 --resume=auto --config c.yaml");
    /* the default command (train): --resume auto at the end */
    char *a4[] = {"segtrain", "--nproc-per-node", "2", "--config", "c.yaml"};
    char *w4[] = {"/x/segtrain", "--config", "c.yaml", NULL};
    CHECK_EQ_INT(sg_launch_resume_command(5, a4, w4, buf, sizeof buf), 1);
    CHECK_BUF(buf, "segtrain --nproc-per-node 2 --config c.yaml --resume auto");
    /* workers that do not train: nothing to resume */
    char *a5[] = {"segtrain", "--nproc-per-node", "2", "eval", "--checkpoint", "c.st"};
    char *w5[] = {"/x/segtrain", "eval", "--checkpoint", "c.st", NULL};
    CHECK_EQ_INT(sg_launch_resume_command(6, a5, w5, buf, sizeof buf), 0);
    CHECK_BUF(buf, "");
    /* a command that does not fit: none, rather than a cut one */
    CHECK_EQ_INT(sg_launch_resume_command(8, a1, w1, buf, 40), 0);
    CHECK_BUF(buf, "");
}

int main(int argc, char **argv) {
    if (getenv("RANK")) {
        const char *m = argc > 1 ? argv[1] : "";
        if (!strcmp(m, "env")) return w_env(argc, argv);
        if (!strcmp(m, "fail")) return w_fail(3, 0);
        if (!strcmp(m, "kill9")) return w_fail(0, SIGKILL);
        if (!strcmp(m, "sleep")) {
            write_pid();
            sleep(60);
            return 0;
        }
        if (!strcmp(m, "stubborn")) return w_stubborn();
        if (!strcmp(m, "sigstop")) return w_sigstop();
        if (!strcmp(m, "killmid")) return w_kill_midrun();
        if (!strcmp(m, "loopreduce")) return w_loop_reduce();
        if (!strcmp(m, "token")) return w_token();
        if (!strcmp(m, "ckfail")) return w_ckfail();
        if (!strcmp(m, "hold")) return w_hold();
        return 2;
    }
    TEST_RUN(test_resume_command);
    TEST_RUN(test_env_contract);
    TEST_RUN(test_multinode_ranks);
    TEST_RUN(test_usage_errors);
    TEST_RUN(test_worker_exit_code);
    TEST_RUN(test_worker_kill9);
    TEST_RUN(test_stubborn_worker_sigkilled);
    TEST_RUN(test_sigstop_rank_named_by_others);
    TEST_RUN(test_kill9_midrun);
    TEST_RUN(test_sigterm_forwarded);
    TEST_RUN(test_job_token);
    TEST_RUN(test_restart_delay);
    TEST_RUN(test_no_progress_gives_up);
    TEST_RUN(test_second_job_on_same_port);
    TEST_RUN(test_store_host_killed_named);
    rmdir(g_piddir);
    return TEST_EXIT();
}
