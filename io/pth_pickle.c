/* io/pth_pickle.c - see pth_pickle.h: the restricted unpickler. Each
 * opcode reads its operands with bounds checks; values live in an arena
 * (ctx->all) and are freed together. */
#include "io/pth_pickle.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "core/util.h"

struct pk_ctx {
    const char *name;
    char *err;
    size_t errlen;
    int failed;
    pk_value **all; /* the arena */
    size_t n_all, cap_all;
    pk_value **stack;
    size_t sp, cap_stack;
    size_t run_len, run_top; /* empty containers pushed in a row, ending at run_top */
    size_t *marks;
    size_t n_marks, cap_marks;
    pk_value **memo;
    size_t cap_memo, n_memo_used;
    pk_value **storages;
    size_t n_storages, cap_storages;
    size_t *slots; /* open addressing over storages by key: index + 1, 0 = empty */
    size_t n_slots;
    pk_value mark_sentinel;
};

static const struct {
    const char *name;
    int size;
} k_dtypes[PKT_COUNT] = {
    [PKT_F32] = {"FloatStorage", 4}, [PKT_F64] = {"DoubleStorage", 8},
    [PKT_F16] = {"HalfStorage", 2},  [PKT_BF16] = {"BFloat16Storage", 2},
    [PKT_I64] = {"LongStorage", 8},  [PKT_I32] = {"IntStorage", 4},
    [PKT_I16] = {"ShortStorage", 2}, [PKT_I8] = {"CharStorage", 1},
    [PKT_U8] = {"ByteStorage", 1},   [PKT_BOOL] = {"BoolStorage", 1},
};

int pk_dtype_size(int dtype) { return dtype >= 0 && dtype < PKT_COUNT ? k_dtypes[dtype].size : 0; }
const char *pk_dtype_name(int dtype) {
    return dtype >= 0 && dtype < PKT_COUNT ? k_dtypes[dtype].name : "?";
}

const char *pk_name(const pk_ctx *c) { return c->name; }

void *pk_fail(pk_ctx *c, const char *fmt, ...) {
    if (c->failed) return NULL; /* keep the first (root) cause */
    c->failed = 1;
    char buf[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (c->err && c->errlen) snprintf(c->err, c->errlen, "%s: %s", c->name, buf);
    return NULL;
}

pk_ctx *pk_new(const char *name, char *err, size_t errlen) {
    pk_ctx *c = calloc(1, sizeof *c);
    SG_CHECK(c != NULL, "out of host memory");
    c->name = name;
    c->err = err;
    c->errlen = errlen;
    if (err && errlen) err[0] = 0;
    return c;
}

void pk_free(pk_ctx *c) {
    if (!c) return;
    for (size_t i = 0; i < c->n_all; i++) {
        free(c->all[i]->s);
        free(c->all[i]->items);
        free(c->all[i]);
    }
    free(c->all);
    free(c->stack);
    free(c->marks);
    free(c->memo);
    free(c->storages);
    free(c->slots);
    free(c);
}

/* The storage with this key, or NULL: hashed, so a file with a million
 * storages is not quadratic. */
pk_value *pk_storage_find(const pk_ctx *c, const char *key) {
    if (!c->n_slots) return NULL;
    size_t mask = c->n_slots - 1;
    for (size_t i = sg_fnv1a_str(SG_FNV_OFFSET, key) & mask;; i = (i + 1) & mask) {
        size_t v = c->slots[i];
        if (!v) return NULL;
        if (strcmp(c->storages[v - 1]->s, key) == 0) return c->storages[v - 1];
    }
}

static void slots_insert(pk_ctx *c, size_t index) {
    size_t mask = c->n_slots - 1;
    size_t i = sg_fnv1a_str(SG_FNV_OFFSET, c->storages[index]->s) & mask;
    while (c->slots[i]) i = (i + 1) & mask;
    c->slots[i] = index + 1;
}

/* Keeps the table at most half full. */
static void slots_add(pk_ctx *c, size_t index) {
    if (2 * (c->n_storages + 1) > c->n_slots) {
        size_t n = c->n_slots ? 2 * c->n_slots : 64;
        while (2 * (c->n_storages + 1) > n) n *= 2;
        free(c->slots);
        c->slots = calloc(n, sizeof *c->slots);
        SG_CHECK(c->slots != NULL, "out of host memory");
        c->n_slots = n;
        for (size_t k = 0; k < index; k++) slots_insert(c, k);
    }
    slots_insert(c, index);
}

size_t pk_n_storages(const pk_ctx *c) { return c->n_storages; }
pk_value *pk_storage_at(const pk_ctx *c, size_t i) {
    return i < c->n_storages ? c->storages[i] : NULL;
}

/* Grows *arr (elements of `elem` bytes) to hold at least n; 0 or -1 past max. */
static int grow(void **arr, size_t *cap, size_t n, size_t elem, size_t max) {
    if (n <= *cap) return 0;
    if (n > max) return -1;
    size_t nc = *cap ? *cap * 2 : 16;
    while (nc < n) nc *= 2;
    if (nc > max) nc = max;
    void *p = realloc(*arr, nc * elem);
    SG_CHECK(p != NULL, "out of host memory");
    *arr = p;
    *cap = nc;
    return 0;
}

static pk_value *new_value(pk_ctx *c, pk_kind kind) {
    if (grow((void **)&c->all, &c->cap_all, c->n_all + 1, sizeof *c->all, PK_MAX_OBJECTS) != 0)
        return pk_fail(c, "more than %d pickled objects: not a state_dict (or a hostile file)",
                       PK_MAX_OBJECTS);
    pk_value *v = calloc(1, sizeof *v);
    SG_CHECK(v != NULL, "out of host memory");
    v->kind = kind;
    c->all[c->n_all++] = v;
    return v;
}

static int add_item(pk_ctx *c, pk_value *container, pk_value *item) {
    /* nesting: a container is one level deeper than its deepest item */
    int d = item->kind == PK_TUPLE || item->kind == PK_LIST || item->kind == PK_DICT
                ? item->depth + 1
                : 0;
    if (d > container->depth) container->depth = d;
    if (container->depth > PK_MAX_DEPTH) {
        pk_fail(c, "containers nested more than %d deep: not a state_dict (a hostile file?)",
                PK_MAX_DEPTH);
        return -1;
    }
    if (grow((void **)&container->items, &container->cap, container->n + 1,
             sizeof *container->items, PK_MAX_OBJECTS) != 0) {
        pk_fail(c, "a container with more than %d entries", PK_MAX_OBJECTS);
        return -1;
    }
    container->items[container->n++] = item;
    return 0;
}

pk_value *pk_dict_get(const pk_value *d, const char *key) {
    if (!d || d->kind != PK_DICT) return NULL;
    for (size_t i = 0; i + 1 < d->n; i += 2)
        if (d->items[i]->kind == PK_STR && strcmp(d->items[i]->s, key) == 0) return d->items[i + 1];
    return NULL;
}

/* ---- the stack ---- */

static int push(pk_ctx *c, pk_value *v) {
    if (!v) return -1;
    /* Nesting, seen before anything is built into it: Python pickles a
     * nested container as its empty outer one, then the inner ones, so a
     * million nested lists push a million empty lists in a row (or a
     * million dicts and keys outside any MARK). Batches of siblings sit
     * above a MARK, at most 1,000 a batch from Python's pickler. */
    int empty = (v->kind == PK_LIST || v->kind == PK_DICT) && v->n == 0;
    if (!empty) {
        c->run_len = 0;
    } else {
        c->run_len = c->run_len && c->run_top == c->sp ? c->run_len + 1 : 1;
        c->run_top = c->sp + 1;
        if (c->run_len > PK_MAX_OPEN) {
            pk_fail(c,
                    "more than %d empty containers pushed in a row: containers nested too deep, "
                    "not a state_dict (a hostile file?)",
                    PK_MAX_OPEN);
            return -1;
        }
    }
    if (!c->n_marks && c->sp >= PK_MAX_TOP) {
        pk_fail(c,
                "more than %d values on the pickle stack outside any MARK: containers nested "
                "too deep, not a state_dict (a hostile file?)",
                PK_MAX_TOP);
        return -1;
    }
    if (grow((void **)&c->stack, &c->cap_stack, c->sp + 1, sizeof *c->stack, PK_MAX_OBJECTS) != 0) {
        pk_fail(c, "pickle stack deeper than %d", PK_MAX_OBJECTS);
        return -1;
    }
    c->stack[c->sp++] = v;
    return 0;
}

static pk_value *pop(pk_ctx *c, size_t at) {
    size_t floor = c->n_marks ? c->marks[c->n_marks - 1] : 0;
    if (c->sp <= floor) return pk_fail(c, "pickle stack underflow at byte %zu (corrupt)", at);
    return c->stack[--c->sp];
}

static pk_value *top(pk_ctx *c, size_t at) {
    size_t floor = c->n_marks ? c->marks[c->n_marks - 1] : 0;
    if (c->sp <= floor) return pk_fail(c, "pickle stack underflow at byte %zu (corrupt)", at);
    return c->stack[c->sp - 1];
}

/* Pops the items above the last MARK (and the mark): *first is their index
 * in the stack, *n their count. */
static int pop_mark(pk_ctx *c, size_t at, size_t *first, size_t *n) {
    if (!c->n_marks) {
        pk_fail(c, "pickle opcode at byte %zu needs a MARK that is not there (corrupt)", at);
        return -1;
    }
    size_t m = c->marks[--c->n_marks];
    *first = m;
    *n = c->sp - m;
    c->sp = m;
    return 0;
}

/* ---- operands ---- */

typedef struct rd {
    const uint8_t *b;
    size_t len, pos;
} rd;

static int need(pk_ctx *c, rd *r, size_t n, const char *what) {
    if (n <= r->len - r->pos) return 0;
    pk_fail(c,
            "truncated pickle: %s at byte %zu needs %zu bytes, %zu left (the file is cut "
            "short or corrupt)",
            what, r->pos, n, r->len - r->pos);
    return -1;
}

static uint64_t le(const uint8_t *p, int n) {
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

static pk_value *make_int(pk_ctx *c, int64_t x) {
    pk_value *v = new_value(c, PK_INT);
    if (v) v->i = x;
    return v;
}

/* A string of n bytes at the reader (NUL-terminated copy). */
static pk_value *make_str(pk_ctx *c, rd *r, uint64_t n, const char *op) {
    if (n > PK_MAX_STR)
        return pk_fail(c, "%s at byte %zu: a string of %llu bytes (at most %d)", op, r->pos,
                       (unsigned long long)n, PK_MAX_STR);
    if (need(c, r, (size_t)n, op) != 0) return NULL;
    pk_value *v = new_value(c, PK_STR);
    if (!v) return NULL;
    v->s = malloc((size_t)n + 1);
    SG_CHECK(v->s != NULL, "out of host memory");
    memcpy(v->s, r->b + r->pos, (size_t)n);
    v->s[n] = 0;
    v->len = (size_t)n;
    r->pos += (size_t)n;
    return v;
}

/* LONG1 / LONG4: little-endian two's complement of n bytes. */
static pk_value *make_long(pk_ctx *c, rd *r, size_t n) {
    if (need(c, r, n, "LONG") != 0) return NULL;
    const uint8_t *p = r->b + r->pos;
    r->pos += n;
    if (n == 0) return make_int(c, 0);
    if (n <= 8) {
        uint64_t u = le(p, (int)n);
        if (n < 8 && (p[n - 1] & 0x80)) u |= ~0ULL << (8 * n); /* sign-extend */
        return make_int(c, (int64_t)u);
    }
    pk_value *v = new_value(c, PK_BIGINT);
    if (!v) return NULL;
    v->s = malloc(n);
    SG_CHECK(v->s != NULL, "out of host memory");
    memcpy(v->s, p, n);
    v->len = n;
    return v;
}

/* ---- globals ---- */

static pk_value *make_global(pk_ctx *c, const char *module, const char *name, size_t at) {
    pk_value *v = NULL;
    if (!strcmp(module, "collections") && !strcmp(name, "OrderedDict")) {
        v = new_value(c, PK_GLOBAL);
        if (v) v->i = PKG_ORDERED_DICT;
    } else if (!strcmp(module, "torch._utils") && !strcmp(name, "_rebuild_tensor_v2")) {
        v = new_value(c, PK_GLOBAL);
        if (v) v->i = PKG_REBUILD_TENSOR_V2;
    } else if (!strcmp(module, "torch._utils") && !strcmp(name, "_rebuild_parameter")) {
        v = new_value(c, PK_GLOBAL);
        if (v) v->i = PKG_REBUILD_PARAMETER;
    } else if (!strcmp(module, "torch")) {
        for (int t = 0; t < PKT_COUNT; t++)
            if (!strcmp(name, k_dtypes[t].name)) {
                v = new_value(c, PK_GLOBAL);
                if (v) v->i = PKG_STORAGE_TYPE + t;
                return v;
            }
    }
    if (v || c->failed) return v;
    return pk_fail(c,
                   "refused the pickle global '%s.%s' (GLOBAL at byte %zu): segtrain reads only "
                   "state_dicts of tensors (OrderedDict, torch._utils._rebuild_tensor_v2, "
                   "torch.*Storage) and never runs code from a file. If this is a whole pickled "
                   "object (torch.save(model)), re-save its weights: "
                   "torch.save(model.state_dict(), f)",
                   module, name, at);
}

/* "module\nname\n" of GLOBAL. */
static int read_line(pk_ctx *c, rd *r, char *out, size_t cap) {
    size_t i = 0;
    while (r->pos < r->len && r->b[r->pos] != '\n') {
        if (i + 1 >= cap) {
            pk_fail(c, "GLOBAL name longer than %zu characters at byte %zu", cap - 1, r->pos);
            return -1;
        }
        out[i++] = (char)r->b[r->pos++];
    }
    if (r->pos >= r->len) {
        pk_fail(c, "truncated pickle: GLOBAL name at byte %zu is not terminated", r->pos);
        return -1;
    }
    r->pos++; /* '\n' */
    out[i] = 0;
    return 0;
}

/* ---- REDUCE: the only calls a checkpoint may make ---- */

static int get_int(const pk_value *v, int64_t *out) {
    if (v->kind == PK_INT || v->kind == PK_BOOL) {
        *out = v->i;
        return 0;
    }
    return -1;
}

static pk_value *rebuild_tensor(pk_ctx *c, pk_value *args, size_t at) {
    if (args->kind != PK_TUPLE || args->n < 6 || args->n > 7)
        return pk_fail(c, "_rebuild_tensor_v2 at byte %zu: expected 6 or 7 arguments, got %zu", at,
                       args->kind == PK_TUPLE ? args->n : 0);
    pk_value *st = args->items[0], *size = args->items[2], *stride = args->items[3];
    int64_t off;
    if (st->kind != PK_STORAGE || get_int(args->items[1], &off) != 0 || size->kind != PK_TUPLE ||
        stride->kind != PK_TUPLE)
        return pk_fail(c,
                       "_rebuild_tensor_v2 at byte %zu: expected (storage, offset, size, "
                       "stride, ...)",
                       at);
    if (size->n != stride->n || size->n > PK_MAX_DIMS)
        return pk_fail(c,
                       "_rebuild_tensor_v2 at byte %zu: %zu sizes and %zu strides (at most "
                       "%d dimensions)",
                       at, size->n, stride->n, PK_MAX_DIMS);
    pk_value *t = new_value(c, PK_TENSOR);
    if (!t) return NULL;
    t->storage = st;
    t->offset = off;
    t->ndim = (int)size->n;
    /* every element's index offset + sum (size_i - 1) * stride_i must lie
     * inside the storage; checked without overflow */
    const int64_t lim = INT64_C(1) << 40;
    int64_t numel = 1, last = off;
    for (int d = 0; d < t->ndim; d++) {
        if (get_int(size->items[d], &t->size[d]) != 0 || get_int(stride->items[d], &t->stride[d]))
            return pk_fail(c, "_rebuild_tensor_v2 at byte %zu: a size or stride is not an int", at);
        if (t->size[d] < 0 || t->size[d] > lim || t->stride[d] < 0 || t->stride[d] > lim)
            return pk_fail(c,
                           "_rebuild_tensor_v2 at byte %zu: size %lld / stride %lld of "
                           "dimension %d out of range",
                           at, (long long)t->size[d], (long long)t->stride[d], d);
        if (__builtin_mul_overflow(numel, t->size[d] ? t->size[d] : 1, &numel) || numel > lim)
            return pk_fail(c, "tensor at byte %zu has more than 2^40 elements", at);
    }
    if (off < 0 || off > lim)
        return pk_fail(c, "tensor at byte %zu: storage offset %lld", at, (long long)off);
    int empty = 0;
    for (int d = 0; d < t->ndim; d++) empty |= t->size[d] == 0;
    if (!empty) {
        int over = 0;
        for (int d = 0; d < t->ndim; d++) {
            int64_t span;
            over |= __builtin_mul_overflow(t->size[d] - 1, t->stride[d], &span);
            over |= __builtin_add_overflow(last, span, &last);
        }
        if (over || last >= st->numel)
            return pk_fail(c,
                           "tensor at byte %zu reaches element %lld of storage '%s', which "
                           "has %lld: corrupt file",
                           at, (long long)last, st->s, (long long)st->numel);
    }
    return t;
}

static pk_value *reduce(pk_ctx *c, pk_value *fn, pk_value *args, size_t at) {
    if (fn->kind != PK_GLOBAL)
        return pk_fail(c, "REDUCE at byte %zu calls something that is not an allowed global", at);
    if (args->kind != PK_TUPLE)
        return pk_fail(c, "REDUCE at byte %zu: arguments are not a tuple (corrupt)", at);
    switch (fn->i) {
    case PKG_ORDERED_DICT:
        if (args->n != 0)
            return pk_fail(c, "OrderedDict at byte %zu built with arguments: unsupported", at);
        return new_value(c, PK_DICT);
    case PKG_REBUILD_TENSOR_V2: return rebuild_tensor(c, args, at);
    case PKG_REBUILD_PARAMETER:
        if (args->n < 2 || args->items[0]->kind != PK_TENSOR)
            return pk_fail(c,
                           "_rebuild_parameter at byte %zu: expected (tensor, requires_grad, "
                           "...)",
                           at);
        return args->items[0];
    default:
        return pk_fail(c, "REDUCE at byte %zu: torch.%s cannot be called (corrupt file)", at,
                       pk_dtype_name((int)fn->i - PKG_STORAGE_TYPE));
    }
}

/* BINPERSID: ('storage', torch.<T>Storage, key, location, numel[, view]) */
static pk_value *persistent_load(pk_ctx *c, pk_value *pid, int legacy, size_t at) {
    if (pid->kind != PK_TUPLE || pid->n < 5 || pid->n > 6 || pid->items[0]->kind != PK_STR ||
        strcmp(pid->items[0]->s, "storage") != 0)
        return pk_fail(c,
                       "persistent id at byte %zu is not ('storage', type, key, location, "
                       "numel): the file holds something other than tensors",
                       at);
    pk_value *type = pid->items[1], *key = pid->items[2];
    int64_t numel;
    if (type->kind != PK_GLOBAL || type->i < PKG_STORAGE_TYPE || key->kind != PK_STR ||
        get_int(pid->items[4], &numel) != 0 || numel < 0 || numel > (INT64_C(1) << 40))
        return pk_fail(c, "storage reference at byte %zu: bad type, key or size", at);
    if (key->len == 0 || key->len > 64 || strchr(key->s, '/') || strstr(key->s, ".."))
        return pk_fail(c, "storage key '%.64s' at byte %zu is not a plain name", key->s, at);
    int dtype = (int)(type->i - PKG_STORAGE_TYPE);
    pk_value *view = pid->n == 6 ? pid->items[5] : NULL;
    if (view && view->kind != PK_NONE && !legacy)
        return pk_fail(c, "storage reference at byte %zu has a view in a zip checkpoint", at);
    /* one value per key: tensors sharing a storage share its bytes */
    pk_value *root = pk_storage_find(c, key->s);
    if (root) {
        if (root->i != dtype || root->numel != numel)
            return pk_fail(c, "storage '%s' is referenced as %s[%lld] and as %s[%lld] (corrupt)",
                           key->s, pk_dtype_name((int)root->i), (long long)root->numel,
                           pk_dtype_name(dtype), (long long)numel);
    } else {
        if (grow((void **)&c->storages, &c->cap_storages, c->n_storages + 1, sizeof *c->storages,
                 1 << 20) != 0)
            return pk_fail(c, "more than %d storages", 1 << 20);
        root = new_value(c, PK_STORAGE);
        if (!root) return NULL;
        root->i = dtype;
        root->numel = numel;
        root->s = strdup(key->s);
        SG_CHECK(root->s != NULL, "out of host memory");
        root->len = key->len;
        c->storages[c->n_storages] = root;
        slots_add(c, c->n_storages);
        c->n_storages++;
    }
    if (!view || view->kind == PK_NONE) return root;
    /* legacy view: (view_key, offset, size) into the root storage */
    int64_t voff, vsize;
    if (view->kind != PK_TUPLE || view->n != 3 || get_int(view->items[1], &voff) != 0 ||
        get_int(view->items[2], &vsize) != 0 || voff < 0 || vsize < 0 || voff > numel ||
        vsize > numel - voff)
        return pk_fail(c, "storage view at byte %zu is out of its storage's range", at);
    pk_value *v = new_value(c, PK_STORAGE);
    if (!v) return NULL;
    v->i = dtype;
    v->numel = vsize;
    v->root = root;
    v->root_offset = voff;
    v->s = strdup(key->s);
    SG_CHECK(v->s != NULL, "out of host memory");
    return v;
}

/* ---- the machine ---- */

static const char *opcode_name(int op) {
    switch (op) {
    case 'i': return "INST (builds an object)";
    case 'o': return "OBJ (builds an object)";
    case 0x81: return "NEWOBJ (builds an object)";
    case 0x92: return "NEWOBJ_EX (builds an object)";
    case 0x82:
    case 0x83:
    case 0x84: return "EXT (extension registry)";
    case 'P': return "PERSID (text persistent id)";
    case 'I': return "INT (text)";
    case 'L': return "LONG (text)";
    case 'F': return "FLOAT (text)";
    case 'S': return "STRING (text)";
    case 'V': return "UNICODE (text)";
    case 'g': return "GET (text)";
    case 'p': return "PUT (text)";
    case 'd': return "DICT";
    case 'l': return "LIST";
    case 0x96: return "BYTEARRAY8";
    case 0x97: return "NEXT_BUFFER";
    case 0x98: return "READONLY_BUFFER";
    case 0x90: return "EMPTY_SET";
    case 0x91: return "FROZENSET";
    case 0x8f: return "ADDITEMS";
    default: return "unknown";
    }
}

static int memo_put(pk_ctx *c, uint64_t idx, pk_value *v, size_t at) {
    if (!v) return -1;
    if (idx >= PK_MAX_MEMO) {
        pk_fail(c, "memo index %llu at byte %zu is above the limit %d", (unsigned long long)idx, at,
                PK_MAX_MEMO);
        return -1;
    }
    size_t old = c->cap_memo;
    if (grow((void **)&c->memo, &c->cap_memo, (size_t)idx + 1, sizeof *c->memo, PK_MAX_MEMO) != 0)
        return -1;
    if (c->cap_memo > old) memset(c->memo + old, 0, (c->cap_memo - old) * sizeof *c->memo);
    c->memo[idx] = v;
    if (idx + 1 > c->n_memo_used) c->n_memo_used = (size_t)idx + 1;
    return 0;
}

static pk_value *memo_get(pk_ctx *c, uint64_t idx, size_t at) {
    if (idx >= c->cap_memo || !c->memo[idx])
        return pk_fail(c, "memo entry %llu read at byte %zu was never stored (corrupt)",
                       (unsigned long long)idx, at);
    return c->memo[idx];
}

/* A tuple of the n stack values from index first (by index: with n == 0 the
 * stack may still be unallocated, and NULL + 0 is undefined). */
static pk_value *make_tuple(pk_ctx *c, size_t first, size_t n) {
    pk_value *t = new_value(c, PK_TUPLE);
    if (!t) return NULL;
    for (size_t i = 0; i < n; i++)
        if (add_item(c, t, c->stack[first + i]) != 0) return NULL;
    return t;
}

pk_value *pk_load(pk_ctx *c, const uint8_t *buf, size_t len, size_t *pos, int legacy) {
    rd r = {buf, len, *pos};
    c->sp = 0;
    c->n_marks = 0;
    c->n_memo_used = 0;
    if (c->memo) memset(c->memo, 0, c->cap_memo * sizeof *c->memo);
    while (!c->failed) {
        if (need(c, &r, 1, "an opcode") != 0) return NULL;
        size_t at = r.pos;
        int op = r.b[r.pos++];
        pk_value *v = NULL, *a = NULL, *b = NULL;
        size_t first, n;
        switch (op) {
        case 0x80: /* PROTO */
            if (need(c, &r, 1, "PROTO") != 0) return NULL;
            if (r.b[r.pos] > 5)
                return pk_fail(c, "pickle protocol %d at byte %zu is unknown", r.b[r.pos], at);
            r.pos++;
            break;
        case 0x95: /* FRAME: framing only */
            if (need(c, &r, 8, "FRAME") != 0) return NULL;
            r.pos += 8;
            break;
        case '.': /* STOP */
            v = pop(c, at);
            if (!v) return NULL;
            *pos = r.pos;
            return v;
        case '(': /* MARK */
            if (grow((void **)&c->marks, &c->cap_marks, c->n_marks + 1, sizeof *c->marks,
                     PK_MAX_DEPTH) != 0)
                return pk_fail(c,
                               "more than %d nested MARKs at byte %zu: nesting too deep for a "
                               "state_dict (a hostile file?)",
                               PK_MAX_DEPTH, at);
            c->marks[c->n_marks++] = c->sp;
            c->run_len = 0; /* what follows is a batch of siblings */
            break;
        case '}':
            if (push(c, new_value(c, PK_DICT))) return NULL;
            break;
        case ']':
            if (push(c, new_value(c, PK_LIST))) return NULL;
            break;
        case ')':
            if (push(c, new_value(c, PK_TUPLE))) return NULL;
            break;
        case 'N':
            if (push(c, new_value(c, PK_NONE))) return NULL;
            break;
        case 0x88:
        case 0x89:
            v = new_value(c, PK_BOOL);
            if (v) v->i = op == 0x88;
            if (push(c, v)) return NULL;
            break;
        case 'J': /* BININT */
            if (need(c, &r, 4, "BININT") != 0) return NULL;
            v = make_int(c, (int32_t)(uint32_t)le(r.b + r.pos, 4));
            r.pos += 4;
            if (push(c, v)) return NULL;
            break;
        case 'K':
            if (need(c, &r, 1, "BININT1") != 0) return NULL;
            if (push(c, make_int(c, r.b[r.pos++]))) return NULL;
            break;
        case 'M':
            if (need(c, &r, 2, "BININT2") != 0) return NULL;
            v = make_int(c, (int64_t)le(r.b + r.pos, 2));
            r.pos += 2;
            if (push(c, v)) return NULL;
            break;
        case 0x8a: /* LONG1 */
            if (need(c, &r, 1, "LONG1") != 0) return NULL;
            n = r.b[r.pos++];
            if (push(c, make_long(c, &r, n))) return NULL;
            break;
        case 0x8b: /* LONG4 */
            if (need(c, &r, 4, "LONG4") != 0) return NULL;
            n = (size_t)le(r.b + r.pos, 4);
            r.pos += 4;
            if (n > 1024) return pk_fail(c, "LONG4 of %zu bytes at byte %zu", n, at);
            if (push(c, make_long(c, &r, n))) return NULL;
            break;
        case 'G': { /* BINFLOAT: big-endian double */
            if (need(c, &r, 8, "BINFLOAT") != 0) return NULL;
            uint64_t u = 0;
            for (int i = 0; i < 8; i++) u = u << 8 | r.b[r.pos + i];
            r.pos += 8;
            v = new_value(c, PK_FLOAT);
            if (v) memcpy(&v->f, &u, 8);
            if (push(c, v)) return NULL;
            break;
        }
        case 'X':   /* BINUNICODE */
        case 'T':   /* BINSTRING (Python 2 str) */
        case 'B': { /* BINBYTES */
            if (need(c, &r, 4, "a string length") != 0) return NULL;
            uint64_t l = le(r.b + r.pos, 4);
            r.pos += 4;
            if (push(c, make_str(c, &r, l, "BINUNICODE"))) return NULL;
            break;
        }
        case 0x8c:  /* SHORT_BINUNICODE */
        case 'U':   /* SHORT_BINSTRING */
        case 'C': { /* SHORT_BINBYTES */
            if (need(c, &r, 1, "a string length") != 0) return NULL;
            uint64_t l = r.b[r.pos++];
            if (push(c, make_str(c, &r, l, "SHORT_BINUNICODE"))) return NULL;
            break;
        }
        case 0x8d:   /* BINUNICODE8 */
        case 0x8e: { /* BINBYTES8 */
            if (need(c, &r, 8, "a string length") != 0) return NULL;
            uint64_t l = le(r.b + r.pos, 8);
            r.pos += 8;
            if (push(c, make_str(c, &r, l, "BINUNICODE8"))) return NULL;
            break;
        }
        case 'c': { /* GLOBAL */
            char module[256], name[256];
            if (read_line(c, &r, module, sizeof module) || read_line(c, &r, name, sizeof name))
                return NULL;
            if (push(c, make_global(c, module, name, at))) return NULL;
            break;
        }
        case 0x93: /* STACK_GLOBAL */
            b = pop(c, at);
            a = b ? pop(c, at) : NULL;
            if (!a) return NULL;
            if (a->kind != PK_STR || b->kind != PK_STR)
                return pk_fail(c, "STACK_GLOBAL at byte %zu without module and name strings", at);
            if (push(c, make_global(c, a->s, b->s, at))) return NULL;
            break;
        case 'q': /* BINPUT */
            if (need(c, &r, 1, "BINPUT") != 0) return NULL;
            if (memo_put(c, r.b[r.pos++], top(c, at), at)) return NULL;
            break;
        case 'r': /* LONG_BINPUT */
            if (need(c, &r, 4, "LONG_BINPUT") != 0) return NULL;
            n = (size_t)le(r.b + r.pos, 4);
            r.pos += 4;
            if (memo_put(c, n, top(c, at), at)) return NULL;
            break;
        case 0x94: /* MEMOIZE */
            if (memo_put(c, c->n_memo_used, top(c, at), at)) return NULL;
            break;
        case 'h': /* BINGET */
            if (need(c, &r, 1, "BINGET") != 0) return NULL;
            if (push(c, memo_get(c, r.b[r.pos++], at))) return NULL;
            break;
        case 'j': /* LONG_BINGET */
            if (need(c, &r, 4, "LONG_BINGET") != 0) return NULL;
            n = (size_t)le(r.b + r.pos, 4);
            r.pos += 4;
            if (push(c, memo_get(c, n, at))) return NULL;
            break;
        case 't': /* TUPLE */
            if (pop_mark(c, at, &first, &n)) return NULL;
            if (push(c, make_tuple(c, first, n))) return NULL;
            break;
        case 0x85:
        case 0x86:
        case 0x87: { /* TUPLE1..3 */
            size_t k = (size_t)(op - 0x84);
            size_t floor = c->n_marks ? c->marks[c->n_marks - 1] : 0;
            if (c->sp < floor + k)
                return pk_fail(c, "TUPLE%zu at byte %zu: stack underflow", k, at);
            c->sp -= k;
            if (push(c, make_tuple(c, c->sp, k))) return NULL;
            break;
        }
        case 'a': /* APPEND */
            b = pop(c, at);
            a = b ? top(c, at) : NULL;
            if (!a) return NULL;
            if (a->kind != PK_LIST) return pk_fail(c, "APPEND at byte %zu to a non-list", at);
            if (add_item(c, a, b)) return NULL;
            break;
        case 'e': /* APPENDS */
            if (pop_mark(c, at, &first, &n)) return NULL;
            a = top(c, at);
            if (!a) return NULL;
            if (a->kind != PK_LIST) return pk_fail(c, "APPENDS at byte %zu to a non-list", at);
            for (size_t i = 0; i < n; i++)
                if (add_item(c, a, c->stack[first + i])) return NULL;
            break;
        case 's': /* SETITEM */
            b = pop(c, at);
            a = b ? pop(c, at) : NULL;
            v = a ? top(c, at) : NULL;
            if (!v) return NULL;
            if (v->kind != PK_DICT) return pk_fail(c, "SETITEM at byte %zu on a non-dict", at);
            if (add_item(c, v, a) || add_item(c, v, b)) return NULL;
            break;
        case 'u': /* SETITEMS */
            if (pop_mark(c, at, &first, &n)) return NULL;
            v = top(c, at);
            if (!v) return NULL;
            if (v->kind != PK_DICT || n % 2)
                return pk_fail(c, "SETITEMS at byte %zu on a non-dict or with an odd count", at);
            for (size_t i = 0; i < n; i++)
                if (add_item(c, v, c->stack[first + i])) return NULL;
            break;
        case 'R': /* REDUCE */
            b = pop(c, at);
            a = b ? pop(c, at) : NULL;
            if (!a) return NULL;
            if (push(c, reduce(c, a, b, at))) return NULL;
            break;
        case 'b': /* BUILD: a module's state_dict carries _metadata; ignored */
            b = pop(c, at);
            a = b ? top(c, at) : NULL;
            if (!a) return NULL;
            if ((a->kind != PK_DICT && a->kind != PK_TENSOR) ||
                (b->kind != PK_DICT && b->kind != PK_NONE && b->kind != PK_TUPLE))
                return pk_fail(c,
                               "BUILD at byte %zu sets the state of something that is not a "
                               "dict or tensor",
                               at);
            break;
        case 'Q': /* BINPERSID */
            a = pop(c, at);
            if (!a) return NULL;
            if (push(c, persistent_load(c, a, legacy, at))) return NULL;
            break;
        case '0': /* POP */
            if (c->n_marks && c->marks[c->n_marks - 1] == c->sp) {
                c->n_marks--; /* pops a MARK */
            } else if (!pop(c, at)) {
                return NULL;
            }
            break;
        case '1': /* POP_MARK */
            if (pop_mark(c, at, &first, &n)) return NULL;
            break;
        case '2': /* DUP */
            a = top(c, at);
            if (!a || push(c, a)) return NULL;
            break;
        default:
            return pk_fail(c,
                           "refused pickle opcode 0x%02x %s at byte %zu: a state_dict of "
                           "tensors needs none of it (corrupt file, or not a plain "
                           "state_dict)",
                           op, opcode_name(op), at);
        }
    }
    return NULL;
}
