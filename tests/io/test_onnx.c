/* tests/io/test_onnx.c - the ONNX writer (io/onnx.h) on its own.
 *
 * - varints: the protobuf encoding of 0, 1, 127, 128, 300, 2^32 and 2^64-1.
 * - a small model read back with a protobuf reader written here
 *   independently: ModelProto ir_version (8 for opset 17), opset_import,
 *   graph (node op_type, inputs, attributes, initializer raw_data, graph
 *   input with a symbolic dimension), metadata_props.
 * - refusals (SG_ERR_CONFIG, logged, no file): a node reading an undefined
 *   value, a value defined twice, an output nothing produces, an empty name,
 *   a symbolic dimension without a name, a repeated metadata key, opset 0.
 * - a directory that does not exist: SG_ERR_RUNTIME naming the file.
 * - external data: the large initializer in <out>.data at offset 0, the small
 *   one inline, the .onnx smaller than the weights.
 */
#include <sys/stat.h>
#include <unistd.h>

#include "io/onnx.h"
#include "tests/helpers.h"
#include "tests/testutil.h"

static char dir[256];

static void test_varint(void) {
    struct {
        uint64_t v;
        int n;
        uint8_t b[10];
    } cases[] = {
        {0, 1, {0x00}},
        {1, 1, {0x01}},
        {127, 1, {0x7f}},
        {128, 2, {0x80, 0x01}},
        {300, 2, {0xac, 0x02}},
        {(uint64_t)1 << 32, 5, {0x80, 0x80, 0x80, 0x80, 0x10}},
        {UINT64_MAX, 10, {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        uint8_t out[10];
        int n = sg_pb_varint(cases[i].v, out);
        CHECK_EQ_INT(n, cases[i].n);
        CHECK(memcmp(out, cases[i].b, (size_t)n) == 0);
    }
}

/* ---- an independent protobuf reader: fields of one message ---- */
typedef struct field {
    int num, wire;
    uint64_t v;       /* varint / fixed32 value */
    const uint8_t *p; /* length-delimited payload */
    size_t len;
} field;

static int rd_varint(const uint8_t *b, size_t n, size_t *at, uint64_t *v) {
    *v = 0;
    for (int sh = 0; sh < 64; sh += 7) {
        if (*at >= n) return -1;
        uint8_t c = b[(*at)++];
        *v |= (uint64_t)(c & 0x7f) << sh;
        if (!(c & 0x80)) return 0;
    }
    return -1;
}

/* Parses b[0..n) into fields (at most cap); returns the count or -1. */
static int parse(const uint8_t *b, size_t n, field *f, int cap) {
    size_t at = 0;
    int k = 0;
    while (at < n) {
        uint64_t tag;
        if (k == cap || rd_varint(b, n, &at, &tag) != 0) return -1;
        f[k].num = (int)(tag >> 3);
        f[k].wire = (int)(tag & 7);
        if (f[k].wire == 0) {
            if (rd_varint(b, n, &at, &f[k].v) != 0) return -1;
        } else if (f[k].wire == 2) {
            uint64_t len;
            if (rd_varint(b, n, &at, &len) != 0 || len > n - at) return -1;
            f[k].p = b + at;
            f[k].len = (size_t)len;
            at += (size_t)len;
        } else if (f[k].wire == 5) {
            if (n - at < 4) return -1;
            uint32_t v;
            memcpy(&v, b + at, 4);
            f[k].v = v;
            at += 4;
        } else {
            return -1;
        }
        k++;
    }
    return k;
}

/* The i-th field numbered num (NULL if absent). */
static const field *get(const field *f, int n, int num, int i) {
    for (int k = 0; k < n; k++)
        if (f[k].num == num && i-- == 0) return &f[k];
    return NULL;
}

static int str_is(const field *f, const char *s) {
    return f && f->wire == 2 && f->len == strlen(s) && memcmp(f->p, s, f->len) == 0;
}

static sg_onnx *small_model(void) {
    sg_onnx *g = sg_onnx_create(17, "segtrain-test", "1", "g");
    int64_t d[2] = {-1, 4};
    const char *p[2] = {"batch", NULL};
    if (sg_onnx_input(g, "x", SG_ONNX_FLOAT, 2, d, p) != SG_OK) return NULL;
    int64_t wd[1] = {4};
    float w[4] = {1.5f, -2.0f, 0.25f, 8.0f};
    if (sg_onnx_init_f32(g, "w", 1, wd, w) != SG_OK) return NULL;
    const char *in[2] = {"x", "w"}, *out[1] = {"y"};
    sg_onnx_node *n = sg_onnx_add_node(g, "Mul", "mul0", in, 2, out, 1);
    sg_onnx_attr_int(n, "some_int", -3);
    int64_t ints[3] = {1, 2, 300};
    sg_onnx_attr_ints(n, "some_ints", ints, 3);
    sg_onnx_attr_string(n, "some_str", "half_pixel");
    sg_onnx_attr_float(n, "some_f", 0.5f);
    if (sg_onnx_output(g, "y", SG_ONNX_FLOAT, 2, d, p) != SG_OK) return NULL;
    if (sg_onnx_meta(g, "class_names", "[\"a\",\"b\"]") != SG_OK) return NULL;
    return g;
}

static void test_read_back(void) {
    sg_onnx *g = small_model();
    CHECK(g != NULL);
    char path[512];
    snprintf(path, sizeof path, "%s/small.onnx", dir);
    int ext = -1;
    CHECK_EQ_INT(sg_onnx_write(g, path, 0, &ext), SG_OK);
    CHECK_EQ_INT(ext, 0);
    sg_onnx_destroy(g);
    struct stat sb;
    CHECK(stat(path, &sb) == 0 && sb.st_size > 0);
    FILE *fp = fopen(path, "rb");
    CHECK(fp != NULL);
    uint8_t *b = malloc((size_t)sb.st_size);
    CHECK(fread(b, 1, (size_t)sb.st_size, fp) == (size_t)sb.st_size);
    fclose(fp);
    field m[32], gr[32], nd[32], a[16], t[16], op[4], vi[4], ty[4], tt[4], sh[4], dm[4], kv[4];
    int nm = parse(b, (size_t)sb.st_size, m, 32);
    CHECK(nm > 0);
    CHECK(get(m, nm, 1, 0) && get(m, nm, 1, 0)->v == 8); /* ir_version for opset 17 */
    CHECK(str_is(get(m, nm, 2, 0), "segtrain-test"));
    const field *os = get(m, nm, 8, 0);
    CHECK(os != NULL);
    int nos = parse(os->p, os->len, op, 4);
    CHECK(nos > 0 && get(op, nos, 2, 0) && get(op, nos, 2, 0)->v == 17);
    const field *md = get(m, nm, 14, 0);
    CHECK(md != NULL);
    int nkv = parse(md->p, md->len, kv, 4);
    CHECK(str_is(get(kv, nkv, 1, 0), "class_names") && str_is(get(kv, nkv, 2, 0), "[\"a\",\"b\"]"));
    const field *gf = get(m, nm, 7, 0);
    CHECK(gf != NULL);
    int ng = parse(gf->p, gf->len, gr, 32);
    CHECK(ng > 0);
    CHECK(str_is(get(gr, ng, 2, 0), "g"));
    /* node: inputs x, w; output y; op Mul; 4 attributes */
    const field *nf = get(gr, ng, 1, 0);
    CHECK(nf != NULL && get(gr, ng, 1, 1) == NULL);
    int nn = parse(nf->p, nf->len, nd, 32);
    CHECK(str_is(get(nd, nn, 1, 0), "x") && str_is(get(nd, nn, 1, 1), "w"));
    CHECK(str_is(get(nd, nn, 2, 0), "y") && str_is(get(nd, nn, 4, 0), "Mul"));
    CHECK(str_is(get(nd, nn, 3, 0), "mul0"));
    const field *af = get(nd, nn, 5, 0); /* some_int = -3: INT (2) */
    int na = parse(af->p, af->len, a, 16);
    CHECK(str_is(get(a, na, 1, 0), "some_int"));
    CHECK(get(a, na, 3, 0)->v == (uint64_t)-3 && get(a, na, 20, 0)->v == 2);
    af = get(nd, nn, 5, 1); /* ints 1, 2, 300: INTS (7), unpacked */
    na = parse(af->p, af->len, a, 16);
    CHECK(get(a, na, 8, 2) && get(a, na, 8, 2)->v == 300 && get(a, na, 20, 0)->v == 7);
    af = get(nd, nn, 5, 2);
    na = parse(af->p, af->len, a, 16);
    CHECK(str_is(get(a, na, 4, 0), "half_pixel") && get(a, na, 20, 0)->v == 3);
    af = get(nd, nn, 5, 3);
    na = parse(af->p, af->len, a, 16);
    float fv;
    uint32_t bits = (uint32_t)get(a, na, 2, 0)->v;
    memcpy(&fv, &bits, 4);
    CHECK(get(a, na, 2, 0)->wire == 5 && fv == 0.5f && get(a, na, 20, 0)->v == 1);
    /* initializer: dims [4], FLOAT, name w, raw_data = the floats */
    const field *tf = get(gr, ng, 5, 0);
    int nt = parse(tf->p, tf->len, t, 16);
    CHECK(get(t, nt, 1, 0)->v == 4 && get(t, nt, 2, 0)->v == SG_ONNX_FLOAT);
    CHECK(str_is(get(t, nt, 8, 0), "w"));
    const field *raw = get(t, nt, 9, 0);
    float w[4] = {1.5f, -2.0f, 0.25f, 8.0f};
    CHECK(raw && raw->len == sizeof w && memcmp(raw->p, w, sizeof w) == 0);
    /* graph input x: tensor_type FLOAT, dims (batch, 4) */
    const field *xf = get(gr, ng, 11, 0);
    int nv = parse(xf->p, xf->len, vi, 4);
    CHECK(str_is(get(vi, nv, 1, 0), "x"));
    int nty = parse(get(vi, nv, 2, 0)->p, get(vi, nv, 2, 0)->len, ty, 4);
    int ntt = parse(get(ty, nty, 1, 0)->p, get(ty, nty, 1, 0)->len, tt, 4);
    CHECK(get(tt, ntt, 1, 0)->v == SG_ONNX_FLOAT);
    int nsh = parse(get(tt, ntt, 2, 0)->p, get(tt, ntt, 2, 0)->len, sh, 4);
    CHECK_EQ_INT(nsh, 2);
    int ndm = parse(sh[0].p, sh[0].len, dm, 4);
    CHECK(str_is(get(dm, ndm, 2, 0), "batch"));
    ndm = parse(sh[1].p, sh[1].len, dm, 4);
    CHECK(get(dm, ndm, 1, 0) && get(dm, ndm, 1, 0)->v == 4);
    CHECK(get(gr, ng, 12, 0) != NULL); /* output y */
    free(b);
}

/* sg_onnx_write refuses g with SG_ERR_CONFIG, logs `want`, writes nothing. */
static int refuses(sg_onnx *g, const char *want) {
    char path[512];
    snprintf(path, sizeof path, "%s/refused.onnx", dir);
    th_cap_begin();
    sg_status st = sg_onnx_write(g, path, 0, NULL);
    const char *log = th_cap_end();
    int ok = st == SG_ERR_CONFIG && strstr(log, want) && access(path, F_OK) != 0;
    if (!ok) fprintf(stderr, "  want '%s', got status %d, log:\n%s", want, (int)st, log);
    sg_onnx_destroy(g);
    return ok;
}

static void test_refusals(void) {
    const char *x[1] = {"x"}, *y[1] = {"y"}, *nowhere[1] = {"nowhere"};
    int64_t d[1] = {4};
    sg_onnx *g = small_model();
    sg_onnx_add_node(g, "Relu", "r", nowhere, 1, y, 1);
    CHECK(refuses(g, "reads 'nowhere'"));
    g = small_model();
    sg_onnx_add_node(g, "Relu", "r", x, 1, y, 1);
    CHECK(refuses(g, "'y' is defined twice"));
    g = small_model();
    CHECK(sg_onnx_output(g, "z", SG_ONNX_FLOAT, 1, d, NULL) == SG_OK);
    CHECK(refuses(g, "'z' is not produced"));
    g = small_model();
    th_cap_begin();
    sg_status a = sg_onnx_input(g, "", SG_ONNX_FLOAT, 1, d, NULL);
    int64_t sym[1] = {-1};
    sg_status b = sg_onnx_input(g, "q", SG_ONNX_FLOAT, 1, sym, NULL);
    sg_status c = sg_onnx_meta(g, "class_names", "again");
    sg_onnx *bad = sg_onnx_create(0, "p", "v", "g");
    const char *log = th_cap_end();
    sg_onnx_destroy(g);
    CHECK(a == SG_ERR_CONFIG && b == SG_ERR_CONFIG && c == SG_ERR_CONFIG && bad == NULL);
    CHECK_STR_CONTAINS(log, "empty name");
    CHECK_STR_CONTAINS(log, "neither fixed");
    CHECK_STR_CONTAINS(log, "'class_names' given twice");
    CHECK_STR_CONTAINS(log, "opset 0");
}

static void test_unwritable(void) {
    sg_onnx *g = small_model();
    th_cap_begin();
    sg_status st = sg_onnx_write(g, "/nonexistent-dir-sg/model.onnx", 0, NULL);
    const char *log = th_cap_end();
    sg_onnx_destroy(g);
    CHECK_EQ_INT(st, SG_ERR_RUNTIME);
    CHECK_STR_CONTAINS(log, "/nonexistent-dir-sg/model.onnx.tmp");
}

static void test_external(void) {
    sg_onnx *g = small_model();
    float *big = malloc(2048 * sizeof *big);
    for (int i = 0; i < 2048; i++) big[i] = (float)i;
    int64_t bd[2] = {2, 1024};
    CHECK(sg_onnx_init_f32(g, "big", 2, bd, big) == SG_OK);
    char path[512], data[600];
    snprintf(path, sizeof path, "%s/ext.onnx", dir);
    snprintf(data, sizeof data, "%s.data", path);
    int ext = -1;
    CHECK_EQ_INT(sg_onnx_write(g, path, 1, &ext), SG_OK);
    sg_onnx_destroy(g);
    CHECK_EQ_INT(ext, 1);
    struct stat sm, sd;
    CHECK(stat(path, &sm) == 0 && stat(data, &sd) == 0);
    CHECK_EQ_INT(sd.st_size, 2048 * 4); /* only "big": "w" (16 bytes) stays inline */
    CHECK(sm.st_size < 2048 * 4);
    FILE *f = fopen(data, "rb");
    float *back = malloc(2048 * sizeof *back);
    CHECK(f && fread(back, 4, 2048, f) == 2048);
    fclose(f);
    CHECK(memcmp(back, big, 2048 * 4) == 0);
    /* the .onnx names the file, offset 0, length 8192, data_location EXTERNAL */
    char *txt = th_read_file(path);
    CHECK(txt != NULL);
    size_t n = (size_t)sm.st_size;
    int found_loc = 0;
    for (size_t i = 0; i + 12 < n && !found_loc; i++)
        found_loc = !memcmp(txt + i, "ext.onnx.data", 13);
    CHECK(found_loc);
    int found_len = 0;
    for (size_t i = 0; i + 4 < n && !found_len; i++) found_len = !memcmp(txt + i, "8192", 4);
    CHECK(found_len);
    free(txt);
    free(big);
    free(back);
}

int main(void) {
    snprintf(dir, sizeof dir, "%s/sg_onnx_XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    TEST_RUN(test_varint);
    TEST_RUN(test_read_back);
    TEST_RUN(test_refusals);
    TEST_RUN(test_unwritable);
    TEST_RUN(test_external);
    th_sh("rm -rf '%s'", dir);
    return TEST_EXIT();
}
