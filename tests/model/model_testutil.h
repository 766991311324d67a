/* tests/model/model_testutil.h - helpers shared by the model tests:
 * the CPU backend, tiny model options, options from a fixture's metadata,
 * host<->device copies (stderr capture: tests/helpers.h). */
#ifndef SG_TESTS_MODEL_TESTUTIL_H
#define SG_TESTS_MODEL_TESTUTIL_H

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "io/safetensors.h"
#include "kernels/backend.h"
#include "model/model.h"
#include "tests/helpers.h"

static const char *mt_fixtures __attribute__((unused)) = "tests/fixtures";

/* The backend under test: "cpu", or $SG_TEST_DEVICE (e.g. cuda) so the same
 * model tests check another backend; without that device the test skips.
 * $SG_TEST_LAYOUT=nhwc stores its activations channels last. */
static sg_backend *mt_backend(void) {
    static sg_backend *be;
    if (!be) {
        const char *dev = getenv("SG_TEST_DEVICE"), *lay = getenv("SG_TEST_LAYOUT");
        if (!dev || !*dev) dev = "cpu";
        sg_backend_opts o = {.threads = 2, .cudnn_deterministic = 1};
        if (lay && strcmp(lay, "nhwc") == 0) o.layout = SG_LAYOUT_NHWC;
        else if (lay && *lay && strcmp(lay, "nchw") != 0) {
            fprintf(stderr, "SG_TEST_LAYOUT=%s: use nchw or nhwc\n", lay);
            exit(1);
        }
        if (strncmp(dev, "cuda", 4) == 0 && sg_backend_cuda_device_count() == 0) {
            fprintf(stderr, "SG_TEST_DEVICE=%s but no CUDA device: skipped\n", dev);
            exit(77);
        }
        be = sg_backend_create(dev, &o);
        if (!be) {
            fprintf(stderr, "cannot create backend '%s'\n", dev);
            exit(1);
        }
    }
    return be;
}

/* A tiny network: one block per layer, base width 4, OS 8, aux head, two
 * ASPP rates, dropout off. */
static inline void mt_tiny_opts(sg_model_opts *o, sg_backbone b) {
    sg_model_opts_default(o, b);
    o->base_width = 4;
    o->num_classes = 3;
    o->blocks[0] = o->blocks[1] = o->blocks[2] = o->blocks[3] = 1;
    o->aspp_rates[0] = 2;
    o->aspp_rates[1] = 3;
    o->n_aspp_rates = 2;
    o->aspp_dropout = 0;
    o->aux_dropout = 0;
}

static inline float *mt_download(sg_backend *be, const float *dev, size_t count) {
    float *h = malloc((count ? count : 1) * sizeof(float));
    be->ops->download(be, h, dev, count * sizeof(float));
    return h;
}

/* An [n, c, hw] activation between host NCHW order and the backend's
 * layout (kernels/backend.h): download into a new NCHW buffer, upload
 * from one. */
static inline float *mt_download_act(sg_backend *be, const float *dev, int n, int c, size_t hw) {
    size_t count = (size_t)n * c * hw;
    float *s = mt_download(be, dev, count), *h = malloc((count ? count : 1) * sizeof(float));
    sg_act_relayout(h, s, n, c, (int)hw, sizeof(float), be->layout, SG_LAYOUT_NCHW);
    free(s);
    return h;
}

static inline void mt_upload_act(sg_backend *be, float *dev, const float *host, int n, int c,
                                 size_t hw) {
    size_t count = (size_t)n * c * hw;
    float *s = malloc((count ? count : 1) * sizeof(float));
    sg_act_relayout(s, host, n, c, (int)hw, sizeof(float), SG_LAYOUT_NCHW, be->layout);
    be->ops->upload(be, dev, s, count * sizeof(float));
    free(s);
}

/* Model options from a fixture's metadata (backbone, blocks, base_width,
 * output_stride, aspp_rates, num_classes, aux_head, optional arch, names and
 * width_mult,
 * as scripts/make_golden.py
 * and scripts/make_pth_fixtures.py write them) over the backbone's
 * defaults; 0, or -1 after naming the key that is missing or malformed. */
static inline int mt_opts_from_meta(const sg_st_file *f, sg_model_opts *o) {
    sg_backbone bb;
    if (sg_backbone_parse(sg_st_meta(f, "backbone"), &bb) != 0) {
        fprintf(stderr, "fixture %s: metadata backbone missing or unknown\n", sg_st_path(f));
        return -1;
    }
    sg_model_opts_default(o, bb);
    /* optional (fixtures before model.arch / model.names existed lack them) */
    const char *arch = sg_st_meta(f, "arch"), *names = sg_st_meta(f, "names");
    if (arch && sg_arch_parse(arch, &o->arch) != 0) {
        fprintf(stderr, "fixture %s: metadata arch '%s' unknown\n", sg_st_path(f), arch);
        return -1;
    }
    if (names && sg_names_parse(names, &o->names) != 0) {
        fprintf(stderr, "fixture %s: metadata names '%s' unknown\n", sg_st_path(f), names);
        return -1;
    }
    static const char *const ints[] = {"base_width", "output_stride", "num_classes", "aux_head"};
    int *dst[] = {&o->base_width, &o->output_stride, &o->num_classes, &o->aux_head};
    for (int i = 0; i < 4; i++) {
        const char *v = sg_st_meta(f, ints[i]);
        if (!v) {
            fprintf(stderr, "fixture %s: metadata %s missing\n", sg_st_path(f), ints[i]);
            return -1;
        }
        *dst[i] = atoi(v);
    }
    static const char *const lists[] = {"blocks", "aspp_rates"};
    int *ldst[] = {o->blocks, o->aspp_rates}, lcap[] = {4, SG_MODEL_MAX_RATES}, got[2];
    for (int i = 0; i < 2; i++) {
        const char *v = sg_st_meta(f, lists[i]);
        int n = 0;
        while (v && *v && n < lcap[i]) {
            ldst[i][n++] = (int)strtol(v, (char **)&v, 10);
            if (*v == ',') v++;
        }
        got[i] = n;
    }
    if (got[0] != 4) {
        fprintf(stderr, "fixture %s: metadata blocks is not 4 numbers\n", sg_st_path(f));
        return -1;
    }
    o->n_aspp_rates = got[1];
    const char *wm = sg_st_meta(f, "width_mult"); /* mobilenet_v3_large fixtures */
    if (wm) o->width_mult = strtod(wm, NULL);
    return 0;
}

/* Fills the planned input with a deterministic pattern and runs one training
 * forward + CE backward (labels pattern, 1 in 7 ignored). Returns the loss. */
static inline double mt_train_step(sg_model *m, int n, int h, int w, float aux_weight,
                                   int accumulate) {
    sg_backend *be = sg_model_backend(m);
    const sg_model_opts *o = sg_model_get_opts(m);
    size_t cnt = (size_t)n * 3 * h * w, hw = (size_t)h * w;
    float *x = malloc(cnt * sizeof(float));
    for (size_t i = 0; i < cnt; i++) x[i] = (float)((i * 2654435761u) % 1000) / 500.0f - 1.0f;
    be->ops->upload(be, sg_model_input(m), x, cnt * sizeof(float));
    uint8_t *lab = malloc((size_t)n * hw);
    int64_t valid = 0;
    for (size_t i = 0; i < (size_t)n * hw; i++) {
        lab[i] = (i % 7 == 3) ? 255 : (uint8_t)((i * 31u / 5u) % (unsigned)o->num_classes);
        valid += lab[i] != 255;
    }
    uint8_t *dlab = be->ops->alloc(be, (size_t)n * hw);
    be->ops->upload(be, dlab, lab, (size_t)n * hw);
    sg_model_forward(m, 1, 12345);
    double s1 = 0, s2 = 0;
    int64_t v = 0;
    be->ops->ce_fwd_bwd(be, sg_model_out(m), dlab, n, o->num_classes, (int)hw, 255,
                        1.0f / (float)valid, sg_model_dout(m), &s1, &v);
    if (o->aux_head)
        be->ops->ce_fwd_bwd(be, sg_model_aux(m), dlab, n, o->num_classes, (int)hw, 255,
                            aux_weight / (float)valid, sg_model_daux(m), &s2, &v);
    sg_model_backward(m, accumulate);
    be->ops->sync(be);
    be->ops->free(be, dlab);
    free(x);
    free(lab);
    return (s1 + aux_weight * s2) / (double)valid;
}

#endif
