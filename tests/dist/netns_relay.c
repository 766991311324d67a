/* tests/dist/netns_relay.c - the relay of netns_relay.h: two TUN devices in
 * two namespaces, a delay queue and a loss draw per direction. */
#include "tests/dist/netns_relay.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/if.h>
#include <linux/if_tun.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

enum { SLOT = 2048 }; /* bytes per queued packet: above the devices' 1500 MTU */

typedef struct {
    double due;
    uint16_t len;
    unsigned char data[SLOT];
} packet;

typedef struct {
    packet *slot; /* NR_QUEUE of them, a ring */
    int head, n;
} queue;

/* The first message on the stats pipe: an empty text once both devices
 * exist, else why not. */
typedef struct {
    char err[240];
} ready_msg;

typedef struct {
    nr_stats st;
    int expired; /* the relay ran past max_s */
} final_msg;

static double mono(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* xorshift64*: the drop decisions, reproducible for one seed and one
 * packet order. */
static double uniform(uint64_t *s) {
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return (double)((*s * 2685821657736338717ull) >> 11) * (1.0 / 9007199254740992.0);
}

/* Enters namespace ns and opens TUN device dev there; its fd, or -1 with
 * the reason in err. */
static int tun_in_ns(const char *ns, const char *dev, char *err, size_t errlen) {
    char path[256];
    snprintf(path, sizeof path, "/run/netns/%s", ns);
    int nfd = open(path, O_RDONLY | O_CLOEXEC);
    if (nfd < 0) {
        snprintf(path, sizeof path, "/var/run/netns/%s", ns);
        nfd = open(path, O_RDONLY | O_CLOEXEC);
    }
    if (nfd < 0) {
        snprintf(err, errlen, "namespace %s: cannot open /run/netns/%s: %s", ns, ns,
                 strerror(errno));
        return -1;
    }
    if (setns(nfd, CLONE_NEWNET) != 0) {
        snprintf(err, errlen, "setns into %s: %s", ns, strerror(errno));
        close(nfd);
        return -1;
    }
    close(nfd);
    int fd = open("/dev/net/tun", O_RDWR | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
        snprintf(err, errlen, "open /dev/net/tun in %s: %s", ns, strerror(errno));
        return -1;
    }
    struct ifreq ifr;
    memset(&ifr, 0, sizeof ifr);
    ifr.ifr_flags = IFF_TUN | IFF_NO_PI;
    snprintf(ifr.ifr_name, IFNAMSIZ, "%s", dev);
    if (ioctl(fd, TUNSETIFF, &ifr) != 0) {
        snprintf(err, errlen, "TUNSETIFF %s in %s: %s", dev, ns, strerror(errno));
        close(fd);
        return -1;
    }
    return fd;
}

static int write_all(int fd, const void *p, size_t n) {
    const char *c = p;
    while (n) {
        ssize_t w = write(fd, c, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return -1;
        c += w;
        n -= (size_t)w;
    }
    return 0;
}

/* Reads exactly n bytes within timeout_s; 0, or -1 (end, error, time). */
static int read_all(int fd, void *p, size_t n, double timeout_s) {
    char *c = p;
    double t_end = mono() + timeout_s;
    while (n) {
        int ms = (int)((t_end - mono()) * 1000);
        if (ms <= 0) return -1;
        struct pollfd pf = {.fd = fd, .events = POLLIN};
        int pr = poll(&pf, 1, ms);
        if (pr < 0 && errno == EINTR) continue;
        if (pr <= 0) return -1;
        ssize_t r = read(fd, c, n);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return -1;
        c += r;
        n -= (size_t)r;
    }
    return 0;
}

/* Counts a TCP connection request (an IPv4 TCP segment with SYN and
 * without ACK) and its destination port. */
static void note_syn(const unsigned char *p, size_t n, int d, nr_stats *st) {
    if (n < 20 || p[0] >> 4 != 4 || p[9] != 6) return;
    size_t ihl = (size_t)(p[0] & 15) * 4;
    if (ihl < 20 || n < ihl + 14 || (p[ihl + 13] & 0x12) != 0x02) return;
    st->syns[d]++;
    uint16_t port = (uint16_t)(p[ihl + 2] << 8 | p[ihl + 3]);
    for (int i = 0; i < st->n_ports[d]; i++)
        if (st->ports[d][i] == port) return;
    if (st->n_ports[d] < NR_PORTS) st->ports[d][st->n_ports[d]++] = port;
}

/* The relay's loop; returns when told to stop (ctl readable or closed) or
 * past t_end (then *expired = 1). */
static void relay_loop(const int tun[2], int ctl, const nr_opts *o, queue q[2], nr_stats *st,
                       int *expired) {
    uint64_t rng = o->seed ? o->seed : 0x9e3779b97f4a7c15ull;
    double t_end = mono() + o->max_s;
    static unsigned char buf[65536];
    for (;;) {
        double now = mono();
        if (now > t_end) {
            *expired = 1;
            return;
        }
        /* deliver what is due: one FIFO per direction (a constant delay
         * keeps the order, as netem without jitter does) */
        double next = t_end;
        for (int d = 0; d < 2; d++) {
            while (q[d].n && q[d].slot[q[d].head].due <= now) {
                packet *p = &q[d].slot[q[d].head];
                double late = (now - p->due) * 1000.0;
                if (late > st->max_late_ms) st->max_late_ms = late;
                if (write(tun[1 - d], p->data, p->len) == (ssize_t)p->len) {
                    st->delivered[d]++;
                } else {
                    st->write_err[d]++;
                    st->last_errno[d] = errno;
                }
                q[d].head = (q[d].head + 1) % NR_QUEUE;
                q[d].n--;
            }
            if (q[d].n && q[d].slot[q[d].head].due < next) next = q[d].slot[q[d].head].due;
        }
        double wait = next - now;
        if (wait < 0) wait = 0;
        struct timespec ts = {.tv_sec = (time_t)wait,
                              .tv_nsec = (long)((wait - (double)(time_t)wait) * 1e9)};
        struct pollfd pf[3] = {{.fd = tun[0], .events = POLLIN},
                               {.fd = tun[1], .events = POLLIN},
                               {.fd = ctl, .events = POLLIN}};
        int pr = ppoll(pf, 3, &ts, NULL);
        if (pr < 0 && errno != EINTR) return;
        if (pr <= 0) continue;
        if (pf[2].revents) return; /* the parent's end closed */
        now = mono();
        for (int d = 0; d < 2; d++) {
            if (!(pf[d].revents & POLLIN)) continue;
            for (int k = 0; k < 256; k++) { /* bounded per wake-up */
                ssize_t n = read(tun[d], buf, sizeof buf);
                if (n <= 0) break;
                st->packets[d]++;
                st->bytes[d] += (uint64_t)n;
                note_syn(buf, (size_t)n, d, st);
                if (o->loss[d] > 0 && uniform(&rng) < o->loss[d]) {
                    st->lost[d]++;
                    continue;
                }
                if (q[d].n == NR_QUEUE || n > SLOT) {
                    st->overflow[d]++;
                    continue;
                }
                packet *p = &q[d].slot[(q[d].head + q[d].n) % NR_QUEUE];
                p->due = now + o->delay_ms[d] / 1000.0;
                p->len = (uint16_t)n;
                memcpy(p->data, buf, (size_t)n);
                q[d].n++;
            }
        }
    }
}

static void relay_child(int ctl, int out, const char *ns_a, const char *dev_a, const char *ns_b,
                        const char *dev_b, const nr_opts *o, pid_t parent) {
    /* the test's handlers (namespace teardown) belong to the parent */
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    signal(SIGABRT, SIG_DFL);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    ready_msg rm;
    memset(&rm, 0, sizeof rm);
    if (getppid() != parent) _exit(1);
    int tun[2] = {-1, -1};
    queue q[2];
    memset(q, 0, sizeof q);
    tun[0] = tun_in_ns(ns_a, dev_a, rm.err, sizeof rm.err);
    if (tun[0] >= 0) tun[1] = tun_in_ns(ns_b, dev_b, rm.err, sizeof rm.err);
    for (int d = 0; tun[1] >= 0 && d < 2; d++) {
        q[d].slot = malloc(sizeof(packet) * NR_QUEUE);
        if (!q[d].slot) snprintf(rm.err, sizeof rm.err, "out of memory for the relay's queue");
    }
    write_all(out, &rm, sizeof rm);
    if (rm.err[0]) _exit(1);
    final_msg fm;
    memset(&fm, 0, sizeof fm);
    relay_loop(tun, ctl, o, q, &fm.st, &fm.expired);
    write_all(out, &fm, sizeof fm);
    _exit(fm.expired ? 3 : 0);
}

int nr_start(nr_relay *r, const char *ns_a, const char *dev_a, const char *ns_b, const char *dev_b,
             const nr_opts *o, char *err, size_t errlen) {
    memset(r, 0, sizeof *r);
    r->ctl_fd = r->stat_fd = -1;
    int ctl[2], out[2];
    if (pipe2(ctl, O_CLOEXEC) != 0) {
        snprintf(err, errlen, "pipe: %s", strerror(errno));
        return -1;
    }
    if (pipe2(out, O_CLOEXEC) != 0) {
        snprintf(err, errlen, "pipe: %s", strerror(errno));
        close(ctl[0]);
        close(ctl[1]);
        return -1;
    }
    pid_t parent = getpid();
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        snprintf(err, errlen, "fork: %s", strerror(errno));
        close(ctl[0]);
        close(ctl[1]);
        close(out[0]);
        close(out[1]);
        return -1;
    }
    if (pid == 0) {
        close(ctl[1]);
        close(out[0]);
        relay_child(ctl[0], out[1], ns_a, dev_a, ns_b, dev_b, o, parent);
        _exit(1);
    }
    close(ctl[0]);
    close(out[1]);
    r->pid = pid;
    r->ctl_fd = ctl[1];
    r->stat_fd = out[0];
    ready_msg rm;
    if (read_all(r->stat_fd, &rm, sizeof rm, 10) != 0) {
        snprintf(err, errlen, "the relay process ended, or did not report within 10 s");
        nr_stats st;
        nr_stop(r, &st);
        return -1;
    }
    rm.err[sizeof rm.err - 1] = 0;
    if (rm.err[0]) {
        snprintf(err, errlen, "%s", rm.err);
        nr_stats st;
        nr_stop(r, &st);
        return -1;
    }
    return 0;
}

int nr_stop(nr_relay *r, nr_stats *st) {
    memset(st, 0, sizeof *st);
    if (r->pid <= 0) return -1;
    final_msg fm;
    /* closing our end is the stop signal: never a SIGPIPE, even when the
     * relay already ended (past max_s) */
    close(r->ctl_fd);
    int got = read_all(r->stat_fd, &fm, sizeof fm, 5);
    int status = 0;
    if (waitpid(r->pid, &status, WNOHANG) != r->pid) {
        double t_end = mono() + 5;
        while (waitpid(r->pid, &status, WNOHANG) != r->pid) {
            if (mono() > t_end) {
                kill(r->pid, SIGKILL);
                waitpid(r->pid, &status, 0);
                break;
            }
            usleep(10 * 1000);
        }
    }
    close(r->stat_fd);
    r->pid = 0;
    r->ctl_fd = r->stat_fd = -1;
    if (got != 0) return -1;
    *st = fm.st;
    return fm.expired ? -1 : 0;
}
