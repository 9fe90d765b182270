#!/usr/bin/env bash
# Every algorithm with 4 peer processes on 127.0.0.1, trained on Fashion-MNIST with the default
# recipe: each ends within 3 points of the all-reduce's test accuracy, reports epsilon for the
# model and for one peer's messages from the same privacy plan, and writes its own fields.
set -euo pipefail
bin=$1
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
fmnist_work "$bin"
common=(--data "$work/data" --threads 1 --json --timeout-s 60 --metrics "$work/m.jsonl")

run() {  # run NAME TRAIN-FLAGS...: a 4-peer run; its summary in $work/NAME.json
  local name=$1
  shift
  local start=$SECONDS
  "$bin" launch --peers 4 -- train "$@" "${common[@]}" --run-name "$name" \
    >"$work/$name.json" 2>"$work/$name.log" || { cat "$work/$name.log"; fail "$name failed"; }
  echo "$name: $((SECONDS - start)) s"
}

run allreduce --algo allreduce
run bucketed --algo allreduce --bucket-bytes 65536
run gossip --algo gossip --topology ring --trace "$work/gossip-trace.json"
run ps-sync --algo ps-sync --servers 2
run ps-async --algo ps-async --servers 2 --max-staleness 4
run local-sgd --algo local-sgd --local-steps 4
run ad-psgd --algo ad-psgd --topology ring
run partial --algo partial-allreduce --group-size 2

py '
import json, math, sys
work = sys.argv[1]
def summary(name):
    lines = [l.split("] ", 1)[-1] for l in open(f"{work}/{name}.json") if "{" in l]
    return json.loads(lines[-1])
runs = {n: summary(n) for n in ["allreduce", "bucketed", "gossip", "ps-sync", "ps-async",
                                "local-sgd", "ad-psgd", "partial"]}
base = runs["allreduce"]["test_accuracy"]
for name, s in runs.items():
    print("%-10s test accuracy %.4f  epsilon %.3f  message epsilon %.3f  %s noise  %.0f samples/s"
          % (name, s["test_accuracy"], s["epsilon"], s["message_epsilon"], s["noise_mode"],
             s["samples_per_second"]))
bad = []
for name, s in runs.items():
    if s["peers"] != 4: bad.append("%s: %d peers" % (name, s["peers"]))
    if not s["test_accuracy"] > base - 0.03:
        bad.append("%s: accuracy %.4f against the all-reduce %.4f" % (name, s["test_accuracy"], base))
    if not (0 < s["epsilon"] <= 3.0 + 1e-9): bad.append("%s: epsilon %r" % (name, s["epsilon"]))
    if not s["message_epsilon"] >= s["epsilon"] - 1e-12: bad.append(name + ": message epsilon")
    if s["noise_mode"] == "local" and s["algo"] != "allreduce":
        eps = s["peer_epsilons"]
        if len(eps) != 4 or s["epsilon"] != max(eps): bad.append("%s: peer epsilons %r" % (name, eps))
for name in ["ps-async"]:
    s = runs[name]
    if not (0 <= s["staleness_max"] <= 4): bad.append("%s: staleness %r" % (name, s["staleness_max"]))
if runs["ps-sync"]["noise_mode"] != "distributed": bad.append("ps-sync is not distributed")
p = runs["partial"]
if p["group_size"] != 2 or not 0 <= p["lone_steps"] <= p["groups"] == p["steps"]:
    bad.append("partial: groups %r" % ({k: p.get(k) for k in ["groups", "lone_steps", "steps"]},))
assert not bad, bad
# Every epoch line carries both epsilons, and the last one agrees with the summary.
lines = [json.loads(l) for l in open(f"{work}/m.jsonl")]
for name, s in runs.items():
    epochs = [l for l in lines if l["run"] == name and l["kind"] == "epoch"]
    assert epochs and epochs[-1]["epsilon"] == s["epsilon"], (name, epochs[-1:], s["epsilon"])
    assert epochs[-1]["message_epsilon"] == s["message_epsilon"], name
' "$work"
# The gossip run's timeline: one process per peer, every step's spans, and headless Chromium
# loads it as a trace.
py '
import json, sys
t = json.load(open(sys.argv[1]))["traceEvents"]
pids = sorted({e["pid"] for e in t})
assert pids == [0, 1, 2, 3], pids
names = {e["name"] for e in t}
for want in ["sample", "forward_backward", "clip", "noise", "update", "send", "recv", "wait", "eval",
             "epsilon"]:
    assert want in names, (want, sorted(names))
eps = [e["args"]["epsilon"] for e in t if e["name"] == "epsilon" and e["pid"] == 0]
assert len(eps) == 40 and abs(eps[-1] - 3.0) < 1e-3, eps[-3:]
' "$work/gossip-trace.json"
ls "$work"/gossip-trace.json.rank* 2>/dev/null && fail "the part files were left behind"
rc=0
bash "$(dirname "${BASH_SOURCE[0]}")/check_trace.sh" "$work/gossip-trace.json" || rc=$?
[[ $rc == 0 ]] || fail "headless Chromium did not load the 4-peer trace (exit $rc)"
"$(dirname "${BASH_SOURCE[0]}")/../../tools/trace_summary.py" "$work/gossip-trace.json"
# Every field every algorithm wrote has its privacy status in docs/PRIVACY.md.
check_outputs "$work/m.jsonl" "$work"/{allreduce,bucketed,gossip,ps-sync,ps-async,local-sgd,ad-psgd,partial}.json

finish algorithms
