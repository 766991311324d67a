/* dist/launch_agent.h - internal: the launchers' own rendezvous in a job of
 * several nodes (dist/launch.h), which outlives the workers: a store server
 * (dist/store.h) in node 0's launcher, at the agent port (--agent-port,
 * default MASTER_PORT + 1), with every node's launcher as a client claiming
 * its node rank. Through it the launchers
 *  - start every attempt together (a node that does not join attempt r
 *    within the node timeout ends the job on every node, named);
 *  - learn at once that the attempt failed on another node, so they stop
 *    their own workers (also a stopped or hung one: SIGTERM, SIGCONT, then
 *    SIGKILL), instead of waiting for them forever;
 *  - agree on each attempt's outcome (failed or not, whether a restart may
 *    fix it, the first cause and its exit status), so all of them restart or
 *    all of them end, with the same status.
 * Keys are "a<round>/...": ready/<node> (its --max-restarts, which must
 * agree), failed (count), cause/<node> ("<exit> <no-restart> <text>"),
 * reported (count).
 *
 * The watch runs in a thread with a connection of its own (its requests may
 * block while the network is down; the launcher's loop never does): it
 * polls the failure count every 0.3 s and writes a byte to the wake pipe
 * when another node failed, or when node 0's launcher could not be reached
 * for the node timeout. The functions return sg_status after logging, except
 * sg_agent_poll (a finding, see there). */
#ifndef SG_DIST_LAUNCH_AGENT_H
#define SG_DIST_LAUNCH_AGENT_H

#include <stddef.h>

#include "core/status.h"

typedef struct sg_agent sg_agent;

/* Node 0 starts the server at addr:port; every node connects (retrying for
 * node_timeout_s). token: the job's, or "" (one is derived from addr:port:
 * it separates jobs, it is no secret). NULL after logging. */
sg_agent *sg_agent_create(const char *addr, int port, int node, int nnodes, const char *token,
                          double node_timeout_s);
/* Attempt `round`: publish readiness, wait for every node. */
sg_status sg_agent_join(sg_agent *a, int round, int max_restarts);
/* Starts the watch of attempt `round`; wake_fd: the write end of a pipe. */
sg_status sg_agent_watch(sg_agent *a, int round, int wake_fd);
/* What the watch found: 0 nothing, 1 the attempt failed on another node
 * (cause: "node N: ...", *exit_status its status), -1 node 0's launcher is
 * unreachable. A finding, not a status. */
int sg_agent_poll(sg_agent *a, char *cause, size_t len, int *exit_status);
/* Stops the watch thread. */
void sg_agent_unwatch(sg_agent *a);
/* This node's outcome of attempt `round` (exit_status 0: success), then,
 * when a restart may follow (may_restart), waits until every node reported
 * (the node timeout) and merges: *failed (any node), *no_restart (a node's
 * failure no restart can fix), the first failure's cause and exit status
 * (this node's own when it failed). Without may_restart the failure is
 * published (for the other nodes' watch, within 2 s) and nothing awaited:
 * every node ends with its own status. */
sg_status sg_agent_outcome(sg_agent *a, int round, int may_restart, int exit_status, int no_restart,
                           const char *cause, int *failed, int *any_no_restart, char *first_cause,
                           size_t len, int *first_exit);
void sg_agent_destroy(sg_agent *a);

#endif
