/* core/outdir.h - the folder of an output file: what every command that
 * writes a file (convert, eval --out, predict, plot, export, bench --json)
 * calls before opening it, so a path into folders that do not exist yet
 * works as it does for `export`. Above fsutil.h and log.h (log.c uses
 * fsutil.h, so this cannot live in fsutil.c). */
#ifndef SG_CORE_OUTDIR_H
#define SG_CORE_OUTDIR_H

/* Creates the directory of file and its parents (nothing for a bare file
 * name). Returns 0, or -1 after logging "<who>: cannot create the directory
 * D for <file>: <reason>" (a runtime failure). who: the command, e.g.
 * "convert". */
int sg_mkdirs_for_output(const char *who, const char *file);

#endif
