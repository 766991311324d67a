#!/usr/bin/python3
"""scripts/make_optim_golden.py - PyTorch golden fixtures for the optimizer.

Run with a python that has torch (>= 2.0: AdamW's lerp form):

    python3 scripts/make_optim_golden.py [outdir=tests/fixtures]

Writes golden_optim_<case>.safetensors for three cases: adamw (no
clipping), adamw_clip and sgd_clip. Each holds five float32 parameters
in state-dict order, one of them under the frozen prefix encoder.stem (not
given to torch's optimizer: requires_grad False), one under aux_head.
(its own parameter group at lr * head_lr_mult), and three steps of:

  param/<name>               the parameters before the first step
  grad/<k>/<name>            the gradients of step k (the frozen one too:
                             the C side must ignore it)
  after/<k>/<name>           the parameters after step k
  exp_avg/<k>/<name>, exp_avg_sq/<k>/<name>   AdamW's state after step k
  momentum/<k>/<name>        SGD's momentum buffer after step k
  norm/<k>                   clip_grad_norm_'s total norm before clipping

torch.optim.AdamW / SGD (default single-tensor path on the CPU, float32)
and torch.nn.utils.clip_grad_norm_ do the steps; the learning rate changes
every step as a schedule would (group lr = lr_k * mult). Metadata: the
hyper-parameters (optimizer, lr as a comma list, weight_decay, beta1,
beta2, eps, momentum, head_lr_mult, clip_grad_norm, freeze, params, steps).
No safetensors package is needed: the format is written by hand.
"""
import json
import os
import struct
import sys

import torch

PARAMS = [("encoder.stem.weight", (6,)), ("encoder.conv1.weight", (4, 3, 3, 3)),
          ("encoder.bn1.bias", (4,)), ("decoder.4.weight", (5, 4, 1, 1)),
          ("aux_head.4.weight", (5, 4, 1, 1))]
FROZEN = "encoder.stem"
LRS = [0.01, 0.007, 0.004]
HEAD_MULT = 10.0
CASES = {
    "adamw": dict(optimizer="adamw", weight_decay=0.05, betas=(0.9, 0.95), eps=1e-8,
                  clip=0.0, grad_scale=(1.0, 0.1, 3.0)),
    "adamw_clip": dict(optimizer="adamw", weight_decay=0.05, betas=(0.9, 0.999), eps=1e-6,
                       clip=2.0, grad_scale=(1.0, 0.1, 3.0)),
    "sgd_clip": dict(optimizer="sgd", weight_decay=1e-4, momentum=0.9, clip=2.0,
                     grad_scale=(1.0, 0.1, 3.0)),
}


def write_safetensors(path, tensors, metadata):
    header = {"__metadata__": {k: str(v) for k, v in metadata.items()}}
    blobs, off = [], 0
    for name, t in tensors:
        t = t.detach().contiguous().cpu()
        assert t.dtype == torch.float32, name
        b = t.numpy().tobytes()
        header[name] = {"dtype": "F32", "shape": list(t.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def make_case(outdir, case, c):
    g = torch.Generator().manual_seed(7)
    params = {n: torch.nn.Parameter(torch.randn(s, generator=g)) for n, s in PARAMS}
    out = [("param/" + n, p.detach().clone()) for n, p in params.items()]
    params["encoder.stem.weight"].requires_grad_(False)
    trained = [n for n, _ in PARAMS if not n.startswith(FROZEN + ".")]
    base = [params[n] for n in trained if not n.startswith("aux_head.")]
    head = [params[n] for n in trained if n.startswith("aux_head.")]
    groups = [{"params": base, "mult": 1.0}, {"params": head, "mult": HEAD_MULT}]
    if c["optimizer"] == "adamw":
        opt = torch.optim.AdamW(groups, lr=LRS[0], betas=c["betas"], eps=c["eps"],
                                weight_decay=c["weight_decay"])
    else:
        opt = torch.optim.SGD(groups, lr=LRS[0], momentum=c["momentum"],
                              weight_decay=c["weight_decay"])
    for k, lr in enumerate(LRS):
        for gr in opt.param_groups:
            gr["lr"] = lr * gr["mult"]
        grads = {n: torch.randn(s, generator=g) * c["grad_scale"][k] for n, s in PARAMS}
        out += [("grad/%d/%s" % (k, n), grads[n].clone()) for n, _ in PARAMS]
        for n in trained:
            params[n].grad = grads[n].clone()
        if c["clip"] > 0:
            norm = torch.nn.utils.clip_grad_norm_([params[n] for n in trained], c["clip"])
            out.append(("norm/%d" % k, norm.reshape(1).float()))
        opt.step()
        out += [("after/%d/%s" % (k, n), params[n].detach().clone()) for n, _ in PARAMS]
        for n in trained:
            st = opt.state[params[n]]
            for key in ("exp_avg", "exp_avg_sq", "momentum_buffer"):
                if key in st:
                    name = "momentum" if key == "momentum_buffer" else key
                    out.append(("%s/%d/%s" % (name, k, n), st[key].clone()))
    meta = {"optimizer": c["optimizer"], "lr": ",".join(repr(x) for x in LRS),
            "weight_decay": repr(c["weight_decay"]), "head_lr_mult": repr(HEAD_MULT),
            "clip_grad_norm": repr(c["clip"]), "freeze": FROZEN,
            "params": ",".join(n for n, _ in PARAMS), "steps": str(len(LRS)),
            "torch": torch.__version__}
    if c["optimizer"] == "adamw":
        meta.update(beta1=repr(c["betas"][0]), beta2=repr(c["betas"][1]), eps=repr(c["eps"]))
    else:
        meta.update(momentum=repr(c["momentum"]))
    path = os.path.join(outdir, "golden_optim_%s.safetensors" % case)
    write_safetensors(path, out, meta)
    print("wrote", path, len(out), "tensors")


def main():
    outdir = sys.argv[1] if len(sys.argv) > 1 else "tests/fixtures"
    torch.manual_seed(0)
    for case, c in CASES.items():
        make_case(outdir, case, c)


if __name__ == "__main__":
    main()
