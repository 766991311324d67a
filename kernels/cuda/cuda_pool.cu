/* kernels/cuda/cuda_pool.cu - max pool 3x3/2 pad 1, global average pool and
 * channel concat (forward and backward).
 *
 * maxpool_bwd gathers: each input element sums the gradients of the (at most
 * 2x2) windows whose recorded argmax is that element, so there are no atomics
 * and the result is deterministic. avgpool reduces each plane in double.
 */
#include "core/log.h"
#include "kernels/cuda/cuda_internal.h"
#include "kernels/cuda/cuda_reduce.cuh"

__global__ void k_maxpool_fwd(const float *x, float *y, int32_t *idx, int h, int w, int oh,
                              int ow, size_t planes) {
    int plane_out = oh * ow;
    SG_PLANE_LOOP(pl, planes) {
        const float *xp = x + pl * (size_t)h * w;
        SG_INPLANE_LOOP(j, plane_out) {
            int ox = j % ow, oy = j / ow;
            float best = -INFINITY;
            int best_i = -1;
            for (int dy = 0; dy < 3; dy++) {
                int iy = oy * 2 - 1 + dy;
                if (iy < 0 || iy >= h) continue;
                for (int dx = 0; dx < 3; dx++) {
                    int ix = ox * 2 - 1 + dx;
                    if (ix < 0 || ix >= w) continue;
                    float v = xp[iy * w + ix];
                    /* first max wins; NaN propagates (PyTorch's rule) */
                    if (best_i < 0 || v > best || isnan(v)) {
                        best = v;
                        best_i = iy * w + ix;
                    }
                }
            }
            y[pl * plane_out + j] = best;
            idx[pl * plane_out + j] = best_i;
        }
    }
}

void sg_cuda_maxpool_fwd(sg_backend *be, const float *x, float *y, int32_t *idx, int n, int c,
                         int h, int w, int oh, int ow) {
    SG_CHECK(oh == (h + 2 - 3) / 2 + 1 && ow == (w + 2 - 3) / 2 + 1,
             "CUDA backend: maxpool 3x3/2 pad 1 of %dx%d gives %dx%d, not %dx%d", h, w,
             (h - 1) / 2 + 1, (w - 1) / 2 + 1, oh, ow);
    size_t planes = (size_t)n * c;
    if (!planes) return;
    int t = sg_cu_plane_threads(oh * ow);
    k_maxpool_fwd<<<sg_cu_plane_grid(oh * ow, planes, t), t, 0, sg_cu_stream(be)>>>(
        x, y, idx, h, w, oh, ow, planes);
    CU_LAUNCH_CHECK("k_maxpool_fwd");
}

__global__ void k_maxpool_bwd(const float *dy, const int32_t *idx, float *dx, int h, int w,
                              int oh, int ow, size_t planes) {
    int plane_in = h * w;
    SG_PLANE_LOOP(pl, planes) {
        const float *dyp = dy + pl * (size_t)oh * ow;
        const int32_t *ip = idx + pl * (size_t)oh * ow;
        SG_INPLANE_LOOP(me, plane_in) {
            int ix = me % w, iy = me / w;
            /* windows covering iy: oy*2-1 <= iy <= oy*2+1 */
            int oy0 = iy / 2, oy1 = (iy + 1) / 2;
            int ox0 = ix / 2, ox1 = (ix + 1) / 2;
            if (oy1 >= oh) oy1 = oh - 1;
            if (ox1 >= ow) ox1 = ow - 1;
            float g = 0.0f;
            for (int oy = oy0; oy <= oy1; oy++)
                for (int ox = ox0; ox <= ox1; ox++)
                    if (ip[oy * ow + ox] == me) g += dyp[oy * ow + ox];
            dx[pl * plane_in + me] = g;
        }
    }
}

void sg_cuda_maxpool_bwd(sg_backend *be, const float *dy, const int32_t *idx, float *dx, int n,
                         int c, int h, int w, int oh, int ow) {
    size_t planes = (size_t)n * c;
    if (!planes) return;
    int t = sg_cu_plane_threads(h * w);
    k_maxpool_bwd<<<sg_cu_plane_grid(h * w, planes, t), t, 0, sg_cu_stream(be)>>>(
        dy, idx, dx, h, w, oh, ow, planes);
    CU_LAUNCH_CHECK("k_maxpool_bwd");
}

/* One block per (n, c) plane. */
__global__ void k_avgpool_fwd(const float *x, float *y, int hw) {
    __shared__ double sh[32];
    const float *p = x + (size_t)blockIdx.x * hw;
    double s = 0;
    for (int j = threadIdx.x; j < hw; j += blockDim.x) s += p[j];
    s = sg_block_sum(s, sh);
    if (threadIdx.x == 0) y[blockIdx.x] = (float)(s / hw);
}

void sg_cuda_avgpool_fwd(sg_backend *be, const float *x, float *y, int n, int c, int hw) {
    size_t planes = (size_t)n * c;
    if (!planes) return;
    SG_CHECK(planes <= 0x7fffffffu && hw > 0, "CUDA backend: avgpool of %zu planes of %d",
             planes, hw);
    k_avgpool_fwd<<<(unsigned)planes, SG_CUDA_RED_THREADS, 0, sg_cu_stream(be)>>>(x, y, hw);
    CU_LAUNCH_CHECK("k_avgpool_fwd");
}

__global__ void k_avgpool_bwd(const float *dy, float *dx, int hw, size_t planes, int acc) {
    SG_PLANE_LOOP(pl, planes) {
        float g = (float)((double)dy[pl] / hw); /* as the CPU backend and the reference */
        float *dxp = dx + pl * (size_t)hw;
        SG_INPLANE_LOOP(j, hw) dxp[j] = acc ? dxp[j] + g : g;
    }
}

void sg_cuda_avgpool_bwd(sg_backend *be, const float *dy, float *dx, int n, int c, int hw,
                         int accumulate) {
    size_t planes = (size_t)n * c;
    if (!planes || hw <= 0) return;
    int t = sg_cu_plane_threads(hw);
    k_avgpool_bwd<<<sg_cu_plane_grid(hw, planes, t), t, 0, sg_cu_stream(be)>>>(
        dy, dx, hw, planes, accumulate);
    CU_LAUNCH_CHECK("k_avgpool_bwd");
}

/* Planes of src [n, c_src, hw]; dst is [n, c_dst, hw] at channel offset c_off. */
__global__ void k_concat(const float *src, float *dst, int c_src, int c_dst, int c_off, int hw,
                         size_t planes, int backward, int acc) {
    SG_PLANE_LOOP(pl, planes) {
        size_t img = pl / c_src;
        int ch = (int)(pl % c_src);
        size_t s_off = pl * hw, d_off = (img * c_dst + c_off + ch) * hw;
        SG_INPLANE_LOOP(j, hw) {
            if (!backward)
                dst[d_off + j] = src[s_off + j];
            else /* src = dy (dst layout), dst = dsrc (src layout) */
                dst[s_off + j] = acc ? dst[s_off + j] + src[d_off + j] : src[d_off + j];
        }
    }
}

void sg_cuda_concat_fwd(sg_backend *be, const float *src, float *dst, int n, int c_src,
                        int c_dst, int c_off, int hw) {
    SG_CHECK(c_off >= 0 && c_off + c_src <= c_dst,
             "CUDA backend: concat of %d channels at offset %d into %d", c_src, c_off, c_dst);
    size_t planes = (size_t)n * c_src;
    if (!planes || hw <= 0) return;
    int t = sg_cu_plane_threads(hw);
    k_concat<<<sg_cu_plane_grid(hw, planes, t), t, 0, sg_cu_stream(be)>>>(
        src, dst, c_src, c_dst, c_off, hw, planes, 0, 0);
    CU_LAUNCH_CHECK("k_concat (forward)");
}

void sg_cuda_concat_bwd(sg_backend *be, const float *dy, float *dsrc, int n, int c_src,
                        int c_dst, int c_off, int hw, int accumulate) {
    SG_CHECK(c_off >= 0 && c_off + c_src <= c_dst,
             "CUDA backend: concat_bwd of %d channels at offset %d of %d", c_src, c_off, c_dst);
    size_t planes = (size_t)n * c_src;
    if (!planes || hw <= 0) return;
    int t = sg_cu_plane_threads(hw);
    k_concat<<<sg_cu_plane_grid(hw, planes, t), t, 0, sg_cu_stream(be)>>>(
        dy, dsrc, c_src, c_dst, c_off, hw, planes, 1, accumulate);
    CU_LAUNCH_CHECK("k_concat (backward)");
}
