/* model/backbone_mobilenetv3.c - torchvision's MobileNetV3-Large features as
 * its segmentation models build them.
 *
 * Transcribes torchvision 0.14 models/mobilenetv3.py: _mobilenet_v3_conf
 * ("mobilenet_v3_large", width_mult, dilated=True: lines 223-249, the last
 * three blocks at dilation 2), InvertedResidualConfig.adjust_channels =
 * _make_divisible(c * width_mult, 8) (lines 38-49, models/_utils.py 76-89),
 * InvertedResidual (lines 52-114: optional 1x1 expand, depthwise k x k with
 * stride 1 where dilated, SqueezeExcitation with squeeze
 * _make_divisible(exp // 4, 8) and Hardsigmoid, 1x1 project without
 * activation, residual when stride 1 and in == out), MobileNetV3.features
 * (lines 156-188: 3x3 stride-2 stem with Hardswish, the blocks, a 1x1 conv
 * to 6x the last width with Hardswish) and its BatchNorm2d(eps 0.001,
 * momentum 0.01) (line 154); ops/misc.py Conv2dNormActivation (padding
 * (k - 1) // 2 * dilation, no bias before a norm) and SqueezeExcitation
 * (avgpool, fc1 1x1 + bias, ReLU, fc2 1x1 + bias, scale * input).
 * Registry names: encoder.<i>.0 / .1 (stem and last conv),
 * encoder.<i>.block.<j>.0 / .1 and encoder.<i>.block.<j>.fc1 / fc2 (SE), i
 * the index in features - torchvision's backbone.* after the prefix rename.
 */
#include <stdio.h>

#include "model/model_graph.h"
#include "model/model_internal.h"

/* models/_utils.py _make_divisible(v, 8): nearest multiple of 8, at least
 * 8, not below 90% of v (Python: int(v + 4) // 8 * 8). */
static int make_divisible(double v) {
    int nv = (int)(v + 4.0) / 8 * 8;
    if (nv < 8) nv = 8;
    if (nv < 0.9 * v) nv += 8;
    return nv;
}

typedef struct bneck {
    int in, k, exp, out, se, hs, stride, dil;
} bneck;

/* mobilenetv3.py lines 233-248 (mobilenet_v3_large), dilated = True */
static const bneck large_conf[15] = {
    {16, 3, 16, 16, 0, 0, 1, 1},    {16, 3, 64, 24, 0, 0, 2, 1},    {24, 3, 72, 24, 0, 0, 1, 1},
    {24, 5, 72, 40, 1, 0, 2, 1},    {40, 5, 120, 40, 1, 0, 1, 1},   {40, 5, 120, 40, 1, 0, 1, 1},
    {40, 3, 240, 80, 0, 1, 2, 1},   {80, 3, 200, 80, 0, 1, 1, 1},   {80, 3, 184, 80, 0, 1, 1, 1},
    {80, 3, 184, 80, 0, 1, 1, 1},   {80, 3, 480, 112, 1, 1, 1, 1},  {112, 3, 672, 112, 1, 1, 1, 1},
    {112, 5, 672, 160, 1, 1, 2, 2}, {160, 5, 960, 160, 1, 1, 1, 2}, {160, 5, 960, 160, 1, 1, 1, 2},
};

/* conv (no bias) + BN(eps 0.001, momentum 0.01) + activation (hs: Hardswish,
 * relu: ReLU fused into the BN, neither: none) as Conv2dNormActivation */
static int cna(const sg_mg_builder *g, const char *pre, int x, int cin, int cout, int k, int stride,
               int dil, int groups, int relu, int hs) {
    sg_model *m = g->m;
    char a[160], b[160];
    snprintf(a, sizeof a, "%s0", pre);
    snprintf(b, sizeof b, "%s1", pre);
    int y = g->conv(m, a, x, cin, cout, k, stride, (k - 1) / 2 * dil, dil, groups, 0);
    y = g->bn(m, b, y, cout, relu);
    sg_layer *l = &m->l[m->t[y].producer];
    l->bn_eps = 0.001f;
    l->bn_momentum = 0.01f;
    if (hs) y = g->layer(m, L_HARDSWISH, &y, 1, cout);
    return y;
}

/* SqueezeExcitation(c, sq, scale_activation=Hardsigmoid) on x */
static int squeeze_excite(const sg_mg_builder *g, const char *pre, int x, int c, int sq) {
    sg_model *m = g->m;
    char a[160], b[160];
    snprintf(a, sizeof a, "%sfc1", pre);
    snprintf(b, sizeof b, "%sfc2", pre);
    int s = g->layer(m, L_AVGPOOL, &x, 1, c);
    s = g->conv(m, a, s, c, sq, 1, 1, 0, 1, 1, 1);
    s = g->layer(m, L_RELU, &s, 1, sq);
    s = g->conv(m, b, s, sq, c, 1, 1, 0, 1, 1, 1);
    s = g->layer(m, L_HARDSIGMOID, &s, 1, c);
    int in[2] = {x, s};
    return g->layer(m, L_CHAN_SCALE, in, 2, c);
}

int sg_mnv3_large_build(const sg_mg_builder *g, int *low, int *c_low, int *c_high) {
    double wm = g->m->o.width_mult;
    int x = 0;
    int cin = make_divisible(large_conf[0].in * wm);
    x = cna(g, "encoder.0.", x, 3, cin, 3, 2, 1, 1, 0, 1);
    /* stage_indices = [0] + strided blocks + [16]; low = stage_indices[-4] */
    int stage[8], n_stage = 0, outs[17], chans[17];
    stage[n_stage++] = 0;
    outs[0] = x;
    chans[0] = cin;
    for (int bi = 0; bi < 15; bi++) {
        const bneck *b = &large_conf[bi];
        int fi = bi + 1; /* index in features */
        int in_c = make_divisible(b->in * wm), exp = make_divisible(b->exp * wm);
        int out_c = make_divisible(b->out * wm);
        char pre[96];
        int j = 0, y = x;
        if (exp != in_c) {
            snprintf(pre, sizeof pre, "encoder.%d.block.%d.", fi, j++);
            y = cna(g, pre, y, in_c, exp, 1, 1, 1, 1, !b->hs, b->hs);
        }
        snprintf(pre, sizeof pre, "encoder.%d.block.%d.", fi, j++);
        int stride = b->dil > 1 ? 1 : b->stride;
        y = cna(g, pre, y, exp, exp, b->k, stride, b->dil, exp, !b->hs, b->hs);
        if (b->se) {
            snprintf(pre, sizeof pre, "encoder.%d.block.%d.", fi, j++);
            y = squeeze_excite(g, pre, y, exp, make_divisible((double)(exp / 4)));
        }
        snprintf(pre, sizeof pre, "encoder.%d.block.%d.", fi, j++);
        y = cna(g, pre, y, exp, out_c, 1, 1, 1, 1, 0, 0);
        if (b->stride == 1 && in_c == out_c) {
            int in[2] = {y, x};
            y = g->layer(g->m, L_ADD, in, 2, out_c);
        }
        if (b->stride > 1) stage[n_stage++] = fi;
        x = y;
        cin = out_c;
        outs[fi] = x;
        chans[fi] = cin;
    }
    int last = 6 * cin;
    x = cna(g, "encoder.16.", x, cin, last, 1, 1, 1, 1, 0, 1);
    stage[n_stage++] = 16;
    outs[16] = x;
    chans[16] = last;
    int lo = stage[n_stage - 4];
    *low = outs[lo];
    *c_low = chans[lo];
    *c_high = last;
    return x;
}
