/* core/status.h - the one error convention of library functions.
 *
 * A library function (core, kernels, data, model, dist, train) that can fail
 * returns sg_status - or NULL, for a constructor. It logs the error where it
 * is detected (what failed, where: file, key, line, rank; and what to do)
 * and returns; its callers only pass the status up, or add context. Only
 * cmd/ turns a status into the process exit code (sg_exit_code in
 * cmd/commands.h):
 *
 *   SG_OK           0   success                                     exit 0
 *   SG_ERR_CONFIG  -2   the user's choice is wrong: the configuration, exit 2
 *                       the command line, or an input they picked
 *                       (e.g. a crop or batch the model cannot train on,
 *                       weights that do not fit the model): fixing it
 *                       is an edit on their side
 *   SG_ERR_RUNTIME -1   everything else: I/O, data, the network,     exit 1
 *                       another rank, a resource
 *
 * The errors are negative on purpose: every older 0 / -1 function already
 * fits (-1 is SG_ERR_RUNTIME), and `!= 0` / `< 0` checks keep working.
 *
 * A command stopped by a signal exits 128 + the signal (cmd/train.c); the
 * launcher exits with its failed worker's status. The same rule for users,
 * with examples of each class: docs/FAILURES.md ("Exit status").
 *
 * Library code ends the process only for programmer errors (SG_CHECK
 * assertions), out of host memory (core/log.h) and failures of the GPU /
 * oneDNN libraries inside ops (kernels/backend.h); everything else returns.
 */
#ifndef SG_CORE_STATUS_H
#define SG_CORE_STATUS_H

typedef enum sg_status { SG_OK = 0, SG_ERR_RUNTIME = -1, SG_ERR_CONFIG = -2 } sg_status;

#endif
