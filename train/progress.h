/* train/progress.h - progress of training and of a long pass (evaluation,
 * the leftover pass), and the smoothed rates behind every ETA.
 *
 * A reporter shows "<what>: 120/500 images  4.1 img/s  eta 0:01:33" (or
 * "train: 40/200 steps  1.9 it/s  ... loss 0.812" for training, whatever
 * train.log_every is; a rate under 1 is shown as seconds per item; the
 * rate starts after the first update, whose item pays for warm-up):
 *  - on a terminal (stderr is a TTY) as one line redrawn in place with a
 *    carriage return (core/log.h's sg_log_status: log lines printed
 *    meanwhile go above it), at most 5 times a second, first after 1 s (a
 *    short pass shows nothing), cleared at the end;
 *  - otherwise (a log file, a pipe, a batch system) as a log line at most
 *    every log_s seconds (SG_PROGRESS_LOG_S unless sg_progress_units says
 *    otherwise; 0 = none), first after that long.
 * Only an enabled reporter (rank 0 at log level info or above) prints; the
 * others only count. The rate is an exponential moving average over update
 * intervals of at least half a second (sg_ema), so one slow or fast batch
 * does not swing the ETA. Not thread-safe: one reporter per pass, updated by
 * the thread doing the work.
 */
#ifndef SG_TRAIN_PROGRESS_H
#define SG_TRAIN_PROGRESS_H

#include <stdint.h>

#define SG_PROGRESS_LOG_S 5.0

/* Exponential moving average with weight alpha for the new value; *avg <= 0
 * means "no value yet" (the first value is taken as it is). Returns *avg. */
double sg_ema(double *avg, double value, double alpha);

/* "h:mm:ss" (negative or not finite: 0:00:00). */
void sg_fmt_duration(char *buf, int n, double seconds);

typedef struct sg_progress {
    char what[48];
    char unit[16], rate_unit[16]; /* "images", "img" (shown as img/s or s/img) */
    char note[96];                /* shown at the end of the line (e.g. the loss), "" = none */
    int64_t total, done;
    int enabled, tty, drawn;
    int warm; /* the first update (the warm-up item) was seen: the rate starts there */
    double t0, t_rate, t_draw, t_log;
    double log_s;   /* seconds between log lines off a terminal, 0 = none */
    double first_s; /* on a terminal: nothing before this many seconds (1; training 0) */
    double extra_s; /* seconds the ETA adds to the items left (e.g. validations) */
    int64_t done_rate;
    double rate; /* smoothed items per second, 0 = not known yet */
} sg_progress;

/* Starts a pass of total items. enabled: this process prints (rank 0). */
void sg_progress_begin(sg_progress *p, const char *what, int64_t total, int enabled);
/* After begin: items named unit ("steps"), the rate as rate_unit/s ("it"),
 * a log line every log_s seconds off a terminal (0 = none), the pass
 * starting at done items (a resumed run), not 0, and on a terminal a line
 * from the first update on (tqdm-style: a training run is never "short"). */
void sg_progress_units(sg_progress *p, const char *unit, const char *rate_unit, double log_s,
                       int64_t done);
/* Off a terminal: a log line of the caller's own (train.log_every) was just
 * printed; the next periodic line comes log_s after it. */
void sg_progress_logged(sg_progress *p);
/* done items so far (monotonic); prints when it is time. */
void sg_progress_update(sg_progress *p, int64_t done);
/* Ends the pass: clears the terminal line. Returns the seconds it took. */
double sg_progress_end(sg_progress *p);

/* Setup stages. sg_stage names what setup is doing now (ending the stage
 * before); a watcher thread logs "setup: <what> ..." once a stage has run
 * for SG_STAGE_ANNOUNCE_S, and its duration when it ends, so a quick setup
 * prints nothing and a slow one (model planning, primitive creation, a big
 * dataset index, waiting for other ranks) says what it is waiting for.
 * sg_stage_watch_start returns NULL when the thread cannot start (then the
 * calls do nothing); NULL is accepted everywhere. */
#define SG_STAGE_ANNOUNCE_S 1.5
typedef struct sg_stage_watch sg_stage_watch;
sg_stage_watch *sg_stage_watch_start(void);
void sg_stage(sg_stage_watch *w, const char *what); /* what: a string literal, or NULL */
void sg_stage_watch_stop(sg_stage_watch *w);        /* ends the last stage, joins */

#endif
