#!/usr/bin/env bash
# The hostile-mix soak (issue 20, point 10): one `tlslab serve` and one
# `tlslab dispatch` (in front of a second serve) under idle sockets (plain
# TCP and TLS h2-then-silent), slowloris, garbage bytes, oversized records,
# half-open TCP and ClientHello floods, with a real `tlslab load` against
# each beside it. The test (tests/soak.rs) measures the quiet p99 first in
# the same run, then asserts 0 errors, p99 within 2x quiet, RSS flat (±10 %
# first-to-last quarter after warm-up) and bounded file descriptors, and
# prints each figure for BENCHMARKS.md.
# Usage: bench/soak.sh [SECONDS]   (default 600; .ci/run runs 120)
set -euo pipefail
cd "$(dirname "$0")/.."
TLSLAB_SOAK_SECS=${1:-600} cargo test --release --test soak -- --ignored --nocapture --test-threads=1
