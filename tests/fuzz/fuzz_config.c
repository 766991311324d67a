/* tests/fuzz/fuzz_config.c - fuzz harness: YAML configuration loading
 * (core/config.c) from a buffer, with its size, depth and value-count limits.
 *
 * Each input is loaded as a configuration text over the defaults, and (first
 * line only, when it holds '=') as a --set assignment. When a text loads,
 * what sg_config_write makes of it must load again to the same
 * configuration, byte for byte in its written form (the round trip a
 * checkpoint's stored config and <run_dir>/config.yaml rely on): a mismatch
 * aborts, so the driver saves the input. Validation runs on every loaded
 * configuration. Errors are expected and not logged (log level below error).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/config.h"
#include "core/log.h"

static sg_config g_defaults;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    sg_log_set_level(SG_LOG_ERROR - 1);
    sg_config_defaults(&g_defaults);
    return 0;
}

static char *written(const sg_config *cfg, size_t *len) {
    char *text = NULL;
    FILE *m = open_memstream(&text, len);
    if (!m) abort();
    sg_config_write(cfg, m);
    if (fclose(m) != 0) abort();
    return text;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static int init;
    if (!init) { /* also when built with libFuzzer, which calls Initialize itself */
        LLVMFuzzerInitialize(NULL, NULL);
        init = 1;
    }
    char *text = malloc(size + 1);
    if (!text) abort();
    memcpy(text, data, size);
    text[size] = 0;

    sg_config *cfg = malloc(sizeof *cfg);
    if (!cfg) abort();
    *cfg = g_defaults;
    if (sg_config_load_string(cfg, text, "fuzz") == SG_OK) {
        (void)sg_config_validate(cfg);
        size_t n1, n2;
        char *w1 = written(cfg, &n1);
        sg_config *back = malloc(sizeof *back);
        if (!back) abort();
        *back = g_defaults;
        if (sg_config_load_string(back, w1, "fuzz-roundtrip") != SG_OK) {
            fprintf(stderr, "fuzz_config: the written configuration does not load again:\n%s\n",
                    w1);
            abort();
        }
        char *w2 = written(back, &n2);
        if (n1 != n2 || memcmp(w1, w2, n1) != 0) {
            fprintf(stderr, "fuzz_config: round trip changed the configuration:\n%s\n---\n%s\n", w1,
                    w2);
            abort();
        }
        free(w1);
        free(w2);
        free(back);
    }

    /* the first line as a --set assignment */
    char *nl = strchr(text, '\n');
    if (nl) *nl = 0;
    if (strchr(text, '=')) {
        *cfg = g_defaults;
        (void)sg_config_set(cfg, text);
    }
    free(cfg);
    free(text);
    return 0;
}
