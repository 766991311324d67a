/* tests/backend/case_large.c - the `large` case set (test_backend_ops
 * --large), for a GPU only (about 26 GiB of device memory at the most, a few
 * seconds each on an H200; the meson suite never runs it):
 * - more than 2^31 elements where backend.h promises size_t counts
 *   (run_large.c: elementwise ops and sumsq, which also turn every
 *   grid-stride loop many times);
 * - more than 65535 planes (n*c) in the per-plane ops, whose grid.y is
 *   capped at 65535 and loops over the rest (SG_PLANE_LOOP);
 * - planes of more than 4096 x 256 elements, where the in-plane loop strides
 *   (SG_INPLANE_LOOP);
 * the last two with the ordinary runners and references.
 */
#include <stddef.h>

#include "tests/backend/cases.h"

#define BIG ((size_t)1 << 31) + 4099              /* past 2^31, odd */
#define PLANES .n = 2, .c = 40000, .h = 8, .w = 8 /* 80000 planes */
#define WIDE .n = 1, .c = 2, .h = 1100, .w = 1000 /* 1.1M elements a plane */

const tb_case tb_large_cases[] = {
    {"relu_fwd", run_large_relu_fwd, .count = BIG, .tol = 0, .note = "past 2^31 elements"},
    {"add", run_large_add, .count = BIG, .relu = 1, .tol = 0, .note = "past 2^31 elements"},
    {"scale", run_large_scale, .count = BIG, .alpha = 0.75f, .tol = 0,
     .note = "past 2^31 elements, in place"},
    {"axpy", run_large_axpy, .count = BIG, .alpha = -1.5f, .tol = 0, .note = "past 2^31 elements"},
    {"sumsq", run_large_sumsq, .count = BIG, .tol = 1e-9, .note = "past 2^31 elements"},

    {"bias_fwd", run_bias_fwd, PLANES, .tol = 0, .note = "80000 planes"},
    {"bias_fwd", run_bias_fwd, WIDE, .tol = 0, .note = "1.1M-element planes"},
    {"bn_fwd", run_bn_fwd, PLANES, .lo = -2, .hi = 2, .tol = 1e-6, .tol_cuda = 1e-5,
     .note = "80000 planes"},
    {"bn_fwd", run_bn_fwd, WIDE, .lo = -2, .hi = 2, .relu = 1, .tol = 1e-6, .tol_cuda = 1e-5,
     .note = "1.1M-element planes"},
    {"bn_bwd_elem", run_bn_bwd_elem, PLANES, .lo = -2, .hi = 2, .relu = 1, .tol = 1e-5,
     .note = "80000 planes"},
    {"maxpool_fwd", run_maxpool_fwd, PLANES, .lo = -3, .hi = -1, .tol = 0, .note = "80000 planes"},
    {"maxpool_bwd", run_maxpool_bwd, PLANES, .lo = -3, .hi = -1, .tol = 1e-6,
     .note = "80000 planes"},
    {"maxpool_bwd", run_maxpool_bwd, WIDE, .lo = -3, .hi = -1, .tol = 1e-6,
     .note = "1.1M-element planes"},
    {"avgpool_bwd", run_avgpool_bwd, PLANES, .tol = 1e-6, .tol_cuda = 1e-5, .note = "80000 planes"},
    {"concat_fwd", run_concat_fwd, .n = 2, .c = 40000, .h = 4, .w = 4, .c_dst = 40003, .c_off = 2,
     .tol = 0, .note = "80000 source planes"},
    {"resize_fwd", run_resize_fwd, .n = 2, .c = 40000, .h = 4, .w = 4, .oh = 9, .ow = 7,
     .tol = 1e-5, .note = "80000 planes"},
    {"resize_bwd", run_resize_bwd, .n = 2, .c = 40000, .h = 4, .w = 4, .oh = 9, .ow = 7,
     .tol = 1e-5, .note = "80000 planes"},
    {"resize_fwd", run_resize_fwd, .n = 1, .c = 1, .h = 600, .w = 900, .oh = 1200, .ow = 1800,
     .tol = 1e-5, .note = "2.2M-element output plane"},
    {"resize_bwd", run_resize_bwd, .n = 1, .c = 1, .h = 1200, .w = 1800, .oh = 600, .ow = 900,
     .tol = 1e-5, .note = "2.2M-element input plane"},
};
const int tb_nlarge = (int)(sizeof tb_large_cases / sizeof tb_large_cases[0]);
