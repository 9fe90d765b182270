#!/usr/bin/env bash
# The status page's cost (docs/BENCHMARKS.md, "Status page"): the same 4-peer gossip run with
# and without rank 0's page, the page's run polled the whole time as a browser would (the page,
# /api/status and /metrics every POLL_S seconds). Runs PAIRS pairs, alternating which goes
# first, and prints each run's samples/s (rank 0's summary) and the ratio of each pair.
#   tools/bench_status.sh BIN [PAIRS] [EPOCHS] [POLL_S]     (defaults: 5 pairs, 6 epochs, 0.5 s)
set -euo pipefail
bin=$(realpath "${1:?usage: tools/bench_status.sh BIN [PAIRS] [EPOCHS] [POLL_S]}")
pairs=${2:-5}
epochs=${3:-6}
poll=${4:-0.5}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$bin" prepare --out "$work/data" >/dev/null
# A fixed noise multiplier: the runs time training, not the calibration.
common=(--algo gossip --topology ring --epochs "$epochs" --data "$work/data" --threads 1 --json
        --noise-multiplier 1.1 --metrics "")

one_run() {  # one_run with|without OUT: the summary's samples/s into OUT
  local mode=$1 out=$2
  if [[ $mode == without ]]; then
    "$bin" launch --peers 4 -- train "${common[@]}" >"$work/run.json" 2>"$work/run.log"
  else
    "$bin" launch --peers 4 --status-port 0 -- train "${common[@]}" \
      >"$work/run.json" 2>"$work/run.log" &
    local launcher=$!
    /usr/bin/python3 - "$work/run.log" "$poll" "$launcher" <<'PY' >"$work/polls"
import os, re, sys, time, urllib.request
log, every, launcher = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
port, polls, deadline = None, 0, time.time() + 600
def alive():
    try:
        os.kill(launcher, 0)
        return True
    except OSError:
        return False
while alive() and time.time() < deadline:
    if port is None:
        m = re.search(r"status page on http://127.0.0.1:(\d+)", open(log, errors="replace").read())
        port = m and m.group(1)
    else:
        try:
            for path in ("/", "/api/status", "/metrics"):
                urllib.request.urlopen("http://127.0.0.1:%s%s" % (port, path), timeout=5).read()
            polls += 1
        except OSError:
            pass  # the run has ended between two polls
    time.sleep(every)
print(polls)
PY
    wait "$launcher"
  fi
  /usr/bin/python3 -c '
import json, sys
lines = [l.split("] ", 1)[-1] for l in open(sys.argv[1]) if "{" in l]
print(json.loads(lines[-1])["samples_per_second"])' "$work/run.json" >"$out"
}

echo "pair  without (samples/s)  with page, polled (samples/s)  polls  ratio"
ratios=()
for p in $(seq "$pairs"); do
  if ((p % 2)); then order=(without with); else order=(with without); fi
  for m in "${order[@]}"; do one_run "$m" "$work/$m"; done
  a=$(cat "$work/without") b=$(cat "$work/with")
  r=$(/usr/bin/python3 -c "print('%.4f' % ($b / $a))")
  ratios+=("$r")
  printf "%4d  %19.0f  %29.0f  %5s  %s\n" "$p" "$a" "$b" "$(cat "$work/polls")" "$r"
done
/usr/bin/python3 -c '
import statistics, sys
r = [float(x) for x in sys.argv[1:]]
print("median ratio (with / without) %.4f over %d pairs; lowest %.4f, highest %.4f" %
      (statistics.median(r), len(r), min(r), max(r)))' "${ratios[@]}"
