/* core/config_origin.c - see config_origin.h. Reads the schema only through
 * core/config_schema.h (row index by key), never the loader's internals. */
#include "core/config_origin.h"

#include <stdio.h>
#include <string.h>

/* The record is indexed by schema row: the schema must fit it
 * (config_schema.c asserts this at compile time, where the row count is
 * known). */
static int key_index(const sg_config_key *k) {
    int i = sg_config_key_index(k);
    return i < SG_CONFIG_MAX_KEYS ? i : -1;
}

void sg_config_origin_clear(sg_config *cfg) { memset(&cfg->origin, 0, sizeof cfg->origin); }

/* The source's slot (2 + index), adding it when new; SG_ORIGIN_UNRECORDED
 * when the table is full. */
static int intern(sg_config_origin *o, const char *src) {
    for (int i = 0; i < o->n_sources; i++)
        if (!strncmp(o->sources[i], src, SG_STR - 1)) return SG_ORIGIN_FILE + i;
    if (o->n_sources >= SG_CONFIG_MAX_SOURCES) return SG_ORIGIN_UNRECORDED;
    snprintf(o->sources[o->n_sources], SG_STR, "%s", src);
    return SG_ORIGIN_FILE + o->n_sources++;
}

void sg_config_origin_note(sg_config *cfg, const sg_config_key *k, const char *src, int line) {
    int i = key_index(k);
    if (i < 0) return;
    cfg->origin.source[i] = (unsigned char)(src ? intern(&cfg->origin, src) : SG_ORIGIN_SET);
    cfg->origin.line[i] = src ? line : 0;
}

int sg_config_origin_describe(const sg_config *cfg, int i, char *buf, size_t n) {
    const sg_config_origin *o = &cfg->origin;
    int s = (i >= 0 && i < SG_CONFIG_MAX_KEYS) ? o->source[i] : SG_ORIGIN_UNRECORDED;
    if (s >= SG_ORIGIN_FILE && s - SG_ORIGIN_FILE >= o->n_sources) s = SG_ORIGIN_UNRECORDED;
    if (s == SG_ORIGIN_DEFAULT) {
        snprintf(buf, n, "default");
    } else if (s == SG_ORIGIN_SET) {
        snprintf(buf, n, "--set");
    } else if (s == SG_ORIGIN_UNRECORDED) {
        snprintf(buf, n, "an unrecorded source");
        return SG_ORIGIN_UNRECORDED;
    } else if (o->line[i] > 0) {
        snprintf(buf, n, "%s:%d", o->sources[s - SG_ORIGIN_FILE], o->line[i]);
    } else {
        snprintf(buf, n, "%s", o->sources[s - SG_ORIGIN_FILE]);
    }
    return s >= SG_ORIGIN_FILE ? SG_ORIGIN_FILE : s;
}

const char *sg_config_origin_text(const sg_config *cfg, const char *key, char *buf, size_t n) {
    const sg_config_key *k = sg_config_find_key(key);
    int i = k ? key_index(k) : -1;
    if (i < 0) {
        snprintf(buf, n, "unknown key");
        return buf;
    }
    sg_config_origin_describe(cfg, i, buf, n);
    return buf;
}
