/* tests/data/loader_bench.c - measures the data pipeline on real-size
 * images (not a test: no thresholds; numbers go to docs/BENCHMARKS.md).
 *
 *   segtrain synth --out /tmp/cs --train 8 --val 0 --size 1024x2048
 *   data_loader_bench /tmp/cs [workers=1,2] [passes=2] [format=cityscapes]
 *   segtrain synth --layout ade20k --out /tmp/ade --train 8 --val 0 --size 1024x2048
 *   data_loader_bench /tmp/ade 1,2 2 ade20k     (JPEG images; voc too)
 *
 * Prints, per image: decode time (image PNG or JPEG + PNG mask), augment
 * time (scale 0.5-2, crop 512x1024, flip; then again with mmsegmentation's
 * cat_max_ratio 0.75 and PhotoMetricDistortion), and the loader's images/s
 * for each worker count (train mode, batch 2, without those two). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "data/loader.h"
#include "data/transforms.h"
#include "tests/helpers.h"

/* CPU time of this thread: what one worker costs, whatever else the
 * (shared) machine runs meanwhile. */
static double cpu_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s ROOT [workers,...] [passes] [cityscapes|voc|ade20k]\n", argv[0]);
        return 2;
    }
    const char *workers_arg = argc > 2 ? argv[2] : "1,2";
    int passes = argc > 3 ? atoi(argv[3]) : 2;
    const char *format = argc > 4 ? argv[4] : "cityscapes";
    int cs = strcmp(format, "cityscapes") == 0;
    sg_data_cfg c;
    memset(&c, 0, sizeof c);
    snprintf(c.format, sizeof c.format, "%s", format);
    snprintf(c.root, sizeof c.root, "%s", argv[1]);
    snprintf(c.label_map, sizeof c.label_map, "%s", cs ? "cityscapes" : "none");
    snprintf(c.invalid_labels, sizeof c.invalid_labels, "error");
    c.ignore_index = 255;
    c.crop_size[0] = 512;
    c.crop_size[1] = 1024;
    c.scale_range[0] = 0.5;
    c.scale_range[1] = 2.0;
    c.hflip = 1;
    c.cat_max_ratio = 1.0;
    c.prefetch = 4;
    const char *split = cs ? "train" : strcmp(format, "voc") == 0 ? "train+aug" : "training";
    sg_dataset *ds = sg_dataset_open(&c, split, cs ? 19 : strcmp(format, "voc") == 0 ? 21 : 150);
    if (!ds) return 1;
    int64_t n = sg_dataset_size(ds);

    /* Single thread, stage by stage. */
    sg_aug_opts a = {.scale_lo = 0.5,
                     .scale_hi = 2.0,
                     .crop_h = 512,
                     .crop_w = 1024,
                     .hflip = 1,
                     .ignore_index = 255,
                     .cat_max_ratio = 1.0};
    sg_aug_opts am = a; /* mmseg's Cityscapes pipeline */
    am.cat_max_ratio = 0.75;
    am.photo = (sg_photo_opts){1, 32, 0.5, 1.5, 0.5, 1.5, 18};
    uint8_t *oi = malloc(512 * 1024 * 3), *om = malloc(512 * 1024);
    double t_dec = 0, t_aug = 0, c_dec = 0, c_aug = 0, c_aug_mm = 0;
    int h = 0, w = 0;
    for (int p = 0; p < passes; p++) {
        for (int64_t i = 0; i < n; i++) {
            sg_img im, m;
            double t0 = th_now(), c0 = cpu_s();
            if (sg_dataset_load(ds, i, &im, &m, NULL, 0) != 0) return 1;
            double t1 = th_now(), c1 = cpu_s();
            sg_aug_draw d;
            if (sg_aug_make_draw(&a, 0, p, i, m.data, im.h, im.w, &d) != 0 ||
                sg_aug_apply(&a, &d, im.data, m.data, im.h, im.w, oi, om) != 0)
                return 1;
            t_aug += th_now() - t1;
            t_dec += t1 - t0;
            c_aug += cpu_s() - c1;
            c_dec += c1 - c0;
            double c2 = cpu_s();
            if (sg_aug_make_draw(&am, 0, p, i, m.data, im.h, im.w, &d) != 0 ||
                sg_aug_apply(&am, &d, im.data, m.data, im.h, im.w, oi, om) != 0)
                return 1;
            c_aug_mm += cpu_s() - c2;
            h = im.h;
            w = im.w;
            sg_img_free(&im);
            sg_img_free(&m);
        }
    }
    double k = 1.0 / (passes * n);
    printf("images: %lld of %dx%d, %d passes\n", (long long)n, h, w, passes);
    printf("per image, one thread, CPU time: decode (image + mask PNG) %.1f ms, augment %.1f ms, "
           "total %.1f ms = %.1f images/s per worker thread\n",
           c_dec * k * 1e3, c_aug * k * 1e3, (c_dec + c_aug) * k * 1e3,
           1.0 / ((c_dec + c_aug) * k));
    printf("per image, one thread, wall time: decode %.1f ms, augment %.1f ms\n", t_dec * k * 1e3,
           t_aug * k * 1e3);
    printf("per image, one thread, CPU time: augment with cat_max_ratio 0.75 and photometric "
           "%.1f ms\n",
           c_aug_mm * k * 1e3);

    /* The loader with each worker count. */
    int64_t *list = malloc(sizeof(int64_t) * (size_t)n);
    for (int64_t i = 0; i < n; i++) list[i] = i;
    char buf[256];
    snprintf(buf, sizeof buf, "%s", workers_arg);
    for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        sg_loader_opts o;
        sg_loader_opts_from_config(&o, &c, 1, 2, 0);
        o.workers = atoi(t);
        sg_loader *l = sg_loader_create(ds, &o);
        if (!l) return 1;
        double t0 = th_now();
        int64_t imgs = 0;
        for (int p = 0; p < passes; p++) {
            if (sg_loader_start(l, list, n, p) != 0) return 1;
            sg_batch *b;
            int rc;
            while ((rc = sg_loader_next(l, &b)) == 1) {
                imgs += b->n;
                sg_loader_release(l, b);
            }
            if (rc < 0) return 1;
        }
        double dt = th_now() - t0;
        sg_loader_stats st;
        sg_loader_get_stats(l, &st);
        printf("loader, %d workers: %.1f images/s (decode+augment %.2f s total, consumer waited "
               "%.2f s of %.2f s)\n",
               o.workers, imgs / dt, st.decode_s, st.consumer_wait_s, dt);
        sg_loader_destroy(l);
    }
    free(list);
    free(oi);
    free(om);
    sg_dataset_close(ds);
    return 0;
}
