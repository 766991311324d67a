/* tests/train/test_plot.c SEGTRAIN [case] - `segtrain plot` through the
 * program, its PNG read back with io/png.h.
 *
 *   real     a tiny training run (synth + train) plotted: the PNG is
 *            1400x1160, decodes, and holds the run's colour (curves, bars)
 *            on a mostly white page;
 *   compare  two hand-written runs in one picture: both runs' colours are
 *            in the bars; a resumed run's repeated iterations and a torn
 *            last line are accepted;
 *   errors   what it refuses, with the exit status and a message naming the
 *            file (and line): no metrics.jsonl, a malformed line, an eval
 *            report whose arrays disagree, nesting too deep, an overlong
 *            line, usage errors (exit 2).
 */
#include <sys/stat.h>

#include "io/png.h"
#include "tests/helpers.h"
#include "testutil.h"

static const char *g_bin;
static char g_tmp[256];

static void write_file(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    if (!f) {
        perror(path);
        exit(1);
    }
    fputs(text, f);
    fclose(f);
}

/* Pixels within tol of (r, g, b). */
static long count_color(const sg_img *im, int r, int g, int b, int tol) {
    long n = 0;
    for (long i = 0; i < (long)im->h * im->w; i++) {
        const uint8_t *p = im->data + 3 * i;
        if (abs(p[0] - r) <= tol && abs(p[1] - g) <= tol && abs(p[2] - b) <= tol) n++;
    }
    return n;
}

/* Reads the PNG back: its size on disk, its dimensions, that it decodes. */
static int read_plot(const char *path, sg_img *im) {
    struct stat st;
    if (stat(path, &st) != 0 || st.st_size < 10000) {
        fprintf(stderr, "  %s: missing or only %lld bytes\n", path, (long long)st.st_size);
        return -1;
    }
    char err[SG_DATA_ERR_LEN];
    if (sg_png_read_rgb(path, im, err, sizeof err) != SG_OK) {
        fprintf(stderr, "  %s does not decode: %s\n", path, err);
        return -1;
    }
    return 0;
}

/* Bars are drawn at alpha 0.85 over white: the colours as they land. */
#define BLUE 64, 140, 192
#define ORANGE 255, 147, 49

static void test_real(void) {
    CHECK_EQ_INT(th_sh("%s synth --out %s/data --train 8 --val 3 --size 40x48 --seed 5 "
                       ">/dev/null 2>&1",
                       g_bin, g_tmp),
                 0);
    CHECK_EQ_INT(th_sh("%s train --config %s/configs/demo.yaml --set data.root=%s/data "
                       "--set run_dir=%s/run --set threads=1 --set data.crop_size=[32,32] "
                       "--set train.batch_size=2 --set data.workers=0 --set train.iters=6 "
                       "--set train.log_every=1 --set train.eval_every=3 >/dev/null 2>&1",
                       g_bin, SG_SOURCE_ROOT, g_tmp, g_tmp),
                 0);
    CHECK_EQ_INT(th_sh("%s plot %s/run 2>%s/plot.err", g_bin, g_tmp, g_tmp), 0);
    char path[512];
    snprintf(path, sizeof path, "%s/run/plot.png", g_tmp); /* the default --out */
    sg_img im = {0};
    CHECK(read_plot(path, &im) == 0);
    CHECK_EQ_INT(im.w, 1400);
    CHECK_EQ_INT(im.h, 1160);
    long white = count_color(&im, 255, 255, 255, 0), total = (long)im.w * im.h;
    long blue = count_color(&im, BLUE, 8) + count_color(&im, 31, 120, 181, 8);
    sg_img_free(&im);
    fprintf(stderr, "  %ld of %ld pixels white, %ld in the run's colour\n", white, total, blue);
    CHECK_MSG(white > total / 2 && white < total - 20000, "white %ld of %ld", white, total);
    CHECK_MSG(blue > 300, "only %ld pixels in the run's colour: nothing drawn?", blue);
    char *err = th_read_file(strcat(strcpy(path, g_tmp), "/plot.err"));
    CHECK(err != NULL);
    CHECK_STR_CONTAINS(err, "plot.png (1400x1160");
    free(err);
}

/* A hand-written run: metrics lines, one eval report with these IoUs. */
static void make_run(const char *name, const char *metrics, const char *iou_json) {
    char p[512], t[2048];
    snprintf(p, sizeof p, "%s/%s/eval", g_tmp, name);
    th_sh("mkdir -p %s", p);
    snprintf(p, sizeof p, "%s/%s/metrics.jsonl", g_tmp, name);
    write_file(p, metrics);
    if (iou_json) {
        snprintf(p, sizeof p, "%s/%s/eval/iter_00000040.json", g_tmp, name);
        snprintf(t, sizeof t,
                 "{\"iter\":40,\"miou\":0.5,\"classes\":[\"road\",\"sky\",\"car \\u00e9\"],"
                 "\"iou\":%s}",
                 iou_json);
        write_file(p, t);
    }
}

static const char *g_metrics =
    "{\"iter\":10,\"loss\":3.0,\"lr\":0.05}\n"
    "{\"iter\":20,\"loss\":2.0,\"lr\":0.04}\n"
    "{\"iter\":20,\"val_miou\":0.2,\"val_macc\":0.3,\"val_pixel_acc\":0.5}\n"
    "{\"iter\":30,\"loss\":1.5,\"lr\":0.03}\n"
    /* resumed from iteration 20: 30 is logged again */
    "{\"iter\":30,\"loss\":1.4,\"lr\":0.03}\n"
    "{\"iter\":30,\"leftover_miou\":null,\"leftover_samples\":3}\n"
    "{\"iter\":40,\"loss\":1.0,\"lr\":0.02,\"note\":{\"nested\":[1,2,{\"x\":true}]}}\n"
    "{\"iter\":40,\"val_miou\":0.5}\n"
    "{\"iter\":50,\"lo"; /* torn last line: the run was killed while appending */

static void test_compare(void) {
    make_run("a", g_metrics, "[0.9,0.1,null]");
    make_run("b", g_metrics, "[0.2,0.8,0.5]");
    CHECK_EQ_INT(th_sh("%s plot %s/a %s/b/ --out %s/cmp.png --smooth 0.3 2>%s/cmp.err", g_bin,
                       g_tmp, g_tmp, g_tmp, g_tmp),
                 0);
    char path[512];
    snprintf(path, sizeof path, "%s/cmp.err", g_tmp);
    char *err = th_read_file(path);
    CHECK(err != NULL);
    CHECK_STR_CONTAINS(err, "metrics.jsonl:9: the last line is incomplete");
    CHECK_STR_CONTAINS(err, "2 runs");
    free(err);
    snprintf(path, sizeof path, "%s/cmp.png", g_tmp);
    sg_img im = {0};
    CHECK(read_plot(path, &im) == 0);
    long blue = count_color(&im, BLUE, 6), orange = count_color(&im, ORANGE, 6);
    sg_img_free(&im);
    fprintf(stderr, "  bars: %ld blue, %ld orange pixels\n", blue, orange);
    CHECK_MSG(blue > 2000 && orange > 2000, "blue %ld, orange %ld: a run's bars are missing", blue,
              orange);
}

/* Runs `plot DIR`, expecting exit `want` and `msg` on stderr. */
static int refuses(const char *args, int want, const char *msg) {
    char err[512];
    snprintf(err, sizeof err, "%s/refuse.err", g_tmp);
    int rc = th_sh("%s plot %s 2>%s", g_bin, args, err);
    char *text = th_read_file(err);
    int ok = rc == want && text && strstr(text, msg);
    if (!ok)
        fprintf(stderr, "  plot %s: exit %d (want %d), stderr: %s (want '%s')\n", args, rc, want,
                text ? text : "(none)", msg);
    free(text);
    return ok;
}

static void test_errors(void) {
    char a[512];
    snprintf(a, sizeof a, "%s/nothing", g_tmp);
    CHECK(refuses(a, 1, "nothing/metrics.jsonl: No such file"));
    make_run("bad", "{\"iter\":1,\"loss\":2}\n{\"iter\":2,\"loss\":}\n{\"iter\":3}\n", NULL);
    snprintf(a, sizeof a, "%s/bad", g_tmp);
    CHECK(refuses(a, 1, "bad/metrics.jsonl:2: not JSON: unexpected character '}'"));
    make_run("noiter", "{\"loss\":2}\n", NULL);
    snprintf(a, sizeof a, "%s/noiter", g_tmp);
    CHECK(refuses(a, 1, "noiter/metrics.jsonl:1: not a metrics line"));
    make_run("arrays", "{\"iter\":1,\"loss\":2}\n", "[0.5]");
    snprintf(a, sizeof a, "%s/arrays", g_tmp);
    CHECK(refuses(a, 1, "iter_00000040.json: expected arrays \"classes\" and \"iou\" of the same"));
    char deep[256] = "{\"iter\":1,\"x\":";
    for (int i = 0; i < 40; i++) strcat(deep, "[");
    strcat(deep, "\n");
    make_run("deep", deep, NULL);
    snprintf(a, sizeof a, "%s/deep", g_tmp);
    CHECK(refuses(a, 1, "nested deeper than 16 levels"));
    char *big = malloc(70000 + 64);
    CHECK(big != NULL);
    strcpy(big, "{\"iter\":1,\"x\":\"");
    memset(big + strlen(big), 'a', 70000);
    strcpy(big + 15 + 70000, "\"}\n{\"iter\":2}\n");
    make_run("long", big, NULL);
    free(big);
    snprintf(a, sizeof a, "%s/long", g_tmp);
    CHECK(refuses(a, 1, "long/metrics.jsonl:1: a line longer than 65536 bytes"));
    CHECK(refuses("", 2, "no run directory given"));
    snprintf(a, sizeof a, "%s/a --smooth 1.5", g_tmp);
    CHECK(refuses(a, 2, "--smooth 1.5: expected a number in [0, 1)"));
    CHECK(refuses("--bogus", 2, "unknown option '--bogus'"));
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: test_plot SEGTRAIN [real|compare|errors]\n");
        return 2;
    }
    g_bin = argv[1];
    const char *only = argc > 2 ? argv[2] : NULL;
    snprintf(g_tmp, sizeof g_tmp, "%s/sg_plot_XXXXXX",
             getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (!mkdtemp(g_tmp)) {
        perror("mkdtemp");
        return 1;
    }
    if (!only || !strcmp(only, "real")) TEST_RUN(test_real);
    if (!only || !strcmp(only, "compare") || !strcmp(only, "errors")) {
        TEST_RUN(test_compare); /* errors reuses run a */
        if (!only || !strcmp(only, "errors")) TEST_RUN(test_errors);
    }
    th_sh("rm -rf %s", g_tmp);
    return TEST_EXIT();
}
