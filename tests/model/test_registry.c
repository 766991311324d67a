/* tests/model/test_registry.c - registry, sizes, FLOPs, init, freezing, hooks.
 *
 * - deeplabv3_resnet50 (19 classes, aux): 370 keys whose names, dtypes,
 *   shapes and order equal torchvision's after the prefix rename (fixture
 *   written by scripts/make_golden.py), 42,003,046 parameters;
 *   resnet101: 60,995,174.
 * - conv multiply-adds at 520x520 equal the count torchvision's modules give
 *   (fixture, counted with forward hooks) and torchvision's 178.72 G.
 * - init: deterministic per seed, kaiming std, BN 1/0.
 * - freezing: frozen parameters get no gradient, the others the same as
 *   without freezing; frozen BN stats stay put.
 * - hooks: grad_ready order; SyncBN through a fake 2-rank world holding the
 *   same data gives the local result.
 * - training BN with one value per channel (batch 1: the ASPP pooling
 *   branch is 1x1 at any crop) is refused when planning, as a configuration
 *   error naming the layer; frozen statistics or SyncBN make it plannable.
 */
#include "core/config.h"
#include "model/model_io.h"
#include "tests/model/model_testutil.h"
#include "tests/testutil.h"

static void test_resnet50_keys(void) {
    char path[1024], line[512];
    snprintf(path, sizeof path, "%s/deeplabv3_resnet50_keys.txt", mt_fixtures);
    FILE *f = fopen(path, "r");
    CHECK_MSG(f != NULL, "cannot open %s", path);
    sg_model_opts o;
    sg_model_opts_default(&o, SG_RESNET50);
    o.num_classes = 19;
    sg_model *m = sg_model_create(mt_backend(), &o);
    CHECK(m != NULL);
    long long macs_ref = 0, params_ref = 0;
    int i = 0, keys_ref = 0;
    while (fgets(line, sizeof line, f)) {
        if (line[0] == '#') {
            char *p = strstr(line, "# params ");
            if (p)
                sscanf(p, "# params %lld keys %d conv_macs_520 %lld", &params_ref, &keys_ref,
                       &macs_ref);
            continue;
        }
        char name[256], dt[8], shape[64];
        shape[0] = 0;
        int nf = sscanf(line, "%255s %7s %63s", name, dt, shape);
        CHECK(nf >= 2);
        sg_param *p = sg_model_param(m, i);
        CHECK_MSG(p != NULL, "model has only %d keys", i);
        CHECK_MSG(strcmp(p->name, name) == 0, "key %d: model %s, torchvision %s", i, p->name, name);
        CHECK_MSG(strcmp(dt, p->dtype == SG_DT_I64 ? "I64" : "F32") == 0, "%s dtype", name);
        char ms[64] = "";
        size_t o2 = 0;
        for (int d = 0; d < p->ndim; d++)
            o2 += (size_t)snprintf(ms + o2, sizeof ms - o2, "%s%d", d ? "," : "", p->shape[d]);
        CHECK_MSG(strcmp(ms, shape) == 0, "%s shape %s vs torchvision %s", name, ms, shape);
        i++;
    }
    fclose(f);
    CHECK_EQ_INT(i, 370);
    CHECK_EQ_INT(keys_ref, 370);
    CHECK_EQ_INT(sg_model_num_params(m), 370);
    CHECK_EQ_INT(sg_model_param_count(m, 0), 42003046);
    CHECK_EQ_INT(params_ref, 42003046);
    /* encoder parameters first, then the heads: one contiguous head range */
    CHECK_EQ_INT(sg_model_head_offset(m), sg_model_find(m, "decoder.0.convs.0.0.weight")->offset);
    double macs = sg_model_macs(m, 520, 520);
    fprintf(stderr,
            "  resnet50 OS8 520x520: %.6g GMACs (torchvision modules: %.6g), "
            "%.6g GFLOPs\n",
            macs / 1e9, macs_ref / 1e9, sg_model_flops(m, 520, 520) / 1e9);
    CHECK_EQ_INT((long long)macs, macs_ref);
    CHECK_NEAR(macs / 1e9, 178.72, 0.01);
    sg_model_destroy(m);
}

static void test_resnet101_and_small_counts(void) {
    sg_model_opts o;
    sg_model_opts_default(&o, SG_RESNET101);
    o.num_classes = 19;
    sg_model *m = sg_model_create(mt_backend(), &o);
    CHECK(m != NULL);
    CHECK_EQ_INT(sg_model_param_count(m, 0), 60995174);
    CHECK_EQ_INT(sg_model_num_params(m), 676);
    sg_model_destroy(m);
    /* torchvision's deeplabv3_resnet50 default (21 classes, aux) */
    sg_model_opts_default(&o, SG_RESNET50);
    m = sg_model_create(mt_backend(), &o);
    CHECK_EQ_INT(sg_model_param_count(m, 0), 42004074);
    sg_model_destroy(m);
    /* invalid options are refused with a message */
    o.output_stride = 32;
    CHECK(sg_model_create(mt_backend(), &o) == NULL);
}

static void test_init(void) {
    sg_backend *be = mt_backend();
    sg_model_opts o;
    mt_tiny_opts(&o, SG_RESNET50);
    o.base_width = 16;
    sg_model *a = sg_model_create(be, &o), *b = sg_model_create(be, &o);
    sg_model_init(a, 7);
    sg_model_init(b, 7);
    size_t nw = sg_model_param_count(a, 0);
    float *wa = mt_download(be, sg_model_weights(a), nw),
          *wb = mt_download(be, sg_model_weights(b), nw);
    CHECK(memcmp(wa, wb, nw * sizeof(float)) == 0);
    sg_model_init(b, 8);
    free(wb);
    wb = mt_download(be, sg_model_weights(b), nw);
    CHECK(memcmp(wa, wb, nw * sizeof(float)) != 0);
    /* kaiming normal fan_out: layer4 conv2 [128,128,3,3], std sqrt(2/(128*9)) */
    sg_param *p = sg_model_find(a, "encoder.layer4.0.conv2.weight");
    CHECK(p && p->shape[0] == 128 && p->shape[2] == 3);
    double s = 0, s2 = 0;
    for (size_t i = 0; i < p->count; i++) {
        double v = wa[p->offset + i];
        s += v;
        s2 += v * v;
    }
    double mean = s / p->count, sd = sqrt(s2 / p->count - mean * mean),
           want = sqrt(2.0 / (128 * 9));
    CHECK_MSG(fabs(sd / want - 1) < 0.03 && fabs(mean) < 0.05 * want, "std %g want %g mean %g", sd,
              want, mean);
    /* head conv: U(-1/sqrt(fan_in), +): max |w| below and near the bound */
    p = sg_model_find(a, "decoder.1.weight"); /* [64,64,3,3] */
    CHECK(p->shape[1] == 64 && p->shape[2] == 3);
    double bound = 1.0 / sqrt(64.0 * 9), mx = 0;
    for (size_t i = 0; i < p->count; i++) mx = fmax(mx, fabs(wa[p->offset + i]));
    CHECK(mx <= bound && mx > 0.98 * bound);
    p = sg_model_find(a, "encoder.layer1.0.bn2.weight");
    CHECK_EQ_INT((int)wa[p->offset], 1);
    p = sg_model_find(a, "encoder.layer1.0.bn2.bias");
    CHECK(wa[p->offset] == 0.0f);
    float *buf = mt_download(be, sg_model_buffers(a), sg_model_buffer_count(a));
    p = sg_model_find(a, "encoder.bn1.running_var");
    CHECK(buf[p->offset] == 1.0f);
    free(buf);
    free(wa);
    free(wb);
    sg_model_destroy(a);
    sg_model_destroy(b);
}

/* MobileNetV3-Large's init is torchvision's (mobilenetv3.py lines 197-207):
 * kaiming normal fan_out for every conv (the depthwise ones too: fan_out =
 * out channels x taps), zero conv biases (squeeze-excitation fc1/fc2); the
 * segmentation heads keep PyTorch's Conv2d default. Options torchvision does
 * not define are refused. */
static void test_mobilenet(void) {
    sg_backend *be = mt_backend();
    sg_model_opts o;
    sg_model_opts_default(&o, SG_MOBILENET_V3_LARGE);
    CHECK_EQ_INT(o.output_stride, 16);
    o.num_classes = 3;
    sg_model *m = sg_model_create(be, &o);
    CHECK(m != NULL);
    float *w = mt_download(be, sg_model_weights(m), sg_model_param_count(m, 0));
    /* features[13]'s depthwise 5x5 conv [672, 1, 5, 5] */
    sg_param *p = sg_model_find(m, "encoder.13.block.1.0.weight");
    CHECK(p && p->shape[0] == 672 && p->shape[1] == 1 && p->shape[2] == 5);
    double s2 = 0;
    for (size_t i = 0; i < p->count; i++) s2 += (double)w[p->offset + i] * w[p->offset + i];
    double sd = sqrt(s2 / p->count), want = sqrt(2.0 / (672 * 25));
    CHECK_MSG(fabs(sd / want - 1) < 0.03, "std %g want %g", sd, want);
    p = sg_model_find(m, "encoder.13.block.2.fc1.bias");
    CHECK(p && p->shape[0] == 168);
    for (size_t i = 0; i < p->count; i++) CHECK(w[p->offset + i] == 0.0f);
    p = sg_model_find(m, "decoder.4.bias"); /* the classifier: PyTorch's default */
    double mx = 0;
    for (size_t i = 0; i < p->count; i++) mx = fmax(mx, fabs(w[p->offset + i]));
    CHECK(mx > 0 && mx <= 1.0 / sqrt(256.0));
    CHECK(sg_model_find(m, "aux_head.0.weight")->shape[1] == 40); /* on features[4] */
    free(w);
    sg_model_destroy(m);
    /* conv multiply-adds at 520x520, 21 classes (grouped convs count c/groups
     * inputs): torchvision's published 10.45 / 2.09 GFLOPS, counted with
     * forward hooks on torch 1.13 / torchvision 0.14 (make_golden.py
     * conv_macs) */
    for (int k = 0; k < 2; k++) {
        sg_model_opts q;
        sg_model_opts_default(&q, SG_MOBILENET_V3_LARGE);
        q.arch = k ? SG_ARCH_LRASPP : SG_ARCH_DEEPLABV3;
        q.aux_head = !k;
        sg_model *mm = sg_model_create(be, &q);
        CHECK(mm != NULL);
        double macs = sg_model_macs(mm, 520, 520);
        CHECK_MSG((long long)macs == (k ? 2086219688LL : 10452447938LL), "%s: %.0f MACs",
                  sg_arch_name(q.arch), macs);
        sg_model_destroy(mm);
    }
    /* refused: a blocks override, width_mult out of range, fcn */
    sg_model_opts b = o;
    b.blocks[0] = 1;
    th_cap_begin();
    CHECK(sg_model_create(be, &b) == NULL);
    CHECK_STR_CONTAINS(th_cap_end(), "block counts apply to the ResNet backbones only");
    b = o;
    b.width_mult = 0.01;
    th_cap_begin();
    CHECK(sg_model_create(be, &b) == NULL);
    CHECK_STR_CONTAINS(th_cap_end(), "model.width_mult = 0.01: expected 0.05..4");
    b = o;
    b.arch = SG_ARCH_FCN;
    th_cap_begin();
    CHECK(sg_model_create(be, &b) == NULL);
    CHECK_STR_CONTAINS(th_cap_end(), "set model.arch: deeplabv3 or lraspp");
}

static float *grads_of(sg_model *m) {
    return mt_download(sg_model_backend(m), sg_model_grads(m), sg_model_param_count(m, 0));
}

static double range_max_abs(const float *g, const sg_param *p) {
    double mx = 0;
    for (size_t i = 0; i < p->count; i++) mx = fmax(mx, fabs(g[p->offset + i]));
    return mx;
}

static void test_freeze(void) {
    sg_backend *be = mt_backend();
    sg_model_opts o;
    mt_tiny_opts(&o, SG_RESNET50);
    int n = 2, h = 37, w = 45;
    sg_model *ref = sg_model_create(be, &o), *m = sg_model_create(be, &o);
    sg_model_init(ref, 3);
    sg_model_init(m, 3);
    CHECK_EQ_INT(sg_model_plan(ref, n, h, w), 0);
    CHECK_EQ_INT(sg_model_plan(m, n, h, w), 0);
    size_t all = sg_model_param_count(m, 0);
    int nf = sg_model_freeze(m, "encoder.layer1.", 0);
    CHECK(nf > 0);
    CHECK(sg_model_param_count(m, 1) < all);
    double l0 = mt_train_step(ref, n, h, w, 0.5f, 0);
    double l1 = mt_train_step(m, n, h, w, 0.5f, 0);
    CHECK_NEAR(l0, l1, 1e-6);
    float *g0 = grads_of(ref), *g1 = grads_of(m);
    for (int i = 0; i < sg_model_num_params(m); i++) {
        sg_param *p = sg_model_param(m, i);
        if (p->is_buffer) continue;
        if (strncmp(p->name, "encoder.layer1.", 15) == 0) {
            CHECK_MSG(!p->trainable && range_max_abs(g1, p) == 0.0, "%s has a gradient", p->name);
        } else {
            /* data gradients flow through the frozen layer: the stem's
             * gradients are unchanged */
            CHECK_MSG(p->trainable, "%s", p->name);
            double d = 0;
            for (size_t k = 0; k < p->count; k++)
                d = fmax(d, fabs(g0[p->offset + k] - g1[p->offset + k]));
            CHECK_MSG(d <= 1e-6 * fmax(1.0, range_max_abs(g0, p)), "%s differs by %g", p->name, d);
        }
    }
    CHECK(range_max_abs(g1, sg_model_find(m, "encoder.conv1.weight")) > 0);
    free(g0);
    free(g1);

    /* whole encoder with BN stats: running stats and counters stay */
    sg_model_destroy(m);
    m = sg_model_create(be, &o);
    sg_model_init(m, 3);
    CHECK_EQ_INT(sg_model_plan(m, n, h, w), 0);
    sg_model_freeze(m, "encoder.", 1);
    float *b0 = mt_download(be, sg_model_buffers(m), sg_model_buffer_count(m));
    mt_train_step(m, n, h, w, 0.5f, 0);
    float *b1 = mt_download(be, sg_model_buffers(m), sg_model_buffer_count(m));
    sg_param *rv = sg_model_find(m, "encoder.layer3.0.bn2.running_var");
    sg_param *hv = sg_model_find(m, "decoder.2.running_var");
    CHECK(b0[rv->offset] == b1[rv->offset]);
    CHECK(b0[hv->offset] != b1[hv->offset]);
    CHECK_EQ_INT(*sg_model_find(m, "encoder.bn1.num_batches_tracked")->i64, 0);
    CHECK_EQ_INT(*sg_model_find(m, "decoder.2.num_batches_tracked")->i64, 1);
    g1 = grads_of(m);
    CHECK(range_max_abs(g1, sg_model_find(m, "encoder.layer4.0.conv3.weight")) == 0.0);
    CHECK(range_max_abs(g1, sg_model_find(m, "decoder.4.weight")) > 0);
    CHECK(range_max_abs(g1, sg_model_find(m, "aux_head.0.weight")) > 0);
    free(g1);
    free(b0);
    free(b1);
    sg_model_destroy(m);
    sg_model_destroy(ref);
}

/* ---- hooks ---- */
typedef struct hook_ctx {
    int order[1024];
    int n_ready;
    int n_gather, n_allreduce;
    sg_backend *be;
} hook_ctx;

static void h_ready(void *ctx, int i) {
    hook_ctx *c = ctx;
    if (c->n_ready < 1024) c->order[c->n_ready] = i;
    c->n_ready++;
}

/* a fake world of 2 ranks holding identical data */
static void h_gather(void *ctx, const float *local, int64_t count, float *parts, int64_t *counts,
                     int c) {
    hook_ctx *h = ctx;
    h->n_gather++;
    for (int r = 0; r < 2; r++) {
        h->be->ops->copy(h->be, parts + (size_t)r * 2 * c, local, (size_t)2 * c * sizeof(float));
        counts[r] = count;
    }
}

static void h_allreduce(void *ctx, float *red, int c2) {
    hook_ctx *h = ctx;
    h->n_allreduce++;
    h->be->ops->scale(h->be, red, red, 2.0f, (size_t)c2);
}

static void test_hooks(void) {
    sg_backend *be = mt_backend();
    sg_model_opts o;
    mt_tiny_opts(&o, SG_RESNET18);
    o.output_stride = 16;
    int n = 2, h = 33, w = 35;
    sg_model *ref = sg_model_create(be, &o), *m = sg_model_create(be, &o);
    sg_model_init(ref, 5);
    sg_model_init(m, 5);
    static hook_ctx hc;
    memset(&hc, 0, sizeof hc);
    hc.be = be;
    sg_model_hooks hk = {&hc, h_gather, 2, h_allreduce, h_ready};
    sg_model_set_hooks(m, &hk);
    CHECK_EQ_INT(sg_model_plan(ref, n, h, w), 0);
    CHECK_EQ_INT(sg_model_plan(m, n, h, w), 0);
    double l0 = mt_train_step(ref, n, h, w, 0.4f, 0);
    double l1 = mt_train_step(m, n, h, w, 0.4f, 0);
    CHECK_NEAR(l0, l1, 1e-5 * fabs(l0));
    int order[1024];
    int no = sg_model_grad_order(m, order, 1024);
    CHECK_EQ_INT(hc.n_ready, no);
    int n_trainable = 0;
    for (int i = 0; i < sg_model_num_params(m); i++)
        n_trainable += !sg_model_param(m, i)->is_buffer;
    CHECK_EQ_INT(no, n_trainable);
    for (int i = 0; i < no; i++) CHECK_EQ_INT(hc.order[i], order[i]);
    /* backward produces the aux head first and the stem conv last */
    CHECK_EQ_INT(order[0], sg_model_find_index(m, "aux_head.4.weight"));
    CHECK_EQ_INT(order[no - 1], sg_model_find_index(m, "encoder.conv1.weight"));
    int n_bn = 0;
    for (int i = 0; i < sg_model_num_params(m); i++)
        n_bn += sg_model_param(m, i)->kind == SG_PK_NUM_BATCHES;
    CHECK_EQ_INT(hc.n_gather, n_bn);
    CHECK(hc.n_allreduce > 0 && hc.n_allreduce <= n_bn);
    /* identical data on both ranks = the local result; running var uses the
     * global count 2N, so only it differs slightly */
    float *g0 = grads_of(ref), *g1 = grads_of(m);
    double e = tu_max_rel_err(g0, g1, sg_model_param_count(m, 0), 1e-3);
    CHECK_MSG(e < 1e-4, "SyncBN grads rel err %g", e);
    free(g0);
    free(g1);
    sg_model_destroy(m);
    sg_model_destroy(ref);
}

static void test_plan_reuse(void) {
    sg_backend *be = mt_backend();
    sg_model_opts o;
    mt_tiny_opts(&o, SG_RESNET50);
    sg_model *m = sg_model_create(be, &o);
    CHECK_EQ_INT(sg_model_plan(m, 2, 40, 48), 0);
    size_t b1 = sg_model_activation_bytes(m);
    float *in = sg_model_input(m);
    CHECK_EQ_INT(sg_model_plan(m, 2, 40, 48), 0); /* same shape: no re-plan */
    CHECK(sg_model_input(m) == in);
    CHECK_EQ_INT(sg_model_plan(m, 2, 80, 96), 0);
    CHECK(sg_model_activation_bytes(m) > 3 * b1);
    CHECK(sg_model_plan(m, 1, 0, 4) != 0); /* an error, not a crash */
    /* padding keeps every map >= 1x1 (batch 1 trains no BN: test_bn_one_value) */
    CHECK_EQ_INT(sg_model_plan_infer(m, 1, 3, 3), 0);
    /* the plan is smaller than one buffer per activation and gradient */
    CHECK_EQ_INT(sg_model_plan(m, 2, 64, 64), 0);
    CHECK_EQ_INT(sg_model_plan_bytes(m, 2, 64, 64, 1), sg_model_activation_bytes(m));
    CHECK(sg_model_plan_bytes(m, 2, 64, 64, 0) < sg_model_activation_bytes(m));
    CHECK_EQ_INT(sg_model_plan_bytes(m, 2, 0, 64, 1), 0);
    fprintf(stderr, "  tiny resnet50 2x3x64x64: train arena %.2f MiB\n",
            sg_model_activation_bytes(m) / 1048576.0);
    sg_model_destroy(m);
}

/* Dropout: eval forward ignores it; train masks depend only on the key; and
 * a central finite difference of the loss (dropout on, fixed key) matches
 * the backward pass for weights upstream of both dropout layers. */
static double loss_at(sg_model *m, int n, int h, int w) {
    return mt_train_step(m, n, h, w, 0.5f, 0);
}

static void test_dropout_and_fd(void) {
    sg_backend *be = mt_backend();
    sg_model_opts o;
    mt_tiny_opts(&o, SG_RESNET50);
    int n = 2, h = 29, w = 31;
    sg_model *a = sg_model_create(be, &o);
    o.aspp_dropout = 0.5f;
    o.aux_dropout = 0.3f;
    sg_model *d = sg_model_create(be, &o);
    sg_model_init(a, 4);
    sg_model_init(d, 4);
    CHECK_EQ_INT(sg_model_plan(a, n, h, w), 0);
    CHECK_EQ_INT(sg_model_plan(d, n, h, w), 0);
    size_t oc = (size_t)n * o.num_classes * h * w;
    float *x = malloc((size_t)n * 3 * h * w * sizeof(float));
    tu_fill(x, (size_t)n * 3 * h * w, 5, -1, 1);
    be->ops->upload(be, sg_model_input(a), x, (size_t)n * 3 * h * w * sizeof(float));
    be->ops->upload(be, sg_model_input(d), x, (size_t)n * 3 * h * w * sizeof(float));
    free(x);
    sg_model_forward(a, 0, 0);
    sg_model_forward(d, 0, 0);
    float *ya = mt_download(be, sg_model_out(a), oc), *yd = mt_download(be, sg_model_out(d), oc);
    CHECK(memcmp(ya, yd, oc * sizeof(float)) == 0);
    sg_model_forward(d, 1, 1);
    float *t1 = mt_download(be, sg_model_aux(d), oc);
    sg_model_forward(d, 1, 1);
    float *t2 = mt_download(be, sg_model_aux(d), oc);
    sg_model_forward(d, 1, 2);
    float *t3 = mt_download(be, sg_model_aux(d), oc);
    CHECK(memcmp(t1, t2, oc * sizeof(float)) == 0);
    CHECK(memcmp(t1, t3, oc * sizeof(float)) != 0);
    free(ya);
    free(yd);
    free(t1);
    free(t2);
    free(t3);

    /* finite differences (mt_train_step uses dropout key 12345); the stem is
     * left out: with 4 channels its ReLU/max-pool kinks make central
     * differences eps-dependent (the golden test covers it exactly) */
    loss_at(d, n, h, w);
    float *g = grads_of(d);
    const char *names[] = {"decoder.1.weight", "aux_head.4.weight", "decoder.0.convs.0.0.weight",
                           "encoder.layer3.0.conv2.weight", "decoder.2.weight"};
    for (int k = 0; k < 5; k++) {
        sg_param *p = sg_model_find(d, names[k]);
        CHECK(p != NULL);
        for (int j = 0; j < 3; j++) {
            size_t idx = (size_t)(j * 7919) % p->count;
            float orig;
            be->ops->download(be, &orig, p->data + idx, sizeof orig);
            float eps = 3e-3f * fmaxf(1.0f, fabsf(orig));
            float v = orig + eps;
            be->ops->upload(be, p->data + idx, &v, sizeof v);
            double lp = loss_at(d, n, h, w);
            v = orig - eps;
            be->ops->upload(be, p->data + idx, &v, sizeof v);
            double lm = loss_at(d, n, h, w);
            be->ops->upload(be, p->data + idx, &orig, sizeof orig);
            double fd = (lp - lm) / (2.0 * eps), an = g[p->offset + idx];
            CHECK_MSG(fabs(fd - an) <= 2e-2 * fabs(an) + 2e-4, "%s[%zu]: fd %.6g vs backward %.6g",
                      p->name, idx, fd, an);
        }
    }
    free(g);
    sg_model_destroy(a);
    sg_model_destroy(d);
}

/* Batch norm in training needs more than one value per channel. sg_model_plan
 * refuses a training plan where a BN layer with batch statistics would get
 * one (SG_ERR_CONFIG, naming the layer, its shape and the remedies) instead
 * of the forward pass failing later; nothing is planned then. */
static void test_bn_one_value(void) {
    sg_backend *be = mt_backend();
    sg_model_opts o;
    mt_tiny_opts(&o, SG_RESNET18); /* 2 ASPP rates: the pooling branch is convs.3 */
    sg_model *m = sg_model_create(be, &o);
    char buf[16384];
    /* batch 1: the ASPP pooling branch's BN is 1x1 whatever the crop */
    th_cap_begin();
    sg_status st = sg_model_plan(m, 1, 64, 64);
    snprintf(buf, sizeof buf, "%s", th_cap_end());
    CHECK_EQ_INT(st, SG_ERR_CONFIG);
    CHECK_STR_CONTAINS(buf, "batch norm decoder.0.convs.3.2 would normalise 1 value per channel");
    CHECK_STR_CONTAINS(buf, "[1, 16, 1, 1] for the input [1, 3, 64, 64]");
    CHECK_STR_CONTAINS(buf, "ASPP global average pool");
    CHECK_STR_CONTAINS(buf, "train.batch_size >= 2");
    CHECK_STR_CONTAINS(buf, "model.sync_bn");
    CHECK_STR_CONTAINS(buf, "train.freeze_bn_stats");
    CHECK(strstr(buf, "data.crop_size") == NULL); /* a larger crop would not help */
    CHECK(sg_model_input(m) == NULL);             /* not planned */
    /* a tiny crop at batch 1: the first 1x1 map is in the backbone, and
     * there a larger crop does help */
    th_cap_begin();
    st = sg_model_plan(m, 1, 3, 3);
    snprintf(buf, sizeof buf, "%s", th_cap_end());
    CHECK_EQ_INT(st, SG_ERR_CONFIG);
    CHECK_STR_CONTAINS(buf, "batch norm encoder.layer1.0.bn1 ");
    CHECK_STR_CONTAINS(buf, "data.crop_size");
    /* inference uses running statistics; 2 images give 2 values */
    CHECK_EQ_INT(sg_model_plan_infer(m, 1, 64, 64), SG_OK);
    CHECK_EQ_INT(sg_model_plan(m, 2, 64, 64), SG_OK);
    /* frozen statistics (train.freeze_bn_stats): batch 1 trains */
    int n_bn = 0;
    for (int i = 0; i < sg_model_num_params(m); i++)
        n_bn += sg_model_param(m, i)->kind == SG_PK_NUM_BATCHES;
    CHECK_EQ_INT(sg_model_freeze_bn_stats(m, ""), n_bn);
    CHECK_EQ_INT(sg_model_plan(m, 1, 64, 64), SG_OK);
    double loss = mt_train_step(m, 1, 64, 64, 0.4f, 0);
    CHECK_MSG(isfinite(loss) && loss > 0, "loss %g", loss);
    sg_model_destroy(m);
    /* SyncBN over 2 ranks pools 2 values per channel: plannable at batch 1 */
    sg_model *s = sg_model_create(be, &o);
    static hook_ctx hc;
    memset(&hc, 0, sizeof hc);
    hc.be = be;
    sg_model_hooks hk = {&hc, h_gather, 2, h_allreduce, h_ready};
    sg_model_set_hooks(s, &hk);
    CHECK_EQ_INT(sg_model_plan(s, 1, 64, 64), SG_OK);
    sg_model_destroy(s);
}

static void test_opts_from_config(void) {
    static sg_config cfg;
    sg_config_defaults(&cfg);
    sg_model_opts o;
    CHECK_EQ_INT(sg_model_opts_from_config(&o, &cfg), 0);
    CHECK(strcmp(sg_backbone_name(o.backbone), cfg.model.backbone) == 0);
    CHECK_EQ_INT(o.num_classes, cfg.model.num_classes);
    CHECK_EQ_INT(o.n_aspp_rates, cfg.model.n_aspp_rates);
    CHECK_EQ_INT(o.aspp_rates[0], cfg.model.aspp_rates[0]);
    CHECK_EQ_INT(o.base_width, cfg.model.base_width);
    CHECK_NEAR(o.bn_eps, cfg.model.bn_eps, 1e-12);
    CHECK_EQ_INT(o.blocks[0], 0);
    cfg.model.output_stride = 12;
    CHECK_EQ_INT(sg_model_opts_from_config(&o, &cfg), SG_ERR_CONFIG);
    cfg.model.output_stride = 16;
    snprintf(cfg.model.backbone, sizeof cfg.model.backbone, "resnet152");
    CHECK_EQ_INT(sg_model_opts_from_config(&o, &cfg), SG_ERR_CONFIG);
}

/* The full torchvision-size network: one training step at 2x3x64x64 runs,
 * the loss is finite and every parameter gets a finite, non-zero gradient. */
static void test_resnet50_full_step(void) {
    sg_backend *be = mt_backend();
    sg_model_opts o;
    sg_model_opts_default(&o, SG_RESNET50);
    o.num_classes = 19;
    sg_model *m = sg_model_create(be, &o);
    sg_model_init(m, 1);
    CHECK_EQ_INT(sg_model_plan(m, 2, 64, 64), 0);
    fprintf(stderr, "  resnet50 OS8 2x3x64x64: train arena %.1f MiB\n",
            sg_model_activation_bytes(m) / 1048576.0);
    fprintf(stderr,
            "  resnet50 OS8 arena (planned, not allocated): train 2x3x256x256 %.0f MiB, "
            "train 8x3x512x1024 %.0f MiB, inference 1x3x1024x2048 %.0f MiB\n",
            sg_model_plan_bytes(m, 2, 256, 256, 1) / 1048576.0,
            sg_model_plan_bytes(m, 8, 512, 1024, 1) / 1048576.0,
            sg_model_plan_bytes(m, 1, 1024, 2048, 0) / 1048576.0);
    double loss = mt_train_step(m, 2, 64, 64, 0.5f, 0);
    CHECK_MSG(isfinite(loss) && loss > 0, "loss %g", loss);
    float *g = grads_of(m);
    for (int i = 0; i < sg_model_num_params(m); i++) {
        sg_param *p = sg_model_param(m, i);
        if (p->is_buffer) continue;
        double mx = 0;
        int finite = 1;
        for (size_t k = 0; k < p->count; k++) {
            finite &= isfinite(g[p->offset + k]);
            mx = fmax(mx, fabs(g[p->offset + k]));
        }
        CHECK_MSG(finite && mx > 0, "%s: gradient max %g finite %d", p->name, mx, finite);
    }
    free(g);
    sg_model_destroy(m);
}

int main(int argc, char **argv) {
    if (argc > 1) mt_fixtures = argv[1];
    TEST_RUN(test_resnet50_keys);
    TEST_RUN(test_resnet101_and_small_counts);
    TEST_RUN(test_init);
    TEST_RUN(test_mobilenet);
    TEST_RUN(test_opts_from_config);
    TEST_RUN(test_dropout_and_fd);
    TEST_RUN(test_freeze);
    TEST_RUN(test_hooks);
    TEST_RUN(test_plan_reuse);
    TEST_RUN(test_bn_one_value);
    TEST_RUN(test_resnet50_full_step);
    return TEST_EXIT();
}
