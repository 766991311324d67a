#!/bin/sh
# tests/data/test_cityscapes_scripts.sh SEGTRAIN - the official
# cityscapesScripts run on `segtrain synth`'s Cityscapes layout:
# json2labelImg redraws each *_gtFine_polygons.json into exactly its
# labelIds image, csCreateTrainIdLabelImgs writes labelTrainIds equal to the
# labelIds through the trainId table, and csEvalPixelLevelSemanticLabeling
# (which also reads *_gtFine_instanceIds.png) scores the ground truth against
# itself at 1.000. Needs a Python with cityscapesscripts (pip install
# cityscapesscripts "numpy<2"): $SG_CITYSCAPES_PYTHON, else /usr/bin/python3;
# exits 77 (skipped) without one.
set -eu
SEGTRAIN=$1
PY=${SG_CITYSCAPES_PYTHON:-/usr/bin/python3}
if ! [ -x "$PY" ] || ! "$PY" -c "import cityscapesscripts, numpy, PIL" 2>/dev/null; then
    echo "skip: no Python with cityscapesscripts (set SG_CITYSCAPES_PYTHON)"
    exit 77
fi
tmp=$(mktemp -d "${TMPDIR:-/tmp}/sg_csscripts_XXXXXX")
trap 'rm -rf "$tmp"' EXIT
"$SEGTRAIN" synth --out "$tmp/cs" --train 4 --val 3 --size 64x96 --seed 11 >/dev/null 2>&1
export CITYSCAPES_DATASET="$tmp/cs"
"$PY" - "$tmp/cs" <<'PYEOF'
import glob, sys
import numpy as np
from PIL import Image
from cityscapesscripts.helpers.labels import id2label
from cityscapesscripts.preparation.json2labelImg import json2labelImg
root = sys.argv[1]
n = 0
for js in sorted(glob.glob(root + "/gtFine/*/*/*_gtFine_polygons.json")):
    out = js.replace("_polygons.json", "_redrawn.png")
    json2labelImg(js, out, "ids")
    a = np.array(Image.open(out))
    b = np.array(Image.open(js.replace("polygons.json", "labelIds.png")))
    inst = np.array(Image.open(js.replace("polygons.json", "instanceIds.png"))).astype(np.int64)
    col = np.array(Image.open(js.replace("polygons.json", "color.png")).convert("RGB"))
    assert (a == b).all(), "%s: json2labelImg differs on %d pixels" % (js, (a != b).sum())
    assert (np.where(inst >= 1000, inst // 1000, inst) == b).all(), js + ": instanceIds"
    for v in np.unique(b):
        assert (col[b == v] == np.array(id2label[int(v)].color)).all(), js + ": color"
    n += 1
print("json2labelImg: %d polygons.json files redraw their labelIds exactly" % n)
PYEOF
"$PY" -m cityscapesscripts.preparation.createTrainIdLabelImgs >/dev/null
"$PY" - "$tmp/cs" <<'PYEOF'
import glob, sys
import numpy as np
from PIL import Image
from cityscapesscripts.helpers.labels import id2label
root = sys.argv[1]
files = sorted(glob.glob(root + "/gtFine/*/*/*_gtFine_labelIds.png"))
for f in files:
    ids = np.array(Image.open(f))
    tr = np.array(Image.open(f.replace("labelIds", "labelTrainIds")))
    want = np.vectorize(lambda v: id2label[int(v)].trainId)(ids)
    assert (tr == want).all(), f
print("csCreateTrainIdLabelImgs: %d labelTrainIds files agree with the labelIds" % len(files))
PYEOF
mkdir "$tmp/results"
for f in "$tmp"/cs/gtFine/val/*/*_gtFine_labelIds.png; do
    cp "$f" "$tmp/results/$(basename "$f" _gtFine_labelIds.png)_leftImg8bit.png"
done
CITYSCAPES_RESULTS="$tmp/results" "$PY" -m cityscapesscripts.evaluation.evalPixelLevelSemanticLabeling \
    >"$tmp/eval.txt" 2>&1 || { cat "$tmp/eval.txt"; exit 1; }
grep "Score Average" "$tmp/eval.txt" | head -n 1
grep -q "Score Average : 1.000    1.000" "$tmp/eval.txt" || { cat "$tmp/eval.txt"; exit 1; }
echo "cityscapesScripts check passed"
