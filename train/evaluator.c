/* train/evaluator.c - see evaluator.h. */
#include "train/evaluator.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "data/sampler.h"
#include "io/png.h"
#include "train/from_checkpoint.h"
#include "train/progress.h"
#include "train/slide.h"

sg_status sg_evaluator_init(sg_evaluator *ev, sg_backend *be, const sg_dataset *ds,
                            const sg_config *cfg) {
    memset(ev, 0, sizeof *ev);
    ev->be = be;
    ev->ds = ds;
    ev->num_classes = cfg->model.num_classes;
    ev->ignore_index = cfg->data.ignore_index;
    snprintf(ev->label, sizeof ev->label, "evaluation");
    ev->crop_h = cfg->eval.crop_size[0];
    ev->crop_w = cfg->eval.crop_size[1];
    ev->stride_h = cfg->eval.stride[0] ? cfg->eval.stride[0] : ev->crop_h;
    ev->stride_w = cfg->eval.stride[1] ? cfg->eval.stride[1] : ev->crop_w;
    for (int i = 0; i < 3; i++) {
        ev->mean[i] = (float)cfg->data.mean[i];
        ev->std[i] = (float)cfg->data.std[i];
    }
    sg_loader_opts lo;
    /* sliding windows process one image at a time */
    ev->batch = ev->crop_h ? 1 : cfg->eval.batch_size;
    sg_loader_opts_from_config(&lo, &cfg->data, 0, ev->batch, (uint64_t)cfg->seed);
    sg_loader_opts_use_backend(&lo, be);
    ev->loader = sg_loader_create(ds, &lo);
    if (!ev->loader) return SG_ERR_RUNTIME;
    ev->use_tta = sg_tta_enabled(cfg);
    if (ev->use_tta) {
        sg_tta_init(&ev->tta, be, cfg, ev->crop_h, ev->crop_w, ev->stride_h, ev->stride_w);
    }
    size_t c = (size_t)ev->num_classes;
    ev->d_conf = be->ops->alloc(be, c * c * sizeof(int64_t));
    return SG_OK;
}

void sg_evaluator_free(sg_evaluator *ev) {
    sg_backend *be = ev->be;
    if (!be) return;
    sg_loader_destroy(ev->loader);
    if (ev->d_img) be->ops->free(be, ev->d_img);
    if (ev->d_lab) be->ops->free(be, ev->d_lab);
    if (ev->d_pred) be->ops->free(be, ev->d_pred);
    if (ev->d_conf) be->ops->free(be, ev->d_conf);
    sg_tta_free(&ev->tta);
    memset(ev, 0, sizeof *ev);
}

static void ensure_px(sg_evaluator *ev, size_t px) {
    if (px <= ev->cap_px) return;
    sg_backend *be = ev->be;
    if (ev->d_img) be->ops->free(be, ev->d_img);
    if (ev->d_lab) be->ops->free(be, ev->d_lab);
    if (ev->d_pred) be->ops->free(be, ev->d_pred);
    ev->d_img = be->ops->alloc(be, px * 3);
    ev->d_lab = be->ops->alloc(be, px);
    ev->d_pred = be->ops->alloc(be, px);
    ev->cap_px = px;
}

static double gib(size_t b) { return (double)b / (1024.0 * 1024.0 * 1024.0); }

sg_status sg_evaluator_check_fits(sg_evaluator *ev, sg_model *m, int n, int h, int w,
                                  size_t available, const char *what) {
    if (ev->crop_h && !ev->use_tta) return SG_OK;
    if (n == ev->fit_n && h == ev->fit_h && w == ev->fit_w) return SG_OK;
    size_t plan, tta_bufs = 0, tta_held = 0;
    if (ev->use_tta) {
        /* a scale the model refuses: planning reports it (naming the scale) */
        if (sg_tta_bytes(&ev->tta, m, n, h, w, &plan, &tta_bufs, &tta_held) != 0) return SG_OK;
        if (tta_bufs <= tta_held) tta_bufs = tta_held = 0; /* nothing grows */
    } else {
        plan = sg_model_plan_bytes(m, n, h, w, 0);
    }
    if (plan == 0) return SG_OK; /* a shape the model refuses: planning reports it */
    size_t px = (size_t)n * h * w;
    size_t bufs = px > ev->cap_px ? px * 5 : 0; /* image (3), label, prediction */
    const char *dev = "the device";
    sg_backend_info bi;
    if (!available) {
        sg_backend_get_info(ev->be, &bi);
        if (!bi.mem_available) return SG_OK; /* unknown: nothing to compare with */
        /* a re-plan frees the current arena first; bigger buffers replace the old */
        available = bi.mem_available + sg_model_activation_bytes(m) + (bufs ? ev->cap_px * 5 : 0) +
                    tta_held;
        dev = bi.name;
    }
    size_t need = plan + bufs + tta_bufs;
    const char *label = ev->label[0] ? ev->label : "evaluation";
    if (need > available && ev->use_tta) {
        SG_ERROR("%s: %s%s%dx%d image%s (test-time augmentation over %d scale%s%s, %s, "
                 "%d per pass) needs about %.1f GiB on %s (the largest scale's inference plan "
                 "%.1f GiB + %.1f GiB of image, logit and probability buffers) but %.1f GiB are "
                 "available: use fewer or smaller eval.scales, %s",
                 label, what ? what : "", what ? ": a " : "a ", h, w, n > 1 ? "s" : "",
                 ev->tta.n_scales, ev->tta.n_scales > 1 ? "s" : "", ev->tta.flip ? " x flip" : "",
                 ev->crop_h ? "sliding windows" : "whole images", n, gib(need), dev, gib(plan),
                 gib(bufs + tta_bufs), gib(available),
                 ev->crop_h ? "or a smaller eval.crop_size"
                            : "evaluate in sliding windows with eval.crop_size (e.g. --set "
                              "eval.crop_size=[1024,1024]), or lower eval.batch_size");
        return SG_ERR_CONFIG;
    }
    if (need > available) {
        SG_ERROR("%s: %s%s%dx%d image%s (whole-image inference, %d per pass) needs about "
                 "%.1f GiB on %s (the model's inference plan %.1f GiB + image buffers) but %.1f "
                 "GiB are available: use sliding windows with eval.crop_size (e.g. --set "
                 "eval.crop_size=[1024,1024])%s",
                 label, what ? what : "", what ? ": a " : "a ", h, w, n > 1 ? "s" : "", n,
                 gib(need), dev, gib(plan), gib(available),
                 n > 1 ? ", or lower eval.batch_size" : "");
        return SG_ERR_CONFIG;
    }
    ev->fit_n = n;
    ev->fit_h = h;
    ev->fit_w = w;
    return SG_OK;
}

sg_status sg_evaluator_preflight(sg_evaluator *ev, sg_model *m, const int64_t *indices, int64_t n) {
    if (ev->preflight_done || (ev->crop_h && !ev->use_tta)) return SG_OK;
    ev->preflight_done = 1;
    int64_t best = -1;
    int bh = 0, bw = 0;
    for (int64_t i = 0; i < n; i++) {
        int h, w;
        char err[SG_DATA_ERR_LEN];
        const char *path = sg_dataset_image_path(ev->ds, indices[i]);
        if (sg_png_read_size(path, &h, &w, err, sizeof err) != SG_OK) continue;
        if (best < 0 || (int64_t)h * w > (int64_t)bh * bw) {
            best = indices[i];
            bh = h;
            bw = w;
        }
    }
    if (best < 0) return SG_OK;
    int nb = (int64_t)ev->batch < n ? ev->batch : (int)n;
    sg_status rc =
        sg_evaluator_check_fits(ev, m, nb, bh, bw, 0, sg_dataset_image_path(ev->ds, best));
    ev->fit_n = ev->fit_h = ev->fit_w = 0; /* checked against today's memory, not planned */
    return rc;
}

/* Whole images: one forward over the batch. SG_OK or SG_ERR_RUNTIME. */
static sg_status run_full(sg_evaluator *ev, sg_model *m, const sg_batch *b) {
    sg_backend *be = ev->be;
    if (sg_model_plan_infer(m, b->n, b->h, b->w) != SG_OK) return SG_ERR_RUNTIME;
    be->ops->normalize_u8(be, ev->d_img, sg_model_input(m), b->n, b->h, b->w, ev->mean, ev->std);
    sg_model_forward(m, 0, 0);
    be->ops->argmax(be, sg_model_out(m), ev->d_pred, b->n, ev->num_classes, b->h * b->w);
    return SG_OK;
}

/* Sliding windows (one image, train/slide.h): argmax of the per-pixel mean
 * of the window logits. SG_OK or SG_ERR_RUNTIME. */
static sg_status run_slide(sg_evaluator *ev, sg_model *m, const sg_batch *b) {
    sg_backend *be = ev->be;
    size_t px = (size_t)b->h * b->w;
    float *logits = malloc((size_t)ev->num_classes * px * sizeof(float));
    uint8_t *pred = malloc(px);
    SG_CHECK(logits && pred, "out of host memory for sliding-window logits (%zu floats)",
             (size_t)ev->num_classes * px);
    sg_status rc = sg_slide_logits(be, m, ev->d_img, b->h, b->w, ev->num_classes, ev->crop_h,
                                   ev->crop_w, ev->stride_h, ev->stride_w, ev->mean, ev->std,
                                   logits);
    if (rc == SG_OK) {
        sg_slide_argmax(logits, ev->num_classes, px, pred);
        be->ops->upload(be, ev->d_pred, pred, px);
    }
    free(logits);
    free(pred);
    return rc;
}

/* Test-time augmentation (train/tta.h): argmax of the averaged
 * probabilities. SG_OK or SG_ERR_RUNTIME. */
static sg_status run_tta(sg_evaluator *ev, sg_model *m, const sg_batch *b) {
    if (sg_tta_run(&ev->tta, m, ev->d_img, b->n, b->h, b->w) != SG_OK) return SG_ERR_RUNTIME;
    ev->be->ops->argmax(ev->be, ev->tta.d_prob, ev->d_pred, b->n, ev->num_classes, b->h * b->w);
    return SG_OK;
}

sg_status sg_evaluator_run(sg_evaluator *ev, sg_model *m, sg_comm *comm, const int64_t *indices,
                           int64_t n, int64_t epoch, int64_t *conf) {
    sg_backend *be = ev->be;
    size_t cc = (size_t)ev->num_classes * ev->num_classes;
    if (ev->use_tta && !ev->tta_logged) { /* once per evaluator, under its label */
        ev->tta_logged = 1;
        char sc[16 * 16] = "";
        for (int i = 0; i < ev->tta.n_scales; i++)
            snprintf(sc + strlen(sc), sizeof sc - strlen(sc), "%s%g", i ? ", " : "",
                     ev->tta.scales[i]);
        SG_INFO("%s: test-time augmentation, scales [%s]%s, softmax probabilities averaged",
                ev->label, sc, ev->tta.flip ? " x flip" : "");
    }
    be->ops->zero(be, ev->d_conf, cc * sizeof(int64_t));
    ev->images = 0;
    sg_status rc = SG_OK;
    /* rank 0 shows its own shard's progress (the others run in step) */
    sg_progress prog;
    int world = sg_comm_world(comm);
    char what[sizeof ev->label + 32];
    snprintf(what, sizeof what, world > 1 ? "%s (rank 0's share)" : "%s", ev->label);
    sg_progress_begin(&prog, what, n, sg_comm_rank(comm) == 0);
    if (sg_evaluator_preflight(ev, m, indices, n) != SG_OK) rc = SG_ERR_RUNTIME;
    if (rc == SG_OK && n > 0 && sg_loader_start(ev->loader, indices, n, epoch) != 0)
        rc = SG_ERR_RUNTIME;
    while (rc == SG_OK && n > 0) {
        sg_batch *b = NULL;
        int r = sg_loader_next(ev->loader, &b);
        if (r < 0) {
            rc = SG_ERR_RUNTIME;
            break;
        }
        if (r == 0) break;
        size_t px = (size_t)b->n * b->h * b->w;
        if (sg_evaluator_check_fits(ev, m, b->n, b->h, b->w, 0,
                                    sg_dataset_image_path(ev->ds, b->indices[0])) != SG_OK) {
            sg_loader_release(ev->loader, b);
            rc = SG_ERR_RUNTIME;
            break;
        }
        ensure_px(ev, px);
        be->ops->upload(be, ev->d_img, b->images, px * 3);
        be->ops->upload(be, ev->d_lab, b->labels, px);
        int n_img = b->n;
        sg_batch copy = *b;
        sg_loader_release(ev->loader, b);
        rc = ev->use_tta  ? run_tta(ev, m, &copy)
             : ev->crop_h ? run_slide(ev, m, &copy)
                          : run_full(ev, m, &copy);
        if (rc == SG_OK)
            be->ops->confusion(be, ev->d_pred, ev->d_lab, px, ev->num_classes, ev->d_conf);
        ev->images += n_img;
        sg_progress_update(&prog, ev->images);
    }
    sg_progress_end(&prog);
    be->ops->sync(be);
    be->ops->download(be, conf, ev->d_conf, cc * sizeof(int64_t));
    /* Every rank reaches the all-reduce, even after a local error, so no peer
     * hangs; the error flag travels in the last element. */
    int64_t *buf = malloc((cc + 1) * sizeof(int64_t));
    SG_CHECK(buf != NULL, "out of host memory");
    memcpy(buf, conf, cc * sizeof(int64_t));
    buf[cc] = rc != SG_OK;
    if (sg_comm_allreduce_i64(comm, buf, cc + 1) != 0) rc = SG_ERR_RUNTIME;
    memcpy(conf, buf, cc * sizeof(int64_t));
    if (rc == SG_OK && buf[cc] != 0) {
        SG_ERROR("evaluation failed on another rank (see its log)");
        rc = SG_ERR_RUNTIME;
    }
    free(buf);
    return rc;
}

int64_t *sg_evaluator_shard(int64_t size, int world, int rank, int64_t *n) {
    *n = sg_eval_shard_size(size, world, rank);
    int64_t *idx = malloc((size_t)(*n > 0 ? *n : 1) * sizeof(int64_t));
    SG_CHECK(idx != NULL, "out of host memory");
    sg_eval_shard(size, world, rank, idx);
    return idx;
}
