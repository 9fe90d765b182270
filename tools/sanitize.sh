#!/usr/bin/env bash
# The sanitizer builds of CI (docs/RELIABILITY.md):
#   bash tools/sanitize.sh asan   AddressSanitizer + UndefinedBehaviorSanitizer (and LeakSanitizer),
#                                 in build-asan: every unit and integration test
#   bash tools/sanitize.sh tsan   ThreadSanitizer, in build-tsan: the tests of the transports,
#                                 the collectives and the threaded algorithms
# Any report fails the run: the sanitizers halt on their first error, and the tests then fail.
# Run after tools/setup.sh (it installs what the builds need).
set -euo pipefail
cd "$(dirname "$0")/.."

kind=${1:-}
case "$kind" in
  asan)
    dir=build-asan
    options=(-Db_sanitize=address,undefined -Db_lundef=false)
    tests=(--suite unit --suite integration)
    ;;
  tsan)
    dir=build-tsan
    options=(-Db_sanitize=thread)
    # The code with threads of its own: the TCP transport's I/O thread, the in-process fabric, the
    # collectives over both, and the algorithms whose servers run a thread per worker.
    tests=(unit_tcp unit_collective unit_dataparallel unit_algo_ps unit_algo_ad_psgd unit_algorithms unit_gossip)
    ;;
  *)
    echo "usage: tools/sanitize.sh asan|tsan" >&2
    exit 2
    ;;
esac

# -O1 keeps the stacks readable; debug assertions stay on (no NDEBUG).
if [ -f "$dir/build.ninja" ]; then
  meson setup --reconfigure "$dir" "${options[@]}" -Dbuildtype=debugoptimized >/dev/null
else
  meson setup "$dir" "${options[@]}" -Dbuildtype=debugoptimized -Doptimization=1 >/dev/null
fi
ninja -C "$dir"

export ASAN_OPTIONS=halt_on_error=1:abort_on_error=1:detect_leaks=1:strict_string_checks=1
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
# TSan's reports exit 66; second_deadlock_stack makes a lock-order report show both stacks.
export TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1
# The sanitized binaries run 2-15x slower: the tests' own timeouts scale with this.
meson test -C "$dir" --print-errorlogs --timeout-multiplier 4 "${tests[@]}"
