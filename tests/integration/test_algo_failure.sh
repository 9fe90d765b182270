#!/usr/bin/env bash
# A peer killed mid-run under every algorithm beyond the all-reduce and gossip (which
# test_peer_failure.sh covers, stalls included): every other peer exits non-zero within the
# timeout with a message naming the dead peer, a parameter server's death included.
set -euo pipefail
bin=$1
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
require_fmnist
source "$(dirname "${BASH_SOURCE[0]}")/peers.sh"

# kill_one VICTIM TRAIN-FLAGS...: 4 peers, VICTIM killed once training is under way.
kill_one() {
  local victim=$1
  shift
  start_peers 20 4 "$@"
  kill -9 "${pids[$victim]}"
  wait "${pids[$victim]}" 2>/dev/null || true
  local others=()
  for r in 0 1 2 3; do [ "$r" = "$victim" ] || others+=("$r"); done
  expect_exit 25 "${others[@]}"
  local named=0
  for r in "${others[@]}"; do
    if grep -q "peer $victim" "$work/rank-$r.log"; then
      named=$((named + 1))
    else
      echo "$*: rank $r does not name peer $victim:"; cat "$work/rank-$r.log"; exit 1
    fi
  done
  ((named > 0)) || { echo "$*: no peer names peer $victim"; exit 1; }
  echo "$*: peer $victim killed; the others exited, $named of ${#others[@]} naming it"
}

kill_one 1 --algo ps-sync --servers 2              # a server
kill_one 0 --algo ps-async --servers 1             # the only server
# A worker under two servers: a server whose other workers stop behind the dead one names it.
kill_one 3 --algo ps-async --servers 2
kill_one 2 --algo local-sgd --local-steps 4
kill_one 1 --algo ad-psgd --topology ring          # a passive peer
kill_one 2 --algo allreduce --bucket-bytes 65536
kill_one 0 --algo partial-allreduce --group-size 2  # the group generator
kill_one 3 --algo partial-allreduce --group-size 3  # a member
