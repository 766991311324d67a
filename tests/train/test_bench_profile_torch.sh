#!/bin/sh
# tests/train/test_bench_profile_torch.sh SEGTRAIN SRCDIR - scripts/bench_compare
# --profile on a small crop of the CPU benchmark job (resnet50 at 32x32, one
# timed step per side): both sides write a breakdown whose op classes add up
# to their step, PyTorch's names the classes segtrain's comparison groups use
# and its convolutions by pass and shape, the side-by-side table is printed,
# and the PyTorch CPU side ran channels_last (the anchor) unless told
# --no-channels-last. Exits 77 (skipped) where Debian's python3 has no
# torch/torchvision.
set -eu
SEGTRAIN=$1
SRC=$2
. "$SRC/tests/torch_env.sh"
need_torch torch torchvision
torch_tmp bench_prof
cd "$tmp"
job="--config $SRC/configs/bench-r50-cpu.yaml --set data.crop_size=[32,32] --peak-gflops 0"
# shellcheck disable=SC2086
"$PY" "$SRC/scripts/bench_compare" --segtrain "$SEGTRAIN" --torch-python "$PY" $job \
    --iters 1 --warmup 1 --profile --json cmp.json --quiet >out.txt 2>err.txt || {
    tail -20 err.txt out.txt
    exit 1
}
grep -q "^profile: ms per step" out.txt || { echo "no side-by-side profile"; cat out.txt; exit 1; }
grep -q "conv bwd (data + weight)" out.txt || { echo "no conv bwd group"; cat out.txt; exit 1; }
"$PY" - cmp.json <<'PYEOF'
import json, sys
r = json.load(open(sys.argv[1]))
seg, tor = r["segtrain"][-1], r["pytorch"][-1]
assert "channels_last" in tor["precision"], tor["precision"]
for side, p in (("segtrain", seg["profile"]), ("pytorch", tor["profile"])):
    total = sum(c["ms"] for c in p["classes"])
    assert abs(total - p["step_ms"]) <= 1e-6 * p["step_ms"] + 0.05 * p["step_ms"], \
        (side, total, p["step_ms"])
    names = {c["class"] for c in p["classes"]}
    assert p["convs"] and all(c["geometry"] and c["calls"] > 0 for c in p["convs"]), side
    print(side, "classes:", " ".join(sorted(names)))
need = {"conv fwd", "conv bwd", "bn fwd", "bn bwd", "relu fwd", "relu bwd", "loss", "optimizer",
        "resize fwd", "resize bwd", "concat fwd", "avgpool fwd", "maxpool fwd", "dropout fwd",
        "other"}
have = {c["class"] for c in tor["profile"]["classes"]}
assert need <= have, ("missing PyTorch classes", need - have)
# the conv rows add up to the conv classes (their outermost ops are the same)
tp = tor["profile"]
for pas, cls in (("fwd", "conv fwd"), ("bwd", "conv bwd")):
    rows = sum(c["ms"] for c in tp["convs"] if c["pass"] == pas)
    ms = next(c["ms"] for c in tp["classes"] if c["class"] == cls)
    assert rows <= ms * (1 + 1e-9) + 1e-9, (pas, rows, ms)
    assert rows >= 0.5 * ms, (pas, rows, ms)
# every convolution once per step on both sides: 63 in DeepLabV3-R50 with the
# aux head (53 backbone, 6 ASPP, 2 head, 2 aux head)
fwd_calls = sum(c["calls"] for c in tp["convs"] if c["pass"] == "fwd")
seg_calls = next(c["calls"] for c in seg["profile"]["classes"] if c["class"] == "conv fwd")
# segtrain's count is exact; PyTorch 1.13's profiler once counted 64 in a
# fresh-clone CI run under load (not reproduced in 6 quiet runs), so its
# side may be off by one
assert seg_calls == 63, seg_calls
assert abs(fwd_calls - 63) <= 1, fwd_calls
print("bench_compare --profile: both breakdowns consistent")
PYEOF
# --no-channels-last through --torch-args: NCHW
"$PY" "$SRC/scripts/bench_torch.py" --crop 32 32 --iters 1 --warmup 0 --threads 1 \
    --no-channels-last --json nchw.json >/dev/null
"$PY" -c "import json,sys; p=json.load(open('nchw.json'))['precision']; sys.exit('channels_last' in p)" ||
    { echo "--no-channels-last still ran channels_last"; exit 1; }
echo "bench profile torch checks passed"
