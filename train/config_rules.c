/* train/config_rules.c - the combined configuration rules (config_rules.h). */
#include "train/config_rules.h"

#include "data/formats.h"
#include "model/model.h"

const sg_config_rule sg_train_config_rules[] = {
    {"data/formats.c: the dataset format rules", sg_format_config_check},
    {"model/model_build.c: the (arch, backbone, names) combinations", sg_model_config_check},
    {NULL, NULL},
};
