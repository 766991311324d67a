/* dist/launch_report.h - internal: how a worker tells segtrain's launcher
 * (dist/launch.h) which rank it found dead or hung, so the launcher's
 * failure summary names the rank that hung rather than the rank that
 * noticed it and exited.
 *
 * The launcher opens a pipe and hands its write end to every worker:
 * SEGTRAIN_LAUNCH_REPORT="<fd>:<launcher pid>". A worker whose parent is
 * that pid writes one line per finding, "culprit <self> <rank> <state>\n"
 * (state: SG_RANK_* of dist/store.h, or SG_LAUNCH_RANK_FAILED: that rank
 * told the others it failed on its own error, e.g. rank 0's checkpoint write
 * on a full disk), atomically (shorter than PIPE_BUF)
 * and without blocking. Global rank 0 also writes "checkpoint <iter>\n"
 * after each checkpoint it committed, so the launcher knows whether an
 * attempt made progress (its restart rule, dist/launch.h). Anywhere else
 * (torchrun, mpirun, a variable inherited by a grandchild) it does nothing.
 */
#ifndef SG_DIST_LAUNCH_REPORT_H
#define SG_DIST_LAUNCH_REPORT_H

#include <stddef.h>

#include "core/status.h"

#define SG_LAUNCH_REPORT_ENV "SEGTRAIN_LAUNCH_REPORT"
/* A state beyond dist/store.h's SG_RANK_*: the rank reported its own failure
 * to the others (they stop because of it, not because of a fault of theirs). */
#define SG_LAUNCH_RANK_FAILED 4

/* Worker: checks the variable once (parent pid, a pipe) and marks the
 * descriptor close-on-exec so nothing this process starts inherits it.
 * Returns the descriptor (an int fd, not a status), or -1 when this process
 * has no launcher to tell (not an error: nothing is logged). */
int sg_launch_report_open(void);
/* Worker: rank self found rank culprit in state (SG_RANK_DEAD, _HUNG,
 * _UNREACHABLE, SG_LAUNCH_RANK_FAILED). No-op without a launcher. */
void sg_launch_report_culprit(int self, int culprit, int state);

/* Worker (global rank 0): checkpoint iteration `iter` is committed. No-op
 * without a launcher. */
void sg_launch_report_checkpoint(long long iter);

/* Launcher: parses one line (without its newline), a pure function (fuzzed
 * by tests/fuzz/fuzz_mesh.c). SG_OK and the fields, or SG_ERR_RUNTIME for
 * anything malformed (not logged: the launcher ignores such a line). */
sg_status sg_launch_report_parse(const char *line, size_t len, int *self, int *culprit, int *state);
/* Launcher: parses a "checkpoint <iter>" line (without its newline), a pure
 * function like the one above. SG_OK and *iter (>= 0), or SG_ERR_RUNTIME for
 * anything else (not logged). */
sg_status sg_launch_report_parse_checkpoint(const char *line, size_t len, long long *iter);
/* The phrase for a state: "is stopped or hung", ... */
const char *sg_launch_report_phrase(int state);

#endif
