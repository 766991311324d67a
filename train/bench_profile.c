/* train/bench_profile.c - `segtrain bench --profile`: the step by op class
 * (train/bench.h, sg_bench_profile) from the model's per-layer totals
 * (model/model_profile.h) and the bench's phase clock.
 *
 * Layer rows are keyed "<kind> <pass>"; convolutions also get one row per
 * (pass, geometry). Outside the model: the loss, optimizer, comm ("ddp") and
 * data phases, and "other", the forward and backward phases' time that no
 * layer mark took (syncs, clock reads, the runner's loop). Everything is per
 * step: totals over the timed steps / iters. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "model/model_profile.h"
#include "train/bench.h"

typedef struct rows {
    sg_bench_prof_row *v;
    int n, cap;
} rows;

static sg_bench_prof_row *row_get(rows *r, const char *cls, const char *geom) {
    for (int i = 0; i < r->n; i++)
        if (strcmp(r->v[i].cls, cls) == 0 && strcmp(r->v[i].geom, geom) == 0) return &r->v[i];
    if (r->n == r->cap) {
        int cap = r->cap ? 2 * r->cap : 32;
        sg_bench_prof_row *v = realloc(r->v, (size_t)cap * sizeof *v);
        SG_CHECK(v != NULL, "out of host memory for the profile (%d rows)", cap);
        r->v = v;
        r->cap = cap;
    }
    sg_bench_prof_row *x = &r->v[r->n++];
    memset(x, 0, sizeof *x);
    snprintf(x->cls, sizeof x->cls, "%s", cls);
    snprintf(x->geom, sizeof x->geom, "%s", geom);
    return x;
}

static void row_add(sg_bench_prof_row *x, double ms, double cpu_ms, double calls, double gflop) {
    x->ms += ms;
    x->cpu_ms += cpu_ms;
    x->calls += calls;
    x->gflop += gflop;
}

static int by_ms_desc(const void *a, const void *b) {
    double x = ((const sg_bench_prof_row *)a)->ms, y = ((const sg_bench_prof_row *)b)->ms;
    return x < y ? 1 : x > y ? -1 : 0;
}

static void conv_geom(char *dst, size_t cap, const sg_layer_info *li) {
    char s[16], d[16], g[16] = "";
    if (li->stride_h == li->stride_w) snprintf(s, sizeof s, "%d", li->stride_h);
    else snprintf(s, sizeof s, "%dx%d", li->stride_h, li->stride_w);
    if (li->dil_h == li->dil_w) snprintf(d, sizeof d, "%d", li->dil_h);
    else snprintf(d, sizeof d, "%dx%d", li->dil_h, li->dil_w);
    if (li->groups > 1) snprintf(g, sizeof g, " g%d", li->groups);
    snprintf(dst, cap, "%dx%d s%s d%s %d->%d %dx%d%s", li->kh, li->kw, s, d, li->c_in, li->c_out,
             li->h_in, li->w_in, g);
}

static double phase_mean_ms(const sg_bench_result *r, int p) {
    return 1e3 * sg_bench_mean(r->phase_s[p], r->iters);
}
static double phase_cpu_mean_ms(const sg_bench_result *r, int p) {
    return 1e3 * sg_bench_mean(r->phase_cpu_s[p], r->iters);
}

void sg_bench_profile_collect(const sg_model *m, sg_bench_result *r) {
    sg_bench_profile *p = &r->prof;
    memset(p, 0, sizeof *p);
    rows cls = {0}, conv = {0};
    double per = 1.0 / r->iters;
    int nl = sg_model_num_layers(m);
    for (int li = 0; li < nl; li++) {
        sg_layer_info info;
        sg_model_layer_info(m, li, &info);
        /* the model's kinds, once each */
        char want[48];
        snprintf(want, sizeof want, " %s ", info.kind);
        char have[sizeof p->kinds + 2];
        snprintf(have, sizeof have, " %s ", p->kinds);
        if (!strstr(have, want)) {
            size_t len = strlen(p->kinds);
            snprintf(p->kinds + len, sizeof p->kinds - len, "%s%s", len ? " " : "", info.kind);
        }
        int is_conv = strcmp(info.kind, "conv") == 0;
        char geom[64] = "";
        if (is_conv) conv_geom(geom, sizeof geom, &info);
        for (int pass = 0; pass < SG_PROF_N; pass++) {
            sg_prof_entry e = sg_model_profile_get(m, li, pass);
            if (e.calls == 0) continue;
            char name[sizeof cls.v->cls];
            snprintf(name, sizeof name, "%s %s", info.kind, sg_prof_pass_name(pass));
            double ms = 1e3 * e.wall_s * per, cpu = 1e3 * e.cpu_s * per;
            double calls = (double)e.calls * per;
            double gflop = is_conv ? 2.0 * info.macs * calls / 1e9 : 0.0;
            row_add(row_get(&cls, name, ""), ms, cpu, calls, gflop);
            if (is_conv)
                row_add(row_get(&conv, sg_prof_pass_name(pass), geom), ms, cpu, calls, gflop);
            p->layers_ms += ms;
        }
    }
    /* the step outside the model */
    static const struct {
        int phase;
        const char *cls;
    } outside[] = {
        {SG_PH_LOSS, "loss"}, {SG_PH_OPT, "optimizer"}, {SG_PH_COMM, "ddp"}, {SG_PH_DATA, "data"}};
    for (size_t i = 0; i < sizeof outside / sizeof *outside; i++)
        row_add(row_get(&cls, outside[i].cls, ""), phase_mean_ms(r, outside[i].phase),
                phase_cpu_mean_ms(r, outside[i].phase), 1.0, 0.0);
    double fb = phase_mean_ms(r, SG_PH_FWD) + phase_mean_ms(r, SG_PH_BWD);
    double fb_cpu = phase_cpu_mean_ms(r, SG_PH_FWD) + phase_cpu_mean_ms(r, SG_PH_BWD);
    double layers_cpu = 0;
    for (int i = 0; i < cls.n; i++)
        if (strcmp(cls.v[i].cls, "loss") && strcmp(cls.v[i].cls, "optimizer") &&
            strcmp(cls.v[i].cls, "ddp") && strcmp(cls.v[i].cls, "data"))
            layers_cpu += cls.v[i].cpu_ms;
    row_add(row_get(&cls, "other", ""), fb - p->layers_ms, fb_cpu - layers_cpu, 1.0, 0.0);
    qsort(cls.v, (size_t)cls.n, sizeof *cls.v, by_ms_desc);
    qsort(conv.v, (size_t)conv.n, sizeof *conv.v, by_ms_desc);
    p->cls = cls.v;
    p->n_cls = cls.n;
    p->conv = conv.v;
    p->n_conv = conv.n;
    p->step_ms = 1e3 * sg_bench_mean(r->step_s, r->iters);
}

void sg_bench_profile_free(sg_bench_profile *p) {
    free(p->cls);
    free(p->conv);
    memset(p, 0, sizeof *p);
}
