#!/usr/bin/python3
"""scripts/torch2safetensors.py - a PyTorch checkpoint (.pth) -> safetensors for
segtrain's model.pretrained, with PyTorch. It never downloads anything.

`segtrain convert IN.pth OUT.safetensors` does the same natively (no Python),
and is what the README recommends; this script is the PyTorch-side reference.

    /usr/bin/python3 scripts/torch2safetensors.py IN.pth OUT.safetensors
    /usr/bin/python3 scripts/torch2safetensors.py --torchvision deeplabv3_resnet50 \
        --num-classes 19 --aux-loss OUT.safetensors           (random init)
    /usr/bin/python3 scripts/torch2safetensors.py --torchvision resnet50 \
        --weights IMAGENET1K_V1 OUT.safetensors               (needs the file cached)

Takes a state dict (or a checkpoint holding one under "model" or "state_dict"),
converts floating tensors to float32 and integer ones to int64 (segtrain reads
F32 and I64 only), and writes them with their names unchanged: segtrain's loader
maps torchvision's backbone./classifier./aux_classifier. (and DDP's "module.",
and plain ImageNet ResNet names conv1./bn1./layerN.) onto its registry and
reports what it loaded, skipped or missed. No safetensors package is needed.

--torchvision NAME without --weights builds the model with weights=None and
weights_backbone=None (random init: nothing is fetched), passing --num-classes
and --aux-loss / --no-aux-loss. With --weights it converts torchvision's file
for those weights from the torch hub cache (torch.hub.get_dir()/checkpoints);
when the file is not there it stops and prints its URL to download yourself.
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


def torchvision_state_dict(a):
    import torchvision
    if a.weights:
        import os
        # the weights' own file, read from the cache: never fetched here
        w = torchvision.models.get_model_weights(a.torchvision)[a.weights]
        path = os.path.join(torch.hub.get_dir(), "checkpoints", os.path.basename(w.url))
        if not os.path.exists(path):
            sys.exit("torch2safetensors.py: %s is not in the torch hub cache (%s); download it "
                     "yourself:\n    %s\nthen convert that file: segtrain convert FILE OUT.safetensors"
                     % (w, path, w.url))
        return torch.load(path, map_location="cpu"), "torchvision:%s:%s" % (a.torchvision, a.weights)
    kw = {"weights": None}
    builder = torchvision.models.get_model_builder(a.torchvision)
    import inspect
    params = inspect.signature(builder).parameters
    if "weights_backbone" in params:
        kw["weights_backbone"] = None  # its default would download ImageNet weights
    if a.num_classes:
        kw["num_classes"] = a.num_classes
    if a.aux_loss is not None:
        if "aux_loss" not in params:
            sys.exit("torch2safetensors.py: %s has no aux_loss option" % a.torchvision)
        kw["aux_loss"] = a.aux_loss
    model = builder(**kw)
    return model.state_dict(), "torchvision:%s:random-init" % a.torchvision


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("inp", nargs="?", help="checkpoint (.pth) with a state dict")
    ap.add_argument("out", help="safetensors file to write")
    ap.add_argument("--torchvision", help="torchvision model builder name instead of a file")
    ap.add_argument("--weights", help="weights enum member for --torchvision (e.g. IMAGENET1K_V1); "
                    "its file must be in the torch hub cache")
    ap.add_argument("--num-classes", type=int, default=None)
    aux = ap.add_mutually_exclusive_group()
    aux.add_argument("--aux-loss", dest="aux_loss", action="store_true", default=None,
                     help="build the auxiliary FCN head (segmentation models)")
    aux.add_argument("--no-aux-loss", dest="aux_loss", action="store_false")
    a = ap.parse_args()
    if a.torchvision:
        if a.inp:
            sys.exit("torch2safetensors.py: give either IN.pth or --torchvision NAME, not both")
        sd, src = torchvision_state_dict(a)
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
