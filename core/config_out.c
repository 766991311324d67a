/* core/config_out.c - the configuration going out: YAML write-back, the
 * schema reference (--help-config, text or Markdown) and the config hash.
 *
 * sg_config_write's output is canonical (schema order, shortest round-trip
 * numbers, double-quoted strings), so it reloads to an identical struct and
 * its bytes are what sg_config_hash hashes: equal hashes = equal configs.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"
#include "core/config.h"
#include "core/config_schema.h"
#include "core/log.h"

/* Shortest decimal that strtod reads back exactly; always has '.' or 'e'
 * so it reads as a float in YAML. */
static void fmt_double(double v, char *buf, size_t n) {
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(buf, n, "%.*g", prec, v);
        if (strtod(buf, NULL) == v) break;
    }
    if (!strpbrk(buf, ".eE")) {
        size_t l = strlen(buf);
        if (l + 3 <= n) memcpy(buf + l, ".0", 3);
    }
}

static void write_str(FILE *out, const char *s) {
    fputc('"', out);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\')
            fprintf(out, "\\%c", *p);
        else if (*p == '\n')
            fputs("\\n", out);
        else if (*p == '\t')
            fputs("\\t", out);
        else if (*p < 0x20 || *p == 0x7f)
            fprintf(out, "\\x%02x", *p);
        else
            fputc(*p, out);
    }
    fputc('"', out);
}

/* Writes key k's value of cfg in YAML flow style. */
static void write_value(FILE *out, const sg_config *cfg, const sg_config_key *k) {
    const char *base = (const char *)cfg + k->off;
    char num[64];
    int count = k->fixed_len ? k->fixed_len : (k->count_off ? *(const int *)((const char *)cfg + k->count_off) : 0);
    switch (k->type) {
    case SG_KT_INT:
        fprintf(out, "%d", *(const int *)base);
        break;
    case SG_KT_FLOAT:
        fmt_double(*(const double *)base, num, sizeof num);
        fputs(num, out);
        break;
    case SG_KT_BOOL:
        fputs(*(const int *)base ? "true" : "false", out);
        break;
    case SG_KT_STR:
    case SG_KT_ENUM:
        write_str(out, base);
        break;
    case SG_KT_INT_LIST:
    case SG_KT_FLOAT_LIST:
    case SG_KT_STR_LIST:
        fputc('[', out);
        for (int i = 0; i < count; i++) {
            if (i) fputs(", ", out);
            if (k->type == SG_KT_INT_LIST) {
                fprintf(out, "%d", ((const int *)base)[i]);
            } else if (k->type == SG_KT_FLOAT_LIST) {
                fmt_double(((const double *)base)[i], num, sizeof num);
                fputs(num, out);
            } else {
                write_str(out, base + (size_t)i * k->str_size);
            }
        }
        fputc(']', out);
        break;
    }
}

void sg_config_write(const sg_config *cfg, FILE *out) {
    char section[64] = "";
    for (int i = 0; i < sg_config_n_keys(); i++) {
        const sg_config_key *k = sg_config_key_at(i);
        const char *dot = strchr(k->name, '.');
        if (dot) {
            size_t sl = (size_t)(dot - k->name);
            if (strlen(section) != sl || strncmp(section, k->name, sl) != 0) {
                snprintf(section, sizeof section, "%.*s", (int)sl, k->name);
                fprintf(out, "%s:\n", section);
            }
            fprintf(out, "  %s: ", dot + 1);
        } else {
            fprintf(out, "%s: ", k->name);
        }
        write_value(out, cfg, k);
        fputc('\n', out);
    }
}

unsigned long long sg_config_hash(const sg_config *cfg) {
    char *text = NULL;
    size_t len = 0;
    FILE *mem = open_memstream(&text, &len);
    SG_CHECK(mem != NULL, "open_memstream failed (out of memory) while hashing the configuration");
    sg_config_write(cfg, mem);
    SG_CHECK(fclose(mem) == 0, "writing the configuration to memory failed (out of memory)");
    uint64_t h = sg_fnv1a(SG_FNV_OFFSET, text, len);
    free(text);
    return h;
}

/* "8, 16" / "0..255" / "" for the schema listing. */
static void constraint_text(const sg_config_key *k, char *buf, size_t n) {
    buf[0] = 0;
    if (k->allowed) {
        sg_config_allowed_text(k->allowed, buf, n);
    } else if (k->type == SG_KT_INT || k->type == SG_KT_INT_LIST) {
        snprintf(buf, n, "%lld..%lld", (long long)k->lo, (long long)k->hi);
    } else if (k->type == SG_KT_FLOAT || k->type == SG_KT_FLOAT_LIST) {
        snprintf(buf, n, "%g..%g", k->lo, k->hi);
    }
    if (!k->fixed_len && k->min_len > 0 && strlen(buf) + 24 < n) {
        size_t l = strlen(buf);
        snprintf(buf + l, n - l, "%s%d+ entries", l ? "; " : "", k->min_len);
    }
}

void sg_config_print_schema(FILE *out, int markdown) {
    sg_config defaults;
    sg_config_defaults(&defaults);
    if (markdown) {
        fputs("| key | type | default | allowed | description |\n", out);
        fputs("|---|---|---|---|---|\n", out);
    } else {
        fputs("Configuration keys (YAML sections, or --set section.key=value):\n\n", out);
    }
    for (int i = 0; i < sg_config_n_keys(); i++) {
        const sg_config_key *k = sg_config_key_at(i);
        char type[32], cons[256];
        sg_config_type_name(k, type, sizeof type);
        constraint_text(k, cons, sizeof cons);
        char *def = NULL;
        size_t dl = 0;
        FILE *mem = open_memstream(&def, &dl);
        SG_CHECK(mem != NULL, "open_memstream failed (out of memory)");
        write_value(mem, &defaults, k);
        SG_CHECK(fclose(mem) == 0, "writing to memory failed (out of memory)");
        if (markdown) {
            fprintf(out, "| `%s` | %s | `%s` | %s | %s |\n", k->name, type, def, cons, k->doc);
        } else {
            fprintf(out, "  %-26s %-12s default %s%s%s%s\n      %s\n", k->name, type, def,
                    cons[0] ? "  (" : "", cons, cons[0] ? ")" : "", k->doc);
        }
        free(def);
    }
}
