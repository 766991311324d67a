/* tests/fuzz/fuzz_driver.c - a deterministic mutation fuzzer's main() for
 * libFuzzer-style harnesses (no libFuzzer needed).
 *
 * A harness tests/fuzz/fuzz_<name>.c defines
 *     int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
 * (and optionally int LLVMFuzzerInitialize(int *argc, char ***argv)), so the
 * same file also builds with `clang -fsanitize=fuzzer`. Linked with this
 * file it becomes:
 *
 *   fuzz_<name> CORPUS_DIR [--seconds S] [--seed N] [--max-len L] [--runs N]
 *               [--dict FILE] [--crash-dir DIR] [--timeout S]
 *   fuzz_<name> FILE ...          run these inputs once each (replay)
 *
 * With a directory it runs every seed file (sorted by name), then mutated
 * inputs for S seconds (default 20; the environment variable
 * SG_FUZZ_SECONDS overrides --seconds, so `meson test` runs can be made
 * longer). Mutations (bit flips, byte sets, inserts, deletes, duplicated
 * ranges, splices of two corpus entries, interesting integers as bytes and
 * as decimal text, dictionary tokens) are drawn from a counter RNG keyed by
 * (seed, execution number), so a run is reproducible: the same binary,
 * corpus and seed give the same sequence of inputs.
 *
 * Coverage: when the harness and the project sources are compiled with
 * -fsanitize-coverage=trace-pc (GCC or clang), this file receives every
 * basic block and keeps an input that reaches a new (previous block, block)
 * edge in the in-memory corpus, so mutations build on inputs that got
 * further. Block addresses are taken relative to this binary's own code, so
 * address-space randomisation does not change the decisions.
 *
 * Failures: the sanitizers (-fsanitize=address,undefined with
 * -fno-sanitize-recover) abort on a memory error or undefined behaviour; a
 * death callback (and SIGSEGV/SIGABRT/SIGBUS/SIGFPE handlers) write the input
 * that was running to CRASH_DIR/crash-<hash> and print that path. An input
 * running longer than --timeout seconds (default 10) is saved as
 * timeout-<hash> (a parser that is quadratic on it). Leaks: every 64
 * executions LeakSanitizer is asked for a recoverable check; when it finds
 * one, the last 64 inputs are rerun one by one to save the one that leaks
 * (leak-<hash>). Exit status: 0 when nothing was found, 1 otherwise, 2 on a
 * usage error.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv) __attribute__((weak));
void __sanitizer_set_death_callback(void (*callback)(void)) __attribute__((weak));
int __lsan_do_recoverable_leak_check(void) __attribute__((weak));

/* Sanitizer defaults when the environment sets none: stop at the first
 * error with abort(), so the handlers below save the input. */
const char *__asan_default_options(void) { return "abort_on_error=1:detect_leaks=1"; }
const char *__ubsan_default_options(void) {
    return "print_stacktrace=1:halt_on_error=1:abort_on_error=1";
}

/* ---------------- the input being run (for the crash handlers) ---------------- */
static const uint8_t *volatile g_cur;
static volatile size_t g_cur_len;
static char g_crash_dir[2048] = "fuzz-crashes";
static volatile sig_atomic_t g_saving;
static const char *g_prog = "fuzz_<name>";

static uint64_t fnv(const uint8_t *p, size_t n) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 0x100000001b3ull;
    return h;
}

/* Async-signal-safe: builds DIR/<kind>-<16 hex> and writes the input. */
static void save_input(const char *kind, const uint8_t *p, size_t n) {
    char path[2200];
    size_t k = 0;
    for (const char *s = g_crash_dir; *s && k < 2048; s++) path[k++] = *s;
    path[k++] = '/';
    for (const char *s = kind; *s; s++) path[k++] = *s;
    path[k++] = '-';
    uint64_t h = fnv(p, n);
    for (int i = 15; i >= 0; i--) path[k++] = "0123456789abcdef"[(h >> (4 * i)) & 15];
    path[k] = 0;
    mkdir(g_crash_dir, 0777);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const char *msg1 = "\nfuzz: the failing input was saved to ";
    const char *msg2 = "\nfuzz: replay it with: ";
    if (fd >= 0) {
        size_t off = 0;
        while (off < n) {
            ssize_t w = write(fd, p + off, n - off);
            if (w <= 0) break;
            off += (size_t)w;
        }
        close(fd);
        if (write(2, msg1, strlen(msg1)) < 0) {}
        if (write(2, path, k) < 0) {}
        if (write(2, msg2, strlen(msg2)) < 0) {}
        if (write(2, g_prog, strlen(g_prog)) < 0) {}
        if (write(2, " ", 1) < 0) {}
        if (write(2, path, k) < 0) {}
        if (write(2, "\n", 1) < 0) {}
    } else {
        const char *e = "\nfuzz: cannot save the failing input (crash dir not writable)\n";
        if (write(2, e, strlen(e)) < 0) {}
    }
}

static void on_death(void) {
    if (g_saving || !g_cur) return;
    g_saving = 1;
    save_input("crash", g_cur, g_cur_len);
}

static void on_fatal_signal(int sig) {
    on_death();
    signal(sig, SIG_DFL);
    raise(sig);
}

static void on_alarm(int sig) {
    (void)sig;
    if (!g_saving && g_cur) {
        g_saving = 1;
        const char *m = "\nfuzz: an input ran longer than --timeout (a hang or a quadratic parser)";
        if (write(2, m, strlen(m)) < 0) {}
        save_input("timeout", g_cur, g_cur_len);
    }
    _exit(1);
}

/* ---------------- coverage (-fsanitize-coverage=trace-pc) ---------------- */
#define MAP_BITS 16
static uint8_t g_map[1u << MAP_BITS];  /* edges seen in this execution */
static uint8_t g_seen[1u << MAP_BITS]; /* edges seen in any execution */
static uintptr_t g_prev;
static int g_have_cov;

void __sanitizer_cov_trace_pc(void) {
    /* relative to this file's code: the same on every run despite ASLR */
    uintptr_t pc = (uintptr_t)__builtin_return_address(0) - (uintptr_t)&fnv;
    uintptr_t cur = (pc ^ (pc >> MAP_BITS)) * 0x9E3779B1u;
    cur = (cur >> 7) & ((1u << MAP_BITS) - 1);
    g_map[cur ^ g_prev]++;
    g_prev = cur >> 1;
    g_have_cov = 1;
}

/* 1 when the execution just finished reached an edge not seen before. */
static int new_coverage(void) {
    int fresh = 0;
    for (size_t i = 0; i < sizeof g_map; i++)
        if (g_map[i]) {
            if (!g_seen[i]) {
                g_seen[i] = 1;
                fresh = 1;
            }
            g_map[i] = 0;
        }
    g_prev = 0;
    return fresh;
}

/* ---------------- RNG: splitmix64 of (seed, counter) ---------------- */
static uint64_t g_seed, g_ctr;

static uint64_t rnd(void) {
    uint64_t z = g_seed * 0x9E3779B97F4A7C15ull + (++g_ctr) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
static size_t rnd_below(size_t n) { return n ? (size_t)(rnd() % n) : 0; }

/* ---------------- inputs ---------------- */
typedef struct buf {
    uint8_t *p;
    size_t n;
    char *name; /* seed file name, NULL for found inputs */
} buf;

static buf *g_corpus;
static size_t g_ncorpus, g_capcorpus;
static buf *g_dict;
static size_t g_ndict;

static void corpus_add(const uint8_t *p, size_t n, const char *name) {
    if (g_ncorpus == g_capcorpus) {
        g_capcorpus = g_capcorpus ? 2 * g_capcorpus : 64;
        g_corpus = realloc(g_corpus, g_capcorpus * sizeof *g_corpus);
        if (!g_corpus) abort();
    }
    buf *b = &g_corpus[g_ncorpus++];
    b->p = malloc(n ? n : 1);
    if (!b->p) abort();
    memcpy(b->p, p, n);
    b->n = n;
    b->name = name ? strdup(name) : NULL;
}

static int read_file(const char *path, uint8_t **out, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    size_t cap = 4096, len = 0;
    uint8_t *p = malloc(cap);
    if (!p) abort();
    size_t got;
    while ((got = fread(p + len, 1, cap - len, f)) > 0) {
        len += got;
        if (len == cap) {
            cap *= 2;
            p = realloc(p, cap);
            if (!p) abort();
        }
    }
    fclose(f);
    *out = p;
    *n = len;
    return 0;
}

static int cmp_name(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Every regular file of dir, sorted by name. Returns the count or -1. */
static int load_corpus(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return -1;
    char **names = NULL;
    size_t n = 0, cap = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.') continue;
        if (n == cap) {
            cap = cap ? 2 * cap : 32;
            names = realloc(names, cap * sizeof *names);
            if (!names) abort();
        }
        names[n++] = strdup(e->d_name);
    }
    closedir(d);
    qsort(names, n, sizeof *names, cmp_name);
    int count = 0;
    for (size_t i = 0; i < n; i++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        struct stat sb;
        uint8_t *p;
        size_t len;
        if (stat(path, &sb) == 0 && S_ISREG(sb.st_mode) && read_file(path, &p, &len) == 0) {
            corpus_add(p, len, names[i]);
            free(p);
            count++;
        }
        free(names[i]);
    }
    free(names);
    return count;
}

/* Dictionary: one token per line; "\n", "\t", "\\", "\xHH" escapes. */
static void load_dict(const char *path) {
    uint8_t *p;
    size_t n;
    if (read_file(path, &p, &n) != 0) return;
    size_t i = 0;
    while (i < n) {
        size_t j = i;
        while (j < n && p[j] != '\n') j++;
        uint8_t tok[256];
        size_t k = 0;
        for (size_t q = i; q < j && k < sizeof tok; q++) {
            if (p[q] == '\\' && q + 1 < j) {
                char c = (char)p[++q];
                if (c == 'n') tok[k++] = '\n';
                else if (c == 't') tok[k++] = '\t';
                else if (c == 'x' && q + 2 < j) {
                    char hx[3] = {(char)p[q + 1], (char)p[q + 2], 0};
                    tok[k++] = (uint8_t)strtol(hx, NULL, 16);
                    q += 2;
                } else tok[k++] = (uint8_t)c;
            } else {
                tok[k++] = p[q];
            }
        }
        if (k > 0 && !(i < n && p[i] == '#')) {
            g_dict = realloc(g_dict, (g_ndict + 1) * sizeof *g_dict);
            if (!g_dict) abort();
            g_dict[g_ndict].p = malloc(k);
            if (!g_dict[g_ndict].p) abort();
            memcpy(g_dict[g_ndict].p, tok, k);
            g_dict[g_ndict].n = k;
            g_dict[g_ndict].name = NULL;
            g_ndict++;
        }
        i = j + 1;
    }
    free(p);
}

/* ---------------- mutations ---------------- */
static const int64_t k_ints[] = {0,
                                 1,
                                 -1,
                                 2,
                                 7,
                                 8,
                                 16,
                                 31,
                                 32,
                                 63,
                                 64,
                                 127,
                                 128,
                                 255,
                                 256,
                                 1023,
                                 1024,
                                 4095,
                                 4096,
                                 32767,
                                 32768,
                                 65535,
                                 65536,
                                 2147483647LL,
                                 -2147483647LL - 1,
                                 4294967295LL,
                                 4294967296LL,
                                 INT64_MAX,
                                 INT64_MIN,
                                 INT64_MAX / 2 + 1};
static const char *const k_texts[] = {"0",
                                      "-1",
                                      "1",
                                      "-5",
                                      "255",
                                      "256",
                                      "65535",
                                      "2147483647",
                                      "2147483648",
                                      "-2147483649",
                                      "4294967296",
                                      "9223372036854775807",
                                      "9223372036854775808",
                                      "-9223372036854775808",
                                      "18446744073709551616",
                                      "1e308",
                                      "1e-320",
                                      "nan",
                                      "inf",
                                      "0x10",
                                      "1.5",
                                      "99999999999999999999"};
#define NK(a) (sizeof(a) / sizeof((a)[0]))

/* Replaces [at, at+del) of b (length *n, capacity cap) by src[0..len). */
static void splice_in(uint8_t *b, size_t *n, size_t cap, size_t at, size_t del, const uint8_t *src,
                      size_t len) {
    if (at > *n) at = *n;
    if (del > *n - at) del = *n - at;
    if (*n - del + len > cap) len = cap - (*n - del);
    memmove(b + at + len, b + at + del, *n - at - del);
    if (len) memcpy(b + at, src, len);
    *n = *n - del + len;
}

static void mutate_once(uint8_t *b, size_t *n, size_t cap) {
    size_t at = rnd_below(*n + 1);
    switch (rnd_below(12)) {
    case 0: /* bit flip */
        if (*n) b[rnd_below(*n)] ^= (uint8_t)(1u << rnd_below(8));
        break;
    case 1: { /* byte set: random or structural */
        static const uint8_t special[] = {0,    1,   0x7f, 0x80, 0xff, '"',  '\'', '{',
                                          '}',  '[', ']',  ':',  ',',  '\n', ' ',  '-',
                                          '\\', '&', '*',  '#',  '0',  '9'};
        if (*n) b[rnd_below(*n)] = rnd() & 1 ? (uint8_t)rnd() : special[rnd_below(NK(special))];
        break;
    }
    case 2: { /* insert random bytes */
        uint8_t tmp[16];
        size_t len = 1 + rnd_below(sizeof tmp);
        for (size_t i = 0; i < len; i++) tmp[i] = (uint8_t)rnd();
        splice_in(b, n, cap, at, 0, tmp, len);
        break;
    }
    case 3: /* delete a range */
        if (*n) splice_in(b, n, cap, at, 1 + rnd_below(*n > 64 ? 64 : *n), NULL, 0);
        break;
    case 4: { /* duplicate a range */
        if (!*n) break;
        size_t from = rnd_below(*n), len = 1 + rnd_below(*n - from < 256 ? *n - from : 256);
        uint8_t *tmp = malloc(len);
        if (!tmp) abort();
        memcpy(tmp, b + from, len);
        splice_in(b, n, cap, at, 0, tmp, len);
        free(tmp);
        break;
    }
    case 5: { /* splice: a range of another corpus entry */
        const buf *o = &g_corpus[rnd_below(g_ncorpus)];
        if (!o->n) break;
        size_t from = rnd_below(o->n), len = 1 + rnd_below(o->n - from);
        splice_in(b, n, cap, at, rnd() & 1 ? len : 0, o->p + from, len);
        break;
    }
    case 6: { /* crossover: our head + another's tail */
        const buf *o = &g_corpus[rnd_below(g_ncorpus)];
        size_t from = rnd_below(o->n + 1);
        *n = at;
        splice_in(b, n, cap, at, 0, o->p + from, o->n - from);
        break;
    }
    case 7: { /* interesting integer as 1/2/4/8 bytes, either endianness */
        static const size_t widths[] = {1, 2, 4, 8};
        size_t w = widths[rnd_below(4)];
        if (*n < w) break;
        uint64_t v = (uint64_t)k_ints[rnd_below(NK(k_ints))];
        size_t pos = rnd_below(*n - w + 1);
        int be = (int)(rnd() & 1);
        for (size_t i = 0; i < w; i++) b[pos + i] = (uint8_t)(v >> (8 * (be ? w - 1 - i : i)));
        break;
    }
    case 8: { /* interesting number as text, replacing a run of digits if any */
        const char *t = k_texts[rnd_below(NK(k_texts))];
        size_t s = at, e = at;
        for (size_t tries = 0; tries < 8 && *n; tries++) {
            size_t p = rnd_below(*n);
            if (b[p] >= '0' && b[p] <= '9') {
                s = e = p;
                while (s > 0 && b[s - 1] >= '0' && b[s - 1] <= '9') s--;
                while (e < *n && b[e] >= '0' && b[e] <= '9') e++;
                break;
            }
        }
        splice_in(b, n, cap, s, e - s, (const uint8_t *)t, strlen(t));
        break;
    }
    case 9:  /* dictionary token, inserted */
    case 10: /* or overwriting */
        if (g_ndict) {
            const buf *d = &g_dict[rnd_below(g_ndict)];
            splice_in(b, n, cap, at, rnd() & 1 ? 0 : d->n, d->p, d->n);
        }
        break;
    case 11: /* truncate */ *n = at; break;
    }
}

/* ---------------- running ---------------- */
static unsigned g_timeout = 10;

static void run_one(const uint8_t *p, size_t n) {
    /* a private copy of exactly n bytes: ASan sees any read past the end */
    uint8_t *copy = malloc(n ? n : 1);
    if (!copy) abort();
    memcpy(copy, p, n);
    g_cur = copy;
    g_cur_len = n;
    alarm(g_timeout);
    LLVMFuzzerTestOneInput(copy, n);
    alarm(0);
    g_cur = NULL;
    free(copy);
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int usage(const char *prog) {
    fprintf(stderr,
            "usage: %s CORPUS_DIR [--seconds S] [--seed N] [--max-len L] [--runs N] [--dict FILE]\n"
            "       [--crash-dir DIR] [--timeout S]\n"
            "       %s FILE...   (run these inputs once: replay a saved crash)\n"
            "SG_FUZZ_SECONDS in the environment overrides --seconds.\n",
            prog, prog);
    return 2;
}

#define LEAK_BATCH 64

int main(int argc, char **argv) {
    const char *target = NULL, *dict = NULL;
    double seconds = 20;
    size_t max_len = 65536;
    long long max_runs = -1;
    g_seed = 1;
    const char *files[256];
    int nfiles = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--seconds") && v) seconds = atof(argv[++i]);
        else if (!strcmp(a, "--seed") && v) g_seed = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(a, "--max-len") && v) max_len = (size_t)strtoull(argv[++i], NULL, 10);
        else if (!strcmp(a, "--runs") && v) max_runs = atoll(argv[++i]);
        else if (!strcmp(a, "--dict") && v) dict = argv[++i];
        else if (!strcmp(a, "--crash-dir") && v)
            snprintf(g_crash_dir, sizeof g_crash_dir, "%s", argv[++i]);
        else if (!strcmp(a, "--timeout") && v) g_timeout = (unsigned)atoi(argv[++i]);
        else if (a[0] == '-') return usage(argv[0]);
        else if (nfiles < 256) files[nfiles++] = a;
    }
    if (nfiles == 0 || max_len == 0) return usage(argv[0]);
    g_prog = argv[0];
    const char *env = getenv("SG_FUZZ_SECONDS");
    if (env && *env) seconds = atof(env);
    target = files[0];
    if (LLVMFuzzerInitialize) LLVMFuzzerInitialize(&argc, &argv);
    /* With the sanitizers, ASan reports SIGSEGV & co. itself and then calls
     * the death callback; UBSan and failed asserts end in abort(). */
    signal(SIGABRT, on_fatal_signal);
    if (__sanitizer_set_death_callback) {
        __sanitizer_set_death_callback(on_death);
    } else {
        int fatal[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL};
        for (size_t i = 0; i < NK(fatal); i++) signal(fatal[i], on_fatal_signal);
    }
    signal(SIGALRM, on_alarm);

    struct stat sb;
    if (stat(target, &sb) != 0) {
        fprintf(stderr, "fuzz: %s: %s\n", target, strerror(errno));
        return 2;
    }
    const char *prog = strrchr(argv[0], '/') ? strrchr(argv[0], '/') + 1 : argv[0];
    if (!S_ISDIR(sb.st_mode)) { /* replay: the input is already a file */
        g_saving = 1;
        for (int i = 0; i < nfiles; i++) {
            uint8_t *p;
            size_t n;
            if (read_file(files[i], &p, &n) != 0) {
                fprintf(stderr, "fuzz: cannot read %s: %s\n", files[i], strerror(errno));
                return 2;
            }
            fprintf(stderr, "%s: running %s (%zu bytes)\n", prog, files[i], n);
            run_one(p, n);
            free(p);
        }
        fprintf(stderr, "%s: %d input(s) ran without a failure\n", prog, nfiles);
        return 0;
    }
    int nseeds = load_corpus(target);
    if (nseeds <= 0) {
        fprintf(stderr, "fuzz: no seed files in %s (commit a seed corpus)\n", target);
        return 2;
    }
    if (dict) load_dict(dict);
    double t0 = now_s();
    long long runs = 0;
    for (int i = 0; i < nseeds; i++) {
        run_one(g_corpus[i].p, g_corpus[i].n);
        new_coverage();
        runs++;
        if (__lsan_do_recoverable_leak_check && __lsan_do_recoverable_leak_check()) {
            fprintf(stderr, "fuzz: seed %s/%s leaks memory (see the report above)\n", target,
                    g_corpus[i].name);
            _exit(1);
        }
    }
    /* the last LEAK_BATCH inputs, to find the one that leaked */
    uint8_t *batch[LEAK_BATCH];
    size_t batch_n[LEAK_BATCH];
    for (int i = 0; i < LEAK_BATCH; i++) {
        batch[i] = malloc(max_len);
        if (!batch[i]) abort();
    }
    size_t cap = max_len;
    uint8_t *cur = malloc(cap);
    if (!cur) abort();
    long long found = 0;
    int in_batch = 0;
    while ((max_runs < 0 || runs < max_runs) && now_s() - t0 < seconds) {
        const buf *base = &g_corpus[rnd_below(g_ncorpus)];
        size_t n = base->n < cap ? base->n : cap;
        memcpy(cur, base->p, n);
        int stack = 1 + (int)rnd_below(8);
        for (int k = 0; k < stack; k++) mutate_once(cur, &n, cap);
        memcpy(batch[in_batch], cur, n);
        batch_n[in_batch++] = n;
        run_one(cur, n);
        runs++;
        if (g_have_cov && new_coverage()) {
            corpus_add(cur, n, NULL);
            found++;
        }
        if (in_batch == LEAK_BATCH) {
            if (__lsan_do_recoverable_leak_check && __lsan_do_recoverable_leak_check()) {
                for (int i = 0; i < LEAK_BATCH; i++) {
                    run_one(batch[i], batch_n[i]);
                    if (__lsan_do_recoverable_leak_check()) {
                        save_input("leak", batch[i], batch_n[i]);
                        _exit(1); /* no exit-time leak report of the driver's buffers */
                    }
                }
                fprintf(stderr, "fuzz: a leak was reported but no single input reproduces it\n");
                _exit(1);
            }
            in_batch = 0;
        }
    }
    double dt = now_s() - t0;
    fprintf(stderr,
            "%s: %d seeds, %lld executions in %.1f s (%.0f/s), seed %llu, %lld inputs with new "
            "coverage%s, no failure\n",
            prog, nseeds, runs, dt, dt > 0 ? (double)runs / dt : 0.0, (unsigned long long)g_seed,
            found, g_have_cov ? "" : " (no coverage instrumentation)");
    for (int i = 0; i < LEAK_BATCH; i++) free(batch[i]);
    free(cur);
    return 0;
}
