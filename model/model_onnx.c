/* model/model_onnx.c - the inference graph as ONNX nodes (model/model_onnx.h).
 *
 * Values are named "input", "t<tensor index>" for the model's tensors,
 * "logits" / "labels" for the output; initializers by their registry names
 * (or torchvision's). A folded batch norm gives its convolution
 * W' = W * g/sqrt(var+eps) per output channel and a bias
 * b' = beta - mean * g/sqrt(var+eps), computed in double and rounded once.
 */
#include "model/model_onnx.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "model/model_internal.h"
#include "model/model_io.h"

typedef struct ex {
    sg_model *m;
    const sg_onnx_export_opts *o;
    sg_onnx *g;
    float *hw, *hb;   /* host copies of the weights and the running statistics */
    int *n_readers;   /* per tensor: needed layers reading it */
    int *shape_done;  /* per tensor: its "<name>_hw" [H, W] value exists */
    char (*name)[32]; /* per tensor: the ONNX value holding it */
    int n_nodes;
} ex;

static const float *pdata(const ex *e, int pi) {
    const sg_param *p = &e->m->params[pi];
    return (p->is_buffer ? e->hb : e->hw) + p->offset;
}

/* The initializer name of registry entry pi with `leaf` replacing its last
 * component (NULL: the entry's own name). */
static sg_status init_name(const ex *e, int pi, const char *leaf, char *out, size_t cap) {
    char seg[128];
    const char *nm = e->m->params[pi].name;
    if (leaf) {
        const char *dot = strrchr(nm, '.');
        int len = dot ? (int)(dot - nm) : (int)strlen(nm);
        snprintf(seg, sizeof seg, "%.*s.%s", len, nm, leaf);
        nm = seg;
    }
    if (e->o->torchvision_names) return sg_model_torchvision_name(nm, out, cap);
    snprintf(out, cap, "%s", nm);
    return SG_OK;
}

static sg_onnx_node *node(ex *e, const char *op, const char *const *in, int n_in, const char *out) {
    char nm[48];
    snprintf(nm, sizeof nm, "%s_%d", op, e->n_nodes++);
    return sg_onnx_add_node(e->g, op, nm, in, n_in, &out, 1);
}

static sg_status add_init_1d(ex *e, const char *name, int64_t n, const float *v) {
    return sg_onnx_init_f32(e->g, name, 1, &n, v);
}

/* A conv, with the batch norm bn_li folded in (-1: none). */
static sg_status emit_conv(ex *e, const sg_layer *L, int bn_li, const char *out) {
    sg_model *m = e->m;
    const sg_param *wp = &m->params[L->w_param];
    int k = wp->shape[0];
    size_t per = wp->count / (size_t)k;
    char wn[160], bnm[160];
    sg_status st = init_name(e, L->w_param, NULL, wn, sizeof wn);
    if (st == SG_OK && L->b_param >= 0) st = init_name(e, L->b_param, NULL, bnm, sizeof bnm);
    if (st == SG_OK && L->b_param < 0 && bn_li >= 0)
        st = init_name(e, L->w_param, "bias", bnm, sizeof bnm);
    if (st != SG_OK) {
        SG_ERROR("export onnx: cannot name the initializers of %s", wp->name);
        return SG_ERR_CONFIG;
    }
    int64_t dims[4] = {wp->shape[0], wp->shape[1], wp->shape[2], wp->shape[3]};
    const float *w = pdata(e, L->w_param);
    if (bn_li < 0) {
        st = sg_onnx_init_f32(e->g, wn, 4, dims, w);
        if (st == SG_OK && L->b_param >= 0) st = add_init_1d(e, bnm, k, pdata(e, L->b_param));
    } else {
        const sg_layer *B = &m->l[bn_li];
        const float *gam = pdata(e, B->bn_p[0]), *beta = pdata(e, B->bn_p[1]);
        const float *mean = pdata(e, B->bn_p[2]), *var = pdata(e, B->bn_p[3]);
        const float *b0 = L->b_param >= 0 ? pdata(e, L->b_param) : NULL;
        float *fw = malloc(wp->count * sizeof *fw), *fb = malloc((size_t)k * sizeof *fb);
        SG_CHECK(fw && fb, "out of host memory folding %s", wp->name);
        for (int c = 0; c < k && st == SG_OK; c++) {
            double s = (double)gam[c] / sqrt((double)var[c] + (double)B->bn_eps);
            if (!isfinite(s) || !isfinite(mean[c]) || !isfinite(beta[c])) {
                SG_ERROR("export onnx: batch norm %s channel %d has a non-finite scale or "
                         "statistic (weight %g, running_var %g, running_mean %g): the checkpoint "
                         "is damaged; export from another one",
                         m->params[B->bn_p[0]].name, c, gam[c], var[c], mean[c]);
                st = SG_ERR_CONFIG;
                break;
            }
            for (size_t j = 0; j < per; j++)
                fw[(size_t)c * per + j] = (float)((double)w[(size_t)c * per + j] * s);
            fb[c] = (float)((double)beta[c] + ((b0 ? (double)b0[c] : 0.0) - mean[c]) * s);
        }
        if (st == SG_OK) st = sg_onnx_init_f32(e->g, wn, 4, dims, fw);
        if (st == SG_OK) st = add_init_1d(e, bnm, k, fb);
        free(fw);
        free(fb);
    }
    if (st != SG_OK) return st;
    const char *in[3] = {e->name[L->in[0]], wn, bnm};
    sg_onnx_node *n = node(e, "Conv", in, (L->b_param >= 0 || bn_li >= 0) ? 3 : 2, out);
    int64_t ks[2] = {L->r, L->r}, s[2] = {L->stride, L->stride}, d[2] = {L->dil, L->dil};
    int64_t p[4] = {L->pad, L->pad, L->pad, L->pad};
    sg_onnx_attr_ints(n, "kernel_shape", ks, 2);
    sg_onnx_attr_ints(n, "strides", s, 2);
    sg_onnx_attr_ints(n, "pads", p, 4);
    sg_onnx_attr_ints(n, "dilations", d, 2);
    sg_onnx_attr_int(n, "group", L->groups > 1 ? L->groups : 1);
    return SG_OK;
}

static sg_status emit_bn(ex *e, const sg_layer *L, const char *out) {
    char nm[4][160];
    for (int i = 0; i < 4; i++) {
        int pi = L->bn_p[i];
        if (init_name(e, pi, NULL, nm[i], sizeof nm[i]) != SG_OK) {
            SG_ERROR("export onnx: cannot name %s", e->m->params[pi].name);
            return SG_ERR_CONFIG;
        }
        sg_status st = add_init_1d(e, nm[i], e->m->params[pi].shape[0], pdata(e, pi));
        if (st != SG_OK) return st;
    }
    const char *in[5] = {e->name[L->in[0]], nm[0], nm[1], nm[2], nm[3]};
    sg_onnx_node *n = node(e, "BatchNormalization", in, 5, out);
    sg_onnx_attr_float(n, "epsilon", L->bn_eps);
    return SG_OK;
}

/* Shape(t)[2:4] as "<t>_hw" (int64 [2]), once per tensor. */
static const char *hw_of(ex *e, int ti, char *buf, size_t cap) {
    snprintf(buf, cap, "%s_hw", e->name[ti]);
    if (e->shape_done[ti]) return buf;
    e->shape_done[ti] = 1;
    char shp[48];
    snprintf(shp, sizeof shp, "%s_shape", e->name[ti]);
    const char *in0[1] = {e->name[ti]};
    node(e, "Shape", in0, 1, shp);
    const char *in[4] = {shp, "const_2", "const_4", "const_0"};
    node(e, "Slice", in, 4, buf);
    return buf;
}

static sg_status emit_resize(ex *e, const sg_layer *L, const char *out) {
    char hw[48], nc[48], nch[48], shp[48];
    hw_of(e, L->ref, hw, sizeof hw);
    /* [N, C] of the input, then [H, W] of the reference */
    snprintf(shp, sizeof shp, "%s_shape_r", out);
    snprintf(nc, sizeof nc, "%s_nc", out);
    snprintf(nch, sizeof nch, "%s_sizes", out);
    const char *s0[1] = {e->name[L->in[0]]};
    node(e, "Shape", s0, 1, shp);
    const char *s1[4] = {shp, "const_0", "const_2", "const_0"};
    node(e, "Slice", s1, 4, nc);
    const char *s2[2] = {nc, hw};
    sg_onnx_attr_int(node(e, "Concat", s2, 2, nch), "axis", 0);
    int old = e->o->opset < 13; /* roi and scales are required inputs before 13 */
    const char *in[4] = {e->name[L->in[0]], old ? "const_empty" : "", old ? "const_empty" : "",
                         nch};
    sg_onnx_node *n = node(e, "Resize", in, 4, out);
    sg_onnx_attr_string(n, "mode", "linear");
    sg_onnx_attr_string(n, "coordinate_transformation_mode", "half_pixel");
    return SG_OK;
}

/* PyTorch's hardsigmoid, relu6(x + 3) / 6, as ONNX HardSigmoid
 * max(0, min(1, alpha * x + beta)) with alpha = 1/6, beta = 0.5. */
static sg_status emit_hardsigmoid(ex *e, const char *x, const char *out) {
    const char *in[1] = {x};
    sg_onnx_node *n = node(e, "HardSigmoid", in, 1, out);
    sg_onnx_attr_float(n, "alpha", 1.0f / 6.0f);
    sg_onnx_attr_float(n, "beta", 0.5f);
    return SG_OK;
}

static sg_status emit_layer(ex *e, int li, const int *fold_into) {
    sg_model *m = e->m;
    const sg_layer *L = &m->l[li];
    char pre[48];
    const char *out = e->name[L->out];
    switch (L->type) {
    case L_CONV: {
        int bn = fold_into[li];
        if (bn < 0) return emit_conv(e, L, -1, out);
        const sg_layer *B = &m->l[bn];
        const char *bout = e->name[B->out];
        if (!B->relu) return emit_conv(e, L, bn, bout);
        snprintf(pre, sizeof pre, "%s_pre", bout);
        sg_status st = emit_conv(e, L, bn, pre);
        const char *in[1] = {pre};
        if (st == SG_OK) node(e, "Relu", in, 1, bout);
        return st;
    }
    case L_BN: {
        if (fold_into[li] == -2) return SG_OK; /* folded into its conv */
        if (!L->relu) return emit_bn(e, L, out);
        snprintf(pre, sizeof pre, "%s_pre", out);
        sg_status st = emit_bn(e, L, pre);
        const char *in[1] = {pre};
        if (st == SG_OK) node(e, "Relu", in, 1, out);
        return st;
    }
    case L_MAXPOOL: {
        const char *in[1] = {e->name[L->in[0]]};
        sg_onnx_node *n = node(e, "MaxPool", in, 1, out);
        int64_t k[2] = {3, 3}, s[2] = {2, 2}, p[4] = {1, 1, 1, 1};
        sg_onnx_attr_ints(n, "kernel_shape", k, 2);
        sg_onnx_attr_ints(n, "strides", s, 2);
        sg_onnx_attr_ints(n, "pads", p, 4);
        return SG_OK;
    }
    case L_ADD_RELU: {
        snprintf(pre, sizeof pre, "%s_sum", out);
        const char *in[2] = {e->name[L->in[0]], e->name[L->in[1]]};
        node(e, "Add", in, 2, pre);
        const char *r[1] = {pre};
        node(e, "Relu", r, 1, out);
        return SG_OK;
    }
    case L_AVGPOOL: {
        const char *in[1] = {e->name[L->in[0]]};
        node(e, "GlobalAveragePool", in, 1, out);
        return SG_OK;
    }
    case L_RESIZE: return emit_resize(e, L, out);
    case L_CONCAT: {
        const char *in[SG_MAX_IN];
        for (int i = 0; i < L->n_in; i++) in[i] = e->name[L->in[i]];
        sg_onnx_attr_int(node(e, "Concat", in, L->n_in, out), "axis", 1);
        return SG_OK;
    }
    case L_ADD:
    case L_CHAN_SCALE: { /* Mul broadcasts the [N, C, 1, 1] gate */
        const char *in[2] = {e->name[L->in[0]], e->name[L->in[1]]};
        node(e, L->type == L_ADD ? "Add" : "Mul", in, 2, out);
        return SG_OK;
    }
    case L_RELU:
    case L_SIGMOID: {
        const char *in[1] = {e->name[L->in[0]]};
        node(e, L->type == L_RELU ? "Relu" : "Sigmoid", in, 1, out);
        return SG_OK;
    }
    case L_HARDSIGMOID: return emit_hardsigmoid(e, e->name[L->in[0]], out);
    case L_HARDSWISH: {
        const char *in[1] = {e->name[L->in[0]]};
        if (e->o->opset >= 14) {
            node(e, "HardSwish", in, 1, out);
            return SG_OK;
        }
        /* HardSwish is opset 14: x * HardSigmoid(x) before it */
        snprintf(pre, sizeof pre, "%s_hsig", out);
        sg_status st = emit_hardsigmoid(e, in[0], pre);
        const char *mul[2] = {in[0], pre};
        if (st == SG_OK) node(e, "Mul", mul, 2, out);
        return st;
    }
    case L_DROPOUT: /* identity in eval mode: the output is the input's value */
    case L_DROPOUT2D:
        if (L->out != L->in[0]) memcpy(e->name[L->out], e->name[L->in[0]], sizeof e->name[0]);
        return SG_OK;
    default:
        SG_ERROR("export onnx: layer %d has type %d, which the ONNX exporter does not know; "
                 "refusing rather than writing a wrong graph",
                 li, L->type);
        return SG_ERR_CONFIG;
    }
}

static sg_status add_consts(ex *e) {
    int64_t one = 1;
    int64_t v0 = 0, v2 = 2, v4 = 4;
    sg_status st = sg_onnx_init_i64(e->g, "const_0", 1, &one, &v0);
    if (st == SG_OK) st = sg_onnx_init_i64(e->g, "const_2", 1, &one, &v2);
    if (st == SG_OK) st = sg_onnx_init_i64(e->g, "const_4", 1, &one, &v4);
    if (st == SG_OK && e->o->opset < 13) {
        int64_t zero = 0;
        float dummy = 0;
        st = sg_onnx_init_f32(e->g, "const_empty", 1, &zero, &dummy);
    }
    return st;
}

/* Graph input and, with normalize_u8, the conversion to "t0". */
static sg_status add_input(ex *e) {
    const sg_onnx_export_opts *o = e->o;
    int64_t n = o->batch > 0 ? o->batch : -1;
    int64_t h = o->height > 0 ? o->height : -1, w = o->width > 0 ? o->width : -1;
    const char *nchw_p[4] = {"batch", NULL, "height", "width"};
    if (!o->normalize_u8) {
        int64_t d[4] = {n, 3, h, w};
        snprintf(e->name[0], sizeof e->name[0], "input");
        return sg_onnx_input(e->g, "input", SG_ONNX_FLOAT, 4, d, nchw_p);
    }
    const char *nhwc_p[4] = {"batch", "height", "width", NULL};
    int64_t d[4] = {n, h, w, 3};
    sg_status st = sg_onnx_input(e->g, "input", SG_ONNX_UINT8, 4, d, nhwc_p);
    float a[3], b[3];
    for (int c = 0; c < 3; c++) {
        if (!(o->std[c] > 0) || !isfinite(o->mean[c])) {
            SG_ERROR("export onnx: data.std[%d] = %g / data.mean[%d] = %g cannot normalise", c,
                     o->std[c], c, o->mean[c]);
            return SG_ERR_CONFIG;
        }
        a[c] = (float)(1.0 / (255.0 * o->std[c])); /* kernels/formulas/normalize.h */
        b[c] = (float)(-(double)o->mean[c] / o->std[c]);
    }
    int64_t cd[4] = {1, 3, 1, 1};
    if (st == SG_OK) st = sg_onnx_init_f32(e->g, "normalize_scale", 4, cd, a);
    if (st == SG_OK) st = sg_onnx_init_f32(e->g, "normalize_shift", 4, cd, b);
    if (st != SG_OK) return st;
    const char *in[1] = {"input"};
    sg_onnx_attr_int(node(e, "Cast", in, 1, "input_f32"), "to", SG_ONNX_FLOAT);
    const char *t_in[1] = {"input_f32"};
    int64_t perm[4] = {0, 3, 1, 2};
    sg_onnx_attr_ints(node(e, "Transpose", t_in, 1, "input_nchw"), "perm", perm, 4);
    const char *m_in[2] = {"input_nchw", "normalize_scale"};
    node(e, "Mul", m_in, 2, "input_scaled");
    const char *a_in[2] = {"input_scaled", "normalize_shift"};
    node(e, "Add", a_in, 2, "t0");
    snprintf(e->name[0], sizeof e->name[0], "t0");
    return SG_OK;
}

static sg_status check_opts(const sg_model *m, const sg_onnx_export_opts *o, const sg_onnx *g) {
    if (o->opset < SG_ONNX_MIN_OPSET || o->opset > SG_ONNX_MAX_OPSET) {
        SG_ERROR("export onnx: opset %d is not supported: %s; use --opset %d..%d (17 is the "
                 "default)",
                 o->opset,
                 o->opset < SG_ONNX_MIN_OPSET
                     ? "before opset 11 Resize has no coordinate_transformation_mode, so "
                       "bilinear resize with align_corners=False cannot be expressed"
                     : "the exporter is checked up to this opset only",
                 SG_ONNX_MIN_OPSET, SG_ONNX_MAX_OPSET);
        return SG_ERR_CONFIG;
    }
    if (sg_onnx_opset(g) != o->opset) {
        SG_ERROR("export onnx: the model file has opset %d, the export asks for %d (internal "
                 "error)",
                 sg_onnx_opset(g), o->opset);
        return SG_ERR_CONFIG;
    }
    if ((o->height > 0) != (o->width > 0) || o->height < 0 || o->width < 0 || o->batch < 0) {
        SG_ERROR("export onnx: size %dx%d, batch %d: give both height and width (> 0) or "
                 "neither (dynamic), and a batch > 0 or 0 (dynamic)",
                 o->height, o->width, o->batch);
        return SG_ERR_CONFIG;
    }
    if (o->height > 0 &&
        sg_model_plan_bytes(m, o->batch > 0 ? o->batch : 1, o->height, o->width, 0) == 0) {
        SG_ERROR("export onnx: the network cannot take a %dx%d input (see above); export a "
                 "larger fixed size or --dynamic-hw",
                 o->height, o->width);
        return SG_ERR_CONFIG;
    }
    return SG_OK;
}

sg_status sg_model_to_onnx(sg_model *m, const sg_onnx_export_opts *o, sg_onnx *g) {
    sg_status st = check_opts(m, o, g);
    if (st != SG_OK) return st;
    ex e = {.m = m, .o = o, .g = g};
    e.hw = malloc((m->n_weights ? m->n_weights : 1) * sizeof(float));
    e.hb = malloc((m->n_buffers ? m->n_buffers : 1) * sizeof(float));
    e.n_readers = calloc((size_t)m->n_t, sizeof *e.n_readers);
    e.shape_done = calloc((size_t)m->n_t, sizeof *e.shape_done);
    e.name = calloc((size_t)m->n_t, sizeof *e.name);
    int *needed = calloc((size_t)m->n_l + (size_t)m->n_t, sizeof *needed);
    int *fold_into = malloc(((size_t)m->n_l + 1) * sizeof *fold_into);
    SG_CHECK(e.hw && e.hb && e.n_readers && e.shape_done && e.name && needed && fold_into,
             "out of host memory exporting the model");
    const sg_ops *ops = m->be->ops;
    if (m->n_weights) ops->download(m->be, e.hw, m->weights, m->n_weights * sizeof(float));
    if (m->n_buffers) ops->download(m->be, e.hb, m->buffers, m->n_buffers * sizeof(float));
    ops->sync(m->be);

    /* the layers the logits need: back from t_out */
    int *tneed = needed + m->n_l;
    tneed[m->t_out] = 1;
    for (int li = m->n_l - 1; li >= 0; li--) {
        const sg_layer *L = &m->l[li];
        if (!tneed[L->out]) continue;
        needed[li] = 1;
        for (int i = 0; i < L->n_in; i++) tneed[L->in[i]] = 1;
        if (L->type == L_RESIZE) tneed[L->ref] = 1;
    }
    for (int li = 0; li < m->n_l; li++)
        if (needed[li])
            for (int i = 0; i < m->l[li].n_in; i++) e.n_readers[m->l[li].in[i]]++;
    /* conv -> BN pairs to fold: the conv's output read by that BN alone */
    for (int li = 0; li < m->n_l; li++) fold_into[li] = -1;
    if (o->fold_bn)
        for (int li = 0; li < m->n_l; li++) {
            const sg_layer *B = &m->l[li];
            if (!needed[li] || B->type != L_BN) continue;
            int p = m->t[B->in[0]].producer;
            if (p >= 0 && m->l[p].type == L_CONV && e.n_readers[B->in[0]] == 1) {
                fold_into[p] = li;
                fold_into[li] = -2;
            }
        }
    for (int i = 0; i < m->n_t; i++) snprintf(e.name[i], sizeof e.name[i], "t%d", i);

    st = add_consts(&e);
    if (st == SG_OK) st = add_input(&e);
    for (int li = 0; li < m->n_l && st == SG_OK; li++)
        if (needed[li]) st = emit_layer(&e, li, fold_into);
    int64_t n = o->batch > 0 ? o->batch : -1;
    int64_t h = o->height > 0 ? o->height : -1, w = o->width > 0 ? o->width : -1;
    if (st == SG_OK && !o->argmax) {
        const char *in[1] = {e.name[m->t_out]};
        node(&e, "Identity", in, 1, "logits");
        int64_t d[4] = {n, m->o.num_classes, h, w};
        const char *p[4] = {"batch", NULL, "height", "width"};
        st = sg_onnx_output(g, "logits", SG_ONNX_FLOAT, 4, d, p);
    } else if (st == SG_OK) {
        const char *in[1] = {e.name[m->t_out]};
        sg_onnx_node *am = node(&e, "ArgMax", in, 1, "labels");
        sg_onnx_attr_int(am, "axis", 1);
        sg_onnx_attr_int(am, "keepdims", 0);
        int64_t d[3] = {n, h, w};
        const char *p[3] = {"batch", "height", "width"};
        st = sg_onnx_output(g, "labels", SG_ONNX_INT64, 3, d, p);
    }
    free(e.hw);
    free(e.hb);
    free(e.n_readers);
    free(e.shape_done);
    free(e.name);
    free(needed);
    free(fold_into);
    return st;
}
