/* data/list_file.c - see list_file.h. */
#include "data/list_file.h"

#include <errno.h>
#include <string.h>

#include "core/log.h"

sg_status sg_list_open(sg_list_file *l, const char *path, const char *what, const char *hint) {
    l->path = path;
    l->lineno = 0;
    l->n_fields = 0;
    l->f = fopen(path, "r");
    if (!l->f) {
        SG_ERROR("cannot open %s %s: %s (%s)", what, path, strerror(errno), hint);
        return SG_ERR_RUNTIME;
    }
    return SG_OK;
}

/* Reads one line into l->line (without its newline) byte by byte, so that
 * a NUL byte cannot hide the rest of a line from the length check (fgets
 * and strlen would read a long line holding one as two). 1: a line; 0: the
 * end of the file; -1 after logging. */
static int read_line(sg_list_file *l) {
    size_t len = 0;
    int ch;
    while ((ch = getc(l->f)) != EOF && ch != '\n') {
        if (len == sizeof l->line - 2) {
            SG_ERROR("%s:%d: line longer than %zu characters", l->path, l->lineno + 1,
                     sizeof l->line - 2);
            return -1;
        }
        if (ch == 0) {
            SG_ERROR("%s:%d: a NUL byte: not a text file (a list file names one sample a line)",
                     l->path, l->lineno + 1);
            return -1;
        }
        l->line[len++] = (char)ch;
    }
    if (ch == EOF && ferror(l->f)) {
        SG_ERROR("reading %s failed: %s", l->path, strerror(errno));
        return -1;
    }
    if (ch == EOF && len == 0) return 0;
    l->line[len] = 0;
    l->lineno++;
    return 1;
}

int sg_list_next(sg_list_file *l) {
    int rc;
    while ((rc = read_line(l)) == 1) {
        int nf = 0;
        for (char *save = NULL, *t = strtok_r(l->line, " \t\r", &save); t;
             t = strtok_r(NULL, " \t\r", &save)) {
            if (nf < SG_LIST_FIELDS) l->field[nf] = t;
            nf++;
        }
        for (int i = nf; i < SG_LIST_FIELDS; i++) l->field[i] = NULL;
        l->n_fields = nf;
        if (nf > 0) return 1;
    }
    return rc;
}

void sg_list_close(sg_list_file *l) {
    if (l->f) fclose(l->f);
    l->f = NULL;
}
