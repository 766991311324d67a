/* dist/store_server.c - the rendezvous store's server: one thread in rank
 * 0's process, a poll() loop over the listening socket and the clients, an
 * in-memory key-value table, blocked GETs parked until their key is set, and
 * liveness: a client that said HELLO(rank) and closes without BYE gets the
 * key "__dead/<rank>" set, so the other ranks can name it. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/log.h"
#include "dist/store_proto.h"

typedef struct kv {
    char *key;
    char *val;
    size_t len;
} kv;

typedef struct client {
    int fd;
    int rank;        /* -1 until HELLO */
    int said_bye;
    char *buf;       /* unparsed input */
    size_t len, cap;
    char *wait_key;  /* parked GET, or NULL */
} client;

struct sg_store_server {
    int listen_fd;
    int port;
    int wake[2];     /* pipe: stop request */
    pthread_t thread;
    kv *kvs;
    size_t n_kv, cap_kv;
    client *clients;
    size_t n_clients, cap_clients;
};

static kv *kv_find(sg_store_server *s, const char *key) {
    for (size_t i = 0; i < s->n_kv; i++)
        if (strcmp(s->kvs[i].key, key) == 0) return &s->kvs[i];
    return NULL;
}

static kv *kv_put(sg_store_server *s, const char *key, const void *val, size_t len) {
    kv *e = kv_find(s, key);
    if (!e) {
        if (s->n_kv == s->cap_kv) {
            s->cap_kv = s->cap_kv ? 2 * s->cap_kv : 64;
            s->kvs = realloc(s->kvs, s->cap_kv * sizeof *s->kvs);
            SG_CHECK(s->kvs, "store server: out of memory");
        }
        e = &s->kvs[s->n_kv++];
        e->key = strdup(key);
        e->val = NULL;
        SG_CHECK(e->key, "store server: out of memory");
    }
    free(e->val);
    e->val = malloc(len ? len : 1);
    SG_CHECK(e->val, "store server: out of memory");
    memcpy(e->val, val, len);
    e->len = len;
    return e;
}

/* Blocking write of a whole response; a client that went away is dropped
 * later when poll reports its hang-up. */
static void send_all(int fd, const void *p, size_t n) {
    const char *c = p;
    while (n) {
        ssize_t w = send(fd, c, n, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return;
        c += w;
        n -= (size_t)w;
    }
}

static void respond(client *cl, uint8_t status, const void *val, uint32_t len) {
    char hdr[5];
    hdr[0] = (char)status;
    memcpy(hdr + 1, &len, 4);
    send_all(cl->fd, hdr, 5);
    if (len) send_all(cl->fd, val, len);
}

/* A key was set: answer every GET parked on it. */
static void wake_waiters(sg_store_server *s, const kv *e) {
    for (size_t i = 0; i < s->n_clients; i++) {
        client *cl = &s->clients[i];
        if (cl->wait_key && strcmp(cl->wait_key, e->key) == 0) {
            respond(cl, 0, e->val, (uint32_t)e->len);
            free(cl->wait_key);
            cl->wait_key = NULL;
        }
    }
}

static void handle(sg_store_server *s, client *cl, uint8_t op, const char *key, const char *val,
                   uint32_t vlen) {
    kv *e;
    switch (op) {
    case SG_OP_SET:
        e = kv_put(s, key, val, vlen);
        respond(cl, 0, NULL, 0);
        wake_waiters(s, e);
        break;
    case SG_OP_GET:
        e = kv_find(s, key);
        if (e) {
            respond(cl, 0, e->val, (uint32_t)e->len);
        } else {
            free(cl->wait_key);
            cl->wait_key = strdup(key);
        }
        break;
    case SG_OP_ADD: {
        int64_t delta = 0, cur = 0;
        if (vlen == 8) memcpy(&delta, val, 8);
        e = kv_find(s, key);
        if (e && e->len == 8) memcpy(&cur, e->val, 8);
        cur += delta;
        e = kv_put(s, key, &cur, 8);
        respond(cl, 0, &cur, 8);
        wake_waiters(s, e);
        break;
    }
    case SG_OP_CHECK: {
        uint8_t ex = kv_find(s, key) != NULL;
        respond(cl, 0, &ex, 1);
        break;
    }
    case SG_OP_HELLO: {
        int32_t r = -1;
        if (vlen == 4) memcpy(&r, val, 4);
        cl->rank = r;
        respond(cl, 0, NULL, 0);
        break;
    }
    case SG_OP_BYE:
        cl->said_bye = 1;
        respond(cl, 0, NULL, 0);
        break;
    default:
        respond(cl, 1, NULL, 0);
        break;
    }
}

/* Parses and handles every complete request in the client's buffer.
 * Returns -1 on a malformed request (the client is dropped). */
static int process(sg_store_server *s, size_t ci) {
    for (;;) {
        client *cl = &s->clients[ci];
        if (cl->len < 9) return 0;
        uint32_t klen, vlen;
        memcpy(&klen, cl->buf + 1, 4);
        memcpy(&vlen, cl->buf + 5, 4);
        if (klen > SG_STORE_MAX_KEY || vlen > SG_STORE_MAX_VAL) return -1;
        size_t need = 9 + (size_t)klen + vlen;
        if (cl->len < need) return 0;
        char key[SG_STORE_MAX_KEY + 1];
        memcpy(key, cl->buf + 9, klen);
        key[klen] = 0;
        handle(s, cl, (uint8_t)cl->buf[0], key, cl->buf + 9 + klen, vlen);
        cl = &s->clients[ci];
        memmove(cl->buf, cl->buf + need, cl->len - need);
        cl->len -= need;
    }
}

static void drop_client(sg_store_server *s, size_t ci) {
    client *cl = &s->clients[ci];
    close(cl->fd);
    int rank = cl->rank, bye = cl->said_bye;
    free(cl->buf);
    free(cl->wait_key);
    s->clients[ci] = s->clients[--s->n_clients];
    if (rank >= 0 && !bye) {
        char key[64];
        snprintf(key, sizeof key, SG_STORE_DEAD_PREFIX "%d", rank);
        const char v = 1;
        wake_waiters(s, kv_put(s, key, &v, 1));
    }
}

static void accept_client(sg_store_server *s) {
    int fd = accept(s->listen_fd, NULL, NULL);
    if (fd < 0) return;
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (s->n_clients == s->cap_clients) {
        s->cap_clients = s->cap_clients ? 2 * s->cap_clients : 16;
        s->clients = realloc(s->clients, s->cap_clients * sizeof *s->clients);
        SG_CHECK(s->clients, "store server: out of memory");
    }
    client *cl = &s->clients[s->n_clients++];
    memset(cl, 0, sizeof *cl);
    cl->fd = fd;
    cl->rank = -1;
}

static void *server_main(void *arg) {
    sg_store_server *s = arg;
    struct pollfd *pfd = NULL;
    size_t pcap = 0;
    for (;;) {
        size_t n = s->n_clients + 2;
        if (n > pcap) {
            pcap = 2 * n;
            pfd = realloc(pfd, pcap * sizeof *pfd);
            SG_CHECK(pfd, "store server: out of memory");
        }
        pfd[0] = (struct pollfd){.fd = s->wake[0], .events = POLLIN};
        pfd[1] = (struct pollfd){.fd = s->listen_fd, .events = POLLIN};
        for (size_t i = 0; i < s->n_clients; i++)
            pfd[i + 2] = (struct pollfd){.fd = s->clients[i].fd, .events = POLLIN};
        int rc = poll(pfd, n, -1);
        if (rc < 0) {
            if (errno == EINTR) continue;
            SG_ERROR("store server: poll failed: %s", strerror(errno));
            break;
        }
        if (pfd[0].revents) break;
        /* clients first, from the back so drops do not shift unvisited ones */
        size_t nc = s->n_clients;
        for (size_t k = nc; k-- > 0;) {
            if (!pfd[k + 2].revents) continue;
            client *cl = &s->clients[k];
            if (cl->cap - cl->len < 65536) {
                cl->cap = cl->cap ? 2 * cl->cap : 131072;
                cl->buf = realloc(cl->buf, cl->cap);
                SG_CHECK(cl->buf, "store server: out of memory");
            }
            ssize_t r = recv(cl->fd, cl->buf + cl->len, cl->cap - cl->len, 0);
            if (r < 0 && (errno == EINTR || errno == EAGAIN)) continue;
            if (r <= 0) { drop_client(s, k); continue; }
            cl->len += (size_t)r;
            if (process(s, k)) drop_client(s, k);
        }
        if (pfd[1].revents & POLLIN) accept_client(s);
    }
    free(pfd);
    return NULL;
}

sg_store_server *sg_store_server_start(const char *addr, int port) {
    sg_store_server *s = calloc(1, sizeof *s);
    SG_CHECK(s, "out of memory");
    struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE};
    struct addrinfo *ai = NULL;
    char portstr[16];
    snprintf(portstr, sizeof portstr, "%d", port);
    /* bind to every interface: MASTER_ADDR names this host for the others */
    int gai = getaddrinfo(NULL, portstr, &hints, &ai);
    if (gai) {
        SG_ERROR("rendezvous store: getaddrinfo for port %d failed: %s", port, gai_strerror(gai));
        free(s);
        return NULL;
    }
    s->listen_fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, 0);
    int one = 1;
    if (s->listen_fd >= 0) setsockopt(s->listen_fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (s->listen_fd < 0 || bind(s->listen_fd, ai->ai_addr, ai->ai_addrlen) || listen(s->listen_fd, 256)) {
        SG_ERROR("rank 0: cannot host the rendezvous store on port %d (MASTER_PORT, for MASTER_ADDR=%s): %s. "
                 "Pick a free port with --master-port or MASTER_PORT.", port, addr, strerror(errno));
        if (s->listen_fd >= 0) close(s->listen_fd);
        freeaddrinfo(ai);
        free(s);
        return NULL;
    }
    freeaddrinfo(ai);
    struct sockaddr_in sa;
    socklen_t sl = sizeof sa;
    getsockname(s->listen_fd, (struct sockaddr *)&sa, &sl);
    s->port = ntohs(sa.sin_port);
    /* resource failures end the start, not the process: the caller reports
     * that the store could not be hosted */
    if (pipe2(s->wake, O_CLOEXEC) != 0) {
        SG_ERROR("rank 0: cannot start the rendezvous store on port %d: pipe failed: %s (too many "
                 "open files? check ulimit -n)", s->port, strerror(errno));
        close(s->listen_fd);
        free(s);
        return NULL;
    }
    int e = pthread_create(&s->thread, NULL, server_main, s);
    if (e != 0) {
        SG_ERROR("rank 0: cannot start the rendezvous store's thread: pthread_create failed: %s "
                 "(too many threads or processes? check ulimit -u)", strerror(e));
        close(s->wake[0]);
        close(s->wake[1]);
        close(s->listen_fd);
        free(s);
        return NULL;
    }
    return s;
}

int sg_store_server_port(const sg_store_server *s) { return s->port; }

void sg_store_server_stop(sg_store_server *s) {
    if (!s) return;
    char b = 1;
    if (write(s->wake[1], &b, 1) != 1) SG_WARN("store server: wake write failed: %s", strerror(errno));
    pthread_join(s->thread, NULL);
    for (size_t i = 0; i < s->n_clients; i++) {
        close(s->clients[i].fd);
        free(s->clients[i].buf);
        free(s->clients[i].wait_key);
    }
    for (size_t i = 0; i < s->n_kv; i++) {
        free(s->kvs[i].key);
        free(s->kvs[i].val);
    }
    free(s->clients);
    free(s->kvs);
    close(s->listen_fd);
    close(s->wake[0]);
    close(s->wake[1]);
    free(s);
}
