#!/usr/bin/env bash
# tests/config/test_cli_binary.sh SEGTRAIN SOURCE_ROOT
# The built program's routing and exit codes: --help/--version 0, usage
# errors 2, bad configurations 2 with nothing written, the shipped configs
# valid, --help-config complete, docs/CONFIG.md's configuration reference
# current, a mistyped subcommand's suggestion.
set -u
bin=$1
src=$2
tmp=$(mktemp -d /tmp/sg-test-cli-bin-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fails=0
fail() { echo "  FAIL: $*" >&2; fails=$((fails + 1)); }

# run NAME EXPECTED_RC CMD...: stdout -> $tmp/NAME.out, stderr -> $tmp/NAME.err
run() {
    local name=$1 want=$2
    shift 2
    "$@" >"$tmp/$name.out" 2>"$tmp/$name.err"
    local rc=$?
    if [ "$rc" != "$want" ]; then
        fail "$name: exit $rc, expected $want: $*"
        sed 's/^/    | /' "$tmp/$name.err" >&2
    fi
}
has() { # has NAME FILE-SUFFIX TEXT
    grep -qF -- "$3" "$tmp/$1.$2" || { fail "$1: '$3' not in std$2"; sed 's/^/    | /' "$tmp/$1.$2" >&2; }
}

run help 0 "$bin" --help
has help out "subcommands:"
for c in train eval predict export bench synth config; do has help out "  $c "; done
run version 0 "$bin" --version
has version out "segtrain 0.1.0 (git "
grep -qE '^backends: (cpu \(oneDNN\)|cuda)' "$tmp/version.out" || fail "version: no backends line"
run noargs 2 "$bin"
has noargs err "usage: segtrain"
run badsub 2 "$bin" frobnicate
has badsub err "unknown subcommand 'frobnicate'"
has badsub err "usage:"
run badopt 2 "$bin" --frobnicate
has badopt err "unknown option '--frobnicate'"
run badhc 2 "$bin" --help-config --html
run cfgbadopt 2 "$bin" config --frobnicate
has cfgbadopt err "unknown option '--frobnicate'"
has cfgbadopt err "usage: segtrain config"
run cfgnoval 2 "$bin" config --config
has cfgnoval err "--config needs a value"

# --help-config names every key that the resolved configuration has
run hc 0 "$bin" --help-config
run defaults 0 "$bin" config
n=0
section=
while IFS= read -r line; do
    case "$line" in
    "#"*) continue ;;
    "  "*) key="$section.${line#  }" ;;
    *": "*) key=$line; section= ;;
    *":") section=${line%:}; continue ;;
    esac
    key=${key%%: *}
    n=$((n + 1))
    grep -qE "^  $key " "$tmp/hc.out" || fail "--help-config does not list $key"
done <"$tmp/defaults.out"
[ "$n" -ge 60 ] || fail "only $n keys in segtrain config output"

# --set, and the resolved output reloads to the same hash
run set 0 "$bin" config --set model.num_classes=7 --set data.label_map=none --set 'model.aspp_rates=[6, 12]'
has set out "  num_classes: 7"
has set out "  aspp_rates: [6, 12]"
grep -v '^#' "$tmp/set.out" >"$tmp/resolved.yaml"
run reload 0 "$bin" config --config "$tmp/resolved.yaml"
[ "$(head -1 "$tmp/set.out")" = "$(head -1 "$tmp/reload.out")" ] || fail "reloaded config hash differs"

# bad configurations: exit 2, file:line:column + key, nothing written
printf 'run_dir: %s/run\ntrain:\n  lrr: 0.1\n' "$tmp" >"$tmp/bad.yaml"
for cmd in config train eval predict; do
    run "bad-$cmd" 2 "$bin" "$cmd" --config "$tmp/bad.yaml"
    [ -e "$tmp/run" ] && fail "$cmd wrote $tmp/run for an invalid configuration"
done
has bad-config err "bad.yaml:3:3: unknown key 'train.lrr' (did you mean train.lr?)"
run bad-default 2 "$bin" --config "$tmp/bad.yaml"
[ -e "$tmp/run" ] && fail "default command wrote $tmp/run for an invalid configuration"
run missing 2 "$bin" config --config "$tmp/nope.yaml"
has missing err "nope.yaml: cannot open"
run badset 2 "$bin" config --set model.num_classes=999
has badset err "key 'model.num_classes': 999 is out of range"
# a (model.arch, model.backbone, model.names) that is not built: refused by
# `segtrain config` and train's check with model creation's message, the
# key named, nothing written
run badcombo 2 "$bin" config --set model.arch=deeplabv3plus
has badcombo err "key 'model.names' (default value): model.arch = deeplabv3plus with model.names = torchvision: torchvision defines no DeepLabV3+; set model.names: mmseg"
printf 'run_dir: %s/run\nmodel:\n  arch: deeplabv3plus\n  names: mmseg\n  backbone: resnet18\n' "$tmp" >"$tmp/combo.yaml"
run badcombo2 2 "$bin" train --config "$tmp/combo.yaml"
has badcombo2 err "combo.yaml:5: key 'model.backbone': model.arch = deeplabv3plus with model.backbone = resnet18"
[ -e "$tmp/run" ] && fail "train wrote $tmp/run for a combination that is not built"
run badcombo3 2 "$bin" config --set model.backbone=resnet50v1c
has badcombo3 err "ResNetV1c is mmsegmentation's backbone and torchvision defines no head on it; set model.names: mmseg"
run goodcombo 0 "$bin" config --set model.arch=deeplabv3plus --set model.names=mmseg --set model.backbone=resnet101v1c

# train through the common CLI (once train is implemented): --help and
# --print-config exit 0 and write nothing
"$bin" train --help >"$tmp/trainhelp.out" 2>"$tmp/trainhelp.err"
if grep -q "is not available yet" "$tmp/trainhelp.err"; then
    echo "train is pending: its CLI checks skipped" >&2
else
    run trainhelp 0 "$bin" train --help
    has trainhelp out "--config FILE"
    has trainhelp out "--print-config"
    run trainprint 0 "$bin" train --set "run_dir=$tmp/run" --set train.lr=0.5 --print-config
    has trainprint out "  lr: 0.5"
    [ -e "$tmp/run" ] && fail "train --print-config wrote $tmp/run"
    run trainprint2 0 "$bin" --set "run_dir=$tmp/run" --print-config
    has trainprint2 out "run_dir: \"$tmp/run\""
fi

# the launcher's options route to the launcher (anywhere, --opt=value too):
# two workers each run `segtrain config`
run launch 0 "$bin" config --nproc-per-node=2 --set seed=7
has launch out "[rank 0] seed: 7"
has launch out "[rank 1] seed: 7"

# the shipped configurations are valid
for f in "$src"/configs/*.yaml; do
    run "cfg-$(basename "$f")" 0 "$bin" config --config "$f"
done

# inheritance through the program: --print-config and `segtrain config` show
# the merged values with the file:line each came from; a validation error
# caused by a base names the base file (exit 2, nothing written)
mkdir -p "$tmp/inh/_base" "$tmp/inh/exp"
printf 'train:\n  lr: 0.05\n  momentum: 0.8\nmodel:\n  aspp_rates: [1, 2, 3]\n' >"$tmp/inh/_base/b.yaml"
printf 'base: ../_base/b.yaml\ntrain:\n  lr: 0.02\n' >"$tmp/inh/exp/d.yaml"
run inhprint 0 "$bin" train --config "$tmp/inh/exp/d.yaml" --set "run_dir=$tmp/inhrun" --print-config
has inhprint out "  lr: 0.02  # $tmp/inh/exp/d.yaml:3"
has inhprint out "  momentum: 0.8  # $tmp/inh/exp/../_base/b.yaml:3"
has inhprint out "  aspp_rates: [1, 2, 3]  # $tmp/inh/exp/../_base/b.yaml:5"
has inhprint out "run_dir: \"$tmp/inhrun\"  # --set"
grep -q '^base:' "$tmp/inhprint.out" && fail "inhprint: --print-config printed a base: key"
[ -e "$tmp/inhrun" ] && fail "inhprint: --print-config wrote $tmp/inhrun"
# eval and predict --print-config annotate the same way (and evaluate nothing)
ck="$src/tests/fixtures/golden_basic_os8.safetensors"
io=("--input" "$tmp/none.png" "--output" "$tmp/pred.png")
for c in eval predict; do
    extra=()
    [ "$c" = predict ] && extra=("${io[@]}")
    run "${c}print" 0 "$bin" "$c" --checkpoint "$ck" --config "$tmp/inh/exp/d.yaml" \
        "${extra[@]}" --set eval.batch_size=3 --print-config
    has "${c}print" out "  lr: 0.02  # $tmp/inh/exp/d.yaml:3"
    has "${c}print" out "  momentum: 0.8  # $tmp/inh/exp/../_base/b.yaml:3"
    has "${c}print" out "  batch_size: 3  # --set"
done
[ -e "$tmp/pred.png" ] && fail "predict --print-config wrote $tmp/pred.png"
run inhconfig 0 "$bin" config --config "$src/configs/cityscapes.yaml"
has inhconfig out "  weight_decay: 0.0005  # $src/configs/_base/deeplabv3_r50.yaml:"
has inhconfig out "  iters: 80000  # $src/configs/cityscapes.yaml:"
printf 'base: ../_base/b.yaml\ntrain:\n  min_lr: 0.5\n' >"$tmp/inh/exp/bad.yaml"
printf 'train:\n  lr: 0.01\n' >"$tmp/inh/_base/b2.yaml"
run inhbad 2 "$bin" train --config "$tmp/inh/exp/bad.yaml" --set "run_dir=$tmp/inhrun"
has inhbad err "$tmp/inh/exp/bad.yaml:3: key 'train.min_lr': 0.5 is above train.lr (0.05)"
[ -e "$tmp/inhrun" ] && fail "inhbad: an invalid configuration wrote $tmp/inhrun"
printf 'base: c2.yaml\n' >"$tmp/inh/exp/c1.yaml"
printf 'base: c3.yaml\n' >"$tmp/inh/exp/c2.yaml"
printf 'seed: 1\nbase: c1.yaml\n' >"$tmp/inh/exp/c3.yaml"
run inhcycle 2 "$bin" config --config "$tmp/inh/exp/c1.yaml"
has inhcycle err "c3.yaml:2:7: key 'base': cycle: $tmp/inh/exp/c1.yaml -> $tmp/inh/exp/c2.yaml -> $tmp/inh/exp/c3.yaml -> $tmp/inh/exp/c1.yaml"

# docs/CONFIG.md's configuration reference is what --help-config --markdown prints
run md 0 "$bin" --help-config --markdown
begin='<!-- BEGIN CONFIG REFERENCE'
end='<!-- END CONFIG REFERENCE'
ref=$src/docs/CONFIG.md
if [ -f "$ref" ] && grep -q "$begin" "$ref"; then
    sed -n "/$begin/,/$end/p" "$ref" | sed '1d;$d' >"$tmp/doc-ref.md"
    if ! diff -q "$tmp/md.out" "$tmp/doc-ref.md" >/dev/null; then
        fail "docs/CONFIG.md's configuration reference is stale: run scripts/update-readme-config"
        diff "$tmp/md.out" "$tmp/doc-ref.md" | head -10 >&2
    fi
else
    fail "docs/CONFIG.md has no '$begin' section"
fi

# a mistyped subcommand gets the closest one
run trian 2 "$bin" trian --config x.yaml
has trian err "unknown subcommand 'trian' (did you mean train?)"

if [ "$fails" -gt 0 ]; then
    echo "$fails check(s) failed" >&2
    exit 1
fi
echo "all segtrain binary checks passed"
