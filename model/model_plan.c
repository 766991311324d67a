/* model/model_plan.c - shape inference, gradient flags and the activation arena.
 *
 * sg_model_plan computes every tensor's shape for one input size, then lays
 * out ONE device allocation: persistent per-layer state (BN mean/invstd,
 * max-pool indices, dropout masks, BN scratch) followed by activations and
 * gradients placed by liveness. In a training plan every activation lives
 * from forward through backward when backward reads it (most do; a BN output
 * without ReLU does not), while a gradient lives only from its first write in
 * backward to its producer's backward, so gradient buffers are shared. In an
 * inference plan activations live from their producer to their last
 * consumer. Placement is greedy first-fit,
 * largest first, over these intervals.
 *
 * A training plan also refuses what batch-norm training cannot do (one
 * value per channel), so the forward pass never meets it.
 *
 * Under train.precision bf16 the plan stores some activations as bf16 (2
 * bytes a value, act_storage): conv outputs read only by batch norm,
 * BN+ReLU outputs read only by convolutions (both exact), and the residual
 * stream (fused joins' outputs, rounded to bf16 under bf16 precision either
 * way). model_run.c then calls the *_dt ops for the layers touching them.
 * Gradients follow (grad_storage): bf16 where a bf16 conv and the BN
 * kernels alone write and read one, written once (AMP's bf16 gradients).
 * Under fp32, or with the test aid SG_BF16_STORAGE=0, every tensor is
 * float32 (the rounding points stay); SG_BF16_STORAGE=act keeps the
 * gradients float32 only.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "core/test_seams.h"
#include "model/model_internal.h"

#define ALIGN 256

static size_t align_up(size_t x) { return (x + ALIGN - 1) / ALIGN * ALIGN; }

static void act_storage(const sg_model *m, sg_tensor *t, const sg_layer *l, int act_bf16);
static void grad_storage(const sg_model *m, sg_tensor *t, const sg_layer *l, int grad_bf16);

/* Fills shapes of t[] and conv descs of l[] for input [n,3,h,w]. Returns
 * SG_OK, or SG_ERR_CONFIG (logged) if a layer's output would be empty. */
static sg_status compute_shapes(const sg_model *m, sg_tensor *t, sg_layer *l, int n, int h, int w) {
    t[0].c = 3;
    t[0].h = h;
    t[0].w = w;
    for (int li = 0; li < m->n_l; li++) {
        sg_layer *L = &l[li];
        const sg_tensor *x = &t[L->in[0]];
        sg_tensor *y = &t[L->out];
        switch (L->type) {
        case L_CONV: {
            sg_conv_desc *d = &L->desc;
            memset(d, 0, sizeof *d);
            d->n = n;
            d->c = x->c;
            d->h = x->h;
            d->w = x->w;
            d->k = L->k;
            d->r = d->s = L->r;
            d->stride_h = d->stride_w = L->stride;
            d->pad_h = d->pad_w = L->pad;
            d->dil_h = d->dil_w = L->dil;
            d->groups = L->groups;
            if (sg_conv_desc_init(d) != 0) {
                SG_ERROR("model: input %dx%d is too small: conv %s gets %dx%d; use a larger crop",
                         h, w, m->params[L->w_param].name, x->h, x->w);
                return SG_ERR_CONFIG;
            }
            y->h = d->oh;
            y->w = d->ow;
            break;
        }
        case L_MAXPOOL:
            y->h = (x->h + 2 - 3) / 2 + 1;
            y->w = (x->w + 2 - 3) / 2 + 1;
            break;
        case L_AVGPOOL: y->h = y->w = 1; break;
        case L_RESIZE:
            y->h = t[L->ref].h;
            y->w = t[L->ref].w;
            break;
        case L_ADD:
        case L_CHAN_SCALE:
        case L_ADD_RELU:
            if (L->type == L_CHAN_SCALE) {
                SG_CHECK(t[L->in[1]].h == 1 && t[L->in[1]].w == 1 && t[L->in[1]].c == x->c,
                         "model: channel-scale gate is not [n, %d, 1, 1] (internal error)", x->c);
                y->h = x->h;
                y->w = x->w;
                break;
            }
            SG_CHECK(t[L->in[1]].h == x->h && t[L->in[1]].w == x->w && t[L->in[1]].c == x->c,
                     "model: residual shapes differ (internal error)");
            /* fall through */
        default: /* BN, dropout, concat: same spatial size */
            y->h = x->h;
            y->w = x->w;
            break;
        }
        if (y->h < 1 || y->w < 1) {
            SG_ERROR("model: input %dx%d is too small for this network", h, w);
            return SG_ERR_CONFIG;
        }
    }
    for (int i = 0; i < m->n_t; i++) t[i].count = (size_t)n * t[i].c * t[i].h * t[i].w;
    return SG_OK;
}

sg_status sg_model_shapes(const sg_model *m, sg_tensor *t, sg_layer *l, int n, int h, int w,
                          int act_bf16) {
    sg_status st = compute_shapes(m, t, l, n, h, w);
    if (st == SG_OK) act_storage(m, t, l, act_bf16);
    if (st == SG_OK) grad_storage(m, t, l, act_bf16 == 1);
    return st;
}

double sg_model_macs(const sg_model *m, int h, int w) {
    sg_tensor *t = malloc((size_t)m->n_t * sizeof *t);
    sg_layer *l = malloc((size_t)m->n_l * sizeof *l);
    SG_CHECK(t && l, "out of host memory");
    memcpy(t, m->t, (size_t)m->n_t * sizeof *t);
    memcpy(l, m->l, (size_t)m->n_l * sizeof *l);
    double macs = 0;
    if (compute_shapes(m, t, l, 1, h, w) == SG_OK)
        for (int li = 0; li < m->n_l; li++)
            if (l[li].type == L_CONV) {
                const sg_conv_desc *d = &l[li].desc;
                /* a grouped conv's output reads c/groups input channels */
                macs += (double)sg_conv_weight_count(d) * d->oh * d->ow;
            }
    free(t);
    free(l);
    return macs;
}

double sg_model_flops(const sg_model *m, int h, int w) { return 2.0 * sg_model_macs(m, h, w); }

static int layer_has_trainable(const sg_model *m, const sg_layer *l) {
    if (l->type == L_CONV)
        return m->params[l->w_param].trainable ||
               (l->b_param >= 0 && m->params[l->b_param].trainable);
    if (l->type == L_BN) return m->params[l->bn_p[0]].trainable || m->params[l->bn_p[1]].trainable;
    return 0;
}

/* Whether BN layers are fused with their residual join: yes, unless the
 * test seam SG_BN_FUSE=0 (core/test_seams.h) turns it off to compare with
 * the unfused chain; always in a build without test seams. */
static int bn_fuse_enabled(void) {
#if SG_TEST_SEAMS
    const char *env = sg_test_seam("SG_BN_FUSE");
    if (!env) return 1;
    SG_CHECK(strcmp(env, "0") == 0 || strcmp(env, "1") == 0,
             "environment SG_BN_FUSE='%s': expected 0 (batch norm and the residual add in "
             "separate passes: a test seam) or 1 (fused, the default); unset it",
             env);
    return env[0] == '1';
#else
    return 1;
#endif
}

/* Marks each BN without ReLU whose output is read by one L_ADD_RELU alone
 * (and is not a model output) as fused into it (sg_layer.join/fused_bn);
 * of a join whose two inputs both qualify, the first input's BN. */
static void plan_bn_fusion(sg_model *m) {
    for (int li = 0; li < m->n_l; li++) m->l[li].join = m->l[li].fused_bn = -1;
    if (!bn_fuse_enabled() || m->n_t <= 0) return;
    int *readers = calloc((size_t)m->n_t, sizeof(int));
    SG_CHECK(readers, "out of host memory");
    for (int li = 0; li < m->n_l; li++)
        for (int i = 0; i < m->l[li].n_in; i++) readers[m->l[li].in[i]]++;
    for (int li = 0; li < m->n_l; li++) {
        sg_layer *a = &m->l[li];
        if (a->type != L_ADD_RELU || a->n_in != 2 || a->in[0] == a->in[1]) continue;
        for (int k = 0; k < 2 && a->fused_bn < 0; k++) {
            int ti = a->in[k], pi = m->t[ti].producer;
            if (pi < 0 || ti == m->t_out || ti == m->t_aux || readers[ti] != 1) continue;
            sg_layer *b = &m->l[pi];
            if (b->type != L_BN || b->relu || b->join >= 0) continue;
            b->join = li;
            a->fused_bn = pi;
        }
    }
    free(readers);
}

/* acc_in of l's inputs (the first writer in backward order overwrites) and
 * l's trainable parameters appended to grad_order. */
static void grad_flags_of(sg_model *m, sg_layer *l, char *init) {
    for (int i = 0; i < l->n_in; i++) {
        int ti = l->in[i];
        if (!m->t[ti].req_grad) continue;
        l->acc_in[i] = init[ti];
        init[ti] = 1;
    }
    if (l->type == L_CONV) {
        if (m->params[l->w_param].trainable) m->grad_order[m->n_grad_order++] = l->w_param;
        if (l->b_param >= 0 && m->params[l->b_param].trainable)
            m->grad_order[m->n_grad_order++] = l->b_param;
    } else if (l->type == L_BN) {
        for (int k = 0; k < 2; k++)
            if (m->params[l->bn_p[k]].trainable) m->grad_order[m->n_grad_order++] = l->bn_p[k];
    }
}

void sg_model_update_grad_flags(sg_model *m) {
    plan_bn_fusion(m);
    for (int i = 0; i < m->n_t; i++) m->t[i].req_grad = 0;
    for (int li = 0; li < m->n_l; li++) {
        sg_layer *l = &m->l[li];
        int r = layer_has_trainable(m, l);
        for (int i = 0; i < l->n_in; i++) r |= m->t[l->in[i]].req_grad;
        m->t[l->out].req_grad = r;
    }
    char *init = calloc((size_t)m->n_t, 1);
    free(m->grad_order);
    m->grad_order = malloc((size_t)(m->n_params ? m->n_params : 1) * sizeof(int));
    SG_CHECK(init && m->grad_order, "out of host memory");
    m->n_grad_order = 0;
    init[m->t_out] = 1;
    if (m->t_aux >= 0) init[m->t_aux] = 1;
    /* in the order backward runs: a fused BN's backward at its join */
    for (int li = m->n_l - 1; li >= 0; li--) {
        sg_layer *l = &m->l[li];
        if (l->join >= 0 || !m->t[l->out].req_grad) continue;
        grad_flags_of(m, l, init);
        if (l->fused_bn >= 0) {
            sg_layer *b = &m->l[l->fused_bn];
            if (m->t[b->out].req_grad) grad_flags_of(m, b, init);
        }
    }
    free(init);
}

int sg_model_grad_order(const sg_model *m, int *out, int cap) {
    int n = m->n_grad_order < cap ? m->n_grad_order : cap;
    memcpy(out, m->grad_order, (size_t)n * sizeof(int));
    return n;
}

/* Forgets the plan; the arena itself is freed too unless keep_arena (a new
 * plan is about to be laid out and may fit in it). */
static void release_plan(sg_model *m, int keep_arena) {
    /* recorded graphs point into the old plan's tensors */
    sg_model_graphs_drop(m);
    m->plan_gen++;
    if (!keep_arena) {
        if (m->arena) m->be->ops->free(m->be, m->arena);
        m->arena = NULL;
        m->arena_cap = 0;
    }
    m->arena_bytes = 0;
    free(m->counts);
    m->counts = NULL;
    m->planned = 0;
    m->fwd_train = -1;
}

void sg_model_release_plan(sg_model *m) { release_plan(m, 0); }

/* ---- interval placement ---- */
typedef struct item {
    size_t bytes, off;
    int start, end; /* inclusive time steps */
    size_t *dst;    /* where to store the offset */
} item;

static int cmp_size_desc(const void *a, const void *b) {
    const item *x = a, *y = b;
    if (x->bytes != y->bytes) return x->bytes < y->bytes ? 1 : -1;
    return x->start - y->start;
}

static int cmp_off(const void *a, const void *b) {
    const item *const *x = a, *const *y = b;
    return (*x)->off < (*y)->off ? -1 : (*x)->off > (*y)->off;
}

/* Places items; returns the total bytes needed. */
static size_t place(item *it, int n) {
    qsort(it, (size_t)n, sizeof *it, cmp_size_desc);
    item **live = malloc((size_t)(n ? n : 1) * sizeof *live);
    SG_CHECK(live, "out of host memory");
    size_t total = 0;
    for (int i = 0; i < n; i++) {
        int nl = 0;
        for (int j = 0; j < i; j++)
            if (it[j].start <= it[i].end && it[i].start <= it[j].end) live[nl++] = &it[j];
        qsort(live, (size_t)nl, sizeof *live, cmp_off);
        size_t off = 0;
        for (int j = 0; j < nl; j++) {
            if (live[j]->off >= off + it[i].bytes) break;
            size_t e = live[j]->off + live[j]->bytes;
            if (e > off) off = e;
        }
        it[i].off = off;
        if (off + it[i].bytes > total) total = off + it[i].bytes;
    }
    free(live);
    return total;
}

/* Storage of every activation (sg_tensor.dt). Under train.precision bf16
 * with storage on (act_bf16 == 1) three kinds of tensors are stored as
 * bf16 (backend.h, the *_dt ops and the fused join's res_dt / y_dt):
 *  - a conv output without bias read by batch norm alone: a bf16 conv's
 *    result is a bf16 value already (a bias add in float32 would not be);
 *  - a BN+ReLU output read by convolutions alone, or by concats read by
 *    convolutions alone (ASPP's branches; the concat is bf16 then too):
 *    every reader rounds it to bf16 first, and the ReLU mask of the backward
 *    is recomputed from the BN input (bn_bwd_*_dt with y NULL) instead of
 *    read from it;
 *  - a fused residual join's output (relu(BN(x) + identity), the end of a
 *    bottleneck) read only by convolutions, the global average pool (ASPP's
 *    pooling branch) and as the identity of fused joins: the residual
 *    stream, which AMP keeps in bf16 too. This one is a
 *    rounding point of bf16 training (t.rnd): under train.precision bf16
 *    the join rounds its output to bf16 whether or not it is stored so (the
 *    test aid act_bf16 == 2: float32 storage, SG_ACT_F32R), so storage
 *    changes memory, never a result. Its convolution readers round it
 *    anyway; the next join adds the rounded value, as under AMP.
 * Everything else (the input, logits, non-fused adds and their inputs,
 * pooling, resize, concat, dropout, the gate layers L_ADD..L_CHAN_SCALE and
 * their inputs, every gradient) stays float32.
 * act_bf16: 0 float32 precision; 1 bf16 with storage; 2 bf16, storage off. */
static void act_storage(const sg_model *m, sg_tensor *t, const sg_layer *l, int act_bf16) {
    for (int i = 0; i < m->n_t; i++) t[i].dt = SG_ACT_F32, t[i].rnd = 0;
    if (!act_bf16 || m->n_t <= 0) return;
    /* readers[i]: 0 none yet, else the reader layers' common type + 1, or
     * -1 when readers differ in type; stream[i]: every reader is a conv or
     * reads it as a fused join's identity */
    int *readers = calloc((size_t)m->n_t, sizeof(int));
    char *stream = malloc((size_t)m->n_t);
    SG_CHECK(readers && stream, "out of host memory");
    memset(stream, 1, (size_t)m->n_t);
    for (int li = 0; li < m->n_l; li++)
        for (int k = 0; k < l[li].n_in; k++) {
            int ti = l[li].in[k], ty = l[li].type + 1;
            readers[ti] = readers[ti] == 0 || readers[ti] == ty ? ty : -1;
            int identity = l[li].type == L_ADD_RELU && l[li].fused_bn >= 0 &&
                           l[l[li].fused_bn].out != ti;
            if (l[li].type != L_CONV && l[li].type != L_AVGPOOL && !identity) stream[ti] = 0;
        }
    /* a concat read by convolutions alone (ASPP's): bf16 like a conv input;
     * then its BN+ReLU sources are read only by what rounds them anyway */
    char *cat16 = calloc((size_t)m->n_t, 1), *to16 = calloc((size_t)m->n_t, 1);
    SG_CHECK(cat16 && to16, "out of host memory");
    for (int i = 1; i < m->n_t; i++)
        if (t[i].producer >= 0 && l[t[i].producer].type == L_CONCAT && readers[i] == L_CONV + 1 &&
            i != m->t_out && i != m->t_aux)
            cat16[i] = 1;
    memset(to16, 1, (size_t)m->n_t);
    for (int li = 0; li < m->n_l; li++)
        for (int k = 0; k < l[li].n_in; k++) {
            int ti = l[li].in[k];
            if (l[li].type != L_CONV && !(l[li].type == L_CONCAT && cat16[l[li].out])) to16[ti] = 0;
        }
    for (int i = 1; i < m->n_t; i++) {
        if (i == m->t_out || i == m->t_aux || t[i].producer < 0) continue;
        const sg_layer *p = &l[t[i].producer];
        int exact = (p->type == L_CONV && p->b_param < 0 && readers[i] == L_BN + 1) ||
                    (p->type == L_BN && p->relu && readers[i] != 0 && to16[i]) || cat16[i];
        int join = p->type == L_ADD_RELU && p->fused_bn >= 0 && readers[i] != 0 && stream[i];
        if (join) t[i].rnd = 1;
        if ((exact || join) && act_bf16 == 1) t[i].dt = SG_ACT_BF16;
    }
    free(cat16);
    free(to16);
    free(stream);
    free(readers);
}

int sg_tensor_act_esize(const sg_tensor *t) {
    return t->dt == SG_ACT_BF16 ? (int)sizeof(uint16_t) : (int)sizeof(float);
}

/* The gradient's storage, grad_storage's decision (sg_tensor.gdt). */
int sg_tensor_grad_esize(const sg_tensor *t) {
    return t->gdt == SG_ACT_BF16 ? (int)sizeof(uint16_t) : (int)sizeof(float);
}

/* Storage of every gradient (sg_tensor.gdt), the mirror of act_storage
 * and of what PyTorch AMP keeps: a bf16 convolution's backward-data
 * produces a bf16 gradient and reads its dy as bf16, and batch norm (run in
 * float32 under autocast) returns a bf16 gradient for a bf16 input. A
 * gradient is stored as bf16 (grad_bf16: the plan stores activations in
 * bf16) when its tensor is itself stored in bf16, is read by exactly one
 * layer (so the gradient is written once: a sum of several readers'
 * gradients, the residual stream's among them, stays float32), and both
 * ends of its backward are a convolution and a batch norm:
 *  (a) a conv output (no bias) read by BN alone: BN backward's elementwise
 *      pass rounds dx to bf16 once (RNE) where it stores it, and the conv's
 *      two backward passes read that dy as it is - the value they would
 *      round a float32 dy to, so the same results;
 *  (b) a BN+ReLU output read by one conv alone: the conv's backward-data
 *      stores its result (a bf16 value under bf16 convolutions: exact), and
 *      BN backward (mask, reduce, elementwise) reads it widened.
 * So a bf16 gradient changes memory and traffic, never a result, as bf16
 * activations do. The final outputs' gradients (the loss writes them) and
 * every other gradient stay float32. */
static void grad_storage(const sg_model *m, sg_tensor *t, const sg_layer *l, int grad_bf16) {
    for (int i = 0; i < m->n_t; i++) t[i].gdt = SG_ACT_F32;
    if (!grad_bf16 || m->n_t <= 0) return;
    int *nread = calloc((size_t)m->n_t, sizeof(int)),
        *reader = malloc((size_t)m->n_t * sizeof(int));
    SG_CHECK(nread && reader, "out of host memory");
    for (int li = 0; li < m->n_l; li++)
        for (int k = 0; k < l[li].n_in; k++) {
            nread[l[li].in[k]]++;
            reader[l[li].in[k]] = li;
        }
    for (int i = 1; i < m->n_t; i++) {
        if (i == m->t_out || i == m->t_aux || t[i].producer < 0 || nread[i] != 1 ||
            t[i].dt != SG_ACT_BF16)
            continue;
        const sg_layer *p = &l[t[i].producer], *r = &l[reader[i]];
        int conv_bn = p->type == L_CONV && p->b_param < 0 && r->type == L_BN;
        int bn_conv = p->type == L_BN && p->relu && p->join < 0 && r->type == L_CONV;
        if (conv_bn || bn_conv) t[i].gdt = SG_ACT_BF16;
    }
    free(reader);
    free(nread);
}

/* Whether plans of m store activations in bf16 (act_storage): under
 * train.precision bf16 (the backend's precision), unless the test aid
 * SG_BF16_STORAGE=0 turns it off (=1: on, the default; =act: activations
 * only, gradients float32: *grad_bf16 0, else as *act_bf16). Returns SG_OK, or
 * SG_ERR_CONFIG after logging a malformed SG_BF16_STORAGE. */
static sg_status act_bf16_of(const sg_model *m, int *act_bf16, int *grad_bf16) {
    sg_backend_info bi;
    sg_backend_get_info(m->be, &bi);
    *act_bf16 = strcmp(bi.precision, "bf16") == 0; /* act_storage's 0 / 1 / 2 */
    *grad_bf16 = *act_bf16;
    const char *env = getenv("SG_BF16_STORAGE");
    if (!env) return SG_OK;
    if (strcmp(env, "0") != 0 && strcmp(env, "1") != 0 && strcmp(env, "act") != 0) {
        SG_ERROR("environment SG_BF16_STORAGE='%s': expected 0 (activations and gradients in "
                 "float32 under train.precision bf16: a test aid), act (bf16 activations, "
                 "float32 gradients: a test aid) or 1 (bf16 storage where exact, the default); "
                 "unset it",
                 env);
        return SG_ERR_CONFIG;
    }
    if (env[0] == '0' && *act_bf16) *act_bf16 = 2;
    if (env[0] != '1') *grad_bf16 = 0;
    return SG_OK;
}

typedef struct plan_offs {
    size_t stats, parts, red, redg, zero, c2, total;
    int max_c;
} plan_offs;

/* Computes shapes and the arena layout for input [n,3,h,w] into t[] and l[]
 * (the model's own arrays, or copies). Returns SG_OK or SG_ERR_CONFIG
 * (logged). */
static sg_status layout(const sg_model *m, sg_tensor *t, sg_layer *l, int n, int h, int w, int mode,
                        int world, int act_bf16, int grad_bf16, plan_offs *po) {
    if (n < 1 || h < 1 || w < 1) {
        SG_ERROR("model: cannot plan for input [%d, 3, %d, %d]", n, h, w);
        return SG_ERR_CONFIG;
    }
    sg_status st = compute_shapes(m, t, l, n, h, w);
    if (st != SG_OK) return st;
    int train = mode == 1;
    int L = m->n_l;
    for (int i = 0; i < m->n_t; i++) t[i].last_consumer = -1;
    for (int li = 0; li < L; li++)
        for (int i = 0; i < l[li].n_in; i++) t[l[li].in[i]].last_consumer = li;
    /* a fused BN reads its input at its join (bn_add_relu_fwd) */
    for (int li = 0; li < L; li++)
        if (l[li].type == L_BN && l[li].join > t[l[li].in[0]].last_consumer)
            t[l[li].in[0]].last_consumer = l[li].join;
    act_storage(m, t, l, act_bf16);
    grad_storage(m, t, l, grad_bf16 && act_bf16 == 1);

    /* persistent region: per-layer state live from forward to backward */
    size_t off = 0;
    po->max_c = 1;
    for (int li = 0; li < L; li++) {
        sg_layer *ly = &l[li];
        const sg_tensor *y = &t[ly->out];
        if (ly->type == L_BN) {
            if (y->c > po->max_c) po->max_c = y->c;
            ly->mean_off = off;
            off += align_up((size_t)y->c * sizeof(float));
            ly->invstd_off = off;
            off += align_up((size_t)y->c * sizeof(float));
        } else if (ly->type == L_MAXPOOL) {
            ly->idx_off = off;
            off += align_up(y->count * sizeof(int32_t));
        } else if (ly->type == L_DROPOUT && train) {
            ly->mask_off = off;
            off += align_up(y->count);
        }
    }
    po->c2 = align_up((size_t)2 * po->max_c * sizeof(float));
    po->stats = off;
    off += po->c2;
    po->parts = off;
    off += (size_t)world * po->c2;
    po->red = off;
    off += po->c2;
    po->redg = off;
    off += po->c2;
    po->zero = off;
    off += po->c2;
    size_t base = off;

    /* Which activations backward reads: a conv's input (weight gradient), a
     * BN's input and, with a fused ReLU, its output (the mask), a residual
     * add's output (the mask), the image and the logits. The others (e.g. a
     * BN output without ReLU, read only by the residual add) die after their
     * last forward reader even in a training plan. */
    char *keep = calloc((size_t)m->n_t, 1);
    SG_CHECK(keep, "out of host memory");
    keep[0] = keep[m->t_out] = 1;
    if (m->t_aux >= 0) keep[m->t_aux] = 1;
    for (int li = 0; li < L; li++) {
        const sg_layer *ly = &l[li];
        if (ly->type == L_CONV || ly->type == L_BN) keep[ly->in[0]] = 1;
        if ((ly->type == L_BN && ly->relu) || ly->type == L_ADD_RELU) keep[ly->out] = 1;
        /* the gates: hardswish / hardsigmoid read x, relu / sigmoid y,
         * channel scaling both inputs */
        if (ly->type == L_HARDSWISH || ly->type == L_HARDSIGMOID) keep[ly->in[0]] = 1;
        if (ly->type == L_RELU || ly->type == L_SIGMOID) keep[ly->out] = 1;
        if (ly->type == L_CHAN_SCALE) keep[ly->in[0]] = keep[ly->in[1]] = 1;
    }

    /* activations and gradients by liveness: forward step li, backward
     * step 2L-1-li. */
    item *it = calloc((size_t)2 * m->n_t, sizeof *it);
    SG_CHECK(it, "out of host memory");
    int ni = 0;
    for (int i = 0; i < m->n_t; i++) {
        sg_tensor *ti = &t[i];
        ti->val_off = ti->grad_off = SIZE_MAX;
        int final = i == m->t_out || i == m->t_aux;
        /* a fused BN's output is never stored (its join writes relu(BN(x) +
         * identity) directly), nor its gradient: no memory */
        int unused = ti->producer >= 0 && l[ti->producer].type == L_BN && l[ti->producer].join >= 0;
        item *v = &it[ni++];
        v->bytes = unused ? 0 : align_up(ti->count * (size_t)sg_tensor_act_esize(ti));
        v->dst = &ti->val_off;
        if (train && keep[i]) {
            v->start = 0;
            v->end = 2 * L;
        } else if (train) {
            v->start = ti->producer;
            v->end = ti->last_consumer;
        } else {
            /* the input stays valid: callers may run several forwards on it */
            v->start = ti->producer < 0 ? 0 : ti->producer;
            v->end = final || i == 0 || ti->last_consumer < 0 ? L : ti->last_consumer;
        }
        if (train && i != 0) {
            item *g = &it[ni++];
            g->bytes = unused ? 0 : align_up(ti->count * (size_t)sg_tensor_grad_esize(ti));
            g->dst = &ti->grad_off;
            g->start = final ? 0 : 2 * L - 1 - ti->last_consumer;
            g->end = 2 * L - 1 - ti->producer;
            SG_CHECK(final || ti->last_consumer >= 0, "model: tensor %d has no consumer", i);
        }
    }
    free(keep);
    po->total = base + place(it, ni);
    for (int i = 0; i < ni; i++) *it[i].dst = base + it[i].off;
    free(it);
    return SG_OK;
}

static int hooks_world(const sg_model *m) {
    return (m->has_hooks && m->hooks.bn_gather && m->hooks.world > 1) ? m->hooks.world : 1;
}

/* Lays out a plan for [n,3,h,w] on copies of the model's tensors and layers
 * without touching the model; *t_out is the copy of the tensors (caller
 * frees), NULL when the shape cannot be planned. Returns po->total or 0. */
static size_t dry_layout(const sg_model *m, int n, int h, int w, int train, sg_tensor **t_out) {
    sg_tensor *t = malloc((size_t)m->n_t * sizeof *t);
    sg_layer *l = malloc((size_t)m->n_l * sizeof *l);
    SG_CHECK(t && l, "out of host memory");
    memcpy(t, m->t, (size_t)m->n_t * sizeof *t);
    memcpy(l, m->l, (size_t)m->n_l * sizeof *l);
    plan_offs po;
    int act_bf16 = 0, grad_bf16 = 0;
    int ok = act_bf16_of(m, &act_bf16, &grad_bf16) == SG_OK &&
             layout(m, t, l, n, h, w, train ? 1 : 2, hooks_world(m), act_bf16, grad_bf16, &po) ==
                 SG_OK;
    free(l);
    if (!ok) {
        free(t);
        t = NULL;
    }
    *t_out = t;
    return ok ? po.total : 0;
}

size_t sg_model_plan_bytes(const sg_model *m, int n, int h, int w, int train) {
    sg_tensor *t;
    size_t total = dry_layout(m, n, h, w, train, &t);
    free(t);
    return total;
}

size_t sg_model_plan_bf16_saving(const sg_model *m, int n, int h, int w, int train) {
    sg_tensor *t;
    size_t saved = 0;
    dry_layout(m, n, h, w, train, &t);
    for (int i = 0; t && i < m->n_t; i++)
        if (t[i].dt == SG_ACT_BF16)
            saved += align_up(t[i].count * sizeof(float)) - align_up(t[i].count * sizeof(uint16_t));
    free(t);
    return saved;
}

/* 1 if tensor ti is 1x1 because of the global average pool (the ASPP
 * pooling branch): its size does not grow with the input. */
static int after_global_pool(const sg_model *m, int ti) {
    for (int p = m->t[ti].producer; p >= 0; p = m->t[m->l[p].in[0]].producer) {
        if (m->l[p].type == L_AVGPOOL) return 1;
        if (m->l[p].type == L_RESIZE) return 0;
    }
    return 0;
}

/* Training plan (shapes filled for batch n): a BN layer that normalises with
 * batch statistics needs more than one value per channel - with one, x - mean
 * is 0 and the variance undefined (PyTorch's BatchNorm refuses it too).
 * world: ranks whose values SyncBN pools (1 without SyncBN). */
static sg_status check_bn_values(const sg_model *m, int n, int h, int w, int world) {
    for (int li = 0; li < m->n_l; li++) {
        const sg_layer *l = &m->l[li];
        if (l->type != L_BN || l->frozen_stats) continue;
        const sg_tensor *y = &m->t[l->out];
        long long values = (long long)n * y->h * y->w * world;
        if (values > 1) continue;
        char name[sizeof m->params[0].name];
        snprintf(name, sizeof name, "%s", m->params[l->bn_p[0]].name);
        char *dot = strrchr(name, '.'); /* "...bn1.weight" -> "...bn1" */
        if (dot) *dot = '\0';
        int pooled = after_global_pool(m, l->out);
        SG_ERROR("model: batch norm %s would normalise %lld value per channel in training: its "
                 "output is [%d, %d, %d, %d] for the input [%d, 3, %d, %d]%s, and no SyncBN "
                 "pools other ranks' values. Use train.batch_size >= 2 (images per rank and "
                 "micro-batch)%s, or model.sync_bn: true with 2 or more ranks "
                 "(--nproc-per-node), or train.freeze_bn_stats: true (running statistics)",
                 name, values, n, y->c, y->h, y->w, n, h, w,
                 pooled ? " (after the ASPP global average pool: 1x1 at any crop size)" : "",
                 pooled ? "" : ", or a larger data.crop_size");
        return SG_ERR_CONFIG;
    }
    return SG_OK;
}

static sg_status do_plan(sg_model *m, int n, int h, int w, int mode) {
    if (m->planned == mode && m->n == n && m->h == h && m->w == w) return SG_OK;
    /* The arena is kept while the new plan fits in it: evaluation with
     * eval.scales re-plans for every scale of every image, and in-training
     * evaluation switches between the training and inference plans, so this
     * saves a free + allocation (cudaFree synchronises the device) each time.
     * A plan that does not fit frees the old arena before allocating, so the
     * peak is what it was. */
    release_plan(m, 1);
    const sg_ops *ops = m->be->ops;
    int train = mode == 1;
    int world = hooks_world(m);
    plan_offs po;
    int act_bf16 = 0, grad_bf16 = 0;
    sg_status st = act_bf16_of(m, &act_bf16, &grad_bf16);
    if (st == SG_OK) st = layout(m, m->t, m->l, n, h, w, mode, world, act_bf16, grad_bf16, &po);
    if (st == SG_OK && train) st = check_bn_values(m, n, h, w, world);
    if (st != SG_OK) {
        release_plan(m, 0);
        return st;
    }
    m->max_c = po.max_c;
    m->act_bf16 = act_bf16 == 1;
    if (m->arena && po.total <= m->arena_cap) {
        /* the same contents a fresh allocation has (ops->alloc zeroes) */
        ops->zero(m->be, m->arena, po.total);
    } else {
        release_plan(m, 0);
        m->arena = ops->alloc(m->be, po.total);
        m->arena_cap = po.total;
    }
    m->arena_bytes = po.total;
    char *a = m->arena;
    for (int i = 0; i < m->n_t; i++) {
        sg_tensor *t = &m->t[i];
        t->val = (float *)(a + t->val_off);
        t->grad = t->grad_off == SIZE_MAX ? NULL : (float *)(a + t->grad_off);
    }
    for (int li = 0; li < m->n_l; li++) {
        sg_layer *l = &m->l[li];
        if (l->type == L_BN) {
            l->mean = (float *)(a + l->mean_off);
            l->invstd = (float *)(a + l->invstd_off);
        } else if (l->type == L_MAXPOOL) {
            l->idx = (int32_t *)(a + l->idx_off);
        } else if (l->type == L_DROPOUT) {
            l->mask = train ? (uint8_t *)(a + l->mask_off) : NULL;
        }
    }
    m->stats = (float *)(a + po.stats);
    m->parts = (float *)(a + po.parts);
    m->red = (float *)(a + po.red);
    m->redg = (float *)(a + po.redg);
    m->zero_red = (float *)(a + po.zero);
    ops->zero(m->be, m->zero_red, po.c2);
    m->counts = calloc((size_t)world, sizeof(int64_t));
    SG_CHECK(m->counts, "out of host memory");
    m->planned_world = world;

    if (ops->conv_prepare)
        for (int li = 0; li < m->n_l; li++)
            if (m->l[li].type == L_CONV) ops->conv_prepare(m->be, &m->l[li].desc);
    m->planned = mode;
    m->n = n;
    m->h = h;
    m->w = w;
    SG_DEBUG("model: planned %s for [%d,3,%d,%d]: arena %.1f MiB%s",
             train ? "training" : "inference", n, h, w, (double)po.total / (1 << 20),
             act_bf16 == 1 ? " (bf16 activation storage)" : "");
    return SG_OK;
}

sg_status sg_model_plan(sg_model *m, int n, int h, int w) { return do_plan(m, n, h, w, 1); }
sg_status sg_model_plan_infer(sg_model *m, int n, int h, int w) { return do_plan(m, n, h, w, 2); }
size_t sg_model_activation_bytes(const sg_model *m) { return m->arena_bytes; }
size_t sg_model_arena_held(const sg_model *m) { return m->arena ? m->arena_cap : 0; }

float *sg_model_input(sg_model *m) { return m->planned ? m->t[0].val : NULL; }
float *sg_model_out(sg_model *m) { return m->planned ? m->t[m->t_out].val : NULL; }
float *sg_model_aux(sg_model *m) { return m->planned && m->t_aux >= 0 ? m->t[m->t_aux].val : NULL; }
float *sg_model_dout(sg_model *m) { return m->planned == 1 ? m->t[m->t_out].grad : NULL; }
float *sg_model_daux(sg_model *m) {
    return m->planned == 1 && m->t_aux >= 0 ? m->t[m->t_aux].grad : NULL;
}

void sg_model_set_hooks(sg_model *m, const sg_model_hooks *h) {
    if (h) {
        m->hooks = *h;
        m->has_hooks = 1;
    } else {
        memset(&m->hooks, 0, sizeof m->hooks);
        m->has_hooks = 0;
    }
    m->planned = 0; /* parts buffer size depends on world: re-plan */
}
