#!/usr/bin/python3
"""scripts/torch2safetensors.py - a PyTorch checkpoint (.pth) -> safetensors for
segtrain's model.pretrained.

    /usr/bin/python3 scripts/torch2safetensors.py IN.pth OUT.safetensors
    /usr/bin/python3 scripts/torch2safetensors.py --torchvision deeplabv3_resnet50 \
        --weights COCO_WITH_VOC_LABELS_V1 OUT.safetensors   (needs the weights cached)

Takes a state dict (or a checkpoint holding one under "model" or "state_dict"),
converts floating tensors to float32 and integer ones to int64 (segtrain reads
F32 and I64 only), and writes them with their names unchanged: segtrain's loader
maps torchvision's backbone./classifier./aux_classifier. (and DDP's "module.",
and plain ImageNet ResNet names conv1./bn1./layerN.) onto its registry and
reports what it loaded, skipped or missed. No safetensors package is needed.
"""
import argparse
import json
import struct
import sys

import torch


def write_safetensors(path, items, metadata):
    header = {"__metadata__": metadata}
    blobs, off = [], 0
    for name, t in items:
        t = t.detach().cpu().contiguous()
        if t.is_floating_point():
            t, dt = t.float(), "F32"
        else:
            t, dt = t.long(), "I64"
        b = t.numpy().tobytes()
        header[name] = {"dtype": dt, "shape": list(t.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("inp", nargs="?", help="checkpoint (.pth) with a state dict")
    ap.add_argument("out", help="safetensors file to write")
    ap.add_argument("--torchvision", help="torchvision model builder name instead of a file")
    ap.add_argument("--weights", help="weights enum member for --torchvision (e.g. DEFAULT)")
    ap.add_argument("--num-classes", type=int, default=None)
    a = ap.parse_args()
    if a.torchvision:
        import torchvision
        kw = {"weights": a.weights} if a.weights else {"weights": None}
        if a.num_classes:
            kw["num_classes"] = a.num_classes
        sd = torchvision.models.get_model(a.torchvision, **kw).state_dict()
        src = "torchvision:%s:%s" % (a.torchvision, a.weights)
    else:
        if not a.inp:
            sys.exit("torch2safetensors.py: give IN.pth or --torchvision NAME")
        sd = torch.load(a.inp, map_location="cpu")
        for key in ("model", "state_dict"):
            if isinstance(sd, dict) and key in sd and isinstance(sd[key], dict):
                sd = sd[key]
        src = a.inp
    items = [(k, v) for k, v in sd.items() if isinstance(v, torch.Tensor)]
    if not items:
        sys.exit("torch2safetensors.py: %s holds no tensors" % src)
    write_safetensors(a.out, items, {"format": "pt", "source": src})
    print("%s: %d tensors from %s" % (a.out, len(items), src))


if __name__ == "__main__":
    main()
