/* kernels/cuda/cuda_pool.cu - the pooling group on the GPU (the ops of
 * tests/backend/run_pool.c; kernels/cpu/cpu_pool.c on the CPU): max pool
 * 3x3/2 pad 1, global average pool, channel concat and bilinear resize
 * (align_corners=False), forward and backward.
 *
 * maxpool_bwd gathers: each input element sums the gradients of the (at most
 * 2x2) windows whose recorded argmax is that element, so there are no atomics
 * and the result is deterministic. avgpool reduces each plane in double.
 * The resize section below says how its backward matches the CPU's bits.
 */
#include <math.h>

#include "core/log.h"
#include "kernels/cuda/cuda_internal.h"
#include "kernels/cuda/cuda_reduce.cuh"
#include "kernels/formulas/bilinear.h"

__global__ void k_maxpool_fwd(const float *x, float *y, int32_t *idx, int h, int w, int oh, int ow,
                              size_t planes) {
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

static void sg_cuda_maxpool_fwd(sg_backend *be, const float *x, float *y, int32_t *idx, int n,
                                int c, int h, int w, int oh, int ow) {
    SG_CHECK(oh == (h + 2 - 3) / 2 + 1 && ow == (w + 2 - 3) / 2 + 1,
             "CUDA backend: maxpool 3x3/2 pad 1 of %dx%d gives %dx%d, not %dx%d", h, w,
             (h - 1) / 2 + 1, (w - 1) / 2 + 1, oh, ow);
    size_t planes = (size_t)n * c;
    if (!planes) return;
    int t = sg_cu_plane_threads(oh * ow);
    k_maxpool_fwd<<<sg_cu_plane_grid(oh * ow, planes, t), t, 0, sg_cu_stream(be)>>>(x, y, idx, h, w,
                                                                                    oh, ow, planes);
    CU_LAUNCH_CHECK("k_maxpool_fwd");
}

__global__ void k_maxpool_bwd(const float *dy, const int32_t *idx, float *dx, int h, int w, int oh,
                              int ow, size_t planes) {
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

static void sg_cuda_maxpool_bwd(sg_backend *be, const float *dy, const int32_t *idx, float *dx,
                                int n, int c, int h, int w, int oh, int ow) {
    size_t planes = (size_t)n * c;
    if (!planes) return;
    int t = sg_cu_plane_threads(h * w);
    k_maxpool_bwd<<<sg_cu_plane_grid(h * w, planes, t), t, 0, sg_cu_stream(be)>>>(dy, idx, dx, h, w,
                                                                                  oh, ow, planes);
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

static void sg_cuda_avgpool_fwd(sg_backend *be, const float *x, float *y, int n, int c, int hw) {
    size_t planes = (size_t)n * c;
    if (!planes) return;
    SG_CHECK(planes <= 0x7fffffffu && hw > 0, "CUDA backend: avgpool of %zu planes of %d", planes,
             hw);
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

static void sg_cuda_avgpool_bwd(sg_backend *be, const float *dy, float *dx, int n, int c, int hw,
                                int accumulate) {
    size_t planes = (size_t)n * c;
    if (!planes || hw <= 0) return;
    int t = sg_cu_plane_threads(hw);
    k_avgpool_bwd<<<sg_cu_plane_grid(hw, planes, t), t, 0, sg_cu_stream(be)>>>(dy, dx, hw, planes,
                                                                               accumulate);
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
            if (!backward) dst[d_off + j] = src[s_off + j];
            else /* src = dy (dst layout), dst = dsrc (src layout) */
                dst[s_off + j] = acc ? dst[s_off + j] + src[d_off + j] : src[d_off + j];
        }
    }
}

static void sg_cuda_concat_fwd(sg_backend *be, const float *src, float *dst, int n, int c_src,
                               int c_dst, int c_off, int hw) {
    SG_CHECK(c_off >= 0 && c_off + c_src <= c_dst,
             "CUDA backend: concat of %d channels at offset %d into %d", c_src, c_off, c_dst);
    size_t planes = (size_t)n * c_src;
    if (!planes || hw <= 0) return;
    int t = sg_cu_plane_threads(hw);
    k_concat<<<sg_cu_plane_grid(hw, planes, t), t, 0, sg_cu_stream(be)>>>(src, dst, c_src, c_dst,
                                                                          c_off, hw, planes, 0, 0);
    CU_LAUNCH_CHECK("k_concat (forward)");
}

static void sg_cuda_concat_bwd(sg_backend *be, const float *dy, float *dsrc, int n, int c_src,
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

/* ---- bilinear resize ----
 *
 * align_corners=False, exactly PyTorch's mapping (upsample_bilinear2d
 * without given scale factors). The taps, the weights and the forward value
 * are kernels/formulas/bilinear.h, shared with the CPU backend:
 *   scale = in/out (float), src = scale*(dst+0.5) - 0.5, clamped at 0,
 *   i0 = (int)src at most in-1, i1 = i0 + (i0 < in-1), l1 = src - i0 in
 *   [0, 1], l0 = 1 - l1.
 * Backward is a gather (no atomics, deterministic): each input element finds
 * the output rows/columns whose taps include it, from the inverse of the
 * mapping, and adds their shares in the CPU backend's scatter order, so the
 * result is the CPU's bit for bit.
 *
 * Before formulas/bilinear.h this code (then cuda_resize.cu) had its own
 * taps: no i0 <= in-1 and no l1 in [0, 1] guard (the CPU and PyTorch's CPU
 * kernel have both; they never fire for real sizes), and nvcc fused
 * scale*(dst+0.5) - 0.5 and the weighted sums into FMAs, so the source
 * position, hence the weights (and, where src lands within an ulp of an
 * integer, the taps themselves), could differ from the CPU's. The backward
 * summed wy * sum(wx * dy) per row, with the two weights of an edge input
 * pre-added, rather than the CPU's (dy*wy)*wx per tap.
 */

/* Outputs that may read input i: src(dst) in [i-1, i+1), widened by one on
 * each side against float rounding (the taps decide exactly). Outputs left
 * out only ever read i with weight 0 (src clamped at 0 reads input 1 with
 * l1 = 0), which adds nothing. */
__device__ __forceinline__ void out_range(int i, float scale, int out, int *lo, int *hi) {
    int a = (int)floorf(((float)i - 0.5f) / scale - 0.5f) - 1;
    int b = (int)ceilf(((float)i + 1.5f) / scale - 0.5f) + 1;
    *lo = a < 0 ? 0 : a;
    *hi = b > out - 1 ? out - 1 : b;
}

__global__ void k_resize_fwd(const float *x, float *y, int h, int w, int oh, int ow, float sh,
                             float sw, size_t planes) {
    int plane_out = oh * ow;
    SG_PLANE_LOOP(pl, planes) {
        const float *xp = x + pl * (size_t)h * w;
        float *yp = y + pl * (size_t)plane_out;
        SG_INPLANE_LOOP(j, plane_out) {
            int ox = j % ow, oy = j / ow;
            sg_bilinear_tap ty = sg_bilinear_tap_of(oy, sh, h), tx = sg_bilinear_tap_of(ox, sw, w);
            const float *r0 = xp + (size_t)ty.i0 * w, *r1 = xp + (size_t)ty.i1 * w;
            yp[j] = sg_bilinear_value(ty, tx, r0[tx.i0], r0[tx.i1], r1[tx.i0], r1[tx.i1]);
        }
    }
}

__global__ void k_resize_bwd(const float *dy, float *dx, int h, int w, int oh, int ow, float sh,
                             float sw, size_t planes, int acc) {
    int plane_in = h * w;
    SG_PLANE_LOOP(pl, planes) {
        const float *dyp = dy + pl * (size_t)oh * ow;
        float *dxp = dx + pl * (size_t)plane_in;
        SG_INPLANE_LOOP(j, plane_in) {
            int ix = j % w, iy = j / w;
            int y0, y1, x0, x1;
            out_range(iy, sh, oh, &y0, &y1);
            out_range(ix, sw, ow, &x0, &x1);
            /* the CPU's order: outputs by row, then column; per output the
             * taps (y0,x0), (y0,x1), (y1,x0), (y1,x1); starting from dx
             * (accumulate) or 0 */
            float g = acc ? dxp[j] : 0.0f;
            for (int oy = y0; oy <= y1; oy++) {
                sg_bilinear_tap ty = sg_bilinear_tap_of(oy, sh, h);
                int u0 = ty.i0 == iy, u1 = ty.i1 == iy;
                if (!u0 && !u1) continue;
                for (int ox = x0; ox <= x1; ox++) {
                    sg_bilinear_tap tx = sg_bilinear_tap_of(ox, sw, w);
                    int v0 = tx.i0 == ix, v1 = tx.i1 == ix;
                    if (!v0 && !v1) continue;
                    float go = dyp[oy * ow + ox];
                    if (u0 && v0) g = sg_fadd(g, sg_bilinear_share(go, ty.l0, tx.l0));
                    if (u0 && v1) g = sg_fadd(g, sg_bilinear_share(go, ty.l0, tx.l1));
                    if (u1 && v0) g = sg_fadd(g, sg_bilinear_share(go, ty.l1, tx.l0));
                    if (u1 && v1) g = sg_fadd(g, sg_bilinear_share(go, ty.l1, tx.l1));
                }
            }
            dxp[j] = g;
        }
    }
}

static void sg_cuda_resize_fwd(sg_backend *be, const float *x, float *y, int n, int c, int h, int w,
                               int oh, int ow) {
    SG_CHECK(h > 0 && w > 0 && oh > 0 && ow > 0, "CUDA backend: resize %dx%d -> %dx%d", h, w, oh,
             ow);
    size_t planes = (size_t)n * c;
    if (!planes) return;
    int t = sg_cu_plane_threads(oh * ow);
    k_resize_fwd<<<sg_cu_plane_grid(oh * ow, planes, t), t, 0, sg_cu_stream(be)>>>(
        x, y, h, w, oh, ow, sg_bilinear_scale(h, oh), sg_bilinear_scale(w, ow), planes);
    CU_LAUNCH_CHECK("k_resize_fwd");
}

static void sg_cuda_resize_bwd(sg_backend *be, const float *dy, float *dx, int n, int c, int h,
                               int w, int oh, int ow, int accumulate) {
    SG_CHECK(h > 0 && w > 0 && oh > 0 && ow > 0, "CUDA backend: resize_bwd %dx%d <- %dx%d", h, w,
             oh, ow);
    size_t planes = (size_t)n * c;
    if (!planes) return;
    int t = sg_cu_plane_threads(h * w);
    k_resize_bwd<<<sg_cu_plane_grid(h * w, planes, t), t, 0, sg_cu_stream(be)>>>(
        dy, dx, h, w, oh, ow, sg_bilinear_scale(h, oh), sg_bilinear_scale(w, ow), planes,
        accumulate);
    CU_LAUNCH_CHECK("k_resize_bwd");
}

void sg_cuda_fill_pool_ops(sg_ops *o) {
    o->maxpool_fwd = sg_cuda_maxpool_fwd;
    o->maxpool_bwd = sg_cuda_maxpool_bwd;
    o->avgpool_fwd = sg_cuda_avgpool_fwd;
    o->avgpool_bwd = sg_cuda_avgpool_bwd;
    o->resize_fwd = sg_cuda_resize_fwd;
    o->resize_bwd = sg_cuda_resize_bwd;
    o->concat_fwd = sg_cuda_concat_fwd;
    o->concat_bwd = sg_cuda_concat_bwd;
}
