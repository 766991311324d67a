/* core/outdir.c - see outdir.h. */
#include "core/outdir.h"

#include <errno.h>
#include <string.h>

#include "core/fsutil.h"
#include "core/log.h"

int sg_mkdirs_for_output(const char *who, const char *file) {
    char dir[4096];
    if (sg_mkdirs_parent(file, dir, sizeof dir) == 0) return 0;
    SG_ERROR("%s: cannot create the directory %s for %s: %s", who, dir, file, strerror(errno));
    return -1;
}
