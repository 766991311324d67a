/* tests/train/test_emu_convert.c - the traffic model's conversions are the
 * CUDA backend's own (emulated build: -Demulated_cuda=on, device cuda:0 runs
 * the backend's kernels on the CPU).
 *
 * The cuda-bf16-nhwc and cuda-bf16-convert rows of `segtrain bench
 * --traffic` (train/bench_traffic.c) restate which conv operands and
 * results the CUDA backend converts around cuDNN (rounds, widens,
 * transposes, and the KRSC weight gradient back to float32): class
 * SG_TRC_CONVERT. The backend counts the bytes of the passes it really
 * launches (kernels/cuda/cuda_conv.cu count_convert; sg_backend_info's
 * convert_bytes). Here one training step's micro-batches (forward, both
 * heads' cross-entropy, backward; the optimizer converts nothing) run on
 * cuda:0 under train.precision bf16, with the plan's bf16 storage, and the
 * counter's increase must equal the model's convert class for the same
 * model and input exactly:
 *   nhwc  - layout NHWC against cuda-bf16-nhwc (only float32-stored
 *           operands rounded, float32 results widened, bf16 ones read and
 *           written by cuDNN itself);
 *   nchw  - layout NCHW against cuda-bf16-convert (every operand and result
 *           transposed, float32 ones rounded / widened on the way).
 * Each on tiny ResNet-18 and ResNet-50 DeepLabV3 networks (aux head: a
 * tensor with several readers, so accumulated data gradients), with one
 * micro-batch and with two (weight gradients added to), and with the stem
 * and layer1 frozen (no weight gradient there, data gradients only where an
 * earlier parameter trains). A rule changed on either side - a conversion
 * the backend adds or drops, or one the model counts that the code does not
 * run - fails here with both numbers.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "kernels/backend.h"
#include "model/model.h"
#include "tests/testutil.h"
#include "train/bench_traffic.h"

enum { NB = 2, HH = 24, WW = 32 };

/* A tiny network: one block per layer, base width 4, OS 8, aux head, two
 * ASPP rates, dropout off (tests/model/model_testutil.h's mt_tiny_opts). */
static void tiny_opts(sg_model_opts *o, sg_backbone b) {
    sg_model_opts_default(o, b);
    o->base_width = 4;
    o->num_classes = 3;
    o->blocks[0] = o->blocks[1] = o->blocks[2] = o->blocks[3] = 1;
    o->aspp_rates[0] = 2;
    o->aspp_rates[1] = 3;
    o->n_aspp_rates = 2;
    o->aspp_dropout = 0;
    o->aux_dropout = 0;
}

static double convert_bytes(sg_backend *be) {
    sg_backend_info bi;
    sg_backend_get_info(be, &bi);
    return bi.convert_bytes;
}

/* Micro-batches accum of one step of the tiny network on be (bf16, layout
 * of be): the backend's convert_bytes over them against design's convert
 * class. freeze: a parameter-name prefix to freeze first, or NULL. */
static int step_matches(sg_backend *be, int design, sg_backbone bb, int accum, const char *freeze) {
    sg_model_opts mo;
    tiny_opts(&mo, bb);
    sg_model *m = sg_model_create(be, &mo);
    if (!m) return 0;
    sg_model_init(m, 3);
    if (freeze && sg_model_freeze(m, freeze, 0) <= 0) return 0;
    if (sg_model_plan(m, NB, HH, WW) != SG_OK) return 0;
    size_t nin = (size_t)NB * 3 * HH * WW, px = (size_t)NB * HH * WW;
    float *x = malloc(nin * sizeof(float));
    uint8_t *lab = malloc(px);
    uint8_t *dlab = be->ops->alloc(be, px);
    for (size_t k = 0; k < nin; k++) x[k] = (float)sin(0.37 * (double)k);
    for (size_t k = 0; k < px; k++) lab[k] = (uint8_t)(k % (size_t)mo.num_classes);
    be->ops->upload(be, sg_model_input(m), x, nin * sizeof(float));
    be->ops->upload(be, dlab, lab, px);
    sg_traffic t;
    if (sg_bench_traffic(m, design, NB, accum, HH, WW, &t, NULL) != SG_OK) return 0;
    double before = convert_bytes(be);
    for (int k = 0; k < accum; k++) {
        sg_model_forward(m, 1, 7);
        double loss;
        int64_t valid;
        be->ops->ce_fwd_bwd(be, sg_model_out(m), dlab, NB, mo.num_classes, HH * WW, 255, 1e-3f,
                            sg_model_dout(m), &loss, &valid);
        if (sg_model_aux(m))
            be->ops->ce_fwd_bwd(be, sg_model_aux(m), dlab, NB, mo.num_classes, HH * WW, 255, 1e-3f,
                                sg_model_daux(m), &loss, &valid);
        sg_model_backward(m, k > 0);
    }
    be->ops->sync(be);
    double ran = convert_bytes(be) - before, modelled = t.cat[SG_TRC_CONVERT];
    int ok = ran == modelled && ran > 0;
    if (!ok)
        fprintf(stderr,
                "  %s, %s, %d micro-batch(es)%s%s: the CUDA backend's conversions moved %.0f "
                "bytes, the traffic model's convert class %.0f (difference %.0f); a conversion "
                "rule differs between kernels/cuda/cuda_conv.cu and train/bench_traffic.c - "
                "make them agree\n",
                sg_traffic_design_name(design), bb == SG_RESNET50 ? "resnet50" : "resnet18", accum,
                freeze ? ", frozen " : "", freeze ? freeze : "", ran, modelled, ran - modelled);
    be->ops->free(be, dlab);
    free(x);
    free(lab);
    sg_model_destroy(m);
    return ok;
}

static void check_layout(int layout, int design) {
    sg_backend_opts bo = {
        .threads = 1, .cudnn_deterministic = 1, .precision = SG_PRECISION_BF16, .layout = layout};
    sg_backend *be = sg_backend_create("cuda:0", &bo);
    CHECK(be != NULL);
    const sg_backbone bbs[] = {SG_RESNET18, SG_RESNET50};
    for (int i = 0; i < 2; i++) {
        CHECK(step_matches(be, design, bbs[i], 1, NULL));
        CHECK(step_matches(be, design, bbs[i], 2, NULL));
        CHECK(step_matches(be, design, bbs[i], 1, "encoder.layer1."));
        CHECK(step_matches(be, design, bbs[i], 1, "encoder.conv1."));
    }
    sg_backend_destroy(be);
}

static void test_nhwc(void) { check_layout(SG_LAYOUT_NHWC, SG_TR_CUDA_BF16_NHWC); }
static void test_nchw(void) { check_layout(SG_LAYOUT_NCHW, SG_TR_CUDA_BF16_CONVERT); }

int main(int argc, char **argv) {
    sg_log_set_level(SG_LOG_WARN);
    if (sg_backend_cuda_device_count() == 0) {
        fprintf(stderr, "no CUDA device (emulated or real): skipped\n");
        return 77;
    }
    const char *only = argc > 1 ? argv[1] : "";
    if (!*only || !strcmp(only, "nhwc")) TEST_RUN(test_nhwc);
    if (!*only || !strcmp(only, "nchw")) TEST_RUN(test_nchw);
    return TEST_EXIT();
}
