/* cmd/commands_pending.c - commands whose issue has not landed yet. Each
 * prints what it is waiting for and exits 2; a command's real file replaces
 * its entry here when it lands. */
#include "cmd/commands.h"
#include "cmd/log.h"

static int pending(const char *cmd, const char *what) {
    SG_ERROR("'segtrain %s' is not available yet: it comes with %s (see README, feature state)",
             cmd, what);
    return 2;
}
int sg_cmd_train(int argc, char **argv) { (void)argc; (void)argv; return pending("train", "the training-loop issue"); }
int sg_cmd_eval(int argc, char **argv) { (void)argc; (void)argv; return pending("eval", "the training-loop issue"); }
int sg_cmd_predict(int argc, char **argv) { (void)argc; (void)argv; return pending("predict", "the training-loop issue"); }
int sg_cmd_export(int argc, char **argv) { (void)argc; (void)argv; return pending("export", "the training-loop issue"); }
int sg_cmd_bench(int argc, char **argv) { (void)argc; (void)argv; return pending("bench", "the benchmark issue"); }
int sg_cmd_synth(int argc, char **argv) { (void)argc; (void)argv; return pending("synth", "the data issue"); }
