/* dist/launch.c - the multi-process launcher (dist/launch.h): option
 * parsing, the job token, fork+exec of the workers with torchrun's
 * environment, output prefixing, signal forwarding, the workers' culprit
 * reports (dist/launch_report.h), and the fail-fast shutdown. Owns the
 * worker processes: every one is reaped before sg_launch returns. */
#include "dist/launch.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "core/log.h"
#include "core/status.h"
#include "core/util.h"
#include "dist/fd_limit.h"
#include "dist/job_token.h"
#include "dist/launch_agent.h"
#include "dist/launch_report.h"
#include "dist/launch_resume.h"
#include "dist/store.h"

#define MAX_LINE 65536

typedef struct worker {
    int rank, local;
    pid_t pid;
    int alive;
    int status; /* wait status once reaped */
    int fd[2];  /* stdout, stderr read ends; -1 once closed */
    char *buf[2];
    size_t len[2];
    int culprit, culprit_state; /* the first rank it reported dead or hung; -1 */
} worker;

typedef struct launch_opts {
    int nproc, nnodes, node_rank, port;
    char addr[256];
    double grace_s;
    int max_restarts;             /* --max-restarts K: restarts of the group after a failure */
    int max_stalled;              /* --max-restarts-without-progress N */
    double backoff_s;             /* --restart-backoff-s S: the first pause before a restart */
    int round;                    /* the current attempt: 0, then 1..max_restarts */
    int agent_port;               /* --agent-port: the launchers' rendezvous (several nodes) */
    double node_timeout_s;        /* --node-timeout-s: a node must (re)join within it */
    char token[SG_TOKEN_MAX + 1]; /* "" when the workers derive theirs */
    int report_fd;                /* write end of the culprit pipe (children) */
} launch_opts;

static int g_sigpipe[2] = {-1, -1};
static const int g_sigs[4] = {SIGCHLD, SIGINT, SIGTERM, SIGHUP};
static char g_host[256] = "?"; /* this node's name, for the restart log lines */

static void on_signal(int sig) {
    int e = errno;
    unsigned char c = (unsigned char)sig;
    if (write(g_sigpipe[1], &c, 1) < 0) { /* pipe full: the loop reaps anyway */
    }
    errno = e;
}

static const char *launch_opt_names[] = {"--nproc-per-node",
                                         "--nnodes",
                                         "--node-rank",
                                         "--master-addr",
                                         "--master-port",
                                         "--kill-grace-s",
                                         "--max-restarts",
                                         "--restart-backoff-s",
                                         "--agent-port",
                                         "--node-timeout-s",
                                         "--max-restarts-without-progress"};
enum {
    O_NPROC,
    O_NNODES,
    O_NODE_RANK,
    O_ADDR,
    O_PORT,
    O_GRACE,
    O_RESTARTS,
    O_BACKOFF,
    O_AGENT_PORT,
    O_NODE_TIMEOUT,
    O_STALLED,
    O_COUNT
};

int sg_launch_is_option(const char *arg) {
    for (int k = 0; k < O_COUNT; k++) {
        size_t n = strlen(launch_opt_names[k]);
        if (!strncmp(arg, launch_opt_names[k], n) && (arg[n] == 0 || arg[n] == '=')) return 1;
    }
    return 0;
}

/* If argv[*i] is launcher option k, stores its value and advances *i past it.
 * Returns 1 if matched, 0 if not, -1 when the value is missing. */
static int match_opt(int argc, char **argv, int *i, int k, const char **val) {
    const char *a = argv[*i], *name = launch_opt_names[k];
    size_t n = strlen(name);
    if (strncmp(a, name, n) != 0) return 0;
    if (a[n] == '=') {
        *val = a + n + 1;
        return 1;
    }
    if (a[n] != 0) return 0;
    if (*i + 1 >= argc) return -1;
    *val = argv[++*i];
    return 1;
}

/* An option's (or MASTER_PORT's) integer value: SG_OK, or SG_ERR_CONFIG
 * after logging that it is not an integer in [lo, hi]. */
static sg_status parse_int(const char *opt, const char *v, int lo, int hi, int *out) {
    if (sg_parse_int(v, lo, hi, out) == 0) return SG_OK;
    SG_ERROR("launcher: %s '%s' is not an integer in [%d, %d]", opt, v, lo, hi);
    return SG_ERR_CONFIG;
}

/* A free loopback TCP port, or -1 (a port number, not a status). */
static int free_port(void) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    struct sockaddr_in sa = {
        .sin_family = AF_INET, .sin_port = 0, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t sl = sizeof sa;
    int port = -1;
    if (bind(fd, (struct sockaddr *)&sa, sizeof sa) == 0 &&
        getsockname(fd, (struct sockaddr *)&sa, &sl) == 0)
        port = ntohs(sa.sin_port);
    close(fd);
    return port;
}

/* Splits argv into launcher options and the workers' arguments. Returns 0,
 * or 2 after logging a usage error: exit codes for sg_launch, not statuses. */
static int parse(int argc, char **argv, launch_opts *o, char **rest, int *n_rest) {
    memset(o, 0, sizeof *o);
    o->nnodes = 1;
    o->grace_s = 30;
    o->backoff_s = 1;
    o->max_stalled = SG_LAUNCH_MAX_STALLED;
    o->agent_port = -1;
    o->node_timeout_s = 300;
    o->port = -1;
    const char *env_addr = getenv("MASTER_ADDR");
    snprintf(o->addr, sizeof o->addr, "%s", env_addr && *env_addr ? env_addr : "127.0.0.1");
    const char *env_port = getenv("MASTER_PORT");
    if (env_port && *env_port && parse_int("MASTER_PORT", env_port, 1, 65535, &o->port) != SG_OK)
        return 2;
    *n_rest = 0;
    for (int i = 1; i < argc; i++) {
        int matched = 0;
        for (int k = 0; k < O_COUNT && !matched; k++) {
            const char *v = NULL;
            int m = match_opt(argc, argv, &i, k, &v);
            if (m < 0) {
                SG_ERROR("launcher: %s needs a value", launch_opt_names[k]);
                return 2;
            }
            if (!m) continue;
            matched = 1;
            sg_status rc = SG_OK;
            switch (k) {
            case O_NPROC: rc = parse_int(launch_opt_names[k], v, 1, 4096, &o->nproc); break;
            case O_NNODES: rc = parse_int(launch_opt_names[k], v, 1, 100000, &o->nnodes); break;
            case O_NODE_RANK:
                rc = parse_int(launch_opt_names[k], v, 0, 99999, &o->node_rank);
                break;
            case O_PORT: rc = parse_int(launch_opt_names[k], v, 1, 65535, &o->port); break;
            case O_GRACE: {
                int g;
                rc = parse_int(launch_opt_names[k], v, 0, 3600, &g);
                o->grace_s = g;
                break;
            }
            case O_RESTARTS:
                rc = parse_int(launch_opt_names[k], v, 0, 1000, &o->max_restarts);
                break;
            case O_BACKOFF: {
                int b;
                rc = parse_int(launch_opt_names[k], v, 0, 3600, &b);
                o->backoff_s = b;
                break;
            }
            case O_STALLED: rc = parse_int(launch_opt_names[k], v, 0, 1000, &o->max_stalled); break;
            case O_AGENT_PORT:
                rc = parse_int(launch_opt_names[k], v, 0, 65535, &o->agent_port);
                break;
            case O_NODE_TIMEOUT: {
                int t;
                rc = parse_int(launch_opt_names[k], v, 1, 86400, &t);
                o->node_timeout_s = t;
                break;
            }
            default:
                if (!*v || strlen(v) >= sizeof o->addr) {
                    SG_ERROR("launcher: --master-addr '%s' is empty or too long", v);
                    return 2;
                }
                snprintf(o->addr, sizeof o->addr, "%s", v);
            }
            if (rc != SG_OK) return 2;
        }
        if (!matched) rest[(*n_rest)++] = argv[i];
    }
    rest[*n_rest] = NULL;
    if (o->nproc < 1) {
        SG_ERROR("launcher: --nproc-per-node N is required (the number of workers on this node)");
        return 2;
    }
    if (o->node_rank >= o->nnodes) {
        SG_ERROR("launcher: --node-rank %d must be below --nnodes %d", o->node_rank, o->nnodes);
        return 2;
    }
    if (o->port < 0) {
        if (o->nnodes > 1) {
            o->port = 29500;
        } else {
            o->port = free_port();
            if (o->port < 0) {
                SG_ERROR("launcher: no free TCP port for the rendezvous store: pass --master-port");
                return 2;
            }
        }
    }
    if (o->agent_port < 0) o->agent_port = o->port < 65535 ? o->port + 1 : o->port - 1;
    if (o->nnodes > 1 && o->agent_port > 0 && o->agent_port == o->port) {
        SG_ERROR("launcher: --agent-port %d is the --master-port: the launchers' rendezvous and "
                 "the workers' store need two ports",
                 o->agent_port);
        return 2;
    }
    return 0;
}

static void setenv_int(const char *k, long v) {
    char b[32];
    snprintf(b, sizeof b, "%ld", v);
    setenv(k, b, 1);
}

/* In the child: environment, output pipes, exec. Never returns. */
static void exec_worker(const launch_opts *o, const worker *w, int out_w, int err_w,
                        const char *exe, char **wargv, pid_t launcher) {
    /* signals are blocked since before the fork: restore the default
     * actions first, so one sent now is not taken for the launcher's own */
    int sigs[] = {SIGCHLD, SIGINT, SIGTERM, SIGHUP};
    for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++) signal(sigs[i], SIG_DFL);
    close(g_sigpipe[0]);
    close(g_sigpipe[1]);
    setpgid(0, 0); /* own group: a terminal's ^C reaches the launcher only, which forwards it */
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != launcher) _exit(1); /* the launcher died before prctl */
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    if (dup2(out_w, 1) < 0 || dup2(err_w, 2) < 0) _exit(127);
    int world = o->nproc * o->nnodes;
    setenv_int("RANK", w->rank);
    setenv_int("LOCAL_RANK", w->local);
    setenv_int("WORLD_SIZE", world);
    setenv_int("LOCAL_WORLD_SIZE", o->nproc);
    setenv_int("GROUP_RANK", o->node_rank);
    setenv_int("ROLE_RANK", w->rank);
    setenv_int("ROLE_WORLD_SIZE", world);
    setenv("MASTER_ADDR", o->addr, 1);
    setenv_int("MASTER_PORT", o->port);
    if (o->token[0]) setenv(SG_TOKEN_ENV, o->token, 1);
    int rfd = o->report_fd >= 0 ? fcntl(o->report_fd, F_DUPFD, 3) : -1; /* without close-on-exec */
    if (rfd >= 0) {
        char v[48];
        snprintf(v, sizeof v, "%d:%d", rfd, (int)launcher);
        setenv(SG_LAUNCH_REPORT_ENV, v, 1);
    } else {
        unsetenv(SG_LAUNCH_REPORT_ENV);
    }
    setenv_int("TORCHELASTIC_RESTART_COUNT", o->round);
    setenv_int("TORCHELASTIC_MAX_RESTARTS", o->max_restarts);
    setenv("TORCHELASTIC_RUN_ID", "segtrain", 1);
    if (!getenv("OMP_NUM_THREADS")) {
        long cores = sysconf(_SC_NPROCESSORS_ONLN);
        long t = cores / o->nproc;
        setenv_int("OMP_NUM_THREADS", t < 1 ? 1 : t);
    }
    execv(exe, wargv);
    fprintf(stderr, "launcher: cannot execute %s for rank %d: %s\n", exe, w->rank, strerror(errno));
    _exit(127);
}

/* Writes one line of worker output, prefixed unless the worker's logger
 * already did. */
static void emit(const worker *w, int stream, const char *line, size_t n) {
    FILE *f = stream ? stderr : stdout;
    char prefix[32];
    int pl = snprintf(prefix, sizeof prefix, "[rank %d] ", w->rank);
    /* the worker's logger writes "HH:MM:SS.mmm [rank N] ...": no second prefix */
    size_t head = n < 40 ? n : 40;
    if (!memmem(line, head, prefix, (size_t)pl)) fwrite(prefix, 1, (size_t)pl, f);
    fwrite(line, 1, n, f);
    if (n == 0 || line[n - 1] != '\n') fputc('\n', f);
    fflush(f);
}

/* Reads what is available on worker stream s; closes it on EOF. */
static void pump(worker *w, int s) {
    if (w->len[s] + 4096 > MAX_LINE) {
        emit(w, s, w->buf[s], w->len[s]); /* an over-long line goes out in pieces */
        w->len[s] = 0;
    }
    ssize_t r = read(w->fd[s], w->buf[s] + w->len[s], MAX_LINE - w->len[s]);
    if (r < 0 && (errno == EINTR || errno == EAGAIN)) return;
    if (r <= 0) {
        if (w->len[s]) emit(w, s, w->buf[s], w->len[s]);
        w->len[s] = 0;
        close(w->fd[s]);
        w->fd[s] = -1;
        return;
    }
    w->len[s] += (size_t)r;
    size_t start = 0;
    for (size_t i = 0; i < w->len[s]; i++) {
        if (w->buf[s][i] != '\n') continue;
        emit(w, s, w->buf[s] + start, i + 1 - start);
        start = i + 1;
    }
    memmove(w->buf[s], w->buf[s] + start, w->len[s] - start);
    w->len[s] -= start;
}

/* Reads the workers' culprit reports (dist/launch_report.h) without
 * blocking; each worker's first report counts. */
typedef struct report_reader {
    int fd;
    char buf[4096];
    size_t len;
} report_reader;

static void read_reports(report_reader *rr, worker *w, int n, long long *ckpt_iter) {
    while (rr->fd >= 0) {
        if (rr->len == sizeof rr->buf) rr->len = 0; /* no newline in 4 KiB: garbage */
        ssize_t r = read(rr->fd, rr->buf + rr->len, sizeof rr->buf - rr->len);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return; /* EAGAIN, or every worker gone (EOF) */
        rr->len += (size_t)r;
        size_t start = 0;
        for (size_t i = 0; i < rr->len; i++) {
            if (rr->buf[i] != '\n') continue;
            int self, culprit, state;
            long long it;
            if (sg_launch_report_parse_checkpoint(rr->buf + start, i - start, &it) == SG_OK) {
                if (it > *ckpt_iter) *ckpt_iter = it;
            } else if (sg_launch_report_parse(rr->buf + start, i - start, &self, &culprit,
                                              &state) == 0)
                for (int k = 0; k < n; k++)
                    if (w[k].rank == self && w[k].culprit < 0) {
                        w[k].culprit = culprit;
                        w[k].culprit_state = state;
                    }
            start = i + 1;
        }
        memmove(rr->buf, rr->buf + start, rr->len - start);
        rr->len -= start;
    }
}

static void describe(int status, char *out, size_t n) {
    if (WIFEXITED(status)) snprintf(out, n, "exited with status %d", WEXITSTATUS(status));
    else if (WIFSIGNALED(status))
        snprintf(out, n, "was killed by signal %d (%s)", WTERMSIG(status),
                 strsignal(WTERMSIG(status)));
    else snprintf(out, n, "ended with wait status %d", status);
}

static int exit_code(int status) {
    if (WIFEXITED(status)) return WEXITSTATUS(status);
    if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
    return 1;
}

/* To each live worker's process group (the worker and anything it
 * started); to the worker alone if its group is not set up yet. */
static void signal_all(worker *w, int n, int sig) {
    for (int i = 0; i < n; i++)
        if (w[i].alive && kill(-w[i].pid, sig) != 0) kill(w[i].pid, sig);
}

/* The workers' arguments for a restart: `--resume auto` (the newest valid
 * checkpoint of the run directory, or a fresh start when there is none)
 * in place of any --resume given, added after the `train` command when
 * there was none. rest has room for two more entries (sg_launch allocates
 * it so). SG_OK, or SG_ERR_CONFIG when the workers do not run `train` (a
 * restart would redo the work from the start: refused, logged). */
static sg_status resume_auto(char **rest) {
    int n = 0, train_at = -1;
    while (rest[n]) n++;
    for (int i = 1; i < n; i++) {
        if (strcmp(rest[i], "--resume") == 0 && i + 1 < n) {
            rest[i + 1] = "auto";
            return SG_OK;
        }
        if (strncmp(rest[i], "--resume=", 9) == 0) {
            rest[i] = "--resume=auto";
            return SG_OK;
        }
        if (train_at < 0 && strcmp(rest[i], "train") == 0) train_at = i;
    }
    if (train_at < 0) {
        SG_ERROR("launcher: --max-restarts restarts `segtrain train` from its last checkpoint "
                 "(--resume auto); these workers do not run `train`, so they are not restarted");
        return SG_ERR_CONFIG;
    }
    memmove(rest + train_at + 3, rest + train_at + 1, (size_t)(n - train_at) * sizeof *rest);
    rest[train_at + 1] = "--resume";
    rest[train_at + 2] = "auto";
    return SG_OK;
}

double sg_launch_restart_delay(double base_s, int stalled) {
    double d = base_s;
    for (int k = 1; k < stalled && d < SG_LAUNCH_BACKOFF_CAP_S; k++) d *= 2;
    double cap = base_s > SG_LAUNCH_BACKOFF_CAP_S ? base_s : SG_LAUNCH_BACKOFF_CAP_S;
    return d < cap ? d : cap;
}

/* Waits s seconds before a restart; a signal to the launcher (other than
 * SIGCHLD) ends the wait: returns it, else 0. */
static int backoff(double s) {
    double until = sg_now_s() + s;
    for (;;) {
        double left = until - sg_now_s();
        if (left <= 0) return 0;
        struct pollfd p = {.fd = g_sigpipe[0], .events = POLLIN};
        int pr = poll(&p, 1, (int)(left * 1000) + 1);
        if (pr <= 0) continue;
        unsigned char buf[64];
        ssize_t n = read(g_sigpipe[0], buf, sizeof buf);
        for (ssize_t k = 0; k < n; k++)
            if (buf[k] != SIGCHLD) return buf[k];
    }
}

/* One attempt: starts the node's workers, relays their output and reports,
 * forwards signals, stops them all once one fails, and reaps every one.
 * Returns the round's exit status (0: every worker succeeded); out gets the
 * cause of a failure and the signal forwarded, if any. */
typedef struct round_result {
    char cause[768];     /* "worker rank R ... (exit status N); see ..." */
    int forwarded;       /* a signal to the launcher forwarded to the workers */
    int config_error;    /* the failed worker exited 2: a restart cannot fix it */
    int remote;          /* stopped because the attempt failed on another node */
    long long ckpt_iter; /* the newest checkpoint rank 0 reported committing; -1 none */
} round_result;

static int run_round(launch_opts *o_in, const char *exe, char **rest, sg_agent *agent,
                     round_result *out) {
    launch_opts o = *o_in;
    memset(out, 0, sizeof *out);
    out->ckpt_iter = -1;
    report_reader rr = {.fd = -1};
    int rep_pipe[2] = {-1, -1};
    if (pipe2(rep_pipe, O_CLOEXEC | O_NONBLOCK) == 0) {
        rr.fd = rep_pipe[0];
        o.report_fd = rep_pipe[1];
    } else {
        o.report_fd = -1; /* the summary then names the worker that failed first */
    }

    SG_INFO("launcher: starting %d workers (node %d of %d, world %d), rendezvous at %s:%d%s",
            o.nproc, o.node_rank, o.nnodes, o.nproc * o.nnodes, o.addr, o.port,
            o.round ? " (restarted)" : "");
    worker *w = calloc((size_t)o.nproc, sizeof *w);
    SG_CHECK(w, "out of memory");
    pid_t self = getpid();
    int n_started = 0;
    fflush(stdout);
    fflush(stderr);
    for (int i = 0; i < o.nproc; i++) {
        w[i].local = i;
        w[i].rank = o.node_rank * o.nproc + i;
        w[i].culprit = -1;
        int p[2][2];
        if (pipe2(p[0], O_CLOEXEC) || pipe2(p[1], O_CLOEXEC)) {
            SG_ERROR("launcher: pipe failed: %s", strerror(errno));
            break;
        }
        sigset_t block, prev;
        sigemptyset(&block);
        for (int k = 0; k < 4; k++) sigaddset(&block, g_sigs[k]);
        sigprocmask(SIG_BLOCK, &block, &prev);
        pid_t pid = fork();
        if (pid != 0) sigprocmask(SIG_SETMASK, &prev, NULL);
        if (pid < 0) {
            SG_ERROR("launcher: fork of rank %d failed: %s", w[i].rank, strerror(errno));
            for (int k = 0; k < 2; k++) close(p[k][0]), close(p[k][1]);
            break;
        }
        if (pid == 0) exec_worker(&o, &w[i], p[0][1], p[1][1], exe, rest, self);
        setpgid(pid, pid); /* also here, so signal_all never races the child */
        w[i].pid = pid;
        w[i].alive = 1;
        for (int k = 0; k < 2; k++) {
            close(p[k][1]);
            w[i].fd[k] = p[k][0];
            fcntl(w[i].fd[k], F_SETFL, O_NONBLOCK);
            w[i].buf[k] = malloc(MAX_LINE);
            SG_CHECK(w[i].buf[k], "out of memory");
        }
        n_started++;
    }
    if (o.report_fd >= 0) close(o.report_fd); /* the workers hold it now: EOF when all are gone */
    o.report_fd = -1;

    int failed = -1, failed_status = 0, forwarded = 0, result = 0;
    double kill_at = -1, drain_until = -1;
    /* several nodes: a failure elsewhere wakes the loop (dist/launch_agent.h) */
    int wake[2] = {-1, -1}, remote = 0, remote_exit = 0;
    if (agent && pipe2(wake, O_CLOEXEC | O_NONBLOCK) == 0 &&
        sg_agent_watch(agent, o.round, wake[1]) != SG_OK) {
        close(wake[0]), close(wake[1]);
        wake[0] = wake[1] = -1;
    }
    if (n_started < o.nproc) { /* could not start everyone: stop the rest */
        failed = n_started;
        failed_status = 1 << 8;
        signal_all(w, n_started, SIGTERM);
        kill_at = sg_now_s() + o.grace_s;
    }
    struct pollfd *pfd = calloc((size_t)(2 * n_started + 2), sizeof *pfd);
    SG_CHECK(pfd, "out of memory");
    for (;;) {
        if (agent && !remote && failed < 0 && !forwarded) {
            int ex = 1;
            int f = sg_agent_poll(agent, out->cause, sizeof out->cause, &ex);
            if (f) {
                remote = f;
                remote_exit = ex ? ex : 1;
                SG_ERROR("launcher: %s%s; stopping this node's workers (SIGTERM, SIGCONT, "
                         "SIGKILL after %.0f s)",
                         f > 0 ? "the job failed on another node: " : "", out->cause, o.grace_s);
                signal_all(w, n_started, SIGTERM);
                signal_all(w, n_started, SIGCONT); /* a stopped worker can then act on it */
                kill_at = sg_now_s() + o.grace_s;
            }
        }
        /* before reaping: a failed worker's report is in the pipe */
        read_reports(&rr, w, n_started, &out->ckpt_iter);
        /* reap */
        int alive = 0;
        for (int i = 0; i < n_started; i++) {
            if (!w[i].alive) continue;
            int st;
            pid_t r = waitpid(w[i].pid, &st, WNOHANG);
            if (r == w[i].pid) {
                w[i].alive = 0;
                w[i].status = st;
                if (st != 0 && failed < 0 && !forwarded && !remote) {
                    char how[128], found[96] = "";
                    describe(st, how, sizeof how);
                    failed = i;
                    failed_status = st;
                    if (w[i].culprit >= 0 && w[i].culprit != w[i].rank)
                        snprintf(found, sizeof found, " after finding that rank %d %s",
                                 w[i].culprit, sg_launch_report_phrase(w[i].culprit_state));
                    SG_ERROR("launcher: worker rank %d (pid %d) %s%s; stopping the other workers "
                             "(SIGTERM, SIGKILL after %.0f s)",
                             w[i].rank, (int)w[i].pid, how, found, o.grace_s);
                    signal_all(w, n_started, SIGTERM);
                    signal_all(w, n_started, SIGCONT); /* a stopped worker can then act on it */
                    kill_at = sg_now_s() + o.grace_s;
                }
            } else {
                alive++;
            }
        }
        int open_fds = 0;
        for (int i = 0; i < n_started; i++) open_fds += (w[i].fd[0] >= 0) + (w[i].fd[1] >= 0);
        if (!alive && drain_until < 0)
            drain_until = sg_now_s() + 2.0; /* grandchildren may hold pipes */
        if (!alive && (!open_fds || sg_now_s() > drain_until)) break;
        if (alive && kill_at >= 0 && sg_now_s() >= kill_at) {
            SG_ERROR("launcher: %d worker(s) still running %.0f s after SIGTERM: sending SIGKILL",
                     alive, o.grace_s);
            signal_all(w, n_started, SIGKILL);
            kill_at = sg_now_s() + 3600; /* once */
        }
        int np = 0;
        pfd[np++] = (struct pollfd){.fd = g_sigpipe[0], .events = POLLIN};
        if (wake[0] >= 0) pfd[np++] = (struct pollfd){.fd = wake[0], .events = POLLIN};
        for (int i = 0; i < n_started; i++)
            for (int k = 0; k < 2; k++)
                if (w[i].fd[k] >= 0)
                    pfd[np++] = (struct pollfd){.fd = w[i].fd[k], .events = POLLIN};
        int timeout_ms = 500;
        int pr = poll(pfd, (nfds_t)np, timeout_ms);
        if (pr < 0 && errno != EINTR) {
            SG_ERROR("launcher: poll failed: %s", strerror(errno));
            signal_all(w, n_started, SIGKILL);
        }
        if (pr <= 0) continue;
        if (pfd[0].revents & POLLIN) {
            unsigned char sigbuf[64];
            ssize_t n = read(g_sigpipe[0], sigbuf, sizeof sigbuf);
            for (ssize_t k = 0; k < n; k++) {
                int sig = sigbuf[k];
                if (sig == SIGCHLD) continue;
                SG_WARN("launcher: got signal %d (%s): forwarding it to the workers", sig,
                        strsignal(sig));
                signal_all(w, n_started, sig);
                if (!forwarded) forwarded = sig;
                if (kill_at < 0) kill_at = sg_now_s() + o.grace_s;
            }
        }
        if (wake[0] >= 0) { /* drained; sg_agent_poll reads the finding */
            char b[16];
            while (read(wake[0], b, sizeof b) > 0) {}
        }
        for (int i = 0; i < n_started; i++)
            for (int k = 0; k < 2; k++) {
                if (w[i].fd[k] < 0) continue;
                for (int q = 1; q < np; q++)
                    if (pfd[q].fd == w[i].fd[k] && pfd[q].revents) {
                        pump(&w[i], k);
                        break;
                    }
            }
    }
    for (int i = 0; i < n_started; i++)
        for (int k = 0; k < 2; k++) {
            if (w[i].fd[k] >= 0) close(w[i].fd[k]);
            free(w[i].buf[k]);
        }
    read_reports(&rr, w, n_started, &out->ckpt_iter);
    if (rr.fd >= 0) close(rr.fd);
    if (failed >= 0) {
        char how[128];
        describe(failed_status, how, sizeof how);
        result = exit_code(failed_status);
        if (result == 0) result = 1;
        const worker *f = failed < n_started ? &w[failed] : NULL;
        if (f && f->culprit >= 0 && f->culprit != f->rank)
            /* the worker that exited first only noticed: name the one it found */
            snprintf(out->cause, sizeof out->cause,
                     "worker rank %d %s (found by worker rank %d, which then %s; exit "
                     "status %d); see rank %d's log and the output above",
                     f->culprit, sg_launch_report_phrase(f->culprit_state), f->rank, how, result,
                     f->culprit);
        else
            snprintf(out->cause, sizeof out->cause,
                     "worker rank %d %s (exit status %d); see its output above",
                     f ? f->rank : failed, how, result);
        out->config_error = f && WIFEXITED(failed_status) && WEXITSTATUS(failed_status) == 2 &&
                            f->culprit < 0;
    } else if (forwarded) {
        result = 128 + forwarded;
    } else if (remote) {
        result = remote_exit; /* out->cause names the node and its failure */
        out->remote = 1;
    }
    if (agent) sg_agent_unwatch(agent);
    if (wake[0] >= 0) close(wake[0]), close(wake[1]);
    out->forwarded = forwarded;
    free(pfd);
    free(w);
    return result;
}

/* After an interruption or a failure of training workers: the command that
 * goes on from the last checkpoint, with every launcher option as given. */
static void log_resume(int argc, char **argv, char **rest) {
    char cmd[8192];
    if (sg_launch_resume_command(argc, argv, rest, cmd, sizeof cmd))
        SG_INFO("launcher: resume from the last checkpoint with: %s", cmd);
}

int sg_launch(int argc, char **argv, const char *exe) {
    launch_opts o;
    char **rest = calloc((size_t)argc + 4, sizeof *rest); /* + --resume auto */
    SG_CHECK(rest, "out of memory");
    int n_rest = 0;
    int rc = parse(argc, argv, &o, rest + 1, &n_rest);
    if (rc) {
        free(rest);
        return rc;
    }
    rest[0] = (char *)exe;
    if (gethostname(g_host, sizeof g_host - 1) != 0) snprintf(g_host, sizeof g_host, "?");
    /* descriptors for every worker's pipes (and node 0's agent store) */
    sg_status fl = sg_fd_limit_ensure(sg_fd_need_launcher(o.nproc, o.nnodes > 1 ? o.nnodes : 0),
                                      "launcher", "the workers' output and report pipes");
    if (fl != SG_OK) {
        free(rest);
        return fl == SG_ERR_CONFIG ? 2 : 1;
    }

    /* the job token: the user's (several nodes must share one), else a
     * random one per job on one node; several nodes without one: the
     * workers derive it (dist/job_token.h) */
    const char *user_token = getenv(SG_TOKEN_ENV);
    if (user_token && *user_token) {
        if (strlen(user_token) > SG_TOKEN_MAX) {
            SG_ERROR("launcher: %s is longer than %d characters", SG_TOKEN_ENV, SG_TOKEN_MAX);
            free(rest);
            return 2;
        }
        snprintf(o.token, sizeof o.token, "%s", user_token);
    } else if (o.nnodes == 1) {
        if (sg_job_token_generate(o.token) != SG_OK) {
            free(rest);
            return 1;
        }
    } else {
        SG_WARN(
            "launcher: %d nodes and no %s: the workers derive the job token from the config and "
            "MASTER_ADDR:PORT, which separates jobs but is not a secret; for a secret one, export the same "
            "random %s on every node (e.g. `export %s=$(openssl rand -hex 32)`)",
            o.nnodes, SG_TOKEN_ENV, SG_TOKEN_ENV, SG_TOKEN_ENV);
    }

    if (pipe2(g_sigpipe, O_CLOEXEC | O_NONBLOCK)) {
        SG_ERROR("launcher: pipe failed: %s", strerror(errno));
        free(rest);
        return 1;
    }
    struct sigaction sa, old[4];
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    for (int i = 0; i < 4; i++) sigaction(g_sigs[i], &sa, &old[i]);

    /* several nodes: the launchers' own rendezvous, in node 0's launcher */
    sg_agent *agent = NULL;
    if (o.nnodes > 1 && o.agent_port > 0) {
        agent =
            sg_agent_create(o.addr, o.agent_port, o.node_rank, o.nnodes, o.token, o.node_timeout_s);
        if (!agent) {
            for (int i = 0; i < 4; i++) sigaction(g_sigs[i], &old[i], NULL);
            close(g_sigpipe[0]);
            close(g_sigpipe[1]);
            g_sigpipe[0] = g_sigpipe[1] = -1;
            free(rest);
            return 1;
        }
    }
    /* one run id for every attempt (dist/launch.h); the user's is kept */
    if (!getenv(SG_RUN_ID_ENV)) {
        uint64_t r = 0;
        if (getrandom(&r, sizeof r, 0) == (ssize_t)sizeof r) {
            char id[24];
            snprintf(id, sizeof id, "%016" PRIx64, r);
            setenv(SG_RUN_ID_ENV, id, 1);
        } /* else each attempt draws its own, as without a launcher */
    }
    int result = 0;
    /* progress (dist/launch.h): the newest checkpoint rank 0 reported, and
     * the failed attempts in a row that wrote none newer; only the node of
     * global rank 0 sees the reports, so it decides (the others follow
     * through the rendezvous) */
    long long newest_ckpt = -1;
    int stalled = 0, stall_stop = 0;
    for (o.round = 0;; o.round++) {
        if (agent && sg_agent_join(agent, o.round, o.max_restarts) != SG_OK) {
            result = result ? result : 1;
            break;
        }
        round_result rr;
        result = run_round(&o, exe, rest, agent, &rr);
        int no_restart = rr.forwarded || rr.config_error;
        if (result != 0 && o.node_rank == 0) {
            if (rr.ckpt_iter > newest_ckpt) {
                newest_ckpt = rr.ckpt_iter;
                stalled = 0;
            } else {
                stalled++;
            }
            stall_stop = !no_restart && o.round < o.max_restarts && stalled > o.max_stalled;
            if (stall_stop) no_restart = 1;
        }
        if (agent) { /* every node's outcome: all restart, or all end */
            int any = 0, any_nr = 0, first_exit = result;
            char first[768];
            if (sg_agent_outcome(agent, o.round, o.round < o.max_restarts, result, no_restart,
                                 rr.cause, &any, &any_nr, first, sizeof first,
                                 &first_exit) != SG_OK) {
                if (result == 0) result = 1;
                SG_ERROR("launcher: failed: %s",
                         rr.cause[0] ? rr.cause : "the other nodes could not be reached");
                break;
            }
            if (any && result == 0) {
                result = first_exit ? first_exit : 1;
                snprintf(rr.cause, sizeof rr.cause, "%s", first);
                rr.remote = 1;
            }
            no_restart = any_nr;
            if (any_nr && !rr.forwarded && !rr.config_error && !stall_stop) rr.config_error = 1;
        }
        if (result == 0) break;
        if (rr.forwarded) {
            /* an interruption, not a failure: the workers checkpointed */
            SG_INFO("launcher: stopped by signal %d (%s%s); exit status %d", rr.forwarded,
                    strsignal(rr.forwarded), rr.forwarded == SIGINT ? ", Ctrl-C" : "", result);
            log_resume(argc, argv, rest);
            break; /* the user's Ctrl-C / SIGTERM is never retried */
        }
        if (stall_stop) {
            char ck[64];
            if (newest_ckpt >= 0) snprintf(ck, sizeof ck, "iteration %lld", newest_ckpt);
            else snprintf(ck, sizeof ck, "none in this job");
            SG_ERROR("launcher: failed: %s", rr.cause);
            SG_ERROR("launcher: giving up: %d attempts in a row failed without writing a new "
                     "checkpoint (the newest: %s): the failure comes back at every restart, "
                     "so restarting again would not get past it (--max-restarts-without-progress "
                     "%d, of --max-restarts %d). Fix the cause named above, then run again with "
                     "--resume auto to continue from the newest checkpoint",
                     stalled, ck, o.max_stalled, o.max_restarts);
            break;
        }
        if (no_restart && o.round < o.max_restarts) {
            SG_ERROR("launcher: failed: %s", rr.cause);
            SG_ERROR("launcher: not restarting: %s",
                     rr.remote ? "the failure on the other node cannot be fixed by a restart "
                                 "(a signal from the user, a configuration error, or attempts "
                                 "failing again and again without a new checkpoint: see node "
                                 "0's launcher)"
                               : "exit status 2 is a configuration or usage error, which a "
                                 "restart cannot fix");
            break;
        }
        if (o.round >= o.max_restarts) {
            SG_ERROR("launcher: failed: %s", rr.cause);
            if (o.max_restarts > 0)
                SG_ERROR("launcher: giving up after %d restart(s) (--max-restarts %d): the "
                         "failure above is the last one",
                         o.round, o.max_restarts);
            log_resume(argc, argv, rest);
            break;
        }
        double delay = sg_launch_restart_delay(o.backoff_s, stalled);
        SG_WARN("launcher: restart %d of %d on host %s in %.0f s: %s", o.round + 1, o.max_restarts,
                g_host, delay, rr.cause);
        if (stalled > 0 && o.node_rank == 0)
            SG_WARN("launcher: %d attempt(s) in a row failed without a new checkpoint (at most "
                    "%d restarts without one, --max-restarts-without-progress; the pause "
                    "doubles each time, up to %.0f s)",
                    stalled, o.max_stalled, (double)SG_LAUNCH_BACKOFF_CAP_S);
        if (resume_auto(rest) != SG_OK) break;
        int sig = backoff(delay);
        if (sig) {
            result = 128 + sig;
            SG_ERROR("launcher: stopped by signal %d (%s) before restarting; exit status %d", sig,
                     strsignal(sig), result);
            break;
        }
        SG_INFO("launcher: restarting the workers (restart %d of %d, --resume auto)", o.round + 1,
                o.max_restarts);
    }
    sg_agent_destroy(agent);
    for (int i = 0; i < 4; i++) sigaction(g_sigs[i], &old[i], NULL);
    close(g_sigpipe[0]);
    close(g_sigpipe[1]);
    g_sigpipe[0] = g_sigpipe[1] = -1;
    free(rest);
    return result;
}
