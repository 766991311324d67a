/* tests/cuda/test_cuda_errors.c - the CUDA backend's device selection fails
 * cleanly: asking for a device that is not there (no driver, no GPU, or an
 * index past the last one) returns NULL with an error that names the device
 * and says what to do, instead of crashing or exiting. Runs on every machine
 * with the CUDA backend compiled in, GPU or not (here: no driver at all).
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/log.h"
#include "kernels/backend.h"
#include "tests/testutil.h"

static char g_dir[64];

/* The error lines logged since the last call (the log file, reread). */
static const char *log_text(void) {
    static char buf[16384];
    char path[128];
    snprintf(path, sizeof path, "%s/rank0.log", g_dir);
    FILE *f = fopen(path, "r");
    size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
    if (f) fclose(f);
    buf[n] = 0;
    return buf;
}

static void test_device_past_the_last(void) {
    int count = sg_backend_cuda_device_count();
    CHECK(count >= 0);
    char dev[32];
    snprintf(dev, sizeof dev, "cuda:%d", count + 3);
    sg_backend *be = sg_backend_create(dev, NULL);
    CHECK_MSG(be == NULL, "%s must not be created with %d devices visible", dev, count);
    const char *log = log_text();
    CHECK_STR_CONTAINS(log, dev);
    /* says what to do: which variable to check, or to use the CPU */
    CHECK_MSG(strstr(log, "CUDA_VISIBLE_DEVICES") || strstr(log, "device: cpu"), "no hint in:\n%s",
              log);
}

static void test_default_device_without_gpu(void) {
    if (sg_backend_cuda_device_count() > 0) return; /* a GPU is there: nothing to check */
    sg_backend *be = sg_backend_create("cuda", NULL);
    CHECK(be == NULL);
    const char *log = log_text();
    CHECK_STR_CONTAINS(log, "cuda:0");
    CHECK_STR_CONTAINS(log, "device: cpu");
}

int main(void) {
    if (!sg_backend_cuda_compiled()) return TEST_SKIP;
    snprintf(g_dir, sizeof g_dir, "/tmp/sg-test-cuda-errors-XXXXXX");
    if (!mkdtemp(g_dir) || sg_log_open_file(g_dir) != 0) {
        fprintf(stderr, "cannot create a log directory under /tmp\n");
        return 1;
    }
    TEST_RUN(test_device_past_the_last);
    TEST_RUN(test_default_device_without_gpu);
    sg_log_close_file();
    char path[128];
    snprintf(path, sizeof path, "%s/rank0.log", g_dir);
    unlink(path);
    rmdir(g_dir);
    return TEST_EXIT();
}
