/* tests/train/test_traffic.c - the traffic and FLOP model of a training step
 * (train/bench_traffic.h) and `segtrain bench --traffic`.
 *   hand    - one conv (3x3, 3 -> 4 channels, no bias) + BN + ReLU block
 *             whose output is the logits, at batch 2 and 5x5: the bytes of
 *             every phase under nchw-f32, cuda-bf16-convert, cuda-bf16-nhwc,
 *             nhwc-bf16 and torch-amp against counts written out pass by
 *             pass below (not with the model's code), and its FLOPs (forward
 *             and weight gradient; no data gradient for the image); then the
 *             plan's decision flipped (a bias on the conv: its output is
 *             stored float32) moves cuda-bf16-nhwc by the bytes of that
 *             tensor's extra width and its widening pass, nothing else
 *   follows - a tiny DeepLabV3 ResNet-50: the storage the model reads
 *             (sg_model_shapes) is what a bf16 plan stores; cuda-bf16-nhwc's
 *             conversions are, conv by conv, those of every operand and
 *             result whose planned storage (sg_tensor_act_esize /
 *             sg_tensor_grad_esize) is not bf16; its other classes are
 *             cpu-bf16's (BN, elementwise, loss, optimizer) and
 *             cuda-bf16-convert's (cuDNN itself); a CUDA bf16 run reports
 *             cuda-bf16-nhwc under NHWC, cuda-bf16-convert under NCHW
 *   sums    - a tiny DeepLabV3 ResNet-50: the phases are the layers' sum
 *             (plus the loss and the optimizer); FLOPs = 3 x 2 x the model's
 *             multiply-adds x batch, less the first conv's data gradient;
 *             nhwc-f32 = nchw-f32; nhwc-bf16 converts nothing and moves
 *             fewer bytes than cuda-bf16-convert and nchw-f32; accumulation
 *             runs forward twice and reads the weight gradients back
 *   kinds   - models that hold every layer kind (ResNet and MobileNetV3,
 *             DeepLabV3 / DeepLabV3+ / LR-ASPP, dropout and mmseg's
 *             Dropout2d): every layer moves bytes forward in every design,
 *             and a layer kind the model does not know is fatal
 *   ops     - the CPU backend's ops wrapped to count the bytes each call's
 *             contract moves: a float32 training step (forward, both heads'
 *             cross-entropy, backward; one and two micro-batches) moves
 *             exactly what nchw-f32 models, phase by phase, on models with
 *             every layer kind but Dropout2d; under bf16 convolutions (the
 *             plan's bf16 storage, the *_dt ops) exactly what cpu-bf16 models
 *   cli     - (argv[2]: the segtrain binary) `bench --traffic --json` prints
 *             every design and writes the documented fields, the
 *             cuda-bf16-nhwc row the model's own for that config; a timed run
 *             prints and writes its design's model with achieved GB/s over
 *             its measured phases; --traffic with timing options is a usage
 *             error
 */
#include <math.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/config.h"
#include "core/log.h"
#include "model/model_internal.h"
#include "model/model_profile.h"
#include "tests/model/model_testutil.h"
#include "tests/testutil.h"
#include "train/bench.h"
#include "train/bench_traffic.h"

static const char *g_segtrain;

/* ---------------- hand ---------------- */

/* Tensors 0 (image [2,3,5,5]), 1 (conv out [2,4,5,5]), 2 (BN+ReLU out,
 * the logits); parameters: conv weight, gamma, beta, running mean / var,
 * num_batches_tracked. */
typedef struct hand {
    sg_model m;
    sg_tensor t[3];
    sg_layer l[2];
    sg_param p[7]; /* the 7th: hand_flip's bias */
} hand;

static void hand_model(hand *h) {
    memset(h, 0, sizeof *h);
    sg_model *m = &h->m;
    m->t = h->t;
    m->l = h->l;
    m->params = h->p;
    m->n_t = 3;
    m->n_l = 2;
    m->n_params = 6;
    m->t_out = 2;
    m->t_aux = -1;
    size_t counts[6] = {4 * 3 * 9, 4, 4, 4, 4, 1};
    for (int i = 0; i < 6; i++) {
        snprintf(h->p[i].name, sizeof h->p[i].name, "p%d", i);
        h->p[i].count = counts[i];
        h->p[i].trainable = i < 3;
        h->p[i].is_buffer = i >= 3;
    }
    h->p[5].kind = SG_PK_NUM_BATCHES;
    h->t[0].c = 3;
    h->t[1].c = h->t[2].c = 4;
    h->t[0].producer = -1;
    h->t[1].producer = 0;
    h->t[2].producer = 1;
    h->t[1].req_grad = h->t[2].req_grad = 1;
    sg_layer *c = &h->l[0], *b = &h->l[1];
    c->type = L_CONV;
    c->in[0] = 0;
    c->n_in = 1;
    c->out = 1;
    c->w_param = 0;
    c->b_param = -1;
    c->k = 4;
    c->r = 3;
    c->stride = c->pad = c->dil = 1;
    c->join = c->fused_bn = -1;
    b->type = L_BN;
    b->in[0] = 1;
    b->n_in = 1;
    b->out = 2;
    for (int i = 0; i < 5; i++) b->bn_p[i] = 1 + i;
    b->relu = 1;
    b->join = b->fused_bn = -1;
}

typedef struct want {
    double rd[SG_TR_N_PHASES], wr[SG_TR_N_PHASES];
} want;

static int same_phases(const sg_traffic *t, const want *w) {
    int ok = 1;
    for (int p = 0; p < SG_TR_N_PHASES; p++)
        if (t->ph[p].read != w->rd[p] || t->ph[p].write != w->wr[p]) {
            fprintf(stderr, "  %s: read %.0f written %.0f, expected %.0f and %.0f\n",
                    sg_traffic_phase_name(p), t->ph[p].read, t->ph[p].write, w->rd[p], w->wr[p]);
            ok = 0;
        }
    return ok;
}

/* The plan's storage of tensor 1 flipped: with a (frozen) bias the conv's
 * output is no longer exact in bf16, so the plan stores it float32
 * (model_plan.c act_storage). cuda-bf16-nhwc then widens cuDNN's bf16
 * result into it (2Y -> 4Y), the bias pass reads and writes it (4Y + V ->
 * 4Y), and BN's statistics, apply, reduce and dx passes read it at 4 bytes
 * (2Y more each); its gradient is float32 too (grad_storage: only a
 * bf16-stored tensor has a bf16 gradient), so BN's dx writes 4Y (2Y more)
 * and the weight gradient rounds that dy again (4Y -> 2Y); x and the weight
 * are unchanged. want: the row without the bias. */
static void hand_flip(hand *h, const want *w, double X, double Y, double V) {
    sg_tensor t[3];
    sg_layer l[2];
    memcpy(t, h->t, sizeof t);
    memcpy(l, h->l, sizeof l);
    CHECK_EQ_INT(sg_model_shapes(&h->m, t, l, 2, 5, 5, 1), SG_OK);
    CHECK(t[1].dt == SG_ACT_BF16 && t[2].dt == SG_ACT_F32);
    h->p[6] = h->p[1]; /* a frozen bias of 4 */
    snprintf(h->p[6].name, sizeof h->p[6].name, "bias");
    h->p[6].trainable = 0;
    h->m.n_params = 7;
    h->l[0].b_param = 6;
    memcpy(t, h->t, sizeof t);
    memcpy(l, h->l, sizeof l);
    CHECK_EQ_INT(sg_model_shapes(&h->m, t, l, 2, 5, 5, 1), SG_OK);
    CHECK(t[1].dt == SG_ACT_F32);
    want f = *w;
    f.rd[SG_TR_FWD] += 2 * Y + (4 * Y + V) + 2 * Y + 2 * Y;
    f.wr[SG_TR_FWD] += 4 * Y + 4 * Y;
    f.rd[SG_TR_BWD] += 2 * Y + 2 * Y + 4 * Y;
    f.wr[SG_TR_BWD] += 2 * Y + 2 * Y;
    sg_traffic tr;
    CHECK_EQ_INT(sg_bench_traffic(&h->m, SG_TR_CUDA_BF16_NHWC, 2, 1, 5, 5, &tr, NULL), SG_OK);
    CHECK_MSG(same_phases(&tr, &f), "cuda-bf16-nhwc, tensor 1 stored float32");
    CHECK(tr.cat[SG_TRC_CONVERT] == 6 * X + (6 * X + 6 * Y + 6 * 108) + 6 * Y);
    h->m.n_params = 6;
    h->l[0].b_param = -1;
}

static void test_hand(void) {
    hand h;
    hand_model(&h);
    /* elements: image X = 150, conv out / logits Y = 200, weights W = 108,
     * c = 4 channels (V = 16 bytes a float vector), 50 label pixels */
    const double X = 150, Y = 200, W = 108, V = 16, px = 50;
    /* the optimizer: 116 trainable floats, read p, g, buf, write p, buf */
    const double opt_rd = 12 * 116, opt_wr = 8 * 116;
    want w[SG_TR_N_DESIGNS];
    memset(w, 0, sizeof w);
    /* nchw-f32: conv (x, w -> y); stats (x -> 2V); finalize (4V -> 4V);
     * apply (x, 4V -> y) | ce (logits, labels -> dlogits) | reduce (dy, x,
     * y, mean -> 2V); param grads (3V -> 2V); dx (dy, x, y, 5V: mean, invstd, gamma, red -> dx); conv
     * weight gradient (x, dy -> dw); no data gradient of the image */
    w[SG_TR_NCHW_F32] =
        (want){{4 * X + 4 * W + 4 * Y + 4 * V + 4 * Y + 4 * V, 4 * Y + px,
                (12 * Y + V) + 3 * V + (12 * Y + 5 * V) + (4 * X + 4 * Y), opt_rd},
               {4 * Y + 2 * V + 4 * V + 4 * Y, 4 * Y, 2 * V + 2 * V + 4 * Y + 4 * W, opt_wr}};
    /* cuda-bf16-convert: tensor 1 is stored in bf16 (a conv output read by
     * BN alone), the logits float32, every gradient float32. Forward: the
     * weights' bf16 copy (4W -> 2W), x to bf16 NHWC (4X -> 2X), cuDNN
     * (2X + 2W -> 2Y), back to bf16 NCHW storage (2Y -> 2Y), stats (2Y),
     * finalize, apply (2Y + 4V -> 4Y). Backward: reduce (4Y dy + 2Y x + 4Y
     * y + V), param grads, dx (4Y + 2Y + 4Y + 5V -> 4Y), weight gradient:
     * x converted (4X -> 2X), dy converted (4Y -> 2Y), cuDNN (2X + 2Y ->
     * 2W), dw back to float32 (2W -> 4W). */
    w[SG_TR_CUDA_BF16_CONVERT] = (want){
        {4 * W + 4 * X + (2 * X + 2 * W) + 2 * Y + 2 * Y + 4 * V + (2 * Y + 4 * V), 4 * Y + px,
         (10 * Y + V) + 3 * V + (10 * Y + 5 * V) + 4 * X + 4 * Y + (2 * X + 2 * Y) + 2 * W, opt_rd},
        {2 * W + 2 * X + 2 * Y + 2 * Y + 2 * V + 4 * V + 4 * Y, 4 * Y,
         2 * V + 2 * V + 4 * Y + 2 * X + 2 * Y + 2 * W + 4 * W, opt_wr}};
    /* The plan stores tensor 1's gradient in bf16 too (a conv output read by
     * BN alone: model_plan.c grad_storage): BN's dx writes it at 2 bytes
     * (4Y -> 2Y), and the weight gradient's dy is already bf16, so under
     * NCHW its conversion is only the transpose (2Y -> 2Y, was 4Y -> 2Y). */
    w[SG_TR_CUDA_BF16_CONVERT].rd[SG_TR_BWD] -= 2 * Y;
    w[SG_TR_CUDA_BF16_CONVERT].wr[SG_TR_BWD] -= 2 * Y;
    /* cuda-bf16-nhwc: cuda-bf16-convert but cuDNN writes the bf16-stored
     * tensor 1 itself (no 2Y -> 2Y copy back) and reads its bf16 gradient
     * as it is (no 2Y -> 2Y transpose); x (float32) is still rounded (4X ->
     * 2X). */
    w[SG_TR_CUDA_BF16_NHWC] = w[SG_TR_CUDA_BF16_CONVERT];
    w[SG_TR_CUDA_BF16_NHWC].rd[SG_TR_FWD] -= 2 * Y;
    w[SG_TR_CUDA_BF16_NHWC].wr[SG_TR_FWD] -= 2 * Y;
    w[SG_TR_CUDA_BF16_NHWC].rd[SG_TR_BWD] -= 2 * Y;
    w[SG_TR_CUDA_BF16_NHWC].wr[SG_TR_BWD] -= 2 * Y;
    /* nhwc-bf16: every activation and gradient 2 bytes, the weight copy,
     * bf16 logits in and dlogits out, float32 weight gradients */
    w[SG_TR_NHWC_BF16] = (want){
        {4 * W + (2 * X + 2 * W) + 2 * Y + 4 * V + (2 * Y + 4 * V), 2 * Y + px,
         (6 * Y + V) + 3 * V + (6 * Y + 5 * V) + (2 * X + 2 * Y), opt_rd},
        {2 * W + 2 * Y + 2 * V + 4 * V + 2 * Y, 2 * Y, 2 * V + 2 * V + 2 * Y + 4 * W, opt_wr}};
    /* torch-amp: as nhwc-bf16 plus the ReLU in place (2Y -> 2Y) forward,
     * threshold_backward (dy, y -> g) before BN's reduce (g, x) and
     * elementwise (g, x, 5V -> dx) passes, cuDNN's bf16 dw cast to float32
     * (2W -> 4W); the loss in float32 with int64 labels: cast up (2Y ->
     * 4Y), log_softmax (4Y -> 4Y), nll_loss (4 px + 8 px), its backward (8
     * px -> 4Y), log_softmax_backward (8Y -> 4Y), cast down (4Y -> 2Y). */
    w[SG_TR_TORCH_AMP] = (want){
        {4 * W + (2 * X + 2 * W) + 2 * Y + 4 * V + (2 * Y + 4 * V) + 2 * Y,
         2 * Y + 4 * Y + (4 * px + 8 * px) + 8 * px + 8 * Y + 4 * Y,
         4 * Y + 4 * Y + 3 * V + (4 * Y + 5 * V) + (2 * X + 2 * Y) + 2 * W, opt_rd},
        {2 * W + 2 * Y + 2 * V + 4 * V + 2 * Y + 2 * Y, 4 * Y + 4 * Y + 4 * Y + 4 * Y + 2 * Y,
         2 * Y + 2 * V + 2 * V + 2 * Y + 2 * W + 4 * W, opt_wr}};
    const int designs[] = {SG_TR_NCHW_F32, SG_TR_CUDA_BF16_CONVERT, SG_TR_CUDA_BF16_NHWC,
                           SG_TR_NHWC_BF16, SG_TR_TORCH_AMP};
    const double macs = 2.0 * 4 * 27 * 25;
    CHECK(sg_tensor_grad_esize(&h.t[1]) == 4 && sg_tensor_grad_esize(&h.t[2]) == 4);
    for (int i = 0; i < 5; i++) {
        int d = designs[i];
        sg_traffic t;
        CHECK_EQ_INT(sg_bench_traffic(&h.m, d, 2, 1, 5, 5, &t, NULL), SG_OK);
        CHECK_MSG(same_phases(&t, &w[d]), "design %s", sg_traffic_design_name(d));
        CHECK(t.ph[SG_TR_FWD].flops == 2 * macs && t.ph[SG_TR_BWD].flops == 2 * macs);
        CHECK(t.ph[SG_TR_LOSS].flops == 0 && t.ph[SG_TR_OPT].flops == 0);
        /* cuda: x (4X -> 2X) and the result (2Y -> 2Y) forward; x, the bf16
         * dy's transpose (NCHW only) and dw backward. torch: the loss's
         * casts, the weight gradient's cast */
        double conv = d == SG_TR_CUDA_BF16_CONVERT ? 6 * X + 4 * Y + (6 * X + 4 * Y + 6 * W) : 0;
        if (d == SG_TR_CUDA_BF16_NHWC) conv = 6 * X + (6 * X + 6 * W);
        if (d == SG_TR_TORCH_AMP) conv = 6 * Y + 6 * Y + 6 * W;
        CHECK_MSG(t.cat[SG_TRC_CONVERT] == conv, "%s: convert %.0f, expected %.0f",
                  sg_traffic_design_name(d), t.cat[SG_TRC_CONVERT], conv);
    }
    /* the model's arrays are copies: h's tensors still have no shape */
    CHECK(h.t[1].count == 0 && h.l[0].desc.n == 0);
    hand_flip(&h, &w[SG_TR_CUDA_BF16_NHWC], X, Y, V);
}

/* ---------------- sums ---------------- */

static void add_to(sg_traffic *sum, const sg_traffic *t) {
    for (int p = 0; p < SG_TR_N_PHASES; p++) {
        sum->ph[p].read += t->ph[p].read;
        sum->ph[p].write += t->ph[p].write;
        sum->ph[p].flops += t->ph[p].flops;
    }
}

static int near(double a, double b) { return fabs(a - b) <= 1e-9 * fabs(b) + 1e-6; }

static void test_sums(void) {
    sg_model_opts mo;
    mt_tiny_opts(&mo, SG_RESNET50);
    sg_model *m = sg_model_create(mt_backend(), &mo);
    CHECK(m != NULL);
    const int n = 2, H = 40, Wd = 56;
    int L = sg_model_num_layers(m);
    sg_traffic *lay = calloc((size_t)L, sizeof *lay);
    sg_traffic t[SG_TR_N_DESIGNS];
    CHECK(lay != NULL);
    /* the first conv's multiply-adds: its data gradient is not computed */
    double first_macs = 0;
    CHECK_EQ_INT(sg_model_plan(m, n, H, Wd), SG_OK);
    for (int li = 0; li < L; li++) {
        sg_layer_info info;
        sg_model_layer_info(m, li, &info);
        if (m->l[li].type == L_CONV && m->l[li].in[0] == 0) first_macs += info.macs;
    }
    CHECK(first_macs > 0);
    double want_flops = 3 * sg_model_flops(m, H, Wd) * n - 2 * first_macs;
    for (int d = 0; d < SG_TR_N_DESIGNS; d++) {
        CHECK_EQ_INT(sg_bench_traffic(m, d, n, 1, H, Wd, &t[d], lay), SG_OK);
        sg_traffic sum;
        memset(&sum, 0, sizeof sum);
        for (int li = 0; li < L; li++) {
            CHECK(lay[li].ph[SG_TR_LOSS].read == 0 && lay[li].ph[SG_TR_OPT].read == 0);
            add_to(&sum, &lay[li]);
        }
        for (int p = 0; p < SG_TR_N_PHASES; p++) {
            if (p == SG_TR_LOSS || p == SG_TR_OPT) continue;
            CHECK_MSG(near(sum.ph[p].read, t[d].ph[p].read) &&
                          near(sum.ph[p].write, t[d].ph[p].write) &&
                          near(sum.ph[p].flops, t[d].ph[p].flops),
                      "%s %s: layers %.0f / %.0f, total %.0f / %.0f", sg_traffic_design_name(d),
                      sg_traffic_phase_name(p), sum.ph[p].read, sum.ph[p].write, t[d].ph[p].read,
                      t[d].ph[p].write);
        }
        double cls = 0;
        for (int c = 0; c < SG_TRC_N; c++) cls += t[d].cat[c];
        CHECK(near(cls, sg_traffic_bytes(&t[d])));
        CHECK_MSG(near(sg_traffic_flops(&t[d]), want_flops), "%s: %.0f FLOPs, expected %.0f",
                  sg_traffic_design_name(d), sg_traffic_flops(&t[d]), want_flops);
        /* the same optimizer and FLOPs everywhere */
        CHECK(t[d].ph[SG_TR_OPT].read == t[0].ph[SG_TR_OPT].read);
    }
    /* planned or not, the same model */
    sg_model_release_plan(m);
    sg_traffic again;
    CHECK_EQ_INT(sg_bench_traffic(m, SG_TR_NCHW_F32, n, 1, H, Wd, &again, NULL), SG_OK);
    CHECK(memcmp(&again, &t[SG_TR_NCHW_F32], sizeof again) == 0);
    CHECK(memcmp(&t[SG_TR_NHWC_F32], &t[SG_TR_NCHW_F32], sizeof again) == 0);
    /* the target converts nothing and moves the fewest bytes of segtrain's designs */
    CHECK(t[SG_TR_NHWC_BF16].cat[SG_TRC_CONVERT] == 0 &&
          t[SG_TR_NCHW_F32].cat[SG_TRC_CONVERT] == 0);
    CHECK(t[SG_TR_CUDA_BF16_CONVERT].cat[SG_TRC_CONVERT] > 0);
    double nb = sg_traffic_bytes(&t[SG_TR_NHWC_BF16]);
    CHECK(nb < sg_traffic_bytes(&t[SG_TR_CUDA_BF16_CONVERT]));
    CHECK(nb < sg_traffic_bytes(&t[SG_TR_CPU_BF16]));
    CHECK(sg_traffic_bytes(&t[SG_TR_CPU_BF16]) < sg_traffic_bytes(&t[SG_TR_NCHW_F32]));
    CHECK(nb < sg_traffic_bytes(&t[SG_TR_NCHW_F32]));
    /* fp32 designs copy no weights; bf16 ones copy each conv weight once */
    CHECK(t[SG_TR_NCHW_F32].cat[SG_TRC_WCAST] == 0 && t[SG_TR_NHWC_BF16].cat[SG_TRC_WCAST] > 0);
    /* two micro-batches: forward and loss twice (the weight copy once),
     * backward more than twice (weight gradients read back), optimizer once */
    sg_traffic a2;
    for (int d = 0; d < SG_TR_N_DESIGNS; d++) {
        CHECK_EQ_INT(sg_bench_traffic(m, d, n, 2, H, Wd, &a2, NULL), SG_OK);
        double wc = t[d].cat[SG_TRC_WCAST];
        CHECK(near(a2.ph[SG_TR_FWD].read + a2.ph[SG_TR_FWD].write,
                   2 * (t[d].ph[SG_TR_FWD].read + t[d].ph[SG_TR_FWD].write) - wc));
        CHECK(near(a2.ph[SG_TR_LOSS].read, 2 * t[d].ph[SG_TR_LOSS].read));
        CHECK(a2.ph[SG_TR_BWD].read > 2 * t[d].ph[SG_TR_BWD].read);
        CHECK(near(a2.ph[SG_TR_BWD].write, 2 * t[d].ph[SG_TR_BWD].write) ||
              d == SG_TR_TORCH_AMP); /* autograd's .grad += writes once more */
        CHECK(a2.ph[SG_TR_OPT].read == t[d].ph[SG_TR_OPT].read);
        CHECK(near(sg_traffic_flops(&a2), 2 * sg_traffic_flops(&t[d])));
    }
    /* a frozen backbone: no weight gradients there, fewer FLOPs and bytes */
    sg_model_freeze(m, "encoder", 0);
    sg_traffic fz;
    CHECK_EQ_INT(sg_bench_traffic(m, SG_TR_NCHW_F32, n, 1, H, Wd, &fz, NULL), SG_OK);
    CHECK(sg_traffic_flops(&fz) < want_flops);
    CHECK(fz.ph[SG_TR_OPT].read < t[SG_TR_NCHW_F32].ph[SG_TR_OPT].read);
    /* an empty input is refused, not modelled */
    CHECK_EQ_INT(sg_bench_traffic(m, SG_TR_NCHW_F32, n, 1, 0, 8, &fz, NULL), SG_ERR_CONFIG);
    free(lay);
    sg_model_destroy(m);
}

/* ---------------- follows ---------------- */

static void test_follows(void) {
    sg_model_opts mo;
    mt_tiny_opts(&mo, SG_RESNET50);
    sg_backend_opts bo = {.threads = 1, .precision = SG_PRECISION_BF16};
    sg_backend *be = sg_backend_create("cpu", &bo);
    CHECK(be != NULL);
    sg_model *m = sg_model_create(be, &mo);
    CHECK(m != NULL);
    const int n = 2, H = 40, Wd = 56;
    sg_tensor *t = malloc((size_t)m->n_t * sizeof *t);
    sg_layer *l = malloc((size_t)m->n_l * sizeof *l);
    CHECK(t && l);
    memcpy(t, m->t, (size_t)m->n_t * sizeof *t);
    memcpy(l, m->l, (size_t)m->n_l * sizeof *l);
    CHECK_EQ_INT(sg_model_shapes(m, t, l, n, H, Wd, 1), SG_OK);
    /* what the model reads is what the bf16 plan stores */
    CHECK_EQ_INT(sg_model_plan(m, n, H, Wd), SG_OK);
    int same = 1, bf16 = 0, f32 = 0;
    for (int i = 0; i < m->n_t; i++) {
        same &= t[i].dt == m->t[i].dt && t[i].count == m->t[i].count;
        bf16 += t[i].dt == SG_ACT_BF16;
        f32 += t[i].dt == SG_ACT_F32;
    }
    CHECK(same && bf16 > 0 && f32 > 0);
    /* the conversions, conv by conv, from the planned storage: an operand
     * not stored bf16 rounded (e + 2 bytes an element), a result widened
     * (2 + e, and e more read when accumulating), dw from KRSC (6 bytes a
     * weight; the first micro-batch: none read back) */
    double cv = 0;
    for (int li = 0; li < m->n_l; li++) {
        const sg_layer *L = &l[li];
        if (L->type != L_CONV) continue;
        int x = L->in[0], y = L->out;
        double X = (double)t[x].count, Y = (double)t[y].count;
        int ex = sg_tensor_act_esize(&t[x]), ey = sg_tensor_act_esize(&t[y]);
        int gx = sg_tensor_grad_esize(&t[x]), gy = sg_tensor_grad_esize(&t[y]);
        if (ex != 2) cv += (ex + 2) * X;
        if (ey != 2) cv += (2 + ey) * Y;
        if (!t[y].req_grad) continue;
        if (m->params[L->w_param].trainable) {
            if (ex != 2) cv += (ex + 2) * X;
            if (gy != 2) cv += (gy + 2) * Y;
            cv += 6.0 * (double)sg_conv_weight_count(&L->desc);
        }
        if (t[x].req_grad) {
            if (gy != 2) cv += (gy + 2) * Y;
            if (gx != 2) cv += (2 + gx + (L->acc_in[0] ? gx : 0)) * X;
        }
    }
    sg_traffic nh, cpu, nchw;
    CHECK_EQ_INT(sg_bench_traffic(m, SG_TR_CUDA_BF16_NHWC, n, 1, H, Wd, &nh, NULL), SG_OK);
    CHECK_EQ_INT(sg_bench_traffic(m, SG_TR_CPU_BF16, n, 1, H, Wd, &cpu, NULL), SG_OK);
    CHECK_EQ_INT(sg_bench_traffic(m, SG_TR_CUDA_BF16_CONVERT, n, 1, H, Wd, &nchw, NULL), SG_OK);
    CHECK_MSG(near(nh.cat[SG_TRC_CONVERT], cv), "conversions %.0f, from the plan %.0f",
              nh.cat[SG_TRC_CONVERT], cv);
    CHECK(cv > 0 && nh.cat[SG_TRC_CONVERT] < nchw.cat[SG_TRC_CONVERT]);
    const int same_as_cpu[] = {SG_TRC_BN, SG_TRC_ELEM, SG_TRC_LOSS, SG_TRC_OPT};
    for (int i = 0; i < 4; i++)
        CHECK_MSG(nh.cat[same_as_cpu[i]] == cpu.cat[same_as_cpu[i]], "class %s",
                  sg_traffic_class_name(same_as_cpu[i]));
    CHECK(nh.cat[SG_TRC_CONV] == nchw.cat[SG_TRC_CONV] &&
          nh.cat[SG_TRC_WCAST] == nchw.cat[SG_TRC_WCAST]);
    free(t);
    free(l);
    sg_model_destroy(m);
    sg_backend_destroy(be);
    /* the design a timed run reports (bench_run.c) */
    CHECK(sg_bench_traffic_design("cuda:0", "bf16", SG_LAYOUT_NHWC) == SG_TR_CUDA_BF16_NHWC);
    CHECK(sg_bench_traffic_design("cuda:0", "bf16", SG_LAYOUT_NCHW) == SG_TR_CUDA_BF16_CONVERT);
    CHECK(sg_bench_traffic_design("cpu", "bf16", SG_LAYOUT_NHWC) == SG_TR_CPU_BF16);
    CHECK(sg_bench_traffic_design("cuda:0", "fp32", SG_LAYOUT_NHWC) == SG_TR_NHWC_F32);
}

/* ---------------- kinds ---------------- */

static void kinds_of(sg_model_opts *o, int i) {
    switch (i) {
    case 0: /* DeepLabV3 with ASPP dropout */
        mt_tiny_opts(o, SG_RESNET18);
        o->aspp_dropout = 0.5f;
        break;
    case 1: /* mmseg's heads: Dropout2d */
        mt_tiny_opts(o, SG_RESNET50V1C);
        o->names = SG_NAMES_MMSEG;
        o->head_dropout = 0.1f;
        break;
    case 2: /* DeepLabV3+: the decoder's concat */
        mt_tiny_opts(o, SG_RESNET50V1C);
        o->arch = SG_ARCH_DEEPLABV3PLUS;
        o->names = SG_NAMES_MMSEG;
        o->head_dropout = 0; /* no Dropout2d (model 1 has it): test_ops counts exactly */
        break;
    case 3: /* MobileNetV3 + LR-ASPP: the gates, chan_scale, plain add */
        sg_model_opts_default(o, SG_MOBILENET_V3_LARGE);
        o->arch = SG_ARCH_LRASPP;
        o->num_classes = 3;
        o->aux_head = 0;
        break;
    case 4: /* MobileNetV3 + DeepLabV3 with aux */
        sg_model_opts_default(o, SG_MOBILENET_V3_LARGE);
        o->num_classes = 3;
        o->base_width = 8;
        break;
    }
}

static void test_kinds(void) {
    int seen[L_CHAN_SCALE + 1] = {0};
    for (int i = 0; i < 5; i++) {
        sg_model_opts mo;
        kinds_of(&mo, i);
        sg_model *m = sg_model_create(mt_backend(), &mo);
        CHECK_MSG(m != NULL, "model %d", i);
        int L = sg_model_num_layers(m);
        sg_traffic *lay = calloc((size_t)L, sizeof *lay);
        CHECK(lay != NULL);
        for (int li = 0; li < L; li++) seen[m->l[li].type]++;
        for (int d = 0; d < SG_TR_N_DESIGNS; d++) {
            sg_traffic t;
            CHECK_EQ_INT(sg_bench_traffic(m, d, 2, 1, 64, 64, &t, lay), SG_OK);
            for (int li = 0; li < L; li++) {
                const sg_layer *l = &m->l[li];
                double fw = lay[li].ph[SG_TR_FWD].read + lay[li].ph[SG_TR_FWD].write;
                CHECK_MSG(fw > 0, "model %d %s: layer %d (kind %d) moves no bytes forward", i,
                          sg_traffic_design_name(d), li, l->type);
                double bw = lay[li].ph[SG_TR_BWD].read + lay[li].ph[SG_TR_BWD].write;
                int grads = m->t[l->out].req_grad && m->t[l->in[0]].req_grad;
                /* autograd passes an add's and a concat's gradient on as is
                 * (views); a BN fused into its join runs its backward there */
                int passthrough = d == SG_TR_TORCH_AMP && (l->type == L_ADD || l->type == L_CONCAT);
                int at_join = l->type == L_BN && l->join >= 0 && d != SG_TR_TORCH_AMP;
                if (grads && !passthrough && !at_join)
                    CHECK_MSG(bw > 0, "model %d %s: layer %d (kind %d) moves no bytes backward", i,
                              sg_traffic_design_name(d), li, l->type);
            }
        }
        free(lay);
        sg_model_destroy(m);
    }
    for (int k = 0; k <= L_CHAN_SCALE; k++) CHECK_MSG(seen[k] > 0, "no model has layer kind %d", k);
}

/* ---------------- ops ---------------- */

/* The CPU backend's op table wrapped: every op the model's runner calls
 * adds the bytes its contract (kernels/backend.h) reads and writes, each
 * input once and each output once (+ the output read back when it
 * accumulates), written from the op signatures and not with the model's
 * code. A float32 NCHW training step through it must move exactly the bytes
 * nchw-f32 models, phase by phase. */
static const sg_ops *real_ops;
static sg_ops counting;
static double g_rd, g_wr;

static void io(double rd, double wr) {
    g_rd += rd;
    g_wr += wr;
}
static double F(double elems) { return 4 * elems; }
static double E(int n, int c, int hw) { return (double)n * c * hw; }
/* bytes per element of an activation stored as dt */
static double B(int dt) { return dt == SG_ACT_BF16 ? 2 : 4; }
static double dsz(const sg_conv_desc *d, int out) {
    return out ? (double)d->n * d->k * d->oh * d->ow : (double)d->n * d->c * d->h * d->w;
}

static void o_copy(sg_backend *be, void *dst, const void *src, size_t bytes) {
    io((double)bytes, (double)bytes);
    real_ops->copy(be, dst, src, bytes);
}
static void o_zero(sg_backend *be, void *p, size_t bytes) {
    io(0, (double)bytes);
    real_ops->zero(be, p, bytes);
}
static void o_conv_fwd(sg_backend *be, const sg_conv_desc *d, const float *x, const float *w,
                       float *y) {
    io(F(dsz(d, 0)) + F((double)sg_conv_weight_count(d)), F(dsz(d, 1)));
    real_ops->conv_fwd(be, d, x, w, y);
}
static void o_conv_bwd_data(sg_backend *be, const sg_conv_desc *d, const float *dy, const float *w,
                            float *dx, int acc) {
    io(F(dsz(d, 1)) + F((double)sg_conv_weight_count(d)) + (acc ? F(dsz(d, 0)) : 0), F(dsz(d, 0)));
    real_ops->conv_bwd_data(be, d, dy, w, dx, acc);
}
static void o_conv_bwd_weight(sg_backend *be, const sg_conv_desc *d, const float *x,
                              const float *dy, float *dw, int acc) {
    double W = F((double)sg_conv_weight_count(d));
    io(F(dsz(d, 0)) + F(dsz(d, 1)) + (acc ? W : 0), W);
    real_ops->conv_bwd_weight(be, d, x, dy, dw, acc);
}
static void o_bias_fwd(sg_backend *be, float *y, const float *b, int n, int c, int hw) {
    io(F(E(n, c, hw)) + F(c), F(E(n, c, hw)));
    real_ops->bias_fwd(be, y, b, n, c, hw);
}
static void o_bias_bwd(sg_backend *be, const float *dy, float *db, int n, int c, int hw, int acc) {
    io(F(E(n, c, hw)) + (acc ? F(c) : 0), F(c));
    real_ops->bias_bwd(be, dy, db, n, c, hw, acc);
}
static void o_bn_stats(sg_backend *be, const float *x, int n, int c, int hw, float *stats) {
    io(F(E(n, c, hw)), F(2 * c));
    real_ops->bn_stats(be, x, n, c, hw, stats);
}
static void o_bn_finalize(sg_backend *be, const float *parts_stats, const int64_t *counts,
                          int parts, int c, float eps, float mom, float *mean, float *invstd,
                          float *rm, float *rv) {
    io(F(2.0 * c * parts) + (rm ? F(2 * c) : 0), F(2 * c) + (rm ? F(2 * c) : 0));
    real_ops->bn_finalize(be, parts_stats, counts, parts, c, eps, mom, mean, invstd, rm, rv);
}
static void o_bn_eval_params(sg_backend *be, const float *rm, const float *rv, int c, float eps,
                             float *mean, float *invstd) {
    io(F(2 * c), F(2 * c));
    real_ops->bn_eval_params(be, rm, rv, c, eps, mean, invstd);
}
static void o_bn_fwd(sg_backend *be, const float *x, const float *mean, const float *invstd,
                     const float *gamma, const float *beta, float *y, int n, int c, int hw,
                     int relu) {
    io(F(E(n, c, hw)) + F(4 * c), F(E(n, c, hw)));
    real_ops->bn_fwd(be, x, mean, invstd, gamma, beta, y, n, c, hw, relu);
}
static void o_bn_bwd_reduce(sg_backend *be, const float *dy, const float *x, const float *y,
                            const float *mean, float *red, int n, int c, int hw, int relu) {
    io(F(E(n, c, hw)) * (2 + relu) + F(c), F(2 * c));
    real_ops->bn_bwd_reduce(be, dy, x, y, mean, red, n, c, hw, relu);
}
static void o_bn_bwd_elem(sg_backend *be, const float *dy, const float *x, const float *y,
                          const float *mean, const float *invstd, const float *gamma,
                          const float *red, double count, float *dx, int n, int c, int hw, int relu,
                          int acc) {
    io(F(E(n, c, hw)) * (2 + relu + acc) + F(3 * c) + F(2 * c), F(E(n, c, hw)));
    real_ops->bn_bwd_elem(be, dy, x, y, mean, invstd, gamma, red, count, dx, n, c, hw, relu, acc);
}
static void o_bn_param_grads(sg_backend *be, const float *red, const float *invstd, float *dg,
                             float *db, int c, int acc) {
    io(F(3 * c) + (acc ? F(2 * c) : 0), F(2 * c));
    real_ops->bn_param_grads(be, red, invstd, dg, db, c, acc);
}
static void o_bn_add_relu_fwd(sg_backend *be, const void *x, int x_dt, const float *mean,
                              const float *invstd, const float *gamma, const float *beta,
                              const void *res, int res_dt, void *y, int y_dt, int n, int c,
                              int hw) {
    io(E(n, c, hw) * (B(x_dt) + B(res_dt)) + F(4 * c), E(n, c, hw) * B(y_dt));
    real_ops->bn_add_relu_fwd(be, x, x_dt, mean, invstd, gamma, beta, res, res_dt, y, y_dt, n, c,
                              hw);
}
static void o_bn_bwd_reduce_res(sg_backend *be, const float *dy, const void *x, int x_dt,
                                const void *y, int y_dt, const float *mean, float *red, float *dres,
                                int n, int c, int hw, int acc) {
    double e = E(n, c, hw);
    io(e * (B(x_dt) + B(y_dt)) + F(e) * (1 + (dres && acc)) + F(c), F(2 * c) + (dres ? F(e) : 0));
    real_ops->bn_bwd_reduce_res(be, dy, x, x_dt, y, y_dt, mean, red, dres, n, c, hw, acc);
}
static void o_relu_fwd(sg_backend *be, const float *x, float *y, size_t n) {
    io(F((double)n), F((double)n));
    real_ops->relu_fwd(be, x, y, n);
}
static void o_relu_bwd(sg_backend *be, const float *dy, const float *y, float *dx, size_t n,
                       int acc) {
    io(F((double)n) * (2 + acc), F((double)n));
    real_ops->relu_bwd(be, dy, y, dx, n, acc);
}
static void o_add(sg_backend *be, const float *a, const float *b, float *y, size_t n, int relu) {
    io(F(2.0 * n), F((double)n));
    real_ops->add(be, a, b, y, n, relu);
}
static void o_scale(sg_backend *be, const float *x, float *y, float alpha, size_t n) {
    io(F((double)n), F((double)n));
    real_ops->scale(be, x, y, alpha, n);
}
static void o_axpy(sg_backend *be, float alpha, const float *x, float *y, size_t n) {
    io(F(2.0 * n), F((double)n));
    real_ops->axpy(be, alpha, x, y, n);
}
static void o_hardswish_fwd(sg_backend *be, const float *x, float *y, size_t n) {
    io(F((double)n), F((double)n));
    real_ops->hardswish_fwd(be, x, y, n);
}
static void o_hardswish_bwd(sg_backend *be, const float *dy, const float *x, float *dx, size_t n,
                            int acc) {
    io(F((double)n) * (2 + acc), F((double)n));
    real_ops->hardswish_bwd(be, dy, x, dx, n, acc);
}
static void o_hardsigmoid_fwd(sg_backend *be, const float *x, float *y, size_t n) {
    io(F((double)n), F((double)n));
    real_ops->hardsigmoid_fwd(be, x, y, n);
}
static void o_hardsigmoid_bwd(sg_backend *be, const float *dy, const float *x, float *dx, size_t n,
                              int acc) {
    io(F((double)n) * (2 + acc), F((double)n));
    real_ops->hardsigmoid_bwd(be, dy, x, dx, n, acc);
}
static void o_sigmoid_fwd(sg_backend *be, const float *x, float *y, size_t n) {
    io(F((double)n), F((double)n));
    real_ops->sigmoid_fwd(be, x, y, n);
}
static void o_sigmoid_bwd(sg_backend *be, const float *dy, const float *y, float *dx, size_t n,
                          int acc) {
    io(F((double)n) * (2 + acc), F((double)n));
    real_ops->sigmoid_bwd(be, dy, y, dx, n, acc);
}
static void o_chan_scale_fwd(sg_backend *be, const float *x, const float *sc, float *y, int n,
                             int c, int hw) {
    io(F(E(n, c, hw)) + F((double)n * c), F(E(n, c, hw)));
    real_ops->chan_scale_fwd(be, x, sc, y, n, c, hw);
}
static void o_chan_scale_bwd(sg_backend *be, const float *dy, const float *x, const float *sc,
                             float *dx, float *ds, int n, int c, int hw, int acc_dx, int acc_ds) {
    double e = E(n, c, hw), v = (double)n * c;
    double rd = F(e) * 2 + F(v) + (dx && acc_dx ? F(e) : 0) + (ds && acc_ds ? F(v) : 0);
    io(rd, (dx ? F(e) : 0) + (ds ? F(v) : 0));
    real_ops->chan_scale_bwd(be, dy, x, sc, dx, ds, n, c, hw, acc_dx, acc_ds);
}
static void o_maxpool_fwd(sg_backend *be, const float *x, float *y, int32_t *idx, int n, int c,
                          int h, int w, int oh, int ow) {
    io(F(E(n, c, h * w)), F(E(n, c, oh * ow)) * 2);
    real_ops->maxpool_fwd(be, x, y, idx, n, c, h, w, oh, ow);
}
static void o_maxpool_bwd(sg_backend *be, const float *dy, const int32_t *idx, float *dx, int n,
                          int c, int h, int w, int oh, int ow) {
    io(F(E(n, c, oh * ow)) * 2, F(E(n, c, h * w)));
    real_ops->maxpool_bwd(be, dy, idx, dx, n, c, h, w, oh, ow);
}
static void o_avgpool_fwd(sg_backend *be, const void *x, int x_dt, float *y, int n, int c, int hw) {
    io(E(n, c, hw) * B(x_dt), F(E(n, c, 1)));
    real_ops->avgpool_fwd(be, x, x_dt, y, n, c, hw);
}
static void o_avgpool_bwd(sg_backend *be, const float *dy, float *dx, int n, int c, int hw,
                          int acc) {
    io(F(E(n, c, 1)) + (acc ? F(E(n, c, hw)) : 0), F(E(n, c, hw)));
    real_ops->avgpool_bwd(be, dy, dx, n, c, hw, acc);
}
static void o_resize_fwd(sg_backend *be, const float *x, float *y, int n, int c, int h, int w,
                         int oh, int ow) {
    io(F(E(n, c, h * w)), F(E(n, c, oh * ow)));
    real_ops->resize_fwd(be, x, y, n, c, h, w, oh, ow);
}
static void o_resize_bwd(sg_backend *be, const float *dy, float *dx, int n, int c, int h, int w,
                         int oh, int ow, int acc) {
    io(F(E(n, c, oh * ow)) + (acc ? F(E(n, c, h * w)) : 0), F(E(n, c, h * w)));
    real_ops->resize_bwd(be, dy, dx, n, c, h, w, oh, ow, acc);
}
static void o_concat_fwd(sg_backend *be, const void *src, int src_dt, void *dst, int dst_dt, int n,
                         int c_src, int c_dst, int c_off, int hw) {
    io(E(n, c_src, hw) * B(src_dt), E(n, c_src, hw) * B(dst_dt));
    real_ops->concat_fwd(be, src, src_dt, dst, dst_dt, n, c_src, c_dst, c_off, hw);
}
static void o_concat_bwd(sg_backend *be, const float *dy, float *dsrc, int n, int c_src, int c_dst,
                         int c_off, int hw, int acc) {
    io(F(E(n, c_src, hw)) * (1 + acc), F(E(n, c_src, hw)));
    real_ops->concat_bwd(be, dy, dsrc, n, c_src, c_dst, c_off, hw, acc);
}
static void o_dropout_fwd(sg_backend *be, const float *x, float *y, uint8_t *mask, size_t n, int c,
                          int hw, float p, uint64_t salt) {
    io(F((double)n), F((double)n) + (double)n);
    real_ops->dropout_fwd(be, x, y, mask, n, c, hw, p, salt);
}
static void o_dropout_bwd(sg_backend *be, const float *dy, const uint8_t *mask, float *dx, size_t n,
                          float p, int acc) {
    io(F((double)n) * (1 + acc) + (double)n, F((double)n));
    real_ops->dropout_bwd(be, dy, mask, dx, n, p, acc);
}
static void o_ce_fwd_bwd(sg_backend *be, const float *logits, const uint8_t *labels, int n, int c,
                         int hw, int ignore, float scale, float *dl, double *loss, int64_t *valid) {
    io(F(E(n, c, hw)) + (double)n * hw, F(E(n, c, hw)));
    real_ops->ce_fwd_bwd(be, logits, labels, n, c, hw, ignore, scale, dl, loss, valid);
}
static void o_sgd_step(sg_backend *be, float *param, const float *grad, float *buf, size_t n,
                       float lr, float mom, float damp, float wd, int nesterov, int first) {
    io(F(3.0 * n), F(2.0 * n));
    real_ops->sgd_step(be, param, grad, buf, n, lr, mom, damp, wd, nesterov, first);
}

static void o_conv_fwd_dt(sg_backend *be, const sg_conv_desc *d, const void *x, int x_dt,
                          const float *w, void *y, int y_dt) {
    io(dsz(d, 0) * B(x_dt) + F((double)sg_conv_weight_count(d)), dsz(d, 1) * B(y_dt));
    real_ops->conv_fwd_dt(be, d, x, x_dt, w, y, y_dt);
}
static void o_conv_bwd_weight_dt(sg_backend *be, const sg_conv_desc *d, const void *x, int x_dt,
                                 const void *dy, int dy_dt, float *dw, int acc) {
    double W = F((double)sg_conv_weight_count(d));
    io(dsz(d, 0) * B(x_dt) + dsz(d, 1) * B(dy_dt) + (acc ? W : 0), W);
    real_ops->conv_bwd_weight_dt(be, d, x, x_dt, dy, dy_dt, dw, acc);
}
/* both backward passes (or one, dw / dx NULL): counted as the two ops
 * (which the backends' own conv_bwd_dt computes, with dy's conversion
 * shared on the CPU's bf16 GEMM paths: an internal copy the model does not
 * count anyway); bf16 gradients 2 bytes a value */
static void o_conv_bwd_dt(sg_backend *be, const sg_conv_desc *d, const void *x, int x_dt,
                          const void *dy, int dy_dt, const float *w, float *dw, int acc_w, void *dx,
                          int dx_dt, int acc_x) {
    if (dw) o_conv_bwd_weight_dt(be, d, x, x_dt, dy, dy_dt, dw, acc_w);
    if (!dx) return;
    if (dy_dt == SG_ACT_F32 && dx_dt == SG_ACT_F32) {
        o_conv_bwd_data(be, d, dy, w, dx, acc_x);
        return;
    }
    io(dsz(d, 1) * B(dy_dt) + F((double)sg_conv_weight_count(d)) +
           (acc_x ? dsz(d, 0) * B(dx_dt) : 0),
       dsz(d, 0) * B(dx_dt));
    real_ops->conv_bwd_dt(be, d, x, x_dt, dy, dy_dt, w, NULL, 0, dx, dx_dt, acc_x);
}
static void o_bn_stats_dt(sg_backend *be, const void *x, int x_dt, int n, int c, int hw,
                          float *stats) {
    io(E(n, c, hw) * B(x_dt), F(2 * c));
    real_ops->bn_stats_dt(be, x, x_dt, n, c, hw, stats);
}
static void o_bn_fwd_dt(sg_backend *be, const void *x, int x_dt, const float *mean,
                        const float *invstd, const float *gamma, const float *beta, void *y,
                        int y_dt, int n, int c, int hw, int relu) {
    io(E(n, c, hw) * B(x_dt) + F(4 * c), E(n, c, hw) * B(y_dt));
    real_ops->bn_fwd_dt(be, x, x_dt, mean, invstd, gamma, beta, y, y_dt, n, c, hw, relu);
}
/* y NULL with relu: the mask recomputed from x with invstd, gamma, beta */
static void o_bn_bwd_reduce_dt(sg_backend *be, const void *dy, int dy_dt, const void *x, int x_dt,
                               const float *y, const float *mean, const float *invstd,
                               const float *gamma, const float *beta, float *red, int n, int c,
                               int hw, int relu) {
    double e = E(n, c, hw), mask = relu ? (y ? F(e) : F(3 * c)) : 0;
    io(e * B(dy_dt) + e * B(x_dt) + mask + F(c), F(2 * c));
    real_ops->bn_bwd_reduce_dt(be, dy, dy_dt, x, x_dt, y, mean, invstd, gamma, beta, red, n, c, hw,
                               relu);
}
static void o_bn_bwd_elem_dt(sg_backend *be, const void *dy, int dy_dt, const void *x, int x_dt,
                             const float *y, const float *mean, const float *invstd,
                             const float *gamma, const float *beta, const float *red, double count,
                             void *dx, int dx_dt, int n, int c, int hw, int relu, int acc) {
    double e = E(n, c, hw), mask = relu ? (y ? F(e) : F(c)) : 0;
    io(e * B(dy_dt) + e * B(dx_dt) * acc + e * B(x_dt) + mask + F(5 * c), e * B(dx_dt));
    real_ops->bn_bwd_elem_dt(be, dy, dy_dt, x, x_dt, y, mean, invstd, gamma, beta, red, count, dx,
                             dx_dt, n, c, hw, relu, acc);
}

static void count_ops(sg_backend *be) {
    real_ops = be->ops;
    sg_ops o = *real_ops;
    o.copy = o_copy;
    o.zero = o_zero;
    o.conv_fwd = o_conv_fwd;
    o.conv_bwd_data = o_conv_bwd_data;
    o.conv_bwd_weight = o_conv_bwd_weight;
    o.bias_fwd = o_bias_fwd;
    o.bias_bwd = o_bias_bwd;
    o.bn_stats = o_bn_stats;
    o.bn_finalize = o_bn_finalize;
    o.bn_eval_params = o_bn_eval_params;
    o.bn_fwd = o_bn_fwd;
    o.bn_bwd_reduce = o_bn_bwd_reduce;
    o.bn_bwd_elem = o_bn_bwd_elem;
    o.bn_param_grads = o_bn_param_grads;
    o.bn_add_relu_fwd = o_bn_add_relu_fwd;
    o.bn_bwd_reduce_res = o_bn_bwd_reduce_res;
    o.relu_fwd = o_relu_fwd;
    o.relu_bwd = o_relu_bwd;
    o.add = o_add;
    o.scale = o_scale;
    o.axpy = o_axpy;
    o.hardswish_fwd = o_hardswish_fwd;
    o.hardswish_bwd = o_hardswish_bwd;
    o.hardsigmoid_fwd = o_hardsigmoid_fwd;
    o.hardsigmoid_bwd = o_hardsigmoid_bwd;
    o.sigmoid_fwd = o_sigmoid_fwd;
    o.sigmoid_bwd = o_sigmoid_bwd;
    o.chan_scale_fwd = o_chan_scale_fwd;
    o.chan_scale_bwd = o_chan_scale_bwd;
    o.maxpool_fwd = o_maxpool_fwd;
    o.maxpool_bwd = o_maxpool_bwd;
    o.avgpool_fwd = o_avgpool_fwd;
    o.avgpool_bwd = o_avgpool_bwd;
    o.resize_fwd = o_resize_fwd;
    o.resize_bwd = o_resize_bwd;
    o.concat_fwd = o_concat_fwd;
    o.concat_bwd = o_concat_bwd;
    o.dropout_fwd = o_dropout_fwd;
    o.dropout_bwd = o_dropout_bwd;
    o.ce_fwd_bwd = o_ce_fwd_bwd;
    o.sgd_step = o_sgd_step;
    o.conv_fwd_dt = o_conv_fwd_dt;
    o.conv_bwd_weight_dt = o_conv_bwd_weight_dt;
    o.conv_bwd_dt = o_conv_bwd_dt;
    o.bn_stats_dt = o_bn_stats_dt;
    o.bn_fwd_dt = o_bn_fwd_dt;
    o.bn_bwd_reduce_dt = o_bn_bwd_reduce_dt;
    o.bn_bwd_elem_dt = o_bn_bwd_elem_dt;
    counting = o;
    be->ops = &counting;
}

static int same_bytes(const char *what, int model, const sg_traffic_cost *c, double rd, double wr) {
    if (c->read == rd && c->write == wr) return 1;
    fprintf(stderr, "  model %d %s: modelled read %.0f written %.0f, the ops %.0f and %.0f\n",
            model, what, c->read, c->write, rd, wr);
    return 0;
}

/* Forward, the cross-entropy of both heads and backward of model i
 * (kinds_of) at batch 2, 40x56, accum micro-batches, on be through the
 * counting ops, against design's phases. */
static int ops_step(sg_backend *be, int design, int i, int accum) {
    enum { NB = 2, HH = 40, WW = 56 };
    sg_model_opts mo;
    kinds_of(&mo, i);
    sg_model *m = sg_model_create(be, &mo);
    if (!m || sg_model_plan(m, NB, HH, WW) != SG_OK) return 0;
    size_t nin = (size_t)NB * 3 * HH * WW, px = (size_t)NB * HH * WW;
    float *x = malloc(nin * sizeof(float));
    uint8_t *lab = malloc(px);
    uint8_t *dlab = be->ops->alloc(be, px);
    for (size_t k = 0; k < nin; k++) x[k] = (float)sin(0.37 * (double)k);
    for (size_t k = 0; k < px; k++) lab[k] = (uint8_t)(k % (size_t)mo.num_classes);
    be->ops->upload(be, sg_model_input(m), x, nin * sizeof(float));
    be->ops->upload(be, dlab, lab, px);
    sg_traffic t;
    if (sg_bench_traffic(m, design, NB, accum, HH, WW, &t, NULL) != SG_OK) return 0;
    double ph[SG_TR_N_PHASES][2] = {{0}};
    count_ops(be);
    for (int k = 0; k < accum; k++) {
        g_rd = g_wr = 0;
        sg_model_forward(m, 1, 7);
        ph[SG_TR_FWD][0] += g_rd;
        ph[SG_TR_FWD][1] += g_wr;
        g_rd = g_wr = 0;
        double loss;
        int64_t valid;
        be->ops->ce_fwd_bwd(be, sg_model_out(m), dlab, NB, mo.num_classes, HH * WW, 255, 1e-3f,
                            sg_model_dout(m), &loss, &valid);
        if (sg_model_aux(m))
            be->ops->ce_fwd_bwd(be, sg_model_aux(m), dlab, NB, mo.num_classes, HH * WW, 255, 1e-3f,
                                sg_model_daux(m), &loss, &valid);
        ph[SG_TR_LOSS][0] += g_rd;
        ph[SG_TR_LOSS][1] += g_wr;
        g_rd = g_wr = 0;
        sg_model_backward(m, k > 0);
        ph[SG_TR_BWD][0] += g_rd;
        ph[SG_TR_BWD][1] += g_wr;
    }
    be->ops = real_ops;
    int ok = 1;
    for (int p = 0; p < SG_TR_OPT; p++)
        ok &= same_bytes(sg_traffic_phase_name(p), i, &t.ph[p], ph[p][0], ph[p][1]);
    /* the optimizer: one sgd_step pass over every trainable parameter */
    double opt = 0;
    for (int k = 0; k < sg_model_num_params(m); k++) {
        const sg_param *p = sg_model_param(m, k);
        if (!p->is_buffer && p->trainable) opt += (double)p->count;
    }
    ok &= same_bytes("optimizer", i, &t.ph[SG_TR_OPT], 12 * opt, 8 * opt);
    be->ops->free(be, dlab);
    free(x);
    free(lab);
    sg_model_destroy(m);
    return ok;
}

static void test_ops(void) {
    /* every kind but Dropout2d (model 1), whose NCHW runs skip reading the
     * dropped planes (the model reads the whole input: an upper bound) */
    const int models[] = {0, 2, 3, 4};
    /* float32: nchw-f32; bf16 convolutions with the plan's bf16 storage:
     * cpu-bf16 (the *_dt ops' bytes) */
    sg_backend_opts bo = {.threads = 2, .precision = SG_PRECISION_BF16};
    sg_backend *bf16 = sg_backend_create("cpu", &bo);
    CHECK(bf16 != NULL);
    for (int j = 0; j < 4; j++) {
        CHECK_MSG(ops_step(mt_backend(), SG_TR_NCHW_F32, models[j], 1), "model %d, fp32",
                  models[j]);
        CHECK_MSG(ops_step(mt_backend(), SG_TR_NCHW_F32, models[j], 2),
                  "model %d, fp32, two micro-batches", models[j]);
        CHECK_MSG(ops_step(bf16, SG_TR_CPU_BF16, models[j], 1), "model %d, bf16", models[j]);
    }
    sg_backend_destroy(bf16);
}

/* A layer kind the model has no rule for: a fatal internal error (exit 1),
 * never a silent 0. */
static void test_unknown_kind(void) {
    fflush(stderr);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        sg_model_opts mo;
        mt_tiny_opts(&mo, SG_RESNET18);
        sg_model *m = sg_model_create(mt_backend(), &mo);
        m->l[3].type = 99;
        sg_traffic t;
        sg_bench_traffic(m, SG_TR_NCHW_F32, 1, 1, 32, 32, &t, NULL);
        _exit(0);
    }
    int st;
    CHECK(waitpid(pid, &st, 0) == pid);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 1);
}

/* ---------------- cli ---------------- */

static int run(const char *cmd) {
    int st = system(cmd);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void test_cli(void) {
    const char *tmp = getenv("TMPDIR");
    char dir[512], yaml[600], json[600], out[600], cmd[3000];
    snprintf(dir, sizeof dir, "%s/sg_traffic_XXXXXX", tmp ? tmp : "/tmp");
    CHECK(mkdtemp(dir) != NULL);
    snprintf(yaml, sizeof yaml, "%s/tiny.yaml", dir);
    snprintf(json, sizeof json, "%s/traffic.json", dir);
    snprintf(out, sizeof out, "%s/out.txt", dir);
    FILE *f = fopen(yaml, "w");
    CHECK(f != NULL);
    /* a crop far too large to plan on a small machine: --traffic plans nothing */
    fprintf(f, "device: cpu\nthreads: 1\nmodel:\n  backbone: resnet18\n  base_width: 8\n"
               "  aspp_rates: [2, 4, 6]\n  num_classes: 5\n"
               "data:\n  label_map: none\n  crop_size: [4096, 8192]\n"
               "train:\n  batch_size: 64\n  accum_steps: 2\n");
    fclose(f);
    snprintf(cmd, sizeof cmd, "'%s' bench --config '%s' --traffic --json '%s' --quiet > '%s'",
             g_segtrain, yaml, json, out);
    CHECK_EQ_INT(run(cmd), 0);
    char *txt = th_read_file(out), *js = th_read_file(json);
    CHECK(txt != NULL && js != NULL);
    int names = 1, fields = 1;
    for (int d = 0; d < SG_TR_N_DESIGNS; d++) {
        char key[64];
        snprintf(key, sizeof key, "\n  %s ", sg_traffic_design_name(d));
        if (!strstr(txt, key)) names = 0;
        snprintf(key, sizeof key, "\"%s\":{\"design\":\"%s\"", sg_traffic_design_name(d),
                 sg_traffic_design_name(d));
        if (!strstr(js, key)) fields = 0;
    }
    double rd = th_json_num(js, "read_mb"), gf = th_json_num(js, "gflop");
    /* the printed cuda-bf16-nhwc row is the model's for that config */
    const char *row = strstr(js, "\"cuda-bf16-nhwc\":{");
    const char *row_step = row ? strstr(row, "\"step\":{") : NULL;
    double row_rd = row_step ? th_json_num(row_step, "read_mb") : NAN;
    double row_wr = row_step ? th_json_num(row_step, "write_mb") : NAN;
    int shape = strstr(js, "\"crop\":[4096,8192]") && th_json_num(js, "batch") == 64 &&
                th_json_num(js, "accum_steps") == 2 && strstr(js, "\"classes_mb\":{") &&
                strstr(js, "\"step\":{") && strstr(js, "\"optimizer\":{");
    int header = strstr(txt, "batch 64 x accum 2, 4096x8192") != NULL;
    free(txt);
    free(js);
    CHECK(names && fields && shape && header);
    CHECK(rd > 0 && gf > 0);
    sg_config cfg;
    sg_config_defaults(&cfg);
    CHECK_EQ_INT(sg_config_load_file(&cfg, yaml), SG_OK);
    sg_model_opts mo;
    CHECK_EQ_INT(sg_model_opts_from_config(&mo, &cfg), SG_OK);
    sg_model *m = sg_model_create(mt_backend(), &mo);
    CHECK(m != NULL);
    sg_traffic mt;
    CHECK_EQ_INT(sg_bench_traffic(m, SG_TR_CUDA_BF16_NHWC, 64, 2, 4096, 8192, &mt, NULL), SG_OK);
    double want_rd = 0, want_wr = 0;
    for (int p = 0; p < SG_TR_N_PHASES; p++) {
        want_rd += mt.ph[p].read;
        want_wr += mt.ph[p].write;
    }
    CHECK_MSG(row_rd == want_rd / 1e6 && row_wr == want_wr / 1e6,
              "printed cuda-bf16-nhwc %.17g / %.17g MB, the model %.17g / %.17g", row_rd, row_wr,
              want_rd / 1e6, want_wr / 1e6);
    sg_model_destroy(m);
    /* a run reports its design's model beside the measured phases */
    snprintf(cmd, sizeof cmd,
             "'%s' bench --config '%s' --set data.crop_size=[32,48] --set train.batch_size=2 "
             "--set cpu.layout=nchw --iters 1 --warmup 0 --peak-gflops 0 --json '%s' --quiet "
             "> '%s'",
             g_segtrain, yaml, json, out);
    CHECK_EQ_INT(run(cmd), 0);
    txt = th_read_file(out);
    js = th_read_file(json);
    CHECK(txt != NULL && js != NULL);
    const char *tr = strstr(js, "\"traffic\":{\"design\":\"nchw-f32\"");
    const char *fw = tr ? strstr(tr, "\"forward\":{") : NULL;
    double gbs = fw ? th_json_num(fw, "gb_s") : NAN, ms = fw ? th_json_num(fw, "ms") : NAN;
    double fwd_ms = th_json_num(js, "forward_ms_median");
    int printed = strstr(txt, "traffic     modelled per step, design nchw-f32") != NULL;
    free(txt);
    free(js);
    CHECK(tr && fw && printed);
    CHECK(gbs > 0 && ms == fwd_ms);
    /* --traffic runs nothing: timing options are a usage error */
    snprintf(cmd, sizeof cmd, "'%s' bench --config '%s' --traffic --iters 3 2>/dev/null",
             g_segtrain, yaml);
    CHECK_EQ_INT(run(cmd), 2);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    CHECK(system(cmd) == 0);
}

int main(int argc, char **argv) {
    sg_log_set_level(SG_LOG_WARN);
    TEST_RUN(test_hand);
    TEST_RUN(test_sums);
    TEST_RUN(test_follows);
    TEST_RUN(test_kinds);
    TEST_RUN(test_ops);
    TEST_RUN(test_unknown_kind);
    if (argc > 1) {
        g_segtrain = argv[1];
        TEST_RUN(test_cli);
    }
    return TEST_EXIT();
}
