/* tests/fuzz/fuzz_pth.c - fuzz harness: PyTorch checkpoints read natively
 * (io/pth.c: the zip container through libzip, the legacy container) and
 * the restricted unpickler (io/pth_pickle.c) on the raw input.
 *
 * Each input is (1) opened as a whole checkpoint (sg_pth_load_mem): when it
 * opens, every tensor is copied out (strides, offsets and types: ASan sees
 * any read outside a storage) and its element count is checked against its
 * shape; and (2) unpickled as one bare pickle (what data.pkl holds), so
 * mutations reach the opcodes even where a zip's CRC would reject them. No
 * input may make it run anything: the unpickler calls nothing. Errors are
 * expected and not logged. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "core/log.h"
#include "io/pth.h"
#include "io/pth_pickle.h"

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    sg_log_set_level(SG_LOG_ERROR - 1);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static int init;
    if (!init) {
        LLVMFuzzerInitialize(NULL, NULL);
        init = 1;
    }
    char err[1024];
    sg_pth *p = sg_pth_load_mem(data, size, "fuzz.pth", err, sizeof err);
    if (p) {
        for (int i = 0; i < sg_pth_count(p); i++) {
            const sg_pth_tensor *t = sg_pth_get(p, i);
            size_t n = 1;
            for (int d = 0; d < t->ndim; d++) n *= (size_t)t->shape[d];
            if (n != t->count || t->count > ((size_t)1 << 26)) {
                if (n != t->count) {
                    fprintf(stderr, "fuzz_pth: '%s' count %zu, shape gives %zu\n", t->name,
                            t->count, n);
                    abort();
                }
                continue; /* large but valid: not worth the time here */
            }
            void *buf = malloc(t->count * 8 + 8);
            if (!buf) abort();
            sg_pth_read(p, i, buf);
            /* convert's check of the values (a NaN or Inf refused) */
            if (t->dtype == SG_ST_F32 && sg_st_find_nonfinite(buf, t->count) > t->count) {
                fprintf(stderr, "fuzz_pth: '%s': non-finite index past %zu\n", t->name, t->count);
                abort();
            }
            free(buf);
        }
        sg_pth_close(p);
    }
    pk_ctx *c = pk_new("fuzz.pkl", err, sizeof err);
    size_t pos = 0;
    pk_value *v = pk_load(c, data, size, &pos, 1);
    if (v && pos > size) abort();
    pk_free(c);
    return 0;
}
