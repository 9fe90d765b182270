#!/usr/bin/env bash
# A peer that dies or stalls mid-run: every other peer exits non-zero within the timeout, with a
# message naming the peer, and no process is left behind.
set -euo pipefail
bin=$1
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
require_fmnist
source "$(dirname "${BASH_SOURCE[0]}")/peers.sh"

# 1. Rank 2 is killed: the others notice at once (connection lost or a peer's abort).
start_peers 30
kill -9 "${pids[2]}"
wait "${pids[2]}" 2>/dev/null || true
expect_exit 10 0 1 3
for r in 0 1 3; do
  grep -q "peer 2" "$work/rank-$r.log" || { echo "rank $r does not name peer 2:"; cat "$work/rank-$r.log"; exit 1; }
done
echo "killed peer: the others exited, naming peer 2"

# 2. Rank 1 stalls (SIGSTOP): the others time out after 3 s and name it.
start_peers 3
kill -STOP "${pids[1]}"
expect_exit 15 0 2 3
kill -9 "${pids[1]}"
for r in 0 2 3; do
  grep -q "peer 1 is silent" "$work/rank-$r.log" || { echo "rank $r does not name peer 1:"; cat "$work/rank-$r.log"; exit 1; }
done
grep -q "timed out" "$work/rank-0.log" "$work/rank-2.log" "$work/rank-3.log"
for r in 0 3; do grep -h -A3 "error" "$work/rank-$r.log" | head -4; done
echo "stalled peer: the others timed out, naming peer 1"

# 3. Gossip on a ring of 6: rank 3 is killed. Its neighbours 2 and 4 lose it at once; the peers
# two hops away (0, 1, 5) hear of it from their neighbours' aborts; nobody hangs.
start_peers 30 6 --algo gossip --topology ring
kill -9 "${pids[3]}"
wait "${pids[3]}" 2>/dev/null || true
expect_exit 10 0 1 2 4 5
for r in 0 1 2 4 5; do
  grep -q "peer 3" "$work/rank-$r.log" || { echo "rank $r does not name peer 3:"; cat "$work/rank-$r.log"; exit 1; }
done
echo "gossip, killed peer: the others exited, naming peer 3"

# 4. Gossip: rank 4 stalls; the others time out after 3 s and name it.
start_peers 3 6 --algo gossip --topology ring
kill -STOP "${pids[4]}"
expect_exit 15 0 1 2 3 5
kill -9 "${pids[4]}"
for r in 0 1 2 3 5; do
  grep -q "peer 4 is silent" "$work/rank-$r.log" || { echo "rank $r does not name peer 4:"; cat "$work/rank-$r.log"; exit 1; }
done
for r in 0 3; do grep -h -A3 "error" "$work/rank-$r.log" | head -4; done
echo "gossip, stalled peer: the others timed out, naming peer 4"
