#!/usr/bin/env bash
# The hostile-mix soak (issue 20, point 10; QUIC added by issue 29): one
# `tlslab serve` (HTTPS and HTTP/3, `--quic-max-connections 64`) and one
# `tlslab dispatch` (in front of a second serve) under idle sockets (plain
# TCP and TLS h2-then-silent), slowloris, garbage bytes, oversized records,
# half-open TCP and ClientHello floods; serve's QUIC port also under
# half-open handshakes (valid Initials, 200/s), junk datagrams (500/s) and
# PING-only clients (10 new a second), each a `tlslab load --h3 --flood`
# bounded by the soak's length. Beside it, real `tlslab load`s: HTTP/1.1
# against each engine, HTTP/2 and HTTP/3 against serve. The test
# (tests/soak.rs) measures the quiet p99s first in the same run, then
# asserts 0 errors, p99 within 2x quiet, RSS flat (±10 %, medians of first-to-last
# quarter after warm-up), bounded file descriptors, the QUIC limit held and
# reached, and each flood's own real HTTP/3 client served without an
# error, and prints each figure for BENCHMARKS.md.
# Usage: bench/soak.sh [SECONDS]   (default 600; .ci/run runs 120)
set -euo pipefail
cd "$(dirname "$0")/.."
TLSLAB_SOAK_SECS=${1:-600} cargo test --release --test soak -- --ignored --nocapture --test-threads=1
