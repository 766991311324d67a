/* tests/backend/run_loss.c - runners for softmax cross-entropy with ignored
 * labels (loss and valid count returned on the host, gradients on the
 * device), argmax (bit-exact, first maximum wins) and the confusion matrix
 * (int64 on the device, accumulating), against ref_ops; ce_weighted_acc
 * (the loss sum added on the device) against ce_weighted.
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
        lab[i] = (uint8_t)(r % 10 == 0   ? ignore
                           : r % 10 == 1 ? classes + (int)(i % 3)
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
    float *l_d = tb_actf(t, l, n, cl, hw);
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
    if (!c->labels)
        tb_expect(t, valid > 0 && valid < (int64_t)np, "the labels should mix valid and ignored");
    tb_near(t, "loss sum", got_loss, loss, t->tol * fabs(loss));
    float *got = tb_act_getf(t, d_d, n, cl, hw);
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
    if (c->inplace) tb_act_put(t, l_d, l, n, cl, hw, sizeof(float));
    double loss2 = -1;
    int64_t valid2 = -1;
    t->be->ops->ce_fwd_bwd(t->be, l_d, lab_d, n, cl, hw, ignore, 1.0f, NULL, &loss2, &valid2);
    tb_expect(t, valid2 == valid, "forward only: valid %lld, want %lld", (long long)valid2,
              (long long)valid);
    if (t->det)
        tb_expect(t, loss2 == got_loss,
                  "forward only: loss %.17g, with gradients %.17g "
                  "(a rerun must give the same bits)",
                  loss2, got_loss);
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
    t->be->ops->argmax(t->be, tb_actf(t, l, c->n, c->c, hw), pred_d, c->n, c->c, hw);
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

/* ---------------- loss options (issue 16) ---------------- */

/* Class weights: the case's (in2), else drawn in [0, 2) with class 1 at 0
 * (a zero weight must give zero gradients). */
static float *class_weights_for(tb_ctx *t, const tb_case *c) {
    if (c->in2) return tb_hcopy(t, c->in2, (size_t)c->c);
    float *w = tb_rand(t, (size_t)c->c, 0.0f, 2.0f);
    if (c->c > 1) w[1] = 0.0f;
    return w;
}

void run_ce_weighted(tb_ctx *t, const tb_case *c) {
    if (!TB_HAS(t, ce_weighted) || !TB_HAS(t, ce_fwd_bwd)) return;
    int n = c->n, cl = c->c, hw = c->h * c->w, ignore = c->ignore ? c->ignore : 255;
    float gs = c->grad_scale != 0 ? c->grad_scale : 1.0f;
    size_t np = (size_t)n * hw, nl = np * cl;
    float *l = tb_input(t, nl), *d = tb_hzeros(t, nl);
    uint8_t *lab = labels_for(t, c, np, cl, ignore);
    float *w = class_weights_for(t, c);
    float *key = c->p > 0 ? tb_rand(t, np, 0.0f, 1.0f) : NULL;
    double loss, wsum;
    ref_ce_weighted(l, lab, n, cl, hw, ignore, w, key, c->p, gs, d, &loss, &wsum);
    float *l_d = tb_actf(t, l, n, cl, hw), *w_d = tb_devf(t, w, (size_t)cl);
    float *key_d = key ? tb_devf(t, key, np) : NULL;
    uint8_t *lab_d = tb_dev(t, lab, np);
    float *d_d = c->inplace ? l_d : tb_devf(t, tb_rand(t, nl, 5, 6), nl);
    double got_loss = -1, got_w = -1;
    t->be->ops->ce_weighted(t->be, l_d, lab_d, n, cl, hw, ignore, w_d, key_d, c->p, gs, d_d,
                            &got_loss, &got_w);
    tb_near(t, "loss sum", got_loss, loss, t->tol * fabs(loss) + 1e-12);
    tb_near(t, "weight sum", got_w, wsum, 1e-9 * wsum);
    float *got = tb_act_getf(t, d_d, n, cl, hw);
    tb_close(t, "dlogits", d, got, nl, t->tol);
    size_t nonzero = 0, counted = 0;
    for (int i = 0; i < n; i++)
        for (int q = 0; q < hw; q++) {
            size_t px = (size_t)i * hw + q;
            int y = lab[px];
            int on = y != ignore && y < cl && w[y] != 0 && (!key || key[px] < c->p);
            counted += on;
            if (!on)
                for (int k = 0; k < cl; k++) nonzero += got[((size_t)i * cl + k) * hw + q] != 0.0f;
        }
    tb_expect(t, nonzero == 0, "%zu gradients of pixels with weight 0 are not zero", nonzero);
    tb_expect(t, counted > 0 && counted < np,
              "the case should mix counted and left-out pixels "
              "(%zu of %zu count)",
              counted, np);
    if (c->want) { /* known values (PyTorch): the loss sum, the weight sum, dlogits */
        double *all = tb_hbytes(t, (nl + 2) * sizeof(double));
        all[0] = got_loss;
        all[1] = got_w;
        for (size_t i = 0; i < nl; i++) all[i + 2] = got[i];
        tb_want_d(t, "loss sum, weight sum, dlogits", all, nl + 2);
    }
    /* without weights and selection: ce_fwd_bwd bit for bit */
    if (c->inplace) tb_act_put(t, l_d, l, n, cl, hw, sizeof(float));
    float *d1 = tb_devf(t, NULL, nl), *d2 = tb_devf(t, NULL, nl);
    double l1 = -1, w1 = -1, l2 = -2;
    int64_t v2 = -1;
    t->be->ops->ce_weighted(t->be, l_d, lab_d, n, cl, hw, ignore, NULL, NULL, 0.0f, gs, d1, &l1,
                            &w1);
    t->be->ops->ce_fwd_bwd(t->be, l_d, lab_d, n, cl, hw, ignore, gs, d2, &l2, &v2);
    tb_expect(t, l1 == l2 && w1 == (double)v2,
              "unweighted: loss %.17g, weight sum %.17g; "
              "ce_fwd_bwd: %.17g, %lld (must be the same bits)",
              l1, w1, l2, (long long)v2);
    tb_same(t, "unweighted dlogits vs ce_fwd_bwd", tb_getf(t, d2, nl), tb_getf(t, d1, nl),
            nl * sizeof(float));
}

void run_ce_label_prob(tb_ctx *t, const tb_case *c) {
    if (!TB_HAS(t, ce_label_prob)) return;
    int n = c->n, cl = c->c, hw = c->h * c->w, ignore = c->ignore ? c->ignore : 255;
    size_t np = (size_t)n * hw, nl = np * cl;
    float *l = tb_input(t, nl), *p = tb_hzeros(t, np);
    uint8_t *lab = labels_for(t, c, np, cl, ignore);
    ref_ce_label_prob(l, lab, n, cl, hw, ignore, p);
    float *p_d = tb_devf(t, tb_rand(t, np, 5, 6), np);
    t->be->ops->ce_label_prob(t->be, tb_actf(t, l, n, cl, hw), tb_dev(t, lab, np), n, cl, hw,
                              ignore, p_d);
    float *got = tb_getf(t, p_d, np);
    size_t bad_inf = 0, bad_range = 0;
    for (size_t i = 0; i < np; i++) {
        int ign = lab[i] == ignore || lab[i] >= cl;
        if (ign != (isinf(got[i]) && got[i] > 0)) bad_inf++;
        if (!ign && !(got[i] >= 0.0f && got[i] <= 1.0f)) bad_range++;
        if (ign) got[i] = p[i] = 0; /* compared above */
    }
    tb_expect(t, bad_inf == 0, "%zu pixels: +inf must mark exactly the ignored ones", bad_inf);
    tb_expect(t, bad_range == 0, "%zu probabilities outside [0, 1]", bad_range);
    tb_close(t, "prob", p, got, np, t->tol);
}

/* Values: the case's fill, then every 7th +inf (ignored pixels), a few -0
 * and +0 (the order is IEEE's total order: -0 first). Ranks: both ends, the
 * middle, and some drawn; each bit-exact against sorting. */
void run_kth_smallest(tb_ctx *t, const tb_case *c) {
    if (!TB_HAS(t, kth_smallest)) return;
    size_t count = c->count;
    float *x = tb_input(t, count);
    if (!c->in)
        for (size_t i = 0; i < count; i++) {
            if (i % 7 == 6) x[i] = INFINITY;
            else if (i % 29 == 3) x[i] = -0.0f;
            else if (i % 31 == 5) x[i] = 0.0f;
        }
    float *x_d = tb_devf(t, x, count);
    size_t ks[9] = {0, count - 1, count / 2, count / 3, count - 1 - count / 7};
    for (int j = 5; j < 9; j++) ks[j] = (size_t)(tb_u64(t, (uint64_t)j) % count);
    for (int j = 0; j < 9; j++) {
        float want = ref_kth_smallest(x, count, ks[j]);
        float got = t->be->ops->kth_smallest(t->be, x_d, count, ks[j]);
        uint32_t a, b;
        memcpy(&a, &want, 4);
        memcpy(&b, &got, 4);
        if (!tb_expect(t, a == b, "k = %zu of %zu: got %.9g (0x%08x), want %.9g (0x%08x)", ks[j],
                       count, got, b, want, a))
            return;
    }
    tb_same(t, "input (must stay unchanged)", x, tb_getf(t, x_d, count), count * sizeof(float));
}

/* Finite differences of the weighted, selective loss sum (grad_scale 1):
 * labels every 5th pixel ignored, the rest i % c; class weights drawn (class
 * 1 at 0); selection keys drawn in [0, 1), below c->p. */
typedef struct cew_st {
    const tb_case *c;
    float *l_d, *w_d, *key_d;
    uint8_t *lab_d;
} cew_st;

static double cew_loss(tb_ctx *t, void *p) {
    cew_st *s = p;
    double loss, wsum;
    t->be->ops->ce_weighted(t->be, s->l_d, s->lab_d, s->c->n, s->c->c, s->c->h * s->c->w, 255,
                            s->w_d, s->key_d, s->c->p, 1.0f, NULL, &loss, &wsum);
    return loss;
}

void run_grad_ce_weighted(tb_ctx *t, const tb_case *c) {
    if (!TB_HAS(t, ce_weighted)) return;
    size_t np = (size_t)c->n * c->h * c->w, nl = np * c->c;
    uint8_t *lab = tb_hbytes(t, np);
    for (size_t i = 0; i < np; i++) lab[i] = (uint8_t)(i % 5 == 4 ? 255 : i % c->c);
    /* the logits (an activation) in the backend's layout: the differences
     * step the stored element, the gradient is read back in that order */
    float *l = tb_to_layout(t, tb_input(t, nl), c->n, c->c, c->h * c->w, sizeof(float));
    float *w = class_weights_for(t, c);
    float *key = c->p > 0 ? tb_rand(t, np, 0.0f, 1.0f) : NULL;
    cew_st s = {c, tb_devf(t, l, nl), tb_devf(t, w, (size_t)c->c), key ? tb_devf(t, key, np) : NULL,
                tb_dev(t, lab, np)};
    float *d_d = tb_devf(t, NULL, nl);
    double loss, wsum;
    t->be->ops->ce_weighted(t->be, s.l_d, s.lab_d, c->n, c->c, c->h * c->w, 255, s.w_d, s.key_d,
                            c->p, 1.0f, d_d, &loss, &wsum);
    tb_check_fd(t, "logits", l, s.l_d, nl, tb_getf(t, d_d, nl), cew_loss, &s, c->fd_h);
}

/* ce_weighted_acc, the loss whose sum stays on the device: against the
 * naive reference (within tol), and against the backend's own ce_weighted
 * bit for bit (dlogits, and the sum added as (s / div1) / div2 to the
 * double already there), twice into one accumulator (the training step adds
 * each micro-batch's), and with acc NULL (gradients only). */
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
