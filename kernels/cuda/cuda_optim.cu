/* kernels/cuda/cuda_optim.cu - the fused optimizer step on the GPU (the
 * optim group: sgd_multi_plan, sgd_multi_step, sgd_multi_free; backend.h;
 * kernels/cpu/cpu_optim.c on the CPU).
 *
 * The plan is a device table of the tensors (param, grad, buf, count,
 * group) and of pieces of at most PIECE values (row, offset), uploaded once.
 * A step is one kernel launch over every piece: block b takes pieces b,
 * b + gridDim.x, ..., its threads the values of a piece. The learning rates
 * of the groups travel as a by-value argument, the hyper-parameters too.
 * Each value gets kernels/formulas/sgd.h's update (non-fusing arithmetic),
 * as sgd_step's k_sgd does: the same bits as one sgd_step per tensor.
 */
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "kernels/cuda/cuda_internal.h"
#include "kernels/formulas/sgd.h"

#define PIECE 4096
#define MAX_BLOCKS 4096

typedef struct optim_row {
    float *param;
    const float *grad;
    float *buf;
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
    sg_sgd_tensor *host; /* the rows, for sg_cuda_written */
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

static void *sg_cuda_sgd_multi_plan(sg_backend *be, const sg_sgd_tensor *t, int n) {
    sg_cuda *cu = sg_cu(be);
    SG_CU_ENTER(cu);
    sg_cu_no_capture(cu, "sgd_multi_plan");
    SG_CHECK(n >= 0, "CUDA backend: sgd_multi_plan with %d tensors", n);
    optim_plan *p = (optim_plan *)calloc(1, sizeof *p);
    SG_CHECK(p != NULL, "CUDA backend: out of host memory for the optimizer plan");
    p->n = n;
    p->host = (sg_sgd_tensor *)malloc((size_t)(n ? n : 1) * sizeof *p->host);
    SG_CHECK(p->host != NULL, "CUDA backend: out of host memory for %d optimizer rows", n);
    if (n) memcpy(p->host, t, (size_t)n * sizeof *t);
    for (int i = 0; i < n; i++) {
        SG_CHECK(t[i].group >= 0 && t[i].group < SG_SGD_GROUPS,
                 "CUDA backend: sgd_multi_plan row %d has group %d, outside 0..%d", i, t[i].group,
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
        rows[i] = optim_row{t[i].param, t[i].grad, t[i].buf, t[i].count, t[i].group};
        for (size_t off = 0; off < t[i].count; off += PIECE) pieces[k++] = optim_piece{i, off};
    }
    p->dev = sg_cuda_raw_alloc(cu, p->dev_bytes, "the optimizer's tensor table");
    cudaStream_t s = sg_cu_stream(be);
    CU_CHECK(cudaMemcpyAsync(p->dev, h, p->dev_bytes, cudaMemcpyHostToDevice, s));
    CU_CHECK(cudaStreamSynchronize(s)); /* h is freed next */
    free(h);
    return p;
}

static void sg_cuda_sgd_multi_step(sg_backend *be, void *pl, const float lr[SG_SGD_GROUPS],
                                   float momentum, float dampening, float wd, int nesterov,
                                   int first) {
    optim_plan *p = (optim_plan *)pl;
    SG_CHECK(p != NULL, "CUDA backend: sgd_multi_step without a plan (sgd_multi_plan)");
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
}
