/* core/log.h - rank-aware, timestamped logging and fatal-error reporting.
 *
 * Every module logs through these. Rank 0 prints to stderr at the configured
 * level (other ranks print only warnings and errors unless --verbose); every
 * rank also appends to <run_dir>/logs/rank<N>.log once sg_log_open_file is
 * called. Thread-safe (one mutex around each line).
 */
#ifndef SG_CORE_LOG_H
#define SG_CORE_LOG_H

#include <stdarg.h>
#include <stddef.h>

#include "core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

enum { SG_LOG_ERROR = 0, SG_LOG_WARN = 1, SG_LOG_INFO = 2, SG_LOG_DEBUG = 3 };

void sg_log_set_level(int level); /* default SG_LOG_INFO */
int sg_log_get_level(void);
void sg_log_set_rank(int rank, int world);   /* prefix "[rank N]" when world > 1 */
void sg_log_get_rank(int *rank, int *world); /* either pointer may be NULL */
/* Opens <dir>/rank<N>.log for appending (creates dir). Returns SG_OK, or
 * SG_ERR_RUNTIME after logging the path and errno. */
sg_status sg_log_open_file(const char *dir);
void sg_log_close_file(void);

void sg_log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* A live status line on a terminal (train/progress.h draws it only when
 * stderr is a TTY): drawn in place with a carriage return; a log line
 * printed meanwhile clears it, is printed, and the status line is redrawn
 * below it, so the two never mix. NULL or "" clears it. Never written to
 * the log file. */
void sg_log_status(const char *line);
void sg_vlog(int level, const char *fmt, va_list ap);

#define SG_ERROR(...) sg_log(SG_LOG_ERROR, __VA_ARGS__)
#define SG_WARN(...) sg_log(SG_LOG_WARN, __VA_ARGS__)
#define SG_INFO(...) sg_log(SG_LOG_INFO, __VA_ARGS__)
#define SG_DEBUG(...) sg_log(SG_LOG_DEBUG, __VA_ARGS__)

/* The error contract of functions that take a caller's buffer (the image
 * decoders, the .pth reader, dataset loading): formats the message into
 * err[errlen] when err != NULL and errlen > 0 (the caller shows it, e.g.
 * from a loader thread), else logs it with SG_ERROR. Messages longer than
 * SG_REPORT_LEN - 1 bytes are cut. An argument may be err itself (a message
 * wrapping the one before): the text is formatted into a copy first. */
#define SG_REPORT_LEN 1024
void sg_report(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Ending the process from library code (core/status.h): errors a user can
 * cause are logged and returned as sg_status, never fatal. SG_FATAL and
 * SG_CHECK are for the three cases no caller could handle:
 *  - programmer errors: an assertion of an invariant the code itself keeps
 *    (a model used before it is planned, an internal shape mismatch);
 *  - out of host memory: SG_CHECK(p != NULL, "out of host memory ...") right
 *    after malloc, xmalloc-style;
 *  - failures of the GPU / oneDNN libraries inside ops (kernels/), which
 *    return void.
 *
 * Logs "fatal: <msg> (file:line)" and exits with status 1. */
void sg_fatal_at(const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4), noreturn));
#define SG_FATAL(...) sg_fatal_at(__FILE__, __LINE__, __VA_ARGS__)

/* Checks a condition that must hold (see above); fatal with the message
 * otherwise. */
#define SG_CHECK(cond, ...)                                        \
    do {                                                           \
        if (!(cond)) sg_fatal_at(__FILE__, __LINE__, __VA_ARGS__); \
    } while (0)

#ifdef __cplusplus
}
#endif

#endif
