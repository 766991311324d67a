/* core/cli.c - see cli.h: the options every command shares, loading the
 * configuration they name, and preparing the run directory. */
#include "core/cli.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/log.h"

static const struct {
    const char *name, *metavar, *help;
} g_common[] = {
    {"--config", "FILE",
     "YAML configuration (defaults for every key not given; base: FILE in it inherits from another)"},
    {"--set", "KEY=VALUE", "override one key, repeatable (e.g. --set train.lr=0.02)"},
    {"--print-config", NULL, "print the resolved (merged) configuration as YAML and exit"},
    {"--quiet", NULL, "log warnings and errors only"},
    {"--verbose", NULL, "log debug messages too (and other ranks' info)"},
    {"--help", NULL, "show this help"},
};

sg_status sg_cli_usage_error(const sg_cli *cli, const char *fmt, ...) {
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    const char *cmd = cli && cli->command ? cli->command : "";
    fprintf(stderr, "segtrain%s%s: %s\n", *cmd ? " " : "", cmd, msg);
    if (cli && cli->usage) fprintf(stderr, "usage: %s\n", cli->usage);
    fprintf(stderr, "(segtrain %s%s--help lists the options)\n", cmd, *cmd ? " " : "");
    return SG_ERR_CONFIG;
}

void sg_cli_print_help(FILE *out, const sg_cli *cli, const sg_cli_opt *opts) {
    fprintf(out, "usage: %s\n", cli->usage ? cli->usage : "segtrain");
    if (opts && opts[0].name) {
        fprintf(out, "\noptions:\n");
        for (const sg_cli_opt *o = opts; o->name; o++) {
            char left[96];
            snprintf(left, sizeof left, "%s%s%s", o->name, o->metavar ? " " : "",
                     o->metavar ? o->metavar : "");
            fprintf(out, "  %-26s %s\n", left, o->help ? o->help : "");
        }
    }
    fprintf(out, "\ncommon options:\n");
    for (size_t i = 0; i < sizeof g_common / sizeof g_common[0]; i++) {
        char left[96];
        snprintf(left, sizeof left, "%s%s%s", g_common[i].name, g_common[i].metavar ? " " : "",
                 g_common[i].metavar ? g_common[i].metavar : "");
        fprintf(out, "  %-26s %s\n", left, g_common[i].help);
    }
    fprintf(out, "\nsegtrain --help-config lists every configuration key.\n");
}

/* Matches "--name" or "--name=value". Returns 1 (and *inline_val, NULL when
 * no '=') or 0. */
static int opt_match(const char *arg, const char *name, const char **inline_val) {
    size_t n = strlen(name);
    if (strncmp(arg, name, n) != 0) return 0;
    if (arg[n] == 0) {
        *inline_val = NULL;
        return 1;
    }
    if (arg[n] == '=') {
        *inline_val = arg + n + 1;
        return 1;
    }
    return 0;
}

/* Value of an option at argv[*i]: inline, or the next argument. */
static sg_status take_value(sg_cli *cli, int argc, char **argv, int *i, const char *name,
                            const char *inline_val, const char **out) {
    if (inline_val) {
        *out = inline_val;
        return SG_OK;
    }
    if (*i + 1 >= argc) return sg_cli_usage_error(cli, "%s needs a value", name);
    *out = argv[++*i];
    return SG_OK;
}

sg_status sg_cli_parse(sg_cli *cli, int argc, char **argv, const char *usage,
                       const sg_cli_opt *opts) {
    memset(cli, 0, sizeof *cli);
    cli->command = argc > 0 ? argv[0] : "";
    cli->usage = usage;
    cli->log_level = SG_LOG_INFO;
    int only_positional = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *iv = NULL;
        if (only_positional || a[0] != '-' || a[1] == 0) {
            if (cli->n_args >= SG_CLI_MAX_ARGS)
                return sg_cli_usage_error(cli, "more than %d arguments", SG_CLI_MAX_ARGS);
            cli->args[cli->n_args++] = a;
            continue;
        }
        if (!strcmp(a, "--")) {
            only_positional = 1;
            continue;
        }
        if (opt_match(a, "--config", &iv)) {
            if (cli->config_path) return sg_cli_usage_error(cli, "--config given twice");
            if (take_value(cli, argc, argv, &i, "--config", iv, &cli->config_path))
                return SG_ERR_CONFIG;
            if (!cli->config_path[0]) return sg_cli_usage_error(cli, "--config needs a file name");
        } else if (opt_match(a, "--set", &iv)) {
            if (cli->n_sets >= SG_CLI_MAX_SETS)
                return sg_cli_usage_error(cli, "more than %d --set options", SG_CLI_MAX_SETS);
            if (take_value(cli, argc, argv, &i, "--set", iv, &cli->sets[cli->n_sets]))
                return SG_ERR_CONFIG;
            cli->n_sets++;
        } else if (!strcmp(a, "--print-config")) {
            cli->print_config = 1;
        } else if (!strcmp(a, "--quiet") || !strcmp(a, "-q")) {
            cli->log_level = SG_LOG_WARN;
        } else if (!strcmp(a, "--verbose") || !strcmp(a, "-v")) {
            cli->log_level = SG_LOG_DEBUG;
        } else if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            cli->help = 1;
        } else {
            const sg_cli_opt *o = NULL;
            for (const sg_cli_opt *p = opts; p && p->name; p++)
                if (opt_match(a, p->name, &iv)) {
                    o = p;
                    break;
                }
            if (!o) return sg_cli_usage_error(cli, "unknown option '%s'", a);
            if (o->metavar) {
                const char *v = NULL;
                if (take_value(cli, argc, argv, &i, o->name, iv, &v)) return SG_ERR_CONFIG;
                if (o->value) *o->value = v;
            } else {
                if (iv) return sg_cli_usage_error(cli, "%s takes no value", o->name);
                if (o->flag) *o->flag = 1;
            }
        }
    }
    return SG_OK;
}

sg_status sg_cli_load_config(const sg_cli *cli, sg_config *cfg) {
    return sg_cli_load_config_with(cli, cfg, NULL);
}

sg_status sg_cli_load_config_with(const sg_cli *cli, sg_config *cfg, const sg_config_rule *rules) {
    sg_config_defaults(cfg);
    /* every mistake of the file and of the --set options in one run; the
     * cross-key rules only once every value loaded (a value that failed
     * would be checked at its default) */
    int failed = cli->config_path && sg_config_load_file(cfg, cli->config_path) != SG_OK;
    for (int i = 0; i < cli->n_sets; i++) failed |= sg_config_set(cfg, cli->sets[i]) != SG_OK;
    if (failed) {
        SG_ERROR("the configuration%s%s did not load (nothing was written): fix the errors above",
                 cli->config_path ? " from " : "", cli->config_path ? cli->config_path : "");
        return SG_ERR_CONFIG;
    }
    if (sg_config_validate_with(cfg, rules) != SG_OK) {
        SG_ERROR("the configuration%s%s is not valid (nothing was written)",
                 cli->config_path ? " from " : "", cli->config_path ? cli->config_path : "");
        return SG_ERR_CONFIG;
    }
    return SG_OK;
}

sg_status sg_cli_begin_args(sg_cli *cli, int argc, char **argv, const char *usage,
                            const sg_cli_opt *opts) {
    sg_status st = sg_cli_parse(cli, argc, argv, usage, opts);
    if (st != SG_OK) return st;
    sg_log_set_level(cli->log_level);
    if (cli->help) {
        sg_cli_print_help(stdout, cli, opts);
        cli->done = 1;
    }
    return SG_OK;
}

sg_status sg_cli_begin(sg_cli *cli, sg_config *cfg, int argc, char **argv, const char *usage,
                       const sg_cli_opt *opts) {
    return sg_cli_begin_with(cli, cfg, argc, argv, usage, opts, NULL);
}

sg_status sg_cli_begin_with(sg_cli *cli, sg_config *cfg, int argc, char **argv, const char *usage,
                            const sg_cli_opt *opts, const sg_config_rule *rules) {
    sg_status st = sg_cli_begin_args(cli, argc, argv, usage, opts);
    if (st != SG_OK || cli->done) return st;
    st = sg_cli_load_config_with(cli, cfg, rules);
    if (st != SG_OK) return st;
    if (cli->print_config) {
        sg_config_write_origins(cfg, stdout); /* "# FILE:LINE" where a value came from */
        cli->done = 1;
        if (fflush(stdout) != 0) {
            SG_ERROR("--print-config: writing to stdout failed: %s", strerror(errno));
            return SG_ERR_RUNTIME;
        }
    }
    return SG_OK;
}

/* Writes <run_dir>/config.yaml via a temporary file and rename. */
sg_status sg_cli_write_run_config(const sg_config *cfg) {
    char path[SG_STR + 32], tmp[SG_STR + 48];
    snprintf(path, sizeof path, "%s/config.yaml", cfg->run_dir);
    snprintf(tmp, sizeof tmp, "%s/.config.yaml.%ld", cfg->run_dir, (long)getpid());
    FILE *f = fopen(tmp, "w");
    if (!f) {
        SG_ERROR("cannot write %s: %s (check that run_dir is writable)", tmp, strerror(errno));
        return SG_ERR_RUNTIME;
    }
    fprintf(f, "# segtrain %s resolved configuration (config hash %016llx)\n", SG_VERSION,
            sg_config_hash(cfg));
    sg_config_write(cfg, f);
    int bad = ferror(f);
    if (fclose(f) != 0 || bad) {
        SG_ERROR("writing %s failed: %s (disk full?)", tmp, strerror(errno));
        unlink(tmp);
        return SG_ERR_RUNTIME;
    }
    if (rename(tmp, path) != 0) {
        SG_ERROR("cannot rename %s to %s: %s", tmp, path, strerror(errno));
        unlink(tmp);
        return SG_ERR_RUNTIME;
    }
    return SG_OK;
}

sg_status sg_cli_prepare_run_dir(const sg_config *cfg, int rank) {
    sg_status st = sg_cli_open_run_dir(cfg, rank);
    if (st == SG_OK && rank == 0) st = sg_cli_write_run_config(cfg);
    return st;
}

sg_status sg_cli_open_run_dir(const sg_config *cfg, int rank) {
    char logs[SG_STR + 16];
    snprintf(logs, sizeof logs, "%s/logs", cfg->run_dir);
    if (sg_mkdirs(logs) != 0) {
        SG_ERROR("cannot create %s: %s (check run_dir and its permissions)", logs, strerror(errno));
        return SG_ERR_RUNTIME;
    }
    int world = 1;
    sg_log_get_rank(NULL, &world);
    sg_log_set_rank(rank, world > rank ? world : rank + 1);
    if (sg_log_open_file(logs) != 0) return SG_ERR_RUNTIME;
    SG_DEBUG("run directory %s ready (config hash %016llx)", cfg->run_dir, sg_config_hash(cfg));
    return SG_OK;
}

/* ---------------- the run directory's lock ---------------- */

sg_status sg_run_lock_acquire(sg_run_lock *lk, const char *run_dir, const char *what) {
    lk->fd = -1;
    char path[SG_STR + 32];
    snprintf(path, sizeof path, "%s/segtrain.lock", run_dir);
    if (sg_mkdirs(run_dir) != 0) {
        SG_ERROR("cannot create %s: %s (check run_dir and its permissions)", run_dir,
                 strerror(errno));
        return SG_ERR_RUNTIME;
    }
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) {
        SG_ERROR("cannot open the run_dir lock %s: %s (is run_dir writable?)", path,
                 strerror(errno));
        return SG_ERR_RUNTIME;
    }
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        int e = errno;
        char holder[512] = "";
        ssize_t n = pread(fd, holder, sizeof holder - 1, 0);
        holder[n > 0 ? n : 0] = 0;
        close(fd);
        if (e != EWOULDBLOCK) {
            SG_ERROR("cannot lock %s: %s (a filesystem without flock? put run_dir elsewhere)", path,
                     strerror(e));
            return SG_ERR_RUNTIME;
        }
        long pid = 0;
        char host[256] = "?", cmd[256] = "?";
        for (char *line = strtok(holder, "\n"); line; line = strtok(NULL, "\n")) {
            if (sscanf(line, "pid %ld", &pid) == 1) continue;
            if (!strncmp(line, "host ", 5)) snprintf(host, sizeof host, "%s", line + 5);
            if (!strncmp(line, "command ", 8)) snprintf(cmd, sizeof cmd, "%s", line + 8);
        }
        SG_ERROR("run_dir %s is in use by another segtrain job (pid %ld on host %s: %s): two jobs "
                 "in one run_dir overwrite each other's checkpoints and metrics. Wait for it to "
                 "end (or stop it), or choose another run_dir (--set run_dir=...)",
                 run_dir, pid, host, cmd);
        return SG_ERR_RUNTIME;
    }
    char host[256] = "?";
    gethostname(host, sizeof host - 1);
    host[sizeof host - 1] = 0;
    char text[700];
    int len =
        snprintf(text, sizeof text, "pid %ld\nhost %s\ncommand %s\n", (long)getpid(), host, what);
    /* informative only: the lock is the flock, not the content */
    if (ftruncate(fd, 0) != 0 || pwrite(fd, text, (size_t)len, 0) != len)
        SG_WARN("could not write the holder's pid into %s: %s", path, strerror(errno));
    lk->fd = fd;
    return SG_OK;
}

void sg_run_lock_release(sg_run_lock *lk) {
    if (!lk || lk->fd < 0) return;
    close(lk->fd); /* drops the flock */
    lk->fd = -1;
}

void sg_cli_missing_top(const char *run_dir, char *top, size_t n) {
    struct stat st;
    char path[SG_STR];
    snprintf(top, n, "%s", "");
    snprintf(path, sizeof path, "%s", run_dir);
    while (path[0] && stat(path, &st) != 0) {
        snprintf(top, n, "%s", path);
        char *slash = strrchr(path, '/');
        while (slash && slash > path && slash[1] == 0) { /* "a/b/" */
            *slash = 0;
            slash = strrchr(path, '/');
        }
        if (!slash || slash == path) break;
        *slash = 0;
    }
}

int sg_cli_discard_unused_run_dir(const char *run_dir, const char *top) {
    char path[SG_STR + 64];
    struct stat st;
    snprintf(path, sizeof path, "%s/config.yaml", run_dir);
    if (stat(path, &st) == 0) return 0; /* the run began: keep everything */
    snprintf(path, sizeof path, "%s/logs", run_dir);
    DIR *d = opendir(path);
    if (d) {
        for (struct dirent *e; (e = readdir(d));) {
            int rank = 0, used = 0;
            if (sscanf(e->d_name, "rank%d.log%n", &rank, &used) == 1 &&
                used == (int)strlen(e->d_name)) {
                snprintf(path, sizeof path, "%s/logs/%s", run_dir, e->d_name);
                unlink(path);
            }
        }
        closedir(d);
        snprintf(path, sizeof path, "%s/logs", run_dir);
        rmdir(path);
    }
    snprintf(path, sizeof path, "%s/segtrain.lock", run_dir);
    unlink(path);
    if (rmdir(run_dir) != 0) return 0;
    /* the parents this start created, while empty */
    size_t tl = strlen(top);
    snprintf(path, sizeof path, "%s", run_dir);
    for (char *slash; tl && strlen(path) > tl && (slash = strrchr(path, '/'));) {
        *slash = 0;
        if (strlen(path) < tl || rmdir(path) != 0) break;
    }
    return 1;
}
