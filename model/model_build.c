/* model/model_build.c - builds DeepLabV3's layer graph and parameter registry
 * (the DeepLabV3+ head in head_sepaspp.c, through model_graph.h).
 *
 * Mirrors torchvision 0.14's module tree (resnet.py, segmentation/
 * deeplabv3.py, fcn.py) so registry names and order equal torchvision's
 * state_dict after the prefix rename. The MobileNetV3-Large backbone and the
 * LR-ASPP head are built in backbone_mobilenetv3.c and head_lraspp.c through
 * the builders handed to them (sg_graph_builder, model_internal.h). Also: option parsing/validation,
 * registry accessors, initialisation and freezing.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/config.h"
#include "core/log.h"
#include "kernels/rng.h"
#include "model/model_graph.h"
#include "model/model_internal.h"
#include "model/model_profile.h"

static const char *backbone_names[SG_N_BACKBONES] = {
    "resnet18",    "resnet34",     "resnet50",          "resnet101",
    "resnet50v1c", "resnet101v1c", "mobilenet_v3_large"};
static const int backbone_blocks[SG_N_BACKBONES][4] = {
    {2, 2, 2, 2}, {3, 4, 6, 3}, {3, 4, 6, 3}, {3, 4, 23, 3}, {3, 4, 6, 3}, {3, 4, 23, 3}, {0}};
static const char *arch_names[SG_N_ARCHS] = {"deeplabv3", "fcn", "deeplabv3plus", "lraspp"};
static const char *names_names[2] = {"torchvision", "mmseg"};

static int is_v1c(sg_backbone b) { return b == SG_RESNET50V1C || b == SG_RESNET101V1C; }
static int is_bottleneck(sg_backbone b) { return b != SG_RESNET18 && b != SG_RESNET34; }
static int is_mobilenet(sg_backbone b) { return b == SG_MOBILENET_V3_LARGE; }

const char *sg_backbone_name(sg_backbone b) {
    return ((int)b >= 0 && (int)b < SG_N_BACKBONES) ? backbone_names[b] : "?";
}
const char *sg_arch_name(sg_arch a) {
    return ((int)a >= 0 && (int)a < SG_N_ARCHS) ? arch_names[a] : "?";
}
const char *sg_names_name(sg_names n) { return ((int)n >= 0 && (int)n < 2) ? names_names[n] : "?"; }

static int parse_name(const char *s, const char *const *names, int n) {
    for (int i = 0; s && i < n; i++)
        if (strcmp(s, names[i]) == 0) return i;
    return -1;
}

sg_status sg_backbone_parse(const char *s, sg_backbone *out) {
    int i = parse_name(s, backbone_names, SG_N_BACKBONES);
    if (i < 0) return SG_ERR_CONFIG;
    *out = (sg_backbone)i;
    return SG_OK;
}

sg_status sg_arch_parse(const char *s, sg_arch *out) {
    int i = parse_name(s, arch_names, SG_N_ARCHS);
    if (i < 0) return SG_ERR_CONFIG;
    *out = (sg_arch)i;
    return SG_OK;
}

sg_status sg_names_parse(const char *s, sg_names *out) {
    int i = parse_name(s, names_names, 2);
    if (i < 0) return SG_ERR_CONFIG;
    *out = (sg_names)i;
    return SG_OK;
}

void sg_model_opts_default(sg_model_opts *o, sg_backbone backbone) {
    memset(o, 0, sizeof *o);
    o->backbone = backbone;
    o->output_stride = 8;
    o->aspp_rates[0] = 12;
    o->aspp_rates[1] = 24;
    o->aspp_rates[2] = 36;
    o->n_aspp_rates = 3;
    o->num_classes = 21;
    o->aux_head = 1;
    o->aspp_dropout = 0.5f;
    o->aux_dropout = 0.1f;
    o->head_dropout = 0.1f;
    o->base_width = 64;
    o->bn_eps = 1e-5f;
    o->bn_momentum = 0.1f;
    o->arch = SG_ARCH_DEEPLABV3;
    o->names = is_v1c(backbone) ? SG_NAMES_MMSEG : SG_NAMES_TORCHVISION;
    o->width_mult = 1.0;
    if (is_mobilenet(backbone)) o->output_stride = 16; /* dilated=True: C4 at stride 16 */
}

/* torchvision's segmentation models on MobileNetV3-Large
 * (segmentation/deeplabv3.py _deeplabv3_mobilenetv3, lraspp.py
 * _lraspp_mobilenetv3): deeplabv3 (aux FCNHead optional) and lraspp (no aux,
 * lraspp.py refuses aux_loss), output stride 16. The (arch, backbone,
 * names) rules are combination_problem's; these are the other options. */
static sg_status validate_mobilenet(const sg_model_opts *o) {
    if (o->output_stride != 16) {
        SG_ERROR("model.output_stride = %d with model.backbone = mobilenet_v3_large: torchvision "
                 "dilates its last stage only (mobilenet_v3_large(dilated=True)), output stride "
                 "16; set model.output_stride: 16",
                 o->output_stride);
        return SG_ERR_CONFIG;
    }
    if (o->arch == SG_ARCH_LRASPP && o->aux_head) {
        SG_ERROR("model.arch = lraspp with model.aux_head = true: LR-ASPP has no auxiliary head "
                 "(torchvision's lraspp_mobilenet_v3_large refuses aux_loss); set "
                 "model.aux_head: false");
        return SG_ERR_CONFIG;
    }
    if (!(o->width_mult >= 0.05 && o->width_mult <= 4)) {
        SG_ERROR("model.width_mult = %g: expected 0.05..4 (1.0 = torchvision)", o->width_mult);
        return SG_ERR_CONFIG;
    }
    for (int i = 0; i < 4; i++)
        if (o->blocks[i]) {
            SG_ERROR("model blocks[%d] = %d: block counts apply to the ResNet backbones only; "
                     "mobilenet_v3_large has torchvision's fixed 15 blocks",
                     i, o->blocks[i]);
            return SG_ERR_CONFIG;
        }
    return SG_OK;
}

/* NULL if the (arch, backbone, names) of o is built; else why not, written
 * to buf, and *key = the config key to change. */
static const char *combination_problem(const sg_model_opts *o, const char **key, char *buf,
                                       size_t cap) {
    *key = "model.arch";
    if ((int)o->arch < 0 || (int)o->arch >= SG_N_ARCHS) {
        snprintf(buf, cap, "model.arch %d unknown (deeplabv3|fcn|deeplabv3plus|lraspp)",
                 (int)o->arch);
        return buf;
    }
    if ((int)o->names < 0 || (int)o->names > 1) {
        *key = "model.names";
        snprintf(buf, cap, "model.names %d unknown (torchvision|mmseg)", (int)o->names);
        return buf;
    }
    if (o->arch == SG_ARCH_LRASPP && !is_mobilenet(o->backbone)) {
        *key = "model.backbone";
        snprintf(buf, cap,
                 "model.arch = lraspp with model.backbone = %s: torchvision defines LR-ASPP on "
                 "mobilenet_v3_large only (lraspp_mobilenet_v3_large); set model.backbone: "
                 "mobilenet_v3_large",
                 sg_backbone_name(o->backbone));
        return buf;
    }
    if (is_mobilenet(o->backbone) && o->arch != SG_ARCH_DEEPLABV3 && o->arch != SG_ARCH_LRASPP) {
        snprintf(buf, cap,
                 "model.arch = %s with model.backbone = mobilenet_v3_large: torchvision defines "
                 "deeplabv3_mobilenet_v3_large and lraspp_mobilenet_v3_large only; set "
                 "model.arch: deeplabv3 or lraspp",
                 sg_arch_name(o->arch));
        return buf;
    }
    if (is_mobilenet(o->backbone) && o->names != SG_NAMES_TORCHVISION) {
        *key = "model.names";
        snprintf(buf, cap,
                 "model.names = %s with model.backbone = mobilenet_v3_large: its models are "
                 "torchvision's (mmsegmentation's MobileNetV3 is another tree); set "
                 "model.names: torchvision",
                 sg_names_name(o->names));
        return buf;
    }
    if (o->arch == SG_ARCH_DEEPLABV3PLUS && o->names != SG_NAMES_MMSEG) {
        *key = "model.names";
        snprintf(buf, cap,
                 "model.arch = deeplabv3plus with model.names = %s: torchvision defines no "
                 "DeepLabV3+; set model.names: mmseg (mmseg's DepthwiseSeparableASPPHead and "
                 "state-dict names)",
                 sg_names_name(o->names));
        return buf;
    }
    if (o->arch == SG_ARCH_DEEPLABV3PLUS && !is_bottleneck(o->backbone)) {
        *key = "model.backbone";
        snprintf(buf, cap,
                 "model.arch = deeplabv3plus with model.backbone = %s: mmseg's DeepLabV3+ on "
                 "ResNet-18/34 uses a narrower head (channels 128, c1 channels 12) that segtrain "
                 "does not build; use resnet50v1c or resnet101v1c (mmseg's R-50/101-D8), or "
                 "resnet50/resnet101",
                 sg_backbone_name(o->backbone));
        return buf;
    }
    if (is_v1c(o->backbone) && o->names == SG_NAMES_TORCHVISION) {
        *key = "model.names";
        snprintf(buf, cap,
                 "model.backbone = %s with model.names = torchvision: ResNetV1c is "
                 "mmsegmentation's backbone and torchvision defines no head on it; set "
                 "model.names: mmseg (mmseg's ASPPHead / FCNHead and state-dict names)",
                 sg_backbone_name(o->backbone));
        return buf;
    }
    return NULL;
}

/* SG_OK, or SG_ERR_CONFIG after logging why no anchor defines the
 * combination (or segtrain does not build it). */
static sg_status validate_combination(const sg_model_opts *o) {
    char buf[512];
    const char *key, *why = combination_problem(o, &key, buf, sizeof buf);
    if (!why) return SG_OK;
    SG_ERROR("%s", why);
    return SG_ERR_CONFIG;
}

sg_status sg_model_config_check(const sg_config *cfg) {
    const sg_model_cfg *mc = &cfg->model;
    sg_backbone b;
    sg_model_opts o;
    if (sg_backbone_parse(mc->backbone, &b) != SG_OK)
        return sg_config_reject(cfg, "model.backbone",
                                "'%s': expected resnet18, resnet34, resnet50, resnet101, "
                                "resnet50v1c, resnet101v1c or mobilenet_v3_large",
                                mc->backbone);
    sg_model_opts_default(&o, b);
    if (sg_arch_parse(mc->arch, &o.arch) != SG_OK)
        return sg_config_reject(cfg, "model.arch",
                                "'%s': expected deeplabv3, fcn, deeplabv3plus or lraspp", mc->arch);
    if (sg_names_parse(mc->names, &o.names) != SG_OK)
        return sg_config_reject(cfg, "model.names", "'%s': expected torchvision or mmseg",
                                mc->names);
    char buf[512];
    const char *key, *why = combination_problem(&o, &key, buf, sizeof buf);
    return why ? sg_config_reject(cfg, key, "%s", why) : SG_OK;
}

/* SG_OK, or SG_ERR_CONFIG after logging the option. */
static sg_status validate_opts(const sg_model_opts *o) {
    if ((int)o->backbone < 0 || (int)o->backbone >= SG_N_BACKBONES) {
        SG_ERROR("model: backbone %d unknown (resnet18|resnet34|resnet50|resnet101|resnet50v1c|"
                 "resnet101v1c|mobilenet_v3_large)",
                 (int)o->backbone);
        return SG_ERR_CONFIG;
    }
    if (validate_combination(o) != SG_OK) return SG_ERR_CONFIG;
    if (is_mobilenet(o->backbone) && validate_mobilenet(o) != SG_OK) return SG_ERR_CONFIG;
    if (o->output_stride != 8 && o->output_stride != 16) {
        SG_ERROR("model.output_stride = %d: expected 8 or 16", o->output_stride);
        return SG_ERR_CONFIG;
    }
    if (o->n_aspp_rates < 1 || o->n_aspp_rates > SG_MODEL_MAX_RATES) {
        SG_ERROR("model.aspp_rates: %d rates, expected 1..%d", o->n_aspp_rates, SG_MODEL_MAX_RATES);
        return SG_ERR_CONFIG;
    }
    for (int i = 0; i < o->n_aspp_rates; i++)
        if (o->aspp_rates[i] < 1 || o->aspp_rates[i] > 1024) {
            SG_ERROR("model.aspp_rates[%d] = %d: expected 1..1024", i, o->aspp_rates[i]);
            return SG_ERR_CONFIG;
        }
    if (o->num_classes < 1 || o->num_classes > 255) {
        SG_ERROR("model.num_classes = %d: expected 1..255 (labels are uint8, 255 = ignore)",
                 o->num_classes);
        return SG_ERR_CONFIG;
    }
    if (!(o->aspp_dropout >= 0 && o->aspp_dropout < 1) ||
        !(o->aux_dropout >= 0 && o->aux_dropout < 1) ||
        !(o->head_dropout >= 0 && o->head_dropout < 1)) {
        SG_ERROR("model.aspp_dropout = %g / model.aux_dropout = %g / model.head_dropout = %g: "
                 "expected 0 <= p < 1",
                 o->aspp_dropout, o->aux_dropout, o->head_dropout);
        return SG_ERR_CONFIG;
    }
    if (o->base_width < 1 || o->base_width > 1024) {
        SG_ERROR("model.base_width = %d: expected 1..1024 (64 = torchvision)", o->base_width);
        return SG_ERR_CONFIG;
    }
    if (!(o->bn_eps > 0) || !(o->bn_momentum >= 0 && o->bn_momentum <= 1)) {
        SG_ERROR("model.bn_eps = %g must be > 0 and model.bn_momentum = %g in [0, 1]", o->bn_eps,
                 o->bn_momentum);
        return SG_ERR_CONFIG;
    }
    for (int i = 0; i < 4; i++)
        if (o->blocks[i] < 0 || o->blocks[i] > 64) {
            SG_ERROR("model blocks[%d] = %d: expected 0 (backbone default) or 1..64", i,
                     o->blocks[i]);
            return SG_ERR_CONFIG;
        }
    return SG_OK;
}

sg_status sg_model_opts_from_config(sg_model_opts *o, const sg_config *cfg) {
    const sg_model_cfg *mc = &cfg->model;
    sg_backbone b;
    if (sg_backbone_parse(mc->backbone, &b) != SG_OK) {
        SG_ERROR("config model.backbone = '%s': expected resnet18, resnet34, resnet50, "
                 "resnet101, resnet50v1c, resnet101v1c or mobilenet_v3_large",
                 mc->backbone);
        return SG_ERR_CONFIG;
    }
    sg_model_opts_default(o, b);
    if (sg_arch_parse(mc->arch, &o->arch) != SG_OK) {
        SG_ERROR("config model.arch = '%s': expected deeplabv3, fcn, deeplabv3plus or lraspp",
                 mc->arch);
        return SG_ERR_CONFIG;
    }
    if (sg_names_parse(mc->names, &o->names) != SG_OK) {
        SG_ERROR("config model.names = '%s': expected torchvision or mmseg", mc->names);
        return SG_ERR_CONFIG;
    }
    if (mc->n_aspp_rates < 1 || mc->n_aspp_rates > SG_MODEL_MAX_RATES) {
        SG_ERROR("config model.aspp_rates: %d rates given, expected 1..%d", mc->n_aspp_rates,
                 SG_MODEL_MAX_RATES);
        return SG_ERR_CONFIG;
    }
    o->output_stride = mc->output_stride;
    o->n_aspp_rates = mc->n_aspp_rates;
    for (int i = 0; i < mc->n_aspp_rates; i++) o->aspp_rates[i] = mc->aspp_rates[i];
    o->num_classes = mc->num_classes;
    o->aux_head = mc->aux_head != 0;
    o->aspp_dropout = (float)mc->aspp_dropout;
    o->aux_dropout = (float)mc->aux_dropout;
    o->head_dropout = (float)mc->head_dropout;
    o->base_width = mc->base_width;
    o->bn_eps = (float)mc->bn_eps;
    o->bn_momentum = (float)mc->bn_momentum;
    o->width_mult = mc->width_mult;
    return validate_opts(o);
}

/* ---------------- registry ---------------- */

static int add_param(sg_model *m, const char *prefix, const char *leaf, sg_param_kind kind,
                     int ndim, int s0, int s1, int s2, int s3) {
    if (m->n_params == m->cap_params) {
        m->cap_params = m->cap_params ? 2 * m->cap_params : 256;
        m->params = realloc(m->params, (size_t)m->cap_params * sizeof *m->params);
        SG_CHECK(m->params, "out of host memory growing the parameter registry");
    }
    sg_param *p = &m->params[m->n_params];
    memset(p, 0, sizeof *p);
    int len = snprintf(p->name, sizeof p->name, "%s.%s", prefix, leaf);
    SG_CHECK(len > 0 && (size_t)len < sizeof p->name, "parameter name too long: %s.%s", prefix,
             leaf);
    p->ndim = ndim;
    p->shape[0] = s0;
    p->shape[1] = s1;
    p->shape[2] = s2;
    p->shape[3] = s3;
    p->count = 1;
    for (int i = 0; i < ndim; i++) p->count *= (size_t)p->shape[i];
    p->kind = kind;
    p->dtype = kind == SG_PK_NUM_BATCHES ? SG_DT_I64 : SG_DT_F32;
    p->is_buffer = kind >= SG_PK_RUNNING_MEAN;
    p->trainable = !p->is_buffer;
    p->is_head = strncmp(prefix, "encoder", 7) != 0;
    return m->n_params++;
}

/* ---------------- graph ---------------- */

static int new_tensor(sg_model *m) {
    if (m->n_t == m->cap_t) {
        m->cap_t = m->cap_t ? 2 * m->cap_t : 256;
        m->t = realloc(m->t, (size_t)m->cap_t * sizeof *m->t);
        SG_CHECK(m->t, "out of host memory growing the tensor list");
    }
    sg_tensor *t = &m->t[m->n_t];
    memset(t, 0, sizeof *t);
    t->producer = -1;
    t->last_consumer = -1;
    return m->n_t++;
}

static sg_layer *new_layer(sg_model *m, int type, const int *in, int n_in) {
    if (m->n_l == m->cap_l) {
        m->cap_l = m->cap_l ? 2 * m->cap_l : 256;
        m->l = realloc(m->l, (size_t)m->cap_l * sizeof *m->l);
        SG_CHECK(m->l, "out of host memory growing the layer list");
    }
    sg_layer *l = &m->l[m->n_l];
    memset(l, 0, sizeof *l);
    l->type = type;
    l->n_in = n_in;
    for (int i = 0; i < n_in; i++) l->in[i] = in[i];
    l->out = new_tensor(m);
    m->t[l->out].producer = m->n_l;
    l->w_param = l->b_param = -1;
    l->ref = -1;
    m->n_l++;
    return l;
}

static int conv_g(sg_model *m, const char *prefix, int x, int cin, int k, int r, int stride,
                  int pad, int dil, int groups, int bias) {
    int g = groups > 1 ? groups : 1;
    int w = add_param(m, prefix, "weight", SG_PK_CONV_WEIGHT, 4, k, cin / g, r, r);
    int b = bias ? add_param(m, prefix, "bias", SG_PK_CONV_BIAS, 1, k, 0, 0, 0) : -1;
    sg_layer *l = new_layer(m, L_CONV, &x, 1);
    l->w_param = w;
    l->b_param = b;
    l->k = k;
    l->r = r;
    l->stride = stride;
    l->pad = pad;
    l->dil = dil;
    l->groups = g;
    m->t[l->out].c = k;
    return l->out;
}

static int conv(sg_model *m, const char *prefix, int x, int cin, int k, int r, int stride, int pad,
                int dil, int bias) {
    return conv_g(m, prefix, x, cin, k, r, stride, pad, dil, 1, bias);
}

static int bn(sg_model *m, const char *prefix, int x, int c, int relu) {
    int p0 = add_param(m, prefix, "weight", SG_PK_BN_WEIGHT, 1, c, 0, 0, 0);
    add_param(m, prefix, "bias", SG_PK_BN_BIAS, 1, c, 0, 0, 0);
    add_param(m, prefix, "running_mean", SG_PK_RUNNING_MEAN, 1, c, 0, 0, 0);
    add_param(m, prefix, "running_var", SG_PK_RUNNING_VAR, 1, c, 0, 0, 0);
    add_param(m, prefix, "num_batches_tracked", SG_PK_NUM_BATCHES, 0, 0, 0, 0, 0);
    sg_layer *l = new_layer(m, L_BN, &x, 1);
    for (int i = 0; i < 5; i++) l->bn_p[i] = p0 + i;
    l->relu = relu;
    l->bn_eps = m->o.bn_eps;
    l->bn_momentum = m->o.bn_momentum;
    m->t[l->out].c = c;
    m->n_bn++;
    return l->out;
}

static int conv_bn(sg_model *m, const char *pre, const char *cname, const char *bname, int x,
                   int cin, int k, int r, int stride, int pad, int dil, int relu) {
    char a[160], b[160];
    snprintf(a, sizeof a, "%s%s", pre, cname);
    snprintf(b, sizeof b, "%s%s", pre, bname);
    return bn(m, b, conv(m, a, x, cin, k, r, stride, pad, dil, 0), k, relu);
}

static int simple(sg_model *m, int type, int x, int c) {
    sg_layer *l = new_layer(m, type, &x, 1);
    m->t[l->out].c = c;
    return l->out;
}

static int add_relu(sg_model *m, int a, int b, int c) {
    int in[2] = {a, b};
    sg_layer *l = new_layer(m, L_ADD_RELU, in, 2);
    m->t[l->out].c = c;
    return l->out;
}

static int resize_to(sg_model *m, int x, int ref, int c) {
    sg_layer *l = new_layer(m, L_RESIZE, &x, 1);
    l->ref = ref;
    m->t[l->out].c = c;
    return l->out;
}

static int dropout(sg_model *m, int x, float p, int c) {
    if (p == 0.0f) return x; /* identity: no layer, no memory */
    sg_layer *l = new_layer(m, L_DROPOUT, &x, 1);
    l->p = p;
    l->drop_id = m->n_dropout++;
    m->t[l->out].c = c;
    return l->out;
}

typedef struct resnet_state {
    int inplanes, dilation, bottleneck;
    int mm; /* mmseg's BasicBlock: conv2 is never dilated */
} resnet_state;

/* torchvision ResNet._make_layer with replace_stride_with_dilation. */
static int make_layer(sg_model *m, resnet_state *st, int li, int x, int planes, int blocks,
                      int stride, int dilate) {
    int exp = st->bottleneck ? 4 : 1;
    int prev_dil = st->dilation;
    if (dilate) {
        st->dilation *= stride;
        stride = 1;
    }
    for (int bi = 0; bi < blocks; bi++) {
        char pre[96];
        snprintf(pre, sizeof pre, "encoder.layer%d.%d.", li, bi);
        int s = bi == 0 ? stride : 1;
        int d = bi == 0 ? prev_dil : st->dilation;
        int need_ds = bi == 0 && (stride != 1 || st->inplanes != planes * exp);
        int y;
        if (st->bottleneck) {
            y = conv_bn(m, pre, "conv1", "bn1", x, st->inplanes, planes, 1, 1, 0, 1, 1);
            y = conv_bn(m, pre, "conv2", "bn2", y, planes, planes, 3, s, d, d, 1);
            y = conv_bn(m, pre, "conv3", "bn3", y, planes, planes * 4, 1, 1, 0, 1, 0);
        } else {
            /* torchvision's BasicBlock refuses dilation > 1; segtrain dilates
             * both 3x3 convs (padding = dilation). mmseg's BasicBlock
             * (backbones/resnet.py) dilates conv1 only: conv2 has padding 1. */
            int d2 = st->mm ? 1 : d;
            y = conv_bn(m, pre, "conv1", "bn1", x, st->inplanes, planes, 3, s, d, d, 1);
            y = conv_bn(m, pre, "conv2", "bn2", y, planes, planes, 3, 1, d2, d2, 0);
        }
        int idn = x;
        if (need_ds)
            idn = conv_bn(m, pre, "downsample.0", "downsample.1", x, st->inplanes, planes * exp, 1,
                          s, 0, 1, 0);
        x = add_relu(m, y, idn, planes * exp);
        st->inplanes = planes * exp;
    }
    return x;
}

static int layer_n(sg_model *m, int type, const int *in, int n_in, int c) {
    sg_layer *l = new_layer(m, type, in, n_in);
    m->t[l->out].c = c;
    return l->out;
}

static int dropout2d(sg_model *m, int x, float p, int c) {
    if (p == 0.0f) return x;
    sg_layer *l = new_layer(m, L_DROPOUT2D, &x, 1);
    l->p = p;
    l->drop_id = m->n_dropout++;
    m->t[l->out].c = c;
    return l->out;
}

static int concat(sg_model *m, const int *in, int n_in, int c) {
    sg_layer *l = new_layer(m, L_CONCAT, in, n_in);
    m->t[l->out].c = c;
    return l->out;
}

/* mmcv ConvModule(cin, k, r, padding = dilation * (r / 2), dilation): conv
 * without bias, "bn", ReLU; names <pre>conv.weight, <pre>bn.* */
static int conv_module(sg_model *m, const char *pre, int x, int cin, int k, int r, int dil) {
    return conv_bn(m, pre, "conv", "bn", x, cin, k, r, 1, dil * (r / 2), dil, 1);
}

/* torchvision DeepLabHead (deeplabv3.py): ASPP (1x1, rates, pooling last,
 * project 1x1 + dropout) -> 3x3 conv, BN, ReLU -> classifier decoder.4 */
static int tv_deeplab_head(sg_model *m, int l4, int c4) {
    const sg_model_opts *o = &m->o;
    int inner = 4 * o->base_width, nb = o->n_aspp_rates + 2;
    int br[SG_MAX_IN];
    br[0] = conv_bn(m, "decoder.0.convs.0.", "0", "1", l4, c4, inner, 1, 1, 0, 1, 1);
    for (int i = 0; i < o->n_aspp_rates; i++) {
        char pre[96];
        snprintf(pre, sizeof pre, "decoder.0.convs.%d.", i + 1);
        int r = o->aspp_rates[i];
        br[i + 1] = conv_bn(m, pre, "0", "1", l4, c4, inner, 3, 1, r, r, 1);
    }
    {
        char pre[96];
        snprintf(pre, sizeof pre, "decoder.0.convs.%d.", nb - 1);
        int p = simple(m, L_AVGPOOL, l4, c4);
        p = conv_bn(m, pre, "1", "2", p, c4, inner, 1, 1, 0, 1, 1);
        br[nb - 1] = resize_to(m, p, l4, inner);
    }
    int y = concat(m, br, nb, nb * inner);
    y = conv_bn(m, "decoder.0.project.", "0", "1", y, nb * inner, inner, 1, 1, 0, 1, 1);
    y = dropout(m, y, o->aspp_dropout, inner);
    y = conv_bn(m, "decoder.", "1", "2", y, inner, inner, 3, 1, 1, 1, 1);
    return conv(m, "decoder.4", y, inner, o->num_classes, 1, 1, 0, 1, 1);
}

/* torchvision FCNHead (fcn.py): 3x3 conv cin -> cin/4, BN, ReLU, dropout,
 * 1x1 classifier <prefix>.4 with bias */
static int tv_fcn_head(sg_model *m, const char *prefix, int x, int cin, float p) {
    char pre[96], cls[96];
    snprintf(pre, sizeof pre, "%s.", prefix);
    snprintf(cls, sizeof cls, "%s.4", prefix);
    int ci = cin / 4;
    int y = conv_bn(m, pre, "0", "1", x, cin, ci, 3, 1, 1, 1, 1);
    y = dropout(m, y, p, ci);
    return conv(m, cls, y, ci, m->o.num_classes, 1, 1, 0, 1, 1);
}

/* mmseg BaseDecodeHead.cls_seg: Dropout2d, then conv_seg (1x1, bias) */
static int mm_cls_seg(sg_model *m, const char *prefix, int x, int c, float p) {
    char cls[96];
    snprintf(cls, sizeof cls, "%s.conv_seg", prefix);
    x = dropout2d(m, x, p, c);
    return conv(m, cls, x, c, m->o.num_classes, 1, 1, 0, 1, 1);
}

/* mmseg ASPPHead (decode_heads/aspp_head.py): image_pool (avg pool +
 * ConvModule 1x1, upsampled) first, then aspp_modules (1x1, then 3x3 at each
 * rate), concat, bottleneck ConvModule 3x3, cls_seg. channels = 8 * width
 * (512, the R-50-D8 configs). */
static int mm_aspp_head(sg_model *m, int l4, int c4) {
    const sg_model_opts *o = &m->o;
    int ch = 8 * o->base_width, nb = o->n_aspp_rates + 2;
    int br[SG_MAX_IN];
    int p = simple(m, L_AVGPOOL, l4, c4);
    p = conv_module(m, "decoder.image_pool.1.", p, c4, ch, 1, 1);
    br[0] = resize_to(m, p, l4, ch);
    br[1] = conv_module(m, "decoder.aspp_modules.0.", l4, c4, ch, 1, 1);
    for (int i = 0; i < o->n_aspp_rates; i++) {
        char pre[96];
        snprintf(pre, sizeof pre, "decoder.aspp_modules.%d.", i + 1);
        br[i + 2] = conv_module(m, pre, l4, c4, ch, 3, o->aspp_rates[i]);
    }
    int y = concat(m, br, nb, nb * ch);
    y = conv_module(m, "decoder.bottleneck.", y, nb * ch, ch, 3, 1);
    return mm_cls_seg(m, "decoder", y, ch, o->head_dropout);
}

/* mmseg FCNHead (decode_heads/fcn_head.py): num_convs ConvModules 3x3
 * (convs.i), with concat_input the input and their output concatenated into
 * conv_cat (3x3), then cls_seg. */
static int mm_fcn_head(sg_model *m, const char *prefix, int x, int cin, int ch, int num_convs,
                       int concat_input, float p) {
    int y = x, c = cin;
    for (int i = 0; i < num_convs; i++) {
        char pre[96];
        snprintf(pre, sizeof pre, "%s.convs.%d.", prefix, i);
        y = conv_module(m, pre, y, c, ch, 3, 1);
        c = ch;
    }
    if (concat_input) {
        char pre[96];
        snprintf(pre, sizeof pre, "%s.conv_cat.", prefix);
        int in[2] = {x, y};
        y = concat(m, in, 2, cin + ch);
        y = conv_module(m, pre, y, cin + ch, ch, 3, 1);
    }
    return mm_cls_seg(m, prefix, y, ch, p);
}

/* ---------------- the head builders' table (model_graph.h) ---------------- */

static int mg_conv_bn(sg_model *m, const char *pre, const char *cname, const char *bname, int x,
                      int cin, int k, int r, int pad, int dil, int groups, int relu) {
    char a[160], b[160];
    snprintf(a, sizeof a, "%s%s", pre, cname);
    snprintf(b, sizeof b, "%s%s", pre, bname);
    return bn(m, b, conv_g(m, a, x, cin, k, r, 1, pad, dil, groups, 0), k, relu);
}
static int mg_avgpool(sg_model *m, int x, int c) { return simple(m, L_AVGPOOL, x, c); }

static sg_mg_builder graph_builder(sg_model *m) {
    sg_mg_builder g = {m,           &m->o,      conv_g,    bn,     layer_n,   mg_conv_bn,
                       conv_module, mg_avgpool, resize_to, concat, mm_cls_seg};
    return g;
}

/* torchvision's deeplabv3_mobilenet_v3_large (DeepLabHead on features[16],
 * aux FCNHead on features[stage_indices[-4]]) and lraspp_mobilenet_v3_large
 * (LRASPPHead on both). */
static void build_mobilenet(sg_model *m) {
    const sg_model_opts *o = &m->o;
    int x = new_tensor(m); /* 0: input */
    m->t[x].c = 3;
    const sg_mg_builder g = graph_builder(m);
    int low, c_low, c_high;
    int high = sg_mnv3_large_build(&g, &low, &c_low, &c_high);
    m->t_aux = -1;
    if (o->arch == SG_ARCH_LRASPP) {
        int y = sg_lraspp_head(&g, low, c_low, high, c_high, 2 * o->base_width);
        m->t_out = resize_to(m, y, 0, o->num_classes);
        return;
    }
    int y = tv_deeplab_head(m, high, c_high);
    m->t_out = resize_to(m, y, 0, o->num_classes);
    if (o->aux_head) {
        int a = tv_fcn_head(m, "aux_head", low, c_low, o->aux_dropout);
        m->t_aux = resize_to(m, a, 0, o->num_classes);
    }
}

static void build(sg_model *m) {
    const sg_model_opts *o = &m->o;
    if (is_mobilenet(o->backbone)) {
        build_mobilenet(m);
        return;
    }
    int bw = o->base_width;
    int bottleneck = is_bottleneck(o->backbone);
    int blocks[4];
    int custom = o->blocks[0] || o->blocks[1] || o->blocks[2] || o->blocks[3];
    for (int i = 0; i < 4; i++)
        blocks[i] = custom ? (o->blocks[i] ? o->blocks[i] : 1) : backbone_blocks[o->backbone][i];
    int dil3 = o->output_stride == 8, dil4 = 1;

    int x = new_tensor(m); /* 0: input */
    m->t[x].c = 3;
    if (is_v1c(o->backbone)) {
        /* mmseg ResNet._make_stem_layer with deep_stem (backbones/resnet.py):
         * stem = [conv3x3 s2 -> stem/2, BN, ReLU, conv3x3 -> stem/2, BN, ReLU,
         * conv3x3 -> stem, BN, ReLU], stem_channels = base width */
        int h = bw / 2 > 0 ? bw / 2 : 1;
        x = conv_bn(m, "encoder.stem.", "0", "1", x, 3, h, 3, 2, 1, 1, 1);
        x = conv_bn(m, "encoder.stem.", "3", "4", x, h, h, 3, 1, 1, 1, 1);
        x = conv_bn(m, "encoder.stem.", "6", "7", x, h, bw, 3, 1, 1, 1, 1);
    } else {
        x = conv_bn(m, "encoder.", "conv1", "bn1", x, 3, bw, 7, 2, 3, 1, 1);
    }
    x = simple(m, L_MAXPOOL, x, bw);
    /* mmseg's ResLayer with contract_dilation (dilations 1,1,2,4, strides
     * 1,2,1,1 for -D8) gives each layer's first block half the layer's
     * dilation: the same rule as torchvision's replace_stride_with_dilation */
    resnet_state st = {bw, 1, bottleneck, o->names == SG_NAMES_MMSEG};
    int l1 = make_layer(m, &st, 1, x, bw, blocks[0], 1, 0), c1 = st.inplanes;
    x = make_layer(m, &st, 2, l1, 2 * bw, blocks[1], 2, 0);
    int l3 = make_layer(m, &st, 3, x, 4 * bw, blocks[2], 2, dil3);
    int l4 = make_layer(m, &st, 4, l3, 8 * bw, blocks[3], 2, dil4);
    int c4 = st.inplanes, c3 = c4 / 2;

    int y;
    int mm = o->names == SG_NAMES_MMSEG;
    if (o->arch == SG_ARCH_FCN)
        y = mm ? mm_fcn_head(m, "decoder", l4, c4, 8 * bw, 2, 1, o->head_dropout)
               : tv_fcn_head(m, "decoder", l4, c4, o->head_dropout);
    else if (o->arch == SG_ARCH_DEEPLABV3PLUS) {
        sg_mg_builder g = graph_builder(m);
        y = sg_mg_sepaspp_head(&g, l1, c1, l4, c4);
    } else y = mm ? mm_aspp_head(m, l4, c4) : tv_deeplab_head(m, l4, c4);
    m->t_out = resize_to(m, y, 0, o->num_classes);

    m->t_aux = -1;
    if (o->aux_head) {
        /* torchvision FCNHead(c3); mmseg FCNHead(num_convs 1, channels 256 =
         * c3 / 4, no concat) */
        int a = mm ? mm_fcn_head(m, "aux_head", l3, c3, c3 / 4, 1, 0, o->aux_dropout)
                   : tv_fcn_head(m, "aux_head", l3, c3, o->aux_dropout);
        m->t_aux = resize_to(m, a, 0, o->num_classes);
    }
}

void sg_model_registry_size(const sg_model_opts *o, int *tensors, size_t *f32, size_t *i64) {
    sg_model tmp;
    memset(&tmp, 0, sizeof tmp);
    tmp.o = *o;
    build(&tmp);
    *tensors = tmp.n_params;
    *f32 = *i64 = 0;
    for (int i = 0; i < tmp.n_params; i++) {
        if (tmp.params[i].kind == SG_PK_NUM_BATCHES) (*i64)++;
        else *f32 += tmp.params[i].count;
    }
    free(tmp.params);
    free(tmp.t);
    free(tmp.l);
}

/* Assigns offsets into the three allocations and allocates them. */
static void allocate_registry(sg_model *m) {
    sg_ops const *ops = m->be->ops;
    m->n_weights = m->n_buffers = 0;
    m->head_offset = (size_t)-1;
    int nbt = 0;
    for (int i = 0; i < m->n_params; i++) {
        sg_param *p = &m->params[i];
        if (p->kind == SG_PK_NUM_BATCHES) {
            p->offset = (size_t)nbt++;
        } else if (p->is_buffer) {
            p->offset = m->n_buffers;
            m->n_buffers += p->count;
        } else {
            if (p->is_head && m->head_offset == (size_t)-1) m->head_offset = m->n_weights;
            p->offset = m->n_weights;
            m->n_weights += p->count;
        }
    }
    if (m->head_offset == (size_t)-1) m->head_offset = m->n_weights;
    m->weights = ops->alloc(m->be, m->n_weights * sizeof(float));
    m->grads = ops->alloc(m->be, m->n_weights * sizeof(float));
    m->buffers = ops->alloc(m->be, m->n_buffers * sizeof(float));
    m->nbt = calloc((size_t)(nbt ? nbt : 1), sizeof(int64_t));
    SG_CHECK(m->nbt, "out of host memory");
    for (int i = 0; i < m->n_params; i++) {
        sg_param *p = &m->params[i];
        if (p->kind == SG_PK_NUM_BATCHES) {
            p->i64 = &m->nbt[p->offset];
        } else if (p->is_buffer) {
            p->data = m->buffers + p->offset;
        } else {
            p->data = m->weights + p->offset;
            p->grad = m->grads + p->offset;
        }
    }
}

sg_model *sg_model_create(sg_backend *be, const sg_model_opts *o) {
    if (!be || !o) {
        SG_ERROR("sg_model_create: backend and options are required");
        return NULL;
    }
    if (validate_opts(o) != 0) return NULL;
    sg_model *m = calloc(1, sizeof *m);
    SG_CHECK(m, "out of host memory creating the model");
    m->be = be;
    m->o = *o;
    m->fwd_train = -1;
    build(m);
    allocate_registry(m);
    sg_model_init(m, 0);
    sg_model_update_grad_flags(m);
    return m;
}

void sg_model_destroy(sg_model *m) {
    if (!m) return;
    sg_model_release_plan(m);
    const sg_ops *ops = m->be->ops;
    ops->free(m->be, m->weights);
    ops->free(m->be, m->grads);
    ops->free(m->be, m->buffers);
    free(m->nbt);
    free(m->params);
    free(m->t);
    for (int i = 0; i < m->n_l; i++) {
        free(m->l[i].chmask);
        if (m->l[i].chscale) m->be->ops->free(m->be, m->l[i].chscale);
    }
    free(m->l);
    free(m->grad_order);
    sg_model_profile(m, 0);
    free(m);
}

const sg_model_opts *sg_model_get_opts(const sg_model *m) { return &m->o; }
sg_backend *sg_model_backend(const sg_model *m) { return m->be; }
int sg_model_num_params(const sg_model *m) { return m->n_params; }

sg_param *sg_model_param(sg_model *m, int i) {
    return (i >= 0 && i < m->n_params) ? &m->params[i] : NULL;
}

int sg_model_find_index(const sg_model *m, const char *name) {
    for (int i = 0; i < m->n_params; i++)
        if (strcmp(m->params[i].name, name) == 0) return i;
    return -1;
}

sg_param *sg_model_find(sg_model *m, const char *name) {
    int i = sg_model_find_index(m, name);
    return i < 0 ? NULL : &m->params[i];
}

size_t sg_model_param_count(const sg_model *m, int trainable_only) {
    size_t n = 0;
    for (int i = 0; i < m->n_params; i++) {
        const sg_param *p = &m->params[i];
        if (!p->is_buffer && (!trainable_only || p->trainable)) n += p->count;
    }
    return n;
}

float *sg_model_weights(sg_model *m) { return m->weights; }
float *sg_model_grads(sg_model *m) { return m->grads; }
float *sg_model_buffers(sg_model *m) { return m->buffers; }
size_t sg_model_buffer_count(const sg_model *m) { return m->n_buffers; }
size_t sg_model_head_offset(const sg_model *m) { return m->head_offset; }

/* ---------------- init ---------------- */

/* N(0, std^2) by Box-Muller from the counter RNG: element j from draws j, j+1 */
static void init_normal(float *dst, size_t count, uint64_t key, double std) {
    for (size_t j = 0; j < count; j += 2) {
        double u1 = sg_rng_uniform_d(key, j), u2 = sg_rng_uniform_d(key, j + 1);
        double r = sqrt(-2.0 * log(1.0 - u1)), a = 2.0 * M_PI * u2;
        dst[j] = (float)(std * r * cos(a));
        if (j + 1 < count) dst[j + 1] = (float)(std * r * sin(a));
    }
}

void sg_model_init(sg_model *m, uint64_t seed) {
    const sg_ops *ops = m->be->ops;
    float *hw = malloc((m->n_weights ? m->n_weights : 1) * sizeof(float));
    float *hb = malloc((m->n_buffers ? m->n_buffers : 1) * sizeof(float));
    SG_CHECK(hw && hb, "out of host memory initialising %zu parameters", m->n_weights);
    for (int i = 0; i < m->n_params; i++) {
        sg_param *p = &m->params[i];
        uint64_t key = sg_rng_key(seed, (uint64_t)i, 0, 0, SG_RNG_INIT);
        switch (p->kind) {
        case SG_PK_CONV_WEIGHT:
        case SG_PK_CONV_BIAS: {
            /* mmseg's heads: ConvModule kaiming (mmcv kaiming_init, fan_out),
             * conv_seg normal_init(std 0.01), bias 0 (decode_head.py) */
            int mm = m->o.names == SG_NAMES_MMSEG && p->is_head;
            int conv_seg = mm && strstr(p->name, ".conv_seg.") != NULL;
            if (p->kind == SG_PK_CONV_BIAS && !p->is_head) {
                /* encoder conv biases (MobileNetV3's squeeze-excitation
                 * fc1/fc2): torchvision's MobileNetV3 init zeros them */
                for (size_t j = 0; j < p->count; j++) hw[p->offset + j] = 0.0f;
            } else if (p->kind == SG_PK_CONV_WEIGHT && (!p->is_head || (mm && !conv_seg))) {
                /* kaiming_normal_(mode="fan_out", nonlinearity="relu") */
                double fan_out = (double)p->shape[0] * p->shape[2] * p->shape[3];
                init_normal(hw + p->offset, p->count, key, sqrt(2.0 / fan_out));
            } else if (conv_seg) {
                if (p->kind == SG_PK_CONV_WEIGHT) init_normal(hw + p->offset, p->count, key, 0.01);
                else
                    for (size_t j = 0; j < p->count; j++) hw[p->offset + j] = 0.0f;
            } else {
                /* PyTorch Conv2d default, U(-1/sqrt(fan_in), +) */
                const sg_param *w = p->kind == SG_PK_CONV_BIAS ? &m->params[i - 1] : p;
                double fan_in = (double)w->shape[1] * w->shape[2] * w->shape[3];
                double bound = 1.0 / sqrt(fan_in);
                for (size_t j = 0; j < p->count; j++)
                    hw[p->offset + j] = (float)((2.0 * sg_rng_uniform_d(key, j) - 1.0) * bound);
            }
            break;
        }
        case SG_PK_BN_WEIGHT:
            for (size_t j = 0; j < p->count; j++) hw[p->offset + j] = 1.0f;
            break;
        case SG_PK_BN_BIAS:
            for (size_t j = 0; j < p->count; j++) hw[p->offset + j] = 0.0f;
            break;
        case SG_PK_RUNNING_MEAN:
            for (size_t j = 0; j < p->count; j++) hb[p->offset + j] = 0.0f;
            break;
        case SG_PK_RUNNING_VAR:
            for (size_t j = 0; j < p->count; j++) hb[p->offset + j] = 1.0f;
            break;
        case SG_PK_NUM_BATCHES: *p->i64 = 0; break;
        }
    }
    if (m->n_weights) ops->upload(m->be, m->weights, hw, m->n_weights * sizeof(float));
    if (m->n_buffers) ops->upload(m->be, m->buffers, hb, m->n_buffers * sizeof(float));
    ops->zero(m->be, m->grads, m->n_weights * sizeof(float));
    free(hw);
    free(hb);
}

/* ---------------- freezing ---------------- */

int sg_model_freeze(sg_model *m, const char *prefix, int freeze_bn_stats) {
    sg_model_graphs_drop(m); /* recorded passes no longer match the model */
    size_t plen = strlen(prefix);
    int n = 0;
    for (int i = 0; i < m->n_params; i++) {
        sg_param *p = &m->params[i];
        if (p->is_buffer || strncmp(p->name, prefix, plen) != 0) continue;
        if (p->trainable) m->be->ops->zero(m->be, p->grad, p->count * sizeof(float));
        p->trainable = 0;
        n++;
    }
    if (freeze_bn_stats)
        for (int li = 0; li < m->n_l; li++) {
            sg_layer *l = &m->l[li];
            if (l->type == L_BN && strncmp(m->params[l->bn_p[0]].name, prefix, plen) == 0)
                l->frozen_stats = 1;
        }
    if (n == 0)
        SG_WARN("freeze '%s': no parameter name starts with it (names look like "
                "'encoder.layer1.0.conv1.weight'); nothing frozen",
                prefix);
    sg_model_update_grad_flags(m);
    return n;
}

int sg_model_freeze_bn_stats(sg_model *m, const char *prefix) {
    sg_model_graphs_drop(m); /* recorded passes no longer match the model */
    size_t plen = strlen(prefix);
    int n = 0;
    for (int li = 0; li < m->n_l; li++) {
        sg_layer *l = &m->l[li];
        if (l->type == L_BN && strncmp(m->params[l->bn_p[0]].name, prefix, plen) == 0) {
            l->frozen_stats = 1;
            n++;
        }
    }
    if (n == 0)
        SG_WARN("freeze_bn_stats '%s': no batch-norm layer name starts with it (names look like "
                "'encoder.layer1.0.bn1.'); nothing frozen",
                prefix);
    return n;
}
