#!/usr/bin/env bash
# tests/fuzz/test_clang_fuzz.sh - one harness built by clang with libFuzzer
# (-fsanitize=fuzzer,address,undefined) and run over its seed corpus, then
# fuzzed for a few seconds. clang's UBSan flags what gcc's does not (NULL +
# 0, "applying zero offset to null pointer"), and libFuzzer mutates
# differently from tests/fuzz/fuzz_driver.c. Exits 77 (skipped) where clang
# or its libFuzzer runtime is not installed.
#
#   test_clang_fuzz.sh SRC_ROOT OUT_DIR NAME "SOURCES" "PKG_CONFIG_NAMES"
# SG_FUZZ_SECONDS (default 5 here) sets how long it fuzzes after the seeds.
set -uo pipefail
root=$1 out=$2 name=$3 sources=$4 pkgs=${5:-}
clang=${SG_CLANG:-clang}
command -v "$clang" >/dev/null || { echo "SKIP: $clang not installed"; exit 77; }
mkdir -p "$out" || exit 1
probe="$out/probe_$name.c"
printf '#include <stdint.h>\n#include <stddef.h>\nint LLVMFuzzerTestOneInput(const uint8_t *d, size_t n) { (void)d; (void)n; return 0; }\n' >"$probe"
if ! "$clang" -fsanitize=fuzzer "$probe" -o "$out/probe_$name" 2>/dev/null; then
    echo "SKIP: $clang cannot link -fsanitize=fuzzer (libFuzzer runtime missing)"
    exit 77
fi
flags=(-fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined
       -fno-omit-frame-pointer -g -O1 -std=gnu11 -D_GNU_SOURCE -DSG_FUZZ_BUILD=1
       -DSG_VERSION='"fuzz"' -Wno-unused-parameter -I"$root" -I"$root/tests")
srcs=("$root/tests/fuzz/fuzz_$name.c")
for s in $sources; do srcs+=("$root/$s"); done
pc=()
if [ -n "$pkgs" ]; then
    # shellcheck disable=SC2207,SC2086
    pc=($(pkg-config --cflags --libs $pkgs)) || { echo "FAIL: pkg-config $pkgs"; exit 1; }
fi
exe="$out/clang_fuzz_$name"
if ! "$clang" "${flags[@]}" "${srcs[@]}" "${pc[@]}" -lm -lpthread -o "$exe"; then
    echo "FAIL: building fuzz_$name with $clang -fsanitize=fuzzer"
    exit 1
fi
corpus="$root/tests/fuzz/corpus/$name"
new="$out/corpus_$name"
crash="$out/crashes_$name"
rm -rf "$new" "$crash"
mkdir -p "$new" "$crash"
args=(-seed=1 -timeout=10 -rss_limit_mb=2048 -artifact_prefix="$crash/" -print_final_stats=1)
# libFuzzer's dictionary format: every token quoted, only \\ \" \xHH escapes
dict_src="$root/tests/fuzz/corpus/$name.dict"
if [ -f "$dict_src" ]; then
    dict="$out/$name.libfuzzer.dict"
    grep -v '^#' "$dict_src" | grep -v '^$' |
        sed -e 's/"/\\x22/g' -e 's/\\n/\\x0a/g' -e 's/\\t/\\x09/g' -e 's/^/"/' -e 's/$/"/' >"$dict"
    args+=(-dict="$dict")
fi
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
# every seed once (the regression inputs are seeds), then fuzz; new inputs
# go to the scratch corpus, never into the source tree
if ! "$exe" "${args[@]}" -runs=0 "$corpus"; then
    echo "FAIL: fuzz_$name (clang libFuzzer) crashed on a seed of $corpus: see above; inputs in $crash"
    exit 1
fi
secs=${SG_FUZZ_SECONDS:-5}
if ! "$exe" "${args[@]}" -max_total_time="$secs" "$new" "$corpus"; then
    echo "FAIL: fuzz_$name (clang libFuzzer) found a crash: see above; replay with $exe $crash/<file>"
    exit 1
fi
echo "fuzz_$name (clang libFuzzer): seeds and ${secs} s of fuzzing clean"
