/* cmd/bench.c - `segtrain bench`: parse the command line, run the timed
 * training steps (train/bench.h), print the summary and write it as JSON.
 *
 * FLOP convention: the model's forward FLOPs are 2 x the multiply-adds of
 * every convolution (sg_model_flops: backbone, ASPP, classifier, aux head;
 * BN, ReLU, pooling, resize and loss not counted); a training step counts
 * 3 x forward (backward = data gradient + weight gradient, each ~ forward).
 * Achieved FLOP/s = that / the median step time, per rank; the fraction is of
 * the per-device peak (measured with the backend's conv, or --peak-gflops).
 *
 * Traffic: the modelled DRAM bytes and FLOPs per phase (train/bench_traffic.h)
 * of the design the run follows, with the achieved GB/s and FLOP/s over the
 * measured phase times; --traffic prints the model for every design at the
 * config's batch and crop and exits without planning or running the model. */
#include "train/bench.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmd/commands.h"
#include "core/cli.h"
#include "core/log.h"
#include "core/outdir.h"
#include "core/util.h"
#include "io/json.h"
#include "train/bench_traffic.h"
#include "train/config_rules.h"
#include "train/device.h"
#include "train/metrics.h"

/* SG_OK, or SG_ERR_CONFIG after a usage error. */
static sg_status parse_int(const sg_cli *cli, const char *opt, const char *s, int lo, int *out) {
    if (sg_parse_int(s, lo, 1000000, out) != 0)
        return sg_cli_usage_error(cli, "%s %s: expected an integer in %d..1000000", opt, s, lo);
    return SG_OK;
}

/* One profile row as a JSON object (cls_key: "class" or "pass"). */
static void prof_row_json(sg_json *rj, const sg_bench_prof_row *x, double step_ms,
                          const char *cls_key) {
    sg_json_begin(rj);
    sg_json_str(rj, cls_key, x->cls);
    if (x->geom[0]) sg_json_str(rj, "geometry", x->geom);
    sg_json_num(rj, "ms", x->ms);
    sg_json_num(rj, "pct", step_ms > 0 ? 100.0 * x->ms / step_ms : 0.0);
    sg_json_num(rj, "cpu_ms", x->cpu_ms);
    sg_json_num(rj, "calls", x->calls);
    if (x->gflop > 0) {
        sg_json_num(rj, "gflop", x->gflop);
        sg_json_num(rj, "gflop_s", x->ms > 0 ? x->gflop / (x->ms / 1e3) : 0.0);
    }
    sg_json_end(rj);
}

/* [rows...] as JSON text into j (a growing buffer), for sg_json_raw. */
static char *prof_rows_json(const sg_bench_prof_row *v, int n, double step_ms,
                            const char *cls_key) {
    size_t cap = 64, len = 1;
    char *out = malloc(cap);
    SG_CHECK(out != NULL, "out of host memory");
    out[0] = '[';
    for (int i = 0; i < n; i++) {
        sg_json rj = {0};
        prof_row_json(&rj, &v[i], step_ms, cls_key);
        size_t add = strlen(rj.buf) + 1;
        if (len + add + 2 > cap) {
            while (len + add + 2 > cap) cap *= 2;
            char *t = realloc(out, cap);
            SG_CHECK(t != NULL, "out of host memory");
            out = t;
        }
        if (i) out[len++] = ',';
        memcpy(out + len, rj.buf, add - 1);
        len += add - 1;
        sg_json_free(&rj);
    }
    out[len++] = ']';
    out[len] = '\0';
    return out;
}

static void write_profile_json(const sg_bench_profile *p, sg_json *j) {
    sg_json_obj_begin(j, "profile");
    sg_json_str(j, "timing", "backend synchronised at every layer mark; mean per timed step");
    sg_json_num(j, "step_ms", p->step_ms);
    sg_json_num(j, "layers_ms", p->layers_ms);
    sg_json_str(j, "layer_kinds", p->kinds);
    char *t = prof_rows_json(p->cls, p->n_cls, p->step_ms, "class");
    sg_json_raw(j, "classes", t);
    free(t);
    t = prof_rows_json(p->conv, p->n_conv, p->step_ms, "pass");
    sg_json_raw(j, "convs", t);
    free(t);
    sg_json_obj_end(j);
}

/* The phases of the traffic model as the bench's phases. */
static const int traffic_phase[SG_TR_N_PHASES] = {SG_PH_FWD, SG_PH_LOSS, SG_PH_BWD, SG_PH_OPT};

static void traffic_cost_json(sg_json *j, const char *key, const sg_traffic_cost *c, double ms) {
    sg_json_obj_begin(j, key);
    sg_json_num(j, "read_mb", c->read / 1e6);
    sg_json_num(j, "write_mb", c->write / 1e6);
    sg_json_num(j, "gflop", c->flops / 1e9);
    if (ms > 0) {
        sg_json_num(j, "ms", ms);
        sg_json_num(j, "gb_s", (c->read + c->write) / 1e9 / (ms / 1e3));
        sg_json_num(j, "gflop_s", c->flops / 1e9 / (ms / 1e3));
    }
    sg_json_obj_end(j);
}

/* A design's modelled step as a JSON object under key: one object per phase
 * and "step" (read_mb, write_mb, gflop; with measured times also ms, gb_s,
 * gflop_s), and "classes_mb" (bytes read + written by kernel class).
 * phase_ms: per phase ms (SG_TR_*), or NULL; step_ms: the step, or 0. */
static void traffic_json(sg_json *j, const char *key, int design, const sg_traffic *t,
                         const double *phase_ms, double step_ms) {
    sg_json_obj_begin(j, key);
    sg_json_str(j, "design", sg_traffic_design_name(design));
    sg_json_str(j, "about", sg_traffic_design_about(design));
    sg_traffic_cost step = {0, 0, 0};
    for (int p = 0; p < SG_TR_N_PHASES; p++) {
        traffic_cost_json(j, sg_traffic_phase_name(p), &t->ph[p], phase_ms ? phase_ms[p] : 0);
        step.read += t->ph[p].read;
        step.write += t->ph[p].write;
        step.flops += t->ph[p].flops;
    }
    traffic_cost_json(j, "step", &step, step_ms);
    sg_json_obj_begin(j, "classes_mb");
    for (int c = 0; c < SG_TRC_N; c++) sg_json_num(j, sg_traffic_class_name(c), t->cat[c] / 1e6);
    sg_json_obj_end(j);
    sg_json_obj_end(j);
}

static const char *const traffic_convention =
    "modelled DRAM bytes per training step (MB = 1e6 bytes): every kernel pass reads each "
    "input and writes each output once, no cache reuse; FLOPs = 2 x conv multiply-adds "
    "(forward, data and weight gradients), elementwise counted 0; data and comm not modelled";

static void write_json(const sg_config *cfg, const sg_bench_opts *o, const sg_bench_result *r,
                       sg_json *j) {
    int n = r->iters;
    double med = sg_bench_median(r->step_s, n);
    int imgs = r->batch * r->accum * r->world;
    double achieved = r->flops_step / med;
    sg_json_begin(j);
    sg_json_str(j, "framework", "segtrain " SG_VERSION);
    sg_json_str(j, "backbone", cfg->model.backbone);
    sg_json_int(j, "base_width", cfg->model.base_width);
    sg_json_int(j, "output_stride", cfg->model.output_stride);
    sg_json_int(j, "classes", cfg->model.num_classes);
    sg_json_int(j, "aux_head", cfg->model.aux_head);
    sg_json_int(j, "batch", r->batch);
    sg_json_int(j, "accum_steps", r->accum);
    long long crop[2] = {r->crop_h, r->crop_w};
    sg_json_int_array(j, "crop", crop, 2);
    sg_json_int(j, "world", r->world);
    sg_json_str(j, "backend", r->backend);
    sg_json_str(j, "device", r->device);
    sg_json_str(j, "precision", r->precision);
    sg_json_str(j, "conv_math", r->conv_math);
    sg_json_str(j, "layout", r->layout);
    sg_json_int(j, "allow_tf32", cfg->cudnn.allow_tf32);
    sg_json_int(j, "threads", r->threads);
    sg_json_str(j, "data", o->with_data ? "loader" : "synthetic");
    sg_json_int(j, "split_timing", o->split);
    sg_json_int(j, "warmup", o->warmup);
    sg_json_int(j, "iters", n);
    sg_json_num(j, "img_per_s", imgs / med);
    sg_json_num(j, "step_ms_median", 1e3 * med);
    sg_json_num(j, "step_ms_mean", 1e3 * sg_bench_mean(r->step_s, n));
    sg_json_num(j, "step_ms_min", 1e3 * sg_bench_min(r->step_s, n));
    sg_json_num(j, "step_ms_max", 1e3 * sg_bench_max(r->step_s, n));
    sg_json_num(j, "step_ms_stdev", 1e3 * sg_bench_stdev(r->step_s, n));
    double ms[512];
    int nm = n < 512 ? n : 512;
    for (int i = 0; i < nm; i++) ms[i] = 1e3 * r->step_s[i];
    sg_json_num_array(j, "step_ms", ms, nm);
    sg_json_num(j, "cpu_ms_median", 1e3 * sg_bench_median(r->cpu_s, n));
    sg_json_num(j, "page_faults_median", sg_bench_median(r->minflt, n));
    if (o->split)
        for (int p = 0; p < SG_PH_N; p++) {
            char key[48];
            snprintf(key, sizeof key, "%s_ms_median", sg_bench_phase_names[p]);
            sg_json_num(j, key, 1e3 * sg_bench_median(r->phase_s[p], n));
            snprintf(key, sizeof key, "%s_cpu_ms_median", sg_bench_phase_names[p]);
            sg_json_num(j, key, 1e3 * sg_bench_median(r->phase_cpu_s[p], n));
        }
    sg_json_str(j, "flops_convention",
                "2 x conv multiply-adds (forward); train step = 3 x forward");
    sg_json_num(j, "gflops_fwd_per_image", r->flops_fwd_image / 1e9);
    sg_json_num(j, "gflops_per_step", r->flops_step / 1e9);
    sg_json_num(j, "achieved_gflops", achieved / 1e9);
    if (r->peak_gflops > 0) {
        sg_json_num(j, "peak_gflops", r->peak_gflops);
        sg_json_str(j, "peak_source", r->peak_source);
        sg_json_num(j, "peak_fraction", achieved / 1e9 / r->peak_gflops);
    }
    sg_json_num(j, "peak_rss_mib", r->peak_rss_mib);
    sg_json_num(j, "device_mem_peak_mib", r->device_peak_mib);
    sg_json_num(j, "activation_mib", r->activation_mib);
    sg_json_int(j, "params", (long long)r->params);
    sg_json_num(j, "loss_first", r->loss_first);
    sg_json_num(j, "loss_last", r->loss_last);
    sg_json_num(j, "syncbn_ms_per_step", r->syncbn_ms_per_step);
    sg_json_num(j, "syncbn_step_share", r->syncbn_share);
    sg_json_num(j, "syncbn_collectives_per_step", r->syncbn_calls_per_step);
    sg_json_num(j, "syncbn_enqueued_per_step", r->syncbn_queued_per_step);
    sg_json_num(j, "poll_sleeps_per_step", r->poll_sleeps_per_step);
    sg_json_num(j, "comm_flushes_per_step", r->flushes_per_step);
    sg_json_int(j, "conv_plan_hits", r->conv_plan_hits);
    sg_json_int(j, "conv_plan_misses", r->conv_plan_misses);
    sg_json_int(j, "conv_plan_loaded", r->conv_plan_loaded);
    sg_json_int(j, "act_transposes", r->act_transposes);
    sg_json_int(j, "graph_captures", r->graph_captures);
    sg_json_int(j, "graph_launches", r->graph_launches);
    if (o->profile) write_profile_json(&r->prof, j);
    sg_json_str(j, "traffic_convention", traffic_convention);
    double ph_ms[SG_TR_N_PHASES];
    for (int p = 0; p < SG_TR_N_PHASES; p++)
        ph_ms[p] = o->split ? 1e3 * sg_bench_median(r->phase_s[traffic_phase[p]], n) : 0;
    traffic_json(j, "traffic", r->traffic_design, &r->traffic, o->split ? ph_ms : NULL, 1e3 * med);
    sg_json_end(j);
}

/* The --profile table (scripts/bench_torch.py --profile prints the same). */
static void print_profile(const sg_bench_result *r) {
    const sg_bench_profile *p = &r->prof;
    double step = p->step_ms > 0 ? p->step_ms : 1.0;
    printf("  profile     ms per step, mean of %d timed steps, backend synchronised at every "
           "layer (ReLU fused into bn and add_relu)\n",
           r->iters);
    printf("    %-28s %9s %7s %9s %8s %8s\n", "op class", "ms/step", "% step", "cpu ms", "calls",
           "GFLOP/s");
    double sum = 0;
    for (int i = 0; i < p->n_cls; i++) {
        const sg_bench_prof_row *x = &p->cls[i];
        sum += x->ms;
        printf("    %-28s %9.1f %6.1f%% %9.1f %8.1f", x->cls, x->ms, 100.0 * x->ms / step,
               x->cpu_ms, x->calls);
        if (x->gflop > 0 && x->ms > 0) printf(" %8.1f", x->gflop / (x->ms / 1e3));
        printf("\n");
    }
    printf("    %-28s %9.1f %6.1f%%   (step %.1f ms; layers %.1f ms)\n", "sum", sum,
           100.0 * sum / step, p->step_ms, p->layers_ms);
    printf("  convolutions by pass and shape (KHxKW stride dilation CIN->COUT input HxW, batch "
           "%d)\n",
           r->batch);
    printf("    %-10s %-30s %9s %7s %8s %8s\n", "pass", "geometry", "ms/step", "% step", "calls",
           "GFLOP/s");
    for (int i = 0; i < p->n_conv; i++) {
        const sg_bench_prof_row *x = &p->conv[i];
        printf("    %-10s %-30s %9.1f %6.1f%% %8.1f %8.1f\n", x->cls, x->geom, x->ms,
               100.0 * x->ms / step, x->calls, x->ms > 0 ? x->gflop / (x->ms / 1e3) : 0.0);
    }
}

/* The modelled traffic of the run's design beside the measured times:
 * achieved GB/s and GFLOP/s per phase (split timing) and for the step. */
static void print_traffic(const sg_bench_opts *o, const sg_bench_result *r) {
    const sg_traffic *t = &r->traffic;
    int n = r->iters;
    printf("  traffic     modelled per step, design %s (%s); MB = 1e6 bytes; GFLOP: the conv "
           "passes that run (no data gradient of the image)\n",
           sg_traffic_design_name(r->traffic_design), sg_traffic_design_about(r->traffic_design));
    sg_traffic_cost step = {0, 0, 0};
    for (int p = 0; p < SG_TR_N_PHASES; p++) {
        const sg_traffic_cost *c = &t->ph[p];
        step.read += c->read;
        step.write += c->write;
        step.flops += c->flops;
        printf("    %-10s %10.1f MB (read %.1f + written %.1f) %9.2f GFLOP",
               sg_traffic_phase_name(p), (c->read + c->write) / 1e6, c->read / 1e6, c->write / 1e6,
               c->flops / 1e9);
        double s = o->split ? sg_bench_median(r->phase_s[traffic_phase[p]], n) : 0;
        if (s > 0)
            printf("  %.1f ms: %.1f GB/s, %.1f GFLOP/s", 1e3 * s, (c->read + c->write) / 1e9 / s,
                   c->flops / 1e9 / s);
        printf("\n");
    }
    double med = sg_bench_median(r->step_s, n);
    printf("    %-10s %10.1f MB (read %.1f + written %.1f) %9.2f GFLOP  %.1f ms: %.1f GB/s, "
           "%.1f GFLOP/s (whole step)\n",
           "step", (step.read + step.write) / 1e6, step.read / 1e6, step.write / 1e6,
           step.flops / 1e9, 1e3 * med, (step.read + step.write) / 1e9 / med,
           step.flops / 1e9 / med);
}

static void print_summary(const sg_config *cfg, const sg_bench_opts *o, const sg_bench_result *r) {
    int n = r->iters;
    double med = sg_bench_median(r->step_s, n);
    int imgs = r->batch * r->accum * r->world;
    double achieved = r->flops_step / med;
    printf("segtrain bench: %s (width %d, OS %d, %d classes%s), batch %d x accum %d x %d "
           "rank(s), %dx%d, %s data\n",
           cfg->model.backbone, cfg->model.base_width, cfg->model.output_stride,
           cfg->model.num_classes, cfg->model.aux_head ? ", aux head" : "", r->batch, r->accum,
           r->world, r->crop_h, r->crop_w, o->with_data ? "loader" : "synthetic");
    printf("  device      %s (%s), %d thread(s)\n", r->backend, r->device, r->threads);
    printf("  precision   %s (convolutions %s); activations %s\n", r->precision, r->conv_math,
           r->layout);
    printf("  throughput  %.3f img/s\n", imgs / med);
    printf("  step        %.1f ms median over %d steps (mean %.1f, min %.1f, max %.1f, "
           "stdev %.1f; %d warmup)\n",
           1e3 * med, n, 1e3 * sg_bench_mean(r->step_s, n), 1e3 * sg_bench_min(r->step_s, n),
           1e3 * sg_bench_max(r->step_s, n), 1e3 * sg_bench_stdev(r->step_s, n), o->warmup);
    printf("  cpu time    %.1f ms per step median, all threads (/ %d threads = %.1f ms)\n",
           1e3 * sg_bench_median(r->cpu_s, n), r->threads,
           1e3 * sg_bench_median(r->cpu_s, n) / (r->threads > 0 ? r->threads : 1));
    printf("  page faults %.0f per step median (memory first touched inside the step)\n",
           sg_bench_median(r->minflt, n));
    if (o->split) {
        printf("  split (ms, median)");
        for (int p = 0; p < SG_PH_N; p++)
            printf("  %s %.1f", sg_bench_phase_names[p], 1e3 * sg_bench_median(r->phase_s[p], n));
        printf("\n  cpu split (ms, median, all threads)");
        for (int p = 0; p < SG_PH_N; p++)
            printf("  %s %.1f", sg_bench_phase_names[p],
                   1e3 * sg_bench_median(r->phase_cpu_s[p], n));
        printf("\n");
    }
    printf("  compute     %.2f GFLOP/step (3 x %.2f fwd/image), %.2f GFLOP/s achieved",
           r->flops_step / 1e9, r->flops_fwd_image / 1e9, achieved / 1e9);
    if (r->peak_gflops > 0)
        printf(" = %.1f%% of %.1f GFLOP/s peak (%s)", 100.0 * achieved / 1e9 / r->peak_gflops,
               r->peak_gflops, r->peak_source);
    printf("\n  memory      host peak RSS %.0f MiB, backend allocations peak %.0f MiB "
           "(activations %.0f MiB)\n",
           r->peak_rss_mib, r->device_peak_mib, r->activation_mib);
    printf("  loss        %.4f (first timed step) -> %.4f (last)\n", r->loss_first, r->loss_last);
    print_traffic(o, r);
    if (r->world > 1)
        printf("  syncbn      %.2f ms per step (%.1f%% of the step), %.0f collectives per step, "
               "%.0f enqueued; %.1f poll sleeps per step\n",
               r->syncbn_ms_per_step, 100.0 * r->syncbn_share, r->syncbn_calls_per_step,
               r->syncbn_queued_per_step, r->poll_sleeps_per_step);
    if (r->conv_plan_hits + r->conv_plan_misses > 0)
        printf("  conv plans  %ld geometries from the cache, %ld searched (%ld read from the "
               "file)\n",
               r->conv_plan_hits, r->conv_plan_misses, r->conv_plan_loaded);
    if (r->act_transposes > 0 || !strcmp(r->precision, "bf16"))
        printf("  transposes  %ld activation layout transposes since the backend opened\n",
               r->act_transposes);
    if (r->graph_captures + r->graph_launches > 0)
        printf("  graphs      %ld recorded, %ld launched since the backend opened (cuda.graphs)\n",
               r->graph_captures, r->graph_launches);
    if (o->profile) print_profile(r);
    fflush(stdout);
}

/* Writes text + "\n" to path. 0 or -1 (logged). */
static int write_json_file(const char *path, const sg_json *j) {
    size_t len = strlen(j->buf);
    char *text = malloc(len + 2);
    SG_CHECK(text != NULL, "out of host memory");
    memcpy(text, j->buf, len);
    memcpy(text + len, "\n", 2);
    int wrc = sg_mkdirs_for_output("bench", path) != 0 ? -1 : sg_write_text_file(path, text);
    free(text);
    if (wrc != 0) {
        SG_ERROR("bench: cannot write --json %s (see above); check that its directory is "
                 "writable",
                 path);
        return -1;
    }
    SG_INFO("bench: wrote %s", path);
    return 0;
}

/* --traffic: the model's graph on a backend that holds its weights only (the
 * CPU, or the configured GPU when there is one; nothing is planned or run),
 * frozen as the trainer freezes it, and the traffic model for every design. */
static sg_model *traffic_model(const sg_config *cfg, sg_backend **be) {
    sg_model_opts mo;
    if (sg_model_opts_from_config(&mo, cfg) != SG_OK) return NULL;
    sg_backend_opts bo = {.threads = 1};
    int gpu = strncmp(cfg->device, "cuda", 4) == 0 && sg_backend_cuda_device_count() > 0;
    *be = sg_backend_create(gpu ? cfg->device : "cpu", &bo);
    if (!*be) return NULL;
    sg_model *m = sg_model_create(*be, &mo);
    if (!m) return NULL;
    for (int i = 0; i < cfg->train.n_freeze; i++)
        sg_model_freeze(m, cfg->train.freeze[i], cfg->train.freeze_bn_stats);
    if (cfg->train.freeze_bn_stats && cfg->train.n_freeze == 0) sg_model_freeze_bn_stats(m, "");
    return m;
}

static void print_traffic_table(const sg_config *cfg, const sg_traffic *t) {
    int B = cfg->train.batch_size, K = cfg->train.accum_steps;
    printf("segtrain bench --traffic: %s (width %d, OS %d, %d classes%s), batch %d x accum %d, "
           "%dx%d\n",
           cfg->model.backbone, cfg->model.base_width, cfg->model.output_stride,
           cfg->model.num_classes, cfg->model.aux_head ? ", aux head" : "", B, K,
           cfg->data.crop_size[0], cfg->data.crop_size[1]);
    printf("  %s\n", traffic_convention);
    printf("  %-18s %10s %10s %10s %10s %11s %9s\n", "MB per step", "forward", "loss", "backward",
           "optimizer", "total", "GFLOP");
    for (int d = 0; d < SG_TR_N_DESIGNS; d++) {
        printf("  %-18s", sg_traffic_design_name(d));
        for (int p = 0; p < SG_TR_N_PHASES; p++)
            printf(" %10.1f", (t[d].ph[p].read + t[d].ph[p].write) / 1e6);
        printf(" %11.1f %9.1f\n", sg_traffic_bytes(&t[d]) / 1e6, sg_traffic_flops(&t[d]) / 1e9);
    }
    printf("  %-18s", "MB by class");
    for (int c = 0; c < SG_TRC_N; c++) printf(" %11s", sg_traffic_class_name(c));
    printf("\n");
    for (int d = 0; d < SG_TR_N_DESIGNS; d++) {
        printf("  %-18s", sg_traffic_design_name(d));
        for (int c = 0; c < SG_TRC_N; c++) printf(" %11.1f", t[d].cat[c] / 1e6);
        printf("\n");
    }
    for (int d = 0; d < SG_TR_N_DESIGNS; d++)
        printf("  %-18s %s\n", sg_traffic_design_name(d), sg_traffic_design_about(d));
    fflush(stdout);
}

/* `segtrain bench --plan`: the training plan of the configured model on
 * the configured device, precision and layout at the config's batch and
 * crop, printed (sg_model_plan_dump); nothing runs. Exit code. */
static int run_plan(const sg_config *cfg) {
    sg_backend *be = sg_open_backend(cfg, NULL);
    if (!be) return 1;
    sg_model_opts mo;
    sg_model *m = NULL;
    int rc = 1;
    if (sg_model_opts_from_config(&mo, cfg) == SG_OK && (m = sg_model_create(be, &mo))) {
        for (int i = 0; i < cfg->train.n_freeze; i++)
            sg_model_freeze(m, cfg->train.freeze[i], cfg->train.freeze_bn_stats);
        if (cfg->train.freeze_bn_stats && cfg->train.n_freeze == 0) sg_model_freeze_bn_stats(m, "");
        if (sg_model_plan(m, cfg->train.batch_size, cfg->data.crop_size[0],
                          cfg->data.crop_size[1]) == SG_OK) {
            sg_model_plan_dump(m, stdout);
            fflush(stdout);
            rc = 0;
        }
    }
    sg_model_destroy(m);
    sg_backend_destroy(be);
    return rc;
}

/* `segtrain bench --traffic`: exit code. */
static int run_traffic(const sg_config *cfg, const char *json) {
    sg_backend *be = NULL;
    sg_model *m = traffic_model(cfg, &be);
    int rc = m ? 0 : 1;
    sg_traffic t[SG_TR_N_DESIGNS];
    for (int d = 0; rc == 0 && d < SG_TR_N_DESIGNS; d++)
        if (sg_bench_traffic(m, d, cfg->train.batch_size, cfg->train.accum_steps,
                             cfg->data.crop_size[0], cfg->data.crop_size[1], &t[d], NULL) != SG_OK)
            rc = 1;
    if (rc == 0) {
        print_traffic_table(cfg, t);
        if (json) {
            sg_json j = {0};
            sg_json_begin(&j);
            sg_json_str(&j, "framework", "segtrain " SG_VERSION);
            sg_json_str(&j, "backbone", cfg->model.backbone);
            sg_json_int(&j, "batch", cfg->train.batch_size);
            sg_json_int(&j, "accum_steps", cfg->train.accum_steps);
            long long crop[2] = {cfg->data.crop_size[0], cfg->data.crop_size[1]};
            sg_json_int_array(&j, "crop", crop, 2);
            sg_json_str(&j, "traffic_convention", traffic_convention);
            sg_json_obj_begin(&j, "designs");
            for (int d = 0; d < SG_TR_N_DESIGNS; d++)
                traffic_json(&j, sg_traffic_design_name(d), d, &t[d], NULL, 0);
            sg_json_obj_end(&j);
            sg_json_end(&j);
            if (write_json_file(json, &j) != 0) rc = 1;
            sg_json_free(&j);
        }
    }
    sg_model_destroy(m);
    if (be) sg_backend_destroy(be);
    return rc;
}

int sg_cmd_bench(int argc, char **argv) {
    const char *iters_s = NULL, *warmup_s = NULL, *json = NULL, *peak_s = NULL;
    int with_data = 0, no_split = 0, profile = 0, traffic = 0, plan = 0;
    sg_cli_opt opts[] = {{"--iters", "N", "timed training steps (default 10)", &iters_s, NULL},
                         {"--warmup", "W", "untimed steps first (default 2)", &warmup_s, NULL},
                         {"--with-data", NULL,
                          "read batches through the configured loader (data.*) instead "
                          "of synthetic batches in memory",
                          NULL, &with_data},
                         {"--json", "FILE", "also write the summary as JSON to FILE", &json, NULL},
                         {"--no-split", NULL,
                          "time whole steps only (no backend sync at phase boundaries)", NULL,
                          &no_split},
                         {"--profile", NULL,
                          "time every layer (backend synchronised around each) and print the "
                          "step by op class and the convolutions by pass and shape",
                          NULL, &profile},
                         {"--traffic", NULL,
                          "print the modelled DRAM bytes and FLOPs of one training step for "
                          "every design (nchw-f32, ..., nhwc-bf16, torch-amp) at the config's "
                          "batch and crop, and exit (nothing planned or run)",
                          NULL, &traffic},
                         {"--plan", NULL,
                          "print the training plan (every activation's producer, shape and "
                          "storage: fp32 or bf16) on the configured device at the config's "
                          "batch and crop, and exit (nothing runs)",
                          NULL, &plan},
                         {"--peak-gflops", "X",
                          "the device's peak GFLOP/s (default: measured with a conv; "
                          "0 skips the measurement)",
                          &peak_s, NULL},
                         {NULL, NULL, NULL, NULL, NULL}};
    sg_cli cli;
    sg_config cfg;
    sg_status st = sg_cli_begin_with(&cli, &cfg, argc, argv,
                                     "segtrain bench --config FILE [--iters N] [--warmup W] "
                                     "[--set KEY=VALUE ...] [--with-data] [--profile] "
                                     "[--traffic] [--plan] [--json FILE]",
                                     opts, sg_train_config_rules);
    if (st != SG_OK || cli.done) return sg_exit_code(st);
    if (cli.n_args > 0)
        return sg_exit_code(sg_cli_usage_error(&cli, "unexpected argument '%s'", cli.args[0]));
    if (traffic && (profile || with_data || no_split || iters_s || warmup_s || peak_s))
        return sg_exit_code(sg_cli_usage_error(
            &cli, "--traffic prints the model and runs nothing: drop --iters, --warmup, "
                  "--with-data, --no-split, --profile and --peak-gflops (or --traffic)"));
    if (traffic) return run_traffic(&cfg, json);
    if (plan && (profile || with_data || no_split || iters_s || warmup_s || peak_s || json))
        return sg_exit_code(sg_cli_usage_error(
            &cli, "--plan prints the plan and runs nothing: drop --iters, --warmup, --with-data, "
                  "--no-split, --profile, --peak-gflops and --json (or --plan)"));
    if (plan) return run_plan(&cfg);
    if (profile && no_split)
        return sg_exit_code(sg_cli_usage_error(
            &cli, "--profile synchronises the backend around every layer; it cannot run with "
                  "--no-split (drop one of them)"));
    sg_bench_opts o = {10, 2, with_data, !no_split, 0.0, profile};
    if (iters_s && (st = parse_int(&cli, "--iters", iters_s, 1, &o.iters)) != SG_OK)
        return sg_exit_code(st);
    if (warmup_s && (st = parse_int(&cli, "--warmup", warmup_s, 0, &o.warmup)) != SG_OK)
        return sg_exit_code(st);
    if (peak_s) {
        char *end;
        errno = 0;
        double v = strtod(peak_s, &end);
        if (errno || *end || end == peak_s || !(v >= 0) || !isfinite(v))
            return sg_exit_code(sg_cli_usage_error(&cli,
                                                   "--peak-gflops %s: expected a number "
                                                   ">= 0 (0 skips the peak)",
                                                   peak_s));
        o.peak_gflops = v > 0 ? v : -1.0;
    }
    sg_bench_result r;
    st = sg_bench_run(&cfg, &o, &r);
    if (st != SG_OK) return sg_exit_code(st);
    int rc = 0;
    if (r.rank == 0) {
        print_summary(&cfg, &o, &r);
        if (json) {
            sg_json j = {0};
            write_json(&cfg, &o, &r, &j);
            if (write_json_file(json, &j) != 0) rc = 1;
            sg_json_free(&j);
        }
    }
    sg_bench_result_free(&r);
    return rc;
}
