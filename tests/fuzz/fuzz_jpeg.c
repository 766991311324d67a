/* tests/fuzz/fuzz_jpeg.c - fuzz harness: JPEG decoding (io/jpeg.c, with
 * the format dispatch of io/image.c) from memory under a pixel limit
 * (2^20 here so one input stays fast) and the progressive-scan limit. Every
 * decoded byte is read (ASan sees anything outside the buffer) and the
 * result's size is checked against the limit. Errors are expected and not
 * logged. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "core/log.h"
#include "io/image.h"
#include "io/jpeg.h"

#define LIMIT (INT64_C(1) << 20)

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
    sg_img im;
    char err[SG_DATA_ERR_LEN];
    /* through the dispatch: a mutated signature may turn it into a PNG */
    sg_status st = sg_image_decode_rgb(data, size, "fuzz.jpg", LIMIT, &im, err, sizeof err);
    if (st != SG_OK) {
        if (im.data) abort();
        return 0;
    }
    if (im.h <= 0 || im.w <= 0 || (int64_t)im.h * im.w > LIMIT || im.c != 3) {
        fprintf(stderr, "fuzz_jpeg: decoded %dx%dx%d outside the limit\n", im.h, im.w, im.c);
        abort();
    }
    volatile unsigned sum = 0;
    for (size_t i = 0; i < (size_t)im.h * im.w * 3; i++) sum += im.data[i];
    (void)sum;
    sg_img_free(&im);
    return 0;
}
