/* dist/launch_agent.c - the launchers' rendezvous of a multi-node job
 * (dist/launch_agent.h). Owns the agent store handles (node 0's holds the
 * server) and the watch thread. */
#include "dist/launch_agent.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/log.h"
#include "core/sigmask.h"
#include "core/util.h"
#include "dist/job_token.h"
#include "dist/store.h"

struct sg_agent {
    sg_store *st;    /* the launcher's loop (and node 0's server) */
    sg_store *watch; /* the watch thread's own connection */
    int node, nnodes;
    double node_timeout_s;
    char addr[256];
    int port;
    pthread_t thread;
    int running;
    atomic_int stop;
    int round, wake_fd;
    /* the watch's finding, under mu */
    pthread_mutex_t mu;
    int found;
    char cause[768];
    int exit_status;
};

static void sleep_s(double s) {
    struct timespec ts = {(time_t)s, (long)((s - (time_t)s) * 1e9)};
    nanosleep(&ts, NULL);
}

sg_agent *sg_agent_create(const char *addr, int port, int node, int nnodes, const char *token,
                          double node_timeout_s) {
    sg_agent *a = calloc(1, sizeof *a);
    SG_CHECK(a, "out of memory");
    a->node = node;
    a->nnodes = nnodes;
    a->node_timeout_s = node_timeout_s;
    a->port = port;
    snprintf(a->addr, sizeof a->addr, "%s", addr);
    pthread_mutex_init(&a->mu, NULL);
    char tok[SG_TOKEN_MAX + 1];
    if (token && *token) snprintf(tok, sizeof tok, "%s", token);
    else snprintf(tok, sizeof tok, "derived-launchers-%s:%d", addr, port);
    sg_store_opts so = {.token = tok, .multi_node = 1};
    SG_INFO("launcher: node %d joins the launchers' rendezvous at %s:%d%s", node, addr, port,
            node == 0 ? " (hosted here)" : "");
    a->st = sg_store_create(addr, port, node, nnodes, node_timeout_s, &so);
    if (!a->st) {
        SG_ERROR("launcher: node %d cannot join the launchers' rendezvous at %s:%d (node 0's "
                 "launcher hosts it; --agent-port, default --master-port + 1): is node 0's "
                 "launcher running, and is that port free there?",
                 node, addr, port);
        free(a);
        return NULL;
    }
    a->watch = sg_store_clone(a->st);
    if (!a->watch) {
        sg_store_destroy(a->st);
        free(a);
        return NULL;
    }
    /* the store's own messages speak of ranks and workers; the launcher
     * names what failed itself */
    sg_store_set_quiet(a->st, 1);
    sg_store_set_quiet(a->watch, 1);
    return a;
}

sg_status sg_agent_join(sg_agent *a, int round, int max_restarts) {
    char key[96], val[32];
    snprintf(key, sizeof key, "a%d/ready/%d", round, a->node);
    snprintf(val, sizeof val, "%d", max_restarts);
    if (sg_store_set(a->st, key, val, strlen(val) + 1) != SG_STORE_OK) return SG_ERR_RUNTIME;
    double saved = sg_store_timeout(a->st);
    sg_store_set_timeout(a->st, a->node_timeout_s);
    sg_status rc = SG_OK;
    for (int q = 0; q < a->nnodes && rc == SG_OK; q++) {
        snprintf(key, sizeof key, "a%d/ready/%d", round, q);
        void *v = NULL;
        size_t n = 0;
        sg_store_rc sr = sg_store_get(a->st, key, &v, &n);
        if (sr == SG_STORE_TIMEOUT) {
            SG_ERROR("launcher: node %d did not %s within %.0f s (--node-timeout-s): ending the "
                     "job",
                     q, round ? "come back for the restart" : "start", a->node_timeout_s);
            rc = SG_ERR_RUNTIME;
        } else if (sr != SG_STORE_OK) {
            SG_ERROR("launcher: lost the launchers' rendezvous at %s:%d (node 0's launcher) "
                     "while waiting for node %d: ending the job",
                     a->addr, a->port, q);
            rc = SG_ERR_RUNTIME;
        } else if (n == 0 || ((char *)v)[n - 1] || atoi((char *)v) != max_restarts) {
            SG_ERROR("launcher: node %d runs with --max-restarts %s, this node with %d: give "
                     "every node the same launcher options",
                     q, n && !((char *)v)[n - 1] ? (char *)v : "?", max_restarts);
            rc = SG_ERR_CONFIG;
        }
        free(v);
    }
    sg_store_set_timeout(a->st, saved);
    return rc;
}

/* The first failure's record of attempt `round` among the nodes (cause/<q>),
 * into cause / *exit_status / *no_restart; 1 if one was read, else 0. */
static int read_cause(sg_store *s, int round, int nnodes, int skip, char *cause, size_t len,
                      int *exit_status, int *no_restart) {
    int got = 0;
    for (int q = 0; q < nnodes; q++) {
        if (q == skip) continue;
        char key[96];
        snprintf(key, sizeof key, "a%d/cause/%d", round, q);
        int ex = 0;
        if (sg_store_check(s, key, &ex) != SG_STORE_OK || !ex) continue;
        void *v = NULL;
        size_t n = 0;
        if (sg_store_get(s, key, &v, &n) == SG_STORE_OK && n && !((char *)v)[n - 1]) {
            int e = 1, nr = 0, off = 0;
            if (sscanf((char *)v, "%d %d %n", &e, &nr, &off) == 2) {
                if (!got) {
                    snprintf(cause, len, "node %d: %s", q, (char *)v + off);
                    *exit_status = e;
                }
                if (no_restart) *no_restart |= nr;
                got = 1;
            }
        }
        free(v);
    }
    return got;
}

static void *watch_main(void *arg) {
    sg_agent *a = arg;
    char key[96];
    snprintf(key, sizeof key, "a%d/failed", a->round);
    double last_ok = sg_now_s();
    while (!a->stop) {
        int64_t n = 0;
        int found = 0;
        char cause[768] = "";
        int exit_status = 1;
        if (sg_store_add(a->watch, key, 0, &n) == SG_STORE_OK) {
            last_ok = sg_now_s();
            if (n > 0) {
                if (!read_cause(a->watch, a->round, a->nnodes, a->node, cause, sizeof cause,
                                &exit_status, NULL))
                    snprintf(cause, sizeof cause, "another node failed");
                found = 1;
            }
        } else if (sg_now_s() - last_ok > a->node_timeout_s) {
            snprintf(cause, sizeof cause,
                     "node 0's launcher (the launchers' rendezvous at %s:%d) was not reachable "
                     "for %.0f s (--node-timeout-s)",
                     a->addr, a->port, a->node_timeout_s);
            found = -1;
        }
        if (found) {
            pthread_mutex_lock(&a->mu);
            a->found = found;
            snprintf(a->cause, sizeof a->cause, "%s", cause);
            a->exit_status = exit_status;
            pthread_mutex_unlock(&a->mu);
            char b = 1;
            if (write(a->wake_fd, &b, 1) < 0) { /* the loop polls anyway */
            }
            break;
        }
        for (int i = 0; i < 3 && !a->stop; i++) sleep_s(0.1);
    }
    return NULL;
}

sg_status sg_agent_watch(sg_agent *a, int round, int wake_fd) {
    a->round = round;
    a->wake_fd = wake_fd;
    a->stop = 0;
    a->found = 0;
    /* the watch's requests are bounded by the node timeout, never longer */
    sg_store_set_timeout(a->watch, a->node_timeout_s < 5 ? a->node_timeout_s : 5);
    sigset_t old; /* born with every signal blocked: signals are the launcher loop's */
    sg_sigmask_block_all(&old);
    int e = pthread_create(&a->thread, NULL, watch_main, a);
    sg_sigmask_restore(&old);
    if (e) {
        SG_ERROR("launcher: cannot start the thread that watches the other nodes");
        return SG_ERR_RUNTIME;
    }
    a->running = 1;
    return SG_OK;
}

int sg_agent_poll(sg_agent *a, char *cause, size_t len, int *exit_status) {
    pthread_mutex_lock(&a->mu);
    int f = a->found;
    if (f) {
        snprintf(cause, len, "%s", a->cause);
        *exit_status = a->exit_status;
    }
    pthread_mutex_unlock(&a->mu);
    return f;
}

void sg_agent_unwatch(sg_agent *a) {
    if (!a->running) return;
    a->stop = 1;
    pthread_join(a->thread, NULL);
    a->running = 0;
}

sg_status sg_agent_outcome(sg_agent *a, int round, int may_restart, int exit_status, int no_restart,
                           const char *cause, int *failed, int *any_no_restart, char *first_cause,
                           size_t len, int *first_exit) {
    char key[96];
    int64_t n = 0;
    *failed = exit_status != 0;
    *any_no_restart = no_restart;
    *first_exit = exit_status;
    snprintf(first_cause, len, "%s", exit_status ? cause : "");
    double saved = sg_store_timeout(a->st);
    if (!may_restart) { /* the last attempt: tell the others, wait for nothing */
        if (!exit_status) return SG_OK;
        sg_store_set_timeout(a->st, 2.0);
        char val[900];
        snprintf(key, sizeof key, "a%d/cause/%d", round, a->node);
        snprintf(val, sizeof val, "%d %d %s", exit_status, no_restart ? 1 : 0, cause);
        if (sg_store_set(a->st, key, val, strlen(val) + 1) == SG_STORE_OK) {
            snprintf(key, sizeof key, "a%d/failed", round);
            sg_store_add(a->st, key, 1, &n);
        }
        sg_store_set_timeout(a->st, saved);
        return SG_OK;
    }
    if (exit_status) {
        char val[900];
        snprintf(key, sizeof key, "a%d/cause/%d", round, a->node);
        snprintf(val, sizeof val, "%d %d %s", exit_status, no_restart ? 1 : 0, cause);
        if (sg_store_set(a->st, key, val, strlen(val) + 1) != SG_STORE_OK) return SG_ERR_RUNTIME;
        snprintf(key, sizeof key, "a%d/failed", round);
        if (sg_store_add(a->st, key, 1, &n) != SG_STORE_OK) return SG_ERR_RUNTIME;
    }
    snprintf(key, sizeof key, "a%d/reported", round);
    if (sg_store_add(a->st, key, 1, &n) != SG_STORE_OK) return SG_ERR_RUNTIME;
    double deadline = sg_now_s() + a->node_timeout_s;
    while (n < a->nnodes) {
        if (sg_now_s() > deadline) {
            SG_ERROR("launcher: not every node reported the end of attempt %d within %.0f s "
                     "(--node-timeout-s; %lld of %d did): ending the job",
                     round, a->node_timeout_s, (long long)n, a->nnodes);
            return SG_ERR_RUNTIME;
        }
        sleep_s(0.1);
        if (sg_store_add(a->st, key, 0, &n) != SG_STORE_OK) return SG_ERR_RUNTIME;
    }
    snprintf(key, sizeof key, "a%d/failed", round);
    if (sg_store_add(a->st, key, 0, &n) != SG_STORE_OK) return SG_ERR_RUNTIME;
    if (n > (exit_status ? 1 : 0)) {
        char other[768];
        int e = 1, nr = 0;
        if (read_cause(a->st, round, a->nnodes, a->node, other, sizeof other, &e, &nr)) {
            *any_no_restart |= nr;
            if (!exit_status) {
                snprintf(first_cause, len, "%s", other);
                *first_exit = e;
            }
        }
        *failed = 1;
    }
    /* node 0 hosts the store: it stays until every node has read the
     * outcome, else a node still polling for the last report finds the
     * store gone and ends a finished job as failed */
    snprintf(key, sizeof key, "a%d/read", round);
    if (sg_store_add(a->st, key, 1, &n) != SG_STORE_OK) return SG_ERR_RUNTIME;
    if (a->node == 0) {
        deadline = sg_now_s() + (a->node_timeout_s < 10.0 ? a->node_timeout_s : 10.0);
        while (n < a->nnodes && sg_now_s() < deadline) {
            sleep_s(0.05);
            if (sg_store_add(a->st, key, 0, &n) != SG_STORE_OK) break;
        }
    }
    return SG_OK;
}

void sg_agent_destroy(sg_agent *a) {
    if (!a) return;
    sg_agent_unwatch(a);
    sg_store_destroy(a->watch);
    /* every node has read the outcome by now: leaving takes a moment, and
     * node 0 serves the others' goodbyes for 5 s at most (a node cut off
     * never says it) */
    sg_store_set_timeout(a->st, a->node == 0 ? 5.0 : 2.0);
    sg_store_leave(a->st);
    sg_store_destroy(a->st);
    pthread_mutex_destroy(&a->mu);
    free(a);
}
