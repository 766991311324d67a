/* model/model_plan_dump.c - the planned activations as a table (`segtrain
 * bench --plan`): one row per tensor with its producer, shape, layout,
 * storage and bytes, and in a training plan its gradient's storage
 * ("g:fp32", "g:bf16", "g:-" for none), then the totals per storage. It
 * reads the plan that model_plan.c laid out and changes nothing. */
#include <string.h>

#include "model/model_internal.h"

static const char *type_name(int type) {
    static const char *names[] = {"conv",   "bn",     "maxpool",  "add_relu",  "avgpool",
                                  "resize", "concat", "dropout",  "dropout2d", "add",
                                  "relu",   "hswish", "hsigmoid", "sigmoid",   "chan_scale"};
    return type >= 0 && type < (int)(sizeof names / sizeof names[0]) ? names[type] : "?";
}

/* The producer of tensor ti: its layer kind and, for convs and BNs, the
 * parameter name without ".weight" (e.g. "conv backbone.layer1.0.conv1"). */
static void producer_name(const sg_model *m, int ti, char *out, size_t cap) {
    int p = m->t[ti].producer;
    if (p < 0) {
        snprintf(out, cap, "input");
        return;
    }
    const sg_layer *l = &m->l[p];
    int param = l->type == L_CONV ? l->w_param : l->type == L_BN ? l->bn_p[0] : -1;
    if (param < 0) {
        snprintf(out, cap, "%s", type_name(l->type));
        return;
    }
    const char *name = m->params[param].name;
    size_t len = strlen(name);
    if (len > 7 && strcmp(name + len - 7, ".weight") == 0) len -= 7;
    snprintf(out, cap, "%s%s %.*s", type_name(l->type), l->type == L_BN && l->relu ? "+relu" : "",
             (int)len, name);
}

/* Storage of tensor ti: 0 float32, 1 bf16, 2 float32 rounded to bf16, 3
 * none (a BN fused into its join: applied there, never stored). */
static int storage_of(const sg_model *m, int ti) {
    int p = m->t[ti].producer;
    if (p >= 0 && m->l[p].type == L_BN && m->l[p].join >= 0) return 3;
    if (m->t[ti].dt == SG_ACT_BF16) return 1;
    return m->t[ti].rnd ? 2 : 0;
}

void sg_model_plan_dump(const sg_model *m, FILE *f) {
    static const char *st_names[] = {"fp32", "bf16", "fp32 (bf16 values)", "none (fused)"};
    if (!m->planned) {
        fprintf(f, "plan: none (sg_model_plan first)\n");
        return;
    }
    fprintf(f, "plan: %s, input [%d, 3, %d, %d], activations %s, arena %.1f MiB\n",
            m->planned == 1 ? "training" : "inference", m->n, m->h, m->w,
            m->be->layout == SG_LAYOUT_NHWC ? "NHWC" : "NCHW", (double)m->arena_bytes / 1048576.0);
    fprintf(f, "  %4s  %-52s %-22s %-19s %9s  %s\n", "#", "producer", "shape [n, c, h, w]",
            "storage", "MiB", m->planned == 1 ? "gradient" : "");
    double mib[4] = {0}, gmib[2] = {0};
    int count[4] = {0}, gcount[2] = {0};
    for (int i = 0; i < m->n_t; i++) {
        const sg_tensor *t = &m->t[i];
        char prod[160], shape[48];
        producer_name(m, i, prod, sizeof prod);
        snprintf(shape, sizeof shape, "[%d, %d, %d, %d]", m->n, t->c, t->h, t->w);
        int s = storage_of(m, i);
        double b = s == 3 ? 0 : (double)t->count * (s == 1 ? 2 : 4) / 1048576.0;
        mib[s] += b;
        count[s]++;
        const char *g = "";
        if (m->planned == 1 && (!t->grad || s == 3)) {
            g = "  g:-";
        } else if (m->planned == 1) {
            int gb = t->gdt == SG_ACT_BF16;
            g = gb ? "  g:bf16" : "  g:fp32";
            gmib[gb] += (double)t->count * (gb ? 2 : 4) / 1048576.0;
            gcount[gb]++;
        }
        fprintf(f, "  %4d  %-52.52s %-22s %-19s %9.1f%s\n", i, prod, shape, st_names[s], b, g);
    }
    fprintf(f, "  values (one buffer each, before the arena shares memory by liveness):");
    for (int s = 0; s < 4; s++)
        if (count[s]) fprintf(f, " %s %d tensors %.1f MiB;", st_names[s], count[s], mib[s]);
    fprintf(f, "\n");
    if (m->planned == 1)
        fprintf(f,
                "  gradients (one buffer each, before sharing): g:fp32 %d tensors %.1f MiB; "
                "g:bf16 %d tensors %.1f MiB\n",
                gcount[0], gmib[0], gcount[1], gmib[1]);
}
