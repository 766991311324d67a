/* train/slide.c - see slide.h. */
#include "train/slide.h"

#include <stdlib.h>
#include <string.h>

#include "core/log.h"

sg_status sg_slide_logits(sg_backend *be, sg_model *m, const uint8_t *d_img, int H, int W, int C,
                          int crop_h, int crop_w, int stride_h, int stride_w, const float mean[3],
                          const float std[3], float *out) {
    int ch = crop_h < H ? crop_h : H, cw = crop_w < W ? crop_w : W;
    size_t px = (size_t)H * W;
    if (sg_model_plan_infer(m, 1, ch, cw) != SG_OK) return SG_ERR_RUNTIME;
    float *cnt = calloc(px, sizeof(float));
    float *logits = malloc((size_t)C * ch * cw * sizeof(float));
    uint8_t *win = malloc((size_t)ch * cw * 3);
    uint8_t *src = malloc(px * 3);
    SG_CHECK(cnt && logits && win && src,
             "out of host memory for sliding-window logits (%zu floats)", (size_t)C * px);
    memset(out, 0, (size_t)C * px * sizeof(float));
    be->ops->download(be, src, d_img, px * 3);
    int ny = H > ch ? (H - ch + stride_h - 1) / stride_h + 1 : 1;
    int nx = W > cw ? (W - cw + stride_w - 1) / stride_w + 1 : 1;
    uint8_t *d_win = be->ops->alloc(be, (size_t)ch * cw * 3);
    for (int iy = 0; iy < ny; iy++)
        for (int ix = 0; ix < nx; ix++) {
            int y0 = iy * stride_h, x0 = ix * stride_w;
            if (y0 + ch > H) y0 = H - ch;
            if (x0 + cw > W) x0 = W - cw;
            for (int y = 0; y < ch; y++)
                memcpy(win + (size_t)y * cw * 3, src + ((size_t)(y0 + y) * W + x0) * 3,
                       (size_t)cw * 3);
            be->ops->upload(be, d_win, win, (size_t)ch * cw * 3);
            be->ops->normalize_u8(be, d_win, sg_model_input(m), 1, ch, cw, mean, std);
            sg_model_forward(m, 0, 0);
            be->ops->download(be, logits, sg_model_out(m), (size_t)C * ch * cw * sizeof(float));
            /* the window's logits are in the backend's activation layout;
             * out stays NCHW */
            if (be->layout == SG_LAYOUT_NHWC)
                for (int y = 0; y < ch; y++)
                    for (int x = 0; x < cw; x++) {
                        const float *l = logits + ((size_t)y * cw + x) * C;
                        float *a = out + (size_t)(y0 + y) * W + x0 + x;
                        for (int c = 0; c < C; c++) a[(size_t)c * px] += l[c];
                    }
            else
                for (int c = 0; c < C; c++)
                    for (int y = 0; y < ch; y++) {
                        const float *l = logits + ((size_t)c * ch + y) * cw;
                        float *a = out + ((size_t)c * H + y0 + y) * W + x0;
                        for (int x = 0; x < cw; x++) a[x] += l[x];
                    }
            for (int y = 0; y < ch; y++)
                for (int x = 0; x < cw; x++) cnt[(size_t)(y0 + y) * W + x0 + x] += 1.0f;
        }
    be->ops->free(be, d_win);
    for (int c = 0; c < C; c++)
        for (size_t p = 0; p < px; p++) out[(size_t)c * px + p] /= cnt[p];
    free(cnt);
    free(logits);
    free(win);
    free(src);
    return SG_OK;
}

void sg_slide_argmax(const float *logits, int C, size_t px, uint8_t *pred) {
    for (size_t p = 0; p < px; p++) {
        int best = 0;
        float bv = logits[p];
        for (int c = 1; c < C; c++) {
            float v = logits[(size_t)c * px + p];
            if (v > bv) {
                bv = v;
                best = c;
            }
        }
        pred[p] = (uint8_t)best;
    }
}
