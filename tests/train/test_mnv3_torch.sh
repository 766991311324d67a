#!/bin/sh
# tests/train/test_mnv3_torch.sh SEGTRAIN SRCDIR - torchvision's MobileNetV3
# segmentation models both ways, at full width with torchvision's own
# builders: deeplabv3_mobilenet_v3_large(num_classes=19, aux_loss=True) and
# lraspp_mobilenet_v3_large(num_classes=19) (random init, weights=None,
# weights_backbone=None: nothing is downloaded; BN affine and running
# statistics randomised so eval mode matters), each
#  1. torch.save'd; `segtrain convert` reads it;
#  2. `segtrain train` starts from it with model.pretrained_strict: true (one
#     step at lr 0, frozen BN statistics: the weights stay) and `segtrain
#     predict` from that checkpoint gives torchvision's eval logits within
#     1e-5 relative (torchvision in float64);
#  3. `segtrain export --names torchvision` of that checkpoint loads into the
#     torchvision builder with strict=True and gives segtrain's logits within
#     1e-5 (scripts/check_export.py): the round trip torchvision -> segtrain ->
#     export -> PyTorch.
# torchvision's ImageNet mobilenet_v3_large fills the encoder through
# model.pretrained (its features.*). Then a narrowed pair (width_mult 0.25,
# base width 8) trained 2 steps
# exports to scripts/make_golden.py's narrowed torchvision builders the same
# way. Exits 77 (skipped) where Debian's /usr/bin/python3 has no torch.
set -eu
SEGTRAIN=$1
SRC=$2
. "$SRC/tests/torch_env.sh"
need_torch torch torchvision numpy yaml PIL
torch_tmp mnv3_torch
tiny_data 40x56

"$PY" - "$tmp" "$img" <<'EOF'
import sys
import numpy as np
import torch
from PIL import Image
from torchvision.models.segmentation import (deeplabv3_mobilenet_v3_large,
                                             lraspp_mobilenet_v3_large)

tmp, img = sys.argv[1], sys.argv[2]
x = np.asarray(Image.open(img).convert("RGB"), dtype=np.float64) / 255.0
x = (x - np.array([0.485, 0.456, 0.406])) / np.array([0.229, 0.224, 0.225])
x = torch.from_numpy(x.transpose(2, 0, 1).copy())[None]
for name, fn, kw in (("dl", deeplabv3_mobilenet_v3_large, {"aux_loss": True}),
                     ("lr", lraspp_mobilenet_v3_large, {})):
    torch.manual_seed(3)
    m = fn(weights=None, weights_backbone=None, num_classes=19, **kw)
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
    torch.save(m.state_dict(), "%s/%s.pth" % (tmp, name))
    with torch.no_grad():
        out = m.double().eval()(x)["out"][0].numpy()
    np.save("%s/%s_ref.npy" % (tmp, name), out)
    print("%s: %d state_dict tensors, logits %s" % (fn.__name__, len(m.state_dict()), out.shape))
EOF

cmp_logits() { # reference .npy, segtrain .npy, what
    "$PY" - "$1" "$2" "$3" <<'EOF'
import sys
import numpy as np
ref, got = np.load(sys.argv[1]), np.load(sys.argv[2])
if got.shape != ref.shape:
    print("FAIL %s: logits %s, torchvision %s" % (sys.argv[3], got.shape, ref.shape))
    sys.exit(1)
err = np.abs(got - ref).max() / max(np.abs(ref).max(), 1e-6)
print("%s: logits %s max relative error %.3g (tolerance 1e-5)" % (sys.argv[3], ref.shape, err))
sys.exit(0 if err <= 1e-5 else 1)
EOF
}

MNV3="--set model.backbone=mobilenet_v3_large --set model.output_stride=16
      --set model.num_classes=19 --set data.crop_size=[32,32]"
for v in "dl:--set model.arch=deeplabv3 --set model.aux_head=true" \
    "lr:--set model.arch=lraspp --set model.aux_head=false --set train.head_lr_prefixes=[]"; do
    name=${v%%:*}
    "$SEGTRAIN" convert "$tmp/$name.pth" "$tmp/$name.safetensors"
    # shellcheck disable=SC2086
    tiny_train "run_$name" 1 $MNV3 ${v#*:} --set model.pretrained="$tmp/$name.safetensors" \
        --set model.pretrained_strict=true --set train.lr=0 --set train.momentum=0 \
        --set train.weight_decay=0 --set train.freeze_bn_stats=true
    "$SEGTRAIN" predict --quiet --checkpoint "$ck" --input "$img" --output "$tmp/$name.png" \
        --save-logits "$tmp/$name.npy"
    cmp_logits "$tmp/${name}_ref.npy" "$tmp/$name.npy" "$name: convert + strict pretrained + predict"
    "$SEGTRAIN" export --quiet --checkpoint "$ck" --out "$tmp/${name}_tv.safetensors" \
        --names torchvision
    "$PY" "$SRC/scripts/check_export.py" --weights "$tmp/${name}_tv.safetensors" \
        --config "$tmp/run_$name/config.yaml" --image "$img" --logits "$tmp/$name.npy" --tol 1e-5
done

# torchvision's ImageNet classifier mobilenet_v3_large (random init): its
# features.* fill the encoder (classifier.* Linear layers fit no head), and a
# full-width run without model.pretrained warns
"$PY" - "$tmp" <<'EOF'
import sys
import torch
from torchvision.models import mobilenet_v3_large
sd = mobilenet_v3_large(weights=None).state_dict()
torch.save(sd, sys.argv[1] + "/cls.pth")
n = sum(k.startswith("features.") for k in sd)
open(sys.argv[1] + "/cls_n", "w").write(str(n))
print("mobilenet_v3_large: %d tensors, %d under features." % (len(sd), n))
EOF
"$SEGTRAIN" convert "$tmp/cls.pth" "$tmp/cls.safetensors"
# not tiny_train: its --quiet would hide the load report
plain_train() { # run, then --set overrides
    r=$1
    shift
    # shellcheck disable=SC2086
    "$SEGTRAIN" train --set run_dir="$tmp/$r" --set data.root="$tmp/data" \
        --set data.format=cityscapes --set train.iters=1 --set train.batch_size=2 \
        --set train.checkpoint_every=0 --set data.workers=0 --set threads=2 $MNV3 "$@"
}
plain_train run_cls --set model.pretrained="$tmp/cls.safetensors" 2>"$tmp/cls.log"
grep "loaded $(cat "$tmp/cls_n") of 360 model tensors" "$tmp/cls.log" || { cat "$tmp/cls.log"; exit 1; }
if grep -q "starts from random initialisation" "$tmp/cls.log"; then
    echo "FAIL: random-init warning with model.pretrained set"
    exit 1
fi
plain_train run_scratch 2>"$tmp/scratch.log"
grep -q "this mobilenet_v3_large run starts from random initialisation" "$tmp/scratch.log" ||
    { echo "FAIL: no warning for mobilenet_v3_large from scratch"; cat "$tmp/scratch.log"; exit 1; }
echo "ImageNet classifier weights: ok"

# narrowed: trained weights (BN statistics updated) through make_golden.py's builders
for v in "tdl:--set model.arch=deeplabv3 --set model.aux_head=true" \
    "tlr:--set model.arch=lraspp --set model.aux_head=false --set train.head_lr_prefixes=[]"; do
    name=${v%%:*}
    # shellcheck disable=SC2086
    tiny_train "run_$name" 2 $MNV3 ${v#*:} --set model.width_mult=0.25 --set model.base_width=8 \
        --set model.aspp_rates=[2,3]
    "$SEGTRAIN" predict --quiet --checkpoint "$ck" --input "$img" --output "$tmp/$name.png" \
        --save-logits "$tmp/$name.npy"
    "$SEGTRAIN" export --quiet --checkpoint "$ck" --out "$tmp/${name}_tv.safetensors" \
        --names torchvision 2>"$tmp/${name}_export.log"
    grep -q "narrowed mobilenet_v3_large" "$tmp/${name}_export.log" ||
        { echo "FAIL: no narrowed-width note"; cat "$tmp/${name}_export.log"; exit 1; }
    "$PY" "$SRC/scripts/check_export.py" --weights "$tmp/${name}_tv.safetensors" \
        --config "$tmp/run_$name/config.yaml" --image "$img" --logits "$tmp/$name.npy" --tol 1e-5
done
echo "mobilenet_v3_large torch check passed"
