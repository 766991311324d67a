/* train/tta.c - see tta.h. */
#include "train/tta.h"

#include <stdlib.h>
#include <string.h>

#include "core/log.h"

int sg_tta_enabled(const sg_config *cfg) {
    const sg_eval_cfg *e = &cfg->eval;
    return e->flip || e->n_scales != 1 || e->scales[0] != 1.0;
}

int sg_tta_scaled(int v, double s) {
    int r = (int)(v * s + 0.5);
    return r < 1 ? 1 : r;
}

void sg_tta_init(sg_tta *t, sg_backend *be, const sg_config *cfg, int crop_h, int crop_w,
                 int stride_h, int stride_w) {
    memset(t, 0, sizeof *t);
    t->be = be;
    t->num_classes = cfg->model.num_classes;
    t->n_scales = cfg->eval.n_scales;
    for (int i = 0; i < t->n_scales; i++) t->scales[i] = cfg->eval.scales[i];
    t->flip = cfg->eval.flip != 0;
    t->crop_h = crop_h;
    t->crop_w = crop_w;
    t->stride_h = stride_h ? stride_h : crop_h;
    t->stride_w = stride_w ? stride_w : crop_w;
    for (int i = 0; i < 3; i++) {
        t->mean[i] = (float)cfg->data.mean[i];
        t->std[i] = (float)cfg->data.std[i];
    }
}

void sg_tta_free(sg_tta *t) {
    sg_backend *be = t->be;
    if (!be) return;
    float *bufs[] = {t->d_norm, t->d_in, t->d_up, t->d_flip, t->d_win, t->d_prob};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        if (bufs[i]) be->ops->free(be, bufs[i]);
    memset(t, 0, sizeof *t);
}

/* Grows *buf to hold `count` floats (contents are not kept). */
static float *ensure(sg_backend *be, float **buf, size_t *cap, size_t count) {
    if (count > *cap) {
        if (*buf) be->ops->free(be, *buf);
        *buf = be->ops->alloc(be, count * sizeof(float));
        *cap = count;
    }
    return *buf;
}

/* The buffer sizes (floats) a batch needs, and the largest plan. */
typedef struct tta_sizes {
    size_t norm, in, up, flip, win, prob, plan;
    int bad_scale; /* index of a scale the model refuses, else -1 */
} tta_sizes;

static void sizes(const sg_tta *t, const sg_model *m, int n, int H, int W, tta_sizes *z) {
    memset(z, 0, sizeof *z);
    z->bad_scale = -1;
    size_t C = (size_t)t->num_classes, px = (size_t)n * H * W;
    z->norm = px * 3;
    z->prob = px * C;
    if (t->flip) z->flip = px * C;
    for (int i = 0; i < t->n_scales; i++) {
        int h = sg_tta_scaled(H, t->scales[i]), w = sg_tta_scaled(W, t->scales[i]);
        size_t spx = (size_t)n * h * w, plan;
        if (h != H || w != W) z->up = px * C;
        if (t->crop_h) {
            if (h != H || w != W) z->in = spx * 3 > z->in ? spx * 3 : z->in;
            z->win = spx * C > z->win ? spx * C : z->win;
            int ch = t->crop_h < h ? t->crop_h : h, cw = t->crop_w < w ? t->crop_w : w;
            plan = sg_model_plan_bytes(m, 1, ch, cw, 0);
        } else {
            plan = sg_model_plan_bytes(m, n, h, w, 0);
        }
        if (plan == 0 && z->bad_scale < 0) z->bad_scale = i;
        if (plan > z->plan) z->plan = plan;
    }
}

int sg_tta_bytes(const sg_tta *t, const sg_model *m, int n, int H, int W, size_t *plan,
                 size_t *bufs, size_t *held) {
    tta_sizes z;
    sizes(t, m, n, H, W, &z);
    *plan = z.plan;
    *bufs = (z.norm + z.in + z.up + z.flip + z.win + z.prob) * sizeof(float);
    *held = (t->cap_norm + t->cap_in + t->cap_up + t->cap_flip + t->cap_win + t->cap_prob) *
            sizeof(float);
    return z.bad_scale < 0 ? 0 : -1;
}

static sg_status plan_failed(const sg_tta *t, int si, int H, int W, int h, int w) {
    SG_ERROR("test-time augmentation: eval.scales[%d] = %g turns the %dx%d image into %dx%d, "
             "which the model cannot take (see above): remove that scale from eval.scales",
             si, t->scales[si], H, W, h, w);
    return SG_ERR_RUNTIME;
}

/* Sliding-window logits of one normalised image x [3,h,w] (device), flipped
 * horizontally first when `flip`, into t->d_win [C,h,w]: the evaluator's
 * window placement and per-pixel averaging, on float input (a window copy of
 * a float image equals normalising the window, so scale 1 gives the same
 * windows as the evaluator's uint8 path). */
static sg_status slide_logits(sg_tta *t, sg_model *m, const float *x, int h, int w, int flip,
                              int si, int H, int W) {
    sg_backend *be = t->be;
    int C = t->num_classes;
    int ch = t->crop_h < h ? t->crop_h : h, cw = t->crop_w < w ? t->crop_w : w;
    if (sg_model_plan_infer(m, 1, ch, cw) != SG_OK) return plan_failed(t, si, H, W, h, w);
    size_t hw = (size_t)h * w, need = (size_t)C * hw;
    /* host buffers are NCHW; `stage` converts to and from the backend's
     * activation layout (big enough for the image, a window's logits and
     * the result) */
    size_t nwin = (size_t)C * ch * cw, nstage = need > hw * 3 ? need : hw * 3;
    float *src = malloc(hw * 3 * sizeof(float));
    float *win = malloc((size_t)ch * cw * 3 * sizeof(float));
    float *acc = calloc(need + hw, sizeof(float)), *cnt = acc ? acc + need : NULL;
    float *logits = malloc(nwin * sizeof(float));
    float *stage = malloc((nstage > nwin ? nstage : nwin) * sizeof(float));
    SG_CHECK(src && win && acc && logits && stage,
             "out of host memory for sliding-window logits "
             "(%zu floats)",
             need);
    be->ops->download(be, stage, x, hw * 3 * sizeof(float));
    sg_act_relayout(src, stage, 1, 3, (int)hw, sizeof(float), be->layout, SG_LAYOUT_NCHW);
    if (flip)
        for (size_t r = 0; r < (size_t)3 * h; r++) {
            float *row = src + r * w;
            for (int a = 0, b = w - 1; a < b; a++, b--) {
                float v = row[a];
                row[a] = row[b];
                row[b] = v;
            }
        }
    int ny = h > ch ? (h - ch + t->stride_h - 1) / t->stride_h + 1 : 1;
    int nx = w > cw ? (w - cw + t->stride_w - 1) / t->stride_w + 1 : 1;
    for (int iy = 0; iy < ny; iy++)
        for (int ix = 0; ix < nx; ix++) {
            int y0 = iy * t->stride_h, x0 = ix * t->stride_w;
            if (y0 + ch > h) y0 = h - ch;
            if (x0 + cw > w) x0 = w - cw;
            for (int c = 0; c < 3; c++)
                for (int y = 0; y < ch; y++)
                    memcpy(win + ((size_t)c * ch + y) * cw, src + ((size_t)c * h + y0 + y) * w + x0,
                           (size_t)cw * sizeof(float));
            sg_act_relayout(stage, win, 1, 3, ch * cw, sizeof(float), SG_LAYOUT_NCHW, be->layout);
            be->ops->upload(be, sg_model_input(m), stage, (size_t)ch * cw * 3 * sizeof(float));
            sg_model_forward(m, 0, 0);
            be->ops->download(be, stage, sg_model_out(m), nwin * sizeof(float));
            sg_act_relayout(logits, stage, 1, C, ch * cw, sizeof(float), be->layout,
                            SG_LAYOUT_NCHW);
            for (int c = 0; c < C; c++)
                for (int y = 0; y < ch; y++) {
                    const float *l = logits + ((size_t)c * ch + y) * cw;
                    float *a = acc + ((size_t)c * h + y0 + y) * w + x0;
                    for (int xx = 0; xx < cw; xx++) a[xx] += l[xx];
                }
            for (int y = 0; y < ch; y++)
                for (int xx = 0; xx < cw; xx++) cnt[(size_t)(y0 + y) * w + x0 + xx] += 1.0f;
        }
    for (int c = 0; c < C; c++)
        for (size_t p = 0; p < hw; p++) acc[(size_t)c * hw + p] /= cnt[p];
    ensure(be, &t->d_win, &t->cap_win, need);
    sg_act_relayout(stage, acc, 1, C, (int)hw, sizeof(float), SG_LAYOUT_NCHW, be->layout);
    be->ops->upload(be, t->d_win, stage, need * sizeof(float));
    free(stage);
    free(src);
    free(win);
    free(acc);
    free(logits);
    return SG_OK;
}

sg_status sg_tta_run(sg_tta *t, sg_model *m, const uint8_t *d_img, int n, int H, int W) {
    sg_backend *be = t->be;
    const sg_ops *o = be->ops;
    int C = t->num_classes;
    size_t px = (size_t)n * H * W;
    SG_CHECK(!t->crop_h || n == 1, "sliding-window test-time augmentation takes one image");
    ensure(be, &t->d_norm, &t->cap_norm, px * 3);
    ensure(be, &t->d_prob, &t->cap_prob, px * C);
    o->normalize_u8(be, d_img, t->d_norm, n, H, W, t->mean, t->std);
    int passes = t->n_scales * (t->flip ? 2 : 1), k = 0;
    for (int si = 0; si < t->n_scales; si++) {
        int h = sg_tta_scaled(H, t->scales[si]), w = sg_tta_scaled(W, t->scales[si]);
        int same = h == H && w == W;
        for (int f = 0; f <= t->flip; f++) {
            const float *logits;
            if (!t->crop_h) {
                /* the model's input, resized and flipped */
                if (sg_model_plan_infer(m, n, h, w) != SG_OK) return plan_failed(t, si, H, W, h, w);
                float *in = sg_model_input(m);
                if (same && !f) {
                    o->copy(be, in, t->d_norm, px * 3 * sizeof(float));
                } else if (same) {
                    o->flip_w(be, t->d_norm, in, n, 3, H, W);
                } else if (!f) {
                    o->resize_fwd(be, t->d_norm, in, n, 3, H, W, h, w);
                } else {
                    ensure(be, &t->d_in, &t->cap_in, (size_t)n * 3 * h * w);
                    o->resize_fwd(be, t->d_norm, t->d_in, n, 3, H, W, h, w);
                    o->flip_w(be, t->d_in, in, n, 3, h, w);
                }
                sg_model_forward(m, 0, 0);
                logits = sg_model_out(m);
            } else {
                /* sliding windows over the resized image (flipped on the host) */
                const float *x = t->d_norm;
                if (!same) {
                    ensure(be, &t->d_in, &t->cap_in, (size_t)3 * h * w);
                    o->resize_fwd(be, t->d_norm, t->d_in, 1, 3, H, W, h, w);
                    x = t->d_in;
                }
                sg_status rc = slide_logits(t, m, x, h, w, f, si, H, W);
                if (rc != SG_OK) return rc;
                logits = t->d_win;
            }
            /* back to the image: resize, flip back, softmax into the sum */
            if (!same) {
                ensure(be, &t->d_up, &t->cap_up, px * C);
                o->resize_fwd(be, logits, t->d_up, n, C, h, w, H, W);
                logits = t->d_up;
            }
            if (f) {
                ensure(be, &t->d_flip, &t->cap_flip, px * C);
                o->flip_w(be, logits, t->d_flip, n, C, H, W);
                logits = t->d_flip;
            }
            o->softmax_fwd(be, logits, t->d_prob, n, C, H * W, k > 0);
            k++;
        }
    }
    o->scale(be, t->d_prob, t->d_prob, 1.0f / (float)passes, px * C);
    return SG_OK;
}
