/* cmd/plot.c - `segtrain plot RUN_DIR [RUN_DIR...] [--out FILE.png]`: one
 * PNG picture of one or several runs, drawn with Cairo.
 *
 * Panels: the training loss (raw, and smoothed as TensorBoard does: an
 * exponential moving average, debiased, weight --smooth), the learning rate,
 * validation mIoU and leftover-pass mIoU against the iteration (one x range
 * for all three, so they line up), a summary of each run, and a bar chart of
 * the per-class IoU of each run's last evaluation with the class names.
 * Several runs share the panels, one colour per run. Data comes from
 * metrics.jsonl and eval/iter_<N>.json (cmd/plot_data.h). Exit 0, 1 when a
 * run cannot be read or the PNG cannot be written, 2 on usage errors.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmd/commands.h"
#include "cmd/plot_data.h"
#include "core/log.h"
#include "core/outdir.h"

#if SG_HAVE_CAIRO
#include <cairo.h>

#define FIG_W 1400
#define FIG_H 1160
#define FONT "DejaVu Sans"

typedef struct {
    double x, y, w, h;
} box; /* the plotting area of a panel */
typedef struct {
    double x0, x1, y0, y1;
} span; /* data coordinates shown */

static const double g_colors[PL_MAX_RUNS][3] = {
    {0.12, 0.47, 0.71}, {1.00, 0.50, 0.05}, {0.17, 0.63, 0.17}, {0.84, 0.15, 0.16},
    {0.58, 0.40, 0.74}, {0.55, 0.34, 0.29}, {0.89, 0.47, 0.76}, {0.50, 0.50, 0.50}};

/* ---------------- scales and ticks ---------------- */

/* A "nice" tick step (1, 2 or 5 x 10^k) giving at most about max_ticks. */
static double nice_step(double range, int max_ticks) {
    if (!(range > 0)) return 1;
    double raw = range / max_ticks, p = pow(10, floor(log10(raw))), f = raw / p;
    return (f <= 1 ? 1 : f <= 2 ? 2 : f <= 5 ? 5 : 10) * p;
}

/* Extends [lo, hi] to whole tick steps. */
static void nice_range(double *lo, double *hi, int max_ticks) {
    if (!(*hi > *lo)) *hi = *lo + 1;
    double s = nice_step(*hi - *lo, max_ticks);
    *lo = floor(*lo / s + 1e-9) * s;
    *hi = ceil(*hi / s - 1e-9) * s;
}

static void fmt_tick(char *buf, size_t n, double v, double step) {
    if (fabs(v) < step * 1e-6) v = 0;
    if (step < 1e-3 && v != 0) {
        snprintf(buf, n, "%.1e", v);
    } else {
        int dec = step >= 1 ? 0 : (int)ceil(-log10(step) - 1e-9);
        snprintf(buf, n, "%.*f", dec, v);
    }
}

static double px_x(const box *b, const span *s, double x) {
    return b->x + (x - s->x0) / (s->x1 - s->x0) * b->w;
}
static double px_y(const box *b, const span *s, double y) {
    return b->y + b->h - (y - s->y0) / (s->y1 - s->y0) * b->h;
}

/* ---------------- text ---------------- */

static void font(cairo_t *cr, double size, int bold) {
    cairo_select_font_face(cr, FONT, CAIRO_FONT_SLANT_NORMAL,
                           bold ? CAIRO_FONT_WEIGHT_BOLD : CAIRO_FONT_WEIGHT_NORMAL);
    cairo_set_font_size(cr, size);
}

/* Text with its anchor at (x, y): ax 0 left, 0.5 centre, 1 right; ay 0 top,
 * 0.5 middle, 1 baseline. */
static void text_at(cairo_t *cr, double x, double y, double ax, double ay, const char *s) {
    cairo_text_extents_t e;
    cairo_font_extents_t fe;
    cairo_text_extents(cr, s, &e);
    cairo_font_extents(cr, &fe);
    double by = y + (ay == 1 ? 0 : ay == 0 ? fe.ascent : fe.ascent / 2 - fe.descent / 2 + 1);
    cairo_move_to(cr, x - ax * e.x_advance, by);
    cairo_show_text(cr, s);
}

static void rgb(cairo_t *cr, const double c[3], double a) {
    cairo_set_source_rgba(cr, c[0], c[1], c[2], a);
}

/* ---------------- panels ---------------- */

/* Frame, grid, ticks and labels of a line panel. */
static void axes(cairo_t *cr, const box *b, const span *s, const char *title, const char *xlabel,
                 const char *ylabel) {
    double xs = nice_step(s->x1 - s->x0, 7), ys = nice_step(s->y1 - s->y0, 6);
    char t[64];
    font(cr, 12, 0);
    cairo_set_line_width(cr, 1);
    for (double v = ceil(s->y0 / ys - 1e-9) * ys; v <= s->y1 + ys * 1e-6; v += ys) {
        double y = px_y(b, s, v);
        cairo_set_source_rgb(cr, 0.9, 0.9, 0.9);
        cairo_move_to(cr, b->x, y);
        cairo_line_to(cr, b->x + b->w, y);
        cairo_stroke(cr);
        cairo_set_source_rgb(cr, 0.2, 0.2, 0.2);
        fmt_tick(t, sizeof t, v, ys);
        text_at(cr, b->x - 6, y, 1, 0.5, t);
    }
    for (double v = ceil(s->x0 / xs - 1e-9) * xs; v <= s->x1 + xs * 1e-6; v += xs) {
        double x = px_x(b, s, v);
        cairo_set_source_rgb(cr, 0.9, 0.9, 0.9);
        cairo_move_to(cr, x, b->y);
        cairo_line_to(cr, x, b->y + b->h);
        cairo_stroke(cr);
        cairo_set_source_rgb(cr, 0.2, 0.2, 0.2);
        fmt_tick(t, sizeof t, v, xs);
        text_at(cr, x, b->y + b->h + 5, 0.5, 0, t);
    }
    cairo_set_source_rgb(cr, 0.2, 0.2, 0.2);
    cairo_rectangle(cr, b->x, b->y, b->w, b->h);
    cairo_stroke(cr);
    font(cr, 13, 0);
    text_at(cr, b->x + b->w / 2, b->y + b->h + 24, 0.5, 0, xlabel);
    cairo_save(cr);
    cairo_translate(cr, b->x - 62, b->y + b->h / 2);
    cairo_rotate(cr, -M_PI / 2);
    text_at(cr, 0, 0, 0.5, 0.5, ylabel);
    cairo_restore(cr);
    font(cr, 15, 1);
    text_at(cr, b->x, b->y - 10, 0, 1, title);
}

static void no_data(cairo_t *cr, const box *b, const char *msg) {
    font(cr, 13, 0);
    cairo_set_source_rgb(cr, 0.45, 0.45, 0.45);
    text_at(cr, b->x + b->w / 2, b->y + b->h / 2, 0.5, 0.5, msg);
}

/* A polyline through the finite points (a NaN breaks the line); markers
 * when there are few points. */
static void line(cairo_t *cr, const box *b, const span *s, const double *x, const double *y, int n,
                 const double c[3], double alpha, double width, int dashed, int markers) {
    cairo_save(cr);
    cairo_rectangle(cr, b->x, b->y, b->w, b->h);
    cairo_clip(cr);
    rgb(cr, c, alpha);
    cairo_set_line_width(cr, width);
    cairo_set_line_join(cr, CAIRO_LINE_JOIN_ROUND);
    double d[2] = {7, 4};
    cairo_set_dash(cr, d, dashed ? 2 : 0, 0);
    int pen = 0;
    for (int i = 0; i < n; i++) {
        if (!isfinite(y[i])) {
            pen = 0;
            continue;
        }
        double px = px_x(b, s, x[i]), py = px_y(b, s, y[i]);
        if (pen) cairo_line_to(cr, px, py);
        else cairo_move_to(cr, px, py);
        pen = 1;
    }
    cairo_stroke(cr);
    cairo_set_dash(cr, NULL, 0, 0);
    if (markers)
        for (int i = 0; i < n; i++) {
            if (!isfinite(y[i])) continue;
            cairo_arc(cr, px_x(b, s, x[i]), px_y(b, s, y[i]), 3.2, 0, 2 * M_PI);
            cairo_fill(cr);
        }
    cairo_restore(cr);
}

typedef struct {
    const char *label;
    const double *color;
    double alpha, width;
    int dashed;
} legend_item;

/* A legend box in the panel's top-right corner (top-left: left != 0). */
static void legend_at(cairo_t *cr, const box *b, const legend_item *it, int n, int left) {
    if (n == 0) return;
    font(cr, 12, 0);
    double wmax = 0;
    for (int i = 0; i < n; i++) {
        cairo_text_extents_t e;
        cairo_text_extents(cr, it[i].label, &e);
        if (e.x_advance > wmax) wmax = e.x_advance;
    }
    double lw = wmax + 48, lh = 18.0 * n + 8, y = b->y + 8;
    double x = left ? b->x + 8 : b->x + b->w - lw - 8;
    cairo_set_source_rgba(cr, 1, 1, 1, 0.85);
    cairo_rectangle(cr, x, y, lw, lh);
    cairo_fill_preserve(cr);
    cairo_set_source_rgb(cr, 0.75, 0.75, 0.75);
    cairo_set_line_width(cr, 1);
    cairo_stroke(cr);
    for (int i = 0; i < n; i++) {
        double yy = y + 13 + 18.0 * i;
        rgb(cr, it[i].color, it[i].alpha);
        cairo_set_line_width(cr, it[i].width);
        double d[2] = {7, 4};
        cairo_set_dash(cr, d, it[i].dashed ? 2 : 0, 0);
        cairo_move_to(cr, x + 6, yy);
        cairo_line_to(cr, x + 36, yy);
        cairo_stroke(cr);
        cairo_set_dash(cr, NULL, 0, 0);
        cairo_set_source_rgb(cr, 0.15, 0.15, 0.15);
        text_at(cr, x + 42, yy, 0, 0.5, it[i].label);
    }
}

static void legend(cairo_t *cr, const box *b, const legend_item *it, int n) {
    legend_at(cr, b, it, n, 0);
}

/* Largest finite y over the series (or -inf). */
static double ymax_of(const pl_series *s, double scale) {
    double m = -INFINITY;
    for (int i = 0; i < s->n; i++)
        if (isfinite(s->y[i]) && s->y[i] * scale > m) m = s->y[i] * scale;
    return m;
}

/* TensorBoard's smoothing: EMA with weight w, debiased for the start. */
static void smooth(const pl_series *s, double w, double *out) {
    double last = 0, num = 0;
    for (int i = 0; i < s->n; i++) {
        if (!isfinite(s->y[i])) {
            out[i] = NAN;
            continue;
        }
        last = last * w + (1 - w) * s->y[i];
        num++;
        out[i] = last / (1 - pow(w, num));
    }
}

/* ---------------- the figure ---------------- */

typedef struct {
    pl_run *runs;
    int n;
    double smooth_w;
    double xmax;
} fig;

static void panel_loss(cairo_t *cr, const fig *F, const box *b) {
    double ymax = -INFINITY;
    for (int r = 0; r < F->n; r++) ymax = fmax(ymax, ymax_of(&F->runs[r].loss, 1));
    span s = {0, F->xmax, 0, isfinite(ymax) ? ymax : 1};
    nice_range(&s.y0, &s.y1, 6);
    char title[96];
    snprintf(title, sizeof title, "training loss (smoothed: EMA weight %.2f)", F->smooth_w);
    axes(cr, b, &s, title, "iteration", "loss");
    if (!isfinite(ymax)) {
        no_data(cr, b, "no training line in metrics.jsonl yet");
        return;
    }
    legend_item it[2 * PL_MAX_RUNS];
    char labels[2 * PL_MAX_RUNS][160];
    int k = 0;
    for (int r = 0; r < F->n; r++) {
        const pl_series *ls = &F->runs[r].loss;
        double *sm = malloc((size_t)(ls->n > 0 ? ls->n : 1) * sizeof *sm);
        SG_CHECK(sm != NULL, "out of host memory");
        smooth(ls, F->smooth_w, sm);
        line(cr, b, &s, ls->x, ls->y, ls->n, g_colors[r], 0.35, 1.2, 0, 0);
        line(cr, b, &s, ls->x, sm, ls->n, g_colors[r], 1, 2.4, 0, 0);
        free(sm);
        snprintf(labels[k], sizeof labels[k], "%s%sraw", F->n > 1 ? F->runs[r].name : "",
                 F->n > 1 ? " " : "");
        it[k] = (legend_item){labels[k], g_colors[r], 0.35, 1.2, 0};
        k++;
        snprintf(labels[k], sizeof labels[k], "%s%ssmoothed", F->n > 1 ? F->runs[r].name : "",
                 F->n > 1 ? " " : "");
        it[k] = (legend_item){labels[k], g_colors[r], 1, 2.4, 0};
        k++;
    }
    legend(cr, b, it, k);
}

static void panel_lr(cairo_t *cr, const fig *F, const box *b) {
    double ymax = -INFINITY;
    for (int r = 0; r < F->n; r++) ymax = fmax(ymax, ymax_of(&F->runs[r].lr, 1));
    span s = {0, F->xmax, 0, isfinite(ymax) && ymax > 0 ? ymax : 1};
    nice_range(&s.y0, &s.y1, 6);
    axes(cr, b, &s, "learning rate", "iteration", "lr");
    if (!isfinite(ymax)) {
        no_data(cr, b, "no training line in metrics.jsonl yet");
        return;
    }
    legend_item it[PL_MAX_RUNS];
    for (int r = 0; r < F->n; r++) {
        const pl_series *ls = &F->runs[r].lr;
        line(cr, b, &s, ls->x, ls->y, ls->n, g_colors[r], 1, 2, 0, 0);
        it[r] = (legend_item){F->runs[r].name, g_colors[r], 1, 2, 0};
    }
    legend(cr, b, it, F->n > 1 ? F->n : 0);
}

static void panel_miou(cairo_t *cr, const fig *F, const box *b) {
    double ymax = -INFINITY;
    for (int r = 0; r < F->n; r++) {
        ymax = fmax(ymax, ymax_of(&F->runs[r].val_miou, 100));
        ymax = fmax(ymax, ymax_of(&F->runs[r].leftover_miou, 100));
    }
    span s = {0, F->xmax, 0, isfinite(ymax) ? fmin(100, fmax(ymax * 1.1, 1)) : 100};
    nice_range(&s.y0, &s.y1, 6);
    axes(cr, b, &s, "mIoU: validation and leftover pass", "iteration", "mIoU (%)");
    if (!isfinite(ymax)) {
        no_data(cr, b, "no evaluation in metrics.jsonl yet");
        return;
    }
    legend_item it[2 * PL_MAX_RUNS];
    char labels[2 * PL_MAX_RUNS][160];
    int k = 0;
    for (int r = 0; r < F->n; r++) {
        const pl_run *R = &F->runs[r];
        const char *pre = F->n > 1 ? R->name : "", *sp = F->n > 1 ? " " : "";
        const pl_series *ss[2] = {&R->val_miou, &R->leftover_miou};
        for (int q = 0; q < 2; q++) {
            if (ss[q]->n == 0) continue;
            double *y = malloc((size_t)ss[q]->n * sizeof *y);
            SG_CHECK(y != NULL, "out of host memory");
            for (int i = 0; i < ss[q]->n; i++) y[i] = 100 * ss[q]->y[i];
            /* the leftover pass: dashed, or thin and light when there are
             * so many epochs that dashes would be noise */
            int few = ss[q]->n <= 60, dashed = q && few;
            double alpha = q ? (few ? 0.6 : 0.45) : 1, width = q ? (few ? 1.5 : 1.0) : 2.4;
            line(cr, b, &s, ss[q]->x, y, ss[q]->n, g_colors[r], alpha, width, dashed, few);
            free(y);
            snprintf(labels[k], sizeof labels[k], "%s%s%s", pre, sp,
                     q ? "leftover pass (train samples)" : "validation");
            it[k] = (legend_item){labels[k], g_colors[r], alpha, width, dashed};
            k++;
        }
    }
    /* top left: mIoU curves start low and rise to the right */
    legend_at(cr, b, it, k, 1);
}

static double last_finite(const pl_series *s, double *x) {
    for (int i = s->n - 1; i >= 0; i--)
        if (isfinite(s->y[i])) {
            if (x) *x = s->x[i];
            return s->y[i];
        }
    return NAN;
}

static void panel_summary(cairo_t *cr, const fig *F, const box *b) {
    font(cr, 15, 1);
    cairo_set_source_rgb(cr, 0.1, 0.1, 0.1);
    text_at(cr, b->x, b->y - 10, 0, 1, "runs");
    double y = b->y + 4;
    for (int r = 0; r < F->n && y < b->y + b->h - 20; r++) {
        const pl_run *R = &F->runs[r];
        rgb(cr, g_colors[r], 1);
        cairo_rectangle(cr, b->x, y + 3, 12, 12);
        cairo_fill(cr);
        cairo_set_source_rgb(cr, 0.1, 0.1, 0.1);
        font(cr, 13, 1);
        char dir[160];
        snprintf(dir, sizeof dir, "%.150s", R->dir);
        text_at(cr, b->x + 20, y, 0, 0, dir);
        font(cr, 12, 0);
        char t[256];
        double it = 0, loss = last_finite(&R->loss, &it);
        if (isfinite(loss))
            snprintf(t, sizeof t, "iteration %.0f: loss %.4f, lr %.3g", it, loss,
                     last_finite(&R->lr, NULL));
        else snprintf(t, sizeof t, "no training line yet");
        text_at(cr, b->x + 20, y + 20, 0, 0, t);
        double vit = 0, v = last_finite(&R->val_miou, &vit), best = -1, bit = 0;
        for (int i = 0; i < R->val_miou.n; i++)
            if (isfinite(R->val_miou.y[i]) && R->val_miou.y[i] > best) {
                best = R->val_miou.y[i];
                bit = R->val_miou.x[i];
            }
        if (isfinite(v))
            snprintf(t, sizeof t, "validation mIoU %.2f%% at iteration %.0f (best %.2f%% at %.0f)",
                     100 * v, vit, 100 * best, bit);
        else snprintf(t, sizeof t, "no validation yet");
        text_at(cr, b->x + 20, y + 38, 0, 0, t);
        double lit = 0, l = last_finite(&R->leftover_miou, &lit);
        if (isfinite(l))
            snprintf(t, sizeof t, "leftover-pass mIoU %.2f%% at iteration %.0f (%d passes)",
                     100 * l, lit, R->leftover_miou.n);
        else snprintf(t, sizeof t, "no leftover pass logged");
        text_at(cr, b->x + 20, y + 56, 0, 0, t);
        y += 84;
    }
}

static void panel_bars(cairo_t *cr, const fig *F, const box *b) {
    const pl_run *ref = NULL;
    for (int r = 0; r < F->n && !ref; r++)
        if (F->runs[r].n_classes > 0) ref = &F->runs[r];
    span s = {0, 1, 0, 100};
    font(cr, 15, 1);
    cairo_set_source_rgb(cr, 0.1, 0.1, 0.1);
    char title[256];
    if (F->n == 1 && ref)
        snprintf(title, sizeof title,
                 "per-class IoU at iteration %lld (last evaluation, mIoU %.2f%%)",
                 (long long)ref->eval_iter, 100 * ref->eval_miou);
    else snprintf(title, sizeof title, "per-class IoU of each run's last evaluation");
    text_at(cr, b->x, b->y - 10, 0, 1, title);
    /* y axis */
    font(cr, 12, 0);
    cairo_set_line_width(cr, 1);
    char t[32];
    for (double v = 0; v <= 100; v += 20) {
        double y = px_y(b, &s, v);
        cairo_set_source_rgb(cr, 0.9, 0.9, 0.9);
        cairo_move_to(cr, b->x, y);
        cairo_line_to(cr, b->x + b->w, y);
        cairo_stroke(cr);
        cairo_set_source_rgb(cr, 0.2, 0.2, 0.2);
        snprintf(t, sizeof t, "%.0f", v);
        text_at(cr, b->x - 6, y, 1, 0.5, t);
    }
    cairo_save(cr);
    font(cr, 13, 0);
    cairo_translate(cr, b->x - 62, b->y + b->h / 2);
    cairo_rotate(cr, -M_PI / 2);
    text_at(cr, 0, 0, 0.5, 0.5, "IoU (%)");
    cairo_restore(cr);
    cairo_set_source_rgb(cr, 0.2, 0.2, 0.2);
    cairo_rectangle(cr, b->x, b->y, b->w, b->h);
    cairo_stroke(cr);
    if (!ref) {
        no_data(cr, b, "no evaluation report (eval/iter_<N>.json) yet");
        return;
    }
    int C = ref->n_classes;
    double slot = b->w / C, bw = slot * 0.8 / F->n;
    for (int c = 0; c < C; c++) {
        double x0 = b->x + slot * c + slot * 0.1;
        for (int r = 0; r < F->n; r++) {
            const pl_run *R = &F->runs[r];
            double v = NAN;
            for (int k = 0; k < R->n_classes; k++) /* runs may list classes differently */
                if (!strcmp(R->classes[k], ref->classes[c])) v = 100 * R->iou[k];
            double x = x0 + bw * r;
            if (!isfinite(v)) {
                font(cr, 10, 0);
                cairo_set_source_rgb(cr, 0.5, 0.5, 0.5);
                text_at(cr, x + bw / 2, b->y + b->h - 4, 0.5, 1, "n/a");
                continue;
            }
            double y = px_y(b, &s, fmax(0, fmin(100, v)));
            rgb(cr, g_colors[r], 0.85);
            cairo_rectangle(cr, x, y, bw, b->y + b->h - y);
            cairo_fill(cr);
            if (F->n == 1 && bw >= 28) {
                font(cr, 11, 0);
                cairo_set_source_rgb(cr, 0.15, 0.15, 0.15);
                snprintf(t, sizeof t, "%.1f", v);
                text_at(cr, x + bw / 2, y - 3, 0.5, 1, t);
            }
        }
        /* class name, rotated, ending under the slot's centre */
        font(cr, 12, 0);
        cairo_set_source_rgb(cr, 0.15, 0.15, 0.15);
        cairo_text_extents_t e;
        cairo_text_extents(cr, ref->classes[c], &e);
        cairo_save(cr);
        cairo_translate(cr, b->x + slot * (c + 0.5), b->y + b->h + 8);
        cairo_rotate(cr, -M_PI / 4);
        cairo_move_to(cr, -e.x_advance, e.height / 2);
        cairo_show_text(cr, ref->classes[c]);
        cairo_restore(cr);
    }
    if (F->n > 1) {
        legend_item it[PL_MAX_RUNS];
        char labels[PL_MAX_RUNS][200];
        for (int r = 0; r < F->n; r++) {
            const pl_run *R = &F->runs[r];
            if (R->eval_iter >= 0)
                snprintf(labels[r], sizeof labels[r], "%s (iteration %lld, mIoU %.2f%%)", R->name,
                         (long long)R->eval_iter, 100 * R->eval_miou);
            else snprintf(labels[r], sizeof labels[r], "%s (no evaluation yet)", R->name);
            it[r] = (legend_item){labels[r], g_colors[r], 0.85, 8, 0};
        }
        legend(cr, b, it, F->n);
    }
}

static sg_status draw(const fig *F, const char *out) {
    cairo_surface_t *sf = cairo_image_surface_create(CAIRO_FORMAT_RGB24, FIG_W, FIG_H);
    cairo_t *cr = cairo_create(sf);
    cairo_set_source_rgb(cr, 1, 1, 1);
    cairo_paint(cr);
    /* title */
    char title[512] = "segtrain: ";
    for (int r = 0; r < F->n; r++) {
        size_t l = strlen(title);
        snprintf(title + l, sizeof title - l, "%s%.120s", r ? ", " : "", F->runs[r].dir);
    }
    font(cr, 18, 1);
    cairo_set_source_rgb(cr, 0.1, 0.1, 0.1);
    text_at(cr, 24, 14, 0, 0, title);
    /* 2 x 2 line panels, then the bars across the width */
    double left = 90, gap = 120, right = 30, pw = (FIG_W - left - gap - right) / 2;
    box loss = {left, 90, pw, 250}, lr = {left + pw + gap, 90, pw, 250};
    box miou = {left, 440, pw, 250}, sum = {left + pw + gap, 440, pw, 250};
    box bars = {left, 790, FIG_W - left - right, 240};
    panel_loss(cr, F, &loss);
    panel_lr(cr, F, &lr);
    panel_miou(cr, F, &miou);
    panel_summary(cr, F, &sum);
    panel_bars(cr, F, &bars);
    cairo_destroy(cr);
    cairo_status_t st = cairo_surface_status(sf);
    if (st == CAIRO_STATUS_SUCCESS) st = cairo_surface_write_to_png(sf, out);
    cairo_surface_destroy(sf);
    if (st != CAIRO_STATUS_SUCCESS) {
        SG_ERROR("segtrain plot: writing %s failed: %s (check that its directory exists and is "
                 "writable)",
                 out, cairo_status_to_string(st));
        return SG_ERR_RUNTIME;
    }
    return SG_OK;
}
#endif /* SG_HAVE_CAIRO */

static int usage(FILE *f) {
    fprintf(f,
            "usage: segtrain plot RUN_DIR [RUN_DIR...] [--out FILE.png] [--smooth W]\n"
            "  one PNG: training loss (raw and smoothed), learning rate, validation and\n"
            "  leftover-pass mIoU against the iteration, and the per-class IoU of the last\n"
            "  evaluation, from RUN_DIR/metrics.jsonl and RUN_DIR/eval/iter_<N>.json.\n"
            "  Several run directories are drawn together, one colour each (at most %d).\n"
            "  --out FILE.png   where to write it (default RUN_DIR/plot.png, the first one)\n"
            "  --smooth W       loss smoothing weight in [0, 1) (default 0.6, as TensorBoard)\n",
            PL_MAX_RUNS);
    return f == stdout ? 0 : 2;
}

int sg_cmd_plot(int argc, char **argv) {
    const char *dirs[PL_MAX_RUNS];
    int n = 0;
    const char *out = NULL;
    double w = 0.6;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) return usage(stdout);
        if (!strcmp(a, "--out") || !strcmp(a, "--smooth")) {
            if (i + 1 >= argc) {
                fprintf(stderr, "segtrain plot: %s needs a value\n", a);
                return usage(stderr);
            }
            const char *v = argv[++i];
            if (!strcmp(a, "--out")) {
                out = v;
            } else {
                char *end;
                w = strtod(v, &end);
                if (*end || !(w >= 0 && w < 1)) {
                    fprintf(stderr, "segtrain plot: --smooth %s: expected a number in [0, 1)\n", v);
                    return 2;
                }
            }
            continue;
        }
        if (a[0] == '-') {
            fprintf(stderr, "segtrain plot: unknown option '%s'\n", a);
            return usage(stderr);
        }
        if (n == PL_MAX_RUNS) {
            fprintf(stderr, "segtrain plot: at most %d run directories in one picture\n",
                    PL_MAX_RUNS);
            return 2;
        }
        dirs[n++] = a;
    }
    if (n == 0) {
        fprintf(stderr, "segtrain plot: no run directory given\n");
        return usage(stderr);
    }
#if SG_HAVE_CAIRO
    pl_run runs[PL_MAX_RUNS];
    int loaded = 0, rc = 0;
    for (int r = 0; r < n && rc == 0; r++) {
        if (pl_run_load(&runs[r], dirs[r]) != SG_OK) rc = 1;
        loaded++;
    }
    char def[4200];
    if (rc == 0 && !out) {
        snprintf(def, sizeof def, "%s/plot.png", runs[0].dir);
        out = def;
    }
    if (rc == 0) {
        fig F = {runs, n, w, 0};
        for (int r = 0; r < n; r++) {
            const pl_series *ss[3] = {&runs[r].loss, &runs[r].val_miou, &runs[r].leftover_miou};
            for (int q = 0; q < 3; q++)
                if (ss[q]->n) F.xmax = fmax(F.xmax, ss[q]->x[ss[q]->n - 1]);
        }
        if (F.xmax <= 0) F.xmax = 1;
        if (sg_mkdirs_for_output("plot", out) != 0 || draw(&F, out) != SG_OK) rc = 1;
    }
    if (rc == 0) {
        int pts = 0, vals = 0;
        for (int r = 0; r < n; r++) {
            pts += runs[r].loss.n;
            vals += runs[r].val_miou.n;
        }
        SG_INFO("segtrain plot: wrote %s (%dx%d: %d training points, %d validations, %d run%s)",
                out, FIG_W, FIG_H, pts, vals, n, n > 1 ? "s" : "");
    }
    for (int r = 0; r < loaded; r++) pl_run_free(&runs[r]);
    return rc;
#else
    (void)out;
    (void)w;
    (void)dirs;
    SG_ERROR("segtrain plot: this build has no Cairo (a GPU-only bundle); plot the run "
             "directory with a regular build of segtrain");
    return 1;
#endif
}
