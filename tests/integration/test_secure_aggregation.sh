#!/usr/bin/env bash
# Secure aggregation across 4 processes on 127.0.0.1 (docs/PRIVACY.md): the run trains to the
# plain distributed all-reduce's accuracy at the same target epsilon, reports the model's epsilon
# against the other peers beside the model's own on every metrics line and in the summary, and
# combinations it cannot serve are refused naming the field.
set -euo pipefail
bin=$1
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
fmnist_work "$bin"
common=(--algo allreduce --data "$work/data" --epochs 6 --threads 1 --json)

"$bin" launch --peers 4 -- train "${common[@]}" --metrics "" >"$work/plain.json" 2>"$work/plain.log"
"$bin" launch --peers 4 -- train "${common[@]}" --secure-aggregation --metrics "$work/m.jsonl" \
  >"$work/secure.json" 2>"$work/secure.log" || { cat "$work/secure.log"; exit 1; }

py '
import json, sys
def summary(path):
    lines = [l.split("] ", 1)[-1] for l in open(path) if "{" in l]
    return json.loads(lines[-1])
plain, secure = summary(sys.argv[1]), summary(sys.argv[2])
sa = secure["secure_aggregation"]
print("plain %.4f (sigma %.4f), secure aggregation %.4f (sigma %.4f; epsilon %.4f, against the "
      "peers %.4f; grid %g, mu %.4g, overflow bound %.2g)" %
      (plain["test_accuracy"], plain["noise_multiplier"], secure["test_accuracy"],
       secure["noise_multiplier"], secure["epsilon"], secure["peers_epsilon"], sa["grid_scale"],
       sa["skellam_mu"], sa["overflow_bound"]))
assert secure["config"]["secure_aggregation"] is True
# The target holds for the model; against a peer (who knows its own share) it is weaker, but far
# from the plain run, where a peer reads each message with sigma / 2 of noise.
assert secure["epsilon"] <= 3.0 + 1e-9, secure["epsilon"]
assert secure["epsilon"] < secure["peers_epsilon"] < plain["message_epsilon"] / 1.5, (secure, plain)
assert secure["message_epsilon"] == secure["peers_epsilon"]
# Skellam by Renyi DP (the general subsampling bound) needs more noise than the Gaussian by PLD.
assert plain["noise_multiplier"] < secure["noise_multiplier"], (plain, secure)
assert sa["overflow_bound"] < 1e-9 and sa["grid_scale"] >= 2 ** 12
assert secure["test_accuracy"] > plain["test_accuracy"] - 0.02, (plain["test_accuracy"], secure["test_accuracy"])
# The saved account is the Skellam mechanism the run was accounted as, not a Gaussian.
acc = secure["accountant"]
assert acc["mechanism"] == "poisson_skellam" and len(acc["history"]) == 1, acc
seg = acc["history"][0]
assert seg["mu"] == sa["skellam_mu"] and seg["l1"] == sa["l1_sensitivity"], (seg, sa)
assert seg["l2"] == sa["l2_sensitivity"] and seg["steps"] == secure["steps"], (seg, secure)
assert plain["accountant"]["mechanism"] == "poisson_gaussian", plain["accountant"]
lines = [json.loads(l) for l in open(sys.argv[3])]
epochs = [l for l in lines if l["kind"] == "epoch"]
assert len(epochs) == 6 and all("peers_epsilon" in l for l in epochs), lines
assert all(l["epsilon"] <= l["peers_epsilon"] for l in epochs)
' "$work/plain.json" "$work/secure.json" "$work/m.jsonl"

# What secure aggregation cannot serve is refused before any training, naming the field.
for bad in "--algo gossip" "--algo allreduce --noise-mode local" "--algo allreduce --bucket-bytes 65536" \
           "--algo allreduce --no-dp"; do
  # shellcheck disable=SC2086
  if "$bin" train $bad --secure-aggregation --data "$work/data" --epochs 1 --metrics "" \
      >"$work/bad.log" 2>&1; then
    echo "train $bad --secure-aggregation was accepted"; exit 1
  fi
  grep -q "secure_aggregation" "$work/bad.log" || { cat "$work/bad.log"; exit 1; }
done
/usr/bin/python3 "$(dirname "${BASH_SOURCE[0]}")/../../tools/check_outputs.py" \
  "$work/secure.json" "$work/m.jsonl"
echo "ok"
