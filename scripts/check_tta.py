#!/usr/bin/python3
"""scripts/check_tta.py - check segtrain's test-time augmentation against
PyTorch: mmsegmentation's aug_test computed with torchvision's DeepLabV3 on a
`segtrain export --names torchvision` file must give the probabilities whose
log `segtrain predict --save-logits` wrote with eval.scales / eval.flip.

Run with Debian's python (torch 1.13, torchvision 0.14, numpy, PIL, yaml):

    /usr/bin/python3 scripts/check_tta.py --weights tv.safetensors \
        --config RUN/config.yaml --image IMG.png --logprobs PRED.npy \
        --scales 0.65,1.0,1.25 --flip [--tol 1e-5]

For each scale s, then each flip: the normalised image is resized with
F.interpolate(bilinear, align_corners=False) to int(H*s+0.5) x int(W*s+0.5),
flipped (torch.flip on the width), run through the model in float64, its
logits resized back to H x W, flipped back, softmax over the classes; the
mean over all passes is compared with exp(--logprobs): max absolute
difference <= --tol (and some probability at least --min-spread from
uniform). Exit status: 0 ok, 1 mismatch, 77 without torch.
"""
import argparse
import os
import sys

try:
    import numpy as np
    import torch
    import torch.nn.functional as F
    import yaml
    from PIL import Image
except ImportError as e:  # pragma: no cover - environment without torch
    print("skip: %s (run with Debian's /usr/bin/python3)" % e)
    sys.exit(77)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import check_export  # noqa: E402  (build_model, read_safetensors)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--weights", required=True)
    ap.add_argument("--config", required=True)
    ap.add_argument("--image", required=True)
    ap.add_argument("--logprobs", required=True)
    ap.add_argument("--scales", required=True, help="comma-separated, e.g. 0.5,1.0,1.5")
    ap.add_argument("--flip", action="store_true")
    ap.add_argument("--tol", type=float, default=1e-5)
    ap.add_argument("--min-spread", type=float, default=0.0,
                    help="fail when no probability is this far from uniform (a weak test)")
    a = ap.parse_args()
    with open(a.config) as f:
        cfg = yaml.safe_load(f)
    model, how = check_export.build_model(cfg["model"])
    model.load_state_dict(check_export.read_safetensors(a.weights), strict=True)
    model = model.double().eval()
    img = np.asarray(Image.open(a.image).convert("RGB"), dtype=np.float64) / 255.0
    mean = np.array(cfg["data"]["mean"], dtype=np.float64)
    std = np.array(cfg["data"]["std"], dtype=np.float64)
    x = torch.from_numpy(((img - mean) / std).transpose(2, 0, 1).copy())[None]
    H, W = x.shape[2], x.shape[3]
    scales = [float(s) for s in a.scales.split(",")]
    flips = [False, True] if a.flip else [False]
    prob = None
    with torch.no_grad():
        for s in scales:
            h, w = int(H * s + 0.5), int(W * s + 0.5)
            xs = x if (h, w) == (H, W) else F.interpolate(x, size=(h, w), mode="bilinear",
                                                           align_corners=False)
            for fl in flips:
                xi = torch.flip(xs, [3]) if fl else xs
                out = model(xi)["out"]
                if (h, w) != (H, W):
                    out = F.interpolate(out, size=(H, W), mode="bilinear", align_corners=False)
                if fl:
                    out = torch.flip(out, [3])
                p = F.softmax(out, dim=1)
                prob = p if prob is None else prob + p
    prob = (prob / (len(scales) * len(flips)))[0].numpy()
    got = np.exp(np.load(a.logprobs).astype(np.float64))
    if got.shape != prob.shape:
        print("FAIL: probabilities shape %s, torch gives %s" % (got.shape, prob.shape))
        return 1
    err = np.abs(got - prob).max()
    spread = np.abs(prob - 1.0 / prob.shape[0]).max()
    agree = (got.argmax(0) == prob.argmax(0)).mean()
    print("%s, scales %s%s: averaged probabilities %s, max |segtrain - torch| %.3g (tol %g), "
          "up to %.3g from uniform, argmax agreement %.4f"
          % (how, scales, " x flip" if a.flip else "", prob.shape, err, a.tol, spread, agree))
    if spread < a.min_spread:
        print("FAIL: the probabilities are within %g of uniform (--min-spread %g): a weak test"
              % (spread, a.min_spread))
        return 1
    return 0 if err <= a.tol else 1


if __name__ == "__main__":
    sys.exit(main())
