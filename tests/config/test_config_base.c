/* tests/config/test_config_base.c - configuration inheritance (`base: FILE`).
 *
 * Override key by key, lists replaced (not merged), paths relative to the
 * file that names the base (a sibling directory, any working directory),
 * chains, the cycle / depth / size / path-length limits, `base:` where it
 * does not belong, error locations (a bad value in a base names the base
 * file; a validation error names the file and line that set the key, or
 * --set, or the default), texts that may not name a base, the annotated
 * --print-config output, and the shipped configs/ family.
 */
#include <limits.h>
#include <stddef.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/config.h"
#include "tests/helpers.h"
#include "testutil.h"

#ifndef SG_SOURCE_ROOT
#error "SG_SOURCE_ROOT must name the source tree (set by tests/config/meson.build)"
#endif

static char g_dir[256];

/* g_dir/name (a static ring of 8 buffers, so a few can be alive at once). */
static const char *P(const char *name) {
    static char ring[8][1024];
    static int next;
    char *p = ring[next++ % 8];
    snprintf(p, 1024, "%s/%s", g_dir, name);
    return p;
}

/* Writes text to g_dir/name (creating its directory); returns the path. */
static const char *put(const char *name, const char *text) {
    const char *path = P(name);
    char dir[1024];
    snprintf(dir, sizeof dir, "%s", path);
    for (char *s = dir + strlen(g_dir) + 1; (s = strchr(s, '/')) != NULL; s++) {
        *s = 0; /* mkdir -p of the directories under g_dir */
        mkdir(dir, 0777);
        *s = '/';
    }
    if (th_write_text(path, text) != 0) abort();
    return path;
}

static sg_config g_c, g_d; /* big structs: static */

/* Loads path over defaults with stderr captured; the message in *msg. */
static int load(sg_config *c, const char *path, const char **msg) {
    sg_config_defaults(c);
    th_cap_begin();
    int rc = sg_config_load_file(c, path);
    *msg = th_cap_end();
    return rc;
}

static const char *origin(const sg_config *c, const char *key) {
    static char buf[2048];
    return sg_config_origin_text(c, key, buf, sizeof buf);
}

/* The derived file's keys override the base's one by one; keys it does not
 * name keep the base's value; keys neither names keep the default. */
static void test_override(void) {
    const char *msg;
    put("ov/base.yaml", "seed: 5\n"
                        "model:\n  backbone: resnet18\n  aux_head: false\n"
                        "train:\n  lr: 0.05\n  momentum: 0.8\n");
    const char *d = put("ov/derived.yaml", "base: base.yaml\n"
                                           "train:\n  lr: 0.02\n");
    CHECK_EQ_INT(load(&g_c, d, &msg), 0);
    CHECK_NEAR(g_c.train.lr, 0.02, 0);      /* overridden */
    CHECK_NEAR(g_c.train.momentum, 0.8, 0); /* from the base, same section */
    CHECK_EQ_INT(g_c.seed, 5);              /* from the base */
    CHECK(!strcmp(g_c.model.backbone, "resnet18"));
    CHECK_EQ_INT(g_c.model.aux_head, 0);
    CHECK_NEAR(g_c.train.weight_decay, 1e-4, 0); /* default */
    CHECK_EQ_INT(sg_config_validate(&g_c), 0);
    /* `base:` may stand anywhere at the top level: the base still loads first */
    d = put("ov/derived_last.yaml", "train:\n  lr: 0.02\nbase: base.yaml\n");
    CHECK_EQ_INT(load(&g_c, d, &msg), 0);
    CHECK_NEAR(g_c.train.lr, 0.02, 0);
    CHECK_EQ_INT(g_c.seed, 5);
    /* the same values as one flat file */
    const char *flat = put("ov/flat.yaml",
                           "seed: 5\nmodel:\n  backbone: resnet18\n  aux_head: false\n"
                           "train:\n  lr: 0.02\n  momentum: 0.8\n");
    CHECK_EQ_INT(load(&g_d, flat, &msg), 0);
    CHECK_MSG(memcmp(&g_c, &g_d, offsetof(sg_config, origin)) == 0,
              "base + derived != the flat file");
    CHECK(sg_config_hash(&g_c) == sg_config_hash(&g_d));
}

/* A list in the derived file replaces the base's list: no merging, no
 * leftover entries (int, float-fixed and string lists). */
static void test_list_replacement(void) {
    const char *msg;
    put("ls/base.yaml", "model:\n  aspp_rates: [6, 12, 18, 24]\n  num_classes: 3\n"
                        "data:\n  label_map: none\n  class_names: [a, b, c]\n"
                        "  mean: [0.1, 0.2, 0.3]\n"
                        "train:\n  freeze: [encoder.conv1., encoder.layer1.]\n");
    const char *d = put("ls/derived.yaml", "base: base.yaml\n"
                                           "model:\n  aspp_rates: [2, 4]\n"
                                           "data:\n  mean: [0.5, 0.5, 0.5]\n"
                                           "train:\n  freeze: []\n");
    CHECK_EQ_INT(load(&g_c, d, &msg), 0);
    CHECK_EQ_INT(g_c.model.n_aspp_rates, 2);
    CHECK_EQ_INT(g_c.model.aspp_rates[0], 2);
    CHECK_EQ_INT(g_c.model.aspp_rates[1], 4);
    CHECK_EQ_INT(g_c.model.aspp_rates[2], 0); /* the base's 18 is gone */
    CHECK_NEAR(g_c.data.mean[0], 0.5, 0);
    CHECK_NEAR(g_c.data.mean[2], 0.5, 0);
    CHECK_EQ_INT(g_c.train.n_freeze, 0);     /* an empty list replaces too */
    CHECK_EQ_INT(g_c.data.n_class_names, 3); /* not named: the base's list */
    CHECK(!strcmp(g_c.data.class_names[2], "c"));
}

/* A relative base is relative to the directory of the file that names it,
 * not to the working directory: a base in a sibling directory, loaded from
 * two working directories and through a relative --config path. Absolute
 * bases work too. */
static void test_relative_paths(void) {
    const char *msg;
    put("rel/common/base.yaml", "seed: 11\ntrain:\n  lr: 0.03\n");
    const char *d = put("rel/runs/derived.yaml", "base: ../common/base.yaml\nseed: 12\n");
    char cwd[PATH_MAX];
    CHECK(getcwd(cwd, sizeof cwd) != NULL);
    CHECK_EQ_INT(chdir("/"), 0);
    CHECK_EQ_INT(load(&g_c, d, &msg), 0);
    CHECK_EQ_INT(g_c.seed, 12);
    CHECK_NEAR(g_c.train.lr, 0.03, 0);
    /* relative --config path from the directory above */
    CHECK_EQ_INT(chdir(g_dir), 0);
    CHECK_EQ_INT(load(&g_c, "rel/runs/derived.yaml", &msg), 0);
    CHECK_NEAR(g_c.train.lr, 0.03, 0);
    CHECK_STR_CONTAINS(origin(&g_c, "train.lr"), "rel/runs/../common/base.yaml:3");
    /* a base.yaml in the working directory must not be picked instead */
    put("base.yaml", "train:\n  lr: 0.09\n");
    CHECK_EQ_INT(chdir("rel/runs"), 0);
    CHECK_EQ_INT(load(&g_c, "derived.yaml", &msg), 0);
    CHECK_NEAR(g_c.train.lr, 0.03, 0);
    CHECK_EQ_INT(chdir(cwd), 0);
    /* absolute */
    char text[1200];
    snprintf(text, sizeof text, "base: %s\n", P("rel/common/base.yaml"));
    d = put("rel/abs.yaml", text);
    CHECK_EQ_INT(load(&g_c, d, &msg), 0);
    CHECK_EQ_INT(g_c.seed, 11);
}

/* a -> b -> c: each level overrides the one below, and each value's origin
 * names the file and line that set it last. */
static void test_chain_of_three(void) {
    const char *msg;
    put("ch/c.yaml", "seed: 1\ntrain:\n  lr: 0.1\n  momentum: 0.7\n  weight_decay: 0.001\n");
    put("ch/b.yaml", "base: c.yaml\ntrain:\n  lr: 0.2\n  momentum: 0.75\n");
    const char *a = put("ch/a.yaml", "base: b.yaml\n\ntrain:\n  lr: 0.3\n");
    CHECK_EQ_INT(load(&g_c, a, &msg), 0);
    CHECK_NEAR(g_c.train.lr, 0.3, 0);
    CHECK_NEAR(g_c.train.momentum, 0.75, 0);
    CHECK_NEAR(g_c.train.weight_decay, 0.001, 0);
    CHECK_EQ_INT(g_c.seed, 1);
    char want[1100];
    snprintf(want, sizeof want, "%s:4", P("ch/a.yaml"));
    CHECK_STR_CONTAINS(origin(&g_c, "train.lr"), want);
    snprintf(want, sizeof want, "%s:4", P("ch/b.yaml"));
    CHECK_STR_CONTAINS(origin(&g_c, "train.momentum"), want);
    snprintf(want, sizeof want, "%s:5", P("ch/c.yaml"));
    CHECK_STR_CONTAINS(origin(&g_c, "train.weight_decay"), want);
    CHECK(!strcmp(origin(&g_c, "train.dampening"), "default"));
    CHECK_EQ_INT(sg_config_set(&g_c, "train.lr=0.4"), 0);
    CHECK(!strcmp(origin(&g_c, "train.lr"), "--set"));
}

/* Cycles are found by real path (a symlink or "../x/" spelling of the same
 * file is the same file) and named with the whole chain. */
static void test_cycle(void) {
    const char *msg;
    put("cy/a.yaml", "base: b.yaml\nseed: 1\n");
    put("cy/b.yaml", "base: a.yaml\nseed: 2\n");
    int rc = load(&g_c, P("cy/a.yaml"), &msg);
    CHECK_EQ_INT(rc, SG_ERR_CONFIG);
    CHECK_STR_CONTAINS(msg, "cycle");
    char want[3200];
    snprintf(want, sizeof want, "%s -> %s -> %s", P("cy/a.yaml"), P("cy/b.yaml"), P("cy/a.yaml"));
    CHECK_STR_CONTAINS(msg, want);
    /* itself */
    put("cy/self.yaml", "seed: 1\nbase: ./self.yaml\n");
    rc = load(&g_c, P("cy/self.yaml"), &msg);
    CHECK_EQ_INT(rc, SG_ERR_CONFIG);
    CHECK_STR_CONTAINS(msg, "cycle");
    CHECK_STR_CONTAINS(msg, "self.yaml:2:7: key 'base'");
    /* through a symlink and a ../ spelling */
    put("cy/s1.yaml", "base: ../cy/link.yaml\n");
    unlink(P("cy/link.yaml"));
    CHECK_EQ_INT(symlink(P("cy/s1.yaml"), P("cy/link.yaml")), 0);
    rc = load(&g_c, P("cy/s1.yaml"), &msg);
    CHECK_EQ_INT(rc, SG_ERR_CONFIG);
    CHECK_STR_CONTAINS(msg, "cycle");
}

/* SG_CONFIG_MAX_CHAIN files in one chain load; one more is an error naming
 * the chain. */
static void test_depth_limit(void) {
    const char *msg;
    char name[64], text[128];
    for (int i = 0; i <= SG_CONFIG_MAX_CHAIN; i++) {
        snprintf(name, sizeof name, "dp/f%d.yaml", i);
        if (i < SG_CONFIG_MAX_CHAIN)
            snprintf(text, sizeof text, "base: f%d.yaml\nseed: %d\n", i + 1, i);
        else snprintf(text, sizeof text, "seed: %d\ntrain:\n  lr: 0.5\n", i);
        put(name, text);
    }
    /* f1 .. f8: exactly SG_CONFIG_MAX_CHAIN files */
    CHECK_EQ_INT(load(&g_c, P("dp/f1.yaml"), &msg), 0);
    CHECK_EQ_INT(g_c.seed, 1);
    CHECK_NEAR(g_c.train.lr, 0.5, 0);
    /* f0 .. f8: one more */
    int rc = load(&g_c, P("dp/f0.yaml"), &msg);
    CHECK_EQ_INT(rc, SG_ERR_CONFIG);
    char want[64];
    snprintf(want, sizeof want, "more than %d files in one base chain", SG_CONFIG_MAX_CHAIN);
    CHECK_STR_CONTAINS(msg, want);
    CHECK_STR_CONTAINS(msg, "f0.yaml -> ");
    CHECK_STR_CONTAINS(msg, "f7.yaml -> ");
}

/* Where the error is: a bad value in the base names the base file (with
 * line:column), then the line of the including file that named it. */
static void test_error_in_base(void) {
    const char *msg;
    put("eb/base.yaml", "seed: 1\ntrain:\n  lr: abc\n");
    const char *d = put("eb/derived.yaml", "seed: 2\nbase: base.yaml\n");
    int rc = load(&g_c, d, &msg);
    CHECK_EQ_INT(rc, SG_ERR_CONFIG);
    char want[1200];
    snprintf(want, sizeof want, "%s:3:7: key 'train.lr': expects a number", P("eb/base.yaml"));
    CHECK_STR_CONTAINS(msg, want);
    snprintf(want, sizeof want, "%s:2:7: key 'base': the base file named here did not load", d);
    CHECK_STR_CONTAINS(msg, want);
    /* unknown key and malformed YAML in a base */
    put("eb/base2.yaml", "train:\n  lrr: 0.1\n");
    d = put("eb/derived2.yaml", "base: base2.yaml\n");
    rc = load(&g_c, d, &msg);
    CHECK_EQ_INT(rc, SG_ERR_CONFIG);
    snprintf(want, sizeof want, "%s:2:3: unknown key 'train.lrr'", P("eb/base2.yaml"));
    CHECK_STR_CONTAINS(msg, want);
    put("eb/base3.yaml", "train: [\n");
    d = put("eb/derived3.yaml", "base: base3.yaml\n");
    rc = load(&g_c, d, &msg);
    CHECK_EQ_INT(rc, SG_ERR_CONFIG);
    CHECK_STR_CONTAINS(msg, "base3.yaml");
    CHECK_STR_CONTAINS(msg, "malformed YAML");
    /* a missing base names the including file and the resolved path */
    d = put("eb/derived4.yaml", "seed: 1\nbase: ../nowhere/base.yaml\n");
    rc = load(&g_c, d, &msg);
    CHECK_EQ_INT(rc, SG_ERR_CONFIG);
    snprintf(want, sizeof want, "%s:2:7: key 'base': cannot open the base file %s", d,
             P("eb/../nowhere/base.yaml"));
    CHECK_STR_CONTAINS(msg, want);
    CHECK_STR_CONTAINS(msg, "relative to the directory of");
}

/* A validation error names the file and line where the offending key was
 * set: a base, the derived file, --set, or its default. */
static void test_validation_error_location(void) {
    const char *msg;
    put("ve/base.yaml", "seed: 1\ntrain:\n  lr: 0.01\n  min_lr: 0.5\n");
    const char *d = put("ve/derived.yaml", "base: base.yaml\ntrain:\n  momentum: 0.8\n");
    CHECK_EQ_INT(load(&g_c, d, &msg), 0);
    th_cap_begin();
    int rc = sg_config_validate(&g_c);
    msg = th_cap_end();
    CHECK_EQ_INT(rc, SG_ERR_CONFIG);
    char want[1200];
    snprintf(want, sizeof want, "%s:4: key 'train.min_lr': 0.5 is above train.lr",
             P("ve/base.yaml"));
    CHECK_STR_CONTAINS(msg, want);
    /* the derived file sets it: the derived file is named */
    d = put("ve/derived2.yaml", "base: base.yaml\n\ntrain:\n  min_lr: 0.6\n");
    CHECK_EQ_INT(load(&g_c, d, &msg), 0);
    th_cap_begin();
    rc = sg_config_validate(&g_c);
    msg = th_cap_end();
    CHECK_EQ_INT(rc, SG_ERR_CONFIG);
    snprintf(want, sizeof want, "%s:4: key 'train.min_lr'", d);
    CHECK_STR_CONTAINS(msg, want);
    /* --set last */
    CHECK_EQ_INT(sg_config_set(&g_c, "train.min_lr=0.7"), 0);
    th_cap_begin();
    rc = sg_config_validate(&g_c);
    msg = th_cap_end();
    CHECK_EQ_INT(rc, SG_ERR_CONFIG);
    CHECK_STR_CONTAINS(msg, "config error: --set: key 'train.min_lr': 0.7 is above");
    /* a default value that conflicts with a key set in a file */
    d = put("ve/derived3.yaml",
            "base: base.yaml\ntrain:\n  min_lr: 0.0\nmodel:\n  num_classes: 4\n");
    CHECK_EQ_INT(load(&g_c, d, &msg), 0);
    th_cap_begin();
    rc = sg_config_validate(&g_c);
    msg = th_cap_end();
    CHECK_EQ_INT(rc, SG_ERR_CONFIG);
    CHECK_STR_CONTAINS(msg, "key 'data.label_map' (default value): cityscapes maps to 19 classes");
}

/* `base:` only at the top level of a file, only one, only a string; a
 * path too long; empty. */
static void test_base_misuse(void) {
    const char *msg;
    put("mu/base.yaml", "seed: 3\n");
    const char *d = put("mu/nested.yaml", "train:\n  base: base.yaml\n");
    int rc = load(&g_c, d, &msg);
    CHECK_EQ_INT(rc, SG_ERR_CONFIG);
    CHECK_STR_CONTAINS(msg, "nested.yaml:2:3: key 'train.base': base: belongs at the top level");
    d = put("mu/list.yaml", "base: [base.yaml, other.yaml]\n");
    rc = load(&g_c, d, &msg);
    CHECK_EQ_INT(rc, SG_ERR_CONFIG);
    CHECK_STR_CONTAINS(msg, "list.yaml:1:7: key 'base': expects one file path");
    d = put("mu/empty.yaml", "base:\n");
    rc = load(&g_c, d, &msg);
    CHECK_EQ_INT(rc, SG_ERR_CONFIG);
    CHECK_STR_CONTAINS(msg, "key 'base': expects one file path");
    d = put("mu/twice.yaml", "base: base.yaml\nseed: 1\nbase: base.yaml\n");
    rc = load(&g_c, d, &msg);
    CHECK_EQ_INT(rc, SG_ERR_CONFIG);
    CHECK_STR_CONTAINS(msg, "twice.yaml:3:1: key 'base': duplicate key");
    /* a path longer than SG_STR - 1 characters */
    static char text[3000];
    int n = snprintf(text, sizeof text, "base: ");
    for (int i = 0; i < 1100; i++) text[n++] = 'x';
    snprintf(text + n, sizeof text - n, ".yaml\n");
    d = put("mu/long.yaml", text);
    rc = load(&g_c, d, &msg);
    CHECK_EQ_INT(rc, SG_ERR_CONFIG);
    CHECK_STR_CONTAINS(msg, "key 'base': the path is");
    CHECK_STR_CONTAINS(msg, "characters long (at most 1023)");
    /* --set base=... is no way around it: base is not a key */
    sg_config_defaults(&g_c);
    th_cap_begin();
    rc = sg_config_set(&g_c, "base=mu/base.yaml");
    msg = th_cap_end();
    CHECK_EQ_INT(rc, SG_ERR_CONFIG);
    CHECK_STR_CONTAINS(msg, "can only be given in that file");
}

/* A configuration given as text cannot name a base (the text may come from
 * an untrusted checkpoint): refused, and the named file is never read. */
static void test_text_cannot_name_base(void) {
    char text[1200];
    put("tx/secret.yaml", "seed: 777\n");
    snprintf(text, sizeof text, "base: %s\ntrain:\n  lr: 0.5\n", P("tx/secret.yaml"));
    sg_config_defaults(&g_c);
    th_cap_begin();
    int rc = sg_config_load_string(&g_c, text, "ck.safetensors:__metadata__.config");
    const char *msg = th_cap_end();
    CHECK_EQ_INT(rc, SG_ERR_CONFIG);
    CHECK_STR_CONTAINS(msg, "ck.safetensors:__metadata__.config:1:1: key 'base': a configuration "
                            "given as text");
    CHECK_MSG(g_c.seed != 777, "the base named by a text was read");
}

/* All files of a chain together are limited (each file alone is below the
 * per-file limit here). */
static void test_chain_size_limit(void) {
    const char *msg;
    size_t big = SG_CONFIG_MAX_CHAIN_BYTES / 2 + 1000;
    char *text = malloc(big + 64);
    CHECK(text != NULL);
    if (!text) return;
    size_t n = (size_t)snprintf(text, 64, "seed: 4\n");
    while (n + 80 < big) n += (size_t)snprintf(text + n, 80, "# %070d\n", 0);
    text[n] = 0;
    put("sz/base.yaml", text);
    n = (size_t)snprintf(text, 64, "base: base.yaml\n");
    while (n + 80 < big) n += (size_t)snprintf(text + n, 80, "# %070d\n", 0);
    text[n] = 0;
    const char *d = put("sz/derived.yaml", text);
    free(text);
    CHECK_EQ_INT(load(&g_c, P("sz/base.yaml"), &msg), 0); /* alone: fine */
    int rc = load(&g_c, d, &msg);
    CHECK_EQ_INT(rc, SG_ERR_CONFIG);
    CHECK_STR_CONTAINS(msg, "the files of the base chain");
    CHECK_STR_CONTAINS(msg, "more than 1048576 (1 MiB)");
    CHECK_MSG(g_c.seed != 4, "the base was applied although the chain is too large");
}

/* --print-config's YAML: merged values, each non-default one with the
 * file:line it came from, and it loads back to the same configuration. */
static void test_print_config(void) {
    const char *msg;
    put("pc/base.yaml", "model:\n  backbone: resnet18\n  aspp_rates: [1, 2, 3, 4]\n");
    const char *d = put("pc/derived.yaml", "base: base.yaml\nmodel:\n  aspp_rates: [5, 6]\n");
    CHECK_EQ_INT(load(&g_c, d, &msg), 0);
    CHECK_EQ_INT(sg_config_set(&g_c, "train.lr=0.25"), 0);
    char *out = NULL;
    size_t len = 0;
    FILE *mem = open_memstream(&out, &len);
    CHECK(mem != NULL);
    sg_config_write_origins(&g_c, mem);
    fclose(mem);
    char want[1200];
    snprintf(want, sizeof want, "  backbone: \"resnet18\"  # %s:2\n", P("pc/base.yaml"));
    CHECK_STR_CONTAINS(out, want);
    snprintf(want, sizeof want, "  aspp_rates: [5, 6]  # %s:3\n", d);
    CHECK_STR_CONTAINS(out, want);
    CHECK_STR_CONTAINS(out, "  lr: 0.25  # --set\n");
    CHECK_STR_CONTAINS(out, "  momentum: 0.9\n"); /* defaults: no comment */
    CHECK(strstr(out, "base:") == NULL);          /* merged: no base key */
    sg_config_defaults(&g_d);
    CHECK_EQ_INT(sg_config_load_string(&g_d, out, "printed"), 0);
    CHECK_MSG(memcmp(&g_c, &g_d, offsetof(sg_config, origin)) == 0,
              "--print-config does not reload");
    free(out);
}

/* The shipped family: cityscapes.yaml and cityscapes-r101.yaml take the
 * recipe from _base/deeplabv3_r50.yaml. (tests/config/test_cli_binary.sh
 * checks every shipped config is valid.) */
static void test_shipped_configs(void) {
    const char *msg;
    CHECK_EQ_INT(load(&g_c, SG_SOURCE_ROOT "/configs/cityscapes.yaml", &msg), 0);
    CHECK_EQ_INT(sg_config_validate(&g_c), 0);
    CHECK_NEAR(g_c.train.weight_decay, 0.0005, 0);
    CHECK_NEAR(g_c.train.aux_weight, 0.4, 0);
    CHECK_EQ_INT(g_c.train.iters, 80000);
    CHECK_STR_CONTAINS(origin(&g_c, "train.weight_decay"), "configs/_base/deeplabv3_r50.yaml:");
    CHECK_STR_CONTAINS(origin(&g_c, "train.iters"), "configs/cityscapes.yaml:");
    CHECK_EQ_INT(load(&g_d, SG_SOURCE_ROOT "/configs/cityscapes-r101.yaml", &msg), 0);
    CHECK(!strcmp(g_d.model.backbone, "resnet101"));
    CHECK_STR_CONTAINS(origin(&g_d, "model.backbone"), "configs/cityscapes-r101.yaml:");
    CHECK_STR_CONTAINS(origin(&g_d, "data.crop_size"), "configs/cityscapes.yaml:");
    CHECK_STR_CONTAINS(origin(&g_d, "model.output_stride"), "configs/_base/deeplabv3_r50.yaml:");
    /* only the backbone, the run directory and the weights file differ */
    char diff[4096];
    int nd = sg_config_diff(&g_c, "r50", &g_d, "r101", "", diff, sizeof diff);
    CHECK_MSG(nd == 2, "%d differences: %s", nd, diff);
    CHECK_STR_CONTAINS(diff, "model.backbone");
    CHECK_STR_CONTAINS(diff, "run_dir");
}

int main(void) {
    snprintf(g_dir, sizeof g_dir, "/tmp/sg-test-config-base-XXXXXX");
    if (!mkdtemp(g_dir)) {
        perror("mkdtemp");
        return 1;
    }
    TEST_RUN(test_override);
    TEST_RUN(test_list_replacement);
    TEST_RUN(test_relative_paths);
    TEST_RUN(test_chain_of_three);
    TEST_RUN(test_cycle);
    TEST_RUN(test_depth_limit);
    TEST_RUN(test_error_in_base);
    TEST_RUN(test_validation_error_location);
    TEST_RUN(test_base_misuse);
    TEST_RUN(test_text_cannot_name_base);
    TEST_RUN(test_chain_size_limit);
    TEST_RUN(test_print_config);
    TEST_RUN(test_shipped_configs);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    if (system(cmd) != 0) fprintf(stderr, "warning: could not remove %s\n", g_dir);
    return TEST_EXIT();
}
