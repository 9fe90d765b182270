#!/usr/bin/env bash
# Every algorithm over shared memory (--transport shm) with 4 peer processes, against the same
# run over TCP: the synchronous algorithms end with the same test loss and accuracy to the last
# bit (the transports move the same bytes; fixed noise seeds), the asynchronous ones (ps-async,
# ad-psgd, whose interleaving depends on timing) within 3 points of accuracy. Then the refusals:
# --transport shm with a peer on another host, and peers started with different transports.
set -euo pipefail
bin=$1
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# A small synthetic set (4 classes around separate centres, 16 features), so that each run takes
# a second or two: the test is about the transport, not the model.
py '
import random, sys
rng = random.Random(5)
def rows(n):
    out = []
    for i in range(n):
        c = i % 4
        x = [rng.gauss(0.9 if j % 4 == c else 0.0, 1.0) for j in range(16)]
        out.append(",".join([str(c)] + ["%.4f" % v for v in x]))
    return "\n".join(out) + "\n"
open(sys.argv[1] + "/train.csv", "w").write(rows(4000))
open(sys.argv[1] + "/test.csv", "w").write(rows(1000))
' "$work"
"$bin" prepare --format csv --train-csv "$work/train.csv" --test-csv "$work/test.csv"   --out "$work/data" >/dev/null
base=(--data "$work/data" --threads 1 --json --epochs 3 --batch-size 128
      --noise-seed 7 --insecure-fixed-seed --hidden 16)
common=("${base[@]}" --timeout-s 30)

run() {  # run NAME TRANSPORT TRAIN-FLAGS...: a 4-peer run; its summary in $work/NAME-TRANSPORT.json
  local name=$1 transport=$2
  shift 2
  local start=$SECONDS
  "$bin" launch --peers 4 -- train "$@" "${common[@]}" --transport "$transport" \
    --metrics "$work/$name-$transport.jsonl" \
    >"$work/$name-$transport.json" 2>"$work/$name-$transport.log" ||
    { cat "$work/$name-$transport.log"; fail "$name over $transport failed"; }
  echo "$name over $transport: $((SECONDS - start)) s"
}

algos=(
  "allreduce --algo allreduce"
  "bucketed --algo allreduce --bucket-bytes 65536"
  "gossip --algo gossip --topology ring"
  "ps-sync --algo ps-sync --servers 2"
  "ps-async --algo ps-async --servers 2 --max-staleness 4"
  "local-sgd --algo local-sgd --local-steps 4"
  "ad-psgd --algo ad-psgd --topology ring"
)
for a in "${algos[@]}"; do
  read -r -a words <<<"$a"
  for transport in shm tcp; do run "${words[0]}" "$transport" "${words[@]:1}"; done
done

py '
import json, sys
work = sys.argv[1]
def summary(path):  # the summary, with the test loss of the last epoch line
    lines = [l.split("] ", 1)[-1] for l in open(path) if "{" in l]
    s = json.loads(lines[-1])
    epochs = [json.loads(l) for l in open(path.replace(".json", ".jsonl"))]
    s["test_loss"] = [e for e in epochs if e["kind"] == "epoch"][-1]["test_loss"]
    return s
bad = []
for name in ["allreduce", "bucketed", "gossip", "ps-sync", "ps-async", "local-sgd", "ad-psgd"]:
    shm, tcp = summary(f"{work}/{name}-shm.json"), summary(f"{work}/{name}-tcp.json")
    print("%-10s test accuracy and loss: shm %.4f %.6f, tcp %.4f %.6f" % (name,
          shm["test_accuracy"], shm["test_loss"], tcp["test_accuracy"], tcp["test_loss"]))
    if shm["peers"] != 4: bad.append(name + ": peers")
    exact = name not in ("ps-async", "ad-psgd")
    if exact and (shm["test_accuracy"], shm["test_loss"]) != (tcp["test_accuracy"], tcp["test_loss"]):
        bad.append("%s: %r, %r over shm, %r, %r over tcp" % (name, shm["test_accuracy"],
                   shm["test_loss"], tcp["test_accuracy"], tcp["test_loss"]))
    if not exact and abs(shm["test_accuracy"] - tcp["test_accuracy"]) > 0.03:
        bad.append("%s: %r over shm, %r over tcp" % (name, shm["test_accuracy"], tcp["test_accuracy"]))
    if abs(shm["epsilon"] - tcp["epsilon"]) > 1e-12: bad.append(name + ": epsilon")
    if not shm["test_accuracy"] > 0.4: bad.append("%s: accuracy %r" % (name, shm["test_accuracy"]))
assert not bad, bad
' "$work" || fail "shm against tcp"

# Two emulated hosts (127.0.0.1 and 127.0.0.2, two peers each): under auto each pair on one host
# shares memory and the pairs across hosts use TCP, through one routed transport; the all-reduce
# run ends bit-equal to the one over TCP alone.
py '
import json, socket, sys
socks = []
for r in range(4):
    s = socket.socket()
    s.bind(("127.0.0.%d" % (1 + r // 2), 0))
    socks.append(s)
json.dump({"peers": [{"rank": r, "host": s.getsockname()[0], "port": s.getsockname()[1]}
                     for r, s in enumerate(socks)]}, open(sys.argv[1], "w"))
' "$work/hosts2x2.json"
"$bin" launch --hosts "$work/hosts2x2.json" -- train --algo allreduce "${common[@]}" \
  --transport auto --metrics "$work/mixed-auto.jsonl" >"$work/mixed-auto.json" \
  2>"$work/mixed-auto.log" || { cat "$work/mixed-auto.log"; fail "2 hosts x 2 peers failed"; }
grep -q "transport: shared memory with peer 1; TCP with peers 2, 3" "$work/mixed-auto.log" ||
  fail "rank 0 did not route peer 1 over shared memory and peers 2, 3 over TCP: $(head -5 "$work/mixed-auto.log")"
py '
import json, sys
def loss(path):
    return [e for e in map(json.loads, open(path)) if e["kind"] == "epoch"][-1]["test_loss"]
a, b = loss(sys.argv[1] + "/mixed-auto.jsonl"), loss(sys.argv[1] + "/allreduce-tcp.jsonl")
assert a == b, (a, b)
print("2 hosts x 2 peers, shared memory within and TCP across: test loss %.6f as over TCP" % a)
' "$work" || fail "mixed transports against tcp"

# The hierarchical all-reduce on the same 2 x 2: reduce-scatter within each host, the shards
# across. It adds in another order, so the run is not bit-equal, but it is the same training:
# accuracy within 0.03 of the flat run's and the same epsilon.
"$bin" launch --hosts "$work/hosts2x2.json" -- train --algo allreduce --hierarchical \
  "${common[@]}" --metrics "$work/hier.jsonl" >"$work/hier.json" 2>"$work/hier.log" ||
  { cat "$work/hier.log"; fail "hierarchical on 2 hosts x 2 peers failed"; }
py '
import json, sys
def last(path):
    return [json.loads(l.split("] ", 1)[-1]) for l in open(path) if "{" in l][-1]
h, f = last(sys.argv[1] + "/hier.json"), last(sys.argv[1] + "/mixed-auto.json")
assert abs(h["test_accuracy"] - f["test_accuracy"]) <= 0.03, (h["test_accuracy"], f["test_accuracy"])
assert h["epsilon"] == f["epsilon"] and h["peers"] == 4, (h, f)
print("hierarchical: test accuracy %.4f against flat %.4f" % (h["test_accuracy"], f["test_accuracy"]))
' "$work" || fail "hierarchical against flat"
# local-sgd averages its models the same way with --hierarchical.
"$bin" launch --hosts "$work/hosts2x2.json" -- train --algo local-sgd --local-steps 4 \
  --hierarchical "${common[@]}" --metrics "" >"$work/hier-local.json" 2>"$work/hier-local.log" ||
  { cat "$work/hier-local.log"; fail "hierarchical local-sgd on 2 hosts x 2 peers failed"; }
py '
import json, sys
def last(path):
    return [json.loads(l.split("] ", 1)[-1]) for l in open(path) if "{" in l][-1]
h, f = last(sys.argv[1] + "/hier-local.json"), last(sys.argv[1] + "/local-sgd-tcp.json")
assert abs(h["test_accuracy"] - f["test_accuracy"]) <= 0.03, (h["test_accuracy"], f["test_accuracy"])
assert h["epsilon"] == f["epsilon"], (h, f)
print("hierarchical local-sgd: test accuracy %.4f against flat %.4f" % (h["test_accuracy"], f["test_accuracy"]))
' "$work" || fail "hierarchical local-sgd against flat"

# A peer on another host (127.0.0.2 is another host to the hosts file) cannot share memory.
py '
import json, sys
json.dump({"peers": [{"rank": 0, "host": "127.0.0.1", "port": 41001},
                     {"rank": 1, "host": "127.0.0.2", "port": 41002}]}, open(sys.argv[1], "w"))
' "$work/two-hosts.json"
expect_error "--transport shm: peer 1 is on host 127.0.0.2" \
  "$bin" train --algo allreduce --hosts "$work/two-hosts.json" --rank 0 "${common[@]}" \
  --metrics "" --transport shm
# Peers started with different transports never meet; the set-up says so within its timeout.
write_local_hosts 2 "$work/hosts.json"
"$bin" train --algo allreduce --hosts "$work/hosts.json" --rank 1 "${base[@]}" --timeout-s 2 --metrics "" \
  --transport tcp >/dev/null 2>&1 &
other=$!
expect_error "must run with the same --transport" \
  "$bin" train --algo allreduce --hosts "$work/hosts.json" --rank 0 "${base[@]}" --timeout-s 2 --metrics "" \
  --transport shm
wait "$other" && fail "rank 1 over tcp met rank 0 over shm"

finish shm
