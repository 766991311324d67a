/* tests/train/test_layout.c - the CPU backend's two activation layouts
 * (cpu.layout nchw | nhwc) train the same network: one case per argument.
 *   fp32    - the tiny DeepLabV3 (ResNet-18, aux head, ASPP dropout on: its
 *             masks key on the NCHW index in both layouts) trained 4 steps
 *             in each layout: every step's loss within 1e-5 relative and
 *             the final weights and momenta within 1e-4 (the convolutions
 *             sum in another order; everything else is the same arithmetic),
 *             and the in-training val mIoU within 1e-3.
 *   bf16    - the same under train.precision bf16 (native where the CPU has
 *             it, else emulated): losses within 1e-3, weights within 1e-2.
 *   plus    - mmseg's DeepLabV3+ on ResNetV1c (depthwise-separable convs,
 *             Dropout2d, concat of the stride-4 feature), fp32, as fp32.
 *   mnv3    - LR-ASPP on MobileNetV3-Large (squeeze-excitation gates,
 *             hardswish), fp32, as fp32.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tests/ckpt_diff.h"
#include "testutil.h"
#include "train_fixture.h"

#define ITERS 4

/* Trains `run` in `layout` with the extra settings; its losses per step go
 * to loss[ITERS]. Returns the in-training val mIoU (NaN on failure). */
static double train(const char *run, const char *layout, const char *const *extra, int n_extra,
                    double *loss) {
    const char *sets[16];
    char lay[32];
    snprintf(lay, sizeof lay, "cpu.layout=%s", layout);
    int n = 0;
    sets[n++] = lay;
    sets[n++] = "train.eval_every=4";
    sets[n++] = "train.checkpoint_every=4";
    for (int i = 0; i < n_extra && n < 16; i++) sets[n++] = extra[i];
    sg_config c;
    if (fx_config(&c, run, sets, n) != 0) return NAN;
    sg_train_debug d = {0};
    d.step_loss = loss;
    d.step_loss_cap = ITERS;
    if (sg_train_run(&c, NULL, &d, NULL) != SG_OK) return NAN;
    return d.iters_done == ITERS ? d.last_val_miou : NAN;
}

static void compare(const char *name, const char *const *extra, int n_extra, double loss_tol,
                    double weight_tol) {
    char ra[64], rb[64];
    snprintf(ra, sizeof ra, "%s_nchw", name);
    snprintf(rb, sizeof rb, "%s_nhwc", name);
    double la[ITERS] = {0}, lb[ITERS] = {0};
    double ma = train(ra, "nchw", extra, n_extra, la);
    double mb = train(rb, "nhwc", extra, n_extra, lb);
    CHECK_MSG(!isnan(ma) && !isnan(mb), "%s: a run failed (mIoU %g / %g)", name, ma, mb);
    for (int i = 0; i < ITERS; i++) {
        double r = fabs(la[i] - lb[i]) / fmax(fabs(la[i]), 1e-6);
        fprintf(stderr, "%s step %d: loss nchw %.9g nhwc %.9g (rel %.2g)\n", name, i + 1, la[i],
                lb[i], r);
        CHECK_MSG(la[i] > 0 && r <= loss_tol, "%s step %d: losses %.9g vs %.9g (rel %.3g > %g)",
                  name, i + 1, la[i], lb[i], r, loss_tol);
    }
    char file[64];
    snprintf(file, sizeof file, "iter_%08d.safetensors", ITERS);
    double e = th_ckpt_diff(fx_root, ra, rb, file);
    CHECK_MSG(e >= 0 && e <= weight_tol, "%s: final weights max rel diff %g (tol %g)", name, e,
              weight_tol);
    fprintf(stderr, "%s: val mIoU nchw %.6f nhwc %.6f\n", name, ma, mb);
    CHECK_MSG(fabs(ma - mb) <= 1e-3, "%s: val mIoU %.6f vs %.6f", name, ma, mb);
}

static void test_fp32(void) { compare("fp32", NULL, 0, 1e-5, 1e-4); }

static void test_bf16(void) {
    const char *x[] = {"train.precision=bf16"};
    compare("bf16", x, 1, 1e-3, 1e-2);
}

static void test_plus(void) {
    const char *x[] = {"model.arch=deeplabv3plus", "model.backbone=resnet50v1c",
                       "model.names=mmseg"};
    compare("plus", x, 3, 1e-5, 1e-4);
}

static void test_mnv3(void) {
    const char *x[] = {"model.arch=lraspp", "model.backbone=mobilenet_v3_large",
                       "model.aux_head=false", "model.output_stride=16"};
    compare("mnv3", x, 4, 1e-5, 1e-4);
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s fp32|bf16|plus|mnv3\n", argv[0]);
        return 2;
    }
    unsetenv("SG_TEST_LAYOUT"); /* each run names its layout */
    if (fx_setup("layout", 8, 4, 64, 64, 19) != 0) return 1;
    if (!strcmp(argv[1], "fp32")) TEST_RUN(test_fp32);
    else if (!strcmp(argv[1], "bf16")) TEST_RUN(test_bf16);
    else if (!strcmp(argv[1], "plus")) TEST_RUN(test_plus);
    else if (!strcmp(argv[1], "mnv3")) TEST_RUN(test_mnv3);
    else {
        fprintf(stderr, "unknown case %s\n", argv[1]);
        return 2;
    }
    fx_cleanup(tu_failed_cases);
    return TEST_EXIT();
}
