/* io/onnx.c - the ONNX ModelProto writer (io/onnx.h).
 *
 * Field numbers are those of onnx/onnx.proto (the ONNX specification):
 *   ModelProto: ir_version 1, producer_name 2, producer_version 3, graph 7,
 *     opset_import 8, metadata_props 14
 *   OperatorSetIdProto: domain 1, version 2
 *   StringStringEntryProto: key 1, value 2
 *   GraphProto: node 1, name 2, initializer 5, input 11, output 12
 *   NodeProto: input 1, output 2, name 3, op_type 4, attribute 5
 *   AttributeProto: name 1, f 2, i 3, s 4, ints 8, type 20
 *     (AttributeType FLOAT 1, INT 2, STRING 3, INTS 7)
 *   TensorProto: dims 1, data_type 2, name 8, raw_data 9, external_data 13,
 *     data_location 14 (EXTERNAL 1)
 *   ValueInfoProto: name 1, type 2; TypeProto: tensor_type 1;
 *   TypeProto.Tensor: elem_type 1, shape 2; TensorShapeProto: dim 1;
 *   Dimension: dim_value 1, dim_param 2
 * Wire types: 0 varint, 2 length-delimited, 5 32-bit.
 */
#include "io/onnx.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/log.h"

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "io/onnx.c writes raw_data as the host's bytes: little-endian hosts only"
#endif

enum { A_FLOAT = 1, A_INT = 2, A_STRING = 3, A_INTS = 7 };

typedef struct attr {
    char *name;
    int type;
    int64_t i;
    float f;
    char *s;
    int64_t *ints;
    int n;
} attr;

struct sg_onnx_node {
    char *op, *name;
    char **in, **out;
    int n_in, n_out;
    attr *a;
    int n_a;
};

typedef struct vinfo {
    char *name;
    int elem, ndim;
    int64_t dims[SG_ONNX_MAX_DIMS];
    char *params[SG_ONNX_MAX_DIMS];
} vinfo;

typedef struct init {
    char *name;
    int dtype, ndim;
    int64_t dims[SG_ONNX_MAX_DIMS];
    void *data;
    size_t bytes;
} init;

struct sg_onnx {
    int opset;
    char *producer, *pver, *gname;
    vinfo *in, *out;
    int n_in, n_out;
    sg_onnx_node *nodes;
    int n_nodes;
    init *inits;
    int n_inits;
    char **mk, **mv;
    int n_meta;
};

static char *sdup(const char *s) {
    char *d = strdup(s ? s : "");
    SG_CHECK(d != NULL, "out of host memory");
    return d;
}

/* Grows *arr (element size sz) by one slot; returns the new slot, zeroed.
 * The arrays grow one element at a time (realloc amortises; the graphs have
 * a few thousand entries at most). */
static void *grow(void *arr_p, int *n, size_t sz) {
    void **arr = arr_p;
    void *p = realloc(*arr, (size_t)(*n + 1) * sz);
    SG_CHECK(p != NULL, "out of host memory");
    *arr = p;
    void *slot = (char *)p + (size_t)*n * sz;
    memset(slot, 0, sz);
    (*n)++;
    return slot;
}

int sg_onnx_ir_version(int opset) {
    if (opset <= 11) return 6;
    if (opset <= 14) return 7;
    if (opset <= 18) return 8;
    if (opset <= 20) return 9;
    return 10;
}

sg_onnx *sg_onnx_create(int opset, const char *producer, const char *producer_version,
                        const char *graph_name) {
    if (opset < 1 || opset > SG_ONNX_MAX_OPSET) {
        SG_ERROR("onnx: opset %d is outside 1..%d", opset, SG_ONNX_MAX_OPSET);
        return NULL;
    }
    sg_onnx *g = calloc(1, sizeof *g);
    SG_CHECK(g != NULL, "out of host memory");
    g->opset = opset;
    g->producer = sdup(producer);
    g->pver = sdup(producer_version);
    g->gname = sdup(graph_name);
    return g;
}

static void free_vinfo(vinfo *v) {
    free(v->name);
    for (int i = 0; i < v->ndim; i++) free(v->params[i]);
}

void sg_onnx_destroy(sg_onnx *g) {
    if (!g) return;
    for (int i = 0; i < g->n_in; i++) free_vinfo(&g->in[i]);
    for (int i = 0; i < g->n_out; i++) free_vinfo(&g->out[i]);
    for (int i = 0; i < g->n_nodes; i++) {
        sg_onnx_node *n = &g->nodes[i];
        free(n->op);
        free(n->name);
        for (int k = 0; k < n->n_in; k++) free(n->in[k]);
        for (int k = 0; k < n->n_out; k++) free(n->out[k]);
        free(n->in);
        free(n->out);
        for (int k = 0; k < n->n_a; k++) {
            free(n->a[k].name);
            free(n->a[k].s);
            free(n->a[k].ints);
        }
        free(n->a);
    }
    for (int i = 0; i < g->n_inits; i++) {
        free(g->inits[i].name);
        free(g->inits[i].data);
    }
    for (int i = 0; i < g->n_meta; i++) {
        free(g->mk[i]);
        free(g->mv[i]);
    }
    free(g->in);
    free(g->out);
    free(g->nodes);
    free(g->inits);
    free(g->mk);
    free(g->mv);
    free(g->producer);
    free(g->pver);
    free(g->gname);
    free(g);
}

int sg_onnx_opset(const sg_onnx *g) { return g->opset; }

static sg_status check_shape(const char *what, const char *name, int ndim, const int64_t *dims,
                             const char *const *params) {
    if (!name || !name[0]) {
        SG_ERROR("onnx: %s with an empty name", what);
        return SG_ERR_CONFIG;
    }
    if (ndim < 0 || ndim > SG_ONNX_MAX_DIMS) {
        SG_ERROR("onnx: %s %s has %d dimensions (0..%d)", what, name, ndim, SG_ONNX_MAX_DIMS);
        return SG_ERR_CONFIG;
    }
    for (int i = 0; i < ndim; i++)
        if (dims[i] < 0 && (!params || !params[i] || !params[i][0])) {
            SG_ERROR("onnx: %s %s: dimension %d is neither fixed (>= 0) nor named", what, name, i);
            return SG_ERR_CONFIG;
        }
    return SG_OK;
}

static sg_status add_vinfo(vinfo **arr, int *n, const char *what, const char *name, int elem,
                           int ndim, const int64_t *dims, const char *const *params) {
    sg_status st = check_shape(what, name, ndim, dims, params);
    if (st != SG_OK) return st;
    vinfo *v = grow(arr, n, sizeof **arr);
    v->name = sdup(name);
    v->elem = elem;
    v->ndim = ndim;
    for (int i = 0; i < ndim; i++) {
        v->dims[i] = dims[i];
        v->params[i] = dims[i] < 0 ? sdup(params[i]) : NULL;
    }
    return SG_OK;
}

sg_status sg_onnx_input(sg_onnx *g, const char *name, int elem_type, int ndim, const int64_t *dims,
                        const char *const *dim_params) {
    return add_vinfo(&g->in, &g->n_in, "input", name, elem_type, ndim, dims, dim_params);
}

sg_status sg_onnx_output(sg_onnx *g, const char *name, int elem_type, int ndim, const int64_t *dims,
                         const char *const *dim_params) {
    return add_vinfo(&g->out, &g->n_out, "output", name, elem_type, ndim, dims, dim_params);
}

static sg_status add_init(sg_onnx *g, const char *name, int dtype, size_t esz, int ndim,
                          const int64_t *dims, const void *data) {
    sg_status st = check_shape("initializer", name, ndim, dims, NULL);
    if (st != SG_OK) return st;
    size_t count = 1;
    for (int i = 0; i < ndim; i++) count *= (size_t)dims[i];
    init *t = grow(&g->inits, &g->n_inits, sizeof *g->inits);
    t->name = sdup(name);
    t->dtype = dtype;
    t->ndim = ndim;
    for (int i = 0; i < ndim; i++) t->dims[i] = dims[i];
    t->bytes = count * esz;
    t->data = malloc(t->bytes ? t->bytes : 1);
    SG_CHECK(t->data != NULL, "out of host memory copying initializer %s (%zu bytes)", name,
             t->bytes);
    if (t->bytes) memcpy(t->data, data, t->bytes);
    return SG_OK;
}

sg_status sg_onnx_init_f32(sg_onnx *g, const char *name, int ndim, const int64_t *dims,
                           const float *data) {
    return add_init(g, name, SG_ONNX_FLOAT, sizeof(float), ndim, dims, data);
}

sg_status sg_onnx_init_i64(sg_onnx *g, const char *name, int ndim, const int64_t *dims,
                           const int64_t *data) {
    return add_init(g, name, SG_ONNX_INT64, sizeof(int64_t), ndim, dims, data);
}

sg_onnx_node *sg_onnx_add_node(sg_onnx *g, const char *op_type, const char *name,
                               const char *const *inputs, int n_in, const char *const *outputs,
                               int n_out) {
    sg_onnx_node *n = grow(&g->nodes, &g->n_nodes, sizeof *g->nodes);
    n->op = sdup(op_type);
    n->name = sdup(name);
    n->n_in = n_in;
    n->n_out = n_out;
    n->in = calloc((size_t)(n_in ? n_in : 1), sizeof *n->in);
    n->out = calloc((size_t)(n_out ? n_out : 1), sizeof *n->out);
    SG_CHECK(n->in && n->out, "out of host memory");
    for (int i = 0; i < n_in; i++) n->in[i] = sdup(inputs[i]);
    for (int i = 0; i < n_out; i++) n->out[i] = sdup(outputs[i]);
    return n;
}

static attr *new_attr(sg_onnx_node *n, const char *name, int type) {
    attr *a = grow(&n->a, &n->n_a, sizeof *n->a);
    a->name = sdup(name);
    a->type = type;
    return a;
}

void sg_onnx_attr_int(sg_onnx_node *n, const char *name, int64_t v) {
    new_attr(n, name, A_INT)->i = v;
}

void sg_onnx_attr_float(sg_onnx_node *n, const char *name, float v) {
    new_attr(n, name, A_FLOAT)->f = v;
}

void sg_onnx_attr_string(sg_onnx_node *n, const char *name, const char *v) {
    new_attr(n, name, A_STRING)->s = sdup(v);
}

void sg_onnx_attr_ints(sg_onnx_node *n, const char *name, const int64_t *v, int count) {
    attr *a = new_attr(n, name, A_INTS);
    a->ints = malloc((size_t)(count ? count : 1) * sizeof *a->ints);
    SG_CHECK(a->ints != NULL, "out of host memory");
    memcpy(a->ints, v, (size_t)count * sizeof *a->ints);
    a->n = count;
}

sg_status sg_onnx_meta(sg_onnx *g, const char *key, const char *value) {
    if (!key || !key[0]) {
        SG_ERROR("onnx: metadata entry with an empty key");
        return SG_ERR_CONFIG;
    }
    for (int i = 0; i < g->n_meta; i++)
        if (strcmp(g->mk[i], key) == 0) {
            SG_ERROR("onnx: metadata key '%s' given twice", key);
            return SG_ERR_CONFIG;
        }
    int n = g->n_meta;
    grow(&g->mk, &n, sizeof *g->mk);
    n = g->n_meta;
    grow(&g->mv, &n, sizeof *g->mv);
    g->mk[g->n_meta] = sdup(key);
    g->mv[g->n_meta] = sdup(value);
    g->n_meta++;
    return SG_OK;
}

/* ---------------- protobuf encoding ---------------- */

int sg_pb_varint(uint64_t v, uint8_t *out) {
    int n = 0;
    do {
        uint8_t b = (uint8_t)(v & 0x7f);
        v >>= 7;
        out[n++] = (uint8_t)(b | (v ? 0x80 : 0));
    } while (v);
    return n;
}

/* A sink: f == NULL only counts bytes (the sizing pass of a message). */
typedef struct pb {
    FILE *f;
    uint64_t n;
    int err;
} pb;

static void pb_raw(pb *p, const void *b, size_t len) {
    if (p->f && len && !p->err && fwrite(b, 1, len, p->f) != len) p->err = errno ? errno : EIO;
    p->n += len;
}

static void pb_varint(pb *p, uint64_t v) {
    uint8_t b[10];
    pb_raw(p, b, (size_t)sg_pb_varint(v, b));
}

static void pb_tag(pb *p, int field, int wire) { pb_varint(p, ((uint64_t)field << 3) | wire); }

static void pb_int(pb *p, int field, int64_t v) {
    pb_tag(p, field, 0);
    pb_varint(p, (uint64_t)v); /* negative int64: ten bytes, two's complement */
}

static void pb_bytes(pb *p, int field, const void *b, size_t len) {
    pb_tag(p, field, 2);
    pb_varint(p, len);
    pb_raw(p, b, len);
}

static void pb_str(pb *p, int field, const char *s) { pb_bytes(p, field, s, strlen(s)); }

static void pb_float(pb *p, int field, float v) {
    pb_tag(p, field, 5);
    pb_raw(p, &v, 4); /* little endian (checked above) */
}

typedef void (*enc_fn)(pb *p, const void *arg, const void *ctx);

/* A length-delimited sub-message: sized first, then written. */
static void pb_msg(pb *p, int field, enc_fn enc, const void *arg, const void *ctx) {
    pb c = {NULL, 0, 0};
    enc(&c, arg, ctx);
    pb_tag(p, field, 2);
    pb_varint(p, c.n);
    enc(p, arg, ctx);
}

typedef struct kv {
    const char *k, *v;
} kv;

static void enc_kv(pb *p, const void *arg, const void *ctx) {
    (void)ctx;
    const kv *e = arg;
    pb_str(p, 1, e->k);
    pb_str(p, 2, e->v);
}

static void enc_opset(pb *p, const void *arg, const void *ctx) {
    (void)ctx;
    pb_str(p, 1, "");
    pb_int(p, 2, *(const int *)arg);
}

static void enc_attr(pb *p, const void *arg, const void *ctx) {
    (void)ctx;
    const attr *a = arg;
    pb_str(p, 1, a->name);
    switch (a->type) {
    case A_FLOAT: pb_float(p, 2, a->f); break;
    case A_INT: pb_int(p, 3, a->i); break;
    case A_STRING: pb_str(p, 4, a->s); break;
    case A_INTS:
        for (int i = 0; i < a->n; i++) pb_int(p, 8, a->ints[i]);
        break;
    }
    pb_int(p, 20, a->type);
}

static void enc_node(pb *p, const void *arg, const void *ctx) {
    (void)ctx;
    const sg_onnx_node *n = arg;
    for (int i = 0; i < n->n_in; i++) pb_str(p, 1, n->in[i]);
    for (int i = 0; i < n->n_out; i++) pb_str(p, 2, n->out[i]);
    if (n->name[0]) pb_str(p, 3, n->name);
    pb_str(p, 4, n->op);
    for (int i = 0; i < n->n_a; i++) pb_msg(p, 5, enc_attr, &n->a[i], NULL);
}

typedef struct dimarg {
    int64_t v;
    const char *param;
} dimarg;

static void enc_dim(pb *p, const void *arg, const void *ctx) {
    (void)ctx;
    const dimarg *d = arg;
    if (d->param) pb_str(p, 2, d->param);
    else pb_int(p, 1, d->v);
}

static void enc_shape(pb *p, const void *arg, const void *ctx) {
    (void)ctx;
    const vinfo *v = arg;
    for (int i = 0; i < v->ndim; i++) {
        dimarg d = {v->dims[i], v->dims[i] < 0 ? v->params[i] : NULL};
        pb_msg(p, 1, enc_dim, &d, NULL);
    }
}

static void enc_tensor_type(pb *p, const void *arg, const void *ctx) {
    (void)ctx;
    const vinfo *v = arg;
    pb_int(p, 1, v->elem);
    pb_msg(p, 2, enc_shape, v, NULL);
}

static void enc_type(pb *p, const void *arg, const void *ctx) {
    (void)ctx;
    pb_msg(p, 1, enc_tensor_type, arg, NULL);
}

static void enc_vinfo(pb *p, const void *arg, const void *ctx) {
    (void)ctx;
    const vinfo *v = arg;
    pb_str(p, 1, v->name);
    pb_msg(p, 2, enc_type, v, NULL);
}

/* Where the initializers' bytes go: inline, or external data. */
typedef struct ext_plan {
    const char *location; /* NULL: inline raw_data */
    const uint64_t *offset;
} ext_plan;

/* Smaller tensors stay inline, as onnx's own converter does (its
 * size_threshold): shape inference reads small constants (Slice bounds). */
#define EXT_MIN_BYTES ((size_t)1024)
#define IS_EXT(ep, t) ((ep)->location && (t)->bytes >= EXT_MIN_BYTES)

typedef struct tensor_arg {
    const init *t;
    uint64_t offset;
} tensor_arg;

static void enc_tensor(pb *p, const void *arg, const void *ctx) {
    const tensor_arg *ta = arg;
    const ext_plan *ep = ctx;
    const init *t = ta->t;
    for (int i = 0; i < t->ndim; i++) pb_int(p, 1, t->dims[i]);
    pb_int(p, 2, t->dtype);
    pb_str(p, 8, t->name);
    if (!IS_EXT(ep, t)) {
        pb_bytes(p, 9, t->data, t->bytes);
        return;
    }
    char off[32], len[32];
    snprintf(off, sizeof off, "%llu", (unsigned long long)ta->offset);
    snprintf(len, sizeof len, "%zu", t->bytes);
    kv e[3] = {{"location", ep->location}, {"offset", off}, {"length", len}};
    for (int i = 0; i < 3; i++) pb_msg(p, 13, enc_kv, &e[i], NULL);
    pb_int(p, 14, 1); /* DataLocation EXTERNAL */
}

static void enc_graph(pb *p, const void *arg, const void *ctx) {
    const sg_onnx *g = arg;
    const ext_plan *ep = ctx;
    for (int i = 0; i < g->n_nodes; i++) pb_msg(p, 1, enc_node, &g->nodes[i], NULL);
    pb_str(p, 2, g->gname);
    for (int i = 0; i < g->n_inits; i++) {
        tensor_arg ta = {&g->inits[i], ep->offset ? ep->offset[i] : 0};
        pb_msg(p, 5, enc_tensor, &ta, ep);
    }
    for (int i = 0; i < g->n_in; i++) pb_msg(p, 11, enc_vinfo, &g->in[i], NULL);
    for (int i = 0; i < g->n_out; i++) pb_msg(p, 12, enc_vinfo, &g->out[i], NULL);
}

static void enc_model(pb *p, const void *arg, const void *ctx) {
    const sg_onnx *g = arg;
    pb_int(p, 1, sg_onnx_ir_version(g->opset));
    pb_str(p, 2, g->producer);
    pb_str(p, 3, g->pver);
    pb_msg(p, 7, enc_graph, g, ctx);
    pb_msg(p, 8, enc_opset, &g->opset, NULL);
    for (int i = 0; i < g->n_meta; i++) {
        kv e = {g->mk[i], g->mv[i]};
        pb_msg(p, 14, enc_kv, &e, NULL);
    }
}

/* ---------------- checks and files ---------------- */

/* Every name a node reads is defined before it; no value is defined twice;
 * every graph output is defined. O(values^2) string compares: a few
 * thousand values at most. */
static sg_status check_graph(const sg_onnx *g) {
    int cap = g->n_in + g->n_inits + 1;
    for (int i = 0; i < g->n_nodes; i++) cap += g->nodes[i].n_out;
    const char **def = malloc((size_t)cap * sizeof *def);
    SG_CHECK(def != NULL, "out of host memory");
    int nd = 0;
    sg_status st = SG_OK;
#define DEFINE(nm, what)                                                          \
    do {                                                                          \
        for (int k_ = 0; k_ < nd && st == SG_OK; k_++)                            \
            if (strcmp(def[k_], (nm)) == 0) {                                     \
                SG_ERROR("onnx: value '%s' is defined twice (%s)", (nm), (what)); \
                st = SG_ERR_CONFIG;                                               \
            }                                                                     \
        def[nd++] = (nm);                                                         \
    } while (0)
    for (int i = 0; i < g->n_in && st == SG_OK; i++) DEFINE(g->in[i].name, "graph input");
    for (int i = 0; i < g->n_inits && st == SG_OK; i++) DEFINE(g->inits[i].name, "initializer");
    for (int i = 0; i < g->n_nodes && st == SG_OK; i++) {
        const sg_onnx_node *n = &g->nodes[i];
        for (int k = 0; k < n->n_in && st == SG_OK; k++) {
            if (!n->in[k][0]) continue; /* omitted optional input */
            int found = 0;
            for (int j = 0; j < nd && !found; j++) found = strcmp(def[j], n->in[k]) == 0;
            if (!found) {
                SG_ERROR("onnx: node %d (%s '%s') reads '%s', which no graph input, initializer "
                         "or earlier node defines",
                         i, n->op, n->name, n->in[k]);
                st = SG_ERR_CONFIG;
            }
        }
        for (int k = 0; k < n->n_out && st == SG_OK; k++) {
            if (!n->out[k][0]) {
                SG_ERROR("onnx: node %d (%s '%s') has an empty output name", i, n->op, n->name);
                st = SG_ERR_CONFIG;
            } else {
                DEFINE(n->out[k], n->op);
            }
        }
    }
#undef DEFINE
    for (int i = 0; i < g->n_out && st == SG_OK; i++) {
        int found = 0;
        for (int j = g->n_in + g->n_inits; j < nd && !found; j++)
            found = strcmp(def[j], g->out[i].name) == 0;
        if (!found) {
            SG_ERROR("onnx: graph output '%s' is not produced by any node", g->out[i].name);
            st = SG_ERR_CONFIG;
        }
    }
    free(def);
    return st;
}

static char *path_with(const char *path, const char *suffix) {
    size_t n = strlen(path) + strlen(suffix) + 1;
    char *s = malloc(n);
    SG_CHECK(s != NULL, "out of host memory");
    snprintf(s, n, "%s%s", path, suffix);
    return s;
}

/* Closes f (fsync first when ok); SG_OK or SG_ERR_RUNTIME after logging. */
static sg_status finish_file(FILE *f, const char *tmp, sg_status rc) {
    if (rc == SG_OK && fflush(f) != 0) {
        SG_ERROR("onnx: writing %s failed: %s", tmp, strerror(errno));
        rc = SG_ERR_RUNTIME;
    }
    if (rc == SG_OK && fsync(fileno(f)) != 0) {
        SG_ERROR("onnx: fsync %s failed: %s", tmp, strerror(errno));
        rc = SG_ERR_RUNTIME;
    }
    if (fclose(f) != 0 && rc == SG_OK) {
        SG_ERROR("onnx: closing %s failed: %s", tmp, strerror(errno));
        rc = SG_ERR_RUNTIME;
    }
    return rc;
}

static const size_t EXT_ALIGN = 4096;

/* Writes every initializer's bytes to data_path at offs[i] (aligned). */
static sg_status write_external(const sg_onnx *g, const char *tmp, uint64_t *offs) {
    FILE *f = fopen(tmp, "wb");
    if (!f) {
        SG_ERROR("onnx: cannot create %s: %s (check that the directory exists and is writable)",
                 tmp, strerror(errno));
        return SG_ERR_RUNTIME;
    }
    pb p = {f, 0, 0};
    static const uint8_t zeros[4096];
    for (int i = 0; i < g->n_inits && !p.err; i++) {
        if (g->inits[i].bytes < EXT_MIN_BYTES) continue;
        size_t pad = (size_t)((EXT_ALIGN - p.n % EXT_ALIGN) % EXT_ALIGN);
        pb_raw(&p, zeros, pad);
        offs[i] = p.n;
        pb_raw(&p, g->inits[i].data, g->inits[i].bytes);
    }
    sg_status rc = SG_OK;
    if (p.err) {
        SG_ERROR("onnx: writing %s failed: %s (disk full?)", tmp, strerror(p.err));
        rc = SG_ERR_RUNTIME;
    }
    return finish_file(f, tmp, rc);
}

sg_status sg_onnx_write(const sg_onnx *g, const char *path, int external, int *external_used) {
    sg_status st = check_graph(g);
    if (st != SG_OK) {
        SG_ERROR("onnx: %s not written: the graph is malformed (see above)", path);
        return st;
    }
    size_t total = 0;
    for (int i = 0; i < g->n_inits; i++) total += g->inits[i].bytes;
    int ext = external || total > SG_ONNX_EXTERNAL_AUTO;
    if (external_used) *external_used = ext;
    char *tmp = path_with(path, ".tmp");
    char *data_path = path_with(path, ".data");
    char *data_tmp = path_with(path, ".data.tmp");
    uint64_t *offs = calloc((size_t)(g->n_inits ? g->n_inits : 1), sizeof *offs);
    SG_CHECK(offs != NULL, "out of host memory");
    const char *base = strrchr(data_path, '/');
    base = base ? base + 1 : data_path;
    ext_plan ep = {ext ? base : NULL, ext ? offs : NULL};
    sg_status rc = SG_OK;
    if (ext) rc = write_external(g, data_tmp, offs);
    if (rc == SG_OK) {
        pb sz = {NULL, 0, 0};
        enc_model(&sz, g, &ep);
        if (sz.n >= ((uint64_t)1 << 31)) {
            SG_ERROR("onnx: %s would be %llu bytes, over protobuf's 2 GiB limit even without the "
                     "weights",
                     path, (unsigned long long)sz.n);
            rc = SG_ERR_RUNTIME;
        }
    }
    FILE *f = NULL;
    if (rc == SG_OK) {
        f = fopen(tmp, "wb");
        if (!f) {
            SG_ERROR("onnx: cannot create %s: %s (check that the directory exists and is "
                     "writable)",
                     tmp, strerror(errno));
            rc = SG_ERR_RUNTIME;
        }
    }
    if (f) {
        pb p = {f, 0, 0};
        enc_model(&p, g, &ep);
        if (p.err) {
            SG_ERROR("onnx: writing %s failed: %s (disk full?)", tmp, strerror(p.err));
            rc = SG_ERR_RUNTIME;
        }
        rc = finish_file(f, tmp, rc);
    }
    if (rc == SG_OK && ext && rename(data_tmp, data_path) != 0) {
        SG_ERROR("onnx: rename %s -> %s failed: %s", data_tmp, data_path, strerror(errno));
        rc = SG_ERR_RUNTIME;
    }
    if (rc == SG_OK && rename(tmp, path) != 0) {
        SG_ERROR("onnx: rename %s -> %s failed: %s", tmp, path, strerror(errno));
        rc = SG_ERR_RUNTIME;
    }
    if (rc != SG_OK) {
        unlink(tmp);
        if (ext) unlink(data_tmp);
    }
    free(offs);
    free(tmp);
    free(data_path);
    free(data_tmp);
    return rc;
}
