/* io/pth.h - reading PyTorch checkpoint files (torch.save) natively,
 * without Python, for `segtrain convert`.
 *
 * Containers: the zip format of torch >= 1.6 (<name>/data.pkl and one
 * <name>/data/<key> entry per storage; read with libzip) and the legacy
 * format before it (magic, protocol and system-info pickles, the object
 * pickle, the storage-key list, then each storage as an int64 element count
 * and its bytes). A very old tar checkpoint is refused with a message saying
 * how to re-save it.
 *
 * Contents: the object pickle goes through a restricted unpickler
 * (io/pth_pickle.h) that accepts only what a state_dict needs and never
 * runs code. The state_dict is the top-level dict when it holds tensors, else
 * the dict under "state_dict", "model", "model_state_dict" or "module"
 * (training checkpoints); other entries of a wrapper (epoch, optimizer, ...)
 * are parsed and ignored, as are non-tensor entries of the state_dict.
 * Tensor names stay as in the file (torchvision's names), in file order.
 *
 * Tensors may be strided, offset into a shared storage or expanded: reading
 * one copies it contiguous. Element types: float32/64, float16, bfloat16 are
 * read as float32 (io/safetensors.h stores F32 and I64 only); int64/32/
 * 16/8, uint8 and bool as int64. Little-endian files only.
 *
 * Untrusted input: sizes and counts are limited (pickle 64 MiB, 1M storages,
 * 2^40 elements per tensor, 16 GiB of storages, names of 1..1000 bytes
 * without control characters, rank <= 8), every tensor is checked to lie
 * inside its storage, every storage's size against its zip entry or the
 * file; errors name the file and what is wrong. Functions return NULL or
 * SG_ERR_RUNTIME with the message in err[errlen] (logged when err is NULL).
 */
#ifndef SG_IO_PTH_H
#define SG_IO_PTH_H

#include <stddef.h>
#include <stdint.h>

#include "core/status.h"
#include "io/safetensors.h"

#ifdef __cplusplus
extern "C" {
#endif

#define SG_PTH_MAX_DIMS 8

typedef struct sg_pth_tensor {
    const char *name;
    const char *src_type; /* the storage type in the file, e.g. "HalfStorage" */
    sg_st_dtype dtype;    /* what sg_pth_read gives: F32 or I64 */
    int ndim;             /* 0 = scalar */
    int64_t shape[SG_PTH_MAX_DIMS];
    size_t count; /* elements */
} sg_pth_tensor;

typedef struct sg_pth sg_pth;

/* Reads a checkpoint file (mapped, not copied). */
sg_pth *sg_pth_open(const char *path, char *err, size_t errlen);
/* The same from memory (buf must outlive the result); `name` in messages. */
sg_pth *sg_pth_load_mem(const void *buf, size_t len, const char *name, char *err, size_t errlen);
void sg_pth_close(sg_pth *p); /* NULL-safe */

int sg_pth_count(const sg_pth *p);
const sg_pth_tensor *sg_pth_get(const sg_pth *p, int i);
/* "zip" or "legacy"; and where the state_dict was: "" (top level), "model", ... */
const char *sg_pth_format(const sg_pth *p);
const char *sg_pth_wrapper_key(const sg_pth *p);
/* Entries of the state_dict that are not tensors (skipped). */
int sg_pth_skipped(const sg_pth *p);

/* Copies tensor i contiguous into dst (count floats for F32, int64 for I64). */
void sg_pth_read(const sg_pth *p, int i, void *dst);

/* Writes every tensor to a safetensors file (metadata: format pt, source =
 * `source`, producer segtrain convert). SG_OK; SG_ERR_CONFIG after logging
 * the tensor and element when a floating tensor holds a NaN or an Inf
 * (nothing is written); SG_ERR_RUNTIME after logging a write failure. */
sg_status sg_pth_write_safetensors(const sg_pth *p, const char *out_path, const char *source);

#ifdef __cplusplus
}
#endif

#endif
