/* tests/cuda_emu/test_race_hooks.cc - race.cc's hooks on their own, without
 * the rest of the emulated device (test-only C++17).
 *
 * This file is compiled like a kernel file (-fsanitize=thread
 * --param=tsan-instrument-func-entry-exit=0) and linked, without
 * -fsanitize=thread, with race.cc alone:
 *   g++ -std=c++17 -O2 -I. -fsanitize=thread --param=tsan-instrument-func-entry-exit=0 \
 *       -c tests/cuda_emu/test_race_hooks.cc
 *   g++ -std=c++17 -O2 -I. -c tests/cuda_emu/race.cc
 *   g++ test_race_hooks.o race.o -o test_race_hooks
 * It stands in for sched.cc (the globals race.cc reads, sg_emu_fault and
 * sg_emu_where, which collect the reports) and plays a block's threads by
 * setting sg_emu_thread between calls of the accessors below, which touch a
 * 64-byte array in the __shared__ section. Its own accesses (the driver is
 * instrumented too) fall outside the section and exercise the fast path. */
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string>
#include <vector>

#include "tests/cuda_emu/emu_device.h"

/* sched.cc's state and reporting, as race.cc sees them. */
int sg_emu_in_block;
unsigned sg_emu_thread;
unsigned long sg_emu_epoch;
static const char *kernel = "k";
static std::vector<std::string> faults;

const char *sg_emu_where(void) {
    static char text[128];
    snprintf(text, sizeof text, "%s block (0,0,0) thread (%u,0,0)", kernel, sg_emu_thread);
    return text;
}
void sg_emu_fault(cudaError_t e, const char *fmt, ...) {
    char text[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    if (e != cudaErrorLaunchFailure) fprintf(stderr, "unexpected error %d\n", (int)e);
    faults.push_back(text);
}

/* The "kernel": accessors of a __shared__ array, one hook each. */
static char buf[64] __attribute__((section("sgemu_shared"), used, aligned(16)));
typedef uint16_t u16a __attribute__((may_alias));
typedef uint32_t u32a __attribute__((may_alias));
typedef uint64_t u64a __attribute__((may_alias));
#define NI __attribute__((noipa)) /* not inlined, and no call dropped */
NI void w1(int i) { buf[i] = 1; }
NI int r1(int i) { return buf[i]; }
NI void w2(int i, uint16_t v) { *(u16a *)(buf + i) = v; }
NI int r2(int i) { return *(u16a *)(buf + i); }
NI void w4(int i) { *(u32a *)(buf + i) = 4; }
NI uint64_t r8(int i) { return *(u64a *)(buf + i); }
struct blob {
    char c[16];
};
NI void copy16(int i, const blob *b) { *(blob *)(buf + i) = *b; } /* __tsan_write_range */
struct __attribute__((packed)) unaligned {
    char c;
    uint32_t u;
};
NI void w4_unaligned(int i) { ((unaligned *)(buf + i))->u = 4; } /* __tsan_write_range */
NI unsigned atomic_add(int i) { return __atomic_fetch_add((unsigned *)(buf + i), 1u, 0); }
NI unsigned atomic_get(int i) { return __atomic_load_n((unsigned *)(buf + i), 0); }

static int failures;
static void as_thread(unsigned t) { sg_emu_thread = t; }
static void barrier(void) { sg_emu_epoch++; }
static void expect(const char *what, size_t reports, const char *text = nullptr) {
    bool ok = faults.size() == reports &&
              (!text || (reports && faults[0].find(text) != std::string::npos));
    printf("%s %s\n", ok ? "ok  " : "FAIL", what);
    if (!ok) failures++;
    for (const std::string &f : faults) printf("      %s\n", f.c_str());
    faults.clear();
    barrier(); /* each case in its own epoch */
}

int main() {
    static const blob sixteen = {"0123456789abcde"};
    sg_emu_in_block = 1;
    barrier();

    as_thread(0), w1(0), as_thread(1), r1(0);
    expect("write by t0, read by t1, one epoch: a race", 1,
           "in k block (0,0,0) thread (1,0,0): thread 1 reads byte 0 of __shared__ memory that "
           "thread 0 wrote since the last __syncthreads");
    as_thread(0), w1(1), barrier(), as_thread(1), r1(1);
    expect("write by t0, barrier, read by t1", 0);
    as_thread(0), r1(2), as_thread(1), r1(2);
    expect("reads by t0 and t1", 0);
    as_thread(0), w1(3), r1(3), w1(3);
    expect("write, read, write by t0 alone", 0);
    as_thread(0), w2(4, 0x3f80), as_thread(1), w2(6, 0x4000), as_thread(0), r2(4), as_thread(1),
        r2(6);
    expect("bf16 neighbours: t0 bytes 4-5, t1 bytes 6-7", 0);
    as_thread(0), w2(8, 1), as_thread(1), w4(8);
    expect("4-byte write by t1 over t0's 2-byte write", 1, "thread 1 writes byte 8");
    as_thread(0), r1(12), as_thread(1), r1(12), as_thread(2), r1(12), as_thread(0), w1(12);
    expect("reads by t0-t2, then a write by t0: names another reader", 1,
           "thread 0 writes byte 12 of __shared__ memory that thread 1 read");
    as_thread(0), copy16(16, &sixteen), as_thread(1), r8(24);
    expect("16-byte struct copy by t0, 8-byte read by t1", 1, "thread 1 reads byte 24");
    as_thread(0), w4_unaligned(40), as_thread(1), r2(44);
    expect("unaligned 4-byte write by t0 to bytes 41-44, read of 44-45 by t1", 1,
           "thread 1 reads byte 44");
    as_thread(0), atomic_add(32), as_thread(1), atomic_add(32), as_thread(2), atomic_get(32);
    expect("atomic updates by t0 and t1, atomic read by t2", 0);
    as_thread(0), atomic_add(36), as_thread(1), r8(32);
    expect("atomic update by t0, plain read by t1", 1,
           "thread 1 reads byte 36 of __shared__ memory that thread 0 atomically updated");
    sg_emu_in_block = 0;
    as_thread(0), w1(48), as_thread(1), w1(48);
    sg_emu_in_block = 1;
    expect("outside a block: not checked", 0);

    /* Once per (kernel, byte); the same byte in another kernel is new. */
    as_thread(0), w1(0), as_thread(1), w1(0);
    expect("the race at byte 0 again, same kernel: not reported again", 0);
    kernel = "k2";
    as_thread(0), w1(0), as_thread(1), w1(0);
    expect("the race at byte 0 in another kernel", 1, "in k2 block");
    /* At most 10 reports per kernel, then one line saying so. */
    kernel = "k3";
    for (int i = 0; i < 16; i++) as_thread(0), w1(i), as_thread(1), w1(i);
    expect("16 races in one kernel: 10 reports and a last line", 11);

    /* Instrumented host code outside the section: the atomics still work. */
    unsigned long x = 5;
    __atomic_fetch_add(&x, 2, __ATOMIC_RELAXED);
    bool ok = __sync_val_compare_and_swap(&x, 7, 9) == 7 && x == 9;
    unsigned long expected = 8;
    ok = ok && !__atomic_compare_exchange_n(&x, &expected, 11, false, __ATOMIC_SEQ_CST, 0) &&
         expected == 9 && __atomic_compare_exchange_n(&x, &expected, 11, true, 5, 5) && x == 11;
    ok = ok && __atomic_exchange_n(&x, 1, 0) == 11 && __atomic_fetch_nand(&x, 3, 0) == 1 &&
         x == ~1ul && __atomic_fetch_sub(&x, 1, 0) == ~1ul && __atomic_load_n(&x, 2) == ~2ul;
    expect(ok ? "host atomics" : "host atomics (wrong values)", ok ? 0 : 1);

    printf("%s\n", failures ? "FAILED" : "all passed");
    return failures ? 1 : 0;
}
