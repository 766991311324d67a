/* core/config.c - the configuration schema table, and loading values into it.
 *
 * Owns THE table: one row per sg_config field (key, type, offset, default,
 * range or allowed values, one-line doc). Defaults, YAML files (libyaml's
 * document API, for line:column marks), --set overrides and the cross-key
 * validation are all driven by it; files may inherit from a base file
 * (`base:`, loaded first; see load_chain_file). Writing, --help-config and
 * the hash are in config_out.c; where each value came from, config_origin.c.
 * Every error names the source (file or --set), line:column, the key and
 * what to do, and the call returns SG_ERR_CONFIG (core/status.h).
 */
#include "core/config.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <yaml.h>

#include "core/config_origin.h"
#include "core/config_schema.h"
#include "core/log.h"

#define F(field) offsetof(sg_config, field)
#define FSIZE(field) sizeof(((sg_config *)0)->field)
#define NOLO (-1e300)
#define NOHI (1e300)
#define IMAX 2147483647.0

/* Row builders, one per type. */
#define K_INT(name, field, def, lo, hi, doc) \
    {name, SG_KT_INT, F(field), 0, 0, 0, 0, 0, def, lo, hi, NULL, doc}
#define K_CHOICE(name, field, def, allowed, doc) \
    {name, SG_KT_INT, F(field), 0, 0, 0, 0, 0, def, NOLO, NOHI, allowed, doc}
#define K_FLOAT(name, field, def, lo, hi, doc) \
    {name, SG_KT_FLOAT, F(field), 0, 0, 0, 0, 0, def, lo, hi, NULL, doc}
#define K_BOOL(name, field, def, doc) \
    {name, SG_KT_BOOL, F(field), 0, 0, 0, 0, 0, def, 0, 1, NULL, doc}
#define K_STR(name, field, def, doc) \
    {name, SG_KT_STR, F(field), 0, 0, 0, 0, FSIZE(field), def, NOLO, NOHI, NULL, doc}
#define K_ENUM(name, field, def, allowed, doc) \
    {name, SG_KT_ENUM, F(field), 0, 0, 0, 0, FSIZE(field), def, NOLO, NOHI, allowed, doc}
#define K_INTS_FIXED(name, field, def, lo, hi, doc)                                        \
    {name, SG_KT_INT_LIST, F(field), 0, (int)(FSIZE(field) / sizeof(int)),                \
     (int)(FSIZE(field) / sizeof(int)), (int)(FSIZE(field) / sizeof(int)), 0, def, lo, hi, \
     NULL, doc}
#define K_FLOATS_FIXED(name, field, def, lo, hi, doc)                                     \
    {name, SG_KT_FLOAT_LIST, F(field), 0, (int)(FSIZE(field) / sizeof(double)),          \
     (int)(FSIZE(field) / sizeof(double)), (int)(FSIZE(field) / sizeof(double)), 0, def,  \
     lo, hi, NULL, doc}
#define K_INTS(name, field, nfield, minlen, def, lo, hi, doc)                              \
    {name, SG_KT_INT_LIST, F(field), F(nfield), 0, (int)(FSIZE(field) / sizeof(int)),      \
     minlen, 0, def, lo, hi, NULL, doc}
#define K_FLOATS(name, field, nfield, minlen, def, lo, hi, doc)                            \
    {name, SG_KT_FLOAT_LIST, F(field), F(nfield), 0,                                       \
     (int)(FSIZE(field) / sizeof(double)), minlen, 0, def, lo, hi, NULL, doc}
#define K_STRS(name, field, nfield, def, doc)                                              \
    {name, SG_KT_STR_LIST, F(field), F(nfield), 0,                                         \
     (int)(FSIZE(field) / FSIZE(field[0])), 0, FSIZE(field[0]), def, NOLO, NOHI, NULL, doc}

/* THE schema. Top-level keys first, then one block per section, in the
 * order config.yaml is written. Adding a key: a field in config.h and a row
 * here (tests/config checks that every field of config.h has a row). */
static const sg_config_key g_keys[] = {
    K_STR("run_dir", run_dir, "runs/default",
          "directory for config.yaml, logs/, checkpoints and metrics (created at start)"),
    K_INT("seed", seed, "0", 0, IMAX,
          "seed of every random draw: init, scales, crops, flips, dropout, shuffling"),
    K_ENUM("device", device, "cpu", "cpu|cuda|cuda:N",
           "compute device; under the launcher 'cuda' is the rank's local GPU"),
    K_INT("threads", threads, "0", 0, 4096,
          "CPU threads per process, 0 = the CPUs it may use (affinity mask, cgroup quota) divided among the node's ranks; OMP_NUM_THREADS overrides 0"),

    K_ENUM("model.backbone", model.backbone, "resnet50", "resnet18|resnet34|resnet50|resnet101",
           "ResNet encoder (torchvision layout)"),
    K_CHOICE("model.output_stride", model.output_stride, "8", "8|16",
             "encoder output stride: 8 dilates layer3+layer4, 16 dilates layer4"),
    K_INTS("model.aspp_rates", model.aspp_rates, model.n_aspp_rates, 1, "[12, 24, 36]", 1, 1024,
           "dilation rates of the ASPP 3x3 branches"),
    K_INT("model.num_classes", model.num_classes, "19", 1, 254,
          "output classes (labels are uint8; 255 is ignore)"),
    K_BOOL("model.aux_head", model.aux_head, "true", "FCN auxiliary head on layer3 (training loss only)"),
    K_FLOAT("model.aspp_dropout", model.aspp_dropout, "0.5", 0, 0.99,
            "dropout after the ASPP projection"),
    K_FLOAT("model.aux_dropout", model.aux_dropout, "0.1", 0, 0.99, "dropout in the auxiliary head"),
    K_INT("model.base_width", model.base_width, "64", 1, 1024,
          "encoder base width (64 = torchvision); smaller values shrink every layer"),
    K_BOOL("model.sync_bn", model.sync_bn, "true",
           "synchronise batch-norm statistics across ranks (SyncBN)"),
    K_FLOAT("model.bn_eps", model.bn_eps, "1e-05", 1e-12, 1, "batch-norm epsilon"),
    K_FLOAT("model.bn_momentum", model.bn_momentum, "0.1", 0, 1,
            "batch-norm running-statistics momentum (PyTorch convention)"),
    K_STR("model.pretrained", model.pretrained, "",
          "safetensors file to initialise from (segtrain or torchvision names), empty = random init"),
    K_BOOL("model.pretrained_strict", model.pretrained_strict, "false",
           "any mismatch with model.pretrained (missing, unexpected or other-shape tensors) is an error; "
           "false: reported, other-shape heads skipped with a warning"),

    K_ENUM("data.format", data.format, "cityscapes", "cityscapes|list|voc|ade20k",
           "dataset layout: Cityscapes tree, list files of 'image label' lines, Pascal VOC 2012 "
           "(VOCdevkit/VOC2012), or ADE20K (ADEChallengeData2016)"),
    K_STR("data.root", data.root, "data/cityscapes", "dataset root directory"),
    K_STR("data.train_split", data.train_split, "train",
          "training split (cityscapes: split name; list: list file, relative to root)"),
    K_STR("data.val_split", data.val_split, "val", "validation split (as train_split)"),
    K_ENUM("data.label_map", data.label_map, "cityscapes", "cityscapes|none",
           "label mapping: Cityscapes labelIds -> 19 trainIds, or labels used as stored"),
    K_INTS_FIXED("data.crop_size", data.crop_size, "[512, 1024]", 1, 16384,
                 "training crop height, width (padded with ignore when the image is smaller)"),
    K_FLOATS_FIXED("data.scale_range", data.scale_range, "[0.5, 2.0]", 0.01, 100,
                   "random resize ratio min, max, relative to the image"),
    K_BOOL("data.hflip", data.hflip, "true", "random horizontal flip with probability 0.5"),
    K_FLOATS_FIXED("data.mean", data.mean, "[0.485, 0.456, 0.406]", 0, 1,
                   "per-channel RGB mean on [0,1] pixels (ImageNet)"),
    K_FLOATS_FIXED("data.std", data.std, "[0.229, 0.224, 0.225]", 1e-6, 10,
                   "per-channel RGB std on [0,1] pixels (ImageNet)"),
    K_INT("data.ignore_index", data.ignore_index, "255", 0, 255,
          "label value excluded from loss and metrics"),
    K_INT("data.workers", data.workers, "4", 0, 256,
          "loader threads per rank decoding and augmenting (0 = in the training thread)"),
    K_INT("data.prefetch", data.prefetch, "4", 1, 1024, "batches prepared ahead per rank"),
    K_BOOL("data.shuffle", data.shuffle, "true", "shuffle the training set every epoch"),
    K_ENUM("data.invalid_labels", data.invalid_labels, "error", "error|ignore",
           "a label >= num_classes that is not ignore_index: stop with an error, or ignore it"),
    K_STRS("data.class_names", data.class_names, data.n_class_names, "[]",
           "class names for reports (empty = cityscapes names or class indices)"),
    K_INTS("data.palette", data.palette, data.n_palette, 0, "[]", 0, 255,
           "colour per class as r,g,b triples for colour predictions (empty = default)"),
    K_ENUM("data.reduce_zero_label", data.reduce_zero_label, "auto", "auto|true|false",
           "label 0 becomes ignore and every other label shifts down by one (mmsegmentation's "
           "reduce_zero_label); auto = true for ade20k, false otherwise"),
    K_INT("data.max_image_pixels", data.max_image_pixels, "67108864", 1, IMAX,
          "largest decoded image or mask (height x width, default 2^26) read from a file; a "
          "larger one is refused before allocation (corrupt or hostile files)"),

    K_INT("train.iters", train.iters, "80000", 0, 1e9,
          "training iterations (optimizer steps); 0 = train by epochs"),
    K_INT("train.epochs", train.epochs, "0", 0, 1e6, "training epochs when train.iters is 0"),
    K_INT("train.batch_size", train.batch_size, "2", 1, 4096, "images per rank per forward pass"),
    K_INT("train.accum_steps", train.accum_steps, "1", 1, 1024,
          "forward/backward passes accumulated per optimizer step"),
    K_FLOAT("train.lr", train.lr, "0.01", 0, 100, "base learning rate (SGD)"),
    K_FLOAT("train.momentum", train.momentum, "0.9", 0, 1, "SGD momentum"),
    K_FLOAT("train.dampening", train.dampening, "0.0", 0, 1, "SGD dampening (PyTorch semantics)"),
    K_BOOL("train.nesterov", train.nesterov, "false", "Nesterov momentum"),
    K_FLOAT("train.weight_decay", train.weight_decay, "0.0001", 0, 1,
            "L2 weight decay added to the gradient (PyTorch SGD)"),
    K_ENUM("train.lr_schedule", train.lr_schedule, "poly", "poly|constant|cosine|step",
           "learning-rate schedule over optimizer steps, as torch.optim.lr_scheduler's "
           "PolynomialLR (with min_lr), CosineAnnealingLR, MultiStepLR"),
    K_FLOAT("train.poly_power", train.poly_power, "0.9", 0, 100,
            "poly: lr = (lr - min_lr) * (1 - it/iters)^power + min_lr"),
    K_FLOAT("train.min_lr", train.min_lr, "0.0", 0, 100,
            "poly and cosine: final learning rate (cosine: CosineAnnealingLR's eta_min)"),
    K_INTS("train.lr_steps", train.lr_steps, train.n_lr_steps, 0, "[]", 1, 1e9,
           "step: milestones in optimizer steps (increasing); the lr is multiplied by lr_gamma "
           "at each"),
    K_FLOAT("train.lr_gamma", train.lr_gamma, "0.1", 0, 1, "step: factor at each milestone"),
    K_ENUM("train.warmup", train.warmup, "linear", "linear|constant|none",
           "warmup over warmup_iters steps (torch LinearLR / ConstantLR), composed with the "
           "schedule as train.warmup_mode says"),
    K_ENUM("train.warmup_mode", train.warmup_mode, "chained", "chained|sequential",
           "chained: the warmup factor multiplies the schedule from step 0 (torch ChainedScheduler, "
           "mmcv); sequential: the schedule starts after the warmup, over the remaining steps "
           "(torch SequentialLR, torchvision's reference script)"),
    K_INT("train.warmup_iters", train.warmup_iters, "0", 0, 1e9, "warmup iterations (0 = none)"),
    K_FLOAT("train.warmup_ratio", train.warmup_ratio, "0.01", 0, 1,
            "warmup factor: linear starts at lr * warmup_ratio, constant stays there"),
    K_FLOAT("train.ema_decay", train.ema_decay, "0.0", 0, 1,
            "EMA of the weights and BN buffers: ema = decay * ema + (1 - decay) * weights after "
            "every ema_every optimizer steps (timm ModelEmaV2); 0 = off, else below 1"),
    K_INT("train.ema_every", train.ema_every, "1", 1, 1e9,
          "EMA update every N optimizer steps"),
    K_FLOAT("train.head_lr_mult", train.head_lr_mult, "1.0", 0, 1000,
            "learning-rate multiplier for parameters matching head_lr_prefixes"),
    K_STRS("train.head_lr_prefixes", train.head_lr_prefixes, train.n_head_lr_prefixes,
           "[\"aux_head.\"]", "parameter-name prefixes that get head_lr_mult"),
    K_FLOAT("train.aux_weight", train.aux_weight, "0.5", 0, 100,
            "weight of the auxiliary head's loss (torchvision 0.5, mmseg 0.4)"),
    K_STRS("train.freeze", train.freeze, train.n_freeze, "[]",
           "parameter-name prefixes kept fixed (e.g. encoder.conv1.)"),
    K_BOOL("train.freeze_bn_stats", train.freeze_bn_stats, "false",
           "BN layers under train.freeze prefixes (all BN layers when train.freeze is empty) use and keep their running statistics"),
    K_BOOL("train.drop_last", train.drop_last, "true",
           "drop the last incomplete global batch of an epoch"),
    K_BOOL("train.leftover_eval", train.leftover_eval, "true",
           "evaluation: samples that do not divide among ranks are evaluated once, not padded"),
    K_ENUM("train.loss_norm", train.loss_norm, "global", "global|local",
           "global: mean over all ranks' valid pixels; local: each rank's mean, averaged (DDP)"),
    K_FLOATS("train.class_weights", train.class_weights, train.n_class_weights, 0, "[]", 0,
             1e6, "weighted cross-entropy (main and aux heads): one weight per class, "
             "normalised as PyTorch's cross_entropy(weight=...); [] = unweighted"),
    K_FLOAT("train.ohem_thresh", train.ohem_thresh, "0.0", 0, 1,
            "OHEM on the main head (mmseg's OHEMPixelSampler): train on pixels whose "
            "probability of the true class is below this; 0 = off"),
    K_INT("train.ohem_min_kept", train.ohem_min_kept, "100000", 0, IMAX,
          "OHEM: keep at least this many of the hardest pixels per image (mmseg multiplies "
          "min_kept by the images of a forward)"),
    K_INT("train.log_every", train.log_every, "10", 1, 1e9, "log training metrics every N iterations"),
    K_INT("train.checkpoint_every", train.checkpoint_every, "1000", 0, 1e9,
          "write a checkpoint every N iterations (0 = only at the end)"),
    K_INT("train.keep_checkpoints", train.keep_checkpoints, "3", 0, 1e6,
          "periodic checkpoints kept (0 = keep all)"),
    K_INT("train.eval_every", train.eval_every, "0", 0, 1e9,
          "evaluate on val_split every N iterations (0 = only at the end)"),
    K_BOOL("train.tensorboard", train.tensorboard, "true",
           "rank 0 writes TensorBoard event files to <run_dir>/tb/ (losses, lr, img/s, val mIoU, per-class IoU)"),
    K_ENUM("train.precision", train.precision, "fp32", "fp32|bf16",
           "convolutions in train, eval, predict and bench: bf16 = bfloat16 inputs and weights, "
           "fp32 accumulation, bf16 outputs (BN, loss, optimizer, fp32 master weights and "
           "checkpoints stay fp32; no loss scaling needed)"),

    K_INTS_FIXED("eval.crop_size", eval.crop_size, "[0, 0]", 0, 16384,
                 "sliding-window height, width (0, 0 = whole image at once)"),
    K_INTS_FIXED("eval.stride", eval.stride, "[0, 0]", 0, 16384,
                 "sliding-window stride (0, 0 = the crop size)"),
    K_INT("eval.batch_size", eval.batch_size, "1", 1, 4096, "images per rank per evaluation pass"),
    K_BOOL("eval.use_ema", eval.use_ema, "true",
           "evaluate with the EMA weights when there are some (train.ema_decay > 0; "
           "a checkpoint's ema.* tensors): in-training eval, eval, predict"),
    K_FLOATS("eval.scales", eval.scales, eval.n_scales, 1, "[1.0]", 0.1, 4.0,
             "test-time augmentation: image scales (at most 16) whose softmax probabilities are "
             "averaged in eval, predict and in-training eval, e.g. [0.5, 0.75, 1.0, 1.25, 1.5, "
             "1.75]; [1.0] = one pass, logits argmax"),
    K_BOOL("eval.flip", eval.flip, "false",
           "test-time augmentation: also the horizontally flipped image at every scale"),

    K_ENUM("dist.backend", dist.backend, "auto", "auto|gloo|nccl",
           "collectives: auto = nccl on cuda, gloo on cpu"),
    K_INT("dist.timeout_s", dist.timeout_s, "300", 1, 86400,
          "seconds to wait for a peer before failing (rendezvous and collectives)"),
    K_FLOAT("dist.bucket_mb", dist.bucket_mb, "25.0", 0.001, 65536,
            "gradient all-reduce bucket size in MiB (DDP bucket_cap_mb)"),
    K_FLOAT("dist.first_bucket_mb", dist.first_bucket_mb, "1.0", 0.001, 65536,
            "size of the first (last-layers) bucket in MiB"),

    K_BOOL("cudnn.benchmark", cudnn.benchmark, "true", "time cuDNN algorithms once per shape"),
    K_BOOL("cudnn.deterministic", cudnn.deterministic, "false",
           "deterministic cuDNN algorithms only"),
    K_BOOL("cudnn.allow_tf32", cudnn.allow_tf32, "true",
           "fp32 convolutions may use TF32 tensor cores on GPUs that have them (PyTorch's "
           "cuDNN default); false = plain fp32"),
};
#define N_KEYS ((int)(sizeof g_keys / sizeof g_keys[0]))
_Static_assert(sizeof g_keys / sizeof g_keys[0] <= SG_CONFIG_MAX_KEYS,
               "more schema rows than sg_config_origin records: raise SG_CONFIG_MAX_KEYS in config.h");

int sg_config_n_keys(void) { return N_KEYS; }
const sg_config_key *sg_config_key_at(int i) { return (i >= 0 && i < N_KEYS) ? &g_keys[i] : NULL; }

const sg_config_key *sg_config_find_key(const char *name) {
    for (int i = 0; i < N_KEYS; i++)
        if (strcmp(g_keys[i].name, name) == 0) return &g_keys[i];
    return NULL;
}

void sg_config_type_name(const sg_config_key *k, char *buf, size_t n) {
    static const char *names[] = {"int", "float", "bool", "string", "enum", "int", "float", "string"};
    if (k->type == SG_KT_INT_LIST || k->type == SG_KT_FLOAT_LIST || k->type == SG_KT_STR_LIST) {
        if (k->fixed_len)
            snprintf(buf, n, "%s[%d]", names[k->type], k->fixed_len);
        else
            snprintf(buf, n, "%s list", names[k->type]);
    } else {
        snprintf(buf, n, "%s", names[k->type]);
    }
}

/* A key names a section when some key starts with "<name>.". */
static int is_section(const char *name) {
    size_t n = strlen(name);
    for (int i = 0; i < N_KEYS; i++)
        if (strncmp(g_keys[i].name, name, n) == 0 && g_keys[i].name[n] == '.') return 1;
    return 0;
}

/* ---------------------------------------------------------------- suggestions */

static int edit_distance(const char *a, const char *b) {
    size_t la = strlen(a), lb = strlen(b);
    if (la > 127 || lb > 127) return 1000;
    int prev[128], cur[128];
    for (size_t j = 0; j <= lb; j++) prev[j] = (int)j;
    for (size_t i = 1; i <= la; i++) {
        cur[0] = (int)i;
        for (size_t j = 1; j <= lb; j++) {
            int sub = prev[j - 1] + (a[i - 1] != b[j - 1]);
            int del = prev[j] + 1, ins = cur[j - 1] + 1;
            cur[j] = sub < del ? (sub < ins ? sub : ins) : (del < ins ? del : ins);
        }
        memcpy(prev, cur, sizeof(int) * (lb + 1));
    }
    return prev[lb];
}

static const char *leaf(const char *name) {
    const char *d = strrchr(name, '.');
    return d ? d + 1 : name;
}

const char *sg_config_suggest(const char *name) {
    const char *best = NULL;
    int best_d = 1 << 30;
    for (int i = 0; i < N_KEYS; i++) {
        int d = edit_distance(name, g_keys[i].name);
        /* the right key in the wrong section ("lr" at top level) is close too */
        int dl = edit_distance(leaf(name), leaf(g_keys[i].name));
        if (dl == 0 && d > 1) d = 1;
        /* a truncated name ("data.crop") */
        size_t ln = strlen(name);
        if (ln >= 4 && !strncmp(g_keys[i].name, name, ln) && d > 2) d = 2;
        if (d < best_d) best_d = d, best = g_keys[i].name;
    }
    /* section names too ("modle:" -> model) */
    static const char *sections[] = {"model", "data", "train", "eval", "dist", "cudnn"};
    for (size_t i = 0; i < sizeof sections / sizeof sections[0]; i++) {
        int d = edit_distance(name, sections[i]);
        if (d < best_d) best_d = d, best = sections[i];
    }
    int len = (int)strlen(name);
    int limit = len / 3 > 2 ? len / 3 : 2;
    return best_d <= limit ? best : NULL;
}

/* ---------------------------------------------------------------- errors */

/* "src:line:col: key 'k': message". line 0 = no position (e.g. --set). */
static sg_status cfg_error(const char *src, const yaml_mark_t *m, const char *key,
                           const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static sg_status cfg_error(const char *src, const yaml_mark_t *m, const char *key,
                           const char *fmt, ...) {
    char msg[2048], where[1200], what[300] = "";
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (m && strncmp(src, "--set ", 6) != 0) /* --set: the value is in the message */
        snprintf(where, sizeof where, "%s:%zu:%zu", src, m->line + 1, m->column + 1);
    else
        snprintf(where, sizeof where, "%s", src);
    if (key) snprintf(what, sizeof what, "key '%s': ", key);
    SG_ERROR("config error: %s: %s%s", where, what, msg);
    return SG_ERR_CONFIG;
}

/* ---------------------------------------------------------------- scalars */

static int is_null_scalar(const yaml_node_t *n) {
    if (n->data.scalar.style != YAML_PLAIN_SCALAR_STYLE) return 0;
    const char *v = (const char *)n->data.scalar.value;
    return !*v || !strcmp(v, "~") || !strcmp(v, "null") || !strcmp(v, "Null") || !strcmp(v, "NULL");
}

static int parse_long(const char *s, long long *out) {
    char *end = NULL;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (!*s || errno || *end) return -1;
    *out = v;
    return 0;
}

static int parse_double(const char *s, double *out) {
    char *end = NULL;
    errno = 0;
    double v = strtod(s, &end);
    /* strtod accepts "inf", "nan", hex: only finite decimal numbers here */
    if (!*s || *end || !isfinite(v) || strpbrk(s, "xXnN") || errno == ERANGE) return -1;
    *out = v;
    return 0;
}

static int parse_bool(const char *s, int *out) {
    static const char *yes[] = {"true", "yes", "on"}, *no[] = {"false", "no", "off"};
    for (int i = 0; i < 3; i++) {
        if (!strcasecmp(s, yes[i])) return *out = 1, 0;
        if (!strcasecmp(s, no[i])) return *out = 0, 0;
    }
    return -1;
}

/* Does v match one of "a|b|cuda:N" (N = a decimal number)? */
static int allowed_match(const char *allowed, const char *v) {
    const char *p = allowed;
    while (*p) {
        const char *bar = strchr(p, '|');
        size_t n = bar ? (size_t)(bar - p) : strlen(p);
        if (n >= 2 && p[n - 1] == 'N' && p[n - 2] == ':') {
            if (!strncmp(v, p, n - 1) && v[n - 1] >= '0' && v[n - 1] <= '9' &&
                strspn(v + n - 1, "0123456789") == strlen(v + n - 1) && strlen(v + n - 1) <= 4)
                return 1;
        } else if (strlen(v) == n && !strncmp(v, p, n)) {
            return 1;
        }
        p += n;
        if (*p == '|') p++;
    }
    return 0;
}

void sg_config_allowed_text(const char *allowed, char *buf, size_t n) {
    size_t j = 0;
    for (const char *p = allowed; *p && j + 3 < n; p++) {
        if (*p == '|') {
            buf[j++] = ',';
            buf[j++] = ' ';
        } else {
            buf[j++] = *p;
        }
    }
    buf[j] = 0;
}

static void range_text(const sg_config_key *k, char *buf, size_t n) {
    int ints = k->type == SG_KT_INT || k->type == SG_KT_INT_LIST;
    if (ints)
        snprintf(buf, n, "%lld..%lld", (long long)k->lo, (long long)k->hi);
    else
        snprintf(buf, n, "%g..%g", k->lo, k->hi);
}

/* One element of a numeric/bool/string key from a scalar node into dst. */
static sg_status set_scalar(const sg_config_key *k, const yaml_node_t *n, void *dst, int elem,
                      const char *src, const char *ctx) {
    const char *v = (const char *)n->data.scalar.value;
    const yaml_mark_t *m = &n->start_mark;
    int plain = n->data.scalar.style == YAML_PLAIN_SCALAR_STYLE;
    char what[64] = "";
    if (elem >= 0) snprintf(what, sizeof what, " (element %d)", elem + 1);
    char txt[256];
    switch (k->type) {
    case SG_KT_INT:
    case SG_KT_INT_LIST: {
        long long x;
        if (!plain || parse_long(v, &x) != 0)
            return cfg_error(src, m, k->name, "expects an integer%s, got '%s'%s", what, v, ctx);
        if (k->allowed) {
            char s[32];
            snprintf(s, sizeof s, "%lld", x);
            if (!allowed_match(k->allowed, s)) {
                sg_config_allowed_text(k->allowed, txt, sizeof txt);
                return cfg_error(src, m, k->name, "%lld is not allowed%s: use one of %s", x, what, txt);
            }
        } else if ((double)x < k->lo || (double)x > k->hi) {
            range_text(k, txt, sizeof txt);
            return cfg_error(src, m, k->name, "%lld is out of range%s: must be in %s", x, what, txt);
        }
        ((int *)dst)[elem < 0 ? 0 : elem] = (int)x;
        return SG_OK;
    }
    case SG_KT_FLOAT:
    case SG_KT_FLOAT_LIST: {
        double x;
        if (!plain || parse_double(v, &x) != 0)
            return cfg_error(src, m, k->name, "expects a number%s, got '%s'%s", what, v, ctx);
        if (x < k->lo || x > k->hi) {
            range_text(k, txt, sizeof txt);
            return cfg_error(src, m, k->name, "%g is out of range%s: must be in %s", x, what, txt);
        }
        ((double *)dst)[elem < 0 ? 0 : elem] = x;
        return SG_OK;
    }
    case SG_KT_BOOL: {
        int b;
        if (!plain || parse_bool(v, &b) != 0)
            return cfg_error(src, m, k->name, "expects true or false, got '%s'%s", v, ctx);
        *(int *)dst = b;
        return SG_OK;
    }
    case SG_KT_STR:
    case SG_KT_ENUM:
    case SG_KT_STR_LIST: {
        size_t len = n->data.scalar.length;
        if (strlen(v) != len)
            return cfg_error(src, m, k->name, "contains a NUL character%s", what);
        if (len >= k->str_size)
            return cfg_error(src, m, k->name, "is too long%s (%zu characters, at most %zu)", what,
                             len, k->str_size - 1);
        if (k->type == SG_KT_ENUM && !allowed_match(k->allowed, v)) {
            sg_config_allowed_text(k->allowed, txt, sizeof txt);
            return cfg_error(src, m, k->name, "'%s' is not allowed: use one of %s", v, txt);
        }
        if (k->type == SG_KT_STR_LIST && len == 0)
            return cfg_error(src, m, k->name, "has an empty entry%s", what);
        memcpy((char *)dst + (elem < 0 ? 0 : (size_t)elem * k->str_size), v, len + 1);
        return SG_OK;
    }
    }
    return SG_ERR_CONFIG;
}

static const char *node_kind(const yaml_node_t *n) {
    return n->type == YAML_MAPPING_NODE ? "a mapping" : n->type == YAML_SEQUENCE_NODE ? "a list" : "a value";
}

/* Sets key k from node n. Values are parsed into a scratch copy of the field
 * and committed only when all of it is valid. */
static sg_status set_from_node(sg_config *cfg, const sg_config_key *k, yaml_document_t *doc,
                         yaml_node_t *n, const char *src) {
    unsigned char scratch[sizeof(((sg_config *)0)->data.class_names)];
    _Static_assert(sizeof scratch >= SG_STR && sizeof scratch >= sizeof(int) * SG_LIST_MAX * 3,
                   "scratch must hold the largest field");
    int is_list = k->type == SG_KT_INT_LIST || k->type == SG_KT_FLOAT_LIST || k->type == SG_KT_STR_LIST;
    size_t elem_size = k->type == SG_KT_INT_LIST ? sizeof(int)
                       : k->type == SG_KT_FLOAT_LIST ? sizeof(double)
                                                     : k->str_size;
    memset(scratch, 0, sizeof scratch);
    if (!is_list) {
        if (n->type != YAML_SCALAR_NODE) {
            char t[32];
            sg_config_type_name(k, t, sizeof t);
            return cfg_error(src, &n->start_mark, k->name, "expects a single %s, got %s", t, node_kind(n));
        }
        if (is_null_scalar(n) && k->type != SG_KT_STR)
            return cfg_error(src, &n->start_mark, k->name, "has no value (give one, or remove the line "
                             "to keep the default %s)", k->def);
        if (set_scalar(k, n, scratch, -1, src, "") != 0) return SG_ERR_CONFIG;
        size_t sz = (k->type == SG_KT_STR || k->type == SG_KT_ENUM) ? k->str_size
                    : k->type == SG_KT_FLOAT ? sizeof(double) : sizeof(int);
        if (k->type == SG_KT_STR && is_null_scalar(n)) scratch[0] = 0;
        memcpy((char *)cfg + k->off, scratch, sz);
        return SG_OK;
    }
    int count = 0;
    if (n->type == YAML_SCALAR_NODE && is_null_scalar(n) && !k->fixed_len && k->min_len == 0) {
        count = 0; /* "key:" or "key: ~" = empty list */
    } else if (n->type != YAML_SEQUENCE_NODE) {
        char t[32];
        sg_config_type_name(k, t, sizeof t);
        return cfg_error(src, &n->start_mark, k->name, "expects a list (%s), e.g. %s; got %s", t,
                         k->def, node_kind(n));
    } else {
        yaml_node_item_t *it = n->data.sequence.items.start;
        count = (int)(n->data.sequence.items.top - it);
        if (k->fixed_len && count != k->fixed_len)
            return cfg_error(src, &n->start_mark, k->name, "expects exactly %d entries, got %d (e.g. %s)",
                             k->fixed_len, count, k->def);
        if (count > k->cap)
            return cfg_error(src, &n->start_mark, k->name, "has %d entries, at most %d allowed", count, k->cap);
        for (int i = 0; i < count; i++) {
            yaml_node_t *e = yaml_document_get_node(doc, it[i]);
            if (!e || e->type != YAML_SCALAR_NODE)
                return cfg_error(src, e ? &e->start_mark : &n->start_mark, k->name,
                                 "element %d must be a single value, got %s", i + 1,
                                 e ? node_kind(e) : "nothing");
            if (set_scalar(k, e, scratch, i, src, "") != 0) return SG_ERR_CONFIG;
        }
    }
    if (k->fixed_len && count != k->fixed_len)
        return cfg_error(src, &n->start_mark, k->name, "expects exactly %d entries, got %d (e.g. %s)",
                         k->fixed_len, count, k->def);
    if (count < k->min_len)
        return cfg_error(src, &n->start_mark, k->name, "expects at least %d entries, got %d",
                         k->min_len, count);
    memcpy((char *)cfg + k->off, scratch, (size_t)k->cap * elem_size);
    if (k->count_off) *(int *)((char *)cfg + k->count_off) = count;
    return SG_OK;
}

/* ---------------------------------------------------------------- documents */

static sg_status unknown_key(const char *src, const yaml_mark_t *m, const char *full) {
    const char *s = sg_config_suggest(full);
    if (s) return cfg_error(src, m, NULL, "unknown key '%s' (did you mean %s?)", full, s);
    return cfg_error(src, m, NULL, "unknown key '%s' (segtrain --help-config lists every key)", full);
}

/* base_ok: 1 in a file (its `base:` was loaded before this runs), 0 in a
 * text (sg_config_load_string), where `base:` is refused. */
static sg_status load_mapping(sg_config *cfg, yaml_document_t *doc, yaml_node_t *map, const char *prefix,
                        const char *src, int base_ok) {
    yaml_node_pair_t *p0 = map->data.mapping.pairs.start, *pend = map->data.mapping.pairs.top;
    for (yaml_node_pair_t *p = p0; p < pend; p++) {
        yaml_node_t *kn = yaml_document_get_node(doc, p->key);
        yaml_node_t *vn = yaml_document_get_node(doc, p->value);
        if (!kn || !vn) return cfg_error(src, &map->start_mark, NULL, "broken mapping entry");
        if (kn->type != YAML_SCALAR_NODE)
            return cfg_error(src, &kn->start_mark, NULL, "a key must be a plain name, got %s", node_kind(kn));
        const char *name = (const char *)kn->data.scalar.value;
        char full[512];
        snprintf(full, sizeof full, "%s%s%s", prefix, *prefix ? "." : "", name);
        for (yaml_node_pair_t *q = p0; q < p; q++) {
            yaml_node_t *qk = yaml_document_get_node(doc, q->key);
            if (qk && qk->type == YAML_SCALAR_NODE && !strcmp((const char *)qk->data.scalar.value, name))
                return cfg_error(src, &kn->start_mark, full,
                                 "duplicate key (first given at line %zu): keep one of them",
                                 qk->start_mark.line + 1);
        }
        if (!strcmp(name, "base")) {
            if (*prefix)
                return cfg_error(src, &kn->start_mark, full, "base: belongs at the top level of a "
                                 "configuration file (it names the file this one derives from)");
            if (!base_ok)
                return cfg_error(src, &kn->start_mark, "base",
                                 "a configuration given as text (a checkpoint's stored configuration, "
                                 "a string) cannot name a base file: base: works only in files "
                                 "loaded with --config; merge the base into this text");
            continue; /* loaded before this mapping (load_chain_file) */
        }
        const sg_config_key *k = sg_config_find_key(full);
        if (k) {
            if (set_from_node(cfg, k, doc, vn, src) != 0) return SG_ERR_CONFIG;
            sg_config_origin_note(cfg, k, src, (int)kn->start_mark.line + 1);
        } else if (is_section(full)) {
            if (vn->type == YAML_SCALAR_NODE && is_null_scalar(vn)) continue; /* "train:" with nothing */
            if (vn->type != YAML_MAPPING_NODE)
                return cfg_error(src, &vn->start_mark, full,
                                 "is a section: expects a mapping of its keys (e.g. %s:\\n  key: value), got %s",
                                 full, node_kind(vn));
            if (load_mapping(cfg, doc, vn, full, src, base_ok) != 0) return SG_ERR_CONFIG;
        } else {
            return unknown_key(src, &kn->start_mark, full);
        }
    }
    return SG_OK;
}

static sg_status yaml_syntax_error(const yaml_parser_t *parser, const char *src) {
    const yaml_mark_t *m = parser->problem_mark.line || parser->problem_mark.column
                               ? &parser->problem_mark : &parser->context_mark;
    return cfg_error(src, m, NULL, "malformed YAML: %s%s%s (check indentation, colons and brackets)",
                     parser->problem ? parser->problem : "parse error", parser->context ? " " : "",
                     parser->context ? parser->context : "");
}

/* The limits, checked on libyaml's event stream before its document loader
 * runs: the loader (and the scanner's simple-key bookkeeping) cost time
 * quadratic in the nesting depth, so the depth is counted event by event and
 * parsing stops at the first level too deep, having done work linear in the
 * bytes read so far. */
static sg_status check_yaml_limits(const char *text, size_t len, const char *src) {
    yaml_parser_t parser;
    if (!yaml_parser_initialize(&parser)) {
        SG_ERROR("config error: %s: libyaml could not initialise (out of memory?)", src);
        return SG_ERR_CONFIG;
    }
    yaml_parser_set_input_string(&parser, (const unsigned char *)text, len);
    sg_status rc = SG_OK;
    int depth = 0;
    long nodes = 0;
    for (int done = 0; !done && rc == SG_OK;) {
        yaml_event_t ev;
        if (!yaml_parser_parse(&parser, &ev)) {
            rc = yaml_syntax_error(&parser, src);
            break;
        }
        switch (ev.type) {
        case YAML_MAPPING_START_EVENT:
        case YAML_SEQUENCE_START_EVENT:
            nodes++;
            if (++depth > SG_CONFIG_MAX_DEPTH)
                rc = cfg_error(src, &ev.start_mark, NULL,
                               "YAML nested more than %d levels deep: not a segtrain configuration "
                               "(keys nest 2 levels: section, key)", SG_CONFIG_MAX_DEPTH);
            break;
        case YAML_MAPPING_END_EVENT:
        case YAML_SEQUENCE_END_EVENT:
            depth--;
            break;
        case YAML_SCALAR_EVENT:
        case YAML_ALIAS_EVENT:
            nodes++;
            break;
        case YAML_STREAM_END_EVENT:
            done = 1;
            break;
        default:
            break;
        }
        if (rc == SG_OK && nodes > SG_CONFIG_MAX_NODES)
            rc = cfg_error(src, &ev.start_mark, NULL,
                           "more than %d YAML values: not a segtrain configuration",
                           SG_CONFIG_MAX_NODES);
        yaml_event_delete(&ev);
    }
    yaml_parser_delete(&parser);
    return rc;
}

/* Parses YAML text into doc; reports libyaml's error with its position. */
static sg_status parse_yaml(const char *text, size_t len, const char *src, yaml_document_t *doc) {
    if (len > SG_CONFIG_MAX_BYTES)
        return cfg_error(src, NULL, NULL, "%zu bytes of YAML: a configuration is at most %u bytes "
                         "(1 MiB)", len, (unsigned)SG_CONFIG_MAX_BYTES);
    if (check_yaml_limits(text, len, src) != SG_OK) return SG_ERR_CONFIG;
    yaml_parser_t parser;
    if (!yaml_parser_initialize(&parser)) {
        SG_ERROR("config error: %s: libyaml could not initialise (out of memory?)", src);
        return SG_ERR_CONFIG;
    }
    yaml_parser_set_input_string(&parser, (const unsigned char *)text, len);
    if (!yaml_parser_load(&parser, doc)) {
        yaml_syntax_error(&parser, src);
        yaml_parser_delete(&parser);
        return SG_ERR_CONFIG;
    }
    /* a second document ("---") is almost certainly a mistake */
    yaml_document_t extra;
    if (yaml_document_get_root_node(doc) && yaml_parser_load(&parser, &extra)) {
        yaml_node_t *r = yaml_document_get_root_node(&extra);
        if (r) {
            cfg_error(src, &r->start_mark, NULL, "a second YAML document: one configuration per file");
            yaml_document_delete(&extra);
            yaml_document_delete(doc);
            yaml_parser_delete(&parser);
            return SG_ERR_CONFIG;
        }
        yaml_document_delete(&extra);
    }
    yaml_parser_delete(&parser);
    return SG_OK;
}

/* Loads a parsed document's top level (a mapping, or nothing). */
static sg_status load_root(sg_config *cfg, yaml_document_t *doc, const char *src, int base_ok) {
    yaml_node_t *root = yaml_document_get_root_node(doc);
    if (!root || (root->type == YAML_SCALAR_NODE && is_null_scalar(root))) return SG_OK;
    if (root->type == YAML_MAPPING_NODE) return load_mapping(cfg, doc, root, "", src, base_ok);
    return cfg_error(src, &root->start_mark, NULL,
                     "the top level must be a mapping of keys and sections (run_dir:, model:, "
                     "train:, ...), got %s", node_kind(root));
}

sg_status sg_config_load_string(sg_config *cfg, const char *yaml, const char *name) {
    yaml_document_t doc;
    if (parse_yaml(yaml, strlen(yaml), name, &doc) != 0) return SG_ERR_CONFIG;
    sg_status rc = load_root(cfg, &doc, name, 0);
    yaml_document_delete(&doc);
    return rc;
}

/* Reads a whole configuration file (at most SG_CONFIG_MAX_BYTES, no NUL
 * bytes) into *out (malloc'ed, NUL-terminated). `shown` names it in errors. */
static sg_status read_text(const char *path, const char *shown, char **out, size_t *out_len) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        SG_ERROR("config error: %s: cannot open the configuration file: %s (check the path given to "
                 "--config)", shown, strerror(errno));
        return SG_ERR_CONFIG;
    }
    size_t cap = 1 << 16, len = 0;
    char *buf = malloc(cap);
    if (!buf) {
        fclose(f);
        SG_ERROR("config error: %s: out of memory reading the file", shown);
        return SG_ERR_CONFIG;
    }
    for (;;) {
        if (len + 1 >= cap) {
            if (len > SG_CONFIG_MAX_BYTES) {
                SG_ERROR("config error: %s: file larger than %u bytes (1 MiB): not a "
                         "configuration file?", shown, (unsigned)SG_CONFIG_MAX_BYTES);
                free(buf);
                fclose(f);
                return SG_ERR_CONFIG;
            }
            char *nb = realloc(buf, cap * 2);
            if (!nb) {
                free(buf);
                fclose(f);
                SG_ERROR("config error: %s: out of memory reading the file", shown);
                return SG_ERR_CONFIG;
            }
            buf = nb, cap *= 2;
        }
        size_t got = fread(buf + len, 1, cap - 1 - len, f);
        len += got;
        if (got == 0) break;
    }
    int err = ferror(f);
    int e = errno;
    fclose(f);
    if (err) {
        SG_ERROR("config error: %s: cannot read the configuration file: %s (is it a regular file?)", shown,
                 strerror(e));
        free(buf);
        return SG_ERR_CONFIG;
    }
    buf[len] = 0;
    if (strlen(buf) != len) {
        SG_ERROR("config error: %s: contains NUL bytes: not a YAML text file", shown);
        free(buf);
        return SG_ERR_CONFIG;
    }
    *out = buf;
    *out_len = len;
    return SG_OK;
}

/* ---------------------------------------------------------------- base chains */

/* The files being loaded, outermost first: the cycle check compares real
 * paths (symlinks and "../" spellings of one file are one file), messages
 * show the paths as written. */
typedef struct load_chain {
    int n;
    size_t bytes; /* of all files read so far */
    char real[SG_CONFIG_MAX_CHAIN][PATH_MAX];
    char shown[SG_CONFIG_MAX_CHAIN][PATH_MAX];
} load_chain;

/* "a.yaml -> b.yaml -> last" into buf[n] (last may be NULL). */
static const char *chain_text(const load_chain *ch, const char *last, char *buf, size_t n) {
    size_t used = 0;
    buf[0] = 0;
    for (int i = 0; i <= ch->n && used < n; i++) {
        const char *name = i < ch->n ? ch->shown[i] : last;
        if (!name) break;
        int w = snprintf(buf + used, n - used, "%s%s", i ? " -> " : "", name);
        used += w > 0 ? (size_t)w : 0;
    }
    return buf;
}

static sg_status load_chain_file(sg_config *cfg, const char *shown, const char *real, load_chain *ch);

/* The `base:` value v of file ch->shown[top] (at mark m), resolved against
 * that file's directory, checked and loaded into cfg. */
static sg_status load_base(sg_config *cfg, const yaml_node_t *vn, load_chain *ch) {
    const char *src = ch->shown[ch->n - 1];
    const yaml_mark_t *m = &vn->start_mark;
    if (vn->type != YAML_SCALAR_NODE || is_null_scalar(vn))
        return cfg_error(src, m, "base", "expects one file path (a string, relative to this file's "
                         "directory), got %s", vn->type == YAML_SCALAR_NODE ? "nothing" : node_kind(vn));
    const char *v = (const char *)vn->data.scalar.value;
    if (strlen(v) != vn->data.scalar.length)
        return cfg_error(src, m, "base", "contains a NUL character");
    /* relative to the directory of the file as it was named (not of its
     * symlink target), as a reader of the file expects */
    const char *slash = strrchr(src, '/');
    size_t dl = (v[0] == '/' || !slash) ? 0 : (size_t)(slash - src) + 1;
    size_t need = dl + strlen(v);
    if (need >= SG_STR)
        return cfg_error(src, m, "base", "the path is %zu characters long (at most %d)", need, SG_STR - 1);
    char path[SG_STR], real[PATH_MAX], chain[4 * SG_STR];
    snprintf(path, sizeof path, "%.*s%s", (int)dl, src, v);
    if (ch->n >= SG_CONFIG_MAX_CHAIN)
        return cfg_error(src, m, "base", "more than %d files in one base chain (%s): merge some of them",
                         SG_CONFIG_MAX_CHAIN, chain_text(ch, path, chain, sizeof chain));
    if (!realpath(path, real))
        return cfg_error(src, m, "base", "cannot open the base file %s: %s (a relative path is relative "
                         "to the directory of %s)", path, strerror(errno), src);
    for (int i = 0; i < ch->n; i++)
        if (!strcmp(ch->real[i], real))
            return cfg_error(src, m, "base", "cycle: %s: a file cannot be its own base",
                             chain_text(ch, path, chain, sizeof chain));
    if (load_chain_file(cfg, path, real, ch) != SG_OK) {
        SG_ERROR("config error: %s:%zu:%zu: key 'base': the base file named here did not load "
                 "(the error above)",
                 src, m->line + 1, m->column + 1);
        return SG_ERR_CONFIG;
    }
    return SG_OK;
}

/* Loads one file of a chain: its base first (if it names one), then its own
 * keys over it. */
static sg_status load_chain_file(sg_config *cfg, const char *shown, const char *real, load_chain *ch) {
    char *text = NULL, chain[4 * SG_STR];
    size_t len = 0;
    if (read_text(real, shown, &text, &len) != SG_OK) return SG_ERR_CONFIG;
    snprintf(ch->shown[ch->n], PATH_MAX, "%s", shown);
    snprintf(ch->real[ch->n], PATH_MAX, "%s", real);
    ch->n++;
    ch->bytes += len;
    yaml_document_t doc;
    sg_status rc = SG_OK;
    if (ch->bytes > SG_CONFIG_MAX_CHAIN_BYTES) {
        SG_ERROR("config error: %s: the files of the base chain %s total %zu bytes, more than %u "
                 "(1 MiB): not configuration files?", shown, chain_text(ch, NULL, chain, sizeof chain),
                 ch->bytes, (unsigned)SG_CONFIG_MAX_CHAIN_BYTES);
        rc = SG_ERR_CONFIG;
    } else if (parse_yaml(text, len, shown, &doc) != SG_OK) {
        rc = SG_ERR_CONFIG;
    } else {
        /* the base first, wherever `base:` stands in the mapping */
        yaml_node_t *root = yaml_document_get_root_node(&doc);
        if (root && root->type == YAML_MAPPING_NODE) {
            for (yaml_node_pair_t *p = root->data.mapping.pairs.start;
                 p < root->data.mapping.pairs.top; p++) {
                yaml_node_t *kn = yaml_document_get_node(&doc, p->key);
                yaml_node_t *vn = yaml_document_get_node(&doc, p->value);
                if (kn && vn && kn->type == YAML_SCALAR_NODE &&
                    !strcmp((const char *)kn->data.scalar.value, "base")) {
                    rc = load_base(cfg, vn, ch);
                    break; /* a second base: is load_mapping's duplicate-key error */
                }
            }
        }
        if (rc == SG_OK) rc = load_root(cfg, &doc, shown, 1);
        yaml_document_delete(&doc);
    }
    ch->n--;
    free(text);
    return rc;
}

sg_status sg_config_load_file(sg_config *cfg, const char *path) {
    load_chain *ch = calloc(1, sizeof *ch);
    char *real = malloc(PATH_MAX);
    sg_status rc = SG_ERR_CONFIG;
    if (!ch || !real) {
        SG_ERROR("config error: %s: out of memory", path);
    } else if (!realpath(path, real)) {
        SG_ERROR("config error: %s: cannot open the configuration file: %s (check the path given to "
                 "--config)", path, strerror(errno));
    } else {
        rc = load_chain_file(cfg, path, real, ch);
    }
    free(real);
    free(ch);
    return rc;
}

sg_status sg_config_set(sg_config *cfg, const char *assignment) {
    char src[1400];
    snprintf(src, sizeof src, "--set %s", assignment);
    const char *eq = strchr(assignment, '=');
    if (!eq || eq == assignment)
        return cfg_error(src, NULL, NULL, "expects KEY=VALUE, e.g. --set train.lr=0.02");
    char key[512];
    size_t kl = (size_t)(eq - assignment);
    if (kl >= sizeof key) return cfg_error(src, NULL, NULL, "key too long");
    memcpy(key, assignment, kl);
    key[kl] = 0;
    const sg_config_key *k = sg_config_find_key(key);
    if (!k) {
        if (!strcmp(key, "base"))
            return cfg_error(src, NULL, NULL, "base: names the file a configuration file derives from "
                             "and can only be given in that file (--config FILE)");
        if (is_section(key))
            return cfg_error(src, NULL, key, "is a section: set its keys one by one (--set %s.KEY=VALUE)", key);
        return unknown_key(src, NULL, key);
    }
    const char *value = eq + 1;
    yaml_document_t doc;
    if (parse_yaml(value, strlen(value), src, &doc) != 0) return SG_ERR_CONFIG;
    yaml_node_t *root = yaml_document_get_root_node(&doc);
    sg_status rc;
    if (!root) {
        /* "--set key=" : an empty plain scalar */
        yaml_document_delete(&doc);
        if (!yaml_document_initialize(&doc, NULL, NULL, NULL, 1, 1)) return cfg_error(src, NULL, k->name, "out of memory");
        int id = yaml_document_add_scalar(&doc, NULL, (yaml_char_t *)"", 0, YAML_PLAIN_SCALAR_STYLE);
        root = yaml_document_get_node(&doc, id);
    }
    rc = set_from_node(cfg, k, &doc, root, src);
    if (rc == SG_OK) sg_config_origin_note(cfg, k, NULL, 0);
    yaml_document_delete(&doc);
    return rc;
}

void sg_config_defaults(sg_config *cfg) {
    memset(cfg, 0, sizeof *cfg);
    for (int i = 0; i < N_KEYS; i++) {
        char a[1200];
        snprintf(a, sizeof a, "%s=%s", g_keys[i].name, g_keys[i].def);
        SG_CHECK(sg_config_set(cfg, a) == 0, "schema default of %s (%s) does not parse: fix the table in core/config.c",
                 g_keys[i].name, g_keys[i].def);
    }
    sg_config_origin_clear(cfg); /* the sets above are the defaults, not --set */
}

/* ---------------------------------------------------------------- validation */

/* A validation error about `key`, naming where that key was set: the file
 * and line (possibly a base file), --set, or the default. */
static sg_status verr_at(const sg_config *c, const char *key, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static sg_status verr_at(const sg_config *c, const char *key, const char *fmt, ...) {
    char msg[2048], from[SG_STR + 32];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    const sg_config_key *k = sg_config_find_key(key);
    int kind = k ? sg_config_origin_describe(c, (int)(k - g_keys), from, sizeof from) : SG_ORIGIN_DEFAULT;
    if (kind == SG_ORIGIN_FILE || kind == SG_ORIGIN_SET)
        SG_ERROR("config error: %s: key '%s': %s", from, key, msg);
    else
        SG_ERROR("config error: key '%s' (%s value): %s", key,
                 kind == SG_ORIGIN_DEFAULT ? "default" : "unrecorded", msg);
    return SG_ERR_CONFIG;
}
/* Inside sg_config_validate `c` is the configuration: verr("key", ...) keeps
 * its short form while the message names where the key was set. */
#define verr(...) verr_at(c, __VA_ARGS__)

sg_status sg_config_validate(const sg_config *c) {
    const sg_train_cfg *t = &c->train;
    /* paths under run_dir (checkpoints/iter_N.safetensors.tmp, logs/...) are
     * built in SG_STR-sized buffers: leave room for the longest suffix */
    if (strlen(c->run_dir) > SG_STR - 96)
        return verr("run_dir", "is %zu characters long; at most %d are allowed so that the "
                    "checkpoint and log paths under it fit", strlen(c->run_dir), SG_STR - 96);
    if ((t->iters > 0) == (t->epochs > 0))
        return verr("train.iters", "exactly one of train.iters (%d) and train.epochs (%d) must be > 0: "
                    "set the other to 0", t->iters, t->epochs);
    if (t->iters > 0 && t->warmup_iters > t->iters)
        return verr("train.warmup_iters", "%d is more than train.iters (%d)", t->warmup_iters, t->iters);
    if (t->iters > 0 && t->warmup_iters >= t->iters && strcmp(t->warmup, "none") != 0 &&
        strcmp(t->warmup_mode, "sequential") == 0)
        return verr("train.warmup_iters", "%d warmup steps leave no step of train.iters (%d) for "
                    "the schedule under train.warmup_mode sequential", t->warmup_iters, t->iters);
    if (t->min_lr > t->lr)
        return verr("train.min_lr", "%g is above train.lr (%g)", t->min_lr, t->lr);
    if (t->ema_decay >= 1)
        return verr("train.ema_decay", "%g: must be below 1 (0 = EMA off; e.g. 0.999)",
                    t->ema_decay);
    if (!strcmp(t->lr_schedule, "step") && t->n_lr_steps == 0)
        return verr("train.lr_steps", "is empty but train.lr_schedule is step: give the "
                    "milestones in optimizer steps, e.g. [30000, 60000]");
    for (int i = 1; i < t->n_lr_steps; i++)
        if (t->lr_steps[i] <= t->lr_steps[i - 1])
            return verr("train.lr_steps", "entry %d (%d) is not above the one before it (%d): "
                        "give increasing milestones", i + 1, t->lr_steps[i], t->lr_steps[i - 1]);
    if (t->nesterov && (t->momentum <= 0 || t->dampening != 0))
        return verr("train.nesterov", "needs train.momentum > 0 and train.dampening 0 (as PyTorch's SGD)");
    const sg_model_cfg *m = &c->model;
    const sg_data_cfg *d = &c->data;
    if (d->ignore_index < m->num_classes)
        return verr("data.ignore_index", "%d is a class index (model.num_classes is %d): use 255",
                    d->ignore_index, m->num_classes);
    if (d->n_class_names != 0 && d->n_class_names != m->num_classes)
        return verr("data.class_names", "has %d names but model.num_classes is %d: give one per class "
                    "or none", d->n_class_names, m->num_classes);
    if (d->n_palette != 0 && d->n_palette != 3 * m->num_classes)
        return verr("data.palette", "has %d values but needs 3 (r,g,b) per class = %d, or none",
                    d->n_palette, 3 * m->num_classes);
    /* voc and ade20k masks hold class indices: a Cityscapes labelId map
     * (this key's default) would scramble them */
    if ((!strcmp(d->format, "voc") || !strcmp(d->format, "ade20k")) &&
        !strcmp(d->label_map, "cityscapes"))
        return verr("data.label_map", "cityscapes maps Cityscapes labelIds, but data.format %s "
                    "stores class indices: set data.label_map: none", d->format);
    if (!strcmp(d->label_map, "cityscapes") && !strcmp(d->reduce_zero_label, "true"))
        return verr("data.reduce_zero_label", "true does not combine with data.label_map: "
                    "cityscapes (labelId 0 is already 'unlabeled'): set one of them to none/false");
    if (t->n_class_weights != 0) {
        if (t->n_class_weights != m->num_classes)
            return verr("train.class_weights", "has %d weights but model.num_classes is %d: give "
                        "one per class, or [] for plain cross-entropy", t->n_class_weights,
                        m->num_classes);
        double wsum = 0;
        for (int i = 0; i < t->n_class_weights; i++) {
            if (!isfinite(t->class_weights[i]) || t->class_weights[i] < 0)
                return verr("train.class_weights", "entry %d (class %d) is %g: weights must be "
                            "finite and >= 0", i + 1, i, t->class_weights[i]);
            wsum += t->class_weights[i];
        }
        if (wsum <= 0)
            return verr("train.class_weights", "are all 0: no pixel would count; give some class "
                        "a positive weight, or [] for plain cross-entropy");
    }
    if (t->ohem_thresh >= 1)
        return verr("train.ohem_thresh", "%g: must be below 1 (a probability threshold; 0 = "
                    "OHEM off)", t->ohem_thresh);
    if (!strcmp(d->label_map, "cityscapes") && m->num_classes != 19)
        return verr("data.label_map", "cityscapes maps to 19 classes but model.num_classes is %d: set "
                    "data.label_map: none or model.num_classes: 19", m->num_classes);
    for (int i = 0; i < 2; i++)
        if (d->crop_size[i] < m->output_stride)
            return verr("data.crop_size", "%d is smaller than model.output_stride (%d): the feature map "
                        "would be empty", d->crop_size[i], m->output_stride);
    if (d->scale_range[0] > d->scale_range[1])
        return verr("data.scale_range", "min %g is above max %g", d->scale_range[0], d->scale_range[1]);
    if (!d->root[0]) return verr("data.root", "is empty: give the dataset directory");
    if (!d->train_split[0] || !d->val_split[0])
        return verr(!d->train_split[0] ? "data.train_split" : "data.val_split", "is empty");
    const sg_eval_cfg *e = &c->eval;
    if ((e->crop_size[0] == 0) != (e->crop_size[1] == 0))
        return verr("eval.crop_size", "give both height and width, or 0, 0 for whole images");
    if ((e->stride[0] == 0) != (e->stride[1] == 0))
        return verr("eval.stride", "give both values, or 0, 0 for the crop size");
    if (e->stride[0] && !e->crop_size[0])
        return verr("eval.stride", "is set but eval.crop_size is 0, 0 (whole images): set a crop size");
    for (int i = 0; i < 2; i++) {
        if (e->crop_size[i] && e->crop_size[i] < m->output_stride)
            return verr("eval.crop_size", "%d is smaller than model.output_stride (%d)", e->crop_size[i],
                        m->output_stride);
        if (e->stride[i] > e->crop_size[i])
            return verr("eval.stride", "%d is larger than the crop (%d): windows would skip pixels",
                        e->stride[i], e->crop_size[i]);
    }
    if (!c->run_dir[0]) return verr("run_dir", "is empty: give a directory (e.g. runs/NAME)");
    if (c->dist.first_bucket_mb > c->dist.bucket_mb)
        return verr("dist.first_bucket_mb", "%g is larger than dist.bucket_mb (%g)", c->dist.first_bucket_mb,
                    c->dist.bucket_mb);
    if (!strcmp(c->dist.backend, "nccl") && !strcmp(c->device, "cpu"))
        return verr("dist.backend", "nccl needs device: cuda (use gloo or auto on the CPU)");
    return SG_OK;
}
