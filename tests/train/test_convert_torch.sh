#!/bin/sh
# tests/train/test_convert_torch.sh SEGTRAIN SRCDIR - `segtrain convert` on a
# torch.save'd torchvision deeplabv3_resnet50(num_classes=19, aux_loss=True)
# state_dict (random init, weights=None, weights_backbone=None: nothing is
# downloaded; BN running statistics randomised so eval mode matters):
#  1. convert writes a safetensors file holding the same 370 tensors;
#  2. `segtrain train` starts from it with model.pretrained and
#     model.pretrained_strict: true (one step at lr 0 with frozen BN
#     statistics, so the checkpoint keeps the weights), and `segtrain predict`
#     from that checkpoint gives torchvision's eval logits on an image within
#     1e-5 relative (torchvision in float64);
#  3. predict straight from the converted file (--config, strict loading)
#     gives the same logits;
#  4. torchvision's ImageNet classifier resnet50 (random init), saved in the
#     legacy (pre-1.6) format: convert reads it and model.pretrained fills
#     the 318 backbone tensors from it (fc.* ignored);
#  5. an mmseg checkpoint ({meta, state_dict, optimizer}, mmseg's names) of
#     its DeepLabV3 and DeepLabV3+ on ResNetV1c (scripts/make_golden.py's
#     transcription, base width 8): convert takes the state_dict, strict
#     model.pretrained and predict give the transcription's eval logits
#     within 1e-5 relative; the DeepLabV3+ exported with --names mmseg loads
#     strictly into the transcription with the same logits.
# First, without torch: a full-width resnet50 trained without model.pretrained
# warns that the published figures assume ImageNet weights (one with weights,
# below, does not).
# Exits 77 (skipped) where Debian's /usr/bin/python3 has no torch.
set -eu
SEGTRAIN=$1
SRC=$2
. "$SRC/tests/torch_env.sh"
torch_tmp convert_torch
"$SEGTRAIN" synth --out "$tmp/data" --train 2 --val 1 --size 40x56 --seed 5 >/dev/null
img=$(find "$tmp/data/leftImg8bit/val" -name '*.png' | head -n 1)
sets="--set data.root=$tmp/data --set data.format=cityscapes --set device=cpu --set threads=2
      --set model.backbone=resnet50 --set model.base_width=64 --set model.num_classes=19
      --set model.aux_head=true --set model.output_stride=8 --set model.aspp_rates=[12,24,36]
      --set data.crop_size=[32,32] --set data.workers=0 --set train.batch_size=2"
# shellcheck disable=SC2086
"$SEGTRAIN" train $sets --set run_dir="$tmp/scratch" --set train.iters=1 \
    --set train.checkpoint_every=0 2>"$tmp/scratch.log"
grep -q "model.pretrained is empty: this resnet50 run starts from random initialisation" "$tmp/scratch.log" ||
    { echo "FAIL: no warning for resnet50 from scratch"; cat "$tmp/scratch.log"; exit 1; }
echo "random-init warning: ok"

need_torch torch torchvision numpy PIL

# the torchvision model, saved by torch.save, and its eval logits on img
"$PY" - "$tmp" "$img" <<'EOF'
import sys
import numpy as np
import torch
from PIL import Image
from torchvision.models.segmentation import deeplabv3_resnet50

tmp, img = sys.argv[1], sys.argv[2]
torch.manual_seed(3)
m = deeplabv3_resnet50(weights=None, weights_backbone=None, num_classes=19, aux_loss=True)
g = torch.Generator().manual_seed(4)
with torch.no_grad():
    for mod in m.modules():
        if isinstance(mod, torch.nn.BatchNorm2d):
            c = mod.num_features
            mod.weight.copy_(0.5 + torch.rand(c, generator=g))
            mod.bias.copy_(0.2 * torch.rand(c, generator=g) - 0.1)
            mod.running_mean.copy_(0.2 * torch.rand(c, generator=g) - 0.1)
            mod.running_var.copy_(0.5 + torch.rand(c, generator=g))
            mod.num_batches_tracked.fill_(9)
torch.save(m.state_dict(), tmp + "/dl.pth")
x = np.asarray(Image.open(img).convert("RGB"), dtype=np.float64) / 255.0
x = (x - np.array([0.485, 0.456, 0.406])) / np.array([0.229, 0.224, 0.225])
x = torch.from_numpy(x.transpose(2, 0, 1).copy())[None]
with torch.no_grad():
    out = m.double().eval()(x)["out"][0].numpy()
np.save(tmp + "/ref.npy", out)
print("torchvision: %d state_dict tensors, logits %s" % (len(m.state_dict()), out.shape))
from torchvision.models import resnet50
torch.save(resnet50(weights=None).state_dict(), tmp + "/r50.pth",
           _use_new_zipfile_serialization=False)
EOF

"$SEGTRAIN" convert "$tmp/dl.pth" "$tmp/dl.safetensors"

# shellcheck disable=SC2086
"$SEGTRAIN" train --quiet $sets --set run_dir="$tmp/run" \
    --set model.pretrained="$tmp/dl.safetensors" --set model.pretrained_strict=true \
    --set train.iters=1 --set train.lr=0 --set train.momentum=0 --set train.weight_decay=0 \
    --set train.freeze_bn_stats=true --set train.checkpoint_every=0
ck="$tmp/run/checkpoints/iter_00000001.safetensors"
"$SEGTRAIN" predict --quiet --checkpoint "$ck" --input "$img" --output "$tmp/a.png" \
    --save-logits "$tmp/a.npy"
"$SEGTRAIN" predict --quiet --config "$tmp/run/config.yaml" --checkpoint "$tmp/dl.safetensors" \
    --input "$img" --output "$tmp/b.png" --save-logits "$tmp/b.npy"

"$PY" - "$tmp" <<'EOF'
import sys
import numpy as np
tmp = sys.argv[1]
ref = np.load(tmp + "/ref.npy")
ok = True
for name in ("a", "b"):
    got = np.load(tmp + "/%s.npy" % name)
    if got.shape != ref.shape:
        print("FAIL %s: logits %s, torchvision %s" % (name, got.shape, ref.shape))
        ok = False
        continue
    err = np.abs(got - ref).max() / max(np.abs(ref).max(), 1e-6)
    print("%s: logits %s max relative error %.3g (tolerance 1e-5)"
          % ("pretrained + train + predict" if name == "a" else "predict on the converted file",
             ref.shape, err))
    ok &= err <= 1e-5
sys.exit(0 if ok else 1)
EOF
"$SEGTRAIN" convert "$tmp/r50.pth" "$tmp/r50.safetensors" 2>"$tmp/convert.log"
grep -q "legacy format, 320 tensors" "$tmp/convert.log" || { cat "$tmp/convert.log"; exit 1; }
# shellcheck disable=SC2086
"$SEGTRAIN" train $sets --set run_dir="$tmp/run50" --set model.pretrained="$tmp/r50.safetensors" \
    --set train.iters=1 --set train.checkpoint_every=0 2>"$tmp/train50.log"
grep "loaded 318 of 370 model tensors" "$tmp/train50.log" || { cat "$tmp/train50.log"; exit 1; }
if grep -q "starts from random initialisation" "$tmp/train50.log"; then
    echo "FAIL: random-init warning with model.pretrained set"
    exit 1
fi
# 5. mmseg: the checkpoint layout mmcv's save_checkpoint writes, for its
# DeepLabV3 and DeepLabV3+ (DepthwiseSeparableASPPHead); the DeepLabV3+ run
# is then exported with --names mmseg and loaded back by the transcription
# (strict), which gives segtrain's logits: mmseg -> segtrain -> mmseg
for arch in deeplabv3 deeplabv3plus; do
    "$PY" - "$tmp" "$img" "$SRC/scripts" "$arch" <<'EOF'
import sys
import numpy as np
import torch
from PIL import Image

tmp, img, arch = sys.argv[1], sys.argv[2], sys.argv[4]
sys.path.insert(0, sys.argv[3])
import make_golden

cfg = {"backbone": "resnet50v1c", "arch": arch, "names": "mmseg",
       "blocks": [3, 4, 6, 3], "base_width": 8, "output_stride": 8,
       "aspp_rates": [12, 24, 36], "num_classes": 19, "aux_head": 1}
torch.manual_seed(5)
m = make_golden.build(cfg)
make_golden.randomize_bn(m, torch.Generator().manual_seed(6))
sd = m.state_dict()
meta = {"mmseg_version": "0.30.0", "config": "model = dict(type='EncoderDecoder')",
        "CLASSES": ("road", "sidewalk"), "PALETTE": [[128, 64, 128], [244, 35, 232]],
        "epoch": 1, "iter": 80000, "time": "Thu Jan  1 00:00:00 2026"}
optim = {"state": {}, "param_groups": [{"lr": 0.01, "momentum": 0.9, "params": [0, 1]}]}
torch.save({"meta": meta, "state_dict": sd, "optimizer": optim}, tmp + "/mm.pth")
x = np.asarray(Image.open(img).convert("RGB"), dtype=np.float64) / 255.0
x = (x - np.array([0.485, 0.456, 0.406])) / np.array([0.229, 0.224, 0.225])
x = torch.from_numpy(x.transpose(2, 0, 1).copy())[None]
with torch.no_grad():
    out = m.double().eval()(x)["out"][0].numpy()
np.save(tmp + "/mmref.npy", out)
print("mmseg %s transcription: %d state_dict tensors, logits %s" % (arch, len(sd), out.shape))
EOF
    "$SEGTRAIN" convert "$tmp/mm.pth" "$tmp/mm.safetensors" 2>"$tmp/mmconvert.log"
    cat "$tmp/mmconvert.log"
    grep -q "under 'state_dict'" "$tmp/mmconvert.log" || { echo "FAIL: state_dict wrapper"; exit 1; }
    mmsets="--set model.backbone=resnet50v1c --set model.names=mmseg --set model.base_width=8
            --set model.arch=$arch"
    rm -rf "$tmp/mmrun"
    # shellcheck disable=SC2086
    "$SEGTRAIN" train --quiet $sets $mmsets --set run_dir="$tmp/mmrun" \
        --set model.pretrained="$tmp/mm.safetensors" --set model.pretrained_strict=true \
        --set train.iters=1 --set train.lr=0 --set train.momentum=0 --set train.weight_decay=0 \
        --set train.freeze_bn_stats=true --set train.checkpoint_every=0
    "$SEGTRAIN" predict --quiet --checkpoint "$tmp/mmrun/checkpoints/iter_00000001.safetensors" \
        --input "$img" --output "$tmp/mma.png" --save-logits "$tmp/mma.npy"
    "$SEGTRAIN" predict --quiet --config "$tmp/mmrun/config.yaml" --checkpoint "$tmp/mm.safetensors" \
        --input "$img" --output "$tmp/mmb.png" --save-logits "$tmp/mmb.npy"
    "$PY" - "$tmp" "$arch" <<'EOF'
import sys
import numpy as np
tmp = sys.argv[1]
ref = np.load(tmp + "/mmref.npy")
ok = True
for name in ("mma", "mmb"):
    got = np.load(tmp + "/%s.npy" % name)
    err = np.abs(got - ref).max() / max(np.abs(ref).max(), 1e-6) if got.shape == ref.shape else 1e9
    print("mmseg %s %s: logits %s max relative error %.3g (tolerance 1e-5)"
          % (sys.argv[2], name, got.shape, err))
    ok &= err <= 1e-5
sys.exit(0 if ok else 1)
EOF
done
# the DeepLabV3+ back out with mmseg's names, strict in the transcription
"$SEGTRAIN" export --quiet --checkpoint "$tmp/mmrun/checkpoints/iter_00000001.safetensors" \
    --out "$tmp/mmback.safetensors" --names mmseg
"$PY" "$SRC/scripts/check_export.py" --weights "$tmp/mmback.safetensors" \
    --config "$tmp/mmrun/config.yaml" --image "$img" --logits "$tmp/mma.npy" --tol 1e-5
echo "convert check passed"
