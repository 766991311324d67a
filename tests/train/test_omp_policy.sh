#!/bin/sh
# tests/train/test_omp_policy.sh SEGTRAIN SRCDIR - the OpenMP wait policy
# segtrain runs with (core/threads.h, cmd/main.c).
#
# libgomp reads OMP_WAIT_POLICY / GOMP_SPINCOUNT in its constructor, before
# main(); what it parsed is read back from the runtime itself with
# OMP_DISPLAY_ENV=verbose (printed by that constructor: GOMP_SPINCOUNT is the
# runtime's own spin-count variable, 300000 by default, 0 for passive):
#  - nothing set: segtrain restarts itself once, and the runtime of the
#    process that runs has segtrain's spin count, 3000; the first one had
#    the default;
#  - OMP_WAIT_POLICY or GOMP_SPINCOUNT set by the user: no restart, the
#    user's value is what the runtime uses;
#  - the loop guard: a process marked as re-executed never restarts again;
#  - the training log names the thread count and the policy, once.
set -eu
SEGTRAIN=$1
SRC=$2
tmp=$(mktemp -d "${TMPDIR:-/tmp}/sg_omp_XXXXXX")
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

# blocks FILE: how many runtime start-ups printed their environment
blocks() { grep -c "OPENMP DISPLAY ENVIRONMENT BEGIN" "$1" || true; }
# last_spin FILE: the GOMP_SPINCOUNT of the last runtime start-up
last_spin() { grep "GOMP_SPINCOUNT = " "$1" | tail -n 1 | sed "s/.*= '\(.*\)'.*/\1/"; }

run() { # run OUT ENV... : segtrain --version with the runtime's environment shown
    out=$1
    shift
    env -u OMP_WAIT_POLICY -u GOMP_SPINCOUNT -u SEGTRAIN_OMP_DEFAULTS OMP_DISPLAY_ENV=verbose \
        "$@" "$SEGTRAIN" --version >"$out" 2>&1 || fail "segtrain --version failed: $(cat "$out")"
    grep -q "^segtrain " "$out" || fail "no version line in: $(cat "$out")"
}

# --- nothing set: one restart, a short spin in the process that runs ---
run "$tmp/default"
[ "$(blocks "$tmp/default")" = 2 ] ||
    fail "default: expected 2 runtime start-ups (the restart), got $(blocks "$tmp/default"): $(cat "$tmp/default")"
first=$(grep "GOMP_SPINCOUNT = " "$tmp/default" | head -n 1 | sed "s/.*= '\(.*\)'.*/\1/")
[ "$first" != 3000 ] || fail "default: the first runtime already had spin count 3000"
[ "$(last_spin "$tmp/default")" = 3000 ] ||
    fail "default: the running process has spin count $(last_spin "$tmp/default"), expected 3000"
run "$tmp/passive" OMP_WAIT_POLICY=passive
[ "$(blocks "$tmp/passive")" = 1 ] && [ "$(last_spin "$tmp/passive")" = 0 ] ||
    fail "OMP_WAIT_POLICY=passive: restarted or spinning: $(cat "$tmp/passive")"

# --- the user's choice is kept, no restart ---
run "$tmp/active" OMP_WAIT_POLICY=active
[ "$(blocks "$tmp/active")" = 1 ] || fail "OMP_WAIT_POLICY=active: restarted: $(cat "$tmp/active")"
grep -q "OMP_WAIT_POLICY = 'ACTIVE'" "$tmp/active" ||
    fail "OMP_WAIT_POLICY=active not in effect: $(cat "$tmp/active")"
run "$tmp/spin" GOMP_SPINCOUNT=1234
[ "$(blocks "$tmp/spin")" = 1 ] || fail "GOMP_SPINCOUNT=1234: restarted: $(cat "$tmp/spin")"
[ "$(last_spin "$tmp/spin")" = 1234 ] || fail "GOMP_SPINCOUNT=1234: runtime has $(last_spin "$tmp/spin")"

# --- loop guard ---
run "$tmp/guard" SEGTRAIN_OMP_DEFAULTS=1
[ "$(blocks "$tmp/guard")" = 1 ] || fail "marked process restarted again: $(cat "$tmp/guard")"

# --- the training log names threads and policy once (2 steps, tiny) ---
"$SEGTRAIN" synth --out "$tmp/data" --train 4 --val 2 --size 40x40 --seed 1 >/dev/null 2>&1
env -u OMP_WAIT_POLICY -u GOMP_SPINCOUNT -u SEGTRAIN_OMP_DEFAULTS -u OMP_NUM_THREADS \
    "$SEGTRAIN" train --config "$SRC/configs/demo.yaml" --set data.root="$tmp/data" \
    --set run_dir="$tmp/run" --set train.iters=2 --set train.batch_size=2 \
    --set data.crop_size=[32,32] --set data.workers=0 --set train.tensorboard=false \
    >"$tmp/train.out" 2>&1 || fail "training failed: $(tail -5 "$tmp/train.out")"
n=$(grep -c "CPU backend: .* OpenMP thread" "$tmp/train.out" || true)
[ "$n" = 1 ] || fail "expected one thread/policy line, got $n: $(cat "$tmp/train.out")"
grep -q "OpenMP thread(s) (threads: 0: [0-9]* CPUs in the affinity mask.*wait policy short spin (GOMP_SPINCOUNT=3000" \
    "$tmp/train.out" || fail "thread/policy line: $(grep "CPU backend" "$tmp/train.out")"
grep -q "wait policy short spin" "$tmp/run/logs/rank0.log" || fail "policy not in logs/rank0.log"
echo "ok: OpenMP wait policy"
