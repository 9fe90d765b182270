#!/usr/bin/env bash
# `dpgossip launch` end to end: local peers started and their output prefixed by rank, a failing
# peer's exit code passed on, and every bad hosts file or flag failing with a message naming it.
# (train does not take --hosts/--rank yet; `--version` is a command every peer accepts.)
# Usage: test_launch.sh path/to/dpgossip
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

exe="$1"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export TMPDIR="$work/tmp"  # where launch --peers puts its hosts file
mkdir -p "$TMPDIR"

# --peers N: every peer runs, each stdout line is prefixed with its rank, the temp folder goes.
out=$("$exe" launch --peers 3 -- --version 2>"$work/err") || fail "launch --peers 3 -- --version: exit $?"
for r in 0 1 2; do
  grep -qx "\[$r\] dpgossip 0.1.0" <<<"$out" || fail "no '[$r] dpgossip 0.1.0' in: $out"
done
[[ $(wc -l <<<"$out") == 3 ]] || fail "expected 3 lines, got: $out"
[[ -z $(ls -A "$TMPDIR") ]] || fail "launch --peers left files behind in TMPDIR: $(ls -A "$TMPDIR")"

# A hosts file with one local and one remote peer: only the local one starts here.
cat >"$work/mixed.json" <<'JSON'
{"peers": [{"rank": 0, "host": "127.0.0.1", "port": 29500},
           {"rank": 1, "host": "192.0.2.1", "port": 29500}]}
JSON
out=$("$exe" launch --hosts "$work/mixed.json" -- --version 2>"$work/err") ||
  fail "launch --hosts mixed.json: exit $?"
[[ $out == "[0] dpgossip 0.1.0" ]] || fail "mixed hosts: want only rank 0, got: $out"
grep -q "starting 1 of 2 peers here" "$work/err" || fail "no note about remote peers: $(cat "$work/err")"

# A failing peer: its exit code comes back, its stderr is prefixed, the failure is named.
rc=0
"$exe" launch --peers 2 --grace-s 1 -- privacy >/dev/null 2>"$work/err" || rc=$?
[[ $rc != 0 ]] || fail "launch -- privacy (which rejects --rank) succeeded"
grep -q "^\[[01]\] " "$work/err" || fail "peer stderr not prefixed: $(cat "$work/err")"
grep -Eq "rank [01] failed: exited with code $rc" "$work/err" ||
  fail "no 'rank N failed: exited with code $rc': $(cat "$work/err")"

# Bad hosts files: the message names the file (and the JSON path).
expect_error "$work/missing.json" "$exe" launch --hosts "$work/missing.json" -- --version
echo '{"peers": [' >"$work/broken.json"
expect_error "$work/broken.json" "$exe" launch --hosts "$work/broken.json" -- --version
echo '{"peers": [{"rank": 0, "host": "127.0.0.1"}]}' >"$work/noport.json"
expect_error "$work/noport.json: peers[0].port: missing" "$exe" launch --hosts "$work/noport.json" -- --version
echo '{"peers": [{"rank": 0, "host": "127.0.0.1", "port": 1}, {"rank": 0, "host": "127.0.0.1", "port": 2}]}' \
  >"$work/dup.json"
expect_error "duplicate rank 0 (peers[0] and peers[1])" "$exe" launch --hosts "$work/dup.json" -- --version
echo '{"peers": [{"rank": 0, "host": "192.0.2.1", "port": 1}]}' >"$work/remote.json"
expect_error "$work/remote.json: no peer is on this machine" "$exe" launch --hosts "$work/remote.json" -- --version

# Bad flags.
expect_error "exactly one of --hosts FILE and --peers N" "$exe" launch --hosts "$work/mixed.json" --peers 2 -- --version
expect_error "exactly one of --hosts FILE and --peers N" "$exe" launch -- --version
expect_error "no command after --" "$exe" launch --peers 2 --
expect_error "no command after --" "$exe" launch --peers 2
expect_error "--peers must be in" "$exe" launch --peers 0 -- --version
expect_error "--grace-s" "$exe" launch --peers 1 --grace-s -1 -- --version
expect_error "--rank" "$exe" launch --peers 2 -- train --rank 1
expect_error "drop --hosts" "$exe" launch --peers 2 -- train --hosts "$work/mixed.json"

finish "launch"
