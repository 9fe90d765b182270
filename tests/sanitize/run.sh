#!/usr/bin/env bash
# Builds dpgossip with a sanitizer and runs tests under it (docs/RELIABILITY.md, "Sanitizer jobs").
#   run.sh asan [TEST...]  ./build-asan: AddressSanitizer, UndefinedBehaviorSanitizer and
#         LeakSanitizer; the unit suite and the integration tests listed below (every peer
#         process a test starts is sanitized too).
#   run.sh tsan [TEST...]  ./build-tsan: ThreadSanitizer; only the test binaries of the
#         transports, the collectives and the algorithms that drive a transport from threads.
# TEST...: meson test names to run instead of the mode's own list (asan: any test; tsan: those
# of its list).
# Every sanitizer writes its reports to files in a temporary folder rather than to stderr, so a
# report from a peer process whose non-zero exit a test expects (a killed or refused peer) is not
# lost in that test's verdict: any report file fails the run, and is printed.
# Exit: 0 when every test passed with no report; 1 on a failed test or any report; 77 (meson's
# skip) when the compiler cannot build and run a program with the sanitizer.
# Environment: CXX (default c++), SANITIZE_JOBS (build and test processes, default 2).
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
mode=${1:-}
shift || true
jobs=${SANITIZE_JOBS:-2}
case "$mode" in
  asan) flags=address,undefined build=build-asan ;;
  tsan) flags=thread build=build-tsan ;;
  *) echo "usage: tests/sanitize/run.sh asan|tsan [TEST...]" >&2; exit 2 ;;
esac

# Skip (77) where the toolchain lacks the sanitizer's runtime: build and run a threaded program.
probe=$(mktemp -d -t dpg-san-probe-XXXXXX)
trap 'rm -rf "$probe"' EXIT
printf '#include <thread>\nint main() { int x = 0; std::thread t([&] { x = 1; }); t.join(); return x - 1; }\n' \
  >"$probe/p.cc"
if ! "${CXX:-c++}" -fsanitize="$flags" -pthread "$probe/p.cc" -o "$probe/p" >"$probe/log" 2>&1 ||
   ! "$probe/p" >>"$probe/log" 2>&1; then
  echo "sanitize: skipped: ${CXX:-c++} cannot build and run a -fsanitize=$flags program" \
       "(Debian: g++ ships libasan, libubsan and libtsan):"
  head -5 "$probe/log"
  exit 77
fi

reports=$(mktemp -d -t "dpg-san-$mode-XXXXXX")  # removed when nothing was found
supp=$root/tests/sanitize
case "$mode" in
  asan)
    # detect_leaks=1: every process the tests start exits through main or a caught error, so
    # memory still held at exit is a real leak (peers killed by a signal are not checked).
    # detect_stack_use_after_return: a buffer handed to a send or receive must outlive its wait.
    # intercept_tls_get_addr=0: the leak checker's scan of dynamic TLS (that of a library loaded
    # at run time) takes a block's bounds from a guess at glibc's layout that is wrong now and
    # then on glibc 2.36; at exit its tracer then reads an address like 0x1d28, dies of SIGSEGV
    # and the peer exits 1 with no report (google/sanitizers#1322; seen in the auth test's rank
    # 2, "DTLS 8 at 0x000000001d23-0x002400002e25"). Static TLS and every stack are still scanned.
    export ASAN_OPTIONS="detect_leaks=1:detect_stack_use_after_return=1:check_initialization_order=1:strict_init_order=1:intercept_tls_get_addr=0:log_path=$reports/asan"
    export LSAN_OPTIONS="suppressions=$supp/lsan.supp:print_suppressions=0"
    export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1:log_path=$reports/ubsan"
    # The ranks mpirun starts (the MPI baseline of test_bench.sh) unwind allocations fully: Open
    # MPI is built without frame pointers, and only a full stack reaches the Open MPI frame that
    # lsan.supp names (too slow for every process: it unwinds at each malloc).
    export OMPI_MCA_mca_base_env_list="ASAN_OPTIONS=$ASAN_OPTIONS:fast_unwind_on_malloc=0"
    # The integration tests besides the unit suite: all but algorithms and gossip, which take
    # 17 of the suite's 31 sanitized minutes on paths that the unit tests and the tests below
    # already run sanitized (docs/RELIABILITY.md).
    integration=(prepare privacy train secure_noise launch launch_signals allreduce peer_failure
                 algo_failure topology bounds tools bench trace ad_psgd auth checkpoint shm audit
                 secure_aggregation)
    # Sanitized code runs about 2-3x slower; the tests' own peer deadlines are unchanged.
    multiplier=3
    targets=()
    ;;
  tsan)
    export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:suppressions=$supp/tsan.supp:log_path=$reports/tsan"
    tests=(unit_net unit_tcp unit_shm unit_collective unit_service unit_groups unit_dataparallel unit_gossip
           unit_algorithms unit_algo_ad_psgd unit_algo_partial unit_algo_ps unit_algo_local_sgd
           unit_algo_bucket unit_status unit_model unit_dpsgd)
    # ThreadSanitizer runs instrumented code 5-15x slower.
    multiplier=5
    targets=(tests/unit/net/test_net tests/unit/tcp/test_tcp tests/unit/shm/test_shm
             tests/unit/collective/test_collective tests/unit/collective/test_service
             tests/unit/collective/test_groups
             tests/unit/train/test_dataparallel tests/unit/train/test_gossip
             tests/unit/train/test_algorithms tests/unit/train/test_algo_ad_psgd
             tests/unit/train/test_algo_partial
             tests/unit/train/test_algo_ps tests/unit/train/test_algo_local_sgd
             tests/unit/train/test_algo_bucket tests/unit/status/test_status
             tests/unit/model/test_model tests/unit/dpsgd/test_dpsgd)
    ;;
esac

echo "sanitize: $mode: configuring and building ./$build (-fsanitize=$flags)"
# -O1 -g1: the optimisation the sanitizers' authors advise (fast enough to run, far quicker to
# compile than -O2 -g), with line tables for the reports' stacks and no full debug information.
setup=(-Db_sanitize="$flags" -Db_lundef=false -Dbuildtype=plain "-Dcpp_args=['-O1','-g1']")
# g++ links UBSan's runtime as a library of its own beside ASan's, and that shared copy ignores
# UBSAN_OPTIONS' log_path (its reports would go to stderr, where a test that expects a peer to
# fail never looks); linked statically it reads its options itself. clang's runtime needs nothing.
# Programs that use the CUDA backend's static library are linked by nvcc, which runs g++ with
# what -Xcompiler hands it: cuda_link_args (meson ignores it where no CUDA compiler is).
if [ "$mode" = asan ] && ! "${CXX:-c++}" --version 2>/dev/null | grep -qi clang; then
  setup+=(-Dcpp_link_args=-static-libubsan -Dcuda_link_args=-Xcompiler=-static-libubsan)
fi
if [ -f "$build/build.ninja" ]; then
  meson setup --reconfigure "$build" "${setup[@]}" >/dev/null
else
  meson setup "$build" "${setup[@]}" >/dev/null
fi
ninja -C "$build" -j"$jobs" "${targets[@]}" >"$reports/build.log" 2>&1 || {
  tail -50 "$reports/build.log"; echo "sanitize: $mode: build failed"; exit 1; }

if [ $# -gt 0 ]; then
  tests=("$@")
elif [ "$mode" = asan ]; then
  mapfile -t unit < <(meson test -C "$build" --no-rebuild --list --suite unit | sed 's|.* / ||')
  tests=("${unit[@]}" "${integration[@]}")
fi
rc=0
MESON_TESTTHREADS=$jobs meson test -C "$build" --no-rebuild --print-errorlogs \
  --timeout-multiplier "$multiplier" "${tests[@]}" || rc=$?

found=$(find "$reports" -name "$mode.*" -o -name 'ubsan.*' | sort)
if [ -n "$found" ]; then
  for f in $found; do echo "sanitize: report $f:"; head -60 "$f"; done
  echo "sanitize: $mode: $(echo "$found" | wc -l) sanitizer report(s), kept in $reports"
  exit 1
fi
if [ "$rc" -ne 0 ]; then
  echo "sanitize: $mode: tests failed (meson test exit $rc)"
  exit 1
fi
rm -rf "$reports"
echo "sanitize: $mode: every test passed with no sanitizer report"
