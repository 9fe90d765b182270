#!/usr/bin/env bash
# Builds the libFuzzer targets of tests/fuzz/ in ./build-fuzz (clang, ASan, UBSan) and runs each
# for SECONDS (default 15) on its seed corpus in tests/fuzz/corpus/<target>/, two at a time.
# Limits: 512 MB of RSS and 512 MB in one allocation, 5 s per input. New corpus entries and any
# crash input go to a temporary folder, never into the repository.
# Exit: 0 when no target found anything, 1 naming each target that did (crash, sanitizer report,
# leak, timeout, allocation over the limit), 77 (meson's skip) when clang or libFuzzer is missing.
set -uo pipefail
cd "$(dirname "$0")/../.."
seconds=${1:-15}
targets=(fuzz_frame fuzz_hosts fuzz_train_config fuzz_idx fuzz_csv)

if ! command -v clang++ >/dev/null 2>&1; then
  echo "fuzz: skipped: clang++ is not installed (Debian: clang, libclang-rt-14-dev)"
  exit 77
fi
probe=$(mktemp -d)
trap 'rm -rf "$probe"' EXIT
printf 'extern "C" int LLVMFuzzerTestOneInput(const unsigned char*, unsigned long) { return 0; }\n' \
  >"$probe/p.cc"
if ! clang++ -fsanitize=fuzzer,address,undefined "$probe/p.cc" -o "$probe/p" >/dev/null 2>&1; then
  echo "fuzz: skipped: clang++ cannot link -fsanitize=fuzzer,address,undefined" \
       "(Debian: libclang-rt-14-dev)"
  exit 77
fi

if [ -f build-fuzz/build.ninja ]; then
  CXX=clang++ meson setup --reconfigure build-fuzz -Dfuzz=true >/dev/null || exit 1
else
  CXX=clang++ meson setup build-fuzz -Dfuzz=true --buildtype=debugoptimized >/dev/null || exit 1
fi
ninja -C build-fuzz -j2 >/dev/null || { ninja -C build-fuzz -j1; exit 1; }

work=$(mktemp -d -t dpg-fuzz-run-XXXXXX)
run_one() {
  local t=$1
  mkdir -p "$work/$t/new" "$work/$t/artifacts"
  # ASan's own allocation cap matches -malloc_limit_mb, so an oversized new[] is a finding too.
  ASAN_OPTIONS=allocator_may_return_null=0:detect_leaks=1 \
  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  "build-fuzz/tests/fuzz/$t" "$work/$t/new" "tests/fuzz/corpus/$t" \
    -rss_limit_mb=512 -malloc_limit_mb=512 -timeout=5 -max_total_time="$seconds" \
    -artifact_prefix="$work/$t/artifacts/" -print_final_stats=1 >"$work/$t/log" 2>&1
  echo $? >"$work/$t/rc"
}

running=0
for t in "${targets[@]}"; do
  run_one "$t" &
  running=$((running + 1))
  if [ "$running" -ge 2 ]; then wait -n; running=$((running - 1)); fi
done
wait

failed=()
for t in "${targets[@]}"; do
  rc=$(cat "$work/$t/rc" 2>/dev/null || echo 1)
  runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$work/$t/log" | grep -o '[0-9]*$')
  if [ "$rc" -eq 0 ]; then
    echo "fuzz: $t: ok (${runs:-?} inputs in ${seconds}s)"
  else
    failed+=("$t")
    echo "fuzz: $t: FOUND A PROBLEM (exit $rc); inputs in $work/$t/artifacts/, log:"
    grep -E 'ERROR|SUMMARY|==[0-9]+==|runtime error|Test unit written|out-of-memory|timeout|leak' \
      "$work/$t/log" | head -20
  fi
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz: failed: ${failed[*]} (reproduce: build-fuzz/tests/fuzz/<target> <input>)"
  exit 1
fi
rm -rf "$work"
echo "fuzz: all ${#targets[@]} targets ran ${seconds}s each with no finding"
