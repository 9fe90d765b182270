#!/usr/bin/env bash
# Data-parallel DP-SGD across 4 processes on 127.0.0.1: the same accuracy as one process with the
# same settings, epsilon for the model and for one peer's messages in both noise modes, and a
# refusal when the peers were started with different settings.
set -euo pipefail
bin=$1
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
fmnist_work "$bin"
common=(--data "$work/data" --epochs 6 --threads 1 --json)

"$bin" train "${common[@]}" --metrics "" >"$work/one.json" 2>"$work/one.log"
"$bin" launch --peers 4 -- train --algo allreduce "${common[@]}" --metrics "$work/m.jsonl" \
  >"$work/four.json" 2>"$work/four.log"
"$bin" launch --peers 4 -- train --algo allreduce --noise-mode local "${common[@]}" --metrics "" \
  >"$work/local.json" 2>"$work/local.log"

py '
import json, math, sys
def summary(path):
    lines = [l.split("] ", 1)[-1] for l in open(path) if "{" in l]
    return json.loads(lines[-1])
one, four, local = (summary(p) for p in sys.argv[1:4])
print("one peer %.4f, four peers %.4f, four peers local noise %.4f" %
      (one["test_accuracy"], four["test_accuracy"], local["test_accuracy"]))
assert four["peers"] == 4 and one["peers"] == 1
assert abs(four["test_accuracy"] - one["test_accuracy"]) < 0.015, (one["test_accuracy"], four["test_accuracy"])
assert four["test_accuracy"] > 0.75, four["test_accuracy"]
# Distributed noise: the model has the one-process guarantee; each message carries sigma / 2.
assert abs(four["epsilon"] - one["epsilon"]) < 1e-9, (four["epsilon"], one["epsilon"])
assert abs(four["noise_multiplier"] - one["noise_multiplier"]) < 1e-12
assert abs(four["peer_noise_multiplier"] - one["noise_multiplier"] / 2) < 1e-12
assert four["message_epsilon"] > 3 * four["epsilon"], four
# Local noise: every message has the one-process guarantee; the model is better protected.
assert abs(local["message_epsilon"] - one["epsilon"]) < 1e-9, local
assert local["epsilon"] < one["epsilon"] / 2, local
assert abs(local["noise_multiplier"] - 2 * one["noise_multiplier"]) < 1e-12
lines = [json.loads(l) for l in open(sys.argv[4])]
epochs = [l for l in lines if l["kind"] == "epoch"]
assert [l["epoch"] for l in epochs] == list(range(1, 7)), "rank 0 alone writes the metrics"
assert [l["kind"] for l in lines] == ["facts"] + ["epoch"] * 6 + ["summary"], lines[-1]
assert all(l["peers"] == 4 and l["algo"] == "allreduce" for l in lines)
assert len({l["run"] for l in lines}) == 1
assert lines[-1]["spectral_gap"] == 1 and lines[-1]["topology"] == "allreduce"
' "$work/one.json" "$work/four.json" "$work/local.json" "$work/m.jsonl"

# Peers started with different settings refuse to train together and say why.
write_local_hosts 2 "$work/hosts.json"
set +e
"$bin" train --algo allreduce --hosts "$work/hosts.json" --rank 0 --data "$work/data" --epochs 1 \
  --lr 0.5 --timeout-s 20 --metrics "" 2>"$work/r0.log" &
p0=$!
"$bin" train --algo allreduce --hosts "$work/hosts.json" --rank 1 --data "$work/data" --epochs 1 \
  --lr 0.7 --timeout-s 20 --metrics "" 2>"$work/r1.log"
rc1=$?
wait $p0
rc0=$?
set -e
[ $rc0 -ne 0 ] && [ $rc1 -ne 0 ] || { echo "peers with different --lr trained together"; exit 1; }
grep -q "different training configuration" "$work/r0.log" "$work/r1.log"
echo "ok"
