/* kernels/cpu/cpu_optim.c - the fused optimizer step on the CPU (the optim
 * group: sgd_multi_plan, sgd_multi_step, sgd_multi_free; backend.h).
 *
 * The plan is a copy of the tensors and a list of pieces of at most
 * SG_CPU_SGD_CHUNK values, so one parallel loop covers the whole step
 * (sgd_step forks once per tensor, and not at all for the many small ones).
 * Each piece runs cpu_elem.c's update (sg_cpu_sgd_span): the same
 * operations in the same order on each value as sgd_step, so the same bits.
 */
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "kernels/cpu/cpu_internal.h"
#include "kernels/formulas/sgd.h"

typedef struct piece {
    int row;
    size_t off, n;
} piece;

typedef struct plan {
    sg_sgd_tensor *t;
    int n;
    piece *pieces;
    size_t n_pieces, total;
} plan;

static void *sgd_multi_plan(sg_backend *be, const sg_sgd_tensor *t, int n) {
    (void)be;
    SG_CHECK(n >= 0, "CPU backend: sgd_multi_plan with %d tensors", n);
    plan *p = calloc(1, sizeof *p);
    SG_CHECK(p != NULL, "CPU backend: out of host memory for the optimizer plan");
    p->n = n;
    p->t = malloc((size_t)(n ? n : 1) * sizeof *p->t);
    SG_CHECK(p->t != NULL, "CPU backend: out of host memory for %d optimizer rows", n);
    if (n) memcpy(p->t, t, (size_t)n * sizeof *t);
    for (int i = 0; i < n; i++) {
        SG_CHECK(t[i].group >= 0 && t[i].group < SG_SGD_GROUPS,
                 "CPU backend: sgd_multi_plan row %d has group %d, outside 0..%d", i, t[i].group,
                 SG_SGD_GROUPS - 1);
        p->n_pieces += (t[i].count + SG_CPU_SGD_CHUNK - 1) / SG_CPU_SGD_CHUNK;
        p->total += t[i].count;
    }
    p->pieces = malloc((p->n_pieces ? p->n_pieces : 1) * sizeof *p->pieces);
    SG_CHECK(p->pieces != NULL, "CPU backend: out of host memory for %zu optimizer pieces",
             p->n_pieces);
    size_t k = 0;
    for (int i = 0; i < n; i++)
        for (size_t off = 0; off < t[i].count; off += SG_CPU_SGD_CHUNK) {
            size_t left = t[i].count - off;
            p->pieces[k++] = (piece){i, off, left < SG_CPU_SGD_CHUNK ? left : SG_CPU_SGD_CHUNK};
        }
    return p;
}

static void sgd_multi_step(sg_backend *be, void *pl, const float lr[SG_SGD_GROUPS], float momentum,
                           float dampening, float wd, int nesterov, int first) {
    plan *p = pl;
    SG_CHECK(p != NULL, "CPU backend: sgd_multi_step without a plan (sgd_multi_plan)");
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
    free(p->t);
    free(p);
}

void sg_cpu_fill_optim_ops(sg_ops *ops) {
    ops->sgd_multi_plan = sgd_multi_plan;
    ops->sgd_multi_step = sgd_multi_step;
    ops->sgd_multi_free = sgd_multi_free;
}
