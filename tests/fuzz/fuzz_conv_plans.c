/* tests/fuzz/fuzz_conv_plans.c - fuzz harness: the convolution plan cache's
 * file reader (kernels/conv_plans.h), the one file a GPU run reads back
 * from a shared run directory.
 *
 * Input: byte 0 holds flags, the rest is the file. Flag bit 0 rewrites the
 * header's device name and library version to the cache's own and bit 1
 * recomputes the trailing checksum, so that most inputs get past the
 * header and the checksum and reach the entry checks (random bytes alone
 * almost never do). The file is written to a private temporary path and
 * loaded into a fresh cache. Invariants that abort (so the driver saves the
 * input): a load is LOADED, ABSENT (never, the file exists) or IGNORED with
 * a reason and nothing added; a LOADED cache holds at most the file's entry
 * count, saves, and the saved file loads back into another fresh cache with
 * the same number of entries, each of which is found by lookup with the
 * same plan.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/log.h"
#include "core/util.h"
#include "kernels/conv_plans.h"

#define DEVICE "NVIDIA H200"
#define LIB 91900ull
#define HEADER 152 /* magic 8, version 4, count 4, device 128, library 8 */
#define ENTRY (SG_CONV_PLAN_KEY_LEN * 4 + 6 * 4 + 3 * 8)

static char path_a[64], path_b[64];

static void remove_files(void) {
    unlink(path_a);
    unlink(path_b);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    sg_log_set_level(SG_LOG_ERROR - 1); /* the warnings of ignored files are expected */
    snprintf(path_a, sizeof path_a, "/tmp/sg_fuzz_plans_%d_a.bin", (int)getpid());
    snprintf(path_b, sizeof path_b, "/tmp/sg_fuzz_plans_%d_b.bin", (int)getpid());
    atexit(remove_files);
    return 0;
}

static void put_u64(uint8_t *b, uint64_t v) {
    for (int i = 0; i < 8; i++) b[i] = (uint8_t)(v >> (8 * i));
}

static uint32_t get_u32(const uint8_t *b) {
    return (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
}

static void write_file(const char *p, const uint8_t *b, size_t n) {
    FILE *f = fopen(p, "wb");
    if (!f) abort();
    if (n && fwrite(b, 1, n, f) != n) abort();
    if (fclose(f) != 0) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    uint8_t flags = data[0];
    size_t n = size - 1;
    uint8_t *b = malloc(n ? n : 1);
    if (!b) abort();
    memcpy(b, data + 1, n);
    if ((flags & 1) && n >= HEADER) {
        memset(b + 16, 0, 128);
        memcpy(b + 16, DEVICE, strlen(DEVICE));
        put_u64(b + 144, LIB);
    }
    if ((flags & 2) && n >= 8) put_u64(b + n - 8, sg_fnv1a(SG_FNV_OFFSET, b, n - 8));
    write_file(path_a, b, n);

    sg_conv_plans *p = sg_conv_plans_create(DEVICE, LIB);
    char why[256] = "";
    sg_conv_plans_load_result r = sg_conv_plans_load(p, path_a, why, sizeof why);
    sg_conv_plans_stats st;
    sg_conv_plans_get_stats(p, &st);
    if (r == SG_PLANS_ABSENT) abort();
    if (r == SG_PLANS_IGNORED && (!why[0] || st.entries != 0 || st.ignored != 1)) abort();
    if (r == SG_PLANS_LOADED) {
        uint32_t count = n >= 16 ? get_u32(b + 12) : 0;
        if (st.entries > (long)count || st.entries > SG_CONV_PLANS_MAX) abort();
        if (sg_conv_plans_save(p, path_b) != SG_OK) abort();
        sg_conv_plans *q = sg_conv_plans_create(DEVICE, LIB);
        if (sg_conv_plans_load(q, path_b, why, sizeof why) != SG_PLANS_LOADED) abort();
        sg_conv_plans_stats sq;
        sg_conv_plans_get_stats(q, &sq);
        if (sq.entries != st.entries) abort();
        /* every entry of the input file is in both caches with the same plan
         * (duplicated keys: the last one read wins in both) */
        for (uint32_t i = 0; i < count && (size_t)HEADER + (size_t)(i + 1) * ENTRY <= n; i++) {
            sg_conv_plan_key k;
            for (int j = 0; j < SG_CONV_PLAN_KEY_LEN; j++)
                k.v[j] = (int32_t)get_u32(b + HEADER + (size_t)i * ENTRY + 4 * (size_t)j);
            sg_conv_plan a, c;
            if (!sg_conv_plans_lookup(p, &k, &a) || !sg_conv_plans_lookup(q, &k, &c)) abort();
            if (memcmp(&a, &c, sizeof a) != 0) abort();
        }
        sg_conv_plans_destroy(q);
    }
    sg_conv_plans_destroy(p);
    free(b);
    return 0;
}
