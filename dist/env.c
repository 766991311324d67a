/* dist/env.c - reads the launch environment (torchrun, mpirun, srun) into
 * sg_dist_env. Owns nothing but the parsing rules; see dist/comm.h. Every
 * failure is a variable the user (or their launcher) set: SG_ERR_CONFIG. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/log.h"
#include "dist/comm.h"

/* Parses a non-negative int variable. Returns 1 if set and valid, 0 if unset,
 * -1 (logged) if malformed: three outcomes, so an int, not a status. */
static int env_int(const char *name, int *out) {
    const char *s = getenv(name);
    if (!s || !*s) return 0;
    char *end = NULL;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || *end || v < 0 || v > 1000000) {
        SG_ERROR("environment variable %s='%s' is not a non-negative integer: fix or unset it",
                 name, s);
        return -1;
    }
    *out = (int)v;
    return 1;
}

/* Reads one launcher's variable set; returns 1 if its rank variable is set,
 * 0 if not, -1 (logged) on a malformed value (three outcomes, as env_int). */
static int read_set(sg_dist_env *e, const char *rank_v, const char *world_v, const char *local_v,
                    const char *local_world_v, const char *node_v) {
    int have = env_int(rank_v, &e->rank);
    if (have <= 0) return have;
    if (env_int(world_v, &e->world) != 1) {
        SG_ERROR(
            "%s is set but %s is not: the launcher must set both (or neither for a single process)",
            rank_v, world_v);
        return -1;
    }
    int r = env_int(local_v, &e->local_rank);
    if (r < 0) return -1;
    if (r == 0) e->local_rank = e->rank;
    r = local_world_v ? env_int(local_world_v, &e->local_world) : 0;
    if (r < 0) return -1;
    if (r == 0) e->local_world = e->world;
    r = node_v ? env_int(node_v, &e->node_rank) : 0;
    if (r < 0) return -1;
    return 1;
}

sg_status sg_dist_env_read(sg_dist_env *e) {
    memset(e, 0, sizeof *e);
    e->world = e->local_world = 1;
    snprintf(e->master_addr, sizeof e->master_addr, "127.0.0.1");
    e->master_port = 29500;
    snprintf(e->source, sizeof e->source, "none");

    int r = read_set(e, "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK");
    if (r < 0) return SG_ERR_CONFIG;
    if (r == 1) {
        snprintf(e->source, sizeof e->source, "torchrun");
    } else {
        r = read_set(e, "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
                     "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE",
                     "OMPI_COMM_WORLD_NODE_RANK");
        if (r < 0) return SG_ERR_CONFIG;
        if (r == 1) {
            snprintf(e->source, sizeof e->source, "mpi");
        } else {
            r = read_set(e, "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", NULL, "SLURM_NODEID");
            if (r < 0) return SG_ERR_CONFIG;
            if (r == 1) snprintf(e->source, sizeof e->source, "slurm");
        }
    }
    if (e->world < 1) {
        SG_ERROR(
            "world size 0 from the %s environment: the launcher must start at least one process",
            e->source);
        return SG_ERR_CONFIG;
    }
    if (e->rank >= e->world) {
        SG_ERROR("rank %d >= world size %d (%s environment): check the launcher's variables",
                 e->rank, e->world, e->source);
        return SG_ERR_CONFIG;
    }
    if (e->local_world < 1 || e->local_rank >= e->local_world) {
        /* No usable local world size (SLURM's is "2(x3)"-style): use world. */
        if (e->local_rank < e->world) {
            e->local_world = e->world;
        } else {
            SG_ERROR("local rank %d is not below the local world size %d (%s environment)",
                     e->local_rank, e->local_world, e->source);
            return SG_ERR_CONFIG;
        }
    }
    const char *addr = getenv("MASTER_ADDR");
    if (addr && *addr) {
        if (strlen(addr) >= sizeof e->master_addr) {
            SG_ERROR("MASTER_ADDR is longer than %zu characters", sizeof e->master_addr - 1);
            return SG_ERR_CONFIG;
        }
        snprintf(e->master_addr, sizeof e->master_addr, "%s", addr);
    }
    int port = 0;
    r = env_int("MASTER_PORT", &port);
    if (r < 0) return SG_ERR_CONFIG;
    if (r == 1) {
        if (port < 1 || port > 65535) {
            SG_ERROR("MASTER_PORT=%d is not a TCP port (1-65535)", port);
            return SG_ERR_CONFIG;
        }
        e->master_port = port;
    }
    if (env_int("TORCHELASTIC_RESTART_COUNT", &e->restart_count) < 0) return SG_ERR_CONFIG;
    /* torchrun's static rendezvous: its agent hosts a TCPStore of its own on
     * MASTER_PORT, so segtrain's store takes the next port (the same rule on
     * every rank) */
    const char *agent = getenv("TORCHELASTIC_USE_AGENT_STORE");
    if (strcmp(e->source, "torchrun") == 0 && agent && strcasecmp(agent, "true") == 0) {
        if (e->master_port >= 65535) {
            SG_ERROR(
                "MASTER_PORT=%d: under torchrun segtrain's store uses MASTER_PORT+1, which is not a port",
                e->master_port);
            return SG_ERR_CONFIG;
        }
        e->master_port++;
    }
    return SG_OK;
}
