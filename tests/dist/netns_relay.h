/* tests/dist/netns_relay.h - a user-space stand-in for `tc netem` between
 * two network namespaces, for kernels without sch_netem.
 *
 * The relay is a child process holding two TUN devices, one in each
 * namespace. The caller routes the two hosts' addresses to each other
 * through them (a /32 route on each side, more specific than the link's
 * subnet), so every IP packet between the two hosts, whatever its port,
 * passes through the relay: it holds each packet for the delay of its
 * direction and drops it with that direction's probability, as netem does
 * on an interface's outgoing packets (netem on one end of a link impairs
 * one direction; give both directions values for both ends). A dropped packet is lost for real: the kernels' TCP sees
 * the loss and retransmits (after a fast retransmit or its 200 ms minimum
 * retransmission timeout), so no byte is ever lost at the application level
 * - the programs only see the time it costs.
 *
 * Bounded: a queue of at most NR_QUEUE packets per direction (one more is
 * dropped and counted, like netem's limit), a lifetime of max_s seconds,
 * and it dies with its parent (PR_SET_PDEATHSIG). Its TUN devices, and the
 * routes through them, vanish when it exits. Needs root (setns, TUN). */
#ifndef SG_TESTS_NETNS_RELAY_H
#define SG_TESTS_NETNS_RELAY_H

#include <stdint.h>
#include <sys/types.h>

enum { NR_QUEUE = 4096, NR_PORTS = 32 };

/* Everything per direction is indexed [0] from the first device's
 * namespace to the second's, [1] back. */
typedef struct {
    double delay_ms[2]; /* each packet held this long */
    double loss[2];     /* drop probability per packet, 0..1 */
    uint64_t seed;      /* of the drop decisions */
    int max_s;          /* the relay exits after this long in any case */
} nr_opts;

typedef struct {
    uint64_t packets[2];         /* read from a TUN device */
    uint64_t bytes[2];           /* their IP bytes */
    uint64_t lost[2];            /* dropped by the loss draw */
    uint64_t overflow[2];        /* dropped because the queue was full */
    uint64_t delivered[2];       /* written to the other TUN device */
    uint64_t write_err[2];       /* a write to the other device failed */
    int last_errno[2];           /* of the last failed write */
    uint64_t syns[2];            /* TCP connection requests (SYN without ACK) */
    int n_ports[2];              /* the distinct ports they asked for, */
    uint16_t ports[2][NR_PORTS]; /* the first NR_PORTS of them */
    double max_late_ms;          /* the latest a packet left after its due time */
} nr_stats;

typedef struct {
    pid_t pid;   /* the relay process; 0 when none runs */
    int ctl_fd;  /* parent's end: closing it (or dying) stops the relay */
    int stat_fd; /* parent's end: the relay writes its nr_stats here */
} nr_relay;

/* Starts the relay: TUN device dev_a inside namespace ns_a (a name of `ip
 * netns`), dev_b inside ns_b, both down and without addresses (the caller
 * brings them up and adds its routes). 0 once both devices exist; -1 with
 * the reason in err (namespace not found, TUN refused, ...). */
int nr_start(nr_relay *r, const char *ns_a, const char *dev_a, const char *ns_b, const char *dev_b,
             const nr_opts *o, char *err, size_t errlen);

/* Stops the relay (bounded: killed after 5 s) and fills *st with its
 * counters. 0, or -1 when it died before reporting them (it ran past max_s,
 * or crashed). Safe to call when none runs (returns -1). */
int nr_stop(nr_relay *r, nr_stats *st);

#endif
