/* kernels/cuda/cuda_resize.cu - bilinear resize, align_corners=False, exactly
 * PyTorch's mapping (upsample_bilinear2d without given scale factors):
 *   scale = in/out (float), src = scale*(dst+0.5) - 0.5, clamped at 0,
 *   i0 = (int)src, i1 = i0 + (i0 < in-1), l1 = src - i0, l0 = 1 - l1.
 * Backward is a gather (no atomics, deterministic): each input element finds
 * the output rows/columns whose taps include it, from the inverse of the
 * mapping, and recomputes their weights with the forward's formula.
 */
#include <math.h>

#include "core/log.h"
#include "kernels/cuda/cuda_internal.h"

typedef struct taps {
    int i0, i1;
    float l0, l1;
} taps;

__device__ __forceinline__ taps tap_of(int dst, float scale, int in) {
    float src = scale * ((float)dst + 0.5f) - 0.5f;
    if (src < 0.0f) src = 0.0f;
    taps t;
    t.i0 = (int)src;
    t.i1 = t.i0 + (t.i0 < in - 1 ? 1 : 0);
    t.l1 = src - (float)t.i0;
    t.l0 = 1.0f - t.l1;
    return t;
}

/* Weight with which output `dst` reads input `i` (0 when it does not). */
__device__ __forceinline__ float weight_of(int dst, int i, float scale, int in) {
    taps t = tap_of(dst, scale, in);
    float wgt = 0.0f;
    if (t.i0 == i) wgt += t.l0;
    if (t.i1 == i) wgt += t.l1;
    return wgt;
}

/* Outputs that may read input i: src(dst) in [i-1, i+1), widened by one on
 * each side against float rounding (weight_of decides exactly). */
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
            taps ty = tap_of(oy, sh, h), tx = tap_of(ox, sw, w);
            yp[j] = ty.l0 * (tx.l0 * xp[ty.i0 * w + tx.i0] + tx.l1 * xp[ty.i0 * w + tx.i1]) +
                    ty.l1 * (tx.l0 * xp[ty.i1 * w + tx.i0] + tx.l1 * xp[ty.i1 * w + tx.i1]);
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
            float g = 0.0f;
            for (int oy = y0; oy <= y1; oy++) {
                float wy = weight_of(oy, iy, sh, h);
                if (wy == 0.0f) continue;
                float row = 0.0f;
                for (int ox = x0; ox <= x1; ox++) {
                    float wx = weight_of(ox, ix, sw, w);
                    if (wx != 0.0f) row += wx * dyp[oy * ow + ox];
                }
                g += wy * row;
            }
            dxp[j] = acc ? dxp[j] + g : g;
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
        x, y, h, w, oh, ow, (float)h / (float)oh, (float)w / (float)ow, planes);
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
        dy, dx, h, w, oh, ow, (float)h / (float)oh, (float)w / (float)ow, planes, accumulate);
    CU_LAUNCH_CHECK("k_resize_bwd");
}
