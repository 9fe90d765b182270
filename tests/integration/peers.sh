# Shared by the peer-failure tests: source it after lib.sh and `require_fmnist`. Makes $work
# (removed on exit, with every peer started here; peer_work in lib.sh), prepares the data, and
# defines start_peers.
peer_work

"$bin" prepare --out "$work/data" >/dev/null

# start_peers TIMEOUT [N [TRAIN FLAGS...]]: N peers (default 4, all-reduce) from a fresh hosts
# file; their pids go to pids[], logs to $work/rank-R.log. The noise multiplier is given: with a
# target epsilon instead, the others wait out rank 0's calibration, which on a loaded machine (a
# sanitizer, a test beside it) can pass a short timeout and name rank 0.
start_peers() {
  local timeout=$1 n=${2:-4}
  shift; shift || true
  local algo=("$@")
  [ ${#algo[@]} -gt 0 ] || algo=(--algo allreduce)
  write_local_hosts "$n" "$work/hosts.json"
  # The previous run's logs go first: a peer opens its log only once it has forked, so the wait
  # below could otherwise read the last run's "epoch 1" and go on before the new peers are up.
  rm -f "$work"/rank-*.log
  pids=()
  for r in $(seq 0 $((n - 1))); do
    "$bin" train "${algo[@]}" --hosts "$work/hosts.json" --rank $r --data "$work/data" \
      --epochs 200 --noise-multiplier 1.1 --threads 1 --timeout-s "$timeout" --metrics "" \
      >"$work/rank-$r.log" 2>&1 &
    pids+=($!)
  done
  # Wait (bounded: 120 s) until training is under way: rank 0 has reported an epoch.
  for _ in $(seq 1 1200); do
    grep -q "epoch   1/" "$work/rank-0.log" 2>/dev/null && return 0
    sleep 0.1
  done
  echo "training did not start"; cat "$work"/rank-*.log; exit 1
}
