/* tests/kernels/test_conv_plans.c - the convolution plan cache
 * (kernels/conv_plans.h): a second run of the same job hits every geometry
 * from the file; truncated, corrupt, foreign (other device or library
 * version), padded, oversized and out-of-range files are ignored with a
 * reason and the cache starts empty; the in-memory limit. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kernels/conv_plans.h"
#include "tests/testutil.h"

static char dir[256];

static const char *path_of(const char *name) {
    static char p[512];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    return p;
}

static sg_conv_desc geom(int i) {
    sg_conv_desc d;
    memset(&d, 0, sizeof d);
    d.n = 2;
    d.c = 8 + i;
    d.h = d.w = 32;
    d.k = 16;
    d.r = d.s = 3;
    d.stride_h = d.stride_w = 1;
    d.pad_h = d.pad_w = 1 + i % 2;
    d.dil_h = d.dil_w = 1 + i % 2;
    sg_conv_desc_init(&d);
    return d;
}

static sg_conv_plan plan_of(int i) {
    sg_conv_plan p = {{i % 7, 1, 5}, {1, 2, 3}, {(uint64_t)i * 1024, 0, 1u << 20}};
    return p;
}

/* One "run": look up every geometry, choose (here: plan_of) and insert the
 * misses, save. Returns the number of hits. */
static long run_job(const char *file, int ngeom, int measured, sg_conv_plans_load_result *lr) {
    sg_conv_plans *p = sg_conv_plans_create("NVIDIA H200", 91900);
    *lr = sg_conv_plans_load(p, file, NULL, 0);
    for (int i = 0; i < ngeom; i++) {
        sg_conv_desc d = geom(i);
        sg_conv_plan_key k = sg_conv_plan_key_make(&d, SG_PRECISION_BF16, 0, 0, measured);
        sg_conv_plan got;
        if (sg_conv_plans_lookup(p, &k, &got)) {
            sg_conv_plan want = plan_of(i);
            if (memcmp(&got, &want, sizeof got) != 0) {
                fprintf(stderr, "  plan %d read back differs\n", i);
                sg_conv_plans_destroy(p);
                return -1;
            }
        } else {
            sg_conv_plan pl = plan_of(i);
            if (sg_conv_plans_insert(p, &k, &pl) != SG_OK) {
                sg_conv_plans_destroy(p);
                return -1;
            }
        }
    }
    sg_conv_plans_stats st;
    sg_conv_plans_get_stats(p, &st);
    if (sg_conv_plans_save(p, file) != SG_OK) st.hits = -1;
    sg_conv_plans_destroy(p);
    return st.hits;
}

static void test_second_run_hits(void) {
    const char *f = path_of("plans.bin");
    unlink(f);
    sg_conv_plans_load_result lr;
    CHECK_EQ_INT(run_job(f, 12, 1, &lr), 0);
    CHECK_EQ_INT(lr, SG_PLANS_ABSENT);
    CHECK_EQ_INT(run_job(f, 12, 1, &lr), 12);
    CHECK_EQ_INT(lr, SG_PLANS_LOADED);
    /* heuristic choices are another mode: not reused for measured ones */
    CHECK_EQ_INT(run_job(f, 12, 0, &lr), 0);
    CHECK_EQ_INT(run_job(f, 12, 0, &lr), 12);
    CHECK_EQ_INT(run_job(f, 12, 1, &lr), 12);
}

static void test_stats(void) {
    sg_conv_plans *p = sg_conv_plans_create("dev", 1);
    sg_conv_desc d = geom(0);
    sg_conv_plan_key k = sg_conv_plan_key_make(&d, SG_PRECISION_FP32, 1, 0, 1);
    sg_conv_plan pl = plan_of(3), got;
    CHECK_EQ_INT(sg_conv_plans_lookup(p, &k, &got), 0);
    CHECK(sg_conv_plans_insert(p, &k, &pl) == SG_OK);
    CHECK_EQ_INT(sg_conv_plans_lookup(p, &k, &got), 1);
    CHECK_EQ_INT(got.algo[0], pl.algo[0]);
    /* tf32 on and off are different keys */
    sg_conv_plan_key k2 = sg_conv_plan_key_make(&d, SG_PRECISION_FP32, 0, 0, 1);
    CHECK_EQ_INT(sg_conv_plans_lookup(p, &k2, &got), 0);
    sg_conv_plans_stats st;
    sg_conv_plans_get_stats(p, &st);
    CHECK_EQ_INT(st.hits, 1);
    CHECK_EQ_INT(st.misses, 2);
    CHECK_EQ_INT(st.entries, 1);
    CHECK_EQ_INT(sg_conv_plans_remove(p, &k), 1);
    CHECK_EQ_INT(sg_conv_plans_lookup(p, &k, &got), 0);
    sg_conv_plan badp = plan_of(1);
    badp.algo[1] = SG_CONV_PLAN_MAX_ALGO;
    CHECK(sg_conv_plans_insert(p, &k, &badp) == SG_ERR_RUNTIME);
    sg_conv_plans_destroy(p);
}

static void test_limit(void) {
    sg_conv_plans *p = sg_conv_plans_create("dev", 1);
    sg_conv_plan pl = plan_of(1);
    int i = 0;
    for (; i < SG_CONV_PLANS_MAX; i++) {
        sg_conv_desc d = geom(0);
        d.n = 1 + i;
        sg_conv_plan_key k = sg_conv_plan_key_make(&d, 0, 0, 0, 1);
        CHECK(sg_conv_plans_insert(p, &k, &pl) == SG_OK);
    }
    sg_conv_desc d = geom(0);
    d.n = 1 + i;
    sg_conv_plan_key k = sg_conv_plan_key_make(&d, 0, 0, 0, 1);
    CHECK(sg_conv_plans_insert(p, &k, &pl) == SG_ERR_RUNTIME);
    /* a full cache saves and loads back whole */
    const char *f = path_of("full.bin");
    CHECK(sg_conv_plans_save(p, f) == SG_OK);
    sg_conv_plans *q = sg_conv_plans_create("dev", 1);
    CHECK_EQ_INT(sg_conv_plans_load(q, f, NULL, 0), SG_PLANS_LOADED);
    sg_conv_plans_stats st;
    sg_conv_plans_get_stats(q, &st);
    CHECK_EQ_INT(st.loaded, SG_CONV_PLANS_MAX);
    /* every key is found after removals moved entries around (the index is
     * rebuilt), the removed ones not */
    for (int r = 0; r < SG_CONV_PLANS_MAX; r += 97) {
        sg_conv_desc dr = geom(0);
        dr.n = 1 + r;
        sg_conv_plan_key kr = sg_conv_plan_key_make(&dr, 0, 0, 0, 1);
        CHECK_EQ_INT(sg_conv_plans_remove(q, &kr), 1);
    }
    int found = 0;
    for (int j = 0; j < SG_CONV_PLANS_MAX; j++) {
        sg_conv_desc dj = geom(0);
        dj.n = 1 + j;
        sg_conv_plan_key kj = sg_conv_plan_key_make(&dj, 0, 0, 0, 1);
        sg_conv_plan got;
        int hit = sg_conv_plans_lookup(q, &kj, &got);
        CHECK_EQ_INT(hit, j % 97 != 0);
        found += hit;
    }
    CHECK_EQ_INT(found, SG_CONV_PLANS_MAX - (SG_CONV_PLANS_MAX + 96) / 97);
    sg_conv_plans_destroy(q);
    sg_conv_plans_destroy(p);
}

/* The bytes of a valid file with n entries. */
static unsigned char *valid_file(size_t *len, int n) {
    const char *f = path_of("valid.bin");
    unlink(f);
    sg_conv_plans_load_result lr;
    if (run_job(f, n, 1, &lr) != 0) return NULL;
    FILE *fp = fopen(f, "rb");
    if (!fp) return NULL;
    unsigned char *b = malloc(1 << 20);
    *len = fread(b, 1, 1 << 20, fp);
    fclose(fp);
    return b;
}

static void write_bytes(const char *f, const unsigned char *b, size_t n) {
    FILE *fp = fopen(f, "wb");
    if (!fp) return;
    fwrite(b, 1, n, fp);
    fclose(fp);
}

/* Loading `bytes` into a fresh cache for the usual device: IGNORED with a
 * reason containing `want`, nothing added. */
static int ignored_with(const unsigned char *b, size_t n, const char *dev, uint64_t lib,
                        const char *want) {
    const char *f = path_of("bad.bin");
    write_bytes(f, b, n);
    sg_conv_plans *p = sg_conv_plans_create(dev, lib);
    char why[256] = "";
    int r = sg_conv_plans_load(p, f, why, sizeof why);
    sg_conv_plans_stats st;
    sg_conv_plans_get_stats(p, &st);
    sg_conv_plans_destroy(p);
    if (r != SG_PLANS_IGNORED || st.entries != 0 || st.ignored != 1 || !strstr(why, want)) {
        fprintf(stderr, "  load gave %d, %ld entries, why \"%s\" (wanted \"%s\")\n", r, st.entries,
                why, want);
        return 0;
    }
    return 1;
}

static void test_bad_files(void) {
    size_t n = 0;
    unsigned char *b = valid_file(&n, 5);
    CHECK(b && n > 100);
    unsigned char *c = malloc(n + 16);
    /* the good file loads */
    {
        const char *f = path_of("good.bin");
        write_bytes(f, b, n);
        sg_conv_plans *p = sg_conv_plans_create("NVIDIA H200", 91900);
        CHECK_EQ_INT(sg_conv_plans_load(p, f, NULL, 0), SG_PLANS_LOADED);
        sg_conv_plans_destroy(p);
    }
    CHECK(ignored_with(b, n, "NVIDIA A100-SXM4-80GB", 91900, "written for 'NVIDIA H200'"));
    CHECK(ignored_with(b, n, "NVIDIA H200", 90100, "library version 91900"));
    CHECK(ignored_with(b, n - 1, "NVIDIA H200", 91900, "truncated"));
    CHECK(ignored_with(b, 20, "NVIDIA H200", 91900, "truncated header"));
    CHECK(ignored_with(b, 0, "NVIDIA H200", 91900, "truncated header"));
    memcpy(c, b, n);
    c[n] = 0;
    CHECK(ignored_with(c, n + 1, "NVIDIA H200", 91900, "padded"));
    for (size_t at = 0; at < n; at += 37) { /* any flipped byte */
        memcpy(c, b, n);
        c[at] ^= 0x40;
        CHECK_MSG(ignored_with(c, n, "NVIDIA H200", 91900, ""), "byte %zu flipped", at);
    }
    memcpy(c, b, n);
    c[200] ^= 1; /* inside the entries: the checksum catches it */
    CHECK(ignored_with(c, n, "NVIDIA H200", 91900, "checksum"));
    memcpy(c, b, n);
    c[0] = 'X';
    CHECK(ignored_with(c, n, "NVIDIA H200", 91900, "bad magic"));
    memcpy(c, b, n);
    c[8] = 2; /* version */
    CHECK(ignored_with(c, n, "NVIDIA H200", 91900, "format version 2"));
    memcpy(c, b, n);
    c[12] = 0xff;
    c[13] = 0xff; /* count 65535 + 0: over the limit */
    CHECK(ignored_with(c, n, "NVIDIA H200", 91900, "more than the limit"));
    /* an entry out of range with a correct checksum: rejected by the checks */
    {
        memcpy(c, b, n);
        size_t at = 8 + 4 + 4 + 128 + 8 + 20 * 4; /* entry 0's algo[0] */
        c[at + 3] = 0x7f;
        uint64_t h = 0xcbf29ce484222325ull;
        for (size_t i = 0; i < n - 8; i++) h = (h ^ c[i]) * 0x100000001b3ull;
        for (int i = 0; i < 8; i++) c[n - 8 + i] = (unsigned char)(h >> (8 * i));
        CHECK(ignored_with(c, n, "NVIDIA H200", 91900, "entry 0 holds a value out of range"));
    }
    /* larger than any valid file: refused without parsing */
    {
        size_t big = 8 + 4 + 4 + 128 + 8 + (size_t)SG_CONV_PLANS_MAX * 128 + 8 + 1;
        unsigned char *z = calloc(1, big);
        memcpy(z, b, n);
        CHECK(ignored_with(z, big, "NVIDIA H200", 91900, "larger than"));
        free(z);
    }
    /* a directory in place of the file */
    {
        sg_conv_plans *p = sg_conv_plans_create("NVIDIA H200", 91900);
        char why[256] = "";
        CHECK_EQ_INT(sg_conv_plans_load(p, dir, why, sizeof why), SG_PLANS_IGNORED);
        sg_conv_plans_destroy(p);
    }
    /* after an ignored file, the run searches and rewrites it: the next hits */
    {
        const char *f = path_of("bad.bin");
        sg_conv_plans_load_result lr;
        CHECK_EQ_INT(run_job(f, 5, 1, &lr), 0);
        CHECK_EQ_INT(lr, SG_PLANS_IGNORED);
        CHECK_EQ_INT(run_job(f, 5, 1, &lr), 5);
    }
    free(c);
    free(b);
}

static void test_unwritable(void) {
    /* a directory that cannot be created: a regular file is in its place */
    const char *file = path_of("a-file");
    write_bytes(file, (const unsigned char *)"x", 1);
    char under[600];
    snprintf(under, sizeof under, "%s/plans.bin", file);
    sg_conv_plans *p = sg_conv_plans_create("dev", 1);
    CHECK(sg_conv_plans_save(p, under) == SG_ERR_RUNTIME);
    sg_conv_plans_destroy(p);
}

int main(void) {
    const char *tmp = getenv("TMPDIR");
    snprintf(dir, sizeof dir, "%s/sg_conv_plans_XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(dir)) return 1;
    TEST_RUN(test_second_run_hits);
    TEST_RUN(test_stats);
    TEST_RUN(test_limit);
    TEST_RUN(test_bad_files);
    TEST_RUN(test_unwritable);
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
    return TEST_EXIT();
}
