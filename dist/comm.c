/* dist/comm.c - the communicator (dist/comm.h): environment, store, start-up
 * agreement, the choice of transport, routing the training thread's small
 * collectives to the direct mesh (dist/mesh.h) and the rest to the transport,
 * staging between device and host memory, and naming the failed rank when a
 * collective fails. Owns the store handle, the heartbeat thread (via the
 * store), the transport and the mesh. */
#include "dist/comm.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/log.h"
#include "core/util.h"
#include "dist/comm_internal.h"
#include "dist/fd_limit.h"
#include "dist/job_token.h"
#include "dist/launch_report.h"
#include "dist/mesh.h"
#include "dist/sock_abort.h"

struct sg_comm {
    sg_dist_env env;
    sg_backend *be;
    sg_store *store;  /* NULL in a world of 1 */
    sg_transport *tr; /* NULL in a world of 1 */
    sg_mesh *mesh;    /* every collective of SG_CH_MAIN (host transports) */
    void *mesh_buf;   /* host scratch for mesh all-reduces */
    size_t mesh_buf_bytes;
    int timeout_s;
    double probe_s;      /* liveness probe after a failure */
    double op_timeout_s; /* per collective: timeout_s - probe_s, so the
                               failure is reported within dist.timeout_s */
    /* the caller's signal flag (NULL: none): a stop cuts the diagnosis of
     * a failed collective short, so a rank the launcher is stopping exits
     * at once and closes its connections (its peers then fail at once too)
     * instead of keeping them open for the probe; the launcher, which sent
     * the stop, names the failed rank */
    const volatile sig_atomic_t *stop;
    atomic_int broken; /* set by either channel's thread */
    atomic_int broken_reported;
    pthread_mutex_t report_mu; /* one diagnosis at a time */
    int diagnosed;
    int agree_seq;
    double wait_s;
    /* per-channel staging buffers (host or device, whichever the transport
     * is not), grown on demand */
    void *stage[SG_CH_COUNT];
    size_t stage_bytes[SG_CH_COUNT];
    int stage_on_device[SG_CH_COUNT];
    /* device scratch for callers (SyncBN packing), by slot */
    void *scratch[2];
    size_t scratch_bytes[2];
    /* SyncBN counters, the enqueued collectives not yet flushed on
     * SG_CH_MAIN, and every rank's batch size (sg_comm_set_batch_sizes) */
    double syncbn_s;
    long syncbn_calls, syncbn_queued, flushes;
    int pending_main;
    int64_t *batch_n;
    int has_batch;
};

static const char *op_names[] = {"all-reduce", "broadcast", "all-gather", "barrier"};
enum { OP_ALLREDUCE = 0, OP_BROADCAST, OP_ALLGATHER, OP_BARRIER };

size_t sg_dtype_size(int dtype) { return dtype == SG_CDT_F32 ? 4 : 8; }

int sg_comm_rank(const sg_comm *c) { return c->env.rank; }
int sg_comm_world(const sg_comm *c) { return c->env.world; }
int sg_comm_local_rank(const sg_comm *c) { return c->env.local_rank; }
int sg_comm_local_world(const sg_comm *c) { return c->env.local_world; }
int sg_comm_restart_count(const sg_comm *c) { return c->env.restart_count; }
const char *sg_comm_backend_name(const sg_comm *c) { return c->tr ? c->tr->name : "single"; }
sg_backend *sg_comm_device_backend(const sg_comm *c) { return c->be; }
int sg_comm_timeout_s(const sg_comm *c) { return c->timeout_s; }
double sg_comm_wait_seconds(const sg_comm *c) { return c->wait_s; }
sg_store *sg_comm_store(sg_comm *c) { return c->store; }
int sg_comm_broken(const sg_comm *c) { return c->broken; }

void *sg_comm_scratch(sg_comm *c, int slot, size_t bytes) {
    if (c->scratch_bytes[slot] < bytes) {
        if (c->scratch[slot]) c->be->ops->free(c->be, c->scratch[slot]);
        c->scratch[slot] = c->be->ops->alloc(c->be, bytes);
        c->scratch_bytes[slot] = bytes;
    }
    return c->scratch[slot];
}

/* Logs a failed collective, naming the rank(s) the store finds dead or hung. */
static void report_failure(sg_comm *c, const char *what, const char *err, int via_mesh) {
    char diag[1024] = "";
    pthread_mutex_lock(&c->report_mu);
    int first = !c->diagnosed;
    c->diagnosed = 1;
    pthread_mutex_unlock(&c->report_mu);
    if (!first) { /* the other channel's thread already names the rank */
        SG_ERROR("rank %d: %s failed too: %s", c->env.rank, what, err);
        return;
    }
    if (c->store) {
        int *state = calloc((size_t)c->env.world, sizeof *state);
        SG_CHECK(state, "out of memory");
        sg_store_diagnose_stoppable(c->store, c->probe_s, c->stop, diag, sizeof diag, state);
        /* under segtrain's launcher: its summary names the culprit, not us */
        for (int r = 0; r < c->env.world; r++)
            if (state[r] != SG_RANK_OK) sg_launch_report_culprit(c->env.rank, r, state[r]);
        free(state);
    }
    SG_ERROR("rank %d: %s failed (%s, dist.timeout_s=%d): %s. %s "
             "See that rank's log (<run_dir>/logs/rank<N>.log) for its own error.",
             c->env.rank, what, via_mesh ? "direct mesh" : sg_comm_backend_name(c), c->timeout_s,
             err, diag[0] ? diag : "No other rank was found dead or hung.");
}

/* SG_OK, or SG_ERR_RUNTIME once the communicator is broken (logged once). */
static sg_status check_usable(sg_comm *c, const char *what) {
    if (c->broken) {
        /* once: SyncBN hooks would otherwise repeat it for every layer */
        if (!c->broken_reported)
            SG_ERROR("rank %d: %s skipped: an earlier collective failed (see above)", c->env.rank,
                     what);
        c->broken_reported = 1;
        return SG_ERR_RUNTIME;
    }
    return SG_OK;
}

/* Staging buffer of `bytes` on channel ch: device memory when want_device. */
static void *stage_buf(sg_comm *c, int ch, size_t bytes, int want_device) {
    if (c->stage[ch] && (c->stage_bytes[ch] < bytes || c->stage_on_device[ch] != want_device)) {
        if (c->stage_on_device[ch]) c->be->ops->free(c->be, c->stage[ch]);
        else free(c->stage[ch]);
        c->stage[ch] = NULL;
    }
    if (!c->stage[ch]) {
        c->stage[ch] = want_device ? c->be->ops->alloc(c->be, bytes) : malloc(bytes);
        SG_CHECK(c->stage[ch], "out of host memory for a %zu-byte communication buffer", bytes);
        c->stage_bytes[ch] = bytes;
        c->stage_on_device[ch] = want_device;
    }
    return c->stage[ch];
}

/* Is a buffer of backend memory (is_device) outside host memory, i.e. only
 * reachable through upload/download? */
static int off_host(const sg_comm *c, int is_device) {
    return is_device && c->be && !sg_backend_has(c->be, SG_CAP_HOST_MEMORY);
}

/* Is a buffer of this kind (device/host) in the transport's memory space? */
static int native(const sg_comm *c, int is_device) {
    return off_host(c, is_device) == c->tr->device_memory;
}

static void to_stage(sg_comm *c, void *stage, const void *src, size_t bytes, int src_is_device) {
    if (bytes == 0) return;
    if (src_is_device) c->be->ops->download(c->be, stage, src, bytes); /* device -> host stage */
    else c->be->ops->upload(c->be, stage, src, bytes);                 /* host -> device stage */
}
static void from_stage(sg_comm *c, void *dst, const void *stage, size_t bytes, int dst_is_device) {
    if (bytes == 0) return;
    if (dst_is_device) c->be->ops->upload(c->be, dst, stage, bytes);
    else c->be->ops->download(c->be, dst, stage, bytes);
}

/* Sum of world rows of count elements into out, in rank order (so every
 * rank computes bit-identical sums). */
#define ROW_SUM(T)                                                           \
    do {                                                                     \
        const T *a = all;                                                    \
        T *o = out;                                                          \
        for (size_t i = 0; i < count; i++) {                                 \
            T acc = a[i];                                                    \
            for (int r = 1; r < world; r++) acc += a[(size_t)r * count + i]; \
            o[i] = acc;                                                      \
        }                                                                    \
    } while (0)
static void row_sum(const void *all, void *out, size_t count, int dtype, int world) {
    if (dtype == SG_CDT_F32) ROW_SUM(float);
    else if (dtype == SG_CDT_F64) ROW_SUM(double);
    else ROW_SUM(int64_t);
}

/* c->mesh_buf of at least need bytes. */
static void *mesh_scratch(sg_comm *c, size_t need) {
    if (c->mesh_buf_bytes < need) {
        free(c->mesh_buf);
        c->mesh_buf = malloc(need);
        SG_CHECK(c->mesh_buf, "out of memory for a %zu-byte communication buffer", need);
        c->mesh_buf_bytes = need;
    }
    return c->mesh_buf;
}

/* A large all-reduce over the mesh: reduce-scatter (rank q sums chunk q of
 * every rank's buffer, in rank order, as row_sum does), then an all-gather
 * of the summed chunks. Every element is summed once, by one rank, in rank
 * order, so every rank gets the bits the small path would give. */
static sg_status mesh_allreduce_chunked(sg_comm *c, void *buf, size_t count, int dtype, char *err,
                                        size_t errlen) {
    int w = c->env.world, me = c->env.rank;
    size_t es = sg_dtype_size(dtype), first, n;
    size_t most = count / (size_t)w + 1; /* a chunk's elements at most */
    char *scratch = mesh_scratch(c, most * es * (size_t)w);
    void **rows = malloc((size_t)w * sizeof *rows);
    SG_CHECK(rows, "out of memory");
    for (int q = 0; q < w; q++) rows[q] = scratch + (size_t)q * most * es;
    sg_status rc = sg_mesh_alltoall_chunks(c->mesh, buf, rows, count, es, err, errlen);
    if (rc == SG_OK) {
        sg_mesh_chunk(count, w, me, &first, &n);
        char *mine = (char *)buf + first * es;
        memcpy(rows[me], mine, n * es);
        /* rows are `most` apart: sum them into mine, rank order */
        for (size_t i = 0; i < n; i++) {
            if (dtype == SG_CDT_F32) {
                float acc = ((float *)rows[0])[i];
                for (int q = 1; q < w; q++) acc += ((float *)rows[q])[i];
                ((float *)mine)[i] = acc;
            } else if (dtype == SG_CDT_F64) {
                double acc = ((double *)rows[0])[i];
                for (int q = 1; q < w; q++) acc += ((double *)rows[q])[i];
                ((double *)mine)[i] = acc;
            } else {
                int64_t acc = ((int64_t *)rows[0])[i];
                for (int q = 1; q < w; q++) acc += ((int64_t *)rows[q])[i];
                ((int64_t *)mine)[i] = acc;
            }
        }
        rc = sg_mesh_allgather_chunks(c->mesh, buf, count, es, err, errlen);
    }
    free(rows);
    return rc;
}

/* A collective of the training thread over the mesh (host memory). SG_OK,
 * or SG_ERR_RUNTIME with the reason in err (not logged: collective()
 * reports it). */
static sg_status mesh_collective(sg_comm *c, int op, void *in, void *out, size_t count, int dtype,
                                 size_t bytes, int root, char *err, size_t errlen) {
    int w = c->env.world;
    if (op == OP_BROADCAST) return sg_mesh_broadcast(c->mesh, out, bytes, root, err, errlen);
    if (op == OP_ALLGATHER) return sg_mesh_allgather(c->mesh, in, out, bytes, err, errlen);
    if (op == OP_ALLREDUCE && bytes > SG_MESH_DIRECT_BYTES && w > 2)
        return mesh_allreduce_chunked(c, out, count, dtype, err, errlen);
    size_t need = op == OP_BARRIER ? (size_t)w : bytes * (size_t)w;
    mesh_scratch(c, need);
    if (op == OP_BARRIER) {
        char one = 1;
        return sg_mesh_allgather(c->mesh, &one, c->mesh_buf, 1, err, errlen);
    }
    if (sg_mesh_allgather(c->mesh, out, c->mesh_buf, bytes, err, errlen) != SG_OK)
        return SG_ERR_RUNTIME;
    row_sum(c->mesh_buf, out, count, dtype, w);
    return SG_OK;
}

/* Waits for the collectives enqueued on SG_CH_MAIN (and checks that they
 * succeeded). SG_OK, or SG_ERR_RUNTIME after logging (broken). */
static sg_status flush_main(sg_comm *c) {
    if (!c->pending_main) return SG_OK;
    c->pending_main = 0;
    char err[512] = "";
    double t0 = sg_now_s();
    sg_status rc = c->tr->flush(c->tr, err, sizeof err);
    c->wait_s += sg_now_s() - t0;
    c->flushes++;
    if (rc != SG_OK) {
        c->broken = 1;
        report_failure(c, "SyncBN collective (enqueued on the compute stream)", err, 0);
        return SG_ERR_RUNTIME;
    }
    return SG_OK;
}

/* One collective on channel ch. in/out: buffers (out == in for in-place ops),
 * is_device: whether they are backend memory. n_in bytes per rank for
 * all-gather, total bytes otherwise. SG_OK, or SG_ERR_RUNTIME after
 * logging the failed rank (the communicator is broken from then on). */
static sg_status collective(sg_comm *c, int ch, int op, void *in, void *out, size_t count,
                            int dtype, size_t bytes, int root, int is_device) {
    if (check_usable(c, op_names[op]) != SG_OK) return SG_ERR_RUNTIME;
    if (!c->tr) { /* world of 1 */
        if (op == OP_ALLGATHER && in != out && bytes) {
            if (is_device) c->be->ops->copy(c->be, out, in, bytes);
            else memcpy(out, in, bytes);
        }
        return SG_OK;
    }
    /* a blocking call on the training channel first waits for what was
     * only enqueued there, so its failures surface here at the latest */
    if (ch == SG_CH_MAIN && flush_main(c) != SG_OK) return SG_ERR_RUNTIME;
    double t0 = sg_now_s();
    char err[512] = "";
    sg_status rc;
    int nat = op == OP_BARRIER || native(c, is_device);
    size_t out_bytes = op == OP_ALLGATHER ? bytes * (size_t)c->env.world : bytes;
    void *tin = in, *tout = out;
    if (!nat) {
        /* stage into the transport's memory: in at the front of the stage
         * for in-place ops; all-gather keeps in after the world*bytes out */
        int want_dev = c->tr->device_memory;
        size_t total = op == OP_ALLGATHER ? out_bytes + bytes : out_bytes;
        char *st = stage_buf(c, ch, total ? total : 1, want_dev);
        tout = st;
        tin = op == OP_ALLGATHER ? st + out_bytes : st;
        to_stage(c, tin, in, op == OP_ALLGATHER ? bytes : out_bytes, off_host(c, is_device));
    }
    int via_mesh = ch == SG_CH_MAIN && c->mesh;
    if (via_mesh)
        rc = mesh_collective(c, op, tin, tout, count, dtype, bytes, root, err, sizeof err);
    else switch (op) {
        case OP_ALLREDUCE:
            rc = c->tr->allreduce(c->tr, ch, tout, count, dtype, err, sizeof err);
            break;
        case OP_BROADCAST:
            rc = c->tr->broadcast(c->tr, ch, tout, bytes, root, err, sizeof err);
            break;
        case OP_ALLGATHER:
            rc = c->tr->allgather(c->tr, ch, tin, tout, bytes, err, sizeof err);
            break;
        default: rc = c->tr->barrier(c->tr, ch, err, sizeof err); break;
        }
    if (rc == SG_OK && !nat) from_stage(c, out, tout, out_bytes, off_host(c, is_device));
    /* backend memory the transport wrote in place, behind the ops: copies
     * the backend derived from it (bf16 weights) are stale now */
    if (rc == SG_OK && nat && is_device && c->be && op != OP_BARRIER && out_bytes)
        c->be->ops->mem_written(c->be, out, out_bytes);
    if (ch == SG_CH_MAIN) c->wait_s += sg_now_s() - t0;
    if (rc != SG_OK) {
        c->broken = 1;
        char what[96];
        snprintf(what, sizeof what, "%s of %zu bytes", op_names[op],
                 op == OP_ALLGATHER ? bytes : out_bytes);
        report_failure(c, op == OP_BARRIER ? "barrier" : what, err, via_mesh);
        return SG_ERR_RUNTIME;
    }
    return SG_OK;
}

sg_status sg_comm_ch_allreduce_f32(sg_comm *c, int ch, float *dev, size_t count) {
    return collective(c, ch, OP_ALLREDUCE, dev, dev, count, SG_CDT_F32, count * 4, 0, 1);
}
sg_status sg_comm_allreduce_f32(sg_comm *c, float *dev, size_t count) {
    return collective(c, SG_CH_MAIN, OP_ALLREDUCE, dev, dev, count, SG_CDT_F32, count * 4, 0, 1);
}
sg_status sg_comm_allreduce_f64(sg_comm *c, double *host, size_t count) {
    return collective(c, SG_CH_MAIN, OP_ALLREDUCE, host, host, count, SG_CDT_F64, count * 8, 0, 0);
}
sg_status sg_comm_allreduce_i64(sg_comm *c, int64_t *host, size_t count) {
    return collective(c, SG_CH_MAIN, OP_ALLREDUCE, host, host, count, SG_CDT_I64, count * 8, 0, 0);
}
static sg_status check_root(sg_comm *c, int root) {
    if (root < 0 || root >= c->env.world) {
        SG_ERROR("rank %d: broadcast from rank %d, but the world has %d ranks (internal error)",
                 c->env.rank, root, c->env.world);
        return SG_ERR_RUNTIME;
    }
    return SG_OK;
}
sg_status sg_comm_broadcast(sg_comm *c, void *dev, size_t bytes, int root) {
    if (check_root(c, root) != SG_OK) return SG_ERR_RUNTIME;
    return collective(c, SG_CH_MAIN, OP_BROADCAST, dev, dev, 0, 0, bytes, root, 1);
}
sg_status sg_comm_broadcast_host(sg_comm *c, void *host, size_t bytes, int root) {
    if (check_root(c, root) != SG_OK) return SG_ERR_RUNTIME;
    return collective(c, SG_CH_MAIN, OP_BROADCAST, host, host, 0, 0, bytes, root, 0);
}
sg_status sg_comm_allgather_f32(sg_comm *c, const float *dev_in, float *dev_out, size_t n) {
    return collective(c, SG_CH_MAIN, OP_ALLGATHER, (void *)dev_in, dev_out, 0, 0, n * 4, 0, 1);
}
int sg_comm_can_enqueue(const sg_comm *c) {
    return c->tr && c->tr->allgather_enqueue && c->tr->allreduce_enqueue && c->tr->flush &&
           native(c, 1);
}

/* An enqueued collective on SG_CH_MAIN (sg_comm_can_enqueue). */
static sg_status enqueue(sg_comm *c, int op, const float *in, float *out, size_t n) {
    if (check_usable(c, op_names[op]) != SG_OK) return SG_ERR_RUNTIME;
    char err[512] = "";
    sg_status rc = op == OP_ALLREDUCE
                       ? c->tr->allreduce_enqueue(c->tr, out, n, SG_CDT_F32, err, sizeof err)
                       : c->tr->allgather_enqueue(c->tr, in, out, n * 4, err, sizeof err);
    if (rc != SG_OK) {
        c->broken = 1;
        char what[96];
        snprintf(what, sizeof what, "%s of %zu bytes (enqueued)", op_names[op], n * 4);
        report_failure(c, what, err, 0);
        return SG_ERR_RUNTIME;
    }
    c->pending_main = 1;
    c->syncbn_queued++;
    size_t out_bytes = op == OP_ALLGATHER ? n * 4 * (size_t)c->env.world : n * 4;
    c->be->ops->mem_written(c->be, out, out_bytes);
    return SG_OK;
}

sg_status sg_comm_syncbn_allreduce(sg_comm *c, float *dev, size_t count) {
    double t0 = sg_now_s();
    sg_status rc = sg_comm_can_enqueue(c) ? enqueue(c, OP_ALLREDUCE, dev, dev, count)
                                          : sg_comm_allreduce_f32(c, dev, count);
    c->syncbn_calls++;
    c->syncbn_s += sg_now_s() - t0;
    return rc;
}

sg_status sg_comm_syncbn_allgather(sg_comm *c, const float *dev_in, float *dev_out, size_t n,
                                   int enqueue_ok) {
    double t0 = sg_now_s();
    sg_status rc = enqueue_ok && sg_comm_can_enqueue(c)
                       ? enqueue(c, OP_ALLGATHER, dev_in, dev_out, n)
                       : sg_comm_allgather_f32(c, dev_in, dev_out, n);
    c->syncbn_calls++;
    c->syncbn_s += sg_now_s() - t0;
    return rc;
}

void sg_comm_set_batch_sizes(sg_comm *c, const int64_t *n) {
    c->has_batch = n != NULL;
    if (!n) return;
    if (!c->batch_n) {
        c->batch_n = malloc((size_t)c->env.world * sizeof *c->batch_n);
        SG_CHECK(c->batch_n, "out of host memory");
    }
    memcpy(c->batch_n, n, (size_t)c->env.world * sizeof *n);
}

const int64_t *sg_comm_batch_sizes(const sg_comm *c) { return c->has_batch ? c->batch_n : NULL; }

void sg_comm_get_stats(const sg_comm *c, sg_comm_stats *s) {
    memset(s, 0, sizeof *s);
    s->wait_s = c->wait_s;
    s->syncbn_s = c->syncbn_s;
    s->syncbn_calls = c->syncbn_calls;
    s->syncbn_queued = c->syncbn_queued;
    s->flushes = c->flushes;
    s->poll_sleeps = c->tr && c->tr->poll_sleeps ? c->tr->poll_sleeps(c->tr, SG_CH_MAIN) : 0;
}

sg_status sg_comm_allgather_host(sg_comm *c, const void *in, void *out, size_t bytes_per_rank) {
    return collective(c, SG_CH_MAIN, OP_ALLGATHER, (void *)in, out, 0, 0, bytes_per_rank, 0, 0);
}
sg_status sg_comm_barrier(sg_comm *c) {
    return collective(c, SG_CH_MAIN, OP_BARRIER, NULL, NULL, 0, 0, 0, 0, 0);
}

/* Agreement through the store (works before the transport exists): every
 * rank publishes its value; rank 0 reads them all, compares them with its
 * own and publishes a verdict ("ok", "differ V0 LIST" or "missing R",
 * "malformed R"), which every other rank reads and logs. That is 3 N store
 * requests in all: every rank reading every rank's value made it N^2 (16.7
 * million requests for one check at 4096 ranks, docs/DISTRIBUTED.md
 * "Scale"). */
static sg_status agree_fail(sg_comm *c) {
    c->broken = 1;
    return SG_ERR_RUNTIME;
}

/* Rank 0: reads every rank's value and writes the verdict into v. */
static void agree_collect(sg_comm *c, int seq, const char *field, uint64_t mine, char *v,
                          size_t vlen) {
    char key[256], differ[480] = "";
    size_t dl = 0;
    int ndiff = 0;
    for (int r = 1; r < c->env.world; r++) {
        snprintf(key, sizeof key, "agree/%d/%s/%d", seq, field, r);
        void *val = NULL;
        size_t len = 0;
        sg_store_rc rc = sg_store_get(c->store, key, &val, &len);
        if (rc != SG_STORE_OK || len != sizeof(uint64_t)) {
            free(val);
            snprintf(v, vlen, "%s %d", rc == SG_STORE_OK ? "malformed" : "missing", r);
            return;
        }
        uint64_t x;
        memcpy(&x, val, sizeof x);
        free(val);
        if (x != mine) {
            ndiff++;
            if (dl < sizeof differ - 40)
                dl += (size_t)snprintf(differ + dl, sizeof differ - dl, "%s%d",
                                       ndiff > 1 ? ", " : "", r);
            else if (dl < sizeof differ - 4) dl += (size_t)snprintf(differ + dl, 4, "...");
        }
    }
    if (ndiff) snprintf(v, vlen, "differ %016" PRIx64 " %s", mine, differ);
    else snprintf(v, vlen, "ok");
}

sg_status sg_comm_check_agree(sg_comm *c, const char *field, uint64_t value) {
    if (check_usable(c, "agreement check") != SG_OK) return SG_ERR_RUNTIME;
    if (!c->store) return SG_OK;
    int seq = c->agree_seq++;
    char key[256], verdict[600] = "";
    snprintf(key, sizeof key, "agree/%d/%s/%d", seq, field, c->env.rank);
    if (sg_store_set(c->store, key, &value, sizeof value) != SG_STORE_OK) return agree_fail(c);
    snprintf(key, sizeof key, "agree/%d/%s/verdict", seq, field);
    if (c->env.rank == 0) {
        agree_collect(c, seq, field, value, verdict, sizeof verdict);
        if (sg_store_set(c->store, key, verdict, strlen(verdict) + 1) != SG_STORE_OK)
            return agree_fail(c);
    } else {
        /* rank 0 may wait dist.timeout_s for a missing rank before it
         * writes the verdict: wait longer than that for the verdict */
        double t = sg_store_timeout(c->store);
        sg_store_set_timeout(c->store, t + 5.0 + 0.1 * t);
        void *val = NULL;
        size_t len = 0;
        sg_store_rc rc = sg_store_get(c->store, key, &val, &len);
        sg_store_set_timeout(c->store, t);
        if (rc == SG_STORE_TIMEOUT) {
            SG_ERROR("rank %d: rank 0 did not publish the agreement on the %s within dist.timeout_s"
                     "=%d s (+%.0f s): is it running (and started with the same world size)?",
                     c->env.rank, field, c->timeout_s, 5.0 + 0.1 * t);
            free(val);
            return agree_fail(c);
        }
        if (rc != SG_STORE_OK || len == 0 || len > sizeof verdict || ((char *)val)[len - 1] != 0) {
            if (rc == SG_STORE_OK)
                SG_ERROR("rank %d: malformed agreement on the %s in the store", c->env.rank, field);
            free(val);
            return agree_fail(c);
        }
        memcpy(verdict, val, len);
        free(val);
    }
    int who = -1;
    uint64_t v0 = 0;
    int off = 0;
    if (strcmp(verdict, "ok") == 0) return SG_OK;
    if (sscanf(verdict, "missing %d", &who) == 1) {
        SG_ERROR("rank %d: rank %d did not publish its %s within dist.timeout_s=%d s: "
                 "is it running (and started with the same world size)?",
                 c->env.rank, who, field, c->timeout_s);
    } else if (sscanf(verdict, "malformed %d", &who) == 1) {
        SG_ERROR("rank %d: malformed %s from rank %d in the store", c->env.rank, field, who);
    } else if (sscanf(verdict, "differ %" SCNx64 " %n", &v0, &off) == 1 && off > 0) {
        SG_ERROR("rank %d: ranks disagree on the %s: rank(s) %s differ from rank 0 "
                 "(rank 0: %016" PRIx64 ", this rank: %016" PRIx64 "). Run the same binary, "
                 "config and dataset on every rank.",
                 c->env.rank, field, verdict + off, v0, value);
        c->broken = 1;
        return SG_ERR_CONFIG; /* the nodes' setup is the user's: a restart cannot fix it */
    } else {
        SG_ERROR("rank %d: malformed agreement on the %s in the store", c->env.rank, field);
    }
    return agree_fail(c);
}

sg_status sg_comm_check_dataset(sg_comm *c, uint64_t dataset_hash) {
    return sg_comm_check_agree(c, "dataset index (hash of the file list)", dataset_hash);
}

static const char *choose_backend(const sg_config *cfg, sg_backend *be) {
    const char *b = cfg->dist.backend;
    if (strcmp(b, "auto") == 0 || b[0] == 0)
        return sg_backend_has(be, SG_CAP_DEVICE_COLLECTIVES) ? "nccl" : "gloo";
    return b;
}

sg_comm *sg_comm_create(const sg_config *cfg, sg_backend *be) {
    return sg_comm_create_stoppable(cfg, be, NULL, NULL);
}

sg_comm *sg_comm_create_stoppable(const sg_config *cfg, sg_backend *be,
                                  const volatile sig_atomic_t *stop, sg_status *why) {
    sg_status why_l = SG_ERR_RUNTIME;
    if (!why) why = &why_l;
    *why = SG_ERR_RUNTIME;
    sg_comm *c = calloc(1, sizeof *c);
    SG_CHECK(c, "out of memory");
    pthread_mutex_init(&c->report_mu, NULL);
    if (sg_dist_env_read(&c->env) != SG_OK) {
        free(c);
        *why = SG_ERR_CONFIG;
        return NULL;
    }
    c->be = be;
    c->stop = stop;
    c->timeout_s = cfg->dist.timeout_s > 0 ? cfg->dist.timeout_s : 300;
    /* heartbeats come every 0.5 s: probe at least 1 s, at most 3 s */
    c->probe_s = c->timeout_s / 4.0 < 1.0   ? 1.0
                 : c->timeout_s / 4.0 > 3.0 ? 3.0
                                            : c->timeout_s / 4.0;
    c->op_timeout_s = c->timeout_s - c->probe_s;
    if (c->op_timeout_s < 0.5 * c->timeout_s) c->op_timeout_s = 0.5 * c->timeout_s;
    /* SG_DIST_FORCE_TRANSPORT=1 builds the store and transport even for a
     * world of 1 (testing NCCL or Gloo on a single device) */
    const char *force = getenv("SG_DIST_FORCE_TRANSPORT");
    if (c->env.world == 1 && !(force && strcmp(force, "1") == 0)) return c;

    sg_log_set_rank(c->env.rank, c->env.world);
    sg_launch_report_open(); /* close-on-exec from here on */
    {
        char who[32], what[96];
        snprintf(who, sizeof who, "rank %d", c->env.rank);
        snprintf(what, sizeof what, "connections to %d peers%s", c->env.world - 1,
                 c->env.rank == 0 ? " and the rendezvous store's clients" : "");
        if (sg_fd_limit_ensure(sg_fd_need_rank(c->env.world, c->env.rank == 0), who, what) != SG_OK)
            goto fail;
    }
    char token[SG_TOKEN_MAX + 1], token_src[256];
    if (sg_job_token_resolve(sg_config_hash(cfg), c->env.source, c->env.master_addr,
                             c->env.master_port, c->env.world, token, token_src,
                             sizeof token_src) != SG_OK)
        goto fail;
    SG_INFO("rank %d: joining the job through the rendezvous store at %s:%d (job token: %s)",
            c->env.rank, c->env.master_addr, c->env.master_port, token_src);
    sg_store_opts so = {
        .token = token, .multi_node = c->env.world > c->env.local_world, .stop = stop};
    c->store = sg_store_create(c->env.master_addr, c->env.master_port, c->env.rank, c->env.world,
                               c->timeout_s, &so);
    if (!c->store) goto fail;
    if (sg_store_heartbeat_start(c->store) != SG_OK) goto fail;
    sg_status agree = sg_comm_check_agree(
        c, "binary version", sg_fnv1a_str(SG_FNV_OFFSET, SG_VERSION " " __DATE__ " " __TIME__));
    if (agree == SG_OK)
        agree = sg_comm_check_agree(c, "resolved config (sg_config_hash)", sg_config_hash(cfg));
    if (agree != SG_OK) {
        *why = agree;
        goto fail;
    }

    const char *name = choose_backend(cfg, be);
    /* host transports (Gloo) get the direct mesh for the training thread
     * unless SG_DIST_NO_MESH=1 (then Gloo carries every collective) */
    const char *no_mesh = getenv("SG_DIST_NO_MESH");
    int use_mesh = strcmp(name, "nccl") != 0 && !(no_mesh && strcmp(no_mesh, "1") == 0);
    if (strcmp(name, "nccl") == 0) {
        if (!sg_backend_has(be, SG_CAP_DEVICE_COLLECTIVES)) {
            SG_ERROR("dist.backend=nccl needs a device whose memory NCCL can reduce (device=cuda), "
                     "but device=%s: use dist.backend=gloo or auto on the CPU",
                     cfg->device);
            goto fail;
        }
        c->tr = sg_transport_nccl_create(c->store, be, c->env.rank, c->env.world, c->op_timeout_s);
    } else if (strcmp(name, "gloo") == 0) {
        /* With the mesh, Gloo carries the gradient channel only: a second
         * full mesh of Gloo pairs for the training thread would add 2 (N-1)
         * sockets per rank (each pair listens on its own port until the job
         * ends), and three full meshes ran 128 ranks on one host out of
         * ephemeral ports (docs/DISTRIBUTED.md "Scale") */
        int chans = use_mesh ? 1 << SG_CH_GRAD : (1 << SG_CH_MAIN) | (1 << SG_CH_GRAD);
        c->tr =
            sg_transport_gloo_create(c->store, c->env.rank, c->env.world, c->op_timeout_s, chans);
    } else {
        SG_ERROR("dist.backend='%s' is not one of auto, gloo, nccl", cfg->dist.backend);
        goto fail;
    }
    if (!c->tr) goto fail;
    if (use_mesh) {
        c->mesh = sg_mesh_create(c->store, c->env.rank, c->env.world, c->op_timeout_s, token, stop);
        if (!c->mesh) goto fail;
    }
    sg_store_set_stop(c->store, NULL); /* joined: from now on a stop ends the step, not a wait */
    SG_INFO("rank %d/%d (local %d/%d, %s launch): %s communicator up via %s:%d", c->env.rank,
            c->env.world, c->env.local_rank, c->env.local_world, c->env.source, c->tr->name,
            c->env.master_addr, sg_store_port(c->store));
    return c;
fail:
    if (stop && *stop)
        SG_ERROR("rank %d: stopped by signal %d while joining the job (rendezvous store at %s:%d, "
                 "waiting for the other ranks)",
                 c->env.rank, (int)*stop, c->env.master_addr, c->env.master_port);
    c->broken = 1;
    sg_comm_destroy(c);
    return NULL;
}

void sg_comm_quiesce(sg_comm *c) {
    if (!c || !c->tr) return;
    if (!c->broken) (void)flush_main(c); /* logged on failure */
    if (c->tr->quiesce) c->tr->quiesce(c->tr);
}

void sg_comm_destroy(sg_comm *c) {
    if (!c) return;
    if (!c->broken) (void)flush_main(c); /* logged on failure */
    /* a failed job: reset its connections rather than leave every one in
     * TIME_WAIT, whose ports the restarted job needs (dist/sock_abort.h) */
    else (void)sg_sock_abort_all();
    sg_mesh_destroy(c->mesh);
    free(c->mesh_buf);
    free(c->batch_n);
    if (c->tr) c->tr->destroy(c->tr);
    for (int i = 0; i < 2; i++)
        if (c->scratch[i]) c->be->ops->free(c->be, c->scratch[i]);
    for (int ch = 0; ch < SG_CH_COUNT; ch++) {
        if (!c->stage[ch]) continue;
        if (c->stage_on_device[ch]) c->be->ops->free(c->be, c->stage[ch]);
        else free(c->stage[ch]);
    }
    if (c->store) {
        /* rank 0 hosts the store: after a failure do not keep it alive
         * waiting for ranks that may be gone */
        if (c->broken) sg_store_set_timeout(c->store, 1.0);
        sg_store_leave(c->store);
        sg_store_destroy(c->store);
    }
    free(c);
}
