#!/usr/bin/env bash
# tests/gpu/test_gpu_check.sh SOURCE_ROOT SEGTRAIN TEST_BACKEND_OPS [BIN...] -
# scripts/gpu-check without a GPU: --dry-run passes on a complete bundle
# (staged here from the build's binaries; a binary this build lacks, e.g.
# test_nccl without CUDA, is a stand-in script: the dry run checks presence),
# a planted hanging step is killed within its cap and recorded in $OUT's
# summary; it fails on a plan over the budget and on a missing bundle file;
# --list-bundle names the files; and the ops step's crash path: a case that
# exits or crashes the process (SG_TB_PLANT) on the CPU backend is recorded
# with its op, configuration and row, and the rest reruns in a new process;
# a case that hangs is killed at its configuration's share of the step's
# time and the other configurations still run.
set -uo pipefail
src=$1 segtrain=$2 tbo=$3
shift 3
check=$src/scripts/gpu-check
fail=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
bad() { echo "FAIL: $*"; fail=1; }

stage() { # a bundle in $tmp/b
    local f
    rm -rf "$tmp/b"
    mkdir -p "$tmp/b/bin" "$tmp/b/ref" "$tmp/b/lib"
    ln -s "$segtrain" "$tmp/b/bin/segtrain"
    ln -s "$tbo" "$tmp/b/bin/test_backend_ops"
    for f in "$@"; do ln -s "$f" "$tmp/b/bin/$(basename "$f")"; done
    for f in test_golden_cuda test_model_graphs_cuda test_nccl test_cuda_plans; do
        [ -e "$tmp/b/bin/$f" ] || printf '#!/bin/sh\nexit 77\n' >"$tmp/b/bin/$f"
        chmod +x "$tmp/b/bin/$f" 2>/dev/null
    done
    printf '%s\n%s\n' "--train 4" "--config configs/demo.yaml" >"$tmp/b/ref/train-args"
    echo '{"iter": 1, "loss": 3.0}' >"$tmp/b/ref/cpu-metrics.jsonl"
    echo '{"iter": 1, "loss": 3.0}' >"$tmp/b/ref/cpu-bf16-metrics.jsonl"
}
dry() { # OUTNAME [ENV...]: runs the dry run, output in $tmp/OUTNAME.txt; sets rc
    local name=$1
    shift
    env SG_BUNDLE="$tmp/b" OUT="$tmp/$name" "$@" "$check" --dry-run >"$tmp/$name.txt" 2>&1
    rc=$?
}

# 1. a complete bundle: passes; the planted step killed in time and recorded
stage "$@"
t0=$(date +%s)
dry ok GPU_CHECK_PLANT_HANG_S=1
t1=$(date +%s)
if [ $rc -ne 0 ]; then bad "dry run on a complete bundle exited $rc:"; cat "$tmp/ok.txt"
else echo "ok: dry run passes: $(tail -1 "$tmp/ok.txt")"; fi
[ $((t1 - t0)) -le 10 ] || bad "the dry run took $((t1 - t0)) s (planted cap 1 s + 3 s grace)"
python3 - "$tmp/ok/gpu-check.json" <<'PY' || bad "the summary does not record the killed step"
import json, sys
s = json.load(open(sys.argv[1]))
st = s["steps"]["planted-hang"]
assert st["status"] == "killed" and st["seconds"] <= 1 + 3 + 2, st
assert s["budget_s"] == 420 and s["mode"] == "dry"
assert [p["step"] for p in s["plan"]][:3] == ["env", "ops", "ops-large"], s["plan"]
PY
grep -q "planted step: ignoring SIGTERM" "$tmp/ok/ops.log" || bad "the planted step's log is not in OUT"
[ "$(find "$tmp/ok" -type f | wc -l)" -le 8 ] || bad "more than 8 files in OUT"

# 2. plans over the budget are refused before anything runs
dry caps GPU_CHECK_CAPS="ops=400"
[ $rc -eq 2 ] && grep -q "more than the budget" "$tmp/caps.txt" &&
    echo "ok: ops=400 refused: $(grep -m1 'more than' "$tmp/caps.txt")" ||
    { bad "a plan with ops=400 was not refused (exit $rc)"; cat "$tmp/caps.txt"; }
dry budget GPU_CHECK_BUDGET_S=300
[ $rc -eq 2 ] && grep -q "more than the budget of 300 s" "$tmp/budget.txt" &&
    echo "ok: a 300 s budget refused" || bad "a 300 s budget was not refused (exit $rc)"
dry skip GPU_CHECK_BUDGET_S=300 GPU_CHECK_SKIP="bench-segtrain bench-torch bench-torch-bf16 ops-large"
[ $rc -eq 0 ] && echo "ok: a 300 s budget with 4 steps skipped fits" ||
    { bad "a 300 s budget with 4 steps skipped: exit $rc"; cat "$tmp/skip.txt"; }
dry badcap GPU_CHECK_CAPS="opps=10"
[ $rc -eq 2 ] || bad "an unknown step in GPU_CHECK_CAPS was accepted (exit $rc)"

# 3. a missing bundle file is named
for f in bin/test_nccl bin/test_golden_cuda ref/cpu-bf16-metrics.jsonl; do
    stage "$@"
    rm -f "$tmp/b/$f"
    dry miss GPU_CHECK_PLANT_HANG_S=1 GPU_CHECK_KILL_GRACE_S=1
    if [ $rc -eq 1 ] && grep -q "$tmp/b/$f" "$tmp/miss.txt"; then echo "ok: missing $f named"
    else bad "missing $f: exit $rc"; cat "$tmp/miss.txt"; fi
done
stage "$@"

# 4. --list-bundle
list=$(SG_BUNDLE="$tmp/b" "$check" --list-bundle | tr '\n' ' ')
for f in bin/segtrain bin/test_backend_ops bin/test_golden_cuda bin/test_model_graphs_cuda bin/test_nccl ref/train-args \
         ref/cpu-metrics.jsonl ref/cpu-bf16-metrics.jsonl; do
    [[ " $list" == *" $f "* ]] || bad "--list-bundle does not name $f: $list"
done

# 5. the ops step's crash path, on the CPU backend (not in a GPU-only build)
"$tbo" cpu -o memory -c cpu >/dev/null 2>&1
if [ $? -eq 77 ]; then
    echo "ok: (no CPU backend in this build: the crash path is not checked here)"
else
    others="env ops-large golden-cuda nccl train-fp32 train-bf16 bench-segtrain-bf16 bench-torch-bf16 bench-segtrain bench-torch memcheck"
    for plant in exit:0 segv:0; do
        env SG_BUNDLE="$tmp/b" OUT="$tmp/crash-${plant%%:*}" GPU_CHECK_SKIP="$others" \
            GPU_CHECK_OPS_BACKEND=cpu GPU_CHECK_OPS_ARGS="-o memory" SG_TB_PLANT=$plant \
            OMP_NUM_THREADS=1 "$check" >"$tmp/crash.txt" 2>&1
        rc=$?
        if python3 - "$tmp/crash-${plant%%:*}/gpu-check.json" <<'PY'; then
import json, sys
s = json.load(open(sys.argv[1]))
ops = s["steps"]["ops"]
assert ops["status"] == "fail", ops
# the crash named with op, configuration and row; the rest of the
# configuration ran in a new process (1 of the 2 memory cases passed)
assert "memory [cpu] row 0" in ops["detail"], ops["detail"]
assert "cpu 1/2" in ops["detail"], ops["detail"]
assert any(c.startswith("memory [cpu] row 0") for c in s["ops_crashes"]), s["ops_crashes"]
assert s["ok"] is False
PY
            echo "ok: $plant in row 0: recorded, rest rerun: $(grep -m1 '\[ops\]' "$tmp/crash.txt")"
        else
            bad "$plant: the crash was not recorded / the rest not rerun (exit $rc):"
            cat "$tmp/crash.txt"
        fi
    done
    # a hang in the first configuration: killed at its share of the step's
    # 30 s (the CPU's 10 configurations weigh 15: the first gets 4 s),
    # recorded, and the other configurations still run
    t0=$(date +%s)
    env SG_BUNDLE="$tmp/b" OUT="$tmp/hang" GPU_CHECK_SKIP="$others" GPU_CHECK_CAPS="ops=30" \
        GPU_CHECK_OPS_BACKEND=cpu GPU_CHECK_OPS_ARGS="-o memory" SG_TB_PLANT=hang:0 \
        OMP_NUM_THREADS=1 "$check" >"$tmp/hang.txt" 2>&1
    rc=$? t1=$(date +%s)
    if python3 - "$tmp/hang/gpu-check.json" <<'PY'; then
import json, sys
s = json.load(open(sys.argv[1]))
d = s["steps"]["ops"]["detail"]
assert s["steps"]["ops"]["status"] == "fail", d
assert "killed at its" in d and "memory [cpu] row 0" in d, d
assert "cpu/plain 0/0" in d and "cpu/bf16-emu 0/0" in d, d  # the others ran
PY
        echo "ok: a hang killed at its share, the rest ran: $(grep -m1 '\[ops\]' "$tmp/hang.txt")"
    else
        bad "hang:0: not killed and recorded, or the other configurations lost (exit $rc):"
        cat "$tmp/hang.txt"
    fi
    [ $((t1 - t0)) -le 40 ] || bad "the hang run took $((t1 - t0)) s (ops cap 30 s)"
fi

[ $fail -eq 0 ] && echo "gpu-check without a GPU: all checks passed"
exit $fail
