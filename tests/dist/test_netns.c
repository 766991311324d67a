/* tests/dist/test_netns.c - multi-host runs over a real network stack: two
 * hosts as network namespaces joined by a veth pair (10.213.1.1 = node 0,
 * 10.213.1.2 = node 1), one rank each, MASTER_ADDR = node 0's namespace
 * address; a third namespace (10.213.2.2, routed through node 0) is a
 * stranger host. The test makes and removes the namespaces itself (also on
 * failure); without the right to (not root, no `ip netns`) it exits 77.
 * Traffic goes only between these namespaces.
 *
 *  - two_nodes: the 2-node run equals the 1-node 2-process run (losses in
 *    metrics.jsonl, every checkpoint tensor, bit for bit); Gloo listens on
 *    the MASTER_ADDR interface, not the hostname's (127.0.1.1 / 127.0.0.1)
 *    address, without GLOO_SOCKET_IFNAME;
 *  - stranger: the stranger host connects to every listening port of node 0
 *    (store, mesh, Gloo) over and over, sending garbage, while the job runs:
 *    the same results;
 *  - link_blip: node 1's link goes down for 3 s mid-training and comes back:
 *    the job finishes with the same final weights;
 *  - link_gone: node 1's link goes down for good (dist.timeout_s 10, grace
 *    3 s): both launchers exit non-zero within dist.timeout_s + grace (plus
 *    a margin), each naming the other side, and no process is left in either
 *    namespace;
 *  - sigstop_node: node 1's worker is stopped (SIGSTOP): both launchers
 *    end within dist.timeout_s + grace, node 1's through the launchers'
 *    rendezvous (dist/launch_agent.h), its stopped worker with it;
 *  - link_restart: the link goes down until the attempt fails, then comes
 *    back: with --max-restarts both nodes restart together and the final
 *    weights equal the uninterrupted run's;
 *  - impaired (`test_netns BIN impaired`, its own meson test): node 1's
 *    end of the link delays every packet it sends by 50 ms and drops 2% of
 *    them (`tc qdisc add dev <node 1's veth> root netem delay 50ms loss
 *    2%`): netem where the kernel has sch_netem, otherwise the user-space
 *    relay of tests/dist/netns_relay.h, through TUN devices that carry
 *    every packet between the two hosts (store, launchers' rendezvous,
 *    mesh, Gloo: whatever the port), the same impairment on node 1's
 *    packets. The job finishes with the unimpaired run's losses and
 *    weights, bit for bit. The loss is real packet loss: the kernels' TCP
 *    retransmits, so the programs never lose a byte, they only wait. The
 *    case says which impairment it used.
 * Each case prints what it measured (time to detect), the figures of
 * docs/FAILURES.md. */
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/log.h"
#include "tests/ckpt_diff.h"
#include "tests/dist/netns_relay.h"
#include "tests/helpers.h"
#include "tests/tiny_config.h"
#include "testutil.h"

static const char *g_bin;
static char g_dir[256];
static char g_ns[3][32];  /* node 0, node 1, stranger */
static char g_if[4][16];  /* veth ends: node0-node1 pair, node0-stranger pair */
static char g_tun[2][16]; /* the relay's TUN devices: in node 0, in node 1 */
static int g_made;        /* namespaces to remove at exit */

static void teardown_netns(void) {
    if (!g_made) return;
    for (int i = 0; i < 3; i++) {
        /* every process still inside, then the namespace (its veth ends go too) */
        th_sh("ip netns pids %s 2>/dev/null | xargs -r kill -9 2>/dev/null; "
              "ip netns del %s 2>/dev/null",
              g_ns[i], g_ns[i]);
    }
    g_made = 0;
}

static void on_fatal(int sig) {
    teardown_netns();
    signal(sig, SIG_DFL);
    raise(sig);
}

/* 0 made; 77 not permitted here; 1 failed after being permitted. */
static int setup_netns(void) {
    int id = (int)getpid() % 100000;
    for (int i = 0; i < 3; i++) snprintf(g_ns[i], sizeof g_ns[i], "sgt%d_%c", id, "abc"[i]);
    for (int i = 0; i < 4; i++) snprintf(g_if[i], sizeof g_if[i], "sg%d%c", id, "wxyz"[i]);
    for (int i = 0; i < 2; i++) /* "sg99999r1" at most: within IFNAMSIZ */
        snprintf(g_tun[i], sizeof g_tun[i], "sg%ur%c", (unsigned)id % 100000u, "01"[i]);
    if (th_sh("ip netns add %s 2>/dev/null", g_ns[0]) != 0) return 77;
    g_made = 1;
    atexit(teardown_netns);
    signal(SIGINT, on_fatal);
    signal(SIGTERM, on_fatal);
    signal(SIGABRT, on_fatal);
    const char *a = g_ns[0], *b = g_ns[1], *c = g_ns[2];
    if (th_sh("ip netns add %s && ip netns add %s", b, c) ||
        th_sh("ip link add %s type veth peer name %s && ip link set %s netns %s && ip link set %s "
              "netns %s",
              g_if[0], g_if[1], g_if[0], a, g_if[1], b) ||
        th_sh("ip link add %s type veth peer name %s && ip link set %s netns %s && ip link set %s "
              "netns %s",
              g_if[2], g_if[3], g_if[2], a, g_if[3], c) ||
        th_sh("ip -n %s link set lo up && ip -n %s link set lo up && ip -n %s link set lo up", a, b,
              c) ||
        th_sh("ip -n %s addr add 10.213.1.1/24 dev %s && ip -n %s link set %s up", a, g_if[0], a,
              g_if[0]) ||
        th_sh("ip -n %s addr add 10.213.1.2/24 dev %s && ip -n %s link set %s up", b, g_if[1], b,
              g_if[1]) ||
        th_sh("ip -n %s addr add 10.213.2.1/24 dev %s && ip -n %s link set %s up", a, g_if[2], a,
              g_if[2]) ||
        th_sh("ip -n %s addr add 10.213.2.2/24 dev %s && ip -n %s link set %s up && ip -n %s route "
              "add 10.213.1.0/24 via 10.213.2.1",
              c, g_if[3], c, g_if[3], c) ||
        th_sh("ip netns exec %s ping -c 1 -W 2 10.213.1.1 >/dev/null 2>&1 || "
              "ip netns exec %s bash -c 'exec 3<>/dev/tcp/10.213.1.1/9' 2>&1 | grep -q refused",
              b, b))
        return 1;
    return 0;
}

static int setup_data(void) {
    snprintf(g_dir, sizeof g_dir, "/tmp/sg_netns_XXXXXX");
    if (!mkdtemp(g_dir)) return -1;
    if (th_sh("%s synth --out %s/data --train 8 --val 2 --size 40x40 --seed 5 >/dev/null 2>&1",
              g_bin, g_dir))
        return -1;
    char path[512];
    snprintf(path, sizeof path, "%s/base.yaml", g_dir);
    /* the tiny network (tests/tiny_config.h) with what this test changes */
    const char *const sets[] = {"threads=1",
                                "data.crop_size=[32, 32]",
                                "data.scale_range=[0.75, 1.25]",
                                "data.prefetch=4",
                                "train.iters=16",
                                "train.lr=0.02",
                                "train.checkpoint_every=4",
                                "train.keep_checkpoints=5",
                                "eval.batch_size=1",
                                "dist.timeout_s=20"};
    return fx_write_config(path, g_dir, sets, (int)(sizeof sets / sizeof sets[0]));
}

/* Starts node `node`'s launcher inside its namespace (output to
 * DIR/run.node<N>.log); its pid. extra: more launcher/train options. */
static pid_t start_node(const char *run, int node, int port, const char *extra) {
    char logp[600];
    snprintf(logp, sizeof logp, "%s/%s.node%d.log", g_dir, run, node);
    char cmd[4096];
    snprintf(cmd, sizeof cmd,
             "exec ip netns exec %s env -u GLOO_SOCKET_IFNAME %s --nproc-per-node 1 --nnodes 2 "
             "--node-rank %d --master-addr 10.213.1.1 --master-port %d --kill-grace-s 3 train "
             "--config %s/base.yaml --set run_dir=%s/%s %s > %s 2>&1",
             g_ns[node], g_bin, node, port, g_dir, g_dir, run, extra ? extra : "", logp);
    pid_t pid = fork();
    if (pid == 0) {
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    return pid;
}

static char *node_log(const char *run, int node) {
    char name[256];
    snprintf(name, sizeof name, "%s.node%d", run, node);
    return th_read_log(g_dir, name);
}

/* Waits for both launchers (bound_s); their wait statuses and how long each
 * took from t0. SG_OK, or SG_ERR_RUNTIME if one was still running (killed). */
static sg_status wait_both(pid_t p0, pid_t p1, double t0, double bound_s, int st[2],
                           double took[2]) {
    pid_t p[2] = {p0, p1};
    int done[2] = {0, 0};
    sg_status rc = SG_OK;
    while (!done[0] || !done[1]) {
        for (int i = 0; i < 2; i++)
            if (!done[i] && waitpid(p[i], &st[i], WNOHANG) == p[i]) {
                done[i] = 1;
                took[i] = th_now() - t0;
            }
        if (th_now() - t0 > bound_s) {
            for (int i = 0; i < 2; i++)
                if (!done[i]) {
                    fprintf(stderr, "  node %d's launcher still runs after %.0f s: killed\n", i,
                            bound_s);
                    kill(p[i], SIGKILL);
                    waitpid(p[i], &st[i], 0);
                    done[i] = 1;
                    took[i] = -1;
                    rc = SG_ERR_RUNTIME;
                }
        }
        usleep(20 * 1000);
    }
    return rc;
}

/* The loss fields of run's metrics.jsonl, one line per iteration in order
 * (the timings and the run id left out; an iteration done again after a
 * restart counts once, its last time), malloc'd. */
static char *losses(const char *run) {
    char p[600];
    snprintf(p, sizeof p, "%s/%s/metrics.jsonl", g_dir, run);
    FILE *f = fopen(p, "r");
    if (!f) return NULL;
    enum { MAXIT = 64 };
    static char per[MAXIT][256];
    memset(per, 0, sizeof per);
    char line[4096];
    while (fgets(line, sizeof line, f)) {
        const char *it = strstr(line, "\"iter\":");
        const char *a = strstr(line, "\"loss\":"), *b = a ? strstr(a, ",\"lr\":") : NULL;
        int i = it ? atoi(it + 7) : -1;
        if (!a || !b || i < 0 || i >= MAXIT) continue;
        snprintf(per[i], sizeof per[i], "%.*s", (int)(b - a), a);
    }
    fclose(f);
    char *out = calloc(1, MAXIT * 260);
    size_t len = 0;
    for (int i = 0; out && i < MAXIT; i++)
        if (per[i][0]) len += (size_t)sprintf(out + len, "%d %s\n", i, per[i]);
    return out;
}

/* The run equals the 1-node 2-process reference: losses and weights. */
static void check_same_as_ref(const char *run) {
    char *a = losses("ref"), *b = losses(run);
    CHECK(a && b && a[0]);
    CHECK_MSG(a && b && strcmp(a, b) == 0, "losses differ:\nref:\n%s\n%s:\n%s", a ? a : "", run,
              b ? b : "");
    free(a);
    free(b);
    double d = th_ckpt_diff(g_dir, "ref", run, "iter_00000016.safetensors");
    CHECK_MSG(d == 0.0, "%s's final checkpoint differs from the 1-node run's by %.3g", run, d);
}

static int g_port = 29611;

static void test_reference(void) { CHECK_EQ_INT(th_train_run(g_bin, g_dir, "ref", 2, ""), 0); }

static double g_two_s = -1; /* the unimpaired 2-node run's time */

static void test_two_nodes(void) {
    int port = g_port;
    g_port += 2; /* the workers' store and the launchers' rendezvous */
    double t0 = th_now();
    pid_t p0 = start_node("two", 0, port, NULL), p1 = start_node("two", 1, port, NULL);
    int st[2];
    double took[2];
    CHECK(wait_both(p0, p1, t0, 180, st, took) == SG_OK);
    for (int i = 0; i < 2; i++)
        CHECK_MSG(WIFEXITED(st[i]) && WEXITSTATUS(st[i]) == 0, "node %d: wait status %d:\n%s", i,
                  st[i], node_log("two", i));
    fprintf(stderr, "  2 nodes: %.1f s\n", took[0]);
    g_two_s = took[0];
    CHECK_STR_CONTAINS(node_log("two", 1), "10.213.1.1");
    check_same_as_ref("two");
}

static void test_stranger(void) {
    int port = g_port;
    g_port += 2; /* the workers' store and the launchers' rendezvous */
    double t0 = th_now();
    pid_t p0 = start_node("stranger", 0, port, NULL), p1 = start_node("stranger", 1, port, NULL);
    /* the stranger: every listening TCP port of node 0, garbage and
     * half-open connections, until the job ends (bounded: 400 rounds) */
    char cmd[2048];
    snprintf(cmd, sizeof cmd,
             "for i in $(seq 1 400); do "
             "for p in $(ip netns exec %s ss -Htln 2>/dev/null | awk '{print $4}' | "
             "sed -n 's/^10\\.213\\.1\\.1://p'); do "
             "ip netns exec %s timeout 1 bash -c \"exec 3<>/dev/tcp/10.213.1.1/$p; "
             "printf 'GET / HTTP/1.0\\r\\n\\r\\n\\x01\\x02garbage' >&3\" 2>/dev/null; done; "
             "sleep 0.05; done",
             g_ns[0], g_ns[2]);
    pid_t s = fork();
    if (s == 0) {
        setpgid(0, 0);
        execl("/bin/bash", "bash", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    int st[2];
    double took[2];
    CHECK(wait_both(p0, p1, t0, 180, st, took) == SG_OK);
    kill(-s, SIGKILL);
    waitpid(s, NULL, 0);
    for (int i = 0; i < 2; i++)
        CHECK_MSG(WIFEXITED(st[i]) && WEXITSTATUS(st[i]) == 0, "node %d: wait status %d:\n%s", i,
                  st[i], node_log("stranger", i));
    char *log0 = node_log("stranger", 0);
    CHECK_MSG(strstr(log0, "10.213.2.2") != NULL,
              "node 0 never logged the stranger's connections:\n%s", log0);
    check_same_as_ref("stranger");
}

/* The first step line of run's metrics.jsonl exists (the job is training). */
static int stepping(const char *run, int min_iter) {
    char p[600];
    snprintf(p, sizeof p, "%s/%s/metrics.jsonl", g_dir, run);
    FILE *f = fopen(p, "r");
    if (!f) return 0;
    char line[4096];
    int ok = 0;
    while (!ok && fgets(line, sizeof line, f)) {
        const char *it = strstr(line, "\"iter\":");
        ok = it && atoi(it + 7) >= min_iter && strstr(line, "\"loss\":");
    }
    fclose(f);
    return ok;
}

static void test_link_blip(void) {
    int port = g_port;
    g_port += 2; /* the workers' store and the launchers' rendezvous */
    double t0 = th_now();
    pid_t p0 = start_node("blip", 0, port, NULL), p1 = start_node("blip", 1, port, NULL);
    while (!stepping("blip", 3) && th_now() - t0 < 60) usleep(10 * 1000);
    CHECK(stepping("blip", 3));
    double tb = th_now();
    th_sh("ip -n %s link set %s down; sleep 3; ip -n %s link set %s up", g_ns[1], g_if[1], g_ns[1],
          g_if[1]);
    int st[2];
    double took[2];
    CHECK(wait_both(p0, p1, t0, 180, st, took) == SG_OK);
    for (int i = 0; i < 2; i++)
        CHECK_MSG(WIFEXITED(st[i]) && WEXITSTATUS(st[i]) == 0, "node %d: wait status %d:\n%s", i,
                  st[i], node_log("blip", i));
    fprintf(stderr, "  link down 3 s: job finished %.1f s after the blip began\n",
            took[0] - (tb - t0));
    check_same_as_ref("blip");
}

static void test_link_gone(void) {
    int port = g_port;
    g_port += 2; /* the workers' store and the launchers' rendezvous */
    double t0 = th_now();
    const char *sets = "--set dist.timeout_s=10";
    pid_t p0 = start_node("gone", 0, port, sets), p1 = start_node("gone", 1, port, sets);
    while (!stepping("gone", 3) && th_now() - t0 < 60) usleep(10 * 1000);
    CHECK(stepping("gone", 3));
    th_sh("ip -n %s link set %s down", g_ns[1], g_if[1]);
    double td = th_now();
    int st[2];
    double took[2];
    sg_status waited = wait_both(p0, p1, td, 120, st, took);
    th_sh("ip -n %s link set %s up", g_ns[1], g_if[1]); /* before any CHECK can return */
    CHECK(waited == SG_OK);
    for (int i = 0; i < 2; i++) {
        char *log = node_log("gone", i);
        fprintf(stderr, "  link gone: node %d's launcher exited %.1f s after (wait status %d)\n", i,
                took[i], st[i]);
        CHECK_MSG(WIFEXITED(st[i]) && WEXITSTATUS(st[i]) != 0, "node %d: wait status %d:\n%s", i,
                  st[i], log);
        /* dist.timeout_s + the kill grace + start-up slack on a loaded machine */
        CHECK_MSG(took[i] >= 0 && took[i] < 10 + 3 + 15, "node %d took %.1f s", i, took[i]);
        CHECK_STR_CONTAINS(log, i == 0 ? "rank 1" : "rank 0");
        char out[256] = "";
        FILE *p = NULL;
        char cmd[128];
        snprintf(cmd, sizeof cmd, "ip netns pids %s", g_ns[i]);
        p = popen(cmd, "r");
        size_t n = p ? fread(out, 1, sizeof out - 1, p) : 0;
        if (p) pclose(p);
        out[n] = 0;
        CHECK_MSG(n == 0, "processes left in node %d's namespace: %s", i, out);
    }
}

/* The pid of the process with RANK=rank inside namespace ns, or -1. */
static pid_t pid_in_ns(const char *ns, int rank) {
    char cmd[128];
    snprintf(cmd, sizeof cmd, "ip netns pids %s", ns);
    FILE *p = popen(cmd, "r");
    pid_t found = -1;
    int pid;
    while (p && fscanf(p, "%d", &pid) == 1)
        if (found < 0 && th_env_rank(pid) == rank) found = pid;
    if (p) pclose(p);
    return found;
}

static int ns_empty(int node) {
    char cmd[128], out[256];
    snprintf(cmd, sizeof cmd, "ip netns pids %s", g_ns[node]);
    FILE *p = popen(cmd, "r");
    size_t n = p ? fread(out, 1, sizeof out - 1, p) : 0;
    if (p) pclose(p);
    return n == 0;
}

/* Node 1's worker is stopped (SIGSTOP): node 0's rank finds it hung within
 * dist.timeout_s and ends; node 1's launcher learns it through the
 * launchers' rendezvous and ends its stopped worker (SIGTERM, SIGCONT,
 * SIGKILL), instead of waiting for it forever. */
static void test_sigstop_node(void) {
    int port = g_port;
    g_port += 2; /* the workers' store and the launchers' rendezvous */
    double t0 = th_now();
    const char *sets = "--set dist.timeout_s=10 --node-timeout-s 20";
    pid_t p0 = start_node("stopped", 0, port, sets), p1 = start_node("stopped", 1, port, sets);
    while (!stepping("stopped", 3) && th_now() - t0 < 60) usleep(10 * 1000);
    CHECK(stepping("stopped", 3));
    pid_t w = pid_in_ns(g_ns[1], 1);
    CHECK(w > 0);
    kill(w, SIGSTOP);
    double ts = th_now();
    int st[2];
    double took[2];
    CHECK(wait_both(p0, p1, ts, 120, st, took) == SG_OK);
    for (int i = 0; i < 2; i++) {
        char *log = node_log("stopped", i);
        fprintf(stderr, "  SIGSTOP: node %d's launcher exited %.1f s after (wait status %d)\n", i,
                took[i], st[i]);
        CHECK_MSG(WIFEXITED(st[i]) && WEXITSTATUS(st[i]) != 0, "node %d: wait status %d:\n%s", i,
                  st[i], log);
        CHECK_MSG(took[i] >= 0 && took[i] < 10 + 3 + 15, "node %d took %.1f s", i, took[i]);
        CHECK_MSG(ns_empty(i), "processes left in node %d's namespace", i);
    }
    CHECK_STR_CONTAINS(node_log("stopped", 0), "rank 1");
    CHECK_STR_CONTAINS(node_log("stopped", 1), "the job failed on another node");
    kill(w, SIGKILL); /* gone already; never left stopped */
}

/* The link goes down long enough for the job to fail (dist.timeout_s 10),
 * then comes back: with --max-restarts the launchers restart together from
 * the last checkpoint, and the final weights equal the uninterrupted run's. */
static void test_link_restart(void) {
    int port = g_port;
    g_port += 2; /* the workers' store and the launchers' rendezvous */
    double t0 = th_now();
    const char *sets = "--set dist.timeout_s=10 --max-restarts 2 --restart-backoff-s 1 "
                       "--node-timeout-s 90";
    pid_t p0 = start_node("relink", 0, port, sets), p1 = start_node("relink", 1, port, sets);
    while (!stepping("relink", 3) && th_now() - t0 < 60) usleep(10 * 1000);
    CHECK(stepping("relink", 3));
    th_sh("ip -n %s link set %s down", g_ns[1], g_if[1]);
    double td = th_now();
    /* down until node 0's worker found the fault and ended, then back */
    while (!strstr(node_log("relink", 0), "launcher: worker rank 0 (pid") && th_now() - td < 60)
        usleep(50 * 1000);
    double detect = th_now() - td;
    th_sh("ip -n %s link set %s up", g_ns[1], g_if[1]);
    int st[2];
    double took[2];
    CHECK(wait_both(p0, p1, td, 240, st, took) == SG_OK);
    fprintf(stderr,
            "  link down: node 0's worker ended %.1f s after; job done %.1f s after the "
            "link went down\n",
            detect, took[0]);
    for (int i = 0; i < 2; i++) {
        char *log = node_log("relink", i);
        CHECK_MSG(WIFEXITED(st[i]) && WEXITSTATUS(st[i]) == 0, "node %d: wait status %d:\n%s", i,
                  st[i], log);
        CHECK_STR_CONTAINS(log, "launcher: restarting the workers (restart 1 of 2");
    }
    check_same_as_ref("relink");
}

/* ---- the impaired link: node 1's packets delayed 50 ms, 2% lost ---- */

enum { IMPAIR_NONE, IMPAIR_NETEM, IMPAIR_RELAY };
static nr_relay g_relay;

/* A counter of node's veth end (statistics/tx_packets, ...), or -1. */
static long long veth_count(int node, const char *what) {
    char cmd[256];
    snprintf(cmd, sizeof cmd, "ip netns exec %s cat /sys/class/net/%s/statistics/%s", g_ns[node],
             g_if[node], what);
    FILE *p = popen(cmd, "r");
    long long v = -1;
    if (p) {
        if (fscanf(p, "%lld", &v) != 1) v = -1;
        pclose(p);
    }
    return v;
}

/* Milliseconds for node 1 to learn that node 0's port 9 is closed (SYN,
 * then RST: one round trip, plus starting a shell), or -1. */
static double probe_rtt_ms(void) {
    double t = th_now();
    int rc = th_sh(
        "ip netns exec %s bash -c 'exec 3<>/dev/tcp/10.213.1.1/9' 2>&1 | grep -q refused", g_ns[1]);
    return rc == 0 ? (th_now() - t) * 1000 : -1;
}

/* Turns the impairment on: netem on node 1's veth end where the kernel
 * has it, else the relay with its routes. IMPAIR_NETEM or IMPAIR_RELAY; or
 * IMPAIR_NONE, the reason printed, with nothing left on. */
static int impair_on(void) {
    if (th_sh("ip netns exec %s tc qdisc add dev %s root netem delay 50ms loss 2%% 2>&1", g_ns[1],
              g_if[1]) == 0) {
        fprintf(stderr, "  impairment: tc netem on node 1's end of the link (its packets delayed "
                        "50 ms, 2%% lost)\n");
        return IMPAIR_NETEM;
    }
    /* direction [1] is node 1 -> node 0: node 1's outgoing packets */
    nr_opts o = {.delay_ms = {0, 50}, .loss = {0, 0.02}, .seed = 0x5e67a1, .max_s = 300};
    char err[256];
    if (nr_start(&g_relay, g_ns[0], g_tun[0], g_ns[1], g_tun[1], &o, err, sizeof err) != 0) {
        fprintf(stderr, "  the relay did not start: %s\n", err);
        return IMPAIR_NONE;
    }
    /* no IPv6 on the devices: no chatter of their own (written to a device
     * not up yet, it would count as a failed write); then /32 routes, more
     * specific than the veth's /24: the relay is the path between the two
     * hosts' addresses, both ways, every port */
    if (th_sh("ip netns exec %s sysctl -qw net.ipv6.conf.%s.disable_ipv6=1 && "
              "ip netns exec %s sysctl -qw net.ipv6.conf.%s.disable_ipv6=1",
              g_ns[0], g_tun[0], g_ns[1], g_tun[1]) ||
        th_sh("ip -n %s link set %s up && ip -n %s route add 10.213.1.2/32 dev %s src 10.213.1.1",
              g_ns[0], g_tun[0], g_ns[0], g_tun[0]) ||
        th_sh("ip -n %s link set %s up && ip -n %s route add 10.213.1.1/32 dev %s src 10.213.1.2",
              g_ns[1], g_tun[1], g_ns[1], g_tun[1]) ||
        th_sh("ip -n %s route get 10.213.1.2 | grep -q 'dev %s'", g_ns[0], g_tun[0]) ||
        th_sh("ip -n %s route get 10.213.1.1 | grep -q 'dev %s'", g_ns[1], g_tun[1])) {
        nr_stats st;
        nr_stop(&g_relay, &st);
        fprintf(stderr, "  the routes through the relay could not be set\n");
        return IMPAIR_NONE;
    }
    fprintf(stderr,
            "  impairment: user-space relay through TUN devices %s (node 0) and %s (node 1), "
            "because this kernel refused `tc qdisc add ... netem` (no sch_netem); node 1's "
            "packets delayed 50 ms, 2%% lost\n",
            g_tun[0], g_tun[1]);
    return IMPAIR_RELAY;
}

/* Turns it off again (the relay's devices and routes go with it); for the
 * relay, its counters into *st. 0, or -1 when the relay did not report. */
static int impair_off(int mode, nr_stats *st) {
    memset(st, 0, sizeof *st);
    if (mode == IMPAIR_NETEM) {
        th_sh("ip netns exec %s tc qdisc del dev %s root", g_ns[1], g_if[1]);
        return 0;
    }
    return mode == IMPAIR_RELAY ? nr_stop(&g_relay, st) : 0;
}

/* The job over the impaired link: finishes, with the reference's results;
 * *port_out: its MASTER_PORT. */
static void impaired_job(double *took_s, int *port_out) {
    int port = g_port;
    *port_out = port;
    g_port += 2; /* the workers' store and the launchers' rendezvous */
    double t0 = th_now();
    pid_t p0 = start_node("impaired", 0, port, NULL), p1 = start_node("impaired", 1, port, NULL);
    int st[2];
    double took[2];
    CHECK(wait_both(p0, p1, t0, 240, st, took) == SG_OK);
    for (int i = 0; i < 2; i++)
        CHECK_MSG(WIFEXITED(st[i]) && WEXITSTATUS(st[i]) == 0, "node %d: wait status %d:\n%s", i,
                  st[i], node_log("impaired", i));
    *took_s = took[0] > took[1] ? took[0] : took[1];
    check_same_as_ref("impaired");
}

static void test_impaired(void) {
    double rtt0 = probe_rtt_ms();
    long long tx0 = veth_count(1, "tx_packets");
    int mode = impair_on();
    CHECK_MSG(mode != IMPAIR_NONE, "the link could not be impaired (see above)");
    double rtt = probe_rtt_ms();
    double took = -1;
    int port = -1;
    /* 50 ms at least: else the impairment is not on the path */
    if (rtt >= 50) impaired_job(&took, &port);
    long long tx1 = veth_count(1, "tx_packets");
    nr_stats st;
    int reported = impair_off(mode, &st);
    fprintf(stderr,
            "  round trip (SYN to RST, with a shell's start): %.0f ms unimpaired, %.0f ms "
            "impaired\n",
            rtt0, rtt);
    CHECK_MSG(rtt >= 50, "a round trip over the impaired link took %.0f ms, under 50 ms", rtt);
    if (took >= 0)
        fprintf(stderr, "  impaired: the job took %.1f s (unimpaired 2 nodes: %.1f s, x%.1f)\n",
                took, g_two_s, g_two_s > 0 ? took / g_two_s : 0);
    if (mode != IMPAIR_RELAY) return;
    static const char *dir[2] = {"node 0 -> node 1", "node 1 -> node 0"};
    for (int d = 0; d < 2; d++)
        fprintf(stderr,
                "  relay %s: %llu packets (%llu bytes), %llu lost (%.2f%%), %llu over the "
                "queue, %llu delivered, %llu failed writes\n",
                dir[d], (unsigned long long)st.packets[d], (unsigned long long)st.bytes[d],
                (unsigned long long)st.lost[d],
                st.packets[d] ? 100.0 * (double)st.lost[d] / (double)st.packets[d] : 0,
                (unsigned long long)st.overflow[d], (unsigned long long)st.delivered[d],
                (unsigned long long)st.write_err[d]);
    for (int d = 0; d < 2; d++) {
        char list[NR_PORTS * 8] = "";
        for (int i = 0, len = 0; i < st.n_ports[d]; i++)
            len += snprintf(list + len, sizeof list - (size_t)len, " %u", st.ports[d][i]);
        fprintf(stderr, "  relay %s: %llu connections opened, to ports%s\n", dir[d],
                (unsigned long long)st.syns[d], st.n_ports[d] ? list : " (none)");
    }
    fprintf(stderr,
            "  relay: a packet left at most %.1f ms after its due time; node 1's veth "
            "sent %lld packets meanwhile\n",
            st.max_late_ms, tx1 - tx0);
    CHECK_MSG(reported == 0, "the relay did not report its counters (it ran past 300 s?)");
    /* the relay carried the job both ways, and lost node 1's packets only */
    for (int d = 0; d < 2; d++) {
        CHECK_MSG(st.packets[d] > 1000, "the relay saw only %llu packets %s",
                  (unsigned long long)st.packets[d], dir[d]);
        CHECK_MSG(st.write_err[d] == 0, "%llu writes %s failed, the last: %s",
                  (unsigned long long)st.write_err[d], dir[d], strerror(st.last_errno[d]));
    }
    CHECK_MSG(st.lost[0] == 0 && st.lost[1] > 0, "lost %llu packets %s, %llu %s",
              (unsigned long long)st.lost[0], dir[0], (unsigned long long)st.lost[1], dir[1]);
    /* node 1 reached the workers' store (MASTER_PORT), the launchers'
     * rendezvous (MASTER_PORT + 1) and the ports node 0 published (mesh,
     * Gloo) through the relay */
    int store = 0, agent = 0;
    for (int i = 0; i < st.n_ports[1]; i++) {
        store |= st.ports[1][i] == port;
        agent |= st.ports[1][i] == port + 1;
    }
    CHECK_MSG(store && agent && st.n_ports[1] >= 3,
              "node 1's connections through the relay: store %d, rendezvous %d, %d ports", store,
              agent, st.n_ports[1]);
    /* the relay was the only path: the veth carried next to nothing (the
     * neighbour and IPv6 chatter of an idle link) */
    CHECK_MSG(tx0 >= 0 && tx1 >= 0 && tx1 - tx0 < 100,
              "node 1's veth sent %lld packets while the relay carried the job", tx1 - tx0);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: test_netns PATH-TO-segtrain [impaired]\n");
        return 2;
    }
    g_bin = argv[1];
    int impaired = argc > 2 && strcmp(argv[2], "impaired") == 0;
    sg_log_set_level(SG_LOG_WARN);
    if (geteuid() != 0) {
        fprintf(stderr, "SKIP: network namespaces need root\n");
        return 77;
    }
    int ns = setup_netns();
    if (ns == 77) {
        fprintf(stderr, "SKIP: `ip netns add` is not permitted here\n");
        return 77;
    }
    if (ns != 0) {
        fprintf(stderr, "setting up the namespaces failed\n");
        teardown_netns();
        return 1;
    }
    if (setup_data()) {
        fprintf(stderr, "fixture setup failed in %s\n", g_dir);
        return 1;
    }
    /* several nodes share one job token (the launcher refuses to invent one) */
    setenv("SEGTRAIN_JOB_TOKEN", "0123456789abcdef0123456789abcdef", 1);
    TEST_RUN(test_reference);
    TEST_RUN(test_two_nodes);
    if (impaired) {
        TEST_RUN(test_impaired);
    } else {
        TEST_RUN(test_stranger);
        TEST_RUN(test_link_blip);
        TEST_RUN(test_link_gone);
        TEST_RUN(test_sigstop_node);
        TEST_RUN(test_link_restart);
    }
    teardown_netns();
    int rc = TEST_EXIT();
    if (!rc) th_sh("rm -rf %s", g_dir);
    else fprintf(stderr, "kept %s for inspection\n", g_dir);
    return rc;
}
