/* cmd/export.c - `segtrain export --checkpoint CK --out FILE [--names
 * torchvision] [--ema]`: the model tensors of a checkpoint alone (no
 * optimizer state, no EMA), under segtrain names or torchvision's (backbone./
 * classifier./aux_classifier.), so that torchvision's deeplabv3_*(...).
 * load_state_dict(safetensors.torch.load_file(FILE), strict=True) accepts
 * it. --ema exports the EMA weights (ema.<name>) instead, under the plain
 * names: the same state dict, with the averaged values. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "cmd/commands.h"
#include "cmd/export_onnx.h"
#include "core/cli.h"
#include "core/fsutil.h"
#include "core/log.h"
#include "io/safetensors.h"
#include "model/model_io.h"
#include "train/checkpoint.h"

/* torchvision builds DeepLabV3 on ResNet-50 and -101 at base width 64 only
 * (deeplabv3_resnet50/101): other checkpoints get torchvision's names but
 * no torchvision constructor makes a model that loads them. Said, not
 * refused: the names still help a hand-built model. */
static void torchvision_fit(const sg_st_file *f, const char *ck) {
    const char *bb = sg_st_meta(f, "backbone");
    const sg_st_tensor *c1 = sg_st_find(f, "encoder.conv1.weight");
    long width = c1 && c1->ndim == 4 ? (long)c1->shape[0] : -1;
    int r50_101 = bb && (!strcmp(bb, "resnet50") || !strcmp(bb, "resnet101"));
    if (r50_101 && width == 64) return;
    SG_WARN("export --names torchvision: %s is a %s with base width %ld; torchvision has "
            "deeplabv3_resnet50 and deeplabv3_resnet101 at base width 64 only, so no "
            "torchvision constructor builds a model that loads this file strictly (the names "
            "are torchvision's all the same)",
            ck, bb ? bb : "model of unrecorded backbone", width);
}

static int export_checkpoint(const char *ck, const char *out, int torchvision, int ema) {
    char why[512];
    sg_st_file *f = sg_ckpt_open_valid(ck, why, sizeof why);
    if (!f) {
        SG_ERROR("export: %s: %s", ck, why);
        return 1;
    }
    if (ema && !sg_ckpt_has_ema(f)) {
        SG_ERROR("export --ema: %s holds no EMA weights (ema.*): it was trained with "
                 "train.ema_decay 0; export without --ema",
                 ck);
        sg_st_close(f);
        return 1;
    }
    if (torchvision) torchvision_fit(f, ck);
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
        if (torchvision) rc = sg_model_torchvision_name(plain, name, sizeof name);
        else snprintf(name, sizeof name, "%s", plain);
        /* data may be unaligned inside the mapping: writer_add copies bytes */
        if (rc == 0) rc = sg_st_writer_add(w, name, t->dtype, t->ndim, t->shape, t->data);
        if (rc != 0) SG_ERROR("export: cannot add tensor %s", t->name);
        n++;
    }
    const char *keys[] = {"backbone", "num_classes", "iter"};
    for (int i = 0; i < 3 && rc == 0; i++)
        if (sg_st_meta(f, keys[i])) rc = sg_st_writer_meta(w, keys[i], sg_st_meta(f, keys[i]));
    if (rc == 0) rc = sg_st_writer_meta(w, "format", "pt");
    if (rc == 0) rc = sg_st_writer_meta(w, "names", torchvision ? "torchvision" : "segtrain");
    if (rc == 0) rc = sg_st_writer_meta(w, "weights", ema ? "ema" : "trained");
    char dir[4096];
    if (rc == 0 && sg_mkdirs_parent(out, dir, sizeof dir) != 0) {
        SG_ERROR("export: cannot create the directory %s for --out: %s", dir, strerror(errno));
        rc = SG_ERR_RUNTIME;
    }
    if (rc == 0) rc = sg_st_writer_write(w, out);
    sg_st_writer_destroy(w);
    sg_st_close(f);
    if (rc != 0) {
        SG_ERROR("export: writing %s failed (see above)", out);
        return 1;
    }
    SG_INFO("exported %d %stensors from %s to %s (%s names)", n, ema ? "EMA " : "", ck, out,
            torchvision ? "torchvision" : "segtrain");
    return 0;
}

int sg_cmd_export(int argc, char **argv) {
    if (sg_export_wants_onnx(argc, argv)) return sg_cmd_export_onnx(argc, argv);
    const char *ck = NULL, *out = NULL, *names = "segtrain", *format = "safetensors";
    int ema = 0;
    sg_cli_opt opts[] = {
        {"--checkpoint", "FILE", "checkpoint to export", &ck, NULL},
        {"--out", "FILE", "safetensors file to write", &out, NULL},
        {"--names", "segtrain|torchvision", "tensor names (default segtrain)", &names, NULL},
        {"--ema", NULL, "export the EMA weights (ema.*, train.ema_decay > 0) as the model's", NULL,
         &ema},
        {"--format", "safetensors|onnx",
         "safetensors weights (default) or the ONNX graph: "
         "segtrain export --format onnx --help",
         &format, NULL},
        {NULL, NULL, NULL, NULL, NULL}};
    sg_cli cli;
    sg_status st = sg_cli_parse(&cli, argc, argv,
                                "segtrain export --checkpoint CK --out FILE [--names torchvision] "
                                "[--ema]",
                                opts);
    if (st != SG_OK) return sg_exit_code(st);
    if (cli.help) {
        sg_cli_print_help(stdout, &cli, opts);
        return 0;
    }
    sg_log_set_level(cli.log_level);
    if (!ck) return sg_exit_code(sg_cli_usage_error(&cli, "--checkpoint is required"));
    if (!out) return sg_exit_code(sg_cli_usage_error(&cli, "--out is required"));
    if (strcmp(names, "segtrain") != 0 && strcmp(names, "torchvision") != 0)
        return sg_exit_code(
            sg_cli_usage_error(&cli, "--names must be segtrain or torchvision, not '%s'", names));
    if (strcmp(format, "safetensors") != 0)
        return sg_exit_code(
            sg_cli_usage_error(&cli, "--format must be safetensors or onnx, not '%s'", format));
    if (cli.n_args > 0)
        return sg_exit_code(sg_cli_usage_error(&cli, "unexpected argument '%s'", cli.args[0]));
    return export_checkpoint(ck, out, strcmp(names, "torchvision") == 0, ema);
}
