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
assert [l["kind"] for l in every] == ["facts", "epoch", "epoch", "summary"], every
assert every[0]["privacy"]["steps"] == s["steps"] and every[0]["peer_list"][0]["rank"] == 0
lines = every[1:3]
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

# Tuning on held-out training rows: prepare --validation, train --eval-split validation. The
# epoch lines and the summary then say validation_*, never test_*; the training metrics are
# marked unprotected and the dropped-example counts are absent unless asked for.
"$bin" prepare --out "$work/val" --validation 3000 --json >"$work/val-prep.json"
py '
import json, sys
p = json.load(open(sys.argv[1]))
assert p["train_rows"] == 57000 and p["validation_rows"] == 3000, p
assert p["validation"]["rows"] == 3000 and "label_histogram" not in p["shards"][0], p
' "$work/val-prep.json"
"$bin" train --data "$work/val" --eval-split validation --target messages --epochs 1 \
  --batch-size 2048 --lr 4 --momentum 0 --ema-decay 0 --threads 1 --metrics "$work/v.jsonl" \
  --report-train-metrics --json >"$work/val.json" 2>"$work/val-progress.txt"
grep -q "val acc" "$work/val-progress.txt"
grep -q "train acc .*(unprotected)" "$work/val-progress.txt"
py '
import json, sys
s = json.load(open(sys.argv[1]))
assert "test_accuracy" not in s and s["validation_accuracy"] > 0.6, s
assert s["target"] == "messages" and "dropped_examples" not in s, s
epoch = [l for l in map(json.loads, open(sys.argv[2])) if l["kind"] == "epoch"][0]
assert epoch["train_metrics"] == "unprotected" and "dropped_examples" not in epoch, epoch
assert "validation_accuracy" in epoch and "test_accuracy" not in epoch, epoch
' "$work/val.json" "$work/v.jsonl"
"$bin" train --data "$work/val" --eval-split validation --report-dropped --epochs 1 \
  --batch-size 2048 --threads 1 --metrics "" --json >"$work/val2.json" 2>/dev/null
py 'import json, sys; s = json.load(open(sys.argv[1])); assert s["dropped_examples"] == 0 and s["skipped_batches"] == 0, s' \
  "$work/val2.json"
# By default no training loss or accuracy leaves the peer (un-noised values of private batches):
# neither in the metrics lines nor on the progress line.
"$bin" train --data "$work/val" --epochs 1 --batch-size 2048 --threads 1 --metrics "$work/p.jsonl" \
  >/dev/null 2>"$work/p-progress.txt"
if grep -q "train acc" "$work/p-progress.txt"; then echo "FAIL: train metrics shown"; exit 1; fi
py '
import json, sys
for l in open(sys.argv[1]):
    l = json.loads(l)
    assert not {"loss", "train_accuracy", "train_metrics"} & set(l), l
' "$work/p.jsonl"
if "$bin" train --data "$work/data" --eval-split validation --epochs 1 --metrics "" 2>"$work/err.txt"; then
  echo "FAIL: --eval-split validation accepted on a folder without validation rows"; exit 1
fi
grep -q "holds no validation rows" "$work/err.txt"

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
# A diverging plain-SGD run stops with an error naming the step, instead of training on NaN.
if "$bin" train --data "$work/data" --no-dp --activation relu --lr 1e30 \
    --epochs 1 --threads 1 --metrics "" 2>"$work/err.txt" >/dev/null; then
  echo "FAIL: a diverging run (--no-dp) exited 0"; exit 1
fi
grep -q "at step" "$work/err.txt"
# Under DP a batch whose every example is non-finite is skipped (its step is noise alone), not
# an abort the other peers would see: a warning in this peer's log names the first such step,
# and only --report-dropped counts them.
"$bin" train --data "$work/data" --dp --activation relu --lr 1e30 --noise-multiplier 1 \
  --epochs 1 --threads 1 --metrics "" --report-dropped --json 2>"$work/err.txt" >"$work/div.json"
grep -q "of step .* the batch was skipped" "$work/err.txt"
py '
import json, sys
s = json.load(open(sys.argv[1]))
assert s["skipped_batches"] > 0 and s["dropped_examples"] > 0, s
' "$work/div.json"
# The balancer sees a slow peer: 2 peers, rank 1 stretched 4x, rows moved by the measured
# speeds (timed one peer at a time on public work), every peer at the global rate.
"$bin" launch --peers 2 -- train --data "$work/data" --algo allreduce --epochs 1 --threads 1 \
  --metrics "" --noise-multiplier 1 --slowdown 1:4 --balance speed --json >"$work/bal.json" \
  2>"$work/bal.err" || { cat "$work/bal.err"; echo "FAIL: balanced run"; exit 1; }
py '
import json, sys
s = json.loads([l.split("] ", 1)[-1] for l in open(sys.argv[1]) if "{" in l][-1])
shares = s["balance"]["shares"]
assert len(shares) == 2 and shares[1] < 0.5 * shares[0], shares  # asked 4x: about 0.2 / 0.8
assert len(set(s["peer_q"])) == 1, s["peer_q"]
' "$work/bal.json"
# Rows that stay with their peers (a shard each), measured again at every epoch: rank 1 becomes
# 3x slower at epoch 1 and its rate drops from epoch 2 on; the noise is calibrated for the rate
# cap (twice the global rate), each peer accounted from its own rates and the model at the
# highest rate of each step, none past the target.
"$bin" prepare --out "$work/shards" --peers 2 >/dev/null
"$bin" launch --peers 2 -- train --data "$work/shards" --algo gossip --epochs 3 --threads 1 \
  --metrics "" --balance-every 1 --slowdown 1:3@epoch:1 --json >"$work/rates.json" \
  2>"$work/rates.err" || { cat "$work/rates.err"; echo "FAIL: rates run"; exit 1; }
grep -q "balance at epoch 2 (rates, rows in place" "$work/rates.err"
py '
import json, sys
s = json.loads([l.split("] ", 1)[-1] for l in open(sys.argv[1]) if "{" in l][-1])
b = s["balance"]
assert b["mode"] == "rates, rows in place" and [l["epoch"] for l in b["later"]] == [2, 3], b
q = 4096 / 60000
for l in b["later"]:
    assert l["peer_q"][1] < 0.6 * l["peer_q"][0], l        # asked 3x slower
    assert max(l["peer_q"]) <= 2 * q * (1 + 1e-9), l        # the cap
e = s["peer_epsilons"]
assert e[1] < e[0] and s["epsilon"] >= max(e) - 1e-9 and s["epsilon"] <= 3.0 + 1e-6, (s["epsilon"], e)
' "$work/rates.json"
# Every field these runs wrote has its privacy status in docs/PRIVACY.md.
check=$(dirname "${BASH_SOURCE[0]}")/../../tools/check_outputs.py
/usr/bin/python3 "$check" "$work/v.jsonl" "$work/val.json" "$work/p.jsonl" "$work/bal.json" \
  "$work/rates.json"
# ... and a field it does not list fails the check, naming the field and where it was.
echo '{"kind": "epoch", "epsilon": 1, "private_secret": 3}' >"$work/new-field.jsonl"
rc=0
/usr/bin/python3 "$check" "$work/v.jsonl" "$work/new-field.jsonl" >"$work/check.txt" 2>&1 || rc=$?
[[ $rc == 1 ]] && grep -q "field \`private_secret\` at .*new-field.jsonl:1 (epoch)" "$work/check.txt" ||
  { cat "$work/check.txt"; echo "FAIL: an unlisted field passed check_outputs (exit $rc)"; exit 1; }
echo "train integration: ok"
