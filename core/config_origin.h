/* core/config_origin.h - the record of where each configuration value came
 * from (sg_config.origin), for core's loader and writer only.
 *
 * The loader notes, for every key it sets, the file (or text name) and line,
 * or "--set"; sg_config_defaults clears the record to "default". Validation
 * errors and --print-config read it back. Nothing here can fail: a source
 * that does not fit the fixed table is recorded as "unrecorded".
 */
#ifndef SG_CORE_CONFIG_ORIGIN_H
#define SG_CORE_CONFIG_ORIGIN_H

#include <stddef.h>

#include "core/config.h"
#include "core/config_schema.h"

#define SG_ORIGIN_DEFAULT 0
#define SG_ORIGIN_SET 1
#define SG_ORIGIN_FILE 2
#define SG_ORIGIN_UNRECORDED 255

/* Every key back to "default", no sources. */
void sg_config_origin_clear(sg_config *cfg);

/* Key k was just set from source src at line (1-based; 0 = none). src NULL
 * means a --set override. */
void sg_config_origin_note(sg_config *cfg, const sg_config_key *k, const char *src, int line);

/* "FILE:LINE" / "FILE" / "--set" / "default" / "an unrecorded source" for
 * the key at schema index i into buf[n]; returns SG_ORIGIN_DEFAULT,
 * SG_ORIGIN_SET, SG_ORIGIN_FILE or SG_ORIGIN_UNRECORDED. */
int sg_config_origin_describe(const sg_config *cfg, int i, char *buf, size_t n);

#endif
