#!/bin/sh
# tests/train/test_optim_torch.sh OPTIM_GOLDEN SRCDIR - the optimizer against
# the torch installed here, not only the committed fixtures: writes
# scripts/make_optim_golden.py's fixtures afresh with that torch
# (torch.optim.AdamW, torch.optim.SGD, torch.nn.utils.clip_grad_norm_) into a
# temporary directory and runs test_optim_golden (OPTIM_GOLDEN) on them.
# The python is the one tests/torch_env.sh picks; exits 77 (skipped) when it
# has no torch.
set -eu
SRC=$2
. "$SRC/tests/torch_env.sh"
need_torch torch
torch_tmp optim
"$PY" "$2/scripts/make_optim_golden.py" "$tmp"
exec "$1" "$tmp"
