/* core/config.c - loading values into the configuration, and validating it.
 *
 * Defaults, YAML files (libyaml's document API, for line:column marks),
 * --set overrides and the cross-key validation, all driven by the schema
 * table (config_schema.c); files may inherit from a base file (`base:`,
 * loaded first; see load_chain_file). Writing, --help-config and the hash
 * are in config_out.c; where each value came from, config_origin.c.
 * Every error names the source (file or --set), line:column, the key and
 * what to do, and the call returns SG_ERR_CONFIG (core/status.h).
 */
#include "core/config.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <yaml.h>

#include "core/config_origin.h"
#include "core/config_schema.h"
#include "core/log.h"

/* ---------------------------------------------------------------- errors */

/* "src:line:col: key 'k': message". line 0 = no position (e.g. --set). */
static sg_status cfg_error(const char *src, const yaml_mark_t *m, const char *key, const char *fmt,
                           ...) __attribute__((format(printf, 4, 5)));
static sg_status cfg_error(const char *src, const yaml_mark_t *m, const char *key, const char *fmt,
                           ...) {
    char msg[2048], where[1200], what[300] = "";
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (m && strncmp(src, "--set ", 6) != 0) /* --set: the value is in the message */
        snprintf(where, sizeof where, "%s:%zu:%zu", src, m->line + 1, m->column + 1);
    else snprintf(where, sizeof where, "%s", src);
    if (key) snprintf(what, sizeof what, "key '%s': ", key);
    SG_ERROR("config error: %s: %s%s", where, what, msg);
    return SG_ERR_CONFIG;
}

/* ---------------------------------------------------------------- scalars */

static int is_null_scalar(const yaml_node_t *n) {
    if (n->data.scalar.style != YAML_PLAIN_SCALAR_STYLE) return 0;
    const char *v = (const char *)n->data.scalar.value;
    return !*v || !strcmp(v, "~") || !strcmp(v, "null") || !strcmp(v, "Null") || !strcmp(v, "NULL");
}

static int parse_long(const char *s, long long *out) {
    char *end = NULL;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (!*s || errno || *end) return -1;
    *out = v;
    return 0;
}

static int parse_double(const char *s, double *out) {
    char *end = NULL;
    errno = 0;
    double v = strtod(s, &end);
    /* strtod accepts "inf", "nan", hex: only finite decimal numbers here */
    if (!*s || *end || !isfinite(v) || strpbrk(s, "xXnN") || errno == ERANGE) return -1;
    *out = v;
    return 0;
}

/* YAML 1.1's booleans, in any case: true/false, yes/no, on/off, y/n. */
static int parse_bool(const char *s, int *out) {
    static const char *yes[] = {"true", "yes", "on", "y"}, *no[] = {"false", "no", "off", "n"};
    for (int i = 0; i < 4; i++) {
        if (!strcasecmp(s, yes[i])) return *out = 1, 0;
        if (!strcasecmp(s, no[i])) return *out = 0, 0;
    }
    return -1;
}

static void range_text(const sg_config_key *k, char *buf, size_t n) {
    int ints = k->type == SG_KT_INT || k->type == SG_KT_INT_LIST;
    if (ints) snprintf(buf, n, "%lld..%lld", (long long)k->lo, (long long)k->hi);
    else snprintf(buf, n, "%g..%g", k->lo, k->hi);
}

/* One element of a numeric/bool/string key from a scalar node into dst. */
static sg_status set_scalar(const sg_config_key *k, const yaml_node_t *n, void *dst, int elem,
                            const char *src, const char *ctx) {
    const char *v = (const char *)n->data.scalar.value;
    const yaml_mark_t *m = &n->start_mark;
    int plain = n->data.scalar.style == YAML_PLAIN_SCALAR_STYLE;
    char what[64] = "";
    if (elem >= 0) snprintf(what, sizeof what, " (element %d)", elem + 1);
    char txt[256];
    switch (k->type) {
    case SG_KT_INT:
    case SG_KT_INT_LIST: {
        long long x;
        if (!plain || parse_long(v, &x) != 0)
            return cfg_error(src, m, k->name, "expects an integer%s, got '%s'%s", what, v, ctx);
        if (k->allowed) {
            char s[32];
            snprintf(s, sizeof s, "%lld", x);
            if (!sg_config_allowed_match(k->allowed, s)) {
                sg_config_allowed_text(k->allowed, txt, sizeof txt);
                return cfg_error(src, m, k->name, "%lld is not allowed%s: use one of %s", x, what,
                                 txt);
            }
        } else if ((double)x < k->lo || (double)x > k->hi) {
            range_text(k, txt, sizeof txt);
            return cfg_error(src, m, k->name, "%lld is out of range%s: must be in %s", x, what,
                             txt);
        }
        ((int *)dst)[elem < 0 ? 0 : elem] = (int)x;
        return SG_OK;
    }
    case SG_KT_FLOAT:
    case SG_KT_FLOAT_LIST: {
        double x;
        if (!plain || parse_double(v, &x) != 0)
            return cfg_error(src, m, k->name, "expects a number%s, got '%s'%s", what, v, ctx);
        if (x < k->lo || x > k->hi) {
            range_text(k, txt, sizeof txt);
            return cfg_error(src, m, k->name, "%g is out of range%s: must be in %s", x, what, txt);
        }
        ((double *)dst)[elem < 0 ? 0 : elem] = x;
        return SG_OK;
    }
    case SG_KT_BOOL: {
        int b;
        if (!plain || parse_bool(v, &b) != 0)
            return cfg_error(src, m, k->name, "expects true or false, got '%s'%s", v, ctx);
        *(int *)dst = b;
        return SG_OK;
    }
    case SG_KT_STR:
    case SG_KT_ENUM:
    case SG_KT_STR_LIST: {
        size_t len = n->data.scalar.length;
        if (strlen(v) != len) return cfg_error(src, m, k->name, "contains a NUL character%s", what);
        if (len >= k->str_size)
            return cfg_error(src, m, k->name, "is too long%s (%zu characters, at most %zu)", what,
                             len, k->str_size - 1);
        /* an enum with true and false among its values (auto|true|false)
         * takes every YAML boolean spelling (True, yes, off, ...) for them */
        int b;
        if (k->type == SG_KT_ENUM && plain && !sg_config_allowed_match(k->allowed, v) &&
            sg_config_allowed_match(k->allowed, "true") &&
            sg_config_allowed_match(k->allowed, "false") && parse_bool(v, &b) == 0) {
            v = b ? "true" : "false";
            len = strlen(v);
        }
        if (k->type == SG_KT_ENUM && !sg_config_allowed_match(k->allowed, v)) {
            sg_config_allowed_text(k->allowed, txt, sizeof txt);
            return cfg_error(src, m, k->name, "'%s' is not allowed: use one of %s", v, txt);
        }
        if (k->type == SG_KT_STR_LIST && len == 0)
            return cfg_error(src, m, k->name, "has an empty entry%s", what);
        memcpy((char *)dst + (elem < 0 ? 0 : (size_t)elem * k->str_size), v, len + 1);
        return SG_OK;
    }
    }
    return SG_ERR_CONFIG;
}

static const char *node_kind(const yaml_node_t *n) {
    return n->type == YAML_MAPPING_NODE    ? "a mapping"
           : n->type == YAML_SEQUENCE_NODE ? "a list"
                                           : "a value";
}

/* Sets key k from node n. Values are parsed into a scratch copy of the field
 * and committed only when all of it is valid. */
static sg_status set_from_node(sg_config *cfg, const sg_config_key *k, yaml_document_t *doc,
                               yaml_node_t *n, const char *src) {
    unsigned char scratch[sizeof(((sg_config *)0)->data.class_names)];
    _Static_assert(sizeof scratch >= SG_STR && sizeof scratch >= sizeof(int) * SG_LIST_MAX * 3,
                   "scratch must hold the largest field");
    int is_list = k->type == SG_KT_INT_LIST || k->type == SG_KT_FLOAT_LIST ||
                  k->type == SG_KT_STR_LIST;
    size_t elem_size = k->type == SG_KT_INT_LIST     ? sizeof(int)
                       : k->type == SG_KT_FLOAT_LIST ? sizeof(double)
                                                     : k->str_size;
    memset(scratch, 0, sizeof scratch);
    if (!is_list) {
        if (n->type != YAML_SCALAR_NODE) {
            char t[32];
            sg_config_type_name(k, t, sizeof t);
            return cfg_error(src, &n->start_mark, k->name, "expects a single %s, got %s", t,
                             node_kind(n));
        }
        if (is_null_scalar(n) && k->type != SG_KT_STR)
            return cfg_error(src, &n->start_mark, k->name,
                             "has no value (give one, or remove the line "
                             "to keep the default %s)",
                             k->def);
        if (set_scalar(k, n, scratch, -1, src, "") != 0) return SG_ERR_CONFIG;
        size_t sz = (k->type == SG_KT_STR || k->type == SG_KT_ENUM) ? k->str_size
                    : k->type == SG_KT_FLOAT                        ? sizeof(double)
                                                                    : sizeof(int);
        if (k->type == SG_KT_STR && is_null_scalar(n)) scratch[0] = 0;
        memcpy((char *)cfg + k->off, scratch, sz);
        return SG_OK;
    }
    int count = 0;
    if (n->type == YAML_SCALAR_NODE && is_null_scalar(n) && !k->fixed_len && k->min_len == 0) {
        count = 0; /* "key:" or "key: ~" = empty list */
    } else if (n->type != YAML_SEQUENCE_NODE) {
        char t[32];
        sg_config_type_name(k, t, sizeof t);
        return cfg_error(src, &n->start_mark, k->name, "expects a list (%s), e.g. %s; got %s", t,
                         k->def, node_kind(n));
    } else {
        yaml_node_item_t *it = n->data.sequence.items.start;
        count = (int)(n->data.sequence.items.top - it);
        if (k->fixed_len && count != k->fixed_len)
            return cfg_error(src, &n->start_mark, k->name,
                             "expects exactly %d entries, got %d (e.g. %s)", k->fixed_len, count,
                             k->def);
        if (count > k->cap)
            return cfg_error(src, &n->start_mark, k->name, "has %d entries, at most %d allowed",
                             count, k->cap);
        for (int i = 0; i < count; i++) {
            yaml_node_t *e = yaml_document_get_node(doc, it[i]);
            if (!e || e->type != YAML_SCALAR_NODE)
                return cfg_error(src, e ? &e->start_mark : &n->start_mark, k->name,
                                 "element %d must be a single value, got %s", i + 1,
                                 e ? node_kind(e) : "nothing");
            if (set_scalar(k, e, scratch, i, src, "") != 0) return SG_ERR_CONFIG;
        }
    }
    if (k->fixed_len && count != k->fixed_len)
        return cfg_error(src, &n->start_mark, k->name,
                         "expects exactly %d entries, got %d (e.g. %s)", k->fixed_len, count,
                         k->def);
    if (count < k->min_len)
        return cfg_error(src, &n->start_mark, k->name, "expects at least %d entries, got %d",
                         k->min_len, count);
    memcpy((char *)cfg + k->off, scratch, (size_t)k->cap * elem_size);
    if (k->count_off) *(int *)((char *)cfg + k->count_off) = count;
    return SG_OK;
}

/* ---------------------------------------------------------------- documents */

static sg_status unknown_key(const char *src, const yaml_mark_t *m, const char *full) {
    const char *f = sg_config_foreign_hint(full);
    if (f) return cfg_error(src, m, NULL, "unknown key '%s' (in segtrain: %s)", full, f);
    const char *s = sg_config_suggest(full);
    if (s) return cfg_error(src, m, NULL, "unknown key '%s' (did you mean %s?)", full, s);
    return cfg_error(src, m, NULL, "unknown key '%s' (segtrain --help-config lists every key)",
                     full);
}

/* Counts one reported error of a file or text (*nerr). Returns 1 while more
 * may be reported; at SG_CONFIG_MAX_ERRORS it says that it stops there and
 * returns 0, so a file of garbage yields a bounded report. */
static int more_errors(int *nerr, const char *src) {
    if (++*nerr < SG_CONFIG_MAX_ERRORS) return 1;
    SG_ERROR("config error: %s: %d errors; stopping here (fix these and run again)", src, *nerr);
    return 0;
}

/* base_ok: 1 in a file (its `base:` was loaded before this runs), 0 in a
 * text (sg_config_load_string), where `base:` is refused. Every entry is
 * tried: an error is reported and counted in *nerr (bounded, more_errors),
 * and loading goes on with the next entry, so one run lists every mistake
 * of the file. Returns SG_ERR_CONFIG when any was found. */
static sg_status load_mapping(sg_config *cfg, yaml_document_t *doc, yaml_node_t *map,
                              const char *prefix, const char *src, int base_ok, int *nerr) {
    yaml_node_pair_t *p0 = map->data.mapping.pairs.start, *pend = map->data.mapping.pairs.top;
    int before = *nerr;
#define FAILED()                                           \
    do {                                                   \
        if (!more_errors(nerr, src)) return SG_ERR_CONFIG; \
        goto next;                                         \
    } while (0)
    for (yaml_node_pair_t *p = p0; p < pend; p++) {
        yaml_node_t *kn = yaml_document_get_node(doc, p->key);
        yaml_node_t *vn = yaml_document_get_node(doc, p->value);
        if (!kn || !vn) {
            cfg_error(src, &map->start_mark, NULL, "broken mapping entry");
            FAILED();
        }
        if (kn->type != YAML_SCALAR_NODE) {
            cfg_error(src, &kn->start_mark, NULL, "a key must be a plain name, got %s",
                      node_kind(kn));
            FAILED();
        }
        const char *name = (const char *)kn->data.scalar.value;
        char full[512];
        snprintf(full, sizeof full, "%s%s%s", prefix, *prefix ? "." : "", name);
        for (yaml_node_pair_t *q = p0; q < p; q++) {
            yaml_node_t *qk = yaml_document_get_node(doc, q->key);
            if (qk && qk->type == YAML_SCALAR_NODE &&
                !strcmp((const char *)qk->data.scalar.value, name)) {
                cfg_error(src, &kn->start_mark, full,
                          "duplicate key (first given at line %zu): keep one of them",
                          qk->start_mark.line + 1);
                FAILED();
            }
        }
        if (!strcmp(name, "base")) {
            if (*prefix) {
                cfg_error(src, &kn->start_mark, full,
                          "base: belongs at the top level of a "
                          "configuration file (it names the file this one derives from)");
                FAILED();
            }
            if (!base_ok) {
                cfg_error(src, &kn->start_mark, "base",
                          "a configuration given as text (a checkpoint's stored configuration, "
                          "a string) cannot name a base file: base: works only in files "
                          "loaded with --config; merge the base into this text");
                FAILED();
            }
            continue; /* loaded before this mapping (load_chain_file) */
        }
        const sg_config_key *k = sg_config_find_key(full);
        if (k) {
            if (set_from_node(cfg, k, doc, vn, src) != 0) FAILED();
            sg_config_origin_note(cfg, k, src, (int)kn->start_mark.line + 1);
        } else if (sg_config_is_section(full)) {
            if (vn->type == YAML_SCALAR_NODE && is_null_scalar(vn))
                continue; /* "train:" with nothing */
            if (vn->type != YAML_MAPPING_NODE) {
                cfg_error(
                    src, &vn->start_mark, full,
                    "is a section: expects a mapping of its keys (e.g. %s:\\n  key: value), got %s",
                    full, node_kind(vn));
                FAILED();
            }
            if (load_mapping(cfg, doc, vn, full, src, base_ok, nerr) != 0 &&
                *nerr >= SG_CONFIG_MAX_ERRORS)
                return SG_ERR_CONFIG;
        } else {
            unknown_key(src, &kn->start_mark, full);
            FAILED();
        }
    next:;
    }
#undef FAILED
    return *nerr > before ? SG_ERR_CONFIG : SG_OK;
}

static sg_status yaml_syntax_error(const yaml_parser_t *parser, const char *src) {
    const yaml_mark_t *m = parser->problem_mark.line || parser->problem_mark.column
                               ? &parser->problem_mark
                               : &parser->context_mark;
    return cfg_error(src, m, NULL,
                     "malformed YAML: %s%s%s (check indentation, colons and brackets)",
                     parser->problem ? parser->problem : "parse error", parser->context ? " " : "",
                     parser->context ? parser->context : "");
}

/* The limits, checked on libyaml's event stream before its document loader
 * runs: the loader (and the scanner's simple-key bookkeeping) cost time
 * quadratic in the nesting depth, so the depth is counted event by event and
 * parsing stops at the first level too deep, having done work linear in the
 * bytes read so far. */
static sg_status check_yaml_limits(const char *text, size_t len, const char *src) {
    yaml_parser_t parser;
    if (!yaml_parser_initialize(&parser)) {
        SG_ERROR("config error: %s: libyaml could not initialise (out of memory?)", src);
        return SG_ERR_CONFIG;
    }
    yaml_parser_set_input_string(&parser, (const unsigned char *)text, len);
    sg_status rc = SG_OK;
    int depth = 0;
    long nodes = 0;
    for (int done = 0; !done && rc == SG_OK;) {
        yaml_event_t ev;
        if (!yaml_parser_parse(&parser, &ev)) {
            rc = yaml_syntax_error(&parser, src);
            break;
        }
        switch (ev.type) {
        case YAML_MAPPING_START_EVENT:
        case YAML_SEQUENCE_START_EVENT:
            nodes++;
            if (++depth > SG_CONFIG_MAX_DEPTH)
                rc = cfg_error(src, &ev.start_mark, NULL,
                               "YAML nested more than %d levels deep: not a segtrain configuration "
                               "(keys nest 2 levels: section, key)",
                               SG_CONFIG_MAX_DEPTH);
            break;
        case YAML_MAPPING_END_EVENT:
        case YAML_SEQUENCE_END_EVENT: depth--; break;
        case YAML_SCALAR_EVENT:
        case YAML_ALIAS_EVENT: nodes++; break;
        case YAML_STREAM_END_EVENT: done = 1; break;
        default: break;
        }
        if (rc == SG_OK && nodes > SG_CONFIG_MAX_NODES)
            rc = cfg_error(src, &ev.start_mark, NULL,
                           "more than %d YAML values: not a segtrain configuration",
                           SG_CONFIG_MAX_NODES);
        yaml_event_delete(&ev);
    }
    yaml_parser_delete(&parser);
    return rc;
}

/* Parses YAML text into doc; reports libyaml's error with its position. */
static sg_status parse_yaml(const char *text, size_t len, const char *src, yaml_document_t *doc) {
    if (len > SG_CONFIG_MAX_BYTES)
        return cfg_error(src, NULL, NULL,
                         "%zu bytes of YAML: a configuration is at most %u bytes "
                         "(1 MiB)",
                         len, (unsigned)SG_CONFIG_MAX_BYTES);
    if (check_yaml_limits(text, len, src) != SG_OK) return SG_ERR_CONFIG;
    yaml_parser_t parser;
    if (!yaml_parser_initialize(&parser)) {
        SG_ERROR("config error: %s: libyaml could not initialise (out of memory?)", src);
        return SG_ERR_CONFIG;
    }
    yaml_parser_set_input_string(&parser, (const unsigned char *)text, len);
    if (!yaml_parser_load(&parser, doc)) {
        yaml_syntax_error(&parser, src);
        yaml_parser_delete(&parser);
        return SG_ERR_CONFIG;
    }
    /* a second document ("---") is almost certainly a mistake */
    yaml_document_t extra;
    if (yaml_document_get_root_node(doc) && yaml_parser_load(&parser, &extra)) {
        yaml_node_t *r = yaml_document_get_root_node(&extra);
        if (r) {
            cfg_error(src, &r->start_mark, NULL,
                      "a second YAML document: one configuration per file");
            yaml_document_delete(&extra);
            yaml_document_delete(doc);
            yaml_parser_delete(&parser);
            return SG_ERR_CONFIG;
        }
        yaml_document_delete(&extra);
    }
    yaml_parser_delete(&parser);
    return SG_OK;
}

/* Loads a parsed document's top level (a mapping, or nothing). */
static sg_status load_root(sg_config *cfg, yaml_document_t *doc, const char *src, int base_ok) {
    yaml_node_t *root = yaml_document_get_root_node(doc);
    if (!root || (root->type == YAML_SCALAR_NODE && is_null_scalar(root))) return SG_OK;
    if (root->type == YAML_MAPPING_NODE) {
        int nerr = 0;
        return load_mapping(cfg, doc, root, "", src, base_ok, &nerr);
    }
    return cfg_error(src, &root->start_mark, NULL,
                     "the top level must be a mapping of keys and sections (run_dir:, model:, "
                     "train:, ...), got %s",
                     node_kind(root));
}

sg_status sg_config_load_string(sg_config *cfg, const char *yaml, const char *name) {
    yaml_document_t doc;
    if (parse_yaml(yaml, strlen(yaml), name, &doc) != 0) return SG_ERR_CONFIG;
    sg_status rc = load_root(cfg, &doc, name, 0);
    yaml_document_delete(&doc);
    return rc;
}

/* Reads a whole configuration file (at most SG_CONFIG_MAX_BYTES, no NUL
 * bytes) into *out (malloc'ed, NUL-terminated). `shown` names it in errors. */
static sg_status read_text(const char *path, const char *shown, char **out, size_t *out_len) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        SG_ERROR(
            "config error: %s: cannot open the configuration file: %s (check the path given to "
            "--config)",
            shown, strerror(errno));
        return SG_ERR_CONFIG;
    }
    size_t cap = 1 << 16, len = 0;
    char *buf = malloc(cap);
    if (!buf) {
        fclose(f);
        SG_ERROR("config error: %s: out of memory reading the file", shown);
        return SG_ERR_CONFIG;
    }
    for (;;) {
        if (len + 1 >= cap) {
            if (len > SG_CONFIG_MAX_BYTES) {
                SG_ERROR("config error: %s: file larger than %u bytes (1 MiB): not a "
                         "configuration file?",
                         shown, (unsigned)SG_CONFIG_MAX_BYTES);
                free(buf);
                fclose(f);
                return SG_ERR_CONFIG;
            }
            char *nb = realloc(buf, cap * 2);
            if (!nb) {
                free(buf);
                fclose(f);
                SG_ERROR("config error: %s: out of memory reading the file", shown);
                return SG_ERR_CONFIG;
            }
            buf = nb, cap *= 2;
        }
        size_t got = fread(buf + len, 1, cap - 1 - len, f);
        len += got;
        if (got == 0) break;
    }
    int err = ferror(f);
    int e = errno;
    fclose(f);
    if (err) {
        SG_ERROR("config error: %s: cannot read the configuration file: %s (is it a regular file?)",
                 shown, strerror(e));
        free(buf);
        return SG_ERR_CONFIG;
    }
    buf[len] = 0;
    if (strlen(buf) != len) {
        SG_ERROR("config error: %s: contains NUL bytes: not a YAML text file", shown);
        free(buf);
        return SG_ERR_CONFIG;
    }
    *out = buf;
    *out_len = len;
    return SG_OK;
}

/* ---------------------------------------------------------------- base chains */

/* The files being loaded, outermost first: the cycle check compares real
 * paths (symlinks and "../" spellings of one file are one file), messages
 * show the paths as written. */
typedef struct load_chain {
    int n;
    size_t bytes; /* of all files read so far */
    char real[SG_CONFIG_MAX_CHAIN][PATH_MAX];
    char shown[SG_CONFIG_MAX_CHAIN][PATH_MAX];
} load_chain;

/* "a.yaml -> b.yaml -> last" into buf[n] (last may be NULL). */
static const char *chain_text(const load_chain *ch, const char *last, char *buf, size_t n) {
    size_t used = 0;
    buf[0] = 0;
    for (int i = 0; i <= ch->n && used < n; i++) {
        const char *name = i < ch->n ? ch->shown[i] : last;
        if (!name) break;
        int w = snprintf(buf + used, n - used, "%s%s", i ? " -> " : "", name);
        used += w > 0 ? (size_t)w : 0;
    }
    return buf;
}

static sg_status load_chain_file(sg_config *cfg, const char *shown, const char *real,
                                 load_chain *ch);

/* The `base:` value v of file ch->shown[top] (at mark m), resolved against
 * that file's directory, checked and loaded into cfg. */
static sg_status load_base(sg_config *cfg, const yaml_node_t *vn, load_chain *ch) {
    const char *src = ch->shown[ch->n - 1];
    const yaml_mark_t *m = &vn->start_mark;
    if (vn->type != YAML_SCALAR_NODE || is_null_scalar(vn))
        return cfg_error(src, m, "base",
                         "expects one file path (a string, relative to this file's "
                         "directory), got %s",
                         vn->type == YAML_SCALAR_NODE ? "nothing" : node_kind(vn));
    const char *v = (const char *)vn->data.scalar.value;
    if (strlen(v) != vn->data.scalar.length)
        return cfg_error(src, m, "base", "contains a NUL character");
    /* relative to the directory of the file as it was named (not of its
     * symlink target), as a reader of the file expects */
    const char *slash = strrchr(src, '/');
    size_t dl = (v[0] == '/' || !slash) ? 0 : (size_t)(slash - src) + 1;
    size_t need = dl + strlen(v);
    if (need >= SG_STR)
        return cfg_error(src, m, "base", "the path is %zu characters long (at most %d)", need,
                         SG_STR - 1);
    char path[SG_STR], real[PATH_MAX], chain[4 * SG_STR];
    snprintf(path, sizeof path, "%.*s%s", (int)dl, src, v);
    if (ch->n >= SG_CONFIG_MAX_CHAIN)
        return cfg_error(src, m, "base",
                         "more than %d files in one base chain (%s): merge some of them",
                         SG_CONFIG_MAX_CHAIN, chain_text(ch, path, chain, sizeof chain));
    if (!realpath(path, real))
        return cfg_error(src, m, "base",
                         "cannot open the base file %s: %s (a relative path is relative "
                         "to the directory of %s)",
                         path, strerror(errno), src);
    for (int i = 0; i < ch->n; i++)
        if (!strcmp(ch->real[i], real))
            return cfg_error(src, m, "base", "cycle: %s: a file cannot be its own base",
                             chain_text(ch, path, chain, sizeof chain));
    if (load_chain_file(cfg, path, real, ch) != SG_OK) {
        SG_ERROR("config error: %s:%zu:%zu: key 'base': the base file named here did not load "
                 "(the error above)",
                 src, m->line + 1, m->column + 1);
        return SG_ERR_CONFIG;
    }
    return SG_OK;
}

/* 1 when a configuration file is a Python one (an mmsegmentation / mmcv
 * config: a .py name, `_base_ = ...` or `= dict(`): YAML would read it as
 * one long scalar and say only that the top level is not a mapping. */
static int is_python_config(const char *shown, const char *text) {
    size_t n = strlen(shown);
    if (n >= 3 && strcmp(shown + n - 3, ".py") == 0) return 1;
    for (const char *line = text; *line;) { /* lines that are not YAML comments */
        const char *end = strchr(line, '\n');
        size_t len = end ? (size_t)(end - line) : strlen(line);
        const char *p = line + strspn(line, " \t");
        if (*p != '#') {
            const char *eq = memchr(p, '=', len - (size_t)(p - line));
            if (eq && (strncmp(p, "_base_", 6) == 0 || strncmp(eq, "= dict(", 7) == 0 ||
                       strncmp(eq, "=dict(", 6) == 0))
                return 1;
        }
        line = end ? end + 1 : line + len;
    }
    return 0;
}

/* Loads one file of a chain: its base first (if it names one), then its own
 * keys over it. */
static sg_status load_chain_file(sg_config *cfg, const char *shown, const char *real,
                                 load_chain *ch) {
    char *text = NULL, chain[4 * SG_STR];
    size_t len = 0;
    if (read_text(real, shown, &text, &len) != SG_OK) return SG_ERR_CONFIG;
    if (is_python_config(shown, text)) {
        SG_ERROR("config error: %s: this is a Python configuration (mmsegmentation / mmcv "
                 "style), but segtrain configurations are YAML (`key: value`, sections "
                 "`model:`, `data:`, `train:`): write it as YAML; docs/CONFIG.md (section "
                 "Errors) maps mmseg's names to segtrain's keys, and "
                 "configs/cityscapes-deeplabv3-r50v1c.yaml is mmseg's DeepLabV3 R-50-D8 "
                 "Cityscapes recipe in YAML",
                 shown);
        free(text);
        return SG_ERR_CONFIG;
    }
    snprintf(ch->shown[ch->n], PATH_MAX, "%s", shown);
    snprintf(ch->real[ch->n], PATH_MAX, "%s", real);
    ch->n++;
    ch->bytes += len;
    yaml_document_t doc;
    sg_status rc = SG_OK;
    if (ch->bytes > SG_CONFIG_MAX_CHAIN_BYTES) {
        SG_ERROR("config error: %s: the files of the base chain %s total %zu bytes, more than %u "
                 "(1 MiB): not configuration files?",
                 shown, chain_text(ch, NULL, chain, sizeof chain), ch->bytes,
                 (unsigned)SG_CONFIG_MAX_CHAIN_BYTES);
        rc = SG_ERR_CONFIG;
    } else if (parse_yaml(text, len, shown, &doc) != SG_OK) {
        rc = SG_ERR_CONFIG;
    } else {
        /* the base first, wherever `base:` stands in the mapping */
        yaml_node_t *root = yaml_document_get_root_node(&doc);
        if (root && root->type == YAML_MAPPING_NODE) {
            for (yaml_node_pair_t *p = root->data.mapping.pairs.start;
                 p < root->data.mapping.pairs.top; p++) {
                yaml_node_t *kn = yaml_document_get_node(&doc, p->key);
                yaml_node_t *vn = yaml_document_get_node(&doc, p->value);
                if (kn && vn && kn->type == YAML_SCALAR_NODE &&
                    !strcmp((const char *)kn->data.scalar.value, "base")) {
                    rc = load_base(cfg, vn, ch);
                    break; /* a second base: is load_mapping's duplicate-key error */
                }
            }
        }
        /* this file's own keys even when its base failed: their mistakes
         * are reported in the same run */
        sg_status own = load_root(cfg, &doc, shown, 1);
        if (rc == SG_OK) rc = own;
        yaml_document_delete(&doc);
    }
    ch->n--;
    free(text);
    return rc;
}

sg_status sg_config_load_file(sg_config *cfg, const char *path) {
    load_chain *ch = calloc(1, sizeof *ch);
    char *real = malloc(PATH_MAX);
    sg_status rc = SG_ERR_CONFIG;
    if (!ch || !real) {
        SG_ERROR("config error: %s: out of memory", path);
    } else if (!realpath(path, real)) {
        SG_ERROR(
            "config error: %s: cannot open the configuration file: %s (check the path given to "
            "--config)",
            path, strerror(errno));
    } else {
        rc = load_chain_file(cfg, path, real, ch);
    }
    free(real);
    free(ch);
    return rc;
}

sg_status sg_config_set(sg_config *cfg, const char *assignment) {
    char src[1400];
    snprintf(src, sizeof src, "--set %s", assignment);
    const char *eq = strchr(assignment, '=');
    if (!eq || eq == assignment)
        return cfg_error(src, NULL, NULL, "expects KEY=VALUE, e.g. --set train.lr=0.02");
    char key[512];
    size_t kl = (size_t)(eq - assignment);
    if (kl >= sizeof key) return cfg_error(src, NULL, NULL, "key too long");
    memcpy(key, assignment, kl);
    key[kl] = 0;
    const sg_config_key *k = sg_config_find_key(key);
    if (!k) {
        if (!strcmp(key, "base"))
            return cfg_error(src, NULL, NULL,
                             "base: names the file a configuration file derives from "
                             "and can only be given in that file (--config FILE)");
        if (sg_config_is_section(key))
            return cfg_error(src, NULL, key,
                             "is a section: set its keys one by one (--set %s.KEY=VALUE)", key);
        return unknown_key(src, NULL, key);
    }
    const char *value = eq + 1;
    yaml_document_t doc;
    if (parse_yaml(value, strlen(value), src, &doc) != 0) return SG_ERR_CONFIG;
    yaml_node_t *root = yaml_document_get_root_node(&doc);
    sg_status rc;
    if (!root) {
        /* "--set key=" : an empty plain scalar */
        yaml_document_delete(&doc);
        if (!yaml_document_initialize(&doc, NULL, NULL, NULL, 1, 1))
            return cfg_error(src, NULL, k->name, "out of memory");
        int id =
            yaml_document_add_scalar(&doc, NULL, (yaml_char_t *)"", 0, YAML_PLAIN_SCALAR_STYLE);
        root = yaml_document_get_node(&doc, id);
    }
    rc = set_from_node(cfg, k, &doc, root, src);
    if (rc == SG_OK) sg_config_origin_note(cfg, k, NULL, 0);
    yaml_document_delete(&doc);
    return rc;
}

void sg_config_defaults(sg_config *cfg) {
    memset(cfg, 0, sizeof *cfg);
    for (int i = 0; i < sg_config_n_keys(); i++) {
        const sg_config_key *k = sg_config_key_at(i);
        char a[1200];
        snprintf(a, sizeof a, "%s=%s", k->name, k->def);
        SG_CHECK(sg_config_set(cfg, a) == 0,
                 "schema default of %s (%s) does not parse: fix the table in core/config_schema.c",
                 k->name, k->def);
    }
    sg_config_origin_clear(cfg); /* the sets above are the defaults, not --set */
}

/* ---------------------------------------------------------------- validation */

/* A validation error about `key`, naming where that key was set: the file
 * and line (possibly a base file), --set, or the default. Core's rules and
 * the layers' (sg_config_rule) report through it, so all read alike. */
sg_status sg_config_reject(const sg_config *c, const char *key, const char *fmt, ...) {
    char msg[2048], from[SG_STR + 32];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    const sg_config_key *k = sg_config_find_key(key);
    int kind = k ? sg_config_origin_describe(c, sg_config_key_index(k), from, sizeof from)
                 : SG_ORIGIN_DEFAULT;
    if (kind == SG_ORIGIN_FILE || kind == SG_ORIGIN_SET)
        SG_ERROR("config error: %s: key '%s': %s", from, key, msg);
    else
        SG_ERROR("config error: key '%s' (%s value): %s", key,
                 kind == SG_ORIGIN_DEFAULT ? "default" : "unrecorded", msg);
    return SG_ERR_CONFIG;
}

/* Inside sg_config_validate `c` is the configuration: verr("key", ...) keeps
 * its short form while the message names where the key was set. Every rule
 * is checked and each broken one reported (at most SG_CONFIG_MAX_ERRORS),
 * so one run lists all of a file's mistakes; nerr counts them. */
#define verr(...) ((void)(++nerr <= SG_CONFIG_MAX_ERRORS && sg_config_reject(c, __VA_ARGS__)))

sg_status sg_config_validate(const sg_config *c) { return sg_config_validate_with(c, NULL); }

sg_status sg_config_validate_with(const sg_config *c, const sg_config_rule *rules) {
    int nerr = 0;
    const sg_train_cfg *t = &c->train;
    /* paths under run_dir (checkpoints/iter_N.safetensors.tmp, logs/...) are
     * built in SG_STR-sized buffers: leave room for the longest suffix */
    if (strlen(c->run_dir) > SG_STR - 96)
        verr("run_dir",
             "is %zu characters long; at most %d are allowed so that the "
             "checkpoint and log paths under it fit",
             strlen(c->run_dir), SG_STR - 96);
    if ((t->iters > 0) == (t->epochs > 0))
        verr("train.iters",
             "exactly one of train.iters (%d) and train.epochs (%d) must be > 0: "
             "set the other to 0",
             t->iters, t->epochs);
    if (t->iters > 0 && t->warmup_iters > t->iters)
        verr("train.warmup_iters", "%d is more than train.iters (%d)", t->warmup_iters, t->iters);
    if (t->iters > 0 && t->warmup_iters >= t->iters && strcmp(t->warmup, "none") != 0 &&
        strcmp(t->warmup_mode, "sequential") == 0)
        verr("train.warmup_iters",
             "%d warmup steps leave no step of train.iters (%d) for "
             "the schedule under train.warmup_mode sequential",
             t->warmup_iters, t->iters);
    if (t->min_lr > t->lr) verr("train.min_lr", "%g is above train.lr (%g)", t->min_lr, t->lr);
    if (t->ema_decay >= 1)
        verr("train.ema_decay", "%g: must be below 1 (0 = EMA off; e.g. 0.999)", t->ema_decay);
    if (!strcmp(t->lr_schedule, "step") && t->n_lr_steps == 0)
        verr("train.lr_steps", "is empty but train.lr_schedule is step: give the "
                               "milestones in optimizer steps, e.g. [30000, 60000]");
    for (int i = 1; i < t->n_lr_steps; i++)
        if (t->lr_steps[i] <= t->lr_steps[i - 1])
            verr("train.lr_steps",
                 "entry %d (%d) is not above the one before it (%d): "
                 "give increasing milestones",
                 i + 1, t->lr_steps[i], t->lr_steps[i - 1]);
    if (t->nesterov && (t->momentum <= 0 || t->dampening != 0))
        verr("train.nesterov", "needs train.momentum > 0 and train.dampening 0 (as PyTorch's SGD)");
    for (int i = 0; i < 2; i++)
        if (t->betas[i] >= 1)
            verr("train.betas", "beta%d = %g: each beta must be in [0, 1) (torch AdamW)", i + 1,
                 t->betas[i]);
    const sg_model_cfg *m = &c->model;
    const sg_data_cfg *d = &c->data;
    if (d->ignore_index < m->num_classes)
        verr("data.ignore_index", "%d is a class index (model.num_classes is %d): use 255",
             d->ignore_index, m->num_classes);
    if (d->n_class_names != 0 && d->n_class_names != m->num_classes)
        verr("data.class_names",
             "has %d names but model.num_classes is %d: give one per class "
             "or none",
             d->n_class_names, m->num_classes);
    if (d->n_palette != 0 && d->n_palette != 3 * m->num_classes)
        verr("data.palette", "has %d values but needs 3 (r,g,b) per class = %d, or none",
             d->n_palette, 3 * m->num_classes);
    /* the layers' rules (data/formats.c: data.format, data.label_map,
     * data.reduce_zero_label), here where the data section is checked */
    for (const sg_config_rule *r = rules; r && r->check; r++)
        if (r->check(c) != SG_OK) nerr++;
    if (t->n_class_weights != 0) {
        if (t->n_class_weights != m->num_classes)
            verr("train.class_weights",
                 "has %d weights but model.num_classes is %d: give "
                 "one per class, or [] for plain cross-entropy",
                 t->n_class_weights, m->num_classes);
        double wsum = 0;
        int bad = 0;
        for (int i = 0; i < t->n_class_weights; i++) {
            if (!isfinite(t->class_weights[i]) || t->class_weights[i] < 0) {
                bad = 1;
                verr("train.class_weights",
                     "entry %d (class %d) is %g: weights must be "
                     "finite and >= 0",
                     i + 1, i, t->class_weights[i]);
            }
            wsum += t->class_weights[i];
        }
        if (wsum <= 0 && !bad)
            verr("train.class_weights", "are all 0: no pixel would count; give some class "
                                        "a positive weight, or [] for plain cross-entropy");
    }
    if (t->ohem_thresh >= 1)
        verr("train.ohem_thresh",
             "%g: must be below 1 (a probability threshold; 0 = "
             "OHEM off)",
             t->ohem_thresh);
    /* auto is cityscapes for data.format cityscapes (data/formats.c's row) */
    int lm_auto = !strcmp(d->label_map, "auto");
    if ((!strcmp(d->label_map, "cityscapes") || (lm_auto && !strcmp(d->format, "cityscapes"))) &&
        m->num_classes != 19)
        verr("data.label_map",
             "cityscapes maps to 19 classes%s but model.num_classes is %d: set "
             "data.label_map: none or model.num_classes: 19",
             lm_auto ? " (auto: the map of data.format cityscapes)" : "", m->num_classes);
    for (int i = 0; i < 2; i++)
        if (d->crop_size[i] < m->output_stride)
            verr("data.crop_size",
                 "%d is smaller than model.output_stride (%d): the feature map "
                 "would be empty",
                 d->crop_size[i], m->output_stride);
    if (d->scale_range[0] > d->scale_range[1])
        verr("data.scale_range", "min %g is above max %g", d->scale_range[0], d->scale_range[1]);
    if (d->contrast_range[0] > d->contrast_range[1])
        verr("data.contrast_range", "min %g is above max %g", d->contrast_range[0],
             d->contrast_range[1]);
    if (d->saturation_range[0] > d->saturation_range[1])
        verr("data.saturation_range", "min %g is above max %g", d->saturation_range[0],
             d->saturation_range[1]);
    if (!d->root[0]) verr("data.root", "is empty: give the dataset directory");
    if (!d->train_split[0] || !d->val_split[0])
        verr(!d->train_split[0] ? "data.train_split" : "data.val_split", "is empty");
    const sg_eval_cfg *e = &c->eval;
    if ((e->crop_size[0] == 0) != (e->crop_size[1] == 0))
        verr("eval.crop_size", "give both height and width, or 0, 0 for whole images");
    if ((e->stride[0] == 0) != (e->stride[1] == 0))
        verr("eval.stride", "give both values, or 0, 0 for the crop size");
    if (e->stride[0] && !e->crop_size[0])
        verr("eval.stride", "is set but eval.crop_size is 0, 0 (whole images): set a crop size");
    for (int i = 0; i < 2; i++) {
        if (e->crop_size[i] && e->crop_size[i] < m->output_stride)
            verr("eval.crop_size", "%d is smaller than model.output_stride (%d)", e->crop_size[i],
                 m->output_stride);
        if (e->stride[i] > e->crop_size[i])
            verr("eval.stride", "%d is larger than the crop (%d): windows would skip pixels",
                 e->stride[i], e->crop_size[i]);
    }
    if (!c->run_dir[0]) verr("run_dir", "is empty: give a directory (e.g. runs/NAME)");
    if (c->dist.first_bucket_mb > c->dist.bucket_mb)
        verr("dist.first_bucket_mb", "%g is larger than dist.bucket_mb (%g)",
             c->dist.first_bucket_mb, c->dist.bucket_mb);
    if (!strcmp(c->dist.backend, "nccl") && !strcmp(c->device, "cpu"))
        verr("dist.backend", "nccl needs device: cuda (use gloo or auto on the CPU)");
    /* each backend's layout key is its own: one set for the other device
     * would be ignored, so it is refused instead */
    if (!strcmp(c->cpu.layout, "nhwc") && strcmp(c->device, "cpu") != 0)
        verr("cpu.layout",
             "nhwc is the CPU backend's; device %s takes cuda.layout (leave cpu.layout at "
             "auto, set cuda.layout: nhwc)",
             c->device);
    if (!strcmp(c->cuda.layout, "nhwc") && !strcmp(c->device, "cpu"))
        verr("cuda.layout",
             "nhwc is the CUDA backend's; device cpu takes cpu.layout (leave cuda.layout at "
             "auto, set cpu.layout: nhwc)");
    if (c->cuda.graphs && !strcmp(c->device, "cpu"))
        verr("cuda.graphs",
             "true needs device: cuda (the CPU backend runs each op as it is issued and has no "
             "graphs); set cuda.graphs: false");
    return nerr ? SG_ERR_CONFIG : SG_OK;
}
