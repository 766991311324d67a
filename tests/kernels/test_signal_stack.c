/* tests/kernels/test_signal_stack.c - signals that interrupt oneDNN's GEMM
 * never write their frame into the heap (core/sigmask.h).
 *
 * oneDNN's JIT f32 GEMM (dnnl_sgemm, under the CPU backend's convolutions)
 * points the stack pointer into a heap buffer while it runs. The main thread
 * runs dnnl_sgemm in a loop while a helper thread signals it (SIGUSR1) every
 * ~50 us; the handler is installed the way the trainer installs its own
 * (sg_sigaction_onstack). In the handler the interrupted stack pointer
 * (x86-64: the ucontext's RSP) and the handler's own frame are classified:
 * on the thread's stack, on the alternate stack, or elsewhere (the heap).
 * Checks: some signals did interrupt the kernel with its stack pointer off
 * the thread's stack (the hazard is real here; skipped, 77, where none is
 * seen: another oneDNN, another ISA), and no handler frame was ever outside
 * the thread's stack and the alternate stack. `--plain` installs the
 * handler without SA_ONSTACK (as before the fix) to show the check failing.
 * A second case: a thread created under sg_sigmask_block_all has SIGTERM,
 * SIGINT and SIGHUP blocked and the faults deliverable. */
#include <dnnl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <time.h>
#include <ucontext.h>
#include <unistd.h>

#include "core/sigmask.h"
#include "testutil.h"

static uintptr_t g_stack_lo, g_stack_hi, g_alt_lo, g_alt_hi;
static atomic_long g_signals, g_rsp_off_stack, g_frame_stray;

static int in(uintptr_t p, uintptr_t lo, uintptr_t hi) { return p >= lo && p < hi; }

static void on_usr1(int sig, siginfo_t *si, void *uctx) {
    (void)sig;
    (void)si;
    volatile char here = 0;
    uintptr_t frame = (uintptr_t)&here;
    atomic_fetch_add(&g_signals, 1);
#if defined(__x86_64__)
    uintptr_t rsp = (uintptr_t)((ucontext_t *)uctx)->uc_mcontext.gregs[REG_RSP];
    if (!in(rsp, g_stack_lo, g_stack_hi) && !in(rsp, g_alt_lo, g_alt_hi))
        atomic_fetch_add(&g_rsp_off_stack, 1);
#else
    (void)uctx;
#endif
    if (!in(frame, g_stack_lo, g_stack_hi) && !in(frame, g_alt_lo, g_alt_hi))
        atomic_fetch_add(&g_frame_stray, 1);
}

static atomic_int g_stop;
static pthread_t g_main;

static void *pester(void *arg) {
    (void)arg;
    struct timespec ts = {0, 50 * 1000};
    while (!atomic_load(&g_stop)) {
        pthread_kill(g_main, SIGUSR1);
        nanosleep(&ts, NULL);
    }
    return NULL;
}

static int g_plain;

static void test_gemm_signals_stay_off_the_heap(void) {
    /* the main thread's stack bounds */
    pthread_attr_t at;
    CHECK(pthread_getattr_np(pthread_self(), &at) == 0);
    void *lo;
    size_t sz;
    CHECK(pthread_attr_getstack(&at, &lo, &sz) == 0);
    pthread_attr_destroy(&at);
    g_stack_lo = (uintptr_t)lo;
    g_stack_hi = (uintptr_t)lo + sz;

    sigset_t mask;
    sigemptyset(&mask);
    struct sigaction old;
    if (g_plain) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_sigaction = on_usr1;
        sa.sa_flags = SA_SIGINFO;
        CHECK(sigaction(SIGUSR1, &sa, &old) == 0);
    } else {
        CHECK(sg_sigaction_onstack(SIGUSR1, on_usr1, &mask, &old) == SG_OK);
    }
    stack_t ss;
    CHECK(sigaltstack(NULL, &ss) == 0);
    if (!(ss.ss_flags & SS_DISABLE)) {
        g_alt_lo = (uintptr_t)ss.ss_sp;
        g_alt_hi = (uintptr_t)ss.ss_sp + ss.ss_size;
        if (!g_plain) CHECK(ss.ss_size >= SG_ALTSTACK_BYTES);
    }

    /* sizes of the model's 3x3 convolutions as GEMMs ([k x c] x [c x px]) */
    const dnnl_dim_t M = 64, N = 1024, K = 576;
    float *a = malloc(sizeof(float) * (size_t)(M * K));
    float *b = malloc(sizeof(float) * (size_t)(K * N));
    float *c = malloc(sizeof(float) * (size_t)(M * N));
    CHECK(a && b && c);
    for (dnnl_dim_t i = 0; i < M * K; i++) a[i] = (float)(i % 7) * 0.25f;
    for (dnnl_dim_t i = 0; i < K * N; i++) b[i] = (float)(i % 5) * 0.5f;

    g_main = pthread_self();
    atomic_store(&g_stop, 0);
    sigset_t keep;
    sg_sigmask_block_all(&keep); /* the helper never takes SIGUSR1 itself */
    pthread_t th;
    int e = pthread_create(&th, NULL, pester, NULL);
    sg_sigmask_restore(&keep);
    CHECK(e == 0);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int calls = 0;
    double dt = 0;
    do { /* about 1.5 s, and at least 500 signals */
        dnnl_status_t st = dnnl_sgemm('N', 'N', M, N, K, 1.0f, a, K, b, N, 0.0f, c, N);
        if (st != dnnl_success) break;
        calls++;
        clock_gettime(CLOCK_MONOTONIC, &t1);
        dt = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    } while (dt < 1.5 || (atomic_load(&g_signals) < 500 && dt < 10));
    atomic_store(&g_stop, 1);
    pthread_join(th, NULL);
    sigaction(SIGUSR1, &old, NULL);
    /* the result is still right: c[0] = sum_k a[0][k] * b[k][0] */
    double want = 0;
    for (dnnl_dim_t k = 0; k < K; k++) want += (double)a[k] * (double)b[k * N];
    float c0 = c[0];
    free(a);
    free(b);
    free(c);
    long n = atomic_load(&g_signals), off = atomic_load(&g_rsp_off_stack),
         stray = atomic_load(&g_frame_stray);
    fprintf(stderr,
            "  %d dnnl_sgemm calls in %.1f s, %ld signals: %ld interrupted it with the stack "
            "pointer off the thread's stack, %ld handler frame(s) outside the stacks%s\n",
            calls, dt, n, off, stray, g_plain ? " (--plain: no SA_ONSTACK)" : "");
    CHECK(calls > 0);
    CHECK_NEAR(c0, want, 1e-3 * (fabs(want) + 1));
    CHECK(n > 0);
    CHECK_EQ_INT(stray, 0);
#if defined(__x86_64__)
    if (off == 0) {
        fprintf(stderr, "  no signal caught the GEMM with its stack pointer off the stack "
                        "(this oneDNN or ISA does not move it): nothing to show here\n");
        tu_case_failed = TEST_SKIP; /* reported as a skip by main */
    }
#endif
}

static void *read_mask(void *arg) {
    sigset_t *out = arg;
    pthread_sigmask(SIG_BLOCK, NULL, out);
    return NULL;
}

static void test_threads_born_blocked(void) {
    sigset_t keep, seen;
    sg_sigmask_block_all(&keep);
    pthread_t th;
    int e = pthread_create(&th, NULL, read_mask, &seen);
    sg_sigmask_restore(&keep);
    CHECK(e == 0);
    pthread_join(th, NULL);
    CHECK(sigismember(&seen, SIGTERM) == 1);
    CHECK(sigismember(&seen, SIGINT) == 1);
    CHECK(sigismember(&seen, SIGHUP) == 1);
    CHECK(sigismember(&seen, SIGUSR1) == 1);
    CHECK(sigismember(&seen, SIGSEGV) == 0);
    CHECK(sigismember(&seen, SIGBUS) == 0);
    CHECK(sigismember(&seen, SIGFPE) == 0);
    /* and this thread's mask is back as it was */
    sigset_t now;
    pthread_sigmask(SIG_BLOCK, NULL, &now);
    CHECK(sigismember(&now, SIGTERM) == sigismember(&keep, SIGTERM));
}

int main(int argc, char **argv) {
    g_plain = argc > 1 && strcmp(argv[1], "--plain") == 0;
    TEST_RUN(test_threads_born_blocked);
    tu_case_failed = 0;
    tu_cases++;
    fprintf(stderr, "case test_gemm_signals_stay_off_the_heap\n");
    test_gemm_signals_stay_off_the_heap();
    if (tu_case_failed == TEST_SKIP) {
        int rc = TEST_EXIT();
        return rc ? rc : TEST_SKIP;
    }
    if (tu_case_failed) tu_failed_cases++;
    return TEST_EXIT();
}
