/* tests/config/test_cli.c - core/cli.{c,h}: common options, command options,
 * usage errors, config loading through the CLI, and the run directory
 * (written only after validation; config.yaml reloads identically). */
#include <fcntl.h>
#include <stddef.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/cli.h"
#include "core/log.h"
#include "testutil.h"

static char g_dir[256];
static sg_config g_cfg, g_back;

static int exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0;
}

static void silence(int on) {
    static int saved = -1;
    fflush(stderr);
    if (on) {
        saved = dup(2);
        int null = open("/dev/null", O_WRONLY);
        dup2(null, 2);
        close(null);
    } else {
        dup2(saved, 2);
        close(saved);
    }
}

static void test_parse_common_and_own_options(void) {
    const char *ckpt = NULL, *out = NULL;
    int flip = 0;
    sg_cli_opt opts[] = {{"--checkpoint", "FILE", "checkpoint", &ckpt, NULL},
                         {"--out", "DIR", "output", &out, NULL},
                         {"--flip", NULL, "flip", NULL, &flip},
                         {NULL, NULL, NULL, NULL, NULL}};
    char *argv[] = {"eval",
                    "--config",
                    "a.yaml",
                    "--set",
                    "train.lr=0.1",
                    "--set=seed=3",
                    "--checkpoint=ck.bin",
                    "--out",
                    "o",
                    "--flip",
                    "--verbose",
                    "img1.png",
                    "--",
                    "--img2.png",
                    NULL};
    sg_cli cli;
    CHECK_EQ_INT(sg_cli_parse(&cli, 14, argv, "segtrain eval ...", opts), 0);
    CHECK(!strcmp(cli.command, "eval"));
    CHECK(!strcmp(cli.config_path, "a.yaml"));
    CHECK_EQ_INT(cli.n_sets, 2);
    CHECK(!strcmp(cli.sets[0], "train.lr=0.1"));
    CHECK(!strcmp(cli.sets[1], "seed=3"));
    CHECK(ckpt && !strcmp(ckpt, "ck.bin"));
    CHECK(out && !strcmp(out, "o"));
    CHECK_EQ_INT(flip, 1);
    CHECK_EQ_INT(cli.log_level, SG_LOG_DEBUG);
    CHECK_EQ_INT(cli.n_args, 2);
    CHECK(!strcmp(cli.args[0], "img1.png"));
    CHECK(!strcmp(cli.args[1], "--img2.png"));
    CHECK_EQ_INT(cli.print_config, 0);
}

static void test_usage_errors(void) {
    sg_cli cli;
    const char *v = NULL;
    sg_cli_opt opts[] = {{"--checkpoint", "FILE", "c", &v, NULL}, {NULL, NULL, NULL, NULL, NULL}};
    char *a1[] = {"train", "--bogus", NULL};
    char *a2[] = {"train", "--config", NULL};
    char *a3[] = {"train", "--checkpoint", NULL};
    char *a4[] = {"train", "--config", "a", "--config", "b", NULL};
    char *a5[] = {"train", "--checkpointx", "y", NULL}; /* prefix is not a match */
    silence(1);
    int r1 = sg_cli_parse(&cli, 2, a1, "u", opts);
    int r2 = sg_cli_parse(&cli, 2, a2, "u", opts);
    int r3 = sg_cli_parse(&cli, 2, a3, "u", opts);
    int r4 = sg_cli_parse(&cli, 5, a4, "u", opts);
    int r5 = sg_cli_parse(&cli, 3, a5, "u", opts);
    silence(0);
    CHECK_EQ_INT(r1, SG_ERR_CONFIG);
    CHECK_EQ_INT(r2, SG_ERR_CONFIG);
    CHECK_EQ_INT(r3, SG_ERR_CONFIG);
    CHECK_EQ_INT(r4, SG_ERR_CONFIG);
    CHECK_EQ_INT(r5, SG_ERR_CONFIG);
}

static void test_begin_loads_and_validates(void) {
    char path[512];
    snprintf(path, sizeof path, "%s/c.yaml", g_dir);
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    fprintf(f, "run_dir: %s/run\ntrain:\n  lr: 0.05\n", g_dir);
    fclose(f);
    char *argv[] = {"train", "--config", path, "--set", "train.momentum=0.5", "--quiet", NULL};
    sg_cli cli;
    int rc = sg_cli_begin(&cli, &g_cfg, 6, argv, "u", NULL);
    sg_log_set_level(SG_LOG_INFO);
    CHECK_EQ_INT(rc, SG_OK);
    CHECK_EQ_INT(cli.done, 0); /* the command goes on */
    CHECK_NEAR(g_cfg.train.lr, 0.05, 0);
    CHECK_NEAR(g_cfg.train.momentum, 0.5, 0);
    CHECK_EQ_INT(cli.log_level, SG_LOG_WARN);
    /* --set applies after the file: it wins */
    char *argv2[] = {"train", "--set", "train.lr=0.2", "--config", path, NULL};
    CHECK_EQ_INT(sg_cli_begin(&cli, &g_cfg, 5, argv2, "u", NULL), SG_OK);
    CHECK_EQ_INT(cli.done, 0);
    CHECK_NEAR(g_cfg.train.lr, 0.2, 0);
    /* invalid: a config error, and the run directory was not created */
    char *argv3[] = {"train", "--config", path, "--set", "model.num_classes=500", NULL};
    silence(1);
    rc = sg_cli_begin(&cli, &g_cfg, 5, argv3, "u", NULL);
    silence(0);
    CHECK_EQ_INT(rc, SG_ERR_CONFIG);
    char run[512];
    snprintf(run, sizeof run, "%s/run", g_dir);
    CHECK(!exists(run));
    /* --help: done (exit 0) before loading anything (the bad --set is not read) */
    char *argv4[] = {"train", "--help", "--set", "nonsense", NULL};
    FILE *saved = stdout;
    stdout = fopen("/dev/null", "w");
    rc = sg_cli_begin(&cli, &g_cfg, 4, argv4, "u", NULL);
    fclose(stdout);
    stdout = saved;
    CHECK_EQ_INT(rc, SG_OK);
    CHECK_EQ_INT(cli.done, 1);
}

static void test_prepare_run_dir(void) {
    sg_config_defaults(&g_cfg);
    char run[512], sets[1200];
    snprintf(run, sizeof run, "%s/deep/er/run", g_dir);
    snprintf(sets, sizeof sets, "run_dir=%s", run);
    CHECK_EQ_INT(sg_config_set(&g_cfg, sets), 0);
    CHECK_EQ_INT(sg_config_set(&g_cfg, "train.lr=0.123"), 0);
    CHECK_EQ_INT(sg_cli_prepare_run_dir(&g_cfg, 0), 0);
    SG_INFO("hello from the test");
    sg_log_close_file();
    char p[700];
    snprintf(p, sizeof p, "%s/config.yaml", run);
    CHECK(exists(p));
    sg_config_defaults(&g_back);
    CHECK_EQ_INT(sg_config_load_file(&g_back, p), 0);
    CHECK_MSG(memcmp(&g_cfg, &g_back, offsetof(sg_config, origin)) == 0,
              "config.yaml does not reload identically");
    snprintf(p, sizeof p, "%s/logs/rank0.log", run);
    FILE *f = fopen(p, "r");
    CHECK(f != NULL);
    char buf[4096];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = 0;
    fclose(f);
    CHECK_STR_CONTAINS(buf, "hello from the test");
    /* rank 1 writes its own log and no config */
    snprintf(run, sizeof run, "%s/r1", g_dir);
    snprintf(sets, sizeof sets, "run_dir=%s", run);
    CHECK_EQ_INT(sg_config_set(&g_cfg, sets), 0);
    CHECK_EQ_INT(sg_cli_prepare_run_dir(&g_cfg, 1), 0);
    sg_log_close_file();
    sg_log_set_rank(0, 1);
    snprintf(p, sizeof p, "%s/logs/rank1.log", run);
    CHECK(exists(p));
    snprintf(p, sizeof p, "%s/config.yaml", run);
    CHECK(!exists(p));
    /* run_dir that is a file: a runtime error (exit 1) */
    snprintf(p, sizeof p, "%s/afile", g_dir);
    f = fopen(p, "w");
    CHECK(f != NULL);
    fclose(f);
    snprintf(sets, sizeof sets, "run_dir=%s", p);
    CHECK_EQ_INT(sg_config_set(&g_cfg, sets), 0);
    silence(1);
    int rc = sg_cli_prepare_run_dir(&g_cfg, 0);
    silence(0);
    CHECK_EQ_INT(rc, SG_ERR_RUNTIME);
}

/* Issue 13: the run directory's lock, and opening a run_dir without
 * writing config.yaml (train writes it after its resume checks). */
static void test_run_lock(void) {
    char run[512], p[700];
    snprintf(run, sizeof run, "%s/locked/run", g_dir);
    sg_run_lock a = {-1}, b = {-1};
    CHECK_EQ_INT(sg_run_lock_acquire(&a, run, "segtrain train"), SG_OK);
    snprintf(p, sizeof p, "%s/segtrain.lock", run);
    FILE *f = fopen(p, "r");
    CHECK(f != NULL);
    char buf[512];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = 0;
    fclose(f);
    char want[64];
    snprintf(want, sizeof want, "pid %ld\n", (long)getpid());
    CHECK_STR_CONTAINS(buf, want);
    CHECK_STR_CONTAINS(buf, "command segtrain train\n");
    /* a second holder (another open file description, as another process
     * would have) is refused at once */
    silence(1);
    sg_status rc = sg_run_lock_acquire(&b, run, "segtrain eval");
    silence(0);
    CHECK_EQ_INT(rc, SG_ERR_RUNTIME);
    CHECK_EQ_INT(b.fd, -1);
    sg_run_lock_release(&a);
    sg_run_lock_release(&a); /* idempotent */
    CHECK_EQ_INT(sg_run_lock_acquire(&b, run, "segtrain eval"), SG_OK);
    sg_run_lock_release(&b);
    /* sg_cli_open_run_dir: logs, no config.yaml */
    snprintf(run, sizeof run, "%s/opened", g_dir);
    char sets[700];
    sg_config_defaults(&g_cfg);
    snprintf(sets, sizeof sets, "run_dir=%s", run);
    CHECK_EQ_INT(sg_config_set(&g_cfg, sets), 0);
    CHECK_EQ_INT(sg_cli_open_run_dir(&g_cfg, 0), SG_OK);
    sg_log_close_file();
    snprintf(p, sizeof p, "%s/logs/rank0.log", run);
    CHECK(exists(p));
    snprintf(p, sizeof p, "%s/config.yaml", run);
    CHECK(!exists(p));
    CHECK_EQ_INT(sg_cli_write_run_config(&g_cfg), SG_OK);
    CHECK(exists(p));
}

int main(void) {
    snprintf(g_dir, sizeof g_dir, "/tmp/sg-test-cli-XXXXXX");
    if (!mkdtemp(g_dir)) {
        perror("mkdtemp");
        return 1;
    }
    TEST_RUN(test_parse_common_and_own_options);
    TEST_RUN(test_usage_errors);
    TEST_RUN(test_begin_loads_and_validates);
    TEST_RUN(test_prepare_run_dir);
    TEST_RUN(test_run_lock);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    if (system(cmd) != 0) fprintf(stderr, "warning: could not remove %s\n", g_dir);
    return TEST_EXIT();
}
