/* io/pth_pickle.h - a restricted unpickler for PyTorch checkpoints
 * (io/pth.c). Not a public header.
 *
 * It understands the pickle opcodes torch.save writes (protocol 2, plus the
 * few protocol 3/4 ones newer Pythons emit for the same objects) and builds
 * plain values: None, bools, ints, floats, strings, tuples, lists, dicts,
 * storages (by persistent id) and tensors. It never imports or calls
 * anything: a GLOBAL is accepted only from a fixed list (collections.
 * OrderedDict, torch._utils._rebuild_tensor_v2 and _rebuild_parameter, the
 * torch.*Storage types), and REDUCE only applies those. Anything else (a
 * GLOBAL of os.system, an object's class, an unknown opcode) is refused
 * with an error naming the opcode or global and its byte position.
 *
 * Limits (untrusted input): pickle size, memo indices, object count, string
 * lengths, tensor rank, nesting depth and stack size; values are kept in an arena and never traversed
 * recursively, so neither deep nesting nor cycles can exhaust the stack.
 */
#ifndef SG_IO_PTH_PICKLE_H
#define SG_IO_PTH_PICKLE_H

#include <stddef.h>
#include <stdint.h>

#define PK_MAX_DIMS 8
#define PK_MAX_OBJECTS (4 << 20)
#define PK_MAX_MEMO (4 << 20)
#define PK_MAX_STR (1 << 20)
/* Nesting: containers inside containers, and open MARKs, at most
 * PK_MAX_DEPTH deep (a state_dict nests a few levels). Refused as it is
 * pushed, before it is built: more than PK_MAX_OPEN empty containers pushed
 * in a row (a nested one comes before its contents; Python's pickler puts
 * at most 1,000 siblings in a batch), or more than PK_MAX_TOP values on the
 * stack outside any MARK; so a file of a million nested lists is refused at
 * once, in a few MB. */
#define PK_MAX_DEPTH 256
#define PK_MAX_OPEN 4096
#define PK_MAX_TOP 1024

typedef enum {
    PK_NONE,
    PK_BOOL,
    PK_INT,
    PK_BIGINT, /* an int that does not fit int64 (raw little-endian bytes in s) */
    PK_FLOAT,
    PK_STR,
    PK_TUPLE,
    PK_LIST,
    PK_DICT, /* items: key0, value0, key1, value1, ... */
    PK_GLOBAL,
    PK_STORAGE,
    PK_TENSOR
} pk_kind;

/* The globals a checkpoint may name. */
typedef enum {
    PKG_ORDERED_DICT,
    PKG_REBUILD_TENSOR_V2,
    PKG_REBUILD_PARAMETER,
    PKG_STORAGE_TYPE /* + sg_pth dtype in pk_value.i */
} pk_global;

typedef struct pk_value pk_value;
struct pk_value {
    pk_kind kind;
    int64_t i; /* BOOL, INT; GLOBAL: pk_global; STORAGE: dtype */
    double f;  /* FLOAT */
    char *s;   /* STR (NUL-terminated), BIGINT bytes; STORAGE: key */
    size_t len;
    pk_value **items; /* TUPLE, LIST, DICT */
    size_t n, cap;
    int depth; /* TUPLE, LIST, DICT: levels of containers inside (0: none) */
    /* STORAGE: element type (i), key (s), elements, and for legacy views the
     * root storage and the view's element offset in it */
    int64_t numel;
    pk_value *root;
    int64_t root_offset;
    const uint8_t *data; /* set by the container reader: numel elements */
    /* TENSOR */
    pk_value *storage;
    int64_t offset;
    int ndim;
    int64_t size[PK_MAX_DIMS], stride[PK_MAX_DIMS];
};

typedef struct pk_ctx pk_ctx;

/* Element types of storages (torch.<X>Storage). */
enum {
    PKT_F32,
    PKT_F64,
    PKT_F16,
    PKT_BF16,
    PKT_I64,
    PKT_I32,
    PKT_I16,
    PKT_I8,
    PKT_U8,
    PKT_BOOL,
    PKT_COUNT
};
int pk_dtype_size(int dtype);
const char *pk_dtype_name(int dtype); /* "FloatStorage", ... */

/* A context owns every value it creates (freed by pk_free). `name` is the
 * file in messages; errors go to err[errlen]. */
pk_ctx *pk_new(const char *name, char *err, size_t errlen);
void pk_free(pk_ctx *c);

/* Unpickles one pickle from buf[*pos..len) up to its STOP; *pos moves past
 * it. Returns the value, or NULL with the error set. legacy != 0 accepts the
 * 6-field persistent ids of the legacy format (with views). Storages with the
 * same key are one value: pk_storages lists them in first-seen order. */
pk_value *pk_load(pk_ctx *c, const uint8_t *buf, size_t len, size_t *pos, int legacy);
size_t pk_n_storages(const pk_ctx *c);
pk_value *pk_storage_at(const pk_ctx *c, size_t i);
pk_value *pk_storage_find(const pk_ctx *c, const char *key); /* NULL if none */

/* DICT lookup by string key; NULL if absent or not a dict. */
pk_value *pk_dict_get(const pk_value *d, const char *key);

/* Sets the error (printf-style), prefixed by the file name; returns NULL. */
void *pk_fail(pk_ctx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
const char *pk_name(const pk_ctx *c);

#endif
