#!/usr/bin/env bash
# Validates tlslab's crypto meter against microbenchmarks of the same
# aws-lc-rs primitives: the per-operation time the meter records inside a
# running `tlslab serve` (server pinned to CPU 0, `tlslab load` to CPU 1)
# against criterion's time for the same operation through the same rustls
# provider API, and `openssl speed` for orientation (a different library).
#
# Usage: bench/meter-validation.sh [RUNS]   (default 3 runs of 5 s)
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-3}
cargo build --release -q
bin=target/release/tlslab
tmp=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$tmp"' EXIT

metric() { # name op label file -> value
  awk -v n="$1" -v op="$2" -v l="$3" '$1 ~ "^"n"\\{" && index($1, "op=\""op"\"") && index($1, "label=\""l"\"") {print $2}' "$4"
}

echo "# in situ: tlslab serve's meter, TLS 1.3 full handshakes, ECDSA P-256, x25519"
for i in $(seq 1 "$runs"); do
  taskset -c 0 "$bin" serve --listen 127.0.0.1:0 --metrics 127.0.0.1:0 --threads 1 \
    --key-type ecdsa-p256 --groups x25519 >"$tmp/serve.out" 2>&1 &
  for _ in $(seq 50); do grep -q "tlslab serve: ca" "$tmp/serve.out" && break; sleep 0.1; done
  port=$(sed -n 's/^tlslab serve: https https:\/\/127.0.0.1:\([0-9]*\)$/\1/p' "$tmp/serve.out")
  murl=$(sed -n 's/^tlslab serve: metrics \(.*\)$/\1/p' "$tmp/serve.out")
  ca=$(sed -n 's/^tlslab serve: ca \(.*\)$/\1/p' "$tmp/serve.out")
  taskset -c 1 "$bin" load "https://localhost:$port/health" --cacert "$ca" --tls 1.3 \
    --group x25519 -c 8 -d 5s --threads 1 --no-progress >/dev/null
  curl -s "$murl" >"$tmp/m.txt"
  kill %1; wait %1 2>/dev/null || true
  for spec in "sign ecdsa_secp256r1_sha256" "kx_start_and_complete x25519"; do
    set -- $spec
    calls=$(metric tlslab_crypto_calls_total "$1" "$2" "$tmp/m.txt")
    secs=$(metric tlslab_crypto_seconds_total "$1" "$2" "$tmp/m.txt")
    if [ -n "$calls" ] && [ "$calls" != 0 ]; then
      awk -v o="$1" -v l="$2" -v c="$calls" -v s="$secs" -v r="$i" \
        'BEGIN {printf "run %s  %-22s %-24s %8d calls  %8.2f µs/op\n", r, o, l, c, s*1e6/c}'
    fi
  done
done

echo
echo "# criterion: the same primitives through the rustls provider API (unmetered)"
cargo bench -q -p tlslab-crypto --bench primitives -- \
  'sign/unmetered/ECDSA_NISTP256|kx_client_start_server_complete_client_complete/unmetered/x25519' \
  --warm-up-time 1 --measurement-time 3 2>/dev/null | grep -B1 -E "time:" | grep -v "^--" || true

echo
echo "# openssl speed (OpenSSL, not aws-lc: orientation only)"
taskset -c 0 openssl speed -seconds 3 ecdsap256 2>/dev/null | tail -2
taskset -c 0 openssl speed -seconds 3 ecdhx25519 2>/dev/null | tail -2
