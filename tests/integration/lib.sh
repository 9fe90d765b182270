# Shared by the integration tests: source it after `set -euo pipefail`.

# Exits 77 (meson's skip) when Debian's Fashion-MNIST is not installed.
require_fmnist() {
  local fmnist=/usr/share/datasets/fashion-mnist
  [ -f "$fmnist/train-images-idx3-ubyte.gz" ] || { echo "SKIP: no $fmnist"; exit 77; }
}

py() { /usr/bin/python3 -c "$@"; }

# write_local_hosts N FILE: a hosts file of N peers on 127.0.0.1, each on a port that was free.
write_local_hosts() {
  py '
import json, socket, sys
socks = [socket.socket() for _ in range(int(sys.argv[1]))]
for s in socks: s.bind(("127.0.0.1", 0))
json.dump({"peers": [{"rank": r, "host": "127.0.0.1", "port": s.getsockname()[1]}
                     for r, s in enumerate(socks)]}, open(sys.argv[2], "w"))
' "$1" "$2"
}

# fmnist_work BIN: skips without Fashion-MNIST, else makes $work (removed on exit) and prepares
# the data into $work/data with BIN.
fmnist_work() {
  require_fmnist
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  "$1" prepare --out "$work/data" >/dev/null
}

# check_outputs FILE...: every metrics and summary field the files hold has its row in
# docs/PRIVACY.md's table of fields (tools/check_outputs.py); a missing one fails the test.
check_outputs() {
  /usr/bin/python3 "$(dirname "${BASH_SOURCE[0]}")/../../tools/check_outputs.py" "$@" ||
    fail "a run wrote a field docs/PRIVACY.md does not list"
}

# Checks that report and go on: fail counts, finish ends the script with the verdict.
failures=0
fail() {
  echo "FAIL: $*" >&2
  failures=$((failures + 1))
}
# finish NAME: exit 1 when a check failed, else say that NAME passed.
finish() {
  if ((failures > 0)); then
    echo "$1: $failures check(s) failed" >&2
    exit 1
  fi
  echo "$1: all checks passed"
}
# expect_error WANT CMD...: CMD must exit non-zero with WANT (a fixed string) in its stderr.
expect_error() {
  local want="$1" err rc=0
  shift
  err=$("$@" 2>&1 >/dev/null) || rc=$?
  if [[ $rc == 0 ]]; then
    fail "$* succeeded; want an error with '$want'"
  elif ! grep -qF -- "$want" <<<"$err"; then
    fail "$*: error does not mention '$want': $err"
  fi
}
# peer_work: makes $work and an empty pids[]; on exit every process in pids[] is killed (by its
# pid) and $work is removed.
peer_work() {
  work=$(mktemp -d)
  pids=()
  trap 'for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done; rm -rf "$work"' EXIT
}
# Waits at most $1 seconds for the given ranks; fails if one is still running or exited 0.
expect_exit() {
  local limit=$1; shift
  local start=$SECONDS
  for r in "$@"; do
    while kill -0 "${pids[$r]}" 2>/dev/null; do
      if (( SECONDS - start > limit )); then echo "rank $r still running after $limit s"; exit 1; fi
      sleep 0.1
    done
    set +e; wait "${pids[$r]}"; local rc=$?; set -e
    [ $rc -ne 0 ] || { echo "rank $r exited 0"; exit 1; }
  done
}
