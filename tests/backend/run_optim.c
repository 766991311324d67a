/* tests/backend/run_optim.c - the runners of the fused optimizer steps
 * (sgd_multi_plan, sgd_multi_step, sgd_multi_free, and AdamW's three):
 * SGD: several tensors of
 * sizes around the backends' piece boundaries (and an empty one), in three
 * learning-rate groups, stepped c->sgd.steps times against the naive
 * reference (ref_sgd_step per tensor, within tol) and against the backend's
 * own sgd_step per tensor (bit for bit: backend.h promises the same bits).
 * Both: optim_grad_sumsq over the plan against the gradients' sum of
 * squares in double (relative 1e-12), twice the same value.
 * AdamW: the same tensors and groups, c->adamw.steps steps from zero
 * moments, against ref_adamw_step (double, within tol) and against
 * kernels/formulas/adamw.h evaluated here on the host with the same
 * scalars (bit for bit: every backend computes that formula).
 */
#include <math.h>
#include <string.h>

#include "kernels/formulas/adamw.h"
#include "tests/backend/cases.h"
#include "tests/kernels/ref_ops.h"

enum { ROWS = 7 };

/* optim_grad_sumsq of the plan against sum(g^2) over the rows' current
 * gradients gk[i] (cnt[i] floats; in double); called twice, the same. */
static int check_grad_sumsq(tb_ctx *t, void *plan, float *const *gk, const size_t *cnt) {
    const sg_ops *o = t->be->ops;
    if (!TB_HAS(t, optim_grad_sumsq)) return 1;
    double want = 0;
    for (int i = 0; i < ROWS; i++)
        for (size_t j = 0; j < cnt[i]; j++) want += (double)gk[i][j] * gk[i][j];
    double got = o->optim_grad_sumsq(t->be, plan), again = o->optim_grad_sumsq(t->be, plan);
    if (!(fabs(got - want) <= 1e-12 * want))
        return tb_fail(t, "optim_grad_sumsq: %.17g, want %.17g (relative 1e-12)", got, want);
    if (memcmp(&got, &again, sizeof got) != 0)
        return tb_fail(t, "optim_grad_sumsq: %.17g, then %.17g on the same gradients", got, again);
    return 1;
}

void run_sgd_multi_step(tb_ctx *t, const tb_case *c) {
    if (!TB_HAS(t, sgd_multi_plan) || !TB_HAS(t, sgd_multi_step) || !TB_HAS(t, sgd_multi_free))
        return;
    const sg_ops *o = t->be->ops;
    tb_sgd s = c->sgd;
    int use_buf = s.momentum != 0;
    size_t cnt[ROWS] = {c->count, 1, 4096, 4097, 0, 3, 16385};
    /* lr of each group as train/optimizer.c rounds it: (float)(lr * mult) */
    float lr[SG_SGD_GROUPS] = {s.lr, (float)((double)s.lr * 10.0), (float)((double)s.lr * 0.5),
                               0.0f};
    float *p[ROWS], *g[ROWS], *b[ROWS];    /* host reference */
    float *pm[ROWS], *gd[ROWS], *bm[ROWS]; /* device: sgd_multi_step */
    float *ps[ROWS], *bs[ROWS];            /* device: sgd_step per tensor */
    sg_sgd_tensor rows[ROWS];
    for (int i = 0; i < ROWS; i++) {
        size_t n = cnt[i] ? cnt[i] : 1;
        p[i] = tb_rand(t, n, -1, 1);
        g[i] = tb_rand(t, n * s.steps, -1, 1);
        b[i] = s.first ? tb_hzeros(t, n) : tb_rand(t, n, -1, 1);
        pm[i] = tb_devf(t, p[i], n);
        ps[i] = tb_devf(t, p[i], n);
        gd[i] = tb_devf(t, g[i], n);
        bm[i] = use_buf ? tb_devf(t, b[i], n) : NULL;
        bs[i] = use_buf ? tb_devf(t, b[i], n) : NULL;
        rows[i] = (sg_sgd_tensor){pm[i], gd[i], bm[i], cnt[i], i % 3};
    }
    void *plan = o->sgd_multi_plan(t->be, rows, ROWS);
    int ok = 1;
    for (int k = 0; k < s.steps && ok; k++) {
        int first = s.first && k == 0;
        for (int i = 0; i < ROWS; i++) {
            if (!cnt[i]) continue;
            float *gk = g[i] + (size_t)k * cnt[i];
            tb_put(t, gd[i], gk, cnt[i] * sizeof(float));
            ref_sgd_step(p[i], gk, use_buf ? b[i] : NULL, cnt[i], lr[i % 3], s.momentum,
                         s.dampening, s.wd, s.nesterov, first);
            o->sgd_step(t->be, ps[i], gd[i], bs[i], cnt[i], lr[i % 3], s.momentum, s.dampening,
                        s.wd, s.nesterov, first);
        }
        float *gks[ROWS];
        for (int i = 0; i < ROWS; i++) gks[i] = g[i] + (size_t)k * cnt[i];
        ok = check_grad_sumsq(t, plan, gks, cnt);
        o->sgd_multi_step(t->be, plan, lr, s.momentum, s.dampening, s.wd, s.nesterov, first);
        for (int i = 0; i < ROWS && ok; i++) {
            if (!cnt[i]) continue;
            size_t bytes = cnt[i] * sizeof(float);
            float *got = tb_getf(t, pm[i], cnt[i]);
            ok = tb_close(t, "param", p[i], got, cnt[i], t->tol) &&
                 tb_same(t, "param against sgd_step per tensor", tb_get(t, ps[i], bytes), got,
                         bytes);
            if (ok && use_buf)
                ok = tb_close_dev(t, "momentum buffer", b[i], bm[i], cnt[i], t->tol) &&
                     tb_same(t, "momentum buffer against sgd_step per tensor",
                             tb_get(t, bs[i], bytes), tb_get(t, bm[i], bytes), bytes);
        }
    }
    o->sgd_multi_free(t->be, plan);
    o->sgd_multi_free(t->be, NULL);
}

void run_adamw_multi_step(tb_ctx *t, const tb_case *c) {
    if (!TB_HAS(t, adamw_multi_plan) || !TB_HAS(t, adamw_multi_step) ||
        !TB_HAS(t, adamw_multi_free))
        return;
    const sg_ops *o = t->be->ops;
    tb_adamw s = c->adamw;
    size_t cnt[ROWS] = {c->count, 1, 4096, 4097, 0, 3, 16385};
    double mult[3] = {1.0, 10.0, 0.5};
    float *p[ROWS], *g[ROWS], *m[ROWS], *v[ROWS];     /* naive reference (double) */
    float *pf[ROWS], *mf[ROWS], *vf[ROWS];            /* the formula on the host */
    float *pd[ROWS], *gd[ROWS], *md[ROWS], *vd[ROWS]; /* device */
    sg_adamw_tensor rows[ROWS];
    for (int i = 0; i < ROWS; i++) {
        size_t n = cnt[i] ? cnt[i] : 1;
        p[i] = tb_rand(t, n, -1, 1);
        g[i] = tb_rand(t, n * s.steps, -1, 1);
        m[i] = tb_hzeros(t, n);
        v[i] = tb_hzeros(t, n);
        pf[i] = tb_hzeros(t, n);
        mf[i] = tb_hzeros(t, n);
        vf[i] = tb_hzeros(t, n);
        memcpy(pf[i], p[i], n * sizeof(float));
        pd[i] = tb_devf(t, p[i], n);
        gd[i] = tb_devf(t, g[i], n);
        md[i] = tb_devf(t, m[i], n);
        vd[i] = tb_devf(t, v[i], n);
        rows[i] = (sg_adamw_tensor){pd[i], gd[i], md[i], vd[i], cnt[i], i % 3};
    }
    void *plan = o->adamw_multi_plan(t->be, rows, ROWS);
    int ok = 1;
    for (int k = 0; k < s.steps && ok; k++) {
        long step = k + 1;
        /* the scalars as train/optimizer.c computes them */
        double bc1 = 1 - pow(s.beta1, (double)step), bc2 = 1 - pow(s.beta2, (double)step);
        sg_adamw_args a = {.w1 = (float)(1.0 - s.beta1),
                           .beta2 = s.beta2,
                           .omb2 = (float)(1.0 - s.beta2),
                           .bc2_sqrt = (float)sqrt(bc2),
                           .eps = s.eps};
        for (int q = 0; q < 3; q++) {
            double lr = (double)s.lr * mult[q];
            a.decay[q] = (float)(1.0 - lr * s.wd);
            a.step_size[q] = (float)(lr / bc1);
        }
        for (int i = 0; i < ROWS; i++) {
            if (!cnt[i]) continue;
            float *gk = g[i] + (size_t)k * cnt[i];
            int q = i % 3;
            tb_put(t, gd[i], gk, cnt[i] * sizeof(float));
            ref_adamw_step(p[i], gk, m[i], v[i], cnt[i], (double)s.lr * mult[q], s.beta1, s.beta2,
                           s.eps, s.wd, step);
            for (size_t j = 0; j < cnt[i]; j++)
                pf[i][j] = sg_adamw_update(pf[i][j], gk[j], &mf[i][j], &vf[i][j], a.decay[q],
                                           a.step_size[q], a.w1, a.beta2, a.omb2, a.bc2_sqrt,
                                           a.eps);
        }
        float *gks[ROWS];
        for (int i = 0; i < ROWS; i++) gks[i] = g[i] + (size_t)k * cnt[i];
        ok = check_grad_sumsq(t, plan, gks, cnt);
        o->adamw_multi_step(t->be, plan, &a);
        for (int i = 0; i < ROWS && ok; i++) {
            if (!cnt[i]) continue;
            size_t bytes = cnt[i] * sizeof(float);
            float *got = tb_getf(t, pd[i], cnt[i]);
            ok = tb_close(t, "param", p[i], got, cnt[i], t->tol) &&
                 tb_same(t, "param against adamw.h on the host", pf[i], got, bytes) &&
                 tb_close_dev(t, "exp_avg", m[i], md[i], cnt[i], t->tol) &&
                 tb_close_dev(t, "exp_avg_sq", v[i], vd[i], cnt[i], t->tol) &&
                 tb_same(t, "exp_avg against adamw.h on the host", mf[i], tb_get(t, md[i], bytes),
                         bytes) &&
                 tb_same(t, "exp_avg_sq against adamw.h on the host", vf[i],
                         tb_get(t, vd[i], bytes), bytes);
        }
    }
    o->adamw_multi_free(t->be, plan);
    o->adamw_multi_free(t->be, NULL);
}
