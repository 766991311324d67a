#!/bin/sh
# tests/dist/test_restart_progress.sh SEGTRAIN SRCDIR - a failure that
# repeats is not restarted forever: a training whose validation images are
# corrupt writes its checkpoint at iteration 2, then fails at the evaluation
# of iteration 3, and again at every restart (each resumes from iteration 2).
# Under `--max-restarts 1000 --restart-backoff-s 1` the launcher restarts it
# after the first failure (progress: a new checkpoint), then 3 more times
# without progress (--max-restarts-without-progress 3, the default), pausing
# 1, 1, 2, 4 s (doubling, reset by progress), and gives up at the fifth
# failure naming it: exit 1 (the worker's), in well under a minute - not 1000
# restarts.
set -eu
SEGTRAIN=$1
SRC=$2
tmp=$(mktemp -d "${TMPDIR:-/tmp}/sg_rprog_XXXXXX")
trap '[ -n "${KEEP:-}" ] || rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

"$SEGTRAIN" synth --out "$tmp/data" --train 6 --val 2 --size 40x48 --seed 3 >/dev/null 2>&1
for f in "$tmp"/data/leftImg8bit/val/*/*.png; do printf 'not an image' >"$f"; done
t0=$(date +%s)
set +e
OMP_NUM_THREADS=1 "$SEGTRAIN" --nproc-per-node 1 --max-restarts 1000 --restart-backoff-s 1 \
    --kill-grace-s 5 train --config "$SRC/configs/demo.yaml" --set data.root="$tmp/data" \
    --set threads=1 --set "data.crop_size=[32,32]" --set train.batch_size=2 \
    --set data.workers=1 --set train.iters=4 --set train.checkpoint_every=2 \
    --set train.eval_every=3 --set run_dir="$tmp/run" >"$tmp/job.log" 2>&1
rc=$?
set -e
secs=$(($(date +%s) - t0))
log="$tmp/job.log"
[ $rc -eq 1 ] || fail "exit status $rc, expected 1: $(tail -5 "$log")"
n=$(grep -c "launcher: restarting the workers" "$log" || true)
[ "$n" -eq 4 ] || fail "$n restarts, expected 4: $(grep launcher "$log")"
# the pauses: 1 s after the attempt that wrote a checkpoint, then doubling
pauses=$(sed -n 's/.*launcher: restart [0-9]* of 1000 on host .* in \([0-9]*\) s: .*/\1/p' "$log" |
    tr '\n' ' ')
[ "$pauses" = "1 1 2 4 " ] || fail "pauses '$pauses', expected '1 1 2 4 '"
for want in "checkpoint: $tmp/run/checkpoints/iter_00000002.safetensors" \
    "launcher: failed: worker rank 0 exited with status 1" \
    "giving up: 4 attempts in a row failed without writing a new checkpoint (the newest: iteration 2)" \
    "--max-restarts-without-progress 3" "Fix the cause named above"; do
    grep -qF -- "$want" "$log" || fail "no '$want' in: $(cat "$log")"
done
# 8 s of pauses and five short attempts; 1000 restarts would take hours
if [ "$secs" -lt 8 ] || [ "$secs" -ge 90 ]; then fail "took $secs s"; fi
echo "ok: gave up after 5 attempts (4 restarts, pauses $pauses s) in $secs s"
