/* dist/fd_limit.h - internal: the file descriptors a job needs at N ranks,
 * checked at start (rank and launcher) rather than discovered as "Too many
 * open files" in the middle of building a mesh.
 *
 * The count (sg_fd_need_rank) follows the connections a CPU rank holds:
 * Gloo's gradient channel two descriptors per peer while it connects (each
 * pair listens on its own socket until its peer has connected; one after
 * that), the direct mesh one per peer, the rendezvous store two (requests
 * and heartbeats); the rank hosting the store two per rank more (every
 * rank's two connections). Plus a fixed allowance for files, the loader's pipes and
 * libraries. NCCL ranks need far fewer (the store's), so the same bound is
 * safe for them.
 *
 * sg_fd_limit_ensure raises RLIMIT_NOFILE's soft limit up to the hard limit
 * when it is lower than needed (as `ulimit -n` would), and only when the
 * hard limit is lower too logs an error naming both numbers and
 * `ulimit -n`. */
#ifndef SG_DIST_FD_LIMIT_H
#define SG_DIST_FD_LIMIT_H

#include "core/status.h"

/* Descriptors one rank needs in a world of `world` ranks; hosts_store: it
 * runs the rendezvous store (rank 0). */
long sg_fd_need_rank(int world, int hosts_store);
/* Descriptors the launcher needs for `local` workers of its node (their
 * output pipes and the culprit pipe), plus the agent store's connections
 * when it hosts one for `world` ranks (0: none). */
long sg_fd_need_launcher(int local, int world);

/* SG_OK when the soft limit is (or was raised to) at least need; else
 * SG_ERR_CONFIG after logging "who" (e.g. "rank 3", "launcher"), what the
 * descriptors are for, the need and the limits, and the `ulimit -n` to
 * run. A failing getrlimit/setrlimit is logged too (SG_ERR_RUNTIME). */
sg_status sg_fd_limit_ensure(long need, const char *who, const char *what);

#endif
