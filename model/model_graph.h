/* model/model_graph.h - what a head builder in its own file (head_*.c) gets
 * from model_build.c to add layers: a table of its graph-building helpers,
 * passed in (so calls go one way: model_build.c -> head_*.c).
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

#endif
