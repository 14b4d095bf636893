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
# load run; requests are the load's succeeded count. Prints one line per run,
# the median per binary and the median of the per-pair ratios (the figure to
# quote on a shared machine). With SIMUL=1 the two servers of a pair run at
# the same time instead, both on CPU 0, each driven by its own load on CPU 1,
# so that the machine's other work hits both alike. With K=1 every
# connection carries one request, a full handshake (no reuse): server CPU
# per handshake instead. PROTO picks the protocol: h1 (the default,
# HTTP/1.1), h2 (`--h2 -m 10`, h2load's -m) or h3 (HTTP/3 over QUIC, `--h3
# -m 10`; the server also gets `--h3`). With LOG=1 each server writes an
# access log (`--access-log`, in the temporary directory), as
# bench/peers.sh's servers do. Every address is 127.0.0.1.
set -euo pipefail
[ $# -ge 2 ] || { echo "usage: $0 BEFORE AFTER [PAIRS] [SECONDS]" >&2; exit 2; }
A=$1 B=$2 PAIRS=${3:-5} SECS=${4:-5}
case "${PROTO:=h1}" in
  h1) proto=() srvproto=() ;;
  # -m 10 streams on a kept-alive connection; with K=1 (one request a
  # connection: the handshake) one stream, since -m may not exceed K.
  h2) proto=(--h2 -m "$([ "${K:-0}" = 1 ] && echo 1 || echo 10)") srvproto=() ;;
  h3) proto=(--h3 -m "$([ "${K:-0}" = 1 ] && echo 1 || echo 10)") srvproto=(--h3) ;;
  *) echo "$0: PROTO=$PROTO is not a protocol; use h1, h2 or h3" >&2; exit 2 ;;
esac
for t in "$A" "$B"; do [ -x "$t" ] || { echo "$0: $t is not an executable" >&2; exit 2; }; done
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
head -c 4096 /dev/zero | tr '\0' 'x' > "$dir/4k.bin"
tck=$(getconf CLK_TCK)

cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }

start() { # binary label: starts a server, writes its pid and URL to $dir/label.*
  local bin=$1 label=$2 log=()
  [ "${LOG:-0}" = 1 ] && log=(--access-log "$dir/$label.access.log")
  taskset -c 0 "$bin" serve --listen 127.0.0.1:0 --root "$dir" --threads 1 \
    --tls 1.2,1.3 --tickets on "${srvproto[@]}" "${log[@]}" </dev/null >"$dir/$label.out" 2>"$dir/$label.err" &
  echo $! >"$dir/$label.pid"
  local url=""
  for _ in $(seq 100); do
    url=$(sed -n 's/^tlslab serve: https \(https:[^ ]*\).*/\1/p' "$dir/$label.out" 2>/dev/null || true)
    [ -n "$url" ] && break
    sleep 0.05
  done
  [ -n "$url" ] || { echo "$0: $label did not start: $(cat "$dir/$label.err")" >&2; kill "$(cat "$dir/$label.pid")"; exit 1; }
  echo "$url" >"$dir/$label.url"
}

load() { # label: drives that server for SECS seconds
  taskset -c 1 "$B" load "$(cat "$dir/$1.url")/4k.bin" --insecure --threads 1 --no-progress -c 50 \
    --tls 1.3 "${proto[@]}" --requests-per-conn "${K:-0}" -d "${SECS}s" --json "$dir/$1.json" </dev/null >/dev/null 2>"$dir/$1.load.err" ||
    { echo "$0: the load against $1 failed: $(cat "$dir/$1.load.err")" >&2; return 1; }
}

report() { # label cpu-ticks-before cpu-ticks-after
  local ok; ok=$(python3 -c "import json,sys; j=json.load(open(sys.argv[1])); print(j['requests']['succeeded'])" "$dir/$1.json")
  python3 -c "import sys; c=(int(sys.argv[2])-int(sys.argv[1]))/int(sys.argv[3]); n=int(sys.argv[4]); print(f'{sys.argv[5]} {n} requests, server CPU {c:.2f} s, {c/n*1e6:.2f} us/request')" \
    "$2" "$3" "$tck" "$ok" "$1" | tee -a "$dir/results"
}

stop() { kill -TERM "$(cat "$dir/$1.pid")"; wait "$(cat "$dir/$1.pid")" || true; }

run() { # binary label: one server, then the next
  start "$1" "$2"
  local pid; pid=$(cat "$dir/$2.pid")
  local c0; c0=$(cpu_ticks "$pid")
  load "$2"
  local c1; c1=$(cpu_ticks "$pid")
  stop "$2"
  report "$2" "$c0" "$c1"
}

both() { # both servers at once, on the same CPU, each with its own load:
  # the machine's other work hits both alike (SIMUL=1)
  # Which one starts first alternates: the second started measured about
  # 1.5 % cheaper in A/A runs of one binary against itself.
  if [ "$1" = 1 ]; then start "$A" before; start "$B" after; else start "$B" after; start "$A" before; fi
  local pa pb; pa=$(cat "$dir/before.pid"); pb=$(cat "$dir/after.pid")
  local a0 b0 a1 b1; a0=$(cpu_ticks "$pa"); b0=$(cpu_ticks "$pb")
  load before & local l1=$!
  load after & local l2=$!
  wait "$l1" "$l2"
  a1=$(cpu_ticks "$pa"); b1=$(cpu_ticks "$pb")
  stop before; stop after
  report before "$a0" "$a1"; report after "$b0" "$b1"
}

for i in $(seq "$PAIRS"); do
  if [ "${SIMUL:-0}" = 1 ]; then both $((i % 2))
  elif [ $((i % 2)) = 1 ]; then run "$A" before; run "$B" after
  else run "$B" after; run "$A" before; fi
done
python3 - "$dir/results" <<'EOF'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
med = {}
for label in ("before", "after"):
    us = [float(r[-2]) for r in rows if r[0] == label]
    med[label] = statistics.median(us)
    print(f"{label}: median {med[label]:.2f} us/request over {len(us)} runs ({', '.join(f'{u:.2f}' for u in us)})")
print(f"after/before, ratio of the medians: {med['after'] / med['before']:.3f}")
# Each pair ran back to back, so the machine's other load hit both alike.
pairs = [rows[i:i + 2] for i in range(0, len(rows) - 1, 2)]
ratios = sorted(float(next(r for r in p if r[0] == "after")[-2]) /
                float(next(r for r in p if r[0] == "before")[-2]) for p in pairs)
print(f"after/before, median of the {len(ratios)} pair ratios: {statistics.median(ratios):.3f} "
      f"(range {ratios[0]:.3f}-{ratios[-1]:.3f})")
EOF
