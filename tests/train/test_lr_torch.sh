#!/bin/sh
# tests/train/test_lr_torch.sh LR_DUMP SRCDIR - runs test_lr_torch.py with
# Debian's /usr/bin/python3 (the python on PATH may have no torch); exits 77
# (skipped) where it has no torch.
set -eu
. "$2/tests/torch_env.sh"
need_torch torch
exec "$PY" "$2/tests/train/test_lr_torch.py" "$1"
