#!/bin/sh
# tests/train/test_export_onnx.sh SEGTRAIN SRCDIR - `segtrain export --format
# onnx` checked by the ONNX tools (scripts/check_onnx.py): for tiny
# deeplabv3 networks on every backbone (resnet18/34/50/101, base width 8,
# output stride 8; resnet50 also 16), BN folded (opset 17) and kept (opset 11,
# the lowest the resize semantics allow), onnx.checker.check_model
# (full_check) passes and ONNX Runtime's CPU provider reproduces `segtrain
# predict --save-logits` within 1e-4 relative and the argmax on >= 99.99% of
# the pixels, at batch 1 and 3 and at two image sizes (dynamic H/W), and at
# a fixed size and batch; torchvision's deeplabv3 / lraspp_mobilenet_v3_large
# (narrowed) the same way. resnet50 also: uint8 NHWC input normalised in the
# graph with the argmax label map as output (opset 21, external data), opset
# 13, the EMA weights (--ema), and a torchvision-named export against
# PyTorch's own torch.onnx.export of the same weights (within 1e-4). Refused
# with a message and exit 2: opsets 10 and 22, --fp16, --ema without EMA weights.
# Exits 77 (skipped) when scripts/onnx-venv's environment is missing
# (SEGTRAIN_ONNX_VENV, default SRCDIR/.venv-onnx): run scripts/onnx-venv.
set -eu
SEGTRAIN=$1
SRC=$2
. "$SRC/tests/torch_env.sh"
VENV=${SEGTRAIN_ONNX_VENV:-$SRC/.venv-onnx}
OPY=$VENV/bin/python
if ! [ -x "$OPY" ] || ! "$OPY" -c 'import onnx, onnxruntime, numpy, PIL' 2>/dev/null; then
    echo "skip: no onnx/onnxruntime in $VENV (run scripts/onnx-venv)"
    exit 77
fi
torch_tmp export_onnx
tiny_data 40x56
# image sets of one size each, the logits beside each image (predict_set)
mkdir -p "$tmp/A" "$tmp/B"
cp $(find "$tmp/data/leftImg8bit" -name '*.png') "$tmp/A/"
"$SEGTRAIN" synth --out "$tmp/data2" --train 1 --val 2 --size 52x36 --seed 6 >/dev/null
cp $(find "$tmp/data2/leftImg8bit/val" -name '*.png') "$tmp/B/"

predict_set() { # checkpoint, set dir, logits dir, then --set overrides
    c=$1 d=$2 l=$3
    shift 3
    mkdir -p "$l"
    cp "$d"/*.png "$l/"
    "$SEGTRAIN" predict --quiet --checkpoint "$c" --input "$d" --output "$tmp/pred" \
        --save-logits "$l" "$@"
}

export_onnx() { # out name, then export options
    o=$1
    shift
    "$SEGTRAIN" export --quiet --checkpoint "$ck" --format onnx --out "$tmp/$o.onnx" "$@"
    models="$models $tmp/$o.onnx"
}

refused() { # expected text, then export options
    want=$1
    shift
    set +e
    "$SEGTRAIN" export --quiet --checkpoint "$ck" --format onnx --out "$tmp/refused.onnx" "$@" \
        2>"$tmp/err.txt"
    rc=$?
    set -e
    if [ "$rc" != 2 ] || ! grep -q -- "$want" "$tmp/err.txt" || [ -e "$tmp/refused.onnx" ]; then
        echo "FAIL: export $* exited $rc (want 2, no file, a message with '$want'):"
        cat "$tmp/err.txt"
        exit 1
    fi
    echo "refused as expected: $*"
}

check_arch() { # run name, iterations, then --set overrides
    name=$1
    tiny_train "$@"
    models=
    export_onnx "$name-fold17" --opset 17 --dynamic-hw --batch dynamic
    export_onnx "$name-bn11" --opset 11 --dynamic-hw --batch dynamic --no-fold-bn
    rm -rf "$tmp/LA" "$tmp/LB"
    predict_set "$ck" "$tmp/A" "$tmp/LA"
    predict_set "$ck" "$tmp/B" "$tmp/LB"
}

for arch in resnet18 resnet34 resnet101; do
    check_arch "$arch" 1 --set model.backbone=$arch --set model.base_width=8 \
        --set model.num_classes=19 --set model.aspp_rates=[2,4,6] --set data.crop_size=[32,32]
    "$OPY" "$SRC/scripts/check_onnx.py" --images "$tmp/LA" --images "$tmp/LB" $models
done

# the other heads and backbones: torchvision's FCN, mmseg's DeepLabV3, FCN and
# DeepLabV3+ (depthwise convs: Conv group = channels) on ResNetV1c (their
# Dropout2d is the identity in the graph)
for v in "fcn:--set model.arch=fcn" \
    "mmv1c:--set model.backbone=resnet50v1c --set model.names=mmseg" \
    "mmfcn:--set model.backbone=resnet50v1c --set model.names=mmseg --set model.arch=fcn" \
    "mmplus:--set model.backbone=resnet50v1c --set model.names=mmseg --set model.arch=deeplabv3plus"; do
    # shellcheck disable=SC2086
    check_arch "${v%%:*}" 1 $TINY_R50 ${v#*:}
    "$OPY" "$SRC/scripts/check_onnx.py" --images "$tmp/LA" --images "$tmp/LB" $models
done

# torchvision's MobileNetV3 models: grouped convs, HardSwish (opset 17; x *
# HardSigmoid(x) at opset 11), squeeze-excitation and LR-ASPP's Sigmoid gate
# (Mul), the LR-ASPP sum (Add); BN eps 0.001 in the backbone
MNV3_ONNX="--set model.backbone=mobilenet_v3_large --set model.output_stride=16
           --set model.width_mult=0.25 --set model.base_width=8 --set model.num_classes=19
           --set data.crop_size=[32,32]"
for v in "mnv3dl:--set model.arch=deeplabv3 --set model.aspp_rates=[2,3]" \
    "mnv3lr:--set model.arch=lraspp --set model.aux_head=false --set train.head_lr_prefixes=[]"; do
    # shellcheck disable=SC2086
    check_arch "${v%%:*}" 2 $MNV3_ONNX ${v#*:}
    "$OPY" "$SRC/scripts/check_onnx.py" --images "$tmp/LA" --images "$tmp/LB" $models
done

# resnet50 at output stride 16, both forms
check_arch r50os16 1 $TINY_R50 --set model.output_stride=16
"$OPY" "$SRC/scripts/check_onnx.py" --images "$tmp/LA" --images "$tmp/LB" $models

# resnet50 (output stride 8, EMA weights kept): every option
check_arch r50 2 $TINY_R50 --set train.ema_decay=0.5
export_onnx r50-fixed --size 40x56 --batch 1
export_onnx r50-fixed3 --size 40x56 --batch 3 --no-fold-bn
export_onnx r50-u8 --opset 21 --dynamic-hw --batch dynamic --include-normalize --with-argmax \
    --external-data
export_onnx r50-op13 --opset 13 --dynamic-hw --batch dynamic
[ -s "$tmp/r50-u8.onnx.data" ] || { echo "FAIL: --external-data wrote no r50-u8.onnx.data"; exit 1; }
# the trained weights: predict with eval.use_ema false
rm -rf "$tmp/LA" "$tmp/LB"
predict_set "$ck" "$tmp/A" "$tmp/LA" --set eval.use_ema=false
predict_set "$ck" "$tmp/B" "$tmp/LB" --set eval.use_ema=false
"$OPY" "$SRC/scripts/check_onnx.py" --images "$tmp/LA" --images "$tmp/LB" $models
# the EMA weights
models=
export_onnx r50-ema --ema --dynamic-hw --batch dynamic
rm -rf "$tmp/LA" "$tmp/LB"
predict_set "$ck" "$tmp/A" "$tmp/LA" --set eval.use_ema=true
predict_set "$ck" "$tmp/B" "$tmp/LB" --set eval.use_ema=true
"$OPY" "$SRC/scripts/check_onnx.py" --images "$tmp/LA" --images "$tmp/LB" $models

# metadata_props
"$OPY" - "$tmp/r50-ema.onnx" "$tmp/r50-u8.onnx" <<'EOF'
import json, sys, onnx
for path in sys.argv[1:]:
    md = {p.key: p.value for p in onnx.load(path, load_external_data=False).metadata_props}
    names = json.loads(md["class_names"])
    assert len(names) == 19 and names[0] == "road", names
    assert json.loads(md["palette"])[0] == [128, 64, 128], md["palette"]
    assert json.loads(md["mean"]) == [0.485, 0.456, 0.406], md["mean"]
    assert json.loads(md["std"]) == [0.229, 0.224, 0.225], md["std"]
    assert json.loads(md["eval_settings"])["data.crop_size"] == [32, 32], md["eval_settings"]
    assert len(md["run_id"]) == 16 and md["iter"] == "2", md
    assert md["arch"] == "deeplabv3_resnet50" and md["segtrain_version"], md
    print("metadata ok:", path, sorted(md))
assert md["output"].startswith("labels") and md["input"].startswith("uint8"), md
EOF

# without --size or --dynamic-hw: the training crop (data.crop_size 32x32), batch 1
"$SEGTRAIN" export --quiet --checkpoint "$ck" --format onnx --out "$tmp/r50-crop.onnx"
"$OPY" - "$tmp/r50-crop.onnx" <<'EOF'
import sys, onnx
g = onnx.load(sys.argv[1]).graph
dims = [[d.dim_value if d.HasField("dim_value") else d.dim_param for d in v.type.tensor_type.shape.dim]
        for v in (g.input[0], g.output[0])]
assert dims == [[1, 3, 32, 32], [1, 19, 32, 32]], dims
print("default size: input/output", dims)
EOF

# --ema exported other weights than the trained ones (same graph, same names)
"$OPY" - "$tmp/r50-ema.onnx" "$tmp/r50-fold17.onnx" <<'EOF'
import sys, numpy as np, onnx
from onnx import numpy_helper
a, b = ({t.name: numpy_helper.to_array(t) for t in onnx.load(p).graph.initializer}
        for p in sys.argv[1:])
assert sorted(a) == sorted(b), "EMA and trained exports name different initializers"
differ = sum(not np.array_equal(a[k], b[k]) for k in a)
assert differ > 0, "the EMA export holds the trained weights"
print("EMA export differs from the trained one in %d of %d initializers" % (differ, len(a)))
EOF

# torchvision-named export vs PyTorch's own torch.onnx.export of the same weights
if "$OPY" -c 'import torch, torchvision, yaml' 2>/dev/null; then
    "$SEGTRAIN" export --quiet --checkpoint "$ck" --out "$tmp/tv.safetensors" --names torchvision
    "$SEGTRAIN" export --quiet --checkpoint "$ck" --format onnx --names torchvision \
        --dynamic-hw --batch dynamic --out "$tmp/tvnames.onnx"
    "$OPY" "$SRC/scripts/torch_onnx_export.py" --weights "$tmp/tv.safetensors" \
        --config "$tmp/r50/config.yaml" --out "$tmp/torch.onnx" 2>"$tmp/torch_export.log" ||
        { cat "$tmp/torch_export.log"; exit 1; }
    "$OPY" "$SRC/scripts/check_onnx.py" --images "$tmp/A" --images "$tmp/B" \
        --compare "$tmp/tvnames.onnx" "$tmp/torch.onnx"
else
    echo "note: no torch in $OPY: torch.onnx.export comparison not run"
fi

# refusals
refused "align_corners=False" --opset 10
refused "use 11..21" --opset 22
refused "float16" --fp16
refused "expected 1..65536 or dynamic" --batch 0
refused "height and width must be" --size 12xq
refused "not both" --size 32x32 --dynamic-hw
ck_noema=$tmp/r50os16/checkpoints/iter_00000001.safetensors
ck_keep=$ck
ck=$ck_noema
refused "no EMA weights" --ema
ck=$ck_keep
echo "onnx export check passed"
