/* core/fsutil.h - small file-system helpers shared by every module (core
 * library): creating directory trees. */
#ifndef SG_CORE_FSUTIL_H
#define SG_CORE_FSUTIL_H

/* Creates a directory and its parents (like mkdir -p). Returns 0, or -1 with
 * errno set (ENOTDIR when the path exists and is not a directory). */
int sg_mkdirs(const char *path);

#endif
