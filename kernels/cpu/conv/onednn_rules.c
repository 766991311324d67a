/* kernels/cpu/conv/onednn_rules.c - which layout oneDNN (2.6) runs a
 * convolution in, the geometry its Winograd kernel takes, and the oneDNN
 * bugs the layout choice works around; plus the geometry helpers every
 * row shares (live taps, validation, element counts).
 *
 * The layout rule is the pays column of the rows onednn-cl, onednn-plain
 * and onednn-blocked (paths.c): exactly one of them holds for every call,
 * so those three rows partition every convolution the rows above them
 * leave. A rule from the geometry and the pass alone, never from timings:
 * results must not depend on the machine's load.
 */
#include "kernels/cpu/conv/conv_internal.h"

/* Live taps along one dimension: tap t reads rows o*stride - pad + t*dil
 * for o in [0, out); it is dead when all of them fall in the padding. Live
 * taps are contiguous [*t0, *t0 + *len). Returns the new left padding, or
 * -1 when nothing can be trimmed (or trimming would need negative padding).
 * With a dilation as large as the feature map (ASPP rate 36 on a 32x32
 * map) the outer taps only ever read padding: oneDNN then runs the smaller
 * kernel of the live taps (onednn.c). */
int sg_conv_live_taps(int in, int out, int k, int stride, int pad, int dil, int *t0, int *len,
                      int *pad_r) {
    int first = -1, last = -1;
    for (int t = 0; t < k; t++) {
        int lo = -pad + t * dil, hi = (out - 1) * stride - pad + t * dil;
        if (hi >= 0 && lo < in) {
            if (first < 0) first = t;
            last = t;
        }
    }
    if (first < 0 || (first == 0 && last == k - 1)) return -1;
    int pl = pad - first * dil, n = last - first + 1;
    int pr = (out - 1) * stride + (n - 1) * dil + 1 - in - pl;
    if (pl < 0 || pr < 0) return -1;
    *t0 = first, *len = n, *pad_r = pr;
    return pl;
}

void sg_conv_validate(const sg_conv_desc *d) {
    if (d->n <= 0 || d->c <= 0 || d->k <= 0 || d->r <= 0 || d->s <= 0 || d->stride_h <= 0 ||
        d->stride_w <= 0 || d->dil_h <= 0 || d->dil_w <= 0 || d->pad_h < 0 || d->pad_w < 0 ||
        d->oh <= 0 || d->ow <= 0)
        SG_FATAL("conv: invalid geometry n=%d c=%d h=%d w=%d k=%d r=%d s=%d stride=%d,%d "
                 "pad=%d,%d dil=%d,%d oh=%d ow=%d (fill oh/ow with sg_conv_desc_init)",
                 d->n, d->c, d->h, d->w, d->k, d->r, d->s, d->stride_h, d->stride_w, d->pad_h,
                 d->pad_w, d->dil_h, d->dil_w, d->oh, d->ow);
    if (sg_conv_desc_check(d) != 0)
        SG_FATAL("conv: groups=%d must be 0, 1 or a positive divisor of both the input channels "
                 "c=%d and the output channels k=%d (n=%d h=%d w=%d r=%d s=%d); fix the layer's "
                 "groups",
                 d->groups, d->c, d->k, d->n, d->h, d->w, d->r, d->s);
    sg_conv_desc chk = *d;
    if (sg_conv_desc_init(&chk) != 0 || chk.oh != d->oh || chk.ow != d->ow)
        SG_FATAL("conv: output size %dx%d does not match the geometry (expected %dx%d for "
                 "input %dx%d, kernel %dx%d, stride %d,%d, pad %d,%d, dilation %d,%d); fill "
                 "oh/ow with sg_conv_desc_init",
                 d->oh, d->ow, chk.oh, chk.ow, d->h, d->w, d->r, d->s, d->stride_h, d->stride_w,
                 d->pad_h, d->pad_w, d->dil_h, d->dil_w);
}

void sg_conv_op_counts(const sg_conv_desc *d, int op, size_t *n0, size_t *n1, size_t *nout) {
    size_t nx = (size_t)d->n * d->c * d->h * d->w, nw = sg_conv_weight_count(d);
    size_t ny = (size_t)d->n * d->k * d->oh * d->ow;
    if (op == OP_FWD) *n0 = nx, *n1 = nw, *nout = ny;
    else if (op == OP_BWD_DATA) *n0 = ny, *n1 = nw, *nout = nx;
    else *n0 = nx, *n1 = ny, *nout = nw;
}

/* Float32 3x3 stride-1 undilated convs with pad 1 and channel counts in
 * multiples of 16 run as oneDNN's Winograd F(4x4, 3x3) (jit_wino_4x3, on
 * its blocked layout, the activations reordered in and out): about half
 * the time of the direct kernels in every pass on AVX-512
 * (docs/BENCHMARKS.md, "CPU convolution paths"). It sums in another order
 * through the transforms: results stay within the conformance suite's conv
 * tolerance. oneDNN 2.6 has it for AVX-512 only (the row's isa column) and
 * not for bf16; h, w >= 2 keeps trimmed kernels out. */
int sg_conv_onednn_wino_geometry(const sg_conv_desc *d) {
    if (sg_conv_groups(d) != 1 || d->r != 3 || d->s != 3) return 0;
    if (d->stride_h != 1 || d->stride_w != 1 || d->dil_h != 1 || d->dil_w != 1) return 0;
    if (d->pad_h != 1 || d->pad_w != 1) return 0;
    return d->c % 16 == 0 && d->k % 16 == 0 && d->h >= 2 && d->w >= 2;
}

/* oneDNN 2.6's 1x1 backward-weights kernels (jit_1x1:avx2, seen here; the
 * AVX-512 one shares the code) gather a strided source into a workspace
 * ("rtus") at offsets computed for the blocked layout: with a channels-last
 * source whose channels are not a multiple of the block they write past it
 * and return wrong, call-to-call varying weight gradients (oneDNN issue
 * 6035; conv_bwd_weight rows n4 c4 24x14 k2 1x1 stride 2 and n1 c3 16x14 k4
 * failed on AVX2). Those convs run on the GEMM-based kernel (plain hwio
 * weights), which has no such workspace. */
static int nxc_rtus_bug(const sg_conv_desc *d) {
    return d->r == 1 && d->s == 1 && (d->stride_h > 1 || d->stride_w > 1) && d->c % 16 != 0 &&
           sg_conv_groups(d) == 1;
}

/* oneDNN 2.6's native bf16 backward-weights kernel on a channels-last
 * source (jit_bf16:avx512_core_bf16, acdb) returns wrong weight gradients
 * (relative error ~1.3) for dilated convs whose input channels are not a
 * multiple of 16 on larger maps: conv_bwd_weight rows n2 c24 35x58 k40 3x3
 * dilation 2x2 and 2x3 (c = 20, 24; k = 32, 40; n = 1, 2) failed on Zen 5,
 * while c = 32, dilation 1 and a 12x14 map passed. On AMX the kernel for
 * the blocked layout (jit:avx512_core_amx_bf16) picks a channels-last
 * source itself and is wrong the same way (row n2 c72 12x10 k24 3x3
 * dilation 2 on a Xeon with AMX): on NCHW activations too. Those convs run
 * on the GEMM-based kernel (plain weights), as nxc_rtus_bug's. */
static int nxc_bf16_dilated_bug(const sg_conv_desc *d, int bf16) {
    return bf16 && (d->dil_h > 1 || d->dil_w > 1) && d->c % 16 != 0;
}

/* oneDNN 2.6's native bf16 backward-data kernel for strided 1x1 convs on
 * channels-last tensors (jit_bf16_1x1:avx512_core_bf16, acdb) returns wrong
 * input gradients (relative error 0.6-0.8) when the output channels are not
 * a multiple of the block: rows n1 c16/c32/c48 12x10 and 24x20 k17 1x1
 * stride 2 failed on Zen 5, k = 16, 20, 24 and 32 passed. Those convs run
 * on the GEMM-based kernel, as nxc_rtus_bug's. */
static int nxc_bf16_strided_1x1_bug(const sg_conv_desc *d, int bf16) {
    return bf16 && d->r == 1 && d->s == 1 && (d->stride_h > 1 || d->stride_w > 1) &&
           d->k % 16 != 0 && sg_conv_groups(d) == 1;
}

int sg_conv_onednn_cl_bug(const sg_conv_desc *d, int op, int bf16) {
    if (op == OP_BWD_WEIGHT) return nxc_rtus_bug(d) || nxc_bf16_dilated_bug(d, bf16);
    if (op == OP_BWD_DATA) return nxc_bf16_strided_1x1_bug(d, bf16);
    return 0;
}

/* NHWC activations: oneDNN's channels-last kernels (jit, brgconv) read and
 * write them as stored; reordering them to a blocked layout is what the
 * NHWC layout exists to avoid. Plain instead for the bugs above, and for
 * backward-data into few input channels (the RGB stem), where oneDNN's
 * GEMM-based convolution on plain (hwio) weights is about twice as fast.
 * NCHW activations: the blocked layout wins clearly for spatial kernels
 * (1.3-3x, bench_conv on AVX-512 at the DeepLabV3-ResNet50 shapes) and for
 * 1x1 backward-weights; 1x1 forward / backward-data are a little faster on
 * plain nchw (no reorders), as is backward-data with few input channels;
 * tiny channel counts gain nothing from 16-wide blocks. bf16: oneDNN's
 * GEMM-based 1x1 backward-weights on plain layouts beats its blocked AMX
 * kernel, while for spatial kernels the blocked kernel wins. The kernel
 * size that counts is the one left after trimming dead taps. */
int sg_conv_onednn_layout(const conv_call *c) {
    const sg_conv_desc *d = c->d;
    int op = c->op, bf16 = c->prec == PREC_BF16;
    if (c->act == SG_LAYOUT_NHWC) {
        if (sg_conv_onednn_cl_bug(d, op, bf16)) return LAYOUT_PLAIN;
        return op == OP_BWD_DATA && d->c < 16 && sg_conv_groups(d) == 1 ? LAYOUT_PLAIN : LAYOUT_CL;
    }
    if (op == OP_BWD_WEIGHT && nxc_bf16_dilated_bug(d, bf16)) return LAYOUT_PLAIN;
    if (d->k < 16) return LAYOUT_PLAIN;
    int t0, r = d->r, s = d->s, pr;
    sg_conv_live_taps(d->h, d->oh, d->r, d->stride_h, d->pad_h, d->dil_h, &t0, &r, &pr);
    sg_conv_live_taps(d->w, d->ow, d->s, d->stride_w, d->pad_w, d->dil_w, &t0, &s, &pr);
    int one_by_one = r == 1 && s == 1;
    if (op == OP_BWD_WEIGHT)
        return (one_by_one && (d->c < 16 || bf16)) ? LAYOUT_PLAIN : LAYOUT_BLOCKED;
    if (one_by_one) return LAYOUT_PLAIN;
    if (op == OP_BWD_DATA && d->c < 16) return LAYOUT_PLAIN;
    return LAYOUT_BLOCKED;
}
