/* core/threads.h - how many CPU threads `threads: 0` means, and the OpenMP
 * wait policy segtrain runs with.
 *
 * Thread count. A process may use the CPUs of its affinity mask
 * (sched_getaffinity: taskset, Slurm, docker --cpuset-cpus), further capped
 * by a cgroup CPU quota (v2 `cpu.max`, v1 `cpu.cfs_quota_us` /
 * `cpu.cfs_period_us`; docker --cpus, Kubernetes limits), the smallest over
 * the cgroup and its ancestors. Ranks started on the same node share them:
 * the count is divided by LOCAL_WORLD_SIZE. `omp_get_num_procs()` sees only
 * the affinity mask, so a quota of 2 CPUs on a 64-core host would otherwise
 * start 64 threads that the kernel throttles.
 *
 * Wait policy. GNU OpenMP (libgomp, also under Debian's oneDNN) reads
 * OMP_WAIT_POLICY and GOMP_SPINCOUNT once, in its library constructor, before
 * main() runs; setenv() in main is too late and no API changes it later. By
 * default its threads spin 300000 rounds (about 3 ms) at every barrier
 * before they sleep: on a machine whose cores are shared (loader threads,
 * other ranks, other jobs) a thread spins while the peer it waits for is
 * descheduled, and the demo trained 10 to 30 times slower. A passive policy
 * (never spin) fixes that but sleeps and wakes at every barrier, which
 * halves the speed of small networks on a quiet machine; a short spin gets
 * both (docs/BENCHMARKS.md, "CPU threads on a shared machine"). segtrain
 * therefore starts itself once more (execv of /proc/self/exe, before any
 * thread exists) with GOMP_SPINCOUNT=SG_OMP_SPINCOUNT when the user set
 * neither variable (cmd/main.c); SG_OMP_DEFAULTS_ENV marks the re-executed
 * process (loop guard, and the log says who chose the policy).
 *
 * Pure parsing and sizing functions are separate from the ones reading the
 * system, so the arithmetic is unit-tested (tests/config/test_threads.c).
 */
#ifndef SG_CORE_THREADS_H
#define SG_CORE_THREADS_H

#include <stddef.h>

/* What limits this process's CPU use. */
typedef struct sg_cpu_budget {
    int affinity;        /* CPUs in the affinity mask (>= 1) */
    double quota;        /* cgroup CPU quota in CPUs; 0 = none found */
    char quota_src[160]; /* the file the quota came from ("" when none) */
    int local_ranks;     /* LOCAL_WORLD_SIZE, 1 when unset or invalid */
} sg_cpu_budget;

/* The thread count for `threads: 0`: min(affinity, ceil(quota)) divided by
 * local_ranks (floor), at least 1. Pure. */
int sg_threads_from_budget(const sg_cpu_budget *b);

/* Parses the text of a cgroup v2 `cpu.max` ("max 100000", "150000 100000"):
 * the quota in CPUs, 0 for "max" (no limit), -1 when malformed. Pure. */
double sg_cgroup2_parse_cpu_max(const char *text);
/* cgroup v1: the texts of cpu.cfs_quota_us and cpu.cfs_period_us: CPUs, 0
 * for no limit (quota -1), -1 when malformed. Pure. */
double sg_cgroup1_parse_quota(const char *quota_text, const char *period_text);
/* From the text of /proc/self/cgroup: the cgroup path of the v2 hierarchy
 * (line "0::/path", want_v2 = 1) or of the v1 hierarchy holding the "cpu"
 * controller (line "N:cpu,cpuacct:/path", want_v2 = 0) into out. Returns 0,
 * or -1 when there is no such line (or it does not fit). Pure. */
int sg_cgroup_parse_self(const char *text, int want_v2, char *out, size_t cap);

/* Fills *b from this process: sched_getaffinity, the cgroup files under
 * /sys/fs/cgroup, LOCAL_WORLD_SIZE. Never fails: what cannot be read does
 * not limit (affinity falls back to the online CPUs). */
void sg_cpu_budget_read(sg_cpu_budget *b);

/* Set (to "1") in the environment of the process segtrain re-executed with
 * its default wait policy. */
#define SG_OMP_DEFAULTS_ENV "SEGTRAIN_OMP_DEFAULTS"
/* segtrain's spin count: about 30 us of spinning at a barrier, then sleep. */
#define SG_OMP_SPINCOUNT "3000"

/* 1 when this process should re-execute itself with segtrain's wait
 * policy: neither OMP_WAIT_POLICY nor GOMP_SPINCOUNT is set, and it is not
 * the re-executed process already. */
int sg_omp_policy_wants_reexec(void);
/* Sets GOMP_SPINCOUNT=SG_OMP_SPINCOUNT and SG_OMP_DEFAULTS_ENV=1 for the
 * re-exec; sg_omp_policy_undo removes both again (the exec failed). */
void sg_omp_policy_set_env(void);
void sg_omp_policy_undo(void);
/* One phrase for the log: the policy this process's OpenMP runtime was
 * started with and who chose it, e.g. "short spin (GOMP_SPINCOUNT=3000,
 * segtrain's default ...)". */
void sg_omp_policy_describe(char *buf, size_t cap);

#endif
