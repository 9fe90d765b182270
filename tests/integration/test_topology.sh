#!/usr/bin/env bash
# `dpgossip topology` end to end: rho of a ring against its closed form, graphs and schedules
# read with --from, and bad input that must fail with a message naming the file and JSON path.
# Usage: test_topology.sh path/to/dpgossip
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

exe="$1"
py=/usr/bin/python3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# json_get JSON KEY -> the value of KEY, or exits non-zero if JSON does not parse or lacks it.
json_get() {
  "$py" -c 'import json, sys; print(json.loads(sys.argv[1])[sys.argv[2]])' "$1" "$2"
}

# ring_rho N -> 1/3 + 2/3 cos(2 pi / N): Metropolis weights on a ring are 1/(1 + 2) = 1/3 each.
ring_rho() {
  "$py" -c 'import math, sys; n = int(sys.argv[1]); print(1/3 + 2/3 * math.cos(2 * math.pi / n))' "$1"
}

# near VALUE WANT TOL -> exit 0 if |VALUE - WANT| <= TOL.
near() {
  "$py" -c 'import sys; v, w, t = map(float, sys.argv[1:]); sys.exit(0 if abs(v - w) <= t else 1)' "$1" "$2" "$3"
}

out=$("$exe" topology --kind ring --peers 16 --json)
for key in peers kind weights rho spectral_gap rounds_1000x period symmetric degrees; do
  json_get "$out" "$key" >/dev/null || fail "--json output lacks '$key': $out"
done
want=$(ring_rho 16)
rho=$(json_get "$out" rho)
near "$rho" "$want" 1e-9 || fail "ring of 16: rho $rho, want $want"
near "$(json_get "$out" spectral_gap)" "$("$py" -c "print(1 - $want)")" 1e-9 || fail "gap in $out"
rounds=$("$py" -c "import math; print(float(math.ceil(math.log(1000) / -math.log($want))))")
[[ $(json_get "$out" rounds_1000x) == "$rounds" ]] || fail "rounds_1000x in $out, want $rounds"
[[ $(json_get "$out" period) == 1 && $(json_get "$out" symmetric) == True ]] || fail "$out"
[[ $(json_get "$out" weights) == metropolis && $(json_get "$out" peers) == 16 ]] || fail "$out"

text=$("$exe" topology --kind ring --peers 16)
grep -Eq 'rho +0\.9' <<<"$text" || fail "text output lacks rho: $text"

# One-peer exponential on 16 peers averages exactly in log2 16 = 4 rounds; --matrix gives all 4.
out=$("$exe" topology --kind one-peer-exponential --peers 16 --json --matrix)
[[ $(json_get "$out" rounds_1000x) == 4.0 ]] || fail "one-peer exponential 16: $out"
"$py" -c 'import json, sys; m = json.loads(sys.argv[1])["matrix"]; sys.exit(0 if len(m) == 4 and len(m[0]) == 16 else 1)' "$out" ||
  fail "--matrix: expected 4 matrices of 16 rows"

# --from: a ring of 6 as an edge list, and a two-round schedule.
cat >"$tmp/ring6.json" <<'JSON'
{"peers": 6, "edges": [[0, 1], [1, 2], [2, 3], [3, 4], [4, 5], [5, 0]]}
JSON
out=$("$exe" topology --from "$tmp/ring6.json" --json)
near "$(json_get "$out" rho)" "$(ring_rho 6)" 1e-9 || fail "--from ring6.json: $out"
[[ $(json_get "$out" kind) == file ]] || fail "--from kind: $out"
cat >"$tmp/rounds.json" <<'JSON'
{"rounds": [{"peers": 4, "directed": true, "edges": [[0, 1], [1, 2], [2, 3], [3, 0]]},
            {"peers": 4, "directed": true, "edges": [[0, 2], [1, 3], [2, 0], [3, 1]]}]}
JSON
out=$("$exe" topology --from "$tmp/rounds.json" --json)
[[ $(json_get "$out" period) == 2 && $(json_get "$out" rounds_1000x) == 2.0 ]] ||
  fail "--from rounds.json: $out"

cat >"$tmp/bad.json" <<'JSON'
{"peers": 8, "edges": [[0, 1], [1, 2], [2, 3], [3, 9]]}
JSON
expect_error "$tmp/bad.json: /edges/3/1: peer 9 out of range for 8 peers" "$exe" topology --from "$tmp/bad.json"
echo '{"peers": 8,' >"$tmp/broken.json"
expect_error "$tmp/broken.json" "$exe" topology --from "$tmp/broken.json"
expect_error "$tmp/missing.json" "$exe" topology --from "$tmp/missing.json"
expect_error "ring, torus, hypercube" "$exe" topology --kind mesh --peers 8
expect_error "power of two, got 12" "$exe" topology --kind hypercube --peers 12
expect_error "column 0" "$exe" topology --kind star --peers 8 --weights uniform
expect_error "--kind and --from" "$exe" topology --peers 8
expect_error "--degree" "$exe" topology --kind ring --peers 8 --degree 3

finish "topology CLI"
