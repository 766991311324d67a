#!/usr/bin/python3
"""scripts/make_pth_fixtures.py - PyTorch checkpoint fixtures for `segtrain
convert` (io/pth.h) and tests/model/test_pth.c.

Run with Debian's python (torch 1.13, torchvision 0.14):

    /usr/bin/python3 scripts/make_pth_fixtures.py [outdir=tests/fixtures/pth]

Every .pth is written by torch.save itself; next to it, <name>.expected.
safetensors holds what the converter must produce, computed here with torch
(floating tensors as float32 with .float(), integer and bool ones as int64
with .long(), made contiguous), under the same names and in the same order.

  dtypes.pth         an OrderedDict of tiny tensors of every storage type
                     (float32/64/16, bfloat16, int64/32/16/8, uint8, bool), a
                     0-dim tensor, an empty one, a transposed (non-contiguous)
                     one, a narrowed one (storage offset), two views of one
                     storage, an expanded one (stride 0)
  dtypes_legacy.pth  the same dict, saved with the legacy (pre-1.6, non-zip)
                     serialization
  wrapped.pth        {"model": a module's state_dict (with its _metadata, set
                     by a BUILD opcode), "epoch": 7, "optimizer": {...},
                     "meta": nested dicts, lists, floats, strings, bools, None}
  state_dict.pth     {"state_dict": OrderedDict}
  tiny_deeplab.pth   the state_dict of a tiny DeepLabV3 built from
                     torchvision's own classes (scripts/make_golden.py's
                     build(): resnet50, blocks 1,1,2,1, base width 2, output
                     stride 8, ASPP rates 2,3, 3 classes, aux head); its
                     expected file also holds "input" [1,3,20,24] and
                     "eval_out" (eval-mode logits, float64 reference) and the
                     network options as metadata, so the test loads the
                     converted file strictly into segtrain and compares logits
  evil_system.pth    torch.save of an object whose __reduce__ is os.system:
                     data.pkl holds GLOBAL posix.system + REDUCE. Loading it
                     with pickle would run a command; segtrain must refuse it.
"""
import collections
import json
import os
import struct
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def write_safetensors(path, items, metadata):
    """items: (name, tensor); the converter's dtype rules."""
    header = {"__metadata__": {k: str(v) for k, v in metadata.items()}}
    blobs, off = [], 0
    for name, t in items:
        t = t.detach().cpu()
        if t.is_floating_point():
            t, dt = t.float(), "F32"
        else:
            t, dt = t.long(), "I64"
        b = t.contiguous().numpy().tobytes()
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


def dtypes_dict():
    g = torch.Generator().manual_seed(5)
    sd = collections.OrderedDict()
    sd["f32"] = torch.randn(2, 3, generator=g)
    sd["f64"] = torch.randn(3, generator=g, dtype=torch.float64) * 1e3
    sd["f16"] = (torch.randn(4, generator=g) * 100).half()
    sd["bf16"] = torch.randn(2, 2, generator=g).bfloat16()
    sd["i64"] = torch.tensor([-(2 ** 40), 0, 7, 2 ** 62], dtype=torch.int64)
    sd["i32"] = torch.tensor([-5, 2 ** 30, 3], dtype=torch.int32)
    sd["i16"] = torch.tensor([-300, 300], dtype=torch.int16)
    sd["i8"] = torch.tensor([-128, 127, 1], dtype=torch.int8)
    sd["u8"] = torch.tensor([0, 200, 255], dtype=torch.uint8)
    sd["bool"] = torch.tensor([True, False, True])
    sd["scalar"] = torch.tensor(1234, dtype=torch.int64)  # like num_batches_tracked
    sd["empty"] = torch.zeros(0, 3)
    base = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    sd["transposed"] = base.t()  # strides (1, 4)
    sd["narrowed"] = torch.arange(10, dtype=torch.float32)[3:7]  # storage offset 3
    big = torch.randn(4, 5, generator=g)
    sd["view_a"] = big[1:3, 1:4]  # offset 6, strides (5, 1): one storage...
    sd["view_b"] = big[:, 2]  # ...shared with this one
    sd["expanded"] = torch.tensor([1.5, -2.5]).reshape(2, 1).expand(2, 3)  # stride 0
    sd["rank4"] = torch.randn(2, 1, 3, 2, generator=g).permute(0, 3, 1, 2)
    return sd


class Evil:
    def __reduce__(self):
        return (os.system, ("echo segtrain-pwned > /tmp/segtrain_pwned",))


def tiny_deeplab():
    import make_golden
    cfg = {"backbone": "resnet50", "blocks": [1, 1, 2, 1], "base_width": 2,
           "output_stride": 8, "aspp_rates": [2, 3], "num_classes": 3, "aux_head": 1}
    torch.manual_seed(11)
    model = make_golden.build(cfg)
    make_golden.randomize_bn(model, torch.Generator().manual_seed(12))
    model.eval()
    x = torch.rand(1, 3, 20, 24, generator=torch.Generator().manual_seed(13))
    with torch.no_grad():
        ref = model.double()(x.double())["out"].float()
    model = model.float()
    return cfg, model.state_dict(), x, ref


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "tests/fixtures/pth"
    os.makedirs(out, exist_ok=True)
    meta = {"producer": "scripts/make_pth_fixtures.py", "torch": torch.__version__}

    sd = dtypes_dict()
    torch.save(sd, os.path.join(out, "dtypes.pth"))
    torch.save(sd, os.path.join(out, "dtypes_legacy.pth"), _use_new_zipfile_serialization=False)
    write_safetensors(os.path.join(out, "dtypes.expected.safetensors"), list(sd.items()), meta)

    cfg, tiny_sd, x, ref = tiny_deeplab()
    opts = dict(meta, **{k: (",".join(map(str, v)) if isinstance(v, list) else v)
                         for k, v in cfg.items()})
    torch.save(tiny_sd, os.path.join(out, "tiny_deeplab.pth"))
    write_safetensors(os.path.join(out, "tiny_deeplab.expected.safetensors"),
                      list(tiny_sd.items()) + [("input", x), ("eval_out", ref)], opts)

    # a wrapper around a module's state_dict (it carries _metadata: BUILD)
    small = torch.nn.Sequential(torch.nn.Conv2d(2, 3, 1), torch.nn.BatchNorm2d(3))
    with torch.no_grad():
        small[1].running_mean.copy_(torch.tensor([0.5, -1.0, 2.0]))
    msd = small.state_dict()
    opt = torch.optim.SGD(small.parameters(), lr=0.1, momentum=0.9)
    wrapped = {"model": msd, "epoch": 7, "optimizer": opt.state_dict(),
               "meta": {"lr": 0.125, "name": "tiny", "ok": True, "none": None,
                        "list": [1, -2, 3.5, "x", (4, 5)], "big": 2 ** 70}}
    torch.save(wrapped, os.path.join(out, "wrapped.pth"))
    write_safetensors(os.path.join(out, "wrapped.expected.safetensors"), list(msd.items()), meta)
    torch.save({"state_dict": sd}, os.path.join(out, "state_dict.pth"))

    torch.save(Evil(), os.path.join(out, "evil_system.pth"))
    for f in sorted(os.listdir(out)):
        print("%s: %d bytes" % (os.path.join(out, f), os.path.getsize(os.path.join(out, f))))


if __name__ == "__main__":
    main()
