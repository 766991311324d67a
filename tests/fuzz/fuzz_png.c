/* tests/fuzz/fuzz_png.c - fuzz harness: PNG decoding (io/png.c) from
 * memory, as an image (RGB) and as a label mask, under a pixel limit
 * (data.max_image_pixels; 2^20 here so one input stays fast). Every decoded
 * byte is read (ASan sees anything outside the buffer) and the result's size
 * is checked against the limit. Errors are expected and not logged. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "core/log.h"
#include "io/png.h"

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
    for (int mask = 0; mask <= 1; mask++) {
        sg_img im;
        char err[SG_DATA_ERR_LEN];
        if (sg_png_decode(data, size, "fuzz.png", mask, LIMIT, &im, err, sizeof err) != SG_OK) {
            if (im.data) abort(); /* a failure leaves the image empty */
            continue;
        }
        if (im.h <= 0 || im.w <= 0 || (int64_t)im.h * im.w > LIMIT || im.c != (mask ? 1 : 3)) {
            fprintf(stderr, "fuzz_png: decoded %dx%dx%d outside the limit\n", im.h, im.w, im.c);
            abort();
        }
        volatile unsigned sum = 0;
        for (size_t i = 0; i < (size_t)im.h * im.w * im.c; i++) sum += im.data[i];
        (void)sum;
        sg_img_free(&im);
    }
    return 0;
}
