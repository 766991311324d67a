/* io/image_err.c - see io/image_err.h. */
#include "io/image_err.h"

#include "core/log.h"

sg_status sg_img_check_pixels(const char *path, const char *kind, int64_t h, int64_t w,
                              int64_t max_pixels, char *err, size_t errlen) {
    if (max_pixels <= 0 || h * w <= max_pixels) return SG_OK;
    sg_report(err, errlen,
              "%s: the %s is %lldx%lld (HxW) = %lld pixels, above the limit of %lld "
              "(data.max_image_pixels): a corrupt or hostile header, or a genuinely huge "
              "image (then raise data.max_image_pixels)",
              path, kind, (long long)h, (long long)w, (long long)(h * w), (long long)max_pixels);
    return SG_ERR_RUNTIME;
}
