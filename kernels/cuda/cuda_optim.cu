/* kernels/cuda/cuda_optim.cu - the fused optimizer steps on the GPU (the
 * optim group: sgd_multi_plan, sgd_multi_step, sgd_multi_free, the same
 * three for AdamW and optim_grad_sumsq over a plan's gradients; backend.h;
 * kernels/cpu/cpu_optim.c on the CPU).
 *
 * The plan is a device table of the tensors (param, grad, buf, count,
 * group) and of pieces of at most PIECE values (row, offset), uploaded once.
 * A step is one kernel launch over every piece: block b takes pieces b,
 * b + gridDim.x, ..., its threads the values of a piece. The learning rates
 * of the groups travel as a by-value argument, the hyper-parameters too.
 * Each value gets kernels/formulas/sgd.h's update (non-fusing arithmetic),
 * as sgd_step's k_sgd does: the same bits as one sgd_step per tensor.
 * AdamW's plan is the same table with the two moments in the rows; each
 * value gets kernels/formulas/adamw.h's update, as on the CPU.
 */
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "kernels/cuda/cuda_internal.h"
#include "kernels/cuda/cuda_reduce.cuh"
#include "kernels/formulas/adamw.h"
#include "kernels/formulas/sgd.h"

#define PIECE 4096
#define MAX_BLOCKS 4096

typedef struct optim_row {
    float *param;
    const float *grad;
    float *buf;
    float *buf2; /* AdamW: exp_avg in buf, exp_avg_sq here; SGD: NULL */
    size_t count;
    int group;
} optim_row;

typedef struct optim_piece {
    int row;
    size_t off;
} optim_piece;

typedef struct optim_lr {
    float v[SG_SGD_GROUPS];
} optim_lr;

typedef struct optim_plan {
    sg_sgd_tensor *host; /* the rows, for sg_cuda_written (buf: exp_avg for AdamW) */
    int adamw;           /* 1: an adamw_multi_plan */
    int n;
    size_t n_pieces;
    void *dev; /* optim_row[n], then optim_piece[n_pieces] */
    size_t dev_bytes;
    size_t pieces_at; /* byte offset of the pieces in dev */
} optim_plan;

__global__ void k_sgd_multi(const optim_row *rows, const optim_piece *pieces, size_t n_pieces,
                            optim_lr lr, float momentum, float damp1, float wd, int nesterov,
                            int first) {
    for (size_t k = blockIdx.x; k < n_pieces; k += gridDim.x) {
        const optim_piece q = pieces[k];
        const optim_row r = rows[q.row];
        size_t left = r.count - q.off, n = left < PIECE ? left : PIECE;
        float l = lr.v[r.group];
        for (size_t j = threadIdx.x; j < n; j += blockDim.x) {
            size_t i = q.off + j;
            r.param[i] = sg_sgd_update(r.param[i], r.grad[i], momentum != 0.0f ? r.buf + i : NULL,
                                       l, momentum, damp1, wd, nesterov, first);
        }
    }
}

__global__ void k_adamw_multi(const optim_row *rows, const optim_piece *pieces, size_t n_pieces,
                              sg_adamw_args a) {
    for (size_t k = blockIdx.x; k < n_pieces; k += gridDim.x) {
        const optim_piece q = pieces[k];
        const optim_row r = rows[q.row];
        size_t left = r.count - q.off, n = left < PIECE ? left : PIECE;
        float decay = a.decay[r.group], step = a.step_size[r.group];
        for (size_t j = threadIdx.x; j < n; j += blockDim.x) {
            size_t i = q.off + j;
            r.param[i] = sg_adamw_update(r.param[i], r.grad[i], r.buf + i, r.buf2 + i, decay, step,
                                         a.w1, a.beta2, a.omb2, a.bc2_sqrt, a.eps);
        }
    }
}

/* The plan of n rows (buf2[i]: AdamW's exp_avg_sq of row i, or NULL for
 * SGD); op names the caller in errors. */
static optim_plan *make_plan(sg_backend *be, const sg_sgd_tensor *t, float *const *buf2, int n,
                             const char *op) {
    sg_cuda *cu = sg_cu(be);
    SG_CU_ENTER(cu);
    sg_cu_no_capture(cu, op);
    SG_CHECK(n >= 0, "CUDA backend: %s with %d tensors", op, n);
    optim_plan *p = (optim_plan *)calloc(1, sizeof *p);
    SG_CHECK(p != NULL, "CUDA backend: out of host memory for the optimizer plan");
    p->n = n;
    p->adamw = buf2 != NULL;
    p->host = (sg_sgd_tensor *)malloc((size_t)(n ? n : 1) * sizeof *p->host);
    SG_CHECK(p->host != NULL, "CUDA backend: out of host memory for %d optimizer rows", n);
    if (n) memcpy(p->host, t, (size_t)n * sizeof *t);
    for (int i = 0; i < n; i++) {
        SG_CHECK(t[i].group >= 0 && t[i].group < SG_SGD_GROUPS,
                 "CUDA backend: %s row %d has group %d, outside 0..%d", op, i, t[i].group,
                 SG_SGD_GROUPS - 1);
        p->n_pieces += (t[i].count + PIECE - 1) / PIECE;
    }
    p->pieces_at = ((size_t)n * sizeof(optim_row) + 15) / 16 * 16;
    p->dev_bytes = p->pieces_at + p->n_pieces * sizeof(optim_piece);
    char *h = (char *)calloc(1, p->dev_bytes ? p->dev_bytes : 1);
    SG_CHECK(h != NULL, "CUDA backend: out of host memory for the optimizer table (%zu bytes)",
             p->dev_bytes);
    optim_row *rows = (optim_row *)h;
    optim_piece *pieces = (optim_piece *)(h + p->pieces_at);
    size_t k = 0;
    for (int i = 0; i < n; i++) {
        rows[i] = optim_row{t[i].param, t[i].grad, t[i].buf, buf2 ? buf2[i] : NULL,
                            t[i].count, t[i].group};
        for (size_t off = 0; off < t[i].count; off += PIECE) pieces[k++] = optim_piece{i, off};
    }
    p->dev = sg_cuda_raw_alloc(cu, p->dev_bytes, "the optimizer's tensor table");
    cudaStream_t s = sg_cu_stream(be);
    CU_CHECK(cudaMemcpyAsync(p->dev, h, p->dev_bytes, cudaMemcpyHostToDevice, s));
    CU_CHECK(cudaStreamSynchronize(s)); /* h is freed next */
    free(h);
    return p;
}

static void *sg_cuda_sgd_multi_plan(sg_backend *be, const sg_sgd_tensor *t, int n) {
    return make_plan(be, t, NULL, n, "sgd_multi_plan");
}

static void *sg_cuda_adamw_multi_plan(sg_backend *be, const sg_adamw_tensor *t, int n) {
    SG_CHECK(n >= 0, "CUDA backend: adamw_multi_plan with %d tensors", n);
    size_t m = (size_t)(n ? n : 1);
    sg_sgd_tensor *rows = (sg_sgd_tensor *)malloc(m * sizeof *rows);
    float **sq = (float **)malloc(m * sizeof *sq);
    SG_CHECK(rows && sq, "CUDA backend: out of host memory for %d optimizer rows", n);
    for (int i = 0; i < n; i++) {
        SG_CHECK(t[i].count == 0 || (t[i].exp_avg && t[i].exp_avg_sq),
                 "CUDA backend: adamw_multi_plan row %d has no exp_avg / exp_avg_sq buffer", i);
        rows[i] = sg_sgd_tensor{t[i].param, t[i].grad, t[i].exp_avg, t[i].count, t[i].group};
        sq[i] = t[i].exp_avg_sq;
    }
    optim_plan *p = make_plan(be, rows, sq, n, "adamw_multi_plan");
    free(rows);
    free(sq);
    return p;
}

static void sg_cuda_adamw_multi_step(sg_backend *be, void *pl, const sg_adamw_args *a) {
    optim_plan *p = (optim_plan *)pl;
    SG_CHECK(p != NULL && p->adamw,
             "CUDA backend: adamw_multi_step without an AdamW plan (adamw_multi_plan)");
    for (int i = 0; i < p->n; i++) /* their bf16 copies are stale */
        sg_cuda_written(be, p->host[i].param, p->host[i].count * sizeof(float));
    if (p->n_pieces == 0) return;
    unsigned blocks = p->n_pieces < MAX_BLOCKS ? (unsigned)p->n_pieces : MAX_BLOCKS;
    const optim_row *rows = (const optim_row *)p->dev;
    const optim_piece *pieces = (const optim_piece *)((char *)p->dev + p->pieces_at);
    SG_LAUNCH(blocks, EW_THREADS, 0, sg_cu_stream(be), k_adamw_multi)
    (rows, pieces, p->n_pieces, *a);
    CU_LAUNCH_CHECK("k_adamw_multi");
}

static void sg_cuda_sgd_multi_step(sg_backend *be, void *pl, const float lr[SG_SGD_GROUPS],
                                   float momentum, float dampening, float wd, int nesterov,
                                   int first) {
    optim_plan *p = (optim_plan *)pl;
    SG_CHECK(p != NULL && !p->adamw,
             "CUDA backend: sgd_multi_step without an SGD plan (sgd_multi_plan)");
    for (int i = 0; i < p->n; i++) { /* their bf16 copies are stale */
        SG_CHECK(momentum == 0.0f || p->host[i].buf,
                 "CUDA backend: sgd_multi_step with momentum %g: row %d has no buffer",
                 (double)momentum, i);
        sg_cuda_written(be, p->host[i].param, p->host[i].count * sizeof(float));
    }
    if (p->n_pieces == 0) return;
    optim_lr l;
    for (int g = 0; g < SG_SGD_GROUPS; g++) l.v[g] = lr[g];
    unsigned blocks = p->n_pieces < MAX_BLOCKS ? (unsigned)p->n_pieces : MAX_BLOCKS;
    const optim_row *rows = (const optim_row *)p->dev;
    const optim_piece *pieces = (const optim_piece *)((char *)p->dev + p->pieces_at);
    SG_LAUNCH(blocks, EW_THREADS, 0, sg_cu_stream(be), k_sgd_multi)
    (rows, pieces, p->n_pieces, l, momentum, sg_sgd_damp1(dampening), wd, nesterov, first);
    CU_LAUNCH_CHECK("k_sgd_multi");
}

/* optim_grad_sumsq: block b sums the squares of pieces b, b + gridDim.x,
 * ... in double into partial[b]; one block then sums the partials (a fixed
 * grid and order: deterministic, cuda_reduce.cuh). */
__global__ void k_grad_sumsq_partial(const optim_row *rows, const optim_piece *pieces,
                                     size_t n_pieces, double *partial) {
    __shared__ double sh[32];
    double s = 0;
    for (size_t k = blockIdx.x; k < n_pieces; k += gridDim.x) {
        const optim_piece q = pieces[k];
        const optim_row r = rows[q.row];
        size_t left = r.count - q.off, n = left < PIECE ? left : PIECE;
        for (size_t j = threadIdx.x; j < n; j += blockDim.x) {
            double g = (double)r.grad[q.off + j];
            s += g * g;
        }
    }
    s = sg_block_sum(s, sh);
    if (threadIdx.x == 0) partial[blockIdx.x] = s;
}

__global__ void k_grad_sumsq_total(const double *partial, int nparts, double *out) {
    __shared__ double sh[32];
    double s = 0;
    for (int i = threadIdx.x; i < nparts; i += blockDim.x) s += partial[i];
    s = sg_block_sum(s, sh);
    if (threadIdx.x == 0) out[0] = s;
}

static double sg_cuda_optim_grad_sumsq(sg_backend *be, void *pl) {
    optim_plan *p = (optim_plan *)pl;
    SG_CHECK(p != NULL, "CUDA backend: optim_grad_sumsq without a plan");
    if (p->n_pieces == 0) return 0.0;
    sg_cuda *cu = sg_cu(be);
    cudaStream_t s = sg_cu_stream(be);
    unsigned blocks = p->n_pieces < SG_CUDA_RED_BLOCKS ? (unsigned)p->n_pieces : SG_CUDA_RED_BLOCKS;
    const optim_row *rows = (const optim_row *)p->dev;
    const optim_piece *pieces = (const optim_piece *)((char *)p->dev + p->pieces_at);
    SG_LAUNCH(blocks, SG_CUDA_RED_THREADS, 0, s, k_grad_sumsq_partial)
    (rows, pieces, p->n_pieces, cu->red_partial);
    CU_LAUNCH_CHECK("k_grad_sumsq_partial");
    SG_LAUNCH(1, SG_CUDA_RED_THREADS, 0, s, k_grad_sumsq_total)
    (cu->red_partial, (int)blocks, cu->red_result);
    CU_LAUNCH_CHECK("k_grad_sumsq_total");
    double r;
    sg_cuda_read_result(be, &r, 1);
    return r;
}

static void sg_cuda_sgd_multi_free(sg_backend *be, void *pl) {
    optim_plan *p = (optim_plan *)pl;
    if (!p) return;
    sg_cuda *cu = sg_cu(be);
    SG_CU_ENTER(cu);
    /* a step still in flight reads the table */
    CU_CHECK(cudaStreamSynchronize(cu->streams[SG_STREAM_COMPUTE]));
    sg_cuda_raw_free(cu, p->dev, p->dev_bytes);
    free(p->host);
    free(p);
}

void sg_cuda_fill_optim_ops(sg_ops *o) {
    o->sgd_multi_plan = sg_cuda_sgd_multi_plan;
    o->sgd_multi_step = sg_cuda_sgd_multi_step;
    o->sgd_multi_free = sg_cuda_sgd_multi_free;
    o->adamw_multi_plan = sg_cuda_adamw_multi_plan;
    o->adamw_multi_step = sg_cuda_adamw_multi_step;
    o->adamw_multi_free = sg_cuda_sgd_multi_free; /* the same plan struct */
    o->optim_grad_sumsq = sg_cuda_optim_grad_sumsq;
}
