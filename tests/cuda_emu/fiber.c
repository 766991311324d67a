/* tests/cuda_emu/fiber.c - fibers (fiber.h). */
#include "tests/cuda_emu/fiber.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#if defined(__SANITIZE_ADDRESS__)
#define SG_FIBER_ASAN 1
#include <sanitizer/common_interface_defs.h>
#else
#define SG_FIBER_ASAN 0
#endif

int sg_fiber_alloc(sg_fiber *f, size_t size) {
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    size = (size + page - 1) / page * page;
    char *m = mmap(NULL, size + page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) return -1;
    /* the guard page: a stack overflow faults instead of corrupting the
     * next fiber's stack */
    if (mprotect(m, page, PROT_NONE) != 0) {
        munmap(m, size + page);
        return -1;
    }
    memset(f, 0, sizeof *f);
    f->stack = m + page;
    f->size = size;
    return 0;
}

void sg_fiber_release(sg_fiber *f) {
    if (!f->stack) return;
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    munmap(f->stack - page, f->size + page);
    free(f->ctx);
    memset(f, 0, sizeof *f);
}

#if defined(__x86_64__)
/* sg_fiber_swap(&from->sp, to->sp): pushes the callee-saved registers,
 * stores rsp, loads the other stack and pops its registers. The
 * floating-point control state (MXCSR, x87 control word) is not switched:
 * no kernel changes it, and saving it cost a third of each switch. A new fiber's stack is laid out as if it had called
 * sg_fiber_swap from sg_fiber_entry, with r12 = arg and r13 = fn. */
void sg_fiber_swap(void **save_sp, void *new_sp);
void sg_fiber_entry(void);
__asm__(".text\n"
        ".globl sg_fiber_swap\n"
        ".type sg_fiber_swap,@function\n"
        "sg_fiber_swap:\n"
        "  pushq %rbp\n"
        "  pushq %rbx\n"
        "  pushq %r12\n"
        "  pushq %r13\n"
        "  pushq %r14\n"
        "  pushq %r15\n"
        "  movq %rsp, (%rdi)\n"
        "  movq %rsi, %rsp\n"
        "  popq %r15\n"
        "  popq %r14\n"
        "  popq %r13\n"
        "  popq %r12\n"
        "  popq %rbx\n"
        "  popq %rbp\n"
        "  ret\n"
        ".size sg_fiber_swap, .-sg_fiber_swap\n"
        ".globl sg_fiber_entry\n"
        ".type sg_fiber_entry,@function\n"
        "sg_fiber_entry:\n"
        "  movq %r12, %rdi\n"
        "  callq *%r13\n"
        "  ud2\n"
        ".size sg_fiber_entry, .-sg_fiber_entry\n"
        ".section .note.GNU-stack,\"\",@progbits\n"
        ".text\n");

void sg_fiber_start(sg_fiber *f, void (*fn)(void *), void *arg) {
    uintptr_t top = ((uintptr_t)(f->stack + f->size)) & ~(uintptr_t)15;
    uint64_t *s = (uint64_t *)top;
    /* top-8: return address; popped into sg_fiber_entry with rsp = top,
     * 16-aligned as the call inside it needs */
    s[-1] = (uint64_t)(uintptr_t)sg_fiber_entry;
    s[-2] = 0;                        /* rbp */
    s[-3] = 0;                        /* rbx */
    s[-4] = (uint64_t)(uintptr_t)arg; /* r12 */
    s[-5] = (uint64_t)(uintptr_t)fn;  /* r13 */
    s[-6] = 0;                        /* r14 */
    s[-7] = 0;                        /* r15 */
    f->sp = &s[-7];
}

static void raw_switch(sg_fiber *from, sg_fiber *to) { sg_fiber_swap(&from->sp, to->sp); }
#else
#include <ucontext.h>

/* makecontext passes ints: the fiber's address travels in two halves */
static void uc_entry(unsigned hi, unsigned lo) {
    sg_fiber *f = (sg_fiber *)(uintptr_t)(((uint64_t)hi << 32) | lo);
    f->fn(f->arg);
    abort();
}

void sg_fiber_start(sg_fiber *f, void (*fn)(void *), void *arg) {
    if (!f->ctx) f->ctx = calloc(1, sizeof(ucontext_t));
    if (!f->ctx) abort();
    ucontext_t *u = (ucontext_t *)f->ctx;
    getcontext(u);
    u->uc_stack.ss_sp = f->stack;
    u->uc_stack.ss_size = f->size;
    u->uc_link = NULL;
    f->fn = fn;
    f->arg = arg;
    uint64_t a = (uint64_t)(uintptr_t)f;
    makecontext(u, (void (*)(void))uc_entry, 2, (unsigned)(a >> 32), (unsigned)a);
}

static void raw_switch(sg_fiber *from, sg_fiber *to) {
    if (!from->ctx) from->ctx = calloc(1, sizeof(ucontext_t));
    swapcontext((ucontext_t *)from->ctx, (ucontext_t *)to->ctx);
}
#endif

void sg_fiber_switch(sg_fiber *from, sg_fiber *to, int from_done) {
#if SG_FIBER_ASAN
    const void *bottom = to->stack ? (const void *)to->stack : to->asan_bottom;
    size_t size = to->stack ? to->size : to->asan_size;
    __sanitizer_start_switch_fiber(from_done ? NULL : &from->asan_fake, bottom, size);
    raw_switch(from, to);
    __sanitizer_finish_switch_fiber(from->asan_fake, NULL, NULL);
#else
    (void)from_done;
    raw_switch(from, to);
#endif
}

void sg_fiber_entered(sg_fiber *self, sg_fiber *from) {
#if SG_FIBER_ASAN
    const void *bottom = NULL;
    size_t size = 0;
    __sanitizer_finish_switch_fiber(self->asan_fake, &bottom, &size);
    if (!from->stack) {
        from->asan_bottom = bottom;
        from->asan_size = size;
    }
#else
    (void)self;
    (void)from;
#endif
}
