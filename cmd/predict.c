/* cmd/predict.c - `segtrain predict --checkpoint CK --input IMAGE|DIR --output
 * PNG|DIR [--color] [--overlay] [--label-ids] [--save-logits FILE.npy|DIR]`.
 *
 * Each image goes through the evaluation preprocessing (normalize with
 * data.mean/std, eval-mode forward of the whole image, or of sliding windows
 * when eval.crop_size is set, as `eval` does: train/slide.h) and its argmax is written
 * as an 8-bit PNG: trainIds (default), Cityscapes labelIds (--label-ids, for
 * the benchmark server), the class palette (--color) or the palette blended
 * 50/50 over the image (--overlay). --save-logits writes the logits at input
 * resolution as float32 [C,H,W] .npy (a file for one input, a directory of
 * <name>.npy for a directory). With test-time augmentation (eval.scales
 * other than [1.0], or eval.flip; train/tta.h) the prediction is the argmax
 * of the softmax probabilities averaged over the scales and flips (whole
 * images or sliding windows, like the single pass) and --save-logits writes the natural log of
 * those averaged probabilities instead of logits (-inf where one underflowed
 * to 0). Inputs are PNG or JPEG, told apart by their
 * content (io/image.h). A directory input is walked recursively and every
 * PNG or JPEG file in it is predicted (other files are skipped and counted);
 * outputs keep the relative paths with the extension replaced by .png (and
 * .npy), so two inputs that differ only in extension are refused.
 */
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cmd/commands.h"
#include "core/cli.h"
#include "core/log.h"
#include "core/outdir.h"
#include "data/dataset.h"
#include "dist/comm.h"
#include "io/image.h"
#include "io/png.h"
#include "train/device.h"
#include "train/evaluator.h"
#include "train/from_checkpoint.h"
#include "train/slide.h"
#include "train/tta.h"

typedef struct plist {
    char **rel;
    int n, cap;
    int skipped; /* files that are neither PNG nor JPEG */
} plist;

static int is_dir(const char *p) {
    struct stat sb;
    return stat(p, &sb) == 0 && S_ISDIR(sb.st_mode);
}

static int walk(const char *root, const char *rel, plist *out) {
    char path[4096];
    snprintf(path, sizeof path, "%s%s%s", root, rel[0] ? "/" : "", rel);
    DIR *d = opendir(path);
    if (!d) {
        SG_ERROR("predict: cannot open directory %s: %s", path, strerror(errno));
        return -1;
    }
    struct dirent *e;
    int rc = 0;
    while (rc == 0 && (e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.') continue;
        char r[4096], full[8192];
        snprintf(r, sizeof r, "%s%s%s", rel, rel[0] ? "/" : "", e->d_name);
        snprintf(full, sizeof full, "%s/%s", root, r);
        sg_img_format fmt = SG_IMG_UNKNOWN;
        if (is_dir(full)) {
            rc = walk(root, r, out);
        } else if (sg_image_sniff(full, &fmt, NULL, 0) != SG_OK) {
            rc = -1; /* unreadable: logged */
        } else if (fmt == SG_IMG_UNKNOWN) {
            out->skipped++;
        } else {
            if (out->n == out->cap) {
                out->cap = out->cap ? 2 * out->cap : 64;
                out->rel = realloc(out->rel, (size_t)out->cap * sizeof *out->rel);
                SG_CHECK(out->rel != NULL, "out of host memory");
            }
            out->rel[out->n++] = strdup(r);
        }
    }
    closedir(d);
    return rc;
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* dir/rel with rel's extension (after the last '.' of its last component)
 * replaced by ext, or ext appended when it has none. */
static void out_name(char *dst, size_t cap, const char *dir, const char *rel, const char *ext) {
    const char *base = strrchr(rel, '/');
    base = base ? base + 1 : rel;
    const char *dot = strrchr(base, '.');
    int keep = (int)(dot && dot != base ? (size_t)(dot - rel) : strlen(rel));
    snprintf(dst, cap, "%s/%.*s%s", dir, keep, rel, ext);
}

static int mkparents(const char *path) { return sg_mkdirs_for_output("predict", path); }

/* NumPy .npy v1.0, little-endian float32, C order. */
static int write_npy(const char *path, const float *x, int c, int h, int w) {
    char hdr[128];
    int n = snprintf(hdr, sizeof hdr,
                     "{'descr': '<f4', 'fortran_order': False, 'shape': (%d, %d, %d), }", c, h, w);
    int total = 10 + n + 1;
    int pad = (64 - total % 64) % 64;
    FILE *f = fopen(path, "wb");
    if (!f) {
        SG_ERROR("predict: cannot write %s: %s", path, strerror(errno));
        return -1;
    }
    unsigned short hl = (unsigned short)(n + pad + 1);
    unsigned char magic[10] = {
        0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, (unsigned char)(hl & 0xff), (unsigned char)(hl >> 8)};
    int bad = fwrite(magic, 1, 10, f) != 10 || fwrite(hdr, 1, (size_t)n, f) != (size_t)n;
    for (int i = 0; i < pad && !bad; i++) bad = fputc(' ', f) == EOF;
    bad |= fputc('\n', f) == EOF;
    size_t cnt = (size_t)c * h * w;
    bad |= fwrite(x, sizeof(float), cnt, f) != cnt;
    bad |= fclose(f) != 0;
    if (bad) {
        SG_ERROR("predict: writing %s failed: %s (disk full?)", path, strerror(errno));
        return -1;
    }
    return 0;
}

typedef struct pctx {
    sg_backend *be;
    sg_model *m;
    const sg_config *cfg;
    int C, color, overlay, label_ids;
    uint8_t palette[256 * 3];
    float mean[3], std[3];
    int use_tta; /* sg_tta_enabled: averaged probabilities instead of one pass */
    sg_tta tta;
    int crop_h, crop_w, stride_h, stride_w; /* eval.crop_size / eval.stride; 0 = whole */
} pctx;

static void build_palette(pctx *P) {
    const sg_config *cfg = P->cfg;
    for (int c = 0; c < 256; c++) sg_generated_color(c, P->palette + 3 * c);
    if (cfg->data.n_palette >= 3 * P->C) {
        for (int i = 0; i < 3 * P->C; i++) P->palette[i] = (uint8_t)cfg->data.palette[i];
    } else {
        /* the layout's own colours (Cityscapes, VOC, ADE20K) */
        for (int c = 0; c < P->C; c++)
            sg_layout_color(cfg->data.format, P->C, c, P->palette + 3 * c);
    }
}

/* One image's [C, px] activation (logits, probabilities) from the backend
 * into host NCHW order, whatever the backend's activation layout. */
static void download_nchw(sg_backend *be, float *dst, const float *src, int C, size_t px) {
    size_t count = (size_t)C * px;
    if (be->layout == SG_LAYOUT_NCHW) {
        be->ops->download(be, dst, src, count * sizeof(float));
        return;
    }
    float *t = malloc(count * sizeof(float));
    SG_CHECK(t != NULL, "out of host memory for %zu logits", count);
    be->ops->download(be, t, src, count * sizeof(float));
    sg_act_relayout(dst, t, 1, C, (int)px, sizeof(float), be->layout, SG_LAYOUT_NCHW);
    free(t);
}

/* The host memory whole-image inference may use: the backend's figure,
 * lowered to what the address-space limit (ulimit -v) leaves this process,
 * or 0 for the backend's own figure (a device's memory, or no limit). */
static size_t host_memory_left(sg_backend *be, sg_model *m) {
    struct rlimit rl;
    if (be->device_index >= 0 || getrlimit(RLIMIT_AS, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY)
        return 0;
    unsigned long long vm_pages = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    if (f) {
        if (fscanf(f, "%llu", &vm_pages) != 1) vm_pages = 0;
        fclose(f);
    }
    size_t used = (size_t)vm_pages * (size_t)sysconf(_SC_PAGESIZE);
    size_t left = rl.rlim_cur > used ? (size_t)rl.rlim_cur - used : 1;
    sg_backend_info bi;
    sg_backend_get_info(be, &bi);
    /* a re-plan frees the current arena first, as for eval */
    size_t avail = bi.mem_available ? bi.mem_available + sg_model_activation_bytes(m) : left;
    return left < avail ? left : avail;
}

/* Before decoding: the image's size from its header against the memory
 * whole-image inference (or test-time augmentation) needs, by eval's own
 * check (sg_evaluator_check_fits): an 8192x8192 image is refused at once,
 * naming the image, its size and eval.crop_size, instead of minutes and
 * gigabytes later. Sliding windows without TTA plan the crop: nothing to
 * check. SG_OK, or SG_ERR_CONFIG (too large: the user's image and
 * configuration) or SG_ERR_RUNTIME (unreadable header) after logging. */
static sg_status check_memory(pctx *P, const char *in) {
    int h, w;
    char err[SG_DATA_ERR_LEN];
    if (sg_image_read_size(in, &h, &w, err, sizeof err) != SG_OK) {
        SG_ERROR("predict: %s", err);
        return SG_ERR_RUNTIME;
    }
    if (!P->use_tta && P->crop_h > 0) {
        /* sliding windows plan the crop, but average the whole image's
         * logits on the host: on the CPU that is the memory that counts */
        if (P->be->device_index >= 0) return SG_OK;
        size_t px = (size_t)h * (size_t)w, need = px * ((size_t)P->C * 4 + 8);
        size_t avail = host_memory_left(P->be, P->m);
        if (!avail) {
            sg_backend_info bi;
            sg_backend_get_info(P->be, &bi);
            avail = bi.mem_available;
        }
        if (avail && need > avail) {
            SG_ERROR("predict: %s: a %dx%d image in sliding windows needs about %.1f GiB of host "
                     "memory (its %d classes' logits, averaged over the windows) but %.1f GiB "
                     "are available: predict a smaller (downscaled or cropped) image",
                     in, h, w, (double)need / 1073741824.0, P->C, (double)avail / 1073741824.0);
            return SG_ERR_CONFIG;
        }
        return SG_OK;
    }
    sg_evaluator ev;
    memset(&ev, 0, sizeof ev);
    ev.be = P->be;
    ev.crop_h = P->crop_h;
    ev.crop_w = P->crop_w;
    ev.use_tta = P->use_tta;
    if (P->use_tta) ev.tta = P->tta; /* read only */
    snprintf(ev.label, sizeof ev.label, "predict");
    return sg_evaluator_check_fits(&ev, P->m, 1, h, w, host_memory_left(P->be, P->m), in);
}

/* predict_one's result as an exit status: -2 (an image too large for
 * whole-image inference: the user's input and configuration) is 2, any
 * other failure 1. */
static int exit_of(int r) { return r == -2 ? 2 : r ? 1 : 0; }

/* 0, -1 after logging a failure, or -2 after logging an image too large for
 * the memory. */
static int predict_one(pctx *P, const char *in, const char *out, const char *npy) {
    sg_backend *be = P->be;
    sg_img img = {0};
    sg_status fits = check_memory(P, in);
    if (fits != SG_OK) return fits == SG_ERR_CONFIG ? -2 : -1;
    if (sg_image_read_rgb(in, P->cfg->data.max_image_pixels, &img, NULL, 0) != 0) return -1;
    int h = img.h, w = img.w, C = P->C;
    size_t px = (size_t)h * w;
    int slide = !P->use_tta && P->crop_h > 0;
    float *host_logits = NULL; /* sliding windows: the averaged logits, on the host */
    if (!P->use_tta && !slide && sg_model_plan_infer(P->m, 1, h, w) != 0) {
        sg_img_free(&img);
        return -1;
    }
    uint8_t *d_img = be->ops->alloc(be, px * 3), *d_pred = be->ops->alloc(be, px);
    be->ops->upload(be, d_img, img.data, px * 3);
    const float *scores; /* logits, or the averaged probabilities with TTA */
    if (P->use_tta) {
        if (sg_tta_run(&P->tta, P->m, d_img, 1, h, w) != SG_OK) {
            SG_ERROR("predict: %s: test-time augmentation failed (see above)", in);
            be->ops->free(be, d_img);
            be->ops->free(be, d_pred);
            sg_img_free(&img);
            return -1;
        }
        scores = P->tta.d_prob;
    } else if (slide) {
        host_logits = malloc((size_t)C * px * sizeof(float));
        SG_CHECK(host_logits != NULL, "out of host memory for the logits of %s", in);
        if (sg_slide_logits(be, P->m, d_img, h, w, C, P->crop_h, P->crop_w, P->stride_h,
                            P->stride_w, P->mean, P->std, host_logits) != SG_OK) {
            SG_ERROR("predict: %s: sliding-window inference failed (see above)", in);
            free(host_logits);
            be->ops->free(be, d_img);
            be->ops->free(be, d_pred);
            sg_img_free(&img);
            return -1;
        }
        scores = NULL;
    } else {
        be->ops->normalize_u8(be, d_img, sg_model_input(P->m), 1, h, w, P->mean, P->std);
        sg_model_forward(P->m, 0, 0);
        scores = sg_model_out(P->m);
    }
    uint8_t *pred = malloc(px), *rgb = malloc(px * 3);
    SG_CHECK(pred && rgb, "out of host memory");
    if (slide) {
        sg_slide_argmax(host_logits, C, px, pred); /* the evaluator's argmax */
    } else {
        be->ops->argmax(be, scores, d_pred, 1, C, h * w);
        be->ops->download(be, pred, d_pred, px);
    }
    int rc = 0;
    if (npy) {
        float *lg = host_logits ? host_logits : malloc((size_t)C * px * sizeof(float));
        SG_CHECK(lg != NULL, "out of host memory");
        if (!host_logits) download_nchw(be, lg, scores, C, px);
        if (P->use_tta)
            for (size_t i = 0; i < (size_t)C * px; i++) lg[i] = logf(lg[i]);
        rc = mkparents(npy) == 0 ? write_npy(npy, lg, C, h, w) : -1;
        if (lg != host_logits) free(lg);
    }
    free(host_logits);
    if (rc == 0) rc = mkparents(out);
    char err[SG_DATA_ERR_LEN];
    if (rc == 0) {
        if (P->overlay) {
            for (size_t i = 0; i < px; i++)
                for (int k = 0; k < 3; k++)
                    rgb[3 * i + k] =
                        (uint8_t)((img.data[3 * i + k] + P->palette[3 * pred[i] + k] + 1) / 2);
            rc = sg_png_write_rgb(out, rgb, h, w, err, sizeof err);
        } else if (P->color) {
            rc = sg_png_write_palette(out, pred, h, w, P->palette, C, err, sizeof err);
        } else {
            if (P->label_ids)
                for (size_t i = 0; i < px; i++) pred[i] = (uint8_t)sg_cityscapes_label_id(pred[i]);
            rc = sg_png_write_gray(out, pred, h, w, err, sizeof err);
        }
        if (rc != 0) SG_ERROR("predict: %s", err);
    }
    be->ops->free(be, d_img);
    be->ops->free(be, d_pred);
    free(pred);
    free(rgb);
    sg_img_free(&img);
    return rc;
}

int sg_cmd_predict(int argc, char **argv) {
    const char *ck = NULL, *input = NULL, *output = NULL, *logits = NULL;
    int color = 0, overlay = 0, label_ids = 0;
    sg_cli_opt opts[] = {
        {"--checkpoint", "FILE", "checkpoint (or exported weights) to predict with", &ck, NULL},
        {"--input", "IMAGE|DIR",
         "a PNG or JPEG image, or a directory searched recursively for them", &input, NULL},
        {"--output", "PNG|DIR", "output image, or directory (same relative paths)", &output, NULL},
        {"--color", NULL, "palette-coloured PNGs instead of class indices", NULL, &color},
        {"--overlay", NULL, "prediction colours blended over the image (RGB PNG)", NULL, &overlay},
        {"--label-ids", NULL, "Cityscapes labelIds instead of trainIds (benchmark format)", NULL,
         &label_ids},
        {"--save-logits", "FILE.npy|DIR",
         "also write logits as float32 [C,H,W] .npy; with test-time augmentation (eval.scales, "
         "eval.flip) the log of the averaged softmax probabilities instead",
         &logits, NULL},
        {NULL, NULL, NULL, NULL, NULL}};
    sg_cli cli;
    sg_status st = sg_cli_begin_args(&cli, argc, argv,
                                     "segtrain predict --checkpoint CK --input IMAGE|DIR --output "
                                     "PNG|DIR [--color] [--overlay] [--label-ids] [--save-logits "
                                     "FILE.npy]",
                                     opts);
    if (st != SG_OK || cli.done) return sg_exit_code(st);
    if (!ck || !input || !output)
        return sg_exit_code(
            sg_cli_usage_error(&cli, "--checkpoint, --input and --output are required"));
    if (color + overlay + label_ids > 1)
        return sg_exit_code(
            sg_cli_usage_error(&cli, "choose one of --color, --overlay, --label-ids"));
    sg_config cfg;
    st = sg_cli_load_checkpoint_config(&cli, ck, &cfg);
    if (st != SG_OK || cli.done) return sg_exit_code(st);
    if (label_ids && cfg.model.num_classes != 19) {
        SG_ERROR("--label-ids maps the 19 Cityscapes trainIds; this model has %d classes",
                 cfg.model.num_classes);
        return 2;
    }
    /* a malformed launch environment is the user's setup: exit 2 */
    sg_dist_env env;
    if (sg_dist_env_read(&env) != 0) return 2;
    plist files = {0};
    int dir = is_dir(input);
    if (dir) {
        if (walk(input, "", &files) != 0) return 1;
        if (files.n == 0) {
            SG_ERROR("predict: no PNG or JPEG image under %s (%d other file%s skipped)", input,
                     files.skipped, files.skipped == 1 ? "" : "s");
            return 2; /* the --input the user named */
        }
        qsort(files.rel, (size_t)files.n, sizeof *files.rel, cmp_str);
        if (files.skipped)
            SG_INFO("predict: %d image(s) under %s; %d file(s) that are neither PNG nor JPEG "
                    "skipped",
                    files.n, input, files.skipped);
        /* a.jpg and a.png would both write a.png: compare the output stems,
         * sorted (each "stem\tinput") */
        char **stems = malloc((size_t)files.n * sizeof *stems);
        SG_CHECK(stems != NULL, "out of host memory");
        for (int i = 0; i < files.n; i++) {
            char a[8192];
            out_name(a, sizeof a, "", files.rel[i], "\t");
            size_t n = strlen(a) + strlen(files.rel[i]) + 1;
            stems[i] = malloc(n);
            SG_CHECK(stems[i] != NULL, "out of host memory");
            snprintf(stems[i], n, "%s%s", a, files.rel[i]);
        }
        qsort(stems, (size_t)files.n, sizeof *stems, cmp_str);
        int clash = 0;
        for (int i = 1; i < files.n && !clash; i++) {
            size_t k = strcspn(stems[i], "\t");
            if (strcspn(stems[i - 1], "\t") == k && !strncmp(stems[i - 1], stems[i], k)) {
                SG_ERROR("predict: %s/%s and %s/%s would both be written as %s%.*s.png: rename "
                         "one of them",
                         input, stems[i - 1] + k + 1, input, stems[i] + k + 1, output, (int)k,
                         stems[i]);
                clash = 1;
            }
        }
        for (int i = 0; i < files.n; i++) free(stems[i]);
        free(stems);
        if (clash) {
            for (int k = 0; k < files.n; k++) free(files.rel[k]);
            free(files.rel);
            return 2; /* the user's --input: rename a file */
        }
    }
    sg_backend *be = sg_open_backend(&cfg, &env);
    if (!be) {
        for (int i = 0; i < files.n; i++) free(files.rel[i]);
        free(files.rel);
        return 1;
    }
    pctx P = {.be = be,
              .cfg = &cfg,
              .C = cfg.model.num_classes,
              .color = color,
              .overlay = overlay,
              .label_ids = label_ids};
    for (int i = 0; i < 3; i++) {
        P.mean[i] = (float)cfg.data.mean[i];
        P.std[i] = (float)cfg.data.std[i];
    }
    build_palette(&P);
    /* whole images, or eval.crop_size's sliding windows as `eval` runs them */
    P.crop_h = cfg.eval.crop_size[0];
    P.crop_w = cfg.eval.crop_size[1];
    P.stride_h = cfg.eval.stride[0] ? cfg.eval.stride[0] : P.crop_h;
    P.stride_w = cfg.eval.stride[1] ? cfg.eval.stride[1] : P.crop_w;
    if (P.crop_h > 0)
        SG_INFO("predict: sliding windows of %dx%d, strides %dx%d (eval.crop_size, eval.stride)",
                P.crop_h, P.crop_w, P.stride_h, P.stride_w);
    P.use_tta = sg_tta_enabled(&cfg);
    if (P.use_tta) {
        sg_tta_init(&P.tta, be, &cfg, P.crop_h, P.crop_w, P.stride_h, P.stride_w);
        SG_INFO("predict: test-time augmentation over %d scale(s)%s: averaged softmax "
                "probabilities",
                cfg.eval.n_scales, cfg.eval.flip ? " x flip" : "");
    }
    sg_status mst;
    P.m = sg_model_from_checkpoint(be, &cfg, ck, &mst);
    int rc = sg_exit_code(mst); /* a corrupt --checkpoint is the user's input: 2 */
    if (P.m) {
        rc = 0;
        if (!dir) {
            rc = exit_of(predict_one(&P, input, output, logits));
        } else {
            for (int i = 0; i < files.n && rc == 0; i++) {
                char in[8192], out[8192], npy[8192];
                snprintf(in, sizeof in, "%s/%s", input, files.rel[i]);
                out_name(out, sizeof out, output, files.rel[i], ".png");
                if (logits) out_name(npy, sizeof npy, logits, files.rel[i], ".npy");
                rc = exit_of(predict_one(&P, in, out, logits ? npy : NULL));
            }
        }
        if (rc == 0) SG_INFO("predicted %d image(s) into %s", dir ? files.n : 1, output);
        sg_model_destroy(P.m);
    }
    sg_tta_free(&P.tta);
    for (int i = 0; i < files.n; i++) free(files.rel[i]);
    free(files.rel);
    sg_backend_destroy(be);
    return rc;
}
