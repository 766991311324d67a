/* tests/backend/run_loss_acc.c - the runner of ce_weighted_acc, the loss
 * whose sum stays on the device: against the naive reference
 * (ref_ce_weighted, within tol), and against the backend's own ce_weighted
 * bit for bit (dlogits, and the sum added as (s / div1) / div2 to the
 * double already there), twice into one accumulator (the training step adds
 * each micro-batch's), and with acc NULL (gradients only).
 */
#include <math.h>
#include <string.h>

#include "tests/backend/cases.h"
#include "tests/kernels/ref_ops.h"

void run_ce_weighted_acc(tb_ctx *t, const tb_case *c) {
    if (!TB_HAS(t, ce_weighted_acc) || !TB_HAS(t, ce_weighted)) return;
    const sg_ops *o = t->be->ops;
    int n = c->n, cl = c->c, hw = c->h * c->w, ignore = 255;
    float gs = c->grad_scale != 0 ? c->grad_scale : 1.0f;
    size_t np = (size_t)n * hw, nl = np * cl;
    float *l = tb_input(t, nl), *d = tb_hzeros(t, nl);
    uint8_t *lab = tb_hbytes(t, np);
    for (size_t i = 0; i < np; i++) { /* classes, some ignored, some >= c */
        uint64_t r = tb_u64(t, i) % (uint64_t)(cl + 2);
        lab[i] = r == (uint64_t)cl ? 255 : (uint8_t)r;
    }
    float *w = c->acc ? tb_rand(t, (size_t)cl, 0.0f, 2.0f) : NULL; /* acc: class weights */
    float *key = c->p > 0 ? tb_rand(t, np, 0.0f, 1.0f) : NULL;
    double loss, wsum;
    ref_ce_weighted(l, lab, n, cl, hw, ignore, w, key, c->p, gs, d, &loss, &wsum);
    float *l_d = tb_actf(t, l, n, cl, hw), *w_d = w ? tb_devf(t, w, (size_t)cl) : NULL;
    float *key_d = key ? tb_devf(t, key, np) : NULL;
    uint8_t *lab_d = tb_dev(t, lab, np);
    /* the backend's ce_weighted: the sum on the host, and its dlogits */
    float *d1 = tb_devf(t, tb_rand(t, nl, 5, 6), nl), *d2 = tb_devf(t, tb_rand(t, nl, 5, 6), nl);
    double s = -1, ws = -1;
    o->ce_weighted(t->be, l_d, lab_d, n, cl, hw, ignore, w_d, key_d, c->p, gs, d1, &s, &ws);
    /* into an accumulator that holds a value already, twice */
    double div1 = 3.0 * n, div2 = c->count ? (double)c->count : 1.0;
    double v0 = 0.625 + (double)(tb_u64(t, np) % 1000) / 7.0;
    double *acc_d = tb_dev(t, &v0, sizeof v0);
    o->ce_weighted_acc(t->be, l_d, lab_d, n, cl, hw, ignore, w_d, key_d, c->p, gs, d2, acc_d, div1,
                       div2);
    double want = v0 + s / div1 / div2;
    double *got = tb_get(t, acc_d, sizeof(double));
    tb_expect(t, *got == want,
              "acc %.17g after one call, want %.17g (v0 + (s / div1) / div2 of "
              "ce_weighted's s, the same bits)",
              *got, want);
    tb_near(t, "loss sum against the reference", (*got - v0) * div1 * div2, loss,
            t->tol * fabs(loss) + 1e-9 * (fabs(v0) + 1));
    tb_close(t, "dlogits", d, tb_act_getf(t, d2, n, cl, hw), nl, t->tol);
    tb_same(t, "dlogits against ce_weighted", tb_getf(t, d1, nl), tb_getf(t, d2, nl),
            nl * sizeof(float));
    o->ce_weighted_acc(t->be, l_d, lab_d, n, cl, hw, ignore, w_d, key_d, c->p, gs, d2, acc_d, div1,
                       div2);
    want = want + s / div1 / div2;
    got = tb_get(t, acc_d, sizeof(double));
    tb_expect(t, *got == want, "acc %.17g after two calls, want %.17g", *got, want);
    /* acc NULL: the gradients alone */
    float *d3 = tb_devf(t, tb_rand(t, nl, 5, 6), nl);
    o->ce_weighted_acc(t->be, l_d, lab_d, n, cl, hw, ignore, w_d, key_d, c->p, gs, d3, NULL, 1.0,
                       1.0);
    tb_same(t, "dlogits with acc NULL", tb_getf(t, d1, nl), tb_getf(t, d3, nl), nl * sizeof(float));
}
