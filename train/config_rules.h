/* train/config_rules.h - every configuration rule of the layers above core
 * that a command or the trainer validates with (core/config.h's
 * sg_config_rule table): data's format rules (data/formats.h), then the
 * model's (model.h's sg_model_config_check: the (arch, backbone, names)
 * combinations that are built). Pass it to sg_cli_begin_with /
 * sg_config_validate_with, so `segtrain config` refuses what model creation
 * would. Ended by a row with check NULL.
 */
#ifndef SG_TRAIN_CONFIG_RULES_H
#define SG_TRAIN_CONFIG_RULES_H

#include "core/config.h"

extern const sg_config_rule sg_train_config_rules[];

#endif
