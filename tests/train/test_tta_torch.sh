#!/bin/sh
# tests/train/test_tta_torch.sh SEGTRAIN SRCDIR - test-time augmentation
# against PyTorch (scripts/check_tta.py): a tiny resnet50 (base width 8)
# trained 2 steps, exported with torchvision names; `predict` with
# eval.scales 0.65,1,1.25 and eval.flip saves the log of its averaged
# probabilities, which must equal mmseg's aug_test computed by torchvision's
# DeepLabV3 on the export within 1e-5. Exits 77 (skipped) where Debian's
# /usr/bin/python3 has no torch.
set -eu
SEGTRAIN=$1
SRC=$2
. "$SRC/tests/torch_env.sh"
need_torch torch torchvision numpy yaml PIL
torch_tmp tta_torch
tiny_data 36x52
tiny_train run 2 --set train.lr=0.01 $TINY_R50
"$SEGTRAIN" export --quiet --checkpoint "$ck" --out "$tmp/tv.safetensors" --names torchvision
"$SEGTRAIN" predict --quiet --checkpoint "$ck" --input "$img" --output "$tmp/p.png" \
    --save-logits "$tmp/p.npy" --set 'eval.scales=[0.65, 1.0, 1.25]' --set eval.flip=true
"$PY" "$SRC/scripts/check_tta.py" --weights "$tmp/tv.safetensors" --config "$tmp/run/config.yaml" \
    --image "$img" --logprobs "$tmp/p.npy" --scales 0.65,1.0,1.25 --flip --min-spread 0.05
echo "TTA torch check passed"
