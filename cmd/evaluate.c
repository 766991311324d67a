/* cmd/evaluate.c - `segtrain eval --checkpoint CK [--config F]`: exact mIoU of
 * a checkpoint on data.val_split (every sample once, whatever the world
 * size); table on stdout, JSON in <run_dir>/eval/iter_<N>.json (or --out). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "train/checkpoint.h"
#include "core/cli.h"
#include "train/device.h"
#include "train/from_checkpoint.h"
#include "cmd/commands.h"
#include "train/evaluator.h"
#include "train/jsonw.h"
#include "core/log.h"
#include "train/metrics.h"
#include "data/dataset.h"
#include "dist/comm.h"

static long long checkpoint_iter(const char *ck) {
    sg_st_file *f = sg_st_open(ck);
    const char *v = f ? sg_st_meta(f, "iter") : NULL;
    long long it = v ? atoll(v) : -1;
    if (f) sg_st_close(f);
    return it;
}

int sg_cmd_eval(int argc, char **argv) {
    const char *ck = NULL, *out = NULL, *split = NULL;
    sg_cli_opt opts[] = {
        {"--checkpoint", "FILE", "checkpoint (or exported weights) to evaluate", &ck, NULL},
        {"--split", "SPLIT", "evaluate this split instead of data.val_split", &split, NULL},
        {"--out", "FILE", "write the JSON here (default <run_dir>/eval/iter_<N>.json)", &out,
         NULL},
        {NULL, NULL, NULL, NULL, NULL}};
    sg_cli cli;
    const char *usage = "segtrain eval --checkpoint CK [--config FILE] [--split S] [--out F.json]";
    sg_status st = sg_cli_parse(&cli, argc, argv, usage, opts);
    if (st != SG_OK) return sg_exit_code(st);
    if (cli.help) {
        sg_cli_print_help(stdout, &cli, opts);
        return 0;
    }
    sg_log_set_level(cli.log_level);
    if (!ck) return sg_exit_code(sg_cli_usage_error(&cli, "--checkpoint is required"));
    sg_config cfg;
    st = sg_config_for_checkpoint(&cli, ck, &cfg);
    if (st != SG_OK) return sg_exit_code(st);
    if (cli.print_config) {
        sg_config_write(&cfg, stdout);
        return 0;
    }
    const char *sp = split ? split : cfg.data.val_split;
    if (!sp[0]) {
        SG_ERROR("no split to evaluate: set data.val_split or pass --split");
        return 2;
    }
    /* a malformed launch environment is the user's setup: exit 2 */
    sg_dist_env env;
    if (sg_dist_env_read(&env) != 0) return 2;
    sg_backend *be = sg_open_backend(&cfg, &env);
    if (!be) return 1;
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
    m = sg_model_from_checkpoint(be, &cfg, ck);
    if (!m) goto done;
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
        if (out) {
            snprintf(path, sizeof path, "%s", out);
        } else {
            snprintf(path, sizeof path, "%s/eval", cfg.run_dir);
            if (sg_mkdirs(path) != 0) {
                SG_ERROR("cannot create %s: %s (set run_dir or pass --out)", path,
                         strerror(errno));
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
    return rc;
}
