#!/usr/bin/env bash
# Who may join (docs/SECURITY.md), with real processes on 127.0.0.1.
# 1. Three peers share a secret (a file the hosts file names). While rank 0 waits for the others,
#    clients with a wrong secret, a wrong rank, a hello frame of a bad length, and one that says
#    nothing try to join: each is refused and logged with its address and the reason, then the
#    genuine peers join and the run finishes. The secret appears in no log.
# 2. Two peers with --tls (certificates of a throwaway CA from the openssl program) finish; a peer
#    whose certificate another CA signed is refused, and the genuine peer still joins.
set -euo pipefail
bin=$1
here="$(dirname "${BASH_SOURCE[0]}")"
source "$here/lib.sh"
require_fmnist
source "$here/peers.sh"  # $work (removed on exit, with the peers in pids[]), $work/data
unset DPGOSSIP_SECRET

port_of() { py 'import json, sys; print(json.load(open(sys.argv[1]))["peers"][int(sys.argv[2])]["port"])' "$1" "$2"; }
# Over TCP (peers of one host would otherwise share memory, which checks the user id instead).
any_link=(train --algo allreduce --data "$work/data" --epochs 0.3 --threads 1 --timeout-s 20
          --metrics "" --json)
train=("${any_link[@]}" --transport tcp)

# Waits for every peer in $@, each given as PID:LOG (bounded by the peers' own timeouts); fails
# on a non-zero exit, naming the peer's log and printing its end.
expect_success() {
  local what=$1; shift
  local rc
  for pl in "$@"; do
    rc=0; wait "${pl%%:*}" || rc=$?
    if [ "$rc" -ne 0 ]; then
      fail "$what: the peer logging to ${pl#*:} exited with status $rc; its log ends:
$(tail -n 20 "${pl#*:}")"
    fi
  done
}

# ---- 1. the secret, and four clients that must not join ----
write_local_hosts 3 "$work/hosts.json"
secret=$(py 'import secrets; print(secrets.token_hex(32))')
echo "$secret" >"$work/secret.txt"
py 'import json, sys
h = json.load(open(sys.argv[1])); h["secret_file"] = "secret.txt"; json.dump(h, open(sys.argv[1], "w"))' \
  "$work/hosts.json"
port0=$(port_of "$work/hosts.json" 0)

"$bin" "${train[@]}" --hosts "$work/hosts.json" --rank 0 >"$work/r0.json" 2>"$work/r0.log" &
pids+=($!); peers=("$!:$work/r0.log")
declare -A want=(
  [wrong-secret]="failed the challenge: it does not know the cluster secret"
  [wrong-rank]="rank 99 is outside the 3 peers"
  [bad-length]="sent a malformed hello: hello frame of 1099511627776 bytes"
  [silent]="no complete handshake within 5000 ms"
)
for case in wrong-secret wrong-rank bad-length silent; do
  out=$(python3 "$here/bad_client.py" "$case" "$port0" 20) || fail "$case: $out"
  echo "$out"
  addr=$(awk '{print $(NF-4)}' <<<"$(tail -n1 <<<"$out")")
  # The refusal is logged with the client's address and the reason (bounded wait for the line).
  for _ in $(seq 1 50); do grep -qF "refused a connection from $addr" "$work/r0.log" && break; sleep 0.1; done
  grep -F "refused a connection from $addr" "$work/r0.log" | grep -qF "${want[$case]}" ||
    fail "$case: rank 0 did not log the refusal of $addr with '${want[$case]}'"
done
grep -qF "(claiming rank 0): rank 0 is this peer's own" "$work/r0.log" ||
  fail "wrong-rank: the claim of rank 0 is not logged"

for r in 1 2; do
  "$bin" "${train[@]}" --hosts "$work/hosts.json" --rank $r >"$work/r$r.json" 2>"$work/r$r.log" &
  pids+=($!); peers+=("$!:$work/r$r.log")
done
expect_success "secret run" "${peers[@]}"
py 'import json, sys
s = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])
assert s["peers"] == 3 and s["steps"] > 0 and s["epsilon"] > 0, s
print("secret run: 3 peers finished, %d steps, test accuracy %.3f" % (s["steps"], s["test_accuracy"]))' \
  "$work/r0.json" || fail "secret run: no summary from rank 0"
grep -qF "peers must prove the cluster secret from $work/secret.txt" "$work/r0.log" ||
  fail "rank 0 does not say where the secret came from"
if grep -qF "$secret" "$work"/r*.log "$work"/r*.json; then fail "the secret appears in a log"; fi
pids=()

# ---- 2. TLS ----
bash "$here/../tls/make_certs.sh" "$work/pki" r0 r1 >/dev/null
bash "$here/../tls/make_certs.sh" "$work/other" r1 >/dev/null
write_local_hosts 2 "$work/tls.json"
py 'import json, sys
h = json.load(open(sys.argv[1]))
h["tls"] = {"ca_file": "pki/ca.pem"}
for p in h["peers"]:
    p["cert_file"] = "pki/r%d.pem" % p["rank"]; p["key_file"] = "pki/r%d.key" % p["rank"]
json.dump(h, open(sys.argv[1], "w"))
h["tls"]["ca_file"] = "other/ca.pem"
h["peers"][1].update(cert_file="other/r1.pem", key_file="other/r1.key")
json.dump(h, open(sys.argv[2], "w"))' "$work/tls.json" "$work/stranger.json"

# Rank 0 and the good rank 1 leave --transport at auto: with --tls every link is TCP, one host
# or not, so that the stranger's certificate is checked even though it shares the host.
"$bin" "${any_link[@]}" --tls --hosts "$work/tls.json" --rank 0 >"$work/t0.json" 2>"$work/t0.log" &
pids+=($!); peers=("$!:$work/t0.log")
if "$bin" "${train[@]}" --tls --hosts "$work/stranger.json" --rank 1 >/dev/null 2>"$work/stranger.log"; then
  fail "a peer with another CA's certificate joined the TLS run"
fi
grep -q "peer 0 at 127.0.0.1:[0-9]*: TLS: " "$work/stranger.log" ||
  fail "the stranger's error does not name peer 0 and TLS: $(cat "$work/stranger.log")"
grep -q "refused a connection from 127.0.0.1:[0-9]*: TLS: .* during the TLS handshake" "$work/t0.log" ||
  fail "rank 0 did not log the stranger's refusal: $(cat "$work/t0.log")"
"$bin" "${any_link[@]}" --tls --hosts "$work/tls.json" --rank 1 >"$work/t1.json" 2>"$work/t1.log" &
pids+=($!); peers+=("$!:$work/t1.log")
expect_success "TLS run" "${peers[@]}"
py 'import json, sys
s = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])
assert s["peers"] == 2 and s["steps"] > 0, s
print("TLS run: 2 peers finished, %d steps" % s["steps"])' "$work/t0.json" || fail "TLS run: no summary"
grep -qF "peers must present a certificate the hosts file's CA signed (TLS 1.3)" "$work/t0.log" || fail "rank 0 does not say it uses TLS"
grep -qF "transport: TCP with peer 1" "$work/t0.log" || fail "--tls under auto did not keep peer 1 on TCP: $(head -5 "$work/t0.log")"

# A missing certificate is an error naming the file and the field, before any connection.
py 'import json, sys
h = json.load(open(sys.argv[1])); h["peers"][0]["cert_file"] = "pki/absent.pem"; json.dump(h, open(sys.argv[2], "w"))' \
  "$work/tls.json" "$work/absent.json"
expect_error "absent.json: peers[0].cert_file: $work/pki/absent.pem: cannot read" \
  "$bin" "${train[@]}" --tls --hosts "$work/absent.json" --rank 0
# TLS is a property of TCP links: shared memory with it is refused, naming the flag.
expect_error "--tls: TLS runs over TCP; --transport shm has none" \
  "$bin" "${any_link[@]}" --transport shm --tls --hosts "$work/tls.json" --rank 0
pids=()
finish "auth"
