/* cmd/evaluate.c - `segtrain eval --checkpoint CK [--config F]`: exact mIoU of
 * a checkpoint on data.val_split (every sample once, whatever the world
 * size); table on stdout, JSON to --out FILE, or with --config (the user's
 * own configuration) to <run_dir>/eval/iter_<N>.json under the run_dir's
 * lock. Without --config the configuration is the one stored in the
 * checkpoint, an untrusted file: its run_dir is never written to (table
 * only, as torchvision's --test-only; --out saves the JSON). */
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cmd/commands.h"
#include "core/cli.h"
#include "core/log.h"
#include "core/outdir.h"
#include "core/util.h"
#include "data/dataset.h"
#include "data/formats.h"
#include "dist/comm.h"
#include "io/json.h"
#include "train/checkpoint.h"
#include "train/device.h"
#include "train/evaluator.h"
#include "train/from_checkpoint.h"
#include "train/metrics.h"

/* The checkpoint's iteration, -1 when it has none (exported weights). */
static long long checkpoint_iter(const char *ck) {
    char why[256];
    sg_st_file *f = sg_st_open_why(ck, why, sizeof why);
    const char *v = f ? sg_st_meta(f, "iter") : NULL;
    long it = -1;
    if (!v || sg_parse_long(v, 0, LONG_MAX, &it) != 0) it = -1;
    if (f) sg_st_close(f);
    return it;
}

int sg_cmd_eval(int argc, char **argv) {
    const char *ck = NULL, *out = NULL, *split = NULL;
    sg_cli_opt opts[] = {
        {"--checkpoint", "FILE", "checkpoint (or exported weights) to evaluate", &ck, NULL},
        {"--split", "SPLIT", "evaluate this split instead of data.val_split", &split, NULL},
        {"--out", "FILE",
         "write the JSON here (default with --config: <run_dir>/eval/iter_<N>.json; without: "
         "not saved)",
         &out, NULL},
        {NULL, NULL, NULL, NULL, NULL}};
    sg_cli cli;
    const char *usage = "segtrain eval --checkpoint CK [--config FILE] [--split S] [--out F.json]";
    sg_status st = sg_cli_begin_args(&cli, argc, argv, usage, opts);
    if (st != SG_OK || cli.done) return sg_exit_code(st);
    if (!ck) return sg_exit_code(sg_cli_usage_error(&cli, "--checkpoint is required"));
    sg_config cfg;
    st = sg_cli_load_checkpoint_config(&cli, ck, &cfg);
    if (st != SG_OK || cli.done) return sg_exit_code(st);
    const char *sp = split ? split : sg_format_split(&cfg.data, 1);
    if (!sp || !sp[0]) {
        SG_ERROR("no split to evaluate: set data.val_split or pass --split");
        return 2;
    }
    /* paths in a configuration are relative to the working directory; a
     * checkpoint's stored data.root is the training run's, which may not
     * hold here: say which key to pass before anything starts */
    struct stat root_st;
    if (stat(cfg.data.root, &root_st) != 0 || !S_ISDIR(root_st.st_mode)) {
        char cwd[PATH_MAX];
        int rel = cfg.data.root[0] != '/';
        SG_ERROR("eval: data.root '%s'%s is not a directory%s%s%s: pass --set data.root=DIR (the "
                 "dataset's directory)%s",
                 cfg.data.root,
                 cli.config_path ? "" : " (from the checkpoint's stored configuration)",
                 rel ? " relative to the working directory " : "",
                 rel ? (getcwd(cwd, sizeof cwd) ? cwd : "(unknown)") : "",
                 rel ? ", where relative paths are resolved" : "",
                 cli.config_path || !rel ? "" : ", or run eval from the directory training ran in");
        return 2;
    }
    /* a malformed launch environment is the user's setup: exit 2 */
    sg_dist_env env;
    if (sg_dist_env_read(&env) != 0) return 2;
    /* <run_dir>/eval/ only for a run_dir the user named (--config), under
     * its lock: never the one a checkpoint's stored config names */
    int to_run_dir = !out && cli.config_path != NULL;
    sg_run_lock lock = {-1};
    if (to_run_dir && env.rank == 0 &&
        sg_run_lock_acquire(&lock, cfg.run_dir, "segtrain eval") != SG_OK) {
        SG_ERROR("eval: pass --out FILE to write the metrics elsewhere");
        return 1;
    }
    sg_backend *be = sg_open_backend(&cfg, &env);
    if (!be) {
        sg_run_lock_release(&lock);
        return 1;
    }
    int rc = 1;
    sg_comm *comm = NULL;
    sg_model *m = NULL;
    sg_dataset *ds = NULL;
    sg_evaluator ev;
    memset(&ev, 0, sizeof ev);
    int64_t *idx = NULL, *conf = NULL;
    comm = sg_comm_create(&cfg, be);
    if (!comm) goto done;
    int rank = sg_comm_rank(comm), world = sg_comm_world(comm);
    sg_status mst;
    m = sg_model_from_checkpoint(be, &cfg, ck, &mst);
    if (!m) {
        rc = sg_exit_code(mst); /* a corrupt --checkpoint is the user's input: 2 */
        goto done;
    }
    ds = sg_dataset_open(&cfg.data, sp, cfg.model.num_classes);
    if (!ds) goto done;
    if (sg_evaluator_init(&ev, be, ds, &cfg) != 0) goto done;
    int64_t n;
    idx = sg_evaluator_shard(sg_dataset_size(ds), world, rank, &n);
    int C = cfg.model.num_classes;
    conf = calloc((size_t)C * C, sizeof(int64_t));
    SG_CHECK(conf != NULL, "out of host memory");
    if (sg_evaluator_run(&ev, m, comm, idx, n, 0, conf) != 0) goto done;
    rc = 0;
    if (rank == 0) {
        sg_metrics mt;
        sg_metrics_from_confusion(conf, C, &mt);
        long long it = checkpoint_iter(ck);
        SG_INFO("evaluation of %s on %s (%lld images):", ck, sp, (long long)sg_dataset_size(ds));
        sg_metrics_print_table(&mt, &cfg, stdout);
        char path[SG_STR + 64];
        if (!out && !to_run_dir) {
            SG_INFO("metrics not saved: pass --out FILE.json (the configuration came from the "
                    "checkpoint, whose run_dir eval does not write to; --config names yours)");
            goto done;
        }
        if (out) {
            snprintf(path, sizeof path, "%s", out);
            if (sg_mkdirs_for_output("eval", path) != 0) {
                rc = 1;
                goto done;
            }
        } else {
            snprintf(path, sizeof path, "%s/eval", cfg.run_dir);
            if (sg_mkdirs(path) != 0) {
                SG_ERROR("cannot create %s: %s (set run_dir or pass --out)", path, strerror(errno));
                rc = 1;
                goto done;
            }
            snprintf(path, sizeof path, "%s/eval/iter_%08lld.json", cfg.run_dir, it < 0 ? 0 : it);
        }
        sg_json j = {0};
        sg_json_begin(&j);
        sg_json_int(&j, "iter", it);
        sg_json_str(&j, "checkpoint", ck);
        sg_json_str(&j, "split", sp);
        sg_json_int(&j, "images", (long long)sg_dataset_size(ds));
        /* test-time augmentation used (papers report with and without) */
        sg_json_num_array(&j, "eval_scales", cfg.eval.scales, cfg.eval.n_scales);
        sg_json_int(&j, "eval_flip", cfg.eval.flip);
        sg_metrics_to_json(&mt, &cfg, &j);
        sg_json_end(&j);
        if (sg_write_text_file(path, j.buf) != 0) rc = 1;
        else SG_INFO("metrics written to %s", path);
        sg_json_free(&j);
    }
done:
    free(conf);
    free(idx);
    if (ev.be) sg_evaluator_free(&ev);
    sg_dataset_close(ds);
    if (m) sg_model_destroy(m);
    sg_comm_destroy(comm);
    sg_backend_destroy(be);
    sg_run_lock_release(&lock);
    return rc;
}
