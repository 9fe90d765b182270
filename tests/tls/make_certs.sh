#!/usr/bin/env bash
# make_certs.sh DIR NAME...: a throwaway certificate authority for tests, made with the openssl
# CLI: DIR/ca.pem (and its key DIR/ca.key), and for each NAME a P-256 key DIR/NAME.key with a
# certificate DIR/NAME.pem signed by that CA, valid for two days. Exits 77 (meson's skip) when
# the openssl program is missing.
set -euo pipefail
dir=$1
shift
command -v openssl >/dev/null || { echo "SKIP: no openssl program"; exit 77; }
mkdir -p "$dir"
cd "$dir"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout ca.key \
  -out ca.pem -days 2 -subj "/CN=dpgossip test CA $RANDOM" 2>/dev/null
cat >leaf.ext <<'EXT'
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature
extendedKeyUsage = serverAuth, clientAuth
EXT
for name in "$@"; do
  openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout "$name.key" \
    -out "$name.csr" -subj "/CN=$name" 2>/dev/null
  openssl x509 -req -in "$name.csr" -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 \
    -extfile leaf.ext -out "$name.pem" 2>/dev/null
  rm -f "$name.csr"
done
rm -f leaf.ext ca.srl
