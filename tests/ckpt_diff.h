/* tests/ckpt_diff.h - how far apart two runs' checkpoints are, for the
 * tests that train the same thing two ways (ranks x batch x accumulation)
 * with the binary and compare the results.
 *
 * th_ckpt_diff: the largest relative difference (tu_max_rel_err, floor 1e-3)
 * over every F32 tensor of DIR/RUN_A/checkpoints/FILE against the tensor of
 * the same name in DIR/RUN_B/checkpoints/FILE, printed to stderr with the
 * number of tensors compared; -1 when a file or a tensor is missing, a count
 * differs, or nothing was compared. Header-only and static like testutil.h
 * (which it needs, included first). */
#ifndef SG_TESTS_CKPT_DIFF_H
#define SG_TESTS_CKPT_DIFF_H

#include <stdio.h>
#include <stdlib.h>

#include "io/safetensors.h"
#include "testutil.h"

static inline double th_ckpt_diff(const char *dir, const char *run_a, const char *run_b,
                                  const char *file) {
    char pa[1024], pb[1024];
    snprintf(pa, sizeof pa, "%s/%s/checkpoints/%s", dir, run_a, file);
    snprintf(pb, sizeof pb, "%s/%s/checkpoints/%s", dir, run_b, file);
    sg_st_file *a = sg_st_open(pa), *b = sg_st_open(pb);
    double worst = a && b ? 0 : -1;
    int compared = 0;
    for (int i = 0; a && b && i < sg_st_count(a); i++) {
        const sg_st_tensor *ta = sg_st_get(a, i);
        if (ta->dtype != SG_ST_F32) continue;
        const sg_st_tensor *tb = sg_st_find(b, ta->name);
        if (!tb || tb->count != ta->count) {
            worst = -1;
            break;
        }
        float *xa = malloc(ta->count * sizeof *xa), *xb = malloc(ta->count * sizeof *xb);
        sg_st_read_f32(a, ta, xa, ta->count);
        sg_st_read_f32(b, tb, xb, tb->count);
        double e = tu_max_rel_err(xa, xb, ta->count, 1e-3);
        if (e > worst) worst = e;
        compared++;
        free(xa);
        free(xb);
    }
    fprintf(stderr, "  %s vs %s (%s): %d tensors, max rel diff %.3g\n", run_a, run_b, file,
            compared, worst);
    if (a) sg_st_close(a);
    if (b) sg_st_close(b);
    return compared ? worst : -1;
}

#endif
