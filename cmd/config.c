/* placeholder: replaced by the schema-driven config */
#include "cmd/config.h"
#include <string.h>
void sg_config_defaults(sg_config *cfg) { memset(cfg, 0, sizeof *cfg); }
