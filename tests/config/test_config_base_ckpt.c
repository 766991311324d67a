/* tests/config/test_config_base_ckpt.c - a checkpoint's stored configuration
 * cannot name a base file.
 *
 * Checkpoints are untrusted input: the configuration in their metadata is
 * loaded as text (sg_config_load_string), where `base:` is refused, so a
 * crafted checkpoint cannot make eval/predict/export read other files. This
 * goes the way those commands go: a safetensors file written here, then
 * sg_config_for_checkpoint (no --config), as `segtrain eval --checkpoint`.
 */
#include <stdlib.h>
#include <unistd.h>

#include "core/cli.h"
#include "core/config.h"
#include "io/safetensors.h"
#include "tests/helpers.h"
#include "testutil.h"
#include "train/from_checkpoint.h"

static char g_dir[256];
static sg_config g_c;

static const char *capture_run(const char *ck, int *rc) {
    th_cap_begin();
    sg_cli cli;
    memset(&cli, 0, sizeof cli);
    *rc = sg_config_for_checkpoint(&cli, ck, &g_c);
    return th_cap_end();
}

static void write_ckpt(const char *path, const char *config) {
    sg_st_writer *w = sg_st_writer_create();
    CHECK(w != NULL);
    float x = 1.0f;
    int64_t shape[1] = {1};
    CHECK_EQ_INT(sg_st_writer_add(w, "t", SG_ST_F32, 1, shape, &x), 0);
    CHECK_EQ_INT(sg_st_writer_meta(w, "config", config), 0);
    CHECK_EQ_INT(sg_st_writer_write(w, path), 0);
    sg_st_writer_destroy(w);
}

static void test_checkpoint_config_cannot_name_base(void) {
    char secret[512], ck[512], text[1200];
    snprintf(secret, sizeof secret, "%s/secret.yaml", g_dir);
    CHECK(th_write_text(secret, "seed: 777\ndata:\n  root: /secret/data\n") == 0);
    snprintf(ck, sizeof ck, "%s/evil.safetensors", g_dir);
    snprintf(text, sizeof text, "base: %s\nseed: 3\n", secret);
    write_ckpt(ck, text);
    int rc;
    const char *msg = capture_run(ck, &rc);
    CHECK_EQ_INT(rc, SG_ERR_CONFIG);
    CHECK_STR_CONTAINS(msg, "evil.safetensors:__metadata__.config:1:1: key 'base'");
    CHECK_STR_CONTAINS(msg, "cannot name a base file");
    CHECK_MSG(g_c.seed != 777 && strcmp(g_c.data.root, "/secret/data") != 0,
              "the file named by the checkpoint's base: was read");
    /* a relative base (resolved against nothing) is refused the same way */
    write_ckpt(ck, "seed: 3\nbase: secret.yaml\n");
    msg = capture_run(ck, &rc);
    CHECK_EQ_INT(rc, SG_ERR_CONFIG);
    CHECK_STR_CONTAINS(msg, "cannot name a base file");
    /* the same checkpoint without base: loads (the refusal is about base:) */
    write_ckpt(ck, "seed: 3\n");
    msg = capture_run(ck, &rc);
    CHECK_EQ_INT(rc, SG_OK);
    CHECK_EQ_INT(g_c.seed, 3);
}

int main(void) {
    snprintf(g_dir, sizeof g_dir, "/tmp/sg-test-config-ckpt-XXXXXX");
    if (!mkdtemp(g_dir)) {
        perror("mkdtemp");
        return 1;
    }
    TEST_RUN(test_checkpoint_config_cannot_name_base);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    if (system(cmd) != 0) fprintf(stderr, "warning: could not remove %s\n", g_dir);
    return TEST_EXIT();
}
