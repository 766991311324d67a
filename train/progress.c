/* train/progress.c - see progress.h. */
#include "train/progress.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/log.h"
#include "core/sigmask.h"
#include "core/util.h"

#define TTY_FIRST_S 1.0
#define TTY_EVERY_S 0.2
#define RATE_MIN_S 0.5
#define RATE_ALPHA 0.3

double sg_ema(double *avg, double value, double alpha) {
    if (!isfinite(value) || value <= 0) return *avg;
    *avg = *avg > 0 ? alpha * value + (1 - alpha) * *avg : value;
    return *avg;
}

void sg_fmt_duration(char *buf, int n, double s) {
    if (!isfinite(s) || s < 0) s = 0;
    long t = (long)(s + 0.5);
    snprintf(buf, (size_t)n, "%ld:%02ld:%02ld", t / 3600, (t / 60) % 60, t % 60);
}

void sg_progress_begin(sg_progress *p, const char *what, int64_t total, int enabled) {
    memset(p, 0, sizeof *p);
    snprintf(p->what, sizeof p->what, "%s", what);
    snprintf(p->unit, sizeof p->unit, "images");
    snprintf(p->rate_unit, sizeof p->rate_unit, "img");
    p->total = total;
    p->log_s = SG_PROGRESS_LOG_S;
    p->first_s = TTY_FIRST_S;
    p->enabled = enabled && sg_log_get_level() >= SG_LOG_INFO;
    p->tty = p->enabled && isatty(STDERR_FILENO);
    p->t0 = p->t_rate = p->t_draw = p->t_log = sg_now_s();
}

void sg_progress_units(sg_progress *p, const char *unit, const char *rate_unit, double log_s,
                       int64_t done) {
    snprintf(p->unit, sizeof p->unit, "%s", unit);
    snprintf(p->rate_unit, sizeof p->rate_unit, "%s", rate_unit);
    p->log_s = log_s > 0 ? log_s : 0;
    p->first_s = 0;
    p->done = p->done_rate = done;
}

void sg_progress_logged(sg_progress *p) { p->t_log = sg_now_s(); }

static void format_line(const sg_progress *p, double now, char *buf, size_t n) {
    char eta[32] = "?";
    if (p->rate > 0)
        sg_fmt_duration(eta, sizeof eta, (double)(p->total - p->done) / p->rate + p->extra_s);
    char rate[48] = "-";
    if (p->rate >= 1) snprintf(rate, sizeof rate, "%.1f %s/s", p->rate, p->rate_unit);
    else if (p->rate > 0) snprintf(rate, sizeof rate, "%.2f s/%s", 1 / p->rate, p->rate_unit);
    else snprintf(rate, sizeof rate, "- %s/s", p->rate_unit);
    int pct = p->total > 0 ? (int)(100 * p->done / p->total) : 0;
    snprintf(buf, n, "%s: %lld/%lld %s (%d%%)  %s  %.0fs elapsed  eta %s%s%s", p->what,
             (long long)p->done, (long long)p->total, p->unit, pct, rate, now - p->t0, eta,
             p->note[0] ? "  " : "", p->note);
}

void sg_progress_update(sg_progress *p, int64_t done) {
    p->done = done;
    double now = sg_now_s();
    if (!p->warm) {
        /* the first item pays for warm-up (primitive creation, first
         * allocations): the rate starts after it */
        p->warm = 1;
        p->t_rate = now;
        p->done_rate = done;
    }
    if (now - p->t_rate >= RATE_MIN_S && done > p->done_rate) {
        sg_ema(&p->rate, (double)(done - p->done_rate) / (now - p->t_rate), RATE_ALPHA);
        p->t_rate = now;
        p->done_rate = done;
    }
    if (!p->enabled) return;
    if (done >= p->total) { /* all done: what follows (a last evaluation) has its own */
        if (p->drawn) sg_log_status(NULL);
        p->drawn = 0;
        return;
    }
    char line[384];
    if (p->tty) {
        if (now - p->t0 < p->first_s || (p->drawn && now - p->t_draw < TTY_EVERY_S)) return;
        format_line(p, now, line, sizeof line);
        sg_log_status(line);
        p->drawn = 1;
        p->t_draw = now;
    } else if (p->log_s > 0 && now - p->t_log >= p->log_s) {
        format_line(p, now, line, sizeof line);
        SG_INFO("%s", line);
        p->t_log = now;
    }
}

double sg_progress_end(sg_progress *p) {
    if (p->drawn) {
        sg_log_status(NULL);
        p->drawn = 0;
    }
    return sg_now_s() - p->t0;
}

/* ---------------- setup stages ---------------- */

struct sg_stage_watch {
    pthread_t th;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    const char *what; /* current stage, NULL between stages */
    double since;
    int announced, stop;
};

/* Ends the current stage (mu held): its duration if it was announced. */
static void stage_end_locked(sg_stage_watch *w) {
    if (w->what && w->announced) SG_INFO("setup: %s done (%.1f s)", w->what, sg_now_s() - w->since);
    w->what = NULL;
    w->announced = 0;
}

static void *stage_main(void *arg) {
    sg_stage_watch *w = arg;
    pthread_mutex_lock(&w->mu);
    while (!w->stop) {
        if (w->what && !w->announced && sg_now_s() - w->since >= SG_STAGE_ANNOUNCE_S) {
            SG_INFO("setup: %s ...", w->what);
            w->announced = 1;
        }
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 250000000L;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&w->cv, &w->mu, &ts);
    }
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

sg_stage_watch *sg_stage_watch_start(void) {
    sg_stage_watch *w = calloc(1, sizeof *w);
    SG_CHECK(w != NULL, "out of host memory");
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, NULL);
    /* born with every signal blocked (core/sigmask.h): signals go to the
     * training thread (its stop flag), not here */
    sigset_t old;
    sg_sigmask_block_all(&old);
    int e = pthread_create(&w->th, NULL, stage_main, w);
    sg_sigmask_restore(&old);
    if (e != 0) {
        /* only the announcements are lost */
        SG_WARN("setup: cannot start the thread that reports slow setup stages");
        pthread_mutex_destroy(&w->mu);
        pthread_cond_destroy(&w->cv);
        free(w);
        return NULL;
    }
    return w;
}

void sg_stage(sg_stage_watch *w, const char *what) {
    if (!w) return;
    pthread_mutex_lock(&w->mu);
    stage_end_locked(w);
    w->what = what;
    w->since = sg_now_s();
    pthread_mutex_unlock(&w->mu);
}

void sg_stage_watch_stop(sg_stage_watch *w) {
    if (!w) return;
    pthread_mutex_lock(&w->mu);
    stage_end_locked(w);
    w->stop = 1;
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
    pthread_join(w->th, NULL);
    pthread_mutex_destroy(&w->mu);
    pthread_cond_destroy(&w->cv);
    free(w);
}
