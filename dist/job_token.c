/* dist/job_token.c - the job token (dist/job_token.h): reading or deriving
 * it, generating a random one, comparing in constant time. */
#include "dist/job_token.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "core/log.h"
#include "core/util.h"

static const char *env_or(const char *name, const char *dflt) {
    const char *v = getenv(name);
    return v && *v ? v : dflt;
}

sg_status sg_job_token_resolve(uint64_t config_hash, const char *launcher_source,
                               const char *master_addr, int store_port, int world, char *out,
                               char *src, size_t srclen) {
    const char *t = getenv(SG_TOKEN_ENV);
    if (t && *t) {
        if (strlen(t) > SG_TOKEN_MAX) {
            SG_ERROR("%s is %zu characters long, over the limit of %d: use a shorter token (e.g. "
                     "`openssl rand -hex 32`)",
                     SG_TOKEN_ENV, strlen(t), SG_TOKEN_MAX);
            return SG_ERR_CONFIG;
        }
        snprintf(out, SG_TOKEN_MAX + 1, "%s", t);
        snprintf(src, srclen, "%s", SG_TOKEN_ENV);
        return SG_OK;
    }
    /* the job id every rank of one launch shares */
    char id[512];
    const char *idvar;
    if (!strcmp(launcher_source, "torchrun")) {
        idvar = "TORCHELASTIC_RUN_ID";
        snprintf(id, sizeof id, "%s", env_or(idvar, "none"));
    } else if (!strcmp(launcher_source, "slurm")) {
        idvar = "SLURM_JOB_ID.SLURM_STEP_ID";
        snprintf(id, sizeof id, "%s.%s", env_or("SLURM_JOB_ID", "none"),
                 env_or("SLURM_STEP_ID", "none"));
    } else if (!strcmp(launcher_source, "mpi")) {
        idvar = getenv("PMIX_NAMESPACE") ? "PMIX_NAMESPACE" : "OMPI_MCA_ess_base_jobid";
        snprintf(id, sizeof id, "%s", env_or(idvar, "none"));
    } else {
        idvar = "no job id";
        snprintf(id, sizeof id, "none");
    }
    char cfg[17], port[16], w[16];
    snprintf(cfg, sizeof cfg, "%016llx", (unsigned long long)config_hash);
    snprintf(port, sizeof port, "%d", store_port);
    snprintf(w, sizeof w, "%d", world);
    const char *parts[] = {"segtrain job token v1", cfg, id, master_addr, port, w};
    uint64_t h = SG_FNV_OFFSET;
    for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++) {
        h = sg_fnv1a_str(h, parts[i]);
        h = sg_fnv1a(h, "\x1f", 1); /* separator: ("ab","c") != ("a","bc") */
    }
    snprintf(out, SG_TOKEN_MAX + 1, "derived-%016llx", (unsigned long long)h);
    snprintf(src, srclen,
             "derived from the config hash, %s, MASTER_ADDR, the port and WORLD_SIZE "
             "(%s is not set; the token separates jobs but is not a secret)",
             idvar, SG_TOKEN_ENV);
    return SG_OK;
}

sg_status sg_job_token_generate(char *out) {
    unsigned char b[32];
    size_t got = 0;
    while (got < sizeof b) {
        ssize_t r = getrandom(b + got, sizeof b - got, 0);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        got += (size_t)r;
    }
    if (got < sizeof b) { /* no getrandom (old kernel, seccomp): the device */
        int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
        got = 0;
        while (fd >= 0 && got < sizeof b) {
            ssize_t r = read(fd, b + got, sizeof b - got);
            if (r < 0 && errno == EINTR) continue;
            if (r <= 0) break;
            got += (size_t)r;
        }
        if (fd >= 0) close(fd);
    }
    if (got < sizeof b) {
        SG_ERROR(
            "launcher: no random bytes for the job token (getrandom and /dev/urandom failed: %s); "
            "export %s=<a random string> and run again",
            strerror(errno), SG_TOKEN_ENV);
        return SG_ERR_RUNTIME;
    }
    for (size_t i = 0; i < sizeof b; i++) snprintf(out + 2 * i, 3, "%02x", b[i]);
    return SG_OK;
}

int sg_token_equal(const void *a, size_t an, const void *b, size_t bn) {
    const volatile unsigned char *x = a, *y = b;
    unsigned diff = an != bn;
    for (size_t i = 0; i < bn; i++) diff |= (unsigned)((i < an ? x[i] : 0) ^ y[i]);
    return diff == 0;
}
