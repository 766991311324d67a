/* tests/backend/test_backend_ops.c - the backend conformance suite: runs
 * every case of the table (case_table.c) against the naive references on
 * the backends compiled in, in the spirit of ggml's test-backend-ops.
 *
 *   test_backend_ops cpu|cuda|all [-v] [-o OP] [-c CONFIG] [--from ROW] [--large]
 *                    [--list-configs]
 *     -v         print every case as it runs ("case OP [CONFIG] row N ...")
 *     -o OP      only the cases of op OP (e.g. conv_fwd, grad_bn)
 *     -c CONFIG  only configuration CONFIG (e.g. cuda/bf16), with the rows it
 *                runs in the whole suite (the all_configs rows after the first)
 *     --from ROW start at table row ROW (0-based; the row count: nothing
 *                left to run): scripts/gpu-check reruns
 *                what is left of a configuration after a case crashed the
 *                process, in a fresh one
 *     --large    the large case set instead (case_large.c: more than 2^31
 *                elements, 65535 planes, grid-stride loops; GPU memory), on
 *                the first configuration unless -c names another
 *     --list-configs  print the configurations of the backend, one a line
 *
 * Each backend runs in its configurations: the first runs every case, the
 * others only the rows marked all_configs (the convolutions):
 *   cpu:  conv layout auto, plain, blocked (SG_CPU_CONV_LAYOUT), 2 threads
 *         (an OpenMP reduction over 2 threads is order-independent, so reruns
 *         are bit-identical); then bf16 (native oneDNN bf16 where the
 *         processor has it, else the emulation) and bf16 emulated
 *         (SG_CPU_BF16=emulated); then the same three (fp32, bf16, bf16
 *         emulated) with activations stored NHWC (sg_backend_opts.layout),
 *         which run every row (every_row): each op that takes activations
 *         is checked in both layouts against the same NCHW reference;
 *         then fp32 NCHW and NHWC with SG_CPU_CONV_WINO=own (the CPU
 *         backend's own Winograd on every ISA: on AVX-512 the default
 *         sends those convs to oneDNN's), and bf16 NHWC with it (native
 *         bf16's Winograd at every channel count, not only from 128);
 *   cuda: cuDNN deterministic algorithms (reruns bit-identical), then
 *         cudnn.benchmark (measured algorithm choice), then TF32 allowed
 *         (cuDNN's heuristics), then bf16 (deterministic algorithms; NHWC).
 * The bf16 and TF32 configurations run only the rows that state a bf16 /
 * TF32 tolerance (tol_bf16, tol_tf32: against the float32 reference); the
 * bf16 ones also check every conv result against the bf16-exact reference
 * (inputs rounded to bf16, exact products, the result rounded: ref_ops.h)
 * within one bf16 rounding step where the arithmetic is float32 in a known
 * order (the emulation), two elsewhere (oneDNN's and cuDNN's bf16 kernels
 * sum in their own order).
 * First checks that every op of SG_OPS_LIST (kernels/backend.h) has case
 * rows, its own or (covered_elsewhere below, for memory management and the
 * like) those of the runner that exercises it; fails naming the op if not.
 * Prints per op the cases run and passed, a FAIL line per failure (op,
 * configuration, parameters, error and tolerance) and a summary line
 * "<backend>: P/T cases passed". A fatal error inside an op (the backend
 * exits) still prints "  FAIL OP [CONFIG] row N PARAMS: the process exited
 * inside this case" and the tallies so far. Exit status: 0 all passed, 1 a failure
 * (or an op without cases), 77 (skipped) when the backend asked for is not
 * compiled in or (cuda) no device is visible. Data move only through the
 * backend's memory ops, so this binary needs no CPU backend to link (the
 * GPU-only bundle runs it).
 */
#include <execinfo.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tests/backend/cases.h"
#include "tests/backend/cpu_paths.h"

#ifndef TB_HAVE_CPU
#define TB_HAVE_CPU 1
#endif

#define TB_SKIP 77

enum { TB_FP32 = 0, TB_TF32 = 1, TB_BF16 = 2 };

typedef struct tb_config {
    const char *name;
    const char *device;
    sg_backend_opts opts;
    const char *cpu_conv; /* CPU: SG_CPU_CONV while creating it (NULL: unset) */
    const char *cpu_bf16; /* CPU: SG_CPU_BF16 while creating it (NULL: unset) */
    int det;              /* reruns give the same bits */
    int lowp;             /* TB_FP32 | TB_TF32 | TB_BF16: which tolerance rows state */
    int bf16_steps;       /* bf16: ulps allowed against the bf16-exact reference */
    double bf16_slack;    /* bf16: and this fraction of max|ref| */
    int every_row;        /* runs every row, as the first does (another activation
                                layout: every op that takes activations is retested) */
} tb_config;

#define BF16 .precision = SG_PRECISION_BF16
#define NHWC .layout = SG_LAYOUT_NHWC
/* The own Winograd paths on every conv they can take, in place of
 * oneDNN's Winograd and the phase sub-images. */
#define WINO_OWN "force:wino-own,off:onednn-wino,off:phases"
static const tb_config cpu_configs[] = {
    {"cpu", "cpu", {.threads = 2}, NULL, NULL, 1, TB_FP32, 0, 0, 0},
    {"cpu/plain", "cpu", {.threads = 2}, "force:onednn-plain", NULL, 1, TB_FP32, 0, 0, 0},
    {"cpu/blocked", "cpu", {.threads = 2}, "force:onednn-blocked", NULL, 1, TB_FP32, 0, 0, 0},
    {"cpu/bf16", "cpu", {.threads = 2, BF16}, NULL, "auto", 1, TB_BF16, 2, 1e-5, 0},
    {"cpu/bf16-emu", "cpu", {.threads = 2, BF16}, NULL, "emulated", 1, TB_BF16, 1, 1e-5, 0},
    {"cpu/nhwc", "cpu", {.threads = 2, NHWC}, NULL, NULL, 1, TB_FP32, 0, 0, 1},
    {"cpu/nhwc-bf16", "cpu", {.threads = 2, BF16, NHWC}, NULL, "auto", 1, TB_BF16, 2, 1e-5, 1},
    {"cpu/nhwc-bf16-emu",
     "cpu",
     {.threads = 2, BF16, NHWC},
     NULL,
     "emulated",
     1,
     TB_BF16,
     1,
     1e-5,
     1},
    /* every bf16 conv through the emulation with native bf16 present (as a
     * geometry oneDNN had no bf16 kernel for would): the *_dt ops' own
     * conversions around it */
    {"cpu/bf16-fallback",
     "cpu",
     {.threads = 2, BF16},
     "force:emulated",
     "auto",
     1,
     TB_BF16,
     1,
     1e-5,
     0},
    /* wino.c's Winograd for every 3x3 "same" conv it takes, on any ISA
     * (the AVX2 default for NCHW float32; oneDNN's on AVX-512) */
    {"cpu/wino-own", "cpu", {.threads = 2}, WINO_OWN, NULL, 1, TB_FP32, 0, 0, 0},
    {"cpu/nhwc-wino-own", "cpu", {.threads = 2, NHWC}, WINO_OWN, NULL, 1, TB_FP32, 0, 0, 0},
    /* wino_cl.c (native bf16, NHWC) for every 3x3 "same" conv of 16+
     * channels, not only from 128 on, and with AMX (on CPUs without bf16
     * instructions the emulation, on wino.c) */
    {"cpu/nhwc-bf16-wino-own",
     "cpu",
     {.threads = 2, BF16, NHWC},
     "force:wino-cl," WINO_OWN,
     "auto",
     1,
     TB_BF16,
     2,
     1e-5,
     0},
};
static const tb_config cuda_configs[] = {
    {"cuda/det", "cuda:0", {.cudnn_deterministic = 1}, NULL, NULL, 1, TB_FP32, 0, 0, 0},
    {"cuda/bench", "cuda:0", {.cudnn_benchmark = 1}, NULL, NULL, 0, TB_FP32, 0, 0, 0},
    {"cuda/tf32", "cuda:0", {.allow_tf32 = 1}, NULL, NULL, 0, TB_TF32, 0, 0, 0},
    {"cuda/bf16", "cuda:0", {.cudnn_deterministic = 1, BF16}, NULL, NULL, 1, TB_BF16, 2, 1e-4, 0},
    {"cuda/nhwc", "cuda:0", {.cudnn_deterministic = 1, NHWC}, NULL, NULL, 1, TB_FP32, 0, 0, 1},
    {"cuda/nhwc-bf16",
     "cuda:0",
     {.cudnn_deterministic = 1, BF16, NHWC},
     NULL,
     NULL,
     1,
     TB_BF16,
     2,
     1e-4,
     1},
};

/* Per-op tallies, in the order the ops first appear in the table. */
typedef struct op_tally {
    const char *op;
    int cases, failed, configs;
} op_tally;

static struct {
    int verbose;
    const char *only;
    const char *only_config;
    int from_row;
    const tb_case *table; /* tb_cases, or tb_large_cases with --large */
    int ncases;
    const char *backend; /* the backend running, for the exit report */
    int ran, failed;     /* of the backend running */
    op_tally ops[128];
    int nops;
    tb_ctx *running; /* the case in flight, for the exit report */
} g;

static void print_tallies(void);

/* A backend's fatal error exits inside an op: name the case it died in
 * (with its table row, for a rerun --from the next one) and print what had
 * been counted. */
static void report_unfinished(void) {
    tb_ctx *t = g.running;
    if (!t) return;
    printf("  FAIL %s [%s] row %d %s: the process exited inside this case (the error above)\n",
           t->c->op, t->config, (int)(t->c - g.table), t->desc);
    print_tallies();
    printf("%s: %d/%d cases passed (%d failed) before the exit inside row %d\n",
           g.backend ? g.backend : "?", g.ran - g.failed, g.ran + 1, g.failed + 1,
           (int)(t->c - g.table));
    fflush(stdout);
}

/* A crash (SIGSEGV, SIGBUS, SIGFPE, SIGABRT) reports the case and the
 * stack (this handler replaces a sanitizer's, which would have printed it),
 * then dies of the same signal (not async-signal-safe, but the process is
 * lost anyway and the lines are what the rerun and the fix need). */
static void on_crash(int sig) {
    printf("  (signal %d)\n", sig);
    fflush(stdout);
    void *frames[64];
    int n = backtrace(frames, 64);
    fprintf(stderr, "test_backend_ops: signal %d, stack (addr2line -e on the offsets):\n", sig);
    backtrace_symbols_fd(frames, n, 2);
    report_unfinished();
    signal(sig, SIG_DFL);
    raise(sig);
}

/* SG_TB_PLANT=exit:ROW, segv:ROW or hang:ROW makes table row ROW exit(1),
 * crash or hang inside its case, as a backend's fatal error, a fault or a
 * stuck synchronisation would: the crash path and scripts/gpu-check's
 * rerun and kill are tested with it. */
static void planted(int row) {
    const char *p = getenv("SG_TB_PLANT");
    if (!p) return;
    int exit_row = -1, segv_row = -1, hang_row = -1;
    if (sscanf(p, "exit:%d", &exit_row) != 1 && sscanf(p, "segv:%d", &segv_row) != 1 &&
        sscanf(p, "hang:%d", &hang_row) != 1)
        return;
    if (row == hang_row) {
        fprintf(stderr, "planted hang in row %d (SG_TB_PLANT)\n", row);
        for (;;) {
            struct timespec ts = {1, 0};
            nanosleep(&ts, NULL);
        }
    }
    if (row == exit_row) {
        fprintf(stderr, "fatal: planted exit in row %d (SG_TB_PLANT)\n", row);
        exit(1);
    }
    if (row == segv_row) {
        fprintf(stderr, "planted crash in row %d (SG_TB_PLANT)\n", row);
        raise(SIGSEGV);
    }
}

static op_tally *tally(const char *op) {
    for (int i = 0; i < g.nops; i++)
        if (strcmp(g.ops[i].op, op) == 0) return &g.ops[i];
    if (g.nops == (int)(sizeof g.ops / sizeof g.ops[0])) {
        fprintf(stderr, "test_backend_ops: more than %d ops in the table\n", g.nops);
        exit(1);
    }
    g.ops[g.nops] = (op_tally){op, 0, 0, 0};
    return &g.ops[g.nops++];
}

/* Sets (value non-NULL) an environment variable for a while; restore puts
 * the old value back. */
typedef struct env_save {
    const char *name;
    char old[64];
    int had, set;
} env_save;

static void env_push(env_save *e, const char *name, const char *value) {
    const char *old = getenv(name);
    e->name = name;
    e->had = old != NULL;
    e->set = value != NULL;
    if (old) snprintf(e->old, sizeof e->old, "%s", old);
    if (value) setenv(name, value, 1);
}

static void env_pop(env_save *e) {
    if (!e->set) return;
    if (e->had) setenv(e->name, e->old, 1);
    else unsetenv(e->name);
}

static sg_backend *create(const tb_config *cf) {
    env_save conv, bf16;
    env_push(&conv, "SG_CPU_CONV", cf->cpu_conv);
    env_push(&bf16, "SG_CPU_BF16", cf->cpu_bf16);
    sg_backend *be = sg_backend_create(cf->device, &cf->opts);
    env_pop(&bf16);
    env_pop(&conv);
    if (be && cf->lowp != TB_FP32) {
        sg_backend_info bi;
        sg_backend_get_info(be, &bi);
        printf("  [%s] convolutions: %s\n", cf->name, bi.conv_math);
    }
    return be;
}

/* The tolerance a row states for this configuration; 0 = the row does not
 * run there. */
static double config_tol(const tb_config *cf, const tb_case *c) {
    if (cf->lowp == TB_BF16) return c->tol_bf16;
    if (cf->lowp == TB_TF32) return c->tol_tf32;
    return 1.0; /* float32: every row (tb_begin picks its tolerance) */
}

/* Runs the table on one configuration; returns cases failed (-1: no backend). */
/* The activation layout transposes the backend reports
 * (sg_backend_info.act_transposes) after a configuration's rows: none with
 * NHWC activations (CUDA's convolutions then run on the activations as they
 * are); some for CUDA's bf16 convolutions under NCHW (their NHWC copies), when
 * the whole table ran (the counter counts). Returns the failures (0 or 1). */
static int check_transposes(const tb_config *cf, sg_backend *be) {
    sg_backend_info bi;
    sg_backend_get_info(be, &bi);
    int whole = !g.only && g.from_row == 0 && g.table == tb_cases;
    int cuda_nchw_bf16 = strncmp(cf->device, "cuda", 4) == 0 && be->layout == SG_LAYOUT_NCHW &&
                         cf->opts.precision == SG_PRECISION_BF16;
    const char *bad = NULL;
    if (be->layout == SG_LAYOUT_NHWC && bi.act_transposes != 0)
        bad =
            "with NHWC activations (expected 0: the convolutions read and write them as they are)";
    else if (cuda_nchw_bf16 && whole && bi.act_transposes == 0)
        bad = "for bf16 convolutions on NCHW activations (expected some: the NHWC copies)";
    if (!bad) return 0;
    printf("  FAIL act_transposes [%s]: %ld activation layout transposes %s\n", cf->name,
           bi.act_transposes, bad);
    g.failed++;
    return 1;
}

static int run_config(const tb_config *cf, int index, int *ran) {
    sg_backend *be = create(cf);
    if (!be) {
        printf("  FAIL create [%s] device '%s': cannot create the backend (the error above)\n",
               cf->name, cf->device);
        return -1;
    }
    int failed = tb_paths_config(cf->name, be, cf->cpu_conv != NULL, g.table, g.ncases);
    g.failed += failed;
    for (int i = g.from_row; i < g.ncases; i++) {
        const tb_case *c = &g.table[i];
        if (index > 0 && !c->all_configs && !cf->every_row) continue;
        if (config_tol(cf, c) <= 0) continue;
        if (g.only && strcmp(g.only, c->op) != 0) continue;
        tb_ctx t;
        tb_begin(&t, be, cf->name, cf->det, c);
        if (cf->lowp != TB_FP32) t.tol = config_tol(cf, c);
        t.bf16_steps = cf->bf16_steps;
        t.bf16_slack = cf->bf16_slack;
        if (g.verbose) {
            printf("case %s [%s] row %d %s\n", c->op, cf->name, i, t.desc);
            fflush(stdout);
        }
        g.running = &t;
        planted(i);
        c->run(&t, c);
        be->ops->sync(be);
        g.running = NULL;
        int ok = tb_end(&t);
        if (tb_paths_case(&t, c, i)) ok = 0;
        op_tally *o = tally(c->op);
        o->cases++;
        if (o->configs < index + 1) o->configs = index + 1;
        if (!ok) o->failed++, failed++, g.failed++;
        (*ran)++;
        g.ran++;
    }
    failed += check_transposes(cf, be);
    sg_backend_destroy(be);
    return failed;
}

static void print_tallies(void) {
    for (int i = 0; i < g.nops; i++) {
        op_tally *o = &g.ops[i];
        char per[64] = "";
        if (o->configs > 1)
            snprintf(per, sizeof per, " (%d on each of %d configurations)", o->cases / o->configs,
                     o->configs);
        const char *cases = o->cases == 1 ? "case" : "cases";
        if (o->failed) printf("%s: %d of %d %s FAILED%s\n", o->op, o->failed, o->cases, cases, per);
        else printf("%s: %d %s ok%s\n", o->op, o->cases, cases, per);
    }
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Runs one backend in all its configurations. Returns 0 passed, 1 failed,
 * TB_SKIP not available here (with the reason printed). */
static int run_backend(const char *name, int *total, int *total_failed) {
    const tb_config *cfs;
    int ncf;
    if (strcmp(name, "cpu") == 0) {
        if (!TB_HAVE_CPU) {
            printf("cpu: skipped: the CPU backend is not compiled in (GPU-only build, "
                   "-Dgpu_only=true)\n");
            return TB_SKIP;
        }
        cfs = cpu_configs, ncf = (int)(sizeof cpu_configs / sizeof cpu_configs[0]);
    } else {
        if (!sg_backend_cuda_compiled()) {
            printf("cuda: skipped: the CUDA backend is not compiled in (meson found no "
                   "nvcc/cuDNN/NCCL, or -Dcuda=disabled)\n");
            return TB_SKIP;
        }
        if (sg_backend_cuda_device_count() == 0) {
            printf("cuda: skipped: no CUDA device visible (nvidia-smi, CUDA_VISIBLE_DEVICES)\n");
            return TB_SKIP;
        }
        cfs = cuda_configs, ncf = (int)(sizeof cuda_configs / sizeof cuda_configs[0]);
    }
    printf("== %s: %d cases in the %s table; configurations:", name, g.ncases,
           g.table == tb_large_cases ? "large" : "main");
    for (int i = 0; i < ncf; i++) printf(" %s", cfs[i].name);
    printf(" (the convolutions run on every configuration, the rest on the first; bf16 and "
           "TF32 ones run the rows stating a bf16 / TF32 tolerance)\n");
    fflush(stdout);
    g.nops = 0;
    g.backend = name;
    g.ran = g.failed = 0;
    double t0 = now_s();
    int ran = 0, failed = 0, matched = 0;
    for (int i = 0; i < ncf; i++) {
        if (g.only_config && strcmp(g.only_config, cfs[i].name) != 0) continue;
        /* the large cases: on the first configuration unless -c names one */
        if (g.table == tb_large_cases && !g.only_config && i > 0) continue;
        matched = 1;
        int f = run_config(&cfs[i], i, &ran);
        if (f < 0) {
            *total_failed += 1, *total += 1;
            return 1;
        }
        failed += f;
    }
    if (g.only_config && !matched) {
        printf("%s: no configuration '%s' (test_backend_ops %s --list-configs)\n", name,
               g.only_config, name);
        return 1;
    }
    print_tallies();
    /* the coverage of the CPU convolution paths: only a whole run counts */
    char paths[640] = "";
    if (!g.only && !g.only_config && g.from_row == 0 && g.table == tb_cases) {
        char skipped[512];
        int missing = tb_paths_report(skipped, sizeof skipped);
        failed += missing, g.failed += missing;
        if (missing || skipped[0])
            snprintf(paths, sizeof paths, "; conv paths: %d missing; not on this processor: %s",
                     missing, skipped[0] ? skipped : "none");
    }
    printf("%s: %d/%d cases passed (%d failed%s) in %.1f s\n", name, ran - failed, ran, failed,
           paths, now_s() - t0);
    *total += ran;
    *total_failed += failed;
    return failed ? 1 : 0;
}

/* ---- coverage: every op of SG_OPS_LIST (kernels/backend.h) has cases ----
 * An op has rows of its own in case_table.c (rows whose op name is the
 * op's), or is listed here with the rows that exercise it: ops no row can be
 * about alone (memory management, streams: run_memory.c checks them
 * together) or the harness itself runs. An entry names the case rows that
 * must exist for it (NULL: the harness). The list is explicit so that a new
 * op added to sg_ops fails this check until someone gives it rows. */
static const struct {
    const char *op, *rows, *by;
} covered_elsewhere[] = {
    {"destroy", NULL, "the harness: every configuration creates and destroys its backend"},
    {"get_info", "memory", "run_memory.c: name, device, mem_in_use / mem_peak"},
    {"alloc", "memory", "run_memory.c: zeroed, counted"},
    {"free", "memory", "run_memory.c: mem_in_use back to where it was"},
    {"upload", "memory", "run_memory.c: at an offset"},
    {"download", "memory", "run_memory.c: at an offset"},
    {"copy", "memory", "run_memory.c"},
    {"zero", "memory", "run_memory.c: a range inside a buffer"},
    {"sync", "memory", "run_memory.c"},
    {"host_alloc", "memory", "run_memory.c: upload_async from it"},
    {"host_free", "memory", "run_memory.c (tb.c frees the pinned buffers)"},
    {"upload_wait", "upload_async", "run_memory.c: ordering against compute ops"},
    {"stream", "memory", "run_memory.c: native handles with SG_CAP_ASYNC_STREAMS, else NULL"},
    {"stream_wait", "memory", "run_memory.c, run_bind_thread"},
    {"conv_prepare", "conv_fwd", "run_conv.c: the rows with prepare = 1"},
    {"sgd_multi_plan", "sgd_multi_step", "run_optim.c: the plan of every step"},
    {"sgd_multi_free", "sgd_multi_step", "run_optim.c: the plan, and NULL"},
    {"adamw_multi_plan", "adamw_multi_step", "run_optim.c: the plan of every step"},
    {"adamw_multi_free", "adamw_multi_step", "run_optim.c: the plan, and NULL"},
    {"optim_grad_sumsq", "adamw_multi_step",
     "run_optim.c: every step's gradients of both plans against their sum in double"},
    {"set_step_key", "dropout_fwd", "run_elem.c: the masks follow the step key; run_graph.c"},
    {"graph_end", "graph_begin", "run_graph.c: record, launch, refuse after memory moved"},
    {"graph_launch", "graph_begin", "run_graph.c"},
    {"graph_free", "graph_begin", "run_graph.c"},
};

static int has_rows_in(const tb_case *table, int n, const char *op) {
    for (int i = 0; i < n; i++)
        if (strcmp(table[i].op, op) == 0) return 1;
    return 0;
}
static int has_rows(const char *op) { return has_rows_in(tb_cases, tb_ncases, op); }

#define TB_OP_NAME(f) #f,
static const char *const all_ops[] = {SG_OPS_LIST(TB_OP_NAME)};

/* Returns the number of problems, each printed with the op it is about. */
static int check_coverage(void) {
    int bad = 0, nops = (int)(sizeof all_ops / sizeof all_ops[0]);
    int nelse = (int)(sizeof covered_elsewhere / sizeof covered_elsewhere[0]);
    for (int i = 0; i < nops; i++) {
        if (has_rows(all_ops[i])) continue;
        int j = 0;
        while (j < nelse && strcmp(covered_elsewhere[j].op, all_ops[i]) != 0) j++;
        if (j == nelse) {
            printf("FAIL coverage: op '%s' of SG_OPS_LIST (kernels/backend.h) has no case rows "
                   "in tests/backend/case_table.c: add its rows (with a runner in "
                   "tests/backend/run_<group>.c), or, if no row can be about it alone, list it "
                   "in covered_elsewhere (tests/backend/test_backend_ops.c) with the rows that "
                   "exercise it\n",
                   all_ops[i]);
            bad++;
        } else if (covered_elsewhere[j].rows && !has_rows(covered_elsewhere[j].rows)) {
            printf("FAIL coverage: op '%s' is exercised by the '%s' rows (%s), but "
                   "tests/backend/case_table.c has no '%s' row\n",
                   all_ops[i], covered_elsewhere[j].rows, covered_elsewhere[j].by,
                   covered_elsewhere[j].rows);
            bad++;
        }
    }
    /* a stale entry (an op renamed or removed) would hide nothing, but would mislead */
    for (int j = 0; j < nelse; j++) {
        int i = 0;
        while (i < nops && strcmp(all_ops[i], covered_elsewhere[j].op) != 0) i++;
        if (i == nops) {
            printf("FAIL coverage: covered_elsewhere (tests/backend/test_backend_ops.c) lists "
                   "'%s', which is no op of SG_OPS_LIST (kernels/backend.h)\n",
                   covered_elsewhere[j].op);
            bad++;
        }
    }
    if (!bad)
        printf("coverage: each of the %d ops of SG_OPS_LIST has case rows, %d of them through "
               "the rows of other ops (covered_elsewhere)\n",
               nops, nelse);
    return bad;
}

static int usage(void) {
    fprintf(stderr, "usage: test_backend_ops cpu|cuda|all [-v] [-o OP] [-c CONFIG] [--from ROW] "
                    "[--list-configs]\n"
                    "  runs every op case of tests/backend/case_table.c on the backend(s)\n");
    return 2;
}

static void list_configs(const char *which) {
    if (strcmp(which, "cuda") != 0)
        for (size_t i = 0; i < sizeof cpu_configs / sizeof cpu_configs[0]; i++)
            printf("%s\n", cpu_configs[i].name);
    if (strcmp(which, "cpu") != 0)
        for (size_t i = 0; i < sizeof cuda_configs / sizeof cuda_configs[0]; i++)
            printf("%s\n", cuda_configs[i].name);
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    const char *which = NULL;
    int list = 0;
    g.table = tb_cases;
    g.ncases = tb_ncases;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "-v") == 0) g.verbose = 1;
        else if (strcmp(argv[i], "-o") == 0 && i + 1 < argc) g.only = argv[++i];
        else if (strcmp(argv[i], "-c") == 0 && i + 1 < argc) g.only_config = argv[++i];
        else if (strcmp(argv[i], "--list-configs") == 0) list = 1;
        else if (strcmp(argv[i], "--large") == 0) g.table = tb_large_cases, g.ncases = tb_nlarge;
        else if (strcmp(argv[i], "--from") == 0 && i + 1 < argc) {
            char *end = NULL;
            long r = strtol(argv[++i], &end, 10);
            if (!end || *end || r < 0) {
                fprintf(stderr, "test_backend_ops: --from %s: not a row number\n", argv[i]);
                return 2;
            }
            g.from_row = (int)r;
        } else if (!which &&
                   (!strcmp(argv[i], "cpu") || !strcmp(argv[i], "cuda") || !strcmp(argv[i], "all")))
            which = argv[i];
        else return usage();
    }
    if (!which) return usage();
    if (list) {
        list_configs(which);
        return 0;
    }
    if (g.from_row > g.ncases) {
        fprintf(stderr, "test_backend_ops: --from %d: the table has %d rows (0..%d)\n", g.from_row,
                g.ncases, g.ncases);
        return 2;
    }
    if (g.only && !has_rows_in(g.table, g.ncases, g.only)) {
        fprintf(stderr, "test_backend_ops: -o %s: no case of that op in the table\n", g.only);
        return 2;
    }
    /* the table's coverage does not depend on a backend: checked (and
     * failing) even where the backend asked for is absent */
    if (check_coverage() != 0) return 1;
    atexit(report_unfinished);
    int sigs[] = {SIGSEGV, SIGBUS, SIGFPE, SIGABRT};
    for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++) signal(sigs[i], on_crash);
    int total = 0, total_failed = 0;
    if (strcmp(which, "all") != 0) return run_backend(which, &total, &total_failed);
    int any = 0, status = 0;
    const char *names[2] = {"cpu", "cuda"};
    for (int i = 0; i < 2; i++) {
        int r = run_backend(names[i], &total, &total_failed);
        if (r != TB_SKIP) any = 1;
        if (r == 1) status = 1;
    }
    if (!any) return TB_SKIP;
    printf("all: %d/%d cases passed (%d failed)\n", total - total_failed, total, total_failed);
    return status;
}
