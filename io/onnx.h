/* io/onnx.h - writing ONNX model files (.onnx), protobuf wire format written
 * by the project.
 *
 * An sg_onnx holds one model being assembled in host memory: the opset, graph
 * inputs and outputs (with fixed or symbolic dimensions), nodes with their
 * attributes, initializers (float32 or int64, copied at add time) and
 * metadata_props. sg_onnx_write encodes ModelProto with the field numbers of
 * the ONNX specification (onnx/onnx.proto, proto2): varints, length-delimited
 * messages (each sized in a first pass, so nothing is buffered twice),
 * repeated scalars unpacked, tensor values as raw_data (little endian).
 *
 * Files over protobuf's 2 GiB limit: when the initializers' bytes exceed
 * SG_ONNX_EXTERNAL_AUTO (or external = 1 is asked for), every initializer goes
 * to `<out>.data` beside the model (ONNX external data: location = that file's
 * name, offset and length, data_location = EXTERNAL; offsets aligned to 4096
 * bytes) and the .onnx keeps only the graph.
 *
 * Files are written to `<path>.tmp`, fsynced and renamed. Errors are logged
 * naming the file or the node at fault and returned as SG_ERR_RUNTIME
 * (writing) or SG_ERR_CONFIG (a malformed request: an empty name, a node
 * reading a value nothing defines). Only running out of host memory is fatal.
 */
#ifndef SG_IO_ONNX_H
#define SG_IO_ONNX_H

#include <stddef.h>
#include <stdint.h>

#include "core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* TensorProto.DataType values used here (onnx.proto). */
enum { SG_ONNX_FLOAT = 1, SG_ONNX_UINT8 = 2, SG_ONNX_INT64 = 7 };

#define SG_ONNX_MAX_DIMS 8
/* Initializer bytes above which sg_onnx_write moves them to external data:
 * protobuf messages are limited to 2 GiB; this leaves 64 MiB for the graph. */
#define SG_ONNX_EXTERNAL_AUTO ((size_t)2048 * 1024 * 1024 - (size_t)64 * 1024 * 1024)

typedef struct sg_onnx sg_onnx;
typedef struct sg_onnx_node sg_onnx_node;

/* A model with the default-domain opset `opset` and ir_version chosen for
 * it (the lowest that carries that opset). NULL after logging when opset is
 * outside 1..SG_ONNX_MAX_OPSET. */
#define SG_ONNX_MAX_OPSET 21
sg_onnx *sg_onnx_create(int opset, const char *producer, const char *producer_version,
                        const char *graph_name);
void sg_onnx_destroy(sg_onnx *g);
int sg_onnx_opset(const sg_onnx *g);
/* The ir_version sg_onnx_create chose for opset (6 for 11, 7 for 12-14, 8 for
 * 15-18, 9 for 19-20, 10 for 21). */
int sg_onnx_ir_version(int opset);

/* Graph inputs and outputs: elem_type one of SG_ONNX_*, dims[i] >= 0 fixed or
 * -1 with the symbolic name dim_params[i] (dim_params may be NULL when every
 * dimension is fixed). */
sg_status sg_onnx_input(sg_onnx *g, const char *name, int elem_type, int ndim, const int64_t *dims,
                        const char *const *dim_params);
sg_status sg_onnx_output(sg_onnx *g, const char *name, int elem_type, int ndim, const int64_t *dims,
                         const char *const *dim_params);

/* Initializers, data copied now. */
sg_status sg_onnx_init_f32(sg_onnx *g, const char *name, int ndim, const int64_t *dims,
                           const float *data);
sg_status sg_onnx_init_i64(sg_onnx *g, const char *name, int ndim, const int64_t *dims,
                           const int64_t *data);

/* A node; inputs may be "" (an omitted optional input). The names are
 * copied. Attributes follow with the sg_onnx_attr_* calls on the node
 * returned (valid until the next sg_onnx_add_node call). */
sg_onnx_node *sg_onnx_add_node(sg_onnx *g, const char *op_type, const char *name,
                               const char *const *inputs, int n_in, const char *const *outputs,
                               int n_out);
void sg_onnx_attr_int(sg_onnx_node *n, const char *name, int64_t v);
void sg_onnx_attr_float(sg_onnx_node *n, const char *name, float v);
void sg_onnx_attr_string(sg_onnx_node *n, const char *name, const char *v);
void sg_onnx_attr_ints(sg_onnx_node *n, const char *name, const int64_t *v, int count);

/* metadata_props entry (keys unique: a repeated key is SG_ERR_CONFIG). */
sg_status sg_onnx_meta(sg_onnx *g, const char *key, const char *value);

/* Checks the graph (every node input is a graph input, an initializer or an
 * earlier node's output; every output is defined; names unique) and writes
 * it to path. external: 1 = initializers in `<path>.data` always, 0 = only
 * above SG_ONNX_EXTERNAL_AUTO bytes. *external_used (may be NULL) tells
 * which was done. */
sg_status sg_onnx_write(const sg_onnx *g, const char *path, int external, int *external_used);

/* Protobuf primitives, exposed for the unit test: the varint encoding of v
 * into out (at least 10 bytes); returns its length. */
int sg_pb_varint(uint64_t v, uint8_t *out);

#ifdef __cplusplus
}
#endif

#endif
