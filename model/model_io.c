/* model/model_io.c - load/save the parameter registry as safetensors.
 * See model_io.h. */
#include "model/model_io.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "model/model_internal.h"

#define LOG_LIMIT 10 /* individual key messages per category */

/* file prefix -> segtrain prefix: torchvision's three, then mmseg's heads
 * (its backbone. is torchvision's) */
static const char *renames[][2] = {
    {"backbone.", "encoder."},        {"classifier.", "decoder."},
    {"aux_classifier.", "aux_head."}, {"decode_head.", "decoder."},
    {"auxiliary_head.", "aux_head."},
};
#define N_RENAMES 5
static const char *mmseg_out[][2] = {
    {"backbone.", "encoder."}, {"decode_head.", "decoder."}, {"auxiliary_head.", "aux_head."}};

static int starts(const char *s, const char *p) { return strncmp(s, p, strlen(p)) == 0; }

sg_status sg_model_canonical_name(const char *file_name, char *out, size_t cap) {
    const char *s = file_name;
    if (starts(s, "module.")) s += 7; /* DDP-wrapped state dicts */
    const char *pre = "";
    for (int i = 0; i < N_RENAMES; i++)
        if (starts(s, renames[i][0])) {
            s += strlen(renames[i][0]);
            pre = renames[i][1];
            break;
        }
    /* A plain torchvision ResNet (ImageNet classification weights) has the
     * backbone's names without a prefix. */
    if (!*pre &&
        (starts(s, "conv1.") || starts(s, "bn1.") || starts(s, "layer") || starts(s, "stem.")))
        pre = "encoder.";
    /* A plain torchvision MobileNetV3 (ImageNet classification weights) has
     * its backbone under features. (its classifier.* Linear layers fit no
     * segmentation head: reported as unexpected). */
    if (!*pre && starts(s, "features.")) {
        s += strlen("features.");
        pre = "encoder.";
    }
    int n = snprintf(out, cap, "%s%s", pre, s);
    return (n < 0 || (size_t)n >= cap) ? SG_ERR_RUNTIME : SG_OK;
}

static sg_status rename_out(const char *name, const char *(*tab)[2], char *out, size_t cap) {
    for (int i = 0; i < 3; i++)
        if (starts(name, tab[i][1])) {
            int n = snprintf(out, cap, "%s%s", tab[i][0], name + strlen(tab[i][1]));
            return (n < 0 || (size_t)n >= cap) ? SG_ERR_RUNTIME : SG_OK;
        }
    int n = snprintf(out, cap, "%s", name);
    return (n < 0 || (size_t)n >= cap) ? SG_ERR_RUNTIME : SG_OK;
}

sg_status sg_model_torchvision_name(const char *name, char *out, size_t cap) {
    return rename_out(name, renames, out, cap);
}

sg_status sg_model_anchor_name(const char *name, sg_names names, char *out, size_t cap) {
    return rename_out(name, names == SG_NAMES_MMSEG ? mmseg_out : renames, out, cap);
}

static void shape_str(char *buf, size_t cap, int ndim, const int64_t *shape) {
    size_t o = (size_t)snprintf(buf, cap, "[");
    for (int i = 0; i < ndim && o < cap; i++)
        o += (size_t)snprintf(buf + o, cap - o, "%s%lld", i ? ", " : "", (long long)shape[i]);
    if (o < cap) snprintf(buf + o, cap - o, "]");
}

/* ---------------- expected size ---------------- */
void sg_model_expected_size(const sg_model_opts *o, sg_model_size *z) {
    memset(z, 0, sizeof *z);
    sg_model_registry_size(o, &z->tensors, &z->f32, &z->i64);
}

/* 1 if the file tensor fits registry entry p. */
static int fits(const sg_param *p, const sg_st_tensor *t) {
    if (p->kind == SG_PK_NUM_BATCHES) return t->dtype == SG_ST_I64 && t->count == 1;
    if (t->dtype != SG_ST_F32 || t->ndim != p->ndim) return 0;
    for (int i = 0; i < p->ndim; i++)
        if (t->shape[i] != p->shape[i]) return 0;
    return 1;
}

sg_status sg_model_load_file(sg_model *m, const sg_st_file *f, const char *prefix, int strict,
                             sg_load_report *rep) {
    sg_load_report r = {0, 0, 0, 0};
    const sg_ops *ops = sg_model_backend(m)->ops;
    sg_backend *be = sg_model_backend(m);
    int np = sg_model_num_params(m);
    char *loaded = calloc((size_t)np, 1);
    SG_CHECK(loaded, "out of host memory");
    size_t plen = prefix ? strlen(prefix) : 0;
    float *host = NULL;
    size_t host_cap = 0;
    for (int i = 0; i < sg_st_count(f); i++) {
        const sg_st_tensor *t = sg_st_get(f, i);
        if (plen && strncmp(t->name, prefix, plen) != 0) continue;
        char name[256];
        if (sg_model_canonical_name(t->name + plen, name, sizeof name) != 0) {
            r.unexpected++;
            continue;
        }
        int pi = sg_model_find_index(m, name);
        if (pi < 0) {
            if (r.unexpected++ < LOG_LIMIT)
                SG_WARN("%s: tensor '%s' matches no model parameter; ignored", sg_st_path(f),
                        t->name);
            continue;
        }
        sg_param *p = sg_model_param(m, pi);
        if (!fits(p, t)) {
            char a[96], b[96];
            int64_t ps[4] = {p->shape[0], p->shape[1], p->shape[2], p->shape[3]};
            shape_str(a, sizeof a, t->ndim, t->shape);
            shape_str(b, sizeof b, p->ndim, ps);
            if (r.skipped++ < LOG_LIMIT)
                SG_WARN("%s: tensor '%s' is %s %s but the model's '%s' is %s %s; skipped "
                        "(a different num_classes or backbone?)",
                        sg_st_path(f), t->name, t->dtype == SG_ST_F32 ? "F32" : "I64", a, p->name,
                        p->dtype == SG_DT_F32 ? "F32" : "I64", b);
            continue;
        }
        if (p->kind == SG_PK_NUM_BATCHES) {
            int64_t v;
            memcpy(&v, t->data, sizeof v);
            if (v < 0 || v > SG_MAX_NUM_BATCHES_TRACKED) { /* the next step would overflow */
                if (r.skipped++ < LOG_LIMIT)
                    SG_WARN("%s: tensor '%s' holds %lld, outside 0..2^62; skipped (corrupt "
                            "file?)",
                            sg_st_path(f), t->name, (long long)v);
                continue;
            }
            *p->i64 = v;
        } else {
            if (p->count > host_cap) {
                free(host);
                host_cap = p->count;
                host = malloc(host_cap * sizeof(float));
                SG_CHECK(host, "out of host memory");
            }
            memcpy(host, t->data, p->count * sizeof(float)); /* data may be unaligned */
            ops->upload(be, p->data, host, p->count * sizeof(float));
        }
        if (!loaded[pi]) r.loaded++;
        loaded[pi] = 1;
    }
    free(host);
    for (int i = 0; i < np; i++)
        if (!loaded[i] && r.missing++ < LOG_LIMIT)
            SG_WARN("%s: no tensor for model parameter '%s'; it keeps its initial value",
                    sg_st_path(f), sg_model_param(m, i)->name);
    free(loaded);
    SG_INFO("loaded %d of %d model tensors from %s (%d missing, %d skipped for shape, %d "
            "unexpected)",
            r.loaded, np, sg_st_path(f), r.missing, r.skipped, r.unexpected);
    if (rep) *rep = r;
    if (strict && (r.missing || r.skipped || r.unexpected)) {
        SG_ERROR("%s: strict loading: %d missing, %d skipped, %d unexpected tensors (listed "
                 "above); fix the file or set model.pretrained_strict: false",
                 sg_st_path(f), r.missing, r.skipped, r.unexpected);
        return SG_ERR_CONFIG;
    }
    return SG_OK;
}

sg_status sg_model_load(sg_model *m, const char *path, int strict, sg_load_report *rep) {
    sg_st_file *f = sg_st_open(path);
    if (!f) return SG_ERR_CONFIG;
    sg_status rc = sg_model_load_file(m, f, NULL, strict, rep);
    sg_st_close(f);
    return rc;
}

sg_status sg_model_add_to_writer(sg_model *m, sg_st_writer *w, const char *prefix,
                                 int anchor_names) {
    sg_backend *be = sg_model_backend(m);
    size_t nw = sg_model_param_count(m, 0), nb = sg_model_buffer_count(m);
    float *hw = malloc((nw ? nw : 1) * sizeof(float)), *hb = malloc((nb ? nb : 1) * sizeof(float));
    SG_CHECK(hw && hb, "out of host memory saving %zu parameters", nw);
    be->ops->download(be, hw, sg_model_weights(m), nw * sizeof(float));
    be->ops->download(be, hb, sg_model_buffers(m), nb * sizeof(float));
    sg_status rc = SG_OK;
    for (int i = 0; i < sg_model_num_params(m) && rc == SG_OK; i++) {
        const sg_param *p = sg_model_param(m, i);
        char tv[128], name[300];
        if (anchor_names) sg_model_anchor_name(p->name, sg_model_get_opts(m)->names, tv, sizeof tv);
        snprintf(name, sizeof name, "%s%s", prefix ? prefix : "", anchor_names ? tv : p->name);
        int64_t shape[4] = {p->shape[0], p->shape[1], p->shape[2], p->shape[3]};
        if (p->kind == SG_PK_NUM_BATCHES)
            rc = sg_st_writer_add(w, name, SG_ST_I64, 0, shape, p->i64);
        else
            rc = sg_st_writer_add(w, name, SG_ST_F32, p->ndim, shape,
                                  (p->is_buffer ? hb : hw) + p->offset);
    }
    free(hw);
    free(hb);
    return rc;
}

sg_status sg_model_save(sg_model *m, const char *path, int anchor_names) {
    sg_st_writer *w = sg_st_writer_create();
    const sg_model_opts *o = sg_model_get_opts(m);
    char buf[64];
    sg_st_writer_meta(w, "format", "pt");
    sg_st_writer_meta(w, "producer", "segtrain");
    sg_st_writer_meta(w, "names", anchor_names ? sg_names_name(o->names) : "segtrain");
    sg_st_writer_meta(w, "arch", sg_arch_name(o->arch));
    sg_st_writer_meta(w, "backbone", sg_backbone_name(o->backbone));
    snprintf(buf, sizeof buf, "%d", o->num_classes);
    sg_st_writer_meta(w, "num_classes", buf);
    snprintf(buf, sizeof buf, "%d", o->output_stride);
    sg_st_writer_meta(w, "output_stride", buf);
    snprintf(buf, sizeof buf, "%d", o->base_width);
    sg_st_writer_meta(w, "base_width", buf);
    sg_status rc = sg_model_add_to_writer(m, w, NULL, anchor_names);
    if (rc == SG_OK) rc = sg_st_writer_write(w, path);
    sg_st_writer_destroy(w);
    if (rc != 0) SG_ERROR("saving the model to %s failed (see above)", path);
    return rc;
}
