/* core/config.h - the one typed configuration struct, and its loader.
 *
 * Every key lives in one schema table in config_schema.c (type, default, range,
 * one-line doc): defaults, YAML loading (libyaml), --set overrides,
 * validation, --help-config and --print-config all come from that table.
 * Strings and lists are fixed-size arrays, so the struct needs no freeing and
 * its layout never depends on build options.
 *
 * Adding a key: add the field here and one row to the table in
 * config_schema.c.
 */
#ifndef SG_CORE_CONFIG_H
#define SG_CORE_CONFIG_H

#include <stdio.h>

#include "core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define SG_STR 1024    /* max length of a string value (incl. NUL) */
#define SG_LIST_MAX 64 /* max entries of a list value */
#define SG_NAME 64     /* max length of a list-of-strings entry */

/* Limits on YAML input (files, --set values, a checkpoint's stored config),
 * checked while parsing, before libyaml builds a document: a configuration
 * is a few KiB and nests 2 levels. Each has its own error message. */
#define SG_CONFIG_MAX_BYTES (1u << 20) /* 1 MiB of YAML text */
#define SG_CONFIG_MAX_DEPTH 64         /* nested mappings/lists */
#define SG_CONFIG_MAX_NODES 65536      /* scalars + mappings + lists + aliases */
/* Errors reported in one pass: loading tries every key of a file (and every
 * --set), validation every rule, and each stops after this many. */
#define SG_CONFIG_MAX_ERRORS 20

/* Inheritance: a file's top-level `base: FILE` (relative to that file's
 * directory) is loaded first, then the file's own keys override it key by key
 * (lists are replaced whole). Bases may have bases; these bound a chain. */
#define SG_CONFIG_MAX_CHAIN 8                /* files in one chain (the file + 7 bases) */
#define SG_CONFIG_MAX_CHAIN_BYTES (1u << 20) /* all files of a chain together: 1 MiB */

/* Where each key's value came from, recorded by the loader for error messages
 * (validation names the file and line that set the offending key) and for
 * --print-config's annotations. Not part of the configuration: the written
 * YAML, the hash and sg_config_diff ignore it. Fixed layout: indexed by the
 * key's schema row (core/config_schema.h). */
#define SG_CONFIG_MAX_KEYS 256   /* schema rows (checked at compile time in config.c) */
#define SG_CONFIG_MAX_SOURCES 12 /* distinct files / text names one config records */
typedef struct sg_config_origin {
    char sources[SG_CONFIG_MAX_SOURCES][SG_STR]; /* file paths or names of texts */
    int n_sources;
    unsigned char
        source[SG_CONFIG_MAX_KEYS]; /* 0 default, 1 --set, 2+i sources[i], 255 unrecorded */
    int line[SG_CONFIG_MAX_KEYS];   /* 1-based line of the key, 0 = none */
} sg_config_origin;

typedef struct sg_model_cfg {
    char arch[SG_NAME];     /* deeplabv3|fcn (deeplabv3plus|lraspp: refused, not built) */
    char names[SG_NAME];    /* torchvision|mmseg: whose heads and state-dict names */
    char backbone[SG_NAME]; /* resnet18|34|50|101, resnet50v1c|resnet101v1c, mobilenet_v3_large */
    int output_stride;      /* 8|16 */
    int aspp_rates[SG_LIST_MAX]; /* default 12,24,36 */
    int n_aspp_rates;
    int num_classes;
    int aux_head; /* bool */
    double aspp_dropout;
    double aux_dropout;
    double head_dropout; /* fcn and mmseg heads: before the classifier */
    int base_width;      /* 64 = torchvision; smaller shrinks every layer */
    double width_mult;   /* mobilenet_v3_large: torchvision's width_mult (1.0) */
    int sync_bn;         /* bool: SyncBN across ranks (default on) */
    double bn_eps;
    double bn_momentum;
    char pretrained[SG_STR]; /* safetensors file, "" = none */
    int pretrained_strict;   /* bool */
} sg_model_cfg;

typedef struct sg_data_cfg {
    char format[SG_NAME]; /* cityscapes|list|voc|ade20k */
    char root[SG_STR];
    char train_split[SG_STR]; /* cityscapes: split dir; list: list file */
    char val_split[SG_STR];
    char label_map[SG_NAME]; /* cityscapes|none */
    int crop_size[2];        /* h, w */
    double scale_range[2];   /* random scale, relative to the image */
    int hflip;               /* bool */
    double cat_max_ratio;    /* mmseg RandomCrop's; 1 = off */
    int photometric;         /* bool: mmseg's PhotoMetricDistortion */
    double brightness_delta; /* photometric: PhotoMetricDistortion's arguments */
    double contrast_range[2];
    double saturation_range[2];
    int hue_delta;
    double mean[3];
    double std[3];
    int ignore_index;
    int workers;
    int prefetch;
    int shuffle;                  /* bool */
    char invalid_labels[SG_NAME]; /* error|ignore */
    char class_names[SG_LIST_MAX][SG_NAME];
    int n_class_names;
    int palette[SG_LIST_MAX * 3]; /* r,g,b per class (list datasets) */
    int n_palette;
    char reduce_zero_label[SG_NAME]; /* auto|true|false (auto: true for ade20k) */
    int max_image_pixels;            /* decoded image h*w limit (untrusted files) */
} sg_data_cfg;

typedef struct sg_train_cfg {
    int iters; /* 0 = use epochs */
    int epochs;
    int batch_size; /* per rank */
    int accum_steps;
    double lr;
    double momentum;
    double dampening;
    int nesterov; /* bool */
    double weight_decay;
    char optimizer[SG_NAME];   /* sgd|adamw */
    double betas[2];           /* adamw: beta1, beta2 */
    double eps;                /* adamw: added to the denominator */
    double clip_grad_norm;     /* max total L2 norm of the gradients; 0 = off */
    char lr_schedule[SG_NAME]; /* poly|constant|cosine|step */
    double poly_power;
    double min_lr;
    int warmup_iters;
    double warmup_ratio;       /* warmup starts at lr * ratio */
    char warmup[SG_NAME];      /* linear|constant|none */
    char warmup_mode[SG_NAME]; /* chained|sequential */
    int lr_steps[SG_LIST_MAX]; /* step: milestones in optimizer steps */
    int n_lr_steps;
    double lr_gamma;  /* step: factor at each milestone */
    double ema_decay; /* EMA of weights: 0 = off, else in (0, 1) */
    int ema_every;    /* EMA update every N optimizer steps */
    double head_lr_mult;
    char head_lr_prefixes[SG_LIST_MAX][SG_NAME];
    int n_head_lr_prefixes;
    double aux_weight;
    char freeze[SG_LIST_MAX][SG_NAME];
    int n_freeze;
    int freeze_bn_stats;       /* bool */
    int drop_last;             /* bool */
    int leftover_eval;         /* bool */
    char loss_norm[SG_NAME];   /* global|local */
    double class_weights[256]; /* weighted CE: one weight per class, n = 0: off */
    int n_class_weights;
    double ohem_thresh; /* OHEM on the main head: 0 = off, else in (0,1) */
    int ohem_min_kept;  /* OHEM: kept at least, per image (mmseg) */
    int log_every;
    double progress_s; /* off a terminal: a progress line every N s (0 = none) */
    int checkpoint_every;
    int keep_checkpoints;
    int eval_every;
    int tensorboard;         /* bool: rank 0 writes <run_dir>/tb/ events */
    char precision[SG_NAME]; /* fp32|bf16: convolutions (train, eval, predict, bench) */
} sg_train_cfg;

typedef struct sg_eval_cfg {
    int crop_size[2]; /* 0,0 = whole image */
    int stride[2];    /* sliding-window stride (0 = crop size) */
    int batch_size;
    int use_ema;       /* bool: evaluate a checkpoint's EMA weights (ema.*) */
    double scales[16]; /* test-time augmentation: image scales (default 1.0) */
    int n_scales;
    int flip; /* bool: also the horizontally flipped image */
} sg_eval_cfg;

typedef struct sg_dist_cfg {
    char backend[SG_NAME]; /* auto|gloo|nccl */
    int timeout_s;
    double bucket_mb;
    double first_bucket_mb;
} sg_dist_cfg;

typedef struct sg_cudnn_cfg {
    int benchmark;           /* bool */
    int deterministic;       /* bool */
    int allow_tf32;          /* bool: TF32 tensor cores for fp32 convolutions */
    char plan_cache[SG_STR]; /* plan cache file: auto (in run_dir), empty: memory only */
} sg_cudnn_cfg;

typedef struct sg_cpu_cfg {
    char layout[SG_NAME]; /* auto|nchw|nhwc: how the CPU backend stores activations */
} sg_cpu_cfg;

typedef struct sg_cuda_cfg {
    char layout[SG_NAME]; /* auto|nchw|nhwc: how the CUDA backend stores activations */
    int graphs;           /* bool: training passes recorded and replayed as CUDA graphs */
} sg_cuda_cfg;

typedef struct sg_config {
    char run_dir[SG_STR];
    int seed;
    char device[SG_NAME]; /* cpu|cuda|cuda:N */
    int threads;          /* CPU threads, 0 = all */
    sg_model_cfg model;
    sg_data_cfg data;
    sg_train_cfg train;
    sg_eval_cfg eval;
    sg_dist_cfg dist;
    sg_cudnn_cfg cudnn;
    sg_cpu_cfg cpu;
    sg_cuda_cfg cuda;
    sg_config_origin origin; /* where each value came from (not configuration) */
} sg_config;

/* Fills every field with its schema default (origins: all "default"). */
void sg_config_defaults(sg_config *cfg);

/* Loading never ends the process: every error is logged and returned.
 *
 * Loads a YAML file over the current values. Returns SG_OK, or SG_ERR_CONFIG
 * after logging an error naming file:line:column and the key (unknown key
 * with a "did you mean", wrong type, out of range, malformed YAML, duplicate
 * key, missing or unreadable file, a limit above exceeded).
 *
 * A top-level `base: FILE` (a string; relative to the directory of the file
 * that names it, or absolute) is loaded first, recursively, then this file's
 * keys override it; lists are replaced, not merged. A chain longer than
 * SG_CONFIG_MAX_CHAIN files, a cycle (the same real path twice) or files
 * totalling more than SG_CONFIG_MAX_CHAIN_BYTES is an error naming the chain;
 * an error inside a base names the base file, then the file that included it. */
sg_status sg_config_load_file(sg_config *cfg, const char *path);

/* Loads YAML text (name is used in messages). Same contract, except that a
 * text cannot name a base: `base:` is refused, so an untrusted text (the
 * configuration stored in a checkpoint) never makes the loader read a file. */
sg_status sg_config_load_string(sg_config *cfg, const char *yaml, const char *name);

/* Applies one "section.key=value" override with the same validation.
 * Returns SG_OK or SG_ERR_CONFIG (logged). */
sg_status sg_config_set(sg_config *cfg, const char *assignment);

/* Cross-key checks after everything is loaded (e.g. crop vs. output stride):
 * core's own rules only. Returns SG_OK or SG_ERR_CONFIG (logged). */
sg_status sg_config_validate(const sg_config *cfg);

/* Rules from the layers above core. Some cross-key rules need knowledge that
 * core cannot include: whether a dataset format's masks hold Cityscapes
 * labelIds or class indices is a row of data/formats.c. Such a layer states
 * its rules as a table of sg_config_rule (data/formats.h:
 * sg_format_config_rules), and whoever validates a configuration before
 * using it passes that table explicitly (the commands: cmd/ through
 * sg_cli_begin_with, train/from_checkpoint.c). Nothing is registered
 * globally: a caller that passes no rules gets core's, visibly at its call. */
typedef struct sg_config_rule {
    const char *owner;                        /* where the rule lives, for readers and messages */
    sg_status (*check)(const sg_config *cfg); /* SG_OK, or SG_ERR_CONFIG after sg_config_reject */
} sg_config_rule;

/* sg_config_validate, plus every rule of `rules` (a table ended by a row
 * whose check is NULL; NULL = none). The rules run where core checks the
 * data section (after data.class_names and data.palette, before the
 * training checks), so the first error reported stays the same as when the
 * format rules were core's. */
sg_status sg_config_validate_with(const sg_config *cfg, const sg_config_rule *rules);

/* Logs a validation error about `key` exactly as core's own: "config error:
 * FILE:LINE: key 'K': MESSAGE" (or "--set ..."), or "config error: key 'K'
 * (default value): MESSAGE"; returns SG_ERR_CONFIG. For sg_config_rule. */
sg_status sg_config_reject(const sg_config *cfg, const char *key, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Writes the resolved configuration as YAML that sg_config_load_file reads back. */
void sg_config_write(const sg_config *cfg, FILE *out);

/* The same YAML with a "# FILE:LINE" (or "# --set") comment after every
 * value that is not the default: what --print-config shows. */
void sg_config_write_origins(const sg_config *cfg, FILE *out);

/* Where key `key` got its value: "FILE:LINE", "--set", "default" (or
 * "unknown key"). Writes into buf[n] and returns buf. */
const char *sg_config_origin_text(const sg_config *cfg, const char *key, char *buf, size_t n);

/* Prints the schema: every key, type, default, range, doc. markdown != 0
 * prints a Markdown table (the reference in docs/CONFIG.md). */
void sg_config_print_schema(FILE *out, int markdown);

/* The keys starting with `prefix` ("model.") whose values differ between a
 * and b, as "key: <a_name> V, <b_name> W" joined by "; " into out[cap].
 * Returns how many differ. */
int sg_config_diff(const sg_config *a, const char *a_name, const sg_config *b, const char *b_name,
                   const char *prefix, char *out, size_t cap);

/* Stable 64-bit hash of the resolved configuration (ranks compare it). */
unsigned long long sg_config_hash(const sg_config *cfg);

#ifdef __cplusplus
}
#endif

#endif
