/* tests/backend/tb.h - the backend conformance suite's harness.
 *
 * The suite (tests/backend/test_backend_ops.c) runs every row of the case
 * table (case_table.c) on every backend compiled in and compares each op
 * with its naive reference (tests/kernels/ref_ops.h). This header defines:
 *  - tb_case: one row of the table: an op name, the runner that tests it,
 *    its shapes and flags, and its tolerance;
 *  - tb_ctx: one run of one case on one backend configuration;
 *  - helpers the runners use. They move data ONLY through
 *    be->ops->alloc/upload/download/free (and host_alloc/host_free), so the
 *    same runner works whether the backend's memory is host or device
 *    memory. Every buffer a helper returns belongs to the run and is freed
 *    when the case ends: runners never free.
 *
 * Tolerances are relative, as everywhere in the tests:
 *   max |ref - got| / max(max |ref|, TB_FLOOR)   (tu_max_rel_err)
 * and a tolerance of 0 means bit-exact (memcmp).
 */
#ifndef SG_TESTS_BACKEND_TB_H
#define SG_TESTS_BACKEND_TB_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/backend.h"

#define TB_FLOOR 1e-3

typedef struct tb_ctx tb_ctx;
typedef struct tb_case tb_case;
typedef void (*tb_run_fn)(tb_ctx *t, const tb_case *c);

/* sgd_step arguments (torch.optim.SGD semantics, see backend.h). `steps`
 * steps are taken; `first` marks the first of them as the first ever. */
typedef struct tb_sgd {
    float lr, momentum, dampening, wd;
    int nesterov, first, steps;
} tb_sgd;

/* adamw_multi_step arguments (torch.optim.AdamW semantics, see backend.h):
 * `steps` steps from fresh (zero) moments, the first numbered t = 1. */
typedef struct tb_adamw {
    float lr, beta1, beta2, eps, wd;
    int steps;
} tb_adamw;

/* How a runner fills its principal input (tb_input). */
enum {
    TB_FILL_RAND = 0, /* uniform in [lo, hi) (default [-1, 1)) */
    TB_FILL_TIES,     /* uniform, then rounded to quarters: many exact ties */
    TB_FILL_CONST,    /* every value = lo */
    TB_FILL_DISTINCT, /* distinct values 0.01 apart in scrambled order, in [-1, ...) */
};

/* One row of the case table. Which fields a runner reads is documented with
 * the runner (cases.h); unused fields stay zero. */
struct tb_case {
    const char *op; /* the sg_ops field tested, or grad_<op> (finite differences) */
    tb_run_fn run;
    sg_conv_desc conv;     /* conv ops: geometry (oh/ow are filled by the runner) */
    int n, c, h, w;        /* NCHW sizes; per-plane ops use hw = h*w */
    int oh, ow;            /* output plane (resize) */
    int c_dst, c_off;      /* concat: channels of the destination, offset of the source */
    size_t count;          /* elementwise ops: number of elements */
    int acc;               /* accumulate = 1 */
    int acc2;              /* a second output's accumulate (chan_scale_bwd: ds) */
    int skip;              /* chan_scale_bwd: 1 = dx NULL, 2 = ds NULL */
    int relu;              /* fused ReLU = 1 */
    int inplace;           /* 1: the output aliases the first input, 2: the second */
    int prepare;           /* conv: call conv_prepare before the op */
    int fill;              /* TB_FILL_* for the principal input */
    float lo, hi;          /* its range (both 0: [-1, 1)) */
    float p;               /* dropout probability */
    float alpha;           /* scale / axpy factor */
    uint64_t key;          /* dropout: rng key (0: a fixed default) */
    int parts;             /* bn_finalize: number of partial statistics */
    const int64_t *counts; /* bn_finalize: each part's count (NULL: a formula) */
    float eps, momentum;   /* bn_finalize / bn_eval_params */
    int running;           /* bn_finalize: also update running mean/var */
    float grad_scale;      /* ce_fwd_bwd */
    int ignore;            /* ce_fwd_bwd: ignore label (0: 255) */
    tb_sgd sgd;
    tb_adamw adamw;
    const float *in;              /* explicit principal input (instead of tb_input's fill) */
    const float *in2;             /* explicit second input (conv weights, SGD gradients) */
    const uint8_t *labels, *pred; /* explicit labels / predictions */
    const double *want;           /* known values of the main output (hand / PyTorch) */
    int nwant;
    double want_tol; /* absolute tolerance for `want` */
    float fd_h;      /* finite differences: step */
    double tol;      /* relative tolerance on every backend (0: bit-exact) */
    double tol_cuda; /* if > 0: the tolerance on the CUDA backend instead */
    /* Reduced-precision convolutions (sg_backend_opts.precision / allow_tf32):
     * a row runs on a bf16 (TF32) configuration only when it states tol_bf16
     * (tol_tf32) > 0, its tolerance there against the float32 reference. */
    double tol_bf16, tol_tf32;
    int all_configs;  /* run on every configuration of a backend (conv) */
    int x_dt, y_dt;   /* *_dt ops: SG_ACT_F32 | SG_ACT_BF16 storage of x and y (the
                         fused join's y_dt also SG_ACT_F32R) */
    int r_dt;         /* the fused join: storage of the identity res */
    int gy_dt, gx_dt; /* *_dt backward ops: storage of the gradients dy and dx */
    const char *note; /* why the case exists (printed on failure) */
    /* CPU: the convolution paths the row is meant to run on ("NAME" or
     * "PASS:NAME", space-separated; tests/backend/cpu_paths.h) */
    const char *path;
};

/* One run of a case. Runners read be, tol and det; the rest is the harness's. */
struct tb_ctx {
    sg_backend *be;
    const char *config; /* configuration name, e.g. "cpu/plain", "cuda/det" */
    int det;            /* the configuration promises bit-identical conv reruns */
    double tol;         /* the case's tolerance on this backend */
    /* bf16 configurations (else 0): conv results are also checked against the
     * bf16-exact reference (ref_conv_*_bf16) element by element, within
     * bf16_steps bf16 ulps + bf16_slack x max|ref| (tb_close_bf16) */
    int bf16_steps;
    double bf16_slack;
    const tb_case *c;
    char desc[512];               /* the case's parameters, for messages */
    int failures;                 /* FAIL lines printed for this run */
    uint64_t seed;                /* per-case seed (from op + parameters) */
    unsigned draws;               /* random tensors drawn so far */
    void **host, **dev, **pinned; /* owned buffers, freed by tb_end */
    size_t nhost, ndev, npinned, caphost, capdev, cappinned;
};

/* ---- the harness (tb.c) ---- */
/* Weights of a conv geometry: k * (c/groups) * r * s (groups 0 or 1: k*c*r*s). */
size_t tb_conv_nw(const sg_conv_desc *d);
void tb_begin(tb_ctx *t, sg_backend *be, const char *config, int det, const tb_case *c);
/* Frees the run's buffers; returns 1 if the case passed. */
int tb_end(tb_ctx *t);
/* The parameters of a case in words ("n3 c5 7x9 acc relu ..."). */
void tb_describe(const tb_case *c, char *buf, size_t size);

/* ---- failures: print "  FAIL op [config] params: message" (a few per
 * run at most) and return 0; the checks return 1 when they hold ---- */
int tb_fail(tb_ctx *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int tb_expect(tb_ctx *t, int cond, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* The op must be in the backend's table (a NULL entry fails the case). */
int tb_has(tb_ctx *t, const void *fn, const char *name);
#define TB_HAS(t, opname) tb_has((t), (const void *)(t)->be->ops->opname, #opname)

/* ---- host buffers owned by the run (zeroed / filled) ---- */
void *tb_hbytes(tb_ctx *t, size_t bytes);
float *tb_hzeros(tb_ctx *t, size_t n);
float *tb_hcopy(tb_ctx *t, const float *src, size_t n);
/* Uniform in [lo, hi), from the case's seed and a draw counter. */
float *tb_rand(tb_ctx *t, size_t n, float lo, float hi);
/* The principal input: c->in if given (n values), else c->fill in [lo, hi). */
float *tb_input(tb_ctx *t, size_t n);
/* Deterministic 64-bit value number i of the run's stream (labels, bytes). */
uint64_t tb_u64(tb_ctx *t, uint64_t i);

/* ---- backend memory owned by the run ---- */
/* alloc + upload of `bytes` from host (host NULL: just the zeroed alloc). */
void *tb_dev(tb_ctx *t, const void *host, size_t bytes);
float *tb_devf(tb_ctx *t, const float *host, size_t n);
void tb_put(tb_ctx *t, void *dev, const void *host, size_t bytes);
/* A new host buffer with a download of `bytes` of dev. */
void *tb_get(tb_ctx *t, const void *dev, size_t bytes);
float *tb_getf(tb_ctx *t, const float *dev, size_t n);
/* host_alloc memory owned by the run. */
void *tb_pinned(tb_ctx *t, size_t bytes);

/* ---- activations in the backend's layout (be->layout, kernels/backend.h)
 * Host buffers are always NCHW ([n, c, hw], the references' order); these
 * move an activation between that and the backend's storage order, so one
 * runner tests an op in every layout. esize: bytes per element (4: float,
 * 2: bf16 bits, 1: a dropout mask). A runner uses them for every tensor the
 * op's contract calls an activation, and the plain helpers for the rest. */
/* The host NCHW buffer in the backend's layout (a new host buffer; the same
 * bytes in NCHW). */
void *tb_to_layout(tb_ctx *t, const void *nchw, int n, int c, int hw, size_t esize);
/* The inverse: a backend-layout host buffer back to NCHW (a new buffer). */
void *tb_from_layout(tb_ctx *t, const void *stored, int n, int c, int hw, size_t esize);
/* alloc + upload of an NCHW host activation (host NULL: zeroed). */
void *tb_act_dev(tb_ctx *t, const void *host, int n, int c, int hw, size_t esize);
float *tb_actf(tb_ctx *t, const float *host, int n, int c, int hw);
/* Upload an NCHW host activation into existing backend memory. */
void tb_act_put(tb_ctx *t, void *dev, const void *host, int n, int c, int hw, size_t esize);
/* Download an activation into a new NCHW host buffer. */
void *tb_act_get(tb_ctx *t, const void *dev, int n, int c, int hw, size_t esize);
float *tb_act_getf(tb_ctx *t, const float *dev, int n, int c, int hw);
/* tb_close / tb_same against an activation downloaded from the backend. */
int tb_close_act(tb_ctx *t, const char *what, const float *ref, const float *dev, int n, int c,
                 int hw, double tol);
int tb_same_act(tb_ctx *t, const char *what, const void *ref, const void *dev, int n, int c, int hw,
                size_t esize);

/* ---- comparisons (print a FAIL line naming `what` and return 0) ---- */
/* Relative error of got against ref within tol; tol 0: bit-exact. */
int tb_close(tb_ctx *t, const char *what, const float *ref, const float *got, size_t n, double tol);
/* The same with got downloaded from the backend. */
int tb_close_dev(tb_ctx *t, const char *what, const float *ref, const float *dev, size_t n,
                 double tol);
int tb_same(tb_ctx *t, const char *what, const void *ref, const void *got, size_t bytes);
int tb_same_dev(tb_ctx *t, const char *what, const void *ref, const void *dev, size_t bytes);
/* |got - want| <= abs_tol */
int tb_near(tb_ctx *t, const char *what, double got, double want, double abs_tol);
/* got[0..nwant) against the case's known values (c->want, c->want_tol). */
int tb_want(tb_ctx *t, const char *what, const float *got, size_t n);
int tb_want_d(tb_ctx *t, const char *what, const double *got, size_t n);

/* Element by element: |got - ref| <= steps * ulp_bf16(max(|ref - base|,
 * |got - base|)) + slack * max|ref|: got is ref up to `steps` bf16 rounding
 * steps of the rounded result (a float32 accumulation ends on the other
 * side of a bf16 boundary) and tiny absolute differences where sums cancel.
 * base: what the result was added to (accumulate = 1), or NULL: then every
 * element of got must also be a bf16 value. */
int tb_close_bf16(tb_ctx *t, const char *what, const float *ref, const float *got,
                  const float *base, size_t n, int steps, double slack);

/* ---- finite differences ---- */
/* A loss evaluated on the backend with the current parameter values. */
typedef double (*tb_loss_fn)(tb_ctx *t, void *state);
/* sum(r * y) in double, y downloaded from the backend. */
double tb_dot_dev(tb_ctx *t, const float *r, const float *y_dev, size_t n);
/* Compares analytic[] with central differences (L(p+h) - L(p-h)) / 2h of L
 * over the parameter (host mirror + backend copy, kept equal), on every
 * element when count <= 200, else on 200 spread over it. Passes when
 * max |numeric - analytic| <= t->tol * max(max |analytic|, 1e-3). */
int tb_check_fd(tb_ctx *t, const char *what, float *param_host, float *param_dev, size_t count,
                const float *analytic, tb_loss_fn loss, void *state, float h);

#endif
