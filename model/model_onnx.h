/* model/model_onnx.h - the model's inference graph as ONNX (io/onnx.h).
 *
 * Walks the model's layer list (model_internal.h) from the logits back to the
 * input and emits, in forward order, only what the logits need: eval mode
 * (batch norm with the running statistics, folded into the preceding
 * convolution or kept as BatchNormalization), no dropout, no aux head. Every
 * bilinear resize is Resize(mode linear, coordinate_transformation_mode
 * half_pixel) to sizes taken from the graph (Shape of the reference
 * tensor), which is PyTorch's align_corners=False rule (kernels/formulas/
 * bilinear.h) for fixed and symbolic H/W alike; opset 10's Resize has no
 * coordinate modes, so the lowest opset is SG_ONNX_MIN_OPSET (11).
 *
 * Input: float32 NCHW [N,3,H,W], normalised as `predict` normalises; or
 * (normalize_u8) uint8 NHWC [N,H,W,3] RGB pixels, converted in the graph as
 * normalize_u8 does ((v*a) + b with a = 1/(255 std), b = -mean/std per
 * channel, kernels/formulas/normalize.h). Output: "logits" float32
 * [N,C,H,W] at input resolution, or (argmax) "labels" int64 [N,H,W], the
 * first maximal class as torch.argmax.
 *
 * Errors: SG_ERR_CONFIG after logging for a request the exporter cannot
 * honour (an opset outside SG_ONNX_MIN_OPSET..SG_ONNX_MAX_OPSET, a fixed
 * size the network cannot take, a layer type it does not know, a batch norm
 * whose statistics are not finite).
 */
#ifndef SG_MODEL_MODEL_ONNX_H
#define SG_MODEL_MODEL_ONNX_H

#include "io/onnx.h"
#include "model/model.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Resize with coordinate_transformation_mode (half_pixel) came in opset 11. */
#define SG_ONNX_MIN_OPSET 11

typedef struct sg_onnx_export_opts {
    int opset;             /* SG_ONNX_MIN_OPSET..SG_ONNX_MAX_OPSET */
    int fold_bn;           /* 1: BN folded into the convs; 0: BatchNormalization nodes */
    int batch;             /* > 0 fixed batch, 0 symbolic "batch" */
    int height, width;     /* > 0 fixed input size, 0 symbolic "height"/"width" (both) */
    int argmax;            /* output "labels" instead of "logits" */
    int normalize_u8;      /* uint8 NHWC input, normalised in the graph */
    float mean[3], std[3]; /* for normalize_u8 */
    int torchvision_names; /* initializers under torchvision's names */
} sg_onnx_export_opts;

/* Adds m's inference graph (inputs, nodes, initializers, outputs) to g,
 * whose opset must be o->opset. Downloads the weights from the device.
 * Returns SG_OK, or SG_ERR_CONFIG after logging (see above). */
sg_status sg_model_to_onnx(sg_model *m, const sg_onnx_export_opts *o, sg_onnx *g);

#ifdef __cplusplus
}
#endif

#endif
