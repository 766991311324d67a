#!/usr/bin/env python3
"""scripts/torch_onnx_export.py - PyTorch's own ONNX export of the weights of a
`segtrain export --names torchvision` file, for comparison with segtrain's
ONNX export (scripts/check_onnx.py --compare).

    PY scripts/torch_onnx_export.py --weights tv.safetensors \
        --config RUN/config.yaml --out torch.onnx [--opset 17] [--size HxW]

Builds torchvision's DeepLabV3 as scripts/check_export.py does (torchvision's
builder at full width, else its classes narrowed to the base width), loads
the weights with strict=True, and runs torch.onnx.export in eval mode on the
"out" logits, with dynamic batch, height and width. PY is an interpreter with
torch 1.13 / torchvision 0.14 (Debian's, or scripts/onnx-venv's, which sees
them). Exit status: 0 ok, 1 failure, 77 when torch is missing.
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
try:
    import torch
    import yaml
    import check_export  # exits 77 itself without torch/torchvision
except ImportError as e:  # pragma: no cover
    print("skip: %s" % e)
    sys.exit(77)


class Logits(torch.nn.Module):
    def __init__(self, m):
        super().__init__()
        self.m = m

    def forward(self, x):
        return self.m(x)["out"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--weights", required=True)
    ap.add_argument("--config", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--opset", type=int, default=17)
    ap.add_argument("--size", default="32x32")
    a = ap.parse_args()
    with open(a.config) as f:
        cfg = yaml.safe_load(f)
    model, how = check_export.build_model(cfg["model"])
    sd = check_export.read_safetensors(a.weights)
    model.load_state_dict(sd, strict=True)
    model = Logits(model.eval()).eval()
    h, w = (int(v) for v in a.size.split("x"))
    x = torch.zeros(1, 3, h, w)
    axes = {0: "batch", 2: "height", 3: "width"}
    torch.onnx.export(model, x, a.out, opset_version=a.opset, input_names=["input"],
                      output_names=["logits"], dynamic_axes={"input": axes, "logits": axes},
                      do_constant_folding=True)
    print("torch.onnx.export (torch %s, %s) wrote %s" % (torch.__version__, how, a.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
