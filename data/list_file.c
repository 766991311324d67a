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

int sg_list_next(sg_list_file *l) {
    while (fgets(l->line, sizeof l->line, l->f)) {
        l->lineno++;
        size_t len = strlen(l->line);
        /* a full buffer without the newline: the line goes on past it */
        if (len == sizeof l->line - 1 && l->line[len - 1] != '\n') {
            SG_ERROR("%s:%d: line longer than %zu characters", l->path, l->lineno,
                     sizeof l->line - 2);
            return -1;
        }
        int nf = 0;
        for (char *save = NULL, *t = strtok_r(l->line, " \t\r\n", &save); t;
             t = strtok_r(NULL, " \t\r\n", &save)) {
            if (nf < SG_LIST_FIELDS) l->field[nf] = t;
            nf++;
        }
        for (int i = nf; i < SG_LIST_FIELDS; i++) l->field[i] = NULL;
        l->n_fields = nf;
        if (nf > 0) return 1;
    }
    if (ferror(l->f)) {
        SG_ERROR("reading %s failed: %s", l->path, strerror(errno));
        return -1;
    }
    return 0;
}

void sg_list_close(sg_list_file *l) {
    if (l->f) fclose(l->f);
    l->f = NULL;
}
