/* tests/model/test_pth.c - PyTorch checkpoints read natively (io/pth.h):
 *  - the committed fixtures of scripts/make_pth_fixtures.py (made by
 *    torch.save), tensor for tensor against what torch computed: every
 *    storage type, 0-dim, empty, transposed, narrowed (storage offset),
 *    shared-storage and expanded (stride 0) tensors, the legacy format, the
 *    {"model": ...} and {"state_dict": ...} wrappers (with a module's
 *    _metadata BUILD, an optimizer state, nested metadata, a 2^70 int);
 *  - the tiny DeepLabV3 fixture: converted to safetensors it loads strictly
 *    into segtrain's model and gives torch's eval logits;
 *  - hostile and broken files, each refused with an error naming the file
 *    and the cause, never crashing: GLOBAL os.system / posix.system /
 *    builtins.eval + REDUCE, object-building opcodes, every truncation of a
 *    valid pickle and of a valid file, huge string lengths, memo indices,
 *    tensor sizes and strides, tensors outside their storage, storages whose
 *    zip entry has the wrong size or is missing, a big-endian byteorder,
 *    duplicate keys, no state_dict, a tar checkpoint, random bytes. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zip.h>

#include "io/pth.h"
#include "io/pth_pickle.h"
#include "io/safetensors.h"
#include "model/model_io.h"
#include "tests/model/model_testutil.h"
#include "tests/testutil.h"

static char g_dir[512]; /* fixtures/pth */
static char g_tmp[256]; /* scratch */

static const char *fx(const char *name) {
    static char buf[4][1024];
    static int k;
    char *b = buf[k++ % 4];
    snprintf(b, 1024, "%s/%s", g_dir, name);
    return b;
}
static const char *tmp(const char *name) {
    static char buf[4][512];
    static int k;
    char *b = buf[k++ % 4];
    snprintf(b, 512, "%s/%s", g_tmp, name);
    return b;
}

/* Every tensor of `pth` equals the expected file's, same order, bit for bit. */
static void compare_with_expected(const char *pth, const char *expected, const char *format,
                                  const char *wrapper, int n_expected) {
    char err[1024];
    sg_pth *p = sg_pth_open(fx(pth), err, sizeof err);
    CHECK_MSG(p != NULL, "%s", err);
    sg_st_file *e = sg_st_open(fx(expected));
    CHECK(e != NULL);
    if (!p || !e) return;
    CHECK(strcmp(sg_pth_format(p), format) == 0);
    CHECK(strcmp(sg_pth_wrapper_key(p), wrapper) == 0);
    CHECK_EQ_INT(sg_pth_count(p), n_expected);
    for (int i = 0; i < sg_pth_count(p); i++) {
        const sg_pth_tensor *t = sg_pth_get(p, i);
        const sg_st_tensor *x = sg_st_get(e, i);
        CHECK_MSG(x && strcmp(t->name, x->name) == 0, "%s: tensor %d is '%s', expected '%s'", pth,
                  i, t->name, x ? x->name : "?");
        if (!x) continue;
        CHECK_MSG(t->dtype == x->dtype && t->ndim == x->ndim && t->count == x->count,
                  "%s: '%s' dtype/rank/count differ", pth, t->name);
        for (int d = 0; d < t->ndim && d < x->ndim; d++) CHECK(t->shape[d] == x->shape[d]);
        if (t->count != x->count) continue;
        void *got = malloc(t->count * 8 + 8);
        sg_pth_read(p, i, got);
        CHECK_MSG(memcmp(got, x->data, x->nbytes) == 0, "%s: '%s' (%s) values differ", pth, t->name,
                  t->src_type);
        free(got);
    }
    sg_pth_close(p);
    sg_st_close(e);
}

static void test_fixtures(void) {
    compare_with_expected("dtypes.pth", "dtypes.expected.safetensors", "zip", "", 18);
    compare_with_expected("dtypes_legacy.pth", "dtypes.expected.safetensors", "legacy", "", 18);
    compare_with_expected("state_dict.pth", "dtypes.expected.safetensors", "zip", "state_dict", 18);
    compare_with_expected("wrapped.pth", "wrapped.expected.safetensors", "zip", "model", 7);
    /* the source types are reported */
    char err[1024];
    sg_pth *p = sg_pth_open(fx("dtypes.pth"), err, sizeof err);
    CHECK(p != NULL);
    if (!p) return;
    const char *want[][2] = {{"f16", "HalfStorage"},
                             {"bf16", "BFloat16Storage"},
                             {"bool", "BoolStorage"},
                             {"f64", "DoubleStorage"}};
    for (int k = 0; k < 4; k++)
        for (int i = 0; i < sg_pth_count(p); i++)
            if (!strcmp(sg_pth_get(p, i)->name, want[k][0]))
                CHECK(strcmp(sg_pth_get(p, i)->src_type, want[k][1]) == 0);
    sg_pth_close(p);
}

static void test_tiny_deeplab_loads_strict_and_matches_torch(void) {
    char err[1024];
    sg_pth *p = sg_pth_open(fx("tiny_deeplab.pth"), err, sizeof err);
    CHECK_MSG(p != NULL, "%s", err);
    if (!p) return;
    const char *out = tmp("tiny.safetensors");
    CHECK(sg_pth_write_safetensors(p, out, "tiny_deeplab.pth") == SG_OK);
    sg_pth_close(p);
    sg_st_file *e = sg_st_open(fx("tiny_deeplab.expected.safetensors"));
    CHECK(e != NULL);
    if (!e) return;
    sg_model_opts o;
    CHECK(mt_opts_from_meta(e, &o) == 0);
    sg_backend *be = mt_backend();
    sg_model *m = sg_model_create(be, &o);
    CHECK(m != NULL);
    if (!m) return;
    sg_load_report rep;
    /* strict: every tensor present, the right shape, nothing unexpected */
    CHECK_EQ_INT(sg_model_load(m, out, 1, &rep), SG_OK);
    CHECK_EQ_INT(rep.loaded, sg_model_num_params(m));
    CHECK_EQ_INT(rep.missing + rep.skipped + rep.unexpected, 0);
    const sg_st_tensor *x = sg_st_find(e, "input"), *ref = sg_st_find(e, "eval_out");
    CHECK(x && ref && x->ndim == 4);
    if (!x || !ref) return;
    int h = (int)x->shape[2], w = (int)x->shape[3];
    CHECK_EQ_INT(sg_model_plan_infer(m, 1, h, w), 0);
    float *xx = malloc(x->nbytes), *rr = malloc(ref->nbytes);
    sg_st_read_f32(e, x, xx, x->count);
    sg_st_read_f32(e, ref, rr, ref->count);
    be->ops->upload(be, sg_model_input(m), xx, x->nbytes);
    sg_model_forward(m, 0, 0);
    float *got = mt_download(be, sg_model_out(m), ref->count);
    double err_rel = tu_max_rel_err(rr, got, ref->count, 1e-3);
    fprintf(stderr, "  tiny deeplab: eval logits max rel error %.3g vs torch (float64)\n", err_rel);
    CHECK(err_rel < 1e-4);
    free(xx);
    free(rr);
    free(got);
    sg_model_destroy(m);
    sg_st_close(e);
}

/* ---- hostile and broken files ---- */

typedef struct bb {
    uint8_t d[8192];
    size_t n;
} bb;
static void put(bb *b, const void *p, size_t n) {
    memcpy(b->d + b->n, p, n);
    b->n += n;
}
static void op(bb *b, int c) { b->d[b->n++] = (uint8_t)c; }
static void str(bb *b, const char *s) { /* BINUNICODE */
    uint32_t n = (uint32_t)strlen(s);
    op(b, 'X');
    uint8_t l[4] = {(uint8_t)n, (uint8_t)(n >> 8), (uint8_t)(n >> 16), (uint8_t)(n >> 24)};
    put(b, l, 4);
    put(b, s, n);
}
static void global(bb *b, const char *m, const char *n) {
    op(b, 'c');
    put(b, m, strlen(m));
    op(b, '\n');
    put(b, n, strlen(n));
    op(b, '\n');
}
static void i1(bb *b, int v) { op(b, 'K'), op(b, v); }
static void i8(bb *b, uint64_t v) { /* LONG1 of 8 bytes */
    op(b, 0x8a), op(b, 8);
    for (int i = 0; i < 8; i++) op(b, (int)(uint8_t)(v >> (8 * i)));
}
static void i4(bb *b, uint32_t v) {
    op(b, 'J');
    uint8_t l[4] = {(uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24)};
    put(b, l, 4);
}

/* A state_dict {"w": tensor} whose pieces the cases change: storage numel,
 * size, stride, offset. */
static void tensor_pickle(bb *b, const char *key, uint32_t numel, uint64_t size, uint64_t stride,
                          uint32_t offset) {
    b->n = 0;
    op(b, 0x80), op(b, 2);
    global(b, "collections", "OrderedDict");
    op(b, ')'), op(b, 'R');
    op(b, '(');
    str(b, key);
    global(b, "torch._utils", "_rebuild_tensor_v2");
    op(b, '(');
    op(b, '(');
    str(b, "storage");
    global(b, "torch", "FloatStorage");
    str(b, "0");
    str(b, "cpu");
    i4(b, numel);
    op(b, 't');
    op(b, 'Q');
    i4(b, offset);
    i8(b, size), op(b, 0x85);
    i8(b, stride), op(b, 0x85);
    op(b, 0x89);
    global(b, "collections", "OrderedDict");
    op(b, ')'), op(b, 'R');
    op(b, 't');
    op(b, 'R');
    op(b, 'u');
    op(b, '.');
}

/* Writes a torch-like zip: x/data.pkl, x/data/0 with `data_len` bytes, and
 * optional extra entries. */
static void write_zip(const char *path, const bb *pkl, size_t data_len, const char *extra_name,
                      const char *extra) {
    static uint8_t data[4096];
    for (size_t i = 0; i < sizeof data; i++) data[i] = (uint8_t)(i * 13);
    unlink(path);
    int zerr;
    zip_t *z = zip_open(path, ZIP_CREATE | ZIP_TRUNCATE, &zerr);
    zip_source_t *s = zip_source_buffer(z, pkl->d, pkl->n, 0);
    zip_file_add(z, "x/data.pkl", s, ZIP_FL_OVERWRITE);
    if (data_len != (size_t)-1) {
        s = zip_source_buffer(z, data, data_len, 0);
        zip_file_add(z, "x/data/0", s, ZIP_FL_OVERWRITE);
    }
    if (extra_name) {
        s = zip_source_buffer(z, extra, strlen(extra), 0);
        zip_file_add(z, extra_name, s, ZIP_FL_OVERWRITE);
    }
    zip_close(z);
}

/* The file is refused, the message naming it and `what`. */
static void refused(const char *path, const char *what) {
    char err[1024] = "";
    sg_pth *p = sg_pth_open(path, err, sizeof err);
    CHECK_MSG(p == NULL, "%s was accepted (expected: %s)", path, what);
    sg_pth_close(p);
    CHECK_STR_CONTAINS(err, path);
    CHECK_MSG(strstr(err, what) != NULL, "message '%s' lacks '%s'", err, what);
}

static void test_code_is_never_run(void) {
    /* torch.save of an object whose __reduce__ is os.system */
    unlink("/tmp/segtrain_pwned");
    refused(fx("evil_system.pth"), "'posix.system'");
    CHECK(access("/tmp/segtrain_pwned", F_OK) != 0);
    const char *mods[][2] = {{"os", "system"},        {"builtins", "eval"},
                             {"__builtin__", "eval"}, {"subprocess", "Popen"},
                             {"torch", "load"},       {"torch._utils", "_rebuild_tensor_v3"}};
    for (size_t k = 0; k < sizeof mods / sizeof mods[0]; k++) {
        bb b = {.n = 0};
        op(&b, 0x80), op(&b, 2);
        global(&b, mods[k][0], mods[k][1]);
        str(&b, "touch /tmp/segtrain_pwned");
        op(&b, 0x85), op(&b, 'R'), op(&b, '.');
        const char *p = tmp("evil.pth");
        write_zip(p, &b, 0, NULL, NULL);
        char what[128];
        snprintf(what, sizeof what, "'%s.%s'", mods[k][0], mods[k][1]);
        refused(p, what);
    }
    /* the same through STACK_GLOBAL (protocol 4) */
    bb b = {.n = 0};
    op(&b, 0x80), op(&b, 4);
    op(&b, 0x8c), op(&b, 2), put(&b, "os", 2);
    op(&b, 0x8c), op(&b, 6), put(&b, "system", 6);
    op(&b, 0x93), op(&b, '.');
    write_zip(tmp("evil.pth"), &b, 0, NULL, NULL);
    refused(tmp("evil.pth"), "'os.system'");
    CHECK(access("/tmp/segtrain_pwned", F_OK) != 0);
    /* object-building opcodes */
    const int objops[] = {0x81 /* NEWOBJ */, 'i' /* INST */, 'o' /* OBJ */, 0x92, 0x82, 'P'};
    for (size_t k = 0; k < sizeof objops / sizeof objops[0]; k++) {
        b.n = 0;
        op(&b, 0x80), op(&b, 2), op(&b, objops[k]), op(&b, '.');
        write_zip(tmp("obj.pth"), &b, 0, NULL, NULL);
        refused(tmp("obj.pth"), "refused pickle opcode");
    }
}

static void test_malformed(void) {
    bb b;
    const char *p = tmp("bad.pth");
    /* the good one first: the cases below change one thing each */
    tensor_pickle(&b, "w", 8, 4, 1, 0);
    write_zip(p, &b, 32, NULL, NULL);
    char err[1024];
    sg_pth *ok = sg_pth_open(p, err, sizeof err);
    CHECK_MSG(ok && sg_pth_count(ok) == 1 && sg_pth_get(ok, 0)->count == 4, "%s", err);
    sg_pth_close(ok);
    /* every truncation of the pickle fails cleanly */
    bb full = b;
    int clean = 0;
    for (size_t cut = 0; cut < full.n; cut++) {
        bb t = full;
        t.n = cut;
        write_zip(p, &t, 32, NULL, NULL);
        sg_pth *q = sg_pth_open(p, err, sizeof err);
        clean += q == NULL && strstr(err, p) != NULL;
        sg_pth_close(q);
    }
    CHECK_EQ_INT(clean, (int)full.n);
    /* and every truncation of the whole file */
    write_zip(p, &full, 32, NULL, NULL);
    static uint8_t file[16384];
    FILE *f = fopen(p, "rb");
    size_t n = fread(file, 1, sizeof file, f);
    fclose(f);
    clean = 0;
    for (size_t cut = 0; cut < n; cut++) {
        sg_pth *q = sg_pth_load_mem(file, cut, "cut.pth", err, sizeof err);
        clean += q == NULL && strstr(err, "cut.pth") != NULL;
        sg_pth_close(q);
    }
    CHECK_EQ_INT(clean, (int)n);

    tensor_pickle(&b, "w", 8, 4, 1, 0);
    write_zip(p, &b, 28, NULL, NULL); /* entry shorter than 8 floats */
    refused(p, "holds 28 bytes but the pickle declares 32");
    write_zip(p, &b, (size_t)-1, NULL, NULL);
    refused(p, "no zip entry x/data/0");
    tensor_pickle(&b, "w", 8, 4, 2, 1); /* reaches element 1 + 3 * 2 = 7: fine */
    write_zip(p, &b, 32, NULL, NULL);
    ok = sg_pth_open(p, err, sizeof err);
    CHECK_MSG(ok != NULL, "%s", err);
    sg_pth_close(ok);
    tensor_pickle(&b, "w", 8, 4, 2, 2); /* element 8 of 8 */
    write_zip(p, &b, 32, NULL, NULL);
    refused(p, "reaches element 8 of storage '0'");
    tensor_pickle(&b, "w", 8, UINT64_C(1) << 39, UINT64_C(1) << 39, 0); /* huge */
    write_zip(p, &b, 32, NULL, NULL);
    refused(p, "reaches element");
    tensor_pickle(&b, "w", 8, UINT64_C(1) << 62, 1, 0);
    write_zip(p, &b, 32, NULL, NULL);
    refused(p, "out of range");
    tensor_pickle(&b, "w", 8, 4, UINT64_MAX, 0); /* stride -1 */
    write_zip(p, &b, 32, NULL, NULL);
    refused(p, "out of range");
    tensor_pickle(&b, "w", 0x7FFFFFFFu, 4, 1, 0); /* a storage bigger than its entry */
    write_zip(p, &b, 32, NULL, NULL);
    refused(p, "holds 32 bytes");
    tensor_pickle(&b, "w\x01", 8, 4, 1, 0);
    write_zip(p, &b, 32, NULL, NULL);
    refused(p, "control characters");
    tensor_pickle(&b, "w", 8, 4, 1, 0);
    write_zip(p, &b, 32, "x/byteorder", "big");
    refused(p, "big-endian");
    write_zip(p, &b, 32, "x/byteorder", "little");
    ok = sg_pth_open(p, err, sizeof err);
    CHECK_MSG(ok != NULL, "%s", err);
    sg_pth_close(ok);

    struct {
        const char *what;
        uint8_t bytes[24];
        size_t n;
    } tiny[] = {
        {"a string of 4294967280 bytes", {0x80, 2, 'X', 0xF0, 0xFF, 0xFF, 0xFF, 'a'}, 8},
        {"memo index 4294967295", {0x80, 2, 'N', 'r', 0xFF, 0xFF, 0xFF, 0xFF, '.'}, 9},
        {"never stored", {0x80, 2, 'h', 7, '.'}, 5},
        {"stack underflow", {0x80, 2, 'R', '.'}, 4},
        {"needs a MARK", {0x80, 2, 't', '.'}, 4},
        {"odd count", {0x80, 2, '}', '(', 'N', 'u', '.'}, 7},
        {"SETITEM at byte", {0x80, 2, ']', 'N', 'N', 's', '.'}, 7},
        {"refused pickle opcode 0xff", {0x80, 2, 0xFF, '.'}, 4},
        {"protocol 9", {0x80, 9, '.'}, 3},
        {"holds no state_dict: not a dict", {0x80, 2, ']', '.'}, 4},
        {"holds no state_dict: a dict with keys 'epoch'",
         {0x80, 2, '}', 'X', 5, 0, 0, 0, 'e', 'p', 'o', 'c', 'h', 'K', 3, 's', '.'},
         17},
        {"REDUCE at byte 4 calls something that is not an allowed global",
         {0x80, 2, 'N', ')', 'R', '.'},
         6},
        {"LONG4 of", {0x80, 2, 0x8b, 0xFF, 0xFF, 0, 0, '.'}, 8},
    };
    for (size_t k = 0; k < sizeof tiny / sizeof tiny[0]; k++) {
        bb t = {.n = 0};
        put(&t, tiny[k].bytes, tiny[k].n);
        write_zip(p, &t, 0, NULL, NULL);
        refused(p, tiny[k].what);
    }
    /* a persistent id that is not a storage; a bad storage key */
    b.n = 0;
    op(&b, 0x80), op(&b, 2), op(&b, '('), str(&b, "module"), op(&b, 't'), op(&b, 'Q'), op(&b, '.');
    write_zip(p, &b, 0, NULL, NULL);
    refused(p, "persistent id");
    b.n = 0;
    op(&b, 0x80), op(&b, 2), op(&b, '('), str(&b, "storage");
    global(&b, "torch", "FloatStorage");
    str(&b, "../../etc/passwd"), str(&b, "cpu"), i1(&b, 4), op(&b, 't'), op(&b, 'Q'), op(&b, '.');
    write_zip(p, &b, 0, NULL, NULL);
    refused(p, "not a plain name");
    /* two entries with one name */
    b.n = 0;
    op(&b, 0x80), op(&b, 2), op(&b, '}'), op(&b, '(');
    for (int k = 0; k < 2; k++) {
        str(&b, "dup");
        global(&b, "torch._utils", "_rebuild_tensor_v2");
        op(&b, '('), op(&b, '('), str(&b, "storage");
        global(&b, "torch", "FloatStorage");
        str(&b, "0"), str(&b, "cpu"), i1(&b, 8), op(&b, 't'), op(&b, 'Q');
        i1(&b, 0), i1(&b, 8), op(&b, 0x85), i1(&b, 1), op(&b, 0x85), op(&b, 0x89), op(&b, 'N');
        op(&b, 't'), op(&b, 'R');
    }
    op(&b, 'u'), op(&b, '.');
    write_zip(p, &b, 32, NULL, NULL);
    refused(p, "'dup' appears twice");

    /* not a checkpoint at all */
    FILE *g = fopen(p, "wb");
    fputs("this is a text file, not a checkpoint", g);
    fclose(g);
    refused(p, "neither a PyTorch zip checkpoint (torch.save) nor a legacy one");
    g = fopen(p, "wb");
    static uint8_t tar[1024];
    memcpy(tar + 257, "ustar", 5);
    fwrite(tar, 1, sizeof tar, g);
    fclose(g);
    refused(p, "_use_new_zipfile_serialization=True");
    g = fopen(p, "wb");
    fclose(g);
    refused(p, "empty file");
    refused(tmp("missing.pth"), "No such file");
    /* a zip that is not a torch checkpoint */
    unlink(p);
    int zerr;
    zip_t *z = zip_open(p, ZIP_CREATE, &zerr);
    zip_file_add(z, "readme.txt", zip_source_buffer(z, "hi", 2, 0), 0);
    zip_close(z);
    refused(p, "without <name>/data.pkl");
}

static void test_legacy_broken(void) {
    FILE *f = fopen(fx("dtypes_legacy.pth"), "rb");
    CHECK(f != NULL);
    if (!f) return;
    static uint8_t buf[1 << 16];
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    char err[1024];
    int clean = 0;
    for (size_t cut = 0; cut < n; cut++) { /* every truncation */
        sg_pth *p = sg_pth_load_mem(buf, cut, "legacy.pth", err, sizeof err);
        clean += p == NULL && strstr(err, "legacy.pth") != NULL;
        sg_pth_close(p);
    }
    CHECK_EQ_INT(clean, (int)n);
    buf[5] ^= 0x55; /* the magic number */
    sg_pth *p = sg_pth_load_mem(buf, n, "legacy.pth", err, sizeof err);
    CHECK(p == NULL);
    CHECK_STR_CONTAINS(err, "magic number");
}

/* 200,000 tensors, each on its own storage: storages are found by key in a
 * hash table, so this takes a moment, not the minutes a linear search per
 * reference would (the test's timeout would catch that). */
static void test_many_storages(void) {
    enum { N = 200000 };
    size_t cap = (size_t)N * 128 + 64, n = 0;
    uint8_t *b = malloc(cap);
    CHECK(b != NULL);
    if (!b) return;
#define PUT(s, len) (memcpy(b + n, s, len), n += (len))
    PUT("\x80\x02}(", 4);
    static const char reb[] = "ctorch._utils\n_rebuild_tensor_v2\nq\x01";
    static const char flt[] = "ctorch\nFloatStorage\nq\x02";
    for (int i = 0; i < N; i++) {
        char key[16];
        int kl = snprintf(key, sizeof key, "%d", i);
        uint8_t hdr[5] = {'X', (uint8_t)kl, 0, 0, 0};
        PUT(hdr, 5), PUT(key, (size_t)kl); /* name */
        if (i == 0) PUT(reb, sizeof reb - 1);
        else PUT("h\x01", 2);
        PUT("((X\x07\x00\x00\x00storage", 14);
        if (i == 0) PUT(flt, sizeof flt - 1);
        else PUT("h\x02", 2);
        PUT(hdr, 5), PUT(key, (size_t)kl); /* storage key */
        PUT("X\x03\x00\x00\x00"
            "cpuK\x01tQK\x00K\x01\x85K\x01\x85\x89Nt"
            "R",
            24);
    }
    PUT("u.", 2);
#undef PUT
    CHECK(n <= cap);
    char err[512];
    pk_ctx *c = pk_new("many.pkl", err, sizeof err);
    size_t pos = 0;
    pk_value *v = pk_load(c, b, n, &pos, 0);
    CHECK_MSG(v != NULL, "%s", err);
    CHECK(v && v->kind == PK_DICT && v->n == 2 * N);
    CHECK_EQ_INT((int)pk_n_storages(c), N);
    CHECK(pk_storage_find(c, "123456") == pk_storage_at(c, 123456));
    CHECK(pk_storage_find(c, "200000") == NULL);
    pk_free(c);
    free(b);
}

int main(int argc, char **argv) {
    snprintf(g_dir, sizeof g_dir, "%s/pth", argc > 1 ? argv[1] : "tests/fixtures");
    const char *t = getenv("TMPDIR");
    snprintf(g_tmp, sizeof g_tmp, "%s/sg_pth_XXXXXX", t ? t : "/tmp");
    if (!mkdtemp(g_tmp)) return 1;
    TEST_RUN(test_fixtures);
    TEST_RUN(test_tiny_deeplab_loads_strict_and_matches_torch);
    TEST_RUN(test_code_is_never_run);
    TEST_RUN(test_malformed);
    TEST_RUN(test_legacy_broken);
    TEST_RUN(test_many_storages);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_tmp);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", g_tmp);
    return TEST_EXIT();
}
