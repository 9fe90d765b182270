#!/usr/bin/env bash
# The compile-fail test (meson test compile_fail): tests/compile_fail/leaks.cc's CASE 0 must
# compile and every other CASE must not, each with the error its comment expects ("expect: RE").
#   run.sh SOURCE_ROOT COMPILER...
set -uo pipefail
root=$1
shift
cxx=("$@")
src="$root/tests/compile_fail/leaks.cc"
cases=$(grep -c '^#elif CASE == ' "$src")
out=$(mktemp)
trap 'rm -f "$out"' EXIT
compile() {
  "${cxx[@]}" -std=c++20 -fsyntax-only -I"$root" -DCASE="$1" "$src" >"$out" 2>&1
}
failed=0
if ! compile 0; then
  echo "compile_fail: the control (CASE 0) does not compile:"
  cat "$out"
  exit 1
fi
echo "ok: CASE 0 (the named issuers) compiles"
for ((c = 1; c <= cases; c++)); do
  comment=$(grep "^#elif CASE == $c\$" -A1 "$src" | tail -1 | sed 's/^ *\/\/ //')
  what=${comment%%; expect: *}
  expect=${comment##*; expect: }
  if compile "$c"; then
    echo "FAILED: CASE $c compiles, and must not: $what"
    failed=1
  elif ! grep -q "leaks.cc" "$out" || ! grep -Eq "error: .*$expect" "$out"; then
    echo "FAILED: CASE $c ($what) fails, but not with \"$expect\" in leaks.cc:"
    cat "$out"
    failed=1
  else
    echo "ok: CASE $c does not compile: $what ($(grep -m1 'error:' "$out" | sed 's/.*error: //'))"
  fi
done
exit "$failed"
