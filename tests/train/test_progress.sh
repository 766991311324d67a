#!/bin/sh
# tests/train/test_progress.sh SEGTRAIN SRCDIR - what training tells the user:
#  - epochs shorter than train.log_every: the leftover pass of each epoch
#    gets no line of its own, its mIoU rides on the next progress line
#    (metrics.jsonl still has one line per epoch);
#  - the validation table and mIoU are in logs/rank0.log, not only on the
#    console;
#  - a setup stage that takes long is named while it runs (here: waiting
#    for a second rank that never comes), and Ctrl-C during setup is
#    acknowledged at once, before setup ends; no checkpoint is written;
#  - training shows a live progress line (steps, rate, ETA, loss) whatever
#    train.log_every is: on a terminal (a pty made by script(1)) one line
#    redrawn with \r and erased before each log line, never in the log file;
#    off a terminal a plain line every train.progress_s seconds (0: none).
set -eu
SEGTRAIN=$1
SRC=$2
tmp=$(mktemp -d "${TMPDIR:-/tmp}/sg_progress_XXXXXX")
pid=
cleanup() { [ -n "$pid" ] && kill -9 "$pid" 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT
fail() { echo "FAIL: $*"; exit 1; }

"$SEGTRAIN" synth --out "$tmp/data" --train 10 --val 3 --size 40x48 --seed 4 >/dev/null 2>&1
common="--config $SRC/configs/demo.yaml --set data.root=$tmp/data --set threads=1
  --set data.crop_size=[32,32] --set train.batch_size=4 --set data.workers=1"

# --- short epochs: 2 steps each (10 samples, batch 4; 2 left over) ---
# shellcheck disable=SC2086
"$SEGTRAIN" train $common --set run_dir="$tmp/short" --set train.iters=8 \
    --set train.log_every=4 --set train.eval_every=0 >"$tmp/short.out" 2>&1 ||
    fail "short epochs: training failed: $(tail -5 "$tmp/short.out")"
! grep -q "leftover pass over the" "$tmp/short.out" ||
    fail "short epochs: a line per leftover pass: $(grep "leftover pass over" "$tmp/short.out")"
# epoch ends after steps 2, 4, 6, 8; each pass runs after that step's progress line
grep -q "iter 4/8 .*leftover mIoU [0-9.]* (epoch 0)$" "$tmp/short.out" ||
    fail "short epochs: epoch 0's leftover mIoU not on the line of iteration 4: $(cat "$tmp/short.out")"
grep -q "iter 8/8 .*leftover mIoU [0-9.]* (epoch 2; 2 epochs since the last line" "$tmp/short.out" ||
    fail "short epochs: epochs 1-2 not folded into the line of iteration 8: $(cat "$tmp/short.out")"
grep -q "epoch 3: leftover pass mIoU [0-9.]*$" "$tmp/short.out" ||
    fail "short epochs: the last epoch's leftover mIoU is not shown at the end: $(cat "$tmp/short.out")"
n=$(grep -c '"leftover_miou"' "$tmp/short/metrics.jsonl" || true)
[ "$n" = 4 ] || fail "short epochs: $n leftover lines in metrics.jsonl, expected 4 (one per epoch)"

# --- the validation table in the log file ---
log="$tmp/short/logs/rank0.log"
grep -q "validation at iteration 8 (3 images" "$log" || fail "no validation line in $log"
grep -q "| class  *|  *IoU |  *Acc |" "$log" || fail "no class table in $log: $(cat "$log")"
grep -q "mIoU [0-9.]*  mAcc [0-9.]*  aAcc" "$log" || fail "no mIoU summary in $log"

# --- a slow setup stage is named; Ctrl-C during setup is acknowledged at once ---
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
# shellcheck disable=SC2086
RANK=0 LOCAL_RANK=0 WORLD_SIZE=2 LOCAL_WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
    "$SEGTRAIN" train $common --set run_dir="$tmp/setup" --set train.iters=4 \
    --set dist.timeout_s=30 >"$tmp/setup.out" 2>&1 &
pid=$!
i=0
until grep -q "setup: joining the job" "$tmp/setup.out"; do
    i=$((i + 1))
    [ $i -lt 100 ] || fail "no 'setup: joining the job ...' after 10 s: $(cat "$tmp/setup.out")"
    kill -0 "$pid" 2>/dev/null || fail "rank 0 exited early: $(cat "$tmp/setup.out")"
    sleep 0.1
done
kill -INT "$pid"
i=0
until grep -q "Ctrl-C (SIGINT) received" "$tmp/setup.out"; do
    i=$((i + 1))
    [ $i -lt 20 ] || fail "Ctrl-C during setup not acknowledged within 2 s: $(cat "$tmp/setup.out")"
    sleep 0.1
done
grep -q "will stop before the first training step (setup is still running" "$tmp/setup.out" ||
    fail "the acknowledgement does not say what happens: $(cat "$tmp/setup.out")"
set +e
wait "$pid"
rc=$?
set -e
pid=
[ $rc -ne 0 ] || fail "interrupted during setup, yet exit status 0"
[ -z "$(ls "$tmp/setup/checkpoints" 2>/dev/null)" ] || fail "a checkpoint was written during setup"

# --- the live progress line: a terminal ---
if command -v script >/dev/null 2>&1; then
    # shellcheck disable=SC2086
    script -qec "'$SEGTRAIN' train $(echo $common) --set run_dir='$tmp/tty' --set train.iters=400 \
        --set train.log_every=1000 --set train.eval_every=0" /dev/null >"$tmp/tty.out" 2>&1 ||
        fail "on a terminal: training failed: $(tail -5 "$tmp/tty.out")"
    # a redrawn line: \r, the line, \033[K (erase the rest)
    grep -aq "$(printf '\r')train: [0-9]*/400 steps ([0-9]*%)  [0-9.]* \(it/s\|s/it\)  [0-9]*s elapsed  eta [0-9:]*  loss [0-9.]*$(printf '\033')\[K" "$tmp/tty.out" ||
        fail "on a terminal: no live progress line redrawn in place: $(cat -A "$tmp/tty.out" | head -20)"
    # a log line printed meanwhile erases it first and starts at the left margin
    grep -aq "$(printf '\r\033')\[K[0-9:.]* training done" "$tmp/tty.out" ||
        grep -aq "^[0-9:.]* training done" "$tmp/tty.out" ||
        fail "on a terminal: 'training done' printed after the progress line: $(cat -A "$tmp/tty.out" | tail -5)"
    ! grep -q "train: [0-9]*/400 steps" "$tmp/tty/logs/rank0.log" ||
        fail "the live line went into the log file: $(grep "steps (" "$tmp/tty/logs/rank0.log")"
else
    echo "note: script(1) not installed: the terminal case is not checked"
fi

# --- the progress line off a terminal: every train.progress_s seconds ---
# shellcheck disable=SC2086
"$SEGTRAIN" train $common --set run_dir="$tmp/pipe" --set train.iters=400 \
    --set train.log_every=1000 --set train.eval_every=0 --set train.progress_s=0.2 \
    >"$tmp/pipe.out" 2>&1 || fail "off a terminal: training failed: $(tail -5 "$tmp/pipe.out")"
n=$(grep -c "^[0-9:.]* train: [0-9]*/400 steps ([0-9]*%)  [0-9.]* \(it/s\|s/it\)  [0-9]*s elapsed  eta [0-9:]*  loss [0-9.]*$" "$tmp/pipe.out" || true)
[ "$n" -ge 2 ] || fail "off a terminal: $n progress lines with train.progress_s=0.2 and \
train.log_every=1000, expected several: $(cat "$tmp/pipe.out")"
! grep -q "$(printf '\r')" "$tmp/pipe.out" || fail "off a terminal: a carriage return in the output"
grep -q "train: [0-9]*/400 steps" "$tmp/pipe/logs/rank0.log" || fail "off a terminal: not in the log file"
# shellcheck disable=SC2086
"$SEGTRAIN" train $common --set run_dir="$tmp/none" --set train.iters=20 \
    --set train.log_every=1000 --set train.eval_every=0 --set train.progress_s=0 \
    >"$tmp/none.out" 2>&1 || fail "progress_s 0: training failed: $(tail -5 "$tmp/none.out")"
! grep -q "train: [0-9]*/20 steps" "$tmp/none.out" ||
    fail "train.progress_s=0 still prints progress lines: $(grep "steps (" "$tmp/none.out")"
echo "ok: progress, log file, setup stages, Ctrl-C acknowledgement, live progress line"
