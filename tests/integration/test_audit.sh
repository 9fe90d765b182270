#!/usr/bin/env bash
# dpgossip audit end to end on a slice of Fashion-MNIST (10,000 rows, 50 steps, seeds fixed so
# that the verdicts are reproducible):
# - the DP run (target epsilon 3) must not be refuted: its one-run lower bound stays below the
#   run's own accountant's epsilon (true with probability >= 95% for any correct DP run; with
#   the seeds fixed it is one fixed run, measured at 0.30, far below 3);
# - the same run without noise (noise multiplier 1e-3: the clipping stays, the noise is 1/1000 of
#   the DP run's) must be caught: its lower bound must exceed 3, the epsilon the DP run claims.
#   A build that skipped the noise while claiming epsilon 3 would be refuted by the first check
#   in the same way. With 200 guesses the bound can reach at most 4.17 (all right); it was 3.43
#   (198 right).
# Then the input canaries, the JSON keys, and each bad flag named.
set -euo pipefail
bin=$1
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
fmnist_work "$bin"
small=(--data "$work/data" --train-rows 10000 --epochs 5 --batch-size 1000 --threads 1
       --seed 7 --noise-seed 11 --canaries 1000 --guesses 200 --json)

"$bin" audit "${small[@]}" --canary gradient --target-epsilon 3 >"$work/dp.json" 2>/dev/null
"$bin" audit "${small[@]}" --canary gradient --noise-multiplier 1e-3 >"$work/nonoise.json" \
  2>/dev/null
"$bin" audit "${small[@]}" --canary input --target-epsilon 3 >"$work/input.json" 2>/dev/null
py '
import json, sys
dp, nonoise, inp = (json.load(open(p)) for p in sys.argv[1:4])
for k in ["canary", "canaries", "included", "k_plus", "k_minus", "guesses", "correct",
          "confidence", "delta", "epsilon_lower_bound", "epsilon", "accountant", "dp",
          "sample_rate", "noise_multiplier", "steps", "mean_score_in", "mean_score_out",
          "test_accuracy"]:
    assert k in dp, k
assert dp["canaries"] == 1000 and dp["guesses"] == 200 and dp["k_plus"] == 100, dp
assert 400 < dp["included"] < 600, dp
assert dp["steps"] == 50 and dp["sample_rate"] == 0.1, dp
assert 2.99 < dp["epsilon"] <= 3.0, dp
print("DP run:      bound %.3f (%d of %d right), accountant %.3f" %
      (dp["epsilon_lower_bound"], dp["correct"], dp["guesses"], dp["epsilon"]))
print("no noise:    bound %.3f (%d of %d right), accountant %.3g" %
      (nonoise["epsilon_lower_bound"], nonoise["correct"], nonoise["guesses"], nonoise["epsilon"]))
print("input (DP):  bound %.3f (%d of %d right), accountant %.3f" %
      (inp["epsilon_lower_bound"], inp["correct"], inp["guesses"], inp["epsilon"]))
assert dp["epsilon_lower_bound"] < dp["epsilon"], ("the DP run is refuted", dp)
assert inp["epsilon_lower_bound"] < inp["epsilon"], ("the DP run is refuted", inp)
# The canary signal is there in both runs (included canaries move their weight down).
assert dp["mean_score_in"] > dp["mean_score_out"], dp
assert nonoise["epsilon_lower_bound"] > dp["epsilon"], ("the run without noise was not caught",
                                                        nonoise)
' "$work/dp.json" "$work/nonoise.json" "$work/input.json"

# Plain SGD is auditable (its accountant epsilon is null: there is no upper bound).
"$bin" audit --data "$work/data" --train-rows 2000 --epochs 1 --batch-size 500 --threads 1 \
  --no-dp --canaries 100 --guesses 20 --json >"$work/plain.json" 2>/dev/null
py 'import json, sys; s = json.load(open(sys.argv[1])); assert s["epsilon"] is None and not s["dp"], s
assert s["epsilon_lower_bound"] >= 0' "$work/plain.json"

# Bad input: an error naming the flag, and no output.
few=(--data "$work/data" --train-rows 2000 --epochs 1 --batch-size 500 --threads 1)
expect_error "--canary: expected gradient or input" "$bin" audit "${few[@]}" --canary weights
expect_error "--canaries: must be >= 2" "$bin" audit "${few[@]}" --canaries 1
expect_error "--guesses must be >= 1" "$bin" audit "${few[@]}" --guesses 0
expect_error "--guesses: k+ + k- must be in [1, --canaries = 100]" \
  "$bin" audit "${few[@]}" --canaries 100 --guesses 101
expect_error "give --guesses or --k-plus / --k-minus" \
  "$bin" audit "${few[@]}" --guesses 10 --k-plus 5
expect_error "--k-minus: must be >= 0" "$bin" audit "${few[@]}" --k-minus -1
expect_error "--confidence: must be in (0, 1)" "$bin" audit "${few[@]}" --confidence 1
expect_error "--train-rows must be in [0, 60000]" \
  "$bin" audit --data "$work/data" --epochs 1 --threads 1 --train-rows 70000
expect_error "give --no-dp" "$bin" audit "${few[@]}" --noise-multiplier 0
expect_error "--canaries: gradient canaries take a first-layer weight each" \
  "$bin" audit "${few[@]}" --hidden 2 --canaries 1000 --guesses 10
expect_error "/delta" "$bin" audit "${few[@]}" --delta 2
out=$("$bin" audit "${few[@]}" --canary weights 2>/dev/null) || true
[[ -z "$out" ]] || fail "a refused audit printed: $out"
finish "audit integration"
