/* train/from_checkpoint.c - see from_checkpoint.h. */
#include "train/from_checkpoint.h"

#include <string.h>

#include "train/checkpoint.h"
#include "core/log.h"
#include "model/model_io.h"

sg_status sg_config_for_checkpoint(const sg_cli *cli, const char *ck, sg_config *cfg) {
    if (cli->config_path) return sg_cli_load_config(cli, cfg);
    sg_config_defaults(cfg);
    sg_st_file *f = sg_st_open(ck);
    if (!f) {
        SG_ERROR("cannot read checkpoint %s (see above)", ck);
        return SG_ERR_CONFIG;
    }
    if (!sg_st_meta(f, "config")) {
        SG_ERROR("%s has no stored config (not a segtrain checkpoint): pass --config FILE", ck);
        sg_st_close(f);
        return SG_ERR_CONFIG;
    }
    sg_status rc = sg_ckpt_read_config(f, cfg);
    sg_st_close(f);
    for (int i = 0; rc == SG_OK && i < cli->n_sets; i++) rc = sg_config_set(cfg, cli->sets[i]);
    if (rc == SG_OK) rc = sg_config_validate(cfg);
    return rc == SG_OK ? SG_OK : SG_ERR_CONFIG;
}

sg_model *sg_model_from_checkpoint(sg_backend *be, const sg_config *cfg, const char *ck) {
    sg_model_opts mo;
    if (sg_model_opts_from_config(&mo, cfg) != SG_OK) return NULL;
    sg_model *m = sg_model_create(be, &mo);
    if (!m) return NULL;
    sg_st_file *f = sg_st_open(ck);
    if (!f) {
        SG_ERROR("cannot read checkpoint %s (see above)", ck);
        sg_model_destroy(m);
        return NULL;
    }
    sg_status rc;
    const char *fmt = sg_st_meta(f, "format");
    if (fmt && strcmp(fmt, SG_CKPT_FORMAT) == 0) {
        sg_st_close(f);
        char why[512];
        f = sg_ckpt_open_valid(ck, why, sizeof why);
        if (!f) {
            SG_ERROR("checkpoint %s: %s", ck, why);
            sg_model_destroy(m);
            return NULL;
        }
        rc = sg_ckpt_load_model(f, m);
    } else {
        sg_load_report rep;
        rc = sg_model_load_file(m, f, NULL, 1, &rep);
    }
    sg_st_close(f);
    if (rc != SG_OK) {
        SG_ERROR("%s does not fit the model of this config (model.backbone %s, num_classes %d, "
                 "base_width %d): pass the training config with --config", ck,
                 cfg->model.backbone, cfg->model.num_classes, cfg->model.base_width);
        sg_model_destroy(m);
        return NULL;
    }
    return m;
}

static void *backend_host_alloc(void *ctx, size_t bytes) {
    sg_backend *be = ctx;
    return be->ops->host_alloc(be, bytes);
}

static void backend_host_free(void *ctx, void *p) {
    sg_backend *be = ctx;
    be->ops->host_free(be, p);
}

void sg_loader_opts_use_backend(sg_loader_opts *lo, sg_backend *be) {
    lo->host_alloc = backend_host_alloc;
    lo->host_free = backend_host_free;
    lo->host_ctx = be;
}
