/* dist/net_addr.h - internal: the local address a rank listens on, for the
 * rendezvous store (rank 0) and the small-collective mesh (every rank).
 *
 * The rule: resolve MASTER_ADDR (IPv4, getaddrinfo). If that address
 * belongs to this host (a loopback address, or one a socket can bind to),
 * listen on it: a loopback MASTER_ADDR keeps everything on loopback, and
 * rank 0's store listens exactly where the other ranks are told to connect.
 * Otherwise (MASTER_ADDR names another host, or an address this host only
 * reaches through NAT), listen on the local address of the route to it: the
 * interface this host uses to reach rank 0, which is where its peers reach
 * it too. 0.0.0.0 given explicitly listens on every interface.
 * Note: on hosts whose /etc/hosts maps the hostname to 127.0.1.1 (Debian,
 * Ubuntu), MASTER_ADDR=$(hostname) is loopback; a multi-node job must name
 * rank 0 by an address the other nodes reach (rank 0 warns when a job that
 * spans nodes puts its store on loopback).
 */
#ifndef SG_DIST_NET_ADDR_H
#define SG_DIST_NET_ADDR_H

#include <netinet/in.h>
#include <stddef.h>

#include "core/status.h"

/* The listening address for MASTER_ADDR `master` into *out; how (may be
 * NULL) gets a phrase saying which case applied. SG_OK, or SG_ERR_RUNTIME
 * with the reason in err (MASTER_ADDR does not resolve, or no route to it;
 * not logged: the caller names the rank and what it was doing). */
sg_status sg_net_listen_addr(const char *master, struct in_addr *out, char *how, size_t howlen,
                             char *err, size_t errlen);
/* 1 for 127.0.0.0/8, else 0 (a bool). */
int sg_net_is_loopback(struct in_addr a);

#endif
