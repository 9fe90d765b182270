#!/usr/bin/env bash
# `dpgossip launch` and signals, on real peers (two `bench allreduce` peers of a long run):
# SIGTERM to the launcher reaches every peer as SIGTERM, SIGINT as SIGINT, and a launcher killed
# outright takes its peers with it; a peer signalled in its connection set-up ends at once. Every
# peer is checked gone by its PID afterwards. Only processes this script started are signalled.
# Usage: test_launch_signals.sh path/to/dpgossip
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

exe="$1"
work=$(mktemp -d)
launcher=""
trap '[[ -n $launcher ]] && kill -KILL "$launcher" 2>/dev/null; rm -rf "$work"' EXIT
export TMPDIR="$work"

# The PIDs of a process's children, from /proc (no procps needed).
children_of() {
  py '
import os, sys
parent = sys.argv[1]
for p in os.listdir("/proc"):
    if not p.isdigit():
        continue
    try:
        stat = open(f"/proc/{p}/stat").read()
    except OSError:
        continue
    if stat[stat.rindex(")") + 2:].split()[1] == parent:
        print(p)
' "$1"
}

# Whether pid $1 runs: it exists and is not a zombie (a peer reparented to a PID 1 that does not
# reap would stay one).
alive() {
  local state
  state=$(cut -d')' -f2 "/proc/$1/stat" 2>/dev/null | awk '{print $1}') || return 1
  [[ -n $state && $state != Z ]]
}

# Starts the launcher in the background with 2 peers that run for minutes, and waits (at most
# 20 s) until both peers are up and connected (rank 0 has both sockets). Sets $launcher, $peers.
start_launcher() {
  "$exe" launch --peers 2 --grace-s "$1" -- bench allreduce --sizes 1M --warmup 0 \
    --repeats 100000000 --rows-out "$work/rows.jsonl" >"$work/out" 2>"$work/err" &
  launcher=$!
  peers=""
  for _ in $(seq 200); do
    peers=$(children_of "$launcher" | tr '\n' ' ')
    [[ $(wc -w <<<"$peers") == 2 ]] &&
      tr '\0' ' ' <"/proc/${peers%% *}/cmdline" 2>/dev/null | grep -q "bench allreduce" && break
    sleep 0.1
  done
  [[ $(wc -w <<<"$peers") == 2 ]] || { fail "launcher $launcher: no 2 peers: '$peers'"; return 1; }
  sleep 1  # past start-up: the peers are in the all-reduce loop
}

# Waits (at most $1 s) for the launcher to exit; sets $rc (124: still running, then killed).
wait_launcher() {
  local i
  for ((i = 0; i < $1 * 20; i++)); do
    alive "$launcher" || break
    sleep 0.05
  done
  if alive "$launcher"; then
    kill -KILL "$launcher"
    wait "$launcher" || true
    rc=124
  else
    rc=0
    wait "$launcher" || rc=$?
  fi
  launcher=""
}

peers_gone() {
  local p
  for p in $peers; do
    if alive "$p"; then
      fail "$1: peer pid $p outlived the launcher"
      kill -KILL "$p" 2>/dev/null || true
    fi
  done
}

# 1. SIGTERM to the launcher: every peer gets SIGTERM itself, the launcher exits 128 + 15.
start_launcher 5
kill -TERM "$launcher"
wait_launcher 15
[[ $rc == 143 ]] || fail "SIGTERM: launcher exit $rc, want 143: $(cat "$work/err")"
grep -q "got SIGTERM; passing SIGTERM to 2 ranks" "$work/err" ||
  fail "SIGTERM: not passed on: $(cat "$work/err")"
for r in 0 1; do
  grep -q "rank $r stopped: killed by SIGTERM" "$work/err" ||
    fail "SIGTERM: rank $r did not end by SIGTERM: $(cat "$work/err")"
done
peers_gone "SIGTERM"

# 2. Ctrl-C: passed on as SIGINT (a peer may treat it unlike SIGTERM). A second one right after
# is SIGKILL for whoever is left (tests/unit/launch covers that with children that survive the
# first); either way the launcher ends at once, long before the 60 s grace, with 130.
start_launcher 60
kill -INT "$launcher"
for _ in $(seq 100); do grep -q "got SIGINT" "$work/err" && break; sleep 0.05; done
kill -INT "$launcher" 2>/dev/null || true
t0=$(date +%s.%N)
wait_launcher 10
took=$(py "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.1f}')" "$t0" "$(date +%s.%N)")
[[ $rc == 130 ]] || fail "SIGINT: launcher exit $rc, want 130: $(cat "$work/err")"
py "import sys; sys.exit(float(sys.argv[1]) >= 5)" "$took" || fail "SIGINT: the launcher took $took s to end"
grep -q "got SIGINT; passing SIGINT to 2 ranks" "$work/err" || fail "SIGINT: $(cat "$work/err")"
for r in 0 1; do
  grep -Eq "rank $r stopped: killed by (SIGINT|SIGKILL)" "$work/err" ||
    fail "SIGINT: rank $r did not end by SIGINT or SIGKILL: $(cat "$work/err")"
done
peers_gone "SIGINT"

# 3. A launcher killed outright (no chance to forward anything): its peers still stop
# (PR_SET_PDEATHSIG), within seconds.
start_launcher 5
kill -KILL "$launcher"
wait "$launcher" 2>/dev/null || true
launcher=""
for _ in $(seq 100); do
  left=0
  for p in $peers; do alive "$p" && left=1; done
  ((left == 0)) && break
  sleep 0.05
done
peers_gone "launcher killed"

# 4. SIGTERM to a peer still in its connection set-up (its other peer never starts, the set-up's
# deadline is 60 s): it ends within a second or two, saying so, over TCP and over shared memory.
write_local_hosts 2 "$work/setup-hosts.json"
for transport in tcp shm; do
  "$exe" train --algo allreduce --hosts "$work/setup-hosts.json" --rank 0 --transport $transport \
    --timeout-s 60 --epochs 1 --metrics "" >/dev/null 2>"$work/setup-$transport.err" &
  peer=$!
  for _ in $(seq 200); do  # until it waits for its peer (10 s at most)
    grep -q "rank 0: transport: " "$work/setup-$transport.err" 2>/dev/null && break
    sleep 0.05
  done
  sleep 0.3
  t0=$(date +%s.%N)
  kill -TERM $peer
  rc=0
  wait $peer || rc=$?
  took=$(py "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.1f}')" "$t0" "$(date +%s.%N)")
  [[ $rc == 1 ]] || fail "SIGTERM in the $transport set-up: exit $rc: $(cat "$work/setup-$transport.err")"
  py "import sys; sys.exit(float(sys.argv[1]) >= 2)" "$took" ||
    fail "SIGTERM in the $transport set-up: took $took s"
  grep -q "stopped by a signal during the connection set-up" "$work/setup-$transport.err" ||
    fail "SIGTERM in the $transport set-up: $(cat "$work/setup-$transport.err")"
done

finish "launch signals"
