#!/bin/sh
# tests/train/test_cli.sh SEGTRAIN SRCDIR - the train/eval/predict commands as
# a user runs them:
#  - SIGINT during training: the step finishes, a checkpoint is written, exit
#    status 130 and a "--resume auto" hint; resuming continues from it;
#  - `eval` on 2 ranks (--nproc-per-node 2) writes exactly the numbers of
#    1 rank (every val sample counted once, confusion matrices summed);
#  - `predict` on a directory writes one palette PNG per input image;
#  - batch 1 (batch norm would see one value per channel in the ASPP pooling
#    branch): refused when the model is planned, exit 2 naming the layer and
#    what to do, before any step.
set -eu
SEGTRAIN=$1
SRC=$2
tmp=$(mktemp -d "${TMPDIR:-/tmp}/sg_cli_XXXXXX")
pid=
cleanup() { [ -n "$pid" ] && kill -9 "$pid" 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT
fail() { echo "FAIL: $*"; exit 1; }

"$SEGTRAIN" synth --out "$tmp/data" --train 9 --val 5 --size 60x80 --seed 2 >/dev/null 2>&1
common="--config $SRC/configs/demo.yaml --set data.root=$tmp/data --set threads=1
  --set data.crop_size=[48,48] --set train.batch_size=2 --set data.workers=1"

# --- batch 1 without frozen BN statistics or SyncBN: a config error, exit 2
# before training starts ---
set +e
# shellcheck disable=SC2086
"$SEGTRAIN" train $common --set run_dir="$tmp/bs1" --set train.batch_size=1 \
    --set train.iters=3 >/dev/null 2>"$tmp/bs1.err"
rc=$?
set -e
[ $rc -eq 2 ] || fail "batch_size 1: exit status $rc, expected 2: $(tail -3 "$tmp/bs1.err")"
for want in "batch norm decoder.0.convs.4.2 would normalise 1 value per channel" \
    "ASPP global average pool" "train.batch_size >= 2" "train.freeze_bn_stats: true"; do
    grep -qF "$want" "$tmp/bs1.err" || fail "batch_size 1: no '$want' in: $(cat "$tmp/bs1.err")"
done
! grep -q "fatal" "$tmp/bs1.err" || fail "batch_size 1: a fatal exit: $(cat "$tmp/bs1.err")"
[ ! -e "$tmp/bs1/metrics.jsonl" ] || fail "batch_size 1: a step ran before the error"
# the same with frozen BN statistics trains
# shellcheck disable=SC2086
"$SEGTRAIN" train $common --set run_dir="$tmp/bs1f" --set train.batch_size=1 \
    --set train.iters=1 --set train.freeze_bn_stats=true >/dev/null 2>"$tmp/bs1f.err" ||
    fail "batch_size 1 with train.freeze_bn_stats: $(tail -3 "$tmp/bs1f.err")"

# --- SIGINT: finish the step, checkpoint, 130, resume hint ---
# shellcheck disable=SC2086
"$SEGTRAIN" train $common --set run_dir="$tmp/run" --set train.iters=100000 \
    --set train.log_every=1 --set train.checkpoint_every=0 2>"$tmp/train.err" >/dev/null &
pid=$!
i=0
while ! [ -s "$tmp/run/metrics.jsonl" ]; do # the first step is done
    i=$((i + 1))
    [ $i -lt 1200 ] || fail "no training progress after 120 s"
    kill -0 "$pid" 2>/dev/null || fail "train exited early: $(cat "$tmp/train.err")"
    sleep 0.1
done
kill -INT "$pid"
set +e
wait "$pid"
rc=$?
set -e
pid=
[ $rc -eq 130 ] || fail "exit status $rc after SIGINT, expected 130: $(tail -3 "$tmp/train.err")"
grep -q -- "--resume auto" "$tmp/train.err" || fail "no resume hint in: $(tail -3 "$tmp/train.err")"
ck=$(ls "$tmp"/run/checkpoints/iter_*.safetensors | tail -n 1)
[ -n "$ck" ] || fail "no checkpoint after SIGINT"
it=$(basename "$ck" .safetensors | sed 's/iter_0*//')
# resume to two steps further and stop normally
# shellcheck disable=SC2086
"$SEGTRAIN" train $common --set run_dir="$tmp/run" --set train.iters=$((it + 2)) \
    --set train.checkpoint_every=0 --resume auto >/dev/null 2>"$tmp/resume.err" ||
    fail "resume failed: $(tail -3 "$tmp/resume.err")"
grep -q "resumed from .*iter_0*$it.safetensors" "$tmp/resume.err" || fail "did not resume from $ck"
final="$tmp/run/checkpoints/$(printf 'iter_%08d' $((it + 2))).safetensors"
[ -f "$final" ] || fail "no final checkpoint $final"

# --- eval: 1 rank == 2 ranks ---
"$SEGTRAIN" eval --quiet --checkpoint "$final" --out "$tmp/e1.json" >/dev/null
"$SEGTRAIN" --nproc-per-node 2 eval --quiet --checkpoint "$final" --out "$tmp/e2.json" \
    --set threads=1 >/dev/null 2>"$tmp/e2.err" || fail "2-rank eval: $(tail -3 "$tmp/e2.err")"
cmp -s "$tmp/e1.json" "$tmp/e2.json" || fail "eval differs: $(cat "$tmp/e1.json") vs $(cat "$tmp/e2.json")"
grep -q '"images":5' "$tmp/e1.json" || fail "eval did not count 5 images: $(cat "$tmp/e1.json")"

# --- predict a directory ---
"$SEGTRAIN" predict --quiet --checkpoint "$final" --color --input "$tmp/data/leftImg8bit/val" \
    --output "$tmp/pred" >/dev/null
n=$(find "$tmp/pred" -name '*.png' | wc -l)
[ "$n" -eq 5 ] || fail "predict wrote $n PNGs for 5 images"
echo "cli checks passed (interrupted at iteration $it)"
