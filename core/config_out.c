/* core/config_out.c - the configuration going out: YAML write-back, the
 * schema reference (--help-config, text or Markdown) and the config hash.
 *
 * sg_config_write's output is canonical (schema order, shortest round-trip
 * numbers, double-quoted strings), so it reloads to an identical struct and
 * its bytes are what sg_config_hash hashes: equal hashes = equal configs.
 * sg_config_write_origins (--print-config) adds "# FILE:LINE" comments from
 * sg_config.origin, which the canonical form and the hash never include.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/config.h"
#include "core/config_origin.h"
#include "core/config_schema.h"
#include "core/log.h"
#include "core/util.h"

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

/* Length of the UTF-8 sequence at p and its code point, or 0 when p does
 * not start a valid (shortest-form, non-surrogate) sequence. */
static int utf8_seq(const unsigned char *p, unsigned *cp) {
    if (p[0] < 0x80) return *cp = p[0], 1;
    int n = p[0] >= 0xF0 ? 4 : p[0] >= 0xE0 ? 3 : p[0] >= 0xC2 ? 2 : 0;
    if (n == 0 || p[0] > 0xF4) return 0;
    unsigned v = p[0] & (0x7Fu >> n);
    for (int i = 1; i < n; i++) {
        if ((p[i] & 0xC0) != 0x80) return 0; /* also stops at the NUL */
        v = (v << 6) | (p[i] & 0x3Fu);
    }
    if ((n == 3 && v < 0x800) || (n == 4 && (v < 0x10000 || v > 0x10FFFF)) ||
        (v >= 0xD800 && v <= 0xDFFF))
        return 0;
    return *cp = v, n;
}

/* A double-quoted YAML scalar that reads back to exactly s. Escaped: quote
 * and backslash; every C0 control and DEL; the C1 controls (U+0080-U+009F,
 * among them NEL U+0085, which YAML 1.1 reads as a line break and so folds
 * into a space when it is written raw); the line and paragraph separators
 * U+2028/U+2029 (line breaks too); the byte-order mark U+FEFF and the
 * non-characters U+FFFE/U+FFFF, which libyaml refuses in a stream. Bytes
 * that are not UTF-8 cannot be loaded from YAML in the first place and are
 * written as they are (reloading them fails loudly rather than changing). */
static void write_str(FILE *out, const char *s) {
    fputc('"', out);
    for (const unsigned char *p = (const unsigned char *)s; *p;) {
        unsigned cp;
        int n = utf8_seq(p, &cp);
        if (n == 0) {
            fputc(*p++, out);
            continue;
        }
        if (cp == '"' || cp == '\\') fprintf(out, "\\%c", (int)cp);
        else if (cp == '\n') fputs("\\n", out);
        else if (cp == '\t') fputs("\\t", out);
        else if (cp < 0x20 || (cp >= 0x7f && cp <= 0x9f)) fprintf(out, "\\x%02x", cp);
        else if (cp == 0x2028) fputs("\\L", out);
        else if (cp == 0x2029) fputs("\\P", out);
        else if (cp == 0xFEFF || cp == 0xFFFE || cp == 0xFFFF) fprintf(out, "\\u%04X", cp);
        else fwrite(p, 1, (size_t)n, out);
        p += n;
    }
    fputc('"', out);
}

/* Writes key k's value of cfg in YAML flow style. */
static void write_value(FILE *out, const sg_config *cfg, const sg_config_key *k) {
    const char *base = (const char *)cfg + k->off;
    char num[64];
    int count = k->fixed_len
                    ? k->fixed_len
                    : (k->count_off ? *(const int *)((const char *)cfg + k->count_off) : 0);
    switch (k->type) {
    case SG_KT_INT: fprintf(out, "%d", *(const int *)base); break;
    case SG_KT_FLOAT:
        fmt_double(*(const double *)base, num, sizeof num);
        fputs(num, out);
        break;
    case SG_KT_BOOL: fputs(*(const int *)base ? "true" : "false", out); break;
    case SG_KT_STR:
    case SG_KT_ENUM: write_str(out, base); break;
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

/* annotate: a "# FILE:LINE" / "# --set" comment after values that are not
 * defaults (--print-config); the canonical form (config.yaml, the hash)
 * has none, so where a value came from never changes the hash. */
static void write_config(const sg_config *cfg, FILE *out, int annotate) {
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
        char from[SG_STR + 32];
        if (annotate && sg_config_origin_describe(cfg, i, from, sizeof from) != SG_ORIGIN_DEFAULT) {
            /* a line break in a file name (YAML's: CR, LF, NEL, LS, PS) must
             * not end the comment: the output stays loadable YAML */
            for (unsigned char *p = (unsigned char *)from; *p; p++) {
                if (*p < 0x20 || *p == 0x7f) *p = '?';
                if (p[0] == 0xC2 && p[1] == 0x85) p[0] = p[1] = '?';
                if (p[0] == 0xE2 && p[1] == 0x80 && (p[2] == 0xA8 || p[2] == 0xA9))
                    p[0] = p[1] = p[2] = '?';
            }
            fprintf(out, "  # %s", from);
        }
        fputc('\n', out);
    }
}

void sg_config_write(const sg_config *cfg, FILE *out) { write_config(cfg, out, 0); }

void sg_config_write_origins(const sg_config *cfg, FILE *out) { write_config(cfg, out, 1); }

/* Key k's value as written in config.yaml, malloc'ed. */
static char *value_text(const sg_config *cfg, const sg_config_key *k) {
    char *text = NULL;
    size_t len = 0;
    FILE *mem = open_memstream(&text, &len);
    SG_CHECK(mem != NULL, "open_memstream failed (out of memory)");
    write_value(mem, cfg, k);
    SG_CHECK(fclose(mem) == 0, "writing to memory failed (out of memory)");
    return text;
}

int sg_config_diff(const sg_config *a, const char *a_name, const sg_config *b, const char *b_name,
                   const char *prefix, char *out, size_t cap) {
    int n = 0;
    size_t used = 0;
    if (cap) out[0] = 0;
    for (int i = 0; i < sg_config_n_keys(); i++) {
        const sg_config_key *k = sg_config_key_at(i);
        if (strncmp(k->name, prefix, strlen(prefix)) != 0) continue;
        char *va = value_text(a, k), *vb = value_text(b, k);
        if (strcmp(va, vb) != 0) {
            if (used < cap) {
                int w = snprintf(out + used, cap - used, "%s%s: %s %s, %s %s", n ? "; " : "",
                                 k->name, a_name, va, b_name, vb);
                used += w > 0 ? (size_t)w : 0;
            }
            n++;
        }
        free(va);
        free(vb);
    }
    return n;
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
