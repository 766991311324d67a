/* tests/cuda_emu/test_fake_cudnn.cc - the emulated device's cuDNN
 * (fake_cudnn.cc) against an independent naive reference, and its refusals.
 * Test-only C++17. It calls the CUDA runtime API (cudaMalloc, cudaFree,
 * cudaMemcpyAsync, cudaStreamCreateWithFlags, cudaStreamSynchronize,
 * cudaStreamDestroy, cudaGetErrorName - calls the backend itself makes) and
 * the cuDNN functions the backend calls, nothing of the emulation's
 * internals, so it runs against the emulated runtime (runtime.cc).
 *
 * Convolutions: forward, backward-data and backward-filter; float32 and
 * bfloat16; NCHW (KCRS filters) and NHWC (KRSC); groups 1 and 2 and
 * depthwise; stride 2; dilation 2; CUDNN_CONVOLUTION (flipped kernel) as
 * well as cross-correlation; beta 0 (the output starts as NaN: it must not
 * be read) and beta 1 (accumulation), alpha other than 1; every algorithm
 * cudnnGetConvolution*Algorithm_v7 reports as running, each with the
 * workspace its query asks for; TF32 rounding under CUDNN_DEFAULT_MATH for
 * float data. The reference is written apart from the fake: the
 * backward-data one gathers (for each input element, the outputs it fed)
 * where the fake scatters.
 *
 * Refusals: workspace too small, bad algorithms (out of range, DIRECT,
 * Winograd on a 5x5 filter, FFT on NHWC, FFT on bf16, backward-filter
 * WINOGRAD), host / NULL / freed / overrunning / misaligned data pointers,
 * mismatched data types, bad group counts, an NHWC filter with NCHW tensors,
 * a wrong output size, descriptor setters' bad values, NULL alpha; each
 * must return its status and leave the output untouched (nothing queued).
 * Also: alpha is read at call time and descriptors may be destroyed before
 * the work runs (deferred execution), Find* results, error strings and the
 * version.
 *
 * One line per case, "ok" or "FAIL"; exit status 0 when all pass, else 1.
 */
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cuda_runtime.h>
#include <cudnn.h>
#include <string>
#include <vector>

namespace {

int g_failed = 0, g_cases = 0;

void report(bool ok, const std::string &what) {
    g_cases++;
    if (!ok) g_failed++;
    printf("%s %s\n", ok ? "ok  " : "FAIL", what.c_str());
    fflush(stdout);
}

#define CU(call)                                                                 \
    do {                                                                         \
        cudaError_t e_ = (call);                                                 \
        if (e_ != cudaSuccess) {                                                 \
            fprintf(stderr, "test_fake_cudnn: %s failed: %s (line %d)\n", #call, \
                    cudaGetErrorName(e_), __LINE__);                             \
            exit(1);                                                             \
        }                                                                        \
    } while (0)
#define DNN(call)                                                                \
    do {                                                                         \
        cudnnStatus_t s_ = (call);                                               \
        if (s_ != CUDNN_STATUS_SUCCESS) {                                        \
            fprintf(stderr, "test_fake_cudnn: %s failed: %s (line %d)\n", #call, \
                    cudnnGetErrorString(s_), __LINE__);                          \
            exit(1);                                                             \
        }                                                                        \
    } while (0)

cudaStream_t g_stream;
cudnnHandle_t g_dnn;

/* ---- numbers (written for the test, not shared with the fake) ---- */

uint32_t rng_state = 12345u;
float rnd() { /* uniform in [-1, 1), 2^-12 steps */
    rng_state = rng_state * 1664525u + 1013904223u;
    return (float)((int)(rng_state >> 20) - 2048) / 2048.0f;
}
float bf16_value(uint16_t b) {
    uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
uint16_t to_bf16(float f) { /* nearest even; NaN stays NaN */
    uint32_t u;
    memcpy(&u, &f, 4);
    if (std::isnan(f)) return 0x7fc0;
    uint32_t lsb = (u >> 16) & 1u;
    return (uint16_t)((u + 0x7fffu + lsb) >> 16);
}
float to_tf32(float f) { /* 10 mantissa bits, nearest even */
    uint32_t u;
    memcpy(&u, &f, 4);
    uint32_t keep = u & ~0x1fffu, rest = u & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (u & 0x2000u))) keep += 0x2000u;
    memcpy(&f, &keep, 4);
    return f;
}

/* ---- problems ---- */

struct Geo {
    const char *name;
    int n, c, h, w, k, r, s, ph, pw, su, sv, dh, dw, g;
    cudnnConvolutionMode_t mode;
    int oh() const { return (h + 2 * ph - ((r - 1) * dh + 1)) / su + 1; }
    int ow() const { return (w + 2 * pw - ((s - 1) * dw + 1)) / sv + 1; }
    int cg() const { return c / g; }
};

const Geo kGeos[] = {
    {"3x3 pad 1, groups 1", 2, 3, 6, 5, 4, 3, 3, 1, 1, 1, 1, 1, 1, 1, CUDNN_CROSS_CORRELATION},
    {"3x3 stride 2, groups 2", 2, 4, 7, 6, 6, 3, 3, 1, 1, 2, 2, 1, 1, 2, CUDNN_CROSS_CORRELATION},
    {"3x3 dilation 2 pad 2, depthwise", 1, 4, 7, 7, 4, 3, 3, 2, 2, 1, 1, 2, 2, 4,
     CUDNN_CROSS_CORRELATION},
    {"2x3 stride 2x1 pad 0x1, CUDNN_CONVOLUTION", 2, 2, 5, 6, 3, 2, 3, 0, 1, 2, 1, 1, 1, 1,
     CUDNN_CONVOLUTION},
    {"5x5 pad 2, groups 1", 1, 2, 6, 6, 2, 5, 5, 2, 2, 1, 1, 1, 1, 1, CUDNN_CROSS_CORRELATION},
};

enum Dir { FWD, BWD_DATA, BWD_FILTER };
const char *const kDirName[] = {"fwd", "bwd-data", "bwd-filter"};

/* Logical arrays: x [n][c][h][w], w [k][cg][r][s], y [n][k][oh][ow]. */
struct Host {
    std::vector<float> x, w, y;
};

/* The reference: out (logical) and, per element, the sum of |terms|. */
void reference(const Geo &G, Dir dir, const Host &in, std::vector<double> *out,
               std::vector<double> *mag) {
    const int N = G.n, C = G.c, H = G.h, W = G.w, K = G.k, R = G.r, S = G.s, OH = G.oh(),
              OW = G.ow(), CG = G.cg(), KG = G.k / G.g;
    auto X = [&](int n, int c, int h, int w) {
        return (double)in.x[((n * C + c) * H + h) * W + w];
    };
    auto Wt = [&](int k, int c, int r, int s) {
        if (G.mode == CUDNN_CONVOLUTION) r = R - 1 - r, s = S - 1 - s;
        return (double)in.w[((k * CG + c) * R + r) * S + s];
    };
    auto Y = [&](int n, int k, int oh, int ow) {
        return (double)in.y[((n * K + k) * OH + oh) * OW + ow];
    };
    out->clear();
    mag->clear();
    if (dir == FWD) {
        for (int n = 0; n < N; n++)
            for (int k = 0; k < K; k++)
                for (int oh = 0; oh < OH; oh++)
                    for (int ow = 0; ow < OW; ow++) {
                        double a = 0, m = 0;
                        int grp = k / KG;
                        for (int c = 0; c < CG; c++)
                            for (int r = 0; r < R; r++)
                                for (int s = 0; s < S; s++) {
                                    int ih = oh * G.su - G.ph + r * G.dh;
                                    int iw = ow * G.sv - G.pw + s * G.dw;
                                    if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
                                    double t = X(n, grp * CG + c, ih, iw) * Wt(k, c, r, s);
                                    a += t;
                                    m += std::fabs(t);
                                }
                        out->push_back(a);
                        mag->push_back(m);
                    }
    } else if (dir == BWD_DATA) {
        /* gather: dx[n][ci][ih][iw] = sum over k of ci's group, r, s with
         * ih = oh*su - ph + r*dh for an integral oh in range */
        for (int n = 0; n < N; n++)
            for (int ci = 0; ci < C; ci++)
                for (int ih = 0; ih < H; ih++)
                    for (int iw = 0; iw < W; iw++) {
                        double a = 0, m = 0;
                        int grp = ci / CG, c = ci % CG;
                        for (int k = grp * KG; k < (grp + 1) * KG; k++)
                            for (int r = 0; r < R; r++) {
                                int th = ih + G.ph - r * G.dh;
                                if (th < 0 || th % G.su) continue;
                                int oh = th / G.su;
                                if (oh >= OH) continue;
                                for (int s = 0; s < S; s++) {
                                    int tw = iw + G.pw - s * G.dw;
                                    if (tw < 0 || tw % G.sv) continue;
                                    int ow = tw / G.sv;
                                    if (ow >= OW) continue;
                                    double t = Y(n, k, oh, ow) * Wt(k, c, r, s);
                                    a += t;
                                    m += std::fabs(t);
                                }
                            }
                        out->push_back(a);
                        mag->push_back(m);
                    }
    } else {
        /* dw[k][c][r][s] for the stored (unflipped) index: the flip is undone */
        for (int k = 0; k < K; k++)
            for (int c = 0; c < CG; c++)
                for (int r0 = 0; r0 < R; r0++)
                    for (int s0 = 0; s0 < S; s0++) {
                        int r = G.mode == CUDNN_CONVOLUTION ? R - 1 - r0 : r0;
                        int s = G.mode == CUDNN_CONVOLUTION ? S - 1 - s0 : s0;
                        double a = 0, m = 0;
                        int grp = k / KG;
                        for (int n = 0; n < N; n++)
                            for (int oh = 0; oh < OH; oh++)
                                for (int ow = 0; ow < OW; ow++) {
                                    int ih = oh * G.su - G.ph + r * G.dh;
                                    int iw = ow * G.sv - G.pw + s * G.dw;
                                    if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
                                    double t = X(n, grp * CG + c, ih, iw) * Y(n, k, oh, ow);
                                    a += t;
                                    m += std::fabs(t);
                                }
                        out->push_back(a);
                        mag->push_back(m);
                    }
    }
}

/* ---- memory layouts ---- */

size_t tensor_off(bool nhwc, int C, int H, int W, int n, int c, int h, int w) {
    return nhwc ? (((size_t)n * H + h) * W + w) * C + c : (((size_t)n * C + c) * H + h) * W + w;
}
size_t filter_off(bool nhwc, int CG, int R, int S, int k, int c, int r, int s) {
    return nhwc ? (((size_t)k * R + r) * S + s) * CG + c : (((size_t)k * CG + c) * R + r) * S + s;
}

/* Logical order <-> memory bytes of dtype bf16 or float. */
struct Shape {
    bool filter;
    int a, b, c, d; /* n c h w, or k cg r s */
    size_t count() const { return (size_t)a * b * c * d; }
};
size_t mem_off(const Shape &sh, bool nhwc, size_t logical) {
    int d = (int)(logical % sh.d), c = (int)(logical / sh.d % sh.c),
        b = (int)(logical / sh.d / sh.c % sh.b), a = (int)(logical / sh.d / sh.c / sh.b);
    return sh.filter ? filter_off(nhwc, sh.b, sh.c, sh.d, a, b, c, d)
                     : tensor_off(nhwc, sh.b, sh.c, sh.d, a, b, c, d);
}
std::vector<uint8_t> pack(const std::vector<float> &v, const Shape &sh, bool nhwc, bool bf16) {
    std::vector<uint8_t> m(sh.count() * (bf16 ? 2 : 4));
    for (size_t i = 0; i < sh.count(); i++) {
        size_t o = mem_off(sh, nhwc, i);
        if (bf16) {
            uint16_t b = to_bf16(v[i]);
            memcpy(&m[o * 2], &b, 2);
        } else {
            memcpy(&m[o * 4], &v[i], 4);
        }
    }
    return m;
}
std::vector<float> unpack(const std::vector<uint8_t> &m, const Shape &sh, bool nhwc, bool bf16) {
    std::vector<float> v(sh.count());
    for (size_t i = 0; i < sh.count(); i++) {
        size_t o = mem_off(sh, nhwc, i);
        if (bf16) {
            uint16_t b;
            memcpy(&b, &m[o * 2], 2);
            v[i] = bf16_value(b);
        } else {
            memcpy(&v[i], &m[o * 4], 4);
        }
    }
    return v;
}

/* ---- device buffers ---- */

struct Dev {
    void *p = nullptr;
    size_t bytes = 0;
    explicit Dev(size_t n) : bytes(n) { CU(cudaMalloc(&p, n ? n : 1)); }
    ~Dev() { cudaFree(p); }
    Dev(const Dev &) = delete;
    Dev &operator=(const Dev &) = delete;
    void put(const std::vector<uint8_t> &m) {
        CU(cudaMemcpyAsync(p, m.data(), m.size(), cudaMemcpyHostToDevice, g_stream));
        CU(cudaStreamSynchronize(g_stream));
    }
    std::vector<uint8_t> get(size_t n) const {
        std::vector<uint8_t> m(n);
        CU(cudaMemcpyAsync(m.data(), p, n, cudaMemcpyDeviceToHost, g_stream));
        CU(cudaStreamSynchronize(g_stream));
        return m;
    }
};

/* ---- descriptors ---- */

struct Descs {
    cudnnTensorDescriptor_t x = nullptr, y = nullptr;
    cudnnFilterDescriptor_t w = nullptr;
    cudnnConvolutionDescriptor_t cv = nullptr;
    Descs(const Geo &G, cudnnDataType_t dt, cudnnTensorFormat_t fmt, cudnnMathType_t math) {
        DNN(cudnnCreateTensorDescriptor(&x));
        DNN(cudnnCreateTensorDescriptor(&y));
        DNN(cudnnCreateFilterDescriptor(&w));
        DNN(cudnnCreateConvolutionDescriptor(&cv));
        DNN(cudnnSetTensor4dDescriptor(x, fmt, dt, G.n, G.c, G.h, G.w));
        DNN(cudnnSetFilter4dDescriptor(w, dt, fmt, G.k, G.cg(), G.r, G.s));
        DNN(cudnnSetConvolution2dDescriptor(cv, G.ph, G.pw, G.su, G.sv, G.dh, G.dw, G.mode,
                                            CUDNN_DATA_FLOAT));
        if (G.g > 1) DNN(cudnnSetConvolutionGroupCount(cv, G.g));
        DNN(cudnnSetConvolutionMathType(cv, math));
        int n, c, h, ww;
        DNN(cudnnGetConvolution2dForwardOutputDim(cv, x, w, &n, &c, &h, &ww));
        if (n != G.n || c != G.k || h != G.oh() || ww != G.ow()) {
            fprintf(stderr, "test_fake_cudnn: output dim %dx%dx%dx%d, expected %dx%dx%dx%d\n", n, c,
                    h, ww, G.n, G.k, G.oh(), G.ow());
            exit(1);
        }
        DNN(cudnnSetTensor4dDescriptor(y, fmt, dt, G.n, G.k, G.oh(), G.ow()));
    }
    ~Descs() { release(); }
    void release() {
        if (x) cudnnDestroyTensorDescriptor(x);
        if (y) cudnnDestroyTensorDescriptor(y);
        if (w) cudnnDestroyFilterDescriptor(w);
        if (cv) cudnnDestroyConvolutionDescriptor(cv);
        x = y = nullptr;
        w = nullptr;
        cv = nullptr;
    }
};

/* The algorithms the heuristics list as running, with their workspace. */
struct Algo {
    int algo;
    size_t memory;
};
std::vector<Algo> running_algos(const Descs &d, Dir dir) {
    std::vector<Algo> out;
    int got = 0;
    if (dir == FWD) {
        cudnnConvolutionFwdAlgoPerf_t p[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
        DNN(cudnnGetConvolutionForwardAlgorithm_v7(g_dnn, d.x, d.w, d.cv, d.y,
                                                   CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &got, p));
        for (int i = 0; i < got; i++)
            if (p[i].status == CUDNN_STATUS_SUCCESS) out.push_back({(int)p[i].algo, p[i].memory});
    } else if (dir == BWD_DATA) {
        cudnnConvolutionBwdDataAlgoPerf_t p[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
        DNN(cudnnGetConvolutionBackwardDataAlgorithm_v7(
            g_dnn, d.w, d.y, d.cv, d.x, CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &got, p));
        for (int i = 0; i < got; i++)
            if (p[i].status == CUDNN_STATUS_SUCCESS) out.push_back({(int)p[i].algo, p[i].memory});
    } else {
        cudnnConvolutionBwdFilterAlgoPerf_t p[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
        DNN(cudnnGetConvolutionBackwardFilterAlgorithm_v7(
            g_dnn, d.x, d.y, d.cv, d.w, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &got, p));
        for (int i = 0; i < got; i++)
            if (p[i].status == CUDNN_STATUS_SUCCESS) out.push_back({(int)p[i].algo, p[i].memory});
    }
    return out;
}

cudnnStatus_t ws_query(const Descs &d, Dir dir, int algo, size_t *bytes) {
    if (dir == FWD)
        return cudnnGetConvolutionForwardWorkspaceSize(g_dnn, d.x, d.w, d.cv, d.y,
                                                       (cudnnConvolutionFwdAlgo_t)algo, bytes);
    if (dir == BWD_DATA)
        return cudnnGetConvolutionBackwardDataWorkspaceSize(
            g_dnn, d.w, d.y, d.cv, d.x, (cudnnConvolutionBwdDataAlgo_t)algo, bytes);
    return cudnnGetConvolutionBackwardFilterWorkspaceSize(
        g_dnn, d.x, d.y, d.cv, d.w, (cudnnConvolutionBwdFilterAlgo_t)algo, bytes);
}

/* Runs one convolution: a and b are the operands (x and w, dy and w, x and
 * dy), o the result. */
cudnnStatus_t conv(const Descs &d, Dir dir, int algo, const void *a, const void *b, void *o,
                   void *ws, size_t ws_bytes, const float *alpha, const float *beta) {
    if (dir == FWD)
        return cudnnConvolutionForward(g_dnn, alpha, d.x, a, d.w, b, d.cv,
                                       (cudnnConvolutionFwdAlgo_t)algo, ws, ws_bytes, beta, d.y, o);
    if (dir == BWD_DATA)
        return cudnnConvolutionBackwardData(g_dnn, alpha, d.w, b, d.y, a, d.cv,
                                            (cudnnConvolutionBwdDataAlgo_t)algo, ws, ws_bytes, beta,
                                            d.x, o);
    return cudnnConvolutionBackwardFilter(g_dnn, alpha, d.x, a, d.y, b, d.cv,
                                          (cudnnConvolutionBwdFilterAlgo_t)algo, ws, ws_bytes, beta,
                                          d.w, o);
}

/* ---- one numeric case ---- */

Host random_host(const Geo &G, bool bf16, bool tf32_bits) {
    Host h;
    auto fill = [&](std::vector<float> &v, size_t n) {
        v.resize(n);
        for (auto &e : v) {
            float f = rnd();
            /* low mantissa bits set, so TF32 rounding changes the value */
            if (tf32_bits) f += (f >= 0 ? 1.0f : -1.0f) * 3.0f / 65536.0f;
            e = bf16 ? bf16_value(to_bf16(f)) : f;
        }
    };
    fill(h.x, (size_t)G.n * G.c * G.h * G.w);
    fill(h.w, (size_t)G.k * G.cg() * G.r * G.s);
    fill(h.y, (size_t)G.n * G.k * G.oh() * G.ow());
    return h;
}

void numeric_case(const Geo &G, Dir dir, bool bf16, bool nhwc, float alpha, float beta,
                  cudnnMathType_t math) {
    const cudnnDataType_t dt = bf16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_FLOAT;
    const cudnnTensorFormat_t fmt = nhwc ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW;
    const bool tf32 = !bf16 && math != CUDNN_FMA_MATH;
    Host h = random_host(G, bf16, tf32);
    Descs d(G, dt, fmt, math);
    const Shape sx{false, G.n, G.c, G.h, G.w}, sw{true, G.k, G.cg(), G.r, G.s},
        sy{false, G.n, G.k, G.oh(), G.ow()};
    const Shape &sa = dir == BWD_DATA ? sy : sx, &sb = dir == BWD_FILTER ? sy : sw;
    const Shape &so = dir == FWD ? sy : dir == BWD_DATA ? sx : sw;
    const std::vector<float> &ha = dir == BWD_DATA ? h.y : h.x, &hb = dir == BWD_FILTER ? h.y : h.w;
    const size_t es = bf16 ? 2 : 4;
    Dev da(sa.count() * es), db(sb.count() * es), dout(so.count() * es);
    da.put(pack(ha, sa, nhwc, bf16));
    db.put(pack(hb, sb, nhwc, bf16));

    /* reference: on TF32-rounded operands when the math type allows TF32 */
    Host hr = h;
    if (tf32)
        for (auto *v : {&hr.x, &hr.w, &hr.y})
            for (auto &e : *v) e = to_tf32(e);
    std::vector<double> ref, mag;
    reference(G, dir, hr, &ref, &mag);
    /* the old output: random values for beta 1, NaN for beta 0 (never read) */
    std::vector<float> old(so.count());
    for (auto &e : old) e = beta != 0.0f ? (bf16 ? bf16_value(to_bf16(rnd())) : rnd()) : NAN;
    std::vector<uint8_t> old_mem = pack(old, so, nhwc, bf16);

    std::vector<Algo> algos = running_algos(d, dir);
    std::string names, why;
    bool ok = !algos.empty();
    if (algos.empty()) why = "no algorithm runs";
    for (const Algo &a : algos) {
        size_t need = 0;
        cudnnStatus_t st = ws_query(d, dir, a.algo, &need);
        if (st != CUDNN_STATUS_SUCCESS || need != a.memory) {
            ok = false;
            why += " algo " + std::to_string(a.algo) + ": workspace query " +
                   cudnnGetErrorString(st) + " " + std::to_string(need) + " vs perf " +
                   std::to_string(a.memory) + ";";
            continue;
        }
        Dev ws(need);
        dout.put(old_mem);
        const float al = alpha, be = beta;
        st = conv(d, dir, a.algo, da.p, db.p, dout.p, need ? ws.p : nullptr, need, &al, &be);
        if (st != CUDNN_STATUS_SUCCESS) {
            ok = false;
            why += " algo " + std::to_string(a.algo) + ": " + cudnnGetErrorString(st) + ";";
            continue;
        }
        std::vector<float> got = unpack(dout.get(so.count() * es), so, nhwc, bf16);
        size_t bad = 0, first = 0;
        for (size_t i = 0; i < got.size(); i++) {
            double v = alpha * ref[i] + (beta != 0.0f ? (double)beta * old[i] : 0.0);
            float e = (float)v;
            bool good;
            if (bf16) {
                /* the float result rounded to bf16 to nearest even; the float
                 * may differ by one ulp with the order of the sums */
                uint16_t g = to_bf16(got[i]);
                good = g == to_bf16(e) || g == to_bf16(std::nextafter(e, -INFINITY)) ||
                       g == to_bf16(std::nextafter(e, INFINITY));
            } else {
                double prior = beta != 0.0f ? std::fabs((double)beta * old[i]) : 0.0;
                double tol = 1e-6 * (std::fabs(alpha) * mag[i] + prior) + 1e-30;
                good = std::fabs((double)got[i] - (double)e) <= tol;
            }
            if (!good) {
                if (!bad) first = i;
                bad++;
            }
        }
        if (bad) {
            ok = false;
            char b[200];
            double v = alpha * ref[first] + (beta != 0.0f ? (double)beta * old[first] : 0.0);
            snprintf(b, sizeof b, " algo %d: %zu of %zu wrong, first [%zu] got %.9g want %.9g;",
                     a.algo, bad, got.size(), first, (double)got[first], v);
            why += b;
        }
        names += " " + std::to_string(a.algo);
    }
    char line[400];
    snprintf(line, sizeof line, "%-10s %-4s %-4s %-41s alpha %.1f beta %.0f math %d: algos%s%s",
             kDirName[dir], bf16 ? "bf16" : "f32", nhwc ? "NHWC" : "NCHW", G.name, alpha, beta,
             (int)math, names.c_str(), why.c_str());
    report(ok, line);
}

/* ---- refusals ---- */

/* A small float NCHW problem with buffers, for the refusal cases. */
struct Fixture {
    Geo G{"fixture", 1, 2, 5, 5, 2, 3, 3, 1, 1, 1, 1, 1, 1, 1, CUDNN_CROSS_CORRELATION};
    Descs d{G, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, CUDNN_FMA_MATH};
    size_t xb = (size_t)1 * 2 * 5 * 5 * 4, wb = (size_t)2 * 2 * 3 * 3 * 4, yb = xb;
    Dev x{xb + 64}, w{wb + 64}, y{yb + 64}, ws{1 << 16};
    std::vector<uint8_t> y_before;
    Fixture() {
        x.put(pack(std::vector<float>(xb / 4, 1.0f), Shape{false, 1, 2, 5, 5}, false, false));
        w.put(pack(std::vector<float>(wb / 4, 0.5f), Shape{true, 2, 2, 3, 3}, false, false));
        y_before = std::vector<uint8_t>(yb + 64, 0x5a);
        y.put(y_before);
    }
    bool y_untouched() const { return y.get(yb + 64) == y_before; }
};

void expect(const char *what, cudnnStatus_t got, cudnnStatus_t want, bool extra = true,
            const char *extra_why = "") {
    char line[300];
    snprintf(line, sizeof line, "refuse %-62s -> %s%s%s", what, cudnnGetErrorString(got),
             got == want ? "" : (std::string(" (want ") + cudnnGetErrorString(want) + ")").c_str(),
             extra ? "" : extra_why);
    report(got == want && extra, line);
}

void refusals() {
    const float one = 1.0f, zero = 0.0f;
    {
        Fixture f;
        size_t need = 0;
        DNN(cudnnGetConvolutionForwardWorkspaceSize(
            g_dnn, f.d.x, f.d.w, f.d.cv, f.d.y, CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM,
            &need));
        report(need > 0,
               "IMPLICIT_PRECOMP_GEMM needs a workspace (" + std::to_string(need) + " bytes)");
        cudnnStatus_t st = cudnnConvolutionForward(g_dnn, &one, f.d.x, f.x.p, f.d.w, f.w.p, f.d.cv,
                                                   CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM,
                                                   f.ws.p, need - 1, &zero, f.d.y, f.y.p);
        expect("fwd: workSpaceSizeInBytes one byte short", st, CUDNN_STATUS_BAD_PARAM,
               f.y_untouched(), " (output written)");
        st = cudnnConvolutionForward(g_dnn, &one, f.d.x, f.x.p, f.d.w, f.w.p, f.d.cv,
                                     CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM, nullptr, 0,
                                     &zero, f.d.y, f.y.p);
        expect("fwd: no workspace for an algorithm that needs one", st, CUDNN_STATUS_BAD_PARAM,
               f.y_untouched(), " (output written)");
        /* the workspace size depends on the math type: a size queried under
         * FMA math is too small under tensor-op math */
        DNN(cudnnSetConvolutionMathType(f.d.cv, CUDNN_TENSOR_OP_MATH));
        st = cudnnConvolutionForward(g_dnn, &one, f.d.x, f.x.p, f.d.w, f.w.p, f.d.cv,
                                     CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM, f.ws.p, need,
                                     &zero, f.d.y, f.y.p);
        expect("fwd: workspace queried under another math type", st, CUDNN_STATUS_BAD_PARAM,
               f.y_untouched(), " (output written)");
        DNN(cudnnSetConvolutionMathType(f.d.cv, CUDNN_FMA_MATH));
        size_t bneed = 0;
        DNN(cudnnGetConvolutionBackwardFilterWorkspaceSize(
            g_dnn, f.d.x, f.d.y, f.d.cv, f.d.w, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1, &bneed));
        st = cudnnConvolutionBackwardFilter(g_dnn, &one, f.d.x, f.x.p, f.d.y, f.y.p, f.d.cv,
                                            CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1, f.ws.p, bneed / 2,
                                            &zero, f.d.w, f.w.p);
        expect("bwd-filter: workspace half the size", st, CUDNN_STATUS_BAD_PARAM);
        DNN(cudnnGetConvolutionBackwardDataWorkspaceSize(
            g_dnn, f.d.w, f.d.y, f.d.cv, f.d.x, CUDNN_CONVOLUTION_BWD_DATA_ALGO_1, &bneed));
        st = cudnnConvolutionBackwardData(g_dnn, &one, f.d.w, f.w.p, f.d.y, f.y.p, f.d.cv,
                                          CUDNN_CONVOLUTION_BWD_DATA_ALGO_1, f.ws.p, 0, &zero,
                                          f.d.x, f.x.p);
        expect("bwd-data: workspace size 0", st, CUDNN_STATUS_BAD_PARAM);

        /* bad algorithms */
        st = cudnnConvolutionForward(g_dnn, &one, f.d.x, f.x.p, f.d.w, f.w.p, f.d.cv,
                                     (cudnnConvolutionFwdAlgo_t)42, f.ws.p, 1 << 16, &zero, f.d.y,
                                     f.y.p);
        expect("fwd: algo 42 (no such enumerant)", st, CUDNN_STATUS_BAD_PARAM, f.y_untouched(),
               " (output written)");
        st = cudnnConvolutionForward(g_dnn, &one, f.d.x, f.x.p, f.d.w, f.w.p, f.d.cv,
                                     (cudnnConvolutionFwdAlgo_t)-1, f.ws.p, 1 << 16, &zero, f.d.y,
                                     f.y.p);
        expect("fwd: algo -1", st, CUDNN_STATUS_BAD_PARAM);
        st = cudnnConvolutionForward(g_dnn, &one, f.d.x, f.x.p, f.d.w, f.w.p, f.d.cv,
                                     CUDNN_CONVOLUTION_FWD_ALGO_DIRECT, f.ws.p, 1 << 16, &zero,
                                     f.d.y, f.y.p);
        expect("fwd: DIRECT (not implemented)", st, CUDNN_STATUS_NOT_SUPPORTED, f.y_untouched(),
               " (output written)");
        size_t sz = 0;
        st = cudnnGetConvolutionForwardWorkspaceSize(g_dnn, f.d.x, f.d.w, f.d.cv, f.d.y,
                                                     CUDNN_CONVOLUTION_FWD_ALGO_DIRECT, &sz);
        expect("fwd workspace query: DIRECT", st, CUDNN_STATUS_NOT_SUPPORTED);
        st = cudnnConvolutionBackwardFilter(g_dnn, &one, f.d.x, f.x.p, f.d.y, f.y.p, f.d.cv,
                                            CUDNN_CONVOLUTION_BWD_FILTER_ALGO_WINOGRAD, f.ws.p,
                                            1 << 16, &zero, f.d.w, f.w.p);
        expect("bwd-filter: WINOGRAD (not implemented)", st, CUDNN_STATUS_NOT_SUPPORTED);
        st = cudnnGetConvolutionBackwardDataWorkspaceSize(g_dnn, f.d.w, f.d.y, f.d.cv, f.d.x,
                                                          (cudnnConvolutionBwdDataAlgo_t)6, &sz);
        expect("bwd-data workspace query: algo 6 (= ALGO_COUNT)", st, CUDNN_STATUS_BAD_PARAM);

        /* data pointers */
        std::vector<float> host(f.xb / 4 + 16, 1.0f);
        st = cudnnConvolutionForward(g_dnn, &one, f.d.x, host.data(), f.d.w, f.w.p, f.d.cv,
                                     CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, nullptr, 0, &zero,
                                     f.d.y, f.y.p);
        expect("fwd: x in host memory", st, CUDNN_STATUS_BAD_PARAM, f.y_untouched(),
               " (output written)");
        st = cudnnConvolutionForward(g_dnn, &one, f.d.x, f.x.p, f.d.w, f.w.p, f.d.cv,
                                     CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, nullptr, 0, &zero,
                                     f.d.y, host.data());
        expect("fwd: y in host memory", st, CUDNN_STATUS_BAD_PARAM);
        st = cudnnConvolutionForward(g_dnn, &one, f.d.x, nullptr, f.d.w, f.w.p, f.d.cv,
                                     CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, nullptr, 0, &zero,
                                     f.d.y, f.y.p);
        expect("fwd: x NULL", st, CUDNN_STATUS_BAD_PARAM_NULL_POINTER);
        st = cudnnConvolutionForward(g_dnn, &one, f.d.x, (char *)f.x.p + 2, f.d.w, f.w.p, f.d.cv,
                                     CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, nullptr, 0, &zero,
                                     f.d.y, f.y.p);
        expect("fwd: x misaligned by 2 bytes (float)", st,
               CUDNN_STATUS_BAD_PARAM_MISALIGNED_POINTER, f.y_untouched(), " (output written)");
        st = cudnnConvolutionBackwardData(g_dnn, &one, f.d.w, f.w.p, f.d.y, f.y.p, f.d.cv,
                                          CUDNN_CONVOLUTION_BWD_DATA_ALGO_0, f.ws.p, 1 << 16, &zero,
                                          f.d.x, (char *)f.x.p + 1);
        expect("bwd-data: dx misaligned by 1 byte", st, CUDNN_STATUS_BAD_PARAM_MISALIGNED_POINTER);
        st = cudnnConvolutionForward(g_dnn, &one, f.d.x, (char *)f.x.p + 128, f.d.w, f.w.p, f.d.cv,
                                     CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, nullptr, 0, &zero,
                                     f.d.y, f.y.p);
        expect("fwd: x runs past its allocation", st, CUDNN_STATUS_BAD_PARAM);
        {
            void *gone = nullptr;
            CU(cudaMalloc(&gone, f.xb));
            CU(cudaFree(gone));
            st = cudnnConvolutionForward(g_dnn, &one, f.d.x, gone, f.d.w, f.w.p, f.d.cv,
                                         CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, nullptr, 0,
                                         &zero, f.d.y, f.y.p);
            expect("fwd: x freed", st, CUDNN_STATUS_BAD_PARAM);
        }
        st = cudnnConvolutionForward(g_dnn, nullptr, f.d.x, f.x.p, f.d.w, f.w.p, f.d.cv,
                                     CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, nullptr, 0, &zero,
                                     f.d.y, f.y.p);
        expect("fwd: alpha NULL", st, CUDNN_STATUS_BAD_PARAM_NULL_POINTER);
        st = cudnnConvolutionForward(g_dnn, &one, nullptr, f.x.p, f.d.w, f.w.p, f.d.cv,
                                     CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, nullptr, 0, &zero,
                                     f.d.y, f.y.p);
        expect("fwd: xDesc NULL", st, CUDNN_STATUS_BAD_PARAM_NULL_POINTER);
    }
    {
        /* mismatched data types: x float, w and y bf16 */
        Geo G{"dt", 1, 2, 5, 5, 2, 3, 3, 1, 1, 1, 1, 1, 1, 1, CUDNN_CROSS_CORRELATION};
        Descs d(G, CUDNN_DATA_BFLOAT16, CUDNN_TENSOR_NHWC, CUDNN_TENSOR_OP_MATH);
        DNN(cudnnSetTensor4dDescriptor(d.x, CUDNN_TENSOR_NHWC, CUDNN_DATA_FLOAT, 1, 2, 5, 5));
        Dev x(200), w(200), y(200);
        cudnnStatus_t st = cudnnConvolutionForward(g_dnn, &one, d.x, x.p, d.w, w.p, d.cv,
                                                   CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM,
                                                   nullptr, 0, &zero, d.y, y.p);
        expect("fwd: x float, w and y bf16", st, CUDNN_STATUS_BAD_PARAM);
        size_t sz;
        st = cudnnGetConvolutionForwardWorkspaceSize(g_dnn, d.x, d.w, d.cv, d.y,
                                                     CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, &sz);
        expect("fwd workspace query: x float, w and y bf16", st, CUDNN_STATUS_BAD_PARAM);
        int n, c, h, w_;
        st = cudnnGetConvolution2dForwardOutputDim(d.cv, d.x, d.w, &n, &c, &h, &w_);
        expect("output dim: x float, w bf16", st, CUDNN_STATUS_BAD_PARAM);
        cudnnConvolutionFwdAlgoPerf_t perf[8];
        int got = 0;
        st = cudnnGetConvolutionForwardAlgorithm_v7(g_dnn, d.x, d.w, d.cv, d.y, 8, &got, perf);
        expect("fwd heuristics: x float, w and y bf16", st, CUDNN_STATUS_BAD_PARAM);
    }
    {
        /* an NHWC filter with NCHW tensors */
        Geo G{"fmt", 1, 2, 5, 5, 2, 3, 3, 1, 1, 1, 1, 1, 1, 1, CUDNN_CROSS_CORRELATION};
        Descs d(G, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, CUDNN_FMA_MATH);
        DNN(cudnnSetFilter4dDescriptor(d.w, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NHWC, 2, 2, 3, 3));
        Dev x(200), w(200), y(200);
        cudnnStatus_t st = cudnnConvolutionForward(g_dnn, &one, d.x, x.p, d.w, w.p, d.cv,
                                                   CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM,
                                                   nullptr, 0, &zero, d.y, y.p);
        expect("fwd: NHWC (KRSC) filter with NCHW tensors", st, CUDNN_STATUS_NOT_SUPPORTED);
        /* a wrong output size */
        DNN(cudnnSetFilter4dDescriptor(d.w, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, 2, 2, 3, 3));
        DNN(cudnnSetTensor4dDescriptor(d.y, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 1, 2, 4, 5));
        st = cudnnConvolutionForward(g_dnn, &one, d.x, x.p, d.w, w.p, d.cv,
                                     CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, nullptr, 0, &zero,
                                     d.y, y.p);
        expect("fwd: yDesc 4x5 where the convolution gives 5x5", st, CUDNN_STATUS_BAD_PARAM);
    }
    {
        /* group counts */
        Geo G{"grp", 1, 4, 5, 5, 4, 3, 3, 1, 1, 1, 1, 1, 1, 2, CUDNN_CROSS_CORRELATION};
        Descs d(G, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, CUDNN_FMA_MATH);
        Dev x(400), w(400), y(400);
        expect("cudnnSetConvolutionGroupCount(0)", cudnnSetConvolutionGroupCount(d.cv, 0),
               CUDNN_STATUS_BAD_PARAM);
        DNN(cudnnSetConvolutionGroupCount(d.cv, 3)); /* c 4 is not 3 x filter c 2 */
        cudnnStatus_t st = cudnnConvolutionForward(g_dnn, &one, d.x, x.p, d.w, w.p, d.cv,
                                                   CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM,
                                                   nullptr, 0, &zero, d.y, y.p);
        expect("fwd: groups 3 with c 4 and filter c 2", st, CUDNN_STATUS_BAD_PARAM);
        int n, c, h, w_;
        st = cudnnGetConvolution2dForwardOutputDim(d.cv, d.x, d.w, &n, &c, &h, &w_);
        expect("output dim: groups 3 with c 4 and filter c 2", st, CUDNN_STATUS_BAD_PARAM);
        /* k 3 not a multiple of groups 2 */
        DNN(cudnnSetConvolutionGroupCount(d.cv, 2));
        DNN(cudnnSetFilter4dDescriptor(d.w, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, 3, 2, 3, 3));
        DNN(cudnnSetTensor4dDescriptor(d.y, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 1, 3, 5, 5));
        st = cudnnConvolutionForward(g_dnn, &one, d.x, x.p, d.w, w.p, d.cv,
                                     CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, nullptr, 0, &zero,
                                     d.y, y.p);
        expect("fwd: k 3 with groups 2", st, CUDNN_STATUS_BAD_PARAM);
        st = cudnnConvolutionBackwardData(g_dnn, &one, d.w, w.p, d.y, y.p, d.cv,
                                          CUDNN_CONVOLUTION_BWD_DATA_ALGO_1, nullptr, 0, &zero, d.x,
                                          x.p);
        expect("bwd-data: k 3 with groups 2", st, CUDNN_STATUS_NOT_SUPPORTED);
    }
    {
        /* algorithm restrictions */
        Geo G5{"w5", 1, 2, 8, 8, 2, 5, 5, 2, 2, 1, 1, 1, 1, 1, CUDNN_CROSS_CORRELATION};
        Descs d5(G5, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, CUDNN_FMA_MATH);
        size_t sz;
        expect("fwd workspace query: WINOGRAD on a 5x5 filter",
               cudnnGetConvolutionForwardWorkspaceSize(g_dnn, d5.x, d5.w, d5.cv, d5.y,
                                                       CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD, &sz),
               CUDNN_STATUS_NOT_SUPPORTED);
        expect("fwd workspace query: WINOGRAD_NONFUSED on a 5x5 filter (supported)",
               cudnnGetConvolutionForwardWorkspaceSize(g_dnn, d5.x, d5.w, d5.cv, d5.y,
                                                       CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED,
                                                       &sz),
               CUDNN_STATUS_SUCCESS);
        Geo Gs{"s2", 1, 2, 8, 8, 2, 3, 3, 1, 1, 2, 2, 1, 1, 1, CUDNN_CROSS_CORRELATION};
        Descs ds(Gs, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, CUDNN_FMA_MATH);
        expect("fwd workspace query: FFT with stride 2",
               cudnnGetConvolutionForwardWorkspaceSize(g_dnn, ds.x, ds.w, ds.cv, ds.y,
                                                       CUDNN_CONVOLUTION_FWD_ALGO_FFT, &sz),
               CUDNN_STATUS_NOT_SUPPORTED);
        Geo G3{"nhwc", 1, 2, 8, 8, 2, 3, 3, 1, 1, 1, 1, 1, 1, 1, CUDNN_CROSS_CORRELATION};
        Descs dn(G3, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NHWC, CUDNN_FMA_MATH);
        expect("fwd workspace query: FFT on NHWC",
               cudnnGetConvolutionForwardWorkspaceSize(g_dnn, dn.x, dn.w, dn.cv, dn.y,
                                                       CUDNN_CONVOLUTION_FWD_ALGO_FFT, &sz),
               CUDNN_STATUS_NOT_SUPPORTED);
        Descs db(G3, CUDNN_DATA_BFLOAT16, CUDNN_TENSOR_NCHW, CUDNN_TENSOR_OP_MATH);
        expect("fwd workspace query: FFT on bf16",
               cudnnGetConvolutionForwardWorkspaceSize(g_dnn, db.x, db.w, db.cv, db.y,
                                                       CUDNN_CONVOLUTION_FWD_ALGO_FFT, &sz),
               CUDNN_STATUS_NOT_SUPPORTED);
        expect("bwd-filter workspace query: ALGO_3 on NHWC",
               cudnnGetConvolutionBackwardFilterWorkspaceSize(
                   g_dnn, dn.x, dn.y, dn.cv, dn.w, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_3, &sz),
               CUDNN_STATUS_NOT_SUPPORTED);
    }
    {
        /* descriptor setters */
        cudnnTensorDescriptor_t t;
        cudnnFilterDescriptor_t fd;
        cudnnConvolutionDescriptor_t c;
        DNN(cudnnCreateTensorDescriptor(&t));
        DNN(cudnnCreateFilterDescriptor(&fd));
        DNN(cudnnCreateConvolutionDescriptor(&c));
        expect("cudnnSetTensor4dDescriptor n=0",
               cudnnSetTensor4dDescriptor(t, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 0, 1, 1, 1),
               CUDNN_STATUS_BAD_PARAM);
        expect("cudnnSetTensor4dDescriptor h=-1",
               cudnnSetTensor4dDescriptor(t, CUDNN_TENSOR_NHWC, CUDNN_DATA_FLOAT, 1, 1, -1, 1),
               CUDNN_STATUS_BAD_PARAM);
        expect("cudnnSetTensor4dDescriptor format 7",
               cudnnSetTensor4dDescriptor(t, (cudnnTensorFormat_t)7, CUDNN_DATA_FLOAT, 1, 1, 1, 1),
               CUDNN_STATUS_BAD_PARAM);
        expect(
            "cudnnSetTensor4dDescriptor 2^31 elements",
            cudnnSetTensor4dDescriptor(t, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 2048, 1024, 32, 32),
            CUDNN_STATUS_NOT_SUPPORTED);
        expect("cudnnSetFilter4dDescriptor k=0",
               cudnnSetFilter4dDescriptor(fd, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, 0, 1, 3, 3),
               CUDNN_STATUS_BAD_PARAM);
        expect("cudnnSetConvolution2dDescriptor pad_h=-1",
               cudnnSetConvolution2dDescriptor(c, -1, 0, 1, 1, 1, 1, CUDNN_CROSS_CORRELATION,
                                               CUDNN_DATA_FLOAT),
               CUDNN_STATUS_BAD_PARAM);
        expect("cudnnSetConvolution2dDescriptor v=0",
               cudnnSetConvolution2dDescriptor(c, 0, 0, 1, 0, 1, 1, CUDNN_CROSS_CORRELATION,
                                               CUDNN_DATA_FLOAT),
               CUDNN_STATUS_BAD_PARAM);
        expect("cudnnSetConvolution2dDescriptor dilation_w=0",
               cudnnSetConvolution2dDescriptor(c, 0, 0, 1, 1, 1, 0, CUDNN_CROSS_CORRELATION,
                                               CUDNN_DATA_FLOAT),
               CUDNN_STATUS_BAD_PARAM);
        expect("cudnnSetConvolution2dDescriptor mode 5",
               cudnnSetConvolution2dDescriptor(c, 0, 0, 1, 1, 1, 1, (cudnnConvolutionMode_t)5,
                                               CUDNN_DATA_FLOAT),
               CUDNN_STATUS_BAD_PARAM);
        expect("cudnnSetConvolutionMathType 9", cudnnSetConvolutionMathType(c, (cudnnMathType_t)9),
               CUDNN_STATUS_BAD_PARAM);
        /* a filter larger than the padded input */
        DNN(cudnnSetTensor4dDescriptor(t, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 1, 1, 2, 2));
        DNN(cudnnSetFilter4dDescriptor(fd, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, 1, 1, 5, 5));
        DNN(cudnnSetConvolution2dDescriptor(c, 1, 1, 1, 1, 1, 1, CUDNN_CROSS_CORRELATION,
                                            CUDNN_DATA_FLOAT));
        int n, ch, h, w;
        expect("output dim: 5x5 filter on a 2x2 input padded by 1",
               cudnnGetConvolution2dForwardOutputDim(c, t, fd, &n, &ch, &h, &w),
               CUDNN_STATUS_BAD_PARAM);
        DNN(cudnnDestroyTensorDescriptor(t));
        DNN(cudnnDestroyFilterDescriptor(fd));
        DNN(cudnnDestroyConvolutionDescriptor(c));
        /* a destroyed descriptor */
        Geo G{"gone", 1, 2, 5, 5, 2, 3, 3, 1, 1, 1, 1, 1, 1, 1, CUDNN_CROSS_CORRELATION};
        Descs d(G, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, CUDNN_FMA_MATH);
        cudnnTensorDescriptor_t dead;
        DNN(cudnnCreateTensorDescriptor(&dead));
        DNN(cudnnDestroyTensorDescriptor(dead));
        size_t sz;
        cudnnStatus_t st = dead == d.x ? CUDNN_STATUS_BAD_PARAM /* reused address: skip */
                                       : cudnnGetConvolutionForwardWorkspaceSize(
                                             g_dnn, dead, d.w, d.cv, d.y,
                                             CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, &sz);
        expect("fwd workspace query: a destroyed xDesc", st, CUDNN_STATUS_BAD_PARAM);
        cudnnConvolutionFwdAlgoPerf_t perf[8];
        int got = 0;
        expect("fwd heuristics: requestedAlgoCount 0",
               cudnnGetConvolutionForwardAlgorithm_v7(g_dnn, d.x, d.w, d.cv, d.y, 0, &got, perf),
               CUDNN_STATUS_BAD_PARAM);
    }
}

/* ---- deferred execution, Find, strings ---- */

void deferred() {
    Geo G{"deferred", 1, 2, 5, 5, 2, 3, 3, 1, 1, 1, 1, 1, 1, 1, CUDNN_CROSS_CORRELATION};
    Host h = random_host(G, false, false);
    Descs *d = new Descs(G, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, CUDNN_FMA_MATH);
    const Shape sx{false, 1, 2, 5, 5}, sw{true, 2, 2, 3, 3};
    Dev x(sx.count() * 4), w(sw.count() * 4), y(sx.count() * 4), ws(1 << 16);
    x.put(pack(h.x, sx, false, false));
    w.put(pack(h.w, sw, false, false));
    float alpha = 2.0f, beta = 0.0f;
    cudnnStatus_t st = cudnnConvolutionForward(g_dnn, &alpha, d->x, x.p, d->w, w.p, d->cv,
                                               CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM,
                                               ws.p, 1 << 16, &beta, d->y, y.p);
    /* after the call, before the work runs: the host scalar and the
     * descriptors change or go */
    alpha = 100.0f;
    beta = 1.0f;
    DNN(cudnnSetConvolutionMathType(d->cv, CUDNN_DEFAULT_MATH));
    d->release();
    delete d;
    std::vector<float> got = unpack(y.get(sx.count() * 4), sx, false, false);
    std::vector<double> ref, mag;
    reference(G, FWD, h, &ref, &mag);
    bool ok = st == CUDNN_STATUS_SUCCESS;
    for (size_t i = 0; i < got.size(); i++)
        if (!(std::fabs(got[i] - (float)(2.0 * ref[i])) <= 1e-6 * 2.0 * mag[i] + 1e-30)) ok = false;
    report(ok, "deferred: alpha read at call time, descriptors destroyed before the work ran");
    /* the workspace is scratch: the fake leaves garbage (NaN) in it */
    std::vector<uint8_t> wsb = ws.get(16);
    float f0;
    memcpy(&f0, wsb.data(), 4);
    report(std::isnan(f0), "the workspace holds garbage (NaN) after the convolution");
}

/* bf16 results: ties round to even, NaN stays NaN. A 1x1 convolution of
 * two channels, each output the sum of its pixel's two channels. */
void bf16_rounding() {
    Geo G{"bf16 ties", 1, 2, 1, 4, 1, 1, 1, 0, 0, 1, 1, 1, 1, 1, CUDNN_CROSS_CORRELATION};
    Descs d(G, CUDNN_DATA_BFLOAT16, CUDNN_TENSOR_NHWC, CUDNN_TENSOR_OP_MATH);
    const float t = 1.0f / 256.0f; /* half a bf16 ulp of 1 */
    /* pixel: channel 0, channel 1 -> the exact sum, its bf16 (nearest even) */
    const float x[4][2] = {{1.0f, t}, {-1.0f, -t}, {1.0f, 3 * t}, {NAN, 0.0f}};
    const float want[4] = {1.0f, -1.0f, 1.0f + 4 * t, NAN};
    std::vector<float> xl(8), wl(2, 1.0f);
    for (int p = 0; p < 4; p++)
        for (int c = 0; c < 2; c++) xl[c * 4 + p] = x[p][c]; /* logical NCHW */
    Dev dx(16), dw(4), dy(8);
    dx.put(pack(xl, Shape{false, 1, 2, 1, 4}, true, true));
    dw.put(pack(wl, Shape{true, 1, 2, 1, 1}, true, true));
    const float one = 1.0f, zero = 0.0f;
    cudnnStatus_t st = cudnnConvolutionForward(g_dnn, &one, d.x, dx.p, d.w, dw.p, d.cv,
                                               CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, nullptr, 0,
                                               &zero, d.y, dy.p);
    std::vector<float> got = unpack(dy.get(8), Shape{false, 1, 1, 1, 4}, true, true);
    bool ok = st == CUDNN_STATUS_SUCCESS;
    char line[200];
    for (int p = 0; p < 4; p++)
        if (std::isnan(want[p]) ? !std::isnan(got[p]) : got[p] != want[p]) ok = false;
    snprintf(line, sizeof line,
             "bf16 rounding: 1+2^-8 -> %.9g, -1-2^-8 -> %.9g, 1+3*2^-8 -> %.9g (ties to even), "
             "NaN -> %g",
             (double)got[0], (double)got[1], (double)got[2], (double)got[3]);
    report(ok, line);
}

void find_and_strings() {
    Geo G{"find", 2, 4, 6, 6, 4, 3, 3, 1, 1, 1, 1, 1, 1, 2, CUDNN_CROSS_CORRELATION};
    Descs d(G, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, CUDNN_FMA_MATH);
    {
        cudnnConvolutionFwdAlgoPerf_t p[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
        int got = 0;
        DNN(cudnnFindConvolutionForwardAlgorithm(g_dnn, d.x, d.w, d.cv, d.y,
                                                 CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &got, p));
        bool ok = got == CUDNN_CONVOLUTION_FWD_ALGO_COUNT && p[0].status == CUDNN_STATUS_SUCCESS;
        std::string s;
        for (int i = 0; i < got; i++) {
            size_t need = 0;
            cudnnStatus_t st = ws_query(d, FWD, p[i].algo, &need);
            if (st != p[i].status) ok = false;
            if (st == CUDNN_STATUS_SUCCESS && (need != p[i].memory || p[i].time <= 0)) ok = false;
            if (p[i].determinism != CUDNN_DETERMINISTIC || p[i].mathType != CUDNN_FMA_MATH)
                ok = false;
            if (i && p[i].status == CUDNN_STATUS_SUCCESS && p[i].time < p[i - 1].time) ok = false;
            s += " " + std::to_string(p[i].algo) + (p[i].status ? "x" : "");
        }
        report(ok, "find fwd: all 8 listed, statuses and memory agree with the queries:" + s);
    }
    {
        cudnnConvolutionBwdDataAlgoPerf_t p[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
        int got = 0;
        DNN(cudnnFindConvolutionBackwardDataAlgorithm(g_dnn, d.w, d.y, d.cv, d.x, 3, &got, p));
        bool ok = got == 3;
        for (int i = 0; i < got; i++) {
            cudnnDeterminism_t want = p[i].algo == CUDNN_CONVOLUTION_BWD_DATA_ALGO_0
                                          ? CUDNN_NON_DETERMINISTIC
                                          : CUDNN_DETERMINISTIC;
            if (p[i].determinism != want) ok = false;
        }
        report(ok, "find bwd-data: 3 requested, 3 returned, ALGO_0 non-deterministic");
    }
    {
        cudnnConvolutionBwdFilterAlgoPerf_t p[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
        int got = 0;
        DNN(cudnnFindConvolutionBackwardFilterAlgorithm(
            g_dnn, d.x, d.y, d.cv, d.w, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &got, p));
        bool ok = got == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT;
        for (int i = 0; i < got; i++) {
            bool nondet = p[i].algo == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0 ||
                          p[i].algo == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_3;
            if (p[i].determinism != (nondet ? CUDNN_NON_DETERMINISTIC : CUDNN_DETERMINISTIC))
                ok = false;
            if (p[i].algo == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_WINOGRAD &&
                p[i].status != CUDNN_STATUS_NOT_SUPPORTED)
                ok = false;
        }
        report(ok, "find bwd-filter: ALGO_0 and ALGO_3 non-deterministic, WINOGRAD not supported");
    }
    report(cudnnGetVersion() == CUDNN_VERSION,
           "cudnnGetVersion() == CUDNN_VERSION (" + std::to_string(cudnnGetVersion()) + ")");
    bool ok =
        !strcmp(cudnnGetErrorString(CUDNN_STATUS_SUCCESS), "CUDNN_STATUS_SUCCESS") &&
        !strcmp(cudnnGetErrorString(CUDNN_STATUS_BAD_PARAM), "CUDNN_STATUS_BAD_PARAM") &&
        !strcmp(cudnnGetErrorString(CUDNN_STATUS_NOT_SUPPORTED), "CUDNN_STATUS_NOT_SUPPORTED") &&
        !strcmp(cudnnGetErrorString(CUDNN_STATUS_BAD_PARAM_NULL_POINTER),
                "CUDNN_STATUS_BAD_PARAM_NULL_POINTER") &&
        !strcmp(cudnnGetErrorString(CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED),
                "CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED");
    report(ok, "cudnnGetErrorString gives the enumerants' names");
}

} // namespace

int main() {
    CU(cudaStreamCreateWithFlags(&g_stream, cudaStreamNonBlocking));
    DNN(cudnnCreate(&g_dnn));
    DNN(cudnnSetStream(g_dnn, g_stream));

    for (const Geo &G : kGeos)
        for (int dir = 0; dir < 3; dir++)
            for (int bf16 = 0; bf16 < 2; bf16++)
                for (int nhwc = 0; nhwc < 2; nhwc++)
                    for (int b = 0; b < 2; b++)
                        numeric_case(G, (Dir)dir, bf16, nhwc, b ? 0.5f : 1.0f, b ? 1.0f : 0.0f,
                                     bf16 ? CUDNN_TENSOR_OP_MATH : CUDNN_FMA_MATH);
    /* float data under CUDNN_DEFAULT_MATH: TF32 operands */
    for (int dir = 0; dir < 3; dir++)
        numeric_case(kGeos[1], (Dir)dir, false, true, 1.0f, 0.0f, CUDNN_DEFAULT_MATH);

    refusals();
    deferred();
    bf16_rounding();
    find_and_strings();

    DNN(cudnnDestroy(g_dnn));
    CU(cudaStreamDestroy(g_stream));
    printf("%d of %d cases passed\n", g_cases - g_failed, g_cases);
    return g_failed ? 1 : 0;
}
