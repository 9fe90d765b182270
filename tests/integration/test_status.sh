#!/usr/bin/env bash
# The live status page (docs/STATUS.md) of a 4-peer gossip run on 127.0.0.1: /api/status and
# /metrics (parsed with prometheus_client's parser) while it trains; the page itself in headless
# Chromium, its DOM showing the 4 peers and a step above 0 (and a screenshot); after the run, the
# endpoints against the run's own summary line; its report (--report) in Chromium; refusals for an address beyond this machine
# without a secret.
# DPG_STATUS_SHOTS=DIR: also copy the screenshots to DIR/status-live.png and DIR/status-report.png
# (docs/STATUS.md).
set -euo pipefail
bin=$1
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
chromium=${CHROMIUM:-$(command -v chromium || command -v chromium-browser || true)}
[[ -n $chromium ]] || { echo "SKIP: no chromium (apt-get install chromium)"; exit 77; }
fmnist_work "$bin"
# headless ARGS...: Chromium without a window, with this test's own profile, a minute at most.
headless() {
  timeout 60 "$chromium" --headless --no-sandbox --disable-gpu --disable-dev-shm-usage \
    --no-first-run --user-data-dir="$work/profile" "$@"
}

# launch --status-port gives the port to every rank's command: rank 0 serves, the others feed it.
"$bin" launch --peers 4 --status-port 0 -- train --algo gossip --topology ring --epochs 10 \
  --data "$work/data" --threads 1 --json --metrics "$work/m.jsonl" --run-name live4 \
  --status-linger 300 --report "$work/report.html" >"$work/out.json" 2>"$work/log" &
launcher=$!
cleanup() { kill -9 "$launcher" 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT

port=
for _ in $(seq 240); do
  port=$(grep -ao 'status page on http://127.0.0.1:[0-9]*' "$work/log" | grep -o '[0-9]*$' || true)
  [[ -n $port ]] && break
  kill -0 "$launcher" 2>/dev/null || break
  sleep 0.25
done
[[ -n $port ]] || { tail -20 "$work/log"; echo "FAIL: no status page in the log"; exit 1; }
echo "status page on port $port"

# While it trains: the JSON and the Prometheus text.
py '
import json, sys, time, urllib.request
from prometheus_client.parser import text_string_to_metric_families
base = "http://127.0.0.1:%s" % sys.argv[1]
def get(path):
    with urllib.request.urlopen(base + path, timeout=10) as r:
        return r.status, r.headers.get("Content-Type"), r.read().decode()
deadline = time.time() + 180
while True:
    s = json.loads(get("/api/status")[2])
    if s["state"] == "running" and s["step"] > 0 and s["epochs"]:
        break
    assert s["state"] in ("starting", "running"), s["state"]
    assert time.time() < deadline, "no step within 180 s: %s" % s["state"]
    time.sleep(0.2)
f = s["facts"]
assert f["peers"] == 4 and len(f["peer_list"]) == 4 and f["algo"] == "gossip", f
assert f["run"] == "live4" and f["graphs"][0]["label"] == "ring", f
assert len(f["graphs"][0]["edges"]) == 4 and abs(f["graphs"][0]["rho"] - 1 / 3) < 1e-9
assert [p["transport"] for p in f["peer_list"]] == ["this process", "shm", "shm", "shm"], f
assert f["privacy"]["plan"] and f["privacy"]["plan"][-1][0] == f["privacy"]["steps"]
assert len(s["peer_epsilons"]) == 4 and all(e > 0 for e in s["peer_epsilons"]), s["peer_epsilons"]
assert 0 < s["peer_epsilons_step"] <= s["step"]
assert len(s["peer_message_epsilons"]) == 4 and all(e > 0 for e in s["peer_message_epsilons"])
# Every peer heard from within the last few seconds, with bytes on its links (status feed).
# (a peer'"'"'s figures are as of its last notice, up to a second old: wait for a step in each)
while not (s["live"] and all(p.get("steps_per_second") is not None and p["step"] > 0
                             for p in s["live"])):
    assert time.time() < deadline, "no live figures from every peer: %s" % s["live"]
    time.sleep(0.2)
    s = json.loads(get("/api/status")[2])
assert len(s["live"]) == 4, s["live"]
for p in s["live"]:
    assert p["state"] in ("running", "waiting") and p["last_heard_s"] < 5, p
    assert p["step"] > 0 and p["bytes_sent"] > 0 and p["bytes_received"] > 0, p
    assert 0 <= p["blocked_share"] <= 1.01 and 0 <= p["in_flight_share"] <= 1.01, p
    # a ring: its two neighbours at least
    assert {(p["rank"] + 1) % 4, (p["rank"] + 3) % 4} <= {l["peer"] for l in p["links"]}, p
status, kind, text = get("/metrics")
assert kind.startswith("text/plain; version=0.0.4"), kind
m = {}
for fam in text_string_to_metric_families(text):
    for smp in fam.samples:
        m[(smp.name, tuple(sorted(smp.labels.items())))] = smp.value
run = (("run", "live4"),)
assert m[("dpgossip_peers", run)] == 4
assert m[("dpgossip_steps", run)] > 0 and m[("dpgossip_running", run)] == 1
assert m[("dpgossip_epsilon", (("released", "model"),) + run)] > 0
assert len([k for k in m if k[0] == "dpgossip_peer_epsilon"]) == 4
assert len([k for k in m if k[0] == "dpgossip_peer_bytes_sent_total"]) == 4
assert all(m[("dpgossip_peer_bytes_sent_total", (("peer", str(r)),) + run)] > 0 for r in range(4))
status, kind, page = get("/")
assert kind.startswith("text/html") and "<svg" in page
try:
    get("/nope")
    raise AssertionError("/nope answered")
except urllib.error.HTTPError as e:
    assert e.code == 404
print("while training: step %d, %d epoch lines, %d metric samples" % (s["step"], len(s["epochs"]), len(m)))
' "$port"

# The page in headless Chromium, while the run trains: a screenshot; then its DOM, in which its
# script has fetched /api/status and filled the peers' table.
headless --virtual-time-budget=3000 --window-size=1300,1000 --screenshot="$work/live.png" \
  "http://127.0.0.1:$port/" >/dev/null 2>&1 || fail "chromium --screenshot failed"
[[ -s $work/live.png ]] || fail "no screenshot"
if [[ -n ${DPG_STATUS_SHOTS:-} && -s $work/live.png ]]; then cp "$work/live.png" "$DPG_STATUS_SHOTS/status-live.png"; fi
rc=0
headless --virtual-time-budget=8000 --dump-dom "http://127.0.0.1:$port/" >"$work/dom.html" 2>"$work/chromium.log" || rc=$?
[[ $rc == 0 ]] || { tail -5 "$work/chromium.log"; fail "chromium --dump-dom exited $rc"; }
py '
import re, sys
dom = open(sys.argv[1]).read()
body = re.search(r"<tbody>(.*?)</tbody>", dom, re.S)
assert body, "no peers table in the DOM"
rows = re.findall(r"<tr>(.*?)</tr>", body.group(1), re.S)
cells = [re.findall(r"<td[^>]*>(.*?)</td>", r) for r in rows]
assert len(cells) == 4, cells
assert [c[0] for c in cells] == ["0", "1", "2", "3"], cells
assert int(cells[0][3]) > 0, cells[0]
assert all(c[9].endswith("B") and c[8].endswith("s ago") for c in cells), cells  # sent, last heard
state = re.search(r"id=\"fact-state\">state: ([a-z]+)", dom).group(1)
step = re.search(r"id=\"fact-step\">step: ([0-9]+) of ([0-9]+)", dom)
assert int(step.group(1)) > 0
assert "<polyline" in dom and "<circle" in dom, "no curve or graph drawn"
loss = re.search(r"<svg id=\"loss\"[^>]*>(.*?)</svg>", dom, re.S)
assert loss and "<polyline" in loss.group(1), "no test loss curve"
print("page in chromium: 4 peers, rank 0 at step %s, state %s" % (cells[0][3], state))
' "$work/dom.html"

# After the run: the endpoints say what the run's summary line says.
py '
import json, sys, time, urllib.request
from prometheus_client.parser import text_string_to_metric_families
base = "http://127.0.0.1:%s" % sys.argv[1]
def get(path):
    with urllib.request.urlopen(base + path, timeout=10) as r:
        return r.read().decode()
deadline = time.time() + 240
while True:
    s = json.loads(get("/api/status"))
    if s["state"] != "running":
        break
    assert time.time() < deadline, "the run did not end within 240 s"
    time.sleep(0.5)
assert s["state"] == "finished", s["state"]
lines = [json.loads(l) for l in open(sys.argv[2])]
summary = [l for l in lines if l["kind"] == "summary"][-1]
assert s["step"] == summary["steps"] and s["summary"]["steps"] == summary["steps"]
assert s["summary"]["epsilon"] == summary["epsilon"], (s["summary"]["epsilon"], summary["epsilon"])
assert s["peer_epsilons"] == summary["peer_epsilons"]
assert len(s["epochs"]) == len([l for l in lines if l["kind"] == "epoch"]) == 10
m = {}
for fam in text_string_to_metric_families(get("/metrics")):
    for smp in fam.samples:
        m[(smp.name, tuple(sorted(smp.labels.items())))] = smp.value
run = (("run", "live4"),)
assert m[("dpgossip_steps", run)] == summary["steps"]
assert m[("dpgossip_epsilon", (("released", "model"),) + run)] == summary["epsilon"]
assert m[("dpgossip_epsilon", (("released", "messages"),) + run)] == summary["message_epsilon"]
assert m[("dpgossip_running", run)] == 0 and m[("dpgossip_failures", run)] == 0
# Every peer'"'"'s last figures: finished at the summary'"'"'s step, and each link counted alike by
# its two ends (what A sent to B is what B received from A).
live = s["live"]
assert [p["state"] for p in live] == ["finished"] * 4, live
assert all(p["step"] == summary["steps"] for p in live), [p["step"] for p in live]
got = {(p["rank"], l["peer"]): l for p in live for l in p["links"]}
for (a, b), l in got.items():
    assert l["bytes_sent"] == got[(b, a)]["bytes_received"], (a, b, l, got[(b, a)])
    assert m[("dpgossip_link_bytes_sent_total", (("from", str(a)),) + run + (("to", str(b)),))] == l["bytes_sent"]
print("after the run: %d steps, epsilon %.4f, as the summary says" % (summary["steps"], summary["epsilon"]))
' "$port" "$work/m.jsonl"

# The report: one file, the page with the run's end inside, drawn by Chromium without a server;
# written by the run (--report), and made afterwards from the metrics file (dpgossip report).
[[ -s $work/report.html ]] || fail "no report written"
"$bin" report "$work/m.jsonl" -o "$work/after.html" >"$work/report.out" || fail "dpgossip report failed"
grep -q "report of run live4" "$work/report.out" || fail "dpgossip report: $(cat "$work/report.out")"
check_outputs "$work/m.jsonl"
for made in report after; do
headless --virtual-time-budget=3000 --dump-dom "file://$work/$made.html" \
  >"$work/report-dom.html" 2>/dev/null || fail "chromium could not open the report"
py '
import json, re, sys
dom = open(sys.argv[1]).read()
summary = [json.loads(l) for l in open(sys.argv[2]) if "\"summary\"" in l][-1]
rows = re.findall(r"<tr>(.*?)</tr>", re.search(r"<tbody>(.*?)</tbody>", dom, re.S).group(1), re.S)
assert len(rows) == 4, rows
assert "state: finished" in dom and "step: %d of %d" % (summary["steps"], summary["steps"]) in dom
privacy = re.search(r"<p id=\"privacy\">(.*?)</p>", dom, re.S).group(1)
assert privacy.startswith("Epsilon %.3f for the released model" % summary["epsilon"]), privacy
env = dict(re.findall(r"<tr><td class=\"l\">([a-z_]+)</td><td class=\"l\">([^<]*)</td></tr>", dom))
assert env.get("dpgossip_commit") and int(env["cores"]) >= 1, env
cells = [re.findall(r"<td[^>]*>(.*?)</td>", r) for r in rows]
assert all(c[7] == "finished" and c[9].endswith("B") and c[11].endswith("%") for c in cells), cells
assert all(float(c[5]) > 0 for c in cells), cells  # each peer'"'"'s epsilon for its data
# ... and for its messages, which the run knows and its metrics lines do not hold
assert all((float(c[6]) > 0) == (sys.argv[3] == "report") for c in cells if c[6] != "\u2013"), cells
assert (cells[0][6] == "\u2013") == (sys.argv[3] == "after"), cells
assert "Time split, whole run" in dom
print("report (%s): 4 peers, %d steps, %s" % (sys.argv[3], summary["steps"], privacy[:60]))
' "$work/report-dom.html" "$work/m.jsonl" "$made"
done
if [[ -n ${DPG_STATUS_SHOTS:-} ]]; then
  headless --virtual-time-budget=3000 --window-size=1300,1700 \
    --screenshot="$DPG_STATUS_SHOTS/status-report.png" "file://$work/report.html" >/dev/null 2>&1 || fail "chromium --screenshot of the report failed"
fi

# The linger ends on SIGINT (passed on by the launcher to rank 0).
kill -INT "$launcher"
rc=0
wait "$launcher" || rc=$?
[[ $rc == 0 || $rc == 130 ]] || fail "launcher exited $rc after SIGINT"

# Beyond this machine only with the cluster secret as the token.
expect_error "needs the cluster secret" \
  "$bin" train --epochs 1 --data "$work/data" --threads 1 --status-port 0 \
  --status-address 0.0.0.0 --metrics ""
expect_error "--status-port is for a train command" "$bin" launch --peers 2 --status-port 0 -- prepare
expect_error "given twice" "$bin" launch --peers 2 --status-port 0 -- train --status-port 1
finish status
