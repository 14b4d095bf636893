#!/usr/bin/env bash
# The probe's own timing overhead per phase (issue 12's target: <= 50 us):
# `tlslab serve` on CPU 0, the timing_overhead example on CPU 1; each round
# runs the probe and then a minimal blocking client over the same loopback
# server, and the difference of medians is the probe's overhead.
# Usage: bench/probe-overhead.sh [ROUNDS]
set -euo pipefail
cd "$(dirname "$0")/.."
rounds="${1:-300}"
cargo build --release -q --bin tlslab
cargo build --release -q -p tlslab-probe --example timing_overhead
dir="$(mktemp -d)"
trap 'kill "$serve" 2>/dev/null || true; rm -rf "$dir"' EXIT
TMPDIR="$dir" taskset -c 0 target/release/tlslab serve --listen 127.0.0.1:0 --threads 1 \
  >"$dir/serve.out" 2>"$dir/serve.err" </dev/null &
serve=$!
for _ in $(seq 100); do
  grep -q '^tlslab serve: ca ' "$dir/serve.out" 2>/dev/null && grep -q '^tlslab serve: https ' "$dir/serve.out" && break
  sleep 0.1
done
url="$(sed -n 's/^tlslab serve: https \(.*\)/\1/p' "$dir/serve.out" | head -1)"
ca="$(sed -n 's/^tlslab serve: ca \(.*\)/\1/p' "$dir/serve.out" | head -1)"
[ -n "$url" ] && [ -n "$ca" ] || { echo "serve did not start:"; cat "$dir/serve.out" "$dir/serve.err"; exit 1; }
echo "serve $url (CPU 0); probe and minimal client on CPU 1; $(uptime)"
taskset -c 1 target/release/examples/timing_overhead "${url%/}/bytes/0" "$ca" "$rounds"
