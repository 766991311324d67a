/* core/sigmask.c - see sigmask.h. */
#include "core/sigmask.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "core/log.h"

void sg_sigmask_block_all(sigset_t *old) {
    sigset_t all;
    sigfillset(&all);
    /* faults stay deliverable: a fault with its signal blocked kills the
     * process without the handler (ASan's report, a core dump's context) */
    sigdelset(&all, SIGSEGV);
    sigdelset(&all, SIGBUS);
    sigdelset(&all, SIGFPE);
    sigdelset(&all, SIGILL);
    sigdelset(&all, SIGTRAP);
    int e = pthread_sigmask(SIG_BLOCK, &all, old);
    /* only EINVAL is possible (a bad `how`): a programming error */
    SG_CHECK(e == 0, "pthread_sigmask(SIG_BLOCK) failed: %s", strerror(e));
}

void sg_sigmask_restore(const sigset_t *old) {
    int e = pthread_sigmask(SIG_SETMASK, old, NULL);
    SG_CHECK(e == 0, "pthread_sigmask(SIG_SETMASK) failed: %s", strerror(e));
}

/* The calling thread's alternate stack, once it has one of ours: never
 * unmapped by us (a handler may run on it until the thread ends). Mapped,
 * not malloc'd: a runtime that tears down a thread's alternate stack at its
 * exit (ASan unmaps whatever stack is installed then) must not unmap part
 * of the heap. */
static _Thread_local void *t_altstack;

/* Makes sure the calling thread has an alternate signal stack of at least
 * SG_ALTSTACK_BYTES (one of ASan's is smaller: replaced). */
static sg_status ensure_altstack(void) {
    stack_t cur;
    if (sigaltstack(NULL, &cur) != 0) {
        SG_ERROR("sigaltstack (query) failed: %s", strerror(errno));
        return SG_ERR_RUNTIME;
    }
    if (!(cur.ss_flags & SS_DISABLE) && cur.ss_size >= SG_ALTSTACK_BYTES) return SG_OK;
    if (!t_altstack) {
        void *p = mmap(NULL, SG_ALTSTACK_BYTES, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
        if (p == MAP_FAILED) {
            SG_ERROR("cannot map a %u-byte alternate signal stack: %s", SG_ALTSTACK_BYTES,
                     strerror(errno));
            return SG_ERR_RUNTIME;
        }
        t_altstack = p;
    }
    stack_t ss = {.ss_sp = t_altstack, .ss_size = SG_ALTSTACK_BYTES, .ss_flags = 0};
    if (sigaltstack(&ss, NULL) != 0) {
        SG_ERROR("sigaltstack of %u bytes failed: %s", SG_ALTSTACK_BYTES, strerror(errno));
        return SG_ERR_RUNTIME;
    }
    return SG_OK;
}

sg_status sg_sigaction_onstack(int sig, void (*fn)(int, siginfo_t *, void *), const sigset_t *mask,
                               struct sigaction *old) {
    if (ensure_altstack() != SG_OK) return SG_ERR_RUNTIME;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = fn;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
    if (mask) sa.sa_mask = *mask;
    else sigemptyset(&sa.sa_mask);
    if (sigaction(sig, &sa, old) != 0) {
        SG_ERROR("sigaction for signal %d failed: %s", sig, strerror(errno));
        return SG_ERR_RUNTIME;
    }
    return SG_OK;
}

sg_status sg_ignore_file_size_signal(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = SIG_IGN;
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGXFSZ, &sa, NULL) != 0) {
        SG_ERROR("sigaction(SIGXFSZ, SIG_IGN) failed: %s", strerror(errno));
        return SG_ERR_RUNTIME;
    }
    return SG_OK;
}
