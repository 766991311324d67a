#!/bin/sh
# tests/train/test_lr_torch.sh LR_DUMP SRCDIR - runs test_lr_torch.py with
# the Python that tests/torch_env.sh picks; exits 77 (skipped) where it has
# no torch.
set -eu
SRC=$2
. "$SRC/tests/torch_env.sh"
need_torch torch
exec "$PY" "$2/tests/train/test_lr_torch.py" "$1"
