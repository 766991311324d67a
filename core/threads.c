/* core/threads.c - see threads.h. */
#include "core/threads.h"

#include <math.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/util.h"

int sg_threads_from_budget(const sg_cpu_budget *b) {
    int cpus = b->affinity > 0 ? b->affinity : 1;
    if (b->quota > 0) {
        /* a quota of 1.5 CPUs still runs 2 threads in parallel part of the time */
        double q = ceil(b->quota - 1e-9);
        if (q < cpus) cpus = q < 1 ? 1 : (int)q;
    }
    int ranks = b->local_ranks > 0 ? b->local_ranks : 1;
    int t = cpus / ranks;
    return t > 0 ? t : 1;
}

/* Parses one non-negative decimal number at *p (advancing it); -1 if none. */
static double parse_num(const char **p) {
    while (**p == ' ' || **p == '\t') (*p)++;
    if (**p < '0' || **p > '9') return -1;
    char *end;
    double v = strtod(*p, &end);
    *p = end;
    return v;
}

static int only_space_left(const char *p) {
    while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r') p++;
    return *p == 0;
}

double sg_cgroup2_parse_cpu_max(const char *text) {
    const char *p = text;
    while (*p == ' ' || *p == '\t') p++;
    double quota = -2;
    if (!strncmp(p, "max", 3)) {
        p += 3;
        quota = 0;
    } else {
        quota = parse_num(&p);
        if (quota <= 0) return -1;
    }
    double period = 100000; /* the period may be missing in old kernels' output */
    if (!only_space_left(p)) {
        period = parse_num(&p);
        if (period <= 0 || !only_space_left(p)) return -1;
    }
    return quota == 0 ? 0 : quota / period;
}

double sg_cgroup1_parse_quota(const char *quota_text, const char *period_text) {
    const char *p = quota_text;
    while (*p == ' ' || *p == '\t') p++;
    if (!strncmp(p, "-1", 2) && only_space_left(p + 2)) return 0;
    double quota = parse_num(&p);
    if (quota <= 0 || !only_space_left(p)) return -1;
    p = period_text;
    double period = parse_num(&p);
    if (period <= 0 || !only_space_left(p)) return -1;
    return quota / period;
}

int sg_cgroup_parse_self(const char *text, int want_v2, char *out, size_t cap) {
    const char *line = text;
    while (line && *line) {
        const char *nl = strchr(line, '\n');
        size_t len = nl ? (size_t)(nl - line) : strlen(line);
        /* hierarchy-id:controllers:path */
        const char *c1 = memchr(line, ':', len);
        const char *c2 = c1 ? memchr(c1 + 1, ':', len - (size_t)(c1 + 1 - line)) : NULL;
        if (c1 && c2) {
            size_t clen = (size_t)(c2 - c1 - 1);
            int match = 0;
            if (want_v2) {
                match = clen == 0 && c1 - line == 1 && line[0] == '0';
            } else {
                /* the controller list contains "cpu" as a whole word */
                const char *q = c1 + 1;
                while (q < c2) {
                    const char *e = memchr(q, ',', (size_t)(c2 - q));
                    if (!e) e = c2;
                    if (e - q == 3 && !strncmp(q, "cpu", 3)) match = 1;
                    q = e + 1;
                }
            }
            size_t plen = len - (size_t)(c2 + 1 - line);
            if (match && plen > 0 && plen < cap) {
                memcpy(out, c2 + 1, plen);
                out[plen] = 0;
                return 0;
            }
        }
        line = nl ? nl + 1 : NULL;
    }
    return -1;
}

/* Reads a small system file into buf; 0 or -1. */
static int read_small(const char *path, char *buf, size_t cap) {
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    size_t n = fread(buf, 1, cap - 1, f);
    fclose(f);
    buf[n] = 0;
    return n > 0 ? 0 : -1;
}

/* Walks from <root><path> up to <root>, keeping the smallest quota found
 * (a limit anywhere above applies too). */
static void walk_cgroup(const char *root, const char *path, int v2, sg_cpu_budget *b) {
    char dir[1024], file[1200], text[256], text2[256];
    if ((size_t)snprintf(dir, sizeof dir, "%s%s", root, path) >= sizeof dir) return;
    size_t rootlen = strlen(root);
    for (;;) {
        size_t n = strlen(dir);
        while (n > rootlen && dir[n - 1] == '/') dir[--n] = 0;
        double q = -1;
        if (v2) {
            snprintf(file, sizeof file, "%s/cpu.max", dir);
            if (read_small(file, text, sizeof text) == 0) q = sg_cgroup2_parse_cpu_max(text);
        } else {
            snprintf(file, sizeof file, "%s/cpu.cfs_quota_us", dir);
            char pfile[1200];
            snprintf(pfile, sizeof pfile, "%s/cpu.cfs_period_us", dir);
            if (read_small(file, text, sizeof text) == 0 &&
                read_small(pfile, text2, sizeof text2) == 0)
                q = sg_cgroup1_parse_quota(text, text2);
        }
        if (q > 0 && (b->quota <= 0 || q < b->quota)) {
            b->quota = q;
            /* a long cgroup path is shown shortened: it only names the source */
            snprintf(b->quota_src, sizeof b->quota_src, "%.*s", (int)sizeof b->quota_src - 1, file);
        }
        char *slash = strrchr(dir, '/');
        if (n <= rootlen || !slash || (size_t)(slash - dir) < rootlen) break;
        *slash = 0;
    }
}

void sg_cpu_budget_read(sg_cpu_budget *b) {
    memset(b, 0, sizeof *b);
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof set, &set) == 0) b->affinity = CPU_COUNT(&set);
    if (b->affinity < 1) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        b->affinity = n > 0 ? (int)n : 1;
    }
    char self[4096], path[900];
    if (read_small("/proc/self/cgroup", self, sizeof self) == 0) {
        if (access("/sys/fs/cgroup/cgroup.controllers", F_OK) == 0 &&
            sg_cgroup_parse_self(self, 1, path, sizeof path) == 0)
            walk_cgroup("/sys/fs/cgroup", path, 1, b);
        if (b->quota <= 0 && sg_cgroup_parse_self(self, 0, path, sizeof path) == 0) {
            /* the v1 cpu controller is mounted alone or together with cpuacct */
            walk_cgroup("/sys/fs/cgroup/cpu,cpuacct", path, 0, b);
            if (b->quota <= 0) walk_cgroup("/sys/fs/cgroup/cpu", path, 0, b);
        }
    }
    const char *lws = getenv("LOCAL_WORLD_SIZE");
    int n = 1;
    if (!lws || sg_parse_int(lws, 1, 1 << 20, &n) != 0) n = 1;
    b->local_ranks = n;
}

/* ---------------- OpenMP wait policy ---------------- */

static int env_set(const char *name) {
    const char *v = getenv(name);
    return v && v[0];
}

int sg_omp_policy_wants_reexec(void) {
    return !env_set("OMP_WAIT_POLICY") && !env_set("GOMP_SPINCOUNT") &&
           !env_set(SG_OMP_DEFAULTS_ENV);
}

void sg_omp_policy_set_env(void) {
    setenv("GOMP_SPINCOUNT", SG_OMP_SPINCOUNT, 1);
    setenv(SG_OMP_DEFAULTS_ENV, "1", 1);
}

void sg_omp_policy_undo(void) {
    unsetenv("GOMP_SPINCOUNT");
    unsetenv(SG_OMP_DEFAULTS_ENV);
}

void sg_omp_policy_describe(char *buf, size_t cap) {
    const char *pol = getenv("OMP_WAIT_POLICY");
    const char *spin = getenv("GOMP_SPINCOUNT");
    int ours = env_set(SG_OMP_DEFAULTS_ENV) && !env_set("OMP_WAIT_POLICY") && spin &&
               !strcmp(spin, SG_OMP_SPINCOUNT);
    if (ours)
        snprintf(buf, cap,
                 "short spin (GOMP_SPINCOUNT=%s, segtrain's default: about 30 us at a "
                 "barrier, then sleep; set OMP_WAIT_POLICY=passive or active to choose)",
                 SG_OMP_SPINCOUNT);
    else if (env_set("OMP_WAIT_POLICY") || env_set("GOMP_SPINCOUNT"))
        snprintf(buf, cap, "from the environment (OMP_WAIT_POLICY=%s, GOMP_SPINCOUNT=%s)",
                 pol && pol[0] ? pol : "unset", spin && spin[0] ? spin : "unset");
    else
        snprintf(buf, cap,
                 "the OpenMP default (threads spin about 3 ms at barriers: this "
                 "process did not start through segtrain's main; set GOMP_SPINCOUNT=%s "
                 "on shared cores)",
                 SG_OMP_SPINCOUNT);
}
