/* cmd/main.c - `segtrain [SUBCOMMAND] [options]`: routes to the commands.
 *
 * Owns only the routing: program-wide options (--help, --version,
 * --help-config), the distributed launcher's options (to sg_cmd_launch), and
 * the subcommand table. Each command parses its own arguments (core/cli.h).
 * `segtrain --config F ...` without a subcommand is `segtrain train ...`.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cmd/commands.h"
#include "core/cli.h"
#include "core/config.h"
#include "core/sigmask.h"
#include "core/threads.h"
#include "core/util.h"
#include "dist/launch.h"
#include "kernels/backend.h"
#include "sg_version.h"
#include "train/config_rules.h"

#ifndef SG_HAVE_CPU
#define SG_HAVE_CPU 1
#endif

/* `segtrain config`: validate a configuration (file + --set) and print it
 * resolved. Writes nothing; exit 2 when it is not valid. */
static int cmd_config(int argc, char **argv) {
    sg_cli cli;
    static sg_config cfg;
    sg_status st = sg_cli_begin_with(&cli, &cfg, argc, argv,
                                     "segtrain config [--config FILE] [--set KEY=VALUE]...", NULL,
                                     sg_train_config_rules);
    if (st != SG_OK || cli.done) return sg_exit_code(st);
    if (cli.n_args)
        return sg_exit_code(sg_cli_usage_error(&cli, "unexpected argument '%s'", cli.args[0]));
    printf("# configuration valid (hash %016llx)\n", sg_config_hash(&cfg));
    sg_config_write_origins(&cfg, stdout);
    return fflush(stdout) == 0 ? 0 : 1;
}

static const struct {
    const char *name;
    int (*fn)(int, char **);
    const char *help;
} g_commands[] = {
    {"train", sg_cmd_train, "train a model (the default when only options are given)"},
    {"eval", sg_cmd_eval, "evaluate a checkpoint on data.val_split (mIoU, per-class IoU)"},
    {"predict", sg_cmd_predict, "write predicted label maps for images"},
    {"export", sg_cmd_export, "write a checkpoint's weights as safetensors (torchvision names)"},
    {"bench", sg_cmd_bench, "measure training throughput and memory"},
    {"synth", sg_cmd_synth, "generate a small synthetic dataset (the demo's data)"},
    {"convert", sg_cmd_convert, "PyTorch checkpoint (.pth) -> safetensors, natively (no Python)"},
    {"plot", sg_cmd_plot, "draw a run's curves and per-class IoU into one PNG (Cairo)"},
    {"config", cmd_config, "check a configuration and print it resolved (writes nothing)"},
};
#define N_COMMANDS (int)(sizeof g_commands / sizeof g_commands[0])

static void usage(FILE *out) {
    fprintf(out,
            "usage: segtrain [SUBCOMMAND] [--config FILE] [--set KEY=VALUE]... [options]\n"
            "       segtrain --nproc-per-node N [--nnodes M --node-rank R --master-addr A "
            "--master-port P] [--kill-grace-s S]\n"
            "                [--max-restarts K [--restart-backoff-s S] "
            "[--max-restarts-without-progress N]\n"
            "                [--node-timeout-s S] [--agent-port P]] [SUBCOMMAND] ...\n"
            "       segtrain --help | --version | --help-config [--markdown]\n\nsubcommands:\n");
    for (int i = 0; i < N_COMMANDS; i++)
        fprintf(out, "  %-9s %s\n", g_commands[i].name, g_commands[i].help);
    fprintf(out,
            "\n`segtrain SUBCOMMAND --help` lists a subcommand's options; every subcommand takes\n"
            "--config FILE, --set KEY=VALUE (repeatable), --print-config, --quiet, --verbose.\n");
}

static int usage_error(const char *fmt, const char *arg) {
    fprintf(stderr, "segtrain: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\nusage: segtrain [SUBCOMMAND] [--config FILE] [--set KEY=VALUE]... "
                    "(segtrain --help lists the subcommands)\n");
    return 2;
}

static int version(void) {
    printf("segtrain %s (git %s)\n", SG_VERSION, SG_GIT_HASH);
    printf("backends:");
    if (SG_HAVE_CPU) printf(" cpu (oneDNN)");
    if (sg_backend_cuda_compiled()) printf("%s cuda (cuDNN, NCCL)", SG_HAVE_CPU ? "," : "");
    printf("\n");
    if (sg_backend_cuda_compiled()) {
        char v[256];
        sg_backend_cuda_versions(v, sizeof v);
        printf("cuda libraries: %s\n", v);
    }
    return fflush(stdout) == 0 ? 0 : 1;
}

/* The OpenMP runtime reads its wait policy before main() (core/threads.h):
 * when the user chose none, run this program once more with segtrain's
 * short spin count, now, before any thread exists. The exec keeps the pid, argv and
 * the rest of the environment; the launcher's workers inherit the policy and
 * do not re-execute. */
static void use_segtrain_omp_wait_policy(char **argv) {
    if (!sg_omp_policy_wants_reexec()) return;
    sg_omp_policy_set_env();
    execv("/proc/self/exe", argv);
    int e = errno;
    sg_omp_policy_undo();
    fprintf(stderr,
            "segtrain: warning: could not restart with GOMP_SPINCOUNT=%s (execv "
            "/proc/self/exe: %s); OpenMP threads will spin about 3 ms at every barrier, "
            "which is slow on shared cores: set GOMP_SPINCOUNT=%s yourself\n",
            SG_OMP_SPINCOUNT, strerror(e), SG_OMP_SPINCOUNT);
}

int main(int argc, char **argv) {
    use_segtrain_omp_wait_policy(argv);
    /* before anything writes a file: past `ulimit -f` a write fails with
     * EFBIG (reported, the partial file removed) instead of SIGXFSZ killing
     * the process mid-checkpoint; the launcher's workers inherit it */
    if (sg_ignore_file_size_signal() != SG_OK) return 1;
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--")) break;
        if (sg_launch_is_option(argv[i])) return sg_cmd_launch(argc, argv);
    }
    const char *a = argv[1];
    if (!strcmp(a, "--help") || !strcmp(a, "-h") || !strcmp(a, "help")) {
        if (argc > 2) return usage_error("%s takes no further arguments", a);
        usage(stdout);
        return 0;
    }
    if (!strcmp(a, "--version")) {
        if (argc > 2) return usage_error("%s takes no further arguments", a);
        return version();
    }
    if (!strcmp(a, "--help-config")) {
        int markdown = 0;
        for (int i = 2; i < argc; i++) {
            if (!strcmp(argv[i], "--markdown")) markdown = 1;
            else
                return usage_error("unknown option '%s' for --help-config (only --markdown)",
                                   argv[i]);
        }
        sg_config_print_schema(stdout, markdown);
        return fflush(stdout) == 0 ? 0 : 1;
    }
    for (int i = 0; i < N_COMMANDS; i++)
        if (!strcmp(a, g_commands[i].name)) return g_commands[i].fn(argc - 1, argv + 1);
    if (!strncmp(a, "--config", 8) || !strncmp(a, "--set", 5) || !strcmp(a, "--print-config") ||
        !strcmp(a, "--quiet") || !strcmp(a, "--verbose")) {
        /* options only: train; argv[0] becomes the command name */
        argv[0] = (char *)"train";
        return sg_cmd_train(argc, argv);
    }
    if (a[0] == '-') return usage_error("unknown option '%s'", a);
    const char *close = NULL;
    int best = 3; /* at most 2 edits away ("trian", "evl") */
    for (int i = 0; i < N_COMMANDS; i++) {
        int d = sg_edit_distance(a, g_commands[i].name);
        if (d < best) best = d, close = g_commands[i].name;
    }
    if (close && (int)strlen(a) > best) { /* not a one- or two-letter guess */
        char msg[160];
        snprintf(msg, sizeof msg, "unknown subcommand '%%s' (did you mean %s?)", close);
        return usage_error(msg, a);
    }
    return usage_error("unknown subcommand '%s'", a);
}
