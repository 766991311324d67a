#!/usr/bin/env bash
# tests/layers/test_check_launches.sh SOURCE_ROOT - no raw kernel<<<...>>>
# launch under kernels/ (scripts/check-launches passes on the tree), and the
# checker refuses a raw launch planted in a copy of kernels/ while it lets
# through a <<< in a comment or a string and the one in cuda_launch.h.
set -uo pipefail
src=$1
check=$src/scripts/check-launches
fail=0
"$check" "$src" || { echo "FAIL: the source tree has a raw kernel launch (above)"; fail=1; }

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fresh() { rm -rf "$tmp/t"; mkdir -p "$tmp/t"; cp -r "$src/kernels" "$tmp/t/"; }
plant() { # plant NAME FILE CONTENT: appended to FILE of a fresh copy, checker must fail
    fresh
    printf '%s\n' "$3" >> "$tmp/t/$2"
    local line
    line=$(wc -l < "$tmp/t/$2")
    if out=$("$check" "$tmp/t" 2>&1); then
        echo "FAIL: $1: check-launches passed $2 with: $3"; fail=1
    elif ! grep -q "^$2:$line: " <<<"$out"; then
        echo "FAIL: $1: check-launches did not name $2:$line: $out"; fail=1
    else
        echo "ok: $1 refused: $(head -1 <<<"$out")"
    fi
}
plant "raw launch" kernels/cuda/cuda_graph.cu \
    'static void planted(cudaStream_t s) { k_set_step_key<<<1, 1, 0, s>>>(NULL, 0); }'
plant "template launch" kernels/cuda/cuda_bn.cu '    k_bn_fwd<X, Y><<<g, t, 0, st>>>(x);'
plant "launch in a header" kernels/cuda/cuda_reduce.cuh '#define PLANTED(k) k<<<1, 1, 0, 0>>>()'
# after a comment on the same line, and after a string with comment marks
plant "launch after a comment" kernels/cuda/cuda_tta.cu '/* one */ k_flip_w<<<1, 1, 0, 0>>>(0);'
plant "launch after a string" kernels/cuda/cuda_tta.cu 'const char *u = "/*"; k<<<1, 1, 0, 0>>>();'

# a <<< in a comment or a string is no launch
fresh
printf '%s\n' '/* k<<<1, 1, 0, s>>>() is written SG_LAUNCH(1, 1, 0, s, k)() */' \
    '// k<<<g, b>>>(x)' 'static const char *planted = "k<<<g, b>>>";' \
    >> "$tmp/t/kernels/cuda/cuda_graph.cu"
"$check" "$tmp/t" >/dev/null || { echo "FAIL: a <<< in a comment or string was refused"; fail=1; }
[ $fail -eq 0 ] && echo "check launches: checked"
exit $fail
