/* kernels/cuda/cuda_launch.h - the one way the CUDA backend launches a kernel.
 *
 *   SG_LAUNCH(grid, block, shmem, stream, kernel)(args...)
 *
 * launches `kernel` with the four launch settings, all of them written out
 * (shared memory bytes and stream included). Under nvcc it expands back to
 * exactly kernel<<<grid, block, shmem, stream>>>(args...), so the product
 * build's code is unchanged. It exists so that the .cu files can also be
 * compiled as plain host C++, where <<< >>> does not parse: a build may
 * predefine SG_LAUNCH, as the emulated device of the tests does
 * (tests/cuda_emu, which runs the kernels on the CPU).
 *
 * The kernel comes last, and is variadic, because a template instance such as
 * k_bn_fwd<X, Y> holds commas. No raw <<< outside this header
 * (scripts/check-launches).
 */
#ifndef SG_KERNELS_CUDA_LAUNCH_H
#define SG_KERNELS_CUDA_LAUNCH_H

#ifndef SG_LAUNCH
#define SG_LAUNCH(grid, block, shmem, stream, ...) __VA_ARGS__<<<grid, block, shmem, stream>>>
#endif

#endif
