/* tests/cuda_emu/emu_device.h - the emulated CUDA device's internal API,
 * shared by its parts (test-only C++; never linked into the product).
 *
 * The emulated device is one process-wide device run on the CPU. Its parts:
 *   emu.h          force-included into every kernels/cuda .cu file compiled as
 *                  host C++: threadIdx & co., barriers, shuffles, atomics,
 *                  __shared__, and SG_LAUNCH (the launch macro's emulated form)
 *   fiber.c        CUDA threads as fibers (x86-64 context switch, ucontext
 *                  elsewhere), with AddressSanitizer's fiber annotations
 *   sched.cc       runs a grid: blocks one after another, each block's threads
 *                  as fibers in forward, reverse or seeded random order, block
 *                  and warp barriers, shared memory poisoned at each block start
 *   runtime.cc     the CUDA runtime API the project calls: the allocation
 *                  table, streams as deferred queues run at synchronisation
 *                  points in an adversarial order, events, graphs
 *   fake_cudnn.cc  the cuDNN API the project calls: a naive convolution
 *                  accumulated in double, and cuDNN 9's refusals
 *   fake_nccl.cc   NCCL for one rank, whose peers can be made to die (a
 *                  test's switch): collectives then hang until aborted
 *   race.cc        ThreadSanitizer's entry points, reimplemented: two threads
 *                  of a block touching one __shared__ byte between two
 *                  barriers (one of them writing) is a fault
 *
 * Faults (what real hardware reports as an illegal address or a launch
 * failure, and what the emulation checks beyond it) are printed at once on
 * stderr, "emulated CUDA device: <what>", and become the device's sticky
 * error: every later runtime call that reports asynchronous errors returns it,
 * so the backend's own checks (CU_CHECK) stop the program as they would on a
 * GPU.
 *
 * One lock serialises the device: every runtime, cuDNN and NCCL entry point
 * takes it, and device work (kernels, copies, convolutions) runs inside it on
 * the thread that reached a synchronisation point.
 */
#ifndef SG_TESTS_CUDA_EMU_DEVICE_H
#define SG_TESTS_CUDA_EMU_DEVICE_H

#include <cuda_runtime.h>
#include <stddef.h>

#ifdef __cplusplus
#include <functional>
#include <vector>

/* The device lock (recursive): held by every entry point of the fakes. */
void sg_emu_lock(void);
void sg_emu_unlock(void);
struct sg_emu_guard {
    sg_emu_guard() { sg_emu_lock(); }
    ~sg_emu_guard() { sg_emu_unlock(); }
};

/* What kind of memory an address is. */
enum sg_emu_mem { SG_EMU_MEM_NONE, SG_EMU_MEM_DEVICE, SG_EMU_MEM_PINNED, SG_EMU_MEM_FREED };

/* Where [p, p + bytes) lies: inside one live device allocation, one live
 * pinned host allocation (cudaMallocHost / cudaHostAlloc: device-accessible
 * through unified addressing), a freed allocation, or none of them. *base
 * and *size (may be NULL) get the allocation's start and size. bytes 0 asks
 * about the address alone (an end pointer one past the allocation counts as
 * inside). */
sg_emu_mem sg_emu_classify(const void *p, size_t bytes, const void **base, size_t *size);

/* Queues device work on stream s (NULL: the legacy default stream), or adds
 * it to the graph s is capturing. `what` names it in fault reports and
 * stays valid for the program's life (a literal). `uses` lists the device
 * ranges it reads or writes (pointer, bytes); each is checked to be live
 * when the work runs (a buffer freed while work on another stream still
 * needed it is a fault, not silent corruption), and two pieces of work on
 * different streams that touch one byte, one of them writing, must be
 * ordered by stream order, events or a host synchronisation, else it is a
 * fault (a missing event wait shows even when the values happen to agree).
 * Returns cudaSuccess, or the
 * error the real runtime would give (an invalid stream, capture
 * invalidated). */
struct sg_emu_use {
    const void *p;
    size_t bytes;
    int write = 1; /* 0: only read (a kernel's pointer-to-const argument, a copy's source) */
    int arg = -1;  /* the kernel argument it came from, for reports (-1: not a kernel's) */
};
cudaError_t sg_emu_enqueue(cudaStream_t s, const char *what, std::vector<sg_emu_use> uses,
                           std::function<void()> work);
/* The same for work that may not start before `gate` returns true (called
 * under the device lock whenever the device looks for work to run): a
 * collective waiting for its peers. While its gate is shut, what waits for
 * it waits with the device lock released (another host thread must open
 * it, e.g. by ncclCommAbort), and cudaEventQuery says cudaErrorNotReady. */
cudaError_t sg_emu_enqueue_gated(cudaStream_t s, const char *what, std::vector<sg_emu_use> uses,
                                 std::function<bool()> gate, std::function<void()> work);

/* Runs every piece of queued work that `s` depends on and then s's own
 * (s NULL: the whole device). */
void sg_emu_drain(cudaStream_t s);
#endif

#ifdef __cplusplus
extern "C" {
#endif
/* Reports a fault (printf format) and makes it the sticky error: e is what
 * the runtime returns from then on (cudaErrorIllegalAddress,
 * cudaErrorLaunchFailure, ...). */
void sg_emu_fault(cudaError_t e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The sticky error, cudaSuccess when none. */
cudaError_t sg_emu_sticky(void);
/* The kernel, block and thread running now ("" outside a kernel): for fault
 * reports from inside device code. */
const char *sg_emu_where(void);

/* The device's shape, from the environment (read once):
 *   SG_EMU_SMS           multiprocessor count (default 4)
 *   SG_EMU_ORDER         fiber order within a block: forward (default),
 *                        reverse, random:SEED
 *   SG_EMU_STREAMS       order of runnable work across streams at a
 *                        synchronisation point: latest (default: the most
 *                        recently issued runnable work first, so work that
 *                        forgot to wait for another stream runs before what
 *                        it needed), earliest (issue order), random:SEED */
int sg_emu_sm_count(void);

/* sched.cc's state, read by race.cc's hooks (device work runs under the
 * device lock, one block at a time, so plain globals suffice):
 *   sg_emu_in_block  1 while a block's threads run
 *   sg_emu_thread    the running thread's linear index in its block
 *   sg_emu_epoch     +1 at each block's start and at each block barrier
 * The __shared__ variables of the kernels live in one linker section,
 * [__start_sgemu_shared, __stop_sgemu_shared) (emu.h). */
extern int sg_emu_in_block;
extern unsigned sg_emu_thread;
extern unsigned long sg_emu_epoch;
extern char __start_sgemu_shared[], __stop_sgemu_shared[];
#ifdef __cplusplus
}
#endif

#endif
