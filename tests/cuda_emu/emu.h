/* tests/cuda_emu/emu.h - force-included (g++ -include) before each
 * kernels/cuda .cu file compiled as host C++ for the emulated device; nothing
 * else includes it, and the product build never sees it.
 *
 * It gives device code what nvcc would: the location qualifiers (empty on
 * the host), threadIdx / blockIdx / blockDim / gridDim (the running fiber's,
 * set by the scheduler before each switch), __syncthreads and the warp
 * shuffles (barriers of the scheduler, sched.cc), the atomics (out of line,
 * so the race check's instrumentation does not see them as plain accesses),
 * the float intrinsics, and SG_LAUNCH, the launch macro's emulated form
 * (kernels/cuda/cuda_launch.h), which converts the arguments to the kernel's
 * parameter types at the launch, as CUDA copies them, and queues the grid
 * on the stream.
 *
 * __shared__ variables become function-local statics in one linker section
 * (sgemu_shared): blocks run one after another, so one copy serves every
 * block; the scheduler poisons the section (NaN bytes) at each block's start
 * so a read of what the block never wrote shows, and the race check knows a
 * shared address by the section's bounds.
 */
#ifndef SG_TESTS_CUDA_EMU_H
#define SG_TESTS_CUDA_EMU_H
#ifndef __cplusplus
#error "tests/cuda_emu/emu.h is for the .cu files compiled as C++"
#endif

#define SG_CUDA_EMULATED 1
#define __global__
#define __device__
#define __host__
#define __shared__ __attribute__((section("sgemu_shared"), used)) static

#include <cuda_runtime.h>
#include <functional>
#include <stdint.h>
#include <string.h>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "tests/cuda_emu/emu_device.h"

extern "C" {
/* the running thread's coordinates (sched.cc) */
extern uint3 sg_emu_threadIdx, sg_emu_blockIdx;
extern dim3 sg_emu_blockDim, sg_emu_gridDim;
void sg_emu_syncthreads(void);
/* kind: 0 idx, 1 up, 2 down, 3 xor */
unsigned long long sg_emu_shfl(unsigned mask, unsigned long long v, int kind, int arg, int width);
void sg_emu_syncwarp(unsigned mask);
unsigned sg_emu_atomic_add_u32(unsigned *p, unsigned v);
int sg_emu_atomic_add_i32(int *p, int v);
unsigned long long sg_emu_atomic_add_u64(unsigned long long *p, unsigned long long v);
float sg_emu_atomic_add_f32(float *p, float v);
double sg_emu_atomic_add_f64(double *p, double v);
}

#define threadIdx sg_emu_threadIdx
#define blockIdx sg_emu_blockIdx
#define blockDim sg_emu_blockDim
#define gridDim sg_emu_gridDim
#define warpSize 32
#define __syncthreads() sg_emu_syncthreads()
static inline void __syncwarp(unsigned mask = 0xffffffffu) { sg_emu_syncwarp(mask); }

template <class T> static inline T sg_emu_shfl_t(unsigned mask, T v, int kind, int arg, int width) {
    static_assert(sizeof(T) <= 8, "shuffle of a value wider than 8 bytes");
    unsigned long long bits = 0;
    memcpy(&bits, &v, sizeof v);
    bits = sg_emu_shfl(mask, bits, kind, arg, width);
    T r;
    memcpy(&r, &bits, sizeof r);
    return r;
}
template <class T> static inline T __shfl_sync(unsigned mask, T v, int src, int width = 32) {
    return sg_emu_shfl_t(mask, v, 0, src, width);
}
template <class T>
static inline T __shfl_up_sync(unsigned mask, T v, unsigned delta, int width = 32) {
    return sg_emu_shfl_t(mask, v, 1, (int)delta, width);
}
template <class T>
static inline T __shfl_down_sync(unsigned mask, T v, unsigned delta, int width = 32) {
    return sg_emu_shfl_t(mask, v, 2, (int)delta, width);
}
template <class T>
static inline T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = 32) {
    return sg_emu_shfl_t(mask, v, 3, lane_mask, width);
}

static inline unsigned atomicAdd(unsigned *p, unsigned v) { return sg_emu_atomic_add_u32(p, v); }
static inline int atomicAdd(int *p, int v) { return sg_emu_atomic_add_i32(p, v); }
static inline unsigned long long atomicAdd(unsigned long long *p, unsigned long long v) {
    return sg_emu_atomic_add_u64(p, v);
}
static inline float atomicAdd(float *p, float v) { return sg_emu_atomic_add_f32(p, v); }
static inline double atomicAdd(double *p, double v) { return sg_emu_atomic_add_f64(p, v); }

/* round-to-nearest float arithmetic: the host's (-ffp-contract=off: no FMA) */
static inline float __fmul_rn(float a, float b) { return a * b; }
static inline float __fadd_rn(float a, float b) { return a + b; }
static inline float __int_as_float(int i) {
    float f;
    memcpy(&f, &i, 4);
    return f;
}
static inline int __float_as_int(float f) {
    int i;
    memcpy(&i, &f, 4);
    return i;
}
static inline unsigned __float_as_uint(float f) {
    unsigned i;
    memcpy(&i, &f, 4);
    return i;
}
static inline float __uint_as_float(unsigned i) {
    float f;
    memcpy(&f, &i, 4);
    return f;
}
template <class T> static inline T __ldg(const T *p) { return *p; }

namespace sg_emu {
/* sched.cc: checks the configuration (the launch's error, as
 * cudaGetLastError reports it) and queues the grid on the stream. */
void launch_grid(const char *name, dim3 grid, dim3 block, size_t shmem, cudaStream_t st,
                 std::vector<sg_emu_use> uses, std::function<void()> body);

/* A pointer argument is a use of its first element (the emulation knows no
 * kernel's extent: what it records is what is sure to be touched); a
 * pointer to const is read only. */
template <class T> static inline void note(std::vector<sg_emu_use> &, int, const T &) {}
template <class T> static inline void note(std::vector<sg_emu_use> &u, int i, T *const &p) {
    typedef typename std::remove_cv<T>::type E;
    sg_emu_use use;
    use.p = (const void *)p;
    use.bytes = std::is_void<E>::value
                    ? 1
                    : sizeof(typename std::conditional<std::is_void<E>::value, char, E>::type);
    use.write = !std::is_const<T>::value;
    use.arg = i;
    u.push_back(use);
}
template <class Tup, size_t... I>
static inline void note_all(std::vector<sg_emu_use> &u, const Tup &t, std::index_sequence<I...>) {
    (note(u, (int)I, std::get<I>(t)), ...);
}

template <class... P> struct launcher {
    void (*k)(P...);
    const char *name;
    dim3 grid, block;
    size_t shmem;
    cudaStream_t stream;
    /* not a template: the arguments convert to the parameter types at the
     * call, as in a launch (NULL to a pointer, an int to a size_t) */
    void operator()(P... a) const {
        std::tuple<typename std::decay<P>::type...> args(a...);
        std::vector<sg_emu_use> uses;
        note_all(uses, args, std::index_sequence_for<P...>{});
        void (*kk)(P...) = k;
        launch_grid(name, grid, block, shmem, stream, std::move(uses),
                    [kk, args]() { std::apply(kk, args); });
    }
};
template <class... P>
static inline launcher<P...> launch_of(dim3 g, dim3 b, size_t s, cudaStream_t st, const char *name,
                                       void (*k)(P...)) {
    return launcher<P...>{k, name, g, b, s, st};
}
} // namespace sg_emu

#define SG_LAUNCH(grid, block, shmem, stream, ...) \
    sg_emu::launch_of((grid), (block), (shmem), (stream), #__VA_ARGS__, __VA_ARGS__)

#endif
