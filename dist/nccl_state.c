/* dist/nccl_state.c - the NCCL transport's communicator lifecycle
 * (dist/nccl_state.h): waits, failure, shutdown, on a table of calls. */
#include "dist/nccl_state.h"

#include <sched.h>
#include <stdio.h>
#include <time.h>

#include "core/log.h"
#include "core/util.h"

static void release_abort(sg_nccl_state *s, int ch) {
    void *c = s->comm[ch];
    s->comm[ch] = NULL; /* cleared first: nothing may reach it afterwards */
    if (c) s->api->abort(c);
}

void sg_ncs_fail(sg_nccl_state *s, int ch) {
    atomic_store(&s->failed, 1);
    release_abort(s, ch);
}

sg_status sg_ncs_begin(sg_nccl_state *s, int ch, char *err, size_t len) {
    if (atomic_load(&s->failed) || !s->comm[ch]) {
        release_abort(s, ch);
        snprintf(err, len, "the NCCL communicators were aborted after an earlier failure");
        return SG_ERR_RUNTIME;
    }
    return SG_OK;
}

static sg_status fail_with(sg_nccl_state *s, int ch, char *err, size_t len, const char *fmt,
                           const char *what, const char *why) {
    snprintf(err, len, fmt, what, why);
    sg_ncs_fail(s, ch);
    return SG_ERR_RUNTIME;
}

sg_status sg_ncs_wait(sg_nccl_state *s, int ch, sg_ncs_poll issued, void *event, const char *what,
                      char *err, size_t len) {
    double deadline = sg_now_s() + s->timeout_s;
    sg_ncs_poll st = issued;
    char why[256] = "";
    for (;;) {
        if (!s->comm[ch])
            return fail_with(s, ch, err, len, "NCCL %s: %s", what,
                             "the communicator was already released");
        if (atomic_load(&s->failed))
            return fail_with(s, ch, err, len, "NCCL %s: %s", what,
                             "aborted: a collective on the other channel failed");
        if (st == SG_NCS_PENDING) st = s->api->async_error(s->comm[ch], why, sizeof why);
        if (st == SG_NCS_ERROR) return fail_with(s, ch, err, len, "NCCL %s failed: %s", what, why);
        if (st == SG_NCS_DONE) {
            if (!event) return SG_OK;
            sg_ncs_poll q = s->api->event_query(event, why, sizeof why);
            if (q == SG_NCS_DONE) return SG_OK;
            if (q == SG_NCS_ERROR)
                return fail_with(s, ch, err, len, "CUDA error while waiting for NCCL %s: %s", what,
                                 why);
            if (s->api->async_error(s->comm[ch], why, sizeof why) == SG_NCS_ERROR)
                return fail_with(s, ch, err, len, "NCCL %s failed asynchronously: %s", what, why);
        }
        if (sg_now_s() > deadline) {
            snprintf(why, sizeof why, "did not complete within %.1f s (communicators aborted)",
                     s->timeout_s);
            return fail_with(s, ch, err, len, "NCCL %s %s", what, why);
        }
        atomic_fetch_add(&s->sleeps[ch], 1);
        struct timespec ts = {0, 200 * 1000};
        nanosleep(&ts, NULL);
    }
}

sg_status sg_ncs_wait_issued(sg_nccl_state *s, int ch, sg_ncs_poll issued, const char *what,
                             char *err, size_t len) {
    sg_ncs_poll st = issued;
    char why[256] = "";
    double until = sg_now_s() + 0.002;
    while (st == SG_NCS_PENDING && sg_now_s() < until) {
        if (!s->comm[ch] || atomic_load(&s->failed)) break; /* sg_ncs_wait reports it */
        sched_yield();
        st = s->api->async_error(s->comm[ch], why, sizeof why);
    }
    if (st == SG_NCS_ERROR) return fail_with(s, ch, err, len, "NCCL %s failed: %s", what, why);
    if (st == SG_NCS_DONE && s->comm[ch] && !atomic_load(&s->failed)) return SG_OK;
    return sg_ncs_wait(s, ch, st, NULL, what, err, len);
}

void sg_ncs_shutdown(sg_nccl_state *s) {
    for (int ch = 0; ch < SG_CH_COUNT; ch++) {
        void *c = s->comm[ch];
        if (!c) continue;
        if (atomic_load(&s->failed)) {
            release_abort(s, ch);
            continue;
        }
        char why[256] = "";
        sg_ncs_poll st = s->api->finalize(c, why, sizeof why);
        double deadline = sg_now_s() + s->timeout_s;
        while (st == SG_NCS_PENDING && sg_now_s() <= deadline) {
            struct timespec ts = {0, 200 * 1000};
            nanosleep(&ts, NULL);
            st = s->api->async_error(c, why, sizeof why);
        }
        if (st == SG_NCS_DONE) {
            s->comm[ch] = NULL;
            s->api->destroy(c);
        } else {
            /* a finalize that failed or hangs: abort frees it instead */
            SG_WARN("NCCL: finalizing the communicator of channel %d %s; aborted instead", ch,
                    st == SG_NCS_PENDING ? "did not complete in time" : why);
            atomic_store(&s->failed, 1);
            release_abort(s, ch);
        }
    }
}
