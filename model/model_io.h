/* model/model_io.h - model weights <-> safetensors.
 *
 * Loads registry tensors by name from a safetensors file (pretrained
 * weights, checkpoints), accepting segtrain names (encoder./decoder./
 * aux_head.), torchvision names (backbone./classifier./aux_classifier.) and
 * mmseg names (backbone./decode_head./auxiliary_head.), optionally under
 * "module." as DDP saves them, and saves the registry in
 * state-dict order (num_batches_tracked as I64) with segtrain or torchvision
 * names. The model writes its tensors into a caller's sg_st_writer so the
 * trainer can put optimizer state in the same checkpoint file.
 * Errors (core/status.h): weights that do not fit the model are the user's
 * choice of file, SG_ERR_CONFIG; writing failures SG_ERR_RUNTIME.
 */
#ifndef SG_MODEL_MODEL_IO_H
#define SG_MODEL_MODEL_IO_H

#include <stdint.h>

#include "io/safetensors.h"
#include "model/model.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct sg_load_report {
    int loaded;     /* registry entries filled from the file */
    int missing;    /* registry entries the file lacks */
    int skipped;    /* file tensors with a registry name but another shape/dtype */
    int unexpected; /* file tensors matching no registry name */
} sg_load_report;

/* Maps a file tensor name to a segtrain registry name: strips "module.",
 * renames backbone./classifier./aux_classifier., puts a plain ImageNet
 * ResNet's names and a MobileNetV3's features.* under encoder. Writes into
 * out (cap bytes);
 * returns SG_OK, or SG_ERR_RUNTIME if it does not fit (not logged: the
 * caller names the file). */
sg_status sg_model_canonical_name(const char *file_name, char *out, size_t cap);
/* segtrain name -> torchvision name (encoder. -> backbone., ...). Same contract. */
sg_status sg_model_torchvision_name(const char *name, char *out, size_t cap);
/* segtrain name -> the name of the model's anchor system: torchvision's as
 * above, or mmseg's (encoder. -> backbone., decoder. -> decode_head.,
 * aux_head. -> auxiliary_head.). Same contract. */
sg_status sg_model_anchor_name(const char *name, sg_names names, char *out, size_t cap);

/* Loads every registry entry found in the open file under its name (after
 * sg_model_canonical_name; `prefix`, if not NULL/"", is stripped from file
 * names first and file tensors without it are ignored). Logs each missing and
 * skipped key (up to a limit) and a summary line. strict: any missing,
 * skipped or unexpected key is an error. Returns SG_OK, or SG_ERR_CONFIG
 * after logging. */
sg_status sg_model_load_file(sg_model *m, const sg_st_file *f, const char *prefix, int strict,
                             sg_load_report *rep);
/* Opens `path` and loads from it (as above, no prefix; an unreadable file is
 * SG_ERR_CONFIG too, logged by sg_st_open). */
sg_status sg_model_load(sg_model *m, const char *path, int strict, sg_load_report *rep);

/* What a model of options o holds, computed from the options alone (no
 * registry, no allocation): the checks that compare an untrusted file with
 * the model its config describes run this before building anything. Equal
 * to sg_model_num_params, sg_model_param_count(m, 0) + sg_model_buffer_count
 * and the number of BN layers of the built model (tests/model checks it
 * for every backbone). The options must be valid (sg_model_opts_from_config). */
typedef struct sg_model_size {
    int tensors; /* state-dict entries */
    size_t f32;  /* float elements: parameters and running statistics */
    size_t i64;  /* num_batches_tracked entries (one int64 each) */
} sg_model_size;
void sg_model_expected_size(const sg_model_opts *o, sg_model_size *out);

/* num_batches_tracked values a file may hold: 0..2^62 (a counter that the
 * next training step increments must not overflow int64). */
#define SG_MAX_NUM_BATCHES_TRACKED (INT64_C(1) << 62)

/* Adds every registry entry to w in registry order, named prefix + name
 * (segtrain) or, anchor_names, prefix + the name in the model's model.names
 * system (sg_model_anchor_name). Downloads from the device.
 * Returns SG_OK, or SG_ERR_RUNTIME after logging the tensor. */
sg_status sg_model_add_to_writer(sg_model *m, sg_st_writer *w, const char *prefix,
                                 int anchor_names);
/* Saves the registry to `path` (metadata: format=segtrain, names, arch,
 * backbone, num_classes, ...). Returns SG_OK, or SG_ERR_RUNTIME after logging. */
sg_status sg_model_save(sg_model *m, const char *path, int anchor_names);

#ifdef __cplusplus
}
#endif

#endif
