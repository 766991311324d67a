#!/usr/bin/env bash
# tests/layers/test_call_loops.sh SRC_ROOT LIB.a... - scripts/check-call-loops
# passes on the project's built libraries, and refuses a planted loop between
# two files (a.c calls b.c, b.c calls a.c), also between two convolution
# files of a backend (once allowed, no longer).
set -uo pipefail
root=$1
shift
check="$root/scripts/check-call-loops"
fail=0
"$check" "$@" || { echo "FAIL: the project's libraries have a call loop"; fail=1; }

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cc=${CC:-cc}
printf 'int b(int);\nint a(int x) { return x ? b(x - 1) : 0; }\n' > "$tmp/a.c"
printf 'int a(int);\nint b(int x) { return x ? a(x - 1) : 1; }\n' > "$tmp/b.c"
printf 'int c(void) { return 3; }\n' > "$tmp/c.c"
for f in a b c; do "$cc" -c "$tmp/$f.c" -o "$tmp/$f.c.o" || exit 1; done
ar rcs "$tmp/libloop.a" "$tmp/a.c.o" "$tmp/b.c.o" "$tmp/c.c.o" || exit 1
out=$("$check" "$tmp/libloop.a"); rc=$?
if [ $rc -ne 1 ] || ! grep -q "a.c.o -> .*b.c.o: b" <<<"$out"; then
    echo "FAIL: a planted loop a.c <-> b.c was not refused (rc $rc): $out"; fail=1
fi
cp "$tmp/a.c.o" "$tmp/cpu_conv_conv.c.o"; cp "$tmp/b.c.o" "$tmp/cpu_conv_taps.c.o"
ar rcs "$tmp/libconv.a" "$tmp/cpu_conv_conv.c.o" "$tmp/cpu_conv_taps.c.o" || exit 1
"$check" "$tmp/libconv.a" >/dev/null && { echo "FAIL: a loop between two conv files was let through"; fail=1; }
[ $fail -eq 0 ] && echo "call loops: checked"
exit $fail
