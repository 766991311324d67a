#!/bin/sh
# tests/train/test_exit_codes.sh SEGTRAIN SRCDIR - the exit status rule of
# docs/FAILURES.md, one case per class:
#  2  usage (an unknown option; a launcher option out of range), config (a
#     value that is not valid), input (a checkpoint the user named that is
#     corrupt: truncated, or its checksum wrong - for train --resume and
#     eval), ranks whose configuration differs (two nodes, each launched by
#     hand), and the launcher on a worker's 2: never restarted;
#  1  runtime (a training image that cannot be decoded);
#  128+N  a signal: SIGTERM to a training (checkpoint written), and to a
#     rank still waiting for the others to join;
#  0  --resume auto skips a corrupt newest checkpoint for the newest valid
#     one.
set -eu
SEGTRAIN=$1
SRC=$2
tmp=$(mktemp -d "${TMPDIR:-/tmp}/sg_exit_XXXXXX")
pids=
cleanup() {
    for p in $pids; do kill -9 "$p" 2>/dev/null || true; done
    [ -n "${KEEP:-}" ] || rm -rf "$tmp"
}
trap cleanup EXIT
fail() { echo "FAIL: $*"; exit 1; }

# expect CODE NAME WANT CMD...: runs CMD (output to $tmp/NAME.log), checks
# its exit status and that the log holds WANT
expect() {
    code=$1 name=$2 want=$3
    shift 3
    set +e
    "$@" >"$tmp/$name.log" 2>&1
    rc=$?
    set -e
    [ $rc -eq "$code" ] || fail "$name: exit status $rc, expected $code: $(tail -5 "$tmp/$name.log")"
    grep -qF -- "$want" "$tmp/$name.log" || fail "$name: no '$want' in: $(cat "$tmp/$name.log")"
    echo "ok: $name: exit $rc"
}

"$SEGTRAIN" synth --out "$tmp/data" --train 6 --val 2 --size 40x48 --seed 3 >/dev/null 2>&1
common="--config $SRC/configs/demo.yaml --set data.root=$tmp/data --set threads=1
  --set data.crop_size=[32,32] --set train.batch_size=2 --set data.workers=1
  --set train.checkpoint_every=2 --set train.eval_every=0 --set train.keep_checkpoints=0"

# --- 2: usage and configuration ---
# shellcheck disable=SC2086
expect 2 usage "unknown option" "$SEGTRAIN" train $common --no-such-option
# shellcheck disable=SC2086
expect 2 launcher_usage "--nproc-per-node '0'" "$SEGTRAIN" --nproc-per-node 0 train $common
# shellcheck disable=SC2086
expect 2 config "train.lr" "$SEGTRAIN" train $common --set train.lr=fast --set run_dir="$tmp/cfg"

# --- a run with checkpoints at iterations 2 and 4 ---
run="$tmp/run"
# shellcheck disable=SC2086
"$SEGTRAIN" train $common --set train.iters=4 --set run_dir="$run" >/dev/null 2>"$tmp/run.err" ||
    fail "training: $(tail -3 "$tmp/run.err")"
ck="$run/checkpoints"
head -c 300 "$ck/iter_00000004.safetensors" >"$tmp/truncated.safetensors"
cp "$ck/iter_00000004.safetensors" "$tmp/flipped.safetensors"
size=$(wc -c <"$tmp/flipped.safetensors")
# one byte of the last tensor's data changed: the header parses, the checksum does not match
printf '\125' | dd of="$tmp/flipped.safetensors" bs=1 seek=$((size - 100)) conv=notrunc 2>/dev/null

# --- 2: a checkpoint the user named is corrupt (structure or checksum) ---
for f in truncated flipped; do
    if [ $f = truncated ]; then why="not a readable safetensors file"; else why="checksum mismatch"; fi
    # shellcheck disable=SC2086
    expect 2 "resume_$f" "$why" "$SEGTRAIN" train $common --set train.iters=6 \
        --set run_dir="$tmp/res_$f" --resume "$tmp/$f.safetensors"
    # shellcheck disable=SC2086
    expect 2 "eval_$f" "$tmp/$f.safetensors" "$SEGTRAIN" eval $common --set run_dir="$run" \
        --checkpoint "$tmp/$f.safetensors" --out "$tmp/eval_$f.json"
done
# the launcher ends with the worker's 2 and does not restart it
# shellcheck disable=SC2086
expect 2 launcher_input "not restarting: exit status 2" "$SEGTRAIN" --nproc-per-node 1 \
    --max-restarts 3 --restart-backoff-s 0 train $common --set train.iters=6 \
    --set run_dir="$tmp/res_launch" --resume "$tmp/flipped.safetensors"
n=$(grep -c "starting 1 workers" "$tmp/launcher_input.log" || true)
[ "$n" -eq 1 ] || fail "launcher_input: $n attempts, expected 1"

# --- 0: --resume auto skips a corrupt newest checkpoint (found, not named) ---
cp "$tmp/flipped.safetensors" "$ck/iter_00000004.safetensors"
# shellcheck disable=SC2086
expect 0 resume_auto_skips "skipping $ck/iter_00000004.safetensors" "$SEGTRAIN" train $common \
    --set train.iters=6 --set run_dir="$run" --resume auto

# --- 1: a runtime failure (a training image that cannot be decoded) ---
cp -r "$tmp/data" "$tmp/bad"
for f in "$tmp"/bad/leftImg8bit/train/*/*.png; do printf 'not an image' >"$f"; done
# shellcheck disable=SC2086
expect 1 runtime "neither a PNG nor a JPEG" "$SEGTRAIN" train $common --set data.root="$tmp/bad" \
    --set train.iters=4 --set run_dir="$tmp/rt"

# --- 2: two nodes (launched by hand, as torchrun's workers) with different configs ---
port=$((20000 + $$ % 20000))
nodes="MASTER_ADDR=127.0.0.1 MASTER_PORT=$port WORLD_SIZE=2 LOCAL_RANK=0 LOCAL_WORLD_SIZE=1
  SEGTRAIN_JOB_TOKEN=0123456789abcdef0123456789abcdef"
# shellcheck disable=SC2086
env $nodes RANK=0 GROUP_RANK=0 "$SEGTRAIN" train $common --set train.iters=2 \
    --set dist.timeout_s=30 --set run_dir="$tmp/mm" >"$tmp/mm0.log" 2>&1 &
p0=$!
pids="$pids $p0"
# shellcheck disable=SC2086
expect 2 config_mismatch "ranks disagree on the resolved config" env $nodes RANK=1 GROUP_RANK=1 \
    "$SEGTRAIN" train $common --set train.iters=2 --set dist.timeout_s=30 --set train.lr=0.02 \
    --set run_dir="$tmp/mm"
set +e
wait $p0
rc=$?
set -e
[ $rc -eq 2 ] || fail "config_mismatch: rank 0 exit status $rc, expected 2: $(tail -3 "$tmp/mm0.log")"

# --- 128 + 15: SIGTERM to a training; and to a rank waiting for the others ---
# shellcheck disable=SC2086
"$SEGTRAIN" train $common --set train.iters=100000 --set train.log_every=1 \
    --set train.checkpoint_every=0 --set run_dir="$tmp/sig" >"$tmp/sig.log" 2>&1 &
p=$!
pids="$pids $p"
i=0
while ! [ -s "$tmp/sig/metrics.jsonl" ]; do
    i=$((i + 1))
    [ $i -lt 1200 ] || fail "sigterm: no training step after 120 s"
    kill -0 $p 2>/dev/null || fail "sigterm: the training ended early: $(tail -3 "$tmp/sig.log")"
    sleep 0.1
done
kill -TERM $p
set +e
wait $p
rc=$?
set -e
[ $rc -eq 143 ] || fail "sigterm: exit status $rc, expected 143: $(tail -3 "$tmp/sig.log")"
ls "$tmp/sig/checkpoints/"iter_*.safetensors >/dev/null 2>&1 || fail "sigterm: no checkpoint"
echo "ok: sigterm: exit $rc, checkpoint written"
# rank 1 of 2, alone: it waits for rank 0, which never comes
# shellcheck disable=SC2086
env $nodes MASTER_PORT=$((port + 1)) RANK=1 GROUP_RANK=1 "$SEGTRAIN" train $common \
    --set train.iters=2 --set dist.timeout_s=60 --set run_dir="$tmp/join" --verbose \
    >"$tmp/join.log" 2>&1 &
p=$!
pids="$pids $p"
i=0
while ! grep -q "joining the job" "$tmp/join.log"; do
    i=$((i + 1))
    [ $i -lt 600 ] || fail "sigterm_joining: not joining after 60 s: $(cat "$tmp/join.log")"
    sleep 0.1
done
kill -TERM $p
set +e
wait $p
rc=$?
set -e
[ $rc -eq 143 ] || fail "sigterm_joining: exit status $rc, expected 143: $(tail -3 "$tmp/join.log")"
grep -qF "stopped by signal 15 while joining the job" "$tmp/join.log" ||
    fail "sigterm_joining: $(cat "$tmp/join.log")"
echo "ok: sigterm_joining: exit $rc"
