/* tests/backend/cpu_paths.c - the conformance suite's checks of the CPU
 * convolution path table (see cpu_paths.h). */
#include "tests/backend/cpu_paths.h"

#include <stdio.h>
#include <string.h>

#ifndef TB_HAVE_CPU
#define TB_HAVE_CPU 1
#endif

#if TB_HAVE_CPU
#include "kernels/cpu/conv/conv_paths.h"

#define MAXP 32
static const char *const pass_names[3] = {"fwd", "bd", "bw"};
static const char *const prec_names[3] = {"f32", "bf16", "bf16-emu"};
/* What a row that names no path is for: oneDNN's kernels. */
#define ONEDNN "onednn-wino onednn-cl onednn-plain onednn-blocked"

static struct {
    sg_backend *be; /* the configuration running, if a CPU one */
    const char *config;
    int forced;           /* it sets SG_CPU_CONV: names are not checked */
    long ran[MAXP][3][3]; /* [row][pass][precision it ran in] */
    int seen_prec[3];     /* precisions some configuration ran */
    unsigned isa_ok;      /* rows whose isa column holds here */
} g;

static int is_cpu(sg_backend *be) {
    sg_backend_info bi;
    sg_backend_get_info(be, &bi);
    return strcmp(bi.name, "cpu") == 0;
}

static int popcount(uint32_t m) {
    int n = 0;
    for (; m; m &= m - 1) n++;
    return n;
}

static int declared(int a, int b) {
    sg_cpu_conv_path_info ia, ib;
    sg_cpu_conv_path_get(a, &ia);
    sg_cpu_conv_path_get(b, &ib);
    for (int i = 0; sg_cpu_conv_path_overlaps[i][0]; i++)
        if ((!strcmp(sg_cpu_conv_path_overlaps[i][0], ia.name) &&
             !strcmp(sg_cpu_conv_path_overlaps[i][1], ib.name)) ||
            (!strcmp(sg_cpu_conv_path_overlaps[i][0], ib.name) &&
             !strcmp(sg_cpu_conv_path_overlaps[i][1], ia.name)))
            return 1;
    return 0;
}

static int conv_row(const tb_case *c) {
    return !strncmp(c->op, "conv_", 5) || !strcmp(c->op, "grad_conv") ||
           !strcmp(c->op, "mem_written");
}

/* The rules check of one configuration (see cpu_paths.h). */
static int check_rules(const tb_case *table, int n) {
    int np = sg_cpu_conv_path_count(), bad = 0, prec = sg_cpu_conv_precision(g.be);
    uint32_t fallback = 0, layout_rows = 0;
    for (int i = 0; i < np; i++) {
        sg_cpu_conv_path_info in;
        sg_cpu_conv_path_get(i, &in);
        if (in.fallback) fallback |= 1u << i;
        if (in.fallback && !strncmp(in.name, "onednn-", 7)) layout_rows |= 1u << i;
    }
    for (int r = 0; r < n; r++) {
        if (!conv_row(&table[r]) || table[r].conv.n == 0) continue;
        sg_conv_desc d = table[r].conv;
        if (sg_conv_desc_init(&d) != 0) continue;
        for (int pass = 0; pass < 3; pass++) {
            uint32_t m = sg_cpu_conv_paths_for(g.be, &d, pass);
            uint32_t own = m & ~fallback;
            for (int a = 0; a < np; a++)
                for (int b = a + 1; b < np; b++)
                    if ((own >> a & 1) && (own >> b & 1) && !declared(a, b)) {
                        sg_cpu_conv_path_info ia, ib;
                        sg_cpu_conv_path_get(a, &ia);
                        sg_cpu_conv_path_get(b, &ib);
                        printf("  FAIL paths [%s] row %d %s: rows %s and %s both take it (make "
                               "their rules disjoint, or declare the pair in "
                               "sg_cpu_conv_path_overlaps)\n",
                               g.config, r, pass_names[pass], ia.name, ib.name);
                        bad++;
                    }
            int layouts = popcount(m & layout_rows);
            if ((prec == SG_CPU_CONV_F32 && layouts != 1) || layouts > 1) {
                printf("  FAIL paths [%s] row %d %s: %d of oneDNN's layout rows take it (the "
                       "layout rule must pick exactly one)\n",
                       g.config, r, pass_names[pass], layouts);
                bad++;
            }
        }
    }
    return bad;
}

int tb_paths_config(const char *config, sg_backend *be, int forced, const tb_case *table, int n) {
    g.be = is_cpu(be) ? be : NULL;
    if (!g.be) return 0;
    g.config = config;
    g.forced = forced;
    int prec = sg_cpu_conv_precision(be);
    g.seen_prec[prec] = 1;
    for (int i = 0; i < sg_cpu_conv_path_count() && i < MAXP; i++)
        if (sg_cpu_conv_path_flags(be, i) & SG_CPU_CONV_ISA_OK) g.isa_ok |= 1u << i;
    sg_cpu_conv_path_forget(be);
    return forced ? 0 : check_rules(table, n);
}

/* Whether row i's columns admit pass of precision prec on this
 * configuration's activation layout and processor. */
static int admits(int i, int pass, int prec) {
    sg_cpu_conv_path_info in;
    sg_cpu_conv_path_get(i, &in);
    return (in.passes >> pass & 1) && (in.precisions >> prec & 1) &&
           (in.layouts >> g.be->layout & 1) && (g.isa_ok >> i & 1);
}

/* The names check of one pass that ran row ran in precision prec. */
static int check_names(tb_ctx *t, const tb_case *c, int row, int pass, int ran, int prec) {
    uint32_t want = 0;
    char tok[64];
    const char *spec = c->path ? c->path : ONEDNN;
    for (const char *p = spec; *p;) {
        while (*p == ' ') p++;
        size_t len = strcspn(p, " ");
        if (!len) break;
        snprintf(tok, sizeof tok, "%.*s", (int)len, p);
        p += len;
        const char *name = tok, *colon = strchr(tok, ':');
        if (colon) {
            name = colon + 1;
            if (strncmp(tok, pass_names[pass], (size_t)(colon - tok)) ||
                strlen(pass_names[pass]) != (size_t)(colon - tok))
                continue;
        }
        int i = sg_cpu_conv_path_find(name);
        if (i < 0) {
            printf("  FAIL paths row %d: names '%s', which is no row of the CPU path table\n", row,
                   name);
            return 1;
        }
        if (admits(i, pass, prec)) want |= 1u << i;
    }
    if (!want || (want >> ran & 1)) return 0;
    sg_cpu_conv_path_info in;
    sg_cpu_conv_path_get(ran, &in);
    printf("  FAIL %s [%s] row %d %s: %s ran on %s, not one of the paths the row names "
           "('%s'%s)\n",
           c->op, t->config, row, t->desc, pass_names[pass], in.name, spec,
           c->path ? "" : ": a row that names none is for oneDNN");
    return 1;
}

int tb_paths_case(tb_ctx *t, const tb_case *c, int row) {
    if (!g.be) return 0;
    int prec = sg_cpu_conv_precision(g.be), bad = 0;
    for (int pass = 0; pass < 3; pass++) {
        int inner, ran = sg_cpu_conv_path_ran(g.be, pass, &inner);
        if (ran < 0) continue;
        /* the row that ran, in the precision it ran in; under the emulation
         * also the float32 row inside it, which the names are about */
        int rp = prec == SG_CPU_CONV_BF16_EMU ? SG_CPU_CONV_BF16_EMU : prec;
        g.ran[ran][pass][rp]++;
        int name_row = ran, name_prec = prec;
        if (inner >= 0) {
            g.ran[inner][pass][SG_CPU_CONV_F32]++;
            name_row = inner, name_prec = SG_CPU_CONV_F32;
        }
        if (!g.forced) bad |= check_names(t, c, row, pass, name_row, name_prec);
    }
    sg_cpu_conv_path_forget(g.be);
    return bad;
}

/* Appends to buf the rows with a cell this processor lacks: "name" when
 * every cell of the row is such, else "name (precision, ...)". */
static void skipped_names(char *buf, size_t cap, const int skip[MAXP][3]) {
    for (int i = 0; i < sg_cpu_conv_path_count() && i < MAXP; i++) {
        int any = skip[i][0] | skip[i][1] | skip[i][2];
        if (!any) continue;
        sg_cpu_conv_path_info in;
        sg_cpu_conv_path_get(i, &in);
        char precs[48] = "";
        int all = 1;
        for (int p = 0; p < 3; p++) {
            int cols = (in.precisions >> p & 1) && g.seen_prec[p];
            if (cols && !skip[i][p]) all = 0;
            if (skip[i][p])
                snprintf(precs + strlen(precs), sizeof precs - strlen(precs), "%s%s",
                         precs[0] ? ", " : "", prec_names[p]);
        }
        size_t n = strlen(buf);
        snprintf(buf + n, cap - n, "%s%s%s%s%s", n ? ", " : "", in.name, all ? "" : " (",
                 all ? "" : precs, all ? "" : ")");
    }
}

int tb_paths_report(char *skipped, size_t cap) {
    int np = sg_cpu_conv_path_count(), missing = 0;
    int skip[MAXP][3] = {{0}};
    skipped[0] = 0;
    if (!g.seen_prec[0] && !g.seen_prec[1] && !g.seen_prec[2]) return 0;
    printf("CPU convolution paths: passes run per precision (fwd bd bw; '-' not in the row's "
           "columns, 'skip' the processor lacks what its rule needs)\n");
    printf("  %-16s %-18s %-18s %-18s\n", "path", prec_names[0], prec_names[1], prec_names[2]);
    for (int i = 0; i < np && i < MAXP; i++) {
        sg_cpu_conv_path_info in;
        sg_cpu_conv_path_get(i, &in);
        char cells[3][64];
        for (int p = 0; p < 3; p++) {
            cells[p][0] = 0;
            for (int pass = 0; pass < 3; pass++) {
                long n = g.ran[i][pass][p];
                int in_cols = (in.passes >> pass & 1) && (in.precisions >> p & 1);
                int avail = in_cols && (g.isa_ok >> i & 1) && g.seen_prec[p];
                char cell[16];
                if (n) {
                    snprintf(cell, sizeof cell, "%ld", n);
                } else if (!in_cols) {
                    snprintf(cell, sizeof cell, "-");
                } else if (!avail) {
                    snprintf(cell, sizeof cell, "skip");
                    skip[i][p] = 1;
                } else {
                    snprintf(cell, sizeof cell, "MISSING");
                    missing++;
                    printf("  FAIL paths: %s %s %s: available on this processor, run by no "
                           "case (a row whose geometry it takes is missing, or its rule "
                           "changed)\n",
                           in.name, pass_names[pass], prec_names[p]);
                }
                snprintf(cells[p] + strlen(cells[p]), sizeof cells[p] - strlen(cells[p]), "%s%s",
                         pass ? " " : "", cell);
            }
        }
        printf("  %-16s %-18s %-18s %-18s\n", in.name, cells[0], cells[1], cells[2]);
    }
    skipped_names(skipped, cap, skip);
    return missing;
}

#else /* no CPU backend in this build */

int tb_paths_config(const char *config, sg_backend *be, int forced, const tb_case *table, int n) {
    (void)config, (void)be, (void)forced, (void)table, (void)n;
    return 0;
}
int tb_paths_case(tb_ctx *t, const tb_case *c, int row) {
    (void)t, (void)c, (void)row;
    return 0;
}
int tb_paths_report(char *skipped, size_t cap) {
    (void)cap;
    skipped[0] = 0;
    return 0;
}

#endif
