#!/usr/bin/env bash
# tools/netns_links.sh end to end: 2 peers of `dpgossip bench link`, each in its own network
# namespace with its egress shaped by the kernel's tbf at 100mbit, deliver 0.9-1.1 of it; with
# dpgossip's in-process latency on top (the kernel here has no netem) the link delivers both; a
# peer still running at --timeout-s is killed (exit 124); and the namespaces and the temporary
# folder are gone after every run. Skips (exit 77) where network namespaces are refused (not
# root, no CAP_NET_ADMIN, no iproute2).
# Usage: test_netns.sh path/to/dpgossip
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
source "$here/lib.sh"
bin=$1
script="$here/../../tools/netns_links.sh"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export TMPDIR="$work/tmp"  # where the script makes its temporary folder
mkdir -p "$TMPDIR"

# run_script ARGS...: runs the script, returns its status, and checks that it left no namespace
# (named dpg-ns-PID-..., as its "rank 0 in dpg-ns-PID-0" line says) or file behind.
run_script() {
  local tag rc=0
  "$script" --bin "$bin" "$@" >"$work/out" 2>"$work/err" || rc=$?
  if [[ $rc == 77 ]]; then
    echo "SKIP: $(grep -m1 SKIP "$work/err" || cat "$work/err")"
    exit 77
  fi
  tag=$(grep -om1 'dpg-ns-[0-9]*-' "$work/err") || fail "the script did not name its namespaces: $(cat "$work/err")"
  if [[ -n $tag ]] && ip netns list | grep -q "^$tag"; then
    fail "namespaces left behind: $(ip netns list | grep "^$tag" | tr '\n' ' ')"
    for ns in $(ip netns list | grep -o "^${tag}[0-9a-z]*"); do ip netns del "$ns" || true; done
  fi
  [[ -z $(ls -A "$TMPDIR") ]] || fail "temporary files left behind: $(ls -A "$TMPDIR")"
  return "$rc"
}

# check_row FILE LO HI [LAT_LO LAT_HI]: rank 0's one row, mbit/100 in [LO, HI] (the kernel's
# 100mbit; dpgossip shaped no bandwidth, so its own bandwidth_ratio is absent) and, when given,
# the delivered one-way latency in [LAT_LO, LAT_HI] ms.
check_row() {
  py '
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
lo, hi = float(sys.argv[2]), float(sys.argv[3])
if len(rows) != 1 or rows[0]["link"] != "0-1" or rows[0]["transport"] != "tcp":
    sys.exit(f"want one row of link 0-1 over tcp, got {rows}")
r = rows[0]
mbit, ms = r["mbit"], r["latency_ms"]
ratio = mbit / 100.0
print(f"{sys.argv[1]}: {mbit:.1f} Mbit/s of 100 (ratio {ratio:.3f}), latency {ms:.3f} ms")
if not lo <= ratio <= hi:
    sys.exit(f"bandwidth ratio {ratio:.3f} is outside [{lo}, {hi}]: {r}")
if len(sys.argv) > 4 and not float(sys.argv[4]) <= ms <= float(sys.argv[5]):
    sys.exit(f"latency {ms} ms is outside [{sys.argv[4]}, {sys.argv[5]}]: {r}")
' "$@" || fail "$1: $(cat "$work/err")"
}

# The kernel's bandwidth alone.
run_script --peers 2 --rate 100mbit --timeout-s 60 -- bench link --transport tcp \
  --rows-out "$work/rows.jsonl" || fail "100mbit bench link: exit $?: $(cat "$work/err")"
check_row "$work/rows.jsonl" 0.9 1.1
grep -q "egress tbf rate 100mbit burst 65536 latency 50ms" "$work/err" ||
  fail "the script did not say what it shaped: $(cat "$work/err")"

# With dpgossip's 10 ms latency on top (looser: the shaper's copies cost a little bandwidth).
run_script --peers 2 --rate 100mbit --timeout-s 60 -- bench link --transport tcp \
  --link default:latency=10ms --rows-out "$work/lat.jsonl" ||
  fail "100mbit + 10ms bench link: exit $?: $(cat "$work/err")"
check_row "$work/lat.jsonl" 0.8 1.1 9.5 14

# A bench of 16 MiB at 10mbit takes 13 s: --timeout-s 1 kills both peers and exits 124.
rc=0
run_script --peers 2 --rate 10mbit --timeout-s 1 -- bench link --transport tcp \
  --rows-out "$work/slow.jsonl" || rc=$?
[[ $rc == 124 ]] || fail "--timeout-s 1: want exit 124, got $rc: $(cat "$work/err")"
grep -q "timeout-s 1 ran out" "$work/err" || fail "--timeout-s 1: no message: $(cat "$work/err")"
[[ ! -e $work/slow.jsonl ]] || fail "--timeout-s 1: rows were written"

# A bad command line is refused before anything is made.
rc=0
"$script" --bin "$bin" --peers 2 --rate 100mb -- bench link >/dev/null 2>"$work/err" || rc=$?
[[ $rc == 2 ]] && grep -q -- "--rate: expected a tc rate" "$work/err" ||
  fail "--rate 100mb: want exit 2 and a message, got $rc: $(cat "$work/err")"

finish test_netns
