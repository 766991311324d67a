/* kernels/cpu/conv/pack.c - float32 weights [k][c][r][s] into the bf16
 * layout of oneDNN's brgconv kernels (part of the conv group: onednn.c
 * calls it through conv_internal.h where a native bf16 entry's weight
 * layout is one of these, instead of oneDNN's reorder).
 *
 * Why: the bf16 weight copies are made again after every SGD step, and
 * oneDNN 2.6's reorder into these layouts ("AcdB64a2b" and kin) reads the
 * float32 weights 64 kernels at a time with strides, a visible share of
 * the bf16 step on one thread (docs/lab/cpu-step-2026.md). Here a block of 64 kernels x 32
 * input channels is read row by row (each kernel's run of 32 x r x s floats
 * is contiguous), rounded to bf16 (round-to-nearest-even,
 * formulas/bf16.h: the bits oneDNN's conversion gives), and each (tap,
 * channel pair) written as one contiguous run of 64 pairs.
 *
 * The layouts: 4-D weights whose inner blocks are `ob` output channels
 * (dim 0), then 2 input channels (dim 1), pairs innermost; the outer
 * dimensions in any order (the strides of the memory desc); padded channels
 * (k up to a multiple of ob, c to even) are written as 0, as oneDNN's
 * reorder writes them. Anything else returns 0 and the caller reorders
 * with oneDNN.
 */
#include <string.h>
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#endif

#include "kernels/cpu/conv/conv_internal.h"
#include "kernels/formulas/bf16.h"

/* A block: PAIRS channel pairs of up to OB_MAX kernels of up to TAPS_MAX
 * taps (1x1 and 3x3; other kernels go to oneDNN's reorder). */
enum { PAIRS = 16, OB_MAX = 64, TAPS_MAX = 9 };

int sg_conv_pack_bf16_ok(const dnnl_memory_desc_t *md) {
    const dnnl_blocking_desc_t *b = &md->format_desc.blocking;
    if (md->ndims != 4 || md->data_type != dnnl_bf16 || md->format_kind != dnnl_blocked) return 0;
    if (md->offset0 != 0 || md->extra.flags != 0) return 0;
    if (b->inner_nblks != 2 || b->inner_idxs[0] != 0 || b->inner_idxs[1] != 1) return 0;
    if (b->inner_blks[1] != 2 || b->inner_blks[0] < 1 || b->inner_blks[0] > OB_MAX) return 0;
    if (md->padded_dims[0] % b->inner_blks[0] || md->padded_dims[1] % 2) return 0;
    if (md->padded_dims[2] != md->dims[2] || md->padded_dims[3] != md->dims[3]) return 0;
    if (md->dims[2] * md->dims[3] > TAPS_MAX) return 0;
    for (int i = 0; i < 4; i++)
        if (md->padded_offsets[i] != 0) return 0;
    return 1;
}

/* run[o] = row o's bf16 at i0 | its bf16 at i1 << 16 (a channel pair at
 * one tap), for the ob kernels of a block, rows `row` values apart. */
static void pair_run(const uint16_t *c16, long row, long ob, long i0, long i1, uint32_t *run) {
    for (long o = 0; o < ob; o++)
        run[o] = (uint32_t)c16[o * row + i0] | (uint32_t)c16[o * row + i1] << 16;
}

#if defined(__x86_64__) && defined(__GNUC__)
/* pair_run with AVX-512 gathers, 16 kernels at a time (ob is a multiple of
 * 16 in these layouts); reads 2 bytes past the last value (c16 has room). */
__attribute__((target("avx512f,avx512bw"))) static void
pair_run_avx512(const uint16_t *c16, long row, long ob, long i0, long i1, uint32_t *run) {
    const __m512i lanes = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    const __m512i idx = _mm512_mullo_epi32(lanes, _mm512_set1_epi32((int)(row * 2)));
    const __m512i low = _mm512_set1_epi32(0xffff);
    for (long o = 0; o < ob; o += 16) {
        const char *base = (const char *)(c16 + o * row);
        __m512i lo = _mm512_i32gather_epi32(idx, base + i0 * 2, 1);
        __m512i hi = _mm512_i32gather_epi32(idx, base + i1 * 2, 1);
        __m512i v = _mm512_or_si512(_mm512_and_si512(lo, low), _mm512_slli_epi32(hi, 16));
        _mm512_storeu_si512(run + o, v);
    }
}
#else
#define pair_run_avx512 pair_run /* never chosen: avx512 is 0 */
#endif

/* One block: kernels [a*ob, a*ob + ob) x channel pairs [p0, p0 + np).
 * Each kernel's run of the block (contiguous in w) is rounded to bf16
 * into c16 (0 for padding), then per (tap, pair) the ob kernels' pairs
 * are gathered into one run and written. */
SG_CPU_CLONES static void pack_block(const dnnl_memory_desc_t *md, const float *w, uint16_t *dst,
                                     long a, long p0, int np, int avx512) {
    const dnnl_dims_t *st = &md->format_desc.blocking.strides;
    long ob = md->format_desc.blocking.inner_blks[0];
    long K = md->dims[0], C = md->dims[1], S = md->dims[3], rs = md->dims[2] * S;
    long row = 2 * PAIRS * rs;                           /* values a kernel's row */
    long nc = C - 2 * p0 < 2 * np ? C - 2 * p0 : 2 * np; /* the block's real channels */
    uint16_t c16[OB_MAX * 2 * PAIRS * TAPS_MAX + 2];     /* 36 KB at most */
    for (long o = 0; o < ob; o++) {
        long k = a * ob + o, n = k < K ? nc * rs : 0;
        const float *src = w + (k * C + 2 * p0) * rs;
        uint16_t *d = c16 + o * row;
#pragma omp simd
        for (long i = 0; i < n; i++) d[i] = sg_bf16_bits(src[i]);
        for (long i = n; i < row; i++) d[i] = 0;
    }
    c16[ob * row] = c16[ob * row + 1] = 0;
    for (long q = 0; q < rs; q++) {
        long r = q / S, s = q % S;
        for (int p = 0; p < np; p++) {
            uint32_t run[OB_MAX];
            long i0 = 2 * p * rs + q, i1 = i0 + rs;
            (avx512 ? pair_run_avx512 : pair_run)(c16, row, ob, i0, i1, run);
            memcpy(dst + a * (*st)[0] + (p0 + p) * (*st)[1] + r * (*st)[2] + s * (*st)[3], run,
                   (size_t)ob * sizeof(uint32_t));
        }
    }
}

int sg_conv_pack_bf16(const dnnl_memory_desc_t *md, const float *w, uint16_t *dst) {
    if (!sg_conv_pack_bf16_ok(md)) return 0;
    long ob = md->format_desc.blocking.inner_blks[0];
    long na = md->padded_dims[0] / ob, npair = md->padded_dims[1] / 2;
    long nb = (npair + PAIRS - 1) / PAIRS;
#if defined(__x86_64__) && defined(__GNUC__)
    int avx512 = ob % 16 == 0 && __builtin_cpu_supports("avx512f") &&
                 __builtin_cpu_supports("avx512bw");
#else
    int avx512 = 0;
#endif
    size_t work = (size_t)md->padded_dims[0] * md->padded_dims[1] * md->dims[2] * md->dims[3];
#pragma omp parallel for schedule(static) collapse(2) if (work >= SG_CPU_PAR_MIN)
    for (long a = 0; a < na; a++)
        for (long b = 0; b < nb; b++) {
            long p0 = b * PAIRS;
            pack_block(md, w, dst, a, p0, (int)(npair - p0 < PAIRS ? npair - p0 : PAIRS), avx512);
        }
    return 1;
}
