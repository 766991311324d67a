/* train/train_core.c - building and freeing the training step's machinery
 * (see train/train_core.h): backend, communicator, model and SGD groups, DDP,
 * device slots. The step itself is in train/train_step.c. */
#include "train/train_core.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/log.h"
#include "model/model_io.h"
#include "train/checkpoint.h"
#include "train/device.h"
#include "train/from_checkpoint.h"

sg_status sg_train_core_open(sg_train_core *c, const sg_config *cfg) {
    c->cfg = cfg;
    /* a malformed launch environment is the user's setup: a config error */
    sg_dist_env env;
    if (sg_dist_env_read(&env) != 0) return SG_ERR_CONFIG;
    c->be = sg_open_backend(cfg, &env);
    if (!c->be) return SG_ERR_RUNTIME;
    sg_status why = SG_ERR_RUNTIME;
    c->comm = sg_comm_create_stoppable(cfg, c->be, c->stop, &why);
    if (!c->comm) return why;
    c->rank = sg_comm_rank(c->comm);
    c->world = sg_comm_world(c->comm);
    c->B = cfg->train.batch_size;
    c->K = cfg->train.accum_steps;
    c->C = cfg->model.num_classes;
    c->crop_h = cfg->data.crop_size[0];
    c->crop_w = cfg->data.crop_size[1];
    c->global_norm = strcmp(cfg->train.loss_norm, "global") == 0;
    for (int i = 0; i < 3; i++) {
        c->mean[i] = (float)cfg->data.mean[i];
        c->std[i] = (float)cfg->data.std[i];
    }
    return SG_OK;
}

/* model.pretrained: plain weights (segtrain or torchvision names) through
 * model_io; a segtrain checkpoint's optimizer state is not model weights, so
 * for one of those only the model tensors count (strict: all of them).
 * SG_OK, or an error (logged). */
static sg_status load_pretrained(sg_model *m, const sg_config *cfg) {
    const char *path = cfg->model.pretrained;
    sg_st_file *f = sg_st_open(path);
    if (!f) return SG_ERR_CONFIG;
    const char *fmt = sg_st_meta(f, "format");
    int is_ckpt = fmt && strcmp(fmt, SG_CKPT_FORMAT) == 0;
    sg_load_report rep;
    sg_status rc;
    if (is_ckpt && cfg->model.pretrained_strict) rc = sg_ckpt_load_model(f, m);
    else rc = sg_model_load_file(m, f, NULL, cfg->model.pretrained_strict, &rep);
    sg_st_close(f);
    if (rc == SG_OK) SG_INFO("model.pretrained: initialised from %s", path);
    return rc;
}

sg_status sg_train_core_model(sg_train_core *c, int load_pretrained_weights, int verbose) {
    const sg_config *cfg = c->cfg;
    sg_model_opts mo;
    sg_status st = sg_model_opts_from_config(&mo, cfg);
    if (st != SG_OK) return st;
    c->m = sg_model_create(c->be, &mo);
    if (!c->m) return SG_ERR_CONFIG; /* logged: the options are invalid */
    sg_model_init(c->m, (uint64_t)cfg->seed);
    /* the published DeepLabV3 figures (mmsegmentation's, torchvision's) all
     * start from ImageNet weights; from scratch they are far out of reach */
    if (load_pretrained_weights && verbose && !cfg->model.pretrained[0] &&
        cfg->model.base_width == 64 &&
        (!strcmp(cfg->model.backbone, "resnet50") || !strcmp(cfg->model.backbone, "resnet101")))
        SG_WARN("model.pretrained is empty: this %s run starts from random initialisation, not "
                "ImageNet weights; the published mIoU figures (configs/*.yaml) assume them: get "
                "torchvision's %s file, `segtrain convert` it and set model.pretrained "
                "(docs/DATASETS.md, \"ImageNet weights\")",
                cfg->model.backbone, cfg->model.backbone);
    if (load_pretrained_weights && verbose && !cfg->model.pretrained[0] &&
        cfg->model.base_width == 64 &&
        (!strcmp(cfg->model.backbone, "resnet50v1c") ||
         !strcmp(cfg->model.backbone, "resnet101v1c")))
        SG_WARN("model.pretrained is empty: this %s run starts from random initialisation, not "
                "ImageNet weights; mmseg's published mIoU figures assume them: get mmseg's "
                "ImageNet ResNetV1c file (open-mmlab://%.*s_v1c), `segtrain convert` it and set "
                "model.pretrained",
                cfg->model.backbone, (int)strlen(cfg->model.backbone) - 3, cfg->model.backbone);
    if (load_pretrained_weights && verbose && !cfg->model.pretrained[0] &&
        !strcmp(cfg->model.backbone, "mobilenet_v3_large") && cfg->model.width_mult == 1.0)
        SG_WARN("model.pretrained is empty: this mobilenet_v3_large run starts from random "
                "initialisation, not ImageNet weights; torchvision's published mIoU figures "
                "assume them: get torchvision's mobilenet_v3_large ImageNet file "
                "(MobileNet_V3_Large_Weights.IMAGENET1K_V1), `segtrain convert` it and set "
                "model.pretrained (its features.* fill the encoder)");
    if (load_pretrained_weights && cfg->model.pretrained[0]) {
        /* the file is the user's choice: a configuration error; a missing
         * file is not a strictness question */
        struct stat st;
        if (stat(cfg->model.pretrained, &st) != 0) {
            char cwd[1024];
            SG_ERROR("model.pretrained: %s: %s (a relative path is relative to the working "
                     "directory, %s): give the file's path, or model.pretrained: \"\" to start "
                     "from random initialisation",
                     cfg->model.pretrained, strerror(errno),
                     getcwd(cwd, sizeof cwd) ? cwd : "unknown");
            return SG_ERR_CONFIG;
        }
        if (load_pretrained(c->m, cfg) != SG_OK) {
            if (cfg->model.pretrained_strict)
                SG_ERROR("model.pretrained: loading %s failed (see above); set "
                         "model.pretrained_strict: false to skip mismatching keys",
                         cfg->model.pretrained);
            else {
                /* the reader named the cause: a PyTorch file, a non-finite tensor, ... */
                SG_ERROR("model.pretrained: loading %s failed (see above)", cfg->model.pretrained);
            }
            return SG_ERR_CONFIG;
        }
    }
    /* freezing is configuration, applied before anything trains (it also
     * changes the work: no weight gradients) */
    /* train.freeze_bn_stats: BN layers under the frozen prefixes keep their
     * running statistics (the "requires_grad=False still updates BN" trap);
     * with no train.freeze list it applies to every BN layer (mmseg's
     * norm_eval), which also makes accumulation exactly equal a big batch. */
    for (int i = 0; i < cfg->train.n_freeze; i++)
        sg_model_freeze(c->m, cfg->train.freeze[i], cfg->train.freeze_bn_stats);
    if (cfg->train.freeze_bn_stats && cfg->train.n_freeze == 0) {
        int n = sg_model_freeze_bn_stats(c->m, "");
        if (verbose)
            SG_INFO("train.freeze_bn_stats: all %d BN layers use and keep their running "
                    "statistics",
                    n);
    }
    /* cuda.graphs: the config checked the device; the backend says whether
     * it can (a CUDA build always can) */
    if (cfg->cuda.graphs && sg_model_set_graphs(c->m, 1) != SG_OK) return SG_ERR_CONFIG;
    int n = sg_model_num_params(c->m), np = 0;
    sg_opt_param *ps = calloc((size_t)n, sizeof *ps);
    SG_CHECK(ps != NULL, "out of host memory");
    for (int i = 0; i < n; i++) {
        sg_param *p = sg_model_param(c->m, i);
        if (p->is_buffer) continue;
        ps[np++] = (sg_opt_param){p->name, p->data, p->grad, p->count, !p->trainable};
    }
    st = sg_sgd_init(&c->opt, c->be, ps, np, &cfg->train);
    free(ps);
    if (st != SG_OK) return st;
    if (verbose)
        SG_INFO("model: %s, %zu parameters (%zu trainable, %d tensors frozen, %d at lr x %g)",
                cfg->model.backbone, sg_model_param_count(c->m, 0), sg_model_param_count(c->m, 1),
                c->opt.n_frozen, c->opt.n_head, cfg->train.head_lr_mult);
    return SG_OK;
}

sg_status sg_train_core_attach(sg_train_core *c) {
    c->ddp = sg_ddp_create(c->comm, c->m, c->cfg);
    if (!c->ddp) return SG_ERR_RUNTIME;
    c->slot = calloc((size_t)c->K, sizeof *c->slot);
    SG_CHECK(c->slot != NULL, "out of host memory");
    size_t px = (size_t)c->B * c->crop_h * c->crop_w;
    for (int k = 0; k < c->K; k++) {
        c->slot[k].img = c->be->ops->alloc(c->be, px * 3);
        c->slot[k].lab = c->be->ops->alloc(c->be, px);
        c->slot[k].img_host = c->be->ops->host_alloc(c->be, px * 3);
        c->slot[k].lab_host = c->be->ops->host_alloc(c->be, px);
    }
    const sg_train_cfg *t = &c->cfg->train;
    if (t->n_class_weights > 0) { /* validated: one per class, finite, >= 0 */
        for (int k = 0; k < c->C; k++) c->class_w_host[k] = (float)t->class_weights[k];
        c->class_w = c->be->ops->alloc(c->be, (size_t)c->C * sizeof(float));
        c->be->ops->upload(c->be, c->class_w, c->class_w_host, (size_t)c->C * sizeof(float));
    }
    c->loss_acc = c->be->ops->alloc(c->be, 2 * sizeof(double));
    c->loss_host = c->be->ops->host_alloc(c->be, 2 * sizeof(double));
    c->ohem_thresh = (float)t->ohem_thresh;
    if (c->ohem_thresh > 0) c->ohem_prob = c->be->ops->alloc(c->be, px * sizeof(float));
    if (c->class_w || c->ohem_prob) {
        c->lab_host = malloc(px);
        SG_CHECK(c->lab_host != NULL, "out of host memory");
    }
    /* the step's counts, then room for them again followed by every rank's
     * micro-batch sizes (train_step.c: one all-reduce carries both) */
    c->counts = calloc((size_t)2 + (size_t)c->C * (1 + (size_t)c->K) + (size_t)2 + (size_t)c->C +
                           (size_t)c->K * (size_t)c->world,
                       sizeof *c->counts);
    SG_CHECK(c->counts != NULL, "out of host memory");
    /* after DDP: SyncBN's hooks decide how many values a BN layer pools.
     * A batch or crop the model cannot train on is the config's (logged). */
    return sg_model_plan(c->m, c->B, c->crop_h, c->crop_w);
}

sg_loader *sg_train_core_loader(sg_train_core *c, const sg_dataset *ds) {
    sg_loader_opts lo;
    sg_loader_opts_from_config(&lo, &c->cfg->data, 1, c->B, (uint64_t)c->cfg->seed);
    sg_loader_opts_use_backend(&lo, c->be);
    return sg_loader_create(ds, &lo);
}

sg_status sg_train_core_setup(sg_train_core *c, const sg_config *cfg) {
    sg_status st = sg_train_core_open(c, cfg);
    if (st == SG_OK) st = sg_train_core_model(c, 0, 0);
    if (st == SG_OK) st = sg_train_core_attach(c);
    return st;
}

void sg_train_core_close(sg_train_core *c) {
    /* first: after a failure a collective may still block the device, and
     * each free below waits for the device (dist/comm.h) */
    sg_comm_quiesce(c->comm);
    if (c->slot)
        for (int k = 0; k < c->K; k++) {
            if (c->slot[k].img) c->be->ops->free(c->be, c->slot[k].img);
            if (c->slot[k].lab) c->be->ops->free(c->be, c->slot[k].lab);
            if (c->slot[k].img_host) c->be->ops->host_free(c->be, c->slot[k].img_host);
            if (c->slot[k].lab_host) c->be->ops->host_free(c->be, c->slot[k].lab_host);
        }
    free(c->slot);
    c->slot = NULL;
    if (c->class_w) c->be->ops->free(c->be, c->class_w);
    if (c->ohem_prob) c->be->ops->free(c->be, c->ohem_prob);
    if (c->loss_acc) c->be->ops->free(c->be, c->loss_acc);
    if (c->loss_host) c->be->ops->host_free(c->be, c->loss_host);
    c->class_w = c->ohem_prob = NULL;
    c->loss_acc = c->loss_host = NULL;
    free(c->lab_host);
    free(c->counts);
    c->lab_host = NULL;
    c->counts = NULL;
    sg_ddp_destroy(c->ddp);
    c->ddp = NULL;
    sg_sgd_free(&c->opt);
    if (c->m) sg_model_destroy(c->m);
    c->m = NULL;
    sg_comm_destroy(c->comm);
    c->comm = NULL;
    if (c->be) sg_backend_destroy(c->be);
    c->be = NULL;
}
