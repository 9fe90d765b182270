#!/usr/bin/env bash
# dpgossip train end to end on Fashion-MNIST: summary keys, metrics lines, epsilon equal to what
# `dpgossip privacy` says for the same q, sigma, steps and accountant, and config errors naming
# the field.
set -euo pipefail
bin=$1
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
fmnist_work "$bin"
"$bin" train --data "$work/data" --epochs 2 --batch-size 2048 --lr 4 --momentum 0 --ema-decay 0 --threads 1 --metrics "$work/m.jsonl" --json \
  >"$work/summary.json" 2>"$work/progress.txt"
grep -q 'epoch   2/2' "$work/progress.txt"
py '
import json, sys
s = json.load(open(sys.argv[1]))
for k in ["test_accuracy", "epsilon", "delta", "noise_multiplier", "epochs", "samples_per_second"]:
    assert k in s, k
assert s["dp"] is True and s["noise_multiplier"] > 0, s
assert s["test_accuracy"] > 0.75, s["test_accuracy"]
assert 2.99 < s["epsilon"] <= 3.0, s["epsilon"]
every = [json.loads(l) for l in open(sys.argv[2])]
assert [l["kind"] for l in every] == ["epoch", "epoch", "summary"], every
lines = every[:2]
assert [l["epoch"] for l in lines] == [1, 2], lines
assert lines[-1]["test_accuracy"] == s["test_accuracy"] == every[-1]["test_accuracy"]
assert lines[0]["epsilon"] < lines[1]["epsilon"]
' "$work/summary.json" "$work/m.jsonl"

# The accountant in the summary and the privacy command, run with the same accountant, agree.
read -r q sigma steps eps accountant < <(py '
import json, sys
s = json.load(open(sys.argv[1]))
assert s["config"]["accountant"] == s["accountant"]["accountant"] == "pld", s["accountant"]
print(repr(s["sample_rate"]), repr(s["noise_multiplier"]), s["steps"], repr(s["epsilon"]),
      s["config"]["accountant"])
' "$work/summary.json")
"$bin" privacy --accountant "$accountant" --sample-rate "$q" --noise-multiplier "$sigma" \
  --steps "$steps" --delta 1e-5 --json >"$work/privacy.json"
py '
import json, sys
p = json.load(open(sys.argv[1]))
assert abs(p["epsilon"] - float(sys.argv[2])) < 1e-9, (p, sys.argv[2])
' "$work/privacy.json" "$eps"

# Plain SGD reports no epsilon.
"$bin" train --data "$work/data" --no-dp --epochs 1 --threads 1 --metrics "" --json \
  >"$work/plain.json" 2>/dev/null
py 'import json, sys; s = json.load(open(sys.argv[1])); assert s["epsilon"] is None and not s["dp"]' \
  "$work/plain.json"

# Config errors name the file and the field, and exit non-zero.
echo '{"epochs": 2, "learning_rate": 0.1}' >"$work/bad.json"
if "$bin" train --data "$work/data" --config "$work/bad.json" 2>"$work/err.txt"; then
  echo "FAIL: unknown config field accepted"; exit 1
fi
grep -q "bad.json:/learning_rate: unknown field" "$work/err.txt"
if "$bin" train --data "$work/data" --delta 2 2>"$work/err.txt"; then
  echo "FAIL: delta 2 accepted"; exit 1
fi
grep -q "/delta" "$work/err.txt"
if "$bin" train --data "$work/data" --accountant gdp 2>"$work/err.txt"; then
  echo "FAIL: accountant gdp accepted"; exit 1
fi
grep -q "/accountant: expected pld or rdp" "$work/err.txt"
# A diverging run stops with an error naming the step, instead of training on NaN.
for mode in --no-dp --dp; do
  if "$bin" train --data "$work/data" $mode --activation relu --lr 1e30 --noise-multiplier 1 \
      --epochs 1 --threads 1 --metrics "" 2>"$work/err.txt" >/dev/null; then
    echo "FAIL: a diverging run ($mode) exited 0"; exit 1
  fi
  grep -q "at step\|of step" "$work/err.txt"
done
echo "train integration: ok"
