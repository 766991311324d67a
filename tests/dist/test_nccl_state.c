/* tests/dist/test_nccl_state.c - the NCCL transport's communicator lifecycle
 * (dist/nccl_state.c) on stub communicators, so it runs on every machine,
 * without NCCL or a GPU. Each stub records the calls made on it, by which
 * thread, and any call after it was released (destroyed or aborted): the
 * use-after-free the earlier shutdown had (destroy, then abort of the same
 * communicators) shows as such a call.
 * What only a GPU shows: that the real NCCL calls behave as these stubs
 * (test_nccl, in the GPU check's bundle). */
#include <pthread.h>
#include <string.h>
#include <time.h>

#include "dist/nccl_state.h"
#include "testutil.h"

typedef struct stub_comm {
    int released; /* destroyed or aborted */
    int finalized, destroyed, aborted;
    int after_release; /* calls made after release: must stay 0 */
    int polls;
    int done_after;             /* > 0: async_error answers DONE from this poll on */
    sg_ncs_poll state;          /* what async_error answers */
    sg_ncs_poll finalize_state; /* what finalize answers (then async_error) */
    pthread_t abort_thread;
} stub_comm;

typedef struct stub_event {
    sg_ncs_poll state;
} stub_event;

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;

static void touch(stub_comm *c) {
    pthread_mutex_lock(&g_mu);
    if (c->released) c->after_release++;
    pthread_mutex_unlock(&g_mu);
}

static sg_ncs_poll st_async(void *comm, char *why, size_t len) {
    stub_comm *c = comm;
    touch(c);
    c->polls++;
    if (c->done_after && c->polls >= c->done_after) return SG_NCS_DONE;
    if (c->state == SG_NCS_ERROR) snprintf(why, len, "stub: remote rank failed");
    return c->state;
}
static sg_ncs_poll st_event(void *event, char *why, size_t len) {
    stub_event *e = event;
    if (e->state == SG_NCS_ERROR) snprintf(why, len, "stub: illegal address");
    return e->state;
}
static sg_ncs_poll st_finalize(void *comm, char *why, size_t len) {
    stub_comm *c = comm;
    touch(c);
    c->finalized++;
    if (c->finalize_state == SG_NCS_ERROR) snprintf(why, len, "stub: finalize failed");
    /* a pending finalize completes when async_error says so */
    return c->finalize_state;
}
static void st_destroy(void *comm) {
    stub_comm *c = comm;
    touch(c);
    c->destroyed++;
    c->released = 1;
}
static void st_abort(void *comm) {
    stub_comm *c = comm;
    touch(c);
    c->aborted++;
    c->abort_thread = pthread_self();
    c->released = 1;
}

static const sg_nccl_api stub_api = {st_async, st_event, st_finalize, st_destroy, st_abort};

static void init_state(sg_nccl_state *s, stub_comm *c0, stub_comm *c1, double timeout_s) {
    memset(s, 0, sizeof *s);
    s->api = &stub_api;
    s->comm[0] = c0;
    s->comm[1] = c1;
    s->timeout_s = timeout_s;
    atomic_init(&s->failed, 0);
}

/* Normal shutdown: each communicator finalized and destroyed once, never
 * aborted, nothing called after its release (the earlier code aborted the
 * destroyed communicators). */
static void test_clean_shutdown(void) {
    stub_comm c0 = {0}, c1 = {0};
    sg_nccl_state s;
    init_state(&s, &c0, &c1, 1.0);
    char err[256];
    stub_event ev = {SG_NCS_DONE};
    CHECK(sg_ncs_begin(&s, SG_CH_MAIN, err, sizeof err) == SG_OK);
    CHECK(sg_ncs_wait(&s, SG_CH_MAIN, SG_NCS_DONE, &ev, "all-reduce", err, sizeof err) == SG_OK);
    CHECK(sg_ncs_wait(&s, SG_CH_GRAD, SG_NCS_DONE, &ev, "all-reduce", err, sizeof err) == SG_OK);
    sg_ncs_shutdown(&s);
    for (int i = 0; i < 2; i++) {
        stub_comm *c = i ? &c1 : &c0;
        CHECK_EQ_INT(c->finalized, 1);
        CHECK_EQ_INT(c->destroyed, 1);
        CHECK_EQ_INT(c->aborted, 0);
        CHECK_EQ_INT(c->after_release, 0);
    }
    CHECK(s.comm[0] == NULL && s.comm[1] == NULL);
    sg_ncs_shutdown(&s); /* twice: nothing more happens */
    CHECK_EQ_INT(c0.destroyed + c0.aborted + c1.destroyed + c1.aborted, 2);
}

/* A non-blocking finalize completes later; one that never does is aborted
 * after the timeout (and not also destroyed). */
static void test_finalize_pending(void) {
    stub_comm c0 = {0}, c1 = {0};
    c0.finalize_state = SG_NCS_PENDING; /* completes at the first poll (state DONE) */
    c1.finalize_state = SG_NCS_PENDING;
    c1.state = SG_NCS_PENDING; /* never completes */
    sg_nccl_state s;
    init_state(&s, &c0, &c1, 0.05);
    sg_ncs_shutdown(&s);
    CHECK_EQ_INT(c0.destroyed, 1);
    CHECK_EQ_INT(c0.aborted, 0);
    CHECK_EQ_INT(c1.destroyed, 0);
    CHECK_EQ_INT(c1.aborted, 1);
    CHECK(c1.polls > 1);
    CHECK_EQ_INT(c0.after_release + c1.after_release, 0);
}

/* Partial setup: channel 0 initialised, channel 1's init fails. Channel 1
 * is aborted at the failure, channel 0 at shutdown: each once. */
static void test_partial_init(void) {
    stub_comm c0 = {0}, c1 = {0};
    c1.state = SG_NCS_ERROR;
    sg_nccl_state s;
    init_state(&s, &c0, &c1, 1.0);
    char err[256];
    CHECK(sg_ncs_wait(&s, SG_CH_MAIN, SG_NCS_PENDING, NULL, "communicator init", err, sizeof err) ==
          SG_OK);
    CHECK(sg_ncs_wait(&s, SG_CH_GRAD, SG_NCS_PENDING, NULL, "communicator init", err, sizeof err) ==
          SG_ERR_RUNTIME);
    CHECK_STR_CONTAINS(err, "communicator init failed");
    CHECK_STR_CONTAINS(err, "remote rank failed");
    CHECK_EQ_INT(c1.aborted, 1);
    CHECK(s.comm[1] == NULL);
    CHECK_EQ_INT(c0.aborted, 0); /* not this thread's to abort */
    sg_ncs_shutdown(&s);
    CHECK_EQ_INT(c0.aborted, 1);
    CHECK_EQ_INT(c0.finalized + c0.destroyed, 0);
    CHECK_EQ_INT(c1.aborted, 1);
    CHECK_EQ_INT(c0.after_release + c1.after_release, 0);
}

/* A communicator whose handle was never set (the init call failed before
 * creating one) is skipped. */
static void test_null_comm(void) {
    stub_comm c0 = {0};
    sg_nccl_state s;
    init_state(&s, &c0, NULL, 1.0);
    char err[256];
    CHECK(sg_ncs_begin(&s, SG_CH_GRAD, err, sizeof err) == SG_ERR_RUNTIME);
    sg_ncs_fail(&s, SG_CH_GRAD);
    sg_ncs_shutdown(&s);
    CHECK_EQ_INT(c0.aborted, 1);
}

/* The event reports a CUDA error; the communicator an asynchronous error
 * while the event is pending: both fail with their reason. */
static void test_wait_errors(void) {
    stub_comm c0 = {0}, c1 = {0};
    sg_nccl_state s;
    init_state(&s, &c0, &c1, 1.0);
    char err[256];
    stub_event bad = {SG_NCS_ERROR};
    CHECK(sg_ncs_wait(&s, SG_CH_MAIN, SG_NCS_DONE, &bad, "broadcast", err, sizeof err) ==
          SG_ERR_RUNTIME);
    CHECK_STR_CONTAINS(err, "CUDA error while waiting for NCCL broadcast");
    CHECK_STR_CONTAINS(err, "illegal address");
    /* every later call fails at once, naming the earlier failure */
    CHECK(sg_ncs_begin(&s, SG_CH_GRAD, err, sizeof err) == SG_ERR_RUNTIME);
    CHECK_STR_CONTAINS(err, "aborted after an earlier failure");
    CHECK_EQ_INT(c1.aborted, 1);
    CHECK(sg_ncs_begin(&s, SG_CH_MAIN, err, sizeof err) == SG_ERR_RUNTIME);
    sg_ncs_shutdown(&s);
    CHECK_EQ_INT(c0.aborted + c1.aborted, 2);
    CHECK_EQ_INT(c0.after_release + c1.after_release, 0);

    stub_comm d0 = {0}, d1 = {0};
    init_state(&s, &d0, &d1, 1.0);
    stub_event pending = {SG_NCS_PENDING};
    d0.state = SG_NCS_ERROR;
    CHECK(sg_ncs_wait(&s, SG_CH_MAIN, SG_NCS_DONE, &pending, "all-gather", err, sizeof err) ==
          SG_ERR_RUNTIME);
    CHECK_STR_CONTAINS(err, "all-gather failed asynchronously");
    sg_ncs_shutdown(&s);
    CHECK_EQ_INT(d0.aborted + d1.aborted, 2);
    CHECK_EQ_INT(d0.after_release + d1.after_release, 0);
}

/* Two threads: the comm thread waits on channel GRAD (its collective never
 * completes), the training thread's channel MAIN times out. MAIN's thread
 * aborts MAIN only; GRAD's thread sees the failure while it polls and
 * aborts GRAD itself. No call on a communicator after its release (the
 * earlier code aborted both from the failing thread while the other one
 * polled). */
typedef struct grad_arg {
    sg_nccl_state *s;
    sg_status rc;
    char err[256];
} grad_arg;

static void *grad_thread(void *p) {
    grad_arg *a = p;
    stub_event never = {SG_NCS_PENDING};
    /* starts 50 ms after MAIN: its own deadline is later than MAIN's */
    struct timespec ts = {0, 50 * 1000 * 1000};
    nanosleep(&ts, NULL);
    a->rc = sg_ncs_wait(a->s, SG_CH_GRAD, SG_NCS_DONE, &never, "all-reduce", a->err, sizeof a->err);
    return NULL;
}

static void test_cross_thread_abort(void) {
    stub_comm c0 = {0}, c1 = {0};
    c0.state = SG_NCS_PENDING; /* MAIN: an enqueue that never completes */
    sg_nccl_state s;
    init_state(&s, &c0, &c1, 0.1);
    grad_arg a = {&s, SG_OK, ""};
    pthread_t th;
    CHECK(pthread_create(&th, NULL, grad_thread, &a) == 0);
    char err[256];
    CHECK(sg_ncs_wait(&s, SG_CH_MAIN, SG_NCS_PENDING, NULL, "barrier", err, sizeof err) ==
          SG_ERR_RUNTIME);
    CHECK_STR_CONTAINS(err, "did not complete within");
    pthread_join(th, NULL);
    CHECK(a.rc == SG_ERR_RUNTIME);
    CHECK_STR_CONTAINS(a.err, "other channel failed");
    CHECK_EQ_INT(c0.aborted, 1);
    CHECK_EQ_INT(c1.aborted, 1);
    CHECK(pthread_equal(c0.abort_thread, pthread_self()));
    CHECK_MSG(pthread_equal(c1.abort_thread, th), "GRAD must be aborted by its own thread");
    sg_ncs_shutdown(&s);
    CHECK_EQ_INT(c0.aborted + c1.aborted, 2);
    CHECK_EQ_INT(c0.destroyed + c1.destroyed, 0);
    CHECK_EQ_INT(c0.after_release + c1.after_release, 0);
}

/* The sleep counter (sg_comm_stats.poll_sleeps on NCCL): a wait on an
 * event that is not ready sleeps between polls and counts each sleep on its
 * channel; a wait that finds the event done at once does not. */
static void test_sleeps_counted(void) {
    stub_comm c0 = {0}, c1 = {0};
    sg_nccl_state s;
    init_state(&s, &c0, &c1, 0.01);
    char err[256];
    stub_event done = {SG_NCS_DONE}, busy = {SG_NCS_PENDING};
    CHECK(sg_ncs_wait(&s, SG_CH_MAIN, SG_NCS_DONE, &done, "all-gather", err, sizeof err) == SG_OK);
    CHECK_EQ_INT(atomic_load(&s.sleeps[SG_CH_MAIN]), 0);
    CHECK(sg_ncs_wait(&s, SG_CH_GRAD, SG_NCS_DONE, &busy, "all-reduce", err, sizeof err) ==
          SG_ERR_RUNTIME);
    CHECK(atomic_load(&s.sleeps[SG_CH_GRAD]) > 0);
    CHECK_EQ_INT(atomic_load(&s.sleeps[SG_CH_MAIN]), 0);
    sg_ncs_shutdown(&s);
}

/* An enqueue still in progress on a non-blocking communicator: completes
 * within the yielding phase without a single sleep; an error is reported
 * and fails the channel; one that stays in progress ends in sg_ncs_wait's
 * timeout. */
static void test_wait_issued(void) {
    char err[256];
    {
        stub_comm c0 = {0}, c1 = {0};
        c0.state = SG_NCS_PENDING;
        c0.done_after = 3;
        sg_nccl_state s;
        init_state(&s, &c0, &c1, 1.0);
        CHECK(sg_ncs_wait_issued(&s, SG_CH_MAIN, SG_NCS_PENDING, "all-gather", err, sizeof err) ==
              SG_OK);
        CHECK_EQ_INT(atomic_load(&s.sleeps[SG_CH_MAIN]), 0);
        CHECK(sg_ncs_wait_issued(&s, SG_CH_MAIN, SG_NCS_DONE, "all-gather", err, sizeof err) ==
              SG_OK);
        CHECK_EQ_INT(atomic_load(&s.failed), 0);
        sg_ncs_shutdown(&s);
    }
    {
        stub_comm c0 = {0}, c1 = {0};
        c0.state = SG_NCS_ERROR;
        sg_nccl_state s;
        init_state(&s, &c0, &c1, 1.0);
        CHECK(sg_ncs_wait_issued(&s, SG_CH_MAIN, SG_NCS_PENDING, "all-gather", err, sizeof err) ==
              SG_ERR_RUNTIME);
        CHECK_STR_CONTAINS(err, "remote rank failed");
        CHECK_EQ_INT(atomic_load(&s.failed), 1);
        CHECK_EQ_INT(c0.aborted, 1);
        sg_ncs_shutdown(&s);
        CHECK_EQ_INT(c0.after_release, 0);
    }
    {
        stub_comm c0 = {0}, c1 = {0};
        c0.state = SG_NCS_PENDING;
        sg_nccl_state s;
        init_state(&s, &c0, &c1, 0.02);
        CHECK(sg_ncs_wait_issued(&s, SG_CH_MAIN, SG_NCS_PENDING, "all-gather", err, sizeof err) ==
              SG_ERR_RUNTIME);
        CHECK_STR_CONTAINS(err, "did not complete");
        CHECK(atomic_load(&s.sleeps[SG_CH_MAIN]) > 0);
        sg_ncs_shutdown(&s);
    }
}

int main(void) {
    TEST_RUN(test_clean_shutdown);
    TEST_RUN(test_finalize_pending);
    TEST_RUN(test_partial_init);
    TEST_RUN(test_null_comm);
    TEST_RUN(test_wait_errors);
    TEST_RUN(test_cross_thread_abort);
    TEST_RUN(test_sleeps_counted);
    TEST_RUN(test_wait_issued);
    return TEST_EXIT();
}
