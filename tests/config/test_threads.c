/* tests/config/test_threads.c - core/threads.h: the thread count `threads: 0`
 * means (affinity, cgroup quota, local ranks), the parsers of the cgroup
 * files, reading this process's budget (an affinity mask narrowed by the
 * test is seen), and the wait-policy environment rules. The policy actually
 * reaching the OpenMP runtime is tests/train/test_omp_policy.sh. */
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include "core/threads.h"
#include "testutil.h"

static int sized(int affinity, double quota, int ranks) {
    sg_cpu_budget b = {.affinity = affinity, .quota = quota, .local_ranks = ranks};
    return sg_threads_from_budget(&b);
}

static void test_sizing(void) {
    CHECK_EQ_INT(sized(8, 0, 1), 8);   /* no quota: the affinity mask */
    CHECK_EQ_INT(sized(8, 2.0, 1), 2); /* docker --cpus 2 on 8 cores */
    CHECK_EQ_INT(sized(8, 1.5, 1), 2); /* a fractional quota rounds up */
    CHECK_EQ_INT(sized(8, 0.5, 1), 1);
    CHECK_EQ_INT(sized(4, 16, 1), 4); /* a quota above the mask does not add CPUs */
    CHECK_EQ_INT(sized(8, 0, 4), 2);  /* 4 ranks on the node share the cores */
    CHECK_EQ_INT(sized(8, 0, 3), 2);  /* rounded down: no oversubscription */
    CHECK_EQ_INT(sized(2, 0, 8), 1);  /* at least one */
    CHECK_EQ_INT(sized(64, 4, 2), 2); /* quota, then ranks */
    CHECK_EQ_INT(sized(0, 0, 0), 1);  /* nonsense in, one thread out */
}

static void test_parsers(void) {
    CHECK_NEAR(sg_cgroup2_parse_cpu_max("max 100000\n"), 0, 0);
    CHECK_NEAR(sg_cgroup2_parse_cpu_max("max"), 0, 0);
    CHECK_NEAR(sg_cgroup2_parse_cpu_max("200000 100000\n"), 2, 1e-12);
    CHECK_NEAR(sg_cgroup2_parse_cpu_max("150000 100000"), 1.5, 1e-12);
    CHECK_NEAR(sg_cgroup2_parse_cpu_max("50000"), 0.5, 1e-12); /* default period */
    CHECK_NEAR(sg_cgroup2_parse_cpu_max("garbage\n"), -1, 0);
    CHECK_NEAR(sg_cgroup2_parse_cpu_max("100000 0\n"), -1, 0);
    CHECK_NEAR(sg_cgroup2_parse_cpu_max("100000 100000 7\n"), -1, 0);
    CHECK_NEAR(sg_cgroup2_parse_cpu_max(""), -1, 0);
    CHECK_NEAR(sg_cgroup1_parse_quota("-1\n", "100000\n"), 0, 0);
    CHECK_NEAR(sg_cgroup1_parse_quota("50000\n", "100000\n"), 0.5, 1e-12);
    CHECK_NEAR(sg_cgroup1_parse_quota("300000", "100000"), 3, 1e-12);
    CHECK_NEAR(sg_cgroup1_parse_quota("abc", "100000"), -1, 0);
    CHECK_NEAR(sg_cgroup1_parse_quota("50000", "0"), -1, 0);

    char p[256];
    const char *v2 = "0::/user.slice/session-1.scope\n";
    CHECK_EQ_INT(sg_cgroup_parse_self(v2, 1, p, sizeof p), 0);
    CHECK(strcmp(p, "/user.slice/session-1.scope") == 0);
    CHECK_EQ_INT(sg_cgroup_parse_self(v2, 0, p, sizeof p), -1);
    const char *v1 = "12:cpuset:/other\n11:memory:/docker/abc\n4:cpu,cpuacct:/docker/abc\n";
    CHECK_EQ_INT(sg_cgroup_parse_self(v1, 0, p, sizeof p), 0);
    CHECK(strcmp(p, "/docker/abc") == 0); /* cpuset is not cpu */
    CHECK_EQ_INT(sg_cgroup_parse_self(v1, 1, p, sizeof p), -1);
    const char *hybrid = "3:cpuacct,cpu:/k8s/pod\n0::/k8s/pod-v2\n";
    CHECK_EQ_INT(sg_cgroup_parse_self(hybrid, 0, p, sizeof p), 0);
    CHECK(strcmp(p, "/k8s/pod") == 0);
    CHECK_EQ_INT(sg_cgroup_parse_self(hybrid, 1, p, sizeof p), 0);
    CHECK(strcmp(p, "/k8s/pod-v2") == 0);
    CHECK_EQ_INT(sg_cgroup_parse_self(v2, 1, p, 5), -1); /* does not fit */
    CHECK_EQ_INT(sg_cgroup_parse_self("", 1, p, sizeof p), -1);
}

static void test_read_budget(void) {
    cpu_set_t orig;
    CHECK(sched_getaffinity(0, sizeof orig, &orig) == 0);
    unsetenv("LOCAL_WORLD_SIZE");
    sg_cpu_budget b;
    sg_cpu_budget_read(&b);
    CHECK_EQ_INT(b.affinity, CPU_COUNT(&orig));
    CHECK_EQ_INT(b.local_ranks, 1);
    CHECK(b.quota >= 0);
    fprintf(stderr, "  this process: %d CPUs in its mask, quota %.2f (%s) -> %d threads\n",
            b.affinity, b.quota, b.quota_src[0] ? b.quota_src : "none", sg_threads_from_budget(&b));
    setenv("LOCAL_WORLD_SIZE", "2", 1);
    sg_cpu_budget_read(&b);
    CHECK_EQ_INT(b.local_ranks, 2);
    setenv("LOCAL_WORLD_SIZE", "two", 1); /* malformed: does not divide */
    sg_cpu_budget_read(&b);
    CHECK_EQ_INT(b.local_ranks, 1);
    unsetenv("LOCAL_WORLD_SIZE");
    /* narrow this process to its first CPU (taskset -c N): seen at once */
    int first = -1;
    for (int c = 0; c < CPU_SETSIZE && first < 0; c++)
        if (CPU_ISSET(c, &orig)) first = c;
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(first, &one);
    CHECK(sched_setaffinity(0, sizeof one, &one) == 0);
    sg_cpu_budget_read(&b);
    sched_setaffinity(0, sizeof orig, &orig);
    CHECK_EQ_INT(b.affinity, 1);
    CHECK_EQ_INT(sg_threads_from_budget(&b), 1);
}

static void test_policy_env(void) {
    char d[256];
    unsetenv("OMP_WAIT_POLICY");
    unsetenv("GOMP_SPINCOUNT");
    unsetenv(SG_OMP_DEFAULTS_ENV);
    CHECK_EQ_INT(sg_omp_policy_wants_reexec(), 1);
    sg_omp_policy_describe(d, sizeof d);
    CHECK_STR_CONTAINS(d, "the OpenMP default");
    sg_omp_policy_set_env();
    CHECK(strcmp(getenv("GOMP_SPINCOUNT"), SG_OMP_SPINCOUNT) == 0);
    CHECK(getenv("OMP_WAIT_POLICY") == NULL);
    CHECK_EQ_INT(sg_omp_policy_wants_reexec(), 0); /* the re-executed process stops here */
    sg_omp_policy_describe(d, sizeof d);
    CHECK_STR_CONTAINS(d, "short spin (GOMP_SPINCOUNT=3000, segtrain's default");
    sg_omp_policy_undo();
    CHECK(getenv("GOMP_SPINCOUNT") == NULL && getenv(SG_OMP_DEFAULTS_ENV) == NULL);
    setenv(SG_OMP_DEFAULTS_ENV, "1", 1); /* loop guard alone */
    CHECK_EQ_INT(sg_omp_policy_wants_reexec(), 0);
    unsetenv(SG_OMP_DEFAULTS_ENV);
    setenv("OMP_WAIT_POLICY", "active", 1); /* the user's choice */
    CHECK_EQ_INT(sg_omp_policy_wants_reexec(), 0);
    sg_omp_policy_describe(d, sizeof d);
    CHECK_STR_CONTAINS(d, "from the environment (OMP_WAIT_POLICY=active, GOMP_SPINCOUNT=unset)");
    unsetenv("OMP_WAIT_POLICY");
    setenv("GOMP_SPINCOUNT", "10000", 1);
    CHECK_EQ_INT(sg_omp_policy_wants_reexec(), 0);
    unsetenv("GOMP_SPINCOUNT");
}

int main(void) {
    TEST_RUN(test_sizing);
    TEST_RUN(test_parsers);
    TEST_RUN(test_read_budget);
    TEST_RUN(test_policy_env);
    return TEST_EXIT();
}
