/* tests/backend/run_loss.c - runners for softmax cross-entropy with ignored
 * labels (loss and valid count returned on the host, gradients on the
 * device), argmax (bit-exact, first maximum wins) and the confusion matrix
 * (int64 on the device, accumulating), against ref_ops.
 */
#include <math.h>
#include <string.h>

#include "tests/backend/cases.h"
#include "tests/kernels/ref_ops.h"

/* Labels: the case's, or generated: 10% `ignore`, 10% out of range (>= c),
 * the rest uniform classes. */
static uint8_t *labels_for(tb_ctx *t, const tb_case *c, size_t count, int classes, int ignore) {
    uint8_t *lab = tb_hbytes(t, count);
    if (c->labels) {
        memcpy(lab, c->labels, count);
        return lab;
    }
    for (size_t i = 0; i < count; i++) {
        uint64_t r = tb_u64(t, i);
        lab[i] = (uint8_t)(r % 10 == 0 ? ignore : r % 10 == 1 ? classes + (int)(i % 3)
                                                               : (int)((r >> 8) % classes));
    }
    return lab;
}

void run_ce_fwd_bwd(tb_ctx *t, const tb_case *c) {
    if (!TB_HAS(t, ce_fwd_bwd)) return;
    int n = c->n, cl = c->c, hw = c->h * c->w, ignore = c->ignore ? c->ignore : 255;
    float gs = c->grad_scale != 0 ? c->grad_scale : 1.0f;
    size_t np = (size_t)n * hw, nl = np * cl;
    float *l = tb_input(t, nl), *d = tb_hzeros(t, nl);
    uint8_t *lab = labels_for(t, c, np, cl, ignore);
    double loss;
    int64_t valid;
    ref_ce_fwd_bwd(l, lab, n, cl, hw, ignore, gs, d, &loss, &valid);
    float *l_d = tb_devf(t, l, nl);
    uint8_t *lab_d = tb_dev(t, lab, np);
    float *d_d = c->inplace ? l_d : tb_devf(t, tb_rand(t, nl, 5, 6), nl);
    double got_loss = -1;
    int64_t got_valid = -1;
    t->be->ops->ce_fwd_bwd(t->be, l_d, lab_d, n, cl, hw, ignore, gs, d_d, &got_loss, &got_valid);
    /* the valid count, also counted here */
    int64_t counted = 0;
    for (size_t i = 0; i < np; i++) counted += lab[i] != ignore && lab[i] < cl;
    tb_expect(t, got_valid == valid && valid == counted, "valid %lld, want %lld (counted %lld)",
              (long long)got_valid, (long long)valid, (long long)counted);
    if (!c->labels) tb_expect(t, valid > 0 && valid < (int64_t)np, "the labels should mix valid and ignored");
    tb_near(t, "loss sum", got_loss, loss, t->tol * fabs(loss));
    float *got = tb_getf(t, d_d, nl);
    tb_close(t, "dlogits", d, got, nl, t->tol);
    size_t nonzero = 0;
    for (int i = 0; i < n; i++)
        for (int q = 0; q < hw; q++)
            if (lab[(size_t)i * hw + q] == ignore || lab[(size_t)i * hw + q] >= cl)
                for (int k = 0; k < cl; k++) nonzero += got[((size_t)i * cl + k) * hw + q] != 0.0f;
    tb_expect(t, nonzero == 0, "%zu gradients of ignored pixels are not zero", nonzero);
    if (c->want) { /* known values: loss, then dlogits */
        double *all = tb_hbytes(t, (nl + 1) * sizeof(double));
        all[0] = got_loss;
        for (size_t i = 0; i < nl; i++) all[i + 1] = got[i];
        tb_want_d(t, "loss, dlogits", all, nl + 1);
    }
    /* forward only (dlogits NULL): the same loss */
    if (c->inplace) tb_put(t, l_d, l, nl * sizeof(float));
    double loss2 = -1;
    int64_t valid2 = -1;
    t->be->ops->ce_fwd_bwd(t->be, l_d, lab_d, n, cl, hw, ignore, 1.0f, NULL, &loss2, &valid2);
    tb_expect(t, valid2 == valid, "forward only: valid %lld, want %lld", (long long)valid2,
              (long long)valid);
    if (t->det) tb_expect(t, loss2 == got_loss, "forward only: loss %.17g, with gradients %.17g "
                          "(a rerun must give the same bits)", loss2, got_loss);
    else tb_near(t, "forward-only loss sum", loss2, loss, t->tol * fabs(loss));
}

void run_argmax(tb_ctx *t, const tb_case *c) {
    if (!TB_HAS(t, argmax)) return;
    int hw = c->h * c->w;
    size_t np = (size_t)c->n * hw, nl = np * c->c;
    float *l = tb_input(t, nl);
    uint8_t *pred = tb_hbytes(t, np), *garbage = tb_hbytes(t, np);
    memset(garbage, 0xEE, np);
    ref_argmax(l, pred, c->n, c->c, hw);
    uint8_t *pred_d = tb_dev(t, garbage, np);
    t->be->ops->argmax(t->be, tb_devf(t, l, nl), pred_d, c->n, c->c, hw);
    uint8_t *got = tb_get(t, pred_d, np);
    tb_same(t, "pred", pred, got, np);
    if (c->want) {
        double *g = tb_hbytes(t, np * sizeof(double));
        for (size_t i = 0; i < np; i++) g[i] = got[i];
        tb_want_d(t, "pred", g, np);
    }
}

/* conf starts at conf[i] = i % 7 (it accumulates); known values are the
 * increments (c x c). */
void run_confusion(tb_ctx *t, const tb_case *c) {
    if (!TB_HAS(t, confusion)) return;
    size_t count = c->count, cc = (size_t)c->c * c->c;
    uint8_t *lab = labels_for(t, c, count, c->c, 255);
    uint8_t *pred = tb_hbytes(t, count);
    for (size_t i = 0; i < count; i++)
        pred[i] = c->pred ? c->pred[i] : (uint8_t)(tb_u64(t, i + count) % c->c);
    int64_t *conf0 = tb_hbytes(t, cc * sizeof(int64_t)), *conf = tb_hbytes(t, cc * sizeof(int64_t));
    for (size_t i = 0; i < cc; i++) conf0[i] = conf[i] = (int64_t)(i % 7);
    ref_confusion(pred, lab, count, c->c, conf);
    int64_t *conf_d = tb_dev(t, conf0, cc * sizeof(int64_t));
    t->be->ops->confusion(t->be, tb_dev(t, pred, count), tb_dev(t, lab, count), count, c->c,
                          conf_d);
    int64_t *got = tb_get(t, conf_d, cc * sizeof(int64_t));
    tb_same(t, "conf", conf, got, cc * sizeof(int64_t));
    if (c->want) {
        double *inc = tb_hbytes(t, cc * sizeof(double));
        for (size_t i = 0; i < cc; i++) inc[i] = (double)(got[i] - conf0[i]);
        tb_want_d(t, "conf increments", inc, cc);
    }
}
