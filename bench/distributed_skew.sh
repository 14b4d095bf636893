#!/usr/bin/env bash
# Start skew of distributed load agents on one host: ROUNDS times, three
# `tlslab load --shard I/3 --start-at T --out DIR` agents against one
# `tlslab serve`, then `tlslab merge`; prints each round's
# distributed.start_skew_ms (latest minus earliest agent window start, ms)
# and the median. Server pinned to CPU 0, agents to CPU 1 (AGENT_CPUS=0,1
# lets them use both).
#   bench/distributed_skew.sh [ROUNDS] [TLSLAB]
set -euo pipefail
rounds="${1:-7}"
bin="${2:-target/release/tlslab}"
agent_cpus="${AGENT_CPUS:-1}"
work="$(mktemp -d)"
trap 'kill "$serve_pid" 2>/dev/null || true; rm -rf "$work"' EXIT
taskset -c 0 "$bin" serve --listen 127.0.0.1:0 >"$work/serve.out" 2>&1 &
serve_pid=$!
for _ in $(seq 100); do grep -q '^tlslab serve: ca ' "$work/serve.out" && break; sleep 0.1; done
url="$(sed -n 's/^tlslab serve: https //p' "$work/serve.out")/bytes/1024"
ca="$(sed -n 's/^tlslab serve: ca //p' "$work/serve.out")"
skews=()
for r in $(seq "$rounds"); do
  at="$(date -u -d '+2 seconds' +%Y-%m-%dT%H:%M:%S.%3NZ)"
  for i in 1 2 3; do
    taskset -c "$agent_cpus" "$bin" load "$url" --cacert "$ca" -c 3 -n 150 --threads 1 --reuse 50 \
      --shard "$i/3" --start-at "$at" --out "$work/r$r/agent-$i" --no-progress >/dev/null 2>&1 &
  done
  wait $(jobs -p | grep -v "^$serve_pid$") 2>/dev/null || true
  "$bin" merge "$work/r$r"/agent-* --json "$work/r$r/merged.json" >/dev/null
  s="$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["distributed"]["start_skew_ms"])' "$work/r$r/merged.json")"
  echo "round $r: start skew $s ms"
  skews+=("$s")
done
printf '%s\n' "${skews[@]}" | sort -n | awk '{a[NR]=$1} END {print "median start skew over " NR " rounds: " a[int((NR+1)/2)] " ms; max " a[NR] " ms"}'
