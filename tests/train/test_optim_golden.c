/* tests/train/test_optim_golden.c [FIXTURES [DEVICE]] - the optimizer
 * (train/optimizer.h) against torch: scripts/make_optim_golden.py's
 * fixtures (torch.optim.AdamW, torch.optim.SGD and
 * torch.nn.utils.clip_grad_norm_ on five parameters, one frozen, one in the
 * head group at lr x 10, three steps at changing rates) replayed through
 * sg_sgd_init / sg_sgd_step on the backend DEVICE (default cpu; cuda:0 on
 * the emulated device): parameters, AdamW's exp_avg / exp_avg_sq, SGD's
 * momentum buffer and the pre-clip norm within float32 rounding of torch's
 * after every step; the frozen parameter untouched. Also the optimizer
 * keys' validation (an unknown optimizer names the key and the allowed
 * values; betas in [0, 1)).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/config.h"
#include "core/log.h"
#include "io/safetensors.h"
#include "kernels/backend.h"
#include "tests/helpers.h"
#include "testutil.h"
#include "train/optimizer.h"

static const char *g_fixtures = SG_SOURCE_ROOT "/tests/fixtures";
static const char *g_device = "cpu";

enum { NP = 5, MAXN = 256 };

/* |got - want| <= 1e-6 * |want| + 2e-7 (a few float32 roundings of values
 * of order 1; torch's own CPU kernels may fuse what we round twice). */
static int close_to(float got, float want) {
    return fabsf(got - want) <= 1e-6f * fabsf(want) + 2e-7f;
}

static double meta_num(const sg_st_file *f, const char *key) {
    const char *v = sg_st_meta(f, key);
    return v ? strtod(v, NULL) : NAN;
}

/* Reads `name` (n floats) into dst; 0, or -1 when it is missing. */
static int read_t(const sg_st_file *f, const char *name, float *dst, size_t n) {
    const sg_st_tensor *t = sg_st_find(f, name);
    if (!t || t->count != n || sg_st_read_f32(f, t, dst, n) != SG_OK) {
        fprintf(stderr, "  fixture %s: tensor %s missing or of another size\n", sg_st_path(f),
                name);
        return -1;
    }
    return 0;
}

/* Compares n device floats with the fixture's tensor `name`; the number
 * of mismatches (the first printed). */
static int compare(sg_backend *be, const sg_st_file *f, const char *name, const float *dev,
                   size_t n) {
    float want[MAXN], got[MAXN];
    if (read_t(f, name, want, n)) return 1;
    be->ops->download(be, got, dev, n * sizeof(float));
    int bad = 0;
    for (size_t i = 0; i < n; i++)
        if (!close_to(got[i], want[i]) && bad++ == 0)
            fprintf(stderr, "  %s [%zu]: %.9g, torch %.9g\n", name, i, (double)got[i],
                    (double)want[i]);
    return bad;
}

static void run_case(const char *which) {
    char path[1024];
    snprintf(path, sizeof path, "%s/golden_optim_%s.safetensors", g_fixtures, which);
    sg_st_file *f = sg_st_open(path);
    CHECK_MSG(f != NULL, "cannot open %s (scripts/make_optim_golden.py writes it)", path);
    sg_backend *be = sg_backend_create(g_device, &(sg_backend_opts){.threads = 2});
    CHECK_MSG(be != NULL, "no backend %s", g_device);
    sg_config cfg;
    sg_config_defaults(&cfg);
    sg_train_cfg *t = &cfg.train;
    snprintf(t->optimizer, sizeof t->optimizer, "%s", sg_st_meta(f, "optimizer"));
    t->weight_decay = meta_num(f, "weight_decay");
    t->head_lr_mult = meta_num(f, "head_lr_mult");
    t->clip_grad_norm = meta_num(f, "clip_grad_norm");
    int adamw = strcmp(t->optimizer, "adamw") == 0;
    if (adamw) {
        t->betas[0] = meta_num(f, "beta1");
        t->betas[1] = meta_num(f, "beta2");
        t->eps = meta_num(f, "eps");
    } else {
        t->momentum = meta_num(f, "momentum");
        t->dampening = 0;
        t->nesterov = 0;
    }
    snprintf(t->freeze[0], sizeof t->freeze[0], "%s", sg_st_meta(f, "freeze"));
    t->n_freeze = 1;
    snprintf(t->head_lr_prefixes[0], sizeof t->head_lr_prefixes[0], "aux_head.");
    t->n_head_lr_prefixes = 1;
    /* the parameters, in the fixture's order */
    char names[NP][64];
    const char *pl = sg_st_meta(f, "params");
    CHECK(pl != NULL);
    sg_opt_param ps[NP];
    for (int i = 0; i < NP; i++) {
        size_t len = strcspn(pl, ",");
        CHECK(len > 0 && len < sizeof names[i]);
        memcpy(names[i], pl, len);
        names[i][len] = 0;
        pl += len + (pl[len] == ',');
        char nm[400];
        snprintf(nm, sizeof nm, "param/%s", names[i]);
        const sg_st_tensor *st = sg_st_find(f, nm);
        CHECK(st != NULL && st->count <= MAXN);
        float host[MAXN];
        CHECK(read_t(f, nm, host, st->count) == 0);
        float *p = be->ops->alloc(be, st->count * sizeof(float));
        float *g = be->ops->alloc(be, st->count * sizeof(float));
        be->ops->upload(be, p, host, st->count * sizeof(float));
        ps[i] = (sg_opt_param){names[i], p, g, st->count, 0};
    }
    sg_sgd opt;
    CHECK_EQ_INT(sg_sgd_init(&opt, be, ps, NP, t), SG_OK);
    CHECK_EQ_INT(opt.n_frozen, 1);
    CHECK_EQ_INT(opt.n_head, 1);
    CHECK_EQ_INT(opt.adamw, adamw);
    int steps = (int)meta_num(f, "steps");
    const char *lrs = sg_st_meta(f, "lr");
    CHECK(steps == 3 && lrs != NULL);
    int bad = 0;
    for (int k = 0; k < steps && !bad; k++) {
        char *end;
        double lr = strtod(lrs, &end);
        lrs = *end == ',' ? end + 1 : end;
        for (int i = 0; i < NP; i++) {
            char nm[400];
            float host[MAXN];
            snprintf(nm, sizeof nm, "grad/%d/%s", k, names[i]);
            CHECK(read_t(f, nm, host, ps[i].count) == 0);
            be->ops->upload(be, ps[i].grad, host, ps[i].count * sizeof(float));
        }
        sg_sgd_step(&opt, lr);
        if (t->clip_grad_norm > 0) {
            char nm[32];
            float want;
            snprintf(nm, sizeof nm, "norm/%d", k);
            CHECK(read_t(f, nm, &want, 1) == 0);
            CHECK_MSG(close_to((float)opt.grad_norm, want), "step %d: norm %.9g, torch %.9g", k,
                      opt.grad_norm, (double)want);
        } else {
            CHECK(isnan(opt.grad_norm));
        }
        for (int i = 0; i < NP; i++) {
            char nm[400];
            int e = sg_sgd_find(&opt, names[i]);
            snprintf(nm, sizeof nm, "after/%d/%s", k, names[i]);
            bad += compare(be, f, nm, ps[i].param, ps[i].count);
            if (opt.e[e].frozen) {
                snprintf(nm, sizeof nm, "param/%s", names[i]); /* untouched */
                bad += compare(be, f, nm, ps[i].param, ps[i].count);
                continue;
            }
            snprintf(nm, sizeof nm, "%s/%d/%s", adamw ? "exp_avg" : "momentum", k, names[i]);
            bad += compare(be, f, nm, opt.e[e].buf, ps[i].count);
            if (adamw) {
                snprintf(nm, sizeof nm, "exp_avg_sq/%d/%s", k, names[i]);
                bad += compare(be, f, nm, opt.e[e].buf2, ps[i].count);
            }
        }
        if (adamw) CHECK_EQ_INT((int)opt.steps, k + 1);
    }
    CHECK_MSG(bad == 0, "%s: %d values differ from torch's", which, bad);
    sg_sgd_free(&opt);
    for (int i = 0; i < NP; i++) {
        be->ops->free(be, ps[i].param);
        be->ops->free(be, ps[i].grad);
    }
    sg_backend_destroy(be);
    sg_st_close(f);
}

static void test_adamw(void) { run_case("adamw"); }
static void test_adamw_clip(void) { run_case("adamw_clip"); }
static void test_sgd_clip(void) { run_case("sgd_clip"); }

/* An unknown optimizer names the key and the allowed values; betas of 1
 * are refused; the mmseg names point to the keys. */
static void test_config(void) {
    sg_config c;
    sg_config_defaults(&c);
    th_cap_begin();
    sg_status rc = sg_config_set(&c, "train.optimizer=adam");
    const char *msg = th_cap_end();
    CHECK_EQ_INT(rc, SG_ERR_CONFIG);
    CHECK(strstr(msg, "train.optimizer") != NULL);
    CHECK(strstr(msg, "sgd") != NULL && strstr(msg, "adamw") != NULL);
    CHECK_EQ_INT(sg_config_set(&c, "train.optimizer=adamw"), SG_OK);
    CHECK_EQ_INT(sg_config_set(&c, "train.betas=[0.9, 0.98]"), SG_OK);
    CHECK_EQ_INT(sg_config_set(&c, "train.clip_grad_norm=1.5"), SG_OK);
    CHECK(c.train.betas[1] == 0.98 && c.train.clip_grad_norm == 1.5);
    CHECK_EQ_INT(sg_config_set(&c, "train.betas=[0.9, 1.0]"), SG_OK); /* in the schema's range */
    th_cap_begin();
    rc = sg_config_validate(&c);
    msg = th_cap_end();
    CHECK_EQ_INT(rc, SG_ERR_CONFIG);
    CHECK(strstr(msg, "train.betas") != NULL && strstr(msg, "[0, 1)") != NULL);
    th_cap_begin();
    rc = sg_config_set(&c, "train.clip_grad_norm=-1");
    msg = th_cap_end();
    CHECK_EQ_INT(rc, SG_ERR_CONFIG);
    CHECK(strstr(msg, "train.clip_grad_norm") != NULL);
}

int main(int argc, char **argv) {
    if (argc > 1) g_fixtures = argv[1];
    if (argc > 2) g_device = argv[2];
    sg_log_set_level(SG_LOG_WARN);
    TEST_RUN(test_adamw);
    TEST_RUN(test_adamw_clip);
    TEST_RUN(test_sgd_clip);
    TEST_RUN(test_config);
    return TEST_EXIT();
}
