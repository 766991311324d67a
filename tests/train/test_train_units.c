/* tests/train/test_train_units.c - LR schedule, SGD parameter groups, metrics
 * from hand-made confusion matrices, JSON writer, the device of each local
 * rank. No network, no data, no GPU. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "helpers.h"
#include "io/json.h"
#include "testutil.h"
#include "train/device.h"
#include "train/lr_schedule.h"
#include "train/metrics.h"
#include "train/optimizer.h"
#include "train/train_core.h"

static sg_train_cfg base_train(void) {
    sg_train_cfg t;
    memset(&t, 0, sizeof t);
    strcpy(t.lr_schedule, "poly");
    strcpy(t.warmup, "linear");
    strcpy(t.warmup_mode, "chained");
    strcpy(t.optimizer, "sgd");
    t.lr = 0.01;
    t.lr_gamma = 0.1;
    t.poly_power = 0.9;
    t.min_lr = 0.0;
    t.momentum = 0.9;
    t.head_lr_mult = 10.0;
    return t;
}

static void test_poly(void) {
    sg_train_cfg t = base_train();
    sg_lr_schedule s;
    CHECK_EQ_INT(sg_lr_schedule_init(&s, &t, 100), 0);
    CHECK_NEAR(sg_lr_at(&s, 0), 0.01, 1e-15);
    CHECK_NEAR(sg_lr_at(&s, 50), 0.01 * pow(0.5, 0.9), 1e-15);
    CHECK_NEAR(sg_lr_at(&s, 99), 0.01 * pow(0.01, 0.9), 1e-15);
    CHECK_NEAR(sg_lr_at(&s, 100), 0.0, 1e-15);
    CHECK_NEAR(sg_lr_at(&s, 1000), 0.0, 1e-15); /* clamped past the end */
    t.min_lr = 1e-4;
    CHECK_EQ_INT(sg_lr_schedule_init(&s, &t, 100), 0);
    CHECK_NEAR(sg_lr_at(&s, 50), (0.01 - 1e-4) * pow(0.5, 0.9) + 1e-4, 1e-15);
    CHECK_NEAR(sg_lr_at(&s, 100), 1e-4, 1e-15);
    t.poly_power = 1.0;
    t.min_lr = 0;
    CHECK_EQ_INT(sg_lr_schedule_init(&s, &t, 10), 0);
    CHECK_NEAR(sg_lr_at(&s, 3), 0.007, 1e-15);
}

/* The schedule as the checkpoint's lr_schedule metadata records it
 * (sg_lr_schedule_json): the exact text, step schedule with its milestones
 * and a linear warmup, and a poly one (no gamma, no milestones). */
static void test_schedule_json(void) {
    sg_train_cfg t = base_train();
    strcpy(t.lr_schedule, "step");
    t.lr = 0.05;
    t.lr_gamma = 0.5;
    t.lr_steps[0] = 1, t.lr_steps[1] = 3, t.n_lr_steps = 2;
    t.warmup_iters = 2;
    t.warmup_ratio = 0.01;
    sg_lr_schedule s;
    CHECK_EQ_INT(sg_lr_schedule_init(&s, &t, 4), 0);
    sg_json j = {0};
    sg_json_begin(&j);
    sg_lr_schedule_json(&s, 4, &j);
    sg_json_end(&j);
    int same = strcmp(j.buf, "{\"kind\":\"step\",\"base_lr\":0.050000000000000003,\"power\":"
                             "0.90000000000000002,\"min_lr\":0,\"gamma\":0.5,\"milestones\":\"1,"
                             "3\",\"warmup\":\"linear\",\"warmup_iters\":2,\"warmup_ratio\":0.01,"
                             "\"total_steps\":4,\"step\":4,\"next_lr\":0.012500000000000001}") == 0;
    if (!same) fprintf(stderr, "  got %s\n", j.buf);
    sg_json_free(&j);
    CHECK(same);
    strcpy(t.lr_schedule, "poly");
    CHECK_EQ_INT(sg_lr_schedule_init(&s, &t, 4), 0);
    sg_json_begin(&j);
    sg_lr_schedule_json(&s, 0, &j);
    sg_json_end(&j);
    same = strstr(j.buf, "\"kind\":\"poly\"") && !strstr(j.buf, "gamma") &&
           !strstr(j.buf, "milestones") && strstr(j.buf, "\"step\":0,\"next_lr\":0.0005");
    if (!same) fprintf(stderr, "  got %s\n", j.buf);
    sg_json_free(&j);
    CHECK(same);
}

static void test_constant_warmup(void) {
    sg_train_cfg t = base_train();
    strcpy(t.lr_schedule, "constant");
    t.warmup_iters = 10;
    t.warmup_ratio = 0.1;
    sg_lr_schedule s;
    CHECK_EQ_INT(sg_lr_schedule_init(&s, &t, 100), 0);
    CHECK_NEAR(sg_lr_at(&s, 0), 0.001, 1e-15);
    CHECK_NEAR(sg_lr_at(&s, 5), 0.01 * (0.1 + 0.9 * 0.5), 1e-15);
    CHECK_NEAR(sg_lr_at(&s, 10), 0.01, 1e-15);
    CHECK_NEAR(sg_lr_at(&s, 77), 0.01, 1e-15);
    /* warmup on top of poly multiplies the poly value */
    strcpy(t.lr_schedule, "poly");
    t.poly_power = 1.0;
    CHECK_EQ_INT(sg_lr_schedule_init(&s, &t, 100), 0);
    CHECK_NEAR(sg_lr_at(&s, 5), 0.01 * 0.95 * 0.55, 1e-15);
}

static void test_schedule_errors(void) {
    sg_train_cfg t = base_train();
    sg_lr_schedule s;
    strcpy(t.lr_schedule, "cosine_annealing");
    CHECK_EQ_INT(sg_lr_schedule_init(&s, &t, 100), SG_ERR_CONFIG);
    t = base_train();
    strcpy(t.warmup, "exp");
    CHECK_EQ_INT(sg_lr_schedule_init(&s, &t, 100), SG_ERR_CONFIG);
    t = base_train();
    strcpy(t.lr_schedule, "step"); /* no milestones */
    CHECK_EQ_INT(sg_lr_schedule_init(&s, &t, 100), SG_ERR_CONFIG);
    t.n_lr_steps = 2;
    t.lr_steps[0] = 50;
    t.lr_steps[1] = 50; /* not increasing */
    CHECK_EQ_INT(sg_lr_schedule_init(&s, &t, 100), SG_ERR_CONFIG);
    t.lr_steps[0] = 0; /* below 1 */
    CHECK_EQ_INT(sg_lr_schedule_init(&s, &t, 100), SG_ERR_CONFIG);
    t.lr_steps[0] = 20;
    CHECK_EQ_INT(sg_lr_schedule_init(&s, &t, 100), SG_OK);
    t = base_train();
    CHECK_EQ_INT(sg_lr_schedule_init(&s, &t, 0), SG_ERR_CONFIG);
    t.min_lr = 1.0;
    CHECK_EQ_INT(sg_lr_schedule_init(&s, &t, 10), SG_ERR_CONFIG);
}

/* Every step's lr of every schedule kind x warmup kind against the closed
 * forms of torch.optim.lr_scheduler, written out here independently of
 * train/lr_schedule.c: main(t) * warmup(t) (ChainedScheduler) or, under
 * warmup_mode sequential, base * warmup(t) then main(t - W) over T - W
 * steps (SequentialLR), with LinearLR's factor start + (1 - start) * t /
 * total and ConstantLR's factor before total_iters. */
static double ref_main(const char *kind, double base, double min_lr, double power, const int *ms,
                       int n_ms, double gamma, int t, int T) {
    if (!strcmp(kind, "poly")) return (base - min_lr) * pow(1.0 - (double)t / T, power) + min_lr;
    if (!strcmp(kind, "cosine"))
        return min_lr + 0.5 * (base - min_lr) * (1.0 + cos(3.14159265358979323846 * t / T));
    if (!strcmp(kind, "step")) {
        double lr = base;
        for (int i = 0; i < n_ms; i++)
            if (t >= ms[i]) lr *= gamma;
        return lr;
    }
    return base;
}

static void test_every_step_closed_forms(void) {
    const char *kinds[] = {"poly", "constant", "cosine", "step"};
    const char *warms[] = {"linear", "constant", "none"};
    const int T = 97, W = 13;
    const double r = 0.05;
    int checked = 0;
    for (int seq = 0; seq < 2; seq++)
        for (int k = 0; k < 4; k++)
            for (int wk = 0; wk < 3; wk++)
                for (int with_min = 0; with_min < 2; with_min++) {
                    sg_train_cfg t = base_train();
                    strcpy(t.lr_schedule, kinds[k]);
                    strcpy(t.warmup, warms[wk]);
                    strcpy(t.warmup_mode, seq ? "sequential" : "chained");
                    t.lr = 0.02;
                    t.min_lr = with_min ? 2e-4 : 0.0;
                    t.warmup_iters = W;
                    t.warmup_ratio = r;
                    t.lr_gamma = 0.3;
                    t.n_lr_steps = 3;
                    t.lr_steps[0] = 5; /* inside the warmup too */
                    t.lr_steps[1] = 40;
                    t.lr_steps[2] = 41;
                    sg_lr_schedule s;
                    CHECK_EQ_INT(sg_lr_schedule_init(&s, &t, T), SG_OK);
                    /* sequential: the schedule starts after the warmup (none: at 0) */
                    int w0 = seq && wk != 2 ? W : 0;
                    for (int it = 0; it < T; it++) {
                        double f = 1.0;
                        if (wk == 0 && it < W) f = r + (1.0 - r) * it / W;
                        if (wk == 1 && it < W) f = r;
                        double want;
                        if (seq && it < w0) want = t.lr * f;
                        else
                            want = ref_main(kinds[k], t.lr, t.min_lr, t.poly_power, t.lr_steps,
                                            t.n_lr_steps, t.lr_gamma, it - w0, T - w0) *
                                   (seq ? 1.0 : f);
                        double got = sg_lr_at(&s, it);
                        if (fabs(got - want) > 1e-13 * fabs(want) + 1e-18) {
                            fprintf(stderr,
                                    "%s + %s warmup (%s, min_lr %g), step %d: lr %.17g, "
                                    "closed form %.17g\n",
                                    kinds[k], warms[wk], t.warmup_mode, t.min_lr, it, got, want);
                            CHECK(0);
                        }
                        checked++;
                    }
                    /* the last step's lr and past the end: the value at T */
                    double at_T = ref_main(kinds[k], t.lr, t.min_lr, t.poly_power, t.lr_steps,
                                           t.n_lr_steps, t.lr_gamma, T - w0, T - w0);
                    CHECK_NEAR(sg_lr_at(&s, T + 5), at_T, 1e-15);
                }
    CHECK_EQ_INT(checked, 2 * 4 * 3 * 2 * T);
    {
        /* sequential needs a step after the warmup; an unknown mode is refused */
        sg_train_cfg t = base_train();
        strcpy(t.warmup_mode, "sequential");
        t.warmup_iters = 10;
        sg_lr_schedule s;
        CHECK_EQ_INT(sg_lr_schedule_init(&s, &t, 10), SG_ERR_CONFIG);
        CHECK_EQ_INT(sg_lr_schedule_init(&s, &t, 11), SG_OK);
        CHECK_NEAR(sg_lr_at(&s, 10), 0.01, 1e-15); /* poly's first value */
        strcpy(t.warmup_mode, "after");
        CHECK_EQ_INT(sg_lr_schedule_init(&s, &t, 100), SG_ERR_CONFIG);
    }
    /* spot values by hand: cosine halfway = (base + min) / 2; step after two
     * milestones = base * gamma^2 */
    sg_train_cfg t = base_train();
    strcpy(t.lr_schedule, "cosine");
    strcpy(t.warmup, "none");
    t.warmup_iters = 10; /* ignored with warmup none */
    t.min_lr = 0.002;
    sg_lr_schedule s;
    CHECK_EQ_INT(sg_lr_schedule_init(&s, &t, 100), SG_OK);
    CHECK_NEAR(sg_lr_at(&s, 0), 0.01, 1e-15);
    CHECK_NEAR(sg_lr_at(&s, 50), 0.006, 1e-15);
    strcpy(t.lr_schedule, "step");
    t.n_lr_steps = 2;
    t.lr_steps[0] = 30;
    t.lr_steps[1] = 60;
    CHECK_EQ_INT(sg_lr_schedule_init(&s, &t, 100), SG_OK);
    CHECK_NEAR(sg_lr_at(&s, 29), 0.01, 1e-15);
    CHECK_NEAR(sg_lr_at(&s, 30), 0.001, 1e-15);
    CHECK_NEAR(sg_lr_at(&s, 60), 0.0001, 1e-15);
}

/* The schedule and EMA keys' validation (core/config.c): each error names
 * its key and is a config error. */
static void test_schedule_config_keys(void) {
    static sg_config c;
    sg_config_defaults(&c);
    CHECK_EQ_INT(sg_config_set(&c, "data.root=/data"), SG_OK);
    CHECK_EQ_INT(sg_config_validate(&c), SG_OK);
    CHECK_EQ_INT(c.train.ema_decay == 0.0, 1); /* EMA off by default */
    CHECK_EQ_INT(c.train.ema_every, 1);
    CHECK_EQ_INT(c.eval.use_ema, 1);
    CHECK_EQ_INT(strcmp(c.train.warmup, "linear"), 0); /* today's warmup */
    CHECK_EQ_INT(sg_config_set(&c, "train.ema_decay=0.999"), SG_OK);
    CHECK_EQ_INT(sg_config_validate(&c), SG_OK);
    CHECK_EQ_INT(sg_config_set(&c, "train.ema_decay=1"), SG_OK); /* in the 0..1 range ... */
    CHECK_EQ_INT(sg_config_validate(&c), SG_ERR_CONFIG);         /* ... but not an EMA */
    CHECK_EQ_INT(sg_config_set(&c, "train.ema_decay=1.5"), SG_ERR_CONFIG);
    CHECK_EQ_INT(sg_config_set(&c, "train.ema_decay=0"), SG_OK);
    CHECK_EQ_INT(sg_config_set(&c, "train.ema_every=0"), SG_ERR_CONFIG);
    CHECK_EQ_INT(sg_config_set(&c, "train.lr_schedule=step"), SG_OK);
    CHECK_EQ_INT(sg_config_validate(&c), SG_ERR_CONFIG); /* no milestones */
    CHECK_EQ_INT(sg_config_set(&c, "train.lr_steps=[100, 100]"), SG_OK);
    CHECK_EQ_INT(sg_config_validate(&c), SG_ERR_CONFIG);                       /* not increasing */
    CHECK_EQ_INT(sg_config_set(&c, "train.lr_steps=[0, 100]"), SG_ERR_CONFIG); /* below 1 */
    CHECK_EQ_INT(sg_config_set(&c, "train.lr_steps=[100, 200]"), SG_OK);
    CHECK_EQ_INT(sg_config_validate(&c), SG_OK);
    CHECK_EQ_INT(sg_config_set(&c, "train.lr_schedule=cosine"), SG_OK);
    CHECK_EQ_INT(sg_config_set(&c, "train.lr_schedule=exp"), SG_ERR_CONFIG);
    CHECK_EQ_INT(sg_config_set(&c, "train.warmup=constant"), SG_OK);
    CHECK_EQ_INT(sg_config_set(&c, "train.warmup=exp"), SG_ERR_CONFIG);
    CHECK_EQ_INT(sg_config_validate(&c), SG_OK);
    /* sequential warmup must leave the schedule a step (chained need not) */
    CHECK_EQ_INT(sg_config_set(&c, "train.iters=100"), SG_OK);
    CHECK_EQ_INT(sg_config_set(&c, "train.warmup_iters=100"), SG_OK);
    CHECK_EQ_INT(sg_config_validate(&c), SG_OK);
    CHECK_EQ_INT(sg_config_set(&c, "train.warmup_mode=sequential"), SG_OK);
    CHECK_EQ_INT(sg_config_validate(&c), SG_ERR_CONFIG);
    CHECK_EQ_INT(sg_config_set(&c, "train.warmup_iters=99"), SG_OK);
    CHECK_EQ_INT(sg_config_validate(&c), SG_OK);
    CHECK_EQ_INT(sg_config_set(&c, "train.warmup_mode=after"), SG_ERR_CONFIG);
}

/* ---- a minimal host "backend" for the optimizer: alloc + the SGD formula ---- */
static void *h_alloc(sg_backend *be, size_t n) {
    (void)be;
    return calloc(1, n);
}
static void h_free(sg_backend *be, void *p) {
    (void)be;
    free(p);
}
static int sgd_calls;
static void h_sgd(sg_backend *be, float *p, const float *g, float *buf, size_t n, float lr,
                  float mom, float damp, float wd, int nesterov, int first) {
    (void)be;
    sgd_calls++;
    for (size_t i = 0; i < n; i++) {
        float d = g[i] + wd * p[i];
        if (mom != 0.0f) {
            buf[i] = first ? d : mom * buf[i] + (1 - damp) * d;
            d = nesterov ? d + mom * buf[i] : buf[i];
        }
        p[i] -= lr * d;
    }
}

/* the fused step as the backends define it: sgd_step per row (h_sgd counts
 * the rows) at its group's rate */
typedef struct {
    sg_sgd_tensor t[8];
    int n;
} h_plan;
static void *h_sgd_multi_plan(sg_backend *be, const sg_sgd_tensor *t, int n) {
    (void)be;
    h_plan *p = calloc(1, sizeof *p);
    if (!p || n > 8) { /* the test's fake holds 8 rows */
        fprintf(stderr, "FAIL h_sgd_multi_plan: %d rows (at most 8) or out of memory\n", n);
        exit(1);
    }
    memcpy(p->t, t, (size_t)n * sizeof *t);
    p->n = n;
    return p;
}
static void h_sgd_multi_step(sg_backend *be, void *plan, const float lr[SG_SGD_GROUPS], float mom,
                             float damp, float wd, int nesterov, int first) {
    h_plan *p = plan;
    for (int i = 0; i < p->n; i++)
        h_sgd(be, p->t[i].param, p->t[i].grad, p->t[i].buf, p->t[i].count, lr[p->t[i].group], mom,
              damp, wd, nesterov, first);
}
static void h_sgd_multi_free(sg_backend *be, void *plan) {
    (void)be;
    free(plan);
}

static void test_name_prefix(void) {
    CHECK(sg_name_matches_prefix("encoder.layer1.0.conv1.weight", "encoder.layer1"));
    CHECK(!sg_name_matches_prefix("encoder.layer10.0.conv1.weight", "encoder.layer1"));
    CHECK(sg_name_matches_prefix("aux_head.4.bias", "aux_head"));
    CHECK(sg_name_matches_prefix("aux_head", "aux_head"));
    CHECK(!sg_name_matches_prefix("aux_headx.1", "aux_head"));
    CHECK(sg_name_matches_prefix("encoder.layer10.x", "encoder."));
    CHECK(!sg_name_matches_prefix("anything", ""));
}

static void test_sgd_groups(void) {
    sg_ops ops;
    memset(&ops, 0, sizeof ops);
    ops.alloc = h_alloc;
    ops.free = h_free;
    ops.sgd_step = h_sgd;
    ops.sgd_multi_plan = h_sgd_multi_plan;
    ops.sgd_multi_step = h_sgd_multi_step;
    ops.sgd_multi_free = h_sgd_multi_free;
    sg_backend be = {.ops = &ops};
    float p[4][2] = {{1, 2}, {3, 4}, {5, 6}, {7, 8}}, g[4][2] = {{1, 1}, {1, 1}, {1, 1}, {1, 1}};
    sg_opt_param params[4] = {{"encoder.conv1.weight", p[0], g[0], 2, 0},
                              {"encoder.layer1.0.conv1.weight", p[1], g[1], 2, 0},
                              {"aux_head.4.weight", p[2], g[2], 2, 0},
                              {"decoder.4.bias", p[3], g[3], 2, 1}};
    sg_train_cfg t = base_train();
    t.weight_decay = 0.0;
    strcpy(t.freeze[0], "encoder.layer1");
    t.n_freeze = 1;
    strcpy(t.head_lr_prefixes[0], "aux_head");
    t.n_head_lr_prefixes = 1;
    sg_sgd opt;
    CHECK_EQ_INT(sg_sgd_init(&opt, &be, params, 4, &t), 0);
    CHECK_EQ_INT(opt.n_frozen, 2); /* by prefix, and by the registry's flag */
    CHECK_EQ_INT(opt.n_head, 1);
    CHECK(opt.e[1].buf == NULL);
    sgd_calls = 0;
    sg_sgd_step(&opt, 0.1);
    CHECK_EQ_INT(sgd_calls, 2);
    CHECK_NEAR(p[0][0], 1 - 0.1, 1e-6); /* first step: buf = g */
    CHECK_NEAR(p[1][0], 3, 0);          /* frozen: untouched */
    CHECK_NEAR(p[3][1], 8, 0);
    CHECK_NEAR(p[2][0], 5 - 1.0, 1e-6); /* head at 10x */
    sg_sgd_step(&opt, 0.1);             /* buf = 0.9*1 + 1 = 1.9 */
    CHECK_NEAR(p[0][0], 1 - 0.1 - 0.19, 1e-6);
    CHECK_NEAR(p[2][0], 5 - 1.0 - 1.9, 1e-5);
    CHECK_EQ_INT(sg_sgd_find(&opt, "aux_head.4.weight"), 2);
    CHECK_EQ_INT(sg_sgd_find(&opt, "nope"), -1);
    sg_sgd_free(&opt);
    /* a head prefix that matches nothing is a configuration error with a
     * multiplier (head_lr_mult 10 here) ... */
    strcpy(t.head_lr_prefixes[0], "aux_headz");
    th_cap_begin();
    CHECK_EQ_INT(sg_sgd_init(&opt, &be, params, 4, &t), SG_ERR_CONFIG);
    CHECK_STR_CONTAINS(th_cap_end(), "train.head_lr_prefixes: prefix 'aux_headz' matches no");
    /* ... and none at head_lr_mult 1, where it changes nothing (the default
     * prefix on a model without an aux head) */
    t.head_lr_mult = 1.0;
    CHECK_EQ_INT(sg_sgd_init(&opt, &be, params, 4, &t), 0);
    CHECK_EQ_INT(opt.n_head, 0);
    sg_sgd_free(&opt);
    /* a freeze prefix that matches nothing is a configuration error */
    strcpy(t.freeze[0], "encoder.layer9");
    CHECK_EQ_INT(sg_sgd_init(&opt, &be, params, 4, &t), SG_ERR_CONFIG);
}

static void test_metrics_handmade(void) {
    /* 4 classes; class 3 never in GT nor prediction; class 2 predicted but
     * absent from GT. rows = GT. */
    int64_t conf[16] = {50, 10, 0, 0, /* GT 0: 60 px */
                        5,  20, 5, 0, /* GT 1: 30 px */
                        0,  0,  0, 0, /* GT 2: none */
                        0,  0,  0, 0};
    sg_metrics m;
    sg_metrics_from_confusion(conf, 4, &m);
    CHECK_NEAR(m.iou[0], 50.0 / (60 + 55 - 50), 1e-12);
    CHECK_NEAR(m.iou[1], 20.0 / (30 + 30 - 20), 1e-12);
    CHECK_NEAR(m.iou[2], 0.0, 0); /* predicted, never true: counts as 0 */
    CHECK(isnan(m.iou[3]));       /* absent everywhere: excluded */
    CHECK(isnan(m.acc[2]) && isnan(m.acc[3]));
    CHECK_NEAR(m.acc[0], 50.0 / 60, 1e-12);
    CHECK_NEAR(m.miou, (50.0 / 65 + 20.0 / 40 + 0.0) / 3, 1e-12);
    CHECK_NEAR(m.macc, (50.0 / 60 + 20.0 / 30) / 2, 1e-12);
    CHECK_NEAR(m.pixel_acc, 70.0 / 90, 1e-12);
    CHECK_EQ_INT(m.total_pixels, 90);
    int64_t zero[4] = {0};
    sg_metrics_from_confusion(zero, 2, &m);
    CHECK(isnan(m.miou) && isnan(m.pixel_acc));
}

static void test_metrics_json(void) {
    int64_t conf[4] = {3, 1, 0, 0};
    sg_metrics m;
    sg_metrics_from_confusion(conf, 2, &m);
    sg_config cfg;
    memset(&cfg, 0, sizeof cfg);
    strcpy(cfg.data.class_names[0], "road \"A\"");
    cfg.data.n_class_names = 1;
    cfg.model.num_classes = 2;
    sg_json j = {0};
    sg_json_begin(&j);
    sg_json_int(&j, "iter", 7);
    sg_metrics_to_json(&m, &cfg, &j);
    sg_json_end(&j);
    CHECK_STR_CONTAINS(j.buf, "{\"iter\":7,\"miou\":0.375,");
    CHECK_STR_CONTAINS(j.buf, "\"classes\":[\"road \\\"A\\\"\",\"class_1\"]");
    CHECK_STR_CONTAINS(j.buf, "\"iou\":[0.75,0]");
    CHECK_STR_CONTAINS(j.buf, "\"acc\":[0.75,null]");
    sg_json_free(&j);
    /* table */
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    sg_metrics_print_table(&m, &cfg, f);
    fclose(f);
    CHECK_STR_CONTAINS(text, "| class_1              |   0.00 |    nan |");
    CHECK_STR_CONTAINS(text, "mIoU 37.50");
    free(text);
}

/* train/device.h: "cuda" is cuda:LOCAL_RANK with several processes on the
 * node (train, eval, predict and bench all open their backend this way);
 * an explicit cuda:N and cpu stay as they are; one process keeps "cuda". */
static void test_device_for_rank(void) {
    char d[32];
    CHECK_EQ_INT(sg_device_for_rank("cuda", 3, 4, d, sizeof d), SG_OK);
    CHECK(strcmp(d, "cuda:3") == 0);
    CHECK_EQ_INT(sg_device_for_rank("cuda", 0, 2, d, sizeof d), SG_OK);
    CHECK(strcmp(d, "cuda:0") == 0);
    CHECK_EQ_INT(sg_device_for_rank("cuda", 0, 1, d, sizeof d), SG_OK);
    CHECK(strcmp(d, "cuda") == 0);
    CHECK_EQ_INT(sg_device_for_rank("cuda:1", 3, 4, d, sizeof d), SG_OK);
    CHECK(strcmp(d, "cuda:1") == 0);
    CHECK_EQ_INT(sg_device_for_rank("cpu", 1, 2, d, sizeof d), SG_OK);
    CHECK(strcmp(d, "cpu") == 0);
    /* the name does not fit: an error, not a truncated device */
    CHECK_EQ_INT(sg_device_for_rank("cuda", 12, 16, d, 6), SG_ERR_RUNTIME);

    /* the backend: cpu stays cpu in a 2-process job */
    static sg_config cfg;
    sg_config_defaults(&cfg);
    cfg.threads = 1;
    sg_dist_env env = {.rank = 1, .world = 2, .local_rank = 1, .local_world = 2};
    sg_backend *be = sg_open_backend(&cfg, &env);
    CHECK(be != NULL);
    if (be) {
        sg_backend_info bi;
        sg_backend_get_info(be, &bi);
        CHECK(strcmp(bi.name, "cpu") == 0);
        CHECK_EQ_INT(bi.threads, 1);
        sg_backend_destroy(be);
    }
    /* env NULL: read here; a malformed launch environment gives NULL */
    setenv("RANK", "1", 1);
    unsetenv("WORLD_SIZE");
    CHECK(sg_open_backend(&cfg, NULL) == NULL);
    unsetenv("RANK");
}

/* The counts all-reduce's micro-batch sizes are checked before SyncBN uses
 * them: out of range, negative, or this rank's own slot changed. */
static void test_check_batch_sizes(void) {
    int64_t own[2] = {4, 3};
    int64_t ok[6] = {4, 2, 4, 3, 1, 0}; /* 2 slots x 3 ranks, this is rank 0 */
    CHECK_EQ_INT(sg_check_batch_sizes(ok, 2, 3, 0, own, 2, 4), SG_OK);
    int64_t big[6] = {4, 5, 4, 3, 1, 0};
    th_cap_begin();
    CHECK_EQ_INT(sg_check_batch_sizes(big, 2, 3, 0, own, 2, 4), SG_ERR_RUNTIME);
    const char *out = th_cap_end();
    CHECK_STR_CONTAINS(out, "micro-batch size of rank 1 (micro-batch 0) is 5");
    CHECK_STR_CONTAINS(out, "outside 0..train.batch_size");
    int64_t neg[6] = {4, -1, 4, 3, 1, 0};
    CHECK_EQ_INT(sg_check_batch_sizes(neg, 2, 3, 0, own, 2, 4), SG_ERR_RUNTIME);
    int64_t mine[6] = {4, 2, 4, 2, 1, 0}; /* rank 0's second slot came back 2, sent 3 */
    th_cap_begin();
    CHECK_EQ_INT(sg_check_batch_sizes(mine, 2, 3, 0, own, 2, 4), SG_ERR_RUNTIME);
    out = th_cap_end();
    CHECK_STR_CONTAINS(out, "not what this rank sent");
    /* fewer micro-batches than slots: the rest of this rank's slots are 0 */
    int64_t tail[6] = {4, 2, 4, 1, 1, 0};
    CHECK_EQ_INT(sg_check_batch_sizes(tail, 2, 3, 0, own, 1, 4), SG_ERR_RUNTIME);
    tail[3] = 0;
    CHECK_EQ_INT(sg_check_batch_sizes(tail, 2, 3, 0, own, 1, 4), SG_OK);
}

/* sg_config_set(SET) is taken, and sg_config_validate then refuses it,
 * saying MSG */
static void refused(sg_config *c, const char *set, const char *msg) {
    CHECK_EQ_INT(sg_config_set(c, set), 0);
    th_cap_begin();
    CHECK(sg_config_validate(c) != SG_OK);
    const char *out = th_cap_end();
    CHECK_STR_CONTAINS(out, msg);
}

/* cpu.layout: nchw and nhwc as given, auto = the CPU backend's preferred
 * layout for the precision (its table per ISA: tests/kernels/
 * test_cpu_layout.c); cuda.layout on CUDA, auto = NHWC under bf16, NCHW
 * under fp32; each key set to nhwc for the other device is refused by
 * validation. */
static void test_layout_of(void) {
    sg_config c;
    sg_config_defaults(&c);
    const char *why = NULL, *backend_why = NULL;
    /* auto on the CPU, fp32: what the backend prefers, with its reason */
    CHECK_EQ_INT(sg_layout_of(&c, &why),
                 sg_backend_cpu_preferred_layout(SG_PRECISION_FP32, &backend_why));
    CHECK_STR_CONTAINS(why, backend_why);
    CHECK_STR_CONTAINS(why, "measured faster for fp32");
    CHECK_EQ_INT(sg_config_set(&c, "train.precision=bf16"), 0);
    CHECK_EQ_INT(sg_layout_of(&c, &why), SG_LAYOUT_NHWC);
    CHECK_STR_CONTAINS(why, "measured faster for bf16");
    CHECK_EQ_INT(sg_config_set(&c, "cpu.layout=nhwc"), 0);
    CHECK_EQ_INT(sg_layout_of(&c, NULL), SG_LAYOUT_NHWC);
    CHECK_EQ_INT(sg_config_set(&c, "cpu.layout=nchw"), 0);
    CHECK_EQ_INT(sg_layout_of(&c, NULL), SG_LAYOUT_NCHW);
    /* CUDA: cuda.layout; auto = NHWC under bf16 (set above), NCHW under fp32 */
    CHECK_EQ_INT(sg_config_set(&c, "device=cuda"), 0);
    CHECK_EQ_INT(sg_config_set(&c, "cpu.layout=auto"), 0);
    CHECK_EQ_INT(sg_layout_of(&c, &why), SG_LAYOUT_NHWC);
    CHECK_STR_CONTAINS(why, "cuda.layout auto: channels last under bf16");
    CHECK_EQ_INT(sg_config_set(&c, "train.precision=fp32"), 0);
    CHECK_EQ_INT(sg_layout_of(&c, &why), SG_LAYOUT_NCHW);
    CHECK_STR_CONTAINS(why, "NCHW under fp32");
    CHECK_EQ_INT(sg_config_set(&c, "cuda.layout=nhwc"), 0);
    CHECK_EQ_INT(sg_layout_of(&c, NULL), SG_LAYOUT_NHWC);
    CHECK_EQ_INT(sg_config_validate(&c), SG_OK);
    CHECK_EQ_INT(sg_config_set(&c, "train.precision=bf16"), 0);
    CHECK_EQ_INT(sg_config_set(&c, "cuda.layout=nchw"), 0);
    CHECK_EQ_INT(sg_layout_of(&c, NULL), SG_LAYOUT_NCHW);
    CHECK_EQ_INT(sg_config_set(&c, "cuda.layout=auto"), 0);
    /* each backend's key is its own: the other device's is refused */
    refused(&c, "cpu.layout=nhwc", "key 'cpu.layout': nhwc is the CPU backend's");
    CHECK_EQ_INT(sg_config_set(&c, "cpu.layout=auto"), 0);
    CHECK_EQ_INT(sg_config_set(&c, "device=cpu"), 0);
    refused(&c, "cuda.layout=nhwc", "key 'cuda.layout': nhwc is the CUDA backend's");
    /* cuda.graphs: CUDA only, off by default */
    CHECK_EQ_INT(sg_config_set(&c, "cuda.layout=auto"), 0);
    CHECK_EQ_INT(c.cuda.graphs, 0);
    refused(&c, "cuda.graphs=true", "key 'cuda.graphs': true needs device: cuda");
    CHECK_EQ_INT(sg_config_set(&c, "device=cuda"), 0);
    CHECK_EQ_INT(sg_config_validate(&c), SG_OK);
}

int main(void) {
    TEST_RUN(test_poly);
    TEST_RUN(test_constant_warmup);
    TEST_RUN(test_schedule_json);
    TEST_RUN(test_schedule_errors);
    TEST_RUN(test_every_step_closed_forms);
    TEST_RUN(test_schedule_config_keys);
    TEST_RUN(test_name_prefix);
    TEST_RUN(test_sgd_groups);
    TEST_RUN(test_metrics_handmade);
    TEST_RUN(test_metrics_json);
    TEST_RUN(test_device_for_rank);
    TEST_RUN(test_check_batch_sizes);
    TEST_RUN(test_layout_of);
    return TEST_EXIT();
}
