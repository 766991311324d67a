/* kernels/cuda/cuda_conv_bias.cu - the convolution bias on the GPU (part of
 * the conv group, tests/backend/run_conv.c; kernels/cpu/cpu_conv_bias.c on
 * the CPU): y[n,c,:] += b[c] per plane (cuda_internal.h: grid.y = n*c
 * planes), and db[c] (+)= the sum of dy over n and the plane through the
 * deterministic per-channel reduction of cuda_chan_reduce.cuh (double
 * partials per block, merged in a fixed order; NHWC with c a multiple of 8
 * by its vector route, same bits). The cuDNN convolutions
 * (cuda_conv.cu) have no bias: the model adds it as a separate op.
 */
#include "kernels/cuda/cuda_chan_reduce.cuh"
#include "kernels/cuda/cuda_internal.h"
#include "kernels/cuda/cuda_reduce.cuh"

/* Per plane in either layout (cuda_internal.h). */
__global__ void k_bias_fwd(float *y, const float *b, int c, int inner, size_t planes, int nhwc) {
    SG_PLANE_LOOP(pl, planes) {
        float *yp = y + pl * inner;
        SG_INPLANE_LOOP(j, inner) yp[j] += b[sg_cu_plane_ch(nhwc, pl, j, c)];
    }
}

/* NCHW: a channel's slice per block; NHWC: column sums (cuda_chan_reduce.cuh). */
__global__ void k_bias_bwd_part(const float *dy, int n, int c, int hw, int nhwc, double *part) {
    __shared__ double sh[SG_CHAN_THREADS];
    int ch = nhwc ? col_channel() : (int)blockIdx.y;
    double s = 0;
    if (nhwc) {
        COL_SLICE_BEGIN(i, n, c, hw, ch)
        s += dy[i];
        COL_SLICE_END
    } else {
        CHAN_SLICE_BEGIN(i, base, n, c, hw, ch)
        s += dy[i];
        CHAN_SLICE_END
    }
    s = chan_block_sum(nhwc, s, sh);
    if (chan_writer(nhwc) && ch < c) {
        double *o = part + ((size_t)ch * gridDim.x + blockIdx.x) * 3;
        o[0] = s;
        o[1] = 0;
    }
}

/* A row of SG_COLV values of dy (the vector route). */
struct colv_dy_row {
    const float *dy;
    float v[SG_COLV];
    __device__ __forceinline__ void load(size_t i) { colv_ld(dy, i, v); }
};

/* k_bias_bwd_part's NHWC vector route (cuda_chan_reduce.cuh): each
 * channel's sum over the same rows in the same order. */
__global__ void k_bias_bwd_part_v(const float *dy, int n, int c, int hw, double *part) {
    __shared__ double sh[SG_CHAN_THREADS];
    double s[SG_COLV];
    SG_UNROLL
    for (int e = 0; e < SG_COLV; e++) s[e] = 0;
    colv_dy_row proto;
    proto.dy = dy;
    colv_rows(n, c, hw, colv_channel(), proto, [&](const colv_dy_row &r) {
        SG_UNROLL
        for (int e = 0; e < SG_COLV; e++) s[e] += r.v[e];
    });
    colv_part_store(part, c, s, NULL, sh);
}

static void sg_cuda_bias_fwd(sg_backend *be, float *y, const float *b, int n, int c, int hw) {
    int nhwc = sg_cu_nhwc(be), inner = sg_cu_inner(nhwc, c, hw);
    size_t planes = sg_cu_planes(nhwc, n, c, hw);
    if (!planes || hw <= 0 || c <= 0) return;
    dim3 t = sg_cu_plane_block(inner);
    SG_LAUNCH(sg_cu_plane_grid(inner, planes, t), t, 0, sg_cu_stream(be), k_bias_fwd)
    (y, b, c, inner, planes, nhwc);
    CU_LAUNCH_CHECK("k_bias_fwd");
}

static void sg_cuda_bias_bwd(sg_backend *be, const float *dy, float *db, int n, int c, int hw,
                             int accumulate) {
    sg_cuda *cu = sg_cu(be);
    if (c <= 0) return;
    int nhwc = sg_cu_nhwc(be);
    int splits = chan_splits_layout(cu, nhwc, c, (long long)n * hw, 2048 / SG_CHAN_THREADS);
    cudaStream_t st = sg_cu_stream(be);
    if (colv_ok(nhwc, c, dy)) {
        SG_LAUNCH(chan_grid(nhwc, c, splits), SG_COLV_THREADS, 0, st, k_bias_bwd_part_v)
        (dy, n, c, hw, cu->chan_partial);
        CU_LAUNCH_CHECK("k_bias_bwd_part_v");
    } else {
        SG_LAUNCH(chan_grid(nhwc, c, splits), SG_CHAN_THREADS, 0, st, k_bias_bwd_part)
        (dy, n, c, hw, nhwc, cu->chan_partial);
        CU_LAUNCH_CHECK("k_bias_bwd_part");
    }
    SG_LAUNCH((c + 127) / 128, 128, 0, st, k_chan_sum_merge)
    (cu->chan_partial, c, splits, db, NULL, accumulate);
    CU_LAUNCH_CHECK("k_chan_sum_merge (bias)");
}

void sg_cuda_fill_conv_bias_ops(sg_ops *o) {
    o->bias_fwd = sg_cuda_bias_fwd;
    o->bias_bwd = sg_cuda_bias_bwd;
}
