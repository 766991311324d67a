/* tests/cuda_emu/sched.cc - runs a grid on the emulated device.
 *
 * Blocks run one after another (forward, or reversed / shuffled with the
 * thread order); a block's threads are fibers (fiber.h) on the calling OS
 * thread, each running the kernel from the start. A thread runs until it
 * reaches a barrier or ends, then the scheduler picks the next ready one in
 * the configured order (SG_EMU_ORDER: forward, reverse, random:SEED; the
 * random order is drawn anew for every round). __syncthreads releases the
 * block when every thread of it waits there; a shuffle or __syncwarp
 * releases the lanes its mask names when all of them wait at one. A
 * barrier that cannot be released (threads of a block waiting at different
 * barriers, or at a barrier some threads of the block already left by
 * ending: CUDA's "conditional code" rule), a mask naming a lane that does
 * not exist or has ended, and a launch CUDA would refuse are faults.
 *
 * Shared memory (the sgemu_shared section, emu.h) is filled with 0xff bytes
 * (NaN as float, double and bf16) at the start of each block.
 */
#include <algorithm>
#include <map>
#include <random>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <string>
#include <vector>

#include "tests/cuda_emu/emu_device.h"
#include "tests/cuda_emu/fiber.h"

namespace sg_emu {
void launch_grid(const char *name, dim3 grid, dim3 block, size_t shmem, cudaStream_t st,
                 std::vector<sg_emu_use> uses, std::function<void()> body);
}
/* runtime.cc: the error cudaGetLastError returns next */
void sg_emu_set_launch_error(cudaError_t e);

extern "C" {
uint3 sg_emu_threadIdx, sg_emu_blockIdx;
dim3 sg_emu_blockDim, sg_emu_gridDim;
int sg_emu_in_block;
unsigned sg_emu_thread;
unsigned long sg_emu_epoch;
}

/* the section exists even when no kernel declares shared memory */
static char shared_anchor __attribute__((section("sgemu_shared"), used));

namespace {

enum { T_READY, T_BLOCK_BAR, T_WARP_BAR, T_DONE };

struct thread_t {
    sg_fiber fiber;
    uint3 idx;
    unsigned lin;
    int state;
    unsigned warp_mask; /* the mask of the warp barrier it waits at */
    /* the values it offers in shuffles, double-buffered: a lane writes the
     * next shuffle's value into the other slot, so one barrier per shuffle
     * suffices (a lane cannot reach the shuffle after next, which reuses
     * this slot, before every lane has read this one: that needs the next
     * barrier, which waits for them) */
    unsigned long long shfl[2];
    unsigned shfl_n; /* shuffles so far */
};

constexpr size_t STACK_BYTES = 64 * 1024;
constexpr unsigned MAX_THREADS = 1024;

thread_t threads[MAX_THREADS];
unsigned n_alloc; /* fibers with a stack */
sg_fiber host;
thread_t *cur;
unsigned n_threads;
const std::function<void()> *body;
const char *kernel_name = "";
/* per warp of the running block: the lanes that exist, that have ended, and
 * that wait at a warp barrier (shuffle, __syncwarp): a barrier completes in
 * O(1) per arrival */
unsigned warp_exist[MAX_THREADS / 32], warp_done[MAX_THREADS / 32], warp_waiting[MAX_THREADS / 32];

enum order_t { O_FORWARD, O_REVERSE, O_RANDOM };
order_t order = O_FORWARD;
std::mt19937_64 rng;
bool order_read;

void read_order() {
    if (order_read) return;
    order_read = true;
    const char *e = getenv("SG_EMU_ORDER");
    if (!e || !*e || strcmp(e, "forward") == 0) order = O_FORWARD;
    else if (strcmp(e, "reverse") == 0) order = O_REVERSE;
    else if (strncmp(e, "random:", 7) == 0) {
        order = O_RANDOM;
        rng.seed(strtoull(e + 7, NULL, 10));
    } else {
        fprintf(stderr,
                "emulated CUDA device: SG_EMU_ORDER=%s: use forward, reverse or "
                "random:SEED\n",
                e);
        exit(2);
    }
}

void thread_main(void *arg) {
    thread_t *t = (thread_t *)arg;
    sg_fiber_entered(&t->fiber, &host);
    (*body)();
    t->state = T_DONE;
    warp_done[t->lin / 32] |= 1u << (t->lin & 31u);
    sg_fiber_switch(&t->fiber, &host, 1);
    abort(); /* never resumed */
}

/* back to the scheduler; returns when the scheduler resumes this thread */
void yield_to_host() {
    thread_t *t = cur;
    sg_fiber_switch(&t->fiber, &host, 0);
}

std::string where_now() {
    char b[256];
    snprintf(b, sizeof b, "%s, block (%u,%u,%u), thread (%u,%u,%u)", kernel_name, sg_emu_blockIdx.x,
             sg_emu_blockIdx.y, sg_emu_blockIdx.z, cur ? cur->idx.x : 0, cur ? cur->idx.y : 0,
             cur ? cur->idx.z : 0);
    return b;
}

void describe_states(char *out, size_t len) {
    unsigned ready = 0, bar = 0, warp = 0, done = 0;
    for (unsigned i = 0; i < n_threads; i++) switch (threads[i].state) {
        case T_READY: ready++; break;
        case T_BLOCK_BAR: bar++; break;
        case T_WARP_BAR: warp++; break;
        default: done++;
        }
    snprintf(out, len, "%u at __syncthreads, %u at a warp barrier (shuffle/__syncwarp), %u ended",
             bar, warp, done);
}

size_t shared_bytes() { return (size_t)(__stop_sgemu_shared - __start_sgemu_shared); }
/* Poisoning the whole section before every block costs more than most
 * blocks: a kernel whose first block leaves the section untouched (no
 * __shared__ writes: the elementwise kernels) has it poisoned once per
 * launch instead. */
bool poison_blocks = true;
std::map<const char *, bool> kernel_writes_shared;
bool section_clean() {
    for (const char *p = __start_sgemu_shared; p < __stop_sgemu_shared; p++)
        if ((unsigned char)*p != 0xff) return false;
    return true;
}

/* Runs one block; false when a fault gave it up. */
bool run_block() {
    for (unsigned i = 0; i < n_threads; i++) {
        thread_t *t = &threads[i];
        t->lin = i;
        t->idx.x = i % sg_emu_blockDim.x;
        t->idx.y = (i / sg_emu_blockDim.x) % sg_emu_blockDim.y;
        t->idx.z = i / (sg_emu_blockDim.x * sg_emu_blockDim.y);
        t->state = T_READY;
        t->shfl_n = 0;
        sg_fiber_start(&t->fiber, thread_main, t);
    }
    for (unsigned w = 0; w < (n_threads + 31) / 32; w++) {
        unsigned lanes = n_threads - w * 32 >= 32 ? 32 : n_threads - w * 32;
        warp_exist[w] = lanes == 32 ? 0xffffffffu : (1u << lanes) - 1;
        warp_done[w] = warp_waiting[w] = 0;
    }
    if (poison_blocks) memset(__start_sgemu_shared, 0xff, shared_bytes());
    sg_emu_epoch++;
    sg_emu_in_block = 1;
    static std::vector<unsigned> perm;
    perm.resize(n_threads);
    for (unsigned i = 0; i < n_threads; i++) perm[i] = order == O_REVERSE ? n_threads - 1 - i : i;
    for (;;) {
        if (order == O_RANDOM) std::shuffle(perm.begin(), perm.end(), rng);
        bool ran = false;
        for (unsigned k = 0; k < n_threads; k++) {
            thread_t *t = &threads[perm[k]];
            if (t->state != T_READY) continue;
            cur = t;
            sg_emu_threadIdx = t->idx;
            sg_emu_thread = t->lin;
            sg_fiber_switch(&host, &t->fiber, 0);
            cur = NULL;
            ran = true;
        }
        if (ran) continue;
        unsigned done = 0, bar = 0;
        for (unsigned i = 0; i < n_threads; i++) {
            done += threads[i].state == T_DONE;
            bar += threads[i].state == T_BLOCK_BAR;
        }
        if (done == n_threads) break;
        char st[160];
        describe_states(st, sizeof st);
        if (bar + done == n_threads && done > 0) {
            sg_emu_fault(cudaErrorLaunchFailure,
                         "%s, block (%u,%u,%u): __syncthreads reached by %u threads while %u "
                         "had ended: a block barrier in code that not every thread of the "
                         "block runs (CUDA C++ Programming Guide, __syncthreads: allowed in "
                         "conditional code only if the condition is the same for the whole "
                         "block)",
                         kernel_name, sg_emu_blockIdx.x, sg_emu_blockIdx.y, sg_emu_blockIdx.z, bar,
                         done);
            sg_emu_in_block = 0;
            return false;
        }
        if (bar == n_threads) {
            for (unsigned i = 0; i < n_threads; i++) threads[i].state = T_READY;
            sg_emu_epoch++;
            continue;
        }
        sg_emu_fault(cudaErrorLaunchFailure,
                     "%s, block (%u,%u,%u): deadlock: %s (threads wait at barriers that "
                     "cannot all be reached)",
                     kernel_name, sg_emu_blockIdx.x, sg_emu_blockIdx.y, sg_emu_blockIdx.z, st);
        sg_emu_in_block = 0;
        return false;
    }
    sg_emu_in_block = 0;
    return true;
}

void run_grid(const char *name, dim3 grid, dim3 block, const std::function<void()> &fn) {
    read_order();
    n_threads = block.x * block.y * block.z;
    while (n_alloc < n_threads) {
        if (sg_fiber_alloc(&threads[n_alloc].fiber, STACK_BYTES) != 0) {
            fprintf(stderr, "emulated CUDA device: cannot map fiber stacks\n");
            abort();
        }
        n_alloc++;
    }
    kernel_name = name;
    body = &fn;
    sg_emu_blockDim = block;
    sg_emu_gridDim = grid;
    size_t nb = (size_t)grid.x * grid.y * grid.z;
    std::vector<size_t> blocks;
    if (order != O_FORWARD) {
        blocks.resize(nb);
        for (size_t i = 0; i < nb; i++) blocks[i] = order == O_REVERSE ? nb - 1 - i : i;
        if (order == O_RANDOM) std::shuffle(blocks.begin(), blocks.end(), rng);
    }
    memset(__start_sgemu_shared, 0xff, shared_bytes());
    auto known = kernel_writes_shared.find(name);
    poison_blocks = known == kernel_writes_shared.end() || known->second;
    for (size_t k = 0; k < nb; k++) {
        size_t b = order == O_FORWARD ? k : blocks[k];
        if (k == 1 && known == kernel_writes_shared.end()) {
            kernel_writes_shared[name] = poison_blocks = !section_clean();
            known = kernel_writes_shared.find(name);
        }
        sg_emu_blockIdx.x = (unsigned)(b % grid.x);
        sg_emu_blockIdx.y = (unsigned)((b / grid.x) % grid.y);
        sg_emu_blockIdx.z = (unsigned)(b / ((size_t)grid.x * grid.y));
        if (!run_block()) {
            /* the fibers of a given-up block are dropped; fresh ones next time */
            break;
        }
    }
    kernel_name = "";
    body = NULL;
}

/* Waits at a warp barrier of `mask`: the last lane to arrive releases the
 * others and goes on without a switch. */
void warp_wait(unsigned mask, const char *what) {
    thread_t *t = cur;
    if (!t) {
        fprintf(stderr, "emulated CUDA device: %s called outside a kernel\n", what);
        abort();
    }
    unsigned lane = t->lin & 31u, w = t->lin / 32, bit = 1u << lane;
    if (!(mask & bit))
        sg_emu_fault(cudaErrorLaunchFailure,
                     "%s: %s with mask 0x%08x, which does not name the calling lane %u (CUDA C++ "
                     "Programming Guide, warp shuffle functions)",
                     where_now().c_str(), what, mask, lane);
    unsigned bad = (mask & ~warp_exist[w]) | (mask & warp_done[w]);
    if (bad) {
        unsigned l = (unsigned)__builtin_ctz(bad);
        sg_emu_fault(cudaErrorLaunchFailure, "%s: %s with mask 0x%08x names lane %u, which %s",
                     where_now().c_str(), what, mask, l,
                     (mask & ~warp_exist[w]) >> l & 1
                         ? "does not exist (blockDim is not a multiple of 32)"
                         : "has ended");
        mask &= ~bad;
    }
    mask |= bit;
    t->warp_mask = mask;
    warp_waiting[w] |= bit;
    if ((warp_waiting[w] & mask) == mask) {
        unsigned base = w * 32;
        for (unsigned m = mask & ~bit; m; m &= m - 1) {
            thread_t *o = &threads[base + (unsigned)__builtin_ctz(m)];
            if (o->warp_mask != mask)
                sg_emu_fault(cudaErrorLaunchFailure,
                             "%s: %s with mask 0x%08x while lane %u waits at one with mask 0x%08x",
                             where_now().c_str(), what, mask, o->lin & 31u, o->warp_mask);
            o->state = T_READY;
        }
        warp_waiting[w] &= ~mask;
        return;
    }
    t->state = T_WARP_BAR;
    yield_to_host();
}

} // namespace

extern "C" void sg_emu_syncthreads(void) {
    if (!cur) {
        fprintf(stderr, "emulated CUDA device: __syncthreads outside a kernel\n");
        abort();
    }
    cur->state = T_BLOCK_BAR;
    yield_to_host();
}

extern "C" void sg_emu_syncwarp(unsigned mask) { warp_wait(mask, "__syncwarp"); }

extern "C" unsigned long long sg_emu_shfl(unsigned mask, unsigned long long v, int kind, int arg,
                                          int width) {
    static const char *names[] = {"__shfl_sync", "__shfl_up_sync", "__shfl_down_sync",
                                  "__shfl_xor_sync"};
    thread_t *t = cur;
    if (width < 1 || width > 32 || (width & (width - 1))) {
        sg_emu_fault(cudaErrorLaunchFailure, "%s: %s with width %d (a power of 2 up to 32)",
                     where_now().c_str(), names[kind], width);
        width = 32;
    }
    unsigned slot = t->shfl_n++ & 1u;
    t->shfl[slot] = v;
    warp_wait(mask, names[kind]);
    unsigned lane = t->lin & 31u, base = t->lin & ~31u, w = (unsigned)width;
    unsigned group = lane / w * w, src = lane;
    switch (kind) {
    case 0: src = group + ((unsigned)arg % w); break;
    case 1: src = lane - group >= (unsigned)arg ? lane - (unsigned)arg : lane; break;
    case 2: src = lane - group + (unsigned)arg < w ? lane + (unsigned)arg : lane; break;
    default:
        src = lane ^ (unsigned)arg;
        if (src >= group + w) src = lane;
        break;
    }
    unsigned long long r = v;
    if (src < 32 && (mask >> src & 1)) r = threads[base + src].shfl[slot];
    else
        sg_emu_fault(cudaErrorLaunchFailure,
                     "%s: %s reads lane %u, which the mask 0x%08x does not name (undefined "
                     "value)",
                     where_now().c_str(), names[kind], src, mask);
    return r;
}

/* Atomics: the device runs one thread at a time, so plain read-modify-write
 * is atomic; out of line so that race.cc's hooks never see them. Integer
 * sums wrap, as on the device. */
template <class T> static T add_old(T *p, T v) {
    T o = *p;
    *p = o + v;
    return o;
}
extern "C" unsigned sg_emu_atomic_add_u32(unsigned *p, unsigned v) { return add_old(p, v); }
extern "C" int sg_emu_atomic_add_i32(int *p, int v) {
    return (int)add_old((unsigned *)p, (unsigned)v);
}
extern "C" unsigned long long sg_emu_atomic_add_u64(unsigned long long *p, unsigned long long v) {
    return add_old(p, v);
}
extern "C" float sg_emu_atomic_add_f32(float *p, float v) { return add_old(p, v); }
extern "C" double sg_emu_atomic_add_f64(double *p, double v) { return add_old(p, v); }

extern "C" const char *sg_emu_where(void) {
    static std::string s;
    if (!sg_emu_in_block) return "";
    s = where_now();
    return s.c_str();
}

/* Launch configuration limits of every GPU since sm_30 (CUDA C++
 * Programming Guide, "Features and Technical Specifications"): 1024 threads
 * per block, block x/y <= 1024 and z <= 64, grid x < 2^31 and y/z <= 65535,
 * 48 KiB of shared memory without opting in. */
void sg_emu::launch_grid(const char *name, dim3 grid, dim3 block, size_t shmem, cudaStream_t st,
                         std::vector<sg_emu_use> uses, std::function<void()> body_fn) {
    sg_emu_guard g;
    unsigned long long threads_per_block = (unsigned long long)block.x * block.y * block.z;
    if (!grid.x || !grid.y || !grid.z || !block.x || !block.y || !block.z ||
        threads_per_block > 1024 || block.x > 1024 || block.y > 1024 || block.z > 64 ||
        grid.x > 2147483647u || grid.y > 65535 || grid.z > 65535) {
        fprintf(stderr,
                "emulated CUDA device: launch of %s with grid (%u,%u,%u) block (%u,%u,%u): "
                "invalid configuration\n",
                name, grid.x, grid.y, grid.z, block.x, block.y, block.z);
        sg_emu_set_launch_error(cudaErrorInvalidConfiguration);
        return;
    }
    if (shmem > 48 * 1024) {
        fprintf(stderr,
                "emulated CUDA device: launch of %s asks %zu bytes of dynamic shared "
                "memory (48 KiB without cudaFuncSetAttribute)\n",
                name, shmem);
        sg_emu_set_launch_error(cudaErrorInvalidValue);
        return;
    }
    cudaError_t e = sg_emu_enqueue(st, name, std::move(uses), [name, grid, block, body_fn]() {
        run_grid(name, grid, block, body_fn);
    });
    if (e != cudaSuccess) sg_emu_set_launch_error(e);
}
