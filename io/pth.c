/* io/pth.c - see pth.h: the zip and legacy containers, finding the
 * state_dict in the unpickled object, copying tensors contiguous with type
 * conversion, and writing safetensors. */
#include "io/pth.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zip.h>

#include "core/log.h"
#include "io/pth_pickle.h"

#define MAX_PICKLE (64u << 20)
#define MAX_ENTRIES (1 << 20)
#define MAX_TOTAL_BYTES (INT64_C(16) << 30)
#define MAX_NAME 1000

struct sg_pth {
    char *name;
    pk_ctx *pk;
    const char *format;
    char wrapper[32];
    void *map; /* sg_pth_open's mapping */
    size_t map_len;
    uint8_t **owned; /* storage buffers read from the zip */
    size_t n_owned;
    pk_value **tv; /* the tensors, in state_dict order */
    sg_pth_tensor *t;
    int n, skipped;
};

void sg_pth_close(sg_pth *p) {
    if (!p) return;
    pk_free(p->pk);
    for (size_t i = 0; i < p->n_owned; i++) free(p->owned[i]);
    free(p->owned);
    free(p->tv);
    free(p->t);
    if (p->map) munmap(p->map, p->map_len);
    free(p->name);
    free(p);
}

int sg_pth_count(const sg_pth *p) { return p->n; }
const sg_pth_tensor *sg_pth_get(const sg_pth *p, int i) {
    return i >= 0 && i < p->n ? &p->t[i] : NULL;
}
const char *sg_pth_format(const sg_pth *p) { return p->format; }
const char *sg_pth_wrapper_key(const sg_pth *p) { return p->wrapper; }
int sg_pth_skipped(const sg_pth *p) { return p->skipped; }

/* ---- zip ---- */

static int zip_read_entry(sg_pth *p, zip_t *z, zip_int64_t idx, const char *ename, uint64_t expect,
                          uint8_t **out) {
    zip_stat_t st;
    if (zip_stat_index(z, (zip_uint64_t)idx, 0, &st) != 0 || !(st.valid & ZIP_STAT_SIZE)) {
        pk_fail(p->pk, "cannot read the zip entry %s: %s", ename, zip_strerror(z));
        return -1;
    }
    if (st.size != expect) {
        pk_fail(p->pk,
                "zip entry %s holds %llu bytes but the pickle declares %llu (corrupt or "
                "truncated file)",
                ename, (unsigned long long)st.size, (unsigned long long)expect);
        return -1;
    }
    uint8_t *buf = malloc(expect ? (size_t)expect : 1);
    if (!buf) {
        pk_fail(p->pk, "out of memory reading %s (%llu bytes)", ename, (unsigned long long)expect);
        return -1;
    }
    zip_file_t *f = zip_fopen_index(z, (zip_uint64_t)idx, 0);
    zip_uint64_t got = 0;
    while (f && got < expect) {
        zip_int64_t r = zip_fread(f, buf + got, expect - got);
        if (r <= 0) break;
        got += (zip_uint64_t)r;
    }
    if (!f || got != expect) {
        pk_fail(p->pk,
                "reading the zip entry %s failed after %llu of %llu bytes: %s (corrupt "
                "file)",
                ename, (unsigned long long)got, (unsigned long long)expect,
                f ? zip_file_strerror(f) : zip_strerror(z));
        if (f) zip_fclose(f);
        free(buf);
        return -1;
    }
    zip_fclose(f);
    *out = buf;
    return 0;
}

static pk_value *load_zip(sg_pth *p, const void *buf, size_t len) {
    zip_error_t zerr;
    zip_error_init(&zerr);
    zip_source_t *src = zip_source_buffer_create(buf, len, 0, &zerr);
    zip_t *z = src ? zip_open_from_source(src, ZIP_RDONLY | ZIP_CHECKCONS, &zerr) : NULL;
    if (!z) {
        pk_fail(p->pk, "not a readable zip archive: %s (corrupt or truncated file)",
                zip_error_strerror(&zerr));
        if (src) zip_source_free(src);
        zip_error_fini(&zerr);
        return NULL;
    }
    zip_error_fini(&zerr);
    pk_value *result = NULL;
    uint8_t *pkl = NULL;
    zip_int64_t n = zip_get_num_entries(z, 0), pkl_idx = -1;
    char prefix[512] = "";
    if (n < 0 || n > MAX_ENTRIES) {
        pk_fail(p->pk, "the zip archive has %lld entries (at most %d)", (long long)n, MAX_ENTRIES);
        goto done;
    }
    /* torch writes <name>/data.pkl, <name>/data/<key>, <name>/version */
    for (zip_int64_t i = 0; i < n && pkl_idx < 0; i++) {
        const char *e = zip_get_name(z, (zip_uint64_t)i, 0);
        const char *slash = e ? strchr(e, '/') : NULL;
        if (slash && strcmp(slash, "/data.pkl") == 0 && (size_t)(slash - e) < sizeof prefix - 32) {
            snprintf(prefix, sizeof prefix, "%.*s", (int)(slash - e), e);
            pkl_idx = i;
        }
    }
    if (pkl_idx < 0) {
        pk_fail(p->pk, "a zip archive without <name>/data.pkl: not a PyTorch checkpoint");
        goto done;
    }
    char ename[700];
    snprintf(ename, sizeof ename, "%s/byteorder", prefix);
    zip_int64_t bo = zip_name_locate(z, ename, 0);
    if (bo >= 0) {
        zip_stat_t st;
        uint8_t *order = NULL;
        if (zip_stat_index(z, (zip_uint64_t)bo, 0, &st) != 0 || st.size > 16 ||
            zip_read_entry(p, z, bo, ename, st.size, &order) != 0) {
            pk_fail(p->pk, "unreadable %s", ename);
            goto done;
        }
        int little = st.size == 6 && memcmp(order, "little", 6) == 0;
        free(order);
        if (!little) {
            pk_fail(p->pk, "the checkpoint was written on a big-endian machine: re-save it on a "
                           "little-endian one");
            goto done;
        }
    }
    zip_stat_t st;
    if (zip_stat_index(z, (zip_uint64_t)pkl_idx, 0, &st) != 0 || !(st.valid & ZIP_STAT_SIZE) ||
        st.size > MAX_PICKLE) {
        pk_fail(p->pk, "%s/data.pkl is larger than %u MiB or unreadable: not a state_dict", prefix,
                MAX_PICKLE >> 20);
        goto done;
    }
    snprintf(ename, sizeof ename, "%s/data.pkl", prefix);
    if (zip_read_entry(p, z, pkl_idx, ename, st.size, &pkl) != 0) goto done;
    size_t pos = 0;
    pk_value *obj = pk_load(p->pk, pkl, (size_t)st.size, &pos, 0);
    if (!obj) goto done;
    /* the storages: <name>/data/<key>, exactly numel * element size bytes */
    int64_t total = 0;
    for (size_t i = 0; i < pk_n_storages(p->pk); i++) {
        pk_value *s = pk_storage_at(p->pk, i);
        int64_t bytes = s->numel * pk_dtype_size((int)s->i);
        total += bytes;
        if (total > MAX_TOTAL_BYTES) {
            pk_fail(p->pk, "the storages hold more than %lld GiB (limit)",
                    (long long)(MAX_TOTAL_BYTES >> 30));
            goto done;
        }
        snprintf(ename, sizeof ename, "%s/data/%s", prefix, s->s);
        zip_int64_t idx = zip_name_locate(z, ename, 0);
        if (idx < 0) {
            pk_fail(p->pk, "storage '%s' has no zip entry %s (corrupt or truncated file)", s->s,
                    ename);
            goto done;
        }
        uint8_t *data = NULL;
        if (zip_read_entry(p, z, idx, ename, (uint64_t)bytes, &data) != 0) goto done;
        p->owned = realloc(p->owned, (p->n_owned + 1) * sizeof *p->owned);
        SG_CHECK(p->owned != NULL, "out of host memory");
        p->owned[p->n_owned++] = data;
        s->data = data;
    }
    result = obj;
done:
    free(pkl);
    zip_discard(z);
    return result;
}

/* ---- legacy ---- */

static pk_value *load_legacy(sg_pth *p, const uint8_t *buf, size_t len) {
    /* 0x1950a86a20f9469cfc6c, little-endian, as LONG1 */
    static const uint8_t magic[10] = {0x6c, 0xfc, 0x9c, 0x46, 0xf9, 0x20, 0x6a, 0xa8, 0x50, 0x19};
    size_t pos = 0;
    pk_value *m = pk_load(p->pk, buf, len, &pos, 1);
    if (!m) return NULL;
    if (m->kind != PK_BIGINT || m->len != 10 || memcmp(m->s, magic, 10) != 0)
        return pk_fail(p->pk, "a pickle, but without PyTorch's magic number: not a checkpoint");
    pk_value *proto = pk_load(p->pk, buf, len, &pos, 1);
    if (!proto) return NULL;
    if (proto->kind != PK_INT || proto->i != 1001)
        return pk_fail(p->pk, "legacy checkpoint protocol %lld (only 1001 is known)",
                       proto->kind == PK_INT ? (long long)proto->i : -1LL);
    pk_value *info = pk_load(p->pk, buf, len, &pos, 1);
    if (!info) return NULL;
    pk_value *little = pk_dict_get(info, "little_endian");
    if (!little || little->kind != PK_BOOL || !little->i)
        return pk_fail(p->pk, "the checkpoint was written on a big-endian machine (or lacks its "
                              "system info): re-save it on a little-endian one");
    pk_value *obj = pk_load(p->pk, buf, len, &pos, 1);
    if (!obj) return NULL;
    pk_value *keys = pk_load(p->pk, buf, len, &pos, 1);
    if (!keys) return NULL;
    if (keys->kind != PK_LIST) return pk_fail(p->pk, "the storage key list is not a list");
    /* then each storage: int64 element count, then its bytes */
    int64_t total = 0;
    for (size_t k = 0; k < keys->n; k++) {
        pk_value *key = keys->items[k];
        if (key->kind != PK_STR) return pk_fail(p->pk, "storage key %zu is not a string", k);
        pk_value *s = pk_storage_find(p->pk, key->s);
        if (!s) return pk_fail(p->pk, "storage '%s' is listed but never used", key->s);
        if (s->data) return pk_fail(p->pk, "storage '%s' is listed twice", key->s);
        if (len - pos < 8) return pk_fail(p->pk, "truncated file: storage '%s' is missing", key->s);
        uint64_t numel = 0;
        for (int i = 7; i >= 0; i--) numel = numel << 8 | buf[pos + i];
        pos += 8;
        if (numel != (uint64_t)s->numel)
            return pk_fail(p->pk,
                           "storage '%s' holds %llu elements, its tensors expect %lld "
                           "(corrupt file)",
                           key->s, (unsigned long long)numel, (long long)s->numel);
        uint64_t bytes = numel * (uint64_t)pk_dtype_size((int)s->i);
        total += (int64_t)bytes;
        if (total > MAX_TOTAL_BYTES) return pk_fail(p->pk, "the storages exceed the 16 GiB limit");
        if (bytes > len - pos)
            return pk_fail(p->pk, "truncated file: storage '%s' needs %llu bytes, %zu left", key->s,
                           (unsigned long long)bytes, len - pos);
        s->data = buf + pos;
        pos += bytes;
    }
    for (size_t i = 0; i < pk_n_storages(p->pk); i++)
        if (!pk_storage_at(p->pk, i)->data)
            return pk_fail(p->pk, "storage '%s' is used but not stored (corrupt file)",
                           pk_storage_at(p->pk, i)->s);
    return obj;
}

/* ---- the state_dict ---- */

static int count_tensors(const pk_value *d) {
    int n = 0;
    for (size_t i = 1; d && d->kind == PK_DICT && i < d->n; i += 2)
        n += d->items[i]->kind == PK_TENSOR;
    return n;
}

static int cmp_names(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static int take_state_dict(sg_pth *p, pk_value *obj) {
    static const char *const wrappers[] = {"state_dict", "model", "model_state_dict", "module"};
    pk_value *sd = NULL;
    if (count_tensors(obj) > 0) {
        sd = obj;
    } else {
        for (size_t k = 0; k < sizeof wrappers / sizeof wrappers[0] && !sd; k++) {
            pk_value *v = pk_dict_get(obj, wrappers[k]);
            if (count_tensors(v) > 0) {
                sd = v;
                snprintf(p->wrapper, sizeof p->wrapper, "%s", wrappers[k]);
            }
        }
    }
    if (!sd) {
        char keys[300] = "";
        for (size_t i = 0; obj->kind == PK_DICT && i < obj->n && strlen(keys) < 200; i += 2)
            if (obj->items[i]->kind == PK_STR)
                snprintf(keys + strlen(keys), sizeof keys - strlen(keys), "%s'%.40s'",
                         keys[0] ? ", " : "", obj->items[i]->s);
        pk_fail(p->pk,
                "holds no state_dict: %s%s%s; expected a dict of tensors, at the top or "
                "under 'state_dict' or 'model'",
                obj->kind == PK_DICT ? "a dict with keys " : "not a dict",
                obj->kind == PK_DICT ? (keys[0] ? keys : "(none)") : "", "");
        return -1;
    }
    int n = count_tensors(sd);
    p->tv = calloc((size_t)n, sizeof *p->tv);
    p->t = calloc((size_t)n, sizeof *p->t);
    const char **names = calloc((size_t)n, sizeof *names);
    SG_CHECK(p->tv && p->t && names, "out of host memory");
    for (size_t i = 0; i + 1 < sd->n; i += 2) {
        pk_value *k = sd->items[i], *v = sd->items[i + 1];
        if (v->kind != PK_TENSOR) {
            p->skipped++;
            continue;
        }
        if (k->kind != PK_STR || k->len == 0 || k->len > MAX_NAME || strlen(k->s) != k->len) {
            pk_fail(p->pk, "state_dict entry %zu has no usable name (a string of 1..%d bytes)",
                    i / 2, MAX_NAME);
            free(names);
            return -1;
        }
        for (size_t j = 0; j < k->len; j++)
            if ((unsigned char)k->s[j] < 0x20 || k->s[j] == 0x7f) {
                pk_fail(p->pk, "state_dict key %zu contains control characters", i / 2);
                free(names);
                return -1;
            }
        sg_pth_tensor *t = &p->t[p->n];
        pk_value *st = v->storage;
        int dt = (int)st->i;
        t->name = k->s;
        t->src_type = pk_dtype_name(dt);
        t->dtype = dt <= 3 ? SG_ST_F32 : SG_ST_I64; /* F32, F64, F16, BF16 first */
        t->ndim = v->ndim;
        t->count = 1;
        for (int d = 0; d < v->ndim; d++) {
            t->shape[d] = v->size[d];
            t->count *= (size_t)v->size[d];
        }
        names[p->n] = k->s;
        p->tv[p->n++] = v;
    }
    qsort(names, (size_t)p->n, sizeof *names, cmp_names);
    for (int i = 1; i < p->n; i++)
        if (strcmp(names[i - 1], names[i]) == 0) {
            pk_fail(p->pk, "state_dict key '%.100s' appears twice", names[i]);
            free(names);
            return -1;
        }
    free(names);
    return 0;
}

sg_pth *sg_pth_load_mem(const void *buf, size_t len, const char *name, char *err, size_t errlen) {
    sg_pth *p = calloc(1, sizeof *p);
    SG_CHECK(p != NULL, "out of host memory");
    p->name = strdup(name ? name : "(memory)");
    SG_CHECK(p->name != NULL, "out of host memory");
    char why[1024] = "";
    p->pk = pk_new(p->name, why, sizeof why);
    const uint8_t *b = buf;
    pk_value *obj = NULL;
    if (len >= 4 && memcmp(b, "PK\x03\x04", 4) == 0) {
        p->format = "zip";
        obj = load_zip(p, buf, len);
    } else if (len >= 2 && b[0] == 0x80 && b[1] <= 5) {
        p->format = "legacy";
        obj = load_legacy(p, b, len);
    } else if (len >= 262 && memcmp(b + 257, "ustar", 5) == 0) {
        pk_fail(p->pk, "a tar checkpoint (PyTorch before 0.4): load it with that PyTorch and "
                       "re-save it: torch.save(sd, f, _use_new_zipfile_serialization=True)");
    } else {
        pk_fail(p->pk, "neither a PyTorch zip checkpoint (torch.save) nor a legacy one (%s)",
                len ? "unknown first bytes" : "empty file");
    }
    if (obj && take_state_dict(p, obj) == 0 && p->n > 0) return p;
    if (!why[0]) snprintf(why, sizeof why, "%s: unreadable checkpoint", p->name);
    sg_report(err, errlen, "%s", why);
    sg_pth_close(p);
    return NULL;
}

sg_pth *sg_pth_open(const char *path, char *err, size_t errlen) {
    int fd = open(path, O_RDONLY);
    if (fd < 0) {
        sg_report(err, errlen, "cannot open %s: %s", path, strerror(errno));
        return NULL;
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        sg_report(err, errlen, "%s is not a regular file", path);
        close(fd);
        return NULL;
    }
    size_t len = (size_t)st.st_size;
    void *map = len ? mmap(NULL, len, PROT_READ, MAP_PRIVATE, fd, 0) : NULL;
    close(fd);
    if (len && map == MAP_FAILED) {
        sg_report(err, errlen, "cannot map %s: %s", path, strerror(errno));
        return NULL;
    }
    static const uint8_t empty[1];
    sg_pth *p = sg_pth_load_mem(len ? map : empty, len, path, err, errlen);
    if (!p) {
        if (len) munmap(map, len);
        return NULL;
    }
    p->map = len ? map : NULL;
    p->map_len = len;
    return p;
}

/* ---- reading tensors ---- */

static float half_to_float(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff, bits;
    if (exp == 0) {
        if (man == 0) {
            bits = sign;
        } else { /* subnormal: normalise */
            int e = -1;
            do {
                e++;
                man <<= 1;
            } while (!(man & 0x400));
            bits = sign | (uint32_t)(127 - 15 - e) << 23 | (man & 0x3ff) << 13;
        }
    } else if (exp == 31) {
        bits = sign | 0x7f800000u | man << 13; /* inf / nan */
    } else {
        bits = sign | (exp + 127 - 15) << 23 | man << 13;
    }
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

void sg_pth_read(const sg_pth *p, int i, void *dst) {
    const pk_value *t = p->tv[i];
    const pk_value *st = t->storage;
    int dt = (int)st->i, es = pk_dtype_size(dt);
    const uint8_t *base = st->root ? st->root->data + (size_t)st->root_offset * es : st->data;
    size_t count = p->t[i].count;
    int64_t idx[PK_MAX_DIMS] = {0};
    float *f = dst;
    int64_t *l = dst;
    for (size_t k = 0; k < count; k++) {
        int64_t off = t->offset;
        for (int d = 0; d < t->ndim; d++) off += idx[d] * t->stride[d];
        const uint8_t *e = base + (size_t)off * es;
        switch (dt) {
        case PKT_F32: memcpy(&f[k], e, 4); break;
        case PKT_F64: {
            double v;
            memcpy(&v, e, 8);
            f[k] = (float)v;
            break;
        }
        case PKT_F16: f[k] = half_to_float((uint16_t)(e[0] | e[1] << 8)); break;
        case PKT_BF16: {
            uint32_t bits = (uint32_t)(e[0] | e[1] << 8) << 16;
            memcpy(&f[k], &bits, 4);
            break;
        }
        case PKT_I64: memcpy(&l[k], e, 8); break;
        case PKT_I32: {
            int32_t v;
            memcpy(&v, e, 4);
            l[k] = v;
            break;
        }
        case PKT_I16: {
            int16_t v;
            memcpy(&v, e, 2);
            l[k] = v;
            break;
        }
        case PKT_I8: l[k] = (int8_t)e[0]; break;
        case PKT_U8: l[k] = e[0]; break;
        default: l[k] = e[0] != 0; break; /* bool */
        }
        for (int d = t->ndim - 1; d >= 0; d--) { /* next index, last dimension fastest */
            if (++idx[d] < t->size[d]) break;
            idx[d] = 0;
        }
    }
}

sg_status sg_pth_write_safetensors(const sg_pth *p, const char *out_path, const char *source) {
    sg_st_writer *w = sg_st_writer_create();
    sg_st_writer_meta(w, "format", "pt");
    sg_st_writer_meta(w, "producer", "segtrain convert");
    if (source) sg_st_writer_meta(w, "source", source);
    sg_status rc = SG_OK;
    for (int i = 0; i < p->n && rc == SG_OK; i++) {
        const sg_pth_tensor *t = &p->t[i];
        void *buf = malloc(t->count ? t->count * 8 : 8);
        SG_CHECK(buf != NULL, "out of host memory for tensor '%s' (%zu elements)", t->name,
                 t->count);
        sg_pth_read(p, i, buf);
        size_t bad = t->dtype == SG_ST_F32 ? sg_st_find_nonfinite(buf, t->count) : t->count;
        if (bad < t->count) {
            SG_ERROR("convert: tensor '%s' in %s holds %s at element %zu of %zu: non-finite "
                     "weights (diverged training or a corrupt file) are refused; nothing was "
                     "written (use an earlier checkpoint)",
                     t->name, p->name, sg_st_nonfinite_name(buf, bad), bad, t->count);
            free(buf);
            sg_st_writer_destroy(w);
            return SG_ERR_CONFIG;
        }
        rc = sg_st_writer_add(w, t->name, t->dtype, t->ndim, t->shape, buf);
        free(buf);
    }
    if (rc == SG_OK) rc = sg_st_writer_write(w, out_path);
    sg_st_writer_destroy(w);
    if (rc != SG_OK) SG_ERROR("convert: writing %s failed (see above)", out_path);
    return rc;
}
