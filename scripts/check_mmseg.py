"""scripts/check_mmseg.py - segtrain against the real mmsegmentation 1.2.2, both
ways, for tests/model/test_mmseg_roundtrip.sh. Run with the python of
scripts/mmseg-venv (scripts/mmseg_lite.py says why mmcv-lite works).

    check_mmseg.py save --arch A[:W2][,B...] --base-width W --image IMG --dir DIR
        for each arch, builds mmseg's EncoderDecoder (ResNetV1c-50, DeepLabV3
        ASPPHead or DeepLabV3+ DepthwiseSeparableASPPHead with dilations
        1,12,24,36, aux FCNHead, 19 classes, mmseg's SegDataPreProcessor
        mean/std) narrowed to base width W (64 = mmseg's R-50-D8), random
        weights with non-trivial BN, saves it as mmengine's runner does
        (save_checkpoint of {meta, state_dict}) to DIR/A.pth, then loads that
        file through mmseg's init_model and writes inference_model's logits on
        IMG ([19, H, W] float32) to DIR/A-ref.npy. A:W2 is arch A at base
        width W2, its files DIR/A-wW2.pth and DIR/A-wW2-ref.npy.
    check_mmseg.py load --arch A[,B] --base-width W --image IMG --dir DIR [--tol 1e-5]
        loads DIR/A-back.safetensors (`segtrain export --names mmseg`) into
        mmseg's model with load_state_dict(strict=True) and compares
        inference_model's logits on IMG with segtrain's DIR/A-trained.npy
        (max |difference| / max |logit|).
One process does every arch (importing mmseg takes seconds).
Exit status: 0 ok, 1 mismatch or failure, 77 without mmseg (the venv).
"""
import argparse
import json
import os
import struct
import sys
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
warnings.filterwarnings("ignore")
try:
    import numpy as np
    import torch
    import mmseg_lite
    mmseg_lite.import_mmseg()
    from mmengine import Config
    from mmengine.runner.checkpoint import get_state_dict, save_checkpoint
    from mmseg.apis import inference_model, init_model
    from mmseg.utils import get_classes, get_palette
except ImportError as e:
    print("skip: %s (run with the python of scripts/mmseg-venv)" % e)
    sys.exit(77)


def config(arch, w):
    cfg = {"backbone": "resnet50v1c", "arch": arch, "base_width": w, "output_stride": 8,
           "aspp_rates": [12, 24, 36], "num_classes": 19, "aux_head": 1,
           "head_dropout": 0.1, "aux_dropout": 0.1}
    model = mmseg_lite.model_cfg(cfg)
    # configs/_base_/models/*_r50-d8.py's data_preprocessor (ImageNet mean/std on 0-255, RGB)
    model["data_preprocessor"] = dict(type="SegDataPreProcessor", mean=[123.675, 116.28, 103.53],
                                      std=[58.395, 57.12, 57.375], bgr_to_rgb=True, pad_val=0,
                                      seg_pad_val=255)
    return Config(dict(model=model, default_scope="mmseg", test_pipeline=[
        dict(type="LoadImageFromFile"), dict(type="PackSegInputs")]))


def infer(model, image):
    with torch.no_grad():
        res = inference_model(model, image)
    return res.seg_logits.data.float().numpy()


def read_safetensors(path):
    with open(path, "rb") as f:
        raw = f.read()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    out = {}
    for name, d in header.items():
        if name == "__metadata__":
            continue
        a, b = d["data_offsets"]
        dt = {"F32": np.float32, "I64": np.int64}[d["dtype"]]
        arr = np.frombuffer(raw[8 + n + a:8 + n + b], dtype=dt).reshape(d["shape"]).copy()
        out[name] = torch.from_numpy(arr)
    return out


def save(a, arch, w, tag):
    pth = os.path.join(a.dir, tag + ".pth")
    torch.manual_seed(7)
    cfg = config(arch, w)
    model = init_model(cfg, None, device="cpu")
    g = torch.Generator().manual_seed(8)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                c = m.num_features
                m.weight.copy_(0.5 + torch.rand(c, generator=g))
                m.bias.copy_(0.2 * torch.rand(c, generator=g) - 0.1)
                m.running_mean.copy_(0.2 * torch.rand(c, generator=g) - 0.1)
                m.running_var.copy_(0.5 + torch.rand(c, generator=g))
                m.num_batches_tracked.fill_(9)
    meta = {"mmseg_version": __import__("mmseg").__version__, "epoch": 0, "iter": 80000,
            "dataset_meta": {"classes": get_classes("cityscapes"),
                             "palette": get_palette("cityscapes")}}
    sd = get_state_dict(model)
    save_checkpoint({"meta": meta, "state_dict": sd}, pth)
    # back through mmseg's own loader, as a user would run it
    model = init_model(cfg, pth, device="cpu")
    out = infer(model, a.image)
    np.save(os.path.join(a.dir, tag + "-ref.npy"), out)
    print("mmseg %s (base width %d): %d state_dict tensors, %d floats; inference_model logits %s"
          % (arch, w, len(sd),
             sum(v.numel() for v in sd.values() if v.is_floating_point()), out.shape))
    return 0


def load(a, arch, w, tag):
    model = init_model(config(arch, w), None, device="cpu")
    weights = os.path.join(a.dir, tag + "-back.safetensors")
    sd = read_safetensors(weights)
    try:
        model.load_state_dict(sd, strict=True)
    except RuntimeError as e:
        print("FAIL: %s does not load strictly into mmseg's %s: %s" % (weights, arch, e))
        return 1
    ref = infer(model, a.image)
    got = np.load(os.path.join(a.dir, tag + "-trained.npy"))
    if got.shape != ref.shape:
        print("FAIL: segtrain logits %s, mmseg %s" % (got.shape, ref.shape))
        return 1
    err = float(np.abs(got - ref).max() / max(np.abs(ref).max(), 1e-6))
    print("mmseg %s loads %s strictly (%d tensors); logits %s max relative error %.3g "
          "(tolerance %g)" % (arch, os.path.basename(weights), len(sd), ref.shape, err, a.tol))
    return 0 if err <= a.tol else 1


def main():
    p = argparse.ArgumentParser()
    p.add_argument("mode", choices=["save", "load"])
    p.add_argument("--arch", required=True, help="deeplabv3 and/or deeplabv3plus, comma-separated")
    p.add_argument("--base-width", type=int, default=8)
    p.add_argument("--image", required=True)
    p.add_argument("--dir", required=True)
    p.add_argument("--tol", type=float, default=1e-5)
    a = p.parse_args()
    torch.set_num_threads(2)
    rc = 0
    for tok in a.arch.split(","):
        arch, _, w = tok.partition(":")
        if arch not in ("deeplabv3", "deeplabv3plus") or (w and not w.isdigit()):
            p.error("--arch %s: expected deeplabv3 or deeplabv3plus, optionally :WIDTH" % tok)
        tag = arch + ("-w" + w if w else "")
        w = int(w) if w else a.base_width
        rc |= save(a, arch, w, tag) if a.mode == "save" else load(a, arch, w, tag)
    return rc


if __name__ == "__main__":
    sys.exit(main())
