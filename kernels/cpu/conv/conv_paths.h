/* kernels/cpu/conv/conv_paths.h - the CPU backend's convolution path table
 * as tests and tools see it (kernels/cpu/conv/paths.c has the table; the
 * rules are explained in docs/ARCHITECTURE.md, "CPU convolution paths").
 *
 * Every convolution pass runs on exactly one row of the table, chosen by
 * one chooser for every entry point (the ops, conv_prepare, the *_dt ops).
 * The conformance suite (tests/backend) asks which row ran each pass of
 * each case and which rows this processor makes available, and fails when
 * a case's named path did not run or an available row ran nowhere.
 */
#ifndef SG_KERNELS_CPU_CONV_PATHS_H
#define SG_KERNELS_CPU_CONV_PATHS_H

#include <stdint.h>

#include "kernels/backend.h"

/* The passes: forward, backward-data, backward-weights. */
enum { SG_CPU_CONV_FWD = 0, SG_CPU_CONV_BWD_DATA = 1, SG_CPU_CONV_BWD_WEIGHT = 2 };
/* A backend's convolution precision: float32, bf16 on oneDNN's bf16
 * instructions (native), bf16 emulated in float32. */
enum { SG_CPU_CONV_F32 = 0, SG_CPU_CONV_BF16 = 1, SG_CPU_CONV_BF16_EMU = 2 };

typedef struct sg_cpu_conv_path_info {
    const char *name;
    const char *file;    /* where its kernels are (kernels/cpu/conv/) */
    const char *isa;     /* what its rule needs of the processor, in words */
    unsigned passes;     /* 1 << SG_CPU_CONV_FWD.. : where the rule may pick it */
    unsigned precisions; /* 1 << SG_CPU_CONV_F32.. */
    unsigned layouts;    /* 1 << SG_LAYOUT_*: where the rule may pick it */
    int fallback;        /* a oneDNN layout row or the emulation: they take what
                            the rows before them leave */
} sg_cpu_conv_path_info;

/* The rows, in the chooser's order. */
int sg_cpu_conv_path_count(void);
void sg_cpu_conv_path_get(int i, sg_cpu_conv_path_info *info);
/* The row named name, or -1. */
int sg_cpu_conv_path_find(const char *name);

/* be's convolution precision (SG_CPU_CONV_F32 / _BF16 / _BF16_EMU). */
int sg_cpu_conv_precision(sg_backend *be);
/* Row i on be: SG_CPU_CONV_ISA_OK when the processor has what its rule
 * needs, SG_CPU_CONV_FORCED / _OFF as SG_CPU_CONV says. */
enum { SG_CPU_CONV_ISA_OK = 1, SG_CPU_CONV_FORCED = 2, SG_CPU_CONV_OFF = 4 };
unsigned sg_cpu_conv_path_flags(sg_backend *be, int i);
/* The row that ran pass last on be (-1: none since the last forget); under
 * the emulation *inner is the float32 row inside it (else -1). */
int sg_cpu_conv_path_ran(sg_backend *be, int pass, int *inner);
void sg_cpu_conv_path_forget(sg_backend *be);
/* The rows whose columns and rule hold for pass of d on be (bit i = row
 * i), without SG_CPU_CONV: what the chooser takes the first of. Builds the
 * oneDNN entries that a native bf16 rule asks about. */
uint32_t sg_cpu_conv_paths_for(sg_backend *be, const sg_conv_desc *d, int pass);
/* Pairs of rows that are not fallbacks whose rules may both hold for one
 * conv (the earlier row wins): NULL-terminated array of pairs. */
extern const char *const sg_cpu_conv_path_overlaps[][2];

#endif
