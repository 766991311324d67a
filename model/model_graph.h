/* model/model_graph.h - what a builder in its own file (backbone_*.c,
 * head_*.c) gets from model_build.c to add layers: a table of its
 * graph-building helpers, passed in (so calls go one way: model_build.c ->
 * backbone_*.c / head_*.c, which call back through these pointers only).
 *
 * Each helper adds its layers (and their registry entries, named
 * <pre><leaf>) at the end of the model's forward list and returns the output
 * tensor index. Only while model_build.c builds the graph.
 */
#ifndef SG_MODEL_MODEL_GRAPH_H
#define SG_MODEL_MODEL_GRAPH_H

#include "model/model.h"

typedef struct sg_mg_builder {
    sg_model *m;
    const sg_model_opts *o;
    /* conv named <prefix>.weight (+ .bias when bias; `groups` groups,
     * weight [k, cin/groups, r, r]) */
    int (*conv)(sg_model *m, const char *prefix, int x, int cin, int k, int r, int stride, int pad,
                int dil, int groups, int bias);
    /* BN named <prefix>.* (+ ReLU when relu), with the model's eps/momentum */
    int (*bn)(sg_model *m, const char *prefix, int x, int c, int relu);
    /* a parameterless layer of `type` (model_internal.h) on in[0..n_in) */
    int (*layer)(sg_model *m, int type, const int *in, int n_in, int c);
    /* conv (stride 1, no bias; `groups` groups, weight [k, cin/groups, r, r])
     * named <pre><cname>, then BN <pre><bname> (+ ReLU when relu) */
    int (*conv_bn)(sg_model *m, const char *pre, const char *cname, const char *bname, int x,
                   int cin, int k, int r, int pad, int dil, int groups, int relu);
    /* mmcv ConvModule: conv r x r (padding dil * (r / 2)), "bn", ReLU */
    int (*conv_module)(sg_model *m, const char *pre, int x, int cin, int k, int r, int dil);
    /* global average pool to 1x1 */
    int (*avgpool)(sg_model *m, int x, int c);
    /* bilinear (align_corners false) to the size of tensor ref */
    int (*resize_to)(sg_model *m, int x, int ref, int c);
    /* channel concat of in[0..n_in) (c channels in all) */
    int (*concat)(sg_model *m, const int *in, int n_in, int c);
    /* mmseg BaseDecodeHead.cls_seg: Dropout2d(p), then <prefix>.conv_seg */
    int (*mm_cls_seg)(sg_model *m, const char *prefix, int x, int c, float p);
} sg_mg_builder;

/* head_sepaspp.c: mmseg's DepthwiseSeparableASPPHead (DeepLabV3+) on
 * layer4 (l4, c4 channels) and the stride-4 layer1 feature (l1, c1);
 * returns the logits at layer1's resolution. */
int sg_mg_sepaspp_head(const sg_mg_builder *g, int l1, int c1, int l4, int c4);

/* backbone_mobilenetv3.c: torchvision's MobileNetV3-Large features
 * (dilated) on the input tensor 0; *low = features[stage_indices[-4]] (the
 * stride-8 stage), returns features[16] (stride 16); channels in *c_low,
 * *c_high. */
int sg_mnv3_large_build(const sg_mg_builder *g, int *low, int *c_low, int *c_high);

/* head_lraspp.c: torchvision's LRASPPHead (decoder.*) on low / high, inter
 * channels wide; returns the logits at low's size. */
int sg_lraspp_head(const sg_mg_builder *g, int low, int c_low, int high, int c_high, int inter);

#endif
