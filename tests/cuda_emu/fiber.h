/* tests/cuda_emu/fiber.h - fibers for the emulated device's CUDA threads.
 *
 * A fiber is a stack and a saved stack pointer; sg_fiber_switch saves the
 * running context into `from` and resumes `to`. On x86-64 the switch is a
 * dozen instructions of assembly (callee-saved registers, MXCSR and the x87
 * control word): ~40M switches/s, against ~3M/s for glibc's swapcontext,
 * which makes a system call per switch to save the signal mask. Elsewhere
 * the fallback is ucontext. Under AddressSanitizer every switch is
 * announced (__sanitizer_start/finish_switch_fiber) so that ASan knows which
 * stack is live.
 */
#ifndef SG_TESTS_CUDA_EMU_FIBER_H
#define SG_TESTS_CUDA_EMU_FIBER_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct sg_fiber {
    void *sp;                /* saved stack pointer (x86-64) */
    void *ctx;               /* ucontext_t (fallback) */
    char *stack;             /* lowest usable byte; NULL for the host thread's own stack */
    size_t size;             /* usable bytes */
    void *asan_fake;         /* ASan's fake stack while switched out */
    const void *asan_bottom; /* the host stack as ASan reported it (host fiber) */
    size_t asan_size;
    void (*fn)(void *); /* ucontext fallback: what the fiber runs */
    void *arg;
} sg_fiber;

/* Gives f a stack of `size` bytes (with a guard page below it) once;
 * sg_fiber_start may then be called on it any number of times. Returns 0,
 * or -1 when the memory cannot be mapped. */
int sg_fiber_alloc(sg_fiber *f, size_t size);
void sg_fiber_release(sg_fiber *f);
/* Prepares f to run fn(arg) from the top of its stack at its next
 * sg_fiber_switch. fn must never return: it switches away for good. */
void sg_fiber_start(sg_fiber *f, void (*fn)(void *), void *arg);
/* Saves the running context in from, resumes to. `from_done` 1 when the
 * running fiber will never be resumed (ASan may then drop its fake stack). */
void sg_fiber_switch(sg_fiber *from, sg_fiber *to, int from_done);
/* First thing a fiber's fn calls (ASan's bookkeeping of the switch into it). */
void sg_fiber_entered(sg_fiber *self, sg_fiber *from);

#ifdef __cplusplus
}
#endif
#endif
