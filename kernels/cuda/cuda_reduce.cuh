/* kernels/cuda/cuda_reduce.cuh - block-level reductions shared by the kernels.
 *
 * Reductions are deterministic: each block reduces a fixed slice in a fixed
 * order (warp shuffles, then one value per warp through shared memory), and
 * cross-block results go through per-block partials summed by one block, never
 * through floating-point atomics, so the same input gives the same bits on
 * every run. Requires blockDim.x to be a multiple of 32 and at most 1024.
 */
#ifndef SG_KERNELS_CUDA_REDUCE_CUH
#define SG_KERNELS_CUDA_REDUCE_CUH

__device__ __forceinline__ double sg_warp_sum(double v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
    return v;
}

/* Sum of v over the block; the result is valid in thread 0. `sh` holds 32 doubles. */
__device__ __forceinline__ double sg_block_sum(double v, double *sh) {
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    v = sg_warp_sum(v);
    __syncthreads(); /* sh may still be read by a previous call */
    if (lane == 0) sh[warp] = v;
    __syncthreads();
    int nwarps = (blockDim.x + 31) >> 5;
    v = (threadIdx.x < nwarps) ? sh[threadIdx.x] : 0.0;
    if (warp == 0) v = sg_warp_sum(v);
    return v;
}

/* Sum of v over the block, broadcast to every thread. */
__device__ __forceinline__ double sg_block_sum_all(double v, double *sh) {
    v = sg_block_sum(v, sh);
    __syncthreads();
    if (threadIdx.x == 0) sh[0] = v;
    __syncthreads();
    double r = sh[0];
    __syncthreads();
    return r;
}

#endif
