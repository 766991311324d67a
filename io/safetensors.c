/* io/safetensors.c - safetensors reader (mmap + checked JSON header) and writer.
 * See safetensors.h for the format and the contract; the header's JSON is
 * read and written by io/json.h. */
#include "io/safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/log.h"
#include "io/json.h"

/* Name index: open addressing over FNV-1a, slots hold entry index + 1 (0 =
 * empty). Keeps lookups (and the duplicate check while parsing) O(1), so a
 * header of n tensors parses in O(n); a linear scan per name was O(n^2)
 * (40,000 empty tensors took 20 s). */
typedef struct name_index {
    int *slot;
    size_t cap; /* power of two, or 0 */
} name_index;

struct sg_st_file {
    char *path;
    const unsigned char *map;
    size_t size;
    int mapped;                /* 1: map is our mmap (unmapped on close); 0: the caller's buffer */
    const unsigned char *data; /* start of the data section */
    size_t data_size;
    sg_st_tensor *t;
    int n, cap;
    char **meta_k, **meta_v;
    int n_meta, cap_meta;
    name_index t_idx, m_idx;
};

static uint64_t name_hash(const char *s) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 0x100000001b3ull;
    return h;
}

static const char *entry_name(const sg_st_file *f, int meta, int i) {
    return meta ? f->meta_k[i] : f->t[i].name;
}

/* Index of name among the tensors (meta = 0) or metadata keys (meta = 1), or -1. */
static int index_find(const sg_st_file *f, int meta, const char *name) {
    const name_index *x = meta ? &f->m_idx : &f->t_idx;
    if (!x->cap) return -1;
    for (size_t i = name_hash(name) & (x->cap - 1);; i = (i + 1) & (x->cap - 1)) {
        int e = x->slot[i];
        if (e == 0) return -1;
        if (strcmp(entry_name(f, meta, e - 1), name) == 0) return e - 1;
    }
}

static void index_put(name_index *x, const char *name, int e) {
    size_t i = name_hash(name) & (x->cap - 1);
    while (x->slot[i]) i = (i + 1) & (x->cap - 1);
    x->slot[i] = e + 1;
}

/* Adds entry e (already stored, the newest, so count = e + 1) to the index,
 * growing it to keep the load under one half. */
static void index_add(sg_st_file *f, int meta, int e) {
    name_index *x = meta ? &f->m_idx : &f->t_idx;
    if ((size_t)(e + 1) * 2 > x->cap) {
        free(x->slot);
        x->cap = x->cap ? 2 * x->cap : 64;
        while ((size_t)(e + 1) * 2 > x->cap) x->cap *= 2;
        x->slot = calloc(x->cap, sizeof *x->slot);
        SG_CHECK(x->slot, "out of host memory");
        for (int k = 0; k < e; k++) index_put(x, entry_name(f, meta, k), k);
    }
    index_put(x, entry_name(f, meta, e), e);
}

/* ---------------- reader ---------------- */

/* Names from a corrupt file may hold anything: control characters become
 * '?' in messages. */
static void sanitize(char *msg) {
    for (char *c = msg; *c; c++)
        if ((unsigned char)*c < 0x20 || (unsigned char)*c == 0x7f) *c = '?';
}

static sg_status st_error(const char *path, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static sg_status st_error(const char *path, const char *fmt, ...) {
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    sanitize(msg);
    SG_ERROR("safetensors file %s: %s", path, msg);
    return SG_ERR_RUNTIME;
}

/* While a file is being opened: the first reason it is refused, kept for the
 * caller (sg_st_open logs it, sg_st_open_why hands it back). */
typedef struct st_why {
    char *buf;
    size_t cap;
    int set;
} st_why;

static int st_fail(st_why *w, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int st_fail(st_why *w, const char *fmt, ...) {
    if (w->set || !w->cap) return -1;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(w->buf, w->cap, fmt, ap);
    va_end(ap);
    sanitize(w->buf);
    w->set = 1;
    return -1;
}

static int dtype_parse(const char *s, sg_st_dtype *d, size_t *el) {
    if (strcmp(s, "F32") == 0) {
        *d = SG_ST_F32;
        *el = 4;
        return 0;
    }
    if (strcmp(s, "I64") == 0) {
        *d = SG_ST_I64;
        *el = 8;
        return 0;
    }
    return -1;
}

/* ---------------- the JSON header ---------------- */

/* The header is read with io/json.h's cursor: tensors go straight into the
 * table, nothing else is kept. Its structure is never deeper than
 * {name: {shape: [...]}}; \u0000 and lone surrogates are refused, since they
 * would let two different names read as one. Names and metadata keys are
 * unique by the name indexes above (their messages say which kind repeats).
 * Errors keep the form "<what> at header byte <N>". */
static const sg_json_opts hdr_opts = {
    .max_bytes = SG_ST_MAX_HEADER,
    .max_depth = 3,
    .flags = SG_JSON_NO_NUL | SG_JSON_NO_LONE_SURROGATE,
};

/* The reader's error as "<what> at header byte <N>" in buf. */
static const char *hdr_err(const sg_json_rd *r, char *buf, size_t cap) {
    snprintf(buf, cap, "%s at header byte %zu", sg_json_rd_error(r), sg_json_rd_error_offset(r));
    return buf;
}

/* [int, ...] of non-negative integers into v (at most cap); returns the
 * count, or -1 with the reason in the reader. */
static int hdr_int_array(sg_json_rd *r, int64_t *v, int cap) {
    sg_json_tok t = sg_json_rd_next(r);
    if (t != SG_JSON_T_ARRAY) {
        if (t != SG_JSON_T_ERROR) sg_json_rd_fail(r, "expected '['");
        return -1;
    }
    int n = 0;
    for (;;) {
        t = sg_json_rd_next(r);
        if (t == SG_JSON_T_ARRAY_END) return n;
        int64_t x;
        if (t == SG_JSON_T_ERROR || sg_json_rd_int(r, &x) != SG_OK) return -1;
        if (x < 0) {
            sg_json_rd_fail(r, "negative number");
            return -1;
        }
        if (n >= cap) {
            sg_json_rd_fail(r, "too many dimensions");
            return -1;
        }
        v[n++] = x;
    }
}

/* One tensor's entry (the reader is after its key); on success f->t[] owns
 * name. 0, or -1 (reason in w, or in the reader). */
static int parse_tensor(sg_st_file *f, sg_json_rd *r, char *name, st_why *w) {
    char *dtype = NULL;
    int64_t shape[SG_ST_MAX_DIMS], offs[2];
    int ndim = -1, noffs = -1;
    sg_json_tok tk = sg_json_rd_next(r);
    if (tk != SG_JSON_T_OBJECT) {
        if (tk != SG_JSON_T_ERROR) sg_json_rd_fail(r, "expected '{'");
        return -1;
    }
    while ((tk = sg_json_rd_next(r)) == SG_JSON_T_KEY) {
        const char *k = sg_json_rd_str(r, NULL);
        if (strcmp(k, "dtype") == 0) {
            if (sg_json_rd_next(r) != SG_JSON_T_STRING) {
                sg_json_rd_fail(r, "expected a string");
                break;
            }
            free(dtype); /* a repeated field: the last one counts, as it always did */
            dtype = sg_json_rd_strdup(r);
        } else if (strcmp(k, "shape") == 0) {
            if ((ndim = hdr_int_array(r, shape, SG_ST_MAX_DIMS)) < 0) break;
        } else if (strcmp(k, "data_offsets") == 0) {
            if ((noffs = hdr_int_array(r, offs, 2)) < 0) break;
        } else {
            st_fail(w, "tensor '%s': unknown field '%s' in its header entry", name, k);
            free(dtype);
            return -1;
        }
    }
    if (tk != SG_JSON_T_OBJECT_END) { /* the reader has the reason */
        free(dtype);
        return -1;
    }
    if (!dtype || ndim < 0 || noffs != 2) {
        free(dtype);
        return st_fail(w, "tensor '%s': header entry needs dtype, shape and 2 data_offsets", name);
    }
    sg_st_tensor t;
    memset(&t, 0, sizeof t);
    size_t el = 0;
    if (dtype_parse(dtype, &t.dtype, &el) != 0) {
        st_fail(w,
                "tensor '%s' has dtype %s; segtrain reads F32 and I64 only "
                "(convert it, e.g. in PyTorch: t.float())",
                name, dtype);
        free(dtype);
        return -1;
    }
    free(dtype);
    t.ndim = ndim;
    t.count = 1;
    for (int i = 0; i < ndim; i++) {
        t.shape[i] = shape[i];
        if (shape[i] != 0 && t.count > SIZE_MAX / 16 / (size_t)shape[i])
            return st_fail(w, "tensor '%s': shape too large", name);
        t.count *= (size_t)shape[i];
    }
    t.nbytes = t.count * el;
    if (offs[0] > offs[1] || (uint64_t)offs[1] > f->data_size)
        return st_fail(w,
                       "tensor '%s': data_offsets [%lld, %lld] outside the %zu-byte data "
                       "section (truncated or corrupt file)",
                       name, (long long)offs[0], (long long)offs[1], f->data_size);
    if ((uint64_t)(offs[1] - offs[0]) != t.nbytes)
        return st_fail(w, "tensor '%s': %lld bytes in data_offsets but shape x dtype needs %zu",
                       name, (long long)(offs[1] - offs[0]), t.nbytes);
    t.offset = (size_t)offs[0];
    t.data = f->data + t.offset;
    t.name = name;
    if (f->n == f->cap) {
        f->cap = f->cap ? 2 * f->cap : 64;
        f->t = realloc(f->t, (size_t)f->cap * sizeof *f->t);
        SG_CHECK(f->t, "out of host memory");
    }
    f->t[f->n++] = t;
    index_add(f, 0, f->n - 1);
    return 0;
}

static int parse_meta(sg_st_file *f, sg_json_rd *r, st_why *w) {
    sg_json_tok t = sg_json_rd_next(r);
    if (t != SG_JSON_T_OBJECT) {
        if (t != SG_JSON_T_ERROR) sg_json_rd_fail(r, "__metadata__ must be an object");
        return -1;
    }
    while ((t = sg_json_rd_next(r)) == SG_JSON_T_KEY) {
        char *k = sg_json_rd_strdup(r);
        if ((t = sg_json_rd_next(r)) != SG_JSON_T_STRING) {
            free(k);
            if (t != SG_JSON_T_ERROR) sg_json_rd_fail(r, "__metadata__ values must be strings");
            return -1;
        }
        char *v = sg_json_rd_strdup(r);
        if (index_find(f, 1, k) >= 0) { /* which one would count? */
            st_fail(w, "metadata key '%s' appears twice in the header (corrupt file)", k);
            free(k);
            free(v);
            return -1;
        }
        if (f->n_meta == f->cap_meta) {
            f->cap_meta = f->cap_meta ? 2 * f->cap_meta : 8;
            f->meta_k = realloc(f->meta_k, (size_t)f->cap_meta * sizeof(char *));
            f->meta_v = realloc(f->meta_v, (size_t)f->cap_meta * sizeof(char *));
            SG_CHECK(f->meta_k && f->meta_v, "out of host memory");
        }
        f->meta_k[f->n_meta] = k;
        f->meta_v[f->n_meta++] = v;
        index_add(f, 1, f->n_meta - 1);
    }
    return t == SG_JSON_T_OBJECT_END ? 0 : -1; /* else the reader has the reason */
}

static int cmp_by_offset(const void *a, const void *b) {
    const sg_st_tensor *x = a, *y = b;
    return x->offset < y->offset ? -1 : x->offset > y->offset;
}

size_t sg_st_find_nonfinite(const void *data, size_t count) {
    const unsigned char *p = data;
    size_t i = 0;
    /* blocks without a branch per element (the compiler vectorises the OR),
     * then the exact element only in the block that has one */
    while (i < count) {
        size_t n = count - i < 4096 ? count - i : 4096;
        uint32_t bad = 0;
        for (size_t k = 0; k < n; k++) {
            uint32_t v;
            memcpy(&v, p + 4 * (i + k), 4); /* the data may be unaligned */
            bad |= (uint32_t)((v & 0x7f800000u) == 0x7f800000u);
        }
        if (bad)
            for (size_t k = 0; k < n; k++) {
                uint32_t v;
                memcpy(&v, p + 4 * (i + k), 4);
                if ((v & 0x7f800000u) == 0x7f800000u) return i + k;
            }
        i += n;
    }
    return count;
}

const char *sg_st_nonfinite_name(const void *data, size_t index) {
    uint32_t v;
    memcpy(&v, (const unsigned char *)data + 4 * index, 4);
    if (v & 0x007fffffu) return "NaN";
    return (v & 0x80000000u) ? "-Inf" : "+Inf";
}

sg_file_kind sg_file_kind_of(const void *head, size_t n) {
    const unsigned char *h = head;
    if (n >= 4 && memcmp(h, "PK\x03\x04", 4) == 0) return SG_FILE_PTH_ZIP;
    /* a pickle (the legacy torch.save format starts with one): PROTO 2..5 */
    if (n >= 2 && h[0] == 0x80 && h[1] >= 2 && h[1] <= 5) return SG_FILE_PTH_PICKLE;
    return SG_FILE_OTHER;
}

/* Every F32 tensor's values are finite: a NaN or Inf weight would train or
 * evaluate to garbage without a word (a NaN in every later checkpoint).
 * 0, or -1 with the tensor, the element and the remedy in w. */
static int check_finite(const sg_st_file *f, st_why *w) {
    for (int i = 0; i < f->n; i++) {
        const sg_st_tensor *t = &f->t[i];
        if (t->dtype != SG_ST_F32) continue;
        size_t k = sg_st_find_nonfinite(t->data, t->count);
        if (k < t->count)
            return st_fail(w,
                           "tensor '%s' holds %s at element %zu of %zu: non-finite weights "
                           "(diverged training or a corrupt file) are refused; use an earlier "
                           "checkpoint or re-export the weights",
                           t->name, sg_st_nonfinite_name(t->data, k), k, t->count);
    }
    return 0;
}

/* Parses and checks f->map[0..size). 0, or -1 with the reason in w. */
static int parse_file(sg_st_file *f, st_why *w) {
    size_t size = f->size;
    sg_file_kind kind = sg_file_kind_of(f->map, size);
    if (kind != SG_FILE_OTHER)
        return st_fail(w,
                       "this is a PyTorch checkpoint (torch.save, %s), not safetensors: convert "
                       "it first with `segtrain convert %s OUT.safetensors` and pass "
                       "OUT.safetensors",
                       kind == SG_FILE_PTH_ZIP ? "a zip archive" : "a pickle", f->path);
    if (size < 8) return st_fail(w, "only %zu bytes: truncated or not a safetensors file", size);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = (hlen << 8) | f->map[i];
    if (hlen > SG_ST_MAX_HEADER)
        return st_fail(w,
                       "header length %llu is above the %u-byte limit (16 MiB): corrupt, or "
                       "not a safetensors file",
                       (unsigned long long)hlen, (unsigned)SG_ST_MAX_HEADER);
    if (hlen > size - 8 || hlen < 2)
        return st_fail(w,
                       "header length %llu does not fit the %zu-byte file: truncated or not a "
                       "safetensors file",
                       (unsigned long long)hlen, size);
    f->data = f->map + 8 + hlen;
    f->data_size = size - 8 - (size_t)hlen;
    sg_json_rd *r = sg_json_rd_open((const char *)f->map + 8, (size_t)hlen, &hdr_opts);
    char err[400];
    int rc = 0;
    sg_json_tok t = sg_json_rd_next(r);
    if (t != SG_JSON_T_OBJECT) {
        if (t != SG_JSON_T_ERROR) sg_json_rd_fail(r, "header is not a JSON object");
        rc = -1;
    }
    while (rc == 0 && (t = sg_json_rd_next(r)) == SG_JSON_T_KEY) {
        char *k = sg_json_rd_strdup(r);
        if (strcmp(k, "__metadata__") == 0) {
            free(k);
            if (parse_meta(f, r, w) != 0) rc = -1;
            continue;
        }
        if (index_find(f, 0, k) >= 0) {
            st_fail(w, "tensor '%s' appears twice in the header (corrupt file)", k);
            free(k);
            rc = -1;
            break;
        }
        if (parse_tensor(f, r, k, w) != 0) {
            if (sg_json_rd_error(r))
                st_fail(w, "corrupt header (%s) in the entry of tensor '%s'",
                        hdr_err(r, err, sizeof err), k);
            free(k);
            rc = -1;
        }
    }
    /* the object closed: only white space may follow */
    if (rc == 0 && t == SG_JSON_T_OBJECT_END) t = sg_json_rd_next(r);
    if (sg_json_rd_error(r)) rc = st_fail(w, "corrupt header: %s", hdr_err(r, err, sizeof err));
    sg_json_rd_close(r);
    if (rc != 0) return -1;
    if (f->n > 1) {
        sg_st_tensor *s = malloc((size_t)f->n * sizeof *s);
        SG_CHECK(s, "out of host memory");
        memcpy(s, f->t, (size_t)f->n * sizeof *s);
        qsort(s, (size_t)f->n, sizeof *s, cmp_by_offset);
        for (int i = 1; i < f->n && rc == 0; i++)
            if (s[i].offset < s[i - 1].offset + s[i - 1].nbytes)
                rc = st_fail(w, "tensors '%s' and '%s' overlap in the data section (corrupt file)",
                             s[i - 1].name, s[i].name);
        free(s);
    }
    if (rc == 0) rc = check_finite(f, w);
    return rc;
}

static sg_st_file *open_file(const char *path, char *why, size_t cap, int log) {
    char own[768];
    st_why w = {why ? why : own, why ? cap : sizeof own, 0};
    if (w.cap) w.buf[0] = 0;
    sg_st_file *f = NULL;
    int fd = open(path, O_RDONLY);
    struct stat sb;
    if (fd < 0) {
        st_fail(&w, "cannot open: %s; check the path", strerror(errno));
    } else if (fstat(fd, &sb) != 0) {
        st_fail(&w, "fstat failed: %s", strerror(errno));
    } else if (!S_ISREG(sb.st_mode)) {
        st_fail(&w, "not a regular file");
    } else if ((size_t)sb.st_size < 8) {
        st_fail(&w, "only %zu bytes: truncated or not a safetensors file", (size_t)sb.st_size);
    } else {
        void *map = mmap(NULL, (size_t)sb.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (map == MAP_FAILED) {
            st_fail(&w, "mmap of %zu bytes failed: %s", (size_t)sb.st_size, strerror(errno));
        } else {
            f = calloc(1, sizeof *f);
            SG_CHECK(f, "out of host memory");
            f->path = strdup(path);
            SG_CHECK(f->path, "out of host memory");
            f->map = map;
            f->size = (size_t)sb.st_size;
            f->mapped = 1;
            if (parse_file(f, &w) != 0) {
                sg_st_close(f);
                f = NULL;
            }
        }
    }
    if (fd >= 0) close(fd);
    if (!f && log) SG_ERROR("safetensors file %s: %s", path, w.buf);
    return f;
}

sg_st_file *sg_st_open(const char *path) { return open_file(path, NULL, 0, 1); }

sg_st_file *sg_st_open_why(const char *path, char *why, size_t cap) {
    return open_file(path, why, cap, 0);
}

sg_st_file *sg_st_open_memory(const void *data, size_t size, const char *name, char *why,
                              size_t cap) {
    char own[768];
    st_why w = {why ? why : own, why ? cap : sizeof own, 0};
    if (w.cap) w.buf[0] = 0;
    sg_st_file *f = calloc(1, sizeof *f);
    SG_CHECK(f, "out of host memory");
    f->path = strdup(name ? name : "(memory)");
    SG_CHECK(f->path, "out of host memory");
    f->map = data;
    f->size = size;
    f->mapped = 0;
    if (parse_file(f, &w) != 0) {
        sg_st_close(f);
        return NULL;
    }
    return f;
}

void sg_st_close(sg_st_file *f) {
    if (!f) return;
    if (f->map && f->mapped) munmap((void *)f->map, f->size);
    for (int i = 0; i < f->n; i++) free((char *)f->t[i].name);
    for (int i = 0; i < f->n_meta; i++) {
        free(f->meta_k[i]);
        free(f->meta_v[i]);
    }
    free(f->meta_k);
    free(f->meta_v);
    free(f->t);
    free(f->t_idx.slot);
    free(f->m_idx.slot);
    free(f->path);
    free(f);
}

const char *sg_st_path(const sg_st_file *f) { return f->path; }
int sg_st_count(const sg_st_file *f) { return f->n; }
const sg_st_tensor *sg_st_get(const sg_st_file *f, int i) {
    return (i >= 0 && i < f->n) ? &f->t[i] : NULL;
}

const sg_st_tensor *sg_st_find(const sg_st_file *f, const char *name) {
    int i = index_find(f, 0, name);
    return i >= 0 ? &f->t[i] : NULL;
}

const char *sg_st_meta(const sg_st_file *f, const char *key) {
    int i = index_find(f, 1, key);
    return i >= 0 ? f->meta_v[i] : NULL;
}

int sg_st_meta_count(const sg_st_file *f) { return f->n_meta; }
void sg_st_meta_get(const sg_st_file *f, int i, const char **key, const char **value) {
    *key = f->meta_k[i];
    *value = f->meta_v[i];
}

sg_status sg_st_read_f32(const sg_st_file *f, const sg_st_tensor *t, float *dst, size_t count) {
    if (t->dtype != SG_ST_F32 || t->count != count)
        return st_error(f->path, "tensor '%s': expected %zu F32 values, file has %zu %s", t->name,
                        count, t->count, t->dtype == SG_ST_F32 ? "F32" : "I64");
    memcpy(dst, t->data, t->nbytes);
    return SG_OK;
}

sg_status sg_st_read_i64(const sg_st_file *f, const sg_st_tensor *t, int64_t *dst, size_t count) {
    if (t->dtype != SG_ST_I64 || t->count != count)
        return st_error(f->path, "tensor '%s': expected %zu I64 values, file has %zu %s", t->name,
                        count, t->count, t->dtype == SG_ST_F32 ? "F32" : "I64");
    memcpy(dst, t->data, t->nbytes);
    return SG_OK;
}

/* ---------------- writer ---------------- */

typedef struct wt {
    char *name;
    sg_st_dtype dtype;
    int ndim;
    int64_t shape[SG_ST_MAX_DIMS];
    size_t nbytes;
    void *data;
} wt;

struct sg_st_writer {
    wt *t;
    int n, cap;
    char **mk, **mv;
    int n_meta, cap_meta;
};

sg_st_writer *sg_st_writer_create(void) {
    sg_st_writer *w = calloc(1, sizeof *w);
    SG_CHECK(w, "out of host memory");
    return w;
}

void sg_st_writer_destroy(sg_st_writer *w) {
    if (!w) return;
    for (int i = 0; i < w->n; i++) {
        free(w->t[i].name);
        free(w->t[i].data);
    }
    for (int i = 0; i < w->n_meta; i++) {
        free(w->mk[i]);
        free(w->mv[i]);
    }
    free(w->t);
    free(w->mk);
    free(w->mv);
    free(w);
}

sg_status sg_st_writer_add(sg_st_writer *w, const char *name, sg_st_dtype dtype, int ndim,
                           const int64_t *shape, const void *data) {
    if (!name || !*name || strcmp(name, "__metadata__") == 0 || ndim < 0 || ndim > SG_ST_MAX_DIMS) {
        SG_ERROR("safetensors writer: invalid tensor name '%s' or ndim %d", name ? name : "(null)",
                 ndim);
        return SG_ERR_RUNTIME;
    }
    for (int i = 0; i < w->n; i++)
        if (strcmp(w->t[i].name, name) == 0) {
            SG_ERROR("safetensors writer: tensor '%s' added twice", name);
            return SG_ERR_RUNTIME;
        }
    if (w->n == w->cap) {
        w->cap = w->cap ? 2 * w->cap : 64;
        w->t = realloc(w->t, (size_t)w->cap * sizeof *w->t);
        SG_CHECK(w->t, "out of host memory");
    }
    wt *t = &w->t[w->n];
    memset(t, 0, sizeof *t);
    t->name = strdup(name);
    t->dtype = dtype;
    t->ndim = ndim;
    size_t count = 1;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0) {
            SG_ERROR("safetensors writer: tensor '%s' has a negative dimension", name);
            free(t->name);
            return SG_ERR_RUNTIME;
        }
        t->shape[i] = shape[i];
        count *= (size_t)shape[i];
    }
    t->nbytes = count * (dtype == SG_ST_F32 ? 4 : 8);
    t->data = malloc(t->nbytes ? t->nbytes : 1);
    SG_CHECK(t->name && t->data, "out of host memory adding tensor '%s' (%zu bytes)", name,
             t->nbytes);
    if (t->nbytes) memcpy(t->data, data, t->nbytes);
    w->n++;
    return SG_OK;
}

sg_status sg_st_writer_meta(sg_st_writer *w, const char *key, const char *value) {
    for (int i = 0; i < w->n_meta; i++)
        if (strcmp(w->mk[i], key) == 0) {
            free(w->mv[i]);
            w->mv[i] = strdup(value);
            return SG_OK;
        }
    if (w->n_meta == w->cap_meta) {
        w->cap_meta = w->cap_meta ? 2 * w->cap_meta : 8;
        w->mk = realloc(w->mk, (size_t)w->cap_meta * sizeof(char *));
        w->mv = realloc(w->mv, (size_t)w->cap_meta * sizeof(char *));
        SG_CHECK(w->mk && w->mv, "out of host memory");
    }
    w->mk[w->n_meta] = strdup(key);
    w->mv[w->n_meta++] = strdup(value);
    return SG_OK;
}

sg_status sg_st_writer_write_stream(sg_st_writer *w, FILE *out, const char *name) {
    /* The header through io/json.h's writer, in the form every segtrain
     * file has had (checksums and tests compare its bytes): no white space,
     * control characters as \u00XX, the metadata first, tensors in the
     * order they were added, then spaces up to a multiple of 8 bytes. */
    sg_json h = {0};
    h.flags = SG_JSON_W_U_ESCAPES;
    sg_json_begin(&h);
    if (w->n_meta) {
        sg_json_obj_begin(&h, "__metadata__");
        for (int i = 0; i < w->n_meta; i++) sg_json_str(&h, w->mk[i], w->mv[i]);
        sg_json_obj_end(&h);
    }
    size_t off = 0;
    for (int i = 0; i < w->n; i++) {
        const wt *t = &w->t[i];
        long long shape[SG_ST_MAX_DIMS], offs[2] = {(long long)off, (long long)(off + t->nbytes)};
        for (int d = 0; d < t->ndim; d++) shape[d] = (long long)t->shape[d];
        sg_json_obj_begin(&h, t->name);
        sg_json_str(&h, "dtype", t->dtype == SG_ST_F32 ? "F32" : "I64");
        sg_json_int_array(&h, "shape", shape, t->ndim);
        sg_json_int_array(&h, "data_offsets", offs, 2);
        sg_json_obj_end(&h);
        off += t->nbytes;
    }
    sg_json_end(&h);
    static const char spaces[] = "       "; /* the most padding: 7 */
    size_t pad = (8 - h.len % 8) % 8, hlen = h.len + pad;
    unsigned char len8[8];
    for (int i = 0; i < 8; i++) len8[i] = (unsigned char)(((uint64_t)hlen >> (8 * i)) & 0xFF);
    int ok = fwrite(len8, 1, 8, out) == 8 && fwrite(h.buf, 1, h.len, out) == h.len &&
             fwrite(spaces, 1, pad, out) == pad;
    for (int i = 0; ok && i < w->n; i++)
        if (w->t[i].nbytes) ok = fwrite(w->t[i].data, 1, w->t[i].nbytes, out) == w->t[i].nbytes;
    sg_json_free(&h);
    if (!ok || fflush(out) != 0) {
        int e = errno; /* kept for the caller (ENOSPC, EFBIG: its own hint) */
        SG_ERROR("safetensors: writing %s failed: %s; check free disk space and permissions", name,
                 strerror(e));
        errno = e;
        return SG_ERR_RUNTIME;
    }
    return SG_OK;
}

sg_status sg_st_writer_write(sg_st_writer *w, const char *path) {
    size_t len = strlen(path) + 8;
    char *tmp = malloc(len);
    SG_CHECK(tmp, "out of host memory");
    snprintf(tmp, len, "%s.tmp", path);
    FILE *out = fopen(tmp, "wb");
    if (!out) {
        SG_ERROR("safetensors: cannot create %s: %s; check the directory exists and is writable",
                 tmp, strerror(errno));
        free(tmp);
        return SG_ERR_RUNTIME;
    }
    sg_status rc = sg_st_writer_write_stream(w, out, tmp);
    if (rc == 0 && fsync(fileno(out)) != 0) {
        SG_ERROR("safetensors: fsync %s failed: %s", tmp, strerror(errno));
        rc = SG_ERR_RUNTIME;
    }
    if (fclose(out) != 0 && rc == 0) {
        SG_ERROR("safetensors: closing %s failed: %s", tmp, strerror(errno));
        rc = SG_ERR_RUNTIME;
    }
    if (rc == 0 && rename(tmp, path) != 0) {
        SG_ERROR("safetensors: rename %s -> %s failed: %s", tmp, path, strerror(errno));
        rc = SG_ERR_RUNTIME;
    }
    if (rc != 0) unlink(tmp);
    free(tmp);
    return rc;
}
