#!/bin/sh
# tests/train/test_export_torch.sh SEGTRAIN SRCDIR - an exported checkpoint
# loads in torchvision with strict=True and gives segtrain's logits
# (scripts/check_export.py), for a tiny resnet50 (base width 8, built from
# torchvision's classes) and for torchvision's own deeplabv3_resnet50 and
# fcn_resnet50 builders (full width, one step on 32x32 crops); then for a tiny
# FCN (torchvision's tree) and mmseg's DeepLabV3, FCN and DeepLabV3+ on ResNetV1c
# (exported with --names mmseg, loaded by make_golden.py's transcription of
# mmseg's EncoderDecoder), logits within 1e-5 relative. resnet18/34 are not checked here:
# torchvision's BasicBlock has no dilation, so at output stride 8 they have no
# torchvision counterpart. Exits 77 (skipped) where Debian's /usr/bin/python3
# has no torch.
set -eu
SEGTRAIN=$1
SRC=$2
. "$SRC/tests/torch_env.sh"
need_torch torch torchvision numpy yaml PIL
torch_tmp export_torch
tiny_data 40x56

NAMES=torchvision
TOL=1e-4
check() { # name, iterations, then --set overrides; $NAMES, $TOL
    name=$1
    tiny_train "$@"
    "$SEGTRAIN" export --quiet --checkpoint "$ck" --out "$tmp/$name.safetensors" --names "$NAMES"
    "$SEGTRAIN" predict --quiet --checkpoint "$ck" --input "$img" --output "$tmp/$name.png" \
        --save-logits "$tmp/$name.npy"
    "$PY" "$SRC/scripts/check_export.py" --weights "$tmp/$name.safetensors" \
        --config "$tmp/$name/config.yaml" --image "$img" --logits "$tmp/$name.npy" --tol "$TOL"
}

check tiny 2 $TINY_R50
check r50 1 --set model.backbone=resnet50 --set model.base_width=64 --set model.num_classes=19 \
    --set model.aspp_rates=[12,24,36] --set model.output_stride=8 --set data.crop_size=[32,32]
check fcn50 1 --set model.arch=fcn --set model.backbone=resnet50 --set model.base_width=64 \
    --set model.num_classes=19 --set model.output_stride=8 --set data.crop_size=[32,32]
TOL=1e-5
check fcn_tiny 2 $TINY_R50 --set model.arch=fcn
NAMES=mmseg
check mm_v1c 2 $TINY_R50 --set model.backbone=resnet50v1c --set model.names=mmseg
check mm_fcn_v1c 2 $TINY_R50 --set model.backbone=resnet50v1c --set model.names=mmseg \
    --set model.arch=fcn
# mmseg's DeepLabV3+ (DepthwiseSeparableASPPHead) on ResNetV1c-50/101 (the
# R-50/101-D8 it publishes) and on its plain ResNet-50 (7x7 stem)
check mm_plus_v1c 2 $TINY_R50 --set model.backbone=resnet50v1c --set model.names=mmseg \
    --set model.arch=deeplabv3plus
check mm_plus_v1c101 1 $TINY_R50 --set model.backbone=resnet101v1c --set model.names=mmseg \
    --set model.arch=deeplabv3plus
check mm_plus_r50 1 $TINY_R50 --set model.names=mmseg --set model.arch=deeplabv3plus
# the other system's names are refused: mmseg's heads have no torchvision names
if "$SEGTRAIN" export --quiet --checkpoint "$ck" --out "$tmp/x.safetensors" \
    --names torchvision 2>"$tmp/err"; then
    echo "FAIL: export --names torchvision of an mmseg model succeeded"
    exit 1
fi
grep -q "Use --names mmseg" "$tmp/err" || { cat "$tmp/err"; exit 1; }
echo "export check passed"
