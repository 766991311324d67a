/* dist/mesh.c - direct TCP connections between every pair of ranks for
 * small collectives (dist/mesh.h). Owns the listening socket during setup
 * and one connected socket per peer. */
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

#include "core/util.h"
#include "core/log.h"
#include "dist/mesh.h"

#define MESH_MAGIC 0x5347u /* "SG" */

struct sg_mesh {
    int rank, world;
    double timeout_s;
    int *fd;           /* per peer; -1 for self */
    uint32_t seq;      /* collectives so far (every rank counts the same) */
};

typedef struct msg_hdr {
    uint32_t magic_seq; /* magic in the high 16 bits, seq in the low 16 */
    uint32_t bytes;
} msg_hdr;

static void tune(int fd) {
    int one = 1, buf = 1 << 20;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &buf, sizeof buf);
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &buf, sizeof buf);
}

/* The address other ranks reach this host at: loopback for a local
 * MASTER_ADDR, else the local address of the route to MASTER_ADDR. */
static int local_address(char *out, size_t len) {
    const char *master = getenv("MASTER_ADDR");
    if (!master || !*master || !strncmp(master, "127.", 4) || !strcmp(master, "localhost")) {
        snprintf(out, len, "127.0.0.1");
        return 0;
    }
    struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_DGRAM}, *ai = NULL;
    if (getaddrinfo(master, "9", &hints, &ai)) return -1;
    int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in sa;
    socklen_t sl = sizeof sa;
    int rc = fd >= 0 && connect(fd, ai->ai_addr, ai->ai_addrlen) == 0 &&
                     getsockname(fd, (struct sockaddr *)&sa, &sl) == 0
                 ? 0
                 : -1;
    if (fd >= 0) close(fd);
    freeaddrinfo(ai);
    if (rc == 0) inet_ntop(AF_INET, &sa.sin_addr, out, (socklen_t)len);
    return rc;
}

static int connect_to(const char *host, int port, double deadline) {
    char ps[16];
    snprintf(ps, sizeof ps, "%d", port);
    struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM}, *ai = NULL;
    if (getaddrinfo(host, ps, &hints, &ai)) return -1;
    int fd = -1;
    while (sg_now_s() < deadline) {
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

/* Blocking exact write/read before the deadline (setup only). */
static int xfer(int fd, void *p, size_t n, int writing, double deadline) {
    char *c = p;
    while (n) {
        struct pollfd pfd = {.fd = fd, .events = writing ? POLLOUT : POLLIN};
        double left = deadline - sg_now_s();
        if (left <= 0 || poll(&pfd, 1, (int)(left * 1000) + 1) <= 0) return -1;
        ssize_t k = writing ? send(fd, c, n, MSG_NOSIGNAL) : recv(fd, c, n, 0);
        if (k < 0 && (errno == EINTR || errno == EAGAIN)) continue;
        if (k <= 0) return -1;
        c += k;
        n -= (size_t)k;
    }
    return 0;
}

sg_mesh *sg_mesh_create(sg_store *store, int rank, int world, double timeout_s) {
    sg_mesh *m = calloc(1, sizeof *m);
    SG_CHECK(m, "out of memory");
    m->rank = rank;
    m->world = world;
    m->timeout_s = timeout_s;
    m->fd = malloc((size_t)world * sizeof *m->fd);
    SG_CHECK(m->fd, "out of memory");
    for (int q = 0; q < world; q++) m->fd[q] = -1;
    double deadline = sg_now_s() + timeout_s;

    int lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_ANY)};
    socklen_t sl = sizeof sa;
    char host[64];
    if (lfd < 0 || bind(lfd, (struct sockaddr *)&sa, sizeof sa) || listen(lfd, world) ||
        getsockname(lfd, (struct sockaddr *)&sa, &sl) || local_address(host, sizeof host)) {
        SG_ERROR("rank %d: cannot open a listening socket for the small-collective mesh: %s", rank,
                 strerror(errno));
        if (lfd >= 0) close(lfd);
        sg_mesh_destroy(m);
        return NULL;
    }
    char key[64], val[96];
    snprintf(key, sizeof key, "mesh/%d", rank);
    snprintf(val, sizeof val, "%s %d", host, ntohs(sa.sin_port));
    if (sg_store_set(store, key, val, strlen(val) + 1)) goto fail;
    /* connect to every lower rank, then accept every higher one */
    for (int q = 0; q < rank; q++) {
        snprintf(key, sizeof key, "mesh/%d", q);
        void *v = NULL;
        size_t n = 0;
        int rc = sg_store_get(store, key, &v, &n);
        char qhost[64];
        int qport = 0;
        if (rc || sscanf((char *)v, "%63s %d", qhost, &qport) != 2) {
            if (rc == SG_STORE_TIMEOUT)
                SG_ERROR("rank %d: rank %d did not publish its mesh address within %.1f s", rank, q,
                         timeout_s);
            free(v);
            goto fail;
        }
        free(v);
        int fd = connect_to(qhost, qport, deadline);
        int32_t me = rank;
        if (fd < 0 || xfer(fd, &me, sizeof me, 1, deadline)) {
            SG_ERROR("rank %d: cannot connect to rank %d at %s:%d for the small-collective mesh: %s", rank, q,
                     qhost, qport, strerror(errno));
            if (fd >= 0) close(fd);
            goto fail;
        }
        tune(fd);
        m->fd[q] = fd;
    }
    for (int k = rank + 1; k < world; k++) {
        struct pollfd pfd = {.fd = lfd, .events = POLLIN};
        double left = deadline - sg_now_s();
        int fd = -1;
        int32_t who = -1;
        if (left > 0 && poll(&pfd, 1, (int)(left * 1000) + 1) == 1) fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
        if (fd < 0 || xfer(fd, &who, sizeof who, 0, deadline) || who <= rank || who >= world || m->fd[who] >= 0) {
            char missing[256] = "";
            size_t ml = 0;
            for (int q = rank + 1; q < world && ml < sizeof missing - 12; q++)
                if (m->fd[q] < 0) ml += (size_t)snprintf(missing + ml, sizeof missing - ml, "%s%d", ml ? ", " : "", q);
            SG_ERROR("rank %d: rank(s) %s did not connect for the small-collective mesh within %.1f s "
                     "(dist.timeout_s less the liveness probe)", rank, missing, timeout_s);
            if (fd >= 0) close(fd);
            goto fail;
        }
        tune(fd);
        m->fd[who] = fd;
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

/* One exchange: send `sendbuf` to every peer with send[q] set, receive
 * `bytes` into recvbuf[q] from every peer with recv[q] set, all at once
 * (non-blocking, so no pair of ranks can block each other). */
typedef struct peer_io {
    int send, recv;
    size_t sent, got;  /* bytes done, header included */
    msg_hdr rh;
} peer_io;

static sg_status exchange(sg_mesh *m, peer_io *io, const void *sendbuf, char *const *recvbuf,
                          size_t bytes, char *err, size_t errlen) {
    msg_hdr h = {((uint32_t)MESH_MAGIC << 16) | (m->seq & 0xffffu), (uint32_t)bytes};
    m->seq++;
    size_t total = sizeof h + bytes;
    double deadline = sg_now_s() + m->timeout_s;
    struct pollfd *pfd = malloc((size_t)m->world * sizeof *pfd);
    int *who = malloc((size_t)m->world * sizeof *who);
    SG_CHECK(pfd && who, "out of memory");
    sg_status rc = SG_OK;
    for (;;) {
        int np = 0;
        for (int q = 0; q < m->world; q++) {
            short ev = (short)((io[q].send && io[q].sent < total ? POLLOUT : 0) |
                               (io[q].recv && io[q].got < total ? POLLIN : 0));
            if (!ev) continue;
            pfd[np] = (struct pollfd){.fd = m->fd[q], .events = ev};
            who[np++] = q;
        }
        if (!np) break;
        double left = deadline - sg_now_s();
        int pr = left > 0 ? poll(pfd, (nfds_t)np, (int)(left * 1000) + 1) : 0;
        if (pr < 0 && errno == EINTR) continue;
        if (pr <= 0) {
            size_t el = (size_t)snprintf(err, errlen, "no data within %.1f s from rank(s)", m->timeout_s);
            for (int k = 0; k < np && el < errlen - 8; k++)
                if (io[who[k]].recv && io[who[k]].got < total)
                    el += (size_t)snprintf(err + el, errlen - el, " %d", who[k]);
            rc = SG_ERR_RUNTIME;
            break;
        }
        for (int k = 0; k < np && rc == SG_OK; k++) {
            int q = who[k];
            peer_io *p = &io[q];
            if (pfd[k].revents & POLLOUT) {
                const char *src = p->sent < sizeof h ? (const char *)&h + p->sent
                                                     : (const char *)sendbuf + (p->sent - sizeof h);
                size_t n = p->sent < sizeof h ? sizeof h - p->sent : total - p->sent;
                ssize_t w = send(m->fd[q], src, n, MSG_NOSIGNAL);
                if (w > 0) p->sent += (size_t)w;
                else if (w < 0 && errno != EAGAIN && errno != EINTR) {
                    snprintf(err, errlen, "sending to rank %d failed: %s (it exited or was killed)", q, strerror(errno));
                    rc = SG_ERR_RUNTIME;
                }
            }
            if (rc == SG_OK && (pfd[k].revents & (POLLIN | POLLHUP | POLLERR))) {
                char *dst = p->got < sizeof h ? (char *)&p->rh + p->got : recvbuf[q] + (p->got - sizeof h);
                size_t n = p->got < sizeof h ? sizeof h - p->got : total - p->got;
                ssize_t r = recv(m->fd[q], dst, n, 0);
                if (r > 0) {
                    p->got += (size_t)r;
                    if (p->got == sizeof h && (p->rh.magic_seq != h.magic_seq || p->rh.bytes != h.bytes)) {
                        snprintf(err, errlen,
                                 "rank %d is in a different collective (its collective #%u has %u bytes, ours "
                                 "#%u has %zu): ranks took different code paths",
                                 q, p->rh.magic_seq & 0xffffu, p->rh.bytes, h.magic_seq & 0xffffu, bytes);
                        rc = SG_ERR_RUNTIME;
                    }
                } else if (r == 0 || (errno != EAGAIN && errno != EINTR)) {
                    snprintf(err, errlen, "rank %d closed its connection (exited or was killed)", q);
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

sg_status sg_mesh_allgather(sg_mesh *m, const void *in, void *out, size_t bytes, char *err, size_t errlen) {
    peer_io *io = calloc((size_t)m->world, sizeof *io);
    char **dst = malloc((size_t)m->world * sizeof *dst);
    SG_CHECK(io && dst, "out of memory");
    for (int q = 0; q < m->world; q++) {
        dst[q] = (char *)out + (size_t)q * bytes;
        io[q].send = io[q].recv = q != m->rank;
    }
    if ((char *)out + (size_t)m->rank * bytes != in) memmove((char *)out + (size_t)m->rank * bytes, in, bytes);
    sg_status rc = exchange(m, io, (char *)out + (size_t)m->rank * bytes, dst, bytes, err, errlen);
    free(io);
    free(dst);
    return rc;
}

sg_status sg_mesh_broadcast(sg_mesh *m, void *buf, size_t bytes, int root, char *err, size_t errlen) {
    peer_io *io = calloc((size_t)m->world, sizeof *io);
    char **dst = malloc((size_t)m->world * sizeof *dst);
    SG_CHECK(io && dst, "out of memory");
    for (int q = 0; q < m->world; q++) {
        dst[q] = buf;
        io[q].send = m->rank == root && q != root;
        io[q].recv = m->rank != root && q == root;
    }
    sg_status rc = exchange(m, io, buf, dst, bytes, err, errlen);
    free(io);
    free(dst);
    return rc;
}
