/* tests/backend/cases.h - the runners of the conformance suite and the case
 * table (case_table.c).
 *
 * A runner tests one op on one case: it draws the inputs (tb_input /
 * tb_rand), computes the expected result with the naive reference
 * (tests/kernels/ref_ops.h) on the host, runs the op on the backend through
 * tb_dev/tb_get (backend memory only), and compares with t->tol. Outputs that
 * the op accumulates into or overwrites start as random values (garbage), so
 * accumulate = 1 must keep them and accumulate = 0 must not.
 *
 * The fields each runner reads, besides tol (t->tol):
 *   conv_*: conv (groups too), acc, prepare; in (x or dy), in2 (w), want (y of conv_fwd)
 *   bias_*, bn_*, avgpool_*: n c h w (hw = h*w), acc, relu, inplace, lo hi
 *   bn_finalize: c, parts, counts, eps, momentum, running
 *     (run_bn_chan_merge: counts = images per part of one batch, h w lo hi)
 *   bn_eval_params, bn_param_grads: c, eps, acc
 *   bn_add_relu_fwd, bn_bwd_reduce_res: n c h w, x_dt, lo hi, inplace (fwd:
 *     y == res; reduce: dres NULL), acc (reduce: into dres)
 *   relu_*, add, scale, axpy, sumsq: count, acc, relu, inplace, alpha, in, want
 *   dropout_*: count, p, key, acc
 *   sgd_step: count, sgd, in (param), in2 (gradients), want (param per step)
 *   sgd_multi_step: count (the first tensor's; six more of fixed sizes), sgd
 *   adamw_multi_step: count (as sgd_multi_step), adamw
 *   normalize_u8: n h w
 *   maxpool_*, resize_*, concat_*: n c h w, oh ow, c_dst c_off, acc, fill lo hi,
 *     in, want (maxpool_fwd: the argmax indices)
 *   ce_fwd_bwd: n c h w, lo hi, ignore, grad_scale, inplace, labels, in, want
 *     (loss, then dlogits); argmax: n c h w, fill, in, want; confusion:
 *     count, c, labels, pred, want (increments)
 *   flip_w: n c h w, in, want; softmax_fwd: n c h w, lo hi, acc, in, want
 *   ce_weighted: as ce_fwd_bwd, plus in2 (class weights; NULL: drawn in [0, 2)
 *     with class 1 at 0) and p (> 0: selection keys drawn in [0, 1), selected
 *     below p); want = loss sum, weight sum, dlogits. ce_weighted_acc: n c h w,
 *     lo hi, grad_scale, acc (class weights drawn), p (selection), count (div2). ce_label_prob: n c h w, lo hi,
 *     ignore, labels. kth_smallest: count, fill lo hi, in (else every 7th
 *     +inf, some -0 and +0), nine ranks each.
 *   memory, upload_async, bind_thread: count (bytes / floats)
 *   grad_*: as the op, plus fd_h; tol is the finite-difference tolerance.
 */
#ifndef SG_TESTS_BACKEND_CASES_H
#define SG_TESTS_BACKEND_CASES_H

#include "tests/backend/tb.h"

/* The table: every case of every op, in the order they run. */
extern const tb_case tb_cases[];
extern const int tb_ncases;
/* The `large` cases (case_large.c; test_backend_ops --large, GPU only). */
extern const tb_case tb_large_cases[];
extern const int tb_nlarge;

/* run_large.c: tensors of more than 2^31 elements, checked in windows */
void run_large_relu_fwd(tb_ctx *t, const tb_case *c);
void run_large_add(tb_ctx *t, const tb_case *c);
void run_large_scale(tb_ctx *t, const tb_case *c);
void run_large_axpy(tb_ctx *t, const tb_case *c);
void run_large_sumsq(tb_ctx *t, const tb_case *c);

/* run_conv.c */
/* Batch-norm inputs of a case, on the host (run_bn.c): x from the case's
 * range (bf16 values when c->x_dt is SG_ACT_BF16), mean/invstd its batch
 * statistics (reference), gamma in [0.5, 1.5), beta in [-0.5, 0.5). */
typedef struct tb_bn_data {
    int n, c, hw;
    size_t cnt;
    float *x, *gamma, *beta, *mean, *invstd;
} tb_bn_data;
tb_bn_data tb_bn_setup(tb_ctx *t, const tb_case *c);

void run_conv_fwd(tb_ctx *t, const tb_case *c);
void run_conv_bwd_data(tb_ctx *t, const tb_case *c);
void run_conv_bwd_weight(tb_ctx *t, const tb_case *c);
void run_bias_fwd(tb_ctx *t, const tb_case *c);
void run_bias_bwd(tb_ctx *t, const tb_case *c);

/* run_bn.c */
void run_bn_stats(tb_ctx *t, const tb_case *c);
void run_bn_finalize(tb_ctx *t, const tb_case *c);
void run_bn_chan_merge(tb_ctx *t, const tb_case *c);
void run_bn_eval_params(tb_ctx *t, const tb_case *c);
void run_bn_fwd(tb_ctx *t, const tb_case *c);
void run_bn_bwd_reduce(tb_ctx *t, const tb_case *c);
void run_bn_bwd_elem(tb_ctx *t, const tb_case *c);
void run_bn_param_grads(tb_ctx *t, const tb_case *c);
void run_bn_add_relu_fwd(tb_ctx *t, const tb_case *c);
void run_bn_bwd_reduce_res(tb_ctx *t, const tb_case *c);
/* run_routes.c: the NHWC vector and scalar routes of the per-channel ops
 * agree bit for bit (bias_bwd, bn_stats_dt, bn_bwd_reduce_dt,
 * bn_bwd_reduce_res, bn_fwd_dt, bn_bwd_elem_dt: x_dt, y_dt (the backward
 * ops: bf16 = y NULL), relu, acc) */
void run_chan_routes(tb_ctx *t, const tb_case *c);

/* run_elem.c */
void run_relu_fwd(tb_ctx *t, const tb_case *c);
void run_relu_bwd(tb_ctx *t, const tb_case *c);
void run_add(tb_ctx *t, const tb_case *c);
void run_scale(tb_ctx *t, const tb_case *c);
void run_axpy(tb_ctx *t, const tb_case *c);
void run_sumsq(tb_ctx *t, const tb_case *c);
void run_dropout_fwd(tb_ctx *t, const tb_case *c);
void run_dropout_bwd(tb_ctx *t, const tb_case *c);
void run_sgd_step(tb_ctx *t, const tb_case *c);
/* run_optim.c */
void run_sgd_multi_step(tb_ctx *t, const tb_case *c);
void run_adamw_multi_step(tb_ctx *t, const tb_case *c);
void run_normalize_u8(tb_ctx *t, const tb_case *c);

/* run_gate.c: hardswish, hardsigmoid, sigmoid (count, lo hi, acc, inplace,
 * in = x, in2 = dy, want), channel scaling (n c h w, acc = dx's, acc2 = ds's,
 * skip, inplace), and their finite-difference checks (grad_*: fd_h) */
void run_hardswish_fwd(tb_ctx *t, const tb_case *c);
void run_hardswish_bwd(tb_ctx *t, const tb_case *c);
void run_hardsigmoid_fwd(tb_ctx *t, const tb_case *c);
void run_hardsigmoid_bwd(tb_ctx *t, const tb_case *c);
void run_sigmoid_fwd(tb_ctx *t, const tb_case *c);
void run_sigmoid_bwd(tb_ctx *t, const tb_case *c);
void run_chan_scale_fwd(tb_ctx *t, const tb_case *c);
void run_chan_scale_bwd(tb_ctx *t, const tb_case *c);
void run_grad_hardswish(tb_ctx *t, const tb_case *c);
void run_grad_hardsigmoid(tb_ctx *t, const tb_case *c);
void run_grad_sigmoid(tb_ctx *t, const tb_case *c);
void run_grad_chan_scale(tb_ctx *t, const tb_case *c);
/* a squeeze-excitation block: n c h w, c_dst = squeeze channels */
void run_grad_se(tb_ctx *t, const tb_case *c);

/* run_pool.c */
void run_maxpool_fwd(tb_ctx *t, const tb_case *c);
void run_maxpool_bwd(tb_ctx *t, const tb_case *c);
void run_avgpool_fwd(tb_ctx *t, const tb_case *c);
void run_avgpool_bwd(tb_ctx *t, const tb_case *c);
void run_resize_fwd(tb_ctx *t, const tb_case *c);
void run_resize_bwd(tb_ctx *t, const tb_case *c);
void run_concat_fwd(tb_ctx *t, const tb_case *c);
void run_concat_bwd(tb_ctx *t, const tb_case *c);

/* run_loss.c */
void run_ce_weighted_acc(tb_ctx *t, const tb_case *c);
void run_ce_fwd_bwd(tb_ctx *t, const tb_case *c);
void run_ce_weighted(tb_ctx *t, const tb_case *c);
void run_ce_label_prob(tb_ctx *t, const tb_case *c);
void run_kth_smallest(tb_ctx *t, const tb_case *c);
void run_grad_ce_weighted(tb_ctx *t, const tb_case *c);
void run_argmax(tb_ctx *t, const tb_case *c);
void run_confusion(tb_ctx *t, const tb_case *c);

/* run_tta.c: test-time augmentation (inference only, no gradient check) */
void run_flip_w(tb_ctx *t, const tb_case *c);
void run_softmax_fwd(tb_ctx *t, const tb_case *c);

/* run_act_bf16.c: the *_dt ops (bf16 activation storage); as their float32
 * namesakes plus x_dt, y_dt (BN backward: y_dt bf16 = y NULL, the mask
 * recomputed) */
void run_conv_fwd_dt(tb_ctx *t, const tb_case *c);
void run_conv_bwd_weight_dt(tb_ctx *t, const tb_case *c);
void run_conv_bwd_dt(tb_ctx *t, const tb_case *c);
void run_bn_stats_dt(tb_ctx *t, const tb_case *c);
void run_bn_fwd_dt(tb_ctx *t, const tb_case *c);
void run_bn_bwd_reduce_dt(tb_ctx *t, const tb_case *c);
void run_bn_bwd_elem_dt(tb_ctx *t, const tb_case *c);

/* run_memory.c */
void run_memory(tb_ctx *t, const tb_case *c);
void run_upload_async_order(tb_ctx *t, const tb_case *c);
void run_bind_thread(tb_ctx *t, const tb_case *c);
/* run_graph.c */
void run_graph(tb_ctx *t, const tb_case *c);

/* run_weights.c: conv results after the weights change through every path
 * (the backends' converted weight copies are never stale); reads conv,
 * prepare */
void run_weights_written(tb_ctx *t, const tb_case *c);

/* run_grad.c: finite-difference checks of the backward ops */
void run_grad_conv(tb_ctx *t, const tb_case *c);
void run_grad_bn(tb_ctx *t, const tb_case *c);
void run_grad_bn_res(tb_ctx *t, const tb_case *c);
void run_grad_relu(tb_ctx *t, const tb_case *c);
void run_grad_add_relu(tb_ctx *t, const tb_case *c);
void run_grad_dropout(tb_ctx *t, const tb_case *c);
void run_grad_maxpool(tb_ctx *t, const tb_case *c);
void run_grad_avgpool(tb_ctx *t, const tb_case *c);
void run_grad_resize(tb_ctx *t, const tb_case *c);
void run_grad_concat(tb_ctx *t, const tb_case *c);
void run_grad_ce(tb_ctx *t, const tb_case *c);

#endif
