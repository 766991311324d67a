/* tests/config/test_config_report.c - one run reports every mistake.
 *
 * A file with several independent errors reports each (loading and
 * validation), bounded by SG_CONFIG_MAX_ERRORS; the keys users of
 * mmsegmentation type get segtrain's name; YAML 1.1 booleans are accepted
 * where a boolean or auto|true|false is expected; the edit distance of the
 * suggestions counts a swap of neighbours as one edit.
 */
#include <stdlib.h>
#include <unistd.h>

#include "core/cli.h"
#include "core/config.h"
#include "core/config_schema.h"
#include "core/util.h"
#include "tests/helpers.h"
#include "testutil.h"

static char g_dir[256];
static sg_config g_c;

static const char *write_file(const char *name, const char *text) {
    static char path[512];
    snprintf(path, sizeof path, "%s/%s", g_dir, name);
    if (th_write_text(path, text) != 0) abort();
    return path;
}

static int count(const char *hay, const char *needle) {
    int n = 0;
    for (const char *p = strstr(hay, needle); p; p = strstr(p + 1, needle)) n++;
    return n;
}

/* Loads a file through the commands' path (file, --set, validation). */
static int load_cli(const char *path, const char **sets, int n_sets, const char **msg) {
    sg_cli cli;
    memset(&cli, 0, sizeof cli);
    cli.config_path = path;
    for (int i = 0; i < n_sets; i++) cli.sets[i] = sets[i];
    cli.n_sets = n_sets;
    th_cap_begin();
    int rc = sg_cli_load_config(&cli, &g_c);
    *msg = th_cap_end();
    return rc;
}

/* Three independent load errors (unknown key, wrong type, out of range) in
 * one file, and one in --set: all four in one run. */
static void test_load_errors_in_one_pass(void) {
    const char *p = write_file("three.yaml", "model:\n"
                                             "  num_classes: abc\n"
                                             "train:\n"
                                             "  lrr: 0.1\n"
                                             "  momentum: 7\n");
    const char *sets[] = {"train.iters=-3"};
    const char *msg;
    CHECK_EQ_INT(load_cli(p, sets, 1, &msg), SG_ERR_CONFIG);
    CHECK_STR_CONTAINS(msg, "three.yaml:2:16: key 'model.num_classes': expects an integer");
    CHECK_STR_CONTAINS(msg, "three.yaml:4:3: unknown key 'train.lrr' (did you mean train.lr?)");
    CHECK_STR_CONTAINS(msg, "three.yaml:5:13: key 'train.momentum': 7 is out of range");
    CHECK_STR_CONTAINS(msg, "--set train.iters=-3: key 'train.iters': -3 is out of range");
    CHECK_STR_CONTAINS(msg, "did not load (nothing was written)");
    CHECK_EQ_INT(count(msg, "config error:"), 4);
    /* the values that were fine are loaded */
    sg_config_defaults(&g_c);
    const char *ok = write_file("ok_and_bad.yaml", "seed: 5\nmodel:\n  num_classes: x\n");
    th_cap_begin();
    CHECK_EQ_INT(sg_config_load_file(&g_c, ok), SG_ERR_CONFIG);
    th_cap_end();
    CHECK_EQ_INT(g_c.seed, 5);
}

/* Three independent validation errors: all three, each naming its line. */
static void test_validation_errors_in_one_pass(void) {
    const char *p = write_file("rules.yaml", "train:\n"
                                             "  min_lr: 0.5\n"
                                             "data:\n"
                                             "  scale_range: [2.0, 1.0]\n"
                                             "  crop_size: [4, 64]\n");
    const char *msg;
    CHECK_EQ_INT(load_cli(p, NULL, 0, &msg), SG_ERR_CONFIG);
    CHECK_STR_CONTAINS(msg, "rules.yaml:2: key 'train.min_lr': 0.5 is above train.lr");
    CHECK_STR_CONTAINS(msg, "rules.yaml:4: key 'data.scale_range': min 2 is above max 1");
    CHECK_STR_CONTAINS(msg, "rules.yaml:5: key 'data.crop_size': 4 is smaller than");
    CHECK_STR_CONTAINS(msg, "is not valid (nothing was written)");
    CHECK_EQ_INT(count(msg, "config error:"), 3);
}

/* A file of 40 unknown keys: SG_CONFIG_MAX_ERRORS reported, then a stop. */
static void test_errors_are_bounded(void) {
    char text[4096] = "train:\n";
    for (int i = 0; i < 40; i++) {
        char line[64];
        snprintf(line, sizeof line, "  zzkey%02d: 1\n", i);
        strcat(text, line);
    }
    const char *p = write_file("many.yaml", text);
    sg_config_defaults(&g_c);
    th_cap_begin();
    CHECK_EQ_INT(sg_config_load_file(&g_c, p), SG_ERR_CONFIG);
    const char *msg = th_cap_end();
    CHECK_EQ_INT(count(msg, "unknown key"), SG_CONFIG_MAX_ERRORS);
    CHECK_STR_CONTAINS(msg, "20 errors; stopping here (fix these and run again)");
    CHECK(strstr(msg, "zzkey39") == NULL);
}

/* mmsegmentation's names get segtrain's, not an edit-distance guess. */
static void test_mmseg_hints(void) {
    static const struct {
        const char *yaml, *want;
    } cases[] = {
        {"type: CityscapesDataset\n", "unknown key 'type' (in segtrain: data.format"},
        {"data:\n  type: CityscapesDataset\n", "unknown key 'data.type' (in segtrain: data.format"},
        {"data_root: /data\n", "unknown key 'data_root' (in segtrain: data.root)"},
        {"data:\n  data_root: /data\n", "unknown key 'data.data_root' (in segtrain: data.root)"},
        {"data:\n  split: train.txt\n", "(in segtrain: data.train_split and data.val_split"},
        {"data:\n  img_dir: leftImg8bit/train\n", "(in segtrain: data.train_split"},
        {"data:\n  ann_dir: gtFine/train\n", "(in segtrain: data.train_split"},
        {"optimizer: {type: SGD, lr: 0.01}\n", "(in segtrain: train.optimizer, train.lr"},
        {"runner: {type: IterBasedRunner, max_iters: 80000}\n", "(in segtrain: train.iters"},
        {"train:\n  max_iters: 80000\n",
         "unknown key 'train.max_iters' (in segtrain: train.iters)"},
        {"work_dir: runs/x\n", "(in segtrain: run_dir)"},
        {"load_from: x.pth\n", "(in segtrain: model.pretrained)"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *p = write_file("mmseg.yaml", cases[i].yaml);
        sg_config_defaults(&g_c);
        th_cap_begin();
        CHECK_EQ_INT(sg_config_load_file(&g_c, p), SG_ERR_CONFIG);
        const char *msg = th_cap_end();
        CHECK_MSG(strstr(msg, cases[i].want) != NULL, "%s: got %s", cases[i].yaml, msg);
        CHECK(strstr(msg, "hflip") == NULL);
    }
    /* --set too */
    sg_config_defaults(&g_c);
    th_cap_begin();
    CHECK_EQ_INT(sg_config_set(&g_c, "data.split=val"), SG_ERR_CONFIG);
    CHECK_STR_CONTAINS(th_cap_end(), "(in segtrain: data.train_split and data.val_split");
}

/* YAML 1.1 booleans where a boolean or auto|true|false is expected. */
static void test_yaml11_booleans(void) {
    const char *p = write_file("bools.yaml", "data:\n"
                                             "  hflip: False\n"
                                             "  shuffle: no\n"
                                             "  reduce_zero_label: Yes\n"
                                             "model:\n"
                                             "  aux_head: OFF\n"
                                             "  sync_bn: n\n"
                                             "train:\n"
                                             "  nesterov: Y\n"
                                             "  momentum: 0.9\n");
    sg_config_defaults(&g_c);
    th_cap_begin();
    int rc = sg_config_load_file(&g_c, p);
    const char *msg = th_cap_end();
    CHECK_MSG(rc == SG_OK, "%s", msg);
    CHECK_EQ_INT(g_c.data.hflip, 0);
    CHECK_EQ_INT(g_c.data.shuffle, 0);
    CHECK(!strcmp(g_c.data.reduce_zero_label, "true"));
    CHECK_EQ_INT(g_c.model.aux_head, 0);
    CHECK_EQ_INT(g_c.model.sync_bn, 0);
    CHECK_EQ_INT(g_c.train.nesterov, 1);
    CHECK_EQ_INT(sg_config_set(&g_c, "data.reduce_zero_label=off"), SG_OK);
    CHECK(!strcmp(g_c.data.reduce_zero_label, "false"));
    CHECK_EQ_INT(sg_config_set(&g_c, "data.reduce_zero_label=auto"), SG_OK);
    CHECK(!strcmp(g_c.data.reduce_zero_label, "auto"));
    /* quoted, a boolean is a string: refused as before */
    th_cap_begin();
    CHECK_EQ_INT(sg_config_set(&g_c, "data.reduce_zero_label='yes'"), SG_ERR_CONFIG);
    CHECK_STR_CONTAINS(th_cap_end(), "'yes' is not allowed: use one of auto, true, false");
    /* an enum without true/false takes no boolean */
    th_cap_begin();
    CHECK_EQ_INT(sg_config_set(&g_c, "data.invalid_labels=yes"), SG_ERR_CONFIG);
    CHECK_STR_CONTAINS(th_cap_end(), "'yes' is not allowed");
    /* written back, it reloads the same */
    CHECK_EQ_INT(sg_config_set(&g_c, "data.reduce_zero_label=True"), SG_OK);
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    sg_config_write(&g_c, f);
    fclose(f);
    CHECK_STR_CONTAINS(buf, "reduce_zero_label: \"true\"");
    free(buf);
}

static void test_edit_distance(void) {
    CHECK_EQ_INT(sg_edit_distance("trian", "train"), 1);
    CHECK_EQ_INT(sg_edit_distance("train", "train"), 0);
    CHECK_EQ_INT(sg_edit_distance("evl", "eval"), 1);
    CHECK_EQ_INT(sg_edit_distance("", "abc"), 3);
    CHECK_EQ_INT(sg_edit_distance("kitten", "sitting"), 3);
}

int main(void) {
    snprintf(g_dir, sizeof g_dir, "/tmp/sg-test-config-report-XXXXXX");
    if (!mkdtemp(g_dir)) {
        perror("mkdtemp");
        return 1;
    }
    TEST_RUN(test_load_errors_in_one_pass);
    TEST_RUN(test_validation_errors_in_one_pass);
    TEST_RUN(test_errors_are_bounded);
    TEST_RUN(test_mmseg_hints);
    TEST_RUN(test_yaml11_booleans);
    TEST_RUN(test_edit_distance);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", g_dir);
    return TEST_EXIT();
}
