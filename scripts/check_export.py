#!/usr/bin/python3
"""scripts/check_export.py - check a `segtrain export --names torchvision|mmseg`
file against PyTorch: torchvision's DeepLabV3 / FCN / LR-ASPP on ResNet or
MobileNetV3-Large (model.names torchvision)
or scripts/make_golden.py's transcription of mmseg's EncoderDecoder (model.names
mmseg: ResNetV1c, ASPPHead, FCNHead) must load it with strict=True and give the
same logits as segtrain on one image.

Run with Debian's python (torch 1.13, torchvision 0.14, numpy, PIL, yaml):

    /usr/bin/python3 scripts/check_export.py --weights tv.safetensors \
        --config RUN/config.yaml --image IMG.png --logits LOGITS.npy [--tol 1e-4]

--logits is `segtrain predict --save-logits` output for --image ([C,H,W]
float32). Full-width networks (model.base_width 64, resnet50/101, output
stride 8, ASPP rates 12,24,36) are built with torchvision's own
deeplabv3_resnet50/101 builder; narrower test networks with the same
torchvision classes narrowed by scripts/make_golden.py's build(). The
safetensors file is read by hand (no safetensors package needed).
Exit status: 0 ok, 1 mismatch, 77 when torch/torchvision are missing.
"""
import argparse
import json
import os
import struct
import sys

try:
    import numpy as np
    import torch
    import torchvision
    import yaml
    from PIL import Image
except ImportError as e:  # pragma: no cover - environment without torch
    print("skip: %s (run with Debian's /usr/bin/python3)" % e)
    sys.exit(77)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

BLOCKS = {"resnet18": [2, 2, 2, 2], "resnet34": [3, 4, 6, 3], "resnet50": [3, 4, 6, 3],
          "resnet101": [3, 4, 23, 3], "resnet50v1c": [3, 4, 6, 3], "resnet101v1c": [3, 4, 23, 3]}


def read_safetensors(path):
    with open(path, "rb") as f:
        raw = f.read()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    data = raw[8 + n:]
    out = {}
    for name, d in header.items():
        if name == "__metadata__":
            continue
        a, b = d["data_offsets"]
        dt = {"F32": np.float32, "I64": np.int64}[d["dtype"]]
        arr = np.frombuffer(data[a:b], dtype=dt).reshape(d["shape"]).copy()
        out[name] = torch.from_numpy(arr)
    return out


def build_mobilenet(m, arch, rates):
    """torchvision's deeplabv3_mobilenet_v3_large / lraspp_mobilenet_v3_large
    at full width (width_mult 1.0, base_width 64, rates 12,24,36), else
    make_golden.py's build_mobilenet (torchvision's own builders, heads
    narrowed by the base width)."""
    wm, bw = float(m.get("width_mult", 1.0)), m.get("base_width", 64)
    aux = bool(m.get("aux_head", True))
    if wm == 1.0 and bw == 64 and (arch == "lraspp" or rates == [12, 24, 36]):
        from torchvision.models import segmentation
        fn = getattr(segmentation, arch + "_mobilenet_v3_large")
        kw = {"aux_loss": aux} if arch == "deeplabv3" else {}
        return (fn(weights=None, weights_backbone=None, num_classes=m["num_classes"], **kw),
                "torchvision.models.segmentation." + fn.__name__)
    import make_golden
    cfg = {"backbone": "mobilenet_v3_large", "arch": arch, "width_mult": wm, "base_width": bw,
           "aspp_rates": rates, "num_classes": m["num_classes"], "aux_head": int(aux)}
    return (make_golden.build(cfg), "torchvision's %s_mobilenet_v3_large at width_mult %g, "
            "heads at base_width %d" % (arch, wm, bw))


def build_model(m):
    rates = list(m.get("aspp_rates", [12, 24, 36]))
    arch, names = m.get("arch", "deeplabv3"), m.get("names", "torchvision")
    if m["backbone"] == "mobilenet_v3_large":
        return build_mobilenet(m, arch, rates)
    full = (m.get("base_width", 64) == 64 and m["backbone"] in ("resnet50", "resnet101")
            and m.get("output_stride", 8) == 8 and rates == [12, 24, 36]
            and names == "torchvision")
    if full:
        from torchvision.models import segmentation
        fn = getattr(segmentation, arch + "_" + m["backbone"])
        return fn(weights=None, weights_backbone=None, num_classes=m["num_classes"],
                  aux_loss=bool(m.get("aux_head", True))), "torchvision.models.segmentation." + fn.__name__
    import make_golden
    cfg = {"backbone": m["backbone"], "arch": arch, "names": names,
           "blocks": BLOCKS[m["backbone"]],
           "base_width": m.get("base_width", 64), "output_stride": m.get("output_stride", 8),
           "aspp_rates": rates, "num_classes": m["num_classes"],
           "aux_head": int(bool(m.get("aux_head", True)))}
    how = ("torchvision classes" if names == "torchvision" else "the mmseg transcription")
    return make_golden.build(cfg), "%s %s narrowed to base_width %d" % (how, arch, cfg["base_width"])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--weights", required=True)
    ap.add_argument("--config", required=True)
    ap.add_argument("--image", required=True)
    ap.add_argument("--logits", required=True)
    ap.add_argument("--tol", type=float, default=1e-4)
    a = ap.parse_args()
    with open(a.config) as f:
        cfg = yaml.safe_load(f)
    model, how = build_model(cfg["model"])
    sd = read_safetensors(a.weights)
    model.load_state_dict(sd, strict=True)  # raises on any missing/unexpected key or shape
    print("load_state_dict(strict=True) accepted %d tensors (%s)" % (len(sd), how))
    model = model.double().eval()
    img = np.asarray(Image.open(a.image).convert("RGB"), dtype=np.float64) / 255.0
    mean = np.array(cfg["data"]["mean"], dtype=np.float64)
    std = np.array(cfg["data"]["std"], dtype=np.float64)
    x = torch.from_numpy(((img - mean) / std).transpose(2, 0, 1).copy())[None]
    with torch.no_grad():
        ref = model(x)["out"][0].numpy()
    got = np.load(a.logits)
    if got.shape != ref.shape:
        print("FAIL: logits shape %s, torch gives %s" % (got.shape, ref.shape))
        return 1
    err = np.abs(got - ref).max() / max(np.abs(ref).max(), 1e-6)
    same_argmax = (got.argmax(0) == ref.argmax(0)).mean()
    print("logits %s: max relative error %.3g (tol %g), argmax agreement %.4f"
          % (ref.shape, err, a.tol, same_argmax))
    return 0 if err <= a.tol else 1


if __name__ == "__main__":
    sys.exit(main())
