# tests/torch_env.sh - sourced (`. "$SRC/tests/torch_env.sh"`) by the test
# scripts that compare segtrain with PyTorch; POSIX sh, defines only:
#   PY                  a Python with torch, the first of: $SEGTRAIN_TORCH_PYTHON;
#                       the venv of scripts/mmseg-venv (SEGTRAIN_MMSEG_VENV,
#                       default $SRC/.venv-mmseg: PyPI's torch and torchvision,
#                       which CI installs); scripts/torch-venv's
#                       (SEGTRAIN_TORCH_VENV, default $SRC/.venv-torch);
#                       Debian's /usr/bin/python3 (the python3 on PATH may be
#                       a shim without torch)
#   need_torch MOD...   exits the test with 77 (meson's "skipped"), naming the
#                       modules, when $PY cannot import them all
#   torch_tmp NAME      tmp=a fresh temporary directory, removed at exit
#   tiny_data HxW       a synthetic Cityscapes-layout data set in $tmp/data
#                       (4 train, 1 val image of that size); img=its val image
#   tiny_train RUN ITERS [--set K=V]...
#                       `segtrain train` ($SEGTRAIN) on $tmp/data into
#                       $tmp/RUN, batch 2, the last checkpoint only;
#                       ck=that checkpoint
#   TINY_R50            the --set words of the tiny resnet50 (base width 8,
#                       19 classes, 32x32 crops) the torch checks compare
# Any failing command ends the test (the scripts run with set -eu).

PY=/usr/bin/python3
for _py in "${SEGTRAIN_TORCH_PYTHON:-}" "${SEGTRAIN_MMSEG_VENV:-${SRC:-.}/.venv-mmseg}/bin/python" \
    "${SEGTRAIN_TORCH_VENV:-${SRC:-.}/.venv-torch}/bin/python"; do
    if [ -n "$_py" ] && [ -x "$_py" ] && "$_py" -c "import torch" 2>/dev/null; then
        PY=$_py
        break
    fi
done

need_torch() {
    if ! [ -x "$PY" ] || ! "$PY" -c "import $(echo "$*" | sed 's/ /, /g')" 2>/dev/null; then
        echo "skip: $PY has no $(echo "$*" | tr ' ' '/')"
        exit 77
    fi
}

torch_tmp() {
    tmp=$(mktemp -d "${TMPDIR:-/tmp}/sg_$1_XXXXXX")
    trap 'rm -rf "$tmp"' EXIT
}

tiny_data() {
    "$SEGTRAIN" synth --out "$tmp/data" --train 4 --val 1 --size "$1" --seed 5 >/dev/null
    img=$(find "$tmp/data/leftImg8bit/val" -name '*.png' | head -n 1)
}

tiny_train() {
    run=$1
    iters=$2
    shift 2
    "$SEGTRAIN" train --quiet --set run_dir="$tmp/$run" --set data.root="$tmp/data" \
        --set data.format=cityscapes --set data.train_split=train \
        --set train.iters="$iters" --set train.batch_size=2 --set train.checkpoint_every=0 \
        --set train.log_every=1 --set data.workers=0 --set threads=2 "$@"
    ck="$tmp/$run/checkpoints/iter_$(printf %08d "$iters").safetensors"
}

TINY_R50="--set model.backbone=resnet50 --set model.base_width=8 --set model.num_classes=19
          --set model.aspp_rates=[2,4,6] --set data.crop_size=[32,32]"
