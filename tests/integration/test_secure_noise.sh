#!/usr/bin/env bash
# --secure-noise trains on 4 peers and rank 0 says where the noise comes from; a fixed noise seed is
# refused beside it, and refused with more than one peer unless --insecure-fixed-seed acknowledges
# it.
set -euo pipefail
bin=$1
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
fmnist_work "$bin"
quick=(--epochs 1 --batch-size 2048 --lr 4 --momentum 0 --ema-decay 0 --threads 1 --metrics "")

# Four peers gossiping over a ring, each drawing discrete Gaussian noise on its own grid under its
# own key from the OS.
"$bin" launch --peers 4 -- train --algo gossip --topology ring --data "$work/data" "${quick[@]}" \
  --secure-noise --json >"$work/secure.json" 2>"$work/secure.log"
grep -q "noise from ChaCha20 under a 256-bit key from the OS (examples summed and noised on an integer grid)" \
  "$work/secure.log"
py '
import json, sys
lines = [l.split("] ", 1)[-1] for l in open(sys.argv[1]) if "{" in l]
s = json.loads(lines[-1])
assert s["peers"] == 4, s["peers"]
assert s["test_accuracy"] > 0.7, s["test_accuracy"]
assert 2.99 < s["epsilon"] <= 3.0, s["epsilon"]
' "$work/secure.json"

if "$bin" train --data "$work/data" "${quick[@]}" --secure-noise --noise-seed 3 2>"$work/err.txt"; then
  echo "FAIL: --secure-noise with a noise seed accepted"; exit 1
fi
grep -q "/noise_seed" "$work/err.txt"

# Two peers given one noise seed: both refuse before connecting, naming the field.
write_local_hosts 2 "$work/hosts.json"
for r in 0 1; do
  if "$bin" train --algo allreduce --hosts "$work/hosts.json" --rank $r --data "$work/data" \
      "${quick[@]}" --noise-seed 5 --timeout-s 10 2>"$work/err-$r.txt"; then
    echo "FAIL: rank $r accepted a shared noise seed"; exit 1
  fi
  grep -q "/noise_seed is set with 2 peers" "$work/err-$r.txt"
done
# Acknowledged: the run goes on and each peer's log says what it gives up.
pids=()
for r in 0 1; do
  "$bin" train --algo allreduce --hosts "$work/hosts.json" --rank $r --data "$work/data" \
    "${quick[@]}" --noise-seed 5 --insecure-fixed-seed --timeout-s 30 2>"$work/ok-$r.txt" \
    >/dev/null &
  pids+=($!)
done
for p in "${pids[@]}"; do wait "$p"; done
for r in 0 1; do grep -q "insecure fixed noise seed" "$work/ok-$r.txt"; done
echo "secure noise integration: ok"
