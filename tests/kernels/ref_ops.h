/* tests/kernels/ref_ops.h - naive reference implementations of every op in
 * kernels/backend.h, for testing the backends (CPU and CUDA).
 *
 * Direct loops over host memory, single-threaded, double accumulation, no
 * cleverness: each function is the definition of its op, written
 * independently of any backend. Signatures mirror sg_ops without the backend
 * argument; all pointers are host pointers. Semantics (and the choices the
 * backends must match bit for bit where stated) are documented per function.
 * Static library `ref_ops_lib` (tests/kernels/meson.build), used by the
 * backend conformance suite (tests/backend), which runs every op of every
 * backend against these.
 */
#ifndef SG_TESTS_REF_OPS_H
#define SG_TESTS_REF_OPS_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- convolution: x [n,c,h,w], w [k,c/groups,r,s], y [n,k,oh,ow]; d filled
 * by sg_conv_desc_init. Zero padding. d->groups 0 or 1: ungrouped; g > 1:
 * output channel o reads the input channels of group o / (k/g). ---- */
void ref_conv_fwd(const sg_conv_desc *d, const float *x, const float *w, float *y);
void ref_conv_bwd_data(const sg_conv_desc *d, const float *dy, const float *w, float *dx,
                       int accumulate);
void ref_conv_bwd_weight(const sg_conv_desc *d, const float *x, const float *dy, float *dw,
                         int accumulate);
void ref_bias_fwd(float *y, const float *b, int n, int c, int hw);
void ref_bias_bwd(const float *dy, float *db, int n, int c, int hw, int accumulate);

/* ---- batch norm (see backend.h) ----
 * stats [2c]: mean, M2 (two-pass, double). finalize: Chan's merge of the
 * parts with count > 0; var = M2/N (biased) for invstd; running_var gets
 * M2/(N-1) (unbiased), or M2/N when N == 1 (no division by zero). */
void ref_bn_stats(const float *x, int n, int c, int hw, float *stats);
void ref_bn_finalize(const float *parts_stats, const int64_t *counts, int parts, int c, float eps,
                     float momentum, float *mean, float *invstd, float *running_mean,
                     float *running_var);
void ref_bn_eval_params(const float *running_mean, const float *running_var, int c, float eps,
                        float *mean, float *invstd);
void ref_bn_fwd(const float *x, const float *mean, const float *invstd, const float *gamma,
                const float *beta, float *y, int n, int c, int hw, int relu);
void ref_bn_bwd_reduce(const float *dy, const float *x, const float *y, const float *mean,
                       float *red, int n, int c, int hw, int relu);
void ref_bn_bwd_elem(const float *dy, const float *x, const float *y, const float *mean,
                     const float *invstd, const float *gamma, const float *red, double count,
                     float *dx, int n, int c, int hw, int relu, int accumulate);
void ref_bn_param_grads(const float *red, const float *invstd, float *dgamma, float *dbeta, int c,
                        int accumulate);

/* ---- elementwise ---- */
void ref_relu_fwd(const float *x, float *y, size_t count);
void ref_relu_bwd(const float *dy, const float *y, float *dx, size_t count, int accumulate);
void ref_add(const float *a, const float *b, float *y, size_t count, int relu);
/* ---- gates (backend.h: PyTorch's definitions, written here from them in
 * double, independently of kernels/formulas/gate.h) ---- */
void ref_hardswish_fwd(const float *x, float *y, size_t count);
void ref_hardswish_bwd(const float *dy, const float *x, float *dx, size_t count, int accumulate);
void ref_hardsigmoid_fwd(const float *x, float *y, size_t count);
void ref_hardsigmoid_bwd(const float *dy, const float *x, float *dx, size_t count, int accumulate);
void ref_sigmoid_fwd(const float *x, float *y, size_t count);
void ref_sigmoid_bwd(const float *dy, const float *y, float *dx, size_t count, int accumulate);
/* y[i,ch,p] = x[i,ch,p] * s[i*c + ch]; backward: dx (+)= dy * s, ds (+)= sum_p dy * x
 * (either may be NULL) */
void ref_chan_scale_fwd(const float *x, const float *s, float *y, int n, int c, int hw);
void ref_chan_scale_bwd(const float *dy, const float *x, const float *s, float *dx, float *ds,
                        int n, int c, int hw, int acc_dx, int acc_ds);
void ref_scale(const float *x, float *y, float alpha, size_t count);
void ref_axpy(float alpha, const float *x, float *y, size_t count);

/* ---- pooling, resize, concat ----
 * maxpool 3x3 stride 2 pad 1, padding = -inf; idx = flat index h*w_in+w of
 * the FIRST maximum in window order (rows then columns, strict >), as
 * PyTorch. oh = (h + 2 - 3)/2 + 1 = (h-1)/2 + 1 (ref_pool_out). */
int ref_pool_out(int h);
void ref_maxpool_fwd(const float *x, float *y, int32_t *idx, int n, int c, int h, int w, int oh,
                     int ow);
void ref_maxpool_bwd(const float *dy, const int32_t *idx, float *dx, int n, int c, int h, int w,
                     int oh, int ow);
void ref_avgpool_fwd(const float *x, float *y, int n, int c, int hw);
void ref_avgpool_bwd(const float *dy, float *dx, int n, int c, int hw, int accumulate);
/* Bilinear, align_corners=False exactly as PyTorch: scale = in/out,
 * src = (dst + 0.5)*scale - 0.5 clamped at 0, i0 = floor(src),
 * i1 = min(i0+1, in-1), l1 = src - i0, l0 = 1 - l1. */
void ref_resize_fwd(const float *x, float *y, int n, int c, int h, int w, int oh, int ow);
void ref_resize_bwd(const float *dy, float *dx, int n, int c, int h, int w, int oh, int ow,
                    int accumulate);
void ref_concat_fwd(const float *src, float *dst, int n, int c_src, int c_dst, int c_off, int hw);
void ref_concat_bwd(const float *dy, float *dsrc, int n, int c_src, int c_dst, int c_off, int hw,
                    int accumulate);

/* ---- dropout: mask[i] = sg_rng_uniform(key, i) >= p (keep), y = x*mask/(1-p);
 * p >= 1 drops everything (y = 0). ---- */
void ref_dropout_fwd(const float *x, float *y, uint8_t *mask, size_t count, float p, uint64_t key);
void ref_dropout_bwd(const float *dy, const uint8_t *mask, float *dx, size_t count, float p,
                     int accumulate);

/* ---- loss, metrics ---- */
void ref_ce_fwd_bwd(const float *logits, const uint8_t *labels, int n, int c, int hw, int ignore,
                    float grad_scale, float *dlogits, double *loss_sum, int64_t *valid);
void ref_argmax(const float *logits, uint8_t *pred, int n, int c, int hw);
void ref_confusion(const uint8_t *pred, const uint8_t *labels, size_t count, int c, int64_t *conf);

/* ---- optimizer, input, reductions ---- */
void ref_sgd_step(float *param, const float *grad, float *buf, size_t count, float lr,
                  float momentum, float dampening, float wd, int nesterov, int first);
/* torch.optim.AdamW's update of step t (from 1), textbook form in double
 * from the float inputs: p *= 1 - lr*wd; m = beta1*m + (1-beta1)*g;
 * v = beta2*v + (1-beta2)*g*g; p -= lr/(1-beta1^t) * m /
 * (sqrt(v)/sqrt(1-beta2^t) + eps); each result rounded to float once. */
void ref_adamw_step(float *param, const float *grad, float *m, float *v, size_t count, double lr,
                    double beta1, double beta2, double eps, double wd, long t);
void ref_normalize_u8(const uint8_t *src, float *dst, int n, int h, int w, const float mean[3],
                      const float std[3]);
double ref_sumsq(const float *x, size_t count);

/* ---- bfloat16 (SG_PRECISION_BF16, backend.h) ----
 * ref_bf16_round: x rounded to the nearest value with an 8-bit significand
 * and float's exponent range (bfloat16), ties to even, computed with
 * frexp/nearbyint in double (independently of the bit manipulation of
 * kernels/formulas/bf16.h): subnormals on the 2^-133 grid, overflow to
 * infinity, NaN and infinities unchanged. ref_bf16_ulp: the spacing of bf16
 * values at |x| (at the larger neighbour for an exact power of two).
 * ref_conv_*_bf16: the definition of a bf16 convolution: the reference conv
 * on bf16-rounded inputs (exact products, double sums), the result rounded to
 * bf16, then written or (accumulate) added in float. */
float ref_bf16_round(float x);
double ref_bf16_ulp(double x);
void ref_conv_fwd_bf16(const sg_conv_desc *d, const float *x, const float *w, float *y);
void ref_conv_bwd_data_bf16(const sg_conv_desc *d, const float *dy, const float *w, float *dx,
                            int accumulate);
void ref_conv_bwd_weight_bf16(const sg_conv_desc *d, const float *x, const float *dy, float *dw,
                              int accumulate);

/* ---- test-time augmentation (inference only) ----
 * ref_flip_w: y[n,c,h,w-1-x] = x[n,c,h,x]. ref_softmax: y (+)= softmax over
 * the c classes of each pixel, exp and sums in double. */
void ref_flip_w(const float *x, float *y, int n, int c, int h, int w);
void ref_softmax(const float *x, float *y, int n, int c, int hw, int accumulate);

/* ---- loss options (issue 16): class-weighted, selective CE (backend.h
 * ce_weighted; dlogits = (softmax - onehot) * grad_scale * w in double,
 * rounded once), the true class's probability (+inf at ignored pixels), the
 * k-th smallest by sorting, and mmseg's OHEM selection (selected[i] = 1 for
 * the pixels trained on; returns the threshold). ---- */
void ref_ce_weighted(const float *logits, const uint8_t *labels, int n, int c, int hw, int ignore,
                     const float *class_w, const float *sel_key, float sel_below, float grad_scale,
                     float *dlogits, double *loss_sum, double *weight_sum);
void ref_ce_label_prob(const float *logits, const uint8_t *labels, int n, int c, int hw, int ignore,
                       float *prob);
float ref_kth_smallest(const float *x, size_t count, size_t k);
float ref_ohem_select(const float *prob, const uint8_t *labels, size_t count, int c, int ignore,
                      float thresh, int64_t batch_kept, uint8_t *selected);

#ifdef __cplusplus
}
#endif

#endif
