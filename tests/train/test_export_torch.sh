#!/bin/sh
# tests/train/test_export_torch.sh SEGTRAIN SRCDIR - an exported checkpoint
# loads in torchvision with strict=True and gives segtrain's logits
# (scripts/check_export.py), for a tiny resnet50 (base width 8, built from
# torchvision's classes) and for torchvision's own deeplabv3_resnet50 builder
# (full width, one step on 32x32 crops). resnet18/34 are not checked here:
# torchvision's BasicBlock has no dilation, so at output stride 8 they have no
# torchvision counterpart. Exits 77 (skipped) where Debian's /usr/bin/python3
# has no torch.
set -eu
SEGTRAIN=$1
SRC=$2
PY=/usr/bin/python3
if ! [ -x "$PY" ] || ! "$PY" -c "import torch, torchvision, numpy, yaml, PIL" 2>/dev/null; then
    echo "skip: /usr/bin/python3 has no torch/torchvision/numpy/yaml/PIL"
    exit 77
fi
tmp=$(mktemp -d "${TMPDIR:-/tmp}/sg_export_torch_XXXXXX")
trap 'rm -rf "$tmp"' EXIT
"$SEGTRAIN" synth --out "$tmp/data" --train 4 --val 1 --size 40x56 --seed 5 >/dev/null
img=$(find "$tmp/data/leftImg8bit/val" -name '*.png' | head -n 1)

check() { # name, iterations, then --set overrides
    name=$1
    iters=$2
    shift 2
    "$SEGTRAIN" train --quiet --set run_dir="$tmp/$name" --set data.root="$tmp/data" \
        --set data.format=cityscapes --set data.train_split=train \
        --set train.iters="$iters" --set train.batch_size=2 --set train.checkpoint_every=0 \
        --set train.log_every=1 --set data.workers=0 --set threads=2 "$@"
    ck="$tmp/$name/checkpoints/iter_$(printf %08d "$iters").safetensors"
    "$SEGTRAIN" export --quiet --checkpoint "$ck" --out "$tmp/$name.safetensors" --names torchvision
    "$SEGTRAIN" predict --quiet --checkpoint "$ck" --input "$img" --output "$tmp/$name.png" \
        --save-logits "$tmp/$name.npy"
    "$PY" "$SRC/scripts/check_export.py" --weights "$tmp/$name.safetensors" \
        --config "$tmp/$name/config.yaml" --image "$img" --logits "$tmp/$name.npy"
}

check tiny 2 --set model.backbone=resnet50 --set model.base_width=8 --set model.num_classes=19 \
    --set model.aspp_rates=[2,4,6] --set data.crop_size=[32,32]
check r50 1 --set model.backbone=resnet50 --set model.base_width=64 --set model.num_classes=19 \
    --set model.aspp_rates=[12,24,36] --set model.output_stride=8 --set data.crop_size=[32,32]
echo "export check passed"
