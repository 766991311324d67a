/* train/bench_traffic.c - the traffic and FLOP model of a training step
 * (train/bench_traffic.h).
 *
 * One walk over the layer list per micro-batch, in the runner's order
 * (model/model_run.c): forward, then the loss of the logits, then backward in
 * reverse, skipping what the runner skips (a layer whose output needs no
 * gradient; the data gradient of an input that needs none, e.g. the first
 * conv's; the weight gradient of a frozen weight). Each kernel pass is one
 * call of pass() with the bytes it reads and writes. The designs differ in
 * a small table (rules) and in three places: the convolutions (CUDA's bf16
 * convs copy an operand to bf16 NHWC and widen a result where its storage
 * is not what cuDNN reads and writes: conv_in / conv_out), batch norm and
 * the residual join (segtrain's fused kernels, or PyTorch's separate ones)
 * and how gradients of a tensor with several readers are summed (segtrain's
 * kernels add into the gradient: one more read; autograd writes each and
 * adds them: one more pass).
 *
 * Why the cuda-bf16-* rows cannot drift from the code: they hold no byte
 * counts of their own. Every tensor's bytes come from the plan's storage
 * decisions as the runner meets them - sg_model_shapes' t[].dt (the same
 * act_storage the plan runs), the element sizes sg_tensor_act_esize /
 * sg_tensor_grad_esize (the ones the plan sizes its arena with), acc_in,
 * req_grad, the fused joins and trainable flags - and the one CUDA rule is
 * cuda_conv.cu's: cuDNN runs bf16 NHWC in and out, so an operand or result
 * whose storage is not 2 bytes a value (under NCHW: every one) passes
 * through a conversion. A plan that stores more tensors in bf16 (a bf16
 * gradient: sg_tensor_grad_esize returns 2) moves these rows by itself.
 * That rule (cu_direct, conv_in, conv_out, conv_bwd_weight's dw_from_krsc
 * pass: class SG_TRC_CONVERT) is restated here, so it is checked against
 * the code: the CUDA backend counts the bytes its own conversion passes
 * read and write (cuda_conv.cu count_convert; sg_backend_info's
 * convert_bytes), and tests/train/test_emu_convert.c runs bf16 training
 * steps on the emulated cuda:0 in both layouts (frozen layers and two
 * micro-batches too) and requires that count to equal this file's convert
 * class exactly. A conversion added to or dropped from either side fails it.
 */
#include "train/bench_traffic.h"

#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "model/model_internal.h"

/* CUDA's bf16 convolutions (kernels/cuda/cuda_conv.cu) run cuDNN on bf16
 * NHWC operands into a bf16 NHWC result. Under layout NCHW every operand is
 * copied into bf16 NHWC scratch (a transpose; rounding a float32 one) and
 * every result copied back; under NHWC only an operand stored in float32 is
 * rounded into scratch and only a float32 result widened from it - a
 * bf16-stored one is read or written by cuDNN itself (sg_cuda_conv_native_dt). */
enum { CU_NCHW = 1, CU_NHWC = 2 };

typedef struct rules {
    const char *name, *about;
    int storage;      /* bytes from the plan's storage (sg_tensor_act_esize / _grad_esize) */
    double act, grad; /* else bytes per activation element; gradient element */
    int cuda;         /* CUDA's bf16 convs (cuda_conv.cu): CU_NCHW or CU_NHWC, else 0 */
    int torch;        /* PyTorch's kernels: BN, ReLU, add apart; autograd's gradient sums */
    double wconv;     /* bytes per weight a conv reads: float32 or the bf16 copy */
    int wcast;        /* float32 -> bf16 copy of every conv weight once per step */
    double idx;       /* bytes per max-pool index (int32; PyTorch int64) */
    double label;     /* bytes per label (uint8; PyTorch int64) */
} rules;

static const rules design_rules[SG_TR_N_DESIGNS] = {
    [SG_TR_NCHW_F32] = {"nchw-f32", "activations and gradients float32", 0, 4, 4, 0, 0, 4, 0, 4, 1},
    [SG_TR_NHWC_F32] = {"nhwc-f32",
                        "activations and gradients float32, NHWC: the bytes of nchw-f32", 0, 4, 4,
                        0, 0, 4, 0, 4, 1},
    [SG_TR_CPU_BF16] =
        {"cpu-bf16",
         "float32 but the plan's bf16-stored activations (conv -> BN, BN+ReLU -> conv, the residual stream) and gradients (conv <-> BN); oneDNN's internal conversions not modelled",
         1, 4, 4, 0, 0, 4, 0, 4, 1},
    [SG_TR_CUDA_BF16_CONVERT] =
        {"cuda-bf16-convert",
         "CUDA bf16, layout NCHW: the plan's storage, each conv converting to bf16 NHWC copies and back",
         1, 4, 4, CU_NCHW, 0, 2, 1, 4, 1},
    [SG_TR_CUDA_BF16_NHWC] =
        {"cuda-bf16-nhwc",
         "CUDA bf16, layout NHWC, as built: the plan's storage; cuDNN reads and writes bf16-stored activations and gradients, float32 ones rounded / widened around it",
         1, 4, 4, CU_NHWC, 0, 2, 1, 4, 1},
    [SG_TR_NHWC_BF16] =
        {"nhwc-bf16",
         "a target, not built: activations and gradients bf16 NHWC end to end, no conversions", 0,
         2, 2, 0, 0, 2, 1, 4, 1},
    [SG_TR_TORCH_AMP] =
        {"torch-amp",
         "PyTorch AMP channels_last on CUDA: bf16 NHWC, separate BN / ReLU / add kernels", 0, 2, 2,
         0, 1, 2, 1, 8, 8},
};

static const char *const phase_names[SG_TR_N_PHASES] = {"forward", "loss", "backward", "optimizer"};
static const char *const class_names[SG_TRC_N] = {"conv",        "weight copy", "convert",  "bn",
                                                  "elementwise", "loss",        "optimizer"};

const char *sg_traffic_design_name(int design) {
    return design >= 0 && design < SG_TR_N_DESIGNS ? design_rules[design].name : NULL;
}

const char *sg_traffic_design_about(int design) {
    return design >= 0 && design < SG_TR_N_DESIGNS ? design_rules[design].about : NULL;
}

int sg_traffic_design_from_name(const char *name) {
    for (int d = 0; d < SG_TR_N_DESIGNS; d++)
        if (name && strcmp(name, design_rules[d].name) == 0) return d;
    return -1;
}

const char *sg_traffic_phase_name(int phase) {
    return phase >= 0 && phase < SG_TR_N_PHASES ? phase_names[phase] : "?";
}

const char *sg_traffic_class_name(int cls) {
    return cls >= 0 && cls < SG_TRC_N ? class_names[cls] : "?";
}

double sg_traffic_bytes(const sg_traffic *t) {
    double s = 0;
    for (int p = 0; p < SG_TR_N_PHASES; p++) s += t->ph[p].read + t->ph[p].write;
    return s;
}

double sg_traffic_flops(const sg_traffic *t) {
    double s = 0;
    for (int p = 0; p < SG_TR_N_PHASES; p++) s += t->ph[p].flops;
    return s;
}

/* ---- the walk ---- */

typedef struct walk {
    const rules *r;
    const sg_model *m;
    const sg_tensor *t; /* shapes of this input (copies) */
    const sg_layer *l;
    int acc_w; /* parameter gradients accumulate (a micro-batch after the first) */
    int phase;
    sg_traffic *tot, *lay; /* lay: the current layer's entry, or NULL */
} walk;

/* One kernel pass of class cls: rd bytes read, wr written. */
static void pass(walk *k, int cls, double rd, double wr) {
    sg_traffic *dst[2] = {k->tot, k->lay};
    for (int i = 0; i < 2; i++) {
        if (!dst[i]) continue;
        dst[i]->ph[k->phase].read += rd;
        dst[i]->ph[k->phase].write += wr;
        dst[i]->cat[cls] += rd + wr;
    }
}

static void flops(walk *k, double f) {
    k->tot->ph[k->phase].flops += f;
    if (k->lay) k->lay->ph[k->phase].flops += f;
}

static double cnt(const walk *k, int ti) { return (double)k->t[ti].count; }

/* Bytes of activation ti, of its gradient (as the plan stores them, or the
 * design's fixed sizes), of c float32 values. */
static double A(const walk *k, int ti) {
    double b = k->r->storage ? sg_tensor_act_esize(&k->t[ti]) : k->r->act;
    return cnt(k, ti) * b;
}
static double G(const walk *k, int ti) {
    double b = k->r->storage ? sg_tensor_grad_esize(&k->t[ti]) : k->r->grad;
    return cnt(k, ti) * b;
}
static double V(double c) { return 4.0 * c; }

static int needs_grad(const walk *k, int ti) { return k->t[ti].req_grad; }

/* A gradient written by a kernel into tensor ti's gradient, accumulating
 * when acc: segtrain's kernels read the old gradient (returned: the extra
 * bytes read); PyTorch's autograd writes the new one apart and sums them in
 * one more pass (counted here, returns 0). */
static double acc_grad(walk *k, int ti, int acc) {
    if (!acc) return 0;
    if (!k->r->torch) return G(k, ti);
    pass(k, SG_TRC_ELEM, 2 * G(k, ti), G(k, ti));
    return 0;
}

static int param_trains(const walk *k, int p) { return p >= 0 && k->m->params[p].trainable; }

/* ---- convolutions ---- */

static double conv_macs(const sg_layer *L) {
    const sg_conv_desc *d = &L->desc;
    return (double)d->n * (double)sg_conv_weight_count(d) * d->oh * d->ow;
}

/* Whether a CUDA bf16 conv reads or writes n elements stored in `bytes`
 * as they are: not under NCHW (transposed), nor a float32 tensor. (Checked
 * against cuda_conv.cu's own count: tests/train/test_emu_convert.c.) */
static int cu_direct(const walk *k, double bytes, double n) {
    return k->r->cuda == CU_NHWC && bytes == 2 * n;
}

/* A conv operand of n elements stored in `bytes`: the bytes the conv
 * kernel reads (a CUDA bf16 conv's copy of it counted as a conversion). */
static double conv_in(walk *k, double bytes, double n) {
    if (!k->r->cuda || cu_direct(k, bytes, n)) return bytes;
    pass(k, SG_TRC_CONVERT, bytes, 2 * n); /* act_to_bf16 / bf16_to_nhwc */
    return 2 * n;
}

/* A conv result of n elements into storage of `bytes`, old: the bytes of
 * its old value read when accumulating (else 0). Returns the bytes the
 * conv kernel writes; adds to *rd what it reads besides its operands (the
 * old value when it accumulates itself). */
static double conv_out(walk *k, double bytes, double n, double old, double *rd) {
    if (!k->r->cuda || cu_direct(k, bytes, n)) {
        *rd += old;
        return bytes;
    }
    pass(k, SG_TRC_CONVERT, 2 * n + old, bytes); /* act_from_bf16 / bf16_from_nhwc */
    return 2 * n;
}

static void conv_fwd(walk *k, const sg_layer *L, int first_micro) {
    int x = L->in[0], y = L->out;
    double W = (double)sg_conv_weight_count(&L->desc);
    if (k->r->wcast && first_micro) pass(k, SG_TRC_WCAST, 4 * W, 2 * W);
    double rd = conv_in(k, A(k, x), cnt(k, x)) + k->r->wconv * W;
    double wr = conv_out(k, A(k, y), cnt(k, y), 0, &rd);
    pass(k, SG_TRC_CONV, rd, wr);
    flops(k, 2 * conv_macs(L));
    if (L->b_param >= 0) pass(k, SG_TRC_CONV, A(k, y) + V(L->desc.k), A(k, y)); /* bias_fwd */
}

/* The weight gradient: float32 dw (+= when accumulating). */
static void conv_bwd_weight(walk *k, const sg_layer *L) {
    int x = L->in[0], y = L->out;
    double W = (double)sg_conv_weight_count(&L->desc), acc = k->acc_w ? 4 * W : 0;
    if (k->r->cuda) { /* x and dy as bf16 operands, dw KRSC bf16 back to float32 */
        double rd = conv_in(k, A(k, x), cnt(k, x)) + conv_in(k, G(k, y), cnt(k, y));
        pass(k, SG_TRC_CONV, rd, 2 * W);
        pass(k, SG_TRC_CONVERT, 2 * W + acc, 4 * W); /* dw_from_krsc */
    } else if (k->r->torch) { /* cuDNN writes a bf16 dw; autocast's cast back to float32 */
        pass(k, SG_TRC_CONV, A(k, x) + G(k, y), 2 * W);
        pass(k, SG_TRC_CONVERT, 2 * W, 4 * W);
        if (k->acc_w) pass(k, SG_TRC_ELEM, 8 * W, 4 * W); /* .grad += */
    } else {
        pass(k, SG_TRC_CONV, A(k, x) + G(k, y) + acc, 4 * W);
    }
    flops(k, 2 * conv_macs(L));
}

/* The data gradient (CUDA bf16: dy as an operand once more, its own copy) */
static void conv_bwd_data(walk *k, const sg_layer *L) {
    int x = L->in[0], y = L->out;
    double W = (double)sg_conv_weight_count(&L->desc);
    double rd = conv_in(k, G(k, y), cnt(k, y)) + k->r->wconv * W;
    double old = acc_grad(k, x, L->acc_in[0]);
    double wr = conv_out(k, G(k, x), cnt(k, x), old, &rd);
    pass(k, SG_TRC_CONV, rd, wr);
    flops(k, 2 * conv_macs(L));
}

static void conv_bwd(walk *k, const sg_layer *L) {
    if (param_trains(k, L->w_param)) conv_bwd_weight(k, L);
    if (param_trains(k, L->b_param)) /* bias_bwd */
        pass(k, SG_TRC_CONV, G(k, L->out) + (k->acc_w ? V(L->desc.k) : 0), V(L->desc.k));
    if (needs_grad(k, L->in[0])) conv_bwd_data(k, L);
}

/* ---- batch norm ---- */

/* Training forward up to the statistics: one statistics pass and the
 * finalize (mean, invstd, running mean and variance), or the running
 * statistics (frozen) turned into mean and invstd. */
static void bn_stats_fwd(walk *k, const sg_layer *L) {
    double c = k->t[L->out].c;
    if (L->frozen_stats) {
        pass(k, SG_TRC_BN, 2 * V(c), 2 * V(c));
        return;
    }
    pass(k, SG_TRC_BN, A(k, L->in[0]), 2 * V(c));
    pass(k, SG_TRC_BN, 4 * V(c), 4 * V(c));
}

static void bn_fwd(walk *k, const sg_layer *L) {
    int x = L->in[0], y = L->out;
    double c = k->t[y].c;
    bn_stats_fwd(k, L);
    if (k->r->torch) { /* BN apply, then ReLU in place */
        pass(k, SG_TRC_BN, A(k, x) + 4 * V(c), A(k, y));
        if (L->relu) pass(k, SG_TRC_ELEM, A(k, y), A(k, y));
    } else if (L->join < 0) { /* the apply with its ReLU (a fused BN: at its join) */
        pass(k, SG_TRC_BN, A(k, x) + 4 * V(c), A(k, y));
    }
}

static void add_relu_fwd(walk *k, const sg_layer *L) {
    int a = L->in[0], b = L->in[1], y = L->out;
    if (k->r->torch) { /* out += identity; relu(out) in place */
        pass(k, SG_TRC_ELEM, A(k, a) + A(k, b), A(k, y));
        pass(k, SG_TRC_ELEM, A(k, y), A(k, y));
    } else if (L->fused_bn >= 0) { /* bn_add_relu_fwd */
        const sg_layer *B = &k->l[L->fused_bn];
        int r = a == B->out ? b : a;
        pass(k, SG_TRC_BN, A(k, B->in[0]) + A(k, r) + 4 * V(k->t[y].c), A(k, y));
    } else {
        pass(k, SG_TRC_ELEM, A(k, a) + A(k, b), A(k, y));
    }
}

/* The parameter gradients from the reduction (bn_param_grads). */
static void bn_param_grads(walk *k, double c) {
    pass(k, SG_TRC_BN, 3 * V(c) + (k->acc_w ? 2 * V(c) : 0), 2 * V(c));
}

/* PyTorch's BN backward: the ReLU's threshold_backward first, then one
 * reduction pass and one elementwise pass. */
static void bn_bwd_torch(walk *k, const sg_layer *L) {
    int x = L->in[0], y = L->out;
    double c = k->t[y].c;
    int train_params = param_trains(k, L->bn_p[0]) || param_trains(k, L->bn_p[1]);
    int need_dx = needs_grad(k, x);
    if (L->relu) pass(k, SG_TRC_ELEM, G(k, y) + A(k, y), G(k, y));
    if (train_params || (need_dx && !L->frozen_stats))
        pass(k, SG_TRC_BN, G(k, y) + A(k, x), 2 * V(c));
    if (train_params) bn_param_grads(k, c);
    if (need_dx) {
        double old = acc_grad(k, x, L->acc_in[0]);
        pass(k, SG_TRC_BN, G(k, y) + A(k, x) + 5 * V(c) + old, G(k, x));
    }
}

/* segtrain's BN backward (model/model_run.c bn_backward). a: the join it is fused
 * into, or NULL. */
static void bn_bwd(walk *k, const sg_layer *L, const sg_layer *a) {
    int x = L->in[0], y = L->out;
    double c = k->t[y].c;
    int train_params = param_trains(k, L->bn_p[0]) || param_trains(k, L->bn_p[1]);
    int need_dx = needs_grad(k, x);
    int need_red = train_params || (need_dx && !L->frozen_stats);
    /* the dx pass's inputs besides x: g and the ReLU mask's y (none when y
     * is stored in bf16: recomputed from x) */
    double g_rd = 0, y_rd = 0;
    int recompute = 0;
    if (a) {
        int j = a->out, ri = a->in[0] == y ? 1 : 0, r = a->in[ri];
        int dres = needs_grad(k, r), acc_r = a->acc_in[ri];
        double dres_w = dres ? G(k, r) : 0, dres_old = dres && acc_r ? G(k, r) : 0;
        if (k->r->storage && k->t[j].dt == SG_ACT_BF16) {
            /* a bf16-stored join output: one reduce pass always, g into
             * dres when it is set, else in place into the join's gradient
             * (then added to dres) */
            int direct = dres && !acc_r;
            pass(k, SG_TRC_BN, G(k, j) + A(k, x) + A(k, j) + V(c), 2 * V(c) + G(k, j));
            if (dres && !direct) pass(k, SG_TRC_ELEM, 2 * G(k, r), G(k, r));
            if (!needs_grad(k, y)) return;
            g_rd = G(k, j);
            y_rd = 0;
        } else if (!needs_grad(k, y) || !need_red) { /* relu_bwd into the identity only */
            if (dres) pass(k, SG_TRC_ELEM, G(k, j) + A(k, j) + dres_old, dres_w);
            if (!needs_grad(k, y)) return;
        } else { /* bn_bwd_reduce_res: red, and the identity's gradient */
            pass(k, SG_TRC_BN, G(k, j) + A(k, x) + A(k, j) + V(c) + dres_old, 2 * V(c) + dres_w);
        }
        if (k->r->storage && k->t[j].dt == SG_ACT_BF16) {
            /* g_rd, y_rd set above */
        } else if (dres && !acc_r) { /* dx reads g from the identity's gradient, no mask */
            g_rd = G(k, r);
            y_rd = 0;
        } else {
            g_rd = G(k, j);
            y_rd = A(k, j);
        }
    } else {
        int y_f32 = !k->r->storage || k->t[y].dt == SG_ACT_F32;
        /* a bf16-stored BN+ReLU output: the mask recomputed from x, with
         * invstd, gamma and beta (the reduce reads all three, dx beta more) */
        recompute = L->relu && !y_f32;
        y_rd = L->relu && y_f32 ? A(k, y) : 0;
        g_rd = G(k, y);
        if (need_red)
            pass(k, SG_TRC_BN, g_rd + A(k, x) + y_rd + V(c) + (recompute ? 3 * V(c) : 0), 2 * V(c));
    }
    if (train_params) bn_param_grads(k, c);
    if (need_dx)
        pass(k, SG_TRC_BN,
             g_rd + A(k, x) + y_rd + (recompute ? 6 : 5) * V(c) + acc_grad(k, x, L->acc_in[0]),
             G(k, x));
}

static void add_relu_bwd(walk *k, const sg_layer *L) {
    int y = L->out;
    if (k->r->torch) { /* threshold_backward; the add passes the gradient through */
        pass(k, SG_TRC_ELEM, G(k, y) + A(k, y), G(k, y));
        for (int i = 0; i < 2; i++)
            if (needs_grad(k, L->in[i])) acc_grad(k, L->in[i], L->acc_in[i]);
        return;
    }
    if (L->fused_bn >= 0) {
        bn_bwd(k, &k->l[L->fused_bn], L);
        return;
    }
    for (int i = 0; i < 2; i++)
        if (needs_grad(k, L->in[i]))
            pass(k, SG_TRC_ELEM, G(k, y) + A(k, y) + acc_grad(k, L->in[i], L->acc_in[i]),
                 G(k, L->in[i]));
}

/* ---- the other layers ---- */

/* A one-input elementwise-style layer: forward reads x (and extra bytes),
 * writes y (and extra bytes). */
static void simple_fwd(walk *k, const sg_layer *L, double extra_rd, double extra_wr) {
    pass(k, SG_TRC_ELEM, A(k, L->in[0]) + extra_rd, A(k, L->out) + extra_wr);
}

/* Backward of a one-input layer: reads dy and `also` bytes, writes dx. */
static void simple_bwd(walk *k, const sg_layer *L, double also) {
    int x = L->in[0];
    if (!needs_grad(k, x)) return;
    double old = acc_grad(k, x, L->acc_in[0]);
    pass(k, SG_TRC_ELEM, G(k, L->out) + also + old, G(k, x));
}

static void concat_fwd(walk *k, const sg_layer *L) {
    const sg_tensor *y = &k->t[L->out];
    double per = A(k, L->out) / cnt(k, L->out);
    for (int i = 0; i < L->n_in; i++) pass(k, SG_TRC_ELEM, A(k, L->in[i]), cnt(k, L->in[i]) * per);
    (void)y;
}

static void concat_bwd(walk *k, const sg_layer *L) {
    for (int i = 0; i < L->n_in; i++) {
        int s = L->in[i];
        if (!needs_grad(k, s)) continue;
        double old = acc_grad(k, s, L->acc_in[i]);
        if (!k->r->torch) pass(k, SG_TRC_ELEM, G(k, s) + old, G(k, s)); /* torch: views */
    }
}

static void add_bwd(walk *k, const sg_layer *L) {
    for (int i = 0; i < 2; i++) {
        int s = L->in[i];
        if (!needs_grad(k, s)) continue;
        double old = acc_grad(k, s, L->acc_in[i]);
        if (!k->r->torch) pass(k, SG_TRC_ELEM, G(k, L->out) + old, G(k, s)); /* copy / axpy */
    }
}

static void chan_scale_bwd(walk *k, const sg_layer *L) {
    int x = L->in[0], s = L->in[1], y = L->out;
    int dx = needs_grad(k, x), ds = needs_grad(k, s);
    if (!dx && !ds) return;
    if (k->r->torch) { /* mul's backward: dx = dy * s; ds = sum(dy * x) */
        if (dx) pass(k, SG_TRC_ELEM, G(k, y) + A(k, s) + acc_grad(k, x, L->acc_in[0]), G(k, x));
        if (ds) pass(k, SG_TRC_ELEM, G(k, y) + A(k, x) + acc_grad(k, s, L->acc_in[1]), G(k, s));
        return;
    }
    double rd = G(k, y) + A(k, x) + A(k, s);
    rd += dx ? acc_grad(k, x, L->acc_in[0]) : 0;
    rd += ds ? acc_grad(k, s, L->acc_in[1]) : 0;
    pass(k, SG_TRC_ELEM, rd, (dx ? G(k, x) : 0) + (ds ? G(k, s) : 0));
}

static void layer_fwd(walk *k, const sg_layer *L, int first_micro) {
    int y = L->out;
    switch (L->type) {
    case L_CONV: conv_fwd(k, L, first_micro); return;
    case L_BN: bn_fwd(k, L); return;
    case L_ADD_RELU: add_relu_fwd(k, L); return;
    case L_MAXPOOL: simple_fwd(k, L, 0, k->r->idx * cnt(k, y)); return;
    case L_AVGPOOL:
    case L_RESIZE:
    case L_RELU:
    case L_HARDSWISH:
    case L_HARDSIGMOID:
    case L_SIGMOID: simple_fwd(k, L, 0, 0); return;
    case L_DROPOUT: simple_fwd(k, L, 0, cnt(k, y)); return; /* the mask, a byte each */
    case L_DROPOUT2D: simple_fwd(k, L, V((double)k->t[y].count / k->t[y].h / k->t[y].w), 0); return;
    case L_CONCAT: concat_fwd(k, L); return;
    case L_ADD: pass(k, SG_TRC_ELEM, A(k, L->in[0]) + A(k, L->in[1]), A(k, y)); return;
    case L_CHAN_SCALE: pass(k, SG_TRC_ELEM, A(k, L->in[0]) + A(k, L->in[1]), A(k, y)); return;
    }
    SG_CHECK(0, "model traffic: layer kind %d has no rule (internal error)", L->type);
}

static void layer_bwd(walk *k, const sg_layer *L) {
    int x = L->in[0], y = L->out;
    switch (L->type) {
    case L_CONV: conv_bwd(k, L); return;
    case L_BN:
        if (k->r->torch) bn_bwd_torch(k, L);
        else if (L->join < 0) bn_bwd(k, L, NULL);
        return; /* else at its join */
    case L_ADD_RELU: add_relu_bwd(k, L); return;
    case L_MAXPOOL: simple_bwd(k, L, k->r->idx * cnt(k, y)); return;
    case L_AVGPOOL:
    case L_RESIZE:
    case L_DROPOUT2D: simple_bwd(k, L, 0); return;
    case L_DROPOUT: simple_bwd(k, L, cnt(k, y)); return;
    case L_RELU:
    case L_SIGMOID: simple_bwd(k, L, A(k, y)); return; /* the mask / derivative from y */
    case L_HARDSWISH:
    case L_HARDSIGMOID: simple_bwd(k, L, A(k, x)); return; /* from x */
    case L_CONCAT: concat_bwd(k, L); return;
    case L_ADD: add_bwd(k, L); return;
    case L_CHAN_SCALE: chan_scale_bwd(k, L); return;
    }
    SG_CHECK(0, "model traffic: layer kind %d has no rule (internal error)", L->type);
}

/* Cross-entropy of logits ti (ce_fwd_bwd: logits and labels in, dlogits
 * out). PyTorch AMP: autocast runs it in float32: the logits cast up,
 * log_softmax, nll_loss (a gather at the label), and backward
 * nll_loss_backward, log_softmax_backward and the cast down, all counted
 * in the loss phase here. */
static void loss_of(walk *k, int ti) {
    const sg_tensor *t = &k->t[ti];
    double px = cnt(k, ti) / t->c, N = cnt(k, ti);
    if (!k->r->torch) {
        pass(k, SG_TRC_LOSS, A(k, ti) + k->r->label * px, G(k, ti));
        return;
    }
    pass(k, SG_TRC_CONVERT, A(k, ti), 4 * N);
    pass(k, SG_TRC_LOSS, 4 * N, 4 * N);
    pass(k, SG_TRC_LOSS, 4 * px + k->r->label * px, 0);
    pass(k, SG_TRC_LOSS, k->r->label * px, 4 * N);
    pass(k, SG_TRC_LOSS, 8 * N, 4 * N);
    pass(k, SG_TRC_CONVERT, 4 * N, G(k, ti));
}

/* SGD with momentum over the trainable parameters: read p, g, buf, write
 * p, buf (float32; segtrain's sgd_step and PyTorch's foreach SGD alike). */
static void optimizer(walk *k) {
    for (int i = 0; i < k->m->n_params; i++) {
        const sg_param *p = &k->m->params[i];
        if (p->is_buffer || !p->trainable) continue;
        pass(k, SG_TRC_OPT, 12.0 * (double)p->count, 8.0 * (double)p->count);
    }
}

static void micro_batch(walk *k, sg_traffic *per_layer, int first) {
    const sg_model *m = k->m;
    k->phase = SG_TR_FWD;
    for (int li = 0; li < m->n_l; li++) {
        k->lay = per_layer ? &per_layer[li] : NULL;
        layer_fwd(k, &k->l[li], first);
    }
    k->lay = NULL;
    k->phase = SG_TR_LOSS;
    loss_of(k, m->t_out);
    if (m->t_aux >= 0) loss_of(k, m->t_aux);
    k->phase = SG_TR_BWD;
    k->acc_w = !first;
    for (int li = m->n_l - 1; li >= 0; li--) {
        const sg_layer *L = &k->l[li];
        if (!k->t[L->out].req_grad) continue;
        k->lay = per_layer ? &per_layer[li] : NULL;
        layer_bwd(k, L);
    }
    k->lay = NULL;
}

sg_status sg_bench_traffic(const sg_model *m, int design, int n, int accum, int h, int w,
                           sg_traffic *out, sg_traffic *per_layer) {
    SG_CHECK(design >= 0 && design < SG_TR_N_DESIGNS && accum >= 1,
             "sg_bench_traffic: design %d, accum %d (internal error)", design, accum);
    memset(out, 0, sizeof *out);
    if (per_layer) memset(per_layer, 0, (size_t)m->n_l * sizeof *per_layer);
    if (n < 1 || h < 1 || w < 1) {
        SG_ERROR("model traffic: cannot model the input [%d, 3, %d, %d]", n, h, w);
        return SG_ERR_CONFIG;
    }
    sg_tensor *t = malloc((size_t)m->n_t * sizeof *t);
    sg_layer *l = malloc((size_t)(m->n_l ? m->n_l : 1) * sizeof *l);
    SG_CHECK(t && l, "out of host memory");
    memcpy(t, m->t, (size_t)m->n_t * sizeof *t);
    memcpy(l, m->l, (size_t)m->n_l * sizeof *l);
    const rules *r = &design_rules[design];
    sg_status st = sg_model_shapes(m, t, l, n, h, w, r->storage);
    if (st == SG_OK) {
        walk k = {r, m, t, l, 0, SG_TR_FWD, out, NULL};
        for (int i = 0; i < accum; i++) micro_batch(&k, per_layer, i == 0);
        k.phase = SG_TR_OPT;
        optimizer(&k);
    }
    free(t);
    free(l);
    return st;
}
