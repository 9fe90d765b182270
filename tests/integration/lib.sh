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
