/* data/cityscapes.c - Cityscapes' class tables (cityscapesScripts
 * helpers/labels.py, via shared/reference/cityscapes.md) and the generated
 * palette for datasets that name no colours. */
#include <string.h>

#include "data/class_tables.h"
#include "data/dataset.h"

const char *const sg_cityscapes_names[SG_CITYSCAPES_CLASSES] = {
    "road",         "sidewalk",   "building", "wall",       "fence",   "pole",  "traffic light",
    "traffic sign", "vegetation", "terrain",  "sky",        "person",  "rider", "car",
    "truck",        "bus",        "train",    "motorcycle", "bicycle",
};
static const int k_label_ids[19] = {7,  8,  11, 12, 13, 17, 19, 20, 21, 22,
                                    23, 24, 25, 26, 27, 28, 31, 32, 33};
const uint8_t sg_cityscapes_colors[SG_CITYSCAPES_CLASSES * 3] = {
    128, 64,  128, /* road */
    244, 35,  232, /* sidewalk */
    70,  70,  70,  /* building */
    102, 102, 156, /* wall */
    190, 153, 153, /* fence */
    153, 153, 153, /* pole */
    250, 170, 30,  /* traffic light */
    220, 220, 0,   /* traffic sign */
    107, 142, 35,  /* vegetation */
    152, 251, 152, /* terrain */
    70,  130, 180, /* sky */
    220, 20,  60,  /* person */
    255, 0,   0,   /* rider */
    0,   0,   142, /* car */
    0,   0,   70,  /* truck */
    0,   60,  100, /* bus */
    0,   80,  100, /* train */
    0,   0,   230, /* motorcycle */
    119, 11,  32,  /* bicycle */
};

void sg_cityscapes_label_map(uint8_t map[256], uint8_t ignore) {
    memset(map, ignore, 256);
    for (int t = 0; t < 19; t++) map[k_label_ids[t]] = (uint8_t)t;
}

int sg_cityscapes_label_id(int train_id) {
    return train_id >= 0 && train_id < 19 ? k_label_ids[train_id] : -1;
}

const char *sg_cityscapes_class_name(int train_id) {
    return train_id >= 0 && train_id < 19 ? sg_cityscapes_names[train_id] : NULL;
}

const uint8_t *sg_cityscapes_palette(void) { return sg_cityscapes_colors; }

/* PASCAL VOC's palette: the class index's bits spread over r, g, b from the
 * top bit down, so neighbouring classes get clearly different colours. */
void sg_generated_color(int c, uint8_t rgb[3]) {
    int r = 0, g = 0, b = 0;
    for (int j = 0; j < 8; j++) {
        r |= ((c >> 0) & 1) << (7 - j);
        g |= ((c >> 1) & 1) << (7 - j);
        b |= ((c >> 2) & 1) << (7 - j);
        c >>= 3;
    }
    rgb[0] = (uint8_t)r;
    rgb[1] = (uint8_t)g;
    rgb[2] = (uint8_t)b;
}
