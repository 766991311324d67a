/* cmd/convert.c - `segtrain convert IN.pth OUT.safetensors`: a PyTorch
 * checkpoint (torch.save: zip or legacy format; a state_dict, or a training
 * checkpoint holding one under "model" / "state_dict") to safetensors,
 * natively (io/pth.h: no Python, no code from the file is ever run).
 * Tensor names stay as in the file (torchvision's or mmseg's), so
 * model.pretrained takes the output directly: e.g. torchvision's ImageNet
 * resnet50 file gives the encoder's weights; an mmseg checkpoint (mmcv's
 * {meta, state_dict, optimizer}) gives its state_dict (backbone.,
 * decode_head., auxiliary_head.; model.names: mmseg). Floating tensors become F32, integer ones I64.
 * Exit 0, 1 (the file cannot be read or is refused, or writing failed), 2
 * (usage). */
#include <stdio.h>
#include <string.h>

#include "cmd/commands.h"
#include "core/cli.h"
#include "core/log.h"
#include "core/outdir.h"
#include "io/pth.h"
#include "model/model_io.h"

/* What model.pretrained will make of the names: how many land in the
 * encoder, the heads, and which do not belong to DeepLabV3 at all. */
static void report_names(const sg_pth *p) {
    int enc = 0, dec = 0, aux = 0, other = 0;
    char example[128] = "";
    for (int i = 0; i < sg_pth_count(p); i++) {
        char name[512];
        const char *n = sg_pth_get(p, i)->name;
        if (sg_model_canonical_name(n, name, sizeof name) != SG_OK) name[0] = 0;
        if (!strncmp(name, "encoder.", 8)) enc++;
        else if (!strncmp(name, "decoder.", 8)) dec++;
        else if (!strncmp(name, "aux_head.", 9)) aux++;
        else if (other++ == 0) snprintf(example, sizeof example, "%s", n);
    }
    SG_INFO("convert: as model.pretrained maps the names: %d backbone, %d decode head "
            "(classifier. / decode_head.), %d auxiliary head (aux_classifier. / auxiliary_head.) "
            "tensors, %d other",
            enc, dec, aux, other);
    if (other)
        SG_INFO("convert: %d tensor(s) are not part of the segmentation model and loading "
                "ignores them, e.g. "
                "%s%s",
                other, example,
                strncmp(example, "fc.", 3) ? "" : " (an ImageNet classifier's head: expected)");
}

int sg_cmd_convert(int argc, char **argv) {
    sg_cli_opt opts[] = {{NULL, NULL, NULL, NULL, NULL}};
    sg_cli cli;
    sg_status st =
        sg_cli_begin_args(&cli, argc, argv, "segtrain convert IN.pth OUT.safetensors", opts);
    if (st != SG_OK) return sg_exit_code(st);
    if (cli.done) { /* --help: the usage and options are out; what convert accepts follows */
        printf("\nReads a PyTorch checkpoint (torch.save, zip or legacy format) without Python\n"
               "and writes its state_dict as safetensors under the same names, for\n"
               "model.pretrained. Accepts a state_dict or a dict holding one under 'model'\n"
               "or 'state_dict' (mmseg/mmcv checkpoints: meta and optimizer are skipped);\n"
               "torchvision and mmseg names both load (model.names). Refuses anything\n"
               "that is not plain tensors (pickled objects or code), naming what it\n"
               "found. Floating tensors are written as F32, integer and bool ones as I64.\n");
        return 0;
    }
    if (cli.n_args != 2)
        return sg_exit_code(
            sg_cli_usage_error(&cli, "expected IN.pth and OUT.safetensors (got %d argument%s)",
                               cli.n_args, cli.n_args == 1 ? "" : "s"));
    const char *in = cli.args[0], *out = cli.args[1];
    char err[1024];
    sg_pth *p = sg_pth_open(in, err, sizeof err);
    if (!p) {
        SG_ERROR("convert: %s", err);
        return 2; /* the file the user named: unreadable, corrupt or refused */
    }
    const char *wrap = sg_pth_wrapper_key(p);
    SG_INFO("convert: %s: %s format, %d tensors%s%s%s%s", in, sg_pth_format(p), sg_pth_count(p),
            wrap[0] ? " under '" : "", wrap, wrap[0] ? "'" : "",
            sg_pth_skipped(p) ? " (non-tensor entries skipped)" : "");
    report_names(p);
    const char *base = strrchr(in, '/');
    if (sg_mkdirs_for_output("convert", out) != 0) {
        sg_pth_close(p);
        return 1;
    }
    st = sg_pth_write_safetensors(p, out, base ? base + 1 : in);
    sg_pth_close(p);
    if (st != SG_OK) return sg_exit_code(st);
    SG_INFO("convert: wrote %s; use it as model.pretrained", out);
    return 0;
}
