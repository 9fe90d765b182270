#!/usr/bin/env bash
# AD-PSGD with 4 peer processes on a ring on 127.0.0.1: the run trains, every averaging is counted,
# the K-step consensus reports (rank 0's polls of the models) and the evaluations (collectives
# among the asynchronous pairings) all happen; a graph that is not bipartite is refused naming it; a peer that hangs makes the
# others fail, naming it, within the timeout.
set -euo pipefail
bin=$1
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
fmnist_work "$bin"
common=(--data "$work/data" --threads 1 --json)

"$bin" launch --peers 4 -- train --algo ad-psgd --topology ring --epochs 2 "${common[@]}" \
  --timeout-s 60 --metrics "$work/ring.jsonl" --run-name ad4 >"$work/ring.json" 2>"$work/ring.log"
py '
import json, sys
lines = [l.split("] ", 1)[-1] for l in open(sys.argv[1]) if "{" in l]
s = json.loads(lines[-1])
print("ad-psgd, ring of 4: test accuracy %.4f, worst epsilon %.3f, %d pairings of rank 0" %
      (s["test_accuracy"], s["epsilon"], s["pairings"]))
assert s["algo"] == "ad-psgd" and s["topology"] == "ring" and s["peers"] == 4, s
assert s["role"] == "active" and s["pairings"] == s["steps"], s
assert s["test_accuracy"] > 0.6, s["test_accuracy"]
assert len(s["peer_epsilons"]) == 4 and s["epsilon"] == max(s["peer_epsilons"])
lines = [json.loads(l) for l in open(sys.argv[2])]
cons = [l for l in lines if l["kind"] == "consensus"]
# Rank 0 polls the models every 5 of its steps (a round that comes while the last report is being
# made is skipped): each line has the model of every peer, at a step of that peer.
rounds = [c["round"] for c in cons]
assert rounds[0] == 0 and len(rounds) >= 3, rounds
assert all(r % 5 == 0 and r <= s["steps"] for r in rounds) and rounds == sorted(set(rounds)), rounds
for c in cons:
    assert c["peers_reported"] == 4 and len(c["peer_steps"]) == 4, c
    assert c["peer_steps"][0] == c["round"] and len(c["peer_test_accuracy"]) == 4, c
assert all(c["consensus_distance"] > 0 for c in cons[1:])
assert [l["kind"] for l in lines].count("epoch") == 2
' "$work/ring.json" "$work/ring.jsonl"

# An odd ring is refused on every peer, naming the graph.
expect_error 'the graph "ring" of 3 peers is not bipartite' \
  "$bin" launch --peers 3 -- train --algo ad-psgd --topology ring --epochs 1 "${common[@]}" \
  --metrics ""

# Rank 2 hangs (SIGSTOP) after the first epoch: the others fail within the timeout, naming it.
# A fixed noise multiplier: the others would wait out rank 0's calibration, which on a loaded
# machine (a sanitizer, a test beside it) can pass the timeout and name rank 0 instead.
"$bin" launch --peers 4 -- train --algo ad-psgd --topology ring --epochs 30 "${common[@]}" \
  --noise-multiplier 1.1 --timeout-s 10 --metrics "" >/dev/null 2>"$work/hang.log" &
launcher=$!
for _ in $(seq 120); do
  grep -q "epoch   1" "$work/hang.log" 2>/dev/null && break
  sleep 0.5
done
victim=$(pgrep -P "$launcher" -f -- "--rank 2$" | head -1 || true)  # this run's rank 2 only
if [[ -z $victim ]]; then
  fail "rank 2 not found"
else
  kill -STOP "$victim"
  start=$(date +%s)
  rc=0
  wait "$launcher" || rc=$?
  took=$(($(date +%s) - start))
  kill -KILL "$victim" 2>/dev/null || true
  [[ $rc != 0 ]] || fail "the run succeeded with a hung peer"
  ((took < 45)) || fail "the others took ${took} s to give up on the hung peer"
  # Whichever peer times out first names it; the others may fail first on that peer's abort
  # (code aborted), with its message, which names peer 2 too.
  grep -qE "\] dpgossip train .*error \((deadline_exceeded|aborted)\): rank [013]: .*peer 2 is silent" \
    "$work/hang.log" ||
    fail "no peer named the hung peer 2: $(grep error "$work/hang.log" | head -3)"
fi
check_outputs "$work/ring.jsonl" "$work/ring.json"
finish ad-psgd
