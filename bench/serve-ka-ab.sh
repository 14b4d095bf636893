#!/usr/bin/env bash
# Server CPU per keep-alive request of two tlslab builds, A/B alternating.
#
#   bench/serve-ka-ab.sh BEFORE AFTER [PAIRS] [SECONDS]
#
# BEFORE and AFTER are tlslab binaries. Each pair runs both servers in turn
# (AB, then BA in the next pair, so neither always goes first), each pinned
# to CPU 0 with one worker, driven by AFTER's `tlslab load` pinned to CPU 1:
# 50 keep-alive TLS 1.3 connections, GET /4k.bin (4 KiB), SECONDS long.
# Server CPU is utime+stime of the server process (/proc/PID/stat) over the
# load run; requests are the load's succeeded count. Prints one line per run and
# the median per binary. Every address is 127.0.0.1.
set -euo pipefail
[ $# -ge 2 ] || { echo "usage: $0 BEFORE AFTER [PAIRS] [SECONDS]" >&2; exit 2; }
A=$1 B=$2 PAIRS=${3:-5} SECS=${4:-5}
for t in "$A" "$B"; do [ -x "$t" ] || { echo "$0: $t is not an executable" >&2; exit 2; }; done
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
head -c 4096 /dev/zero | tr '\0' 'x' > "$dir/4k.bin"
tck=$(getconf CLK_TCK)

cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }

run() { # binary label
  local bin=$1 label=$2
  taskset -c 0 "$bin" serve --listen 127.0.0.1:0 --root "$dir" --threads 1 \
    --tls 1.2,1.3 --tickets on >"$dir/serve.out" 2>"$dir/serve.err" &
  local pid=$!
  local url=""
  for _ in $(seq 100); do
    url=$(sed -n 's/^tlslab serve: https \(https:[^ ]*\).*/\1/p' "$dir/serve.out" 2>/dev/null || true)
    [ -n "$url" ] && break
    sleep 0.05
  done
  [ -n "$url" ] || { echo "$0: $label did not start: $(cat "$dir/serve.err")" >&2; kill "$pid"; exit 1; }
  local c0; c0=$(cpu_ticks "$pid")
  taskset -c 1 "$B" load "$url/4k.bin" --insecure --threads 1 --no-progress -c 50 \
    --tls 1.3 --requests-per-conn 0 -d "${SECS}s" --json "$dir/load.json" >/dev/null 2>&1
  local c1; c1=$(cpu_ticks "$pid")
  kill -TERM "$pid"; wait "$pid" || true
  local ok; ok=$(python3 -c "import json,sys; j=json.load(open(sys.argv[1])); print(j['requests']['succeeded'])" "$dir/load.json")
  python3 -c "import sys; c=(int(sys.argv[2])-int(sys.argv[1]))/int(sys.argv[3]); n=int(sys.argv[4]); print(f'{sys.argv[5]} {n} requests, server CPU {c:.2f} s, {c/n*1e6:.2f} us/request')" \
    "$c0" "$c1" "$tck" "$ok" "$label" | tee -a "$dir/results"
}

for i in $(seq "$PAIRS"); do
  if [ $((i % 2)) = 1 ]; then run "$A" before; run "$B" after; else run "$B" after; run "$A" before; fi
done
python3 - "$dir/results" <<'EOF'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
med = {}
for label in ("before", "after"):
    us = [float(r[-2]) for r in rows if r[0] == label]
    med[label] = statistics.median(us)
    print(f"{label}: median {med[label]:.2f} us/request over {len(us)} runs ({', '.join(f'{u:.2f}' for u in us)})")
print(f"after/before: {med['after'] / med['before']:.3f}")
EOF
