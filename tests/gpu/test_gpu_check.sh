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
# time and the other configurations still run; the dry run builds the
# bundle's library path from staged wheel trees (CUDA 13's nvidia/cu13/lib,
# CUDA 12's cuda_nvrtc + cublas) and reports cuDNN's runtime-compiled
# engines unavailable loudly; --plan prints the caps; --rerun-failed takes
# the steps a results JSON did not pass, within 240 s, leaving out (and
# recording) what does not fit; --only takes named steps.
set -uo pipefail
shopt -s extglob
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
for want in "wheel layout cu13: library path $tmp/b/lib:" "wheel layout cuda_nvrtc cublas: library path" \
            "engines check, CUDA 99: unavailable: " "engines check, CUDA 13"; do
    grep -qF "$want" "$tmp/ok.txt" || bad "the dry run does not say '$want'"
done
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

# 2b. --plan, --only, --rerun-failed
out=$("$check" --plan)
rc=$?
[ $rc -eq 0 ] && [[ "$out" == *"of a 420 s budget"* ]] && [[ "$out" == *" bench-segtrain-bf16="* ]] &&
    echo "ok: --plan: $(echo "$out" | tail -1)" || bad "--plan (exit $rc): $out"
python3 - "$tmp" <<'PY'
import json, sys
steps = ["env", "ops", "ops-large", "golden-cuda", "nccl", "train-fp32", "train-bf16",
         "bench-segtrain-bf16", "bench-torch-bf16", "bench-segtrain", "bench-torch", "memcheck"]
st = dict(zip(steps, ["pass", "fail", "killed", "pass", "pass", "pass", "not-run", "fail",
                      "not-available", "pending", "pending", "pending"]))
json.dump({"plan": [{"step": k, "cap_s": 1, "status": st[k]} for k in steps],
           "steps": {k: {"status": v} for k, v in st.items() if v != "pending"}},
          open(sys.argv[1] + "/first.json", "w"))
json.dump({"plan": [{"step": k, "cap_s": 1, "status": "pass"} for k in steps]},
          open(sys.argv[1] + "/allpass.json", "w"))
PY
out=$("$check" --plan --rerun-failed "$tmp/first.json")
[[ "$out" == *"summary): ops="* ]] && [[ "$out" == *"of a 240 s budget"* ]] &&
    [[ "$out" != *" env="* ]] && [[ "$out" != *" golden-cuda="* ]] && [[ "$out" != *" bench-torch-bf16="* ]] &&
    echo "ok: --plan --rerun-failed: $(echo "$out" | tr '\n' ' ')" || bad "--plan --rerun-failed: $out"
env SG_BUNDLE="$tmp/b" OUT="$tmp/rerun" GPU_CHECK_PLANT_HANG_S=1 "$check" --dry-run \
    --rerun-failed "$tmp/first.json" >"$tmp/rerun.txt" 2>&1
rc=$?
[ $rc -eq 0 ] || bad "the rerun's dry run exited $rc"
python3 - "$tmp/rerun/gpu-check.json" <<'PY' || { bad "the rerun's dry run (exit $rc):"; cat "$tmp/rerun.txt"; }
import json, sys
s = json.load(open(sys.argv[1]))
# the steps that did not pass (not-available aside), in order: in the plan
# while their caps fit 240 s, the rest recorded not-run
redo = ["ops", "ops-large", "train-bf16", "bench-segtrain-bf16", "bench-segtrain", "bench-torch",
        "memcheck"]
plan = [p["step"] for p in s["plan"]]
out = [k for k, v in s["steps"].items() if v["status"] == "not-run"]
assert s["budget_s"] == 240 and s["mode"] == "dry", s
assert plan[:2] == ["ops", "ops-large"] and sorted(plan + out) == sorted(redo), (plan, out)
assert sum(p["cap_s"] + 3 for p in s["plan"] if p["cap_s"]) + 10 <= 240, s["plan"]
PY
out=$("$check" --rerun-failed "$tmp/allpass.json" 2>&1)
rc=$?
[ $rc -eq 0 ] && [[ "$out" == *"nothing to rerun"* ]] || bad "a rerun of a passing check (exit $rc): $out"
"$check" --plan --rerun-failed "$tmp/missing.json" >/dev/null 2>&1
[ $? -eq 2 ] || bad "--rerun-failed with no JSON was accepted"
out=$("$check" --plan --only bench-torch,env)
[[ "$out" == *"summary): env="+([0-9])" bench-torch="+([0-9])$'\n'* ]] || bad "--only env,bench-torch: $out"
"$check" --plan --only ops,nosuchstep >/dev/null 2>&1
[ $? -eq 2 ] || bad "--only with an unknown step was accepted"

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
