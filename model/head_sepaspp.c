/* model/head_sepaspp.c - mmsegmentation's DeepLabV3+ head
 * (DepthwiseSeparableASPPHead), transcribed from
 * mmseg/models/decode_heads/sep_aspp_head.py (0.x) with its parents
 * aspp_head.py (ASPPHead, ASPPModule) and decode_head.py (cls_seg), and
 * mmcv/cnn/bricks/depthwise_separable_conv_module.py:
 *   DepthwiseSeparableConvModule(cin, cout, 3, padding, dilation) =
 *     depthwise_conv: ConvModule(cin, cin, 3, groups = cin) (conv, bn, ReLU)
 *     pointwise_conv: ConvModule(cin, cout, 1)              (conv, bn, ReLU)
 *   (dw/pw norm and act 'default' = the module's BN and ReLU)
 *   image_pool = [AdaptiveAvgPool2d(1), ConvModule(c4, ch, 1)]
 *   aspp_modules.i: dilation 1 -> ConvModule(c4, ch, 1); dilation d > 1 ->
 *     DepthwiseSeparableConvModule(c4, ch, 3, dilation d, padding d)
 *   bottleneck = ConvModule((n_dil + 1) * ch, ch, 3, pad 1): ASPPHead's own,
 *     which DepthwiseSeparableASPPHead keeps (a plain 3x3 conv, not separable)
 *   c1_bottleneck = ConvModule(c1_in_channels, c1_channels, 1)
 *   sep_bottleneck = [DSConv(ch + c1_channels, ch), DSConv(ch, ch)] (3x3, pad 1)
 *   forward: cat(resize(image_pool(x)), *aspp(x)) -> bottleneck -> resize to
 *     c1_bottleneck(layer1)'s size -> cat(out, c1) -> sep_bottleneck -> cls_seg
 * configs/_base_/models/deeplabv3plus_r50-d8.py: channels 512, dilations
 * (1, 12, 24, 36), c1_in_channels 256 (layer1), c1_channels 48, dropout 0.1.
 * Here channels = 8 * base_width and c1_channels = 3 * base_width / 4, so
 * base width 64 is mmseg's R-50/101-D8 head exactly; the dilations are
 * (1, model.aspp_rates...).
 */
#include <stdio.h>

#include "model/model_graph.h"

/* mmcv DepthwiseSeparableConvModule: <pre>depthwise_conv.{conv,bn},
 * <pre>pointwise_conv.{conv,bn} */
static int dsconv(const sg_mg_builder *g, const char *pre, int x, int cin, int cout, int dil) {
    char dw[128], pw[128];
    snprintf(dw, sizeof dw, "%sdepthwise_conv.", pre);
    snprintf(pw, sizeof pw, "%spointwise_conv.", pre);
    x = g->conv_bn(g->m, dw, "conv", "bn", x, cin, cin, 3, dil, dil, cin, 1);
    return g->conv_bn(g->m, pw, "conv", "bn", x, cin, cout, 1, 0, 1, 1, 1);
}

int sg_mg_sepaspp_head(const sg_mg_builder *g, int l1, int c1, int l4, int c4) {
    const sg_model_opts *o = g->o;
    sg_model *m = g->m;
    int ch = 8 * o->base_width, nb = o->n_aspp_rates + 2;
    int c1ch = 3 * o->base_width / 4 > 0 ? 3 * o->base_width / 4 : 1;
    int br[SG_MODEL_MAX_RATES + 2];
    int p = g->avgpool(m, l4, c4);
    p = g->conv_module(m, "decoder.image_pool.1.", p, c4, ch, 1, 1);
    br[0] = g->resize_to(m, p, l4, ch);
    br[1] = g->conv_module(m, "decoder.aspp_modules.0.", l4, c4, ch, 1, 1);
    for (int i = 0; i < o->n_aspp_rates; i++) {
        char pre[96];
        int d = o->aspp_rates[i];
        snprintf(pre, sizeof pre, "decoder.aspp_modules.%d.", i + 1);
        br[i + 2] = d == 1 ? g->conv_module(m, pre, l4, c4, ch, 1, 1)
                           : dsconv(g, pre, l4, c4, ch, d);
    }
    int y = g->concat(m, br, nb, nb * ch);
    y = g->conv_module(m, "decoder.bottleneck.", y, nb * ch, ch, 3, 1);
    int c1o = g->conv_module(m, "decoder.c1_bottleneck.", l1, c1, c1ch, 1, 1);
    int cat[2] = {g->resize_to(m, y, c1o, ch), c1o};
    y = g->concat(m, cat, 2, ch + c1ch);
    y = dsconv(g, "decoder.sep_bottleneck.0.", y, ch + c1ch, ch, 1);
    y = dsconv(g, "decoder.sep_bottleneck.1.", y, ch, ch, 1);
    return g->mm_cls_seg(m, "decoder", y, ch, o->head_dropout);
}
