/* tests/data/test_formats.c - the dataset format table (data/formats.h):
 * that core's schema lists the same formats in the same order, that every
 * row is complete and its own defaults pass its rules, that every row synth
 * can write round-trips through its index builder, that the format rules
 * give one message wherever they are applied (configuration validation with
 * the key's origin, sg_dataset_open, the commands before they write
 * anything), and that a new format is one row plus an index builder. */
#include <sys/stat.h>

#include "cmd/commands.h"
#include "core/cli.h"
#include "core/config_schema.h"
#include "core/log.h"
#include "data/dataset_internal.h"
#include "data/formats.h"
#include "data/synth.h"
#include "data_test.h"
#include "testutil.h"
#include "train/from_checkpoint.h"

static sg_config g_cfg;

/* A data section that takes row f's own defaults. */
static sg_data_cfg row_cfg(const sg_format *f, const char *root) {
    sg_data_cfg c;
    memset(&c, 0, sizeof c);
    snprintf(c.format, sizeof c.format, "%s", f->name);
    snprintf(c.root, sizeof c.root, "%s", root);
    snprintf(c.label_map, sizeof c.label_map, "%s", f->label_map);
    snprintf(c.reduce_zero_label, sizeof c.reduce_zero_label, "auto");
    snprintf(c.invalid_labels, sizeof c.invalid_labels, "error");
    c.ignore_index = 255;
    return c;
}

/* core cannot include data/: its schema spells the formats out, and this is
 * what keeps the two lists the same. */
static void test_schema_lists_the_table(void) {
    const sg_config_key *k = sg_config_find_key("data.format");
    CHECK(k && k->type == SG_KT_ENUM);
    if (!k) return;
    char names[512];
    sg_format_names(names, sizeof names, 0, "|", "|");
    CHECK_MSG(!strcmp(k->allowed, names),
              "core/config_schema.c allows data.format '%s' but data/formats.c has '%s': "
              "update the schema row",
              k->allowed, names);
    CHECK(sg_format_find(k->def) != NULL); /* the default format is a row */
    sg_format_names(names, sizeof names, 0, ", ", " or ");
    CHECK(!strcmp(names, "cityscapes, list, voc or ade20k"));
    sg_format_names(names, sizeof names, 1, ", ", " or ");
    CHECK(!strcmp(names, "cityscapes, voc or ade20k"));
    /* every row's fitting label_map is one the schema allows */
    const sg_config_key *lm = sg_config_find_key("data.label_map");
    for (int i = 0; lm && i < sg_format_count(); i++)
        CHECK(sg_config_allowed_match(lm->allowed, sg_format_at(i)->label_map));
}

static void test_every_row_is_complete(void) {
    CHECK(sg_format_count() >= 4);
    CHECK(sg_format_at(-1) == NULL && sg_format_at(sg_format_count()) == NULL);
    CHECK(sg_format_find("coco") == NULL && sg_format_find(NULL) == NULL);
    for (int i = 0; i < sg_format_count(); i++) {
        const sg_format *f = sg_format_at(i);
        CHECK(f->name && f->name[0]);
        CHECK(sg_format_find(f->name) == f); /* names are unique */
        CHECK_MSG(f->open_index != NULL, "format %s has no index builder", f->name);
        CHECK(f->n_classes >= 0 && f->n_classes <= 255);
        CHECK_MSG((f->n_classes > 0) == (f->class_names != NULL) &&
                      (f->n_classes > 0) == (f->palette != NULL),
                  "format %s: class names and palette go with a class count", f->name);
        for (int c = 0; c < f->n_classes; c++) {
            CHECK_MSG(f->class_names[c] && f->class_names[c][0], "format %s class %d has no name",
                      f->name, c);
            for (int d = 0; d < c; d++)
                CHECK_MSG(strcmp(f->class_names[c], f->class_names[d]) != 0,
                          "format %s: classes %d and %d are both '%s'", f->name, d, c,
                          f->class_names[c]);
            /* the public lookups read the row */
            CHECK(sg_layout_class_name(f->name, f->n_classes, c) == f->class_names[c]);
            uint8_t rgb[3];
            CHECK(sg_layout_color(f->name, f->n_classes, c, rgb) &&
                  !memcmp(rgb, f->palette + 3 * c, 3));
        }
        if (f->n_classes > 1) CHECK(sg_layout_class_name(f->name, f->n_classes - 1, 0) == NULL);
        CHECK(f->labels != SG_LABELS_CLASS_INDICES || !strcmp(f->label_map, "none"));
        CHECK(f->reduce_zero_label == 0 || f->reduce_zero_label == 1);
        CHECK(!f->synth_write || (f->synth_splits[0] && f->synth_splits[1]));
        /* the row's own defaults pass its own rules */
        sg_data_cfg c = row_cfg(f, "/nowhere");
        sg_format_use use;
        sg_format_problem p;
        CHECK_MSG(sg_format_resolve(&c, &use, &p) == SG_OK, "format %s: %s = %s", f->name, p.key,
                  p.why);
        CHECK(use.format == f && use.reduce_zero == f->reduce_zero_label);
        CHECK(use.use_map == !strcmp(f->label_map, "cityscapes"));
    }
    /* VOC's written-out palette is the bit pattern its PNGs carry */
    const sg_format *voc = sg_format_find("voc");
    for (int c = 0; voc && c < voc->n_classes; c++) {
        uint8_t rgb[3];
        sg_generated_color(c, rgb);
        CHECK(!memcmp(rgb, voc->palette + 3 * c, 3));
    }
    CHECK(sg_format_find("ade20k")->reduce_zero_label == 1);
    CHECK(sg_format_find("list")->synth_write == NULL);
}

/* synth's layouts are the table's rows with a writer, in table order. */
static void test_synth_layouts_follow_the_table(void) {
    int l = 0;
    for (int i = 0; i < sg_format_count(); i++) {
        const sg_format *f = sg_format_at(i);
        if (!f->synth_write) {
            CHECK(sg_synth_layout_parse(f->name) == -1);
            continue;
        }
        CHECK(!strcmp(sg_synth_layout_name((sg_synth_layout)l), f->name));
        CHECK_EQ_INT(sg_synth_layout_parse(f->name), l);
        l++;
    }
    CHECK(!strcmp(sg_synth_layout_name((sg_synth_layout)l), "?"));
    CHECK(!strcmp(sg_synth_layout_name(SG_SYNTH_CITYSCAPES), "cityscapes"));
    CHECK(!strcmp(sg_synth_layout_name(SG_SYNTH_VOC), "voc"));
    CHECK(!strcmp(sg_synth_layout_name(SG_SYNTH_ADE20K), "ade20k"));
    sg_synth_opts o;
    sg_synth_defaults(&o);
    o.out = dt_path("nolayout");
    o.layout = (sg_synth_layout)l;
    th_cap_begin();
    sg_status st = sg_synth_write(&o);
    CHECK_STR_CONTAINS(th_cap_end(), "(cityscapes, voc or ade20k)");
    CHECK_EQ_INT(st, SG_ERR_CONFIG);
}

/* Every row synth can write: written, indexed by the row's builder with the
 * row's defaults, every sample decoded with valid labels. A new row with a
 * writer is covered here without a new test. */
static void test_every_synth_row_round_trips(void) {
    for (int i = 0, l = 0; i < sg_format_count(); i++) {
        const sg_format *f = sg_format_at(i);
        if (!f->synth_write) continue;
        sg_synth_opts o;
        sg_synth_defaults(&o);
        o.out = dt_path("rt_%s", f->name);
        o.layout = (sg_synth_layout)l++;
        o.n_train = 2;
        o.n_val = 1;
        o.h = 24;
        o.w = 30;
        CHECK_MSG(sg_synth_write(&o) == SG_OK, "synth %s", f->name);
        sg_data_cfg c = row_cfg(f, o.out);
        int k = f->n_classes ? f->n_classes : 19;
        for (int s = 0; s < 2; s++) {
            sg_dataset *ds = sg_dataset_open(&c, f->synth_splits[s], k);
            CHECK_MSG(ds != NULL, "format %s split %s", f->name, f->synth_splits[s]);
            if (!ds) continue;
            CHECK_EQ_INT(sg_dataset_size(ds), s ? o.n_val : o.n_train);
            CHECK(!strcmp(sg_dataset_class_name(ds, 0), f->class_names[0]));
            for (int64_t j = 0; j < sg_dataset_size(ds); j++) {
                sg_img im, m;
                char err[SG_DATA_ERR_LEN];
                CHECK_MSG(sg_dataset_load(ds, j, &im, &m, err, sizeof err) == SG_OK, "%s: %s",
                          f->name, err);
                CHECK(im.h == 24 && im.w == 30);
                sg_img_free(&im);
                sg_img_free(&m);
            }
            sg_dataset_close(ds);
        }
    }
}

/* ---- the rules: one text, wherever they are applied ---- */

static const char *k_voc_rule = "cityscapes maps Cityscapes labelIds, but data.format voc "
                                "stores class indices: set data.label_map: none";

static void test_rules_in_validation(void) {
    sg_config *c = &g_cfg;
    sg_config_defaults(c);
    CHECK_EQ_INT(sg_config_set(c, "data.format=voc"), SG_OK);
    CHECK_EQ_INT(sg_config_set(c, "model.num_classes=21"), SG_OK);
    /* the default label_map (auto) is the row's: none for voc */
    CHECK_EQ_INT(sg_config_validate_with(c, sg_format_config_rules), SG_OK);
    sg_format_use use;
    sg_format_problem prob;
    CHECK_EQ_INT(sg_format_resolve(&c->data, &use, &prob), SG_OK);
    CHECK(!use.use_map);
    CHECK_EQ_INT(sg_config_set(c, "data.format=cityscapes"), SG_OK);
    CHECK_EQ_INT(sg_format_resolve(&c->data, &use, &prob), SG_OK);
    CHECK(use.use_map);
    CHECK_EQ_INT(sg_config_set(c, "data.format=list"), SG_OK);
    CHECK_EQ_INT(sg_format_resolve(&c->data, &use, &prob), SG_OK);
    CHECK(!use.use_map);
    /* auto on cityscapes with another class count: core names the key */
    CHECK_EQ_INT(sg_config_set(c, "data.format=cityscapes"), SG_OK);
    th_cap_begin();
    sg_status st = sg_config_validate_with(c, sg_format_config_rules);
    const char *out = th_cap_end();
    CHECK_EQ_INT(st, SG_ERR_CONFIG);
    CHECK_STR_CONTAINS(out, "key 'data.label_map' (default value): cityscapes maps to 19 classes "
                            "(auto: the map of data.format cityscapes)");
    CHECK_EQ_INT(sg_config_set(c, "data.format=voc"), SG_OK);
    /* core alone cannot know what voc's masks hold ... */
    CHECK_EQ_INT(sg_config_set(c, "model.num_classes=19"), SG_OK);
    CHECK_EQ_INT(sg_config_set(c, "data.label_map=cityscapes"), SG_OK);
    CHECK_EQ_INT(sg_config_validate(c), SG_OK);
    /* ... the format rules can, and the message names the key's origin */
    th_cap_begin();
    st = sg_config_validate_with(c, sg_format_config_rules);
    out = th_cap_end();
    CHECK_EQ_INT(st, SG_ERR_CONFIG);
    CHECK_STR_CONTAINS(out, "config error: --set: key 'data.label_map': cityscapes maps");
    CHECK_STR_CONTAINS(out, k_voc_rule);
    /* from a file: FILE:LINE */
    const char *yaml = dt_path("voc.yaml");
    dt_write_text(yaml, "data:\n  format: voc\n  label_map: cityscapes\n");
    sg_config_defaults(c);
    CHECK_EQ_INT(sg_config_load_file(c, yaml), SG_OK);
    th_cap_begin();
    sg_config_validate_with(c, sg_format_config_rules);
    out = th_cap_end();
    char want[1200];
    snprintf(want, sizeof want, "config error: %s:3: key 'data.label_map': %s", yaml, k_voc_rule);
    CHECK_STR_CONTAINS(out, want);
    CHECK_EQ_INT(sg_config_set(c, "data.label_map=none"), SG_OK);
    CHECK_EQ_INT(sg_config_set(c, "model.num_classes=21"), SG_OK);
    CHECK_EQ_INT(sg_config_validate_with(c, sg_format_config_rules), SG_OK);
    /* reduce_zero_label: true with the Cityscapes map, on any format */
    sg_config_defaults(c);
    CHECK_EQ_INT(sg_config_set(c, "data.reduce_zero_label=true"), SG_OK);
    th_cap_begin();
    st = sg_config_validate_with(c, sg_format_config_rules);
    CHECK_STR_CONTAINS(th_cap_end(), "--set: key 'data.reduce_zero_label': true does not combine "
                                     "with data.label_map: cityscapes");
    CHECK_EQ_INT(st, SG_ERR_CONFIG);
    /* a core error before the data section still comes first */
    sg_config_defaults(c);
    CHECK_EQ_INT(sg_config_set(c, "data.format=voc"), SG_OK);
    CHECK_EQ_INT(sg_config_set(c, "train.epochs=3"), SG_OK);
    th_cap_begin();
    sg_config_validate_with(c, sg_format_config_rules);
    out = th_cap_end();
    CHECK_STR_CONTAINS(out, "exactly one of train.iters");
    CHECK(strstr(out, "data.label_map") == NULL);
}

/* A split given as a path where the format takes a split name is refused at
 * validation, naming the key and its line; a list format's split is a file. */
static void test_split_as_path(void) {
    sg_config *c = &g_cfg;
    const char *yaml = dt_path("split.yaml");
    dt_write_text(yaml, "model:\n  num_classes: 21\ndata:\n  format: voc\n"
                        "  train_split: ImageSets/Segmentation/train.txt\n  val_split: val.txt\n");
    sg_config_defaults(c);
    CHECK_EQ_INT(sg_config_load_file(c, yaml), SG_OK);
    th_cap_begin();
    sg_status st = sg_config_validate_with(c, sg_format_config_rules);
    const char *out = th_cap_end();
    CHECK_EQ_INT(st, SG_ERR_CONFIG);
    char want[1200];
    snprintf(want, sizeof want,
             "%s:5: key 'data.train_split': 'ImageSets/Segmentation/train.txt' is a path, but "
             "data.format voc takes a split name (e.g. train+aug, val)",
             yaml);
    CHECK_STR_CONTAINS(out, want);
    CHECK_STR_CONTAINS(out, "key 'data.val_split': 'val.txt' is a path");
    CHECK_EQ_INT(sg_config_set(c, "data.format=cityscapes"), SG_OK);
    CHECK_EQ_INT(sg_config_set(c, "model.num_classes=19"), SG_OK);
    th_cap_begin();
    CHECK_EQ_INT(sg_config_validate_with(c, sg_format_config_rules), SG_ERR_CONFIG);
    CHECK_STR_CONTAINS(th_cap_end(), "data.format cityscapes takes a split name (e.g. train, val)");
    /* list: the split is a list file relative to data.root */
    CHECK_EQ_INT(sg_config_set(c, "data.format=list"), SG_OK);
    CHECK_EQ_INT(sg_config_validate_with(c, sg_format_config_rules), SG_OK);
    /* names, joined names */
    CHECK_EQ_INT(sg_config_set(c, "data.format=voc"), SG_OK);
    CHECK_EQ_INT(sg_config_set(c, "model.num_classes=21"), SG_OK);
    CHECK_EQ_INT(sg_config_set(c, "data.train_split=train+aug"), SG_OK);
    CHECK_EQ_INT(sg_config_set(c, "data.val_split=val"), SG_OK);
    CHECK_EQ_INT(sg_config_validate_with(c, sg_format_config_rules), SG_OK);
}

static void test_rules_in_dataset_open(void) {
    sg_data_cfg c = row_cfg(sg_format_find("voc"), dt_tmpdir());
    snprintf(c.label_map, sizeof c.label_map, "cityscapes");
    th_cap_begin();
    sg_dataset *ds = sg_dataset_open(&c, "val", 21);
    const char *out = th_cap_end();
    CHECK(ds == NULL);
    char want[512];
    snprintf(want, sizeof want, "data.label_map = %s", k_voc_rule);
    CHECK_STR_CONTAINS(out, want);
    snprintf(c.format, sizeof c.format, "coco");
    th_cap_begin();
    ds = sg_dataset_open(&c, "val", 21);
    CHECK_STR_CONTAINS(th_cap_end(),
                       "data.format = 'coco': expected cityscapes, list, voc or ade20k");
    CHECK(ds == NULL);
}

static int exists(const char *p) {
    struct stat st;
    return stat(p, &st) == 0;
}

/* The commands validate with the format rules before they write anything. */
static void test_commands_refuse_before_writing(void) {
    const char *run = dt_path("cmd_run");
    char set_run[1100];
    snprintf(set_run, sizeof set_run, "run_dir=%s", run);
    const char *train[] = {
        "train", "--set", "data.format=voc", "--set", "data.label_map=cityscapes", "--set",
        set_run, NULL};
    th_cap_begin();
    int rc = th_run_cmd(sg_cmd_train, train, -1);
    const char *out = th_cap_end();
    CHECK_EQ_INT(rc, 2);
    CHECK_STR_CONTAINS(out, "--set: key 'data.label_map': cityscapes maps");
    CHECK_STR_CONTAINS(out, "is not valid (nothing was written)");
    CHECK(!exists(run));
    const char *bench[] = {
        "bench", "--set", "data.format=ade20k", "--set", "data.label_map=cityscapes", "--set",
        set_run, NULL};
    th_cap_begin();
    rc = th_run_cmd(sg_cmd_bench, bench, -1);
    CHECK_STR_CONTAINS(th_cap_end(), "data.format ade20k stores class indices");
    CHECK_EQ_INT(rc, 2);
    CHECK(!exists(run));
    /* eval / predict: the configuration for a checkpoint, from --config */
    const char *yaml = dt_path("ck.yaml");
    dt_write_text(yaml, "data:\n  format: voc\n  label_map: cityscapes\n");
    const char *argv[] = {"eval", "--config", yaml, NULL};
    sg_cli cli;
    CHECK_EQ_INT(sg_cli_parse(&cli, 3, (char **)argv, "u", NULL), SG_OK);
    th_cap_begin();
    sg_status st = sg_config_for_checkpoint(&cli, dt_path("none.safetensors"), &g_cfg);
    CHECK_STR_CONTAINS(th_cap_end(), "ck.yaml:3: key 'data.label_map': cityscapes maps");
    CHECK_EQ_INT(st, SG_ERR_CONFIG);
}

/* ---- a new format is one row plus an index builder ---- */

/* The test format "flat": <root>/<split>/<name>.png with <name>.mask.png
 * beside it, masks of class indices. */
static sg_status flat_index(sg_dataset *ds, const sg_data_cfg *cfg, const char *split,
                            int use_map) {
    (void)use_map;
    ds_vec v = {0};
    for (int i = 0; i < 3; i++) {
        char rel[64];
        snprintf(rel, sizeof rel, "%s/s%d.png", split, i);
        char *img = sg_ds_join(cfg->root, rel);
        if (!sg_ds_is_file(img)) {
            free(img);
            break;
        }
        ds_entry *e = sg_ds_vec_push(&v);
        e->rel = sg_ds_strdup(rel);
        e->img = img;
        snprintf(rel, sizeof rel, "%s/s%d.mask.png", split, i);
        e->mask = sg_ds_join(cfg->root, rel);
    }
    if (v.n == 0) {
        SG_ERROR("flat: no images in %s/%s", cfg->root, split);
        return SG_ERR_RUNTIME;
    }
    ds->e = v.e;
    ds->n = v.n;
    return SG_OK;
}

static const char *const k_flat_names[2] = {"ground", "thing"};
static const uint8_t k_flat_palette[6] = {10, 20, 30, 200, 100, 50};
static const sg_format k_flat = {
    "flat", flat_index, 2,    k_flat_names,    k_flat_palette, SG_LABELS_CLASS_INDICES,
    "none", 0,          NULL, {"train", "val"}};

static void test_a_format_is_one_row(void) {
    enum { FH = 4, FW = 5 };
    dt_mkdirs(dt_path("flat/train"));
    uint8_t lab[FH * FW];
    for (int i = 0; i < FH * FW; i++) lab[i] = (uint8_t)(i % 3 == 2 ? 255 : i % 3);
    for (int i = 0; i < 2; i++) {
        dt_rgb(dt_path("flat/train/s%d.png", i), FH, FW, (uint8_t)i);
        dt_gray(dt_path("flat/train/s%d.mask.png", i), FH, FW, lab);
    }
    sg_data_cfg c = row_cfg(&k_flat, dt_path("flat"));
    sg_dataset *ds = sg_dataset_open_format(&k_flat, &c, "train", 2);
    CHECK(ds != NULL);
    if (!ds) return;
    CHECK_EQ_INT(sg_dataset_size(ds), 2);
    CHECK(!strcmp(sg_dataset_class_name(ds, 1), "thing"));
    CHECK(!memcmp(sg_dataset_palette(ds), k_flat_palette, 6));
    sg_img im, m;
    CHECK(sg_dataset_load(ds, 1, &im, &m, NULL, 0) == SG_OK);
    CHECK(!memcmp(m.data, lab, sizeof lab));
    sg_img_free(&im);
    sg_img_free(&m);
    sg_dataset_close(ds);
    /* and the rules follow from its row: class indices refuse the map */
    snprintf(c.label_map, sizeof c.label_map, "cityscapes");
    th_cap_begin();
    ds = sg_dataset_open_format(&k_flat, &c, "train", 2);
    CHECK_STR_CONTAINS(th_cap_end(), "data.format flat stores class indices");
    CHECK(ds == NULL);
}

int main(void) {
    TEST_RUN(test_schema_lists_the_table);
    TEST_RUN(test_every_row_is_complete);
    TEST_RUN(test_synth_layouts_follow_the_table);
    TEST_RUN(test_every_synth_row_round_trips);
    TEST_RUN(test_rules_in_validation);
    TEST_RUN(test_split_as_path);
    TEST_RUN(test_rules_in_dataset_open);
    TEST_RUN(test_commands_refuse_before_writing);
    TEST_RUN(test_a_format_is_one_row);
    return TEST_EXIT();
}
