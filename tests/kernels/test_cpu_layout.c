/* tests/kernels/test_cpu_layout.c - the CPU backend's preferred activation
 * layout (sg_backend_cpu_preferred_layout: what cpu.layout auto means), per
 * precision on the ISA oneDNN dispatches to here: fp32 NHWC on AVX-512 and
 * NCHW on narrower ISAs, bf16 NHWC on either, each with its reason.
 *
 * `test_cpu_layout` checks the row of this processor's ISA;
 * `test_cpu_layout narrow` runs under ONEDNN_MAX_CPU_ISA=AVX2 (meson sets
 * it), first checks that oneDNN took the cap (so an AVX-512 machine cannot
 * check its own row twice), then checks the narrower row.
 */
#include <string.h>

#include "kernels/backend.h"
#include "kernels/cpu/cpu_internal.h"
#include "tests/testutil.h"

static int narrow_expected;

static void test_fp32(void) {
    const char *why = NULL;
    int avx512 = sg_cpu_avx512();
    if (narrow_expected)
        CHECK_MSG(!avx512, "argument 'narrow' expects oneDNN capped below AVX-512 "
                           "(ONEDNN_MAX_CPU_ISA=AVX2, as meson sets it), yet it dispatches to "
                           "AVX-512: run it with that variable set");
    int layout = sg_backend_cpu_preferred_layout(SG_PRECISION_FP32, &why);
    CHECK(why != NULL);
    if (avx512) {
        CHECK_EQ_INT(layout, SG_LAYOUT_NHWC);
        CHECK_STR_CONTAINS(why, "channels last, measured faster for fp32 on AVX-512 CPUs");
    } else {
        CHECK_EQ_INT(layout, SG_LAYOUT_NCHW);
        CHECK_STR_CONTAINS(why, "measured faster for fp32 on CPUs without AVX-512");
    }
    /* why may be NULL */
    CHECK_EQ_INT(sg_backend_cpu_preferred_layout(SG_PRECISION_FP32, NULL), layout);
}

static void test_bf16(void) {
    const char *why = NULL;
    CHECK_EQ_INT(sg_backend_cpu_preferred_layout(SG_PRECISION_BF16, &why), SG_LAYOUT_NHWC);
    CHECK(why != NULL);
    CHECK_STR_CONTAINS(why, "channels last, measured faster for bf16 on the CPU");
}

int main(int argc, char **argv) {
    narrow_expected = argc > 1 && strcmp(argv[1], "narrow") == 0;
    TEST_RUN(test_fp32);
    TEST_RUN(test_bf16);
    return TEST_EXIT();
}
