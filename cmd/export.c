/* cmd/export.c - `segtrain export --checkpoint CK --out FILE [--names
 * torchvision|mmseg] [--ema]`: the model tensors of a checkpoint alone (no
 * optimizer state, no EMA), under segtrain names or those of the system the
 * model was built after (its model.names): torchvision's (backbone./
 * classifier./aux_classifier.), so that torchvision's deeplabv3_*(...) /
 * fcn_*(...).load_state_dict(safetensors.torch.load_file(FILE), strict=True)
 * accepts it, or mmseg's (backbone./decode_head./auxiliary_head.), the
 * state_dict of mmseg's EncoderDecoder. Asking for the other system's names
 * is refused: the head modules differ, not only their names. --ema exports
 * the EMA weights (ema.<name>) instead, under the plain names: the same state
 * dict, with the averaged values. */
#include <stdio.h>
#include <string.h>

#include "cmd/commands.h"
#include "cmd/export_onnx.h"
#include "core/cli.h"
#include "core/log.h"
#include "core/outdir.h"
#include "io/safetensors.h"
#include "model/model_io.h"
#include "train/checkpoint.h"

/* torchvision builds DeepLabV3 and FCN on ResNet-50 and -101 at base width
 * 64 only (deeplabv3_resnet50/101, fcn_resnet50/101): other checkpoints get
 * torchvision's names but no torchvision constructor makes a model that
 * loads them. Said, not refused: the names still help a hand-built model.
 * MobileNetV3-Large: deeplabv3_mobilenet_v3_large / lraspp_mobilenet_v3_large
 * at width_mult 1 (a 16-channel stem) with heads of 256 / 128 channels. */
static int dim_is(const sg_st_file *f, const char *name, int d, long v) {
    const sg_st_tensor *t = sg_st_find(f, name);
    return t && t->ndim == 4 && (long)t->shape[d] == v;
}

static void torchvision_fit(const sg_st_file *f, const char *ck) {
    const char *bb = sg_st_meta(f, "backbone");
    const char *arch = sg_st_meta(f, "arch") ? sg_st_meta(f, "arch") : "deeplabv3";
    if (bb && !strcmp(bb, "mobilenet_v3_large")) {
        int lr = !strcmp(arch, "lraspp");
        if (dim_is(f, "encoder.0.0.weight", 0, 16) &&
            (lr ? dim_is(f, "decoder.cbr.0.weight", 0, 128)
                : dim_is(f, "decoder.4.weight", 1, 256)))
            return;
        SG_WARN("export --names torchvision: %s is a narrowed mobilenet_v3_large (model.width_mult "
                "or model.base_width other than 1.0 / 64); torchvision's %s_mobilenet_v3_large "
                "builds the full width only, so it does not load this file strictly (the names "
                "are torchvision's all the same)",
                ck, arch);
        return;
    }
    const sg_st_tensor *c1 = sg_st_find(f, "encoder.conv1.weight");
    long width = c1 && c1->ndim == 4 ? (long)c1->shape[0] : -1;
    int r50_101 = bb && (!strcmp(bb, "resnet50") || !strcmp(bb, "resnet101"));
    if (r50_101 && width == 64) return;
    SG_WARN("export --names torchvision: %s is a %s with base width %ld; torchvision has "
            "%s_resnet50 and %s_resnet101 at base width 64 only (model.arch %s), so no "
            "torchvision constructor builds a model that loads this file strictly (the names "
            "are torchvision's all the same)",
            ck, bb ? bb : "model of unrecorded backbone", width, arch, arch, arch);
}

/* names: "segtrain", "torchvision" or "mmseg" (checked by the caller) */
static int export_checkpoint(const char *ck, const char *out, const char *names, int ema) {
    char why[512];
    sg_st_file *f = sg_ckpt_open_valid(ck, why, sizeof why);
    if (!f) {
        SG_ERROR("export: %s: %s", ck, why);
        return 2; /* the checkpoint the user named is unreadable or corrupt */
    }
    if (ema && !sg_ckpt_has_ema(f)) {
        SG_ERROR("export --ema: %s holds no EMA weights (ema.*): it was trained with "
                 "train.ema_decay 0; export without --ema",
                 ck);
        sg_st_close(f);
        return 2;
    }
    /* checkpoints written before model.names existed are torchvision's */
    const char *model_names = sg_st_meta(f, "names") ? sg_st_meta(f, "names") : "torchvision";
    sg_names anchor = SG_NAMES_TORCHVISION;
    int renamed = strcmp(names, "segtrain") != 0;
    if (sg_names_parse(model_names, &anchor) != SG_OK) {
        SG_ERROR("export: %s: metadata names = '%s' is neither torchvision nor mmseg", ck,
                 model_names);
        sg_st_close(f);
        return 2; /* a corrupt or crafted file */
    }
    if (renamed && strcmp(names, model_names) != 0) {
        SG_ERROR("export --names %s: %s holds a model with %s's heads (model.names %s); its "
                 "state dict has no %s names. Use --names %s (or segtrain)",
                 names, ck, model_names, model_names, names, model_names);
        sg_st_close(f);
        return 2;
    }
    if (!strcmp(names, "torchvision")) torchvision_fit(f, ck);
    sg_st_writer *w = sg_st_writer_create();
    SG_CHECK(w != NULL, "out of host memory");
    sg_status rc = SG_OK;
    int n = 0;
    for (int i = 0; i < sg_st_count(f) && rc == SG_OK; i++) {
        const sg_st_tensor *t = sg_st_get(f, i);
        if (strncmp(t->name, "optimizer.", 10) == 0) continue;
        int is_ema = strncmp(t->name, "ema.", 4) == 0;
        if (is_ema != ema) continue;
        const char *plain = ema ? t->name + 4 : t->name;
        char name[256];
        if (renamed) rc = sg_model_anchor_name(plain, anchor, name, sizeof name);
        else snprintf(name, sizeof name, "%s", plain);
        /* data may be unaligned inside the mapping: writer_add copies bytes */
        if (rc == 0) rc = sg_st_writer_add(w, name, t->dtype, t->ndim, t->shape, t->data);
        if (rc != 0) SG_ERROR("export: cannot add tensor %s", t->name);
        n++;
    }
    const char *keys[] = {"backbone", "arch", "num_classes", "iter"};
    for (int i = 0; i < 4 && rc == 0; i++)
        if (sg_st_meta(f, keys[i])) rc = sg_st_writer_meta(w, keys[i], sg_st_meta(f, keys[i]));
    if (rc == 0) rc = sg_st_writer_meta(w, "format", "pt");
    if (rc == 0) rc = sg_st_writer_meta(w, "names", names);
    if (rc == 0) rc = sg_st_writer_meta(w, "weights", ema ? "ema" : "trained");
    if (rc == 0 && sg_mkdirs_for_output("export", out) != 0) rc = SG_ERR_RUNTIME;
    if (rc == 0) rc = sg_st_writer_write(w, out);
    sg_st_writer_destroy(w);
    sg_st_close(f);
    if (rc != 0) {
        SG_ERROR("export: writing %s failed (see above)", out);
        return 1;
    }
    SG_INFO("exported %d %stensors from %s to %s (%s names)", n, ema ? "EMA " : "", ck, out, names);
    return 0;
}

int sg_cmd_export(int argc, char **argv) {
    if (sg_export_wants_onnx(argc, argv)) return sg_cmd_export_onnx(argc, argv);
    const char *ck = NULL, *out = NULL, *names = "segtrain", *format = "safetensors";
    int ema = 0;
    sg_cli_opt opts[] = {
        {"--checkpoint", "FILE", "checkpoint to export", &ck, NULL},
        {"--out", "FILE", "safetensors file to write", &out, NULL},
        {"--names", "segtrain|torchvision|mmseg",
         "tensor names (default segtrain; torchvision or mmseg: the model's model.names)", &names,
         NULL},
        {"--ema", NULL, "export the EMA weights (ema.*, train.ema_decay > 0) as the model's", NULL,
         &ema},
        {"--format", "safetensors|onnx",
         "safetensors weights (default) or the ONNX graph: "
         "segtrain export --format onnx --help",
         &format, NULL},
        {NULL, NULL, NULL, NULL, NULL}};
    sg_cli cli;
    sg_status st = sg_cli_begin_args(&cli, argc, argv,
                                     "segtrain export --checkpoint CK --out FILE [--names "
                                     "torchvision|mmseg] [--ema]",
                                     opts);
    if (st != SG_OK || cli.done) return sg_exit_code(st);
    if (!ck) return sg_exit_code(sg_cli_usage_error(&cli, "--checkpoint is required"));
    if (!out) return sg_exit_code(sg_cli_usage_error(&cli, "--out is required"));
    if (strcmp(names, "segtrain") != 0 && strcmp(names, "torchvision") != 0 &&
        strcmp(names, "mmseg") != 0)
        return sg_exit_code(sg_cli_usage_error(
            &cli, "--names must be segtrain, torchvision or mmseg, not '%s'", names));
    if (strcmp(format, "safetensors") != 0)
        return sg_exit_code(
            sg_cli_usage_error(&cli, "--format must be safetensors or onnx, not '%s'", format));
    if (cli.n_args > 0)
        return sg_exit_code(sg_cli_usage_error(&cli, "unexpected argument '%s'", cli.args[0]));
    return export_checkpoint(ck, out, names, ema);
}
