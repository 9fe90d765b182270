#!/usr/bin/env bash
# Installs what dpgossip needs from Debian 12's archive (only what is missing), then configures
# and builds it in ./build. Run as root, or it uses sudo. Both README quick-start commands start here.
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(g++ meson ninja-build pkg-config cmake libboost-dev nlohmann-json3-dev doctest-dev
          libcli11-dev libfftw3-dev libopenblas-dev liblapacke-dev libdnnl-dev zlib1g-dev
          libssl-dev openssl dataset-fashion-mnist python3
          libgloo-dev openmpi-bin libopenmpi-dev python3-matplotlib python3-prometheus-client chromium
          clang libclang-rt-14-dev)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  sudo_cmd=()
  [ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
  echo "setup: installing ${missing[*]}"
  "${sudo_cmd[@]}" apt-get update -q
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -q "${missing[@]}"
fi

if [ -f build/build.ninja ]; then
  meson setup --reconfigure build >/dev/null
else
  meson setup build
fi
ninja -C build
