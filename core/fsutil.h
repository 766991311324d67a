/* core/fsutil.h - small file-system helpers shared by every module (core
 * library): creating directory trees. */
#ifndef SG_CORE_FSUTIL_H
#define SG_CORE_FSUTIL_H

#include <stddef.h>

/* Creates a directory and its parents (like mkdir -p). Returns 0, or -1 with
 * errno set (ENOTDIR when the path exists and is not a directory). */
int sg_mkdirs(const char *path);
/* Creates the directory a file path lies in, and its parents ("a/b/f.png"
 * -> a/b); nothing for a bare file name. Returns 0, or -1 with errno set and
 * the directory that failed in dir[n]. */
int sg_mkdirs_parent(const char *file, char *dir, size_t n);

#endif
