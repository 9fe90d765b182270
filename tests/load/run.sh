#!/usr/bin/env bash
# Load tests (docs/RELIABILITY.md): 32 peers on loopback with a small model, and a 100-million-
# parameter model all-reduced and gossiped by 4 peers, each peer's peak memory measured and held
# to a bound of a fixed number of model-sized buffers (below) plus a constant.
# Usage: bash tests/load/run.sh BUILD_DIR   (exit 77 without Fashion-MNIST)
set -euo pipefail
bin=$(realpath "${1:-build}")/apps/dpgossip
here=$(cd "$(dirname "$0")" && pwd)
source "$here/../integration/lib.sh"
fmnist_work "$bin"

# peers N DEADLINE NAME TRAIN-FLAGS...: N peers from a fresh hosts file; their peak memory to
# $work/NAME.jsonl; fails unless every peer exits 0.
peers() {
  local n=$1 deadline=$2 name=$3
  shift 3
  write_local_hosts "$n" "$work/$name-hosts.json"
  mkdir -p "$work/$name"
  local start=$SECONDS
  /usr/bin/python3 "$here/peak_rss.py" "$n" "$deadline" "$work/$name" -- \
    "$bin" train --hosts "$work/$name-hosts.json" --rank '{rank}' --threads 1 --metrics "" "$@" \
    >"$work/$name.jsonl"
  py '
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
bad = [r for r in rows if r["status"] != 0]
assert len(rows) == int(sys.argv[2]) and not bad, (bad, open(sys.argv[3] + "/rank-%d.log" % bad[0]["rank"]).read()[-2000:] if bad else rows)
' "$work/$name.jsonl" "$n" "$work/$name"
  echo "load: $name: $n peers finished in $((SECONDS - start)) s"
}

# 32 peers, a small model, one epoch of each kind of exchange.
small=(--data "$work/data" --hidden 32 --epochs 1 --timeout-s 120)
peers 32 600 allreduce-32 --algo allreduce "${small[@]}"
peers 32 600 gossip-32 --algo gossip --topology exponential "${small[@]}"

# A 100M-parameter MLP (784-9600-9600-10: 99,801,610 parameters) on 256 random rows, so that a
# step costs seconds, not minutes: 4 steps of batch 64.
py '
import random, sys
random.seed(1)
for name, rows in (("train", 256), ("test", 64)):
    with open(sys.argv[1] + "/" + name + ".csv", "w") as f:
        for _ in range(rows):
            f.write(str(random.randrange(10)) + "," + ",".join("%.3f" % random.random() for _ in range(784)) + "\n")
' "$work"
"$bin" prepare --format csv --train-csv "$work/train.csv" --test-csv "$work/test.csv" \
  --num-classes 10 --out "$work/wide" >/dev/null
params=$((784 * 9600 + 9600 + 9600 * 9600 + 9600 + 9600 * 10 + 10))
big=(--data "$work/wide" --hidden 9600,9600 --batch-size 64 --epochs 1 --noise-multiplier 1
     --metrics-eval-rows 64 --timeout-s 300)
peers 4 900 allreduce-100m --algo allreduce "${big[@]}"
peers 4 900 gossip-100m --algo gossip --topology ring "${big[@]}"

# The bound, in model-sized buffers plus 512 MiB for everything else (code, libraries, the data,
# a 64-row batch's activations, chunk buffers). All-reduce (runtime/train/trainer.cc's RunState):
# the parameters, the evaluated copy, the step's gradient sum (reduced in place), the momentum,
# the parameter average and the peers' mean model (6). Gossip on a ring: those six and the mixed
# model (7); the neighbours' models come through a fixed window of chunks, whatever the degree.
py '
import json, sys
params, work = int(sys.argv[1]), sys.argv[2]
model = 4 * params
print("load: model %d parameters, %.0f MiB" % (params, model / 2**20))
for name, buffers in (("allreduce-100m", 6), ("gossip-100m", 7), ("allreduce-32", None), ("gossip-32", None)):
    rows = [json.loads(l) for l in open(work + "/" + name + ".jsonl")]
    peak = max(r["peak_rss_bytes"] for r in rows)
    if buffers is None:
        print("load: %-15s peak memory per peer %.0f MiB (max of %d peers)" % (name, peak / 2**20, len(rows)))
        continue
    print("load: %-15s peak memory per peer %.0f MiB = %.2f x the model (max of %d peers)"
          % (name, peak / 2**20, peak / model, len(rows)))
    assert peak <= buffers * model + 2**29, (name, peak, buffers * model + 2**29)
' "$params" "$work"
