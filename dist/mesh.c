/* dist/mesh.c - direct TCP connections between every pair of ranks for
 * the training thread's collectives (dist/mesh.h). Owns the listening socket during setup
 * and one connected socket per peer. */
#include "dist/mesh.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "core/log.h"
#include "core/test_seams.h"
#include "core/util.h"
#include "dist/mesh_wire.h"
#include "dist/net_addr.h"

/* Connections waiting for their handshake at most this many at a time (a
 * new one pushes out the oldest), each at most this long. */
#define MESH_MAX_PENDING 16
#define MESH_HELLO_S 10.0
#define MESH_LOG_FIRST 5

struct sg_mesh {
    int rank, world;
    double timeout_s;
    int *fd;      /* per peer; -1 for self */
    uint32_t seq; /* collectives so far (every rank counts the same) */
    /* test seam (SG_TEST_MESH_KILL, see mesh.h): this rank SIGKILLs itself
     * at the kill_nth collective of kill_bytes per rank (0: of any size);
     * kill_nth 0: never. In every build, so that the layout does not depend
     * on -Dtest_seams; set and read only in builds with the seams. */
    long kill_bytes, kill_nth, kill_seen;
};

#if SG_TEST_SEAMS
/* Reads SG_TEST_MESH_KILL=RANK:BYTES:NTH into m. SG_OK (unset, or set for
 * another rank), or SG_ERR_CONFIG after logging a malformed value. */
static sg_status read_kill_seam(sg_mesh *m) {
    const char *v = sg_test_seam("SG_TEST_MESH_KILL");
    if (!v || !*v) return SG_OK;
    char buf[64];
    long f[3];
    snprintf(buf, sizeof buf, "%s", v);
    char *save = NULL, *tok = strtok_r(buf, ":", &save);
    int n = 0;
    for (; tok && n < 3; tok = strtok_r(NULL, ":", &save), n++)
        if (sg_parse_long(tok, n == 2 ? 1 : 0, n == 0 ? 1 << 20 : 1L << 30, &f[n])) break;
    if (n != 3 || tok || strlen(v) >= sizeof buf) {
        SG_ERROR("rank %d: SG_TEST_MESH_KILL='%s' is not RANK:BYTES:NTH (a test seam: the rank "
                 "kills itself at its NTH mesh collective of BYTES bytes per rank, 0: any size); "
                 "unset it",
                 m->rank, v);
        return SG_ERR_CONFIG;
    }
    if (f[0] != m->rank) return SG_OK;
    m->kill_bytes = f[1];
    m->kill_nth = f[2];
    SG_WARN("rank %d: SG_TEST_MESH_KILL is set: this rank kills itself (SIGKILL) at its mesh "
            "collective %ld of %ld bytes (a test seam)",
            m->rank, m->kill_nth, m->kill_bytes);
    return SG_OK;
}

/* The seam's kill, as this rank starts a collective of `bytes` per rank. */
static void kill_seam_point(sg_mesh *m, size_t bytes) {
    if (m->kill_nth && (!m->kill_bytes || (long)bytes == m->kill_bytes) &&
        ++m->kill_seen == m->kill_nth)
        raise(SIGKILL); /* die as `kill -9` would, mid-step */
}
#endif

static void tune(int fd) {
    int one = 1, buf = 1 << 20;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &buf, sizeof buf);
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &buf, sizeof buf);
}

static int stopped(const volatile sig_atomic_t *stop) { return stop && *stop; }

/* A connected socket (an fd), or -1 after the deadline or the stop flag. */
static int connect_to(const char *host, int port, double deadline,
                      const volatile sig_atomic_t *stop) {
    char ps[16];
    snprintf(ps, sizeof ps, "%d", port);
    struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM}, *ai = NULL;
    if (getaddrinfo(host, ps, &hints, &ai)) return -1;
    int fd = -1;
    while (sg_now_s() < deadline && !stopped(stop)) {
        fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd >= 0 && connect(fd, ai->ai_addr, ai->ai_addrlen) == 0) break;
        if (fd >= 0) close(fd);
        fd = -1;
        struct timespec ts = {0, 50 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    freeaddrinfo(ai);
    return fd;
}

/* Blocking exact write/read before the deadline (setup only). SG_OK, or
 * SG_ERR_RUNTIME (closed, failed, the deadline or the stop flag; not logged:
 * the caller names the peer). */
static sg_status xfer(int fd, void *p, size_t n, int writing, double deadline,
                      const volatile sig_atomic_t *stop) {
    char *c = p;
    while (n) {
        if (stopped(stop)) return SG_ERR_RUNTIME;
        struct pollfd pfd = {.fd = fd, .events = writing ? POLLOUT : POLLIN};
        double left = deadline - sg_now_s();
        if (left > 0.1 && stop) left = 0.1;
        if (left <= 0) return SG_ERR_RUNTIME;
        int pr = poll(&pfd, 1, (int)(left * 1000) + 1);
        if (pr < 0 && errno != EINTR) return SG_ERR_RUNTIME;
        if (pr <= 0) continue;
        ssize_t k = writing ? send(fd, c, n, MSG_NOSIGNAL) : recv(fd, c, n, 0);
        if (k < 0 && (errno == EINTR || errno == EAGAIN)) continue;
        if (k <= 0) return SG_ERR_RUNTIME;
        c += k;
        n -= (size_t)k;
    }
    return SG_OK;
}

/* A connection accepted but not yet through its handshake. */
typedef struct pending {
    int fd;
    char peer[64];
    uint8_t buf[SG_MESH_HELLO_MAX];
    size_t len;
    double t0;
} pending;

typedef struct acceptor {
    int rank, world, lfd;
    const char *token;
    size_t token_len;
    pending p[MESH_MAX_PENDING];
    int np;
    char (*peer_of)[64]; /* per rank: where its accepted connection came from */
    int logged;
} acceptor;

static void drop_pending(acceptor *a, int i, uint8_t ack, const char *fmt_why, const char *detail) {
    pending *p = &a->p[i];
    if (ack != 0xff) (void)!send(p->fd, &ack, 1, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (a->logged++ < MESH_LOG_FIRST)
        SG_WARN(
            "rank %d: dropped a connection to the small-collective mesh from %s: %s%s; the job goes on",
            a->rank, p->peer, fmt_why, detail ? detail : "");
    close(p->fd);
    a->p[i] = a->p[--a->np];
}

/* Reads a pending connection's handshake bytes and acts on a complete one. */
static void advance_pending(acceptor *a, int i, int *fds) {
    pending *p = &a->p[i];
    sg_mesh_hello h;
    size_t need = SG_MESH_HELLO_FIXED;
    const char *why = NULL;
    sg_mesh_wire_result pr =
        sg_mesh_parse_hello(p->buf, p->len, a->rank, a->world, &h, &need, &why);
    if (pr == SG_MESH_WIRE_MORE) {
        ssize_t r = recv(p->fd, p->buf + p->len, need - p->len, MSG_DONTWAIT);
        if (r < 0 && (errno == EAGAIN || errno == EINTR)) return;
        if (r <= 0) {
            drop_pending(a, i, 0xff, "it closed before its handshake", NULL);
            return;
        }
        p->len += (size_t)r;
        pr = sg_mesh_parse_hello(p->buf, p->len, a->rank, a->world, &h, &need, &why);
        if (pr == SG_MESH_WIRE_MORE) return;
    }
    if (pr == SG_MESH_WIRE_BAD) {
        drop_pending(a, i, SG_MESH_ACK_BAD, why, NULL);
        return;
    }
    if (!sg_token_equal(h.token, h.token_len, a->token, a->token_len)) {
        drop_pending(a, i, SG_MESH_ACK_WRONG_TOKEN, "it presented another job's token", NULL);
        return;
    }
    if (fds[h.rank] >= 0) {
        char d[160];
        snprintf(d, sizeof d, " (rank %d, already connected from %s: a second claim is refused)",
                 h.rank, a->peer_of[h.rank]);
        drop_pending(a, i, SG_MESH_ACK_RANK_TAKEN, "it claims a rank that is connected", d);
        return;
    }
    uint8_t ok = SG_MESH_ACK_OK;
    if (send(p->fd, &ok, 1, MSG_NOSIGNAL | MSG_DONTWAIT) != 1) {
        drop_pending(a, i, 0xff, "its connection failed during the handshake", NULL);
        return;
    }
    fds[h.rank] = p->fd;
    snprintf(a->peer_of[h.rank], 64, "%s", p->peer);
    a->p[i] = a->p[--a->np];
}

/* Accepts every higher rank's connection until the deadline: handshakes
 * read without blocking, so a stranger's connection (silent, garbage, the
 * wrong token, a second claim to a rank) is dropped and logged while the
 * real ranks connect. SG_OK, or SG_ERR_RUNTIME (deadline, stop or a poll
 * failure; not logged: the caller names the missing ranks). */
static sg_status accept_higher(acceptor *a, int *fds, double deadline,
                               const volatile sig_atomic_t *stop) {
    for (;;) {
        int missing = 0;
        for (int q = a->rank + 1; q < a->world; q++) missing += fds[q] < 0;
        if (!missing) return SG_OK;
        if (stopped(stop)) return SG_ERR_RUNTIME;
        double now = sg_now_s();
        if (now >= deadline) return SG_ERR_RUNTIME;
        for (int i = a->np - 1; i >= 0; i--)
            if (now - a->p[i].t0 > MESH_HELLO_S)
                drop_pending(a, i, 0xff, "no handshake in time", NULL);
        struct pollfd pfd[1 + MESH_MAX_PENDING];
        pfd[0] = (struct pollfd){.fd = a->lfd, .events = POLLIN};
        for (int i = 0; i < a->np; i++)
            pfd[1 + i] = (struct pollfd){.fd = a->p[i].fd, .events = POLLIN};
        double left = deadline - now;
        if (left > 0.1) left = 0.1; /* handshake deadlines, the stop flag */
        int np = a->np;
        int pr = poll(pfd, (nfds_t)(1 + np), (int)(left * 1000) + 1);
        if (pr < 0 && errno != EINTR) return SG_ERR_RUNTIME;
        if (pr <= 0) continue;
        for (int i = np - 1; i >= 0; i--)
            if (pfd[1 + i].revents) advance_pending(a, i, fds);
        if (pfd[0].revents & POLLIN) {
            struct sockaddr_in sa;
            socklen_t sl = sizeof sa;
            int fd = accept4(a->lfd, (struct sockaddr *)&sa, &sl, SOCK_CLOEXEC | SOCK_NONBLOCK);
            if (fd < 0) continue;
            if (a->np == MESH_MAX_PENDING) { /* the oldest goes */
                int old = 0;
                for (int i = 1; i < a->np; i++)
                    if (a->p[i].t0 < a->p[old].t0) old = i;
                drop_pending(a, old, 0xff, "too many connections waiting for their handshake",
                             NULL);
            }
            pending *p = &a->p[a->np++];
            memset(p, 0, sizeof *p);
            p->fd = fd;
            p->t0 = sg_now_s();
            char ip[INET_ADDRSTRLEN] = "?";
            inet_ntop(AF_INET, &sa.sin_addr, ip, sizeof ip);
            snprintf(p->peer, sizeof p->peer, "%s:%d", ip, ntohs(sa.sin_port));
        }
    }
}

sg_mesh *sg_mesh_create(sg_store *store, int rank, int world, double timeout_s, const char *token,
                        const volatile sig_atomic_t *stop) {
    sg_mesh *m = calloc(1, sizeof *m);
    SG_CHECK(m, "out of memory");
    m->rank = rank;
    m->world = world;
    m->timeout_s = timeout_s;
    m->fd = malloc((size_t)world * sizeof *m->fd);
    SG_CHECK(m->fd, "out of memory");
    for (int q = 0; q < world; q++) m->fd[q] = -1;
#if SG_TEST_SEAMS
    if (read_kill_seam(m) != SG_OK) {
        sg_mesh_destroy(m);
        return NULL;
    }
#endif
    double deadline = sg_now_s() + timeout_s;
    size_t token_len = token ? strlen(token) : 0;
    if (token_len == 0 || token_len > SG_TOKEN_MAX) {
        SG_ERROR("rank %d: the small-collective mesh needs the job token (internal error)", rank);
        sg_mesh_destroy(m);
        return NULL;
    }

    /* listen on the MASTER_ADDR interface (dist/net_addr.h), publish it */
    const char *master = getenv("MASTER_ADDR");
    if (!master || !*master) master = "127.0.0.1";
    struct in_addr ia;
    char err[256];
    if (sg_net_listen_addr(master, &ia, NULL, 0, err, sizeof err) != SG_OK) {
        SG_ERROR("rank %d: cannot choose an address for the small-collective mesh: %s", rank, err);
        sg_mesh_destroy(m);
        return NULL;
    }
    int lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr = ia};
    socklen_t sl = sizeof sa;
    char host[INET_ADDRSTRLEN];
    if (ia.s_addr == htonl(INADDR_ANY))
        snprintf(host, sizeof host, "127.0.0.1"); /* MASTER_ADDR=0.0.0.0 */
    else inet_ntop(AF_INET, &ia, host, sizeof host);
    if (lfd < 0 || bind(lfd, (struct sockaddr *)&sa, sizeof sa) ||
        listen(lfd, world + MESH_MAX_PENDING) || getsockname(lfd, (struct sockaddr *)&sa, &sl)) {
        SG_ERROR("rank %d: cannot open a listening socket on %s for the small-collective mesh: %s",
                 rank, host, strerror(errno));
        if (lfd >= 0) close(lfd);
        sg_mesh_destroy(m);
        return NULL;
    }
    char key[64], val[96];
    snprintf(key, sizeof key, "mesh/%d", rank);
    snprintf(val, sizeof val, "%s %d", host, ntohs(sa.sin_port));
    if (sg_store_set(store, key, val, strlen(val) + 1) != SG_STORE_OK) goto fail;
    /* connect to every lower rank, then accept every higher one */
    for (int q = 0; q < rank; q++) {
        snprintf(key, sizeof key, "mesh/%d", q);
        void *v = NULL;
        size_t n = 0;
        sg_store_rc rc = sg_store_get(store, key, &v, &n);
        char qhost[64];
        int qport = 0;
        if (rc != SG_STORE_OK || n == 0 || ((char *)v)[n - 1] != 0 ||
            sscanf((char *)v, "%63s %d", qhost, &qport) != 2) {
            if (rc == SG_STORE_TIMEOUT)
                SG_ERROR("rank %d: rank %d did not publish its mesh address within %.1f s", rank, q,
                         timeout_s);
            else if (rc == SG_STORE_OK)
                SG_ERROR("rank %d: rank %d's mesh address in the store is malformed", rank, q);
            free(v);
            goto fail;
        }
        free(v);
        int fd = connect_to(qhost, qport, deadline, stop);
        uint8_t hello[SG_MESH_HELLO_MAX], ack = 0xff;
        size_t hl = sg_mesh_build_hello(hello, rank, token, token_len);
        if (fd < 0 || xfer(fd, hello, hl, 1, deadline, stop) != SG_OK ||
            xfer(fd, &ack, 1, 0, deadline, stop) != SG_OK) {
            if (!stopped(stop))
                SG_ERROR(
                    "rank %d: cannot connect to rank %d at %s:%d for the small-collective mesh: %s",
                    rank, q, qhost, qport, fd < 0 ? strerror(errno) : "no answer to the handshake");
            if (fd >= 0) close(fd);
            goto fail;
        }
        if (ack != SG_MESH_ACK_OK) {
            SG_ERROR(
                "rank %d: rank %d at %s:%d refused this rank's mesh connection: %s", rank, q, qhost,
                qport,
                ack == SG_MESH_ACK_WRONG_TOKEN
                    ? "the job token differs (is that address another job's?)"
                : ack == SG_MESH_ACK_RANK_TAKEN
                    ? "another process is already connected as this rank (two processes with one RANK, "
                      "or another job with the same token; see its log)"
                    : "it found the handshake malformed (another segtrain version?)");
            close(fd);
            goto fail;
        }
        tune(fd);
        m->fd[q] = fd;
    }
    if (rank + 1 < world) {
        acceptor a = {
            .rank = rank, .world = world, .lfd = lfd, .token = token, .token_len = token_len};
        a.peer_of = calloc((size_t)world, sizeof *a.peer_of);
        SG_CHECK(a.peer_of, "out of memory");
        sg_status rc = accept_higher(&a, m->fd, deadline, stop);
        for (int i = 0; i < a.np; i++) close(a.p[i].fd);
        free(a.peer_of);
        if (rc != SG_OK) {
            if (!stopped(stop)) {
                char missing[256] = "";
                size_t ml = 0;
                for (int q = rank + 1; q < world && ml < sizeof missing - 12; q++)
                    if (m->fd[q] < 0)
                        ml += (size_t)snprintf(missing + ml, sizeof missing - ml, "%s%d",
                                               ml ? ", " : "", q);
                SG_ERROR(
                    "rank %d: rank(s) %s did not connect for the small-collective mesh within %.1f s "
                    "(dist.timeout_s less the liveness probe)",
                    rank, missing, timeout_s);
            }
            goto fail;
        }
        for (int q = rank + 1; q < world; q++) tune(m->fd[q]);
    }
    close(lfd);
    for (int q = 0; q < world; q++)
        if (m->fd[q] >= 0) fcntl(m->fd[q], F_SETFL, O_NONBLOCK);
    return m;
fail:
    close(lfd);
    sg_mesh_destroy(m);
    return NULL;
}

void sg_mesh_destroy(sg_mesh *m) {
    if (!m) return;
    for (int q = 0; q < m->world; q++)
        if (m->fd[q] >= 0) close(m->fd[q]);
    free(m->fd);
    free(m);
}

/* One exchange: every peer q with send set gets slen bytes from sbuf, every
 * peer with recv set sends rlen bytes into rbuf, all at once (non-blocking,
 * so no pair of ranks can block each other). Each message carries its own
 * header (the collective's sequence number and that message's size), so
 * the sizes may differ per peer (a scatter's uneven chunks). */
typedef struct peer_io {
    int send, recv;
    const char *sbuf;
    char *rbuf;
    size_t slen, rlen;
    size_t sent, got; /* bytes done, header included */
    sg_mesh_msg_hdr sh, rh;
} peer_io;

static sg_status exchange(sg_mesh *m, peer_io *io, size_t bytes, char *err, size_t errlen) {
#if SG_TEST_SEAMS
    kill_seam_point(m, bytes);
#else
    (void)bytes;
#endif
    const size_t hl = sizeof(sg_mesh_msg_hdr);
    for (int q = 0; q < m->world; q++) {
        if ((io[q].send && io[q].slen > UINT32_MAX) || (io[q].recv && io[q].rlen > UINT32_MAX)) {
            snprintf(err, errlen, "a mesh message of %zu bytes is over the 4 GiB the header holds",
                     io[q].send ? io[q].slen : io[q].rlen);
            return SG_ERR_RUNTIME;
        }
        io[q].sh = sg_mesh_make_header(m->seq, (uint32_t)io[q].slen);
    }
    uint32_t seq = m->seq++;
    double deadline = sg_now_s() + m->timeout_s;
    struct pollfd *pfd = malloc((size_t)m->world * sizeof *pfd);
    int *who = malloc((size_t)m->world * sizeof *who);
    SG_CHECK(pfd && who, "out of memory");
    sg_status rc = SG_OK;
    for (;;) {
        int np = 0;
        for (int q = 0; q < m->world; q++) {
            short ev = (short)((io[q].send && io[q].sent < hl + io[q].slen ? POLLOUT : 0) |
                               (io[q].recv && io[q].got < hl + io[q].rlen ? POLLIN : 0));
            if (!ev) continue;
            pfd[np] = (struct pollfd){.fd = m->fd[q], .events = ev};
            who[np++] = q;
        }
        if (!np) break;
        double left = deadline - sg_now_s();
        int pr = left > 0 ? poll(pfd, (nfds_t)np, (int)(left * 1000) + 1) : 0;
        if (pr < 0 && errno == EINTR) continue;
        if (pr <= 0) {
            size_t el =
                (size_t)snprintf(err, errlen, "no data within %.1f s from rank(s)", m->timeout_s);
            for (int k = 0; k < np && el < errlen - 8; k++)
                if (io[who[k]].recv && io[who[k]].got < hl + io[who[k]].rlen)
                    el += (size_t)snprintf(err + el, errlen - el, " %d", who[k]);
            rc = SG_ERR_RUNTIME;
            break;
        }
        for (int k = 0; k < np && rc == SG_OK; k++) {
            int q = who[k];
            peer_io *p = &io[q];
            if (pfd[k].revents & POLLOUT) {
                const char *src = p->sent < hl ? (const char *)&p->sh + p->sent
                                               : p->sbuf + (p->sent - hl);
                size_t n = p->sent < hl ? hl - p->sent : hl + p->slen - p->sent;
                ssize_t w = send(m->fd[q], src, n, MSG_NOSIGNAL);
                if (w > 0) p->sent += (size_t)w;
                else if (w < 0 && errno != EAGAIN && errno != EINTR) {
                    snprintf(err, errlen, "sending to rank %d failed: %s (it exited or was killed)",
                             q, strerror(errno));
                    rc = SG_ERR_RUNTIME;
                }
            }
            if (rc == SG_OK && (pfd[k].revents & (POLLIN | POLLHUP | POLLERR))) {
                char *dst = p->got < hl ? (char *)&p->rh + p->got : p->rbuf + (p->got - hl);
                size_t n = p->got < hl ? hl - p->got : hl + p->rlen - p->got;
                ssize_t r = recv(m->fd[q], dst, n, 0);
                if (r > 0) {
                    p->got += (size_t)r;
                    char why[256];
                    if (p->got == hl &&
                        !sg_mesh_check_header(&p->rh, sg_mesh_make_header(seq, (uint32_t)p->rlen),
                                              why, sizeof why)) {
                        snprintf(err, errlen, "rank %d %s", q, why);
                        rc = SG_ERR_RUNTIME;
                    }
                } else if (r == 0 || (errno != EAGAIN && errno != EINTR)) {
                    snprintf(err, errlen, "rank %d closed its connection (exited or was killed)",
                             q);
                    rc = SG_ERR_RUNTIME;
                }
            }
        }
        if (rc) break;
    }
    free(pfd);
    free(who);
    return rc;
}

static peer_io *new_io(const sg_mesh *m) {
    peer_io *io = calloc((size_t)m->world, sizeof *io);
    SG_CHECK(io, "out of memory");
    return io;
}

sg_status sg_mesh_allgather(sg_mesh *m, const void *in, void *out, size_t bytes, char *err,
                            size_t errlen) {
    char *mine = (char *)out + (size_t)m->rank * bytes;
    if (mine != in) memmove(mine, in, bytes);
    peer_io *io = new_io(m);
    for (int q = 0; q < m->world; q++) {
        if (q == m->rank) continue;
        io[q] = (peer_io){.send = 1,
                          .recv = 1,
                          .sbuf = mine,
                          .slen = bytes,
                          .rbuf = (char *)out + (size_t)q * bytes,
                          .rlen = bytes};
    }
    sg_status rc = exchange(m, io, bytes, err, errlen);
    free(io);
    return rc;
}

void sg_mesh_chunk(size_t count, int world, int q, size_t *first, size_t *n) {
    size_t a = count * (size_t)q / (size_t)world, b = count * (size_t)(q + 1) / (size_t)world;
    *first = a;
    *n = b - a;
}

sg_status sg_mesh_alltoall_chunks(sg_mesh *m, const void *send, void *const *recv, size_t count,
                                  size_t elem, char *err, size_t errlen) {
    peer_io *io = new_io(m);
    size_t f, n, mf, mn;
    sg_mesh_chunk(count, m->world, m->rank, &mf, &mn);
    for (int q = 0; q < m->world; q++) {
        if (q == m->rank) continue;
        sg_mesh_chunk(count, m->world, q, &f, &n);
        io[q] = (peer_io){.send = 1,
                          .recv = 1,
                          .sbuf = (const char *)send + f * elem,
                          .slen = n * elem,
                          .rbuf = recv[q],
                          .rlen = mn * elem};
    }
    sg_status rc = exchange(m, io, count * elem, err, errlen);
    free(io);
    return rc;
}

sg_status sg_mesh_allgather_chunks(sg_mesh *m, void *buf, size_t count, size_t elem, char *err,
                                   size_t errlen) {
    peer_io *io = new_io(m);
    size_t f, n, mf, mn;
    sg_mesh_chunk(count, m->world, m->rank, &mf, &mn);
    for (int q = 0; q < m->world; q++) {
        if (q == m->rank) continue;
        sg_mesh_chunk(count, m->world, q, &f, &n);
        io[q] = (peer_io){.send = 1,
                          .recv = 1,
                          .sbuf = (const char *)buf + mf * elem,
                          .slen = mn * elem,
                          .rbuf = (char *)buf + f * elem,
                          .rlen = n * elem};
    }
    sg_status rc = exchange(m, io, count * elem, err, errlen);
    free(io);
    return rc;
}

sg_status sg_mesh_broadcast(sg_mesh *m, void *buf, size_t bytes, int root, char *err,
                            size_t errlen) {
    peer_io *io = new_io(m);
    sg_status rc;
    if (bytes <= SG_MESH_DIRECT_BYTES || m->world <= 2) {
        /* small: the root writes the whole buffer to every peer */
        for (int q = 0; q < m->world; q++) {
            io[q].send = m->rank == root && q != root;
            io[q].recv = m->rank != root && q == root;
            io[q].sbuf = buf;
            io[q].rbuf = buf;
            io[q].slen = io[q].rlen = bytes;
        }
        rc = exchange(m, io, bytes, err, errlen);
    } else {
        /* large: the root scatters chunk q to rank q, then every rank
         * all-gathers the chunks, so the root sends ~2x the buffer instead
         * of (world-1)x it, and every other rank ~1x */
        size_t f, n;
        for (int q = 0; q < m->world; q++) {
            sg_mesh_chunk(bytes, m->world, q, &f, &n);
            io[q].send = m->rank == root && q != root;
            io[q].recv = m->rank != root && q == root;
            io[q].sbuf = (const char *)buf + f;
            io[q].slen = n;
        }
        sg_mesh_chunk(bytes, m->world, m->rank, &f, &n);
        io[root].rbuf = (char *)buf + f;
        io[root].rlen = n;
        rc = exchange(m, io, bytes, err, errlen);
        if (rc == SG_OK) rc = sg_mesh_allgather_chunks(m, buf, bytes, 1, err, errlen);
    }
    free(io);
    return rc;
}
