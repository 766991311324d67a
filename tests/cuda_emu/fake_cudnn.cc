/* tests/cuda_emu/fake_cudnn.cc - the emulated device's cuDNN: exactly the
 * cuDNN 9 functions the CUDA backend calls (the kernels/cuda .cu files, legacy
 * convolution API), with the real prototypes (<cudnn.h> is included, so the
 * compiler checks every definition against NVIDIA's declaration).
 * Test-only C++17; never linked into the product.
 *
 * What it computes: a naive direct convolution accumulated in double, in the
 * three directions (forward, backward-data, backward-filter), for float32
 * (FLOAT_CONFIG) and bfloat16 data with float32 compute
 * (PSEUDO_BFLOAT16_CONFIG), NCHW and NHWC tensors (filters KCRS and KRSC),
 * groups, stride, padding, dilation, CUDNN_CROSS_CORRELATION and
 * CUDNN_CONVOLUTION (the flipped kernel), and alpha/beta blending
 * (out = alpha * conv + beta * out, the output not read when beta is 0).
 * Results are rounded to float (round to nearest even), bf16 ones from that
 * float to bf16 (nearest even, NaN stays NaN) - what the GPU's float32
 * accumulation then bf16 store gives, up to the order of the sums.
 * Math types matter as on an Ampere-or-later GPU: float data under any math
 * type but CUDNN_FMA_MATH may run TF32 tensor cores, so the fake rounds both
 * float operands to TF32 (10 mantissa bits, nearest even) before multiplying;
 * CUDNN_FMA_MATH multiplies them as they are. (A backend that meant FMA math
 * and left CUDNN_DEFAULT_MATH on the descriptor gets TF32 results here, as it
 * would on the hardware.)
 *
 * How it runs: like the GPU, later. Each cudnnConvolution* call validates its
 * arguments at once (the refusals below, each returning what cuDNN 9
 * returns), copies what it needs (descriptors by value, the math type and
 * algorithm, alpha and beta read from host memory now), and queues the work
 * on the handle's stream (sg_emu_enqueue); it runs at a synchronisation
 * point. The queued work writes NaN over the workspace it was given (the
 * algorithm's requirement) first, so code that expects a zeroed or
 * preserved workspace sees garbage. cudnnFind* run synchronously as in
 * cuDNN: they drain the handle's stream and return deterministic
 * "measurements". Every entry point holds the device lock.
 *
 * Refusals: whatever cuDNN 9 documents as refused is refused with the status
 * it documents, each rule next to the documentation sentence it follows.
 * Pages: docs.nvidia.com/deeplearning/cudnn/latest/api/cudnn-graph-library.html
 * (cudnnStatus_t, cudnnCreate, cudnnDestroy, cudnnSetStream, cudnnGetVersion,
 * cudnnGetErrorString), .../cudnn-ops-library.html (tensor and filter
 * descriptors, the algorithm enums) and .../cudnn-cnn-library.html
 * (convolution descriptors, the convolutions, their workspace and algorithm
 * queries, the *AlgoPerf_t structs). The sentences are the legacy API
 * reference's, which cuDNN 9 kept; where this file says "(wording from
 * memory)" the sentence could not be checked against a stored copy of the
 * text when this was written, and the rule rests on it. A refusal also prints one line on
 * stderr, "emulated cuDNN: <function>: <argument and rule> (<status>)" (real
 * cuDNN is silent; this is a test tool). Three kinds of checks go beyond the
 * documentation and say so: pointers must lie in live device allocations of
 * the emulated runtime (sg_emu_classify), the workspace must hold the bytes
 * its size claims, and a result overlapping an operand is a device fault at
 * run time (sg_emu_fault).
 *
 * Status sub-codes: the legacy API pages list every refusal under a
 * category (CUDNN_STATUS_BAD_PARAM, CUDNN_STATUS_NOT_SUPPORTED); cuDNN 9
 * adds specific codes inside a category (cudnn_graph_v9.h,
 * CUDNN_STATUS_CATEGORY). The fake returns the specific code where one names
 * the fault exactly - CUDNN_STATUS_BAD_PARAM_NULL_POINTER ("The cuDNN API
 * unexpectedly received a null pointer from the user.") and
 * CUDNN_STATUS_BAD_PARAM_MISALIGNED_POINTER ("The cuDNN API received a
 * misaligned pointer from the user.") - and the category code otherwise, as
 * the function pages say. Callers should test CUDNN_STATUS_CATEGORY().
 */
#include <cmath>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <cudnn.h>
#include <string>
#include <unordered_set>
#include <vector>

#include "tests/cuda_emu/emu_device.h"

/* The opaque types of cudnn.h, defined here. */
struct cudnnContext {
    cudaStream_t stream; /* NULL: the legacy default stream (cudnnCreate's) */
};
struct cudnnTensorStruct {
    bool set;
    cudnnTensorFormat_t fmt;
    cudnnDataType_t dt;
    int n, c, h, w;
};
struct cudnnFilterStruct {
    bool set;
    cudnnDataType_t dt;
    cudnnTensorFormat_t fmt; /* NCHW: KCRS in memory, NHWC: KRSC */
    int k, c, r, s;          /* c: input channels per group */
};
struct cudnnConvolutionStruct {
    bool set;
    int ph, pw, su, sv, dh, dw;
    cudnnConvolutionMode_t mode;
    cudnnDataType_t compute;
    int groups;           /* cudnnSetConvolutionGroupCount; 1 when never set */
    cudnnMathType_t math; /* cudnnSetConvolutionMathType; CUDNN_DEFAULT_MATH when never set */
};

namespace {

/* ---------------- bookkeeping ---------------- */

/* Live objects, so a destroyed or never-created one is refused, not used. */
std::unordered_set<const void *> &live() {
    static std::unordered_set<const void *> s;
    return s;
}

const char *status_name(cudnnStatus_t s) { return cudnnGetErrorString(s); }

/* A verdict: a status and, when it is a refusal, why. */
struct Verdict {
    cudnnStatus_t st = CUDNN_STATUS_SUCCESS;
    std::string why;
    bool ok() const { return st == CUDNN_STATUS_SUCCESS; }
};

__attribute__((format(printf, 2, 3))) Verdict verdict(cudnnStatus_t st, const char *fmt, ...) {
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    Verdict v;
    v.st = st;
    v.why = buf;
    return v;
}

/* Prints the refusal line and returns its status. */
cudnnStatus_t refuse(const char *fn, const Verdict &v) {
    fprintf(stderr, "emulated cuDNN: %s: %s (%s)\n", fn, v.why.c_str(), status_name(v.st));
    return v.st;
}
__attribute__((format(printf, 3, 4))) cudnnStatus_t refuse(const char *fn, cudnnStatus_t st,
                                                           const char *fmt, ...) {
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    fprintf(stderr, "emulated cuDNN: %s: %s (%s)\n", fn, buf, status_name(st));
    return st;
}

const char *dt_name(cudnnDataType_t t) {
    switch (t) {
    case CUDNN_DATA_FLOAT: return "CUDNN_DATA_FLOAT";
    case CUDNN_DATA_DOUBLE: return "CUDNN_DATA_DOUBLE";
    case CUDNN_DATA_HALF: return "CUDNN_DATA_HALF";
    case CUDNN_DATA_BFLOAT16: return "CUDNN_DATA_BFLOAT16";
    case CUDNN_DATA_INT8: return "CUDNN_DATA_INT8";
    case CUDNN_DATA_INT32: return "CUDNN_DATA_INT32";
    default: return "a data type the fake does not compute";
    }
}
const char *fmt_name(cudnnTensorFormat_t f) {
    return f == CUDNN_TENSOR_NCHW   ? "CUDNN_TENSOR_NCHW"
           : f == CUDNN_TENSOR_NHWC ? "CUDNN_TENSOR_NHWC"
                                    : "CUDNN_TENSOR_NCHW_VECT_C";
}

/* cudnnDataType_t's enumerants (cudnn_graph_v9.h: 0 .. 21). */
bool valid_dt(int t) { return t >= CUDNN_DATA_FLOAT && t <= CUDNN_DATA_COMPLEX_FP64; }
bool valid_fmt(int f) { return f >= CUDNN_TENSOR_NCHW && f <= CUDNN_TENSOR_NCHW_VECT_C; }

/* Handles and descriptors: NULL is CUDNN_STATUS_BAD_PARAM_NULL_POINTER, one
 * that was never created or was destroyed is CUDNN_STATUS_BAD_PARAM. */
Verdict check_obj(const void *p, const char *arg) {
    if (!p) return verdict(CUDNN_STATUS_BAD_PARAM_NULL_POINTER, "%s is NULL", arg);
    if (!live().count(p))
        return verdict(CUDNN_STATUS_BAD_PARAM,
                       "%s (%p) is not a live object of this library (never created, or "
                       "already destroyed)",
                       arg, p);
    return Verdict();
}

/* ---------------- numbers ---------------- */

float bf16_to_f32(uint16_t b) {
    uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}
/* float -> bf16, round to nearest even; NaN stays NaN (quiet). */
uint16_t f32_to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x0040u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}
/* float -> TF32 (10 mantissa bits), round to nearest even; Inf and NaN kept. */
float f32_to_tf32(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if ((u & 0x7f800000u) == 0x7f800000u) return f;
    u += 0xfffu + ((u >> 13) & 1u);
    u &= ~0x1fffu;
    memcpy(&f, &u, sizeof f);
    return f;
}

size_t esize(cudnnDataType_t t) { return t == CUDNN_DATA_BFLOAT16 ? 2 : 4; }
size_t round256(size_t b) { return (b + 255) / 256 * 256; }

/* ---------------- the convolution problem ---------------- */

enum Dir { FWD = 0, BWD_DATA = 1, BWD_FILTER = 2 };

/* The argument names each function's page uses. */
struct Names {
    const char *img_desc, *flt_desc, *out_desc; /* descriptors */
    const char *in_a, *in_b, *out;              /* data: the two operands, the result */
};
const Names kNames[3] = {
    {"xDesc", "wDesc", "yDesc", "x", "w", "y"},
    {"dxDesc", "wDesc", "dyDesc", "dy", "w", "dx"},
    {"xDesc", "dwDesc", "dyDesc", "x", "dy", "dw"},
};

/* One convolution, checked: the descriptors by value. */
struct Problem {
    Dir dir;
    cudnnTensorStruct img; /* x (or dx) */
    cudnnFilterStruct flt; /* w (or dw) */
    cudnnTensorStruct out; /* y (or dy) */
    cudnnConvolutionStruct cv;
    long oh, ow; /* cudnnGetConvolution2dForwardOutputDim's answer */

    long groups() const { return cv.groups; }
    long kg() const { return flt.k / cv.groups; } /* output channels per group */
    bool tensor_core() const { return cv.math != CUDNN_FMA_MATH; }
    bool tf32() const { return img.dt == CUDNN_DATA_FLOAT && tensor_core(); }
};

/* The output size, cudnnGetConvolution2dForwardOutputDim's formula:
 * "outputDim = 1 + ( inputDim + 2*pad - (((filterDim-1)*dilation)+1) )/convolutionStride;"
 * (cudnn-cnn-library, cudnnGetConvolution2dForwardOutputDim). <= 0 when
 * the dilated filter does not fit the padded input. */
long out_dim(long in, long pad, long f, long dil, long stride) {
    long span = (f - 1) * dil + 1, room = in + 2 * pad - span;
    return room < 0 ? 0 : 1 + room / stride;
}

/* The checks every convolution function shares (the function itself, its
 * workspace query and its algorithm queries): descriptors, data types,
 * configuration, formats, channels and groups, and sizes. */
Verdict check_problem(Dir dir, cudnnTensorDescriptor_t imgd, cudnnFilterDescriptor_t fltd,
                      cudnnConvolutionDescriptor_t cd, cudnnTensorDescriptor_t outd, Problem *p) {
    const Names &nm = kNames[dir];
    Verdict v;
    if (!(v = check_obj(imgd, nm.img_desc)).ok()) return v;
    if (!(v = check_obj(fltd, nm.flt_desc)).ok()) return v;
    if (!(v = check_obj(cd, "convDesc")).ok()) return v;
    if (!(v = check_obj(outd, nm.out_desc)).ok()) return v;
    if (!imgd->set || !outd->set || !fltd->set || !cd->set)
        return verdict(CUDNN_STATUS_BAD_PARAM, "%s was created but never set (cudnnSet*Descriptor)",
                       !imgd->set   ? nm.img_desc
                       : !outd->set ? nm.out_desc
                       : !fltd->set ? nm.flt_desc
                                    : "convDesc");
    p->dir = dir;
    p->img = *imgd;
    p->flt = *fltd;
    p->out = *outd;
    p->cv = *cd;
    const cudnnTensorStruct &x = p->img, &y = p->out;
    const cudnnFilterStruct &w = p->flt;
    const cudnnConvolutionStruct &c = p->cv;

    /* cudnnConvolutionForward / BackwardData / BackwardFilter, Returns,
     * CUDNN_STATUS_BAD_PARAM: "xDesc, wDesc, and yDesc have a non-matching
     * data type." (BackwardData: "wDesc, dxDesc, and dyDesc have a
     * non-matching data type."; BackwardFilter: "xDesc, dyDesc, and dwDesc
     * have a non-matching data type.") */
    if (x.dt != w.dt || x.dt != y.dt)
        return verdict(CUDNN_STATUS_BAD_PARAM,
                       "%s is %s, %s is %s, %s is %s: the data types must match (\"%s, %s, and %s "
                       "have a non-matching data type\")",
                       nm.img_desc, dt_name(x.dt), nm.flt_desc, dt_name(w.dt), nm.out_desc,
                       dt_name(y.dt), nm.img_desc, nm.flt_desc, nm.out_desc);
    /* The "Supported configurations" tables of the three pages:
     * FLOAT_CONFIG is x, w, y CUDNN_DATA_FLOAT with convDesc's compute type
     * CUDNN_DATA_FLOAT; PSEUDO_BFLOAT16_CONFIG is x, w, y CUDNN_DATA_BFLOAT16
     * with compute type CUDNN_DATA_FLOAT; a combination in no row is
     * CUDNN_STATUS_NOT_SUPPORTED ("The chosen algo does not support the
     * parameters provided"). cuDNN also has TRUE_HALF, PSEUDO_HALF, DOUBLE
     * and INT8 configurations: the fake does not compute them (a fake's
     * limit, said as such). */
    if (x.dt != CUDNN_DATA_FLOAT && x.dt != CUDNN_DATA_BFLOAT16)
        return verdict(CUDNN_STATUS_NOT_SUPPORTED,
                       "data type %s: the emulated cuDNN computes FLOAT_CONFIG and "
                       "PSEUDO_BFLOAT16_CONFIG only (a limit of the fake; real cuDNN has more)",
                       dt_name(x.dt));
    if (c.compute != CUDNN_DATA_FLOAT)
        return verdict(CUDNN_STATUS_NOT_SUPPORTED,
                       "convDesc's compute type is %s with %s data: FLOAT_CONFIG and "
                       "PSEUDO_BFLOAT16_CONFIG need compute type CUDNN_DATA_FLOAT (the "
                       "supported-configurations table)",
                       dt_name(c.compute), dt_name(x.dt));
    /* cudnnSetFilter4dDescriptor, format: NCHW is KCRS, NHWC is KRSC; the
     * algorithm tables for a filter in CUDNN_TENSOR_NHWC format list xDesc
     * and yDesc in NHWC (HWC-packed) only (wording from memory). */
    if (w.fmt == CUDNN_TENSOR_NHWC && (x.fmt != CUDNN_TENSOR_NHWC || y.fmt != CUDNN_TENSOR_NHWC))
        return verdict(CUDNN_STATUS_NOT_SUPPORTED,
                       "%s is CUDNN_TENSOR_NHWC (KRSC) but %s is %s and %s is %s: an NHWC filter "
                       "is supported with NHWC tensors only (the algorithm tables for wDesc in "
                       "NHWC format)",
                       nm.flt_desc, nm.img_desc, fmt_name(x.fmt), nm.out_desc, fmt_name(y.fmt));
    /* Returns, CUDNN_STATUS_BAD_PARAM: "xDesc and wDesc have a non-matching
     * number of input feature maps per image (or group in case of grouped
     * convolutions)." */
    if ((long)x.c != (long)w.c * c.groups)
        return verdict(CUDNN_STATUS_BAD_PARAM,
                       "%s has %d channels but %s has %d per group and convDesc %d group(s): "
                       "\"non-matching number of input feature maps per image (or group in case "
                       "of grouped convolutions)\"",
                       nm.img_desc, x.c, nm.flt_desc, w.c, c.groups);
    /* cudnnConvolutionForward and BackwardFilter, CUDNN_STATUS_BAD_PARAM:
     * "yDesc or wDesc indicate an output channel count that isn't a
     * multiple of group count (if group count has been set in convDesc)."
     * BackwardData lists the same condition ("dyDesc or wDesc indicate an
     * output channel count that isn't a multiple of group count") under
     * CUDNN_STATUS_NOT_SUPPORTED. */
    if (w.k % c.groups)
        return verdict(dir == BWD_DATA ? CUDNN_STATUS_NOT_SUPPORTED : CUDNN_STATUS_BAD_PARAM,
                       "%s has %d output channels, not a multiple of the group count %d (\"an "
                       "output channel count that isn't a multiple of group count\")",
                       nm.flt_desc, w.k, c.groups);
    /* cudnnConvolutionForward, CUDNN_STATUS_BAD_PARAM: "For some spatial
     * dimension, wDesc has a spatial size that is larger than the input
     * spatial size (including zero-padding size)." (the dilated size) */
    long fr = (long)(w.r - 1) * c.dh + 1, fs = (long)(w.s - 1) * c.dw + 1;
    if (fr > (long)x.h + 2L * c.ph || fs > (long)x.w + 2L * c.pw)
        return verdict(CUDNN_STATUS_BAD_PARAM,
                       "%s's dilated filter %ldx%ld is larger than %s's padded input %ldx%ld "
                       "(\"wDesc has a spatial size that is larger than the input spatial size "
                       "(including zero-padding size)\")",
                       nm.flt_desc, fr, fs, nm.img_desc, (long)x.h + 2L * c.ph,
                       (long)x.w + 2L * c.pw);
    p->oh = out_dim(x.h, c.ph, w.r, c.dh, c.su);
    p->ow = out_dim(x.w, c.pw, w.s, c.dw, c.sv);
    /* cudnnConvolutionBackwardData, CUDNN_STATUS_BAD_PARAM: "dyDesc's
     * spatial sizes do not match with the expected size as determined by
     * cudnnGetConvolutionNdForwardOutputDim()." - and the same for yDesc
     * (forward) and dyDesc (backward-filter); batch and channels likewise
     * (y's n is x's, y's c is w's k). */
    if (y.n != x.n || y.c != w.k || y.h != p->oh || y.w != p->ow)
        return verdict(CUDNN_STATUS_BAD_PARAM,
                       "%s is %dx%dx%dx%d (n, c, h, w) but the convolution of %s %dx%dx%dx%d by "
                       "%s %dx%dx%dx%d gives %dx%dx%ldx%ld (\"spatial sizes do not match with the "
                       "expected size as determined by cudnnGetConvolutionNdForwardOutputDim()\")",
                       nm.out_desc, y.n, y.c, y.h, y.w, nm.img_desc, x.n, x.c, x.h, x.w,
                       nm.flt_desc, w.k, w.c, w.r, w.s, x.n, w.k, p->oh, p->ow);
    return Verdict();
}

int algo_count(Dir dir) {
    return dir == FWD        ? (int)CUDNN_CONVOLUTION_FWD_ALGO_COUNT
           : dir == BWD_DATA ? (int)CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT
                             : (int)CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT;
}

const char *algo_name(Dir dir, int a) {
    static const char *const fwd[] = {
        "IMPLICIT_GEMM", "IMPLICIT_PRECOMP_GEMM", "GEMM", "DIRECT", "FFT", "FFT_TILING",
        "WINOGRAD",      "WINOGRAD_NONFUSED"};
    static const char *const data[] = {"ALGO_0",     "ALGO_1",   "FFT",
                                       "FFT_TILING", "WINOGRAD", "WINOGRAD_NONFUSED"};
    static const char *const filt[] = {
        "ALGO_0", "ALGO_1", "FFT", "ALGO_3", "WINOGRAD", "WINOGRAD_NONFUSED", "FFT_TILING"};
    if (a < 0 || a >= algo_count(dir)) return "(out of range)";
    return dir == FWD ? fwd[a] : dir == BWD_DATA ? data[a] : filt[a];
}

/* The determinism cuDNN documents: cudnn_ops_v9.h marks
 * CUDNN_CONVOLUTION_BWD_DATA_ALGO_0, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0 and
 * CUDNN_CONVOLUTION_BWD_FILTER_ALGO_3 "non-deterministic" (the enum pages:
 * "The sum is done using the atomic add operation, thus the results are
 * non-deterministic."); every forward algorithm is deterministic. */
cudnnDeterminism_t determinism(Dir dir, int a) {
    if (dir == BWD_DATA && a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_0) return CUDNN_NON_DETERMINISTIC;
    if (dir == BWD_FILTER &&
        (a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0 || a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_3))
        return CUDNN_NON_DETERMINISTIC;
    return CUDNN_DETERMINISTIC;
}

/* Whether `algo` runs problem p: CUDNN_STATUS_BAD_PARAM for a value that is
 * no enumerant of the direction's algorithm type (cudnnStatus_t,
 * CUDNN_STATUS_BAD_PARAM: "An incorrect value or parameter was passed to the
 * function."), CUDNN_STATUS_NOT_SUPPORTED for one whose documented
 * restrictions p breaks (the three pages, CUDNN_STATUS_NOT_SUPPORTED: "The
 * chosen algo does not support the parameters provided; see above for an
 * exhaustive list of parameter support for each algo", and the workspace
 * queries: "The combination of the tensor descriptors, filter descriptor,
 * and convolution descriptor is not supported for the specified
 * algorithm."). The restrictions are those of the pages' "Supported
 * Algorithms" tables for 2D convolutions. */
Verdict algo_support(const Problem &p, int algo) {
    const Dir dir = p.dir;
    const char *an = algo_name(dir, algo);
    if (algo < 0 || algo >= algo_count(dir))
        return verdict(CUDNN_STATUS_BAD_PARAM,
                       "algo %d is not a %s algorithm (valid: 0 .. %d): \"An incorrect value or "
                       "parameter was passed to the function\"",
                       algo,
                       dir == FWD        ? "cudnnConvolutionFwdAlgo_t"
                       : dir == BWD_DATA ? "cudnnConvolutionBwdDataAlgo_t"
                                         : "cudnnConvolutionBwdFilterAlgo_t",
                       algo_count(dir) - 1);
    const cudnnTensorStruct &x = p.img, &y = p.out;
    const cudnnFilterStruct &w = p.flt;
    const cudnnConvolutionStruct &c = p.cv;
    const bool nchw = x.fmt == CUDNN_TENSOR_NCHW && y.fmt == CUDNN_TENSOR_NCHW &&
                      w.fmt == CUDNN_TENSOR_NCHW;
    const bool fp32 = x.dt == CUDNN_DATA_FLOAT;
    const bool stride1 = c.su == 1 && c.sv == 1, dil1 = c.dh == 1 && c.dw == 1;
#define NOT_SUPPORTED(...) verdict(CUDNN_STATUS_NOT_SUPPORTED, __VA_ARGS__)
    /* Not implemented at all: cudnn_ops_v9.h marks
     * CUDNN_CONVOLUTION_BWD_FILTER_ALGO_WINOGRAD "not implemented";
     * CUDNN_CONVOLUTION_FWD_ALGO_DIRECT is in no support table ("algo3
     * CUDNN_CONVOLUTION_FWD_ALGO_DIRECT is not implemented", NVIDIA's answer
     * at forums.developer.nvidia.com/t/165802). */
    if ((dir == FWD && algo == CUDNN_CONVOLUTION_FWD_ALGO_DIRECT) ||
        (dir == BWD_FILTER && algo == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_WINOGRAD))
        return NOT_SUPPORTED("algo %s (%d) is not implemented by cuDNN", an, algo);
    /* The tables for a filter in CUDNN_TENSOR_NHWC format list only the
     * implicit-GEMM algorithms: forward IMPLICIT_GEMM and
     * IMPLICIT_PRECOMP_GEMM, backward-data ALGO_0 and ALGO_1, backward-filter
     * ALGO_0 and ALGO_1 (wording from memory). */
    const bool implicit = dir == FWD ? algo == CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM ||
                                           algo == CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM
                                     : algo == 0 || algo == 1; /* ALGO_0, ALGO_1 */
    if (implicit) return Verdict();
    if (w.fmt == CUDNN_TENSOR_NHWC)
        return NOT_SUPPORTED("algo %s (%d) with %s in CUDNN_TENSOR_NHWC format: the NHWC-filter "
                             "table lists only the implicit-GEMM algorithms",
                             an, algo, kNames[dir].flt_desc);
    /* GEMM (forward) and ALGO_3 (backward-filter): NCHW tensors, and no
     * PSEUDO_BFLOAT16_CONFIG row (wording from memory). */
    if ((dir == FWD && algo == CUDNN_CONVOLUTION_FWD_ALGO_GEMM) ||
        (dir == BWD_FILTER && algo == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_3)) {
        if (!fp32)
            return NOT_SUPPORTED("algo %s (%d): no PSEUDO_BFLOAT16_CONFIG support", an, algo);
        if (!nchw) return NOT_SUPPORTED("algo %s (%d): NCHW tensors only", an, algo);
        return Verdict();
    }
    /* FFT, FFT_TILING, WINOGRAD, WINOGRAD_NONFUSED: "Data Type Config
     * Support: PSEUDO_HALF_CONFIG, FLOAT_CONFIG" (no bf16); "xDesc Format
     * Support: NCHW HW-packed"; "convDesc's vertical and horizontal filter
     * stride must equal 1" (the forward tables' wording; the backward tables
     * are taken to say the same, wording from memory); "Dilation: 1 for all
     * dimensions" (wording from memory). */
    if (!fp32)
        return NOT_SUPPORTED("algo %s (%d): data type configs FLOAT_CONFIG and PSEUDO_HALF_CONFIG "
                             "only, not PSEUDO_BFLOAT16_CONFIG",
                             an, algo);
    if (!nchw)
        return NOT_SUPPORTED("algo %s (%d): \"xDesc Format Support: NCHW HW-packed\"", an, algo);
    if (!stride1)
        return NOT_SUPPORTED("algo %s (%d): stride %dx%d, but \"convDesc's vertical and horizontal "
                             "filter stride must equal 1\"",
                             an, algo, c.su, c.sv);
    if (!dil1)
        return NOT_SUPPORTED("algo %s (%d): dilation %dx%d, but \"Dilation: 1 for all dimensions\"",
                             an, algo, c.dh, c.dw);
    const bool fft = (dir == FWD && algo == CUDNN_CONVOLUTION_FWD_ALGO_FFT) ||
                     (dir == BWD_DATA && algo == CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT) ||
                     (dir == BWD_FILTER && algo == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT);
    const bool tiling = (dir == FWD && algo == CUDNN_CONVOLUTION_FWD_ALGO_FFT_TILING) ||
                        (dir == BWD_DATA && algo == CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT_TILING) ||
                        (dir == BWD_FILTER && algo == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT_TILING);
    const bool wino = (dir == FWD && algo == CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD) ||
                      (dir == BWD_DATA && algo == CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD);
    if (fft || tiling) {
        /* "wDesc's filter height must be greater than convDesc's zero-padding
         * height" (and width) */
        if (w.r <= c.ph || w.s <= c.pw)
            return NOT_SUPPORTED("algo %s (%d): filter %dx%d not larger than the padding %dx%d "
                                 "(\"wDesc's filter height must be greater than convDesc's "
                                 "zero-padding height\")",
                                 an, algo, w.r, w.s, c.ph, c.pw);
        /* FFT: "xDesc's feature map height + 2 * convDesc's zero-padding
         * height must equal 256 or less" (and width) */
        if (fft && (x.h + 2 * c.ph > 256 || x.w + 2 * c.pw > 256))
            return NOT_SUPPORTED("algo %s (%d): padded input %dx%d, but \"xDesc's feature map "
                                 "height + 2 * convDesc's zero-padding height must equal 256 or "
                                 "less\"",
                                 an, algo, x.h + 2 * c.ph, x.w + 2 * c.pw);
        /* FFT_TILING: "wDesc's filter height must equal 32 or less" (and width) */
        if (tiling && (w.r > 32 || w.s > 32))
            return NOT_SUPPORTED("algo %s (%d): filter %dx%d, but \"wDesc's filter height must "
                                 "equal 32 or less\"",
                                 an, algo, w.r, w.s);
        return Verdict();
    }
    if (wino) {
        /* WINOGRAD: "wDesc's filter height must be 3", "wDesc's filter width must be 3" */
        if (w.r != 3 || w.s != 3)
            return NOT_SUPPORTED("algo %s (%d): filter %dx%d, but \"wDesc's filter height must "
                                 "be 3\" and width 3",
                                 an, algo, w.r, w.s);
        return Verdict();
    }
    /* WINOGRAD_NONFUSED: "wDesc's filter (height, width) must be (3,3) or (5,5)" */
    if (!((w.r == 3 && w.s == 3) || (w.r == 5 && w.s == 5)))
        return NOT_SUPPORTED("algo %s (%d): filter %dx%d, but \"wDesc's filter (height, width) "
                             "must be (3,3) or (5,5)\"",
                             an, algo, w.r, w.s);
    return Verdict();
#undef NOT_SUPPORTED
}

/* The workspace each algorithm needs (after algo_support): deterministic,
 * and nonzero for most, so the caller's workspace handling is exercised.
 * Invented sizes shaped like the real ones (an index table, an im2col
 * buffer, transformed tiles, fp32 partial sums), 256-byte multiples; with
 * tensor-core math (anything but CUDNN_FMA_MATH) every nonzero size grows
 * by 1 KiB, so a caller that queried under one math type and runs under
 * another is caught by the size check. */
size_t workspace_bytes(const Problem &p, int algo) {
    const size_t N = p.img.n, C = p.img.c, H = p.img.h, W = p.img.w, K = p.flt.k, CG = p.flt.c,
                 R = p.flt.r, S = p.flt.s, OH = p.oh, OW = p.ow, G = p.cv.groups;
    const size_t es = esize(p.img.dt), q = CG * R * S;
    const bool bf16 = p.img.dt == CUDNN_DATA_BFLOAT16;
    const size_t h2 = H + 2 * p.cv.ph, w2 = W + 2 * p.cv.pw;
    const size_t tiles = ((OH + 1) / 2) * ((OW + 1) / 2);
    size_t b = 0;
    switch (p.dir) {
    case FWD:
        switch (algo) {
        case CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM: b = 0; break;
        case CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM: b = 4 * (q + OH * OW); break;
        case CUDNN_CONVOLUTION_FWD_ALGO_GEMM: b = es * C * R * S * OH * OW; break;
        case CUDNN_CONVOLUTION_FWD_ALGO_FFT: b = 8 * (N * C + K * CG + N * K) * h2 * w2; break;
        case CUDNN_CONVOLUTION_FWD_ALGO_FFT_TILING: b = 8 * (C + K * CG + K) * 32 * 32; break;
        case CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD: b = 4 * 16 * K * CG; break;
        case CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED:
            b = 4 * 36 * (N * C * tiles + K * CG + N * K * tiles);
            break;
        default: b = 0;
        }
        break;
    case BWD_DATA:
        switch (algo) {
        case CUDNN_CONVOLUTION_BWD_DATA_ALGO_0: b = bf16 ? 4 * N * C * H * W : 0; break;
        case CUDNN_CONVOLUTION_BWD_DATA_ALGO_1: b = 4 * (q + H * W); break;
        case CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT: b = 8 * (N * C + K * CG + N * K) * h2 * w2; break;
        case CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT_TILING: b = 8 * (C + K * CG + K) * 32 * 32; break;
        case CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD: b = 4 * 16 * K * CG; break;
        case CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD_NONFUSED:
            b = 4 * 36 * (N * C * tiles + K * CG + N * K * tiles);
            break;
        default: b = 0;
        }
        break;
    case BWD_FILTER:
        switch (algo) {
        case CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0: b = bf16 ? 4 * K * q : 0; break;
        case CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1: b = 4 * K * q + 4 * OH * OW; break;
        case CUDNN_CONVOLUTION_BWD_FILTER_ALGO_3: b = 4 * K * q * (N < 4 ? N : 4); break;
        case CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT:
            b = 8 * (N * C + K * CG + N * K) * h2 * w2;
            break;
        case CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT_TILING:
            b = 8 * (C + K * CG + K) * 32 * 32;
            break;
        case CUDNN_CONVOLUTION_BWD_FILTER_ALGO_WINOGRAD_NONFUSED:
            b = 4 * 36 * (N * C * tiles + K * CG + N * K * tiles);
            break;
        default: b = 0;
        }
        break;
    }
    (void)G;
    if (!b) return 0;
    return round256(b) + (p.tensor_core() ? 1024 : 0);
}

/* The order the algorithm queries list them in (cuDNN's heuristics order
 * them by the problem; the fake's order is fixed, chosen to exercise the
 * caller): forward leads with IMPLICIT_PRECOMP_GEMM, which needs a
 * workspace; backward-data and backward-filter lead with their
 * non-deterministic algorithms, so a caller asking for determinism must
 * filter on the determinism field. */
const int kOrderFwd[] = {CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM,
                         CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM,
                         CUDNN_CONVOLUTION_FWD_ALGO_GEMM,
                         CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED,
                         CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD,
                         CUDNN_CONVOLUTION_FWD_ALGO_FFT_TILING,
                         CUDNN_CONVOLUTION_FWD_ALGO_FFT,
                         CUDNN_CONVOLUTION_FWD_ALGO_DIRECT};
const int kOrderData[] = {CUDNN_CONVOLUTION_BWD_DATA_ALGO_0,
                          CUDNN_CONVOLUTION_BWD_DATA_ALGO_1,
                          CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD_NONFUSED,
                          CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD,
                          CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT_TILING,
                          CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT};
const int kOrderFilter[] = {CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0,
                            CUDNN_CONVOLUTION_BWD_FILTER_ALGO_3,
                            CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1,
                            CUDNN_CONVOLUTION_BWD_FILTER_ALGO_WINOGRAD_NONFUSED,
                            CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT_TILING,
                            CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT,
                            CUDNN_CONVOLUTION_BWD_FILTER_ALGO_WINOGRAD};
const int *algo_order(Dir dir) {
    return dir == FWD ? kOrderFwd : dir == BWD_DATA ? kOrderData : kOrderFilter;
}

/* ---------------- device pointers ---------------- */

/* A data pointer cuDNN dereferences on the device: not NULL, inside one live
 * device allocation of the emulated runtime for all `bytes`, and aligned to
 * `align` (the element size). The pages describe every data argument as
 * "Data pointer to GPU memory associated with the tensor descriptor ..."
 * (BAD_PARAM: "At least one of the following is NULL: handle, xDesc, wDesc,
 * convDesc, yDesc, xData, w, yData, alpha, and beta"); the emulated
 * runtime's allocation table says what is device memory - host memory,
 * pinned host memory, freed memory or a range running past its allocation
 * is refused with CUDNN_STATUS_BAD_PARAM (beyond cuDNN, which would fault on
 * the device or read garbage). Alignment: cudnnStatus_t,
 * CUDNN_STATUS_BAD_PARAM_MISALIGNED_POINTER: "The cuDNN API received a
 * misaligned pointer from the user."; the legacy pages state no alignment,
 * so the fake asks for the element size only (what every kernel assumes);
 * cuDNN's backend API records the alignment per tensor
 * (CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT) and its engines may want 16 bytes. */
Verdict check_device(const char *arg, const void *p, size_t bytes, size_t align) {
    if (!p) return verdict(CUDNN_STATUS_BAD_PARAM_NULL_POINTER, "%s is NULL", arg);
    const void *base = nullptr;
    size_t size = 0;
    sg_emu_mem m = sg_emu_classify(p, bytes, &base, &size);
    if (m != SG_EMU_MEM_DEVICE) {
        const void *b0 = nullptr;
        size_t s0 = 0;
        sg_emu_mem m0 = sg_emu_classify(p, 0, &b0, &s0);
        const char *what = nullptr;
        char buf[256];
        switch (m0) {
        case SG_EMU_MEM_DEVICE:
            snprintf(buf, sizeof buf,
                     "runs past its device allocation (%zu bytes at %p): it needs %zu bytes from "
                     "offset %zu",
                     s0, b0, bytes, (size_t)((const char *)p - (const char *)b0));
            what = buf;
            break;
        case SG_EMU_MEM_PINNED:
            what = "is pinned host memory (cudaMallocHost), not device memory";
            break;
        case SG_EMU_MEM_FREED: what = "is device memory that was freed (cudaFree)"; break;
        default: what = "is host memory (no device allocation holds it)"; break;
        }
        return verdict(CUDNN_STATUS_BAD_PARAM,
                       "%s (%p) %s: cuDNN's data arguments are \"Data pointer to GPU memory\"", arg,
                       p, what);
    }
    if ((uintptr_t)p % align)
        return verdict(CUDNN_STATUS_BAD_PARAM_MISALIGNED_POINTER,
                       "%s (%p) is not aligned to its %zu-byte elements", arg, p, align);
    return Verdict();
}

/* ---------------- the computation ---------------- */

size_t tensor_count(const cudnnTensorStruct &t) { return (size_t)t.n * t.c * t.h * t.w; }
size_t filter_count(const cudnnFilterStruct &f) { return (size_t)f.k * f.c * f.r * f.s; }

/* Memory offsets of logical elements: tensors (n, c, h, w) in NCHW or NHWC,
 * filters (k, c, r, s) in KCRS (NCHW) or KRSC (NHWC). */
size_t toff(const cudnnTensorStruct &t, long n, long c, long h, long w) {
    if (t.fmt == CUDNN_TENSOR_NHWC) return (((size_t)n * t.h + h) * t.w + w) * t.c + c;
    return (((size_t)n * t.c + c) * t.h + h) * t.w + w;
}
size_t foff(const cudnnFilterStruct &f, long k, long c, long r, long s) {
    if (f.fmt == CUDNN_TENSOR_NHWC) return (((size_t)k * f.r + r) * f.s + s) * f.c + c;
    return (((size_t)k * f.c + c) * f.r + r) * f.s + s;
}

double load(const void *p, cudnnDataType_t dt, size_t i, bool tf32) {
    if (dt == CUDNN_DATA_BFLOAT16) return bf16_to_f32(((const uint16_t *)p)[i]);
    float f = ((const float *)p)[i];
    return tf32 ? f32_to_tf32(f) : f;
}
/* out[i] = alpha * v + beta * out[i], the old value not read when beta is 0;
 * computed in double, stored as float (nearest even) or as bf16 from that
 * float (nearest even). */
void store(void *p, cudnnDataType_t dt, size_t i, double v, double alpha, double beta) {
    double r = alpha * v;
    if (dt == CUDNN_DATA_BFLOAT16) {
        uint16_t *q = (uint16_t *)p;
        if (beta != 0.0) r += beta * (double)bf16_to_f32(q[i]);
        q[i] = f32_to_bf16((float)r);
    } else {
        float *q = (float *)p;
        if (beta != 0.0) r += beta * (double)q[i];
        q[i] = (float)r;
    }
}

/* Logical (NCHW / KCRS) double copies of a tensor and a filter. */
std::vector<double> read_tensor(const cudnnTensorStruct &t, const void *p, bool tf32) {
    std::vector<double> v(tensor_count(t));
    size_t i = 0;
    for (long n = 0; n < t.n; n++)
        for (long c = 0; c < t.c; c++)
            for (long h = 0; h < t.h; h++)
                for (long w = 0; w < t.w; w++) v[i++] = load(p, t.dt, toff(t, n, c, h, w), tf32);
    return v;
}
std::vector<double> read_filter(const cudnnFilterStruct &f, const void *p, bool tf32) {
    std::vector<double> v(filter_count(f));
    size_t i = 0;
    for (long k = 0; k < f.k; k++)
        for (long c = 0; c < f.c; c++)
            for (long r = 0; r < f.r; r++)
                for (long s = 0; s < f.s; s++) v[i++] = load(p, f.dt, foff(f, k, c, r, s), tf32);
    return v;
}

/* One queued convolution: everything copied at call time. */
struct Work {
    Problem p;
    int algo;
    const void *in_a, *in_b;
    void *out;
    void *ws;
    size_t ws_bytes;
    double alpha, beta;
};

bool overlap(const void *a, size_t an, const void *b, size_t bn) {
    const char *x = (const char *)a, *y = (const char *)b;
    return an && bn && x < y + bn && y < x + an;
}

void run_work(const Work &wk) {
    const Problem &p = wk.p;
    const cudnnTensorStruct &xt = p.img, &yt = p.out;
    const cudnnFilterStruct &ft = p.flt;
    const size_t xb = tensor_count(xt) * esize(xt.dt), yb = tensor_count(yt) * esize(yt.dt),
                 fb = filter_count(ft) * esize(ft.dt);
    const size_t in_a_b = p.dir == FWD ? xb : p.dir == BWD_DATA ? yb : xb;
    const size_t in_b_b = p.dir == BWD_FILTER ? yb : fb;
    const size_t out_b = p.dir == FWD ? yb : p.dir == BWD_DATA ? xb : fb;
    const Names &nm = kNames[p.dir];
    static const char *const fn[] = {"cudnnConvolutionForward", "cudnnConvolutionBackwardData",
                                     "cudnnConvolutionBackwardFilter"};
    /* beyond cuDNN: a result overlapping an operand or the workspace is a race
     * on the GPU (garbage); here it is a device fault */
    const char *clash = overlap(wk.out, out_b, wk.in_a, in_a_b)      ? nm.in_a
                        : overlap(wk.out, out_b, wk.in_b, in_b_b)    ? nm.in_b
                        : overlap(wk.out, out_b, wk.ws, wk.ws_bytes) ? "workSpace"
                                                                     : nullptr;
    if (clash) {
        sg_emu_fault(cudaErrorLaunchFailure,
                     "emulated cuDNN: %s: the result %s (%p, %zu bytes) overlaps %s: the "
                     "convolution would read what it overwrites",
                     fn[p.dir], nm.out, wk.out, out_b, clash);
        return;
    }
    /* the algorithm's scratch: garbage, as cuDNN leaves it */
    if (wk.ws && wk.ws_bytes) memset(wk.ws, 0xff, wk.ws_bytes);

    const long N = xt.n, C = xt.c, H = xt.h, W = xt.w, K = ft.k, CG = ft.c, R = ft.r, S = ft.s;
    const long OH = p.oh, OW = p.ow, KG = p.kg();
    const long ph = p.cv.ph, pw = p.cv.pw, su = p.cv.su, sv = p.cv.sv, dh = p.cv.dh, dw = p.cv.dw;
    const bool flip = p.cv.mode == CUDNN_CONVOLUTION, tf32 = p.tf32();
    auto X = [&](const std::vector<double> &v, long n, long c, long h, long w) -> double {
        return v[((size_t)(n * C + c) * H + h) * W + w];
    };
    auto Fi = [&](long k, long c, long r, long s) -> size_t {
        if (flip) r = R - 1 - r, s = S - 1 - s;
        return ((size_t)(k * CG + c) * R + r) * S + s;
    };
    auto Yi = [&](long n, long k, long oh, long ow) -> size_t {
        return ((size_t)(n * K + k) * OH + oh) * OW + ow;
    };

    if (p.dir == FWD) {
        std::vector<double> x = read_tensor(xt, wk.in_a, tf32), f = read_filter(ft, wk.in_b, tf32);
        for (long n = 0; n < N; n++)
            for (long k = 0; k < K; k++) {
                const long c0 = (k / KG) * CG;
                for (long oh = 0; oh < OH; oh++)
                    for (long ow = 0; ow < OW; ow++) {
                        double acc = 0.0;
                        for (long c = 0; c < CG; c++)
                            for (long r = 0; r < R; r++) {
                                const long ih = oh * su - ph + r * dh;
                                if (ih < 0 || ih >= H) continue;
                                for (long s = 0; s < S; s++) {
                                    const long iw = ow * sv - pw + s * dw;
                                    if (iw < 0 || iw >= W) continue;
                                    acc += X(x, n, c0 + c, ih, iw) * f[Fi(k, c, r, s)];
                                }
                            }
                        store(wk.out, yt.dt, toff(yt, n, k, oh, ow), acc, wk.alpha, wk.beta);
                    }
            }
        return;
    }
    if (p.dir == BWD_DATA) {
        std::vector<double> dy = read_tensor(yt, wk.in_a, tf32), f = read_filter(ft, wk.in_b, tf32);
        std::vector<double> dx(tensor_count(xt), 0.0);
        for (long n = 0; n < N; n++)
            for (long k = 0; k < K; k++) {
                const long c0 = (k / KG) * CG;
                for (long oh = 0; oh < OH; oh++)
                    for (long ow = 0; ow < OW; ow++) {
                        const double g = dy[Yi(n, k, oh, ow)];
                        for (long c = 0; c < CG; c++)
                            for (long r = 0; r < R; r++) {
                                const long ih = oh * su - ph + r * dh;
                                if (ih < 0 || ih >= H) continue;
                                for (long s = 0; s < S; s++) {
                                    const long iw = ow * sv - pw + s * dw;
                                    if (iw < 0 || iw >= W) continue;
                                    dx[((size_t)(n * C + c0 + c) * H + ih) * W + iw] +=
                                        g * f[Fi(k, c, r, s)];
                                }
                            }
                    }
            }
        size_t i = 0;
        for (long n = 0; n < N; n++)
            for (long c = 0; c < C; c++)
                for (long h = 0; h < H; h++)
                    for (long w = 0; w < W; w++)
                        store(wk.out, xt.dt, toff(xt, n, c, h, w), dx[i++], wk.alpha, wk.beta);
        return;
    }
    std::vector<double> x = read_tensor(xt, wk.in_a, tf32), dy = read_tensor(yt, wk.in_b, tf32);
    std::vector<double> dwv(filter_count(ft), 0.0);
    for (long n = 0; n < N; n++)
        for (long k = 0; k < K; k++) {
            const long c0 = (k / KG) * CG;
            for (long oh = 0; oh < OH; oh++)
                for (long ow = 0; ow < OW; ow++) {
                    const double g = dy[Yi(n, k, oh, ow)];
                    for (long c = 0; c < CG; c++)
                        for (long r = 0; r < R; r++) {
                            const long ih = oh * su - ph + r * dh;
                            if (ih < 0 || ih >= H) continue;
                            for (long s = 0; s < S; s++) {
                                const long iw = ow * sv - pw + s * dw;
                                if (iw < 0 || iw >= W) continue;
                                dwv[Fi(k, c, r, s)] += X(x, n, c0 + c, ih, iw) * g;
                            }
                        }
                }
        }
    size_t i = 0;
    for (long k = 0; k < K; k++)
        for (long c = 0; c < CG; c++)
            for (long r = 0; r < R; r++)
                for (long s = 0; s < S; s++)
                    store(wk.out, ft.dt, foff(ft, k, c, r, s), dwv[i++], wk.alpha, wk.beta);
}

/* ---------------- the shared entry points ---------------- */

/* cudnnConvolutionForward / BackwardData / BackwardFilter. `imgd`, `fltd`,
 * `outd` are the x-, w- and y-shaped descriptors whatever their roles. */
cudnnStatus_t convolve(const char *fn, Dir dir, cudnnHandle_t handle, const void *alpha,
                       cudnnTensorDescriptor_t imgd, cudnnFilterDescriptor_t fltd,
                       cudnnConvolutionDescriptor_t cd, cudnnTensorDescriptor_t outd, int algo,
                       const void *in_a, const void *in_b, void *out, void *ws, size_t ws_size,
                       const void *beta) {
    sg_emu_guard guard;
    Verdict v;
    /* BAD_PARAM: "At least one of the following is NULL: handle, xDesc,
     * wDesc, convDesc, yDesc, xData, w, yData, alpha, and beta" (each
     * page's list, with its own names) */
    if (!(v = check_obj(handle, "handle")).ok()) return refuse(fn, v);
    Problem p;
    if (!(v = check_problem(dir, imgd, fltd, cd, outd, &p)).ok()) return refuse(fn, v);
    if (!(v = algo_support(p, algo)).ok()) return refuse(fn, v);
    const Names &nm = kNames[dir];
    if (!alpha) return refuse(fn, CUDNN_STATUS_BAD_PARAM_NULL_POINTER, "alpha is NULL");
    if (!beta) return refuse(fn, CUDNN_STATUS_BAD_PARAM_NULL_POINTER, "beta is NULL");
    const size_t es = esize(p.img.dt);
    const size_t xb = tensor_count(p.img) * es, yb = tensor_count(p.out) * es,
                 fb = filter_count(p.flt) * es;
    const size_t in_a_b = dir == BWD_DATA ? yb : xb, in_b_b = dir == BWD_FILTER ? yb : fb;
    const size_t out_b = dir == FWD ? yb : dir == BWD_DATA ? xb : fb;
    if (!(v = check_device(nm.in_a, in_a, in_a_b, es)).ok()) return refuse(fn, v);
    if (!(v = check_device(nm.in_b, in_b, in_b_b, es)).ok()) return refuse(fn, v);
    if (!(v = check_device(nm.out, out, out_b, es)).ok()) return refuse(fn, v);
    /* The workspace: the pages describe workSpace as "Data pointer to GPU
     * memory to a workspace needed to be able to execute the specified
     * algorithm. If no workspace is needed for a particular algorithm, that
     * pointer can be nil." and workSpaceSizeInBytes as "the size in bytes
     * of the provided workSpace" (wording from memory), the size needed
     * being what
     * cudnnGetConvolution*WorkspaceSize returns for the algorithm ("the
     * amount of GPU memory workspace the user needs to allocate to be able
     * to call cudnnConvolution*() with the specified algorithm"). A smaller
     * workspace is CUDNN_STATUS_BAD_PARAM (what cuDNN returns: chainer
     * issue 3922, NVIDIA's diagnosis of a CUDNN_STATUS_BAD_PARAM from
     * cudnnConvolutionForward: "the root cause is that work-space size for
     * cuDNN is not sufficient"; cudnnConvolution*AlgoPerf_t says an
     * insufficient workspace fails the algorithm). */
    const size_t need = workspace_bytes(p, algo);
    if (ws_size < need)
        return refuse(fn, CUDNN_STATUS_BAD_PARAM,
                      "workSpaceSizeInBytes is %zu but algo %s (%d) needs %zu bytes with math "
                      "type %d (the workspace query's answer for this algorithm and math type)",
                      ws_size, algo_name(dir, algo), algo, need, (int)p.cv.math);
    if (need && !ws)
        return refuse(fn, CUDNN_STATUS_BAD_PARAM_NULL_POINTER,
                      "workSpace is NULL but algo %s (%d) needs %zu bytes", algo_name(dir, algo),
                      algo, need);
    /* beyond cuDNN: a workspace must own the bytes its size claims */
    if (ws && !(v = check_device("workSpace", ws, ws_size, 1)).ok()) return refuse(fn, v);

    Work wk;
    wk.p = p;
    wk.algo = algo;
    wk.in_a = in_a;
    wk.in_b = in_b;
    wk.out = out;
    wk.ws = need ? ws : nullptr;
    wk.ws_bytes = need;
    /* alpha and beta: "Pointers to scaling factors (in host memory) used to
     * blend the computation result with prior value in the output layer";
     * float for float and bf16 data (cuDNN's "Scaling Parameters": double
     * only for double data; wording from memory). Read now, as cuDNN
     * does. */
    wk.alpha = *(const float *)alpha;
    wk.beta = *(const float *)beta;
    std::vector<sg_emu_use> uses;
    uses.push_back({in_a, in_a_b});
    uses.push_back({in_b, in_b_b});
    uses.push_back({out, out_b});
    if (wk.ws) uses.push_back({wk.ws, wk.ws_bytes});
    static const char *const what[] = {"cudnnConvolutionForward", "cudnnConvolutionBackwardData",
                                       "cudnnConvolutionBackwardFilter"};
    cudaError_t e =
        sg_emu_enqueue(handle->stream, what[dir], std::move(uses), [wk]() { run_work(wk); });
    if (e != cudaSuccess)
        /* "CUDNN_STATUS_EXECUTION_FAILED: The function failed to launch on the GPU." */
        return refuse(fn, CUDNN_STATUS_EXECUTION_FAILED_CUDART,
                      "the emulated runtime refused to queue the work on the handle's stream: %s",
                      cudaGetErrorName(e));
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t workspace_query(const char *fn, Dir dir, cudnnHandle_t handle,
                              cudnnTensorDescriptor_t imgd, cudnnFilterDescriptor_t fltd,
                              cudnnConvolutionDescriptor_t cd, cudnnTensorDescriptor_t outd,
                              int algo, size_t *size) {
    sg_emu_guard guard;
    Verdict v;
    /* cudnnGetConvolutionForwardWorkspaceSize, CUDNN_STATUS_BAD_PARAM: "One
     * of the parameters handle, xDesc, wDesc, convDesc, or yDesc is NULL."
     * and the descriptor mismatches; CUDNN_STATUS_NOT_SUPPORTED: "The
     * combination of the tensor descriptors, filter descriptor, and
     * convolution descriptor is not supported for the specified
     * algorithm." (the second checked against a paraphrase, the first from
     * memory) */
    if (!(v = check_obj(handle, "handle")).ok()) return refuse(fn, v);
    if (!size) return refuse(fn, CUDNN_STATUS_BAD_PARAM_NULL_POINTER, "sizeInBytes is NULL");
    Problem p;
    if (!(v = check_problem(dir, imgd, fltd, cd, outd, &p)).ok()) return refuse(fn, v);
    if (!(v = algo_support(p, algo)).ok()) return refuse(fn, v);
    *size = workspace_bytes(p, algo);
    return CUDNN_STATUS_SUCCESS;
}

/* cudnnGetConvolution*Algorithm_v7 (heuristics) and cudnnFind*Algorithm
 * (measured: the handle's stream drained first, as cuDNN's search runs
 * synchronously). Every algorithm of the direction is listed, those that
 * run the problem first (status CUDNN_STATUS_SUCCESS) in the fake's order,
 * then the others with the status their workspace query would give. */
template <typename Perf, typename Algo>
cudnnStatus_t list_algos(const char *fn, Dir dir, bool find, cudnnHandle_t handle,
                         cudnnTensorDescriptor_t imgd, cudnnFilterDescriptor_t fltd,
                         cudnnConvolutionDescriptor_t cd, cudnnTensorDescriptor_t outd,
                         int requested, int *returned, Perf *perf) {
    sg_emu_guard guard;
    Verdict v;
    /* cudnnGetConvolutionForwardAlgorithm_v7, CUDNN_STATUS_BAD_PARAM: "One
     * of the parameters handle, xDesc, wDesc, convDesc, yDesc, perfResults,
     * returnedAlgoCount is NULL." ... "requestedAlgoCount is less than or
     * equal to 0." (cudnnFindConvolutionForwardAlgorithm: "Either
     * returnedCount or perfResults is nil." "requestedCount is less than 1.")
     * (wording from memory) */
    if (!(v = check_obj(handle, "handle")).ok()) return refuse(fn, v);
    if (!returned)
        return refuse(fn, CUDNN_STATUS_BAD_PARAM_NULL_POINTER, "returnedAlgoCount is NULL");
    if (!perf) return refuse(fn, CUDNN_STATUS_BAD_PARAM_NULL_POINTER, "perfResults is NULL");
    if (requested <= 0)
        return refuse(fn, CUDNN_STATUS_BAD_PARAM,
                      "requestedAlgoCount is %d (\"requestedAlgoCount is less than or equal to "
                      "0\")",
                      requested);
    Problem p;
    v = check_problem(dir, imgd, fltd, cd, outd, &p);
    /* a configuration no algorithm runs is not the query's failure: every
     * entry then carries the refusal */
    if (!v.ok() && CUDNN_STATUS_CATEGORY(v.st) != CUDNN_STATUS_NOT_SUPPORTED) return refuse(fn, v);
    const bool config_ok = v.ok();
    if (find) sg_emu_drain(handle->stream);
    const int count = algo_count(dir);
    const int *order = algo_order(dir);
    int n = 0;
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < count && n < requested; i++) {
            const int a = order[i];
            const Verdict av = config_ok ? algo_support(p, a) : v;
            if (av.ok() != (pass == 0)) continue;
            Perf &r = perf[n];
            memset(&r, 0, sizeof r);
            r.algo = (Algo)a;
            r.status = av.st;
            r.memory = av.ok() ? workspace_bytes(p, a) : 0;
            /* a "measurement" that orders the list: 0.1 ms per rank */
            r.time = av.ok() && find ? 0.1f * (float)(n + 1) : -1.0f;
            r.determinism = determinism(dir, a);
            r.mathType = cd->math; /* "The math type provided to the algorithm." */
            n++;
        }
    *returned = n;
    return CUDNN_STATUS_SUCCESS;
}

} // namespace

/* ================= the API ================= */

extern "C" {

/* ---- library and handle (cudnn-graph-library) ---- */

/* cudnnGetVersion: "This function returns the version number of the cuDNN
 * library. It returns the CUDNN_VERSION defined present in the cudnn.h
 * header file." (wording from memory) - the headers this is built with. */
size_t CUDNNWINAPI cudnnGetVersion(void) {
    sg_emu_guard guard;
    return CUDNN_VERSION;
}

/* The enumerant's own name, as cuDNN 9's cudnnGetErrorString returns it. */
const char *CUDNNWINAPI cudnnGetErrorString(cudnnStatus_t status) {
    sg_emu_guard guard;
    switch ((int)status) {
#define NAME(x) \
    case x: return #x;
        NAME(CUDNN_STATUS_SUCCESS)
        NAME(CUDNN_STATUS_NOT_INITIALIZED)
        NAME(CUDNN_STATUS_SUBLIBRARY_VERSION_MISMATCH)
        NAME(CUDNN_STATUS_SERIALIZATION_VERSION_MISMATCH)
        NAME(CUDNN_STATUS_DEPRECATED)
        NAME(CUDNN_STATUS_LICENSE_ERROR)
        NAME(CUDNN_STATUS_RUNTIME_IN_PROGRESS)
        NAME(CUDNN_STATUS_RUNTIME_FP_OVERFLOW)
        NAME(CUDNN_STATUS_SUBLIBRARY_LOADING_FAILED)
        NAME(CUDNN_STATUS_BAD_PARAM)
        NAME(CUDNN_STATUS_BAD_PARAM_NULL_POINTER)
        NAME(CUDNN_STATUS_BAD_PARAM_MISALIGNED_POINTER)
        NAME(CUDNN_STATUS_BAD_PARAM_NOT_FINALIZED)
        NAME(CUDNN_STATUS_BAD_PARAM_OUT_OF_BOUND)
        NAME(CUDNN_STATUS_BAD_PARAM_SIZE_INSUFFICIENT)
        NAME(CUDNN_STATUS_BAD_PARAM_STREAM_MISMATCH)
        NAME(CUDNN_STATUS_BAD_PARAM_SHAPE_MISMATCH)
        NAME(CUDNN_STATUS_BAD_PARAM_DUPLICATED_ENTRIES)
        NAME(CUDNN_STATUS_BAD_PARAM_ATTRIBUTE_TYPE)
        NAME(CUDNN_STATUS_BAD_PARAM_CUDA_GRAPH_MISMATCH)
        NAME(CUDNN_STATUS_BAD_PARAM_DESCRIPTOR_TYPE)
        NAME(CUDNN_STATUS_NOT_SUPPORTED)
        NAME(CUDNN_STATUS_NOT_SUPPORTED_GRAPH_PATTERN)
        NAME(CUDNN_STATUS_NOT_SUPPORTED_SHAPE)
        NAME(CUDNN_STATUS_NOT_SUPPORTED_DATA_TYPE)
        NAME(CUDNN_STATUS_NOT_SUPPORTED_LAYOUT)
        NAME(CUDNN_STATUS_NOT_SUPPORTED_INCOMPATIBLE_CUDA_DRIVER)
        NAME(CUDNN_STATUS_NOT_SUPPORTED_INCOMPATIBLE_CUDART)
        NAME(CUDNN_STATUS_NOT_SUPPORTED_ARCH_MISMATCH)
        NAME(CUDNN_STATUS_NOT_SUPPORTED_RUNTIME_PREREQUISITE_MISSING)
        NAME(CUDNN_STATUS_NOT_SUPPORTED_SUBLIBRARY_UNAVAILABLE)
        NAME(CUDNN_STATUS_NOT_SUPPORTED_SHARED_MEMORY_INSUFFICIENT)
        NAME(CUDNN_STATUS_NOT_SUPPORTED_PADDING)
        NAME(CUDNN_STATUS_NOT_SUPPORTED_BAD_LAUNCH_PARAM)
        NAME(CUDNN_STATUS_NOT_SUPPORTED_CUDA_GRAPH_NATIVE_API)
        NAME(CUDNN_STATUS_NOT_SUPPORTED_INVALID_DYNAMIC_SHAPE)
        NAME(CUDNN_STATUS_INTERNAL_ERROR)
        NAME(CUDNN_STATUS_INTERNAL_ERROR_COMPILATION_FAILED)
        NAME(CUDNN_STATUS_INTERNAL_ERROR_UNEXPECTED_VALUE)
        NAME(CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED)
        NAME(CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED)
        NAME(CUDNN_STATUS_INTERNAL_ERROR_BAD_LAUNCH_PARAM)
        NAME(CUDNN_STATUS_INTERNAL_ERROR_TEXTURE_CREATION_FAILED)
        NAME(CUDNN_STATUS_EXECUTION_FAILED)
        NAME(CUDNN_STATUS_EXECUTION_FAILED_CUDA_DRIVER)
        NAME(CUDNN_STATUS_EXECUTION_FAILED_CUBLAS)
        NAME(CUDNN_STATUS_EXECUTION_FAILED_CUDART)
        NAME(CUDNN_STATUS_EXECUTION_FAILED_CURAND)
#undef NAME
    case 2001: return "CUDNN_STATUS_INVALID_VALUE"; /* deprecated, its own value */
    default: return "CUDNN_UNKNOWN_STATUS";
    }
}

/* cudnnCreate, CUDNN_STATUS_BAD_PARAM: "Invalid (NULL) pointer supplied."
 * (wording from memory) */
cudnnStatus_t CUDNNWINAPI cudnnCreate(cudnnHandle_t *handle) {
    sg_emu_guard guard;
    if (!handle)
        return refuse("cudnnCreate", CUDNN_STATUS_BAD_PARAM_NULL_POINTER, "handle is NULL");
    cudnnContext *h = new cudnnContext();
    h->stream = nullptr;
    live().insert(h);
    *handle = h;
    return CUDNN_STATUS_SUCCESS;
}

/* cudnnDestroy: "Because cudnnCreate allocates some internal resources, the
 * release of those resources by calling cudnnDestroy will implicitly call
 * cudaDeviceSynchronize" - the whole device drains. */
cudnnStatus_t CUDNNWINAPI cudnnDestroy(cudnnHandle_t handle) {
    sg_emu_guard guard;
    Verdict v = check_obj(handle, "handle");
    if (!v.ok()) return refuse("cudnnDestroy", v);
    sg_emu_drain(nullptr);
    live().erase(handle);
    delete handle;
    return CUDNN_STATUS_SUCCESS;
}

/* cudnnSetStream, CUDNN_STATUS_BAD_PARAM: "Invalid (NULL) handle." (wording
 * from memory) The stream is the runtime's to check when work is queued on
 * it. */
cudnnStatus_t CUDNNWINAPI cudnnSetStream(cudnnHandle_t handle, cudaStream_t streamId) {
    sg_emu_guard guard;
    Verdict v = check_obj(handle, "handle");
    if (!v.ok()) return refuse("cudnnSetStream", v);
    handle->stream = streamId;
    return CUDNN_STATUS_SUCCESS;
}

/* ---- tensor descriptors (cudnn-ops-library; cudnn_ops.h) ---- */

/* cudnnCreateTensorDescriptor: a NULL tensorDesc has nowhere to write. */
cudnnStatus_t CUDNNWINAPI cudnnCreateTensorDescriptor(cudnnTensorDescriptor_t *tensorDesc) {
    sg_emu_guard guard;
    if (!tensorDesc)
        return refuse("cudnnCreateTensorDescriptor", CUDNN_STATUS_BAD_PARAM_NULL_POINTER,
                      "tensorDesc is NULL");
    cudnnTensorStruct *t = new cudnnTensorStruct();
    live().insert(t);
    *tensorDesc = t;
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t CUDNNWINAPI cudnnDestroyTensorDescriptor(cudnnTensorDescriptor_t tensorDesc) {
    sg_emu_guard guard;
    if (!tensorDesc) return CUDNN_STATUS_SUCCESS; /* nothing to release */
    Verdict v = check_obj(tensorDesc, "tensorDesc");
    if (!v.ok()) return refuse("cudnnDestroyTensorDescriptor", v);
    live().erase(tensorDesc);
    delete tensorDesc;
    return CUDNN_STATUS_SUCCESS;
}

/* cudnnSetTensor4dDescriptor, Returns: "CUDNN_STATUS_BAD_PARAM: At least one
 * of the parameters n, c, h, w was negative or format has an invalid
 * enumerant value or dataType has an invalid enumerant value." and
 * "CUDNN_STATUS_NOT_SUPPORTED: The total size of the tensor descriptor
 * exceeds the maximum limit of 2 Giga-elements." A zero extent is refused
 * too, as cudnnSetTensorNdDescriptor documents it ("At least one of the
 * elements of the array dimA was negative or zero"). */
cudnnStatus_t CUDNNWINAPI cudnnSetTensor4dDescriptor(cudnnTensorDescriptor_t tensorDesc,
                                                     cudnnTensorFormat_t format,
                                                     cudnnDataType_t dataType, int n, int c, int h,
                                                     int w) {
    sg_emu_guard guard;
    static const char fn[] = "cudnnSetTensor4dDescriptor";
    Verdict v = check_obj(tensorDesc, "tensorDesc");
    if (!v.ok()) return refuse(fn, v);
    if (n <= 0 || c <= 0 || h <= 0 || w <= 0)
        return refuse(fn, CUDNN_STATUS_BAD_PARAM,
                      "n=%d c=%d h=%d w=%d: every extent must be positive (\"At least one of the "
                      "parameters n, c, h, w was negative\")",
                      n, c, h, w);
    if (!valid_fmt(format))
        return refuse(fn, CUDNN_STATUS_BAD_PARAM, "format %d is no cudnnTensorFormat_t enumerant",
                      (int)format);
    if (!valid_dt(dataType))
        return refuse(fn, CUDNN_STATUS_BAD_PARAM, "dataType %d is no cudnnDataType_t enumerant",
                      (int)dataType);
    if (format == CUDNN_TENSOR_NCHW_VECT_C)
        return refuse(fn, CUDNN_STATUS_NOT_SUPPORTED,
                      "format CUDNN_TENSOR_NCHW_VECT_C: not emulated (a limit of the fake)");
    if ((double)n * c * h * w > 2147483647.0)
        return refuse(fn, CUDNN_STATUS_NOT_SUPPORTED,
                      "%d x %d x %d x %d elements: \"The total size of the tensor descriptor "
                      "exceeds the maximum limit of 2 Giga-elements\"",
                      n, c, h, w);
    tensorDesc->set = true;
    tensorDesc->fmt = format;
    tensorDesc->dt = dataType;
    tensorDesc->n = n;
    tensorDesc->c = c;
    tensorDesc->h = h;
    tensorDesc->w = w;
    return CUDNN_STATUS_SUCCESS;
}

/* ---- filter descriptors (cudnn-ops-library; cudnn_ops.h) ---- */

cudnnStatus_t CUDNNWINAPI cudnnCreateFilterDescriptor(cudnnFilterDescriptor_t *filterDesc) {
    sg_emu_guard guard;
    if (!filterDesc)
        return refuse("cudnnCreateFilterDescriptor", CUDNN_STATUS_BAD_PARAM_NULL_POINTER,
                      "filterDesc is NULL");
    cudnnFilterStruct *f = new cudnnFilterStruct();
    live().insert(f);
    *filterDesc = f;
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t CUDNNWINAPI cudnnDestroyFilterDescriptor(cudnnFilterDescriptor_t filterDesc) {
    sg_emu_guard guard;
    if (!filterDesc) return CUDNN_STATUS_SUCCESS;
    Verdict v = check_obj(filterDesc, "filterDesc");
    if (!v.ok()) return refuse("cudnnDestroyFilterDescriptor", v);
    live().erase(filterDesc);
    delete filterDesc;
    return CUDNN_STATUS_SUCCESS;
}

/* cudnnSetFilter4dDescriptor, Returns: "CUDNN_STATUS_BAD_PARAM: At least one
 * of the parameters k, c, h, w is negative or dataType or format has an
 * invalid enumerant value." (zero refused too, as for tensors). format:
 * "If this input is set to CUDNN_TENSOR_NCHW ... the filter layout is in
 * the form of KCRS ... if this input is set to CUDNN_TENSOR_NHWC, then the
 * layout of the filter is ... KRSC." */
cudnnStatus_t CUDNNWINAPI cudnnSetFilter4dDescriptor(cudnnFilterDescriptor_t filterDesc,
                                                     cudnnDataType_t dataType,
                                                     cudnnTensorFormat_t format, int k, int c,
                                                     int h, int w) {
    sg_emu_guard guard;
    static const char fn[] = "cudnnSetFilter4dDescriptor";
    Verdict v = check_obj(filterDesc, "filterDesc");
    if (!v.ok()) return refuse(fn, v);
    if (k <= 0 || c <= 0 || h <= 0 || w <= 0)
        return refuse(fn, CUDNN_STATUS_BAD_PARAM,
                      "k=%d c=%d h=%d w=%d: every extent must be positive (\"At least one of the "
                      "parameters k, c, h, w is negative\")",
                      k, c, h, w);
    if (!valid_dt(dataType))
        return refuse(fn, CUDNN_STATUS_BAD_PARAM, "dataType %d is no cudnnDataType_t enumerant",
                      (int)dataType);
    if (!valid_fmt(format))
        return refuse(fn, CUDNN_STATUS_BAD_PARAM, "format %d is no cudnnTensorFormat_t enumerant",
                      (int)format);
    if (format == CUDNN_TENSOR_NCHW_VECT_C)
        return refuse(fn, CUDNN_STATUS_NOT_SUPPORTED,
                      "format CUDNN_TENSOR_NCHW_VECT_C: not emulated (a limit of the fake)");
    filterDesc->set = true;
    filterDesc->dt = dataType;
    filterDesc->fmt = format;
    filterDesc->k = k;
    filterDesc->c = c;
    filterDesc->r = h;
    filterDesc->s = w;
    return CUDNN_STATUS_SUCCESS;
}

/* ---- convolution descriptors (cudnn-cnn-library; cudnn_cnn.h) ---- */

cudnnStatus_t CUDNNWINAPI cudnnCreateConvolutionDescriptor(cudnnConvolutionDescriptor_t *convDesc) {
    sg_emu_guard guard;
    if (!convDesc)
        return refuse("cudnnCreateConvolutionDescriptor", CUDNN_STATUS_BAD_PARAM_NULL_POINTER,
                      "convDesc is NULL");
    cudnnConvolutionStruct *c = new cudnnConvolutionStruct();
    c->groups = 1;
    c->math = CUDNN_DEFAULT_MATH;
    c->mode = CUDNN_CROSS_CORRELATION;
    c->compute = CUDNN_DATA_FLOAT;
    live().insert(c);
    *convDesc = c;
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t CUDNNWINAPI cudnnDestroyConvolutionDescriptor(cudnnConvolutionDescriptor_t convDesc) {
    sg_emu_guard guard;
    if (!convDesc) return CUDNN_STATUS_SUCCESS;
    Verdict v = check_obj(convDesc, "convDesc");
    if (!v.ok()) return refuse("cudnnDestroyConvolutionDescriptor", v);
    live().erase(convDesc);
    delete convDesc;
    return CUDNN_STATUS_SUCCESS;
}

/* cudnnSetConvolution2dDescriptor, Returns, CUDNN_STATUS_BAD_PARAM: "At least
 * one of the following conditions are met: The descriptor convDesc is nil.
 * One of the parameters pad_h, pad_w is strictly negative. One of the
 * parameters u, v is negative or zero. One of the parameters dilation_h,
 * dilation_w is negative or zero. The parameter mode has an invalid
 * enumerant value." */
cudnnStatus_t CUDNNWINAPI cudnnSetConvolution2dDescriptor(cudnnConvolutionDescriptor_t convDesc,
                                                          int pad_h, int pad_w, int u, int v,
                                                          int dilation_h, int dilation_w,
                                                          cudnnConvolutionMode_t mode,
                                                          cudnnDataType_t computeType) {
    sg_emu_guard guard;
    static const char fn[] = "cudnnSetConvolution2dDescriptor";
    Verdict vd = check_obj(convDesc, "convDesc");
    if (!vd.ok()) return refuse(fn, vd);
    if (pad_h < 0 || pad_w < 0)
        return refuse(fn, CUDNN_STATUS_BAD_PARAM,
                      "pad_h=%d pad_w=%d: \"One of the parameters pad_h, pad_w is strictly "
                      "negative\"",
                      pad_h, pad_w);
    if (u <= 0 || v <= 0)
        return refuse(fn, CUDNN_STATUS_BAD_PARAM,
                      "u=%d v=%d: \"One of the parameters u, v is negative or zero\"", u, v);
    if (dilation_h <= 0 || dilation_w <= 0)
        return refuse(fn, CUDNN_STATUS_BAD_PARAM,
                      "dilation_h=%d dilation_w=%d: \"One of the parameters dilation_h, dilation_w "
                      "is negative or zero\"",
                      dilation_h, dilation_w);
    if (mode != CUDNN_CONVOLUTION && mode != CUDNN_CROSS_CORRELATION)
        return refuse(fn, CUDNN_STATUS_BAD_PARAM,
                      "mode %d: \"The parameter mode has an invalid enumerant value\"", (int)mode);
    if (!valid_dt(computeType))
        return refuse(fn, CUDNN_STATUS_BAD_PARAM, "computeType %d is no cudnnDataType_t enumerant",
                      (int)computeType);
    convDesc->set = true;
    convDesc->ph = pad_h;
    convDesc->pw = pad_w;
    convDesc->su = u;
    convDesc->sv = v;
    convDesc->dh = dilation_h;
    convDesc->dw = dilation_w;
    convDesc->mode = mode;
    convDesc->compute = computeType;
    return CUDNN_STATUS_SUCCESS;
}

/* cudnnSetConvolutionGroupCount: "groupCount: Input. Number of groups to be
 * used in the associated convolution."; CUDNN_STATUS_BAD_PARAM: "Invalid
 * convolution descriptor." (wording from memory). A count below 1 describes
 * no convolution and is refused here (the page does not spell that case
 * out). */
cudnnStatus_t CUDNNWINAPI cudnnSetConvolutionGroupCount(cudnnConvolutionDescriptor_t convDesc,
                                                        int groupCount) {
    sg_emu_guard guard;
    static const char fn[] = "cudnnSetConvolutionGroupCount";
    Verdict v = check_obj(convDesc, "convDesc");
    if (!v.ok()) return refuse(fn, v);
    if (groupCount < 1)
        return refuse(fn, CUDNN_STATUS_BAD_PARAM, "groupCount %d: must be 1 or more", groupCount);
    convDesc->groups = groupCount;
    return CUDNN_STATUS_SUCCESS;
}

/* cudnnSetConvolutionMathType, CUDNN_STATUS_BAD_PARAM: "Invalid convolution
 * descriptor." (wording from memory; and a mathType that is no
 * cudnnMathType_t enumerant). */
cudnnStatus_t CUDNNWINAPI cudnnSetConvolutionMathType(cudnnConvolutionDescriptor_t convDesc,
                                                      cudnnMathType_t mathType) {
    sg_emu_guard guard;
    static const char fn[] = "cudnnSetConvolutionMathType";
    Verdict v = check_obj(convDesc, "convDesc");
    if (!v.ok()) return refuse(fn, v);
    if ((int)mathType < CUDNN_DEFAULT_MATH || (int)mathType > CUDNN_FMA_MATH)
        return refuse(fn, CUDNN_STATUS_BAD_PARAM, "mathType %d is no cudnnMathType_t enumerant",
                      (int)mathType);
    convDesc->math = mathType;
    return CUDNN_STATUS_SUCCESS;
}

/* cudnnGetConvolution2dForwardOutputDim, Returns, CUDNN_STATUS_BAD_PARAM: "At
 * least one of the following conditions are met: One of the parameters
 * convDesc, inputTensorDesc, and filterDesc is nil. The dimension of the
 * filter descriptor and input tensor differ. The data type of the filter
 * descriptor and input tensor differ. The numbers of feature maps of the
 * filter descriptor and input tensor differ." (wording from memory; per
 * group, with groups) - and a dilated filter larger than the padded input,
 * whose output size would be below 1. */
cudnnStatus_t CUDNNWINAPI cudnnGetConvolution2dForwardOutputDim(
    const cudnnConvolutionDescriptor_t convDesc, const cudnnTensorDescriptor_t inputTensorDesc,
    const cudnnFilterDescriptor_t filterDesc, int *n, int *c, int *h, int *w) {
    sg_emu_guard guard;
    static const char fn[] = "cudnnGetConvolution2dForwardOutputDim";
    Verdict v;
    if (!(v = check_obj(convDesc, "convDesc")).ok()) return refuse(fn, v);
    if (!(v = check_obj(inputTensorDesc, "inputTensorDesc")).ok()) return refuse(fn, v);
    if (!(v = check_obj(filterDesc, "filterDesc")).ok()) return refuse(fn, v);
    if (!n || !c || !h || !w)
        return refuse(fn, CUDNN_STATUS_BAD_PARAM_NULL_POINTER,
                      "an output pointer (n, c, h, w) is NULL");
    const cudnnConvolutionStruct &cv = *convDesc;
    const cudnnTensorStruct &x = *inputTensorDesc;
    const cudnnFilterStruct &f = *filterDesc;
    if (!cv.set || !x.set || !f.set)
        return refuse(fn, CUDNN_STATUS_BAD_PARAM, "%s was created but never set",
                      !cv.set  ? "convDesc"
                      : !x.set ? "inputTensorDesc"
                               : "filterDesc");
    if (x.dt != f.dt)
        return refuse(fn, CUDNN_STATUS_BAD_PARAM,
                      "inputTensorDesc is %s, filterDesc %s: \"The data type of the filter "
                      "descriptor and input tensor differ\"",
                      dt_name(x.dt), dt_name(f.dt));
    if ((long)x.c != (long)f.c * cv.groups)
        return refuse(fn, CUDNN_STATUS_BAD_PARAM,
                      "inputTensorDesc has %d channels, filterDesc %d per group with %d group(s): "
                      "\"The numbers of feature maps of the filter descriptor and input tensor "
                      "differ\"",
                      x.c, f.c, cv.groups);
    long oh = out_dim(x.h, cv.ph, f.r, cv.dh, cv.su), ow = out_dim(x.w, cv.pw, f.s, cv.dw, cv.sv);
    if (oh < 1 || ow < 1)
        return refuse(fn, CUDNN_STATUS_BAD_PARAM,
                      "the dilated %dx%d filter (dilation %dx%d) is larger than the padded %dx%d "
                      "input (pad %dx%d): no output",
                      f.r, f.s, cv.dh, cv.dw, x.h, x.w, cv.ph, cv.pw);
    *n = x.n;
    *c = f.k;
    *h = (int)oh;
    *w = (int)ow;
    return CUDNN_STATUS_SUCCESS;
}

/* ---- algorithm queries ---- */

cudnnStatus_t CUDNNWINAPI cudnnGetConvolutionForwardAlgorithm_v7(
    cudnnHandle_t handle, const cudnnTensorDescriptor_t srcDesc,
    const cudnnFilterDescriptor_t filterDesc, const cudnnConvolutionDescriptor_t convDesc,
    const cudnnTensorDescriptor_t destDesc, const int requestedAlgoCount, int *returnedAlgoCount,
    cudnnConvolutionFwdAlgoPerf_t *perfResults) {
    return list_algos<cudnnConvolutionFwdAlgoPerf_t, cudnnConvolutionFwdAlgo_t>(
        "cudnnGetConvolutionForwardAlgorithm_v7", FWD, false, handle, srcDesc, filterDesc, convDesc,
        destDesc, requestedAlgoCount, returnedAlgoCount, perfResults);
}

cudnnStatus_t CUDNNWINAPI cudnnFindConvolutionForwardAlgorithm(
    cudnnHandle_t handle, const cudnnTensorDescriptor_t xDesc, const cudnnFilterDescriptor_t wDesc,
    const cudnnConvolutionDescriptor_t convDesc, const cudnnTensorDescriptor_t yDesc,
    const int requestedAlgoCount, int *returnedAlgoCount,
    cudnnConvolutionFwdAlgoPerf_t *perfResults) {
    return list_algos<cudnnConvolutionFwdAlgoPerf_t, cudnnConvolutionFwdAlgo_t>(
        "cudnnFindConvolutionForwardAlgorithm", FWD, true, handle, xDesc, wDesc, convDesc, yDesc,
        requestedAlgoCount, returnedAlgoCount, perfResults);
}

cudnnStatus_t CUDNNWINAPI cudnnGetConvolutionBackwardDataAlgorithm_v7(
    cudnnHandle_t handle, const cudnnFilterDescriptor_t filterDesc,
    const cudnnTensorDescriptor_t diffDesc, const cudnnConvolutionDescriptor_t convDesc,
    const cudnnTensorDescriptor_t gradDesc, const int requestedAlgoCount, int *returnedAlgoCount,
    cudnnConvolutionBwdDataAlgoPerf_t *perfResults) {
    return list_algos<cudnnConvolutionBwdDataAlgoPerf_t, cudnnConvolutionBwdDataAlgo_t>(
        "cudnnGetConvolutionBackwardDataAlgorithm_v7", BWD_DATA, false, handle, gradDesc,
        filterDesc, convDesc, diffDesc, requestedAlgoCount, returnedAlgoCount, perfResults);
}

cudnnStatus_t CUDNNWINAPI cudnnFindConvolutionBackwardDataAlgorithm(
    cudnnHandle_t handle, const cudnnFilterDescriptor_t wDesc, const cudnnTensorDescriptor_t dyDesc,
    const cudnnConvolutionDescriptor_t convDesc, const cudnnTensorDescriptor_t dxDesc,
    const int requestedAlgoCount, int *returnedAlgoCount,
    cudnnConvolutionBwdDataAlgoPerf_t *perfResults) {
    return list_algos<cudnnConvolutionBwdDataAlgoPerf_t, cudnnConvolutionBwdDataAlgo_t>(
        "cudnnFindConvolutionBackwardDataAlgorithm", BWD_DATA, true, handle, dxDesc, wDesc,
        convDesc, dyDesc, requestedAlgoCount, returnedAlgoCount, perfResults);
}

cudnnStatus_t CUDNNWINAPI cudnnGetConvolutionBackwardFilterAlgorithm_v7(
    cudnnHandle_t handle, const cudnnTensorDescriptor_t srcDesc,
    const cudnnTensorDescriptor_t diffDesc, const cudnnConvolutionDescriptor_t convDesc,
    const cudnnFilterDescriptor_t gradDesc, const int requestedAlgoCount, int *returnedAlgoCount,
    cudnnConvolutionBwdFilterAlgoPerf_t *perfResults) {
    return list_algos<cudnnConvolutionBwdFilterAlgoPerf_t, cudnnConvolutionBwdFilterAlgo_t>(
        "cudnnGetConvolutionBackwardFilterAlgorithm_v7", BWD_FILTER, false, handle, srcDesc,
        gradDesc, convDesc, diffDesc, requestedAlgoCount, returnedAlgoCount, perfResults);
}

cudnnStatus_t CUDNNWINAPI cudnnFindConvolutionBackwardFilterAlgorithm(
    cudnnHandle_t handle, const cudnnTensorDescriptor_t xDesc, const cudnnTensorDescriptor_t dyDesc,
    const cudnnConvolutionDescriptor_t convDesc, const cudnnFilterDescriptor_t dwDesc,
    const int requestedAlgoCount, int *returnedAlgoCount,
    cudnnConvolutionBwdFilterAlgoPerf_t *perfResults) {
    return list_algos<cudnnConvolutionBwdFilterAlgoPerf_t, cudnnConvolutionBwdFilterAlgo_t>(
        "cudnnFindConvolutionBackwardFilterAlgorithm", BWD_FILTER, true, handle, xDesc, dwDesc,
        convDesc, dyDesc, requestedAlgoCount, returnedAlgoCount, perfResults);
}

/* ---- workspace sizes ---- */

cudnnStatus_t CUDNNWINAPI cudnnGetConvolutionForwardWorkspaceSize(
    cudnnHandle_t handle, const cudnnTensorDescriptor_t xDesc, const cudnnFilterDescriptor_t wDesc,
    const cudnnConvolutionDescriptor_t convDesc, const cudnnTensorDescriptor_t yDesc,
    cudnnConvolutionFwdAlgo_t algo, size_t *sizeInBytes) {
    return workspace_query("cudnnGetConvolutionForwardWorkspaceSize", FWD, handle, xDesc, wDesc,
                           convDesc, yDesc, (int)algo, sizeInBytes);
}

cudnnStatus_t CUDNNWINAPI cudnnGetConvolutionBackwardDataWorkspaceSize(
    cudnnHandle_t handle, const cudnnFilterDescriptor_t wDesc, const cudnnTensorDescriptor_t dyDesc,
    const cudnnConvolutionDescriptor_t convDesc, const cudnnTensorDescriptor_t dxDesc,
    cudnnConvolutionBwdDataAlgo_t algo, size_t *sizeInBytes) {
    return workspace_query("cudnnGetConvolutionBackwardDataWorkspaceSize", BWD_DATA, handle, dxDesc,
                           wDesc, convDesc, dyDesc, (int)algo, sizeInBytes);
}

cudnnStatus_t CUDNNWINAPI cudnnGetConvolutionBackwardFilterWorkspaceSize(
    cudnnHandle_t handle, const cudnnTensorDescriptor_t xDesc, const cudnnTensorDescriptor_t dyDesc,
    const cudnnConvolutionDescriptor_t convDesc, const cudnnFilterDescriptor_t gradDesc,
    cudnnConvolutionBwdFilterAlgo_t algo, size_t *sizeInBytes) {
    return workspace_query("cudnnGetConvolutionBackwardFilterWorkspaceSize", BWD_FILTER, handle,
                           xDesc, gradDesc, convDesc, dyDesc, (int)algo, sizeInBytes);
}

/* ---- the convolutions ---- */

cudnnStatus_t CUDNNWINAPI cudnnConvolutionForward(
    cudnnHandle_t handle, const void *alpha, const cudnnTensorDescriptor_t xDesc, const void *x,
    const cudnnFilterDescriptor_t wDesc, const void *w, const cudnnConvolutionDescriptor_t convDesc,
    cudnnConvolutionFwdAlgo_t algo, void *workSpace, size_t workSpaceSizeInBytes, const void *beta,
    const cudnnTensorDescriptor_t yDesc, void *y) {
    return convolve("cudnnConvolutionForward", FWD, handle, alpha, xDesc, wDesc, convDesc, yDesc,
                    (int)algo, x, w, y, workSpace, workSpaceSizeInBytes, beta);
}

cudnnStatus_t CUDNNWINAPI cudnnConvolutionBackwardData(
    cudnnHandle_t handle, const void *alpha, const cudnnFilterDescriptor_t wDesc, const void *w,
    const cudnnTensorDescriptor_t dyDesc, const void *dy,
    const cudnnConvolutionDescriptor_t convDesc, cudnnConvolutionBwdDataAlgo_t algo,
    void *workSpace, size_t workSpaceSizeInBytes, const void *beta,
    const cudnnTensorDescriptor_t dxDesc, void *dx) {
    return convolve("cudnnConvolutionBackwardData", BWD_DATA, handle, alpha, dxDesc, wDesc,
                    convDesc, dyDesc, (int)algo, dy, w, dx, workSpace, workSpaceSizeInBytes, beta);
}

cudnnStatus_t CUDNNWINAPI cudnnConvolutionBackwardFilter(
    cudnnHandle_t handle, const void *alpha, const cudnnTensorDescriptor_t xDesc, const void *x,
    const cudnnTensorDescriptor_t dyDesc, const void *dy,
    const cudnnConvolutionDescriptor_t convDesc, cudnnConvolutionBwdFilterAlgo_t algo,
    void *workSpace, size_t workSpaceSizeInBytes, const void *beta,
    const cudnnFilterDescriptor_t dwDesc, void *dw) {
    return convolve("cudnnConvolutionBackwardFilter", BWD_FILTER, handle, alpha, xDesc, dwDesc,
                    convDesc, dyDesc, (int)algo, x, dy, dw, workSpace, workSpaceSizeInBytes, beta);
}

} /* extern "C" */
