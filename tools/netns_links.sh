#!/usr/bin/env bash
# tools/netns_links.sh: runs each peer of a dpgossip command in its own Linux network namespace,
# with its egress bandwidth shaped by the kernel's tbf qdisc.
#
#   tools/netns_links.sh --peers N --rate RATE [options] -- DPGOSSIP-ARGS...
#
# Layout: one namespace per peer, dpg-ns-<pid>-<r>, holding `lo` and `eth0` with address
# 10.77.0.(r+1)/24; the other end of each peer's veth pair sits in a bridge in one more namespace,
# dpg-ns-<pid>-br, so nothing is added to the root namespace. Each peer's eth0 gets
#   tc qdisc add dev eth0 root tbf rate RATE burst BURST latency LATENCY
# i.e. a peer's sending is shaped, and every byte from peer a to peer b passes a's token bucket
# (the replies pass b's). A hosts file (docs/HOSTS.md) lists peer r at 10.77.0.(r+1):PORT with a
# random 64-hex-digit "secret", and `dpgossip DPGOSSIP-ARGS --hosts FILE --rank r` runs in each
# namespace through `ip netns exec`.
#
# Bandwidth only. This kernel has tbf and htb but not netem (`tc qdisc add ... netem` is
# refused), so latency, jitter and loss stay with dpgossip's in-process shaper: add
# `--link default:latency=10ms` (or --network FILE) to the dpgossip arguments. Do not also ask
# dpgossip for a bandwidth (bw=) unless you want the lower of the two.
#
# Needs root (CAP_NET_ADMIN and CAP_SYS_ADMIN), iproute2 (ip, tc) and a kernel with veth, bridge
# and tbf. Where a namespace cannot be made it prints one line and exits 77 (meson's "skip").
#
# Exit status: the status of the first peer seen to fail (in time), 0 when all exit 0; 124 when
# --timeout-s ran out first (the peers it started are then killed); 2 for a bad command line;
# 77 where namespaces or tbf are refused. Everything it made (namespaces, veths, the bridge, its
# temporary folder, under $TMPDIR or /tmp) is removed on exit, unless --keep.
#
# Examples:
#   tools/netns_links.sh --peers 2 --rate 100mbit -- bench link --transport tcp \
#       --rows-out /tmp/rows.jsonl
#   tools/netns_links.sh --peers 2 --rate 1gbit -- bench link --transport tcp \
#       --link default:latency=10ms --rows-out /tmp/rows.jsonl
#   tools/netns_links.sh --peers 4 --rate 100mbit --peer-rate 3=10mbit -- \
#       train --algo gossip --topology ring --transport tcp --epochs 1
# Rank 0 of `bench link` writes its rows to --rows-out; their asked_mbit is 0 (dpgossip itself
# shaped nothing), so compare `mbit` with RATE.
set -euo pipefail

readonly SUBNET=10.77.0
readonly MAX_PEERS=200

usage() {
  cat <<'EOF'
usage: tools/netns_links.sh --peers N --rate RATE [options] -- DPGOSSIP-ARGS...

Runs `dpgossip DPGOSSIP-ARGS --hosts FILE --rank r` for r = 0..N-1, each in its own network
namespace (dpg-ns-<pid>-<r>, address 10.77.0.(r+1)/24, joined by veth pairs to a bridge in
dpg-ns-<pid>-br), each peer's egress shaped by the kernel's tbf qdisc. Needs root.

The kernel shapes bandwidth only: netem is not available here, so delay, jitter and loss stay
with dpgossip's in-process shaper (add e.g. `--link default:latency=10ms` to DPGOSSIP-ARGS).
Peers on different hosts talk TCP (`--transport auto` picks it; shm is refused).

options:
  --peers N          peers, 2..200 (required)
  --rate RATE        each peer's egress rate, tc syntax: 100mbit, 1gbit, 500kbit (required)
  --peer-rate R=RATE rank R's own rate instead (repeatable)
  --burst SIZE       tbf bucket size, tc syntax (default: 2 ms at the peer's rate, at least
                     64kb; 250000 bytes at 1gbit)
  --latency TIME     tbf's queue limit as a delay, tc syntax (default 50ms)
  --port P           the port every peer listens on, at its own address (default 29500)
  --bin PATH         the dpgossip binary (default build/apps/dpgossip beside tools/)
  --timeout-s S      kill the peers it started after S seconds and exit 124 (default 600)
  --grace-s S        after a peer fails, wait this long for the others, then kill them (default 15)
  --keep             leave the namespaces and the hosts file for a look (prints how to remove them)
  -h, --help         this text

exit: the first failing peer's status, else 0; 124 on --timeout-s; 2 bad usage; 77 where
network namespaces or tbf are refused (not root, no CAP_NET_ADMIN, ...).

example:
  tools/netns_links.sh --peers 2 --rate 100mbit -- bench link --transport tcp --rows-out /tmp/rows.jsonl
EOF
}

die() { echo "netns_links.sh: $*" >&2; exit 2; }
skip() { echo "netns_links.sh: SKIP: $*" >&2; exit 77; }

# A tc rate (bits per second or bytes per second, with an SI/IEC prefix) and a tc size.
rate_ok() { [[ $1 =~ ^[0-9]+(\.[0-9]+)?([kmgt]i?)?(bit|bps)$ ]]; }
size_ok() { [[ $1 =~ ^[0-9]+([kmg]i?)?(b|kb|mb|gb|kbit|mbit|gbit)?$ ]]; }
time_ok() { [[ $1 =~ ^[0-9]+(\.[0-9]+)?(s|ms|us)$ ]]; }
# Bits per second of a valid rate, for the default burst.
rate_bps() {
  local v=${1,,} mult=1
  case $v in *bps) mult=8; v=${v%bps} ;; *bit) v=${v%bit} ;; esac
  case $v in
    *ki) mult=$((mult * 1024)); v=${v%ki} ;; *k) mult=$((mult * 1000)); v=${v%k} ;;
    *mi) mult=$((mult * 1048576)); v=${v%mi} ;; *m) mult=$((mult * 1000000)); v=${v%m} ;;
    *gi) mult=$((mult * 1073741824)); v=${v%gi} ;; *g) mult=$((mult * 1000000000)); v=${v%g} ;;
    *ti) mult=$((mult * 1099511627776)); v=${v%ti} ;; *t) mult=$((mult * 1000000000000)); v=${v%t} ;;
  esac
  awk -v v="$v" -v m="$mult" 'BEGIN { printf "%.0f\n", v * m }'
}
# The default bucket of a rate: 2 ms of it, at least 64 KiB (tc's 64kb), in bytes. Measured here
# (docs/HETEROGENEITY.md): 64kb holds 100mbit within 5%, but 1gbit needs about 256kb.
burst_for() {
  awk -v b="$(rate_bps "${1,,}")" 'BEGIN { x = b / 4000; if (x < 65536) x = 65536; printf "%.0f\n", x }'
}

peers="" rate="" burst="" latency=50ms port=29500 bin="" timeout_s=600 grace_s=15 keep=0
declare -A peer_rate=()
while (($# > 0)); do
  case $1 in
    --peers) peers=${2-}; shift 2 || die "--peers needs a value" ;;
    --rate) rate=${2-}; shift 2 || die "--rate needs a value" ;;
    --peer-rate)
      [[ ${2-} =~ ^([0-9]+)=(.+)$ ]] || die "--peer-rate: expected R=RATE (3=10mbit), got '${2-}'"
      peer_rate[${BASH_REMATCH[1]}]=${BASH_REMATCH[2]}
      shift 2 ;;
    --burst) burst=${2-}; shift 2 || die "--burst needs a value" ;;
    --latency) latency=${2-}; shift 2 || die "--latency needs a value" ;;
    --port) port=${2-}; shift 2 || die "--port needs a value" ;;
    --bin) bin=${2-}; shift 2 || die "--bin needs a value" ;;
    --timeout-s) timeout_s=${2-}; shift 2 || die "--timeout-s needs a value" ;;
    --grace-s) grace_s=${2-}; shift 2 || die "--grace-s needs a value" ;;
    --keep) keep=1; shift ;;
    -h | --help) usage; exit 0 ;;
    --) shift; break ;;
    *) die "unknown option '$1' (the dpgossip arguments go after --; see --help)" ;;
  esac
done
args=("$@")

[[ $peers =~ ^[0-9]+$ ]] && ((peers >= 2 && peers <= MAX_PEERS)) ||
  die "--peers: expected 2..$MAX_PEERS, got '$peers'"
[[ -n $rate ]] || die "--rate: missing (e.g. --rate 100mbit)"
rate_ok "${rate,,}" || die "--rate: expected a tc rate like 100mbit or 1gbit, got '$rate'"
for r in "${!peer_rate[@]}"; do
  ((r < peers)) || die "--peer-rate: rank $r is out of range (--peers $peers takes 0..$((peers - 1)))"
  rate_ok "${peer_rate[$r],,}" || die "--peer-rate: expected a tc rate like 10mbit, got '${peer_rate[$r]}'"
done
[[ -z $burst ]] || size_ok "${burst,,}" || die "--burst: expected a tc size like 64kb, got '$burst'"
time_ok "$latency" || die "--latency: expected a tc time like 50ms, got '$latency'"
[[ $port =~ ^[0-9]+$ ]] && ((port >= 1 && port <= 65535)) || die "--port: expected 1..65535, got '$port'"
[[ $timeout_s =~ ^[0-9]+$ ]] && ((timeout_s >= 1)) || die "--timeout-s: expected a whole number of seconds >= 1, got '$timeout_s'"
[[ $grace_s =~ ^[0-9]+$ ]] || die "--grace-s: expected a whole number of seconds, got '$grace_s'"
((${#args[@]} > 0)) || die "no dpgossip command after -- (e.g. -- bench link --transport tcp)"
for a in "${args[@]}"; do
  case $a in
    --hosts | --hosts=* | --rank | --rank=*) die "'$a': the script gives each peer --hosts and --rank itself" ;;
  esac
done
[[ ${args[0]} != launch ]] || die "'launch' starts peers itself; give the command it would run (train ...)"

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
[[ -n $bin ]] || bin="$here/../build/apps/dpgossip"
[[ -x $bin ]] || die "--bin: $bin is not an executable (build it: ninja -C build)"
bin=$(cd "$(dirname "$bin")" && pwd)/$(basename "$bin")

command -v ip >/dev/null || skip "no 'ip' (iproute2) on PATH"
command -v tc >/dev/null || skip "no 'tc' (iproute2) on PATH"
((EUID == 0)) || skip "network namespaces need root (running as uid $EUID)"

tag="dpg-ns-$$"
brns="$tag-br"
made_ns=()  # the namespaces this run made, removed on exit
peer_r=() peer_b=()  # each rank's tbf rate and burst
pids=()     # the peers it started, by rank
work=""

kill_ours() {
  local p alive=0 i
  for p in "${pids[@]}"; do
    [[ -n $p ]] && kill -0 "$p" 2>/dev/null && { kill -TERM "$p" 2>/dev/null || true; alive=1; }
  done
  ((alive)) || return 0
  for ((i = 0; i < 30; i++)); do  # at most 3 s for them to go
    alive=0
    for p in "${pids[@]}"; do [[ -n $p ]] && kill -0 "$p" 2>/dev/null && alive=1; done
    ((alive)) || return 0
    sleep 0.1
  done
  for p in "${pids[@]}"; do [[ -n $p ]] && kill -KILL "$p" 2>/dev/null || true; done
}

cleanup() {
  local rc=$? ns
  trap - EXIT INT TERM
  kill_ours
  if ((keep)) && ((${#made_ns[@]} > 0)); then
    echo "netns_links.sh: kept namespaces ${made_ns[*]} and $work; remove them with:" >&2
    echo "  for n in ${made_ns[*]}; do ip netns del \$n; done; rm -rf $work" >&2
  else
    # Deleting a namespace deletes the veth ends and the bridge inside it.
    for ns in "${made_ns[@]}"; do ip netns del "$ns" 2>/dev/null || true; done
    [[ -n $work ]] && rm -rf "$work"
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

work=$(mktemp -d "${TMPDIR:-/tmp}/dpg-netns.XXXXXX")
chmod 700 "$work"

# The first namespace tells whether this machine allows them at all.
if ! err=$(ip netns add "$brns" 2>&1); then
  skip "cannot create a network namespace ('ip netns add' said: ${err//$'\n'/ })"
fi
made_ns+=("$brns")
ip -n "$brns" link add br0 type bridge || skip "cannot create a bridge in a namespace"
ip -n "$brns" link set br0 up
ip -n "$brns" link set lo up

for ((r = 0; r < peers; r++)); do
  ns="$tag-$r"
  ip netns add "$ns" || skip "cannot create network namespace $ns"
  made_ns+=("$ns")
  ip -n "$ns" link set lo up
  ip -n "$brns" link add "v$r" type veth peer name eth0 netns "$ns" || skip "cannot create a veth pair"
  ip -n "$brns" link set "v$r" master br0
  ip -n "$brns" link set "v$r" up
  ip -n "$ns" addr add "$SUBNET.$((r + 1))/24" dev eth0
  ip -n "$ns" link set eth0 up
  peer_r[r]=${peer_rate[$r]-$rate}
  peer_b[r]=${burst:-$(burst_for "${peer_r[r]}")}
  if ! err=$(ip netns exec "$ns" tc qdisc add dev eth0 root tbf rate "${peer_r[r]}" \
    burst "${peer_b[r]}" latency "$latency" 2>&1); then
    skip "the kernel refused 'tc qdisc add dev eth0 root tbf rate ${peer_r[r]} burst ${peer_b[r]} latency $latency': ${err//$'\n'/ }"
  fi
done

# The hosts file, with a fresh secret (docs/HOSTS.md: at least 16 bytes; 64 hex digits here).
if command -v openssl >/dev/null; then
  secret=$(openssl rand -hex 32)
else
  secret=$(od -An -N32 -tx1 /dev/urandom | tr -d ' \n')
fi
[[ $secret =~ ^[0-9a-f]{64}$ ]] || die "could not make a secret"
hosts="$work/hosts.json"
{
  echo '{"peers": ['
  for ((r = 0; r < peers; r++)); do
    printf '  {"rank": %d, "host": "%s.%d", "port": %d}%s\n' "$r" "$SUBNET" $((r + 1)) "$port" \
      "$( ((r + 1 < peers)) && echo , || true)"
  done
  printf '], "secret": "%s"}\n' "$secret"
} >"$hosts"
chmod 600 "$hosts"

for ((r = 0; r < peers; r++)); do
  echo "netns_links.sh: rank $r in $tag-$r at $SUBNET.$((r + 1)):$port, egress tbf rate ${peer_r[r]} burst ${peer_b[r]} latency $latency" >&2
done
for ((r = 0; r < peers; r++)); do
  # `ip netns exec` execs the command, so $! is the dpgossip process itself.
  ip netns exec "$tag-$r" "$bin" "${args[@]}" --hosts "$hosts" --rank "$r" &
  pids[r]=$!
done

# Wait for all, bounded: --timeout-s in all, --grace-s for the others once one has failed.
status=0 failed=-1 timed_out=0
declare -A done_rank=()
deadline=$((SECONDS + timeout_s))
while ((${#done_rank[@]} < peers)); do
  for ((r = 0; r < peers; r++)); do
    [[ -n ${done_rank[$r]-} ]] && continue
    kill -0 "${pids[r]}" 2>/dev/null && continue
    rc=0
    wait "${pids[r]}" || rc=$?
    done_rank[$r]=$rc
    if ((rc != 0 && failed < 0)); then
      failed=$r status=$rc
      echo "netns_links.sh: rank $r exited $rc; waiting at most ${grace_s} s for the others" >&2
      ((SECONDS + grace_s < deadline)) && deadline=$((SECONDS + grace_s))
    fi
  done
  ((${#done_rank[@]} < peers)) || break
  if ((SECONDS >= deadline)); then
    timed_out=1
    break
  fi
  sleep 0.2
done
if ((timed_out)); then
  left=()
  for ((r = 0; r < peers; r++)); do [[ -n ${done_rank[$r]-} ]] || left+=("$r"); done
  if ((failed < 0)); then
    echo "netns_links.sh: --timeout-s $timeout_s ran out; killing rank(s) ${left[*]}" >&2
    status=124
  else
    echo "netns_links.sh: rank(s) ${left[*]} still running ${grace_s} s after rank $failed failed; killing them" >&2
  fi
  kill_ours
fi
exit "$status"
