/* io/safetensors.h - reading and writing .safetensors files.
 *
 * Format (huggingface safetensors): 8-byte little-endian header length N,
 * N bytes of JSON {"name": {"dtype": "F32", "shape": [..],
 * "data_offsets": [begin, end]}, ..., "__metadata__": {"k": "v"}}, then the
 * data (offsets relative to the end of the header). The writer pads the
 * header with spaces to a multiple of 8 bytes, as the spec allows.
 *
 * Owns: the reader (the file is mmap'ed read-only; every tensor is checked:
 * dtype F32 or I64 only, shape product x element size == byte length, ranges
 * inside the file and non-overlapping; names and metadata keys unique) and
 * the writer (tensors added from host memory, written to a path atomically
 * via a temporary file + rename).
 * Files are untrusted input: the header is at most SG_ST_MAX_HEADER bytes
 * and parses in time linear in its length (names are looked up in a hash
 * index); nothing is allocated in proportion to a declared shape.
 * Errors are logged naming the file and tensor, and the call returns NULL
 * or SG_ERR_RUNTIME (core/status.h): a corrupt or truncated file never
 * crashes. Only running out of host memory is fatal.
 */
#ifndef SG_IO_SAFETENSORS_H
#define SG_IO_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define SG_ST_MAX_DIMS 8
/* The JSON header's length limit: 16 MiB. segtrain's largest checkpoint
 * (resnet101 + momentum, ~1,400 tensors, its config) has a header of about
 * 200 KB; huggingface's own reader allows 100 MB. */
#define SG_ST_MAX_HEADER (16u << 20)

typedef enum { SG_ST_F32 = 0, SG_ST_I64 = 1 } sg_st_dtype;

typedef struct sg_st_tensor {
    const char *name;
    sg_st_dtype dtype;
    int ndim; /* 0 = scalar */
    int64_t shape[SG_ST_MAX_DIMS];
    size_t count; /* elements */
    size_t nbytes;
    /* Pointer into the mapped file; may be unaligned: use memcpy or
     * sg_st_read_f32/sg_st_read_i64. */
    const void *data;
    size_t offset; /* byte offset of data from the data section */
} sg_st_tensor;

typedef struct sg_st_file sg_st_file;

/* Opens and validates a file; NULL after logging an error naming the file
 * (and the tensor/key where one is at fault). */
sg_st_file *sg_st_open(const char *path);
/* The same without logging: NULL with the reason (the cause: cannot open,
 * header too long, corrupt header at byte N, overlapping tensors, ...) in
 * why[cap]. */
sg_st_file *sg_st_open_why(const char *path, char *why, size_t cap);
/* Parses a safetensors file held in memory (name is used in messages); the
 * buffer must outlive the returned file. NULL with the reason in why[cap]
 * (nothing logged). For tests and fuzzing. */
sg_st_file *sg_st_open_memory(const void *data, size_t size, const char *name, char *why,
                              size_t cap);
void sg_st_close(sg_st_file *f);
const char *sg_st_path(const sg_st_file *f);
int sg_st_count(const sg_st_file *f);
const sg_st_tensor *sg_st_get(const sg_st_file *f, int i); /* file order */
const sg_st_tensor *sg_st_find(const sg_st_file *f, const char *name);
/* __metadata__ value for key, NULL if absent. */
const char *sg_st_meta(const sg_st_file *f, const char *key);
int sg_st_meta_count(const sg_st_file *f);
void sg_st_meta_get(const sg_st_file *f, int i, const char **key, const char **value);

/* Opening refuses (naming the file, the tensor and the element) an F32
 * tensor holding a NaN or an Inf, so no load path (model.pretrained, resume,
 * eval, predict, export) takes non-finite weights; and a PyTorch file
 * (sg_file_kind_of) with the advice to `segtrain convert` it. */

/* What a file's first n bytes say it is: a PyTorch torch.save file (a zip
 * archive "PK\3\4", or the legacy format's pickle: byte 0x80 then the
 * protocol 2..5), or something else. */
typedef enum { SG_FILE_OTHER = 0, SG_FILE_PTH_ZIP, SG_FILE_PTH_PICKLE } sg_file_kind;
sg_file_kind sg_file_kind_of(const void *head, size_t n);

/* The index of the first NaN or Inf among count float32 values at data (may
 * be unaligned), or count when all are finite. Vectorised: about memory
 * speed. The one check every weight load and `segtrain convert` use. */
size_t sg_st_find_nonfinite(const void *data, size_t count);
/* "NaN", "+Inf" or "-Inf": the value at data[index] (a non-finite one). */
const char *sg_st_nonfinite_name(const void *data, size_t index);

/* Copy a tensor's elements out (count must equal t->count and the dtype
 * must match; returns SG_OK, or SG_ERR_RUNTIME after logging). */
sg_status sg_st_read_f32(const sg_st_file *f, const sg_st_tensor *t, float *dst, size_t count);
sg_status sg_st_read_i64(const sg_st_file *f, const sg_st_tensor *t, int64_t *dst, size_t count);

/* ---- writer ---- */
typedef struct sg_st_writer sg_st_writer;

sg_st_writer *sg_st_writer_create(void);
void sg_st_writer_destroy(sg_st_writer *w);
/* Adds a tensor; the data is copied (count = product of shape, 1 for a
 * scalar). Returns SG_OK, or SG_ERR_RUNTIME after logging (duplicate or
 * invalid name). Names keep the order they were added in. */
sg_status sg_st_writer_add(sg_st_writer *w, const char *name, sg_st_dtype dtype, int ndim,
                           const int64_t *shape, const void *data);
/* Adds or replaces a __metadata__ entry. Returns SG_OK. */
sg_status sg_st_writer_meta(sg_st_writer *w, const char *key, const char *value);
/* Writes to `path` through path.tmp + rename. Returns SG_OK, or
 * SG_ERR_RUNTIME after logging (naming the path and the failing call). */
sg_status sg_st_writer_write(sg_st_writer *w, const char *path);
/* Writes to an open stream (name used in messages). Same contract. */
sg_status sg_st_writer_write_stream(sg_st_writer *w, FILE *out, const char *name);

#ifdef __cplusplus
}
#endif

#endif
