#!/bin/sh
# tests/data/test_aug_golden.sh SRC TEST_DATA_AUGMENT - regenerates
# tests/fixtures/data_aug_golden.h with mmsegmentation's own transforms and
# compares it with the committed one (outputs within one grey level), then
# compares segtrain's 8-bit RGB <-> HSV conversions on every input with
# OpenCV's (TEST_DATA_AUGMENT --dump-hsv). Needs a Python with
# mmsegmentation 1.x, mmcv (mmcv-lite will do) and opencv-python:
# $SG_MMSEG_PYTHON, else the venv of scripts/mmseg-venv (SEGTRAIN_MMSEG_VENV,
# default SRC/.venv-mmseg); skipped (77) without.
set -eu
SRC=$1
BIN=$2
PY=${SG_MMSEG_PYTHON:-${SEGTRAIN_MMSEG_VENV:-$SRC/.venv-mmseg}/bin/python}
if ! [ -x "$PY" ] || ! "$PY" -c "import cv2, mmengine, numpy" 2>/dev/null ||
    ! "$PY" -c "import importlib.util as u; exit(u.find_spec('mmseg') is None)" 2>/dev/null; then
    echo "skip: no Python with mmsegmentation, mmcv and cv2 at $PY (run scripts/mmseg-venv, or set SG_MMSEG_PYTHON)"
    exit 77
fi
"$PY" "$SRC/tests/data/make_aug_golden.py" --check "$SRC/tests/fixtures/data_aug_golden.h"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/sg_aug_hsv_XXXXXX")
trap 'rm -rf "$tmp"' EXIT
"$BIN" --dump-hsv "$tmp/hsv.bin"
"$PY" "$SRC/tests/data/make_aug_golden.py" --check-hsv "$tmp/hsv.bin"
