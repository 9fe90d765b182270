#!/usr/bin/env bash
# A straggler held by the kernel: N peers of one dpgossip run on 127.0.0.1, rank SLOW moved into
# a cgroup (v1 cpu controller) whose CFS quota allows it QUOTA of one core. Needs root and
# /sys/fs/cgroup/cpu; prints one line per run: its label, wall_s, test accuracy and epsilon.
# Usage: quota_straggler.sh BINARY N SLOW QUOTA LABEL TRAIN-FLAGS...
#   e.g. quota_straggler.sh build/apps/dpgossip 4 3 0.125 ad-psgd-slow --algo ad-psgd --topology ring
# QUOTA 0: no cgroup (the even run). Every peer's output: $OUT/LABEL-rank-R.log (OUT default runs/quota).
set -euo pipefail
bin=$1 n=$2 slow=$3 quota=$4 label=$5
shift 5
out=${OUT:-runs/quota}
mkdir -p "$out"
group=/sys/fs/cgroup/cpu/dpgossip_straggler_$$
hosts=$(mktemp)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  rm -f "$hosts"
  if [ -d "$group" ]; then
    # Whatever is left in the group goes back to the root before the group is removed.
    while read -r p; do echo "$p" >/sys/fs/cgroup/cpu/cgroup.procs 2>/dev/null || true; done <"$group/cgroup.procs"
    rmdir "$group" 2>/dev/null || true
  fi
}
trap cleanup EXIT
/usr/bin/python3 - "$n" "$hosts" <<'PY'
import json, socket, sys
socks = [socket.socket() for _ in range(int(sys.argv[1]))]
for s in socks: s.bind(("127.0.0.1", 0))
json.dump({"peers": [{"rank": r, "host": "127.0.0.1", "port": s.getsockname()[1]}
                     for r, s in enumerate(socks)]}, open(sys.argv[2], "w"))
PY
if [ "$quota" != 0 ]; then
  mkdir "$group"
  echo 100000 >"$group/cpu.cfs_period_us"
  us=$(/usr/bin/python3 -c "import sys; print(round(100000 * float(sys.argv[1])))" "$quota")
  echo "$us" >"$group/cpu.cfs_quota_us"
fi
for r in $(seq 0 $((n - 1))); do
  if [ "$quota" != 0 ] && [ "$r" = "$slow" ]; then
    # The shell joins the group first, so the peer is held from its first instruction.
    sh -c 'echo $$ >"$1/cgroup.procs" && shift && exec "$@"' sh "$group" \
      "$bin" train --hosts "$hosts" --rank "$r" --json --metrics "" --run-name "$label" "$@" \
      >"$out/$label-rank-$r.log" 2>&1 &
  else
    "$bin" train --hosts "$hosts" --rank "$r" --json --metrics "" --run-name "$label" "$@" \
      >"$out/$label-rank-$r.log" 2>&1 &
  fi
  pids+=($!)
done
rc=0
for p in "${pids[@]}"; do wait "$p" || rc=$?; done
pids=()
[ "$rc" = 0 ] || { echo "$label: a peer failed (exit $rc); logs in $out"; exit 1; }
/usr/bin/python3 - "$out/$label-rank-0.log" "$label" <<'PY'
import json, sys
line = [l for l in open(sys.argv[1]) if l.startswith("{")][-1]
s = json.loads(line)
shares = s.get("balance", {}).get("shares") if isinstance(s.get("balance"), dict) else None
print(f"{sys.argv[2]}: wall_s {s['wall_s']:.1f}  test accuracy {100 * s['test_accuracy']:.2f}%  "
      f"epsilon {s['epsilon']:.4f}  peer epsilons {s.get('peer_epsilons')}  shares {shares}")
PY
