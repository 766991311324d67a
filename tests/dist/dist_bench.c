/* tests/dist/dist_bench.c - measures the communicator over Gloo on this
 * machine (not a test: nothing is asserted). Run it as
 *   dist_bench [--nproc-per-node N]      (default 2)
 * Reports, per rank count: latency of small all-reduces (the SyncBN
 * pattern: 2C floats), of the SyncBN forward all-gather, of a barrier, and
 * the bandwidth of 25 MiB all-reduces (a DDP bucket). */
#include "core/log.h"
#include "dist/comm.h"
#include "dist_harness.h"

static int worker(void) {
    sg_config cfg;
    sg_config_defaults(&cfg);
    cfg.dist.timeout_s = 60;
    snprintf(cfg.dist.backend, sizeof cfg.dist.backend, "gloo");
    sg_backend_opts o = {.threads = 1};
    sg_backend *be = sg_backend_create("cpu", &o);
    sg_comm *c = sg_comm_create(&cfg, be);
    if (!c) return 1;
    int r = sg_comm_rank(c), w = sg_comm_world(c);
    float *small = be->ops->alloc(be, 512 * sizeof(float));
    float *gath = be->ops->alloc(be, (size_t)w * 512 * sizeof(float));
    size_t big_n = 25u << 18; /* 25 MiB of floats */
    float *big = be->ops->alloc(be, big_n * sizeof(float));
    double t;
    int n_small = 2000, n_big = 10;
    for (int i = 0; i < 50; i++) sg_comm_allreduce_f32(c, small, 128);
    sg_comm_barrier(c);
    double ar = 0;
    for (int pass = 0; pass < 2; pass++) { /* the first pass also warms up */
        t = th_now();
        for (int i = 0; i < n_small; i++)
            if (sg_comm_allreduce_f32(c, small, 128)) return 1;
        ar = (th_now() - t) / n_small;
    }
    t = th_now();
    for (int i = 0; i < n_small; i++)
        if (sg_comm_allgather_f32(c, small, gath, 128)) return 1;
    double ag = (th_now() - t) / n_small;
    t = th_now();
    for (int i = 0; i < n_small; i++)
        if (sg_comm_barrier(c)) return 1;
    double ba = (th_now() - t) / n_small;
    sg_comm_allreduce_f32(c, big, big_n);
    t = th_now();
    for (int i = 0; i < n_big; i++)
        if (sg_comm_allreduce_f32(c, big, big_n)) return 1;
    double bw = (th_now() - t) / n_big;
    if (r == 0)
        printf(
            "world %d: all-reduce 128 floats %.1f us, all-gather 128 floats %.1f us, barrier %.1f us, "
            "all-reduce 25 MiB %.1f ms (%.2f GB/s algorithm bandwidth)\n",
            w, ar * 1e6, ag * 1e6, ba * 1e6, bw * 1e3, 25.0 * 1048576 / bw / 1e9);
    sg_comm_barrier(c);
    sg_comm_destroy(c);
    return 0;
}

int main(int argc, char **argv) {
    if (getenv("RANK")) return worker();
    const char *np = argc > 2 && !strcmp(argv[1], "--nproc-per-node") ? argv[2] : "2";
    const char *args[] = {"--nproc-per-node", np, NULL};
    char *out = NULL;
    int rc = dh_launch(args, &out, NULL);
    free(out);
    return rc;
}
