/* tests/model/check_torchvision.c - check tool (not a meson test: its input
 * is 168 MB): the FULL torchvision deeplabv3_resnet50 against segtrain.
 *
 *   /usr/bin/python3 scripts/make_golden.py --full DIR
 *   check_torchvision DIR [device]
 *
 * Loads DIR/deeplabv3_resnet50_tv.safetensors (torchvision's own state_dict,
 * torchvision names) strictly, runs an eval forward on the saved input and
 * compares out/aux with torchvision's float64 logits. Exit 0 if both are
 * within 1e-4 relative to the max |logit|, 1 otherwise.
 */
#include <math.h>

#include "model/model_io.h"
#include "tests/model/model_testutil.h"

static double max_rel_err(const float *a, const float *b, size_t n) {
    double d = 0, mx = 1e-3;
    for (size_t i = 0; i < n; i++) {
        d = fmax(d, fabs((double)a[i] - b[i]));
        mx = fmax(mx, fabs((double)a[i]));
    }
    return d / mx;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: check_torchvision DIR [device]\n");
        return 2;
    }
    if (argc > 2) setenv("SG_TEST_DEVICE", argv[2], 1);
    char wpath[1024], iopath[1024];
    snprintf(wpath, sizeof wpath, "%s/deeplabv3_resnet50_tv.safetensors", argv[1]);
    snprintf(iopath, sizeof iopath, "%s/deeplabv3_resnet50_io.safetensors", argv[1]);
    sg_backend *be = mt_backend();
    sg_model_opts o;
    sg_model_opts_default(&o, SG_RESNET50);
    o.num_classes = 19;
    sg_model *m = sg_model_create(be, &o);
    sg_load_report r;
    if (!m || sg_model_load(m, wpath, 1, &r) != 0) return 1;
    sg_st_file *f = sg_st_open(iopath);
    if (!f) return 1;
    const sg_st_tensor *x = sg_st_find(f, "input");
    int h = atoi(sg_st_meta(f, "h")), w = atoi(sg_st_meta(f, "w"));
    if (!x || sg_model_plan_infer(m, 1, h, w) != 0) return 1;
    float *xx = malloc(x->nbytes);
    sg_st_read_f32(f, x, xx, x->count);
    be->ops->upload(be, sg_model_input(m), xx, x->nbytes);
    sg_model_forward(m, 0, 0);
    int bad = 0;
    const char *names[2] = {"out", "aux"};
    for (int k = 0; k < 2; k++) {
        const sg_st_tensor *t = sg_st_find(f, names[k]);
        float *ref = malloc(t->nbytes);
        sg_st_read_f32(f, t, ref, t->count);
        float *got = mt_download(be, k ? sg_model_aux(m) : sg_model_out(m), t->count);
        double e = max_rel_err(ref, got, t->count);
        printf("deeplabv3_resnet50 %s: max rel err %.3g over %zu logits (tolerance 1e-4)\n",
               names[k], e, t->count);
        bad |= !(e < 1e-4);
        free(ref);
        free(got);
    }
    free(xx);
    sg_st_close(f);
    sg_model_destroy(m);
    return bad;
}
