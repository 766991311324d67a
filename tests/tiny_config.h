/* tests/tiny_config.h - the tiny network's training configuration, the one
 * place its values are written: DeepLabV3 on a ResNet-18 of base width 8
 * (output stride 8, aux head) over a synthetic Cityscapes-layout dataset,
 * 48 px crops, 4 steps of batch 2, no periodic checkpoint or evaluation.
 * The in-process training tests load it (tests/train/train_fixture.h:
 * fx_config); the tests that run the binary write it to a file with their
 * overrides (fx_write_config). Needs core only, so that every test
 * executable can use it. */
#ifndef SG_TESTS_TINY_CONFIG_H
#define SG_TESTS_TINY_CONFIG_H

#include <stdio.h>
#include <stdlib.h>

#include "core/config.h"

/* Loads the tiny configuration over the schema defaults into cfg: the
 * dataset in dir/data, run_dir dir/run. SG_OK, or SG_ERR_CONFIG (logged). */
static inline sg_status fx_tiny_config(sg_config *cfg, const char *dir, const char *run) {
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
             dir, run, dir);
    sg_config_defaults(cfg);
    return sg_config_load_string(cfg, yaml, "fixture.yaml");
}

/* Writes to path, for the tests that run the binary (`--config path`), the
 * tiny configuration on the dataset in dir/data with each
 * "section.key=value" of sets[n_sets] applied in order, as --set would, and
 * validated by core's rules. The file holds every key resolved
 * (sg_config_write: it reads back to the same configuration), run_dir
 * dir/run among them: the tests pass their own with --set. Returns 0, or -1
 * after saying what failed. */
static inline int fx_write_config(const char *path, const char *dir, const char *const *sets,
                                  int n_sets) {
    sg_config *cfg = malloc(sizeof *cfg); /* large for a stack */
    if (!cfg) {
        fprintf(stderr, "fx_write_config: out of memory for the configuration\n");
        return -1;
    }
    int ok = fx_tiny_config(cfg, dir, "run") == SG_OK;
    for (int i = 0; ok && i < n_sets; i++) ok = sg_config_set(cfg, sets[i]) == SG_OK;
    ok = ok && sg_config_validate(cfg) == SG_OK;
    if (!ok) {
        fprintf(stderr, "fx_write_config: the tiny configuration with the test's overrides is "
                        "not valid: fix the override that the error above names\n");
        free(cfg);
        return -1;
    }
    FILE *f = fopen(path, "w");
    int written = f != NULL;
    if (f) {
        sg_config_write(cfg, f);
        written = !ferror(f) & (fclose(f) == 0);
    }
    free(cfg);
    if (!written) {
        perror(path);
        return -1;
    }
    return 0;
}

#endif
