/* tests/train/train_fixture.h - shared by the end-to-end training tests: a
 * temporary directory, a synthetic dataset, and a tiny-network config. */
#ifndef SG_TESTS_TRAIN_FIXTURE_H
#define SG_TESTS_TRAIN_FIXTURE_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/cli.h"
#include "core/config.h"
#include "core/log.h"
#include "data/synth.h"

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

/* The tiny network config on the fixture's data; `extra` is YAML appended
 * (sections may repeat keys only through --set style overrides below). */
static int fx_config(sg_config *cfg, const char *run, const char *const *sets, int n_sets) {
    char yaml[4096];
    snprintf(yaml, sizeof yaml,
             "run_dir: %s/%s\n"
             "seed: 7\n"
             "device: cpu\n"
             "threads: 2\n"
             "model:\n"
             "  backbone: resnet18\n"
             "  base_width: 8\n"
             "  output_stride: 8\n"
             "  aspp_rates: [2, 4, 6]\n"
             "  num_classes: 19\n"
             "  aux_head: true\n"
             "data:\n"
             "  format: cityscapes\n"
             "  root: %s/data\n"
             "  train_split: train\n"
             "  val_split: val\n"
             "  label_map: cityscapes\n"
             "  crop_size: [48, 48]\n"
             "  workers: 1\n"
             "  prefetch: 2\n"
             "train:\n"
             "  iters: 4\n"
             "  batch_size: 2\n"
             "  lr: 0.01\n"
             "  log_every: 1\n"
             "  checkpoint_every: 0\n"
             "  keep_checkpoints: 0\n"
             "  eval_every: 0\n"
             "eval:\n"
             "  batch_size: 2\n",
             fx_root, run, fx_root);
    sg_config_defaults(cfg);
    if (sg_config_load_string(cfg, yaml, "fixture.yaml") != 0) return -1;
    for (int i = 0; i < n_sets; i++)
        if (sg_config_set(cfg, sets[i]) != 0) return -1;
    if (sg_config_validate(cfg) != 0) return -1;
    return sg_cli_prepare_run_dir(cfg, 0);
}

#endif
