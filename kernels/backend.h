/* kernels/backend.h - the backend-neutral op interface.
 *
 * A backend (CPU: plain C + oneDNN; CUDA: cuDNN + custom kernels) owns device
 * memory and implements every op the network and training need, over float32
 * tensors given as raw pointers into memory the backend allocated (and,
 * for the *_dt ops only, bf16-stored activations: SG_ACT_BF16). The
 * model, the trainer and the tests only ever call through this table, so the
 * same model code runs on every backend, and every backend is tested against
 * the naive references in tests/.
 *
 * Code outside kernels/ never asks which backend it has: it asks what the
 * backend can do (be->caps, SG_CAP_*), and calls ops. sg_backend_create
 * checks that a backend fills every op of the table (kernels/backend.c
 * names a missing one).
 *
 * Conventions (all ops):
 *  - Pointers are device pointers from be->ops->alloc (host memory on the CPU
 *    backend). Sizes are element counts unless named *_bytes.
 *  - Ops are asynchronous on a backend's compute stream; ops->sync waits.
 *    Host-side outputs (loss sums, counts) are valid after the op returns
 *    (the op synchronises where it must).
 *  - `accumulate` = 0 overwrites the output, 1 adds to it (gradient
 *    accumulation, tensors consumed by several layers).
 *  - Failures of the underlying library are fatal inside the backend: the
 *    check macros print the call, file, line and a hint, and exit(1). Ops
 *    therefore return void.
 *  - No op allocates memory inside a training step, except through a
 *    per-shape cache built the first time a shape is seen (conv primitives,
 *    workspaces); ops->conv_prepare lets the model build these up front.
 *  - Activations (every tensor an op describes as [n, c, h, w] or [n, c, hw])
 *    are stored in the backend's activation layout, be->layout, chosen when
 *    the backend is created (sg_backend_opts.layout) and fixed for its life:
 *    SG_LAYOUT_NCHW, element (i, ch, p) at (i*c + ch)*hw + p, or
 *    SG_LAYOUT_NHWC (channels last), at (i*hw + p)*c + ch (p = y*w + x).
 *    Shapes in the signatures stay logical ([n, c, h, w]) in both. Not
 *    activations, so the same in both layouts: weights ([k, c/g, r, s],
 *    PyTorch's), per-channel vectors, [n, c] / [n, c, 1, 1] tensors (the
 *    same bytes in both), per-pixel tensors ([n, hw]: labels, predictions,
 *    ce_label_prob), and the uint8 HWC images normalize_u8 reads. Max-pool
 *    indices are stored as activations (maxpool_fwd). Purely elementwise ops
 *    (relu, add, scale, axpy, the gates, dropout_bwd, sgd_step,
 *    sgd_multi_step, adamw_multi_step, sumsq) do not care.
 *    Every op's result is the same in both layouts up to where it stores an
 *    element (bit for bit where the op promises bits; the convolutions
 *    within their tolerance, as a library may sum in another order).
 *  - Layout of every struct here is fixed: no field depends on build options.
 */
#ifndef SG_KERNELS_BACKEND_H
#define SG_KERNELS_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct sg_backend sg_backend;
struct sg_backend_info;

/* Convolution geometry. x: [n, c, h, w], weight: [k, c/groups, r, s] (PyTorch's
 * layout: out, in/groups, kh, kw), y: [n, k, oh, ow].
 * oh = (h + 2*pad_h - dil_h*(r-1) - 1)/stride_h + 1 (sg_conv_desc_init computes it).
 * groups: 0 or 1 = an ordinary convolution; g > 1 splits the input and output
 * channels into g groups, output channel o reading only the input channels of
 * its group o / (k/g) (torch.nn.Conv2d's groups; depthwise: g == c == k). g
 * must divide c and k (sg_conv_desc_check); a backend refuses anything else
 * as a fatal error naming the geometry. */
typedef struct sg_conv_desc {
    int n, c, h, w; /* input */
    int k, r, s;    /* output channels, kernel height, kernel width */
    int stride_h, stride_w;
    int pad_h, pad_w;
    int dil_h, dil_w;
    int oh, ow; /* output spatial size (fill with sg_conv_desc_init) */
    int groups; /* 0 or 1: ungrouped; last, so zero-initialised descriptors stay ungrouped */
} sg_conv_desc;

/* The effective group count (1 for groups 0 or 1). */
static inline int sg_conv_groups(const sg_conv_desc *d) { return d->groups > 1 ? d->groups : 1; }

/* Elements of the weight tensor: k * (c/groups) * r * s. */
static inline size_t sg_conv_weight_count(const sg_conv_desc *d) {
    return (size_t)d->k * (size_t)(d->c / sg_conv_groups(d)) * (size_t)d->r * (size_t)d->s;
}

/* 0 if groups is 0, 1, or a positive divisor of both c and k; else -1. */
static inline int sg_conv_desc_check(const sg_conv_desc *d) {
    int g = sg_conv_groups(d);
    if (d->groups < 0 || d->c <= 0 || d->k <= 0) return -1;
    return (d->c % g == 0 && d->k % g == 0) ? 0 : -1;
}

/* Fills oh/ow from the rest; returns 0, or -1 if the output would be empty.
 * Inline (not in backend.c) so a backend's conv code can validate a
 * geometry without calling back up into the dispatcher. */
static inline int sg_conv_desc_init(sg_conv_desc *d) {
    d->oh = (d->h + 2 * d->pad_h - d->dil_h * (d->r - 1) - 1) / d->stride_h + 1;
    d->ow = (d->w + 2 * d->pad_w - d->dil_w * (d->s - 1) - 1) / d->stride_w + 1;
    return (d->oh > 0 && d->ow > 0) ? 0 : -1;
}

/* One tensor of the fused optimizer step (sgd_multi_plan): parameter,
 * gradient and momentum buffer (NULL without momentum), count floats each,
 * stepped at the learning rate of its group (0 <= group < SG_SGD_GROUPS). */
typedef struct sg_sgd_tensor {
    float *param;
    const float *grad;
    float *buf;
    size_t count;
    int group;
} sg_sgd_tensor;
enum { SG_SGD_GROUPS = 4 };

/* One tensor of the fused AdamW step (adamw_multi_plan): parameter,
 * gradient, first and second moments (exp_avg, exp_avg_sq), count floats
 * each, in learning-rate group `group` (0 <= group < SG_SGD_GROUPS). */
typedef struct sg_adamw_tensor {
    float *param;
    const float *grad;
    float *exp_avg, *exp_avg_sq;
    size_t count;
    int group;
} sg_adamw_tensor;

/* The scalars of one AdamW step, computed on the host in double as
 * torch.optim.AdamW does (step t counted from 1, lr_g the group's rate) and
 * rounded once to float: decay[g] = 1 - lr_g*wd, step_size[g] =
 * lr_g / (1 - beta1^t), w1 = 1 - beta1, beta2, omb2 = 1 - beta2,
 * bc2_sqrt = sqrt(1 - beta2^t), eps. */
typedef struct sg_adamw_args {
    float decay[SG_SGD_GROUPS];
    float step_size[SG_SGD_GROUPS];
    float w1, beta2, omb2, bc2_sqrt, eps;
} sg_adamw_args;

typedef struct sg_ops {
    const char *name; /* "cpu", "cuda" */
    void (*destroy)(sg_backend *be);
    void (*get_info)(sg_backend *be, struct sg_backend_info *info);

    /* ---- memory ---- */
    void *(*alloc)(sg_backend *be, size_t bytes); /* zeroed; fatal on OOM */
    void (*free)(sg_backend *be, void *p);
    void (*upload)(sg_backend *be, void *dst, const void *host_src, size_t bytes);
    void (*download)(sg_backend *be, void *host_dst, const void *src, size_t bytes);
    void (*copy)(sg_backend *be, void *dst, const void *src, size_t bytes);
    void (*zero)(sg_backend *be, void *p, size_t bytes);
    void (*sync)(sg_backend *be);
    /* Host memory suited to fast upload (pinned on CUDA, malloc on CPU). */
    void *(*host_alloc)(sg_backend *be, size_t bytes);
    void (*host_free)(sg_backend *be, void *p);

    /* ---- convolution (no bias inside the main conv ops; bias via bias_*) ---- */
    /* Optional: build primitives/workspace for this geometry now. */
    void (*conv_prepare)(sg_backend *be, const sg_conv_desc *d);
    void (*conv_fwd)(sg_backend *be, const sg_conv_desc *d, const float *x, const float *w,
                     float *y);
    void (*conv_bwd_data)(sg_backend *be, const sg_conv_desc *d, const float *dy, const float *w,
                          float *dx, int accumulate);
    void (*conv_bwd_weight)(sg_backend *be, const sg_conv_desc *d, const float *x, const float *dy,
                            float *dw, int accumulate);
    /* y[n,c,:] += b[c] over hw elements per plane. */
    void (*bias_fwd)(sg_backend *be, float *y, const float *b, int n, int c, int hw);
    /* db[c] (+)= sum over n, hw of dy. */
    void (*bias_bwd)(sg_backend *be, const float *dy, float *db, int n, int c, int hw,
                     int accumulate);

    /* ---- batch norm, split the way SyncBN needs it ----
     * stats: [2*c] = per-channel mean, then M2 = sum((x-mean)^2) over n*hw values
     * (computed stably in double, reading x once: per-block moments merged
     * with Chan's formula, kernels/formulas/bn.h). */
    void (*bn_stats)(sg_backend *be, const float *x, int n, int c, int hw, float *stats);
    /* Merge `parts` partial stats (parts_stats: [parts][2*c] on the device,
     * counts: host array of each part's n*hw; a part with count 0 is skipped)
     * with Chan's formula in double, then mean[c] and invstd[c] =
     * 1/sqrt(var_biased + eps). If running_mean != NULL, also update
     * running_mean/var with momentum (running_var gets the unbiased var,
     * M2/(N-1); M2/N when the total N is 1, instead of dividing by zero). */
    void (*bn_finalize)(sg_backend *be, const float *parts_stats, const int64_t *counts, int parts,
                        int c, float eps, float momentum, float *mean, float *invstd,
                        float *running_mean, float *running_var);
    /* Eval mode: mean = running_mean, invstd = 1/sqrt(running_var + eps). */
    void (*bn_eval_params)(sg_backend *be, const float *running_mean, const float *running_var,
                           int c, float eps, float *mean, float *invstd);
    /* y = (x-mean)*invstd*gamma + beta, then max(0, .) if relu. y may == x. */
    void (*bn_fwd)(sg_backend *be, const float *x, const float *mean, const float *invstd,
                   const float *gamma, const float *beta, float *y, int n, int c, int hw, int relu);
    /* red: [2*c] = sum(g), sum(g*(x-mean)) where g = dy, masked by y > 0 when
     * relu (y = this layer's output). x is the BN input. */
    void (*bn_bwd_reduce)(sg_backend *be, const float *dy, const float *x, const float *y,
                          const float *mean, float *red, int n, int c, int hw, int relu);
    /* dx (+)= (g - red[0]/count - (x-mean)*invstd^2*red[1]/count) * invstd * gamma,
     * g as in bn_bwd_reduce, count = the (global) number of values per channel.
     * red and count are global under SyncBN (all-reduced), local otherwise. */
    void (*bn_bwd_elem)(sg_backend *be, const float *dy, const float *x, const float *y,
                        const float *mean, const float *invstd, const float *gamma,
                        const float *red, double count, float *dx, int n, int c, int hw, int relu,
                        int accumulate);
    /* dgamma (+)= red[1]*invstd, dbeta (+)= red[0]  (c values each). */
    void (*bn_param_grads)(sg_backend *be, const float *red, const float *invstd, float *dgamma,
                           float *dbeta, int c, int accumulate);

    /* ---- elementwise ---- */
    void (*relu_fwd)(sg_backend *be, const float *x, float *y, size_t count);
    /* dx (+)= dy * (y > 0) */
    void (*relu_bwd)(sg_backend *be, const float *dy, const float *y, float *dx, size_t count,
                     int accumulate);
    /* y = a + b, then max(0, .) if relu. y may alias a or b. */
    void (*add)(sg_backend *be, const float *a, const float *b, float *y, size_t count, int relu);
    /* y = alpha * x (in place allowed) */
    void (*scale)(sg_backend *be, const float *x, float *y, float alpha, size_t count);
    /* y += alpha * x */
    void (*axpy)(sg_backend *be, float alpha, const float *x, float *y, size_t count);

    /* ---- gates: MobileNetV3 / LR-ASPP activations and channel gating ----
     * PyTorch's definitions and gradients (torch 1.13 CPU kernels,
     * kernels/formulas/gate.h has the per-element arithmetic both backends
     * share):
     *   hardsigmoid(x) = min(max(x + 3, 0), 6) / 6
     *     gradient dy / 6 where -3 < x < 3, else 0 (0 at both kinks);
     *   hardswish(x) = x * min(max(x + 3, 0), 6) / 6
     *     gradient 0 for x < -3, dy * (x / 3 + 0.5) for -3 <= x <= 3 (so
     *     -0.5 dy at x = -3 and 1.5 dy at x = 3), dy for x > 3;
     *   sigmoid(x) = 1 / (1 + exp(-x)), gradient dy * (1 - y) * y.
     * Forward: y may == x. Backward: dx may == dy. The hard ones take the
     * forward's input x, sigmoid its output y. */
    void (*hardswish_fwd)(sg_backend *be, const float *x, float *y, size_t count);
    void (*hardswish_bwd)(sg_backend *be, const float *dy, const float *x, float *dx, size_t count,
                          int accumulate);
    void (*hardsigmoid_fwd)(sg_backend *be, const float *x, float *y, size_t count);
    void (*hardsigmoid_bwd)(sg_backend *be, const float *dy, const float *x, float *dx,
                            size_t count, int accumulate);
    void (*sigmoid_fwd)(sg_backend *be, const float *x, float *y, size_t count);
    void (*sigmoid_bwd)(sg_backend *be, const float *dy, const float *y, float *dx, size_t count,
                        int accumulate);
    /* Channel scaling (squeeze-excitation, the LR-ASPP gate):
     * y[i,ch,p] = x[i,ch,p] * s[i*c + ch] for the hw elements p of each plane;
     * s is [n, c] (an [n,c,1,1] tensor). y may == x. */
    void (*chan_scale_fwd)(sg_backend *be, const float *x, const float *s, float *y, int n, int c,
                           int hw);
    /* dx[i,ch,p] (+)= dy[i,ch,p] * s[i*c + ch] (acc_dx) and ds[i*c + ch] (+)=
     * sum over p of dy[i,ch,p] * x[i,ch,p] (acc_ds; summed in double, in a fixed order: the
     * same bits on every run). dx or ds may be NULL (not computed); neither
     * may alias dy, x or s. */
    void (*chan_scale_bwd)(sg_backend *be, const float *dy, const float *x, const float *s,
                           float *dx, float *ds, int n, int c, int hw, int acc_dx, int acc_ds);

    /* ---- pooling, resize, concat ---- */
    /* max-pool 3x3 stride 2 pad 1; idx (int32, y's size) records the argmax
     * (flat index y*w + x within the input plane) for backward, stored in the
     * activation layout as y is (element (i, ch, q) where y's is). */
    void (*maxpool_fwd)(sg_backend *be, const float *x, float *y, int32_t *idx, int n, int c, int h,
                        int w, int oh, int ow);
    void (*maxpool_bwd)(sg_backend *be, const float *dy, const int32_t *idx, float *dx, int n,
                        int c, int h, int w, int oh, int ow);
    /* global average pool: [n,c,h,w] -> [n,c,1,1]; x stored as x_dt
     * (SG_ACT_F32, or SG_ACT_BF16 read exactly: the residual stream under
     * train.precision bf16, model_plan.c), y float32 */
    void (*avgpool_fwd)(sg_backend *be, const void *x, int x_dt, float *y, int n, int c, int hw);
    void (*avgpool_bwd)(sg_backend *be, const float *dy, float *dx, int n, int c, int hw,
                        int accumulate);
    /* bilinear resize, align_corners=False (PyTorch's area-pixel mapping,
     * scale = in/out), any sizes. */
    void (*resize_fwd)(sg_backend *be, const float *x, float *y, int n, int c, int h, int w, int oh,
                       int ow);
    void (*resize_bwd)(sg_backend *be, const float *dy, float *dx, int n, int c, int h, int w,
                       int oh, int ow, int accumulate);
    /* copy src [n, c_src, hw] into dst [n, c_dst, hw] at channel offset c_off
     * (concat); concat_bwd is the inverse slice (dst (+)= dy slice). src_dt,
     * dst_dt: their storage (SG_ACT_F32 or SG_ACT_BF16: a float32 source
     * into a bf16 destination is rounded RNE, a bf16 one widened exactly
     * into a float32 destination); dy and dsrc are float32. */
    void (*concat_fwd)(sg_backend *be, const void *src, int src_dt, void *dst, int dst_dt, int n,
                       int c_src, int c_dst, int c_off, int hw);
    void (*concat_bwd)(sg_backend *be, const float *dy, float *dsrc, int n, int c_src, int c_dst,
                       int c_off, int hw, int accumulate);

    /* ---- dropout: keep with prob 1-p, scale kept by 1/(1-p). The mask is a
     * pure function of (key, logical element index) through sg_rng
     * (kernels/rng.h), so every backend and layout draws the same mask.
     * The key is key = sg_rng_dropout_key(step key, salt): the step key is
     * the one set_step_key set last (0 before any), read when the op runs,
     * not when it is issued (so a replayed graph draws its replay's masks);
     * salt tells the layers of one step apart (the model passes the layer's
     * dropout index). x, y, mask: count = n*c*hw elements of an [n, c, hw]
     * activation (mask: uint8, stored in the activation layout like x).
     * Rule (bit-exact on every backend): with i the element's NCHW index
     * (i*c + ch)*hw + p, keep = sg_rng_uniform(key, i) >= p; y = keep ?
     * x * (1.0f/(1.0f-p)) : 0 in float; p >= 1 drops everything. c = hw = 1
     * treats x as a flat vector. ---- */
    void (*dropout_fwd)(sg_backend *be, const float *x, float *y, uint8_t *mask, size_t count,
                        int c, int hw, float p, uint64_t salt);
    void (*dropout_bwd)(sg_backend *be, const float *dy, const uint8_t *mask, float *dx,
                        size_t count, float p, int accumulate);

    /* ---- loss and metrics ---- */
    /* Softmax cross-entropy over c classes, logits [n,c,hw], labels uint8 [n,hw];
     * labels == ignore (or >= c) contribute nothing. Writes
     * dlogits = (softmax - onehot) * grad_scale (0 at ignored pixels) if dlogits
     * != NULL, and returns on the host the summed loss (double) and the number
     * of valid pixels. */
    void (*ce_fwd_bwd)(sg_backend *be, const float *logits, const uint8_t *labels, int n, int c,
                       int hw, int ignore, float grad_scale, float *dlogits, double *loss_sum,
                       int64_t *valid);
    /* pred[n,hw] = argmax over c (first max wins) */
    void (*argmax)(sg_backend *be, const float *logits, uint8_t *pred, int n, int c, int hw);
    /* conf[label*c + pred] += 1 for label < c; conf is int64 [c*c] on the device. */
    void (*confusion)(sg_backend *be, const uint8_t *pred, const uint8_t *labels, size_t count,
                      int c, int64_t *conf);
    /* ---- loss options: class weights, OHEM (train/train_step.c) ---- */
    /* ce_fwd_bwd where a valid pixel p (label y) counts with the weight
     *   w_p = (class_w ? class_w[y] : 1) * (sel_key == NULL || sel_key[p] < sel_below)
     * (class_w: c floats on the device; sel_key: n*hw floats on the device).
     * Writes dlogits = (softmax - onehot) * (grad_scale * w_p) in float,
     * exactly 0 where w_p == 0, if dlogits != NULL (it may alias logits), and
     * returns on the host sum_p w_p * loss_p and sum_p w_p (double). With
     * class_w and sel_key NULL it is ce_fwd_bwd bit for bit (weight_sum =
     * valid pixels). */
    void (*ce_weighted)(sg_backend *be, const float *logits, const uint8_t *labels, int n, int c,
                        int hw, int ignore, const float *class_w, const float *sel_key,
                        float sel_below, float grad_scale, float *dlogits, double *loss_sum,
                        double *weight_sum);
    /* ce_weighted with no result on the host, so nothing waits for the
     * device (the training step reads its losses once, at its end): the
     * loss sum s = sum_p w_p * loss_p, the double ce_weighted returns, is
     * added on the compute stream to a double in backend memory,
     * *acc = *acc + (s / div1) / div2 (acc NULL: not added). dlogits as
     * ce_weighted's, bit for bit; the weight sum is not kept. */
    void (*ce_weighted_acc)(sg_backend *be, const float *logits, const uint8_t *labels, int n,
                            int c, int hw, int ignore, const float *class_w, const float *sel_key,
                            float sel_below, float grad_scale, float *dlogits, double *acc,
                            double div1, double div2);
    /* prob[p] = softmax(logits[:, p])[y_p] with ce_fwd_bwd's arithmetic
     * (e[y] / sum), +INFINITY where the label is ignored (== ignore or >= c).
     * prob [n*hw] must not alias logits. */
    void (*ce_label_prob)(sg_backend *be, const float *logits, const uint8_t *labels, int n, int c,
                          int hw, int ignore, float *prob);
    /* The k-th smallest (0-based, k < count) of x[0..count), exact, returned
     * on the host. Order: IEEE total order (-0 before +0, +inf last but for
     * NaNs, which sort above it). Radix select on the float bits: no scratch
     * the caller provides, the same answer on every backend. */
    float (*kth_smallest)(sg_backend *be, const float *x, size_t count, size_t k);

    /* ---- optimizer: torch.optim.SGD semantics ----
     * d = g + wd*p; buf = d if first else momentum*buf + (1-dampening)*d;
     * d = d + momentum*buf if nesterov else buf (momentum 0: d unchanged, buf unused);
     * p -= lr*d. */
    void (*sgd_step)(sg_backend *be, float *param, const float *grad, float *buf, size_t count,
                     float lr, float momentum, float dampening, float wd, int nesterov, int first);
    /* sgd_step over many tensors at once: the optimizer's whole step as one
     * pass (CUDA: one kernel launch, whatever the number of tensors).
     * sgd_multi_plan takes the n tensors once (built before the steps: it
     * may allocate and copy; the rows must not overlap) and returns the
     * plan; sgd_multi_step updates every row as sgd_step would, with lr =
     * lr[row.group]: the same bits as one sgd_step per row. A plan stays
     * valid while its tensors live; sgd_multi_free releases it (NULL:
     * nothing). */
    void *(*sgd_multi_plan)(sg_backend *be, const sg_sgd_tensor *t, int n);
    void (*sgd_multi_step)(sg_backend *be, void *plan, const float lr[SG_SGD_GROUPS],
                           float momentum, float dampening, float wd, int nesterov, int first);
    void (*sgd_multi_free)(sg_backend *be, void *plan);
    /* ---- optimizer: torch.optim.AdamW semantics (kernels/formulas/adamw.h),
     * the whole step as one pass like sgd_multi_*: per value of a row in
     * group g, p *= decay[g]; m = lerp(m, grad, w1); v = v*beta2 +
     * omb2*grad*grad; p += (-step_size[g]*m) / (sqrt(v)/bc2_sqrt + eps).
     * The same bits on every backend. The rows must not overlap; a plan
     * stays valid while its tensors live; adamw_multi_free(NULL) does
     * nothing. */
    void *(*adamw_multi_plan)(sg_backend *be, const sg_adamw_tensor *t, int n);
    void (*adamw_multi_step)(sg_backend *be, void *plan, const sg_adamw_args *a);
    void (*adamw_multi_free)(sg_backend *be, void *plan);
    /* The sum of squares of every gradient of an optimizer plan (from
     * sgd_multi_plan or adamw_multi_plan), for clip_grad_norm: each piece
     * of the plan summed in double, the pieces in a fixed order, so the
     * same gradients give the same value on every call (not necessarily the
     * same bits on two backends). Returned on the host: one wait for the
     * device, whatever the number of tensors. */
    double (*optim_grad_sumsq)(sg_backend *be, void *plan);

    /* ---- input ---- */
    /* src uint8 [n, h, w, 3] (HWC) -> dst float [n, 3, h, w], (v/255 - mean)/std. */
    void (*normalize_u8)(sg_backend *be, const uint8_t *src, float *dst, int n, int h, int w,
                         const float mean[3], const float std[3]);

    /* sum of squares of x (for grad norms / checks), returned on the host. */
    double (*sumsq)(sg_backend *be, const float *x, size_t count);

    /* ---- test-time augmentation (inference only: no backward exists or is
     * needed; train/tta.h averages flipped and rescaled predictions) ---- */
    /* y[n,c,h,w-1-x] = x[n,c,h,x]: horizontal flip of [n,c,h,w]; y must not
     * alias x. */
    void (*flip_w)(sg_backend *be, const float *x, float *y, int n, int c, int h, int w);
    /* y[n,:,p] (+)= softmax over the c classes of x[n,:,p] for each of the hw
     * pixels p, with ce_fwd_bwd's per-pixel arithmetic
     * (kernels/formulas/cross_entropy.h: max, e[k] = expf(x[k]-max), float
     * sum in k order, e[k] * (1/sum)); y must not alias x. */
    void (*softmax_fwd)(sg_backend *be, const float *x, float *y, int n, int c, int hw,
                        int accumulate);

    /* ---- streams (CUDA: compute, copy and communication streams ordered by
     * events; the CPU backend runs everything synchronously and these are
     * plain copies / no-ops) ---- */
    /* Upload from host_alloc memory on the copy stream (overlaps compute). */
    void (*upload_async)(sg_backend *be, void *dst, const void *host_src, size_t bytes);
    /* The compute stream waits for every upload issued so far. */
    void (*upload_wait)(sg_backend *be);
    /* Native stream handle (cudaStream_t as void*) for SG_STREAM_*; NULL on the CPU. */
    void *(*stream)(sg_backend *be, int which);
    /* Stream `waiter` waits for all work issued so far on stream `waitee`. */
    void (*stream_wait)(sg_backend *be, int waiter, int waitee);

    /* ---- threads ---- */
    /* Makes the calling thread use this backend's device (CUDA:
     * cudaSetDevice; CPU: nothing). A thread other than the one that created
     * the backend calls it once before its first op or stream use (the DDP
     * comm thread). */
    void (*bind_thread)(sg_backend *be);

    /* ---- memory written behind the ops' back ----
     * [p, p + bytes) of backend memory was changed by something other than
     * an op: a collective library writing in place (NCCL, Gloo broadcast of
     * the parameters), or the CPU writing SG_CAP_HOST_MEMORY memory
     * directly. p == NULL: any memory may have changed. Backends keep
     * derived copies of weights (the bf16 weight copies of
     * train.precision bf16, kernels/weight_cache.h) and drop the ones made
     * from that range. Writes through the ops (upload, upload_async, copy,
     * zero, scale, axpy, sgd_step, sgd_multi_step) need no such call: they do it
     * themselves. Cheap when the range holds no weights. */
    void (*mem_written)(sg_backend *be, const void *p, size_t bytes);

    /* ---- bf16 activation storage (train.precision bf16; model/model_plan.c)
     * The same ops as above where some activations are stored as bfloat16
     * bits (uint16_t, 2 bytes per value, in be->layout, the top half of the float32)
     * instead of float32: an argument `x_dt` / `y_dt` says how its tensor is
     * stored (SG_ACT_F32 or SG_ACT_BF16). With every dtype SG_ACT_F32 each
     * op is its float32 namesake bit for bit. All math stays float32 (BN
     * statistics in double, as above).
     *  - A bf16 input is read exactly (a bf16 value widened to float32).
     *  - conv_fwd_dt with y_dt bf16 stores the result rounded to bf16 (RNE,
     *    kernels/formulas/bf16.h); under SG_PRECISION_BF16 the result is a
     *    bf16 value already (see below), so the store is exact and every
     *    result equals conv_fwd's.
     *  - bn_fwd_dt with y_dt bf16 stores its results (after the ReLU)
     *    rounded to bf16 (RNE): the rounding a bf16 convolution does to its
     *    input anyway, so a bf16 convolution reading it sees the same values.
     *  - bn_bwd_reduce_dt / bn_bwd_elem_dt take y == NULL when the BN output
     *    is stored in bf16: the ReLU mask (y > 0) is then recomputed from x
     *    with the forward formula (formulas/bn.h; needs invstd, gamma, beta,
     *    which are ignored when y != NULL) - bit for bit the float32 output's
     *    mask, where a stored bf16 output would lose positive values below
     *    2^-133 to 0.
     *  - Gradients may be stored in bf16 too (model_plan.c's gradient
     *    storage, as PyTorch AMP keeps them): `dy_dt` says how the gradient
     *    an op reads is stored, `dx_dt` how the one it writes is. A bf16 dy
     *    is read exactly (widened), as a bf16 x is. A bf16 dx is rounded to
     *    bf16 (RNE) once, where it is written: bn_bwd_elem_dt rounds its
     *    float32 result; conv_bwd_dt under SG_PRECISION_BF16 stores the
     *    bf16 result of the convolution as it is (exact; under fp32 it
     *    rounds the float32 result). A bf16 dx is written, never added to:
     *    accumulate (acc_x) must be 0 with dx_dt SG_ACT_BF16 (a gradient
     *    with several writers keeps its float32 sum), a fatal error
     *    otherwise. Under SG_PRECISION_BF16 a convolution rounds dy to bf16
     *    anyway, so a bf16 dy (rounded where BN wrote it) gives the same
     *    results as the float32 dy it was rounded from. */
    void (*conv_fwd_dt)(sg_backend *be, const sg_conv_desc *d, const void *x, int x_dt,
                        const float *w, void *y, int y_dt);
    void (*conv_bwd_weight_dt)(sg_backend *be, const sg_conv_desc *d, const void *x, int x_dt,
                               const void *dy, int dy_dt, float *dw, int accumulate);
    /* The backward of one conv: conv_bwd_weight_dt(x, dy -> dw, acc_w),
     * then conv_bwd_data(dy, w -> dx, acc_x) with dy stored as dy_dt and dx
     * as dx_dt, bit for bit those two calls (on float32 copies of the bf16
     * tensors), in one so that a backend can share their work on dy (the
     * CPU's bf16 GEMM paths round dy to bf16 once for both). dw NULL: the
     * backward-data pass only; dx NULL: the backward-weights pass only. */
    void (*conv_bwd_dt)(sg_backend *be, const sg_conv_desc *d, const void *x, int x_dt,
                        const void *dy, int dy_dt, const float *w, float *dw, int acc_w, void *dx,
                        int dx_dt, int acc_x);
    void (*bn_stats_dt)(sg_backend *be, const void *x, int x_dt, int n, int c, int hw,
                        float *stats);
    void (*bn_fwd_dt)(sg_backend *be, const void *x, int x_dt, const float *mean,
                      const float *invstd, const float *gamma, const float *beta, void *y, int y_dt,
                      int n, int c, int hw, int relu);
    void (*bn_bwd_reduce_dt)(sg_backend *be, const void *dy, int dy_dt, const void *x, int x_dt,
                             const float *y, const float *mean, const float *invstd,
                             const float *gamma, const float *beta, float *red, int n, int c,
                             int hw, int relu);
    void (*bn_bwd_elem_dt)(sg_backend *be, const void *dy, int dy_dt, const void *x, int x_dt,
                           const float *y, const float *mean, const float *invstd,
                           const float *gamma, const float *beta, const float *red, double count,
                           void *dx, int dx_dt, int n, int c, int hw, int relu, int accumulate);

    /* ---- batch norm fused with a residual join (model/model_run.c uses
     * them where a BN without ReLU feeds only relu(. + identity), the last
     * BN of a bottleneck). x as in the *_dt ops (x_dt: SG_ACT_F32 or
     * SG_ACT_BF16). Per element the same arithmetic as the unfused chain
     * (bn_fwd, then add with relu; relu_bwd, then bn_bwd_reduce), so y and
     * dres are its bits (red: the same sums, which a backend may group
     * differently).
     * The join's output y and its identity res may be stored in bf16 too
     * (res_dt, y_dt), as under train.precision bf16 the residual stream is
     * (model_plan.c, AMP's rounding of it): a bf16 res is read exactly; y_dt
     * SG_ACT_BF16 stores y rounded to bf16 (RNE), SG_ACT_F32R stores the
     * same rounded value as a float32 (the plan's float32-only test aid
     * keeps the rounding point so results do not change). The masks of the
     * backward then come from the rounded y, as the next layer saw it.
     * Memory passes per element (either layout): bn_stats reads x once (both
     * backends: the mean and M2 of cache-sized blocks merged with Chan's
     * formula); bn_add_relu_fwd reads x and res and writes y once;
     * bn_bwd_reduce_res reads dy, y, x and writes dres once. */
    /* y = max(0, (x-mean)*invstd*gamma + beta + res). y may == res when
     * both are stored alike (res_dt SG_ACT_BF16 with y_dt SG_ACT_BF16, or
     * both float32). */
    void (*bn_add_relu_fwd)(sg_backend *be, const void *x, int x_dt, const float *mean,
                            const float *invstd, const float *gamma, const float *beta,
                            const void *res, int res_dt, void *y, int y_dt, int n, int c, int hw);
    /* With g = dy masked by y > 0 (y = bn_add_relu_fwd's output, stored as
     * y_dt: SG_ACT_F32 or SG_ACT_BF16): red as in bn_bwd_reduce, [2*c] =
     * sum(g), sum(g*(x-mean)); and, when dres is not NULL, dres (+)= g (the
     * identity's gradient, float32; accumulate as usual). With accumulate
     * 0, dres then holds g itself, so dx follows from bn_bwd_elem(dres,
     * ..., relu 0) without reading dy and y again. */
    void (*bn_bwd_reduce_res)(sg_backend *be, const float *dy, const void *x, int x_dt,
                              const void *y, int y_dt, const float *mean, float *red, float *dres,
                              int n, int c, int hw, int accumulate);

    /* ---- the step's parameters, read by ops when they run ----
     * The random key of dropout_fwd (see there): issued on the compute
     * stream like an op, so the ops issued after it see it (CUDA: a device
     * word written by a kernel; CPU: a field). A captured graph
     * (graph_begin) reads the key set before its launch. */
    void (*set_step_key)(sg_backend *be, uint64_t key);

    /* ---- graphs (SG_CAP_GRAPHS; CUDA graphs): record a sequence of ops
     * once and launch it again as one unit, without the host issuing each
     * op. Without the capability the four ops are fatal errors (a caller's
     * bug: ask be->caps first).
     * graph_begin: the ops issued on the compute stream from now on, by
     * this thread, until graph_end are recorded, not run. Between the two
     * no op may wait for the device or return a value to the host (loss
     * sums, sumsq, download, sync), and none may allocate (the per-shape
     * caches must be built already: capture a sequence that has run once);
     * the backend stops with a fatal error naming the op if one does.
     * Kernel arguments are recorded as they were issued: a value that
     * changes between launches must reach the ops through device memory
     * (set_step_key, the tensors themselves). Host code between the ops
     * (what the caller decides on the host) is not recorded: the caller
     * repeats its effects itself at each launch.
     * graph_end: ends the recording and returns the graph (fatal when the
     * library refuses it, naming why). Nothing recorded has run yet.
     * graph_launch: runs graph g on the compute stream, ordered like an op.
     * Returns 0, or -1 without running anything when memory the graph was
     * recorded over has moved since (the backend's own buffers, e.g. the
     * convolution workspace, grew or were freed): free it and record anew.
     * graph_free: releases g (NULL: nothing). */
    void (*graph_begin)(sg_backend *be);
    void *(*graph_end)(sg_backend *be);
    int (*graph_launch)(sg_backend *be, void *g);
    void (*graph_free)(sg_backend *be, void *g);
} sg_ops;

/* Every op of sg_ops, in declaration order (an X-macro: X(name) per op).
 * Static asserts in kernels/backend.c fail to compile when sg_ops gains,
 * loses or reorders a pointer without this list following, so whatever is
 * built from it covers the whole table: sg_backend_create's check that a
 * backend filled every op, and the conformance suite's check that every op
 * has cases (tests/backend/test_backend_ops.c). */
/* clang-format off */
#define SG_OPS_LIST(X)                                                                   \
    X(destroy) X(get_info)                                                               \
    X(alloc) X(free) X(upload) X(download) X(copy) X(zero) X(sync) X(host_alloc)         \
    X(host_free)                                                                         \
    X(conv_prepare) X(conv_fwd) X(conv_bwd_data) X(conv_bwd_weight) X(bias_fwd)          \
    X(bias_bwd)                                                                          \
    X(bn_stats) X(bn_finalize) X(bn_eval_params) X(bn_fwd) X(bn_bwd_reduce)              \
    X(bn_bwd_elem) X(bn_param_grads)                                                     \
    X(relu_fwd) X(relu_bwd) X(add) X(scale) X(axpy)                                      \
    X(hardswish_fwd) X(hardswish_bwd) X(hardsigmoid_fwd) X(hardsigmoid_bwd)              \
    X(sigmoid_fwd) X(sigmoid_bwd) X(chan_scale_fwd) X(chan_scale_bwd)                    \
    X(maxpool_fwd) X(maxpool_bwd) X(avgpool_fwd) X(avgpool_bwd) X(resize_fwd)            \
    X(resize_bwd) X(concat_fwd) X(concat_bwd)                                            \
    X(dropout_fwd) X(dropout_bwd)                                                        \
    X(ce_fwd_bwd) X(argmax) X(confusion)                                                 \
    X(ce_weighted) X(ce_weighted_acc) X(ce_label_prob) X(kth_smallest)                  \
    X(sgd_step) X(sgd_multi_plan) X(sgd_multi_step) X(sgd_multi_free)                    \
    X(adamw_multi_plan) X(adamw_multi_step) X(adamw_multi_free) X(optim_grad_sumsq)      \
    X(normalize_u8) X(sumsq)                                                             \
    X(flip_w) X(softmax_fwd)                                                             \
    X(upload_async) X(upload_wait) X(stream) X(stream_wait)                              \
    X(bind_thread)                                                                       \
    X(mem_written)                                                                       \
    X(conv_fwd_dt) X(conv_bwd_weight_dt) X(conv_bwd_dt) X(bn_stats_dt) X(bn_fwd_dt)        \
    X(bn_bwd_reduce_dt) X(bn_bwd_elem_dt)                                                  \
    X(bn_add_relu_fwd) X(bn_bwd_reduce_res)                                                \
    X(set_step_key)                                                                        \
    X(graph_begin) X(graph_end) X(graph_launch) X(graph_free)
/* clang-format on */

/* How an activation is stored (the *_dt ops above). */
/* SG_ACT_F32R (bn_add_relu_fwd's y_dt only): float32 storage of a value
 * rounded to bf16 where it is written; read as SG_ACT_F32. */
enum { SG_ACT_F32 = 0, SG_ACT_BF16 = 1, SG_ACT_F32R = 2 };

/* The order of an activation's elements in memory (be->layout; see the
 * conventions at the top). */
enum { SG_LAYOUT_NCHW = 0, SG_LAYOUT_NHWC = 1 };

/* Where element (i, ch, p) of an [n, c, hw] activation lies in `layout`. */
static inline size_t sg_act_at(int layout, int c, int hw, int i, int ch, int p) {
    return layout == SG_LAYOUT_NHWC ? ((size_t)i * (size_t)hw + (size_t)p) * (size_t)c + (size_t)ch
                                    : ((size_t)i * (size_t)c + (size_t)ch) * (size_t)hw + (size_t)p;
}

enum { SG_STREAM_COMPUTE = 0, SG_STREAM_COPY = 1, SG_STREAM_COMM = 2 };

/* What a backend reports about itself (memory figures are bytes). */
typedef struct sg_backend_info {
    char name[32];     /* "cpu", "cuda:0" */
    char device[128];  /* human readable: CPU model / GPU name */
    int threads;       /* CPU threads used (CPU backend) */
    size_t mem_in_use; /* bytes allocated through ops->alloc now */
    size_t mem_peak;   /* high-water mark of the above */
    /* The device's memory, 0 = unknown. CPU: MemTotal / MemAvailable of
     * /proc/meminfo, lowered to the cgroup's memory limit (and limit - usage)
     * when one is set; CUDA: cudaMemGetInfo's total / free. Checked before
     * large allocations a user's input decides (whole-image evaluation). */
    size_t mem_total;
    size_t mem_available;
    /* How the convolutions run (sg_backend_opts.precision, allow_tf32):
     * precision "fp32" | "bf16"; conv_math in words, e.g. "bf16: oneDNN
     * native (ISA avx512_core_amx)", "bf16: emulated (...)", "fp32, TF32
     * tensor cores allowed". */
    char precision[8];
    char conv_math[160];
    /* The convolution plan cache (kernels/conv_plans.h; CUDA, else 0):
     * geometries whose algorithms came from the cache (memory or file) or
     * were chosen anew, and the entries read from the file at start-up. */
    long conv_plan_hits, conv_plan_misses, conv_plan_loaded;
    /* Layout transposes of activations since creation: kernel launches that
     * move an activation between NCHW and NHWC (CUDA: the bf16 convolutions'
     * copies around cuDNN under layout NCHW; 0 under NHWC, where cuDNN reads
     * and writes the activations as they are). Weight copies (KCRS <-> KRSC)
     * are not activations and are not counted. CPU: 0. */
    long act_transposes;
    /* Bytes read plus bytes written since creation by the conversion passes
     * around the convolutions (CUDA: rounding a float32 operand to its bf16
     * copy, widening a bf16 result into float32 - reading the old value too
     * when adding to it -, transposing either between NCHW and NHWC, and
     * laying the KRSC weight gradient out as float32 KCRS), each pass counted
     * as the traffic model counts one (train/bench_traffic.h: its "convert"
     * class). Counted on the host at launch: a replayed graph's passes are
     * not counted again. Weight copies are not counted. CPU: 0. */
    double convert_bytes;
    /* Graphs (SG_CAP_GRAPHS) recorded (graph_end) and launched
     * (graph_launch that ran) since creation; 0 without graphs. */
    long graph_captures, graph_launches;
} sg_backend_info;

struct sg_backend {
    const sg_ops *ops;
    void *impl;       /* backend-private state */
    unsigned caps;    /* SG_CAP_* flags: what callers may rely on */
    int device_index; /* the device's index (cuda:N), -1 on the host */
    int layout;       /* SG_LAYOUT_*: how every op stores activations (fixed) */
};

/* Capabilities (be->caps), in terms of what a caller needs to know. */
enum {
    /* Backend memory (ops->alloc) is host memory: the CPU may read and write
     * it directly, and upload/download/copy are plain copies. Without it,
     * device pointers must go through upload/download. */
    SG_CAP_HOST_MEMORY = 1u << 0,
    /* Ops run asynchronously on separate compute, copy and communication
     * streams (ops->stream is a native handle) that only ops->stream_wait
     * orders. Without it, every op has finished when it returns and the
     * stream ops do nothing. */
    SG_CAP_ASYNC_STREAMS = 1u << 1,
    /* A device-collective library (NCCL) can reduce backend memory in place
     * on the backend's streams: collectives need no staging through host
     * memory. */
    SG_CAP_DEVICE_COLLECTIVES = 1u << 2,
    /* graph_begin / graph_end / graph_launch work (CUDA graphs): a fixed
     * sequence of ops can be recorded once and launched as one unit. */
    SG_CAP_GRAPHS = 1u << 3
};

/* 1 if the backend has every capability in `caps` (0 for a NULL backend). */
static inline int sg_backend_has(const sg_backend *be, unsigned caps) {
    return be && (be->caps & caps) == caps;
}

/* Backend options: plain values, same layout in every build. */
typedef struct sg_backend_opts {
    int threads;                /* CPU: 0 = all cores (OMP_NUM_THREADS if set) */
    int cudnn_benchmark;        /* CUDA: measure conv algorithms once per shape */
    int cudnn_deterministic;    /* CUDA: deterministic algorithms only */
    int precision;              /* SG_PRECISION_* of the convolutions (0 = fp32) */
    int allow_tf32;             /* CUDA, fp32: TF32 tensor cores for convolutions (0 = off:
                                 plain fp32, as the CPU; the config's default is on) */
    const char *conv_plan_file; /* CUDA: the convolution plan cache's file
                                   (kernels/conv_plans.h); NULL or "" = memory only */
    int layout;                 /* SG_LAYOUT_* of the activations (0 = NCHW); both
                                   backends implement both */
} sg_backend_opts;

/* Precision of the convolutions (sg_backend_opts.precision). Everything else
 * is float32 in both: tensors in memory (the op interface stays float32 NCHW,
 * but for the bf16-stored activations of the *_dt ops above),
 * BN, losses, reductions, the optimizer and the parameters.
 *  SG_PRECISION_FP32: float32 convolutions (CUDA: TF32 only with allow_tf32).
 *  SG_PRECISION_BF16: conv_fwd, conv_bwd_data and conv_bwd_weight take their
 *    two inputs rounded to bfloat16 (round-to-nearest-even,
 *    kernels/formulas/bf16.h), multiply-add them with float32 accumulation,
 *    and round the result to bfloat16 (as a bf16 tensor-core convolution with
 *    bf16 output computes); with accumulate = 1 that rounded result is then
 *    added in float32. So conv outputs (activations and their gradients)
 *    hold bf16 values, the weights used are the bf16 copy of the float32
 *    master weights as they are at the call, and weight gradients are bf16
 *    values summed in float32. CPU: oneDNN's bf16 primitives where the
 *    processor has bf16 instructions (AVX512-BF16, AMX), else emulated exactly
 *    (the rounding above around float32 convolutions; SG_CPU_BF16=native|
 *    emulated|auto overrides). CUDA: cuDNN bf16 convolutions (compute
 *    capability 8.0 or newer), on NHWC bf16 copies under layout NCHW, on
 *    the activations themselves (float32 ones only rounded to bf16 in
 *    place of a copy) under layout NHWC. */
enum { SG_PRECISION_FP32 = 0, SG_PRECISION_BF16 = 1 };

/* Creates a backend from a device string: "cpu", "cuda", "cuda:N".
 * Returns NULL with an error logged (naming the device and what to do) when
 * the string is malformed, the backend is not compiled in, the device is
 * absent or unusable, or (a bug) the backend left an op unset; it never
 * exits for these. */
sg_backend *sg_backend_create(const char *device, const sg_backend_opts *opts);
void sg_backend_destroy(sg_backend *be);
void sg_backend_get_info(sg_backend *be, sg_backend_info *info);

/* Host memory: an [n, c, hw] activation of esize-byte elements copied from
 * layout `from` into layout `to` (SG_LAYOUT_*; the same layout: a plain
 * copy). For host code that reads or writes activations (sliding windows,
 * saved logits, tests). dst must not alias src. */
void sg_act_relayout(void *dst, const void *src, int n, int c, int hw, size_t esize, int from,
                     int to);

/* SG_LAYOUT_* the CPU backend's activations run fastest in for `precision`
 * (SG_PRECISION_*) on this processor: what cpu.layout auto means. The CPU
 * backend decides from the ISA oneDNN dispatches to (ONEDNN_MAX_CPU_ISA
 * included) with what `segtrain bench` measured (its table, in
 * kernels/cpu/cpu_backend.c); NCHW without a CPU backend. `why` (may be
 * NULL) gets a few words for the log. */
int sg_backend_cpu_preferred_layout(int precision, const char **why);

/* 1 if the CUDA backend was compiled into this binary. */
int sg_backend_cuda_compiled(void);
/* Number of usable CUDA devices (0 if none or not compiled). */
int sg_backend_cuda_device_count(void);
/* The CUDA libraries' versions, in use and built against, as one line
 * ("cudnn 91900 (built with 91900), nccl 22809 (built with 22809), cudart
 * ..., driver ..."; "not compiled in" without CUDA). Host-only calls: no GPU
 * needed. */
void sg_backend_cuda_versions(char *buf, size_t len);

#ifdef __cplusplus
}
#endif

#endif
