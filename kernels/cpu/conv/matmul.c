/* kernels/cpu/conv/matmul.c - GEMMs as oneDNN matmul primitives, for
 * the conv group (the path table (paths.c) picks the paths and calls them through
 * conv_internal.h; this file fills no op):
 *  - sg_conv_mm_gemm: C (+)= op(A) op(B) in dnnl_sgemm's row-major terms,
 *    float32 or bf16 x bf16 -> float32 (oneDNN 2.6's C API has no bf16
 *    GEMM; its matmul primitive has one, brg:avx512_core_bf16 on AVX512-BF16
 *    and AMX). The per-tap path of native bf16 runs on it.
 *  - the backward passes of 1x1 stride-1 convolutions on NHWC activations,
 *    which are single GEMMs over the N*H*W pixels, and which oneDNN's conv
 *    primitives run slower than its matmul (the row mm1x1, native.c).
 *
 * Primitives are cached per distinct GEMM (dtype, transposes, sizes,
 * leading dimensions, add): a conv needs a few (one per distinct tap
 * rectangle), built on first use; runtime dims would make one primitive per
 * conv but oneDNN 2.6's brgemm matmul re-derives its blocking per call
 * then. "add" (C += A B) is the sum post-op with scale 1: the float32 sum of
 * the accumulator and C, what beta = 1 computes. All primitives share one
 * scratchpad (user mode), grown when a new one needs more.
 */
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/conv/conv_internal.h"

typedef struct mm_key {
    int bf16, add;
    char ta, tb;
    long m, n, k, lda, ldb, ldc;
} mm_key;

typedef struct mm_entry {
    mm_key key;
    dnnl_primitive_t prim;
    dnnl_memory_t a, b, c, scratch; /* handles set per call; scratch NULL if none */
    struct mm_entry *next;
} mm_entry;

struct sg_conv_mm {
    dnnl_engine_t eng;
    dnnl_stream_t stream;
    mm_entry *head;
    int entries;
    ws_buf scratch;
};

sg_conv_mm *sg_conv_mm_create(dnnl_engine_t eng, dnnl_stream_t stream) {
    sg_conv_mm *mm = calloc(1, sizeof *mm);
    if (!mm) SG_FATAL("CPU backend: out of memory creating the conv matmul cache");
    mm->eng = eng;
    mm->stream = stream;
    return mm;
}

void sg_conv_mm_destroy(sg_conv_mm *mm) {
    if (!mm) return;
    for (mm_entry *e = mm->head, *next; e; e = next) {
        next = e->next;
        DNNL_CHECK(dnnl_memory_destroy(e->a));
        DNNL_CHECK(dnnl_memory_destroy(e->b));
        DNNL_CHECK(dnnl_memory_destroy(e->c));
        if (e->scratch) DNNL_CHECK(dnnl_memory_destroy(e->scratch));
        DNNL_CHECK(dnnl_primitive_destroy(e->prim));
        free(e);
    }
    sg_cpu_aligned_free(mm->scratch.p);
    free(mm);
}

void sg_conv_mm_stats(const sg_conv_mm *mm, int *entries, size_t *scratch_bytes) {
    *entries = mm->entries;
    *scratch_bytes = mm->scratch.bytes;
}

/* A rows x cols matrix, row-major with leading dimension ld, or (t == 'T')
 * the transpose of one: element (i, j) at i * ld + j, or j * ld + i. */
static void mat_md(dnnl_memory_desc_t *md, long rows, long cols, long ld, char t,
                   dnnl_data_type_t dt) {
    dnnl_dims_t dims = {rows, cols};
    dnnl_dims_t strides = {ld, 1};
    if (t == 'T') strides[0] = 1, strides[1] = ld;
    DNNL_CHECK(dnnl_memory_desc_init_by_strides(md, 2, dims, dt, strides));
}

static mm_entry *build(sg_conv_mm *mm, const mm_key *k) {
    mm_entry *e = calloc(1, sizeof *e);
    if (!e) SG_FATAL("CPU backend: out of memory in the conv matmul cache");
    e->key = *k;
    dnnl_data_type_t dt = k->bf16 ? dnnl_bf16 : dnnl_f32;
    dnnl_memory_desc_t a, b, c;
    mat_md(&a, k->m, k->k, k->lda, k->ta, dt);
    mat_md(&b, k->k, k->n, k->ldb, k->tb, dt);
    mat_md(&c, k->m, k->n, k->ldc, 'N', dnnl_f32);
    dnnl_matmul_desc_t md;
    DNNL_CHECK(dnnl_matmul_desc_init(&md, &a, &b, NULL, &c));
    dnnl_primitive_attr_t attr;
    DNNL_CHECK(dnnl_primitive_attr_create(&attr));
    DNNL_CHECK(dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user));
    if (k->add) {
        dnnl_post_ops_t po;
        DNNL_CHECK(dnnl_post_ops_create(&po));
        DNNL_CHECK(dnnl_post_ops_append_sum(po, 1.0f));
        DNNL_CHECK(dnnl_primitive_attr_set_post_ops(attr, po));
        DNNL_CHECK(dnnl_post_ops_destroy(po));
    }
    dnnl_primitive_desc_t pd;
    DNNL_CHECK(dnnl_primitive_desc_create(&pd, &md, attr, mm->eng, NULL));
    DNNL_CHECK(dnnl_primitive_attr_destroy(attr));
    DNNL_CHECK(dnnl_primitive_create(&e->prim, pd));
    DNNL_CHECK(dnnl_memory_create(&e->a, &a, mm->eng, DNNL_MEMORY_NONE));
    DNNL_CHECK(dnnl_memory_create(&e->b, &b, mm->eng, DNNL_MEMORY_NONE));
    DNNL_CHECK(dnnl_memory_create(&e->c, &c, mm->eng, DNNL_MEMORY_NONE));
    const dnnl_memory_desc_t *smd = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
    size_t sbytes = smd ? dnnl_memory_desc_get_size(smd) : 0;
    if (sbytes) {
        DNNL_CHECK(dnnl_memory_create(&e->scratch, smd, mm->eng, DNNL_MEMORY_NONE));
        ws_reserve(&mm->scratch, sbytes);
    }
    const char *impl = NULL;
    DNNL_CHECK(dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl));
    SG_DEBUG("conv matmul: %s %c%c m%ld n%ld k%ld lda%ld ldb%ld ldc%ld%s -> %s (scratchpad %zu B)",
             k->bf16 ? "bf16" : "f32", k->ta, k->tb, k->m, k->n, k->k, k->lda, k->ldb, k->ldc,
             k->add ? " +=" : "", impl ? impl : "?", sbytes);
    DNNL_CHECK(dnnl_primitive_desc_destroy(pd));
    e->next = mm->head;
    mm->head = e;
    mm->entries++;
    return e;
}

void sg_conv_mm_gemm(sg_conv_mm *mm, int bf16, char ta, char tb, long m, long n, long k,
                     const void *a, long lda, const void *b, long ldb, int add, float *c,
                     long ldc) {
    if (m <= 0 || n <= 0) return;
    if (k <= 0) { /* an empty sum: C = 0, or unchanged */
        if (!c) return;
        for (long i = 0; i < m && !add; i++) memset(c + i * ldc, 0, (size_t)n * sizeof(float));
        return;
    }
    mm_key key;
    memset(&key, 0, sizeof key); /* padding too: keys compare with memcmp */
    key.bf16 = bf16, key.add = add, key.ta = ta, key.tb = tb;
    key.m = m, key.n = n, key.k = k, key.lda = lda, key.ldb = ldb, key.ldc = ldc;
    mm_entry *e = mm->head;
    while (e && memcmp(&e->key, &key, sizeof key) != 0) e = e->next;
    if (!e) e = build(mm, &key);
    if (!c) return; /* prepare */
    DNNL_CHECK(dnnl_memory_set_data_handle(e->a, (void *)a));
    DNNL_CHECK(dnnl_memory_set_data_handle(e->b, (void *)b));
    DNNL_CHECK(dnnl_memory_set_data_handle(e->c, c));
    dnnl_exec_arg_t args[4] = {
        {DNNL_ARG_SRC, e->a}, {DNNL_ARG_WEIGHTS, e->b}, {DNNL_ARG_DST, e->c}, {0, NULL}};
    int nargs = 3;
    if (e->scratch) {
        DNNL_CHECK(dnnl_memory_set_data_handle(e->scratch, mm->scratch.p));
        args[nargs++] = (dnnl_exec_arg_t){DNNL_ARG_SCRATCHPAD, e->scratch};
    }
    DNNL_CHECK(dnnl_primitive_execute(e->prim, mm->stream, nargs, args));
    DNNL_CHECK(dnnl_stream_wait(mm->stream));
}

int sg_conv_mm_1x1(const sg_conv_desc *d) {
    return d->r == 1 && d->s == 1 && d->stride_h == 1 && d->stride_w == 1 && d->pad_h == 0 &&
           d->pad_w == 0 && sg_conv_groups(d) == 1;
}

/* NHWC: y [pixels x k] = x [pixels x c] . W^T (W [k x c] row-major). */
void sg_conv_mm_1x1_fwd(sg_conv_mm *mm, const sg_conv_desc *d, int bf16, const void *x,
                        const void *w, float *y) {
    long px = (long)d->n * d->h * d->w;
    sg_conv_mm_gemm(mm, bf16, 'N', 'T', px, d->k, d->c, x, d->c, w, d->c, 0, y, d->k);
}

/* NHWC: dx [pixels x c] = dy [pixels x k] . W [k x c] (W is PyTorch's
 * [k, c, 1, 1], row-major [k x c] as it is). */
void sg_conv_mm_1x1_bwd_data(sg_conv_mm *mm, const sg_conv_desc *d, int bf16, const void *dy,
                             const void *w, float *dx) {
    long px = (long)d->n * d->h * d->w;
    sg_conv_mm_gemm(mm, bf16, 'N', 'N', px, d->c, d->k, dy, d->k, w, d->c, 0, dx, d->c);
}

/* NHWC: dW [k x c] = dy^T [k x pixels] . x [pixels x c] */
void sg_conv_mm_1x1_bwd_weight(sg_conv_mm *mm, const sg_conv_desc *d, int bf16, const void *x,
                               const void *dy, float *dw) {
    long px = (long)d->n * d->h * d->w;
    sg_conv_mm_gemm(mm, bf16, 'T', 'N', d->k, d->c, px, dy, d->k, x, d->c, 0, dw, d->c);
}
