/* train/from_checkpoint.c - see from_checkpoint.h. */
#include "train/from_checkpoint.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "kernels/backend.h"
#include "model/model_io.h"
#include "train/checkpoint.h"
#include "train/config_rules.h"

/* Both ways validate with the dataset format and model rules (config_rules.h), as the
 * commands that train do: a broken rule is refused before anything runs. */
sg_status sg_config_for_checkpoint(const sg_cli *cli, const char *ck, sg_config *cfg) {
    if (cli->config_path) return sg_cli_load_config_with(cli, cfg, sg_train_config_rules);
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
    if (rc == SG_OK) rc = sg_config_validate_with(cfg, sg_train_config_rules);
    return rc == SG_OK ? SG_OK : SG_ERR_CONFIG;
}

sg_status sg_cli_load_checkpoint_config(sg_cli *cli, const char *ck, sg_config *cfg) {
    sg_status st = sg_config_for_checkpoint(cli, ck, cfg);
    if (st != SG_OK) return st;
    if (cli->print_config) {
        sg_config_write_origins(cfg, stdout);
        cli->done = 1;
    }
    return SG_OK;
}

/* After a file's tensors did not fit the model of cfg: what to do, into
 * out[cap]. With a stored configuration (a segtrain checkpoint), the keys
 * that shape the model where this run's configuration (--config, --set)
 * differs from it; without one (exported or converted weights), the
 * configuration to pass. */
static void mismatch_advice(const sg_st_file *f, const sg_config *cfg, char *out, size_t cap) {
    static const char *const shaping[] = {
        "model.arch",       "model.names",      "model.backbone",
        "model.base_width", "model.width_mult", "model.num_classes",
        "model.aux_head",   "model.aspp_rates", "model.output_stride"};
    if (!sg_st_meta(f, "config")) {
        snprintf(out, cap,
                 "the file stores no configuration (exported or converted weights): pass with "
                 "--config the configuration those weights were trained with (its "
                 "model.backbone, model.base_width, model.num_classes, model.aux_head)");
        return;
    }
    sg_config *stored = malloc(sizeof *stored);
    SG_CHECK(stored != NULL, "out of host memory");
    sg_config_defaults(stored);
    char diff[1024] = "";
    int n = 0;
    if (sg_ckpt_read_config(f, stored) == SG_OK) {
        size_t used = 0;
        for (size_t i = 0; i < sizeof shaping / sizeof *shaping && used < sizeof diff; i++) {
            char one[512];
            int k = sg_config_diff(cfg, "this run", stored, "the checkpoint", shaping[i], one,
                                   sizeof one);
            if (k <= 0) continue;
            int w = snprintf(diff + used, sizeof diff - used, "%s%s", n ? "; " : "", one);
            used += w > 0 ? (size_t)w : 0;
            n += k;
        }
    }
    free(stored);
    if (n > 0)
        snprintf(out, cap,
                 "this run's configuration describes another model than the one the checkpoint "
                 "was trained with (%s): drop the --set values or the --config file's keys that "
                 "change %s (--print-config shows where each value comes from); without "
                 "--config the checkpoint's own configuration is used",
                 diff, n > 1 ? "these keys" : "this key");
    else
        snprintf(out, cap,
                 "the checkpoint's stored configuration describes this very model, so its "
                 "tensors are wrong: a corrupt or crafted file (use another checkpoint)");
}

/* The file's model tensors (everything but optimizer.* and ema.*, which
 * sg_ckpt_load_* check tensor by tensor against the model) against what the
 * config's model holds, before that model is allocated: a small file whose
 * stored config says base_width 1024 must not make us allocate 16 GB. Also
 * the parameters against the device's memory. SG_OK, or SG_ERR_CONFIG
 * after logging both sides. */
static sg_status check_size(const sg_st_file *f, const sg_model_opts *mo, const sg_config *cfg,
                            sg_backend *be) {
    sg_model_size want;
    sg_model_expected_size(mo, &want);
    size_t f32 = 0, i64 = 0;
    int n = 0;
    for (int i = 0; i < sg_st_count(f); i++) {
        const sg_st_tensor *t = sg_st_get(f, i);
        if (strncmp(t->name, "optimizer.", 10) == 0 || strncmp(t->name, "ema.", 4) == 0) continue;
        n++;
        if (t->dtype == SG_ST_F32) f32 += t->count;
        else i64 += t->count;
    }
    if (n != want.tensors || f32 != want.f32 || i64 != want.i64) {
        char advice[2048];
        mismatch_advice(f, cfg, advice, sizeof advice);
        SG_ERROR("%s holds %d model tensors with %zu float values, but the model its config "
                 "describes (model.backbone %s, base_width %d, num_classes %d, aux_head %s, %d "
                 "ASPP rates) has %d tensors with %zu (%.1f MiB): the file does not fit that "
                 "config; %s",
                 sg_st_path(f), n, f32, cfg->model.backbone, cfg->model.base_width,
                 cfg->model.num_classes, cfg->model.aux_head ? "true" : "false",
                 cfg->model.n_aspp_rates, want.tensors, want.f32, (double)want.f32 * 4 / 1048576.0,
                 advice);
        return SG_ERR_CONFIG;
    }
    sg_backend_info bi;
    sg_backend_get_info(be, &bi);
    size_t need = want.f32 * sizeof(float) * 2; /* weights and gradients */
    if (bi.mem_available && need > bi.mem_available) {
        SG_ERROR("%s: the model needs %.1f MiB for its parameters but %s has %.1f MiB "
                 "available",
                 sg_st_path(f), (double)need / 1048576.0, bi.name,
                 (double)bi.mem_available / 1048576.0);
        return SG_ERR_CONFIG;
    }
    return SG_OK;
}

sg_model *sg_model_from_checkpoint(sg_backend *be, const sg_config *cfg, const char *ck,
                                   sg_status *why) {
    sg_status why_l;
    if (!why) why = &why_l;
    *why = SG_ERR_CONFIG; /* the user's file or config, unless said otherwise below */
    sg_model_opts mo;
    if (sg_model_opts_from_config(&mo, cfg) != SG_OK) return NULL;
    sg_st_file *f = sg_st_open(ck);
    if (!f) {
        SG_ERROR("cannot read checkpoint %s (see above)", ck);
        return NULL;
    }
    const char *fmt = sg_st_meta(f, "format");
    int is_ckpt = fmt && strcmp(fmt, SG_CKPT_FORMAT) == 0;
    if (is_ckpt) {
        sg_st_close(f);
        char why[1024];
        f = sg_ckpt_open_valid(ck, why, sizeof why);
        if (!f) {
            SG_ERROR("checkpoint %s: %s", ck, why);
            return NULL;
        }
    }
    if (check_size(f, &mo, cfg, be) != SG_OK) {
        sg_st_close(f);
        return NULL;
    }
    sg_model *m = sg_model_create(be, &mo);
    if (!m) {
        sg_st_close(f);
        *why = SG_ERR_RUNTIME; /* the device's memory */
        return NULL;
    }
    sg_status rc;
    if (is_ckpt && cfg->eval.use_ema && sg_ckpt_has_ema(f)) {
        /* the EMA is what this run evaluates (eval.use_ema) */
        rc = sg_ckpt_load_ema_as_model(f, m);
        if (rc == SG_OK)
            SG_INFO("%s: using its EMA weights (ema.*; eval.use_ema: false uses the trained "
                    "weights)",
                    ck);
    } else if (is_ckpt) {
        rc = sg_ckpt_load_model(f, m);
    } else {
        sg_load_report rep;
        rc = sg_model_load_file(m, f, NULL, 1, &rep);
    }
    if (rc != SG_OK) {
        char advice[2048];
        mismatch_advice(f, cfg, advice, sizeof advice);
        sg_st_close(f);
        SG_ERROR("%s does not fit the model of this config (model.backbone %s, num_classes %d, "
                 "base_width %d; the tensors that differ are listed above): %s",
                 ck, cfg->model.backbone, cfg->model.num_classes, cfg->model.base_width, advice);
        sg_model_destroy(m);
        return NULL;
    }
    sg_st_close(f);
    *why = SG_OK;
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
