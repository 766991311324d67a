/* tests/backend/run_weights.c - the runner for "weights_written": a
 * convolution always uses the weights as they are at the call, whatever
 * changed them. Backends keep converted copies of weights between calls
 * (bf16: kernels/weight_cache.h); this case changes the weights of one
 * geometry through every path that can - upload (whole, one element),
 * upload_async, copy, scale, axpy, sgd_step, zero, free + alloc, and on
 * SG_CAP_HOST_MEMORY backends a direct write announced with mem_written -
 * and after each checks conv_fwd and conv_bwd_data against the reference
 * computed on the weights read back from the device (the bf16-exact one too
 * on bf16 configurations). A stale copy shows as the previous weights'
 * result. Each path changes the weights a lot (sign flips, large values).
 * x, y, dy and dx are activations (the backend's layout, tb_act_*).
 */
#include <stdio.h>
#include <string.h>

#include "tests/backend/cases.h"
#include "tests/kernels/ref_ops.h"

typedef struct wrig {
    tb_ctx *t;
    sg_conv_desc d;
    size_t nx, nw, ny;
    float *x, *dy; /* host */
    float *x_d, *dy_d, *y_d, *dx_d, *w_d;
} wrig;

/* conv_fwd and conv_bwd_data with the current device weights against the
 * reference on those weights; `after` names the path that changed them. */
static int check_now(wrig *g, const char *after) {
    tb_ctx *t = g->t;
    const sg_ops *o = t->be->ops;
    o->sync(t->be);
    float *w = tb_getf(t, g->w_d, g->nw);
    float *y = tb_hzeros(t, g->ny), *dx = tb_hzeros(t, g->nx);
    ref_conv_fwd(&g->d, g->x, w, y);
    ref_conv_bwd_data(&g->d, g->dy, w, dx, 0);
    o->conv_fwd(t->be, &g->d, g->x_d, g->w_d, g->y_d);
    o->conv_bwd_data(t->be, &g->d, g->dy_d, g->w_d, g->dx_d, 0);
    const sg_conv_desc *d = &g->d;
    float *gy = tb_act_getf(t, g->y_d, d->n, d->k, d->oh * d->ow);
    float *gdx = tb_act_getf(t, g->dx_d, d->n, d->c, d->h * d->w);
    char what[160];
    snprintf(what, sizeof what, "y after %s", after);
    int ok = tb_close(t, what, y, gy, g->ny, t->tol);
    snprintf(what, sizeof what, "dx after %s", after);
    ok = ok && tb_close(t, what, dx, gdx, g->nx, t->tol);
    if (ok && t->bf16_steps) {
        ref_conv_fwd_bf16(&g->d, g->x, w, y);
        ref_conv_bwd_data_bf16(&g->d, g->dy, w, dx, 0);
        snprintf(what, sizeof what, "y (bf16-exact) after %s", after);
        ok = tb_close_bf16(t, what, y, gy, NULL, g->ny, t->bf16_steps, t->bf16_slack);
        snprintf(what, sizeof what, "dx (bf16-exact) after %s", after);
        ok = ok && tb_close_bf16(t, what, dx, gdx, NULL, g->nx, t->bf16_steps, t->bf16_slack);
    }
    return ok;
}

void run_weights_written(tb_ctx *t, const tb_case *c) {
    if (!TB_HAS(t, conv_fwd) || !TB_HAS(t, conv_bwd_data) || !TB_HAS(t, mem_written)) return;
    const sg_ops *o = t->be->ops;
    wrig g = {.t = t, .d = c->conv};
    if (!tb_expect(t, sg_conv_desc_init(&g.d) == 0, "empty output (table error)")) return;
    g.nx = (size_t)g.d.n * g.d.c * g.d.h * g.d.w;
    g.nw = tb_conv_nw(&g.d);
    g.ny = (size_t)g.d.n * g.d.k * g.d.oh * g.d.ow;
    size_t wb = g.nw * sizeof(float);
    if (c->prepare && TB_HAS(t, conv_prepare)) o->conv_prepare(t->be, &g.d);
    g.x = tb_rand(t, g.nx, -1, 1);
    g.dy = tb_rand(t, g.ny, -1, 1);
    int xhw = g.d.h * g.d.w, yhw = g.d.oh * g.d.ow;
    g.x_d = tb_actf(t, g.x, g.d.n, g.d.c, xhw);
    g.dy_d = tb_actf(t, g.dy, g.d.n, g.d.k, yhw);
    g.y_d = tb_actf(t, NULL, g.d.n, g.d.k, yhw);
    g.dx_d = tb_actf(t, NULL, g.d.n, g.d.c, xhw);
    /* the weights are freed and reallocated below: not owned by the harness */
    g.w_d = o->alloc(t->be, wb);
    float *src_d = tb_devf(t, tb_rand(t, g.nw, -2, 2), g.nw);
    float *buf_d = tb_devf(t, NULL, g.nw);

    o->upload(t->be, g.w_d, tb_rand(t, g.nw, -1, 1), wb);
    if (!check_now(&g, "the first upload")) goto out;
    if (!check_now(&g, "nothing (a second call)")) goto out;
    o->upload(t->be, g.w_d, tb_rand(t, g.nw, -1, 1), wb);
    if (!check_now(&g, "upload")) goto out;
    float big = 8.0f;
    o->upload(t->be, g.w_d + g.nw / 2, &big, sizeof big);
    if (!check_now(&g, "upload of one element")) goto out;
    float *pin = tb_pinned(t, wb);
    float *r = tb_rand(t, g.nw, -1, 1);
    memcpy(pin, r, wb);
    o->upload_async(t->be, g.w_d, pin, wb);
    o->upload_wait(t->be);
    if (!check_now(&g, "upload_async")) goto out;
    o->copy(t->be, g.w_d, src_d, wb);
    if (!check_now(&g, "copy")) goto out;
    o->scale(t->be, g.w_d, g.w_d, -0.75f, g.nw);
    if (!check_now(&g, "scale")) goto out;
    o->axpy(t->be, -1.5f, src_d, g.w_d, g.nw);
    if (!check_now(&g, "axpy")) goto out;
    o->sgd_step(t->be, g.w_d, src_d, buf_d, g.nw, 0.5f, 0.9f, 0.0f, 1e-4f, 0, 1);
    if (!check_now(&g, "sgd_step")) goto out;
    o->zero(t->be, g.w_d, wb);
    if (!check_now(&g, "zero")) goto out;
    o->upload(t->be, g.w_d, r, wb);
    if (!check_now(&g, "upload after zero")) goto out;
    /* a new (zeroed) tensor, often at the same address */
    o->free(t->be, g.w_d);
    g.w_d = o->alloc(t->be, wb);
    if (!check_now(&g, "free + alloc")) goto out;
    if (sg_backend_has(t->be, SG_CAP_HOST_MEMORY)) {
        o->copy(t->be, g.w_d, src_d, wb);
        if (!check_now(&g, "copy")) goto out;
        for (size_t i = 0; i < g.nw; i++) g.w_d[i] = -2.0f * g.w_d[i] + 0.25f;
        o->mem_written(t->be, g.w_d, wb);
        if (!check_now(&g, "a direct write + mem_written(range)")) goto out;
        g.w_d[0] = 6.0f;
        o->mem_written(t->be, NULL, 0);
        if (!check_now(&g, "a direct write + mem_written(NULL)")) goto out;
    }
out:
    o->sync(t->be);
    o->free(t->be, g.w_d);
}
