/* kernels/cuda/cuda_conv_bias.cu - the convolution bias on the GPU (part of
 * the conv group, tests/backend/run_conv.c; kernels/cpu/cpu_conv_bias.c on
 * the CPU): y[n,c,:] += b[c] per plane (cuda_internal.h: grid.y = n*c
 * planes), and db[c] (+)= the sum of dy over n and the plane through the
 * deterministic per-channel reduction of cuda_chan_reduce.cuh (double
 * partials per block, merged in a fixed order). The cuDNN convolutions
 * (cuda_conv.cu) have no bias: the model adds it as a separate op.
 */
#include "kernels/cuda/cuda_chan_reduce.cuh"
#include "kernels/cuda/cuda_internal.h"
#include "kernels/cuda/cuda_reduce.cuh"

__global__ void k_bias_fwd(float *y, const float *b, int c, int hw, size_t planes) {
    SG_PLANE_LOOP(pl, planes) {
        float bc = b[pl % c];
        float *yp = y + pl * hw;
        SG_INPLANE_LOOP(j, hw) yp[j] += bc;
    }
}

__global__ void k_bias_bwd_part(const float *dy, int n, int c, int hw, double *part) {
    __shared__ double sh[32];
    int ch = blockIdx.y;
    double s = 0;
    CHAN_SLICE_BEGIN(i, base, n, c, hw, ch)
    s += dy[i];
    CHAN_SLICE_END
    s = sg_block_sum(s, sh);
    if (threadIdx.x == 0) {
        double *o = part + ((size_t)ch * gridDim.x + blockIdx.x) * 3;
        o[0] = s;
        o[1] = 0;
    }
}

static void sg_cuda_bias_fwd(sg_backend *be, float *y, const float *b, int n, int c, int hw) {
    size_t planes = (size_t)n * c;
    if (!planes || hw <= 0) return;
    int t = sg_cu_plane_threads(hw);
    k_bias_fwd<<<sg_cu_plane_grid(hw, planes, t), t, 0, sg_cu_stream(be)>>>(y, b, c, hw, planes);
    CU_LAUNCH_CHECK("k_bias_fwd");
}

static void sg_cuda_bias_bwd(sg_backend *be, const float *dy, float *db, int n, int c, int hw,
                             int accumulate) {
    sg_cuda *cu = sg_cu(be);
    if (c <= 0) return;
    int splits = chan_splits(cu, c, (long long)n * hw);
    cudaStream_t st = sg_cu_stream(be);
    k_bias_bwd_part<<<dim3(splits, c), SG_CHAN_THREADS, 0, st>>>(dy, n, c, hw, cu->chan_partial);
    CU_LAUNCH_CHECK("k_bias_bwd_part");
    k_chan_sum_merge<<<(c + 127) / 128, 128, 0, st>>>(cu->chan_partial, c, splits, db, NULL,
                                                      accumulate);
    CU_LAUNCH_CHECK("k_chan_sum_merge (bias)");
}

void sg_cuda_fill_conv_bias_ops(sg_ops *o) {
    o->bias_fwd = sg_cuda_bias_fwd;
    o->bias_bwd = sg_cuda_bias_bwd;
}
