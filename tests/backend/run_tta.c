/* tests/backend/run_tta.c - runners for the test-time augmentation ops:
 * flip_w (bit-exact: a permutation) and softmax_fwd (overwrite, and
 * accumulate into garbage that must be kept), against ref_ops. Both are
 * inference only (train/tta.c): no gradient check, as they have no backward.
 */
#include <math.h>
#include <string.h>

#include "tests/backend/cases.h"
#include "tests/kernels/ref_ops.h"

void run_flip_w(tb_ctx *t, const tb_case *c) {
    if (!TB_HAS(t, flip_w)) return;
    size_t count = (size_t)c->n * c->c * c->h * c->w;
    float *x = tb_input(t, count), *want = tb_hzeros(t, count);
    ref_flip_w(x, want, c->n, c->c, c->h, c->w);
    int hw = c->h * c->w;
    float *y_d = tb_devf(t, tb_rand(t, count, 5, 6), count);
    t->be->ops->flip_w(t->be, tb_actf(t, x, c->n, c->c, hw), y_d, c->n, c->c, c->h, c->w);
    float *got = tb_act_getf(t, y_d, c->n, c->c, hw);
    tb_same(t, "flipped", want, got, count * sizeof(float));
    /* flipping twice gives the input back */
    float *z_d = tb_devf(t, tb_rand(t, count, 5, 6), count);
    t->be->ops->flip_w(t->be, y_d, z_d, c->n, c->c, c->h, c->w);
    tb_same_act(t, "flipped twice", x, z_d, c->n, c->c, hw, sizeof(float));
    if (c->want) tb_want(t, "flipped", got, count);
}

void run_softmax_fwd(tb_ctx *t, const tb_case *c) {
    if (!TB_HAS(t, softmax_fwd)) return;
    int hw = c->h * c->w;
    size_t count = (size_t)c->n * c->c * hw;
    float *x = tb_input(t, count);
    float *garbage = tb_rand(t, count, 5, 6);
    float *want = tb_hcopy(t, garbage, count);
    ref_softmax(x, want, c->n, c->c, hw, c->acc);
    float *y_d = tb_actf(t, garbage, c->n, c->c, hw);
    t->be->ops->softmax_fwd(t->be, tb_actf(t, x, c->n, c->c, hw), y_d, c->n, c->c, hw, c->acc);
    float *got = tb_act_getf(t, y_d, c->n, c->c, hw);
    tb_close(t, c->acc ? "garbage + softmax" : "softmax", want, got, count, t->tol);
    if (!c->acc) { /* each pixel's probabilities sum to 1 */
        double worst = 0;
        for (int i = 0; i < c->n; i++)
            for (int q = 0; q < hw; q++) {
                double s = 0;
                for (int k = 0; k < c->c; k++) s += got[((size_t)i * c->c + k) * hw + q];
                if (fabs(s - 1) > worst) worst = fabs(s - 1);
            }
        tb_expect(t, worst < 1e-5, "a pixel's probabilities sum to 1 +- %g", worst);
    }
    if (c->want) tb_want(t, "softmax", got, count);
}
