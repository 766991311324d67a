/* core/log.c - see log.h. */
#include "core/log.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "core/fsutil.h"

static int g_level = SG_LOG_INFO;
static int g_rank = 0, g_world = 1;
static FILE *g_file = NULL;
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static char g_status[512]; /* the live status line shown on stderr, "" = none */

void sg_log_set_level(int level) { g_level = level; }
int sg_log_get_level(void) { return g_level; }
void sg_log_set_rank(int rank, int world) {
    g_rank = rank;
    g_world = world;
}

void sg_log_get_rank(int *rank, int *world) {
    if (rank) *rank = g_rank;
    if (world) *world = g_world;
}

sg_status sg_log_open_file(const char *dir) {
    char path[4096];
    if (sg_mkdirs(dir) != 0) {
        SG_ERROR("cannot create log directory %s: %s (check the permissions of run_dir)", dir,
                 strerror(errno));
        return SG_ERR_RUNTIME;
    }
    snprintf(path, sizeof path, "%s/rank%d.log", dir, g_rank);
    FILE *f = fopen(path, "a");
    if (!f) {
        SG_ERROR("cannot open log file %s: %s", path, strerror(errno));
        return SG_ERR_RUNTIME;
    }
    pthread_mutex_lock(&g_mu);
    if (g_file) fclose(g_file);
    g_file = f;
    pthread_mutex_unlock(&g_mu);
    return SG_OK;
}

void sg_log_close_file(void) {
    pthread_mutex_lock(&g_mu);
    if (g_file) fclose(g_file);
    g_file = NULL;
    pthread_mutex_unlock(&g_mu);
}

static const char *level_name[] = {"error", "warn", "info", "debug"};

void sg_vlog(int level, const char *fmt, va_list ap) {
    int to_console = level <= g_level &&
                     (g_rank == 0 || level <= SG_LOG_WARN || g_level >= SG_LOG_DEBUG);
    if (!to_console && !g_file) return;
    char msg[8192];
    vsnprintf(msg, sizeof msg, fmt, ap);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    localtime_r(&ts.tv_sec, &tm);
    char stamp[32];
    strftime(stamp, sizeof stamp, "%H:%M:%S", &tm);
    char prefix[64] = "";
    if (g_world > 1) snprintf(prefix, sizeof prefix, "[rank %d] ", g_rank);
    const char *lv = level <= SG_LOG_WARN ? level_name[level] : NULL;
    pthread_mutex_lock(&g_mu);
    if (to_console) {
        if (g_status[0]) fputs("\r\033[K", stderr); /* \033[K: erase to the end of the line */
        if (lv)
            fprintf(stderr, "%s.%03ld %s%s: %s\n", stamp, ts.tv_nsec / 1000000, prefix, lv, msg);
        else fprintf(stderr, "%s.%03ld %s%s\n", stamp, ts.tv_nsec / 1000000, prefix, msg);
        if (g_status[0]) fputs(g_status, stderr);
        fflush(stderr);
    }
    if (g_file && level <= (g_level > SG_LOG_INFO ? g_level : SG_LOG_INFO)) {
        fprintf(g_file, "%s.%03ld %s: %s\n", stamp, ts.tv_nsec / 1000000, level_name[level], msg);
        fflush(g_file);
    }
    pthread_mutex_unlock(&g_mu);
}

void sg_log_status(const char *line) {
    pthread_mutex_lock(&g_mu);
    if (line && line[0]) {
        snprintf(g_status, sizeof g_status, "%s", line);
        fprintf(stderr, "\r%s\033[K", g_status);
    } else if (g_status[0]) {
        g_status[0] = 0;
        fputs("\r\033[K", stderr);
    }
    fflush(stderr);
    pthread_mutex_unlock(&g_mu);
}

void sg_log(int level, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    sg_vlog(level, fmt, ap);
    va_end(ap);
}

void sg_report(char *err, size_t errlen, const char *fmt, ...) {
    char buf[SG_REPORT_LEN];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (err && errlen) snprintf(err, errlen, "%s", buf);
    else SG_ERROR("%s", buf);
}

void sg_fatal_at(const char *file, int line, const char *fmt, ...) {
    char msg[8192];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    sg_log_status(NULL); /* the message and the shell prompt start a clean line */
    sg_log(SG_LOG_ERROR, "fatal: %s (%s:%d)", msg, file, line);
    exit(1);
}
