#!/usr/bin/env bash
# tests/layers/test_check_layers.sh SOURCE_ROOT - the layer rule holds on the
# tree (scripts/check-layers passes), and the checker really catches each kind
# of violation on a small planted tree.
set -uo pipefail
src=$1
check=$src/scripts/check-layers
fail=0
"$check" "$src" || { echo "FAIL: the source tree breaks the layer rule (above)"; fail=1; }

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
plant() { # plant NAME FILE CONTENT: a fresh tree with one file, checker must fail
    rm -rf "$tmp/t"; mkdir -p "$tmp/t"/{core,kernels,data,model,dist,train,cmd}
    echo '/* ok */' > "$tmp/t/core/log.h"
    echo '/* ok */' > "$tmp/t/cmd/commands.h"
    echo '/* ok */' > "$tmp/t/train/trainer.h"
    printf '%s\n' "$3" > "$tmp/t/$2"
    if out=$("$check" "$tmp/t" 2>&1); then
        echo "FAIL: $1: check-layers passed a tree with $2: $3"; fail=1
    else
        echo "ok: $1 refused: $(head -1 <<<"$out")"
    fi
}
plant "upward include" dist/launch.c '#include "cmd/commands.h"'
plant "upward include from core" core/cli.c '#include "train/trainer.h"'
plant "bare include" core/log.c '#include "log.h"'
plant "missing header" model/m.c '#include "core/nothere.h"'
plant "not a layer" data/d.c '#include "tests/testutil.h"'
# and a clean planted tree passes
rm -rf "$tmp/t"; mkdir -p "$tmp/t"/{core,cmd}
echo '/* ok */' > "$tmp/t/core/log.h"; echo '#include "core/log.h"' > "$tmp/t/cmd/main.c"
"$check" "$tmp/t" >/dev/null || { echo "FAIL: a clean tree was refused"; fail=1; }
exit $fail
