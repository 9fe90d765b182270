# Shared by the peer-failure tests: source it after lib.sh and `require_fmnist`. Makes $work
# (removed on exit, with every peer started here; peer_work in lib.sh), prepares the data, and
# defines start_peers.
peer_work

"$bin" prepare --out "$work/data" >/dev/null

# start_peers TIMEOUT [N [TRAIN FLAGS...]]: N peers (default 4, all-reduce) from a fresh hosts
# file; their pids go to pids[], logs to $work/rank-R.log.
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
      --epochs 200 --threads 1 --timeout-s "$timeout" --metrics "" >"$work/rank-$r.log" 2>&1 &
    pids+=($!)
  done
  # Wait (bounded) until training is under way: rank 0 has reported an epoch.
  for _ in $(seq 1 300); do
    grep -q "epoch   1/" "$work/rank-0.log" 2>/dev/null && return 0
    sleep 0.1
  done
  echo "training did not start"; cat "$work"/rank-*.log; exit 1
}
