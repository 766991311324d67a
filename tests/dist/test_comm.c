/* tests/dist/test_comm.c - the communicator across 2-4 real processes over
 * Gloo: all-reduce (float on backend memory, double and int64 on the host),
 * broadcast, all-gather, barrier and the agreement check, with values that
 * are exact so any wrong sum, order or root shows. Workers are started by
 * the launcher (torchrun variables), by hand with torchrun's variables, and
 * with mpirun's and srun's variables, and by two launchers as two nodes. A
 * config or dataset mismatch, a rank that never starts and ranks calling
 * different collectives must fail on every rank, naming the rank/field. World 1 (no variables) is tested in-process. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "core/log.h"
#include "dist/comm.h"
#include "dist_harness.h"
#include "tests/helpers.h"
#include "testutil.h"

static sg_backend *cpu(void) {
    sg_backend_opts o = {.threads = 1};
    return sg_backend_create("cpu", &o);
}

static void config(sg_config *cfg) {
    sg_config_defaults(cfg);
    cfg->dist.timeout_s = getenv("SG_TEST_TIMEOUT") ? atoi(getenv("SG_TEST_TIMEOUT")) : 20;
    snprintf(cfg->dist.backend, sizeof cfg->dist.backend, "gloo");
}

/* ---- worker side: returns 0 when every collective gave the exact result ---- */
#define WCHECK(cond)                                                                       \
    do {                                                                                   \
        if (!(cond)) {                                                                     \
            fprintf(stderr, "worker check failed %s:%d: %s\n", __FILE__, __LINE__, #cond); \
            return 1;                                                                      \
        }                                                                                  \
    } while (0)

static int worker_coll(void) {
    sg_config cfg;
    config(&cfg);
    sg_backend *be = cpu();
    WCHECK(be);
    sg_comm *c = sg_comm_create(&cfg, be);
    WCHECK(c);
    int r = sg_comm_rank(c), w = sg_comm_world(c);
    WCHECK(w == atoi(getenv("SG_TEST_WORLD")));
    WCHECK(strcmp(sg_comm_backend_name(c), "gloo") == 0);

    /* float all-reduce, small and large (Gloo splits large ones) */
    size_t ns[] = {1, 1000, 300007};
    for (int k = 0; k < 3; k++) {
        size_t n = ns[k];
        float *x = be->ops->alloc(be, n * sizeof *x);
        for (size_t i = 0; i < n; i++) x[i] = (float)(r * 100 + (int)(i % 1000));
        WCHECK(sg_comm_allreduce_f32(c, x, n) == 0);
        for (size_t i = 0; i < n; i++)
            WCHECK(x[i] == (float)(100 * w * (w - 1) / 2 + w * (int)(i % 1000)));
        be->ops->free(be, x);
    }
    double d[3] = {0.25 * r, 1e15 + r, -(double)r};
    WCHECK(sg_comm_allreduce_f64(c, d, 3) == 0);
    WCHECK(d[0] == 0.25 * w * (w - 1) / 2 && d[1] == 1e15 * w + w * (w - 1) / 2 &&
           d[2] == -(double)(w * (w - 1) / 2));
    int64_t q[2] = {((int64_t)1 << 50) + r, -r};
    WCHECK(sg_comm_allreduce_i64(c, q, 2) == 0);
    WCHECK(q[0] == ((int64_t)w << 50) + w * (w - 1) / 2 && q[1] == -(int64_t)(w * (w - 1) / 2));

    /* broadcast from the last rank (device) and from rank 0 (host) */
    float *b = be->ops->alloc(be, 77 * sizeof *b);
    for (int i = 0; i < 77; i++) b[i] = (float)(r * 1000 + i);
    WCHECK(sg_comm_broadcast(c, b, 77 * sizeof *b, w - 1) == 0);
    for (int i = 0; i < 77; i++) WCHECK(b[i] == (float)((w - 1) * 1000 + i));
    be->ops->free(be, b);
    char msg[32];
    snprintf(msg, sizeof msg, "from rank %d", r);
    WCHECK(sg_comm_broadcast_host(c, msg, sizeof msg, 0) == 0);
    WCHECK(strcmp(msg, "from rank 0") == 0);

    /* all-gather */
    float *in = be->ops->alloc(be, 5 * sizeof *in),
          *out = be->ops->alloc(be, 5 * (size_t)w * sizeof *out);
    for (int i = 0; i < 5; i++) in[i] = (float)(r * 10 + i);
    WCHECK(sg_comm_allgather_f32(c, in, out, 5) == 0);
    for (int rr = 0; rr < w; rr++)
        for (int i = 0; i < 5; i++) WCHECK(out[rr * 5 + i] == (float)(rr * 10 + i));
    int64_t mine = 1000 + r, all[8];
    WCHECK(sg_comm_allgather_host(c, &mine, all, sizeof mine) == 0);
    for (int rr = 0; rr < w; rr++) WCHECK(all[rr] == 1000 + rr);
    be->ops->free(be, in);
    be->ops->free(be, out);

    /* large ones: with the mesh, reduce-scatter + all-gather (all-reduce)
     * and scatter + all-gather (broadcast) over uneven chunks; with
     * SG_DIST_NO_MESH=1, Gloo's algorithms */
    size_t big = 100000;
    float *bin = be->ops->alloc(be, big * sizeof *bin),
          *bout = be->ops->alloc(be, big * (size_t)w * sizeof *bout);
    for (size_t i = 0; i < big; i++) bin[i] = (float)(r * 7 + (int)(i % 101));
    WCHECK(sg_comm_allgather_f32(c, bin, bout, big) == 0);
    for (int rr = 0; rr < w; rr++)
        for (size_t i = 0; i < big; i += 997)
            WCHECK(bout[(size_t)rr * big + i] == (float)(rr * 7 + (int)(i % 101)));
    WCHECK(sg_comm_broadcast(c, bin, big * sizeof *bin, 1) == 0);
    for (size_t i = 0; i < big; i++) WCHECK(bin[i] == (float)(7 + (int)(i % 101)));
    be->ops->free(be, bin);
    be->ops->free(be, bout);

    /* a large all-reduce of inexact floats: every element is the sum in rank
     * order, bit for bit, on every rank (what the small path gives) */
    if (!getenv("SG_DIST_NO_MESH")) {
        size_t n = 70001; /* 280 KB: the chunked path, world 3 and 4 uneven */
        float *x = be->ops->alloc(be, n * sizeof *x);
#define INEXACT(q, i) ((float)((i) % 977) * 0.001f + (float)(q)*0.37f) / (float)(1 + (i) % 13)
        for (size_t i = 0; i < n; i++) x[i] = INEXACT(r, i);
        WCHECK(sg_comm_allreduce_f32(c, x, n) == 0);
        for (size_t i = 0; i < n; i++) {
            float acc = INEXACT(0, i);
            for (int q = 1; q < w; q++) acc += INEXACT(q, i);
            WCHECK(memcmp(&acc, &x[i], sizeof acc) == 0);
        }
#undef INEXACT
        be->ops->free(be, x);
    }

    WCHECK(sg_comm_barrier(c) == 0);
    WCHECK(sg_comm_check_dataset(c, 0x1234) == 0);
    printf("coll ok rank %d of %d local %d\n", r, w, sg_comm_local_rank(c));
    fflush(stdout);
    WCHECK(sg_comm_barrier(c) == 0);
    sg_comm_destroy(c);
    sg_backend_destroy(be);
    return 0;
}

/* rank 1 runs a different config: creation must fail on every rank */
static int worker_cfg_mismatch(void) {
    sg_config cfg;
    config(&cfg);
    if (atoi(getenv("RANK")) == 1) cfg.seed += 1;
    sg_backend *be = cpu();
    sg_comm *c = sg_comm_create(&cfg, be);
    sg_backend_destroy(be);
    if (c) {
        sg_comm_destroy(c);
        return 0; /* wrong: the launcher then exits 0 and the driver fails */
    }
    return 3;
}

/* rank 1 indexed a different dataset: the check fails on every rank */
static int worker_dataset_mismatch(void) {
    sg_config cfg;
    config(&cfg);
    sg_backend *be = cpu();
    sg_comm *c = sg_comm_create(&cfg, be);
    if (!c) return 9;
    sg_status rc = sg_comm_check_dataset(c, sg_comm_rank(c) == 1 ? 0xBAD : 0x600D);
    sg_comm_destroy(c);
    return rc ? 3 : 0;
}

/* ranks take different code paths: rank 1 all-reduces a different size;
 * both must fail saying so, not mix the data */
static int worker_diverge(void) {
    sg_config cfg;
    config(&cfg);
    sg_backend *be = cpu();
    sg_comm *c = sg_comm_create(&cfg, be);
    if (!c) return 9;
    float x[12] = {0};
    sg_status rc = sg_comm_allreduce_f32(c, x, sg_comm_rank(c) == 1 ? 12 : 10);
    sg_comm_destroy(c);
    return rc ? 3 : 0;
}

/* ---- driver side ---- */
static void run_world(int w) {
    char ws[8];
    snprintf(ws, sizeof ws, "%d", w);
    setenv("SG_TEST_WORLD", ws, 1);
    const char *args[] = {"--nproc-per-node", ws, "coll", NULL};
    char *out = NULL;
    int rc = dh_launch(args, &out, NULL);
    CHECK_EQ_INT(rc, 0);
    for (int r = 0; r < w; r++) {
        char want[64];
        snprintf(want, sizeof want, "[rank %d] coll ok rank %d of %d local %d", r, r, w, r);
        CHECK_STR_CONTAINS(out, want);
    }
    free(out);
}
static void test_world2(void) { run_world(2); }
static void test_world3(void) { run_world(3); }
static void test_world4(void) { run_world(4); }
/* the same through Gloo alone (no direct mesh for small collectives) */
static void test_world3_gloo_only(void) {
    setenv("SG_DIST_NO_MESH", "1", 1);
    run_world(3);
    unsetenv("SG_DIST_NO_MESH");
}

static void test_config_mismatch_named(void) {
    const char *args[] = {"--nproc-per-node", "2", "cfgmismatch", NULL};
    char *out = NULL;
    int rc = dh_launch(args, &out, NULL);
    CHECK_EQ_INT(rc, 3);
    CHECK_STR_CONTAINS(out, "ranks disagree on the resolved config");
    CHECK_STR_CONTAINS(out, "rank(s) 1 differ from rank 0");
    free(out);
}

static void test_diverged_ranks_named(void) {
    const char *args[] = {"--nproc-per-node", "2", "diverge", NULL};
    char *out = NULL;
    int rc = dh_launch(args, &out, NULL);
    CHECK_EQ_INT(rc, 3);
    /* One rank diagnoses for all (the store's verdict), and the launcher
     * stops the others once the first rank exits: the job's output holds the
     * diagnosis as at least one of the two ranks saw it. */
    int from0 = strstr(out, "rank 0: all-reduce of 40 bytes failed") != NULL &&
                strstr(out, "rank 1 is in a different collective") != NULL;
    int from1 = strstr(out, "rank 1: all-reduce of 48 bytes failed") != NULL &&
                strstr(out, "rank 0 is in a different collective") != NULL;
    CHECK_MSG(from0 || from1, "neither rank named the diverged collective in:\n%s", out);
    free(out);
}

static void test_dataset_mismatch_named(void) {
    const char *args[] = {"--nproc-per-node", "3", "dsmismatch", NULL};
    char *out = NULL;
    int rc = dh_launch(args, &out, NULL);
    CHECK_EQ_INT(rc, 3);
    CHECK_STR_CONTAINS(out, "[rank 2] error: rank 2: ranks disagree on the dataset index");
    CHECK_STR_CONTAINS(out, "rank(s) 1 differ from rank 0");
    free(out);
}

/* World 3 with rank 2 never started: ranks 0 and 1 must fail within
 * dist.timeout_s naming rank 2, not hang. */
static void test_missing_rank_named(void) {
    char exe[PATH_MAX];
    CHECK(th_self_exe(exe, sizeof exe) == 0);
    char port[16];
    snprintf(port, sizeof port, "%d", th_free_port());
    int p[2];
    CHECK(pipe(p) == 0);
    pid_t pids[2];
    for (int r = 0; r < 2; r++) {
        pids[r] = fork();
        if (pids[r] == 0) {
            th_rank_env(r, 3, port, 0);
            setenv("SG_TEST_TIMEOUT", "2", 1);
            close(p[0]);
            dup2(p[1], 2);
            execl(exe, exe, "coll", (char *)NULL);
            _exit(127);
        }
    }
    close(p[1]);
    static char out[65536];
    size_t len = 0;
    ssize_t r;
    while ((r = read(p[0], out + len, sizeof out - 1 - len)) > 0) len += (size_t)r;
    out[len] = 0;
    close(p[0]);
    fprintf(stderr, "%s", out);
    for (int k = 0; k < 2; k++) {
        int st = 0;
        waitpid(pids[k], &st, 0);
        CHECK_MSG(WIFEXITED(st) && WEXITSTATUS(st) != 0, "rank %d: wait status %d", k, st);
    }
    CHECK_STR_CONTAINS(
        out, "rank 0: rank 2 did not publish its binary version within dist.timeout_s=2 s");
    CHECK_STR_CONTAINS(
        out, "rank 1: rank 2 did not publish its binary version within dist.timeout_s=2 s");
}

/* Starts 2 workers by hand with another launcher's variable names. */
static void by_hand(const char *rank_v, const char *world_v, const char *local_v) {
    char exe[PATH_MAX];
    CHECK(th_self_exe(exe, sizeof exe) == 0);
    char port[16];
    snprintf(port, sizeof port, "%d", th_free_port());
    pid_t pids[2];
    for (int r = 0; r < 2; r++) {
        pids[r] = fork();
        if (pids[r] == 0) {
            char rs[8];
            snprintf(rs, sizeof rs, "%d", r);
            setenv(rank_v, rs, 1);
            setenv(world_v, "2", 1);
            setenv(local_v, rs, 1);
            setenv("MASTER_ADDR", "127.0.0.1", 1);
            setenv("MASTER_PORT", port, 1);
            setenv("SG_TEST_WORLD", "2", 1);
            execl(exe, exe, "coll", (char *)NULL);
            _exit(127);
        }
    }
    for (int r = 0; r < 2; r++) {
        int st = 0;
        waitpid(pids[r], &st, 0);
        CHECK_MSG(WIFEXITED(st) && WEXITSTATUS(st) == 0, "%s-launched rank %d: wait status %d",
                  rank_v, r, st);
    }
}
static void test_torchrun_variables_by_hand(void) { by_hand("RANK", "WORLD_SIZE", "LOCAL_RANK"); }
static void test_mpirun_variables(void) {
    by_hand("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK");
}
static void test_srun_variables(void) { by_hand("SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"); }

/* Two launchers as two "nodes" (--nnodes 2) with 2 workers each meet at
 * one rendezvous port: a world of 4 across launchers. */
static void test_two_nodes(void) {
    char exe[PATH_MAX];
    CHECK(th_self_exe(exe, sizeof exe) == 0);
    /* Both ports chosen free and passed: the default agent port (master + 1)
     * was once held by another test's connection, and node 1 then waited out
     * its whole timeout. A short --node-timeout-s keeps a failure quick. */
    int ports[2];
    CHECK(th_free_ports(2, ports) == 0);
    char port[16], agent[16];
    snprintf(port, sizeof port, "%d", ports[0]);
    snprintf(agent, sizeof agent, "%d", ports[1]);
    setenv("SG_TEST_WORLD", "4", 1);
    pid_t pids[2];
    for (int node = 0; node < 2; node++) {
        pids[node] = fork();
        if (pids[node] == 0) {
            char nr[4];
            snprintf(nr, sizeof nr, "%d", node);
            char *argv[] = {
                exe,   "--nnodes",         "2",         "--node-rank",   nr,   "--nproc-per-node",
                "2",   "--master-addr",    "127.0.0.1", "--master-port", port, "--agent-port",
                agent, "--node-timeout-s", "60",        "coll",          NULL};
            _exit(sg_launch(16, argv, exe));
        }
    }
    for (int node = 0; node < 2; node++) {
        int st = 0;
        waitpid(pids[node], &st, 0);
        CHECK_MSG(WIFEXITED(st) && WEXITSTATUS(st) == 0, "launcher of node %d: wait status %d",
                  node, st);
    }
}

static void test_world1_in_process(void) {
    sg_config cfg;
    config(&cfg);
    sg_backend *be = cpu();
    CHECK(be);
    sg_comm *c = sg_comm_create(&cfg, be);
    CHECK(c);
    CHECK_EQ_INT(sg_comm_world(c), 1);
    CHECK_EQ_INT(sg_comm_rank(c), 0);
    CHECK(strcmp(sg_comm_backend_name(c), "single") == 0);
    float *x = be->ops->alloc(be, 4 * sizeof *x), *y = be->ops->alloc(be, 4 * sizeof *y);
    for (int i = 0; i < 4; i++) x[i] = (float)i + 0.5f;
    CHECK(sg_comm_allreduce_f32(c, x, 4) == 0);
    CHECK(x[3] == 3.5f);
    CHECK(sg_comm_allgather_f32(c, x, y, 4) == 0);
    for (int i = 0; i < 4; i++) CHECK(y[i] == (float)i + 0.5f);
    CHECK(sg_comm_barrier(c) == 0);
    CHECK(sg_comm_check_dataset(c, 99) == 0);
    be->ops->free(be, x);
    be->ops->free(be, y);
    sg_comm_destroy(c);
    sg_backend_destroy(be);
}

static void test_env_errors(void) {
    sg_dist_env e;
    setenv("RANK", "2", 1);
    setenv("WORLD_SIZE", "2", 1);
    /* a bad launch environment is the user's configuration: SG_ERR_CONFIG */
    CHECK_EQ_INT(sg_dist_env_read(&e), SG_ERR_CONFIG); /* rank >= world */
    setenv("WORLD_SIZE", "x", 1);
    CHECK_EQ_INT(sg_dist_env_read(&e), SG_ERR_CONFIG);
    unsetenv("WORLD_SIZE");
    CHECK_EQ_INT(sg_dist_env_read(&e), SG_ERR_CONFIG); /* RANK without WORLD_SIZE */
    unsetenv("RANK");
    setenv("SLURM_PROCID", "3", 1);
    setenv("SLURM_NTASKS", "4", 1);
    setenv("SLURM_LOCALID", "1", 1);
    CHECK_EQ_INT(sg_dist_env_read(&e), SG_OK);
    CHECK_EQ_INT(e.rank, 3);
    CHECK_EQ_INT(e.world, 4);
    CHECK_EQ_INT(e.local_rank, 1);
    CHECK(strcmp(e.source, "slurm") == 0);
    /* torchrun's agent holds MASTER_PORT: the store takes the next one */
    setenv("RANK", "1", 1);
    setenv("WORLD_SIZE", "2", 1);
    setenv("MASTER_PORT", "29400", 1);
    setenv("TORCHELASTIC_USE_AGENT_STORE", "True", 1);
    CHECK_EQ_INT(sg_dist_env_read(&e), SG_OK);
    CHECK_EQ_INT(e.master_port, 29401);
    CHECK(strcmp(e.source, "torchrun") == 0);
    unsetenv("TORCHELASTIC_USE_AGENT_STORE");
    CHECK_EQ_INT(sg_dist_env_read(&e), SG_OK);
    CHECK_EQ_INT(e.master_port, 29400);
    unsetenv("RANK");
    unsetenv("WORLD_SIZE");
    unsetenv("MASTER_PORT");
    unsetenv("SLURM_PROCID");
    unsetenv("SLURM_NTASKS");
    unsetenv("SLURM_LOCALID");
    CHECK_EQ_INT(sg_dist_env_read(&e), SG_OK);
    CHECK_EQ_INT(e.world, 1);
    CHECK(strcmp(e.source, "none") == 0);
}

int main(int argc, char **argv) {
    if (getenv("RANK") || getenv("OMPI_COMM_WORLD_RANK") || getenv("SLURM_PROCID")) {
        const char *mode = argc > 1 ? argv[1] : "";
        if (!strcmp(mode, "coll")) return worker_coll();
        if (!strcmp(mode, "cfgmismatch")) return worker_cfg_mismatch();
        if (!strcmp(mode, "dsmismatch")) return worker_dataset_mismatch();
        if (!strcmp(mode, "diverge")) return worker_diverge();
        fprintf(stderr, "unknown worker mode '%s'\n", mode);
        return 2;
    }
    TEST_RUN(test_world1_in_process);
    TEST_RUN(test_env_errors);
    TEST_RUN(test_world2);
    TEST_RUN(test_world3);
    TEST_RUN(test_world4);
    TEST_RUN(test_world3_gloo_only);
    TEST_RUN(test_config_mismatch_named);
    TEST_RUN(test_dataset_mismatch_named);
    TEST_RUN(test_diverged_ranks_named);
    TEST_RUN(test_missing_rank_named);
    TEST_RUN(test_torchrun_variables_by_hand);
    TEST_RUN(test_mpirun_variables);
    TEST_RUN(test_srun_variables);
    TEST_RUN(test_two_nodes);
    return TEST_EXIT();
}
