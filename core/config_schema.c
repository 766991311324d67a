/* core/config_schema.c - THE configuration schema table and its lookups.
 *
 * Owns the table: one row per sg_config field (key, type, offset, default,
 * range or allowed values, one-line doc), in the order config.yaml is
 * written. Everything that walks the schema reads it through the functions
 * here (core/config_schema.h): the loader (config.c), the origin record
 * (config_origin.c), the writer and --help-config (config_out.c), the
 * tests. This file calls nothing of theirs, so the schema sits below all of
 * them and the files that use it form no loop.
 */
#include "core/config_schema.h"

#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "core/util.h"

#define F(field) offsetof(sg_config, field)
#define FSIZE(field) sizeof(((sg_config *)0)->field)
#define NOLO (-1e300)
#define NOHI (1e300)
#define IMAX 2147483647.0

/* Row builders, one per type. */
#define K_INT(name, field, def, lo, hi, doc) \
    { name, SG_KT_INT, F(field), 0, 0, 0, 0, 0, def, lo, hi, NULL, doc }
#define K_CHOICE(name, field, def, allowed, doc) \
    { name, SG_KT_INT, F(field), 0, 0, 0, 0, 0, def, NOLO, NOHI, allowed, doc }
#define K_FLOAT(name, field, def, lo, hi, doc) \
    { name, SG_KT_FLOAT, F(field), 0, 0, 0, 0, 0, def, lo, hi, NULL, doc }
#define K_BOOL(name, field, def, doc) \
    { name, SG_KT_BOOL, F(field), 0, 0, 0, 0, 0, def, 0, 1, NULL, doc }
#define K_STR(name, field, def, doc) \
    { name, SG_KT_STR, F(field), 0, 0, 0, 0, FSIZE(field), def, NOLO, NOHI, NULL, doc }
#define K_ENUM(name, field, def, allowed, doc) \
    { name, SG_KT_ENUM, F(field), 0, 0, 0, 0, FSIZE(field), def, NOLO, NOHI, allowed, doc }
#define K_INTS_FIXED(name, field, def, lo, hi, doc)                                               \
    {                                                                                             \
        name, SG_KT_INT_LIST, F(field), 0, (int)(FSIZE(field) / sizeof(int)),                     \
            (int)(FSIZE(field) / sizeof(int)), (int)(FSIZE(field) / sizeof(int)), 0, def, lo, hi, \
            NULL, doc                                                                             \
    }
#define K_FLOATS_FIXED(name, field, def, lo, hi, doc)                                           \
    {                                                                                           \
        name, SG_KT_FLOAT_LIST, F(field), 0, (int)(FSIZE(field) / sizeof(double)),              \
            (int)(FSIZE(field) / sizeof(double)), (int)(FSIZE(field) / sizeof(double)), 0, def, \
            lo, hi, NULL, doc                                                                   \
    }
#define K_INTS(name, field, nfield, minlen, def, lo, hi, doc)                                    \
    {                                                                                            \
        name, SG_KT_INT_LIST, F(field), F(nfield), 0, (int)(FSIZE(field) / sizeof(int)), minlen, \
            0, def, lo, hi, NULL, doc                                                            \
    }
#define K_FLOATS(name, field, nfield, minlen, def, lo, hi, doc)                               \
    {                                                                                         \
        name, SG_KT_FLOAT_LIST, F(field), F(nfield), 0, (int)(FSIZE(field) / sizeof(double)), \
            minlen, 0, def, lo, hi, NULL, doc                                                 \
    }
#define K_STRS(name, field, nfield, def, doc)                                                   \
    {                                                                                           \
        name, SG_KT_STR_LIST, F(field), F(nfield), 0, (int)(FSIZE(field) / FSIZE(field[0])), 0, \
            FSIZE(field[0]), def, NOLO, NOHI, NULL, doc                                         \
    }

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
    K_INT(
        "threads", threads, "0", 0, 4096,
        "CPU threads per process, 0 = the CPUs it may use (affinity mask, cgroup quota) divided among the node's ranks; OMP_NUM_THREADS overrides 0"),

    K_ENUM("model.arch", model.arch, "deeplabv3", "deeplabv3|fcn|deeplabv3plus|lraspp",
           "decode head: DeepLabV3 (ASPP), FCN, DeepLabV3+ (mmseg's "
           "DepthwiseSeparableASPPHead: model.names mmseg, a ResNet-50/101 backbone) or LR-ASPP "
           "(mobilenet_v3_large only)"),
    K_ENUM("model.names", model.names, "torchvision", "torchvision|mmseg",
           "whose heads and state-dict names: torchvision's DeepLabHead/FCNHead or "
           "mmsegmentation's ASPPHead/FCNHead/DepthwiseSeparableASPPHead (ConvModule names; "
           "required for the v1c backbones and deeplabv3plus)"),
    K_ENUM("model.backbone", model.backbone, "resnet50",
           "resnet18|resnet34|resnet50|resnet101|resnet50v1c|resnet101v1c|mobilenet_v3_large",
           "encoder: torchvision's ResNet, mmseg's ResNetV1c (deep 3x3 stem), or torchvision's "
           "MobileNetV3-Large as its segmentation models dilate it (output_stride 16)"),
    K_CHOICE("model.output_stride", model.output_stride, "8", "8|16",
             "encoder output stride: 8 dilates layer3+layer4, 16 dilates layer4"),
    K_INTS("model.aspp_rates", model.aspp_rates, model.n_aspp_rates, 1, "[12, 24, 36]", 1, 1024,
           "dilation rates of the ASPP 3x3 branches"),
    K_INT("model.num_classes", model.num_classes, "19", 1, 254,
          "output classes (labels are uint8; 255 is ignore)"),
    K_BOOL("model.aux_head", model.aux_head, "true",
           "FCN auxiliary head on layer3 (training loss only)"),
    K_FLOAT("model.aspp_dropout", model.aspp_dropout, "0.5", 0, 0.99,
            "dropout after the ASPP projection (torchvision's DeepLabHead)"),
    K_FLOAT("model.aux_dropout", model.aux_dropout, "0.1", 0, 0.99,
            "dropout in the auxiliary head"),
    K_FLOAT("model.head_dropout", model.head_dropout, "0.1", 0, 0.99,
            "dropout before the classifier of the FCN head and of mmseg's heads (Dropout2d)"),
    K_INT("model.base_width", model.base_width, "64", 1, 1024,
          "encoder base width (64 = torchvision); smaller values shrink every layer"),
    K_FLOAT("model.width_mult", model.width_mult, "1.0", 0.05, 4,
            "mobilenet_v3_large: torchvision's width_mult (channels rounded to multiples of 8); "
            "its heads follow model.base_width (DeepLabHead 4x, LR-ASPP 2x)"),
    K_BOOL("model.sync_bn", model.sync_bn, "true",
           "synchronise batch-norm statistics across ranks (SyncBN)"),
    K_FLOAT("model.bn_eps", model.bn_eps, "1e-05", 1e-12, 1, "batch-norm epsilon"),
    K_FLOAT("model.bn_momentum", model.bn_momentum, "0.1", 0, 1,
            "batch-norm running-statistics momentum (PyTorch convention)"),
    K_STR(
        "model.pretrained", model.pretrained, "",
        "safetensors file to initialise from (segtrain or torchvision names), empty = random init"),
    K_BOOL(
        "model.pretrained_strict", model.pretrained_strict, "false",
        "any mismatch with model.pretrained (missing, unexpected or other-shape tensors) is an error; "
        "false: reported, other-shape heads skipped with a warning"),

    /* the rows of data/formats.c, in order: core cannot include data/, so
     * the names are spelled here and tests/data/test_formats.c compares */
    K_ENUM("data.format", data.format, "cityscapes", "cityscapes|list|voc|ade20k",
           "dataset layout: Cityscapes tree, list files of 'image label' lines, Pascal VOC 2012 "
           "(VOCdevkit/VOC2012), or ADE20K (ADEChallengeData2016)"),
    K_STR("data.root", data.root, "data/cityscapes", "dataset root directory"),
    K_STR("data.train_split", data.train_split, "auto",
          "training split: a split name, or auto = the format's own (cityscapes train, voc "
          "train+aug, ade20k training); for list a list file relative to root"),
    K_STR("data.val_split", data.val_split, "auto",
          "validation split (as train_split; auto = cityscapes val, voc val, ade20k validation)"),
    K_ENUM("data.label_map", data.label_map, "auto", "auto|cityscapes|none",
           "label mapping: Cityscapes labelIds -> 19 trainIds, or labels used as stored; auto = "
           "cityscapes for data.format cityscapes, none otherwise"),
    K_INTS_FIXED("data.crop_size", data.crop_size, "[512, 1024]", 1, 16384,
                 "training crop height, width (padded with ignore when the image is smaller)"),
    K_FLOATS_FIXED("data.scale_range", data.scale_range, "[0.5, 2.0]", 0.01, 100,
                   "random resize ratio min, max, relative to the image"),
    K_BOOL("data.hflip", data.hflip, "true", "random horizontal flip with probability 0.5"),
    K_FLOAT("data.cat_max_ratio", data.cat_max_ratio, "1.0", 0.01, 1,
            "mmsegmentation RandomCrop's cat_max_ratio: a crop whose largest class covers this "
            "fraction or more of its labelled pixels (or that holds one class) is drawn again, up "
            "to 10 times; 1 = off"),
    K_BOOL("data.photometric", data.photometric, "false",
           "mmsegmentation's PhotoMetricDistortion after the flip: random brightness, contrast, "
           "saturation and hue (OpenCV HSV), each with probability 0.5"),
    K_FLOAT("data.brightness_delta", data.brightness_delta, "32", 0, 255,
            "photometric: brightness offset drawn uniformly in [-delta, delta] (mmseg's "
            "PhotoMetricDistortion argument)"),
    K_FLOATS_FIXED("data.contrast_range", data.contrast_range, "[0.5, 1.5]", 0, 100,
                   "photometric: contrast factor min, max"),
    K_FLOATS_FIXED("data.saturation_range", data.saturation_range, "[0.5, 1.5]", 0, 100,
                   "photometric: saturation factor min, max"),
    K_INT("data.hue_delta", data.hue_delta, "18", 0, 180,
          "photometric: hue shift drawn in [-delta, delta - 1] (OpenCV hue units, 0..179)"),
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
            "weight decay: sgd adds wd*p to the gradient (PyTorch SGD), adamw decays p by "
            "lr*wd before the update (PyTorch AdamW, whose own default is 0.01)"),
    K_ENUM("train.optimizer", train.optimizer, "sgd", "sgd|adamw",
           "sgd: torch.optim.SGD (train.momentum, dampening, nesterov); adamw: "
           "torch.optim.AdamW (train.betas, train.eps); both with weight_decay, head_lr_mult "
           "and freeze"),
    K_FLOATS_FIXED("train.betas", train.betas, "[0.9, 0.999]", 0, 1,
                   "adamw: [beta1, beta2], each in [0, 1) (torch AdamW betas)"),
    K_FLOAT("train.eps", train.eps, "1e-08", 0, 1,
            "adamw: added to sqrt of the bias-corrected second moment (torch AdamW eps)"),
    K_FLOAT("train.clip_grad_norm", train.clip_grad_norm, "0.0", 0, 1e9,
            "clip the gradients to this total L2 norm before each optimizer step, after the "
            "ranks' all-reduce (torch.nn.utils.clip_grad_norm_, mmseg's clip_grad max_norm); "
            "0 = off"),
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
    K_ENUM(
        "train.warmup_mode", train.warmup_mode, "chained", "chained|sequential",
        "chained: the warmup factor multiplies the schedule from step 0 (torch ChainedScheduler, "
        "mmcv); sequential: the schedule starts after the warmup, over the remaining steps "
        "(torch SequentialLR, torchvision's reference script)"),
    K_INT("train.warmup_iters", train.warmup_iters, "0", 0, 1e9, "warmup iterations (0 = none)"),
    K_FLOAT("train.warmup_ratio", train.warmup_ratio, "0.01", 0, 1,
            "warmup factor: linear starts at lr * warmup_ratio, constant stays there"),
    K_FLOAT("train.ema_decay", train.ema_decay, "0.0", 0, 1,
            "EMA of the weights and BN buffers: ema = decay * ema + (1 - decay) * weights after "
            "every ema_every optimizer steps (timm ModelEmaV2); 0 = off, else below 1"),
    K_INT("train.ema_every", train.ema_every, "1", 1, 1e9, "EMA update every N optimizer steps"),
    K_FLOAT("train.head_lr_mult", train.head_lr_mult, "1.0", 0, 1000,
            "learning-rate multiplier for parameters matching head_lr_prefixes"),
    K_STRS("train.head_lr_prefixes", train.head_lr_prefixes, train.n_head_lr_prefixes,
           "[\"aux_head.\"]",
           "parameter-name prefixes that get head_lr_mult (with head_lr_mult other than 1 each "
           "must match a parameter)"),
    K_FLOAT("train.aux_weight", train.aux_weight, "0.5", 0, 100,
            "weight of the auxiliary head's loss (torchvision 0.5, mmseg 0.4)"),
    K_STRS("train.freeze", train.freeze, train.n_freeze, "[]",
           "parameter-name prefixes kept fixed (e.g. encoder.conv1.)"),
    K_BOOL(
        "train.freeze_bn_stats", train.freeze_bn_stats, "false",
        "BN layers under train.freeze prefixes (all BN layers when train.freeze is empty) use and keep their running statistics"),
    K_BOOL("train.drop_last", train.drop_last, "true",
           "drop the last incomplete global batch of an epoch"),
    K_BOOL("train.leftover_eval", train.leftover_eval, "true",
           "evaluation: samples that do not divide among ranks are evaluated once, not padded"),
    K_ENUM("train.loss_norm", train.loss_norm, "global", "global|local",
           "global: mean over all ranks' valid pixels; local: each rank's mean, averaged (DDP)"),
    K_FLOATS("train.class_weights", train.class_weights, train.n_class_weights, 0, "[]", 0, 1e6,
             "weighted cross-entropy (main and aux heads): one weight per class, "
             "normalised as PyTorch's cross_entropy(weight=...); [] = unweighted"),
    K_FLOAT("train.ohem_thresh", train.ohem_thresh, "0.0", 0, 1,
            "OHEM on the main head (mmseg's OHEMPixelSampler): train on pixels whose "
            "probability of the true class is below this; 0 = off"),
    K_INT("train.ohem_min_kept", train.ohem_min_kept, "100000", 0, IMAX,
          "OHEM: keep at least this many of the hardest pixels per image (mmseg multiplies "
          "min_kept by the images of a forward)"),
    K_INT("train.log_every", train.log_every, "10", 1, 1e9,
          "log training metrics every N iterations"),
    K_FLOAT("train.progress_s", train.progress_s, "30", 0, 86400,
            "progress line (steps, rate, ETA, loss) when stderr is not a terminal: every N "
            "seconds, whatever log_every is (0 = none); on a terminal one line is redrawn "
            "live"),
    K_INT("train.checkpoint_every", train.checkpoint_every, "1000", 0, 1e9,
          "write a checkpoint every N iterations (0 = only at the end)"),
    K_INT("train.keep_checkpoints", train.keep_checkpoints, "3", 0, 1e6,
          "periodic checkpoints kept (0 = keep all)"),
    K_INT("train.eval_every", train.eval_every, "0", 0, 1e9,
          "evaluate on val_split every N iterations (0 = only at the end)"),
    K_BOOL(
        "train.tensorboard", train.tensorboard, "true",
        "rank 0 writes TensorBoard event files to <run_dir>/tb/ (losses, lr, img/s, val mIoU, per-class IoU)"),
    K_ENUM("train.precision", train.precision, "fp32", "fp32|bf16",
           "convolutions in train, eval, predict and bench: bf16 = bfloat16 inputs and weights, "
           "fp32 accumulation, bf16 outputs, and each residual block's output rounded to bf16 "
           "as under AMP (BN statistics, loss, gradients, optimizer, fp32 master weights and "
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
    K_STR("cudnn.plan_cache", cudnn.plan_cache, "auto",
          "file keeping the chosen convolution algorithms per geometry, GPU and cuDNN version, so "
          "a resumed or repeated run does not search again: auto = <run_dir>/cudnn_plans.bin, "
          "\"\" = in memory only"),

    K_ENUM(
        "cpu.layout", cpu.layout, "auto", "auto|nchw|nhwc",
        "how the CPU backend stores activations: nchw, nhwc (channels last, oneDNN's convolutions "
        "read it without reordering), auto = the one measured faster for train.precision on "
        "this kind of CPU; results are the same but for summation order (convolutions, BN statistics)"),
    K_ENUM("cuda.layout", cuda.layout, "auto", "auto|nchw|nhwc",
           "how the CUDA backend stores activations: nchw, nhwc (channels last: cuDNN's "
           "tensor-core convolutions read and write it without transposes), auto = nhwc under "
           "train.precision bf16, nchw under fp32; results are the same but for convolution "
           "summation order"),
    K_BOOL("cuda.graphs", cuda.graphs, "false",
           "record the training forward and backward as CUDA graphs once per shape and replay "
           "them (one launch instead of ~1500 per pass; the same results); passes with "
           "profiling, Dropout2d, SyncBN across ranks (forward) or DDP (backward) run as "
           "before"),
};
#define N_KEYS ((int)(sizeof g_keys / sizeof g_keys[0]))
_Static_assert(
    sizeof g_keys / sizeof g_keys[0] <= SG_CONFIG_MAX_KEYS,
    "more schema rows than sg_config_origin records: raise SG_CONFIG_MAX_KEYS in config.h");

int sg_config_n_keys(void) { return N_KEYS; }
const sg_config_key *sg_config_key_at(int i) { return (i >= 0 && i < N_KEYS) ? &g_keys[i] : NULL; }

int sg_config_key_index(const sg_config_key *k) {
    /* compare addresses one by one: subtracting a pointer that is not into
     * g_keys would be undefined */
    for (int i = 0; i < N_KEYS; i++)
        if (k == &g_keys[i]) return i;
    return -1;
}

const sg_config_key *sg_config_find_key(const char *name) {
    for (int i = 0; i < N_KEYS; i++)
        if (strcmp(g_keys[i].name, name) == 0) return &g_keys[i];
    return NULL;
}

void sg_config_type_name(const sg_config_key *k, char *buf, size_t n) {
    static const char *names[] = {"int",  "float", "bool",  "string",
                                  "enum", "int",   "float", "string"};
    if (k->type == SG_KT_INT_LIST || k->type == SG_KT_FLOAT_LIST || k->type == SG_KT_STR_LIST) {
        if (k->fixed_len) snprintf(buf, n, "%s[%d]", names[k->type], k->fixed_len);
        else snprintf(buf, n, "%s list", names[k->type]);
    } else {
        snprintf(buf, n, "%s", names[k->type]);
    }
}

int sg_config_is_section(const char *name) {
    size_t n = strlen(name);
    for (int i = 0; i < N_KEYS; i++)
        if (strncmp(g_keys[i].name, name, n) == 0 && g_keys[i].name[n] == '.') return 1;
    return 0;
}

/* ---------------------------------------------------------------- suggestions */

static const char *leaf(const char *name) {
    const char *d = strrchr(name, '.');
    return d ? d + 1 : name;
}

const char *sg_config_suggest(const char *name) {
    const char *best = NULL;
    int best_d = 1 << 30;
    for (int i = 0; i < N_KEYS; i++) {
        int d = sg_edit_distance(name, g_keys[i].name);
        /* the right key in the wrong section ("lr" at top level) is close too */
        int dl = sg_edit_distance(leaf(name), leaf(g_keys[i].name));
        if (dl == 0 && d > 1) d = 1;
        /* a truncated name ("data.crop") */
        size_t ln = strlen(name);
        if (ln >= 4 && !strncmp(g_keys[i].name, name, ln) && d > 2) d = 2;
        if (d < best_d) best_d = d, best = g_keys[i].name;
    }
    /* section names too ("modle:" -> model) */
    static const char *sections[] = {"model", "data", "train", "eval", "dist", "cudnn"};
    for (size_t i = 0; i < sizeof sections / sizeof sections[0]; i++) {
        int d = sg_edit_distance(name, sections[i]);
        if (d < best_d) best_d = d, best = sections[i];
    }
    int len = (int)strlen(name);
    int limit = len / 3 > 2 ? len / 3 : 2;
    return best_d <= limit ? best : NULL;
}

/* mmsegmentation's config names (and a few of torchvision's reference
 * script's arguments), by their last part: they are not typos, so the edit
 * distance alone would point elsewhere ("split" -> data.hflip). */
static const struct {
    const char *leaf, *hint;
} g_foreign[] = {
    {"type", "data.format (cityscapes, voc, ade20k or list) picks the dataset; the model is "
             "always DeepLabV3 (model.backbone picks the ResNet)"},
    {"dataset_type", "data.format (cityscapes, voc, ade20k or list)"},
    {"data_root", "data.root"},
    {"split", "data.train_split and data.val_split (a split name, or for data.format list a "
              "list file)"},
    {"img_dir", "data.train_split and data.val_split: data.format knows where the images of a "
                "split are"},
    {"ann_dir", "data.train_split and data.val_split: data.format knows where the masks of a "
                "split are"},
    {"optimizer", "train.optimizer, train.lr, train.momentum, train.betas, train.weight_decay"},
    {"optimizer_config", "train.accum_steps"},
    {"optim_wrapper", "train.optimizer (sgd or adamw) and train.clip_grad_norm"},
    {"clip_grad", "train.clip_grad_norm (the max_norm)"},
    {"max_norm", "train.clip_grad_norm"},
    {"lr_config", "train.lr_schedule, train.poly_power, train.min_lr, train.warmup*"},
    {"param_scheduler", "train.lr_schedule, train.warmup, train.warmup_iters"},
    {"runner", "train.iters (or train.epochs)"},
    {"train_cfg", "train.iters (or train.epochs), train.eval_every"},
    {"max_iters", "train.iters"},
    {"max_epochs", "train.epochs"},
    {"evaluation", "train.eval_every"},
    {"checkpoint_config", "train.checkpoint_every, train.keep_checkpoints"},
    {"work_dir", "run_dir"},
    {"load_from", "model.pretrained"},
    {"resume_from", "the command line option --resume PATH|auto"},
    {"samples_per_gpu", "train.batch_size (images per rank)"},
    {"workers_per_gpu", "data.workers"},
    {"norm_cfg", "model.sync_bn"},
    {"pipeline", "data.crop_size, data.scale_range, data.cat_max_ratio, data.hflip, "
                 "data.photometric"},
    {"img_scale", "data.scale_range (relative to the image) and data.crop_size"},
    {"img_norm_cfg", "data.mean and data.std (on [0,1] pixels)"},
};

const char *sg_config_foreign_hint(const char *name) {
    const char *l = leaf(name);
    for (size_t i = 0; i < sizeof g_foreign / sizeof g_foreign[0]; i++)
        if (!strcmp(l, g_foreign[i].leaf)) return g_foreign[i].hint;
    return NULL;
}

int sg_config_allowed_match(const char *allowed, const char *v) {
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
