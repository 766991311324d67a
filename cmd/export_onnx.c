/* cmd/export_onnx.c - `segtrain export --checkpoint CK --format onnx --out
 * model.onnx [--ema] [--opset 17] [--size HxW | --dynamic-hw] [--batch
 * N|dynamic] [--with-argmax] [--include-normalize] [--no-fold-bn] [--names
 * torchvision] [--external-data]`.
 *
 * Builds the model the checkpoint's configuration describes on the CPU
 * backend, loads the checkpoint's weights (the trained ones; --ema: its EMA),
 * and writes the inference graph (model/model_onnx.h) with metadata_props:
 * class names, palette, mean/std, crop and evaluation settings, input and
 * output layout, segtrain version, run id, iteration. The ONNX protobuf is
 * written by the project (io/onnx.h).
 */
#include "cmd/export_onnx.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmd/commands.h"
#include "core/cli.h"
#include "core/log.h"
#include "core/outdir.h"
#include "core/util.h"
#include "data/dataset.h"
#include "io/onnx.h"
#include "io/safetensors.h"
#include "model/model_onnx.h"
#include "train/checkpoint.h"
#include "train/device.h"
#include "train/from_checkpoint.h"

int sg_export_wants_onnx(int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--format=onnx") == 0) return 1;
        if (strcmp(argv[i], "--format") == 0 && i + 1 < argc && strcmp(argv[i + 1], "onnx") == 0)
            return 1;
    }
    return 0;
}

/* A growing text buffer for the metadata values (JSON). */
typedef struct txt {
    char *s;
    size_t len, cap;
} txt;

static void put(txt *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(txt *t, const char *fmt, ...) {
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(t->s ? t->s + t->len : NULL, t->s ? t->cap - t->len : 0, fmt, ap);
        va_end(ap);
        SG_CHECK(n >= 0, "metadata formatting failed");
        if (t->s && t->len + (size_t)n < t->cap) {
            t->len += (size_t)n;
            return;
        }
        t->cap = (t->len + (size_t)n + 1) * 2;
        t->s = realloc(t->s, t->cap);
        SG_CHECK(t->s != NULL, "out of host memory");
    }
}

static void put_json_string(txt *t, const char *s) {
    put(t, "\"");
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\') put(t, "\\%c", *p);
        else if (*p < 0x20) put(t, "\\u%04x", *p);
        else put(t, "%c", *p);
    }
    put(t, "\"");
}

static sg_status meta(sg_onnx *g, const char *k, txt *t) {
    sg_status st = sg_onnx_meta(g, k, t->s ? t->s : "");
    t->len = 0;
    if (t->s) t->s[0] = 0;
    return st;
}

typedef struct req {
    const char *ck, *out;
    int ema, external;
    int use_crop; /* fixed size = the checkpoint's data.crop_size */
    sg_onnx_export_opts o;
} req;

static sg_status add_metadata(sg_onnx *g, const sg_config *cfg, const req *r) {
    const int C = cfg->model.num_classes;
    txt t = {0};
    sg_status st = SG_OK;
    /* class names: data.class_names, else the format's own, else none */
    int have_names = cfg->data.n_class_names == C;
    for (int c = 0; c < C && !have_names; c++)
        if (!sg_layout_class_name(cfg->data.format, C, c)) break;
        else if (c == C - 1) have_names = 1;
    if (have_names) {
        put(&t, "[");
        for (int c = 0; c < C; c++) {
            if (c) put(&t, ",");
            put_json_string(&t, cfg->data.n_class_names == C
                                    ? cfg->data.class_names[c]
                                    : sg_layout_class_name(cfg->data.format, C, c));
        }
        put(&t, "]");
        st = meta(g, "class_names", &t);
    }
    /* palette as predict --color draws it */
    put(&t, "[");
    for (int c = 0; c < C; c++) {
        uint8_t rgb[3];
        if (cfg->data.n_palette >= 3 * C) {
            for (int i = 0; i < 3; i++) rgb[i] = (uint8_t)cfg->data.palette[3 * c + i];
        } else if (!sg_layout_color(cfg->data.format, C, c, rgb)) {
            sg_generated_color(c, rgb);
        }
        put(&t, "%s[%d,%d,%d]", c ? "," : "", rgb[0], rgb[1], rgb[2]);
    }
    put(&t, "]");
    if (st == SG_OK) st = meta(g, "palette", &t);
    put(&t, "[%.9g,%.9g,%.9g]", cfg->data.mean[0], cfg->data.mean[1], cfg->data.mean[2]);
    if (st == SG_OK) st = meta(g, "mean", &t);
    put(&t, "[%.9g,%.9g,%.9g]", cfg->data.std[0], cfg->data.std[1], cfg->data.std[2]);
    if (st == SG_OK) st = meta(g, "std", &t);
    put(&t, "%d", C);
    if (st == SG_OK) st = meta(g, "num_classes", &t);
    put(&t, "%s",
        r->o.normalize_u8 ? "uint8 NHWC RGB 0..255 (normalised in the graph)"
                          : "float32 NCHW RGB, (x/255 - mean)/std");
    if (st == SG_OK) st = meta(g, "input", &t);
    put(&t, "%s",
        r->o.argmax ? "labels: int64 [N,H,W] class index (argmax)"
                    : "logits: float32 [N,C,H,W] at input resolution");
    if (st == SG_OK) st = meta(g, "output", &t);
    put(&t,
        "{\"data.crop_size\":[%d,%d],\"eval.crop_size\":[%d,%d],\"eval.stride\":[%d,%d],"
        "\"eval.flip\":%s,\"eval.scales\":[",
        cfg->data.crop_size[0], cfg->data.crop_size[1], cfg->eval.crop_size[0],
        cfg->eval.crop_size[1], cfg->eval.stride[0], cfg->eval.stride[1],
        cfg->eval.flip ? "true" : "false");
    for (int i = 0; i < cfg->eval.n_scales; i++)
        put(&t, "%s%.9g", i ? "," : "", cfg->eval.scales[i]);
    put(&t, "]}");
    if (st == SG_OK) st = meta(g, "eval_settings", &t);
    put(&t, "%s_%s", cfg->model.arch, cfg->model.backbone);
    if (st == SG_OK) st = meta(g, "arch", &t);
    put(&t, "%d", cfg->model.output_stride);
    if (st == SG_OK) st = meta(g, "output_stride", &t);
    put(&t, "%s", r->o.fold_bn ? "true" : "false");
    if (st == SG_OK) st = meta(g, "bn_folded", &t);
    put(&t, "%s", r->ema ? "ema" : "trained");
    if (st == SG_OK) st = meta(g, "weights", &t);
    put(&t, "%s", SG_VERSION);
    if (st == SG_OK) st = meta(g, "segtrain_version", &t);
    /* run id and iteration when the file is a segtrain checkpoint */
    char why[512];
    sg_st_file *f = sg_st_open_why(r->ck, why, sizeof why);
    if (f) {
        char run_id[SG_RUN_ID_LEN + 1];
        if (sg_ckpt_run_id(f, run_id, why, sizeof why) == SG_OK && run_id[0]) {
            put(&t, "%s", run_id);
            if (st == SG_OK) st = meta(g, "run_id", &t);
        }
        if (sg_st_meta(f, "iter")) {
            put(&t, "%s", sg_st_meta(f, "iter"));
            if (st == SG_OK) st = meta(g, "iter", &t);
        }
        sg_st_close(f);
    }
    free(t.s);
    return st;
}

static int run_export(const sg_cli *cli, req *r) {
    sg_config cfg;
    sg_status st = sg_config_for_checkpoint(cli, r->ck, &cfg);
    if (st != SG_OK) return sg_exit_code(st);
    char why[512];
    if (r->ema) {
        sg_st_file *f = sg_ckpt_open_valid(r->ck, why, sizeof why);
        if (!f) {
            SG_ERROR("export --ema: %s: %s", r->ck, why);
            return 2; /* the checkpoint the user named */
        }
        int has = sg_ckpt_has_ema(f);
        sg_st_close(f);
        if (!has) {
            SG_ERROR("export --ema: %s holds no EMA weights (ema.*): it was trained with "
                     "train.ema_decay 0; export without --ema",
                     r->ck);
            return 2;
        }
    }
    if (r->use_crop) {
        r->o.height = cfg.data.crop_size[0];
        r->o.width = cfg.data.crop_size[1];
    }
    cfg.eval.use_ema = r->ema;                      /* the trained weights unless --ema */
    snprintf(cfg.device, sizeof cfg.device, "cpu"); /* export needs no GPU */
    for (int i = 0; i < 3; i++) {
        r->o.mean[i] = (float)cfg.data.mean[i];
        r->o.std[i] = (float)cfg.data.std[i];
    }
    if (sg_mkdirs_for_output("export", r->out) != 0) return 1;
    sg_backend *be = sg_open_backend(&cfg, NULL);
    if (!be) return 1;
    sg_status mst;
    sg_model *m = sg_model_from_checkpoint(be, &cfg, r->ck, &mst);
    int rc = sg_exit_code(mst); /* a corrupt checkpoint is the user's input: 2 */
    if (m) {
        sg_onnx *g = sg_onnx_create(r->o.opset, "segtrain", SG_VERSION, "deeplabv3");
        st = g ? sg_model_to_onnx(m, &r->o, g) : SG_ERR_CONFIG;
        if (st == SG_OK) st = add_metadata(g, &cfg, r);
        int ext = 0;
        if (st == SG_OK) st = sg_onnx_write(g, r->out, r->external, &ext);
        if (st == SG_OK) {
            SG_INFO("exported %s (%s_%s, %d classes, opset %d, BN %s, input %s%s, %s) to "
                    "%s%s%s",
                    r->ck, cfg.model.arch, cfg.model.backbone, cfg.model.num_classes, r->o.opset,
                    r->o.fold_bn ? "folded" : "kept",
                    r->o.normalize_u8 ? "uint8 NHWC" : "float NCHW",
                    r->o.height ? "" : " dynamic H/W", r->o.argmax ? "labels" : "logits", r->out,
                    ext ? " with external data in " : "", ext ? r->out : "");
            if (ext) SG_INFO("external data: %s.data (keep it beside %s)", r->out, r->out);
            rc = 0;
        } else {
            SG_ERROR("export: %s not written (see above)", r->out);
            rc = sg_exit_code(st);
        }
        sg_onnx_destroy(g);
        sg_model_destroy(m);
    }
    sg_backend_destroy(be);
    return rc;
}

static int parse_int(const char *s, int lo, int hi, int *out) {
    char *end;
    long v = strtol(s, &end, 10);
    if (end == s || *end || v < lo || v > hi) return -1;
    *out = (int)v;
    return 0;
}

int sg_cmd_export_onnx(int argc, char **argv) {
    const char *ck = NULL, *out = NULL, *fmt = NULL, *opset = "17", *size = NULL, *batch = "1",
               *names = "segtrain";
    int ema = 0, dyn = 0, argmax = 0, norm = 0, no_fold = 0, fp16 = 0, external = 0;
    sg_cli_opt opts[] = {
        {"--checkpoint", "FILE", "checkpoint (or exported safetensors) to export", &ck, NULL},
        {"--format", "onnx", "onnx: the inference graph (else: safetensors weights)", &fmt, NULL},
        {"--out", "FILE", "the .onnx file to write", &out, NULL},
        {"--ema", NULL, "export the EMA weights (ema.*, train.ema_decay > 0)", NULL, &ema},
        {"--opset", "N", "ONNX opset, 11..21 (default 17)", &opset, NULL},
        {"--size", "HxW", "fixed input size (default: data.crop_size)", &size, NULL},
        {"--dynamic-hw", NULL, "symbolic input height and width", NULL, &dyn},
        {"--batch", "N|dynamic", "batch size (default 1)", &batch, NULL},
        {"--with-argmax", NULL, "output the label map (int64 [N,H,W]) instead of the logits", NULL,
         &argmax},
        {"--include-normalize", NULL, "input uint8 NHWC RGB pixels, normalised in the graph", NULL,
         &norm},
        {"--no-fold-bn", NULL, "keep BatchNormalization nodes (default: folded into the convs)",
         NULL, &no_fold},
        {"--names", "segtrain|torchvision", "initializer names (default segtrain)", &names, NULL},
        {"--external-data", NULL, "weights in FILE.data (automatic above 2 GB)", NULL, &external},
        {"--fp16", NULL, "refused: no float16 graphs (let the runtime reduce precision)", NULL,
         &fp16},
        {NULL, NULL, NULL, NULL, NULL}};
    sg_cli cli;
    const char *usage = "segtrain export --checkpoint CK --format onnx --out FILE.onnx [--ema] "
                        "[--opset N] [--size HxW | --dynamic-hw] [--batch N|dynamic] "
                        "[--with-argmax] [--include-normalize] [--no-fold-bn] [--names "
                        "torchvision] [--external-data]";
    sg_status st = sg_cli_begin_args(&cli, argc, argv, usage, opts);
    if (st != SG_OK || cli.done) return sg_exit_code(st);
    if (!ck) return sg_exit_code(sg_cli_usage_error(&cli, "--checkpoint is required"));
    if (!out) return sg_exit_code(sg_cli_usage_error(&cli, "--out is required"));
    if (!fmt || strcmp(fmt, "onnx") != 0)
        return sg_exit_code(sg_cli_usage_error(&cli, "--format must be onnx here"));
    if (cli.n_args > 0)
        return sg_exit_code(sg_cli_usage_error(&cli, "unexpected argument '%s'", cli.args[0]));
    if (fp16)
        return sg_exit_code(sg_cli_usage_error(
            &cli, "--fp16: float16 ONNX graphs are not exported (segtrain trains and checks "
                  "float32 only); export float32 and let the runtime reduce precision, e.g. "
                  "trtexec --onnx=FILE --fp16"));
    req r = {.ck = ck, .out = out, .ema = ema, .external = external};
    r.o.fold_bn = !no_fold;
    r.o.argmax = argmax;
    r.o.normalize_u8 = norm;
    if (parse_int(opset, 1, 1000, &r.o.opset) != 0)
        return sg_exit_code(sg_cli_usage_error(&cli, "--opset '%s': expected a number", opset));
    if (strcmp(names, "segtrain") != 0 && strcmp(names, "torchvision") != 0)
        return sg_exit_code(
            sg_cli_usage_error(&cli, "--names must be segtrain or torchvision, not '%s'", names));
    r.o.torchvision_names = strcmp(names, "torchvision") == 0;
    if (strcmp(batch, "dynamic") == 0) r.o.batch = 0;
    else if (parse_int(batch, 1, 65536, &r.o.batch) != 0)
        return sg_exit_code(
            sg_cli_usage_error(&cli, "--batch '%s': expected 1..65536 or dynamic", batch));
    if (dyn && size)
        return sg_exit_code(sg_cli_usage_error(&cli, "give --size or --dynamic-hw, not both"));
    if (size) {
        char hs[16], ws[16];
        const char *x = strchr(size, 'x');
        if (!x || x == size || (size_t)(x - size) >= sizeof hs || strlen(x + 1) >= sizeof ws)
            return sg_exit_code(
                sg_cli_usage_error(&cli, "--size '%s': expected HxW, e.g. 512x1024", size));
        snprintf(hs, sizeof hs, "%.*s", (int)(x - size), size);
        snprintf(ws, sizeof ws, "%s", x + 1);
        if (parse_int(hs, 1, 65536, &r.o.height) != 0 || parse_int(ws, 1, 65536, &r.o.width) != 0)
            return sg_exit_code(
                sg_cli_usage_error(&cli, "--size '%s': height and width must be 1..65536", size));
    }
    if (r.o.opset < SG_ONNX_MIN_OPSET || r.o.opset > SG_ONNX_MAX_OPSET)
        return sg_exit_code(sg_cli_usage_error(
            &cli, "--opset %d: %s; use %d..%d", r.o.opset,
            r.o.opset < SG_ONNX_MIN_OPSET
                ? "before opset 11 ONNX Resize has no coordinate_transformation_mode, so "
                  "bilinear resize with align_corners=False (torchvision's) cannot be expressed"
                : "not supported by this exporter",
            SG_ONNX_MIN_OPSET, SG_ONNX_MAX_OPSET));
    r.use_crop = !size && !dyn;
    return run_export(&cli, &r);
}
