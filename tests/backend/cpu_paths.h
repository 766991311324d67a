/* tests/backend/cpu_paths.h - the conformance suite's checks of the CPU
 * backend's convolution path table (kernels/cpu/conv/conv_paths.h):
 *  - rules: over every conv geometry of the table, on each configuration
 *    that runs the measured rules, no two rows that are not fallbacks take
 *    one pass of one conv unless the table declares the pair
 *    (sg_cpu_conv_path_overlaps), and float32 convs land on exactly one of
 *    oneDNN's layout rows;
 *  - names: a conv case fails when another row ran a pass that the paths
 *    its row names (tb_case.path: "NAME" or "PASS:NAME", PASS fwd | bd |
 *    bw, space-separated; a row that names none is for oneDNN's rows) run
 *    on this configuration (their passes, precision, layout and processor
 *    columns);
 *  - coverage: every row, pass and precision a row of the path table may
 *    run on this processor ran in some case, else a failure; what the
 *    processor lacks is reported as skipped. Printed as a matrix.
 * All of it is a no-op on other backends and in builds without the CPU
 * backend.
 */
#ifndef SG_TESTS_BACKEND_CPU_PATHS_H
#define SG_TESTS_BACKEND_CPU_PATHS_H

#include <stddef.h>

#include "tests/backend/tb.h"

/* A configuration starts on be (forced: it sets SG_CPU_CONV). Returns the
 * failures of the rules check (0 when not checked). */
int tb_paths_config(const char *config, sg_backend *be, int forced, const tb_case *table, int n);
/* After case c ran on that configuration: records the rows that ran and
 * checks c's names. Returns 1 on a failure (printed). */
int tb_paths_case(tb_ctx *t, const tb_case *c, int row);
/* After the backend's last configuration: the matrix; returns the cells
 * missing (each printed as a failure) and names in skipped the paths (and
 * precisions) this processor lacks ("" when none). */
int tb_paths_report(char *skipped, size_t cap);

#endif
