/* dist/store_server.c - the rendezvous store's server: one thread in rank
 * 0's process, a poll() loop over the listening socket and the clients, an
 * in-memory key-value table, blocked GETs parked until their key is set, and
 * liveness: a client that said HELLO(rank) and closes without BYE gets the
 * key "__dead/<rank>" set, so the other ranks can name it.
 *
 * Nothing here blocks but poll(): sockets are non-blocking, each
 * connection's answers queue in its own output buffer, and a connection
 * that lets that queue grow past SG_STORE_MAX_OUT (it sends requests without
 * reading the answers) is dropped and logged. A connection must say HELLO
 * with the job token first; without it the server buffers a HELLO's worth
 * of bytes, at most SG_STORE_MAX_PENDING such connections at a time, for
 * at most SG_STORE_HELLO_S. Request sizes are checked on the 9-byte header
 * before any body is buffered, and large bodies are read only within the
 * SG_STORE_INFLIGHT_MAX budget (limits in dist/store_proto.h). Drops of
 * one kind are logged for the first few connections, then counted; the
 * counts are logged when the server stops. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "core/log.h"
#include "core/sigmask.h"
#include "core/util.h"
#include "dist/net_addr.h"
#include "dist/store_proto.h"

#define LOG_FIRST 5 /* drops of one kind logged one by one; then counted */
#define IN_SMALL_CAP 4096

typedef struct kv {
    char *key;
    char *val;
    size_t len;
} kv;

typedef struct conn {
    int fd;
    char peer[64]; /* "a.b.c.d:port" */
    double t_open;
    int rank; /* -1 until HELLO */
    int authed, claimed, said_bye;
    uint8_t *in; /* the current request, read up to in_need */
    size_t in_len, in_cap, in_need;
    size_t reserved; /* bytes of the in-flight budget held */
    int header_ok;   /* in_need is the whole request's size */
    uint8_t *out;    /* queued answers: out[out_off..out_len) unsent */
    size_t out_off, out_len, out_cap;
    char *wait_key;   /* parked GET, or NULL */
    const char *drop; /* set: drop at the next sweep, with this reason */
    int drop_kind;    /* which counter and log budget */
    char why[192];    /* room for a reason that names a peer */
} conn;

enum { DROP_NONE, DROP_NO_TOKEN, DROP_SLOW, DROP_BAD, DROP_CLAIM, DROP_CLOSED, DROP_KINDS };

struct sg_store_server {
    int listen_fd;
    int port;
    char bound[INET_ADDRSTRLEN];
    char token[SG_TOKEN_MAX + 1];
    size_t token_len;
    int world;
    int wake[2]; /* pipe: stop request */
    pthread_t thread;
    atomic_int done; /* the thread has returned */
    kv *kvs;
    size_t n_kv, cap_kv, kv_bytes;
    /* open-addressing index of kvs by key hash (slot: kvs index + 1, 0
     * empty; keys are never removed): a lookup stays O(1) while every rank
     * publishes keys, where a scan of the table made start-up O(N^3) */
    uint32_t *index;
    size_t index_cap; /* a power of two, at least twice n_kv */
    conn **conns;
    size_t n_conns, cap_conns;
    size_t inflight;
    /* statistics (written by the thread, read by sg_store_server_get_stats) */
    atomic_size_t st_conns, st_buffered, st_inflight, st_peak;
    atomic_size_t st_drops[DROP_KINDS];
    atomic_size_t st_requests, st_largest; /* requests handled, largest value */
    double t_start;
    size_t buffered; /* thread-private running total */
    int full_logged;
};

/* ---- the table ---- */

static size_t kv_slot(const sg_store_server *s, const char *key) {
    return (size_t)sg_fnv1a_str(SG_FNV_OFFSET, key) & (s->index_cap - 1);
}

static kv *kv_find(sg_store_server *s, const char *key) {
    if (!s->index_cap) return NULL;
    for (size_t i = kv_slot(s, key);; i = (i + 1) & (s->index_cap - 1)) {
        uint32_t k = s->index[i];
        if (!k) return NULL;
        if (strcmp(s->kvs[k - 1].key, key) == 0) return &s->kvs[k - 1];
    }
}

/* Indexes kvs[n_kv - 1], growing (and rebuilding) the index first when it
 * would be over half full. */
static void kv_index_add(sg_store_server *s) {
    if (2 * s->n_kv > s->index_cap) {
        free(s->index);
        s->index_cap = s->index_cap ? 2 * s->index_cap : 256;
        s->index = calloc(s->index_cap, sizeof *s->index);
        SG_CHECK(s->index, "store server: out of memory");
        for (size_t j = 0; j + 1 < s->n_kv; j++) {
            size_t i = kv_slot(s, s->kvs[j].key);
            while (s->index[i]) i = (i + 1) & (s->index_cap - 1);
            s->index[i] = (uint32_t)(j + 1);
        }
    }
    size_t i = kv_slot(s, s->kvs[s->n_kv - 1].key);
    while (s->index[i]) i = (i + 1) & (s->index_cap - 1);
    s->index[i] = (uint32_t)s->n_kv;
}

/* NULL when the table would pass SG_STORE_MAX_TOTAL. */
static kv *kv_put(sg_store_server *s, const char *key, const void *val, size_t len) {
    kv *e = kv_find(s, key);
    size_t old = e ? e->len : 0, add = len + (e ? 0 : strlen(key) + 1);
    if (add > old && s->kv_bytes + (add - old) > SG_STORE_MAX_TOTAL) return NULL;
    if (!e) {
        if (s->n_kv == s->cap_kv) {
            s->cap_kv = s->cap_kv ? 2 * s->cap_kv : 64;
            s->kvs = realloc(s->kvs, s->cap_kv * sizeof *s->kvs);
            SG_CHECK(s->kvs, "store server: out of memory");
        }
        e = &s->kvs[s->n_kv++];
        e->key = strdup(key);
        e->val = NULL;
        e->len = 0;
        SG_CHECK(e->key, "store server: out of memory");
        s->kv_bytes += strlen(key) + 1;
        kv_index_add(s);
    }
    s->kv_bytes = s->kv_bytes - e->len + len;
    free(e->val);
    e->val = malloc(len ? len : 1);
    SG_CHECK(e->val, "store server: out of memory");
    memcpy(e->val, val, len);
    e->len = len;
    return e;
}

/* ---- accounting ---- */

static void account(sg_store_server *s, ssize_t delta) {
    s->buffered = (size_t)((ssize_t)s->buffered + delta);
    atomic_store(&s->st_buffered, s->buffered);
    if (s->buffered > atomic_load(&s->st_peak)) atomic_store(&s->st_peak, s->buffered);
}

static void mark_drop(conn *c, int kind, const char *why) {
    if (c->drop) return;
    c->drop = why;
    c->drop_kind = kind;
}

/* ---- output ---- */

/* Sends what is queued, without blocking. A send error marks the
 * connection for dropping (its close is seen as a death if it said HELLO). */
static void flush_out(conn *c) {
    while (c->out_off < c->out_len) {
        ssize_t w =
            send(c->fd, c->out + c->out_off, c->out_len - c->out_off, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w > 0) {
            c->out_off += (size_t)w;
            continue;
        }
        if (w < 0 && errno == EINTR) continue;
        if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
        mark_drop(c, DROP_CLOSED, "its connection failed");
        return;
    }
}

static void respond(sg_store_server *s, conn *c, uint8_t status, const void *val, uint32_t len) {
    if (c->drop) return;
    size_t queued = c->out_len - c->out_off, add = SG_STORE_RESP_HDR + (size_t)len;
    if (queued + add > SG_STORE_MAX_OUT) {
        mark_drop(c, DROP_SLOW,
                  "it sends requests without reading the answers (its unread answers "
                  "passed the per-connection cap)");
        return;
    }
    if (c->out_off == c->out_len) c->out_off = c->out_len = 0;
    if (c->out_len + add > c->out_cap) {
        if (c->out_off) { /* compact first */
            memmove(c->out, c->out + c->out_off, queued);
            c->out_len = queued;
            c->out_off = 0;
        }
        size_t cap = c->out_cap ? c->out_cap : 4096;
        while (cap < c->out_len + add) cap *= 2;
        if (cap != c->out_cap) {
            c->out = realloc(c->out, cap);
            SG_CHECK(c->out, "store server: out of memory");
            account(s, (ssize_t)cap - (ssize_t)c->out_cap);
            c->out_cap = cap;
        }
    }
    c->out[c->out_len] = status;
    memcpy(c->out + c->out_len + 1, &len, 4);
    if (len) memcpy(c->out + c->out_len + SG_STORE_RESP_HDR, val, len);
    c->out_len += add;
    flush_out(c);
    /* an emptied large buffer goes back */
    if (c->out_off == c->out_len && c->out_cap > (1u << 20)) {
        free(c->out);
        account(s, -(ssize_t)c->out_cap);
        c->out = NULL;
        c->out_cap = c->out_off = c->out_len = 0;
    }
}

/* A key was set: answer every GET parked on it. */
static void wake_waiters(sg_store_server *s, const kv *e) {
    for (size_t i = 0; i < s->n_conns; i++) {
        conn *c = s->conns[i];
        if (c->wait_key && strcmp(c->wait_key, e->key) == 0) {
            free(c->wait_key);
            c->wait_key = NULL;
            respond(s, c, SG_ST_OK, e->val, (uint32_t)e->len);
        }
    }
}

/* ---- requests ---- */

static void handle_hello(sg_store_server *s, conn *c, const sg_store_request *r) {
    sg_store_hello h;
    const char *why = NULL;
    if (sg_store_parse_hello(r->val, r->vlen, s->world, &h, &why) != SG_WIRE_OK) {
        respond(s, c, SG_ST_BAD, NULL, 0);
        flush_out(c);
        mark_drop(c, DROP_BAD, why);
        return;
    }
    if (!sg_token_equal(h.token, h.token_len, s->token, s->token_len)) {
        respond(s, c, SG_ST_WRONG_TOKEN, NULL, 0);
        flush_out(c);
        mark_drop(c, DROP_NO_TOKEN,
                  "it presented another job's token (another job on this port, or "
                  "a stranger)");
        return;
    }
    if (h.kind == SG_HELLO_CLAIM) {
        for (size_t i = 0; i < s->n_conns; i++) {
            conn *o = s->conns[i];
            if (o != c && o->claimed && o->rank == h.rank && !o->drop && !o->said_bye) {
                respond(s, c, SG_ST_RANK_TAKEN, o->peer, (uint32_t)strlen(o->peer) + 1);
                flush_out(c);
                snprintf(c->why, sizeof c->why,
                         "it claims rank %d, which the connection from %s holds "
                         "(a second claim to a rank is refused)",
                         h.rank, o->peer);
                mark_drop(c, DROP_CLAIM, c->why);
                return;
            }
        }
    }
    c->authed = 1;
    c->rank = h.rank;
    c->claimed = h.kind == SG_HELLO_CLAIM;
    respond(s, c, SG_ST_OK, NULL, 0);
}

static void handle(sg_store_server *s, conn *c, const sg_store_request *r) {
    if (r->op == SG_OP_HELLO) {
        handle_hello(s, c, r);
        return;
    }
    char key[SG_STORE_MAX_KEY + 1];
    memcpy(key, r->key, r->klen);
    key[r->klen] = 0;
    atomic_fetch_add(&s->st_requests, 1);
    if (r->op == SG_OP_SET && r->vlen > atomic_load(&s->st_largest))
        atomic_store(&s->st_largest, r->vlen);
    kv *e;
    switch (r->op) {
    case SG_OP_SET:
        e = kv_put(s, key, r->val, r->vlen);
        if (!e) {
            if (!s->full_logged++)
                SG_ERROR(
                    "rendezvous store: the table is full (%zu bytes, cap %zu): refused a SET of %u bytes "
                    "from %s (rank %d)",
                    s->kv_bytes, SG_STORE_MAX_TOTAL, r->vlen, c->peer, c->rank);
            respond(s, c, SG_ST_FULL, NULL, 0);
            break;
        }
        respond(s, c, SG_ST_OK, NULL, 0);
        wake_waiters(s, e);
        break;
    case SG_OP_GET:
        e = kv_find(s, key);
        if (e) {
            respond(s, c, SG_ST_OK, e->val, (uint32_t)e->len);
        } else {
            c->wait_key = strdup(key);
            SG_CHECK(c->wait_key, "store server: out of memory");
        }
        break;
    case SG_OP_ADD: {
        int64_t delta = 0, cur = 0;
        memcpy(&delta, r->val, 8);
        e = kv_find(s, key);
        if (e && e->len == 8) memcpy(&cur, e->val, 8);
        cur = (int64_t)((uint64_t)cur + (uint64_t)delta); /* wraps, never UB */
        e = kv_put(s, key, &cur, 8);
        if (!e) {
            respond(s, c, SG_ST_FULL, NULL, 0);
            break;
        }
        respond(s, c, SG_ST_OK, &cur, 8);
        wake_waiters(s, e);
        break;
    }
    case SG_OP_CHECK: {
        uint8_t ex = kv_find(s, key) != NULL;
        respond(s, c, SG_ST_OK, &ex, 1);
        break;
    }
    case SG_OP_BYE:
        c->said_bye = 1;
        respond(s, c, SG_ST_OK, NULL, 0);
        break;
    default: respond(s, c, SG_ST_BAD, NULL, 0); break;
    }
}

static void release_input(sg_store_server *s, conn *c) {
    s->inflight -= c->reserved;
    atomic_store(&s->st_inflight, s->inflight);
    c->reserved = 0;
    c->in_len = 0;
    c->in_need = SG_STORE_HDR;
    c->header_ok = 0;
    if (c->in_cap > IN_SMALL_CAP) { /* a large body's buffer goes back */
        free(c->in);
        account(s, -(ssize_t)c->in_cap);
        c->in = malloc(IN_SMALL_CAP);
        SG_CHECK(c->in, "store server: out of memory");
        account(s, IN_SMALL_CAP);
        c->in_cap = IN_SMALL_CAP;
    }
}

/* After new input: checks the header as soon as it is complete (refusing
 * oversized or out-of-place requests before their body), makes room for the
 * body within the budget, and handles a complete request. */
static void advance(sg_store_server *s, conn *c) {
    if (c->drop || c->wait_key) return;
    sg_store_request r;
    size_t need = 0;
    const char *why = NULL;
    sg_wire_result pr = sg_store_parse_request(c->in, c->in_len, c->authed, &r, &need, &why);
    if (pr == SG_WIRE_BAD) {
        mark_drop(c, c->authed ? DROP_BAD : DROP_NO_TOKEN, why);
        return;
    }
    if (pr == SG_WIRE_MORE) {
        if (c->in_len < SG_STORE_HDR || c->header_ok) return;
        c->header_ok = 1;
        c->in_need = need;
        return; /* room for the body: make_room, before the next read */
    }
    handle(s, c, &r);
    release_input(s, c);
}

/* 1 if the connection may read its body now (reserving budget if large). */
static int make_room(sg_store_server *s, conn *c) {
    if (c->in_need <= c->in_cap) return 1;
    if (c->in_need > SG_STORE_SMALL_REQ && !c->reserved) {
        if (s->inflight + c->in_need > SG_STORE_INFLIGHT_MAX) return 0; /* wait, unread */
        c->reserved = c->in_need;
        s->inflight += c->reserved;
        atomic_store(&s->st_inflight, s->inflight);
    }
    uint8_t *n = realloc(c->in, c->in_need);
    SG_CHECK(n, "store server: out of memory");
    account(s, (ssize_t)c->in_need - (ssize_t)c->in_cap);
    c->in = n;
    c->in_cap = c->in_need;
    return 1;
}

/* ---- connections ---- */

static const char *drop_kind_name(int k) {
    switch (k) {
    case DROP_NO_TOKEN: return "without the job token";
    case DROP_SLOW: return "not reading their answers";
    case DROP_BAD: return "with malformed or over-limit requests";
    case DROP_CLAIM: return "claiming a rank already connected";
    default: return "closed";
    }
}

static void close_conn(sg_store_server *s, size_t i) {
    conn *c = s->conns[i];
    int rank = c->authed ? c->rank : -1, bye = c->said_bye;
    if (c->drop_kind != DROP_CLOSED &&
        c->drop_kind != DROP_NONE) { /* logged before the peer sees the close */
        size_t n = atomic_fetch_add(&s->st_drops[c->drop_kind], 1) + 1;
        if (n <= LOG_FIRST) {
            char who[48] = "";
            if (c->authed) snprintf(who, sizeof who, " (rank %d)", c->rank);
            SG_WARN("rendezvous store: dropped the connection from %s%s: %s; the job goes on%s",
                    c->peer, who, c->drop,
                    n == LOG_FIRST ? " (further such drops are counted, not logged)" : "");
        }
    }
    close(c->fd);
    s->inflight -= c->reserved;
    atomic_store(&s->st_inflight, s->inflight);
    account(s, -(ssize_t)(c->in_cap + c->out_cap));
    free(c->in);
    free(c->out);
    free(c->wait_key);
    free(c);
    s->conns[i] = s->conns[--s->n_conns];
    atomic_store(&s->st_conns, s->n_conns);
    if (rank >= 0 && !bye) {
        char key[64];
        snprintf(key, sizeof key, SG_STORE_DEAD_PREFIX "%d", rank);
        const char v = 1;
        kv *e = kv_put(s, key, &v, 1);
        if (e) wake_waiters(s, e);
    }
}

/* Closes every connection marked for dropping (a close can wake parked GETs
 * whose answers mark others: repeat until none is left). */
static void sweep(sg_store_server *s) {
    for (;;) {
        size_t i = 0;
        while (i < s->n_conns && !s->conns[i]->drop) i++;
        if (i == s->n_conns) return;
        close_conn(s, i);
    }
}

static void accept_conn(sg_store_server *s) {
    struct sockaddr_in sa;
    socklen_t sl = sizeof sa;
    int fd = accept4(s->listen_fd, (struct sockaddr *)&sa, &sl, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) return;
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    /* too many connections without HELLO: the oldest goes (a flood of
     * silent connections cannot lock the ranks out; they retry) */
    size_t pending = 0, oldest = 0;
    for (size_t i = 0; i < s->n_conns; i++) {
        if (s->conns[i]->authed || s->conns[i]->drop) continue;
        if (!pending++ || s->conns[i]->t_open < s->conns[oldest]->t_open) oldest = i;
    }
    if (pending >= SG_STORE_MAX_PENDING)
        mark_drop(s->conns[oldest], DROP_NO_TOKEN, "too many connections waiting to say HELLO");
    if (s->n_conns == s->cap_conns) {
        s->cap_conns = s->cap_conns ? 2 * s->cap_conns : 16;
        s->conns = realloc(s->conns, s->cap_conns * sizeof *s->conns);
        SG_CHECK(s->conns, "store server: out of memory");
    }
    conn *c = calloc(1, sizeof *c);
    SG_CHECK(c, "store server: out of memory");
    c->fd = fd;
    c->rank = -1;
    c->t_open = sg_now_s();
    c->in_need = SG_STORE_HDR;
    c->in = malloc(IN_SMALL_CAP);
    SG_CHECK(c->in, "store server: out of memory");
    c->in_cap = IN_SMALL_CAP;
    account(s, IN_SMALL_CAP);
    char ip[INET_ADDRSTRLEN] = "?";
    inet_ntop(AF_INET, &sa.sin_addr, ip, sizeof ip);
    snprintf(c->peer, sizeof c->peer, "%s:%d", ip, ntohs(sa.sin_port));
    s->conns[s->n_conns++] = c;
    atomic_store(&s->st_conns, s->n_conns);
}

/* Reads what the connection may read now: never past the current request
 * (so no connection holds more than one), a bounded number of times (so
 * one fast sender cannot starve the others). */
static void read_conn(sg_store_server *s, conn *c) {
    for (int k = 0; k < 16; k++) {
        if (c->drop || c->wait_key || c->in_len >= c->in_need || !make_room(s, c)) return;
        ssize_t r = recv(c->fd, c->in + c->in_len, c->in_need - c->in_len, MSG_DONTWAIT);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
        if (r <= 0) {
            mark_drop(c, DROP_CLOSED, "closed");
            return;
        }
        c->in_len += (size_t)r;
        advance(s, c);
    }
}

static void *server_main(void *arg) {
    sg_store_server *s = arg;
    struct pollfd *pfd = NULL;
    size_t pcap = 0;
    for (;;) {
        size_t n = s->n_conns + 2;
        if (n > pcap) {
            pcap = 2 * n;
            pfd = realloc(pfd, pcap * sizeof *pfd);
            SG_CHECK(pfd, "store server: out of memory");
        }
        double now = sg_now_s();
        pfd[0] = (struct pollfd){.fd = s->wake[0], .events = POLLIN};
        pfd[1] = (struct pollfd){.fd = s->listen_fd, .events = POLLIN};
        int timeout_ms = -1;
        for (size_t i = 0; i < s->n_conns; i++) {
            conn *c = s->conns[i];
            short ev = POLLRDHUP;
            /* read while a request is incomplete and may be buffered;
             * a parked GET reads nothing more until it is answered */
            if (!c->wait_key && c->in_len < c->in_need && make_room(s, c)) ev |= POLLIN;
            if (c->out_off < c->out_len) ev |= POLLOUT;
            pfd[i + 2] = (struct pollfd){.fd = c->fd, .events = ev};
            if (!c->authed) { /* HELLO deadline */
                double left = c->t_open + SG_STORE_HELLO_S - now;
                int ms = left <= 0 ? 0 : (int)(left * 1000) + 1;
                if (timeout_ms < 0 || ms < timeout_ms) timeout_ms = ms;
            }
        }
        int rc = poll(pfd, n, timeout_ms);
        if (rc < 0) {
            if (errno == EINTR) continue;
            SG_ERROR("rendezvous store: poll failed: %s; the store stops", strerror(errno));
            break;
        }
        if (pfd[0].revents) break;
        now = sg_now_s();
        size_t nc = s->n_conns; /* conns added below are not in pfd */
        for (size_t i = 0; i < nc; i++) {
            conn *c = s->conns[i];
            short re = pfd[i + 2].revents;
            if (re & POLLOUT) flush_out(c);
            if (re & POLLIN) read_conn(s, c);
            else if (re & (POLLHUP | POLLERR | POLLRDHUP)) mark_drop(c, DROP_CLOSED, "closed");
            if (!c->authed && now - c->t_open > SG_STORE_HELLO_S)
                mark_drop(c, DROP_NO_TOKEN, "it did not say HELLO with the job token in time");
        }
        sweep(s);
        if (pfd[1].revents & POLLIN) accept_conn(s);
        sweep(s);
    }
    free(pfd);
    atomic_store(&s->done, 1);
    return NULL;
}

/* Every rank connects at once at start (and again after a restart): a
 * backlog of the world size keeps their SYNs from being dropped into
 * TCP's 1 s, 3 s, 7 s retransmission waits (the kernel caps it at
 * net.core.somaxconn, 4096 by default). */
static int listen_backlog(int world) { return world + 64 > 256 ? world + 64 : 256; }

sg_store_server *sg_store_server_start(const char *addr, int port, const sg_store_server_opts *o) {
    size_t tl = o && o->token ? strlen(o->token) : 0;
    if (tl == 0 || tl > SG_TOKEN_MAX) {
        SG_ERROR("rank 0: the rendezvous store needs a job token of 1 to %d bytes (internal error)",
                 SG_TOKEN_MAX);
        return NULL;
    }
    struct in_addr ia;
    char how[160], err[256];
    if (sg_net_listen_addr(addr, &ia, how, sizeof how, err, sizeof err) != SG_OK) {
        SG_ERROR("rank 0: cannot host the rendezvous store: %s", err);
        return NULL;
    }
    if (o->multi_node && sg_net_is_loopback(ia)) {
        /* a warning, not an error: several "nodes" on one host (containers
         * sharing its network, a test) do reach each other on loopback */
        char as[INET_ADDRSTRLEN];
        inet_ntop(AF_INET, &ia, as, sizeof as);
        SG_WARN(
            "rank 0: MASTER_ADDR=%s is the loopback address %s on this host, but the job spans several "
            "nodes: ranks on other hosts cannot reach the rendezvous store. If the nodes are separate "
            "hosts, set MASTER_ADDR (or --master-addr) to rank 0's address on the network they share (on "
            "Debian/Ubuntu the hostname often maps to 127.0.1.1 in /etc/hosts).",
            addr, as);
    }
    sg_store_server *s = calloc(1, sizeof *s);
    SG_CHECK(s, "out of memory");
    memcpy(s->token, o->token, tl);
    s->token_len = tl;
    s->world = o->world;
    s->t_start = sg_now_s();
    s->listen_fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    int one = 1;
    if (s->listen_fd >= 0) setsockopt(s->listen_fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in sa = {
        .sin_family = AF_INET, .sin_port = htons((uint16_t)port), .sin_addr = ia};
    inet_ntop(AF_INET, &ia, s->bound, sizeof s->bound);
    if (s->listen_fd < 0 || bind(s->listen_fd, (struct sockaddr *)&sa, sizeof sa) ||
        listen(s->listen_fd, listen_backlog(o->world))) {
        int e = errno;
        if (e == EADDRINUSE)
            SG_ERROR(
                "rank 0: another job (or program) holds port %d (%s:%d, MASTER_ADDR=%s): choose another "
                "--master-port (or MASTER_PORT)",
                port, s->bound, port, addr);
        else
            SG_ERROR(
                "rank 0: cannot host the rendezvous store on %s:%d (MASTER_ADDR=%s, MASTER_PORT): %s. "
                "Pick another port with --master-port or MASTER_PORT.",
                s->bound, port, addr, strerror(e));
        if (s->listen_fd >= 0) close(s->listen_fd);
        free(s);
        return NULL;
    }
    socklen_t sl = sizeof sa;
    getsockname(s->listen_fd, (struct sockaddr *)&sa, &sl);
    s->port = ntohs(sa.sin_port);
    SG_DEBUG("rank 0: rendezvous store listening on %s:%d (%s)", s->bound, s->port, how);
    /* resource failures end the start, not the process: the caller reports
     * that the store could not be hosted */
    if (pipe2(s->wake, O_CLOEXEC) != 0) {
        SG_ERROR("rank 0: cannot start the rendezvous store on port %d: pipe failed: %s (too many "
                 "open files? check ulimit -n)",
                 s->port, strerror(errno));
        close(s->listen_fd);
        free(s);
        return NULL;
    }
    /* born with every signal blocked (core/sigmask.h): a process-directed
     * signal goes to the thread that handles it (rank 0's training thread,
     * the launcher's loop), never to the store's thread */
    sigset_t old;
    sg_sigmask_block_all(&old);
    int e = pthread_create(&s->thread, NULL, server_main, s);
    sg_sigmask_restore(&old);
    if (e != 0) {
        SG_ERROR("rank 0: cannot start the rendezvous store's thread: pthread_create failed: %s "
                 "(too many threads or processes? check ulimit -u)",
                 strerror(e));
        close(s->wake[0]);
        close(s->wake[1]);
        close(s->listen_fd);
        free(s);
        return NULL;
    }
    return s;
}

int sg_store_server_port(const sg_store_server *s) { return s->port; }
const char *sg_store_server_bound(const sg_store_server *s) { return s->bound; }

void sg_store_server_get_stats(sg_store_server *s, sg_store_server_stats *out) {
    out->connections = atomic_load(&s->st_conns);
    out->buffered_bytes = atomic_load(&s->st_buffered);
    out->inflight_bytes = atomic_load(&s->st_inflight);
    out->peak_buffered = atomic_load(&s->st_peak);
    out->dropped_no_token = atomic_load(&s->st_drops[DROP_NO_TOKEN]);
    out->dropped_slow = atomic_load(&s->st_drops[DROP_SLOW]);
    out->dropped_bad = atomic_load(&s->st_drops[DROP_BAD]);
    out->refused_claims = atomic_load(&s->st_drops[DROP_CLAIM]);
    out->requests = atomic_load(&s->st_requests);
    out->largest_value = atomic_load(&s->st_largest);
}

void sg_store_server_stop(sg_store_server *s) {
    if (!s) return;
    char b = 1;
    if (write(s->wake[1], &b, 1) != 1)
        SG_WARN("rendezvous store: wake write failed: %s", strerror(errno));
    /* bounded: the thread only ever waits in poll, so it stops at once; if
     * it did not, rank 0 must still exit rather than wait forever */
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += (time_t)SG_STORE_STOP_S;
    int e = pthread_timedjoin_np(s->thread, NULL, &until);
    if (e != 0) {
        SG_ERROR(
            "rank 0: the rendezvous store's thread did not stop within %.0f s (%s); leaving it behind "
            "(this process is ending)",
            SG_STORE_STOP_S, strerror(e));
        pthread_detach(s->thread);
        return; /* its memory stays: the thread may still use it */
    }
    /* the control plane's load, for scripts/scale-test (docs/DISTRIBUTED.md "Scale") */
    double up = sg_now_s() - s->t_start;
    size_t nreq = atomic_load(&s->st_requests);
    SG_INFO("store: %zu requests in %.1f s (%.0f/s), largest value %zu bytes, %zu keys, %zu "
            "bytes held",
            nreq, up, up > 0 ? (double)nreq / up : 0.0, atomic_load(&s->st_largest), s->n_kv,
            s->kv_bytes);
    for (int k = DROP_NO_TOKEN; k < DROP_KINDS; k++) {
        size_t n = atomic_load(&s->st_drops[k]);
        if (n > LOG_FIRST)
            SG_WARN("rendezvous store: dropped %zu connections %s in all", n, drop_kind_name(k));
    }
    for (size_t i = 0; i < s->n_conns; i++) {
        close(s->conns[i]->fd);
        free(s->conns[i]->in);
        free(s->conns[i]->out);
        free(s->conns[i]->wait_key);
        free(s->conns[i]);
    }
    for (size_t i = 0; i < s->n_kv; i++) {
        free(s->kvs[i].key);
        free(s->kvs[i].val);
    }
    free(s->conns);
    free(s->kvs);
    free(s->index);
    close(s->listen_fd);
    close(s->wake[0]);
    close(s->wake[1]);
    free(s);
}
