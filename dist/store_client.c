/* dist/store_client.c - the rendezvous store's client side (dist/store.h):
 * connecting (retrying until rank 0's server is up) and saying HELLO with
 * the job token, request/response with the store's timeout (interruptible by
 * the stop flag), barrier, heartbeats and the dead/hung diagnosis. Owns the
 * connection, and on rank 0's original handle the server. */
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "core/log.h"
#include "core/sigmask.h"
#include "core/util.h"
#include "dist/store.h"
#include "dist/store_proto.h"

struct sg_store {
    char addr[256];
    int port;
    int rank, world;
    double timeout_s;
    int fd; /* -1 when (re)connect is needed */
    pthread_mutex_t mu;
    sg_store_server *server; /* rank 0's original handle only */
    int barrier_seq;
    /* heartbeat thread */
    int hb_running;
    pthread_t hb_thread;
    pthread_mutex_t hb_mu;
    pthread_cond_t hb_cv;
    int hb_stop;
    sg_store *hb_store;
    int quiet; /* do not log connection failures */
    char token[SG_TOKEN_MAX + 1];
    int claimed; /* this handle's rank claim was accepted once:
                                  reconnects say HELLO as an extra connection */
    int is_clone;
    const volatile sig_atomic_t *stop;
    int diag_seq; /* diagnoses made through this handle (sg_store_diagnose) */
    /* the caller's stop flag during sg_store_diagnose_stoppable (only the
     * diagnosing thread reads it), else NULL */
    const volatile sig_atomic_t *diag_stop;
};

/* connect_locked's verdict besides the sg_store_rc ones: the store answered
 * and refused us, so retrying cannot help (logged). */
#define REFUSED (-10)

static int stopped(const sg_store *s) { return s->stop && *s->stop; }

/* A connected socket (an fd), or -1; *refused says whether the host
 * answered that nobody listens on the port (ECONNREFUSED). */
static int connect_once(const char *addr, int port, int *refused) {
    struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM};
    struct addrinfo *ai = NULL;
    char portstr[16];
    snprintf(portstr, sizeof portstr, "%d", port);
    *refused = 0;
    if (getaddrinfo(addr, portstr, &hints, &ai)) return -1;
    int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, 0);
    if (fd >= 0 && connect(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
        *refused = errno == ECONNREFUSED;
        close(fd);
        fd = -1;
    }
    freeaddrinfo(ai);
    if (fd >= 0) {
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    }
    return fd;
}

/* Writes n bytes: SG_STORE_OK, or SG_STORE_ERROR (not logged here). */
static sg_store_rc send_all(int fd, const void *p, size_t n) {
    const char *c = p;
    while (n) {
        ssize_t w = send(fd, c, n, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return SG_STORE_ERROR;
        c += w;
        n -= (size_t)w;
    }
    return SG_STORE_OK;
}

/* Reads n bytes before the deadline. SG_STORE_OK, SG_STORE_ERROR (closed or
 * failed; not logged here), SG_STORE_TIMEOUT, SG_STORE_INTERRUPTED (the stop
 * flag, checked every 0.1 s). */
static sg_store_rc recv_all(const sg_store *s, void *p, size_t n, double deadline) {
    char *c = p;
    int fd = s->fd;
    while (n) {
        if (stopped(s)) return SG_STORE_INTERRUPTED;
        double left = deadline - sg_now_s();
        if (left <= 0) return SG_STORE_TIMEOUT;
        if (s->stop && left > 0.1) left = 0.1;
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        int rc = poll(&pfd, 1, (int)(left * 1000) + 1);
        if (rc < 0 && errno == EINTR) continue;
        if (rc < 0) return SG_STORE_ERROR;
        if (rc == 0) continue;
        ssize_t r = recv(fd, c, n, 0);
        if (r < 0 && (errno == EINTR || errno == EAGAIN)) continue;
        if (r <= 0) return SG_STORE_ERROR;
        c += r;
        n -= (size_t)r;
    }
    return SG_STORE_OK;
}

/* One request/response on an open connection; the caller holds mu. A
 * refusal by the server returns SG_STORE_ERROR with its status in *status
 * (if given). Nothing is logged here (request() does). */
static sg_store_rc request_locked(sg_store *s, uint8_t op, const char *key, const void *val,
                                  uint32_t vlen, void **out, size_t *outlen, double timeout,
                                  uint8_t *status) {
    uint32_t klen = (uint32_t)strlen(key);
    char hdr[SG_STORE_HDR];
    hdr[0] = (char)op;
    memcpy(hdr + 1, &klen, 4);
    memcpy(hdr + 5, &vlen, 4);
    if (status) *status = SG_ST_OK;
    if (send_all(s->fd, hdr, sizeof hdr) || send_all(s->fd, key, klen) ||
        (vlen && send_all(s->fd, val, vlen)))
        return SG_STORE_ERROR;
    double deadline = sg_now_s() + timeout;
    char rh[SG_STORE_RESP_HDR];
    sg_store_rc rc = recv_all(s, rh, sizeof rh, deadline);
    if (rc != SG_STORE_OK) return rc;
    uint8_t st;
    uint32_t rlen;
    const char *why;
    if (sg_store_parse_response(rh, SG_STORE_MAX_VAL, &st, &rlen, &why) != SG_WIRE_OK)
        return SG_STORE_ERROR;
    char *buf = malloc(rlen + 1u);
    SG_CHECK(buf, "out of memory");
    rc = recv_all(s, buf, rlen, deadline + 5.0);
    if (rc || st != SG_ST_OK) {
        if (!rc && status) *status = st;
        if (!rc && st != SG_ST_OK && out) { /* the refusal's detail, for the caller */
            buf[rlen] = 0;
            *out = buf;
            if (outlen) *outlen = rlen;
            return SG_STORE_ERROR;
        }
        free(buf);
        return rc != SG_STORE_OK ? rc : SG_STORE_ERROR;
    }
    buf[rlen] = 0;
    if (out) {
        *out = buf;
        if (outlen) *outlen = rlen;
    } else {
        free(buf);
    }
    return SG_STORE_OK;
}

/* Logs why the store refused our HELLO; retrying cannot help. */
static void log_refusal(const sg_store *s, uint8_t st, const char *detail) {
    if (st == SG_ST_WRONG_TOKEN) {
        int derived = strncmp(s->token, "derived-", 8) == 0;
        SG_ERROR(
            "rank %d: another job holds port %d (%s:%d): choose another --master-port (or MASTER_PORT). "
            "The rendezvous store there refused this job's token%s.",
            s->rank, s->port, s->addr, s->port,
            derived
                ? "; or, if it is this job's rank 0: the ranks' job tokens differ (without " SG_TOKEN_ENV
                  " the token is derived from the config, so a rank with another "
                  "config, or with " SG_TOKEN_ENV " set where the others have none, looks like "
                  "another job)"
                : "");
    } else if (st == SG_ST_RANK_TAKEN) {
        SG_ERROR(
            "rank %d: the rendezvous store at %s:%d already has a connection for rank %d (from %s): "
            "another job with the same job token holds port %d, or two processes were started as "
            "rank %d. Choose another --master-port (or MASTER_PORT) and check RANK.",
            s->rank, s->addr, s->port, s->rank, detail && *detail ? detail : "?", s->port, s->rank);
    } else {
        SG_ERROR(
            "rank %d: the rendezvous store at %s:%d refused this rank's HELLO (rank %d outside its world "
            "of WORLD_SIZE ranks, or another program or segtrain version on port %d): start every rank "
            "with the same WORLD_SIZE and binary, or choose another --master-port",
            s->rank, s->addr, s->port, s->rank, s->port);
    }
}

/* Opens the connection and says HELLO with the token, retrying until the
 * deadline while nothing answers. SG_STORE_OK, SG_STORE_ERROR (timeout; not
 * logged), REFUSED (logged), or SG_STORE_INTERRUPTED: an int, since REFUSED
 * is not an sg_store_rc. */
static int connect_locked(sg_store *s, double deadline) {
    for (;;) {
        if (stopped(s)) return SG_STORE_INTERRUPTED;
        int refused = 0;
        s->fd = connect_once(s->addr, s->port, &refused);
        /* Refused after this handle had been connected: the store's
         * process (rank 0) is gone, not late, and a new one never listens on
         * its port within this attempt. Retrying until the deadline only
         * kept every rank of a failed job alive for the request's timeout
         * (5 s in a failure diagnosis) before it could exit and restart. */
        if (s->fd < 0 && refused && (s->claimed || s->is_clone)) return SG_STORE_ERROR;
        if (s->fd >= 0) {
            uint8_t hello[SG_STORE_HELLO_MAX];
            uint32_t kind = s->claimed || s->is_clone ? SG_HELLO_EXTRA : SG_HELLO_CLAIM;
            size_t hl = sg_store_build_hello(hello, s->rank, kind, s->token, strlen(s->token));
            uint8_t st = SG_ST_OK;
            void *detail = NULL;
            sg_store_rc rc = hl ? request_locked(s, SG_OP_HELLO, "", hello, (uint32_t)hl, &detail,
                                                 NULL, s->timeout_s, &st)
                                : SG_STORE_ERROR;
            if (rc == SG_STORE_OK) {
                free(detail);
                s->claimed = 1;
                return SG_STORE_OK;
            }
            close(s->fd);
            s->fd = -1;
            if (rc == SG_STORE_INTERRUPTED) {
                free(detail);
                return rc;
            }
            if (st != SG_ST_OK) {
                if (!s->quiet) log_refusal(s, st, detail);
                free(detail);
                return REFUSED;
            }
            free(detail);
        }
        if (sg_now_s() >= deadline) return SG_STORE_ERROR;
        struct timespec ts = {0, 100 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
}

/* A request with reconnect on a stale connection. After a timeout the
 * connection has an outstanding request, so it is closed (reopened next time).
 * Logs errors (unless the handle is quiet) and timeouts of requests other
 * than GET; see dist/store.h for the outcomes. */
static sg_store_rc request(sg_store *s, uint8_t op, const char *key, const void *val, uint32_t vlen,
                           void **out, size_t *outlen, double timeout) {
    if (strlen(key) > SG_STORE_MAX_KEY) {
        SG_ERROR("rank %d: store key longer than %d bytes: %.64s...", s->rank, SG_STORE_MAX_KEY,
                 key);
        return SG_STORE_ERROR;
    }
    if (out) *out = NULL;
    pthread_mutex_lock(&s->mu);
    sg_store_rc rc = SG_STORE_OK;
    int refused = 0;
    uint8_t st = SG_ST_OK;
    if (s->fd < 0) {
        int crc = connect_locked(s, sg_now_s() + timeout);
        if (crc == REFUSED) refused = 1;
        rc = crc == SG_STORE_OK || crc == SG_STORE_INTERRUPTED ? (sg_store_rc)crc : SG_STORE_ERROR;
    }
    if (rc == SG_STORE_OK) rc = request_locked(s, op, key, val, vlen, out, outlen, timeout, &st);
    if (rc != SG_STORE_OK && s->fd >= 0) {
        close(s->fd);
        s->fd = -1;
    }
    pthread_mutex_unlock(&s->mu);
    if (rc != SG_STORE_OK && out && *out) { /* a refusal's detail: not for these callers */
        free(*out);
        *out = NULL;
    }
    if (s->quiet || rc == SG_STORE_INTERRUPTED || refused) return rc;
    if (st == SG_ST_FULL)
        SG_ERROR(
            "rank %d: the rendezvous store at %s:%d is full (over %zu bytes of keys and values): a "
            "request for '%.64s' was refused",
            s->rank, s->addr, s->port, SG_STORE_MAX_TOTAL, key);
    else if (st != SG_ST_OK)
        SG_ERROR("rank %d: the rendezvous store at %s:%d refused a request for '%.64s' (status %d)",
                 s->rank, s->addr, s->port, key, st);
    else if (rc == SG_STORE_ERROR)
        SG_ERROR("rank %d: lost the connection to the rendezvous store at %s:%d, hosted by rank 0: "
                 "rank 0 exited or crashed; see its log",
                 s->rank, s->addr, s->port);
    else if (rc == SG_STORE_TIMEOUT && op != SG_OP_GET)
        SG_ERROR(
            "rank %d: the rendezvous store at %s:%d (hosted by rank 0) did not answer within %.0f s: "
            "rank 0 is stopped or hung",
            s->rank, s->addr, s->port, timeout);
    return rc;
}

sg_store *sg_store_create(const char *addr, int port, int rank, int world, double timeout_s,
                          const sg_store_opts *o) {
    if (!o || !o->token || !*o->token || strlen(o->token) > SG_TOKEN_MAX) {
        SG_ERROR(
            "rank %d: the rendezvous store needs a job token of 1 to %d bytes (internal error)",
            rank, SG_TOKEN_MAX);
        return NULL;
    }
    sg_store *s = calloc(1, sizeof *s);
    SG_CHECK(s, "out of memory");
    snprintf(s->token, sizeof s->token, "%s", o->token);
    s->stop = o->stop;
    snprintf(s->addr, sizeof s->addr, "%s", addr);
    s->port = port;
    s->rank = rank;
    s->world = world;
    s->timeout_s = timeout_s;
    s->fd = -1;
    pthread_mutex_init(&s->mu, NULL);
    pthread_mutex_init(&s->hb_mu, NULL);
    pthread_cond_init(&s->hb_cv, NULL);
    if (rank == 0) {
        sg_store_server_opts so = {.token = o->token, .world = world, .multi_node = o->multi_node};
        s->server = sg_store_server_start(addr, port, &so);
        if (!s->server) {
            free(s);
            return NULL;
        }
        s->port = sg_store_server_port(s->server);
    }
    pthread_mutex_lock(&s->mu);
    int rc = connect_locked(s, sg_now_s() + timeout_s);
    pthread_mutex_unlock(&s->mu);
    if (rc != SG_STORE_OK) {
        if (rc == SG_STORE_INTERRUPTED)
            SG_INFO("rank %d: stopped while connecting to the rendezvous store at %s:%d", rank,
                    addr, s->port);
        else if (rc != REFUSED)
            SG_ERROR(
                "rank %d: could not reach the rendezvous store at %s:%d within dist.timeout_s=%.0f s: "
                "rank 0 hosts it; is rank 0 running, and are MASTER_ADDR/MASTER_PORT the same on every "
                "rank?",
                rank, addr, s->port, timeout_s);
        sg_store_server_stop(s->server);
        free(s);
        return NULL;
    }
    return s;
}

sg_store_server *sg_store_hosted_server(sg_store *s) { return s->server; }

void sg_store_set_stop(sg_store *s, const volatile sig_atomic_t *stop) {
    pthread_mutex_lock(&s->mu);
    s->stop = stop;
    pthread_mutex_unlock(&s->mu);
}

sg_store *sg_store_clone(const sg_store *src) {
    sg_store *s = calloc(1, sizeof *s);
    SG_CHECK(s, "out of memory");
    memcpy(s->addr, src->addr, sizeof s->addr);
    s->port = src->port;
    s->rank = src->rank;
    s->world = src->world;
    s->timeout_s = src->timeout_s;
    memcpy(s->token, src->token, sizeof s->token);
    s->is_clone = 1;
    s->fd = -1;
    pthread_mutex_init(&s->mu, NULL);
    pthread_mutex_init(&s->hb_mu, NULL);
    pthread_cond_init(&s->hb_cv, NULL);
    pthread_mutex_lock(&s->mu);
    int rc = connect_locked(s, sg_now_s() + s->timeout_s);
    pthread_mutex_unlock(&s->mu);
    if (rc != SG_STORE_OK) {
        SG_ERROR("rank %d: could not open a second connection to the rendezvous store at %s:%d",
                 s->rank, s->addr, s->port);
        free(s);
        return NULL;
    }
    return s;
}

int sg_store_port(const sg_store *s) { return s->port; }
int sg_store_rank(const sg_store *s) { return s->rank; }
int sg_store_world(const sg_store *s) { return s->world; }
double sg_store_timeout(const sg_store *s) { return s->timeout_s; }
void sg_store_set_timeout(sg_store *s, double t) { s->timeout_s = t; }
void sg_store_set_quiet(sg_store *s, int quiet) { s->quiet = quiet; }

sg_store_rc sg_store_set(sg_store *s, const char *key, const void *val, size_t len) {
    if (len > SG_STORE_MAX_VAL) {
        SG_ERROR("rank %d: store value for '%s' is %zu bytes, over the %u limit", s->rank, key, len,
                 SG_STORE_MAX_VAL);
        return SG_STORE_ERROR;
    }
    return request(s, SG_OP_SET, key, val, (uint32_t)len, NULL, NULL, s->timeout_s);
}

sg_store_rc sg_store_get(sg_store *s, const char *key, void **val, size_t *len) {
    return request(s, SG_OP_GET, key, NULL, 0, val, len, s->timeout_s);
}

sg_store_rc sg_store_wait(sg_store *s, const char *key) {
    return request(s, SG_OP_GET, key, NULL, 0, NULL, NULL, s->timeout_s);
}

sg_store_rc sg_store_check(sg_store *s, const char *key, int *exists) {
    void *v = NULL;
    size_t n = 0;
    sg_store_rc rc = request(s, SG_OP_CHECK, key, NULL, 0, &v, &n, s->timeout_s);
    if (rc == SG_STORE_OK) *exists = n == 1 && ((uint8_t *)v)[0];
    free(v);
    return rc;
}

sg_store_rc sg_store_add(sg_store *s, const char *key, int64_t delta, int64_t *out) {
    void *v = NULL;
    size_t n = 0;
    sg_store_rc rc = request(s, SG_OP_ADD, key, &delta, 8, &v, &n, s->timeout_s);
    if (rc == SG_STORE_OK && n == 8 && out) memcpy(out, v, 8);
    free(v);
    return rc;
}

/* Logs the ranks missing from barrier `name` (keys barrier/<name>/<r>). */
static void name_missing(sg_store *s, const char *prefix, const char *what) {
    char missing[512] = "";
    size_t ml = 0;
    int n = 0;
    for (int r = 0; r < s->world; r++) {
        char key[512];
        snprintf(key, sizeof key, "%s/%d", prefix, r);
        int ex = 1;
        if (sg_store_check(s, key, &ex) != SG_STORE_OK) return;
        if (!ex && ml < sizeof missing - 16) {
            ml += (size_t)snprintf(missing + ml, sizeof missing - ml, "%s%d", n ? ", " : "", r);
            n++;
        }
    }
    SG_ERROR("rank %d: %s timed out after dist.timeout_s=%.0f s: rank(s) %s did not arrive "
             "(crashed, stopped or still busy: see their logs)",
             s->rank, what, s->timeout_s, n ? missing : "(none missing now: they arrived late)");
}

sg_store_rc sg_store_barrier(sg_store *s, const char *name) {
    char prefix[400], key[512];
    int seq = s->barrier_seq++;
    snprintf(prefix, sizeof prefix, "barrier/%s/%d", name, seq);
    snprintf(key, sizeof key, "%s/%d", prefix, s->rank);
    const char one = 1;
    if (sg_store_set(s, key, &one, 1) != SG_STORE_OK) return SG_STORE_ERROR;
    snprintf(key, sizeof key, "%s/count", prefix);
    int64_t count = 0;
    if (sg_store_add(s, key, 1, &count) != SG_STORE_OK) return SG_STORE_ERROR;
    snprintf(key, sizeof key, "%s/done", prefix);
    if (count == s->world && sg_store_set(s, key, &one, 1) != SG_STORE_OK) return SG_STORE_ERROR;
    sg_store_rc rc = sg_store_wait(s, key);
    if (rc == SG_STORE_TIMEOUT) {
        char what[512];
        snprintf(what, sizeof what, "store barrier '%s'", name);
        name_missing(s, prefix, what);
        return SG_STORE_ERROR;
    }
    return rc;
}

sg_store_rc sg_store_leave(sg_store *s) {
    int64_t n;
    return sg_store_add(s, SG_STORE_LEFT_KEY, 1, &n);
}

/* ---- heartbeats and diagnosis ---- */

static void *hb_main(void *arg) {
    sg_store *s = arg;
    char key[64];
    snprintf(key, sizeof key, SG_STORE_HB_PREFIX "%d", s->rank);
    pthread_mutex_lock(&s->hb_mu);
    while (!s->hb_stop) {
        pthread_mutex_unlock(&s->hb_mu);
        /* the heartbeat connection fails when rank 0 is gone: stop quietly
         * (the hb handle is quiet), the training thread reports it */
        int64_t one = 1;
        double t = s->hb_store->timeout_s; /* not s->timeout_s: other threads set that */
        sg_store_rc rc = request(s->hb_store, SG_OP_ADD, key, &one, 8, NULL, NULL, t);
        if (rc != SG_STORE_OK) {
            pthread_mutex_lock(&s->hb_mu);
            break;
        }
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 500 * 1000 * 1000;
        if (ts.tv_nsec >= 1000000000) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000;
        }
        pthread_mutex_lock(&s->hb_mu);
        if (!s->hb_stop) pthread_cond_timedwait(&s->hb_cv, &s->hb_mu, &ts);
    }
    pthread_mutex_unlock(&s->hb_mu);
    return NULL;
}

sg_status sg_store_heartbeat_start(sg_store *s) {
    s->hb_store = sg_store_clone(s);
    if (!s->hb_store) return SG_ERR_RUNTIME; /* logged by sg_store_clone */
    s->hb_store->quiet = 1;
    s->hb_stop = 0;
    /* born with every signal blocked (core/sigmask.h): signals go to the
     * training thread (its stop flag), not here */
    sigset_t old;
    sg_sigmask_block_all(&old);
    int e = pthread_create(&s->hb_thread, NULL, hb_main, s);
    sg_sigmask_restore(&old);
    if (e) {
        SG_ERROR("rank %d: pthread_create for the heartbeat thread failed", s->rank);
        sg_store_destroy(s->hb_store);
        s->hb_store = NULL;
        return SG_ERR_RUNTIME;
    }
    s->hb_running = 1;
    return SG_OK;
}

/* Has the caller of sg_store_diagnose_stoppable been told to stop? */
static int diag_stopped(const sg_store *s) { return s->diag_stop && *s->diag_stop; }

/* Every rank's dead flag and heartbeat counter; the first failed request's
 * outcome (the handle is quiet here: nothing logged; SG_STORE_INTERRUPTED
 * once the diagnosis is stopped). */
static sg_store_rc read_counters(sg_store *s, int64_t *hb, int *dead) {
    for (int r = 0; r < s->world; r++) {
        if (diag_stopped(s)) return SG_STORE_INTERRUPTED;
        char key[64];
        snprintf(key, sizeof key, SG_STORE_DEAD_PREFIX "%d", r);
        sg_store_rc rc = sg_store_check(s, key, &dead[r]);
        if (rc != SG_STORE_OK) return rc;
        snprintf(key, sizeof key, SG_STORE_HB_PREFIX "%d", r);
        rc = sg_store_add(s, key, 0, &hb[r]);
        if (rc != SG_STORE_OK) return rc;
    }
    return SG_STORE_OK;
}

/* Sleeps t seconds, in 50 ms slices so that a stop during a diagnosis
 * ends it within 50 ms. */
static void sleep_s(const sg_store *s, double t) {
    double end = sg_now_s() + t;
    for (double left = t; left > 0 && !diag_stopped(s); left = end - sg_now_s()) {
        double d = left < 0.05 ? left : 0.05;
        struct timespec ts = {0, (long)(d * 1e9)};
        nanosleep(&ts, NULL);
    }
}

/* Reads every rank's counters twice, probe_s apart, into state (one
 * SG_RANK_* byte per rank; this rank is SG_RANK_OK). 0, or 1 after writing
 * the sentence for an unreachable store into out. */
static int probe_all(sg_store *s, double probe_s, uint8_t *state, char *out, size_t outlen) {
    int w = s->world;
    int64_t *hb0 = calloc((size_t)w, sizeof *hb0), *hb1 = calloc((size_t)w, sizeof *hb1);
    int *dead = calloc((size_t)w, sizeof *dead), *dead1 = calloc((size_t)w, sizeof *dead1);
    SG_CHECK(hb0 && hb1 && dead && dead1, "out of memory");
    int failed = 0;
    memset(state, SG_RANK_OK, (size_t)w);
    if (read_counters(s, hb0, dead) != SG_STORE_OK) {
        if (s->rank != 0) {
            snprintf(out, outlen,
                     "Rank 0 (hosts the rendezvous store) is not reachable: it crashed, "
                     "was killed or is stopped.");
            state[0] = SG_RANK_UNREACHABLE;
        }
        failed = 1;
    } else {
        sleep_s(s, probe_s);
        if (read_counters(s, hb1, dead1) != SG_STORE_OK) {
            snprintf(out, outlen, "Rank 0 (hosts the rendezvous store) stopped answering.");
            if (s->rank != 0) state[0] = SG_RANK_UNREACHABLE;
            failed = 1;
        } else {
            for (int r = 0; r < w; r++)
                if (r != s->rank)
                    state[r] = dead1[r]           ? SG_RANK_DEAD
                               : hb1[r] == hb0[r] ? SG_RANK_HUNG
                                                  : SG_RANK_OK;
        }
    }
    free(hb0);
    free(hb1);
    free(dead);
    free(dead1);
    return failed;
}

/* The sentence naming the dead and hung ranks of state (this rank left
 * out: it is alive); returns how many it names. */
static int describe(const sg_store *s, const uint8_t *state, char *out, size_t outlen) {
    int named = 0;
    size_t ol = 0;
    out[0] = 0;
    for (int r = 0; r < s->world && ol < outlen - 1; r++) {
        if (r == s->rank) continue;
        const char *why = NULL;
        if (state[r] == SG_RANK_DEAD) why = "exited or was killed (its connection closed)";
        else if (state[r] == SG_RANK_HUNG) why = "is stopped or hung (no heartbeat)";
        if (!why) continue;
        ol += (size_t)snprintf(out + ol, outlen - ol, "%sRank %d %s", named ? "; " : "", r, why);
        named++;
        if (ol >= outlen) ol = outlen - 1;
    }
    if (named && ol < outlen - 2) snprintf(out + ol, outlen - ol, ".");
    return named;
}

/* The rank that announced itself at wkey as the diagnosing one -> *winner
 * (-1: none yet, or not a rank of this world); the request's outcome. */
static sg_store_rc read_winner(sg_store *s, const char *wkey, int64_t *winner) {
    int ex = 0;
    *winner = -1;
    sg_store_rc rc = sg_store_check(s, wkey, &ex);
    if (rc != SG_STORE_OK || !ex) return rc;
    void *v = NULL;
    size_t n = 0;
    rc = sg_store_get(s, wkey, &v, &n);
    if (rc == SG_STORE_OK && n == 8) memcpy(winner, v, 8);
    free(v);
    if (*winner >= s->world) *winner = -1;
    return rc;
}

/* A rank that lost the claim: waits for the verdict of the rank that won
 * it. 1 with state filled; 0 when the winner stopped (dead, or its
 * heartbeat stalled, or it never announced itself) or the wait passed its
 * bound: the caller then probes itself (logged here). Polls with CHECK,
 * 0.1 s apart growing to 1 s (a few requests per rank): a parked GET that
 * timed out would close this rank's connection, which the store takes for
 * its death. */
static int await_verdict(sg_store *s, int seq, double probe_s, uint8_t *state) {
    char vkey[64], wkey[64], key[64];
    snprintf(vkey, sizeof vkey, SG_STORE_DIAG_PREFIX "%d/verdict", seq);
    snprintf(wkey, sizeof wkey, SG_STORE_DIAG_PREFIX "%d/winner", seq);
    /* the winner probes probe_s apart and makes 4 requests per rank */
    double deadline = sg_now_s() + 3.0 * probe_s + 5.0 + 0.004 * s->world;
    double live_every = probe_s < 1.0 ? 1.0 : probe_s;
    /* no verdict can come sooner than probe_s; the first liveness check one
     * interval later (a verdict usually comes first: fewer requests) */
    sleep_s(s, probe_s + 0.1);
    int64_t winner = -1, hb_prev = 0;
    int have_prev = 0;
    double next_live = sg_now_s() + live_every, gap = 0.1;
    const char *why = NULL;
    for (;;) {
        int ex = 0;
        if (diag_stopped(s)) return 0;
        if (sg_store_check(s, vkey, &ex) != SG_STORE_OK) return 0;
        if (ex) {
            void *v = NULL;
            size_t n = 0;
            if (sg_store_get(s, vkey, &v, &n) != SG_STORE_OK) return 0;
            int ok = n == (size_t)s->world; /* one OK, DEAD or HUNG byte per rank */
            for (size_t r = 0; ok && r < n; r++) ok = ((uint8_t *)v)[r] <= SG_RANK_HUNG;
            if (ok) memcpy(state, v, n);
            free(v);
            if (ok) return 1;
            why = "published a malformed verdict";
            if (winner < 0 && read_winner(s, wkey, &winner) != SG_STORE_OK) return 0;
            break;
        }
        double now = sg_now_s();
        if (now >= deadline) {
            why = "did not publish its verdict in time";
            break;
        }
        if (now >= next_live) {
            next_live = now + live_every;
            if (winner < 0) {
                if (read_winner(s, wkey, &winner) != SG_STORE_OK) return 0;
                if (winner < 0) {
                    why = "never announced itself (or announced an impossible rank)";
                    break;
                }
            }
            snprintf(key, sizeof key, SG_STORE_DEAD_PREFIX "%d", (int)winner);
            if (sg_store_check(s, key, &ex) != SG_STORE_OK) return 0;
            if (ex) {
                why = "exited or was killed";
                break;
            }
            int64_t hb = 0;
            snprintf(key, sizeof key, SG_STORE_HB_PREFIX "%d", (int)winner);
            if (sg_store_add(s, key, 0, &hb) != SG_STORE_OK) return 0;
            if (have_prev && hb == hb_prev) {
                why = "stopped (no heartbeat)";
                break;
            }
            hb_prev = hb;
            have_prev = 1;
        }
        sleep_s(s, gap);
        gap = gap * 1.5 > 1.0 ? 1.0 : gap * 1.5; /* a slow winner: fewer polls */
    }
    if (winner >= 0)
        SG_WARN("rank %d: rank %d, which was diagnosing the failure for every rank, %s: this rank "
                "diagnoses it itself",
                s->rank, (int)winner, why);
    else
        SG_WARN("rank %d: the rank diagnosing the failure for every rank %s: this rank diagnoses "
                "it itself",
                s->rank, why);
    return 0;
}

/* One rank diagnoses, the others read its verdict: the first to add 1 to
 * __diag/SEQ/claim announces itself at __diag/SEQ/winner, probes every
 * rank (4 N requests) and publishes one state byte per rank at
 * __diag/SEQ/verdict; the others poll for it (a few requests each), so a
 * failure every rank notices costs O(N) requests, not O(N^2). A winner
 * that dies or hangs while probing is noticed by its dead flag or stalled
 * heartbeat, and the others then probe themselves. */
int sg_store_diagnose(sg_store *s, double probe_s, char *out, size_t outlen, int *state) {
    return sg_store_diagnose_stoppable(s, probe_s, NULL, out, outlen, state);
}

int sg_store_diagnose_stoppable(sg_store *s, double probe_s, const volatile sig_atomic_t *stop,
                                char *out, size_t outlen, int *state) {
    int w = s->world;
    s->diag_stop = stop;
    if (state)
        for (int r = 0; r < w; r++) state[r] = SG_RANK_OK;
    uint8_t *st = malloc((size_t)w);
    SG_CHECK(st, "out of memory");
    memset(st, SG_RANK_OK, (size_t)w);
    double saved = s->timeout_s;
    int saved_quiet = s->quiet;
    s->timeout_s = probe_s + 2.0;
    s->quiet = 1;
    int named = 0, seq = s->diag_seq++;
    out[0] = 0;
    char key[64];
    snprintf(key, sizeof key, SG_STORE_DIAG_PREFIX "%d/claim", seq);
    int64_t claim = 0;
    if (sg_store_add(s, key, 1, &claim) != SG_STORE_OK) {
        if (s->rank != 0) {
            snprintf(out, outlen,
                     "Rank 0 (hosts the rendezvous store) is not reachable: it crashed, "
                     "was killed or is stopped.");
            st[0] = SG_RANK_UNREACHABLE;
            named = 1;
        }
        goto done;
    }
    if (claim != 1 && await_verdict(s, seq, probe_s, st)) {
        st[s->rank] = SG_RANK_OK; /* alive: this rank is asking */
        named = describe(s, st, out, outlen);
        goto done;
    }
    int64_t me = s->rank;
    if (claim == 1) {
        snprintf(key, sizeof key, SG_STORE_DIAG_PREFIX "%d/winner", seq);
        if (sg_store_set(s, key, &me, 8) != SG_STORE_OK) {
            snprintf(out, outlen, "Rank 0 (hosts the rendezvous store) stopped answering.");
            if (s->rank != 0) st[0] = SG_RANK_UNREACHABLE;
            named = 1;
            goto done;
        }
    }
    if (probe_all(s, probe_s, st, out, outlen)) {
        named = out[0] != 0;
        goto done;
    }
    named = describe(s, st, out, outlen);
    if (claim == 1) { /* the others wait for it (a failed SET: they time out and probe) */
        snprintf(key, sizeof key, SG_STORE_DIAG_PREFIX "%d/verdict", seq);
        sg_store_set(s, key, st, (size_t)w);
    }
done:
    if (diag_stopped(s)) { /* whatever was found is partial: name nobody */
        memset(st, SG_RANK_OK, (size_t)w);
        named = 0;
        snprintf(out, outlen,
                 "This rank was told to stop (signal %d) while it looked for the rank that failed, "
                 "so it names none: the launcher's summary does.",
                 (int)*stop);
    }
    s->diag_stop = NULL;
    if (state)
        for (int r = 0; r < w; r++) state[r] = st[r];
    s->timeout_s = saved;
    s->quiet = saved_quiet;
    free(st);
    return named;
}

void sg_store_destroy(sg_store *s) {
    if (!s) return;
    if (s->hb_running) {
        pthread_mutex_lock(&s->hb_mu);
        s->hb_stop = 1;
        pthread_cond_signal(&s->hb_cv);
        pthread_mutex_unlock(&s->hb_mu);
        pthread_join(s->hb_thread, NULL);
        sg_store_destroy(s->hb_store);
    }
    if (s->server) {
        /* keep serving until every rank has left or died (or the timeout) */
        double deadline = sg_now_s() + s->timeout_s;
        for (;;) {
            int64_t left = 0;
            if (sg_store_add(s, SG_STORE_LEFT_KEY, 0, &left) != SG_STORE_OK || left >= s->world ||
                sg_now_s() > deadline)
                break;
            int dead = 0;
            for (int r = 0; r < s->world; r++) {
                char key[64];
                int ex = 0;
                snprintf(key, sizeof key, SG_STORE_DEAD_PREFIX "%d", r);
                if (sg_store_check(s, key, &ex) != SG_STORE_OK) break;
                dead += ex;
            }
            if (left + dead >= s->world) break;
            struct timespec ts = {0, 20 * 1000 * 1000};
            nanosleep(&ts, NULL);
        }
    }
    pthread_mutex_lock(&s->mu);
    if (s->fd >= 0) {
        request_locked(s, SG_OP_BYE, "", NULL, 0, NULL, NULL, 2.0, NULL);
        close(s->fd);
    }
    pthread_mutex_unlock(&s->mu);
    sg_store_server_stop(s->server);
    pthread_mutex_destroy(&s->mu);
    free(s);
}
