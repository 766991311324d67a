/* dist/sock_abort.h - internal: after a failed job, close this process's
 * TCP connections abortively (RST) instead of gracefully (FIN).
 *
 * Why: a graceful close leaves the side that closes first in TIME_WAIT for
 * 60 s, holding its local port. A failed job of N ranks on one host ends
 * N (N - 1) connections at once (the direct mesh and Gloo's pairs: ~16 000
 * at 128 ranks), and the restarted job, which needs as many new ports (Gloo
 * binds a listening socket per pair), found the 28 000 ephemeral ports of a
 * default Linux host taken: "bind: Address already in use". The data in
 * flight on a failed job's connections is worthless, so nothing is lost by
 * resetting them. A clean end keeps the graceful close. */
#ifndef SG_DIST_SOCK_ABORT_H
#define SG_DIST_SOCK_ABORT_H

/* Sets SO_LINGER {on, 0 s} on every TCP socket this process holds (found
 * through /proc/self/fd), so that closing it, or the process exiting,
 * resets the connection and leaves no TIME_WAIT. Returns how many sockets
 * it set, or -1 when /proc/self/fd cannot be read (the sockets then close
 * gracefully, as before; not an error for the caller). */
int sg_sock_abort_all(void);

#endif
