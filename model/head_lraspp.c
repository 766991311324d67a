/* model/head_lraspp.c - torchvision's LRASPPHead (Lite R-ASPP).
 *
 * Transcribes torchvision 0.14 models/segmentation/lraspp.py LRASPPHead
 * (lines 54-79): cbr = 1x1 conv high -> inter (no bias), BatchNorm2d
 * (PyTorch's defaults: the model's bn_eps / bn_momentum), ReLU; scale =
 * AdaptiveAvgPool2d(1), 1x1 conv high -> inter (no bias), Sigmoid;
 * x = cbr(high) * scale(high), bilinearly resized to low's size;
 * out = low_classifier(low) + high_classifier(x), both 1x1 with bias.
 * Registry names decoder.cbr.0 / .1, decoder.scale.1,
 * decoder.low_classifier, decoder.high_classifier (torchvision's
 * classifier.* after the prefix rename), in its state_dict order.
 */
#include "model/model_graph.h"
#include "model/model_internal.h"

int sg_lraspp_head(const sg_mg_builder *g, int low, int c_low, int high, int c_high, int inter) {
    sg_model *m = g->m;
    int nc = m->o.num_classes;
    int x = g->conv(m, "decoder.cbr.0", high, c_high, inter, 1, 1, 0, 1, 1, 0);
    x = g->bn(m, "decoder.cbr.1", x, inter, 1);
    int s = g->layer(m, L_AVGPOOL, &high, 1, c_high);
    s = g->conv(m, "decoder.scale.1", s, c_high, inter, 1, 1, 0, 1, 1, 0);
    s = g->layer(m, L_SIGMOID, &s, 1, inter);
    int in[2] = {x, s};
    x = g->layer(m, L_CHAN_SCALE, in, 2, inter);
    x = g->resize_to(m, x, low, inter);
    int a = g->conv(m, "decoder.low_classifier", low, c_low, nc, 1, 1, 0, 1, 1, 1);
    int b = g->conv(m, "decoder.high_classifier", x, inter, nc, 1, 1, 0, 1, 1, 1);
    int sum[2] = {a, b};
    return g->layer(m, L_ADD, sum, 2, nc);
}
