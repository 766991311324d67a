/* dist/launch_resume.h - the command that resumes a launched training job,
 * as the launcher prints it after Ctrl-C or a failure: the user's own
 * command line, every launcher option kept (--nproc-per-node, --master-port,
 * --kill-grace-s, ...), with `--resume auto` in place of any --resume. */
#ifndef SG_DIST_LAUNCH_RESUME_H
#define SG_DIST_LAUNCH_RESUME_H

#include <stddef.h>

/* argv[0..argc): the launcher's command line as given; wargs: the workers'
 * arguments (wargs[0] the program, NULL-terminated), which say whether the
 * workers train (`train`, or an option first: train is the default
 * command). Writes the shell-quoted command into buf[n] and returns 1, or
 * returns 0 (buf "") when the workers do not train or it does not fit. */
int sg_launch_resume_command(int argc, char **argv, char **wargs, char *buf, size_t n);

#endif
