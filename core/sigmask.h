/* core/sigmask.h - where process-directed signals run: only on the thread
 * that handles them, and there on an alternate signal stack.
 *
 * A signal sent to the process (the launcher's SIGTERM, Ctrl-C's SIGINT,
 * SIGHUP) is delivered to any one thread that does not block it. So every
 * thread but the one that handles them blocks them: threads the project
 * starts are created with sg_sigmask_block_all in force (they inherit the
 * mask, so there is no window before they could block it themselves), and
 * so are the threads that libraries start on their own (OpenMP's team,
 * Gloo's event loop), around the call that creates them.
 *
 * The handling thread takes them on an alternate stack (sg_sigaction_onstack):
 * oneDNN's JIT f32 GEMM kernels (dnnl_sgemm and the convolutions built on
 * it, in the oneDNN that Debian ships; oneDNN fixed it in 3.11) point the
 * stack pointer into a heap buffer while they run. A signal taken on the
 * current stack there writes its frame (several KiB with AVX-512 state)
 * into the heap: glibc later aborts in free() ("corrupted size vs.
 * prev_size"), ASan reports a heap-buffer-overflow in the handler. On an
 * alternate stack the frame never touches the interrupted code's memory. */
#ifndef SG_CORE_SIGMASK_H
#define SG_CORE_SIGMASK_H

#include <signal.h>

#include "core/status.h"

/* Size of the alternate signal stack sg_sigaction_onstack provides. */
#define SG_ALTSTACK_BYTES (256u * 1024u)

/* Blocks every signal in the calling thread but the faults (SIGSEGV, SIGBUS,
 * SIGFPE, SIGILL, SIGTRAP: synchronous, they must reach their handler);
 * *old receives the mask before (give it to sg_sigmask_restore). Around a
 * pthread_create, or a library call that starts threads. */
void sg_sigmask_block_all(sigset_t *old);

/* Restores a mask saved by sg_sigmask_block_all. */
void sg_sigmask_restore(const sigset_t *old);

/* Installs fn (SA_SIGINFO | SA_ONSTACK, blocking *mask while it runs) for
 * sig, the previous action into *old (NULL: not kept), and gives the calling
 * thread an alternate signal stack of at least SG_ALTSTACK_BYTES unless it
 * has one that large (kept for the thread's life: a handler may run until
 * the process ends). SG_OK, or SG_ERR_RUNTIME after logging the call that
 * failed. */
sg_status sg_sigaction_onstack(int sig, void (*fn)(int, siginfo_t *, void *), const sigset_t *mask,
                               struct sigaction *old);

/* Ignores SIGXFSZ for the whole process (and the programs it execs): a
 * write past the file size limit (`ulimit -f`) then fails with EFBIG, which
 * the writers report like a full disk (ENOSPC), naming the file and removing
 * its partial copy, instead of the signal's default action killing the
 * process mid-write. Called once at process start (cmd/main.c). SG_OK, or
 * SG_ERR_RUNTIME after logging the call that failed. */
sg_status sg_ignore_file_size_signal(void);

#endif
