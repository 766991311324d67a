/* tests/train/train_fixture.h - shared by the end-to-end training tests: a
 * temporary directory, a synthetic dataset, the tiny network's config
 * (tests/tiny_config.h) on it, and a run of it on several forked ranks. */
#ifndef SG_TESTS_TRAIN_FIXTURE_H
#define SG_TESTS_TRAIN_FIXTURE_H

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/cli.h"
#include "core/config.h"
#include "core/log.h"
#include "data/synth.h"
#include "tests/helpers.h"
#include "tests/tiny_config.h"
#include "train/trainer.h"

static char fx_root[512];

/* Creates the temp dir and a synthetic dataset under it (data/). */
static int fx_setup(const char *name, int n_train, int n_val, int h, int w, int classes) {
    const char *t = getenv("TMPDIR");
    snprintf(fx_root, sizeof fx_root, "%s/sg_%s_XXXXXX", t ? t : "/tmp", name);
    if (!mkdtemp(fx_root)) return -1;
    char data[600];
    snprintf(data, sizeof data, "%s/data", fx_root);
    sg_synth_opts so;
    sg_synth_defaults(&so);
    so.out = data;
    so.n_train = n_train;
    so.n_val = n_val;
    so.h = h;
    so.w = w;
    so.classes = classes;
    so.seed = 3;
    return sg_synth_write(&so);
}

static void fx_cleanup(int failed) {
    char cmd[700];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", fx_root);
    if (!failed && system(cmd) != 0) fprintf(stderr, "could not remove %s\n", fx_root);
    if (failed) fprintf(stderr, "kept %s for inspection\n", fx_root);
}

/* The tiny network's config (tests/tiny_config.h) on the fixture's data,
 * run_dir <fixture>/<run>, then each "section.key=value" of sets in order;
 * validated, and the run directory prepared. 0, or nonzero (logged). */
static int fx_config(sg_config *cfg, const char *run, const char *const *sets, int n_sets) {
    if (fx_tiny_config(cfg, fx_root, run) != SG_OK) return -1;
    /* $SG_TEST_LAYOUT: the same tests with the CPU backend's activations
     * in that layout (the *_nhwc tests) */
    const char *lay = getenv("SG_TEST_LAYOUT");
    if (lay && *lay) {
        char set[64];
        snprintf(set, sizeof set, "cpu.layout=%s", lay);
        if (sg_config_set(cfg, set) != 0) return -1;
    }
    for (int i = 0; i < n_sets; i++)
        if (sg_config_set(cfg, sets[i]) != 0) return -1;
    if (sg_config_validate(cfg) != 0) return -1;
    return sg_cli_prepare_run_dir(cfg, 0);
}

/* Trains c on `world` forked ranks, each with the environment torchrun
 * gives (RANK, WORLD_SIZE, MASTER_ADDR/PORT on a free localhost port), so
 * they rendezvous like a launched job. stop_at_iter > 0 stops every rank
 * there as SIGTERM would (sg_train_debug.stop_at_iter); 0 runs to the end.
 * seen (n_seen entries; NULL for none) gets, summed over the ranks, how
 * often each train sample was trained. Returns 0 when every rank returned
 * SG_OK (and was stopped, when asked); else -1 after naming the rank. */
static inline int fx_train_ranks(const sg_config *c, int world, int stop_at_iter, int64_t *seen,
                                 int n_seen) {
    char ps[16];
    snprintf(ps, sizeof ps, "%d", th_free_port());
    pid_t pids[8];
    if (world < 1 || world > 8 || n_seen > 4096) return -1;
    for (int r = 0; r < world; r++) {
        pids[r] = fork();
        if (pids[r] < 0) {
            fprintf(stderr, "  fx_train_ranks: fork of rank %d failed\n", r);
            for (int q = 0; q < r; q++) th_kill_child(pids[q]);
            return -1;
        }
        if (pids[r] == 0) {
            th_rank_env(r, world, ps, 1);
            sg_log_set_rank(r, world);
            int64_t mine[4096] = {0};
            sg_train_debug d = {0};
            d.seen_train = seen ? mine : NULL;
            d.stop_at_iter = stop_at_iter;
            int sig = 0;
            int rc = sg_train_run(c, NULL, &d, &sig);
            int ok = 1;
            if (seen) {
                char path[700];
                snprintf(path, sizeof path, "%s/seen_rank%d", fx_root, r);
                FILE *f = fopen(path, "wb");
                ok = f && fwrite(mine, sizeof *mine, (size_t)n_seen, f) == (size_t)n_seen;
                if (f) fclose(f);
            }
            _exit(ok && rc == SG_OK && sig == (stop_at_iter > 0 ? SIGTERM : 0) ? 0 : 1);
        }
    }
    int failed = 0;
    for (int r = 0; r < world; r++) {
        int st;
        waitpid(pids[r], &st, 0);
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
            fprintf(stderr, "  fx_train_ranks: rank %d failed (wait status %d)\n", r, st);
            failed = 1;
        }
    }
    if (failed) return -1;
    for (int i = 0; seen && i < n_seen; i++) seen[i] = 0;
    for (int r = 0; seen && r < world; r++) {
        char path[700];
        int64_t mine[4096];
        snprintf(path, sizeof path, "%s/seen_rank%d", fx_root, r);
        FILE *f = fopen(path, "rb");
        int ok = f && fread(mine, sizeof *mine, (size_t)n_seen, f) == (size_t)n_seen;
        if (f) fclose(f);
        if (!ok) {
            fprintf(stderr, "  fx_train_ranks: cannot read %s\n", path);
            return -1;
        }
        for (int i = 0; i < n_seen; i++) seen[i] += mine[i];
    }
    return 0;
}

#endif
