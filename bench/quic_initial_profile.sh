#!/usr/bin/env bash
# Issue 33: where `serve --h3`'s CPU goes per shed or retried Initial. A
# perf profile (call graphs by DWARF unwinding, 1,999 Hz, SECONDS long) of
# the server under a flood of real ClientHellos that never continue, and an
# inferno flamegraph of it.
#
#   bench/quic_initial_profile.sh TLSLAB CELL OUT.svg [RATE] [SECONDS]
#
# CELL: refuse, retry or ignore (`--admission session
# --admission-fixed-limit 0 --quic-shed-with CELL`: every attempt's
# ClientHello read off its Initials, then shed), or quinn (`--quic-retry
# always`, no admission: quinn answers each attempt with a Retry, no
# ClientHello reader). The server (`serve --h3 --threads 1 --key-type
# ecdsa-p256 --tls 1.3 --tickets off`) runs pinned to CPU 0; `load --h3
# --flood valid --flood-rate RATE/s` (default 4,000; one real client at 1/s
# beside it) pinned to CPU 1, from 1 s before the profile to its end. Prints
# the server's shed/Retry counters and the ClientHello reader's time per
# datagram. Writes OUT.svg, and OUT.svg's perf data and folded stacks next
# to it (.perf, .folded; not for the repository). Needs perf (root, or
# kernel.perf_event_paranoid ≤ 1) and inferno (`cargo install inferno`).
# 127.0.0.1 only; the flood is bounded by its load's duration and
# --flood-max.
set -euo pipefail
[ $# -ge 3 ] || { echo "usage: $0 TLSLAB refuse|retry|ignore|quinn OUT.svg [RATE] [SECONDS]" >&2; exit 2; }
BIN=$1 CELL=$2 OUT=$3 RATE=${4:-4000} SECS=${5:-6}
[ -x "$BIN" ] || { echo "$0: $BIN is not an executable" >&2; exit 2; }
case $CELL in refuse | retry | ignore | quinn) ;; *) echo "$0: CELL is refuse, retry, ignore or quinn, not $CELL" >&2; exit 2 ;; esac
for t in taskset perf inferno-collapse-perf inferno-flamegraph curl; do
  command -v "$t" >/dev/null || { echo "$0: $t is missing (perf: apt-get install linux-perf; inferno: cargo install inferno)" >&2; exit 2; }
done
dir=$(mktemp -d)
pid=""
trap '[ -n "$pid" ] && kill -TERM "$pid" 2>/dev/null; rm -rf "$dir"' EXIT
# shellcheck source=bench/serve-lib.sh
. "$(dirname "$0")/serve-lib.sh"
base=(--threads 1 --key-type ecdsa-p256 --tls 1.3 --tickets off --h3)
case $CELL in
  quinn) serve_start "${base[@]}" --quic-retry always ;;
  *) serve_start "${base[@]}" --admission session --admission-fixed-limit 0 --quic-shed-with "$CELL" ;;
esac
taskset -c 1 "$BIN" load "$URL/bytes/100" --h3 --cacert "$CA" --threads 1 --no-progress \
  --warmup 1s -d "$((SECS + 1))s" -c 1 --rate 1 --timeout 1s --json "$dir/load.json" \
  --flood valid --flood-rate "$RATE/s" --flood-max "$((RATE * (SECS + 2)))" --confirm-flood \
  </dev/null >/dev/null 2>"$dir/load.err" &
lp=$!
sleep 1
data=${OUT%.svg}.perf
perf record -F 1999 --call-graph dwarf,32768 -o "$data" -p "$pid" -- sleep "$SECS" >/dev/null 2>&1
wait "$lp" || echo "$0: load exited non-zero: $(tail -1 "$dir/load.err")" >&2
curl -s "$METRICS" | grep -E '^tlslab_transport_(admission_shed_total|retries_total|hello_read_)' || true
kill -TERM "$pid"
wait "$pid" 2>/dev/null || true
pid=""
perf script -i "$data" 2>/dev/null | inferno-collapse-perf >"${OUT%.svg}.folded"
inferno-flamegraph --title "tlslab serve --h3, $CELL, $RATE ClientHellos/s" <"${OUT%.svg}.folded" >"$OUT"
echo "$OUT"
