/* cmd/synth.c - `segtrain synth`: writes a synthetic dataset in the
 * Cityscapes, Pascal VOC or ADE20K layout (data/synth.h). The layout names
 * in the usage line and the messages come from the format table
 * (data/formats.h). */
#include "data/synth.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cmd/commands.h"
#include "core/log.h"
#include "core/util.h"
#include "data/formats.h"

static void usage(FILE *f) {
    char layouts[256];
    fprintf(f,
            "usage: segtrain synth --out DIR [--layout %s] [--train N]\n"
            "                      [--val M] [--size HxW] [--seed S] [--classes K]\n"
            "Writes a synthetic dataset with learnable structure: shapes whose class sets\n"
            "colour and texture, occlusion, noise and ignore regions. Deterministic by seed.\n"
            "  --out DIR      dataset root to create (must not hold the layout's folders)\n"
            "  --layout L     cityscapes (default: leftImg8bit PNGs, gtFine labelIds,\n"
            "                 instanceIds, color, polygons.json), voc (JPEGImages, palette\n"
            "                 SegmentationClass + SegmentationClassAug, ImageSets/Segmentation\n"
            "                 train/aug/val.txt) or ade20k (images/ JPEGs, annotations/ PNGs,\n"
            "                 training/validation)\n"
            "  --train N      training images (default 100)\n"
            "  --val M        validation images (default 20)\n"
            "  --size HxW     image size (default 100x140)\n"
            "  --seed S       seed (default 0)\n"
            "  --classes K    trainIds 0..K-1 used, 3..19 (default 19)\n"
            "Train on it with data.root: DIR and data.format: cityscapes (model.num_classes\n"
            "19 even with fewer --classes: the label map yields Cityscapes trainIds), voc\n"
            "(splits train+aug and val, data.label_map: none, num_classes 21) or ade20k\n"
            "(splits training and validation, data.label_map: none; labels are trainIds\n"
            "after reduce_zero_label, so num_classes 19 or 150).\n",
            sg_format_names(layouts, sizeof layouts, 1, "|", "|"));
}

static int parse_int(const char *opt, const char *s, long lo, long hi, long *out) {
    if (sg_parse_long(s, lo, hi, out) == 0) return 0;
    SG_ERROR("synth: %s '%s': expected an integer in %ld..%ld", opt, s, lo, hi);
    return -1;
}

int sg_cmd_synth(int argc, char **argv) {
    sg_synth_opts o;
    sg_synth_defaults(&o);
    long v;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        }
        if (i + 1 >= argc) {
            SG_ERROR("synth: %s needs a value (or unknown argument)", a);
            usage(stderr);
            return 2;
        }
        const char *val = argv[++i];
        if (!strcmp(a, "--out")) {
            o.out = val;
        } else if (!strcmp(a, "--layout")) {
            int l = sg_synth_layout_parse(val);
            if (l < 0) {
                char layouts[256];
                SG_ERROR("synth: --layout '%s': expected %s", val,
                         sg_format_names(layouts, sizeof layouts, 1, ", ", " or "));
                return 2;
            }
            o.layout = (sg_synth_layout)l;
        } else if (!strcmp(a, "--train")) {
            if (parse_int(a, val, 0, 10000000, &v)) return 2;
            o.n_train = (int)v;
        } else if (!strcmp(a, "--val")) {
            if (parse_int(a, val, 0, 10000000, &v)) return 2;
            o.n_val = (int)v;
        } else if (!strcmp(a, "--seed")) {
            if (parse_int(a, val, 0, 0x7fffffffL, &v)) return 2;
            o.seed = (uint64_t)v;
        } else if (!strcmp(a, "--classes")) {
            if (parse_int(a, val, 3, 19, &v)) return 2;
            o.classes = (int)v;
        } else if (!strcmp(a, "--size")) {
            int h, w;
            char extra;
            if (sscanf(val, "%dx%d%c", &h, &w, &extra) != 2 || h < 8 || w < 8 || h > 8192 ||
                w > 8192) {
                SG_ERROR("synth: --size '%s': expected HxW (height x width, 8..8192 each), e.g. "
                         "1024x2048",
                         val);
                return 2;
            }
            o.h = h;
            o.w = w;
        } else {
            SG_ERROR("synth: unknown option %s", a);
            usage(stderr);
            return 2;
        }
    }
    if (!o.out || !o.out[0]) {
        SG_ERROR("synth: --out DIR is required");
        usage(stderr);
        return 2;
    }
    if (o.n_train + o.n_val == 0) {
        SG_ERROR("synth: --train and --val are both 0: nothing to write");
        return 2;
    }
    double t0 = sg_now_s();
    sg_status st = sg_synth_write(&o);
    if (st != SG_OK) return sg_exit_code(st);
    double dt = sg_now_s() - t0;
    SG_INFO("synth: wrote %d train + %d val images of %dx%d (%d classes, seed %llu) to %s in "
            "%.1f s; use data.format: %s, data.root: %s",
            o.n_train, o.n_val, o.h, o.w, o.classes, (unsigned long long)o.seed, o.out, dt,
            sg_synth_layout_name(o.layout), o.out);
    return 0;
}
