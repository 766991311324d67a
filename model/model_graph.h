/* model/model_graph.h - graph-building helpers of model_build.c shared with
 * the head builders in their own files (head_*.c).
 *
 * Each adds its layers (and their registry entries, named <pre><leaf>) at
 * the end of the model's forward list and returns the output tensor index.
 * Only for model_build.c and head_*.c, while the graph is being built.
 */
#ifndef SG_MODEL_MODEL_GRAPH_H
#define SG_MODEL_MODEL_GRAPH_H

#include "model/model.h"

/* conv (stride 1, no bias; `groups` groups, weight [k, cin/groups, r, r])
 * named <pre><cname>, then BN <pre><bname> (+ ReLU when relu) */
int sg_mg_conv_bn(sg_model *m, const char *pre, const char *cname, const char *bname, int x,
                  int cin, int k, int r, int pad, int dil, int groups, int relu);
/* mmcv ConvModule: conv r x r (padding dil * (r / 2)), "bn", ReLU */
int sg_mg_conv_module(sg_model *m, const char *pre, int x, int cin, int k, int r, int dil);
/* global average pool to 1x1 */
int sg_mg_avgpool(sg_model *m, int x, int c);
/* bilinear (align_corners false) to the size of tensor ref */
int sg_mg_resize_to(sg_model *m, int x, int ref, int c);
/* channel concat of in[0..n_in) (c channels in all) */
int sg_mg_concat(sg_model *m, const int *in, int n_in, int c);
/* mmseg BaseDecodeHead.cls_seg: Dropout2d(p), then <prefix>.conv_seg */
int sg_mg_mm_cls_seg(sg_model *m, const char *prefix, int x, int c, float p);

/* head_sepaspp.c: mmseg's DepthwiseSeparableASPPHead (DeepLabV3+) on
 * layer4 (l4, c4 channels) and the stride-4 layer1 feature (l1, c1);
 * returns the logits at layer1's resolution. */
int sg_mg_sepaspp_head(sg_model *m, int l1, int c1, int l4, int c4);

#endif
