#!/usr/bin/env bash
# Integration test of `dpgossip prepare`: error paths on tiny hand-made IDX files (bad magic,
# truncated data) must fail loudly, name the file and leave nothing behind; then the real
# Fashion-MNIST (Debian's dataset-fashion-mnist) is split into 4 peers, or the test is skipped (77).
# Usage: test_prepare.sh path/to/dpgossip
set -euo pipefail

BIN=$(realpath "$1")
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT

fail() { echo "FAIL: $*" >&2; exit 1; }

# prepare's temporary and moved-aside folders are hidden siblings of the output folder.
no_hidden_entries() {
  local hidden
  hidden=$(ls -A "$W" | grep '^\.' || true)
  [[ -z $hidden ]] || fail "temporary folder left behind: $hidden"
}

# Four valid uncompressed IDX files: 2 images of 2x2, 2 labels.
make_idx() {
  local d=$1
  mkdir -p "$d"
  printf '\x00\x00\x08\x03\x00\x00\x00\x02\x00\x00\x00\x02\x00\x00\x00\x02\x01\x02\x03\x04\x05\x06\x07\x08' \
    > "$d/train-images-idx3-ubyte"
  printf '\x00\x00\x08\x01\x00\x00\x00\x02\x03\x07' > "$d/train-labels-idx1-ubyte"
  cp "$d/train-images-idx3-ubyte" "$d/t10k-images-idx3-ubyte"
  cp "$d/train-labels-idx1-ubyte" "$d/t10k-labels-idx1-ubyte"
}

# Runs prepare on $1 (an IDX folder) expecting failure with a message naming file $2.
expect_failure() {
  local idx=$1 bad=$2 err="$W/stderr.txt" rc=0
  "$BIN" prepare --idx-dir "$idx" --out "$W/prepared" --peers 2 > /dev/null 2> "$err" || rc=$?
  [[ $rc -ne 0 ]] || fail "prepare on $idx succeeded"
  grep -qF "$bad" "$err" || fail "message does not name $bad: $(cat "$err")"
  [[ ! -e "$W/prepared" ]] || fail "output folder left behind"
  no_hidden_entries
  echo "ok: $(head -c 300 "$err")"
}

# Sanity: the hand-made files are valid, so the failures below are due to the damage alone.
make_idx "$W/good"
"$BIN" prepare --idx-dir "$W/good" --out "$W/good_out" --peers 2 > /dev/null
[[ -f "$W/good_out/manifest.json" && -f "$W/good_out/shard-00001.bin" ]] || fail "good prepare"
rm -rf "$W/good_out"

make_idx "$W/badmagic"
printf '\x00\x00\x08\x01\x00\x00\x00\x02\x00\x00\x00\x02\x00\x00\x00\x02\x01\x02\x03\x04\x05\x06\x07\x08' \
  > "$W/badmagic/train-images-idx3-ubyte"
expect_failure "$W/badmagic" "$W/badmagic/train-images-idx3-ubyte"
grep -q "0x00000803" "$W/stderr.txt" || fail "bad magic message lacks the expected magic"

make_idx "$W/truncated"
head -c 20 "$W/good/t10k-images-idx3-ubyte" > "$W/truncated/t10k-images-idx3-ubyte"
expect_failure "$W/truncated" "$W/truncated/t10k-images-idx3-ubyte"
grep -q "truncated" "$W/stderr.txt" || fail "truncation message lacks 'truncated'"

FM=/usr/share/datasets/fashion-mnist
if [[ ! -d "$FM" ]]; then
  echo "skip: $FM not installed (apt install dataset-fashion-mnist)"
  exit 77
fi

start=$(date +%s.%N)
json=$("$BIN" prepare --idx-dir "$FM" --out "$W/fm" --peers 4 --seed 1 --json)
end=$(date +%s.%N)
[[ $(printf '%s\n' "$json" | wc -l) -eq 1 && $json == \{*\} ]] || fail "--json is not one object"
manifest="$W/fm/manifest.json"
# Shard rows are summed inside "shards", the test rows read inside "test" (indent-2 manifest).
read -r train_sum test_rows shards < <(awk '
  /^  "shards"/ { s = 1; t = 0 } /^  "test"/ { s = 0; t = 1 } /^  "train_rows"/ { s = 0; t = 0 }
  /"rows":/ { v = $2; gsub(/[^0-9]/, "", v); if (s) { sum += v; n++ } if (t) test = v }
  END { print sum, test, n }' "$manifest")
[[ $shards -eq 4 ]] || fail "expected 4 shards, manifest lists $shards"
[[ $train_sum -eq 60000 ]] || fail "shard rows sum to $train_sum, expected 60000"
[[ $test_rows -eq 10000 ]] || fail "test rows $test_rows, expected 10000"
for r in 0 1 2 3; do [[ -s "$W/fm/shard-0000$r.bin" ]] || fail "shard $r missing"; done
no_hidden_entries
echo "ok: Fashion-MNIST into 4 peers: $train_sum train, $test_rows test rows in" \
  "$(echo "$end - $start" | bc 2>/dev/null || echo '?') s"
