#!/usr/bin/python3
"""tests/train/test_loss_torch.py - segtrain's weighted cross-entropy
(backend op ce_weighted, CPU) against PyTorch's
F.cross_entropy(weight=w, ignore_index=255, reduction='mean'): the loss and
its gradient on the fixed logits `test_loss_options dump` prints (labels
and weights rebuilt here from the same formulas). Exits 77 (skipped) when torch is missing.
Usage: test_loss_torch.py PATH-TO-test_loss_options"""
import math
import os
import subprocess
import sys

try:
    import torch
    import torch.nn.functional as F
except ImportError:
    # The Python tests/torch_env.sh would pick (SEGTRAIN_TORCH_PYTHON, the
    # venvs of scripts/mmseg-venv and scripts/torch-venv), once.
    src = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    for py in (os.environ.get("SEGTRAIN_TORCH_PYTHON"),
               os.path.join(os.environ.get("SEGTRAIN_MMSEG_VENV", os.path.join(src, ".venv-mmseg")), "bin", "python"),
               os.path.join(os.environ.get("SEGTRAIN_TORCH_VENV", os.path.join(src, ".venv-torch")), "bin", "python")):
        if py and os.access(py, os.X_OK) and not os.environ.get("SG_TORCH_REEXEC"):
            os.environ["SG_TORCH_REEXEC"] = "1"
            os.execv(py, [py] + sys.argv)
    print("torch is not installed for", sys.executable, "- skipped")
    sys.exit(77)

N, C, HW, H, W = 2, 6, 35, 5, 7
out = subprocess.run([sys.argv[1], "dump"], check=True, capture_output=True, text=True).stdout
lines = out.split("\n")
loss = float(lines[0].split()[1])
grad = [float(x.split()[1]) for x in lines if x.startswith("g ")]

logits = [float(x.split()[1]) for x in lines if x.startswith("l ")]
l = torch.tensor(logits, dtype=torch.float32).reshape(N, C, H, W).requires_grad_(True)
y = torch.tensor([255 if p % 5 == 4 else (7 * p) % C for p in range(N * HW)]).reshape(N, H, W)
w = torch.tensor([0.25 * (k + 1) for k in range(C)], dtype=torch.float32)
ref = F.cross_entropy(l, y, weight=w, ignore_index=255, reduction="mean")
ref.backward()
g = l.grad.flatten().tolist()
fail = 0
if abs(loss - ref.item()) > 1e-6 * abs(ref.item()):
    print("FAIL loss: segtrain %.9g, torch %.9g" % (loss, ref.item()))
    fail = 1
gmax = max(abs(v) for v in g)
worst = max(abs(a - b) for a, b in zip(grad, g)) / gmax if len(grad) == len(g) else float("inf")
if len(grad) != len(g) or worst > 1e-5:
    print("FAIL gradient: %d values (torch %d), max rel diff %.3g" % (len(grad), len(g), worst))
    fail = 1
print("loss segtrain %.9g torch %.9g; gradient max rel diff %.3g" % (loss, ref.item(), worst))
sys.exit(fail)
