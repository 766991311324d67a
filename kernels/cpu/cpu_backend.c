/* kernels/cpu/cpu_backend.c - the CPU backend: creation, destroy, get_info,
 * the assembly of the op table, and the activation layout cpu.layout auto
 * picks per precision and ISA.
 *
 * Owns the lifetime of the sg_cpu state (cpu_internal.h): the OpenMP thread
 * count (shared by oneDNN, which Debian builds on OpenMP), the conv cache,
 * the bf16 weight cache. The ops live in one file per op group, each
 * filling its part of the table (sg_cpu_fill_*_ops; the table of groups is
 * in cpu_internal.h); this file only calls them, none calls back into it.
 * Ops run synchronously on the calling thread's OpenMP team.
 */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "core/sigmask.h"
#include "core/threads.h"
#include "kernels/cpu/cpu_internal.h"
#include "kernels/weight_cache.h"

/* The bf16 weight copies' memory (kernels/weight_cache.h). */
static void *wcache_alloc(void *ctx, size_t bytes) {
    (void)ctx;
    return sg_cpu_aligned_alloc(bytes);
}

static void wcache_free(void *ctx, void *p, size_t bytes) {
    (void)ctx, (void)bytes;
    sg_cpu_aligned_free(p);
}

/* "model name" from /proc/cpuinfo, or "unknown CPU". */
static void cpu_model(char *out, size_t n) {
    snprintf(out, n, "unknown CPU");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "model name", 10) != 0) continue;
        char *v = strchr(line, ':');
        if (!v) break;
        v++;
        while (*v == ' ' || *v == '\t') v++;
        v[strcspn(v, "\n")] = 0;
        snprintf(out, n, "%s", v);
        break;
    }
    fclose(f);
}

/* A byte count from a one-number file (cgroup), 0 when absent or "max". */
static size_t read_bytes_file(const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    unsigned long long v = 0;
    int ok = fscanf(f, "%llu", &v) == 1;
    fclose(f);
    return ok ? (size_t)v : 0;
}

/* MemTotal / MemAvailable, lowered to this cgroup's limit when it has one
 * (a container sees the host's /proc/meminfo). 0 = unknown. */
static void host_memory(size_t *total, size_t *avail) {
    *total = *avail = 0;
    FILE *f = fopen("/proc/meminfo", "r");
    if (f) {
        char line[256];
        unsigned long long kb;
        while (fgets(line, sizeof line, f)) {
            if (sscanf(line, "MemTotal: %llu kB", &kb) == 1) *total = (size_t)kb * 1024;
            if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1) *avail = (size_t)kb * 1024;
        }
        fclose(f);
    }
    /* cgroup v2, then v1 (a v1 "no limit" is a huge number: capped by MemTotal) */
    size_t lim = read_bytes_file("/sys/fs/cgroup/memory.max");
    size_t use = read_bytes_file("/sys/fs/cgroup/memory.current");
    if (!lim) {
        lim = read_bytes_file("/sys/fs/cgroup/memory/memory.limit_in_bytes");
        use = read_bytes_file("/sys/fs/cgroup/memory/memory.usage_in_bytes");
    }
    if (lim && (!*total || lim < *total)) {
        *total = lim;
        size_t left = lim > use ? lim - use : 0;
        if (!*avail || left < *avail) *avail = left;
    }
}

static void cpu_get_info(sg_backend *be, sg_backend_info *info) {
    sg_cpu *c = sg_cpu_of(be);
    snprintf(info->name, sizeof info->name, "cpu");
    cpu_model(info->device, sizeof info->device);
    info->threads = c->threads;
    info->mem_in_use = __atomic_load_n(&c->mem_in_use, __ATOMIC_RELAXED);
    info->mem_peak = __atomic_load_n(&c->mem_peak, __ATOMIC_RELAXED);
    host_memory(&info->mem_total, &info->mem_available);
    sg_cpu_conv_describe(c->conv, info->precision, sizeof info->precision, info->conv_math,
                         sizeof info->conv_math);
}

static void cpu_destroy(sg_backend *be) {
    sg_cpu *c = sg_cpu_of(be);
    sg_cpu_conv_destroy(c->conv);
    sg_wcache_destroy(c->wcache);
    sg_cpu_act_buf_free(c);
    free(c);
    free(be);
}

/* cpu.layout auto, per precision and ISA (avx512: 1 AVX-512, 0 narrower,
 * -1 either): what `segtrain bench` measured faster (docs/BENCHMARKS.md,
 * "Activation layout"). On AVX-512 oneDNN's channels-last kernels (brgconv)
 * and segtrain's Winograd and matmul paths read NHWC as stored; on AVX2
 * oneDNN 2.6 has neither brgconv nor Winograd, so its blocked kernels
 * behind NCHW win in fp32 (measured on Zen 2 in the same section), and the
 * CPU backend's own Winograd (kernels/cpu/conv/wino.c) runs on NCHW. */
static const struct {
    int precision, avx512, layout;
    const char *why;
} cpu_auto_layout[] = {
    {SG_PRECISION_FP32, 1, SG_LAYOUT_NHWC,
     "cpu.layout auto: channels last, measured faster for fp32 on AVX-512 CPUs"},
    {SG_PRECISION_FP32, 0, SG_LAYOUT_NCHW,
     "cpu.layout auto: NCHW (oneDNN's blocked kernels, segtrain's own Winograd), measured "
     "faster for fp32 on CPUs without AVX-512"},
    {SG_PRECISION_BF16, -1, SG_LAYOUT_NHWC,
     "cpu.layout auto: channels last, measured faster for bf16 on the CPU"},
};

/* kernels/backend.c's sg_backend_cpu_preferred_layout (the contract is in
 * kernels/backend.h). */
int sg_cpu_preferred_layout(int precision, const char **why) {
    int avx512 = sg_cpu_avx512();
    for (size_t i = 0; i < sizeof cpu_auto_layout / sizeof cpu_auto_layout[0]; i++)
        if (cpu_auto_layout[i].precision == precision &&
            (cpu_auto_layout[i].avx512 < 0 || cpu_auto_layout[i].avx512 == avx512)) {
            if (why) *why = cpu_auto_layout[i].why;
            return cpu_auto_layout[i].layout;
        }
    /* an unknown precision: sg_backend_create refuses it anyway */
    if (why) *why = "cpu.layout auto: NCHW (precision not in the CPU backend's layout table)";
    return SG_LAYOUT_NCHW;
}

static sg_ops cpu_ops;
static int cpu_ops_ready;

/* Each op group's file fills its part (the table in cpu_internal.h). */
static void fill_ops(void) {
    sg_ops *o = &cpu_ops;
    o->name = "cpu";
    o->destroy = cpu_destroy;
    o->get_info = cpu_get_info;
    sg_cpu_fill_memory_ops(o);
    sg_cpu_fill_conv_ops(o);
    sg_cpu_fill_conv_bias_ops(o);
    sg_cpu_fill_bn_ops(o);
    sg_cpu_fill_elem_ops(o);
    sg_cpu_fill_gate_ops(o);
    sg_cpu_fill_pool_ops(o);
    sg_cpu_fill_loss_ops(o);
    sg_cpu_fill_tta_ops(o);
    sg_cpu_fill_act_bf16_ops(o);
    sg_cpu_fill_optim_ops(o);
}

sg_backend *sg_cpu_backend_create(const sg_backend_opts *opts) {
    int threads = opts ? opts->threads : 0;
    if (threads < 0) {
        SG_ERROR("CPU backend: threads = %d; use 0 (all cores / OMP_NUM_THREADS) or a "
                 "positive count",
                 threads);
        return NULL;
    }
    /* threads == 0: OMP_NUM_THREADS if set (its first value), else the CPUs
     * this process may use (affinity mask, cgroup quota) divided among the
     * node's ranks (core/threads.h); set explicitly so an earlier backend's
     * count does not leak in. The choice is logged once per process. */
    char why[256];
    if (threads == 0) {
        const char *env = getenv("OMP_NUM_THREADS");
        int v = env ? atoi(env) : 0;
        if (v > 0) {
            threads = v;
            snprintf(why, sizeof why, "threads: 0 and OMP_NUM_THREADS=%s", env);
        } else {
            sg_cpu_budget b;
            sg_cpu_budget_read(&b);
            threads = sg_threads_from_budget(&b);
            char quota[200] = "no cgroup CPU quota";
            if (b.quota > 0)
                snprintf(quota, sizeof quota, "quota %.2f CPUs (%s)", b.quota, b.quota_src);
            snprintf(why, sizeof why,
                     "threads: 0: %d CPUs in the affinity mask, %s, %d rank(s) "
                     "on this node",
                     b.affinity, quota, b.local_ranks);
        }
    } else {
        snprintf(why, sizeof why, "threads: %d", threads);
    }
    omp_set_num_threads(threads);
    /* libgomp starts its team's threads at the first parallel region that
     * needs them and keeps them; they inherit the starting thread's signal
     * mask. Start them here with every signal blocked (core/sigmask.h), so
     * a process-directed SIGTERM reaches the training thread, not a
     * worker in the middle of a oneDNN kernel. */
    sigset_t old_mask;
    sg_sigmask_block_all(&old_mask);
#pragma omp parallel
    { (void)0; }
    sg_sigmask_restore(&old_mask);
    static int logged = 0;
    if (!__atomic_exchange_n(&logged, 1, __ATOMIC_RELAXED)) {
        char pol[200];
        sg_omp_policy_describe(pol, sizeof pol);
        SG_INFO("CPU backend: %d OpenMP thread(s) (%s); wait policy %s", threads, why, pol);
    }

#pragma omp critical(sg_cpu_ops_init)
    {
        if (!cpu_ops_ready) {
            fill_ops();
            cpu_ops_ready = 1;
        }
    }
    /* sg_backend_create checks that every op is set (kernels/backend.c) */

    sg_backend *be = calloc(1, sizeof *be);
    sg_cpu *c = calloc(1, sizeof *c);
    if (!be || !c) SG_FATAL("CPU backend: out of memory creating the backend");
    c->threads = threads;
    c->conv = sg_cpu_conv_create(threads, opts ? opts->precision : SG_PRECISION_FP32);
    if (!c->conv) { /* a bf16 choice this processor cannot run (logged) */
        free(c);
        free(be);
        return NULL;
    }
    if (opts && opts->precision == SG_PRECISION_BF16) {
        c->wcache = sg_wcache_create(wcache_alloc, wcache_free, NULL);
        if (!c->wcache) { /* SG_WEIGHT_CACHE malformed (logged) */
            sg_cpu_conv_destroy(c->conv);
            free(c);
            free(be);
            return NULL;
        }
    }
    be->ops = &cpu_ops;
    be->impl = c;
    be->caps = SG_CAP_HOST_MEMORY; /* synchronous: no streams; Gloo, not NCCL */
    be->device_index = -1;
    be->layout = opts ? opts->layout : SG_LAYOUT_NCHW;
    return be;
}
