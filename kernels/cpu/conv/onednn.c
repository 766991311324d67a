/* kernels/cpu/conv/onednn.c - convolutions through oneDNN's C API (2.6):
 * the primitive cache and the rows onednn-wino, onednn-cl, onednn-plain
 * and onednn-blocked of the path table (paths.c). Any stride, padding,
 * dilation and groups (grouped / depthwise: oneDNN's goihw weights,
 * PyTorch's [k, c/g, r, s] in memory).
 *
 * Owns the primitive cache: one entry per (sg_conv_desc, pass, layout,
 * activation layout, precision, storage types) holding the primitive, its
 * memory objects, the reorders between the user's plain layout (nchw /
 * nhwc activations, oihw weights) and the layout the primitive chose, and
 * the scratchpad size. Entries are built on first use or by conv_prepare;
 * in the steady state a pass only sets data handles and executes. Buffers
 * shared by all entries (blocked copies of the three tensors, the
 * accumulate scratch and the oneDNN scratchpad) grow when a new entry needs
 * more, never per call. accumulate = 1: the result goes to a scratch
 * buffer that is then added.
 *
 * Layouts (LAYOUT_*, conv_internal.h): the rows' layout rule is in
 * onednn_rules.c. NHWC activations are given to oneDNN as stored (the nhwc
 * tag): its channels-last kernels run on them with no activation reorder;
 * only the weights go to the layout the primitive picks.
 *
 * Native bf16: entries whose primitive takes bf16 src/weights/dst (oneDNN's
 * AVX512-BF16 / AMX kernels, fp32 accumulation) in the layout the primitive
 * chooses; the reorders from and to the plain float32 tensors do the
 * rounding (round-to-nearest-even). A geometry oneDNN has no bf16 kernel
 * for gets an entry without a primitive: the row's can fails and the
 * emulation (paths.c) runs it. An entry may take its x (and, forward, its
 * y) as bf16 bits in plain nchw or nhwc (bf16 activation storage): the
 * reorders are then pure layout changes.
 *
 * Weight copies (native bf16): the converted weights of the forward and
 * backward-data primitives (brgconv's blocked layouts packed by pack.c,
 * others by oneDNN's reorder) are kept per weight tensor in the backend's
 * weight cache (kernels/weight_cache.h) and converted again only after the
 * weights were written; entries whose weight layouts are equal share one
 * copy (weight_tag).
 *
 * Dead taps: kernel rows / columns that only ever read padding
 * (sg_conv_live_taps) are trimmed: the primitive runs the smaller kernel
 * on a gathered copy of the live weights (backward-weights scatters back
 * and writes zeros for the dead taps), the same result for less work.
 */
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/conv/conv_internal.h"

static const char *op_names[] = {"fwd", "bwd_data", "bwd_weight"};
static const char *layout_names[] = {"plain", "blocked", "channels-last", "winograd"};

/* One tensor argument of a primitive. */
typedef struct conv_arg {
    int arg; /* DNNL_ARG_* of the convolution */
    int is_output;
    dnnl_memory_t user;       /* plain layout, handle set per call */
    dnnl_memory_t prim;       /* primitive's layout (== user when no reorder) */
    dnnl_primitive_t reorder; /* user->prim (input) or prim->user (output), or NULL */
    int pack;                 /* float32 weights into a bf16 layout sg_conv_pack_bf16
                                 writes itself, faster than the reorder (pmd) */
    dnnl_memory_desc_t pmd;   /* the primitive's layout, with pack */
    size_t prim_bytes;        /* size of the primitive-layout copy (reorder only) */
    size_t user_count;        /* floats in the plain tensor */
} conv_arg;

struct conv_entry {
    sg_conv_desc d;
    int op, layout;
    int act;            /* SG_LAYOUT_* of the activations (the backend's be->layout) */
    int bf16;           /* native bf16 primitive (prim == NULL: oneDNN has none
                           for this geometry; the emulation runs it) */
    int trimmed;        /* kernel reduced to the live taps below */
    int i0, j0, r2, s2; /* first live tap row/col, live kernel size */
    uint64_t wtag;      /* native bf16 fwd / bwd_data: the weight cache's tag
                           for the layout its weights take (weight_tag) */
    int xdt, ydt;       /* native bf16 only: the caller's x (fwd, bwd_weight) and
                           y (fwd) are stored as bf16 bits (SG_ACT_BF16): the
                           user memory is bf16, its reorder a pure layout change
                           (bf16 activation storage, sg_cpu_conv_native_dt) */
    dnnl_primitive_desc_t pd;
    dnnl_primitive_t prim;
    conv_arg a[3];
    dnnl_memory_t scratch; /* NULL when the primitive needs none */
    size_t scratch_bytes;
    struct conv_entry *next;
};

static void free_arg(conv_arg *a) {
    if (a->reorder) DNNL_CHECK(dnnl_primitive_destroy(a->reorder));
    if (a->prim && a->prim != a->user) DNNL_CHECK(dnnl_memory_destroy(a->prim));
    if (a->user) DNNL_CHECK(dnnl_memory_destroy(a->user));
}

static void plain_md(dnnl_memory_desc_t *md, int a, int b, int c, int d, dnnl_data_type_t dt,
                     int tag) {
    dnnl_dims_t dims = {a, b, c, d};
    DNNL_CHECK(dnnl_memory_desc_init_by_tag(md, 4, dims, dt, tag));
}

/* The weights of d with a kr x ks kernel: oihw [k, c, kr, ks] ungrouped;
 * grouped, oneDNN's goihw [g, k/g, c/g, kr, ks], which is PyTorch's
 * [k, c/g, kr, ks] in memory. fmt W_ANY: the primitive picks the layout;
 * W_HWIO, hwio / hwigo (the plain weights oneDNN's GEMM-based convolution
 * takes with nhwc activations: with oihw it has only a reference kernel). */
enum { W_OIHW = 0, W_ANY = 1, W_HWIO = 2 };
static void weight_md(dnnl_memory_desc_t *md, const sg_conv_desc *d, int kr, int ks,
                      dnnl_data_type_t dt, int fmt) {
    int g = sg_conv_groups(d);
    int any = fmt == W_ANY, hwio = fmt == W_HWIO;
    if (g == 1) {
        plain_md(md, d->k, d->c, kr, ks, dt,
                 any    ? dnnl_format_tag_any
                 : hwio ? dnnl_hwio
                        : dnnl_oihw);
        return;
    }
    dnnl_dims_t dims = {g, d->k / g, d->c / g, kr, ks};
    dnnl_format_tag_t tag = any ? dnnl_format_tag_any : hwio ? dnnl_hwigo : dnnl_goihw;
    DNNL_CHECK(dnnl_memory_desc_init_by_tag(md, 5, dims, dt, tag));
}

/* A float32 [k][c][r][s] tensor, dense: what pack.c reads. */
static int dense_oihw_f32(const dnnl_memory_desc_t *md) {
    const dnnl_blocking_desc_t *b = &md->format_desc.blocking;
    if (md->ndims != 4 || md->data_type != dnnl_f32 || md->format_kind != dnnl_blocked) return 0;
    if (md->offset0 != 0 || b->inner_nblks != 0) return 0;
    const dnnl_dim_t *d = md->dims;
    return b->strides[3] == 1 && b->strides[2] == d[3] && b->strides[1] == d[2] * d[3] &&
           b->strides[0] == d[1] * d[2] * d[3];
}

/* Builds one argument: user memory in plain layout, and if the primitive
 * chose another layout, a memory for it plus the reorder between them
 * (float32 weights into the bf16 layouts of pack.c: packed there
 * instead). */
static void build_arg(sg_cpu_conv_cache *cc, conv_entry *e, int slot, int arg, int is_output,
                      const dnnl_memory_desc_t *user_md, dnnl_query_t query) {
    conv_arg *a = &e->a[slot];
    a->arg = arg;
    a->is_output = is_output;
    a->user_count = dnnl_memory_desc_get_size(user_md) / sizeof(float);
    const dnnl_memory_desc_t *pmd = dnnl_primitive_desc_query_md(e->pd, query, 0);
    if (!pmd) SG_FATAL("oneDNN: primitive has no memory desc for argument %d (a bug)", arg);
    DNNL_CHECK(dnnl_memory_create(&a->user, user_md, cc->eng, DNNL_MEMORY_NONE));
    if (dnnl_memory_desc_equal(user_md, pmd)) {
        a->prim = a->user;
        return;
    }
    a->prim_bytes = dnnl_memory_desc_get_size(pmd);
    DNNL_CHECK(dnnl_memory_create(&a->prim, pmd, cc->eng, DNNL_MEMORY_NONE));
    dnnl_primitive_desc_t rpd;
    if (is_output)
        DNNL_CHECK(dnnl_reorder_primitive_desc_create(&rpd, pmd, cc->eng, user_md, cc->eng, NULL));
    else DNNL_CHECK(dnnl_reorder_primitive_desc_create(&rpd, user_md, cc->eng, pmd, cc->eng, NULL));
    DNNL_CHECK(dnnl_primitive_create(&a->reorder, rpd));
    DNNL_CHECK(dnnl_primitive_desc_destroy(rpd));
    if (arg == DNNL_ARG_WEIGHTS && !is_output && dense_oihw_f32(user_md) &&
        sg_conv_pack_bf16_ok(pmd) && !cc->pack_off) {
        a->pack = 1;
        a->pmd = *pmd;
    }
    /* ws[slot] is grown when the entry first runs (run_entry): conv_prepare
     * builds the float32-input entry of every bf16 conv, which a conv fed
     * bf16 activations never runs, and the weights' slot goes unused where
     * the weight cache holds the copy */
}

/* Creates a primitive descriptor; for a bf16 entry oneDNN may have no
 * kernel for the geometry (returns 0 then: the caller falls back to the
 * emulation), anything else that fails is fatal. */
static int create_pd(sg_cpu_conv_cache *cc, const conv_entry *e, dnnl_primitive_desc_t *pd,
                     const void *desc, const_dnnl_primitive_attr_t attr,
                     const_dnnl_primitive_desc_t hint) {
    dnnl_status_t st = dnnl_primitive_desc_create(pd, desc, attr, cc->eng, hint);
    if (st == dnnl_unimplemented && e->bf16) return 0;
    DNNL_CHECK(st);
    return 1;
}

/* The weight cache's tag (kernels/weight_cache.h) for the weights of a
 * native bf16 entry: one per distinct weight layout oneDNN picked (so a
 * forward and a backward-data primitive wanting the same layout share one
 * bf16 copy) and per first live tap (a trimmed kernel's copy holds only the
 * live taps). Tag 0 is the emulation's rounded plain copy. */
static uint64_t weight_tag(sg_cpu_conv_cache *cc, const conv_entry *e) {
    const dnnl_memory_desc_t *md = dnnl_primitive_desc_query_md(e->pd, dnnl_query_weights_md, 0);
    int id = 0;
    while (id < cc->n_wmds && !dnnl_memory_desc_equal(&cc->wmds[id], md)) id++;
    if (id == cc->n_wmds) {
        if (cc->n_wmds == cc->cap_wmds) {
            int cap = cc->cap_wmds ? 2 * cc->cap_wmds : 32;
            dnnl_memory_desc_t *n = realloc(cc->wmds, (size_t)cap * sizeof *n);
            if (!n) SG_FATAL("CPU backend: out of memory in the conv cache");
            cc->wmds = n;
            cc->cap_wmds = cap;
        }
        cc->wmds[cc->n_wmds++] = *md;
    }
    return 1 + ((uint64_t)id << 32) + ((uint64_t)(unsigned)e->i0 << 16) + (unsigned)e->j0;
}

/* e->pd for pass op with algorithm alg: the forward descriptor is the
 * primitive itself for OP_FWD, the hint for the backward ones. Returns 1,
 * 0 when a bf16 entry has no kernel (create_pd), or -1 when `optional` and
 * the library has no kernel of this algorithm (nothing kept); other
 * failures are fatal. */
static int make_pd(sg_cpu_conv_cache *cc, conv_entry *e, int op, dnnl_alg_kind_t alg,
                   const dnnl_memory_desc_t *xa, const dnnl_memory_desc_t *wa,
                   const dnnl_memory_desc_t *ya, const dnnl_dims_t strides, const dnnl_dims_t dil,
                   const dnnl_dims_t pad, const dnnl_dims_t pad_r, const_dnnl_primitive_attr_t attr,
                   int optional) {
    dnnl_convolution_desc_t fd, bd;
    DNNL_CHECK(dnnl_dilated_convolution_forward_desc_init(&fd, dnnl_forward_training, alg, xa, wa,
                                                          NULL, ya, strides, dil, pad, pad_r));
    dnnl_primitive_desc_t fpd = NULL;
    if (optional) {
        if (dnnl_primitive_desc_create(&fpd, &fd, attr, cc->eng, NULL) != dnnl_success) return -1;
    } else if (!create_pd(cc, e, &fpd, &fd, attr, NULL)) {
        return 0;
    }
    if (op == OP_FWD) {
        e->pd = fpd;
        return 1;
    }
    if (op == OP_BWD_DATA)
        DNNL_CHECK(dnnl_dilated_convolution_backward_data_desc_init(&bd, alg, xa, wa, ya, strides,
                                                                    dil, pad, pad_r));
    else
        DNNL_CHECK(dnnl_dilated_convolution_backward_weights_desc_init(&bd, alg, xa, wa, NULL, ya,
                                                                       strides, dil, pad, pad_r));
    int ok;
    if (optional) {
        ok = dnnl_primitive_desc_create(&e->pd, &bd, attr, cc->eng, fpd) == dnnl_success ? 1 : -1;
        if (ok < 0) e->pd = NULL;
    } else {
        ok = create_pd(cc, e, &e->pd, &bd, attr, fpd);
    }
    DNNL_CHECK(dnnl_primitive_desc_destroy(fpd));
    return ok;
}

static conv_entry *build_entry(sg_cpu_conv_cache *cc, const sg_conv_desc *d, int op, int layout,
                               int act, int bf16, int xdt, int ydt) {
    sg_conv_validate(d);
    conv_entry *e = calloc(1, sizeof *e);
    if (!e) SG_FATAL("CPU backend: out of memory in the conv cache");
    e->d = *d;
    e->op = op;
    e->layout = layout;
    e->act = act;
    e->bf16 = bf16;
    e->xdt = xdt;
    e->ydt = ydt;
    dnnl_data_type_t pdt = bf16 ? dnnl_bf16 : dnnl_f32; /* the primitive's tensors */

    /* Kernel rows/cols that only read padding are dropped (see top). */
    int kr = d->r, ks = d->s, pl_h = d->pad_h, pl_w = d->pad_w, pr_h = d->pad_h, pr_w = d->pad_w;
    int ti0 = 0, tr = d->r, tpr_h = 0, tj0 = 0, ts = d->s, tpr_w = 0;
    int nph =
        sg_conv_live_taps(d->h, d->oh, d->r, d->stride_h, d->pad_h, d->dil_h, &ti0, &tr, &tpr_h);
    int npw =
        sg_conv_live_taps(d->w, d->ow, d->s, d->stride_w, d->pad_w, d->dil_w, &tj0, &ts, &tpr_w);
    if (nph >= 0) kr = tr, pl_h = nph, pr_h = tpr_h, e->i0 = ti0, e->trimmed = 1;
    if (npw >= 0) ks = ts, pl_w = npw, pr_w = tpr_w, e->j0 = tj0, e->trimmed = 1;
    e->r2 = kr, e->s2 = ks;

    /* the user's tensors: activations as stored (nchw / nhwc), oihw weights */
    int tag = act == SG_LAYOUT_NHWC ? dnnl_nhwc : dnnl_nchw;
    dnnl_memory_desc_t x_md, w_md, y_md, xa, wa, ya;
    plain_md(&x_md, d->n, d->c, d->h, d->w, xdt == SG_ACT_BF16 ? dnnl_bf16 : dnnl_f32, tag);
    weight_md(&w_md, d, kr, ks, dnnl_f32, W_OIHW);
    plain_md(&y_md, d->n, d->k, d->oh, d->ow, ydt == SG_ACT_BF16 ? dnnl_bf16 : dnnl_f32, tag);
    /* the primitive's: see the LAYOUT_* enum */
    int any_act = layout == LAYOUT_BLOCKED || layout == LAYOUT_WINO;
    int wfmt = layout != LAYOUT_PLAIN ? W_ANY : act == SG_LAYOUT_NHWC ? W_HWIO : W_OIHW;
    plain_md(&xa, d->n, d->c, d->h, d->w, pdt, any_act ? dnnl_format_tag_any : tag);
    weight_md(&wa, d, kr, ks, pdt, wfmt);
    plain_md(&ya, d->n, d->k, d->oh, d->ow, pdt, any_act ? dnnl_format_tag_any : tag);

    dnnl_dims_t strides = {d->stride_h, d->stride_w};
    dnnl_dims_t dil = {d->dil_h - 1, d->dil_w - 1}; /* oneDNN counts extra gaps */
    dnnl_dims_t pad = {pl_h, pl_w}, pad_r = {pr_h, pr_w};

    dnnl_primitive_attr_t attr;
    DNNL_CHECK(dnnl_primitive_attr_create(&attr));
    DNNL_CHECK(dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user));

    /* LAYOUT_WINO asks for Winograd first (use_wino); where the library has
     * no such kernel for a pass (no AVX-512) that pass is direct on the
     * same blocked layout. */
    int ok = -1;
    if (layout == LAYOUT_WINO) {
        ok = make_pd(cc, e, op, dnnl_convolution_winograd, &xa, &wa, &ya, strides, dil, pad, pad_r,
                     attr, 1);
        if (ok < 0)
            SG_DEBUG("conv cache: no Winograd kernel for %s n%d c%d %dx%d k%d here: direct",
                     op_names[op], d->n, d->c, d->h, d->w, d->k);
    }
    if (ok < 0)
        ok = make_pd(cc, e, op, dnnl_convolution_direct, &xa, &wa, &ya, strides, dil, pad, pad_r,
                     attr, 0);
    DNNL_CHECK(dnnl_primitive_attr_destroy(attr));
    if (!ok) {
        /* no bf16 kernel here: this entry marks the geometry as emulated */
        SG_DEBUG("conv cache: %s n%d c%d %dx%d k%d %dx%d s%d p%d d%d: oneDNN has no bf16 "
                 "kernel; emulated",
                 op_names[op], d->n, d->c, d->h, d->w, d->k, d->r, d->s, d->stride_h, d->pad_h,
                 d->dil_h);
        e->next = cc->head;
        cc->head = e;
        return e;
    }
    DNNL_CHECK(dnnl_primitive_create(&e->prim, e->pd));

    if (op == OP_FWD) {
        build_arg(cc, e, 0, DNNL_ARG_SRC, 0, &x_md, dnnl_query_src_md);
        build_arg(cc, e, 1, DNNL_ARG_WEIGHTS, 0, &w_md, dnnl_query_weights_md);
        build_arg(cc, e, 2, DNNL_ARG_DST, 1, &y_md, dnnl_query_dst_md);
    } else if (op == OP_BWD_DATA) {
        build_arg(cc, e, 0, DNNL_ARG_DIFF_DST, 0, &y_md, dnnl_query_diff_dst_md);
        build_arg(cc, e, 1, DNNL_ARG_WEIGHTS, 0, &w_md, dnnl_query_weights_md);
        build_arg(cc, e, 2, DNNL_ARG_DIFF_SRC, 1, &x_md, dnnl_query_diff_src_md);
    } else {
        build_arg(cc, e, 0, DNNL_ARG_SRC, 0, &x_md, dnnl_query_src_md);
        build_arg(cc, e, 1, DNNL_ARG_DIFF_DST, 0, &y_md, dnnl_query_diff_dst_md);
        build_arg(cc, e, 2, DNNL_ARG_DIFF_WEIGHTS, 1, &w_md, dnnl_query_diff_weights_md);
    }
    /* Accumulation goes through a plain-layout scratch of the output's size. */
    if (op != OP_FWD) ws_reserve(&cc->acc, e->a[2].user_count * sizeof(float));
    if (e->trimmed)
        ws_reserve(&cc->wtrim, (size_t)d->k * (d->c / sg_conv_groups(d)) * kr * ks * sizeof(float));

    const dnnl_memory_desc_t *smd =
        dnnl_primitive_desc_query_md(e->pd, dnnl_query_scratchpad_md, 0);
    e->scratch_bytes = smd ? dnnl_memory_desc_get_size(smd) : 0;
    if (e->scratch_bytes) {
        DNNL_CHECK(dnnl_memory_create(&e->scratch, smd, cc->eng, DNNL_MEMORY_NONE));
        ws_reserve(&cc->scratch, e->scratch_bytes);
    }
    if (bf16 && op != OP_BWD_WEIGHT) e->wtag = weight_tag(cc, e);
    const char *impl = NULL;
    DNNL_CHECK(dnnl_primitive_desc_query(e->pd, dnnl_query_impl_info_str, 0, &impl));
    SG_DEBUG("conv cache: %s%s n%d c%d %dx%d k%d %dx%d s%d p%d d%d g%d -> %s (%s layout, "
             "kernel %dx%d after trimming, scratchpad %zu B)",
             op_names[op], bf16 ? " bf16" : "", d->n, d->c, d->h, d->w, d->k, d->r, d->s,
             d->stride_h, d->pad_h, d->dil_h, sg_conv_groups(d), impl ? impl : "?",
             layout_names[layout], kr, ks, e->scratch_bytes);
    e->next = cc->head;
    cc->head = e;
    return e;
}

/* bf16 = 1: a native bf16 entry (the plain layout's reorder is then a plain
 * conversion). */

/* The entry of (d, op, layout, act, bf16, xdt, ydt), built on first use.
 * bf16 = 1: a native bf16 entry (the plain layout's reorder is then a plain
 * conversion). */
conv_entry *sg_conv_onednn_entry(sg_cpu_conv_cache *cc, const sg_conv_desc *d0, int op, int layout,
                                 int act, int bf16, int xdt, int ydt) {
    /* groups 0 and 1 are one geometry: one entry */
    sg_conv_desc key = *d0;
    if (key.groups == 0) key.groups = 1; /* anything invalid stays, to be refused */
    const sg_conv_desc *d = &key;
    for (conv_entry *e = cc->head; e; e = e->next)
        if (e->op == op && e->layout == layout && e->act == act && e->bf16 == bf16 &&
            e->xdt == xdt && e->ydt == ydt && memcmp(&e->d, d, sizeof *d) == 0)
            return e;
    return build_entry(cc, d, op, layout, act, bf16, xdt, ydt);
}

int sg_conv_onednn_has(const conv_entry *e) { return e->prim != NULL; }

static void exec2(sg_cpu_conv_cache *cc, dnnl_primitive_t p, dnnl_memory_t from, dnnl_memory_t to) {
    dnnl_exec_arg_t args[2] = {{DNNL_ARG_FROM, from}, {DNNL_ARG_TO, to}};
    DNNL_CHECK(dnnl_primitive_execute(p, cc->stream, 2, args));
}

/* Copies the live taps of w [k,c/g,r,s] into t [k,c/g,r2,s2]. */
static void gather_taps(const conv_entry *e, const float *w, float *t) {
    const sg_conv_desc *d = &e->d;
    long planes = (long)d->k * (d->c / sg_conv_groups(d));
#pragma omp parallel for schedule(static) if ((size_t)planes * d->r * d->s >= SG_CPU_PAR_MIN)
    for (long pl = 0; pl < planes; pl++)
        for (int i = 0; i < e->r2; i++)
            for (int j = 0; j < e->s2; j++)
                t[((size_t)pl * e->r2 + i) * e->s2 + j] =
                    w[((size_t)pl * d->r + e->i0 + i) * d->s + e->j0 + j];
}

/* dw (+)= the live-tap gradient t, scattered; dead taps get 0 (or keep
 * their value when accumulating). */
static void scatter_taps(const conv_entry *e, const float *t, float *dw, int accumulate) {
    const sg_conv_desc *d = &e->d;
    long planes = (long)d->k * (d->c / sg_conv_groups(d));
#pragma omp parallel for schedule(static) if ((size_t)planes * d->r * d->s >= SG_CPU_PAR_MIN)
    for (long pl = 0; pl < planes; pl++) {
        float *o = dw + (size_t)pl * d->r * d->s;
        if (!accumulate)
            for (int q = 0; q < d->r * d->s; q++) o[q] = 0.0f;
        for (int i = 0; i < e->r2; i++)
            for (int j = 0; j < e->s2; j++)
                o[(e->i0 + i) * d->s + e->j0 + j] += t[((size_t)pl * e->r2 + i) * e->s2 + j];
    }
}

/* Runs entry e on in0, in1 -> out (accumulating into out if asked). wc:
 * the weight cache (NULL: none), used by native bf16 fwd / bwd_data entries
 * for their converted weights (in1). */
void sg_conv_onednn_exec(sg_cpu_conv_cache *cc, conv_entry *e, const void *in0, const float *in1,
                         void *out, int accumulate, sg_wcache *wc) {
    const void *ptrs[3] = {in0, in1, accumulate ? cc->acc.p : out};
    /* cached bf16 weights: converted (gathered, reordered) only when stale */
    void *wcopy = NULL;
    int refill = 1;
    if (wc && e->bf16 && e->op != OP_BWD_WEIGHT && e->a[1].reorder) {
        const sg_conv_desc *d = &e->d;
        size_t nw = sg_conv_weight_count(d);
        wcopy = sg_wcache_get(wc, in1, nw * sizeof(float), e->wtag, e->a[1].prim_bytes, &refill);
    }
    int scatter = 0;
    if (e->trimmed) {
        if (e->op == OP_BWD_WEIGHT) {
            ptrs[2] = cc->wtrim.p; /* scattered into out below, accumulate included */
            scatter = 1;
        } else {
            if (refill) gather_taps(e, in1, cc->wtrim.p);
            ptrs[1] = cc->wtrim.p;
        }
    }
    dnnl_exec_arg_t args[4];
    int nargs = 0;
    for (int i = 0; i < 3; i++) {
        conv_arg *a = &e->a[i];
        DNNL_CHECK(dnnl_memory_set_data_handle(a->user, (void *)ptrs[i]));
        if (a->reorder) {
            if (!(i == 1 && wcopy)) ws_reserve(&cc->ws[i], a->prim_bytes); /* first run only */
            void *prim_buf = (i == 1 && wcopy) ? wcopy : cc->ws[i].p;
            DNNL_CHECK(dnnl_memory_set_data_handle(a->prim, prim_buf));
            if (!a->is_output && (i != 1 || refill)) {
                if (!a->pack || !sg_conv_pack_bf16(&a->pmd, ptrs[i], prim_buf))
                    exec2(cc, a->reorder, a->user, a->prim);
            }
        }
        args[nargs++] = (dnnl_exec_arg_t){a->arg, a->prim};
    }
    if (e->scratch) {
        DNNL_CHECK(dnnl_memory_set_data_handle(e->scratch, cc->scratch.p));
        args[nargs++] = (dnnl_exec_arg_t){DNNL_ARG_SCRATCHPAD, e->scratch};
    }
    DNNL_CHECK(dnnl_primitive_execute(e->prim, cc->stream, nargs, args));
    if (e->a[2].reorder) exec2(cc, e->a[2].reorder, e->a[2].prim, e->a[2].user);
    DNNL_CHECK(dnnl_stream_wait(cc->stream));
    if (scatter) scatter_taps(e, cc->wtrim.p, out, accumulate);
    else if (accumulate) sg_cpu_add_into(out, cc->acc.p, e->a[2].user_count);
}

int sg_conv_onednn_count(const sg_cpu_conv_cache *cc) {
    int n = 0;
    for (const conv_entry *e = cc->head; e; e = e->next) n++;
    return n;
}

void sg_conv_onednn_free(sg_cpu_conv_cache *cc) {
    conv_entry *e = cc->head;
    while (e) {
        conv_entry *next = e->next;
        for (int i = 0; i < 3; i++) free_arg(&e->a[i]);
        if (e->scratch) DNNL_CHECK(dnnl_memory_destroy(e->scratch));
        if (e->prim) DNNL_CHECK(dnnl_primitive_destroy(e->prim));
        if (e->pd) DNNL_CHECK(dnnl_primitive_desc_destroy(e->pd));
        free(e);
        e = next;
    }
    cc->head = NULL;
    free(cc->wmds);
    cc->wmds = NULL;
    cc->n_wmds = cc->cap_wmds = 0;
}

/* ---------------- the rows ---------------- */

static conv_entry *entry_of(sg_cpu_conv_cache *cc, const conv_call *c, int layout) {
    return sg_conv_onednn_entry(cc, c->d, c->op, layout, c->act, c->prec == PREC_BF16, c->xdt,
                                c->ydt);
}

/* Float32: oneDNN runs every conv in every layout. Native bf16: where it
 * has a bf16 kernel for the geometry (building the entry tells). */
static int can_in(sg_cpu_conv_cache *cc, const conv_call *c, int layout) {
    return c->prec != PREC_BF16 || sg_conv_onednn_has(entry_of(cc, c, layout));
}
int sg_conv_onednn_wino_can(sg_cpu_conv_cache *cc, const conv_call *c) {
    return sg_conv_onednn_wino_geometry(c->d) && can_in(cc, c, LAYOUT_WINO);
}
int sg_conv_onednn_cl_can(sg_cpu_conv_cache *cc, const conv_call *c) {
    return c->act == SG_LAYOUT_NHWC && !sg_conv_onednn_cl_bug(c->d, c->op, c->prec == PREC_BF16) &&
           can_in(cc, c, LAYOUT_CL);
}
int sg_conv_onednn_plain_can(sg_cpu_conv_cache *cc, const conv_call *c) {
    return can_in(cc, c, LAYOUT_PLAIN);
}
/* bf16: the blocked layout's kernel may take a channels-last source (AMX),
 * with the channels-last kernels' bugs (onednn_rules.c). */
int sg_conv_onednn_blocked_can(sg_cpu_conv_cache *cc, const conv_call *c) {
    if (c->prec == PREC_BF16 && sg_conv_onednn_cl_bug(c->d, c->op, 1)) return 0;
    return can_in(cc, c, LAYOUT_BLOCKED);
}
int sg_conv_onednn_cl_pays(const sg_cpu_conv_cache *cc, const conv_call *c) {
    (void)cc;
    return sg_conv_onednn_layout(c) == LAYOUT_CL;
}
int sg_conv_onednn_plain_pays(const sg_cpu_conv_cache *cc, const conv_call *c) {
    (void)cc;
    return sg_conv_onednn_layout(c) == LAYOUT_PLAIN;
}
int sg_conv_onednn_blocked_pays(const sg_cpu_conv_cache *cc, const conv_call *c) {
    (void)cc;
    return sg_conv_onednn_layout(c) == LAYOUT_BLOCKED;
}

/* LAYOUT_WINO asks for Winograd first; where the library has no such
 * kernel for a pass, build_entry falls back to direct on the same blocked
 * layout. */
#define ONEDNN_ROW(NAME, LAYOUT)                                                                \
    void sg_conv_onednn_##NAME##_prep(sg_cpu_conv_cache *cc, const conv_call *c) {              \
        entry_of(cc, c, LAYOUT);                                                                \
    }                                                                                           \
    void sg_conv_onednn_##NAME##_run(sg_cpu_conv_cache *cc, const conv_call *c) {               \
        sg_conv_onednn_exec(cc, entry_of(cc, c, LAYOUT), c->in0, c->in1, c->out, c->accumulate, \
                            c->prec == PREC_BF16 ? c->wc : NULL);                               \
    }
ONEDNN_ROW(wino, LAYOUT_WINO)
ONEDNN_ROW(cl, LAYOUT_CL)
ONEDNN_ROW(plain, LAYOUT_PLAIN)
ONEDNN_ROW(blocked, LAYOUT_BLOCKED)
