/* kernels/cpu/cpu_optim.c - the fused optimizer steps on the CPU (the optim
 * group: sgd_multi_plan, sgd_multi_step, sgd_multi_free, the same three
 * for AdamW, and optim_grad_sumsq over a plan's gradients; backend.h).
 *
 * The plan is a copy of the tensors and a list of pieces of at most
 * SG_CPU_SGD_CHUNK values, so one parallel loop covers the whole step
 * (sgd_step forks once per tensor, and not at all for the many small ones).
 * Each piece runs cpu_elem.c's update (sg_cpu_sgd_span): the same
 * operations in the same order on each value as sgd_step, so the same bits.
 * AdamW's plan is cut the same way; each value gets
 * kernels/formulas/adamw.h's update, as on the GPU.
 */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "kernels/cpu/cpu_internal.h"
#include "kernels/formulas/adamw.h"
#include "kernels/formulas/sgd.h"

typedef struct piece {
    int row;
    size_t off, n;
} piece;

/* t: the rows (sg_sgd_tensor for SGD, sg_adamw_tensor for AdamW) */
typedef struct plan {
    sg_sgd_tensor *t;
    sg_adamw_tensor *a;
    int n;
    piece *pieces;
    size_t n_pieces, total;
    double *part; /* optim_grad_sumsq: one sum a piece */
} plan;

/* Cuts n rows of count[i] values (group[i]) into pieces; `op` names the
 * caller in errors. */
static void cut_pieces(plan *p, const size_t *count, const int *group, int n, const char *op) {
    p->n = n;
    for (int i = 0; i < n; i++) {
        SG_CHECK(group[i] >= 0 && group[i] < SG_SGD_GROUPS,
                 "CPU backend: %s row %d has group %d, outside 0..%d", op, i, group[i],
                 SG_SGD_GROUPS - 1);
        p->n_pieces += (count[i] + SG_CPU_SGD_CHUNK - 1) / SG_CPU_SGD_CHUNK;
        p->total += count[i];
    }
    p->pieces = malloc((p->n_pieces ? p->n_pieces : 1) * sizeof *p->pieces);
    p->part = malloc((p->n_pieces ? p->n_pieces : 1) * sizeof *p->part);
    SG_CHECK(p->pieces != NULL && p->part != NULL,
             "CPU backend: out of host memory for %zu optimizer pieces", p->n_pieces);
    size_t k = 0;
    for (int i = 0; i < n; i++)
        for (size_t off = 0; off < count[i]; off += SG_CPU_SGD_CHUNK) {
            size_t left = count[i] - off;
            p->pieces[k++] = (piece){i, off, left < SG_CPU_SGD_CHUNK ? left : SG_CPU_SGD_CHUNK};
        }
}

/* A plan of n rows, their counts and groups read by `row` from `rows`
 * (rowsize bytes each) into host arrays, copied into *copy. */
static plan *new_plan(const void *rows, size_t rowsize, int n, size_t count_at, size_t group_at,
                      void **copy, const char *op) {
    SG_CHECK(n >= 0, "CPU backend: %s with %d tensors", op, n);
    plan *p = calloc(1, sizeof *p);
    size_t m = (size_t)(n ? n : 1);
    *copy = malloc(m * rowsize);
    size_t *count = calloc(m, sizeof *count);
    int *group = calloc(m, sizeof *group);
    SG_CHECK(p && *copy && count && group, "CPU backend: out of host memory for %d %s rows", n, op);
    if (n) memcpy(*copy, rows, (size_t)n * rowsize);
    for (int i = 0; i < n; i++) {
        const char *r = (const char *)rows + (size_t)i * rowsize;
        memcpy(&count[i], r + count_at, sizeof count[i]);
        memcpy(&group[i], r + group_at, sizeof group[i]);
    }
    cut_pieces(p, count, group, n, op);
    free(count);
    free(group);
    return p;
}

static void *sgd_multi_plan(sg_backend *be, const sg_sgd_tensor *t, int n) {
    (void)be;
    void *copy = NULL;
    plan *p = new_plan(t, sizeof *t, n, offsetof(sg_sgd_tensor, count),
                       offsetof(sg_sgd_tensor, group), &copy, "sgd_multi_plan");
    p->t = copy;
    return p;
}

static void sgd_multi_step(sg_backend *be, void *pl, const float lr[SG_SGD_GROUPS], float momentum,
                           float dampening, float wd, int nesterov, int first) {
    plan *p = pl;
    SG_CHECK(p != NULL && p->t != NULL,
             "CPU backend: sgd_multi_step without an SGD plan (sgd_multi_plan)");
    for (int i = 0; i < p->n; i++) { /* the bf16 weight copies are stale from here on */
        SG_CHECK(momentum == 0.0f || p->t[i].buf,
                 "CPU backend: sgd_multi_step with momentum %g: row %d has no buffer",
                 (double)momentum, i);
        sg_cpu_written(be, p->t[i].param, p->t[i].count * sizeof(float));
    }
    float damp = sg_sgd_damp1(dampening);
    long np = (long)p->n_pieces;
#pragma omp parallel for schedule(static) if (p->total >= SG_CPU_PAR_MIN)
    for (long k = 0; k < np; k++) {
        const piece *q = &p->pieces[k];
        const sg_sgd_tensor *t = &p->t[q->row];
        float *b = momentum == 0.0f ? NULL : t->buf + q->off;
        sg_cpu_sgd_span(t->param + q->off, t->grad + q->off, b, q->n, lr[t->group], momentum, damp,
                        wd, nesterov, first);
    }
}

static void sgd_multi_free(sg_backend *be, void *pl) {
    (void)be;
    plan *p = pl;
    if (!p) return;
    free(p->pieces);
    free(p->part);
    free(p->t);
    free(p->a);
    free(p);
}

/* Each piece's sum in parallel, then the pieces in order: the same value
 * whatever the thread count. */
static double optim_grad_sumsq(sg_backend *be, void *pl) {
    (void)be;
    plan *p = pl;
    SG_CHECK(p != NULL, "CPU backend: optim_grad_sumsq without a plan");
    long np = (long)p->n_pieces;
#pragma omp parallel for schedule(static) if (p->total >= SG_CPU_PAR_MIN)
    for (long k = 0; k < np; k++) {
        const piece *q = &p->pieces[k];
        const float *g = p->t ? p->t[q->row].grad : p->a[q->row].grad;
        g += q->off;
        double s = 0;
        for (size_t i = 0; i < q->n; i++) s += (double)g[i] * g[i];
        p->part[k] = s;
    }
    double s = 0;
    for (long k = 0; k < np; k++) s += p->part[k];
    return s;
}

static void *adamw_multi_plan(sg_backend *be, const sg_adamw_tensor *t, int n) {
    (void)be;
    void *copy = NULL;
    plan *p = new_plan(t, sizeof *t, n, offsetof(sg_adamw_tensor, count),
                       offsetof(sg_adamw_tensor, group), &copy, "adamw_multi_plan");
    p->a = copy;
    for (int i = 0; i < n; i++)
        SG_CHECK(t[i].count == 0 || (t[i].exp_avg && t[i].exp_avg_sq),
                 "CPU backend: adamw_multi_plan row %d has no exp_avg / exp_avg_sq buffer", i);
    return p;
}

static void adamw_multi_step(sg_backend *be, void *pl, const sg_adamw_args *a) {
    plan *p = pl;
    SG_CHECK(p != NULL && p->a != NULL,
             "CPU backend: adamw_multi_step without an AdamW plan (adamw_multi_plan)");
    for (int i = 0; i < p->n; i++) /* the bf16 weight copies are stale from here on */
        sg_cpu_written(be, p->a[i].param, p->a[i].count * sizeof(float));
    const sg_adamw_args A = *a;
    long np = (long)p->n_pieces;
#pragma omp parallel for schedule(static) if (p->total >= SG_CPU_PAR_MIN)
    for (long k = 0; k < np; k++) {
        const piece *q = &p->pieces[k];
        const sg_adamw_tensor *t = &p->a[q->row];
        float *pp = t->param + q->off, *m = t->exp_avg + q->off, *v = t->exp_avg_sq + q->off;
        const float *g = t->grad + q->off;
        float decay = A.decay[t->group], step = A.step_size[t->group];
        for (size_t i = 0; i < q->n; i++)
            pp[i] = sg_adamw_update(pp[i], g[i], &m[i], &v[i], decay, step, A.w1, A.beta2, A.omb2,
                                    A.bc2_sqrt, A.eps);
    }
}

void sg_cpu_fill_optim_ops(sg_ops *ops) {
    ops->sgd_multi_plan = sgd_multi_plan;
    ops->sgd_multi_step = sgd_multi_step;
    ops->sgd_multi_free = sgd_multi_free;
    ops->adamw_multi_plan = adamw_multi_plan;
    ops->adamw_multi_step = adamw_multi_step;
    ops->adamw_multi_free = sgd_multi_free; /* the same plan struct */
    ops->optim_grad_sumsq = optim_grad_sumsq;
}
