/* tests/fuzz/fuzz_safetensors.c - fuzz harness: the safetensors header
 * parser (io/safetensors.c) and the checkpoint checks
 * (train/checkpoint_file.c) on a file held in memory.
 *
 * Each input is parsed as a whole file (sg_st_open_memory). When it opens,
 * every tensor's bytes are read (ASan sees any range outside the buffer),
 * every name is looked up again through the hash index and must find that
 * very tensor (a disagreement aborts), the metadata is walked, and the
 * checkpoint checks run: format, counts, run id and checksums
 * (sg_ckpt_check), the state's range checks (sg_ckpt_read_state) and the
 * stored config through the YAML loader and its limits
 * (sg_ckpt_read_config, then sg_config_validate). Errors are expected and
 * not logged.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/config.h"
#include "core/log.h"
#include "io/safetensors.h"
#include "train/checkpoint.h"

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    sg_log_set_level(SG_LOG_ERROR - 1);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static int init;
    static sg_config defaults;
    if (!init) {
        LLVMFuzzerInitialize(NULL, NULL);
        sg_config_defaults(&defaults);
        init = 1;
    }
    char why[1024];
    sg_st_file *f = sg_st_open_memory(data, size, "fuzz", why, sizeof why);
    if (!f) return 0;
    volatile unsigned sum = 0;
    for (int i = 0; i < sg_st_count(f); i++) {
        const sg_st_tensor *t = sg_st_get(f, i);
        const unsigned char *p = t->data;
        for (size_t k = 0; k < t->nbytes; k++) sum += p[k];
        if (sg_st_find(f, t->name) != t) {
            fprintf(stderr, "fuzz_safetensors: sg_st_find('%s') is not tensor %d\n", t->name, i);
            abort();
        }
    }
    for (int i = 0; i < sg_st_meta_count(f); i++) {
        const char *k, *v;
        sg_st_meta_get(f, i, &k, &v);
        if (sg_st_meta(f, k) != v) {
            fprintf(stderr, "fuzz_safetensors: sg_st_meta('%s') is not entry %d\n", k, i);
            abort();
        }
    }
    (void)sg_ckpt_file_checksum(f);
    (void)sg_ckpt_check(f, why, sizeof why);
    sg_train_state st;
    (void)sg_ckpt_read_state(f, &st);
    if (sg_st_meta(f, "config")) {
        sg_config *cfg = malloc(sizeof *cfg);
        if (!cfg) abort();
        *cfg = defaults;
        if (sg_ckpt_read_config(f, cfg) == SG_OK) (void)sg_config_validate(cfg);
        free(cfg);
    }
    sg_st_close(f);
    return 0;
}
