/* tests/train/lr_dump.c - prints segtrain's learning rate for every
 * optimizer step of a run: `lr_dump TOTAL_STEPS [train.key=value ...]`, one
 * %.17g value per line for steps 0..TOTAL_STEPS-1. The configuration goes
 * through the schema and validation (core/config.h) and the schedule through
 * train/lr_schedule.h, as in training. Used by test_lr_torch.py to compare
 * with torch.optim.lr_scheduler. Exit 2 on a config error. */
#include <stdio.h>
#include <stdlib.h>

#include "core/config.h"
#include "train/lr_schedule.h"

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: lr_dump TOTAL_STEPS [train.key=value ...]\n");
        return 2;
    }
    long total = strtol(argv[1], NULL, 10);
    static sg_config cfg;
    sg_config_defaults(&cfg);
    for (int i = 2; i < argc; i++)
        if (sg_config_set(&cfg, argv[i]) != SG_OK) return 2;
    sg_lr_schedule s;
    if (sg_lr_schedule_init(&s, &cfg.train, total) != SG_OK) return 2;
    for (long t = 0; t < total; t++) printf("%.17g\n", sg_lr_at(&s, t));
    return 0;
}
