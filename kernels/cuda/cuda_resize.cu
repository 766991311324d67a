/* kernels/cuda/cuda_resize.cu - bilinear resize, align_corners=False, exactly
 * PyTorch's mapping (upsample_bilinear2d without given scale factors). The
 * taps, the weights and the forward value are kernels/formulas/bilinear.h,
 * shared with the CPU backend:
 *   scale = in/out (float), src = scale*(dst+0.5) - 0.5, clamped at 0,
 *   i0 = (int)src at most in-1, i1 = i0 + (i0 < in-1), l1 = src - i0 in
 *   [0, 1], l0 = 1 - l1.
 * Backward is a gather (no atomics, deterministic): each input element finds
 * the output rows/columns whose taps include it, from the inverse of the
 * mapping, and adds their shares in the CPU backend's scatter order, so the
 * result is the CPU's bit for bit.
 *
 * Before formulas/bilinear.h this file had its own taps: no i0 <= in-1 and
 * no l1 in [0, 1] guard (the CPU and PyTorch's CPU kernel have both; they
 * never fire for real sizes), and nvcc fused scale*(dst+0.5) - 0.5 and the
 * weighted sums into FMAs, so the source position, hence the weights (and,
 * where src lands within an ulp of an integer, the taps themselves), could
 * differ from the CPU's. The backward summed wy * sum(wx * dy) per row, with
 * the two weights of an edge input pre-added, rather than the CPU's
 * (dy*wy)*wx per tap.
 */
#include <math.h>

#include "core/log.h"
#include "kernels/cuda/cuda_internal.h"
#include "kernels/formulas/bilinear.h"

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

void sg_cuda_resize_fwd(sg_backend *be, const float *x, float *y, int n, int c, int h, int w,
                        int oh, int ow) {
    SG_CHECK(h > 0 && w > 0 && oh > 0 && ow > 0, "CUDA backend: resize %dx%d -> %dx%d", h, w,
             oh, ow);
    size_t planes = (size_t)n * c;
    if (!planes) return;
    int t = sg_cu_plane_threads(oh * ow);
    k_resize_fwd<<<sg_cu_plane_grid(oh * ow, planes, t), t, 0, sg_cu_stream(be)>>>(
        x, y, h, w, oh, ow, sg_bilinear_scale(h, oh), sg_bilinear_scale(w, ow), planes);
    CU_LAUNCH_CHECK("k_resize_fwd");
}

void sg_cuda_resize_bwd(sg_backend *be, const float *dy, float *dx, int n, int c, int h, int w,
                        int oh, int ow, int accumulate) {
    SG_CHECK(h > 0 && w > 0 && oh > 0 && ow > 0, "CUDA backend: resize_bwd %dx%d <- %dx%d", h,
             w, oh, ow);
    size_t planes = (size_t)n * c;
    if (!planes) return;
    int t = sg_cu_plane_threads(h * w);
    k_resize_bwd<<<sg_cu_plane_grid(h * w, planes, t), t, 0, sg_cu_stream(be)>>>(
        dy, dx, h, w, oh, ow, sg_bilinear_scale(h, oh), sg_bilinear_scale(w, ow), planes, accumulate);
    CU_LAUNCH_CHECK("k_resize_bwd");
}
