/* kernels/cuda/cuda_pool.cu - the pooling group on the GPU (the ops of
 * tests/backend/run_pool.c; kernels/cpu/cpu_pool.c on the CPU): max pool
 * 3x3/2 pad 1, global average pool, channel concat and bilinear resize
 * (align_corners=False), forward and backward.
 *
 * maxpool_bwd gathers: each input element sums the gradients of the (at most
 * 2x2) windows whose recorded argmax is that element, so there are no atomics
 * and the result is deterministic. avgpool reduces each plane in double.
 * The resize section below says how its backward matches the CPU's bits.
 * Either activation layout (be->layout): the per-plane kernels walk NHWC
 * pixels where NCHW walks channel planes (cuda_internal.h), with the same
 * per-element arithmetic; NHWC's avgpool is a column sum per image
 * (cuda_chan_reduce.cuh); maxpool's indices (plane positions) are stored
 * in the activation layout, as y is (backend.h): under NHWC neighbouring
 * threads store neighbouring indices.
 */
#include <math.h>

#include "core/log.h"
#include "kernels/cuda/cuda_chan_reduce.cuh"
#include "kernels/cuda/cuda_internal.h"
#include "kernels/cuda/cuda_reduce.cuh"
#include "kernels/formulas/bf16.h"
#include "kernels/formulas/bilinear.h"

/* Per output plane in either layout (cuda_internal.h); idx is stored as y
 * is (backend.h), with plane positions. */
__global__ void k_maxpool_fwd(const float *x, float *y, int32_t *idx, int c, int h, int w, int oh,
                              int ow, int inner, size_t planes, int nhwc) {
    int plane_out = oh * ow;
    SG_PLANE_LOOP(pl, planes) {
        SG_INPLANE_LOOP(j, inner) {
            size_t img;
            int ch, q;
            sg_cu_plane_elem(nhwc, pl, j, c, plane_out, &img, &ch, &q);
            /* xp[k * xs]: the input plane's pixel k */
            const float *xp = x + sg_cu_act_at(nhwc, c, h * w, img, ch, 0);
            size_t xs = nhwc ? (size_t)c : 1;
            int ox = q % ow, oy = q / ow;
            float best = -INFINITY;
            int best_i = -1;
            for (int dy = 0; dy < 3; dy++) {
                int iy = oy * 2 - 1 + dy;
                if (iy < 0 || iy >= h) continue;
                for (int dx = 0; dx < 3; dx++) {
                    int ix = ox * 2 - 1 + dx;
                    if (ix < 0 || ix >= w) continue;
                    float v = xp[(size_t)(iy * w + ix) * xs];
                    /* first max wins; NaN propagates (PyTorch's rule) */
                    if (best_i < 0 || v > best || isnan(v)) {
                        best = v;
                        best_i = iy * w + ix;
                    }
                }
            }
            y[pl * inner + j] = best;
            idx[pl * inner + j] = best_i;
        }
    }
}

static void sg_cuda_maxpool_fwd(sg_backend *be, const float *x, float *y, int32_t *idx, int n,
                                int c, int h, int w, int oh, int ow) {
    SG_CHECK(oh == (h + 2 - 3) / 2 + 1 && ow == (w + 2 - 3) / 2 + 1,
             "CUDA backend: maxpool 3x3/2 pad 1 of %dx%d gives %dx%d, not %dx%d", h, w,
             (h - 1) / 2 + 1, (w - 1) / 2 + 1, oh, ow);
    int nhwc = sg_cu_nhwc(be), inner = sg_cu_inner(nhwc, c, oh * ow);
    size_t planes = sg_cu_planes(nhwc, n, c, oh * ow);
    if (!planes || !inner) return;
    dim3 t = sg_cu_plane_block(inner);
    SG_LAUNCH(sg_cu_plane_grid(inner, planes, t), t, 0, sg_cu_stream(be), k_maxpool_fwd)
    (x, y, idx, c, h, w, oh, ow, inner, planes, nhwc);
    CU_LAUNCH_CHECK("k_maxpool_fwd");
}

/* Per input plane in either layout; gathers in the order the CPU scatters
 * (outputs by row, then column), so the same bits. */
__global__ void k_maxpool_bwd(const float *dy, const int32_t *idx, float *dx, int c, int h, int w,
                              int oh, int ow, int inner, size_t planes, int nhwc) {
    int plane_in = h * w;
    SG_PLANE_LOOP(pl, planes) {
        SG_INPLANE_LOOP(j, inner) {
            size_t img;
            int ch, me;
            sg_cu_plane_elem(nhwc, pl, j, c, plane_in, &img, &ch, &me);
            const float *dyp = dy + sg_cu_act_at(nhwc, c, oh * ow, img, ch, 0);
            size_t ys = nhwc ? (size_t)c : 1;
            const int32_t *ip = idx + sg_cu_act_at(nhwc, c, oh * ow, img, ch, 0);
            int ix = me % w, iy = me / w;
            /* windows covering iy: oy*2-1 <= iy <= oy*2+1 */
            int oy0 = iy / 2, oy1 = (iy + 1) / 2;
            int ox0 = ix / 2, ox1 = (ix + 1) / 2;
            if (oy1 >= oh) oy1 = oh - 1;
            if (ox1 >= ow) ox1 = ow - 1;
            float g = 0.0f;
            for (int oy = oy0; oy <= oy1; oy++)
                for (int ox = ox0; ox <= ox1; ox++)
                    if (ip[(size_t)(oy * ow + ox) * ys] == me)
                        g += dyp[(size_t)(oy * ow + ox) * ys];
            dx[pl * inner + j] = g;
        }
    }
}

static void sg_cuda_maxpool_bwd(sg_backend *be, const float *dy, const int32_t *idx, float *dx,
                                int n, int c, int h, int w, int oh, int ow) {
    int nhwc = sg_cu_nhwc(be), inner = sg_cu_inner(nhwc, c, h * w);
    size_t planes = sg_cu_planes(nhwc, n, c, h * w);
    if (!planes || !inner) return;
    dim3 t = sg_cu_plane_block(inner);
    SG_LAUNCH(sg_cu_plane_grid(inner, planes, t), t, 0, sg_cu_stream(be), k_maxpool_bwd)
    (dy, idx, dx, c, h, w, oh, ow, inner, planes, nhwc);
    CU_LAUNCH_CHECK("k_maxpool_bwd");
}

__device__ __forceinline__ float pool_ld(const float *p, size_t i) { return p[i]; }
__device__ __forceinline__ float pool_ld(const uint16_t *p, size_t i) {
    return sg_bf16_to_f32(p[i]);
}

/* One block per (n, c) plane; X: float, or uint16_t bf16 bits. */
template <typename X> __global__ void k_avgpool_fwd(const X *x, float *y, int hw) {
    __shared__ double sh[32];
    const X *p = x + (size_t)blockIdx.x * hw;
    double s = 0;
    for (int j = threadIdx.x; j < hw; j += blockDim.x) s += pool_ld(p, j);
    s = sg_block_sum(s, sh);
    if (threadIdx.x == 0) y[blockIdx.x] = (float)(s / hw);
}

/* NHWC: one block per (image, SG_COL_W channels), a column sum
 * (cuda_chan_reduce.cuh) over the image's pixels in double. */
template <typename X> __global__ void k_avgpool_fwd_nhwc(const X *x, float *y, int c, int hw) {
    __shared__ double sh[SG_CHAN_THREADS];
    int ch = (int)blockIdx.y * SG_COL_W + (int)(threadIdx.x % SG_COL_W);
    size_t img = blockIdx.x;
    double s = 0;
    if (ch < c)
        for (int p = threadIdx.x / SG_COL_W; p < hw; p += SG_COL_ROWS)
            s += pool_ld(x, (img * (size_t)hw + (size_t)p) * (size_t)c + (size_t)ch);
    s = col_sum(s, sh);
    if (threadIdx.x < SG_COL_W && ch < c) y[img * (size_t)c + (size_t)ch] = (float)(s / hw);
}

template <typename X>
static void avgpool_fwd(sg_backend *be, const X *x, float *y, int n, int c, int hw) {
    size_t planes = (size_t)n * c;
    if (!planes) return;
    if (sg_cu_nhwc(be) && c > 1 && hw > 1) {
        SG_CHECK(n <= 0x7fffffff, "CUDA backend: avgpool of %d images", n);
        SG_LAUNCH(dim3((unsigned)n, (unsigned)((c + SG_COL_W - 1) / SG_COL_W)), SG_CHAN_THREADS, 0,
                  sg_cu_stream(be), k_avgpool_fwd_nhwc<X>)
        (x, y, c, hw);
        CU_LAUNCH_CHECK("k_avgpool_fwd_nhwc");
        return;
    }
    SG_CHECK(planes <= 0x7fffffffu && hw > 0, "CUDA backend: avgpool of %zu planes of %d", planes,
             hw);
    SG_LAUNCH((unsigned)planes, SG_CUDA_RED_THREADS, 0, sg_cu_stream(be), k_avgpool_fwd<X>)
    (x, y, hw);
    CU_LAUNCH_CHECK("k_avgpool_fwd");
}

static void sg_cuda_avgpool_fwd(sg_backend *be, const void *x, int x_dt, float *y, int n, int c,
                                int hw) {
    if (sg_cuda_act_dt(x_dt, "avgpool_fwd") == SG_ACT_BF16)
        avgpool_fwd(be, (const uint16_t *)x, y, n, c, hw);
    else avgpool_fwd(be, (const float *)x, y, n, c, hw);
}

/* Per plane in either layout; dy is [n, c]. */
__global__ void k_avgpool_bwd(const float *dy, float *dx, int c, int hw, int inner, size_t planes,
                              int nhwc, int acc) {
    SG_PLANE_LOOP(pl, planes) {
        const float *dyp = nhwc ? dy + pl / (size_t)hw * (size_t)c : dy + pl;
        float *dxp = dx + pl * (size_t)inner;
        SG_INPLANE_LOOP(j, inner) {
            float g = (float)((double)dyp[nhwc ? j : 0] / hw); /* as the CPU and the reference */
            dxp[j] = acc ? dxp[j] + g : g;
        }
    }
}

static void sg_cuda_avgpool_bwd(sg_backend *be, const float *dy, float *dx, int n, int c, int hw,
                                int accumulate) {
    int nhwc = sg_cu_nhwc(be), inner = sg_cu_inner(nhwc, c, hw);
    size_t planes = sg_cu_planes(nhwc, n, c, hw);
    if (!planes || hw <= 0 || c <= 0) return;
    dim3 t = sg_cu_plane_block(inner);
    SG_LAUNCH(sg_cu_plane_grid(inner, planes, t), t, 0, sg_cu_stream(be), k_avgpool_bwd)
    (dy, dx, c, hw, inner, planes, nhwc, accumulate);
    CU_LAUNCH_CHECK("k_avgpool_bwd");
}

/* Planes of src [n, c_src, hw]; dst is [n, c_dst, hw] at channel offset c_off. */
/* Per plane of src in either layout: NCHW planes are src's channel planes,
 * NHWC ones its pixels (c_src channels, at c_off of dst's c_dst). */
__global__ void k_concat(const float *src, float *dst, int c_src, int c_dst, int c_off, int hw,
                         int inner, size_t planes, int nhwc, int backward, int acc) {
    SG_PLANE_LOOP(pl, planes) {
        size_t s_off = pl * inner, d_off;
        if (nhwc) d_off = pl * (size_t)c_dst + (size_t)c_off;
        else d_off = (pl / c_src * c_dst + c_off + pl % c_src) * (size_t)hw;
        SG_INPLANE_LOOP(j, inner) {
            if (!backward) dst[d_off + j] = src[s_off + j];
            else /* src = dy (dst layout), dst = dsrc (src layout) */
                dst[s_off + j] = acc ? dst[s_off + j] + src[d_off + j] : src[d_off + j];
        }
    }
}

__device__ __forceinline__ void pool_st(float *p, size_t i, float v) { p[i] = v; }
__device__ __forceinline__ void pool_st(uint16_t *p, size_t i, float v) { p[i] = sg_bf16_bits(v); }

/* The forward copy with the source's and the destination's storage (S, D:
 * float or uint16_t bf16 bits): rounded (RNE) into bf16, widened out of it. */
template <typename S, typename D>
__global__ void k_concat_dt(const S *src, D *dst, int c_src, int c_dst, int c_off, int hw,
                            int inner, size_t planes, int nhwc) {
    SG_PLANE_LOOP(pl, planes) {
        size_t s_off = pl * inner, d_off;
        if (nhwc) d_off = pl * (size_t)c_dst + (size_t)c_off;
        else d_off = (pl / c_src * c_dst + c_off + pl % c_src) * (size_t)hw;
        SG_INPLANE_LOOP(j, inner) pool_st(dst, d_off + j, pool_ld(src, s_off + j));
    }
}

template <typename S, typename D>
static void concat_fwd(sg_backend *be, const void *src, void *dst, int c_src, int c_dst, int c_off,
                       int hw, int inner, size_t planes, int nhwc) {
    dim3 t = sg_cu_plane_block(inner);
    SG_LAUNCH(sg_cu_plane_grid(inner, planes, t), t, 0, sg_cu_stream(be), k_concat_dt<S, D>)
    ((const S *)src, (D *)dst, c_src, c_dst, c_off, hw, inner, planes, nhwc);
    CU_LAUNCH_CHECK("k_concat_dt (forward)");
}

static void sg_cuda_concat_fwd(sg_backend *be, const void *src, int src_dt, void *dst, int dst_dt,
                               int n, int c_src, int c_dst, int c_off, int hw) {
    SG_CHECK(c_off >= 0 && c_off + c_src <= c_dst,
             "CUDA backend: concat of %d channels at offset %d into %d", c_src, c_off, c_dst);
    int sb = sg_cuda_act_dt(src_dt, "concat_fwd (src_dt)") == SG_ACT_BF16;
    int db = sg_cuda_act_dt(dst_dt, "concat_fwd (dst_dt)") == SG_ACT_BF16;
    int nhwc = sg_cu_nhwc(be), inner = sg_cu_inner(nhwc, c_src, hw);
    size_t planes = sg_cu_planes(nhwc, n, c_src, hw);
    if (!planes || hw <= 0 || c_src <= 0) return;
    if (!sb && !db) {
        dim3 t = sg_cu_plane_block(inner);
        SG_LAUNCH(sg_cu_plane_grid(inner, planes, t), t, 0, sg_cu_stream(be), k_concat)
        ((const float *)src, (float *)dst, c_src, c_dst, c_off, hw, inner, planes, nhwc, 0, 0);
        CU_LAUNCH_CHECK("k_concat (forward)");
    } else if (sb && db) {
        concat_fwd<uint16_t, uint16_t>(be, src, dst, c_src, c_dst, c_off, hw, inner, planes, nhwc);
    } else if (sb) {
        concat_fwd<uint16_t, float>(be, src, dst, c_src, c_dst, c_off, hw, inner, planes, nhwc);
    } else {
        concat_fwd<float, uint16_t>(be, src, dst, c_src, c_dst, c_off, hw, inner, planes, nhwc);
    }
}

static void sg_cuda_concat_bwd(sg_backend *be, const float *dy, float *dsrc, int n, int c_src,
                               int c_dst, int c_off, int hw, int accumulate) {
    SG_CHECK(c_off >= 0 && c_off + c_src <= c_dst,
             "CUDA backend: concat_bwd of %d channels at offset %d of %d", c_src, c_off, c_dst);
    int nhwc = sg_cu_nhwc(be), inner = sg_cu_inner(nhwc, c_src, hw);
    size_t planes = sg_cu_planes(nhwc, n, c_src, hw);
    if (!planes || hw <= 0 || c_src <= 0) return;
    dim3 t = sg_cu_plane_block(inner);
    SG_LAUNCH(sg_cu_plane_grid(inner, planes, t), t, 0, sg_cu_stream(be), k_concat)
    (dy, dsrc, c_src, c_dst, c_off, hw, inner, planes, nhwc, 1, accumulate);
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

/* Per output plane in either layout (cuda_internal.h). */
__global__ void k_resize_fwd(const float *x, float *y, int c, int h, int w, int oh, int ow,
                             float sh, float sw, int inner, size_t planes, int nhwc) {
    int plane_out = oh * ow;
    size_t xs = nhwc ? (size_t)c : 1; /* between an input plane's pixels */
    SG_PLANE_LOOP(pl, planes) {
        float *yp = y + pl * (size_t)inner;
        SG_INPLANE_LOOP(j, inner) {
            size_t img;
            int ch, q;
            sg_cu_plane_elem(nhwc, pl, j, c, plane_out, &img, &ch, &q);
            const float *xp = x + sg_cu_act_at(nhwc, c, h * w, img, ch, 0);
            int ox = q % ow, oy = q / ow;
            sg_bilinear_tap ty = sg_bilinear_tap_of(oy, sh, h), tx = sg_bilinear_tap_of(ox, sw, w);
            const float *r0 = xp + (size_t)ty.i0 * w * xs, *r1 = xp + (size_t)ty.i1 * w * xs;
            yp[j] = sg_bilinear_value(ty, tx, r0[tx.i0 * xs], r0[tx.i1 * xs], r1[tx.i0 * xs],
                                      r1[tx.i1 * xs]);
        }
    }
}

/* Per input plane in either layout. */
__global__ void k_resize_bwd(const float *dy, float *dx, int c, int h, int w, int oh, int ow,
                             float sh, float sw, int inner, size_t planes, int nhwc, int acc) {
    int plane_in = h * w;
    size_t ys = nhwc ? (size_t)c : 1; /* between an output plane's pixels */
    SG_PLANE_LOOP(pl, planes) {
        float *dxp = dx + pl * (size_t)inner;
        SG_INPLANE_LOOP(j, inner) {
            size_t img;
            int ch, me;
            sg_cu_plane_elem(nhwc, pl, j, c, plane_in, &img, &ch, &me);
            const float *dyp = dy + sg_cu_act_at(nhwc, c, oh * ow, img, ch, 0);
            int ix = me % w, iy = me / w;
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
                    float go = dyp[(size_t)(oy * ow + ox) * ys];
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
    int nhwc = sg_cu_nhwc(be), inner = sg_cu_inner(nhwc, c, oh * ow);
    size_t planes = sg_cu_planes(nhwc, n, c, oh * ow);
    if (!planes || c <= 0) return;
    dim3 t = sg_cu_plane_block(inner);
    SG_LAUNCH(sg_cu_plane_grid(inner, planes, t), t, 0, sg_cu_stream(be), k_resize_fwd)
    (x, y, c, h, w, oh, ow, sg_bilinear_scale(h, oh), sg_bilinear_scale(w, ow), inner, planes,
     nhwc);
    CU_LAUNCH_CHECK("k_resize_fwd");
}

static void sg_cuda_resize_bwd(sg_backend *be, const float *dy, float *dx, int n, int c, int h,
                               int w, int oh, int ow, int accumulate) {
    SG_CHECK(h > 0 && w > 0 && oh > 0 && ow > 0, "CUDA backend: resize_bwd %dx%d <- %dx%d", h, w,
             oh, ow);
    int nhwc = sg_cu_nhwc(be), inner = sg_cu_inner(nhwc, c, h * w);
    size_t planes = sg_cu_planes(nhwc, n, c, h * w);
    if (!planes || c <= 0) return;
    dim3 t = sg_cu_plane_block(inner);
    SG_LAUNCH(sg_cu_plane_grid(inner, planes, t), t, 0, sg_cu_stream(be), k_resize_bwd)
    (dy, dx, c, h, w, oh, ow, sg_bilinear_scale(h, oh), sg_bilinear_scale(w, ow), inner, planes,
     nhwc, accumulate);
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
