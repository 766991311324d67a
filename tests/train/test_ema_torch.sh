#!/bin/sh
# tests/train/test_ema_torch.sh SEGTRAIN SRCDIR - `export --ema --names
# torchvision` of a run with an EMA loads in torchvision with strict=True and
# gives the logits `segtrain predict` computes from the checkpoint's EMA
# (eval.use_ema, the default), via scripts/check_export.py, on a tiny
# resnet50 (base width 8). Also: the EMA export differs from the plain one.
# Exits 77 (skipped) where Debian's /usr/bin/python3 has no torch.
set -eu
SEGTRAIN=$1
SRC=$2
. "$SRC/tests/torch_env.sh"
need_torch torch torchvision numpy yaml PIL
torch_tmp ema_torch
tiny_data 40x56
tiny_train run 3 --set train.lr=0.05 --set train.ema_decay=0.5 $TINY_R50
"$SEGTRAIN" export --quiet --checkpoint "$ck" --out "$tmp/ema.safetensors" --names torchvision --ema
"$SEGTRAIN" export --quiet --checkpoint "$ck" --out "$tmp/plain.safetensors" --names torchvision
"$SEGTRAIN" predict --quiet --checkpoint "$ck" --input "$img" --output "$tmp/ema.png" \
    --save-logits "$tmp/ema.npy"
"$PY" "$SRC/scripts/check_export.py" --weights "$tmp/ema.safetensors" \
    --config "$tmp/run/config.yaml" --image "$img" --logits "$tmp/ema.npy"
"$PY" - "$SRC/scripts" "$tmp/ema.safetensors" "$tmp/plain.safetensors" <<'PYEOF'
import sys
sys.path.insert(0, sys.argv[1])
from check_export import read_safetensors
a, b = read_safetensors(sys.argv[2]), read_safetensors(sys.argv[3])
assert a.keys() == b.keys(), "the EMA export has other keys than the plain one"
differ = [k for k in a if a[k].is_floating_point() and not (a[k] == b[k]).all()]
assert differ, "the EMA export equals the plain weights"
print("EMA export: %d tensors, %d differ from the trained weights" % (len(a), len(differ)))
PYEOF
echo "ema export check passed"
