/* model/model_profile.c - per-layer timing (model_profile.h): the totals per
 * (layer, pass) and the mark the runner calls, plus the layer descriptions
 * the breakdown prints. */
#include "model/model_profile.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/log.h"
#include "core/util.h"
#include "model/model_internal.h"

struct sg_model_prof {
    sg_prof_entry *e; /* [n_l][SG_PROF_N] */
    int n_l;
    double t_mark, c_mark;
};

static const char *const pass_names[SG_PROF_N] = {"fwd",        "fwd stats",  "bwd",
                                                  "bwd reduce", "bwd weight", "bwd data"};

const char *sg_prof_pass_name(int pass) {
    return pass >= 0 && pass < SG_PROF_N ? pass_names[pass] : "?";
}

static double cpu_now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void sg_model_profile(sg_model *m, int on) {
    if (m->prof) {
        free(m->prof->e);
        free(m->prof);
        m->prof = NULL;
    }
    if (!on) return;
    m->prof = calloc(1, sizeof *m->prof);
    SG_CHECK(m->prof != NULL, "out of host memory for the layer profile");
    m->prof->n_l = m->n_l;
    m->prof->e = calloc((size_t)(m->n_l > 0 ? m->n_l : 1) * SG_PROF_N, sizeof *m->prof->e);
    SG_CHECK(m->prof->e != NULL, "out of host memory for the layer profile (%d layers)", m->n_l);
}

int sg_model_profiling(const sg_model *m) { return m->prof != NULL; }

void sg_model_profile_reset(sg_model *m) {
    if (m->prof) memset(m->prof->e, 0, (size_t)m->prof->n_l * SG_PROF_N * sizeof *m->prof->e);
}

sg_prof_entry sg_model_profile_get(const sg_model *m, int li, int pass) {
    sg_prof_entry z = {0, 0, 0};
    if (!m->prof || li < 0 || li >= m->prof->n_l || pass < 0 || pass >= SG_PROF_N) return z;
    return m->prof->e[(size_t)li * SG_PROF_N + (size_t)pass];
}

void sg_model_prof_start(sg_model *m) {
    m->be->ops->sync(m->be);
    m->prof->t_mark = sg_now_s();
    m->prof->c_mark = cpu_now_s();
}

void sg_model_prof_mark(sg_model *m, const sg_layer *l, int pass) {
    m->be->ops->sync(m->be);
    double t = sg_now_s(), c = cpu_now_s();
    int li = (int)(l - m->l);
    SG_CHECK(li >= 0 && li < m->prof->n_l && pass >= 0 && pass < SG_PROF_N,
             "model profile: mark for layer %d pass %d outside %d layers (internal error)", li,
             pass, m->prof->n_l);
    sg_prof_entry *e = &m->prof->e[(size_t)li * SG_PROF_N + (size_t)pass];
    e->wall_s += t - m->prof->t_mark;
    e->cpu_s += c - m->prof->c_mark;
    e->calls++;
    m->prof->t_mark = t;
    m->prof->c_mark = c;
}

int sg_model_num_layers(const sg_model *m) { return m->n_l; }

static const char *kind_name(int type) {
    switch (type) {
    case L_CONV: return "conv";
    case L_BN: return "bn";
    case L_MAXPOOL: return "maxpool";
    case L_ADD_RELU: return "add_relu";
    case L_AVGPOOL: return "avgpool";
    case L_RESIZE: return "resize";
    case L_CONCAT: return "concat";
    case L_DROPOUT: return "dropout";
    case L_DROPOUT2D: return "dropout2d";
    }
    return "layer";
}

/* "backbone.layer1.0.conv1.weight" -> "backbone.layer1.0.conv1" */
static void param_prefix(char *dst, size_t cap, const char *pname) {
    snprintf(dst, cap, "%s", pname);
    char *dot = strrchr(dst, '.');
    if (dot) *dot = '\0';
}

void sg_model_layer_info(const sg_model *m, int li, sg_layer_info *out) {
    memset(out, 0, sizeof *out);
    out->kind = "layer";
    if (li < 0 || li >= m->n_l) return;
    const sg_layer *l = &m->l[li];
    const sg_tensor *x = &m->t[l->in[0]], *y = &m->t[l->out];
    out->kind = kind_name(l->type);
    snprintf(out->name, sizeof out->name, "%s", out->kind);
    out->n_in = l->n_in;
    out->batch = m->n;
    out->c_in = x->c;
    out->h_in = x->h;
    out->w_in = x->w;
    out->c_out = y->c;
    out->h_out = y->h;
    out->w_out = y->w;
    if (l->type == L_CONV) {
        const sg_conv_desc *d = &l->desc;
        param_prefix(out->name, sizeof out->name, m->params[l->w_param].name);
        out->kh = d->r;
        out->kw = d->s;
        out->stride_h = d->stride_h;
        out->stride_w = d->stride_w;
        out->pad_h = d->pad_h;
        out->pad_w = d->pad_w;
        out->dil_h = d->dil_h;
        out->dil_w = d->dil_w;
        out->groups = sg_conv_groups(d);
        out->has_bias = l->b_param >= 0;
        out->macs = (double)d->n * d->k * (d->c / out->groups) * d->r * d->s * d->oh * d->ow;
    } else if (l->type == L_BN) {
        param_prefix(out->name, sizeof out->name, m->params[l->bn_p[0]].name);
        out->relu = l->relu;
    }
}
