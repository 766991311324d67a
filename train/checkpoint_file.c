/* train/checkpoint_file.c - the checkpoint file itself (see checkpoint.h):
 * assembling and atomically committing one, checksums, validation, run ids,
 * reading the state and the stored config, and the files of a run
 * directory (retention, auto-resume, other runs' files). Nothing here
 * touches a model or a backend: the fuzz harness (tests/fuzz/
 * fuzz_safetensors.c) compiles this file alone with the safetensors reader.
 * Saving and loading a model's tensors is checkpoint.c. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <libgen.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/log.h"
#include "core/util.h"
#include "train/checkpoint.h"

/* ---------------- checksum ---------------- */
/* The checksum is sg_fnv1a_words (core/util.h): word-wise FNV-1a, fast on
 * hundreds of MB, and any changed byte changes it. */

static uint64_t hash_tensor(uint64_t h, const char *name, int dtype, const void *data,
                            size_t nbytes) {
    h = sg_fnv1a_words(h, name, strlen(name) + 1);
    uint64_t d = (uint64_t)dtype, nb = (uint64_t)nbytes;
    h = sg_fnv1a_words(h, &d, 8);
    h = sg_fnv1a_words(h, &nb, 8);
    return sg_fnv1a_words(h, data, nbytes);
}

/* One metadata entry's contribution to meta_checksum: entries are summed,
 * so the order the file stores them in does not matter. */
static uint64_t hash_meta_entry(const char *key, const char *value) {
    uint64_t h = sg_fnv1a_words(SG_FNV_OFFSET, key, strlen(key) + 1);
    return sg_fnv1a_words(h, value, strlen(value) + 1);
}

static int is_checksum_key(const char *key) {
    return strcmp(key, "checksum") == 0 || strcmp(key, "meta_checksum") == 0;
}

/* ---------------- run ids ---------------- */
void sg_ckpt_new_run_id(char out[SG_RUN_ID_LEN + 1]) {
    uint64_t r = 0;
    if (getrandom(&r, sizeof r, 0) != (ssize_t)sizeof r) {
        /* no entropy source: time, pid and an address still tell runs apart */
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        uint64_t parts[3] = {(uint64_t)ts.tv_sec, (uint64_t)ts.tv_nsec,
                             (uint64_t)getpid() ^ (uint64_t)(uintptr_t)&r};
        r = sg_fnv1a(SG_FNV_OFFSET, parts, sizeof parts);
    }
    snprintf(out, SG_RUN_ID_LEN + 1, "%016" PRIx64, r);
}

int sg_ckpt_is_run_id(const char *s) {
    if (strlen(s) != SG_RUN_ID_LEN) return 0;
    for (const char *c = s; *c; c++)
        if (!((*c >= '0' && *c <= '9') || (*c >= 'a' && *c <= 'f'))) return 0;
    return 1;
}

sg_status sg_ckpt_run_id(const sg_st_file *f, char out[SG_RUN_ID_LEN + 1], char *why, size_t cap) {
    const char *v = sg_st_meta(f, "run_id");
    out[0] = 0;
    if (!v) return SG_OK;
    if (!sg_ckpt_is_run_id(v)) {
        snprintf(why, cap, "metadata 'run_id' is not %d lowercase hex digits (corrupt file)",
                 SG_RUN_ID_LEN);
        return SG_ERR_RUNTIME;
    }
    memcpy(out, v, SG_RUN_ID_LEN + 1);
    return SG_OK;
}

/* Strict decimal integer in lo..hi: 0, or -1. */
static int parse_i64(const char *v, long long lo, long long hi, long long *out) {
    if (!v || !*v) return -1;
    char *end = NULL;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    if (errno || *end || end == v || x < lo || x > hi) return -1;
    *out = x;
    return 0;
}

/* ---------------- builder ---------------- */
void sg_ckpt_builder_init(sg_ckpt_builder *b) {
    b->w = sg_st_writer_create();
    SG_CHECK(b->w != NULL, "out of memory creating a safetensors writer");
    b->hash = SG_FNV_OFFSET;
    b->meta_hash = 0;
    b->n_tensors = 0;
}

void sg_ckpt_builder_free(sg_ckpt_builder *b) {
    if (b->w) sg_st_writer_destroy(b->w);
    b->w = NULL;
}

sg_status sg_ckpt_add(sg_ckpt_builder *b, const char *name, sg_st_dtype dtype, int ndim,
                      const int64_t *shape, const void *data, size_t nbytes) {
    if (sg_st_writer_add(b->w, name, dtype, ndim, shape, data) != SG_OK) {
        SG_ERROR("checkpoint: cannot add tensor '%s' (duplicate or invalid name)", name);
        return SG_ERR_RUNTIME;
    }
    b->hash = hash_tensor(b->hash, name, (int)dtype, data, nbytes);
    b->n_tensors++;
    return SG_OK;
}

sg_status sg_ckpt_meta(sg_ckpt_builder *b, const char *key, const char *value) {
    if (sg_st_writer_meta(b->w, key, value) != SG_OK) {
        SG_ERROR("checkpoint: cannot set metadata '%s'", key);
        return SG_ERR_RUNTIME;
    }
    if (!is_checksum_key(key)) b->meta_hash += hash_meta_entry(key, value);
    return SG_OK;
}

static sg_status fsync_dir_of(const char *path) {
    char tmp[SG_STR + 64];
    snprintf(tmp, sizeof tmp, "%s", path);
    const char *dir = dirname(tmp);
    int fd = open(dir, O_RDONLY | O_DIRECTORY);
    if (fd < 0) {
        SG_ERROR("checkpoint: cannot open directory %s to fsync it: %s", dir, strerror(errno));
        return SG_ERR_RUNTIME;
    }
    int rc = fsync(fd);
    int e = errno;
    close(fd);
    if (rc != 0 && e != EINVAL) { /* some filesystems cannot fsync a directory */
        SG_ERROR("checkpoint: fsync of directory %s failed: %s", dir, strerror(e));
        return SG_ERR_RUNTIME;
    }
    return SG_OK;
}

/* What to do when writing checkpoint `path` failed with errno e: a full
 * disk, a quota and the file size limit (`ulimit -f`: EFBIG, SIGXFSZ being
 * ignored, core/sigmask.h) each get their own line; other errors were
 * explained where they were found. */
static void explain_write_error(int e, const char *path) {
    if (e == EFBIG) {
        struct rlimit rl;
        char lim[64] = "unknown";
        if (getrlimit(RLIMIT_FSIZE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY)
            snprintf(lim, sizeof lim, "%llu bytes", (unsigned long long)rl.rlim_cur);
        SG_ERROR("checkpoint: %s is larger than this process may write a file (the file size "
                 "limit, `ulimit -f`, is %s): raise it (`ulimit -f unlimited` in the shell or job "
                 "script that starts segtrain) and resume with --resume auto; the partial file "
                 "was removed, earlier checkpoints are intact",
                 path, lim);
    } else if (e == ENOSPC || e == EDQUOT) {
        SG_ERROR("checkpoint: no space left for %s (%s): free space there or move run_dir, and "
                 "resume with --resume auto; the partial file was removed, earlier checkpoints "
                 "are intact",
                 path, strerror(e));
    }
}

sg_status sg_ckpt_commit(sg_ckpt_builder *b, const char *path) {
    char buf[64];
    snprintf(buf, sizeof buf, "%d", b->n_tensors);
    if (sg_ckpt_meta(b, "tensor_count", buf)) return SG_ERR_RUNTIME;
    snprintf(buf, sizeof buf, "fnv1a64:%016" PRIx64, b->hash);
    if (sg_ckpt_meta(b, "checksum", buf)) return SG_ERR_RUNTIME;
    snprintf(buf, sizeof buf, "sum64:%016" PRIx64, b->meta_hash);
    if (sg_ckpt_meta(b, "meta_checksum", buf)) return SG_ERR_RUNTIME;

    char tmp[SG_STR + 16];
    snprintf(tmp, sizeof tmp, "%s%s", path, SG_CKPT_TMP_SUFFIX);
    FILE *f = fopen(tmp, "wb");
    if (!f) {
        int e = errno;
        SG_ERROR("checkpoint: cannot create %s: %s (is the run_dir writable? disk full?)", tmp,
                 strerror(e));
        explain_write_error(e, path);
        return SG_ERR_RUNTIME;
    }
    int e = 0;
    sg_status rc = sg_st_writer_write_stream(b->w, f, tmp);
    if (rc != SG_OK) e = errno; /* logged by the writer */
    if (rc == SG_OK && fflush(f) != 0) {
        e = errno;
        SG_ERROR("checkpoint: writing %s failed: %s (disk full?)", tmp, strerror(e));
        rc = SG_ERR_RUNTIME;
    }
    if (rc == SG_OK && fsync(fileno(f)) != 0) {
        e = errno;
        SG_ERROR("checkpoint: fsync of %s failed: %s", tmp, strerror(e));
        rc = SG_ERR_RUNTIME;
    }
    if (fclose(f) != 0 && rc == SG_OK) {
        e = errno;
        SG_ERROR("checkpoint: closing %s failed: %s (disk full?)", tmp, strerror(e));
        rc = SG_ERR_RUNTIME;
    }
    if (rc != SG_OK) {
        if (unlink(tmp) != 0 && errno != ENOENT)
            SG_WARN("checkpoint: cannot remove the partial file %s: %s (remove it by hand)", tmp,
                    strerror(errno));
        explain_write_error(e, path);
        return SG_ERR_RUNTIME;
    }
    if (rename(tmp, path) != 0) {
        SG_ERROR("checkpoint: rename %s -> %s failed: %s", tmp, path, strerror(errno));
        unlink(tmp);
        return SG_ERR_RUNTIME;
    }
    return fsync_dir_of(path);
}

/* ---------------- validation ---------------- */
typedef struct {
    const sg_st_tensor *t;
} tref;

static int by_offset(const void *a, const void *b) {
    size_t x = ((const tref *)a)->t->offset, y = ((const tref *)b)->t->offset;
    return x < y ? -1 : x > y;
}

uint64_t sg_ckpt_file_checksum(const sg_st_file *f) {
    int n = sg_st_count(f);
    tref *r = malloc((size_t)(n > 0 ? n : 1) * sizeof *r);
    SG_CHECK(r != NULL, "out of memory");
    for (int i = 0; i < n; i++) r[i].t = sg_st_get(f, i);
    qsort(r, (size_t)n, sizeof *r, by_offset);
    uint64_t h = SG_FNV_OFFSET;
    for (int i = 0; i < n; i++)
        h = hash_tensor(h, r[i].t->name, (int)r[i].t->dtype, r[i].t->data, r[i].t->nbytes);
    free(r);
    return h;
}

sg_st_file *sg_ckpt_open_valid(const char *path, char *why, size_t cap) {
    struct stat sb;
    if (stat(path, &sb) != 0) {
        snprintf(why, cap, "cannot stat: %s", strerror(errno));
        return NULL;
    }
    /* the reader's own reason (header byte, tensor), not logged here: a
     * skipped file reads as one warning */
    char cause[512];
    sg_st_file *f = sg_st_open_why(path, cause, sizeof cause);
    if (!f) {
        snprintf(why, cap, "not a readable safetensors file (%lld bytes): %s",
                 (long long)sb.st_size, cause);
        return NULL;
    }
    if (sg_ckpt_check(f, why, cap) != SG_OK) {
        sg_st_close(f);
        return NULL;
    }
    return f;
}

sg_status sg_ckpt_check(const sg_st_file *f, char *why, size_t cap) {
    const char *fmt = sg_st_meta(f, "format");
    const char *ver = sg_st_meta(f, "format_version");
    const char *cnt = sg_st_meta(f, "tensor_count");
    const char *sum = sg_st_meta(f, "checksum");
    long long ver_v = 0, cnt_v = -1;
    char rid[SG_RUN_ID_LEN + 1];
    if (!fmt || strcmp(fmt, SG_CKPT_FORMAT) != 0) {
        snprintf(why, cap,
                 "not a segtrain checkpoint (metadata format is '%.64s'; "
                 "for weights alone use model.pretrained)",
                 fmt ? fmt : "(none)");
    } else if (parse_i64(ver, 0, INT_MAX, &ver_v) != 0 || ver_v != SG_CKPT_FORMAT_VERSION) {
        snprintf(why, cap, "checkpoint format version '%.32s', this build reads %d",
                 ver ? ver : "(none)", SG_CKPT_FORMAT_VERSION);
    } else if (parse_i64(cnt, 0, INT_MAX, &cnt_v) != 0 || cnt_v != sg_st_count(f)) {
        snprintf(why, cap, "holds %d tensors, its metadata says '%.32s'", sg_st_count(f),
                 cnt ? cnt : "(none)");
    } else if (sg_ckpt_run_id(f, rid, why, cap) != SG_OK) {
        /* why is set */
    } else if (!sum) {
        snprintf(why, cap, "no checksum in its metadata");
    } else {
        char want[64];
        snprintf(want, sizeof want, "fnv1a64:%016" PRIx64, sg_ckpt_file_checksum(f));
        const char *msum = sg_st_meta(f, "meta_checksum");
        char mwant[64] = "";
        if (msum) {
            uint64_t mh = 0;
            for (int i = 0; i < sg_st_meta_count(f); i++) {
                const char *k, *v;
                sg_st_meta_get(f, i, &k, &v);
                if (!is_checksum_key(k)) mh += hash_meta_entry(k, v);
            }
            snprintf(mwant, sizeof mwant, "sum64:%016" PRIx64, mh);
        }
        if (strcmp(want, sum) != 0)
            snprintf(why, cap, "checksum mismatch (file says %.40s, data gives %s): corrupt", sum,
                     want);
        else if (msum && strcmp(mwant, msum) != 0)
            snprintf(why, cap,
                     "metadata checksum mismatch (file says %.40s, metadata gives %s): "
                     "corrupt",
                     msum, mwant);
        else return SG_OK;
    }
    for (char *c = why; *c; c++) /* values from the file may hold anything */
        if ((unsigned char)*c < 0x20 || *c == 0x7f) *c = '?';
    return SG_ERR_RUNTIME;
}

/* A metadata value for a message: at most 40 bytes, control characters as
 * '?' (the file may hold anything). */
static const char *shown(const char *v, char out[41]) {
    snprintf(out, 41, "%s", v ? v : "(missing)");
    for (char *c = out; *c; c++)
        if ((unsigned char)*c < 0x20 || *c == 0x7f) *c = '?';
    return out;
}

/* Metadata key as an integer in lo..hi. SG_OK, or SG_ERR_RUNTIME after
 * logging the key, its value and the range (a crafted or corrupt value must
 * not reach the arithmetic: iter -5, epoch 2^63 - 1, world_size 0). */
static sg_status meta_ll(const sg_st_file *f, const char *key, long long lo, long long hi,
                         long long *out) {
    const char *v = sg_st_meta(f, key);
    if (parse_i64(v, lo, hi, out) == 0) return SG_OK;
    if (!v)
        SG_ERROR("checkpoint %s: metadata key '%s' is missing (not a complete segtrain "
                 "checkpoint)",
                 sg_st_path(f), key);
    else {
        char b[41];
        SG_ERROR("checkpoint %s: metadata '%s' = '%s' is not an integer in %lld..%lld "
                 "(corrupt or crafted file; use another checkpoint)",
                 sg_st_path(f), key, shown(v, b), lo, hi);
    }
    return SG_ERR_RUNTIME;
}

sg_status sg_ckpt_read_state(const sg_st_file *f, sg_train_state *st) {
    memset(st, 0, sizeof *st);
    const long long C = SG_CKPT_MAX_COUNT;
    long long iter, epoch, pos, total, world, mom, best_iter, seed;
    if (meta_ll(f, "iter", 0, C, &iter) || meta_ll(f, "epoch", 0, C, &epoch) ||
        meta_ll(f, "sample_pos", 0, C, &pos) || meta_ll(f, "total_steps", 0, C, &total) ||
        meta_ll(f, "world_size", 1, SG_CKPT_MAX_WORLD, &world) ||
        meta_ll(f, "momentum_initialized", 0, 1, &mom) ||
        meta_ll(f, "best_iter", -1, iter, &best_iter) || meta_ll(f, "seed", 0, INT_MAX, &seed))
        return SG_ERR_RUNTIME;
    st->iter = iter;
    st->epoch = epoch;
    st->sample_pos = pos;
    st->total_steps = total;
    st->world = (int)world;
    st->momentum_initialized = (int)mom;
    st->best_iter = best_iter;
    st->seed = (uint64_t)seed;
    const char *bm = sg_st_meta(f, "best_miou");
    char *end = NULL;
    double miou = NAN;
    if (bm && strcmp(bm, "nan") != 0) miou = strtod(bm, &end);
    if (!bm || (strcmp(bm, "nan") != 0 && (end == bm || *end || !(miou >= 0 && miou <= 1)))) {
        char b[41];
        SG_ERROR("checkpoint %s: metadata 'best_miou' = '%s' is neither nan nor a number in "
                 "0..1 (corrupt or crafted file)",
                 sg_st_path(f), shown(bm, b));
        return SG_ERR_RUNTIME;
    }
    st->best_miou = miou;
    if (isnan(miou) != (best_iter < 0)) {
        char b[41];
        SG_ERROR("checkpoint %s: metadata best_miou %s and best_iter %lld disagree (corrupt "
                 "file)",
                 sg_st_path(f), shown(bm, b), best_iter);
        return SG_ERR_RUNTIME;
    }
    char why[256];
    if (sg_ckpt_run_id(f, st->run_id, why, sizeof why) != SG_OK) {
        SG_ERROR("checkpoint %s: %s", sg_st_path(f), why);
        return SG_ERR_RUNTIME;
    }
    return SG_OK;
}

sg_status sg_ckpt_read_config(const sg_st_file *f, sg_config *cfg) {
    const char *yaml = sg_st_meta(f, "config");
    if (!yaml) {
        SG_ERROR("checkpoint %s has no 'config' in its metadata; pass --config", sg_st_path(f));
        return SG_ERR_CONFIG;
    }
    char name[SG_STR + 32];
    snprintf(name, sizeof name, "%s:__metadata__.config", sg_st_path(f));
    return sg_config_load_string(cfg, yaml, name);
}

/* ---------------- files in a run directory ---------------- */
sg_status sg_ckpt_dir(const char *run_dir, int create, char *out, size_t cap) {
    snprintf(out, cap, "%s/checkpoints", run_dir);
    if (create && mkdir(out, 0777) != 0 && errno != EEXIST) {
        SG_ERROR("cannot create %s: %s (check run_dir)", out, strerror(errno));
        return SG_ERR_RUNTIME;
    }
    return SG_OK;
}

void sg_ckpt_iter_path(const char *run_dir, int64_t iter, char *out, size_t cap) {
    snprintf(out, cap, "%s/checkpoints/iter_%08lld.safetensors", run_dir, (long long)iter);
}

void sg_ckpt_best_path(const char *run_dir, char *out, size_t cap) {
    snprintf(out, cap, "%s/checkpoints/best.safetensors", run_dir);
}

/* Iterations of the iter_*.safetensors files in dir, newest first. */
static int list_iters(const char *dir, long long **out) {
    *out = NULL;
    DIR *d = opendir(dir);
    if (!d) return 0;
    int n = 0, cap = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        long long it;
        char tail[32];
        if (sscanf(e->d_name, "iter_%lld.%31s", &it, tail) == 2 &&
            strcmp(tail, "safetensors") == 0) {
            if (n == cap) {
                cap = cap ? 2 * cap : 16;
                *out = realloc(*out, (size_t)cap * sizeof **out);
                SG_CHECK(*out != NULL, "out of memory listing %s", dir);
            }
            (*out)[n++] = it;
        }
    }
    closedir(d);
    for (int i = 1; i < n; i++) /* insertion sort, descending */
        for (int k = i; k > 0 && (*out)[k] > (*out)[k - 1]; k--) {
            long long t = (*out)[k];
            (*out)[k] = (*out)[k - 1];
            (*out)[k - 1] = t;
        }
    return n;
}

/* The run id in path's header (parsed, not checksummed): 1 and the id ("" =
 * none) in out, or 0 when the header cannot be read. */
static int peek_run_id(const char *path, char out[SG_RUN_ID_LEN + 1]) {
    char why[512];
    out[0] = 0;
    sg_st_file *f = sg_st_open_why(path, why, sizeof why);
    if (!f) return 0;
    int ok = sg_ckpt_run_id(f, out, why, sizeof why) == SG_OK;
    sg_st_close(f);
    return ok;
}

/* A file of run `run_id` (NULL or "": the file's run id must be "" too, as
 * for a run resumed from a file written before run ids): own when its id
 * equals run_id or it has none. */
static int owned_by(const char *file_id, const char *run_id) {
    return !file_id[0] || (run_id && strcmp(file_id, run_id) == 0);
}

int sg_ckpt_prune(const char *run_dir, int keep, int64_t newest, const char *run_id) {
    char dir[SG_STR + 32], path[SG_STR + 320];
    sg_ckpt_dir(run_dir, 0, dir, sizeof dir);
    int deleted = 0;
    long long *its;
    int n = list_iters(dir, &its);
    /* Files past `newest` (the checkpoint just written) are not this run's
     * history: a resume that skipped a corrupt newest file, or a directory
     * mixed by an older segtrain. Counting them would delete the file just
     * written and leave nothing valid to resume from; they are left alone
     * (a resumed run rewrites them as it gets there). So are files of
     * another run, and files whose header cannot be read (whose run is
     * unknown). */
    int kept = 0;
    for (int i = 0; keep > 0 && i < n; i++) {
        if (its[i] > (long long)newest) continue;
        sg_ckpt_iter_path(run_dir, its[i], path, sizeof path);
        char id[SG_RUN_ID_LEN + 1];
        if (!peek_run_id(path, id) || !owned_by(id, run_id)) continue;
        if (kept++ < keep) continue;
        if (unlink(path) == 0) deleted++;
        else SG_WARN("cannot delete old checkpoint %s: %s", path, strerror(errno));
    }
    free(its);
    return deleted + sg_ckpt_sweep_tmp(run_dir, 0);
}

int sg_ckpt_is_tmp_name(const char *name) {
    static const char best[] = "best.safetensors" SG_CKPT_TMP_SUFFIX;
    if (strcmp(name, best) == 0) return 1;
    /* iter_<digits>.safetensors.tmp, as sg_ckpt_iter_path + the suffix */
    if (strncmp(name, "iter_", 5) != 0) return 0;
    const char *p = name + 5;
    if (*p < '0' || *p > '9') return 0;
    while (*p >= '0' && *p <= '9') p++;
    return strcmp(p, ".safetensors" SG_CKPT_TMP_SUFFIX) == 0;
}

int sg_ckpt_sweep_tmp(const char *run_dir, int log_each) {
    char dir[SG_STR + 32], path[SG_STR + 320];
    sg_ckpt_dir(run_dir, 0, dir, sizeof dir);
    DIR *d = opendir(dir);
    if (!d) return 0; /* no checkpoints folder yet: nothing to sweep */
    int deleted = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (!sg_ckpt_is_tmp_name(e->d_name)) continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        if (unlink(path) == 0) {
            deleted++;
            if (log_each)
                SG_WARN("checkpoint: removed %s, the partial copy of a checkpoint whose write "
                        "did not finish (a process killed while writing it)",
                        path);
        } else if (errno != ENOENT) {
            SG_WARN("checkpoint: cannot remove the partial file %s: %s (remove it by hand)", path,
                    strerror(errno));
        }
    }
    closedir(d);
    return deleted;
}

int sg_ckpt_find_latest(const char *run_dir, char *out, size_t cap) {
    char dir[SG_STR + 32], path[SG_STR + 64], why[1024];
    sg_ckpt_dir(run_dir, 0, dir, sizeof dir);
    long long *its;
    int n = list_iters(dir, &its), found = 0;
    /* the run being resumed: the one the newest readable header names */
    char run[SG_RUN_ID_LEN + 1] = "";
    int run_known = 0;
    for (int i = 0; i < n && !run_known; i++) {
        sg_ckpt_iter_path(run_dir, its[i], path, sizeof path);
        run_known = peek_run_id(path, run);
    }
    for (int i = 0; i < n && !found; i++) {
        sg_ckpt_iter_path(run_dir, its[i], path, sizeof path);
        char id[SG_RUN_ID_LEN + 1];
        if (peek_run_id(path, id) && id[0] && strcmp(id, run) != 0) {
            SG_WARN("resume: skipping %s: a checkpoint of run %s, not of the run being resumed "
                    "(%s)",
                    path, id, run[0] ? run : "written before run ids");
            continue;
        }
        sg_st_file *f = sg_ckpt_open_valid(path, why, sizeof why);
        if (f) {
            sg_st_close(f);
            snprintf(out, cap, "%s", path);
            found = 1;
        } else {
            SG_WARN("resume: skipping %s: %s", path, why);
        }
    }
    free(its);
    return found;
}

int sg_ckpt_foreign(const char *run_dir, const char *run_id, char *path_out, size_t cap,
                    char their_id[SG_RUN_ID_LEN + 2]) {
    char dir[SG_STR + 32], path[SG_STR + 64];
    sg_ckpt_dir(run_dir, 0, dir, sizeof dir);
    long long *its;
    int n = list_iters(dir, &its), count = 0;
    if (path_out && cap) path_out[0] = 0;
    if (their_id) their_id[0] = 0;
    /* newest first, then best.safetensors */
    for (int i = 0; i <= n; i++) {
        if (i < n) sg_ckpt_iter_path(run_dir, its[i], path, sizeof path);
        else sg_ckpt_best_path(run_dir, path, sizeof path);
        if (access(path, F_OK) != 0) continue;
        char id[SG_RUN_ID_LEN + 1];
        int readable = peek_run_id(path, id);
        int foreign = !run_id ? 1 : !readable ? 0 : id[0] ? strcmp(id, run_id) != 0 : 0;
        if (!foreign) continue;
        if (count++ == 0) {
            if (path_out) snprintf(path_out, cap, "%s", path);
            if (their_id) snprintf(their_id, SG_RUN_ID_LEN + 2, "%s", readable ? id : "?");
        }
    }
    free(its);
    return count;
}
