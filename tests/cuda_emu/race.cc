/* tests/cuda_emu/race.cc - the emulated device's shared-memory race detector
 * (test-only C++17; never linked into the product).
 *
 * What it does. The kernel files are compiled with gcc's ThreadSanitizer
 * instrumentation, which puts a call before every load and store (and turns
 * every atomic into a call), but the program is linked WITHOUT the TSan
 * runtime: this file defines every __tsan_* entry point the instrumented
 * objects call. Each hook does its access's job (the atomics through the
 * real __atomic builtins, so instrumented host code keeps working on any OS
 * thread) and, when the address lies inside the __shared__ section
 * [__start_sgemu_shared, __stop_sgemu_shared) while a block runs
 * (sg_emu_in_block), records it in a shadow of that section: one entry per
 * byte (bf16 tiles put two threads' elements in one 4-byte word, so a
 * coarser granule would see races that are not there) holding the epoch of
 * its accesses (sched.cc adds one at each block start and at each
 * __syncthreads) and which threads read, wrote, atomically read and
 * atomically updated it in that epoch. Two different threads touching one
 * byte within one epoch, at least one of them writing, is a fault
 * (cudaErrorLaunchFailure): a real GPU runs the threads of a block in
 * parallel, so the result would hang on their timing. Atomic updates do not
 * race with one another (shared-memory histograms), but do race with plain
 * accesses, as on the hardware. An access in a new epoch starts the entry
 * afresh. Anything else (other addresses, host code, code outside a block)
 * costs two compares.
 *
 * Warp-level synchronisation is NOT an ordering point here: lanes that hand
 * each other values through __shared__ memory between two __syncthreads
 * with only __syncwarp, a shuffle or warp-synchronous (volatile) code in
 * between are reported. The project's kernels exchange values through
 * __shared__ memory only across __syncthreads (warp shuffles move registers,
 * which this detector does not see; emu.h must keep its shuffle buffers
 * outside the section), so the rule costs nothing and keeps the detector
 * simple.
 *
 * Why not gcc's TSan runtime: it shadows all of the address space (the runs
 * it was tried on ran out of 24 GiB), and it knows nothing of fibers: the
 * CUDA threads of a block are fibers sharing one OS thread, so to it they
 * are one thread and never race, while the barriers that order them are
 * invisible to it.
 *
 * Instrumented objects (the .cu files of kernels/cuda built for the emulated
 * device) are compiled with
 *     -fsanitize=thread --param=tsan-instrument-func-entry-exit=0
 * (the param drops the per-function entry/exit calls; the hooks are still
 * defined). -fsanitize=thread cannot be combined with -fsanitize=address in
 * one object. This file and the rest of the emulation are compiled and
 * linked without -fsanitize=thread. gcc 12 calls __tsan_read_range /
 * __tsan_write_range for unaligned (packed) accesses and aggregate copies.
 * It leaves memset and memcpy uninstrumented (TSan's runtime intercepts them
 * in libc) except a small memcpy it has already folded into a copy: this
 * detector does not see them, and no kernel calls them on __shared__
 * memory. The __tsan_unaligned_* and __tsan_volatile_* hooks (the latter only under
 * --param=tsan-distinguish-volatile=1) are defined for completeness. The
 * 16-byte atomics (__tsan_atomic128_*) are not defined: no kernel uses them,
 * and an object that did would fail to link, naming the hook.
 *
 * Reports name both threads and what each did; each is made once per
 * (kernel, byte) and at most kMaxReportsPerKernel times per kernel, the
 * kernel being what sg_emu_where() says before the word "block". */
#include <set>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <string>
#include <unordered_map>
#include <utility>

#include "tests/cuda_emu/emu_device.h"

/* Weak: a program without any __shared__ variable has no such section, and
 * the linker then leaves both at 0 (an empty section: nothing is checked). */
#pragma weak __start_sgemu_shared
#pragma weak __stop_sgemu_shared

namespace {

/* What an access does to a byte. */
enum Kind { READ, WRITE, ATOMIC_READ, ATOMIC_WRITE, KINDS };
const char *const kind_now[KINDS] = {"reads", "writes", "atomically reads", "atomically updates"};
const char *const kind_past[KINDS] = {"read", "wrote", "atomically read", "atomically updated"};

/* Whether an access of kind [a] by one thread races with an earlier access
 * of kind [b] by another within one epoch: any plain write races with
 * everything, a plain read with any write, an atomic read with a plain
 * write, an atomic update with any plain access. */
const bool races_with[KINDS][KINDS] = {
    /*                 READ   WRITE  A_READ A_WRITE */
    /* READ    */ {false, true, false, true},
    /* WRITE   */ {true, true, true, true},
    /* A_READ  */ {false, true, false, false},
    /* A_WRITE */ {true, true, false, false},
};
/* The order in which an access looks for the earlier access it races with
 * (the report names one): writers first. */
const Kind check_order[KINDS] = {WRITE, ATOMIC_WRITE, READ, ATOMIC_READ};

/* Up to two distinct threads, stored as thread + 1 (0: no one). Two are
 * enough to name, for any thread t, another thread when there is one. */
struct Threads {
    uint32_t a, b;
    void add(uint32_t t1) {
        if (a == 0) a = t1;
        else if (a != t1 && b == 0) b = t1;
    }
    /* A stored thread other than t1 (as thread + 1), 0 when none. */
    uint32_t other_than(uint32_t t1) const {
        if (a && a != t1) return a;
        if (b && b != t1) return b;
        return 0;
    }
};

/* One byte of the section: the epoch its entry is for, and who did what to
 * it in that epoch. All zero (calloc) is an entry no one has touched. */
struct Granule {
    unsigned long epoch;
    Threads seen[KINDS];
};

Granule *shadow; /* one per byte of the section, allocated at first use */

const unsigned kMaxReportsPerKernel = 10;
std::set<std::pair<std::string, size_t>> reported;        /* (kernel, byte) */
std::unordered_map<std::string, unsigned> kernel_reports; /* kernel -> reports made */

/* The kernel's name in sg_emu_where()'s text: what comes before the word
 * "block", less trailing separators; "" (one key for every kernel) when the
 * text has no such word. */
std::string kernel_of(const char *where) {
    const char *end = strstr(where, "block");
    if (!end) return "";
    while (end > where && strchr(" \t,:;([{", end[-1])) --end;
    return std::string(where, end);
}

void report(size_t offset, uint32_t t1, Kind kind, uint32_t other1, Kind other_kind) {
    const char *where = sg_emu_where();
    std::string kernel = kernel_of(where);
    if (!reported.insert({kernel, offset}).second) return;
    unsigned n = ++kernel_reports[kernel];
    if (n > kMaxReportsPerKernel + 1) return;
    if (n == kMaxReportsPerKernel + 1) {
        sg_emu_fault(cudaErrorLaunchFailure,
                     "shared-memory race in %s: more races in this kernel are not reported", where);
        return;
    }
    sg_emu_fault(cudaErrorLaunchFailure,
                 "shared-memory race in %s: thread %u %s byte %zu of __shared__ memory that "
                 "thread %u %s since the last __syncthreads",
                 where, t1 - 1, kind_now[kind], offset, other1 - 1, kind_past[other_kind]);
}

/* Records an access of `bytes` bytes at section offset `offset` (inside
 * the section) by the running thread, and reports the first byte at which
 * it races (one report per access). */
__attribute__((noinline)) void record(size_t offset, size_t bytes, Kind kind) {
    size_t size = (size_t)(__stop_sgemu_shared - __start_sgemu_shared);
    if (!shadow) {
        shadow = (Granule *)calloc(size, sizeof(Granule));
        if (!shadow) {
            sg_emu_fault(cudaErrorMemoryAllocation,
                         "race detector: no memory for the shadow of %zu bytes of __shared__ "
                         "memory",
                         size);
            abort();
        }
    }
    if (bytes > size - offset) bytes = size - offset;
    unsigned long epoch = sg_emu_epoch;
    uint32_t t1 = sg_emu_thread + 1;
    bool raced = false;
    for (size_t i = offset; i < offset + bytes; i++) {
        Granule &g = shadow[i];
        if (g.epoch != epoch) g = Granule{epoch, {}};
        for (int c = 0; c < KINDS && !raced; c++) {
            Kind earlier = check_order[c];
            if (!races_with[kind][earlier]) continue;
            uint32_t other1 = g.seen[earlier].other_than(t1);
            if (other1) {
                raced = true;
                report(i, t1, kind, other1, earlier);
            }
        }
        g.seen[kind].add(t1);
    }
}

/* The hooks' check: two compares for anything outside the section or
 * outside a block. */
inline void check(const volatile void *p, size_t bytes, Kind kind) {
    uintptr_t offset = (uintptr_t)p - (uintptr_t)__start_sgemu_shared;
    if (offset >= (uintptr_t)(__stop_sgemu_shared - __start_sgemu_shared)) return;
    if (!sg_emu_in_block) return;
    record(offset, bytes, kind);
}

/* A range [p, p + bytes) may start before the section (a memset over a
 * neighbouring object cannot, but nothing is assumed): its overlap. */
inline void check_range(const void *p, size_t bytes, Kind kind) {
    uintptr_t lo = (uintptr_t)p, hi = lo + bytes;
    uintptr_t start = (uintptr_t)__start_sgemu_shared, stop = (uintptr_t)__stop_sgemu_shared;
    if (hi <= start || lo >= stop || hi < lo) return;
    if (!sg_emu_in_block) return;
    if (lo < start) lo = start;
    if (hi > stop) hi = stop;
    record(lo - start, hi - lo, kind);
}

/* The atomics, done at seq_cst whatever order was asked (stronger is always
 * allowed, and gcc may pass orders with HLE bits the builtins' constant
 * forms would refuse). Instrumented code passes a plain address; the
 * volatile qualifiers match TSan's own declarations. */
const int SC = __ATOMIC_SEQ_CST;

template <typename T> T atomic_load(const volatile T *a) {
    check(a, sizeof(T), ATOMIC_READ);
    return __atomic_load_n(a, SC);
}
template <typename T> void atomic_store(volatile T *a, T v) {
    check(a, sizeof(T), ATOMIC_WRITE);
    __atomic_store_n(a, v, SC);
}
template <typename T> bool atomic_cas(volatile T *a, T *expected, T desired, bool weak) {
    bool ok = __atomic_compare_exchange_n(a, expected, desired, weak, SC, SC);
    check(a, sizeof(T), ok ? ATOMIC_WRITE : ATOMIC_READ); /* a failed CAS only reads */
    return ok;
}

} // namespace

extern "C" {

void __tsan_init(void) {}
void __tsan_func_entry(void *) {}
void __tsan_func_exit(void) {}

#define SG_PLAIN_HOOKS(N)                                        \
    void __tsan_read##N(void *p) { check(p, N, READ); }          \
    void __tsan_write##N(void *p) { check(p, N, WRITE); }        \
    void __tsan_volatile_read##N(void *p) { check(p, N, READ); } \
    void __tsan_volatile_write##N(void *p) { check(p, N, WRITE); }
#define SG_UNALIGNED_HOOKS(N)                                           \
    void __tsan_unaligned_read##N(const void *p) { check(p, N, READ); } \
    void __tsan_unaligned_write##N(void *p) { check(p, N, WRITE); }
SG_PLAIN_HOOKS(1)
SG_PLAIN_HOOKS(2)
SG_PLAIN_HOOKS(4)
SG_PLAIN_HOOKS(8)
SG_PLAIN_HOOKS(16)
SG_UNALIGNED_HOOKS(2)
SG_UNALIGNED_HOOKS(4)
SG_UNALIGNED_HOOKS(8)
SG_UNALIGNED_HOOKS(16)

void __tsan_read_range(void *p, unsigned long bytes) { check_range(p, bytes, READ); }
void __tsan_write_range(void *p, unsigned long bytes) { check_range(p, bytes, WRITE); }

/* A store of an object's vtable pointer (constructors, destructors), and a
 * load of it. */
void __tsan_vptr_update(void **vptr_p, void *new_val) {
    if (*vptr_p != new_val) check(vptr_p, sizeof(void *), WRITE);
}
void __tsan_vptr_read(void **vptr_p) { check(vptr_p, sizeof(void *), READ); }

#define SG_RMW_HOOK(N, T, OP, BUILTIN)                   \
    T __tsan_atomic##N##_##OP(volatile T *a, T v, int) { \
        check(a, sizeof(T), ATOMIC_WRITE);               \
        return BUILTIN(a, v, SC);                        \
    }
#define SG_ATOMIC_HOOKS(N, T)                                                             \
    T __tsan_atomic##N##_load(const volatile T *a, int) { return atomic_load(a); }        \
    void __tsan_atomic##N##_store(volatile T *a, T v, int) { atomic_store(a, v); }        \
    SG_RMW_HOOK(N, T, exchange, __atomic_exchange_n)                                      \
    SG_RMW_HOOK(N, T, fetch_add, __atomic_fetch_add)                                      \
    SG_RMW_HOOK(N, T, fetch_sub, __atomic_fetch_sub)                                      \
    SG_RMW_HOOK(N, T, fetch_and, __atomic_fetch_and)                                      \
    SG_RMW_HOOK(N, T, fetch_or, __atomic_fetch_or)                                        \
    SG_RMW_HOOK(N, T, fetch_xor, __atomic_fetch_xor)                                      \
    SG_RMW_HOOK(N, T, fetch_nand, __atomic_fetch_nand)                                    \
    bool __tsan_atomic##N##_compare_exchange_strong(volatile T *a, T *c, T v, int, int) { \
        return atomic_cas(a, c, v, false);                                                \
    }                                                                                     \
    bool __tsan_atomic##N##_compare_exchange_weak(volatile T *a, T *c, T v, int, int) {   \
        return atomic_cas(a, c, v, true);                                                 \
    }                                                                                     \
    T __tsan_atomic##N##_compare_exchange_val(volatile T *a, T c, T v, int, int) {        \
        atomic_cas(a, &c, v, false);                                                      \
        return c; /* the value found: c itself when the exchange happened */              \
    }
SG_ATOMIC_HOOKS(8, uint8_t)
SG_ATOMIC_HOOKS(16, uint16_t)
SG_ATOMIC_HOOKS(32, uint32_t)
SG_ATOMIC_HOOKS(64, uint64_t)

void __tsan_atomic_thread_fence(int) { __atomic_thread_fence(SC); }
void __tsan_atomic_signal_fence(int) { __atomic_signal_fence(SC); }

} // extern "C"
