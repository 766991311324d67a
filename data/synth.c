/* data/synth.c - see synth.h: the entry point. Options, the layouts (the
 * rows of data/formats.c that have a synth writer, in table order) and the
 * dispatch to the writer; the pixels are synth_render.c's, each layout's
 * files its writer's (synth_cityscapes.c, synth_voc.c, synth_ade20k.c). */
#include "data/synth.h"

#include <stdio.h>
#include <string.h>

#include "core/log.h"
#include "data/formats.h"

void sg_synth_defaults(sg_synth_opts *o) {
    memset(o, 0, sizeof *o);
    o->n_train = 100;
    o->n_val = 20;
    o->h = 100; /* neither 100 nor 140 is a multiple of a 32/64/96 crop */
    o->w = 140;
    o->seed = 0;
    o->classes = 19;
}

/* Layout l is the l-th row of the format table that synth can write. */
static const sg_format *layout_row(int l) {
    for (int i = 0, k = 0; i < sg_format_count(); i++) {
        const sg_format *f = sg_format_at(i);
        if (!f->synth_write) continue;
        if (k++ == l) return f;
    }
    return NULL;
}

const char *sg_synth_layout_name(sg_synth_layout l) {
    const sg_format *f = layout_row((int)l);
    return f ? f->name : "?";
}

int sg_synth_layout_parse(const char *name) {
    for (int l = 0; layout_row(l); l++)
        if (strcmp(name, layout_row(l)->name) == 0) return l;
    return -1;
}

sg_status sg_synth_write(const sg_synth_opts *o) {
    if (o->h < 8 || o->w < 8 || o->h > 8192 || o->w > 8192 || o->classes < 3 || o->classes > 19 ||
        o->n_train < 0 || o->n_val < 0 || o->n_train + o->n_val == 0) {
        SG_ERROR("synth: size %dx%d must be within 8..8192 per side, --classes %d within 3..19, "
                 "--train %d / --val %d non-negative and not both 0",
                 o->h, o->w, o->classes, o->n_train, o->n_val);
        return SG_ERR_CONFIG;
    }
    const sg_format *f = layout_row((int)o->layout);
    if (!f) {
        char names[256];
        SG_ERROR("synth: unknown layout %d (%s)", (int)o->layout,
                 sg_format_names(names, sizeof names, 1, ", ", " or "));
        return SG_ERR_CONFIG;
    }
    return f->synth_write(o);
}
