#!/usr/bin/env bash
# The status page's cost (docs/BENCHMARKS.md, "Status page"): the same 4-peer gossip run with
# and without rank 0's page, the page's run polled the whole time as its users would: the page
# once and /api/status every STATUS_S seconds (what an open page does: every 1.5 s), and
# /metrics every METRICS_S seconds (a Prometheus scrape). Runs PAIRS pairs, alternating which goes
# first, and prints each run's samples/s (rank 0's summary) and the ratio of each pair.
# ARM feed: the second run has the status feed alone (every peer sends rank 0 its figures once a
# second: train --report, no page served or polled) instead of the page.
#   tools/bench_status.sh BIN [PAIRS] [EPOCHS] [STATUS_S] [METRICS_S] [ARM: page | feed]
#   (defaults: 8 pairs, 15 epochs, 1.5 s, 5 s, page; 0 for a period: that endpoint is not polled)
set -euo pipefail
bin=$(realpath "${1:?usage: tools/bench_status.sh BIN [PAIRS] [EPOCHS] [STATUS_S] [METRICS_S]}")
pairs=${2:-8}
epochs=${3:-15}
status_s=${4:-1.5}
metrics_s=${5:-5}
arm=${6:-page}
[[ $arm == page || $arm == feed ]] || { echo "ARM is page or feed, not $arm" >&2; exit 2; }
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
  elif [[ $arm == feed ]]; then
    "$bin" launch --peers 4 -- train "${common[@]}" --report "$work/report.html" \
      >"$work/run.json" 2>"$work/run.log"
    echo 0 >"$work/polls"
  else
    "$bin" launch --peers 4 --status-port 0 -- train "${common[@]}" \
      >"$work/run.json" 2>"$work/run.log" &
    local launcher=$!
    /usr/bin/python3 - "$work/run.log" "$status_s" "$metrics_s" "$launcher" <<'PY' >"$work/polls"
import os, re, sys, time, urllib.request
log, status_s, metrics_s, launcher = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])
port, polls, deadline = None, 0, time.time() + 600
due = {"/api/status": 0.0, "/metrics": 0.0}
every = {"/api/status": status_s, "/metrics": metrics_s}
def alive():
    try:
        os.kill(launcher, 0)
        return True
    except OSError:
        return False
def fetch(path):
    global polls
    try:
        urllib.request.urlopen("http://127.0.0.1:%s%s" % (port, path), timeout=5).read()
        polls += 1
    except OSError:
        pass  # the run has ended between two polls
while alive() and time.time() < deadline:
    if port is None:
        m = re.search(r"status page on http://127.0.0.1:(\d+)", open(log, errors="replace").read())
        if m:
            port = m.group(1)
            fetch("/")  # the page, once, as a browser opens it
    else:
        now = time.time()
        for path in due:
            if every[path] > 0 and now >= due[path]:
                fetch(path)
                due[path] = now + every[path]
    time.sleep(0.05)
print(polls)
PY
    wait "$launcher"
  fi
  /usr/bin/python3 -c '
import json, sys
lines = [l.split("] ", 1)[-1] for l in open(sys.argv[1]) if "{" in l]
print(json.loads(lines[-1])["samples_per_second"])' "$work/run.json" >"$out"
}

if [[ $arm == feed ]]; then
  echo "pair  without (samples/s)  with the feed alone (samples/s)  requests  ratio"
else
  echo "pair  without (samples/s)  with page, polled (samples/s)  requests  ratio"
fi
ratios=()
for p in $(seq "$pairs"); do
  if ((p % 2)); then order=(without with); else order=(with without); fi
  for m in "${order[@]}"; do one_run "$m" "$work/$m"; done
  a=$(cat "$work/without") b=$(cat "$work/with")
  r=$(/usr/bin/python3 -c "print('%.4f' % ($b / $a))")
  ratios+=("$r")
  printf "%4d  %19.0f  %29.0f  %8s  %s\n" "$p" "$a" "$b" "$(cat "$work/polls")" "$r"
done
/usr/bin/python3 -c '
import statistics, sys
r = [float(x) for x in sys.argv[1:]]
print("median ratio (with / without) %.4f over %d pairs; lowest %.4f, highest %.4f" %
      (statistics.median(r), len(r), min(r), max(r)))' "${ratios[@]}"
