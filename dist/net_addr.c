/* dist/net_addr.c - the listening-address rule (dist/net_addr.h). */
#include "dist/net_addr.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

int sg_net_is_loopback(struct in_addr a) { return (ntohl(a.s_addr) >> 24) == 127; }

/* 1 if a socket can bind to a (port 0): it is an address of this host. */
static int is_local(struct in_addr a) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return 0;
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr = a};
    int ok = bind(fd, (struct sockaddr *)&sa, sizeof sa) == 0;
    close(fd);
    return ok;
}

sg_status sg_net_listen_addr(const char *master, struct in_addr *out, char *how, size_t howlen,
                             char *err, size_t errlen) {
    struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM}, *ai = NULL;
    int gai = getaddrinfo(master, NULL, &hints, &ai);
    if (gai || !ai) {
        snprintf(err, errlen,
                 "MASTER_ADDR=%s does not resolve to an IPv4 address (%s): set it to rank 0's "
                 "address or hostname",
                 master, gai ? gai_strerror(gai) : "no address");
        return SG_ERR_RUNTIME;
    }
    struct in_addr a = ((struct sockaddr_in *)ai->ai_addr)->sin_addr;
    freeaddrinfo(ai);
    char as[INET_ADDRSTRLEN];
    inet_ntop(AF_INET, &a, as, sizeof as);
    if (a.s_addr == htonl(INADDR_ANY) || sg_net_is_loopback(a) || is_local(a)) {
        *out = a;
        if (how)
            snprintf(how, howlen, "%s",
                     a.s_addr == htonl(INADDR_ANY) ? "every interface (MASTER_ADDR=0.0.0.0)"
                     : sg_net_is_loopback(a)       ? "loopback (MASTER_ADDR is a loopback address)"
                                                   : "MASTER_ADDR (an address of this host)");
        return SG_OK;
    }
    /* another host: the source address of the route to it */
    int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in dst = {.sin_family = AF_INET, .sin_port = htons(9), .sin_addr = a}, src;
    socklen_t sl = sizeof src;
    int ok = fd >= 0 && connect(fd, (struct sockaddr *)&dst, sizeof dst) == 0 &&
             getsockname(fd, (struct sockaddr *)&src, &sl) == 0;
    int e = errno;
    if (fd >= 0) close(fd);
    if (!ok) {
        snprintf(err, errlen, "no route from this host to MASTER_ADDR=%s (%s): %s", master, as,
                 strerror(e));
        return SG_ERR_RUNTIME;
    }
    *out = src.sin_addr;
    if (how)
        snprintf(how, howlen,
                 "the interface of the route to MASTER_ADDR (%s is not an address of this host)",
                 as);
    return SG_OK;
}
