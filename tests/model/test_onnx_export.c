/* tests/model/test_onnx_export.c - what the ONNX exporter (model/model_onnx.h)
 * refuses, on a tiny network (the graphs it writes are checked end to end by
 * ONNX Runtime in tests/train/test_export_onnx.sh):
 * - a layer type it does not know (planted in the layer list): SG_ERR_CONFIG
 *   naming the layer, never a graph without it;
 * - opsets 10 (no align_corners=False resize) and 22, and a model file whose
 *   opset differs from the request;
 * - a batch norm with a non-finite folded scale (running_var = -1 - eps):
 *   refused when folding, naming the layer; kept as BatchNormalization it
 *   is exported as stored;
 * - a half-given fixed size.
 * And that a valid request succeeds on both backbone kinds.
 */
#include "model/model_internal.h"
#include "model/model_onnx.h"
#include "tests/model/model_testutil.h"
#include "tests/testutil.h"

static sg_onnx_export_opts opts(int opset) {
    sg_onnx_export_opts o;
    memset(&o, 0, sizeof o);
    o.opset = opset;
    o.fold_bn = 1;
    return o;
}

/* sg_model_to_onnx's status on m with o (a fresh sg_onnx of file_opset);
 * its log in *log (static until the next call). */
static sg_status export_status(sg_model *m, const sg_onnx_export_opts *o, int file_opset,
                               const char **log) {
    sg_onnx *g = sg_onnx_create(file_opset, "t", "0", "g");
    th_cap_begin();
    sg_status st = g ? sg_model_to_onnx(m, o, g) : SG_ERR_RUNTIME;
    *log = th_cap_end();
    sg_onnx_destroy(g);
    return st;
}

static void test_valid(void) {
    for (int b = SG_RESNET18; b <= SG_RESNET50; b += 2) {
        sg_model_opts mo;
        mt_tiny_opts(&mo, (sg_backbone)b);
        sg_model *m = sg_model_create(mt_backend(), &mo);
        CHECK(m != NULL);
        const char *log;
        sg_onnx_export_opts o = opts(17);
        CHECK_EQ_INT(export_status(m, &o, 17, &log), SG_OK);
        o.fold_bn = 0;
        o.argmax = 1;
        o.normalize_u8 = 1;
        for (int c = 0; c < 3; c++) o.std[c] = 0.25f;
        o.height = 33;
        o.width = 47;
        o.batch = 2;
        CHECK_EQ_INT(export_status(m, &o, 17, &log), SG_OK);
        sg_model_destroy(m);
    }
}

static void test_unknown_layer(void) {
    sg_model_opts mo;
    mt_tiny_opts(&mo, SG_RESNET18);
    sg_model *m = sg_model_create(mt_backend(), &mo);
    CHECK(m != NULL);
    m->l[3].type = 99; /* a layer kind the exporter has never seen */
    const char *log;
    sg_onnx_export_opts o = opts(17);
    sg_status st = export_status(m, &o, 17, &log);
    sg_model_destroy(m);
    CHECK_EQ_INT(st, SG_ERR_CONFIG);
    CHECK_STR_CONTAINS(log, "layer 3 has type 99");
    CHECK_STR_CONTAINS(log, "does not know");
}

static void test_opsets_and_sizes(void) {
    sg_model_opts mo;
    mt_tiny_opts(&mo, SG_RESNET18);
    sg_model *m = sg_model_create(mt_backend(), &mo);
    CHECK(m != NULL);
    const char *log;
    sg_onnx_export_opts o = opts(10);
    CHECK_EQ_INT(export_status(m, &o, 10, &log), SG_ERR_CONFIG);
    CHECK_STR_CONTAINS(log, "align_corners=False");
    o = opts(22);
    CHECK_EQ_INT(export_status(m, &o, 21, &log), SG_ERR_CONFIG);
    CHECK_STR_CONTAINS(log, "opset 22 is not supported");
    o = opts(13);
    CHECK_EQ_INT(export_status(m, &o, 17, &log), SG_ERR_CONFIG);
    CHECK_STR_CONTAINS(log, "internal error");
    o = opts(17);
    o.height = 32; /* width not given */
    CHECK_EQ_INT(export_status(m, &o, 17, &log), SG_ERR_CONFIG);
    CHECK_STR_CONTAINS(log, "give both height and width");
    sg_model_destroy(m);
}

static void test_nonfinite_bn(void) {
    sg_model_opts mo;
    mt_tiny_opts(&mo, SG_RESNET50);
    sg_model *m = sg_model_create(mt_backend(), &mo);
    CHECK(m != NULL);
    sg_param *var = sg_model_find(m, "encoder.layer1.0.bn2.running_var");
    CHECK(var != NULL);
    float *h = mt_download(mt_backend(), var->data, var->count);
    h[1] = -1.0f - mo.bn_eps; /* sqrt of a negative number */
    mt_backend()->ops->upload(mt_backend(), var->data, h, var->count * sizeof(float));
    free(h);
    const char *log;
    sg_onnx_export_opts o = opts(17);
    sg_status st = export_status(m, &o, 17, &log);
    int named = strstr(log, "encoder.layer1.0.bn2.weight channel 1 has a non-finite") != NULL;
    o.fold_bn = 0;
    sg_status kept = export_status(m, &o, 17, &log);
    sg_model_destroy(m);
    CHECK_EQ_INT(st, SG_ERR_CONFIG);
    CHECK(named);
    CHECK_EQ_INT(kept, SG_OK);
}

int main(int argc, char **argv) {
    (void)argc;
    (void)argv;
    TEST_RUN(test_valid);
    TEST_RUN(test_unknown_layer);
    TEST_RUN(test_opsets_and_sizes);
    TEST_RUN(test_nonfinite_bn);
    return TEST_EXIT();
}
