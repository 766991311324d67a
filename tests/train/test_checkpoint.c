/* tests/train/test_checkpoint.c - the checkpoint file protocol without a
 * network: round trip, checksum, corrupt/truncated detection (naming the
 * cause), auto-resume skipping a bad newest file, retention, kill -9 during
 * a write; run ids (auto-resume and retention keep to one run), metadata
 * range checks and the stored config's YAML limits (issue 13). */
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ckpt_edit.h"
#include "core/log.h"
#include "kernels/backend.h"
#include "model/model.h"
#include "testutil.h"
#include "train/checkpoint.h"

static char root[256];

/* A fake checkpoint: one float tensor of n elements with a pattern from tag,
 * one int64 scalar, the metadata sg_ckpt_open_valid requires. */
static int write_fake_run(const char *path, size_t n, int tag, const char *run_id) {
    float *x = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) x[i] = (float)tag + (float)i * 1e-3f;
    int64_t nb = tag, shape[1] = {(int64_t)n};
    sg_ckpt_builder b;
    sg_ckpt_builder_init(&b);
    int rc = sg_ckpt_add(&b, "encoder.conv1.weight", SG_ST_F32, 1, shape, x, n * sizeof(float));
    rc |= sg_ckpt_add(&b, "encoder.bn1.num_batches_tracked", SG_ST_I64, 0, NULL, &nb, 8);
    rc |= sg_ckpt_meta(&b, "format", SG_CKPT_FORMAT);
    rc |= sg_ckpt_meta(&b, "format_version", "1");
    if (run_id) rc |= sg_ckpt_meta(&b, "run_id", run_id);
    rc |= sg_ckpt_commit(&b, path);
    sg_ckpt_builder_free(&b);
    free(x);
    return rc;
}

static int write_fake(const char *path, size_t n, int tag) {
    return write_fake_run(path, n, tag, NULL);
}

static void mkrun(const char *name, char *run, char *ck) {
    snprintf(run, 512, "%s/%s", root, name);
    mkdir(run, 0777);
    sg_ckpt_dir(run, 1, ck, 512);
}

static void flip_byte_from_end(const char *path, long from_end) {
    FILE *f = fopen(path, "r+b");
    fseek(f, -from_end, SEEK_END);
    int c = fgetc(f);
    fseek(f, -from_end, SEEK_END);
    fputc(c ^ 0x10, f);
    fclose(f);
}

static void truncate_half(const char *path) {
    struct stat sb;
    stat(path, &sb);
    CHECK(truncate(path, sb.st_size / 2) == 0);
}

static void test_roundtrip(void) {
    char run[512], ck[512], path[600], why[256];
    mkrun("rt", run, ck);
    sg_ckpt_iter_path(run, 5, path, sizeof path);
    CHECK_STR_CONTAINS(path, "/checkpoints/iter_00000005.safetensors");
    CHECK_EQ_INT(write_fake(path, 1000, 3), 0);
    sg_st_file *f = sg_ckpt_open_valid(path, why, sizeof why);
    CHECK_MSG(f != NULL, "%s", why);
    CHECK_EQ_INT(sg_st_count(f), 2);
    CHECK(strcmp(sg_st_meta(f, "tensor_count"), "2") == 0);
    CHECK(strncmp(sg_st_meta(f, "checksum"), "fnv1a64:", 8) == 0);
    const sg_st_tensor *t = sg_st_find(f, "encoder.conv1.weight");
    CHECK(t != NULL && t->count == 1000);
    float v[1000];
    CHECK_EQ_INT(sg_st_read_f32(f, t, v, 1000), 0);
    CHECK_NEAR(v[999], 3 + 0.999f, 1e-6);
    sg_st_close(f);
    /* no temporary file left behind */
    char tmp[640];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    CHECK(access(tmp, F_OK) != 0);
}

static void test_corrupt_detected(void) {
    char run[512], ck[512], path[600], why[256];
    mkrun("corrupt", run, ck);
    sg_ckpt_iter_path(run, 1, path, sizeof path);
    CHECK_EQ_INT(write_fake(path, 1000, 1), 0);
    flip_byte_from_end(path, 100); /* inside the float data */
    CHECK(sg_ckpt_open_valid(path, why, sizeof why) == NULL);
    CHECK_STR_CONTAINS(why, "checksum mismatch");
    CHECK_EQ_INT(write_fake(path, 1000, 1), 0);
    truncate_half(path);
    CHECK(sg_ckpt_open_valid(path, why, sizeof why) == NULL);
    CHECK_STR_CONTAINS(why, "not a readable safetensors file");
    CHECK_STR_CONTAINS(why, "data_offsets"); /* the cause, not only "corrupt" */
    CHECK_STR_CONTAINS(why, "truncated");
    /* a plain weights file is not a checkpoint */
    sg_ckpt_builder b;
    sg_ckpt_builder_init(&b);
    int64_t shape[1] = {1};
    float one = 1;
    sg_ckpt_add(&b, "x", SG_ST_F32, 1, shape, &one, 4);
    sg_ckpt_meta(&b, "format", "pt");
    CHECK_EQ_INT(sg_ckpt_commit(&b, path), 0);
    sg_ckpt_builder_free(&b);
    CHECK(sg_ckpt_open_valid(path, why, sizeof why) == NULL);
    CHECK_STR_CONTAINS(why, "not a segtrain checkpoint");
}

/* Regression: the checksum covered the tensors only, so a changed digit in
 * the metadata (iter, sample_pos, ...) resumed at the wrong place unnoticed. */
static void test_metadata_corruption_detected(void) {
    char run[512], ck[512], path[600], why[256];
    mkrun("meta", run, ck);
    sg_ckpt_iter_path(run, 7, path, sizeof path);
    int64_t shape[1] = {4};
    float x[4] = {1, 2, 3, 4};
    sg_ckpt_builder b;
    sg_ckpt_builder_init(&b);
    CHECK_EQ_INT(sg_ckpt_add(&b, "w", SG_ST_F32, 1, shape, x, sizeof x), 0);
    CHECK_EQ_INT(sg_ckpt_meta(&b, "format", SG_CKPT_FORMAT), 0);
    CHECK_EQ_INT(sg_ckpt_meta(&b, "format_version", "1"), 0);
    CHECK_EQ_INT(sg_ckpt_meta(&b, "sample_pos", "123456"), 0);
    CHECK_EQ_INT(sg_ckpt_meta(&b, "config", "a: \"q\"\nb: [1, 2]\n"), 0);
    CHECK_EQ_INT(sg_ckpt_commit(&b, path), 0);
    sg_ckpt_builder_free(&b);
    sg_st_file *f = sg_ckpt_open_valid(path, why, sizeof why);
    CHECK_MSG(f != NULL, "%s", why);
    CHECK(strncmp(sg_st_meta(f, "meta_checksum"), "sum64:", 6) == 0);
    sg_st_close(f);
    /* 123456 -> 123457 in the header: still valid JSON, same length */
    FILE *fp = fopen(path, "r+b");
    CHECK(fp != NULL);
    char head[4096];
    size_t n = fread(head, 1, sizeof head, fp);
    char *at = memmem(head, n, "123456", 6);
    CHECK(at != NULL);
    fseek(fp, (long)(at - head) + 5, SEEK_SET);
    fputc('7', fp);
    fclose(fp);
    CHECK(sg_ckpt_open_valid(path, why, sizeof why) == NULL);
    CHECK_STR_CONTAINS(why, "metadata checksum mismatch");
}

static void test_auto_resume_skips_bad_newest(void) {
    char run[512], ck[512], path[600], out[600];
    mkrun("auto", run, ck);
    CHECK_EQ_INT(sg_ckpt_find_latest(run, out, sizeof out), 0); /* none yet */
    for (int it = 10; it <= 30; it += 10) {
        sg_ckpt_iter_path(run, it, path, sizeof path);
        CHECK_EQ_INT(write_fake(path, 500, it), 0);
    }
    CHECK_EQ_INT(sg_ckpt_find_latest(run, out, sizeof out), 1);
    CHECK_STR_CONTAINS(out, "iter_00000030");
    sg_ckpt_iter_path(run, 30, path, sizeof path);
    truncate_half(path);
    sg_ckpt_iter_path(run, 20, path, sizeof path);
    flip_byte_from_end(path, 8);
    CHECK_EQ_INT(sg_ckpt_find_latest(run, out, sizeof out), 1);
    CHECK_STR_CONTAINS(out, "iter_00000010");
}

static void test_prune(void) {
    char run[512], ck[512], path[600];
    mkrun("prune", run, ck);
    for (int it = 1; it <= 5; it++) {
        sg_ckpt_iter_path(run, it * 100, path, sizeof path);
        CHECK_EQ_INT(write_fake(path, 10, it), 0);
    }
    snprintf(path, sizeof path, "%s/iter_00000600.safetensors.tmp", ck);
    FILE *f = fopen(path, "w");
    fputs("partial", f);
    fclose(f);
    sg_ckpt_best_path(run, path, sizeof path);
    CHECK_EQ_INT(write_fake(path, 10, 9), 0);
    CHECK_EQ_INT(sg_ckpt_prune(run, 2, 500, "00000000000000aa"),
                 4); /* iter 100, 200, 300 and the .tmp */
    for (int it = 1; it <= 5; it++) {
        sg_ckpt_iter_path(run, it * 100, path, sizeof path);
        CHECK_EQ_INT(access(path, F_OK) == 0, it >= 4);
    }
    sg_ckpt_best_path(run, path, sizeof path);
    CHECK(access(path, F_OK) == 0); /* best is never pruned */
}

/* Regression: a run that writes iter_N while files of later iterations
 * exist (a fresh run over an older run's directory, or a resume that skipped
 * a corrupt newest file) must keep iter_N: pruning used to count the later
 * files first and delete the checkpoint it had just written. */
static void test_prune_keeps_just_written(void) {
    char run[512], ck[512], path[600], out[600];
    mkrun("prune_newer", run, ck);
    for (int it = 1; it <= 5; it++) {
        sg_ckpt_iter_path(run, it * 100, path, sizeof path);
        CHECK_EQ_INT(write_fake(path, 10, it), 0);
    }
    sg_ckpt_iter_path(run, 500, path, sizeof path);
    truncate_half(path); /* the newest is corrupt: resume takes 400 */
    CHECK_EQ_INT(sg_ckpt_find_latest(run, out, sizeof out), 1);
    CHECK_STR_CONTAINS(out, "iter_00000400");
    /* the resumed run writes 450, keep 1 */
    sg_ckpt_iter_path(run, 450, path, sizeof path);
    CHECK_EQ_INT(write_fake(path, 10, 45), 0);
    CHECK_EQ_INT(sg_ckpt_prune(run, 1, 450, "00000000000000aa"), 4); /* 100, 200, 300, 400 */
    CHECK(access(path, F_OK) == 0);
    CHECK_EQ_INT(sg_ckpt_find_latest(run, out, sizeof out), 1);
    CHECK_STR_CONTAINS(out, "iter_00000450");
    /* a fresh run over it writes 10, keep 2: nothing of its own to delete */
    sg_ckpt_iter_path(run, 10, path, sizeof path);
    CHECK_EQ_INT(write_fake(path, 10, 1), 0);
    CHECK_EQ_INT(sg_ckpt_prune(run, 2, 10, "00000000000000aa"), 0);
    CHECK(access(path, F_OK) == 0);
    sg_ckpt_iter_path(run, 20, path, sizeof path);
    CHECK_EQ_INT(write_fake(path, 10, 2), 0);
    sg_ckpt_iter_path(run, 30, path, sizeof path);
    CHECK_EQ_INT(write_fake(path, 10, 3), 0);
    CHECK_EQ_INT(sg_ckpt_prune(run, 2, 30, "00000000000000aa"), 1); /* 10 */
    CHECK(access(path, F_OK) == 0);
    sg_ckpt_iter_path(run, 20, path, sizeof path);
    CHECK(access(path, F_OK) == 0);
    sg_ckpt_iter_path(run, 450, path, sizeof path);
    CHECK(access(path, F_OK) == 0); /* later files untouched */
}

/* Issue 13 item 4: "--resume" said "truncated or corrupt" for every parse
 * error; the reason is the reader's own now. */
static void test_parse_error_names_cause(void) {
    char run[512], ck[512], path[600], why[1024];
    mkrun("cause", run, ck);
    sg_ckpt_iter_path(run, 1, path, sizeof path);
    CHECK_EQ_INT(write_fake(path, 100, 1), 0);
    /* '"dtype":' -> '"dtype";' inside the header: a JSON syntax error */
    FILE *fp = fopen(path, "r+b");
    CHECK(fp != NULL);
    char head[2048];
    size_t n = fread(head, 1, sizeof head, fp);
    char *at = memmem(head, n, "\"dtype\":", 8);
    CHECK(at != NULL);
    fseek(fp, (long)(at - head) + 7, SEEK_SET);
    fputc(';', fp);
    fclose(fp);
    CHECK(sg_ckpt_open_valid(path, why, sizeof why) == NULL);
    CHECK_STR_CONTAINS(why, "expected ':' at header byte");
    CHECK(strstr(why, "truncated or corrupt") == NULL);
}

/* Issue 13 item 3: --resume auto and retention consider only the
 * checkpoints of the run being resumed; a file from before run ids counts
 * as that run's own. */
static void test_run_ids(void) {
    char run[512], ck[512], path[600], out[600], id[SG_RUN_ID_LEN + 2];
    const char *A = "00000000000000aa", *B = "00000000000000bb";
    mkrun("runids", run, ck);
    char fresh[SG_RUN_ID_LEN + 1], fresh2[SG_RUN_ID_LEN + 1];
    sg_ckpt_new_run_id(fresh);
    sg_ckpt_new_run_id(fresh2);
    CHECK_EQ_INT(strlen(fresh), SG_RUN_ID_LEN);
    CHECK(strcmp(fresh, fresh2) != 0);
    CHECK_EQ_INT(sg_ckpt_foreign(run, NULL, out, sizeof out, id), 0);
    /* run A wrote 100..300; run B (resumed elsewhere, copied in) wrote 400 */
    for (int it = 100; it <= 300; it += 100) {
        sg_ckpt_iter_path(run, it, path, sizeof path);
        CHECK_EQ_INT(write_fake_run(path, 10, it, A), 0);
    }
    sg_ckpt_iter_path(run, 50, path, sizeof path);
    CHECK_EQ_INT(write_fake(path, 10, 50), 0); /* from before run ids */
    sg_ckpt_iter_path(run, 400, path, sizeof path);
    CHECK_EQ_INT(write_fake_run(path, 1000, 400, B), 0); /* truncated below: header stays */
    /* a fresh run owns none of them */
    CHECK_EQ_INT(sg_ckpt_foreign(run, NULL, out, sizeof out, id), 5);
    CHECK_STR_CONTAINS(out, "iter_00000400");
    CHECK(strcmp(id, B) == 0);
    CHECK_EQ_INT(sg_ckpt_foreign(run, A, out, sizeof out, id), 1);  /* B's */
    CHECK_EQ_INT(sg_ckpt_foreign(run, "", out, sizeof out, id), 4); /* all with an id */
    /* auto: the newest readable header (B's) decides the run; B's files
     * that fail their checksum are skipped, and A's are never taken instead */
    CHECK_EQ_INT(sg_ckpt_find_latest(run, out, sizeof out), 1);
    CHECK_STR_CONTAINS(out, "iter_00000400");
    sg_ckpt_iter_path(run, 400, path, sizeof path);
    flip_byte_from_end(path, 100);
    CHECK_EQ_INT(sg_ckpt_find_latest(run, out, sizeof out), 1);
    CHECK_STR_CONTAINS(out, "iter_00000050"); /* no run id: counts as B's own */
    /* a truncated newest file names no run: the next readable header does */
    truncate_half(path);
    CHECK_EQ_INT(sg_ckpt_find_latest(run, out, sizeof out), 1);
    CHECK_STR_CONTAINS(out, "iter_00000300");
    unlink(path);
    /* retention of run B (keep 1, newest 450) never touches A's files */
    sg_ckpt_iter_path(run, 450, path, sizeof path);
    CHECK_EQ_INT(write_fake_run(path, 10, 450, B), 0);
    sg_ckpt_iter_path(run, 420, path, sizeof path);
    CHECK_EQ_INT(write_fake_run(path, 10, 420, B), 0);
    CHECK_EQ_INT(sg_ckpt_prune(run, 1, 450, B), 2); /* B's 420 and the id-less 50 */
    int left[] = {100, 200, 300, 450};
    for (int i = 0; i < 4; i++) {
        sg_ckpt_iter_path(run, left[i], path, sizeof path);
        CHECK_MSG(access(path, F_OK) == 0, "iter %d deleted", left[i]);
    }
    /* retention of run A keeps to A's */
    CHECK_EQ_INT(sg_ckpt_prune(run, 1, 300, A), 2);
    sg_ckpt_iter_path(run, 300, path, sizeof path);
    CHECK(access(path, F_OK) == 0);
    sg_ckpt_iter_path(run, 450, path, sizeof path);
    CHECK(access(path, F_OK) == 0);
    /* a malformed run id is refused, naming it */
    sg_ckpt_iter_path(run, 500, path, sizeof path);
    CHECK_EQ_INT(write_fake_run(path, 10, 5, "not-hex"), 0);
    char why[512];
    CHECK(sg_ckpt_open_valid(path, why, sizeof why) == NULL);
    CHECK_STR_CONTAINS(why, "run_id");
}

/* A checkpoint with every state key, written by sg_ckpt_save from a tiny
 * model (no optimizer). */
static void write_state_ckpt(const char *path, sg_backend **be_out, sg_model **m_out) {
    sg_backend_opts bo = {.threads = 1, .cudnn_deterministic = 1};
    sg_backend *be = sg_backend_create("cpu", &bo);
    sg_model_opts o;
    sg_model_opts_default(&o, SG_RESNET18);
    o.base_width = 2;
    o.num_classes = 3;
    o.aux_head = 0;
    for (int i = 0; i < 4; i++) o.blocks[i] = 1;
    sg_model *m = sg_model_create(be, &o);
    sg_train_state st = {.iter = 12,
                         .epoch = 3,
                         .sample_pos = 8,
                         .total_steps = 40,
                         .world = 2,
                         .seed = 7,
                         .best_miou = 0.25,
                         .best_iter = 10};
    snprintf(st.run_id, sizeof st.run_id, "0123456789abcdef");
    if (sg_ckpt_save(path, m, NULL, &st, NULL, NULL) != SG_OK) abort();
    *be_out = be;
    *m_out = m;
}

/* Issue 13 item 4: every metadata value is range-checked (iter=-5 trained 7
 * steps and reported 2; epoch or num_batches_tracked = INT64_MAX overflowed,
 * UBSan at trainer.c and model_run.c; world_size 0 was accepted). */
static void test_metadata_ranges(void) {
    char run[512], ck[512], path[600], bad[600];
    mkrun("ranges", run, ck);
    sg_ckpt_iter_path(run, 12, path, sizeof path);
    snprintf(bad, sizeof bad, "%s/bad.safetensors", ck);
    sg_backend *be;
    sg_model *m;
    write_state_ckpt(path, &be, &m);
    sg_st_file *f = sg_st_open(path);
    CHECK(f != NULL);
    sg_train_state st;
    CHECK_EQ_INT(sg_ckpt_read_state(f, &st), SG_OK);
    CHECK(st.iter == 12 && st.epoch == 3 && st.sample_pos == 8 && st.world == 2);
    CHECK(strcmp(st.run_id, "0123456789abcdef") == 0);
    sg_st_close(f);
    const struct {
        const char *key, *value;
    } cases[] = {{"iter", "-5"},
                 {"iter", "9007199254740993"},
                 {"epoch", "9223372036854775807"},
                 {"epoch", "1e3"},
                 {"sample_pos", "-1"},
                 {"total_steps", "99999999999999999999"},
                 {"world_size", "0"},
                 {"world_size", "70000"},
                 {"momentum_initialized", "2"},
                 {"best_iter", "13"}, /* after iter */
                 {"best_iter", "-2"},
                 {"seed", "-1"},
                 {"best_miou", "2.5"},
                 {"best_miou", "nan"}, /* while best_iter says 10 */
                 {"iter", NULL}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        CHECK_EQ_INT(ckpt_rewrite(path, bad, cases[i].key, cases[i].value, NULL, 0), 0);
        char why[512];
        f = sg_ckpt_open_valid(bad, why, sizeof why); /* checksums are valid */
        CHECK_MSG(f != NULL, "%s", why);
        sg_log_set_level(SG_LOG_INFO);
        int rc = sg_ckpt_read_state(f, &st);
        sg_log_set_level(SG_LOG_ERROR);
        sg_st_close(f);
        CHECK_MSG(rc != SG_OK, "%s = %s accepted", cases[i].key,
                  cases[i].value ? cases[i].value : "(missing)");
    }
    /* num_batches_tracked = INT64_MAX would overflow at the next step */
    CHECK_EQ_INT(ckpt_rewrite(path, bad, NULL, NULL, "encoder.bn1.num_batches_tracked", INT64_MAX),
                 0);
    f = sg_st_open(bad);
    CHECK(f != NULL);
    CHECK(sg_ckpt_load_model(f, m) != SG_OK);
    sg_st_close(f);
    CHECK_EQ_INT(ckpt_rewrite(path, bad, NULL, NULL, "encoder.bn1.num_batches_tracked", 1234), 0);
    f = sg_st_open(bad);
    CHECK(f != NULL);
    CHECK_EQ_INT(sg_ckpt_load_model(f, m), SG_OK);
    CHECK(*sg_model_find(m, "encoder.bn1.num_batches_tracked")->i64 == 1234);
    sg_st_close(f);
    sg_model_destroy(m);
    sg_backend_destroy(be);
}

/* Issue 13 item 5: the stored config goes through the YAML limits. */
static void test_stored_config_limits(void) {
    char run[512], ck[512], path[600], bad[600];
    mkrun("cfglimits", run, ck);
    sg_ckpt_iter_path(run, 1, path, sizeof path);
    snprintf(bad, sizeof bad, "%s/bad.safetensors", ck);
    CHECK_EQ_INT(write_fake(path, 10, 1), 0);
    char deep[1024] = "seed: ";
    for (int i = 0; i < 200; i++) strcat(deep, "[");
    for (int i = 0; i < 200; i++) strcat(deep, "]");
    CHECK_EQ_INT(ckpt_rewrite(path, bad, "config", deep, NULL, 0), 0);
    sg_st_file *f = sg_st_open(bad);
    CHECK(f != NULL);
    sg_config *cfg = malloc(sizeof *cfg);
    sg_config_defaults(cfg);
    sg_log_set_level(SG_LOG_INFO);
    CHECK_EQ_INT(sg_ckpt_read_config(f, cfg), SG_ERR_CONFIG);
    sg_st_close(f);
    /* 2 MiB of comments: within the 16 MiB header, above the 1 MiB YAML limit */
    size_t big = 2u << 20;
    char *text = malloc(big + 1);
    memset(text, '#', big);
    for (size_t i = 99; i < big; i += 100) text[i] = '\n';
    text[big] = 0;
    CHECK_EQ_INT(ckpt_rewrite(path, bad, "config", text, NULL, 0), 0);
    free(text);
    f = sg_st_open(bad);
    CHECK(f != NULL);
    CHECK_EQ_INT(sg_ckpt_read_config(f, cfg), SG_ERR_CONFIG);
    sg_log_set_level(SG_LOG_ERROR);
    sg_st_close(f);
    free(cfg);
}

/* A child rewrites iter_2 (16 MB) in a loop; the parent kills it with
 * SIGKILL while a write is in progress (its .tmp exists). Whatever moment the
 * kill hit, the newest valid checkpoint must load and iter_1 must be intact. */
static void test_kill9_during_write(void) {
    char run[512], ck[512], p1[600], p2[600], tmp[640], out[600], why[256];
    mkrun("kill9", run, ck);
    sg_ckpt_iter_path(run, 1, p1, sizeof p1);
    sg_ckpt_iter_path(run, 2, p2, sizeof p2);
    snprintf(tmp, sizeof tmp, "%s.tmp", p2);
    CHECK_EQ_INT(write_fake(p1, 1000, 1), 0);
    for (int round = 0; round < 3; round++) {
        pid_t pid = fork();
        CHECK(pid >= 0);
        if (pid == 0) {
            for (int k = 0;; k++) write_fake(p2, 4u << 20, 2 + k);
        }
        int seen = 0;
        for (int i = 0; i < 20000 && !seen; i++) { /* up to ~20 s */
            seen = access(tmp, F_OK) == 0;
            if (!seen) usleep(1000);
        }
        if (seen) usleep((useconds_t)(round * 3000));
        kill(pid, SIGKILL);
        int status;
        waitpid(pid, &status, 0);
        CHECK(seen);
        CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
        CHECK_EQ_INT(sg_ckpt_find_latest(run, out, sizeof out), 1);
        sg_st_file *f = sg_ckpt_open_valid(out, why, sizeof why);
        CHECK_MSG(f != NULL, "%s: %s", out, why);
        sg_st_close(f);
        f = sg_ckpt_open_valid(p1, why, sizeof why);
        CHECK_MSG(f != NULL, "previous checkpoint damaged: %s", why);
        sg_st_close(f);
    }
}

int main(void) {
    snprintf(root, sizeof root, "%s/sg_test_ckpt_XXXXXX",
             getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (!mkdtemp(root)) return 1;
    sg_log_set_level(SG_LOG_ERROR);
    TEST_RUN(test_roundtrip);
    TEST_RUN(test_corrupt_detected);
    TEST_RUN(test_metadata_corruption_detected);
    TEST_RUN(test_auto_resume_skips_bad_newest);
    TEST_RUN(test_prune);
    TEST_RUN(test_prune_keeps_just_written);
    TEST_RUN(test_kill9_during_write);
    TEST_RUN(test_parse_error_names_cause);
    TEST_RUN(test_run_ids);
    TEST_RUN(test_metadata_ranges);
    TEST_RUN(test_stored_config_limits);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    if (!tu_failed_cases && system(cmd) != 0) fprintf(stderr, "could not remove %s\n", root);
    return TEST_EXIT();
}
