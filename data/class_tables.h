/* data/class_tables.h - the class tables the format rows point at: names and
 * r,g,b palettes of Cityscapes (cityscapes.c), Pascal VOC and ADE20K
 * (classes.c). Plain constant arrays, so data/formats.c's rows can name them
 * in a static initialiser. Not a public header: dataset.h's accessors
 * (sg_cityscapes_class_name, ...) are the public view. */
#ifndef SG_DATA_CLASS_TABLES_H
#define SG_DATA_CLASS_TABLES_H

#include <stdint.h>

#define SG_CITYSCAPES_CLASSES 19
#define SG_VOC_CLASSES 21
#define SG_ADE20K_CLASSES 150

extern const char *const sg_cityscapes_names[SG_CITYSCAPES_CLASSES];
extern const uint8_t sg_cityscapes_colors[SG_CITYSCAPES_CLASSES * 3];
extern const char *const sg_voc_names[SG_VOC_CLASSES];
extern const uint8_t sg_voc_colors[SG_VOC_CLASSES * 3];
extern const char *const sg_ade20k_names[SG_ADE20K_CLASSES];
extern const uint8_t sg_ade20k_colors[SG_ADE20K_CLASSES * 3];

#endif
