/* tests/config/test_config.c - the configuration schema and loader.
 *
 * Defaults, every field of config.h having a schema row, YAML loading, every
 * error (with the exact file:line:column in the message), --set, validation,
 * write-back round trip, hash, --help-config listing.
 */
#include <fcntl.h>
#include <stddef.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/config.h"
#include "core/config_schema.h"
#include "tests/helpers.h"
#include "testutil.h"

#ifndef SG_SOURCE_ROOT
#error "SG_SOURCE_ROOT must name the source tree (set by tests/config/meson.build)"
#endif

static char g_dir[256];

static const char *write_file(const char *name, const char *text) {
    static char path[512];
    snprintf(path, sizeof path, "%s/%s", g_dir, name);
    if (th_write_text(path, text) != 0) abort();
    return path;
}

/* Loads text as file `name` over defaults; returns rc, message from th_cap_end. */
static int load_text(sg_config *cfg, const char *name, const char *text, const char **msg) {
    const char *path = write_file(name, text);
    sg_config_defaults(cfg);
    th_cap_begin();
    int rc = sg_config_load_file(cfg, path);
    *msg = th_cap_end();
    return rc;
}

static sg_config g_a, g_b; /* big structs: static */

static void test_defaults(void) {
    sg_config *c = &g_a;
    sg_config_defaults(c);
    CHECK(!strcmp(c->device, "cpu"));
    CHECK(!strcmp(c->run_dir, "runs/default"));
    CHECK_EQ_INT(c->seed, 0);
    CHECK_EQ_INT(c->threads, 0);
    CHECK(!strcmp(c->model.backbone, "resnet50"));
    CHECK_EQ_INT(c->model.output_stride, 8);
    CHECK_EQ_INT(c->model.n_aspp_rates, 3);
    CHECK_EQ_INT(c->model.aspp_rates[0], 12);
    CHECK_EQ_INT(c->model.aspp_rates[1], 24);
    CHECK_EQ_INT(c->model.aspp_rates[2], 36);
    CHECK_EQ_INT(c->model.num_classes, 19);
    CHECK_EQ_INT(c->model.aux_head, 1);
    CHECK_NEAR(c->model.aspp_dropout, 0.5, 0);
    CHECK_NEAR(c->model.aux_dropout, 0.1, 0);
    CHECK_EQ_INT(c->model.base_width, 64);
    CHECK_EQ_INT(c->model.sync_bn, 1);
    CHECK_NEAR(c->model.bn_eps, 1e-5, 0);
    CHECK_NEAR(c->model.bn_momentum, 0.1, 0);
    CHECK(!strcmp(c->model.pretrained, ""));
    CHECK(!strcmp(c->data.format, "cityscapes"));
    CHECK(!strcmp(c->data.train_split, "auto"));
    CHECK(!strcmp(c->data.val_split, "auto"));
    CHECK(!strcmp(c->data.label_map, "auto"));
    CHECK_EQ_INT(c->data.crop_size[0], 512);
    CHECK_EQ_INT(c->data.crop_size[1], 1024);
    CHECK_NEAR(c->data.scale_range[0], 0.5, 0);
    CHECK_NEAR(c->data.scale_range[1], 2.0, 0);
    CHECK_EQ_INT(c->data.hflip, 1);
    CHECK_NEAR(c->data.mean[0], 0.485, 0);
    CHECK_NEAR(c->data.mean[2], 0.406, 0);
    CHECK_NEAR(c->data.std[1], 0.224, 0);
    CHECK_EQ_INT(c->data.ignore_index, 255);
    CHECK_EQ_INT(c->data.workers, 4);
    CHECK_EQ_INT(c->data.prefetch, 4);
    CHECK_EQ_INT(c->data.shuffle, 1);
    CHECK(!strcmp(c->data.invalid_labels, "error"));
    CHECK_EQ_INT(c->data.n_class_names, 0);
    CHECK_EQ_INT(c->data.n_palette, 0);
    CHECK_NEAR(c->train.lr, 0.01, 0);
    CHECK_NEAR(c->train.momentum, 0.9, 0);
    CHECK_NEAR(c->train.weight_decay, 1e-4, 0);
    CHECK(!strcmp(c->train.lr_schedule, "poly"));
    CHECK_NEAR(c->train.poly_power, 0.9, 0);
    CHECK_EQ_INT(c->train.batch_size, 2);
    CHECK_EQ_INT(c->train.accum_steps, 1);
    CHECK_NEAR(c->train.aux_weight, 0.5, 0);
    CHECK_NEAR(c->train.head_lr_mult, 1.0, 0);
    CHECK_EQ_INT(c->train.n_head_lr_prefixes, 1);
    CHECK(!strcmp(c->train.head_lr_prefixes[0], "aux_head."));
    CHECK_EQ_INT(c->train.drop_last, 1);
    CHECK_EQ_INT(c->train.leftover_eval, 1);
    CHECK(!strcmp(c->train.loss_norm, "global"));
    CHECK_EQ_INT(c->train.log_every, 10);
    CHECK_EQ_INT(c->train.checkpoint_every, 1000);
    CHECK_EQ_INT(c->train.keep_checkpoints, 3);
    CHECK_EQ_INT(c->train.eval_every, 0);
    CHECK(!strcmp(c->dist.backend, "auto"));
    CHECK_EQ_INT(c->dist.timeout_s, 300);
    CHECK_NEAR(c->dist.bucket_mb, 25, 0);
    CHECK_NEAR(c->dist.first_bucket_mb, 1, 0);
    CHECK_EQ_INT(c->cudnn.benchmark, 1);
    CHECK_EQ_INT(c->cudnn.deterministic, 0);
    CHECK_EQ_INT(sg_config_validate(c), 0);
}

/* Every field declared in config.h's sg_*_cfg structs (except n_ counts)
 * has a schema row named section.field: read the header text itself. */
static void test_every_field_has_a_row(void) {
    FILE *f = fopen(SG_SOURCE_ROOT "/core/config.h", "r");
    CHECK_MSG(f != NULL, "cannot open %s", SG_SOURCE_ROOT "/core/config.h");
    char line[512], section[32] = "";
    int fields = 0, in_struct = 0;
    static const struct {
        const char *tag, *section;
    } map[] = {{"sg_model_cfg", "model"}, {"sg_data_cfg", "data"}, {"sg_train_cfg", "train"},
               {"sg_eval_cfg", "eval"},   {"sg_dist_cfg", "dist"}, {"sg_cudnn_cfg", "cudnn"},
               {"sg_cpu_cfg", "cpu"},     {"sg_cuda_cfg", "cuda"}, {"sg_config", ""}};
    while (fgets(line, sizeof line, f)) {
        if (!strncmp(line, "typedef struct ", 15)) {
            in_struct = 0;
            for (size_t i = 0; i < sizeof map / sizeof map[0]; i++) {
                size_t n = strlen(map[i].tag);
                if (!strncmp(line + 15, map[i].tag, n) && line[15 + n] == ' ') {
                    snprintf(section, sizeof section, "%s", map[i].section);
                    in_struct = 1;
                }
            }
            continue;
        }
        if (line[0] == '}') in_struct = 0;
        if (!in_struct) continue;
        /* "    int output_stride;  /x ... x/"  or "    char backbone[SG_NAME];" */
        char type[64], decl[128];
        if (sscanf(line, " %63s %127[^;];", type, decl) != 2) continue;
        if (!strcmp(type, "sg_model_cfg") || !strncmp(type, "sg_", 3)) continue; /* sub-structs */
        char *br = strchr(decl, '[');
        if (br) *br = 0;
        if (!strncmp(decl, "n_", 2)) continue;
        char key[256];
        snprintf(key, sizeof key, "%s%s%s", section, section[0] ? "." : "", decl);
        fields++;
        CHECK_MSG(sg_config_find_key(key) != NULL,
                  "config.h field %s has no schema row in config.c", key);
    }
    fclose(f);
    CHECK_MSG(fields >= 60, "parsed only %d fields from config.h", fields);
    /* and no row without a field: counts agree */
    CHECK_EQ_INT(sg_config_n_keys(), fields);
}

static void test_load_values(void) {
    const char *msg;
    int rc = load_text(&g_a, "good.yaml",
                       "# a comment\n"
                       "run_dir: runs/x\n"
                       "device: cuda:1\n"
                       "model:\n"
                       "  backbone: resnet18\n"
                       "  output_stride: 16\n"
                       "  aspp_rates: [6, 12, 18, 24]\n"
                       "  num_classes: 5\n"
                       "  aux_head: no\n"
                       "data:\n"
                       "  label_map: none\n"
                       "  crop_size: [64, 96]\n"
                       "  mean: [0.5, 0.5, 0.5]\n"
                       "  class_names:\n"
                       "    - a\n"
                       "    - \"b c\"\n"
                       "    - d\n"
                       "    - e\n"
                       "    - f\n"
                       "train:\n"
                       "  lr: 2e-2\n"
                       "  epochs: 3\n"
                       "  iters: 0\n"
                       "  freeze: [encoder.conv1., encoder.bn1.]\n"
                       "cudnn: {benchmark: false}\n",
                       &msg);
    CHECK_EQ_INT(rc, 0);
    sg_config *c = &g_a;
    CHECK(!strcmp(c->run_dir, "runs/x"));
    CHECK(!strcmp(c->device, "cuda:1"));
    CHECK(!strcmp(c->model.backbone, "resnet18"));
    CHECK_EQ_INT(c->model.output_stride, 16);
    CHECK_EQ_INT(c->model.n_aspp_rates, 4);
    CHECK_EQ_INT(c->model.aspp_rates[3], 24);
    CHECK_EQ_INT(c->model.aux_head, 0);
    CHECK_EQ_INT(c->data.crop_size[0], 64);
    CHECK_EQ_INT(c->data.crop_size[1], 96);
    CHECK_NEAR(c->data.mean[1], 0.5, 0);
    CHECK_NEAR(c->data.std[1], 0.224, 0); /* untouched key keeps its default */
    CHECK_EQ_INT(c->data.n_class_names, 5);
    CHECK(!strcmp(c->data.class_names[1], "b c"));
    CHECK_NEAR(c->train.lr, 0.02, 0);
    CHECK_EQ_INT(c->train.epochs, 3);
    CHECK_EQ_INT(c->train.n_freeze, 2);
    CHECK(!strcmp(c->train.freeze[1], "encoder.bn1."));
    CHECK_EQ_INT(c->cudnn.benchmark, 0);
    CHECK_EQ_INT(sg_config_validate(c), 0);
}

static void test_unknown_key(void) {
    const char *msg;
    int rc = load_text(&g_a, "unk.yaml",
                       "model:\n  num_classes: 19\ntrain:\n  momentum: 0.9\n  lrr: 0.1\n", &msg);
    CHECK_EQ_INT(rc, SG_ERR_CONFIG);
    CHECK_STR_CONTAINS(msg, "unk.yaml:5:3:");
    CHECK_STR_CONTAINS(msg, "unknown key 'train.lrr'");
    CHECK_STR_CONTAINS(msg, "did you mean train.lr?");
    /* right key, wrong section */
    rc = load_text(&g_a, "unk2.yaml", "model:\n  lr: 0.1\n", &msg);
    CHECK_EQ_INT(rc, SG_ERR_CONFIG);
    CHECK_STR_CONTAINS(msg, "unk2.yaml:2:3:");
    CHECK_STR_CONTAINS(msg, "did you mean train.lr?");
    /* misspelt section */
    rc = load_text(&g_a, "unk3.yaml", "seed: 1\nmodle:\n  num_classes: 3\n", &msg);
    CHECK_EQ_INT(rc, SG_ERR_CONFIG);
    CHECK_STR_CONTAINS(msg, "unk3.yaml:2:1:");
    CHECK_STR_CONTAINS(msg, "did you mean model?");
    /* nothing close: no suggestion, but a pointer to --help-config */
    rc = load_text(&g_a, "unk4.yaml", "zzzzzzzzzzzzzz: 1\n", &msg);
    CHECK_EQ_INT(rc, SG_ERR_CONFIG);
    CHECK(strstr(msg, "did you mean") == NULL);
    CHECK_STR_CONTAINS(msg, "--help-config");
}

static void test_wrong_type(void) {
    const char *msg;
    int rc = load_text(&g_a, "t1.yaml", "train:\n  lr: fast\n", &msg);
    CHECK_EQ_INT(rc, SG_ERR_CONFIG);
    CHECK_STR_CONTAINS(msg, "t1.yaml:2:7:");
    CHECK_STR_CONTAINS(msg, "key 'train.lr'");
    CHECK_STR_CONTAINS(msg, "expects a number");
    rc = load_text(&g_a, "t2.yaml", "model:\n  num_classes: 2.5\n", &msg);
    CHECK_EQ_INT(rc, SG_ERR_CONFIG);
    CHECK_STR_CONTAINS(msg, "t2.yaml:2:16:");
    CHECK_STR_CONTAINS(msg, "expects an integer");
    rc = load_text(&g_a, "t3.yaml", "data:\n  hflip: maybe\n", &msg);
    CHECK_EQ_INT(rc, SG_ERR_CONFIG);
    CHECK_STR_CONTAINS(msg, "key 'data.hflip'");
    CHECK_STR_CONTAINS(msg, "expects true or false");
    rc = load_text(&g_a, "t4.yaml", "model:\n  aspp_rates: 12\n", &msg);
    CHECK_EQ_INT(rc, SG_ERR_CONFIG);
    CHECK_STR_CONTAINS(msg, "t4.yaml:2:15:");
    CHECK_STR_CONTAINS(msg, "expects a list");
    rc = load_text(&g_a, "t5.yaml", "train:\n  lr: [0.1]\n", &msg);
    CHECK_EQ_INT(rc, SG_ERR_CONFIG);
    CHECK_STR_CONTAINS(msg, "expects a single float");
    rc = load_text(&g_a, "t6.yaml", "data:\n  crop_size: [64]\n", &msg);
    CHECK_EQ_INT(rc, SG_ERR_CONFIG);
    CHECK_STR_CONTAINS(msg, "t6.yaml:2:14:");
    CHECK_STR_CONTAINS(msg, "expects exactly 2 entries, got 1");
    rc = load_text(&g_a, "t7.yaml", "model: 3\n", &msg);
    CHECK_EQ_INT(rc, SG_ERR_CONFIG);
    CHECK_STR_CONTAINS(msg, "t7.yaml:1:8:");
    CHECK_STR_CONTAINS(msg, "is a section");
    rc = load_text(&g_a, "t8.yaml", "train:\n  iters: \"100\"\n",
                   &msg); /* a quoted string is not a number */
    CHECK_EQ_INT(rc, SG_ERR_CONFIG);
    CHECK_STR_CONTAINS(msg, "expects an integer");
    rc = load_text(&g_a, "t9.yaml", "- a\n- b\n", &msg);
    CHECK_EQ_INT(rc, SG_ERR_CONFIG);
    CHECK_STR_CONTAINS(msg, "t9.yaml:1:1:");
    CHECK_STR_CONTAINS(msg, "top level must be a mapping");
    rc = load_text(&g_a, "t10.yaml", "train:\n  lr:\n", &msg);
    CHECK_EQ_INT(rc, SG_ERR_CONFIG);
    CHECK_STR_CONTAINS(msg, "has no value");
}

static void test_out_of_range(void) {
    const char *msg;
    int rc = load_text(&g_a, "r1.yaml", "model:\n  num_classes: 300\n", &msg);
    CHECK_EQ_INT(rc, SG_ERR_CONFIG);
    CHECK_STR_CONTAINS(msg, "r1.yaml:2:16:");
    CHECK_STR_CONTAINS(msg, "key 'model.num_classes'");
    CHECK_STR_CONTAINS(msg, "300 is out of range");
    CHECK_STR_CONTAINS(msg, "1..254");
    rc = load_text(&g_a, "r2.yaml", "model:\n  output_stride: 32\n", &msg);
    CHECK_EQ_INT(rc, SG_ERR_CONFIG);
    CHECK_STR_CONTAINS(msg, "use one of 8, 16");
    rc = load_text(&g_a, "r3.yaml", "model:\n  backbone: resnet152\n", &msg);
    CHECK_EQ_INT(rc, SG_ERR_CONFIG);
    CHECK_STR_CONTAINS(msg, "r3.yaml:2:13:");
    CHECK_STR_CONTAINS(msg, "'resnet152' is not allowed");
    rc = load_text(&g_a, "r4.yaml", "data:\n  mean: [0.5, 1.5, 0.5]\n", &msg);
    CHECK_EQ_INT(rc, SG_ERR_CONFIG);
    CHECK_STR_CONTAINS(msg, "r4.yaml:2:15:"); /* the offending element */
    CHECK_STR_CONTAINS(msg, "(element 2)");
    rc = load_text(&g_a, "r5.yaml", "device: gpu\n", &msg);
    CHECK_EQ_INT(rc, SG_ERR_CONFIG);
    CHECK_STR_CONTAINS(msg, "use one of cpu, cuda, cuda:N");
    rc = load_text(&g_a, "r6.yaml", "device: cuda:x\n", &msg);
    CHECK_EQ_INT(rc, SG_ERR_CONFIG);
    rc = load_text(&g_a, "r7.yaml", "train:\n  lr: -0.1\n", &msg);
    CHECK_EQ_INT(rc, SG_ERR_CONFIG);
    CHECK_STR_CONTAINS(msg, "-0.1 is out of range");
    rc = load_text(&g_a, "r8.yaml", "seed: 99999999999\n", &msg);
    CHECK_EQ_INT(rc, SG_ERR_CONFIG);
    CHECK_STR_CONTAINS(msg, "out of range");
    rc = load_text(&g_a, "r9.yaml", "train:\n  lr: .nan\n", &msg);
    CHECK_EQ_INT(rc, SG_ERR_CONFIG);
}

static void test_malformed_yaml(void) {
    const char *msg;
    int rc = load_text(&g_a, "m1.yaml", "train:\n  lr: [0.1\n  momentum: 0.9\n", &msg);
    CHECK_EQ_INT(rc, SG_ERR_CONFIG);
    CHECK_STR_CONTAINS(msg, "m1.yaml:3:");
    CHECK_STR_CONTAINS(msg, "malformed YAML");
    rc = load_text(&g_a, "m2.yaml", "train:\n  lr: 0.1\n    momentum: 0.9\n", &msg);
    CHECK_EQ_INT(rc, SG_ERR_CONFIG);
    CHECK_STR_CONTAINS(msg, "m2.yaml:3:");
    CHECK_STR_CONTAINS(msg, "malformed YAML");
    rc = load_text(&g_a, "m3.yaml", "seed: 1\n---\nseed: 2\n", &msg);
    CHECK_EQ_INT(rc, SG_ERR_CONFIG);
    CHECK_STR_CONTAINS(msg, "m3.yaml:3:1:");
    CHECK_STR_CONTAINS(msg, "second YAML document");
    /* an empty file (or only comments) is valid: all defaults */
    rc = load_text(&g_a, "m4.yaml", "# nothing\n", &msg);
    CHECK_EQ_INT(rc, 0);
}

static void test_duplicate_key(void) {
    const char *msg;
    int rc = load_text(&g_a, "d1.yaml", "train:\n  lr: 0.1\n  momentum: 0.8\n  lr: 0.2\n", &msg);
    CHECK_EQ_INT(rc, SG_ERR_CONFIG);
    CHECK_STR_CONTAINS(msg, "d1.yaml:4:3:");
    CHECK_STR_CONTAINS(msg, "key 'train.lr'");
    CHECK_STR_CONTAINS(msg, "duplicate key (first given at line 2)");
    rc = load_text(&g_a, "d2.yaml", "train:\n  lr: 0.1\nseed: 1\ntrain:\n  momentum: 0.8\n", &msg);
    CHECK_EQ_INT(rc, SG_ERR_CONFIG);
    CHECK_STR_CONTAINS(msg, "d2.yaml:4:1:");
    CHECK_STR_CONTAINS(msg, "duplicate key");
}

static void test_missing_file(void) {
    char path[512];
    snprintf(path, sizeof path, "%s/does-not-exist.yaml", g_dir);
    sg_config_defaults(&g_a);
    th_cap_begin();
    int rc = sg_config_load_file(&g_a, path);
    const char *msg = th_cap_end();
    CHECK_EQ_INT(rc, SG_ERR_CONFIG);
    CHECK_STR_CONTAINS(msg, path);
    CHECK_STR_CONTAINS(msg, "No such file");
    th_cap_begin();
    rc = sg_config_load_file(&g_a, g_dir); /* a directory */
    msg = th_cap_end();
    CHECK_EQ_INT(rc, SG_ERR_CONFIG);
    CHECK_STR_CONTAINS(msg, g_dir);
}

static void test_set(void) {
    sg_config *c = &g_a;
    sg_config_defaults(c);
    CHECK_EQ_INT(sg_config_set(c, "train.lr=0.02"), 0);
    CHECK_NEAR(c->train.lr, 0.02, 0);
    CHECK_EQ_INT(sg_config_set(c, "model.aspp_rates=[6, 12,18]"), 0);
    CHECK_EQ_INT(c->model.n_aspp_rates, 3);
    CHECK_EQ_INT(c->model.aspp_rates[0], 6);
    CHECK_EQ_INT(c->model.aspp_rates[2], 18);
    CHECK_EQ_INT(sg_config_set(c, "device=cuda:3"), 0);
    CHECK(!strcmp(c->device, "cuda:3"));
    CHECK_EQ_INT(sg_config_set(c, "model.pretrained=/a b/c.safetensors"), 0);
    CHECK(!strcmp(c->model.pretrained, "/a b/c.safetensors"));
    CHECK_EQ_INT(sg_config_set(c, "model.pretrained="), 0);
    CHECK(!strcmp(c->model.pretrained, ""));
    CHECK_EQ_INT(sg_config_set(c, "train.head_lr_prefixes=[]"), 0);
    CHECK_EQ_INT(c->train.n_head_lr_prefixes, 0);
    CHECK_EQ_INT(sg_config_set(c, "data.hflip=false"), 0);
    CHECK_EQ_INT(c->data.hflip, 0);
    CHECK_EQ_INT(sg_config_set(c, "data.root=x=y"), 0); /* only the first '=' splits */
    CHECK(!strcmp(c->data.root, "x=y"));

    th_cap_begin();
    int rc = sg_config_set(c, "train.lrr=0.1");
    const char *msg = th_cap_end();
    CHECK_EQ_INT(rc, SG_ERR_CONFIG);
    CHECK_STR_CONTAINS(msg, "--set train.lrr=0.1");
    CHECK_STR_CONTAINS(msg, "did you mean train.lr?");
    th_cap_begin();
    rc = sg_config_set(c, "train.lr=abc");
    msg = th_cap_end();
    CHECK_EQ_INT(rc, SG_ERR_CONFIG);
    CHECK_STR_CONTAINS(msg, "key 'train.lr': expects a number, got 'abc'");
    CHECK_NEAR(c->train.lr, 0.02, 0); /* unchanged after a failed --set */
    th_cap_begin();
    rc = sg_config_set(c, "model.num_classes=0");
    msg = th_cap_end();
    CHECK_EQ_INT(rc, SG_ERR_CONFIG);
    CHECK_STR_CONTAINS(msg, "0 is out of range");
    th_cap_begin();
    rc = sg_config_set(c, "model.aspp_rates=[6, x]");
    msg = th_cap_end();
    CHECK_EQ_INT(rc, SG_ERR_CONFIG);
    CHECK_EQ_INT(c->model.aspp_rates[1], 12); /* lists commit all or nothing */
    th_cap_begin();
    rc = sg_config_set(c, "train.lr");
    msg = th_cap_end();
    CHECK_EQ_INT(rc, SG_ERR_CONFIG);
    CHECK_STR_CONTAINS(msg, "expects KEY=VALUE");
    th_cap_begin();
    rc = sg_config_set(c, "model=1");
    msg = th_cap_end();
    CHECK_EQ_INT(rc, SG_ERR_CONFIG);
    CHECK_STR_CONTAINS(msg, "is a section");
    th_cap_begin();
    rc = sg_config_set(c, "model.aspp_rates=[1,");
    msg = th_cap_end();
    CHECK_EQ_INT(rc, SG_ERR_CONFIG);
    CHECK_STR_CONTAINS(msg, "malformed YAML");
}

static void test_validate(void) {
    sg_config *c = &g_a;
    struct {
        const char *sets[3];
        const char *expect;
    } cases[] = {
        {{"train.epochs=5", NULL}, "exactly one of train.iters"},
        {{"train.iters=0", NULL}, "exactly one of train.iters"},
        {{"data.class_names=[a, b]", NULL}, "has 2 names but model.num_classes is 19"},
        {{"data.ignore_index=3", NULL}, "'data.ignore_index'"},
        {{"data.label_map=none", "model.num_classes=4", "data.palette=[1,2,3]"},
         "needs 3 (r,g,b) per class = 12"},
        {{"model.num_classes=4", NULL}, "'data.label_map'"},
        {{"data.crop_size=[4, 64]", NULL}, "smaller than model.output_stride"},
        {{"data.scale_range=[2.0, 1.0]", NULL}, "min 2 is above max 1"},
        {{"eval.crop_size=[64, 0]", NULL}, "'eval.crop_size'"},
        {{"eval.crop_size=[64, 64]", "eval.stride=[65, 32]"}, "larger than the crop"},
        {{"train.min_lr=0.5", NULL}, "'train.min_lr'"},
        {{"dist.backend=nccl", NULL}, "nccl needs device: cuda"},
        {{"train.warmup_iters=90000", NULL}, "more than train.iters"},
        {{"run_dir=/tmp/rrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrr",
          NULL},
         "checkpoint and log paths under it fit"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        sg_config_defaults(c);
        for (int j = 0; j < 3 && cases[i].sets[j]; j++)
            CHECK_EQ_INT(sg_config_set(c, cases[i].sets[j]), 0);
        th_cap_begin();
        int rc = sg_config_validate(c);
        const char *msg = th_cap_end();
        CHECK_MSG(rc == SG_ERR_CONFIG, "case %zu (%s) validated", i, cases[i].sets[0]);
        CHECK_STR_CONTAINS(msg, cases[i].expect);
    }
    sg_config_defaults(c);
    CHECK_EQ_INT(sg_config_set(c, "train.epochs=5"), 0);
    CHECK_EQ_INT(sg_config_set(c, "train.iters=0"), 0);
    CHECK_EQ_INT(sg_config_validate(c), 0);
}

/* Changes many keys of every type, writes, reloads over defaults: identical. */
static void test_write_roundtrip(void) {
    sg_config *a = &g_a, *b = &g_b;
    sg_config_defaults(a);
    const char *sets[] = {"run_dir=runs/with \"quotes\" and \\back",
                          "seed=12345",
                          "device=cuda:0",
                          "model.backbone=resnet101",
                          "model.aspp_rates=[1, 2, 3, 4, 5]",
                          "model.bn_eps=1.0000000000000001e-3",
                          "model.aspp_dropout=0.3333333333333333",
                          "data.mean=[0.1, 0.2, 0.30000000000000004]",
                          "data.class_names=[\"x: y\", 'it''s', \"#z\"]",
                          "model.num_classes=3",
                          "data.label_map=none",
                          "data.palette=[0, 0, 0, 255, 255, 255, 1, 2, 3]",
                          "train.lr=1e-7",
                          "train.weight_decay=0.0005",
                          "train.freeze=[encoder.layer1., encoder.conv1.]",
                          "train.nesterov=true",
                          "dist.bucket_mb=12.5",
                          "cudnn.deterministic=true",
                          "eval.crop_size=[512, 512]"};
    for (size_t i = 0; i < sizeof sets / sizeof sets[0]; i++)
        CHECK_MSG(sg_config_set(a, sets[i]) == 0, "--set %s", sets[i]);
    char path[512];
    snprintf(path, sizeof path, "%s/written.yaml", g_dir);
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    sg_config_write(a, f);
    fclose(f);
    sg_config_defaults(b);
    CHECK_EQ_INT(sg_config_load_file(b, path), 0);
    CHECK(!strcmp(b->run_dir, "runs/with \"quotes\" and \\back"));
    CHECK(!strcmp(b->data.class_names[1], "it's"));
    CHECK_NEAR(b->data.mean[2], 0.30000000000000004, 0);
    CHECK_MSG(memcmp(a, b, offsetof(sg_config, origin)) == 0,
              "reloaded configuration differs from the written one");
    CHECK(sg_config_hash(a) == sg_config_hash(b));
    CHECK_EQ_INT(sg_config_set(b, "train.lr=2e-7"), 0);
    CHECK(sg_config_hash(a) != sg_config_hash(b));
    /* defaults hash is stable across calls */
    sg_config_defaults(a);
    sg_config_defaults(b);
    CHECK(sg_config_hash(a) == sg_config_hash(b));
}

/* Issue 13 item 6: U+0085 (NEL) was written raw and reloaded as a space;
 * the other YAML line breaks and the characters libyaml refuses raw must
 * round-trip exactly too. */
static void test_write_roundtrip_unicode(void) {
    sg_config *a = &g_a, *b = &g_b;
    const char *msg;
    /* NEL, LS, PS, BOM, U+FFFE, C0 and C1 controls, DEL, tab, quote, and
     * plain UTF-8 (e-acute, CJK, an emoji) that must stay unescaped */
    int rc = load_text(
        a, "u1.yaml",
        "run_dir: \"a\\Nb\\x85c\\Ld\\Pe\\uFEFFf\\uFFFEg\\x01h\\x7fi\\x80j\\x9fk\\tl\\\"m\"\n"
        "data:\n  class_names: [\"\xc3\xa9\", \"\xe6\xbc\xa2\\N\", \"\xf0\x9f\x98\x80\"]\n"
        "  label_map: none\n"
        "model:\n  num_classes: 3\n",
        &msg);
    CHECK_EQ_INT(rc, 0);
    CHECK(strstr(a->run_dir, "a\xc2\x85"
                             "b\xc2\x85"
                             "c\xe2\x80\xa8"
                             "d\xe2\x80\xa9"
                             "e") != NULL);
    char path[512];
    snprintf(path, sizeof path, "%s/written_u.yaml", g_dir);
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    sg_config_write(a, f);
    fclose(f);
    sg_config_defaults(b);
    th_cap_begin();
    rc = sg_config_load_file(b, path);
    th_cap_end();
    CHECK_EQ_INT(rc, 0);
    CHECK_MSG(strcmp(a->run_dir, b->run_dir) == 0, "run_dir changed in the round trip");
    CHECK(strcmp(b->data.class_names[1], "\xe6\xbc\xa2\xc2\x85") == 0);
    CHECK_MSG(memcmp(a, b, offsetof(sg_config, origin)) == 0,
              "reloaded configuration differs from the written one");
    /* the written text has no raw line break inside a value */
    char *text = NULL;
    size_t len = 0;
    FILE *mem = open_memstream(&text, &len);
    CHECK(mem != NULL);
    sg_config_write(a, mem);
    fclose(mem);
    CHECK(strstr(text, "\xc2\x85") == NULL && strstr(text, "\xe2\x80\xa8") == NULL);
    CHECK_STR_CONTAINS(text, "\xe6\xbc\xa2"); /* ordinary UTF-8 is written as it is */
    free(text);
}

/* Issue 13 item 5: YAML nesting depth, size and value count are limited,
 * and checked before libyaml's document loader (quadratic in depth) runs. */
static void test_yaml_limits(void) {
    sg_config *a = &g_a;
    const char *msg;
    /* depth 100: a clear error at the level that is too deep */
    char deep[512] = "seed: ";
    for (int i = 0; i < 100; i++) strcat(deep, "[");
    for (int i = 0; i < 100; i++) strcat(deep, "]");
    strcat(deep, "\n");
    int rc = load_text(a, "deep.yaml", deep, &msg);
    CHECK_EQ_INT(rc, SG_ERR_CONFIG);
    CHECK_STR_CONTAINS(msg, "deep.yaml:1:");
    CHECK_STR_CONTAINS(msg, "nested more than 64 levels");
    /* block style too */
    char block[8192] = "";
    for (int i = 0; i < 70; i++) {
        size_t l = strlen(block);
        snprintf(block + l, sizeof block - l, "%*sk%d:\n", i, "", i);
    }
    rc = load_text(a, "deepblock.yaml", block, &msg);
    CHECK_EQ_INT(rc, SG_ERR_CONFIG);
    CHECK_STR_CONTAINS(msg, "deepblock.yaml:65:");
    CHECK_STR_CONTAINS(msg, "nested more than 64 levels");
    /* 200,000 levels: libyaml's loader would take minutes; refused at once */
    size_t n = 200000;
    char *huge = malloc(2 * n + 16);
    CHECK(huge != NULL);
    memcpy(huge, "seed: ", 6);
    memset(huge + 6, '[', n);
    memset(huge + 6 + n, ']', n);
    huge[6 + 2 * n] = 0;
    sg_config_defaults(a);
    th_cap_begin();
    rc = sg_config_load_string(a, huge, "huge");
    msg = th_cap_end();
    free(huge);
    CHECK_EQ_INT(rc, SG_ERR_CONFIG);
    CHECK_STR_CONTAINS(msg, "nested more than 64 levels");
    /* size: 1 MiB of YAML is allowed, one byte more is not */
    size_t big = SG_CONFIG_MAX_BYTES;
    char *text = malloc(big + 2);
    CHECK(text != NULL);
    memset(text, '#', big + 1);
    for (size_t i = 79; i < big + 1; i += 80) text[i] = '\n';
    text[big - 1] = '\n';
    text[big] = 0;
    sg_config_defaults(a);
    th_cap_begin();
    rc = sg_config_load_string(a, text, "one_mib");
    msg = th_cap_end();
    CHECK_EQ_INT(rc, 0);
    text[big] = '\n';
    text[big + 1] = 0;
    th_cap_begin();
    rc = sg_config_load_string(a, text, "too_big");
    msg = th_cap_end();
    CHECK_EQ_INT(rc, SG_ERR_CONFIG);
    CHECK_STR_CONTAINS(msg, "too_big: 1048577 bytes of YAML: a configuration is at most 1048576");
    text[big] = 0;
    const char *path = write_file("big.yaml", "");
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    for (int i = 0; i < 3; i++) fputs(text, f); /* 3 MiB */
    fclose(f);
    free(text);
    sg_config_defaults(a);
    th_cap_begin();
    rc = sg_config_load_file(a, path);
    msg = th_cap_end();
    CHECK_EQ_INT(rc, SG_ERR_CONFIG);
    CHECK_STR_CONTAINS(msg, "big.yaml: file larger than 1048576 bytes");
    /* value count: a list of 70,000 numbers (within 1 MiB) */
    size_t cnt = 70000;
    char *many = malloc(32 + 2 * cnt);
    CHECK(many != NULL);
    strcpy(many, "model:\n  aspp_rates: [");
    size_t l = strlen(many);
    for (size_t i = 0; i < cnt; i++) {
        many[l++] = '1';
        many[l++] = ',';
    }
    many[l - 1] = ']';
    many[l] = 0;
    sg_config_defaults(a);
    th_cap_begin();
    rc = sg_config_load_string(a, many, "many");
    msg = th_cap_end();
    free(many);
    CHECK_EQ_INT(rc, SG_ERR_CONFIG);
    CHECK_STR_CONTAINS(msg, "more than 65536 YAML values");
}

static void test_help_config_lists_every_key(void) {
    for (int md = 0; md < 2; md++) {
        char *text = NULL;
        size_t len = 0;
        FILE *mem = open_memstream(&text, &len);
        CHECK(mem != NULL);
        sg_config_print_schema(mem, md);
        fclose(mem);
        for (int i = 0; i < sg_config_n_keys(); i++) {
            const sg_config_key *k = sg_config_key_at(i);
            char needle[160];
            snprintf(needle, sizeof needle, md ? "| `%s` |" : "  %s ", k->name);
            CHECK_MSG(strstr(text, needle) != NULL, "%s missing from --help-config%s", k->name,
                      md ? " --markdown" : "");
            CHECK_MSG(strstr(text, k->doc) != NULL, "doc of %s missing", k->name);
        }
        if (md) CHECK_STR_CONTAINS(text, "| `model.output_stride` | int | `8` | 8, 16 |");
        free(text);
    }
}

static void test_suggest(void) {
    CHECK(!strcmp(sg_config_suggest("train.lrr"), "train.lr"));
    CHECK(!strcmp(sg_config_suggest("model.num_class"), "model.num_classes"));
    CHECK(!strcmp(sg_config_suggest("batch_size"), "train.batch_size") ||
          !strcmp(sg_config_suggest("batch_size"), "eval.batch_size"));
    CHECK(!strcmp(sg_config_suggest("data.crop"), "data.crop_size"));
    CHECK(sg_config_suggest("completely.unrelated.words") == NULL);
}

int main(void) {
    snprintf(g_dir, sizeof g_dir, "/tmp/sg-test-config-XXXXXX");
    if (!mkdtemp(g_dir)) {
        perror("mkdtemp");
        return 1;
    }
    TEST_RUN(test_defaults);
    TEST_RUN(test_every_field_has_a_row);
    TEST_RUN(test_load_values);
    TEST_RUN(test_unknown_key);
    TEST_RUN(test_wrong_type);
    TEST_RUN(test_out_of_range);
    TEST_RUN(test_malformed_yaml);
    TEST_RUN(test_duplicate_key);
    TEST_RUN(test_missing_file);
    TEST_RUN(test_set);
    TEST_RUN(test_validate);
    TEST_RUN(test_write_roundtrip);
    TEST_RUN(test_write_roundtrip_unicode);
    TEST_RUN(test_yaml_limits);
    TEST_RUN(test_help_config_lists_every_key);
    TEST_RUN(test_suggest);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    if (system(cmd) != 0) fprintf(stderr, "warning: could not remove %s\n", g_dir);
    return TEST_EXIT();
}
