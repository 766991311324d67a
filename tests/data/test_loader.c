/* tests/data/test_loader.c - the threaded loader: batches bit-identical for
 * 0/1/2/3 workers and equal to decoding + augmenting by hand; eval batching by
 * size; errors in workers reach the caller with the file named; shutdown
 * mid-epoch; the host allocator hook. */
#include <dirent.h>
#include <signal.h>

#include "data/loader.h"
#include "data/sampler.h"
#include "data/synth.h"
#include "data/transforms.h"
#include "data_test.h"
#include "testutil.h"

static char synth_root[1024];

static sg_data_cfg cs_cfg(const char *root) {
    sg_data_cfg c;
    memset(&c, 0, sizeof c);
    snprintf(c.format, sizeof c.format, "cityscapes");
    snprintf(c.root, sizeof c.root, "%s", root);
    snprintf(c.label_map, sizeof c.label_map, "cityscapes");
    snprintf(c.invalid_labels, sizeof c.invalid_labels, "error");
    c.ignore_index = 255;
    c.crop_size[0] = 24;
    c.crop_size[1] = 32;
    c.scale_range[0] = 0.5;
    c.scale_range[1] = 2.0;
    c.hflip = 1;
    c.cat_max_ratio = 0.75; /* mmseg's Cityscapes pipeline */
    c.photometric = 1;
    c.brightness_delta = 32;
    c.contrast_range[0] = c.saturation_range[0] = 0.5;
    c.contrast_range[1] = c.saturation_range[1] = 1.5;
    c.hue_delta = 18;
    c.workers = 2;
    c.prefetch = 2;
    return c;
}

static void make_synth(void) {
    snprintf(synth_root, sizeof synth_root, "%s", dt_path("synth"));
    sg_synth_opts o;
    sg_synth_defaults(&o);
    o.out = synth_root;
    o.n_train = 13;
    o.n_val = 3;
    o.h = 37;
    o.w = 53;
    o.seed = 5;
    if (sg_synth_write(&o) != 0) exit(1);
}

/* Everything one list yields, concatenated. */
typedef struct run {
    uint8_t *img, *lab;
    int64_t *idx, *valid;
    int n_batches, n_imgs, h[32], w[32], bn[32];
} run;

static void free_run(run *r) {
    free(r->img);
    free(r->lab);
    free(r->idx);
    free(r->valid);
    memset(r, 0, sizeof *r);
}

static int collect(sg_loader *l, const int64_t *list, int64_t n, int64_t epoch, run *r) {
    memset(r, 0, sizeof *r);
    r->img = malloc(1 << 20);
    r->lab = malloc(1 << 20);
    r->idx = malloc(sizeof(int64_t) * 64);
    r->valid = malloc(sizeof(int64_t) * 64);
    if (sg_loader_start(l, list, n, epoch) != 0) return -1;
    size_t off = 0;
    sg_batch *b;
    int rc;
    while ((rc = sg_loader_next(l, &b)) == 1) {
        if (b->seq != r->n_batches) return -2; /* in order */
        size_t px = (size_t)b->n * b->h * b->w;
        memcpy(r->img + off * 3, b->images, px * 3);
        memcpy(r->lab + off, b->labels, px);
        off += px;
        memcpy(r->idx + r->n_imgs, b->indices, sizeof(int64_t) * b->n);
        r->valid[r->n_batches] = b->valid_pixels;
        r->h[r->n_batches] = b->h;
        r->w[r->n_batches] = b->w;
        r->bn[r->n_batches] = b->n;
        r->n_imgs += b->n;
        r->n_batches++;
        sg_loader_release(l, b);
    }
    return rc;
}

static void test_deterministic_across_workers(void) {
    sg_data_cfg c = cs_cfg(synth_root);
    sg_dataset *ds = sg_dataset_open(&c, "train", 19);
    CHECK(ds != NULL);
    CHECK_EQ_INT(sg_dataset_size(ds), 13);
    sg_sampler s = {13, 1, 1, 0, 3};
    int64_t list[13];
    CHECK_EQ_INT(sg_sampler_rank_indices(&s, 1, 0, 0, list), 13);
    run ref;
    for (int workers = 0; workers <= 3; workers++) {
        for (int prefetch = 1; prefetch <= 3; prefetch += 2) {
            sg_loader_opts o;
            sg_loader_opts_from_config(&o, &c, 1, 3, 42);
            o.workers = workers;
            o.prefetch = prefetch;
            sg_loader *l = sg_loader_create(ds, &o);
            CHECK(l != NULL);
            run r;
            CHECK_EQ_INT(collect(l, list, 13, 1, &r), 0);
            CHECK_EQ_INT(r.n_batches, 5); /* 3+3+3+3+1 */
            CHECK_EQ_INT(r.bn[4], 1);
            CHECK_EQ_INT(sg_loader_num_batches(l), 5);
            sg_loader_stats st;
            sg_loader_get_stats(l, &st);
            CHECK_EQ_INT(st.images, 13);
            CHECK_EQ_INT(st.batches, 5);
            sg_loader_destroy(l);
            if (workers == 0 && prefetch == 1) {
                ref = r;
                continue;
            }
            CHECK(memcmp(r.idx, ref.idx, sizeof(int64_t) * 13) == 0);
            CHECK_MSG(memcmp(r.img, ref.img, 13 * 24 * 32 * 3) == 0, "workers %d", workers);
            CHECK(memcmp(r.lab, ref.lab, 13 * 24 * 32) == 0);
            CHECK(memcmp(r.valid, ref.valid, sizeof(int64_t) * 5) == 0);
            free_run(&r);
        }
    }
    /* Equal to decoding + augmenting each sample by hand. */
    sg_aug_opts a = {.scale_lo = 0.5,
                     .scale_hi = 2.0,
                     .crop_h = 24,
                     .crop_w = 32,
                     .hflip = 1,
                     .ignore_index = 255,
                     .cat_max_ratio = 0.75};
    a.photo = (sg_photo_opts){1, 32, 0.5, 1.5, 0.5, 1.5, 18};
    uint8_t oi[24 * 32 * 3], om[24 * 32];
    int64_t valid_batch = 0;
    for (int k = 0; k < 13; k++) {
        CHECK(ref.idx[k] == list[k]);
        sg_img im, m;
        CHECK(sg_dataset_load(ds, list[k], &im, &m, NULL, 0) == 0);
        sg_aug_draw d;
        CHECK(sg_aug_make_draw(&a, 42, 1, list[k], m.data, im.h, im.w, &d) == 0);
        CHECK(sg_aug_apply(&a, &d, im.data, m.data, im.h, im.w, oi, om) == 0);
        CHECK(memcmp(oi, ref.img + (size_t)k * sizeof oi, sizeof oi) == 0);
        CHECK(memcmp(om, ref.lab + (size_t)k * sizeof om, sizeof om) == 0);
        for (size_t p = 0; p < sizeof om; p++) valid_batch += om[p] != 255;
        if (k % 3 == 2 || k == 12) {
            CHECK_EQ_INT(valid_batch, ref.valid[k / 3]);
            CHECK(valid_batch > 0 && valid_batch < (int64_t)sizeof om * 3);
            valid_batch = 0;
        }
        sg_img_free(&im);
        sg_img_free(&m);
    }
    /* Another epoch: other augmentation of the same samples. */
    sg_loader_opts o;
    sg_loader_opts_from_config(&o, &c, 1, 3, 42);
    sg_loader *l = sg_loader_create(ds, &o);
    run r2;
    CHECK_EQ_INT(collect(l, list, 13, 2, &r2), 0);
    CHECK(memcmp(r2.img, ref.img, 13 * 24 * 32 * 3) != 0);
    /* Restarting mid-list (a new start cancels the rest) works. */
    CHECK(sg_loader_start(l, list, 13, 1) == 0);
    sg_batch *b;
    CHECK(sg_loader_next(l, &b) == 1);
    sg_loader_release(l, b);
    run r3;
    CHECK_EQ_INT(collect(l, list, 13, 1, &r3), 0);
    CHECK(memcmp(r3.img, ref.img, 13 * 24 * 32 * 3) == 0);
    sg_loader_destroy(l);
    free_run(&r2);
    free_run(&r3);
    free_run(&ref);
    sg_dataset_close(ds);
}

static void test_eval_batches_by_size(void) {
    char root[1024];
    snprintf(root, sizeof root, "%s", dt_path("evallist"));
    dt_mkdirs(root);
    /* sorted order: a(6x8) b(6x8) c(5x8) d(6x8) e(6x8) f(6x8) */
    const char *names = "abcdef";
    char list_text[1024] = "";
    uint8_t lab[6 * 8];
    for (int i = 0; i < 48; i++) lab[i] = (uint8_t)(i % 7 == 0 ? 255 : i % 19);
    for (int k = 0; k < 6; k++) {
        int h = k == 2 ? 5 : 6;
        dt_rgb(dt_path("evallist/%c.png", names[k]), h, 8, (uint8_t)k);
        dt_gray(dt_path("evallist/%c_m.png", names[k]), h, 8, lab);
        size_t l = strlen(list_text);
        snprintf(list_text + l, sizeof list_text - l, "%c.png %c_m.png\n", names[k], names[k]);
    }
    dt_write_text(dt_path("evallist/val.txt"), list_text);
    sg_data_cfg c = cs_cfg(root);
    snprintf(c.format, sizeof c.format, "list");
    snprintf(c.label_map, sizeof c.label_map, "none");
    sg_dataset *ds = sg_dataset_open(&c, "val.txt", 19);
    CHECK(ds != NULL);
    int64_t list[6];
    CHECK_EQ_INT(sg_eval_shard(6, 1, 0, list), 6);
    for (int workers = 0; workers <= 2; workers += 2) {
        sg_loader_opts o;
        sg_loader_opts_from_config(&o, &c, 0, 2, 0);
        o.workers = workers;
        sg_loader *l = sg_loader_create(ds, &o);
        run r;
        CHECK_EQ_INT(collect(l, list, 6, 0, &r), 0);
        CHECK_EQ_INT(r.n_batches, 4); /* [a b] [c] [d e] [f] */
        CHECK(r.bn[0] == 2 && r.bn[1] == 1 && r.bn[2] == 2 && r.bn[3] == 1);
        CHECK(r.h[1] == 5 && r.h[0] == 6 && r.w[1] == 8);
        /* no transform: the decoded images and mapped masks */
        size_t off = 0;
        for (int k = 0; k < 6; k++) {
            sg_img im, m;
            CHECK(sg_dataset_load(ds, k, &im, &m, NULL, 0) == 0);
            size_t px = (size_t)im.h * im.w;
            CHECK(memcmp(r.img + off * 3, im.data, px * 3) == 0);
            CHECK(memcmp(r.lab + off, m.data, px) == 0);
            off += px;
            sg_img_free(&im);
            sg_img_free(&m);
        }
        int64_t valid_per_img = 0;
        for (int i = 0; i < 40; i++) valid_per_img += lab[i] != 255; /* 5x8 image c */
        CHECK_EQ_INT(r.valid[1], valid_per_img);
        sg_loader_destroy(l);
        free_run(&r);
    }
    sg_dataset_close(ds);
}

static void test_worker_error_reaches_caller(void) {
    char root[1024];
    snprintf(root, sizeof root, "%s", dt_path("badlist"));
    dt_mkdirs(root);
    uint8_t lab[6 * 8] = {0};
    char list_text[2048] = "";
    for (int k = 0; k < 8; k++) {
        if (k == 5) dt_write_text(dt_path("badlist/i%d.png", k), "\x89PNG\r\n\x1a\nbroken");
        else dt_rgb(dt_path("badlist/i%d.png", k), 6, 8, (uint8_t)k);
        dt_gray(dt_path("badlist/m%d.png", k), 6, 8, lab);
        size_t l = strlen(list_text);
        snprintf(list_text + l, sizeof list_text - l, "i%d.png m%d.png\n", k, k);
    }
    dt_write_text(dt_path("badlist/l.txt"), list_text);
    sg_data_cfg c = cs_cfg(root);
    snprintf(c.format, sizeof c.format, "list");
    c.crop_size[0] = 4;
    c.crop_size[1] = 4;
    sg_dataset *ds = sg_dataset_open(&c, "l.txt", 19);
    CHECK(ds != NULL);
    int64_t list[8] = {0, 1, 2, 3, 4, 5, 6, 7};
    for (int workers = 0; workers <= 3; workers++) {
        sg_loader_opts o;
        sg_loader_opts_from_config(&o, &c, 1, 2, 0);
        o.workers = workers;
        sg_loader *l = sg_loader_create(ds, &o);
        CHECK(sg_loader_start(l, list, 8, 0) == 0);
        sg_batch *b;
        for (int k = 0; k < 2; k++) { /* batches [0 1] [2 3] are fine */
            CHECK(sg_loader_next(l, &b) == 1);
            sg_loader_release(l, b);
        }
        th_cap_begin();
        int rc = sg_loader_next(l, &b); /* [4 5]: 5 is corrupt */
        const char *out = th_cap_end();
        CHECK_EQ_INT(rc, -1);
        CHECK(b == NULL);
        CHECK_STR_CONTAINS(out, "badlist/i5.png");
        CHECK_STR_CONTAINS(sg_loader_error(l), "badlist/i5.png");
        th_cap_begin();
        rc = sg_loader_next(l, &b); /* stays failed */
        th_cap_end();
        CHECK_EQ_INT(rc, -1);
        /* A new list without the bad file works. */
        int64_t good[4] = {7, 6, 1, 0};
        CHECK(sg_loader_start(l, good, 4, 0) == 0);
        int n = 0;
        while ((rc = sg_loader_next(l, &b)) == 1) {
            n++;
            sg_loader_release(l, b);
        }
        CHECK_EQ_INT(rc, 0);
        CHECK_EQ_INT(n, 2);
        sg_loader_destroy(l);
    }
    sg_dataset_close(ds);
}

/* Reads the tids of this process's threads (at most cap) into tids; *n
 * receives how many (-1: /proc/self/task cannot be read). */
static void list_tasks(long *tids, int cap, int *n) {
    *n = -1;
    DIR *d = opendir("/proc/self/task");
    if (!d) return;
    *n = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL && *n < cap)
        if (de->d_name[0] != '.') tids[(*n)++] = atol(de->d_name);
    closedir(d);
}

/* Workers block SIGINT / SIGTERM (read from /proc: each thread's SigBlk), so
 * signals reach the main thread, which shuts the loader down. Only threads
 * that are new since before sg_loader_create and named sg-load-* count: a
 * worker of an earlier case, joined, stays listed in /proc until the kernel
 * reaps it, and sanitizers run threads of their own. */
static void test_workers_block_signals(void) {
    sg_data_cfg c = cs_cfg(synth_root);
    sg_dataset *ds = sg_dataset_open(&c, "train", 19);
    CHECK(ds != NULL);
    sg_loader_opts o;
    sg_loader_opts_from_config(&o, &c, 1, 2, 0);
    o.workers = 3;
    long before[256], after[256];
    int nb, na;
    list_tasks(before, 256, &nb);
    CHECK(nb > 0);
    sg_loader *l = sg_loader_create(ds, &o);
    CHECK(l != NULL);
    list_tasks(after, 256, &na);
    CHECK(na > 0);
    int workers = 0, named = 0, main_blocks = -1;
    for (int k = 0; k < na; k++) {
        int old = 0;
        for (int m = 0; m < nb; m++) old |= before[m] == after[k];
        char st[300], line[256], comm[64] = "";
        int is_main = after[k] == (long)getpid();
        if (old && !is_main) continue;
        snprintf(st, sizeof st, "/proc/self/task/%ld/comm", after[k]);
        FILE *f = fopen(st, "r");
        if (!f) continue;
        if (!fgets(comm, sizeof comm, f)) comm[0] = 0;
        fclose(f);
        if (!is_main && strncmp(comm, "sg-load-", 8) != 0) continue;
        snprintf(st, sizeof st, "/proc/self/task/%ld/status", after[k]);
        f = fopen(st, "r");
        if (!f) continue;
        unsigned long long blk = 0;
        while (fgets(line, sizeof line, f))
            if (!strncmp(line, "SigBlk:", 7)) blk = strtoull(line + 7, NULL, 16);
        fclose(f);
        int blocks = ((blk >> (SIGINT - 1)) & 1) && ((blk >> (SIGTERM - 1)) & 1);
        if (is_main) {
            main_blocks = blocks;
        } else {
            named++;
            workers += blocks;
        }
    }
    CHECK_EQ_INT(main_blocks, 0); /* the caller's mask is restored */
    CHECK_EQ_INT(named, 3);       /* the three workers, by name */
    CHECK_EQ_INT(workers, 3);
    sg_loader_destroy(l);
    sg_dataset_close(ds);
}

typedef struct counting {
    int allocs, frees;
} counting;
static void *count_alloc(void *ctx, size_t bytes) {
    ((counting *)ctx)->allocs++;
    return malloc(bytes);
}
static void count_free(void *ctx, void *p) {
    ((counting *)ctx)->frees++;
    free(p);
}

static void test_shutdown_and_misuse(void) {
    sg_data_cfg c = cs_cfg(synth_root);
    sg_dataset *ds = sg_dataset_open(&c, "train", 19);
    CHECK(ds != NULL);
    int64_t list[13];
    for (int i = 0; i < 13; i++) list[i] = 12 - i;
    counting cnt = {0, 0};
    sg_loader_opts o;
    sg_loader_opts_from_config(&o, &c, 1, 1, 0);
    o.workers = 3;
    o.prefetch = 1;
    o.host_alloc = count_alloc;
    o.host_free = count_free;
    o.host_ctx = &cnt;
    sg_loader *l = sg_loader_create(ds, &o);
    CHECK(l != NULL);
    CHECK(sg_loader_start(l, list, 13, 0) == 0);
    CHECK(cnt.allocs == 2 * (1 + 3)); /* images + labels per slot, on this thread */
    sg_batch *held[4];
    for (int k = 0; k < 4; k++) CHECK(sg_loader_next(l, &held[k]) == 1);
    CHECK(held[0]->indices[0] == 12 && held[3]->indices[0] == 9);
    /* Holding every slot and asking for more is an error, not a deadlock. */
    sg_batch *b;
    th_cap_begin();
    int rc = sg_loader_next(l, &b);
    const char *out = th_cap_end();
    CHECK_EQ_INT(rc, -1);
    CHECK_STR_CONTAINS(out, "still held");
    /* start while batches are held is refused */
    th_cap_begin();
    rc = sg_loader_start(l, list, 13, 1);
    th_cap_end();
    CHECK_EQ_INT(rc, -1);
    for (int k = 0; k < 4; k++) sg_loader_release(l, held[k]);
    CHECK(sg_loader_next(l, &b) == 1);
    CHECK_EQ_INT(b->indices[0], 8);
    sg_loader_release(l, b);
    /* Destroy mid-epoch with workers busy / blocked on a full queue. */
    sg_loader_destroy(l);
    CHECK_EQ_INT(cnt.frees, cnt.allocs);

    /* bad options */
    o.batch_size = 0;
    th_cap_begin();
    l = sg_loader_create(ds, &o);
    th_cap_end();
    CHECK(l == NULL);
    o.batch_size = 2;
    int64_t bad[2] = {0, 13};
    l = sg_loader_create(ds, &o);
    th_cap_begin();
    rc = sg_loader_start(l, bad, 2, 0);
    out = th_cap_end();
    CHECK_EQ_INT(rc, -1);
    CHECK_STR_CONTAINS(out, "index 13");
    /* an empty list ends at once */
    CHECK(sg_loader_start(l, NULL, 0, 0) == 0);
    CHECK_EQ_INT(sg_loader_next(l, &b), 0);
    sg_loader_destroy(l);
    sg_dataset_close(ds);
}

int main(void) {
    make_synth();
    TEST_RUN(test_deterministic_across_workers);
    TEST_RUN(test_eval_batches_by_size);
    TEST_RUN(test_worker_error_reaches_caller);
    TEST_RUN(test_shutdown_and_misuse);
    TEST_RUN(test_workers_block_signals);
    return TEST_EXIT();
}
