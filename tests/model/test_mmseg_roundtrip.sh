#!/bin/sh
# tests/model/test_mmseg_roundtrip.sh SEGTRAIN SRCDIR - segtrain and the real
# mmsegmentation 1.2.2 both ways, for each mmseg-named model of configs/
# (configs/cityscapes-deeplabv3-r50v1c.yaml: DeepLabV3 R-50-D8, and
# configs/cityscapes-deeplabv3plus-r50v1c.yaml: DeepLabV3+ R-50-D8), at base
# width 8 (ResNetV1c-50's full depth, the configs' heads and dilations), and
# DeepLabV3+ at the configs' full width 64 for step 2:
#  1. mmseg builds the model (MODELS.build through init_model), random
#     weights, non-trivial BN; mmengine's save_checkpoint writes it as mmseg's
#     runner does ({meta, state_dict}); mmseg's init_model reloads that file
#     and inference_model gives the reference logits on an image;
#  2. `segtrain convert` reads the .pth; `segtrain predict --config` on the
#     converted file gives mmseg's logits within 1e-5 relative;
#  3. `segtrain train` from the config file starts from it (model.pretrained,
#     pretrained_strict) and trains 3 steps (the logits must move);
#  4. `segtrain export --names mmseg` of the trained checkpoint loads into
#     mmseg's model with load_state_dict(strict=True), and inference_model
#     gives `segtrain predict`'s logits within 1e-5 relative.
# The mmseg side is scripts/check_mmseg.py in the venv of scripts/mmseg-venv
# (SEGTRAIN_MMSEG_VENV, default SRCDIR/.venv-mmseg); without it the test exits
# 77 (skipped) and says so.
set -eu
SEGTRAIN=$1
SRC=$2
VENV=${SEGTRAIN_MMSEG_VENV:-$SRC/.venv-mmseg}
if ! [ -x "$VENV/bin/python" ]; then
    echo "skip: no mmsegmentation venv at $VENV" \
        "(run scripts/mmseg-venv, or set SEGTRAIN_MMSEG_VENV)"
    exit 77
fi
MM="$VENV/bin/python $SRC/scripts/check_mmseg.py"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/sg_mmseg_roundtrip_XXXXXX")
trap 'rm -rf "$tmp"' EXIT
"$SEGTRAIN" synth --out "$tmp/data" --train 4 --val 1 --size 40x56 --seed 5 >/dev/null
img=$(find "$tmp/data/leftImg8bit/val" -name '*.png' | head -n 1)
sets="--set data.root=$tmp/data --set data.format=cityscapes --set data.train_split=train
      --set device=cpu --set threads=2 --set model.base_width=8 --set data.crop_size=[32,32]
      --set data.workers=0 --set train.batch_size=2 --set train.checkpoint_every=0
      --set train.eval_every=0 --set train.log_every=1"
rel_err() { # max |a - b| / max |b| of two .npy files
    "$VENV/bin/python" -c 'import sys, numpy as np
a, b = np.load(sys.argv[1]), np.load(sys.argv[2])
print(np.abs(a - b).max() / np.abs(b).max() if a.shape == b.shape else 1e9)' "$1" "$2"
}
archs=deeplabv3,deeplabv3plus
rc=0
$MM save --arch $archs,deeplabv3plus:64 --base-width 8 --image "$img" --dir "$tmp" \
    >"$tmp/save.log" 2>&1 || rc=$?
if [ $rc -eq 77 ]; then
    grep "^skip" "$tmp/save.log"
    exit 77
fi
[ $rc -eq 0 ] || { cat "$tmp/save.log"; echo "FAIL: the mmseg side (above)"; exit 1; }
grep "^mmseg" "$tmp/save.log"
for arch in deeplabv3 deeplabv3plus; do
    cfg="$SRC/configs/cityscapes-$arch-r50v1c.yaml"
    "$SEGTRAIN" convert "$tmp/$arch.pth" "$tmp/$arch.safetensors" 2>"$tmp/convert.log"
    grep -q "under 'state_dict'" "$tmp/convert.log" || { cat "$tmp/convert.log"; exit 1; }
    # shellcheck disable=SC2086
    "$SEGTRAIN" train --quiet --config "$cfg" $sets --set run_dir="$tmp/run-$arch" \
        --set model.pretrained="$tmp/$arch.safetensors" --set model.pretrained_strict=true \
        --set train.iters=3
    "$SEGTRAIN" predict --quiet --config "$tmp/run-$arch/config.yaml" \
        --checkpoint "$tmp/$arch.safetensors" --input "$img" --output "$tmp/a.png" \
        --save-logits "$tmp/$arch-conv.npy"
    e=$(rel_err "$tmp/$arch-conv.npy" "$tmp/$arch-ref.npy")
    echo "$arch: segtrain predict on the converted mmseg checkpoint:" \
        "max relative error $e (tolerance 1e-5)"
    "$VENV/bin/python" -c "import sys; sys.exit(0 if $e <= 1e-5 else 1)" ||
        { echo "FAIL: $arch: converted logits differ from mmseg's inference_model"; exit 1; }
    ck="$tmp/run-$arch/checkpoints/iter_00000003.safetensors"
    "$SEGTRAIN" predict --quiet --checkpoint "$ck" --input "$img" --output "$tmp/b.png" \
        --save-logits "$tmp/$arch-trained.npy"
    e=$(rel_err "$tmp/$arch-trained.npy" "$tmp/$arch-ref.npy")
    echo "$arch: 3 training steps moved the logits by $e (relative)"
    "$VENV/bin/python" -c "import sys; sys.exit(0 if $e > 1e-3 else 1)" ||
        { echo "FAIL: $arch: training did not change the model"; exit 1; }
    "$SEGTRAIN" export --quiet --checkpoint "$ck" --out "$tmp/$arch-back.safetensors" --names mmseg
done
# mmseg's DeepLabV3+ R-50-D8 at full width (424 tensors, 43666358 values):
# converted, predicted straight from the config file (strict loading)
"$SEGTRAIN" convert "$tmp/deeplabv3plus-w64.pth" "$tmp/w64.safetensors" 2>"$tmp/convert.log"
"$SEGTRAIN" predict --quiet --config "$SRC/configs/cityscapes-deeplabv3plus-r50v1c.yaml" \
    --set device=cpu --set threads=2 --checkpoint "$tmp/w64.safetensors" --input "$img" \
    --output "$tmp/w64.png" --save-logits "$tmp/w64.npy"
e=$(rel_err "$tmp/w64.npy" "$tmp/deeplabv3plus-w64-ref.npy")
echo "deeplabv3plus at width 64: segtrain predict on the converted mmseg checkpoint:" \
    "max relative error $e (tolerance 1e-5)"
"$VENV/bin/python" -c "import sys; sys.exit(0 if $e <= 1e-5 else 1)" ||
    { echo "FAIL: deeplabv3plus width 64: logits differ from mmseg's inference_model"; exit 1; }
rc=0
$MM load --arch $archs --base-width 8 --image "$img" --dir "$tmp" --tol 1e-5 \
    >"$tmp/load.log" 2>&1 || rc=$?
grep "^mmseg\|FAIL" "$tmp/load.log" || cat "$tmp/load.log"
[ $rc -eq 0 ] || { echo "FAIL: mmseg does not reproduce the exported models"; exit 1; }
echo "mmseg round trip passed"
