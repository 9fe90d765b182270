#!/usr/bin/env bash
# `dpgossip privacy` end to end: the PLD accountant (the default) and the RDP one on Opacus's
# reference case through the CLI, --epochs and --target-epsilon, and bad flags that must fail
# with a message naming the flag.
# Usage: test_privacy.sh path/to/dpgossip
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

exe="$1"
py=/usr/bin/python3

# json_get JSON KEY -> the value of KEY, or exits non-zero if JSON does not parse or lacks it.
json_get() {
  "$py" -c 'import json, sys; print(json.loads(sys.argv[1])[sys.argv[2]])' "$1" "$2"
}

# near VALUE WANT REL -> exit 0 if |VALUE - WANT| <= REL * |WANT|.
near() {
  "$py" -c 'import sys; v, w, r = map(float, sys.argv[1:]); sys.exit(0 if abs(v - w) <= r * abs(w) else 1)' "$1" "$2" "$3"
}

# Opacus 1.5's accountant test: q = 0.04, sigma = 1.5, 2250 steps, delta = 1e-5 -> 7.32911117143
# by RDP.
out=$("$exe" privacy --accountant rdp --sample-rate 0.04 --noise-multiplier 1.5 --steps 2250 \
  --delta 1e-5 --json)
for key in epsilon best_alpha noise_multiplier sample_rate steps delta; do
  json_get "$out" "$key" >/dev/null || fail "--json output lacks '$key': $out"
done
[[ $(json_get "$out" accountant) == rdp ]] || fail "accountant in $out"
eps=$(json_get "$out" epsilon)
near "$eps" 7.32911117143 1e-6 || fail "epsilon $eps, want 7.32911117143 (Opacus)"
[[ $(json_get "$out" steps) == 2250 ]] || fail "steps in $out"

# The text output carries the same epsilon.
text=$("$exe" privacy --accountant rdp --sample-rate 0.04 --noise-multiplier 1.5 --steps 2250 \
  --delta 1e-5)
grep -Eq 'epsilon +7\.3291' <<<"$text" || fail "text output lacks epsilon 7.3291: $text"

# The PLD accountant, the default: Opacus's PRV accountant reports 6.7774 for the same case, an
# upper bound 0.01 above its estimate; ours is within 1e-3 of the true epsilon, so in
# [6.7574, 6.7774], and its optimistic estimate lies below.
out=$("$exe" privacy --sample-rate 0.04 --noise-multiplier 1.5 --steps 2250 --delta 1e-5 --json)
[[ $(json_get "$out" accountant) == pld ]] || fail "the default accountant is not pld: $out"
eps=$(json_get "$out" epsilon)
"$py" -c 'import sys; e, o = map(float, sys.argv[1:]); sys.exit(0 if 6.7574 <= e <= 6.7774 and o < e else 1)' \
  "$eps" "$(json_get "$out" epsilon_optimistic)" || fail "PLD epsilon: $out"
text=$("$exe" privacy --sample-rate 0.04 --noise-multiplier 1.5 --steps 2250 --delta 1e-5)
grep -Eq 'PLD accountant' <<<"$text" || fail "text output does not name the PLD accountant: $text"
grep -Eq 'epsilon +6\.7' <<<"$text" || fail "text output lacks epsilon 6.7: $text"

# --epochs 90 at q = 0.04 is ceil(90 / 0.04) = 2250 steps, hence the same epsilon.
out=$("$exe" privacy --accountant rdp --sample-rate 0.04 --noise-multiplier 1.5 --epochs 90 \
  --delta 1e-5 --json)
[[ $(json_get "$out" steps) == 2250 ]] || fail "--epochs 90 --sample-rate 0.04 gave $out"
[[ $(json_get "$out" epochs) == 90.0 ]] || fail "epochs missing from $out"
near "$(json_get "$out" epsilon)" 7.32911117143 1e-6 || fail "--epochs epsilon in $out"

# Calibration: Opacus finds 1.416 for target 8 (its bisection stops within 0.01 epsilon, upper end).
out=$("$exe" privacy --accountant rdp --sample-rate 0.04 --target-epsilon 8 --epochs 90 \
  --delta 1e-5 --json)
sigma=$(json_get "$out" noise_multiplier)
"$py" -c 'import sys; s = float(sys.argv[1]); sys.exit(0 if 1.41 <= s <= 1.4161 else 1)' "$sigma" ||
  fail "--target-epsilon 8 gave noise multiplier $sigma, want about 1.416"
"$py" -c 'import sys; sys.exit(0 if float(sys.argv[1]) <= 8.0 else 1)' "$(json_get "$out" epsilon)" ||
  fail "calibrated epsilon above target: $out"
[[ $(json_get "$out" target_epsilon) == 8.0 ]] || fail "target_epsilon missing from $out"

# PLD calibration at the default recipe (q 4096 / 60000, 40 epochs = 586 steps, epsilon 3):
# sigma 2.46, against RDP's 2.634.
out=$("$exe" privacy --sample-rate 0.068266666666666667 --target-epsilon 3 --epochs 40 \
  --delta 1e-5 --json)
[[ $(json_get "$out" steps) == 586 ]] || fail "recipe steps in $out"
"$py" -c 'import sys; s, e = map(float, sys.argv[1:]); sys.exit(0 if 2.45 <= s <= 2.47 and 2.99 < e <= 3 else 1)' \
  "$(json_get "$out" noise_multiplier)" "$(json_get "$out" epsilon)" || fail "PLD calibration: $out"

expect_error --sample-rate "$exe" privacy --sample-rate 0 --noise-multiplier 1 --steps 10 --delta 1e-5
expect_error --sample-rate "$exe" privacy --sample-rate 1.5 --noise-multiplier 1 --steps 10 --delta 1e-5
expect_error --epochs "$exe" privacy --sample-rate 0.1 --noise-multiplier 1 --steps 10 --epochs 3 --delta 1e-5
expect_error --delta "$exe" privacy --sample-rate 0.1 --noise-multiplier 1 --steps 10
expect_error --delta "$exe" privacy --sample-rate 0.1 --noise-multiplier 1 --steps 10 --delta 1
expect_error --noise-multiplier "$exe" privacy --sample-rate 0.1 --noise-multiplier 0 --steps 10 --delta 1e-5
expect_error --target-epsilon "$exe" privacy --sample-rate 0.1 --noise-multiplier 1 --target-epsilon 3 \
  --steps 10 --delta 1e-5
expect_error --steps "$exe" privacy --sample-rate 0.1 --noise-multiplier 1 --steps 0 --delta 1e-5
expect_error --target-epsilon "$exe" privacy --accountant rdp --sample-rate 0.01 --target-epsilon 0.01 \
  --steps 100 --delta 1e-5
expect_error --accountant "$exe" privacy --accountant prv --sample-rate 0.1 --noise-multiplier 1 \
  --steps 10 --delta 1e-5

# Pairwise network DP of gossip (docs/GOSSIP.md). Ring of 4, Metropolis weights: the opposite
# peer sees u's gradient masked by both neighbours' noise, sigma_eff = sigma sqrt(3); a neighbour
# gets the local epsilon; every entry is at most the local one.
out=$("$exe" privacy --sample-rate 0.05 --noise-multiplier 2 --steps 200 --delta 1e-5 \
  --topology ring --peers 4 --json)
"$py" - "$out" <<'PY' || fail "network DP on the ring of 4: $out"
import json, math, sys
j = json.loads(sys.argv[1]); n = j["network"]
local = j["epsilon"]
assert n["peers"] == 4 and n["local_epsilon"] == local
assert abs(n["noise_multiplier"][0][2] - 2 * math.sqrt(3)) < 1e-9
assert n["epsilon"][0][1] == local and n["epsilon"][1][0] == local and n["epsilon"][2][2] == local
assert n["epsilon"][0][2] < 0.8 * local
assert all(e <= local for row in n["epsilon"] for e in row)
assert [r["distance"] for r in n["by_distance"]] == [1, 2]
assert n["by_distance"][1]["worst_epsilon"] == max(n["epsilon"][u][(u + 2) % 4] for u in range(4))
PY
# The text output: one line per graph distance, the worst epsilon beside the local one.
text=$("$exe" privacy --sample-rate 0.05 --noise-multiplier 2 --steps 200 --delta 1e-5 \
  --topology ring --peers 8)
grep -Eq '^ +4 +8 +[0-9.]+ +[0-9.]+' <<<"$text" || fail "no distance-4 row on the ring of 8: $text"
expect_error --peers "$exe" privacy --sample-rate 0.1 --noise-multiplier 1 --steps 10 --delta 1e-5 \
  --topology ring
expect_error --topology "$exe" privacy --sample-rate 0.1 --noise-multiplier 1 --steps 10 --delta 1e-5 \
  --peers 4
expect_error --topology "$exe" privacy --sample-rate 0.1 --noise-multiplier 1 --steps 10 --delta 1e-5 \
  --topology one-peer-exponential --peers 8
expect_error --topology "$exe" privacy --sample-rate 0.1 --noise-multiplier 1 --steps 10 --delta 1e-5 \
  --topology moebius --peers 8
expect_error --peers "$exe" privacy --sample-rate 0.1 --noise-multiplier 1 --steps 10 --delta 1e-5 \
  --topology ring --peers 1000

# A best order at the edge of the grid is reported with a warning on stderr.
err=$(env -u DPG_LOG "$exe" privacy --accountant rdp --sample-rate 0.001 --noise-multiplier 5 --steps 10 \
  --delta 1e-5 2>&1 >/dev/null)
grep -q "edge of the order grid" <<<"$err" || fail "no grid-edge warning: $err"

finish "privacy CLI"
