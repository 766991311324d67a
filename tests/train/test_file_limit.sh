#!/bin/sh
# tests/train/test_file_limit.sh SEGTRAIN SRCDIR - a checkpoint write past
# the file size limit (`ulimit -f`, which Slurm and batch systems set):
#  - the write fails with EFBIG instead of SIGXFSZ killing rank 0 mid-write
#    (segtrain ignores the signal): exit status 1, an error naming the file
#    and `ulimit -f`, no partial .tmp file left, the earlier checkpoint
#    intact, and `--resume auto` without the limit continues from it;
#  - a partial checkpoint file (iter_*.safetensors.tmp) left before the
#    start is removed when training starts (logged); other *.tmp files in
#    the checkpoints folder are not the writer's and stay.
set -eu
SEGTRAIN=$1
SRC=$2
tmp=$(mktemp -d "${TMPDIR:-/tmp}/sg_flimit_XXXXXX")
trap '[ -n "${KEEP:-}" ] || rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

"$SEGTRAIN" synth --out "$tmp/data" --train 6 --val 2 --size 40x48 --seed 3 >/dev/null 2>&1
run="$tmp/run"
common="--config $SRC/configs/demo.yaml --set data.root=$tmp/data --set threads=1
  --set data.crop_size=[32,32] --set train.batch_size=2 --set data.workers=1
  --set train.checkpoint_every=2 --set train.eval_every=0 --set train.keep_checkpoints=0
  --set run_dir=$run"

# two steps and their checkpoint, without a limit
# shellcheck disable=SC2086
"$SEGTRAIN" train $common --set train.iters=2 >/dev/null 2>"$tmp/first.err" ||
    fail "first run: $(tail -3 "$tmp/first.err")"
ck="$run/checkpoints"
[ -f "$ck/iter_00000002.safetensors" ] || fail "no first checkpoint: $(ls "$ck")"
before=$(cksum <"$ck/iter_00000002.safetensors")
size=$(wc -c <"$ck/iter_00000002.safetensors")

# a partial file of a write that never finished, and a file that is not the writer's
printf 'partial' >"$ck/iter_00000003.safetensors.tmp"
printf 'mine' >"$ck/notes.tmp"

# resumed under a file size limit of half a checkpoint: the next write fails
limit=$((size / 2048))
set +e
# shellcheck disable=SC2086
(ulimit -f "$limit" && exec "$SEGTRAIN" train $common --set train.iters=4 --resume auto) \
    >/dev/null 2>"$tmp/limit.err"
rc=$?
set -e
[ $rc -eq 1 ] || fail "under ulimit -f $limit: exit status $rc, expected 1: $(tail -5 "$tmp/limit.err")"
for want in "iter_00000004.safetensors" "ulimit -f" "File too large" \
    "removed $ck/iter_00000003.safetensors.tmp"; do
    grep -qF "$want" "$tmp/limit.err" || fail "no '$want' in: $(cat "$tmp/limit.err")"
done
left=$(find "$ck" -name 'iter_*.tmp' -o -name 'best*.tmp')
[ -z "$left" ] || fail "partial files left: $left"
[ -f "$ck/notes.tmp" ] || fail "notes.tmp (not a checkpoint's partial file) was removed"
[ ! -e "$ck/iter_00000004.safetensors" ] || fail "iter_00000004.safetensors exists"
[ "$(cksum <"$ck/iter_00000002.safetensors")" = "$before" ] ||
    fail "the earlier checkpoint changed"

# without the limit, --resume auto goes on from iteration 2
# shellcheck disable=SC2086
"$SEGTRAIN" train $common --set train.iters=4 --resume auto >/dev/null 2>"$tmp/resume.err" ||
    fail "resume: $(tail -3 "$tmp/resume.err")"
grep -q "iteration 2" "$tmp/resume.err" || grep -q "iter_00000002" "$tmp/resume.err" ||
    fail "the resume did not start from iteration 2: $(cat "$tmp/resume.err")"
[ -f "$ck/iter_00000004.safetensors" ] || fail "no checkpoint after the resume"
echo "ok: under ulimit -f $limit (checkpoint $size bytes) exit 1, no partial file left"
