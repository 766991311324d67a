/* tests/dist/test_kill_syncbn.c - rank 0 killed (SIGKILL) in the middle of
 * a SyncBN step, over and over, through the segtrain binary (argv[1]) and
 * its launcher: the surviving rank must end cleanly, whatever the point of
 * the step. scripts/test-asan runs the dist suite, so under ASan a read or
 * write out of bounds on the failure path is an error in the log too.
 *
 * The kill is planted, not timed: SG_TEST_MESH_KILL=0:0:N (dist/mesh.h)
 * makes rank 0 SIGKILL itself as it starts its Nth small collective, so each
 * run hits an exact point (a SyncBN all-gather of the forward, an all-reduce
 * of the backward, the loss sums) with no dependence on machine speed. The
 * launcher then SIGTERMs rank 1 while that rank finishes its step: the
 * signal that, taken on the stack oneDNN's GEMM had pointed into the heap,
 * corrupted it (core/sigmask.h; before the fix about 1 run in 30 under ASan
 * at base width 32; tests/kernels/test_signal_stack.c is the deterministic
 * check of that mechanism). The loop sweeps N over a whole step. Each run
 * must:
 *  - end (bounded by the launcher's --kill-grace-s) with a non-zero status,
 *    the launcher naming rank 0 as killed by signal 9;
 *  - show rank 1 reporting the failed collective;
 *  - show no sanitizer report, glibc heap-corruption abort or crash.
 * And a malformed SG_TEST_MESH_KILL is refused, never ignored. The seam is
 * in builds with -Dtest_seams=true only (core/test_seams.h): skipped, 77,
 * in the others. */
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/log.h"
#include "tests/helpers.h"
#include "tests/tiny_config.h"
#include "testutil.h"

static const char *g_bin;
static char g_dir[256];

static int setup(void) {
    snprintf(g_dir, sizeof g_dir, "/tmp/sg_kill_syncbn_XXXXXX");
    if (!mkdtemp(g_dir)) return -1;
    if (th_sh("%s synth --out %s/data --train 8 --val 2 --size 40x40 --seed 5 >/dev/null 2>&1",
              g_bin, g_dir))
        return -1;
    char path[512];
    snprintf(path, sizeof path, "%s/base.yaml", g_dir);
    /* the tiny network (tests/tiny_config.h) with what this test changes */
    const char *const sets[] = {"threads=1",
                                "model.base_width=16",
                                "model.sync_bn=true",
                                "data.crop_size=[32, 32]",
                                "train.iters=6",
                                "train.lr=0.02",
                                "train.keep_checkpoints=3",
                                "eval.batch_size=1",
                                "dist.timeout_s=10"};
    return fx_write_config(path, g_dir, sets, (int)(sizeof sets / sizeof sets[0]));
}

/* What in a log means the survivor did not end cleanly. */
static const char *crash_marker(const char *log) {
    static const char *bad[] = {
        "AddressSanitizer",   "LeakSanitizer",       "runtime error:",     "corrupted size",
        "free(): ",           "double free",         "malloc(): ",         "Segmentation fault",
        "killed by signal 6", "killed by signal 11", "killed by signal 7", "stack smashing"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        if (strstr(log, bad[i])) return bad[i];
    return NULL;
}

/* Rank 0 dies at its Nth small collective; counts in *bad a run whose
 * survivor did not end cleanly (described on stderr with its log). */
static void kill_at(int nth, int *bad) {
    char run[64];
    snprintf(run, sizeof run, "k%d", nth);
    double t0 = th_now();
    int rc = th_sh("SG_TEST_MESH_KILL=0:0:%d %s --nproc-per-node 2 --kill-grace-s 20 train "
                   "--config %s/base.yaml --set run_dir=%s/%s > %s/%s.log 2>&1",
                   nth, g_bin, g_dir, g_dir, run, g_dir, run);
    double dt = th_now() - t0;
    const char *log = th_read_log(g_dir, run);
    const char *m = crash_marker(log);
    int ok = rc != 0 && !m && strstr(log, "rank 0") && strstr(log, "signal 9") &&
             strstr(log, "[rank 1] error: rank 1:");
    fprintf(stderr, "  kill at small collective %d: exit %d after %.1f s%s%s\n", nth, rc, dt,
            m ? ", found: " : "", m ? m : "");
    if (!ok) {
        fprintf(stderr, "  --- %s/%s.log ---\n%s\n  ---\n", g_dir, run, log);
        (*bad)++;
    }
}

/* The sweep: every few collectives through the forward and the backward of
 * the second step (the first step's collectives are counted too). */
static void test_kill_rank0_across_a_step(void) {
    int bad = 0;
    static const int points[] = {60, 64, 68, 75, 82, 90, 98, 106, 114, 122};
    for (size_t i = 0; i < sizeof points / sizeof points[0]; i++) kill_at(points[i], &bad);
    CHECK_EQ_INT(bad, 0);
}

/* A malformed seam value is refused (rank names it), never ignored. */
static void test_bad_seam_value_refused(void) {
    int rc = th_sh("SG_TEST_MESH_KILL=0:x %s --nproc-per-node 2 --kill-grace-s 5 train --config "
                   "%s/base.yaml --set run_dir=%s/badseam > %s/badseam.log 2>&1",
                   g_bin, g_dir, g_dir, g_dir);
    CHECK(rc != 0);
    CHECK_STR_CONTAINS(th_read_log(g_dir, "badseam"), "SG_TEST_MESH_KILL='0:x' is not");
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: test_kill_syncbn PATH-TO-segtrain\n");
        return 2;
    }
    if (!tu_have_seams("test_kill_syncbn (SG_TEST_MESH_KILL)")) return TEST_SKIP;
    g_bin = argv[1];
    sg_log_set_level(SG_LOG_WARN);
    if (setup()) {
        fprintf(stderr, "fixture setup failed in %s\n", g_dir);
        return 1;
    }
    TEST_RUN(test_bad_seam_value_refused);
    TEST_RUN(test_kill_rank0_across_a_step);
    int rc = TEST_EXIT();
    if (!rc) th_sh("rm -rf %s", g_dir);
    else fprintf(stderr, "kept %s for inspection\n", g_dir);
    return rc;
}
