/* core/test_seams.h - test seams: environment variables that only tests
 * set, to reach a state a test needs and a user never should. They exist
 * only in a build configured with -Dtest_seams=true; the product build
 * (the default) has no trace of them: no getenv, no symbol, no name.
 *
 * The meson option sets SG_TEST_SEAMS to 1 or 0 for every C, C++ and CUDA
 * file of the project, tests included. Code that reads a seam wraps the
 * read and everything the seam changes in `#if SG_TEST_SEAMS ... #endif`;
 * a test that needs a seam returns TEST_SKIP (77) when SG_TEST_SEAMS is 0,
 * saying why (tu_have_seams, tests/testutil.h). An unknown or malformed
 * value of a seam is an error where it is read, as for any setting.
 *
 * The seams (what they do is documented where they are read):
 *   SG_TEST_MESH_KILL=RANK:BYTES:NTH  rank RANK SIGKILLs itself at its NTH
 *                      mesh collective of BYTES bytes per rank (dist/mesh.h)
 *   SG_WEIGHT_CACHE=0|1  0: the bf16 weight copies are converted on every
 *                      convolution (kernels/weight_cache.h)
 *   SG_BN_FUSE=0|1     0: batch norm and the residual join in separate
 *                      passes (model/model_plan.c)
 *   SG_CPU_WEIGHT_PACK=0|1  0: the CPU's bf16 weights through oneDNN's
 *                      reorder instead of the packing (kernels/cpu/conv/ops.c)
 * A new seam is added to this list and to sg_test_seam's.
 */
#ifndef SG_CORE_TEST_SEAMS_H
#define SG_CORE_TEST_SEAMS_H

#ifndef SG_TEST_SEAMS
#error "SG_TEST_SEAMS is not defined: the top meson.build defines it (0 or 1) for every file"
#endif

#if SG_TEST_SEAMS
/* The value of the seam `name` in the environment, or NULL when it is not
 * set. Fatal when `name` is not one of the seams above (a programmer error:
 * a seam read but not listed here). Only in builds with -Dtest_seams=true
 * (core/test_seams.c), so a read outside `#if SG_TEST_SEAMS` fails to build. */
const char *sg_test_seam(const char *name);
#endif

#endif
